//! When a CPU invalidates its TLB before a vCPU enters the guest there
//! (docs/capability-model.md, "VMIDs and the TLB"): decided here, per VM and per CPU; the
//! arch crate only executes the instruction (`VcpuCpu::enter`).
//!
//! TLB entries of the EL1&0 translation regime are tagged with the VMID they were made under
//! (ARM ARM D8, "Use of ASIDs and VMIDs to reduce TLB maintenance requirements"), so going
//! from one VM to another needs no maintenance, and a VMID is invalidated on every CPU
//! before it is given again (V1: `CapSpace::invoke_remove` through
//! `TlbMaintenance::invalidate_vmid`). What is left is the VM's own vCPUs: a stage-1 entry is
//! tagged by VMID and ASID, not by vCPU, so a vCPU entering a CPU where another vCPU of its
//! VM ran since its own last turn there could hit that vCPU's translations (V3). This is
//! what [`Stage1Contexts`] tracks: per CPU, whose stage-1 context the CPU's TLB may hold.

use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::platform::MAX_CPUS;

/// What a CPU does to its TLB before a vCPU of the VM enters the guest there.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnEntry {
    /// Nothing: the CPU's TLB holds no stage-1 entry of the VM's VMID that another vCPU (or
    /// the VM before a reset) made.
    Nothing,
    /// Invalidate this CPU's stage-1 entries of the VM's VMID, on this CPU only, with the
    /// VM's VMID in VTTBR: TLBI VMALLE1 (ARMv7: TLBIALL in Hyp mode, which takes the VMID's
    /// stage-2 entries too).
    InvalidateStage1,
}

/// The CPU's TLB holds no stage-1 entry of this VM (its VMID was invalidated everywhere
/// before the VM was given it, V1, and no vCPU of it entered this CPU since).
const NONE: usize = usize::MAX;
/// The CPU's TLB may hold stage-1 entries of this VM that belong to no vCPU of the guest
/// running now: made before the VM was reset.
const BEFORE_RESET: usize = usize::MAX - 1;

/// For one VM: whose stage-1 context each CPU's TLB may hold. Each CPU reads and writes its
/// own entry only, when a vCPU of the VM enters there; the VM's reset writes them all while
/// none of its vCPUs runs.
pub struct Stage1Contexts {
    held: [AtomicUsize; MAX_CPUS],
}

impl Stage1Contexts {
    /// A new VM: no CPU holds anything of it.
    pub const fn new() -> Self {
        Stage1Contexts { held: [const { AtomicUsize::new(NONE) }; MAX_CPUS] }
    }

    /// vCPU `vcpu` of the VM enters the guest on CPU `cpu` (which is this CPU): what the CPU
    /// must do to its TLB first. From now on the CPU holds `vcpu`'s context.
    ///
    /// It invalidates when another vCPU of the VM, or the VM before its reset, may have left
    /// entries there; never for a vCPU returning to a CPU only it used, whose own entries
    /// there are as the guest left them (its TLB maintenance at EL1 is broadcast by
    /// HCR_EL2.FB, so what it invalidated on another CPU is gone here too: V4).
    pub fn enter(&self, cpu: usize, vcpu: usize) -> OnEntry {
        // A CPU beyond the table cannot be tracked: always invalidate (never the case: CPUs
        // are numbered below MAX_CPUS).
        let Some(held) = self.held.get(cpu) else { return OnEntry::InvalidateStage1 };
        // Only this CPU writes its entry (or the VM's reset, ordered before by the
        // scheduler's lock that started this vCPU), so a swap is exact.
        match held.swap(vcpu, Ordering::AcqRel) {
            NONE => OnEntry::Nothing,
            last if last == vcpu => OnEntry::Nothing,
            _ => OnEntry::InvalidateStage1,
        }
    }

    /// The VM was reset (SYSTEM_RESET, every vCPU stopped): the guest that boots again
    /// keeps the VMID and its tables, but nothing any CPU cached of the last boot's stage 1
    /// belongs to it. A CPU that held anything of the VM invalidates at its next entry
    /// (V5); one that never ran it stays clean.
    pub fn forget(&self) {
        for held in &self.held {
            let _ = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| (v != NONE).then_some(BEFORE_RESET));
        }
    }
}

impl Default for Stage1Contexts {
    fn default() -> Self {
        Self::new()
    }
}
