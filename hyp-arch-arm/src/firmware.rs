//! Calls from the hypervisor to the firmware: PSCI (ARM DEN 0022) over the conduit the
//! device tree names, through the `smccc` crate, whose calls follow the SMC Calling
//! Convention on AArch64 and AArch32 alike (a call's SMC32 form on AArch32) and treat every
//! argument register as clobbered (safe with SMCCC 1.0 firmware, which may clobber x4-x17).

use core::sync::atomic::{AtomicU8, Ordering};

use hyp_core::platform::PsciConduit;
use smccc::psci::{self, Version};
use smccc::{Hvc, Smc};

pub use smccc::psci::Error as PsciError;

/// The conduit: 0 none (the firmware has no PSCI), 1 SMC, 2 HVC.
static CONDUIT: AtomicU8 = AtomicU8::new(0);

/// Once, by the boot CPU, before the first call: the conduit the device tree's `/psci` names,
/// if it has one.
pub fn init(conduit: Option<PsciConduit>) {
    let value = match conduit {
        None => 0,
        Some(PsciConduit::Smc) => 1,
        Some(PsciConduit::Hvc) => 2,
    };
    CONDUIT.store(value, Ordering::Relaxed);
}

/// Whether the device tree names a PSCI conduit.
pub fn has_psci() -> bool {
    CONDUIT.load(Ordering::Relaxed) != 0
}

/// `call` over the conduit; without PSCI, NOT_SUPPORTED.
macro_rules! over_conduit {
    ($call:ident($($arg:expr),*)) => {
        match CONDUIT.load(Ordering::Relaxed) {
            1 => psci::$call::<Smc>($($arg),*),
            2 => psci::$call::<Hvc>($($arg),*),
            _ => Err(PsciError::NotSupported),
        }
    };
}

/// The firmware's PSCI version.
pub fn version() -> Result<Version, PsciError> {
    over_conduit!(version())
}

/// Starts the CPU `mpidr` at `entry` (a physical address, MMU off) with `context` in its
/// first argument register: CPU_ON's SMC64 form on AArch64, its SMC32 form on AArch32
/// (which has no SMC64 calls: `smccc` panics on one).
pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> Result<(), PsciError> {
    #[cfg(target_arch = "aarch64")]
    let result = over_conduit!(cpu_on(mpidr, entry, context));
    #[cfg(target_arch = "arm")]
    let result = over_conduit!(cpu_on_32(mpidr as u32, entry as u32, context as u32));
    result
}

/// Powers the machine off; returns only if the firmware refused.
pub fn system_off() -> Result<(), PsciError> {
    over_conduit!(system_off())
}
