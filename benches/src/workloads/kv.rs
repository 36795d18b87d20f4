//! `kv`: a shared `HashMap<u64, [u8; 64]>` behind one lock, 90% gets and 10% puts
//! over Zipf-distributed keys. It stands for leveldb's `readrandom` on a hot lock
//! (seed 000); the key skew follows YCSB's Zipf constant 0.99.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

use super::MutexWorkload;

/// The kv workload's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kv {
    /// Keys in the map, all present from the start (default 10 000).
    pub keys: u64,
    /// Zipf exponent of the key distribution (default 0.99; 0 = uniform).
    pub zipf_s: f64,
    /// Percentage of operations that are gets (default 90).
    pub get_pct: u8,
}

impl Default for Kv {
    fn default() -> Self {
        Kv {
            keys: 10_000,
            zipf_s: 0.99,
            get_pct: 90,
        }
    }
}

/// One kv request, chosen outside the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Read the value of a key.
    Get(u64),
    /// Overwrite the value of a key.
    Put(u64, [u8; 64]),
}

/// Per-thread state: the key generator and a sink for read bytes.
pub struct KvLocal {
    rng: SmallRng,
    zipf: Zipf<f64>,
    /// Sum of the first byte of every value read, so gets are not optimised out.
    pub sink: u64,
}

impl Kv {
    /// The prefilled map: key `k` holds 64 copies of `k as u8`.
    pub fn prefilled(&self) -> HashMap<u64, [u8; 64]> {
        (0..self.keys).map(|k| (k, [k as u8; 64])).collect()
    }

    /// A generator for thread `thread` (deterministic seed per thread).
    pub fn local_state(&self, thread: usize) -> KvLocal {
        KvLocal {
            rng: SmallRng::seed_from_u64(0x6b76_0000 + thread as u64),
            // `keys >= 1` and `zipf_s >= 0` are checked when the workload is built.
            zipf: Zipf::new(self.keys.max(1) as f64, self.zipf_s.max(0.0))
                .expect("Zipf parameters validated by the command line"),
            sink: 0,
        }
    }

    /// Draws the next request, a get with probability `read_pct` %.
    pub fn next_op(&self, local: &mut KvLocal, read_pct: u8) -> KvOp {
        // Zipf samples lie in [1, keys]; rank 1 is the hottest key.
        let key = local.zipf.sample(&mut local.rng) as u64 - 1;
        if local.rng.random_range(0..100u8) < read_pct {
            KvOp::Get(key)
        } else {
            KvOp::Put(key, [local.rng.random::<u8>(); 64])
        }
    }

    /// Applies a get (to any map reference).
    #[inline]
    pub fn get(map: &HashMap<u64, [u8; 64]>, local: &mut KvLocal, key: u64) {
        if let Some(v) = map.get(&key) {
            local.sink = local.sink.wrapping_add(u64::from(v[0]));
        }
    }
}

impl MutexWorkload for Kv {
    type Shared = HashMap<u64, [u8; 64]>;
    type Local = KvLocal;
    type Req = KvOp;

    fn shared(&self, _threads: usize) -> Self::Shared {
        self.prefilled()
    }
    fn local(&self, thread: usize) -> KvLocal {
        self.local_state(thread)
    }
    #[inline]
    fn prepare(&self, local: &mut KvLocal) -> KvOp {
        self.next_op(local, self.get_pct)
    }
    #[inline]
    fn critical(&self, map: &mut Self::Shared, local: &mut KvLocal, req: KvOp) {
        match req {
            KvOp::Get(k) => Kv::get(map, local, k),
            KvOp::Put(k, v) => {
                map.insert(k, v);
            }
        }
    }
    fn params(&self) -> String {
        format!(
            "keys={}, zipf_s={}, get={}%",
            self.keys, self.zipf_s, self.get_pct
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_follow_the_mix_and_the_skew() {
        let w = Kv::default();
        let mut l = w.local(0);
        let (mut gets, mut hot) = (0, 0);
        let n = 20_000;
        for _ in 0..n {
            let op = w.prepare(&mut l);
            let k = match op {
                KvOp::Get(k) => {
                    gets += 1;
                    k
                }
                KvOp::Put(k, _) => k,
            };
            assert!(k < w.keys);
            hot += u32::from(k < 10);
        }
        // 90% gets: expect 18 000, binomial sd ~42.
        assert!((17_500..=18_500).contains(&gets), "{gets}");
        // Zipf(0.99) over 10 000 keys puts ~30% of draws on the 10 hottest keys;
        // uniform would put 0.1% there.
        assert!(hot > n / 5, "{hot}");
    }

    #[test]
    fn puts_overwrite_and_gets_read() {
        let w = Kv {
            keys: 4,
            ..Kv::default()
        };
        let mut m = w.shared(1);
        let mut l = w.local(0);
        w.critical(&mut m, &mut l, KvOp::Put(3, [9; 64]));
        assert_eq!(m[&3], [9; 64]);
        assert_eq!(m.len(), 4);
        l.sink = 0;
        w.critical(&mut m, &mut l, KvOp::Get(2));
        assert_eq!(l.sink, 2);
        w.critical(&mut m, &mut l, KvOp::Get(3));
        assert_eq!(l.sink, 11);
    }
}
