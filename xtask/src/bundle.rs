//! The boot bundle (docs/boot-bundle.md): the manifest's VMs with their images, written as
//! one flattened device tree that the loader hands the hypervisor as its initrd. Checked
//! here with the same code the hypervisor runs at boot, so a bad manifest fails before QEMU.

use std::path::{Path, PathBuf};

pub use hyp_core::bundle::El2Fault;
use hyp_core::bundle::{BootBundle, VirtioTransport, COMPATIBLE};
pub use hyp_core::bundle::{DiskSlice, Policy};
use hyp_core::guest_layout;
use hyp_core::image::KernelImage;
use hyp_core::manifest::BoardLimits;
use vm_fdt::FdtWriter;

use crate::XtaskError;

/// One VM to put in the bundle.
#[derive(Clone, Debug, Default)]
pub struct VmEntry {
    pub name: String,
    pub vcpus: u32,
    pub memory: u64,
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub bootargs: Option<String>,
    /// A device tree to boot with instead of the one the hypervisor generates.
    pub device_tree: Option<PathBuf>,
    /// What it is given of the board besides RAM: its virtio disk (a slice of the board's
    /// disk) and NIC, its physical CPUs, and passthrough devices.
    pub devices: VmDevices,
}

/// What a VM is given of the board besides its RAM. Build it with `..Default::default()`:
/// the defaults are no disk, no NIC, each vCPU pinned to a free CPU, no passthrough.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmDevices {
    /// A virtio disk: this slice of the board's disk.
    pub disk: Option<DiskSlice>,
    /// A virtio NIC on the hypervisor's switch, with this MAC address (None: derived from
    /// the VM's index).
    pub network: Option<Option<[u8; 6]>>,
    /// The physical CPUs of its vCPUs.
    pub placement: Placement,
    /// Board devices given to it.
    pub passthrough: Vec<Passthrough>,
    /// Its RAM is the physical memory from this address, at IPA = PA (for a passthrough
    /// device that does DMA: docs/capability-model.md, "Identity-mapped VMs").
    pub identity_mapped: Option<u64>,
    /// The physical CPU that serves its disk and NIC by polling (a side core, bundle
    /// property `io-cpu`); `None`: served on its vCPUs' exits.
    pub io_cpu: Option<u32>,
    /// How its virtio devices reach it (bundle property `virtio-transport`, written only
    /// for PCI).
    pub transport: VirtioTransport,
}

/// Where a VM's vCPUs run (bundle properties `cpus`, `policy`, `slice-us`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The physical CPU of each vCPU; `None`: each vCPU pinned to a CPU no VM lists.
    pub cpus: Option<Vec<u32>>,
    /// `None` writes no `policy` (pinned).
    pub policy: Option<Policy>,
    /// Shared VMs only: the time slice in microseconds (default 10000).
    pub slice_us: Option<u32>,
}

/// A board device given to a VM (a `passthrough@N` node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Passthrough {
    /// A label for messages.
    pub name: String,
    /// Its register window, `[base, base + size)`, page-aligned; the guest sees it there.
    pub base: u64,
    pub size: u64,
    /// Its interrupts, SPI INTIDs (32-1019), routed to the VM.
    pub interrupts: Vec<u32>,
    /// The rate of its clock, for a device whose board node names one (`clock-hz`).
    pub clock_hz: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct BundleOptions {
    pub semihosting_exit: bool,
    /// System tests only: the CPU that takes a deliberate EL2 fault after boot, and which.
    pub test_el2_fault: Option<(u32, El2Fault)>,
}

fn read(path: &Path, vm: &str, what: &str) -> Result<Vec<u8>, XtaskError> {
    std::fs::read(path).map_err(|e| XtaskError::Usage(format!("VM {vm}: cannot read {what} {}: {e}", path.display())))
}

fn fdt_error(e: vm_fdt::Error) -> XtaskError {
    XtaskError::Build(format!("writing the boot bundle: {e}"))
}

/// Writes the bundle for `vms` and checks it as the hypervisor will at boot, the board
/// included (`hyp_core::manifest::check`; `board` is given the bundle's size, which the
/// board's RAM must also hold). Errors name the VM and the field, with no prefix.
pub fn write_for_board<'b>(
    vms: &[VmEntry],
    options: &BundleOptions,
    board: impl FnOnce(u64) -> BoardLimits<'b>,
) -> Result<Vec<u8>, XtaskError> {
    let blob = encode(vms, options)?;
    let bundle = BootBundle::parse(&blob).map_err(|e| XtaskError::Usage(e.to_string()))?;
    bundle.check_board(&board(blob.len() as u64)).map_err(|e| XtaskError::Usage(e.to_string()))?;
    Ok(blob)
}

/// Writes the bundle for `vms` to `target/images/NAME.bundle` (checked as by `write`).
pub fn write_file(name: &str, vms: &[VmEntry], options: &BundleOptions) -> Result<PathBuf, XtaskError> {
    store(name, &write(vms, options)?)
}

fn store(name: &str, blob: &[u8]) -> Result<PathBuf, XtaskError> {
    let dir = crate::images::images_dir();
    let path = dir.join(format!("{name}.bundle"));
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    std::fs::write(&path, blob).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// Writes the bundle for `vms` and checks it as the hypervisor will: its format and the
/// manifest rules that hold on any board (`hyp_core::manifest::check_vms`).
pub fn write(vms: &[VmEntry], options: &BundleOptions) -> Result<Vec<u8>, XtaskError> {
    let blob = encode(vms, options)?;
    BootBundle::parse(&blob).map_err(|e| XtaskError::Usage(format!("boot bundle: {e}")))?;
    Ok(blob)
}

/// The bundle's bytes, unchecked but for each VM's images (readable, an arm64 Image, fit in
/// its memory).
fn encode(vms: &[VmEntry], options: &BundleOptions) -> Result<Vec<u8>, XtaskError> {
    let mut fdt = FdtWriter::new().map_err(fdt_error)?;
    let root = fdt.begin_node("").map_err(fdt_error)?;
    fdt.property_string("compatible", COMPATIBLE).map_err(fdt_error)?;
    let opts = fdt.begin_node("options").map_err(fdt_error)?;
    if options.semihosting_exit {
        fdt.property_null("semihosting-exit").map_err(fdt_error)?;
    }
    if let Some((cpu, fault)) = options.test_el2_fault {
        fdt.property_u32("test-el2-fault-cpu", cpu).map_err(fdt_error)?;
        fdt.property_string("test-el2-fault", fault.name()).map_err(fdt_error)?;
    }
    fdt.end_node(opts).map_err(fdt_error)?;
    let mut images = Images::default();
    let list = fdt.begin_node("vms").map_err(fdt_error)?;
    for (i, vm) in vms.iter().enumerate() {
        let kernel = images.add(&vm.kernel, &vm.name, "kernel")?;
        KernelImage::parse(images.bytes(kernel))
            .map_err(|e| XtaskError::Usage(format!("VM {}: kernel {}: {e}", vm.name, vm.kernel.display())))?;
        let initrd = vm.initrd.as_ref().map(|path| images.add(path, &vm.name, "initrd")).transpose()?;
        // The same placement the hypervisor makes: what does not fit fails here, before QEMU.
        let initrd_size = initrd.map(|i| images.bytes(i).len() as u64);
        guest_layout::layout(vm.memory, images.bytes(kernel), initrd_size, 0)
            .map_err(|e| XtaskError::Usage(format!("VM {}: {e}", vm.name)))?;
        let node = fdt.begin_node(&format!("vm@{i}")).map_err(fdt_error)?;
        fdt.property_string("name", &vm.name).map_err(fdt_error)?;
        fdt.property_u32("vcpus", vm.vcpus).map_err(fdt_error)?;
        fdt.property_u64("memory", vm.memory).map_err(fdt_error)?;
        fdt.property_u32("kernel-image", kernel).map_err(fdt_error)?;
        if let Some(initrd) = initrd {
            fdt.property_u32("initrd-image", initrd).map_err(fdt_error)?;
        }
        if let Some(args) = &vm.bootargs {
            fdt.property_string("bootargs", args).map_err(fdt_error)?;
        }
        if let Some(path) = &vm.device_tree {
            let tree = read(path, &vm.name, "device tree")?;
            // The hypervisor will set /chosen in it: a tree it cannot do that with fails here.
            hyp_core::guest_fdt::with_chosen(&tree, "", None, None)
                .map_err(|e| XtaskError::Usage(format!("VM {}: {}: {e}", vm.name, path.display())))?;
            fdt.property("device-tree", &tree).map_err(fdt_error)?;
        }
        if let Some(DiskSlice { offset, size }) = vm.devices.disk {
            let cells: Vec<u8> = [offset, size].iter().flat_map(|v| v.to_be_bytes()).collect();
            fdt.property("disk", &cells).map_err(fdt_error)?;
        }
        if let Some(mac) = vm.devices.network {
            fdt.property_null("network").map_err(fdt_error)?;
            if let Some(mac) = mac {
                fdt.property("mac", &mac).map_err(fdt_error)?;
            }
        }
        let placement = &vm.devices.placement;
        if let Some(cpus) = &placement.cpus {
            fdt.property_array_u32("cpus", cpus).map_err(fdt_error)?;
        }
        if let Some(policy) = placement.policy {
            fdt.property_string("policy", policy.name()).map_err(fdt_error)?;
        }
        if let Some(slice) = placement.slice_us {
            fdt.property_u32("slice-us", slice).map_err(fdt_error)?;
        }
        if let Some(base) = vm.devices.identity_mapped {
            fdt.property_u64("identity-mapped", base).map_err(fdt_error)?;
        }
        if let Some(cpu) = vm.devices.io_cpu {
            fdt.property_u32("io-cpu", cpu).map_err(fdt_error)?;
        }
        if vm.devices.transport != VirtioTransport::Mmio {
            fdt.property_string("virtio-transport", vm.devices.transport.name()).map_err(fdt_error)?;
        }
        for (j, device) in vm.devices.passthrough.iter().enumerate() {
            let node = fdt.begin_node(&format!("passthrough@{j}")).map_err(fdt_error)?;
            fdt.property_string("name", &device.name).map_err(fdt_error)?;
            fdt.property_array_u64("reg", &[device.base, device.size]).map_err(fdt_error)?;
            fdt.property_array_u32("interrupts", &device.interrupts).map_err(fdt_error)?;
            if let Some(hz) = device.clock_hz {
                fdt.property_u32("clock-hz", hz).map_err(fdt_error)?;
            }
            fdt.end_node(node).map_err(fdt_error)?;
        }
        fdt.end_node(node).map_err(fdt_error)?;
    }
    fdt.end_node(list).map_err(fdt_error)?;
    let node = fdt.begin_node("images").map_err(fdt_error)?;
    for (n, data) in images.distinct.iter().enumerate() {
        let image = fdt.begin_node(&format!("image@{n:x}")).map_err(fdt_error)?;
        fdt.property("data", data).map_err(fdt_error)?;
        fdt.end_node(image).map_err(fdt_error)?;
    }
    fdt.end_node(node).map_err(fdt_error)?;
    fdt.end_node(root).map_err(fdt_error)?;
    fdt.finish().map_err(fdt_error)
}

/// The kernels and initrds of the bundle's VMs, each distinct one once (`/images`): 32 VMs
/// booting the same Linux carry one copy of it, not 32.
#[derive(Default)]
struct Images {
    distinct: Vec<Vec<u8>>,
    by_path: std::collections::HashMap<PathBuf, u32>,
}

impl Images {
    /// The number of the image in file `path` (read once), the same for every file with the
    /// same bytes.
    fn add(&mut self, path: &Path, vm: &str, what: &str) -> Result<u32, XtaskError> {
        if let Some(&n) = self.by_path.get(path) {
            return Ok(n);
        }
        let bytes = read(path, vm, what)?;
        let n = match self.distinct.iter().position(|d| *d == bytes) {
            Some(n) => n,
            None => {
                self.distinct.push(bytes);
                self.distinct.len() - 1
            }
        };
        let n = u32::try_from(n).map_err(|_| XtaskError::Usage("more than 2^32 distinct images".into()))?;
        self.by_path.insert(path.to_path_buf(), n);
        Ok(n)
    }

    fn bytes(&self, n: u32) -> &[u8] {
        &self.distinct[n as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_file(dir: &Path, image_size: u64) -> PathBuf {
        let mut k = vec![0u8; 4096];
        k[16..24].copy_from_slice(&image_size.to_le_bytes());
        k[0x38..0x3c].copy_from_slice(b"ARM\x64");
        let path = dir.join(format!("k{image_size}.Image"));
        std::fs::write(&path, k).unwrap();
        path
    }

    fn vm(kernel: PathBuf) -> VmEntry {
        VmEntry {
            name: "one".into(),
            vcpus: 1,
            memory: 64 << 20,
            kernel,
            initrd: None,
            bootargs: Some("console=ttyAMA0".into()),
            device_tree: None,
            devices: VmDevices::default(),
        }
    }

    fn tempdir(name: &str) -> crate::util::TempDir {
        let d = std::env::temp_dir().join(format!("xtask-bundle-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        crate::util::TempDir(d)
    }

    #[test]
    fn a_bundle_round_trips_through_the_hypervisor_parser() {
        let dir = tempdir("roundtrip");
        let blob = write(
            &[vm(kernel_file(&dir, 8192))],
            &BundleOptions { semihosting_exit: true, test_el2_fault: Some((3, El2Fault::WriteText)) },
        )
        .unwrap();
        let bundle = BootBundle::parse(&blob).unwrap();
        assert!(bundle.options.semihosting_exit);
        assert_eq!(bundle.options.test_el2_fault, Some((3, El2Fault::WriteText)));
        let vms: Vec<_> = bundle.vms().collect();
        assert_eq!(vms.len(), 1);
        assert_eq!((vms[0].name, vms[0].vcpus, vms[0].memory), ("one", 1, 64 << 20));
        assert_eq!(vms[0].kernel.len(), 4096);
        assert_eq!(vms[0].bootargs, Some("console=ttyAMA0"));
        assert_eq!(vms[0].initrd, None);
    }

    #[test]
    fn bad_vms_are_refused_with_the_vm_and_field_named() {
        let dir = tempdir("bad");
        let k = kernel_file(&dir, 8192);
        let err = |v: VmEntry| write(&[v], &BundleOptions::default()).unwrap_err().to_string();
        assert_eq!(
            err(VmEntry { vcpus: 0, ..vm(k.clone()) }),
            "boot bundle: VM one: field `vcpus` must be between 1 and 8"
        );
        assert_eq!(
            err(VmEntry { memory: 3 << 20, ..vm(k.clone()) }),
            "boot bundle: VM one: field `memory` must be a non-zero multiple of 2 MiB"
        );
        assert_eq!(
            err(VmEntry { name: "bad name".into(), ..vm(k.clone()) }),
            "boot bundle: VM bad name: field `name` must be letters, digits, '-' or '_'"
        );
        assert!(err(vm(dir.join("missing"))).starts_with("VM one: cannot read kernel"));
        let huge = kernel_file(&dir, 128 << 20);
        assert!(
            err(vm(huge)).contains("the kernel needs 0x8000000 bytes from the start of RAM but the VM has 0x4000000")
        );
        let big_initrd = dir.join("initrd");
        std::fs::write(&big_initrd, vec![0u8; 63 << 20]).unwrap();
        assert_eq!(
            err(VmEntry { initrd: Some(big_initrd), ..vm(k.clone()) }),
            "VM one: kernel, initrd and device tree need 66 MiB of RAM, the VM has 64 MiB; give the VM more memory"
        );
        let not_image = dir.join("text");
        std::fs::write(&not_image, vec![b'x'; 100]).unwrap();
        assert!(err(vm(not_image)).contains("neither an arm64 Image"));
        let two = write(&[vm(k.clone()), vm(k)], &BundleOptions::default()).unwrap_err().to_string();
        assert_eq!(two, "boot bundle: VM one: two VMs have this name");
    }

    #[test]
    fn devices_round_trip_and_bad_ones_are_refused() {
        let dir = tempdir("devices");
        let k = kernel_file(&dir, 8192);
        let disk = DiskSlice { offset: 1 << 20, size: 8 << 20 };
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x10];
        let with = |devices| VmEntry { devices, ..vm(k.clone()) };
        let devices = VmDevices {
            disk: Some(disk),
            network: Some(Some(mac)),
            io_cpu: Some(3),
            transport: VirtioTransport::Pci,
            ..Default::default()
        };
        let blob = write(&[with(devices)], &BundleOptions::default()).unwrap();
        let bundle = BootBundle::parse(&blob).unwrap();
        let spec = bundle.vms().next().unwrap();
        assert_eq!(
            spec.devices,
            hyp_core::bundle::VmDevices {
                disk: Some(disk),
                network: Some(Some(mac)),
                io_cpu: Some(3),
                transport: VirtioTransport::Pci
            }
        );
        let blob = write(&[vm(k.clone())], &BundleOptions::default()).unwrap();
        let spec = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!(spec.devices, hyp_core::bundle::VmDevices::default());
        assert_eq!(spec.placement, hyp_core::bundle::Placement::default(), "no `cpus`: pinned to free CPUs");
        assert!(spec.passthrough.is_empty());

        let err = |devices| write(&[with(devices)], &BundleOptions::default()).unwrap_err().to_string();
        assert_eq!(
            err(VmDevices { disk: Some(DiskSlice { offset: 100, size: 0 }), ..Default::default() }),
            "boot bundle: VM one: field `disk` offset and size must be multiples of 512 bytes"
        );
        assert_eq!(
            err(VmDevices { network: Some(Some([1, 2, 3, 4, 5, 6])), ..Default::default() }),
            "boot bundle: VM one: field `mac` must be a unicast address (first byte even), not all zeros"
        );
    }

    #[test]
    fn vms_booting_the_same_files_carry_one_copy_of_each() {
        let dir = tempdir("shared");
        let k = kernel_file(&dir, 1 << 20);
        let initrd = dir.join("initrd");
        std::fs::write(&initrd, vec![7u8; 1 << 20]).unwrap();
        let copy = dir.join("same-bytes.Image");
        std::fs::copy(&k, &copy).unwrap();
        let named = |name: &str, kernel: &PathBuf| VmEntry {
            name: name.into(),
            initrd: Some(initrd.clone()),
            ..vm(kernel.clone())
        };
        let vms: Vec<VmEntry> =
            (0..32).map(|i| named(&format!("vm{i}"), if i % 2 == 0 { &k } else { &copy })).collect();
        let blob = write(&vms, &BundleOptions::default()).unwrap();
        assert!(blob.len() < (1 << 20) + 4096 + 16 * 1024, "one kernel and one initrd: {} bytes", blob.len());
        let bundle = BootBundle::parse(&blob).unwrap();
        let specs: Vec<_> = bundle.vms().collect();
        assert_eq!(specs.len(), 32);
        for spec in &specs {
            assert_eq!((spec.kernel.len(), spec.initrd.map(<[u8]>::len)), (4096, Some(1 << 20)), "{}", spec.name);
            assert!(std::ptr::eq(spec.kernel, specs[0].kernel), "{}: the same file's bytes are stored once", spec.name);
        }
        // Different files stay different.
        let other = kernel_file(&dir, 2 << 20);
        let blob = write(&[named("a", &k), named("b", &other)], &BundleOptions::default()).unwrap();
        let bundle = BootBundle::parse(&blob).unwrap();
        let kernels: Vec<_> = bundle.vms().map(|v| v.kernel[16..24].to_vec()).collect();
        assert_eq!(kernels, [(1u64 << 20).to_le_bytes().to_vec(), (2u64 << 20).to_le_bytes().to_vec()]);
    }

    #[test]
    fn an_empty_bundle_is_refused() {
        assert_eq!(
            write(&[], &BundleOptions::default()).unwrap_err().to_string(),
            "boot bundle: the boot bundle describes no VM"
        );
    }
}
