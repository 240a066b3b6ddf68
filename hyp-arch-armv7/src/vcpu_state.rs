//! What a vCPU leaves in its physical CPU when another vCPU takes the CPU (only where vCPUs
//! share a CPU; a pinned vCPU's state simply stays in its CPU): the banked registers of the
//! guest's modes, its PL1 CP15 registers, its VFP and Advanced SIMD registers, its virtual
//! timer and the GIC virtual CPU interface's control and active-priority registers (the list
//! registers go back into the vGIC with `put`).
//!
//! The CP15 list is what a PL1 guest can change without trapping (ARM ARM B4.1, with HCR,
//! HSTR, HCPTR and HDCR as vm.rs sets them: ACTLR, the implementation-defined registers, the
//! PMU, the debug registers and the physical timer trap, so they are not here).
//!
//! The same state, at its reset values (`SavedVcpu::at_reset`), is what a vCPU starts from
//! on every fresh start: nothing another vCPU left in the CPU reaches it.

use core::arch::{asm, global_asm};

use aarch32_cpu::register::{CntvCtl, CntvCval};
use hyp_core::coprocessor::RegisterPart;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::set_way::SetWayState;
use hyp_core::sysreg::VmControlRegister;

use crate::gic::ListRegisterFile;
use crate::guest_regs::{read_banked, write_banked};
use hyp_arch_arm::InterfaceState;

/// The banked registers of the guest's modes: SP_usr; SP, LR and SPSR of SVC, ABT, UND, IRQ
/// and FIQ; r8-r12 of FIQ mode.
#[derive(Clone, Copy, Default, Debug)]
pub struct Banked {
    sp_usr: u32,
    svc: [u32; 3],
    abt: [u32; 3],
    und: [u32; 3],
    irq: [u32; 3],
    fiq: [u32; 3],
    fiq_high: [u32; 5],
}

/// The guest's PL1 and PL0 CP15 registers (32-bit ones; the 64-bit TTBRs and PAR apart).
#[derive(Clone, Copy, Default, Debug)]
pub struct Cp15 {
    regs: [u32; CP15_COUNT],
    ttbr0: u64,
    ttbr1: u64,
    par: u64,
}

/// The ThumbEE registers (ARM DDI 0406C, the Thumb Execution Environment: TEECR and
/// TEEHBR), which PL1 and, unless TEECR.XED, PL0 read and write without a trap: a
/// Cortex-A15 implements them (ID_PFR0.State3), so another VM's values would show through
/// if they were not switched. Zero where the CPU has no ThumbEE (ARMv8 has none).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThumbEe {
    teecr: u32,
    teehbr: u32,
}

/// Whether this CPU implements ThumbEE (ID_PFR0.State3): without it, TEECR and TEEHBR are
/// UNDEFINED even in HYP mode.
fn has_thumbee() -> bool {
    let id_pfr0: u32;
    // SAFETY: reading an ID register has no side effect.
    unsafe { asm!("mrc p15, 0, {}, c0, c1, 0", out(reg) id_pfr0, options(nomem, nostack)) };
    (id_pfr0 >> 12) & 0xf != 0
}

fn save_thumbee() -> ThumbEe {
    let mut t = ThumbEe::default();
    if has_thumbee() {
        // SAFETY: the guest's ThumbEE registers, which this CPU implements; reading them has
        // no side effect.
        unsafe {
            asm!("mrc p14, 6, {}, c0, c0, 0", "mrc p14, 6, {}, c1, c0, 0", out(reg) t.teecr, out(reg) t.teehbr,
                options(nomem, nostack))
        };
    }
    t
}

fn restore_thumbee(t: &ThumbEe) {
    if has_thumbee() {
        // SAFETY: the ThumbEE registers of the vCPU about to run on this CPU, as it left them.
        unsafe {
            asm!("mcr p14, 6, {}, c0, c0, 0", "mcr p14, 6, {}, c1, c0, 0", in(reg) t.teecr, in(reg) t.teehbr,
                options(nostack))
        };
    }
}

/// VFP and Advanced SIMD: D0-D31, FPSCR, FPEXC.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(8))]
pub struct FpRegisters {
    d: [u64; 32],
    fpscr: u32,
    fpexc: u32,
}

/// Everything a switched-out vCPU needs back.
#[derive(Clone, Copy, Default, Debug)]
pub struct SavedVcpu {
    pub banked: Banked,
    pub cp15: Cp15,
    pub thumbee: ThumbEe,
    pub fp: FpRegisters,
    pub cntv_ctl: u32,
    pub cntv_cval: u64,
    pub gic: InterfaceState,
    /// Its debug registers (the guest's accesses trap into this copy).
    pub debug: DebugRegisters,
    /// Its set/way emulation (whether its control registers trap, a clean under way).
    pub set_way: SetWayState,
}

/// SCTLR at reset with the MMU and caches off (B4.1.130): the bits that read as one on a
/// Cortex-A15 (RES1 and the defaults of U, the branch predictor and barrier enable).
const SCTLR_RESET: u32 = 0x00c5_0078;

impl SavedVcpu {
    /// A vCPU as it starts: every register zero but SCTLR's reset bits (what the
    /// architecture leaves UNKNOWN is zero here, so no earlier context shows through).
    pub fn at_reset() -> SavedVcpu {
        let mut saved = SavedVcpu::default();
        saved.cp15.regs[0] = SCTLR_RESET;
        saved
    }
}

/// `$m!` over the 32-bit CP15 registers, each `index "op1, Rt, CRn, CRm, op2"`: SCTLR
/// first (index 0, used by `at_reset`).
macro_rules! cp15_registers {
    ($m:ident) => {
        $m!(
            0 "0, {}, c1, c0, 0",    // SCTLR
            1 "0, {}, c1, c0, 2",    // CPACR
            2 "0, {}, c2, c0, 2",    // TTBCR
            3 "0, {}, c3, c0, 0",    // DACR
            4 "0, {}, c5, c0, 0",    // DFSR
            5 "0, {}, c5, c0, 1",    // IFSR
            6 "0, {}, c5, c1, 0",    // ADFSR
            7 "0, {}, c5, c1, 1",    // AIFSR
            8 "0, {}, c6, c0, 0",    // DFAR
            9 "0, {}, c6, c0, 2",    // IFAR
            10 "0, {}, c10, c2, 0",  // PRRR / MAIR0
            11 "0, {}, c10, c2, 1",  // NMRR / MAIR1
            12 "0, {}, c10, c3, 0",  // AMAIR0
            13 "0, {}, c10, c3, 1",  // AMAIR1
            14 "0, {}, c12, c0, 0",  // VBAR
            15 "0, {}, c13, c0, 1",  // CONTEXTIDR
            16 "0, {}, c13, c0, 2",  // TPIDRURW
            17 "0, {}, c13, c0, 3",  // TPIDRURO
            18 "0, {}, c13, c0, 4",  // TPIDRPRW
            19 "0, {}, c14, c1, 0",  // CNTKCTL
            20 "2, {}, c0, c0, 0"    // CSSELR
        )
    };
}
const CP15_COUNT: usize = 21;

global_asm!(
    r#"
    .arm
    .fpu    neon-vfpv4
    // void save_fp(FpRegisters *to): FPEXC.EN set for the time of the copy (the guest's
    // own FPEXC is saved as it was).
    .section .text, "ax"
    .global save_fp
    .balign 4
save_fp:
    vmrs    r2, fpexc
    orr     r1, r2, #(1 << 30)
    vmsr    fpexc, r1
    vstmia  r0!, {{d0-d15}}
    vstmia  r0!, {{d16-d31}}
    vmrs    r1, fpscr
    stm     r0, {{r1, r2}}
    bx      lr

    // void restore_fp(const FpRegisters *from)
    .global restore_fp
    .balign 4
restore_fp:
    vmrs    r1, fpexc
    orr     r1, r1, #(1 << 30)
    vmsr    fpexc, r1
    vldmia  r0!, {{d0-d15}}
    vldmia  r0!, {{d16-d31}}
    ldm     r0, {{r1, r2}}
    vmsr    fpscr, r1
    vmsr    fpexc, r2
    bx      lr
"#
);

extern "C" {
    fn save_fp(to: *mut FpRegisters);
    fn restore_fp(from: *const FpRegisters);
}

const _: () = assert!(core::mem::offset_of!(FpRegisters, fpscr) == 256);
const _: () = assert!(core::mem::offset_of!(FpRegisters, fpexc) == 260);

fn save_banked() -> Banked {
    Banked {
        sp_usr: read_banked!("sp_usr"),
        svc: [read_banked!("sp_svc"), read_banked!("lr_svc"), read_banked!("spsr_svc")],
        abt: [read_banked!("sp_abt"), read_banked!("lr_abt"), read_banked!("spsr_abt")],
        und: [read_banked!("sp_und"), read_banked!("lr_und"), read_banked!("spsr_und")],
        irq: [read_banked!("sp_irq"), read_banked!("lr_irq"), read_banked!("spsr_irq")],
        fiq: [read_banked!("sp_fiq"), read_banked!("lr_fiq"), read_banked!("spsr_fiq")],
        fiq_high: [
            read_banked!("r8_fiq"),
            read_banked!("r9_fiq"),
            read_banked!("r10_fiq"),
            read_banked!("r11_fiq"),
            read_banked!("r12_fiq"),
        ],
    }
}

fn restore_banked(b: &Banked) {
    write_banked!("sp_usr", b.sp_usr);
    let [sp, lr, spsr] = b.svc;
    write_banked!("sp_svc", sp);
    write_banked!("lr_svc", lr);
    write_banked!("spsr_svc", spsr);
    let [sp, lr, spsr] = b.abt;
    write_banked!("sp_abt", sp);
    write_banked!("lr_abt", lr);
    write_banked!("spsr_abt", spsr);
    let [sp, lr, spsr] = b.und;
    write_banked!("sp_und", sp);
    write_banked!("lr_und", lr);
    write_banked!("spsr_und", spsr);
    let [sp, lr, spsr] = b.irq;
    write_banked!("sp_irq", sp);
    write_banked!("lr_irq", lr);
    write_banked!("spsr_irq", spsr);
    let [sp, lr, spsr] = b.fiq;
    write_banked!("sp_fiq", sp);
    write_banked!("lr_fiq", lr);
    write_banked!("spsr_fiq", spsr);
    let [r8, r9, r10, r11, r12] = b.fiq_high;
    write_banked!("r8_fiq", r8);
    write_banked!("r9_fiq", r9);
    write_banked!("r10_fiq", r10);
    write_banked!("r11_fiq", r11);
    write_banked!("r12_fiq", r12);
}

/// Reads the 64-bit CP15 register `MRRC p15, $op1, lo, hi, $crm`.
macro_rules! read64 {
    ($op1:literal, $crm:literal) => {{
        let (lo, hi): (u32, u32);
        // SAFETY: reading a PL1 register of the guest from HYP mode has no side effect.
        unsafe {
            asm!(concat!("mrrc p15, ", $op1, ", {}, {}, ", $crm), out(reg) lo, out(reg) hi, options(nomem, nostack))
        };
        (u64::from(hi) << 32) | u64::from(lo)
    }};
}

/// Writes the 64-bit CP15 register `MCRR p15, $op1, lo, hi, $crm`.
macro_rules! write64 {
    ($op1:literal, $crm:literal, $value:expr) => {{
        let v: u64 = $value;
        // SAFETY: a PL1 register of the vCPU on this CPU, as it left it or as it wrote it.
        unsafe {
            asm!(concat!("mcrr p15, ", $op1, ", {}, {}, ", $crm), in(reg) v as u32, in(reg) (v >> 32) as u32,
                options(nostack))
        };
    }};
}

fn save_cp15() -> Cp15 {
    let mut cp15 = Cp15::default();
    macro_rules! read_all {
        ($($i:literal $enc:literal),*) => {
            // SAFETY: reading the guest's PL1 registers from HYP mode has no side effect.
            $( unsafe { asm!(concat!("mrc p15, ", $enc), out(reg) cp15.regs[$i], options(nomem, nostack)) }; )*
        };
    }
    cp15_registers!(read_all);
    cp15.ttbr0 = read64!("0", "c2");
    cp15.ttbr1 = read64!("1", "c2");
    cp15.par = read64!("0", "c7");
    cp15
}

fn restore_cp15(cp15: &Cp15) {
    macro_rules! write_all {
        ($($i:literal $enc:literal),*) => {
            // SAFETY: the PL1 registers of the vCPU about to run on this CPU, as it left them.
            $( unsafe { asm!(concat!("mcr p15, ", $enc), in(reg) cp15.regs[$i], options(nostack)) }; )*
        };
    }
    cp15_registers!(write_all);
    write64!("0", "c2", cp15.ttbr0);
    write64!("1", "c2", cp15.ttbr1);
    write64!("0", "c7", cp15.par);
}

/// Takes the running vCPU's state out of this CPU (its registers stay as they are; the
/// virtual timer is stopped so it cannot fire for the next vCPU). `debug` is its debug
/// registers' copy.
pub fn save(lrs: ListRegisterFile, debug: DebugRegisters) -> SavedVcpu {
    let mut saved = SavedVcpu {
        banked: save_banked(),
        cp15: save_cp15(),
        thumbee: save_thumbee(),
        gic: lrs.save_interface(),
        debug,
        cntv_ctl: CntvCtl::read().raw_value(),
        cntv_cval: CntvCval::read().0,
        ..SavedVcpu::default()
    };
    // SAFETY: stores the VFP registers into `saved.fp`, 8-byte aligned.
    unsafe { save_fp(&mut saved.fp) };
    stop_timer();
    saved
}

/// Stops the guest's virtual timer, so it cannot interrupt the next vCPU or an idle CPU.
pub fn stop_timer() {
    CntvCtl::write(CntvCtl::new_with_raw_value(0));
    aarch32_cpu::asm::isb();
}

/// Puts a vCPU's state back into this CPU before it runs again here (or for the first time,
/// from `SavedVcpu::at_reset`).
pub fn restore(saved: &SavedVcpu, lrs: ListRegisterFile) {
    restore_banked(&saved.banked);
    restore_cp15(&saved.cp15);
    restore_thumbee(&saved.thumbee);
    // SAFETY: loads this vCPU's own VFP registers from an aligned, initialised struct.
    unsafe { restore_fp(&saved.fp) };
    lrs.restore_interface(&saved.gic);
    // The compare value first, so the timer cannot fire early. CLREX: the local exclusive
    // monitor is the CPU's, not the vCPU's (ARM ARM A3.4.5).
    CntvCval::write(CntvCval(saved.cntv_cval));
    CntvCtl::write(CntvCtl::new_with_raw_value(saved.cntv_ctl));
    // SAFETY: a monitor clear and a barrier; no effect on memory.
    unsafe { asm!("clrex", "isb", options(nostack)) };
}

/// A guest's write to one of its VM control registers, trapped by HCR.TVM, carried out:
/// `part` of the register the AArch64 name stands for is the AArch32 register written
/// (hyp_core::coprocessor: FAR's high half is IFAR, MAIR's PRRR and NMRR, TCR's TTBCR and
/// TTBCR2; a whole TTBR is an MCRR).
pub fn write_control_register(register: VmControlRegister, part: RegisterPart, value: u64) {
    use RegisterPart::{High, Low, Whole};
    use VmControlRegister as R;
    let (low, high) = (value as u32, (value >> 32) as u32);
    macro_rules! write {
        ($enc:literal, $v:expr) => {
            // SAFETY: a PL1 register of the vCPU running on this CPU, written as the guest
            // asked; HCR.TVM only made the write trap.
            unsafe { asm!(concat!("mcr p15, ", $enc), in(reg) $v, options(nostack)) }
        };
    }
    match (register, part) {
        (R::Sctlr, _) => write!("0, {}, c1, c0, 0", low),
        (R::Ttbr0, Whole) => write64!("0", "c2", value),
        (R::Ttbr0, _) => write!("0, {}, c2, c0, 0", low),
        (R::Ttbr1, Whole) => write64!("1", "c2", value),
        (R::Ttbr1, _) => write!("0, {}, c2, c0, 1", low),
        (R::Tcr, High) => write!("0, {}, c2, c0, 3", low),
        (R::Tcr, _) => write!("0, {}, c2, c0, 2", low),
        (R::Dacr, _) => write!("0, {}, c3, c0, 0", low),
        (R::Esr, _) => write!("0, {}, c5, c0, 0", low),
        (R::Ifsr, _) => write!("0, {}, c5, c0, 1", low),
        (R::Afsr0, _) => write!("0, {}, c5, c1, 0", low),
        (R::Afsr1, _) => write!("0, {}, c5, c1, 1", low),
        (R::Far, Low) => write!("0, {}, c6, c0, 0", low),
        (R::Far, High) => write!("0, {}, c6, c0, 2", low),
        (R::Far, Whole) => {
            write!("0, {}, c6, c0, 0", low);
            write!("0, {}, c6, c0, 2", high);
        }
        (R::Mair, Low) => write!("0, {}, c10, c2, 0", low),
        (R::Mair, High) => write!("0, {}, c10, c2, 1", low),
        (R::Mair, Whole) => {
            write!("0, {}, c10, c2, 0", low);
            write!("0, {}, c10, c2, 1", high);
        }
        (R::Amair, Low) => write!("0, {}, c10, c3, 0", low),
        (R::Amair, High) => write!("0, {}, c10, c3, 1", low),
        (R::Amair, Whole) => {
            write!("0, {}, c10, c3, 0", low);
            write!("0, {}, c10, c3, 1", high);
        }
        (R::Contextidr, _) => write!("0, {}, c13, c0, 1", low),
    }
}
