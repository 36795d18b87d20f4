//! A lock's list of snodes: lookup (attaching a snode on first contention),
//! the cyclic order, and detaching idle snodes to the pool (see `snode.rs`
//! for why stale readers are safe).

use crate::snode::{DEAD, PIN_ONE, Snode};
use crate::sync::{self, AtomicPtr, Ordering};
use std::ptr;

/// The longest walk of a list. A list has one snode per node, plus the
/// requeue one; only a stale walk goes further: a thread that loaded a
/// pointer before a detach may follow links of reused snodes, including the
/// link of another thread's unpublished snode, which may point back into
/// the stale chain for a moment. Such a walk ends here, finds nothing, and
/// its thread looks again from the head.
#[cfg(not(numa_loom))]
const MAX_WALK: usize = 4096;
/// Under loom: the models have at most four snodes per lock.
#[cfg(numa_loom)]
const MAX_WALK: usize = 8;

/// The head of a lock's snode list (one pointer, null while the lock holds
/// no snode).
pub(crate) struct SnodeList {
    head: AtomicPtr<Snode>,
}

impl SnodeList {
    /// An empty list.
    #[cfg(not(numa_loom))]
    pub(crate) const fn new() -> Self {
        SnodeList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// An empty list (loom atomics are not `const`).
    #[cfg(numa_loom)]
    pub(crate) fn new() -> Self {
        SnodeList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// This list's identity, recorded in its snodes' `owner`.
    #[inline]
    fn addr(&self) -> usize {
        self as *const SnodeList as usize
    }

    /// `p` as an snode of this list, or `None` (null, or another lock's).
    #[inline]
    fn own(&self, p: *mut Snode) -> Option<&Snode> {
        // SAFETY: snode memory is type-stable (never deallocated while the
        // process runs, see the module docs), so any snode pointer read from a
        // list or a pool points to a valid `Snode` whose shared fields are
        // atomics.
        let s = unsafe { p.as_ref() }?;
        // Relaxed: `owner` is set before the snode is published (see `init`).
        (s.owner.load(Ordering::Relaxed) == self.addr()).then_some(s)
    }

    /// The first snode (newest), or `None` if the lock holds none.
    #[inline]
    pub(crate) fn first(&self) -> Option<&Snode> {
        // Acquire: pairs with the Release CAS that published the head (and,
        // through its release sequence, the older snodes).
        self.own(self.head.load(Ordering::Acquire))
    }

    /// Iterates over this lock's snodes, newest first. The snodes are stable
    /// for the lock holder (only it detaches) and for a thread that holds a
    /// pin on one of them (no snode of a list with a pinned one is detached).
    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            cur: self.first(),
            steps: 0,
        }
    }

    /// The snode of `node`, if one exists.
    #[inline]
    pub(crate) fn find(&self, node: usize) -> Option<&Snode> {
        self.iter().find(|s| s.node() == node)
    }

    /// The snode of `node`, attaching one if none exists, pinned: it stays
    /// this lock's until [`Snode::unpin`] (or a queued waiter's exit, which
    /// drops its pin with the queue count).
    pub(crate) fn pin(&self, node: usize) -> &Snode {
        self.lookup(node, true)
    }

    /// The lookup behind [`SnodeList::pin`].
    ///
    /// A fresh snode is taken from the pool, initialised with this lock as
    /// owner and published with a CAS of the head. Two threads of one node may
    /// race here: both prepare one, one CAS wins, the loser finds the winner's
    /// snode on its retry and gives its own back, unless a stale pinner holds
    /// it (it saw the owner and node set): then the loser publishes it anyway
    /// (a second snode for the node is harmless: unlocks walk every snode),
    /// so that an owner check that passed always names a published snode.
    fn lookup(&self, node: usize, pin: bool) -> &Snode {
        let pins = if pin { PIN_ONE } else { 0 };
        let mut fresh: Option<&Snode> = None;
        loop {
            // Acquire: pairs with the Release CAS that published the head.
            let head = self.head.load(Ordering::Acquire);
            let found = Iter {
                list: self,
                cur: self.own(head),
                steps: 0,
            }
            .find(|s| s.node() == node);
            if let Some(s) = found {
                let usable = if pin {
                    // The owner and node are checked again under the pin: a
                    // stale walk (through snodes detached meanwhile) may have
                    // found an snode that is now another lock's.
                    if s.try_pin() {
                        // Relaxed: ordered by the pin's Acquire (see `try_pin`).
                        let ok = s.owner.load(Ordering::Relaxed) == self.addr() && s.node() == node;
                        if !ok {
                            s.unpin();
                        }
                        ok
                    } else {
                        false
                    }
                } else {
                    true
                };
                if usable {
                    match fresh {
                        None => return s,
                        Some(f) if f.try_kill(pins) => {
                            // Relaxed: `DEAD` now; the pool publishes it.
                            f.owner.store(0, Ordering::Relaxed);
                            crate::pool::give(f);
                            return s;
                        }
                        // A stale pinner holds our unpublished snode: publish
                        // it below, and keep the one we found unpinned.
                        Some(_) => {
                            if pin {
                                s.unpin();
                            }
                        }
                    }
                } else if fresh.is_none() {
                    // `DEAD` (a detach in progress or done) or no longer ours:
                    // look again once the detacher is through.
                    sync::spin_loop();
                    continue;
                }
            }
            let f = *fresh.get_or_insert_with(|| {
                let f = crate::pool::take();
                f.init(self.addr(), node, pins);
                f
            });
            f.set_next(head);
            // Release on success: publishes the fresh snode's initialisation.
            // Relaxed on failure: we loop and load the head with Acquire.
            if self
                .head
                .compare_exchange(
                    head,
                    f as *const Snode as *mut Snode,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return f;
            }
        }
    }

    /// The snode after `s` in the cyclic global order.
    #[inline]
    pub(crate) fn next_cyclic<'a>(&'a self, s: &'a Snode) -> Option<&'a Snode> {
        self.own(s.next_ptr()).or_else(|| self.first())
    }

    /// Number of snodes (for tests and the memory-cost accounting; a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    /// Detaches every snode of the lock and gives them back to the pool, if
    /// nobody uses any of them. The caller holds the lock (so no other thread
    /// detaches, and no unlocker walks the list) and uses none of them
    /// itself. Returns whether the lock now holds no snode of its own.
    ///
    /// Every snode's `users` goes from exactly 0 to `DEAD` (Acquire: after
    /// every earlier user's Release exit) or the attempt is undone: a waiter
    /// that pinned or queued is still inside the lock's slow path and will
    /// try again when it holds the lock. Then the head CAS unlinks them; it
    /// fails, and the attempt is undone, if an arrival pushed a fresh snode
    /// meanwhile. Arrivals that loaded the old pointers find them `DEAD` or
    /// owned by another lock, and look again.
    pub(crate) fn detach_idle(&self) -> bool {
        // Acquire: as in `first`.
        let head = self.head.load(Ordering::Acquire);
        let Some(first) = self.own(head) else {
            return true;
        };
        let mut marked = 0usize;
        let mut rest = ptr::null_mut();
        let mut ok = true;
        let mut cur = Some(first);
        while let Some(s) = cur {
            if marked >= MAX_WALK || !s.try_kill(0) {
                ok = false;
                break;
            }
            count!(snode_write(s.node()));
            marked += 1;
            rest = s.next_ptr();
            cur = self.own(rest);
        }
        // Release: the pointer we leave (a copied lock's foreign snodes, or
        // null) is published as every snode pointer is (see `next_ptr`).
        if ok
            && self
                .head
                .compare_exchange(head, rest, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            let mut p = head;
            for _ in 0..marked {
                // SAFETY: `p` is one of the snodes we just made `DEAD` and
                // unlinked: type-stable memory, ours alone now.
                let s = unsafe { &*p };
                p = s.next_ptr();
                // Relaxed: `DEAD`; the pool publishes it to its next user.
                s.owner.store(0, Ordering::Relaxed);
                crate::pool::give(s);
            }
            return true;
        }
        let mut p = head;
        for _ in 0..marked {
            // SAFETY: as above; the snode stays attached.
            let s = unsafe { &*p };
            p = s.next_ptr();
            // Relaxed: nothing changed in the snode while it was `DEAD`.
            s.hot.users.store(0, Ordering::Relaxed);
        }
        false
    }

    /// Gives this lock's own snodes back to the pool and forgets the rest (a
    /// byte-wise copy's view of another lock's snodes): `pthread_mutex_destroy`
    /// of a mutex that C code may have copied. Nobody uses the lock.
    pub(crate) fn release_own(&mut self) {
        let mut p = self.take_head();
        while let Some(s) = self.own(p) {
            p = s.next_ptr();
            if Self::kill_unused(s) {
                crate::pool::give(s);
            }
        }
    }

    fn take_head(&mut self) -> *mut Snode {
        #[cfg(any(not(numa_loom), numa_shuttle))]
        let head = std::mem::replace(self.head.get_mut(), ptr::null_mut());
        // loom's atomics have no `get_mut`.
        #[cfg(all(numa_loom, not(numa_shuttle)))]
        let head = self
            .head
            .with_mut(|p| std::mem::replace(p, ptr::null_mut()));
        head
    }

    /// Makes an snode that no waiter uses any more `DEAD`, waiting out stale
    /// pins (each is taken, checked and dropped without blocking). `false` if
    /// it is `DEAD` already: then it is not this lock's to give back.
    fn kill_unused(s: &Snode) -> bool {
        loop {
            // Relaxed: a first look; the CAS acquires.
            if s.hot.users.load(Ordering::Relaxed) & DEAD != 0 {
                return false;
            }
            if s.try_kill(0) {
                // Relaxed: `DEAD`; the pool publishes it.
                s.owner.store(0, Ordering::Relaxed);
                return true;
            }
            sync::spin_loop();
        }
    }
}

impl Drop for SnodeList {
    /// Gives every snode reachable from the head back to the pool: in Rust a
    /// lock is moved, never copied, so snodes that name an older address of
    /// this lock are this lock's too (C code that copies locks byte by byte
    /// uses [`SnodeList::release_own`]). A `DEAD` snode ends the walk: it was
    /// given back already, so it and the rest are not ours.
    fn drop(&mut self) {
        let mut p = self.take_head();
        let mut steps = 0;
        while !p.is_null() && steps < MAX_WALK {
            steps += 1;
            // SAFETY: type-stable memory (module docs); `&mut self` means no
            // thread uses the lock, and in Rust every snode reachable from it
            // is its own.
            let s = unsafe { &*p };
            p = s.next_ptr();
            if !Self::kill_unused(s) {
                return;
            }
            crate::pool::give(s);
        }
    }
}

/// Iterator over a lock's own snodes.
pub(crate) struct Iter<'a> {
    list: &'a SnodeList,
    cur: Option<&'a Snode>,
    steps: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Snode;
    #[inline]
    fn next(&mut self) -> Option<&'a Snode> {
        let s = self.cur?;
        self.steps += 1;

        self.cur = if self.steps < MAX_WALK {
            self.list.own(s.next_ptr())
        } else {
            None
        };
        Some(s)
    }
}

// SAFETY: all shared state is atomic; snode memory is type-stable (see the
// module docs) and every use of a shared snode is ordered by pins or by
// holding the lock.
unsafe impl Send for SnodeList {}
// SAFETY: as above.
unsafe impl Sync for SnodeList {}
