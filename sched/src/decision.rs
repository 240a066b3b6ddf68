//! The answer the scheduler gives a physical CPU.

use crate::VcpuRef;

/// What a physical CPU does next, until the next call to [`crate::Scheduler::pick`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Decision {
    /// The vCPU to enter, or `None`: nothing to run, idle in WFI at EL2 until an interrupt (a
    /// kick SGI, a device interrupt) arrives.
    pub run: Option<VcpuRef>,
    /// The counter value at which the slice ends: program CNTHP_CVAL_EL2 with it and enable
    /// the timer. `None`: tickless, disable the EL2 physical timer (a pinned vCPU, a shared
    /// vCPU alone on its CPU, or an idle CPU).
    pub until: Option<u64>,
    /// Whether WFI must trap for this vCPU (HCR_EL2.TWI = 1): true for the shared policy, so
    /// the CPU can run another vCPU while this one waits; false for a pinned vCPU.
    pub trap_wfi: bool,
}

impl Decision {
    /// Nothing to run: idle, no timer.
    pub const IDLE: Decision = Decision { run: None, until: None, trap_wfi: false };
}
