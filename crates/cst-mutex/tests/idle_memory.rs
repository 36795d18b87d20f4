//! An idle mutex holds no heap memory, whichever way its last waiter left.
//! (Its own test binary, apart from `alloc.rs`: `alloc.rs` counts snode
//! allocations process-wide and expects its test to be the first to take
//! snodes from the pool, so a test here that attaches snodes would break it.)
//! Not with feature `stats`, whose counters keep the snodes attached.
#![cfg(not(numa_loom))]
#![cfg(not(feature = "stats"))]

use cst_mutex::Mutex;
use std::sync::Arc;
use std::thread;

/// A timed waiter that gives up while the lock is held (it attached its
/// node's snode to wait) leaves no snode on the mutex once the holder
/// unlocks: an idle mutex holds no heap memory. (Not with feature `stats`,
/// whose counters keep the snodes attached.)
#[test]
fn timed_waiter_that_gives_up_leaves_no_snode() {
    use std::time::Duration;
    for round in 0..20 {
        let m = Arc::new(Mutex::new(0u64));
        let holder = m.lock();
        let m2 = m.clone();
        let t = thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(round % 2));
            m2.try_lock_for(Duration::from_millis(2)).is_none()
        });
        assert!(t.join().unwrap(), "the timed waiter got a held lock");
        // SAFETY: only reads the snode count.
        let attached = unsafe { m.raw() }.snode_count();
        assert!(attached <= 1);
        drop(holder);
        // SAFETY: only reads the snode count.
        let n = unsafe { m.raw() }.snode_count();
        assert_eq!(n, 0, "round {round}: the idle mutex kept {n} snode(s)");
    }
}
