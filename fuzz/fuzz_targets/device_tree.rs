//! Device trees: the board's (`hyp_core::platform::Platform::from_device_tree`, the
//! passthrough checks' `DeviceTreeDevices`), and one a user gives a VM (`guest_fdt::with_chosen`,
//! then `reseed` as at a reboot). Any bytes. Checked: no panic; a tree `with_chosen` writes
//! is itself a valid device tree whose /chosen carries the command line it was given.
#![no_main]

use hyp_core::entropy::GuestSeeds;
use hyp_core::fdt::Fdt;
use hyp_core::guest_fdt;
use hyp_core::manifest::{BoardDevices, DeviceTreeDevices};
use hyp_core::platform::{PhysRange, Platform};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Platform::from_device_tree(data);
    if let Some(devices) = DeviceTreeDevices::new(data) {
        for base in [0u64, 0x0900_0000, 0x0901_0000, 0x0a00_0000, 0x4000_0000] {
            let window = PhysRange { base, size: 0x1000 };
            if let Some(found) = devices.device_at(window) {
                let _ = (devices.raises(found, 34), devices.dma(found), devices.node_at(window));
            }
        }
    }
    let seeds = GuestSeeds { rng_seed: [7; 32], kaslr_seed: 42 };
    if let Ok(mut tree) = guest_fdt::with_chosen(data, "console=ttyAMA0", Some((0x4800_0000, 0x4900_0000)), Some(seeds))
    {
        let written = Fdt::new(&tree).expect("with_chosen wrote a device tree that does not read back");
        let bootargs = written.find_node("/chosen").and_then(|c| c.property("bootargs")).and_then(|p| p.as_str());
        assert_eq!(bootargs, Some("console=ttyAMA0"), "/chosen carries the command line it was given");
        let _ = guest_fdt::reseed(&mut tree, GuestSeeds { rng_seed: [9; 32], kaslr_seed: 1 });
    }
});
