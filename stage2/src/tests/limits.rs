//! Impossible arguments: typed errors, nothing changed, nothing panics; the IPA and PA limits
//! of each format; VTTBR.

use super::*;

#[test]
fn ipa_and_pa_limits_follow_the_format() {
    for (ipa_bits, pa_bits) in [(32, 32), (36, 36), (40, 40), (42, 42), (44, 44), (48, 48)] {
        let mut f = fixture(TableFormat::Vmsav8_64 { ipa_bits, pa_bits }, 64);
        let (top, pa_top) = (1u64 << ipa_bits, 1u64 << pa_bits);
        f.map(top - KIB4, KIB4, pa_top - KIB4, RAM).unwrap();
        assert_eq!(f.at(top - 1).unwrap().pa, PhysAddr(pa_top - 1), "{ipa_bits} bits");
        assert_eq!(f.at(top), None);
        assert_eq!(f.at(u64::MAX), None);
        let before = f.mem.snapshot();
        assert_eq!(
            f.map(top - 2 * KIB4, 2 * KIB4, 0x10_0000, RAM),
            Err(Stage2Error::AlreadyMapped { ipa: top - KIB4 })
        );
        assert_eq!(
            f.map(top - KIB4, 2 * KIB4, 0x10_0000, RAM),
            Err(Stage2Error::BeyondIpaSize { end: top + KIB4, ipa_bits })
        );
        assert_eq!(f.unmap(top, KIB4), Err(Stage2Error::BeyondIpaSize { end: top + KIB4, ipa_bits }));
        assert_eq!(
            f.protect(top - KIB4, 2 * KIB4, Permissions::RO),
            Err(Stage2Error::BeyondIpaSize { end: top + KIB4, ipa_bits })
        );
        assert_eq!(
            f.map(0, 2 * KIB4, pa_top - KIB4, RAM),
            Err(Stage2Error::BeyondPaSize { end: pa_top + KIB4, pa_bits })
        );
        assert_eq!(f.mem.snapshot(), before);
        // The whole IPA space can be unmapped in one call.
        f.unmap(0, top).unwrap();
        assert_eq!(f.frames(), f.root_tables());
    }
}

#[test]
fn impossible_arguments_are_typed_errors() {
    let mut f = fixture(v8_40(), 64);
    assert_eq!(f.map(0x1001, KIB4, 0, RAM), Err(Stage2Error::Unaligned { what: "IPA", value: 0x1001 }));
    assert_eq!(f.map(0x1000, 100, 0, RAM), Err(Stage2Error::Unaligned { what: "size", value: 100 }));
    assert_eq!(f.map(0x1000, KIB4, 0x10, RAM), Err(Stage2Error::Unaligned { what: "physical address", value: 0x10 }));
    assert_eq!(f.unmap(0x1000, 3), Err(Stage2Error::Unaligned { what: "size", value: 3 }));
    assert_eq!(f.protect(0x800, KIB4, Permissions::RO), Err(Stage2Error::Unaligned { what: "IPA", value: 0x800 }));
    assert_eq!(
        f.map(0, KIB4, u64::MAX - 0xfff, RAM),
        Err(Stage2Error::Overflow { start: u64::MAX - 0xfff, size: KIB4 })
    );
    assert_eq!(IpaRange::new(Ipa(KIB4), 0), Err(Stage2Error::ZeroSize));
    assert_eq!(
        IpaRange::new(Ipa(u64::MAX - 0xfff), 2 * KIB4),
        Err(Stage2Error::Overflow { start: u64::MAX - 0xfff, size: 2 * KIB4 })
    );
    assert!(f.leaves().is_empty());
    assert_eq!(f.mem.frames_in_use(), 2);
}

#[test]
fn unsupported_formats_and_vmids_are_refused_before_allocating() {
    let mut mem = crate::testing::VecTableMemory::with_capacity(64);
    for (ipa_bits, pa_bits) in [(31, 40), (49, 48), (44, 40), (40, 39), (52, 52)] {
        let format = TableFormat::Vmsav8_64 { ipa_bits, pa_bits };
        assert_eq!(
            Stage2Table::new(format, 1, &mut mem).err(),
            Some(Stage2Error::UnsupportedFormat { ipa_bits, pa_bits })
        );
    }
    assert_eq!(Stage2Table::new(v8_40(), 256, &mut mem).err(), Some(Stage2Error::VmidTooLarge { vmid: 256 }));
    assert_eq!(mem.frames_in_use(), 0);
    assert!(Stage2Table::new(v8_40(), 255, &mut mem).is_ok());
}

#[test]
fn every_error_says_what_to_do() {
    let errors = [
        Stage2Error::ZeroSize,
        Stage2Error::Overflow { start: 1, size: 2 },
        Stage2Error::Unaligned { what: "IPA", value: 3 },
        Stage2Error::BeyondIpaSize { end: 4, ipa_bits: 40 },
        Stage2Error::BeyondPaSize { end: 5, pa_bits: 40 },
        Stage2Error::AlreadyMapped { ipa: 6 },
        Stage2Error::OutOfFrames,
        Stage2Error::UnsupportedFormat { ipa_bits: 7, pa_bits: 8 },
        Stage2Error::InvalidPermissions,
        Stage2Error::HiddenNotReadOnlyDevice,
        Stage2Error::VmidTooLarge { vmid: 300 },
    ];
    let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    for (e, m) in errors.iter().zip(&messages) {
        assert!(m.len() > 20, "{e:?}: {m}");
    }
    let mut unique = messages.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), messages.len());
}

#[test]
fn overlapping_maps_are_refused_and_change_nothing() {
    let mut f = fixture(v8_40(), 64);
    f.map(GIB, MIB2, 0, RAM).unwrap();
    f.map(3 * GIB, GIB, 3 * GIB, RAM).unwrap();
    let before = f.mem.snapshot();
    let in_use = f.mem.frames_in_use();
    assert_eq!(
        f.map(GIB + MIB2 - KIB4, MIB2, 0x100_0000, RAM),
        Err(Stage2Error::AlreadyMapped { ipa: GIB + MIB2 - KIB4 })
    );
    assert_eq!(f.map(0, 2 * GIB, 0, RAM), Err(Stage2Error::AlreadyMapped { ipa: GIB }));
    assert_eq!(f.map(4 * GIB - KIB4, 2 * KIB4, 0, RAM), Err(Stage2Error::AlreadyMapped { ipa: 4 * GIB - KIB4 }));
    assert_eq!(f.map(3 * GIB + 5 * MIB2, KIB4, 0, RAM), Err(Stage2Error::AlreadyMapped { ipa: 3 * GIB + 5 * MIB2 }));
    assert_eq!(f.mem.snapshot(), before);
    assert_eq!(f.mem.frames_in_use(), in_use);
    // Right next to a mapping is fine.
    f.map(GIB + MIB2, KIB4, 0x200_0000, RAM).unwrap();
    f.map(GIB - KIB4, KIB4, 0x300_0000, RAM).unwrap();
}

#[test]
fn vttbr_and_vtcr_describe_the_tables() {
    let mut mem = crate::testing::VecTableMemory::with_capacity(64);
    let t = Stage2Table::new(v8_40(), 0x2a, &mut mem).unwrap();
    assert_eq!(t.vttbr(), 0x2a << 48 | t.root().0);
    assert_eq!(t.root().0 % (2 * KIB4), 0, "BADDR aligned to the two concatenated tables");
    assert_eq!(t.vtcr(), v8_40().vtcr(&t.geometry()));
    let t = Stage2Table::new(TableFormat::ArmV7Lpae, 7, &mut mem).unwrap();
    assert_eq!(t.vttbr() >> 48, 7);
    assert_eq!(t.vtcr() & 0xff, (0b01 << 6) | (1 << 4) | 0b1000, "SL0 = 1, S = 1, T0SZ = -8");
    let t = Stage2Table::new(TableFormat::Vmsav8_64 { ipa_bits: 34, pa_bits: 40 }, 1, &mut mem).unwrap();
    assert_eq!(t.root().0 % (16 * KIB4), 0, "BADDR aligned to the sixteen concatenated tables");
    assert_eq!(t.table_frame_count(&mem), 16);
}
