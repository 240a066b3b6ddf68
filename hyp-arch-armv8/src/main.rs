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
#[cfg(feature = "test-hooks")]
mod fault_test;
mod gic;
mod ich;
mod list_registers;
mod memory;
mod mmu;
mod vcpu_state;
mod vdev;
mod vm;

use alloc::vec::Vec;

use crate::arch::HYPERVISOR;
use crate::list_registers::ListRegisterFile;
use hyp_core::bundle::{BootBundle, RAM_GRANULE};
use hyp_core::memory_map;
use hyp_core::platform::{GicVersion, PhysRange, Platform};
use hyp_runtime::interrupts::Route;
use spin::Once;
use stage2::TableFormat;

macro_rules! println_unlocked {
    ($($arg:tt)*) => { hyp_board_qemu_virt::uart::print_unlocked(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use println_unlocked;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The boot bundle says the run enabled semihosting (a test hook).
#[cfg(feature = "test-hooks")]
static SEMIHOSTING_EXIT: Once<bool> = Once::new();
/// The deliberate EL2 fault a system test's boot bundle asks for (a test hook).
#[cfg(feature = "test-hooks")]
static EL2_FAULT: Once<hyp_core::bundle::El2Fault> = Once::new();

#[no_mangle]
extern "C" fn primary_main(dtb: u64, _image_base: u64) -> ! {
    // The MMU is off: no locks and no heap until it is on. Without a device tree there is
    // no known UART to complain on.
    // SAFETY: booting.rst requires x0 to point at a device tree in RAM, 8-byte aligned,
    // which the hypervisor never writes or frees.
    let Ok(device_tree) = (unsafe { hyp_arch_arm::identity_map::device_tree(dtb) }) else { cpus::park() };
    let Ok(platform) = Platform::from_device_tree(device_tree) else { cpus::park() };
    let layout = boot::image_layout();
    let Ok(mmu_regs) = mmu::build(&platform, layout) else { cpus::park() };
    let (image_start, image_end) = (layout.start, layout.end);
    mmu::invalidate_dcache_range(image_start, image_end);
    mmu::enable(&mmu_regs);
    hyp_board_qemu_virt::uart::init(platform.uart.base);
    hyp_arch_arm::firmware::init(platform.psci);
    cpus::record_cpus(&platform);

    // No heap yet: nothing here may allocate.
    let psci = hyp_arch_arm::firmware::version();
    println!("\nhypervisor {VERSION} (AArch64, EL2) on {}", platform.model);
    println!("  image       {:#x}..{:#x}", image_start, image_end);
    println!("{platform}");
    match psci {
        Ok(version) => println!("  psci        {:?} conduit, firmware PSCI {version}", platform.psci),
        Err(e) => println!("  psci        {:?} conduit, firmware PSCI version unknown: {e}", platform.psci),
    }

    let dtb_range = PhysRange { base: dtb, size: device_tree.len() as u64 };
    let image = PhysRange { base: image_start, size: image_end - image_start };
    let in_use = [image, dtb_range];
    let used = in_use.iter().chain(platform.initrd.iter()).chain(platform.reserved.iter());
    let plan = match memory_map::plan(&platform.memory, used, hyp_arch_arm::heap::HEAP_SIZE, RAM_GRANULE) {
        Ok(plan) => plan,
        Err(e) => halt(e),
    };
    if plan.dropped > 0 {
        println!("hypervisor: {} free memory range(s) not used: too fragmented", plan.dropped);
    }
    // SAFETY: the heap's range is free RAM (not the image, device tree, bundle or reserved
    // memory), identity-mapped Normal, and from here on belongs to the heap alone.
    unsafe { hyp_arch_arm::heap::init(plan.heap.base, plan.heap.size) };
    let untyped: Vec<PhysRange> = plan.free.iter().copied().collect();
    let untyped_total: u64 = untyped.iter().map(|r| r.size).sum();
    println!(
        "  free memory {} MiB for VMs in {} range(s), heap {} MiB",
        untyped_total >> 20,
        untyped.len(),
        hyp_arch_arm::heap::HEAP_SIZE >> 20
    );

    gic::init_distributor(&platform.gic);
    let ppis = gic_ppis(&platform);
    PPIS.call_once(|| ppis);
    let own = [
        (gic::KICK_SGI, Route::Kick),
        (ppis[0], Route::Maintenance),
        (ppis[1], Route::VirtualTimer),
        (ppis[2], Route::HypTimer),
    ];
    for (intid, route) in own {
        if let Err(e) = HYPERVISOR.routes.set(intid, route) {
            halt(format_args!("the board's interrupts: {e}"));
        }
    }
    if let Err(e) = gic::GIC.init_cpu(cpus::current_index(), platform.cpus[cpus::current_index()], &ppis) {
        halt(format_args!("GIC: this CPU's interface cannot be set up ({e:?})"));
    }
    debug_hw::init_cpu();
    cpus::start_secondaries(&platform, &mmu_regs);
    println!("hypervisor: {} of {} CPUs online", HYPERVISOR.cpus.online_count(), platform.cpus.len());
    let (answered, asked) = HYPERVISOR.cpus.check_kicks::<arch::Aarch64>(100_000_000, cpus::wait_a_little);
    println!("hypervisor: SGIs reach the other CPUs: {answered} of {asked} answered");

    let found = hyp_board_qemu_virt::virtio::probe(&platform, gic::INTERRUPT_WAIT);
    if let Some(sectors) = found.disk_sectors {
        println!("hypervisor: virtio disk of {} MiB (the VMs' disks are slices of it)", sectors >> 11);
    }
    if let Some(mac) = found.uplink_mac {
        println!("hypervisor: virtio NIC {} (the virtual switch's uplink)", vdev_virtio::switch::Mac(&mac));
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
    // An image without the test hooks refuses a bundle that asks for one rather than run
    // otherwise than it says (docs/security.md, "Test hooks").
    #[cfg(not(feature = "test-hooks"))]
    if let Err(e) = bundle.options.check_no_test_hooks() {
        halt(format_args!("boot bundle: {e}"));
    }
    #[cfg(feature = "test-hooks")]
    SEMIHOSTING_EXIT.call_once(|| bundle.options.semihosting_exit);
    LIST_REGISTERS.call_once(|| match (platform.gic.version, platform.gic.hyp_interface) {
        // SAFETY: the device tree's GICH frame, which the EL2 tables map Device-nGnRE (mmu.rs).
        (GicVersion::V2, Some(gich)) => unsafe { ListRegisterFile::v2(gich.base as usize) },
        _ => ListRegisterFile::V3,
    });
    let Some(board_devices) = hyp_core::manifest::DeviceTreeDevices::new(device_tree) else {
        halt(format_args!("the device tree's devices cannot be read to check the manifest"))
    };
    let me = cpus::current_index();
    #[cfg(feature = "test-hooks")]
    let fault = bundle
        .options
        .test_el2_fault
        .map(|(c, f)| (c as usize, f))
        .filter(|&(c, _)| c != me && HYPERVISOR.cpus.is_online(c));
    #[cfg(feature = "test-hooks")]
    let fault_cpu = fault.map(|(c, _)| c);
    #[cfg(not(feature = "test-hooks"))]
    let fault_cpu: Option<usize> = None;
    let pa_bits = physical_address_bits().min(48);
    let board = hyp_runtime::hypervisor::boot::BootedBoard {
        platform: &platform,
        devices: &board_devices,
        free: &untyped,
        stage2: TableFormat::Vmsav8_64 { ipa_bits: hyp_core::guest_map::IPA_BITS.min(pa_bits), pa_bits },
        disk_sectors: found.disk_sectors,
        boot_cpu: me,
        usable_cpu: &|cpu| HYPERVISOR.cpus.is_online(cpu) && Some(cpu) != fault_cpu,
    };
    // The fault is over, its report printed, before any VM is created or prints.
    #[cfg(feature = "test-hooks")]
    if let Some((cpu, kind)) = fault {
        println!("hypervisor: the boot bundle asks cpu{cpu} to take a deliberate EL2 fault, {} (a test)", kind.name());
        EL2_FAULT.call_once(|| kind);
        HYPERVISOR.cpus.give_work::<arch::Aarch64>(cpu, cpus::WORK_EL2_FAULT);
        if !fault_test::wait_for_report(cpu) {
            println!("hypervisor: cpu{cpu} has not reported its deliberate EL2 fault; going on");
        }
    }
    if let Err(e) = HYPERVISOR.start(&bundle, &board) {
        halt(e);
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

/// Nothing can run: say why and stop the machine with a failure status.
fn halt(message: impl core::fmt::Display) -> ! {
    println!("hypervisor: error: {message}");
    finish(false)
}

/// Every VM has ended, or nothing can run: stop the machine, with a failure status when
/// the run enabled semihosting (a test hook; an image without them powers off either way).
pub(crate) fn finish(clean: bool) -> ! {
    #[cfg(feature = "test-hooks")]
    if !clean && SEMIHOSTING_EXIT.get().copied().unwrap_or(false) {
        fault_test::semihosting_exit(1)
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = clean;
    if let Err(e) = hyp_arch_arm::firmware::system_off() {
        println!("hypervisor: the firmware did not power off: {e}");
    }
    cpus::park()
}

/// A CPU's life after boot: the work other CPUs hand it, then the vCPUs the scheduler picks.
pub(crate) fn cpu_loop(cpu: usize) -> ! {
    loop {
        match HYPERVISOR.cpus.take_work(cpu) {
            #[cfg(feature = "test-hooks")]
            Some(cpus::WORK_EL2_FAULT) => {
                if let Some(&fault) = EL2_FAULT.get() {
                    fault_test::provoke(fault, cpu);
                }
            }
            _ => {
                if !HYPERVISOR.run_next(cpu) {
                    cpus::idle();
                }
            }
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println_unlocked!("\nhypervisor: panic on cpu{}: {info}", cpus::current_index());
    cpus::park()
}
