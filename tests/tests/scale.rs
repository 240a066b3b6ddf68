//! Many VMs on one board (issue: fast paths and scale, point 5): `cargo xtask bench --scale`'s
//! run made smaller, 8 Linux VMs of 1 vCPU and 128 MiB, 4 sharing each of 2 CPUs. Every one
//! reaches its shell, answers a command typed at its console and a ping from another VM;
//! under a CPU-bound loop in all of them each gets its fair share of its CPU (within 5%, by
//! the hypervisor's own accounting in `list`); the boot bundle carries one copy of the
//! kernel and initramfs, not one per VM.

use system_tests::one_linux_at_a_time;
use xtask::bench::scale::{self, ScaleConfig};

#[test]
fn eight_linux_vms_on_two_cpus_each_answer_and_share_their_cpu_fairly() {
    let _alone = one_linux_at_a_time();
    let config = ScaleConfig::TEST;
    let run = scale::run(&config).unwrap_or_else(|e| panic!("{e}"));
    let table = scale::table(&run);
    println!("{table}");
    assert_eq!(run.failures(), Vec::<String>::new(), "{table}");
    assert_eq!(run.vms.len(), config.vms);
    for vm in &run.vms {
        assert!(vm.boot_seconds > 0.0, "{}: a boot time from its counter", vm.name);
        // Its loop ran: it got CPU time in the window, and no more than its CPU had.
        let fair = config.load_seconds as f64 / (config.vms / config.cpus as usize) as f64;
        assert!(
            vm.load_cpu_seconds > fair * 0.5 && vm.load_cpu_seconds < fair * 1.5,
            "{}: {} s of CPU in {} s with 3 others on its CPU",
            vm.name,
            vm.load_cpu_seconds,
            config.load_seconds
        );
    }
    // One copy of the images: the bundle is far smaller than a copy per VM would be.
    assert!(run.bundle_bytes * 4 < run.bundle_bytes_copy_per_vm, "{table}");
    // Each VM beyond the first costs the hypervisor some heap: its tables, vCPU and devices.
    assert!(run.heap_all_kib > run.heap_alone_kib, "{table}");
    assert!(run.stage2_frames.iter().all(|&f| f > 0), "{table}");
}
