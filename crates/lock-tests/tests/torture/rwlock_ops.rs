//! Torture operations for reader-writer locks (`lock_api::RawRwLock` and its
//! optional traits): readers, writers, upgradable readers, transitions.

use std::mem;
use std::thread;
use std::time::{Duration, Instant};

use lock_api::{
    RawRwLock, RawRwLockDowngrade, RawRwLockFair, RawRwLockTimed, RawRwLockUpgrade,
    RawRwLockUpgradeDowngrade, RawRwLockUpgradeTimed, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};

use crate::alloc::count_this_thread;
use crate::engine::{Op, check_total, expect_torture_panic};
use crate::mutex_ops::CHURN_MAX_HELPERS;
use lock_tests::model::{Shared, TorturePanic, Worker};

/// The torture lock of a reader-writer target.
pub type Rw<R> = RwLock<R, Shared>;

/// Exclusive `write` + update.
pub fn write<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    l.write().exclusive_section(w, "write");
}

/// Shared `read`, sometimes reading twice with a yield between (a long reader).
pub fn read<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    let g = l.read();
    g.enter_shared(w, "read");
    g.read(w, "read");
    if w.chance(8) {
        thread::yield_now();
        g.read(w, "read (again)");
    }
    g.exit_shared(w, "read");
}

/// `try_write` / `try_read`, retried with yields up to 64 times.
pub fn try_write_or_read<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    let exclusive = w.chance(2);
    for _ in 0..64 {
        if exclusive {
            if let Some(g) = l.try_write() {
                g.exclusive_section(w, "try_write");
                return;
            }
        } else if let Some(g) = l.try_read() {
            g.shared_section(w, "try_read");
            return;
        }
        thread::yield_now();
    }
}

/// A writer or a reader sleeping up to 2 ms inside its critical section.
pub fn sleep_in_cs<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    let pause = w.micros(2000);
    if w.chance(2) {
        let g = l.write();
        g.enter_exclusive(w, "write sleep_in_cs");
        thread::sleep(pause);
        g.update(w, "write sleep_in_cs");
        g.exit_exclusive(w, "write sleep_in_cs");
    } else {
        let g = l.read();
        g.enter_shared(w, "read sleep_in_cs");
        thread::sleep(pause);
        g.read(w, "read sleep_in_cs");
        g.exit_shared(w, "read sleep_in_cs");
    }
}

/// Acquires on one virtual node and releases on another (a reader migrating
/// between per-node reader counters).
pub fn migrate_in_cs<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    if w.chance(2) {
        let g = l.read();
        let home = w.migrate();
        g.shared_section(w, "read migrate_in_cs");
        drop(g);
        w.return_to(home);
    } else {
        let g = l.write();
        let home = w.migrate();
        g.exclusive_section(w, "write migrate_in_cs");
        drop(g);
        w.return_to(home);
    }
}

/// Panics inside a write or a read section; the guard releases on unwind.
pub fn panic_in_cs<R: RawRwLock>(l: &Rw<R>, w: &mut Worker<'_>) {
    let exclusive = w.chance(2);
    expect_torture_panic(w, "rw panic_in_cs", |w| {
        if exclusive {
            let g = l.write();
            g.exclusive_section(w, "write panic_in_cs");
            std::panic::panic_any(TorturePanic);
        } else {
            let g = l.read();
            g.shared_section(w, "read panic_in_cs");
            std::panic::panic_any(TorturePanic);
        }
    });
}

/// Fair unlocks and bumps in both modes (`RawRwLockFair`).
pub fn fair<R: RawRwLockFair>(l: &Rw<R>, w: &mut Worker<'_>) {
    match w.next_u64() % 4 {
        0 => {
            let g = l.write();
            g.exclusive_section(w, "write unlock_fair");
            RwLockWriteGuard::unlock_fair(g);
        }
        1 => {
            let g = l.read();
            g.shared_section(w, "read unlock_fair");
            RwLockReadGuard::unlock_fair(g);
        }
        2 => {
            let mut g = l.write();
            g.exclusive_section(w, "write bump (before)");
            RwLockWriteGuard::bump(&mut g);
            g.exclusive_section(w, "write bump (after)");
        }
        _ => {
            let mut g = l.read();
            g.shared_section(w, "read bump (before)");
            RwLockReadGuard::bump(&mut g);
            g.shared_section(w, "read bump (after)");
        }
    }
}

/// `try_write_for` / `try_read_for` with a 0-300 us timeout (`RawRwLockTimed`).
pub fn timed<R: RawRwLockTimed<Duration = Duration>>(l: &Rw<R>, w: &mut Worker<'_>) {
    let timeout = w.micros(300);
    let start = Instant::now();
    if w.chance(2) {
        match l.try_write_for(timeout) {
            Some(g) => g.exclusive_section(w, "try_write_for"),
            None => w.check_timeout("try_write_for", start, timeout),
        }
    } else {
        match l.try_read_for(timeout) {
            Some(g) => g.shared_section(w, "try_read_for"),
            None => w.check_timeout("try_read_for", start, timeout),
        }
    }
}

/// Write, then `downgrade` to a read without letting a writer in (`RawRwLockDowngrade`).
pub fn downgrade<R: RawRwLockDowngrade>(l: &Rw<R>, w: &mut Worker<'_>) {
    let g = l.write();
    g.exclusive_section(w, "downgrade (write)");
    let r = RwLockWriteGuard::downgrade(g);
    r.shared_section(w, "downgrade (read)");
}

/// Upgradable read beside readers, `upgrade`, write, back down
/// (`RawRwLockUpgrade` + `RawRwLockDowngrade`).
pub fn upgrade<R: RawRwLockUpgrade + RawRwLockDowngrade>(l: &Rw<R>, w: &mut Worker<'_>) {
    let u = l.upgradable_read();
    u.enter_upgradable(w, "upgradable");
    u.check_consistent(w, "upgradable");
    if w.chance(8) {
        thread::yield_now();
    }
    let g = RwLockUpgradableReadGuard::upgrade(u);
    g.exit_upgradable(w, "upgrade");
    g.exclusive_section(w, "upgrade");
    let r = RwLockWriteGuard::downgrade(g);
    r.shared_section(w, "upgrade (downgraded)");
}

/// `try_upgrade`, or an upgradable read released as is.
pub fn try_upgrade<R: RawRwLockUpgrade>(l: &Rw<R>, w: &mut Worker<'_>) {
    let Some(u) = l.try_upgradable_read() else {
        return;
    };
    u.enter_upgradable(w, "try_upgrade");
    match RwLockUpgradableReadGuard::try_upgrade(u) {
        Ok(g) => {
            g.exit_upgradable(w, "try_upgrade");
            g.exclusive_section(w, "try_upgrade");
        }
        Err(u) => u.exit_upgradable(w, "try_upgrade (failed)"),
    }
}

/// Write, `downgrade_to_upgradable`, then downgrade the upgradable read to a
/// shared one (`RawRwLockUpgradeDowngrade`).
pub fn downgrade_to_upgradable<R: RawRwLockUpgradeDowngrade>(l: &Rw<R>, w: &mut Worker<'_>) {
    let g = l.write();
    g.exclusive_section(w, "downgrade_to_upgradable (write)");
    let u = RwLockWriteGuard::downgrade_to_upgradable(g);
    u.enter_upgradable(w, "downgrade_to_upgradable");
    u.check_consistent(w, "downgrade_to_upgradable");
    u.exit_upgradable(w, "downgrade_to_upgradable");
    let r = RwLockUpgradableReadGuard::downgrade(u);
    r.shared_section(w, "downgrade_to_upgradable (read)");
}

/// `try_upgradable_read_for` and `try_upgrade_for` with 0-300 us timeouts
/// (`RawRwLockUpgradeTimed`).
pub fn upgrade_timed<R: RawRwLockUpgradeTimed<Duration = Duration>>(l: &Rw<R>, w: &mut Worker<'_>) {
    let timeout = w.micros(300);
    let start = Instant::now();
    let Some(u) = l.try_upgradable_read_for(timeout) else {
        w.check_timeout("try_upgradable_read_for", start, timeout);
        return;
    };
    u.enter_upgradable(w, "try_upgradable_read_for");
    let timeout = w.micros(300);
    let start = Instant::now();
    match RwLockUpgradableReadGuard::try_upgrade_for(u, timeout) {
        Ok(g) => {
            g.exit_upgradable(w, "try_upgrade_for");
            g.exclusive_section(w, "try_upgrade_for");
        }
        Err(u) => {
            w.check_timeout("try_upgrade_for", start, timeout);
            u.check_consistent(w, "try_upgrade_for (failed)");
            u.exit_upgradable(w, "try_upgrade_for (failed)");
        }
    }
}

/// Rounds each churn helper thread does on its fresh lock.
const CHURN_ROUNDS: u64 = 40;

/// Creates a fresh reader-writer lock, contends it from 2-4 helper threads on
/// different virtual nodes (writers and readers, so per-node reader state is
/// allocated), checks it, sometimes forgets a read or write guard, drops it.
pub fn churn<R: RawRwLock + Send + Sync + 'static>(_: &Rw<R>, w: &mut Worker<'_>) {
    let l = Rw::<R>::new(Shared::new());
    let helpers = 2 + (w.next_u64() as usize % (CHURN_MAX_HELPERS - 1));
    let checker = w.checker();
    thread::scope(|s| {
        for k in 0..helpers {
            let (l, seed, id) = (&l, w.next_u64(), w.id * 1000 + k + 1);
            s.spawn(move || {
                count_this_thread(true);
                let mut hw = Worker::new(id, seed, checker);
                for _ in 0..CHURN_ROUNDS {
                    l.write().exclusive_section(&mut hw, "rw churn");
                    l.read().shared_section(&mut hw, "rw churn");
                }
                numa_topology::set_current_thread_node(None);
            });
        }
    });
    match l.try_write() {
        Some(g) => check_total(&g, w, "rw churn", CHURN_ROUNDS * helpers as u64),
        None => w.violation(format_args!(
            "rw churn: lock held after its helpers finished"
        )),
    }
    match w.next_u64() % 3 {
        // Dropping a held lock after forgetting its guard is allowed.
        0 => mem::forget(l.read()),
        1 => mem::forget(l.write()),
        _ => {}
    }
    drop(l);
    w.stats.churned += 1;
}

/// The operations every reader-writer lock supports.
pub fn basic_ops<R: RawRwLock + Send + Sync + 'static>() -> Vec<Op<Rw<R>>> {
    vec![
        Op {
            name: "write",
            weight: 20,
            run: write::<R>,
        },
        Op {
            name: "read",
            weight: 40,
            run: read::<R>,
        },
        Op {
            name: "try_write_or_read",
            weight: 10,
            run: try_write_or_read::<R>,
        },
        Op {
            name: "sleep_in_cs",
            weight: 1,
            run: sleep_in_cs::<R>,
        },
        Op {
            name: "migrate_in_cs",
            weight: 5,
            run: migrate_in_cs::<R>,
        },
        Op {
            name: "panic_in_cs",
            weight: 2,
            run: panic_in_cs::<R>,
        },
        Op {
            name: "churn",
            weight: 1,
            run: churn::<R>,
        },
    ]
}

/// Every operation of a lock with all of lock_api's reader-writer traits.
pub fn all_ops<R>() -> Vec<Op<Rw<R>>>
where
    R: RawRwLockFair
        + RawRwLockUpgradeDowngrade
        + RawRwLockUpgradeTimed<Duration = Duration>
        + Send
        + Sync
        + 'static,
{
    let mut ops = basic_ops::<R>();
    ops.extend([
        Op {
            name: "fair",
            weight: 8,
            run: fair::<R>,
        },
        Op {
            name: "timed",
            weight: 8,
            run: timed::<R>,
        },
        Op {
            name: "downgrade",
            weight: 5,
            run: downgrade::<R>,
        },
        Op {
            name: "upgrade",
            weight: 5,
            run: upgrade::<R>,
        },
        Op {
            name: "try_upgrade",
            weight: 5,
            run: try_upgrade::<R>,
        },
        Op {
            name: "downgrade_to_upgradable",
            weight: 3,
            run: downgrade_to_upgradable::<R>,
        },
        Op {
            name: "upgrade_timed",
            weight: 3,
            run: upgrade_timed::<R>,
        },
    ]);
    ops
}

/// The final check: no reader, writer or upgradable holder left.
pub fn finish<R: RawRwLock>(l: &Rw<R>, w: &Worker<'_>) -> Option<u64> {
    let g = l.try_write()?;
    Some(g.check_consistent(w, "finish"))
}
