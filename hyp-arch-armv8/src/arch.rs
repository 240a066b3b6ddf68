//! The runtime's `Arch` for AArch64 at EL2 (hyp_runtime::arch), and the runtime state this
//! image keeps for it.

use core::arch::asm;

use hyp_runtime::interrupts::Routes;
use hyp_runtime::passthrough::Owners;
use hyp_runtime::scheduling::Scheduling;
use hyp_runtime::Arch;

use crate::exceptions::sysreg;

pub struct Aarch64;

impl Arch for Aarch64 {
    fn current_cpu() -> usize {
        crate::cpus::current_index()
    }

    fn kick_cpu(cpu: usize) {
        crate::cpus::kick(cpu);
    }

    /// The EL2 physical counter, the same on every CPU.
    fn now() -> u64 {
        sysreg!("cntpct_el0")
    }

    fn counter_frequency() -> u64 {
        sysreg!("cntfrq_el0")
    }

    /// This CPU's EL2 physical timer (CNTHP, ARM ARM D12.8).
    fn set_hyp_timer(deadline: Option<u64>) {
        match deadline {
            // SAFETY: this CPU's EL2 physical timer belongs to the hypervisor: compare value,
            // then enabled and unmasked (CNTHP_CTL_EL2.ENABLE).
            Some(d) => unsafe {
                asm!("msr cnthp_cval_el2, {}", "msr cnthp_ctl_el2, {}", "isb", in(reg) d, in(reg) 1u64)
            },
            // SAFETY: as above; disabled.
            None => unsafe { asm!("msr cnthp_ctl_el2, xzr", "isb") },
        }
    }
}

/// The scheduler of every CPU.
pub static SCHEDULING: Scheduling<Aarch64> = Scheduling::new();

/// Which VM each passthrough SPI is forwarded to.
pub static SPI_OWNERS: Owners = Owners::new();

/// What each physical interrupt is for.
pub static ROUTES: Routes = Routes::new();
