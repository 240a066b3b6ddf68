//! Interrupts reach a guest through the virtual GIC: its timer and an SGI from its other
//! vCPU, on GICv3 (list registers in ICH_*, SGIs by trapped ICC_SGI1R_EL1) and GICv2 (list
//! registers in GICH, the GICV frame mapped into the guest, SGIs by GICD_SGIR); a timer
//! interrupt whose line dropped before the guest took it is not taken; the distributor's
//! control words read alike whether the hypervisor's vector or its run loop answers; SGIs
//! sent back and forth all arrive once.

use system_tests::{assert_line, boot, images, test_vm};
use xtask::qemu::Machine;

/// The virtual timer's interrupt follows its line (issue: isolation, point 4); an active
/// interrupt no list register shows ends when the guest ends it (docs/vgic.md, "Active
/// interrupts no list register shows").
fn assert_timer_and_active_interrupts(out: &xtask::qemu::RunOutput) {
    assert_line(out, "gic | ok 6 - gic: one expiry of the timer is one interrupt (took 1)");
    assert_line(
        out,
        "gic | ok 7 - gic: a timer interrupt pending while turned off (ENABLE = 0) with interrupts masked is not taken (took 0)",
    );
    assert_line(
        out,
        "gic | ok 8 - gic: a timer interrupt pending while masked (IMASK = 1) with interrupts masked is not taken (took 0)",
    );
    // On GICv2 the hypervisor's watch of a pinned vCPU's WFI after its timer's interrupt
    // (docs/vgic.md, "QEMU's GICv2 and the timer of a pinned vCPU"): without it this run
    // stopped after "waiting in WFI for 4 timer interrupts".
    assert_line(
        out,
        "gic | ok 9 - gic: a timer still due when its handler ends fires again, the vCPU waiting in WFI (took 4 of 4)",
    );
    assert_line(
        out,
        "gic | ok 10 - gic: six interrupts active on four list registers all end when the guest ends them \
         (taken [40, 41, 42, 43], then GICD_ISACTIVER1 0x0, and SPI 40 taken again: 40)",
    );
}

#[test]
fn a_gicv3_guest_takes_its_timer_interrupt_and_an_sgi_from_its_second_vcpu() {
    let vm = xtask::bundle::VmEntry { vcpus: 2, ..test_vm("gic", &images().gic, 64 << 20) };
    let out = boot("gic-v3", Machine::default(), &[vm]);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "gic | ok 1 - gic: the distributor is enabled with affinity routing (GICD_CTLR 0x52)");
    // LDR and LDAR are answered in the vector, LDRSW by the distributor (docs/vgic.md, "The
    // control words answered in the vector").
    assert_line(
        &out,
        "gic | ok 2 - gic: GICD_CTLR, GICD_TYPER, GICD_IIDR and GICD_TYPER2 read alike by LDR, LDRSW and LDAR, \
         GICD_CTLR as last written ([(52, 52, 52), (490003, 490003, 490003), (4800043b, 4800043b, 4800043b), \
         (0, 0, 0)]; GICD_CTLR 0x50 with its groups off, 0x52 on again)",
    );
    assert_line(&out, "gic | ok 3 - gic: the virtual timer interrupt (INTID 27) arrives");
    assert_line(&out, "gic | ok 4 - gic: SGI 1 sent by vCPU 1 with ICC_SGI1R_EL1 arrives on vCPU 0");
    // The same SGI back to a vCPU many times in a row, shown again by the vector (docs/vgic.md,
    // "The same SGI shown again in the vector"), and one the target disabled, which waits.
    assert_line(
        &out,
        "gic | ok 5 - gic: 400 SGIs to vCPU 1, each answered by one to vCPU 0, all arrive once; one sent to vCPU 0 \
         after it disables it waits until it enables it, once (PINGS, PONGS, disabled, PONGS then, after: \
         Ok((400, 400, true, 400, 401)))",
    );
    assert_timer_and_active_interrupts(&out);
    // ICV_DIR_EL1 traps while an active interrupt is left out (GICv3 only: GICv2's GICV_DIR
    // is in the guest's page).
    assert_line(
        &out,
        "gic | ok 11 - gic: with EOImode 1, DIR ends the interrupt it names, in any order \
         (GICD_ISACTIVER1 0x3e00 after SPI 40's, 0x0 after all, and SPI 40 taken again: 40)",
    );
}

#[test]
fn a_gicv2_guest_takes_its_timer_interrupt_and_an_sgi_from_its_second_vcpu() {
    let vm = xtask::bundle::VmEntry { vcpus: 2, ..test_vm("gic", &images().gic, 64 << 20) };
    let out = boot("gic-v2", Machine { gic_version: 2, smp: 2, ..Machine::default() }, &[vm]);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "gic | ok 1 - gic: the GICv2 distributor is enabled and reports 2 CPUs (GICD_TYPER 0x23)");
    assert_line(
        &out,
        "gic | ok 2 - gic: GICD_CTLR, GICD_TYPER, GICD_IIDR and GICD_TYPER2 read alike by LDR, LDRSW and LDAR, \
         GICD_CTLR as last written ([(1, 1, 1), (23, 23, 23), (4800043b, 4800043b, 4800043b), (0, 0, 0)]; \
         GICD_CTLR 0x0 with its groups off, 0x1 on again)",
    );
    assert_line(&out, "gic | ok 3 - gic: the virtual timer interrupt (INTID 27) arrives");
    assert_line(&out, "gic | ok 4 - gic: SGI 1 sent by vCPU 1 with GICD_SGIR arrives on vCPU 0");
    // A GICv2's SGIs stay enabled (RAO/WI, IHI 0048B 4.3.5; the vGIC's choice).
    assert_line(
        &out,
        "gic | ok 5 - gic: 400 SGIs to vCPU 1, each answered by one to vCPU 0, all arrive once; one sent to vCPU 0 \
         after it disables it arrives at once, as it stays enabled, once (PINGS, PONGS, disabled, PONGS then, \
         after: Ok((400, 400, false, 401, 401)))",
    );
    assert_timer_and_active_interrupts(&out);
}

/// A periodic timer costs one exit per tick (the physical timer interrupt; the guest's
/// deactivation goes to the hardware, and nothing else traps), on both GIC versions. Run
/// with `-icount shift=0`: on GICv2, QEMU re-signals a level-sensitive physical interrupt
/// that a guest deactivates through a hardware-mapped list register only at the next
/// physical GIC event (docs/vgic.md), so a guest whose next deadline has already passed when
/// it deactivates (a host too loaded to run it in time) would stall under QEMU.
#[test]
fn a_periodic_timer_costs_one_exit_per_tick() {
    for gic_version in [3, 2] {
        let machine = Machine { gic_version, smp: 2, icount: true, ..Machine::default() };
        let out = boot(&format!("ticker-v{gic_version}"), machine, &[test_vm("ticker", &images().ticker, 64 << 20)]);
        assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
        let taken: u64 = out
            .console
            .lines()
            .find_map(|l| l.strip_prefix("ticker | ok 1 - ticker: ")?.strip_suffix(" ticks of 1000 us taken"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no tick count; console:\n{}", out.console));
        let counts = out
            .console
            .lines()
            .find_map(|l| l.strip_prefix("hypervisor: vm0 ticker: ").filter(|r| r.contains(" exits")))
            .unwrap_or_else(|| panic!("no exit counts; console:\n{}", out.console));
        let count = |reason: &str| -> u64 {
            counts.split(", ").find_map(|p| p.strip_prefix(&format!("{reason} "))?.parse().ok()).unwrap_or(0)
        };
        println!("GICv{gic_version}: {taken} ticks; {counts}");
        assert!(taken >= 200, "GICv{gic_version}: {taken} ticks");
        assert_eq!(count("timer-irq"), taken, "GICv{gic_version}: one timer exit per tick: {counts}");
        // No other interrupt brought it out: no maintenance interrupt, no kick (the other
        // exits are its own console writes, GIC set-up and PSCI calls).
        let interrupts: u64 = ["kick", "maintenance", "slice-end", "other-irq"].iter().map(|r| count(r)).sum();
        assert_eq!(interrupts, 0, "GICv{gic_version}: {counts}");
    }
}
