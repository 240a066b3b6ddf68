//! Direct injection of a VM's LPIs through the board's GICv4.0 (docs/vgic.md, "Direct
//! injection of LPIs (GICv4.0)"): the seam to the board's ITS and vPEs ([`BoardVlpis`]),
//! and the rules the runtime keeps around it:
//! - a VM whose guest has an ITS gets a vPE per vCPU and an event per LPI when the board
//!   has a GICv4.0 with room (`attach`), and gives them back when its vGIC goes
//!   (`VgicHandle`'s drop);
//! - after every change the guest's ITS or a device makes to its LPIs, the board's ITS is
//!   brought to it under the vGIC's lock (`VgicHandle::sync_direct`, vgic::VlpiCommand);
//! - a vCPU's vPE is resident on its CPU's redistributor from its entry until it leaves the
//!   CPU, and not while it waits for an interrupt off the CPU, so that a vLPI for it rings
//!   its doorbell (vcpu_run);
//! - a doorbell only wakes its vCPU: the vLPI waits in the vPE's pending table until the
//!   vPE is resident again (hypervisor::interrupts).

use core::fmt;

use vgic::VlpiCommand;

/// A VM's part of the board's GICv4.0: its vPEs and its events, by the board's numbering.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VlpiVm {
    /// The VM's index (the doorbell names it back).
    pub vm: usize,
    /// Which of the board's VM slots it holds (its vPEs and events follow from it).
    pub slot: usize,
    pub vcpus: usize,
}

/// Why a VM's LPIs stay with its vGIC.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VlpiError {
    /// Every slot of the board's vPE and event tables is taken by another VM.
    NoSlot { slots: usize },
    /// More vCPUs than a slot has vPEs.
    TooManyVcpus { vcpus: usize, max: usize },
    /// The hypervisor's heap cannot hold the vPEs' pending tables.
    OutOfMemory,
    /// The board's ITS refused or did not finish a command.
    Board,
}

impl fmt::Display for VlpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoSlot { slots } => {
                write!(f, "all {slots} VMs the board's GICv4 serves have their LPIs there already")
            }
            Self::TooManyVcpus { vcpus, max } => {
                write!(f, "{vcpus} vCPUs, and the board's GICv4 serves at most {max} a VM")
            }
            Self::OutOfMemory => write!(f, "the hypervisor's heap cannot hold the vPEs' pending tables"),
            Self::Board => write!(f, "the board's ITS did not take the VM's vPEs"),
        }
    }
}

/// The board's GICv4.0 as the runtime uses it. Implemented over the board's ITS and
/// redistributors (hyp_arch_arm); the host tests implement it with a recording fake.
pub trait BoardVlpis: Sync {
    /// VM `vm` of `vcpus` vCPUs gets a slot: a vPE per vCPU (VMAPP, each to the
    /// redistributor of CPU `cpu` until it runs elsewhere) and an event per LPI.
    fn attach(&self, vm: usize, vcpus: usize, cpu: usize) -> Result<VlpiVm, VlpiError>;
    /// The VM's slot given back: its vPEs unmapped, its tables freed. Every event of it was
    /// discarded first and none of its vPEs is resident.
    fn detach(&self, vm: &VlpiVm);
    /// One step of the board's ITS for one of the VM's LPIs; an error if the ITS refused
    /// it or did not finish it (the LPI may then not reach the guest).
    fn apply(&self, vm: &VlpiVm, command: VlpiCommand) -> Result<(), VlpiError>;
    /// vCPU `vcpu`'s vPE made resident on this CPU (`cpu`)'s redistributor, moved there
    /// first if it was mapped to another (VMOVP).
    fn make_resident(&self, vm: &VlpiVm, vcpu: usize, cpu: usize);
    /// This CPU's resident vPE, if any, made non-resident; whether vLPIs were pending for
    /// it then (GICR_VPENDBASER.PendingLast: no doorbell rings for those).
    fn make_non_resident(&self, cpu: usize) -> bool;
    /// The VM and vCPU whose doorbell physical LPI `intid` is, if it is one.
    fn doorbell(&self, intid: u32) -> Option<(usize, usize)>;
}
