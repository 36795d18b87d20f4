//! Ways to learn the CPU the calling thread runs on.
//!
//! On x86-64 Linux the kernel writes `(node << 12) | cpu` into the
//! `IA32_TSC_AUX` MSR of every CPU (`arch/x86/kernel/cpu/common.c`,
//! `setup_getcpu()`; the vDSO `getcpu` reads it back). User space reads it
//! with `RDPID` (Ice Lake / Zen 2 and later; CPUID leaf 7, ECX bit 22) or,
//! slower because it waits for earlier instructions, `RDTSCP` (CPUID leaf
//! 0x8000_0001, EDX bit 27). Elsewhere glibc's `sched_getcpu(3)` is used: it
//! reads the rseq area the kernel keeps up to date (glibc >= 2.35), or falls
//! back to the vDSO.
//!
//! Measured on the 2-core KVM guest this crate was developed on (a C loop of
//! 10 M calls): RDPID 2.1 ns, RDTSCP 18 ns, `sched_getcpu` 1.5 ns;
//! `benches/benches/current_node.rs` measures them again from Rust
//! (`cargo bench -p numa-bench --bench current_node`, load average 8.9 on 2
//! cores, minus the call overhead measured with `Unsupported`): RDPID
//! +1.6 ns, `sched_getcpu` +2.8 ns, RDTSCP +23 ns. Hence the order RDPID,
//! `sched_getcpu`, RDTSCP.

use std::sync::atomic::{AtomicU8, Ordering};

/// A way to read the current CPU. See the module docs for the costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CpuSource {
    /// `RDPID` reading `TSC_AUX` (x86-64 Linux only).
    Rdpid,
    /// `RDTSCP` reading `TSC_AUX` (x86-64 Linux only).
    Rdtscp,
    /// glibc/musl `sched_getcpu(3)` (Linux).
    SchedGetcpu,
    /// No way to learn the CPU: always CPU 0.
    Unsupported,
}

const RDPID_BIT: u8 = 1;
const RDTSCP_BIT: u8 = 2;
const DETECTED_BIT: u8 = 0x80;
static FEATURES: AtomicU8 = AtomicU8::new(0);

#[inline]
fn features() -> u8 {
    let f = FEATURES.load(Ordering::Relaxed);
    if f & DETECTED_BIT != 0 {
        return f;
    }
    let f = detect() | DETECTED_BIT;
    FEATURES.store(f, Ordering::Relaxed);
    f
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> u8 {
    use std::arch::x86_64::{__cpuid, __cpuid_count, __get_cpuid_max};
    let mut f = 0;
    let (max_leaf, _) = __get_cpuid_max(0);
    if max_leaf >= 7 && (__cpuid_count(7, 0).ecx >> 22) & 1 == 1 {
        f |= RDPID_BIT;
    }
    let (max_ext, _) = __get_cpuid_max(0x8000_0000);
    if max_ext >= 0x8000_0001 && (__cpuid(0x8000_0001).edx >> 27) & 1 == 1 {
        f |= RDTSCP_BIT;
    }
    f
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> u8 {
    0
}

impl CpuSource {
    /// Whether this source works on this machine (CPUID says so, or the OS
    /// has the call).
    #[inline]
    pub fn is_available(self) -> bool {
        match self {
            CpuSource::Rdpid => features() & RDPID_BIT != 0,
            CpuSource::Rdtscp => features() & RDTSCP_BIT != 0,
            CpuSource::SchedGetcpu => cfg!(any(target_os = "linux", target_os = "android")),
            CpuSource::Unsupported => true,
        }
    }

    /// The available sources, in this crate's order of preference (RDPID,
    /// then `sched_getcpu`, then RDTSCP).
    pub fn available() -> Vec<CpuSource> {
        [
            CpuSource::Rdpid,
            CpuSource::SchedGetcpu,
            CpuSource::Rdtscp,
            CpuSource::Unsupported,
        ]
        .into_iter()
        .filter(|s| s.is_available())
        .collect()
    }

    /// The raw `TSC_AUX` value, for [`CpuSource::Rdpid`] and
    /// [`CpuSource::Rdtscp`] when available; `None` otherwise.
    #[inline]
    pub fn read_tsc_aux(self) -> Option<u32> {
        match self {
            // SAFETY: `is_available` checked CPUID for the instruction.
            CpuSource::Rdpid if self.is_available() => Some(unsafe { rdpid() }),
            // SAFETY: `is_available` checked CPUID for the instruction.
            CpuSource::Rdtscp if self.is_available() => Some(unsafe { rdtscp() }),
            _ => None,
        }
    }

    /// The CPU the calling thread runs on (it may move right after), or
    /// `None` if this source is not available or the call failed.
    #[inline]
    pub fn read_cpu(self) -> Option<usize> {
        if !self.is_available() {
            return None;
        }
        // SAFETY: availability was checked just above.
        unsafe { self.read_cpu_unchecked() }
    }

    /// [`CpuSource::read_cpu`] without the availability check.
    ///
    /// # Safety
    /// `self.is_available()` must have returned `true` (otherwise RDPID or
    /// RDTSCP may be an illegal instruction).
    #[inline]
    pub(crate) unsafe fn read_cpu_unchecked(self) -> Option<usize> {
        match self {
            // SAFETY: the caller guarantees the instruction exists.
            CpuSource::Rdpid => Some((unsafe { rdpid() } & 0xfff) as usize),
            // SAFETY: the caller guarantees the instruction exists.
            CpuSource::Rdtscp => Some((unsafe { rdtscp() } & 0xfff) as usize),
            CpuSource::SchedGetcpu => sched_getcpu(),
            CpuSource::Unsupported => Some(0),
        }
    }
}

/// Reads `TSC_AUX` with `RDPID`.
///
/// # Safety
/// The CPU must support `RDPID` (CPUID.7.0:ECX bit 22).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
pub(crate) unsafe fn rdpid() -> u32 {
    let aux: u64;
    // SAFETY:
    // - the caller guarantees RDPID exists;
    // - RDPID only writes the named register: no memory, stack or flags.
    unsafe {
        std::arch::asm!("rdpid {}", out(reg) aux, options(nomem, nostack, preserves_flags));
    }
    aux as u32
}

/// Reads `TSC_AUX` with `RDTSCP` (the TSC value is discarded).
///
/// # Safety
/// The CPU must support `RDTSCP` (CPUID.80000001H:EDX bit 27).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
pub(crate) unsafe fn rdtscp() -> u32 {
    let aux: u32;
    // SAFETY:
    // - the caller guarantees RDTSCP exists;
    // - RDTSCP writes EAX, EDX, ECX only: no memory, stack or flags.
    unsafe {
        std::arch::asm!(
            "rdtscp",
            out("eax") _,
            out("edx") _,
            out("ecx") aux,
            options(nomem, nostack, preserves_flags)
        );
    }
    aux
}

/// Never called: `is_available` is false for RDPID off x86-64 Linux.
///
/// # Safety
/// None needed; it returns 0.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline]
pub(crate) unsafe fn rdpid() -> u32 {
    0
}

/// Never called: `is_available` is false for RDTSCP off x86-64 Linux.
///
/// # Safety
/// None needed; it returns 0.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline]
pub(crate) unsafe fn rdtscp() -> u32 {
    0
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn sched_getcpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions; it returns -1 on error.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[inline]
fn sched_getcpu() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_sources_agree_on_the_cpu() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        for source in CpuSource::available() {
            let cpu = source.read_cpu().expect("available source reads a CPU");
            assert!(cpu < n.max(crate::MAX_CPUS), "{source:?} gave {cpu}");
        }
        if CpuSource::Rdpid.is_available() && CpuSource::Rdtscp.is_available() {
            // Same register read two ways; retry across migrations.
            let same = (0..100)
                .any(|_| CpuSource::Rdpid.read_tsc_aux() == CpuSource::Rdtscp.read_tsc_aux());
            assert!(same, "RDPID and RDTSCP disagree on TSC_AUX");
        }
        assert_eq!(CpuSource::Unsupported.read_cpu(), Some(0));
        assert_eq!(CpuSource::SchedGetcpu.read_tsc_aux(), None);
    }
}
