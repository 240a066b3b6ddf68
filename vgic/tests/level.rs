//! Level-sensitive inputs, hardware-mapped or not: a level-sensitive interrupt is pending
//! while its input is asserted, an edge-triggered one when its input rises (IHI 0069H 4.1,
//! "Interrupt lifecycle"; IHI 0048B 1.4.2). A hardware-mapped level interrupt whose input
//! goes low before the guest takes it (a guest that turned its timer off, or cleared its
//! device's interrupt, with interrupts masked) is retired at the next exit, and its
//! physical interrupt handed back to the hypervisor to deactivate.

mod common;

use common::*;
use vgic::*;

/// A sampler that reports every input as `high`, and records what it was asked.
struct Line {
    high: bool,
    asked: Vec<(u32, u32)>,
}

impl LineSampler for Line {
    fn is_asserted(&mut self, vintid: IntId, physical: IntId) -> bool {
        self.asked.push((vintid.0, physical.0));
        self.high
    }
}

fn line(high: bool) -> Line {
    Line { high, asked: vec![] }
}

/// A level-sensitive SPI `intid` of the VM, hardware-mapped to the same physical INTID,
/// routed to `target`.
fn hw_level_spi(g: &mut Distributor, intid: u32, target: usize) {
    spi(g, intid, 0x80, target);
    set_trigger(g, intid, Trigger::Level);
    g.set_hw(IntId(intid), 0, Some(IntId(intid))).unwrap();
}

/// The virtual timer: PPI 27 of vCPU 0, level-sensitive, hardware-mapped to PPI 27.
fn timer(g: &mut Distributor) {
    private_irq(g, 0, 27, 0x20);
    g.set_hw(IntId(27), 0, Some(IntId(27))).unwrap();
}

fn sync(g: &mut Vgic, vcpu: usize, lrs: &mut FakeLrs, sampler: &mut Line) -> RetiredLines {
    let mut retired = RetiredLines::default();
    g.sync_from_hw_sampling(vcpu, lrs, sampler, &mut retired).unwrap();
    retired
}

#[test]
fn a_timer_interrupt_whose_line_drops_before_the_guest_takes_it_is_retired() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        timer(&mut g);
        g.set_level(IntId(27), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(27, LrState::Pending, 0)]);
        // An exit while the guest has interrupts masked and the timer still due: it stays.
        let mut high = line(true);
        assert!(sync(&mut g, 0, &mut lrs, &mut high).is_empty());
        assert_eq!(high.asked, [(27, 27)], "the input is sampled while a list register shows it pending");
        assert_eq!(lrs.valid(), [(27, LrState::Pending, 0)]);
        // The guest turns its timer off (ENABLE = 0, or IMASK = 1), still masked: at the
        // next exit the interrupt is gone, and the physical PPI is the hypervisor's to
        // deactivate.
        let retired = sync(&mut g, 0, &mut lrs, &mut line(false));
        assert_eq!(retired.iter().collect::<Vec<_>>(), [IntId(27)]);
        assert!(lrs.valid().is_empty(), "the list register is emptied at once");
        let state = g.interrupt(0, IntId(27)).unwrap();
        assert!(!state.pending && !state.active, "{state:?}");
        assert!(!g.has_pending(0));
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty(), "nothing comes back from the old level");
        assert!(lrs.physical_deactivations.is_empty(), "the guest deactivated nothing");
        // The timer fires again later: a new interrupt.
        g.set_level(IntId(27), 0, true).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(27, 0)]);
        assert_eq!(lrs.physical_deactivations, [27]);
    });
}

#[test]
fn an_interrupt_the_guest_took_is_not_sampled_and_its_deactivation_lowers_the_line() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        timer(&mut g);
        g.set_level(IntId(27), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        lrs.ack();
        let mut low = line(false);
        assert!(sync(&mut g, 0, &mut lrs, &mut low).is_empty(), "an active interrupt is the guest's to deactivate");
        assert!(low.asked.is_empty());
        assert_eq!(lrs.valid(), [(27, LrState::Active, 0)]);
        lrs.deactivate(27);
        assert_eq!(lrs.physical_deactivations, [27]);
        sync(&mut g, 0, &mut lrs, &mut low);
        // The physical interrupt is inactive again: if its input is still high it fires
        // again and comes back through `set_level`; the vGIC keeps no stale level.
        let state = g.interrupt(0, IntId(27)).unwrap();
        assert!(!state.pending && !state.active, "{state:?}");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty());
    });
}

#[test]
fn a_passthrough_level_spi_the_guest_cleared_before_taking_it_fires_once() {
    both(2, |mut g| {
        hw_level_spi(&mut g, 40, 1);
        g.set_level(IntId(40), 0, true).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Pending, 0)]);
        // The guest cleared the device's interrupt by polling: the line is low.
        let mut low = line(false);
        let retired = sync(&mut g, 1, &mut lrs, &mut low);
        assert_eq!(low.asked, [(40, 40)]);
        assert_eq!(retired.iter().collect::<Vec<_>>(), [IntId(40)]);
        assert_eq!(deliver_all(&mut g, 1, &mut lrs), [], "it does not fire into the guest afterwards");
        assert!(!g.interrupt(1, IntId(40)).unwrap().pending);
        // The SPI is free to be shown again, on any vCPU it is routed to.
        route(&mut g, 40, 0);
        g.set_level(IntId(40), 0, true).unwrap();
        let mut lrs0 = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 0, &mut lrs0), [(40, 0)]);
    });
}

#[test]
fn a_level_interrupt_made_pending_by_ispendr_stays_pending_whatever_the_line() {
    // IHI 0069H 12.9.24, GICD_ISPENDR: a level-sensitive interrupt set pending by a write
    // stays pending until it is acknowledged or cleared, whatever its input.
    both(1, |mut g| {
        hw_level_spi(&mut g, 40, 0);
        let (word, bit) = bit(40);
        g.write(0, ISPENDR + word, 4, bit).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(sync(&mut g, 0, &mut lrs, &mut line(false)).is_empty());
        assert_eq!(lrs.valid(), [(40, LrState::Pending, 0)]);
    });
}

#[test]
fn an_edge_triggered_interrupt_is_pending_once_per_rising_edge_of_its_input() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x80, 0);
        g.set_level(IntId(40), 0, true).unwrap();
        g.set_level(IntId(40), 0, true).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)], "a high input is one edge");
        g.set_level(IntId(40), 0, false).unwrap();
        g.set_level(IntId(40), 0, true).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)], "low then high is a new edge");
        // A level-sensitive one is pending for as long as its input is high.
        spi(&mut g, 41, 0x80, 0);
        set_trigger(&mut g, 41, Trigger::Level);
        g.set_level(IntId(41), 0, true).unwrap();
        run(&mut g, 0, &mut lrs, |l| {
            l.take_all();
        });
        assert!(g.interrupt(0, IntId(41)).unwrap().pending, "still pending: the input is high");
        g.set_level(IntId(41), 0, false).unwrap();
        assert!(!g.interrupt(0, IntId(41)).unwrap().pending);
    });
}

/// A passthrough level SPI whose guest routed it to vCPU 1 while its physical interrupt is
/// taken on vCPU 0's CPU: the guest deactivates it (the physical one with it), the device
/// still asserts its line, the physical interrupt fires again on the other CPU and is raised
/// there (`set_level`) before vCPU 1's next exit takes its list register back. The take-back
/// folds the deactivation of the last one; the new one stays pending (its physical
/// interrupt is active, held for the guest's next deactivation: lost, nobody would ever
/// deactivate it and the device would be silent for good).
#[test]
fn a_passthrough_spi_that_fires_again_before_its_deactivation_is_taken_back_stays_pending() {
    both(2, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        hw_level_spi(&mut g, 40, 1);
        g.set_level(IntId(40), 0, true).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Pending, 0)]);
        assert_eq!(lrs.ack(), Some((40, 0)));
        lrs.deactivate(40);
        assert_eq!(lrs.physical_deactivations, [40]);
        // The line is still high: the physical interrupt fires again on vCPU 0's CPU.
        g.set_level(IntId(40), 0, true).unwrap();
        assert!(sync(&mut g, 1, &mut lrs, &mut line(true)).is_empty());
        assert!(g.interrupt(1, IntId(40)).unwrap().pending, "the second firing is still pending");
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Pending, 0)], "and shown to vCPU 1 again");
        assert_eq!(lrs.ack(), Some((40, 0)));
        lrs.deactivate(40);
        assert_eq!(lrs.physical_deactivations, [40, 40]);
        // This time the device dropped its line: the deactivation's take-back lowers it.
        sync(&mut g, 1, &mut lrs, &mut line(false));
        assert!(!g.interrupt(1, IntId(40)).unwrap().pending);
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty());
    });
}

/// The same second firing, then the device's line seen low (`set_level(false)`) before the
/// take-back of the deactivation: the firing is over, and the fold leaves the line low.
#[test]
fn a_passthrough_spi_that_fired_again_then_dropped_its_line_is_not_pending_after_the_take_back() {
    both(2, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        hw_level_spi(&mut g, 40, 1);
        g.set_level(IntId(40), 0, true).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.ack(), Some((40, 0)));
        lrs.deactivate(40);
        g.set_level(IntId(40), 0, true).unwrap();
        g.set_level(IntId(40), 0, false).unwrap();
        sync(&mut g, 1, &mut lrs, &mut line(false));
        assert!(!g.interrupt(1, IntId(40)).unwrap().pending, "no pending state for a line that dropped");
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty(), "nothing shown to the guest");
    });
}

/// GICD_ISPENDR written for a level-sensitive interrupt that the guest has acknowledged
/// and not yet deactivated: it is active and pending (IHI 0069H 4.1), and stays pending after
/// the exit that takes the acknowledgement back (which used to consume this pending state
/// with the one the acknowledgement took).
#[test]
fn a_level_interrupt_set_pending_while_active_is_pending_after_the_take_back() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 40, 0x80, 0);
        set_trigger(&mut g, 40, Trigger::Level);
        let (word, bit) = bit(40);
        g.write(0, ISPENDR + word, 4, bit).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.ack(), Some((40, 0)));
        // Active in the guest; the guest (or another vCPU) sets it pending again.
        g.write(0, ISPENDR + word, 4, bit).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        let state = g.interrupt(0, IntId(40)).unwrap();
        assert!(state.pending && state.active, "active and pending: {state:?}");
        // Shown so; the guest deactivates the first and takes the second.
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::PendingActive, 0)]);
        lrs.deactivate(40);
        assert_eq!(lrs.ack(), Some((40, 0)));
        lrs.deactivate(40);
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty() && !g.has_pending(0), "taken once, nothing left");
    });
}

/// The list register holding `intid`.
fn lr_of(lrs: &FakeLrs, intid: u32) -> ListRegister {
    (0..4)
        .map(|i| lrs.lr(i))
        .find(|lr| lr.vintid.0 == intid && lr.state != LrState::Invalid)
        .expect("in a list register")
}

#[test]
fn a_software_level_interrupt_asks_for_the_eoi_maintenance_interrupt_only_while_its_input_is_high() {
    both(1, |mut g| {
        let mut lrs = FakeLrs::for_gic(&g, 4);
        spi(&mut g, 48, 0x80, 0);
        set_trigger(&mut g, 48, Trigger::Level);
        // A virtio device raises its line; the guest takes the interrupt, then acknowledges
        // the device (its input drops, at a trapped write) before it deactivates.
        g.set_level(IntId(48), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(lr_of(&lrs, 48).eoi_maintenance, "high: sampled again at deactivation");
        assert_eq!(lrs.ack(), Some((48, 0)));
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.set_level(IntId(48), 0, false).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        let lr = lr_of(&lrs, 48);
        assert_eq!((lr.state, lr.eoi_maintenance), (LrState::Active, false), "low: nothing to sample");
        lrs.deactivate(48);
        assert!(!lrs.maintenance_asserted(), "no maintenance interrupt at the deactivation");
        g.sync_from_hw(0, &mut lrs).unwrap();
        let state = g.interrupt(0, IntId(48)).unwrap();
        assert!(!state.pending && !state.active, "{state:?}");

        // Its input still high when the guest deactivates: sampled again, pending again.
        g.set_level(IntId(48), 0, true).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.ack(), Some((48, 0)));
        lrs.deactivate(48);
        assert!(lrs.maintenance_asserted(), "the EOI maintenance interrupt");
        g.sync_from_hw(0, &mut lrs).unwrap();
        assert!(g.interrupt(0, IntId(48)).unwrap().pending, "the input is still high");
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.ack(), Some((48, 0)));

        // Its input drops, then rises again while the guest still has it active (a completion
        // after the acknowledgement): planned afresh, its list register asks for the
        // maintenance interrupt again, and the deactivation finds the input high.
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.set_level(IntId(48), 0, false).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert!(!lr_of(&lrs, 48).eoi_maintenance);
        g.set_level(IntId(48), 0, true).unwrap();
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        let lr = lr_of(&lrs, 48);
        assert_eq!((lr.state, lr.eoi_maintenance), (LrState::Active, true));
        lrs.deactivate(48);
        assert!(lrs.maintenance_asserted());
        g.sync_from_hw(0, &mut lrs).unwrap();
        g.flush_to_hw(0, &mut lrs).unwrap();
        assert_eq!(lrs.ack(), Some((48, 0)), "taken again: the completion is not lost");
    });
}
