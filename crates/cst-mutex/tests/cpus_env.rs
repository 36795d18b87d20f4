//! `CST_MUTEX_CPUS` and `set_cpus`: a malformed value is refused with a
//! typed error naming it, and the locks keep deciding with the machine's
//! count. (Its own test binary: the variable is read once per process.)
#![cfg(not(numa_loom))]

use cst_mutex::{ConfigError, cpus, cpus_env_error, set_cpus};

#[test]
fn malformed_cpu_count_is_reported_and_ignored() {
    // SAFETY: the only test of this binary, before any other thread reads
    // the environment.
    unsafe { std::env::set_var("CST_MUTEX_CPUS", "sixteen") };
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(cpus(), machine);
    assert_eq!(
        cpus_env_error(),
        Some(ConfigError::BadCpusEnv("sixteen".to_owned()))
    );
    assert!(
        cpus_env_error()
            .unwrap()
            .to_string()
            .contains("CST_MUTEX_CPUS")
    );
    // A lock still works.
    let m = cst_mutex::Mutex::new(1);
    *m.lock() += 1;
    assert_eq!(*m.lock(), 2);

    assert_eq!(set_cpus(0), Err(ConfigError::ZeroCpus));
    assert_eq!(cpus(), machine);
    set_cpus(16).unwrap();
    assert_eq!(cpus(), 16);
}
