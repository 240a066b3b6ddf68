//! The AArch32 test guests (guest-images/selftest32): `selftest32` checks from the inside
//! what the hypervisor promises a 32-bit guest, on the ARMv7 image in HYP mode (QEMU `virt`,
//! Cortex-A15, GICv2, 2 CPUs) and as an AArch32 VM on the AArch64 image (Cortex-A72, GICv3
//! and GICv2); every check it prints must be `ok`, but for the few that QEMU 10.0's own
//! defects fail, named below with the line they print (`QemuDefect`). `microbench32` runs
//! once on the ARMv7 image as a functional check (`cargo xtask bench --arch armv7`
//! measures).

use std::path::PathBuf;
use std::sync::OnceLock;

use system_tests::{assert_line, boot, scratch_file, test_vm};
use xtask::bundle::{self, BundleOptions, VmEntry};
use xtask::qemu::{self, Arch, Machine, RunOutput};

/// Every check of `selftest32`, in order: the start of its line after `ok N - ` (the rest
/// says what was read, which differs between CPUs). The GIC line is `GIC_CHECK`'s.
const CHECKS: &[&str] = &[
    "boot: entered in SVC mode, A32, with asynchronous aborts, IRQs and FIQs masked (CPSR 0x1d3)",
    "boot: r0 = 0 and r1 = 0xffffffff, the device tree's machine type (r0 0x0, r1 0xffffffff)",
    "boot: the MMU is off and the vectors are low (SCTLR.M 0, SCTLR.V 0)",
    "boot: r2 points to a device tree in RAM (magic 0xd00dfeed)",
    "smccc: SMCCC_VERSION by HVC returns 1.1 in r0 (got 0x10001)",
    "psci: PSCI_VERSION by HVC returns 1.1 in r0 (got 0x10001)",
    "smccc: an unknown SMC32 function (0x82000042) returns NOT_SUPPORTED (got -1)",
    "sysreg: ID_PFR1 offers no virtualization (Virtualization 0, ID_PFR1 ",
    "sysreg: ID_DFR0 offers no debug architecture (CopDbg 0, ID_DFR0 ",
    "sysreg: ACTLR reads as zero (got 0x0)",
    "sysreg: a write of 0x41 to ACTLR is ignored (reads 0x0)",
    "debug: DBGDIDR (MRC p14, 0, c0, c0, 0) reads as zero (got 0x0)",
    "sysreg: VMRS of MVFR0 reads the CPU's floating-point registers (A_SIMD registers 2, MVFR0 ",
    "cache: a set/way clean and invalidate (DCCISW, MCR p15, 0, c7, c14, 2) completes",
    "cond: MRCNE of ID_PFR0 with Z set leaves its register alone (got 0x5a5a5a5a)",
    "cond: MRCEQ of DBGDIDR with Z set executes, trapped and emulated (got 0x0)",
    "cond: MCRNE of DCCISW with Z set does nothing and completes",
    "undef: L2CTLR (MRC p15, 1, c9, c0, 2; HCR.TIDCP) takes the Undefined vector at VBAR in UND mode, LR = the \
     instruction + 4 (vector 0x4, mode 0x1b, LR - instruction 4)",
    "undef: L2ACTLR (MRC p15, 1, c15, c0, 0; HSTR.T15) takes the Undefined vector at VBAR in UND mode, LR = the \
     instruction + 4 (vector 0x4, mode 0x1b, LR - instruction 4)",
    "abort: a load from IPA 0x30000000 takes the Data Abort vector in ABT mode, LR = the instruction + 8, DFSR = \
     synchronous external abort (vector 0x10, mode 0x17, LR - instruction 8, DFSR 0x8, DFAR 0x30000000)",
    "abort: a store's Data Abort says it was a write (DFSR.WnR; vector 0x10, DFSR 0x808, DFAR 0x30000000)",
    SPSR_CHECK,
    "mmio: LDRNE from UARTFR with Z set leaves its register alone (got 0x5a5a5a5a; UARTFR reads 0x90)",
    "mmio: STRNE to UARTDR with Z set prints nothing (the brackets on the line above are empty)",
    "psci: CPU_ON starts vCPU 1 in SVC mode with r0 = its context ID (status 0, r0 0x5eed1234, mode 0x13)",
    GIC_CHECK,
    "gic: SGI 1 from vCPU 0 reaches vCPU 1's IRQ vector",
    "timer: the virtual timer (CNTV_CVAL by MCRR, CNTV_CTL by MCR) fires through the GIC as INTID 27, after its \
     deadline",
    "gic: no unexpected interrupt (IAR 0x0)",
];
const SPSR_CHECK: &str = "exceptions: each SPSR is the CPSR the exception was taken from (SPSR_und 0x1d3 and 0x1d3, \
                          SPSR_abt 0x1d3; CPSR 0x1d3)";
/// Stands for the GIC check, whose line names the GIC.
const GIC_CHECK: &str = "gic: the device tree's /intc is ";

/// The GIC check's line for a VM with a GICv3 or a GICv2.
fn gic_line(v3: bool) -> &'static str {
    if v3 {
        "gic: the device tree's /intc is arm,gic-v3 and ID_PFR1.GIC says GICv3"
    } else {
        "gic: the device tree's /intc is arm,cortex-a15-gic and ID_PFR1.GIC says GICv2"
    }
}

/// An AArch32 test guest (built once per binary).
fn guest32(bin: &'static str) -> PathBuf {
    static SELFTEST32: OnceLock<PathBuf> = OnceLock::new();
    static MICROBENCH32: OnceLock<PathBuf> = OnceLock::new();
    let cell = if bin == "selftest32" { &SELFTEST32 } else { &MICROBENCH32 };
    cell.get_or_init(|| xtask::images::build_test_guest32(bin).unwrap_or_else(|e| panic!("building {bin}: {e}")))
        .clone()
}

/// The ARMv7 hypervisor image (built once).
fn armv7_hypervisor() -> &'static PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| xtask::images::build_hypervisor_armv7().unwrap_or_else(|e| panic!("the ARMv7 image: {e}")))
}

/// A VM of `bin` with 2 vCPUs and 64 MiB.
fn vm(bin: &'static str) -> VmEntry {
    VmEntry { vcpus: 2, ..test_vm(bin, &guest32(bin), 64 << 20) }
}

/// The ARMv7 image on QEMU `virt` (Cortex-A15, GICv2, 2 CPUs) with `vms`. It has no test
/// hooks, so no semihosting exit: QEMU exits 0 when the VMs end, however they end, and the
/// console says how.
fn boot_armv7(test: &str, vms: &[VmEntry]) -> RunOutput {
    let blob = bundle::write(vms, &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    let machine = Machine { arch: Arch::Armv7, cpu: "cortex-a15".into(), gic_version: 2, smp: 2, ..Machine::default() };
    let out = qemu::run_captured(machine.command(armv7_hypervisor(), Some(&path)), system_tests::QEMU_TIMEOUT, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    assert!(!out.timed_out, "QEMU did not finish within {:?}; console:\n{}", system_tests::QEMU_TIMEOUT, out.console);
    out
}

/// A check that QEMU 10.0 (what these tests run on) makes fail whatever the hypervisor does:
/// the line it then prints, and why. The check may print `ok` (a QEMU without the defect)
/// or exactly this line; any other line fails the test.
struct QemuDefect {
    line: &'static str,
    why: &'static str,
}

/// On the ARMv7 image (QEMU's Cortex-A15): HCR.TID3, which the image sets, traps the CP15 ID
/// registers in the ARMv7 ARM, but QEMU traps only MVFR0 and MVFR1 on a v7 core (fixed by
/// "target/arm: Correctly honour HCR.TID3 for v7A cores", qemu-devel, 31 December 2025,
/// after QEMU 10.0), so the guest reads the CPU's own ID_PFR1 and ID_DFR0.
const ARMV7_DEFECTS: &[QemuDefect] = &[
    QemuDefect {
        line: "not ok 8 - sysreg: ID_PFR1 offers no virtualization (Virtualization 1, ID_PFR1 0x11001)",
        why: "QEMU does not trap a v7 core's ID_PFR1 on HCR.TID3",
    },
    QemuDefect {
        line: "not ok 9 - sysreg: ID_DFR0 offers no debug architecture (CopDbg 5, ID_DFR0 0x2000505)",
        why: "QEMU does not trap a v7 core's ID_DFR0 on HCR.TID3",
    },
];

/// On the AArch64 image: QEMU keeps the live SPSR of an AArch32 mode (`env->spsr`) apart
/// from the banked copies AArch64 code reads and writes (`banked_spsr[]`, SPSR_und, SPSR_abt,
/// SPSR_EL1), and syncs them only on mode changes made in AArch32: not on an exception from
/// AArch32 EL1 to AArch64 EL2, nor on the ERET back (`aarch64_sync_64_to_32` and the raw
/// CPSR write of its `exception_return`). So the SPSR_und or SPSR_abt the hypervisor writes
/// when it injects an exception (hyp-arch-armv8 `inject_aarch32`, `msr spsr_und`) is not
/// what the guest's handler reads in that mode: it reads the SPSR of the mode it was in
/// when it trapped (SPSR_svc, zero here).
const AARCH64_DEFECTS: &[QemuDefect] = &[QemuDefect {
    line: "not ok 22 - exceptions: each SPSR is the CPSR the exception was taken from (SPSR_und 0x0 and 0x0, \
           SPSR_abt 0x0; CPSR 0x1d3)",
    why: "QEMU does not load the SPSR_und/SPSR_abt an AArch64 EL2 wrote when it returns to that AArch32 mode",
}];

/// Every check `selftest32` printed is `ok` or one of `defects`, each of CHECKS is there in
/// order, and the guest ended saying so: the QEMU exit status that follows (with the tests'
/// semihosting exit), 0 when every check passed, 1 when a defect failed one.
fn assert_every_check_passed(out: &RunOutput, gic_v3: bool, defects: &[QemuDefect]) -> i32 {
    let checks: Vec<&str> = out
        .console
        .lines()
        .filter_map(|l| l.strip_prefix("selftest32 | "))
        .filter(|l| l.starts_with("ok ") || l.starts_with("not ok"))
        .collect();
    assert_eq!(checks.len(), CHECKS.len(), "the checks printed:\n{}", out.console);
    let mut failed = Vec::new();
    for (n, (line, wanted)) in checks.iter().zip(CHECKS).enumerate() {
        let wanted = if *wanted == GIC_CHECK { gic_line(gic_v3) } else { wanted };
        let prefix = format!("ok {} - {wanted}", n + 1);
        match defects.iter().find(|d| d.line == *line) {
            Some(defect) => failed.push(defect.why),
            None => assert!(line.starts_with(&prefix), "check {}: expected {prefix:?}, got {line:?}", n + 1),
        }
    }
    assert_line(out, "selftest32 | conditional store: []");
    assert_line(out, "selftest32 | vcpu1: started in mode 0x13 with r0 0x5eed1234");
    if failed.is_empty() {
        assert_line(
            out,
            &format!("selftest32 | selftest32: all {} checks passed; powering off with PSCI SYSTEM_OFF", CHECKS.len()),
        );
        assert_line(out, "hypervisor: vm0 selftest32 vcpu0: PSCI SYSTEM_OFF: the VM powers off");
        assert_line(out, "hypervisor: vm0 selftest32 ended: PoweredOff (clean)");
        0
    } else {
        eprintln!("selftest32: failed as QEMU 10.0 makes it fail: {failed:?}");
        assert_line(out, &format!("selftest32 | selftest32: {} of {} checks failed", failed.len(), CHECKS.len()));
        assert_line(out, "hypervisor: vm0 selftest32 vcpu0: HYP_VM_EXIT with status 1");
        1
    }
}

/// The ARMv7 image runs selftest32: every check passes but those QEMU's Cortex-A15 fails
/// (`ARMV7_DEFECTS`).
#[test]
fn selftest32_passes_on_the_armv7_image() {
    let out = boot_armv7("selftest32-armv7", &[vm("selftest32")]);
    assert_line(&out, "hypervisor 0.1.0 (ARMv7, HYP mode)");
    assert_line(&out, "hypervisor: vm0 selftest32 vcpu0: starting at IPA 0x42000000 (Aarch32)");
    // No test hooks on this image: QEMU exits 0 however the VM ended.
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_every_check_passed(&out, false, ARMV7_DEFECTS);
}

/// The AArch64 image runs selftest32 as an AArch32 VM with a GICv3 (through the CP15 ICC
/// registers): every check passes but the one QEMU fails (`AARCH64_DEFECTS`).
#[test]
fn selftest32_passes_as_an_aarch32_vm_on_the_aarch64_image_with_gicv3() {
    let out = boot("selftest32-gicv3", Machine { smp: 2, ..Machine::default() }, &[vm("selftest32")]);
    assert_line(&out, "hypervisor: vm0 selftest32 vcpu0: starting at IPA 0x42000000 (Aarch32)");
    let status = assert_every_check_passed(&out, true, AARCH64_DEFECTS);
    assert_eq!(out.status, Some(status), "QEMU exit status; console:\n{}", out.console);
}

/// The same with a GICv2 board: the VM's GIC is a GICv2.
#[test]
fn selftest32_passes_as_an_aarch32_vm_on_the_aarch64_image_with_gicv2() {
    let out = boot("selftest32-gicv2", Machine { gic_version: 2, smp: 2, ..Machine::default() }, &[vm("selftest32")]);
    let status = assert_every_check_passed(&out, false, AARCH64_DEFECTS);
    assert_eq!(out.status, Some(status), "QEMU exit status; console:\n{}", out.console);
}

#[test]
fn microbench32_runs_to_completion_on_the_armv7_image() {
    let out = boot_armv7("microbench32-armv7", &[vm("microbench32")]);
    for name in ["loop", "hvc-unknown", "hvc-smccc-version", "mmio-read", "virtio-read", "virtio-write", "gicd-read"] {
        assert_line(&out, &format!("microbench32 | bench {name} iterations=10000 ns="));
    }
    for name in ["counter", "virtual-ipi", "virtual-ipi-round-trip", "eoi", "vtimer"] {
        assert_line(&out, &format!("microbench32 | latency {name} samples=10000 ns="));
    }
    assert_line(&out, "microbench32 | microbench32: done");
    assert!(!out.console.contains("unexpected"), "{}", out.console);
    let figures = xtask::bench::parse(&out.console);
    let names: Vec<&str> = figures.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "eoi",
            "gicd-read",
            "hvc-smccc-version",
            "hvc-unknown",
            "mmio-read",
            "virtio-read",
            "virtio-write",
            "virtual-ipi",
            "virtual-ipi-round-trip",
            "vtimer"
        ]
    );
}
