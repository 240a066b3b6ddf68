//! Passthrough devices (`[[vm.passthrough]]`, docs/manifest.md): a board device given to one
//! VM. At boot each device's register window becomes a `DeviceMmio` region capability and
//! each of its SPIs an interrupt capability, from the board's device tree (never from
//! untyped memory); `vm::grant_resources` maps the region into the VM at the same address
//! and grants it the interrupts. While the VM runs, its physical SPIs are routed to the CPU
//! of its vCPU 0 and forwarded as hardware-mapped virtual SPIs to the VM the routing table
//! names (crate::interrupts::Routes::owner); when it is destroyed they are disabled and
//! deactivated before their grants are revoked.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use hyp_core::bundle::VmSpec;
use hyp_core::cap::{CapError, CapId, CapSpace, RegionKind};
use hyp_core::fdt::{DmaRange, DmaReach};
use hyp_core::guest_fdt::GuestPassthrough;
use hyp_core::manifest::{DeviceTreeDevices, IRQ_TYPE_LEVEL_HIGH};
use hyp_core::platform::PhysRange;

/// One SPI of a passthrough device.
#[derive(Clone, Copy, Debug)]
pub struct PassthroughSpi {
    pub intid: u32,
    /// Its interrupt capability (created at boot; granted to the VM at each creation).
    pub cap: CapId,
    /// The trigger flags of the board's device tree (IRQ_TYPE_*).
    pub flags: u32,
}

impl PassthroughSpi {
    /// Edge-triggered (IRQ_TYPE_EDGE_RISING or _FALLING), else level-sensitive.
    pub fn edge(&self) -> bool {
        self.flags & 0b11 != 0
    }
}

/// A passthrough device of one VM, with the capabilities the board description gave it.
#[derive(Clone, Debug)]
pub struct PassthroughDevice {
    pub name: &'static str,
    pub reg: PhysRange,
    /// Its `DeviceMmio` region capability.
    pub region: CapId,
    pub spis: Vec<PassthroughSpi>,
    /// The `compatible` of the board's node for the window, copied into the guest's tree.
    pub compatible: Vec<u8>,
    /// The board node's properties the guest's node copies (`guest_fdt::COPIED_PROPERTIES`).
    pub properties: Vec<(String, Vec<u8>)>,
    /// The rate of the fixed clock the guest's node gets (the manifest's `clock_hz`).
    pub clock_hz: Option<u32>,
    /// For a device of an identity-mapped VM: how its buses translate its DMA addresses
    /// (empty when they do not), which the guest's tree carries (docs/capability-model.md, D3).
    pub dma_ranges: Vec<DmaRange>,
}

impl PassthroughDevice {
    /// The node the guest's device tree gets for it.
    pub fn guest_node(&self) -> GuestPassthrough {
        GuestPassthrough {
            base: self.reg.base,
            size: self.reg.size,
            compatible: self.compatible.clone(),
            spis: self.spis.iter().map(|s| (s.intid - 32, s.flags)).collect(),
            properties: self.properties.clone(),
            clock_hz: self.clock_hz,
            dma_ranges: self.dma_ranges.clone(),
        }
    }
}

/// Why a passthrough device cannot be given, at boot.
#[derive(Debug)]
pub enum PassthroughError {
    /// The board's device tree has no node for the window (the manifest check passed, so
    /// the device tree changed under us or the check was skipped).
    NoBoardNode { vm: &'static str, device: &'static str, window: PhysRange },
    /// The window cannot become a device region capability (it overlaps memory the
    /// hypervisor hands out, or another region).
    Region { vm: &'static str, device: &'static str, window: PhysRange, error: CapError },
    /// The SPI cannot become an interrupt capability (another VM already has it).
    Interrupt { vm: &'static str, device: &'static str, intid: u32, error: CapError },
}

impl fmt::Display for PassthroughError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassthroughError::NoBoardNode { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: the board's device tree has no device at {window}; give the window of a device the board has"
            ),
            PassthroughError::Region { vm, device, window, error } => write!(
                f,
                "VM {vm}: passthrough {device}: its window {window} cannot be a device region ({error}); give a device window outside RAM and other VMs' devices"
            ),
            PassthroughError::Interrupt { vm, device, intid, error } => write!(
                f,
                "VM {vm}: passthrough {device}: INTID {intid} cannot be an interrupt capability ({error}); give each SPI to one VM"
            ),
        }
    }
}

/// Boot: the capabilities of every VM's passthrough devices, from the board description
/// (`board`: its device tree, against which `BootBundle::check_board` checked the manifest).
/// One list per VM, in bundle order.
pub fn from_board(
    caps: &mut CapSpace,
    vms: impl Iterator<Item = VmSpec<'static>>,
    board: &DeviceTreeDevices<'_>,
) -> Result<Vec<Vec<PassthroughDevice>>, PassthroughError> {
    let mut all = Vec::new();
    for spec in vms {
        let mut devices = Vec::new();
        for device in spec.passthrough.iter() {
            let (vm, name, window) = (spec.name, device.name, device.reg);
            let node = board.node_at(window).ok_or(PassthroughError::NoBoardNode { vm, device: name, window })?;
            let region = caps
                .add_device_region(window, RegionKind::DeviceMmio)
                .map_err(|error| PassthroughError::Region { vm, device: name, window, error })?;
            let mut spis = Vec::new();
            // An INTID listed twice for one device is the device's once (the manifest lets
            // it through as harmless; a second capability for it would be a duplicate).
            for (i, intid) in device.interrupts.iter().enumerate() {
                if device.interrupts.iter().take(i).any(|earlier| earlier == intid) {
                    continue;
                }
                let cap = caps.add_interrupt(intid).map_err(|error| PassthroughError::Interrupt {
                    vm,
                    device: name,
                    intid,
                    error,
                })?;
                spis.push(PassthroughSpi { intid, cap, flags: node.spi_flags(intid).unwrap_or(IRQ_TYPE_LEVEL_HIGH) });
            }
            // Only an identity-mapped VM's guest gives its device bus addresses that must be
            // the board's (a translated VM's devices do not DMA: the manifest checks).
            let dma_ranges = match (spec.identity_mapped, node.dma_reach()) {
                (Some(_), Some(DmaReach::Windows(windows))) => windows.iter().copied().collect(),
                _ => Vec::new(),
            };
            let properties = node.copied_properties().map(|p| (p.name.into(), p.value.into())).collect();
            devices.push(PassthroughDevice {
                name,
                reg: window,
                region,
                spis,
                compatible: node.compatible.into(),
                properties,
                clock_hz: device.clock_hz,
                dma_ranges,
            });
        }
        all.push(devices);
    }
    Ok(all)
}

/// The SPIs `spis`, as "34, 35", for log lines.
pub fn spi_list(spis: &[PassthroughSpi]) -> String {
    let mut out = String::new();
    for (i, spi) in spis.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}", spi.intid);
    }
    out
}
