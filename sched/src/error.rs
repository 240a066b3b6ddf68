//! Errors: a configuration the scheduler refuses (from [`crate::Scheduler::add_vcpu`], which
//! the manifest reports with the VM and the field at fault) or an operation on a vCPU in a
//! state that does not allow it (which hyp-core maps to a PSCI error or treats as a bug).

use core::fmt;

use crate::{VcpuRef, VcpuState};

/// Why the scheduler refused a request. Nothing changed when one is returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SchedError {
    /// The home CPU named does not exist on this machine.
    NoSuchCpu { cpu: usize, cpus: usize },
    /// The home CPU is already reserved by a pinned vCPU.
    CpuPinned { cpu: usize, owner: VcpuRef },
    /// A pinned vCPU was asked for a CPU that already has shared vCPUs.
    CpuShared { cpu: usize, sharer: VcpuRef },
    /// The vCPU was added already.
    Duplicate { vcpu: VcpuRef },
    /// A shared policy with a slice of 0 ticks (the vCPU would never make progress).
    ZeroSlice { vcpu: VcpuRef },
    /// The vCPU was never added, or was removed.
    UnknownVcpu { vcpu: VcpuRef },
    /// `start` on a vCPU that is not stopped (PSCI CPU_ON answers ALREADY_ON).
    NotStopped { vcpu: VcpuRef, state: VcpuState },
    /// `block` or `yield_now` on a vCPU its CPU is not running.
    NotRunning { vcpu: VcpuRef, state: VcpuState },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoSuchCpu { cpu, cpus } => write!(
                f,
                "CPU {cpu} does not exist: this machine has {cpus} CPU{} (0 to {}); choose one of them",
                if cpus == 1 { "" } else { "s" },
                cpus.saturating_sub(1)
            ),
            Self::CpuPinned { cpu, owner } => write!(
                f,
                "CPU {cpu} is reserved for pinned {owner}; give this vCPU another CPU, or make {owner} shared"
            ),
            Self::CpuShared { cpu, sharer } => write!(
                f,
                "CPU {cpu} already runs shared vCPUs ({sharer} among them), and a pinned vCPU needs a CPU of its own; \
                 pin this vCPU to a free CPU or make it shared"
            ),
            Self::Duplicate { vcpu } => write!(f, "{vcpu} is given twice; each vCPU of a VM needs its own entry"),
            Self::ZeroSlice { vcpu } => {
                write!(f, "{vcpu} has a time slice of 0 ticks; give a slice of at least one counter tick")
            }
            Self::UnknownVcpu { vcpu } => write!(f, "{vcpu} does not exist (never added, or its VM was destroyed)"),
            Self::NotStopped { vcpu, state } => write!(f, "{vcpu} cannot be started: it is {state}, not stopped"),
            Self::NotRunning { vcpu, state } => {
                write!(f, "{vcpu} cannot wait or yield: it is {state}, not running on its CPU")
            }
        }
    }
}
