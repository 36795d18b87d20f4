//! Records the build's commit and compiler for the result files'
//! provenance (`numa_bench::machine::Provenance`): `NUMA_BENCH_COMMIT`
//! (`git rev-parse --short HEAD`, `+dirty` when the work tree has changes;
//! empty outside a git checkout) and `NUMA_BENCH_RUSTC` (`rustc --version`).

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = run("git", &["rev-parse", "--short", "HEAD"]).map(|c| {
        let dirty = run("git", &["status", "--porcelain", "--untracked-files=no"])
            .is_some_and(|s| !s.is_empty());
        if dirty { format!("{c}+dirty") } else { c }
    });
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = run(&rustc, &["--version"]);
    println!(
        "cargo:rustc-env=NUMA_BENCH_COMMIT={}",
        commit.unwrap_or_default()
    );
    println!(
        "cargo:rustc-env=NUMA_BENCH_RUSTC={}",
        version.unwrap_or_default()
    );
    // A new commit or a checkout moves HEAD or the branch it names.
    if let Some(git_dir) = run("git", &["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        println!("cargo:rerun-if-changed={git_dir}/index");
        if let Some(r) = run("git", &["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{r}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
}
