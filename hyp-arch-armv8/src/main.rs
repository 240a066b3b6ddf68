//! The AArch64 hypervisor image: boots at EL2, discovers the board from the device tree,
//! starts every CPU, creates the VMs the boot bundle describes and runs them.
#![no_std]
#![no_main]

extern crate alloc;
#[macro_use]
extern crate hyp_board_qemu_virt;

/// Reads a system register by name, for those `aarch64-cpu` does not type or where its name
/// is the clearest (defined before the modules, so every module has it).
macro_rules! sysreg {
    ($name:literal) => {{
        let v: u64;
        // SAFETY: reading a system register from EL2 has no side effect.
        unsafe { core::arch::asm!(concat!("mrs {}, ", $name), out(reg) v, options(nomem, nostack)) };
        v
    }};
}

mod arch;
mod boot;
mod cpus;
mod debug_hw;
mod exceptions;
#[cfg(feature = "test-hooks")]
mod fault_test;
mod gic;
mod ich;
mod memory;
mod mmu;
mod vcpu_state;
mod vm;

use crate::arch::HYPERVISOR;
use hyp_core::platform::{PhysRange, Platform};
use spin::Once;

macro_rules! println_unlocked {
    ($($arg:tt)*) => { hyp_board_qemu_virt::uart::print_unlocked(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use println_unlocked;

/// The registers that turn the hypervisor's identity map on, for the CPUs started later.
static MMU_REGISTERS: Once<mmu::MmuRegisters> = Once::new();

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
    let layout = hyp_arch_arm::hyp_map::ImageLayout::of_this_image();
    let Ok(mmu_regs) = mmu::build(&platform, layout) else { cpus::park() };
    let (image_start, image_end) = (layout.start, layout.end);
    mmu::invalidate_dcache_range(image_start, image_end);
    mmu::enable(&mmu_regs);
    hyp_board_qemu_virt::uart::init(platform.uart.base);
    hyp_arch_arm::firmware::init(platform.psci);
    cpus::record_cpus(&platform);

    MMU_REGISTERS.call_once(|| mmu_regs);
    let image = PhysRange { base: image_start, size: image_end - image_start };
    // SAFETY: the boot CPU, once, alone, its identity map on (above).
    let me = unsafe { hyp_arch_arm::boot::boot::<arch::Aarch64>(&platform, device_tree, dtb, image) };
    cpu_loop(me)
}

/// What the boot bundle's options ask of this image (hyp_arch_arm::image::ArmImage): the CPU
/// set aside for a deliberate EL2 fault, its fault over and reported before any VM is
/// created or prints. An image without the test hooks refuses a bundle that asks for one
/// rather than run otherwise than it says (docs/security.md, "Test hooks").
fn apply_options(
    bundle: &hyp_core::bundle::BootBundle<'static>,
    me: usize,
) -> Result<Option<usize>, hyp_core::bundle::BundleError<'static>> {
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = me;
        bundle.options.check_no_test_hooks().map(|()| None)
    }
    #[cfg(feature = "test-hooks")]
    {
        SEMIHOSTING_EXIT.call_once(|| bundle.options.semihosting_exit);
        let fault = bundle.options.test_el2_fault.map(|(c, f)| (c as usize, f));
        let Some((cpu, kind)) = fault.filter(|&(c, _)| c != me && HYPERVISOR.cpus.is_online(c)) else {
            return Ok(None);
        };
        println!("hypervisor: the boot bundle asks cpu{cpu} to take a deliberate EL2 fault, {} (a test)", kind.name());
        EL2_FAULT.call_once(|| kind);
        HYPERVISOR.cpus.give_work::<arch::Aarch64>(cpu, cpus::WORK_EL2_FAULT);
        if !fault_test::wait_for_report(cpu) {
            println!("hypervisor: cpu{cpu} has not reported its deliberate EL2 fault; going on");
        }
        Ok(Some(cpu))
    }
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
    let still_on = hyp_arch_arm::power::off::<arch::Aarch64>();
    println!("hypervisor: {still_on}; this CPU halts here, and the machine may be switched off");
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
