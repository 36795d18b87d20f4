//! The generic condition-variable suite: functions over a `lock_api::RawCondvar`
//! (with timeouts) and its mutex, and [`condvar_suite!`](crate::condvar_suite)
//! which instantiates them as `#[test]`s.
//!
//! Every function panics (fails the test) on a violation. Waits that would hang
//! on a broken condvar are bounded by [`crate::rwlock::PATIENCE`];
//! the only time check is the contract's lower bound (a timed-out wait must not
//! return before its timeout).

use crate::rwlock::PATIENCE;
use lock_api::{Condvar, Mutex, RawCondvar, RawCondvarTimed, RawMutexTimed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The mutex type of condvar `C`.
type M<C, T> = Mutex<<C as RawCondvar>::RawMutex, T>;

/// `wait_while` returns once a producer thread makes the condition false, with
/// the mutex held and the producer's write visible; repeated `rounds` times.
pub fn wait_while<C>(rounds: u32)
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    // (value produced, value acknowledged by the consumer)
    let pair = Arc::new((M::<C, (u32, u32)>::new((0, 0)), Condvar::<C>::new()));
    let producer = {
        let pair = pair.clone();
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            for i in 1..=rounds {
                let (m, cv) = &*pair;
                let mut g = m.lock();
                // Wait until the consumer took the previous value.
                let r = cv.wait_while_for(&mut g, |v| v.1 != i - 1, PATIENCE);
                assert!(!r.timed_out(), "producer never saw the consumer");
                g.0 = i;
                cv.notify_all();
            }
        })
    };
    let (m, cv) = &*pair;
    for i in 1..=rounds {
        let mut g = m.lock();
        let r = cv.wait_while_for(&mut g, |v| v.0 != i, PATIENCE);
        assert!(!r.timed_out(), "consumer never woken for value {i}");
        assert_eq!(g.0, i);
        g.1 = i;
        cv.notify_all();
    }
    producer.join().unwrap();
}

/// `wait_for` with nobody notifying times out, not before the timeout, and
/// returns with the mutex held; a notified `wait_for` does not report a
/// timeout.
pub fn wait_for_timeouts<C>()
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    let pair = Arc::new((M::<C, bool>::new(false), Condvar::<C>::new()));
    let (m, cv) = &*pair;
    let mut g = m.lock();
    for ms in [1u64, 5, 20] {
        let t0 = Instant::now();
        let r = cv.wait_for(&mut g, Duration::from_millis(ms));
        assert!(r.timed_out(), "un-notified wait_for did not time out");
        assert!(t0.elapsed() >= Duration::from_millis(ms), "timed out early");
        assert!(m.is_locked(), "wait_for returned without the mutex");
    }
    assert!(!cv.notify_one(), "a timed-out waiter counted as notified");
    let notifier = {
        let pair = pair.clone();
        thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            let (m, cv) = &*pair;
            *m.lock() = true;
            cv.notify_one();
        })
    };
    let r = cv.wait_while_for(&mut g, |v| !*v, PATIENCE);
    assert!(!r.timed_out() && *g, "notified wait_for reported a timeout");
    drop(g);
    notifier.join().unwrap();
}

/// `notify_all` wakes every one of `waiters` threads (spread over 2 virtual
/// nodes) waiting on one condvar. If `exact`, its return value must be
/// `waiters` (the condvar documents exact counts).
pub fn notify_all_wakes_all<C>(waiters: usize, exact: bool)
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    // (generation, threads waiting in this generation, threads woken)
    let pair = Arc::new((
        M::<C, (u32, usize, usize)>::new((0, 0, 0)),
        Condvar::<C>::new(),
    ));
    let handles: Vec<_> = (0..waiters)
        .map(|me| {
            let pair = pair.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me % 2));
                let (m, cv) = &*pair;
                let mut g = m.lock();
                g.1 += 1;
                let r = cv.wait_while_for(&mut g, |s| s.0 == 0, PATIENCE);
                assert!(!r.timed_out(), "waiter not woken by notify_all");
                g.2 += 1;
            })
        })
        .collect();
    let (m, cv) = &*pair;
    // Every waiter has released the mutex inside `wait` once it counted itself
    // and we hold the mutex again.
    loop {
        let g = m.lock();
        if g.1 == waiters {
            break;
        }
        drop(g);
        thread::sleep(Duration::from_millis(1));
    }
    let mut g = m.lock();
    g.0 = 1;
    let n = cv.notify_all();
    drop(g);
    if exact {
        assert_eq!(n, waiters, "notify_all count");
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(m.lock().2, waiters);
}

/// `notify_one` wakes exactly one of two waiters; a second `notify_one`
/// wakes the other.
pub fn notify_one_wakes_one<C>()
where
    C: RawCondvarTimed + Send + Sync + 'static,
    C::RawMutex: RawMutexTimed<Duration = Duration, Instant = Instant> + Send + Sync + 'static,
{
    // (tokens, waiting, woken)
    let pair = Arc::new((M::<C, (u32, u32, u32)>::new((0, 0, 0)), Condvar::<C>::new()));
    let handles: Vec<_> = (0..2)
        .map(|me| {
            let pair = pair.clone();
            thread::spawn(move || {
                numa_topology::set_current_thread_node(Some(me));
                let (m, cv) = &*pair;
                let mut g = m.lock();
                g.1 += 1;
                let r = cv.wait_while_for(&mut g, |s| s.0 == 0, PATIENCE);
                assert!(!r.timed_out(), "waiter not woken by notify_one");
                g.0 -= 1;
                g.2 += 1;
            })
        })
        .collect();
    let (m, cv) = &*pair;
    while m.lock().1 < 2 {
        thread::sleep(Duration::from_millis(1));
    }
    for round in 1..=2 {
        let mut g = m.lock();
        g.0 += 1;
        cv.notify_one();
        drop(g);
        let t0 = Instant::now();
        while m.lock().2 < round {
            assert!(t0.elapsed() < PATIENCE, "notify_one woke nobody");
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(m.lock().2, round, "notify_one woke more than one waiter");
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// Instantiates the generic condvar suite as `#[test]`s in a module `$name` for
/// the raw condvar `$raw` (with `RawCondvarTimed` over a `std::time` mutex).
/// `exact: true` also checks `notify_all`'s count.
///
/// ```ignore
/// lock_tests::condvar_suite!(cst, cst_mutex::RawCondvar, exact: true);
/// ```
#[macro_export]
macro_rules! condvar_suite {
    ($name:ident, $raw:ty, exact: $exact:expr) => {
        #[allow(missing_docs)]
        mod $name {
            use $crate::condvar as suite;

            #[test]
            fn wait_while() {
                suite::wait_while::<$raw>(200);
            }

            #[test]
            fn wait_for_timeouts() {
                suite::wait_for_timeouts::<$raw>();
            }

            #[test]
            fn notify_all_32_waiters() {
                suite::notify_all_wakes_all::<$raw>(32, $exact);
            }

            #[test]
            fn notify_one_wakes_one() {
                suite::notify_one_wakes_one::<$raw>();
            }
        }
    };
}
