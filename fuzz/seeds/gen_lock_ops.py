#!/usr/bin/env python3
"""Regenerates fuzz/seeds/lock_ops/: hand-written lock_ops programs.

Input format (see fuzz_targets/lock_ops.rs): byte 0 = lock (index among the
lock_api locks of the registry), byte 1 = threads - 2, then byte i is an
operation of thread i % n: low 5 bits pick the operation valid in the thread's
state, high 3 bits are its parameter.

The locks and their order are read from the registry
(crates/lock-registry/src/lib.rs, `for_each_lock!`), so run this after adding a
lock: it writes seeds for every lock and rewrites byte 0 of the committed
regressions (regressions/lock_ops/<lock name>-*) to their lock's index.
"""
import os
import re

FUZZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(FUZZ, "seeds", "lock_ops")
REGISTRY = os.path.join(FUZZ, "..", "crates", "lock-registry", "src", "lib.rs")
LINE = re.compile(r'^\s*\w+:\s*"([^"]+)"\s+in\s+"[^"]+",\s*(\w+)\(', re.M)
LOCKS = [(n, s) for n, s in LINE.findall(open(REGISTRY).read()) if not s.startswith("data_")]
assert LOCKS, "no lock found in the registry"


def op(code, p=0):
    return bytes([(p << 5) | code])


def interleave(progs, idle):
    out = b""
    for i in range(max(len(p) for p in progs)):
        for p in progs:
            out += p[i:i + 1] if i < len(p) else idle
    return out


# Mutex. Holding nothing: 0 lock, 1 try_lock, 2 try_lock_for, 3 notify, 4 pause,
# 5 combine (an exclusive section through `combine` on combining locks, else a pause).
# Holding: 0/7 update, 1 unlock, 2 unlock_fair, 3 bump, 4 wait, 5 migrate, 6 hold.
m_basic = op(0) + op(0) + op(1)
m_fair = op(1) + op(0) + op(2)
m_bump = op(0) + op(0) + op(3) + op(0) + op(1)
m_wait = op(0) + op(4, 3) + op(0) + op(1)
m_notify = op(3, 1) + op(3, 0) + op(0) + op(5) + op(0) + op(1)
m_timed = op(2, 7) + op(0) + op(1) + op(2, 1) + op(0) + op(1)
m_sleep = op(0) + op(6, 3) + op(0) + op(1)
m_combine = op(5) + op(5, 3) + op(5, 2) + op(0) + op(0) + op(1)
MUTEX = {
    "basic": [m_basic * 4] * 2,
    "mix": [m_basic * 2 + m_fair, m_bump + m_timed, m_wait + m_notify],
    "condvar": [m_wait * 3, m_notify * 3, m_sleep + m_wait],
    "four": [m_basic + m_sleep, m_bump, m_fair * 2, m_timed],
    "combine": [m_combine * 3, m_combine + m_basic, m_combine * 2 + m_timed, m_sleep + m_combine],
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

for f in os.listdir(HERE):
    os.remove(os.path.join(HERE, f))
for kind, (lock, shape) in enumerate(LOCKS):
    programs = RWLOCK if shape == "rwlock" else MUTEX
    idle = op(4) if programs is MUTEX else op(9)
    for name, progs in programs.items():
        data = bytes([kind, len(progs) - 2]) + interleave(progs, idle)
        with open(os.path.join(HERE, f"{lock}-{name}"), "wb") as f:
            f.write(data)

REGRESSIONS = os.path.join(FUZZ, "regressions", "lock_ops")
by_length = sorted(enumerate(LOCKS), key=lambda e: -len(e[1][0]))
for f in sorted(os.listdir(REGRESSIONS)):
    kind = next(k for k, (lock, _) in by_length if f.startswith(lock + "-"))
    path = os.path.join(REGRESSIONS, f)
    data = bytearray(open(path, "rb").read())
    data[0] = kind
    open(path, "wb").write(bytes(data))
