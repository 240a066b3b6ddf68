//! Naming a vCPU ([`VcpuRef`]), and what the scheduler records about each one ([`Vcpu`]).

use core::fmt;

use crate::{Policy, VcpuState};

/// A vCPU, named by its VM and its index in that VM. Small and `Copy` so the arch crate can
/// keep it in its per-CPU data and compare it with a [`crate::Decision`] without a lookup.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct VcpuRef {
    /// The VM's index.
    pub vm: u16,
    /// The vCPU's index inside its VM (its MPIDR-derived number, as PSCI CPU_ON names it).
    pub vcpu: u16,
}

impl VcpuRef {
    /// vCPU `vcpu` of VM `vm`.
    pub const fn new(vm: u16, vcpu: u16) -> Self {
        Self { vm, vcpu }
    }
}

impl fmt::Display for VcpuRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vCPU {} of VM {}", self.vcpu, self.vm)
    }
}

/// The scheduler's record of one vCPU.
#[derive(Clone, Debug)]
pub(crate) struct Vcpu {
    /// The physical CPU whose run queue it is on; it never runs anywhere else.
    pub home: usize,
    pub policy: Policy,
    pub state: VcpuState,
    /// Ticks left in its current turn (shared policy). 0 means "no turn in progress": the next
    /// time it is picked it starts a new turn of a full slice. Kept across a block, so that a
    /// vCPU woken in the middle of its turn finishes that turn first (see `queue.rs`).
    pub budget: u64,
    /// Ticks it has run, up to the last decision of its CPU ([`crate::Scheduler::run_time`]).
    pub ran: u64,
}

impl Vcpu {
    /// Its slice, or 0 for a pinned vCPU (which has no turns).
    pub fn slice(&self) -> u64 {
        match self.policy {
            Policy::Pinned => 0,
            Policy::Shared { slice } => slice,
        }
    }
}
