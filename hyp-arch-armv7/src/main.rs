//! The ARMv7-A hypervisor image (Cortex-A15 in HYP mode): entered as a 32-bit Linux kernel,
//! discovers the board from the device tree, starts every CPU, creates the VMs the boot
//! bundle describes and runs them. What it shares with the AArch64 image is hyp-arch-arm's.
#![no_std]
#![no_main]

extern crate alloc;
#[macro_use]
extern crate hyp_board_qemu_virt;

mod arch;
mod boot;
mod cpus;
mod exceptions;
mod gic;
mod guest_regs;
mod inject;
mod memory;
mod mmu;
mod sysregs;
mod vcpu_state;
mod vm;

use hyp_core::platform::{GicVersion, PhysRange, Platform};
use spin::Once;

macro_rules! println_unlocked {
    ($($arg:tt)*) => { hyp_board_qemu_virt::uart::print_unlocked(format_args!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use println_unlocked;

/// The registers that turn the hypervisor's identity map on, for the CPUs started later.
static MMU_REGISTERS: Once<mmu::MmuRegisters> = Once::new();

/// The device tree the 32-bit boot protocol passes in r2.
fn device_tree(dtb: u32) -> Option<&'static [u8]> {
    // SAFETY: the boot protocol puts a device tree in RAM at r2, 8-byte aligned, which the
    // hypervisor never writes or frees.
    unsafe { hyp_arch_arm::identity_map::device_tree(u64::from(dtb)) }.ok()
}

/// Says `why` on the board's console, if the device tree names one, then stops this CPU:
/// for what stops the boot before the MMU and the console are on.
fn stop_early(device_tree: Option<&[u8]>, why: core::fmt::Arguments<'_>) -> ! {
    if let Some(uart) = device_tree.and_then(hyp_core::platform::console_uart) {
        hyp_board_qemu_virt::uart::init(uart.base);
        println_unlocked!("hypervisor: {why}; stopped");
    }
    cpus::park()
}

/// Entered in a mode other than HYP (the loader kept HYP mode for itself, or the board's
/// Virtualization Extensions are off): says so and stops.
#[no_mangle]
extern "C" fn wrong_mode(dtb: u32, cpsr: u32) -> ! {
    let mode = match cpsr & 0x1f {
        0x13 => "SVC",
        0x1f => "System",
        0x16 => "Monitor",
        _ => "another",
    };
    stop_early(
        device_tree(dtb),
        format_args!(
            "entered in {mode} mode (CPSR {cpsr:#x}), not HYP mode: the loader must enter this \
             hypervisor in HYP mode (QEMU: -M virt,virtualization=on)"
        ),
    )
}

#[no_mangle]
extern "C" fn primary_main(dtb: u32, _image_base: u32) -> ! {
    // The MMU is off: no locks and no heap until it is on. Without a device tree there is
    // no known UART to complain on.
    let Some(device_tree) = device_tree(dtb) else { cpus::park() };
    let platform = Platform::from_device_tree(device_tree)
        .unwrap_or_else(|e| stop_early(Some(device_tree), format_args!("the device tree: {e}")));
    let layout = hyp_arch_arm::hyp_map::ImageLayout::of_this_image();
    let mmu_regs = mmu::build(&platform, layout)
        .unwrap_or_else(|e| stop_early(Some(device_tree), format_args!("the HYP memory map: {e:?}")));
    let (image_start, image_end) = (layout.start, layout.end);
    mmu::dcache_range(image_start, image_end, mmu::DcOp::Invalidate);
    mmu::enable(&mmu_regs);
    hyp_board_qemu_virt::uart::init(platform.uart.base);
    hyp_arch_arm::firmware::init(platform.psci);
    if platform.gic.version != GicVersion::V2 {
        println!(
            "hypervisor: this board's GIC is a GICv3, whose CPU interface and list registers are \
             system registers this ARMv7 image does not drive yet; boot it with a GICv2 \
             (QEMU: -M virt,gic-version=2)"
        );
        finish(false)
    }
    cpus::record_cpus(&platform);

    MMU_REGISTERS.call_once(|| mmu_regs);
    let image = PhysRange { base: image_start, size: image_end - image_start };
    // SAFETY: the boot CPU, once, alone, its identity map on (above).
    let me = unsafe { hyp_arch_arm::boot::boot::<arch::Armv7>(&platform, device_tree, u64::from(dtb), image) };
    cpus::cpu_loop(me)
}

/// Every VM has ended, or nothing can run: power the machine off (hyp_arch_arm::power), or
/// say why not and halt.
pub(crate) fn finish(_clean: bool) -> ! {
    let still_on = hyp_arch_arm::power::off::<arch::Armv7>();
    println!("hypervisor: {still_on}; this CPU halts here, and the machine may be switched off");
    cpus::park()
}
