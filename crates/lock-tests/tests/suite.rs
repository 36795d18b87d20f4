//! The generic suites (mutex, condvar, rwlock) instantiated for every `lock_api`
//! lock of the registry, baselines included (they check the suites themselves).
//! A lock added to `numa_lock_registry::for_each_lock!` gets its tests here.

lock_tests::registry::for_each_lock!(suites_for);

use lock_tests::suites_for;

// Guards our locks promise to be `Send` (lock_api's `GuardSend`), so a guard can
// be unlocked on another thread.
static_assertions::assert_impl_all!(lock_api::MutexGuard<'static, numa_spin::RawMutex, u64>: Send, Sync);
static_assertions::assert_impl_all!(lock_api::MutexGuard<'static, cst_mutex::RawMutex, u64>: Send, Sync);
