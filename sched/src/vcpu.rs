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
    /// Ticks it ran past the end of its turns (a slice timer taken late) and has not yet
    /// given back: its next turns are shorter by as much, so that late ticks do not add up
    /// to a larger share (docs/scheduler.md, "Overruns").
    pub overrun: u64,
}

/// A turn shortened to give back an overrun is never shorter than 1/MIN_TURN_FRACTION of the
/// slice, nor than one tick, so a vCPU that overran still makes progress every round (and its
/// deadline lies ahead of the decision that sets it, however short the slice).
const MIN_TURN_FRACTION: u64 = 32;
/// An overrun beyond this many slices is forgiven: a stall that long (the timer interrupt
/// held off, or the whole CPU stopped) is not the vCPU's doing, and making it pay would starve
/// it for as long.
const MAX_OVERRUN_SLICES: u64 = 4;

impl Vcpu {
    /// Starts a new turn: its slice, less what it still owes of earlier overruns.
    pub fn new_turn(&mut self) {
        let slice = self.slice();
        let owed = self.overrun.min(slice.saturating_mul(MAX_OVERRUN_SLICES));
        let shortest = (slice / MIN_TURN_FRACTION).max(1).min(slice);
        let given_back = owed.min(slice - shortest);
        self.overrun = owed - given_back;
        self.budget = slice - given_back;
    }

    /// Its slice, or 0 for a pinned vCPU (which has no turns).
    pub fn slice(&self) -> u64 {
        match self.policy {
            Policy::Pinned => 0,
            Policy::Shared { slice } => slice,
        }
    }
}
