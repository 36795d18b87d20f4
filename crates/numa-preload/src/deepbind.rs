//! Libraries opened with `dlopen(.., RTLD_DEEPBIND)`.
//!
//! A library opened with `RTLD_DEEPBIND` looks its symbols up in itself and
//! its own dependencies first, so its calls to `pthread_mutex_lock` & co.
//! bind to glibc's, not to this preloaded library's: a mutex it shares with
//! the program would be taken by glibc's code on one side and ours on the
//! other (two encodings of one object: under `cst` they hang).
//!
//! `dlopen` is interposed: after glibc's, if the flags have `RTLD_DEEPBIND`,
//! every object the call loaded has its relocations of our exported symbols
//! (`R_X86_64_JUMP_SLOT`, and `R_X86_64_GLOB_DAT` for taken addresses)
//! pointed at our definitions, in its GOT (made writable for the write and
//! read-only again if it lies in the object's `PT_GNU_RELRO` segment). Its
//! other symbols keep their deep binding. Objects that were already loaded
//! are not touched (they bound to us when they were loaded). Under
//! `NUMA_LOCK=pthread` nothing is rewritten (glibc's on both sides).
//!
//! Not covered (and said once on stderr when met): more than [`MAX_OBJECTS`]
//! objects loaded at once; a library that looks our functions up with
//! `dlsym` on its own handle, or calls `dlopen` itself with `RTLD_DEEPBIND`
//! (its call binds to glibc's `dlopen`, not this one).

use core::ffi::{CStr, c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The most objects the process may have loaded when a deep-bound library
/// is opened (those beyond are neither remembered nor rewritten).
pub const MAX_OBJECTS: usize = 1024;

/// glibc's `dlopen`, found with `dlsym(RTLD_NEXT)` on first use.
static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);

/// The program was told once that a deep-bound library was not rewritten.
static WARNED: AtomicBool = AtomicBool::new(false);

const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// The objects loaded before the call (their program header addresses,
/// which are unique per object).
struct Seen {
    n: usize,
    phdrs: [usize; MAX_OBJECTS],
    /// Objects that could not be remembered or rewritten.
    missed: usize,
    /// Relocations rewritten.
    patched: usize,
}

/// Our definitions of the symbols a deep-bound library must not take from
/// glibc.
fn ours() -> [(&'static [u8], usize); 27] {
    use crate::exports as e;
    [
        (
            b"pthread_mutex_init",
            e::pthread_mutex_init as *const () as usize,
        ),
        (
            b"pthread_mutex_destroy",
            e::pthread_mutex_destroy as *const () as usize,
        ),
        (
            b"pthread_mutex_lock",
            e::pthread_mutex_lock as *const () as usize,
        ),
        (
            b"pthread_mutex_trylock",
            e::pthread_mutex_trylock as *const () as usize,
        ),
        (
            b"pthread_mutex_timedlock",
            e::pthread_mutex_timedlock as *const () as usize,
        ),
        (
            b"pthread_mutex_clocklock",
            e::pthread_mutex_clocklock as *const () as usize,
        ),
        (
            b"pthread_mutex_unlock",
            e::pthread_mutex_unlock as *const () as usize,
        ),
        (
            b"pthread_cond_init",
            e::pthread_cond_init as *const () as usize,
        ),
        (
            b"pthread_cond_destroy",
            e::pthread_cond_destroy as *const () as usize,
        ),
        (
            b"pthread_cond_wait",
            e::pthread_cond_wait as *const () as usize,
        ),
        (
            b"pthread_cond_timedwait",
            e::pthread_cond_timedwait as *const () as usize,
        ),
        (
            b"pthread_cond_clockwait",
            e::pthread_cond_clockwait as *const () as usize,
        ),
        (
            b"pthread_cond_signal",
            e::pthread_cond_signal as *const () as usize,
        ),
        (
            b"pthread_cond_broadcast",
            e::pthread_cond_broadcast as *const () as usize,
        ),
        (
            b"pthread_rwlock_init",
            e::pthread_rwlock_init as *const () as usize,
        ),
        (
            b"pthread_rwlock_destroy",
            e::pthread_rwlock_destroy as *const () as usize,
        ),
        (
            b"pthread_rwlock_rdlock",
            e::pthread_rwlock_rdlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_tryrdlock",
            e::pthread_rwlock_tryrdlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_timedrdlock",
            e::pthread_rwlock_timedrdlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_clockrdlock",
            e::pthread_rwlock_clockrdlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_wrlock",
            e::pthread_rwlock_wrlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_trywrlock",
            e::pthread_rwlock_trywrlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_timedwrlock",
            e::pthread_rwlock_timedwrlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_clockwrlock",
            e::pthread_rwlock_clockwrlock as *const () as usize,
        ),
        (
            b"pthread_rwlock_unlock",
            e::pthread_rwlock_unlock as *const () as usize,
        ),
        (b"pthread_cancel", e::pthread_cancel as *const () as usize),
        (b"dlopen", dlopen as *const () as usize),
    ]
}

/// glibc's `dlopen`.
fn real_dlopen() -> unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void {
    // Relaxed: the address is immutable data of a loaded library.
    let mut a = REAL_DLOPEN.load(Ordering::Relaxed);
    if a == 0 {
        // SAFETY: a NUL-terminated name; `RTLD_NEXT` searches after us.
        a = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) } as usize;
        REAL_DLOPEN.store(a, Ordering::Relaxed);
    }
    if a == 0 {
        // SAFETY: `abort` takes no arguments.
        unsafe { libc::abort() }
    }
    // SAFETY: `a` is glibc's `dlopen`, whose C prototype this is.
    unsafe {
        core::mem::transmute::<usize, unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void>(a)
    }
}

unsafe extern "C" fn remember(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `Seen` passed to `dl_iterate_phdr` by `open`,
    // `info` glibc's description of one object, valid during the call.
    let (seen, info) = unsafe { (&mut *data.cast::<Seen>(), &*info) };
    match seen.phdrs.get_mut(seen.n) {
        Some(p) => {
            *p = info.dlpi_phdr as usize;
            seen.n += 1;
        }
        None => seen.missed += 1,
    }
    0
}

unsafe extern "C" fn rewrite(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    // SAFETY: as in `remember`.
    let (seen, info) = unsafe { (&mut *data.cast::<Seen>(), &*info) };
    let key = info.dlpi_phdr as usize;
    let n = seen.n;
    if seen.phdrs.get(..n).is_some_and(|p| p.contains(&key)) {
        return 0;
    }
    // SAFETY: `info` describes a loaded object (glibc's contract).
    match unsafe { rewrite_object(info) } {
        Some(k) => seen.patched += k,
        None => seen.missed += 1,
    }
    0
}

/// Points `info`'s relocations of our symbols at our definitions; how many,
/// or `None` if the object's dynamic section could not be read.
///
/// # Safety
///
/// `info` describes an object loaded in this process (from `dl_iterate_phdr`).
unsafe fn rewrite_object(info: &libc::dl_phdr_info) -> Option<usize> {
    let base = info.dlpi_addr as usize;
    // SAFETY: glibc's program headers of the object, `dlpi_phnum` of them.
    let phdrs =
        unsafe { core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let relro = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_GNU_RELRO)
        .map(|p| (base + p.p_vaddr as usize, p.p_memsz as usize));
    // glibc relocates the pointers of a writable dynamic section in place;
    // one it did not (below the load address) is an offset.
    let abs = |v: u64| {
        let v = v as usize;
        if v < base { base + v } else { v }
    };
    let (mut symtab, mut strtab, mut jmprel, mut pltsz, mut rela, mut relasz) = (0, 0, 0, 0, 0, 0);
    let mut d = (base + dynamic.p_vaddr as usize) as *const Dyn;
    loop {
        // SAFETY: the object's dynamic section, which ends with `DT_NULL`.
        let e = unsafe { &*d };
        match e.tag {
            DT_NULL => break,
            DT_SYMTAB => symtab = abs(e.val),
            DT_STRTAB => strtab = abs(e.val),
            DT_JMPREL => jmprel = abs(e.val),
            DT_PLTRELSZ => pltsz = e.val as usize,
            DT_RELA => rela = abs(e.val),
            DT_RELASZ => relasz = e.val as usize,
            _ => {}
        }
        // SAFETY: still inside the dynamic section (not past `DT_NULL`).
        d = unsafe { d.add(1) };
    }
    if symtab == 0 || strtab == 0 {
        return None;
    }
    let ours = ours();
    let mut patched = 0;
    for (start, size) in [(jmprel, pltsz), (rela, relasz)] {
        if start == 0 {
            continue;
        }
        // SAFETY: the object's relocation table of `size` bytes.
        let relas = unsafe {
            core::slice::from_raw_parts(start as *const Rela, size / core::mem::size_of::<Rela>())
        };
        for r in relas {
            let ty = (r.info & 0xffff_ffff) as u32;
            if ty != R_X86_64_JUMP_SLOT && ty != R_X86_64_GLOB_DAT {
                continue;
            }
            // SAFETY: the relocation's symbol index is in the object's
            // symbol table, and its name offset in the string table.
            let name = unsafe {
                let sym = &*(symtab as *const Sym).add((r.info >> 32) as usize);
                CStr::from_ptr((strtab + sym.name as usize) as *const c_char).to_bytes()
            };
            let Some(&(_, to)) = ours.iter().find(|(n, _)| *n == name) else {
                continue;
            };
            let slot = base + r.offset as usize;
            // SAFETY: `slot` is the object's GOT entry for this relocation
            // (8 bytes, aligned); made writable first if it is in RELRO.
            unsafe { write_slot(slot, to, relro) };
            patched += 1;
        }
    }
    Some(patched)
}

/// Writes `value` into the GOT entry at `slot`, lifting RELRO's protection
/// around the write if `slot` is in `relro`.
///
/// # Safety
///
/// `slot` is an aligned GOT entry of a loaded object; `relro` is its
/// `PT_GNU_RELRO` range (address, length), if any.
unsafe fn write_slot(slot: usize, value: usize, relro: Option<(usize, usize)>) {
    let in_relro = relro.is_some_and(|(a, n)| slot >= a && slot < a + n);
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let p = (slot & !(page - 1)) as *mut c_void;
    // SAFETY: the page of a mapped object; the entry is ours to write once
    // writable (no other thread writes GOT entries but the dynamic linker,
    // which is done with this object: `dlopen` returned).
    unsafe {
        if in_relro {
            libc::mprotect(p, page, libc::PROT_READ | libc::PROT_WRITE);
        }
        (*(slot as *const AtomicUsize)).store(value, Ordering::Relaxed);
        if in_relro {
            libc::mprotect(p, page, libc::PROT_READ);
        }
    }
}

/// `dlopen(3)`: glibc's, then, with `RTLD_DEEPBIND`, the new objects'
/// references to our functions pointed at them (module docs).
///
/// # Safety
///
/// The contract of `dlopen(3)`.
pub unsafe fn open(file: *const c_char, flags: c_int) -> *mut c_void {
    let deep =
        flags & libc::RTLD_DEEPBIND != 0 && crate::mode::current() != crate::mode::Mode::Pthread;
    if !deep {
        // SAFETY: the caller's contract is glibc's.
        return unsafe { real_dlopen()(file, flags) };
    }
    let mut seen = Seen {
        n: 0,
        phdrs: [0; MAX_OBJECTS],
        missed: 0,
        patched: 0,
    };
    // SAFETY: `remember` only writes `seen`, passed as its data.
    unsafe { libc::dl_iterate_phdr(Some(remember), (&raw mut seen).cast()) };
    // SAFETY: the caller's contract is glibc's.
    let h = unsafe { real_dlopen()(file, flags) };
    if h.is_null() {
        return h;
    }
    // With objects left unremembered, the new ones cannot be told apart.
    if seen.missed == 0 {
        // SAFETY: `rewrite` reads the objects glibc describes and writes `seen`.
        unsafe { libc::dl_iterate_phdr(Some(rewrite), (&raw mut seen).cast()) };
    }
    if seen.missed != 0 && !WARNED.swap(true, Ordering::Relaxed) {
        let mut b = crate::buf::Buf::new();
        b.push(b"numa-preload: a library opened with RTLD_DEEPBIND binds pthread_mutex/cond/rwlock to glibc and could not be redirected (too many objects or no dynamic section): a lock it shares with the program is not supported\n");
        b.write_stderr();
    }
    h
}

/// `dlopen(3)`: glibc's; a library opened with `RTLD_DEEPBIND` gets its
/// references to the functions above pointed at ours (see the module docs).
///
/// # Safety
///
/// The contract of `dlopen(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(
    file: *const core::ffi::c_char,
    flags: c_int,
) -> *mut core::ffi::c_void {
    // SAFETY: our caller's contract is glibc's.
    unsafe { open(file, flags) }
}
