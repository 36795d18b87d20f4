//! The `numa-bench` command (skeleton).

fn main() {}
