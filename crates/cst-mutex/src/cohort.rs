//! The cohort lock state machine shared by [`RawMutex`](crate::RawMutex) and
//! the writer side of [`RawRwLock`](crate::RawRwLock).
//!
//! The state word is described in [`crate::word`].
//!
//! # Algorithm (CST, Kashyap, Min, Kim, USENIX ATC 2017, sections 3-4, adapted)
//!
//! * Fast path: CAS `LOCKED_BIT` in; unlock CASes it out when nothing else
//!   is set (for the mutex: the word is exactly `LOCKED_BIT`).
//! * Untimed slow path ([`crate::queue`]): parking_lot's spin-and-yield
//!   wait ([`Cohort::shared_cpu_spin`]), which on a CPU of the thread's own
//!   ends as soon as a queue has formed, and on a CPU shared with other
//!   threads runs its whole schedule; then the waiter gets (allocates on
//!   first use) the snode of its node and joins the snode's queue. Only the
//!   queue's head waits for the lock; it registers in the snode and in the
//!   word's head count, so unlocks take the slow path and can hand it the lock
//!   with one swap (a *grant*). The others spin on their own queue node, then
//!   park on it; each new head wakes its successor ahead of its turn.
//! * Timed waiters spin on the word (bounded, [`SPIN_ROUNDS`](crate::spin::SPIN_ROUNDS), and not at
//!   all once the lock has at least as many parked waiters as
//!   [`config::cpus`]) and then park on their snode's parking queue. Heads
//!   that spent their spin budget give their node's registration back and
//!   park there at once. A thread woken to compete that loses spins only
//!   while nobody else is parked, then parks again. A timed waiter leaves
//!   the parking queue on its deadline.
//! * Slow unlock, holding the lock (so nothing after the releasing step
//!   touches the lock; see "Memory after unlock" in the crate docs), in this
//!   order:
//!   1. grant the registered head of the unlocker's own node while the node's
//!      batch is below the batch bound (CST's local hand-off);
//!   2. once that batch is spent (or for `unlock_fair`), unless a parked
//!      waiter's fairness period (0.5 ms by default) is over, grant the head
//!      of the next node in the cyclic snode order that has one, or the own
//!      node's again (its batch restarts); a node that merely has nobody
//!      queued releases the word (step 4) for the other heads to take, so
//!      running threads may still barge;
//!   3. with parked waiters, pick the target snode by the cohort order (the
//!      unlocker's own node while its batch is below the bound, then the next
//!      snode in the cyclic order with parked waiters) and wake exactly one
//!      of its waiters. Inside the unpark callback, under the snode's queue
//!      lock, the woken thread leaves the parked counts and the lock is
//!      released in the same atomic step (barging: it competes with running
//!      ones), or, for a node whose fairness deadline has passed and on
//!      `unlock_fair`, handed off: the lock stays locked and ownership passes.
//!      If the picked snode has nobody left (its waiter timed out), nothing
//!      changed and the unlocker picks again;
//!   4. otherwise release the word with one CAS (it fails, and the unlocker
//!      looks again, if a waiter parked or registered meanwhile).

use crate::config;
use crate::fork;
use crate::list::SnodeList;
use crate::queue::{self, Grant, LockRef, Queued};
use crate::snode::{self as snode_mod, Snode};
use crate::spin::{spin_round, spin_rounds};
use crate::sync::{self, AtomicUsize, Ordering, ParkResult, ParkToken, UnparkToken};
pub(crate) use crate::word::*;
use std::time::Instant;

/// Unpark token: the woken thread must compete for the lock (barging).
pub(crate) const TOKEN_NORMAL: UnparkToken = UnparkToken(0);
/// Unpark token: the lock was handed to the woken thread; it holds it now.
pub(crate) const TOKEN_HANDOFF: UnparkToken = UnparkToken(1);

/// The node of the acquiring thread, or [`UNKNOWN_NODE`] when taken on the
/// fast path (looked up lazily in the slow unlock).
pub(crate) const UNKNOWN_NODE: usize = usize::MAX;

/// The reserved node id of a mutex's requeue pseudo-snode: it counts the
/// condvar waiters that `notify_all` moved onto the mutex (they sleep on
/// [`Cohort::requeue_key`]) and gives them a place in the cyclic snode order,
/// under the batch and fairness bounds like any node. No thread reports this
/// node (node ids are OS indices, far below it).
pub(crate) const REQUEUE_NODE: usize = usize::MAX - 1;

/// The pause rounds of [`Cohort::pending_spin`]: round `r` pauses
/// `2^(r - 1)` times, 1 + 2 + ... + 32 = 63 pauses in all (about 0.3-3 us),
/// a few short critical sections.
#[cfg(not(numa_loom))]
const PENDING_ROUNDS: u32 = 6;

/// How an arrival's first wait ([`Cohort::shared_cpu_spin`]) ended.
#[cfg_attr(numa_loom, allow(dead_code))]
enum SharedCpu {
    /// It holds the lock.
    Acquired,
    /// Its CPU is shared with other threads and it waited as parking_lot's
    /// waiters do: it queues now.
    Shared,
    /// It has a CPU to itself (as far as its yields showed): it goes on to
    /// the pending spin and the queue.
    Own,
}

/// What [`Cohort::grant_own_in_batch`] did.
enum OwnGrant {
    /// The own node's head has the lock now.
    Granted,
    /// The own node's batch is spent: the lock should move to another node.
    Exhausted,
    /// The own node has no registered head (its batch ended).
    NoHead,
}

/// The lock word plus the lazily built snode list: 2 words.
pub(crate) struct Cohort {
    pub(crate) state: AtomicUsize,
    pub(crate) snodes: SnodeList,
}

impl Cohort {
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        Cohort {
            state: AtomicUsize::new(0),
            snodes: SnodeList::new(),
        }
    }

    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        Cohort {
            state: AtomicUsize::new(0),
            snodes: SnodeList::new(),
        }
    }

    /// The word and the snode list, for the queue.
    #[inline]
    fn lock_ref(&self) -> LockRef<'_> {
        LockRef {
            state: &self.state,
            snodes: &self.snodes,
        }
    }

    /// The contended-path counters, summed over the snodes.
    #[cfg(feature = "stats")]
    pub(crate) fn stats(&self) -> crate::Stats {
        let mut s = crate::Stats::default();
        for sn in self.snodes.iter() {
            sn.stats.add_to(&mut s);
        }
        s
    }

    /// Gives the lock's snodes back to the pool if nobody else uses them
    /// (see [`crate::snode`]): the mutex calls this holding the lock after a
    /// slow acquisition, the end of a contention if no other waiter is left.
    /// Not with feature `stats`, whose counters live in the snodes.
    #[inline]
    pub(crate) fn detach_idle(&self) {
        if cfg!(feature = "stats") {
            return;
        }
        // Relaxed: a first look; parked waiters and registered heads hold
        // pins, which decide.
        if self.state.load(Ordering::Relaxed) & (PARKED_MASK | HEAD_MASK) != 0 {
            return;
        }
        self.snodes.detach_idle();
    }

    /// [`Cohort::detach_idle`] without the look at the word (the caller
    /// checked it).
    fn snodes_to_pool(&self) {
        if !cfg!(feature = "stats") {
            self.snodes.detach_idle();
        }
    }

    /// `RawMutex`'s timed waiter that gave up: if the lock is held, sets
    /// [`DETACH_BIT`] so that the unlock that releases it gives the snodes
    /// back; `false` if the lock is free (the caller takes it and detaches
    /// them itself).
    pub(crate) fn note_idle_snodes(&self) -> bool {
        // Relaxed: a first guess for the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED_BIT == 0 {
                return false;
            }
            if s & DETACH_BIT != 0 {
                return true;
            }
            // Relaxed: the bit only routes the holder's unlock to the slow
            // path, which looks at the snodes holding the lock; nothing is
            // published.
            match self.state.compare_exchange_weak(
                s,
                s | DETACH_BIT,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    count!(word_write());
                    return true;
                }
                Err(x) => s = x,
            }
        }
    }

    /// One attempt to take `LOCKED_BIT` (keeping every other bit).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED_BIT != 0 {
                return false;
            }
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED_BIT,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    count!(word_write());
                    count!(acquired());
                    return true;
                }
                Err(x) => s = x,
            }
        }
    }

    /// Fast path: one CAS setting `LOCKED_BIT` in the observed state (other
    /// bits, such as the parked count, may be set: a free lock with parked
    /// waiters is taken here too, that is barging).
    #[inline]
    pub(crate) fn try_lock_fast(&self) -> bool {
        let ok = match self.state.compare_exchange_weak(
            0,
            LOCKED_BIT,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => true,
            Err(s) => {
                s & LOCKED_BIT == 0
                    && self
                        .state
                        .compare_exchange_weak(
                            s,
                            s | LOCKED_BIT,
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
            }
        };
        if ok {
            count!(word_write());
            count!(acquired());
        }
        ok
    }

    /// Slow acquisition. Returns the caller's node on success, `None` when
    /// `deadline` passed first (the caller is then in no queue and counted
    /// nowhere).
    ///
    /// The snode of the caller's node is looked up (attached on first use,
    /// and pinned until this returns) only when the caller is about to wait: a lock that is free when this
    /// runs (for instance after a spurious `compare_exchange_weak` failure on
    /// the fast path) is taken without allocating.
    #[cold]
    pub(crate) fn lock_slow(&self, deadline: Option<Instant>) -> Option<usize> {
        fork::watch();
        if self.stale() {
            return self.lock_stale(deadline);
        }
        #[cfg(numa_loom)]
        {
            sync::set_loom_handed(false);
            sync::set_loom_queue_parked(false);
            sync::set_loom_lot_parked(false);
        }
        let node = sync::current_node();
        let mut snode: Option<&Snode> = None;
        let mut round = 0u32;
        // A thread woken to compete re-parks at once while others are parked.
        let mut woken = false;
        // Untimed waiters queue on their snode, at every thread count (one
        // algorithm: a head that has not run since it was given head-ship
        // is passed over by unlocks while the lock is oversubscribed, see
        // `queue::grant`, so a descheduled waiter does not stall the queue).
        // Timed waiters, and heads out of budget, park in the snode's parking
        // queue (below). Under loom a thread without spin rounds parks at
        // once too, so the models of the parking paths do not grow by the
        // queue's steps.
        if deadline.is_none() && crate::spin::budget_allows_queueing() {
            // One look first: a lock that is free (a spurious failure of the
            // fast path's weak CAS) is taken without allocating an snode.
            // Then parking_lot's wait (`shared_cpu_spin`: until a queue
            // forms, on a CPU of this thread's own); on a CPU of its own the
            // pending spin, only while nobody is queued or parked (a spin
            // before the queue
            // whatever the waiters let arrivals take most releases from
            // woken waiters: on 2 CPUs with 32 threads their waits grew from
            // a few to 50-80 milliseconds).
            if self.try_lock() {
                return Some(node);
            }
            match self.shared_cpu_spin() {
                SharedCpu::Acquired => return Some(node),
                SharedCpu::Shared => {}
                SharedCpu::Own => {
                    if self.pending_spin() {
                        count!(acquired());
                        return Some(node);
                    }
                }
            }
            // Pinned: the snode stays this lock's until we drop the pin (the
            // queued wait drops it when it acquires; the other ways out below).
            let sn = self.snodes.pin(node);
            snode = Some(sn);
            match queue::wait(self.lock_ref(), sn) {
                // The pin went with the queue count.
                Queued::Acquired { granted } => {
                    #[cfg(numa_loom)]
                    sync::set_loom_handed(granted);
                    #[cfg(not(numa_loom))]
                    let _ = granted;
                    count!(acquired());
                    return Some(node);
                }
                // The head spent its spin budget: park at once.
                Queued::OutOfBudget => round = spin_rounds(),
            }
        }
        loop {
            // Relaxed: only a hint for the CAS below, which acquires.
            let s = self.state.load(Ordering::Relaxed);
            if s & LOCKED_BIT == 0 {
                // Acquire: pairs with the Release of the unlock that cleared
                // `LOCKED_BIT`, so the previous critical section happens before ours.
                if self
                    .state
                    .compare_exchange_weak(s, s | LOCKED_BIT, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    count!(word_write());
                    count!(acquired());
                    if let Some(sn) = snode {
                        sn.unpin();
                    }
                    return Some(node);
                }
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // We are counted nowhere but in our pin: leaving needs no
                // handshake.
                if let Some(sn) = snode {
                    sn.unpin();
                }
                return None;
            }
            // Spin while the lock is likely to come soon: a bounded number of
            // rounds, and not at all when at least as many waiters are parked as
            // there are CPUs (then the holder or the next one is likely not
            // running). A woken thread that lost the race spins only while
            // nobody else is parked (parking_lot's rule): the unlock that woke
            // it has already passed the turn on, so it goes back to sleep.
            let limit = if woken { 1 } else { config::cpus() };
            if round < spin_rounds() && parked_count(s) < limit {
                round += 1;
                spin_round(round);
                continue;
            }
            let sn = *snode.get_or_insert_with(|| self.snodes.pin(node));
            #[cfg(numa_loom)]
            sync::set_loom_lot_parked(true);
            match self.park_on(sn, deadline) {
                ParkResult::Unparked(TOKEN_HANDOFF) => {
                    #[cfg(numa_loom)]
                    sync::set_loom_handed(true);
                    count!(acquired());
                    sn.unpin();
                    return Some(node);
                }
                ParkResult::Unparked(_) => {
                    woken = true;
                    round = 0;
                }
                ParkResult::Invalid => {
                    round = 0;
                    // Relaxed: a hint. Invalid with the lock still held means
                    // the parked counter is full: yield instead of parking.
                    if self.state.load(Ordering::Relaxed) & LOCKED_BIT != 0 {
                        sync::yield_now();
                    }
                }
                ParkResult::TimedOut => {
                    sn.unpin();
                    return None;
                }
            }
        }
    }

    /// The first waiter's spin on the word before it queues (qspinlock's
    /// *pending* waiter, Linux `kernel/locking/qspinlock.c`: the second
    /// contender waits on the lock word, only later ones queue): while
    /// nobody is queued as a registered head or parked, and no other thread
    /// takes this process's CPUs ([`crate::spin::cpus_contended`]), up to
    /// [`PENDING_ROUNDS`] rounds of pauses, taking the word if it comes
    /// free. Two threads that take turns then never touch an snode (no
    /// attach, no queue, no detach per acquisition). `true` once it holds
    /// the lock. Not under loom (the models queue at once).
    #[inline]
    fn pending_spin(&self) -> bool {
        #[cfg(numa_loom)]
        {
            false
        }
        #[cfg(not(numa_loom))]
        {
            let mut round = 0u32;
            loop {
                // Relaxed: a hint for the CAS, which acquires.
                let s = self.state.load(Ordering::Relaxed);
                if s & (HEAD_MASK | PARKED_MASK) != 0 || crate::spin::cpus_contended() {
                    return false;
                }
                if s & LOCKED_BIT == 0 {
                    // Acquire: pairs with the Release of the unlock that
                    // freed the word, as in `try_lock`.
                    if self
                        .state
                        .compare_exchange_weak(
                            s,
                            s | LOCKED_BIT,
                            Ordering::Acquire,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        count!(word_write());
                        return true;
                    }
                    continue;
                }
                if round >= PENDING_ROUNDS {
                    return false;
                }
                round += 1;
                for _ in 0..(1u32 << (round - 1)) {
                    sync::spin_loop();
                }
            }
        }
    }

    /// The first wait of an arrival that found the lock held: parking_lot's
    /// schedule ([`SPIN_ROUNDS`](crate::spin::SPIN_ROUNDS) rounds: 3 rounds
    /// of pauses, then timed yields), taking the word whenever it is free.
    /// How it ends depends on what the thread knows of its CPU
    /// ([`crate::spin::first_wait`]):
    /// - a CPU of its own (its last yield returned at once, and no waiter
    ///   saw a slow yield lately): it ends as soon as a queue has formed (a
    ///   registered head or a parked waiter in the word), and the waiter
    ///   joins it; alone, after the whole schedule. A yield that lasted a
    ///   time slice turns it into the next case;
    /// - a shared CPU (its last yield ran another thread, or a waiter saw a
    ///   slow yield lately, [`crate::spin::cpus_contended`]): the whole
    ///   schedule, unless one of its yields returns at once while the CPUs
    ///   are not contended (the waiter then goes on as on a CPU of its own,
    ///   so a note that went stale costs one wait 7 pauses).
    ///
    /// Where every thread has a CPU and the lock is hot, a queue is formed
    /// almost always, and an arrival joins it after a few pauses: CST's
    /// queue and batches are what a machine with enough CPUs sees. A forced
    /// CPU count ([`config::set_cpus`]) skips this wait, as it skips every
    /// other sign of shared CPUs. Not under loom (the models queue at once).
    ///
    /// Two threads taking turns on two CPUs never form a queue, so they wait
    /// as parking_lot's waiters do. Measured on the 2-CPU development machine
    /// (threads on 2 virtual nodes, `numa-bench compare --locks
    /// cst,parking_lot --workloads locktorture,kv --threads 2 --repeat 5
    /// --duration 0.3s`, 10 interleaved rounds, medians of per-repeat ratios
    /// to parking_lot), against one yield first and then the pending spin
    /// ([`Cohort::pending_spin`]) on a CPU of its own:
    /// - kv (a map read 90% of the time, little work between calls): 0.965
    ///   against 0.905 (the waiter lost its turns during the yield);
    /// - locktorture: 1.01 against 1.25 (the yield left the holder runs of
    ///   acquisitions with the lock's and the data's lines local).
    ///
    /// Queueing after the pending spin alone, with no wait before it, ran
    /// locktorture at 0.60.
    ///
    /// A queue serves its waiters in order, and on a CPU that other threads
    /// share a queued waiter is often not running when its turn comes: it
    /// sleeps until head-ship while running threads take the lock, and a
    /// sleeping waiter leaves its share of the CPU to the other threads
    /// (which may not want the lock at all). A waiter that spins and yields
    /// instead gets the lock the next time it runs while the lock is free,
    /// and the yields run a holder that was preempted on this CPU. Pauses
    /// come first because a yield that does run another thread gives the
    /// CPU away for 3-100 us, while a holder running on another CPU
    /// releases a short critical section within a few pauses. Measured on
    /// the 2-CPU development machine: tokio's multi-thread runtime with 32
    /// workers through the parking_lot drop-in (`BACKENDS=cst THREADS=32
    /// WORKLOADS=tokio scripts/compat-bench.sh`, 7-24 interleaved rounds)
    /// ran at 0.84-0.89x unpatched parking_lot yielding first (3,600-4,800
    /// yields a second, against parking_lot's 400) and 0.94-0.96x with the
    /// pauses first. The price is locktorture at 32 threads with nothing
    /// else on the CPUs (`numa-bench compare`, 6-8 interleaved rounds per
    /// run): the waiters now catch releases during their pauses, so in most
    /// rounds the lock changes hands (and virtual nodes) 200-480 times per
    /// 1,000 acquisitions instead of 20-50, its p99 acquire latency fell
    /// from 53-91 us to 0.1-0.4 us, and its throughput from 1.13-1.15x
    /// parking_lot to 0.92-1.01x (medians of three runs).
    ///
    /// Measured there too, threads on 2 virtual nodes (`numa-bench compare
    /// --locks cst,parking_lot --workloads locktorture,kv --threads 2,32
    /// --virtual-nodes 2`, 3 interleaved rounds), ratios to parking_lot:
    /// beside one CPU-bound thread (`--hog 1`) locktorture at 32 threads
    /// 0.82 queueing at once, 1.01 with this wait, and 0.79 and 0.97 at 2
    /// threads; without it 1.12 and 1.42 at 32 threads. Queueing at once,
    /// 20-26 of the 32 workers slept at any time beside the CPU-bound
    /// thread, against 1 of parking_lot's.
    #[inline]
    fn shared_cpu_spin(&self) -> SharedCpu {
        #[cfg(numa_loom)]
        {
            SharedCpu::Own
        }
        #[cfg(not(numa_loom))]
        {
            if config::cpus_forced() {
                return SharedCpu::Own;
            }
            use crate::spin::{FirstWait, PAUSE_ROUNDS, YieldSeen, cpus_contended, timed_yield};
            let mut own = crate::spin::first_wait() == FirstWait::Own;
            for round in 1..=spin_rounds() {
                let seen = if round <= PAUSE_ROUNDS {
                    spin_round(round);
                    None
                } else {
                    Some(timed_yield())
                };
                if self.try_lock() {
                    return SharedCpu::Acquired;
                }
                match seen {
                    // Another thread ran for a time slice: the CPU is shared.
                    Some(YieldSeen::Slow) => own = false,
                    // A yield that returned at once (it also cleared the
                    // note): nothing else wants this CPU now, so the waiter
                    // goes on as on a CPU of its own.
                    Some(YieldSeen::Returned) if !own && !cpus_contended() => {
                        return SharedCpu::Own;
                    }
                    _ => {}
                }
                // Relaxed: a hint; the queue orders whatever it finds.
                if own && self.state.load(Ordering::Relaxed) & (HEAD_MASK | PARKED_MASK) != 0 {
                    return SharedCpu::Own;
                }
            }
            if own {
                SharedCpu::Own
            } else {
                SharedCpu::Shared
            }
        }
    }

    /// Parks the calling thread on `snode` while the lock is held.
    fn park_on(&self, snode: &Snode, deadline: Option<Instant>) -> ParkResult {
        let validate = || {
            let mut s = self.state.load(Ordering::Relaxed);
            loop {
                // Not parking on a free lock is what prevents lost wake-ups; a
                // full parked counter ([`PARKED_MAX`] threads) makes us yield
                // and retry instead.
                if s & LOCKED_BIT == 0 || s & PARKED_MASK == PARKED_MASK {
                    return false;
                }
                // Count ourselves in the snode first, so an unlocker that sees
                // the word's count finds a snode count too (once visible: see
                // `unlock_slow`, which retries on a stale one).
                snode.hot.parked.fetch_add(1, Ordering::Relaxed);
                // Relaxed, as parking_lot sets its `PARKED_BIT`: what prevents
                // lost wake-ups is that this CAS and every unlock's RMW of
                // `LOCKED_BIT` are RMWs of one word, so one of them sees the
                // other (coherence, no cross-location order needed); nothing else is published (the
                // snode count is a hint, see above), and nothing is acquired: a
                // thread woken to compete takes the lock with an Acquire CAS,
                // one handed the lock synchronizes through the unpark.
                match self.state.compare_exchange_weak(
                    s,
                    s + PARKED_ONE,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        count!(word_write());
                        count!(snode_write(snode.node()));
                        return true;
                    }
                    Err(x) => {
                        snode.hot.parked.fetch_sub(1, Ordering::Relaxed);
                        s = x;
                    }
                }
            }
        };
        #[cfg(feature = "stats")]
        crate::stats::count(&snode.stats.parks);
        let timed_out = |_key: usize, _last: bool| {
            snode.hot.parked.fetch_sub(1, Ordering::Relaxed);
            self.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
            count!(word_write());
            count!(snode_write(snode.node()));
        };
        // SAFETY:
        // - the key is the address of an snode of this lock, which this crate controls;
        // - `validate` and `timed_out` only touch atomics: they neither unwind nor
        //   call into the parking lot;
        // - `before_sleep` is empty.
        unsafe {
            sync::park(
                snode.park_key(),
                validate,
                || {},
                timed_out,
                ParkToken(0),
                deadline,
            )
        }
    }

    /// Whether the lock's waiter state is a parent's: the process forked
    /// since a snode of the lock was attached or reset (see `fork.rs`).
    /// One relaxed load until the process first forks.
    #[inline]
    fn stale(&self) -> bool {
        let g = fork::generation();
        // Relaxed: the generation of an snode changes only while the lock
        // is held (attach publishes it with the snode; see
        // `forget_parent_waiters`), and a stale read only sends us to the
        // slow wait of `lock_stale`, which takes the lock and looks again.
        g != 0
            && self
                .snodes
                .iter()
                .any(|sn| sn.generation.load(Ordering::Relaxed) != g)
    }

    /// The slow acquisition of a stale lock (the child of a fork whose
    /// snodes still hold the parent's waiters): no queue (it may end in a
    /// parent's waiter that never runs here), only the word, until this
    /// thread holds the lock and forgets the parent's waiters.
    #[cold]
    fn lock_stale(&self, deadline: Option<Instant>) -> Option<usize> {
        let node = sync::current_node();
        let mut round = 0u32;
        loop {
            if self.try_lock() {
                if self.stale() {
                    self.forget_parent_waiters();
                }
                return Some(node);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            round = round.saturating_add(1);
            spin_round(round.min(spin_rounds().max(1)));
        }
    }

    /// Forgets the waiters of a parent process (the caller holds the lock
    /// in the child of a fork, see `fork.rs`): their queue entries, their
    /// registrations and parked counts in the word and the snodes. (Their
    /// records in the parking lot were taken out when the child started:
    /// `fork::Parked`.)
    /// Readers' holds are kept, as glibc keeps a lock's state across fork.
    #[cold]
    fn forget_parent_waiters(&self) {
        let g = fork::generation();
        for sn in self.snodes.iter() {
            let h = &sn.hot;
            // Relaxed: we hold the lock, and no thread of this process uses
            // the snode's waiting state: the child's waiters keep out of
            // stale snodes (`lock_stale`) until this reset, which the
            // lock's release publishes.
            h.queue.tail.store(std::ptr::null_mut(), Ordering::Relaxed);
            h.queue.head.store(std::ptr::null_mut(), Ordering::Relaxed);
            h.parked.store(0, Ordering::Relaxed);
            h.batch.store(0, Ordering::Relaxed);
            h.fair_since_ns.store(0, Ordering::Relaxed);
            h.users.store(0, Ordering::Relaxed);
            sn.generation.store(g, Ordering::Relaxed);
        }
        // Relaxed: we hold the lock; the release that follows publishes.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            match self.state.compare_exchange_weak(
                s,
                s & !(HEAD_MASK | PARKED_MASK | DETACH_BIT),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(x) => s = x,
            }
        }
    }

    /// Fast unlock: `LOCKED_BIT -> 0` when nothing else is set. On failure
    /// returns the observed state for [`Cohort::unlock_slow`].
    #[inline]
    pub(crate) fn try_unlock_fast(&self) -> Result<(), usize> {
        // Relaxed: a first look. A word with anything besides `LOCKED_BIT`
        // (a registered head, parked waiters) goes to the slow unlock without
        // a read-modify-write: a failed CAS still takes the line exclusive,
        // and the heads of other nodes are reading it, so a hand-off inside
        // a node would move the global word's line for nothing.
        let s = self.state.load(Ordering::Relaxed);
        if s != LOCKED_BIT {
            return Err(s);
        }
        let r = self
            .state
            .compare_exchange(LOCKED_BIT, 0, Ordering::Release, Ordering::Relaxed)
            .map(drop);
        if r.is_ok() {
            count!(word_write());
        }
        r
    }

    /// Slow unlock: some thread is parked or registered as a queue head (or
    /// the rwlock has other bits set). `s` is the last observed state; `node`
    /// is the unlocker's node ([`UNKNOWN_NODE`] to look it up); `fair`
    /// forces a hand-off when anyone waits.
    ///
    /// The order of the module docs: a grant to the own node's registered head
    /// in its batch; a grant to another node's head (or the own one's, its
    /// batch restarting) unless a parked waiter's fairness is due; a wake-up
    /// of one parked waiter, released or handed the lock inside the unpark
    /// callback; else the release CAS. Every one of these ends the unlock with
    /// one releasing step (the grant's store, the callback's RMW, the CAS)
    /// after which nothing of the lock is touched: the last unlocker of a lock
    /// that another thread then frees is done with it.
    #[cold]
    pub(crate) fn unlock_slow(&self, mut s: usize, node: usize, fair: bool) {
        if self.stale() {
            self.forget_parent_waiters();
            // Relaxed: as the caller's first read; every decision below is a
            // CAS on the word.
            s = self.state.load(Ordering::Relaxed);
        }
        let mut node = node;
        #[cfg(feature = "stats")]
        let writes_before = crate::stats::word_writes_now();
        loop {
            if s & HEAD_MASK != 0 {
                if node == UNKNOWN_NODE {
                    node = sync::current_node();
                }
                let exhausted = match self.grant_own_in_batch(node, fair) {
                    OwnGrant::Granted => {
                        count!(local_handoff(
                            crate::stats::word_writes_now() - writes_before
                        ));
                        return;
                    }
                    OwnGrant::Exhausted => true,
                    OwnGrant::NoHead => false,
                };
                // Another node's head is granted at the end of a batch (CST's
                // move to the next node) or for `unlock_fair`; when the
                // unlocker's node merely has nobody queued, the word is
                // released below and the other heads take it by CAS, while
                // running threads may barge (a grant to another node on every
                // such unlock would make two threads of two nodes alternate
                // strictly, each hand-off a cache miss).
                if (exhausted || fair)
                    && (parked_count(s) == 0 || !self.parked_fairness_due())
                    && self.grant_next_head(node, fair)
                {
                    return;
                }
            }
            if parked_count(s) == 0 {
                if s & DETACH_BIT != 0 && s & HEAD_MASK == 0 {
                    // Still holding the lock: the snodes go back if nobody
                    // uses them (a waiter that does detaches them once it
                    // holds the lock, as every slow acquisition does).
                    self.snodes_to_pool();
                }
                // Release: publishes the critical section to the next acquirer.
                // The CAS fails if a waiter raised the parked or head count
                // (both are RMWs of this word), so nobody waits unseen.
                match self.state.compare_exchange(
                    s,
                    s & !(LOCKED_BIT | DETACH_BIT),
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        count!(word_write());
                        return;
                    }
                    Err(x) => {
                        s = x;
                        continue;
                    }
                }
            }
            if node == UNKNOWN_NODE {
                node = sync::current_node();
            }
            match self.pick_target(node) {
                Some(target) => {
                    if self.wake_one(target, fair) {
                        return;
                    }
                }
                // The word counts a waiter whose snode count is already
                // gone: a timeout callback is between its two decrements.
                None => sync::spin_loop(),
            }
            // Relaxed, as the caller's first read (the failure of
            // `try_unlock_fast`): the word's parked count is all that decides
            // whether we may release, and every decision on it is a CAS on this
            // word (coherence). The snode counts `pick_target` reads are hints:
            // one not yet visible only makes the pick come back empty or the
            // wake find nobody, and we loop; a waiter is queued under its
            // snode's queue lock before it counts itself, so the wake that
            // takes that lock after the count is visible finds it.
            s = self.state.load(Ordering::Relaxed);
        }
    }

    /// Grants the lock to the registered head of the unlocker's node while
    /// the node's batch is below the batch bound. The batch is counted before
    /// the grant (after it the lock is the head's) and taken back if nobody
    /// was there to claim.
    ///
    /// A head that has not run since head-ship may be passed over (see
    /// [`queue::grant`]); the batch then goes on, and the word is released
    /// for running threads. `fair` (`unlock_fair`) never passes it over.
    fn grant_own_in_batch(&self, node: usize, fair: bool) -> OwnGrant {
        let Some(own) = self.snodes.find(node) else {
            return OwnGrant::NoHead;
        };
        // Relaxed: the batch is written only by lock holders, ordered by the lock.
        let batch = own.hot.batch.load(Ordering::Relaxed);
        if batch >= config::unlock_batch_bound() {
            return OwnGrant::Exhausted;
        }
        if queue::has_head(own) {
            own.hot.batch.store(batch + 1, Ordering::Relaxed);
            match queue::grant(self.lock_ref(), own, !fair) {
                Grant::Granted => return OwnGrant::Granted,
                Grant::NotRunning => {
                    own.hot.batch.store(batch, Ordering::Relaxed);
                    return OwnGrant::NoHead;
                }
                Grant::NoHead => {}
            }
        }
        // No head: the batch is kept (not restarted), so a node whose
        // threads take the released word in turn cannot renew its batch
        // while another node waits; it restarts when the lock moves on
        // (`grant_next_head`, `pick_target`).
        OwnGrant::NoHead
    }

    /// Grants the lock to the registered head of the next snode after the
    /// unlocker's in the cyclic order, the unlocker's own last (then its
    /// batch restarts): CST's move to the next socket at the batch's end. A head
    /// that has not run since head-ship is passed over on an oversubscribed
    /// lock, except by `unlock_fair` (see [`queue::grant`]); the batch then
    /// stays spent, so the next unlock tries again.
    fn grant_next_head(&self, node: usize, fair: bool) -> bool {
        let own = self.snodes.find(node);
        let Some(start) = own.map_or_else(|| self.snodes.first(), |o| self.snodes.next_cyclic(o))
        else {
            return false;
        };
        let mut cur = start;
        loop {
            if queue::has_head(cur) {
                // Relaxed: batches are written only by lock holders.
                let own_batch = own.map(|o| o.hot.batch.load(Ordering::Relaxed));
                let cur_batch = cur.hot.batch.load(Ordering::Relaxed);
                if let Some(o) = own {
                    o.hot.batch.store(0, Ordering::Relaxed);
                }
                cur.hot.batch.store(1, Ordering::Relaxed);
                count!(snode_write(cur.node()));
                if queue::grant(self.lock_ref(), cur, !fair) == Grant::Granted {
                    return true;
                }
                if let (Some(o), Some(b)) = (own, own_batch) {
                    o.hot.batch.store(b, Ordering::Relaxed);
                }
                cur.hot.batch.store(cur_batch, Ordering::Relaxed);
            }
            match self.snodes.next_cyclic(cur) {
                Some(n) if !std::ptr::eq(n, start) => cur = n,
                _ => return false,
            }
        }
    }

    /// Whether a parked waiter may be owed its fairness hand-off: some snode
    /// with parked waiters has no fairness period running yet or one that is
    /// over. A hint read outside the queue locks (the wake-up decides under
    /// the lock with [`snode::fairness_due`](crate::snode::fairness_due)); it makes the unlock serve the
    /// parking queues before the running heads.
    fn parked_fairness_due(&self) -> bool {
        let now = config::fairness_now();
        self.snodes.iter().any(|sn| {
            // Relaxed: hints (see above).
            sn.hot.parked.load(Ordering::Relaxed) != 0 && snode_mod::fairness_hint(sn, now)
        })
    }

    /// Wakes one thread parked on `target` (for the requeue pseudo-snode: on
    /// [`Cohort::requeue_key`], where condvar waiters moved onto this lock sleep).
    /// The caller holds the lock. In the unpark callback (under the queue
    /// lock) the woken thread leaves the counts and either is handed the lock
    /// (forced by `fair`, or owed by eventual fairness: it stays locked and
    /// ownership passes) or the lock is released in the same atomic step and
    /// the thread competes. Returns whether a thread was woken; if not, the
    /// caller still holds the lock.
    fn wake_one(&self, target: &Snode, fair: bool) -> bool {
        // Outside the queue lock (the callback runs under it).
        let now = config::fairness_now();
        let callback = |r: sync::UnparkResult| {
            if r.unparked_threads == 0 {
                return TOKEN_NORMAL;
            }
            // Relaxed: changed only under this queue lock, which orders it.
            target.hot.parked.fetch_sub(1, Ordering::Relaxed);
            count!(snode_write(target.node()));
            #[cfg(feature = "stats")]
            crate::stats::count(&target.stats.wakeups);
            if fair || snode_mod::fairness_due(target, now) {
                #[cfg(feature = "stats")]
                crate::stats::count(&target.stats.parked_handoffs);
                // Relaxed: the lock stays locked and ownership moves to the
                // woken thread, which synchronizes with us through the parking
                // lot's unpark (token handoff), not through this word.
                self.state.fetch_sub(PARKED_ONE, Ordering::Relaxed);
                count!(word_write());
                count!(parked_handoff());
                TOKEN_HANDOFF
            } else {
                // Release: this is the unlock; the next acquirer's Acquire CAS
                // on `LOCKED_BIT` sees our critical section.
                self.state
                    .fetch_sub(PARKED_ONE | LOCKED_BIT, Ordering::Release);
                count!(word_write());
                TOKEN_NORMAL
            }
        };
        let key = if target.node() == REQUEUE_NODE {
            self.requeue_key()
        } else {
            target.park_key()
        };
        // SAFETY:
        // - the key is the address of an snode of this lock or this lock's
        //   requeue key, which this crate controls;
        // - the callback only touches atomics and reads the clock: it neither
        //   unwinds nor calls into the parking lot.
        let r = unsafe { sync::unpark_one(key, callback) };
        r.unparked_threads != 0
    }

    /// The parking key of the requeue queue: condvar waiters that
    /// `notify_all` moved onto this lock wait here (counted in the parked
    /// count and in the [`REQUEUE_NODE`] pseudo-snode). The lock's address + 3
    /// (so `notify_all` can name it without dereferencing the mutex): `RawRwLock` uses + 0 and
    /// + 1 for its reader and writer-drain queues, snodes are other allocations.
    #[inline]
    pub(crate) fn requeue_key(&self) -> usize {
        self as *const Cohort as usize + 3
    }

    /// The snode to serve next: the unlocker's own node while its batch lasts,
    /// then the next node with parked waiters in the cyclic snode order.
    fn pick_target(&self, node: usize) -> Option<&Snode> {
        let own = self.snodes.find(node);
        let bound = config::unlock_batch_bound();
        if let Some(o) = own
            && o.hot.parked.load(Ordering::Relaxed) != 0
            && o.hot.batch.load(Ordering::Relaxed) < bound
        {
            o.hot.batch.fetch_add(1, Ordering::Relaxed);
            return Some(o);
        }
        let start = match own {
            Some(o) => self.snodes.next_cyclic(o)?,
            None => self.snodes.first()?,
        };
        let mut cur = start;
        loop {
            if cur.hot.parked.load(Ordering::Relaxed) != 0 {
                if let Some(o) = own {
                    o.hot.batch.store(0, Ordering::Relaxed);
                }
                cur.hot.batch.store(0, Ordering::Relaxed);
                return Some(cur);
            }
            cur = self.snodes.next_cyclic(cur)?;
            if std::ptr::eq(cur, start) {
                return None;
            }
        }
    }
}
