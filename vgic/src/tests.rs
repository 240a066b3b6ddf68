//! Host tests following the GIC architecture specifications: IHI 0069 (GICv3) and IHI 0048B
//! (GICv2). Each test names the rule it checks.

use alloc::vec::Vec;

use proptest::prelude::*;

use crate::distributor::Candidate;
use crate::*;

const GICD_CTLR: u64 = 0x0;
const GICD_TYPER: u64 = 0x4;
const ISENABLER: u64 = 0x100;
const ISPENDR: u64 = 0x200;
const IPRIORITYR: u64 = 0x400;
const ICFGR: u64 = 0xc00;
const IROUTER: u64 = 0x6000;
const SGI: u64 = 0x1_0000;

fn v3(vcpus: usize) -> Vgic {
    let mut g = Vgic::new(GicVersion::V3, vcpus, 64);
    g.write(0, GICD_CTLR, 4, 0b11).unwrap();
    g
}

fn v2(vcpus: usize) -> Vgic {
    let mut g = Vgic::new(GicVersion::V2, vcpus, 64);
    g.write(0, GICD_CTLR, 4, 0b11).unwrap();
    g
}

/// Enables SPI `intid` with `priority` in group 1, routed to vCPU `target`.
fn enable_spi(g: &mut Vgic, intid: u32, priority: u8, target: u64) {
    g.write(0, ISENABLER + 4 * u64::from(intid / 32), 4, 1 << (intid % 32)).unwrap();
    g.write(0, 0x80 + 4 * u64::from(intid / 32), 4, 0xffff_ffff).unwrap(); // IGROUPR: group 1
    g.write(0, IPRIORITYR + u64::from(intid), 1, u64::from(priority)).unwrap();
    match g.version() {
        GicVersion::V3 => g.write(0, IROUTER + 8 * u64::from(intid), 8, target).unwrap(),
        GicVersion::V2 => g.write(0, 0x800 + u64::from(intid), 1, 1 << target).unwrap(),
    };
}

fn intids(c: &[Candidate]) -> Vec<u32> {
    c.iter().map(|c| c.lr.vintid).collect()
}

/// The guest takes and completes every interrupt in its LRs (they come back invalid).
fn complete_all(g: &mut Vgic, vcpu: usize, plan: &EntryPlan) {
    let done: Vec<ListRegister> =
        plan.writes.iter().map(|w| ListRegister { state: LrState::Invalid, ..w.lr }).collect();
    g.sync_from_lrs(vcpu, &done);
}

#[test]
fn gicv3_distributor_reports_affinity_routing_and_its_size() {
    // IHI 0069 12.9.4: GICD_CTLR.ARE and DS read as one in a single-security, ARE-only GIC.
    let mut g = v3(2);
    assert_eq!(g.read(0, GICD_CTLR, 4).unwrap() & 0x53, 0x53);
    // IHI 0069 12.9.38: ITLinesNumber = 32 * (N + 1) INTIDs; IDbits = 10 bits.
    let typer = g.read(0, GICD_TYPER, 4).unwrap();
    assert_eq!(typer & 0x1f, 2, "96 INTIDs: 32 private and 64 SPIs");
    assert_eq!((typer >> 19) & 0x1f, 9);
    assert_eq!(g.read(0, 0xffe8, 4).unwrap() >> 4 & 0xf, 3, "GICD_PIDR2.ArchRev");
}

/// Runs a test on a GICv3 and a GICv2 vGIC.
fn both(vcpus: usize, test: impl Fn(Vgic)) {
    test(v3(vcpus));
    test(v2(vcpus));
}

#[test]
fn highest_priority_first_and_lower_intid_breaks_ties() {
    // IHI 0069 "Interrupt prioritization" / IHI 0048B 3.3: lower value, higher priority.
    both(1, |mut g| {
        enable_spi(&mut g, 40, 0x80, 0);
        enable_spi(&mut g, 41, 0x20, 0);
        enable_spi(&mut g, 42, 0x80, 0);
        for i in [42, 40, 41] {
            g.inject_edge(0, IntId(i));
        }
        assert_eq!(intids(&g.candidates(0)), [41, 40, 42], "{:?}", g.version());
    });
}

#[test]
fn gicv3_sgis_go_by_target_list_affinity_and_irm() {
    // IHI 0069 12.2.23 (ICC_SGI1R_EL1): TargetList, Aff1-3, IRM.
    let mut g = v3(4);
    for vcpu in 0..4 {
        g.write_redistributor(vcpu as u64 * GICR_FRAME_SIZE + SGI + ISENABLER, 4, 0xffff).unwrap();
        g.write_redistributor(vcpu as u64 * GICR_FRAME_SIZE + SGI + 0x80, 4, 0xffff_ffff).unwrap();
    }
    assert_eq!(g.generate_sgi(0, (5 << 24) | 0b0110), 0b0110, "SGI 5 to vCPUs 1 and 2");
    assert_eq!(intids(&g.candidates(1)), [5]);
    assert!(g.candidates(3).is_empty());
    assert_eq!(g.generate_sgi(1, (7 << 24) | (1 << 40)), 0b1101, "IRM: all but the sender");
    assert_eq!(g.generate_sgi(0, (1 << 16) | 1), 0, "Aff1 = 1 names no vCPU: ignored");
}

#[test]
fn gicv2_sgis_are_pending_per_source_and_none_is_lost() {
    // IHI 0048B "Software-generated interrupts" and 4.3.15 (GICD_SGIR): an SGI's pending state
    // is held per source CPU (hvisor issue 282).
    let mut g = v2(3);
    g.write(2, ISENABLER, 4, 0xffff).unwrap();
    g.write(0, 0xf00, 4, (1 << 18) | 3).unwrap(); // SGI 3 from vCPU 0 to vCPU 2
    g.write(1, 0xf00, 4, (1 << 18) | 3).unwrap(); // SGI 3 from vCPU 1 to vCPU 2
    assert_eq!(g.read(2, 0xf20 + 3, 1).unwrap(), 0b011, "SPENDSGIR: both sources");
    let mut sources = Vec::new();
    for _ in 0..2 {
        let plan = plan_entry(4, &g.candidates(2));
        assert_eq!(plan.writes.len(), 1);
        sources.push(plan.writes[0].lr.source);
        complete_all(&mut g, 2, &plan);
    }
    sources.sort();
    assert_eq!(sources, [0, 1]);
    assert!(g.candidates(2).is_empty());
    // TargetListFilter 1: everyone but the sender.
    assert_eq!(g.write(1, 0xf00, 4, (1 << 24) | 2).unwrap(), 0b101);
}

#[test]
fn level_interrupts_stay_pending_while_the_line_is_high_edge_ones_do_not() {
    // IHI 0069 4.1.2 / IHI 0048B 1.4.2: a level-sensitive interrupt is pending while its
    // input is asserted.
    both(1, level_and_edge);
}

fn level_and_edge(mut g: Vgic) {
    enable_spi(&mut g, 33, 0x10, 0);
    enable_spi(&mut g, 34, 0x10, 0);
    g.write(0, ICFGR + 8, 4, 2 << (2 * 2)).unwrap(); // INTID 34 edge
    g.set_level(0, IntId(33), true);
    g.inject_edge(0, IntId(34));
    let plan = plan_entry(4, &g.candidates(0));
    assert!(
        plan.writes.iter().any(|w| w.lr.vintid == 33 && w.lr.eoi_maintenance),
        "level: maintenance on EOI to re-sample"
    );
    complete_all(&mut g, 0, &plan);
    assert_eq!(intids(&g.candidates(0)), [33], "line still high: pending again; the edge is gone");
    g.set_level(0, IntId(33), false);
    let plan = plan_entry(4, &g.candidates(0));
    complete_all(&mut g, 0, &plan);
    assert!(g.candidates(0).is_empty());
}

#[test]
fn an_active_interrupt_can_be_pending_again() {
    // IHI 0069 4.1 / IHI 0048B 1.4.2: active and pending.
    both(1, active_and_pending);
}

fn active_and_pending(mut g: Vgic) {
    enable_spi(&mut g, 40, 0x10, 0);
    g.write(0, ICFGR + 8, 4, 2 << (2 * 8)).unwrap(); // edge
    g.inject_edge(0, IntId(40));
    let plan = plan_entry(4, &g.candidates(0));
    let taken: Vec<ListRegister> =
        plan.writes.iter().map(|w| ListRegister { state: LrState::Active, ..w.lr }).collect();
    g.sync_from_lrs(0, &taken);
    g.inject_edge(0, IntId(40));
    assert_eq!(g.candidates(0)[0].lr.state, LrState::PendingActive);
}

#[test]
fn more_pending_than_list_registers_asks_for_underflow_and_refills() {
    both(1, overflow_and_refill);
}

fn overflow_and_refill(mut g: Vgic) {
    for i in 0..6 {
        enable_spi(&mut g, 40 + i, 0x10 + i as u8, 0);
        g.inject_edge(0, IntId(40 + i));
    }
    let plan = plan_entry(4, &g.candidates(0));
    assert_eq!(plan.writes.iter().map(|w| w.index).collect::<Vec<_>>(), [0, 1, 2, 3], "only the LRs in use");
    assert_eq!(plan.writes.iter().map(|w| w.lr.vintid).collect::<Vec<_>>(), [40, 41, 42, 43]);
    assert!(plan.underflow);
    complete_all(&mut g, 0, &plan);
    let refill = plan_entry(4, &g.candidates(0));
    assert_eq!(refill.writes.iter().map(|w| w.lr.vintid).collect::<Vec<_>>(), [44, 45]);
    assert!(!refill.underflow);
}

#[test]
fn disabled_groups_forward_nothing() {
    // IHI 0069 12.9.4 / IHI 0048B 4.3.1: with a group's enable clear in GICD_CTLR, its
    // interrupts are not forwarded.
    both(1, |mut g| {
        enable_spi(&mut g, 40, 0x10, 0);
        g.inject_edge(0, IntId(40));
        g.write(0, GICD_CTLR, 4, 0b01).unwrap();
        assert!(g.candidates(0).is_empty());
        g.write(0, GICD_CTLR, 4, 0b10).unwrap();
        assert_eq!(intids(&g.candidates(0)), [40]);
    });
}

#[test]
fn a_higher_priority_interrupt_is_offered_while_a_lower_one_is_active() {
    // IHI 0069 "Preemption" / IHI 0048B 3.3: a pending interrupt of higher priority than the
    // running one preempts it. Both must be in the list registers for the CPU interface to
    // do so.
    both(1, |mut g| {
        enable_spi(&mut g, 40, 0x80, 0);
        enable_spi(&mut g, 41, 0x10, 0);
        g.write(0, ICFGR + 8, 4, (2 << (2 * 8)) | (2 << (2 * 9))).unwrap(); // both edge
        g.inject_edge(0, IntId(40));
        let plan = plan_entry(4, &g.candidates(0));
        let active: Vec<ListRegister> =
            plan.writes.iter().map(|w| ListRegister { state: LrState::Active, ..w.lr }).collect();
        g.sync_from_lrs(0, &active);
        g.inject_edge(0, IntId(41));
        let plan = plan_entry(4, &g.candidates(0));
        let lrs: Vec<(u32, LrState)> = plan.writes.iter().map(|w| (w.lr.vintid, w.lr.state)).collect();
        assert_eq!(lrs, [(40, LrState::Active), (41, LrState::Pending)], "{:?}", g.version());
    });
}

#[test]
fn eoimode_1_priority_drop_then_deactivation() {
    // IHI 0069 "Interrupt lifecycle" (ICC_CTLR_EL1.EOImode = 1) / IHI 0048B GICC_CTLR.EOImodeNS:
    // the guest's EOI only drops the running priority and the interrupt stays active until
    // its separate deactivation (ICV_DIR / GICV_DIR). The list register says which.
    both(1, |mut g| {
        enable_spi(&mut g, 40, 0x10, 0);
        g.write(0, ICFGR + 8, 4, 2 << (2 * 8)).unwrap(); // edge
        g.inject_edge(0, IntId(40));
        let plan = plan_entry(4, &g.candidates(0));
        // Acknowledged, then EOI (priority drop): still active in the LR.
        let dropped: Vec<ListRegister> =
            plan.writes.iter().map(|w| ListRegister { state: LrState::Active, ..w.lr }).collect();
        g.sync_from_lrs(0, &dropped);
        assert_eq!(g.candidates(0).iter().map(|c| c.lr.state).collect::<Vec<_>>(), [LrState::Active]);
        assert!(g.irq(0, IntId(40)).unwrap().active);
        // Deactivated: the LR comes back invalid and the interrupt is done.
        complete_all(&mut g, 0, &plan);
        assert!(g.candidates(0).is_empty());
        assert!(!g.irq(0, IntId(40)).unwrap().active);
    });
}

#[test]
fn reserved_and_read_only_registers_are_raz_wi() {
    let mut g = v3(2);
    for offset in [0x0010, 0x0f00, 0x0f10, 0x7fc0, 0xc000, 0xfff0] {
        assert_eq!(g.read(0, offset, 4), Ok(0), "offset {offset:#x}");
        g.write(0, offset, 4, 0xffff_ffff).unwrap();
    }
    // GICD_TYPER is read-only: a write changes nothing.
    let typer = g.read(0, GICD_TYPER, 4).unwrap();
    g.write(0, GICD_TYPER, 4, 0).unwrap();
    assert_eq!(g.read(0, GICD_TYPER, 4).unwrap(), typer);
    // With ARE, the distributor's private bank is RAZ/WI (IHI 0069 12.9).
    g.write(0, ISENABLER, 4, 0xffff_ffff).unwrap();
    assert_eq!(g.read(0, ISENABLER, 4), Ok(0));
    assert!(!g.irq(0, IntId(27)).unwrap().enabled);
}

#[test]
fn byte_accesses_only_where_the_spec_allows_them() {
    // IHI 0069, "GIC memory-mapped register access": IPRIORITYR is byte-accessible; the bit
    // registers are word-only.
    let mut g = v3(1);
    g.write(0, IPRIORITYR + 41, 1, 0xa0).unwrap();
    assert_eq!(g.read(0, IPRIORITYR + 40, 4).unwrap(), 0xa000);
    assert_eq!(g.read(0, ISENABLER + 4, 1), Err(AccessError::BadWidth { offset: ISENABLER + 4, bytes: 1 }));
    assert_eq!(g.write(0, ISPENDR + 4, 2, 1), Err(AccessError::BadWidth { offset: ISPENDR + 4, bytes: 2 }));
    assert_eq!(g.read(0, ISENABLER + 6, 4), Err(AccessError::Unaligned { offset: ISENABLER + 6 }));
    // IROUTER is 64-bit, with 32-bit halves.
    g.write(0, IROUTER + 8 * 40, 8, 0xff_0000_0001).unwrap();
    assert_eq!(g.read(0, IROUTER + 8 * 40, 8), Ok(0xff_0000_0001));
    assert_eq!(g.read(0, IROUTER + 8 * 40 + 4, 4), Ok(0xff));
    assert_eq!(g.read(0, IROUTER + 8 * 40, 2), Err(AccessError::BadWidth { offset: IROUTER + 8 * 40, bytes: 2 }));
}

#[test]
fn redistributors_hold_the_private_interrupts_of_their_vcpu() {
    let mut g = v3(2);
    let rd1 = GICR_FRAME_SIZE;
    // IHI 0069, GICR_TYPER: Last marks the last redistributor; Affinity_Value is the MPIDR.
    assert_eq!(g.read_redistributor(0x8, 8).unwrap() & (1 << 4), 0);
    assert_eq!(g.read_redistributor(rd1 + 0x8, 8).unwrap() & (1 << 4), 1 << 4);
    assert_eq!(g.read_redistributor(rd1 + 0x8, 8).unwrap() >> 32, 1);
    // GICR_WAKER: ProcessorSleep and ChildrenAsleep.
    assert_eq!(g.read_redistributor(0x14, 4), Ok(0b110));
    g.write_redistributor(0x14, 4, 0).unwrap();
    assert_eq!(g.read_redistributor(0x14, 4), Ok(0));
    // PPI 27 enabled on vCPU 1 only.
    g.write_redistributor(rd1 + SGI + ISENABLER, 4, 1 << 27).unwrap();
    assert!(g.irq(1, IntId(27)).unwrap().enabled);
    assert!(!g.irq(0, IntId(27)).unwrap().enabled);
    assert_eq!(g.read_redistributor(rd1 + SGI + ISENABLER, 4), Ok(1 << 27));
    assert_eq!(g.read_redistributor(2 * GICR_FRAME_SIZE, 4), Err(AccessError::NoSuchVcpu { vcpu: 2 }));
    assert_eq!(g.read_redistributor(SGI + 0x800, 4), Ok(0), "no ITARGETSR in an SGI frame");
}

#[test]
fn list_register_formats_round_trip_without_truncation() {
    let lr = ListRegister {
        vintid: 1019,
        state: LrState::PendingActive,
        priority: 0xa8,
        group1: true,
        hw: Some(27),
        eoi_maintenance: false,
        source: 0,
    };
    assert_eq!(IchLr::encode(&lr).decode(), lr);
    assert_eq!(IchLr::encode(&lr).0 >> 62, 3);
    assert_eq!(IchLr::encode(&lr).0 & 0xffff_ffff, 1019, "vINTID is 32 bits in ICH_LR");
    let sw = ListRegister {
        vintid: 3,
        state: LrState::Pending,
        priority: 0x10,
        group1: false,
        hw: None,
        eoi_maintenance: true,
        source: 5,
    };
    assert_eq!(GichLr::encode(&sw).decode(), sw);
    assert_eq!(GichLr::encode(&sw).0, 3 | (5 << 10) | (1 << 19) | (2 << 23) | (1 << 28));
    assert_eq!(IchLr::encode(&sw).decode(), ListRegister { source: 0, ..sw });
}

#[test]
fn hardware_mapped_interrupts_are_deactivated_by_the_guest() {
    // EOImode 1 with HW = 1: the guest's deactivation of the virtual interrupt deactivates
    // the physical one (IHI 0069, ICH_LR<n>_EL2.HW); no maintenance interrupt is needed.
    let mut g = v3(1);
    g.write_redistributor(SGI + ISENABLER, 4, 1 << 27).unwrap();
    g.write_redistributor(SGI + 0x80, 4, 1 << 27).unwrap();
    g.set_hw(0, IntId(27), Some(27));
    g.set_level(0, IntId(27), true);
    let plan = plan_entry(4, &g.candidates(0));
    let lr = plan.writes[0].lr;
    assert_eq!((lr.vintid, lr.hw, lr.eoi_maintenance), (27, Some(27), false));
    // Deactivated by the guest: the line is the hardware's again, not pending here.
    complete_all(&mut g, 0, &plan);
    assert!(g.candidates(0).is_empty());
    // Acknowledged but not yet deactivated when the vCPU exits: active only, never pending
    // again from the old line level (that would interrupt the guest forever).
    g.set_level(0, IntId(27), true);
    let plan = plan_entry(4, &g.candidates(0));
    let acked: Vec<ListRegister> =
        plan.writes.iter().map(|w| ListRegister { state: LrState::Active, ..w.lr }).collect();
    g.sync_from_lrs(0, &acked);
    assert_eq!(g.candidates(0)[0].lr.state, LrState::Active);
}

#[test]
fn a_full_set_of_list_registers_never_panics() {
    let mut g = v3(1);
    for i in 0..64 {
        enable_spi(&mut g, 32 + i, i as u8, 0);
        g.inject_edge(0, IntId(32 + i));
    }
    for lrs in [0, 1, 4, 16] {
        let plan = plan_entry(lrs, &g.candidates(0));
        assert_eq!(plan.writes.len(), lrs);
        assert!(plan.underflow);
    }
}

/// A fake list-register file that records which registers were touched.
struct FakeLrs {
    regs: [Option<ListRegister>; 4],
    touched: Vec<usize>,
    underflow: bool,
}

impl ListRegisters for FakeLrs {
    fn count(&self) -> usize {
        self.regs.len()
    }
    fn read(&self, n: usize) -> ListRegister {
        self.regs[n].unwrap_or(IchLr(0).decode())
    }
    fn write(&mut self, n: usize, lr: Option<&ListRegister>) {
        self.touched.push(n);
        self.regs[n] = lr.copied();
    }
    fn enable(&mut self, underflow: bool) {
        self.underflow = underflow;
    }
}

#[test]
fn load_and_save_touch_only_the_list_registers_in_use() {
    let mut g = v3(1);
    let mut lrs = FakeLrs { regs: [None; 4], touched: Vec::new(), underflow: false };
    for i in 0..2 {
        enable_spi(&mut g, 40 + i, 0x10, 0);
        g.inject_edge(0, IntId(40 + i));
    }
    let in_use = load(&g, 0, &mut lrs, 0);
    assert_eq!((in_use, lrs.touched.as_slice(), lrs.underflow), (2, [0, 1].as_slice(), false));
    // The guest completes INTID 40; 41 is still pending in LR 1.
    lrs.regs[0] = Some(ListRegister { state: LrState::Invalid, ..lrs.regs[0].unwrap() });
    save(&mut g, 0, &lrs, in_use);
    lrs.touched.clear();
    let in_use = load(&g, 0, &mut lrs, in_use);
    assert_eq!(in_use, 1);
    assert_eq!(lrs.regs[0].map(|l| l.vintid), Some(41));
    assert_eq!(lrs.touched, [0, 1], "LR 0 rewritten, LR 1 cleared, LRs 2 and 3 untouched");
    assert_eq!(lrs.regs[1], None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever a vCPU writes to the distributor, at any offset, width and value: no panic,
    /// and another vCPU's private interrupts change only through the SGI paths.
    #[test]
    fn guest_writes_never_panic_nor_touch_another_vcpus_private_state(
        v2_gic in any::<bool>(),
        writes in prop::collection::vec((0u64..0x1_0000, prop_oneof![Just(1u8), Just(2), Just(4), Just(8)], any::<u64>()), 1..40),
    ) {
        let mut g = if v2_gic { v2(2) } else { v3(2) };
        let before: Vec<IrqState> = (0..32).map(|i| *g.irq(1, IntId(i)).unwrap()).collect();
        for (offset, bytes, value) in writes {
            let _ = g.write(0, offset, bytes, value);
            let _ = g.read(0, offset, bytes);
        }
        for i in 16..32 {
            prop_assert_eq!(*g.irq(1, IntId(i)).unwrap(), before[i as usize], "PPI {} of vCPU 1", i);
        }
        // The planner keeps every candidate it cannot place for later: none is lost.
        for vcpu in 0..2 {
            let c = g.candidates(vcpu);
            let plan = plan_entry(4, &c);
            prop_assert_eq!(plan.writes.len(), c.len().min(4));
            prop_assert_eq!(plan.underflow, c.len() > 4);
        }
    }

    /// The planner puts the highest-priority candidates in the LRs (after active ones).
    #[test]
    fn the_planner_keeps_the_highest_priorities(prios in prop::collection::vec(any::<u8>(), 1..20), lrs in 1usize..6) {
        let mut g = v3(1);
        for (i, p) in prios.iter().enumerate() {
            enable_spi(&mut g, 32 + i as u32, *p, 0);
            g.inject_edge(0, IntId(32 + i as u32));
        }
        let c = g.candidates(0);
        let plan = plan_entry(lrs, &c);
        let placed: Vec<u8> = plan.writes.iter().map(|w| w.lr.priority).collect();
        let mut all: Vec<u8> = prios.clone();
        all.sort();
        prop_assert_eq!(placed, all[..lrs.min(all.len())].to_vec());
    }
}
