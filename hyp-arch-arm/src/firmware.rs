//! Calls from the hypervisor to the firmware: PSCI (ARM DEN 0022) over the conduit the
//! device tree names, through the `smccc` crate, whose calls follow the SMC Calling
//! Convention on AArch64 and AArch32 alike and treat every argument register as clobbered
//! (safe with SMCCC 1.0 firmware, which may clobber x4-x17).

use core::sync::atomic::{AtomicBool, Ordering};

use hyp_core::platform::PsciConduit;
use smccc::psci::{self, Version};
use smccc::{Hvc, Smc};

pub use smccc::psci::Error as PsciError;

/// Whether the conduit is HVC (else SMC, what an EL2 or HYP mode caller uses on most boards).
static CONDUIT_IS_HVC: AtomicBool = AtomicBool::new(false);

/// Once, by the boot CPU, before the first call: the conduit the device tree's `/psci` names.
pub fn init(conduit: PsciConduit) {
    CONDUIT_IS_HVC.store(conduit == PsciConduit::Hvc, Ordering::Relaxed);
}

fn hvc() -> bool {
    CONDUIT_IS_HVC.load(Ordering::Relaxed)
}

/// The firmware's PSCI version.
pub fn version() -> Result<Version, PsciError> {
    if hvc() {
        psci::version::<Hvc>()
    } else {
        psci::version::<Smc>()
    }
}

/// Starts the CPU `mpidr` at `entry` (a physical address, MMU off) with `context` in its
/// first argument register.
pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> Result<(), PsciError> {
    if hvc() {
        psci::cpu_on::<Hvc>(mpidr, entry, context)
    } else {
        psci::cpu_on::<Smc>(mpidr, entry, context)
    }
}

/// Powers the machine off; returns only if the firmware refused.
pub fn system_off() -> Result<(), PsciError> {
    if hvc() {
        psci::system_off::<Hvc>()
    } else {
        psci::system_off::<Smc>()
    }
}
