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
//!   `status` for its budget ([`Spin`]), then parks on its node's key
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

use crate::cohort::{Cohort, HEAD_MASK, HEAD_ONE, LOCKED_BIT, spin_round, spin_rounds};
use crate::snode::{PIN_ONE, QUEUED_ONE, Snode};
use crate::sync::{self, AtomicPtr, AtomicU32, Ordering, ParkToken};
use std::ptr;

/// Waiting for head-ship, running.
const WAITING: u32 = 0;
/// Waiting for head-ship, parked (or about to park) on [`QNode::park_key`].
const PARKED: u32 = 1;
/// Head of its snode queue (spinning, or, after losing its withdrawal to a
/// holder's claim, about to sleep as `PARKED` until the grant).
const HEAD: u32 = 2;
/// Head, and a holder handed it the lock.
const GRANTED: u32 = 3;

/// A waiter's node in an snode queue. Lives on the waiter's stack for the
/// duration of one slow acquisition.
#[repr(align(128))]
pub(crate) struct QNode {
    status: AtomicU32,
    next: AtomicPtr<QNode>,
}

impl QNode {
    pub(crate) fn new() -> Self {
        QNode {
            status: AtomicU32::new(WAITING),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The parking key of this node: its address + 2. Lock keys are a lock's
    /// address + 0, 1 or 3 (8-aligned locks) and snode keys are 8-aligned heap
    /// addresses, so no key of this crate equals a queue node's, even when a
    /// lock later lives at the stack address a queue node had.
    #[inline]
    fn park_key(&self) -> usize {
        self as *const QNode as usize + 2
    }
}

/// The queue fields of an snode (in its hot line).
pub(crate) struct SnodeQueue {
    /// The last queued waiter of the node, null when nobody queues.
    pub(crate) tail: AtomicPtr<QNode>,
    /// The registered head (spinning for the word or a grant), null when none
    /// is claimable.
    pub(crate) head: AtomicPtr<QNode>,
}

impl SnodeQueue {
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        SnodeQueue {
            tail: AtomicPtr::new(ptr::null_mut()),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        SnodeQueue {
            tail: AtomicPtr::new(ptr::null_mut()),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

/// Rounds of the pause phase of [`Spin`]: round `r` pauses `2^min(r - 1, 6)`
/// times, 1 + 2 + ... + 64 = 127 pauses in all (about 0.5-6 us, depending on
/// the CPU's pause latency): the wait for a hand-off within a node, one
/// critical section plus a cache-line transfer.
#[cfg(not(numa_loom))]
const PAUSE_ROUNDS: u32 = 7;

/// How long a waiter yields after its pause phase before it parks: 50 us,
/// about two batches of the other node (128 hand-offs at 100-200 ns each on a
/// 16-core x86 machine), so the head of a node that waits for its turn is
/// still running when the turn comes. On an oversubscribed CPU a single yield
/// runs other threads for a time slice, so the waiter parks after one or two.
#[cfg(not(numa_loom))]
const YIELD_PHASE: std::time::Duration = std::time::Duration::from_micros(50);

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

/// A waiter's spin budget: pauses, then yields for [`YIELD_PHASE`]; under
/// loom, the loom thread's spin rounds (`__set_loom_spin_rounds`), each a
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
            if self.round < PAUSE_ROUNDS {
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

/// How an untimed waiter's queued wait ended.
pub(crate) enum Queued {
    /// It holds the lock (`granted`: handed over by a holder's grant).
    Acquired { granted: bool },
    /// It spent its budget as head and left the queue: it waits as a parked
    /// waiter of the snode now.
    OutOfBudget,
}

/// The queued wait of an untimed waiter of `sn`: enqueue, wait for head-ship,
/// then wait as head for the word or a grant. The caller pinned `sn`
/// ([`crate::snode::SnodeList::pin`]); a waiter that acquires drops the pin
/// with its queue count, one that runs out of budget keeps it.
pub(crate) fn wait(cohort: &Cohort, sn: &Snode) -> Queued {
    // Relaxed: the queued count is a hint for arrivals (see
    // `Cohort::lock_slow`); our pin keeps the snode attached.
    sn.hot.users.fetch_add(QUEUED_ONE, Ordering::Relaxed);
    let q = QNode::new();
    let me = &q as *const QNode as *mut QNode;
    let queue = &sn.hot.queue;
    // AcqRel: Release publishes our node's initial `next` (null) to the next
    // waiter, which writes `next` after reading `tail` with Acquire (else our
    // initialisation could overwrite its link); Acquire makes our predecessor's
    // node (its initial `next`) visible before we write its `next`.
    let pred = queue.tail.swap(me, Ordering::AcqRel);
    if !pred.is_null() {
        // SAFETY: `pred` is queued ahead of us: it cannot leave before it passes
        // head-ship to a successor, which it waits for us to link (see
        // `pass_headship`), so its node is alive.
        let pred = unsafe { &*pred };
        // Release: our predecessor reads our node through this pointer (an
        // Acquire load) and must see its initialisation.
        pred.next.store(me, Ordering::Release);
        wait_for_status(sn, &q, WAITING, HEAD);
    }
    #[cfg(feature = "stats")]
    crate::stats::count(&sn.stats.queued);
    wake_ahead(sn, &q);
    let r = match compete(cohort, sn, &q) {
        Some(granted) => Queued::Acquired { granted },
        None => Queued::OutOfBudget,
    };
    pass_headship(sn, &q);
    // Release: with the pin (when we acquired), this ends our use of the
    // snode; a detacher's Acquire CAS of `users` from 0 orders it before the
    // snode's reuse. Our queue node is no longer referenced (see
    // `pass_headship`).
    let unpin = if matches!(r, Queued::Acquired { .. }) {
        PIN_ONE
    } else {
        0
    };
    sn.hot
        .users
        .fetch_sub(QUEUED_ONE + unpin, Ordering::Release);
    r
}

/// Spins, then parks, until `q`'s status becomes `target`: head-ship
/// (`HEAD`, waiting from `WAITING`, set by the predecessor) or the grant
/// (`GRANTED`, waiting from `HEAD` after losing the withdrawal to a holder's
/// claim: the claimer may be preempted between its claim and its grant).
fn wait_for_status(sn: &Snode, q: &QNode, running: u32, target: u32) {
    let mut spin = Spin::new();
    loop {
        // Acquire: pairs with the Release of `pass_headship` (head-ship: the
        // snode's registration slot was cleared, by the claim or the
        // withdrawal of our predecessor, before we register in it) or of the
        // grant's swap (the granting holder's critical section happens before
        // ours).
        let st = q.status.load(Ordering::Acquire);
        if st == target {
            return;
        }
        if st == running && spin.spin() {
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
            spin = Spin::new();
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

/// Passes head-ship of `sn`'s queue from `q` to its successor, or empties the
/// queue. After this nobody references `q`.
fn pass_headship(sn: &Snode, q: &QNode) {
    let queue = &sn.hot.queue;
    // Acquire: pairs with the successor's Release link (its node initialised).
    let mut next = q.next.load(Ordering::Acquire);
    if next.is_null() {
        let me = q as *const QNode as *mut QNode;
        // Relaxed: the next arrival becomes head without reading anything of
        // ours. In particular we never wrote the snode's registration slot: a
        // head registers only with a successor linked behind it (`compete`),
        // and a head with a successor passes head-ship below instead of
        // emptying the queue, so nothing of ours in the slot can be ordered
        // after the next head's registration. (With registration not tied to a
        // successor, this CAS would need Release, paired with the arrival's
        // Acquire `tail` swap, or a late clear could erase the next head's
        // registration: `queue_grant_and_headship_within_a_node` deadlocked
        // that way.) On failure a successor swapped `tail` and is about to link.
        if queue
            .tail
            .compare_exchange(me, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        loop {
            next = q.next.load(Ordering::Acquire);
            if !next.is_null() {
                break;
            }
            sync::spin_loop();
        }
    }
    // SAFETY: a linked successor waits for head-ship from us, so its node is alive.
    let next = unsafe { &*next };
    // Release: our clearing of the snode's registration slot happens before
    // the successor registers in it (it loads its status with Acquire).
    if next.status.swap(HEAD, Ordering::Release) == PARKED {
        #[cfg(feature = "stats")]
        crate::stats::count(&sn.stats.wakeups);
        // SAFETY: the key is a queue node's key (see `QNode::park_key`); the
        // callback returns the default token and touches nothing.
        unsafe { sync::unpark_one(next.park_key(), |_| sync::UnparkToken(0)) };
    }
}

/// The head's wait: registers (if the word's head count has room), then spins
/// on the word and on its own status. `Some(granted)` once it holds the lock;
/// `None` once it spent its budget and withdrew (it still is the head and
/// must pass head-ship on).
fn compete(cohort: &Cohort, sn: &Snode, q: &QNode) -> Option<bool> {
    let me = q as *const QNode as *mut QNode;
    // Relaxed: only we write our status now, until a holder that claimed us
    // grants (its claim reads our Release registration, after this store).
    q.status.store(HEAD, Ordering::Relaxed);
    let mut registered = false;
    let mut tried_to_register = false;
    let mut spin = Spin::new();
    let mut alone = 0u32;
    loop {
        // Acquire: pairs with the grant's Release store, so the granting
        // holder's critical section happens before ours.
        if registered && q.status.load(Ordering::Acquire) == GRANTED {
            return Some(true);
        }
        // Relaxed: a hint for the CAS below, which acquires.
        let s = cohort.state.load(Ordering::Relaxed);
        if s & LOCKED_BIT == 0 {
            let new = (s | LOCKED_BIT) - if registered { HEAD_ONE } else { 0 };
            // Acquire: pairs with the Release of the unlock that freed the word.
            if cohort
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                if registered {
                    // Relaxed: we hold the lock, so no holder can claim us; the
                    // next head registers after our Release head-ship pass.
                    queue_head(sn).store(ptr::null_mut(), Ordering::Relaxed);
                }
                return Some(false);
            }
            continue;
        }
        // Relaxed: a hint (a successor links with Release; we read its node
        // only in `pass_headship`, with Acquire).
        let crowded = !q.next.load(Ordering::Relaxed).is_null();
        if crowded {
            if !tried_to_register && spin.rounds() >= REGISTER_AFTER_ROUNDS {
                tried_to_register = true;
                registered = register(cohort, sn, me);
            }
            if spin.spin() {
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
        // Release store we read with Acquire) follows.
        if queue_head(sn)
            .compare_exchange(me, ptr::null_mut(), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            // Relaxed: the count is a hint for unlockers (they claim through
            // `head`); every change is an RMW of the word.
            cohort.state.fetch_sub(HEAD_ONE, Ordering::Relaxed);
            return None;
        }
        wait_for_status(sn, q, HEAD, GRANTED);
        return Some(true);
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
fn register(cohort: &Cohort, sn: &Snode, me: *mut QNode) -> bool {
    // Relaxed: the count only sends unlocks to the slow path; a holder that
    // sees it claims through `head`, and a claim that comes before our store
    // below finds nothing and releases the word, which we then take.
    let mut s = cohort.state.load(Ordering::Relaxed);
    loop {
        if s & HEAD_MASK == HEAD_MASK {
            return false;
        }
        match cohort.state.compare_exchange_weak(
            s,
            s + HEAD_ONE,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => break,
            Err(x) => s = x,
        }
    }
    // Release: a holder that claims us (an Acquire CAS reading this store)
    // then stores `GRANTED` after every earlier write to our status (our
    // node's initialisation, the predecessor's `HEAD` we read), so the grant
    // is the last value of our status and we cannot miss it.
    queue_head(sn).store(me, Ordering::Release);
    true
}

/// Holder side: claims `sn`'s registered head, if any, and hands it the lock
/// (the word stays locked). Returns whether it did. The caller holds the lock
/// and has done everything it must do while holding it: after the grant the
/// head owns the lock and the lock may be freed at once.
pub(crate) fn grant(cohort: &Cohort, sn: &Snode) -> bool {
    let head = queue_head(sn);
    // Relaxed: a hint for the claim.
    let p = head.load(Ordering::Relaxed);
    if p.is_null() {
        return false;
    }
    // Acquire: pairs with the Release of `register`, so our grant below comes
    // after every earlier write to the head's status in its modification
    // order. The head's node stays alive until it sees the grant (it waits for
    // it if its withdrawal fails).
    if head
        .compare_exchange(p, ptr::null_mut(), Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // Relaxed: we hold the lock; the count is a hint (see `register`).
    cohort.state.fetch_sub(HEAD_ONE, Ordering::Relaxed);
    #[cfg(feature = "stats")]
    crate::stats::count(&sn.stats.grants);
    // SAFETY: a claimed head waits for this swap before it leaves (see the
    // module docs), so its node is alive until then.
    let p = unsafe { &*p };
    // Computed before the hand-over: after it the node may be gone.
    let key = p.park_key();
    // Release: hands over the lock: our critical section happens before the
    // head's, which loads its status with Acquire. A swap, not a store: a head
    // that lost its withdrawal to our claim may have gone to sleep.
    if p.status.swap(GRANTED, Ordering::Release) == PARKED {
        // SAFETY: the key is a queue node's key (see `QNode::park_key`), used
        // as a number only; the callback returns the default token.
        unsafe { sync::unpark_one(key, |_| sync::UnparkToken(0)) };
    }
    true
}
