//! The states of a vCPU. The transitions allowed between them are listed in
//! `docs/scheduler.md` and checked after every operation by the property tests.

use core::fmt;

/// Where a vCPU is in its life, as the scheduler sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VcpuState {
    /// The last [`crate::Decision`] of its home CPU named it: the CPU is running it.
    Running,
    /// Waiting on its home CPU's run queue.
    Runnable,
    /// Waiting for an interrupt (it executed a trapped WFI): off the run queue until
    /// [`crate::Scheduler::wake`].
    Blocked,
    /// Not started (created, PSCI CPU_OFF, VM ended): never runs until
    /// [`crate::Scheduler::start`] (PSCI CPU_ON).
    Stopped,
}

impl fmt::Display for VcpuState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Running => "running",
            Self::Runnable => "runnable",
            Self::Blocked => "blocked in WFI",
            Self::Stopped => "stopped",
        })
    }
}
