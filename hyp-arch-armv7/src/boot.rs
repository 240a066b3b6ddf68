//! Entry from the loader, as a 32-bit Linux kernel is entered: the zImage header,
//! self-relocation, BSS, the boot stack, HVBAR, and the entries of the other CPUs: started
//! through PSCI CPU_ON (`secondary_entry`), or released by the board all alike and let
//! through the pen one by one (`pen_entry`).
//!
//! The loader (QEMU `-kernel`, U-Boot `bootz`) enters at the image's first byte with the MMU
//! and data cache off, r0 = 0, r1 = the machine type, r2 = the device tree
//! (Documentation/arch/arm/booting.rst), in HYP mode when it leaves HYP to the kernel (QEMU
//! `-M virt,virtualization=on`). The image is linked at 0 as a PIE; applying its
//! R_ARM_RELATIVE relocations (`.rel.dyn`: the addend is the word in place) for the load
//! address makes it run wherever it was put. Entered in any other mode, it says so on the
//! console (src/main.rs, `wrong_mode`) and stops.

use core::arch::global_asm;

/// The boot CPU's stack; the other CPUs get theirs from `cpus::STACKS`.
pub const BOOT_STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(16))]
pub struct Stack(pub [u8; BOOT_STACK_SIZE]);

#[no_mangle]
pub static mut BOOT_STACK: Stack = Stack([0; BOOT_STACK_SIZE]);

/// CPSR.M of HYP mode (ARM ARM B1.3.1).
pub const MODE_HYP: u32 = 0x1a;
/// HSCTLR with the MMU and caches off: only its RES1 bits (ARM ARM B4.1.66).
pub const HSCTLR_RES1: u32 = 0x30c5_0818;
/// HCPTR (B4.1.64): TTA (bit 20) traps the trace registers; TCP0-TCP9, TCP12 and TCP13 trap
/// every coprocessor but CP10 and CP11 (the guests' VFP and Advanced SIMD; the hypervisor is
/// built soft-float and never touches them).
pub const HCPTR_VALUE: u32 = 0x0010_33ff;
/// R_ARM_RELATIVE, the only kind of relocation a static PIE has (ELF for the Arm
/// Architecture, 5.6.1).
const R_ARM_RELATIVE: u32 = 23;

global_asm!(
    r#"
    .arm
    .arch_extension virt

// \reg = the run-time address of \sym, position-independently: the word holds sym minus
// its own address, which is what PC reads as at the ADD (the ADD's address + 8).
.macro ADDR reg, sym
    ldr     \reg, .Laddr_lit\@
    add     \reg, \reg, pc
    b       .Laddr_end\@
.Laddr_lit\@:
    .word   \sym - .
.Laddr_end\@:
.endm

    .section .text.head, "ax"
    .global _start
_start:
    .rept   8
    mov     r0, r0                  // the zImage's NOPs
    .endr
    b       primary_entry           // 0x20
    .word   0x016f2818              // 0x24: zImage magic
    .word   0                       // 0x28: start: position independent
    .word   0                       // 0x2c: end (image size): written by xtask from the ELF
    .word   0x04030201              // 0x30: little-endian

primary_entry:
    mov     r4, r2                  // device tree
    adr     r5, _start              // where the loader put us (linked at 0)

    ADDR    r0, __rel_start
    ADDR    r1, __rel_end
1:  cmp     r0, r1
    bhs     3f
    ldm     r0!, {{r2, r3}}         // r_offset, r_info
    and     r3, r3, #0xff
    cmp     r3, #{r_arm_relative}
    bne     park
    ldr     r6, [r2, r5]
    add     r6, r6, r5
    str     r6, [r2, r5]
    b       1b

3:  ADDR    r0, __bss_start
    ADDR    r1, __bss_end
    mov     r2, #0
4:  cmp     r0, r1
    strlo   r2, [r0], #4
    blo     4b

    ADDR    sp, BOOT_STACK
    add     sp, sp, #{stack_size}
    mrs     r1, cpsr
    and     r0, r1, #0x1f
    cmp     r0, #{mode_hyp}
    movne   r0, r4
    blne    wrong_mode              // says so on the console if it can; never returns

    ldr     r0, ={hsctlr}
    mcr     p15, 4, r0, c1, c0, 0   // HSCTLR: MMU and caches off
    ldr     r0, ={hcptr}
    mcr     p15, 4, r0, c1, c1, 2   // HCPTR
    ADDR    r0, hyp_vectors
    mcr     p15, 4, r0, c12, c0, 0  // HVBAR
    isb
    mov     r0, r4
    mov     r1, r5
    bl      primary_main
    b       park

    // A CPU started through PSCI CPU_ON enters here in HYP mode, its MMU off, with
    // r0 = context_id = its `cpus::Boot`.
    .section .text, "ax"
    .balign 4
    .global secondary_entry
secondary_entry:
    ldr     r1, ={hsctlr}
    mcr     p15, 4, r1, c1, c0, 0   // HSCTLR
    ldr     r1, ={hcptr}
    mcr     p15, 4, r1, c1, c1, 2   // HCPTR
    isb
    // Turn the MMU on before touching the stack: the boot CPU wrote `SecondaryBoot` and
    // cleaned it to the point of coherency; the stack may still have lines in the caches.
    ldr     r1, [r0, #{hmair0}]
    mcr     p15, 4, r1, c10, c2, 0  // HMAIR0
    mov     r1, #0
    mcr     p15, 4, r1, c10, c2, 1  // HMAIR1
    ldr     r1, [r0, #{htcr}]
    mcr     p15, 4, r1, c2, c0, 2   // HTCR
    ldr     r1, [r0, #{httbr}]
    ldr     r2, [r0, #{httbr} + 4]
    mcrr    p15, 4, r1, r2, c2      // HTTBR
    isb
    mcr     p15, 4, r1, c8, c7, 0   // TLBIALLH
    dsb     ish
    mcr     p15, 0, r1, c7, c5, 0   // ICIALLU
    dsb     ish
    isb
    ldr     r1, [r0, #{hsctlr_offset}]
    mcr     p15, 4, r1, c1, c0, 0   // HSCTLR: MMU and caches on
    isb
    ldr     sp, [r0, #{stack_top}]
    ADDR    r1, hyp_vectors
    mcr     p15, 4, r1, c12, c0, 0  // HVBAR
    isb
    bl      secondary_main

    // A CPU the board released with no argument enters here, its MMU off: Versatile
    // Express's firmware sends every CPU it wakes to the one address in SYS_FLAGS. It must
    // be in HYP mode, as the boot CPU was; then it waits for an entry of the pen
    // (hyp_arch_arm::cpus::Pen, read from memory) with its own MPIDR and a boot address,
    // and goes on as secondary_entry with that address.
    .global pen_entry
pen_entry:
    mrs     r0, cpsr
    and     r1, r0, #0x1f
    cmp     r1, #{mode_hyp}
    bne     3f
    ldr     r1, ={hsctlr}
    mcr     p15, 4, r1, c1, c0, 0   // HSCTLR: MMU and caches off, the pen read from memory
    isb
    mrc     p15, 0, r1, c0, c0, 5   // MPIDR
    ldr     r2, ={affinity}
    and     r1, r1, r2
1:  ADDR    r2, {pen}
    mov     r3, #{max_cpus}
2:  ldr     r0, [r2, #{pen_boot}]   // the boot address first: written after the MPIDR
    cmp     r0, #0
    beq     4f
    ldr     r4, [r2, #{pen_mpidr}]
    cmp     r4, r1
    beq     secondary_entry         // r0 = its `cpus::Boot`
4:  add     r2, r2, #{pen_entry_size}
    subs    r3, r3, #1
    bne     2b
    wfe                             // the boot CPU sends an event after each entry
    b       1b
    // Not in HYP mode: its CPSR where the boot CPU looks when it waits in vain, then stop.
3:  ADDR    r1, {pen}
    add     r1, r1, #{pen_refusal}
    str     r0, [r1]
    dsb     sy
    b       park

    .global park
park:
    wfe
    b       park
"#,
    r_arm_relative = const R_ARM_RELATIVE,
    stack_size = const BOOT_STACK_SIZE,
    mode_hyp = const MODE_HYP,
    hsctlr = const HSCTLR_RES1,
    hcptr = const HCPTR_VALUE,
    stack_top = const core::mem::offset_of!(crate::cpus::Boot, stack_top),
    hmair0 = const core::mem::offset_of!(crate::cpus::Boot, mmu.hmair0),
    htcr = const core::mem::offset_of!(crate::cpus::Boot, mmu.htcr),
    httbr = const core::mem::offset_of!(crate::cpus::Boot, mmu.httbr),
    hsctlr_offset = const core::mem::offset_of!(crate::cpus::Boot, mmu.hsctlr),
    pen = sym crate::cpus::PEN,
    affinity = const hyp_arch_arm::cpus::MPIDR_AFFINITY_MASK as u32,
    max_cpus = const hyp_core::platform::MAX_CPUS,
    pen_boot = const hyp_arch_arm::cpus::Pen::ENTRY_BOOT,
    pen_mpidr = const hyp_arch_arm::cpus::Pen::ENTRY_MPIDR,
    pen_entry_size = const hyp_arch_arm::cpus::Pen::ENTRY_SIZE,
    pen_refusal = const hyp_arch_arm::cpus::Pen::REFUSAL,
);

extern "C" {
    pub fn secondary_entry();
    pub fn pen_entry();
}
