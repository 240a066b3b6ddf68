//! virtio-mmio devices as guests see them.
#![cfg_attr(not(test), no_std)]

extern crate alloc;
