//! Shared by the system tests: build the images once per test binary, write a bundle, boot
//! QEMU with a timeout, and return what the console showed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use xtask::bundle::{self, BundleOptions, VmEntry};
use xtask::images;
use xtask::qemu::{self, Machine, RunOutput};

/// Every QEMU run of the system tests stops after this long, whatever happens.
pub const QEMU_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Images {
    pub hypervisor: PathBuf,
    pub selftest: PathBuf,
    pub isolation_secret: PathBuf,
    pub isolation_probe: PathBuf,
    pub gic: PathBuf,
    pub microbench: PathBuf,
}

/// Builds the hypervisor and the test guests (once per test binary).
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let hypervisor = images::build_hypervisor().unwrap_or_else(|e| panic!("building the hypervisor: {e}"));
        let guest =
            |name: &str| images::build_test_guest(name).unwrap_or_else(|e| panic!("building the guest {name}: {e}"));
        Images {
            hypervisor,
            selftest: guest("selftest"),
            isolation_secret: guest("isolation-secret"),
            isolation_probe: guest("isolation-probe"),
            gic: guest("gic"),
            microbench: guest("microbench"),
        }
    })
}

/// A unique file under target/system-tests/ for this test's bundle.
pub fn scratch_file(name: &str) -> PathBuf {
    let dir = images::workspace_root().join("target").join("system-tests");
    std::fs::create_dir_all(&dir).expect("create target/system-tests");
    dir.join(name)
}

/// Boots the hypervisor with these VMs (semihosting exit on, so a failure shows in the
/// exit status) and returns the console.
pub fn boot(test: &str, machine: Machine, vms: &[VmEntry]) -> RunOutput {
    boot_with_options(test, machine, vms, BundleOptions { semihosting_exit: true, test_el2_fault_cpu: None })
}

pub fn boot_with_options(test: &str, machine: Machine, vms: &[VmEntry], options: BundleOptions) -> RunOutput {
    let blob = bundle::write(vms, &options).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    boot_image(&images().hypervisor, machine, &path)
}

pub fn boot_with_initrd(machine: Machine, initrd: &PathBuf) -> RunOutput {
    boot_image(&images().hypervisor, machine, initrd)
}

/// Boots `hypervisor` (an image file) with `initrd`, with semihosting for the exit status.
pub fn boot_image(hypervisor: &PathBuf, machine: Machine, initrd: &PathBuf) -> RunOutput {
    let machine = Machine { semihosting: true, ..machine };
    let out = qemu::run_captured(machine.command(hypervisor, Some(initrd)), QEMU_TIMEOUT, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"));
    assert!(!out.timed_out, "QEMU did not finish within {:?}; console:\n{}", QEMU_TIMEOUT, out.console);
    out
}

/// The selftest guest with 2 vCPUs (its SMP checks start the second).
pub fn selftest_vm(memory: u64) -> VmEntry {
    VmEntry { vcpus: 2, ..test_vm("selftest", &images().selftest, memory) }
}

pub fn test_vm(name: &str, kernel: &Path, memory: u64) -> VmEntry {
    VmEntry {
        name: name.into(),
        vcpus: 1,
        memory,
        kernel: kernel.to_path_buf(),
        initrd: None,
        bootargs: None,
        device_tree: None,
    }
}

/// Asserts that `line` occurs in the console, showing the console when it does not.
pub fn assert_line(out: &RunOutput, line: &str) {
    assert!(
        out.console.lines().any(|l| l.contains(line)),
        "expected a line containing {line:?}; console:\n{}",
        out.console
    );
}

/// The Debian arm64 kernel and BusyBox initramfs (`cargo xtask image`; cached).
pub fn linux() -> &'static xtask::linux_guest::LinuxGuest {
    static LINUX: OnceLock<xtask::linux_guest::LinuxGuest> = OnceLock::new();
    LINUX.get_or_init(|| xtask::linux_guest::debian_arm64().unwrap_or_else(|e| panic!("the Linux guest: {e}")))
}

/// A Linux VM with `vcpus` vCPUs and the default command line.
pub fn linux_vm(vcpus: u32) -> VmEntry {
    let l = linux();
    VmEntry {
        name: "linux".into(),
        vcpus,
        memory: 256 << 20,
        kernel: l.kernel.clone(),
        initrd: Some(l.initrd.clone()),
        bootargs: Some(xtask::linux_guest::BOOTARGS.into()),
        device_tree: None,
    }
}

/// Held by a test while its Linux guests run: several Linux boots at once on a small host
/// would oversubscribe its CPUs so much that timing-sensitive steps fail for no fault of
/// the hypervisor's (every vCPU is a QEMU thread, spinning included).
pub fn one_linux_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts the hypervisor with these VMs, as a console session; QEMU is killed after
/// `timeout` whatever happens. No semihosting: Linux guests are not trusted test guests.
pub fn start_session(test: &str, machine: Machine, vms: &[VmEntry], timeout: Duration) -> qemu::Session {
    let blob = bundle::write(vms, &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    qemu::Session::start(machine.command(&images().hypervisor, Some(&path)), timeout, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"))
}
