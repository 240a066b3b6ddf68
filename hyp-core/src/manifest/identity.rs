//! The manifest's rules for identity-mapped VMs (docs/capability-model.md, "Identity-mapped
//! VMs", D1 to D3): the RAM a VM's `identity_mapped` names is whole 2 MiB blocks of the
//! board's RAM that nothing else holds, misses the guest's emulated windows and every other
//! identity-mapped VM, and lies where its DMA devices reach; and such a VM has a device that
//! needs it. The device rules (which devices may DMA at all) are in the parent's
//! `check_on_board`, beside the other passthrough rules.

use core::fmt;

use super::ManifestError;
use crate::bundle::{VirtioTransport, VmSpec, RAM_GRANULE};
use crate::guest_map::{EMULATED_BASE, EMULATED_END, IPA_BITS, PCI_WINDOWS_BASE, PCI_WINDOWS_END};
use crate::platform::PhysRange;

/// What holds a range of the board's RAM that no identity-mapped VM may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The hypervisor's image (code, data, stacks).
    Image,
    /// The hypervisor's heap (its page tables and objects).
    Heap,
    /// The device tree the firmware passed.
    DeviceTree,
    /// The boot bundle (the manifest and the guest images).
    BootBundle,
    /// The firmware's: a `/memreserve/` entry, a `/reserved-memory` child, a spin table.
    Firmware,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Holder::Image => "the hypervisor's image",
            Holder::Heap => "the hypervisor's heap",
            Holder::DeviceTree => "the board's device tree",
            Holder::BootBundle => "the boot bundle",
            Holder::Firmware => "memory the firmware reserves",
        })
    }
}

/// A range of the board's RAM and what holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldMemory {
    pub range: PhysRange,
    pub holder: Holder,
}

/// The guest's emulated windows, as a range of its IPA space.
pub const EMULATED: PhysRange = PhysRange { base: EMULATED_BASE, size: EMULATED_END - EMULATED_BASE };
/// The PCI host bridge's windows, which a VM has with `virtio_transport = "pci"`.
pub const PCI_WINDOWS: PhysRange = PhysRange { base: PCI_WINDOWS_BASE, size: PCI_WINDOWS_END - PCI_WINDOWS_BASE };

/// The rules that need no board (D1 in part, D2's alignment, the guest's windows).
pub(super) fn check_alone<'a>(vm: &VmSpec<'a>) -> Result<(), ManifestError<'a>> {
    let Some(base) = vm.identity_mapped else { return Ok(()) };
    let fits = base.checked_add(vm.memory).is_some_and(|end| end <= 1 << IPA_BITS);
    if !base.is_multiple_of(RAM_GRANULE) || !fits {
        return Err(ManifestError::IdentityBase { vm: vm.name, base });
    }
    if vm.passthrough.is_empty() {
        return Err(ManifestError::IdentityWithoutPassthrough { vm: vm.name });
    }
    let ram = PhysRange { base, size: vm.memory };
    if ram.overlaps(&EMULATED) {
        return Err(ManifestError::IdentityOverGuestDevices { vm: vm.name, ram });
    }
    if vm.devices.transport == VirtioTransport::Pci && ram.overlaps(&PCI_WINDOWS) {
        return Err(ManifestError::IdentityOverPciWindows { vm: vm.name, ram });
    }
    Ok(())
}

/// `vm` against a VM listed before it: their identity-mapped RAM is disjoint.
pub(super) fn check_pair<'a>(vm: &VmSpec<'a>, earlier: &VmSpec<'a>) -> Result<(), ManifestError<'a>> {
    if let (Some(ram), Some(other_ram)) = (vm.identity_ram(), earlier.identity_ram()) {
        if ram.overlaps(&other_ram) {
            return Err(ManifestError::IdentityOverlap { vm: vm.name, ram, other: earlier.name, other_ram });
        }
    }
    Ok(())
}

/// D2 on the board: inside one of its RAM ranges, outside what the hypervisor and firmware
/// hold.
pub(super) fn check_placement<'a>(
    vm: &VmSpec<'a>,
    board_ram: &[PhysRange],
    held: &[HeldMemory],
) -> Result<(), ManifestError<'a>> {
    let Some(ram) = vm.identity_ram() else { return Ok(()) };
    if !board_ram.iter().any(|r| ram.base >= r.base && ram.end() <= r.end()) {
        return Err(ManifestError::IdentityNotInRam { vm: vm.name, ram });
    }
    if let Some(held) = held.iter().find(|h| h.range.size > 0 && h.range.overlaps(&ram)) {
        return Err(ManifestError::IdentityOverHeld { vm: vm.name, ram, held: *held });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
