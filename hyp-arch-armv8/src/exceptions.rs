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
//! A write of ICC_SGI1R_EL1 that names one other vCPU, by a vCPU whose VM's SGIs may be
//! posted (a GICv3 VM's AArch64 vCPU), is answered there too, whatever the vCPU holds, with
//! x0 to x5: the SGI posted, its target hinted and kicked
//! (hyp_runtime::shared_vgic::VgicHandle::post_sgi; docs/vgic.md, "Posted SGIs").
//!
//! An IRQ from AArch64 that is a kick bringing a pinned vCPU the SGI it took last, posted to
//! it again, is taken there too, with x0 to x7: the list register the run loop published
//! written again, the kick ended and counted (`kick_in_vector`, `kick_in_vector_v2`;
//! docs/vgic.md, "The same SGI shown again in the vector").
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

use crate::arch::Aarch64;
use crate::{cpus, println_unlocked};
use hyp_runtime::shared_vgic::VgicHandle;

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

// The posts of SGIs (sysreg_in_vector, and 40 for GICD_SGIR): the guest's x2 to x5 pushed
// below its x0 and x1 (x0 at [sp, #32], x1 at [sp, #40]).
// The word at x1 ORed with x4 by an exclusive pair (`\store`: stxr, or stlxr for a
// release); x0 and w2 clobbered.
.macro ATOMIC_ORR label, store
\label: ldxr    x0, [x1]
    orr     x0, x0, x4
    \store  w2, x0, [x1]
    cbnz    w2, \label\()b
.endm

.macro PUSH_X2_X5
    stp     x2, x3, [sp, #-32]!
    stp     x4, x5, [sp, #16]
.endm
.macro POP_X2_X5
    ldp     x4, x5, [sp, #16]
    ldp     x2, x3, [sp], #32
.endm

// The guest's register x<x0> (31: XZR) into x0, with x0 to x5 on the stack; then on at
// label \done (through `xt_into_x0`, which returns by x2, pushed already).
.macro XT_INTO_X0 done
    adr     x2, \done\()f
    b       xt_into_x0
.endm

// The target list in w1, the VM's vGIC in x3: the one vCPU of the VM it names, not the
// sender, into x5 (x2: this CPU's PerCpu); to \fail if it names none, several or the
// sender.
.macro ONE_OTHER_VCPU fail
    ldr     w5, [x3, #{POSTING_VCPUS_AT}]
    ands    w1, w1, w5
    b.eq    \fail
    sub     w5, w1, #1
    tst     w1, w5
    b.ne    \fail
    rbit    w5, w1
    clz     w5, w5
    mrs     x2, tpidr_el2
    ldr     x1, [x2, #{SGI_VCPU}]
    cmp     x5, x1
    b.eq    \fail
.endm

// After the post of an SGI for vCPU x5 of the vGIC at x3: the target hinted (a release:
// whoever takes the hint finds the post), a full barrier, then to \wake if it waits for an
// interrupt off its CPU (the run loop's code wakes it), to \nokick if it runs on no CPU or
// on this one (which runs the sender); else x0 is its CPU. x2: this CPU's PerCpu.
// The hint is ORed in (HINT_POSTED), by an exclusive pair: a change hinted before stays
// there for the target's vector to see (kick_in_vector). x2 is clobbered.
.macro HINT_AND_FIND_TARGET wake, nokick
    add     x1, x3, #{HINTS_AT}
    add     x1, x1, x5
65: ldxrb   w0, [x1]
    orr     w0, w0, #{HINT_POSTED}
    stlxrb  w2, w0, [x1]
    cbnz    w2, 65b
    dmb     ish
    add     x1, x3, #{WAITING_AT}
    ldrb    w1, [x1, x5]
    cbnz    w1, \wake
    add     x1, x3, #{RUNNING_ON_AT}
    ldr     x0, [x1, x5, lsl #3]
    mrs     x2, tpidr_el2
    ldr     x1, [x2, #{SGI_CPU}]
    cmp     x0, x1
    b.eq    \nokick
    cmn     x0, #1
    b.eq    \nokick
.endm

// The post's exit counted (x2: this CPU's PerCpu), the PC past the write, the guest goes on.
.macro COUNT_STEP_RESUME
    ldr     x1, [x2, #{SGI_EXITS}]
    ldr     x0, [x1]
    add     x0, x0, #1
    str     x0, [x1]
    mrs     x0, elr_el2
    add     x0, x0, #4
    msr     elr_el2, x0
    POP_X2_X5
    ldp     x0, x1, [sp], #16
    eret
    dsb     nsh
    isb
.endm

.macro GUEST_EXIT reason
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mov     x0, #\reason
    b       guest_exit
.endm

// An IRQ from AArch64: to kick_in_vector (GICv3) or kick_in_vector_v2 for a vCPU whose
// kicks may be taken there (VectorCalls::kick_entry), else to the run loop; x1 is this
// CPU's PerCpu there.
.macro GUEST_IRQ_AARCH64
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{KICK_ENTRY}]
    cbz     x0, 1f
    br      x0
1:  mov     x0, #{EXIT_IRQ}
    b       guest_exit
.endm

// The run loop's checks before an entry, for a kick taken in the vector (x1: PerCpu): to
// \fail if the VM is ending or its devices left work. x0 clobbered.
.macro VM_GOES_ON fail
    ldr     x0, [x1, #{KICK_ENDING}]
    ldrb    w0, [x0]
    cbnz    w0, \fail
    ldr     x0, [x1, #{KICK_DEVICE_WORK}]
    ldrb    w0, [x0]
    cbnz    w0, \fail
.endm

// With x0 the list registers' empty status (x1: PerCpu): to \fail unless every one is
// empty, the VM goes on (VM_GOES_ON) and the vCPU's hint, taken by an exclusive pair with
// an acquire, was HINT_POSTED alone (else the monitor cleared). The VM's vGIC is the one
// the vCPU posts with, at \vgic_at in PerCpu (SGI1R_VGIC or SGIR_VGIC). Out: x3 the
// vGIC, x4 the vCPU. x0, x2 clobbered.
.macro A_KICK_FOR_A_POST vgic_at, fail
    ldr     x2, [x1, #{KICK_ALL_EMPTY}]
    cmp     x0, x2
    b.ne    \fail
    VM_GOES_ON \fail
    ldr     x3, [x1, #\vgic_at]
    ldr     x4, [x1, #{SGI_VCPU}]
    add     x2, x3, #{HINTS_AT}
    add     x2, x2, x4
66: ldaxrb  w0, [x2]
    cmp     w0, #{HINT_POSTED}
    b.ne    67f
    stxrb   w0, wzr, [x2]
    cbnz    w0, 66b
    b       68f
67: clrex
    b       \fail
68:
.endm

// The byte of vCPU x4 in the 64-bit word at x2 taken if it is the bit of the SGI in x5's
// low three bits alone (vgic::posted_sgi_bit; cleared, by an exclusive pair with an
// acquire); else to \fail with the monitor cleared. x0, x4, x6, x7 clobbered.
.macro TAKE_POSTED_BYTE fail
    and     x6, x5, #7
    mov     x7, #1
    lsl     x7, x7, x6
    lsl     x4, x4, #3
69: ldaxr   x0, [x2]
    lsr     x6, x0, x4
    and     x6, x6, #0xff
    cmp     x6, x7
    b.ne    70f
    lsl     x6, x7, x4
    bic     x0, x0, x6
    stxr    w6, x0, [x2]
    cbnz    w6, 69b
    b       71f
70: clrex
    b       \fail
71:
.endm

.macro PUSH_X2_X7
    stp     x2, x3, [sp, #-48]!
    stp     x4, x5, [sp, #16]
    stp     x6, x7, [sp, #32]
.endm
.macro POP_X2_X7
    ldp     x6, x7, [sp, #32]
    ldp     x4, x5, [sp, #16]
    ldp     x2, x3, [sp], #48
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
    GUEST_IRQ_AARCH64
    GUEST_EXIT 2
    GUEST_EXIT 3
    GUEST_EXIT 0    // lower EL, AArch32 (a guest's 32-bit EL0)
    GUEST_EXIT 1
    GUEST_EXIT 2
    GUEST_EXIT 3

xt_into_x0:
    // XT_INTO_X0's table: one entry of two instructions per register.
    adr     x1, 1f
    add     x1, x1, x0, lsl #3
    br      x1
1:  ldr     x0, [sp, #32]
    br      x2
    ldr     x0, [sp, #40]
    br      x2
    ldr     x0, [sp, #0]
    br      x2
    ldr     x0, [sp, #8]
    br      x2
    ldr     x0, [sp, #16]
    br      x2
    ldr     x0, [sp, #24]
    br      x2
    .irp n, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30
    mov     x0, x\n
    br      x2
    .endr
    mov     x0, xzr
    br      x2

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
    // says whether the guest goes on, or the run loop takes the exit. A vCPU whose GICD_SGIR
    // writes may be posted (VectorCalls::sgir_vgic) has them tested first (40).
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{SGIR_VGIC}]
    cbnz    x0, 40f
41: ldr     x0, [x1, #{LISTS_IN_USE}]
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

40: // A GICv2 guest's word store (STR Wt: ISV, a word, WnR; not on a stage-1 walk, a cache
    // maintenance, an external abort or a VNCR access; FAR valid; a translation fault, so
    // HPFAR is valid) to GICD_SGIR that names one vCPU other than the sender
    // (vgic::single_sgir_target) and one of SGIs 0 to 7 is posted in the sender's word:
    // the steps of hyp_runtime::shared_vgic::VgicHandle::post_sgi, with x2 to x5 on the
    // stack as well, and the kick a GICD_SGIR write of the board's. Anything else goes on
    // at 41 with nothing changed.
    mrs     x0, esr_el2
    tbz     x0, #6, 41b
    ubfx    x1, x0, #21, #4
    cmp     x1, #0b1100
    b.ne    49f
    tst     x0, #0x3f80
    b.ne    49f
    and     x1, x0, #0x3c
    cmp     x1, #0x04
    b.ne    49f
    mrs     x0, hpfar_el2
    mov     x1, #{SGIR_HPFAR}
    cmp     x0, x1
    b.ne    49f
    mrs     x0, far_el2
    and     x0, x0, #0xfff
    cmp     x0, #{SGIR_OFFSET}
    b.ne    49f
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{SGIR_VGIC}]
    PUSH_X2_X5
    mov     x3, x0
    mrs     x0, esr_el2
    ubfx    x0, x0, #16, #5
    XT_INTO_X0 43
43: // TargetListFilter [25:24] 0, SGIINTID [3:0] below 8, one bit of CPUTargetList [23:16]
    // among the VM's vCPUs, not the sender's.
    tst     w0, #0x3000000
    b.ne    48f
    tst     w0, #0x8
    b.ne    48f
    and     x4, x0, #7
    ubfx    w1, w0, #16, #8
    ONE_OTHER_VCPU 48f
    // The sender's word: bit 8 * target + SGI; then the sender's bit of the posted word,
    // a release (whoever sees the mark finds the word's post).
    add     x1, x4, x5, lsl #3
    mov     x4, #1
    lsl     x4, x4, x1
    ldr     x0, [x2, #{SGI_VCPU}]
    add     x1, x3, #{POSTED_BY_AT}
    add     x1, x1, x0, lsl #3
    ATOMIC_ORR 44, stxr
    mrs     x2, tpidr_el2
    ldr     x0, [x2, #{SGI_VCPU}]
    mov     x4, #1
    lsl     x4, x4, x0
    add     x1, x3, #{POSTED_AT}
    ATOMIC_ORR 45, stlxr
    HINT_AND_FIND_TARGET 28f, 46f
    ldr     x1, [x2, #{SGI_KICK_TARGETS}]
    add     x1, x1, x0, lsl #3
    ldr     w0, [x1]
    cbz     w0, 28f
    orr     w0, w0, #{KICK_SGIR}
    ldr     x1, [x2, #{SGI_BOARD_SGIR}]
    dsb     ishst
    str     w0, [x1]
46: COUNT_STEP_RESUME
48: POP_X2_X5
49: mrs     x1, tpidr_el2
    b       41b

sysreg_in_vector:
    // The guest's x0 and x1 are on the stack. A write of ICC_SGI1R_EL1 (MSR, its ESR_EL2
    // but Rt) that names one vCPU other than the sender by its target list, while the vCPU
    // may post SGIs (VectorCalls::sgi1r_vgic), is posted here: the steps of
    // hyp_runtime::shared_vgic::VgicHandle::post_sgi, in its order, with x2 to x5 on the
    // stack as well. Anything else goes to the run loop's answer at 4 with nothing changed
    // (29); a target found waiting off its CPU after the post, or on a CPU whose kick
    // target is not recorded, is woken and kicked by the run loop's code (28), which does
    // not post it again.
    mrs     x0, esr_el2
    and     w0, w0, #0xfffffc1f
    mov     w1, #{ESR_SGI1R_LOW}
    movk    w1, #{ESR_SGI1R_HIGH}, lsl #16
    cmp     w0, w1
    b.ne    30f
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{SGI1R_VGIC}]
    cbz     x0, 30f
    PUSH_X2_X5
    mov     x3, x0
    mrs     x0, esr_el2
    ubfx    x0, x0, #5, #5
    XT_INTO_X0 21
21: // vgic::single_sgi_target: Aff1 [23:16] zero, and Aff2, IRM, RS, Aff3 (and the RES0
    // bits among them) [55:32] zero; an INTID [27:24] below 8; one bit of the target list
    // [15:0] among the VM's vCPUs, not the sender's.
    tst     x0, #0xff0000
    b.ne    29f
    tst     x0, #0xffffff00000000
    b.ne    29f
    tbnz    x0, #27, 29f
    ubfx    x4, x0, #24, #3
    and     w1, w0, #0xffff
    ONE_OTHER_VCPU 29f
    // Posted: bit 8 * vCPU + INTID (vgic::posted_sgi_bit; the vCPUs that may be posted to
    // are 0 to 7, the SGIs 0 to 7).
    add     x1, x4, x5, lsl #3
    mov     x4, #1
    lsl     x4, x4, x1
    add     x1, x3, #{POSTED_AT}
    ATOMIC_ORR 22, stxr
    HINT_AND_FIND_TARGET 28f, 23f
    ldr     x1, [x2, #{SGI_KICK_TARGETS}]
    ldr     x0, [x1, x0, lsl #3]
    cbz     x0, 28f
    orr     x0, x0, #{KICK_SGI1R}
    dsb     ishst
    msr     icc_sgi1r_el1, x0
    isb
23: COUNT_STEP_RESUME
28: POP_X2_X5
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{IN_VECTOR}]
    ldr     x1, [x1]
    SAVE_GUEST
    bl      answer_posted_in_vector
    b       24f
29: POP_X2_X5
30: mrs     x1, tpidr_el2
4:  ldr     x0, [x1, #{IN_VECTOR}]
    ldr     x1, [x1]
    SAVE_GUEST
    bl      answer_in_vector
24: cmp     x0, #{RESUME_GUEST}
    b.ne    return_to_run_loop
    mrs     x1, tpidr_el2
    ldr     x0, [x1]
    b       load_guest

    .global kick_in_vector
kick_in_vector:
    // The guest's x0 and x1 are on the stack, x1 is this CPU's PerCpu. A kick (the kick
    // SGI the highest pending interrupt) that brings the vCPU an SGI posted to it, the same
    // SGI as the one list register it holds showed, now empty, is taken here: that
    // register written again with the value the run loop published for it
    // (VectorCalls::again_value: vgic::Distributor::sgi_to_show_again), the kick ended and
    // counted, the guest goes on. Only if every list register is empty, the VM is not
    // ending, its devices left no work, the vCPU's hint is HINT_POSTED alone (taken) and
    // its posted SGIs are that one alone (taken); anything else goes to the run loop with
    // nothing taken, or with the hint taken and the kick left pending, whose exit hints the
    // vCPU again (78). docs/vgic.md, "The same SGI shown again in the vector".
    mrs     x0, icc_hppir1_el1
    cmp     x0, #{KICK_SGI}
    b.ne    79f
    PUSH_X2_X7
    ldr     x5, [x1, #{AGAIN_VALUE}]
    cbz     x5, 78f
    mrs     x0, ich_elrsr_el2
    A_KICK_FOR_A_POST {SGI1R_VGIC}, 78f
    add     x2, x3, #{POSTED_AT}
    TAKE_POSTED_BYTE 78f
    // ICH_LR<n>_EL2 (n: VectorCalls::again_lr) = x5, by one entry of two instructions each.
    ldr     x0, [x1, #{AGAIN_LR}]
    adr     x2, 73f
    add     x2, x2, x0, lsl #3
    br      x2
73: .irp n, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    msr     ich_lr\n\()_el2, x5
    b       74f
    .endr
74: // The kick acknowledged and ended (EOImode 1: ICC_EOIR1_EL1, ICC_DIR_EL1); the ERET
    // synchronizes both and the list register's write. If another interrupt came first
    // it is left to the run loop (VectorCalls::acknowledged), the kick stays pending.
    mrs     x0, icc_iar1_el1
    cmp     x0, #{KICK_SGI}
    b.ne    75f
    msr     icc_eoir1_el1, x0
    msr     icc_dir_el1, x0
    b       76f

    .global kick_in_vector_v2
kick_in_vector_v2:
    // kick_in_vector's steps on a GICv2 (docs/vgic.md, "The same SGI shown again in the
    // vector"), with its CPU interface (GICC_HPPIR, GICC_IAR, GICC_EOIR, GICC_DIR) and list
    // registers (GICH_ELRSR0, GICH_LR<n>) in memory-mapped frames, and the SGI posted per
    // source: no other source may have posted to this vCPU, and the source the register
    // names must have posted the SGI alone to it (taken; the source's bit in the posted word
    // stays set, so a post of the source's made meanwhile is not lost: the next holder of
    // the vGIC's lock finds it).
    PUSH_X2_X7
    ldr     x3, [x1, #{KICK_GICC}]
    ldr     w0, [x3, #{GICC_HPPIR}]
    and     w0, w0, #0x3ff
    cmp     w0, #{KICK_SGI}
    b.ne    78f
    ldr     x5, [x1, #{AGAIN_VALUE}]
    cbz     x5, 78f
    ldr     x2, [x1, #{KICK_GICH}]
    ldr     w0, [x2, #{GICH_ELRSR0}]
    A_KICK_FOR_A_POST {SGIR_VGIC}, 78f
    // The source (GICH_LR<n>.CPUID, bits [12:10]); no other source's word in the posted
    // word (a bit per source) may hold a post for this vCPU.
    ubfx    x6, x5, #10, #3
    mov     x7, #1
    lsl     x7, x7, x6
    ldr     x0, [x3, #{POSTED_AT}]
    bic     x0, x0, x7
    lsl     x4, x4, #3
80: cbz     x0, 81f
    rbit    x2, x0
    clz     x2, x2
    sub     x6, x0, #1
    and     x0, x0, x6
    add     x2, x3, x2, lsl #3
    ldr     x2, [x2, #{POSTED_BY_AT}]
    lsr     x2, x2, x4
    tst     x2, #0xff
    b.ne    78f
    b       80b
81: lsr     x4, x4, #3
    ubfx    x6, x5, #10, #3
    add     x2, x3, #{POSTED_BY_AT}
    add     x2, x2, x6, lsl #3
    TAKE_POSTED_BYTE 78f
    ldr     x0, [x1, #{AGAIN_LR}]
    ldr     x2, [x1, #{KICK_GICH}]
    add     x2, x2, x0, lsl #2
    str     w5, [x2, #{GICH_LR0}]
    ldr     x3, [x1, #{KICK_GICC}]
    ldr     w0, [x3, #{GICC_IAR}]
    and     w2, w0, #0x3ff
    cmp     w2, #{KICK_SGI}
    b.ne    75f
    str     w0, [x3, #{GICC_EOIR}]
    str     w0, [x3, #{GICC_DIR}]
76: // Counted as the run loop counts a kick; the guest goes on.
    ldr     x2, [x1, #{KICK_EXITS}]
    ldr     x0, [x2]
    add     x0, x0, #1
    str     x0, [x2]
    POP_X2_X7
    ldp     x0, x1, [sp], #16
    eret
    dsb     nsh
    isb
75: orr     x0, x0, #(1 << 32)
    str     x0, [x1, #{ACKNOWLEDGED}]
78: POP_X2_X7
79: mov     x0, #{EXIT_IRQ}
    b       guest_exit

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
    ESR_SGI1R_LOW = const ESR_SGI1R_WRITE & 0xffff,
    ESR_SGI1R_HIGH = const ESR_SGI1R_WRITE >> 16,
    SGI1R_VGIC = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI1R_VGIC,
    SGIR_VGIC = const hyp_arch_arm::cpus::VECTOR_CALLS_SGIR_VGIC,
    SGI_BOARD_SGIR = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI_BOARD_SGIR,
    SGI_EXITS = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI_EXITS,
    SGI_VCPU = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI_VCPU,
    SGI_CPU = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI_CPU,
    SGI_KICK_TARGETS = const hyp_arch_arm::cpus::VECTOR_CALLS_SGI_KICK_TARGETS,
    POSTED_AT = const VgicHandle::<Aarch64>::POSTED_AT,
    POSTED_BY_AT = const VgicHandle::<Aarch64>::POSTED_BY_AT,
    HINTS_AT = const VgicHandle::<Aarch64>::HINTS_AT,
    WAITING_AT = const VgicHandle::<Aarch64>::WAITING_AT,
    RUNNING_ON_AT = const VgicHandle::<Aarch64>::RUNNING_ON_AT,
    POSTING_VCPUS_AT = const VgicHandle::<Aarch64>::POSTING_VCPUS_AT,
    KICK_SGI1R = const hyp_arch_arm::registers::sgi1r_intid(crate::gic::KICK_SGI),
    KICK_SGI = const crate::gic::KICK_SGI,
    EXIT_IRQ = const EXIT_IRQ,
    HINT_POSTED = const hyp_runtime::shared_vgic::HINT_POSTED,
    KICK_ENTRY = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_ENTRY,
    KICK_GICC = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_GICC,
    KICK_GICH = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_GICH,
    GICC_HPPIR = const hyp_arch_arm::registers::GICC_HPPIR,
    GICC_IAR = const hyp_arch_arm::registers::GICC_IAR,
    GICC_EOIR = const hyp_arch_arm::registers::GICC_EOIR,
    GICC_DIR = const hyp_arch_arm::registers::GICC_DIR,
    GICH_ELRSR0 = const hyp_arch_arm::registers::GICH_ELRSR0,
    GICH_LR0 = const hyp_arch_arm::registers::GICH_LR0,
    KICK_EXITS = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_EXITS,
    KICK_ENDING = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_ENDING,
    KICK_DEVICE_WORK = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_DEVICE_WORK,
    KICK_ALL_EMPTY = const hyp_arch_arm::cpus::VECTOR_CALLS_KICK_ALL_EMPTY,
    AGAIN_LR = const hyp_arch_arm::cpus::VECTOR_CALLS_AGAIN_LR,
    AGAIN_VALUE = const hyp_arch_arm::cpus::VECTOR_CALLS_AGAIN_VALUE,
    ACKNOWLEDGED = const hyp_arch_arm::cpus::VECTOR_CALLS_ACKNOWLEDGED,
    KICK_SGIR = const hyp_arch_arm::registers::gicv2_sgir_intid(crate::gic::KICK_SGI),
);
/// ESR_EL2 of a trapped MSR ICC_SGI1R_EL1 from AArch64, Rt zero: EC 0x18, IL 1, and the ISS
/// of ARM ARM D17.2.37 (Op0 3, Op2 5, Op1 0, CRn 12, CRm 11, Direction 0: a write).
const ESR_SGI1R_WRITE: u32 = (0x18 << 26) | (1 << 25) | (3 << 20) | (5 << 17) | (12 << 10) | (11 << 1);
// What the vector's post relies on: a vCPU's hint and waiting flag are a byte each, the CPU
// it runs on 8 bytes, its posted SGIs 8 bits of one 64-bit word (and no VM has vCPUs past
// those the word holds).
const _: () = assert!(core::mem::size_of::<core::sync::atomic::AtomicBool>() == 1);
const _: () = assert!(core::mem::size_of::<core::sync::atomic::AtomicUsize>() == 8);
const _: () = assert!(vgic::POSTED_SGIS == 8 && vgic::MAX_VCPUS_V2 <= 8);
const _: () = assert!(hyp_core::smccc::NOT_SUPPORTED == -1i64 as u64);
// The vector indexes the four control words with FAR_EL2's bits [3:2].
const _: () = assert!(vgic::CONTROL_WORDS_END == 0x10);

extern "C" {
    fn enter_guest(ctx: *mut GuestContext, in_vector: *const ()) -> u64;
    fn kick_in_vector();
    fn kick_in_vector_v2();
}

/// Where the vector takes a kick itself (VectorCalls::kick_entry): the code for a GICv2's
/// frames, or for a GICv3's system registers.
pub fn kick_entry(gicv2: bool) -> usize {
    if gicv2 {
        kick_in_vector_v2 as unsafe extern "C" fn() as usize
    } else {
        kick_in_vector as unsafe extern "C" fn() as usize
    }
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
