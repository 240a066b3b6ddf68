//! vCPU scheduling.
#![cfg_attr(not(test), no_std)]

extern crate alloc;
