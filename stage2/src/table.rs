//! The stage-2 tables of one VM: map, unmap and protect ranges, and the software walk.
//!
//! One walker serves both formats: every walk below takes the list of levels it still has
//! to go through (`Geometry::levels`), the first being the level of the table in hand.
//!
//! Changes follow two rules. Prepare, then commit (Hafnium's `mm_vm_identity_prepare` /
//! `_commit`): a change first counts the table frames it needs (new tables
//! for a map, split blocks for an unmap or protect) and allocates all of them; only then does
//! it write a descriptor, and from there on nothing can fail. Running out of frames therefore
//! leaves the tables untouched. Break-before-make (ARM ARM D8.14.1 "Using break-before-make
//! when updating translation table entries"): a valid descriptor is never overwritten by
//! another valid one; it is first made invalid and its IPA invalidated in the TLB, then the
//! new descriptor is written. This holds for permission changes too (as in Hafnium's
//! `mm_replace_entry`), so a guest access racing with a change on another CPU may take a
//! stage-2 fault on a mapped IPA: the fault handler must then simply retry.
//!
//! A VM's private RAM may be mapped *pending* (`map_range_pending`): each leaf, of at most
//! `FIRST_TOUCH_BLOCK`, is written complete but for its valid bit, so the guest's first
//! access to it is a stage-2 Translation fault; the hypervisor then zeroes the leaf's memory
//! and makes it valid (`activate_range`). Everything else treats a pending leaf as mapped:
//! it is walked, reported (`Leaf::pending`), split, protected and unmapped like a valid one,
//! and a map over it is refused. Making it valid needs no TLB invalidation: an entry that
//! gives a Translation fault is never held in a TLB (ARM ARM D8, "Translation Lookaside
//! Buffers"), so only the DSB that publishes the descriptor.
//!
//! An emulated window may have a *hidden* shadow page (`map_range_hidden`): leaves written
//! the same way, but read-only Device memory and of one page each, which the hypervisor
//! makes valid (`show_range`) while the guest may read the device model's copy of its
//! registers without trapping, and invalid again (`hide_range`) when it must not. Hiding
//! is the break of break-before-make without the make: the descriptor is made invalid,
//! then its IPA is invalidated in the TLB of every CPU before `hide_range` returns (ARM ARM
//! D8, "TLB maintenance requirements": a valid-to-invalid change is not seen by a CPU that
//! holds the old entry until it is invalidated). A leaf that is not valid is either kind;
//! the memory type tells them apart, and `activate_range` makes valid only Normal leaves,
//! `show_range` only read-only Device ones, so a hidden page is never zeroed and no RAM is
//! ever made valid unzeroed.

use core::ops::ControlFlow;

use crate::descriptor as desc;
use crate::format::{Geometry, LevelDescription, ENTRIES_PER_TABLE};
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

/// One block or page descriptor, valid or pending.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Leaf {
    pub ipa: Ipa,
    pub pa: PhysAddr,
    pub size: u64,
    pub level: u8,
    pub attrs: MappingAttributes,
    pub owner: OwnershipState,
    /// Invalid to the hardware: RAM waiting for the guest's first touch (Normal memory,
    /// `activate_range`), or a hidden shadow page (read-only Device memory, `show_range`);
    /// `is_hidden` tells which.
    pub pending: bool,
}

impl Leaf {
    /// A shadow page hidden from the guest (`map_range_hidden`, `hide_range`): invalid,
    /// read-only Device, what `show_range` makes valid. (An invalid Device leaf whose
    /// permissions `protect_range` changed is neither hidden nor pending RAM: still mapped,
    /// made valid by nothing until it is read-only again.)
    pub fn is_hidden(&self) -> bool {
        self.pending && self.attrs == MappingAttributes::READ_ONLY_DEVICE
    }
}

/// The largest leaf `map_range_pending` writes: what one first touch zeroes. A 2 MiB block
/// is the RAM granule of every VM (`hyp_core::bundle::RAM_GRANULE`), so a VM's RAM is
/// pending in whole blocks whatever its alignment allows.
pub const FIRST_TOUCH_BLOCK: u64 = 2 << 20;

pub struct Stage2Table {
    root: PhysAddr,
    format: TableFormat,
    geometry: Geometry,
    vmid: u16,
}

/// How `map` writes its leaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Valid, in the largest blocks alignment allows.
    Valid,
    /// Invalid until the first touch zeroes them, of at most `FIRST_TOUCH_BLOCK`.
    Pending,
    /// Invalid until shown, one page each.
    Hidden,
}

impl Written {
    /// The largest leaf written.
    fn max_span(self) -> u64 {
        match self {
            Written::Valid => u64::MAX,
            Written::Pending => FIRST_TOUCH_BLOCK,
            // A window is a page or a few: pages keep every show and hide to whole leaves
            // of the window and every TLB invalidation to the page it concerns.
            Written::Hidden => PAGE_SIZE,
        }
    }
}

/// VTTBR_EL2.VMID / VTTBR.VMID with 8-bit VMIDs (VTCR_EL2.VS = 0).
const MAX_VMID: u16 = 0xff;

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

fn is_table(d: u64, level: &LevelDescription) -> bool {
    !level.is_last() && desc::is_table_or_page(d)
}

fn is_empty(mem: &impl TableMemory, table: PhysAddr) -> bool {
    (0..ENTRIES_PER_TABLE).all(|i| !desc::is_present(mem.read_descriptor(table, i)))
}

/// One entry of a table as a walk over `[a, b)` meets it: the entry maps `[start, end)`, of
/// which the walk concerns `[a, b)`.
#[derive(Clone, Copy)]
struct Entry {
    index: usize,
    start: u64,
    end: u64,
    a: u64,
    b: u64,
}

impl Entry {
    fn covered(&self) -> bool {
        (self.a, self.b) == (self.start, self.end)
    }
}

/// The entries of a table at `level`, whose first entry maps IPA `base`, that overlap `[a, b)`.
fn entries(level: &LevelDescription, base: u64, a: u64, b: u64) -> impl Iterator<Item = Entry> {
    let span = level.span();
    let (first, last) = if base <= a && a < b { ((a - base) / span, (b - 1 - base) / span) } else { (1, 0) };
    (first..=last).map(move |i| {
        let start = base + i * span;
        let end = start + span;
        Entry { index: i as usize, start, end, a: a.max(start), b: b.min(end) }
    })
}

/// Frames allocated by the prepare phase, linked through their first entry (so any number
/// fits without a heap). The link is `frame | 0b10`, an invalid descriptor; a frame is zero
/// again when it is taken.
struct FramePool {
    head: u64,
}

const POOL_LINK: u64 = 0b10;

impl FramePool {
    fn allocate(mem: &mut impl TableMemory, count: usize) -> Result<Self, Stage2Error> {
        let mut pool = FramePool { head: 0 };
        for _ in 0..count {
            let Some(frame) = mem.allocate_zeroed_frames(1) else {
                pool.release(mem);
                return Err(Stage2Error::OutOfFrames);
            };
            mem.write_descriptor(frame, 0, pool.head);
            pool.head = frame.0 | POOL_LINK;
        }
        Ok(pool)
    }

    fn take(&mut self, mem: &mut impl TableMemory) -> Option<PhysAddr> {
        if self.head & POOL_LINK == 0 {
            return None;
        }
        let frame = PhysAddr(self.head & !POOL_LINK);
        self.head = mem.read_descriptor(frame, 0);
        mem.write_descriptor(frame, 0, 0);
        Some(frame)
    }

    /// Frees what the commit did not use (nothing, when the count was right).
    fn release(mut self, mem: &mut impl TableMemory) {
        while let Some(frame) = self.take(mem) {
            mem.free_frames(frame, 1);
        }
    }
}

/// What `modify` does to the leaves a range covers.
#[derive(Clone, Copy)]
enum Change {
    Unmap,
    Protect(Permissions),
}

impl Change {
    /// The leaf `d` becomes (0: invalid).
    fn apply(self, d: u64) -> u64 {
        match self {
            Change::Unmap => 0,
            Change::Protect(p) => desc::with_permissions(d, p),
        }
    }
}

impl Stage2Table {
    /// Empty tables (the root only) for a VM with this VMID (0 to 255: 8-bit VMIDs).
    pub fn new(format: TableFormat, vmid: u16, mem: &mut impl TableMemory) -> Result<Self, Stage2Error> {
        let geometry = format.geometry()?;
        if vmid > MAX_VMID {
            return Err(Stage2Error::VmidTooLarge { vmid });
        }
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

    /// VTTBR_EL2 (ARM ARM D24.2 "VTTBR_EL2") or ARMv7 VTTBR (ARMv7 ARM B4.1.160): VMID in
    /// [55:48], BADDR the root, aligned to the size of the concatenated root tables as
    /// `TableMemory` guarantees; CnP (bit 0) clear.
    pub fn vttbr(&self) -> u64 {
        (u64::from(self.vmid & MAX_VMID) << 48) | (self.root.0 & desc::OA_MASK)
    }

    /// VTCR_EL2 or ARMv7 VTCR for these tables (see `TableFormat::vtcr`).
    pub fn vtcr(&self) -> u64 {
        self.format.vtcr(&self.geometry)
    }

    fn check_range(&self, range: IpaRange) -> Result<(), Stage2Error> {
        if !range.start().0.is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "IPA", value: range.start().0 });
        }
        if !range.size().is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "size", value: range.size() });
        }
        if range.end() > self.geometry.ipa_limit() {
            return Err(Stage2Error::BeyondIpaSize { end: range.end(), ipa_bits: self.geometry.ipa_bits });
        }
        Ok(())
    }

    /// Maps `range` to the physical range at `pa`, with 1 GiB and 2 MiB blocks wherever IPA
    /// and PA alignment allow. Refuses to map over anything already mapped, and device
    /// memory with execute permission; on any error nothing changed.
    pub fn map_range(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        pa: PhysAddr,
        attrs: MappingAttributes,
        owner: OwnershipState,
    ) -> Result<(), Stage2Error> {
        self.map(mem, tlb, range, pa, attrs, owner, Written::Valid)
    }

    /// As `map_range`, but every leaf pending (of at most `FIRST_TOUCH_BLOCK`): the guest's
    /// first access to it faults, and `activate_range` makes it valid once its memory is
    /// zeroed. Normal memory only (a device's registers are never zeroed).
    pub fn map_range_pending(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        pa: PhysAddr,
        attrs: MappingAttributes,
        owner: OwnershipState,
    ) -> Result<(), Stage2Error> {
        if attrs.memory != MemoryType::NormalWriteBack {
            return Err(Stage2Error::InvalidPermissions);
        }
        self.map(mem, tlb, range, pa, attrs, owner, Written::Pending)
    }

    /// As `map_range`, but every leaf a hidden page: present in the tables (walked,
    /// reported with `Leaf::pending` and `Leaf::is_hidden`, unmapped like any other), invalid
    /// to the hardware, so every guest access to it is a stage-2 Translation fault until
    /// `show_range` makes it valid. For an emulated window's shadow page only: `attrs` must
    /// be `MappingAttributes::READ_ONLY_DEVICE` (else `HiddenNotReadOnlyDevice`); on any
    /// error nothing changed.
    pub fn map_range_hidden(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        pa: PhysAddr,
        attrs: MappingAttributes,
        owner: OwnershipState,
    ) -> Result<(), Stage2Error> {
        if attrs != MappingAttributes::READ_ONLY_DEVICE {
            return Err(Stage2Error::HiddenNotReadOnlyDevice);
        }
        self.map(mem, tlb, range, pa, attrs, owner, Written::Hidden)
    }

    /// Makes every hidden leaf (read-only Device, not valid) that overlaps `range` valid,
    /// whole; anything else is left alone, a RAM leaf waiting for its first touch above all
    /// (only `activate_range`, which zeroes it first, makes that valid). Returns the bytes
    /// made valid. An invalid-to-valid change needs no TLB invalidation (a faulting entry is
    /// in no TLB), only the DSB that publishes it. Allocates nothing and cannot fail.
    pub fn show_range(&self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, range: IpaRange) -> u64 {
        let (a, b) = self.clamp(range);
        let bytes = rewrite_leaves(mem, self.geometry.levels(), self.root, 0, a, b, &mut |mem, slot| {
            if !desc::is_pending(slot.d) || !desc::is_shadow(slot.d) {
                return 0;
            }
            write(mem, slot.table, slot.index, desc::activated(slot.d));
            slot.size
        });
        if bytes != 0 {
            tlb.publish();
        }
        bytes
    }

    /// Makes every valid read-only Device leaf that overlaps `range` hidden again, whole:
    /// invalid to the hardware, its output address, attributes and owner kept, so
    /// `show_range` can make it valid again. Each leaf's IPA is invalidated in the TLBs of
    /// the Inner Shareable domain right after its descriptor is made invalid, so when this
    /// returns no CPU reads through it any more (ARM ARM D8, "TLB maintenance
    /// requirements"). Returns the bytes hidden. Allocates nothing and cannot fail.
    pub fn hide_range(&self, mem: &mut impl TableMemory, tlb: &mut impl TlbMaintenance, range: IpaRange) -> u64 {
        let (a, b) = self.clamp(range);
        rewrite_leaves(mem, self.geometry.levels(), self.root, 0, a, b, &mut |mem, slot| {
            if !desc::is_valid(slot.d) || !desc::is_shadow(slot.d) {
                return 0;
            }
            write(mem, slot.table, slot.index, desc::pending(slot.d));
            tlb.invalidate_ipa(self.vmid, Ipa(slot.ipa));
            slot.size
        })
    }

    /// `range` as `[a, b)` cut to the IPA space, so a walk never indexes past the root.
    fn clamp(&self, range: IpaRange) -> (u64, u64) {
        let limit = self.geometry.ipa_limit();
        (range.start().0.min(limit), range.end().min(limit))
    }

    /// Makes every pending RAM leaf that overlaps `range` valid, whole, after `zero` has been
    /// given its memory (physical address and size); valid leaves, and hidden device leaves
    /// (`map_range_hidden`: a device's registers are never zeroed), are left alone. Returns
    /// the bytes made valid. Allocates nothing and cannot fail. The caller makes sure no two
    /// of these run at once on one VM, and that no other change of the range runs beside it
    /// (the hypervisor changes a running VM's RAM mapping only here).
    pub fn activate_range(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        zero: &mut impl FnMut(PhysAddr, u64),
    ) -> u64 {
        let (a, b) = self.clamp(range);
        let bytes = rewrite_leaves(mem, self.geometry.levels(), self.root, 0, a, b, &mut |mem, slot| {
            if !desc::is_pending(slot.d) || desc::attributes(slot.d).memory != MemoryType::NormalWriteBack {
                return 0;
            }
            zero(desc::output_address(slot.d), slot.size);
            write(mem, slot.table, slot.index, desc::activated(slot.d));
            slot.size
        });
        if bytes != 0 {
            tlb.publish();
        }
        bytes
    }

    #[allow(clippy::too_many_arguments)]
    fn map(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        pa: PhysAddr,
        attrs: MappingAttributes,
        owner: OwnershipState,
        written: Written,
    ) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        if !pa.0.is_multiple_of(PAGE_SIZE) {
            return Err(Stage2Error::Unaligned { what: "physical address", value: pa.0 });
        }
        let pa_end = pa.0.checked_add(range.size()).ok_or(Stage2Error::Overflow { start: pa.0, size: range.size() })?;
        if pa_end > self.geometry.pa_limit() {
            return Err(Stage2Error::BeyondPaSize { end: pa_end, pa_bits: self.geometry.pa_bits });
        }
        if attrs.memory == MemoryType::DeviceNGnRE && attrs.permissions.execute {
            return Err(Stage2Error::InvalidPermissions);
        }
        let (a, b) = (range.start().0, range.end());
        if let Some(ipa) = self.first_mapped(mem, a, b) {
            return Err(Stage2Error::AlreadyMapped { ipa });
        }
        // The PA of IPA x is x + delta (mod 2^64).
        let delta = pa.0.wrapping_sub(a);
        let levels = self.geometry.levels();
        let fit = Fit { delta, max_span: written.max_span() };
        // Prepare.
        let mut pool = FramePool::allocate(mem, tables_needed(mem, levels, Some(self.root), 0, a, b, fit))?;
        // Commit.
        let leaf = |pa, level: &LevelDescription| {
            let d = desc::leaf(pa, level, attrs, owner);
            if written == Written::Valid {
                d
            } else {
                desc::pending(d)
            }
        };
        write_leaves(mem, &mut pool, levels, self.root, 0, a, b, fit, &leaf);
        tlb.publish();
        pool.release(mem);
        Ok(())
    }

    /// Unmaps whatever is mapped in `range` (splitting blocks it covers only partly) and
    /// frees the tables that become empty. Unmapping exactly what one `map_range` mapped
    /// needs no frame and cannot fail.
    pub fn unmap_range(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
    ) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        self.modify(mem, tlb, range, Change::Unmap)
    }

    /// Changes the permissions of whatever is mapped in `range`, splitting the blocks it
    /// covers only partly (unless they have those permissions already). Unmapped parts stay
    /// unmapped. Execute permission on device memory is refused, and then nothing changed.
    pub fn protect_range(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        permissions: Permissions,
    ) -> Result<(), Stage2Error> {
        self.check_range(range)?;
        if permissions.execute {
            let device = self.visit(mem, range.start().0, range.end(), &mut |l| {
                if l.attrs.memory == MemoryType::DeviceNGnRE {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            if device.is_break() {
                return Err(Stage2Error::InvalidPermissions);
            }
        }
        self.modify(mem, tlb, range, Change::Protect(permissions))
    }

    fn modify(
        &mut self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        range: IpaRange,
        change: Change,
    ) -> Result<(), Stage2Error> {
        let (a, b) = (range.start().0, range.end());
        let levels = self.geometry.levels();
        // Prepare.
        let mut pool = FramePool::allocate(mem, splits_needed(mem, levels, self.root, 0, a, b, change))?;
        // Commit.
        self.modify_walk(mem, tlb, &mut pool, levels, self.root, 0, a, b, change);
        tlb.publish();
        pool.release(mem);
        Ok(())
    }

    /// Replaces the valid descriptor of `entry` by `new` (0: none): break, invalidate, make.
    fn replace(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        table: PhysAddr,
        entry: &Entry,
        new: u64,
    ) {
        write(mem, table, entry.index, 0);
        tlb.invalidate_ipa(self.vmid, Ipa(entry.start));
        if new != 0 {
            write(mem, table, entry.index, new);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn modify_walk(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        pool: &mut FramePool,
        levels: &[LevelDescription],
        table: PhysAddr,
        base: u64,
        a: u64,
        b: u64,
        change: Change,
    ) {
        let Some((level, below)) = levels.split_first() else { return };
        for e in entries(level, base, a, b) {
            let d = read(mem, table, e.index);
            let is_table = is_table(d, level);
            if !desc::is_present(d) || (!is_table && change.apply(d) == d) {
                continue;
            }
            if is_table || !(e.covered() || level.is_last()) {
                let next = if is_table {
                    desc::output_address(d)
                } else {
                    let (Some(child), Some(frame)) = (below.first(), pool.take(mem)) else { continue };
                    self.split(mem, tlb, table, &e, d, child, frame);
                    frame
                };
                self.modify_walk(mem, tlb, pool, below, next, e.start, e.a, e.b, change);
                if is_empty(mem, next) {
                    self.replace(mem, tlb, table, &e, 0);
                    mem.free_frames(next, 1);
                }
                continue;
            }
            if desc::is_pending(d) {
                // Never valid, so in no TLB: nothing to break or invalidate.
                write(mem, table, e.index, change.apply(d));
                continue;
            }
            self.replace(mem, tlb, table, &e, change.apply(d));
        }
    }

    /// Replaces the block `d` of `entry` by `frame`, filled as a table of `child` entries
    /// mapping the same. The frame is written before the break, so the DSB of the TLB
    /// invalidation makes it visible before the table descriptor is.
    #[allow(clippy::too_many_arguments)]
    fn split(
        &self,
        mem: &mut impl TableMemory,
        tlb: &mut impl TlbMaintenance,
        table: PhysAddr,
        entry: &Entry,
        d: u64,
        child: &LevelDescription,
        frame: PhysAddr,
    ) {
        let oa = desc::output_address(d).0;
        for k in 0..ENTRIES_PER_TABLE {
            mem.write_descriptor(frame, k, desc::leaf_at_level(d, PhysAddr(oa + k as u64 * child.span()), child));
        }
        self.replace(mem, tlb, table, entry, desc::table(frame));
    }

    /// The first mapped IPA in `[a, b)`.
    fn first_mapped(&self, mem: &impl TableMemory, a: u64, b: u64) -> Option<u64> {
        let mut found = None;
        let _ = self.visit(mem, a, b, &mut |l| {
            found = Some(l.ipa.0.max(a));
            ControlFlow::Break(())
        });
        found
    }

    /// Hands every leaf overlapping `[a, b)` to `f`, in IPA order, until `f` breaks.
    fn visit(
        &self,
        mem: &impl TableMemory,
        a: u64,
        b: u64,
        f: &mut impl FnMut(Leaf) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        visit_leaves(mem, self.geometry.levels(), self.root, 0, a, b, f)
    }

    /// The software walk: what the hardware would translate `ipa` to, if anything.
    pub fn translate(&self, mem: &impl TableMemory, ipa: Ipa) -> Option<Translation> {
        if ipa.0 >= self.geometry.ipa_limit() {
            return None;
        }
        let (mut table, mut base) = (self.root, 0);
        for level in self.geometry.levels() {
            let d = read(mem, table, ((ipa.0 - base) >> level.shift) as usize);
            if !desc::is_valid(d) {
                return None;
            }
            if is_table(d, level) {
                table = desc::output_address(d);
                base = ipa.0 & !(level.span() - 1);
                continue;
            }
            return Some(Translation {
                pa: PhysAddr(desc::output_address(d).0 + (ipa.0 & (level.span() - 1))),
                attrs: desc::attributes(d),
                owner: desc::owner(d),
                level: level.level,
                block_size: level.span(),
            });
        }
        None
    }

    /// Every leaf, valid or pending, in IPA order.
    pub fn for_each_leaf(&self, mem: &impl TableMemory, mut f: impl FnMut(Leaf)) {
        let _ = self.visit(mem, 0, self.geometry.ipa_limit(), &mut |l| {
            f(l);
            ControlFlow::Continue(())
        });
    }

    /// Frames the tables use, root included.
    pub fn table_frame_count(&self, mem: &impl TableMemory) -> usize {
        self.geometry.root_tables
            + count_subtables(mem, self.geometry.levels(), self.root, 0, 0, self.geometry.ipa_limit())
    }

    /// Frees every table frame. The VM must not run on these tables any more, and its VMID's
    /// TLB entries must be invalidated before the VMID is reused.
    pub fn destroy(self, mem: &mut impl TableMemory) {
        free_subtables(mem, self.geometry.levels(), self.root, 0, 0, self.geometry.ipa_limit());
        mem.free_frames(self.root, self.geometry.root_tables);
    }
}

/// How a map lays its leaves: the PA of IPA x is x + `delta` (mod 2^64), and no leaf spans
/// more than `max_span`.
#[derive(Clone, Copy)]
struct Fit {
    delta: u64,
    max_span: u64,
}

impl Fit {
    fn leaf_fits(&self, level: &LevelDescription, e: &Entry) -> bool {
        level.span() <= self.max_span && level.can_map(e.a, e.b, e.start, e.a.wrapping_add(self.delta))
    }
}

/// Table frames a map of `[a, b)` needs below `table` (None: a table that does not exist
/// yet). Where a table exists the map goes through it, so a block is only ever written into
/// an invalid entry.
fn tables_needed(
    mem: &impl TableMemory,
    levels: &[LevelDescription],
    table: Option<PhysAddr>,
    base: u64,
    a: u64,
    b: u64,
    fit: Fit,
) -> usize {
    let Some((level, below)) = levels.split_first() else { return 0 };
    let mut n = 0;
    for e in entries(level, base, a, b) {
        let d = table.map_or(0, |t| read(mem, t, e.index));
        if is_table(d, level) {
            n += tables_needed(mem, below, Some(desc::output_address(d)), e.start, e.a, e.b, fit);
        } else if !fit.leaf_fits(level, &e) {
            n += 1 + tables_needed(mem, below, None, e.start, e.a, e.b, fit);
        }
    }
    n
}

/// The commit of a map: writes the leaves, taking new tables from `pool` (filled before
/// they are linked, though an invalid-to-valid change needs no ordering).
#[allow(clippy::too_many_arguments)]
fn write_leaves(
    mem: &mut impl TableMemory,
    pool: &mut FramePool,
    levels: &[LevelDescription],
    table: PhysAddr,
    base: u64,
    a: u64,
    b: u64,
    fit: Fit,
    leaf: &impl Fn(PhysAddr, &LevelDescription) -> u64,
) {
    let Some((level, below)) = levels.split_first() else { return };
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            write_leaves(mem, pool, below, desc::output_address(d), e.start, e.a, e.b, fit, leaf);
        } else if fit.leaf_fits(level, &e) {
            write(mem, table, e.index, leaf(PhysAddr(e.a.wrapping_add(fit.delta)), level));
        } else if let Some(frame) = pool.take(mem) {
            write_leaves(mem, pool, below, frame, e.start, e.a, e.b, fit, leaf);
            write(mem, table, e.index, desc::table(frame));
        }
    }
}

/// A leaf a walk found: where its descriptor is, and what it maps.
struct LeafSlot {
    table: PhysAddr,
    index: usize,
    d: u64,
    ipa: u64,
    size: u64,
}

/// Hands every leaf (valid or not) overlapping `[a, b)` to `f`, which may rewrite it in
/// place (never into a table or an empty entry: the walk neither allocates nor frees);
/// the sum of what `f` returns. The commit of `activate_range`, `show_range`, `hide_range`.
fn rewrite_leaves<M: TableMemory>(
    mem: &mut M,
    levels: &[LevelDescription],
    table: PhysAddr,
    base: u64,
    a: u64,
    b: u64,
    f: &mut impl FnMut(&mut M, LeafSlot) -> u64,
) -> u64 {
    let Some((level, below)) = levels.split_first() else { return 0 };
    let mut sum = 0;
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            sum += rewrite_leaves(mem, below, desc::output_address(d), e.start, e.a, e.b, f);
        } else if desc::is_present(d) {
            sum += f(mem, LeafSlot { table, index: e.index, d, ipa: e.start, size: level.span() });
        }
    }
    sum
}

/// Blocks an unmap or protect of `[a, b)` must split, counting the splits of the new
/// tables' own entries (those are blocks aligned like their parent, so a new table's needs
/// are those of mapping the same part afresh).
fn splits_needed(
    mem: &impl TableMemory,
    levels: &[LevelDescription],
    table: PhysAddr,
    base: u64,
    a: u64,
    b: u64,
    change: Change,
) -> usize {
    let Some((level, below)) = levels.split_first() else { return 0 };
    let mut n = 0;
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            n += splits_needed(mem, below, desc::output_address(d), e.start, e.a, e.b, change);
        } else if desc::is_present(d) && !e.covered() && !level.is_last() && change.apply(d) != d {
            let delta = desc::output_address(d).0.wrapping_sub(e.start);
            n += 1 + tables_needed(mem, below, None, e.start, e.a, e.b, Fit { delta, max_span: u64::MAX });
        }
    }
    n
}

fn visit_leaves(
    mem: &impl TableMemory,
    levels: &[LevelDescription],
    table: PhysAddr,
    base: u64,
    a: u64,
    b: u64,
    f: &mut impl FnMut(Leaf) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Some((level, below)) = levels.split_first() else { return ControlFlow::Continue(()) };
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            visit_leaves(mem, below, desc::output_address(d), e.start, e.a, e.b, f)?;
        } else if desc::is_present(d) {
            f(Leaf {
                ipa: Ipa(e.start),
                pa: desc::output_address(d),
                size: level.span(),
                level: level.level,
                attrs: desc::attributes(d),
                owner: desc::owner(d),
                pending: desc::is_pending(d),
            })?;
        }
    }
    ControlFlow::Continue(())
}

fn count_subtables(
    mem: &impl TableMemory,
    levels: &[LevelDescription],
    table: PhysAddr,
    base: u64,
    a: u64,
    b: u64,
) -> usize {
    let Some((level, below)) = levels.split_first() else { return 0 };
    let mut n = 0;
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            n += 1 + count_subtables(mem, below, desc::output_address(d), e.start, e.start, e.end);
        }
    }
    n
}

/// Frees the tables below `table`, children before parents.
fn free_subtables(mem: &mut impl TableMemory, levels: &[LevelDescription], table: PhysAddr, base: u64, a: u64, b: u64) {
    let Some((level, below)) = levels.split_first() else { return };
    for e in entries(level, base, a, b) {
        let d = read(mem, table, e.index);
        if is_table(d, level) {
            let next = desc::output_address(d);
            free_subtables(mem, below, next, e.start, e.start, e.end);
            mem.free_frames(next, 1);
        }
    }
}
