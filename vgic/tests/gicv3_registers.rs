//! GICv3 distributor and redistributor registers as the guest sees them (IHI 0069H 12.8 to
//! 12.11), including reserved and read-only locations and the access widths of 12.1.

mod common;

use common::*;
use vgic::*;

const RD1: u64 = GICR_FRAME_SIZE;

#[test]
fn gicd_ctlr_has_affinity_routing_and_one_security_state_forced_on() {
    // IHI 0069H 12.9.4: ARE [4] and DS [6] are RAO/WI here; EnableGrp0 [0], EnableGrp1 [1].
    let mut g = v3(1);
    assert_eq!(g.read(0, GICD_CTLR, 4), Ok(0b101_0011));
    g.write(0, GICD_CTLR, 4, 0).unwrap();
    assert_eq!(g.read(0, GICD_CTLR, 4), Ok(0b101_0000), "ARE and DS cannot be cleared");
    g.write(0, GICD_CTLR, 4, 0xffff_ffff).unwrap();
    assert_eq!(g.read(0, GICD_CTLR, 4), Ok(0b101_0011), "reserved bits, E1NWF, RWP read as zero");
}

#[test]
fn gicd_identification_registers() {
    // IHI 0069H 12.9, GICD_TYPER: ITLinesNumber = INTIDs / 32 - 1, IDbits = 10 bits - 1,
    // no LPIs, no extended SPIs; GICD_TYPER2; GICD_IIDR; PIDR2.ArchRev = 3.
    let mut g = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 2, spis: 70, lpis: 0 }).unwrap();
    assert_eq!(g.spis(), 96, "rounded up to whole registers");
    let typer = g.read(0, GICD_TYPER, 4).unwrap();
    assert_eq!(typer & 0x1f, 3);
    assert_eq!((typer >> 19) & 0x1f, 9);
    assert_eq!(typer & (1 << 17 | 1 << 8 | 1 << 24 | 1 << 26), 0, "LPIS, ESPI, A3V, RSS clear");
    assert_eq!(g.read(0, 0x00c, 4), Ok(0), "GICD_TYPER2");
    assert_eq!(g.read(0, GICD_IIDR, 4).unwrap() & 0xfff, 0x43b);
    assert_eq!((g.read(0, 0xffe8, 4).unwrap() >> 4) & 0xf, 3, "GICD_PIDR2.ArchRev");
    let before = g.clone();
    for reg in [GICD_TYPER, 0x00c, GICD_IIDR, 0xffe8] {
        g.write(0, reg, 4, 0).unwrap();
    }
    assert_eq!(g, before, "read-only: writes ignored");
    let full = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: MAX_SPIS, lpis: 0 }).unwrap();
    assert_eq!(full.read(0, GICD_TYPER, 4).unwrap() & 0x1f, 31, "INTIDs up to 1019");
}

#[test]
fn the_distributor_copies_of_private_registers_are_raz_wi_under_affinity_routing() {
    // IHI 0069H 12.9 (GICD_ISENABLER<n> etc. with n = 0, GICD_IPRIORITYR0-7, ICFGR0-1):
    // with ARE = 1 these are RAZ/WI; the redistributors hold SGIs and PPIs.
    let mut g = v3(2);
    let before = g.clone();
    for (reg, width) in [
        (IGROUPR, 4),
        (ISENABLER, 4),
        (ISPENDR, 4),
        (ISACTIVER, 4),
        (IPRIORITYR + 27, 1),
        (ICFGR + 4, 4),
        (ITARGETSR + 27, 1),
    ] {
        g.write(1, reg, width, 0xffff_ffff).unwrap();
        assert_eq!(g.read(1, reg, width), Ok(0), "offset {reg:#x}");
    }
    assert_eq!(g, before);
}

#[test]
fn reserved_and_unimplemented_locations_are_raz_wi() {
    // IHI 0069H 12.8: reserved locations are RES0; IGRPMODR is RAZ/WI with DS = 1
    // (GICD_IGRPMODR<n>); NSACR without two Security states; GICD_SGIR and the SGI pending
    // registers are RES0 under affinity routing; IROUTER0-31 do not exist.
    let mut g = v3(2);
    spi(&mut g, 40, 0x10, 1);
    let before = g.clone();
    for (offset, width) in [
        (0x010, 4),
        (0x040, 4),
        (IGRPMODR + 4, 4),
        (0xe00, 4),
        (GICD_SGIR, 4),
        (CPENDSGIR, 1),
        (SPENDSGIR + 4, 4),
        (IROUTER, 8),
        (IROUTER + 8 * 31, 4),
        (0x7fe0, 4),
        (0xc000, 4),
        (0xffd0, 4),
        (0xfffc, 4),
    ] {
        assert_eq!(g.read(0, offset, width), Ok(0), "offset {offset:#x}");
        g.write(0, offset, width, u64::MAX).unwrap();
    }
    assert_eq!(g, before);
    assert_eq!(g.read(0, IPRIORITYR + 100, 4), Ok(0), "INTIDs beyond the VM's SPIs");
    g.write(0, ISENABLER + 12, 4, u64::MAX).unwrap();
    assert_eq!(g, before);
}

#[test]
fn byte_accesses_only_where_the_spec_allows_them() {
    // IHI 0069H 12.1, "GIC memory-mapped register access": IPRIORITYR (and ITARGETSR, CPENDSGIR, SPENDSGIR) are byte
    // accessible; everything else is word (or, for 64-bit registers, doubleword) only.
    let mut g = v3(1);
    g.write(0, IPRIORITYR + 41, 1, 0xa0).unwrap();
    g.write(0, IPRIORITYR + 42, 1, 0xff).unwrap();
    assert_eq!(g.read(0, IPRIORITYR + 40, 4), Ok(0x00f8_a000), "five priority bits: low three RAZ/WI");
    assert_eq!(g.read(0, IPRIORITYR + 41, 1), Ok(0xa0));
    assert_eq!(g.read(0, ISENABLER + 4, 1), Err(AccessError::BadWidth { offset: ISENABLER + 4, width: 1 }));
    assert_eq!(g.write(0, IPRIORITYR + 40, 2, 0), Err(AccessError::BadWidth { offset: IPRIORITYR + 40, width: 2 }));
    assert_eq!(g.read(0, GICD_CTLR, 8), Err(AccessError::BadWidth { offset: 0, width: 8 }));
    assert_eq!(g.read(0, ISENABLER + 6, 4), Err(AccessError::Unaligned { offset: ISENABLER + 6, width: 4 }));
    assert_eq!(g.read(0, 0x10, 3), Err(AccessError::BadWidth { offset: 0x10, width: 3 }));
    assert_eq!(g.read(0, 0x1_0000, 4), Err(AccessError::OutsideFrame { offset: 0x1_0000 }));
    assert_eq!(g.read(1, 0, 4), Err(AccessError::NoSuchVcpu { vcpu: 1 }));
}

#[test]
fn irouter_is_a_64_bit_register_with_32_bit_halves() {
    // IHI 0069H 12.9, GICD_IROUTER<n>: Aff0-2 [23:0], IRM [31], Aff3 [39:32] (zero only:
    // GICD_TYPER.A3V = 0); 64-bit and 32-bit accesses.
    let mut g = v3(4);
    let r = IROUTER + 8 * 40;
    g.write(0, r, 8, 0xff_ffff_ffff_ffff).unwrap();
    assert_eq!(g.read(0, r, 8), Ok(0x80ff_ffff), "reserved bits and Aff3 read as zero");
    g.write(0, r, 4, 0x0000_0003).unwrap();
    assert_eq!(g.read(0, r, 8), Ok(3));
    assert_eq!(g.read(0, r, 4), Ok(3));
    assert_eq!(g.read(0, r + 4, 4), Ok(0));
    g.write(0, r + 4, 4, 0xffff_ffff).unwrap();
    assert_eq!(g.read(0, r, 8), Ok(3), "upper half: Aff3 only, unsupported");
    assert_eq!(g.read(0, r, 2), Err(AccessError::BadWidth { offset: r, width: 2 }));
    assert_eq!(g.read(0, r, 1), Err(AccessError::BadWidth { offset: r, width: 1 }));
    assert_eq!(g.read(0, r + 4, 8), Err(AccessError::Unaligned { offset: r + 4, width: 8 }));
}

#[test]
fn gicr_typer_gives_affinity_processor_number_and_last() {
    // IHI 0069H 12.11, GICR_TYPER: Affinity_Value [63:32], Processor_Number [23:8],
    // Last [4]; 64-bit, with 32-bit halves.
    let g = v3(3);
    for vcpu in 0..3u64 {
        let typer = g.read_redistributor(vcpu * RD1 + 8, 8).unwrap();
        assert_eq!(typer >> 32, vcpu, "Aff0");
        assert_eq!((typer >> 8) & 0xffff, vcpu);
        assert_eq!(typer & (1 << 4) != 0, vcpu == 2, "Last");
        assert_eq!(typer & 0b111, 0, "no LPIs, no vLPIs, no direct LPIs");
        assert_eq!(g.read_redistributor(vcpu * RD1 + 8, 4), Ok(typer & 0xffff_ffff));
        assert_eq!(g.read_redistributor(vcpu * RD1 + 0xc, 4), Ok(typer >> 32));
    }
    let big = v3(20);
    assert_eq!(big.read_redistributor(17 * RD1 + 0xc, 4), Ok(0x0101), "vCPU 17: Aff1 1, Aff0 1");
    assert_eq!(g.read_redistributor(3 * RD1, 4), Err(AccessError::NoSuchVcpu { vcpu: 3 }));
    assert_eq!(g.read_redistributor(4, 8), Err(AccessError::BadWidth { offset: 4, width: 8 }));
}

#[test]
fn gicr_waker_sleep_handshake() {
    // IHI 0069H 12.11.42 GICR_WAKER: ProcessorSleep [1] (RW), ChildrenAsleep [2] (RO);
    // Linux clears ProcessorSleep and polls until ChildrenAsleep is clear.
    let mut g = v3(2);
    assert_eq!(g.read_redistributor(0x14, 4), Ok(0b110), "asleep out of reset");
    g.write_redistributor(0x14, 4, 0b100).unwrap();
    assert_eq!(g.read_redistributor(0x14, 4), Ok(0), "awake; ChildrenAsleep is read-only and follows");
    assert!(!g.redistributor(0).unwrap().processor_sleep());
    assert!(g.redistributor(1).unwrap().processor_sleep(), "per redistributor");
    g.write_redistributor(0x14, 4, 0b010).unwrap();
    assert_eq!(g.read_redistributor(0x14, 4), Ok(0b110));
}

#[test]
fn gicr_control_and_identification() {
    // GICR_CTLR: no LPIs, RWP = 0; GICR_IIDR; GICR_PIDR2.ArchRev = 3; the rest RAZ/WI.
    let mut g = v3(1);
    let before = g.clone();
    for offset in [0x0, 0x10, 0x70, 0x78, 0xfff0] {
        g.write_redistributor(offset, 4, u64::MAX).unwrap();
        assert_eq!(g.read_redistributor(offset, 4), Ok(0), "{offset:#x}");
    }
    assert_eq!(g, before);
    assert_eq!(g.read_redistributor(0x4, 4), g.read(0, GICD_IIDR, 4));
    assert_eq!((g.read_redistributor(0xffe8, 4).unwrap() >> 4) & 0xf, 3);
}

#[test]
fn gicr_sgi_frames_hold_each_vcpus_private_interrupts() {
    // IHI 0069H 12.10: the SGI frame at +64 KiB; IGROUPR0 to ICACTIVER0, IPRIORITYR0-7,
    // ICFGR0 (SGIs, read-only edge) and ICFGR1, IGRPMODR0 (RAZ/WI with DS = 1).
    let mut g = v3(2);
    let sgi1 = RD1 + SGI_FRAME;
    g.write_redistributor(sgi1 + ISENABLER, 4, 1 << 27).unwrap();
    assert!(g.interrupt(1, IntId(27)).unwrap().enabled);
    assert!(!g.interrupt(0, IntId(27)).unwrap().enabled);
    assert_eq!(g.read_redistributor(sgi1 + ISENABLER, 4), Ok(1 << 27));
    assert_eq!(g.read_redistributor(SGI_FRAME + ISENABLER, 4), Ok(0));
    g.write_redistributor(sgi1 + ICENABLER, 4, 1 << 27).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + ICENABLER, 4), Ok(0));
    g.write_redistributor(sgi1 + IPRIORITYR + 27, 1, 0x80).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + IPRIORITYR + 24, 4), Ok(0x8000_0000));
    assert_eq!(g.read_redistributor(sgi1 + ICFGR, 4), Ok(0xaaaa_aaaa));
    g.write_redistributor(sgi1 + ICFGR, 4, 0).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + ICFGR, 4), Ok(0xaaaa_aaaa), "ICFGR0 is read-only");
    g.write_redistributor(sgi1 + ICFGR + 4, 4, 2 << 22).unwrap();
    assert_eq!(g.interrupt(1, IntId(27)).unwrap().trigger, Trigger::Edge, "PPI 27 made edge-triggered");
    g.write_redistributor(sgi1 + IGRPMODR, 4, u64::MAX).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + IGRPMODR, 4), Ok(0));
    g.write_redistributor(sgi1 + ISPENDR, 4, 1 << 3).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + ICPENDR, 4), Ok(1 << 3));
    g.write_redistributor(sgi1 + ISACTIVER, 4, 1 << 4).unwrap();
    assert_eq!(g.read_redistributor(sgi1 + ICACTIVER, 4), Ok(1 << 4));
    // Beyond the private interrupts, an SGI frame has nothing: RAZ/WI.
    for offset in [ISENABLER + 4, IPRIORITYR + 32, ICFGR + 8, ITARGETSR, IROUTER] {
        assert_eq!(g.read_redistributor(sgi1 + offset, 4), Ok(0), "{offset:#x}");
    }
    assert_eq!(
        g.read_redistributor(sgi1 + ISENABLER, 2),
        Err(AccessError::BadWidth { offset: sgi1 + ISENABLER, width: 2 })
    );
    assert_eq!(v2(1).read_redistributor(0, 4), Err(AccessError::NotPresent { offset: 0 }));
}

/// IHI 0069H 12.9.23 and 12.9.3: GICD_SETSPI_NSR and GICD_CLRSPI_NSR, the doorbell a
/// device's MSI writes an SPI's INTID to (GICD_TYPER.MBIS), word accesses only, write-only.
#[test]
fn message_based_spis_are_set_and_cleared_through_their_doorbells() {
    let mut g = v3(2);
    assert_ne!(g.read(0, GICD_TYPER, 4).unwrap() & (1 << 16), 0, "GICD_TYPER.MBIS");
    let (word, mask) = bit(40);
    let pending = |g: &Vgic| g.read(0, ISPENDR + word, 4).unwrap() & mask != 0;

    // Edge-triggered: pending until taken or cleared, as GICD_ISPENDR / GICD_ICPENDR.
    spi(&mut g, 40, 0x80, 1);
    g.take_kicks();
    g.write(0, GICD_SETSPI_NSR, 4, 40).unwrap();
    assert!(pending(&g));
    assert!(g.take_kicks().contains(1), "the SPI's target looks at it");
    let mut lrs = FakeLrs::for_gic(&g, 4);
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.ack(), Some((40, 0)), "delivered like any SPI");
    lrs.deactivate(40);
    g.sync_from_hw(1, &mut lrs).unwrap();
    assert!(!pending(&g), "taken: no longer pending");
    g.write(0, GICD_SETSPI_NSR, 4, 40).unwrap();
    g.write(0, GICD_CLRSPI_NSR, 4, 40).unwrap();
    assert!(!pending(&g), "cleared before it was taken");

    // Level-sensitive: asserted until GICD_CLRSPI_NSR, taking it notwithstanding.
    set_trigger(&mut g, 40, Trigger::Level);
    g.write(0, GICD_SETSPI_NSR, 4, 40).unwrap();
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.ack(), Some((40, 0)));
    lrs.deactivate(40);
    g.sync_from_hw(1, &mut lrs).unwrap();
    assert!(pending(&g), "still asserted after it was taken");
    g.write(0, GICD_CLRSPI_NSR, 4, 40).unwrap();
    assert!(!pending(&g), "deasserted");

    // Values naming no SPI of the VM, bits above INTID [12:0], other widths, reads.
    let before = g.clone();
    for value in [0, 15, 16, 31, 32 + 64, 1019, 1020, 0x1fff, 0xffff_e000] {
        g.write(0, GICD_SETSPI_NSR, 4, value).unwrap();
        g.write(0, GICD_CLRSPI_NSR, 4, value).unwrap();
    }
    assert_eq!(g, before, "no SGI, PPI or absent SPI is touched");
    g.write(0, GICD_SETSPI_NSR, 4, 0x1000 | 40).unwrap();
    assert!(!pending(&g), "INTID 0x1028 is no SPI");
    g.write(0, GICD_SETSPI_NSR, 4, 0xffff_e000 | 40).unwrap();
    assert!(pending(&g), "bits above INTID [12:0] are not part of it");
    g.write(0, GICD_CLRSPI_NSR, 4, 40).unwrap();
    for width in [1, 2, 8] {
        assert!(g.write(0, GICD_SETSPI_NSR, width, 40).is_err(), "width {width}");
    }
    assert_eq!(g.read(0, GICD_SETSPI_NSR, 4), Ok(0));
    assert_eq!(g.read(0, GICD_CLRSPI_NSR, 4), Ok(0));
    assert!(!pending(&g));
}

/// A passthrough SPI's input is its board device's: a guest's doorbell write moves neither
/// its level nor, through it, the physical interrupt's deactivation.
#[test]
fn a_doorbell_write_does_not_assert_a_passthrough_spi() {
    let mut g = v3(1);
    spi(&mut g, 41, 0x80, 0);
    set_trigger(&mut g, 41, Trigger::Level);
    g.set_hw(IntId(41), 0, Some(IntId(77))).unwrap();
    let (word, mask) = bit(41);
    g.write(0, GICD_SETSPI_NSR, 4, 41).unwrap();
    assert_eq!(g.read(0, ISPENDR + word, 4).unwrap() & mask, 0);
}

/// GICv2 has no message-based SPIs: the offsets are reserved.
#[test]
fn gicv2_has_no_spi_doorbells() {
    let mut g = v2(1);
    spi(&mut g, 40, 0x80, 0);
    let (word, mask) = bit(40);
    g.write(0, GICD_SETSPI_NSR, 4, 40).unwrap();
    assert_eq!(g.read(0, ISPENDR + word, 4).unwrap() & mask, 0);
    assert_eq!(g.read(0, GICD_TYPER, 4).unwrap() & (1 << 16), 0);
}
