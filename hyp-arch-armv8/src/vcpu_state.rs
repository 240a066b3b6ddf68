//! What a vCPU leaves in its physical CPU when another vCPU takes the CPU (only where vCPUs
//! share a CPU; a pinned vCPU's state simply stays in its CPU): the EL1 system registers,
//! the FP/SIMD registers, the virtual timer and the GIC virtual CPU interface's control and
//! active-priority registers (the list registers go back into the vGIC with `put`).
//!
//! The register list follows what an EL1 guest can change without trapping (ARM ARM D24,
//! the EL1 and EL0 registers; with HCR_EL2 and MDCR_EL2 as `vm.rs` sets them, ACTLR, the ID
//! registers, the PMU, the debug registers and the EL1 physical timer trap, so they are not
//! here: the debug registers travel as the vCPU's software copy).
//!
//! The same state, at its reset values (`SavedVcpu::at_reset`), is what a vCPU starts from
//! on every fresh start (its first, PSCI CPU_ON, SYSTEM_RESET, a console restart): nothing
//! another vCPU left in the CPU reaches it.

use core::arch::{asm, global_asm};

use hyp_core::coprocessor::RegisterPart;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::image::ExecutionState;
use hyp_core::set_way::SetWayState;
use hyp_core::sysreg::VmControlRegister;

use crate::ich::ListRegisterFile;
use hyp_arch_arm::InterfaceState;

/// The EL1/EL0 system registers of a vCPU, in the order `save_el1`/`restore_el1` use.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct El1Registers {
    sctlr: u64,
    cpacr: u64,
    ttbr0: u64,
    ttbr1: u64,
    tcr: u64,
    esr: u64,
    afsr0: u64,
    afsr1: u64,
    far: u64,
    mair: u64,
    vbar: u64,
    contextidr: u64,
    amair: u64,
    cntkctl: u64,
    par: u64,
    tpidr_el1: u64,
    sp_el1: u64,
    elr: u64,
    spsr: u64,
    tpidr_el0: u64,
    tpidrro_el0: u64,
    sp_el0: u64,
    csselr: u64,
    // What only an AArch32 EL1 uses, kept in EL2 registers: the SPSRs of its Abort,
    // Undefined, IRQ and FIQ modes (its Supervisor SPSR is SPSR_EL1), DACR, IFSR, FPEXC.
    spsr_abt: u64,
    spsr_und: u64,
    spsr_irq: u64,
    spsr_fiq: u64,
    dacr32: u64,
    ifsr32: u64,
    fpexc32: u64,
}

/// The FP/SIMD registers: V0-V31, then FPCR and FPSR.
#[derive(Clone, Copy, Default, Debug)]
#[repr(C, align(16))]
pub struct FpRegisters {
    v: [u128; 32],
    fpcr: u64,
    fpsr: u64,
}

/// Everything a switched-out vCPU needs back.
#[derive(Clone, Copy, Default, Debug)]
pub struct SavedVcpu {
    pub el1: El1Registers,
    pub fp: FpRegisters,
    pub cntv_ctl: u64,
    pub cntv_cval: u64,
    pub gic: InterfaceState,
    /// Its debug registers (the guest's accesses trap into this copy).
    pub debug: DebugRegisters,
    /// Its set/way emulation (whether its control registers trap, a clean under way).
    pub set_way: SetWayState,
}

/// SCTLR_EL1 at reset with the MMU and caches off: its RES1 bits only (ARMv8.0; booting.rst
/// asks for the MMU and data cache off).
const SCTLR_EL1_RESET: u64 = 0x30d0_0800;
/// SCTLR of an AArch32 EL1 at reset, MMU and caches off: as a Cortex-A15 resets (0x00c50078:
/// the RES1 bits, CP15BEN, nTWE, nTWI), with bit 11, RES1 on ARMv8 (ARM ARM G8, SCTLR). AArch64's value would
/// set AFE and UWXN, which change what the guest's first page tables mean.
const SCTLR_AARCH32_RESET: u64 = 0x00c5_0878;

impl SavedVcpu {
    /// A vCPU as it starts: every EL1 and EL0 register, the FP/SIMD registers, FPCR and
    /// FPSR, the virtual timer, the GIC virtual CPU interface and the debug registers at
    /// zero, but SCTLR_EL1's RES1 bits (ARM ARM D1.9, "Reset": what the architecture leaves
    /// UNKNOWN is zero here, so no earlier context shows through).
    pub fn at_reset(state: ExecutionState) -> SavedVcpu {
        let sctlr = match state {
            ExecutionState::Aarch64 => SCTLR_EL1_RESET,
            ExecutionState::Aarch32 => SCTLR_AARCH32_RESET,
        };
        SavedVcpu { el1: El1Registers { sctlr, ..El1Registers::default() }, ..SavedVcpu::default() }
    }
}

global_asm!(
    r#"
    .arch_extension fp
    .arch_extension simd
    // q0..q31 in pairs at [x0] on (`pair` is stp or ldp): FpRegisters' `v`.
.macro Q0_TO_Q31 pair
    \pair   q0, q1, [x0, #0]
    \pair   q2, q3, [x0, #32]
    \pair   q4, q5, [x0, #64]
    \pair   q6, q7, [x0, #96]
    \pair   q8, q9, [x0, #128]
    \pair   q10, q11, [x0, #160]
    \pair   q12, q13, [x0, #192]
    \pair   q14, q15, [x0, #224]
    \pair   q16, q17, [x0, #256]
    \pair   q18, q19, [x0, #288]
    \pair   q20, q21, [x0, #320]
    \pair   q22, q23, [x0, #352]
    \pair   q24, q25, [x0, #384]
    \pair   q26, q27, [x0, #416]
    \pair   q28, q29, [x0, #448]
    \pair   q30, q31, [x0, #480]
.endm

    // void save_fp(FpRegisters *to)
    .section .text, "ax"
    .global save_fp
save_fp:
    Q0_TO_Q31 stp
    mrs     x1, fpcr
    mrs     x2, fpsr
    add     x0, x0, #512
    stp     x1, x2, [x0]
    ret

    // void restore_fp(const FpRegisters *from)
    .global restore_fp
restore_fp:
    Q0_TO_Q31 ldp
    add     x0, x0, #512
    ldp     x1, x2, [x0]
    msr     fpcr, x1
    msr     fpsr, x2
    ret
"#
);

extern "C" {
    fn save_fp(to: *mut FpRegisters);
    fn restore_fp(from: *const FpRegisters);
}

const _: () = assert!(core::mem::offset_of!(FpRegisters, fpcr) == 512);

macro_rules! el1_registers {
    ($m:ident) => {
        $m!(
            sctlr "sctlr_el1", cpacr "cpacr_el1", ttbr0 "ttbr0_el1", ttbr1 "ttbr1_el1", tcr "tcr_el1",
            esr "esr_el1", afsr0 "afsr0_el1", afsr1 "afsr1_el1", far "far_el1", mair "mair_el1",
            vbar "vbar_el1", contextidr "contextidr_el1", amair "amair_el1", cntkctl "cntkctl_el1",
            par "par_el1", tpidr_el1 "tpidr_el1", sp_el1 "sp_el1", elr "elr_el1", spsr "spsr_el1",
            tpidr_el0 "tpidr_el0", tpidrro_el0 "tpidrro_el0", sp_el0 "sp_el0",
            csselr "csselr_el1", spsr_abt "spsr_abt", spsr_und "spsr_und", spsr_irq "spsr_irq",
            spsr_fiq "spsr_fiq", dacr32 "dacr32_el2", ifsr32 "ifsr32_el2", fpexc32 "fpexc32_el2"
        )
    };
}

/// Takes the running vCPU's state out of this CPU (the CPU's FP/SIMD registers and EL1
/// registers stay as they are; the virtual timer is stopped so it cannot fire for the next
/// vCPU). `debug` is its debug registers' copy.
pub fn save(lrs: ListRegisterFile, debug: DebugRegisters) -> SavedVcpu {
    let mut el1 = El1Registers::default();
    macro_rules! read_all {
        ($($field:ident $reg:literal),*) => {
            // SAFETY: reading EL1 registers from EL2 has no side effect.
            $( unsafe { asm!(concat!("mrs {}, ", $reg), out(reg) el1.$field, options(nomem, nostack)) }; )*
        };
    }
    el1_registers!(read_all);
    let mut saved = SavedVcpu { el1, gic: lrs.save_interface(), debug, ..SavedVcpu::default() };
    // SAFETY: stores the FP/SIMD registers into `saved.fp`, 16-byte aligned (repr(align(16))).
    unsafe { save_fp(&mut saved.fp) };
    // SAFETY: reading and stopping the guest's virtual timer; this vCPU is leaving the CPU.
    unsafe {
        asm!(
            "mrs {ctl}, cntv_ctl_el0",
            "mrs {cval}, cntv_cval_el0",
            "msr cntv_ctl_el0, xzr",
            "isb",
            ctl = out(reg) saved.cntv_ctl,
            cval = out(reg) saved.cntv_cval,
            options(nostack)
        )
    };
    saved
}

/// Puts a vCPU's state back into this CPU before it runs again here (or for the first time,
/// from `SavedVcpu::at_reset`). The debug registers are not among them: the run loop loads
/// them only if the vCPU has debug on (`debug_hw`).
pub fn restore(saved: &SavedVcpu, lrs: ListRegisterFile) {
    macro_rules! write_all {
        ($($field:ident $reg:literal),*) => {
            // SAFETY: the registers of the vCPU about to run on this CPU, as it left them.
            $( unsafe { asm!(concat!("msr ", $reg, ", {}"), in(reg) saved.el1.$field, options(nostack)) }; )*
        };
    }
    el1_registers!(write_all);
    // SAFETY: loads this vCPU's own FP/SIMD registers from an aligned, initialised struct.
    unsafe { restore_fp(&saved.fp) };
    lrs.restore_interface(&saved.gic);
    // SAFETY: the vCPU's own timer, compare value first so it cannot fire early. CLREX:
    // the local exclusive monitor is the CPU's, not the vCPU's: a load-exclusive the previous
    // vCPU left open must not let this vCPU's store-exclusive succeed (ARM ARM B2.9, "context
    // switching": software clears the monitor when it switches contexts).
    unsafe {
        asm!(
            "clrex",
            "msr cntv_cval_el0, {cval}",
            "msr cntv_ctl_el0, {ctl}",
            "isb",
            cval = in(reg) saved.cntv_cval,
            ctl = in(reg) saved.cntv_ctl,
            options(nostack)
        )
    };
}

/// A guest's write to one of its VM control registers, trapped by HCR_EL2.TVM, carried out:
/// `value` into `part` of it (an AArch32 guest's register may be half of one).
pub fn write_control_register(register: VmControlRegister, part: RegisterPart, value: u64) {
    macro_rules! write {
        ($reg:literal) => {{
            let mut old = 0u64;
            if part != RegisterPart::Whole {
                // SAFETY: reading an EL1 register of the vCPU running here has no side effect.
                unsafe { asm!(concat!("mrs {}, ", $reg), out(reg) old, options(nomem, nostack)) };
            }
            // SAFETY: an EL1 register of the vCPU running on this CPU, written as the guest
            // asked; HCR_EL2.TVM only made the write trap.
            unsafe { asm!(concat!("msr ", $reg, ", {}"), in(reg) part.merge(old, value), options(nostack)) }
        }};
    }
    match register {
        VmControlRegister::Sctlr => write!("sctlr_el1"),
        VmControlRegister::Ttbr0 => write!("ttbr0_el1"),
        VmControlRegister::Ttbr1 => write!("ttbr1_el1"),
        VmControlRegister::Tcr => write!("tcr_el1"),
        VmControlRegister::Afsr0 => write!("afsr0_el1"),
        VmControlRegister::Afsr1 => write!("afsr1_el1"),
        VmControlRegister::Esr => write!("esr_el1"),
        VmControlRegister::Far => write!("far_el1"),
        VmControlRegister::Mair => write!("mair_el1"),
        VmControlRegister::Amair => write!("amair_el1"),
        VmControlRegister::Contextidr => write!("contextidr_el1"),
        VmControlRegister::Dacr => write!("dacr32_el2"),
        VmControlRegister::Ifsr => write!("ifsr32_el2"),
    }
}
