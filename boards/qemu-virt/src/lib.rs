//! The board layer for QEMU `virt` and boards like it: the hypervisor's console on the
//! board's PL011 (`uart`), and the board's virtio-mmio block and network devices, which the
//! hypervisor drives itself (`virtio`); and the runtime's `Board` (hyp_runtime::board) over
//! them. It names no CPU architecture: an AArch64 or an ARMv7 image takes it alike (the
//! disk's completions come through the hypervisor's interrupt routes).
#![no_std]

extern crate alloc;

#[macro_use]
pub mod uart;
pub mod virtio;

use core::fmt;

use hyp_core::sync::Mutex;
use hyp_runtime::focus::Focus;
use hyp_runtime::Board;

use uart::{VmConsole, FOCUS};
use virtio::{HostDisk, Uplink};

pub struct QemuVirt;

impl Board for QemuVirt {
    type Disk = HostDisk;
    type Console = VmConsole;
    type Nic = Uplink;

    fn disk() -> Option<&'static Mutex<HostDisk>> {
        virtio::DISK.get()
    }

    fn nic() -> Option<&'static Mutex<Uplink>> {
        virtio::UPLINK.get()
    }

    fn vm_console(vm: usize, name: &'static str) -> VmConsole {
        VmConsole::new(vm, name, &FOCUS)
    }

    fn print(line: fmt::Arguments<'_>) {
        uart::print(format_args!("{line}\n"));
    }

    fn write(text: fmt::Arguments<'_>) {
        uart::print(text);
    }

    fn focus() -> &'static Focus {
        &FOCUS
    }

    fn enable_console_input() {
        uart::enable_input();
    }

    fn take_console_input(buf: &mut [u8]) -> usize {
        uart::take_input(buf)
    }
}
