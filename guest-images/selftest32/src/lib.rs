//! The runtime of the AArch32 bare-metal test guests (`armv7a-none-eabi`, A32, SVC mode, MMU
//! off): the zImage header and an entry that runs the image at its link address wherever it
//! was loaded, per-mode stacks, a vector table at VBAR that can expect an Undefined
//! instruction or a Data Abort and resume, SMCCC calls by HVC, the CP15 registers the
//! guests read, the GICv3 CPU interface through CP15, the virtual counter, and the start of
//! vCPU 1 by PSCI CPU_ON. The console, check reporting, the function identifiers and the
//! GIC's memory-mapped side are `guest_common`'s, shared with the AArch64 guests. Each guest
//! is a binary in `src/bin/` with a `guest_main`.
#![no_std]

pub mod cp15;
pub mod entry_state;
pub mod gic;

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

pub use guest_common::smccc::{self, *};
pub use guest_common::{print, println, Checks, UART};

/// CPSR.M of the modes (ARM ARM B1.3.1), and the mask bits A [8], I [7], F [6], T [5].
pub mod mode {
    pub const SVC: u32 = 0x13;
    pub const ABT: u32 = 0x17;
    pub const UND: u32 = 0x1b;
    pub const IRQ: u32 = 0x12;
    pub const MASK: u32 = 0x1f;
    pub const A: u32 = 1 << 8;
    pub const I: u32 = 1 << 7;
    pub const F: u32 = 1 << 6;
    pub const T: u32 = 1 << 5;
}

/// The CPSR bits an exception's SPSR must hold as they were: E [9], A, I, F, T and M.
pub const CPSR_STATE: u32 = 0x3ff;

/// Bytes of stack per CPU, a quarter per mode (SVC, Abort, Undefined, IRQ): link.ld's
/// `__stacks` holds four CPUs' worth.
const CPU_STACKS: u32 = 0x8000;

global_asm!(
    r#"
    .arm

    .section .text.head, "ax"
    .global _start
_start:
    .rept   8
    mov     r0, r0                  // the zImage's NOPs
    .endr
    b       guest_entry             // 0x20
    .word   0x016f2818              // 0x24: zImage magic
    .word   0                       // 0x28: start address (0: the image's length is its end)
    .word   0                       // 0x2c: end address: written by xtask (elf::to_zimage)
    .word   0x04030201              // 0x30: little-endian

    // A guest may define its own `guest_entry`, which runs first with every register as
    // the loader left it and must end with `b entry_continue`, r0-r2 as they were (the
    // register-leak reader records them all); without one, link.ld makes it this entry.
    .global entry_continue
entry_continue:
    // The state the loader left, kept in r4-r8 until the BSS is cleared: r0, r1, r2,
    // CPSR, SCTLR.
    mov     r4, r0
    mov     r5, r1
    mov     r6, r2
    mrs     r7, cpsr
    mrc     p15, 0, r8, c1, c0, 0

    // Run at the link address: copy the image there (from its end down when it moves up,
    // from its start up when it moves down), make the copy visible to instruction fetch,
    // and jump to it. The MMU and data cache are off.
    adr     r0, _start              // where the loader put it
    ldr     r1, =_start             // where it is linked
    ldr     r2, =__image_end
    sub     r2, r2, r1              // its length, a multiple of 8
    cmp     r1, r0
    beq     .Lat_link_address
    bhi     2f
3:  ldr     r3, [r0], #4
    str     r3, [r1], #4
    subs    r2, r2, #4
    bne     3b
    b       5f
2:  add     r0, r0, r2
    add     r1, r1, r2
6:  ldr     r3, [r0, #-4]!
    str     r3, [r1, #-4]!
    subs    r2, r2, #4
    bne     6b
5:  mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 0   // ICIALLU
    dsb
    isb
    ldr     pc, =.Lat_link_address

.Lat_link_address:
    ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    mov     r2, #0
7:  cmp     r0, r1
    strlo   r2, [r0], #4
    blo     7b
    ldr     r0, =BOOT_STATE
    stm     r0, {{r4-r8}}
    mov     r0, #0
    bl      set_up_cpu
    bl      guest_main
8:  wfi
    b       8b

    .section .text, "ax"
    // The stacks of CPU r0 (its Aff0) for SVC, Abort, Undefined and IRQ mode, and VBAR.
    // Called and returning in SVC mode (whose LR it keeps); clobbers r0 and r1.
set_up_cpu:
    and     r0, r0, #3
    ldr     r1, =__stacks
    add     r1, r1, r0, lsl #15     // CPU_STACKS
    cps     #{irq}
    add     sp, r1, #0x2000
    cps     #{und}
    add     sp, r1, #0x4000
    cps     #{abt}
    add     sp, r1, #0x6000
    cps     #{svc}
    add     sp, r1, #0x8000
    ldr     r1, =guest_vectors
    mcr     p15, 0, r1, c12, c0, 0  // VBAR
    isb
    bx      lr

    // A vCPU started with PSCI CPU_ON: r0 = its context ID.
    .global secondary_entry
secondary_entry:
    mov     r4, r0
    mrs     r5, cpsr
    mrc     p15, 0, r0, c0, c0, 5   // MPIDR: Aff0 is the vCPU
    bl      set_up_cpu
    mov     r0, r4
    mov     r1, r5
    bl      secondary_rust
9:  wfi
    b       9b

    // The vectors (ARM ARM B1.8.1): each saves the caller-saved registers and its mode's
    // LR on its mode's stack and hands guest_exception the vector's number and that frame;
    // guest_exception leaves in the frame's LR where to return.
    .balign 32
guest_vectors:
    b       vector_0
    b       vector_1
    b       vector_2
    b       vector_3
    b       vector_4
    b       vector_5
    b       vector_6
    b       vector_7

.macro VECTOR n
vector_\n:
    push    {{r0-r3, r12, lr}}
    mov     r0, #\n
    b       vector_common
.endm
    VECTOR  0
    VECTOR  1
    VECTOR  2
    VECTOR  3
    VECTOR  4
    VECTOR  5
    VECTOR  6
    VECTOR  7

vector_common:
    mov     r1, sp
    bl      guest_exception
    pop     {{r0-r3, r12, lr}}
    movs    pc, lr                  // return, CPSR = SPSR
"#,
    irq = const mode::IRQ,
    und = const mode::UND,
    abt = const mode::ABT,
    svc = const mode::SVC,
);

const _: () = assert!(CPU_STACKS == 1 << 15, "set_up_cpu shifts by 15");

/// r0, r1, r2, CPSR and SCTLR at the guest's first instruction, as the loader left them.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BootState {
    pub r0: u32,
    pub r1: u32,
    pub r2: u32,
    pub cpsr: u32,
    pub sctlr: u32,
}

/// Written once by the entry code, before any Rust runs.
#[no_mangle]
static mut BOOT_STATE: BootState = BootState { r0: 0, r1: 0, r2: 0, cpsr: 0, sctlr: 0 };

pub fn boot_state() -> BootState {
    // SAFETY: written once by the entry code before any Rust runs, never again.
    unsafe { core::ptr::read_volatile(&raw const BOOT_STATE) }
}

/// An SMCCC call by `HVC #0` (SMC32/HVC32: arguments and result in r0-r3); r0 after it.
#[inline(always)]
pub fn hvc(function: u32, a1: u32, a2: u32, a3: u32) -> u32 {
    let mut r0 = function;
    // SAFETY: a hypercall: the hypervisor (or QEMU's PSCI natively) answers in r0-r3, which
    // are declared clobbered; r12 too, which SMCCC 1.0 allows a callee to corrupt.
    unsafe {
        asm!(
            ".arch_extension virt",
            "hvc #0",
            inout("r0") r0,
            inout("r1") a1 => _,
            inout("r2") a2 => _,
            inout("r3") a3 => _,
            out("r12") _,
            options(nostack)
        );
    }
    r0
}

/// The vector numbers (offsets / 4).
pub mod vector {
    pub const UNDEFINED: u32 = 1;
    pub const PREFETCH_ABORT: u32 = 3;
    pub const DATA_ABORT: u32 = 4;
    pub const IRQ: u32 = 6;
}

/// What `vector_common` saved: r0-r3, r12 and the mode's LR, which `guest_exception` sets
/// to where the exception returns.
#[repr(C)]
pub struct Frame {
    pub r: [u32; 4],
    pub r12: u32,
    pub lr: u32,
}

/// An exception taken while a check expected one: at which vector, in which mode, that
/// mode's LR and SPSR, and for an abort its fault status and address (DFSR, DFAR or IFSR,
/// IFAR).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caught {
    pub vector: u32,
    pub mode: u32,
    pub lr: u32,
    pub spsr: u32,
    pub fsr: u32,
    pub far: u32,
}

/// Set while a check expects an exception; the handler records it and resumes after the
/// instruction.
static EXPECTING: AtomicBool = AtomicBool::new(false);
/// The CPSR `expect_exception` runs with: the state the exception is taken from, and
/// returns to.
static EXPECTED_FROM: AtomicU32 = AtomicU32::new(0);
/// The last `Caught`, field by field.
static CAUGHT: [AtomicU32; 6] = [const { AtomicU32::new(0) }; 6];
/// What an IRQ runs (0: none, the IRQ is unexpected).
static IRQ_HANDLER: AtomicUsize = AtomicUsize::new(0);

pub fn set_irq_handler(f: extern "C" fn()) {
    IRQ_HANDLER.store(f as usize, Ordering::SeqCst);
}

#[no_mangle]
extern "C" fn guest_exception(vector: u32, frame: &mut Frame) {
    let (cpsr, spsr): (u32, u32);
    // SAFETY: reads of this mode's status registers.
    unsafe { asm!("mrs {}, cpsr", "mrs {}, spsr", out(reg) cpsr, out(reg) spsr, options(nomem, nostack)) };
    let handler = IRQ_HANDLER.load(Ordering::SeqCst);
    if vector == vector::IRQ && handler != 0 {
        // SAFETY: stored from an `extern "C" fn()` by `set_irq_handler`.
        let f: extern "C" fn() = unsafe { core::mem::transmute(handler) };
        f();
        frame.lr -= 4; // LR_irq is the interrupted instruction + 4
        return;
    }
    let (fsr, far) = match vector {
        vector::DATA_ABORT => (cp15::dfsr(), cp15::dfar()),
        vector::PREFETCH_ABORT => (cp15::ifsr(), cp15::ifar()),
        _ => (0, 0),
    };
    if matches!(vector, vector::UNDEFINED | vector::DATA_ABORT) && EXPECTING.swap(false, Ordering::SeqCst) {
        for (slot, value) in CAUGHT.iter().zip([vector, cpsr & mode::MASK, frame.lr, spsr, fsr, far]) {
            slot.store(value, Ordering::SeqCst);
        }
        // The check reports a wrong SPSR; returning through it would take this guest
        // somewhere else (an illegal return), and the checks after it with it.
        let from = EXPECTED_FROM.load(Ordering::SeqCst);
        if spsr & CPSR_STATE != from & CPSR_STATE {
            println!(
                "# SPSR {spsr:#x} in mode {:#x} is not the CPSR the exception was taken from ({from:#x}): returning to \
                 that CPSR",
                cpsr & mode::MASK
            );
            // SAFETY: this mode's SPSR, which the exception return below restores: the state
            // `expect_exception` runs in.
            unsafe { asm!("msr spsr_fsxc, {}", in(reg) from, options(nomem, nostack)) };
        }
        // Resume after the instruction: LR_und is it + 4, LR_abt (a data abort) it + 8.
        if vector == vector::DATA_ABORT {
            frame.lr -= 4;
        }
        return;
    }
    println!(
        "not ok - unexpected exception at vector {:#x} in mode {:#x}: LR {:#x} SPSR {spsr:#x} FSR {fsr:#x} FAR {far:#x}",
        vector * 4,
        cpsr & mode::MASK,
        frame.lr
    );
    let [vector, mode, lr, spsr, fsr, far] = [0, 1, 2, 3, 4, 5].map(|i| CAUGHT[i].load(Ordering::SeqCst));
    if vector != 0 {
        println!(
            "# the exception expected before it: vector {:#x}, mode {mode:#x}, LR {lr:#x}, SPSR {spsr:#x}, FSR {fsr:#x}, \
             FAR {far:#x}",
            vector * 4
        );
    }
    hvc(HYP_VM_EXIT, 2, 0, 0);
    halt()
}

/// Runs `f` expecting one Undefined instruction or Data Abort exception (in A32); what was
/// caught, if it came. The exception returns to the instruction after the one that took it,
/// with the SPSR the exception left, or, if that is not the state `f` runs in (the check
/// that reads `Caught::spsr` fails), with the CPSR `f` was called with: `f` must not rely on
/// the flags across the instruction that takes the exception (an `asm!` block clobbers them).
pub fn expect_exception(f: impl FnOnce()) -> Option<Caught> {
    let cpsr: u32;
    // SAFETY: reads the status register.
    unsafe { asm!("mrs {}, cpsr", out(reg) cpsr, options(nomem, nostack, preserves_flags)) };
    EXPECTED_FROM.store(cpsr, Ordering::SeqCst);
    EXPECTING.store(true, Ordering::SeqCst);
    f();
    if EXPECTING.swap(false, Ordering::SeqCst) {
        return None;
    }
    let [vector, mode, lr, spsr, fsr, far] = [0, 1, 2, 3, 4, 5].map(|i| CAUGHT[i].load(Ordering::SeqCst));
    Some(Caught { vector, mode, lr, spsr, fsr, far })
}

/// The virtual count (CNTVCT), in program order.
#[inline(always)]
pub fn counter() -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: the virtual counter is readable at PL1; the ISBs keep the read in program order.
    unsafe { asm!("isb", "mrrc p15, 1, {}, {}, c14", "isb", out(reg) low, out(reg) high, options(nomem, nostack)) };
    (u64::from(high) << 32) | u64::from(low)
}

/// CNTFRQ.
pub fn frequency() -> u64 {
    u64::from(cp15::cntfrq())
}

/// The virtual counter in milliseconds (it starts near 0 when the VM is created).
pub fn counter_ms() -> u64 {
    counter() / (frequency() / 1000)
}

/// The virtual counter for `guest_common::bench`.
pub struct VirtualCounter;

impl guest_common::bench::Counter for VirtualCounter {
    fn now() -> u64 {
        counter()
    }
    fn frequency() -> u64 {
        frequency()
    }
}

/// Waits about `ms` milliseconds of virtual time.
pub fn wait_ms(ms: u64) {
    let start = counter();
    let ticks = frequency() / 1000 * ms;
    while counter().wrapping_sub(start) < ticks {}
}

/// Waits (at most about a second) for `cond`.
pub fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if cond() {
            return true;
        }
        wait_ms(1);
    }
    cond()
}

extern "C" {
    /// Where a vCPU started by CPU_ON begins (its stacks and VBAR, then `secondary_rust`).
    pub fn secondary_entry();
}

/// What a vCPU started with CPU_ON runs: `main(context, CPSR at its entry)`.
static SECONDARY_MAIN: AtomicUsize = AtomicUsize::new(0);

#[no_mangle]
extern "C" fn secondary_rust(context: u32, cpsr: u32) {
    let f = SECONDARY_MAIN.load(Ordering::SeqCst);
    if f != 0 {
        // SAFETY: stored from an `extern "C" fn(u32, u32)` by `start_vcpu`.
        let f: extern "C" fn(u32, u32) = unsafe { core::mem::transmute(f) };
        f(context, cpsr);
    }
}

/// PSCI CPU_ON (SMC32) of `mpidr` running `main(context, CPSR at entry)` from
/// `secondary_entry`: the PSCI status.
pub fn start_vcpu(mpidr: u32, main: extern "C" fn(u32, u32), context: u32) -> i32 {
    start_vcpu_at(mpidr, secondary_entry, main, context)
}

/// The same with the vCPU's first instruction at `entry`, which ends with a branch to
/// `secondary_entry`, r0 (the context ID) as it was.
pub fn start_vcpu_at(mpidr: u32, entry: unsafe extern "C" fn(), main: extern "C" fn(u32, u32), context: u32) -> i32 {
    SECONDARY_MAIN.store(main as usize, Ordering::SeqCst);
    hvc(PSCI_CPU_ON_32, mpidr, entry as *const () as usize as u32, context) as i32
}

/// Waits for interrupts, forever.
pub fn halt() -> ! {
    loop {
        // SAFETY: waits for an interrupt; nothing else.
        unsafe { asm!("wfi", options(nostack)) };
    }
}

/// Ends the run: PSCI SYSTEM_OFF when every check passed, HYP_VM_EXIT(1) otherwise.
pub fn finish(name: &str, checks: &Checks) -> ! {
    if checks.summary(name) {
        hvc(PSCI_SYSTEM_OFF, 0, 0, 0);
        println!("not ok - SYSTEM_OFF returned");
    }
    hvc(HYP_VM_EXIT, 1, 0, 0);
    halt()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("not ok - the guest panicked: {info}");
    hvc(HYP_VM_EXIT, 3, 0, 0);
    halt()
}
