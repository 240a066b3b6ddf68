//! The pages of guest memory one block request's buffers touch, to tell in linear time that
//! no two of its runs share a byte (`bounce::plan`): a run claims every 4 KiB page it
//! touches, and runs that claim no page twice are disjoint. A page claimed twice says
//! nothing either way (two 512-byte buffers may share a page without sharing a byte), so
//! the caller then decides exactly, by sorting.
//!
//! An open-addressed hash set of page numbers, reserved once with the device and never
//! grown. Each slot holds a page number and the number of the request that claimed it, so
//! the next request starts with every slot free without one being cleared. Whatever the
//! slots hold, the set can only err towards "claimed twice", which sends the caller to its
//! exact check: it answers "once" only when each page found its own free slot.

use alloc::collections::TryReserveError;
use alloc::vec::Vec;

use crate::virtio::memory::Segment;

/// Slots of the set: a power of two, twice the pages one request may claim.
const SLOTS: usize = 2048;
/// The most pages one request may claim here (half the slots, so a probe ends soon); a
/// larger one is left to the sort. The largest request of scattered pages, 254 segments of
/// one page each, claims 254.
pub const MAX_PAGES: u64 = (SLOTS / 2) as u64;
const PAGE_SHIFT: u32 = 12;
/// A slot: the request's number above bit 40, the page number below (an address under
/// 2^52; an address above is left to the sort).
const PAGE_BITS: u32 = 40;
const PAGE_MASK: u64 = (1 << PAGE_BITS) - 1;
/// Request numbers run from 1 (0 marks a slot never used) to this, then the slots are
/// cleared once and numbering starts again.
const LAST_REQUEST: u64 = (1 << (64 - PAGE_BITS)) - 1;

/// The first and last page `run` touches (its first alone when it is empty).
fn page_span(run: &Segment) -> (u64, u64) {
    let last = run.addr.saturating_add(u64::from(run.len)).saturating_sub(1).max(run.addr);
    (run.addr >> PAGE_SHIFT, last >> PAGE_SHIFT)
}

/// Whether claiming the pages of `runs` is likely cheaper than sorting them: about 16
/// instructions a page claimed, against about 6.6 n log2 n for n runs sorted
/// (`sort_unstable`, traced: 13,585 for 256 runs). So the set pays while the pages number
/// under about 0.4 n log2 n: many short runs (a guest's scattered pages), not a few long
/// ones (16 runs of 64 KiB are 256 pages, about 4,000 instructions to claim against about
/// 400 to sort).
pub fn cheaper_than_sorting(runs: &[Segment]) -> bool {
    let n = runs.len() as u64;
    if n < 2 {
        return false;
    }
    let pages = runs.iter().map(page_span).fold(0u64, |sum, (first, last)| sum.saturating_add(last - first + 1));
    pages.saturating_mul(5) <= n * u64::from(n.ilog2()) * 2
}

/// The set, for one request at a time.
pub struct PageSet {
    slots: Vec<u64>,
    request: u64,
}

impl PageSet {
    /// An empty set, its slots reserved now (fallibly: it is made with a device).
    pub fn new() -> Result<Self, TryReserveError> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(SLOTS)?;
        slots.resize(SLOTS, 0);
        Ok(PageSet { slots, request: 0 })
    }

    /// Whether every page `runs` touch is touched by one run only (then no two runs share a
    /// byte). `false` also when they touch more than `MAX_PAGES` pages or one lies at an
    /// address of 2^52 or above: the caller decides those another way.
    pub fn claim_each_once(&mut self, runs: &[Segment]) -> bool {
        self.request += 1;
        if self.request > LAST_REQUEST {
            self.slots.fill(0);
            self.request = 1;
        }
        let mask = self.slots.len() - 1;
        let mut claimed = 0u64;
        for run in runs {
            let (first, last) = page_span(run);
            claimed += last - first + 1;
            if last > PAGE_MASK || claimed > MAX_PAGES {
                return false;
            }
            for page in first..=last {
                let mine = self.request << PAGE_BITS | page;
                // Fibonacci hashing: the top bits of the product spread nearby pages apart.
                let mut i = (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize;
                loop {
                    let slot = &mut self.slots[i & mask];
                    if *slot == mine {
                        return false;
                    }
                    if *slot >> PAGE_BITS != self.request {
                        *slot = mine;
                        break;
                    }
                    i += 1;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x4000_0000;

    fn seg(addr: u64, len: u32) -> Segment {
        Segment { addr, len }
    }

    #[test]
    fn runs_on_pages_of_their_own_are_claimed_once_and_the_next_request_starts_empty() {
        let mut set = PageSet::new().unwrap();
        // Scattered pages in no order, as a guest's page cache gives them.
        let pages: Vec<Segment> = (0..254u64).map(|i| seg(BASE + (i * 7919 % 1021) * 4096, 4096)).collect();
        assert!(set.claim_each_once(&pages));
        // The same pages again: a new request, not a second claim.
        assert!(set.claim_each_once(&pages));
        assert!(set.claim_each_once(&[seg(BASE, 64 << 10), seg(BASE + (64 << 10), 512)]));
    }

    #[test]
    fn the_set_is_chosen_for_many_short_runs_and_not_for_a_few_long_ones() {
        let scattered: Vec<Segment> = (0..254u64).map(|i| seg(BASE + (i * 7919 % 1021) * 4096, 4096)).collect();
        assert!(cheaper_than_sorting(&scattered));
        let huge: Vec<Segment> = (0..16u64).map(|i| seg(BASE + ((i * 7) % 16) * (128 << 10), 64 << 10)).collect();
        assert!(!cheaper_than_sorting(&huge), "16 runs of 16 pages");
        assert!(!cheaper_than_sorting(&scattered[..1]));
        assert!(!cheaper_than_sorting(&[seg(0, u32::MAX), seg(u64::MAX - 4096, 4096)]), "no overflow");
    }

    #[test]
    fn a_page_touched_twice_is_not_claimed_once() {
        let mut set = PageSet::new().unwrap();
        assert!(!set.claim_each_once(&[seg(BASE, 4096), seg(BASE + 8192, 512), seg(BASE + 512, 512)]));
        // Sharing a page without sharing a byte: still not claimed once (the caller sorts).
        assert!(!set.claim_each_once(&[seg(BASE, 512), seg(BASE + 1024, 512)]));
        // A run across a page boundary claims both pages.
        assert!(!set.claim_each_once(&[seg(BASE + 4096 - 512, 1024), seg(BASE + 4096 + 1024, 512)]));
        // An earlier request's half-finished claims do not count.
        assert!(set.claim_each_once(&[seg(BASE, 512), seg(BASE + 4096, 512)]));
    }

    #[test]
    fn more_pages_than_the_set_holds_or_addresses_past_its_range_are_left_to_the_caller() {
        let mut set = PageSet::new().unwrap();
        let many: Vec<Segment> = (0..=MAX_PAGES).map(|i| seg(BASE + i * 8192, 512)).collect();
        assert!(!set.claim_each_once(&many));
        assert!(set.claim_each_once(&many[..MAX_PAGES as usize]));
        assert!(!set.claim_each_once(&[seg(1 << 52, 512)]));
        assert!(!set.claim_each_once(&[seg(u64::MAX - 511, 512)]));
    }

    #[test]
    fn request_numbers_that_run_out_start_again_with_every_slot_free() {
        let mut set = PageSet::new().unwrap();
        assert!(set.claim_each_once(&[seg(BASE, 4096)]));
        assert_eq!(set.request, 1);
        set.request = LAST_REQUEST - 1;
        assert!(set.claim_each_once(&[seg(BASE + 8192, 4096)]));
        assert_eq!(set.request, LAST_REQUEST);
        // Numbered 1 again: the page the first request 1 claimed is free.
        assert!(set.claim_each_once(&[seg(BASE, 4096)]));
        assert_eq!(set.request, 1);
        assert!(!set.claim_each_once(&[seg(BASE, 4096), seg(BASE + 100, 512)]));
    }
}
