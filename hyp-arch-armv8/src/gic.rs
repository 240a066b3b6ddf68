//! The physical GIC of the AArch64 image: the shared driver (`hyp_arch_arm::Gic`, everything
//! memory-mapped, the same on ARMv7) over this CPU's GICv3 CPU interface, the ICC_* system
//! registers at EL2 (IHI 0069 12.2), which this module owns; the image's one instance and
//! its driver.

use core::arch::asm;

use hyp_arch_arm::{CpuInterfaceRegisters, Gic};

pub use hyp_runtime::interrupts::KICK_SGI;

/// The GICv3 CPU interface by its system registers, at EL2.
pub struct Icc;

impl CpuInterfaceRegisters for Icc {
    fn enable(pmr: u8) {
        // SAFETY: ICC_SRE_EL2: SRE, DFB, DIB, and Enable (EL1 may use the system register
        // interface, which reaches the virtual CPU interface for guests); then this CPU's
        // priority mask, binary point, EOImode 1 and Group 1 enable. None touches memory.
        unsafe {
            asm!(
                "mrs {t}, icc_sre_el2",
                "orr {t}, {t}, #0xf",
                "msr icc_sre_el2, {t}",
                "isb",
                "msr icc_pmr_el1, {pmr}",
                "msr icc_bpr1_el1, xzr",
                "mrs {t}, icc_ctlr_el1",
                "orr {t}, {t}, #2",
                "msr icc_ctlr_el1, {t}",
                "msr icc_igrpen1_el1, {one}",
                "isb",
                t = out(reg) _,
                pmr = in(reg) u64::from(pmr),
                one = in(reg) 1u64,
                options(nostack)
            );
        }
    }

    #[inline(always)]
    fn left_by_vector() -> Option<u32> {
        // exceptions.rs' kick_in_vector: another interrupt that became the highest pending
        // as it took a kick.
        let left: u64;
        // SAFETY: TPIDR_EL2 points at this CPU's `PerCpu` once it is online, before any
        // interrupt is unmasked; the load reads its `vector_calls.acknowledged` (an
        // AtomicU64, read as the vector writes it, on this CPU only).
        unsafe {
            asm!(
                "mrs {p}, tpidr_el2",
                "ldr {v}, [{p}, #{at}]",
                p = out(reg) _,
                v = out(reg) left,
                at = const hyp_arch_arm::cpus::VECTOR_CALLS_ACKNOWLEDGED,
                options(nostack, readonly)
            )
        };
        if left != 0 {
            return Some(take_left());
        }
        None
    }

    #[inline(always)]
    fn acknowledge() -> u32 {
        let intid: u64;
        // SAFETY: reading ICC_IAR1_EL1 acknowledges an interrupt; nothing else changes.
        unsafe { asm!("mrs {}, icc_iar1_el1", out(reg) intid, options(nostack)) };
        intid as u32
    }

    #[inline(always)]
    fn end_of_interrupt(iar: u32) {
        // SAFETY: ICC_EOIR1_EL1 then ICC_DIR_EL1 (EOImode 1) for an acknowledged INTID.
        unsafe {
            asm!("msr icc_eoir1_el1, {0}", "msr icc_dir_el1, {0}", "isb", in(reg) u64::from(iar), options(nostack))
        };
    }

    #[inline(always)]
    fn priority_drop(iar: u32) {
        // SAFETY: ICC_EOIR1_EL1 for an acknowledged INTID.
        unsafe { asm!("msr icc_eoir1_el1, {0}", "isb", in(reg) u64::from(iar), options(nostack)) };
    }

    #[inline(always)]
    fn send_sgi(sgi1r: u64) {
        // SAFETY: generating an SGI has no effect on memory; the DSB makes earlier stores
        // visible to the target before it takes the interrupt.
        unsafe { asm!("dsb ishst", "msr icc_sgi1r_el1, {}", "isb", in(reg) sgi1r, options(nostack)) };
    }

    #[inline(always)]
    fn store_barrier() {
        // SAFETY: a barrier; no effect on memory or registers.
        unsafe { asm!("dsb ishst", options(nostack)) };
    }
}

/// The interrupt the vector left to the run loop, taken once.
#[cold]
#[inline(never)]
fn take_left() -> u32 {
    let calls = &hyp_arch_arm::cpus::PER_CPU[crate::cpus::current_index()].vector_calls;
    calls.take_acknowledged().unwrap_or(hyp_arch_arm::gic::SPURIOUS)
}

// SAFETY: the boot flow (hyp_arch_arm::boot) calls `init_distributor` before any other
// function of the driver, on the boot CPU, before the other CPUs start.
pub static GIC: Gic<Icc> = unsafe { Gic::new() };
