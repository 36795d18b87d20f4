//! The HQ lock's modes: how a waiter enters the tail word (the plain queue,
//! joining the bound metadata, or binding metadata from the pool), the switch
//! from plain to NUMA mode when contention is detected, and the unbinding by
//! the last waiter out.

use super::pool::pool;
use super::{
    CODE_SHIFT, COUNT_MAX, COUNT_ONE, COUNT_SHIFT, END_OF_CHAIN, GO, MAX_PLAIN_CODE, META_MASK,
    META_SHIFT, NUMA_MODE, RawHqLock,
};
use crate::config::{Config, Tunables};
use crate::node::{self, Me, registry};
use crate::sync::{self, Ordering};
use crate::word::{NO_STEAL, TAIL_FLAGS};

/// How a waiter entered the queues.
pub(super) enum Entry {
    /// Plain mode, behind the waiter with this code (0 = first).
    Plain(u32),
    /// NUMA mode, in metadata `m`.
    Numa(u32),
}

impl<T: Tunables> RawHqLock<T> {
    /// Registers the caller in the tail word: joins the bound metadata (count +
    /// 1), or the plain queue, or, if the word is empty, binds metadata from the
    /// pool (plain mode if the pool is exhausted). `None`: no room in the word
    /// (code above 28 bits, or 2^18 - 1 waiters); wait without a queue.
    pub(super) fn enter(&self, me: Me, cfg: &Config) -> Option<Entry> {
        // Initialize our node. Relaxed: published by the Release of the enqueue
        // (the plain tail CAS below, or the node-queue tail swap in NUMA mode)
        // and of the link store, which every reader of the node passes through.
        me.node.next.store(0, Ordering::Relaxed);
        me.node.locked.store(node::WAIT, Ordering::Relaxed);
        me.node.set_generation();
        let strict = if cfg.steal_bound_ns == 0 { NO_STEAL } else { 0 };
        let hint = (self as *const Self as usize) >> 4;
        let mut claimed: Option<u32> = None;
        let mut t = self.tail.load(Ordering::Relaxed);
        let entry = loop {
            if t & NUMA_MODE != 0 {
                if t >> COUNT_SHIFT == COUNT_MAX {
                    break None;
                }
                // Acquire on success: pairs with the Release of the mode switch's
                // CAS (the count increments and decrements between continue its
                // release sequence), so the switcher's claim of the metadata, and
                // through it the previous binding's close of the gate, happen-
                // before our read of the gate: after a switch the gate must read
                // closed until the frozen plain queue has drained. It pairs as well
                // with the binding CAS's Release, publishing the binder's GO
                // (see the bind below). Relaxed on failure: we retry.
                match self.tail.compare_exchange_weak(
                    t,
                    (t + COUNT_ONE) | strict,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        sync::event("hq-join");
                        let m = (t >> META_SHIFT) & META_MASK;
                        if pool().meta(m).bound_before_fork() {
                            // Its waiters exist only in the parent: drop the
                            // binding, our count with it, and enter again.
                            t = self.drop_binding_from_before_fork(m);
                            continue;
                        }
                        break Some(Entry::Numa(m));
                    }
                    Err(seen) => t = seen,
                }
            } else if t & !TAIL_FLAGS != 0
                || cfg.hq_switch_threshold != 0
                || claimed.is_none() && !self.try_claim(&mut claimed, hint)
            {
                // Plain mode: a plain queue exists, or the episode starts plain
                // (contention detection), or the pool is exhausted.
                if me.code > MAX_PLAIN_CODE {
                    break None;
                }
                let new = (me.code << CODE_SHIFT) | (t & TAIL_FLAGS) | strict;
                // AcqRel on success, as CNA's enqueue: Release publishes our
                // node's initialization to the waiter that links behind us;
                // Acquire makes our predecessor's initialization (its `next = 0`)
                // happen-before our write of its `next`. Relaxed on failure.
                match self
                    .tail
                    .compare_exchange_weak(t, new, Ordering::AcqRel, Ordering::Relaxed)
                {
                    Ok(_) => {
                        sync::event("hq-plain");
                        #[cfg(numa_loom)]
                        sync::note_enqueued();
                        // A predecessor queued before a fork is gone, and so
                        // is the queue ahead of it (see `node::live_pred`).
                        break Some(Entry::Plain(node::live_pred(t >> CODE_SHIFT)));
                    }
                    Err(seen) => t = seen,
                }
            } else {
                let m = claimed.expect("claimed above");
                // No plain queue ahead: open the gate. Relaxed: published to
                // joiners by the binding CAS's Release below.
                pool().meta(m).gate.store(GO, Ordering::Relaxed);
                pool().meta(m).set_generation();
                let new = (m << META_SHIFT) | COUNT_ONE | NUMA_MODE | (t & TAIL_FLAGS) | strict;
                // Release on success: publishes our GO to every joiner. A
                // joiner's Acquire CAS on the tail reads this value or a later
                // one of its release sequence (joins and leaves are all
                // read-modify-writes), so our GO happens-before the joiner's
                // reads of the gate, which by coherence then read GO or a later
                // value, never the previous binding's close (the next close is
                // written only by the last one out, after this joiner left).
                // Without it a joiner could, in the C11/Rust model, read the
                // stale close, and even its CAS announcing the park could be
                // ordered before our GO in the gate's modification order
                // (read-modify-writes read the value just before them in that
                // order, not the newest), leaving it parked on a gate that only
                // END_OF_CHAIN wakes. loom cannot show it (its read-modify-
                // writes read the newest store), so the site is argued in
                // `scripts/ordering-mutants.allow`. Every other field a joiner
                // reads is either only read-modify-written (node queue tails,
                // the list tail) or reset by the node queue's local head, which
                // is ordered after the previous binding's accesses to that
                // queue by the queue tail's Release clearing CAS / AcqRel swap
                // (`pass_numa`, `lock_numa`). The joiners of a mode switch need
                // the claim as well: see `try_switch`. Relaxed on failure: we
                // retry.
                match self
                    .tail
                    .compare_exchange_weak(t, new, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => {
                        claimed = None;
                        sync::event("hq-bind");
                        #[cfg(feature = "stats")]
                        self.counters.hq_event(crate::stats::HqEvent::Bind);
                        break Some(Entry::Numa(m));
                    }
                    Err(seen) => t = seen,
                }
            }
        };
        if let Some(m) = claimed {
            // Claimed for a binding that another waiter made first: close the
            // gate we may have opened (Relaxed: published by `free`'s Release).
            pool().meta(m).gate.store(node::WAIT, Ordering::Relaxed);
            pool().free(m);
        }
        sync::trace(|| format!("entered code {} tail {t:#x}", me.code));
        entry
    }

    /// Claims pool metadata into `claimed`; false if the pool is exhausted.
    fn try_claim(&self, claimed: &mut Option<u32>, hint: usize) -> bool {
        *claimed = pool().claim(hint);
        if claimed.is_none() {
            sync::event("hq-pool-exhausted");
        }
        #[cfg(feature = "stats")]
        if claimed.is_none() {
            self.counters.hq_event(crate::stats::HqEvent::PoolFallback);
        }
        claimed.is_some()
    }

    /// Contention detected: switch the lock from plain to NUMA mode. The plain
    /// queue is frozen where it is (new waiters enter the metadata from now on)
    /// and keeps one reference in the count until its last waiter has passed.
    pub(super) fn try_switch(&self, me: Me) {
        let cur = self.tail.load(Ordering::Relaxed);
        if cur & NUMA_MODE != 0 || cur >> CODE_SHIFT == me.code {
            // Switched already (we are in a frozen plain queue), or nobody is
            // queued behind us: nothing to detect.
            return;
        }
        let hint = (self as *const Self as usize) >> 4;
        let mut claimed = None;
        if !self.try_claim(&mut claimed, hint) {
            return;
        }
        let m = claimed.expect("claimed above");
        pool().meta(m).set_generation();
        let new = (m << META_SHIFT) | COUNT_ONE | NUMA_MODE | (cur & TAIL_FLAGS);
        // AcqRel on success. Acquire: the last plain waiter's initialization of
        // its node (`next = 0`, before its Release enqueue CAS, which we read)
        // happens-before our END_OF_CHAIN store into it. Release: publishes our
        // claim of `m`, and through it the previous binding's close of the
        // gate, to the waiters that join with an Acquire increment: they must
        // find the gate closed (not that binding's stale GO) until the frozen
        // plain queue's last waiter opens it.
        // Relaxed on failure: a waiter enqueued meanwhile; the next head retries.
        match self
            .tail
            .compare_exchange(cur, new, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => {
                sync::event("hq-switch");
                #[cfg(feature = "stats")]
                self.counters.hq_event(crate::stats::HqEvent::ModeSwitch);
                sync::trace(|| format!("switched to meta {m}, plain tail {}", cur >> CODE_SHIFT));
                // Relaxed: the last plain waiter reads END_OF_CHAIN only as the
                // plain queue's head, which it became through the chain of
                // head-ship signals (Release swap, Acquire wait) that starts with
                // ours, after this store and the switch CAS: both happen-before
                // its read, so it sees END_OF_CHAIN and then the NUMA word. (That
                // the store lands after the waiter's `next = 0` is the switch
                // CAS's Acquire.)
                registry()
                    .node(cur >> CODE_SHIFT)
                    .next
                    .store(END_OF_CHAIN, Ordering::Relaxed);
            }
            Err(_) => pool().free(m),
        }
    }

    /// In a child of a fork, the tail word names metadata `m` bound before the
    /// fork ([`Meta::bound_before_fork`](super::pool::Meta::bound_before_fork)):
    /// its node queues, its list and the plain queue frozen by its mode switch
    /// hold waiters that exist only in the parent, and its count will never
    /// drop to 0. Empties the word (the lock starts a new contention episode;
    /// the lock word is kept) and returns the new tail word. The entry stays
    /// claimed for ever: nothing would reset its queues (a leak of one entry
    /// per lock that was in NUMA mode at the fork, as the ghosts' queue nodes
    /// leak, see `crate::node`).
    ///
    /// Every thread of the child that joins the word checks the binding's
    /// generation after its join, so no thread of the child waits in `m`;
    /// the joins that raced ours (each counted in the word) are dropped with
    /// it, and their threads enter again as we do. `m` is never freed, so a
    /// word that names `m` in NUMA mode is this stale binding.
    pub(super) fn drop_binding_from_before_fork(&self, m: u32) -> u32 {
        let mut t = self.tail.load(Ordering::Relaxed);
        while t & NUMA_MODE != 0 && (t >> META_SHIFT) & META_MASK == m {
            // Relaxed: an empty word publishes nothing (a thread that enqueues
            // next finds no predecessor); the flags of the ghost head go too.
            match self
                .tail
                .compare_exchange(t, 0, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    sync::event("hq-fork-unbind");
                    return 0;
                }
                Err(seen) => t = seen,
            }
        }
        t
    }

    /// Our last access to metadata `m` is done: leave the count; the last one out
    /// unbinds the lock and returns `m` to the pool.
    pub(super) fn leave(&self, m: u32) {
        let mut t = self.tail.load(Ordering::Relaxed);
        loop {
            debug_assert!(t & NUMA_MODE != 0 && (t >> META_SHIFT) & META_MASK == m);
            debug_assert!(t >> COUNT_SHIFT != 0);
            // The last one out clears the word (and the flags with it).
            let new = if t >> COUNT_SHIFT == 1 {
                0
            } else {
                t - COUNT_ONE
            };
            // Relaxed (both): every waiter leaves while it holds the lock, after
            // its last access to `m`, so the leavers are ordered by the lock
            // word's Release/Acquire: every earlier leaver's accesses
            // happen-before the last one out, which frees `m` with Release. The
            // count itself is a chain of read-modify-writes, exact without
            // ordering, and continues the release sequence of a mode switch's
            // CAS, which joiners acquire, whatever the decrements' orderings.
            match self
                .tail
                .compare_exchange_weak(t, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    if new == 0 {
                        // Close the gate for the entry's next binding. Relaxed:
                        // nobody waits on it (no waiter is counted), and the
                        // Release of `free` publishes it to the next claimer.
                        pool().meta(m).gate.store(node::WAIT, Ordering::Relaxed);
                        sync::event("hq-unbind");
                        sync::trace(|| format!("unbound meta {m}"));
                        pool().free(m);
                    }
                    return;
                }
                Err(seen) => t = seen,
            }
        }
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use crate::head_tests::queue_tail_reader;
    use crate::hq::POOL_SIZE;
    use crate::hq::tests::{POOL_TESTS, await_tail, pool_shared};
    use crate::sync::AtomicU32;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// NUMA mode from the first waiter: the first waiter binds metadata (count
    /// 1), the second joins it (count 2, same metadata, `NO_STEAL` kept in
    /// strict FIFO mode), and the word is empty once both have passed.
    #[test]
    fn second_waiter_joins_the_bound_metadata() {
        let _pool = pool_shared();
        static NUMA_AT_ONCE: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        static STRICT: Config = NUMA_AT_ONCE.steal_bound_ns(0);
        for (cfg, strict) in [(&NUMA_AT_ONCE, false), (&STRICT, true)] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            lock.acquire();
            let spawn = |node: usize| {
                let l = lock.clone();
                std::thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(node));
                    l.acquire();
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                })
            };
            let a = spawn(0);
            let count = |t: u32| t >> COUNT_SHIFT;
            let bound = await_tail(&lock, |t| t & NUMA_MODE != 0 && count(t) == 1, "no binding");
            assert!(lock.is_numa_bound());
            assert_eq!(bound & NO_STEAL != 0, strict, "NO_STEAL after the binding");
            let b = spawn(1);
            let joined = await_tail(&lock, |t| count(t) == 2, "the second waiter did not join");
            assert_ne!(joined & NUMA_MODE, 0);
            assert_eq!(
                (joined >> META_SHIFT) & META_MASK,
                (bound >> META_SHIFT) & META_MASK,
                "joined other metadata"
            );
            // Strict FIFO: every entry keeps stealing forbidden; otherwise
            // nothing forbids it (the steal bound is far).
            assert_eq!(joined & NO_STEAL != 0, strict, "NO_STEAL after the join");
            // Each waiter queues on its own node's queue.
            let meta = pool().meta((bound >> META_SHIFT) & META_MASK);
            for node in [0, 1] {
                await_tail(
                    &lock,
                    |_| meta.queues[node].tail.load(Ordering::SeqCst) != 0,
                    "node queue empty",
                );
            }
            // SAFETY: acquired above.
            unsafe { lock.release() };
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
        }
    }

    /// Contention detection counts the plain queue's hand-offs. With a switch
    /// threshold of 2, the first two heads keep plain mode; the third switches
    /// the lock to NUMA mode before its critical section if waiters are queued
    /// behind it (a queue of five) and not if it is the last (a queue of
    /// three). The switch's word holds the frozen queue's one reference and
    /// no flag, and its metadata is back in the pool once all have passed.
    #[test]
    fn third_plain_head_switches_to_numa_mode_only_with_waiters_behind() {
        static SWITCH_AT_2: Config = Config::DEFAULT
            .hq_switch_threshold(2)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        // Alone with the pool: every entry must be free at the end.
        let _pool = POOL_TESTS.write().unwrap_or_else(|e| e.into_inner());
        for (queued, switches) in [(5, true), (3, false)] {
            let lock = Arc::new(RawHqLock::with_config(&SWITCH_AT_2));
            lock.acquire();
            let mut codes = Vec::new();
            let waiters: Vec<_> = (0..queued)
                .map(|_| queue_tail_reader(&lock, &mut codes))
                .collect();
            // SAFETY: acquired above.
            unsafe { lock.release() };
            let seen: Vec<u32> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
            let numa: Vec<bool> = seen.iter().map(|t| t & NUMA_MODE != 0).collect();
            assert_eq!(
                numa[..3],
                [false, false, switches],
                "{queued} queued: {seen:x?}"
            );
            if switches {
                assert_eq!(seen[2] >> COUNT_SHIFT, 1, "the frozen queue's reference");
                assert_eq!(seen[2] & TAIL_FLAGS, 0, "flags after the switch");
            }
            // A head that switched alone would unbind before its critical
            // section: only the counters see it.
            #[cfg(feature = "stats")]
            assert_eq!(
                lock.stats().mode_switches,
                u64::from(switches),
                "{queued} queued"
            );
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
            let claimed: Vec<usize> = (0..POOL_SIZE)
                .filter(|&m| pool().claimed[m].load(Ordering::SeqCst) != 0)
                .collect();
            assert!(claimed.is_empty(), "metadata left claimed: {claimed:?}");
        }
    }

    /// After a mode switch the NUMA side's global head waits at the gate
    /// until the frozen plain queue has drained, instead of competing with
    /// that queue's heads for the lock word: with a spin budget of 0 it parks
    /// on the gate while the switching head is still in its critical section,
    /// and takes the lock after the frozen queue's last waiter.
    #[test]
    fn numa_global_head_waits_at_the_gate_while_the_frozen_queue_drains() {
        static SWITCH_AT_2_PARK: Config = Config::DEFAULT
            .hq_switch_threshold(2)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(0);
        let _pool = pool_shared();
        let lock = Arc::new(RawHqLock::with_config(&SWITCH_AT_2_PARK));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (switched, go) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let spawn = |name: char| {
            let (l, o, sw, go) = (lock.clone(), order.clone(), switched.clone(), go.clone());
            std::thread::spawn(move || {
                l.acquire();
                o.lock().unwrap().push(name);
                let t = l.tail.load(Ordering::SeqCst);
                // The first holder to see NUMA mode (the switching head)
                // reports the word and holds the lock until told.
                if t & NUMA_MODE != 0
                    && sw
                        .compare_exchange(0, t, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    while !go.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                }
                // SAFETY: acquired above.
                unsafe { l.release() };
            })
        };
        lock.acquire();
        let mut codes = Vec::new();
        let mut waiters = Vec::new();
        for name in ['1', '2', '3', '4', '5'] {
            waiters.push(spawn(name));
            codes.push(crate::head_tests::await_new_tail(&*lock, &codes));
        }
        // SAFETY: acquired above.
        unsafe { lock.release() };
        await_tail(&lock, |_| switched.load(Ordering::SeqCst) != 0, "no switch");
        let t = switched.load(Ordering::SeqCst);
        let gate = &pool().meta((t >> META_SHIFT) & META_MASK).gate;
        waiters.push(spawn('X'));
        let start = Instant::now();
        while gate.load(Ordering::SeqCst) != node::PARKED
            && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::yield_now();
        }
        let parked = gate.load(Ordering::SeqCst) == node::PARKED;
        go.store(true, Ordering::SeqCst);
        for w in waiters {
            w.join().unwrap();
        }
        assert!(parked, "the NUMA side's head did not wait at the gate");
        assert_eq!(*order.lock().unwrap(), ['1', '2', '3', '4', '5', 'X']);
        assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
    }

    /// Every free pool entry, claimed until dropped.
    struct Exhausted(Vec<u32>);

    impl Drop for Exhausted {
        fn drop(&mut self) {
            for &m in &self.0 {
                pool().free(m);
            }
        }
    }

    /// NUMA mode from the first waiter, but the pool is exhausted: the first
    /// waiter queues plain, and an arrival after an entry is freed joins that
    /// plain queue instead of binding metadata over it (which would leave the
    /// plain queue's last waiter waiting for a link that never comes).
    #[test]
    fn arrival_joins_the_plain_queue_an_exhausted_pool_left() {
        static NUMA_AT_ONCE: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        let _pool = POOL_TESTS.write().unwrap_or_else(|e| e.into_inner());
        let mut held = Exhausted(std::iter::from_fn(|| pool().claim(0)).collect());
        assert_eq!(
            held.0.len(),
            POOL_SIZE,
            "pool entries leaked by other tests"
        );
        let lock = Arc::new(RawHqLock::with_config(&NUMA_AT_ONCE));
        lock.acquire();
        let mut codes = Vec::new();
        let first = queue_tail_reader(&lock, &mut codes);
        assert_eq!(lock.tail.load(Ordering::SeqCst) & NUMA_MODE, 0);
        pool().free(held.0.pop().expect("claimed above"));
        // Fails (times out) if the arrival binds: a NUMA word names no node.
        let second = queue_tail_reader(&lock, &mut codes);
        // SAFETY: acquired above.
        unsafe { lock.release() };
        for w in [first, second] {
            let seen = w.join().unwrap();
            assert_eq!(seen & NUMA_MODE, 0, "bound while the plain queue lived");
        }
        assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
    }
}
