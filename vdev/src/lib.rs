//! The device models a guest reaches through MMIO, as it sees them: the PL011 UART of its
//! console (`pl011`), and the virtio devices (`virtio`: the virtio-mmio and virtio-pci
//! transports, split virtqueues, block, network and console models, the virtual switch).
//!
//! Nothing a guest writes (registers or ring contents) can make this crate panic, loop without
//! bound, or allocate more than a small constant: driver bugs become failed requests or
//! DEVICE_NEEDS_RESET, and an incident the hypervisor can log.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod pl011;
pub mod virtio;
