//! The seam between the runtime and the board it runs on (docs/architecture.md, "The two
//! traits"): what the runtime uses of the board's own devices, its console, its disk and
//! its NIC.
//! Like `Arch`, its functions are associated functions: an image runs on one board at a
//! time. A board layer implements it (QEMU `virt`: boards/qemu-virt, its PL011 and its
//! virtio-mmio block and network devices); the host tests implement it with fakes.

use alloc::boxed::Box;
use core::fmt;

use hyp_core::sync::Mutex;
use vdev::pl011::ConsoleOutput;

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

/// What a request of the board's disk does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// From the disk into the buffers (VIRTIO_BLK_T_IN, virtio 1.2 5.2.6).
    Read,
    /// From the buffers onto the disk (VIRTIO_BLK_T_OUT).
    Write,
    /// What completed before is on the disk's medium (VIRTIO_BLK_T_FLUSH); no buffers.
    Flush,
}

/// The buffers of a request.
#[derive(Debug)]
pub enum DiskData<'a> {
    /// None (a flush).
    None,
    /// Runs of one VM's RAM. The runtime guarantees that they lie in the RAM of the VM the
    /// request is for and are whole sectors, and that the VM's RAM is neither zeroed,
    /// revoked nor given to another VM until the request's completion has been taken
    /// (`Hypervisor::drain_disk`). They may share memory (a guest may name a buffer twice):
    /// the disk hands them to its device as physical runs, never as Rust slices, so two of
    /// them over the same memory are two descriptors of it and nothing more.
    Guest(&'a [PhysicalRun]),
    /// The first `len` bytes (whole sectors) of a hypervisor buffer, which the disk owns
    /// while the request is in flight and gives back with its completion: nothing else can
    /// touch it meanwhile, and it is never freed under the disk.
    Bounce { buffer: Box<[u8]>, len: usize },
}

/// A request of the board's disk, for the VM with index `owner`.
#[derive(Debug)]
pub struct DiskRequest<'a> {
    pub owner: usize,
    pub op: DiskOp,
    /// The first sector (of the board's disk).
    pub sector: u64,
    pub data: DiskData<'a>,
}

/// Why the board's disk did not take a request; a bounce buffer comes back.
#[derive(Debug)]
pub struct Rejected {
    /// The disk's queue is full: the same request may be taken after a completion. Else
    /// the disk refuses it as it is (an error for the guest).
    pub full: bool,
    pub bounce: Option<Box<[u8]>>,
}

/// A request the board's disk finished.
#[derive(Debug)]
pub struct DiskCompletion {
    /// Whose request it was (`DiskRequest::owner`).
    pub owner: usize,
    /// The tag `BoardDisk::submit` gave it.
    pub tag: u16,
    pub result: Result<(), DiskError>,
    /// The request's bounce buffer, given back.
    pub bounce: Option<Box<[u8]>>,
}

/// The board's disk, in sectors of 512 bytes: a submission queue and its completions. A
/// request is queued and `submit` returns at once with its tag; the disk's interrupt
/// (`interrupt`) says that completions can be taken (`take_completed`), in any order.
/// Nothing of this waits for the disk.
pub trait BoardDisk: Send {
    /// Its size in sectors.
    fn capacity(&self) -> u64;

    /// How many requests it takes at once (the VMs share them: docs/virtio.md, "Locks").
    fn slots(&self) -> usize;

    /// The interrupt that says requests completed (an SPI the hypervisor owns); none: the
    /// runtime polls for completions.
    fn interrupt(&self) -> Option<u32>;

    /// Queues `request`; its tag, unique among the requests in flight.
    fn submit(&mut self, request: DiskRequest<'_>) -> Result<u16, Rejected>;

    /// Lowers the disk's interrupt line (before its completions are taken, so one that
    /// comes meanwhile raises it again).
    fn acknowledge_interrupt(&mut self);

    /// The next request the disk finished, if any.
    fn take_completed(&mut self) -> Option<DiskCompletion>;
}

/// The board's disk as the runtime reaches it: each call takes the disk's lock and releases
/// it before returning, and the board's code under it takes no other lock, so the disk's
/// lock is a leaf of the lock order (docs/architecture.md, "Lock order"): no guard of it
/// can be held while another lock is taken. A device submits under its own lock (the
/// device, then the disk); a completion is taken here and finished after, under the device's
/// lock alone.
pub struct DiskQueue<K: 'static>(&'static Mutex<K>);

impl<K: 'static> Clone for DiskQueue<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: 'static> Copy for DiskQueue<K> {}

impl<K: BoardDisk> DiskQueue<K> {
    pub fn new(disk: &'static Mutex<K>) -> Self {
        DiskQueue(disk)
    }
    pub fn capacity(&self) -> u64 {
        self.0.lock().capacity()
    }
    pub fn slots(&self) -> usize {
        self.0.lock().slots()
    }
    pub fn interrupt(&self) -> Option<u32> {
        self.0.lock().interrupt()
    }
    pub fn submit(&self, request: DiskRequest<'_>) -> Result<u16, Rejected> {
        self.0.lock().submit(request)
    }
    pub fn acknowledge_interrupt(&self) {
        self.0.lock().acknowledge_interrupt()
    }
    pub fn take_completed(&self) -> Option<DiskCompletion> {
        self.0.lock().take_completed()
    }
}
