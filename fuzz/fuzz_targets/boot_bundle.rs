//! The boot bundle the loader hands the hypervisor as its initrd (`hyp_core::bundle`): any
//! bytes. Checked: no panic; a bundle that parses describes at least one VM, every VM's
//! fields can be read, and the rules of the manifest hold for it (`check_vms`, which `parse`
//! runs: run again, it agrees).
#![no_main]

use hyp_core::bundle::BootBundle;
use hyp_core::manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(bundle) = BootBundle::parse(data) else { return };
    let mut count = 0;
    for (i, vm) in bundle.vms().enumerate() {
        count += 1;
        let _ = (vm.command_line(), vm.nic_mac(i), vm.placement.time_slice_us());
        for v in 0..vm.vcpus as usize {
            let _ = vm.placement.cpu_of(v);
        }
        for device in vm.passthrough.iter() {
            let _ = device.interrupts.iter().count();
        }
    }
    assert!(count > 0, "a bundle that parses has a VM");
    assert!(manifest::check_vms(bundle.vms()).is_ok(), "parse accepted what check_vms refuses");
});
