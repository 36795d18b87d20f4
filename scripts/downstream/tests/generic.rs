//! The "done when": generic lock_api 0.4 code runs over numa_spin::RawMutex,
//! numa_spin::RawHqMutex, cst_mutex::RawMutex and cst_mutex::RawRwLock.

use numa_locks_downstream_check::{count_with_mutex, pairs_with_rwlock};

#[test]
fn numa_spin_raw_mutex() {
    assert_eq!(count_with_mutex::<numa_spin::RawMutex>(4, 5_000), 20_000);
}

#[test]
fn numa_spin_hq_raw_mutex() {
    assert_eq!(count_with_mutex::<numa_spin::RawHqMutex>(4, 5_000), 20_000);
}

#[test]
fn cst_raw_mutex() {
    assert_eq!(count_with_mutex::<cst_mutex::RawMutex>(4, 5_000), 20_000);
}

#[test]
fn cst_raw_rwlock() {
    let writes = pairs_with_rwlock::<cst_mutex::RawRwLock>(4, 3_000);
    assert_eq!(writes, 4_000);
}
