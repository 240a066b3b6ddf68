//! No allocation on a guest's path can abort the hypervisor: with the heap refusing every
//! allocation while a guest's notify runs, each device answers with an error or needs a
//! reset, and the process (standing in for the hypervisor) lives on. An infallible
//! allocation that failed would abort this test binary.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use vdev::virtio::block::*;
use vdev::virtio::console::{ConsoleBackend, VirtioConsole};
use vdev::virtio::net::{NetBackend, VirtioNet, NET_HDR_LEN, TRANSMITQ};

/// Refuses every allocation on this thread while `REFUSING` is set.
struct Refusing;

thread_local! {
    static REFUSING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator, or returns null, which the GlobalAlloc contract
// allows for a failed allocation.
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if REFUSING.try_with(Cell::get).unwrap_or(false) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, as for System.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Refusing = Refusing;

/// Runs `f` with every allocation of this thread refused.
fn without_heap<R>(f: impl FnOnce() -> R) -> R {
    REFUSING.with(|r| r.set(true));
    let out = f();
    REFUSING.with(|r| r.set(false));
    out
}

const ID: [u8; 20] = *b"hyp-disk-serial-0001";

#[test]
fn a_block_request_with_no_heap_fails_for_the_guest_only() {
    let mut d = Driver::standard(VirtioBlock::new(RamDisk::new(64, false, ID)));
    let mut h = 0u32.to_le_bytes().to_vec();
    h.extend_from_slice(&[0; 12]);
    let header = d.alloc_with(&h);
    let data = d.alloc(4096, 0);
    let status = d.alloc(1, 0xff);
    d.add_chain(0, &[ro(header, 16), wr(data, 4096), wr(status, 1)]);
    without_heap(|| d.notify(0));
    let status_byte = d.peek(status, 1)[0];
    assert!(
        status_byte == VIRTIO_BLK_S_IOERR || d.needs_reset(),
        "an I/O error or a device that needs a reset (status {status_byte:#x})"
    );
    // With the heap back, a reset device works again.
    d.reinit(vdev::virtio::features::VIRTIO_F_VERSION_1);
    d.add_chain(0, &[ro(header, 16), wr(data, 4096), wr(status, 1)]);
    d.notify(0);
    assert_eq!(d.peek(status, 1)[0], VIRTIO_BLK_S_OK);
}

/// A switch port that copies frames fallibly, as the hypervisor's does; `refuse` stands for
/// a heap with no room for a frame.
#[derive(Default)]
struct Sink {
    refuse: bool,
}
impl NetBackend for Sink {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        let mut copy: Vec<u8> = Vec::new();
        !self.refuse && copy.try_reserve_exact(frame.len()).is_ok()
    }
}
impl ConsoleBackend for Sink {
    fn write(&mut self, _bytes: &[u8]) {}
}

#[test]
fn a_transmitted_frame_with_no_heap_is_dropped_and_counted() {
    let mut d = Driver::standard(VirtioNet::new([2, 0, 0, 0, 0, 1], Sink::default()));
    let frame = d.alloc(NET_HDR_LEN + 1514, 0x11);
    d.add_chain(TRANSMITQ as usize, &[ro(frame, (NET_HDR_LEN + 1514) as u32)]);
    without_heap(|| d.notify(TRANSMITQ as usize));
    // The chain could not even be listed (its list is allocated): the device needs a reset.
    assert!(d.needs_reset());
    // With heap for the chain but none for the frame's copy: dropped, counted, used.
    d.reinit(vdev::virtio::features::VIRTIO_F_VERSION_1);
    d.add_chain(TRANSMITQ as usize, &[ro(frame, (NET_HDR_LEN + 1514) as u32)]);
    d.mmio.device_mut().backend_mut().refuse = true;
    d.notify(TRANSMITQ as usize);
    assert_eq!(d.take_used(1).len(), 1, "the chain is used");
    assert_eq!(d.mmio.device().stats().tx_dropped, 1);
    assert_eq!(d.mmio.device().stats().tx_frames, 0);
}

#[test]
fn console_output_with_no_heap_does_not_abort() {
    let mut d = Driver::standard(VirtioConsole::new(Sink::default()));
    let text = d.alloc_with(b"hello from a guest with no heap behind it\n");
    d.add_chain(1, &[ro(text, 43)]);
    without_heap(|| d.notify(1));
    assert!(d.take_used(1).len() == 1 || d.needs_reset());
}
