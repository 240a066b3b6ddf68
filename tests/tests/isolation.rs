//! Two VMs separated in space: a probe VM reads every IPA it can name and never sees the
//! other VM's memory (issue: stage2 and the capability core).

use system_tests::{assert_line, boot, images, test_vm};
use xtask::qemu::Machine;

/// The RAM ranges the hypervisor reported for each VM: `(name, PA start, size)`.
fn reported_ram(console: &str) -> Vec<(String, u64, u64)> {
    console
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("hypervisor: vm")?;
            let (_, rest) = rest.split_once(' ')?;
            let (name, rest) = rest.split_once(": ")?;
            let mib: u64 = rest.split_once(" MiB RAM")?.0.parse().ok()?;
            let pa = rest.split_once("(PA 0x")?.1.split_once(')')?.0;
            Some((name.to_string(), u64::from_str_radix(pa, 16).ok()?, mib << 20))
        })
        .collect()
}

#[test]
fn a_probe_vm_never_reads_another_vms_memory() {
    let i = images();
    let out = boot(
        "isolation",
        Machine::default(),
        &[test_vm("secret", &i.isolation_secret, 64 << 20), test_vm("probe", &i.isolation_probe, 64 << 20)],
    );
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "secret | ok 1 - isolation: wrote a 16 MiB secret at IPA 0x41000000");
    assert_line(&out, "probe | ok 1 - isolation: this VM's RAM is IPA 0x40000000..0x44000000");
    assert_line(
        &out,
        "probe | ok 2 - isolation: all 3035 IPAs outside this VM's RAM aborted (0 returned data, 0 the secret)",
    );
    assert_line(&out, "probe | ok 3 - isolation: no trace of the other VM's secret in this VM's 64 MiB");
    assert_line(&out, "secret | ok 2 - isolation: the secret is intact after the probe ran");
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
    assert_line(&out, "hypervisor: vm0 secret: capabilities revoked, 64 MiB returned to untyped memory");
    assert_line(&out, "hypervisor: vm1 probe: capabilities revoked, 64 MiB returned to untyped memory");

    // The two VMs' RAM is disjoint in physical memory.
    let ram = reported_ram(&out.console);
    assert_eq!(ram.len(), 2, "RAM lines: {ram:?}\n{}", out.console);
    let (a, b) = (&ram[0], &ram[1]);
    assert!(a.1 + a.2 <= b.1 || b.1 + b.2 <= a.1, "VM RAM overlaps: {ram:?}");

    // The hypervisor logged the probe's aborts, but did not let it flood the console: the
    // first 16 in full, then one a second, and how many it left out.
    assert_line(
        &out,
        "hypervisor: vm1 probe vcpu0: load at IPA 0x0 (VA 0x0): no memory or device there: external abort injected",
    );
    let probe_lines = out.console.lines().filter(|l| l.starts_with("hypervisor: vm1 probe vcpu0: load at")).count();
    assert!(probe_lines <= 16 + 6, "{probe_lines} log lines for one VM's aborts");
    let left_out: usize = out
        .console
        .lines()
        .find_map(|l| {
            l.strip_prefix("hypervisor: vm1 probe: ")?.split_once(" more line(s) the guest caused were left out")
        })
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of the lines left out; console:\n{}", out.console));
    assert!(probe_lines + left_out >= 3036, "every abort was printed or counted: {probe_lines} + {left_out}");
}

#[test]
fn a_1_gib_guest_is_mapped_in_2_mib_blocks_of_one_table() {
    // 3 GiB of board RAM leaves a 1 GiB-aligned gigabyte free for the VM. Its RAM is zeroed
    // on first touch a 2 MiB block at a time (docs/capability-model.md, "Zeroing"), so it is
    // 512 pending 2 MiB blocks in one level-2 table, not one 1 GiB block: the two
    // concatenated root tables and that table; and the UART window's shadow page
    // (docs/devices.md), a 4 KiB leaf in the first gigabyte: a level-2 and a level-3 table.
    let machine = Machine { memory_mib: 3072, ..Machine::default() };
    let out = boot("one-gib", machine, &[system_tests::selftest_vm(1 << 30)]);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(&out, "hypervisor: vm0 selftest: 1024 MiB RAM at IPA 0x40000000 (PA 0x80000000), 2 vCPU(s), stage-2 tables in 6 frame(s)");
    assert_line(&out, "hypervisor: vm0 selftest: capabilities revoked, 1024 MiB returned to untyped memory");
}
