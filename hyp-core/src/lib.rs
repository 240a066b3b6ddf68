//! The architecture-independent core of the hypervisor.
#![cfg_attr(not(test), no_std)]
