//! This workspace's locks as benchmark lock families, with their counters.
//!
//! With this package's `lock-stats` feature (which turns on `numa_spin`'s
//! `stats`), `cna`, `queued` and `hq` report their counters: acquisitions, contended acquisitions, same- and cross-node
//! handoffs, secondary-queue flushes; `combining` those of its inner CNA lock,
//! whose acquisitions are a combiner's batches, `lock()` guards and uncontended
//! `combine` calls, not the closures a combiner ran for others. `cst`, on
//! numa-spin's CNA queue, reports that queue lock's counters; `cst-rw` reports
//! whether its readers bound a set of per-node counters (`snodes`: 0 or 1),
//! and with `lock-stats` its writers' queue lock's counters. `numa-bench run`
//! prints them per 1k acquisitions too.

use std::any::Any;

use numa_lock_registry::LockApi;

/// Counters a lock reports about itself (its `stats` feature), by counter name.
///
/// Empty for locks without counters. The keys are the lock crate's own field names.
pub type LockStats = std::collections::BTreeMap<String, u64>;

#[cfg(feature = "lock-stats")]
fn spin_stats(s: numa_spin::Stats) -> LockStats {
    [
        ("acquisitions", s.acquisitions),
        ("contended", s.contended),
        ("same_node_handoffs", s.same_node_handoffs),
        ("cross_node_handoffs", s.cross_node_handoffs),
        ("flushes", s.flushes),
        ("local_handoffs", s.local_handoffs),
        ("remote_handoffs", s.remote_handoffs),
        ("binds", s.binds),
        ("pool_fallbacks", s.pool_fallbacks),
        ("mode_switches", s.mode_switches),
        ("combine_requests", s.combine_requests),
        ("binding_writes", s.binding_writes),
        ("combine_solo", s.combine_solo),
        ("steal_attempts", s.steal_attempts),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The counters of a raw lock (`lock_api`'s raw lock inside a benchmark lock), for
/// the locks that keep any: numa-spin's and cst's with `lock-stats` (without it
/// the lock is measured as users get it: no counters), cst's rwlock's reader
/// counter binding.
pub fn raw_stats(raw: &dyn Any) -> Option<LockStats> {
    #[cfg(feature = "lock-stats")]
    {
        if let Some(l) = raw.downcast_ref::<numa_spin::RawMutex>() {
            return Some(spin_stats(l.stats()));
        }
        if let Some(l) = raw.downcast_ref::<numa_spin::RawQueuedMutex>() {
            return Some(spin_stats(l.stats()));
        }
        if let Some(l) = raw.downcast_ref::<numa_spin::RawHqMutex>() {
            return Some(spin_stats(l.stats()));
        }
        if let Some(l) = raw.downcast_ref::<numa_spin::RawCombiningMutex>() {
            return Some(spin_stats(l.raw_lock().stats()));
        }
    }
    #[cfg(feature = "lock-stats")]
    if let Some(l) = raw.downcast_ref::<cst_mutex::RawMutex>() {
        return Some(spin_stats(l.stats()));
    }
    let l = raw.downcast_ref::<cst_mutex::RawRwLock>()?;
    // Its writers' counters are numa-spin's (the queue lock underneath).
    #[cfg(feature = "lock-stats")]
    let mut out = spin_stats(l.stats());
    #[cfg(not(feature = "lock-stats"))]
    let mut out = LockStats::new();
    out.insert("snodes".to_owned(), l.snode_count() as u64);
    Some(out)
}

/// `cna`: `numa_spin::RawMutex`, the CNA queue spinlock.
pub type Cna = LockApi<numa_spin::RawMutex>;

/// `queued`: `numa_spin::RawQueuedMutex`, the same queue spinlock without the
/// secondary queue (the NUMA-oblivious baseline, like the stock qspinlock).
pub type Queued = LockApi<numa_spin::RawQueuedMutex>;

/// `hq`: `numa_spin::RawHqMutex`, the HQ hierarchical queued NUMA-aware spinlock
/// (seed 002).
pub type Hq = LockApi<numa_spin::RawHqMutex>;

/// `combining`: `numa_spin::RawCombiningMutex`, the NUMA-aware combining lock;
/// its `with_send` runs the critical section through `combine`.
pub type Combining = numa_lock_registry::Combining<numa_spin::RawCombiningMutex>;

/// `cst`: `cst_mutex::RawMutex`, the blocking mutex on numa-spin's CNA queue.
pub type Cst = LockApi<cst_mutex::RawMutex>;

/// `cst-rw`: `cst_mutex::RawRwLock`, the NUMA-aware reader-writer lock.
pub type CstRw = LockApi<cst_mutex::RawRwLock>;
