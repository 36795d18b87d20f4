//! `rwlock`: the `kv` map under a reader-writer lock, with a configurable read
//! share (default 95%). Gets take the lock shared, puts exclusive.

use std::collections::HashMap;

use super::kv::{Kv, KvLocal, KvOp};
use super::{Access, RwWorkload};

/// The rwlock workload's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RwKv {
    /// The map and key distribution (its `get_pct` is ignored).
    pub kv: Kv,
    /// Percentage of operations that read (default 95).
    pub read_pct: u8,
}

impl Default for RwKv {
    fn default() -> Self {
        RwKv {
            kv: Kv::default(),
            read_pct: 95,
        }
    }
}

impl RwWorkload for RwKv {
    type Shared = HashMap<u64, [u8; 64]>;
    type Local = KvLocal;
    type Req = KvOp;

    fn shared(&self, _threads: usize) -> Self::Shared {
        self.kv.prefilled()
    }
    fn local(&self, thread: usize) -> KvLocal {
        self.kv.local_state(thread)
    }
    #[inline]
    fn prepare(&self, local: &mut KvLocal) -> (Access, KvOp) {
        let op = self.kv.next_op(local, self.read_pct);
        let access = match op {
            KvOp::Get(_) => Access::Read,
            KvOp::Put(..) => Access::Write,
        };
        (access, op)
    }
    #[inline]
    fn read(&self, map: &Self::Shared, local: &mut KvLocal, req: KvOp) {
        if let KvOp::Get(k) = req {
            Kv::get(map, local, k);
        }
    }
    #[inline]
    fn write(&self, map: &mut Self::Shared, local: &mut KvLocal, req: KvOp) {
        match req {
            KvOp::Put(k, v) => {
                map.insert(k, v);
            }
            KvOp::Get(k) => Kv::get(map, local, k),
        }
    }
    fn params(&self) -> String {
        format!(
            "keys={}, zipf_s={}, read={}%",
            self.kv.keys, self.kv.zipf_s, self.read_pct
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_share_decides_the_access() {
        let w = RwKv {
            read_pct: 100,
            ..RwKv::default()
        };
        let mut l = w.local(0);
        assert!((0..1000).all(|_| w.prepare(&mut l).0 == Access::Read));
        let w = RwKv {
            read_pct: 0,
            ..RwKv::default()
        };
        let mut l = w.local(0);
        let map = w.shared(1);
        let mut m2 = map.clone();
        for _ in 0..100 {
            let (a, op) = w.prepare(&mut l);
            assert_eq!(a, Access::Write);
            w.write(&mut m2, &mut l, op);
        }
        assert_eq!(m2.len(), map.len());
        assert_ne!(m2, map);
    }
}
