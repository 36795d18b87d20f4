//! Reads of lazily initialized process state ([`lazy_read`]) and the stretch of a
//! slow path in which none may happen ([`Enqueued`]); see
//! [`before_enqueue`](crate::node::before_enqueue) for why.

/// The stretch of a slow path from the initialization of the calling thread's
/// queue node to the end of the slow path (from [`Enqueued::begin`] until the
/// value is dropped), in which nothing may read lazily initialized process
/// state (see [`before_enqueue`](crate::node::before_enqueue)). In this crate's unit tests the reads that
/// can allocate or log ([`lazy_read`]) count the calls made inside it on the
/// calling thread (`tests::lazy_reads_while_enqueued`); elsewhere it is
/// nothing.
pub(crate) struct Enqueued(());

impl Enqueued {
    /// The calling thread is about to initialize its queue node.
    #[inline(always)]
    pub(crate) fn begin() -> Self {
        #[cfg(all(test, not(numa_loom)))]
        tests::enqueued_by(1);
        Enqueued(())
    }
}

impl Drop for Enqueued {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(all(test, not(numa_loom)))]
        tests::enqueued_by(-1);
    }
}

/// Called by the reads of lazily initialized process state that can allocate,
/// log or wait (the node lookup, the process-wide tunables); in this crate's
/// unit tests, counts a call made inside an [`Enqueued`] stretch.
#[inline(always)]
pub(crate) fn lazy_read() {
    #[cfg(all(test, not(numa_loom)))]
    tests::note_lazy_read();
}

#[cfg(all(test, not(numa_loom)))]
pub(crate) mod tests {
    use std::cell::Cell;

    std::thread_local! {
        /// [`Enqueued`] stretches the thread is in (more than 1 only if a
        /// slow path re-entered a lock inside one).
        static ENQUEUED: Cell<i32> = const { Cell::new(0) };
        /// [`Enqueued`] stretches the thread began.
        static ENQUEUES: Cell<u64> = const { Cell::new(0) };
        /// [`lazy_read`] calls the thread made inside an [`Enqueued`] stretch.
        static LAZY_READS_WHILE_ENQUEUED: Cell<u64> = const { Cell::new(0) };
    }

    /// Enters (`1`) or leaves (`-1`) an [`Enqueued`] stretch.
    pub(crate) fn enqueued_by(delta: i32) {
        // `try_with`: a thread-local destructor may take a lock.
        let _ = ENQUEUED.try_with(|e| e.set(e.get() + delta));
        if delta > 0 {
            let _ = ENQUEUES.try_with(|n| n.set(n.get() + 1));
        }
    }

    /// See [`lazy_read`].
    pub(crate) fn note_lazy_read() {
        if ENQUEUED.try_with(Cell::get).unwrap_or(0) > 0 {
            let _ = LAZY_READS_WHILE_ENQUEUED.try_with(|n| n.set(n.get() + 1));
        }
    }

    /// How many [`Enqueued`] stretches (queued waits) the calling thread began.
    pub(crate) fn enqueues() -> u64 {
        ENQUEUES.with(Cell::get)
    }

    /// How many reads of lazily initialized process state the calling thread
    /// made inside an [`Enqueued`] stretch (0 in a correct slow path).
    pub(crate) fn lazy_reads_while_enqueued() -> u64 {
        LAZY_READS_WHILE_ENQUEUED.with(Cell::get)
    }
}
