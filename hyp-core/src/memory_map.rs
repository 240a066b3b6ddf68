//! Which physical memory is free for VMs and for the hypervisor's own pools: the device
//! tree's memory minus everything that is already in use (the hypervisor image, the device
//! tree, the boot bundle, reserved regions).

use heapless::Vec as FixedVec;

use crate::platform::PhysRange;

pub const MAX_FREE_RANGES: usize = 16;

/// `memory` minus every range in `used`, each result aligned inward to `align` (a power of
/// two) and dropped if nothing is left. Ranges that do not fit in the list are dropped from
/// the end and counted in the second value, never silently reported as free.
pub fn free_ranges(
    memory: &[PhysRange],
    used: &[PhysRange],
    align: u64,
) -> (FixedVec<PhysRange, MAX_FREE_RANGES>, usize) {
    let mut free: FixedVec<PhysRange, MAX_FREE_RANGES> = FixedVec::new();
    let mut dropped = 0;
    for region in memory {
        // Cut the region at each used range in address order.
        let mut cursor = region.base;
        let end = region.end();
        while cursor < end {
            let next_used =
                used.iter().filter(|u| u.size > 0 && u.end() > cursor && u.base < end).min_by_key(|u| u.base);
            let (piece_end, resume) = match next_used {
                Some(u) if u.base <= cursor => (cursor, u.end()),
                Some(u) => (u.base, u.end()),
                None => (end, end),
            };
            let start = align_up(cursor, align);
            let stop = piece_end & !(align - 1);
            if stop > start && free.push(PhysRange { base: start, size: stop - start }).is_err() {
                dropped += 1;
            }
            cursor = resume.min(end);
        }
    }
    (free, dropped)
}

/// The board's RAM as the hypervisor divides it at boot.
#[derive(Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The hypervisor's heap.
    pub heap: PhysRange,
    /// Everything else that is free: the VMs' memory.
    pub free: FixedVec<PhysRange, MAX_FREE_RANGES>,
    /// Free ranges left out because the list is full (too fragmented).
    pub dropped: usize,
}

/// Why the RAM cannot be divided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryPlanError {
    /// More ranges in use than the plan can track.
    TooManyUsedRanges { max: usize },
    /// No free range holds the heap.
    NoRoomForHeap { heap: u64 },
}

impl core::fmt::Display for MemoryPlanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooManyUsedRanges { max } => {
                write!(f, "more than {max} reserved memory ranges: the hypervisor cannot track them")
            }
            Self::NoRoomForHeap { heap } => {
                write!(f, "no free memory range of {} MiB for the hypervisor heap", heap >> 20)
            }
        }
    }
}

/// Most ranges in use a plan tracks (the image, the device tree, the boot bundle, the
/// reserved ranges and the spin tables' release words).
pub const MAX_USED_RANGES: usize = 32;

/// Divides `memory`: what `used` (and each of `more_used`) holds is left alone, the heap of
/// `heap_size` bytes goes at the start of the largest free range that holds it, the rest is
/// free for VMs, aligned to `align`.
pub fn plan<'a>(
    memory: &[PhysRange],
    used: impl IntoIterator<Item = &'a PhysRange>,
    heap_size: u64,
    align: u64,
) -> Result<MemoryPlan, MemoryPlanError> {
    let mut in_use: FixedVec<PhysRange, MAX_USED_RANGES> = FixedVec::new();
    for range in used {
        in_use.push(*range).map_err(|_| MemoryPlanError::TooManyUsedRanges { max: MAX_USED_RANGES })?;
    }
    let (mut free, dropped) = free_ranges(memory, &in_use, align);
    let (i, largest) = free
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, r)| r.size >= heap_size)
        .max_by_key(|(_, r)| r.size)
        .ok_or(MemoryPlanError::NoRoomForHeap { heap: heap_size })?;
    let heap = PhysRange { base: largest.base, size: heap_size };
    let rest = PhysRange { base: largest.base + heap_size, size: largest.size - heap_size };
    if rest.size < align {
        free.remove(i);
    } else {
        free[i] = rest;
    }
    Ok(MemoryPlan { heap, free, dropped })
}

/// Why memory cannot be set apart for identity-mapped VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetApartError {
    /// The range is not wholly inside one free range (it is not free memory).
    NotFree(PhysRange),
    /// What is left is in more pieces than a list holds.
    TooFragmented,
}

/// The free memory `free` with each of `apart` (identity-mapped VMs' RAM, 2 MiB blocks) set
/// apart: what is left for the other VMs, aligned to `align` (docs/capability-model.md, D4).
/// Each range set apart must lie wholly inside one free range: memory the hypervisor, the
/// firmware or another VM holds is never handed out twice.
pub fn set_apart(
    free: &[PhysRange],
    apart: &[PhysRange],
    align: u64,
) -> Result<FixedVec<PhysRange, MAX_FREE_RANGES>, SetApartError> {
    if let Some(r) = apart.iter().find(|r| !free.iter().any(|f| r.base >= f.base && r.end() <= f.end())) {
        return Err(SetApartError::NotFree(*r));
    }
    match free_ranges(free, apart, align) {
        (rest, 0) => Ok(rest),
        _ => Err(SetApartError::TooFragmented),
    }
}

const fn align_up(value: u64, align: u64) -> u64 {
    (value + align - 1) & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;
    fn r(base: u64, size: u64) -> PhysRange {
        PhysRange { base, size }
    }

    #[test]
    fn used_ranges_are_cut_out_and_the_rest_aligned() {
        let memory = [r(0x4000_0000, 1024 * MIB)];
        let used = [r(0x4000_0000, 3 * MIB + 5), r(0x4800_0000, 0x1000)];
        let (free, dropped) = free_ranges(&memory, &used, 2 * MIB);
        assert_eq!(dropped, 0);
        assert_eq!(
            free.as_slice(),
            &[r(0x4040_0000, 0x4800_0000 - 0x4040_0000), r(0x4820_0000, 0x8000_0000 - 0x4820_0000)]
        );
    }

    #[test]
    fn the_heap_goes_at_the_start_of_the_largest_free_range_and_the_rest_is_for_vms() {
        let memory = [r(0x4000_0000, 64 * MIB), r(0x8000_0000, 256 * MIB)];
        let used = [r(0x4000_0000, 2 * MIB)];
        let planned = plan(&memory, &used, 32 * MIB, 2 * MIB).unwrap();
        assert_eq!(planned.heap, r(0x8000_0000, 32 * MIB));
        assert_eq!(planned.free.as_slice(), &[r(0x4020_0000, 62 * MIB), r(0x8200_0000, 224 * MIB)]);
        let whole = plan(&[r(0x4000_0000, 32 * MIB)], &[], 32 * MIB, 2 * MIB).unwrap();
        assert!(whole.free.is_empty(), "a range the heap fills is not left as an empty one");
        assert_eq!(plan(&memory, &used, 512 * MIB, 2 * MIB), Err(MemoryPlanError::NoRoomForHeap { heap: 512 * MIB }));
        let many = [r(0x4000_0000, 4096); MAX_USED_RANGES + 1];
        assert_eq!(
            plan(&memory, &many, MIB, 2 * MIB),
            Err(MemoryPlanError::TooManyUsedRanges { max: MAX_USED_RANGES })
        );
    }

    #[test]
    fn nothing_is_free_when_everything_is_used() {
        let memory = [r(0x4000_0000, 16 * MIB)];
        let (free, _) = free_ranges(&memory, &[r(0x3000_0000, 0x2000_0000)], 4096);
        assert!(free.is_empty());
    }

    #[test]
    fn memory_set_apart_is_free_memory_and_leaves_the_rest() {
        let free = [r(0x20_0000, 126 * MIB), r(0x0d00_0000, 0x2f00_0000)];
        let rest = set_apart(&free, &[r(0x2000_0000, 256 * MIB)], 2 * MIB).unwrap();
        assert_eq!(
            rest.as_slice(),
            &[r(0x20_0000, 126 * MIB), r(0x0d00_0000, 0x1300_0000), r(0x3000_0000, 0x0c00_0000)]
        );
        assert_eq!(
            set_apart(&free, &[r(0x0800_0000, 256 * MIB)], 2 * MIB),
            Err(SetApartError::NotFree(r(0x0800_0000, 256 * MIB))),
            "it runs into what the hypervisor holds"
        );
    }

    proptest! {
        /// What is set apart and what is left are disjoint and together are the free memory.
        #[test]
        fn setting_apart_loses_and_duplicates_nothing(
            apart in prop::collection::vec((0u64..96, 1u64..8), 0..4),
        ) {
            let free = [r(0, 64 * MIB), r(128 * MIB, 64 * MIB)];
            let apart: std::vec::Vec<_> = apart.iter().map(|(b, s)| r(b * 2 * MIB, s * 2 * MIB)).collect();
            let inside = apart.iter().all(|a| free.iter().any(|f| a.base >= f.base && a.end() <= f.end()));
            match set_apart(&free, &apart, 2 * MIB) {
                Err(SetApartError::NotFree(_)) => prop_assert!(!inside),
                Err(SetApartError::TooFragmented) => prop_assert!(false, "a few ranges fit the list"),
                Ok(rest) => {
                    prop_assert!(inside);
                    let mut block = 0;
                    while block < 192 * MIB {
                        let b = r(block, 2 * MIB);
                        let is_free = free.iter().any(|f| f.base <= block && block + 2 * MIB <= f.end());
                        let set = apart.iter().any(|a| a.overlaps(&b));
                        let left = rest.iter().any(|f| f.overlaps(&b));
                        prop_assert_eq!(left, is_free && !set, "block {:#x}", block);
                        block += 2 * MIB;
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn free_ranges_avoid_every_used_range_and_stay_in_memory(
            mem in prop::collection::vec((0u64..64, 1u64..64), 1..4),
            used in prop::collection::vec((0u64..256, 0u64..32), 0..6),
        ) {
            let memory: std::vec::Vec<_> = mem.iter().enumerate().map(|(i, (b, s))| r((i as u64 * 256 + b) * MIB, s * MIB)).collect();
            let used: std::vec::Vec<_> = used.iter().map(|(b, s)| r(b * MIB * 4 + 12345, s * MIB)).collect();
            let (free, dropped) = free_ranges(&memory, &used, 2 * MIB);
            prop_assert_eq!(dropped, 0);
            for f in &free {
                prop_assert!(f.size > 0 && f.base % (2 * MIB) == 0 && f.size % (2 * MIB) == 0);
                prop_assert!(memory.iter().any(|m| m.base <= f.base && f.end() <= m.end()));
                prop_assert!(used.iter().all(|u| u.size == 0 || !u.overlaps(f)));
            }
            // Every aligned 2 MiB block of memory that touches no used range is free.
            for m in &memory {
                let mut b = align_up(m.base, 2 * MIB);
                while b + 2 * MIB <= m.end() {
                    let block = r(b, 2 * MIB);
                    if used.iter().all(|u| u.size == 0 || !u.overlaps(&block)) {
                        prop_assert!(free.iter().any(|f| f.base <= b && b + 2 * MIB <= f.end()), "block {:#x} lost", b);
                    }
                    b += 2 * MIB;
                }
            }
        }
    }
}
