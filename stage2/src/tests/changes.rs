//! Unmap and protect: splitting blocks, freeing emptied tables, break-before-make order,
//! and what translate reads back.

use super::*;

#[test]
fn unmapping_the_middle_of_a_block_keeps_the_rest() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    f.unmap(GIB + 100 * MIB2 + 3 * KIB4, KIB4).unwrap();
    assert_eq!(f.at(GIB + 100 * MIB2 + 3 * KIB4), None);
    assert_eq!(f.at(GIB + 100 * MIB2 + 4 * KIB4 - 1), None);
    // Every other page of the gigabyte still translates to the same PA.
    for page in (0..GIB / KIB4).filter(|p| *p != 100 * 512 + 3) {
        let ipa = GIB + page * KIB4 + 0x10;
        let t = f.at(ipa).unwrap();
        assert_eq!((t.pa, t.attrs, t.owner), (PhysAddr(ipa + 2 * GIB), RAM, OwnershipState::Owned), "IPA {ipa:#x}");
    }
    assert_eq!(f.at(GIB + 100 * MIB2).unwrap().level, 3);
    assert_eq!(f.at(GIB + 101 * MIB2).unwrap().level, 2, "only the touched 2 MiB block became pages");
    assert_eq!(f.leaves().len(), 511 + 511);
    assert_eq!(f.frames(), 2 + 2, "one level-2 and one level-3 table");
    f.unmap(GIB, GIB).unwrap();
    assert_eq!(f.frames(), 2, "empty tables are freed");
    assert_eq!(f.mem.frames_in_use(), 2, "no frame leaked");
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn unmapping_2_mib_of_a_gigabyte_block_needs_only_a_level_2_table() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    f.unmap(GIB + 4 * MIB2, MIB2).unwrap();
    assert_eq!(f.frames(), 3);
    assert_eq!(f.leaves().len(), 511);
    assert_eq!(f.at(GIB + 4 * MIB2 + 5), None);
    assert_eq!(f.at(GIB + 5 * MIB2 + 5).unwrap().pa, PhysAddr(3 * GIB + 5 * MIB2 + 5));
}

#[test]
fn protect_of_part_of_a_block_changes_only_that_part() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    f.protect(GIB + MIB2, KIB4, Permissions::RO).unwrap();
    let t = f.at(GIB + MIB2).unwrap();
    assert_eq!((t.pa, t.level, t.attrs.permissions), (PhysAddr(3 * GIB + MIB2), 3, Permissions::RO));
    assert_eq!(f.at(GIB + MIB2 + KIB4).unwrap().attrs.permissions, Permissions::RWX);
    assert_eq!(f.at(GIB + MIB2 - KIB4).unwrap().attrs.permissions, Permissions::RWX);
    assert_eq!(f.at(GIB).unwrap().attrs.permissions, Permissions::RWX);
    assert_eq!(f.frames(), 4);
    // Protecting all of it again: every leaf changes, none is split further.
    f.protect(GIB, GIB, Permissions::RW).unwrap();
    assert!(f.leaves().iter().all(|l| l.attrs.permissions == Permissions::RW));
    assert_eq!(f.leaves().iter().map(|l| l.size).sum::<u64>(), GIB);
    assert_eq!(f.frames(), 4);
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn protect_that_changes_nothing_splits_nothing() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 3 * GIB, RAM).unwrap();
    let before = f.mem.snapshot();
    f.mem.set_budget(f.mem.frames_in_use());
    f.protect(GIB + KIB4, KIB4, Permissions::RWX).unwrap();
    assert_eq!(f.mem.snapshot(), before);
}

#[test]
fn protect_leaves_unmapped_parts_unmapped() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, MIB2, 3 * GIB, RAM).unwrap();
    f.protect(0, 4 * GIB, Permissions::RO).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 1);
    assert_eq!((leaves[0].ipa, leaves[0].attrs.permissions), (Ipa(GIB), Permissions::RO));
}

#[test]
fn permissions_attributes_and_owner_read_back() {
    let mut f = fixture(v8_40(), 64);
    let ro_ram = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RO };
    let wo = Permissions { read: false, write: true, execute: false };
    f.map_owned(0x4000_0000, MIB2, 0x8000_0000, ro_ram, OwnershipState::Shared).unwrap();
    f.map_owned(0x0900_0000, KIB4, 0x0900_0000, DEVICE, OwnershipState::Owned).unwrap();
    f.map_owned(0x5000_0000, KIB4, 0x9000_0000, RAM, OwnershipState::Borrowed).unwrap();
    f.protect(0x5000_0000, KIB4, wo).unwrap();
    let t = f.at(0x4000_1000).unwrap();
    assert_eq!((t.attrs, t.owner, t.level), (ro_ram, OwnershipState::Shared, 2));
    let t = f.at(0x0900_0010).unwrap();
    assert_eq!((t.attrs, t.owner, t.pa), (DEVICE, OwnershipState::Owned, PhysAddr(0x0900_0010)));
    let t = f.at(0x5000_0fff).unwrap();
    assert_eq!(
        (t.attrs.permissions, t.attrs.memory, t.owner),
        (wo, MemoryType::NormalWriteBack, OwnershipState::Borrowed)
    );
}

#[test]
fn device_memory_is_never_executable() {
    let mut f = fixture(v8_40(), 64);
    f.map(0x0900_0000, 2 * KIB4, 0x0900_0000, DEVICE).unwrap();
    let device_rwx = MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RWX };
    let before = f.mem.snapshot();
    assert_eq!(f.map(0x0a00_0000, KIB4, 0x0a00_0000, device_rwx), Err(Stage2Error::InvalidPermissions));
    assert_eq!(f.protect(0x0900_1000, KIB4, Permissions::RWX), Err(Stage2Error::InvalidPermissions));
    assert_eq!(f.mem.snapshot(), before);
    f.protect(0x0900_0000, 2 * KIB4, Permissions::RO).unwrap();
    assert!(!f.at(0x0900_0000).unwrap().attrs.permissions.execute);
}

#[test]
fn unmapping_nothing_changes_nothing() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, MIB2, 3 * GIB, RAM).unwrap();
    let before = f.mem.snapshot();
    f.unmap(2 * GIB, GIB).unwrap();
    f.unmap(GIB + MIB2, MIB2).unwrap();
    assert_eq!(f.mem.snapshot(), before);
}

#[test]
fn unmapping_exactly_what_was_mapped_needs_no_frame() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB - KIB4, GIB + 2 * KIB4, 0x1_0000_0000 - KIB4, RAM).unwrap();
    f.mem.set_budget(f.mem.frames_in_use());
    f.unmap(GIB - KIB4, GIB + 2 * KIB4).unwrap();
    assert_eq!((f.frames(), f.mem.frames_in_use()), (2, 2));
}

#[test]
fn splitting_a_block_is_break_before_make() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 4 * GIB, RAM).unwrap();
    f.unmap(GIB + KIB4, KIB4).unwrap();
    let events = f.tlb.events();
    assert_break_before_make(&events);
    // The level-1 block: made invalid, its IPA invalidated, then the new table written.
    let block = events.iter().position(|e| matches!(e, Event::Write { old, new: 0, .. } if old & 3 == 1)).unwrap();
    assert!(matches!(events[block + 1], Event::InvalidateIpa { vmid: 1, ipa: Ipa(GIB) }));
    assert!(matches!(events[block + 2], Event::Write { old: 0, new, .. } if new & 3 == 3));
    // The new table's entries were all written before it was linked.
    let linked = desc_address(&events[block + 2]);
    assert!(
        events[..block].iter().filter(|e| matches!(e, Event::Write { frame, .. } if frame.0 == linked)).count() >= 512
    );
    assert!(events[block + 3..].iter().any(|e| matches!(e, Event::Publish)));
}

fn desc_address(e: &Event) -> u64 {
    match e {
        Event::Write { new, .. } => new & 0x0000_ffff_ffff_f000,
        _ => 0,
    }
}

#[test]
fn a_permission_change_is_break_before_make_too() {
    let mut f = fixture(TableFormat::ArmV7Lpae, 64);
    f.map(GIB, MIB2, 4 * GIB, RAM).unwrap();
    let start = f.tlb.events().len();
    f.protect(GIB, MIB2, Permissions::RO).unwrap();
    let events = f.tlb.events()[start..].to_vec();
    assert_break_before_make(&events);
    assert!(matches!(
        events[..],
        [
            Event::Write { new: 0, .. },
            Event::InvalidateIpa { vmid: 1, ipa: Ipa(GIB) },
            Event::Write { .. },
            Event::Publish
        ]
    ));
}

#[test]
fn armv7_lpae_splits_and_frees_like_vmsav8() {
    let mut f = fixture(TableFormat::ArmV7Lpae, 64);
    f.map(3 * GIB, GIB, 0x40_0000_0000, RAM).unwrap();
    f.unmap(3 * GIB + MIB2 + KIB4, KIB4).unwrap();
    assert_eq!(f.frames(), 2 + 2);
    assert_eq!(f.at(3 * GIB + MIB2).unwrap().pa, PhysAddr(0x40_0020_0000));
    assert_eq!(f.at(3 * GIB + MIB2 + KIB4), None);
    f.unmap(3 * GIB, GIB).unwrap();
    assert_eq!((f.frames(), f.mem.frames_in_use()), (2, 2));
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn destroy_frees_every_frame() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB - KIB4, GIB, 0x8000_0000 - KIB4, RAM).unwrap();
    f.map(0x0900_0000, KIB4, 0x0900_0000, DEVICE).unwrap();
    assert!(f.mem.frames_in_use() > 2);
    let Fixture { mut mem, table, .. } = f;
    table.destroy(&mut mem);
    assert_eq!(mem.frames_in_use(), 0);
}
