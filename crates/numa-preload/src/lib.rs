//! An `LD_PRELOAD` interposer that runs unmodified C and C++ programs on this
//! workspace's locks: `pthread_mutex_*`, `pthread_cond_*` and `pthread_rwlock_*`
//! are replaced process-wide by the lock chosen with `NUMA_LOCK`.
//!
//! ```text
//! cargo build --release -p numa-preload
//! LD_PRELOAD=target/release/libnuma_preload.so NUMA_LOCK=cna ./program
//! ```
//!
//! This is the user-space counterpart of LiTL (Guiroux, Lachaize, Quéma, "Multicore
//! Locks: the Case is Not Closed Yet", USENIX ATC 2016), through which the CNA paper
//! (Dice & Kogan, EuroSys 2019) ran LevelDB and Kyoto Cabinet on CNA. Unlike LiTL,
//! the lock lives *inside* the caller's `pthread_mutex_t` (no side hash table), so
//! an all-zero static initializer is an unlocked lock, nothing is allocated per
//! lock and `lock` costs no lookup (see [`layout`]).
//!
//! # `NUMA_LOCK`
//!
//! | value | mutexes | rwlocks | condvars |
//! | --- | --- | --- | --- |
//! | `cst` (default, when unset or empty) | `cst_mutex::RawMutex` (numa-spin's CNA queue, blocking: parked waiters woken ahead of their turn) | `cst_mutex::RawRwLock` | futex sequence condvar ([`cond`]) |
//! | `cna` | `numa_spin::RawMutex` (CNA) | `cst_mutex::RawRwLock` | futex sequence condvar |
//! | `queued` | `numa_spin::RawQueuedMutex` (MCS-style queue, no NUMA reordering) | `cst_mutex::RawRwLock` | futex sequence condvar |
//! | `hq` | `numa_spin::RawHqMutex` | `cst_mutex::RawRwLock` | futex sequence condvar |
//! | `pthread` | glibc | glibc | glibc |
//!
//! `cst` is the default because it parks: on a machine with more runnable
//! threads than CPUs a spinning queue lock hands the lock to preempted waiters,
//! while `cst`'s queued waiters park after their spin budget and the waiter
//! ahead of each wakes it before its turn.
//! Any other value stops the program before `main` with one line on stderr naming
//! `NUMA_LOCK` and the accepted values, and exit status 2: a run that asked for a
//! lock never measures glibc by mistake. The choice is made once per process, at
//! the first lock call or in the library's constructor, whichever comes first.
//!
//! Mutexes that are robust, priority-inheritance, priority-protect or
//! process-shared are created by glibc's `pthread_mutex_init` and every call on
//! them goes to glibc (see [`mutex`]); process-shared rwlocks and condvars
//! likewise. The condvar waits are cancellation points (see [`cancel`]).
//!
//! # `NUMA_LOCK_STATS=1`
//!
//! At exit, one line per lock kind on stderr: acquisitions, contended acquisitions
//! (the first attempt failed) and same-node handoffs (contended acquisitions whose
//! previous holder ran on the same NUMA node), plus condvar waits and wake-ups
//! (see [`stats`]).
//!
//! # Robustness in a real process
//!
//! - Correct before any constructor ran: the lock choice is an atomic decided at
//!   first use ([`mode`]); glibc's functions are resolved with `dlsym` in the
//!   constructor and lazily otherwise ([`real`]).
//! - No allocation on the lock paths of this crate. What the locks underneath do
//!   is documented in [`mode`] (numa-spin's per-thread queue-node slot,
//!   parking_lot_core's table for `cst`).
//! - No Rust panic crosses `extern "C"`: since Rust 1.81 a panic reaching an
//!   `extern "C"` function aborts the process; the lock paths here avoid every
//!   panicking operation (checked arithmetic, no indexing, no `unwrap`).
//! - Our exports are unversioned, and the dynamic linker binds an unversioned
//!   definition to every versioned reference, so `pthread_cond_wait@GLIBC_2.3.2`
//!   and `pthread_mutex_clocklock@GLIBC_2.34` reach this code (tested with
//!   `NUMA_LOCK_STATS`).
//!
//! Only x86-64 Linux with glibc is supported: the in-place layouts are glibc's.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")))]
compile_error!(
    "numa-preload supports x86-64 Linux with glibc only (it reuses glibc's lock layouts)"
);

mod buf;
pub mod cancel;
pub mod cond;
#[cfg(not(test))]
mod deepbind;
mod exports;
#[cfg(feature = "test-hooks")]
mod hooks;
mod init;
pub mod layout;
pub mod mode;
pub mod mutex;
pub mod real;
pub mod rwlock;
pub mod stats;
mod time;
