//! A passthrough device's SPI is hardware-mapped: the hypervisor holds its physical
//! interrupt active from its acknowledgement until the guest's deactivation reaches it
//! through a list register with HW = 1 (IHI 0069H 12.4.6; IHI 0048B 5.3.2). When the guest
//! discards the virtual interrupt otherwise (GICD_ICPENDR before taking it, GICD_ICACTIVER
//! after), no such deactivation comes: the vGIC hands the physical INTID to the hypervisor
//! (`Distributor::deactivate_retired`), or the device's interrupt would never fire again.
//! Each physical activation is deactivated exactly once, by one path or the other.

mod common;

use common::*;
use vgic::*;

/// An edge-triggered SPI `intid` of the VM, hardware-mapped to the same physical INTID,
/// routed to `target`, fired once (its physical interrupt now active).
fn fired_hw_edge_spi(g: &mut Distributor, intid: u32, target: usize) {
    spi(g, intid, 0x80, target);
    g.set_hw(IntId(intid), 0, Some(IntId(intid))).unwrap();
    g.inject_edge(IntId(intid), 0).unwrap();
}

/// SPI 40 fired for vCPU 1 (`fired_hw_edge_spi`), and vCPU 1's list registers planned:
/// one shows it pending.
fn fired_and_shown_to_vcpu_1(g: &mut Vgic) -> FakeLrs {
    fired_hw_edge_spi(g, 40, 1);
    let mut lrs = FakeLrs::for_gic(g, 4);
    g.flush_to_hw(1, &mut lrs).unwrap();
    lrs
}

fn retired(g: &mut Distributor) -> Vec<u32> {
    let mut out = vec![];
    g.deactivate_retired(|p| out.push(p.0));
    out
}

fn clear(g: &mut Distributor, block: u64, intid: u32) {
    let (word, bit) = bit(intid);
    g.write(0, block + word, 4, bit).unwrap();
}

#[test]
fn a_passthrough_edge_spi_cleared_before_the_guest_took_it_is_deactivated_by_the_hypervisor() {
    both(1, |mut g| {
        fired_hw_edge_spi(&mut g, 40, 0);
        assert!(!g.has_retired(), "pending in the vGIC: the guest's deactivation will come");
        clear(&mut g, ICPENDR, 40);
        assert!(g.has_retired());
        assert_eq!(retired(&mut g), [40]);
        assert!(!g.has_retired() && retired(&mut g).is_empty(), "once");
        let mut lrs = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [], "nothing reaches the guest");
        // The device fires again (its physical interrupt deactivated, it can): delivered,
        // and deactivated by the guest alone.
        g.inject_edge(IntId(40), 0).unwrap();
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)]);
        assert_eq!(lrs.physical_deactivations, [40]);
        assert!(!g.has_retired());
        // Clearing what is already clear, or clearing again, discards nothing.
        clear(&mut g, ICPENDR, 40);
        clear(&mut g, ICACTIVER, 40);
        assert!(!g.has_retired());
    });
}

#[test]
fn a_passthrough_spi_left_active_and_cleared_through_icactiver_is_deactivated_by_the_hypervisor() {
    both(2, |mut g| {
        let mut lrs = fired_and_shown_to_vcpu_1(&mut g);
        assert_eq!(lrs.ack(), Some((40, 0)));
        // vCPU 1 leaves its CPU in its handler; vCPU 0's guest ends the interrupt through
        // the distributor instead of vCPU 1's deactivation.
        g.put(1, &mut lrs).unwrap();
        assert!(g.interrupt(1, IntId(40)).unwrap().active);
        assert!(!g.has_retired(), "active in the vGIC: vCPU 1's deactivation will come");
        clear(&mut g, ICACTIVER, 40);
        assert_eq!(retired(&mut g), [40]);
        let mut again = FakeLrs::for_gic(&g, 4);
        g.flush_to_hw(1, &mut again).unwrap();
        assert!(again.valid().is_empty(), "no list register shows it again");
        assert!(again.physical_deactivations.is_empty());
    });
}

#[test]
fn a_passthrough_spi_cleared_while_a_list_register_shows_it_is_deactivated_when_that_register_lets_it_go() {
    both(2, |mut g| {
        let mut lrs = fired_and_shown_to_vcpu_1(&mut g);
        assert_eq!(lrs.valid(), [(40, LrState::Pending, 0)]);
        // vCPU 0 clears it while vCPU 1 runs with it in a list register: vCPU 1's guest may
        // still take it there (and deactivate the physical one itself) until its next exit.
        clear(&mut g, ICPENDR, 40);
        assert!(!g.has_retired(), "a list register still holds it");
        g.sync_from_hw(1, &mut lrs).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert!(lrs.valid().is_empty(), "no longer pending: the register is emptied");
        assert_eq!(retired(&mut g), [40]);
        assert!(lrs.physical_deactivations.is_empty());
    });
}

#[test]
fn a_passthrough_spi_cleared_in_a_list_register_the_vcpu_takes_off_its_cpu_is_deactivated() {
    both(2, |mut g| {
        let mut lrs = fired_and_shown_to_vcpu_1(&mut g);
        clear(&mut g, ICPENDR, 40);
        g.put(1, &mut lrs).unwrap();
        assert_eq!(retired(&mut g), [40]);
    });
}

#[test]
fn a_passthrough_spi_the_guest_took_before_its_clear_reached_it_is_deactivated_by_the_guest_alone() {
    both(2, |mut g| {
        let mut lrs = fired_and_shown_to_vcpu_1(&mut g);
        clear(&mut g, ICPENDR, 40);
        // vCPU 1's guest acknowledged it before the clear could reach its list register.
        assert_eq!(lrs.ack(), Some((40, 0)));
        g.sync_from_hw(1, &mut lrs).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.valid(), [(40, LrState::Active, 0)], "its handler runs");
        lrs.deactivate(40);
        g.sync_from_hw(1, &mut lrs).unwrap();
        g.flush_to_hw(1, &mut lrs).unwrap();
        assert_eq!(lrs.physical_deactivations, [40]);
        assert!(!g.has_retired(), "deactivated once, by the guest");
    });
}

#[test]
fn clearing_a_passthrough_level_spi_whose_line_is_high_or_an_emulated_spi_retires_nothing() {
    both(1, |mut g| {
        // A level SPI stays pending while its line is high (IHI 0069H 12.9, GICD_ICPENDR<n>):
        // the guest takes it and deactivates the physical one itself.
        spi(&mut g, 40, 0x80, 0);
        set_trigger(&mut g, 40, Trigger::Level);
        g.set_hw(IntId(40), 0, Some(IntId(40))).unwrap();
        g.set_level(IntId(40), 0, true).unwrap();
        clear(&mut g, ICPENDR, 40);
        assert!(!g.has_retired());
        // An emulated device's SPI has no physical interrupt.
        spi(&mut g, 41, 0x80, 0);
        g.inject_edge(IntId(41), 0).unwrap();
        clear(&mut g, ICPENDR, 41);
        assert!(!g.has_retired());
        let mut lrs = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)]);
        assert_eq!(lrs.physical_deactivations, [40]);
    });
}

/// A level device whose SPI the guest configured edge-triggered: the hypervisor raises it
/// as the device's line (`set_level`), and the vGIC sees a rise only from low. Cleared
/// before the guest took it, it is retired, and its line goes low with it, as at the
/// guest's own deactivation: the physical interrupt's next firing is a rise again.
#[test]
fn a_passthrough_spi_the_guest_made_edge_triggered_fires_again_after_it_was_cleared() {
    both(1, |mut g| {
        spi(&mut g, 40, 0x80, 0);
        g.set_hw(IntId(40), 0, Some(IntId(40))).unwrap();
        g.set_level(IntId(40), 0, true).unwrap();
        clear(&mut g, ICPENDR, 40);
        assert_eq!(retired(&mut g), [40], "no longer pending, its line high notwithstanding");
        g.set_level(IntId(40), 0, true).unwrap();
        let mut lrs = FakeLrs::for_gic(&g, 4);
        assert_eq!(deliver_all(&mut g, 0, &mut lrs), [(40, 0)], "the next firing is an edge");
        assert_eq!(lrs.physical_deactivations, [40]);
    });
}
