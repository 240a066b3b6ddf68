//! The reader of the AArch32 register-leak test (tests/tests/register_leak32.rs): its vCPU 0
//! shares a CPU with one secret-holder (leak-secret32), its vCPU 1 (started with PSCI CPU_ON,
//! SMC32) shares another with a second one. Each vCPU's first instructions store every
//! register it can read (`entry_state`), before anything of this guest's runs, and the guest
//! checks that each was at a fresh vCPU's value, whatever the secret-holder left in the CPU
//! (SPSR_svc in a check of its own, and the ThumbEE registers in another).
//! It does it all again after a PSCI SYSTEM_RESET, then powers off.
#![no_std]
#![no_main]

use core::arch::global_asm;
use core::sync::atomic::{AtomicU32, Ordering};

use guest_common::entry_report::EntryReport;
use selftest32_guest::entry_state::{compare_with_reset, EntryState, SPSR_SVC, WORDS};
use selftest32_guest::*;

/// When the first boot resets the VM (virtual counter); a boot that starts later is the
/// second.
const RESET_AT_MS: u64 = 3000;
/// vCPU 1's context ID (r0 at its first instruction).
const CONTEXT: u32 = 0x5eed_0001;

/// Stored by `guest_entry` (vCPU 0's first instructions, on each boot), before the BSS is
/// cleared: so not in it.
#[no_mangle]
#[link_section = ".data.entry_state"]
static mut BOOT_STATE_AT_ENTRY: EntryState = EntryState([0; WORDS]);
/// Stored by `leak_secondary_entry` (vCPU 1's first instructions).
#[no_mangle]
#[link_section = ".data.entry_state"]
static mut SECONDARY_STATE_AT_ENTRY: EntryState = EntryState([0; WORDS]);

global_asm!(
    r#"
    .arm
    .fpu    neon-vfpv4
    .arch_extension virt

// Stores every register into the EntryState at `stash` (entry_state::NAMES' order), r0
// through `slot`, a word in the code within 4 KiB: STR (literal) is the one store that needs
// no register (ARM ARM DDI 0406C A8.8.203). Then r0-r2 are as they were; every other register
// and the CP15, VFP and Advanced SIMD state as the vCPU started (CPACR and FPEXC are set to
// reach the VFP registers, then put back). IRQs, FIQs and asynchronous aborts are masked (a
// vCPU starts so, B1.3.1), so a CPS to each mode to read its banked registers takes nothing.
.macro CAPTURE stash, slot
    str     r0, \slot
    ldr     r0, =\stash
    add     r0, r0, #4
    stmia   r0!, {{r1-r12}}
    str     sp, [r0], #4
    str     lr, [r0], #4
    mrs     r1, spsr
    str     r1, [r0], #4
    mrs     r1, cpsr
    str     r1, [r0], #4
    cps     #0x1f                   // System mode: SP_usr, LR_usr
    str     sp, [r0], #4
    str     lr, [r0], #4
    .irp    m, 0x17, 0x1b, 0x12, 0x11   // Abort, Undefined, IRQ, FIQ: SP, LR, SPSR
    cps     #\m
    str     sp, [r0], #4
    str     lr, [r0], #4
    mrs     r1, spsr
    str     r1, [r0], #4
    .endr
    stmia   r0!, {{r8-r12}}         // R8_fiq-R12_fiq
    cps     #0x13
    ldr     r1, \slot
    ldr     r2, =\stash
    str     r1, [r2]
    mrc     p15, 0, r1, c1, c0, 0   // SCTLR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c1, c0, 2   // CPACR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c2, c0, 2   // TTBCR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c3, c0, 0   // DACR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c5, c0, 0   // DFSR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c5, c0, 1   // IFSR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c5, c1, 0   // ADFSR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c5, c1, 1   // AIFSR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c6, c0, 0   // DFAR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c6, c0, 2   // IFAR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c10, c2, 0  // PRRR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c10, c2, 1  // NMRR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c10, c3, 0  // AMAIR0
    str     r1, [r0], #4
    mrc     p15, 0, r1, c10, c3, 1  // AMAIR1
    str     r1, [r0], #4
    mrc     p15, 0, r1, c12, c0, 0  // VBAR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c13, c0, 1  // CONTEXTIDR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c13, c0, 2  // TPIDRURW
    str     r1, [r0], #4
    mrc     p15, 0, r1, c13, c0, 3  // TPIDRURO
    str     r1, [r0], #4
    mrc     p15, 0, r1, c13, c0, 4  // TPIDRPRW
    str     r1, [r0], #4
    mrc     p15, 0, r1, c14, c1, 0  // CNTKCTL
    str     r1, [r0], #4
    mrc     p15, 2, r1, c0, c0, 0   // CSSELR
    str     r1, [r0], #4
    mrc     p15, 0, r1, c14, c3, 1  // CNTV_CTL
    str     r1, [r0], #4
    mrrc    p15, 0, r1, r2, c2      // TTBR0
    stmia   r0!, {{r1, r2}}
    mrrc    p15, 1, r1, r2, c2      // TTBR1
    stmia   r0!, {{r1, r2}}
    mrrc    p15, 0, r1, r2, c7      // PAR
    stmia   r0!, {{r1, r2}}
    mrrc    p15, 3, r1, r2, c14     // CNTV_CVAL
    stmia   r0!, {{r1, r2}}
    // CPACR: full access to cp10 and cp11 (B4.1.40), then FPEXC.EN (B6.1.7).
    mrc     p15, 0, r3, c1, c0, 2
    orr     r1, r3, #(0xf << 20)
    mcr     p15, 0, r1, c1, c0, 2
    isb
    vmrs    r4, fpexc
    str     r4, [r0], #4
    orr     r1, r4, #(1 << 30)
    vmsr    fpexc, r1
    isb
    vmrs    r1, fpscr
    str     r1, [r0], #4
    vstmia  r0!, {{d0-d15}}
    vstmia  r0!, {{d16-d31}}
    vmsr    fpexc, r4
    mcr     p15, 0, r3, c1, c0, 2
    isb
    ldr     r3, =\stash
    ldm     r3, {{r0-r2}}
.endm

    .section .text, "ax"
    // vCPU 0's first instruction (the runtime's weak `guest_entry` replaced).
    .global guest_entry
guest_entry:
    CAPTURE BOOT_STATE_AT_ENTRY, .Lboot_r0
    b       entry_continue
.Lboot_r0:
    .word   0
    .ltorg

    // vCPU 1's first instruction (PSCI CPU_ON): r0 is its context ID.
    .global leak_secondary_entry
leak_secondary_entry:
    CAPTURE SECONDARY_STATE_AT_ENTRY, .Lsecondary_r0
    b       secondary_entry
.Lsecondary_r0:
    .word   0
    .ltorg
"#
);

extern "C" {
    fn leak_secondary_entry();
}

static VCPU1: EntryReport = EntryReport::new();
static VCPU1_SPSR_SVC: AtomicU32 = AtomicU32::new(0);
static VCPU1_THUMBEE: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];

/// Whether this is the ARMv8 image (an AArch32 VM at EL1) rather than the ARMv7 image
/// (HYP mode on a Cortex-A15, MIDR part 0xc0f; VPIDR is the CPU's MIDR on both).
fn on_armv8() -> bool {
    (cp15::midr() >> 4) & 0xfff != 0xc0f
}

extern "C" fn vcpu1_main(_context: u32, _cpsr: u32) {
    // SAFETY: written by `leak_secondary_entry` before this vCPU ran anything else; read once
    // here, while vCPU 0 waits.
    let state = unsafe { &*core::ptr::addr_of!(SECONDARY_STATE_AT_ENTRY) };
    let (compared, differ) = compare_with_reset(state, [CONTEXT, 0, 0], false, on_armv8());
    VCPU1_SPSR_SVC.store(state.0[SPSR_SVC], Ordering::SeqCst);
    if cp15::has_thumbee() {
        let (teecr, teehbr) = cp15::thumbee();
        VCPU1_THUMBEE[0].store(teecr, Ordering::SeqCst);
        VCPU1_THUMBEE[1].store(teehbr, Ordering::SeqCst);
    }
    VCPU1.report(compared, differ);
    hvc(PSCI_CPU_OFF, 0, 0, 0);
}

/// SPSR_svc, the SPSR of the mode a vCPU starts in, apart: what MRS reads of it is what
/// QEMU 10.0 left live from the last AArch32 mode on that CPU when the hypervisor is AArch64
/// (tests/tests/register_leak32.rs, `ARMV8_QEMU_DEFECTS`), not the SPSR_EL1 the hypervisor
/// wrote (SPSR_svc is architecturally mapped to SPSR_EL1: DDI 0487, SPSR_svc).
fn check_spsr_svc(c: &mut Checks, spsr: u32, who: core::fmt::Arguments<'_>) {
    c.check(spsr == 0, format_args!("leak: {who}: SPSR_svc at its reset value (SPSR_svc {spsr:#x})"));
}

/// TEECR and TEEHBR (read after the capture: nothing of this guest touches them) at zero
/// where the CPU has ThumbEE (the ARMv7 image's Cortex-A15); on ARMv8, which has none, that
/// ID_PFR0 says so.
fn check_thumbee(c: &mut Checks, (teecr, teehbr): (u32, u32), who: core::fmt::Arguments<'_>) {
    if cp15::has_thumbee() {
        c.check(
            (teecr, teehbr) == (0, 0),
            format_args!("leak: {who}: ThumbEE TEECR {teecr:#x} and TEEHBR {teehbr:#x} at their reset value"),
        );
    } else {
        c.check(on_armv8(), format_args!("leak: {who}: no ThumbEE (ID_PFR0 {:#x})", cp15::id_pfr0()));
    }
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let second = counter_ms() >= RESET_AT_MS;
    let when = if second { "after SYSTEM_RESET" } else { "at its first start" };
    // SAFETY: written by `guest_entry` before any Rust ran; read once.
    let state = unsafe { &*core::ptr::addr_of!(BOOT_STATE_AT_ENTRY) };
    let (compared, differ) = compare_with_reset(state, [0, 0xffff_ffff, 0], true, on_armv8());
    c.check(differ == 0, format_args!("leak: vCPU 0 {when}: {compared} registers at their reset value ({differ} not)"));
    check_spsr_svc(&mut c, state.0[SPSR_SVC], format_args!("vCPU 0 {when}"));
    let thumbee = if cp15::has_thumbee() { cp15::thumbee() } else { (0, 0) };
    check_thumbee(&mut c, thumbee, format_args!("vCPU 0 {when}"));

    // The secret-holders have marked their CPUs by now.
    wait_ms(300);
    VCPU1.expect();
    let started = start_vcpu_at(1, leak_secondary_entry, vcpu1_main, CONTEXT);
    VCPU1.check(&mut c, i64::from(started), when, counter_ms);
    check_spsr_svc(&mut c, VCPU1_SPSR_SVC.load(Ordering::SeqCst), format_args!("vCPU 1 {when}"));
    let thumbee = (VCPU1_THUMBEE[0].load(Ordering::SeqCst), VCPU1_THUMBEE[1].load(Ordering::SeqCst));
    check_thumbee(&mut c, thumbee, format_args!("vCPU 1 {when}"));

    if !second {
        while counter_ms() < RESET_AT_MS {
            core::hint::spin_loop();
        }
        println!("leak-reader32: rebooting with PSCI SYSTEM_RESET");
        hvc(PSCI_SYSTEM_RESET, 0, 0, 0);
        println!("not ok - SYSTEM_RESET returned");
    }
    finish("leak-reader32", &c)
}
