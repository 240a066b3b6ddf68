//! The list register the vector may write again (`Distributor::sgi_to_show_again`,
//! docs/vgic.md "The same SGI shown again in the vector"): offered only where writing the
//! record's own value back makes the record the truth, and then the vGIC after the next
//! take-back is the one the general path (the SGI generated, planned, taken back) leaves.

mod common;

use common::*;
use proptest::prelude::*;
use vgic::*;

/// SGI `intid` from vCPU 0 to vCPU `target` (ICC_SGI1R_EL1, or GICD_SGIR).
fn sgi(g: &mut Vgic, target: usize, intid: u32) {
    sgi_from(g, 0, target, intid);
}

fn sgi_from(g: &mut Vgic, source: usize, target: usize, intid: u32) {
    match g.version() {
        GicVersion::V3 => {
            g.generate_sgi(source, SgiRegister::Sgi1r, (u64::from(intid) << 24) | (1 << target)).unwrap();
        }
        GicVersion::V2 => g.write(source, GICD_SGIR, 4, (1 << (16 + target)) | u64::from(intid)).unwrap(),
    }
}

/// vCPU 1 of a vGIC of `version` with 3 vCPUs took SGI `intid` (priority `priority`) from
/// vCPU 0 through the plan and completed it, with no exit since: what the vector finds when
/// the next one is posted.
fn taken_once(intid: u32, priority: u8) -> (Vgic, FakeLrs) {
    taken_once_on(GicVersion::V3, intid, priority)
}

fn taken_once_on(version: GicVersion, intid: u32, priority: u8) -> (Vgic, FakeLrs) {
    let mut g = gic(version, 3);
    private_irq(&mut g, 1, intid, priority);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    sgi(&mut g, 1, intid);
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.ack(), Some((intid, 0)));
    lrs.deactivate(intid);
    (g, lrs)
}

fn again(g: &Vgic, vcpu: usize) -> Option<(usize, u64)> {
    g.sgi_to_show_again(vcpu, g.interface(vcpu).unwrap())
}

/// What the guest does with the SGI shown the second time before its next exit.
#[derive(Clone, Copy, Debug)]
enum Guest {
    Nothing,
    Acknowledges,
    Completes,
}

fn guest_does(lrs: &mut FakeLrs, intid: u32, what: Guest) {
    match what {
        Guest::Nothing => {}
        Guest::Acknowledges => assert_eq!(lrs.ack(), Some((intid, 0))),
        Guest::Completes => {
            assert_eq!(lrs.ack(), Some((intid, 0)));
            lrs.deactivate(intid);
        }
    }
}

/// The second SGI shown by the vector (the record's value written back) and by the general
/// path (generated, the first one's register taken back, planned), then the guest does
/// `what` and the vCPU exits: both leave the same vGIC and the same list registers.
fn check_same_as_general(version: GicVersion, intid: u32, priority: u8, rounds: usize, what: Guest) {
    let (mut fast, mut fast_lrs) = taken_once_on(version, intid, priority);
    let (mut general, mut general_lrs) = (fast.clone(), fast_lrs.clone());
    for round in 0..rounds {
        let (n, raw) = again(&fast, 1).unwrap_or_else(|| panic!("round {round}: not offered"));
        assert_eq!(fast_lrs.empty_status() & 0xf, 0xf, "every list register is empty");
        // The vector: the record's value written back as it is.
        fast_lrs.regs[n] = raw;
        sgi(&mut general, 1, intid);
        general.sync_from_hw(1, &mut general_lrs).unwrap();
        general.flush_to_hw(1, &mut general_lrs).unwrap();
        assert_eq!(fast_lrs.valid(), general_lrs.valid(), "round {round}: the guest sees the same");
        if round + 1 < rounds {
            guest_does(&mut fast_lrs, intid, Guest::Completes);
            guest_does(&mut general_lrs, intid, Guest::Completes);
        }
    }
    guest_does(&mut fast_lrs, intid, what);
    guest_does(&mut general_lrs, intid, what);
    fast.sync_from_hw(1, &mut fast_lrs).unwrap();
    general.sync_from_hw(1, &mut general_lrs).unwrap();
    assert_eq!(fast, general, "the vGIC after the take-back");
    assert_eq!(fast_lrs.valid(), general_lrs.valid());
    assert_eq!(fast.has_pending(1), general.has_pending(1));
}

#[test]
fn a_completed_sgi_s_register_is_offered_with_the_value_the_plan_wrote() {
    let (g, lrs) = taken_once(3, 0xa0);
    let (n, raw) = again(&g, 1).expect("offered");
    assert_eq!(n, 0);
    let lr = IchLr(raw).decode();
    assert_eq!((lr.vintid, lr.state, lr.priority, lr.group1, lr.hw), (IntId(3), LrState::Pending, 0xa0, true, None));
    assert!(!lr.eoi_maintenance);
    assert_eq!(lrs.valid(), [], "the guest completed it: nothing shown");
}

#[test]
fn shown_again_by_the_vector_leaves_what_the_general_path_leaves() {
    for version in [GicVersion::V3, GicVersion::V2] {
        for what in [Guest::Nothing, Guest::Acknowledges, Guest::Completes] {
            for rounds in 1..4 {
                check_same_as_general(version, 2, 0x80, rounds, what);
            }
        }
    }
}

#[test]
fn a_gicv2_sgi_is_offered_with_its_source_and_not_while_another_source_s_waits() {
    let (g, _) = taken_once_on(GicVersion::V2, 3, 0xa0);
    let (n, raw) = again(&g, 1).expect("offered");
    let lr = GichLr(raw as u32).decode();
    assert_eq!((n, lr.vintid, lr.state, lr.source), (0, IntId(3), LrState::Pending, 0));
    // vCPU 2's SGI 3 pending for vCPU 1 as well: it comes in by the plan, not the vector.
    let (mut g, _) = taken_once_on(GicVersion::V2, 3, 0xa0);
    sgi_from(&mut g, 2, 1, 3);
    assert_eq!(again(&g, 1), None);
}

#[test]
fn nothing_is_offered_for_an_sgi_the_vector_cannot_be_posted_or_a_private_interrupt() {
    let (g, _) = taken_once(8, 0xa0);
    assert_eq!(again(&g, 1), None, "SGIs 8 to 15 are not posted");
    let mut g = v3(2);
    private_irq(&mut g, 1, 20, 0xa0);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    private_write(&mut g, 1, ISPENDR, 4, 1 << 20);
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(again(&g, 1), None, "a PPI");
}

#[test]
fn nothing_is_offered_once_the_sgi_is_disabled_or_its_priority_or_group_changed() {
    let (mut g, _) = taken_once(3, 0xa0);
    private_write(&mut g, 1, ICENABLER, 4, 1 << 3);
    assert_eq!(again(&g, 1), None, "disabled");
    let (mut g, _) = taken_once(3, 0xa0);
    private_write(&mut g, 1, IPRIORITYR + 3, 1, 0x40);
    assert_eq!(again(&g, 1), None, "another priority");
    let (mut g, _) = taken_once(3, 0xa0);
    private_write(&mut g, 1, IGROUPR, 4, 0);
    assert_eq!(again(&g, 1), None, "Group 0");
    let (mut g, _) = taken_once(3, 0xa0);
    g.write(0, GICD_CTLR, 4, 0b01).unwrap();
    assert_eq!(again(&g, 1), None, "Group 1 disabled at the distributor");
    let (mut g, _) = taken_once_on(GicVersion::V2, 3, 0xa0);
    private_write(&mut g, 1, IPRIORITYR + 3, 1, 0x40);
    assert_eq!(again(&g, 1), None, "GICv2: another priority");
}

#[test]
fn nothing_is_offered_while_the_sgi_has_a_pending_state_the_register_does_not_hold() {
    let (mut g, _) = taken_once(3, 0xa0);
    // Generated again through the general path (delivered, not posted): its latch is set.
    sgi(&mut g, 1, 3);
    assert_eq!(again(&g, 1), None);
}

#[test]
fn nothing_is_offered_once_a_take_back_read_the_register_active_or_emptied_it() {
    let mut g = v3(2);
    private_irq(&mut g, 1, 3, 0xa0);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    sgi(&mut g, 1, 3);
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert!(again(&g, 1).is_some(), "pending as written");
    assert_eq!(lrs.ack(), Some((3, 0)));
    g.sync_from_hw(1, &mut lrs).unwrap();
    assert_eq!(again(&g, 1), None, "its record now shows it active");
    lrs.deactivate(3);
    g.sync_from_hw(1, &mut lrs).unwrap();
    assert_eq!(g.interface(1).unwrap().in_use(), 0);
    assert_eq!(again(&g, 1), None, "taken back: the vCPU holds no register");
}

#[test]
fn nothing_is_offered_while_the_vcpu_holds_two_registers_or_asks_for_maintenance() {
    let mut g = v3(2);
    private_irq(&mut g, 1, 3, 0xa0);
    private_irq(&mut g, 1, 4, 0xa0);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    sgi(&mut g, 1, 3);
    sgi(&mut g, 1, 4);
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(g.interface(1).unwrap().in_use(), 2);
    assert_eq!(again(&g, 1), None, "two registers");
    // One list register for three SGIs: the underflow maintenance interrupt is asked for.
    let mut g = v3(2);
    for intid in 3..6 {
        private_irq(&mut g, 1, intid, 0xa0);
    }
    let mut lrs = FakeLrs::for_gic(&g, 1);
    for intid in 3..6 {
        sgi(&mut g, 1, intid);
    }
    g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(g.interface(1).unwrap().in_use(), 1);
    assert_ne!(g.interface(1).unwrap().maintenance(), Maintenance::NONE);
    assert_eq!(again(&g, 1), None, "a maintenance interrupt asked for");
}

proptest! {
    #[test]
    fn any_sgi_shown_again_any_number_of_times_leaves_what_the_general_path_leaves(
        intid in 0u32..8,
        priority in (0u8..32).prop_map(|p| p << 3),
        rounds in 1usize..6,
        what in prop_oneof![Just(Guest::Nothing), Just(Guest::Acknowledges), Just(Guest::Completes)],
    ) {
        check_same_as_general(GicVersion::V3, intid, priority, rounds, what);
        check_same_as_general(GicVersion::V2, intid, priority, rounds, what);
    }
}
