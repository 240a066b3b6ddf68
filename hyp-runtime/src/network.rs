//! The virtual switch at run time (docs/virtio.md): the Ethernet switch
//! (`vdev::virtio::switch`) between the VMs' NICs and the uplink, the board's own NIC. Port
//! 0 is the uplink; port 1 + n is VM n's NIC, with the address its manifest entry gives it
//! (a VM keeps its index and its address when the console restarts it).
//!
//! Frames are forwarded on the CPU that produced them: a VM's transmit exit, or the
//! uplink's receive interrupt. No lock is held across two devices: the switch itself is
//! fixed once set up and takes none.

use core::borrow::Borrow;

use spin::Once;
use vdev::virtio::switch::{Forward, Port, PortId, Switch};

use crate::board::Board;
use crate::virtio::slot::VmEnv;
use crate::vm::Vm;
use crate::vm_table::VmTable;

pub const UPLINK_PORT: usize = 0;

/// The switch port of VM `vm`'s NIC.
pub fn port_of_vm(vm: usize) -> usize {
    vm + 1
}

/// The VM whose NIC is on `port`, if it is a VM's.
pub fn vm_of_port(port: usize) -> Option<usize> {
    port.checked_sub(1)
}

/// The board's NIC, as the switch's uplink.
pub trait BoardNic: Send {
    /// Sends one frame; false if the NIC could not take it (the frame is dropped, as a
    /// full NIC drops it).
    fn send(&mut self, frame: &[u8]) -> bool;
    /// Its interrupt is acknowledged: a frame that arrives from now on raises it again.
    fn acknowledge_interrupt(&mut self);
    /// Takes back the buffers of the frames it has sent.
    fn take_back_sent(&mut self);
    /// The next frame it received, in its own buffer; none if there is none.
    fn receive(&mut self) -> Option<ReceivedFrame>;
    /// A received frame's buffer back to the NIC, for the frames to come; false if the NIC
    /// could not take it (it is freed, and the NIC has one buffer fewer).
    fn give_back(&mut self, received: ReceivedFrame) -> bool;
    /// Its interrupt, if it has one (none: it sends but never receives).
    fn interrupt(&self) -> Option<u32>;
}

/// A frame the board's NIC received, in the NIC's buffer: out of the NIC, which cannot
/// receive into it, until it is given back (`BoardNic::give_back`).
pub struct ReceivedFrame {
    pub buffer: alloc::boxed::Box<[u8]>,
    /// Where the frame lies in the buffer (after the NIC's header).
    pub frame: core::ops::Range<usize>,
}

impl ReceivedFrame {
    /// The frame; empty if the NIC said it lies outside its buffer.
    pub fn frame(&self) -> &[u8] {
        self.buffer.get(self.frame.clone()).unwrap_or(&[])
    }
}

pub struct Network {
    switch: Once<Switch>,
}

impl Default for Network {
    fn default() -> Self {
        Self::new()
    }
}

impl Network {
    pub const fn new() -> Self {
        Network { switch: Once::new() }
    }

    /// Once, at boot: the uplink and the VMs whose NICs have these addresses (by VM index;
    /// none: no NIC).
    pub fn init(&self, nics: impl Iterator<Item = Option<[u8; 6]>>) {
        self.switch.call_once(|| Switch::new(core::iter::once(Port::Uplink).chain(nics.map(Port::Vm)).collect()));
    }

    /// A frame that came in on port `from`: to the port that has its destination, or to
    /// every other port; a frame the switch refuses is a line of the VM that sent it.
    pub fn forward<E: VmEnv, V: Borrow<Vm<E>>>(&self, vms: &VmTable<V>, from: usize, frame: &[u8]) {
        let Some(switch) = self.switch.get() else { return };
        match switch.forward(PortId(from), frame) {
            Forward::To(port) => deliver(vms, port.0, frame),
            Forward::Flood { except } => {
                (0..switch.ports()).filter(|&p| p != except.0).for_each(|p| deliver(vms, p, frame));
            }
            Forward::Drop => {}
            Forward::Refused(refusal) => {
                if let Some(held) = vm_of_port(from).and_then(|id| vms.get(id)) {
                    let vm: &Vm<E> = (*held).borrow();
                    let line = format_args!("hypervisor: vm{} {}: {refusal}", vm.id, vm.spec.name);
                    crate::guest_log::guest_line::<E::Arch, E::Board>(&vm.guest_log, line);
                }
            }
        }
    }
}

fn deliver<E: VmEnv, V: Borrow<Vm<E>>>(vms: &VmTable<V>, port: usize, frame: &[u8]) {
    if port == UPLINK_PORT {
        if let Some(nic) = E::Board::nic() {
            let _ = nic.lock().send(frame);
        }
        return;
    }
    let held = vm_of_port(port).and_then(|id| vms.get(id));
    if let Some(nic) = held.as_ref().and_then(|vm| (**vm).borrow().nic()) {
        // A NIC with no receive buffer drops the frame, as a real one would.
        let _ = nic.with_device(|device, ram| {
            let _ = device.receive_frame(ram, frame);
        });
    }
}
