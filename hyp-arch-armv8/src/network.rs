//! The virtual switch (hyp_runtime::network) on this image: its uplink's interrupt, taken
//! on the boot CPU, hands each frame the board's NIC received to the switch.

use alloc::vec::Vec;

use hyp_runtime::interrupts::Route;
use hyp_runtime::network::{Network, UPLINK_PORT};

use crate::arch::ROUTES;
use hyp_board_qemu_virt::virtio::UPLINK;

/// The virtual switch.
static NETWORK: Network = Network::new();

/// The switch for the uplink and the VMs whose NICs have these addresses (by VM index; none:
/// no NIC); the uplink's receive interrupt goes to the CPU with this index and MPIDR.
pub fn init(nics: impl Iterator<Item = Option<[u8; 6]>>, cpu: usize, mpidr: u64) {
    NETWORK.init(nics);
    if let Some(intid) = UPLINK.get().and_then(|u| u.lock().intid) {
        match ROUTES.set(intid, Route::Uplink) {
            Ok(()) => crate::gic::enable_spi(intid, cpu, mpidr),
            Err(e) => println!("hypervisor: the uplink's interrupt cannot be taken ({e}): it sends but never receives"),
        }
    }
}

/// A frame that came in on port `from` (hyp_runtime::network).
pub fn forward(from: usize, frame: &[u8]) {
    NETWORK.forward(&crate::VMS, from, frame);
}

/// The uplink's interrupt: every frame it received goes through the switch, and the
/// buffers of the frames it sent come back. The device's interrupt is acknowledged first,
/// so a frame arriving during the loop raises it again.
pub fn uplink_interrupt() {
    let Some(uplink) = UPLINK.get() else { return };
    {
        let mut uplink = uplink.lock();
        uplink.acknowledge_interrupt();
        uplink.take_back_sent();
    }
    let mut frame = Vec::with_capacity(2048);
    while uplink.lock().receive(&mut frame) {
        forward(UPLINK_PORT, &frame);
    }
}
