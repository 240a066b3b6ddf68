//! The virtual switch between VMs built through the fake image: a frame leaves by the
//! uplink only when it is for the outside, a frame with another port's source is refused
//! with a line of the VM that sent it, and nothing goes back where it came from.

use super::virtio::{LINES, SENT};
use super::vm::{build_vm, vm_spec};
use crate::network::{port_of_vm, vm_of_port, Network, UPLINK_PORT};
use crate::vm_table::VmTable;

const OUTSIDE: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];
const BROADCAST: [u8; 6] = [0xff; 6];

fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    [&dst[..], &src[..], &[0x08, 0x00], &[0u8; 46][..]].concat()
}

/// Two VMs with NICs on the switch, vm0 "web" and vm1 "db".
fn network() -> (Network, VmTable<crate::vm::Vm<super::virtio::FakeEnv>>, [[u8; 6]; 2]) {
    let specs = [vm_spec(None, true), vm_spec(None, true)];
    let macs = [specs[0].nic_mac(0).unwrap(), specs[1].nic_mac(1).unwrap()];
    let table = VmTable::new();
    let vms = specs.iter().enumerate().map(|(id, spec)| (*spec, build_vm(id, *spec, true).unwrap().0)).collect();
    table.fill(vms);
    let network = Network::new();
    network.init(macs.iter().map(|m| Some(*m)));
    LINES.with(|l| l.borrow_mut().clear());
    SENT.with(|s| s.borrow_mut().clear());
    (network, table, macs)
}

#[test]
fn a_frame_for_the_outside_leaves_by_the_uplink_and_one_between_vms_does_not() {
    let (network, table, macs) = network();
    let out = frame(OUTSIDE, macs[0]);
    network.forward(&table, port_of_vm(0), &out);
    assert_eq!(SENT.with(|s| s.take()), vec![out]);
    network.forward(&table, port_of_vm(0), &frame(macs[1], macs[0]));
    assert!(SENT.with(|s| s.take()).is_empty(), "vm1's frame stays inside");
    let broadcast = frame(BROADCAST, macs[1]);
    network.forward(&table, port_of_vm(1), &broadcast);
    assert_eq!(SENT.with(|s| s.take()), vec![broadcast], "a broadcast reaches the outside too");
}

#[test]
fn a_frame_with_another_ports_source_is_refused_and_said_with_the_vm() {
    let (network, table, macs) = network();
    network.forward(&table, port_of_vm(0), &frame(OUTSIDE, macs[1]));
    assert!(SENT.with(|s| s.take()).is_empty(), "a spoofed frame goes nowhere");
    let lines = LINES.with(|l| l.take());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("hypervisor: vm0 guest: "), "{lines:?}");
}

#[test]
fn nothing_goes_back_out_of_the_uplink() {
    let (network, table, _) = network();
    network.forward(&table, UPLINK_PORT, &frame(OUTSIDE, [0x02, 0, 0, 0, 0, 0x42]));
    network.forward(&table, UPLINK_PORT, &frame(BROADCAST, [0x02, 0, 0, 0, 0, 0x42]));
    assert!(SENT.with(|s| s.take()).is_empty());
}

#[test]
fn ports_and_vms_map_one_to_one() {
    assert_eq!(vm_of_port(UPLINK_PORT), None);
    for vm in 0..4 {
        assert_eq!(vm_of_port(port_of_vm(vm)), Some(vm));
    }
}
