//! Block versus page choice: 1 GiB and 2 MiB blocks wherever IPA and PA alignment allow.

use super::*;

#[test]
fn an_aligned_gigabyte_is_one_level_1_block() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, GIB, 2 * GIB, RAM).unwrap();
    let leaves = f.leaves();
    assert_eq!(leaves.len(), 1);
    assert_eq!((leaves[0].ipa, leaves[0].level, leaves[0].size, leaves[0].pa), (Ipa(GIB), 1, GIB, PhysAddr(2 * GIB)));
    assert_eq!(f.frames(), 2, "the two concatenated root tables only");
    let t = f.at(GIB + 0x1234_5678).unwrap();
    assert_eq!((t.pa, t.level, t.block_size), (PhysAddr(2 * GIB + 0x1234_5678), 1, GIB));
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

/// The figure for the report: a 1 GiB guest at IPA 0x4000_0000 in a 40-bit IPA space takes
/// 2 table frames from a 1 GiB-aligned PA (the concatenated root, one level-1 block) and 3
/// from a PA aligned only to 2 MiB (plus one level-2 table of 512 blocks).
#[test]
fn a_1_gib_guest_takes_2_or_3_table_frames() {
    let mut aligned = fixture(v8_40(), 64);
    aligned.map(0x4000_0000, GIB, 0x1_0000_0000, RAM).unwrap();
    assert_eq!(aligned.frames(), 2);
    assert_eq!(aligned.mem.frames_in_use(), 2);
    let mut two_mib = fixture(v8_40(), 64);
    two_mib.map(0x4000_0000, GIB, 0x1_0020_0000, RAM).unwrap();
    assert_eq!(two_mib.frames(), 3);
    assert_eq!(two_mib.mem.frames_in_use(), 3);
    // And from a PA aligned only to 4 KiB: one level-2 and 512 level-3 tables.
    let mut pages = fixture(v8_40(), 1024);
    pages.map(0x4000_0000, GIB, 0x1_0000_1000, RAM).unwrap();
    assert_eq!(pages.frames(), 2 + 1 + 512);
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
    f.map(GIB - MIB2 - KIB4, GIB + 2 * MIB2 + 2 * KIB4, 0x8000_0000 - MIB2 - KIB4, RAM).unwrap();
    let count = |level| f.leaves().iter().filter(|l| l.level == level).count();
    assert_eq!((count(1), count(2), count(3)), (1, 2, 2));
    // Root, one level-2 table on each side of the 1 GiB block, one level-3 table at each end.
    assert_eq!(f.frames(), 2 + 2 + 2);
    for ipa in [GIB - MIB2 - KIB4, GIB - MIB2, GIB, 2 * GIB, 2 * GIB + MIB2] {
        assert_eq!(f.at(ipa).unwrap().pa, PhysAddr(ipa + 0x8000_0000 - GIB), "IPA {ipa:#x}");
    }
    assert_eq!(f.at(GIB - MIB2 - 2 * KIB4), None);
    assert_eq!(f.at(2 * GIB + MIB2 + KIB4), None);
}

#[test]
fn a_48_bit_space_walks_from_level_0() {
    let mut f = fixture(TableFormat::Vmsav8_64 { ipa_bits: 48, pa_bits: 48 }, 64);
    assert_eq!(f.frames(), 1);
    // Across the boundary of two level-0 entries (512 GiB each).
    let ipa = (1 << 39) - GIB;
    f.map(ipa, 2 * GIB, 0x80_0000_0000, RAM).unwrap();
    assert_eq!(f.leaves().iter().map(|l| l.level).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(f.frames(), 1 + 2, "one level-1 table under each level-0 entry");
    assert_eq!(f.at(ipa + GIB + 8).unwrap().pa, PhysAddr(0x80_4000_0008));
}

#[test]
fn a_32_bit_space_walks_from_level_2_with_4_concatenated_tables() {
    let mut f = fixture(TableFormat::Vmsav8_64 { ipa_bits: 32, pa_bits: 36 }, 64);
    assert_eq!(f.frames(), 4);
    // Level 2 has the only blocks: 2 MiB, in each of the four root frames.
    f.map(GIB - MIB2, 2 * MIB2, 0x1_0000_0000, RAM).unwrap();
    f.map(3 * GIB, MIB2, 0x2_0000_0000, DEVICE).unwrap();
    let leaves = f.leaves();
    assert!(leaves.iter().all(|l| l.level == 2));
    assert_eq!(leaves.iter().map(|l| l.ipa.0).collect::<Vec<_>>(), [GIB - MIB2, GIB, 3 * GIB]);
    assert_eq!(f.frames(), 4);
    assert_eq!(f.at(GIB + 4).unwrap().pa, PhysAddr(0x1_0020_0004));
}

#[test]
fn armv7_lpae_uses_1_gib_and_2_mib_blocks_too() {
    let mut f = fixture(TableFormat::ArmV7Lpae, 64);
    assert_eq!(f.frames(), 2, "two concatenated level-1 tables");
    f.map(GIB, GIB, 2 * GIB, RAM).unwrap();
    f.map(2 * GIB, MIB2, 0x80_0020_0000, RAM).unwrap();
    f.map(0xff_ffff_f000, KIB4, 0x1000, DEVICE).unwrap();
    let levels: Vec<u8> = f.leaves().iter().map(|l| l.level).collect();
    assert_eq!(levels, [1, 2, 3]);
    assert_eq!(f.at(GIB + 0x1234).unwrap().pa, PhysAddr(2 * GIB + 0x1234));
    assert_eq!(f.at(2 * GIB + 0x10).unwrap().pa, PhysAddr(0x80_0020_0010));
    let device = f.at(0xff_ffff_f008).unwrap();
    assert_eq!((device.pa, device.attrs), (PhysAddr(0x1008), DEVICE));
    // The last entry lives in the second concatenated root frame.
    assert_eq!(f.frames(), 2 + 1 + 1 + 1);
}
