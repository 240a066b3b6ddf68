//! Where each vCPU runs, decided once at boot from the manifest (docs/manifest.md, `cpus`
//! and `policy`; docs/scheduler.md): on the CPUs its VM's entry names, pinned or sharing
//! them; a VM that names none has each vCPU pinned to a CPU no VM named (nor as its
//! `io_cpu`), every such VM's vCPU 0 first and vm0's on the boot CPU.

use alloc::vec::Vec;
use core::fmt;

use hyp_core::bundle::VmSpec;
use sched::{Policy, VcpuRef};

use crate::scheduling::vcpu_ref;

/// Why the VMs cannot be placed on the CPUs there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementError {
    /// A vCPU's manifest entry names a CPU that is not online (or is kept for a test).
    CpuNotOnline { vm: usize, name: &'static str, vcpu: usize, cpu: usize },
    /// The VMs without `cpus` have more vCPUs than there are CPUs no VM names.
    NotEnoughFreeCpus { vcpus: usize, free: usize },
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::CpuNotOnline { vm, name, vcpu, cpu } => {
                write!(f, "vm{vm} {name}: vCPU {vcpu}: cpu{cpu} is not online")
            }
            PlacementError::NotEnoughFreeCpus { vcpus, free } => write!(
                f,
                "the VMs without `cpus` have {vcpus} vCPUs but only {free} CPUs are free for them: each is pinned to a CPU of its own"
            ),
        }
    }
}

/// One vCPU's home CPU and policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub vcpu: VcpuRef,
    pub cpu: usize,
    pub policy: Policy,
}

/// The home of every vCPU of `vms` (in bundle order) on a board of `cpus` CPUs, of which
/// `usable` says which may run vCPUs; `boot_cpu` is the CPU this runs on; a shared VM's
/// slice is converted to counter ticks at `ticks_per_us`.
pub fn place_vcpus(
    vms: &[VmSpec<'static>],
    boot_cpu: usize,
    cpus: usize,
    usable: impl Fn(usize) -> bool,
    ticks_per_us: u64,
) -> Result<Vec<Home>, PlacementError> {
    let mut homes = Vec::new();
    let mut named = Vec::new();
    for (i, spec) in vms.iter().enumerate() {
        let placement = spec.placement;
        let policy = match placement.time_slice_us() {
            Some(us) => Policy::Shared { slice: (u64::from(us) * ticks_per_us).max(1) },
            None => Policy::Pinned,
        };
        for v in 0..spec.vcpus as usize {
            let Some(cpu) = placement.cpu_of(v).map(|c| c as usize) else { continue };
            if !usable(cpu) {
                return Err(PlacementError::CpuNotOnline { vm: i, name: spec.name, vcpu: v, cpu });
            }
            homes.push(Home { vcpu: vcpu_ref(i, v), cpu, policy });
            named.push(cpu);
        }
    }
    // An I/O CPU (a VM's `io_cpu`) runs no vCPU: it polls virtqueues (crate::io_core).
    let io_cpus: Vec<usize> = vms.iter().filter_map(|spec| spec.devices.io_cpu).map(|c| c as usize).collect();
    let mut free: Vec<usize> = Vec::new();
    for c in core::iter::once(boot_cpu).chain(0..cpus) {
        if usable(c) && !named.contains(&c) && !io_cpus.contains(&c) && !free.contains(&c) {
            free.push(c);
        }
    }
    let mut unplaced: Vec<(usize, usize)> = vms
        .iter()
        .enumerate()
        .filter(|(_, spec)| spec.placement.cpu_of(0).is_none())
        .flat_map(|(i, spec)| (0..spec.vcpus as usize).map(move |v| (v, i)))
        .collect();
    unplaced.sort_by_key(|&(v, i)| (v != 0, i, v));
    if unplaced.len() > free.len() {
        return Err(PlacementError::NotEnoughFreeCpus { vcpus: unplaced.len(), free: free.len() });
    }
    homes.extend(unplaced.iter().zip(&free).map(|(&(v, i), &cpu)| Home {
        vcpu: vcpu_ref(i, v),
        cpu,
        policy: Policy::Pinned,
    }));
    Ok(homes)
}
