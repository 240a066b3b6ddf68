//! From a booted board to running VMs: the boot bundle's manifest checked against the
//! board, the free memory and the board's devices made capabilities, every VM created from
//! its entry, its vCPUs placed on CPUs, the switch and the console set up, and each VM's
//! vCPU 0 started. The arch crate brings the CPUs, the MMU, the heap and the GIC up before.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::borrow::Borrow;

use hyp_core::bundle::{BootBundle, VmSpec};
use hyp_core::cap::{CapId, CapSpace, RegionKind};
use hyp_core::entropy::SeedSource;
use hyp_core::manifest::{BoardLimits, DeviceTreeDevices, HeldMemory};
use hyp_core::memory_map::SetApartError;
use hyp_core::platform::{GicVersion, PhysRange, Platform};
use hyp_core::sync::Mutex;
use stage2::TableFormat;

use super::{say, Hypervisor, Virtualization, VmFactory};
use crate::interrupts::Route;
use crate::placement::{place_vcpus, Home};
use crate::scheduling::vcpu_ref;
use crate::vm::Vm;

/// What the arch crate found and set up before the VMs.
pub struct BootedBoard<'a> {
    pub platform: &'a Platform<'a>,
    /// The board's devices, from its device tree (passthrough devices come from it).
    pub devices: &'a DeviceTreeDevices<'a>,
    /// The memory no one uses (not the image, the heap, the device tree, the boot bundle or
    /// reserved memory): the VMs' memory.
    pub free: &'a [PhysRange],
    /// What holds the rest of RAM (the image, the heap, the device tree, the boot bundle,
    /// the firmware's memory): an identity-mapped VM's RAM must miss it.
    pub held: &'a [HeldMemory],
    /// The stage-2 format of this CPU architecture, sized for this board.
    pub stage2: TableFormat,
    /// The board disk's size in sectors, if it has one.
    pub disk_sectors: Option<u64>,
    /// The CPU this runs on; it takes the console's and the uplink's interrupts.
    pub boot_cpu: usize,
    /// Whether VMs may run on a CPU (it is online and not set aside).
    pub usable_cpu: &'a dyn Fn(usize) -> bool,
}

impl<V: Virtualization> Hypervisor<V> {
    /// Creates the VMs `bundle` describes on `board` and starts them.
    pub fn start(&'static self, bundle: &BootBundle<'static>, board: &BootedBoard<'_>) -> Result<(), String> {
        let platform = board.platform;
        // The manifest's rules against this board (xtask checked them against the board it
        // expected): CPUs, memory, the disk, passthrough devices.
        let windows = hyp_core::manifest::hypervisor_windows(platform);
        let limits = BoardLimits {
            cpus: platform.cpus.len(),
            memory: board.free.iter().map(|r| r.size).sum(),
            ram: &platform.memory,
            hypervisor_devices: &windows,
            disk: board.disk_sectors.map(|s| s * hyp_core::bundle::SECTOR_SIZE),
            devices: board.devices,
            held: board.held,
        };
        bundle.check_board(&limits).map_err(|e| format!("boot bundle: {e}"))?;
        self.make_capabilities(bundle, board)?;
        // The side cores, before the VMs whose devices they serve are created.
        for spec in bundle.vms() {
            if let Some(cpu) = spec.devices.io_cpu.map(|c| c as usize) {
                if !(board.usable_cpu)(cpu) {
                    return Err(format!(
                        "VM {}: field `io_cpu`: cpu{cpu} is not online; name an online CPU",
                        spec.name
                    ));
                }
                if self.io.get(cpu).is_none() {
                    say!(V, "hypervisor: cpu{cpu} is a side core: it serves virtqueues by polling and runs no vCPU");
                }
                self.io.set_on(cpu, V::counter_frequency());
            }
        }

        let mut vms = Vec::new();
        for (id, spec) in bundle.vms().enumerate() {
            vms.push(self.create_vm(id, spec)?);
        }
        let specs: Vec<VmSpec<'static>> = vms.iter().map(|vm| Borrow::<Vm<V::Env>>::borrow(vm).spec).collect();
        let ticks_per_us = V::counter_frequency() / 1_000_000;
        let homes = place_vcpus(&specs, board.boot_cpu, platform.cpus.len(), board.usable_cpu, ticks_per_us)
            .map_err(|e| format!("{e}"))?;
        vms.iter().for_each(V::load_vm);
        self.vms.fill(specs.iter().copied().zip(vms).collect());
        // The board's disk and NIC interrupt the first side core if there is one: their
        // completions and frames are then handled where no vCPU runs.
        let device_cpu = self.io.first().unwrap_or(board.boot_cpu);
        self.start_network(specs.iter().enumerate().map(|(i, spec)| spec.nic_mac(i)), device_cpu);
        self.start_disk(device_cpu);
        match platform.uart_intid {
            Some(intid) => self.enable_console_input(intid, board.boot_cpu),
            None => say!(V, "hypervisor: the UART has no interrupt in the device tree: no console input"),
        }
        self.scheduling.init(platform.cpus.len());
        for Home { vcpu: v, cpu, policy } in homes {
            self.scheduling.add(v, cpu, policy).map_err(|e| {
                let name = specs.get(usize::from(v.vm)).map_or("?", |s| s.name);
                format!("vm{} {name} vCPU {}: {e}", v.vm, v.vcpu)
            })?;
        }
        for (i, spec) in specs.iter().enumerate() {
            self.scheduling.start(vcpu_ref(i, 0)).map_err(|e| format!("vm{i} {}: {e}", spec.name))?;
        }
        Ok(())
    }

    /// Every VM gets memory and devices through capabilities only: the free memory becomes
    /// untyped (each identity-mapped VM's RAM an untyped of its own, set apart from the rest
    /// first: docs/capability-model.md, D4), GICv2's virtual CPU interface a banked device
    /// region, and each passthrough device's window a device region and its SPIs
    /// interrupts, from the board's device tree (never from untyped memory).
    fn make_capabilities(&self, bundle: &BootBundle<'static>, board: &BootedBoard<'_>) -> Result<(), String> {
        let platform = board.platform;
        let mut caps = CapSpace::new(board.stage2);
        let apart: Vec<PhysRange> = bundle.vms().filter_map(|vm| vm.identity_ram()).collect();
        let rest =
            hyp_core::memory_map::set_apart(board.free, &apart, hyp_core::bundle::RAM_GRANULE).map_err(
                |e| match e {
                    SetApartError::NotFree(r) => format!(
                        "boot bundle: an identity-mapped VM's RAM {r} is not free memory (the banner's `free memory` \
                     ranges); give it a base inside one of them"
                    ),
                    SetApartError::TooFragmented => "boot bundle: the free memory left beside the identity-mapped VMs \
                                                 is in too many pieces to track; move them together"
                        .into(),
                },
            )?;
        let untyped: Vec<CapId> = rest.iter().filter_map(|r| caps.add_untyped(*r).ok()).collect();
        let mut identity_untyped = Vec::new();
        for vm in bundle.vms() {
            let own = match vm.identity_ram() {
                None => None,
                Some(ram) => Some(caps.add_untyped(ram).map_err(|e| format!("vm {}: its RAM {ram}: {e}", vm.name))?),
            };
            identity_untyped.push(own);
        }
        // GICv2: every VM's CPU interface is the running CPU's bank of the GICV frame.
        let gicv = platform.gic.virtual_cpu_interface.and_then(|r| {
            let frame = PhysRange { base: r.base, size: hyp_core::guest_fdt::GICC_SIZE };
            caps.add_device_region(frame, RegionKind::BankedDevice).ok()
        });
        let passthrough = crate::passthrough::from_board(&mut caps, bundle.vms(), board.devices)
            .map_err(|e| format!("boot bundle: {e}"))?;
        for spi in passthrough.iter().flatten().flat_map(|d| d.spis.iter()) {
            self.routes.set(spi.intid, Route::Passthrough).map_err(|e| format!("boot bundle: passthrough SPI: {e}"))?;
        }
        let seeds = platform.rng_seed.and_then(SeedSource::from_board_seed).map(Mutex::new);
        if seeds.is_none() {
            say!(V, "hypervisor: the board's device tree has no /chosen/rng-seed: VMs start without a random seed");
        }
        self.caps.call_once(|| Mutex::new(caps));
        self.factory.call_once(|| VmFactory {
            untyped,
            identity_untyped,
            gicv,
            gic_v3: platform.gic.version == GicVersion::V3,
            passthrough,
            seeds,
            disk_vms: bundle.vms().filter(|vm| vm.devices.disk.is_some()).count(),
        });
        Ok(())
    }
}
