//! `page-alloc`: a shared free list of 4 KiB pages behind one lock (the zone),
//! fed and drained in batches by small per-thread caches.
//!
//! This is the kernel's per-CPU page lists draining into `zone->lock` (seed 004,
//! Aaron Lu's zone->lock series): a thread allocates from its cache and, when the
//! cache is empty, takes the zone lock once to move `batch` pages in
//! (`rmqueue_bulk`); it frees into its cache and, when the cache holds more than
//! `high` pages, takes the lock once to move `batch` pages back
//! (`free_pcppages_bulk`). Inside the lock every moved page's header is written,
//! the "cache miss on struct page" that dominated the seed's profile. Each thread
//! allocates `burst` pages, touches them, then frees them all (will-it-scale's
//! `page_fault1`: mmap, touch, munmap). One operation is one zone-lock acquisition.

use super::MutexWorkload;

/// Page size, bytes.
pub const PAGE_SIZE: usize = 4096;

/// A 4 KiB page; its first word plays `struct page` (the flags the zone writes).
#[repr(C, align(4096))]
pub struct Page {
    /// Set while the page is on the zone's free list (like `PG_buddy`).
    pub flags: u64,
    /// The page's contents.
    pub data: [u8; PAGE_SIZE - 8],
}

impl Page {
    fn new_box() -> Box<Page> {
        Box::new(Page {
            flags: PG_FREE,
            data: [0; PAGE_SIZE - 8],
        })
    }
}

/// `flags` bit: the page is on the zone free list.
pub const PG_FREE: u64 = 1;

/// The page-alloc workload's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAlloc {
    /// Pages moved per zone-lock acquisition (kernel `pcp->batch`; default 16).
    pub batch: usize,
    /// Cache size above which a thread drains a batch (kernel `pcp->high`; default 48).
    pub high: usize,
    /// Pages a thread allocates before freeing them all (default 64).
    pub burst: usize,
}

impl Default for PageAlloc {
    fn default() -> Self {
        PageAlloc {
            batch: 16,
            high: 48,
            burst: 64,
        }
    }
}

/// The zone: its free list and a free-page count.
pub struct Zone {
    /// Free pages.
    pub free: Vec<Box<Page>>,
    /// Pages handed out by the zone minus pages returned.
    pub allocated: u64,
}

/// Whether the next zone-lock acquisition refills or drains the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneOp {
    /// Cache empty: move up to `batch` pages zone -> cache.
    Refill,
    /// Cache above `high`: move `batch` pages cache -> zone.
    Drain,
}

/// Per-thread state: the per-CPU cache and the pages in use.
pub struct PageLocal {
    /// The thread's page cache (per-CPU list).
    pub cache: Vec<Box<Page>>,
    /// Pages allocated and in use.
    pub in_use: Vec<Box<Page>>,
    /// Allocating (`true`) or freeing.
    pub allocating: bool,
    /// Bytes written, so the touches are not optimised out.
    pub sink: u64,
}

impl PageAlloc {
    /// Pages in the zone for `threads` threads: each can hold `burst + high + batch`.
    pub fn zone_pages(&self, threads: usize) -> usize {
        threads * (self.burst + self.high + self.batch)
    }
}

impl MutexWorkload for PageAlloc {
    type Shared = Zone;
    type Local = PageLocal;
    type Req = ZoneOp;

    fn shared(&self, threads: usize) -> Zone {
        Zone {
            free: (0..self.zone_pages(threads))
                .map(|_| Page::new_box())
                .collect(),
            allocated: 0,
        }
    }

    fn local(&self, _thread: usize) -> PageLocal {
        PageLocal {
            cache: Vec::with_capacity(self.high + self.batch + 1),
            in_use: Vec::with_capacity(self.burst),
            allocating: true,
            sink: 0,
        }
    }

    fn prepare(&self, l: &mut PageLocal) -> ZoneOp {
        loop {
            if l.allocating {
                if l.in_use.len() >= self.burst {
                    l.allocating = false;
                    continue;
                }
                let Some(mut page) = l.cache.pop() else {
                    return ZoneOp::Refill;
                };
                // Touch the page as a fault would (one line; the whole page would
                // make this a memset benchmark).
                page.data[0] = page.data[0].wrapping_add(1);
                l.sink = l.sink.wrapping_add(u64::from(page.data[0]));
                l.in_use.push(page);
            } else {
                let Some(page) = l.in_use.pop() else {
                    l.allocating = true;
                    continue;
                };
                l.cache.push(page);
                if l.cache.len() > self.high {
                    return ZoneOp::Drain;
                }
            }
        }
    }

    fn critical(&self, zone: &mut Zone, l: &mut PageLocal, req: ZoneOp) {
        match req {
            ZoneOp::Refill => {
                for _ in 0..self.batch {
                    let Some(mut page) = zone.free.pop() else {
                        break;
                    };
                    page.flags &= !PG_FREE;
                    zone.allocated += 1;
                    l.cache.push(page);
                }
            }
            ZoneOp::Drain => {
                for _ in 0..self.batch {
                    let Some(mut page) = l.cache.pop() else { break };
                    page.flags |= PG_FREE;
                    zone.allocated -= 1;
                    zone.free.push(page);
                }
            }
        }
    }

    fn params(&self) -> String {
        format!(
            "batch={}, high={}, burst={}, page=4KiB",
            self.batch, self.high, self.burst
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cycle_through_cache_and_zone() {
        let w = PageAlloc::default();
        let mut zone = w.shared(2);
        let total = zone.free.len();
        let mut a = w.local(0);
        let mut b = w.local(1);
        let (mut refills, mut drains) = (0, 0);
        for i in 0..400 {
            let l = if i % 2 == 0 { &mut a } else { &mut b };
            let op = w.prepare(l);
            match op {
                ZoneOp::Refill => refills += 1,
                ZoneOp::Drain => drains += 1,
            }
            w.critical(&mut zone, l, op);
            assert!(l.cache.len() <= w.high + w.batch);
            // Conservation: every page is in the zone, a cache or in use.
            let held = a.cache.len() + a.in_use.len() + b.cache.len() + b.in_use.len();
            assert_eq!(zone.free.len() + held, total);
            assert_eq!(zone.allocated as usize, held);
        }
        assert!(refills > 0 && drains > 0, "{refills} {drains}");
        assert!(zone.free.iter().all(|p| p.flags & PG_FREE != 0));
        assert!(
            a.in_use
                .iter()
                .chain(&a.cache)
                .all(|p| p.flags & PG_FREE == 0)
        );
        assert_eq!(std::mem::size_of::<Page>(), PAGE_SIZE);
    }
}
