//! The CP15 and CP14 registers the guests read and write, one function each, by their
//! encodings (ARM ARM B3.17, B4.1; the debug registers C11.10; the generic timer B8.2).
//! Under the hypervisor some of these trap and are emulated (`hyp_core::coprocessor`); the
//! guests check what they read.

use core::arch::asm;

/// A function reading the register MRC `$encoding` names ("p15, opc1, {}, CRn, CRm, opc2").
macro_rules! read_register {
    ($(#[$doc:meta])* $name:ident, $encoding:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            let v: u32;
            // SAFETY: a register PL1 may read (the hypervisor traps some and answers them);
            // reading it changes no state the program relies on.
            unsafe { asm!(concat!("mrc ", $encoding), out(reg) v, options(nomem, nostack, preserves_flags)) };
            v
        }
    };
}

/// A function writing the register MCR `$encoding` names.
macro_rules! write_register {
    ($(#[$doc:meta])* $name:ident, $encoding:literal) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(v: u32) {
            // SAFETY: a register PL1 may write, whose effect the caller asks for and no
            // memory the program uses depends on; the ISB makes it take effect.
            unsafe { asm!(concat!("mcr ", $encoding), "isb", in(reg) v, options(nostack, preserves_flags)) };
        }
    };
}

read_register!(/// MIDR (VPIDR under the hypervisor): PartNum [15:4] names the core.
    midr, "p15, 0, {}, c0, c0, 0");
read_register!(/// MPIDR: Aff0 [7:0] is the vCPU.
    mpidr, "p15, 0, {}, c0, c0, 5");
read_register!(/// ID_PFR0.
    id_pfr0, "p15, 0, {}, c0, c1, 0");

/// Whether the CPU implements ThumbEE (ID_PFR0.State3): a Cortex-A15 does, ARMv8 does not.
pub fn has_thumbee() -> bool {
    (id_pfr0() >> 12) & 0xf != 0
}

/// TEECR and TEEHBR, the ThumbEE registers (CP14; only where `has_thumbee`).
pub fn thumbee() -> (u32, u32) {
    let (teecr, teehbr): (u32, u32);
    // SAFETY: reading the ThumbEE registers has no side effect; the caller checked the CPU
    // implements them.
    unsafe {
        core::arch::asm!("mrc p14, 6, {}, c0, c0, 0", "mrc p14, 6, {}, c1, c0, 0", out(reg) teecr, out(reg) teehbr,
            options(nomem, nostack))
    };
    (teecr, teehbr)
}
read_register!(/// ID_PFR1: Virtualization [15:12], GIC [31:28] (the GICv3 system registers).
    id_pfr1, "p15, 0, {}, c0, c1, 1");
read_register!(/// ID_DFR0: CopDbg [3:0], the debug architecture.
    id_dfr0, "p15, 0, {}, c0, c1, 2");
read_register!(/// SCTLR: M [0] the MMU, V [13] the high vectors.
    sctlr, "p15, 0, {}, c1, c0, 0");
read_register!(/// ACTLR (IMPLEMENTATION DEFINED; RAZ/WI for guests).
    actlr, "p15, 0, {}, c1, c0, 1");
write_register!(/// ACTLR.
    set_actlr, "p15, 0, {}, c1, c0, 1");
read_register!(/// CPACR: cp10 [21:20] and cp11 [23:22], the floating-point and Advanced SIMD access.
    cpacr, "p15, 0, {}, c1, c0, 2");
write_register!(/// CPACR.
    set_cpacr, "p15, 0, {}, c1, c0, 2");
read_register!(/// DFSR.
    dfsr, "p15, 0, {}, c5, c0, 0");
read_register!(/// IFSR.
    ifsr, "p15, 0, {}, c5, c0, 1");
read_register!(/// DFAR.
    dfar, "p15, 0, {}, c6, c0, 0");
read_register!(/// IFAR.
    ifar, "p15, 0, {}, c6, c0, 2");
read_register!(/// VBAR.
    vbar, "p15, 0, {}, c12, c0, 0");
write_register!(/// VBAR.
    set_vbar, "p15, 0, {}, c12, c0, 0");
write_register!(/// DCCISW: clean and invalidate a data cache line by set/way (trapped: HCR.TSW).
    dccisw, "p15, 0, {}, c7, c14, 2");
read_register!(/// DBGDIDR, the debug ID register (CP14).
    dbgdidr, "p14, 0, {}, c0, c0, 0");
read_register!(/// CNTFRQ.
    cntfrq, "p15, 0, {}, c14, c0, 0");
write_register!(/// CNTV_CTL: ENABLE [0], IMASK [1].
    set_cntv_ctl, "p15, 0, {}, c14, c3, 1");

/// CNTV_CVAL, the virtual timer's compare value (MCRR p15, 3, c14).
#[inline(always)]
pub fn set_cntv_cval(v: u64) {
    // SAFETY: this vCPU's virtual timer compare value; the ISB makes it take effect.
    unsafe {
        asm!("mcrr p15, 3, {}, {}, c14", "isb", in(reg) v as u32, in(reg) (v >> 32) as u32,
            options(nostack, preserves_flags))
    };
}

/// MVFR0, the floating-point feature register (VMRS; ID group 3, trapped by HCR.TID3). CPACR
/// must give PL1 access to cp10 and cp11 first.
#[inline(always)]
pub fn mvfr0() -> u32 {
    let v: u32;
    // SAFETY: reads an ID register; no floating-point register or state is touched.
    unsafe { asm!(".fpu vfpv3", "vmrs {}, mvfr0", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}
