//! The slow path: qspinlock's MCS queue with CNA's secondary queue, bounded lock
//! stealing and the fair hand-off.
//!
//! # Algorithm (Dice & Kogan, EuroSys 2019, sections 3-4; Linux CNA v15)
//!
//! 1. A thread that fails the fast path tries once more to steal, then appends its
//!    queue node to the main queue (CAS on the tail word) and links it behind its
//!    predecessor. It spins on its own node until it is told it is the *queue head*.
//! 2. The queue head spins on the lock word. While it waits (and only with
//!    `NUMA`), it scans the main queue behind it for the first waiter on the
//!    *preferred* node and moves the waiters in front of that one to the tail of the
//!    *secondary queue* (`order_queue`). Shuffle reduction: while the secondary
//!    queue is empty it scans only with probability `1 / shuffle_reduction`.
//! 3. When the lock word is free the head takes it with a CAS (competing with
//!    stealers), and passes head-ship to its successor (`pass_headship`) together
//!    with the preference and the secondary queue (CNA keeps the encoded secondary
//!    tail in the successor's `locked` field; we write a `HeadState` into the
//!    successor's `handoff` cell before the release store that makes it head).
//!    User-space deviation: a head that finds the lock already free (typical when
//!    it was descheduled while becoming head, so it never saw the lock busy) scans
//!    once after acquiring, before passing head-ship, as CNA v14 did in its
//!    hand-off. Without it an oversubscribed machine degenerates to FIFO order
//!    (measured: same-node hand-off ratio 0.2 instead of 0.98 in
//!    `tests/stress.rs`).
//! 4. If the secondary queue is older than `flush_threshold_ns` when a waiter
//!    becomes head, that head, once it holds the lock, splices the secondary queue in
//!    front of its successor: the preference moves to the node of the longest remote
//!    waiter. If the main queue is empty behind the head, the secondary queue
//!    becomes the main queue (the tail word is swung to the secondary tail).
//! 5. Priority waiters: the kernel never moves irq/RT waiters to the secondary
//!    queue. There is no such class in user space; the analogue here is
//!    `unlock_fair`, which hands the lock to the longest waiter: if the head
//!    inherited a non-empty secondary queue (whose waiters all arrived before it),
//!    the head, on receiving the `HANDED` lock word, re-queues itself behind that
//!    part of the secondary queue (the waiters it moved itself go back behind it)
//!    and hands the lock directly (`HEAD_OWNER`) to the secondary head; otherwise
//!    the head is the longest waiter and keeps the lock. Queued waiters then see
//!    `unlock_fair` hand-offs in arrival order (`fair_requeue`).
//!
//! # Memory orderings
//!
//! The kernel's CNA v15 was found wrong under the Linux kernel memory model
//! (Zhou et al., arXiv 2111.15240): a relaxed tail update let a new waiter link to a
//! secondary tail whose `next` had not been reset. Every ordering below carries its
//! argument; the loom models in `tests/loom.rs` check them, including the hand-off
//! cells through loom's race-detecting `UnsafeCell`.

use crate::config::{Config, Tunables};
use crate::node::{self, HEAD, HEAD_OWNER, HeadState, Me, QNode, WAIT, registry};
use crate::raw_lock::RawLock;
use crate::sync::{self, Ordering};
use crate::word::{HANDED, LOCKED, NO_STEAL, TAIL_FLAGS, TAIL_SHIFT, UNLOCKED};

/// The NUMA node recorded in the node named by `code`.
///
/// `code` must be a node the calling queue head reached through `next` links (see
/// the SAFETY comment).
#[inline]
fn numa_of(code: u32) -> u32 {
    // SAFETY: the node's owner wrote `numa` before publishing the node (the Release
    // enqueue CAS and the Release store linking it to its predecessor) and writes it
    // again only in a later `lock()`, after it was handed head-ship and acquired. The
    // caller (the single queue head) reached the node through `next` links read with
    // Acquire (linked by the owner with Release) or written by earlier heads, whose
    // writes happen-before through the head-ship chain (Release/Acquire on
    // `locked`); so the owner's write happens-before this read and its next write
    // happens-after it.
    registry().node(code).numa.with(|p| unsafe { *p })
}

/// How many waiters behind it a queue head of a blocking lock's core
/// ([`Tunables::wake_ahead`]) wakes ahead of their turn: the first 16 of
/// the queue stay awake (ShflLock's "waiters beyond the first few park").
///
/// A waiter woken as head-ship reaches it runs only after the OS's wake-up
/// latency (about 100 us for a 20 us sleep on the 2-CPU KVM guest), far more
/// than a head's tenure under contention (its steal bound, 10 us, plus a
/// critical section); so unless the next few heads are awake already, every
/// hand-off leaves a CPU with nothing to run. Measured on the 2-CPU guest,
/// `run --lock cst-next --workload locktorture --threads 32 --duration 3s
/// --virtual-nodes 2` (cst-mutex's mutex, now registered as `cst`), CPU
/// idle time from `/proc/stat` (ops/us): depth 1
/// 22.6% (12.4), 2 20.5% (13.2), 4 11.6% (14.2), 8 3.5-4.7% (13.5-14.6),
/// 12 0.3% (17.2), 16 0.3-0.8% (13.9-17.4), 32 0.2% (14.6); parking_lot 0.2%
/// (10.1), cst-mutex's former CST queue 0.3% (12.5).
const WAKE_AHEAD_DEPTH: usize = 16;

/// With [`Tunables::wake_ahead`]: the queue head, waiting for a held lock,
/// wakes the parked waiters among the first [`WAKE_AHEAD_DEPTH`] behind it
/// ([`node::wake_early`]), which then stay awake (yielding) until their
/// hand-off or for [`node::EARLY_WAKE_YIELD_NS`]. Returns whether it woke
/// one. Reads one line per waiter, each one its owner only reads while it
/// waits; the head walks when it starts to wait and at each of its pauses
/// once it has spent its spin budget, not while it spins for the release.
fn wake_successors(me: Me) -> bool {
    // Relaxed: we touch only the waiters' atomic `locked` and `next`, never
    // their cells, and any node we may name is valid memory (nodes are never
    // freed); a link read stale names a node that was in this queue, which
    // we may wake needlessly: it yields for a while, then parks again. The
    // walk stops at a zero link, so it never passes the queue's tail.
    let mut next = me.node.next.load(Ordering::Relaxed);
    let mut woke = false;
    for _ in 0..WAKE_AHEAD_DEPTH {
        if next == 0 {
            break;
        }
        let n = registry().node(next);
        woke |= node::wake_early(&n.locked);
        next = n.next.load(Ordering::Relaxed);
    }
    woke
}

impl<const NUMA: bool, T: Tunables> RawLock<NUMA, T> {
    /// Acquires the lock when the fast path failed.
    #[cold]
    #[inline(never)]
    pub(crate) fn lock_slow(&self) {
        let cfg = *self.tunables.config();
        // The lock may have been released since the fast path looked; while
        // the queue head is not running (asleep, or absent behind its
        // NO_STEAL mark), spin for the lock rather than queue behind it.
        if self.try_steal_free()
            || node::steal_while_head_asleep(&self.tail, &cfg, || self.try_steal_free())
            || node::steal_past_absent_head(&self.tail, &self.locked, &cfg)
        {
            return;
        }
        // Our node, and the rest of the lazily initialized state the queued
        // wait reads, before our queue node is initialized: the first lookup
        // allocates, which may re-enter this lock (see `node::before_enqueue`).
        let my_numa = node::before_enqueue();
        match node::current((self as *const Self).cast()) {
            Some(me) => {
                let _enqueued = crate::lazy::Enqueued::begin();
                self.lock_queued(me, my_numa, &cfg);
                // We hold the lock, so our node is in no queue and no other
                // thread holds its code (see `crate::node`).
                me.done();
            }
            None => node::lock_unqueued(&self.locked, &cfg),
        }
    }

    /// Enqueues `me`, on NUMA node `my_numa`, waits for head-ship, then for
    /// the lock. Reads no lazily initialized state (see
    /// `node::before_enqueue`).
    fn lock_queued(&self, me: Me, my_numa: u32, cfg: &Config) {
        let my = me.node;
        // Initialize our node. Relaxed: these stores are published by the Release of
        // the enqueue CAS and of the link store below, which every reader of the
        // node passes through.
        my.next.store(0, Ordering::Relaxed);
        my.locked.store(WAIT, Ordering::Relaxed);
        my.set_generation();
        // SAFETY: our node is in no queue (one node per thread, and our previous use
        // ended before our previous `lock()` returned): no queue head can reach it,
        // and the last head that read `numa` did so before handing us head-ship
        // (Release/Acquire), so this write does not race.
        my.numa.with_mut(|p| unsafe { *p = my_numa });

        let strict = cfg.steal_bound_ns == 0;
        let mut old = self.tail.load(Ordering::Relaxed);
        loop {
            let new =
                (me.code << TAIL_SHIFT) | (old & TAIL_FLAGS) | if strict { NO_STEAL } else { 0 };
            // AcqRel on success. Release: publishes our node's initialization to the
            // thread that enqueues behind us (it reads this value, then writes our
            // `next`) and to a head swinging the tail. Acquire: our predecessor's
            // initialization (its `next = 0`) must happen-before our write of its
            // `next`, or its reset could overwrite our link. RMWs by other threads on
            // the tail (NO_STEAL updates) continue the release sequence.
            // Relaxed on failure: we retry with the value read.
            match self
                .tail
                .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(seen) => old = seen,
            }
        }
        // A predecessor queued before a fork, by a thread this process does
        // not have, is gone, and so is the queue ahead of it: we are the head.
        let pred = node::live_pred(old >> TAIL_SHIFT);
        sync::trace(|| format!("enqueued code {} pred {pred} tail {old:#x}", me.code));
        #[cfg(numa_loom)]
        sync::note_enqueued();

        let mut headship = if pred == 0 {
            (
                HEAD,
                HeadState {
                    pref: my_numa,
                    ..HeadState::EMPTY
                },
            )
        } else {
            // Release: the head that follows this link reads our `numa` (written
            // above) after an Acquire load of this `next`.
            registry().node(pred).next.store(me.code, Ordering::Release);
            self.await_headship(my, my_numa, cfg)
        };
        loop {
            let (flag, mut state) = headship;
            if flag == HEAD_OWNER {
                // An `unlock_fair` gave us the lock through the previous head.
                self.pass_headship(me, &state, false, cfg);
                return;
            }
            if self.wait_as_head(me, &mut state, cfg) {
                return;
            }
            // We handed a fair-unlocked lock to the secondary head and re-queued.
            headship = self.await_headship(my, my_numa, cfg);
        }
    }

    /// Waits on our node until a head makes us head; returns the flag and the
    /// inherited state.
    ///
    /// Spins for the spin budget, then parks or yields ([`node::wait_signal`], the
    /// waiting policy shared with the HQ lock); the head that hands head-ship over
    /// wakes us ([`node::signal`] in `hand_off`).
    fn await_headship(&self, my: &QNode, my_numa: u32, cfg: &Config) -> (u32, HeadState) {
        // Acquire inside: pairs with the Release swap in `hand_off`, making the
        // hand-off cell, the queue links the previous heads rewrote, and (for
        // HEAD_OWNER) the previous critical section visible to us.
        let flag = node::wait_signal(&my.locked, cfg);
        sync::trace(|| format!("headship {flag}"));
        // SAFETY: the previous head wrote the cell before its Release store of
        // `locked`, which we read with Acquire above; no head writes it again until we
        // are waiting again (only the head writes hand-off cells, only of waiting
        // nodes, and we are now the head).
        let mut state = my.handoff.with(|p| unsafe { *p });
        if state.sec_head == 0 {
            // CNA: with no secondary queue the preference is the new head's own node.
            state.pref = my_numa;
        }
        (flag, state)
    }

    /// The queue head's wait: reorder the queue, bound stealing, take the lock.
    /// Returns `false` if it gave a fair-unlocked lock to the secondary head and
    /// re-queued itself.
    fn wait_as_head(&self, me: Me, state: &mut HeadState, cfg: &Config) -> bool {
        // The secondary queue we inherited holds only waiters queued before us (see
        // `fair_requeue`); the ones we move ourselves below were queued after us.
        let inherited_tail = state.sec_tail;
        let flush = NUMA
            && state.sec_head != 0
            && sync::now_ns().saturating_sub(state.sec_start) >= cfg.flush_threshold_ns;
        let scan =
            NUMA && !flush && (state.sec_head != 0 || node::one_in(cfg.shuffle_reduction.get()));
        let mut found = false;
        // With `Tunables::wake_ahead`: whether the first walk over the
        // waiters behind us is still to come.
        let wake_ahead = self.tunables.wake_ahead();
        let mut first_walk = wake_ahead;
        // The walks stop once we have waited as long as a waiter woken ahead
        // stays awake: a lock held that long lets them park again. Counted
        // from the first walk after our spin budget (a spin budget later than
        // the first walk: microseconds against EARLY_WAKE_YIELD_NS's 30 ms),
        // so that the clock is not read before our first look at the word, on
        // the path of every hand-off.
        let mut walk_until = None;
        let mut wait = node::HeadWait::start(&self.tail, cfg, "cna-asleep-nap");
        let handed = loop {
            // Relaxed: this load only picks the CAS to try; each CAS below acquires.
            match self.locked.load(Ordering::Relaxed) {
                UNLOCKED => {
                    // Acquire on success: pairs with the Release store of `unlock`.
                    if self
                        .locked
                        .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        sync::trace(|| "acquired as head".into());
                        break false;
                    }
                    // A stealer won; the lock is held again.
                }
                HANDED => {
                    // `unlock_fair` left the lock to the queue head. HANDED is a
                    // token that must be consumed exactly once, so we take it with an
                    // RMW, like every other acquisition, rather than a load and a
                    // store: a head whose queue was emptied and re-formed after the
                    // token was taken (the previous head consumed it, cleared the
                    // tail, and we enqueued into the empty queue) can still read the
                    // old HANDED here on weak memory, because nothing orders the
                    // emptying of the tail before our enqueue. The CAS reads the
                    // latest value of the word, so only one head ever wins it; a
                    // loser saw a stale token and keeps waiting.
                    // Acquire on success: pairs with the Release store of
                    // `unlock_fair`; the previous critical section happens-before
                    // ours. Relaxed on failure: nothing was acquired.
                    if self
                        .locked
                        .compare_exchange(HANDED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break true;
                    }
                }
                _ => {
                    if scan && !found {
                        found = self.order_queue(me, state);
                    }
                    if wake_ahead
                        && (first_walk
                            || (wait.spun_out() && {
                                let now = sync::now_ns();
                                now < *walk_until
                                    .get_or_insert(now.saturating_add(node::EARLY_WAKE_YIELD_NS))
                            }))
                    {
                        first_walk = false;
                        if wake_successors(me) {
                            sync::event("cna-wake-ahead");
                            #[cfg(feature = "stats")]
                            self.counters.woke_ahead();
                        }
                    }
                    wait.held();
                }
            }
            wait.pause();
        };
        wait.acquired();
        if scan && !found {
            // We got the lock before we could reorder the queue (it was free when we
            // looked: typical when we were descheduled while becoming head). Scan
            // once now, as CNA v14 did in its hand-off (v15 dropped it because kernel
            // queue heads are never preempted). This lengthens our hold time by one
            // walk of the queue up to the first same-node waiter, only when a scan
            // was due anyway (shuffle reduction).
            found = self.order_queue(me, state);
            let mine = numa_of(me.code);
            if !found && state.pref != mine {
                // No waiter of the preferred node is queued behind us and the lock
                // is on our node now (we inherited the preference with a secondary
                // queue): let the preference follow the lock rather than hand it on
                // across nodes until the next flush. The flush deadline is kept, so
                // the secondary queue's wait stays bounded. (Not in CNA v15, where
                // the preference is passed on unchanged.)
                state.pref = mine;
                self.order_queue(me, state);
            }
        }
        if NUMA && handed && inherited_tail != 0 {
            self.fair_requeue(me, state, inherited_tail);
            return false;
        }
        self.pass_headship(me, state, flush, cfg);
        true
    }

    /// `unlock_fair` handed us the lock while the secondary queue we inherited is
    /// non-empty: its waiters were queued before us, so the lock goes to its head
    /// and we re-queue right behind the inherited part, restoring queue order:
    /// `inherited secondary, us, waiters we moved, rest of the main queue`.
    ///
    /// Why inherited waiters are older than us: a head moves only waiters that sit
    /// between itself and the waiter it makes the next head, and the main queue
    /// behind a head is in arrival order (a splice puts older secondary waiters in
    /// front). So when we became head, everyone in the secondary queue had arrived
    /// before us; those we moved during our own wait arrived after us.
    fn fair_requeue(&self, me: Me, state: &HeadState, inherited_tail: u32) {
        let reg = registry();
        // All stores Relaxed: these links and our `locked` are next read by heads
        // that get head-ship through the Release store in `hand_off` below; none of
        // these fields can be written concurrently (every node involved has its
        // `next` set, or is the secondary tail, whose `next` nobody else writes).
        let moved_head = reg.node(inherited_tail).next.load(Ordering::Relaxed);
        if moved_head != 0 {
            // We moved [moved_head, sec_tail] out from between us and our current
            // successor (which is therefore non-zero); put them back there.
            let successor = me.node.next.load(Ordering::Relaxed);
            reg.node(state.sec_tail)
                .next
                .store(successor, Ordering::Relaxed);
            me.node.next.store(moved_head, Ordering::Relaxed);
        }
        me.node.locked.store(WAIT, Ordering::Relaxed);
        reg.node(inherited_tail)
            .next
            .store(me.code, Ordering::Relaxed);
        #[cfg(feature = "stats")]
        self.counters.flushed();
        self.hand_off(state.sec_head, HeadState::EMPTY, HEAD_OWNER);
    }

    /// Scans the main queue behind the head for the first waiter on the preferred
    /// node; moves the waiters before it to the tail of the secondary queue.
    /// Returns whether our successor is now on the preferred node. Only nodes whose
    /// `next` is set are moved, so the main queue's tail (which new waiters link to)
    /// is never moved.
    fn order_queue(&self, me: Me, state: &mut HeadState) -> bool {
        let reg = registry();
        // Acquire (here and below): a `next` may have just been linked by a new
        // waiter (Release), and we then read that waiter's `numa`.
        let first = me.node.next.load(Ordering::Acquire);
        if first == 0 {
            return false;
        }
        if numa_of(first) == state.pref {
            return true;
        }
        let mut last = first;
        loop {
            let cur = reg.node(last).next.load(Ordering::Acquire);
            if cur == 0 {
                return false;
            }
            if numa_of(cur) == state.pref {
                // Relaxed: these links are read only by queue heads, which get
                // head-ship (and so these writes) through the Release/Acquire chain on
                // `locked`. None of these fields can be written concurrently: their
                // `next` is already set, so no new waiter links to them.
                me.node.next.store(cur, Ordering::Relaxed);
                reg.node(last).next.store(0, Ordering::Relaxed);
                if state.sec_head == 0 {
                    state.sec_head = first;
                    state.sec_start = sync::now_ns();
                } else {
                    reg.node(state.sec_tail)
                        .next
                        .store(first, Ordering::Relaxed);
                }
                state.sec_tail = last;
                return true;
            }
            last = cur;
        }
    }

    /// We hold the lock: make the next waiter head (or empty the queue).
    fn pass_headship(&self, me: Me, state: &HeadState, flush: bool, cfg: &Config) {
        let has_secondary = NUMA && state.sec_head != 0;
        let mut next = me.node.next.load(Ordering::Acquire);
        if next == 0 {
            let mut cur = self.tail.load(Ordering::Relaxed);
            // A CAS that fails on the flags alone is retried: a timed waiter
            // past its steal bound sets `NO_STEAL` at any moment
            // (`crate::timed`), and a failure read as "a waiter swapped the
            // tail" would wait for a link that never comes.
            while cur >> TAIL_SHIFT == me.code {
                if !has_secondary {
                    // Both queues are empty: clear the tail (and NO_STEAL). Relaxed:
                    // no node is published by a zero tail; a thread enqueueing next
                    // finds no predecessor and touches no node of ours.
                    match self
                        .tail
                        .compare_exchange(cur, 0, Ordering::Relaxed, Ordering::Relaxed)
                    {
                        Ok(_) => {
                            sync::trace(|| "queue emptied".into());
                            return;
                        }
                        Err(seen) => {
                            if seen >> TAIL_SHIFT == me.code {
                                sync::event("empty-cas-retry");
                            }
                            cur = seen;
                        }
                    }
                } else {
                    // The main queue is empty: the secondary queue becomes the main
                    // queue. NO_STEAL is kept as is (a strict-mode head's, or a
                    // timed waiter's); HEAD_ASLEEP is clear (we run), `hand_off`
                    // sets it if needed.
                    // Release: the next waiter reads this tail with Acquire and writes
                    // `sec_tail.next`; the reset of that field to 0 (by the head that
                    // appended it, passed to us through the head-ship chain) must
                    // happen-before that write (the v15 bug, arXiv 2111.15240).
                    let new = (state.sec_tail << TAIL_SHIFT) | (cur & NO_STEAL);
                    match self
                        .tail
                        .compare_exchange(cur, new, Ordering::Release, Ordering::Relaxed)
                    {
                        Ok(_) => {
                            #[cfg(feature = "stats")]
                            self.counters.flushed();
                            self.hand_off(state.sec_head, HeadState::EMPTY, HEAD);
                            return;
                        }
                        Err(seen) => {
                            if seen >> TAIL_SHIFT == me.code {
                                sync::event("empty-cas-retry");
                            }
                            cur = seen;
                        }
                    }
                }
            }
            // A waiter swapped the tail but has not linked to us yet. Acquire
            // inside: pairs with the waiter's Release link; we write its cells.
            next = node::wait_link(&me.node.next, cfg);
        }
        if has_secondary && flush {
            // Threshold reached: splice the secondary queue in front of `next`.
            // Relaxed: read by the heads that follow, through the hand-off chain.
            registry()
                .node(state.sec_tail)
                .next
                .store(next, Ordering::Relaxed);
            #[cfg(feature = "stats")]
            self.counters.flushed();
            self.hand_off(state.sec_head, HeadState::EMPTY, HEAD);
        } else {
            self.hand_off(next, *state, HEAD);
        }
    }

    /// Makes the waiter `to` head, passing `state`; our last access to its node.
    fn hand_off(&self, to: u32, state: HeadState, flag: u32) {
        let node = registry().node(to);
        sync::trace(|| {
            format!(
                "hand_off to {to} at {:p} flag {flag} {state:?}",
                node as *const QNode
            )
        });
        // SAFETY: `to` is waiting (its `locked` is WAIT) and reads its hand-off cell
        // only after an Acquire load returns the non-WAIT value we store below with
        // Release; only the queue head writes hand-off cells, and we are the only
        // head; its previous read of the cell (in an earlier head-ship) happened before
        // it re-enqueued, which happened-before we reached it through a link.
        node.handoff.with_mut(|p| unsafe { *p = state });
        // Release inside (a swap, waking the waiter if it parked): publishes the
        // cell, our queue rewiring, and (HEAD_OWNER) our critical section to the
        // new head's Acquire load in `node::wait_signal`.
        if flag == HEAD {
            // A head that parked is marked asleep until it runs.
            node::pass_head_ship(&self.tail, &node.locked, flag, "cna-asleep-hand-off");
        } else {
            node::signal(&node.locked, flag);
        }
        sync::trace(|| "handed".into());
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use crate::head_tests::{TestLock, await_new_tail};
    use crate::node;
    use crate::{Config, RawTunedMutex};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as StdOrdering};
    use std::time::{Duration, Instant};

    /// Strict FIFO: nobody may take the lock past a queued waiter.
    static STRICT: Config = Config::DEFAULT.steal_bound_ns(0);
    static LOCK: RawTunedMutex = RawTunedMutex::with_config(&STRICT);
    static ACQUIRED_IN_DESTRUCTOR: AtomicBool = AtomicBool::new(false);
    static HAMMERED: AtomicU64 = AtomicU64::new(0);

    /// Takes `LOCK` when the thread's thread-locals are destroyed.
    struct LockOnExit;
    impl Drop for LockOnExit {
        fn drop(&mut self) {
            LOCK.acquire();
            // SAFETY: acquired above.
            unsafe { LOCK.release() };
            ACQUIRED_IN_DESTRUCTOR.store(true, StdOrdering::Relaxed);
        }
    }
    std::thread_local! {
        static LOCK_ON_EXIT: LockOnExit = const { LockOnExit };
    }

    impl TestLock for RawTunedMutex {
        fn with_test_config(cfg: &'static Config) -> Self {
            RawTunedMutex::with_config(cfg)
        }
        fn lock(&self) {
            self.acquire();
        }
        fn try_lock(&self) -> bool {
            self.try_acquire()
        }
        unsafe fn unlock(&self) {
            // SAFETY: the caller holds the lock.
            unsafe { self.release() };
        }
        fn tail(&self) -> &crate::sync::AtomicU32 {
            &self.tail
        }
        fn newest(t: u32) -> u32 {
            t >> crate::word::TAIL_SHIFT
        }
        fn naming(code: u32) -> u32 {
            code << crate::word::TAIL_SHIFT
        }
        #[cfg(feature = "stats")]
        fn stats(&self) -> crate::Stats {
            self.stats()
        }
    }

    /// Strict FIFO keeps `NO_STEAL` set across every enqueue, the second
    /// waiter's included (it must not toggle the flag the first one set), so
    /// nobody can steal the lock past the queue.
    #[test]
    fn strict_fifo_keeps_no_steal_across_enqueues() {
        use crate::word::NO_STEAL;
        let lock = std::sync::Arc::new(RawTunedMutex::with_config(&STRICT));
        lock.acquire();
        let mut waiters = Vec::new();
        let mut codes = Vec::new();
        for _ in 0..2 {
            let l = lock.clone();
            waiters.push(std::thread::spawn(move || {
                l.acquire();
                // SAFETY: acquired above.
                unsafe { l.release() };
            }));
            codes.push(await_new_tail(&*lock, &codes));
            assert_ne!(
                lock.tail.load(StdOrdering::SeqCst) & NO_STEAL,
                0,
                "strict mode lost NO_STEAL after {} enqueues",
                codes.len()
            );
        }
        // SAFETY: acquired above.
        unsafe { lock.release() };
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(lock.tail.load(StdOrdering::SeqCst), 0);
    }

    /// The first queue head (one that found the queue empty) prefers its own
    /// node: behind a head on node 1, a node-0 waiter queued before a node-1
    /// waiter goes to the secondary queue, so the node-1 waiter acquires next.
    /// The head reorders while it waits, before the lock is free.
    #[test]
    fn first_head_prefers_its_own_node() {
        let (lock, order, codes, waiters) =
            queue_behind_held(&NUMA_FIRST, &[("head", 1), ("w0", 0), ("w1", 1)]);
        // The head scans its queue while it waits: it links w1 right behind
        // itself (w0 moved to the secondary queue) while we hold the lock.
        let head = node::registry().node(codes[0]);
        let start = Instant::now();
        while head.next.load(StdOrdering::SeqCst) != codes[2] {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the head did not reorder its queue while it waited"
            );
            std::thread::yield_now();
        }
        let order = release_and_collect(&lock, &order, waiters);
        assert_eq!(order, ["head", "w1", "w0"]);
    }

    /// Spawns a thread on virtual node `node` that takes `lock` once, pushing
    /// `name` onto `order` inside, and waits until it has enqueued (its code is
    /// pushed onto `codes`).
    fn queue_named(
        lock: &std::sync::Arc<RawTunedMutex>,
        order: &Order,
        codes: &mut Vec<u32>,
        name: &'static str,
        node: usize,
    ) -> std::thread::JoinHandle<()> {
        let (l, order) = (lock.clone(), order.clone());
        let waiter = std::thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(node));
            l.acquire();
            order.lock().unwrap().push(name);
            // SAFETY: acquired above.
            unsafe { l.release() };
        });
        codes.push(await_new_tail(&**lock, codes));
        waiter
    }

    /// The acquisition order, by waiter name.
    type Order = std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>;

    /// Scans always, never flushes, lets anyone steal: the config of the
    /// queue-order tests.
    static NUMA_FIRST: Config = Config::DEFAULT
        .shuffle_reduction(std::num::NonZeroU32::MIN)
        .flush_threshold_ns(u64::MAX)
        .steal_bound_ns(u64::MAX);

    /// A held lock with `cfg` and, queued behind it in this order, one waiter
    /// per `(name, virtual node)` ([`queue_named`]); returns the lock, the
    /// order they will acquire in, their queue-node codes and their threads.
    fn queue_behind_held(
        cfg: &'static Config,
        waiters: &[(&'static str, usize)],
    ) -> (
        std::sync::Arc<RawTunedMutex>,
        Order,
        Vec<u32>,
        Vec<std::thread::JoinHandle<()>>,
    ) {
        let lock = std::sync::Arc::new(RawTunedMutex::with_config(cfg));
        let order = Order::default();
        lock.acquire();
        let mut codes = Vec::new();
        let threads = waiters
            .iter()
            .map(|&(name, node)| queue_named(&lock, &order, &mut codes, name, node))
            .collect();
        (lock, order, codes, threads)
    }

    /// Releases `lock` (held by the caller), waits for `waiters` and returns
    /// the order in which they acquired it.
    fn release_and_collect(
        lock: &RawTunedMutex,
        order: &Order,
        waiters: Vec<std::thread::JoinHandle<()>>,
    ) -> Vec<&'static str> {
        // SAFETY: the caller holds the lock.
        unsafe { lock.release() };
        for w in waiters {
            w.join().unwrap();
        }
        order.lock().unwrap().clone()
    }

    /// With scans made rare (shuffle reduction `u32::MAX`), a queue head that
    /// inherited no secondary queue does not reorder: behind a head on node 1,
    /// a node-0 waiter queued before a node-1 waiter still goes first.
    #[test]
    fn rare_scans_keep_fifo_order_without_a_secondary_queue() {
        static RARE_SCANS: Config = Config::DEFAULT
            .shuffle_reduction(std::num::NonZeroU32::MAX)
            .flush_threshold_ns(u64::MAX)
            .steal_bound_ns(u64::MAX);
        let (lock, order, _, waiters) =
            queue_behind_held(&RARE_SCANS, &[("head", 1), ("w0", 0), ("w1", 1)]);
        // Time for a head that (wrongly) scans to move w0 aside.
        std::thread::sleep(Duration::from_millis(50));
        let order = release_and_collect(&lock, &order, waiters);
        assert_eq!(order, ["head", "w0", "w1"]);
    }

    /// A queue head that inherits no secondary queue prefers its own node, not
    /// its predecessor's: head X (node 1) finds no node-1 waiter and hands
    /// head-ship to Y (node 0); W (node 1) and then Z (node 0) queue while X
    /// holds the lock; Y moves W aside and hands to Z.
    #[test]
    fn head_without_a_secondary_queue_prefers_its_own_node() {
        use std::sync::{Arc, Mutex};
        let lock = Arc::new(RawTunedMutex::with_config(&NUMA_FIRST));
        let order = Arc::new(Mutex::new(Vec::new()));
        lock.acquire();
        let mut codes = Vec::new();
        // X queues W and Z from inside its critical section, after it has
        // handed head-ship to Y (head-ship passes before `acquire` returns).
        let (l, o) = (lock.clone(), order.clone());
        let x = std::thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            l.acquire();
            o.lock().unwrap().push("X");
            let mut codes = vec![l.tail.load(StdOrdering::SeqCst) >> crate::word::TAIL_SHIFT];
            let w = queue_named(&l, &o, &mut codes, "W", 1);
            let z = queue_named(&l, &o, &mut codes, "Z", 0);
            // Y, the head, scans while it waits: give it time to link Z right
            // behind itself (W moved to the secondary queue).
            let y = node::registry().node(codes[0]);
            let start = Instant::now();
            while y.next.load(StdOrdering::SeqCst) != codes[2]
                && start.elapsed() < Duration::from_secs(2)
            {
                std::thread::yield_now();
            }
            // SAFETY: acquired above.
            unsafe { l.release() };
            (w, z)
        });
        codes.push(await_new_tail(&*lock, &codes));
        let y = queue_named(&lock, &order, &mut codes, "Y", 0);
        // SAFETY: acquired above.
        unsafe { lock.release() };
        let (w, z) = x.join().unwrap();
        for t in [y, w, z] {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["X", "Y", "Z", "W"]);
    }

    /// The preference follows the lock: a head that inherited a secondary
    /// queue and the preference for another node, and finds no waiter of that
    /// node, prefers its own. W (node 0) moves S (1) aside for X (0); X finds
    /// no node-0 waiter and hands on to H (1) with the secondary queue and the
    /// node-0 preference; H finds none either, prefers node 1, moves E (2)
    /// aside and hands to C (1); the secondary queue S, E goes last.
    #[test]
    fn preference_follows_the_lock_when_no_preferred_waiter_is_queued() {
        let (lock, order, _, waiters) = queue_behind_held(
            &NUMA_FIRST,
            &[("W", 0), ("S", 1), ("X", 0), ("H", 1), ("E", 2), ("C", 1)],
        );
        let order = release_and_collect(&lock, &order, waiters);
        assert_eq!(order, ["W", "X", "H", "C", "S", "E"]);
    }

    /// A `lock()` from a thread-local destructor that runs after the thread's
    /// queue-node slot was destroyed queues like any other (on a borrowed node)
    /// instead of waiting for a strict-FIFO queue that never drains: it gets the
    /// lock while 4 threads keep the queue busy. The hammering stops after 20 s
    /// at the latest; the destructor must have acquired before then.
    #[test]
    fn lock_from_thread_local_destructor_is_served_under_strict_fifo_load() {
        let _serial = node::tests::REGISTRY_USERS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(20);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while !stop.load(StdOrdering::Relaxed) && Instant::now() < deadline {
                        LOCK.acquire();
                        HAMMERED.fetch_add(1, StdOrdering::Relaxed);
                        // SAFETY: acquired above.
                        unsafe { LOCK.release() };
                    }
                });
            }
            // Let the hammering build a queue first.
            while HAMMERED.load(StdOrdering::Relaxed) < 10_000 && Instant::now() < deadline {
                std::thread::yield_now();
            }
            s.spawn(|| {
                // Registered first, so destroyed after the queue-node slot, which
                // `node::current()` registers now.
                LOCK_ON_EXIT.with(|_| {});
                assert!(node::current(std::ptr::null()).is_some_and(|me| !me.borrowed));
            });
            while !ACQUIRED_IN_DESTRUCTOR.load(StdOrdering::Relaxed) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let served_while_hammered = Instant::now() < deadline;
            stop.store(true, StdOrdering::Relaxed);
            assert!(
                served_while_hammered,
                "the destructor's lock() waited as long as the queue stayed busy (20 s)"
            );
        });
        assert!(ACQUIRED_IN_DESTRUCTOR.load(StdOrdering::Relaxed));
    }

    /// From the initialization of its queue node to the end of its slow path
    /// a waiter reads no lazily initialized process state (the node lookup,
    /// the process-wide tunables: they may allocate, and the lock may be the
    /// one inside the global allocator; see `node::before_enqueue`): CNA and
    /// the queued lock, with their own and with the process-wide tunables,
    /// stealing and strict FIFO.
    #[test]
    fn queued_waiters_read_no_lazily_initialized_state() {
        use crate::node::tests::queued_waits_and_lazy_reads;
        use crate::{RawMutex, RawQueuedMutex, RawTunedQueuedMutex};
        let results = [
            ("CNA", queued_waits_and_lazy_reads(&RawMutex::new())),
            (
                "queued",
                queued_waits_and_lazy_reads(&RawQueuedMutex::new()),
            ),
            (
                "strict CNA",
                queued_waits_and_lazy_reads(&RawTunedMutex::with_config(&STRICT)),
            ),
            (
                "strict queued",
                queued_waits_and_lazy_reads(&RawTunedQueuedMutex::with_config(&STRICT)),
            ),
        ];
        for (lock, (waits, reads)) in results {
            assert!(waits > 0, "{lock}: nobody queued");
            assert_eq!(reads, 0, "{lock}: lazy reads in {waits} queued waits");
        }
    }

    /// `config()` reports the lock's own tunables; `Debug` shows the flavour,
    /// whether the lock is held and whether waiters are queued.
    #[test]
    fn config_and_debug_show_the_lock() {
        static OWN: Config = Config::DEFAULT
            .steal_bound_ns(12_345)
            .spin_budget_ns(60_000_000_000);
        let lock = std::sync::Arc::new(RawTunedMutex::with_config(&OWN));
        assert_eq!(*lock.config(), OWN);
        assert_eq!(*crate::RawMutex::new().config(), *Config::global());
        let free = "RawLock { numa: true, locked: false, queued: false }";
        assert_eq!(format!("{lock:?}"), free);
        lock.acquire();
        let waiter = crate::head_tests::queue_tail_reader(&lock, &mut Vec::new());
        let queued = "RawLock { numa: true, locked: true, queued: true }";
        assert_eq!(format!("{lock:?}"), queued);
        // SAFETY: acquired above.
        unsafe { lock.release() };
        waiter.join().unwrap();
        assert_eq!(format!("{lock:?}"), free);
    }

    /// With [`Tunables::wake_ahead`](crate::Tunables::wake_ahead) the queue
    /// head wakes its successor once it has parked, while the lock is still
    /// held: `early_wakes` counts it. The head walks for
    /// `EARLY_WAKE_YIELD_NS` (30 ms) after its spin budget, then lets its
    /// successors sleep; a successor that parks later than that (a slow or
    /// busy machine: sanitizers, other tests) is rightly left asleep, so a
    /// scenario in which nothing was woken one window past the successor's
    /// queueing is run again, up to 10 times.
    #[cfg(feature = "stats")]
    #[test]
    fn a_queue_head_wakes_its_parked_successor_ahead_of_its_turn() {
        #[derive(Clone, Copy)]
        struct WakeAhead;
        static QUICK_PARK: Config = Config::DEFAULT.spin_budget_ns(1_000);
        impl crate::Tunables for WakeAhead {
            const DEFAULT: Self = WakeAhead;
            fn config(&self) -> &Config {
                &QUICK_PARK
            }
            fn wake_ahead(&self) -> bool {
                true
            }
        }
        let window = Duration::from_nanos(node::EARLY_WAKE_YIELD_NS);
        let mut woke = false;
        for _ in 0..10 {
            let lock =
                std::sync::Arc::new(crate::RawLock::<true, WakeAhead>::with_tunables(WakeAhead));
            lock.acquire();
            let mut waiters = Vec::new();
            let mut tails = vec![lock.tail_word()];
            for _ in 0..2 {
                let l = lock.clone();
                waiters.push(std::thread::spawn(move || {
                    l.acquire();
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                }));
                let start = Instant::now();
                while tails.contains(&lock.tail_word()) {
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "waiter never queued"
                    );
                    std::thread::yield_now();
                }
                tails.push(lock.tail_word());
            }
            // The second waiter parks after its 1 us budget; the first, the
            // queue head, wakes it while we still hold the lock.
            let queued = Instant::now();
            while lock.stats().early_wakes == 0 && queued.elapsed() < 2 * window {
                std::thread::sleep(Duration::from_micros(200));
            }
            woke = lock.stats().early_wakes > 0;
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                w.join().unwrap();
            }
            if woke {
                break;
            }
        }
        assert!(woke, "the head never woke its parked successor");
    }

    /// With counters: uncontended acquisitions count as such; a node-1 waiter
    /// queued behind a node-0 holder is one contended, cross-node acquisition.
    #[cfg(feature = "stats")]
    #[test]
    fn stats_count_acquisitions_and_node_changes() {
        static SPIN: Config = Config::DEFAULT.spin_budget_ns(60_000_000_000);
        let lock = std::sync::Arc::new(RawTunedMutex::with_config(&SPIN));
        numa_topology::set_current_thread_node(Some(0));
        for _ in 0..3 {
            lock.acquire();
            // SAFETY: acquired above.
            unsafe { lock.release() };
        }
        lock.acquire();
        let l = lock.clone();
        let waiter = std::thread::spawn(move || {
            numa_topology::set_current_thread_node(Some(1));
            l.acquire();
            // SAFETY: acquired above.
            unsafe { l.release() };
        });
        await_new_tail(&*lock, &[]);
        // SAFETY: acquired above.
        unsafe { lock.release() };
        waiter.join().unwrap();
        let s = lock.stats();
        let counts = (
            s.acquisitions,
            s.contended,
            s.same_node_handoffs,
            s.cross_node_handoffs,
        );
        assert_eq!(counts, (5, 1, 0, 1), "{s:?}");
    }
}
