//! The selftest guest: runs at EL1 under stage-2 translation and checks, from the inside,
//! what the hypervisor promises a guest: its trapped UART, SMCCC and PSCI, and the
//! architected fault for every bad access. One line per check, then PSCI SYSTEM_OFF when
//! every check passed, or HYP_VM_EXIT(1).
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use selftest_guest::*;

/// Reads of UARTFR in a row, more than every other data abort of the test together.
const UARTFR_READS: usize = 20_000;

/// An IPA where the VM has neither RAM nor a device.
const UNMAPPED_IPA: usize = 0x1000_0000;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    println!("selftest: running at EL{} under the hypervisor", current_el());

    // SAFETY: a read of the VM's emulated PL011 (MMIO).
    let id0 = unsafe { read_volatile((UART + 0xfe0) as *const u32) };
    // SAFETY: a read of the VM's emulated PL011 (MMIO).
    let fr = unsafe { read_volatile((UART + 0x18) as *const u32) };
    c.check(
        id0 == 0x11 && fr & 0x80 != 0,
        format_args!("uart: trapped PL011 answers (UARTPeriphID0 {id0:#x}, UARTFR {fr:#x})"),
    );

    let v = hvc(PSCI_VERSION, 0);
    c.check(v == 0x1_0001, format_args!("psci: PSCI_VERSION over HVC returns 1.1 (got {v:#x})"));

    let v = hvc(SMCCC_VERSION, 0);
    c.check(v == 0x1_0001, format_args!("smccc: SMCCC_VERSION returns 1.1 (got {v:#x})"));

    let v = hvc(0xc200_0042, 0) as i64;
    c.check(v == -1, format_args!("smccc: an unknown function returns NOT_SUPPORTED (got {v})"));

    let v = hvc_with_immediate_1(PSCI_VERSION) as i64;
    c.check(v == -1, format_args!("smccc: HVC with a non-zero immediate returns NOT_SUPPORTED (got {v})"));

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe {
        let _ = read_volatile(UNMAPPED_IPA as *const u32);
    });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UNMAPPED_IPA),
        format_args!(
            "memory: a load from unmapped IPA {UNMAPPED_IPA:#x} gives a synchronous external abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe { write_volatile((UNMAPPED_IPA + 8) as *mut u64, 0x5a5a) });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UNMAPPED_IPA + 8),
        format_args!(
            "memory: a store to an unmapped IPA gives a synchronous external abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe {
        asm!("blr {}", in(reg) UNMAPPED_IPA, out("x30") _, clobber_abi("C"));
    });
    c.check(
        is_external_abort(caught, EC_INSTRUCTION_ABORT_SAME_EL, UNMAPPED_IPA),
        format_args!(
            "memory: a jump to an unmapped IPA gives an instruction abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // The UART's page reads as a register file (reserved offsets as zero), from memory
    // while nothing is received; writes always trap to the hypervisor's model.
    // The system test checks from the VM's exit counts that the UARTFR reads did not trap.
    // SAFETY: a write of UARTIBRD, then reads of the VM's emulated PL011 (MMIO).
    let (ibrd, reserved) = unsafe {
        write_volatile((UART + 0x24) as *mut u32, 0x1234);
        for _ in 0..UARTFR_READS {
            read_volatile((UART + 0x18) as *const u32);
        }
        (read_volatile((UART + 0x24) as *const u32), read_volatile((UART + 0x800) as *const u32))
    };
    c.check(
        ibrd == 0x1234 && reserved == 0,
        format_args!("uart: UARTIBRD reads back what was written (got {ibrd:#x}), a reserved offset reads as zero (got {reserved:#x})"),
    );

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe { write_volatile((UART + 0x800) as *mut u32, 0x5a) });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UART + 0x800),
        format_args!(
            "mmio: a write of a missing UART register gives an external abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe { write_volatile(UART as *mut u64, u64::from(b'!')) });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UART),
        format_args!("mmio: a 64-bit UART write gives an external abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    // The vGIC's windows are decoded before the other devices': their refusals too.
    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe {
        let _ = read_volatile(gic::GICD as *const u64);
    });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, gic::GICD),
        format_args!(
            "mmio: a 64-bit GIC distributor access gives an external abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // GICR_TYPER allows 32- and 64-bit reads only; with a GICv2 there is nothing there.
    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe {
        let _ = read_volatile((gic::GICR + 0x8) as *const u8);
    });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, gic::GICR + 0x8),
        format_args!(
            "mmio: a byte read of GICR_TYPER gives an external abort (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe { asm!("mrs {}, pmccntr_el0", out(reg) _) });
    c.check(
        matches!(caught, Some((esr, _)) if esr >> 26 == 0),
        format_args!(
            "sysreg: a PMU register the hypervisor does not offer is an undefined instruction (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );

    let ram_ok = {
        let p = 0x4100_0000 as *mut u64;
        // SAFETY: this VM's own RAM, which nothing else uses.
        unsafe { write_volatile(p, 0x1234_5678_9abc_def0) };
        // SAFETY: this VM's own RAM, which nothing else uses.
        unsafe { read_volatile(p) == 0x1234_5678_9abc_def0 }
    };
    c.check(ram_ok, format_args!("memory: RAM at IPA 0x41000000 reads back what was written"));

    smp_checks(&mut c);
    sysreg_checks(&mut c);
    timer_checks(&mut c);
    let dtb = boot_x0();
    let mut magic = 0;
    // SAFETY: a read where x0 says the device tree is; an abort (x0 outside RAM) is caught.
    let caught = expect_exception(|| magic = u32::from_be(unsafe { read_volatile(dtb as *const u32) }));
    if caught.is_some() {
        magic = 0;
    }
    c.check(magic == 0xd00d_feed, format_args!("boot: x0 points to a device tree in RAM (magic {magic:#x})"));
    finish("selftest", &c)
}

fn timer_checks(c: &mut Checks) {
    let (virt, phys, freq): (u64, u64, u64);
    // SAFETY: counter reads at EL1.
    unsafe {
        asm!("isb", "mrs {}, cntvct_el0", out(reg) virt);
        asm!("mrs {}, cntpct_el0", out(reg) phys);
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
    }
    // The VM was created moments ago: its virtual counter is below the board's and young.
    c.check(
        virt < phys && virt < 60 * freq,
        format_args!("timer: the VM's virtual counter starts at its creation (CNTVOFF set per VM)"),
    );
    // SAFETY: an access the hypervisor must refuse; `expect_exception` catches the exception it injects.
    let caught = expect_exception(|| unsafe { asm!("mrs {}, cntp_ctl_el0", out(reg) _) });
    c.check(
        matches!(caught, Some((esr, _)) if esr >> 26 == 0),
        format_args!(
            "timer: the EL1 physical timer is refused with an undefined instruction (ESR_EL1 {:#x})",
            caught.map_or(0, |c| c.0)
        ),
    );
}

fn sysreg_checks(c: &mut Checks) {
    let (pfr0, dfr0, mmfr0, actlr): (u64, u64, u64, u64);
    // SAFETY: reads of ID registers and ACTLR_EL1, which the hypervisor traps and emulates.
    unsafe {
        asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0);
        asm!("mrs {}, id_aa64dfr0_el1", out(reg) dfr0);
        asm!("mrs {}, id_aa64mmfr0_el1", out(reg) mmfr0);
        asm!("mrs {}, actlr_el1", out(reg) actlr);
    }
    let field = |v: u64, lsb: u32| (v >> lsb) & 0xf;
    c.check(
        field(pfr0, 8) == 0 && field(pfr0, 32) == 0,
        format_args!(
            "sysreg: ID_AA64PFR0_EL1 offers neither EL2 nor SVE (EL2 {}, SVE {})",
            field(pfr0, 8),
            field(pfr0, 32)
        ),
    );
    c.check(field(dfr0, 8) == 0, format_args!("sysreg: ID_AA64DFR0_EL1 offers no PMU (PMUVer {})", field(dfr0, 8)));
    c.check(
        field(mmfr0, 0) == 2,
        format_args!("sysreg: ID_AA64MMFR0_EL1.PARange is the VM's 40-bit IPA size (got {})", field(mmfr0, 0)),
    );
    c.check(actlr == 0, format_args!("sysreg: ACTLR_EL1 reads as zero (got {actlr:#x})"));
}

/// Written by vCPU 1 (the guest runs with its MMU off, so plain volatile accesses are
/// ordered between vCPUs).
static mut SEEN_CONTEXT: u64 = 0;
static mut VCPU1_RAN: u64 = 0;
static mut VCPU1_RELEASE: u64 = 0;

extern "C" fn vcpu1_main(context: u64) {
    // SAFETY: these statics are only written here and only read by vCPU 0.
    unsafe {
        write_volatile(&raw mut SEEN_CONTEXT, context);
        write_volatile(&raw mut VCPU1_RAN, 1);
        while read_volatile(&raw const VCPU1_RELEASE) == 0 {
            core::hint::spin_loop();
        }
    }
    hvc(PSCI_CPU_OFF, 0);
    println!("not ok - CPU_OFF returned on vCPU 1");
}

/// Waits (at most about a second) for `cond`.
fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if cond() {
            return true;
        }
        wait_ms(1);
    }
    cond()
}

fn smp_checks(c: &mut Checks) {
    const CONTEXT: u64 = 0x5eed_1234;
    let status = start_vcpu(1, vcpu1_main, CONTEXT);
    // SAFETY: reads of statics vCPU 1 writes.
    let ran = wait_until(|| unsafe { read_volatile(&raw const VCPU1_RAN) } == 1);
    // SAFETY: a read of a static vCPU 1 writes.
    let seen = unsafe { read_volatile(&raw const SEEN_CONTEXT) };
    c.check(
        status == 0 && ran && seen == CONTEXT,
        format_args!("psci: CPU_ON starts vCPU 1 with its context id in x0 (status {status}, context {seen:#x})"),
    );
    let on = hvc3(PSCI_AFFINITY_INFO_64, 1, 0, 0) as i64;
    c.check(on == 0, format_args!("psci: AFFINITY_INFO says vCPU 1 is ON (got {on})"));
    let again = start_vcpu(1, vcpu1_main, 0);
    c.check(again == -4, format_args!("psci: CPU_ON of a running vCPU returns ALREADY_ON (got {again})"));
    let bad = start_vcpu(7, vcpu1_main, 0);
    c.check(
        bad == -2,
        format_args!("psci: CPU_ON of a vCPU the VM does not have returns INVALID_PARAMETERS (got {bad})"),
    );
    let outside = hvc3(PSCI_CPU_ON_64, 1, 0x1000, 0) as i64;
    c.check(
        outside == -9,
        format_args!("psci: CPU_ON with an entry point outside the VM returns INVALID_ADDRESS (got {outside})"),
    );
    // SAFETY: vCPU 1 waits for this.
    unsafe { write_volatile(&raw mut VCPU1_RELEASE, 1) };
    let off = wait_until(|| hvc3(PSCI_AFFINITY_INFO_64, 1, 0, 0) as i64 == 1);
    c.check(off, format_args!("psci: after its CPU_OFF, AFFINITY_INFO says vCPU 1 is OFF"));

    // Started again, vCPU 1 spins without ever leaving the guest: SYSTEM_OFF must still end
    // the whole VM (the hypervisor kicks vCPU 1's physical CPU).
    let status = start_vcpu(1, spin_main, 0);
    let on = wait_until(|| hvc3(PSCI_AFFINITY_INFO_64, 1, 0, 0) as i64 == 0);
    c.check(status == 0 && on, format_args!("psci: CPU_ON restarts vCPU 1 after its CPU_OFF (status {status})"));
}

extern "C" fn spin_main(_: u64) {
    loop {
        core::hint::spin_loop();
    }
}
