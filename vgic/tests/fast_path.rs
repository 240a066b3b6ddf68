//! `flush_to_hw`'s fast path (docs/vgic.md, "One interrupt in place"): the cases of issue
//! 21's benchmarks, each checked to take it, to write the register the general plan would,
//! and to leave the vGIC as the general plan would.

mod common;

use common::*;
use vgic::*;

/// Plans `vcpu` with the fast path and with the general plan on copies, checks that the fast
/// path was taken and agrees, then plans `g` itself (`flush_to_hw`) and returns the list
/// registers it wrote.
fn plan_fast(g: &mut Vgic, vcpu: usize, lrs: &mut FakeLrs) -> Vec<usize> {
    let (mut general, mut l_general) = (g.clone(), lrs.clone());
    general.flush_to_hw_general(vcpu, &mut l_general).unwrap();
    let (mut fast, mut l_fast) = (g.clone(), lrs.clone());
    assert!(fast.flush_to_hw_fast(vcpu, &mut l_fast).unwrap(), "the fast path was not taken");
    assert_eq!(l_fast.regs, l_general.regs);
    assert_eq!(l_fast.writes, l_general.writes);
    assert_eq!(l_fast.maintenance, l_general.maintenance);
    assert_eq!(fast, general);
    let before = lrs.writes.len();
    g.flush_to_hw(vcpu, lrs).unwrap();
    assert_eq!(*g, general);
    lrs.writes[before..].to_vec()
}

fn sgi(g: &mut Vgic, source: usize, target: usize, intid: u32) {
    match g.version() {
        GicVersion::V3 => {
            g.generate_sgi(source, SgiRegister::Sgi1r, (u64::from(intid) << 24) | (1 << target)).unwrap();
        }
        GicVersion::V2 => g.write(source, GICD_SGIR, 4, (1 << (16 + target)) | u64::from(intid)).unwrap(),
    }
}

#[test]
fn a_one_way_ipi_goes_into_the_list_register_the_last_one_emptied() {
    both(2, |mut g| {
        private_irq(&mut g, 1, 4, 0x80);
        let mut lrs = FakeLrs::for_gic(&g, 4);
        // Another vCPU's interrupt in LR 0: the first empty one is LR 1.
        lrs.regs[0] = match g.version() {
            GicVersion::V3 => {
                IchLr::encode(&ListRegister { vintid: IntId(40), state: LrState::Active, ..Default::default() }).0
            }
            GicVersion::V2 => u64::from(
                GichLr::encode(&ListRegister { vintid: IntId(40), state: LrState::Active, ..Default::default() }).0,
            ),
        };
        for round in 0..3 {
            sgi(&mut g, 0, 1, 4);
            assert_eq!(plan_fast(&mut g, 1, &mut lrs), [1], "round {round}");
            assert_eq!(lrs.lr(1).vintid, IntId(4));
            assert_eq!(lrs.lr(1).source, 0);
            assert_eq!(lrs.maintenance, Maintenance::NONE);
            // The guest takes it and completes it; the exit takes the emptied register back.
            assert_eq!(lrs.ack(), Some((4, 0)));
            lrs.deactivate(4);
            assert!(g.sync_from_hw(1, &mut lrs).unwrap());
            assert_eq!(g.interface(1).unwrap().in_use(), 0);
            // Nothing left: the fast path writes nothing.
            assert!(plan_fast(&mut g, 1, &mut lrs).is_empty());
        }
        assert!(!g.has_pending(1));
    });
}

#[test]
fn an_sgi_sent_again_while_its_handler_runs_is_rewritten_in_place_pending_and_active() {
    both(2, |mut g| {
        private_irq(&mut g, 1, 4, 0x80);
        let mut lrs = FakeLrs::for_gic(&g, 4);
        sgi(&mut g, 0, 1, 4);
        assert_eq!(plan_fast(&mut g, 1, &mut lrs), [0]);
        assert_eq!(lrs.ack(), Some((4, 0)));
        g.sync_from_hw(1, &mut lrs).unwrap();
        // The round trip: vCPU 0 sends the next one while vCPU 1 is still in the handler.
        sgi(&mut g, 0, 1, 4);
        assert_eq!(plan_fast(&mut g, 1, &mut lrs), [0], "rewritten in its own register");
        assert_eq!(lrs.valid(), [(4, LrState::PendingActive, 0)]);
        lrs.deactivate(4);
        assert_eq!(lrs.ack(), Some((4, 0)));
        lrs.deactivate(4);
        g.sync_from_hw(1, &mut lrs).unwrap();
        assert!(plan_fast(&mut g, 1, &mut lrs).is_empty());
        assert!(!g.has_pending(1));
    });
}

#[test]
fn gicv2_sgis_from_two_sources_come_one_at_a_time_through_the_fast_path() {
    let mut g = v2(3);
    private_irq(&mut g, 2, 4, 0x80);
    let mut lrs = FakeLrs::for_gic(&g, 4);
    sgi(&mut g, 0, 2, 4);
    sgi(&mut g, 1, 2, 4);
    assert_eq!(plan_fast(&mut g, 2, &mut lrs), [0]);
    assert_eq!(lrs.valid(), [(4, LrState::Pending, 0)]);
    assert!(lrs.maintenance.no_pending, "the other source waits for the no-pending interrupt");
    assert_eq!(lrs.ack(), Some((4, 0)));
    g.sync_from_hw(2, &mut lrs).unwrap();
    // Active from source 0, source 1 waiting: shown pending and active only after the EOI.
    let _ = plan_fast(&mut g, 2, &mut lrs);
    lrs.deactivate(4);
    g.sync_from_hw(2, &mut lrs).unwrap();
    let _ = plan_fast(&mut g, 2, &mut lrs);
    let mut taken = vec![];
    for _ in 0..4 {
        while let Some(t) = lrs.ack() {
            lrs.deactivate(t.0);
            taken.push(t);
        }
        g.sync_from_hw(2, &mut lrs).unwrap();
        g.flush_to_hw(2, &mut lrs).unwrap();
    }
    assert_eq!(taken, [(4, 1)]);
    assert!(!g.has_pending(2));
}

#[test]
fn the_hardware_mapped_timer_goes_through_the_fast_path_and_its_deactivation_drops_the_line() {
    both(1, |mut g| {
        private_irq(&mut g, 0, 27, 0x20);
        g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        for tick in 0..3 {
            g.set_level(IntId(27), 0, true).unwrap();
            assert_eq!(plan_fast(&mut g, 0, &mut lrs), [0], "tick {tick}");
            assert_eq!(lrs.lr(0).hw, Some(27));
            assert!(!lrs.lr(0).eoi_maintenance, "a hardware-mapped one needs no EOI maintenance");
            assert_eq!(lrs.ack(), Some((27, 0)));
            lrs.deactivate(27);
            g.sync_from_hw(0, &mut lrs).unwrap();
            assert!(!g.interrupt(0, IntId(27)).unwrap().pending, "the line follows the deactivation");
            assert!(plan_fast(&mut g, 0, &mut lrs).is_empty());
        }
        assert_eq!(lrs.physical_deactivations, [27, 27, 27]);
    });
}

#[test]
fn a_busy_spi_or_a_second_private_interrupt_takes_the_general_path() {
    both(2, |mut g| {
        private_irq(&mut g, 0, 4, 0x80);
        private_irq(&mut g, 0, 5, 0x40);
        spi(&mut g, 40, 0x10, 1);
        let mut lrs = FakeLrs::for_gic(&g, 4);
        sgi(&mut g, 1, 0, 4);
        sgi(&mut g, 1, 0, 5);
        let mut copy = (g.clone(), lrs.clone());
        assert!(!copy.0.flush_to_hw_fast(0, &mut copy.1).unwrap(), "two private interrupts busy");
        assert!(copy.1.writes.is_empty());
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [4, 5]);
        lrs.take_all();
        g.sync_from_hw(0, &mut lrs).unwrap();
        // An SPI for vCPU 1 is busy: vCPU 0's SGI takes the general path too.
        g.inject_edge(IntId(40), 0).unwrap();
        sgi(&mut g, 1, 0, 4);
        let mut copy = (g.clone(), lrs.clone());
        assert!(!copy.0.flush_to_hw_fast(0, &mut copy.1).unwrap(), "an SPI is busy");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [4]);
    });
}

#[test]
fn an_interrupt_completed_before_another_is_sent_leaves_the_fast_path_to_the_new_one() {
    both(2, |mut g| {
        private_irq(&mut g, 1, 4, 0x80);
        private_irq(&mut g, 1, 5, 0x80);
        let mut lrs = FakeLrs::for_gic(&g, 4);
        sgi(&mut g, 0, 1, 4);
        assert_eq!(plan_fast(&mut g, 1, &mut lrs), [0]);
        assert_eq!(lrs.ack(), Some((4, 0)));
        lrs.deactivate(4);
        g.sync_from_hw(1, &mut lrs).unwrap();
        // SGI 4 is quiet now but still marked live; the plan forgets it and takes the fast
        // path for SGI 5 alone.
        sgi(&mut g, 0, 1, 5);
        assert_eq!(plan_fast(&mut g, 1, &mut lrs), [0]);
        assert_eq!(lrs.valid(), [(5, LrState::Pending, 0)]);
        assert!(g.live_masks_cover_every_busy_interrupt());
    });
}

/// The tick of the periodic timer in one step (`hw_level_fired`), checked to be taken and
/// against the take-back, the line and the plan in that order on a copy; returns the list
/// registers it wrote.
fn tick_fast(g: &mut Vgic, vcpu: usize, lrs: &mut FakeLrs) -> Vec<usize> {
    // Whoever changed the vGIC took its kicks (the hypervisor's rule).
    g.take_kicks();
    let (mut general, mut l_general) = (g.clone(), lrs.clone());
    general.sync_from_hw(vcpu, &mut l_general).unwrap();
    general.set_level(IntId(27), vcpu, true).unwrap();
    general.take_kicks();
    general.flush_to_hw(vcpu, &mut l_general).unwrap();
    let (mut fast, mut l_fast) = (g.clone(), lrs.clone());
    assert!(fast.hw_level_fired(vcpu, IntId(27), false, &mut l_fast), "the tick's fast path was not taken");
    assert_eq!(l_fast.regs, l_general.regs);
    assert_eq!(l_fast.writes, l_general.writes);
    assert_eq!(l_fast.maintenance, l_general.maintenance);
    assert_eq!(fast, general);
    assert!(fast.take_kicks().is_empty(), "no kick asked for the vCPU it plans");
    let before = lrs.writes.len();
    *g = fast;
    *lrs = l_fast;
    lrs.writes[before..].to_vec()
}

#[test]
fn a_periodic_tick_is_taken_back_and_shown_again_in_one_step() {
    both(2, |mut g| {
        private_irq(&mut g, 1, 27, 0x20);
        g.set_hw(IntId(27), 1, Some(IntId(27))).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        // The first tick of a vGIC that has not planned yet takes the general steps (every
        // interrupt may be busy until a plan finds it quiet); then nothing is held.
        assert!(!g.hw_level_fired(1, IntId(27), false, &mut lrs));
        g.set_level(IntId(27), 1, true).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        lrs.take_all();
        g.sync_from_hw(1, &mut lrs).unwrap();
        assert_eq!(tick_fast(&mut g, 1, &mut lrs), [0], "nothing held");
        for tick in 1..4 {
            assert_eq!(lrs.lr(0).state, LrState::Pending);
            assert_eq!(lrs.lr(0).hw, Some(27));
            // The guest takes it and deactivates it (the physical one with it), with no
            // exit in between; the next tick's exit takes the emptied register back.
            assert_eq!(lrs.ack(), Some((27, 0)));
            lrs.deactivate(27);
            assert_eq!(tick_fast(&mut g, 1, &mut lrs), [0], "tick {tick}");
            assert!(g.interrupt(1, IntId(27)).unwrap().pending);
            assert!(!g.interrupt(1, IntId(27)).unwrap().active);
        }
        assert_eq!(lrs.physical_deactivations, [27, 27, 27, 27]);
    });
}

#[test]
fn a_tick_with_anything_else_to_show_takes_the_general_steps() {
    both(2, |mut g| {
        private_irq(&mut g, 0, 27, 0x20);
        private_irq(&mut g, 0, 4, 0x80);
        g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(tick_fast(&mut g, 0, &mut lrs), [0]);
        assert_eq!(lrs.ack(), Some((27, 0)));
        lrs.deactivate(27);
        // An SGI came meanwhile: two interrupts to show, the general plan shows both.
        sgi(&mut g, 1, 0, 4);
        g.take_kicks();
        let mut copy = (g.clone(), lrs.clone());
        assert!(!copy.0.hw_level_fired(0, IntId(27), false, &mut copy.1), "an SGI is busy too");
        assert_eq!(copy.1.writes, lrs.writes, "a declined fast path writes nothing");
        assert_eq!(copy.0, g, "a declined fast path changes nothing");
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.set_level(IntId(27), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.intids(), [4, 27]);
        // The last tick still held, not deactivated (the guest masked interrupts): a tick
        // cannot have fired then, and the general steps keep what the register shows.
        let mut copy = (g.clone(), lrs.clone());
        assert!(!copy.0.hw_level_fired(0, IntId(27), false, &mut copy.1));
    });
}
