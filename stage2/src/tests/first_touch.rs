//! Pending leaves (RAM zeroed on first touch): mapped whole in 2 MiB leaves at most, invalid
//! to the hardware, made valid one leaf at a time after their memory is given to `zero`,
//! and otherwise treated as mapped.

use super::*;

impl Fixture {
    fn map_pending(&mut self, ipa: u64, size: u64, pa: u64) -> Result<(), Stage2Error> {
        self.table.map_range_pending(
            &mut self.mem,
            &mut self.tlb,
            range(ipa, size),
            PhysAddr(pa),
            RAM,
            OwnershipState::Owned,
        )
    }
    /// Activates `[ipa, ipa + size)`: the blocks `zero` was given, and the bytes made valid.
    fn activate(&mut self, ipa: u64, size: u64) -> (Vec<(PhysAddr, u64)>, u64) {
        let mut zeroed = Vec::new();
        let bytes = self
            .table
            .activate_range(&mut self.mem, &mut self.tlb, range(ipa, size), &mut |pa, len| zeroed.push((pa, len)));
        (zeroed, bytes)
    }
}

#[test]
fn a_pending_gigabyte_is_512_blocks_the_hardware_cannot_reach() {
    let mut f = fixture(v8_40(), 64);
    f.map_pending(GIB, GIB, 3 * GIB).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 512, "2 MiB leaves, never a 1 GiB block: one first touch zeroes 2 MiB");
    assert!(leaves.iter().all(|l| l.pending && l.size == MIB2 && l.attrs == RAM));
    assert_eq!(leaves[7].pa, PhysAddr(3 * GIB + 7 * MIB2));
    assert_eq!(f.at(GIB), None, "a pending leaf translates to nothing: a Translation fault");
    assert_eq!(f.at(GIB + GIB - 1), None);
    let valid: Vec<u64> = f
        .tlb
        .events()
        .iter()
        .filter_map(|e| match *e {
            Event::Write { new, .. } if new & 1 != 0 => Some(new),
            _ => None,
        })
        .collect();
    assert!(valid.len() == 1 && valid[0] & 0b11 == 0b11, "only the level-2 table's descriptor is valid: {valid:x?}");
}

#[test]
fn the_first_touch_zeroes_its_block_and_makes_only_it_valid() {
    let mut f = fixture(v8_40(), 64);
    f.map_pending(GIB, 8 * MIB2, 3 * GIB).unwrap();
    let (zeroed, bytes) = f.activate(GIB + 3 * MIB2 + 0x123 * KIB4, KIB4);
    assert_eq!(zeroed, [(PhysAddr(3 * GIB + 3 * MIB2), MIB2)]);
    assert_eq!(bytes, MIB2);
    let t = f.at(GIB + 3 * MIB2 + 5).unwrap();
    assert_eq!((t.pa, t.level, t.attrs), (PhysAddr(3 * GIB + 3 * MIB2 + 5), 2, RAM));
    assert_eq!(f.at(GIB + 2 * MIB2), None);
    assert_eq!(f.at(GIB + 4 * MIB2), None);
    assert_eq!(f.leaves().iter().filter(|l| !l.pending).count(), 1);
    // Touched again (another vCPU faulted on it meanwhile): nothing is zeroed twice.
    assert_eq!(f.activate(GIB + 3 * MIB2, MIB2), (vec![], 0));
    // A range across two blocks activates both, whole.
    let (zeroed, _) = f.activate(GIB + 5 * MIB2 - KIB4, 2 * KIB4);
    assert_eq!(zeroed, [(PhysAddr(3 * GIB + 4 * MIB2), MIB2), (PhysAddr(3 * GIB + 5 * MIB2), MIB2)]);
    // Invalid to valid needs no TLB invalidation (a faulting entry is in no TLB).
    assert!(!f.tlb.events().iter().any(|e| matches!(e, Event::InvalidateIpa { .. } | Event::InvalidateVmid { .. })));
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn a_pending_range_is_mapped_for_everything_but_the_hardware() {
    let mut f = fixture(v8_40(), 64);
    f.map_pending(GIB, 4 * MIB2, 3 * GIB).unwrap();
    assert_eq!(f.map(GIB + MIB2, MIB2, 5 * GIB, RAM), Err(Stage2Error::AlreadyMapped { ipa: GIB + MIB2 }));
    // Protecting part of a pending block splits it into pending pages.
    f.protect(GIB + KIB4, KIB4, Permissions::RO).unwrap();
    let leaves = f.leaves();
    assert!(leaves.iter().all(|l| l.pending), "{leaves:?}");
    assert_eq!(leaves.iter().map(|l| l.size).sum::<u64>(), 4 * MIB2);
    assert_eq!(leaves[1].attrs.permissions, Permissions::RO);
    // Activating the split block zeroes each of its pages, once.
    let (zeroed, bytes) = f.activate(GIB, MIB2);
    assert_eq!((zeroed.len(), bytes), (512, MIB2));
    assert_eq!(f.at(GIB + KIB4).unwrap().attrs.permissions, Permissions::RO);
    // Unmapping frees every table, pending or valid.
    f.unmap(GIB, 4 * MIB2).unwrap();
    assert!(f.leaves().is_empty());
    assert_eq!(f.mem.frames_in_use(), f.root_tables(), "no frame leaked");
    assert_break_before_make(&f.tlb.events());
}

#[test]
fn only_normal_memory_is_mapped_pending() {
    let mut f = fixture(v8_40(), 64);
    let r = f.table.map_range_pending(
        &mut f.mem,
        &mut f.tlb,
        range(GIB, MIB2),
        PhysAddr(GIB),
        DEVICE,
        OwnershipState::Owned,
    );
    assert_eq!(r, Err(Stage2Error::InvalidPermissions));
    assert!(f.leaves().is_empty());
}

#[test]
fn an_unaligned_pending_range_is_pages_and_activates_whole_blocks_of_them() {
    let mut f = fixture(TableFormat::ArmV7Lpae, 64);
    // The PA is 4 KiB-aligned only: pages, each pending.
    f.map_pending(GIB, MIB2, 3 * GIB + KIB4).unwrap();
    assert_eq!(f.leaves().len(), 512);
    let (zeroed, bytes) = f.activate(GIB, MIB2);
    assert_eq!((zeroed.len(), bytes), (512, MIB2));
    assert_eq!(f.at(GIB + MIB2 - 1).unwrap().pa, PhysAddr(3 * GIB + KIB4 + MIB2 - 1));
}
