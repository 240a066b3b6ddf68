//! Host tests of the tables the walker builds, read back as the hardware would see them.

use proptest::prelude::*;

use crate::testing::{Event, RecordingTlb, VecTableMemory};
use crate::*;

const KIB4: u64 = 4 << 10;
const MIB2: u64 = 2 << 20;
const GIB: u64 = 1 << 30;
const RAM: MappingAttributes = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RWX };
const DEVICE: MappingAttributes = MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RW };

fn v8_40() -> TableFormat {
    TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 44 }
}

struct Fixture {
    mem: VecTableMemory,
    tlb: RecordingTlb,
    table: Stage2Table,
}

fn fixture(format: TableFormat, frames: usize) -> Fixture {
    let mut mem = VecTableMemory::with_capacity(frames);
    let tlb = RecordingTlb::sharing(&mem);
    let table = Stage2Table::new(format, 1, &mut mem).unwrap();
    Fixture { mem, tlb, table }
}

fn range(start: u64, size: u64) -> IpaRange {
    IpaRange::new(Ipa(start), size).unwrap()
}

impl Fixture {
    fn map(&mut self, ipa: u64, size: u64, pa: u64, attrs: MappingAttributes) -> Result<(), Stage2Error> {
        self.table.map_range(&mut self.mem, &mut self.tlb, range(ipa, size), PhysAddr(pa), attrs, OwnershipState::Owned)
    }
    fn unmap(&mut self, ipa: u64, size: u64) -> Result<(), Stage2Error> {
        self.table.unmap_range(&mut self.mem, &mut self.tlb, range(ipa, size))
    }
    fn protect(&mut self, ipa: u64, size: u64, p: Permissions) -> Result<(), Stage2Error> {
        self.table.protect_range(&mut self.mem, &mut self.tlb, range(ipa, size), p)
    }
    fn at(&self, ipa: u64) -> Option<Translation> {
        self.table.translate(&self.mem, Ipa(ipa))
    }
    fn leaves(&self) -> Vec<Leaf> {
        let mut v = Vec::new();
        self.table.for_each_leaf(&self.mem, |l| v.push(l));
        v
    }
    fn frames(&self) -> usize {
        self.table.table_frame_count(&self.mem)
    }
}

#[test]
fn an_aligned_gigabyte_is_one_level_1_block() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 2 * GIB, RAM).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 1);
    assert_eq!((leaves[0].level, leaves[0].size, leaves[0].pa), (1, GIB, PhysAddr(2 * GIB)));
    assert_eq!(f.frames(), 2, "the two concatenated root tables only");
}

#[test]
fn a_gigabyte_from_a_2_mib_aligned_pa_is_512_level_2_blocks() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 2 * GIB + MIB2, RAM).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 512);
    assert!(leaves.iter().all(|l| l.level == 2 && l.size == MIB2));
    assert_eq!(f.frames(), 3);
    assert_eq!(f.at(GIB + 5 * MIB2 + 0x123).unwrap().pa, PhysAddr(2 * GIB + 6 * MIB2 + 0x123));
}

/// The figure for the issue: a 1 GiB guest at IPA 0x4000_0000 in a 40-bit IPA space.
#[test]
fn a_1_gib_guest_takes_2_or_3_table_frames() {
    let mut aligned = fixture(v8_40(), 64);
    aligned.map(0x4000_0000, GIB, 0x1_0000_0000, RAM).unwrap();
    assert_eq!(aligned.frames(), 2);
    let mut two_mib = fixture(v8_40(), 64);
    two_mib.map(0x4000_0000, GIB, 0x1_0020_0000, RAM).unwrap();
    assert_eq!(two_mib.frames(), 3);
}

#[test]
fn a_pa_aligned_only_to_4_kib_gets_pages() {
    let mut f = fixture(v8_40(), 64);
    f.map(MIB2, MIB2, 0x8000_1000, RAM).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 512);
    assert!(leaves.iter().all(|l| l.level == 3 && l.size == KIB4));
    assert_eq!(f.at(MIB2 + 0x2345).unwrap().pa, PhysAddr(0x8000_3345));
}

#[test]
fn an_unaligned_range_uses_blocks_in_the_middle_and_pages_at_the_ends() {
    let mut f = fixture(v8_40(), 64);
    f.map(MIB2 - KIB4, 2 * MIB2 + 2 * KIB4, 0x8000_0000 + MIB2 - KIB4, RAM).unwrap();
    let levels: Vec<u8> = f.leaves().iter().map(|l| l.level).collect();
    assert_eq!(levels.iter().filter(|l| **l == 2).count(), 2);
    assert_eq!(levels.iter().filter(|l| **l == 3).count(), 2);
}

#[test]
fn unmapping_the_middle_of_a_block_keeps_the_rest() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    f.unmap(GIB + 100 * MIB2 + 3 * KIB4, KIB4).unwrap();
    assert_eq!(f.at(GIB + 100 * MIB2 + 3 * KIB4), None);
    for ipa in [GIB, GIB + 100 * MIB2 + 2 * KIB4, GIB + 100 * MIB2 + 4 * KIB4, 2 * GIB - KIB4] {
        let t = f.at(ipa).unwrap();
        assert_eq!(t.pa, PhysAddr(ipa - GIB + 3 * GIB), "IPA {ipa:#x}");
        assert_eq!(t.attrs, RAM);
    }
    assert_eq!(f.at(GIB + 100 * MIB2).unwrap().level, 3);
    assert_eq!(f.at(GIB + 101 * MIB2).unwrap().level, 2, "only the touched 2 MiB block became pages");
    assert_eq!(f.frames(), 2 + 2, "one level-2 and one level-3 table");
    f.unmap(GIB, GIB).unwrap();
    assert_eq!(f.frames(), 2, "empty tables are freed");
    assert_eq!(f.mem.frames_in_use(), 2, "no frame leaked");
}

#[test]
fn protect_changes_only_the_range() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    f.protect(GIB + MIB2, KIB4, Permissions::RO).unwrap();
    assert_eq!(f.at(GIB + MIB2).unwrap().attrs.permissions, Permissions::RO);
    assert_eq!(f.at(GIB + MIB2 + KIB4).unwrap().attrs.permissions, Permissions::RWX);
    assert_eq!(f.at(GIB).unwrap().attrs.permissions, Permissions::RWX);
    assert_eq!(f.at(GIB + MIB2).unwrap().pa, PhysAddr(3 * GIB + MIB2));
}

#[test]
fn attributes_and_permissions_follow_the_memory_type() {
    let mut f = fixture(v8_40(), 64);
    f.map(0x0900_0000, KIB4, 0x0900_0000, DEVICE).unwrap();
    let t = f.at(0x0900_0010).unwrap();
    assert_eq!(t.attrs.memory, MemoryType::DeviceNGnRE);
    assert!(!t.attrs.permissions.execute, "device memory is never executable");
    assert_eq!(f.map(0x0a00_0000, KIB4, 0x0a00_0000, MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RWX }), Err(Stage2Error::InvalidPermissions));
    assert_eq!(f.protect(0x0900_0000, KIB4, Permissions::RWX), Err(Stage2Error::InvalidPermissions));
}

#[test]
fn ipa_limits_follow_the_format() {
    for (ipa_bits, pa_bits) in [(32, 32), (36, 36), (40, 40), (42, 42), (44, 44), (48, 48)] {
        let mut f = fixture(TableFormat::Vmsav8_64 { ipa_bits, pa_bits }, 64);
        let top = 1u64 << ipa_bits;
        f.map(top - KIB4, KIB4, 0, RAM).unwrap();
        assert_eq!(f.at(top - 1).unwrap().pa, PhysAddr(KIB4 - 1), "{ipa_bits} bits");
        assert_eq!(f.at(top), None);
        assert_eq!(f.map(top - KIB4, 2 * KIB4, 0x10_0000, RAM), Err(Stage2Error::BeyondIpaSize { end: top + KIB4, ipa_bits }));
        assert_eq!(f.map(0, KIB4, (1u64 << pa_bits) - KIB4 + KIB4, RAM), Err(Stage2Error::BeyondPaSize { end: (1u64 << pa_bits) + KIB4, pa_bits }));
    }
}

#[test]
fn impossible_arguments_are_typed_errors() {
    let mut f = fixture(v8_40(), 64);
    assert_eq!(f.map(0x1001, KIB4, 0, RAM), Err(Stage2Error::Unaligned { what: "IPA", value: 0x1001 }));
    assert_eq!(f.map(0x1000, 100, 0, RAM), Err(Stage2Error::Unaligned { what: "size", value: 100 }));
    assert_eq!(f.map(0x1000, KIB4, 0x10, RAM), Err(Stage2Error::Unaligned { what: "physical address", value: 0x10 }));
    assert_eq!(f.unmap(0x1000, 3), Err(Stage2Error::Unaligned { what: "size", value: 3 }));
    assert_eq!(f.map(0, KIB4, u64::MAX - 0xfff, RAM), Err(Stage2Error::Overflow { start: u64::MAX - 0xfff, size: KIB4 }));
    assert!(f.leaves().is_empty());
}

#[test]
fn overlapping_maps_are_refused_and_change_nothing() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, MIB2, 0, RAM).unwrap();
    let before = f.mem.snapshot();
    assert_eq!(f.map(GIB + MIB2 - KIB4, MIB2, 0x100_0000, RAM), Err(Stage2Error::AlreadyMapped { ipa: GIB + MIB2 - KIB4 }));
    assert_eq!(f.map(0, 2 * GIB, 0, RAM), Err(Stage2Error::AlreadyMapped { ipa: GIB }));
    assert_eq!(f.mem.snapshot(), before);
}

/// Runs `op` with every budget below what it needs: each failure must leave the tables
/// exactly as they were, with no frame leaked; the first budget that suffices succeeds.
fn exhaust(setup: impl Fn() -> Fixture, op: impl Fn(&mut Fixture) -> Result<(), Stage2Error>) {
    let mut extra = 0;
    loop {
        let mut f = setup();
        let (before, in_use) = (f.mem.snapshot(), f.mem.frames_in_use());
        f.mem.set_budget(in_use + extra);
        match op(&mut f) {
            Err(Stage2Error::OutOfFrames) => {
                assert_eq!(f.mem.snapshot(), before, "with {extra} spare frames the failed change left tables behind");
                assert_eq!(f.mem.frames_in_use(), in_use, "with {extra} spare frames a frame leaked");
            }
            Ok(()) => return,
            Err(e) => panic!("unexpected {e:?}"),
        }
        extra += 1;
        assert!(extra < 64, "the change never succeeds");
    }
}

#[test]
fn running_out_of_frames_at_any_point_of_a_map_changes_nothing() {
    // Pages at both ends and blocks between: several new tables at several levels.
    exhaust(
        || fixture(v8_40(), 64),
        |f| f.map(GIB - 3 * KIB4, GIB + 6 * KIB4 + MIB2, 5 * GIB - 3 * KIB4, RAM),
    );
    exhaust(
        || {
            let mut f = fixture(v8_40(), 64);
            f.map(GIB, KIB4, 0, RAM).unwrap();
            f
        },
        |f| f.map(GIB + KIB4, 4 * MIB2, MIB2 + KIB4, RAM),
    );
}

#[test]
fn running_out_of_frames_while_splitting_changes_nothing() {
    let mapped = || {
        let mut f = fixture(v8_40(), 64);
        f.map(GIB, 2 * GIB, 4 * GIB, RAM).unwrap();
        f
    };
    exhaust(mapped, |f| f.unmap(GIB + MIB2 + KIB4, GIB));
    exhaust(mapped, |f| f.protect(GIB + 3 * KIB4, KIB4, Permissions::RO));
}

/// Break-before-make: no write replaces a valid descriptor by another valid one, unless
/// only the permissions change (which ARM ARM D8.14.1 allows in place).
fn assert_break_before_make(events: &[Event]) {
    const PERMISSIONS: u64 = (0b11 << 6) | (0b11 << 53);
    for (n, e) in events.iter().enumerate() {
        if let Event::Write { old, new, .. } = *e {
            if old & 1 != 0 && new & 1 != 0 {
                assert_eq!(old & !PERMISSIONS, new & !PERMISSIONS, "event {n}: valid {old:#x} replaced by valid {new:#x}");
            }
            if old & 1 != 0 && new & 1 == 0 {
                assert!(
                    matches!(events.get(n + 1), Some(Event::InvalidateIpa { .. })),
                    "event {n}: a descriptor was invalidated without a TLB invalidation after it"
                );
            }
        }
    }
}

#[test]
fn splitting_a_block_is_break_before_make() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 4 * GIB, RAM).unwrap();
    f.unmap(GIB + KIB4, KIB4).unwrap();
    let events = f.tlb.events();
    assert_break_before_make(&events);
    // The level-1 block: invalid, invalidate, table.
    let block = events.iter().position(|e| matches!(e, Event::Write { old, new: 0, .. } if old & 3 == 1)).unwrap();
    assert!(matches!(events[block + 1], Event::InvalidateIpa { vmid: 1, ipa: Ipa(GIB) }));
    assert!(matches!(events[block + 2], Event::Write { old: 0, new, .. } if new & 3 == 3));
}

#[test]
fn armv7_lpae_maps_and_translates() {
    let mut f = fixture(TableFormat::ArmV7Lpae, 64);
    f.map(GIB, GIB, 2 * GIB, RAM).unwrap();
    f.map(0xff_ffff_f000, KIB4, 0x1000, DEVICE).unwrap();
    assert_eq!(f.at(GIB + 0x1234).unwrap().pa, PhysAddr(2 * GIB + 0x1234));
    assert_eq!(f.at(0xff_ffff_f008).unwrap().attrs.memory, MemoryType::DeviceNGnRE);
    assert_eq!(f.map(1 << 40, KIB4, 0, RAM), Err(Stage2Error::BeyondIpaSize { end: (1 << 40) + KIB4, ipa_bits: 40 }));
    assert_eq!(f.table.vttbr() >> 48, 1);
}

#[test]
fn destroy_frees_every_frame() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB - KIB4, GIB, 0x8000_0000 - KIB4, RAM).unwrap();
    f.map(0x0900_0000, KIB4, 0x0900_0000, DEVICE).unwrap();
    let Fixture { mut mem, table, .. } = f;
    table.destroy(&mut mem);
    assert_eq!(mem.frames_in_use(), 0);
}

/// The abstract model: disjoint mapped intervals `[start, end)` → (PA of start, attributes).
#[derive(Clone, Debug, Default)]
struct Model(Vec<(u64, u64, u64, MappingAttributes)>);

impl Model {
    fn overlaps(&self, a: u64, b: u64) -> bool {
        self.0.iter().any(|(s, e, ..)| *s < b && a < *e)
    }
    /// Cuts every interval at `a` and `b`.
    fn cut(&mut self, a: u64, b: u64) {
        let mut out = Vec::new();
        for &(s, e, pa, attrs) in &self.0 {
            let mut points = vec![s];
            points.extend([a, b].iter().copied().filter(|p| s < *p && *p < e));
            points.push(e);
            for w in points.windows(2) {
                out.push((w[0], w[1], pa + (w[0] - s), attrs));
            }
        }
        self.0 = out;
    }
    fn unmap(&mut self, a: u64, b: u64) {
        self.cut(a, b);
        self.0.retain(|(s, e, ..)| !(a <= *s && *e <= b));
    }
    fn protect(&mut self, a: u64, b: u64, p: Permissions) {
        self.cut(a, b);
        for i in self.0.iter_mut().filter(|i| a <= i.0 && i.1 <= b) {
            i.3.permissions = p;
        }
    }
    /// Maximal runs: adjacent intervals with contiguous PAs and equal attributes merged.
    fn runs(mut v: Vec<(u64, u64, u64, MappingAttributes)>) -> Vec<(u64, u64, u64, MappingAttributes)> {
        v.sort_by_key(|i| i.0);
        let mut out: Vec<(u64, u64, u64, MappingAttributes)> = Vec::new();
        for i in v {
            match out.last_mut() {
                Some(last) if last.1 == i.0 && last.2 + (last.1 - last.0) == i.2 && last.3 == i.3 => last.1 = i.1,
                _ => out.push(i),
            }
        }
        out
    }
}

#[derive(Clone, Debug)]
enum Op {
    Map { ipa: u64, size: u64, pa: u64, device: bool },
    Unmap { ipa: u64, size: u64 },
    Protect { ipa: u64, size: u64, write: bool },
}

/// IPAs and sizes in units that hit page, 2 MiB and 1 GiB boundaries in a 4 GiB window.
fn op() -> impl Strategy<Value = Op> {
    let unit = prop_oneof![Just(KIB4), Just(MIB2), Just(GIB / 4)];
    let ipa = (0u64..16, 0u64..3).prop_map(|(g, k)| g * (GIB / 4) + k * (MIB2 - KIB4));
    let size = (unit.clone(), 1u64..5).prop_map(|(u, n)| u * n);
    // PAs congruent with their IPA modulo 1 GiB (blocks wherever the IPA allows), or off by
    // 2 MiB (level-2 blocks, never level 1).
    let pa_base = (0u64..8, 0u64..2).prop_map(|(g, k)| 4 * GIB + g * GIB + k * MIB2);
    prop_oneof![
        (ipa.clone(), size.clone(), pa_base, any::<bool>())
            .prop_map(|(ipa, size, pa, device)| Op::Map { ipa, size, pa: pa + (ipa & (GIB - 1)), device }),
        (ipa.clone(), size.clone()).prop_map(|(ipa, size)| Op::Unmap { ipa, size }),
        (ipa, size, any::<bool>()).prop_map(|(ipa, size, write)| Op::Protect { ipa, size, write }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// After every operation the real tables map exactly what the model says, no frame is
    /// leaked, and every change was break-before-make.
    #[test]
    fn tables_refine_the_interval_model(ops in prop::collection::vec(op(), 1..12)) {
        let mut f = fixture(v8_40(), 4096);
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Map { ipa, size, pa, device } => {
                    let mut attrs = if device { DEVICE } else { RAM };
                    attrs.permissions.execute = !device;
                    let result = f.map(ipa, size, pa, attrs);
                    if model.overlaps(ipa, ipa + size) {
                        let refused = matches!(result, Err(Stage2Error::AlreadyMapped { .. }));
                        prop_assert!(refused, "an overlapping map must be refused");
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.0.push((ipa, ipa + size, pa, attrs));
                    }
                }
                Op::Unmap { ipa, size } => {
                    prop_assert_eq!(f.unmap(ipa, size), Ok(()));
                    model.unmap(ipa, ipa + size);
                }
                Op::Protect { ipa, size, write } => {
                    let p = Permissions { read: true, write, execute: false };
                    prop_assert_eq!(f.protect(ipa, size, p), Ok(()));
                    model.protect(ipa, ipa + size, p);
                }
            }
            let real = Model::runs(f.leaves().iter().map(|l| (l.ipa.0, l.ipa.0 + l.size, l.pa.0, l.attrs)).collect());
            prop_assert_eq!(real, Model::runs(model.0.clone()));
            prop_assert_eq!(f.mem.frames_in_use(), f.frames());
        }
        assert_break_before_make(&f.tlb.events());
        f.unmap(0, 1 << 40).unwrap();
        prop_assert_eq!(f.frames(), 2);
        prop_assert_eq!(f.mem.frames_in_use(), 2);
    }
}
