//! Size guarantees of the public types (64-bit targets).
#![cfg(not(numa_loom))]

#[test]
fn sizes() {
    use std::mem::size_of;
    // The mutex is the queue lock it is built on, no more (8 bytes; numa-spin's
    // feature `stats` adds the counters).
    assert_eq!(
        size_of::<cst_mutex::RawMutex>(),
        size_of::<numa_spin::RawMutex>()
    );
    assert_eq!(
        size_of::<cst_mutex::RawFairMutex>(),
        size_of::<cst_mutex::RawMutex>()
    );
    // The rwlock: the writers' queue lock, a 4-byte state word and a 4-byte
    // handle of its reader counters.
    assert_eq!(
        size_of::<cst_mutex::RawRwLock>(),
        size_of::<numa_spin::RawMutex>() + 8
    );
    assert!(size_of::<cst_mutex::Condvar>() <= 16);
    if size_of::<numa_spin::RawMutex>() == 8 {
        // Without counters (the default): the documented sizes.
        assert_eq!(size_of::<cst_mutex::Mutex<()>>(), 8);
        assert!(size_of::<cst_mutex::RwLock<()>>() <= 16);
    }
}
