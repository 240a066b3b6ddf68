//! The seam between the runtime and the board it runs on (docs/architecture.md, "The two
//! traits"): what the runtime uses of the board's own devices, its console, its disk and
//! its NIC.
//! Like `Arch`, its functions are associated functions: an image runs on one board at a
//! time. A board layer implements it (QEMU `virt`: boards/qemu-virt, its PL011 and its
//! virtio-mmio block and network devices); the host tests implement it with fakes.

use core::fmt;

use hyp_core::pl011::ConsoleOutput;
use spin::Mutex;

use crate::focus::Focus;
use crate::network::BoardNic;

/// What the runtime asks of the board.
pub trait Board: 'static {
    /// The board's disk, whose slices are the VMs' disks.
    type Disk: BoardDisk + 'static;
    /// A VM's console output on the board's console, attributed to the VM.
    type Console: ConsoleOutput + Send;
    /// The board's NIC, the virtual switch's uplink.
    type Nic: BoardNic + 'static;
    /// The board's disk, if it has one.
    fn disk() -> Option<&'static Mutex<Self::Disk>>;
    /// The board's NIC, if it has one.
    fn nic() -> Option<&'static Mutex<Self::Nic>>;
    /// The console of VM `vm`.
    fn vm_console(vm: usize, name: &'static str) -> Self::Console;
    /// Prints a line of the hypervisor's on the board's console.
    fn print(line: fmt::Arguments<'_>);
    /// Prints `text` on the board's console as it is (the management console's echo).
    fn write(text: fmt::Arguments<'_>);
    /// Which VM has the console's input focus.
    fn focus() -> &'static Focus;
    /// Console input raises the console's interrupt from now on.
    fn enable_console_input();
    /// What the user typed since the last call, into `buf`; how many bytes.
    fn take_console_input(buf: &mut [u8]) -> usize;
}

/// A run of a VM's RAM, by physical address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysicalRun {
    pub pa: u64,
    pub len: u32,
}

/// The board's disk refused or failed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskError;

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the board's disk refused or failed the request")
    }
}

/// The board's disk, in sectors of 512 bytes. One call is one request of the disk, which
/// completes before the call returns.
pub trait BoardDisk: Send {
    /// Its size in sectors.
    fn capacity(&self) -> u64;

    /// Reads from `sector` into `runs`, in order. The runtime guarantees that the runs lie
    /// in the RAM of one VM, are whole sectors and are pairwise disjoint, so each may be
    /// handed to the disk as a buffer of its own.
    fn read_to_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError>;

    /// Writes `runs`, in order, from `sector` (the runs as for `read_to_guest`).
    fn write_from_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError>;

    /// Reads from `sector` into the hypervisor's buffer `buf` (whole sectors).
    fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// Writes the hypervisor's buffer `buf` (whole sectors) from `sector`.
    fn write(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// Returns once what was written before is on the disk's medium.
    fn flush(&mut self) -> Result<(), DiskError>;
}
