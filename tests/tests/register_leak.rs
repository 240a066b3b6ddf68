//! A vCPU started on a CPU another VM uses sees nothing of that VM (issue: isolation, point 1
//! and 2): a reader VM's vCPUs start (first start, PSCI CPU_ON, and again after SYSTEM_RESET)
//! on CPUs where secret-holders left a marker in every register they can write, and find
//! every register at its reset value; the secret-holders' breakpoints and watchpoints fire
//! for them and never for the reader.

use system_tests::{assert_line, boot, images, placed, test_vm};
use xtask::bundle::{Policy, VmEntry};
use xtask::qemu::Machine;

fn leak_vms() -> Vec<VmEntry> {
    let i = images();
    vec![
        placed(VmEntry { vcpus: 2, ..test_vm("reader", &i.leak_reader, 64 << 20) }, &[2, 3], Policy::Shared),
        placed(test_vm("secret-a", &i.leak_secret, 64 << 20), &[2], Policy::Shared),
        placed(test_vm("secret-b", &i.leak_secret, 64 << 20), &[3], Policy::Shared),
    ]
}

fn check(gic_version: u8, gic_registers: u32) {
    let machine = Machine { gic_version, ..Machine::default() };
    let out = boot(&format!("register-leak-gicv{gic_version}"), machine, &leak_vms());
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert!(!out.console.contains("not ok"), "a check failed; console:\n{}", out.console);
    for secret in ["secret-a", "secret-b"] {
        assert_line(&out, &format!("{secret} | ok 1 - debug: this vCPU's own breakpoint fires"));
        assert_line(&out, &format!("{secret} | ok 2 - debug: this vCPU's own watchpoint fires"));
    }
    // x0-x30, SP, 28 system registers, v0-v31, FPCR and FPSR; then 6 breakpoints and 4
    // watchpoints (Cortex-A72), OSLSR_EL1, the claim tags and, on GICv3, two CPU interface
    // registers.
    let debug_and_gic = 2 * 6 + 2 * 4 + 2 + gic_registers;
    for when in ["at its first start", "after SYSTEM_RESET"] {
        assert_line(&out, &format!("reader | ok 1 - leak: vCPU 0 {when}: 94 registers at their reset value (0 not)"));
        assert_line(
            &out,
            &format!("reader | ok 2 - leak: vCPU 0 {when}: {debug_and_gic} debug and GIC registers at reset (0 not)"),
        );
        assert_line(
            &out,
            &format!(
                "reader | ok 3 - leak: vCPU 1 started with CPU_ON {when}: {} registers at their reset value (0 not)",
                94 + debug_and_gic
            ),
        );
        assert_line(&out, &format!("reader | ok 4 - leak: {when}, no breakpoint or watchpoint of another VM fired"));
    }
    assert_line(&out, "hypervisor: vm0 reader vcpu0: SYSTEM_RESET: the VM reboots");
    assert_line(&out, "hypervisor: all 3 VM(s) ended: 3 clean, 0 failed");
}

#[test]
fn a_vcpu_starting_on_a_shared_cpu_sees_nothing_of_the_vm_that_ran_there_gicv3() {
    check(3, 2);
}

#[test]
fn a_vcpu_starting_on_a_shared_cpu_sees_nothing_of_the_vm_that_ran_there_gicv2() {
    check(2, 0);
}
