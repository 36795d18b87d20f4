//! The workspace's generic lock suites instantiated for cst-mutex's types.
#![cfg(not(numa_loom))]

lock_tests::mutex_suite!(cst_mutex_raw, cst_mutex::RawMutex, guard: Send);
lock_tests::rwlock_suite!(cst_rwlock_raw, cst_mutex::RawRwLock);
lock_tests::condvar_suite!(cst_condvar_raw, cst_mutex::RawCondvar, exact: true);
