//! The rules a manifest's VMs must keep (docs/manifest.md), in one place: `cargo xtask`
//! checks them before it writes a boot bundle, against the board it will run (QEMU's
//! `virt`), and the hypervisor checks them again at boot, against the board it found.
//!
//! [`check_vms`] holds what is true on any board (names, vCPU counts, memory granules, disk
//! slices that do not overlap, CPUs and devices not claimed twice); [`check`] adds what
//! depends on the board ([`BoardLimits`]: CPUs that exist, memory it has, devices it has).
//! Every error names the VM and the field and says what to do.
//!
//! Pure and allocation-free: VMs come as a `Clone` iterator and are compared pairwise
//! (manifests have a handful of VMs).

use core::fmt;

use crate::fdt::{DmaReach, Fdt, Node, Property};

mod identity;
pub use identity::{HeldMemory, Holder};

use crate::bundle::{DiskSlice, Passthrough, VirtioTransport, VmSpec, MAX_VCPUS, RAM_GRANULE, SECTOR_SIZE};
use crate::guest_map::{VirtioSlot, UART_SPI};
use crate::platform::{PhysRange, Platform, MAX_VIRTIO_MMIO};

/// A shared vCPU's time slice when the manifest gives none, in microseconds.
pub const DEFAULT_SLICE_US: u32 = 10_000;
/// Passthrough interrupts are SPIs: INTIDs 32 to 1019.
pub const SPI_INTIDS: core::ops::RangeInclusive<u32> = 32..=1019;
/// Passthrough windows are mapped by stage 2 in pages of this size.
pub const PAGE_SIZE: u64 = 4096;

/// How a VM's vCPUs share their physical CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Each vCPU owns its CPU: no tick, WFI does not trap, never preempted.
    #[default]
    Pinned,
    /// The vCPUs on a CPU take turns of a time slice.
    Shared,
}

impl Policy {
    /// The policy a manifest names: `"pinned"` or `"shared"`.
    pub fn from_name(name: &str) -> Option<Policy> {
        match name {
            "pinned" => Some(Policy::Pinned),
            "shared" => Some(Policy::Shared),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Policy::Pinned => "pinned",
            Policy::Shared => "shared",
        }
    }
}

/// What the manifest is checked against.
pub struct BoardLimits<'b> {
    /// Physical CPUs, numbered 0 to `cpus - 1` (the enabled CPUs of the device tree, in order).
    pub cpus: usize,
    /// Bytes of RAM the VMs can have in all (the board's RAM less what the hypervisor, its
    /// heap and the loaded images take).
    pub memory: u64,
    /// The board's RAM: no passthrough window may overlap it.
    pub ram: &'b [PhysRange],
    /// Register windows the hypervisor drives itself (its UART, the GIC, the virtio-mmio
    /// transports): never passed through.
    pub hypervisor_devices: &'b [PhysRange],
    /// The size of the board's virtio disk, of which VM disks are slices; `None`: no disk.
    pub disk: Option<u64>,
    /// The devices the board has.
    pub devices: &'b dyn BoardDevices,
    /// RAM the hypervisor or the firmware holds (its image, heap, device tree, the boot
    /// bundle, reserved memory, spin tables): no identity-mapped VM's RAM may overlap it.
    pub held: &'b [HeldMemory],
}

/// The board's devices, as a table ([`DeviceTable`]: what xtask knows of QEMU's `virt`) or its device tree ([`DeviceTreeDevices`]: what the hypervisor finds at boot).
pub trait BoardDevices {
    /// The register window of the board device that `window` lies in, if there is one: a
    /// window of whole pages lies in a device when it lies in the device's registers
    /// rounded out to pages (a device of 0x100 bytes is given as its page).
    fn device_at(&self, window: PhysRange) -> Option<PhysRange>;
    /// The register window of a board device other than `device` that `window` overlaps:
    /// a page given to a VM must hold one device's registers only.
    fn other_device_in(&self, window: PhysRange, device: PhysRange) -> Option<PhysRange>;
    /// Whether the device whose register window is `device` raises `intid`.
    fn raises(&self, device: PhysRange, intid: u32) -> bool;
    /// Why the device whose register window is `device` may access memory by DMA; `None`
    /// when it is known not to (`dma_capability`).
    fn dma(&self, device: PhysRange) -> Option<DmaReason>;
    /// Whether the device is one of the GIC's MSI frames (an `arm,gic...` node with
    /// `msi-controller`: the GICv3 ITS, a GICv2m frame), which turn a write into an
    /// interrupt for whichever device the board wired to them: the GIC's, never a VM's. A
    /// board described as a table lists none.
    fn is_gic_msi_frame(&self, _device: PhysRange) -> bool {
        false
    }
    /// What the device's DMA reaches through the buses above it (`fdt::Node::dma_reach`);
    /// `None` when that cannot be read. A board described as a table has no buses.
    fn dma_reach(&self, _device: PhysRange) -> Option<DmaReach> {
        Some(DmaReach::Everything)
    }
    /// Whether the device is driven by a clock the VM has no controller for, so that the
    /// manifest must give its rate (`clock_hz`). PrimeCell devices are not: the guest's
    /// device tree gives them its bus clock. A board described as a table names no clocks.
    fn needs_clock(&self, _device: PhysRange) -> bool {
        false
    }
}

/// `window` rounded out to whole pages.
fn pages_of(window: PhysRange) -> PhysRange {
    let base = window.base & !(PAGE_SIZE - 1);
    let end = window.end().checked_next_multiple_of(PAGE_SIZE).unwrap_or(!(PAGE_SIZE - 1));
    PhysRange { base, size: end - base }
}

/// Devices that cannot master the bus, by their most specific `compatible` (the first
/// string): given to a VM without an SMMU, they reach nothing but their own registers. Any
/// other device is taken to be able to DMA, which the hypervisor cannot confine without an
/// SMMU (docs/manifest.md, "Passthrough devices and DMA").
pub const DMA_FREE_DEVICES: [(&str, &str); 5] = [
    ("arm,pl031", "real-time clock"),
    ("arm,pl061", "GPIO controller"),
    ("arm,sp804", "dual timer"),
    ("arm,sp805", "watchdog"),
    // A PL011 uses DMA only through a DMA controller named by `dmas`, refused below.
    ("arm,pl011", "UART"),
];

/// Device-tree properties that say a device masters the bus or uses a DMA controller
/// (Devicetree Specification 0.4, 2.3.9-2.3.10; the `dmas` and `iommus` bindings).
pub const DMA_PROPERTIES: [&str; 5] = ["dmas", "iommus", "dma-coherent", "dma-noncoherent", "dma-ranges"];

/// Why a device is taken to be able to DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaReason {
    /// Its first `compatible` string is not in `DMA_FREE_DEVICES` (or it has none).
    NotKnownDmaFree,
    /// It has this property of `DMA_PROPERTIES`.
    Property(&'static str),
}

/// The DMA verdict for a device with this `compatible` (its first string) and these
/// property names.
pub fn dma_capability(compatible: &str, mut has_property: impl FnMut(&'static str) -> bool) -> Option<DmaReason> {
    if let Some(property) = DMA_PROPERTIES.iter().copied().find(|p| has_property(p)) {
        return Some(DmaReason::Property(property));
    }
    if DMA_FREE_DEVICES.iter().any(|(c, _)| *c == compatible) {
        None
    } else {
        Some(DmaReason::NotKnownDmaFree)
    }
}

/// The register windows the hypervisor drives itself on `platform`, for
/// [`BoardLimits::hypervisor_devices`]: its UART, the GIC's frames, the virtio-mmio
/// transports, the power controller it powers the board off with (the BCM2835 power
/// manager) and the system registers it starts CPUs through (Versatile Express SYS_FLAGS).
pub fn hypervisor_windows(platform: &Platform<'_>) -> heapless::Vec<PhysRange, { MAX_VIRTIO_MMIO + 8 }> {
    use crate::platform::{CpuStart, PowerController};
    let gic = &platform.gic;
    let frames = [gic.redistributors, gic.cpu_interface, gic.hyp_interface, gic.virtual_cpu_interface];
    let power = platform.power_controller.map(|PowerController::Bcm2835Pm { registers }| registers);
    // Every CPU started through SYS_FLAGS names the same window: listed once.
    let sys_flags = platform.cpu_start.iter().find_map(|start| match start {
        CpuStart::SysFlags(flags) => Some(flags.registers),
        _ => None,
    });
    [platform.uart, gic.distributor]
        .into_iter()
        .chain(frames.into_iter().flatten())
        .chain([power, sys_flags].into_iter().flatten())
        .chain(platform.virtio_mmio.iter().map(|t| t.window))
        .collect()
}

/// One device of a board described as a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardDevice<'b> {
    pub name: &'b str,
    pub reg: PhysRange,
    pub intids: &'b [u32],
    /// Its first `compatible` string.
    pub compatible: &'b str,
    /// The `DMA_PROPERTIES` its device-tree node has.
    pub dma_properties: &'b [&'b str],
}

fn within(window: PhysRange, device: PhysRange) -> bool {
    window.base >= device.base && window.end() <= device.end()
}

/// `DMA_FREE_DEVICES`' compatibles, for messages.
struct DmaFreeList;

impl fmt::Display for DmaFreeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (compatible, _)) in DMA_FREE_DEVICES.iter().enumerate() {
            write!(f, "{}{compatible}", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

/// A board's devices as a table.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTable<'b>(pub &'b [BoardDevice<'b>]);

impl BoardDevices for DeviceTable<'_> {
    fn device_at(&self, window: PhysRange) -> Option<PhysRange> {
        self.0.iter().map(|d| d.reg).find(|&reg| within(window, pages_of(reg)) && window.overlaps(&reg))
    }
    fn other_device_in(&self, window: PhysRange, device: PhysRange) -> Option<PhysRange> {
        self.0.iter().map(|d| d.reg).find(|&reg| reg != device && reg.overlaps(&window))
    }
    fn raises(&self, device: PhysRange, intid: u32) -> bool {
        self.0.iter().any(|d| d.reg == device && d.intids.contains(&intid))
    }
    fn dma(&self, device: PhysRange) -> Option<DmaReason> {
        let d = self.0.iter().find(|d| d.reg == device)?;
        dma_capability(d.compatible, |p| d.dma_properties.contains(&p))
    }
}

/// The devices of a flattened device tree: every enabled node with a `reg` window (memory
/// nodes aside), and its `interrupts` as GIC specifiers (3 cells: type, number, flags).
pub struct DeviceTreeDevices<'a> {
    fdt: Fdt<'a>,
}

impl<'a> DeviceTreeDevices<'a> {
    /// `None` when `blob` is not a device tree.
    pub fn new(blob: &'a [u8]) -> Option<Self> {
        Fdt::new(blob).ok().map(|fdt| DeviceTreeDevices { fdt })
    }

    fn windows(&self) -> impl Iterator<Item = (Node<'a>, PhysRange)> + 'a {
        self.fdt
            .all_nodes()
            .filter(|n| n.property("device_type").and_then(|p| p.as_str()) != Some("memory") && n.is_enabled())
            .flat_map(|n| n.physical_reg().filter_map(move |r| Some((n, PhysRange { base: r.address, size: r.size? }))))
    }
}

/// What the board's device tree says of the device a passthrough window lies in: what the
/// hypervisor copies into the guest's device tree and uses to configure the physical SPIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTreeNode<'a> {
    /// The device's whole register window (the node's `reg` entry holding the window).
    pub reg: PhysRange,
    /// The node's raw `compatible` property (NUL-separated strings); empty if it has none.
    pub compatible: &'a [u8],
    /// The node's raw `interrupts` property (3-cell GIC specifiers).
    interrupts: &'a [u8],
    node: Node<'a>,
}

/// The GIC binding's trigger flags for level-high (dt-bindings/interrupt-controller/irq.h).
pub const IRQ_TYPE_LEVEL_HIGH: u32 = 4;

impl<'a> DeviceTreeNode<'a> {
    /// The node's properties the guest's device tree copies (`guest_fdt::COPIED_PROPERTIES`:
    /// those that describe the controller itself and name no other node).
    pub fn copied_properties(&self) -> impl Iterator<Item = Property<'a>> + 'a {
        self.node.properties().filter(|p| crate::guest_fdt::COPIED_PROPERTIES.contains(&p.name))
    }

    /// What the device's DMA reaches through the board's buses (`fdt::Node::dma_reach`).
    pub fn dma_reach(&self) -> Option<DmaReach> {
        self.node.dma_reach()
    }

    /// The specifier flags of SPI `intid` (IRQ_TYPE_EDGE_RISING 1, _EDGE_FALLING 2,
    /// _LEVEL_HIGH 4, _LEVEL_LOW 8), or `None` if the node does not list it.
    pub fn spi_flags(&self, intid: u32) -> Option<u32> {
        self.interrupts.chunks_exact(12).find_map(|spec| {
            let cell = |i: usize| u32::from_be_bytes([spec[i], spec[i + 1], spec[i + 2], spec[i + 3]]);
            (cell(0) == 0 && cell(4).checked_add(32) == Some(intid)).then(|| cell(8))
        })
    }
}

impl<'a> DeviceTreeDevices<'a> {
    /// The node of the board device that `window` lies in (the one the manifest checks found).
    pub fn node_at(&self, window: PhysRange) -> Option<DeviceTreeNode<'a>> {
        self.windows().find(|&(_, reg)| within(window, pages_of(reg)) && window.overlaps(&reg)).map(|(node, reg)| {
            DeviceTreeNode {
                reg,
                compatible: node.property("compatible").map_or(&[][..], |p| p.value),
                interrupts: node.property("interrupts").map_or(&[][..], |p| p.value),
                node,
            }
        })
    }
}

impl BoardDevices for DeviceTreeDevices<'_> {
    fn device_at(&self, window: PhysRange) -> Option<PhysRange> {
        self.windows().map(|(_, reg)| reg).find(|&reg| within(window, pages_of(reg)) && window.overlaps(&reg))
    }
    fn other_device_in(&self, window: PhysRange, device: PhysRange) -> Option<PhysRange> {
        self.windows().map(|(_, reg)| reg).find(|&reg| reg != device && reg.overlaps(&window))
    }
    fn dma_reach(&self, device: PhysRange) -> Option<DmaReach> {
        self.windows().find(|&(_, reg)| reg == device)?.0.dma_reach()
    }
    fn is_gic_msi_frame(&self, device: PhysRange) -> bool {
        self.windows().any(|(node, reg)| {
            reg == device
                && node.property("msi-controller").is_some()
                && node.compatible().any(|c| c.starts_with("arm,gic"))
        })
    }
    fn needs_clock(&self, device: PhysRange) -> bool {
        self.windows().find(|&(_, reg)| reg == device).is_some_and(|(node, _)| {
            node.property("clocks").is_some() && !node.compatible().any(|c| c == "arm,primecell")
        })
    }
    fn raises(&self, device: PhysRange, intid: u32) -> bool {
        self.windows().filter(|&(_, reg)| reg == device).any(|(node, _)| {
            let Some(p) = node.property("interrupts") else { return false };
            p.value.chunks_exact(12).any(|spec| {
                let cell = |i: usize| u32::from_be_bytes([spec[i], spec[i + 1], spec[i + 2], spec[i + 3]]);
                let found = match cell(0) {
                    0 => cell(4).checked_add(32),
                    1 => cell(4).checked_add(16),
                    _ => None,
                };
                found == Some(intid)
            })
        })
    }
    fn dma(&self, device: PhysRange) -> Option<DmaReason> {
        let (node, _) = self.windows().find(|&(_, reg)| reg == device)?;
        // The first of its NUL-separated strings: the most specific.
        let raw = node.property("compatible").map_or(&[][..], |p| p.value);
        let first = raw.split(|&b| b == 0).next().unwrap_or(&[]);
        let compatible = core::str::from_utf8(first).unwrap_or("");
        dma_capability(compatible, |p| node.property(p).is_some())
    }
}

/// A manifest rule broken: names the VM and the field (Display says what to do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestError<'a> {
    BadName {
        vm: &'a str,
    },
    /// A passthrough device may access memory by DMA, and nothing confines it (no SMMU).
    PassthroughCanDma {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
        reason: DmaReason,
    },
    /// Two VMs' NICs have the same MAC address (given, or the default of the VM's index).
    MacTaken {
        vm: &'a str,
        mac: [u8; 6],
        other: &'a str,
    },
    DuplicateName {
        vm: &'a str,
    },
    Vcpus {
        vm: &'a str,
        vcpus: u32,
    },
    Memory {
        vm: &'a str,
        memory: u64,
    },
    /// With this VM the VMs need `total` bytes; the board has `available` for VMs.
    TooMuchMemory {
        vm: &'a str,
        total: u64,
        available: u64,
    },
    DiskNotSectors {
        vm: &'a str,
    },
    DiskOverlap {
        vm: &'a str,
        disk: DiskSlice,
        other: &'a str,
        other_disk: DiskSlice,
    },
    /// The board has no disk (`board_disk` None) or a smaller one.
    DiskBeyondBoard {
        vm: &'a str,
        disk: DiskSlice,
        board_disk: Option<u64>,
    },
    MacNotUnicast {
        vm: &'a str,
    },
    UnknownPolicy {
        vm: &'a str,
        given: &'a str,
    },
    SliceForPinned {
        vm: &'a str,
    },
    SliceZero {
        vm: &'a str,
    },
    SharedWithoutCpus {
        vm: &'a str,
    },
    CpusLength {
        vm: &'a str,
        cpus: usize,
        vcpus: u32,
    },
    NoSuchCpu {
        vm: &'a str,
        cpu: u32,
        board_cpus: usize,
    },
    /// `cpu` is claimed by a vCPU of `vm` and one of `other` (maybe `vm` itself), and one
    /// of the two is pinned.
    CpuTaken {
        vm: &'a str,
        cpu: u32,
        policy: Policy,
        other: &'a str,
        other_policy: Policy,
    },
    /// `io_cpu` is given but the VM has neither a disk nor a NIC for it to serve.
    IoCpuWithoutDevices {
        vm: &'a str,
    },
    /// `io_cpu` names a CPU the board does not have.
    NoSuchIoCpu {
        vm: &'a str,
        cpu: u32,
        board_cpus: usize,
    },
    /// `vm`'s `io_cpu` is a CPU that `other`'s `cpus` runs a vCPU on (maybe `vm` itself):
    /// an I/O CPU polls, it runs no vCPU.
    IoCpuRunsVcpu {
        vm: &'a str,
        cpu: u32,
        other: &'a str,
    },
    /// VMs without `cpus` pin each vCPU to a CPU no VM lists; too few are left.
    NotEnoughFreeCpus {
        vm: &'a str,
        wanted: u32,
        free: usize,
        board_cpus: usize,
    },
    PassthroughNotPages {
        vm: &'a str,
        device: &'a str,
    },
    PassthroughOverlap {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
        other: &'a str,
        other_device: &'a str,
    },
    PassthroughInRam {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    /// The window ends beyond the VM's IPA space (`guest_map::IPA_BITS`).
    PassthroughBeyondIpaSpace {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    /// The window lies where the guest has its RAM or its emulated devices (`guest_map`).
    PassthroughOverGuestLayout {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    PassthroughHypervisorDevice {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    UnknownDevice {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    NotAnSpi {
        vm: &'a str,
        device: &'a str,
        intid: u32,
    },
    InterruptNotOfDevice {
        vm: &'a str,
        device: &'a str,
        intid: u32,
        window: PhysRange,
    },
    /// A passthrough INTID is one the VM's own emulated devices raise (its UART, its
    /// virtio transports: `guest_map`).
    InterruptOfGuestDevice {
        vm: &'a str,
        device: &'a str,
        intid: u32,
    },
    InterruptTaken {
        vm: &'a str,
        device: &'a str,
        intid: u32,
        other: &'a str,
        other_device: &'a str,
    },
    /// The page-rounded window also holds another device's registers.
    PassthroughSharesPage {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
        other: PhysRange,
    },
    /// The device's node says an IOMMU stands in front of it (`iommus`): nothing programs it.
    PassthroughBehindIommu {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    /// The device is driven by a clock the VM has no controller for, and `clock_hz` is missing.
    PassthroughNeedsClock {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
    /// `identity_mapped`'s base is not a multiple of 2 MiB, or the RAM runs past the IPA space.
    IdentityBase {
        vm: &'a str,
        base: u64,
    },
    /// An identity-mapped VM without a passthrough device.
    IdentityWithoutPassthrough {
        vm: &'a str,
    },
    /// Its RAM overlaps the guest's emulated windows (which share its IPA space).
    IdentityOverGuestDevices {
        vm: &'a str,
        ram: PhysRange,
    },
    /// Its RAM overlaps the PCI host bridge's windows, which its virtio transport gives it.
    IdentityOverPciWindows {
        vm: &'a str,
        ram: PhysRange,
    },
    /// Two identity-mapped VMs' RAM overlaps.
    IdentityOverlap {
        vm: &'a str,
        ram: PhysRange,
        other: &'a str,
        other_ram: PhysRange,
    },
    /// Its RAM is not inside one of the board's RAM ranges.
    IdentityNotInRam {
        vm: &'a str,
        ram: PhysRange,
    },
    /// Its RAM overlaps memory the hypervisor or the firmware holds.
    IdentityOverHeld {
        vm: &'a str,
        ram: PhysRange,
        held: HeldMemory,
    },
    /// None of its passthrough devices can DMA.
    IdentityWithoutDma {
        vm: &'a str,
    },
    /// Its RAM is not where a DMA device of it reaches (`reach`: the first window's CPU
    /// addresses; `None`: it reaches no memory).
    IdentityBeyondDma {
        vm: &'a str,
        device: &'a str,
        ram: PhysRange,
        reach: Option<PhysRange>,
    },
    /// What a DMA device of it reaches cannot be read from the board's device tree.
    DmaReachUnknown {
        vm: &'a str,
        device: &'a str,
        window: PhysRange,
    },
}

struct Mib(u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} MiB", self.0 >> 20)
    }
}

/// A disk slice as bytes `offset..end`, or `offset..` the end of the disk.
struct Slice(DiskSlice);

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.size {
            0 => write!(f, "{:#x}..(end of disk)", self.0.offset),
            size => write!(f, "{:#x}..{:#x}", self.0.offset, self.0.offset.saturating_add(size)),
        }
    }
}

struct Cpus(usize);

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => write!(f, "no CPU"),
            1 => write!(f, "CPU 0 only"),
            n => write!(f, "CPUs 0-{}", n - 1),
        }
    }
}

fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

impl fmt::Display for ManifestError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadName { vm } => write!(f, "VM {vm}: field `name` must be letters, digits, '-' or '_'"),
            Self::DuplicateName { vm } => write!(f, "VM {vm}: two VMs have this name"),
            Self::PassthroughCanDma { vm, device, window, reason } => {
                write!(f, "VM {vm}: passthrough {device}: the board's device at {window} ")?;
                match reason {
                    DmaReason::Property(p) => write!(f, "has `{p}` in its device tree: it can access memory by DMA")?,
                    DmaReason::NotKnownDmaFree => write!(
                        f,
                        "is not one known to have no DMA (its first `compatible` is not among {})",
                        DmaFreeList
                    )?,
                };
                write!(
                    f,
                    ", and with no SMMU to confine it, it could read and write the hypervisor's and other VMs' \
                     memory; give a device that cannot master the bus, or map the VM's RAM at IPA = PA with \
                     `identity_mapped` (docs/manifest.md)"
                )
            }
            Self::MacTaken { vm, mac: m, other } => write!(
                f,
                "VM {vm}: field `mac`: {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} is also VM {other}'s NIC address; give \
                 each NIC its own (the switch delivers frames by address)",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            Self::Vcpus { vm, .. } => write!(f, "VM {vm}: field `vcpus` must be between 1 and {MAX_VCPUS}"),
            Self::Memory { vm, .. } => write!(f, "VM {vm}: field `memory` must be a non-zero multiple of 2 MiB"),
            Self::TooMuchMemory { vm, total, available } => write!(
                f,
                "VM {vm}: field `memory`: with this VM the VMs need {} but the board has {} for VMs; \
                 give the VMs less memory or the board more",
                Mib(total),
                Mib(available)
            ),
            Self::DiskNotSectors { vm } => {
                write!(f, "VM {vm}: field `disk` offset and size must be multiples of 512 bytes")
            }
            Self::DiskOverlap { vm, disk, other, other_disk } => write!(
                f,
                "VM {vm}: field `disk`: bytes {} of the board's disk overlap VM {other}'s disk ({}); \
                 give each VM its own slice",
                Slice(disk),
                Slice(other_disk)
            ),
            Self::DiskBeyondBoard { vm, disk, board_disk: None } => write!(
                f,
                "VM {vm}: field `disk`: the board has no disk to take bytes {} of; remove `disk` or give the board a disk",
                Slice(disk)
            ),
            Self::DiskBeyondBoard { vm, disk, board_disk: Some(size) } => write!(
                f,
                "VM {vm}: field `disk`: bytes {} go past the end of the board's disk ({size:#x} bytes); \
                 give a slice within it",
                Slice(disk)
            ),
            Self::MacNotUnicast { vm } => {
                write!(f, "VM {vm}: field `mac` must be a unicast address (first byte even), not all zeros")
            }
            Self::UnknownPolicy { vm, given } => {
                write!(f, "VM {vm}: field `policy`: \"{given}\" is not a policy; write \"pinned\" or \"shared\"")
            }
            Self::SliceForPinned { vm } => write!(
                f,
                "VM {vm}: field `slice_us` is for shared VMs (a pinned vCPU runs tickless); \
                 remove it or write policy = \"shared\""
            ),
            Self::SliceZero { vm } => write!(
                f,
                "VM {vm}: field `slice_us` is 0: the vCPUs would never run; give at least 1 \
                 (default {DEFAULT_SLICE_US})"
            ),
            Self::SharedWithoutCpus { vm } => write!(
                f,
                "VM {vm}: field `cpus` is missing: a shared VM names the CPU of each vCPU; add `cpus`"
            ),
            Self::CpusLength { vm, cpus, vcpus } => write!(
                f,
                "VM {vm}: field `cpus` lists {cpus} {} but the VM has {vcpus} {}; give one CPU per vCPU",
                plural(cpus as u64, "CPU", "CPUs"),
                plural(u64::from(vcpus), "vCPU", "vCPUs")
            ),
            Self::NoSuchCpu { vm, cpu, board_cpus } => write!(
                f,
                "VM {vm}: field `cpus`: CPU {cpu} does not exist (the board has {}); name one of those",
                Cpus(board_cpus)
            ),
            Self::CpuTaken { vm, cpu, other, .. } if vm == other => write!(
                f,
                "VM {vm}: field `cpus`: CPU {cpu} is listed for two of its pinned vCPUs, but a pinned vCPU needs a \
                 CPU of its own; list another CPU, or make the VM shared (its vCPUs then take turns)"
            ),
            Self::CpuTaken { vm, cpu, policy: Policy::Pinned, other, other_policy: Policy::Pinned } => write!(
                f,
                "VM {vm}: field `cpus`: CPU {cpu} is already pinned to VM {other}, and a pinned vCPU needs a CPU of \
                 its own; choose another CPU"
            ),
            Self::CpuTaken { vm, cpu, policy: Policy::Pinned, other, .. } => write!(
                f,
                "VM {vm}: field `cpus`: CPU {cpu} already runs shared VM {other}, and a pinned vCPU needs a CPU of \
                 its own; choose another CPU, or make both VMs shared"
            ),
            Self::CpuTaken { vm, cpu, other, .. } => write!(
                f,
                "VM {vm}: field `cpus`: CPU {cpu} is pinned to VM {other}, so shared vCPUs cannot run there; \
                 choose another CPU"
            ),
            Self::IoCpuWithoutDevices { vm } => write!(
                f,
                "VM {vm}: field `io_cpu`: the VM has no `disk` and no `network` for an I/O CPU to serve; remove \
                 `io_cpu`, or give the VM a disk or a NIC"
            ),
            Self::NoSuchIoCpu { vm, cpu, board_cpus } => write!(
                f,
                "VM {vm}: field `io_cpu`: CPU {cpu} does not exist (the board has {}); name one of those",
                Cpus(board_cpus)
            ),
            Self::IoCpuRunsVcpu { vm, cpu, other } if vm == other => write!(
                f,
                "VM {vm}: field `io_cpu`: CPU {cpu} is also in its `cpus`, but an I/O CPU runs no vCPU (it polls \
                 the virtqueues); choose a CPU no vCPU runs on"
            ),
            Self::IoCpuRunsVcpu { vm, cpu, other } => write!(
                f,
                "VM {vm}: field `io_cpu`: CPU {cpu} runs a vCPU of VM {other} (its `cpus`), but an I/O CPU runs no \
                 vCPU (it polls the virtqueues); choose a CPU no vCPU runs on"
            ),
            Self::NotEnoughFreeCpus { vm, wanted, free, board_cpus } => write!(
                f,
                "VM {vm}: field `vcpus`: without `cpus`, each of its {wanted} {} is pinned to a CPU no VM lists, \
                 but only {free} of the board's {board_cpus} CPUs {} left; give it `cpus`, or fewer vCPUs",
                plural(u64::from(wanted), "vCPU", "vCPUs"),
                plural(free as u64, "is", "are")
            ),
            Self::PassthroughNotPages { vm, device } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` must be whole 4 KiB pages (base and size multiples of \
                 0x1000, size not 0)"
            ),
            Self::PassthroughOverlap { vm, device, window, other, other_device } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} overlaps passthrough {other_device} of VM \
                 {other}; a device belongs to one VM"
            ),
            Self::PassthroughInRam { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} overlaps the board's RAM; give a device's \
                 register window"
            ),
            Self::PassthroughBeyondIpaSpace { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} ends beyond the VM's {}-bit IPA space, where \
                 it would be mapped (IPA = PA); this device cannot be given to a VM",
                crate::guest_map::IPA_BITS
            ),
            Self::PassthroughOverGuestLayout { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} is mapped at the same address in the VM, where \
                 it has its RAM or one of its emulated GIC, UART and virtio windows; this device cannot be given to \
                 this VM (a smaller `memory_mib` may leave its address free)"
            ),
            Self::PassthroughHypervisorDevice { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} is a device the hypervisor drives itself (its \
                 UART, the GIC or a virtio transport); it cannot be passed through"
            ),
            Self::UnknownDevice { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg`: the board has no device at {window}; give the window of \
                 one of its devices (see docs/manifest.md)"
            ),
            Self::NotAnSpi { vm, device, intid } => write!(
                f,
                "VM {vm}: passthrough {device}: field `interrupts`: INTID {intid} is not an SPI; give INTIDs \
                 32-1019 (SPI n is INTID 32 + n)"
            ),
            Self::InterruptNotOfDevice { vm, device, intid, window } => write!(
                f,
                "VM {vm}: passthrough {device}: field `interrupts`: INTID {intid} is not an interrupt of the \
                 board's device at {window}; give that device's own interrupts"
            ),
            Self::InterruptOfGuestDevice { vm, device, intid } => write!(
                f,
                "VM {vm}: passthrough {device}: field `interrupts`: INTID {intid} is the VM's own UART's or virtio \
                 device's interrupt in its GIC; a passthrough device cannot share it (this board cannot give that \
                 device to a VM)"
            ),
            Self::InterruptTaken { vm, device, intid, other, other_device } => write!(
                f,
                "VM {vm}: passthrough {device}: field `interrupts`: INTID {intid} is already given to VM {other} \
                 (passthrough {other_device}); an interrupt goes to one VM"
            ),
            Self::PassthroughSharesPage { vm, device, window, other } => write!(
                f,
                "VM {vm}: passthrough {device}: field `reg` {window} also holds the registers of the board's device \
                 at {other}; a page given to a VM must hold one device's registers only"
            ),
            Self::PassthroughBehindIommu { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: the board's device at {window} sits behind an IOMMU (`iommus`), \
                 which this hypervisor does not program: its DMA would go through translations nobody set up; \
                 give another device"
            ),
            Self::PassthroughNeedsClock { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: the board's device at {window} is driven by a clock (`clocks`) the \
                 VM has no controller for; give its rate in `clock_hz` (the rate the firmware set)"
            ),
            Self::IdentityBase { vm, base } => write!(
                f,
                "VM {vm}: field `identity_mapped`: base {base:#x} must be a multiple of 2 MiB with base + memory \
                 within the VM's {}-bit IPA space",
                crate::guest_map::IPA_BITS
            ),
            Self::IdentityWithoutPassthrough { vm } => write!(
                f,
                "VM {vm}: field `identity_mapped` is for a VM given a device that does DMA (`[[vm.passthrough]]`); \
                 without one its RAM can lie anywhere: remove it"
            ),
            Self::IdentityOverGuestDevices { vm, ram } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} overlaps the guest's emulated devices (GIC, UART, \
                 virtio) at {}; give a base outside them",
                identity::EMULATED
            ),
            Self::IdentityOverPciWindows { vm, ram } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} overlaps the PCI host bridge's windows at {}, which \
                 `virtio_transport = \"pci\"` gives it; give a base outside them, or leave its transport \"mmio\"",
                identity::PCI_WINDOWS
            ),
            Self::IdentityOverlap { vm, ram, other, other_ram } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} overlaps VM {other}'s ({other_ram}); give each \
                 its own physical memory"
            ),
            Self::IdentityNotInRam { vm, ram } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} is not inside one of the board's RAM ranges (the \
                 banner's `memory` line); give a base that puts it there"
            ),
            Self::IdentityOverHeld { vm, ram, held } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} overlaps {} at {}; give a base outside it",
                held.holder, held.range
            ),
            Self::IdentityWithoutDma { vm } => write!(
                f,
                "VM {vm}: field `identity_mapped`: none of its passthrough devices can DMA, so nothing needs its \
                 RAM at IPA = PA; remove it"
            ),
            Self::IdentityBeyondDma { vm, device, ram, reach: Some(reach) } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} is out of the DMA reach of passthrough {device} \
                 (CPU addresses {reach}, through its buses' `dma-ranges`); give a base that puts it there"
            ),
            Self::IdentityBeyondDma { vm, device, ram, reach: None } => write!(
                f,
                "VM {vm}: field `identity_mapped`: its RAM {ram} is out of the DMA reach of passthrough {device}, \
                 whose buses' `dma-ranges` reach no memory; give another device"
            ),
            Self::DmaReachUnknown { vm, device, window } => write!(
                f,
                "VM {vm}: passthrough {device}: what the DMA of the board's device at {window} reaches cannot be \
                 read from the `dma-ranges` of its buses; give a device whose device tree says it"
            ),
        }
    }
}

/// The rules that hold on any board. `BootBundle::parse` runs them, so `cargo xtask` and
/// the hypervisor refuse the same bundles.
pub fn check_vms<'a, I>(vms: I) -> Result<(), ManifestError<'a>>
where
    I: Iterator<Item = VmSpec<'a>> + Clone,
{
    run(vms, None)
}

/// Every rule: [`check_vms`]'s and those that depend on `board`. `cargo xtask` runs it
/// against the board it will start; the hypervisor against the board it booted on
/// (`BootBundle::check_board`), before it creates any VM.
pub fn check<'a, I>(vms: I, board: &BoardLimits<'_>) -> Result<(), ManifestError<'a>>
where
    I: Iterator<Item = VmSpec<'a>> + Clone,
{
    run(vms, Some(board))
}

/// VMs in order; each is checked alone, then against the VMs before it, then against the
/// board, so the error names the first VM (in manifest order) that breaks a rule.
fn run<'a, I>(vms: I, board: Option<&BoardLimits<'_>>) -> Result<(), ManifestError<'a>>
where
    I: Iterator<Item = VmSpec<'a>> + Clone,
{
    let mut memory = 0u64;
    // CPUs the VMs without `cpus` have pinned so far.
    let mut free_taken = 0usize;
    for (i, vm) in vms.clone().enumerate() {
        check_alone(&vm)?;
        check_io_cpu(&vm, vms.clone())?;
        for (j, earlier) in vms.clone().take(i).enumerate() {
            check_pair(&vm, &earlier)?;
            if let Some(mac) = vm.nic_mac(i).filter(|&m| earlier.nic_mac(j) == Some(m)) {
                return Err(ManifestError::MacTaken { vm: vm.name, mac, other: earlier.name });
            }
        }
        if let Some(board) = board {
            check_on_board(&vm, board)?;
            memory = memory.saturating_add(vm.memory);
            if memory > board.memory {
                return Err(ManifestError::TooMuchMemory { vm: vm.name, total: memory, available: board.memory });
            }
            if vm.placement.cpus.is_none() {
                let free = board.cpus.saturating_sub(listed_cpus(vms.clone(), board.cpus));
                let wanted = vm.vcpus as usize;
                if free_taken + wanted > free {
                    let free = free - free_taken;
                    return Err(ManifestError::NotEnoughFreeCpus {
                        vm: vm.name,
                        wanted: vm.vcpus,
                        free,
                        board_cpus: board.cpus,
                    });
                }
                free_taken += wanted;
            }
        }
    }
    Ok(())
}

/// `vm`'s `io_cpu` against every VM's `cpus` (before and after it in the manifest): an
/// I/O CPU runs no vCPU (docs/virtio.md, "The side core").
fn check_io_cpu<'a, I>(vm: &VmSpec<'a>, vms: I) -> Result<(), ManifestError<'a>>
where
    I: Iterator<Item = VmSpec<'a>>,
{
    let Some(cpu) = vm.devices.io_cpu else { return Ok(()) };
    for other in vms {
        if other.placement.cpus.is_some_and(|cpus| cpus.contains(cpu)) {
            return Err(ManifestError::IoCpuRunsVcpu { vm: vm.name, cpu, other: other.name });
        }
    }
    Ok(())
}

/// How many of the board's CPUs some VM lists in its `cpus` or as its `io_cpu`: neither
/// is free for the vCPUs of a VM without `cpus`.
fn listed_cpus<'a, I>(vms: I, board_cpus: usize) -> usize
where
    I: Iterator<Item = VmSpec<'a>> + Clone,
{
    let all = vms.flat_map(|vm| vm.placement.cpus.into_iter().flat_map(|c| c.iter()).chain(vm.devices.io_cpu));
    (0..board_cpus).filter(|&c| all.clone().any(|listed| listed as usize == c)).count()
}

fn check_alone<'a>(vm: &VmSpec<'a>) -> Result<(), ManifestError<'a>> {
    let name = vm.name;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(ManifestError::BadName { vm: name });
    }
    if vm.vcpus == 0 || vm.vcpus > MAX_VCPUS {
        return Err(ManifestError::Vcpus { vm: name, vcpus: vm.vcpus });
    }
    if vm.memory == 0 || !vm.memory.is_multiple_of(RAM_GRANULE) {
        return Err(ManifestError::Memory { vm: name, memory: vm.memory });
    }
    if let Some(disk) = vm.devices.disk {
        if !disk.offset.is_multiple_of(SECTOR_SIZE) || !disk.size.is_multiple_of(SECTOR_SIZE) {
            return Err(ManifestError::DiskNotSectors { vm: name });
        }
    }
    if let Some(Some(mac)) = vm.devices.network {
        if mac[0] & 1 != 0 || mac == [0; 6] {
            return Err(ManifestError::MacNotUnicast { vm: name });
        }
    }
    if vm.devices.io_cpu.is_some() && vm.devices.disk.is_none() && vm.devices.network.is_none() {
        return Err(ManifestError::IoCpuWithoutDevices { vm: name });
    }
    let placement = vm.placement;
    match (placement.policy, placement.slice_us) {
        (Policy::Pinned, Some(_)) => return Err(ManifestError::SliceForPinned { vm: name }),
        (Policy::Shared, Some(0)) => return Err(ManifestError::SliceZero { vm: name }),
        _ => {}
    }
    match placement.cpus {
        None if placement.policy == Policy::Shared => return Err(ManifestError::SharedWithoutCpus { vm: name }),
        None => {}
        Some(cpus) => {
            if cpus.len() != vm.vcpus as usize {
                return Err(ManifestError::CpusLength { vm: name, cpus: cpus.len(), vcpus: vm.vcpus });
            }
            // Pinned vCPUs of one VM each own their CPU; shared ones may take turns on one
            // (overcommit: docs/scheduler.md).
            for (j, cpu) in cpus.iter().enumerate() {
                if placement.policy == Policy::Pinned && cpus.iter().take(j).any(|c| c == cpu) {
                    let p = placement.policy;
                    return Err(ManifestError::CpuTaken { vm: name, cpu, policy: p, other: name, other_policy: p });
                }
            }
        }
    }
    for (j, device) in vm.passthrough.iter().enumerate() {
        let reg = device.reg;
        if reg.size == 0
            || !reg.base.is_multiple_of(PAGE_SIZE)
            || !reg.size.is_multiple_of(PAGE_SIZE)
            || reg.base.checked_add(reg.size).is_none()
        {
            return Err(ManifestError::PassthroughNotPages { vm: name, device: device.name });
        }
        // Mapped at IPA = PA: beyond the VM's IPA space the capability space would refuse
        // it (BeyondIpaSize) when the VM is built, after this check had let it boot.
        if reg.end() > 1 << crate::guest_map::IPA_BITS {
            return Err(ManifestError::PassthroughBeyondIpaSpace { vm: name, device: device.name, window: reg });
        }
        if let Some(intid) = device.interrupts.iter().find(|i| !SPI_INTIDS.contains(i)) {
            return Err(ManifestError::NotAnSpi { vm: name, device: device.name, intid });
        }
        for other in vm.passthrough.iter().take(j) {
            passthrough_pair(name, device, name, other)?;
        }
        // The same INTID twice in one device's list is harmless; in two devices it is not.
    }
    identity::check_alone(vm)
}

/// What `vm` has in its IPA space besides its passthrough windows (`guest_map`, and
/// hyp_runtime's `grant_resources`): its RAM, and its emulated GIC distributor, GICv2 CPU
/// interface or GICv3 redistributors (either, the board's GIC being unknown here), UART and
/// virtio transports (with PCI, the host bridge's windows, a GICv2's GICv2m frame and a GICv3's ITS).
fn guest_windows(vm: &VmSpec<'_>) -> impl Iterator<Item = PhysRange> {
    use crate::guest_fdt::{GICC_SIZE, GICD_SIZE, GICR_SIZE_PER_CPU};
    use crate::guest_map::{
        GICC_IPA, GICD_IPA, GICR_IPA, GICV2M_IPA, GICV2M_SIZE, ITS_IPA, ITS_SIZE, PCI_ECAM_IPA, PCI_ECAM_SIZE,
        PCI_MMIO_IPA, PCI_MMIO_SIZE, UART_IPA, UART_SIZE, VIRTIO_IPA, VIRTIO_PAGE,
    };
    let pci = vm.devices.transport == VirtioTransport::Pci;
    [
        (vm.ram_ipa(), vm.memory),
        (GICD_IPA, GICD_SIZE),
        (GICC_IPA, GICC_SIZE),
        (GICR_IPA, GICR_SIZE_PER_CPU * u64::from(vm.vcpus)),
        (UART_IPA, UART_SIZE),
        (VIRTIO_IPA, VIRTIO_PAGE),
    ]
    .into_iter()
    .chain(
        pci.then_some([
            (PCI_ECAM_IPA, PCI_ECAM_SIZE),
            (PCI_MMIO_IPA, PCI_MMIO_SIZE),
            (GICV2M_IPA, GICV2M_SIZE),
            (ITS_IPA, ITS_SIZE),
        ])
        .into_iter()
        .flatten(),
    )
    .map(|(base, size)| PhysRange { base, size })
}

/// Whether `intid` is the interrupt of one of `vm`'s own emulated devices in its vGIC: its
/// UART's, that of a virtio-mmio transport it has, or with the PCI transport one of the
/// message-based SPIs its functions' MSIs name (`guest_map`).
fn guest_device_intid(vm: &VmSpec<'_>, intid: u32) -> bool {
    use crate::guest_map::{MBI_COUNT, MBI_FIRST_INTID};
    let spi = intid.wrapping_sub(32);
    spi == UART_SPI
        || match vm.devices.transport {
            VirtioTransport::Mmio => VirtioSlot::of(&vm.devices).any(|slot| slot.spi() == spi),
            VirtioTransport::Pci => (MBI_FIRST_INTID..MBI_FIRST_INTID + MBI_COUNT).contains(&intid),
        }
}

fn passthrough_pair<'a>(
    vm: &'a str,
    device: &Passthrough<'a>,
    other_vm: &'a str,
    other: &Passthrough<'a>,
) -> Result<(), ManifestError<'a>> {
    if device.reg.overlaps(&other.reg) {
        return Err(ManifestError::PassthroughOverlap {
            vm,
            device: device.name,
            window: device.reg,
            other: other_vm,
            other_device: other.name,
        });
    }
    if let Some(intid) = device.interrupts.iter().find(|&i| other.interrupts.contains(i)) {
        return Err(ManifestError::InterruptTaken {
            vm,
            device: device.name,
            intid,
            other: other_vm,
            other_device: other.name,
        });
    }
    Ok(())
}

fn disk_end(d: DiskSlice) -> u64 {
    match d.size {
        0 => u64::MAX,
        size => d.offset.saturating_add(size),
    }
}

/// `vm` against a VM listed before it.
fn check_pair<'a>(vm: &VmSpec<'a>, earlier: &VmSpec<'a>) -> Result<(), ManifestError<'a>> {
    if vm.name == earlier.name {
        return Err(ManifestError::DuplicateName { vm: vm.name });
    }
    if let (Some(disk), Some(other_disk)) = (vm.devices.disk, earlier.devices.disk) {
        if disk.offset < disk_end(other_disk) && other_disk.offset < disk_end(disk) {
            return Err(ManifestError::DiskOverlap { vm: vm.name, disk, other: earlier.name, other_disk });
        }
    }
    if let (Some(cpus), Some(other_cpus)) = (vm.placement.cpus, earlier.placement.cpus) {
        let (policy, other_policy) = (vm.placement.policy, earlier.placement.policy);
        if policy == Policy::Pinned || other_policy == Policy::Pinned {
            if let Some(cpu) = cpus.iter().find(|&c| other_cpus.contains(c)) {
                return Err(ManifestError::CpuTaken { vm: vm.name, cpu, policy, other: earlier.name, other_policy });
            }
        }
    }
    for device in vm.passthrough.iter() {
        for other in earlier.passthrough.iter() {
            passthrough_pair(vm.name, device, earlier.name, other)?;
        }
    }
    identity::check_pair(vm, earlier)
}

fn check_on_board<'a>(vm: &VmSpec<'a>, board: &BoardLimits<'_>) -> Result<(), ManifestError<'a>> {
    let name = vm.name;
    if let Some(cpu) = vm.placement.cpus.and_then(|cpus| cpus.iter().find(|&c| c as usize >= board.cpus)) {
        return Err(ManifestError::NoSuchCpu { vm: name, cpu, board_cpus: board.cpus });
    }
    if let Some(cpu) = vm.devices.io_cpu.filter(|&c| c as usize >= board.cpus) {
        return Err(ManifestError::NoSuchIoCpu { vm: name, cpu, board_cpus: board.cpus });
    }
    if let Some(disk) = vm.devices.disk {
        let fits = board.disk.is_some_and(|size| disk.offset <= size && disk.size <= size - disk.offset);
        if !fits {
            return Err(ManifestError::DiskBeyondBoard { vm: name, disk, board_disk: board.disk });
        }
    }
    identity::check_placement(vm, board.ram, board.held)?;
    let mut dma_devices = 0;
    for device in vm.passthrough.iter() {
        let (window, dev) = (device.reg, device.name);
        if board.ram.iter().any(|r| r.overlaps(&window)) {
            return Err(ManifestError::PassthroughInRam { vm: name, device: dev, window });
        }
        if board.hypervisor_devices.iter().any(|r| r.overlaps(&window)) {
            return Err(ManifestError::PassthroughHypervisorDevice { vm: name, device: dev, window });
        }
        // Mapped at IPA = PA (docs/manifest.md), the window must miss the guest's RAM and
        // emulated windows there (docs/capability-model.md I8: a VM's IPA ranges never
        // overlap), or the VM could not be built after this check had let it boot.
        if guest_windows(vm).any(|w| w.overlaps(&window)) {
            return Err(ManifestError::PassthroughOverGuestLayout { vm: name, device: dev, window });
        }
        let Some(found) = board.devices.device_at(window) else {
            return Err(ManifestError::UnknownDevice { vm: name, device: dev, window });
        };
        // The GIC's frames other than those the platform lists (its ITS, a GICv2m frame) are
        // the GIC's too: not a VM's, however trusted (docs/manifest.md).
        if board.devices.is_gic_msi_frame(found) {
            return Err(ManifestError::PassthroughHypervisorDevice { vm: name, device: dev, window });
        }
        if let Some(other) = board.devices.other_device_in(window, found) {
            return Err(ManifestError::PassthroughSharesPage { vm: name, device: dev, window, other });
        }
        if let Some(intid) = device.interrupts.iter().find(|&i| !board.devices.raises(found, i)) {
            return Err(ManifestError::InterruptNotOfDevice { vm: name, device: dev, intid, window: found });
        }
        // A passthrough SPI is the same INTID in the VM's vGIC, hardware-mapped
        // (docs/manifest.md): it must not be one the VM's emulated devices raise there.
        if let Some(intid) = device.interrupts.iter().find(|&i| guest_device_intid(vm, i)) {
            return Err(ManifestError::InterruptOfGuestDevice { vm: name, device: dev, intid });
        }
        // A device that can DMA goes only to an identity-mapped VM whose RAM it reaches, and
        // never from behind an IOMMU (docs/capability-model.md, D1 and D3).
        match (board.devices.dma(found), vm.identity_ram()) {
            (None, _) => {}
            (Some(DmaReason::Property("iommus")), Some(_)) => {
                return Err(ManifestError::PassthroughBehindIommu { vm: name, device: dev, window: found })
            }
            (Some(reason), None) => {
                return Err(ManifestError::PassthroughCanDma { vm: name, device: dev, window: found, reason })
            }
            (Some(_), Some(ram)) => {
                let Some(reach) = board.devices.dma_reach(found) else {
                    return Err(ManifestError::DmaReachUnknown { vm: name, device: dev, window: found });
                };
                if !reach.covers(ram.base, ram.size) {
                    let first = match &reach {
                        DmaReach::Everything => None,
                        DmaReach::Windows(w) => w.first().map(|r| PhysRange { base: r.cpu, size: r.size }),
                    };
                    return Err(ManifestError::IdentityBeyondDma { vm: name, device: dev, ram, reach: first });
                }
                dma_devices += 1;
            }
        }
        if device.clock_hz.is_none() && board.devices.needs_clock(found) {
            return Err(ManifestError::PassthroughNeedsClock { vm: name, device: dev, window: found });
        }
    }
    if vm.identity_mapped.is_some() && dma_devices == 0 {
        return Err(ManifestError::IdentityWithoutDma { vm: name });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{PassthroughList, Placement, U32List, VmDevices};

    const MIB: u64 = 1 << 20;
    const RTC: PhysRange = PhysRange { base: 0x0901_0000, size: 0x1000 };
    const GPIO: PhysRange = PhysRange { base: 0x0903_0000, size: 0x1000 };
    const RAM: [PhysRange; 1] = [PhysRange { base: 0x4000_0000, size: 1 << 30 }];
    const HYPERVISOR: [PhysRange; 3] = [
        PhysRange { base: 0x0800_0000, size: 0x100_0000 },
        PhysRange { base: 0x0900_0000, size: 0x1000 },
        PhysRange { base: 0x0a00_0000, size: 0x4000 },
    ];
    const FW_CFG: PhysRange = PhysRange { base: 0x0902_0000, size: 0x1000 };
    const NIC: PhysRange = PhysRange { base: 0x0a00_4000, size: 0x1000 };
    const DEVICES: [BoardDevice<'static>; 4] = [
        BoardDevice { name: "rtc", reg: RTC, intids: &[34], compatible: "arm,pl031", dma_properties: &[] },
        BoardDevice { name: "gpio", reg: GPIO, intids: &[39], compatible: "arm,pl061", dma_properties: &[] },
        BoardDevice {
            name: "fw-cfg",
            reg: FW_CFG,
            intids: &[],
            compatible: "qemu,fw-cfg-mmio",
            dma_properties: &["dma-coherent"],
        },
        BoardDevice { name: "virtio", reg: NIC, intids: &[79], compatible: "virtio,mmio", dma_properties: &[] },
    ];
    const TABLE: DeviceTable<'static> = DeviceTable(&DEVICES);

    fn board() -> BoardLimits<'static> {
        BoardLimits {
            cpus: 4,
            memory: 768 * MIB,
            ram: &RAM,
            hypervisor_devices: &HYPERVISOR,
            disk: Some(1 << 30),
            devices: &TABLE,
            held: &[],
        }
    }

    fn cells(values: &[u32]) -> U32List<'static> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        U32List::new(Box::leak(bytes.into_boxed_slice())).unwrap()
    }

    fn vm(name: &'static str) -> VmSpec<'static> {
        VmSpec {
            name,
            vcpus: 1,
            memory: 64 * MIB,
            kernel: b"kernel",
            initrd: None,
            bootargs: None,
            device_tree: None,
            devices: VmDevices::default(),
            placement: Placement::default(),
            passthrough: PassthroughList::default(),
            identity_mapped: None,
        }
    }

    fn placed(name: &'static str, policy: Policy, cpus: &[u32]) -> VmSpec<'static> {
        let placement = Placement { cpus: Some(cells(cpus)), policy, slice_us: None };
        VmSpec { vcpus: cpus.len() as u32, placement, ..vm(name) }
    }

    fn pinned(name: &'static str, cpus: &[u32]) -> VmSpec<'static> {
        placed(name, Policy::Pinned, cpus)
    }

    fn shared(name: &'static str, cpus: &[u32]) -> VmSpec<'static> {
        placed(name, Policy::Shared, cpus)
    }

    fn with_device(mut spec: VmSpec<'static>, device: &'static str, reg: PhysRange, intids: &[u32]) -> VmSpec<'static> {
        spec.passthrough.push(Passthrough { name: device, reg, interrupts: cells(intids), clock_hz: None }).unwrap();
        spec
    }

    fn with_disk(spec: VmSpec<'static>, offset: u64, size: u64) -> VmSpec<'static> {
        VmSpec { devices: VmDevices { disk: Some(DiskSlice { offset, size }), ..spec.devices }, ..spec }
    }

    /// The message of the board check of `vms`, which must fail.
    fn error(vms: &[VmSpec<'static>]) -> String {
        check(vms.iter().copied(), &board()).unwrap_err().to_string()
    }

    #[test]
    fn a_manifest_that_keeps_every_rule_passes() {
        let vms = [
            with_disk(with_device(pinned("a", &[0]), "rtc", RTC, &[34]), 0, 256 * MIB),
            with_disk(pinned("b", &[1]), 256 * MIB, 256 * MIB),
            with_disk(shared("c", &[2, 3]), 512 * MIB, 0),
            with_device(shared("d", &[2]), "gpio", GPIO, &[39]),
        ];
        check(vms.iter().copied(), &board()).unwrap();
        assert_eq!(vms[2].placement.time_slice_us(), Some(DEFAULT_SLICE_US));
        assert_eq!(vms[0].placement.time_slice_us(), None);
        assert_eq!(vms[2].placement.cpu_of(1), Some(3));
        let with_free_cpu = [pinned("a", &[0]), shared("c", &[1, 2]), shared("d", &[2]), vm("e")];
        check(with_free_cpu.iter().copied(), &board()).unwrap();
    }

    #[test]
    fn board_rules_wait_for_the_board() {
        // CPU 7 and 4 GiB are fine on some board: only `check` knows this one.
        let big = VmSpec { memory: 4 << 30, ..pinned("big", &[7]) };
        check_vms([big].into_iter()).unwrap();
        assert_eq!(
            error(&[big]),
            "VM big: field `cpus`: CPU 7 does not exist (the board has CPUs 0-3); name one of those"
        );
    }

    #[test]
    fn a_bad_name_is_refused() {
        assert_eq!(error(&[vm("web 1")]), "VM web 1: field `name` must be letters, digits, '-' or '_'");
        assert_eq!(error(&[vm("")]), "VM : field `name` must be letters, digits, '-' or '_'");
    }

    #[test]
    fn two_vms_with_one_name_are_refused() {
        assert_eq!(error(&[vm("web"), vm("db"), vm("web")]), "VM web: two VMs have this name");
    }

    #[test]
    fn vcpus_outside_1_to_8_are_refused() {
        assert_eq!(error(&[VmSpec { vcpus: 0, ..vm("web") }]), "VM web: field `vcpus` must be between 1 and 8");
        assert_eq!(error(&[VmSpec { vcpus: 9, ..vm("web") }]), "VM web: field `vcpus` must be between 1 and 8");
    }

    #[test]
    fn memory_not_in_2_mib_blocks_is_refused() {
        let msg = "VM web: field `memory` must be a non-zero multiple of 2 MiB";
        assert_eq!(error(&[VmSpec { memory: 3 * MIB, ..vm("web") }]), msg);
        assert_eq!(error(&[VmSpec { memory: 0, ..vm("web") }]), msg);
    }

    #[test]
    fn more_memory_than_the_board_has_names_the_vm_that_exceeds_it() {
        let vm_of = |name, mib| VmSpec { memory: mib * MIB, ..vm(name) };
        assert_eq!(
            error(&[vm_of("a", 256), vm_of("b", 256), vm_of("c", 258), vm_of("d", 2)]),
            "VM c: field `memory`: with this VM the VMs need 770 MiB but the board has 768 MiB for VMs; \
             give the VMs less memory or the board more"
        );
        check([vm_of("a", 512), vm_of("b", 256)].into_iter(), &board()).unwrap();
    }

    #[test]
    fn a_disk_slice_not_in_sectors_is_refused() {
        assert_eq!(
            error(&[with_disk(vm("web"), 100, 0)]),
            "VM web: field `disk` offset and size must be multiples of 512 bytes"
        );
    }

    #[test]
    fn overlapping_disk_slices_are_refused() {
        assert_eq!(
            error(&[with_disk(vm("a"), 0, 256 * MIB), with_disk(vm("b"), 255 * MIB, MIB)]),
            "VM b: field `disk`: bytes 0xff00000..0x10000000 of the board's disk overlap VM a's disk \
             (0x0..0x10000000); give each VM its own slice"
        );
        // Size 0 runs to the end of the disk.
        assert_eq!(
            error(&[with_disk(vm("a"), 512 * MIB, 0), with_disk(vm("b"), 768 * MIB, MIB)]),
            "VM b: field `disk`: bytes 0x30000000..0x30100000 of the board's disk overlap VM a's disk \
             (0x20000000..(end of disk)); give each VM its own slice"
        );
        check([with_disk(vm("a"), 0, MIB), with_disk(vm("b"), MIB, 0)].into_iter(), &board()).unwrap();
    }

    #[test]
    fn a_disk_slice_past_the_boards_disk_is_refused() {
        assert_eq!(
            error(&[with_disk(vm("web"), 1 << 30, MIB)]),
            "VM web: field `disk`: bytes 0x40000000..0x40100000 go past the end of the board's disk \
             (0x40000000 bytes); give a slice within it"
        );
        let no_disk = BoardLimits { disk: None, ..board() };
        assert_eq!(
            check([with_disk(vm("web"), 0, 0)].into_iter(), &no_disk).unwrap_err().to_string(),
            "VM web: field `disk`: the board has no disk to take bytes 0x0..(end of disk) of; remove `disk` or \
             give the board a disk"
        );
    }

    #[test]
    fn a_multicast_mac_is_refused() {
        let web = VmSpec {
            devices: VmDevices {
                disk: None,
                network: Some(Some([1, 2, 3, 4, 5, 6])),
                io_cpu: None,
                ..Default::default()
            },
            ..vm("web")
        };
        assert_eq!(error(&[web]), "VM web: field `mac` must be a unicast address (first byte even), not all zeros");
    }

    #[test]
    fn two_nics_with_one_mac_address_are_refused_whether_given_or_by_default() {
        let nic = |name, mac| VmSpec {
            devices: VmDevices { disk: None, network: Some(mac), io_cpu: None, ..Default::default() },
            ..vm(name)
        };
        let same = [0x52, 0x54, 0, 0xab, 0xcd, 0xef];
        assert_eq!(
            error(&[nic("a", Some(same)), nic("b", Some(same))]),
            "VM b: field `mac`: 52:54:00:ab:cd:ef is also VM a's NIC address; give each NIC its own (the switch \
             delivers frames by address)"
        );
        // VM 1's default address, given to VM 0.
        let default_of_1 = [0x52, 0x54, 0x00, 0x12, 0x35, 0x11];
        assert_eq!(nic("b", None).nic_mac(1), Some(default_of_1));
        assert!(
            error(&[nic("a", Some(default_of_1)), nic("b", None)]).starts_with("VM b: field `mac`: 52:54:00:12:35:11")
        );
        assert!(check([nic("a", None), nic("b", None)].into_iter(), &board()).is_ok(), "defaults differ");
    }

    #[test]
    fn an_unknown_policy_is_named() {
        assert_eq!(Policy::from_name("shared"), Some(Policy::Shared));
        assert_eq!(Policy::from_name("pinned"), Some(Policy::Pinned));
        assert_eq!(Policy::from_name("Pinned"), None);
        assert_eq!(
            ManifestError::UnknownPolicy { vm: "web", given: "fair" }.to_string(),
            "VM web: field `policy`: \"fair\" is not a policy; write \"pinned\" or \"shared\""
        );
    }

    #[test]
    fn a_slice_for_a_pinned_vm_is_refused() {
        let mut web = pinned("web", &[1]);
        web.placement.slice_us = Some(5000);
        assert_eq!(
            error(&[web]),
            "VM web: field `slice_us` is for shared VMs (a pinned vCPU runs tickless); remove it or write \
             policy = \"shared\""
        );
    }

    #[test]
    fn a_slice_of_0_is_refused() {
        let mut web = shared("web", &[1]);
        web.placement.slice_us = Some(0);
        assert_eq!(
            error(&[web]),
            "VM web: field `slice_us` is 0: the vCPUs would never run; give at least 1 (default 10000)"
        );
        web.placement.slice_us = Some(2500);
        assert_eq!(web.placement.time_slice_us(), Some(2500));
        check([web].into_iter(), &board()).unwrap();
    }

    #[test]
    fn a_shared_vm_without_cpus_is_refused() {
        let web = VmSpec { placement: Placement { policy: Policy::Shared, ..Placement::default() }, ..vm("web") };
        assert_eq!(
            error(&[web]),
            "VM web: field `cpus` is missing: a shared VM names the CPU of each vCPU; add `cpus`"
        );
    }

    #[test]
    fn cpus_must_give_one_cpu_per_vcpu() {
        assert_eq!(
            error(&[VmSpec { vcpus: 2, ..pinned("web", &[1]) }]),
            "VM web: field `cpus` lists 1 CPU but the VM has 2 vCPUs; give one CPU per vCPU"
        );
        assert_eq!(
            error(&[VmSpec { vcpus: 1, ..pinned("web", &[1, 2]) }]),
            "VM web: field `cpus` lists 2 CPUs but the VM has 1 vCPU; give one CPU per vCPU"
        );
    }

    #[test]
    fn a_cpu_the_board_does_not_have_is_refused() {
        assert_eq!(
            error(&[vm("a"), shared("web", &[1, 4])]),
            "VM web: field `cpus`: CPU 4 does not exist (the board has CPUs 0-3); name one of those"
        );
        let one_cpu = BoardLimits { cpus: 1, ..board() };
        assert_eq!(
            check([pinned("web", &[1])].into_iter(), &one_cpu).unwrap_err().to_string(),
            "VM web: field `cpus`: CPU 1 does not exist (the board has CPU 0 only); name one of those"
        );
    }

    #[test]
    fn a_cpu_listed_for_two_pinned_vcpus_of_one_vm_is_refused_and_shared_ones_take_turns() {
        let message = "VM web: field `cpus`: CPU 1 is listed for two of its pinned vCPUs, but a pinned vCPU needs a \
                       CPU of its own; list another CPU, or make the VM shared (its vCPUs then take turns)";
        assert_eq!(error(&[pinned("web", &[1, 1])]), message);
        assert!(check([shared("web", &[1, 1, 2, 2])].into_iter(), &board()).is_ok(), "overcommit of a shared VM");
    }

    #[test]
    fn a_cpu_pinned_to_two_vms_is_refused() {
        assert_eq!(
            error(&[pinned("a", &[0, 1]), pinned("b", &[2, 1])]),
            "VM b: field `cpus`: CPU 1 is already pinned to VM a, and a pinned vCPU needs a CPU of its own; choose \
             another CPU"
        );
    }

    #[test]
    fn pinned_and_shared_vcpus_never_meet_on_a_cpu() {
        assert_eq!(
            error(&[shared("a", &[2]), pinned("b", &[2])]),
            "VM b: field `cpus`: CPU 2 already runs shared VM a, and a pinned vCPU needs a CPU of its own; choose \
             another CPU, or make both VMs shared"
        );
        assert_eq!(
            error(&[pinned("a", &[2]), shared("b", &[3, 2])]),
            "VM b: field `cpus`: CPU 2 is pinned to VM a, so shared vCPUs cannot run there; choose another CPU"
        );
        check([shared("a", &[2, 3]), shared("b", &[3, 2])].into_iter(), &board()).unwrap();
    }

    #[test]
    fn vms_without_cpus_need_enough_free_cpus() {
        // CPUs 1 and 3 are listed, so two are left for the VMs without `cpus`.
        let vms = [pinned("a", &[1]), VmSpec { vcpus: 2, ..vm("b") }, vm("c"), shared("d", &[3])];
        assert_eq!(
            error(&vms),
            "VM c: field `vcpus`: without `cpus`, each of its 1 vCPU is pinned to a CPU no VM lists, but only 0 of \
             the board's 4 CPUs are left; give it `cpus`, or fewer vCPUs"
        );
        check(vms[..2].iter().copied(), &board()).unwrap();
    }

    fn with_io_cpu(vm: VmSpec<'static>, cpu: u32) -> VmSpec<'static> {
        let devices = VmDevices { disk: Some(DiskSlice { offset: 0, size: 0 }), io_cpu: Some(cpu), ..vm.devices };
        VmSpec { devices, ..vm }
    }

    #[test]
    fn an_io_cpu_runs_no_vcpu_exists_and_has_a_device_to_serve() {
        // Its own vCPU, or another VM's, before or after it in the manifest.
        assert_eq!(
            error(&[with_io_cpu(pinned("a", &[1]), 1)]),
            "VM a: field `io_cpu`: CPU 1 is also in its `cpus`, but an I/O CPU runs no vCPU (it polls the \
             virtqueues); choose a CPU no vCPU runs on"
        );
        for vms in [
            [with_io_cpu(pinned("a", &[1]), 3), shared("b", &[3])],
            [shared("b", &[3]), with_io_cpu(pinned("a", &[1]), 3)],
        ] {
            assert_eq!(
                error(&vms),
                "VM a: field `io_cpu`: CPU 3 runs a vCPU of VM b (its `cpus`), but an I/O CPU runs no vCPU (it \
                 polls the virtqueues); choose a CPU no vCPU runs on"
            );
        }
        assert_eq!(
            error(&[with_io_cpu(pinned("a", &[1]), 4)]),
            "VM a: field `io_cpu`: CPU 4 does not exist (the board has CPUs 0-3); name one of those"
        );
        let bare = VmSpec { devices: VmDevices { io_cpu: Some(3), ..VmDevices::default() }, ..vm("a") };
        assert_eq!(
            error(&[bare]),
            "VM a: field `io_cpu`: the VM has no `disk` and no `network` for an I/O CPU to serve; remove `io_cpu`, \
             or give the VM a disk or a NIC"
        );
        // Two VMs may share one I/O CPU; the rest of the board is theirs.
        let b = VmSpec {
            devices: VmDevices { network: Some(None), io_cpu: Some(3), ..VmDevices::default() },
            ..pinned("b", &[2])
        };
        check([with_io_cpu(pinned("a", &[1]), 3), b].into_iter(), &board()).unwrap();
    }

    #[test]
    fn an_io_cpu_is_not_free_for_vms_without_cpus() {
        // CPUs 1 (listed) and 3 (an I/O CPU) are taken: two are left, and c wants a third.
        let vms = [with_io_cpu(pinned("a", &[1]), 3), VmSpec { vcpus: 2, ..vm("b") }, vm("c")];
        assert_eq!(
            error(&vms),
            "VM c: field `vcpus`: without `cpus`, each of its 1 vCPU is pinned to a CPU no VM lists, but only 0 of \
             the board's 4 CPUs are left; give it `cpus`, or fewer vCPUs"
        );
        check(vms[..2].iter().copied(), &board()).unwrap();
    }

    #[test]
    fn a_passthrough_window_not_in_pages_is_refused() {
        let msg = "VM web: passthrough rtc: field `reg` must be whole 4 KiB pages (base and size multiples of \
                   0x1000, size not 0)";
        assert_eq!(error(&[with_device(vm("web"), "rtc", PhysRange { base: 0x0901_0000, size: 0x100 }, &[])]), msg);
        assert_eq!(error(&[with_device(vm("web"), "rtc", PhysRange { base: 0x0901_0800, size: 0x1000 }, &[])]), msg);
        assert_eq!(error(&[with_device(vm("web"), "rtc", PhysRange { base: 0x0901_0000, size: 0 }, &[])]), msg);
    }

    /// Mapped at IPA = PA, a window must lie in the VM's IPA space (guest_map::IPA_BITS, the
    /// largest the image gives a VM): a device above it could never be mapped.
    #[test]
    fn a_passthrough_window_beyond_the_ipa_space_is_refused() {
        let top = 1u64 << crate::guest_map::IPA_BITS;
        let beyond = PhysRange { base: top, size: 0x1000 };
        let straddling = PhysRange { base: top - 0x1000, size: 0x2000 };
        for window in [beyond, straddling] {
            assert_eq!(
                check_vms([with_device(vm("web"), "dev", window, &[])].into_iter()),
                Err(ManifestError::PassthroughBeyondIpaSpace { vm: "web", device: "dev", window }),
                "{window}"
            );
        }
        let last_page = PhysRange { base: top - 0x1000, size: 0x1000 };
        check_vms([with_device(vm("web"), "dev", last_page, &[])].into_iter()).unwrap();
    }

    #[test]
    fn a_device_given_to_two_vms_is_refused() {
        assert_eq!(
            error(&[with_device(vm("a"), "rtc", RTC, &[34]), with_device(vm("b"), "clock", RTC, &[])]),
            "VM b: passthrough clock: field `reg` 0x9010000..0x9011000 overlaps passthrough rtc of VM a; a device \
             belongs to one VM"
        );
        let twice = with_device(with_device(vm("a"), "rtc", RTC, &[]), "rtc-again", RTC, &[]);
        assert_eq!(
            error(&[twice]),
            "VM a: passthrough rtc-again: field `reg` 0x9010000..0x9011000 overlaps passthrough rtc of VM a; a device \
             belongs to one VM"
        );
    }

    #[test]
    fn a_passthrough_window_in_ram_is_refused() {
        let window = PhysRange { base: 0x4000_0000, size: 0x1000 };
        assert_eq!(
            error(&[with_device(vm("web"), "ram", window, &[])]),
            "VM web: passthrough ram: field `reg` 0x40000000..0x40001000 overlaps the board's RAM; give a device's \
             register window"
        );
    }

    /// A passthrough window is mapped at IPA = PA: on a board whose devices sit where the
    /// guest has its RAM (RAM_IPA onwards) or its emulated GIC, UART and virtio windows, the
    /// VM could not be built (the capability space refuses the overlapping IPA range), so
    /// the manifest is refused before anything boots.
    #[test]
    fn a_passthrough_window_where_the_guest_has_ram_or_emulated_devices_is_refused() {
        const HIGH_RAM: [PhysRange; 1] = [PhysRange { base: 0x8000_0000, size: 1 << 30 }];
        const IN_GUEST_RAM: PhysRange = PhysRange { base: 0x4100_0000, size: 0x1000 };
        const IN_GUEST_GIC: PhysRange = PhysRange { base: 0x080a_0000, size: 0x1000 };
        const ABOVE_GUEST_RAM: PhysRange = PhysRange { base: 0x4400_0000, size: 0x1000 };
        let devices = [IN_GUEST_RAM, IN_GUEST_GIC, ABOVE_GUEST_RAM].map(|reg| BoardDevice {
            name: "rtc",
            reg,
            intids: &[],
            compatible: "arm,pl031",
            dma_properties: &[],
        });
        let table = DeviceTable(&devices);
        let board = BoardLimits { ram: &HIGH_RAM, hypervisor_devices: &[], devices: &table, ..board() };
        for window in [IN_GUEST_RAM, IN_GUEST_GIC] {
            let err = check([with_device(vm("web"), "rtc", window, &[])].into_iter(), &board).unwrap_err();
            assert_eq!(err, ManifestError::PassthroughOverGuestLayout { vm: "web", device: "rtc", window }, "{window}");
            assert!(err.to_string().starts_with(&format!("VM web: passthrough rtc: field `reg` {window}")));
        }
        // Between the guest's windows (QEMU virt's RTC at 0x0901_0000 lies between its UART
        // and its virtio page), and just past the VM's 64 MiB of RAM at 0x4000_0000: free.
        check([with_device(vm("web"), "rtc", RTC, &[34])].into_iter(), &super::tests::board()).unwrap();
        check([with_device(vm("web"), "rtc", ABOVE_GUEST_RAM, &[])].into_iter(), &board).unwrap();
        let bigger = VmSpec { memory: 128 * MIB, ..vm("web") };
        assert!(check([with_device(bigger, "rtc", ABOVE_GUEST_RAM, &[])].into_iter(), &board).is_err());
    }

    #[test]
    fn the_hypervisors_own_devices_are_not_passed_through() {
        let uart = PhysRange { base: 0x0900_0000, size: 0x1000 };
        assert_eq!(
            error(&[with_device(vm("web"), "uart", uart, &[33])]),
            "VM web: passthrough uart: field `reg` 0x9000000..0x9001000 is a device the hypervisor drives itself \
             (its UART, the GIC or a virtio transport); it cannot be passed through"
        );
    }

    #[test]
    fn a_device_the_board_does_not_have_is_refused() {
        let nothing = PhysRange { base: 0x0905_0000, size: 0x1000 };
        assert_eq!(
            error(&[with_device(vm("web"), "mystery", nothing, &[])]),
            "VM web: passthrough mystery: field `reg`: the board has no device at 0x9050000..0x9051000; give the \
             window of one of its devices (see docs/manifest.md)"
        );
        // Part of a device's window is that device.
        let first_page_of_gpio = PhysRange { base: 0x0903_0000, size: 0x1000 };
        check([with_device(vm("web"), "gpio", first_page_of_gpio, &[39])].into_iter(), &board()).unwrap();
    }

    #[test]
    fn an_interrupt_that_is_not_an_spi_is_refused() {
        let msg = |i| {
            format!(
                "VM web: passthrough rtc: field `interrupts`: INTID {i} is not an SPI; give INTIDs 32-1019 (SPI n is \
                 INTID 32 + n)"
            )
        };
        assert_eq!(error(&[with_device(vm("web"), "rtc", RTC, &[34, 27])]), msg(27));
        assert_eq!(error(&[with_device(vm("web"), "rtc", RTC, &[1020])]), msg(1020));
    }

    #[test]
    fn an_interrupt_of_another_device_is_refused() {
        assert_eq!(
            error(&[with_device(vm("web"), "rtc", RTC, &[39])]),
            "VM web: passthrough rtc: field `interrupts`: INTID 39 is not an interrupt of the board's device at \
             0x9010000..0x9011000; give that device's own interrupts"
        );
    }

    /// The guest's own emulated devices have fixed SPIs in its vGIC (guest_map: its UART's,
    /// and one per virtio transport it has): a passthrough device with one of those INTIDs
    /// would have its hardware-mapped interrupt and the emulated device's line share one
    /// virtual SPI. QEMU's `virt` raises none of them from a device a VM may have; another
    /// board may (a second PL011 on SPI 1).
    #[test]
    fn an_interrupt_of_the_guests_own_devices_is_refused() {
        use crate::guest_map::{VirtioSlot, UART_SPI};
        let uart = 32 + UART_SPI;
        let console = 32 + VirtioSlot::Console.spi();
        let disk = 32 + VirtioSlot::Disk.spi();
        const UART1: PhysRange = PhysRange { base: 0x0904_0000, size: 0x1000 };
        let mbi = 100;
        let intids = [uart, console, disk, mbi, 96, 127];
        let devices =
            [BoardDevice { name: "uart1", reg: UART1, intids: &intids, compatible: "arm,pl011", dma_properties: &[] }];
        let table = DeviceTable(&devices);
        let board = BoardLimits { devices: &table, ..board() };
        for intid in [uart, console] {
            let err = check([with_device(vm("web"), "uart1", UART1, &[intid])].into_iter(), &board).unwrap_err();
            assert_eq!(err, ManifestError::InterruptOfGuestDevice { vm: "web", device: "uart1", intid }, "{intid}");
            assert!(err
                .to_string()
                .starts_with(&format!("VM web: passthrough uart1: field `interrupts`: INTID {intid}")));
        }
        // A transport the VM does not have leaves its SPI free; once it has it, it is taken.
        check([with_device(vm("web"), "uart1", UART1, &[disk])].into_iter(), &board).unwrap();
        let with_a_disk = with_disk(with_device(vm("web"), "uart1", UART1, &[disk]), 0, 256 * MIB);
        assert_eq!(
            check([with_a_disk].into_iter(), &board),
            Err(ManifestError::InterruptOfGuestDevice { vm: "web", device: "uart1", intid: disk })
        );
        // With the PCI transport the devices raise the message-based SPIs, not the
        // transports' own.
        let pci =
            |vm: VmSpec<'static>| VmSpec { devices: VmDevices { transport: VirtioTransport::Pci, ..vm.devices }, ..vm };
        check([with_device(vm("web"), "uart1", UART1, &[mbi])].into_iter(), &board).unwrap();
        check([pci(with_device(vm("web"), "uart1", UART1, &[console]))].into_iter(), &board).unwrap();
        for intid in [mbi, 96, 127, uart] {
            assert_eq!(
                check([pci(with_device(vm("web"), "uart1", UART1, &[intid]))].into_iter(), &board),
                Err(ManifestError::InterruptOfGuestDevice { vm: "web", device: "uart1", intid }),
                "{intid}"
            );
        }
    }

    #[test]
    fn an_interrupt_given_to_two_vms_is_refused() {
        let vms = [with_device(vm("a"), "rtc", RTC, &[34]), with_device(vm("b"), "gpio", GPIO, &[39, 34])];
        assert_eq!(
            check_vms(vms.iter().copied()).unwrap_err().to_string(),
            "VM b: passthrough gpio: field `interrupts`: INTID 34 is already given to VM a (passthrough rtc); an \
             interrupt goes to one VM"
        );
    }

    /// The GIC's MSI frames (the GICv3 ITS, a GICv2m frame) are not among the frames the
    /// platform lists, and, taken to DMA, went to an identity-mapped VM; they are the GIC's:
    /// a write to one raises interrupts for whatever device the board has on them (docs/
    /// manifest.md: the GIC cannot be passed through).
    #[test]
    fn the_gics_msi_frames_are_not_passed_through_even_to_an_identity_mapped_vm() {
        let v3 = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
        let v2 = include_bytes!("../tests/data/qemu-virt-gicv2-smp2.dtb");
        let its = PhysRange { base: 0x0808_0000, size: 0x2_0000 };
        let v2m = PhysRange { base: 0x0802_0000, size: 0x1000 };
        for (dtb, window) in [(&v3[..], its), (&v2[..], v2m)] {
            let platform = Platform::from_device_tree(dtb).unwrap();
            let windows = hypervisor_windows(&platform);
            let devices = DeviceTreeDevices::new(dtb).unwrap();
            let ram = [PhysRange { base: 0x4000_0000, size: 1 << 30 }];
            let board = BoardLimits { devices: &devices, ram: &ram, hypervisor_devices: &windows, ..board() };
            let identity = VmSpec { identity_mapped: Some(0x4800_0000), ..with_device(vm("web"), "msi", window, &[]) };
            assert_eq!(
                check([identity].into_iter(), &board),
                Err(ManifestError::PassthroughHypervisorDevice { vm: "web", device: "msi", window }),
                "{window}"
            );
        }
    }

    /// The hypervisor drives the board's power controller (the Raspberry Pi's BCM2835 power
    /// manager: powering off) and the Versatile Express system registers (starting CPUs):
    /// neither may be given to a VM, not even an identity-mapped one, whose DMA rules would
    /// otherwise let the Pi's through (docs/manifest.md).
    #[test]
    fn the_power_controller_and_cpu_start_registers_are_the_hypervisors() {
        let dtb = &include_bytes!("../tests/data/qemu-raspi4b.dtb")[..];
        let platform = Platform::from_device_tree(dtb).unwrap();
        let Some(crate::platform::PowerController::Bcm2835Pm { registers }) = platform.power_controller else {
            panic!("the Pi 4's tree has its power manager")
        };
        let windows = hypervisor_windows(&platform);
        assert!(windows.contains(&registers), "{windows:?}");
        let devices = DeviceTreeDevices::new(dtb).unwrap();
        let board = BoardLimits { devices: &devices, ram: &platform.memory, hypervisor_devices: &windows, ..board() };
        let window = PhysRange { base: registers.base & !(PAGE_SIZE - 1), size: PAGE_SIZE };
        let mut pm = with_device(vm("web"), "pm", window, &[]);
        pm.identity_mapped = Some(0x2000_0000);
        pm.passthrough = {
            let mut list = PassthroughList::default();
            list.push(Passthrough { name: "pm", reg: window, interrupts: cells(&[]), clock_hz: Some(1) }).unwrap();
            list
        };
        assert_eq!(
            check([pm].into_iter(), &board),
            Err(ManifestError::PassthroughHypervisorDevice { vm: "web", device: "pm", window })
        );
        let blob = crate::fdt::test_trees::versatile_express_board(|_| {});
        let vexpress = Platform::from_device_tree(&blob).unwrap();
        let sysreg = PhysRange { base: 0x1c01_0000, size: 0x1000 };
        assert!(hypervisor_windows(&vexpress).contains(&sysreg), "SYS_FLAGS starts its CPUs");
    }

    #[test]
    fn the_hypervisors_windows_come_from_the_platform() {
        let dtb = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
        let platform = Platform::from_device_tree(dtb).unwrap();
        let windows = hypervisor_windows(&platform);
        assert_eq!(windows.len(), 2 + 1 + 32, "UART, GICD, GICR, 32 virtio-mmio transports");
        assert!(windows.contains(&PhysRange { base: 0x0900_0000, size: 0x1000 }));
        let board = BoardLimits { hypervisor_devices: &windows, ..board() };
        let uart = with_device(vm("web"), "uart", PhysRange { base: 0x0900_0000, size: 0x1000 }, &[33]);
        assert!(matches!(
            check([uart].into_iter(), &board),
            Err(ManifestError::PassthroughHypervisorDevice { vm: "web", .. })
        ));
    }

    #[test]
    fn the_device_tree_of_qemu_virt_has_its_rtc_and_gpio() {
        let dtb = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
        let devices = DeviceTreeDevices::new(dtb).unwrap();
        assert_eq!(devices.device_at(RTC), Some(RTC));
        assert!(devices.raises(RTC, 34), "PL031: SPI 2");
        assert!(!devices.raises(RTC, 35));
        assert_eq!(devices.device_at(GPIO), Some(GPIO));
        assert!(devices.raises(GPIO, 39), "PL061: SPI 7");
        assert_eq!(devices.device_at(PhysRange { base: 0x0905_0000, size: 0x1000 }), None);
        assert_eq!(devices.device_at(RAM[0]), None, "memory nodes are not devices");
        assert!(DeviceTreeDevices::new(b"not a device tree").is_none());
    }

    #[test]
    fn the_boards_node_gives_a_passthrough_device_its_compatible_and_trigger() {
        let dtb = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
        let devices = DeviceTreeDevices::new(dtb).unwrap();
        let node = devices.node_at(RTC).unwrap();
        assert_eq!(node.reg, RTC);
        assert_eq!(node.compatible, b"arm,pl031\0arm,primecell\0");
        assert_eq!(node.spi_flags(34), Some(IRQ_TYPE_LEVEL_HIGH));
        assert_eq!(node.spi_flags(35), None);
        assert!(devices.node_at(PhysRange { base: 0x0905_0000, size: 0x1000 }).is_none());
        let board = BoardLimits { devices: &devices, ..board() };
        check([with_device(vm("web"), "rtc", RTC, &[34])].into_iter(), &board).unwrap();
        assert_eq!(
            check([with_device(vm("web"), "rtc", RTC, &[40])].into_iter(), &board).unwrap_err().to_string(),
            "VM web: passthrough rtc: field `interrupts`: INTID 40 is not an interrupt of the board's device at \
             0x9010000..0x9011000; give that device's own interrupts"
        );
    }

    #[test]
    fn on_qemu_virts_own_device_tree_bus_masters_and_unknown_devices_are_refused_for_dma() {
        let dtb = include_bytes!("../tests/data/qemu-virt-gicv3-smp4.dtb");
        let devices = DeviceTreeDevices::new(dtb).unwrap();
        assert_eq!(devices.dma(RTC), None, "the PL031 cannot DMA");
        assert_eq!(devices.dma(GPIO), None, "nor the PL061");
        let ecam = PhysRange { base: 0x40_1000_0000, size: 0x1000_0000 };
        assert_eq!(devices.dma(ecam), Some(DmaReason::Property("dma-coherent")), "the PCIe host bridge");
        let flash = PhysRange { base: 0, size: 0x400_0000 };
        assert_eq!(devices.dma(flash), Some(DmaReason::NotKnownDmaFree), "cfi-flash is not on the list");
        let board = BoardLimits { devices: &devices, ram: &[], hypervisor_devices: &[], ..board() };
        let page = |base| PhysRange { base, size: 0x1000 };
        let message = |device, window| {
            check([with_device(vm("web"), device, window, &[])].into_iter(), &board).unwrap_err().to_string()
        };
        assert!(
            message("pcie", page(0x40_1000_0000)).starts_with(
                "VM web: passthrough pcie: the board's device at 0x4010000000..0x4020000000 has `dma-coherent` in its \
                 device tree: it can access memory by DMA, and with no SMMU"
            ),
            "{}",
            message("pcie", page(0x40_1000_0000))
        );
        assert!(message("flash", page(0)).contains("is not one known to have no DMA"));
    }

    #[test]
    fn a_device_that_can_dma_is_refused_by_property_or_for_not_being_known_dma_free() {
        assert_eq!(
            error(&[with_device(vm("web"), "fwcfg", FW_CFG, &[])]),
            "VM web: passthrough fwcfg: the board's device at 0x9020000..0x9021000 has `dma-coherent` in its device \
             tree: it can access memory by DMA, and with no SMMU to confine it, it could read and write the \
             hypervisor's and other VMs' memory; give a device that cannot master the bus, or map the VM's RAM at \
             IPA = PA with `identity_mapped` (docs/manifest.md)"
        );
        assert_eq!(
            error(&[with_device(vm("web"), "nic", NIC, &[79])]),
            "VM web: passthrough nic: the board's device at 0xa004000..0xa005000 is not one known to have no DMA (its \
             first `compatible` is not among arm,pl031, arm,pl061, arm,sp804, arm,sp805, arm,pl011), and with no SMMU \
             to confine it, it could read and write the hypervisor's and other VMs' memory; give a device that \
             cannot master the bus, or map the VM's RAM at IPA = PA with `identity_mapped` (docs/manifest.md)"
        );
        assert_eq!(dma_capability("arm,pl011", |p| p == "dmas"), Some(DmaReason::Property("dmas")));
        assert_eq!(dma_capability("arm,pl011", |_| false), None);
        assert_eq!(dma_capability("", |_| false), Some(DmaReason::NotKnownDmaFree), "no compatible at all");
    }
}
