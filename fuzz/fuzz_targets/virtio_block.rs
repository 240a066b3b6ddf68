//! The virtio block device over a 64-sector disk (`virtio_common` says what is driven and
//! checked): requests of every shape, within the advertised limits or not.
#![no_main]

#[path = "virtio_common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use vdev::virtio::block::{RamDisk, VirtioBlock};

fuzz_target!(|input: common::Input| {
    common::run(VirtioBlock::new(RamDisk::new(64, false, *b"fuzz-disk-serial-000")), &input, || {}, |_, _, _| {});
});
