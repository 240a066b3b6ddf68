//! The microbenchmark guest runs once as a functional check: every benchmark completes and
//! prints a figure (no timing is asserted; `cargo xtask bench` measures).

use system_tests::{assert_line, boot, images, test_vm};
use xtask::qemu::Machine;

#[test]
fn the_microbenchmarks_run_to_completion() {
    let out = boot(
        "microbench",
        Machine { smp: 2, ..Machine::default() },
        &[test_vm("microbench", &images().microbench, 64 << 20)],
    );
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    for name in ["loop", "hvc-unknown", "hvc-smccc-version", "mmio-read", "gicd-read"] {
        assert_line(&out, &format!("microbench | bench {name} iterations=10000 ns="));
    }
    assert_line(&out, "microbench | microbench: done");
    let figures = xtask::bench::parse(&out.console);
    assert_eq!(figures.len(), 4, "{figures:?}");
}
