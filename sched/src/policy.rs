//! The two scheduling policies a vCPU can have.

/// How a vCPU shares its home CPU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Policy {
    /// The vCPU has its physical CPU to itself: no periodic tick (the decision has no
    /// deadline), it is never preempted, and its WFI need not trap (the physical WFI idles
    /// the CPU until the next interrupt, which is cheaper than an exit).
    Pinned,
    /// The vCPU takes round-robin turns of `slice` counter ticks with the other shared vCPUs
    /// of its home CPU, and its WFI traps so the CPU can run another vCPU meanwhile.
    ///
    /// Slices may differ between the vCPUs of one CPU: over a long run each always-runnable
    /// vCPU gets CPU time in proportion to its slice, so the slice doubles as a weight.
    Shared {
        /// The length of one turn, in ticks of the EL2 physical counter (CNTFRQ_EL0 per
        /// second). Must not be 0.
        slice: u64,
    },
}
