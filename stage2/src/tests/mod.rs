//! Host tests of the tables the walker builds, read back as the hardware would see them
//! (in the spirit of Hafnium's `mm_test.cc`): each file one concern.

mod blocks;
mod changes;
mod exhaustion;
mod first_touch;
mod limits;
mod model;
mod shadow;

use crate::testing::{Event, RecordingTlb, VecTableMemory};
use crate::*;

pub const KIB4: u64 = 4 << 10;
pub const MIB2: u64 = 2 << 20;
pub const GIB: u64 = 1 << 30;
pub const RAM: MappingAttributes =
    MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RWX };
pub const DEVICE: MappingAttributes =
    MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RW };

pub fn v8_40() -> TableFormat {
    TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 44 }
}

pub struct Fixture {
    pub mem: VecTableMemory,
    pub tlb: RecordingTlb,
    pub table: Stage2Table,
}

pub fn fixture(format: TableFormat, frames: usize) -> Fixture {
    let mut mem = VecTableMemory::with_capacity(frames);
    let tlb = RecordingTlb::sharing(&mem);
    let table = Stage2Table::new(format, 1, &mut mem).unwrap();
    Fixture { mem, tlb, table }
}

pub fn range(start: u64, size: u64) -> IpaRange {
    IpaRange::new(Ipa(start), size).unwrap()
}

impl Fixture {
    pub fn map(&mut self, ipa: u64, size: u64, pa: u64, attrs: MappingAttributes) -> Result<(), Stage2Error> {
        self.map_owned(ipa, size, pa, attrs, OwnershipState::Owned)
    }
    pub fn map_owned(
        &mut self,
        ipa: u64,
        size: u64,
        pa: u64,
        attrs: MappingAttributes,
        owner: OwnershipState,
    ) -> Result<(), Stage2Error> {
        self.table.map_range(&mut self.mem, &mut self.tlb, range(ipa, size), PhysAddr(pa), attrs, owner)
    }
    pub fn unmap(&mut self, ipa: u64, size: u64) -> Result<(), Stage2Error> {
        self.table.unmap_range(&mut self.mem, &mut self.tlb, range(ipa, size))
    }
    pub fn protect(&mut self, ipa: u64, size: u64, p: Permissions) -> Result<(), Stage2Error> {
        self.table.protect_range(&mut self.mem, &mut self.tlb, range(ipa, size), p)
    }
    pub fn at(&self, ipa: u64) -> Option<Translation> {
        self.table.translate(&self.mem, Ipa(ipa))
    }
    pub fn leaves(&self) -> Vec<Leaf> {
        let mut v = Vec::new();
        self.table.for_each_leaf(&self.mem, |l| v.push(l));
        v
    }
    pub fn frames(&self) -> usize {
        self.table.table_frame_count(&self.mem)
    }
    pub fn root_tables(&self) -> usize {
        self.table.geometry().root_tables
    }
}

/// Break-before-make (ARM ARM D8.14.1): no write replaces a valid descriptor by another
/// valid one, and every valid descriptor made invalid is invalidated in the TLB before
/// anything else is written, so any later valid value in that entry comes after it.
pub fn assert_break_before_make(events: &[Event]) {
    for (n, e) in events.iter().enumerate() {
        if let Event::Write { old, new, .. } = *e {
            assert!(old & 1 == 0 || new & 1 == 0, "event {n}: valid {old:#x} replaced by valid {new:#x}");
            if old & 1 != 0 {
                assert!(
                    matches!(events.get(n + 1), Some(Event::InvalidateIpa { .. })),
                    "event {n}: descriptor {old:#x} made invalid without a TLB invalidation after it"
                );
            }
        }
    }
}
