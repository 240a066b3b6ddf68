//! A VM's NIC backend: the frames it sent, held until its device lock is released, because
//! forwarding takes other devices' locks, and holding two device locks at once could
//! deadlock two VMs sending to each other.

use alloc::vec::Vec;

use vdev::virtio::net::{NetBackend, MAX_FRAME};

#[derive(Default)]
pub struct SwitchPort {
    outbox: Vec<Vec<u8>>,
    /// Bytes of the frames in `outbox`.
    bytes: usize,
}

/// What one exit may copy out of a guest's transmit queue: six maximum-size frames (or 256
/// small ones); the rest of the queue waits for the next exit (`NetBackend::ready`). Frames
/// are copied fallibly: with no heap left a frame is dropped and counted, never a panic.
pub const OUTBOX_BYTES: usize = 6 * MAX_FRAME;
pub const OUTBOX_FRAMES: usize = 256;

impl SwitchPort {
    /// The frames sent since the last call, in order.
    pub fn take_frames(&mut self) -> Vec<Vec<u8>> {
        self.bytes = 0;
        core::mem::take(&mut self.outbox)
    }
}

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
        self.outbox.len() < OUTBOX_FRAMES && self.bytes + MAX_FRAME <= OUTBOX_BYTES
    }
}
