//! A VM's virtio devices at run time: the `vdev-virtio` models behind the VM's virtio-mmio
//! windows, over the VM's RAM, with their backends: a slice of the board's disk, a port of
//! the virtual switch, the VM's console. Each device's interrupt is a level line into the
//! VM's vGIC (InterruptStatus != 0, virtio 1.2 section 4.2.3.4).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicBool, Ordering};

use hyp_core::bundle::DiskSlice;
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::{MmioDevice, MmioError};
use hyp_core::pl011::{ConsoleOutput, InterruptLine};
use hyp_core::syndrome::AccessWidth;
use spin::Mutex;
use vdev_virtio::block::{BlockBackend, BlockError, VirtioBlock};
use vdev_virtio::bounce::{self, Direction, Route, BOUNCE_BYTES};
use vdev_virtio::console::{ConsoleBackend, VirtioConsole};
use vdev_virtio::device::VirtioDevice;
use vdev_virtio::memory::{GuestMemory, GuestMemoryError, Segment};
use vdev_virtio::net::{NetBackend, VirtioNet};
use vdev_virtio::transport::{RegisterError, VirtioMmio};

use crate::console::VmConsole;
use crate::host_virtio;
use hyp_runtime::focus::TrackedConsole;

/// A VM's RAM as its devices see it: IPAs checked against the one RAM region its
/// capabilities map, then reached through the hypervisor's identity map.
#[derive(Clone, Copy, Debug)]
pub struct GuestRam {
    pub ipa: u64,
    pub pa: u64,
    pub size: u64,
}

impl GuestRam {
    /// The physical address of `[addr, addr + len)`, if all of it is this VM's RAM.
    fn pa_of(&self, addr: u64, len: u64) -> Result<u64, GuestMemoryError> {
        addr.checked_sub(self.ipa)
            .filter(|offset| offset.checked_add(len).is_some_and(|end| end <= self.size))
            .map(|offset| self.pa + offset)
            .ok_or(GuestMemoryError { addr, len })
    }
}

impl GuestMemory for GuestRam {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        let pa = self.pa_of(addr, buf.len() as u64)?;
        // SAFETY: `pa` is this VM's RAM, identity-mapped Normal memory, and not a Rust object:
        // the guest may write it concurrently, so what is read is treated as untrusted bytes.
        unsafe { core::ptr::copy_nonoverlapping(pa as *const u8, buf.as_mut_ptr(), buf.len()) };
        // What the driver published before (the ring index) is seen before what follows it
        // (the entries): the driver side's barrier pairs with this one (virtio 1.2, 2.7.13).
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        let pa = self.pa_of(addr, data.len() as u64)?;
        // Used elements are visible before the used index that publishes them.
        fence(Ordering::SeqCst);
        // SAFETY: as for `read`; the bytes written are the device's own.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), pa as *mut u8, data.len()) };
        Ok(())
    }

    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.pa_of(addr, len).map(|_| ())
    }
}

const SECTOR: u64 = 512;

/// A VM's disk: sectors `[first, first + count)` of the board's disk.
pub struct DiskSliceBackend {
    first: u64,
    count: u64,
    ram: GuestRam,
    id: [u8; 20],
    /// For requests whose buffers are not whole sectors: allocated once, with the VM, so a
    /// request's size never decides an allocation (vdev_virtio::bounce).
    bounce: Box<[u8]>,
}

impl DiskSliceBackend {
    /// The slice the manifest gives, checked against the board's disk.
    pub fn new(slice: DiskSlice, ram: GuestRam, vm: usize) -> Result<Self, &'static str> {
        let disk = host_virtio::DISK.get().ok_or("the board has no virtio disk for the VM's `disk`")?;
        let capacity = disk.lock().capacity();
        let first = slice.offset / SECTOR;
        let count = if slice.size == 0 { capacity.saturating_sub(first) } else { slice.size / SECTOR };
        if count == 0 || first.checked_add(count).is_none_or(|end| end > capacity) {
            return Err("the VM's `disk` slice does not fit in the board's disk");
        }
        let mut id = [0u8; 20];
        let name = alloc::format!("hyp-vm{vm}-disk");
        id[..name.len().min(20)].copy_from_slice(&name.as_bytes()[..name.len().min(20)]);
        let mut bounce = Vec::new();
        bounce.try_reserve_exact(BOUNCE_BYTES).map_err(|_| "no heap left for the disk's bounce buffer")?;
        bounce.resize(BOUNCE_BYTES, 0);
        Ok(DiskSliceBackend { first, count, ram, id, bounce: bounce.into_boxed_slice() })
    }

    /// Moves the request's data between the disk and the guest's buffers in one request of
    /// the board's disk: straight into the guest's buffers when each is whole sectors and no
    /// two overlap, through the bounce buffer a chunk at a time otherwise. The device model
    /// already bounded the request (seg_max, size_max); nothing here allocates more than a
    /// list of its buffers, and that fallibly and before the disk's lock is taken: a failure
    /// is an I/O error for the guest, never a panic with the lock held.
    fn transfer(&mut self, sector: u64, segments: &[Segment], write: bool) -> Result<(), BlockError> {
        let total: u64 = segments.iter().map(|s| u64::from(s.len)).sum();
        let sectors = total / SECTOR;
        if !total.is_multiple_of(SECTOR) || sector.checked_add(sectors).is_none_or(|end| end > self.count) {
            return Err(BlockError::OutOfRange { sector, sectors });
        }
        let at = self.first + sector;
        let board_disk = host_virtio::DISK.get().ok_or(BlockError::Io)?;
        if bounce::route(segments) == Route::Direct {
            // The list is built before the disk's lock is taken: nothing that can fail is
            // done while it is held.
            let mut buffers = Vec::new();
            buffers.try_reserve_exact(segments.len()).map_err(|_| BlockError::Io)?;
            for run in bounce::merge_adjacent(segments) {
                let pa = self.ram.pa_of(run.addr, u64::from(run.len)).map_err(BlockError::Memory)?;
                // SAFETY: `pa` is this VM's RAM (checked just above), identity-mapped at EL2,
                // and no two runs share a byte (`Route::Direct`: the segments are pairwise
                // disjoint, and a run is adjacent segments). The slices alias memory the guest
                // may change at any time, so they are only handed to the disk, never read or
                // interpreted here.
                buffers.push(unsafe { core::slice::from_raw_parts_mut(pa as *mut u8, run.len as usize) });
            }
            let mut disk = board_disk.lock();
            let done = if write { disk.write(at, &mut buffers) } else { disk.read(at, &mut buffers) };
            return done.map_err(|_| BlockError::Io);
        }
        let mut disk = board_disk.lock();
        let direction = if write { Direction::Write } else { Direction::Read };
        bounce::transfer(&self.ram, segments, at, &mut self.bounce, direction, |sector, chunk| {
            let done = if write { disk.write(sector, &mut [chunk]) } else { disk.read(sector, &mut [chunk]) };
            done.map_err(|_| BlockError::Io)
        })
    }
}

impl BlockBackend for DiskSliceBackend {
    fn capacity_sectors(&self) -> u64 {
        self.count
    }
    fn read_only(&self) -> bool {
        false
    }
    fn device_id(&self) -> [u8; 20] {
        self.id
    }
    fn read(&mut self, _mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        self.transfer(sector, segments, false)
    }
    fn write(&mut self, _mem: &dyn GuestMemory, sector: u64, segments: &[Segment]) -> Result<(), BlockError> {
        self.transfer(sector, segments, true)
    }
    fn flush(&mut self) -> Result<(), BlockError> {
        host_virtio::DISK.get().ok_or(BlockError::Io)?.lock().flush().map_err(|_| BlockError::Io)
    }
}

/// Frames a VM's NIC sent, held until its device lock is released: forwarding takes other
/// devices' locks, and holding two device locks at once could deadlock two VMs sending to
/// each other.
#[derive(Default)]
pub struct SwitchPort {
    outbox: Vec<Vec<u8>>,
    /// Bytes of the frames in `outbox`.
    bytes: usize,
}

/// What one exit may copy out of a guest's transmit queue: six maximum-size frames (or 256
/// small ones); the rest of the queue waits for the next exit (`NetBackend::ready`). Frames
/// are copied fallibly: with no heap left a frame is dropped and counted, never a panic.
const OUTBOX_BYTES: usize = 6 * vdev_virtio::net::MAX_FRAME;
const OUTBOX_FRAMES: usize = 256;

impl NetBackend for SwitchPort {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        let mut copy = Vec::new();
        if self.outbox.try_reserve(1).is_err() || copy.try_reserve_exact(frame.len()).is_err() {
            return false;
        }
        copy.extend_from_slice(frame);
        self.outbox.push(copy);
        self.bytes += frame.len();
        true
    }

    fn ready(&self) -> bool {
        self.outbox.len() < OUTBOX_FRAMES && self.bytes + vdev_virtio::net::MAX_FRAME <= OUTBOX_BYTES
    }
}

/// A VM's virtio console: what the guest writes goes to its console beside the PL011's.
pub struct ConsoleBridge(pub TrackedConsole<VmConsole>);

impl ConsoleBackend for ConsoleBridge {
    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.0.put(b));
    }
}

/// Work a device leaves for after its lock is released.
pub trait AfterAccess {
    /// Frames for the switch.
    fn take_frames(&mut self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}
impl AfterAccess for VirtioBlock<DiskSliceBackend> {}
impl AfterAccess for VirtioConsole<ConsoleBridge> {}
impl AfterAccess for VirtioNet<SwitchPort> {
    fn take_frames(&mut self) -> Vec<Vec<u8>> {
        let port = self.backend_mut();
        port.bytes = 0;
        core::mem::take(&mut port.outbox)
    }
}

/// One virtio device of a VM, shared by its MMIO window and whatever feeds it from outside
/// (the switch, console input). Lock order: the VM's bus, then this device, then the vGIC;
/// never two devices at once.
pub struct VirtioSlot<D: VirtioDevice> {
    pub vm: usize,
    pub name: &'static str,
    /// The VM's limit on the lines its guest causes (the device's incidents are some).
    log: Arc<GuestLogLimit>,
    /// This device left work for later; `work` is the VM's flag for any of its devices.
    pending: AtomicBool,
    work: Arc<AtomicBool>,
    pub device: Mutex<VirtioMmio<D>>,
    pub ram: GuestRam,
    line: Mutex<crate::vm::VgicLine>,
    level: AtomicBool,
    /// Set (under the device lock) when the VM is destroyed: the device touches its RAM no
    /// more, whoever still holds it.
    shut_down: AtomicBool,
    /// The switch port of a NIC.
    pub port: usize,
}

pub type Shared<D> = Arc<VirtioSlot<D>>;

/// What every virtio device of a VM is built with.
pub struct SlotSetup {
    pub vm: usize,
    pub name: &'static str,
    pub ram: GuestRam,
    pub line: crate::vm::VgicLine,
    pub log: Arc<GuestLogLimit>,
    /// Set when one of the VM's devices left work for later (the VM's next exit does it).
    pub work: Arc<AtomicBool>,
}

impl<D: VirtioDevice + AfterAccess> VirtioSlot<D> {
    pub fn new(setup: SlotSetup, device: D, port: usize) -> Self {
        let SlotSetup { vm, name, ram, line, log, work } = setup;
        VirtioSlot {
            vm,
            name,
            log,
            pending: AtomicBool::new(false),
            work,
            device: Mutex::new(VirtioMmio::new(device)),
            ram,
            line: Mutex::new(line),
            level: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            port,
        }
    }

    /// Runs `f` on the device, then does what it left: the interrupt line follows the
    /// device's level, the incidents are logged, frames go to the switch. Nothing runs once
    /// the device is shut down.
    pub fn with_device<R>(&self, f: impl FnOnce(&mut VirtioMmio<D>, &GuestRam) -> R) -> Option<R> {
        let (result, level, incidents, frames) = {
            let mut device = self.device.lock();
            if self.shut_down.load(Ordering::Acquire) {
                return None;
            }
            let result = f(&mut device, &self.ram);
            let pending = device.has_pending_work();
            self.pending.store(pending, Ordering::Release);
            if pending {
                self.work.store(true, Ordering::Release);
            }
            let frames = device.device_mut().take_frames();
            (result, device.interrupt_level(), device.take_incidents(), frames)
        };
        if self.level.swap(level, Ordering::AcqRel) != level {
            self.line.lock().set_level(level);
        }
        for incident in incidents {
            crate::vm::guest_line(
                &self.log,
                format_args!("hypervisor: vm{} virtio-{}: {incident}", self.vm, self.name),
            );
        }
        for frame in frames {
            crate::network::forward(self.port, &frame);
        }
        Some(result)
    }

    /// Goes on with work the device left for later (a bounded notify), if it did.
    pub fn continue_work(&self) {
        if self.pending.load(Ordering::Acquire) {
            let _ = self.with_device(|d, ram| d.continue_work(ram));
        }
    }

    /// The VM is being destroyed: once this returns, the device never touches its RAM.
    pub fn shut_down(&self) {
        let _device = self.device.lock();
        self.shut_down.store(true, Ordering::Release);
    }

    /// After a VM reset: the device as at power-on, its line low.
    pub fn reset(&self) {
        let _ = self.with_device(|d, _| d.reset());
    }
}

/// The bus's error for a register error of an access of `width` (a data abort for the guest).
fn mmio_error(e: RegisterError, width: AccessWidth) -> MmioError {
    match e {
        RegisterError::NoRegister { offset } => MmioError::NoRegister { offset },
        RegisterError::BadWidth { offset, .. } => MmioError::BadWidth { offset, width },
        RegisterError::ReadOnly { offset } => MmioError::ReadOnly { offset },
        RegisterError::WriteOnly { offset } => MmioError::WriteOnly { offset },
    }
}

/// The MMIO window of a virtio device on the VM's bus.
pub struct Window<D: VirtioDevice>(pub Shared<D>);

impl<D: VirtioDevice + AfterAccess + Send> MmioDevice for Window<D> {
    fn name(&self) -> &'static str {
        self.0.name
    }
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        // Through `with_device`, as a write, so an incident a read causes (a legacy register)
        // is logged at once.
        self.0
            .with_device(|d, _| d.read(offset, width.bytes() as u8))
            .unwrap_or(Ok(0))
            .map_err(|e| mmio_error(e, width))
    }
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        // A shut-down device belongs to a VM whose vCPUs have stopped: no access reaches it.
        self.0
            .with_device(|d, ram| d.write(ram, offset, width.bytes() as u8, value))
            .unwrap_or(Ok(()))
            .map_err(|e| mmio_error(e, width))
    }
}
