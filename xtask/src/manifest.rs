//! The manifest (docs/manifest.md): one TOML file that describes the board and its VMs. It
//! becomes the boot bundle's VM list; the rules it must keep are `hyp_core::manifest`'s,
//! checked here against the board xtask will start (QEMU `virt` from its options, or a board
//! its device tree describes: QEMU `raspi4b`), and again by the hypervisor at boot against
//! the board it finds.

use std::path::{Path, PathBuf};

use hyp_core::bundle::{Policy, VirtioTransport};
use hyp_core::fdt::DmaReach;
use hyp_core::manifest::{
    BoardDevice, BoardDevices, BoardLimits, DeviceTable, DeviceTreeDevices, DmaReason, ManifestError,
};
use hyp_core::platform::{PhysRange, Platform};
use serde::Deserialize;

use crate::bundle::{self, BundleOptions, DiskSlice, Passthrough, Placement, VmDevices, VmEntry};
use crate::linux_guest::DebianArch;
use crate::XtaskError;

/// The word that stands for the Debian arm64 guest `cargo xtask image` builds, as `kernel`
/// (its kernel) or `initrd` (its BusyBox initramfs).
pub const DEBIAN: &str = "debian";
/// The same for the Debian armhf guest (a 32-bit kernel, run in AArch32).
pub const DEBIAN_ARMHF: &str = "debian-armhf";

/// The Debian guest a `kernel` or `initrd` word names, if it names one.
fn debian_guest(word: &str) -> Option<DebianArch> {
    match word {
        DEBIAN => Some(DebianArch::Arm64),
        DEBIAN_ARMHF => Some(DebianArch::Armhf),
        _ => None,
    }
}

/// The devices of QEMU's `virt` board (hw/arm/virt.c, `base_memmap` and `a15irqmap`) that
/// a VM can be given: each a page of registers and one SPI.
pub const QEMU_VIRT_DEVICES: &[BoardDevice<'static>] = &[
    // PL031 real-time clock: VIRT_RTC, SPI 2.
    BoardDevice {
        name: "rtc",
        reg: PhysRange { base: 0x0901_0000, size: 0x1000 },
        intids: &[34],
        compatible: "arm,pl031",
        dma_properties: &[],
    },
    // PL061 GPIO controller: VIRT_GPIO, SPI 7 (its pin 3 is the power button).
    BoardDevice {
        name: "gpio",
        reg: PhysRange { base: 0x0903_0000, size: 0x1000 },
        intids: &[39],
        compatible: "arm,pl061",
        dma_properties: &[],
    },
];

/// What the hypervisor drives itself on QEMU's `virt`: the GIC and its CPU peripherals
/// (VIRT_CPUPERIPHS up to the UART), the PL011 UART (VIRT_UART), the 32 virtio-mmio
/// transports (VIRT_MMIO, 0x200 bytes each).
pub const QEMU_VIRT_HYPERVISOR_DEVICES: &[PhysRange] = &[
    PhysRange { base: 0x0800_0000, size: 0x0100_0000 },
    PhysRange { base: 0x0900_0000, size: 0x1000 },
    PhysRange { base: 0x0a00_0000, size: 32 * 0x200 },
];

/// Where QEMU's `virt` puts RAM.
pub const QEMU_VIRT_RAM_BASE: u64 = 0x4000_0000;

/// RAM the hypervisor keeps for itself on top of the bundle: its 32 MiB heap, its image,
/// the board's device tree, and the 2 MiB rounding of what is left. An estimate: the
/// hypervisor checks the real figure at boot.
pub const HYPERVISOR_RESERVE: u64 = 48 << 20;

/// The board a manifest runs on: QEMU's `virt` with these CPUs, RAM and disk, or a board
/// described by the device tree its loader passes (QEMU `raspi4b`: `Board::from_device_tree`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Board {
    pub cpus: u32,
    pub memory_mib: u32,
    /// The size of the board's virtio disk in bytes, if it has one.
    pub disk: Option<u64>,
    ram: Vec<PhysRange>,
    described: Described,
}

/// Where the board's devices and the hypervisor's own are known from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Described {
    /// xtask's tables of QEMU `virt` (`QEMU_VIRT_DEVICES`, `QEMU_VIRT_HYPERVISOR_DEVICES`).
    QemuVirt,
    /// A device tree, read by the hypervisor's own code as it reads it at boot.
    DeviceTree {
        /// `hyp_core::manifest::hypervisor_windows` of the tree.
        hypervisor: Vec<PhysRange>,
        /// Bytes of RAM the tree reserves (`/memreserve/`, `/reserved-memory`).
        reserved: u64,
        devices: TreeDevices,
    },
}

/// The devices of a device tree the board owns: `DeviceTreeDevices` borrows its blob, so it
/// is made again for each question (it only checks the header).
#[derive(Clone, Debug, PartialEq, Eq)]
struct TreeDevices(Vec<u8>);

impl BoardDevices for TreeDevices {
    fn device_at(&self, window: PhysRange) -> Option<PhysRange> {
        DeviceTreeDevices::new(&self.0)?.device_at(window)
    }
    fn other_device_in(&self, window: PhysRange, device: PhysRange) -> Option<PhysRange> {
        DeviceTreeDevices::new(&self.0)?.other_device_in(window, device)
    }
    fn dma_reach(&self, device: PhysRange) -> Option<DmaReach> {
        DeviceTreeDevices::new(&self.0)?.dma_reach(device)
    }
    fn needs_clock(&self, device: PhysRange) -> bool {
        DeviceTreeDevices::new(&self.0).is_some_and(|d| d.needs_clock(device))
    }
    fn is_gic_msi_frame(&self, device: PhysRange) -> bool {
        DeviceTreeDevices::new(&self.0).is_some_and(|d| d.is_gic_msi_frame(device))
    }
    fn raises(&self, device: PhysRange, intid: u32) -> bool {
        DeviceTreeDevices::new(&self.0).is_some_and(|d| d.raises(device, intid))
    }
    fn dma(&self, device: PhysRange) -> Option<DmaReason> {
        // A tree that cannot be read (it was read once in from_device_tree) hides nothing:
        // the device is taken to be able to DMA.
        DeviceTreeDevices::new(&self.0).map_or(Some(DmaReason::NotKnownDmaFree), |d| d.dma(device))
    }
}

impl Board {
    pub fn qemu_virt(cpus: u32, memory_mib: u32, disk: Option<u64>) -> Board {
        let ram = vec![PhysRange { base: QEMU_VIRT_RAM_BASE, size: u64::from(memory_mib) << 20 }];
        Board { cpus, memory_mib, disk, ram, described: Described::QemuVirt }
    }

    /// The board `dtb` describes, as the loader passes it (memory filled in): its enabled
    /// CPUs, RAM, reserved memory, the devices the hypervisor drives and the others, read
    /// with the code the hypervisor runs at boot (`Platform::from_device_tree`). No disk:
    /// a board disk is a virtio-mmio one, which such a board has only if the tree says so.
    pub fn from_device_tree(dtb: &[u8]) -> Result<Board, String> {
        let platform = Platform::from_device_tree(dtb).map_err(|e| e.to_string())?;
        let ram: Vec<PhysRange> = platform.memory.iter().copied().collect();
        let total: u64 = ram.iter().map(|r| r.size).sum();
        let board = Board {
            cpus: platform.cpus.len() as u32,
            memory_mib: (total >> 20) as u32,
            disk: None,
            ram,
            described: Described::DeviceTree {
                hypervisor: hyp_core::manifest::hypervisor_windows(&platform).iter().copied().collect(),
                reserved: platform.reserved.iter().map(|r| r.size).sum(),
                devices: TreeDevices(dtb.to_vec()),
            },
        };
        Ok(board)
    }

    /// The limits the manifest is checked against, when the bundle is `bundle_size` bytes:
    /// the loader puts the bundle in RAM, so it takes room from the VMs.
    pub fn limits(&self, bundle_size: u64) -> BoardLimits<'_> {
        const TABLE: DeviceTable<'static> = DeviceTable(QEMU_VIRT_DEVICES);
        let bundle = bundle_size.div_ceil(2 << 20) * (2 << 20);
        let ram: u64 = self.ram.iter().map(|r| r.size).sum();
        let (reserved, hypervisor_devices, devices): (u64, &[PhysRange], &dyn BoardDevices) = match &self.described {
            Described::QemuVirt => (0, QEMU_VIRT_HYPERVISOR_DEVICES, &TABLE),
            Described::DeviceTree { hypervisor, reserved, devices } => (*reserved, hypervisor, devices),
        };
        BoardLimits {
            cpus: self.cpus as usize,
            memory: ram.saturating_sub(reserved + HYPERVISOR_RESERVE + bundle),
            ram: &self.ram,
            hypervisor_devices,
            disk: self.disk,
            devices,
            // Where the hypervisor's heap and image go is known only at boot, where the
            // hypervisor checks an identity-mapped VM's RAM against them.
            held: &[],
        }
    }
}

/// A manifest, read: its `[board]` and its VMs as bundle entries (paths resolved).
#[derive(Clone, Debug)]
pub struct Manifest {
    pub path: PathBuf,
    /// `[board] cpus`, if given.
    pub board_cpus: Option<u32>,
    /// `[board] memory_mib`, if given.
    pub board_memory_mib: Option<u32>,
    pub vms: Vec<VmEntry>,
}

/// The Debian guest's kernel and initramfs, for VMs that say `"debian"`.
#[derive(Clone, Debug)]
pub struct DebianGuest {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BoardToml {
    cpus: Option<u32>,
    memory_mib: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VmToml {
    name: String,
    vcpus: u32,
    memory_mib: u64,
    cpus: Option<Vec<u32>>,
    policy: Option<String>,
    slice_us: Option<u32>,
    kernel: String,
    initrd: Option<String>,
    bootargs: Option<String>,
    device_tree: Option<String>,
    disk: Option<DiskToml>,
    network: Option<NetworkToml>,
    #[serde(default)]
    passthrough: Vec<PassthroughToml>,
    identity_mapped: Option<IdentityToml>,
    io_cpu: Option<u32>,
    virtio_transport: Option<String>,
}

/// `identity_mapped = { base = 0x2000_0000 }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityToml {
    base: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiskToml {
    #[serde(default)]
    offset_mib: u64,
    #[serde(default)]
    size_mib: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum NetworkToml {
    On(bool),
    Mac(MacToml),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MacToml {
    mac: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PassthroughToml {
    name: String,
    reg: [u64; 2],
    #[serde(default)]
    interrupts: Vec<u32>,
    clock_hz: Option<u32>,
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| (b.len() == 2).then(|| u8::from_str_radix(b, 16).ok()).flatten())
        .collect::<Option<_>>()?;
    bytes.try_into().ok()
}

impl Manifest {
    /// Reads the manifest at `path`. `debian` is called (once per architecture) if a VM
    /// names a Debian guest.
    pub fn load(
        path: &Path,
        debian: &mut dyn FnMut(DebianArch) -> Result<DebianGuest, XtaskError>,
    ) -> Result<Manifest, XtaskError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| XtaskError::Usage(format!("cannot read the manifest {}: {e}", path.display())))?;
        Self::parse(&text, path, debian)
    }

    /// Reads a manifest's text; relative paths are relative to `path`'s folder.
    pub fn parse(
        text: &str,
        path: &Path,
        debian: &mut dyn FnMut(DebianArch) -> Result<DebianGuest, XtaskError>,
    ) -> Result<Manifest, XtaskError> {
        let usage = |m: String| XtaskError::Usage(format!("{}: {m}", path.display()));
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| usage(e.to_string().trim_end().into()))?;
        let mut board = BoardToml { cpus: None, memory_mib: None };
        let mut vm_tables = Vec::new();
        for (key, value) in doc {
            match key.as_str() {
                "board" => board = value.try_into().map_err(|e| usage(format!("[board]: {e}")))?,
                "vm" => match value {
                    toml::Value::Array(vms) => vm_tables = vms,
                    _ => return Err(usage("`vm` must be a list of VMs, each a [[vm]] table".into())),
                },
                other => {
                    return Err(usage(format!(
                        "unknown key `{other}` at the top level; the keys are [board] and [[vm]]"
                    )))
                }
            }
        }
        if vm_tables.is_empty() {
            return Err(usage("no [[vm]]: describe at least one VM".into()));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut guests: Vec<(DebianArch, DebianGuest)> = Vec::new();
        let mut vms = Vec::new();
        for (i, table) in vm_tables.into_iter().enumerate() {
            let name = table.get("name").and_then(|n| n.as_str()).map_or(format!("#{}", i + 1), str::to_string);
            let vm_error = |m: String| usage(format!("VM {name}: {m}"));
            let vm: VmToml = table.try_into().map_err(|e| vm_error(e.to_string().trim_end().into()))?;
            let mut file = |given: &str, field: &str| -> Result<PathBuf, XtaskError> {
                let Some(arch) = debian_guest(given) else {
                    return Ok(dir.join(given));
                };
                if !guests.iter().any(|(a, _)| *a == arch) {
                    guests.push((arch, debian(arch)?));
                }
                let g = &guests.iter().find(|(a, _)| *a == arch).expect("the Debian guest was just added").1;
                Ok(if field == "kernel" { g.kernel.clone() } else { g.initrd.clone() })
            };
            let kernel = file(&vm.kernel, "kernel")?;
            let initrd = vm.initrd.as_deref().map(|i| file(i, "initrd")).transpose()?;
            let bootargs = match (vm.bootargs, debian_guest(&vm.kernel).is_some()) {
                (None, true) => Some(crate::linux_guest::BOOTARGS.to_string()),
                (args, _) => args,
            };
            let mib = |v: u64, field: &str| {
                v.checked_mul(1 << 20).ok_or_else(|| vm_error(format!("field `{field}`: {v} MiB is too large")))
            };
            let memory = mib(vm.memory_mib, "memory_mib")?;
            let disk = match vm.disk {
                None => None,
                Some(d) => Some(DiskSlice { offset: mib(d.offset_mib, "disk")?, size: mib(d.size_mib, "disk")? }),
            };
            let network = match vm.network {
                None | Some(NetworkToml::On(false)) => None,
                Some(NetworkToml::On(true)) => Some(None),
                Some(NetworkToml::Mac(MacToml { mac })) => Some(Some(parse_mac(&mac).ok_or_else(|| {
                    vm_error(format!(
                        "field `network`: \"{mac}\" is not a MAC address (six hex bytes: 52:54:00:12:35:10)"
                    ))
                })?)),
            };
            let policy = match vm.policy {
                None => None,
                Some(given) => Some(Policy::from_name(&given).ok_or_else(|| {
                    XtaskError::Usage(format!(
                        "{}: {}",
                        path.display(),
                        ManifestError::UnknownPolicy { vm: &vm.name, given: &given }
                    ))
                })?),
            };
            let placement = Placement { cpus: vm.cpus, policy, slice_us: vm.slice_us };
            let passthrough = vm
                .passthrough
                .into_iter()
                .map(|p| Passthrough {
                    name: p.name,
                    base: p.reg[0],
                    size: p.reg[1],
                    interrupts: p.interrupts,
                    clock_hz: p.clock_hz,
                })
                .collect();
            let identity_mapped = vm.identity_mapped.map(|i| i.base);
            let transport = match vm.virtio_transport.as_deref() {
                None => VirtioTransport::Mmio,
                Some(name) => VirtioTransport::from_name(name).ok_or_else(|| {
                    usage(format!(
                        "VM {}: field `virtio_transport`: \"{name}\" is not a transport; give \"mmio\" (the \
                         default) or \"pci\"",
                        vm.name
                    ))
                })?,
            };
            vms.push(VmEntry {
                name: vm.name,
                vcpus: vm.vcpus,
                memory,
                kernel,
                initrd,
                bootargs,
                device_tree: vm.device_tree.map(|t| dir.join(t)),
                devices: VmDevices {
                    disk,
                    network,
                    placement,
                    passthrough,
                    identity_mapped,
                    io_cpu: vm.io_cpu,
                    transport,
                },
            });
        }
        Ok(Manifest { path: path.to_path_buf(), board_cpus: board.cpus, board_memory_mib: board.memory_mib, vms })
    }

    /// The manifest's `[board]` against a board xtask cannot change (QEMU `raspi4b`, named
    /// `board_name`): what it gives must be what the board has.
    pub fn check_fixed_board(&self, board: &Board, board_name: &str) -> Result<(), XtaskError> {
        let differs = [("cpus", self.board_cpus, board.cpus), ("memory_mib", self.board_memory_mib, board.memory_mib)]
            .into_iter()
            .find_map(|(key, given, has)| given.filter(|&g| g != has).map(|g| (key, g, has)));
        match differs {
            None => Ok(()),
            Some((key, given, has)) => Err(XtaskError::Usage(format!(
                "{}: [board] {key} = {given}, but {board_name} has {has} and cannot be given another; write {has} or \
                 leave it out",
                self.path.display()
            ))),
        }
    }

    /// Whether a VM has a virtio disk (the board then needs one).
    pub fn wants_disk(&self) -> bool {
        self.vms.iter().any(|vm| vm.devices.disk.is_some())
    }

    /// Whether a VM has a NIC (the board then needs one).
    pub fn wants_network(&self) -> bool {
        self.vms.iter().any(|vm| vm.devices.network.is_some())
    }

    /// The boot bundle, checked against `board` as the hypervisor will check it at boot.
    /// Errors start with the manifest's path, then name the VM and the field.
    pub fn bundle(&self, board: &Board, options: &BundleOptions) -> Result<Vec<u8>, XtaskError> {
        bundle::write_for_board(&self.vms, options, |size| board.limits(size))
            .map_err(|e| XtaskError::Usage(format!("{}: {e}", self.path.display())))
    }

    /// The VMs, for messages: `name (vCPUs, MiB, CPUs)`.
    pub fn summary(&self) -> String {
        let cpus = |vm: &VmEntry| match (&vm.devices.placement.cpus, vm.devices.placement.policy) {
            (None, _) => "free CPUs".to_string(),
            (Some(c), p) => {
                let list: Vec<String> = c.iter().map(u32::to_string).collect();
                format!("{} on CPU {}", p.unwrap_or_default().name(), list.join(","))
            }
        };
        let vms: Vec<String> = self
            .vms
            .iter()
            .map(|vm| format!("{} ({} vCPU, {} MiB, {})", vm.name, vm.vcpus, vm.memory >> 20, cpus(vm)))
            .collect();
        vms.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use hyp_core::bundle::{BootBundle, VmSpec};

    use super::*;

    const GIB: u64 = 1 << 30;

    /// A directory of this call's own: tests run in parallel, and one that rewrote a file
    /// another was reading made it read an empty kernel.
    fn tempdir(name: &str) -> crate::util::TempDir {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("xtask-manifest-test-{name}-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        crate::util::TempDir(d)
    }

    /// A fake Debian guest: an arm64 Image header and a small initramfs.
    fn fake_debian(dir: &Path) -> DebianGuest {
        let mut kernel = vec![0u8; 4096];
        kernel[16..24].copy_from_slice(&(8192u64).to_le_bytes());
        kernel[0x38..0x3c].copy_from_slice(b"ARM\x64");
        let guest = DebianGuest { kernel: dir.join("vmlinuz.Image"), initrd: dir.join("initramfs.cpio") };
        std::fs::write(&guest.kernel, kernel).unwrap();
        std::fs::write(&guest.initrd, vec![0u8; 1024]).unwrap();
        guest
    }

    fn examples() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
    }

    fn load(path: &Path, dir: &Path) -> Manifest {
        let guest = fake_debian(dir);
        Manifest::load(path, &mut |_| Ok(guest.clone())).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The board an example manifest is written for: QEMU raspi4b's (the tree it passes,
    /// `rpi4::qemu_loaded_tree` of Debian's fixed-up one) for the Pi's, QEMU virt otherwise.
    fn board_of(m: &Manifest) -> Board {
        if m.path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("rpi4")) {
            return Board::from_device_tree(include_bytes!("../../hyp-core/tests/data/qemu-raspi4b.dtb")).unwrap();
        }
        Board::qemu_virt(m.board_cpus.unwrap(), m.board_memory_mib.unwrap(), Some(GIB))
    }

    /// The bundle of `text` (as a manifest `test.toml`) on a 4-CPU, 1 GiB board with a
    /// 1 GiB disk, or the error.
    fn build(text: &str) -> Result<Vec<u8>, String> {
        let dir = tempdir("build");
        let guest = fake_debian(&dir);
        let m = Manifest::parse(text, Path::new("test.toml"), &mut |_| Ok(guest.clone())).map_err(|e| e.to_string())?;
        m.bundle(&Board::qemu_virt(4, 1024, Some(GIB)), &BundleOptions::default()).map_err(|e| e.to_string())
    }

    fn error(text: &str) -> String {
        build(text).map(|_| ()).unwrap_err()
    }

    /// A VM table for the tests: name, 1 vCPU, 64 MiB, the fake Debian kernel, and `extra`.
    fn vm(name: &str, extra: &str) -> String {
        format!("[[vm]]\nname = \"{name}\"\nvcpus = 1\nmemory_mib = 64\nkernel = \"debian\"\n{extra}\n")
    }

    #[test]
    fn every_example_manifest_becomes_a_bundle_the_hypervisor_accepts() {
        let dir = tempdir("examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(examples()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let m = load(&path, &dir);
                let blob = m.bundle(&board_of(&m), &BundleOptions::default()).unwrap_or_else(|e| panic!("{e}"));
                let bundle = BootBundle::parse(&blob).unwrap();
                assert_eq!(bundle.vms().count(), m.vms.len(), "{}", path.display());
                seen += 1;
            }
        }
        assert!(seen >= 2, "manifests/ has the examples");
    }

    #[test]
    fn io_cpu_reaches_the_bundle_and_is_checked_against_the_board() {
        let blob = build(&vm("a", "cpus = [0]\nio_cpu = 3\nnetwork = true")).unwrap();
        let spec = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!(spec.devices.io_cpu, Some(3));
        assert_eq!(
            error(&vm("a", "cpus = [0]\nio_cpu = 5\nnetwork = true")),
            "test.toml: VM a: field `io_cpu`: CPU 5 does not exist (the board has CPUs 0-3); name one of those"
        );
        assert!(error(&vm("a", "cpus = [3]\nio_cpu = 3\nnetwork = true")).contains("an I/O CPU runs no vCPU"));
    }

    #[test]
    fn virtio_transport_reaches_the_bundle_and_an_unknown_one_is_refused() {
        let spec_of = |blob: &[u8]| BootBundle::parse(blob).unwrap().vms().next().unwrap().devices.transport;
        assert_eq!(spec_of(&build(&vm("a", "network = true")).unwrap()), VirtioTransport::Mmio);
        let pci = build(&vm("a", "network = true\nvirtio_transport = \"pci\"")).unwrap();
        assert_eq!(spec_of(&pci), VirtioTransport::Pci);
        assert_eq!(
            error(&vm("a", "virtio_transport = \"pcie\"")),
            "test.toml: VM a: field `virtio_transport`: \"pcie\" is not a transport; give \"mmio\" (the default) \
             or \"pci\""
        );
    }

    #[test]
    fn three_vms_round_trips_from_toml_to_the_hypervisors_view() {
        let dir = tempdir("three");
        let m = load(&examples().join("three-vms.toml"), &dir);
        assert_eq!((m.board_cpus, m.board_memory_mib), (Some(4), Some(2048)));
        let blob = m.bundle(&board_of(&m), &BundleOptions::default()).unwrap();
        let bundle = BootBundle::parse(&blob).unwrap();
        let vms: Vec<VmSpec<'_>> = bundle.vms().collect();
        let names: Vec<&str> = vms.iter().map(|v| v.name).collect();
        assert_eq!(names, ["web", "db", "batch"]);
        for (i, vm) in vms.iter().enumerate() {
            assert_eq!(vm.memory, 256 << 20);
            assert_eq!(vm.kernel.len(), 4096, "the Debian kernel");
            assert_eq!(vm.initrd.map(<[u8]>::len), Some(1024), "the Debian initramfs");
            let ip = format!("guest.ip=10.0.2.{}", 15 + i);
            assert!(vm.bootargs.unwrap().contains(&ip), "{}", vm.bootargs.unwrap());
            let disk = vm.devices.disk.unwrap();
            assert_eq!((disk.offset, disk.size), (i as u64 * (256 << 20), 256 << 20));
            assert!(vm.passthrough.is_empty());
        }
        let cpus = |vm: &VmSpec<'_>| vm.placement.cpus.map(|c| c.iter().collect::<Vec<_>>());
        assert_eq!((cpus(&vms[0]), vms[0].placement.policy), (Some(vec![0]), Policy::Pinned));
        assert_eq!((cpus(&vms[1]), vms[1].placement.policy), (Some(vec![2]), Policy::Shared));
        assert_eq!((vms[2].vcpus, cpus(&vms[2]), vms[2].placement.policy), (2, Some(vec![2, 3]), Policy::Shared));
        assert_eq!(vms[2].placement.time_slice_us(), Some(10_000));
        assert_eq!(vms[0].devices.network, Some(None));
        assert_eq!(vms[1].devices.network, Some(Some([0x52, 0x54, 0, 0x12, 0x35, 0x21])));
    }

    #[test]
    fn one_vm_is_the_default_run() {
        let dir = tempdir("one");
        let m = load(&examples().join("one-vm.toml"), &dir);
        assert_eq!((m.board_cpus, m.board_memory_mib), (Some(4), Some(1024)), "QEMU's defaults");
        let [vm] = &m.vms[..] else { panic!("one VM") };
        // What `cargo xtask qemu` builds with no options (main.rs, qemu_linux).
        let default_run = VmEntry {
            name: "linux".into(),
            vcpus: 2,
            memory: 512 << 20,
            kernel: dir.join("vmlinuz.Image"),
            initrd: Some(dir.join("initramfs.cpio")),
            bootargs: Some(format!("{} {}", crate::linux_guest::BOOTARGS, crate::linux_guest::NETWORK_BOOTARGS)),
            device_tree: None,
            devices: VmDevices {
                disk: Some(DiskSlice { offset: 0, size: 0 }),
                network: Some(None),
                ..Default::default()
            },
        };
        assert_eq!(format!("{vm:?}"), format!("{default_run:?}"));
    }

    #[test]
    fn passthrough_devices_reach_the_bundle() {
        let text = vm(
            "clock",
            "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\ninterrupts = [34]\n\
             [[vm.passthrough]]\nname = \"gpio\"\nreg = [0x0903_0000, 0x1000]\n",
        );
        let blob = build(&text).unwrap();
        let bundle = BootBundle::parse(&blob).unwrap();
        let spec = bundle.vms().next().unwrap();
        let devices: Vec<_> = spec
            .passthrough
            .iter()
            .map(|p| (p.name, p.reg.base, p.reg.size, p.interrupts.iter().collect::<Vec<_>>()))
            .collect();
        assert_eq!(devices, [("rtc", 0x0901_0000, 0x1000, vec![34]), ("gpio", 0x0903_0000, 0x1000, vec![])]);
        assert_eq!(spec.bootargs, Some(crate::linux_guest::BOOTARGS), "the Debian kernel's default command line");
    }

    /// `identity_mapped` and `clock_hz` reach the bundle; on QEMU `virt`, whose devices
    /// xtask knows are all DMA-free, an identity-mapped VM is refused by the board check.
    #[test]
    fn identity_mapped_and_clock_hz_are_read_and_checked_against_the_board() {
        let text = vm(
            "sd",
            "identity_mapped = { base = 0x5000_0000 }\n[[vm.passthrough]]\nname = \"rtc\"\n\
             reg = [0x0901_0000, 0x1000]\ninterrupts = [34]\nclock_hz = 32768\n",
        );
        let dir = tempdir("identity");
        let guest = fake_debian(&dir);
        let m = Manifest::parse(&text, Path::new("test.toml"), &mut |_| Ok(guest.clone())).unwrap();
        assert_eq!(m.vms[0].devices.identity_mapped, Some(0x5000_0000));
        assert_eq!(m.vms[0].devices.passthrough[0].clock_hz, Some(32768));
        let blob = crate::bundle::write(&m.vms, &BundleOptions::default()).unwrap();
        let spec = BootBundle::parse(&blob).unwrap().vms().next().unwrap();
        assert_eq!((spec.identity_mapped, spec.passthrough.as_slice()[0].clock_hz), (Some(0x5000_0000), Some(32768)));
        assert_eq!(
            error(&text),
            "test.toml: VM sd: field `identity_mapped`: none of its passthrough devices can DMA, so nothing needs its \
             RAM at IPA = PA; remove it"
        );
        assert!(
            error(&vm("sd", "identity_mapped = 0x5000_0000\n")).contains("identity_mapped"),
            "a table, with its base"
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_the_vm_and_key_named() {
        let msg = error(&vm("web", "cpu = [1]"));
        assert!(msg.starts_with("test.toml: VM web: unknown field `cpu`, expected one of `name`, `vcpus`"), "{msg}");
        let msg = error(&vm("web", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\nirq = [34]"));
        assert!(msg.starts_with("test.toml: VM web: unknown field `irq`, expected one of `name`, `reg`"), "{msg}");
        let msg = error(&vm("web", "disk = { offset = 0 }"));
        assert!(msg.starts_with("test.toml: VM web: unknown field `offset`, expected"), "{msg}");
        let msg = error(&format!("[board]\ncpus = 4\nram_mib = 1024\n{}", vm("web", "")));
        assert!(msg.starts_with("test.toml: [board]: unknown field `ram_mib`, expected"), "{msg}");
        assert_eq!(
            error(&format!("boards = 1\n{}", vm("web", ""))),
            "test.toml: unknown key `boards` at the top level; the keys are [board] and [[vm]]"
        );
        // A VM without a name is named by its place.
        let msg = error("[[vm]]\nvcpus = 1\nmemory_mib = 64\nkernel = \"debian\"\n");
        assert_eq!(msg, "test.toml: VM #1: missing field `name`");
        assert_eq!(error("[board]\ncpus = 4\n"), "test.toml: no [[vm]]: describe at least one VM");
        assert!(error("[[vm]\n").starts_with("test.toml: TOML parse error at line 1"), "{}", error("[[vm]\n"));
    }

    #[test]
    fn toml_values_of_the_wrong_kind_are_refused() {
        assert_eq!(
            error(&vm("web", "policy = \"fair\"")),
            "test.toml: VM web: field `policy`: \"fair\" is not a policy; write \"pinned\" or \"shared\""
        );
        assert_eq!(
            error(&vm("web", "network = { mac = \"52:54:00:12:35\" }")),
            "test.toml: VM web: field `network`: \"52:54:00:12:35\" is not a MAC address (six hex bytes: \
             52:54:00:12:35:10)"
        );
        let msg = error(&vm("web", "cpus = [-1]"));
        assert!(msg.starts_with("test.toml: VM web: invalid value: integer `-1`, expected u32"), "{msg}");
    }

    /// Every rule of `hyp_core::manifest`, from a manifest file: the error names the file,
    /// the VM and the field (the rules' own tests are in hyp-core).
    #[test]
    fn manifest_checks_run_before_anything_boots() {
        let cases: &[(String, &str)] = &[
            (vm("web 1", ""), "test.toml: VM web 1: field `name` must be letters, digits, '-' or '_'"),
            (vm("web", "") + &vm("web", ""), "test.toml: VM web: two VMs have this name"),
            (vm("web", "vcpus = 9").replace("vcpus = 1\n", ""), "test.toml: VM web: field `vcpus` must be between 1 and 8"),
            (
                vm("web", "memory_mib = 3").replace("memory_mib = 64\n", ""),
                "test.toml: VM web: field `memory` must be a non-zero multiple of 2 MiB",
            ),
            (
                vm("a", "") + &vm("b", "memory_mib = 960").replace("memory_mib = 64\n", ""),
                "test.toml: VM b: field `memory`: with this VM the VMs need 1024 MiB but the board has 974 MiB for \
                 VMs; give the VMs less memory or the board more",
            ),
            (
                vm("a", "disk = { size_mib = 256 }") + &vm("b", "disk = { offset_mib = 128 }"),
                "test.toml: VM b: field `disk`: bytes 0x8000000..(end of disk) of the board's disk overlap VM a's disk \
                 (0x0..0x10000000); give each VM its own slice",
            ),
            (
                vm("a", "disk = { offset_mib = 1024, size_mib = 1 }"),
                "test.toml: VM a: field `disk`: bytes 0x40000000..0x40100000 go past the end of the board's disk \
                 (0x40000000 bytes); give a slice within it",
            ),
            (
                vm("a", "network = { mac = \"01:00:5e:00:00:01\" }"),
                "test.toml: VM a: field `mac` must be a unicast address (first byte even), not all zeros",
            ),
            (
                vm("a", "cpus = [1]\nslice_us = 100"),
                "test.toml: VM a: field `slice_us` is for shared VMs (a pinned vCPU runs tickless); remove it or \
                 write policy = \"shared\"",
            ),
            (
                vm("a", "cpus = [1]\npolicy = \"shared\"\nslice_us = 0"),
                "test.toml: VM a: field `slice_us` is 0: the vCPUs would never run; give at least 1 (default 10000)",
            ),
            (
                vm("a", "policy = \"shared\""),
                "test.toml: VM a: field `cpus` is missing: a shared VM names the CPU of each vCPU; add `cpus`",
            ),
            (
                vm("a", "cpus = [1, 2]"),
                "test.toml: VM a: field `cpus` lists 2 CPUs but the VM has 1 vCPU; give one CPU per vCPU",
            ),
            (
                vm("web", "cpus = [7]"),
                "test.toml: VM web: field `cpus`: CPU 7 does not exist (the board has CPUs 0-3); name one of those",
            ),
            (
                vm("a", "cpus = [1, 1]").replace("vcpus = 1", "vcpus = 2"),
                "test.toml: VM a: field `cpus`: CPU 1 is listed for two of its pinned vCPUs, but a pinned vCPU needs \
                 a CPU of its own; list another CPU, or make the VM shared (its vCPUs then take turns)",
            ),
            (
                vm("a", "cpus = [1]") + &vm("b", "cpus = [1]"),
                "test.toml: VM b: field `cpus`: CPU 1 is already pinned to VM a, and a pinned vCPU needs a CPU of its \
                 own; choose another CPU",
            ),
            (
                vm("a", "cpus = [2]\npolicy = \"shared\"") + &vm("b", "cpus = [2]"),
                "test.toml: VM b: field `cpus`: CPU 2 already runs shared VM a, and a pinned vCPU needs a CPU of its \
                 own; choose another CPU, or make both VMs shared",
            ),
            (
                vm("a", "cpus = [2]") + &vm("b", "cpus = [2]\npolicy = \"shared\""),
                "test.toml: VM b: field `cpus`: CPU 2 is pinned to VM a, so shared vCPUs cannot run there; choose \
                 another CPU",
            ),
            (
                vm("a", "cpus = [0, 1, 2]").replace("vcpus = 1", "vcpus = 3") + &vm("b", "").replace("vcpus = 1", "vcpus = 2"),
                "test.toml: VM b: field `vcpus`: without `cpus`, each of its 2 vCPUs is pinned to a CPU no VM lists, \
                 but only 1 of the board's 4 CPUs is left; give it `cpus`, or fewer vCPUs",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x800]"),
                "test.toml: VM a: passthrough rtc: field `reg` must be whole 4 KiB pages (base and size multiples of \
                 0x1000, size not 0)",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]")
                    + &vm("b", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]"),
                "test.toml: VM b: passthrough rtc: field `reg` 0x9010000..0x9011000 overlaps passthrough rtc of VM a; \
                 a device belongs to one VM",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"ram\"\nreg = [0x4800_0000, 0x1000]"),
                "test.toml: VM a: passthrough ram: field `reg` 0x48000000..0x48001000 overlaps the board's RAM; give a \
                 device's register window",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"uart\"\nreg = [0x0900_0000, 0x1000]\ninterrupts = [33]"),
                "test.toml: VM a: passthrough uart: field `reg` 0x9000000..0x9001000 is a device the hypervisor \
                 drives itself (its UART, the GIC or a virtio transport); it cannot be passed through",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"flash\"\nreg = [0x0400_0000, 0x1000]"),
                "test.toml: VM a: passthrough flash: field `reg`: the board has no device at 0x4000000..0x4001000; give \
                 the window of one of its devices (see docs/manifest.md)",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\ninterrupts = [2]"),
                "test.toml: VM a: passthrough rtc: field `interrupts`: INTID 2 is not an SPI; give INTIDs 32-1019 (SPI \
                 n is INTID 32 + n)",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\ninterrupts = [35]"),
                "test.toml: VM a: passthrough rtc: field `interrupts`: INTID 35 is not an interrupt of the board's \
                 device at 0x9010000..0x9011000; give that device's own interrupts",
            ),
            (
                vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\ninterrupts = [34]")
                    + &vm("b", "[[vm.passthrough]]\nname = \"gpio\"\nreg = [0x0903_0000, 0x1000]\ninterrupts = [34]"),
                "test.toml: VM b: passthrough gpio: field `interrupts`: INTID 34 is already given to VM a (passthrough \
                 rtc); an interrupt goes to one VM",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(&error(text), expected, "manifest:\n{text}");
        }
    }

    #[test]
    fn the_qemu_virt_tables_match_its_device_tree() {
        let dtb = include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb");
        let tree = DeviceTreeDevices::new(dtb).unwrap();
        for device in QEMU_VIRT_DEVICES {
            assert_eq!(tree.device_at(device.reg), Some(device.reg), "{}", device.name);
            for &intid in device.intids {
                assert!(tree.raises(device.reg, intid), "{} raises INTID {intid}", device.name);
            }
            let table = hyp_core::manifest::DeviceTable(QEMU_VIRT_DEVICES);
            assert_eq!(table.dma(device.reg), tree.dma(device.reg), "{}: the same DMA verdict", device.name);
            assert_eq!(table.dma(device.reg), None, "{} can be given to a VM", device.name);
        }
        let platform = Platform::from_device_tree(dtb).unwrap();
        let kept = |r: PhysRange| QEMU_VIRT_HYPERVISOR_DEVICES.iter().any(|h| h.base <= r.base && r.end() <= h.end());
        assert!(kept(platform.uart));
        assert!(kept(platform.gic.distributor));
        assert!(kept(platform.gic.redistributors.unwrap()));
        assert!(platform.virtio_mmio.iter().all(|t| kept(t.window)));
        assert_eq!(platform.memory[0].base, QEMU_VIRT_RAM_BASE);
    }

    /// A board read from its device tree (as QEMU raspi4b's is) is the board the hypervisor
    /// will find: the same CPUs, RAM, its own devices and the others as the tables of QEMU
    /// `virt` say, here on a tree QEMU `virt` wrote.
    #[test]
    fn a_board_read_from_its_device_tree_has_its_cpus_ram_and_devices() {
        let dtb = include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb");
        let board = Board::from_device_tree(dtb).unwrap();
        assert_eq!((board.cpus, board.memory_mib, board.disk), (4, 1024, None));
        let table = Board::qemu_virt(4, 1024, None);
        let (from_tree, from_table) = (board.limits(0), table.limits(0));
        assert_eq!(
            (from_tree.cpus, from_tree.memory, from_tree.ram),
            (from_table.cpus, from_table.memory, from_table.ram)
        );
        for device in QEMU_VIRT_DEVICES {
            assert_eq!(from_tree.devices.device_at(device.reg), Some(device.reg), "{}", device.name);
            assert!(device.intids.iter().all(|&i| from_tree.devices.raises(device.reg, i)), "{}", device.name);
            assert_eq!(from_tree.devices.dma(device.reg), None, "{}", device.name);
        }
        let kept = |r: PhysRange| from_tree.hypervisor_devices.iter().any(|h| h.overlaps(&r));
        assert!(kept(PhysRange { base: 0x0900_0000, size: 0x1000 }), "the UART: {:?}", from_tree.hypervisor_devices);
        assert!(kept(PhysRange { base: 0x0800_0000, size: 0x1000 }), "the GIC distributor");
        assert!(!kept(QEMU_VIRT_DEVICES[0].reg), "not the RTC");
        // The GIC's ITS is the GIC's, as the hypervisor's boot check finds it.
        let its = PhysRange { base: 0x0808_0000, size: 0x2_0000 };
        assert!(from_tree.devices.is_gic_msi_frame(its), "the ITS");
        assert!(!from_tree.devices.is_gic_msi_frame(QEMU_VIRT_DEVICES[0].reg), "not the RTC");
        assert!(Board::from_device_tree(b"not a tree").unwrap_err().contains("flattened device tree"));
    }

    #[test]
    fn a_manifest_is_checked_against_a_board_from_its_device_tree() {
        let dir = tempdir("tree-board");
        let guest = fake_debian(&dir);
        let board =
            Board::from_device_tree(include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb")).unwrap();
        let check = |text: &str| {
            let m = Manifest::parse(text, Path::new("pi.toml"), &mut |_| Ok(guest.clone())).unwrap();
            m.bundle(&board, &BundleOptions::default()).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(
            check(&vm("a", "[[vm.passthrough]]\nname = \"rtc\"\nreg = [0x0901_0000, 0x1000]\ninterrupts = [34]")),
            Ok(())
        );
        assert_eq!(
            check(&vm("a", "cpus = [4]")),
            Err("pi.toml: VM a: field `cpus`: CPU 4 does not exist (the board has CPUs 0-3); name one of those".into())
        );
        let err = check(&vm("a", "memory_mib = 1024").replace("memory_mib = 64\n", "")).unwrap_err();
        assert!(err.contains("the VMs need 1024 MiB but the board has 974 MiB for VMs"), "{err}");
        let err = check(&vm("a", "[[vm.passthrough]]\nname = \"uart\"\nreg = [0x0900_0000, 0x1000]")).unwrap_err();
        assert!(err.contains("is a device the hypervisor drives itself"), "{err}");
    }

    #[test]
    fn a_fixed_board_takes_no_other_board_section() {
        let dir = tempdir("fixed-board");
        let guest = fake_debian(&dir);
        let board =
            Board::from_device_tree(include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb")).unwrap();
        let parse = |text: &str| Manifest::parse(text, Path::new("pi.toml"), &mut |_| Ok(guest.clone())).unwrap();
        assert!(parse(&vm("a", "")).check_fixed_board(&board, "QEMU raspi4b").is_ok(), "no [board]");
        assert!(parse(&format!("[board]\ncpus = 4\nmemory_mib = 1024\n{}", vm("a", "")))
            .check_fixed_board(&board, "B")
            .is_ok());
        let err = parse(&format!("[board]\nmemory_mib = 2048\n{}", vm("a", "")))
            .check_fixed_board(&board, "QEMU raspi4b")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "pi.toml: [board] memory_mib = 2048, but QEMU raspi4b has 1024 and cannot be given another; write 1024 or leave it out");
        let err = parse(&format!("[board]\ncpus = 8\n{}", vm("a", "")))
            .check_fixed_board(&board, "QEMU raspi4b")
            .unwrap_err();
        assert!(err.to_string().starts_with("pi.toml: [board] cpus = 8, but QEMU raspi4b has 4"), "{err}");
    }

    #[test]
    fn each_debian_word_names_its_own_guest_fetched_once() {
        let dir = tempdir("two-debians");
        let arm64 = fake_debian(&dir);
        let armhf = DebianGuest { kernel: dir.join("vmlinuz.zImage"), initrd: dir.join("initramfs-armhf.cpio") };
        let mut asked = Vec::new();
        let text = [
            vm("a", ""),
            vm("b", "").replace("\"debian\"", "\"debian-armhf\""),
            vm("c", "initrd = \"debian-armhf\"").replace("\"debian\"", "\"debian-armhf\""),
        ]
        .concat();
        let m = Manifest::parse(&text, Path::new("test.toml"), &mut |arch| {
            asked.push(arch);
            Ok(if arch == DebianArch::Armhf { armhf.clone() } else { arm64.clone() })
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(asked, [DebianArch::Arm64, DebianArch::Armhf], "each guest is fetched once");
        assert_eq!((&m.vms[0].kernel, &m.vms[1].kernel), (&arm64.kernel, &armhf.kernel));
        assert_eq!(m.vms[2].initrd.as_ref(), Some(&armhf.initrd));
        assert_eq!(m.vms[1].bootargs.as_deref(), Some(crate::linux_guest::BOOTARGS), "the Debian command line");
    }
}
