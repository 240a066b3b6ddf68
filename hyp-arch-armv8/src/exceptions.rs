//! EL2 exception vectors (ARM ARM D1.10.2, "Exception vectors"), guest entry and exit, and
//! the report of an exception the hypervisor did not expect.
//!
//! A guest exit saves only the guest's general registers, PC and PSTATE into the running
//! vCPU's `GuestContext` (the first field of this CPU's `hyp_arch_arm::cpus::PerCpu`, at TPIDR_EL2) and returns from `enter_guest` into the
//! Rust run loop on the hypervisor stack: EL1 system registers stay live in the CPU while
//! the same vCPU keeps running (docs/architecture.md, "Performance principles").
//!
//! Before any of that, the vector of a synchronous exit from AArch64 answers the calls
//! `hyp_core::smccc::answered_in_vector` names (an HVC #0 asking SMCCC_VERSION, or
//! repeating the function the vCPU was last told is unknown) with x0 alone while the vCPU
//! holds no list register, counting the exit where the run loop would: nothing else of the
//! guest's or the CPU's state changes,
//! and anything the run loop must see (a kick, the end of a slice) is an interrupt, which
//! exits again right after the ERET (docs/hypercalls.md, "Answered in the vector").
//!
//! A word load of the distributor's control words (GICD_CTLR, GICD_TYPER, GICD_IIDR,
//! GICD_TYPER2) while the vCPU holds no list register is answered there too, from the VM's
//! copy of them (vgic::ControlWords; docs/vgic.md, "The control words answered in the
//! vector"), with x0 and x1 alone.
//!
//! Any other data abort (while the vCPU holds no list register, or at GICv2's GICD_SGIR whatever
//! it holds) or a trapped system register access is offered to the run loop's answer in
//! the vector (`vm::answer_in_vector`,
//! hyp_runtime::vcpu_run::in_vector), called on the run loop's stack with the guest's
//! registers saved as an exit saves them: the guest goes on from there when it says so,
//! without the return into the run loop and the entry from it.

use core::arch::global_asm;

use hyp_core::exit::GuestContext;
use hyp_core::hyp_fault::HypFault;
use hyp_core::syndrome::Syndrome;

use crate::{cpus, println_unlocked};

/// What brought the guest out, as `enter_guest` returns it.
pub const EXIT_SYNC: u64 = 0;
pub const EXIT_IRQ: u64 = 1;
pub const EXIT_FIQ: u64 = 2;
pub const EXIT_SERROR: u64 = 3;
/// A synchronous exit the vector answered (`answer_in_vector`), sent on to the run loop.
pub const EXIT_ANSWERED: u64 = 4;
/// `answer_in_vector`'s word for "the guest goes on from its saved registers".
pub const RESUME_GUEST: u64 = 5;

global_asm!(
    r#"
.macro HYP_TRAP kind
    .balign 0x80
    sub     sp, sp, #(32 * 8)
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       hyp_trap_common
.endm

// x2..x30 at [\base, #16] on, in pairs (`pair` is stp or ldp, `one` str or ldr): their
// place in a GuestContext (hyp_core::exit, x[n] at 8n) and in the EL2 trap frame.
.macro X2_TO_X30 pair, one, base
    \pair   x2, x3, [\base, #16]
    \pair   x4, x5, [\base, #32]
    \pair   x6, x7, [\base, #48]
    \pair   x8, x9, [\base, #64]
    \pair   x10, x11, [\base, #80]
    \pair   x12, x13, [\base, #96]
    \pair   x14, x15, [\base, #112]
    \pair   x16, x17, [\base, #128]
    \pair   x18, x19, [\base, #144]
    \pair   x20, x21, [\base, #160]
    \pair   x22, x23, [\base, #176]
    \pair   x24, x25, [\base, #192]
    \pair   x26, x27, [\base, #208]
    \pair   x28, x29, [\base, #224]
    \one    x30, [\base, #240]
.endm

// The guest's x2..x30, x0 and x1 (on the stack, popped), ELR_EL2 and SPSR_EL2 into its
// context at x1 (the GuestContext layout: x[n] at 8n, pc at 248, pstate at 256).
.macro SAVE_GUEST
    X2_TO_X30 stp, str, x1
    ldp     x2, x3, [sp], #16
    stp     x2, x3, [x1, #0]
    mrs     x2, elr_el2
    mrs     x3, spsr_el2
    stp     x2, x3, [x1, #248]
.endm

.macro GUEST_EXIT reason
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mov     x0, #\reason
    b       guest_exit
.endm

// A synchronous exit from AArch64: an HVC #0 (its whole ESR_EL2, ARM ARM D17.2.37) goes to
// the calls answered here, a data abort from a lower EL (EC 0x24) or a trapped system
// register access (EC 0x18) to the run loop's answer in the vector, anything else to the
// run loop.
.macro GUEST_SYNC_AARCH64
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mrs     x1, esr_el2
    mov     w0, #{ESR_HVC64_IMM0}
    cmp     x1, x0
    b.eq    hvc_in_vector
    lsr     x1, x1, #26
    cmp     x1, #{EC_DATA_ABORT_LOWER}
    b.eq    sync_in_vector
    cmp     x1, #{EC_SYSREG64}
    b.eq    sysreg_in_vector
    mov     x0, #{EXIT_SYNC}
    b       guest_exit
.endm

    .section .text.vectors, "ax"
    .balign 2048
    .global hyp_vectors
hyp_vectors:
    HYP_TRAP 0      // current EL with SP_EL0: synchronous
    HYP_TRAP 1      //   IRQ
    HYP_TRAP 2      //   FIQ
    HYP_TRAP 3      //   SError
    HYP_TRAP 0      // current EL with SP_ELx
    HYP_TRAP 1
    HYP_TRAP 2
    HYP_TRAP 3
    GUEST_SYNC_AARCH64  // lower EL, AArch64
    GUEST_EXIT 1
    GUEST_EXIT 2
    GUEST_EXIT 3
    GUEST_EXIT 0    // lower EL, AArch32 (a guest's 32-bit EL0)
    GUEST_EXIT 1
    GUEST_EXIT 2
    GUEST_EXIT 3

hyp_trap_common:
    X2_TO_X30 stp, str, sp
    mov     x1, sp
    bl      hyp_exception
1:  wfe
    b       1b

    // u64 enter_guest(GuestContext *ctx, const InVector *in_vector): runs the guest until
    // it exits to the run loop; returns EXIT_*.
    .section .text, "ax"
    .global enter_guest
enter_guest:
    sub     sp, sp, #96
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    mrs     x2, tpidr_el2       // this CPU's PerCpu: its first field is the guest's context
    str     x0, [x2]
    str     x1, [x2, #{IN_VECTOR}]
load_guest:
    // x0: the guest's context, which this CPU's PerCpu names.
    ldp     x2, x3, [x0, #248]
    msr     elr_el2, x2
    msr     spsr_el2, x3
    X2_TO_X30 ldp, ldr, x0
    ldp     x0, x1, [x0, #0]
    eret
    dsb     nsh             // no speculation past the ERET (SB where FEAT_SB exists)
    isb

hvc_in_vector:
    // The guest's x0 and x1 are on the stack: SMCCC_VERSION, or the function this vCPU
    // was last told is unknown, are answered in x0 while the vCPU holds no list register;
    // anything else is the run loop's.
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{LISTS_IN_USE}]
    cbnz    x0, 3f
    ldr     x0, [sp]
    mov     w1, #{SMCCC_VERSION}
    cmp     w0, w1
    b.ne    1f
    mov     w0, #{SMCCC_VERSION_1_1}
    b       2f
1:  mrs     x1, tpidr_el2
    ldr     x1, [x1, #{UNKNOWN}]
    cmp     x1, w0, uxtw
    b.ne    3f
    mov     x0, #{NOT_SUPPORTED}
2:  // x0 is the answer. The exit counted (the guest's x0 slot on the stack holds x2 for
    // it), x1 and x2 as the guest left them.
    str     x2, [sp]
    mrs     x1, tpidr_el2
    ldr     x1, [x1, #{HVC_EXITS}]
    ldr     x2, [x1]
    add     x2, x2, #1
    str     x2, [x1]
    ldp     x2, x1, [sp], #16
    eret
    dsb     nsh
    isb
3:  mov     x0, #{EXIT_SYNC}
    b       guest_exit

sync_in_vector:
    // The guest's x0 and x1 are on the stack. A word load (LDR Wt or LDAR Wt: ISV, a word,
    // not sign-extended, not a store; not on a stage-1 walk, a cache maintenance, an
    // external abort, an LS64 or VNCR access; FAR valid; a translation fault, so HPFAR is
    // valid) of GICD_CTLR, GICD_TYPER, GICD_IIDR or GICD_TYPER2, while the vCPU holds no
    // list register (as for the calls above), is answered here from the VM's copy of them
    // (vgic::ControlWords): the exit counted, the PC past the load, the word into Wt, as the
    // run loop's answer would. Anything else goes on at 5.
    mrs     x0, esr_el2
    tbnz    x0, #6, 5f
    ubfx    x1, x0, #21, #4
    cmp     x1, #0b1100
    b.ne    5f
    tst     x0, #0x3f80
    b.ne    5f
    and     x1, x0, #0x3c
    cmp     x1, #0x04
    b.ne    5f
    mrs     x1, hpfar_el2
    mov     x0, #{GICD_HPFAR}
    cmp     x1, x0
    b.ne    5f
    mrs     x1, far_el2
    tst     x1, #{CONTROL_WORDS_PAGE_BITS}
    b.ne    5f
    tst     x1, #3
    b.ne    5f
    mrs     x0, tpidr_el2
    ldr     x1, [x0, #{LISTS_IN_USE}]
    cbnz    x1, 5f
    ldr     x0, [x0, #{ABORT_EXITS}]
    ldr     x1, [x0]
    add     x1, x1, #1
    str     x1, [x0]
    mrs     x0, elr_el2
    add     x0, x0, #4
    msr     elr_el2, x0
    mrs     x0, tpidr_el2
    ldr     x0, [x0, #{CONTROL_WORDS}]
    mrs     x1, far_el2
    and     x1, x1, #0xc
    ldr     w0, [x0, x1]
    // The word in w0 (x0's upper half zero), ISS.SRT above it at bit 36; one entry of 16
    // bytes below per SRT writes it: x0 and x1 in their places on the stack, XZR not at all.
    mrs     x1, esr_el2
    ubfx    x1, x1, #16, #5
    orr     x0, x0, x1, lsl #36
    adr     x1, 6f
    add     x1, x1, x0, lsr #32
    br      x1
    .balign 16
6:  mov     w0, w0
    str     x0, [sp, #0]
    b       7f
    nop
    mov     w0, w0
    str     x0, [sp, #8]
    b       7f
    nop
    .irp n, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30
    mov     w\n, w0
    b       7f
    nop
    nop
    .endr
    b       7f
    nop
    nop
    nop
7:  ldp     x0, x1, [sp], #16
    eret
    dsb     nsh
    isb

5:  // A data abort while the vCPU holds no list
    // register, or at GICD_SGIR's IPA whatever it holds (a GICv2 guest's SGI, as a GICv3
    // guest's system register write), or a system register access (only an SGI's is
    // answered, which concerns no list register of the sender's): the guest's registers
    // are saved as `guest_exit` saves them and `answer_in_vector` is called with the run
    // loop's InVector, on the run loop's stack (which the frame of `enter_guest` tops): it
    // says whether the guest goes on, or the run loop takes the exit.
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{LISTS_IN_USE}]
    cbz     x0, 4f
    // HPFAR_EL2 names the IPA's page (FIPA, bits [43:4]), FAR_EL2 its offset (the same
    // low 12 bits in the VA and the IPA, whatever the guest's granule).
    mrs     x0, hpfar_el2
    mov     x1, #{SGIR_HPFAR}
    cmp     x0, x1
    b.ne    3b
    mrs     x0, far_el2
    and     x0, x0, #0xfff
    cmp     x0, #{SGIR_OFFSET}
    b.ne    3b
    mrs     x1, tpidr_el2
    b       4f
sysreg_in_vector:
    mrs     x1, tpidr_el2
4:  ldr     x0, [x1, #{IN_VECTOR}]
    ldr     x1, [x1]
    SAVE_GUEST
    bl      answer_in_vector
    cmp     x0, #{RESUME_GUEST}
    b.ne    return_to_run_loop
    mrs     x1, tpidr_el2
    ldr     x0, [x1]
    b       load_guest

guest_exit:
    // The guest's x0 and x1 are on the stack, x0 holds the reason.
    mrs     x1, tpidr_el2
    ldr     x1, [x1]
    SAVE_GUEST
return_to_run_loop:
    // x0: the reason; the guest's registers are saved.
    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    add     sp, sp, #96
    ret
"#,
    EXIT_SYNC = const EXIT_SYNC,
    // ESR_EL2 of an HVC #0 from AArch64: EC 0x16, IL 1, ISS.imm16 0 (bits [63:32] RES0).
    ESR_HVC64_IMM0 = const (0x16u32 << 26) | (1 << 25),
    SMCCC_VERSION = const hyp_core::smccc::SMCCC_VERSION,
    SMCCC_VERSION_1_1 = const hyp_core::smccc::SMCCC_VERSION_1_1,
    NOT_SUPPORTED = const -1i64,
    UNKNOWN = const hyp_arch_arm::cpus::VECTOR_CALLS_UNKNOWN,
    HVC_EXITS = const hyp_arch_arm::cpus::VECTOR_CALLS_HVC_EXITS,
    LISTS_IN_USE = const hyp_arch_arm::cpus::VECTOR_CALLS_LISTS_IN_USE,
    IN_VECTOR = const hyp_arch_arm::cpus::VECTOR_CALLS_IN_VECTOR,
    RESUME_GUEST = const RESUME_GUEST,
    EC_DATA_ABORT_LOWER = const hyp_core::syndrome::ExceptionClass::DATA_ABORT_LOWER.0,
    EC_SYSREG64 = const hyp_core::syndrome::ExceptionClass::SYSREG64.0,
    SGIR_HPFAR = const (hyp_core::guest_map::GICD_IPA + vgic::GICD_SGIR) >> 12 << 4,
    GICD_HPFAR = const hyp_core::guest_map::GICD_IPA >> 12 << 4,
    // FAR_EL2's bits of the page offset above the four words, zero for them.
    CONTROL_WORDS_PAGE_BITS = const 0xfff & !(vgic::CONTROL_WORDS_END - 1),
    ABORT_EXITS = const hyp_arch_arm::cpus::VECTOR_CALLS_ABORT_EXITS,
    CONTROL_WORDS = const hyp_arch_arm::cpus::VECTOR_CALLS_CONTROL_WORDS,
    SGIR_OFFSET = const vgic::GICD_SGIR & 0xfff,
);
const _: () = assert!(hyp_core::smccc::NOT_SUPPORTED == -1i64 as u64);
// The vector indexes the four control words with FAR_EL2's bits [3:2].
const _: () = assert!(vgic::CONTROL_WORDS_END == 0x10);

extern "C" {
    fn enter_guest(ctx: *mut GuestContext, in_vector: *const ()) -> u64;
}

/// Runs the guest whose context this is until it exits; `in_vector` is the run loop's
/// `InVector`, which the vector gives `vm::answer_in_vector` for an exit it offers.
pub fn run_guest(ctx: &mut GuestContext, in_vector: *const ()) -> u64 {
    // SAFETY: `ctx` is a valid, exclusively borrowed GuestContext (the asm relies on its
    // repr(C) layout: x0..x30 at 0, pc at 248, pstate at 256); the stage-2 tables, HCR_EL2
    // and the EL1 state of this guest were loaded by the caller, so the guest can reach
    // nothing but what its VM's capabilities map; TPIDR_EL2 points at this CPU's
    // `hyp_arch_arm::cpus::PerCpu` (set when it came online), whose first field and
    // `vector_calls.in_vector` the asm uses; `in_vector` comes from a reference the caller
    // holds across this call (`OnCpu::run_guest`).
    unsafe { enter_guest(ctx, in_vector) }
}

const _: () = assert!(core::mem::offset_of!(GuestContext, pc) == 248);
const _: () = assert!(core::mem::offset_of!(GuestContext, pstate) == 256);

/// An exception taken at EL2 itself: a hypervisor bug or a hardware fault. Prints everything
/// a person needs to find it, in one piece, then stops this CPU only; the other CPUs keep
/// running.
#[no_mangle]
extern "C" fn hyp_exception(kind: u64, regs: &[u64; 32]) {
    let esr = sysreg!("esr_el2");
    let report = HypFault {
        kind: ["synchronous", "IRQ", "FIQ", "SError"].get(kind as usize).copied().unwrap_or("?"),
        mode: "EL2",
        cpu: cpus::current_index(),
        syndrome: Syndrome(esr),
        named: [
            ("ESR_EL2", esr),
            ("FAR_EL2", sysreg!("far_el2")),
            ("ELR_EL2", sysreg!("elr_el2")),
            ("SPSR_EL2", sysreg!("spsr_el2")),
        ],
        general: regs,
        prefix: 'x',
    };
    println_unlocked!("{report}");
    // The boot CPU waits for this before it starts the VMs when the fault was a test's.
    #[cfg(feature = "test-hooks")]
    crate::fault_test::reported(report.cpu);
}
