//! Interrupt delivery through the list registers, on both GIC versions, following the GIC
//! architecture specifications: IHI 0069H (GICv3) and IHI 0048B (GICv2).

mod common;

use common::*;
use vgic::*;

#[test]
fn highest_priority_goes_first_and_ties_go_to_the_lower_intid() {
    // IHI 0069H 4.8 / IHI 0048B 3.3: lower value = higher priority; among equal
    // priorities, the lower INTID is taken first.
    both(1, |mut g| {
        for (intid, prio) in [(40, 0x80), (41, 0x10), (42, 0x40), (43, 0x10), (44, 0xf0), (45, 0x20)] {
            spi(&mut g, intid, prio, 0);
            g.inject_edge(IntId(intid), 0).unwrap();
        }
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [41, 42, 43, 45], "{:?}: the four best of six", g.version());
        let order: Vec<u32> = std::iter::from_fn(|| lrs.ack().map(|a| a.0)).collect();
        assert_eq!(order, [41, 43, 45, 42]);
    });
}

#[test]
fn a_higher_priority_interrupt_replaces_a_lower_pending_one_in_a_full_set() {
    // IHI 0069H 4.8, "Interrupt prioritization" (preemption): the CPU interface can only signal what is in the list
    // registers, so a higher-priority arrival must displace the lowest pending one.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        for i in 0..4 {
            spi(&mut g, 40 + i, 0x80 + 8 * i as u8, 0);
            g.inject_edge(IntId(40 + i), 0).unwrap();
        }
        run(&mut g, 0, &mut lrs, |_| {});
        spi(&mut g, 50, 0x08, 0);
        g.inject_edge(IntId(50), 0).unwrap();
        lrs.clear_log();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [40, 41, 42, 50]);
        assert_eq!(lrs.writes, [3], "only the spilled list register is rewritten");
        assert!(lrs.maintenance.underflow, "INTID 43 waits for a refill");
        assert!(g.interrupt(0, IntId(43)).unwrap().pending, "spilled, not lost");
        assert_eq!(lrs.ack().map(|a| a.0), Some(50), "and it is taken first");
        g.sync_from_hw(0, &mut lrs).unwrap();
        let mut rest: Vec<u32> = deliver_all(&mut g, 0, &mut lrs).iter().map(|t| t.0).collect();
        rest.sort();
        assert_eq!(rest, [40, 41, 42, 43]);
    });
}

#[test]
fn active_interrupts_keep_their_list_registers() {
    // KVM's rule, and the only safe one: an active interrupt must stay visible for the
    // guest to deactivate it; pending ones of higher priority wait for a free register.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 2);
        for i in 0..2 {
            spi(&mut g, 40 + i, 0x80, 0);
            g.inject_edge(IntId(40 + i), 0).unwrap();
        }
        run(&mut g, 0, &mut lrs, |l| {
            l.ack();
            l.ack();
        });
        spi(&mut g, 50, 0x00, 0);
        g.inject_edge(IntId(50), 0).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Active, 0), (41, LrState::Active, 0)]);
        assert!(lrs.maintenance.underflow);
    });
}

#[test]
fn an_edge_is_delivered_once_and_a_level_while_its_line_is_high() {
    // IHI 0069H 4.1 / IHI 0048B 1.4: an edge sets a latch cleared by acknowledgement; a
    // level interrupt is pending while its line is asserted, sampled again on deactivation.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        spi(&mut g, 41, 0x20, 0);
        set_trigger(&mut g, 41, Trigger::Level);
        g.inject_edge(IntId(40), 0).unwrap();
        g.set_level(IntId(41), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        let level_lr = (0..4).map(|i| lrs.lr(i)).find(|l| l.vintid == IntId(41)).unwrap();
        assert!(level_lr.eoi_maintenance, "EOI maintenance to sample the line again");
        assert_eq!(lrs.take_all(), [(40, 0), (41, 0)]);
        assert!(lrs.maintenance_asserted(), "the level interrupt's deactivation raised EOI maintenance");
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.eoi_status(), 0, "the EOI status was cleared");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [41], "line still high: pending again; the edge is gone");
        g.set_level(IntId(41), 0, false).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty(), "line dropped before the guest took it: withdrawn");
        assert!(!g.interrupt(0, IntId(41)).unwrap().pending);
    });
}

#[test]
fn ispendr_pends_a_level_interrupt_until_it_is_acknowledged() {
    // IHI 0069H 12.9, GICD_ISPENDR<n> / IHI 0048B 4.3.7: for a level-sensitive interrupt, a write to
    // ISPENDR makes it pending until acknowledged (or cleared), whatever its line.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        set_trigger(&mut g, 40, Trigger::Level);
        g.write(0, ISPENDR + 4, 4, 1 << 8).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)]);
        assert!(!g.interrupt(0, IntId(40)).unwrap().pending);
    });
}

#[test]
fn an_edge_while_active_makes_it_active_and_pending() {
    // IHI 0069H 4.1, "Interrupt lifecycle" / IHI 0048B 1.4.1: active and pending.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        run(&mut g, 0, &mut lrs, |l| assert_eq!(l.ack(), Some((40, 0))));
        g.inject_edge(IntId(40), 0).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::PendingActive, 0)]);
        let s = g.interrupt(0, IntId(40)).unwrap();
        assert!(s.active && s.pending);
        lrs.deactivate(40);
        assert_eq!(lrs.ack(), Some((40, 0)), "taken a second time");
    });
}

#[test]
fn an_edge_that_arrives_while_the_vcpu_runs_is_not_lost() {
    // The race a hypervisor must get right: the guest acknowledges the interrupt in its
    // list register, then the device signals again before the vCPU exits.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        lrs.ack();
        g.inject_edge(IntId(40), 0).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        lrs.clear_log();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::PendingActive, 0)]);
    });
}

#[test]
fn more_pending_than_list_registers_asks_for_underflow_and_refills() {
    // IHI 0069H 12.4 ICH_HCR_EL2.UIE / IHI 0048B 5.3 GICH_HCR.UIE: the underflow
    // maintenance interrupt fires when at most one list register is valid.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        for i in 0..6 {
            spi(&mut g, 40 + i, 0x10 + 8 * i as u8, 0);
            g.inject_edge(IntId(40 + i), 0).unwrap();
        }
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [40, 41, 42, 43]);
        assert!(lrs.maintenance.underflow);
        assert!(!lrs.maintenance_asserted(), "four valid list registers: no underflow yet");
        for _ in 0..3 {
            let (intid, _) = lrs.ack().unwrap();
            lrs.deactivate(intid);
        }
        assert!(lrs.maintenance_asserted(), "one valid left: underflow");
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [43, 44, 45]);
        assert!(!lrs.maintenance.underflow, "all fit now");
    });
}

#[test]
fn eoimode_1_priority_drop_then_deactivation() {
    // IHI 0069H 4.1 with ICC_CTLR_EL1.EOImode = 1 / IHI 0048B 3.2.1, GICC_CTLR.EOImodeNS:
    // the EOI only drops the running priority; the interrupt stays active until the guest
    // deactivates it (ICV_DIR_EL1 / GICV_DIR).
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        run(&mut g, 0, &mut lrs, |l| {
            l.ack();
            l.drop_priority(40);
        });
        assert!(g.interrupt(0, IntId(40)).unwrap().active, "still active after the priority drop");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Active, 0)]);
        lrs.deactivate(40);
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(!g.interrupt(0, IntId(40)).unwrap().active);
        assert_eq!(g.interface(0).unwrap().in_use(), 0);
    });
}

#[test]
fn hardware_mapped_interrupts_are_deactivated_by_the_guest() {
    // IHI 0069H 12.4.6, ICH_LR<n>_EL2.HW / IHI 0048B 5.3 GICH_LRn.HW: with HW = 1 the guest's
    // deactivation also deactivates pINTID; no EOI maintenance bit is allowed.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        private_irq(&mut g, 0, 27, 0x20);
        g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
        g.set_level(IntId(27), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        let lr = lrs.lr(0);
        assert_eq!((lr.vintid, lr.hw, lr.eoi_maintenance), (IntId(27), Some(27), false));
        lrs.ack();
        lrs.drop_priority(27);
        g.sync_from_hw(0, &mut lrs).unwrap();
        // The timer's line is still high, but the physical interrupt is active: the virtual
        // one must not become pending again from the old level.
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(27, LrState::Active, 0)]);
        lrs.deactivate(27);
        assert_eq!(lrs.physical_deactivations, [27]);
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty());
        // The physical interrupt fires again: a new event.
        g.set_level(IntId(27), 0, true).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(27, 0)]);
    });
}

#[test]
fn a_hardware_mapped_spi_reaches_the_vcpu_the_guest_routed_it_to_and_the_guest_deactivates_it() {
    // A passthrough device's SPI: IHI 0069H 12.4.6, ICH_LR<n>_EL2.HW and pINTID / IHI 0048B
    // 5.3.2, GICH_LRn.HW and PhysicalID. The physical SPI is held active (priority dropped
    // only) until the guest deactivates the virtual one, so each firing is one event.
    both(2, |mut g| {
        spi(&mut g, 34, 0x80, 1);
        assert_eq!(g.spi_target(IntId(34)), Some(1));
        assert_eq!(g.spi_target(IntId(27)), None, "not an SPI");
        g.set_hw(IntId(34), 0, Some(IntId(34))).unwrap();
        assert_eq!(g.interrupt(0, IntId(34)).unwrap().hw, Some(IntId(34)));
        g.take_kicks();
        g.set_level(IntId(34), 0, true).unwrap();
        assert_eq!(g.take_kicks(), VcpuMask(0b10), "{:?}: the routed vCPU looks", g.version());
        let mut other = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut other).unwrap();
        assert!(other.valid().is_empty(), "vCPU 0 is not its target");
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(1, &mut lrs).unwrap();
        let lr = lrs.lr(0);
        assert_eq!((lr.vintid, lr.hw, lr.eoi_maintenance), (IntId(34), Some(34), false));
        assert_eq!(lrs.ack(), Some((34, 0)));
        lrs.drop_priority(34);
        g.sync_from_hw(1, &mut lrs).unwrap();
        // The vCPU leaves its CPU with the interrupt active: the state comes back, and the
        // list register written on its return still carries the physical INTID.
        g.put(1, &mut lrs).unwrap();
        assert!(g.interrupt(1, IntId(34)).unwrap().active);
        let mut again = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(1, &mut again).unwrap();
        assert_eq!(again.valid(), [(34, LrState::Active, 0)]);
        assert_eq!(again.lr(0).hw, Some(34));
        again.deactivate(34);
        assert_eq!(again.physical_deactivations, [34], "the guest's deactivation reaches the physical SPI");
        g.sync_from_hw(1, &mut again).unwrap();
        assert!(!g.interrupt(1, IntId(34)).unwrap().active && !g.interrupt(1, IntId(34)).unwrap().pending);
        g.flush_to_hw(1, &mut again).unwrap();
        assert!(again.valid().is_empty(), "no second event from the old level");
        // The device raises it again: a new event.
        g.set_level(IntId(34), 0, true).unwrap();
        assert_eq!(deliver_all(&mut g, 1, &mut again), [(34, 0)]);
    });
}

#[test]
fn a_hardware_mapped_spi_the_guest_disabled_waits_and_only_real_interrupts_map() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 34, 0x80, 0);
        g.set_hw(IntId(34), 0, Some(IntId(34))).unwrap();
        waits_while_disabled(&mut g, &mut lrs, 34, |g| g.set_level(IntId(34), 0, true).unwrap());
        assert!(g.set_hw(IntId(34), 0, Some(IntId(3))).is_err(), "an SGI cannot back an SPI");
        assert!(g.set_hw(IntId(34), 0, Some(IntId(1020))).is_err(), "nor a special INTID");
        g.set_hw(IntId(34), 0, None).unwrap();
        assert_eq!(g.interrupt(0, IntId(34)).unwrap().hw, None);
    });
}

#[test]
fn disabled_groups_forward_nothing() {
    // IHI 0069H 12.9.4 / IHI 0048B 4.3.1: with GICD_CTLR.EnableGrp1 (or EnableGrp0) clear,
    // pending interrupts of that group are not forwarded.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0); // Group 1
        spi(&mut g, 41, 0x10, 0);
        g.write(0, IGROUPR + 4, 4, 1 << 8).unwrap(); // 41 back to Group 0
        g.inject_edge(IntId(40), 0).unwrap();
        g.inject_edge(IntId(41), 0).unwrap();
        g.write(0, GICD_CTLR, 4, 0).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty() && !g.has_pending(0));
        g.write(0, GICD_CTLR, 4, 0b01).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [41], "Group 0 only");
        g.write(0, GICD_CTLR, 4, 0b10).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [40], "Group 1 only; 41 withdrawn");
        assert!(g.interrupt(0, IntId(41)).unwrap().pending, "withdrawn, still pending");
        // An active interrupt stays visible even when its group is disabled.
        lrs.ack();
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.write(0, GICD_CTLR, 4, 0).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Active, 0)]);
    });
}

#[test]
fn a_disabled_interrupt_stays_pending_but_is_not_forwarded() {
    // IHI 0069H 12.9, GICD_ICENABLER<n>: disabling stops forwarding, not the pending state.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        waits_while_disabled(&mut g, &mut lrs, 40, |g| g.inject_edge(IntId(40), 0).unwrap());
    });
}

/// SPI `intid` of vCPU 0, disabled, then raised by `raise`: not forwarded, but pending;
/// enabled again, it is delivered.
fn waits_while_disabled(g: &mut Vgic, lrs: &mut FakeLrs, intid: u32, raise: impl FnOnce(&mut Vgic)) {
    let (word, mask) = bit(intid);
    g.write(0, ICENABLER + word, 4, mask).unwrap();
    raise(g);
    g.flush_to_hw(0, lrs).unwrap();
    assert!(lrs.valid().is_empty(), "disabled: not forwarded");
    assert!(g.interrupt(0, IntId(intid)).unwrap().pending, "but pending");
    g.write(0, ISENABLER + word, 4, mask).unwrap();
    assert_eq!(deliver_all(g, 0, lrs), [(intid, 0)]);
}

#[test]
fn icpendr_withdraws_an_interrupt_from_a_stopped_vcpu() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        run(&mut g, 0, &mut lrs, |_| {});
        assert!(g.interrupt(0, IntId(40)).unwrap().pending, "pending in a list register reads as pending");
        g.write(0, ICPENDR + 4, 4, 1 << 8).unwrap();
        assert!(!g.interrupt(0, IntId(40)).unwrap().pending);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty());
    });
}

#[test]
fn spis_go_to_the_vcpu_their_routing_names() {
    // IHI 0069H 12.9, GICD_IROUTER<n> (affinity, or IRM = 1 for any PE) / IHI 0048B
    // 4.3.12 GICD_ITARGETSR<n>.
    both(3, |mut g| {
        spi(&mut g, 40, 0x10, 2);
        g.inject_edge(IntId(40), 0).unwrap();
        assert!(!g.has_pending(0) && !g.has_pending(1) && g.has_pending(2));
        assert!(g.take_kicks().contains(2));
        // Rerouted while in vCPU 2's list register: withdrawn there, delivered to vCPU 1.
        let mut lrs2 = FakeLrs::for_gic(&g, 4);
        run(&mut g, 2, &mut lrs2, |_| {});
        route(&mut g, 40, 1);
        g.flush_to_hw(2, &mut lrs2).unwrap();
        assert!(lrs2.valid().is_empty());
        let mut lrs1 = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 1, &mut lrs1), [(40, 0)]);
    });
    let mut g = v3(3);
    spi(&mut g, 41, 0x10, 2);
    g.write(0, IROUTER + 8 * 41, 8, 1 << 31).unwrap();
    g.inject_edge(IntId(41), 0).unwrap();
    assert!(g.has_pending(0), "IRM = 1: one of the PEs (vCPU 0 here)");
    g.write(0, IROUTER + 8 * 41, 8, 0x01_0000).unwrap();
    assert!((0..3).all(|v| !g.has_pending(v)), "an affinity that names no vCPU: not forwarded");
}

#[test]
fn an_active_spi_rerouted_while_its_vcpu_is_off_its_cpu_stays_with_that_vcpu() {
    // IHI 0069H 4.1 ("Interrupt lifecycle"): an active interrupt leaves the active state
    // only by its deactivation, which the guest's handler does on the vCPU that
    // acknowledged it; the routing (GICD_IROUTER<n>, IHI 0069H 12.9; GICD_ITARGETSR<n>, IHI
    // 0048B 4.3.12) names where a pending interrupt goes, and does not move an active one.
    // A guest reroutes an SPI whose handler runs (irqbalance does) while that vCPU is off
    // its CPU (`put`): the active state must come back to it, where its deactivation can
    // reach it, and not go to the new target, whose guest never acknowledged it.
    both(2, |mut g| {
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        let mut lrs0 = FakeLrs::for_gic(&g, 4);
        run(&mut g, 0, &mut lrs0, |l| assert_eq!(l.ack(), Some((40, 0))));
        g.put(0, &mut lrs0).unwrap();
        route(&mut g, 40, 1);
        let mut lrs1 = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(1, &mut lrs1).unwrap();
        assert_eq!(lrs1.valid(), [], "vCPU 1 never acknowledged SPI 40");
        g.flush_to_hw(0, &mut lrs0).unwrap();
        assert_eq!(lrs0.valid(), [(40, LrState::Active, 0)], "vCPU 0's handler still has SPI 40 active");
        lrs0.deactivate(40);
        g.sync_from_hw(0, &mut lrs0).unwrap();
        assert!(!g.interrupt(0, IntId(40)).unwrap().active);
        g.sync_from_hw(1, &mut lrs1).unwrap();
        // Deactivated, it goes where it is routed now.
        g.inject_edge(IntId(40), 0).unwrap();
        assert_eq!(deliver_all(&mut g, 1, &mut lrs1), [(40, 0)]);
        assert!(!g.has_pending(0));
        // Left active on vCPU 1, then deactivated through GICD_ICACTIVER<n> and set active
        // again through GICD_ISACTIVER<n>: no longer vCPU 1's but where it is routed.
        g.inject_edge(IntId(40), 0).unwrap();
        run(&mut g, 1, &mut lrs1, |l| assert_eq!(l.ack(), Some((40, 0))));
        g.put(1, &mut lrs1).unwrap();
        route(&mut g, 40, 0);
        let (word, mask) = bit(40);
        g.write(0, ICACTIVER + word, 4, mask).unwrap();
        g.write(0, ISACTIVER + word, 4, mask).unwrap();
        g.flush_to_hw(1, &mut lrs1).unwrap();
        assert_eq!(lrs1.valid(), []);
        g.flush_to_hw(0, &mut lrs0).unwrap();
        assert_eq!(lrs0.valid(), [(40, LrState::Active, 0)]);
    });
}

#[test]
fn an_spi_left_pending_by_its_old_vcpu_kicks_the_vcpu_it_is_routed_to() {
    // IHI 0069H 12.9 (GICD_IROUTER<n>) / IHI 0048B 4.3.12 (GICD_ITARGETSR<n>): a pending
    // interrupt is forwarded to the PE its routing names. An SPI rerouted while active in
    // vCPU 0's list register stays there until the guest deactivates it; an edge meanwhile
    // makes it pending for vCPU 1, which looks and finds it still vCPU 0's. When vCPU 0's
    // exit takes the deactivation back, vCPU 1 must be made to look again, or it sleeps in
    // WFI with the interrupt pending for it.
    both(2, |mut g| {
        spi(&mut g, 40, 0x10, 0);
        g.inject_edge(IntId(40), 0).unwrap();
        let (mut lrs0, mut lrs1) = (FakeLrs::for_gic(&g, 4), FakeLrs::for_gic(&g, 4));
        run(&mut g, 0, &mut lrs0, |l| assert_eq!(l.ack(), Some((40, 0))));
        route(&mut g, 40, 1);
        g.inject_edge(IntId(40), 0).unwrap();
        assert!(g.take_kicks().contains(1));
        g.flush_to_hw(1, &mut lrs1).unwrap();
        assert_eq!(lrs1.valid(), [], "still active in vCPU 0's list register");
        g.flush_to_hw(0, &mut lrs0).unwrap();
        assert_eq!(lrs0.valid(), [(40, LrState::Active, 0)]);
        g.take_kicks();
        lrs0.deactivate(40);
        g.sync_from_hw(0, &mut lrs0).unwrap();
        g.flush_to_hw(0, &mut lrs0).unwrap();
        assert!(g.take_kicks().contains(1), "vCPU 1 is not told SPI 40 is now its to show");
        assert_eq!(deliver_all(&mut g, 1, &mut lrs1), [(40, 0)]);
    });
}

#[test]
fn vcpus_keep_their_own_interface_state_when_they_share_a_cpu() {
    // khypervisor issue 25 and the ArceOS report: state left in the list registers (or in a
    // shared "current" copy) leaked from one vCPU to the next.
    both(2, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        private_irq(&mut g, 0, 20, 0x10);
        private_irq(&mut g, 1, 21, 0x10);
        g.inject_edge(IntId(20), 0).unwrap();
        g.inject_edge(IntId(21), 1).unwrap();
        run(&mut g, 0, &mut lrs, |l| assert_eq!(l.ack(), Some((20, 0))));
        g.put(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty(), "put empties vCPU 0's list registers");
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(21, LrState::Pending, 0)], "vCPU 1 sees only its own");
        g.put(1, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(20, LrState::Active, 0)], "vCPU 0's active interrupt is back");
        assert!(g.interrupt(1, IntId(21)).unwrap().pending);
    });
}

#[test]
fn only_the_list_registers_in_use_are_read_or_written() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(lrs.writes.is_empty() && lrs.reads.borrow().is_empty(), "nothing to show: no list register touched");
        for i in 0..2 {
            spi(&mut g, 40 + i, 0x10, 0);
            g.inject_edge(IntId(40 + i), 0).unwrap();
        }
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.writes, [0, 1]);
        // The guest completes 40; 41 stays pending in LR 1.
        let (intid, _) = lrs.ack().unwrap();
        lrs.deactivate(intid);
        lrs.clear_log();
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert_eq!(*lrs.reads.borrow(), [1], "LR 0 is known empty from the status register");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.writes.is_empty(), "LR 1 already shows what it should");
    });
}

#[test]
fn list_registers_of_someone_else_are_never_written() {
    // A non-empty list register this vCPU does not own (left by whatever else uses this
    // CPU's interface) is never overwritten.
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        let foreign = ListRegister { vintid: IntId(99), state: LrState::Pending, priority: 0, ..ListRegister::INVALID };
        lrs.regs[0] = match g.version() {
            GicVersion::V3 => IchLr::encode(&foreign).0,
            GicVersion::V2 => u64::from(GichLr::encode(&foreign).0),
        };
        for i in 0..5 {
            spi(&mut g, 40 + i, 0x10, 0);
            g.inject_edge(IntId(40 + i), 0).unwrap();
        }
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(!lrs.writes.contains(&0));
        assert_eq!(lrs.lr(0).vintid, IntId(99));
        assert_eq!(lrs.writes, [1, 2, 3]);
    });
}

#[test]
fn a_full_set_of_list_registers_never_panics() {
    // The ArceOS report: a panic when every list register was full.
    both(1, |mut g| {
        for i in 0..64 {
            spi(&mut g, 32 + i, i as u8, 0);
            g.inject_edge(IntId(32 + i), 0).unwrap();
        }
        for count in [0, 1, 4, 16, 64] {
            let mut lrs = FakeLrs::for_gic(&g, count);
            g.flush_to_hw(0, &mut lrs).unwrap();
            assert_eq!(lrs.valid().len(), count.min(16));
            assert_eq!(lrs.maintenance.underflow, count > 0);
            g.put(0, &mut lrs).unwrap();
        }
        let mut lrs = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 0, &mut lrs).len(), 64, "every one delivered in the end");
    });
}
