//! The board's own virtio devices, which the hypervisor drives as a virtio driver (with the
//! `virtio-drivers` crate): a block device whose slices become the VMs' disks, and a network
//! device that is the virtual switch's uplink. On QEMU these are `virtio-blk-device` and
//! `virtio-net-device` on the `virt` board's virtio-mmio transports, backed by a host file
//! and by user-mode networking.
//!
//! The hypervisor's identity map covers all RAM, so a buffer's address is its physical
//! address: guest buffers are handed to the device as they are (no copy).

use core::ptr::NonNull;

use alloc::alloc::{alloc_zeroed, dealloc};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use hyp_core::platform::Platform;
use hyp_runtime::board::{BoardDisk, DiskError, PhysicalRun};
use spin::{Mutex, Once};
use virtio_drivers::device::blk::SECTOR_SIZE;
use virtio_drivers::device::net::VirtIONetRaw;
use virtio_drivers::queue::VirtQueue;
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

/// Descriptors of the board disk's request queue: a guest request's data buffers (at most
/// the guest device's SEG_MAX, 254) plus header and status fit in one chain.
const DISK_QUEUE: usize = 256;

/// virtio-blk request types (virtio 1.2, 5.2.6).
const VIRTIO_BLK_T_IN: u32 = 0;
const VIRTIO_BLK_T_OUT: u32 = 1;
const VIRTIO_BLK_T_FLUSH: u32 = 4;

/// The board's disk. The hypervisor drives its queue itself rather than through
/// `virtio-drivers`' block driver, which takes one buffer a request: a guest request, with
/// its scatter-gather list, then becomes one request of the board's disk.
pub struct HostDisk {
    transport: Transport0,
    queue: VirtQueue<IdentityHal, DISK_QUEUE>,
    capacity: u64,
    /// Its interrupt, which a request waits for (`wait_for_completion`).
    intid: Option<u32>,
    wait: InterruptWait,
}

/// How the board's drivers wait for a device's interrupt: the arch crate gives it (the
/// interrupt controller and WFI are the CPU's business).
#[derive(Clone, Copy)]
pub struct InterruptWait {
    /// Sets up SPI `intid` to be waited for.
    pub prepare: fn(u32),
    /// Waits on this CPU until the closure says done, woken by SPI `intid`.
    pub wait: fn(u32, &mut dyn FnMut() -> bool),
}

impl HostDisk {
    fn new(mut transport: Transport0, intid: Option<u32>, wait: InterruptWait) -> Result<Self, virtio_drivers::Error> {
        let features = transport.begin_init(
            BlockFeatures::FLUSH
                | BlockFeatures::RING_INDIRECT_DESC
                | BlockFeatures::RING_EVENT_IDX
                | BlockFeatures::VERSION_1,
        );
        // Configuration offsets 0 and 4: capacity in sectors, low and high halves (5.2.4).
        let capacity = transport.read_consistent(|| {
            let low: u32 = transport.read_config_space(0)?;
            let high: u32 = transport.read_config_space(4)?;
            Ok(u64::from(low) | u64::from(high) << 32)
        })?;
        let queue = VirtQueue::new(
            &mut transport,
            0,
            features.contains(BlockFeatures::RING_INDIRECT_DESC),
            features.contains(BlockFeatures::RING_EVENT_IDX),
        )?;
        transport.finish_init();
        Ok(HostDisk { transport, queue, capacity, intid, wait })
    }

    /// One request: the header, the data buffers (device-writable for a read), the status
    /// byte. Waits for the device to complete it.
    fn request(&mut self, kind: u32, sector: u64, data: &mut [&mut [u8]]) -> Result<(), DiskError> {
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&kind.to_le_bytes());
        header[8..].copy_from_slice(&sector.to_le_bytes());
        let mut status = [0xffu8];
        // The lists of buffers are allocated fallibly: out of heap is a failed request (the
        // guest gets an I/O error), not a panic with the disk's lock held.
        let done = if kind == VIRTIO_BLK_T_IN {
            let mut outputs: Vec<&mut [u8]> = Vec::new();
            outputs.try_reserve_exact(data.len() + 1).map_err(|_| DiskError)?;
            outputs.extend(data.iter_mut().map(|d| &mut **d));
            outputs.push(&mut status);
            self.add_wait_pop(&[&header], &mut outputs)
        } else {
            let mut inputs: Vec<&[u8]> = Vec::new();
            inputs.try_reserve_exact(data.len() + 1).map_err(|_| DiskError)?;
            inputs.push(&header);
            inputs.extend(data.iter().map(|d| &**d));
            self.add_wait_pop(&inputs, &mut [&mut status])
        };
        match (done, status[0]) {
            (Ok(_), 0) => Ok(()),
            _ => Err(DiskError),
        }
    }

    /// Hands the buffers to the device, waits until it has used them, takes them back.
    fn add_wait_pop<'a>(
        &mut self,
        inputs: &'a [&'a [u8]],
        outputs: &'a mut [&'a mut [u8]],
    ) -> Result<u32, virtio_drivers::Error> {
        // SAFETY: the buffers stay borrowed, untouched, until they are popped below, which
        // this function waits for.
        let token = unsafe { self.queue.add(inputs, outputs)? };
        if self.queue.should_notify() {
            self.transport.notify(0);
        }
        self.wait_for_completion();
        // SAFETY: the same buffers `add` was given for this token.
        unsafe { self.queue.pop_used(token, inputs, outputs) }
    }

    /// Waits until the device has used the request, in WFI woken by the disk's interrupt
    /// where there is one. Under QEMU each CPU is a host thread, and one spinning here takes
    /// a host core from QEMU's I/O threads, which do the request (docs/performance.md,
    /// "virtio throughput"); a guest with the disk to itself sleeps in WFI too.
    fn wait_for_completion(&mut self) {
        let Some(intid) = self.intid else {
            while !self.queue.can_pop() {
                core::hint::spin_loop();
            }
            return;
        };
        let queue = &self.queue;
        (self.wait.wait)(intid, &mut || queue.can_pop());
        // Lowers the device's level-sensitive line (InterruptStatus, virtio 1.2 4.2.2).
        let _ = self.transport.ack_interrupt();
    }

    /// Checks a transfer: non-empty buffers of whole sectors, within the disk.
    fn check(&self, sector: u64, buffers: &[&mut [u8]]) -> Result<(), DiskError> {
        let bytes: usize = buffers.iter().map(|b| b.len()).sum();
        let whole = buffers.iter().all(|b| !b.is_empty() && b.len().is_multiple_of(SECTOR_SIZE));
        let end = sector.checked_add((bytes / SECTOR_SIZE) as u64);
        if buffers.is_empty() || buffers.len() > DISK_QUEUE - 2 || !whole || end.is_none_or(|e| e > self.capacity) {
            return Err(DiskError);
        }
        Ok(())
    }
}

/// `runs` as the buffers of one request: built fallibly (out of heap is a failed request).
fn guest_buffers<'a>(runs: &[PhysicalRun]) -> Result<Vec<&'a mut [u8]>, DiskError> {
    let mut buffers = Vec::new();
    buffers.try_reserve_exact(runs.len()).map_err(|_| DiskError)?;
    for run in runs {
        // SAFETY: `BoardDisk` callers guarantee each run is RAM of one VM, identity-mapped at
        // EL2, and that no two runs share a byte. The slices alias memory the guest may change
        // at any time, so they are only handed to the disk, never read or interpreted here,
        // and they do not outlive the request.
        buffers.push(unsafe { core::slice::from_raw_parts_mut(run.pa as *mut u8, run.len as usize) });
    }
    Ok(buffers)
}

impl BoardDisk for HostDisk {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn read_to_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError> {
        let mut buffers = guest_buffers(runs)?;
        self.check(sector, &buffers)?;
        self.request(VIRTIO_BLK_T_IN, sector, &mut buffers)
    }

    fn write_from_guest(&mut self, sector: u64, runs: &[PhysicalRun]) -> Result<(), DiskError> {
        let mut buffers = guest_buffers(runs)?;
        self.check(sector, &buffers)?;
        self.request(VIRTIO_BLK_T_OUT, sector, &mut buffers)
    }

    fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let mut buffers = [buf];
        self.check(sector, &buffers)?;
        self.request(VIRTIO_BLK_T_IN, sector, &mut buffers)
    }

    fn write(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let mut buffers = [buf];
        self.check(sector, &buffers)?;
        self.request(VIRTIO_BLK_T_OUT, sector, &mut buffers)
    }

    /// Returns once what was written before is on the host file (QEMU flushes it).
    fn flush(&mut self) -> Result<(), DiskError> {
        self.request(VIRTIO_BLK_T_FLUSH, 0, &mut [])
    }
}

/// Descriptors of each of the uplink's queues, and the size of its buffers: the
/// virtio-net header and a frame of the board NIC's MTU, 1500 (it offers no other,
/// virtio 1.2 5.1.4), with room to spare. A longer frame is not sent: the network behind
/// the board's NIC would not carry it either.
const UPLINK_QUEUE: usize = 64;
const UPLINK_BUFFER: usize = 2048;

/// The board's NIC: the switch's way out. Frames are sent without waiting for the device:
/// a guest's transmit exit would otherwise wait for QEMU's main loop to take each frame (a
/// TCP acknowledgement included), where a guest with the NIC to itself goes on at once.
/// The buffers the device has taken stay here until it hands them back.
pub struct Uplink {
    net: VirtIONetRaw<IdentityHal, Transport0, UPLINK_QUEUE>,
    /// The receive buffers the device holds, by token (the head descriptor's index).
    receiving: [Option<Box<[u8]>>; UPLINK_QUEUE],
    /// The frames the device is sending, by token: the buffer and the bytes handed over.
    sending: [Option<(Box<[u8]>, usize)>; UPLINK_QUEUE],
    /// Transmit buffers the device gave back, for the next frames.
    spare: Vec<Box<[u8]>>,
    /// Its interrupt, which says frames arrived or were sent.
    pub intid: Option<u32>,
}

impl Uplink {
    fn new(transport: Transport0, intid: Option<u32>) -> Result<Self, virtio_drivers::Error> {
        let mut uplink = Uplink {
            net: VirtIONetRaw::new(transport)?,
            receiving: [const { None }; UPLINK_QUEUE],
            sending: [const { None }; UPLINK_QUEUE],
            spare: Vec::new(),
            intid,
        };
        for _ in 0..UPLINK_QUEUE {
            uplink.give_receive_buffer(alloc::vec![0u8; UPLINK_BUFFER].into_boxed_slice())?;
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
        let slot = self.receiving.get_mut(usize::from(token)).ok_or(virtio_drivers::Error::WrongToken)?;
        *slot = Some(buffer);
        Ok(())
    }

    /// Queues one Ethernet frame for sending; false if the device cannot take it or it is
    /// longer than a buffer holds.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        self.take_back_sent();
        while !self.net.can_send() && self.sending.iter().any(Option::is_some) {
            // Every descriptor is out: wait for the device to finish the oldest frames.
            core::hint::spin_loop();
            self.take_back_sent();
        }
        let mut buffer = self.spare.pop().unwrap_or_else(|| alloc::vec![0u8; UPLINK_BUFFER].into_boxed_slice());
        let header = self.net.fill_buffer_header(&mut buffer).ok();
        let Some(len) = header.map(|h| h + frame.len()).filter(|&len| len <= buffer.len()) else {
            self.spare.push(buffer);
            return false;
        };
        buffer[len - frame.len()..len].copy_from_slice(frame);
        // SAFETY: the buffer is kept in `sending` under its token, untouched, until the
        // device has used it (`take_back_sent`); its heap memory does not move with the Box.
        match unsafe { self.net.transmit_begin(&buffer[..len]) } {
            Ok(token) => match self.sending.get_mut(usize::from(token)) {
                Some(slot) => {
                    *slot = Some((buffer, len));
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
            let Some((buffer, len)) = self.sending.get_mut(usize::from(token)).and_then(Option::take) else { break };
            // SAFETY: the same buffer and length `transmit_begin` was given for this token.
            let _ = unsafe { self.net.transmit_complete(token, &buffer[..len]) };
            self.spare.push(buffer);
        }
    }

    /// The next received frame, copied out (its buffer goes straight back to the device).
    pub fn receive(&mut self, frame: &mut Vec<u8>) -> bool {
        let Some(token) = self.net.poll_receive() else { return false };
        let Some(mut buffer) = self.receiving.get_mut(usize::from(token)).and_then(Option::take) else { return false };
        // SAFETY: the same buffer `receive_begin` was given for this token.
        let Ok((header, len)) = (unsafe { self.net.receive_complete(token, &mut buffer) }) else { return false };
        frame.clear();
        frame.extend_from_slice(buffer.get(header..header + len).unwrap_or(&[]));
        self.give_receive_buffer(buffer).is_ok()
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
pub fn probe(platform: &Platform<'_>, wait: InterruptWait) -> Found {
    for t in &platform.virtio_mmio {
        let Some(header) = NonNull::new(t.window.base as *mut VirtIOHeader) else { continue };
        // SAFETY: the window is a virtio-mmio register block from the device tree, mapped as
        // Device memory by the EL2 identity map, and only this transport object uses it.
        let Ok(transport) = (unsafe { MmioTransport::new(header, t.window.size as usize) }) else { continue };
        match transport.device_type() {
            DeviceType::Block if DISK.get().is_none() => match HostDisk::new(transport, t.intid, wait) {
                Ok(disk) => {
                    if let Some(intid) = t.intid {
                        (wait.prepare)(intid);
                    }
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
    fn receive(&mut self, frame: &mut Vec<u8>) -> bool {
        Uplink::receive(self, frame)
    }
    fn interrupt(&self) -> Option<u32> {
        self.intid
    }
}
