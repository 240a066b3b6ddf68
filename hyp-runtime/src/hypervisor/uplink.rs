//! The virtual switch (crate::network) between the VMs' NICs and the board's NIC, its
//! uplink: a VM's frames are forwarded on the CPU of its transmit exit, the uplink's on the
//! CPU that takes its receive interrupt (the boot CPU).

use super::{say, BoardOf, Hypervisor, Virtualization};
use crate::board::Board;
use crate::interrupts::Route;
use crate::network::{BoardNic, UPLINK_PORT};

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
        // Each frame is forwarded from the NIC's own buffer with the NIC's lock released
        // (the switch takes the receiving VMs' devices' locks, and other CPUs send through
        // the NIC meanwhile), then its buffer goes back to the NIC.
        loop {
            let received = uplink.lock().receive();
            let Some(received) = received else { break };
            self.forward_frame(UPLINK_PORT, received.frame());
            if !uplink.lock().give_back(received) {
                return say!(V, "hypervisor: the uplink did not take a receive buffer back: it has one fewer");
            }
        }
    }
}
