//! CST-style NUMA-aware blocking locks (skeleton).
