//! The board's own virtio devices, which the hypervisor drives as a virtio driver (with the
//! `virtio-drivers` crate): a block device whose slices become the VMs' disks, and a network
//! device that is the virtual switch's uplink. On QEMU these are `virtio-blk-device` and
//! `virtio-net-device` on the `virt` board's virtio-mmio transports, backed by a host file
//! and by user-mode networking.
//!
//! The hypervisor's identity map covers all RAM, so a buffer's address is its physical
//! address: guest buffers are handed to the device as they are (no copy). Neither device is
//! waited for: a disk request is queued and its completion taken after the disk's interrupt
//! (hyp_runtime::board::BoardDisk), a frame is queued and its buffer taken back later.

use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

use alloc::alloc::{alloc_zeroed, dealloc};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use hyp_core::platform::Platform;
use hyp_core::sync::Mutex;
use hyp_runtime::board::{BoardDisk, DiskCompletion, DiskData, DiskError, DiskOp, DiskRequest, Rejected};
use hyp_runtime::network::ReceivedFrame;
use spin::Once;
use vdev::virtio::driver_queue::{DriverQueue, Part, QueueError, QueueLayout, RingMemory};
use virtio_drivers::device::blk::SECTOR_SIZE;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};
use virtio_drivers::{BufferDirection, PhysAddr, PAGE_SIZE};

/// DMA memory and address translation for `virtio-drivers`: heap pages, identity-mapped.
pub struct IdentityHal;

fn pages_layout(pages: usize) -> Option<Layout> {
    Layout::from_size_align(pages.checked_mul(PAGE_SIZE)?, PAGE_SIZE).ok()
}

// SAFETY: `dma_alloc` returns zeroed, page-aligned heap memory that nothing else uses until
// `dma_dealloc`; the identity map makes every pointer its own physical address, and the
// board's virtio devices are cache-coherent (QEMU's `virt` device tree marks them
// `dma-coherent`), so sharing needs no copy or cache maintenance.
unsafe impl virtio_drivers::Hal for IdentityHal {
    fn dma_alloc(pages: usize, _direction: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let ptr = pages_layout(pages).and_then(|layout| {
            // SAFETY: the layout has a non-zero size (virtio-drivers asks for at least a page).
            NonNull::new(unsafe { alloc_zeroed(layout) })
        });
        match ptr {
            Some(p) => (p.as_ptr() as PhysAddr, p),
            // virtio-drivers has no error path here: its callers check for a zero address.
            None => (0, NonNull::dangling()),
        }
    }

    unsafe fn dma_dealloc(_paddr: PhysAddr, vaddr: NonNull<u8>, pages: usize) -> i32 {
        if let Some(layout) = pages_layout(pages) {
            // SAFETY: the caller passes what `dma_alloc(pages)` returned.
            unsafe { dealloc(vaddr.as_ptr(), layout) };
        }
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).unwrap_or(NonNull::dangling())
    }

    unsafe fn share(buffer: NonNull<[u8]>, _direction: BufferDirection) -> PhysAddr {
        buffer.as_ptr() as *mut u8 as PhysAddr
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}
}

type Transport0 = MmioTransport<'static>;

bitflags::bitflags! {
    /// The block feature bits the hypervisor's driver accepts (virtio 1.2, 5.2.3 and 6).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct BlockFeatures: u64 {
        const FLUSH = 1 << 9;
        const RING_INDIRECT_DESC = 1 << 28;
        const RING_EVENT_IDX = 1 << 29;
        const VERSION_1 = 1 << 32;
    }
}

/// virtio-blk request types (virtio 1.2, 5.2.6).
const VIRTIO_BLK_T_IN: u32 = 0;
const VIRTIO_BLK_T_OUT: u32 = 1;
const VIRTIO_BLK_T_FLUSH: u32 = 4;

/// Descriptors of the board disk's ring, and of each request's indirect table: a guest
/// request's data buffers (at most the guest device's SEG_MAX, 254) plus header and status
/// fit in one table.
const DISK_QUEUE: u16 = 256;

/// Requests in flight on the board's disk at once, all VMs together (each VM has an equal
/// share: docs/virtio.md, "Locks"). Each takes one descriptor of the ring and the indirect
/// table of its slot (vdev::virtio::driver_queue), reserved at boot.
const DISK_SLOTS: u16 = 32;

/// The memory of the board disk's queue: zeroed heap pages, identity-mapped, shared with the
/// device; every access a volatile one of its width.
struct DmaRing {
    base: NonNull<u8>,
    layout: Layout,
}

impl DmaRing {
    fn new(bytes: usize) -> Option<Self> {
        let layout = Layout::from_size_align(bytes, PAGE_SIZE).ok().filter(|l| l.size() != 0)?;
        // SAFETY: the layout has a non-zero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(DmaRing { base, layout })
    }

    /// The address of `offset`, if an access of `width` bytes there lies in the memory and
    /// is aligned to its width.
    fn at(&self, offset: usize, width: usize) -> Option<*mut u8> {
        let inside = offset.checked_add(width).is_some_and(|end| end <= self.layout.size());
        // SAFETY: `offset` is within the allocation (checked just before).
        (inside && offset.is_multiple_of(width)).then(|| unsafe { self.base.as_ptr().add(offset) })
    }
}

impl Drop for DmaRing {
    fn drop(&mut self) {
        // SAFETY: the memory `new` allocated with this layout. The disk is never dropped while
        // its device may use the queue (`HostDisk::new` fails before handing it to the device).
        unsafe { dealloc(self.base.as_ptr(), self.layout) };
    }
}

// SAFETY (of each volatile access below): `at` returned an address inside the allocation,
// aligned to the access's width; the memory is plain RAM this queue owns, which no Rust
// reference covers, and which only the device touches besides.
impl RingMemory for DmaRing {
    fn read_u16(&self, offset: usize) -> u16 {
        // SAFETY: as said above the impl.
        self.at(offset, 2).map_or(0, |p| u16::from_le(unsafe { p.cast::<u16>().read_volatile() }))
    }
    fn read_u32(&self, offset: usize) -> u32 {
        // SAFETY: as said above the impl.
        self.at(offset, 4).map_or(0, |p| u32::from_le(unsafe { p.cast::<u32>().read_volatile() }))
    }
    fn write_u16(&self, offset: usize, value: u16) {
        if let Some(p) = self.at(offset, 2) {
            // SAFETY: as said above the impl.
            unsafe { p.cast::<u16>().write_volatile(value.to_le()) }
        }
    }
    fn write_u32(&self, offset: usize, value: u32) {
        if let Some(p) = self.at(offset, 4) {
            // SAFETY: as said above the impl.
            unsafe { p.cast::<u32>().write_volatile(value.to_le()) }
        }
    }
    fn write_u64(&self, offset: usize, value: u64) {
        if let Some(p) = self.at(offset, 8) {
            // SAFETY: as said above the impl.
            unsafe { p.cast::<u64>().write_volatile(value.to_le()) }
        }
    }
    fn write_descriptor(&self, offset: usize, addr: u64, len: u32, flags: u16, next: u16) {
        if let Some(p) = self.at(offset, 16) {
            // SAFETY: as said above the impl, for the 16 bytes at `p` (aligned to 16, so each
            // field is aligned to its width).
            unsafe {
                p.cast::<u64>().write_volatile(addr.to_le());
                p.add(8).cast::<u32>().write_volatile(len.to_le());
                p.add(12).cast::<u16>().write_volatile(flags.to_le());
                p.add(14).cast::<u16>().write_volatile(next.to_le());
            }
        }
    }
    fn fence(&self) {
        // The device is cache-coherent (QEMU's `virt` marks it `dma-coherent`): a barrier
        // of the inner shareable domain orders the accesses as it sees them.
        fence(Ordering::SeqCst);
    }
    fn address(&self) -> u64 {
        self.base.as_ptr() as u64
    }
}

// SAFETY: the ring's memory is owned by the disk, which the hypervisor keeps behind a lock.
unsafe impl Send for DmaRing {}

/// One request in flight on the board's disk: its header and status byte (heap memory that
/// does not move while the device reads and writes it), and the bounce buffer it was given,
/// kept until its completion is taken.
struct Flight {
    owner: usize,
    header: Box<[u8; 16]>,
    status: Box<[u8; 1]>,
    /// The bounce buffer the disk owns while the request is in flight.
    bounce: Option<Box<[u8]>>,
}

/// The board's disk. The hypervisor drives its queue itself (vdev::virtio::driver_queue)
/// rather than through `virtio-drivers`' block driver, which takes one buffer a request and
/// waits for it: a guest request, with its scatter-gather list, becomes one request of the
/// board's disk, its buffers written into the descriptors of its slot's table as physical
/// runs, queued without waiting (hyp_runtime::board::BoardDisk); its interrupt says
/// requests completed.
pub struct HostDisk {
    transport: Transport0,
    queue: DriverQueue<DmaRing>,
    capacity: u64,
    /// Its interrupt: the hypervisor routes it (hyp_runtime::interrupts::Route::Disk).
    intid: Option<u32>,
    /// The request in each slot of the queue.
    flights: Vec<Flight>,
}

/// Why the board's disk cannot be used.
enum DiskSetupError {
    Transport(virtio_drivers::Error),
    /// The device does not offer indirect descriptors (VIRTIO_F_INDIRECT_DESC), on which the
    /// queue's layout rests, or a queue as long as the hypervisor's.
    Lacks(&'static str),
    Queue(QueueError),
    /// No heap memory for the queue.
    NoMemory,
}

impl core::fmt::Display for DiskSetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DiskSetupError::Transport(e) => write!(f, "{e}"),
            DiskSetupError::Lacks(what) => write!(f, "the device lacks {what}, which the hypervisor's driver needs"),
            DiskSetupError::Queue(e) => write!(f, "{e}"),
            DiskSetupError::NoMemory => write!(f, "no heap memory for its queue"),
        }
    }
}

impl From<virtio_drivers::Error> for DiskSetupError {
    fn from(e: virtio_drivers::Error) -> Self {
        DiskSetupError::Transport(e)
    }
}

impl HostDisk {
    fn new(mut transport: Transport0, intid: Option<u32>) -> Result<Self, DiskSetupError> {
        let features = transport.begin_init(
            BlockFeatures::FLUSH
                | BlockFeatures::RING_INDIRECT_DESC
                | BlockFeatures::RING_EVENT_IDX
                | BlockFeatures::VERSION_1,
        );
        if !features.contains(BlockFeatures::RING_INDIRECT_DESC) {
            return Err(DiskSetupError::Lacks("indirect descriptors (VIRTIO_F_INDIRECT_DESC)"));
        }
        // Configuration offsets 0 and 4: capacity in sectors, low and high halves (5.2.4).
        let capacity = transport.read_consistent(|| {
            let low: u32 = transport.read_config_space(0)?;
            let high: u32 = transport.read_config_space(4)?;
            Ok(u64::from(low) | u64::from(high) << 32)
        })?;
        if transport.queue_used(0) || transport.max_queue_size(0) < u32::from(DISK_QUEUE) {
            return Err(DiskSetupError::Lacks("a request queue of 256 descriptors"));
        }
        let layout = QueueLayout::new(DISK_QUEUE, DISK_SLOTS, DISK_QUEUE).map_err(DiskSetupError::Queue)?;
        let ring = DmaRing::new(layout.bytes()).ok_or(DiskSetupError::NoMemory)?;
        let queue = DriverQueue::new(ring, layout, features.contains(BlockFeatures::RING_EVENT_IDX));
        let (descriptors, driver_area, device_area) = queue.areas();
        transport.queue_set(0, u32::from(DISK_QUEUE), descriptors, driver_area, device_area);
        transport.finish_init();
        let flights = (0..DISK_SLOTS)
            .map(|_| Flight { owner: 0, header: Box::new([0; 16]), status: Box::new([0xff]), bounce: None })
            .collect();
        Ok(HostDisk { transport, queue, capacity, intid, flights })
    }

    /// Checks a transfer: non-empty buffers of whole sectors, within the disk, in one pass.
    fn check(&self, sector: u64, lens: impl Iterator<Item = usize>) -> bool {
        let (mut count, mut sectors, mut whole) = (0usize, 0u64, true);
        for len in lens {
            count += 1;
            sectors += (len / SECTOR_SIZE) as u64;
            whole &= len != 0 && len.is_multiple_of(SECTOR_SIZE);
        }
        let end = sector.checked_add(sectors);
        count != 0 && count <= usize::from(DISK_QUEUE) - 2 && whole && end.is_some_and(|e| e <= self.capacity)
    }
}

impl BoardDisk for HostDisk {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn slots(&self) -> usize {
        usize::from(DISK_SLOTS)
    }

    fn interrupt(&self) -> Option<u32> {
        self.intid
    }

    /// Queues the request (header, buffers, status byte) and notifies the device if its
    /// event index asks for it; returns at once with the request's slot as its tag. The
    /// buffers are handed to the device as physical runs, never made Rust slices: a guest
    /// run is RAM of the request's VM, kept for it until the completion is taken (the
    /// `DiskData::Guest` contract), and the bounce buffer stays in the flight, untouched,
    /// until then.
    fn submit(&mut self, request: DiskRequest<'_>) -> Result<u16, Rejected> {
        let DiskRequest { owner, op, sector, data } = request;
        let (runs, bounce) = match data {
            DiskData::None => (&[][..], None),
            DiskData::Guest(runs) => (runs, None),
            DiskData::Bounce { buffer, len } => (&[][..], Some((buffer, len))),
        };
        let refuse = |bounce: Option<(Box<[u8]>, usize)>, full| Err(Rejected { full, bounce: bounce.map(|b| b.0) });
        let valid = match (op, &bounce) {
            (DiskOp::Flush, None) => runs.is_empty(),
            (DiskOp::Flush, Some(_)) => false,
            (_, None) => self.check(sector, runs.iter().map(|r| r.len as usize)),
            (_, Some((buffer, len))) => *len <= buffer.len() && self.check(sector, core::iter::once(*len)),
        };
        if !valid {
            return refuse(bounce, false);
        }
        let Some(slot) = (0..DISK_SLOTS).find(|&s| self.queue.is_free(s)) else { return refuse(bounce, true) };
        let kind = match op {
            DiskOp::Read => VIRTIO_BLK_T_IN,
            DiskOp::Write => VIRTIO_BLK_T_OUT,
            DiskOp::Flush => VIRTIO_BLK_T_FLUSH,
        };
        let HostDisk { transport, queue, flights, .. } = self;
        let flight = &mut flights[usize::from(slot)];
        flight.header[..4].copy_from_slice(&kind.to_le_bytes());
        flight.header[4..8].fill(0);
        flight.header[8..].copy_from_slice(&sector.to_le_bytes());
        flight.status[0] = 0xff;
        flight.owner = owner;
        let device_writes = op == DiskOp::Read;
        let header = Part { addr: flight.header.as_ptr() as u64, len: 16, device_writes: false };
        let data = runs.iter().map(|r| Part { addr: r.pa, len: r.len, device_writes });
        let bounce_part =
            bounce.as_ref().map(|(buffer, len)| Part { addr: buffer.as_ptr() as u64, len: *len as u32, device_writes });
        let status = Part { addr: flight.status.as_mut_ptr() as u64, len: 1, device_writes: true };
        let notify = match queue.publish(slot, header, data.chain(bounce_part), status) {
            Ok(notify) => notify,
            Err(_) => return refuse(bounce, false),
        };
        flight.bounce = bounce.map(|b| b.0);
        if notify {
            transport.notify(0);
        }
        Ok(slot)
    }

    /// Lowers the device's level-sensitive line (InterruptStatus, virtio 1.2 4.2.2).
    fn acknowledge_interrupt(&mut self) {
        let _ = self.transport.ack_interrupt();
    }

    /// The next request on the used ring, its status byte read.
    fn take_completed(&mut self) -> Option<DiskCompletion> {
        let strays = self.queue.strays();
        let used = self.queue.take_used();
        if self.queue.strays() != strays {
            println!(
                "hypervisor: the board's disk returned {} request(s) it was not given: skipped ({} so far)",
                self.queue.strays() - strays,
                self.queue.strays()
            );
        }
        let used = used?;
        let flight = self.flights.get_mut(usize::from(used.slot))?;
        // SAFETY: the flight's own status byte, which the device wrote (the used element
        // came after it) and which nothing else references now; read volatile, as the
        // compiler cannot see the device's write.
        let status = unsafe { flight.status.as_ptr().read_volatile() };
        let result = if status == 0 { Ok(()) } else { Err(DiskError) };
        Some(DiskCompletion { owner: flight.owner, tag: used.slot, result, bounce: flight.bounce.take() })
    }
}

/// Descriptors of each of the uplink's queues, and the size of its buffers: the
/// virtio-net header and a frame of the board NIC's MTU, 1500 (it offers no other,
/// virtio 1.2 5.1.4), with room to spare. A longer frame is not sent: the network behind
/// the board's NIC would not carry it either.
const UPLINK_QUEUE: usize = 64;
const UPLINK_BUFFER: usize = 2048;
/// Where a frame to send starts in its buffer, its device header just before it: a frame
/// that starts aligned (a VM's, copied out of its transmit queue) is copied to an aligned
/// place, where the library's copy moves 16 bytes a step; after a 12-byte header at the
/// buffer's start it moves a byte a step (the image's targets are strict-align).
const SEND_FRAME_AT: usize = 16;

/// The board's NIC: the switch's way out. Frames are sent without waiting for the device:
/// a guest's transmit exit would otherwise wait for QEMU's main loop to take each frame (a
/// TCP acknowledgement included), where a guest with the NIC to itself goes on at once.
/// The buffers the device has taken stay here until it hands them back.
pub struct Uplink {
    net: VirtIONetRaw<IdentityHal, Transport0, UPLINK_QUEUE>,
    /// The receive buffers the device holds, by token (the head descriptor's index).
    receiving: [Option<Box<[u8]>>; UPLINK_QUEUE],
    /// The frames the device is sending, by token: the buffer and where the bytes handed
    /// over end (they start at `send_header_at`).
    sending: [Option<(Box<[u8]>, usize)>; UPLINK_QUEUE],
    /// Where a frame's header starts in a transmit buffer: its length before `SEND_FRAME_AT`.
    send_header_at: usize,
    /// Transmit buffers the device does not hold, for the next frames: all of them are
    /// allocated with the uplink, one per descriptor, and this list never grows past them.
    spare: Vec<Box<[u8]>>,
    /// Its interrupt, which says frames arrived or were sent.
    pub intid: Option<u32>,
}

impl Uplink {
    fn new(transport: Transport0, intid: Option<u32>) -> Result<Self, virtio_drivers::Error> {
        let net = VirtIONetRaw::new(transport)?;
        let header = net.fill_buffer_header(&mut [0u8; SEND_FRAME_AT])?;
        let mut uplink = Uplink {
            send_header_at: SEND_FRAME_AT - header,
            net,
            receiving: [const { None }; UPLINK_QUEUE],
            sending: [const { None }; UPLINK_QUEUE],
            spare: Vec::with_capacity(UPLINK_QUEUE),
            intid,
        };
        // Every buffer now, so that no frame a guest sends allocates (an allocation that
        // fails on a guest's path would stop the hypervisor).
        for _ in 0..UPLINK_QUEUE {
            uplink.give_receive_buffer(alloc::vec![0u8; UPLINK_BUFFER].into_boxed_slice())?;
            uplink.spare.push(alloc::vec![0u8; UPLINK_BUFFER].into_boxed_slice());
        }
        Ok(uplink)
    }

    pub fn mac(&self) -> [u8; 6] {
        self.net.mac_address()
    }

    fn give_receive_buffer(&mut self, mut buffer: Box<[u8]>) -> Result<(), virtio_drivers::Error> {
        // SAFETY: the buffer is kept in `receiving` under its token, untouched, until the
        // device has used it (`receive`); its heap memory does not move with the Box.
        let token = unsafe { self.net.receive_begin(&mut buffer)? };
        match self.receiving.get_mut(usize::from(token)) {
            Some(slot) => {
                *slot = Some(buffer);
                Ok(())
            }
            // A token beyond the queue cannot come from the driver; the buffer is leaked
            // rather than freed under the device.
            None => {
                core::mem::forget(buffer);
                Err(virtio_drivers::Error::WrongToken)
            }
        }
    }

    /// Queues one Ethernet frame for sending; false if the device cannot take it or it is
    /// longer than a buffer holds.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        self.take_back_sent();
        while !self.net.can_send() && self.sending.iter().any(Option::is_some) {
            // Every descriptor is out: wait for the device to finish the oldest frames.
            hyp_core::sync::wait_step();
            self.take_back_sent();
        }
        // With a descriptor free, a buffer is (there are as many of each).
        let Some(mut buffer) = self.spare.pop() else { return false };
        let (start, end) = (self.send_header_at, SEND_FRAME_AT + frame.len());
        let header = buffer.get_mut(start..).map(|b| self.net.fill_buffer_header(b));
        if end > buffer.len() || !matches!(header, Some(Ok(_))) {
            self.spare.push(buffer);
            return false;
        }
        buffer[SEND_FRAME_AT..end].copy_from_slice(frame);
        // SAFETY: the buffer is kept in `sending` under its token, untouched, until the
        // device has used it (`take_back_sent`); its heap memory does not move with the Box.
        match unsafe { self.net.transmit_begin(&buffer[start..end]) } {
            Ok(token) => match self.sending.get_mut(usize::from(token)) {
                Some(slot) => {
                    *slot = Some((buffer, end));
                    true
                }
                // A token beyond the queue cannot come from the driver; the buffer is leaked
                // rather than freed under the device.
                None => {
                    core::mem::forget(buffer);
                    false
                }
            },
            Err(_) => {
                self.spare.push(buffer);
                false
            }
        }
    }

    /// Takes back the buffers of the frames the device has sent.
    pub fn take_back_sent(&mut self) {
        while let Some(token) = self.net.poll_transmit() {
            let Some((buffer, end)) = self.sending.get_mut(usize::from(token)).and_then(Option::take) else { break };
            // SAFETY: the same bytes of the same buffer `transmit_begin` was given for this
            // token.
            let _ = unsafe { self.net.transmit_complete(token, &buffer[self.send_header_at..end]) };
            self.spare.push(buffer);
        }
    }

    /// The next received frame, in its buffer, which the device no longer holds. A buffer
    /// the device used for less than a frame's header holds no frame: it goes back to the
    /// device at once, so the device keeps every receive buffer.
    pub fn receive(&mut self) -> Option<ReceivedFrame> {
        loop {
            let token = self.net.poll_receive()?;
            let mut buffer = self.receiving.get_mut(usize::from(token)).and_then(Option::take)?;
            // SAFETY: the same buffer `receive_begin` was given for this token.
            match unsafe { self.net.receive_complete(token, &mut buffer) } {
                Ok((header, len)) => return Some(ReceivedFrame { buffer, frame: header..header + len }),
                // The used buffer was taken off the queue (the only failure after it).
                Err(virtio_drivers::Error::IoError) => self.give_receive_buffer(buffer).ok()?,
                Err(_) => return None,
            }
        }
    }

    /// A received frame's buffer, back to the device for the next frame.
    pub fn give_back(&mut self, received: ReceivedFrame) -> bool {
        self.give_receive_buffer(received.buffer).is_ok()
    }

    pub fn acknowledge_interrupt(&mut self) {
        let _ = self.net.ack_interrupt();
    }
}

pub static DISK: Once<Mutex<HostDisk>> = Once::new();
pub static UPLINK: Once<Mutex<Uplink>> = Once::new();

/// What `probe` found, for the banner.
pub struct Found {
    pub disk_sectors: Option<u64>,
    pub uplink_mac: Option<[u8; 6]>,
}

/// Looks at every virtio-mmio transport of the board and takes the first block and the
/// first network device. Transports with no device behind them (QEMU's spare ones) are
/// skipped.
pub fn probe(platform: &Platform<'_>) -> Found {
    for t in &platform.virtio_mmio {
        let Some(header) = NonNull::new(t.window.base as *mut VirtIOHeader) else { continue };
        // SAFETY: the window is a virtio-mmio register block from the device tree, mapped as
        // Device memory by the EL2 identity map, and only this transport object uses it.
        let Ok(transport) = (unsafe { MmioTransport::new(header, t.window.size as usize) }) else { continue };
        match transport.device_type() {
            DeviceType::Block if DISK.get().is_none() => match HostDisk::new(transport, t.intid) {
                Ok(disk) => {
                    DISK.call_once(|| Mutex::new(disk));
                }
                Err(e) => println!("hypervisor: the virtio disk at {} cannot be used: {e}", t.window),
            },
            DeviceType::Network if UPLINK.get().is_none() => match Uplink::new(transport, t.intid) {
                Ok(uplink) => {
                    UPLINK.call_once(|| Mutex::new(uplink));
                }
                Err(e) => println!("hypervisor: the virtio NIC at {} cannot be used: {e}", t.window),
            },
            _ => {}
        }
    }
    Found { disk_sectors: DISK.get().map(|d| d.lock().capacity()), uplink_mac: UPLINK.get().map(|u| u.lock().mac()) }
}

/// `probe`, and the lines the boot log gives what it found: the disk's size in sectors.
pub fn probe_and_report(platform: &Platform<'_>) -> Option<u64> {
    let found = probe(platform);
    if let Some(sectors) = found.disk_sectors {
        println!("hypervisor: virtio disk of {} MiB (the VMs' disks are slices of it)", sectors >> 11);
    }
    if let Some(mac) = found.uplink_mac {
        println!("hypervisor: virtio NIC {} (the virtual switch's uplink)", vdev::virtio::switch::Mac(&mac));
    }
    found.disk_sectors
}

impl hyp_runtime::network::BoardNic for Uplink {
    fn send(&mut self, frame: &[u8]) -> bool {
        Uplink::send(self, frame)
    }
    fn acknowledge_interrupt(&mut self) {
        Uplink::acknowledge_interrupt(self);
    }
    fn take_back_sent(&mut self) {
        Uplink::take_back_sent(self);
    }
    fn receive(&mut self) -> Option<ReceivedFrame> {
        Uplink::receive(self)
    }
    fn give_back(&mut self, received: ReceivedFrame) -> bool {
        Uplink::give_back(self, received)
    }
    fn interrupt(&self) -> Option<u32> {
        self.intid
    }
}
