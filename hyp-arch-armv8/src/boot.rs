//! Entry from the loader: the arm64 Image header, self-relocation, BSS, the boot stack, and
//! the entry of the other CPUs, started through PSCI CPU_ON or released from a spin table.
//!
//! The loader enters at EL2 with the MMU and data cache off and x0 = the device tree
//! (Documentation/arch/arm64/booting.rst). The image is linked at 0 as a PIE; applying its
//! R_AARCH64_RELATIVE relocations for the load address makes it run wherever it was put.

use core::arch::global_asm;

/// Boot-CPU stack; other CPUs get theirs from `hyp_arch_arm::cpus::CpuStarts`.
pub const BOOT_STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(16))]
pub struct Stack(pub [u8; BOOT_STACK_SIZE]);

#[no_mangle]
pub static mut BOOT_STACK: Stack = Stack([0; BOOT_STACK_SIZE]);

// CPTR_EL2 (ARM ARM D24.2.33, HCR_EL2.E2H == 0): RES1 bits [13:12] and [9:0] (TZ traps SVE),
// TTA (bit 20) traps trace registers, TAM (bit 30) the activity monitors, whose counters
// run across VMs (RES0 without FEAT_AMUv1, where it changes nothing; KVM sets it on every
// CPU), TFP (bit 10) clear so guests can use FP/SIMD (the hypervisor is built soft-float
// and never does: docs/boot.md).
// SCTLR_EL2 with the MMU and caches off: only the RES1 bits (D24.2.175, E2H == 0).
global_asm!(
    r#"
    .section .text.head, "ax"
    .global _start
_start:
    b       primary_entry           // code0
    .long   0                       // code1
    .quad   0                       // text_offset
    .quad   0                       // image_size: written by xtask from the ELF
    .quad   0xa                     // flags: little-endian, 4 KiB pages, anywhere in RAM
    .quad   0, 0, 0                 // res2..res4
    .ascii  "ARM\x64"               // magic
    .long   0                       // res5

primary_entry:
    mov     x19, x0                 // device tree
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    not_at_el2

    ldr     x1, =0x30c50830
    msr     sctlr_el2, x1
    ldr     x1, =0x401033ff
    msr     cptr_el2, x1
    isb

    adr     x20, _start             // where the loader put us (linked at 0)
    adrp    x2, __rela_start
    add     x2, x2, :lo12:__rela_start
    adrp    x3, __rela_end
    add     x3, x3, :lo12:__rela_end
1:  cmp     x2, x3
    b.hs    3f
    ldp     x4, x5, [x2], #16       // r_offset, r_info
    ldr     x6, [x2], #8            // r_addend
    cmp     w5, #1027               // R_AARCH64_RELATIVE, the only kind a static PIE has
    b.ne    bad_relocation
    add     x6, x6, x20
    str     x6, [x4, x20]
    b       1b

3:  adrp    x2, __bss_start
    add     x2, x2, :lo12:__bss_start
    adrp    x3, __bss_end
    add     x3, x3, :lo12:__bss_end
4:  cmp     x2, x3
    b.hs    5f
    stp     xzr, xzr, [x2], #16
    b       4b

5:  adrp    x2, BOOT_STACK
    add     x2, x2, :lo12:BOOT_STACK
    add     x2, x2, #{stack_size}
    mov     sp, x2
    adrp    x2, hyp_vectors
    add     x2, x2, :lo12:hyp_vectors
    msr     vbar_el2, x2
    isb
    mov     x0, x19
    mov     x1, x20
    bl      primary_main
    b       park

not_at_el2:
bad_relocation:
park:
    wfe
    b       park

    // Other CPUs, from PSCI CPU_ON: x0 = context_id = this CPU's `cpus::Boot`.
    .section .text, "ax"
    .global secondary_entry
    .balign 4
secondary_entry:
    ldr     x1, =0x30c50830
    msr     sctlr_el2, x1
    ldr     x1, =0x401033ff
    msr     cptr_el2, x1
    isb
    // Turn the MMU on before touching the stack: the boot CPU wrote `cpus::Boot` and
    // cleaned it to the point of coherency; the stack may still have lines in the caches.
    ldp     x1, x2, [x0, #8]        // MAIR, TCR
    ldp     x3, x4, [x0, #24]       // TTBR0, SCTLR
    msr     mair_el2, x1
    msr     tcr_el2, x2
    msr     ttbr0_el2, x3
    isb
    tlbi    alle2
    dsb     ish
    ic      iallu
    dsb     ish
    isb
    msr     sctlr_el2, x4
    isb
    ldr     x1, [x0]                // stack top
    mov     sp, x1
    adrp    x2, hyp_vectors
    add     x2, x2, :lo12:hyp_vectors
    msr     vbar_el2, x2
    isb
    bl      secondary_main
    b       park

    // Other CPUs, released from a spin table with nothing in x0: find this CPU's `cpus::Boot`
    // in SPIN_TABLE_CPUS by MPIDR, then go CPU_ON's way (hyp-arch-arm/src/spin_table.rs).
    .global spin_table_entry
    .balign 4
spin_table_entry:
    mrs     x1, mpidr_el1
    ldr     x2, ={affinity}
    and     x1, x1, x2
    adrp    x3, SPIN_TABLE_CPUS
    add     x3, x3, :lo12:SPIN_TABLE_CPUS
    mov     x4, #{max_cpus}
6:  cbz     x4, park                // not released by the boot CPU: nothing to run
    sub     x4, x4, #1
    ldp     x5, x0, [x3], #16       // mpidr, boot
    cmp     x5, x1
    b.ne    6b
    cbz     x0, park
    b       secondary_entry
"#,
    stack_size = const BOOT_STACK_SIZE,
    affinity = const hyp_arch_arm::cpus::MPIDR_AFFINITY_MASK,
    max_cpus = const hyp_core::platform::MAX_CPUS,
);

// The offsets `secondary_entry` reads `cpus::Boot` at.
const _: () = assert!(core::mem::offset_of!(crate::cpus::Boot, stack_top) == 0);
const _: () = assert!(core::mem::offset_of!(crate::cpus::Boot, mmu) == 8);

extern "C" {
    pub fn secondary_entry();
    pub fn spin_table_entry();
}
