//! Bounded spinning: the waiters' budgets before they park.
//!
//! Below everything but the shim and the tunables: the queue, the parking
//! paths and the unlocks spin through these.

#[cfg(not(numa_loom))]
use crate::config;
use crate::sync;

/// A cheap clock for the age of a registration slot's not-running tag
/// (`queue::grant`): the time-stamp counter on x86-64 (cycles, about
/// 7-25 ns to read, not serialising), elsewhere ns since a process epoch.
/// 0 under loom (the models decide with their oversubscription flag).
#[inline]
pub(crate) fn ticks() -> u64 {
    #[cfg(all(not(numa_loom), target_arch = "x86_64"))]
    {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(all(not(numa_loom), not(target_arch = "x86_64")))]
    {
        crate::config::fairness_now()
    }
    #[cfg(numa_loom)]
    {
        0
    }
}

/// Bounded spinning rounds before parking: rounds 1 to [`PAUSE_ROUNDS`]
/// pause 1, 2 and 4 times, the rest yield the CPU (7 yields).
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) const SPIN_ROUNDS: u32 = 10;

/// The spinning rounds that pause instead of yielding: parking_lot_core 0.10's
/// `SpinWait` schedule (pauses 1, 2 and 4 times, then 7 yields; 0.9 paused 2,
/// 4 and 8 times). Measured with `numa-bench` locktorture at 8 and 32 threads
/// on a 2-CPU KVM guest: pausing 2, 4, 8 times ran at 0.91-0.96x
/// `parking_lot` and 1, 2, 4 at 0.97-1.02x with the same p99 acquire latency
/// (0.5 us); two rounds (1, 2) ran at 1.17-1.25x but the waiters rarely
/// caught the lock before yielding, the running holder kept it and the p99
/// acquire latency rose to 17-85 us.
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) const PAUSE_ROUNDS: u32 = 3;

/// [`SPIN_ROUNDS`], or under loom the per-thread value the model chose (0 by
/// default: loom runs the holder as soon as a waiter yields, so a spinning
/// waiter would never reach the parking paths).
#[inline]
pub(crate) fn spin_rounds() -> u32 {
    #[cfg(not(numa_loom))]
    {
        SPIN_ROUNDS
    }
    #[cfg(numa_loom)]
    {
        sync::loom_spin_rounds()
    }
}

/// One round of bounded spinning (`round` counts from 1): rounds up to
/// [`PAUSE_ROUNDS`] pause `2^(round - 1)` times, later rounds yield the CPU.
#[inline]
pub(crate) fn spin_round(round: u32) {
    if cfg!(not(numa_loom)) && round <= PAUSE_ROUNDS {
        for _ in 0..(1u32 << (round - 1)) {
            sync::spin_loop();
        }
    } else {
        sync::yield_now();
    }
}

/// Rounds of the pause phase of [`Spin`]: round `r` pauses `2^min(r - 1, 6)`
/// times, 1 + 2 + ... + 64 = 127 pauses in all (about 0.5-6 us, depending on
/// the CPU's pause latency): the wait for a hand-off within a node, one
/// critical section plus a cache-line transfer.
#[cfg(not(numa_loom))]
const QUEUE_PAUSE_ROUNDS: u32 = 7;

/// How long a waiter yields after its pause phase before it parks: 50 us,
/// about two batches of the other node (128 hand-offs at 100-200 ns each on a
/// 16-core x86 machine), so the head of a node that waits for its turn is
/// still running when the turn comes. On an oversubscribed CPU a single yield
/// runs other threads for a time slice, so the waiter parks after one or two.
#[cfg(not(numa_loom))]
const YIELD_PHASE: std::time::Duration = std::time::Duration::from_micros(50);

/// A waiter's spin budget: pauses, then yields for [`YIELD_PHASE`]; under
/// loom, the loom thread's spin rounds (`loom_hooks::set_spin_rounds`), each a
/// yield.
pub(crate) struct Spin {
    round: u32,
    #[cfg(not(numa_loom))]
    yield_start: Option<std::time::Instant>,
}

impl Spin {
    pub(crate) fn new() -> Self {
        Spin {
            round: 0,
            #[cfg(not(numa_loom))]
            yield_start: None,
        }
    }

    /// The rounds spun so far.
    pub(crate) fn rounds(&self) -> u32 {
        self.round
    }

    /// One step of spinning; `false` (without spinning) once the budget is spent.
    pub(crate) fn spin(&mut self) -> bool {
        #[cfg(numa_loom)]
        {
            if self.round >= sync::loom_spin_rounds() {
                return false;
            }
            self.round += 1;
            sync::spin_loop();
            true
        }
        #[cfg(not(numa_loom))]
        {
            if self.round < QUEUE_PAUSE_ROUNDS {
                self.round += 1;
                for _ in 0..(1u32 << (self.round - 1).min(6)) {
                    sync::spin_loop();
                }
                return true;
            }
            let start = *self.yield_start.get_or_insert_with(std::time::Instant::now);
            if start.elapsed() >= YIELD_PHASE {
                return false;
            }
            sync::yield_now();
            true
        }
    }
}

/// Whether a waiter has a spin budget at all: always, except under loom for a
/// thread whose spin rounds are 0 (the models of the parking paths).
#[inline]
pub(crate) fn budget_allows_queueing() -> bool {
    #[cfg(numa_loom)]
    {
        sync::loom_spin_rounds() > 0
    }
    #[cfg(not(numa_loom))]
    {
        true
    }
}

/// The budget of a queued waiter and of a head with others queued behind it
/// (or a registration to keep): pause rounds, then the long phase. On an
/// oversubscribed lock (more waiters than CPUs: `queue::oversubscribed`,
/// decided once when the long phase starts) it yields for [`YIELD_PHASE`].
/// Otherwise it spins in steps of [`STEP_PAUSES`] pauses and yields every
/// [`STEPS_PER_YIELD`] steps, [`HEAD_YIELDS`] yields, or four times the
/// batch bound if more, *since the lock last made progress*: a waiter waits
/// for its turn, up to a batch of another node's critical sections, and on a
/// machine where every waiter has a CPU it must see its turn within a few
/// pauses (a hand-off is a few hundred nanoseconds, about what one
/// `sched_yield` takes). Counting yields since the last hand-off, not time,
/// makes the same decision on a machine whose threads share fewer CPUs than
/// [`config::cpus`] says (where each yield may run other threads for a
/// while). A lock that makes no progress for that long (a long critical
/// section) sends the waiter to park.
pub(crate) struct HeadSpin {
    spin: Spin,
    #[cfg(not(numa_loom))]
    yields_left: Option<u32>,
    #[cfg(not(numa_loom))]
    progress: u64,
    #[cfg(not(numa_loom))]
    steps: u32,
}

/// A `sched_yield` that returns this many [`ticks`] or more after it
/// was called (0.5-1 ms at 2-4 GHz) ran another CPU-bound thread on this
/// CPU for a scheduler time slice. Shorter stays (kernel threads, a
/// benchmark's timer) do not count: on a machine with exactly as many
/// waiters as CPUs they happen every few milliseconds, and taking them for
/// shared CPUs sent every waiter to park, so that each hand-off waited for
/// a wake-up (16 threads on a 16-CPU KVM guest, one node: 0.08x
/// parking_lot with a 100,000-tick threshold).
#[cfg(not(numa_loom))]
const SLOW_YIELD_TICKS: u64 = 2_000_000;

/// How long one slow yield makes [`cpus_contended`] true: 20,000,000
/// ticks (5-10 ms, a few scheduler time slices).
#[cfg(not(numa_loom))]
const CONTENDED_TICKS: u64 = 20_000_000;

/// Until when ([`ticks`]) the CPUs are taken as shared with other
/// threads (0: not seen). Process-wide, written only when a waiter's yield
/// was slow, read by the path decisions.
#[cfg(not(numa_loom))]
static CONTENDED_UNTIL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether a waiter of some lock of this crate saw, in the last few
/// milliseconds, its CPU taken by another thread (a yield that did not
/// return at once): then waiters do not all have a CPU, whatever the locks'
/// counts of waiters against [`config::cpus`] say (CPU hogs of other
/// processes, vCPU preemption), and the paths of an oversubscribed lock are
/// taken. Never with a forced CPU count ([`config::set_cpus`]), nor under
/// loom.
#[inline]
#[cfg_attr(numa_loom, allow(dead_code))]
pub(crate) fn cpus_contended() -> bool {
    #[cfg(numa_loom)]
    {
        false
    }
    #[cfg(not(numa_loom))]
    {
        // Relaxed: a hint; it carries no data.
        let until = CONTENDED_UNTIL.load(std::sync::atomic::Ordering::Relaxed);
        until != 0 && ticks() < until && !config::cpus_forced()
    }
}

/// A `sched_yield` that returns this many [`ticks`] or more after it was
/// called (about 8-20 us at 1-2.6 GHz) ran another thread on this CPU: a
/// yield with nothing else to run returns in 0.3-1 us (1,000-2,500 ticks on
/// the 2.6 GHz development machine), one that switches to another thread
/// and back takes 3-100 us.
#[cfg(not(numa_loom))]
const SWITCH_TICKS: u64 = 20_000;

/// What a timed yield showed about the calling thread's CPU.
#[cfg(not(numa_loom))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum YieldSeen {
    /// It returned at once: nothing else wanted this CPU.
    Returned,
    /// Another thread ran meanwhile ([`SWITCH_TICKS`] or more).
    Switched,
    /// Another thread ran for a time slice ([`SLOW_YIELD_TICKS`] or more):
    /// [`cpus_contended`] is true for the next few milliseconds.
    Slow,
}

#[cfg(not(numa_loom))]
std::thread_local! {
    /// Whether this thread's last timed yield ran another thread
    /// ([`yields_switch`]). Const-initialised, no destructor: usable from
    /// any thread at any time (a `#[global_allocator]`, a TLS destructor).
    static YIELDS_SWITCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread's last timed yield ran another thread: the
/// threads it shares its CPU with were runnable then. Per thread, so no
/// shared line is written.
#[cfg(not(numa_loom))]
#[inline]
pub(crate) fn yields_switch() -> bool {
    YIELDS_SWITCH.try_with(|c| c.get()).unwrap_or(false)
}

/// What an untimed waiter that found the lock held takes its CPU to be
/// (`Cohort::shared_cpu_spin`, which waits with parking_lot's schedule in
/// both cases and reads its yields by this).
#[cfg(not(numa_loom))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstWait {
    /// A CPU of its own: the wait ends once a queue has formed, and the
    /// waiter joins it (CST's paths: the pending spin, the queue).
    Own,
    /// A CPU shared with other threads ([`cpus_contended`],
    /// [`yields_switch`]): the whole schedule, unless a yield returns at
    /// once.
    Shared,
}

/// [`FirstWait::Shared`] while this thread's yields run other threads or
/// the process's CPUs are contended; else [`FirstWait::Own`].
#[cfg(not(numa_loom))]
pub(crate) fn first_wait() -> FirstWait {
    if cpus_contended() || yields_switch() {
        FirstWait::Shared
    } else {
        FirstWait::Own
    }
}

/// Yields, notes a slow yield for [`cpus_contended`] and a switching one
/// for [`yields_switch`], and says which it was.
#[cfg(not(numa_loom))]
pub(crate) fn timed_yield() -> YieldSeen {
    let start = ticks();
    sync::yield_now();
    let end = ticks();
    let took = end.saturating_sub(start);
    let _ = YIELDS_SWITCH.try_with(|c| c.set(took >= SWITCH_TICKS));
    if took < SWITCH_TICKS {
        return YieldSeen::Returned;
    }
    if took < SLOW_YIELD_TICKS {
        return YieldSeen::Switched;
    }
    // Relaxed: a hint (see `cpus_contended`). Written only when it moves
    // forward by a good part of its span, so the line is not written at
    // every slow yield.
    let c = &CONTENDED_UNTIL;
    let until = end.saturating_add(CONTENDED_TICKS);
    if c.load(std::sync::atomic::Ordering::Relaxed) < until - CONTENDED_TICKS / 4 {
        c.store(until, std::sync::atomic::Ordering::Relaxed);
    }
    YieldSeen::Slow
}

/// The least yields of a waiter on a lock that is not oversubscribed,
/// counted since the lock last made progress.
#[cfg(not(numa_loom))]
const HEAD_YIELDS: u32 = 64;

/// The pauses of one step of [`HeadSpin`]'s long phase: the waiter looks at
/// its status every 4 pauses (0.1-0.6 us).
#[cfg(not(numa_loom))]
const STEP_PAUSES: u32 = 4;

/// Steps of [`HeadSpin`]'s long phase per yield: the waiter gives the CPU
/// away once every 16 steps (64 pauses), so threads that share its CPU
/// (more threads than [`config::cpus`] says) still run.
#[cfg(not(numa_loom))]
const STEPS_PER_YIELD: u32 = 16;

/// The yields of [`HeadSpin`]'s long phase since the lock last made
/// progress: [`HEAD_YIELDS`], or four times `batch_bound` if more (a batch
/// of another node's critical sections, with room for its hand-offs).
/// Saturates at `u32::MAX` for a batch bound of 2^30 or more.
#[cfg(not(numa_loom))]
fn head_yields(batch_bound: u32) -> u32 {
    HEAD_YIELDS.max(batch_bound.saturating_mul(4))
}

impl HeadSpin {
    pub(crate) fn new() -> Self {
        HeadSpin {
            spin: Spin::new(),
            #[cfg(not(numa_loom))]
            yields_left: None,
            #[cfg(not(numa_loom))]
            progress: 0,
            #[cfg(not(numa_loom))]
            steps: 0,
        }
    }

    pub(crate) fn rounds(&self) -> u32 {
        self.spin.rounds()
    }

    /// One step; `false` once the budget is spent. `oversubscribed` is
    /// asked once, when the yields start; `progress` (a value that changes
    /// when the lock is handed on) at each yield of a lock that is not
    /// oversubscribed.
    pub(crate) fn spin(
        &mut self,
        oversubscribed: impl FnOnce() -> bool,
        progress: impl FnOnce() -> u64,
    ) -> bool {
        #[cfg(numa_loom)]
        {
            let _ = (oversubscribed, progress);
            self.spin.spin()
        }
        #[cfg(not(numa_loom))]
        {
            if self.spin.rounds() < QUEUE_PAUSE_ROUNDS {
                return self.spin.spin();
            }
            let full = head_yields(config::batch_bound());
            let mut fresh = false;
            let left = self.yields_left.get_or_insert_with(|| {
                fresh = true;
                if oversubscribed() { 0 } else { full }
            });
            if *left > 0 {
                self.steps = self.steps.wrapping_add(1);
                if !self.steps.is_multiple_of(STEPS_PER_YIELD) {
                    for _ in 0..STEP_PAUSES {
                        sync::spin_loop();
                    }
                    return true;
                }
                if !fresh {
                    let p = progress();
                    if p != self.progress {
                        self.progress = p;
                        *left = full;
                    }
                }
                *left -= 1;
                timed_yield();
                if cpus_contended() {
                    // Other threads take our CPU: wait as on an
                    // oversubscribed lock from now on.
                    *left = 0;
                }
                return true;
            }
            self.spin.spin()
        }
    }
}

#[cfg(all(test, not(numa_loom), target_os = "linux"))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Pins the calling thread to `cpu`.
    fn pin_to(cpu: usize) {
        // SAFETY: an all-zero `cpu_set_t` is the empty set; `CPU_SET` writes
        // inside the set we own; `sched_setaffinity` reads it.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
    }

    /// The long phase's budget grows with the batch bound and saturates
    /// instead of overflowing (`4 * bound` wrapped to 0 for a bound of 2^30,
    /// and panicked with overflow checks while the waiter's node was linked).
    #[test]
    fn head_yields_saturates_for_large_batch_bounds() {
        assert_eq!(head_yields(1), HEAD_YIELDS);
        assert_eq!(head_yields(128), 512);
        assert_eq!(head_yields(1 << 30), u32::MAX);
        assert_eq!(head_yields(u32::MAX), u32::MAX);
    }

    /// A yield while another thread is runnable on the same CPU runs that
    /// thread: it is seen, and the thread's next wait starts with
    /// parking_lot's schedule instead of giving its CPU away.
    #[test]
    fn a_yield_that_runs_another_thread_makes_the_next_wait_spin_first() {
        // SAFETY: `sched_getcpu` has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        assert!(cpu >= 0, "sched_getcpu");
        let cpu = cpu as usize;
        pin_to(cpu);
        let (running, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let spinner = {
            let (running, stop) = (running.clone(), stop.clone());
            std::thread::spawn(move || {
                pin_to(cpu);
                running.store(true, Ordering::SeqCst);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        while !running.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // The spinner is runnable on our CPU and never sleeps. The scheduler
        // runs it at our yield once our CPU time is about level with its
        // own (CFS picks the yielder again while the other thread's virtual
        // runtime is ahead by more than its wake-up granularity): spin
        // between the yields, as a thread with work does, until one switches.
        let mut seen = YieldSeen::Returned;
        let (mut switch, mut plan) = (false, FirstWait::Own);
        for _ in 0..100_000 {
            let start = ticks();
            while ticks().wrapping_sub(start) < 50_000 {
                std::hint::spin_loop();
            }
            seen = timed_yield();
            // A slow yield also marks the process's CPUs contended, which
            // alone would choose the schedule: forget that mark (its
            // loss only costs other tests' waiters a yield), so the plan
            // below comes from this thread's note alone.
            CONTENDED_UNTIL.store(0, std::sync::atomic::Ordering::Relaxed);
            (switch, plan) = (yields_switch(), first_wait());
            if seen != YieldSeen::Returned && !cpus_contended() {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        assert_ne!(
            seen,
            YieldSeen::Returned,
            "no yield beside a runnable thread ran it"
        );
        assert!(switch, "the switching yield was not noted");
        assert_eq!(plan, FirstWait::Shared);
        // A yield with nothing else to run on our CPU clears the note.
        // (Other processes may take the CPU: look until one returns at once.)
        for _ in 0..100_000 {
            if timed_yield() == YieldSeen::Returned {
                break;
            }
        }
        assert!(
            !yields_switch(),
            "a yield that returned at once left the note set"
        );
    }
}
