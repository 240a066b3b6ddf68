//! The switch: each VM port sends only from its own address; unicast goes to the port with
//! the destination, or out of the uplink; broadcast and multicast flood; nothing a port sends
//! changes where other ports' traffic goes.

use vdev::virtio::switch::{Forward, Port, PortId, Refusal, Switch};

fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    [&dst[..], &src[..], &[0x08, 0x00], &[0; 46]].concat()
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0, b[0], b[1], b[2], b[3]]
}

const BROADCAST: [u8; 6] = [0xff; 6];
const GATEWAY: [u8; 6] = [0x52, 0x55, 0x0a, 0x00, 0x02, 0x02];
const UPLINK: PortId = PortId(0);
const A: PortId = PortId(1);
const B: PortId = PortId(2);

/// The uplink and VM ports A and B with addresses mac(1) and mac(2); port 3 has no NIC.
fn switch() -> Switch {
    Switch::new(vec![Port::Uplink, Port::Vm(Some(mac(1))), Port::Vm(Some(mac(2))), Port::Vm(None)])
}

#[test]
fn unicast_goes_to_the_port_with_the_destination_or_out_of_the_uplink() {
    let s = switch();
    assert_eq!(s.forward(A, &frame(mac(2), mac(1))), Forward::To(B));
    assert_eq!(s.forward(B, &frame(mac(1), mac(2))), Forward::To(A));
    assert_eq!(s.forward(A, &frame(GATEWAY, mac(1))), Forward::To(UPLINK), "the rest of the network is out there");
    assert_eq!(s.forward(UPLINK, &frame(mac(2), GATEWAY)), Forward::To(B));
    assert_eq!(s.forward(UPLINK, &frame(mac(9), GATEWAY)), Forward::Drop, "no VM has that address");
    assert_eq!(s.forward(A, &frame(mac(1), mac(1))), Forward::Drop, "its own address");
}

#[test]
fn broadcast_and_multicast_destinations_flood_every_other_port() {
    let s = switch();
    assert_eq!(s.forward(UPLINK, &frame(BROADCAST, GATEWAY)), Forward::Flood { except: UPLINK });
    let multicast = [0x01, 0x00, 0x5e, 0, 0, 1];
    assert_eq!(s.forward(B, &frame(multicast, mac(2))), Forward::Flood { except: B });
}

#[test]
fn a_vm_port_sending_from_another_address_is_refused_and_steals_no_traffic() {
    let s = switch();
    // A claims B's address, then the gateway's: refused, and traffic for B and for the
    // gateway still goes where it went.
    for stolen in [mac(2), GATEWAY, [0x03, 0, 0, 0, 0, 1]] {
        assert_eq!(
            s.forward(A, &frame(BROADCAST, stolen)),
            Forward::Refused(Refusal::SpoofedSource { port: A, source: stolen, own: mac(1) })
        );
    }
    assert_eq!(s.forward(UPLINK, &frame(mac(2), GATEWAY)), Forward::To(B));
    assert_eq!(s.forward(B, &frame(GATEWAY, mac(2))), Forward::To(UPLINK));
    let message = Refusal::SpoofedSource { port: A, source: mac(2), own: mac(1) }.to_string();
    assert!(message.contains("02:00:00:00:00:02, not the NIC's own 02:00:00:00:00:01"), "{message}");
}

#[test]
fn a_flood_of_source_addresses_changes_nothing() {
    let s = switch();
    for n in 0..100_000u32 {
        let _ = s.forward(A, &frame(BROADCAST, mac(1_000 + n)));
        let _ = s.forward(UPLINK, &frame(BROADCAST, mac(1_000 + n)));
    }
    // Unicast still goes straight to its port, never flooded to every port.
    assert_eq!(s.forward(UPLINK, &frame(mac(1), GATEWAY)), Forward::To(A));
    assert_eq!(s.forward(B, &frame(mac(1), mac(2))), Forward::To(A));
    assert_eq!(s.forward(A, &frame(mac(2), mac(1))), Forward::To(B));
}

#[test]
fn short_frames_unknown_ports_and_ports_without_a_nic_send_nothing() {
    let s = switch();
    assert_eq!(s.forward(UPLINK, &[0; 13]), Forward::Drop);
    assert_eq!(s.forward(PortId(9), &frame(BROADCAST, mac(1))), Forward::Drop);
    assert_eq!(
        s.forward(PortId(3), &frame(BROADCAST, mac(3))),
        Forward::Refused(Refusal::NotConnected { port: PortId(3) })
    );
    assert_eq!(s.port_of(mac(1)), Some(A));
}
