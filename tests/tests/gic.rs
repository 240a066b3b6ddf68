//! Interrupts reach a guest through the virtual GIC: its timer and an SGI from its other
//! vCPU (issue: vgic). GICv3 for now; the GICv2 path (GICH list registers, the GICV frame
//! mapped into the guest) is not wired yet.

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
