//! The selftest guest: runs at EL1 under stage-2 translation and checks, from the inside,
//! what the hypervisor promises a guest. One line per check, `ok N - ...` or
//! `not ok N - ...`, then PSCI SYSTEM_OFF when every check passed, or HYP_VM_EXIT(1).
//!
//! It runs with its MMU off, so every access is to an IPA.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::fmt::{self, Write};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const UART: usize = 0x0900_0000;
const PSCI_VERSION: u64 = 0x8400_0000;
const PSCI_SYSTEM_OFF: u64 = 0x8400_0008;
const SMCCC_VERSION: u64 = 0x8000_0000;
const HYP_VM_EXIT: u64 = 0xc600_0001;
/// An IPA where the VM has neither RAM nor a device.
const UNMAPPED_IPA: usize = 0x1000_0000;

global_asm!(
    r#"
    .section .text.head, "ax"
    .global _start
_start:
    b       1f
    .long   0
    .quad   0                   // text_offset
    .quad   0                   // image_size (written by xtask)
    .quad   0xa                 // flags
    .quad   0, 0, 0
    .ascii  "ARM\x64"
    .long   0
1:  ldr     x1, =__stack_top
    mov     sp, x1
    mov     x1, #(3 << 20)      // CPACR_EL1.FPEN: Rust uses FP/SIMD registers
    msr     cpacr_el1, x1
    ldr     x1, =guest_vectors
    msr     vbar_el1, x1
    isb
    ldr     x1, =__bss_start
    ldr     x2, =__bss_end
2:  cmp     x1, x2
    b.hs    3f
    str     xzr, [x1], #8
    b       2b
3:  bl      guest_main
4:  b       4b

.macro VECTOR kind
    .balign 0x80
    sub     sp, sp, #(32 * 8)
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       vector_common
.endm

    .section .text, "ax"
    .balign 2048
guest_vectors:
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    VECTOR 4
    VECTOR 4
    VECTOR 4
    VECTOR 4
    VECTOR 4
    VECTOR 4
    VECTOR 4
    VECTOR 4

vector_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    str     x30, [sp, #160]
    mov     x1, sp
    bl      guest_exception
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x29, [sp, #144]
    ldr     x30, [sp, #160]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #(32 * 8)
    eret
"#
);

struct Uart;

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            // SAFETY: the VM's PL011 data register; the hypervisor emulates it.
            unsafe { write_volatile(UART as *mut u32, u32::from(b)) };
        }
        Ok(())
    }
}

macro_rules! println {
    ($($arg:tt)*) => { let _ = writeln!(Uart, $($arg)*); };
}

fn hvc(x0: u64, x1: u64) -> u64 {
    let mut r = x0;
    // SAFETY: an SMCCC call to the hypervisor; it may clobber x0-x17.
    unsafe {
        asm!("hvc #0", inout("x0") r, inout("x1") x1 => _, out("x2") _, out("x3") _, out("x4") _,
            out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack));
    }
    r
}

fn hvc_with_immediate_1(x0: u64) -> u64 {
    let mut r = x0;
    // SAFETY: as for `hvc`.
    unsafe {
        asm!("hvc #1", inout("x0") r, out("x1") _, out("x2") _, out("x3") _, out("x4") _,
            out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack));
    }
    r
}

/// Set while a check expects a synchronous exception; the handler records it and resumes.
static EXPECTING: AtomicBool = AtomicBool::new(false);
static CAUGHT_ESR: AtomicU64 = AtomicU64::new(0);
static CAUGHT_FAR: AtomicU64 = AtomicU64::new(0);

#[no_mangle]
extern "C" fn guest_exception(kind: u64, frame: &mut [u64; 32]) {
    let (esr, far, elr): (u64, u64, u64);
    // SAFETY: reads of EL1 exception syndrome registers.
    unsafe {
        asm!("mrs {}, esr_el1", out(reg) esr);
        asm!("mrs {}, far_el1", out(reg) far);
        asm!("mrs {}, elr_el1", out(reg) elr);
    }
    if kind == 0 && EXPECTING.swap(false, Ordering::SeqCst) {
        CAUGHT_ESR.store(esr, Ordering::SeqCst);
        CAUGHT_FAR.store(far, Ordering::SeqCst);
        let class = esr >> 26;
        // A data abort or undefined instruction: skip the instruction. An instruction abort
        // came from a branch-and-link: return to the link register.
        let resume = if class == 0x21 { frame[20] } else { elr + 4 };
        // SAFETY: sets the return address of this exception.
        unsafe { asm!("msr elr_el1, {}", in(reg) resume) };
        return;
    }
    println!("not ok - unexpected exception kind {kind}: ESR_EL1 {esr:#x} FAR_EL1 {far:#x} ELR_EL1 {elr:#x}");
    hvc(HYP_VM_EXIT, 2);
}

/// Runs `f` expecting one synchronous exception; returns (ESR_EL1, FAR_EL1) if it came.
fn expect_exception(f: impl FnOnce()) -> Option<(u64, u64)> {
    CAUGHT_ESR.store(0, Ordering::SeqCst);
    EXPECTING.store(true, Ordering::SeqCst);
    f();
    if EXPECTING.swap(false, Ordering::SeqCst) {
        return None;
    }
    Some((CAUGHT_ESR.load(Ordering::SeqCst), CAUGHT_FAR.load(Ordering::SeqCst)))
}

struct Checks {
    number: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, passed: bool, what: fmt::Arguments<'_>) {
        self.number += 1;
        if passed {
            println!("ok {} - {}", self.number, what);
        } else {
            self.failed += 1;
            println!("not ok {} - {}", self.number, what);
        }
    }
}

const EC_DATA_ABORT_SAME_EL: u64 = 0x25;
const EC_INSTRUCTION_ABORT_SAME_EL: u64 = 0x21;
const FSC_SYNC_EXTERNAL_ABORT: u64 = 0x10;

fn is_external_abort(caught: Option<(u64, u64)>, class: u64, far: usize) -> bool {
    matches!(caught, Some((esr, f)) if esr >> 26 == class && esr & 0x3f == FSC_SYNC_EXTERNAL_ABORT && f == far as u64)
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks { number: 0, failed: 0 };
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

    if c.failed == 0 {
        println!("selftest: all {} checks passed; powering off with PSCI SYSTEM_OFF", c.number);
        hvc(PSCI_SYSTEM_OFF, 0);
        println!("not ok - SYSTEM_OFF returned");
    } else {
        println!("selftest: {} of {} checks failed", c.failed, c.number);
    }
    hvc(HYP_VM_EXIT, 1);
    loop {
        core::hint::spin_loop();
    }
}

fn current_el() -> u64 {
    let el: u64;
    // SAFETY: CurrentEL is readable at EL1.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) el) };
    (el >> 2) & 3
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("not ok - selftest panicked: {info}");
    hvc(HYP_VM_EXIT, 3);
    loop {
        core::hint::spin_loop();
    }
}
