//! The microbenchmark guest runs once as a functional check: every benchmark completes and
//! prints a figure (no timing is asserted; `cargo xtask bench` measures).

use system_tests::{assert_line, boot, images, test_vm};
use xtask::bundle::VmEntry;
use xtask::qemu::Machine;

#[test]
fn the_microbenchmarks_run_to_completion() {
    let out = boot(
        "microbench",
        Machine { smp: 2, ..Machine::default() },
        &[VmEntry { vcpus: 2, ..test_vm("microbench", &images().microbench, 64 << 20) }],
    );
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    for name in ["loop", "hvc-unknown", "hvc-smccc-version", "mmio-read", "virtio-read", "virtio-write", "gicd-read"] {
        assert_line(&out, &format!("microbench | bench {name} iterations=10000 ns="));
    }
    for name in ["counter", "virtual-ipi", "virtual-ipi-round-trip", "eoi", "vtimer"] {
        assert_line(&out, &format!("microbench | latency {name} samples=10000 ns="));
    }
    // 1,000 ticks of 10 ms: without -icount they are 10 s of real time.
    assert_line(&out, "microbench | latency vtimer-periodic samples=1000 ns=");
    assert_line(&out, "microbench | microbench: done");
    let figures = xtask::bench::parse(&out.console);
    let names: Vec<&str> = figures.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "eoi",
            "gicd-read",
            "hvc-smccc-version",
            "hvc-unknown",
            "mmio-read",
            "virtio-read",
            "virtio-write",
            "virtual-ipi",
            "virtual-ipi-round-trip",
            "vtimer",
            "vtimer-periodic"
        ]
    );
}
