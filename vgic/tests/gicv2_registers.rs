//! GICv2 distributor registers as the guest sees them (IHI 0048B 4.1 to 4.3), including
//! the banked private registers, ITARGETSR, reserved locations and access widths (4.1).

mod common;

use common::*;
use vgic::*;

#[test]
fn gicd_ctlr_and_identification() {
    // IHI 0048B 4.3.1 GICD_CTLR (EnableGrp0/1, no ARE), 4.3.2 GICD_TYPER (CPUNumber
    // [7:5], ITLinesNumber [4:0]), 4.3.3 GICD_IIDR, ICPIDR2.ArchRev = 2.
    let mut g = v2(3);
    g.write(0, GICD_CTLR, 4, 0xffff_ffff).unwrap();
    assert_eq!(g.read(0, GICD_CTLR, 4), Ok(0b11));
    let typer = g.read(0, GICD_TYPER, 4).unwrap();
    assert_eq!((typer >> 5) & 7, 2, "three CPUs");
    assert_eq!(typer & 0x1f, 2, "96 INTIDs");
    assert_eq!(typer & (1 << 10), 0, "no Security Extensions");
    assert_eq!(g.read(0, GICD_IIDR, 4).unwrap() & 0xfff, 0x43b);
    assert_eq!((g.read(0, 0xfe8, 4).unwrap() >> 4) & 0xf, 2);
}

#[test]
fn private_registers_are_banked_per_vcpu() {
    // IHI 0048B 4.3: registers for INTIDs 0-31 are banked per CPU interface.
    let mut g = v2(2);
    g.write(1, ISENABLER, 4, 1 << 27).unwrap();
    g.write(1, IPRIORITYR + 27, 1, 0x40).unwrap();
    assert_eq!(g.read(1, ISENABLER, 4).unwrap() & (1 << 27), 1 << 27);
    assert_eq!(g.read(0, ISENABLER, 4).unwrap() & (1 << 27), 0);
    assert_eq!(g.interrupt(1, IntId(27)).unwrap().priority, 0x40);
    assert_eq!(g.interrupt(0, IntId(27)).unwrap().priority, 0);
}

#[test]
fn sgis_are_always_enabled_and_edge_triggered() {
    // IHI 0048B 4.3.5: whether SGI enable bits are RAO/WI is implementation defined (they
    // are on GIC-400); 4.3.13: GICD_ICFGR0 is read-only.
    let mut g = v2(1);
    g.write(0, ICENABLER, 4, 0xffff).unwrap();
    assert_eq!(g.read(0, ISENABLER, 4), Ok(0xffff));
    assert_eq!(g.read(0, ICFGR, 4), Ok(0xaaaa_aaaa));
    g.write(0, ICFGR, 4, 0).unwrap();
    assert_eq!(g.read(0, ICFGR, 4), Ok(0xaaaa_aaaa));
}

#[test]
fn itargetsr_of_private_interrupts_reads_the_own_cpu_and_ignores_writes() {
    // IHI 0048B 4.3.12: GICD_ITARGETSR0-7 are read-only and each field returns the
    // accessing CPU's mask; SPI fields name target CPUs, bits of absent CPUs RAZ/WI.
    let mut g = v2(2);
    assert_eq!(g.read(1, ITARGETSR, 4), Ok(0x0202_0202));
    assert_eq!(g.read(0, ITARGETSR + 28, 4), Ok(0x0101_0101));
    let before = g.clone();
    g.write(1, ITARGETSR + 16, 4, 0).unwrap();
    assert_eq!(g, before);
    g.write(0, ITARGETSR + 40, 1, 0xff).unwrap();
    assert_eq!(g.read(0, ITARGETSR + 40, 1), Ok(0b11));
    assert_eq!(g.read(0, ITARGETSR + 40, 4), Ok(0x0101_0103), "other SPIs target CPU 0 out of reset");
    // Uniprocessor: RAZ/WI, everything goes to the one CPU.
    let mut up = v2(1);
    assert_eq!(up.read(0, ITARGETSR, 4), Ok(0));
    up.write(0, ITARGETSR + 40, 1, 0).unwrap();
    spi(&mut up, 40, 0x10, 0);
    up.inject_edge(IntId(40), 0).unwrap();
    assert!(up.has_pending(0));
}

#[test]
fn reserved_and_absent_locations_are_raz_wi() {
    // IHI 0048B 4.1, Table 4-1: reserved and implementation-defined locations; there is
    // no IROUTER or GICv3 ID block in a 4 KiB GICv2 distributor.
    let mut g = v2(2);
    let before = g.clone();
    for offset in [0x00c, 0x010, 0x07c, 0xd00, 0xe00, 0xf04, 0xf30, 0xfd0, 0xffc] {
        assert_eq!(g.read(0, offset, 4), Ok(0), "{offset:#x}");
        g.write(0, offset, 4, u64::MAX).unwrap();
    }
    assert_eq!(g.read(0, GICD_SGIR, 4), Ok(0), "GICD_SGIR is write-only");
    assert_eq!(g, before);
    assert_eq!(g.read(0, IROUTER, 8), Err(AccessError::OutsideFrame { offset: IROUTER }));
}

#[test]
fn access_widths() {
    // IHI 0048B 4.1, "GIC register access": byte accesses to IPRIORITYR, ITARGETSR, CPENDSGIR and SPENDSGIR;
    // word accesses everywhere; nothing else.
    let mut g = v2(2);
    for offset in [IPRIORITYR + 33, ITARGETSR + 33, CPENDSGIR + 1, SPENDSGIR + 3] {
        assert!(g.read(0, offset, 1).is_ok(), "{offset:#x}");
        assert!(g.write(0, offset, 1, 0).is_ok(), "{offset:#x}");
        assert_eq!(g.read(0, offset & !3, 2), Err(AccessError::BadWidth { offset: offset & !3, width: 2 }));
    }
    assert_eq!(g.read(0, ISENABLER, 1), Err(AccessError::BadWidth { offset: ISENABLER, width: 1 }));
    for width in [1, 2, 8] {
        let before = g.clone();
        assert_eq!(g.write(0, GICD_SGIR, width, u64::MAX), Err(AccessError::BadWidth { offset: GICD_SGIR, width }));
        assert_eq!(g, before, "a GICD_SGIR write of {width} bytes generates nothing");
    }
    assert_eq!(g.write(2, GICD_SGIR, 4, 0x00ff_0001), Err(AccessError::NoSuchVcpu { vcpu: 2 }));
    assert_eq!(g.read(0, ICFGR + 2, 4), Err(AccessError::Unaligned { offset: ICFGR + 2, width: 4 }));
    assert_eq!(g.read(2, 0, 4), Err(AccessError::NoSuchVcpu { vcpu: 2 }));
}

#[test]
fn too_many_vcpus_for_gicv2_is_refused() {
    let config = VgicConfig { version: GicVersion::V2, vcpus: 9, spis: 32, lpis: 0 };
    assert_eq!(Distributor::new(config), Err(VgicError::TooManyVcpus { requested: 9, max: MAX_VCPUS_V2 }));
    assert_eq!(Distributor::new(VgicConfig { vcpus: 0, ..config }), Err(VgicError::NoVcpus));
    assert_eq!(
        Distributor::new(VgicConfig { vcpus: 1, spis: 989, ..config }),
        Err(VgicError::TooManySpis { requested: 989, max: MAX_SPIS })
    );
}
