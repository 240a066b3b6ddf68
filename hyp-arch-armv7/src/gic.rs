//! The physical GIC of the ARMv7 image: the shared driver (`hyp_arch_arm::Gic`), all of it
//! memory-mapped on a GICv2 (GICD, GICC, and GICH's list registers), which is what this image
//! drives. A GICv3's CPU interface and list registers are system registers (ICC_*, ICH_*,
//! through CP15 on AArch32), which this image does not implement yet: it refuses a GICv3 at
//! boot with a message (main.rs), so `NoGicV3` below is never reached.

use hyp_arch_arm::{CpuInterfaceRegisters, Gic, ListRegisterAccess};

pub use hyp_runtime::interrupts::KICK_SGI;

/// The GICv3 system-register interfaces, which this image does not have: the shared driver
/// reaches them only on a GICv3, which boot refuses. Whatever reaches them anyway is a
/// spurious interrupt, no list register, and nothing written.
pub struct NoGicV3;

impl CpuInterfaceRegisters for NoGicV3 {
    fn enable(_pmr: u8) {}

    fn acknowledge() -> u32 {
        hyp_arch_arm::gic::SPURIOUS
    }

    fn end_of_interrupt(_iar: u32) {}

    fn priority_drop(_iar: u32) {}

    fn send_sgi(_sgi1r: u64) {}

    /// Also used on a GICv2, before GICD_SGIR is written: earlier stores reach the target
    /// before it takes the SGI.
    #[inline(always)]
    fn store_barrier() {
        // SAFETY: a barrier; no effect on memory or registers.
        unsafe { core::arch::asm!("dsb ishst", options(nostack)) };
    }
}

impl ListRegisterAccess for NoGicV3 {
    fn count() -> usize {
        0
    }
    fn read_lr(_n: usize) -> u64 {
        0
    }
    fn write_lr(_n: usize, _value: u64) {}
    fn empty_status() -> u32 {
        0
    }
    fn eoi_status() -> u32 {
        0
    }
    fn read_hcr() -> u64 {
        0
    }
    fn write_hcr(_value: u64) {}
    fn read_interface() -> [u64; 3] {
        [0; 3]
    }
    fn write_interface(_state: [u64; 3]) {}
    fn reset_interface() {}
}

/// This CPU's list registers for the vCPU loop: the GICH frame (hyp_arch_arm).
pub type ListRegisterFile = hyp_arch_arm::ListRegisterFile<NoGicV3>;

// SAFETY: the boot flow (hyp_arch_arm::boot) calls `init_distributor` before any other
// function of the driver, on the boot CPU, before the other CPUs start.
pub static GIC: Gic<NoGicV3> = unsafe { Gic::new() };
