//! The pages of guest memory one block read's runs touch, to tell in time linear in the
//! runs that no two of them share a byte (`bounce::plan`): a run claims every 4 KiB page it
//! touches, and runs that claim no page twice are disjoint. A page claimed twice says
//! nothing either way (two 512-byte buffers may share a page without sharing a byte), so
//! the caller then decides exactly, by sorting.
//!
//! A bitmap of `PAGES` bits, reserved once with the device and never grown, page `p` at bit
//! `p % PAGES`: direct-mapped, so a run claims its pages a 64-bit word at a time (a 64 KiB
//! run sets one word, or two): about what the hash set of page numbers it replaced paid for
//! a run of a page or two (about 16 instructions a page), and far less for longer runs,
//! for which that set was dearer than sorting them. Two pages `PAGES` apart share a bit,
//! so the set can only err towards "claimed twice", which sends the caller to its exact
//! check: it answers "once" only when each page found its bit clear. Within a VM of up to
//! `PAGES` pages of RAM (512 MiB) no two of its pages share a bit. Every word a claim set
//! bits in is cleared again before it answers, so each request starts with the map empty.

use alloc::collections::TryReserveError;
use alloc::vec::Vec;

use crate::virtio::memory::Segment;

/// Words of the map: 16 KiB.
const WORDS: usize = 2048;
/// Pages the map tells apart.
pub const PAGES: u64 = WORDS as u64 * 64;
const PAGE_SHIFT: u32 = 12;

/// The first and last page `run` touches, as bits of the map; `None` when they do not lie
/// in order in it (a run across the map's end, or longer than it), which the caller
/// decides another way.
fn bits(run: &Segment) -> Option<(usize, usize)> {
    let last = run.addr.checked_add(u64::from(run.len).max(1) - 1)?;
    let (first, last) = (run.addr >> PAGE_SHIFT, last >> PAGE_SHIFT);
    let (first_bit, last_bit) = (first % PAGES, last % PAGES);
    // A span shorter than the map that does not wrap its end has its bits in order.
    (last - first < PAGES && first_bit <= last_bit).then_some((first_bit as usize, last_bit as usize))
}

/// The bits `[first, last]` of one word (both below 64).
fn mask(first: usize, last: usize) -> u64 {
    (u64::MAX >> (63 - last)) & (u64::MAX << first)
}

/// The map, for one request at a time.
pub struct PageSet {
    words: Vec<u64>,
}

impl PageSet {
    /// An empty map, its words reserved now (fallibly: it is made with a device).
    pub fn new() -> Result<Self, TryReserveError> {
        let mut words = Vec::new();
        words.try_reserve_exact(WORDS)?;
        words.resize(WORDS, 0);
        Ok(PageSet { words })
    }

    /// Whether every page `runs` touch is touched by one run only (then no two runs share a
    /// byte). `false` also when a run lies across the map's end or spans more than it: the
    /// caller decides those another way. The map is empty again when it returns.
    pub fn claim_each_once(&mut self, runs: &[Segment]) -> bool {
        let mut claimed = 0;
        for run in runs {
            if !bits(run).is_some_and(|(first, last)| self.claim(first, last)) {
                break;
            }
            claimed += 1;
        }
        // The map was empty, so every bit set is one of these runs': each word a run
        // claimed in is cleared whole, without its mask (a run within one word with one
        // store: `fill` alone is a call of `memset` for every run).
        for run in &runs[..claimed] {
            // Claimed, so its end does not wrap and its bits lie in order (`bits`): page `p`
            // is in word `p / 64 % WORDS`.
            let last = run.addr.wrapping_add(u64::from(run.len).max(1) - 1);
            let word = |addr: u64| (addr >> (PAGE_SHIFT + 6)) as usize % WORDS;
            match self.words.get_mut(word(run.addr)..=word(last)) {
                Some([word]) => *word = 0,
                Some(words) => words.fill(0),
                None => {}
            }
        }
        claimed == runs.len()
    }

    /// Sets the bits `[first, last]` if none is set yet; sets nothing otherwise. A run
    /// within one word (up to 256 KiB) is one load, test and store.
    #[inline(always)]
    fn claim(&mut self, first: usize, last: usize) -> bool {
        let Some(words) = self.words.get_mut(first / 64..=last / 64) else { return false };
        let n = words.len();
        let mask_of = |i: usize| mask(if i == 0 { first % 64 } else { 0 }, if i + 1 == n { last % 64 } else { 63 });
        if let [word] = words {
            let m = mask_of(0);
            let free = *word & m == 0;
            if free {
                *word |= m;
            }
            return free;
        }
        if words.iter().enumerate().any(|(i, w)| w & mask_of(i) != 0) {
            return false;
        }
        words.iter_mut().enumerate().for_each(|(i, w)| *w |= mask_of(i));
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

    fn empty(set: &PageSet) -> bool {
        set.words.iter().all(|&w| w == 0)
    }

    #[test]
    fn runs_on_pages_of_their_own_are_claimed_once_and_the_map_is_left_empty() {
        let mut set = PageSet::new().unwrap();
        // Scattered pages in no order, as a guest's page cache gives them.
        let pages: Vec<Segment> = (0..254u64).map(|i| seg(BASE + (i * 7919 % 1021) * 4096, 4096)).collect();
        assert!(set.claim_each_once(&pages));
        assert!(empty(&set));
        // The same pages again: a new request, not a second claim.
        assert!(set.claim_each_once(&pages));
        // Long runs over several words, and a word's last page next to the next's first.
        let long = [seg(BASE + (63 << 12), 4096), seg(BASE + (64 << 12), 1 << 20), seg(BASE, 64 << 10)];
        assert!(set.claim_each_once(&long));
        assert!(empty(&set));
    }

    #[test]
    fn a_page_touched_twice_is_not_claimed_once_and_the_map_is_left_empty() {
        let mut set = PageSet::new().unwrap();
        assert!(!set.claim_each_once(&[seg(BASE, 4096), seg(BASE + 8192, 512), seg(BASE + 512, 512)]));
        assert!(empty(&set), "what the first two claimed is cleared");
        // Sharing a page without sharing a byte: still not claimed once (the caller sorts).
        assert!(!set.claim_each_once(&[seg(BASE, 512), seg(BASE + 1024, 512)]));
        // A run across a page boundary claims both pages.
        assert!(!set.claim_each_once(&[seg(BASE + 4096 - 512, 1024), seg(BASE + 4096 + 1024, 512)]));
        // A long run that meets an earlier one in its last word only.
        assert!(!set.claim_each_once(&[seg(BASE + (200 << 12), 512), seg(BASE, 1 << 20)]));
        assert!(empty(&set));
        // An earlier request's claims do not count.
        assert!(set.claim_each_once(&[seg(BASE, 512), seg(BASE + 4096, 512)]));
    }

    #[test]
    fn pages_a_map_apart_share_a_bit_and_runs_it_cannot_hold_in_order_are_left_to_the_caller() {
        let mut set = PageSet::new().unwrap();
        let apart = PAGES << PAGE_SHIFT;
        assert!(!set.claim_each_once(&[seg(BASE, 512), seg(BASE + apart, 512)]), "the same bit");
        // Across the map's end, and at the top of the address space.
        let end = (PAGES - 1) << PAGE_SHIFT;
        assert!(!set.claim_each_once(&[seg(end, 8192)]));
        assert!(set.claim_each_once(&[seg(end, 4096), seg(0, 4096)]), "its last page and its first");
        assert!(set.claim_each_once(&[seg(u64::MAX - 511, 512)]), "the last page: no overflow");
        assert!(!set.claim_each_once(&[seg(u64::MAX - 10, 512)]), "past the end of the address space");
        assert!(empty(&set));
    }

    proptest::proptest! {
        /// Within the pages the map tells apart, it answers "once" exactly when no page is
        /// touched by two runs (pages counted one at a time), and leaves the map empty.
        #[test]
        fn a_claim_answers_as_the_pages_counted_one_at_a_time(
            raw in proptest::collection::vec((0u64..300, 0u64..4096, 0u32..(80 << 10)), 0..24),
        ) {
            let mut set = PageSet::new().unwrap();
            let runs: Vec<Segment> = raw.iter().map(|&(page, offset, len)| seg(BASE + (page << 12) + offset, len)).collect();
            let mut touched = std::collections::HashMap::new();
            for run in &runs {
                let last = run.addr + u64::from(run.len).max(1) - 1;
                for page in run.addr >> 12..=last >> 12 {
                    *touched.entry(page).or_insert(0) += 1;
                }
            }
            let once = touched.values().all(|&n| n == 1);
            proptest::prop_assert_eq!(set.claim_each_once(&runs), once);
            proptest::prop_assert!(empty(&set));
        }
    }

    #[test]
    fn a_mask_is_the_bits_between_its_ends() {
        assert_eq!(mask(0, 63), u64::MAX);
        assert_eq!(mask(0, 0), 1);
        assert_eq!(mask(63, 63), 1 << 63);
        assert_eq!(mask(3, 5), 0b111000);
        // A claim over three words sets exactly its bits, and its release clears them.
        let mut set = PageSet::new().unwrap();
        assert!(set.claim(60, 130));
        assert_eq!(set.words[..4], [mask(60, 63), u64::MAX, mask(0, 2), 0]);
        assert!(!set.claim(130, 130) && !set.claim(0, 60), "an end's bit taken");
        assert!(set.claim(131, 140) && set.claim(0, 59));
        assert_eq!(set.words[..3], [u64::MAX, u64::MAX, mask(0, 12)]);
    }
}
