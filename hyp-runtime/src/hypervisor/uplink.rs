//! The virtual switch (crate::network) between the VMs' NICs and the board's NIC, its
//! uplink: a VM's frames are forwarded on the CPU of its transmit exit, the uplink's on the
//! CPU that takes its receive interrupt (the boot CPU).

use alloc::vec::Vec;

use super::{say, BoardOf, Hypervisor, Virtualization};
use crate::board::Board;
use crate::interrupts::Route;
use crate::network::{BoardNic, UPLINK_PORT};

/// The largest frame the uplink hands the switch with its NIC's header, with room to spare
/// (an Ethernet frame with a VLAN tag is 1,522 bytes).
const FRAME_BUFFER: usize = 2048;

impl<V: Virtualization> Hypervisor<V> {
    /// The switch for the uplink and the VMs whose NICs have these addresses (by VM index;
    /// none: no NIC); the uplink's receive interrupt goes to CPU `cpu`.
    pub fn start_network(&self, nics: impl Iterator<Item = Option<[u8; 6]>>, cpu: usize) {
        self.network.init(nics);
        let Some(intid) = BoardOf::<V>::nic().and_then(|nic| nic.lock().interrupt()) else { return };
        match self.routes.set(intid, Route::Uplink) {
            Ok(()) => V::enable_interrupt(intid, cpu),
            Err(e) => say!(V, "hypervisor: the uplink's interrupt cannot be taken ({e}): it sends but never receives"),
        }
    }

    /// A frame that came in on switch port `from`.
    pub fn forward_frame(&self, from: usize, frame: &[u8]) {
        self.network.forward(&self.vms, from, frame);
    }

    /// The uplink's interrupt: every frame it received goes through the switch, and the
    /// buffers of the frames it sent come back. The device's interrupt is acknowledged
    /// first, so a frame arriving during the loop raises it again.
    #[inline(never)]
    pub fn uplink_interrupt(&self) {
        let Some(uplink) = BoardOf::<V>::nic() else { return };
        {
            let mut uplink = uplink.lock();
            uplink.acknowledge_interrupt();
            uplink.take_back_sent();
        }
        let mut frame = Vec::new();
        if frame.try_reserve_exact(FRAME_BUFFER).is_err() {
            return say!(V, "hypervisor: no heap for the uplink's frames: they wait in the NIC");
        }
        while let Some(offset) = uplink.lock().receive(&mut frame) {
            self.forward_frame(UPLINK_PORT, frame.get(offset..).unwrap_or(&[]));
        }
    }
}
