//! The GICv3 virtual CPU interface control registers at EL2 (IHI 0069 12.5), which this
//! module owns: list registers, ICH_HCR_EL2, ICH_VTR_EL2, ICH_ELRSR_EL2, ICH_EISR_EL2,
//! ICH_VMCR_EL2 and the first active-priority registers, given to the shared list-register
//! file (`hyp_arch_arm::ListRegisterFile`) as `Ich`. Typed through `aarch64-cpu`, but
//! ICH_ELRSR_EL2 and ICH_EISR_EL2, which it lacks: those by their encodings.

use core::arch::asm;

use aarch64_cpu::asm::barrier::{isb, SY};
use aarch64_cpu::registers::*;
use hyp_arch_arm::ListRegisterAccess;

/// ICH_*_EL2 of this CPU.
pub struct Ich;

/// This CPU's list registers for the vCPU loop: the shared file (a GICv2's GICH frame,
/// memory-mapped) over the GICv3 system registers here.
pub type ListRegisterFile = hyp_arch_arm::ListRegisterFile<Ich>;

/// `$body` with `$lr` bound to ICH_LR<n>_EL2, for a run-time `n` (< 16).
macro_rules! with_list_register {
    ($n:expr, |$lr:ident| $body:expr) => {
        with_list_register!(@ $n, $lr, $body; 0 ICH_LR0_EL2, 1 ICH_LR1_EL2, 2 ICH_LR2_EL2,
            3 ICH_LR3_EL2, 4 ICH_LR4_EL2, 5 ICH_LR5_EL2, 6 ICH_LR6_EL2, 7 ICH_LR7_EL2,
            8 ICH_LR8_EL2, 9 ICH_LR9_EL2, 10 ICH_LR10_EL2, 11 ICH_LR11_EL2, 12 ICH_LR12_EL2,
            13 ICH_LR13_EL2, 14 ICH_LR14_EL2; ICH_LR15_EL2)
    };
    (@ $n:expr, $lr:ident, $body:expr; $($i:literal $reg:ident),*; $last:ident) => {
        match $n {
            $( $i => { let $lr = $reg; $body } )*
            _ => { let $lr = $last; $body }
        }
    };
}

impl ListRegisterAccess for Ich {
    fn read_lr(n: usize) -> u64 {
        with_list_register!(n, |lr| lr.get())
    }

    /// The hypervisor writes only the list registers the planner chose, below
    /// ICH_VTR_EL2.ListRegs; they belong to the vCPU running on this CPU.
    #[inline(always)]
    fn write_lr(n: usize, v: u64) {
        with_list_register!(n, |lr| lr.set(v))
    }

    fn count() -> usize {
        ICH_VTR_EL2.read(ICH_VTR_EL2::ListRegs) as usize + 1
    }

    /// ICH_ELRSR_EL2: bit n set = list register n is empty (bits [63:16] RES0).
    fn empty_status() -> u32 {
        let v: u64;
        // SAFETY: ICH_ELRSR_EL2 is read-only.
        unsafe { asm!("mrs {}, S3_4_C12_C11_5", out(reg) v, options(nomem, nostack)) };
        v as u32
    }

    /// ICH_EISR_EL2: bit n set = list register n raised an EOI maintenance interrupt (bits
    /// [63:16] RES0).
    fn eoi_status() -> u32 {
        let v: u64;
        // SAFETY: ICH_EISR_EL2 is read-only.
        unsafe { asm!("mrs {}, S3_4_C12_C11_3", out(reg) v, options(nomem, nostack)) };
        v as u32
    }

    fn read_hcr() -> u64 {
        ICH_HCR_EL2.get()
    }

    fn write_hcr(v: u64) {
        ICH_HCR_EL2.set(v);
        isb(SY);
    }

    /// Resets the virtual CPU interface state a vCPU starts with: ICH_VMCR_EL2 all off, and no
    /// active priorities (ICH_AP0R0_EL2, ICH_AP1R0_EL2; a CPU with more than 5 bits of virtual
    /// priority has more of them, which nothing here sets).
    fn reset_interface() {
        Self::write_interface([0; 3]);
    }

    /// ICH_VMCR_EL2, ICH_AP0R0_EL2 and ICH_AP1R0_EL2: the guest's view of its CPU interface
    /// (priority mask, group enables) and its active priorities (as `reset_interface`, the first
    /// active-priority register of each group only: 5 bits of virtual priority).
    fn read_interface() -> [u64; 3] {
        [ICH_VMCR_EL2.get(), ICH_AP0R0_EL2.get(), ICH_AP1R0_EL2.get()]
    }

    /// The registers of the vCPU about to run on this CPU, as it left them.
    fn write_interface(state: [u64; 3]) {
        ICH_VMCR_EL2.set(state[0]);
        ICH_AP0R0_EL2.set(state[1]);
        ICH_AP1R0_EL2.set(state[2]);
        isb(SY);
    }
}
