//! `cargo xtask bench --board raspi4b`: the Linux boot on QEMU's Raspberry Pi 4B, in
//! instructions (`-icount shift=0`), under the hypervisor (booted from the files `cargo
//! xtask deploy rpi4` writes, as `cargo xtask qemu --board raspi4b` boots them) and directly
//! on the same board (Debian's kernel and initramfs with the same fixed device tree, as the
//! Pi's firmware would start a kernel), with the hypervisor's exits by reason during the
//! boot. Writes `target/bench/macro-rpi4.json`.
//!
//! Both sides have 4 CPUs (raspi4b has no fewer) and the kernel 512 MiB: the VM has 4 vCPUs,
//! one pinned to each CPU, and 512 MiB; directly on the board the kernel is told `mem=512M`
//! (the board's device tree declares 960 MiB; with all of it the kernel took about 24M
//! instructions more to its shell: docs/performance.md).

use super::exits::{ExitSnapshot, WorkloadExits};
use super::{boot, linux_vm, target_text, write_bench_file, Pair, BOOT_TARGET, VIRTUAL_CLOCK};
use crate::bundle::{BundleOptions, VmDevices};
use crate::deploy::{self, Rpi4Deploy, Vms};
use crate::images::Hypervisor;
use crate::linux_guest;
use crate::qemu::{Machine, QemuBoard};
use crate::util::step;
use crate::XtaskError;

/// The VM's vCPUs: one per CPU of the board, as the kernel has directly on it.
pub const VCPUS: u32 = 4;

/// The Linux boot on raspi4b, and what the hypervisor did during it.
#[derive(Clone, Debug)]
pub struct Rpi4Boot {
    /// QEMU's start to the guest's shell, in instructions.
    pub boot: Pair,
    /// Of `boot.under`, the instructions before the VM's counter started (the hypervisor's
    /// own boot and the VM's making).
    pub before_vm: f64,
    /// The VM's exits by reason from its creation to its shell.
    pub exits: WorkloadExits,
}

/// Boots Debian's arm64 guest to its shell under the hypervisor and directly on raspi4b.
pub fn linux_boot() -> Result<Rpi4Boot, XtaskError> {
    let linux = linux_guest::debian_arm64()?;
    let vm = crate::bundle::VmEntry { vcpus: VCPUS, ..linux_vm(&linux, linux_guest::BOOTARGS, VmDevices::default()) };
    // The tests' image, as every other figure of the bench (its hooks act only when a
    // bundle asks, and this one does not).
    let what = Rpi4Deploy {
        vms: Vms::Options(std::slice::from_ref(&vm)),
        options: BundleOptions::default(),
        hypervisor: Hypervisor::TestHooks,
    };
    let deployed = deploy::rpi4(&deploy::qemu_dir("bench-linux"), &what, &linux)?;
    let (files, dtb) = deploy::qemu_boot_files(&deployed.files.dir, &deployed.qemu_dtb)?;
    let machine = Machine { board: QemuBoard::Raspi4b { dtb }, icount: true, ..Machine::default() };
    step(&format!(
        "booting Linux to its shell under the hypervisor on QEMU raspi4b ({VCPUS} vCPUs on 4 CPUs, {} MiB, \
         -icount shift=0), from {}",
        vm.memory >> 20,
        files.dir.display()
    ));
    let mut b = boot(machine.command(&files.kernel, Some(&files.bundle)), true)?;
    let instructions = |ticks: f64, hz: f64| ticks * 1e9 / hz;
    let at_shell: ExitSnapshot = b.shell.exits(None)?;
    let exits = WorkloadExits {
        workload: "boot (raspi4b)".into(),
        clock: VIRTUAL_CLOCK,
        seconds: b.vm_ticks / b.hz,
        exits: at_shell,
    };
    let (under, before_vm) = (instructions(b.offset_ticks + b.vm_ticks, b.hz), instructions(b.offset_ticks, b.hz));
    b.shell.power_off();
    step("booting the same kernel and initramfs directly on QEMU raspi4b (4 CPUs, mem=512M, the same device tree)");
    let mut cmd = machine.command(&linux.kernel, Some(&linux.initrd));
    cmd.arg("-append").arg(format!("{} mem={}M", linux_guest::BOOTARGS, vm.memory >> 20));
    let n = boot(cmd, false)?;
    let native = instructions(n.vm_ticks, n.hz);
    // Not `poweroff`: directly on raspi4b the kernel has no PSCI and no watchdog driver
    // loaded to power the board off, so it would only halt. The figure is taken; dropping
    // the session stops QEMU.
    drop(n);
    Ok(Rpi4Boot { boot: Pair { under, native }, before_vm, exits })
}

/// The table, and `target/bench/macro-rpi4.json`.
pub fn report(b: &Rpi4Boot) -> Result<String, XtaskError> {
    write_bench_file("macro-rpi4.json", &json(b))?;
    Ok(table(b))
}

fn table(b: &Rpi4Boot) -> String {
    let mut table = super::boot_table("Raspberry Pi 4 (QEMU raspi4b; instructions)", &b.boot);
    table.push_str(&format!("  (under the hypervisor, {:.1}M of them before the VM was created)\n", b.before_vm / 1e6));
    table
}

fn json(b: &Rpi4Boot) -> String {
    let reasons: Vec<String> = b.exits.exits.by_reason.iter().map(|(reason, n)| format!("\"{reason}\": {n}")).collect();
    format!(
        "{{\n  \"unit\": \"instructions (-icount shift=0)\",\n  \"board\": \"QEMU raspi4b, 4 CPUs; the VM {VCPUS} \
         vCPUs and 512 MiB, the kernel directly on the board mem=512M\",\n  \"linux_boot_to_shell\": \
         {{\"hypervisor\": {:.0}, \"native\": {:.0}, \"ratio\": {:.4}, \"target\": \"{}\"}},\n  \
         \"before_vm_created\": {:.0},\n  \"boot_exits\": {{\"total\": {}, {}}}\n}}\n",
        b.boot.under,
        b.boot.native,
        b.boot.ratio(),
        target_text(BOOT_TARGET),
        b.before_vm,
        b.exits.exits.total,
        reasons.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(under: f64) -> Rpi4Boot {
        let exits = ExitSnapshot {
            total: 37170,
            by_reason: [("data-abort".to_string(), 35362), ("timer-irq".to_string(), 1808)].into_iter().collect(),
        };
        Rpi4Boot {
            boot: Pair { under, native: 1_196_193_344.0 },
            before_vm: 19_848_288.0,
            exits: WorkloadExits { workload: "boot (raspi4b)".into(), clock: VIRTUAL_CLOCK, seconds: 1.2, exits },
        }
    }

    #[test]
    fn the_table_gives_both_boots_their_ratio_and_whether_the_target_is_met() {
        let text = table(&figures(1_215_961_888.0));
        assert!(text.contains("Linux boot to shell           1216.0M      1196.2M   1.0165  <= 1.05   yes"), "{text}");
        assert!(text.contains("(under the hypervisor, 19.8M of them before the VM was created)"), "{text}");
        let missed = table(&figures(1_300_000_000.0));
        assert!(missed.contains("1.0868  <= 1.05    NO"), "{missed}");
    }

    #[test]
    fn the_json_has_the_figures_the_ratio_and_the_boot_s_exits() {
        let text = json(&figures(1_215_961_888.0));
        assert!(text.contains(
            "\"linux_boot_to_shell\": {\"hypervisor\": 1215961888, \"native\": 1196193344, \"ratio\": 1.0165, \"target\": \"<= 1.05\"}"
        ), "{text}");
        assert!(text.contains("\"before_vm_created\": 19848288"), "{text}");
        assert!(
            text.contains("\"boot_exits\": {\"total\": 37170, \"data-abort\": 35362, \"timer-irq\": 1808}"),
            "{text}"
        );
    }
}
