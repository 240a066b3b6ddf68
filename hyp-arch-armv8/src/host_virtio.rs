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
use core::alloc::Layout;
use hyp_core::platform::Platform;
use spin::{Mutex, Once};
use virtio_drivers::device::blk::{VirtIOBlk, SECTOR_SIZE};
use virtio_drivers::device::net::VirtIONet;
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

/// The board's disk.
pub struct HostDisk {
    blk: VirtIOBlk<IdentityHal, Transport0>,
}

/// The board's disk refused or failed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskError;

impl HostDisk {
    /// Sectors of 512 bytes.
    pub fn capacity(&self) -> u64 {
        self.blk.capacity()
    }

    /// Reads sectors from `sector` into `buf` (a non-empty multiple of 512 bytes).
    pub fn read(&mut self, sector: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        if buf.is_empty() || !buf.len().is_multiple_of(SECTOR_SIZE) {
            return Err(DiskError);
        }
        self.blk.read_blocks(sector as usize, buf).map_err(|_| DiskError)
    }

    pub fn write(&mut self, sector: u64, buf: &[u8]) -> Result<(), DiskError> {
        if buf.is_empty() || !buf.len().is_multiple_of(SECTOR_SIZE) {
            return Err(DiskError);
        }
        self.blk.write_blocks(sector as usize, buf).map_err(|_| DiskError)
    }

    /// Returns once what was written before is on the host file (QEMU flushes it).
    pub fn flush(&mut self) -> Result<(), DiskError> {
        self.blk.flush().map_err(|_| DiskError)
    }
}

/// Receive buffers of the uplink: 64 of a full Ethernet frame each.
const UPLINK_QUEUE: usize = 64;
const UPLINK_BUFFER: usize = 2048;

/// The board's NIC: the switch's way out.
pub struct Uplink {
    net: VirtIONet<IdentityHal, Transport0, UPLINK_QUEUE>,
    /// Its interrupt, which says frames arrived.
    pub intid: Option<u32>,
}

impl Uplink {
    pub fn mac(&self) -> [u8; 6] {
        self.net.mac_address()
    }

    /// Sends one Ethernet frame (waits until the device has taken it).
    pub fn send(&mut self, frame: &[u8]) -> bool {
        let mut tx = self.net.new_tx_buffer(frame.len());
        tx.packet_mut().copy_from_slice(frame);
        self.net.send(tx).is_ok()
    }

    /// The next received frame, copied out (its buffer goes straight back to the device).
    pub fn receive(&mut self, frame: &mut alloc::vec::Vec<u8>) -> bool {
        let Ok(rx) = self.net.receive() else { return false };
        frame.clear();
        frame.extend_from_slice(rx.packet());
        let _ = self.net.recycle_rx_buffer(rx);
        true
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
            DeviceType::Block if DISK.get().is_none() => match VirtIOBlk::<IdentityHal, _>::new(transport) {
                Ok(blk) => {
                    DISK.call_once(|| Mutex::new(HostDisk { blk }));
                }
                Err(e) => println!("hypervisor: the virtio disk at {} cannot be used: {e}", t.window),
            },
            DeviceType::Network if UPLINK.get().is_none() => {
                match VirtIONet::<IdentityHal, _, UPLINK_QUEUE>::new(transport, UPLINK_BUFFER) {
                    Ok(net) => {
                        UPLINK.call_once(|| Mutex::new(Uplink { net, intid: t.intid }));
                    }
                    Err(e) => println!("hypervisor: the virtio NIC at {} cannot be used: {e}", t.window),
                }
            }
            _ => {}
        }
    }
    Found { disk_sectors: DISK.get().map(|d| d.lock().capacity()), uplink_mac: UPLINK.get().map(|u| u.lock().mac()) }
}
