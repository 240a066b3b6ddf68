//! The test hooks (the deliberate EL2 fault, the semihosting exit) are in the image the
//! system tests boot and not in the one a user deploys, which refuses a boot bundle that
//! asks for one and boots one that does not (docs/security.md, "Test hooks").

#![forbid(unsafe_code)]

use system_tests::{assert_line, deployed_hypervisor, images, scratch_file, selftest_vm};
use xtask::bundle::{BundleOptions, El2Fault};
use xtask::images::{hypervisor_elf, test_hooks_in, Hypervisor};
use xtask::qemu::{self, Machine};

#[test]
fn only_the_tests_image_holds_the_test_hooks() {
    images();
    deployed_hypervisor();
    let hooks = |kind: Hypervisor| {
        let path = hypervisor_elf(kind);
        let elf = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        test_hooks_in(&elf).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    assert_eq!(hooks(Hypervisor::Deployed), Vec::<&str>::new(), "the deployed image holds test hooks");
    assert_eq!(
        hooks(Hypervisor::TestHooks),
        [
            "the semihosting exit (an `hlt #0xf000` in its code)",
            "the deliberate EL2 fault (fault_test.rs's line in its read-only data)"
        ],
        "the tests' image"
    );
}

#[test]
fn the_deployed_image_refuses_a_bundle_that_asks_for_a_test_hook() {
    let cases = [
        (BundleOptions { semihosting_exit: true, test_el2_fault: None }, "`semihosting-exit`"),
        (
            BundleOptions { semihosting_exit: false, test_el2_fault: Some((3, El2Fault::ReadUnmapped)) },
            "`test-el2-fault-cpu`",
        ),
        (
            BundleOptions { semihosting_exit: true, test_el2_fault: Some((3, El2Fault::WriteText)) },
            "`semihosting-exit` and `test-el2-fault-cpu`",
        ),
    ];
    for (i, (options, asked)) in cases.into_iter().enumerate() {
        let blob = xtask::bundle::write(&[selftest_vm(64 << 20)], &options).expect("bundle");
        let bundle = scratch_file(&format!("test-hooks-{i}.bundle"));
        std::fs::write(&bundle, blob).expect("write bundle");
        let out = system_tests::boot_image(deployed_hypervisor(), Machine::default(), &bundle);
        assert_line(
            &out,
            &format!(
                "hypervisor: error: boot bundle: it asks for {asked}, and this image was built without test hooks \
                 (hyp-arch-armv8's `test-hooks` feature"
            ),
        );
        // Refused before any VM was created or any CPU given the fault.
        for never in ["vm0 selftest", "deliberate EL2 fault", "exception at EL2", "selftest | "] {
            assert!(!out.console.contains(never), "{asked}: {never:?} printed:\n{}", out.console);
        }
        // It has no semihosting call to fail the run with: it powers the board off, as any
        // deployed image that stops (PSCI SYSTEM_OFF; QEMU exits 0).
        assert_eq!(out.status, Some(0), "{asked}: QEMU exit status; console:\n{}", out.console);
    }
}

#[test]
fn the_deployed_image_boots_a_bundle_without_test_options() {
    let blob = xtask::bundle::write(&[selftest_vm(64 << 20)], &BundleOptions::default()).expect("bundle");
    let bundle = scratch_file("test-hooks-none.bundle");
    std::fs::write(&bundle, blob).expect("write bundle");
    // No semihosting on the QEMU side either: the run of a user's guest.
    let out = qemu::run_captured(
        Machine::default().command(deployed_hypervisor(), Some(&bundle)),
        system_tests::QEMU_TIMEOUT,
        false,
    )
    .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    assert!(!out.timed_out, "QEMU did not finish; console:\n{}", out.console);
    assert_line(&out, "selftest | selftest: all 29 checks passed; powering off with PSCI SYSTEM_OFF");
    assert_line(&out, "hypervisor: all 1 VM(s) ended: 1 clean, 0 failed");
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
}
