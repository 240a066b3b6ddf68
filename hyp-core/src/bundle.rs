//! The boot bundle: the VM manifest and the guest images, in one flattened device tree that
//! the loader passes as the initrd (docs/boot-bundle.md). `cargo xtask` writes it from a
//! readable manifest; the hypervisor checks it again here, before anything boots.

use core::fmt;

use fdt::node::FdtNode;
use fdt::Fdt;

pub const COMPATIBLE: &str = "hyp,boot-bundle-v1";
/// vCPUs one VM may have.
pub const MAX_VCPUS: u32 = 8;
/// VM RAM is carved in 2 MiB blocks so stage 2 can map it with block descriptors.
pub const RAM_GRANULE: u64 = 2 << 20;

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
}

/// The virtio devices a VM's manifest entry asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmDevices {
    /// A virtio disk: this slice of the board's disk.
    pub disk: Option<DiskSlice>,
    /// A virtio NIC on the hypervisor's switch, with this MAC address (None: derived from
    /// the VM's index).
    pub network: Option<Option<[u8; 6]>>,
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
    /// For the system tests: this CPU makes a deliberate data abort at EL2 after boot, to
    /// show that the report works and that only that CPU stops.
    pub test_el2_fault_cpu: Option<u32>,
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
    /// A VM's field is missing or wrong: names the VM (or its node) and the field.
    BadField {
        vm: &'a str,
        field: &'static str,
        problem: &'static str,
    },
    DuplicateName {
        vm: &'a str,
    },
}

impl fmt::Display for BundleError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotABundle => {
                write!(f, "the initrd is not a boot bundle ({COMPATIBLE}); build one with `cargo xtask`")
            }
            Self::NoVms => write!(f, "the boot bundle describes no VM"),
            Self::BadField { vm, field, problem } => write!(f, "VM {vm}: field `{field}` {problem}"),
            Self::DuplicateName { vm } => write!(f, "VM {vm}: two VMs have this name"),
        }
    }
}

impl<'a> BootBundle<'a> {
    pub fn parse(blob: &'a [u8]) -> Result<Self, BundleError<'a>> {
        let fdt = Fdt::new(blob).map_err(|_| BundleError::NotABundle)?;
        let root = fdt.find_node("/").ok_or(BundleError::NotABundle)?;
        if root.property("compatible").and_then(|p| p.as_str()) != Some(COMPATIBLE) {
            return Err(BundleError::NotABundle);
        }
        let options = fdt.find_node("/options");
        let semihosting_exit = options.is_some_and(|o| o.property("semihosting-exit").is_some());
        let test_el2_fault_cpu = options.and_then(|o| u32_prop(o, "test-el2-fault-cpu"));
        let bundle = BootBundle { fdt, options: BundleOptions { semihosting_exit, test_el2_fault_cpu } };
        bundle.check()?;
        Ok(bundle)
    }

    fn vm_nodes(&self) -> impl Iterator<Item = FdtNode<'_, 'a>> {
        self.fdt.find_node("/vms").into_iter().flat_map(|n| n.children())
    }

    /// Every VM, in manifest order. All were checked by `parse`.
    pub fn vms(&self) -> impl Iterator<Item = VmSpec<'a>> + '_ {
        self.vm_nodes().filter_map(|n| vm_spec(n).ok())
    }

    fn check(&self) -> Result<(), BundleError<'a>> {
        let mut count = 0;
        for (i, node) in self.vm_nodes().enumerate() {
            let vm = vm_spec(node)?;
            if self.vm_nodes().take(i).filter_map(|n| vm_spec(n).ok()).any(|other| other.name == vm.name) {
                return Err(BundleError::DuplicateName { vm: vm.name });
            }
            count += 1;
        }
        if count == 0 {
            return Err(BundleError::NoVms);
        }
        Ok(())
    }
}

fn u32_prop(node: FdtNode<'_, '_>, name: &str) -> Option<u32> {
    let v = node.property(name)?.value;
    Some(u32::from_be_bytes(v.try_into().ok()?))
}

fn u64_prop(node: FdtNode<'_, '_>, name: &str) -> Option<u64> {
    let v = node.property(name)?.value;
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

fn vm_spec<'a>(node: FdtNode<'_, 'a>) -> Result<VmSpec<'a>, BundleError<'a>> {
    let name = node.property("name").and_then(|p| p.as_str()).unwrap_or(node.name);
    let bad = |field, problem| BundleError::BadField { vm: name, field, problem };
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(bad("name", "must be letters, digits, '-' or '_'"));
    }
    let vcpus = u32_prop(node, "vcpus").ok_or(bad("vcpus", "is missing"))?;
    if vcpus == 0 || vcpus > MAX_VCPUS {
        return Err(bad("vcpus", "must be between 1 and 8"));
    }
    let memory = u64_prop(node, "memory").ok_or(bad("memory", "is missing"))?;
    if memory == 0 || memory % RAM_GRANULE != 0 {
        return Err(bad("memory", "must be a non-zero multiple of 2 MiB"));
    }
    let kernel = node.property("kernel").map(|p| p.value).ok_or(bad("kernel", "is missing"))?;
    if kernel.is_empty() {
        return Err(bad("kernel", "is empty"));
    }
    let initrd = node.property("initrd").map(|p| p.value);
    let bootargs = match node.property("bootargs") {
        Some(p) => Some(p.as_str().ok_or(bad("bootargs", "is not a string"))?),
        None => None,
    };
    let device_tree = node.property("device-tree").map(|p| p.value);
    let disk = match node.property("disk") {
        None => None,
        Some(p) => {
            let cells: Option<[u64; 2]> = (p.value.len() == 16)
                .then(|| [0, 8].map(|at| u64::from_be_bytes(p.value[at..at + 8].try_into().unwrap_or([0; 8]))));
            let [offset, size] = cells.ok_or(bad("disk", "must be two 64-bit numbers: offset and size in bytes"))?;
            if offset % SECTOR_SIZE != 0 || size % SECTOR_SIZE != 0 {
                return Err(bad("disk", "offset and size must be multiples of 512 bytes"));
            }
            Some(DiskSlice { offset, size })
        }
    };
    let network = match (node.property("network"), node.property("mac")) {
        (None, None) => None,
        (None, Some(_)) => return Err(bad("mac", "is given but the VM has no `network`")),
        (Some(_), None) => Some(None),
        (Some(_), Some(mac)) => {
            let mac: [u8; 6] = mac.value.try_into().map_err(|_| bad("mac", "must be 6 bytes"))?;
            if mac[0] & 1 != 0 || mac == [0; 6] {
                return Err(bad("mac", "must be a unicast address (first byte even), not all zeros"));
            }
            Some(Some(mac))
        }
    };
    let devices = VmDevices { disk, network };
    Ok(VmSpec { name, vcpus, memory, kernel, initrd, bootargs, device_tree, devices })
}
