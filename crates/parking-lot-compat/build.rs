//! Selects the backend of `parking_lot::Mutex` at build time, so the choice costs
//! nothing on the lock path and needs no change to any dependent's manifest (a
//! `[patch]` cannot set features). Sources, in order:
//!
//! 1. `--cfg parking_lot_compat="cst|cna|hq"` in `RUSTFLAGS` (cargo hands the
//!    target's cfgs to build scripts as `CARGO_CFG_*`);
//! 2. the environment variable `PARKING_LOT_COMPAT_BACKEND=cst|cna|hq`;
//! 3. `cst` by default.
//!
//! Emits `cfg(plc_backend = "...")` for the library. Unknown values and two sources
//! that disagree fail the build.

use std::env;

const ENV: &str = "PARKING_LOT_COMPAT_BACKEND";
const ACCEPTED: &str = "`cst` (default: cst-mutex, blocking), `cna` (numa-spin's CNA queue \
     spinlock) or `hq` (numa-spin's HQ hierarchical queue spinlock)";

fn fail(msg: &str) -> ! {
    println!("cargo::error={msg}");
    std::process::exit(0)
}

fn main() {
    println!("cargo::rerun-if-env-changed={ENV}");
    println!("cargo::rerun-if-changed=build.rs");
    println!(r#"cargo::rustc-check-cfg=cfg(plc_backend, values("cst", "cna", "hq"))"#);
    println!(r#"cargo::rustc-check-cfg=cfg(parking_lot_compat, values("cst", "cna", "hq"))"#);

    let from_cfg = env::var("CARGO_CFG_PARKING_LOT_COMPAT").ok();
    let from_env = env::var(ENV).ok().filter(|v| !v.is_empty());
    let backend = match (from_cfg.as_deref(), from_env.as_deref()) {
        (Some(c), Some(e)) if c != e => fail(&format!(
            "parking_lot (NUMA drop-in): `--cfg parking_lot_compat=\"{c}\"` and {ENV}={e} disagree; \
             set one of them"
        )),
        (Some(v), _) | (None, Some(v)) => v.to_owned(),
        (None, None) => "cst".to_owned(),
    };
    match backend.as_str() {
        "cst" | "cna" | "hq" => println!("cargo::rustc-cfg=plc_backend=\"{backend}\""),
        other => fail(&format!(
            "parking_lot (NUMA drop-in): unknown backend `{other}` (from `--cfg parking_lot_compat` \
             or {ENV}); accepted values: {ACCEPTED}"
        )),
    }
}
