//! `cargo xtask`: everything between `cargo` and a running hypervisor: installing tools,
//! building the images, writing the boot bundle, and running QEMU. The system tests
//! (`tests/`) use the same code, so a test runs exactly what a user runs.

#![forbid(unsafe_code)]

pub mod bench;
pub mod bundle;
pub mod cpio;
pub mod deploy;
pub mod elf;
pub mod fuzz;
pub mod images;
pub mod linux_guest;
pub mod manifest;
pub mod qemu;
pub mod rpi4;
pub mod rpi4_sd;
pub mod setup;
pub mod soak;
pub mod util;

pub use util::XtaskError;
