//! A board device passed through to a VM (`[[vm.passthrough]]`, docs/manifest.md): QEMU
//! `virt`'s PL031 real-time clock is mapped into one VM at its own address and its SPI
//! (INTID 34) reaches that VM through its virtual GIC, hardware-mapped; a second VM reading
//! the same address takes a data abort; when the VM ends (it powers off, or the console
//! destroys it) the physical SPI is disabled before its capability is revoked.

use std::time::Duration;

use system_tests::{assert_line, boot, images, start_session, test_vm, COMMAND_LIMIT};
use xtask::bundle::{Passthrough, VmEntry};
use xtask::qemu::{Machine, Session};

fn with_rtc(mut vm: VmEntry) -> VmEntry {
    vm.devices.passthrough =
        vec![Passthrough { name: "rtc".into(), base: 0x0901_0000, size: 0x1000, interrupts: vec![34], clock_hz: None }];
    vm
}

#[test]
fn the_pl031_works_in_the_vm_it_is_given_to_and_aborts_in_another() {
    let i = images();
    let vms = [with_rtc(test_vm("rtc", &i.passthrough, 64 << 20)), test_vm("other", &i.passthrough, 64 << 20)];
    let out = boot("passthrough", Machine::default(), &vms);
    assert_eq!(out.status, Some(0), "QEMU exit status; console:\n{}", out.console);
    assert_line(
        &out,
        "hypervisor: vm0 rtc: passthrough rtc: 0x9010000..0x9011000 mapped at IPA 0x9010000 (Device-nGnRE, not executable), SPI(s) [34] granted",
    );
    assert_line(&out, "hypervisor: vm0 rtc vcpu0: passthrough SPI INTID 34 (level) routed to cpu");
    assert_line(
        &out,
        "rtc | ok 1 - passthrough: the PL031's PeriphID and PrimeCellID read [31, 10, 14, 00, 0d, f0, 05, b1]",
    );
    assert_line(&out, "rtc | ok 2 - passthrough: RTCDR reads ");
    assert_line(&out, "rtc | ok 3 - passthrough: the PL031 match interrupt (INTID 34) arrives through the virtual GIC");
    assert_line(&out, "rtc | ok 4 - passthrough: RTCICR cleared it (RTCRIS 0)");
    assert_line(&out, "rtc | ok 5 - passthrough: it came once and not again (1 time(s))");
    // The SPI is level-sensitive: its pending state follows the device's line (issue:
    // isolation, point 4).
    assert_line(
        &out,
        "rtc | ok 6 - passthrough: a match cleared at the device before it was taken does not arrive (0 time(s))",
    );
    // The guest discards an interrupt: the physical SPI, held active for its deactivation,
    // is deactivated by the hypervisor (docs/vgic.md, "Hardware-mapped interrupts the guest
    // discards"); without that, the next match never came.
    assert_line(
        &out,
        "rtc | ok 7 - passthrough: an edge-triggered match, pending (true), cleared through GICD_ICPENDR (true)",
    );
    assert_line(&out, "rtc | ok 8 - passthrough: the next match arrives after one the guest discarded (1 time(s))");
    assert_line(&out, "other | ok 1 - passthrough: without the device, reading 0x9010fe0 is a data abort");
    assert_line(&out, "hypervisor: vm0 rtc ended: PoweredOff (clean)");
    assert_line(&out, "hypervisor: vm0 rtc: passthrough SPI INTID 34 disabled and deactivated (enabled: false)");
    assert_line(&out, "hypervisor: vm0 rtc: capabilities revoked, 64 MiB returned to untyped memory");
    assert_line(&out, "hypervisor: all 2 VM(s) ended: 2 clean, 0 failed");
    assert!(!out.console.contains("vm1 other: passthrough"), "the other VM has no passthrough:\n{}", out.console);
}

fn expect(s: &mut Session, text: &str) {
    s.wait_for(text, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn destroying_the_vm_from_the_console_disables_its_spi_and_a_restarted_vm_gets_the_device_again() {
    let vm = with_rtc(test_vm("rtc", &images().passthrough, 64 << 20));
    let mut s = start_session("passthrough-destroy", Machine::default(), &[vm], Duration::from_secs(180));
    // Restarted (destroyed, then created again) while it waits for its interrupt, the SPI
    // enabled: the SPI is disabled before the capabilities go, and the new VM gets the
    // device and its interrupt again.
    expect(&mut s, "rtc | ok 2 - passthrough: RTCDR reads ");
    s.send_line("\x1drestart rtc").unwrap();
    expect(&mut s, "hypervisor: vm0 rtc: passthrough SPI INTID 34 disabled and deactivated (enabled: false)");
    expect(&mut s, "hypervisor: vm0 rtc: capabilities revoked, 64 MiB returned to untyped memory");
    expect(&mut s, "hypervisor: vm0 rtc: created again from its manifest entry");
    expect(&mut s, "rtc | ok 3 - passthrough: the PL031 match interrupt (INTID 34) arrives through the virtual GIC");
    // Destroyed from the console before it powers off.
    s.send_line("\x1ddestroy rtc").unwrap();
    expect(&mut s, "hypervisor: vm0 rtc ended: Destroyed (clean)");
    expect(&mut s, "hypervisor: vm0 rtc: passthrough SPI INTID 34 disabled and deactivated (enabled: false)");
    expect(&mut s, "hypervisor: all 1 VM(s) ended: 1 clean, 0 failed");
    let out = s.finish();
    assert!(!out.console.contains("hypervisor: panic"), "{}", out.console);
}
