//! The boot CPU's way from the board's device tree to running VMs, shared by the AArch64 and
//! ARMv7 images once their MMU and console are on: RAM divided and the heap started, the GIC
//! and this CPU's interface, the hypervisor's own interrupts routed, the other CPUs started
//! (PSCI CPU_ON, or released from a spin table) and checked, the board's devices, the boot
//! bundle, and `Hypervisor::start`. What names the CPU architecture or the board is the
//! image's (`ArmImage`, crate::image).

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;

use hyp_core::bundle::{BootBundle, RAM_GRANULE};
use hyp_core::manifest::{DeviceTreeDevices, HeldMemory, Holder};
use hyp_core::memory_map;
use hyp_core::platform::{CpuStart, GicVersion, PhysRange, Platform, SysFlags};
use hyp_runtime::hypervisor::boot::BootedBoard;
use hyp_runtime::interrupts::{Route, KICK_SGI};
use hyp_runtime::Board;

use crate::image::{init_cpu, ArmImage, GICH, PPIS};
use crate::its::vlpis::BoardGicv4;
use crate::its::ItsError;

macro_rules! say {
    ($i:ty, $($arg:tt)*) => { <<$i as ArmImage>::Board as Board>::print(format_args!($($arg)*)) };
}

/// Says why nothing can run and stops the machine, failed.
fn halt<I: ArmImage>(message: impl core::fmt::Display) -> ! {
    say!(I, "hypervisor: error: {message}");
    I::stop(false)
}

/// The boot CPU, its MMU and console on, the heap not yet started: from the device tree
/// (`device_tree`, at `dtb`) to running VMs. `image` is the hypervisor's own memory. Returns
/// this CPU's index, to run vCPUs from then on.
///
/// # Safety
///
/// Called once, by the boot CPU, before any other CPU runs, with the identity map of
/// `hyp_map` on: the heap is started over RAM no one else uses, and the GIC's and the boot
/// bundle's memory are read at their physical addresses.
pub unsafe fn boot<I: ArmImage>(
    platform: &Platform<'_>,
    device_tree: &'static [u8],
    dtb: u64,
    image: PhysRange,
) -> usize {
    // No heap yet: nothing here may allocate until it is started.
    // Every lock's waiter gives way from now on (hyp_core::sync): no other CPU runs yet.
    hyp_core::sync::set_wait_hint(I::wait_a_little);
    crate::power::init(platform);
    say!(I, "\nhypervisor {} ({}) on {}", env!("CARGO_PKG_VERSION"), I::MODE, platform.model);
    say!(I, "  image       {:#x}..{:#x}", image.base, image.end());
    say!(I, "{platform}");
    match (platform.psci, crate::firmware::version()) {
        (None, _) => say!(I, "  psci        none: the firmware has no /psci node"),
        (Some(conduit), Ok(version)) => say!(I, "  psci        {conduit:?} conduit, firmware PSCI {version}"),
        (Some(conduit), Err(e)) => say!(I, "  psci        {conduit:?} conduit, firmware PSCI version unknown: {e}"),
    }
    let dtb = PhysRange { base: dtb, size: device_tree.len() as u64 };
    let in_use = [image, dtb];
    // The firmware's memory: its reservations and the spin tables the other CPUs wait in.
    let firmware = platform.firmware_memory();
    let used = in_use.iter().chain(platform.initrd.iter()).chain(firmware.iter());
    let plan =
        memory_map::plan(&platform.memory, used, crate::heap::HEAP_SIZE, RAM_GRANULE).unwrap_or_else(|e| halt::<I>(e));
    if plan.dropped > 0 {
        say!(I, "hypervisor: {} free memory range(s) not used: too fragmented", plan.dropped);
    }
    // SAFETY: the heap's range is free RAM (not the image, device tree, bundle, reserved
    // memory or spin tables), identity-mapped Normal (the caller's contract), and from here
    // on belongs to the heap alone; this runs once.
    unsafe { crate::heap::init(plan.heap.base, plan.heap.size) };
    let free: Vec<PhysRange> = plan.free.iter().copied().collect();
    // What holds the rest of RAM, which an identity-mapped VM's RAM must miss
    // (docs/capability-model.md, D2): the manifest check names the holder.
    // In address order as the firmware and loader usually lay them out (image, bundle,
    // device tree, heap), so a range over several is told the lowest.
    let held: Vec<HeldMemory> = [(image, Holder::Image)]
        .into_iter()
        .chain(platform.initrd.map(|r| (r, Holder::BootBundle)))
        .chain([(dtb, Holder::DeviceTree), (plan.heap, Holder::Heap)])
        .chain(firmware.iter().map(|r| (*r, Holder::Firmware)))
        .map(|(range, holder)| HeldMemory { range, holder })
        .collect();
    say!(
        I,
        "  free memory {} MiB for VMs in {} range(s), heap {} MiB",
        free.iter().map(|r| r.size).sum::<u64>() >> 20,
        free.len(),
        crate::heap::HEAP_SIZE >> 20
    );
    // Where each lies, for a manifest that places an identity-mapped VM (docs/manifest.md).
    let mut ranges = alloc::string::String::new();
    for (i, r) in free.iter().enumerate() {
        ranges.push_str(if i == 0 { "" } else { ", " });
        ranges.push_str(&format!("{r}"));
    }
    say!(I, "  heap        {}; free for VMs: {ranges}", plan.heap);

    let hypervisor = I::hypervisor();
    // SAFETY: the frames are the device tree's GIC, which the hypervisor's identity map
    // maps Device-nGnRE at their physical addresses (hyp_map); the boot CPU calls this
    // once, first, before the other CPUs start.
    unsafe { I::gic().init_distributor(&platform.gic) };
    let ppis =
        [platform.gic.maintenance_intid.unwrap_or(25), platform.timer.virtual_timer, platform.timer.hyp_physical];
    PPIS.call_once(|| ppis);
    let own = [
        (KICK_SGI, Route::Kick),
        (ppis[0], Route::Maintenance),
        (ppis[1], Route::VirtualTimer),
        (ppis[2], Route::HypTimer),
    ];
    for (intid, route) in own {
        if let Err(e) = hypervisor.routes.set(intid, route) {
            halt::<I>(format_args!("the board's interrupts: {e}"));
        }
    }
    let me = I::current_cpu();
    if let Err(e) = init_cpu::<I>(me) {
        halt::<I>(format_args!("GIC: this CPU's interface cannot be set up ({e:?})"));
    }
    start_other_cpus::<I>(platform, me);
    say!(I, "hypervisor: {} of {} CPUs online", hypervisor.cpus.online_count(), platform.cpus.len());
    let (answered, asked) = hypervisor.cpus.check_kicks::<I>(100_000_000, I::wait_a_little);
    say!(I, "hypervisor: SGIs reach the other CPUs: {answered} of {asked} answered");
    bring_up_gicv4::<I>(platform);
    let disk_sectors = I::probe_board(platform);

    let Some(initrd) = platform.initrd else {
        halt::<I>("no boot bundle: pass one as the initrd (`cargo xtask qemu` builds it)")
    };
    // SAFETY: the loader put the initrd at this range in RAM; it is in `used`, so nothing
    // else allocates or writes it.
    let blob = unsafe { core::slice::from_raw_parts(initrd.base as *const u8, initrd.size as usize) };
    let bundle = BootBundle::parse(blob).unwrap_or_else(|e| halt::<I>(format_args!("boot bundle: {e}")));
    let set_aside = I::apply_options(&bundle, me).unwrap_or_else(|e| halt::<I>(format_args!("boot bundle: {e}")));
    GICH.call_once(|| match (platform.gic.version, platform.gic.hyp_interface) {
        (GicVersion::V2, Some(gich)) => Some(gich.base as usize),
        _ => None,
    });
    let Some(devices) = DeviceTreeDevices::new(device_tree) else {
        halt::<I>("the device tree's devices cannot be read to check the manifest")
    };
    let board = BootedBoard {
        platform,
        devices: &devices,
        free: &free,
        held: &held,
        stage2: I::stage2_format(),
        disk_sectors,
        boot_cpu: me,
        usable_cpu: &|cpu| hypervisor.cpus.is_online(cpu) && Some(cpu) != set_aside,
    };
    if let Err(e) = hypervisor.start(&bundle, &board) {
        halt::<I>(e);
    }
    me
}

/// The board's GICv4.0, if its ITS has virtual LPIs, brought up for direct injection of
/// the VMs' LPIs (crate::its::vlpis), once every CPU's redistributor is: the runtime finds
/// it through `Arch::vlpis`.
fn bring_up_gicv4<I: ArmImage>(platform: &Platform<'_>) {
    let Some(its) = platform.gic.its else { return };
    let gic = I::gic();
    // SAFETY: the device tree's ITS, which the identity map maps Device-nGnRE at its
    // physical address (hyp_map); nothing else drives it, and the boot CPU runs this once.
    let board = unsafe { BoardGicv4::<I::Icc>::init(its.base as usize, |cpu| gic.lpi_redistributor(cpu)) };
    match board {
        Ok(board) => {
            crate::image::VLPIS.call_once(|| Box::leak(Box::new(board)));
            say!(
                I,
                "hypervisor: GICv4.0: the ITS at {its} injects the LPIs of up to {} VMs of up to {} vCPUs directly",
                crate::its::vlpis::SLOTS,
                crate::its::vlpis::VPES_PER_SLOT
            );
        }
        Err(ItsError::NoVirtualLpis) => {}
        Err(e) => say!(I, "hypervisor: GICv4.0 not used, the VMs' LPIs stay with their vGICs: {e}"),
    }
}

/// Starts every other CPU as the device tree says and waits for each to report online (or
/// gives up on it after a bounded wait, saying so). A CPU that does not start stays off; the
/// VMs' vCPUs are placed on the CPUs that are online.
fn start_other_cpus<I: ArmImage>(platform: &Platform<'_>, me: usize) {
    let cpus = &I::hypervisor().cpus;
    cpus.set_online(me);
    say!(I, "hypervisor: cpu{me} (MPIDR {:#x}) online (boot CPU)", I::mpidr());
    let others = platform.cpus.iter().zip(platform.cpu_start.iter()).enumerate().filter(|&(index, _)| index != me);
    for (index, (&target, start)) in others {
        let started = match start {
            CpuStart::Psci => crate::firmware::cpu_on(target, I::cpu_entry(), I::prepare_cpu_start(index))
                .map_err(|e| format!("PSCI CPU_ON: {e}")),
            // The Raspberry Pi 4's: no PSCI, its CPUs wait in the firmware's spin table.
            CpuStart::SpinTable { release } => {
                crate::spin_table::release::<I>(platform, index, target, *release).map_err(|e| format!("{e}"))
            }
            CpuStart::SysFlags(flags) => release_through_sys_flags::<I>(index, flags),
            CpuStart::Unknown => Err("its enable-method is neither psci nor spin-table, and the board is no \
                                      Versatile Express with system registers"
                .into()),
        };
        if let Err(e) = started {
            say!(I, "hypervisor: cpu{index} (MPIDR {target:#x}) did not start: {e}");
        } else if !cpus.wait_online(index, 200_000_000, I::wait_a_little) {
            match I::pen_refusal() {
                Some(cpsr) => say!(
                    I,
                    "hypervisor: cpu{index} (MPIDR {target:#x}) stopped: the board started it in another mode than \
                     the boot CPU's ({}): CPSR {cpsr:#x}; its firmware must start every CPU as it starts the boot CPU",
                    I::MODE
                ),
                None => say!(I, "hypervisor: cpu{index} (MPIDR {target:#x}) started but never reported online"),
            }
        }
    }
}

/// Starts CPU `index` the Versatile Express way (hyp_core::platform::SysFlags): let through
/// the image's pen, the pen's entry alone in SYS_FLAGS, and the CPUs woken. Every other CPU
/// is woken, not this one alone: a GICv2 CPU interface's number is known only once its CPU
/// runs the hypervisor, and Versatile Express's firmware sends every CPU it wakes to the
/// address in SYS_FLAGS anyway. Those not let through yet wait in the pen.
fn release_through_sys_flags<I: ArmImage>(index: usize, flags: &SysFlags) -> Result<(), alloc::string::String> {
    let boot = I::prepare_cpu_start(index);
    let entry = I::open_pen(index, boot).ok_or_else(|| {
        format!("its board starts it through SYS_FLAGS, and this image ({}) has no entry for that", I::MODE)
    })?;
    let entry =
        u32::try_from(entry).map_err(|_| format!("the pen's entry {entry:#x} lies beyond SYS_FLAGS' 32 bits"))?;
    // SAFETY: the board's system registers, which the identity map maps as device memory
    // for every CPU started through them (hyp_map).
    unsafe { crate::sys_flags::leave_entry(flags, entry) };
    I::gic().send_sgi_to_others(KICK_SGI);
    Ok(())
}
