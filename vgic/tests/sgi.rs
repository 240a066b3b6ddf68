//! SGIs between vCPUs. GICv3: ICC_SGI1R_EL1 and friends (IHI 0069H 12.2.22) by affinity,
//! target list, RS and IRM. GICv2: GICD_SGIR (IHI 0048B 4.3.15), pending per source CPU.

mod common;

use common::*;
use proptest::prelude::*;
use vgic::*;

/// ICC_SGI1R_EL1: INTID [27:24], TargetList [15:0], Aff1 [23:16], Aff2 [39:32], IRM [40],
/// RS [47:44], Aff3 [55:48].
fn sgi1r(intid: u64, target_list: u64, aff1: u64) -> u64 {
    (intid << 24) | target_list | (aff1 << 16)
}

fn pending_sgis(g: &Distributor, vcpu: usize) -> Vec<u32> {
    (0..16).filter(|&i| g.interrupt(vcpu, IntId(i)).unwrap().pending).collect()
}

#[test]
fn gicv3_target_list_and_aff1_name_vcpus() {
    let mut g = v3(20);
    g.take_kicks();
    // vCPU n has Aff1 = n / 16, Aff0 = n % 16.
    let targets = g.generate_sgi(0, SgiRegister::Sgi1r, sgi1r(5, 0b1010, 0)).unwrap();
    assert_eq!(targets.iter().collect::<Vec<_>>(), [1, 3]);
    let targets = g.generate_sgi(0, SgiRegister::Sgi1r, sgi1r(15, 0b1001, 1)).unwrap();
    assert_eq!(targets.iter().collect::<Vec<_>>(), [16, 19]);
    assert_eq!(pending_sgis(&g, 19), [15], "INTID 15, not truncated");
    assert_eq!(pending_sgis(&g, 1), [5]);
    assert!(pending_sgis(&g, 0).is_empty() && pending_sgis(&g, 2).is_empty());
    assert_eq!(g.take_kicks(), VcpuMask((1 << 1) | (1 << 3) | (1 << 16) | (1 << 19)));
}

/// IHI 0069H 12.2.22, one vCPU at a time: IRM = 1 names every PE but the sender; IRM = 0
/// names the PE whose affinity is Aff3.Aff2.Aff1.Aff0 with Aff0 = RS * 16 + n for each
/// TargetList bit n. vCPU v has Aff0 = v % 16, Aff1 = v / 16 and Aff2 = Aff3 = 0.
fn names(value: u64, source: usize, vcpu: usize) -> bool {
    if value & (1 << 40) != 0 {
        return vcpu != source;
    }
    let (aff0, aff1) = ((vcpu % 16) as u64, (vcpu / 16) as u64);
    let (list, rs) = (value & 0xffff, (value >> 44) & 0xf);
    (value >> 48) & 0xff == 0
        && (value >> 32) & 0xff == 0
        && (value >> 16) & 0xff == aff1
        && aff0 / 16 == rs
        && list & (1 << (aff0 % 16)) != 0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The targets of an ICC_SGI1R_EL1 write, computed as a mask, are exactly the vCPUs the
    /// rule above names, whatever the register holds and however many vCPUs (up to 64).
    #[test]
    fn gicv3_the_targets_are_the_vcpus_the_affinity_rule_names(
        vcpus in 1usize..=64,
        source in 0usize..64,
        list in any::<u16>(),
        intid in 0u64..16,
        // Each field mostly in the range that names vCPUs, sometimes just past it.
        (aff3, aff2, rs, aff1) in (0u64..2, 0u64..2, 0u64..2, 0u64..5),
        irm in prop::bool::weighted(0.2),
        noise in any::<u64>(),
    ) {
        let source = source % vcpus;
        // The register's RES0 bits ([63:56], [43:41], [31:28]) set at random: they name
        // nothing.
        let res0 = noise & (0xff << 56 | 0b111 << 41 | 0xf << 28);
        let value = res0 | aff3 << 48 | rs << 44 | u64::from(irm) << 40 | aff2 << 32 | intid << 24 | aff1 << 16 | u64::from(list);
        let mut g = v3(vcpus);
        let expected: Vec<usize> = (0..vcpus).filter(|&v| names(value, source, v)).collect();
        let targets = g.generate_sgi(source, SgiRegister::Sgi1r, value).unwrap();
        prop_assert_eq!(targets.iter().collect::<Vec<_>>(), expected.clone(), "{:#x}", value);
        let intid = ((value >> 24) & 0xf) as u32;
        for v in 0..vcpus {
            prop_assert_eq!(g.interrupt(v, IntId(intid)).unwrap().pending, expected.contains(&v), "vCPU {}", v);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// An ICC_SGI1R_EL1 write another CPU may post (`single_sgi_target`) is one that names
    /// exactly one vCPU other than the sender, that one, by the rule above; posted and
    /// delivered (`posted_sgi_bit`, `deliver_posted_sgis`) it leaves every vCPU's SGIs as the
    /// write itself does, whatever else was posted in the same word before.
    #[test]
    fn gicv3_a_posted_sgi_is_the_write_that_names_one_other_vcpu(
        vcpus in 1usize..=8,
        source in 0usize..8,
        list in any::<u16>(),
        intid in 0u64..16,
        (aff3, aff2, rs, aff1) in (0u64..2, 0u64..2, 0u64..2, 0u64..2),
        irm in prop::bool::weighted(0.1),
        earlier in any::<u64>(),
    ) {
        let source = source % vcpus;
        let value = aff3 << 48 | rs << 44 | u64::from(irm) << 40 | aff2 << 32 | intid << 24 | aff1 << 16 | u64::from(list);
        let named: Vec<usize> = (0..vcpus).filter(|&v| names(value, source, v)).collect();
        let single = single_sgi_target(value, source, vcpus);
        let postable = !irm && named.len() == 1 && named[0] != source;
        prop_assert_eq!(single.is_some(), postable, "{:#x}", value);
        let Some((vcpu, sgi)) = single else { return Ok(()) };
        prop_assert_eq!((vcpu, sgi), (named[0], intid as u32));

        // Posted only for SGIs 0 to 7; what was posted earlier delivered to both first.
        prop_assert_eq!(posted_sgi_bit(vcpu, sgi).is_some(), sgi < 8);
        let Some(bit) = posted_sgi_bit(vcpu, sgi) else { return Ok(()) };
        let (mut written, mut posted) = (v3(vcpus), v3(vcpus));
        written.deliver_posted_sgis(earlier);
        posted.deliver_posted_sgis(earlier);
        written.generate_sgi(source, SgiRegister::Sgi1r, value).unwrap();
        posted.deliver_posted_sgis(bit);
        for v in 0..vcpus {
            prop_assert_eq!(pending_sgis(&posted, v), pending_sgis(&written, v), "vCPU {}", v);
        }
        prop_assert!(pending_sgis(&posted, vcpu).contains(&sgi));
    }
}

/// GICv2's pending SGIs of `vcpu`, per source: GICD_SPENDSGIR0 to 3 as that vCPU reads them
/// (IHI 0048B 4.3.17: a byte per SGI, a bit per source CPU).
fn spendsgir(g: &mut Distributor, vcpu: usize) -> [u64; 4] {
    core::array::from_fn(|n| g.read(vcpu, 0xf20 + 4 * n as u64, 4).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A GICD_SGIR write another CPU may post (`single_sgir_target`) is one that names
    /// exactly one vCPU other than the sender by its list; posted by its source and
    /// delivered (`posted_sgi_bit`, `deliver_posted_sgis_from`) it leaves every vCPU's SGIs,
    /// source by source, as the write itself does, whatever that source posted before.
    #[test]
    fn gicv2_a_posted_sgi_is_the_write_that_names_one_other_vcpu(
        vcpus in 1usize..=8,
        source in 0usize..8,
        filter in 0u32..4,
        list in any::<u8>(),
        intid in 0u32..16,
        noise in any::<u32>(),
        earlier in any::<u64>(),
    ) {
        let source = source % vcpus;
        // NSATT [15] and the reserved bits [14:4] and [31:26] name nothing.
        let value = (noise & (0xfc00_fff0)) | filter << 24 | u32::from(list) << 16 | intid;
        let mut named = v2(vcpus);
        named.write(source, GICD_SGIR, 4, u64::from(value)).unwrap();
        let targets: Vec<usize> = (0..vcpus).filter(|&v| spendsgir(&mut named, v) != [0; 4]).collect();
        let single = single_sgir_target(value, source, vcpus);
        prop_assert_eq!(single.is_some(), filter == 0 && targets.len() == 1 && targets[0] != source, "{:#x}", value);
        let Some((vcpu, sgi)) = single else { return Ok(()) };
        prop_assert_eq!((vcpu, sgi), (targets[0], intid));
        prop_assert_eq!(posted_sgi_bit(vcpu, sgi).is_some(), sgi < 8);
        let Some(bit) = posted_sgi_bit(vcpu, sgi) else { return Ok(()) };
        let (mut written, mut posted) = (v2(vcpus), v2(vcpus));
        written.deliver_posted_sgis_from(source, earlier);
        posted.deliver_posted_sgis_from(source, earlier);
        written.write(source, GICD_SGIR, 4, u64::from(value)).unwrap();
        posted.deliver_posted_sgis_from(source, bit);
        for v in 0..vcpus {
            prop_assert_eq!(spendsgir(&mut posted, v), spendsgir(&mut written, v), "vCPU {}", v);
        }
    }
}

#[test]
fn gicv2_posted_sgis_are_pending_from_their_source() {
    let mut g = v2(4);
    g.deliver_posted_sgis_from(2, posted_sgi_bit(1, 3).unwrap() | posted_sgi_bit(3, 0).unwrap());
    assert_eq!(spendsgir(&mut g, 1), [1 << 26, 0, 0, 0], "SGI 3 of vCPU 1, from CPU 2");
    assert_eq!(spendsgir(&mut g, 3), [1 << 2, 0, 0, 0], "SGI 0 of vCPU 3, from CPU 2");
    // A source the VM lacks posts nothing; nor does anyone on a GICv3.
    g.deliver_posted_sgis_from(4, u64::MAX);
    assert_eq!(spendsgir(&mut g, 0), [0; 4]);
    let mut gicv3 = v3(2);
    gicv3.deliver_posted_sgis_from(0, u64::MAX);
    assert!(pending_sgis(&gicv3, 1).is_empty());
}

#[test]
fn posted_sgis_are_eight_bits_a_vcpu_in_one_word() {
    assert_eq!(posted_sgi_bit(0, 0), Some(1));
    assert_eq!(posted_sgi_bit(1, 7), Some(1 << 15));
    assert_eq!(posted_sgi_bit(7, 7), Some(1 << 63));
    assert_eq!(posted_sgi_bit(0, 8), None, "SGIs 8 to 15 are not posted");
    assert_eq!(posted_sgi_bit(8, 0), None, "nor vCPUs past 7");
    let mut g = v3(8);
    g.deliver_posted_sgis((1 << 41) | (1 << 63));
    assert_eq!(pending_sgis(&g, 5), [1]);
    assert_eq!(pending_sgis(&g, 7), [7]);
    assert!((0..8).filter(|&v| v != 5 && v != 7).all(|v| pending_sgis(&g, v).is_empty()));
    // Bits of vCPUs the VM lacks name nothing.
    let mut small = v3(2);
    small.deliver_posted_sgis(u64::MAX << 16);
    assert!(pending_sgis(&small, 0).is_empty() && pending_sgis(&small, 1).is_empty());
}

#[test]
fn posted_sgis_belong_to_gicv3() {
    let mut g = v2(2);
    g.deliver_posted_sgis(u64::MAX);
    assert!(pending_sgis(&g, 0).is_empty() && pending_sgis(&g, 1).is_empty());
}

#[test]
fn gicv3_irm_targets_every_vcpu_but_the_sender() {
    let mut g = v3(4);
    let targets = g.generate_sgi(2, SgiRegister::Sgi1r, (1 << 40) | (7 << 24)).unwrap();
    assert_eq!(targets.iter().collect::<Vec<_>>(), [0, 1, 3]);
    assert!(pending_sgis(&g, 2).is_empty());
    assert_eq!(pending_sgis(&g, 3), [7]);
}

#[test]
fn gicv3_an_affinity_that_names_no_vcpu_is_ignored() {
    let mut g = v3(4);
    let before = g.clone();
    for value in [
        sgi1r(1, 1 << 5, 0),        // Aff0 5: no such vCPU
        sgi1r(1, 1, 3),             // Aff1 3
        sgi1r(1, 1, 0) | (1 << 32), // Aff2 1
        sgi1r(1, 1, 0) | (1 << 48), // Aff3 1
        sgi1r(1, 1, 0) | (1 << 44), // RS 1: Aff0 16
        sgi1r(1, 0, 0),             // empty target list
    ] {
        assert_eq!(g.generate_sgi(0, SgiRegister::Sgi1r, value), Ok(VcpuMask::EMPTY), "{value:#x}");
    }
    assert_eq!(g, before, "nothing changed");
}

#[test]
fn gicv3_group_0_sgi_registers_only_generate_group_0_sgis() {
    // IHI 0069H 12.2 (ICC_SGI0R_EL1, ICC_ASGI1R_EL1 with DS = 1): Group 0 only.
    let mut g = v3(2);
    private_irq(&mut g, 1, 3, 0x10); // Group 1
    assert_eq!(g.generate_sgi(0, SgiRegister::Sgi0r, sgi1r(3, 0b10, 0)), Ok(VcpuMask::EMPTY));
    assert_eq!(g.generate_sgi(0, SgiRegister::Asgi1r, sgi1r(3, 0b10, 0)), Ok(VcpuMask::EMPTY));
    assert_eq!(g.generate_sgi(0, SgiRegister::Sgi0r, sgi1r(4, 0b10, 0)), Ok(VcpuMask::single(1)), "SGI 4 is Group 0");
    assert_eq!(g.generate_sgi(0, SgiRegister::Sgi1r, sgi1r(3, 0b10, 0)), Ok(VcpuMask::single(1)));
    assert_eq!(pending_sgis(&g, 1), [3, 4]);
}

#[test]
fn gicv3_sgi_from_one_vcpu_reaches_another() {
    let mut g = v3(2);
    private_irq(&mut g, 1, 2, 0x10);
    g.generate_sgi(0, SgiRegister::Sgi1r, sgi1r(2, 0b10, 0)).unwrap();
    let mut lrs = FakeLrs::for_gic(&g, 4);
    assert_eq!(deliver_all(&mut g, 1, &mut lrs), [(2, 0)]);
    assert_eq!(g.generate_sgi(5, SgiRegister::Sgi1r, 0), Err(VgicError::NoSuchVcpu { vcpu: 5, vcpus: 2 }));
}

#[test]
fn gicv2_sgis_from_two_sources_are_two_interrupts() {
    // IHI 0048B 4.3.16 and 5.3 (GICH_LRn.CPUID): an SGI is pending per source CPU. hvisor
    // issue 282: ignoring the source lost SGIs and stalled RCU in the guest.
    let mut g = v2(3);
    private_irq(&mut g, 2, 1, 0x10);
    g.write(0, GICD_SGIR, 4, (1 << 18) | 1).unwrap();
    g.write(1, GICD_SGIR, 4, (1 << 18) | 1).unwrap();
    assert_eq!(g.read(2, SPENDSGIR, 4), Ok(0b11 << 8), "SGI 1 pending from CPUs 0 and 1");
    assert_eq!(g.read(2, SPENDSGIR + 1, 1), Ok(0b11), "byte access");
    g.take_kicks();
    g.write(0, GICD_SGIR, 4, (1 << 18) | 1).unwrap();
    assert_eq!(g.take_kicks(), VcpuMask::single(2));
    let mut lrs = FakeLrs::for_gic(&g, 4);
    g.flush_to_hw(2, &mut lrs).unwrap();
    assert_eq!(lrs.valid(), [(1, LrState::Pending, 0)], "one list register per SGI, source 0 first");
    assert!(lrs.maintenance.no_pending, "source 1 comes in once source 0 is acknowledged");
    let first = lrs.ack().unwrap();
    assert!(lrs.maintenance_asserted(), "no pending list register left: NPIE fires");
    g.sync_from_hw(2, &mut lrs).unwrap();
    g.flush_to_hw(2, &mut lrs).unwrap();
    let lr = lrs.lr(0);
    assert_eq!(
        (lr.state, lr.source, lr.eoi_maintenance),
        (LrState::Active, 0, true),
        "EOI maintenance brings source 1 in"
    );
    lrs.deactivate(1);
    g.sync_from_hw(2, &mut lrs).unwrap();
    let rest = deliver_all(&mut g, 2, &mut lrs);
    assert_eq!([vec![first], rest].concat(), [(1, 0), (1, 1)]);
    assert_eq!(g.read(2, SPENDSGIR, 4), Ok(0));
}

#[test]
fn gicv2_the_same_source_twice_while_pending_is_one_interrupt() {
    let mut g = v2(2);
    private_irq(&mut g, 1, 1, 0x10);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    g.write(0, GICD_SGIR, 4, (1 << 17) | 1).unwrap();
    g.flush_to_hw(1, &mut lrs).unwrap();
    g.sync_from_hw(1, &mut lrs).unwrap();
    g.write(0, GICD_SGIR, 4, (1 << 17) | 1).unwrap();
    assert_eq!(deliver_all(&mut g, 1, &mut lrs), [(1, 0)], "coalesced while pending");
    // Sent again while the first is active: active and pending from the same source.
    g.write(0, GICD_SGIR, 4, (1 << 17) | 1).unwrap();
    run(&mut g, 1, &mut lrs, |l| assert_eq!(l.ack(), Some((1, 0))));
    g.write(0, GICD_SGIR, 4, (1 << 17) | 1).unwrap();
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.valid(), [(1, LrState::PendingActive, 0)]);
}

#[test]
fn gicv2_sgir_target_list_filter() {
    // IHI 0048B 4.3.15: TargetListFilter 0 = CPUTargetList, 1 = all but the sender,
    // 2 = the sender only, 3 = reserved.
    let mut g = v2(4);
    let sources = |g: &Distributor, sgi: u64| -> Vec<u64> {
        (0..4).map(|v| g.read(v, SPENDSGIR + sgi / 4 * 4, 4).unwrap() >> (8 * (sgi % 4)) & 0xff).collect()
    };
    g.write(3, GICD_SGIR, 4, (0b0101 << 16) | 4).unwrap();
    assert_eq!(sources(&g, 4), [0b1000, 0, 0b1000, 0]);
    g.write(1, GICD_SGIR, 4, (1 << 24) | 5).unwrap();
    assert_eq!(sources(&g, 5), [0b10, 0, 0b10, 0b10]);
    g.write(2, GICD_SGIR, 4, (2 << 24) | 6).unwrap();
    assert_eq!(sources(&g, 6), [0, 0, 0b100, 0]);
    let before = g.clone();
    g.write(2, GICD_SGIR, 4, (3 << 24) | (0xff << 16) | 7).unwrap();
    g.write(2, GICD_SGIR, 4, (0xf0 << 16) | 7).unwrap(); // CPUs 4-7 do not exist
    assert_eq!(g, before);
}

#[test]
fn gicv2_sgi_pending_registers_set_and_clear_per_source() {
    // IHI 0048B 4.3.16 GICD_CPENDSGIRn, 4.3.17 GICD_SPENDSGIRn; ISPENDR0/ICPENDR0 bits of
    // SGIs ignore writes.
    let mut g = v2(2);
    g.write(0, SPENDSGIR + 4, 1, 0b11).unwrap(); // SGI 4, sources 0 and 1
    assert_eq!(g.read(0, SPENDSGIR + 4, 4), Ok(0b11));
    assert_eq!(g.read(0, CPENDSGIR + 4, 1), Ok(0b11));
    assert_eq!(g.read(0, ISPENDR, 4), Ok(1 << 4));
    g.write(0, ICPENDR, 4, 1 << 4).unwrap();
    assert_eq!(g.read(0, ISPENDR, 4), Ok(1 << 4), "ICPENDR0 cannot clear an SGI");
    g.write(0, CPENDSGIR + 4, 1, 0b01).unwrap();
    assert_eq!(g.read(0, SPENDSGIR + 4, 1), Ok(0b10));
    g.write(0, SPENDSGIR + 4, 1, 0xfc).unwrap();
    assert_eq!(g.read(0, SPENDSGIR + 4, 1), Ok(0b10), "sources beyond the VM's CPUs are RAZ/WI");
    assert_eq!(g.read(1, SPENDSGIR + 4, 1), Ok(0), "banked per target vCPU");
}

#[test]
fn generate_sgi_belongs_to_gicv3() {
    let mut g = v2(2);
    assert_eq!(g.generate_sgi(0, SgiRegister::Sgi1r, 1), Err(VgicError::WrongVersion { needs: GicVersion::V3 }));
}
