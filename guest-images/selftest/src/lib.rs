//! The runtime of the AArch64 bare-metal test guests: the arm64 Image header and entry, an
//! EL1 vector table that can expect a fault and resume, SMCCC calls, and what names AArch64
//! of the GIC and the counter. The console, check reporting, the function identifiers and
//! the GIC's memory-mapped side are `guest_common`'s, shared with the AArch32 guests
//! (`guest-images/selftest32`). Each guest is a binary in `src/bin/` with a `guest_main`.
//!
//! The guests run at EL1 with their MMU off, so every access is to an IPA.
#![no_std]

pub mod debug;
pub mod entry_state;
pub mod gic;
pub mod virtio;

use core::arch::{asm, global_asm};

use core::ptr::write_volatile;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use guest_common::smccc;
pub use guest_common::{println, Checks, Uart, UART};

/// The function identifiers as the 64-bit registers hold them.
pub const PSCI_VERSION: u64 = smccc::PSCI_VERSION as u64;
pub const PSCI_SYSTEM_OFF: u64 = smccc::PSCI_SYSTEM_OFF as u64;
pub const SMCCC_VERSION: u64 = smccc::SMCCC_VERSION as u64;
pub const HYP_VM_EXIT: u64 = smccc::HYP_VM_EXIT as u64;

global_asm!(
    r#"
// Stores x0-x30 (x17, the base register, as zero), SP, the EL1/EL0 system registers of
// `entry_state::SYSTEM_REGISTERS` and the FP/SIMD registers into the `EntryState` at
// \buf, before anything else runs; leaves CPACR_EL1.FPEN on and x0 as it came.
.macro SNAPSHOT buf
    adrp    x17, \buf
    add     x17, x17, :lo12:\buf
    stp     x0, x1, [x17, #0]
    stp     x2, x3, [x17, #16]
    stp     x4, x5, [x17, #32]
    stp     x6, x7, [x17, #48]
    stp     x8, x9, [x17, #64]
    stp     x10, x11, [x17, #80]
    stp     x12, x13, [x17, #96]
    stp     x14, x15, [x17, #112]
    stp     x16, xzr, [x17, #128]
    stp     x18, x19, [x17, #144]
    stp     x20, x21, [x17, #160]
    stp     x22, x23, [x17, #176]
    stp     x24, x25, [x17, #192]
    stp     x26, x27, [x17, #208]
    stp     x28, x29, [x17, #224]
    str     x30, [x17, #240]
    mov     x0, sp
    str     x0, [x17, #248]
    mrs     x0, sctlr_el1
    mrs     x1, cpacr_el1
    stp     x0, x1, [x17, #256]
    mrs     x0, ttbr0_el1
    mrs     x1, ttbr1_el1
    stp     x0, x1, [x17, #272]
    mrs     x0, tcr_el1
    mrs     x1, esr_el1
    stp     x0, x1, [x17, #288]
    mrs     x0, afsr0_el1
    mrs     x1, afsr1_el1
    stp     x0, x1, [x17, #304]
    mrs     x0, far_el1
    mrs     x1, mair_el1
    stp     x0, x1, [x17, #320]
    mrs     x0, vbar_el1
    mrs     x1, contextidr_el1
    stp     x0, x1, [x17, #336]
    mrs     x0, amair_el1
    mrs     x1, cntkctl_el1
    stp     x0, x1, [x17, #352]
    mrs     x0, par_el1
    mrs     x1, tpidr_el1
    stp     x0, x1, [x17, #368]
    mrs     x0, sp_el0
    mrs     x1, elr_el1
    stp     x0, x1, [x17, #384]
    mrs     x0, spsr_el1
    mrs     x1, tpidr_el0
    stp     x0, x1, [x17, #400]
    mrs     x0, tpidrro_el0
    mrs     x1, csselr_el1
    stp     x0, x1, [x17, #416]
    mrs     x0, cntv_ctl_el0
    mrs     x1, cntv_cval_el0
    stp     x0, x1, [x17, #432]
    mrs     x0, mdscr_el1
    mrs     x1, daif
    stp     x0, x1, [x17, #448]
    mrs     x0, nzcv
    mrs     x1, actlr_el1
    stp     x0, x1, [x17, #464]
    mov     x1, #(3 << 20)      // CPACR_EL1.FPEN, to read the FP/SIMD registers
    msr     cpacr_el1, x1
    isb
    add     x16, x17, #480
    stp     q0, q1, [x16, #0]
    stp     q2, q3, [x16, #32]
    stp     q4, q5, [x16, #64]
    stp     q6, q7, [x16, #96]
    stp     q8, q9, [x16, #128]
    stp     q10, q11, [x16, #160]
    stp     q12, q13, [x16, #192]
    stp     q14, q15, [x16, #224]
    stp     q16, q17, [x16, #256]
    stp     q18, q19, [x16, #288]
    stp     q20, q21, [x16, #320]
    stp     q22, q23, [x16, #352]
    stp     q24, q25, [x16, #384]
    stp     q26, q27, [x16, #416]
    stp     q28, q29, [x16, #448]
    stp     q30, q31, [x16, #480]
    mrs     x0, fpcr
    mrs     x1, fpsr
    add     x16, x16, #512
    stp     x0, x1, [x16]
    ldr     x0, [x17, #0]
.endm

    .section .text.head, "ax"
    .global _start
_start:
    b       1f
    .long   0
    .quad   0x200000            // text_offset: loaded at RAM base + 2 MiB
    .quad   0                   // image_size (written by xtask)
    .quad   0xa                 // flags
    .quad   0, 0, 0
    .ascii  "ARM\x64"
    .long   0
1:  SNAPSHOT BOOT_ENTRY_STATE   // every register as the hypervisor started this vCPU
    mov     x19, x0             // the device tree, per the arm64 boot protocol
    ldr     x1, =__stack_top
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
3:  ldr     x1, =BOOT_X0
    str     x19, [x1]
    bl      guest_main
4:  b       4b

    // A vCPU started with PSCI CPU_ON: x0 = its context id.
    .section .text, "ax"
    .global secondary_entry
secondary_entry:
    SNAPSHOT SECONDARY_ENTRY_STATE
    ldr     x1, =__secondary_stack_top
    mov     sp, x1
    mov     x1, #(3 << 20)
    msr     cpacr_el1, x1
    ldr     x1, =guest_vectors
    msr     vbar_el1, x1
    isb
    bl      secondary_rust
5:  b       5b

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

/// x0 at the guest's first instruction.
#[no_mangle]
pub static mut BOOT_X0: u64 = 0;

pub fn boot_x0() -> u64 {
    // SAFETY: written once by the entry code before any Rust runs.
    unsafe { core::ptr::read_volatile(&raw const BOOT_X0) }
}

pub fn hvc(x0: u64, x1: u64) -> u64 {
    hvc3(x0, x1, 0, 0)
}

/// An SMCCC call with three arguments.
pub fn hvc3(x0: u64, x1: u64, x2: u64, x3: u64) -> u64 {
    let mut r = x0;
    // SAFETY: as for `hvc`.
    unsafe {
        asm!("hvc #0", inout("x0") r, inout("x1") x1 => _, inout("x2") x2 => _, inout("x3") x3 => _, out("x4") _,
            out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack));
    }
    r
}

extern "C" {
    /// Where a vCPU started by CPU_ON begins (sets its stack and vectors).
    pub fn secondary_entry();
}

/// What a vCPU started with CPU_ON runs, with its context id (set before CPU_ON).
pub static SECONDARY_MAIN: AtomicU64 = AtomicU64::new(0);

#[no_mangle]
extern "C" fn secondary_rust(context: u64) {
    let f = SECONDARY_MAIN.load(Ordering::SeqCst);
    if f != 0 {
        // SAFETY: the value was stored from an `extern "C" fn(u64)` by `start_vcpu`.
        let f: extern "C" fn(u64) = unsafe { core::mem::transmute(f as usize) };
        f(context);
    }
}

/// PSCI CPU_ON of `mpidr` running `main(context)`: the PSCI status.
pub fn start_vcpu(mpidr: u64, main: extern "C" fn(u64), context: u64) -> i64 {
    SECONDARY_MAIN.store(main as *const () as u64, Ordering::SeqCst);
    hvc3(PSCI_CPU_ON_64, mpidr, secondary_entry as *const () as u64, context) as i64
}

pub const PSCI_CPU_ON_64: u64 = smccc::PSCI_CPU_ON_64 as u64;
pub const PSCI_CPU_OFF: u64 = smccc::PSCI_CPU_OFF as u64;
pub const PSCI_AFFINITY_INFO_64: u64 = smccc::PSCI_AFFINITY_INFO_64 as u64;

pub fn hvc_with_immediate_1(x0: u64) -> u64 {
    let mut r = x0;
    // SAFETY: as for `hvc`.
    unsafe {
        asm!("hvc #1", inout("x0") r, out("x1") _, out("x2") _, out("x3") _, out("x4") _,
            out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack));
    }
    r
}

/// What an IRQ at EL1 runs (0: none, the IRQ is unexpected).
static IRQ_HANDLER: AtomicU64 = AtomicU64::new(0);

pub fn set_irq_handler(f: extern "C" fn()) {
    IRQ_HANDLER.store(f as *const () as u64, Ordering::SeqCst);
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
    let handler = IRQ_HANDLER.load(Ordering::SeqCst);
    if kind == 1 && handler != 0 {
        // SAFETY: stored from an `extern "C" fn()` by `set_irq_handler`.
        let f: extern "C" fn() = unsafe { core::mem::transmute(handler as usize) };
        f();
        return;
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
    crate::println!("not ok - unexpected exception kind {kind}: ESR_EL1 {esr:#x} FAR_EL1 {far:#x} ELR_EL1 {elr:#x}");
    hvc(HYP_VM_EXIT, 2);
}

/// Runs `f` expecting one synchronous exception; returns (ESR_EL1, FAR_EL1) if it came.
pub fn expect_exception(f: impl FnOnce()) -> Option<(u64, u64)> {
    CAUGHT_ESR.store(0, Ordering::SeqCst);
    EXPECTING.store(true, Ordering::SeqCst);
    f();
    if EXPECTING.swap(false, Ordering::SeqCst) {
        return None;
    }
    Some((CAUGHT_ESR.load(Ordering::SeqCst), CAUGHT_FAR.load(Ordering::SeqCst)))
}

pub const EC_DATA_ABORT_SAME_EL: u64 = 0x25;
pub const EC_INSTRUCTION_ABORT_SAME_EL: u64 = 0x21;
pub const FSC_SYNC_EXTERNAL_ABORT: u64 = 0x10;

/// A synchronous external abort of `class` at `far`, as the hypervisor injects them.
pub fn is_external_abort(caught: Option<(u64, u64)>, class: u64, far: usize) -> bool {
    matches!(caught, Some((esr, f)) if esr >> 26 == class && esr & 0x3f == FSC_SYNC_EXTERNAL_ABORT && f == far as u64)
}

pub fn current_el() -> u64 {
    let el: u64;
    // SAFETY: CurrentEL is readable at EL1.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) el) };
    (el >> 2) & 3
}

pub const PSCI_SYSTEM_RESET: u64 = smccc::PSCI_SYSTEM_RESET as u64;

/// The virtual counter in milliseconds (it starts near 0 when the VM is created).
pub fn counter_ms() -> u64 {
    let (now, freq): (u64, u64);
    // SAFETY: the virtual counter registers are readable at EL1.
    unsafe {
        asm!("isb", "mrs {}, cntvct_el0", out(reg) now);
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
    }
    now / (freq / 1000).max(1)
}

/// A few instructions of code placed at `at` in RAM (the MMU is off, so instruction fetches
/// read it), made visible to instruction fetch.
pub fn place_code(at: usize, code: &[u32]) {
    for (i, &insn) in code.iter().enumerate() {
        // SAFETY: RAM of this VM that the caller reserves for the code.
        unsafe { write_volatile((at + 4 * i) as *mut u32, insn) };
    }
    // SAFETY: cache maintenance of this VM's own memory.
    unsafe { asm!("dsb sy", "ic iallu", "dsb sy", "isb") };
}

/// Calls the code at `at` (placed with `place_code`).
pub fn call_code(at: usize) {
    // SAFETY: the caller placed a function there that preserves the callee-saved registers.
    unsafe { asm!("blr {}", in(reg) at, clobber_abi("C")) };
}

/// `ret`.
pub const RET: u32 = 0xd65f_03c0;

/// The virtual counter and its frequency, for waiting a while.
pub fn wait_ms(ms: u64) {
    let (start, freq): (u64, u64);
    // SAFETY: the virtual counter registers are readable at EL1.
    unsafe {
        asm!("mrs {}, cntvct_el0", out(reg) start);
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
    }
    let ticks = freq / 1000 * ms;
    loop {
        let now: u64;
        // SAFETY: as above.
        unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) now) };
        if now.wrapping_sub(start) >= ticks {
            break;
        }
    }
}

/// Ends the run: PSCI SYSTEM_OFF when every check passed, HYP_VM_EXIT(1) otherwise.
pub fn finish(name: &str, checks: &Checks) -> ! {
    if checks.summary(name) {
        hvc(PSCI_SYSTEM_OFF, 0);
        println!("not ok - SYSTEM_OFF returned");
    }
    hvc(HYP_VM_EXIT, 1);
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("not ok - the guest panicked: {info}");
    hvc(HYP_VM_EXIT, 3);
    loop {
        core::hint::spin_loop();
    }
}
