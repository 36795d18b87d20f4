//! CNA: a compact NUMA-aware queue spinlock (skeleton).
