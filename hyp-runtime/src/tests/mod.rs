//! Host tests of the runtime through the fake architecture (`crate::fake`).

mod cpus;
mod hypervisor;
mod interrupts;
mod management;
mod network;
mod passthrough;
mod pci;
mod placement;
mod scheduling;
mod shared_vgic;
mod tlb;
mod vcpu_run;
mod virtio;
mod vm;
mod vm_resources;
mod vm_table;

use std::boxed::Box;
use std::vec::Vec;

use hyp_core::bundle::{Placement, U32List, VmDevices, VmSpec};
use hyp_core::manifest::Policy;

/// A manifest entry: `cpus` names each vCPU's CPU (or none), `shared` the policy.
pub(crate) fn spec(name: &'static str, vcpus: u32, cpus: Option<&[u32]>, shared: bool) -> VmSpec<'static> {
    let cpus = cpus.map(|list| {
        let bytes: Vec<u8> = list.iter().flat_map(|c| c.to_be_bytes()).collect();
        U32List::new(Box::leak(bytes.into_boxed_slice())).expect("whole cells")
    });
    VmSpec {
        name,
        vcpus,
        memory: 64 << 20,
        kernel: &[],
        initrd: None,
        bootargs: None,
        device_tree: None,
        devices: VmDevices::default(),
        placement: Placement { cpus, policy: if shared { Policy::Shared } else { Policy::Pinned }, slice_us: None },
        passthrough: Default::default(),
        identity_mapped: None,
    }
}

/// A value that lives as long as the test binary (the runtime's state is `'static` in an image).
pub(crate) fn leak<T>(value: T) -> &'static T {
    Box::leak(Box::new(value))
}
