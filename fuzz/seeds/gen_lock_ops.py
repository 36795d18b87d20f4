#!/usr/bin/env python3
"""Regenerates fuzz/seeds/lock_ops/: hand-written lock_ops programs.

Input format (see fuzz_targets/lock_ops.rs): byte 0 = lock kind, byte 1 =
threads - 2, then byte i is an operation of thread i % n: low 5 bits pick the
operation valid in the thread's state, high 3 bits are its parameter.
"""
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lock_ops")
NAMES = ["cna", "queued", "cst", "cst_rw", "parking_lot", "parking_lot_rw"]


def op(code, p=0):
    return bytes([(p << 5) | code])


def interleave(progs, idle):
    out = b""
    for i in range(max(len(p) for p in progs)):
        for p in progs:
            out += p[i:i + 1] if i < len(p) else idle
    return out


# Mutex. Holding nothing: 0 lock, 1 try_lock, 2 try_lock_for, 3 notify, 4-5 pause.
# Holding: 0/7 update, 1 unlock, 2 unlock_fair, 3 bump, 4 wait, 5 migrate, 6 hold.
m_basic = op(0) + op(0) + op(1)
m_fair = op(1) + op(0) + op(2)
m_bump = op(0) + op(0) + op(3) + op(0) + op(1)
m_wait = op(0) + op(4, 3) + op(0) + op(1)
m_notify = op(3, 1) + op(3, 0) + op(0) + op(5) + op(0) + op(1)
m_timed = op(2, 7) + op(0) + op(1) + op(2, 1) + op(0) + op(1)
m_sleep = op(0) + op(6, 3) + op(0) + op(1)
MUTEX = {
    "basic": [m_basic * 4] * 2,
    "mix": [m_basic * 2 + m_fair, m_bump + m_timed, m_wait + m_notify],
    "condvar": [m_wait * 3, m_notify * 3, m_sleep + m_wait],
    "four": [m_basic + m_sleep, m_bump, m_fair * 2, m_timed],
}

# RwLock. Nothing: 0 write, 1 read, 2 upgradable, 3-5 try_*, 6-8 try_*_for, 9 pause.
# Exclusive: 0/7 update, 1 unlock, 2 unlock_fair, 3 bump, 4 downgrade,
# 5 downgrade_to_upgradable, 6 migrate. Shared: 0 read, 1 unlock, 2 unlock_fair,
# 3 bump, 4 migrate, 5 pause. Upgradable: 0 read, 1 unlock, 2 unlock_fair,
# 3 bump, 4 upgrade, 5 try_upgrade, 6 try_upgrade_for, 7 downgrade, 8 migrate.
w_basic = op(0) + op(0) + op(1)
r_basic = op(1) + op(0) + op(5, 2) + op(1)
u_cycle = op(2) + op(0) + op(4) + op(0) + op(4) + op(0) + op(1)
w_down = op(0) + op(0) + op(5) + op(0) + op(7) + op(0) + op(1)
t_ops = op(6, 3) + op(0) + op(1) + op(7, 3) + op(0) + op(1) + op(8, 3) + op(6, 2) + op(0) + op(1)
f_ops = op(0) + op(3) + op(0) + op(2) + op(1) + op(3) + op(2) + op(2) + op(3) + op(2)
RWLOCK = {
    "basic": [w_basic * 3, r_basic * 3],
    "upgrade": [u_cycle * 2, r_basic * 3, w_down],
    "timed": [t_ops, w_basic + r_basic, u_cycle],
    "fair": [f_ops, f_ops, r_basic * 2, w_down],
}

for kind, programs in [(0, MUTEX), (1, MUTEX), (2, MUTEX), (4, MUTEX), (3, RWLOCK), (5, RWLOCK)]:
    idle = op(4) if programs is MUTEX else op(9)
    for name, progs in programs.items():
        data = bytes([kind, len(progs) - 2]) + interleave(progs, idle)
        with open(os.path.join(HERE, f"{NAMES[kind]}-{name}"), "wb") as f:
            f.write(data)
