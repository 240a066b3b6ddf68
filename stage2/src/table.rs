//! The stage-2 tables of one VM: map, unmap and protect ranges, and the software walk.
//!
//! Changes follow two rules. Prepare, then commit (Hafnium's `mm_vm_identity_prepare` /
//! `_commit`, CONVENTIONS 3): every table frame a change needs is allocated before any
//! descriptor the hardware can see changes, so running out of frames leaves the tables as
//! they were. Break-before-make (ARM ARM D8.14.1): a valid descriptor is replaced by
//! another valid one of a different output address or size only through an invalid
//! descriptor and a TLB invalidation; permission-only changes are written in place and then
//! invalidated.

use crate::descriptor as desc;
use crate::format::{entry_span, level_shift, Geometry, ENTRIES_PER_TABLE};
use crate::{
    Ipa, IpaRange, MappingAttributes, MemoryType, OwnershipState, Permissions, PhysAddr, Stage2Error, TableFormat,
    TableMemory, TlbMaintenance, PAGE_SIZE,
};

/// What the hardware would do with an IPA.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Translation {
    pub pa: PhysAddr,
    pub attrs: MappingAttributes,
    pub owner: OwnershipState,
    pub level: u8,
    pub block_size: u64,
}

/// One valid block or page descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Leaf {
    pub ipa: Ipa,
    pub pa: PhysAddr,
    pub size: u64,
    pub level: u8,
    pub attrs: MappingAttributes,
    pub owner: OwnershipState,
}

pub struct Stage2Table {
    root: PhysAddr,
    format: TableFormat,
    geometry: Geometry,
    vmid: u16,
}

/// Frames allocated before a change that splits blocks: at most two partial blocks per
/// level, at each end of the range.
struct FramePool {
    frames: [PhysAddr; MAX_SPLIT_FRAMES],
    len: usize,
}

const MAX_SPLIT_FRAMES: usize = 8;

impl FramePool {
    fn take(&mut self) -> Option<PhysAddr> {
        self.len = self.len.checked_sub(1)?;
        Some(self.frames[self.len])
    }
}

/// What `modify` does to the leaves a range covers.
#[derive(Clone, Copy)]
enum Change {
    Unmap,
    Protect(Permissions),
}

/// The frame and index of entry `index` of a (possibly concatenated) table.
fn slot(table: PhysAddr, index: usize) -> (PhysAddr, usize) {
    (PhysAddr(table.0 + (index / ENTRIES_PER_TABLE) as u64 * PAGE_SIZE), index % ENTRIES_PER_TABLE)
}

fn read(mem: &impl TableMemory, table: PhysAddr, index: usize) -> u64 {
    let (frame, i) = slot(table, index);
    mem.read_descriptor(frame, i)
}

fn write(mem: &mut impl TableMemory, table: PhysAddr, index: usize, value: u64) {
    let (frame, i) = slot(table, index);
    mem.write_descriptor(frame, i, value)
}

/// The entries of a table at `level` (whose first entry maps IPA `base`) that overlap
/// `[a, b)`: (index, first IPA, end IPA) of each.
fn entries(level: u8, base: u64, a: u64, b: u64) -> impl Iterator<Item = (usize, u64, u64)> {
    let span = entry_span(level);
    let first = ((a - base) / span) as usize;
    let last = ((b - 1 - base) / span) as usize;
    (first..=last).map(move |i| {
        let start = base + i as u64 * span;
        (i, start, start + span)
    })
}

fn is_empty(mem: &impl TableMemory, table: PhysAddr) -> bool {
    (0..ENTRIES_PER_TABLE).all(|i| !desc::is_valid(mem.read_descriptor(table, i)))
}

/// Splits needed inside a block whose part `[a, b)` changes, if the block is split into
/// entries of `level`: the children the range covers only partly must be split again.
fn nested_splits(level: u8, a: u64, b: u64) -> usize {
    if level == 3 {
        return 0;
    }
    let span = entry_span(level);
    let first = a & !(span - 1);
    let last = (b - 1) & !(span - 1);
    let mut n = 0;
    if a != first || (first == last && b != first + span) {
        n += 1 + nested_splits(level + 1, a, b.min(first + span));
    }
    if last != first && b != last + span {
        n += 1 + nested_splits(level + 1, last, b);
    }
    n
}

impl Stage2Table {
    pub fn new(format: TableFormat, vmid: u16, mem: &mut impl TableMemory) -> Result<Self, Stage2Error> {
        let geometry = format.geometry()?;
        let root = mem.allocate_zeroed_frames(geometry.root_tables).ok_or(Stage2Error::OutOfFrames)?;
        Ok(Stage2Table { root, format, geometry, vmid })
    }

    pub fn format(&self) -> TableFormat {
        self.format
    }
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }
    pub fn vmid(&self) -> u16 {
        self.vmid
    }
    pub fn root(&self) -> PhysAddr {
        self.root
    }

    /// VTTBR_EL2 / VTTBR: VMID in [55:48] (8-bit VMIDs), BADDR the root (aligned to the
    /// size of the concatenated root tables, as `TableMemory` guarantees).
    pub fn vttbr(&self) -> u64 {
        (u64::from(self.vmid & 0xff) << 48) | self.root.0
    }

    pub fn vtcr(&self) -> u64 {
        self.format.vtcr(&self.geometry)
    }

    fn ipa_limit(&self) -> u64 {
        1 << self.geometry.ipa_bits
    }

    fn check_range(&self, range: IpaRange) -> Result<(), Stage2Error> {
        if !range.start().0.is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "IPA", value: range.start().0 });
        }
        if !range.size().is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "size", value: range.size() });
        }
        if range.end() > self.ipa_limit() {
            return Err(Stage2Error::BeyondIpaSize { end: range.end(), ipa_bits: self.geometry.ipa_bits });
        }
        Ok(())
    }

    /// Maps `range` to the physical range at `pa`, with 1 GiB and 2 MiB blocks wherever IPA
    /// and PA alignment allow. Refuses to map over anything already mapped.
    pub fn map_range(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        pa: PhysAddr,
        attrs: MappingAttributes,
        owner: OwnershipState,
    ) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        if !pa.0.is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "physical address", value: pa.0 });
        }
        let pa_end = pa.0.checked_add(range.size()).ok_or(Stage2Error::Overflow { start: pa.0, size: range.size() })?;
        if pa_end > 1 << self.geometry.pa_bits {
            return Err(Stage2Error::BeyondPaSize { end: pa_end, pa_bits: self.geometry.pa_bits });
        }
        if attrs.memory == MemoryType::DeviceNGnRE && attrs.permissions.execute {
            return Err(Stage2Error::InvalidPermissions);
        }
        let (a, b) = (range.start().0, range.end());
        let (level, root) = (self.geometry.start_level, self.root);
        if let Some(ipa) = self.first_mapped(mem, level, root, 0, a, b) {
            return Err(Stage2Error::AlreadyMapped { ipa });
        }
        // pa_for(ipa) = ipa + delta (mod 2^64).
        let delta = pa.0.wrapping_sub(a);
        if self.prepare_tables(mem, level, root, 0, a, b, delta).is_err() {
            self.remove_empty_tables(mem, tlb, level, root, 0, a, b);
            return Err(Stage2Error::OutOfFrames);
        }
        let leaf = |pa, level| desc::leaf(pa, level, attrs, owner);
        self.write_leaves(mem, level, root, 0, a, b, delta, &leaf);
        tlb.publish();
        Ok(())
    }

    /// Unmaps whatever is mapped in `range` (splitting blocks it covers only partly) and
    /// frees the tables that become empty.
    pub fn unmap_range(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, range: IpaRange) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        self.modify(mem, tlb, range, Change::Unmap)
    }

    /// Changes the permissions of whatever is mapped in `range` (splitting blocks it covers
    /// only partly). Unmapped parts stay unmapped.
    pub fn protect_range(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        permissions: Permissions,
    ) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        if permissions.execute {
            let mut device = false;
            self.for_each_leaf(mem, |l| {
                let overlaps = l.ipa.0 < range.end() && range.start().0 < l.ipa.0 + l.size;
                device |= overlaps && l.attrs.memory == MemoryType::DeviceNGnRE;
            });
            if device {
                return Err(Stage2Error::InvalidPermissions);
            }
        }
        self.modify(mem, tlb, range, Change::Protect(permissions))
    }

    fn modify(&mut self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, range: IpaRange, change: Change) -> Result<(), Stage2Error> {
        let (a, b) = (range.start().0, range.end());
        let (level, root) = (self.geometry.start_level, self.root);
        let needed = self.count_splits(mem, level, root, 0, a, b);
        let mut pool = FramePool { frames: [PhysAddr(0); MAX_SPLIT_FRAMES], len: 0 };
        if needed > MAX_SPLIT_FRAMES {
            return Err(Stage2Error::OutOfFrames);
        }
        for _ in 0..needed {
            match mem.allocate_zeroed_frames(1) {
                Some(frame) => {
                    pool.frames[pool.len] = frame;
                    pool.len += 1;
                }
                None => {
                    while let Some(frame) = pool.take() {
                        mem.free_frames(frame, 1);
                    }
                    return Err(Stage2Error::OutOfFrames);
                }
            }
        }
        self.modify_walk(mem, tlb, level, root, 0, a, b, change, &mut pool);
        tlb.publish();
        // Every prepared frame was used; free any the walk did not need all the same.
        while let Some(frame) = pool.take() {
            mem.free_frames(frame, 1);
        }
        Ok(())
    }

    fn first_mapped(&self, mem: &impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64) -> Option<u64> {
        for (i, s, e) in entries(level, base, a, b) {
            let d = read(mem, table, i);
            if !desc::is_valid(d) {
                continue;
            }
            let (ca, cb) = (a.max(s), b.min(e));
            if level < 3 && desc::is_table_or_page(d) {
                if let Some(ipa) = self.first_mapped(mem, level + 1, desc::output_address(d), s, ca, cb) {
                    return Some(ipa);
                }
            } else {
                return Some(ca);
            }
        }
        None
    }

    /// A block can map `[ca, cb)` at `level` if it covers the whole entry and the physical
    /// address is aligned to the block (level 0 has no blocks with the 4 KiB granule).
    fn is_block(level: u8, ca: u64, cb: u64, s: u64, e: u64, delta: u64) -> bool {
        level == 3 || (level >= 1 && ca == s && cb == e && ca.wrapping_add(delta).is_multiple_of(entry_span(level)))
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare_tables(&self, mem: &mut impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64, delta: u64) -> Result<(), ()> {
        for (i, s, e) in entries(level, base, a, b) {
            let (ca, cb) = (a.max(s), b.min(e));
            if Self::is_block(level, ca, cb, s, e, delta) {
                continue;
            }
            let d = read(mem, table, i);
            let next = if desc::is_valid(d) {
                desc::output_address(d)
            } else {
                let frame = mem.allocate_zeroed_frames(1).ok_or(())?;
                // An empty table changes no translation: no break-before-make needed.
                write(mem, table, i, desc::table(frame));
                frame
            };
            self.prepare_tables(mem, level + 1, next, s, ca, cb, delta)?;
        }
        Ok(())
    }

    /// After a failed prepare: frees the (empty) tables it installed. Only tables this map
    /// created can be empty: unmap never leaves an empty table behind.
    #[allow(clippy::too_many_arguments)]
    fn remove_empty_tables(&self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, level: u8, table: PhysAddr, base: u64, a: u64, b: u64) {
        for (i, s, e) in entries(level, base, a, b) {
            let d = read(mem, table, i);
            if level == 3 || !desc::is_valid(d) || !desc::is_table_or_page(d) {
                continue;
            }
            let next = desc::output_address(d);
            self.remove_empty_tables(mem, tlb, level + 1, next, s, a.max(s), b.min(e));
            if is_empty(mem, next) {
                write(mem, table, i, 0);
                tlb.invalidate_ipa(self.vmid, Ipa(s));
                mem.free_frames(next, 1);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_leaves(&self, mem: &mut impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64, delta: u64, leaf: &impl Fn(PhysAddr, u8) -> u64) {
        for (i, s, e) in entries(level, base, a, b) {
            let (ca, cb) = (a.max(s), b.min(e));
            if Self::is_block(level, ca, cb, s, e, delta) {
                write(mem, table, i, leaf(PhysAddr(ca.wrapping_add(delta)), level));
            } else {
                let next = desc::output_address(read(mem, table, i));
                self.write_leaves(mem, level + 1, next, s, ca, cb, delta, leaf);
            }
        }
    }

    fn count_splits(&self, mem: &impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64) -> usize {
        let mut n = 0;
        for (i, s, e) in entries(level, base, a, b) {
            let d = read(mem, table, i);
            if !desc::is_valid(d) {
                continue;
            }
            let (ca, cb) = (a.max(s), b.min(e));
            if level < 3 && desc::is_table_or_page(d) {
                n += self.count_splits(mem, level + 1, desc::output_address(d), s, ca, cb);
            } else if (ca, cb) != (s, e) {
                n += 1 + nested_splits(level + 1, ca, cb);
            }
        }
        n
    }

    /// Replaces the block `d` (entry `i` of `table`, mapping `[s, ..)` at `level`) by a table
    /// of the next level mapping the same, through break-before-make.
    #[allow(clippy::too_many_arguments)]
    fn split(&self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, level: u8, table: PhysAddr, i: usize, s: u64, d: u64, frame: PhysAddr) {
        let child_span = entry_span(level + 1);
        let oa = desc::output_address(d).0;
        for k in 0..ENTRIES_PER_TABLE {
            mem.write_descriptor(frame, k, desc::leaf_at_level(d, PhysAddr(oa + k as u64 * child_span), level + 1));
        }
        write(mem, table, i, 0);
        tlb.invalidate_ipa(self.vmid, Ipa(s));
        write(mem, table, i, desc::table(frame));
    }

    #[allow(clippy::too_many_arguments)]
    fn modify_walk(&self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, level: u8, table: PhysAddr, base: u64, a: u64, b: u64, change: Change, pool: &mut FramePool) {
        for (i, s, e) in entries(level, base, a, b) {
            let mut d = read(mem, table, i);
            if !desc::is_valid(d) {
                continue;
            }
            let (ca, cb) = (a.max(s), b.min(e));
            let is_table = level < 3 && desc::is_table_or_page(d);
            if !is_table && (ca, cb) != (s, e) {
                let Some(frame) = pool.take() else { continue };
                self.split(mem, tlb, level, table, i, s, d, frame);
                d = read(mem, table, i);
            }
            if level < 3 && desc::is_table_or_page(d) {
                let next = desc::output_address(d);
                self.modify_walk(mem, tlb, level + 1, next, s, ca, cb, change, pool);
                if is_empty(mem, next) {
                    write(mem, table, i, 0);
                    tlb.invalidate_ipa(self.vmid, Ipa(s));
                    mem.free_frames(next, 1);
                }
                continue;
            }
            match change {
                Change::Unmap => {
                    write(mem, table, i, 0);
                    tlb.invalidate_ipa(self.vmid, Ipa(s));
                }
                Change::Protect(p) => {
                    let new = desc::with_permissions(d, p);
                    if new != d {
                        write(mem, table, i, new);
                        tlb.invalidate_ipa(self.vmid, Ipa(s));
                    }
                }
            }
        }
    }

    /// The software walk: what the hardware would translate `ipa` to, if anything.
    pub fn translate(&self, mem: &impl TableMemory, ipa: Ipa) -> Option<Translation> {
        if ipa.0 >= self.ipa_limit() {
            return None;
        }
        let (mut level, mut table) = (self.geometry.start_level, self.root);
        let mut index = (ipa.0 >> level_shift(level)) as usize;
        loop {
            let d = read(mem, table, index);
            if !desc::is_valid(d) {
                return None;
            }
            if level < 3 && desc::is_table_or_page(d) {
                table = desc::output_address(d);
                level += 1;
                index = (ipa.0 >> level_shift(level)) as usize % ENTRIES_PER_TABLE;
                continue;
            }
            let span = entry_span(level);
            return Some(Translation {
                pa: PhysAddr(desc::output_address(d).0 + (ipa.0 & (span - 1))),
                attrs: desc::attributes(d),
                owner: desc::owner(d),
                level,
                block_size: span,
            });
        }
    }

    /// Every valid leaf, in IPA order.
    pub fn for_each_leaf(&self, mem: &impl TableMemory, mut f: impl FnMut(Leaf)) {
        self.leaves_in(mem, self.geometry.start_level, self.root, 0, 0, self.ipa_limit(), &mut f);
    }

    #[allow(clippy::too_many_arguments)]
    fn leaves_in(&self, mem: &impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64, f: &mut impl FnMut(Leaf)) {
        for (i, s, e) in entries(level, base, a, b) {
            let d = read(mem, table, i);
            if !desc::is_valid(d) {
                continue;
            }
            if level < 3 && desc::is_table_or_page(d) {
                self.leaves_in(mem, level + 1, desc::output_address(d), s, s, e, f);
            } else {
                f(Leaf {
                    ipa: Ipa(s),
                    pa: desc::output_address(d),
                    size: e - s,
                    level,
                    attrs: desc::attributes(d),
                    owner: desc::owner(d),
                });
            }
        }
    }

    /// Frames the tables use, root included.
    pub fn table_frame_count(&self, mem: &impl TableMemory) -> usize {
        self.geometry.root_tables + self.subtables(mem, self.geometry.start_level, self.root, 0, 0, self.ipa_limit(), &mut |_, _| {})
    }

    /// Counts (and hands to `f`) every table below `table`, deepest first.
    #[allow(clippy::too_many_arguments)]
    fn subtables(&self, mem: &impl TableMemory, level: u8, table: PhysAddr, base: u64, a: u64, b: u64, f: &mut impl FnMut(PhysAddr, u8)) -> usize {
        let mut n = 0;
        for (i, s, e) in entries(level, base, a, b) {
            let d = read(mem, table, i);
            if level < 3 && desc::is_valid(d) && desc::is_table_or_page(d) {
                let next = desc::output_address(d);
                n += 1 + self.subtables(mem, level + 1, next, s, s, e, f);
                f(next, level + 1);
            }
        }
        n
    }

    /// Frees every table frame. The VM must not run on these tables any more, and its VMID's
    /// TLB entries must be invalidated before the VMID is reused.
    pub fn destroy(self, mem: &mut impl TableMemory) {
        Self::free_subtables(mem, self.geometry.start_level, self.root, self.geometry.root_tables * ENTRIES_PER_TABLE);
        mem.free_frames(self.root, self.geometry.root_tables);
    }

    /// Frees the tables below `table` (of `entries` entries), children before parents.
    fn free_subtables(mem: &mut impl TableMemory, level: u8, table: PhysAddr, entries: usize) {
        for i in 0..entries {
            let d = read(mem, table, i);
            if level < 3 && desc::is_valid(d) && desc::is_table_or_page(d) {
                let next = desc::output_address(d);
                Self::free_subtables(mem, level + 1, next, ENTRIES_PER_TABLE);
                mem.free_frames(next, 1);
            }
        }
    }
}
