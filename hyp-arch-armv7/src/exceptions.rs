//! HYP-mode exception vectors (ARM ARM B1.8.1, "The Hyp mode vector table"), guest entry and
//! exit, and the report of an exception the hypervisor did not expect.
//!
//! A guest's exceptions to HYP mode come through the Hyp Trap vector (0x14: every synchronous
//! exit, HSR says why), IRQ (0x18) and FIQ (0x1c), with HCR.IMO and FMO set. An exit saves
//! only r0-r12, LR_usr (HYP mode has no LR of its own: its LR is the guest's LR_usr), ELR_hyp
//! and SPSR_hyp into the running vCPU's `Registers` (the first field of this CPU's `PerCpu`,
//! at HTPIDR) and returns from `enter_guest` into the Rust run loop on the HYP stack. The
//! guest's banked SP, LR and SPSR of its other modes and its CP15 state stay live in the CPU
//! while the same vCPU keeps running (docs/architecture.md, "Performance principles").
//! The other vectors are taken in HYP mode itself: a hypervisor bug, reported.

use core::arch::global_asm;

use aarch32_cpu::register::{Hdfar, Hifar, Hsr};
use hyp_core::hyp_fault::HypFault;
use hyp_core::syndrome::Syndrome;

use crate::guest_regs::Registers;
use crate::{cpus, println_unlocked};

/// What brought the guest out, as `enter_guest` returns it.
pub const EXIT_SYNC: u32 = 0;
pub const EXIT_IRQ: u32 = 1;
pub const EXIT_FIQ: u32 = 2;

global_asm!(
    r#"
    .arm
    .arch_extension virt

// An exception taken in HYP mode: every register on the stack, then reported.
.macro HYP_FAULT kind
    push    {{r0-r12, lr}}
    mov     r0, #\kind
    mov     r1, sp
    bl      hyp_exception
    b       park
.endm

// A guest exit: its r0 and r1 on the HYP stack, the reason in r0.
.macro GUEST_EXIT reason
    push    {{r0, r1}}
    mov     r0, #\reason
    b       guest_exit
.endm

    .section .text.vectors, "ax"
    .balign 32
    .global hyp_vectors
hyp_vectors:
    b       hyp_reset               // 0x00: not used in HYP mode
    b       hyp_undefined           // 0x04: undefined instruction in HYP mode
    b       hyp_call                // 0x08: HVC or SVC in HYP mode
    b       hyp_prefetch_abort      // 0x0c
    b       hyp_data_abort          // 0x10
    b       guest_trap              // 0x14: Hyp Trap: a guest's synchronous exit
    b       guest_irq               // 0x18
    b       guest_fiq               // 0x1c

hyp_reset:          HYP_FAULT 0
hyp_undefined:      HYP_FAULT 1
hyp_call:           HYP_FAULT 2
hyp_prefetch_abort: HYP_FAULT 3
hyp_data_abort:     HYP_FAULT 4
guest_trap:         GUEST_EXIT 0
guest_irq:          GUEST_EXIT 1
guest_fiq:          GUEST_EXIT 2

    // u32 enter_guest(Registers *ctx): runs the guest until it exits; returns EXIT_*.
    .section .text, "ax"
    .global enter_guest
    .balign 4
enter_guest:
    push    {{r4-r12, lr}}
    mrc     p15, 4, r1, c13, c0, 2  // HTPIDR: this CPU's PerCpu, whose first field is the
    str     r0, [r1]                // guest's registers
    ldr     r2, [r0, #{pc}]
    ldr     r3, [r0, #{cpsr}]
    msr     elr_hyp, r2
    msr     spsr_cxsf, r3
    ldm     r0, {{r0-r12, lr}}      // r0..r12 and LR_usr
    eret
    dsb     nsh                     // no speculation past the ERET
    isb

guest_exit:
    // The guest's r0 and r1 are on the stack, r0 holds the reason.
    mrc     p15, 4, r1, c13, c0, 2
    ldr     r1, [r1]
    add     r1, r1, #8
    stm     r1, {{r2-r12, lr}}      // r2..r12 and LR_usr
    sub     r1, r1, #8
    pop     {{r2, r3}}
    stm     r1, {{r2, r3}}
    mrs     r2, elr_hyp
    mrs     r3, spsr
    str     r2, [r1, #{pc}]
    str     r3, [r1, #{cpsr}]
    pop     {{r4-r12, lr}}
    bx      lr
"#,
    pc = const core::mem::offset_of!(Registers, pc),
    cpsr = const core::mem::offset_of!(Registers, cpsr),
);

extern "C" {
    fn enter_guest(ctx: *mut Registers) -> u32;
}

/// Runs the guest whose registers these are until it exits.
pub fn run_guest(ctx: &mut Registers) -> u32 {
    // SAFETY: `ctx` is a valid, exclusively borrowed `Registers` (the asm relies on its
    // repr(C) layout: r0..r12 at 0, LR_usr at 52, pc and cpsr at the offsets passed in); the
    // stage-2 tables, HCR and the guest's CP15 state were loaded by the caller, so the guest
    // can reach nothing but what its VM's capabilities map; HTPIDR points at this CPU's
    // `PerCpu` (set when it came online), whose first field the asm uses.
    unsafe { enter_guest(ctx) }
}

const _: () = assert!(core::mem::offset_of!(Registers, lr_usr) == 52);

/// An exception taken in HYP mode itself: a hypervisor bug or a hardware fault. Prints
/// everything a person needs to find it, in one piece, then stops this CPU only; the other
/// CPUs keep running.
#[no_mangle]
extern "C" fn hyp_exception(kind: u32, regs: &[u32; 14]) {
    let hsr = u64::from(Hsr::read().raw_value());
    let elr: u32;
    let spsr: u32;
    // SAFETY: reading HYP mode's exception registers has no side effect.
    unsafe {
        core::arch::asm!(
            ".arch_extension virt",
            "mrs {elr}, elr_hyp",
            "mrs {spsr}, spsr",
            elr = out(reg) elr,
            spsr = out(reg) spsr,
            options(nomem, nostack)
        )
    };
    let far = if kind == 3 { Hifar::read().0 } else { Hdfar::read().0 };
    let general: [u64; 15] = core::array::from_fn(|i| regs.get(i).map_or(0, |&r| u64::from(r)));
    let report = HypFault {
        kind: ["reset", "undefined instruction", "HVC or SVC", "prefetch abort", "data abort"]
            .get(kind as usize)
            .copied()
            .unwrap_or("?"),
        mode: "HYP mode",
        cpu: cpus::current_index(),
        syndrome: Syndrome(hsr),
        named: [
            ("HSR", hsr),
            ("HDFAR/HIFAR", u64::from(far)),
            ("ELR_hyp", u64::from(elr)),
            ("SPSR_hyp", u64::from(spsr)),
        ],
        general: &general[..14],
        prefix: 'r',
    };
    println_unlocked!("{report}");
}

/// A panic is a hypervisor bug too: said without the console lock (the panicking CPU may
/// hold it), then this CPU stops.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println_unlocked!("\nhypervisor: panic on cpu{}: {info}", cpus::current_index());
    cpus::park()
}
