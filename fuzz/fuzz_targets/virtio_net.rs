//! The virtio network device (`virtio_common` says what is driven and checked), with
//! frames arriving from the switch at any time (`Op::Input`), and every frame it transmits
//! at most a maximum-size Ethernet frame.
#![no_main]

#[path = "virtio_common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use vdev::virtio::net::{NetBackend, VirtioNet, MAX_FRAME};

struct Wire;
impl NetBackend for Wire {
    fn transmit(&mut self, frame: &[u8]) -> bool {
        assert!(frame.len() <= MAX_FRAME, "a {}-byte frame left the device", frame.len());
        true
    }
}

fuzz_target!(|input: common::Input| {
    common::run(
        VirtioNet::new([0x52, 0x54, 0, 0x12, 0x35, 0x10], Wire),
        &input,
        || {},
        |mmio, mem, frame| {
            let _ = mmio.receive_frame(mem, frame);
        },
    );
});
