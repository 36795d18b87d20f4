//! Size guarantees of the public types (64-bit targets).
#![cfg(not(numa_loom))]

#[test]
fn sizes() {
    use std::mem::size_of;
    assert!(size_of::<cst_mutex::Mutex<()>>() <= 16);
    assert!(size_of::<cst_mutex::Condvar>() <= 16);
    assert!(size_of::<cst_mutex::RawMutex>() <= 2 * size_of::<usize>());
    // The rwlock: the writers' queue lock, a 4-byte state word and a 4-byte
    // handle of its reader counters.
    assert_eq!(
        size_of::<cst_mutex::RawRwLock>(),
        size_of::<numa_spin::RawMutex>() + 8
    );
    // The queue lock it is built on, no more (8 bytes; numa-spin's feature
    // `stats` adds the counters to both).
    assert_eq!(
        size_of::<cst_mutex::next::RawMutex>(),
        size_of::<numa_spin::RawMutex>()
    );
    if size_of::<numa_spin::RawMutex>() == 8 {
        // Without counters (the default): the promise of cst_mutex::Mutex.
        assert!(size_of::<cst_mutex::next::Mutex<()>>() <= 16);
        assert!(size_of::<cst_mutex::next::Condvar>() <= 16);
        assert!(size_of::<cst_mutex::RwLock<()>>() <= 16);
    }
}
