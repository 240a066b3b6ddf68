//! The virtual switch at run time: the Ethernet switch (`vdev_virtio::switch`) between the
//! VMs' NICs and the uplink, the board's own NIC. Port 0 is the uplink; port 1 + n is VM n's
//! NIC, with the address its manifest entry gives it (a VM keeps its index and its address
//! when the console restarts it).
//!
//! Frames are forwarded on the CPU that produced them: a VM's transmit exit, or the uplink's
//! receive interrupt. No lock is held across two devices (vdev.rs explains the order).

use alloc::vec::Vec;

use spin::{Mutex, Once};
use vdev_virtio::switch::{Forward, Port, PortId, Switch};

use hyp_runtime::interrupts::Route;

use crate::arch::ROUTES;
use crate::host_virtio::UPLINK;

use hyp_runtime::network::{vm_of_port, UPLINK_PORT};

static SWITCH: Once<Mutex<Switch>> = Once::new();

/// The switch for the uplink and the VMs whose NICs have these addresses (by VM index; none:
/// no NIC); the uplink's receive interrupt goes to the CPU with this index and MPIDR.
pub fn init(nics: impl Iterator<Item = Option<[u8; 6]>>, cpu: usize, mpidr: u64) {
    let ports = core::iter::once(Port::Uplink).chain(nics.map(Port::Vm)).collect();
    SWITCH.call_once(|| Mutex::new(Switch::new(ports)));
    if let Some(intid) = UPLINK.get().and_then(|u| u.lock().intid) {
        match ROUTES.set(intid, Route::Uplink) {
            Ok(()) => crate::gic::enable_spi(intid, cpu, mpidr),
            Err(e) => println!("hypervisor: the uplink's interrupt cannot be taken ({e}): it sends but never receives"),
        }
    }
}

/// A frame that came in on port `from`: to the port that has its destination, or to every
/// other port.
pub fn forward(from: usize, frame: &[u8]) {
    let Some(switch) = SWITCH.get() else { return };
    let decision = switch.lock().forward(PortId(from), frame);
    match decision {
        Forward::To(port) => deliver(port.0, frame),
        Forward::Flood { except } => {
            let ports = switch.lock().ports();
            (0..ports).filter(|&p| p != except.0).for_each(|p| deliver(p, frame));
        }
        Forward::Drop => {}
        Forward::Refused(refusal) => {
            if let Some(vm) = vm_of_port(from).and_then(crate::vm_at) {
                crate::vm::guest_line(
                    &vm.guest_log,
                    format_args!("hypervisor: vm{} {}: {refusal}", vm.id, vm.spec.name),
                );
            }
        }
    }
}

fn deliver(port: usize, frame: &[u8]) {
    if port == UPLINK_PORT {
        if let Some(uplink) = UPLINK.get() {
            uplink.lock().send(frame);
        }
        return;
    }
    let nic = vm_of_port(port).and_then(crate::vm_at).and_then(|vm| vm.nic());
    if let Some(nic) = nic {
        // A NIC with no receive buffer drops the frame, as a real one would.
        let _ = nic.with_device(|device, ram| {
            let _ = device.receive_frame(ram, frame);
        });
    }
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
