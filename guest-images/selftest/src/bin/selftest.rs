//! The selftest guest: runs at EL1 under stage-2 translation and checks, from the inside,
//! what the hypervisor promises a guest: its trapped UART, SMCCC and PSCI, and the
//! architected fault for every bad access. One line per check, then PSCI SYSTEM_OFF when
//! every check passed, or HYP_VM_EXIT(1).
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use selftest_guest::*;

/// An IPA where the VM has neither RAM nor a device.
const UNMAPPED_IPA: usize = 0x1000_0000;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    println!("selftest: running at EL{} under the hypervisor", current_el());

    // SAFETY (all volatile accesses below): MMIO to the VM's emulated PL011, or loads and
    // stores the hypervisor is expected to refuse with an external abort.
    let id0 = unsafe { read_volatile((UART + 0xfe0) as *const u32) };
    let fr = unsafe { read_volatile((UART + 0x18) as *const u32) };
    c.check(id0 == 0x11 && fr & 0x80 != 0, format_args!("uart: trapped PL011 answers (UARTPeriphID0 {id0:#x}, UARTFR {fr:#x})"));

    let v = hvc(PSCI_VERSION, 0);
    c.check(v == 0x1_0001, format_args!("psci: PSCI_VERSION over HVC returns 1.1 (got {v:#x})"));

    let v = hvc(SMCCC_VERSION, 0);
    c.check(v == 0x1_0001, format_args!("smccc: SMCCC_VERSION returns 1.1 (got {v:#x})"));

    let v = hvc(0xc200_0042, 0) as i64;
    c.check(v == -1, format_args!("smccc: an unknown function returns NOT_SUPPORTED (got {v})"));

    let v = hvc_with_immediate_1(PSCI_VERSION) as i64;
    c.check(v == -1, format_args!("smccc: HVC with a non-zero immediate returns NOT_SUPPORTED (got {v})"));

    let caught = expect_exception(|| unsafe { let _ = read_volatile(UNMAPPED_IPA as *const u32); });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UNMAPPED_IPA),
        format_args!("memory: a load from unmapped IPA {UNMAPPED_IPA:#x} gives a synchronous external abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let caught = expect_exception(|| unsafe { write_volatile((UNMAPPED_IPA + 8) as *mut u64, 0x5a5a) });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UNMAPPED_IPA + 8),
        format_args!("memory: a store to an unmapped IPA gives a synchronous external abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let caught = expect_exception(|| unsafe {
        asm!("blr {}", in(reg) UNMAPPED_IPA, out("x30") _, clobber_abi("C"));
    });
    c.check(
        is_external_abort(caught, EC_INSTRUCTION_ABORT_SAME_EL, UNMAPPED_IPA),
        format_args!("memory: a jump to an unmapped IPA gives an instruction abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let caught = expect_exception(|| unsafe { let _ = read_volatile((UART + 0x800) as *const u32); });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UART + 0x800),
        format_args!("mmio: a read of a missing UART register gives an external abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let caught = expect_exception(|| unsafe { let _ = read_volatile(UART as *const u64); });
    c.check(
        is_external_abort(caught, EC_DATA_ABORT_SAME_EL, UART),
        format_args!("mmio: a 64-bit UART access gives an external abort (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let caught = expect_exception(|| unsafe { asm!("mrs {}, pmccntr_el0", out(reg) _) });
    c.check(
        matches!(caught, Some((esr, _)) if esr >> 26 == 0),
        format_args!("sysreg: a PMU register the hypervisor does not offer is an undefined instruction (ESR_EL1 {:#x})", caught.map_or(0, |c| c.0)),
    );

    let ram_ok = {
        let p = 0x4100_0000 as *mut u64;
        unsafe { write_volatile(p, 0x1234_5678_9abc_def0) };
        unsafe { read_volatile(p) == 0x1234_5678_9abc_def0 }
    };
    c.check(ram_ok, format_args!("memory: RAM at IPA 0x41000000 reads back what was written"));

    finish("selftest", &c)
}
