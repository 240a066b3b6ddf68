//! The boot bundle: the VM manifest and the guest images, in one flattened device tree that
//! the loader passes as the initrd (docs/boot-bundle.md). `cargo xtask` writes it from a
//! readable manifest; the hypervisor checks it again here, before anything boots.

use core::fmt;

use crate::fdt::{Fdt, Node};

pub use crate::manifest::Policy;
use crate::manifest::{self, BoardLimits, ManifestError};
use crate::platform::PhysRange;

pub const COMPATIBLE: &str = "hyp,boot-bundle-v1";
/// vCPUs one VM may have.
pub const MAX_VCPUS: u32 = 8;
/// VM RAM is carved in 2 MiB blocks so stage 2 can map it with block descriptors.
pub const RAM_GRANULE: u64 = 2 << 20;
/// Board devices one VM may be given (`passthrough@N` nodes).
pub const MAX_PASSTHROUGH: usize = 8;

/// One VM as the manifest describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmSpec<'a> {
    pub name: &'a str,
    pub vcpus: u32,
    pub memory: u64,
    pub kernel: &'a [u8],
    pub initrd: Option<&'a [u8]>,
    pub bootargs: Option<&'a str>,
    /// A device tree to boot with instead of the generated one (its /chosen is set by the
    /// hypervisor).
    pub device_tree: Option<&'a [u8]>,
    /// The VM's virtio devices (its console is always there).
    pub devices: VmDevices,
    /// The physical CPUs its vCPUs run on, and how.
    pub placement: Placement<'a>,
    /// Board devices given to it: register windows mapped at the same address, interrupts
    /// routed to it.
    pub passthrough: PassthroughList<'a>,
    /// Its RAM is the physical memory from this address, mapped at the same IPA (IPA = PA),
    /// for a device that does DMA (docs/capability-model.md, "Identity-mapped VMs"). `None`:
    /// its RAM is at IPA `guest_map::RAM_IPA`, wherever it lies in physical memory.
    pub identity_mapped: Option<u64>,
}

impl<'a> VmSpec<'a> {
    /// The kernel command line the VM's /chosen gets: its `bootargs`, or none (an empty
    /// one) when the manifest gives none. The hypervisor adds nothing of its own: a kernel
    /// that is not Linux may not know `console=` (docs/manifest.md; xtask gives the Debian
    /// kernel its default).
    pub fn command_line(&self) -> &'a str {
        self.bootargs.unwrap_or("")
    }

    /// The IPA its RAM starts at: its physical address if it is identity-mapped, else the
    /// guest's usual `guest_map::RAM_IPA`.
    pub fn ram_ipa(&self) -> u64 {
        self.identity_mapped.unwrap_or(crate::guest_map::RAM_IPA)
    }

    /// The physical memory an identity-mapped VM's RAM is (`None` for a translated VM, or
    /// when the range would run past the end of the address space).
    pub fn identity_ram(&self) -> Option<PhysRange> {
        let base = self.identity_mapped?;
        base.checked_add(self.memory).map(|_| PhysRange { base, size: self.memory })
    }

    /// The MAC address of its NIC, if it has one, as VM `index` of the bundle: the
    /// manifest's, or 52:54:00:12:35:(0x10 + index) (QEMU's locally administered prefix; the
    /// last byte says the VM). The switch lets the NIC send from this address only.
    pub fn nic_mac(&self, index: usize) -> Option<[u8; 6]> {
        self.devices.network.map(|mac| mac.unwrap_or([0x52, 0x54, 0x00, 0x12, 0x35, 0x10u8.wrapping_add(index as u8)]))
    }
}

/// A list of 32-bit big-endian cells as the bundle holds it (`cpus`, `interrupts`): the
/// property's bytes, read on demand so that [`VmSpec`] stays `Copy` and needs no heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct U32List<'a>(&'a [u8]);

impl<'a> U32List<'a> {
    /// The cells of `bytes`, if it is a whole number of them.
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        bytes.len().is_multiple_of(4).then_some(U32List(bytes))
    }
    pub fn len(&self) -> usize {
        self.0.len() / 4
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<u32> {
        let cell = self.0.get(i * 4..i * 4 + 4)?;
        Some(u32::from_be_bytes([cell[0], cell[1], cell[2], cell[3]]))
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + Clone + 'a {
        self.0.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }
    pub fn contains(&self, value: u32) -> bool {
        self.iter().any(|v| v == value)
    }
    /// The property's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// Where a VM's vCPUs run (`cpus`, `policy`, `slice-us` in the bundle).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement<'a> {
    /// The physical CPU of each vCPU (CPU n: the n-th enabled CPU of the board's device
    /// tree), one per vCPU. `None`: the hypervisor pins each vCPU to a free CPU.
    pub cpus: Option<U32List<'a>>,
    pub policy: Policy,
    /// Shared VMs only: the time slice in microseconds, as the manifest gave it (see
    /// [`Placement::time_slice_us`] for the default).
    pub slice_us: Option<u32>,
}

impl Placement<'_> {
    /// The physical CPU of vCPU `vcpu`, if the manifest names it.
    pub fn cpu_of(&self, vcpu: usize) -> Option<u32> {
        self.cpus?.get(vcpu)
    }
    /// The time slice of a shared VM's vCPUs (default [`manifest::DEFAULT_SLICE_US`]); `None`
    /// for a pinned VM, which runs tickless.
    pub fn time_slice_us(&self) -> Option<u32> {
        match self.policy {
            Policy::Pinned => None,
            Policy::Shared => Some(self.slice_us.unwrap_or(manifest::DEFAULT_SLICE_US)),
        }
    }
}

/// A board device given to a VM: its register window, mapped in the VM at the same
/// address, and its interrupts (SPI INTIDs), routed to the VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passthrough<'a> {
    /// A label for messages (the device is the window, not the name).
    pub name: &'a str,
    pub reg: PhysRange,
    pub interrupts: U32List<'a>,
    /// The rate of its clock, which the guest's device tree gives it as a fixed clock (for a
    /// device whose board node names a clock the VM has no controller for).
    pub clock_hz: Option<u32>,
}

/// A VM's passthrough devices, in bundle order (at most [`MAX_PASSTHROUGH`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassthroughList<'a> {
    items: [Passthrough<'a>; MAX_PASSTHROUGH],
    len: usize,
}

impl Default for PassthroughList<'_> {
    fn default() -> Self {
        let none =
            Passthrough { name: "", reg: PhysRange { base: 0, size: 0 }, interrupts: U32List(&[]), clock_hz: None };
        PassthroughList { items: [none; MAX_PASSTHROUGH], len: 0 }
    }
}

impl<'a> PassthroughList<'a> {
    /// Adds `device`; `Err` when the list is full.
    pub fn push(&mut self, device: Passthrough<'a>) -> Result<(), Passthrough<'a>> {
        let slot = self.items.get_mut(self.len).ok_or(device)?;
        *slot = device;
        self.len += 1;
        Ok(())
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[Passthrough<'a>] {
        &self.items[..self.len]
    }
    pub fn iter(&self) -> core::slice::Iter<'_, Passthrough<'a>> {
        self.as_slice().iter()
    }
}

/// The virtio devices a VM's manifest entry asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmDevices {
    /// A virtio disk: this slice of the board's disk.
    pub disk: Option<DiskSlice>,
    /// A virtio NIC on the hypervisor's switch, with this MAC address (None: derived from
    /// the VM's index).
    pub network: Option<Option<[u8; 6]>>,
    /// The physical CPU that serves its disk and NIC by polling their virtqueues (a side
    /// core: docs/virtio.md, "The side core"); `None`: they are served on the exits of the
    /// VM's own vCPUs, as a QueueNotify traps.
    pub io_cpu: Option<u32>,
    /// How its virtio devices reach it.
    pub transport: VirtioTransport,
}

/// The transport of a VM's virtio devices (bundle property `virtio-transport`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VirtioTransport {
    /// virtio-mmio windows, each with a level-triggered SPI (docs/virtio.md).
    #[default]
    Mmio,
    /// PCI functions behind an ECAM host bridge, interrupting by MSI-X through the GICv3's
    /// message-based SPIs (docs/virtio.md, "The virtio-pci transport").
    Pci,
}

impl VirtioTransport {
    /// Its name in the manifest and the bundle.
    pub fn name(self) -> &'static str {
        match self {
            VirtioTransport::Mmio => "mmio",
            VirtioTransport::Pci => "pci",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [VirtioTransport::Mmio, VirtioTransport::Pci].into_iter().find(|t| t.name() == name)
    }
}

/// Bytes `[offset, offset + size)` of the board's disk; `size` 0 means to its end. Both are
/// multiples of the 512-byte sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskSlice {
    pub offset: u64,
    pub size: u64,
}

pub const SECTOR_SIZE: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleOptions {
    /// The QEMU run enabled semihosting, so a failed run can set QEMU's exit status.
    pub semihosting_exit: bool,
    /// For the system tests: this CPU makes this deliberate fault at EL2 after boot, to show
    /// that the report works, that only that CPU stops, and that the EL2 map refuses what it
    /// must (W^X).
    pub test_el2_fault: Option<(u32, El2Fault)>,
}

impl BundleOptions {
    /// The test hooks these options ask for, by the bundle property that asks:
    /// `semihosting-exit`, `test-el2-fault-cpu`. Only an image built with hyp-arch-armv8's
    /// `test-hooks` feature has them (docs/security.md, "Test hooks").
    pub fn test_hooks(&self) -> impl Iterator<Item = &'static str> {
        [(self.semihosting_exit, "semihosting-exit"), (self.test_el2_fault.is_some(), "test-el2-fault-cpu")]
            .into_iter()
            .filter_map(|(asked, property)| asked.then_some(property))
    }

    /// What an image built without test hooks answers these options: Ok when they ask for
    /// none, else the error that names each one asked for.
    pub fn check_no_test_hooks(&self) -> Result<(), BundleError<'static>> {
        match self.test_hooks().next() {
            None => Ok(()),
            Some(_) => Err(BundleError::TestHooksNotBuilt(*self)),
        }
    }
}

/// A deliberate fault at EL2, for the system tests (bundle property `test-el2-fault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum El2Fault {
    /// A load from an address the EL2 map leaves unmapped.
    ReadUnmapped,
    /// A store into the hypervisor's own code.
    WriteText,
    /// A store into its read-only data.
    WriteRodata,
    /// A jump to an instruction in its writable data.
    ExecuteData,
    /// A jump to an instruction on its heap.
    ExecuteHeap,
}

impl El2Fault {
    pub const ALL: [El2Fault; 5] = [
        El2Fault::ReadUnmapped,
        El2Fault::WriteText,
        El2Fault::WriteRodata,
        El2Fault::ExecuteData,
        El2Fault::ExecuteHeap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            El2Fault::ReadUnmapped => "read-unmapped",
            El2Fault::WriteText => "write-text",
            El2Fault::WriteRodata => "write-rodata",
            El2Fault::ExecuteData => "execute-data",
            El2Fault::ExecuteHeap => "execute-heap",
        }
    }

    pub fn from_name(name: &str) -> Option<El2Fault> {
        El2Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}

pub struct BootBundle<'a> {
    fdt: Fdt<'a>,
    pub options: BundleOptions,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleError<'a> {
    /// Not a device tree, or not one xtask wrote.
    NotABundle,
    NoVms,
    /// A VM's property is missing or not in the bundle's format: names the VM (or its node)
    /// and the field.
    BadField {
        vm: &'a str,
        field: &'static str,
        problem: &'static str,
    },
    /// The VMs break a rule of the manifest (`manifest::check_vms`): names the VM and field.
    Manifest(ManifestError<'a>),
    /// The options ask for test hooks and the image was built without them
    /// (`BundleOptions::check_no_test_hooks`).
    TestHooksNotBuilt(BundleOptions),
}

impl<'a> From<ManifestError<'a>> for BundleError<'a> {
    fn from(e: ManifestError<'a>) -> Self {
        BundleError::Manifest(e)
    }
}

impl fmt::Display for BundleError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotABundle => {
                write!(f, "the initrd is not a boot bundle ({COMPATIBLE}); build one with `cargo xtask`")
            }
            Self::NoVms => write!(f, "the boot bundle describes no VM"),
            Self::BadField { vm, field, problem } => write!(f, "VM {vm}: field `{field}` {problem}"),
            Self::Manifest(e) => e.fmt(f),
            Self::TestHooksNotBuilt(options) => {
                write!(f, "it asks for ")?;
                for (i, property) in options.test_hooks().enumerate() {
                    write!(f, "{}`{property}`", if i == 0 { "" } else { " and " })?;
                }
                write!(
                    f,
                    ", and this image was built without test hooks (hyp-arch-armv8's `test-hooks` feature, \
                     which only the image of the system tests and benchmarks has): write the bundle without \
                     test options, or boot that image"
                )
            }
        }
    }
}

/// The bundle's VMs in order; `Clone`, so the manifest checks can compare VMs pairwise
/// without a heap.
#[derive(Clone)]
pub struct Vms<'b, 'a> {
    bundle: &'b BootBundle<'a>,
    next: usize,
}

impl<'a> Iterator for Vms<'_, 'a> {
    type Item = VmSpec<'a>;
    fn next(&mut self) -> Option<VmSpec<'a>> {
        let node = self.bundle.vm_nodes().nth(self.next)?;
        self.next += 1;
        // Every node was parsed by `BootBundle::parse`.
        vm_spec(node, self.bundle.images()).ok()
    }
}

impl<'a> BootBundle<'a> {
    /// Reads and checks a bundle: its format, and every rule of the manifest that does not
    /// depend on the board (`manifest::check_vms`). The rules that do are
    /// [`BootBundle::check_board`]'s.
    pub fn parse(blob: &'a [u8]) -> Result<Self, BundleError<'a>> {
        let fdt = Fdt::new(blob).map_err(|_| BundleError::NotABundle)?;
        let root = fdt.root();
        if root.property("compatible").and_then(|p| p.as_str()) != Some(COMPATIBLE) {
            return Err(BundleError::NotABundle);
        }
        let options = fdt.find_node("/options");
        let semihosting_exit = options.is_some_and(|o| o.property("semihosting-exit").is_some());
        let fault_cpu = options.and_then(|o| u32_prop(o, "test-el2-fault-cpu"));
        let fault = match options.and_then(|o| o.property("test-el2-fault")) {
            None => El2Fault::ReadUnmapped,
            Some(p) => p.as_str().and_then(El2Fault::from_name).ok_or(BundleError::BadField {
                vm: "(options)",
                field: "test-el2-fault",
                problem: "is not a known fault (read-unmapped, write-text, write-rodata, execute-data, execute-heap)",
            })?,
        };
        let test_el2_fault = fault_cpu.map(|cpu| (cpu, fault));
        let bundle = BootBundle { fdt, options: BundleOptions { semihosting_exit, test_el2_fault } };
        bundle.check()?;
        Ok(bundle)
    }

    fn images(&self) -> Option<Node<'a>> {
        self.fdt.find_node("/images")
    }

    fn vm_nodes(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        self.fdt.find_node("/vms").into_iter().flat_map(|n| n.children())
    }

    /// Every VM, in manifest order. All were checked by `parse`.
    pub fn vms(&self) -> Vms<'_, 'a> {
        Vms { bundle: self, next: 0 }
    }

    /// The manifest's rules against the board the hypervisor runs on (`manifest::check`):
    /// CPUs that exist, memory the board has, devices it has. Call before creating any VM.
    pub fn check_board(&self, board: &BoardLimits<'_>) -> Result<(), ManifestError<'a>> {
        manifest::check(self.vms(), board)
    }

    fn check(&self) -> Result<(), BundleError<'a>> {
        let mut count = 0;
        for node in self.vm_nodes() {
            vm_spec(node, self.images())?;
            count += 1;
        }
        if count == 0 {
            return Err(BundleError::NoVms);
        }
        manifest::check_vms(self.vms())?;
        Ok(())
    }
}

fn u32_prop(node: Node<'_>, name: &str) -> Option<u32> {
    let v = node.property(name)?.value;
    Some(u32::from_be_bytes(v.try_into().ok()?))
}

fn u64_prop(node: Node<'_>, name: &str) -> Option<u64> {
    let v = node.property(name)?.value;
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

/// Two big-endian 64-bit numbers (`disk`, a passthrough's `reg`).
fn u64_pair(bytes: &[u8]) -> Option<[u64; 2]> {
    let first = bytes.get(0..8)?.try_into().ok()?;
    let second = bytes.get(8..16)?.try_into().ok()?;
    (bytes.len() == 16).then(|| [u64::from_be_bytes(first), u64::from_be_bytes(second)])
}

/// A VM's image `field`: its bytes given in the VM's node, or the `data` of the
/// `/images/image@N` its `reference` property names (xtask stores an image that several VMs
/// boot once: docs/boot-bundle.md). `None` if the VM has neither.
fn image<'a>(
    node: Node<'a>,
    images: Option<Node<'a>>,
    field: &'static str,
    reference: &'static str,
) -> Result<Option<&'a [u8]>, BundleError<'a>> {
    let name = node.property("name").and_then(|p| p.as_str()).unwrap_or(node.name);
    let bad = |field, problem| BundleError::BadField { vm: name, field, problem };
    match (node.property(field), node.property(reference)) {
        (None, None) => Ok(None),
        (Some(inline), None) => Ok(Some(inline.value)),
        (Some(_), Some(_)) => Err(bad(reference, "is given with the image itself: give one or the other")),
        (None, Some(_)) => {
            let index = u32_prop(node, reference).ok_or(bad(reference, "must be one 32-bit image number"))?;
            images
                .into_iter()
                .flat_map(|list| list.children())
                .find(|child| image_index(child.name) == Some(index))
                .and_then(|child| child.property("data"))
                .map(|data| Some(data.value))
                .ok_or(bad(reference, "names no `/images/image@N` node with `data`"))
        }
    }
}

/// N of a node named `image@N` (hexadecimal, as device-tree unit addresses are).
fn image_index(node_name: &str) -> Option<u32> {
    let (kind, unit) = node_name.split_once('@')?;
    (kind == "image").then(|| u32::from_str_radix(unit, 16).ok()).flatten()
}

/// One VM node, read. Only the format is checked here (a property of the wrong size or
/// kind); what the values may be is `manifest`'s.
fn vm_spec<'a>(node: Node<'a>, images: Option<Node<'a>>) -> Result<VmSpec<'a>, BundleError<'a>> {
    let name = node.property("name").and_then(|p| p.as_str()).unwrap_or(node.name);
    let bad = |field, problem| BundleError::BadField { vm: name, field, problem };
    let vcpus = u32_prop(node, "vcpus").ok_or(bad("vcpus", "is missing"))?;
    let memory = u64_prop(node, "memory").ok_or(bad("memory", "is missing"))?;
    let kernel = image(node, images, "kernel", "kernel-image")?.ok_or(bad("kernel", "is missing"))?;
    if kernel.is_empty() {
        return Err(bad("kernel", "is empty"));
    }
    let initrd = image(node, images, "initrd", "initrd-image")?;
    let bootargs = match node.property("bootargs") {
        Some(p) => Some(p.as_str().ok_or(bad("bootargs", "is not a string"))?),
        None => None,
    };
    let device_tree = node.property("device-tree").map(|p| p.value);
    let disk = match node.property("disk") {
        None => None,
        Some(p) => {
            let [offset, size] =
                u64_pair(p.value).ok_or(bad("disk", "must be two 64-bit numbers: offset and size in bytes"))?;
            Some(DiskSlice { offset, size })
        }
    };
    let network = match (node.property("network"), node.property("mac")) {
        (None, None) => None,
        (None, Some(_)) => return Err(bad("mac", "is given but the VM has no `network`")),
        (Some(_), None) => Some(None),
        (Some(_), Some(mac)) => Some(Some(mac.value.try_into().map_err(|_| bad("mac", "must be 6 bytes"))?)),
    };
    let io_cpu = match node.property("io-cpu") {
        None => None,
        Some(_) => Some(u32_prop(node, "io-cpu").ok_or(bad("io-cpu", "must be one 32-bit CPU number"))?),
    };
    let transport = match node.property("virtio-transport") {
        None => VirtioTransport::Mmio,
        Some(p) => p
            .as_str()
            .and_then(VirtioTransport::from_name)
            .ok_or(bad("virtio-transport", "must be \"mmio\" or \"pci\""))?,
    };
    let devices = VmDevices { disk, network, io_cpu, transport };
    let cpus = match node.property("cpus") {
        None => None,
        Some(p) => Some(U32List::new(p.value).ok_or(bad("cpus", "must be a list of 32-bit CPU numbers"))?),
    };
    let policy = match node.property("policy") {
        None => Policy::Pinned,
        Some(p) => {
            let given = p.as_str().ok_or(bad("policy", "is not a string"))?;
            Policy::from_name(given).ok_or(ManifestError::UnknownPolicy { vm: name, given })?
        }
    };
    let slice_us = match node.property("slice-us") {
        None => None,
        Some(_) => Some(u32_prop(node, "slice-us").ok_or(bad("slice-us", "must be one 32-bit number"))?),
    };
    let placement = Placement { cpus, policy, slice_us };
    let mut passthrough = PassthroughList::default();
    for child in node.children().filter(|c| c.name.split('@').next() == Some("passthrough")) {
        let device_name = child.property("name").and_then(|p| p.as_str()).unwrap_or(child.name);
        let reg = child.property("reg").ok_or(bad("passthrough", "has a device without `reg`"))?;
        let [base, size] = u64_pair(reg.value)
            .ok_or(bad("passthrough", "has a `reg` that is not two 64-bit numbers: base and size"))?;
        let interrupts = match child.property("interrupts") {
            None => U32List::default(),
            Some(p) => U32List::new(p.value)
                .ok_or(bad("passthrough", "has `interrupts` that are not a list of 32-bit INTIDs"))?,
        };
        let clock_hz = match child.property("clock-hz") {
            None => None,
            Some(_) => Some(
                u32_prop(child, "clock-hz")
                    .ok_or(bad("passthrough", "has a `clock-hz` that is not one 32-bit number"))?,
            ),
        };
        let device = Passthrough { name: device_name, reg: PhysRange { base, size }, interrupts, clock_hz };
        passthrough.push(device).map_err(|_| bad("passthrough", "has more than 8 devices"))?;
    }
    let identity_mapped = match node.property("identity-mapped") {
        None => None,
        Some(_) => Some(u64_prop(node, "identity-mapped").ok_or(bad("identity-mapped", "must be one 64-bit address"))?),
    };
    Ok(VmSpec {
        name,
        vcpus,
        memory,
        kernel,
        initrd,
        bootargs,
        device_tree,
        devices,
        placement,
        passthrough,
        identity_mapped,
    })
}

#[cfg(test)]
mod tests {
    use vm_fdt::FdtWriter;

    use super::*;

    /// A bundle with one VM "web" (1 vCPU, 64 MiB) and the properties `extra` writes.
    fn bundle(extra: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
        let mut fdt = FdtWriter::new().unwrap();
        let root = fdt.begin_node("").unwrap();
        fdt.property_string("compatible", COMPATIBLE).unwrap();
        let vms = fdt.begin_node("vms").unwrap();
        let vm = fdt.begin_node("vm@0").unwrap();
        fdt.property_string("name", "web").unwrap();
        fdt.property_u32("vcpus", 1).unwrap();
        fdt.property_u64("memory", 64 << 20).unwrap();
        fdt.property("kernel", &[1, 2, 3]).unwrap();
        extra(&mut fdt);
        fdt.end_node(vm).unwrap();
        fdt.end_node(vms).unwrap();
        fdt.end_node(root).unwrap();
        fdt.finish().unwrap()
    }

    fn error(extra: impl FnOnce(&mut FdtWriter)) -> String {
        BootBundle::parse(&bundle(extra)).err().map(|e| e.to_string()).unwrap_or_default()
    }

    /// A bundle whose VMs "a" and "b" name images of `/images` (as xtask writes it): `a`
    /// writes VM a's properties, `b` VM b's; the images are [1, 2, 3] and [4, 5].
    fn shared_images(a: impl FnOnce(&mut FdtWriter), b: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
        let mut fdt = FdtWriter::new().unwrap();
        let root = fdt.begin_node("").unwrap();
        fdt.property_string("compatible", COMPATIBLE).unwrap();
        let vms = fdt.begin_node("vms").unwrap();
        for (i, (name, props)) in
            [("a", Box::new(a) as Box<dyn FnOnce(&mut FdtWriter)>), ("b", Box::new(b))].into_iter().enumerate()
        {
            let vm = fdt.begin_node(&format!("vm@{i}")).unwrap();
            fdt.property_string("name", name).unwrap();
            fdt.property_u32("vcpus", 1).unwrap();
            fdt.property_u64("memory", 64 << 20).unwrap();
            props(&mut fdt);
            fdt.end_node(vm).unwrap();
        }
        fdt.end_node(vms).unwrap();
        let images = fdt.begin_node("images").unwrap();
        for (n, data) in [&[1u8, 2, 3][..], &[4, 5]].into_iter().enumerate() {
            let image = fdt.begin_node(&format!("image@{n:x}")).unwrap();
            fdt.property("data", data).unwrap();
            fdt.end_node(image).unwrap();
        }
        fdt.end_node(images).unwrap();
        fdt.end_node(root).unwrap();
        fdt.finish().unwrap()
    }

    #[test]
    fn vms_booting_the_same_images_share_one_copy_of_each() {
        let both = |fdt: &mut FdtWriter| {
            fdt.property_u32("kernel-image", 0).unwrap();
            fdt.property_u32("initrd-image", 1).unwrap();
        };
        let blob = shared_images(both, both);
        let parsed = BootBundle::parse(&blob).unwrap();
        let vms: Vec<_> = parsed.vms().collect();
        assert_eq!(vms.len(), 2);
        for vm in &vms {
            assert_eq!((vm.kernel, vm.initrd), (&[1u8, 2, 3][..], Some(&[4u8, 5][..])), "VM {}", vm.name);
        }
        assert!(core::ptr::eq(vms[0].kernel, vms[1].kernel), "one copy in the bundle, not one per VM");
        // An image inline in one VM and by reference in the other.
        let blob = shared_images(
            |fdt| fdt.property("kernel", &[9]).unwrap(),
            |fdt| fdt.property_u32("kernel-image", 1).unwrap(),
        );
        let kernels: Vec<_> = BootBundle::parse(&blob).unwrap().vms().map(|vm| vm.kernel).collect();
        assert_eq!(kernels, [&[9u8][..], &[4, 5][..]]);
    }

    #[test]
    fn an_image_reference_that_names_nothing_or_is_malformed_is_refused() {
        let error = |a: &dyn Fn(&mut FdtWriter)| {
            let blob = shared_images(a, |fdt| fdt.property_u32("kernel-image", 0).unwrap());
            BootBundle::parse(&blob).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert_eq!(
            error(&|fdt| fdt.property_u32("kernel-image", 2).unwrap()),
            "VM a: field `kernel-image` names no `/images/image@N` node with `data`"
        );
        assert_eq!(
            error(&|fdt| {
                fdt.property_u32("kernel-image", 0).unwrap();
                fdt.property_u32("initrd-image", 0x10).unwrap();
            }),
            "VM a: field `initrd-image` names no `/images/image@N` node with `data`"
        );
        assert_eq!(
            error(&|fdt| fdt.property_u64("kernel-image", 0).unwrap()),
            "VM a: field `kernel-image` must be one 32-bit image number"
        );
        assert_eq!(
            error(&|fdt| {
                fdt.property("kernel", &[1]).unwrap();
                fdt.property_u32("kernel-image", 0).unwrap();
            }),
            "VM a: field `kernel-image` is given with the image itself: give one or the other"
        );
        assert_eq!(error(&|_| {}), "VM a: field `kernel` is missing");
        // Without an `/images` node, a reference names nothing.
        let blob = bundle(|fdt| fdt.property_u32("initrd-image", 0).unwrap());
        assert_eq!(
            BootBundle::parse(&blob).err().map(|e| e.to_string()).unwrap_or_default(),
            "VM web: field `initrd-image` names no `/images/image@N` node with `data`"
        );
    }

    #[test]
    fn placement_and_passthrough_are_read() {
        let blob = bundle(|fdt| {
            fdt.property_array_u32("cpus", &[2]).unwrap();
            fdt.property_string("policy", "shared").unwrap();
            fdt.property_u32("slice-us", 2000).unwrap();
            let node = fdt.begin_node("passthrough@0").unwrap();
            fdt.property_string("name", "rtc").unwrap();
            fdt.property_array_u64("reg", &[0x0901_0000, 0x1000]).unwrap();
            fdt.property_array_u32("interrupts", &[34]).unwrap();
            fdt.end_node(node).unwrap();
        });
        let parsed = BootBundle::parse(&blob).unwrap();
        let vm = parsed.vms().next().unwrap();
        assert_eq!(vm.placement.cpus.map(|c| c.iter().collect::<Vec<_>>()), Some(vec![2]));
        assert_eq!((vm.placement.policy, vm.placement.time_slice_us()), (Policy::Shared, Some(2000)));
        let [rtc] = vm.passthrough.as_slice() else { panic!("one passthrough device") };
        assert_eq!(
            (rtc.name, rtc.reg, rtc.interrupts.get(0)),
            ("rtc", PhysRange { base: 0x0901_0000, size: 0x1000 }, Some(34))
        );
        // No placement: pinned to free CPUs, as before these properties existed.
        let blob = bundle(|_| {});
        let vm = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!(vm.placement, Placement { cpus: None, policy: Policy::Pinned, slice_us: None });
        assert_eq!(vm.placement.time_slice_us(), None);
    }

    #[test]
    fn an_identity_mapped_vm_and_a_device_clock_are_read() {
        let blob = bundle(|fdt| {
            fdt.property_u64("identity-mapped", 0x2000_0000).unwrap();
            let node = fdt.begin_node("passthrough@0").unwrap();
            fdt.property_string("name", "sdhci").unwrap();
            fdt.property_array_u64("reg", &[0xfe30_0000, 0x1000]).unwrap();
            fdt.property_array_u32("interrupts", &[158]).unwrap();
            fdt.property_u32("clock-hz", 100_000_000).unwrap();
            fdt.end_node(node).unwrap();
        });
        let vm = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!((vm.identity_mapped, vm.ram_ipa()), (Some(0x2000_0000), 0x2000_0000));
        assert_eq!(vm.identity_ram(), Some(PhysRange { base: 0x2000_0000, size: 64 << 20 }));
        assert_eq!(vm.passthrough.as_slice()[0].clock_hz, Some(100_000_000));
        let blob = bundle(|_| {});
        let plain = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!((plain.identity_mapped, plain.ram_ipa(), plain.identity_ram()), (None, 0x4000_0000, None));
        assert_eq!(
            error(|fdt| fdt.property_u32("identity-mapped", 0x2000_0000).unwrap()),
            "VM web: field `identity-mapped` must be one 64-bit address"
        );
    }

    #[test]
    fn a_vm_without_bootargs_gets_an_empty_command_line_and_one_with_them_gets_them() {
        let blob = bundle(|_| {});
        let vm = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!((vm.bootargs, vm.command_line()), (None, ""), "nothing the manifest did not give");
        let blob = bundle(|fdt| fdt.property_string("bootargs", "console=ttyAMA0 quiet").unwrap());
        let vm = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!(vm.command_line(), "console=ttyAMA0 quiet");
    }

    #[test]
    fn an_unknown_policy_is_refused_at_boot() {
        assert_eq!(
            error(|fdt| fdt.property_string("policy", "fair").unwrap()),
            "VM web: field `policy`: \"fair\" is not a policy; write \"pinned\" or \"shared\""
        );
    }

    #[test]
    fn badly_encoded_placement_and_passthrough_are_refused() {
        assert_eq!(
            error(|fdt| fdt.property("cpus", &[0, 0, 1]).unwrap()),
            "VM web: field `cpus` must be a list of 32-bit CPU numbers"
        );
        assert_eq!(
            error(|fdt| fdt.property_u64("slice-us", 1).unwrap()),
            "VM web: field `slice-us` must be one 32-bit number"
        );
        assert_eq!(
            error(|fdt| {
                let node = fdt.begin_node("passthrough@0").unwrap();
                fdt.property_array_u32("reg", &[0x0901_0000, 0x1000]).unwrap();
                fdt.end_node(node).unwrap();
            }),
            "VM web: field `passthrough` has a `reg` that is not two 64-bit numbers: base and size"
        );
        assert_eq!(
            error(|fdt| {
                for i in 0..=MAX_PASSTHROUGH {
                    let node = fdt.begin_node(&format!("passthrough@{i}")).unwrap();
                    fdt.property_array_u64("reg", &[0x1000_0000 + i as u64 * 0x1000, 0x1000]).unwrap();
                    fdt.end_node(node).unwrap();
                }
            }),
            "VM web: field `passthrough` has more than 8 devices"
        );
        assert_eq!(
            error(|fdt| fdt.property_string("virtio-transport", "usb").unwrap()),
            "VM web: field `virtio-transport` must be \"mmio\" or \"pci\""
        );
    }

    #[test]
    fn the_manifest_rules_run_when_a_bundle_is_parsed() {
        assert_eq!(
            error(|fdt| fdt.property_array_u32("cpus", &[1, 2]).unwrap()),
            "VM web: field `cpus` lists 2 CPUs but the VM has 1 vCPU; give one CPU per vCPU"
        );
    }

    #[test]
    fn an_image_without_test_hooks_names_each_one_a_bundle_asks_for() {
        let none = BundleOptions { semihosting_exit: false, test_el2_fault: None };
        assert_eq!(none.test_hooks().count(), 0);
        assert_eq!(none.check_no_test_hooks(), Ok(()));
        let message = |options: BundleOptions| options.check_no_test_hooks().map_err(|e| e.to_string()).unwrap_err();
        let without = ", and this image was built without test hooks (hyp-arch-armv8's `test-hooks` feature, \
                       which only the image of the system tests and benchmarks has): write the bundle without \
                       test options, or boot that image";
        assert_eq!(
            message(BundleOptions { semihosting_exit: true, test_el2_fault: None }),
            format!("it asks for `semihosting-exit`{without}")
        );
        assert_eq!(
            message(BundleOptions { semihosting_exit: false, test_el2_fault: Some((1, El2Fault::WriteText)) }),
            format!("it asks for `test-el2-fault-cpu`{without}")
        );
        assert_eq!(
            message(BundleOptions { semihosting_exit: true, test_el2_fault: Some((0, El2Fault::ReadUnmapped)) }),
            format!("it asks for `semihosting-exit` and `test-el2-fault-cpu`{without}")
        );
    }
}
