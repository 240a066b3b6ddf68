//! Prepare, then commit: the frame allocator running out at every possible point of a change
//! leaves the tables exactly as they were, with no frame leaked.

use super::*;

/// Runs `op` with every budget below what it needs: each failure must be a clean
/// `OutOfFrames` that wrote nothing into the existing tables, invalidated nothing, left the
/// table memory identical and leaked no frame. Returns how many budgets failed, which is
/// the number of frames the change needs.
fn exhaust(setup: impl Fn() -> Fixture, op: impl Fn(&mut Fixture) -> Result<(), Stage2Error>) -> usize {
    for extra in 0..64 {
        let mut f = setup();
        let (before, in_use, events) = (f.mem.snapshot(), f.mem.frames_in_use(), f.tlb.events().len());
        f.mem.set_budget(in_use + extra);
        match op(&mut f) {
            Err(Stage2Error::OutOfFrames) => {
                assert_eq!(f.mem.snapshot(), before, "with {extra} spare frames the failed change left tables behind");
                assert_eq!(f.mem.frames_in_use(), in_use, "with {extra} spare frames a frame leaked");
                for e in &f.tlb.events()[events..] {
                    let touched_table = matches!(e, Event::Write { frame, .. } if before.contains_key(&frame.0));
                    assert!(!touched_table, "with {extra} spare frames the failed change wrote {e:?}");
                    assert!(!matches!(e, Event::InvalidateIpa { .. }), "with {extra} spare frames: {e:?}");
                }
            }
            Ok(()) => return extra,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    panic!("the change never succeeds");
}

#[test]
fn running_out_of_frames_at_any_point_of_a_map_changes_nothing() {
    // Pages at both ends, a 2 MiB block and a 1 GiB block between: two level-2 and two
    // level-3 tables.
    let needed =
        exhaust(|| fixture(v8_40(), 64), |f| f.map(GIB - 3 * KIB4, GIB + 6 * KIB4 + MIB2, 5 * GIB - 3 * KIB4, RAM));
    assert_eq!(needed, 4);
    // Into tables that exist already: only the last page needs a new level-3 table.
    let existing = || {
        let mut f = fixture(v8_40(), 64);
        f.map(GIB, KIB4, 0, RAM).unwrap();
        f
    };
    assert_eq!(exhaust(existing, |f| f.map(GIB + KIB4, 4 * MIB2, MIB2 + KIB4, RAM)), 1);
    // Pages only: a level-2 table and 3 level-3 tables, in a 48-bit space also a level-1 one.
    let format48 = TableFormat::Vmsav8_64 { ipa_bits: 48, pa_bits: 48 };
    assert_eq!(exhaust(|| fixture(format48, 64), |f| f.map(GIB + MIB2 - KIB4, MIB2 + 2 * KIB4, KIB4, RAM)), 5);
    assert_eq!(exhaust(|| fixture(TableFormat::ArmV7Lpae, 64), |f| f.map(0, 3 * MIB2, KIB4, DEVICE)), 4);
}

#[test]
fn running_out_of_frames_while_splitting_changes_nothing() {
    let mapped = || {
        let mut f = fixture(v8_40(), 64);
        f.map(GIB, 2 * GIB, 4 * GIB, RAM).unwrap();
        f
    };
    // Two 1 GiB blocks split, and in each a 2 MiB block.
    assert_eq!(exhaust(mapped, |f| f.unmap(GIB + MIB2 + KIB4, GIB)), 4);
    assert_eq!(exhaust(mapped, |f| f.protect(GIB + 3 * KIB4, KIB4, Permissions::RO)), 2);
    assert_eq!(exhaust(mapped, |f| f.protect(2 * GIB - MIB2, 2 * MIB2, Permissions::RO)), 2);
    // A whole block needs no split at all.
    assert_eq!(exhaust(mapped, |f| f.unmap(GIB, GIB)), 0);
}

#[test]
fn running_out_of_frames_for_the_root_is_an_error() {
    let mut mem = crate::testing::VecTableMemory::with_capacity(1);
    assert_eq!(Stage2Table::new(v8_40(), 1, &mut mem).err(), Some(Stage2Error::OutOfFrames));
    assert_eq!(mem.frames_in_use(), 0);
}
