//! What the scheduler records about one physical CPU: which policy it serves, its run queue,
//! and the vCPU it was last told to run.

use crate::queue::RunQueue;
use crate::VcpuRef;

/// Which kind of vCPUs a CPU has. A CPU is pinned or shared by the vCPUs homed on it, so the
/// two policies never meet on one CPU (a pinned vCPU's promise of no tick and no preemption
/// could not be kept otherwise).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CpuKind {
    /// No vCPU has this CPU as its home.
    Free,
    /// This vCPU, pinned, is the only one.
    Pinned(VcpuRef),
    /// One or more shared vCPUs.
    Shared,
}

/// The vCPU a CPU was last told to run, and the slice it was given.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Running {
    pub vcpu: VcpuRef,
    /// When its time was last accounted (the last decision for this CPU).
    pub since: u64,
    /// The deadline the CPU was given (`Decision::until`). `None` means tickless: the vCPU is
    /// alone (or pinned), its time is not charged to its turn, and the CPU will not come back
    /// by itself, so someone who queues a vCPU here must kick it.
    pub until: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Cpu {
    pub kind: CpuKind,
    /// How many vCPUs have this CPU as their home (in any state).
    pub homed: usize,
    pub queue: RunQueue,
    pub running: Option<Running>,
}

impl Cpu {
    pub fn new() -> Self {
        Self { kind: CpuKind::Free, homed: 0, queue: RunQueue::default(), running: None }
    }

    /// Whether a vCPU just queued here needs an IPI for this CPU to notice it: the CPU is idle
    /// (or between a block and its next pick), or it runs tickless and has no deadline that
    /// would bring it back.
    pub fn needs_kick(&self) -> bool {
        self.running.is_none_or(|r| r.until.is_none())
    }
}
