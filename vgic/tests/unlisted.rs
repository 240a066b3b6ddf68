//! More interrupts active on a vCPU than its list registers hold: the guest's deactivation
//! of one that no list register shows is only counted by the virtual CPU interface
//! (ICH_HCR_EL2.EOIcount, GICH_HCR.EOICount: IHI 0069H 12.4, IHI 0048B 5.3), and the
//! hypervisor deactivates that many of the vCPU's active interrupts left out of the list
//! registers, highest priority first (docs/vgic.md, "Active interrupts no list register
//! shows"). Without it, such an interrupt stayed active for good. A GICv3 guest with
//! EOImode 1 may deactivate them in any order: its ICV_DIR_EL1 writes trap meanwhile
//! (ICH_HCR_EL2.TDIR) and name the interrupt (`deactivate_by_dir`).

mod common;

use common::*;
use proptest::prelude::*;
use vgic::*;

/// SPIs `intids`, edge-triggered, routed to vCPU 0, with priorities 0x10, 0x20, ... in
/// that order, set active through GICD_ISACTIVER<n> (as a guest restoring its state would
/// leave them).
fn active_spis(g: &mut Distributor, intids: &[u32]) {
    for (k, &intid) in intids.iter().enumerate() {
        spi(g, intid, 0x10 * (k as u8 + 1), 0);
        let (word, mask) = bit(intid);
        g.write(0, ISACTIVER + word, 4, mask).unwrap();
    }
}

fn active(g: &Distributor, intid: u32) -> bool {
    g.interrupt(0, IntId(intid)).unwrap().active
}

#[test]
fn five_active_interrupts_on_four_list_registers_are_all_deactivated_by_the_guest() {
    both(1, |mut g| {
        active_spis(&mut g, &[32, 33, 34, 35, 36]);
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [32, 33, 34, 35], "the four of highest priority are shown");
        assert!(lrs.maintenance.entry_not_present, "36 is active and left out: LRENPIE");
        // The guest ends its handlers, innermost (highest priority) first: 36's EOI finds no
        // list register, and is counted.
        for intid in 32..37 {
            lrs.deactivate(intid);
        }
        assert_eq!(lrs.eoi_count, 1);
        assert!(lrs.maintenance_asserted(), "the count brings the vCPU out");
        assert!(!g.interface(0).unwrap().came_back_unchanged(&lrs), "the take-back must read the count");
        assert!(g.sync_from_hw(0, &mut lrs).unwrap(), "a change to plan for");
        for intid in 32..37 {
            assert!(!active(&g, intid), "{intid} is still active");
        }
        assert_eq!(lrs.eoi_count, 0, "the count is consumed");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty());
        assert_eq!(lrs.maintenance, Maintenance::NONE);
    });
}

#[test]
fn with_one_list_register_the_counted_deactivation_is_the_highest_priority_left_out() {
    both(1, |mut g| {
        active_spis(&mut g, &[40, 41, 42]);
        let mut lrs = FakeLrs::for_gic(&g, 1);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [40]);
        // 40 through its list register, then 41 counted, before any exit.
        lrs.deactivate(40);
        lrs.deactivate(41);
        assert_eq!(lrs.eoi_count, 1);
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(!active(&g, 40) && !active(&g, 41));
        assert!(active(&g, 42), "the guest has not ended 42: it stays active");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(42, LrState::Active, 0)]);
        assert!(!lrs.maintenance.entry_not_present, "nothing active is left out now");
        lrs.deactivate(42);
        assert_eq!(lrs.eoi_count, 0, "through its list register");
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(!active(&g, 42));
    });
}

#[test]
fn a_deactivation_that_leaves_the_list_registers_as_they_were_is_still_taken_back() {
    both(1, |mut g| {
        active_spis(&mut g, &[40, 41]);
        let mut lrs = FakeLrs::for_gic(&g, 1);
        g.flush_to_hw(0, &mut lrs).unwrap();
        // 41 ended first (a guest out of priority order, or one that set 40 active itself):
        // its list register, 40's, comes back as it went in.
        lrs.deactivate(41);
        assert!(lrs.maintenance_asserted());
        assert!(!g.interface(0).unwrap().came_back_unchanged(&lrs), "the count must be read");
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(active(&g, 40) && !active(&g, 41));
    });
}

#[test]
fn a_kick_s_one_step_take_back_leaves_a_counted_deactivation_to_the_general_one() {
    both(1, |mut g| {
        active_spis(&mut g, &[40, 41]);
        let mut lrs = FakeLrs::for_gic(&g, 1);
        g.flush_to_hw(0, &mut lrs).unwrap();
        lrs.deactivate(40);
        lrs.deactivate(41);
        // One list register, emptied by the guest: the kick's case, but for the count.
        assert!(g.interface(0).unwrap().holds_at_most_one_emptied(&lrs));
        assert!(!g.take_back_one_and_plan(0, &mut lrs).unwrap(), "declined: the take-back reads EOIcount");
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(!active(&g, 40) && !active(&g, 41));
        assert!(lrs.valid().is_empty(), "41 is not shown active again");
    });
}

#[test]
fn a_level_interrupt_deactivated_while_left_out_is_pending_again_if_its_input_is_high() {
    both(1, |mut g| {
        active_spis(&mut g, &[32, 33]);
        spi(&mut g, 44, 0x30, 0);
        set_trigger(&mut g, 44, Trigger::Level);
        g.set_level(IntId(44), 0, true).unwrap();
        let (word, mask) = bit(44);
        g.write(0, ISACTIVER + word, 4, mask).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 2);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [32, 33]);
        for intid in [32, 33, 44] {
            lrs.deactivate(intid);
        }
        g.sync_from_hw(0, &mut lrs).unwrap();
        let s = g.interrupt(0, IntId(44)).unwrap();
        assert!(!s.active && s.pending, "its input is high: pending again ({s:?})");
        assert_eq!(deliver_all(&mut g, 0, &mut lrs)[..1], [(44, 0)]);
    });
}

#[test]
fn a_hardware_mapped_interrupt_deactivated_while_left_out_is_deactivated_by_the_hypervisor() {
    both(1, |mut g| {
        active_spis(&mut g, &[32, 33, 40]);
        g.set_hw(IntId(40), 0, Some(IntId(40))).unwrap();
        private_irq(&mut g, 0, 27, 0x80);
        g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
        private_write(&mut g, 0, ISACTIVER, 4, 1 << 27);
        let mut lrs = FakeLrs::for_gic(&g, 2);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [32, 33]);
        for intid in [32, 33, 40, 27] {
            lrs.deactivate(intid);
        }
        assert_eq!(lrs.eoi_count, 2);
        assert_eq!(lrs.physical_deactivations, [], "no HW = 1 list register showed 40 or 27");
        let mut lines = RetiredLines::default();
        g.sync_from_hw_sampling(0, &mut lrs, &mut AssumeAsserted, &mut lines).unwrap();
        assert!(!active(&g, 40) && !active(&g, 27));
        let mut spis = vec![];
        g.deactivate_retired(|p| spis.push(p.0));
        assert_eq!(spis, [40], "the passthrough SPI, from any CPU");
        assert_eq!(lines.iter().collect::<Vec<_>>(), [IntId(27)], "the timer's PPI, on this CPU");
    });
}

#[test]
fn lrenpie_is_asked_for_only_while_an_active_interrupt_is_left_out() {
    both(1, |mut g| {
        // Six pending, none active: the underflow interrupt brings the rest in, and no
        // deactivation can miss a list register.
        for intid in 32..38 {
            spi(&mut g, intid, 0x80, 0);
            g.inject_edge(IntId(intid), 0).unwrap();
        }
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.maintenance.underflow && !lrs.maintenance.entry_not_present);
        assert!(g.interface(0).unwrap().came_back_unchanged(&lrs), "an exit with nothing taken takes nothing back");
        // Four taken and left active: the two still pending are left out, but no active one.
        for _ in 0..4 {
            lrs.ack().unwrap();
        }
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(!lrs.maintenance.entry_not_present, "{:?} {:?}", lrs.valid(), lrs.maintenance);
        // A fifth active one (GICD_ISACTIVER) is left out: asked for.
        let (word, mask) = bit(38);
        spi(&mut g, 38, 0x90, 0);
        g.write(0, ISACTIVER + word, 4, mask).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.maintenance.entry_not_present);
    });
}

/// A GICv3 vGIC with SPIs `intids` active as `active_spis` leaves them, planned on four
/// list registers of a guest with EOImode 1.
fn eoi_mode_1_with_active(intids: &[u32]) -> (Vgic, FakeLrs) {
    let mut g = v3(1);
    active_spis(&mut g, intids);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    lrs.eoi_split = true;
    g.flush_to_hw(0, &mut lrs).unwrap();
    (g, lrs)
}

/// The guest's ICV_DIR_EL1 write of `value`, trapped: the run loop's answer, then its plan.
fn trapped_dir(g: &mut Vgic, lrs: &mut FakeLrs, value: u64) -> RetiredLines {
    assert!(lrs.maintenance.entry_not_present, "DIR traps only while an active interrupt is left out");
    let mut retired = RetiredLines::default();
    g.deactivate_by_dir(0, lrs, value, &mut retired).unwrap();
    g.flush_to_hw(0, lrs).unwrap();
    retired
}

#[test]
fn an_eoi_mode_1_guest_s_dir_ends_the_interrupt_it_names_in_any_order() {
    let (mut g, mut lrs) = eoi_mode_1_with_active(&[32, 33, 34, 35, 36, 37]);
    assert_eq!(lrs.intids(), [32, 33, 34, 35]);
    // Their EOIs drop the priority only; QEMU counts those of 36 and 37 in EOIcount all the
    // same, which ends nothing.
    lrs.drop_priority_unlisted(37);
    lrs.drop_priority_unlisted(36);
    g.sync_from_hw(0, &mut lrs).unwrap();
    assert!((32..38).all(|i| active(&g, i)), "an EOI with EOImode 1 deactivates nothing");
    g.flush_to_hw(0, &mut lrs).unwrap();
    // 37 first, the lowest priority: EOIcount could only have said "one", and the
    // highest-priority one left out, 36, would have been ended instead.
    trapped_dir(&mut g, &mut lrs, 37);
    assert!(active(&g, 36) && !active(&g, 37));
    // A listed one, out of order: its list register is emptied and 36 takes it.
    trapped_dir(&mut g, &mut lrs, 34);
    assert!(!active(&g, 34));
    assert_eq!(lrs.intids(), [32, 33, 35, 36]);
    assert!(!lrs.maintenance.entry_not_present, "everything active is shown: DIR no longer traps");
    for intid in [36, 32, 35, 33] {
        lrs.deactivate(intid);
    }
    assert_eq!(lrs.eoi_count, 0, "each found its list register");
    g.sync_from_hw(0, &mut lrs).unwrap();
    assert!((32..38).all(|i| !active(&g, i)));
}

#[test]
fn a_dir_that_deactivates_nothing_changes_nothing() {
    let (mut g, mut lrs) = eoi_mode_1_with_active(&[32, 33, 34, 35, 36]);
    let before = (g.clone(), lrs.clone());
    // Not active, special, an LPI's, all ones, and INTID 36 in bits the register ignores.
    for value in [40, 1023, 8192, u64::MAX, (1 << 24) | 1020] {
        trapped_dir(&mut g, &mut lrs, value);
        assert_eq!((&g, lrs.intids()), (&before.0, before.1.intids()), "DIR {value:#x}");
    }
    // EOImode 0: DIR does nothing (IHI 0069H, ICV_DIR_EL1), as the interface would do.
    lrs.eoi_split = false;
    trapped_dir(&mut g, &mut lrs, 36);
    trapped_dir(&mut g, &mut lrs, 32);
    assert!((32..37).all(|i| active(&g, i)));
}

#[test]
fn a_dir_of_an_active_and_pending_interrupt_leaves_it_pending() {
    let (mut g, mut lrs) = eoi_mode_1_with_active(&[32, 33, 34, 35, 36]);
    g.inject_edge(IntId(33), 0).unwrap();
    g.sync_from_hw(0, &mut lrs).unwrap();
    g.flush_to_hw(0, &mut lrs).unwrap();
    assert!(lrs.valid().contains(&(33, LrState::PendingActive, 0)));
    trapped_dir(&mut g, &mut lrs, 33);
    let s = g.interrupt(0, IntId(33)).unwrap();
    assert!(!s.active && s.pending, "{s:?}");
    // The four active ones fill the list registers; once the guest ends them, 33 is taken.
    assert_eq!(lrs.intids(), [32, 34, 35, 36]);
    for intid in [32, 34, 35, 36] {
        lrs.deactivate(intid);
    }
    g.sync_from_hw(0, &mut lrs).unwrap();
    assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(33, 0)]);
}

#[test]
fn a_dir_of_a_hardware_mapped_interrupt_deactivates_its_physical_interrupt() {
    let mut g = v3(1);
    // Priorities 0x10 to 0x50, and the timer's PPI 0xa0: 36 and 27 are left out.
    active_spis(&mut g, &[32, 33, 40, 34, 36]);
    g.set_hw(IntId(40), 0, Some(IntId(40))).unwrap();
    private_irq(&mut g, 0, 27, 0xa0);
    g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
    private_write(&mut g, 0, ISACTIVER, 4, 1 << 27);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    lrs.eoi_split = true;
    g.flush_to_hw(0, &mut lrs).unwrap();
    assert_eq!(lrs.intids(), [32, 33, 34, 40]);
    assert!(lrs.valid().iter().zip(0..).all(|(v, i)| (v.0 == 40) == lrs.lr(i).hw.is_some()), "40 has HW = 1");
    // 40 listed: the trapped write did not reach its HW = 1 register.
    trapped_dir(&mut g, &mut lrs, 40);
    let mut spis = vec![];
    g.deactivate_retired(|p| spis.push(p.0));
    assert_eq!(spis, [40], "the passthrough SPI, from any CPU");
    assert_eq!(lrs.intids(), [32, 33, 34, 36], "27 is still left out");
    // 27 left out: the timer's PPI is deactivated on this CPU.
    let lines = trapped_dir(&mut g, &mut lrs, 27);
    assert_eq!(lines.iter().collect::<Vec<_>>(), [IntId(27)]);
    assert!(!active(&g, 40) && !active(&g, 27));
    assert_eq!(lrs.physical_deactivations, [], "no guest deactivation reached a list register");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Up to 8 active interrupts of distinct priorities on 1 to 4 list registers: the guest
    /// deactivates them in its priority order (EOImode 0, innermost first), with exits at
    /// any point between. After every exit the vGIC has exactly the ones the guest has not
    /// deactivated active (none ended early, none left active), and each counted
    /// deactivation brought the vCPU out.
    #[test]
    fn every_deactivation_ends_the_interrupt_the_guest_ended(
        v2_gic in any::<bool>(),
        list_registers in 1usize..=4,
        order in Just((0u32..8).collect::<Vec<_>>()).prop_shuffle(),
        count in 1usize..=8,
        exits in prop::collection::vec(any::<bool>(), 8),
    ) {
        let mut g = gic(if v2_gic { GicVersion::V2 } else { GicVersion::V3 }, 1);
        // SPI 32 + k has priority 0x10 + 8 * order[k].
        let intids: Vec<u32> = (0..count as u32).map(|k| 32 + k).collect();
        for &intid in &intids {
            spi(&mut g, intid, 0x10 + 8 * order[(intid - 32) as usize] as u8, 0);
            let (word, mask) = bit(intid);
            g.write(0, ISACTIVER + word, 4, mask).unwrap();
        }
        let mut lrs = FakeLrs::for_gic(&g, list_registers);
        g.flush_to_hw(0, &mut lrs).unwrap();
        let mut remaining = intids.clone();
        remaining.sort_by_key(|&i| order[(i - 32) as usize]);
        let check = |g: &Vgic, remaining: &[u32]| -> Result<(), TestCaseError> {
            for &intid in &intids {
                let on = g.interrupt(0, IntId(intid)).unwrap().active;
                prop_assert_eq!(on, remaining.contains(&intid), "SPI {} active {} after the take-back", intid, on);
            }
            Ok(())
        };
        for (step, exit) in exits.iter().enumerate().take(count) {
            let intid = remaining.remove(0);
            let counted = lrs.eoi_count;
            lrs.deactivate(intid);
            if lrs.eoi_count != counted {
                prop_assert!(lrs.maintenance_asserted(), "step {}: {} counted, and no maintenance interrupt", step, intid);
            }
            // The maintenance interrupt is taken some instructions after it is raised: the
            // guest may deactivate more first. An exit whose list registers came back as
            // they went in takes nothing back (the hypervisor's rule).
            if *exit {
                if !g.interface(0).unwrap().came_back_unchanged(&lrs) {
                    g.sync_from_hw(0, &mut lrs).unwrap();
                }
                check(&g, &remaining)?;
                g.flush_to_hw(0, &mut lrs).unwrap();
            }
        }
        if !g.interface(0).unwrap().came_back_unchanged(&lrs) {
            g.sync_from_hw(0, &mut lrs).unwrap();
        }
        check(&g, &[])?;
    }

    /// A GICv3 guest with EOImode 1 deactivates up to 8 active interrupts on 1 to 4 list
    /// registers in any order: while one is left out its DIR traps and is answered
    /// (`deactivate_by_dir`, then a plan), otherwise it reaches its list register; each DIR
    /// follows the interrupt's EOI, counted when no list register showed it. After each,
    /// exactly the ones it has not deactivated are active.
    #[test]
    fn every_eoi_mode_1_deactivation_ends_the_interrupt_it_names(
        list_registers in 1usize..=4,
        count in 1usize..=8,
        order in Just((0u32..8).collect::<Vec<_>>()).prop_shuffle(),
    ) {
        let mut g = v3(1);
        let intids: Vec<u32> = (32..32 + count as u32).collect();
        active_spis(&mut g, &intids);
        let mut lrs = FakeLrs::for_gic(&g, list_registers);
        lrs.eoi_split = true;
        g.flush_to_hw(0, &mut lrs).unwrap();
        let mut remaining = intids.clone();
        for intid in order.iter().map(|k| 32 + k).filter(|i| intids.contains(i)) {
            // Its EOI (a priority drop) first: counted when no list register shows it.
            if lrs.intids().contains(&intid) {
                lrs.drop_priority(intid);
            } else {
                lrs.drop_priority_unlisted(intid);
            }
            if lrs.maintenance.entry_not_present {
                trapped_dir(&mut g, &mut lrs, u64::from(intid));
            } else {
                let counted = lrs.eoi_count;
                lrs.deactivate(intid);
                prop_assert_eq!(lrs.eoi_count, counted, "{} not shown, and DIR did not trap", intid);
            }
            remaining.retain(|&i| i != intid);
            g.sync_from_hw(0, &mut lrs).unwrap();
            for &i in &intids {
                prop_assert_eq!(active(&g, i), remaining.contains(&i), "SPI {} after DIR {}", i, intid);
            }
            g.flush_to_hw(0, &mut lrs).unwrap();
        }
    }
}
