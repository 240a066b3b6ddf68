//! The learning switch: learning, flooding, broadcast, drop on the source's own port, bounded
//! table, moved MACs.

use vdev_virtio::switch::{Forward, PortId, Switch, MAC_TABLE_SIZE};

fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    [&dst[..], &src[..], &[0x08, 0x00], &[0; 46]].concat()
}

fn mac(n: u32) -> [u8; 6] {
    let b = n.to_be_bytes();
    [0x02, 0, b[0], b[1], b[2], b[3]]
}

const BROADCAST: [u8; 6] = [0xff; 6];

fn flood_but(ports: usize, from: usize) -> Forward {
    Forward::Flood((0..ports).filter(|&p| p != from).map(PortId).collect())
}

#[test]
fn unknown_unicast_floods_and_a_reply_goes_straight_back_to_the_learned_port() {
    let mut s = Switch::new(3);
    assert_eq!(s.forward(PortId(0), &frame(mac(2), mac(1))), flood_but(3, 0));
    assert_eq!(s.lookup(mac(1)), Some(PortId(0)));
    assert_eq!(s.forward(PortId(2), &frame(mac(1), mac(2))), Forward::To(PortId(0)));
    assert_eq!(s.forward(PortId(0), &frame(mac(2), mac(1))), Forward::To(PortId(2)));
}

#[test]
fn broadcast_and_multicast_destinations_flood_every_other_port() {
    let mut s = Switch::new(4);
    s.forward(PortId(1), &frame(mac(1), mac(9)));
    assert_eq!(s.forward(PortId(0), &frame(BROADCAST, mac(1))), flood_but(4, 0));
    let multicast = [0x01, 0x00, 0x5e, 0, 0, 1];
    assert_eq!(s.forward(PortId(3), &frame(multicast, mac(2))), flood_but(4, 3));
}

#[test]
fn a_frame_for_a_mac_on_its_own_port_is_dropped() {
    let mut s = Switch::new(2);
    s.forward(PortId(1), &frame(BROADCAST, mac(5)));
    s.forward(PortId(1), &frame(BROADCAST, mac(6)));
    assert_eq!(s.forward(PortId(1), &frame(mac(6), mac(5))), Forward::Drop);
}

#[test]
fn short_frames_and_unknown_source_ports_are_dropped() {
    let mut s = Switch::new(2);
    assert_eq!(s.forward(PortId(0), &[0; 13]), Forward::Drop);
    assert_eq!(s.forward(PortId(2), &frame(BROADCAST, mac(1))), Forward::Drop);
    assert_eq!(s.table_len(), 0);
}

#[test]
fn multicast_source_addresses_are_not_learned() {
    let mut s = Switch::new(2);
    let bad = [0x03, 0, 0, 0, 0, 1];
    s.forward(PortId(0), &frame(BROADCAST, bad));
    assert_eq!(s.lookup(bad), None);
    assert_eq!(s.forward(PortId(1), &frame(bad, mac(3))), flood_but(2, 1));
}

#[test]
fn a_mac_that_moves_is_relearned_on_its_new_port() {
    let mut s = Switch::new(3);
    s.forward(PortId(0), &frame(BROADCAST, mac(7)));
    s.forward(PortId(2), &frame(BROADCAST, mac(7)));
    assert_eq!(s.lookup(mac(7)), Some(PortId(2)));
    assert_eq!(s.forward(PortId(1), &frame(mac(7), mac(8))), Forward::To(PortId(2)));
    assert_eq!(s.table_len(), 2);
}

#[test]
fn the_table_is_bounded_and_evicts_the_least_recently_seen_mac() {
    let mut s = Switch::new(2);
    for n in 0..MAC_TABLE_SIZE as u32 {
        s.forward(PortId(0), &frame(BROADCAST, mac(n)));
    }
    // Refresh mac(0): mac(1) becomes the oldest.
    s.forward(PortId(0), &frame(BROADCAST, mac(0)));
    s.forward(PortId(1), &frame(BROADCAST, mac(100_000)));
    assert_eq!(s.table_len(), MAC_TABLE_SIZE);
    assert_eq!(s.lookup(mac(1)), None);
    assert_eq!(s.lookup(mac(0)), Some(PortId(0)));
    assert_eq!(s.lookup(mac(100_000)), Some(PortId(1)));
    for n in 0..10_000u32 {
        s.forward(PortId(1), &frame(BROADCAST, mac(200_000 + n)));
    }
    assert_eq!(s.table_len(), MAC_TABLE_SIZE);
}
