//! The per-snode waiter queues of the CST mutex: the path of an untimed waiter.
//!
//! CST (Kashyap, Min, Kim, USENIX ATC 2017, sections 3.1-3.3) keeps, in every
//! snode, a queue of the waiters of that node. Only the first waiter of each
//! snode queue, the *head*, waits for the lock word itself; the others wait on
//! their own queue node (MCS, Mellor-Crummey and Scott, 1991), so a release
//! touches one line that at most one spinner per node reads, not a line that
//! every waiter hammers with compare-and-swaps.
//!
//! # Protocol
//!
//! * **Enqueue**: a waiter swaps its queue node (on its own stack) into the
//!   snode's `tail` and links it behind its predecessor, if any.
//! * **Wait for head-ship**: a waiter with a predecessor spins on its own
//!   `status` for its budget ([`HeadSpin`]: while the lock makes progress,
//!   unless it is oversubscribed), then parks on its node's key
//!   ([`QNode::park_key`]) after announcing it (`WAITING -> PARKED`).
//! * **Head**: the head spins on the lock word. With nobody queued behind it,
//!   it spins like a lone waiter (a few pauses, then yields) and takes the
//!   word when it comes free. With a successor, after a few pause rounds it
//!   registers: it counts itself in the lock word (`HEAD_ONE`), so every
//!   release of the word takes the slow unlock, and puts its node in the
//!   snode (`SnodeQueue::head`); then it spins on the word and on its own
//!   `status`. It gets the lock in one of two ways:
//!   - a holder's unlock *grants* it ([`grant`]): the holder claims the
//!     registration (a CAS of `head` to null) and swaps `GRANTED` into the
//!     head's `status`; the lock word stays locked throughout, so the grant is
//!     a hand-off with one swap and no futex call (unless the head lost its
//!     withdrawal to the claim and went to sleep meanwhile);
//!   - it finds the word free and takes it with a CAS (barging, like any
//!     arrival), leaving its count in the same CAS.
//!
//!   Either way it then passes head-ship to its successor ([`pass_headship`])
//!   before its critical section, and its queue node is free again.
//! * **Wake-ahead**: a new head wakes its successor if that one parked, so the
//!   next head is running (spinning) by the time it is needed, and head-ship
//!   rarely passes to a sleeping thread (CST's "pass the lock to an active
//!   waiter").
//! * **Out of budget**: a head that has spun its budget without the lock
//!   withdraws its registration (if a holder claimed it first, the grant is
//!   on its way and it waits for it), passes head-ship on, and waits as a
//!   *parked* waiter of the snode's parking queue (`Cohort::lock_slow`), where
//!   unlocks wake one waiter at a time (batch bound, eventual fairness).
//!   The node keeps one spinning head as long as it has queued waiters.
//!
//! # Why a waiter's stack node outlives every access to it
//!
//! A queue node is referenced by three parties: the predecessor (through its
//! `next`, to pass head-ship), the snode (`head`, while it is a registered
//! head) and the successor (which links itself into `next`). The owner leaves
//! only after (1) head-ship was passed to it (the predecessor's last access),
//! (2) its registration was withdrawn by itself or claimed by a holder whose
//! grant it waited for (the holder's last access), (3) it passed head-ship to
//! its successor or swung `tail` back to null (after which no successor can
//! link to it). A late `unpark` on a key the node once used may wake an
//! unrelated waiter of this crate parked on the same stack address: every
//! waiter re-checks its own state after waking.

#[cfg(not(numa_loom))]
use crate::config;
use crate::list::SnodeList;
use crate::qnode::{GRANTED, HEAD, NOT_RUNNING, PARKED, QNode, WAITING, tagged};
#[cfg(not(numa_loom))]
use crate::snode::QUEUED_MASK;
use crate::snode::{PIN_ONE, QUEUED_ONE, Snode};
use crate::spin::{HeadSpin, PAUSE_ROUNDS, Spin, spin_round, spin_rounds};
use crate::sync::{self, AtomicPtr, AtomicUsize, Ordering, ParkToken};
use crate::word::{HEAD_MASK, HEAD_ONE, LOCKED_BIT};
use std::ptr;

/// The parts of a lock the queue works on: its word and its snode list
/// (the cohort's fields).
#[derive(Clone, Copy)]
pub(crate) struct LockRef<'a> {
    pub(crate) state: &'a AtomicUsize,
    #[cfg_attr(numa_loom, allow(dead_code))]
    pub(crate) snodes: &'a SnodeList,
}

/// The spin rounds a head waits for the word before it registers for a
/// grant: 4 (1 + 2 + 4 + 8 = 15 pauses, well under a microsecond). A lock
/// whose holders leave quickly is taken from the word without the
/// registration's two read-modify-writes of the word and the slow unlock it
/// causes (two threads taking turns, for instance); a head that waits longer
/// registers and is then handed the lock by its node's holders. Under loom a
/// head registers at once.
#[cfg(not(numa_loom))]
const REGISTER_AFTER_ROUNDS: u32 = 4;
#[cfg(numa_loom)]
const REGISTER_AFTER_ROUNDS: u32 = 0;

/// How an untimed waiter's queued wait ended.
pub(crate) enum Queued {
    /// It holds the lock (`granted`: handed over by a holder's grant).
    Acquired { granted: bool },
    /// It spent its budget as head and left the queue: it waits as a parked
    /// waiter of the snode now.
    OutOfBudget,
}

/// The lock's waiters (parked on it, queued in any of its snodes) plus its
/// holder, against the CPUs the path decisions assume ([`config::cpus`]):
/// whether the threads that want the lock are more than can run at once.
/// Also true while other threads take this process's CPUs
/// ([`crate::spin::cpus_contended`]). Reads only (the word and each snode's
/// waiting line); under loom, the model's per-thread setting.
pub(crate) fn oversubscribed(lock: LockRef<'_>) -> bool {
    #[cfg(numa_loom)]
    {
        let _ = lock;
        sync::loom_oversubscribed()
    }
    #[cfg(not(numa_loom))]
    {
        if crate::spin::cpus_contended() {
            return true;
        }
        // Relaxed: hints.
        let mut wanting = 1 + crate::word::parked_count(lock.state.load(Ordering::Relaxed));
        for sn in lock.snodes.iter() {
            wanting += sn.hot.users.load(Ordering::Relaxed) & QUEUED_MASK;
        }
        wanting > config::cpus()
    }
}

/// A value that changes when the lock is handed on within or between
/// nodes: the word and the snodes' batch counts, which holders write at
/// every grant and wake-up (reads only).
fn progress(lock: LockRef<'_>) -> u64 {
    #[cfg(numa_loom)]
    {
        let _ = lock;
        0
    }
    #[cfg(not(numa_loom))]
    {
        // Relaxed: hints. The word changes when the lock is taken from it
        // (barging, a head's CAS), the batches when it is granted.
        let word = lock.state.load(Ordering::Relaxed) as u64;
        lock.snodes.iter().fold(word, |h, sn| {
            let b = u64::from(sn.hot.batch.load(Ordering::Relaxed));
            h.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(b)
        })
    }
}

/// The queued wait of an untimed waiter of `sn`: enqueue, wait for head-ship,
/// then wait as head for the word or a grant. The caller pinned `sn`
/// ([`crate::list::SnodeList::pin`]); a waiter that acquires drops the pin
/// with its queue count, one that runs out of budget keeps it.
pub(crate) fn wait(lock: LockRef<'_>, sn: &Snode) -> Queued {
    // Relaxed: the queued count is a hint for arrivals (see
    // `Cohort::lock_slow`); our pin keeps the snode attached.
    sn.hot.users.fetch_add(QUEUED_ONE, Ordering::Relaxed);
    count!(snode_write(sn.node()));
    let q = QNode::new();
    let me = &q as *const QNode as *mut QNode;
    let queue = &sn.hot.queue;
    // AcqRel: Release publishes our node's initial `next` (null) to the next
    // waiter, which writes `next` after reading `tail` with Acquire (else our
    // initialisation could overwrite its link); Acquire makes our predecessor's
    // node (its initial `next`) visible before we write its `next`, and
    // orders a registration slot our predecessor cleared before emptying the
    // queue (its Release tail CAS, see `pass_headship`) before ours.
    let pred = queue.tail.swap(me, Ordering::AcqRel);
    count!(snode_write(sn.node()));
    if !pred.is_null() {
        // SAFETY: `pred` is queued ahead of us: it cannot leave before it passes
        // head-ship to a successor, which it waits for us to link (see
        // `pass_headship`), so its node is alive.
        let pred = unsafe { &*pred };
        // Release: our predecessor reads our node through this pointer (an
        // Acquire load) and must see its initialisation.
        pred.next.store(me, Ordering::Release);
        wait_for_status(lock, sn, &q, WAITING, HEAD);
    }
    #[cfg(feature = "stats")]
    crate::stats::count(&sn.stats.queued);
    wake_ahead(sn, &q);
    // Relaxed: written by the predecessor before its Release swap of our
    // status, which we read with Acquire.
    let token = q.token.load(Ordering::Relaxed) != 0;
    let r = compete(lock, sn, &q, token);
    let carry = match r {
        Some((_, carry)) => carry,
        None => false,
    };
    pass_headship(lock, sn, &q, carry);
    // Release: with the pin (when we acquired), this ends our use of the
    // snode; a detacher's Acquire CAS of `users` from 0 orders it before the
    // snode's reuse. Our queue node is no longer referenced (see
    // `pass_headship`).
    let unpin = if r.is_some() { PIN_ONE } else { 0 };
    sn.hot
        .users
        .fetch_sub(QUEUED_ONE + unpin, Ordering::Release);
    count!(snode_write(sn.node()));
    match r {
        Some((granted, _)) => Queued::Acquired { granted },
        None => Queued::OutOfBudget,
    }
}

/// Spins, then parks, until `q`'s status becomes `target`: head-ship
/// (`HEAD`, waiting from `WAITING`, set by the predecessor) or the grant
/// (`GRANTED`, waiting from `HEAD` after losing the withdrawal to a holder's
/// claim: the claimer may be preempted between its claim and its grant).
///
/// The wait for head-ship spins with a head's budget ([`HeadSpin`]): on a
/// lock that is not [`oversubscribed`] it spins for as long as the lock
/// makes progress, so a queued waiter that has a CPU is still running when
/// its turn comes, even after a whole batch of another node (a waiter that
/// parked there would make every hand-off of its node wait for a wake-up,
/// one at a time, since wake-ahead reaches one waiter ahead). On an
/// oversubscribed lock it parks after [`Spin`]'s budget.
fn wait_for_status(lock: LockRef<'_>, sn: &Snode, q: &QNode, running: u32, target: u32) {
    let mut spin = WaitSpin::new(running == WAITING);
    loop {
        // Acquire: pairs with the Release of `pass_headship` (head-ship: the
        // snode's registration slot was cleared, by the claim or the
        // withdrawal of our predecessor, or holds us, before we read it) or
        // of the grant's swap (the granting holder's critical section happens
        // before ours).
        let st = q.status.load(Ordering::Acquire);
        // A head given its predecessor's registration may be granted the
        // lock before it sees head-ship: the grant is head-ship too.
        if st == target || (target == HEAD && st == GRANTED) {
            return;
        }
        if st == running && spin.spin(lock) {
            continue;
        }
        // Relaxed: announces that we sleep; the swap to `target` reads it (one
        // location), and we publish nothing.
        if st == running
            && q.status
                .compare_exchange(running, PARKED, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        #[cfg(feature = "stats")]
        crate::stats::count(&sn.stats.parks);
        #[cfg(not(feature = "stats"))]
        let _ = sn;
        #[cfg(numa_loom)]
        sync::set_loom_queue_parked(true);
        let validate = || q.status.load(Ordering::Relaxed) == PARKED;
        // SAFETY:
        // - the key is a queue node's address + 2, which this crate controls
        //   (see `QNode::park_key`);
        // - `validate` only reads an atomic; the other callbacks are empty.
        unsafe {
            sync::park(q.park_key(), validate, || {}, |_, _| {}, ParkToken(0), None);
        }
        // Woken by the swap to `target`, by a wake-ahead (status back to
        // `WAITING`: spin a fresh budget), or spuriously (status still
        // `PARKED`: park again).
        if q.status.load(Ordering::Relaxed) == running {
            spin = WaitSpin::new(running == WAITING);
        }
    }
}

/// The budget of [`wait_for_status`]: a head's for the wait for head-ship,
/// a plain one for the wait for a claimed grant (which a running claimer
/// completes at once).
enum WaitSpin {
    Headship(HeadSpin),
    Grant(Spin),
}

impl WaitSpin {
    fn new(headship: bool) -> Self {
        if headship {
            WaitSpin::Headship(HeadSpin::new())
        } else {
            WaitSpin::Grant(Spin::new())
        }
    }

    fn spin(&mut self, lock: LockRef<'_>) -> bool {
        match self {
            WaitSpin::Headship(h) => h.spin(|| oversubscribed(lock), || progress(lock)),
            WaitSpin::Grant(s) => s.spin(),
        }
    }
}

/// A new head makes sure its successor (if it parked) runs again, so that
/// head-ship rarely passes to a sleeping thread.
fn wake_ahead(sn: &Snode, q: &QNode) {
    // Acquire: pairs with the successor's Release link, so its node is
    // initialised before we touch it.
    let next = q.next.load(Ordering::Acquire);
    if next.is_null() {
        return;
    }
    // SAFETY: a linked successor waits for head-ship from us, so its node is alive.
    let next = unsafe { &*next };
    // Relaxed: a wake-up only; the successor re-reads its status.
    if next
        .status
        .compare_exchange(PARKED, WAITING, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        #[cfg(feature = "stats")]
        crate::stats::count(&sn.stats.wakeups);
        #[cfg(not(feature = "stats"))]
        let _ = sn;
        // SAFETY: the key is a queue node's key (see `QNode::park_key`); the
        // callback returns the default token and touches nothing.
        unsafe { sync::unpark_one(next.park_key(), |_| sync::UnparkToken(0)) };
    }
}

/// Waits for a successor that swapped the tail but has not linked itself
/// yet: pause rounds, then yields, so that a successor preempted between its
/// swap and its link gets a CPU (the caller may hold the lock).
fn wait_for_link(q: &QNode) -> &QNode {
    let mut round = 0u32;
    loop {
        // Acquire: pairs with the successor's Release link (its node initialised).
        let next = q.next.load(Ordering::Acquire);
        if !next.is_null() {
            // SAFETY: a linked successor waits for head-ship from us, so its
            // node is alive.
            return unsafe { &*next };
        }
        round = round.saturating_add(1);
        spin_round(round.min(PAUSE_ROUNDS + 1));
    }
}

/// Passes head-ship of `sn`'s queue from `q` to its successor, or empties the
/// queue. After this nobody references `q`.
///
/// With `token` (the caller holds the lock and carries its node's
/// registration: a `HEAD_ONE` in the word, see [`compete`]) the successor
/// inherits the registration: it is put in the snode's slot, tagged as not
/// yet running, before head-ship passes, so the next unlock of this node can
/// grant it even before it runs, and the word is not written. Without a
/// successor the token is given back (`-HEAD_ONE`).
fn pass_headship(lock: LockRef<'_>, sn: &Snode, q: &QNode, token: bool) {
    let queue = &sn.hot.queue;
    // Acquire: pairs with the successor's Release link (its node initialised).
    let mut next = q.next.load(Ordering::Acquire);
    if next.is_null() {
        let me = q as *const QNode as *mut QNode;
        // Release on success: the next arrival (its Acquire tail swap reads
        // this) becomes head and may register in the snode's slot; our
        // clearing of the slot (a head that took the word by CAS, see
        // `compete`) must come before that registration in the slot's
        // modification order, or it could erase it and leave that head
        // waiting for a grant nobody can give. On failure a successor
        // swapped `tail` and is about to link.
        if queue
            .tail
            .compare_exchange(me, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
            .is_ok()
        {
            count!(snode_write(sn.node()));
            if token {
                // Relaxed: we hold the lock; the count only routes unlocks
                // (see `register`).
                lock.state.fetch_sub(HEAD_ONE, Ordering::Relaxed);
                count!(word_write());
            }
            return;
        }
        next = wait_for_link(q) as *const QNode as *mut QNode;
    }
    // SAFETY: a linked successor waits for head-ship from us, so its node is alive.
    let next = unsafe { &*next };
    // Computed before the hand-over: after the swap the node may be gone.
    let key = next.park_key();
    if token {
        // Relaxed: published by the Release swap below.
        next.token.store(1, Ordering::Relaxed);
        // Relaxed: we hold the lock, so no holder claims before our own
        // unlock (program order) or before an unlock that follows ours (the
        // lock orders it); the successor reads the slot after the Release
        // swap below.
        queue_head(sn).store(tagged(next), Ordering::Relaxed);
        // Relaxed: a hint for unlocks, which hold the lock as we do.
        sn.hot
            .headship_at
            .store(crate::spin::ticks(), Ordering::Relaxed);
        count!(snode_write(sn.node()));
    }
    // Release: our clearing of the snode's registration slot (or the token
    // and the slot we just set) happens before the successor reads them (it
    // loads its status with Acquire).
    if next.status.swap(HEAD, Ordering::Release) == PARKED {
        #[cfg(feature = "stats")]
        crate::stats::count(&sn.stats.wakeups);
        // SAFETY: the key is a queue node's key (see `QNode::park_key`); the
        // callback returns the default token and touches nothing.
        unsafe { sync::unpark_one(key, |_| sync::UnparkToken(0)) };
    }
}

/// The head's wait: registers (if the word's head count has room), then spins
/// on the word and on its own status. `Some((granted, token))` once it holds
/// the lock (`token`: it still carries its node's registration, which
/// [`pass_headship`] hands on); `None` once it spent its budget and withdrew
/// (it still is the head and must pass head-ship on).
///
/// A head that inherited its predecessor's token (`token`) is registered
/// already, under the slot's not-running tag: it clears the tag when it
/// first finds neither a grant nor a free word. (Clearing it only after the
/// first pause rounds, to spare the CAS when a grant comes first, let
/// unlocks of an oversubscribed lock pass over running heads: 3-14% slower
/// at 32 threads on 2 CPUs, `numa-bench compare`.)
fn compete(lock: LockRef<'_>, sn: &Snode, q: &QNode, token: bool) -> Option<(bool, bool)> {
    let me = q as *const QNode as *mut QNode;
    // Relaxed: only a head without a predecessor is still `WAITING`, and
    // nothing else writes its status before it registers (our Release
    // registration publishes this store to a claimer). A head with a
    // predecessor is `HEAD` already, or `GRANTED`, which must stay.
    let _ = q
        .status
        .compare_exchange(WAITING, HEAD, Ordering::Relaxed, Ordering::Relaxed);
    let mut registered = token;
    // What the snode's slot holds for us while we are registered: our node,
    // under the not-running tag until we clear it.
    let mut slot = if token { tagged(q) } else { me };
    #[cfg(numa_loom)]
    sync::set_loom_inherited(false);
    let mut tried_to_register = registered;
    let mut spin = HeadSpin::new();
    let mut alone = 0u32;
    loop {
        // Acquire: pairs with the grant's Release swap, so the granting
        // holder's critical section happens before ours.
        if registered && q.status.load(Ordering::Acquire) == GRANTED {
            #[cfg(numa_loom)]
            sync::set_loom_inherited(token);
            return Some((true, true));
        }
        // Relaxed: a hint for the CAS below, which acquires.
        let s = lock.state.load(Ordering::Relaxed);
        if s & LOCKED_BIT == 0 {
            // Acquire: pairs with the Release of the unlock that freed the
            // word. A registered head keeps its `HEAD_ONE` in the word: it
            // goes to its successor with head-ship.
            if lock
                .state
                .compare_exchange_weak(s, s | LOCKED_BIT, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                count!(word_write());
                if registered {
                    // Relaxed: we hold the lock, so no holder can claim us
                    // (a holder that claimed us grants before it releases,
                    // and then the word was never free for us); the next
                    // head registers after our Release head-ship pass or
                    // tail CAS.
                    queue_head(sn).store(ptr::null_mut(), Ordering::Relaxed);
                    count!(snode_write(sn.node()));
                }
                return Some((false, registered));
            }
            continue;
        }
        if slot != me {
            // Relaxed: the tag is a hint for unlocks. If the CAS fails, a
            // holder claimed us and its grant (Release, read with Acquire)
            // follows; the withdrawal below then fails too.
            if queue_head(sn)
                .compare_exchange(slot, me, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                count!(snode_write(sn.node()));
            }
            slot = me;
        }
        // Relaxed: a hint (a successor links with Release; we read its node
        // only in `pass_headship`, with Acquire).
        let crowded = !q.next.load(Ordering::Relaxed).is_null() || lone_head_registers();
        if crowded || registered {
            if !tried_to_register && spin.rounds() >= REGISTER_AFTER_ROUNDS {
                tried_to_register = true;
                registered = register(lock, sn, me);
                slot = me;
            }
            if spin.spin(|| oversubscribed(lock), || progress(lock)) {
                continue;
            }
        } else if alone < spin_rounds() {
            // Nobody queued behind us: wait as a lone waiter does (the parking
            // paths' short spin, then park), so a lock taken in turns by two
            // threads, or by one thread while the other is preempted, keeps
            // running on the thread that has it instead of being taken from it
            // by a long-spinning head.
            alone += 1;
            spin_round(alone);
            continue;
        }
        if !registered {
            return None;
        }
        // Withdraw. Relaxed: on success nothing is published (no holder will
        // touch our node); on failure a holder claimed us and its grant (a
        // Release store we read with Acquire) follows. `slot` is what the
        // slot holds while it is ours (a holder claims only what it read).
        if queue_head(sn)
            .compare_exchange(slot, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            count!(snode_write(sn.node()));
            // Relaxed: the count is a hint for unlockers (they claim through
            // `head`); every change is an RMW of the word.
            lock.state.fetch_sub(HEAD_ONE, Ordering::Relaxed);
            count!(word_write());
            return None;
        }
        wait_for_status(lock, sn, q, HEAD, GRANTED);
        #[cfg(numa_loom)]
        sync::set_loom_inherited(token);
        return Some((true, true));
    }
}

/// Whether a lone head waits as a crowded one (the `test-hooks` feature's
/// `set_lone_head_registers`); `false` in every other build.
#[inline]
fn lone_head_registers() -> bool {
    #[cfg(feature = "test-hooks")]
    {
        crate::test_hooks::lone_head_registers()
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        false
    }
}

/// Whether `sn` has a registered head right now (a hint for unlocks).
#[inline]
pub(crate) fn has_head(sn: &Snode) -> bool {
    // Relaxed: a hint; the claim in `grant` decides.
    !queue_head(sn).load(Ordering::Relaxed).is_null()
}

#[inline]
fn queue_head(sn: &Snode) -> &AtomicPtr<QNode> {
    &sn.hot.queue.head
}

/// Registers `me` as `sn`'s head: in the word's head count (at most
/// [`HEAD_MASK`] / [`HEAD_ONE`] heads), then in the snode. `false` if the
/// count is full: the head then spins on the word unregistered.
///
/// The `HEAD_ONE` is the node's *token*: it stays in the word while the
/// node's queue has waiters, passed from head to head ([`pass_headship`]),
/// so a hand-off inside the node does not write the word. It leaves the
/// word when a head withdraws or the queue empties.
fn register(lock: LockRef<'_>, sn: &Snode, me: *mut QNode) -> bool {
    // Relaxed: the count only sends unlocks to the slow path; a holder that
    // sees it claims through `head`, and a claim that comes before our store
    // below finds nothing and releases the word, which we then take.
    let mut s = lock.state.load(Ordering::Relaxed);
    loop {
        if s & HEAD_MASK == HEAD_MASK {
            return false;
        }
        match lock.state.compare_exchange_weak(
            s,
            s + HEAD_ONE,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(x) => s = x,
        }
    }
    count!(word_write());
    // Release: a holder that claims us (an Acquire CAS reading this store)
    // then stores `GRANTED` after every earlier write to our status (our
    // node's initialisation, the predecessor's `HEAD` we read), so the grant
    // is the last value of our status and we cannot miss it.
    queue_head(sn).store(me, Ordering::Release);
    count!(snode_write(sn.node()));
    true
}

/// How long a head may keep the registration slot's not-running tag before
/// unlocks pass it over even on a lock that is not [`oversubscribed`]:
/// 40,000 time-stamp cycles (10-20 us at 2-4 GHz; ns elsewhere), some tens
/// of hand-offs. A running head clears the tag after a few pause rounds
/// (`compete`), and a grant usually reaches it sooner, one critical section
/// after head-ship; a head that keeps the tag this long has most likely
/// lost its CPU (other processes' threads, vCPU preemption), which the
/// lock's own count of waiters against CPUs cannot see.
#[cfg(not(numa_loom))]
const TAG_OLD_TICKS: u64 = 40_000;

/// Whether `sn`'s slot has held a not-running head for longer than
/// [`TAG_OLD_TICKS`] (a hint; the caller holds the lock, as the writer did).
/// Never under loom.
fn tag_is_old(sn: &Snode) -> bool {
    #[cfg(numa_loom)]
    {
        let _ = sn;
        false
    }
    #[cfg(not(numa_loom))]
    {
        // A forced CPU count decides as on that many CPUs, where a head
        // that keeps its tag this long is rare (see `config::set_cpus`).
        if config::cpus_forced() {
            return false;
        }
        // Relaxed: written by lock holders only; the lock orders it.
        let at = sn.hot.headship_at.load(Ordering::Relaxed);
        older_than_tag_limit(at, crate::spin::ticks())
    }
}

/// Whether a tag set at `at` is older than [`TAG_OLD_TICKS`] at `now`; a
/// `now` behind `at` (another CPU's counter) counts as young.
#[cfg(not(numa_loom))]
fn older_than_tag_limit(at: u64, now: u64) -> bool {
    now.saturating_sub(at) > TAG_OLD_TICKS
}

/// What [`grant`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The head has the lock now.
    Granted,
    /// No claimable head.
    NoHead,
    /// The head has not run since it was given head-ship, and the lock is
    /// oversubscribed or the head has not run for [`TAG_OLD_TICKS`]: it was
    /// left registered, and running threads may take the lock first (it
    /// takes the word, or the grant of a later unlock, once it runs).
    NotRunning,
}

/// Holder side: claims `sn`'s registered head, if any, and hands it the lock
/// (the word stays locked). The caller holds the lock and has done
/// everything it must do while holding it: after the grant the head owns the
/// lock and the lock may be freed at once.
///
/// A head tagged as not yet running (given head-ship while asleep or
/// preempted, and not yet back on a CPU) is passed over when `pass_sleeper`
/// and the lock is [`oversubscribed`] or the tag is older than
/// [`TAG_OLD_TICKS`]: a FIFO hand-off to a thread without a CPU would stall
/// every waiter for its wake-up (CST, section 3.2: pass the lock to an
/// active waiter). Such a head is granted by the first unlock after it runs.
pub(crate) fn grant(lock: LockRef<'_>, sn: &Snode, pass_sleeper: bool) -> Grant {
    let head = queue_head(sn);
    // Relaxed: a hint for the claim.
    let p = head.load(Ordering::Relaxed);
    if p.is_null() {
        return Grant::NoHead;
    }
    if p.addr() & NOT_RUNNING != 0 && pass_sleeper && (tag_is_old(sn) || oversubscribed(lock)) {
        #[cfg(numa_loom)]
        sync::set_loom_passed(true);
        return Grant::NotRunning;
    }
    // Acquire: pairs with the Release of `register` (and, for a tagged
    // head, with the lock's order: its predecessor set the slot while
    // holding the lock), so our grant below comes after every earlier write
    // to the head's status in its modification order. The head's node stays
    // alive until it sees the grant (it waits for it if its withdrawal
    // fails).
    if head
        .compare_exchange(p, ptr::null_mut(), Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Grant::NoHead;
    }
    count!(snode_write(sn.node()));
    #[cfg(feature = "stats")]
    crate::stats::count(&sn.stats.grants);
    if p.addr() & NOT_RUNNING != 0 {
        count!(not_running_grant());
    }
    // SAFETY: a claimed head waits for this swap before it leaves (see the
    // module docs), so its node is alive until then.
    let p = unsafe { &*p.map_addr(|a| a & !NOT_RUNNING) };
    // Computed before the hand-over: after it the node may be gone.
    let key = p.park_key();
    // Release: hands over the lock: our critical section happens before the
    // head's, which loads its status with Acquire. A swap, not a store: a head
    // that lost its withdrawal to our claim may have gone to sleep.
    if p.status.swap(GRANTED, Ordering::Release) == PARKED {
        count!(parked_handoff());
        // SAFETY: the key is a queue node's key (see `QNode::park_key`), used
        // as a number only; the callback returns the default token.
        unsafe { sync::unpark_one(key, |_| sync::UnparkToken(0)) };
    }
    Grant::Granted
}

#[cfg(all(test, not(numa_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_not_running_tag_is_old_only_after_tag_old_ticks() {
        let now = crate::spin::ticks();
        assert!(
            !older_than_tag_limit(now, now),
            "a tag set just now is young"
        );
        assert!(
            older_than_tag_limit(now.saturating_sub(2 * TAG_OLD_TICKS), now),
            "a tag set 2 x TAG_OLD_TICKS ago is old"
        );
        // A clock that reads behind the writer's (another CPU's counter)
        // makes the tag young, never old.
        assert!(
            !older_than_tag_limit(now.saturating_add(1 << 40), now),
            "a tag from the future is young"
        );
    }
}
