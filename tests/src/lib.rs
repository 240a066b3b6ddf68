//! Shared by the system tests: build the images once per test binary, write a bundle, boot
//! QEMU with a timeout, and return what the console showed.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use xtask::bundle::{self, BundleOptions, Placement, Policy, VmDevices, VmEntry};
use xtask::images::{self, Hypervisor};
use xtask::qemu::{self, Machine, RunOutput, Session};

/// Every QEMU run of the system tests stops after this long, whatever happens.
pub const QEMU_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Images {
    /// The hypervisor with the test hooks (the semihosting exit every `boot` relies on for
    /// its status, the deliberate EL2 fault); `deployed_hypervisor` is the one without.
    pub hypervisor: PathBuf,
    pub selftest: PathBuf,
    pub isolation_secret: PathBuf,
    pub isolation_probe: PathBuf,
    pub gic: PathBuf,
    pub microbench: PathBuf,
    pub spinner: PathBuf,
    pub passthrough: PathBuf,
    pub leak_secret: PathBuf,
    pub leak_reader: PathBuf,
    pub setway_storm: PathBuf,
    pub watcher: PathBuf,
    pub ticker: PathBuf,
    pub hostile: PathBuf,
    pub bystander: PathBuf,
    pub disk_faults: PathBuf,
    pub disk_writer: PathBuf,
    pub rebooter: PathBuf,
}

/// Builds the hypervisor and the test guests (once per test binary).
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let hypervisor =
            images::build_hypervisor(Hypervisor::TestHooks).unwrap_or_else(|e| panic!("building the hypervisor: {e}"));
        let guest =
            |name: &str| images::build_test_guest(name).unwrap_or_else(|e| panic!("building the guest {name}: {e}"));
        Images {
            hypervisor,
            selftest: guest("selftest"),
            isolation_secret: guest("isolation-secret"),
            isolation_probe: guest("isolation-probe"),
            gic: guest("gic"),
            microbench: guest("microbench"),
            spinner: guest("spinner"),
            passthrough: guest("passthrough"),
            leak_secret: guest("leak-secret"),
            leak_reader: guest("leak-reader"),
            setway_storm: guest("setway-storm"),
            watcher: guest("watcher"),
            ticker: guest("ticker"),
            hostile: guest("hostile"),
            bystander: guest("bystander"),
            disk_faults: guest("disk-faults"),
            disk_writer: guest("disk-writer"),
            rebooter: guest("rebooter"),
        }
    })
}

/// The hypervisor as a user deploys it, without the test hooks (built once per test binary
/// that asks for it).
pub fn deployed_hypervisor() -> &'static PathBuf {
    static DEPLOYED: OnceLock<PathBuf> = OnceLock::new();
    DEPLOYED.get_or_init(|| {
        images::build_hypervisor(Hypervisor::Deployed)
            .unwrap_or_else(|e| panic!("building the deployed hypervisor: {e}"))
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
    boot_with_options(test, machine, vms, BundleOptions { semihosting_exit: true, test_el2_fault: None })
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
        devices: VmDevices::default(),
    }
}

/// `vm` with its vCPUs on `cpus` (vCPU n on the n-th), pinned or sharing them.
pub fn placed(mut vm: VmEntry, cpus: &[u32], policy: Policy) -> VmEntry {
    vm.devices.placement = Placement { cpus: Some(cpus.to_vec()), policy: Some(policy), slice_us: None };
    vm
}

/// Asserts that `line` occurs in the console, showing the console when it does not.
pub fn assert_line(out: &RunOutput, line: &str) {
    assert!(
        out.console.lines().any(|l| l.contains(line)),
        "expected a line containing {line:?}; console:\n{}",
        out.console
    );
}

/// Asserts that `output` (of `run`) has `line` as one of its lines: the guest kernel's own
/// messages (a network link coming up, ...) may print among a command's output.
pub fn assert_output_line(output: &str, line: &str, what: &str) {
    assert!(output.lines().any(|l| l.trim() == line), "{what}: expected the line {line:?} in:\n{output}");
}

/// The Debian arm64 kernel and BusyBox initramfs (`cargo xtask image`; cached).
pub fn linux() -> &'static xtask::linux_guest::LinuxGuest {
    static LINUX: OnceLock<xtask::linux_guest::LinuxGuest> = OnceLock::new();
    LINUX.get_or_init(|| xtask::linux_guest::debian_arm64().unwrap_or_else(|e| panic!("the Linux guest: {e}")))
}

/// The Debian armhf kernel (a zImage, run in AArch32) and BusyBox initramfs (cached).
pub fn linux_armhf() -> &'static xtask::linux_guest::LinuxGuest {
    static LINUX: OnceLock<xtask::linux_guest::LinuxGuest> = OnceLock::new();
    LINUX.get_or_init(|| xtask::linux_guest::debian_armhf().unwrap_or_else(|e| panic!("the armhf Linux guest: {e}")))
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
        devices: VmDevices::default(),
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
pub fn start_session(test: &str, machine: Machine, vms: &[VmEntry], timeout: Duration) -> Session {
    let blob = bundle::write(vms, &BundleOptions::default()).unwrap_or_else(|e| panic!("bundle: {e}"));
    let path = scratch_file(&format!("{test}.bundle"));
    std::fs::write(&path, blob).expect("write bundle");
    Session::start(machine.command(&images().hypervisor, Some(&path)), timeout, false)
        .unwrap_or_else(|e| panic!("running QEMU: {e}"))
}

/// The whole run; each step below has its own, shorter limit.
pub const RUN_LIMIT: Duration = Duration::from_secs(600);
pub const BOOT_LIMIT: Duration = Duration::from_secs(300);
pub const COMMAND_LIMIT: Duration = Duration::from_secs(120);
pub const PROMPT: &str = "/ # ";

/// Waits for the shell the initramfs starts.
pub fn wait_for_shell(s: &mut Session) {
    s.wait_for("guest: Linux", BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}

/// Waits for the shell of `console_vm`, the VM with the console, and for `lines` the other
/// VMs print while they boot, in any order: the VMs boot at once, and the first one's
/// prompt may come before or after the others' lines.
pub fn wait_for_shell_and(s: &mut Session, console_vm: &str, lines: &[&str]) {
    // The console VM's bytes go out as they come, its prompt after its name on a line of its
    // own (hyp_core::console_lines).
    let prompt = format!("{console_vm} | {PROMPT}");
    let all: Vec<&str> = lines.iter().copied().chain([prompt.as_str()]).collect();
    s.wait_for_all(&all, BOOT_LIMIT).unwrap_or_else(|e| panic!("{e}"));
}

/// Types `command` at the shell and returns what it printed (the echoed command line left
/// out). The end marker is computed by the shell, so the echoed line cannot match it.
pub fn run(s: &mut Session, command: &str) -> String {
    s.send_line(&format!("{command}; echo @@done$((6*7))")).unwrap_or_else(|e| panic!("{e}"));
    let out = s.wait_for("@@done42", COMMAND_LIMIT).unwrap_or_else(|e| panic!("`{command}`: {e}"));
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    out.lines().skip(1).map(strip_vm_name).collect::<Vec<_>>().join("\n")
}

/// The guest's virtio console (hvc0) is its console too: what it writes there shows, and
/// what the user types goes to the console the guest wrote to last, then back to the shell
/// on the PL011 once the shell writes there again. Needs the guest's shell.
pub fn check_virtio_console(s: &mut Session) {
    // The markers are computed by the guest, so the echoed command line cannot match them.
    run(s, "echo hvc-$((40+2)) > /dev/hvc0");
    let shown = s.console();
    assert!(shown.contains("hvc-42"), "what the guest wrote to hvc0 is on the console:\n{shown}");
    // The guest writes to hvc0 last, then reads it: typed input goes there, not to the shell.
    // What it read is written back to hvc0, after hvc0's own echo of the typed line: on the
    // PL011 the two writers would interleave character by character on the one console.
    s.send_line(
        "exec 3</dev/hvc0; echo hvc-open-$((2*3)) > /dev/hvc0; read -r line <&3; echo \"from hvc0: [$line]\" > /dev/hvc0",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("hvc-open-6", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    s.send_line("typed-into-hvc0").unwrap_or_else(|e| panic!("{e}"));
    s.wait_for("from hvc0: [typed-into-hvc0]", COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    // Typing goes back to the shell only once it has written its prompt to the PL011.
    s.wait_for(PROMPT, COMMAND_LIMIT).unwrap_or_else(|e| panic!("{e}"));
    // The shell writes its prompt to the PL011 again, and typing goes back to it.
    let back = run(s, "echo pl011-$((50+5))");
    assert!(back.contains("pl011-55"), "input reaches the shell on the PL011 again: {back}");
    assert!(
        !s.console().contains("typed-into-hvc0: not found"),
        "the shell did not get hvc0's input:\n{}",
        s.console()
    );
}

/// A TCP port on 127.0.0.1 that nothing listens on now (for QEMU's `hostfwd`).
pub fn free_local_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// `GET /` from 127.0.0.1:`port`, retried for up to `within` (the guest's server may still
/// be starting); the whole response, headers included.
pub fn http_get(port: u16, within: Duration) -> Result<String, String> {
    use std::io::{Read, Write};
    let until = std::time::Instant::now() + within;
    let mut last_error = String::new();
    while std::time::Instant::now() < until {
        let attempt = (|| -> std::io::Result<String> {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            stream.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            Ok(response)
        })();
        match attempt {
            Ok(response) if response.starts_with("HTTP/1") => return Ok(response),
            Ok(response) => last_error = format!("an answer that is not HTTP: {response:?}"),
            Err(e) => last_error = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(format!("no HTTP answer on 127.0.0.1:{port} within {within:?}: {last_error}"))
}

/// A Linux VM with a NIC on the switch, at `address` on QEMU's user network (10.0.2.0/24).
pub fn linux_vm_on_network(name: &str, vcpus: u32, address: &str) -> VmEntry {
    let bootargs = format!("{} guest.ip={address} guest.gw=10.0.2.2", xtask::linux_guest::BOOTARGS);
    VmEntry {
        name: name.into(),
        bootargs: Some(bootargs),
        devices: VmDevices { network: Some(None), ..VmDevices::default() },
        ..linux_vm(vcpus)
    }
}

/// A console line without the `name | ` the hypervisor puts before each VM's lines.
pub fn strip_vm_name(line: &str) -> &str {
    match line.split_once(" | ") {
        Some((name, rest))
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            rest
        }
        _ => line,
    }
}
