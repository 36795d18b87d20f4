//! The HQ lock's NUMA mode: per-NUMA-node queues and the list of node queues
//! in the bound metadata, the global head's local and remote hand-offs, and
//! the time bound of a node queue's turn.

use super::pool::{Meta, NodeQueue, pool};
use super::{GLOBAL_HEAD, GO, LOCAL_HEAD, MAX_NODES, RawHqLock};
use crate::config::{Config, Tunables};
use crate::node::{self, Me, registry};
use crate::sync::{self, Ordering};

impl<T: Tunables> RawHqLock<T> {
    /// NUMA mode in metadata `m`, for a waiter on NUMA node `numa`: node
    /// queue, list, lock, hand-off, leave. Reads no lazily initialized state
    /// (see `node::before_enqueue`).
    pub(super) fn lock_numa(&self, me: Me, m: u32, numa: u32, cfg: &Config) {
        let meta = pool().meta(m);
        let n = numa as usize % MAX_NODES;
        let q = &meta.queues[n];
        // AcqRel: Release publishes our node's initialization to the waiter that
        // links behind us; Acquire orders our predecessor's initialization (and,
        // when the queue was empty, the previous local head's accesses to this
        // node queue, released by its clearing CAS) before our writes.
        // A predecessor queued before a fork cannot be in a binding made
        // after it (see `enter`), and a freed entry's queues are empty;
        // checked all the same, as in the plain queue.
        let pred = node::live_pred(q.tail.swap(me.code, Ordering::AcqRel));
        let mut batch = None;
        if pred != 0 {
            // Release: our node's initialization happens-before the local head
            // that reads this link (Acquire) and signals our `locked`.
            registry().node(pred).next.store(me.code, Ordering::Release);
            // Acquire inside: pairs with the Release swap of `signal`.
            #[cfg(numa_loom)]
            sync::note_enqueued();
            let v = node::wait_signal(&me.node.locked, cfg);
            sync::trace(|| format!("node queue {n}: signalled {v}"));
            if v >= GLOBAL_HEAD {
                batch = Some(v - GLOBAL_HEAD);
            } else {
                debug_assert_eq!(v, LOCAL_HEAD);
            }
        }
        let batch = match batch {
            Some(b) => b,
            None => {
                // The first time (we found the node queue empty) counts as our
                // enqueue for the loom models' sequencing.
                Self::join_list(meta, n, pred == 0, cfg);
                0
            }
        };
        // Acquire: pairs with the Release swap that opens the gate (the frozen
        // plain queue's last head, `pass_plain` through `pass_head_ship`), as
        // the load in `wait_signal` below does. That head lifted the flags
        // when it acquired (`HeadWait::acquired`: `NO_STEAL` and
        // `HEAD_ASLEEP`, one read-modify-write of the tail word) before it
        // opened the gate; our wait for the lock sets `NO_STEAL` once, past
        // the steal bound (`HeadWait::held`). The lift must happen-before
        // that set, so that by coherence the set follows the lift in the tail
        // word's modification order and is not erased by it, which would
        // leave stealing allowed for the rest of our wait (fairness, not
        // exclusion: the frozen queue's critical sections reach us through
        // `locked`, whose Acquire CAS in `wait_for_lock` reads that head's or
        // a later release). A Relaxed read of GO orders nothing between the
        // two read-modify-writes. loom cannot show it: its read-modify-writes
        // execute in schedule order and read the newest value, and the lift
        // precedes the GO, which precedes our read of it, in every schedule;
        // argued in `scripts/ordering-mutants.allow`. (A gate opened at
        // binding, with no plain queue ahead, reaches us through the binding
        // CAS's Release and our Acquire join in `enter`.) A stale "closed"
        // read only sends us to `wait_signal`, which reads the gate again.
        if meta.gate.load(Ordering::Acquire) != GO {
            sync::event("hq-gate-wait");
            node::wait_signal(&meta.gate, cfg);
        }
        self.wait_for_lock(cfg);
        sync::trace(|| format!("node queue {n}: acquired, batch {batch}"));
        self.pass_numa(me, meta, n, batch, cfg);
        self.leave(m);
    }

    /// As the local head of node queue `n`, enqueues the queue in the list and
    /// waits until it holds the list's head position.
    fn join_list(meta: &Meta, n: usize, first: bool, cfg: &Config) {
        let q = &meta.queues[n];
        // Relaxed: published by the Release of the list-tail swap below (to the
        // queue behind us, which writes our `gnext`) and of our link store (to the
        // queue in front, which signals our `gwait`).
        q.gnext.store(0, Ordering::Relaxed);
        q.gwait.store(node::WAIT, Ordering::Relaxed);
        // AcqRel: Release as above; Acquire makes the previous tail queue's reset
        // of its `gnext` happen-before our link write into it.
        let prev = meta.gtail.swap(n as u32 + 1, Ordering::AcqRel);
        #[cfg(numa_loom)]
        if first {
            sync::note_enqueued();
        }
        #[cfg(not(numa_loom))]
        let _ = first;
        if prev != 0 {
            // Release: our resets happen-before the head that follows the link.
            meta.queues[prev as usize - 1]
                .gnext
                .store(n as u32 + 1, Ordering::Release);
            // Acquire inside: pairs with the Release swap of the remote hand-off.
            let v = node::wait_signal(&q.gwait, cfg);
            debug_assert_eq!(v, GO);
        }
        sync::trace(|| format!("node queue {n}: list head (prev {prev})"));
    }

    /// We hold the lock as the global head from node queue `n`, after `batch`
    /// consecutive local hand-offs of that queue: pass the global head-ship on.
    fn pass_numa(&self, me: Me, meta: &Meta, n: usize, batch: u32, cfg: &Config) {
        let q = &meta.queues[n];
        let reg = registry();
        // Our local successor, if one has swapped itself into the node queue's
        // tail. Acquire: pairs with its Release link store (we signal its node).
        let mut s = me.node.next.load(Ordering::Acquire);
        // Relaxed: our code is replaced in the queue's tail only by a later swap
        // (a successor that will link) or by our own clearing CAS below, so any
        // other value means a successor; the link carries the synchronization.
        if s == 0 && q.tail.load(Ordering::Relaxed) != me.code {
            s = node::wait_link(&me.node.next, cfg);
        }
        if s != 0 && batch < cfg.hq_handoff_threshold && Self::turn_left(q, batch, cfg) {
            // Local hand-off: the node queue keeps the list's head position.
            #[cfg(feature = "stats")]
            self.counters.hq_event(crate::stats::HqEvent::LocalHandoff);
            sync::event("hq-local");
            sync::trace(|| format!("local hand-off to {s}"));
            // Release inside: our view (queue links, list state) to the new head.
            // (Saturating: a threshold near u32::MAX means "never hand off
            // remotely"; the count then stops short of overflowing the word.)
            let batch = (batch + 1).min(u32::MAX - GLOBAL_HEAD);
            self.pass_head_ship(&reg.node(s).locked, GLOBAL_HEAD + batch);
            return;
        }
        // Remote hand-off. First the list (so that this node queue's next local
        // head, released below, cannot enqueue it while it is still in the list).
        // Acquire: pairs with the Release link of the queue behind us.
        let mut gs = q.gnext.load(Ordering::Acquire);
        if gs == 0 {
            // Relaxed: an empty list publishes nothing; the next local head to
            // enqueue finds no predecessor and waits for nothing of ours.
            if meta
                .gtail
                .compare_exchange(n as u32 + 1, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                // A queue swapped itself in behind us and will link.
                gs = node::wait_link(&q.gnext, cfg);
            }
        }
        if gs != 0 {
            #[cfg(feature = "stats")]
            self.counters.hq_event(crate::stats::HqEvent::RemoteHandoff);
            sync::event("hq-remote");
            sync::trace(|| format!("remote hand-off to node queue {}", gs - 1));
            // Release inside: pairs with that queue's local head's Acquire.
            self.pass_head_ship(&meta.queues[gs as usize - 1].gwait, GO);
        }
        // Then the node queue: its next waiter re-enqueues it in the list.
        if s == 0 {
            // Release: the next local head of this queue (which swaps the tail
            // with Acquire after reading our 0) resets `gnext` and `gwait` and
            // re-enters the list; our reads of `gnext` (a link by another queue's
            // head) must happen-before its reset, or the reset could be ordered
            // before that link and the stale link survive.
            if q.tail
                .compare_exchange(me.code, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            s = node::wait_link(&me.node.next, cfg);
        }
        // Release inside: as above, for the next local head.
        node::signal(&reg.node(s).locked, LOCAL_HEAD);
    }

    /// Whether node queue `q`'s turn at the list's head, `batch` local hand-offs
    /// in, is within [`Config::flush_threshold_ns`] (1 ms): the RFC bounds a turn
    /// by a count of hand-offs only, which in user space, where most
    /// acquisitions are steals and a hand-off waits for a wake-up, let a turn
    /// last seconds (measured: a node's waiters starved for a whole 2 s run
    /// with 32 threads on 2 CPUs). CNA bounds its secondary queue by the same
    /// time. `u64::MAX` = no time bound (no clock read).
    fn turn_left(q: &NodeQueue, batch: u32, cfg: &Config) -> bool {
        let bound = cfg.flush_threshold_ns;
        if bound == u64::MAX {
            return true;
        }
        // Wrapping 32-bit ns: durations up to 4.29 s compare correctly; larger
        // bounds saturate there.
        let now = sync::now_ns() as u32;
        if batch == 0 {
            // Relaxed (both): the field is written and read only by the holders
            // of this queue's turn, one after another, ordered by the Release/
            // Acquire of the hand-offs between them.
            q.turn_start.store(now, Ordering::Relaxed);
            return bound > 0;
        }
        let elapsed = now.wrapping_sub(q.turn_start.load(Ordering::Relaxed));
        u64::from(elapsed) < bound.min(u64::from(u32::MAX))
    }
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;
    use crate::hq::tests::{await_tail, pool_shared};
    use crate::hq::{COUNT_SHIFT, META_MASK, META_SHIFT};
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// A node queue keeps the list's head for `hq_handoff_threshold` local
    /// hand-offs, and for at most `flush_threshold_ns` of turn, then hands off
    /// remotely. Node-0 waiters A, B, D, E, F and node-1 waiter C, queued in
    /// that order, take the lock as A, B, D, E, C, F with threshold 3 and no
    /// time bound; as A, C, B, D, E, F with a time bound of 0 (no local
    /// hand-off); as A, B, D, E, F, C with a 2 s bound and threshold 1000 (the
    /// turn's clock starts at its first holder: a start left from an earlier
    /// turn, 3 s ago, does not count).
    #[test]
    fn node_queue_hands_off_remotely_after_the_threshold() {
        static THREE_LOCAL: Config = Config::DEFAULT
            .hq_switch_threshold(0)
            .hq_handoff_threshold(3)
            .flush_threshold_ns(u64::MAX)
            .steal_bound_ns(60_000_000_000)
            .spin_budget_ns(60_000_000_000);
        static NO_TURN: Config = THREE_LOCAL.hq_handoff_threshold(1000).flush_threshold_ns(0);
        static LONG_TURN: Config = NO_TURN.flush_threshold_ns(2_000_000_000);
        let _pool = pool_shared();
        for (cfg, expected) in [
            (&THREE_LOCAL, "ABDECF"),
            (&NO_TURN, "ACBDEF"),
            (&LONG_TURN, "ABDEFC"),
        ] {
            let lock = Arc::new(RawHqLock::with_config(cfg));
            let order = Arc::new(std::sync::Mutex::new(Vec::new()));
            lock.acquire();
            let mut waiters = Vec::new();
            let mut meta = None;
            let mut last = [0; 2];
            for (i, (name, node)) in [('A', 0), ('B', 0), ('C', 1), ('D', 0), ('E', 0), ('F', 0)]
                .into_iter()
                .enumerate()
            {
                let (l, o) = (lock.clone(), order.clone());
                waiters.push(std::thread::spawn(move || {
                    numa_topology::set_current_thread_node(Some(node));
                    l.acquire();
                    o.lock().unwrap().push(name);
                    // SAFETY: acquired above.
                    unsafe { l.release() };
                }));
                let t = await_tail(&lock, |t| t >> COUNT_SHIFT == i as u32 + 1, "no entry");
                let meta: &Meta =
                    meta.get_or_insert_with(|| pool().meta((t >> META_SHIFT) & META_MASK));
                // Queued in its node queue (the swap changes the queue's tail); a
                // node queue's first waiter also enters the list.
                let q = &meta.queues[node];
                let before = last[node];
                await_tail(
                    &lock,
                    |_| q.tail.load(Ordering::SeqCst) != before,
                    "not queued",
                );
                last[node] = q.tail.load(Ordering::SeqCst);
                if before == 0 {
                    let list = node as u32 + 1;
                    await_tail(
                        &lock,
                        |_| meta.gtail.load(Ordering::SeqCst) == list,
                        "not listed",
                    );
                }
            }
            let stale = (sync::now_ns() as u32).wrapping_sub(3_000_000_000);
            let meta = meta.expect("bound");
            meta.queues[0].turn_start.store(stale, Ordering::SeqCst);
            // SAFETY: acquired above.
            unsafe { lock.release() };
            for w in waiters {
                w.join().unwrap();
            }
            let order: String = order.lock().unwrap().iter().collect();
            assert_eq!(
                order, expected,
                "hand-off threshold {}, turn bound {} ns",
                cfg.hq_handoff_threshold, cfg.flush_threshold_ns
            );
            assert_eq!(lock.tail.load(Ordering::SeqCst), 0);
        }
    }

    /// NUMA mode from the first waiter, 8 threads on 4 virtual nodes, the
    /// holder yielding inside so that node queues and the list form on 2 CPUs:
    /// exclusion holds, every acquisition happens, and the word is empty at
    /// the end (debug builds also check the word's invariants in `leave`).
    #[test]
    fn numa_mode_from_the_first_waiter_keeps_exclusion() {
        let _pool = pool_shared();
        static NUMA_AT_ONCE: Config = Config::DEFAULT.hq_switch_threshold(0);
        static M: lock_api::Mutex<RawHqLock<&'static Config>, u64> =
            lock_api::Mutex::from_raw(RawHqLock::with_config(&NUMA_AT_ONCE), 0);
        static INSIDE: AtomicU64 = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..8 {
                s.spawn(move || {
                    numa_topology::set_current_thread_node(Some(i % 4));
                    for _ in 0..1000 {
                        let mut g = M.lock();
                        assert_eq!(INSIDE.fetch_add(1, Ordering::Relaxed), 0);
                        *g += 1;
                        std::thread::yield_now();
                        INSIDE.fetch_sub(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(*M.lock(), 8000);
        // SAFETY: only read.
        assert_eq!(unsafe { M.raw() }.tail.load(Ordering::Relaxed), 0);
    }
}
