//! [`Condvar`]: the `lock_api` wrapper over [`RawCondvar`].

use crate::RawCondvar;

/// A condition variable for [`Mutex`](crate::Mutex), like
/// `parking_lot::Condvar`: no spurious wake-ups, exact notify counts,
/// `wait_while`, `wait_for`, `wait_until`.
///
/// # Examples
///
/// ```
/// use cst_mutex::{Condvar, Mutex};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let pair = Arc::new((Mutex::new(false), Condvar::new()));
/// let p2 = Arc::clone(&pair);
/// let t = std::thread::spawn(move || {
///     *p2.0.lock() = true;
///     p2.1.notify_one();
/// });
/// let (lock, cv) = &*pair;
/// let mut ready = lock.lock();
/// cv.wait_while(&mut ready, |r| !*r);
/// assert!(*ready);
/// // Nobody notifies now: a timed wait times out.
/// assert!(cv.wait_for(&mut ready, Duration::from_millis(1)).timed_out());
/// t.join().unwrap();
/// ```
pub type Condvar = lock_api::Condvar<RawCondvar>;
