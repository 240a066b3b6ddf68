//! The runtime's `Board` (hyp_runtime::board) for the boards this image runs on today:
//! QEMU `virt` and boards like it, whose console is a PL011 (console.rs) and whose disk and
//! NIC are virtio-mmio devices (host_virtio.rs).

use core::fmt;

use hyp_runtime::Board;
use spin::Mutex;

use crate::console::VmConsole;
use crate::host_virtio::{HostDisk, Uplink};

pub struct QemuVirt;

impl Board for QemuVirt {
    type Disk = HostDisk;
    type Console = VmConsole;
    type Nic = Uplink;

    fn disk() -> Option<&'static Mutex<HostDisk>> {
        crate::host_virtio::DISK.get()
    }

    fn nic() -> Option<&'static Mutex<Uplink>> {
        crate::host_virtio::UPLINK.get()
    }

    fn vm_console(vm: usize, name: &'static str) -> VmConsole {
        VmConsole::new(vm, name)
    }

    fn print(line: fmt::Arguments<'_>) {
        println!("{line}");
    }
}
