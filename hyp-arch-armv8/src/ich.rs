//! The GICv3 virtual CPU interface control registers at EL2 (IHI 0069 12.5), which this
//! module owns: list registers, ICH_HCR_EL2, ICH_VTR_EL2, ICH_ELRSR_EL2, ICH_EISR_EL2,
//! ICH_VMCR_EL2 and the first active-priority registers, given to the shared list-register
//! file (`hyp_arch_arm::ListRegisterFile`) as `Ich`. Written by their generic encodings
//! (S3_4_C12_...) so no assembler GIC extension is needed.

use core::arch::asm;

use hyp_arch_arm::ListRegisterAccess;

/// ICH_*_EL2 of this CPU.
pub struct Ich;

impl ListRegisterAccess for Ich {
    /// Reads ICH_LR<n>_EL2 (n < 16).
    fn read_lr(n: usize) -> u64 {
        let v: u64;
        // SAFETY: reading a list register of this CPU's virtual interface has no side effect.
        unsafe {
            match n {
                0 => asm!("mrs {}, S3_4_C12_C12_0", out(reg) v),
                1 => asm!("mrs {}, S3_4_C12_C12_1", out(reg) v),
                2 => asm!("mrs {}, S3_4_C12_C12_2", out(reg) v),
                3 => asm!("mrs {}, S3_4_C12_C12_3", out(reg) v),
                4 => asm!("mrs {}, S3_4_C12_C12_4", out(reg) v),
                5 => asm!("mrs {}, S3_4_C12_C12_5", out(reg) v),
                6 => asm!("mrs {}, S3_4_C12_C12_6", out(reg) v),
                7 => asm!("mrs {}, S3_4_C12_C12_7", out(reg) v),
                8 => asm!("mrs {}, S3_4_C12_C13_0", out(reg) v),
                9 => asm!("mrs {}, S3_4_C12_C13_1", out(reg) v),
                10 => asm!("mrs {}, S3_4_C12_C13_2", out(reg) v),
                11 => asm!("mrs {}, S3_4_C12_C13_3", out(reg) v),
                12 => asm!("mrs {}, S3_4_C12_C13_4", out(reg) v),
                13 => asm!("mrs {}, S3_4_C12_C13_5", out(reg) v),
                14 => asm!("mrs {}, S3_4_C12_C13_6", out(reg) v),
                _ => asm!("mrs {}, S3_4_C12_C13_7", out(reg) v),
            }
        }
        v
    }

    /// Writes ICH_LR<n>_EL2 (n < 16).
    fn write_lr(n: usize, v: u64) {
        // SAFETY: list registers belong to the vCPU running on this CPU; the hypervisor writes
        // only the ones the planner chose, below ICH_VTR_EL2.ListRegs.
        unsafe {
            match n {
                0 => asm!("msr S3_4_C12_C12_0, {}", in(reg) v),
                1 => asm!("msr S3_4_C12_C12_1, {}", in(reg) v),
                2 => asm!("msr S3_4_C12_C12_2, {}", in(reg) v),
                3 => asm!("msr S3_4_C12_C12_3, {}", in(reg) v),
                4 => asm!("msr S3_4_C12_C12_4, {}", in(reg) v),
                5 => asm!("msr S3_4_C12_C12_5, {}", in(reg) v),
                6 => asm!("msr S3_4_C12_C12_6, {}", in(reg) v),
                7 => asm!("msr S3_4_C12_C12_7, {}", in(reg) v),
                8 => asm!("msr S3_4_C12_C13_0, {}", in(reg) v),
                9 => asm!("msr S3_4_C12_C13_1, {}", in(reg) v),
                10 => asm!("msr S3_4_C12_C13_2, {}", in(reg) v),
                11 => asm!("msr S3_4_C12_C13_3, {}", in(reg) v),
                12 => asm!("msr S3_4_C12_C13_4, {}", in(reg) v),
                13 => asm!("msr S3_4_C12_C13_5, {}", in(reg) v),
                14 => asm!("msr S3_4_C12_C13_6, {}", in(reg) v),
                _ => asm!("msr S3_4_C12_C13_7, {}", in(reg) v),
            }
        }
    }

    /// Implemented list registers: ICH_VTR_EL2.ListRegs + 1.
    fn count() -> usize {
        let vtr: u64;
        // SAFETY: ICH_VTR_EL2 is read-only.
        unsafe { asm!("mrs {}, S3_4_C12_C11_1", out(reg) vtr, options(nomem, nostack)) };
        ((vtr & 0x1f) + 1) as usize
    }

    /// ICH_ELRSR_EL2: bit n set = list register n is empty.
    fn empty_status() -> u64 {
        let v: u64;
        // SAFETY: ICH_ELRSR_EL2 is read-only.
        unsafe { asm!("mrs {}, S3_4_C12_C11_5", out(reg) v, options(nomem, nostack)) };
        v
    }

    /// ICH_EISR_EL2: bit n set = list register n raised an EOI maintenance interrupt.
    fn eoi_status() -> u64 {
        let v: u64;
        // SAFETY: ICH_EISR_EL2 is read-only.
        unsafe { asm!("mrs {}, S3_4_C12_C11_3", out(reg) v, options(nomem, nostack)) };
        v
    }

    fn write_hcr(v: u64) {
        // SAFETY: ICH_HCR_EL2 controls this CPU's virtual interface for the running vCPU.
        unsafe { asm!("msr S3_4_C12_C11_0, {}", "isb", in(reg) v, options(nostack)) };
    }

    /// Resets the virtual CPU interface state a vCPU starts with: ICH_VMCR_EL2 all off, and no
    /// active priorities (ICH_AP0R0_EL2, ICH_AP1R0_EL2; a CPU with more than 5 bits of virtual
    /// priority has more of them, which nothing here sets).
    fn reset_interface() {
        // SAFETY: as for `write_hcr`.
        unsafe {
            asm!("msr S3_4_C12_C11_7, xzr", "msr S3_4_C12_C8_0, xzr", "msr S3_4_C12_C9_0, xzr", "isb", options(nostack))
        };
    }

    /// ICH_VMCR_EL2, ICH_AP0R0_EL2 and ICH_AP1R0_EL2: the guest's view of its CPU interface
    /// (priority mask, group enables) and its active priorities (as `reset_interface`, the first
    /// active-priority register of each group only: 5 bits of virtual priority).
    fn read_interface() -> [u64; 3] {
        let (vmcr, ap0, ap1): (u64, u64, u64);
        // SAFETY: reading this CPU's virtual interface registers has no side effect.
        unsafe {
            asm!(
                "mrs {}, S3_4_C12_C11_7",
                "mrs {}, S3_4_C12_C8_0",
                "mrs {}, S3_4_C12_C9_0",
                out(reg) vmcr,
                out(reg) ap0,
                out(reg) ap1,
                options(nomem, nostack)
            )
        };
        [vmcr, ap0, ap1]
    }

    fn write_interface(state: [u64; 3]) {
        // SAFETY: the registers of the vCPU about to run on this CPU, as it left them.
        unsafe {
            asm!(
                "msr S3_4_C12_C11_7, {}",
                "msr S3_4_C12_C8_0, {}",
                "msr S3_4_C12_C9_0, {}",
                "isb",
                in(reg) state[0],
                in(reg) state[1],
                in(reg) state[2],
                options(nostack)
            )
        };
    }
}
