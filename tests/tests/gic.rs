//! Interrupts reach a guest through the virtual GIC: its timer and an SGI from its other
//! vCPU, on GICv3 (list registers in ICH_*, SGIs by trapped ICC_SGI1R_EL1) and GICv2 (list
//! registers in GICH, the GICV frame mapped into the guest, SGIs by GICD_SGIR).

use system_tests::{assert_line, boot, images, test_vm};
use xtask::qemu::Machine;

#[test]
fn a_gicv3_guest_takes_its_timer_interrupt_and_an_sgi_from_its_second_vcpu() {
    let vm = xtask::bundle::VmEntry { vcpus: 2, ..test_vm("gic", &images().gic, 64 << 20) };
    let out = boot("gic-v3", Machine::default(), &[vm]);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "gic | ok 1 - gic: the distributor is enabled with affinity routing (GICD_CTLR 0x52)");
    assert_line(&out, "gic | ok 2 - gic: the virtual timer interrupt (INTID 27) arrives");
    assert_line(&out, "gic | ok 3 - gic: SGI 1 sent by vCPU 1 with ICC_SGI1R_EL1 arrives on vCPU 0");
}

#[test]
fn a_gicv2_guest_takes_its_timer_interrupt_and_an_sgi_from_its_second_vcpu() {
    let vm = xtask::bundle::VmEntry { vcpus: 2, ..test_vm("gic", &images().gic, 64 << 20) };
    let out = boot("gic-v2", Machine { gic_version: 2, smp: 2, ..Machine::default() }, &[vm]);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "gic | ok 1 - gic: the GICv2 distributor is enabled and reports 2 CPUs (GICD_TYPER 0x23)");
    assert_line(&out, "gic | ok 2 - gic: the virtual timer interrupt (INTID 27) arrives");
    assert_line(&out, "gic | ok 3 - gic: SGI 1 sent by vCPU 1 with GICD_SGIR arrives on vCPU 0");
}
