//! The AArch64 hypervisor image: boots at EL2, discovers the board from the device tree,
//! starts every CPU, creates the VMs the boot bundle describes and runs them.
#![no_std]
#![no_main]

extern crate alloc;
#[macro_use]
extern crate hyp_board_qemu_virt;

mod arch;
mod boot;
mod cpus;
mod debug_hw;
mod exceptions;
mod fault_test;
mod firmware;
mod gic;
mod ich;
mod input;
mod list_registers;
mod manage;
mod memory;
mod mmu;
mod network;
mod passthrough;
mod vcpu_state;
mod vdev;
mod vm;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::arch::{Aarch64, ROUTES, SCHEDULING};
use crate::list_registers::ListRegisterFile;
use hyp_core::bundle::{BootBundle, VmSpec, RAM_GRANULE};
use hyp_core::cap::{CapId, CapSpace, RegionKind};
use hyp_core::fdt::FdtError;
use hyp_core::memory_map::free_ranges;
use hyp_core::platform::{GicVersion, PhysRange, Platform, PlatformError};
use hyp_runtime::interrupts::Route;
use hyp_runtime::placement::{place_vcpus, Home};
use hyp_runtime::scheduling::vcpu_ref;
use hyp_runtime::vm_table::{RunEnd, VmTable};
use hyp_runtime::Arch;
use spin::Once;
use stage2::TableFormat;

use crate::vm::{VcpuExit, Vm};
use hyp_core::vcpu_power::EndReason;

macro_rules! println_unlocked {
    ($($arg:tt)*) => { hyp_board_qemu_virt::uart::print_unlocked(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use println_unlocked;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The manifest's VMs, by index (hyp_runtime::vm_table).
pub(crate) static VMS: VmTable<Vm> = VmTable::new();

/// VM `index`, if it exists now.
pub(crate) fn vm_at(index: usize) -> Option<Arc<Vm>> {
    VMS.get(index)
}

/// What creating a VM takes from the board, kept for restarts.
struct VmFactory {
    untyped: Vec<CapId>,
    gicv: Option<CapId>,
    gic_v3: bool,
    /// Each VM's passthrough devices, with their region and interrupt capabilities (by VM
    /// index).
    passthrough: Vec<Vec<hyp_runtime::passthrough::PassthroughDevice>>,
    /// Where each VM's random seeds come from (none if the board gave the hypervisor none).
    seeds: Option<spin::Mutex<hyp_core::entropy::SeedSource>>,
}

static FACTORY: Once<VmFactory> = Once::new();

/// Creates VM `id` from its manifest entry, through the capability space.
fn create_vm(id: usize, spec: VmSpec<'static>) -> Result<Vm, alloc::string::String> {
    let (Some(factory), Some(caps)) = (FACTORY.get(), CAPS.get()) else {
        return Err(alloc::format!("vm{id} {}: the hypervisor is not ready to create VMs", spec.name));
    };
    let devices = factory.passthrough.get(id).map_or(&[][..], |d| d.as_slice());
    let request = hyp_runtime::vm_resources::VmRequest {
        memory: spec.memory,
        vcpus: spec.vcpus,
        gicv: factory.gicv,
        passthrough: devices,
    };
    let granted = vm::grant_resources(&mut caps.lock(), &factory.untyped, &request)
        .map_err(|e| alloc::format!("vm{id} {}: {e}", spec.name))?;
    Vm::create(id, spec, granted, factory.gic_v3, devices, next_seeds(factory, id))
        .map_err(|e| alloc::format!("vm{id} {}: {e}", spec.name))
}

/// Fresh random seeds for VM `id`, none if the board gave the hypervisor none.
fn next_seeds(factory: &VmFactory, id: usize) -> Option<hyp_core::entropy::GuestSeeds> {
    factory.seeds.as_ref().map(|s| s.lock().next_for(id))
}

/// Every VM's rights; it owns their stage-2 tables.
static CAPS: Once<spin::Mutex<CapSpace>> = Once::new();
static SEMIHOSTING_EXIT: Once<bool> = Once::new();
/// The deliberate EL2 fault a system test's boot bundle asks for.
static EL2_FAULT: Once<hyp_core::bundle::El2Fault> = Once::new();

/// The device tree blob at `dtb`, sized by its header (the loader guarantees it is mapped).
fn device_tree(dtb: u64) -> Result<&'static [u8], PlatformError> {
    if dtb == 0 || !dtb.is_multiple_of(8) {
        return Err(PlatformError::NotADeviceTree(FdtError::BadMagic));
    }
    // SAFETY: booting.rst requires x0 to point at a device tree in RAM, 8-byte aligned; the
    // first 8 bytes are its magic and total size, and it is never written or freed.
    let header = unsafe { core::slice::from_raw_parts(dtb as *const u8, 8) };
    if header[0..4] != [0xd0, 0x0d, 0xfe, 0xed] {
        return Err(PlatformError::NotADeviceTree(FdtError::BadMagic));
    }
    let size = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    // SAFETY: as above, for the size the header states.
    Ok(unsafe { core::slice::from_raw_parts(dtb as *const u8, size) })
}

#[no_mangle]
extern "C" fn primary_main(dtb: u64, _image_base: u64) -> ! {
    // The MMU is off: no locks and no heap until it is on.
    let Ok(platform) = device_tree(dtb).and_then(Platform::from_device_tree) else {
        // Without a device tree there is no known UART to complain on.
        cpus::park()
    };
    let Ok(mmu_regs) = mmu::build(&platform, boot::image_layout()) else { cpus::park() };
    let (image_start, image_end) = boot::image_range();
    mmu::invalidate_dcache_range(image_start, image_end);
    mmu::enable(&mmu_regs);
    hyp_board_qemu_virt::uart::init(platform.uart.base);
    firmware::init(platform.psci);
    cpus::record_cpus(&platform);

    print_banner(&platform, image_start, image_end);

    let dtb_range = PhysRange { base: dtb, size: device_tree(dtb).map_or(0, |d| d.len() as u64) };
    let mut used: heapless::Vec<PhysRange, 32> = heapless::Vec::new();
    let in_use = [PhysRange { base: image_start, size: image_end - image_start }, dtb_range];
    for range in in_use.iter().chain(platform.initrd.iter()).chain(platform.reserved.iter()) {
        if used.push(*range).is_err() {
            halt(format_args!("more reserved memory ranges than the hypervisor can track"));
        }
    }
    let (free, dropped) = free_ranges(&platform.memory, &used, RAM_GRANULE);
    if dropped > 0 {
        println!("hypervisor: {dropped} free memory range(s) not used: too fragmented");
    }
    let Some(heap) = free.iter().copied().filter(|r| r.size >= memory::HEAP_SIZE).max_by_key(|r| r.size) else {
        halt(format_args!("no free memory range of {} MiB for the hypervisor heap", memory::HEAP_SIZE >> 20))
    };
    // SAFETY: `heap` is free RAM (not the image, device tree, bundle or reserved memory),
    // identity-mapped Normal, and from here on belongs to the heap alone.
    unsafe { memory::init_heap(heap.base, memory::HEAP_SIZE) };
    let mut untyped: Vec<PhysRange> = free.iter().copied().collect();
    take_from(&mut untyped, heap.base, memory::HEAP_SIZE);
    let untyped_total: u64 = untyped.iter().map(|r| r.size).sum();
    println!(
        "  free memory {} MiB for VMs in {} range(s), heap {} MiB",
        untyped_total >> 20,
        untyped.len(),
        memory::HEAP_SIZE >> 20
    );

    gic::init_distributor(&platform.gic);
    let ppis = gic_ppis(&platform);
    PPIS.call_once(|| ppis);
    let own = [
        (gic::SGI_KICK, Route::Kick),
        (ppis[0], Route::Maintenance),
        (hyp_core::guest_map::VTIMER_PPI, Route::VirtualTimer),
        (ppis[2], Route::HypTimer),
    ];
    for (intid, route) in own {
        if let Err(e) = ROUTES.set(intid, route) {
            halt(format_args!("the board's interrupts: {e}"));
        }
    }
    if let Err(e) = gic::init_cpu(cpus::current_index(), platform.cpus[cpus::current_index()], &ppis) {
        halt(format_args!("GIC: this CPU's interface cannot be set up ({e:?})"));
    }
    debug_hw::init_cpu();
    cpus::start_secondaries(&platform, &mmu_regs);
    println!("hypervisor: {} of {} CPUs online", cpus::online_count(), platform.cpus.len());
    let (answered, asked) = cpus::check_sgis();
    println!("hypervisor: SGIs reach the other CPUs: {answered} of {asked} answered");

    let found = hyp_board_qemu_virt::virtio::probe(&platform, gic::INTERRUPT_WAIT);
    if let Some(sectors) = found.disk_sectors {
        println!("hypervisor: virtio disk of {} MiB (the VMs' disks are slices of it)", sectors >> 11);
    }
    if let Some(mac) = found.uplink_mac {
        println!("hypervisor: virtio NIC {} (the virtual switch's uplink)", MacAddress(mac));
    }

    let Some(initrd) = platform.initrd else {
        halt(format_args!("no boot bundle: pass one as the initrd (`cargo xtask qemu` builds it)"))
    };
    // SAFETY: the loader put the initrd at this range in RAM; it is in `used`, so nothing
    // else allocates or writes it.
    let blob = unsafe { core::slice::from_raw_parts(initrd.base as *const u8, initrd.size as usize) };
    let bundle = match BootBundle::parse(blob) {
        Ok(b) => b,
        Err(e) => halt(format_args!("boot bundle: {e}")),
    };
    SEMIHOSTING_EXIT.call_once(|| bundle.options.semihosting_exit);
    // The manifest's rules against this board (xtask checked them against the board it
    // expected): CPUs, memory, the disk, passthrough devices.
    let windows = hyp_core::manifest::hypervisor_windows(&platform);
    let Some(board_devices) = device_tree(dtb).ok().and_then(hyp_core::manifest::DeviceTreeDevices::new) else {
        halt(format_args!("the device tree cannot be read again to check the manifest"))
    };
    let limits = hyp_core::manifest::BoardLimits {
        cpus: platform.cpus.len(),
        memory: untyped_total,
        ram: &platform.memory,
        hypervisor_devices: &windows,
        disk: found.disk_sectors.map(|s| s * hyp_core::bundle::SECTOR_SIZE),
        devices: &board_devices,
    };
    if let Err(e) = bundle.check_board(&limits) {
        halt(format_args!("boot bundle: {e}"));
    }
    // Every VM gets memory through capabilities only: the free memory becomes untyped.
    let pa_bits = physical_address_bits().min(48);
    let mut caps =
        CapSpace::new(TableFormat::Vmsav8_64 { ipa_bits: hyp_core::guest_map::IPA_BITS.min(pa_bits), pa_bits });
    let untyped_caps: Vec<CapId> = untyped.iter().filter_map(|r| caps.add_untyped(*r).ok()).collect();
    // GICv2: every VM's CPU interface is this CPU's bank of the hardware GICV frame.
    let gicv = platform.gic.virtual_cpu_interface.and_then(|r| {
        caps.add_device_region(
            PhysRange { base: r.base, size: hyp_core::guest_fdt::GICC_SIZE },
            RegionKind::BankedDevice,
        )
        .ok()
    });
    // Passthrough devices: their windows become device regions and their SPIs interrupts,
    // from the board's device tree (never from untyped memory).
    let passthrough = match hyp_runtime::passthrough::from_board(&mut caps, bundle.vms(), &board_devices) {
        Ok(p) => p,
        Err(e) => halt(format_args!("boot bundle: {e}")),
    };
    for spi in passthrough.iter().flatten().flat_map(|d| d.spis.iter()) {
        if let Err(e) = ROUTES.set(spi.intid, Route::Passthrough) {
            halt(format_args!("boot bundle: passthrough SPI: {e}"));
        }
    }
    LIST_REGISTERS.call_once(|| match (platform.gic.version, platform.gic.hyp_interface) {
        // SAFETY: the device tree's GICH frame, which the EL2 tables map Device-nGnRE (mmu.rs).
        (GicVersion::V2, Some(gich)) => unsafe { ListRegisterFile::v2(gich.base as usize) },
        _ => ListRegisterFile::V3,
    });
    CAPS.call_once(|| spin::Mutex::new(caps));
    FACTORY.call_once(|| VmFactory {
        untyped: untyped_caps,
        gicv,
        gic_v3: platform.gic.version == GicVersion::V3,
        passthrough,
        seeds: match platform.rng_seed.and_then(hyp_core::entropy::SeedSource::from_board_seed) {
            Some(source) => Some(spin::Mutex::new(source)),
            None => {
                println!(
                    "hypervisor: the board's device tree has no /chosen/rng-seed: VMs start without a random seed"
                );
                None
            }
        },
    });
    let mut vms = Vec::new();
    for (id, spec) in bundle.vms().enumerate() {
        match create_vm(id, spec) {
            Ok(vm) => vms.push(vm),
            Err(e) => halt(e),
        }
    }
    let me = cpus::current_index();
    let fault =
        bundle.options.test_el2_fault.map(|(c, f)| (c as usize, f)).filter(|&(c, _)| c != me && cpus::is_online(c));
    let fault_cpu = fault.map(|(c, _)| c);
    if let Some((cpu, kind)) = fault {
        println!("hypervisor: the boot bundle asks cpu{cpu} to take a deliberate EL2 fault, {} (a test)", kind.name());
        EL2_FAULT.call_once(|| kind);
        cpus::give_work(cpu, cpus::WORK_EL2_FAULT);
    }
    let specs: Vec<VmSpec<'static>> = vms.iter().map(|vm| vm.spec).collect();
    let usable = |cpu| cpus::is_online(cpu) && Some(cpu) != fault_cpu;
    let ticks_per_us = Aarch64::counter_frequency() / 1_000_000;
    let homes = match place_vcpus(&specs, me, platform.cpus.len(), usable, ticks_per_us) {
        Ok(homes) => homes,
        Err(e) => halt(e),
    };
    for vm in &vms {
        vm.load();
    }
    VMS.fill(vms.into_iter().map(|vm| (vm.spec, vm)).collect());
    network::init(specs.iter().enumerate().map(|(i, spec)| spec.nic_mac(i)), me, cpus::mpidr_of(me));
    match platform.uart_intid {
        Some(intid) => input::enable(intid, me, cpus::mpidr_of(me)),
        None => println!("hypervisor: the UART has no interrupt in the device tree: no console input"),
    }
    SCHEDULING.init(platform.cpus.len());
    for Home { vcpu: v, cpu, policy } in homes {
        if let Err(e) = SCHEDULING.add(v, cpu, policy) {
            let name = specs.get(usize::from(v.vm)).map_or("?", |s| s.name);
            halt(format_args!("vm{} {name} vCPU {}: {e}", v.vm, v.vcpu));
        }
    }
    for (i, spec) in specs.iter().enumerate() {
        if let Err(e) = SCHEDULING.start(vcpu_ref(i, 0)) {
            halt(format_args!("vm{i} {}: {e}", spec.name));
        }
    }
    cpu_loop(me)
}

/// The PPIs the hypervisor takes at EL2: the GIC maintenance interrupt, the virtual timer
/// (forwarded to the vCPU running on this CPU) and the EL2 physical timer (slices of vCPUs
/// that share a CPU, and blocked vCPUs' timers).
pub(crate) fn gic_ppis(platform: &Platform<'_>) -> [u32; 3] {
    [platform.gic.maintenance_intid.unwrap_or(25), platform.timer.virtual_timer, platform.timer.hyp_physical]
}

static PPIS: Once<[u32; 3]> = Once::new();
/// This board's list registers (the same kind on every CPU).
pub(crate) static LIST_REGISTERS: Once<ListRegisterFile> = Once::new();

pub(crate) fn board_ppis() -> [u32; 3] {
    PPIS.get().copied().unwrap_or([25, 27, 26])
}

/// Removes `[base, base + size)` from the front of the untyped range that starts there.
fn take_from(untyped: &mut Vec<PhysRange>, base: u64, size: u64) {
    if let Some(i) = untyped.iter().position(|r| r.base == base) {
        untyped[i].base += size;
        untyped[i].size -= size;
        if untyped[i].size == 0 {
            untyped.remove(i);
        }
    }
}

/// ID_AA64MMFR0_EL1.PARange in bits (ARM ARM D24.2.64).
fn physical_address_bits() -> u8 {
    match exceptions::sysreg!("id_aa64mmfr0_el1") & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

fn print_banner(platform: &Platform<'_>, image_start: u64, image_end: u64) {
    println!();
    println!("hypervisor {VERSION} (AArch64, EL2) on {}", platform.model);
    println!("  image       {:#x}..{:#x}", image_start, image_end);
    for m in &platform.memory {
        println!("  memory      {m} ({} MiB)", m.size >> 20);
    }
    println!(
        "  cpus        {} (MPIDR {:x?}){}",
        platform.cpus.len(),
        platform.cpus.as_slice(),
        if platform.cpus_left_off > 0 { " and some left off" } else { "" }
    );
    let gic = &platform.gic;
    match gic.version {
        GicVersion::V3 => println!(
            "  gic         GICv3: GICD {} GICR {}",
            gic.distributor,
            gic.redistributors.unwrap_or(PhysRange { base: 0, size: 0 })
        ),
        GicVersion::V2 => println!(
            "  gic         GICv2: GICD {} GICC {} GICH {} GICV {}",
            gic.distributor,
            gic.cpu_interface.unwrap_or(PhysRange { base: 0, size: 0 }),
            gic.hyp_interface.unwrap_or(PhysRange { base: 0, size: 0 }),
            gic.virtual_cpu_interface.unwrap_or(PhysRange { base: 0, size: 0 })
        ),
    }
    if let Some(intid) = gic.maintenance_intid {
        println!("              maintenance interrupt INTID {intid}");
    }
    println!("  uart        PL011 at {}", platform.uart);
    let psci = firmware::psci_version();
    println!("  psci        {:?} conduit, firmware PSCI {}.{}", platform.psci, psci >> 16, psci & 0xffff);
    let t = platform.timer;
    println!(
        "  timer       INTIDs: EL1 physical {}, virtual {}, EL2 physical {}, secure physical {}",
        t.nonsecure_physical, t.virtual_timer, t.hyp_physical, t.secure_physical
    );
    match platform.initrd {
        Some(r) => println!("  boot bundle {r}"),
        None => println!("  boot bundle none"),
    }
}

/// A MAC address as people write it.
struct MacAddress([u8; 6]);

impl core::fmt::Display for MacAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
    }
}

/// Nothing can run: say why and stop the machine with a failure status.
fn halt(message: impl core::fmt::Display) -> ! {
    println!("hypervisor: error: {message}");
    finish(false)
}

/// Every VM has ended, or nothing can run: stop the machine, with a failure status when
/// the run enabled semihosting.
fn finish(clean: bool) -> ! {
    if !clean && SEMIHOSTING_EXIT.get().copied().unwrap_or(false) {
        firmware::semihosting_exit(1)
    }
    firmware::system_off()
}

/// A CPU's life after boot: run what the scheduler says, report how a VM ended.
pub(crate) fn cpu_loop(cpu: usize) -> ! {
    loop {
        let work = cpus::take_work(cpu);
        if work == cpus::WORK_PING {
            if let Some(me) = cpus::per_cpu(cpu) {
                me.pong.store(true, Ordering::Release);
            }
            continue;
        }
        if work == cpus::WORK_EL2_FAULT {
            if let Some(&fault) = EL2_FAULT.get() {
                fault_test::provoke(fault, cpu);
            }
            continue;
        }
        let decision = SCHEDULING.pick(cpu);
        let Some(v) = decision.run else {
            // Only blocked vCPUs' timers can need this CPU now.
            SCHEDULING.program_timer(cpu, None);
            cpus::idle();
            continue;
        };
        let Some(vm) = vm_at(usize::from(v.vm)) else {
            let _ = SCHEDULING.stop(v);
            continue;
        };
        match vm.run_vcpu(usize::from(v.vcpu), cpu, &decision) {
            VcpuExit::Stopped | VcpuExit::Descheduled => {}
            VcpuExit::VmEnded(EndReason::Reset) => {
                // This CPU stopped the VM's last vCPU: it reboots the VM, from vCPU 0.
                vm.reset(FACTORY.get().and_then(|factory| next_seeds(factory, vm.id)));
                if let Err(e) = SCHEDULING.start(vcpu_ref(vm.id, 0)) {
                    println!("hypervisor: vm{} {}: cannot restart: {e}", vm.id, vm.spec.name);
                }
            }
            VcpuExit::VmEnded(end) => vm_ended(&vm, end),
        }
    }
}

/// The VM's last vCPU stopped (or the console ended a VM with none running): it is
/// destroyed through its capability, and created again if it restarts.
pub(crate) fn vm_ended(vm: &Vm, end: EndReason) {
    let clean = hyp_runtime::vm::is_clean(end);
    println!("hypervisor: vm{} {} ended: {:?} ({})", vm.id, vm.spec.name, end, if clean { "clean" } else { "failed" });
    println!("hypervisor: vm{} {}: {}", vm.id, vm.spec.name, vm.exit_counts());
    let left_out = vm.guest_log.left_out();
    if left_out > 0 {
        println!(
            "hypervisor: vm{} {}: {left_out} more line(s) the guest caused were left out (after the first {}, one a second)",
            vm.id,
            vm.spec.name,
            hyp_core::log_limit::BURST
        );
    }
    // Nothing may reach its RAM once the memory goes back: not the switch, not console input.
    vm.shut_down_devices();
    let _ = VMS.take(vm.id);
    if let Some(caps) = CAPS.get() {
        match vm::destroy(&mut caps.lock(), vm) {
            Ok(()) => println!(
                "hypervisor: vm{} {}: capabilities revoked, {} MiB returned to untyped memory",
                vm.id,
                vm.spec.name,
                vm.spec.memory >> 20
            ),
            Err(e) => println!("hypervisor: vm{} {}: destroying it failed: {e}", vm.id, vm.spec.name),
        }
    }
    if end == EndReason::Restart {
        match recreate(vm.id) {
            Ok(()) => {
                return println!("hypervisor: vm{} {}: created again from its manifest entry", vm.id, vm.spec.name)
            }
            Err(e) => println!("hypervisor: cannot restart: {e}"),
        }
    }
    if let Some(RunEnd { total, failed }) = VMS.ended(clean) {
        println!("hypervisor: all {total} VM(s) ended: {} clean, {failed} failed", total - failed);
        finish(failed == 0)
    }
}

/// VM `id` anew from its manifest entry, started from vCPU 0 on its CPUs.
fn recreate(id: usize) -> Result<(), alloc::string::String> {
    let spec = VMS.spec(id).ok_or_else(|| alloc::format!("vm{id}: no such VM"))?;
    let vm = create_vm(id, spec)?;
    vm.load();
    VMS.put(id, vm);
    SCHEDULING.start(vcpu_ref(id, 0)).map_err(|e| alloc::format!("vm{id} {}: {e}", spec.name))
}

/// A destroyed VM created again by the console (it counts as running again).
pub(crate) fn start_again(id: usize) -> Result<(), alloc::string::String> {
    recreate(id)?;
    VMS.running_again();
    Ok(())
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println_unlocked!("\nhypervisor: panic on cpu{}: {info}", cpus::current_index());
    cpus::park()
}
