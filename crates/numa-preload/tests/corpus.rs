//! Runs the C corpus in `tests/c/` under every `NUMA_LOCK` value with the
//! interposer preloaded, and checks each program's verdict and that our code
//! (not glibc) served its locks, from the `NUMA_LOCK_STATS=1` lines.
//!
//! The interposer is built by a nested `cargo build --release -p numa-preload`
//! in its own target directory (`<target>/preload-test`): inside an
//! `--all-features` workspace build, numa-spin's `stats` feature is on and its
//! locks no longer fit in a `pthread_mutex_t` (see `layout::NUMA_SPIN_FITS`),
//! and a nested cargo cannot share the outer build's locked target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const MODES: [&str; 5] = ["pthread", "cna", "queued", "hq", "cst"];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace target directory (the test binary is `<target>/<profile>/deps/x`).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

/// Builds the interposer once per test process, with its test hooks (a
/// relaxed load each where a program defines none); its path.
fn preload_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_lib("preload-test", &["--features", "test-hooks"]))
}

fn build_lib(dir_name: &str, extra: &[&str]) -> PathBuf {
    let dir = target_dir().join(dir_name);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "numa-preload", "--target-dir"])
        .arg(&dir)
        .args(extra)
        .current_dir(crate_dir())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p numa-preload failed");
    let lib = dir.join("release/libnuma_preload.so");
    assert!(lib.exists(), "{} missing", lib.display());
    lib
}

/// Whether a C compiler is there (the tests are skipped, loudly, without one).
fn have_cc() -> bool {
    let ok = Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: no `cc` on PATH; the C corpus needs a C compiler");
    }
    ok
}

fn compile(name: &str) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{name}"));
    let src = crate_dir().join(format!("tests/c/{name}.c"));
    let o = Command::new("cc")
        // -rdynamic: the library's test hooks find the program's functions.
        .args(["-O2", "-Wall", "-pthread", "-rdynamic", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Builds `tests/c/lib/{name}.c` as a shared library beside the programs:
/// `preload-{out}.so`, with `extra` linker flags.
fn compile_lib(name: &str, out: &str, extra: &[&str]) {
    let so = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{out}.so"));
    let src = crate_dir().join(format!("tests/c/lib/{name}.c"));
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-shared", "-fPIC", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&so)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn run(bin: &Path, mode: &str) -> Output {
    Command::new("timeout")
        .arg("300")
        .arg(bin)
        .env("LD_PRELOAD", preload_lib())
        .env("NUMA_LOCK", mode)
        .env("NUMA_LOCK_STATS", "1")
        .output()
        .expect("run test program")
}

/// The value of `key=` on the stats line of `kind`.
fn stat(stderr: &str, kind: &str, key: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("numa-preload: ") && l.contains(&format!(" kind={kind} ")))
        .unwrap_or_else(|| panic!("no stats line for {kind} in:\n{stderr}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// Compiles `name.c`, runs it under every mode; returns each mode's stderr.
fn corpus(name: &str) -> Vec<(&'static str, String)> {
    corpus_bin(name, &compile(name))
}

/// [`corpus`], and each mode's stdout and exit status must equal the
/// program's under plain glibc (no `LD_PRELOAD`), which must pass.
fn corpus_like_glibc(name: &str) -> Vec<(&'static str, String)> {
    let bin = compile(name);
    let plain = Command::new("timeout")
        .arg("300")
        .arg(&bin)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run test program");
    let plain_out = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(
        plain.status.success() && plain_out.contains(&format!("{name}: ok")),
        "{name} under glibc: {:?}\n{plain_out}\n{}",
        plain.status,
        String::from_utf8_lossy(&plain.stderr)
    );
    for mode in MODES {
        let o = run(&bin, mode);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            (o.status.code(), out.as_ref()),
            (plain.status.code(), plain_out.as_str()),
            "{name} under NUMA_LOCK={mode} differs from glibc; stderr:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    corpus_bin(name, &bin)
}

fn corpus_bin(name: &str, bin: &Path) -> Vec<(&'static str, String)> {
    let mut all = Vec::new();
    for mode in MODES {
        let o = run(bin, mode);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success() && stdout.contains(&format!("{name}: ok")),
            "{name} under NUMA_LOCK={mode}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            o.status
        );
        assert!(stderr.contains(&format!("lock={mode} ")), "{stderr}");
        if mode == "pthread" {
            assert_eq!(stat(&stderr, "mutex", "acquisitions"), 0);
            assert!(
                stat(&stderr, "condvar", "forwarded_to_glibc") > 0,
                "{stderr}"
            );
        } else {
            // Our mutexes or rwlocks served the program.
            assert!(
                stat(&stderr, "mutex", "acquisitions") > 0
                    || stat(&stderr, "rwlock-read", "acquisitions") > 0,
                "{stderr}"
            );
        }
        all.push((mode, stderr));
    }
    all
}

#[test]
fn mutex_types() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("mutex_types") {
        if mode != "pthread" {
            // The robust, PI, PP and pshared mutexes went to glibc.
            assert!(
                stat(&err, "condvar", "forwarded_to_glibc") > 0,
                "{mode}: {err}"
            );
            assert!(stat(&err, "mutex", "contended") > 0, "{mode}: {err}");
        }
    }
}

#[test]
fn cond() {
    if !have_cc() {
        return;
    }
    let bin_refs_232 = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(compile("cond"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("pthread_cond_wait@GLIBC_2.3.2"));
    if let Ok(refs) = bin_refs_232 {
        assert!(refs, "the corpus should link pthread_cond_wait@GLIBC_2.3.2");
    }
    for (mode, err) in corpus("cond") {
        if mode != "pthread" {
            // pthread_cond_wait@GLIBC_2.3.2 and pthread_cond_clockwait@GLIBC_2.34
            // reached our condvar: waits and the 4 timeouts on private
            // condvars were counted here (the process-shared one is glibc's).
            assert!(stat(&err, "condvar", "waits") > 0, "{mode}: {err}");
            assert!(stat(&err, "condvar", "timeouts") >= 4, "{mode}: {err}");
        }
    }
}

#[test]
fn rwlock() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("rwlock") {
        if mode != "pthread" {
            assert!(
                stat(&err, "rwlock-read", "acquisitions") >= 18_000,
                "{mode}: {err}"
            );
            assert!(
                stat(&err, "rwlock-write", "acquisitions") >= 6_000,
                "{mode}: {err}"
            );
        }
    }
}

#[test]
fn fork() {
    if !have_cc() {
        return;
    }
    corpus("fork");
}

#[test]
fn threads() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("threads") {
        if mode != "pthread" {
            assert!(
                stat(&err, "mutex", "acquisitions") >= 5_000 * 50,
                "{mode}: {err}"
            );
        }
    }
}

#[test]
fn errno() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("errno") {
        if mode != "pthread" {
            assert!(stat(&err, "mutex", "contended") > 0, "{mode}: {err}");
            assert!(stat(&err, "condvar", "timeouts") >= 1, "{mode}: {err}");
        }
    }
}

/// The last unlocker frees the mutex (POSIX's reference-count pattern), under
/// every lock.
#[test]
fn free_after_unlock() {
    if !have_cc() {
        return;
    }
    // Whether the threads contend depends on the scheduler (on 2 CPUs they
    // often run one after the other): the verdict is the program's.
    corpus("free_after_unlock");
}

/// Mutexes that are contended and then freed (or re-initialized) without
/// `pthread_mutex_destroy` keep the process's resident memory flat, under
/// every lock (the program checks its own growth and prints it).
#[test]
fn mutex_memory() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("mutex_memory") {
        if mode != "pthread" {
            // Both workers block on every mutex: at least 2 x 20,000 waits.
            assert!(stat(&err, "mutex", "contended") >= 40_000, "{mode}: {err}");
        }
    }
}

/// A mutex copied with `memcpy` after it was contended, then both destroyed:
/// no double free, no use of the original's memory by the copy.
#[test]
fn mutex_copy() {
    if !have_cc() {
        return;
    }
    corpus("mutex_copy");
}

/// A bad `NUMA_LOCK` stops the program before `main` with one line naming the
/// variable and the accepted values.
#[test]
fn bad_numa_lock_stops_before_main() {
    if !have_cc() {
        return;
    }
    let bin = compile("threads");
    for bad in ["CNA", "mcs", "glibc"] {
        let o = run(&bin, bad);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {stderr}");
        assert!(!stdout.contains("ok"), "main ran under NUMA_LOCK={bad}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("NUMA_LOCK=\"{bad}\""))
                && stderr.contains("cna, hq, queued, cst, pthread"),
            "{stderr}"
        );
    }
}

/// A thread blocked in `pthread_cond_wait`, `timedwait` or `clockwait` is
/// cancelled (deferred), and its cleanup handler runs with the mutex held.
#[test]
fn cancel() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("cancel") {
        if mode != "pthread" {
            assert!(stat(&err, "condvar", "waits") >= 9, "{mode}: {err}");
        }
    }
}

/// A process-shared condvar in shared memory between a preloaded process and
/// a plain one (re-executed without `LD_PRELOAD`): they wake each other, with
/// process-shared and with private mutexes.
#[test]
fn pshared_cond() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("pshared_cond") {
        if mode != "pthread" {
            // The process-shared condvar went to glibc, our mutexes served the
            // private waits.
            assert!(
                stat(&err, "condvar", "forwarded_to_glibc") > 0,
                "{mode}: {err}"
            );
        }
    }
}

/// Read locks counted as glibc counts them: more than the per-thread table's
/// 32 held at once, released by another thread, destroyed while held.
#[test]
fn rwlock_glibc() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("rwlock_glibc") {
        if mode != "pthread" {
            assert!(
                stat(&err, "rwlock-read", "acquisitions") >= 40,
                "{mode}: {err}"
            );
        }
    }
}

/// The last reader's unlock is followed at once by the writer's entry,
/// destroy and free (the rwlock form of `free_after_unlock`).
#[test]
fn rwlock_free_after_unlock() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("rwlock_free_after_unlock") {
        if mode != "pthread" {
            assert!(
                stat(&err, "rwlock-write", "acquisitions") > 0,
                "{mode}: {err}"
            );
        }
    }
}

/// The waiter a signal wakes destroys the condvar and unmaps its page at
/// once, while the signaler stands still right after the wake's releasing
/// step (test hooks): the wake must not touch the condvar after that step.
#[test]
fn cond_free_after_signal() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus("cond_free_after_signal") {
        if mode != "pthread" {
            assert!(stat(&err, "condvar", "waits") > 0, "{mode}: {err}");
        }
    }
}

/// A thread with asynchronous cancellation blocked in a mutex or rwlock
/// acquisition (a self-deadlock among them) is cancelled there, as with
/// glibc, instead of aborting the process or never ending.
#[test]
fn async_cancel_lock() {
    if !have_cc() {
        return;
    }
    corpus_like_glibc("async_cancel_lock");
}

/// A thread with asynchronous cancellation blocked in a condvar wait is
/// cancelled with the mutex held, and the condvar can be destroyed after.
#[test]
fn async_cancel_cond() {
    if !have_cc() {
        return;
    }
    for (mode, err) in corpus_like_glibc("async_cancel_cond") {
        if mode != "pthread" {
            assert!(stat(&err, "condvar", "waits") >= 1_000, "{mode}: {err}");
        }
    }
}

/// Read locks are counted as glibc counts them, whichever thread releases.
#[test]
fn rwlock_count() {
    if !have_cc() {
        return;
    }
    corpus_like_glibc("rwlock_count");
}

/// Readers pass a waiting writer unless the rwlock prefers writers
/// non-recursively, as glibc's attribute says.
#[test]
fn rwlock_prefer() {
    if !have_cc() {
        return;
    }
    corpus_like_glibc("rwlock_prefer");
}

/// A library opened with `RTLD_DEEPBIND` (its lock calls bind to glibc's)
/// shares a mutex, a condvar and an rwlock with the program, lazily bound and
/// with a read-only GOT (`-z now -z relro`).
#[test]
fn deepbind() {
    if !have_cc() {
        return;
    }
    compile_lib("deepbind_lib", "deepbind_lib", &[]);
    compile_lib("deepbind_lib", "deepbind_lib_now", &["-Wl,-z,now,-z,relro"]);
    corpus_like_glibc("deepbind");
}
