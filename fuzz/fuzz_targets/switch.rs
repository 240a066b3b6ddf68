//! The switch between the VMs' NICs and the uplink (`vdev::virtio::switch`): any frames from
//! any ports. Checked: no panic; a frame never goes back to its own port; a frame from a VM
//! port is delivered only if its source is that port's address; nothing a port sends changes
//! where a frame goes (the switch learns nothing: the same frame from the same port always
//! gets the same answer).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vdev::virtio::switch::{Forward, Port, PortId, Switch};

#[derive(Arbitrary, Debug)]
struct Input {
    macs: Vec<Option<[u8; 6]>>,
    frames: Vec<(u8, Vec<u8>)>,
}

fuzz_target!(|input: Input| {
    let mut ports = vec![Port::Uplink];
    ports.extend(input.macs.iter().take(16).map(|m| Port::Vm(*m)));
    let switch = Switch::new(ports.clone());
    let probe = |s: &Switch| -> Vec<Forward> {
        (0..ports.len())
            .flat_map(|p| {
                ports
                    .iter()
                    .filter_map(|to| match to {
                        Port::Vm(Some(mac)) => {
                            let frame = [&mac[..], &[0x02, 0, 0, 0, 0, 9][..], &[8, 0]].concat();
                            Some(s.forward(PortId(p), &frame))
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let before = probe(&switch);
    for (port, frame) in input.frames.iter().take(256) {
        let from = PortId(usize::from(*port) % (ports.len() + 1));
        match switch.forward(from, frame) {
            Forward::To(to) => assert_ne!(to, from, "a frame went back to its own port"),
            Forward::Flood { except } => assert_eq!(except, from),
            Forward::Drop | Forward::Refused(_) => {}
        }
        if let (Some(Port::Vm(Some(own))), Some(src)) = (ports.get(from.0), frame.get(6..12)) {
            if src != own && frame.len() >= 14 {
                assert!(matches!(switch.forward(from, frame), Forward::Refused(_)), "a spoofed source got through");
            }
        }
    }
    assert_eq!(probe(&switch), before, "traffic changed where frames go");
});
