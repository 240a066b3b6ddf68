//! `cargo xtask <command>`: see `cargo xtask help`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use xtask::bench::trace::Isa;
use xtask::bundle::{self, BundleOptions, DiskSlice, VmDevices, VmEntry};
use xtask::deploy::{self, Rpi4Deploy, Vms};
use xtask::images::Hypervisor;
use xtask::linux_guest::DebianArch;
use xtask::manifest::{Board, DebianGuest, Manifest};
use xtask::qemu::{self, Arch, Machine, QemuBoard};
use xtask::util::{run, step};
use xtask::{bench, fuzz, images, setup, soak, XtaskError};
use xtask::{rpi4, rpi4_sd};

const HELP: &str = "\
cargo xtask <command> [options]

Commands:
  qemu    build the hypervisor and a guest, and boot them on QEMU's virt board (or the
          Raspberry Pi 4B: --board raspi4b; or, 32-bit, its Versatile Express:
          --board vexpress-a15)
  test    run every test: host tests, bare-metal builds, and the system tests under QEMU
  bench   measure the hypervisor's costs beside the same guest without it: microbenchmarks
          (and, from an instruction trace, their EL2 system register accesses, barriers,
          TLB and cache maintenance), Linux boot and sha256sum (instructions), virtio
          throughput, exits per second by
          reason; tables on stdout, JSON and ratios.svg in target/bench/ (docs/performance.md);
          --quick skips the throughput runs; --arch armv7: the ARMv7 image's microbenchmarks
          (the 32-bit guest microbench32) and Linux boot; --board raspi4b: the Linux boot on
          QEMU's Raspberry Pi 4B beside the same kernel on the board (macro-rpi4.json)
  deploy  `deploy rpi4 DIR`: write what goes on a Raspberry Pi 4's boot partition into DIR
          (config.txt, the hypervisor, the boot bundle of a manifest) and name the
          firmware files to copy beside them (docs/deploy-rpi4.md)
  image   build every image into target/images/: the hypervisor as deployed (hypervisor.Image,
          without test hooks), the test guests (AArch64 Images, AArch32 zImages), and the Debian
          Linux guests, arm64 and armhf (kernel and busybox initramfs, downloads cached)
  fuzz    run the libFuzzer targets of fuzz/ (docs/fuzzing.md): every decoder a guest or a
          file feeds; installs a nightly toolchain and cargo-fuzz if they are missing
  soak    three Linux VMs (manifests/three-vms.toml) with disk and network traffic for a
          long while; samples the hypervisor's heap and fails on any error or heap growth
  help    this text

Options of `qemu`:
  --board BOARD    virt (default), raspi4b or vexpress-a15.
                   raspi4b: QEMU's Raspberry Pi 4B, started as the Pi's firmware starts a
                   kernel (the image at 0x80000, the device tree in x0, EL2, the other CPUs
                   in a spin table), with Debian's bcm2711-rpi-4-b.dtb fixed up for QEMU
                   (each change printed; docs/deploy-rpi4.md). The board fixes CPUs, GIC
                   and RAM, and has no virtio-mmio disk or NIC: the linux guest gets no
                   disk and a NIC on the hypervisor's switch only.
                   vexpress-a15 (with --arch armv7): ARM's Versatile Express with a
                   CoreTile A15 (`-M vexpress-a15,secure=off,virtualization=on`, 2 CPUs,
                   its GICv2, its UART as the console), described by Debian's
                   vexpress-v2p-ca15-tc1.dtb from the armhf kernel package; the linux
                   guest only, no manifest
  --arch ARCH      aarch64 (default) or armv7: the ARMv7 image (HYP mode) on qemu-system-arm
                   `-M virt,highmem=off -cpu cortex-a15`, GICv2 and 2 CPUs unless --gic and
                   --smp say otherwise, with the Debian armhf Linux guest (a 32-bit
                   zImage) as the linux guest, or a manifest's VMs (32-bit kernels
                   only: manifests/armv7-two-vms.toml); --guest selftest is aarch64 only
  --manifest FILE  boot the VMs a manifest describes (docs/manifest.md; examples in
                   manifests/), on the board of its [board] unless --smp/--memory say
                   otherwise; checked before anything boots. Its board disk is
                   vm-disks/<manifest name>.img (1 GiB, created empty) unless --disk
  --guest NAME     the guest to run: `linux` (default: Debian arm64 with a BusyBox shell on
                   this terminal) or `selftest` (checks the hypervisor from the inside, then
                   ends; on the tests' image, hypervisor-test-hooks.Image, whose semihosting
                   exit gives QEMU a failure status)
  --kernel FILE    the linux guest's kernel (an arm64 Image; default: Debian's)
  --initrd FILE    its initramfs (default: the BusyBox one `cargo xtask image` builds)
  --append ARGS    its command line (default: `console=ttyAMA0 earlycon`)
  --dtb FILE       its device tree, instead of the one the hypervisor generates (the
                   hypervisor still sets /chosen: command line and initramfs)
  --disk FILE      the linux guest's virtio disk, a raw image (default: vm-disks/linux.img,
                   1 GiB, created empty on first use and kept between runs)
  --sd FILE        raspi4b: the SD card in the SDHCI's slot (QEMU's -drive if=sd), a raw
                   image whose size is a power of two; default, when a manifest's VM owns the
                   SDHCI: vm-disks/<manifest name>-sd.img (64 MiB, one ext4 partition,
                   created on first use and kept)
  --http-port N    the host port (on 127.0.0.1) forwarded to the guest's port 80, where its
                   httpd answers (default 8080)
  --vcpus N        the linux guest's vCPUs, 1 to 4 (default 2)
  --vm-memory MIB  the linux guest's RAM (default 512)
  --gic 2|3        GIC version of the board (default 3)
  --smp N          physical CPUs (default 4)
  --memory MIB     board RAM in MiB (default 1024)
  --timeout SECS   stop QEMU after this long (default: none for linux, 120 for selftest)

Options of `bench`:
  --quick          the microbenchmarks and the Linux boot + sha256sum run only (about a
                   third of the time): the virtio throughput runs, their exits and their
                   bars in ratios.svg are skipped
  --io             the virtio runs only: throughput with and without a side core, their
                   exits by reason, the cost of a request under -icount (io-cost.json)
  --io-cost        the cost of a virtio request alone, under -icount: exits per 1 MiB disk
                   request and per packet received and sent, with and without a side core
                   (io-cost.json; the deterministic part of --io, without its throughput runs)
  --io-trace       the virtio paths traced, with and without a side core: EL2
                   instructions per 1 MiB disk request and per TCP packet received and
                   sent, per CPU and by function (io-trace.txt; several minutes)
  --scale          32 Linux VMs (1 vCPU, 128 MiB, 8 to a CPU) on a 4-CPU board with 8 GiB:
                   each reaches its shell, answers a command and a ping; boot times against
                   one VM alone, CPU shares under load, heap per VM, bundle size (scale.json)

Options of `deploy rpi4 DIR`: DIR must be empty, new, or a previous deploy
  --manifest FILE  the VMs (default manifests/rpi4-two-vms.toml), checked against the Pi 4
                   as QEMU raspi4b describes it (4 CPUs, 960 MiB)

Options of `fuzz`: [TARGET...] (default: all), and one of
  --time SECS      run each target this long (default 60)
  --runs N         run each target for N executions

Options of `soak`:
  --minutes N      how long the workloads run (default 30)

To leave the linux guest: `poweroff` (the VM ends, then QEMU), or Ctrl-A then X.

Missing tools are installed first: Rust targets with rustup, QEMU 10 from Debian
bookworm-backports with apt-get (as root; otherwise the command to run is printed).
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("qemu") => cmd_qemu(&args[1..]),
        Some("test") => cmd_test(&args[1..]),
        Some("bench") => cmd_bench(&args[1..]),
        Some("deploy") => cmd_deploy(&args[1..]),
        Some("fuzz") => cmd_fuzz(&args[1..]),
        Some("soak") => cmd_soak(&args[1..]),
        Some("build") | Some("image") => cmd_image(),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(XtaskError::Usage(format!("unknown command `{other}`; see `cargo xtask help`"))),
    };
    if let Err(e) = result {
        eprintln!("xtask: error: {e}");
        std::process::exit(match e {
            XtaskError::Usage(_) => 2,
            _ => 1,
        });
    }
}

/// The hypervisor (`kind`) and the selftest guest.
fn build_all(kind: Hypervisor) -> Result<(PathBuf, PathBuf), XtaskError> {
    let hyp = images::build_hypervisor(kind)?;
    let guest = images::build_test_guest("selftest")?;
    step(&format!("images: {} and {}", hyp.display(), guest.display()));
    Ok((hyp, guest))
}

/// The boards `cargo xtask qemu --board` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BoardName {
    Virt,
    Raspi4b,
    VexpressA15,
}

#[derive(Debug)]
struct QemuArgs {
    guest: String,
    /// `--board`: which QEMU board (the device tree of `raspi4b` or `vexpress-a15` is made
    /// or found when the run starts, from the guest's kernel package).
    board: BoardName,
    machine: Machine,
    timeout: Option<u64>,
    vcpus: u32,
    vm_memory_mib: u64,
    kernel: Option<PathBuf>,
    initrd: Option<PathBuf>,
    append: Option<String>,
    dtb: Option<PathBuf>,
    disk: Option<PathBuf>,
    http_port: u16,
    manifest: Option<PathBuf>,
    /// `--sd`: the SD card image of `raspi4b`.
    sd: Option<PathBuf>,
    /// The options given, in order.
    given: Vec<String>,
}

/// Options that describe the one VM of a run without a manifest.
const VM_OPTIONS: [&str; 7] = ["--guest", "--kernel", "--initrd", "--append", "--dtb", "--vcpus", "--vm-memory"];

fn parse_qemu_args(args: &[String]) -> Result<QemuArgs, XtaskError> {
    let mut parsed = QemuArgs {
        guest: "linux".into(),
        board: BoardName::Virt,
        machine: Machine::default(),
        timeout: None,
        vcpus: 2,
        vm_memory_mib: 512,
        kernel: None,
        initrd: None,
        append: None,
        dtb: None,
        disk: None,
        http_port: 8080,
        manifest: None,
        sd: None,
        given: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        parsed.given.push(flag.clone());
        let mut value = || it.next().cloned().ok_or_else(|| XtaskError::Usage(format!("{flag} needs a value")));
        let number =
            |v: String| v.parse::<u64>().map_err(|_| XtaskError::Usage(format!("{flag}: `{v}` is not a number")));
        match flag.as_str() {
            "--board" => {
                parsed.board = match value()?.as_str() {
                    "virt" => BoardName::Virt,
                    "raspi4b" => BoardName::Raspi4b,
                    "vexpress-a15" => BoardName::VexpressA15,
                    v => return Err(XtaskError::Usage(format!("--board: `{v}` is not virt, raspi4b or vexpress-a15"))),
                }
            }
            "--arch" => {
                parsed.machine.arch = match value()?.as_str() {
                    "aarch64" => Arch::Aarch64,
                    "armv7" => Arch::Armv7,
                    v => return Err(XtaskError::Usage(format!("--arch: `{v}` is not aarch64 or armv7"))),
                }
            }
            "--guest" => parsed.guest = value()?,
            "--gic" => {
                parsed.machine.gic_version = match value()?.as_str() {
                    "2" => 2,
                    "3" => 3,
                    v => return Err(XtaskError::Usage(format!("--gic: `{v}` is not 2 or 3"))),
                }
            }
            "--smp" => parsed.machine.smp = number(value()?)? as u32,
            "--memory" => parsed.machine.memory_mib = number(value()?)? as u32,
            "--timeout" => parsed.timeout = Some(number(value()?)?),
            "--vcpus" => parsed.vcpus = number(value()?)? as u32,
            "--vm-memory" => parsed.vm_memory_mib = number(value()?)?,
            "--kernel" => parsed.kernel = Some(existing_file(flag, value()?)?),
            "--initrd" => parsed.initrd = Some(existing_file(flag, value()?)?),
            "--dtb" => parsed.dtb = Some(existing_file(flag, value()?)?),
            "--append" => parsed.append = Some(value()?),
            "--disk" => parsed.disk = Some(existing_file(flag, value()?)?),
            "--manifest" => parsed.manifest = Some(existing_file(flag, value()?)?),
            "--sd" => parsed.sd = Some(existing_file(flag, value()?)?),
            "--http-port" => {
                parsed.http_port = u16::try_from(number(value()?)?)
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| XtaskError::Usage(format!("{flag}: not a TCP port (1-65535)")))?
            }
            other => return Err(XtaskError::Usage(format!("unknown option `{other}`; see `cargo xtask help`"))),
        }
    }
    if let Some(flag) =
        parsed.manifest.as_ref().and_then(|_| parsed.given.iter().find(|f| VM_OPTIONS.contains(&f.as_str())))
    {
        return Err(XtaskError::Usage(format!("{flag}: the manifest describes the VMs; change it there")));
    }
    if !["selftest", "linux"].contains(&parsed.guest.as_str()) {
        return Err(XtaskError::Usage(format!("unknown guest `{}`: the guests are: linux, selftest", parsed.guest)));
    }
    let linux_only = [("--kernel", parsed.kernel.is_some()), ("--initrd", parsed.initrd.is_some())]
        .into_iter()
        .chain([("--append", parsed.append.is_some()), ("--dtb", parsed.dtb.is_some())])
        .chain([("--disk", parsed.disk.is_some())]);
    if let Some((flag, _)) = linux_only.filter(|(_, given)| *given).find(|_| parsed.guest != "linux") {
        return Err(XtaskError::Usage(format!("{flag} is for the linux guest, not `{}`", parsed.guest)));
    }
    if !(1..=4).contains(&parsed.vcpus) {
        return Err(XtaskError::Usage(format!("--vcpus: {} is not between 1 and 4", parsed.vcpus)));
    }
    if parsed.sd.is_some() && parsed.board != BoardName::Raspi4b {
        return Err(XtaskError::Usage("--sd: an SD card is for --board raspi4b (its SDHCI's slot)".into()));
    }
    if parsed.board == BoardName::Raspi4b {
        let fixed = ["--arch", "--gic", "--smp", "--memory", "--disk", "--http-port"];
        if let Some(flag) = parsed.given.iter().find(|f| fixed.contains(&f.as_str())) {
            return Err(XtaskError::Usage(format!(
                "{flag}: not with --board raspi4b, whose board fixes it (an AArch64 Cortex-A72 board with a \
                 GIC-400, 4 CPUs and 2 GiB, no virtio-mmio disk or NIC)"
            )));
        }
    }
    if parsed.machine.arch == Arch::Armv7 {
        if parsed.guest != "linux" {
            return Err(XtaskError::Usage(format!(
                "--guest {}: --arch armv7 boots the linux guest only",
                parsed.guest
            )));
        }
        let given = |flag: &str| parsed.given.iter().any(|f| f == flag);
        parsed.machine.cpu = "cortex-a15".into();
        if !given("--gic") {
            parsed.machine.gic_version = 2;
        }
        if !given("--smp") {
            parsed.machine.smp = 2;
        }
    }
    if parsed.board == BoardName::VexpressA15 {
        let given = |flag: &str| parsed.given.iter().any(|f| f == flag);
        if parsed.machine.arch != Arch::Armv7 {
            return Err(XtaskError::Usage(
                "--board vexpress-a15: its CPUs are 32-bit Cortex-A15s; add --arch armv7".into(),
            ));
        }
        if parsed.manifest.is_some() {
            return Err(XtaskError::Usage(
                "--board vexpress-a15 boots the linux guest; a manifest is checked against QEMU's virt board".into(),
            ));
        }
        if given("--gic") && parsed.machine.gic_version != 2 {
            return Err(XtaskError::Usage("--gic: vexpress-a15's GIC is the Cortex-A15's own, a GICv2".into()));
        }
        if !(1..=2).contains(&parsed.machine.smp) {
            return Err(XtaskError::Usage(format!(
                "--smp {}: vexpress-a15's device tree describes 2 CPUs",
                parsed.machine.smp
            )));
        }
    }
    Ok(parsed)
}

/// A file the user named: it must exist now, not fail later inside the bundle writer.
fn existing_file(flag: &str, path: String) -> Result<PathBuf, XtaskError> {
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(path)
    } else {
        Err(XtaskError::Usage(format!("{flag}: {} is not a file", path.display())))
    }
}

fn cmd_qemu(args: &[String]) -> Result<(), XtaskError> {
    let args = parse_qemu_args(args)?;
    setup::ensure_rust_targets()?;
    setup::ensure_qemu()?;
    if args.board == BoardName::Raspi4b {
        qemu_raspi4b(args)
    } else if args.manifest.is_some() {
        qemu_manifest(args)
    } else if args.guest == "linux" {
        qemu_linux(args)
    } else {
        qemu_selftest(args)
    }
}

/// The Linux guest, interactive on this terminal.
/// On `--arch armv7`: the ARMv7 image in HYP mode and Debian's armhf guest on a Cortex-A15.
fn qemu_linux(args: QemuArgs) -> Result<(), XtaskError> {
    let (hyp, debian) = match args.machine.arch {
        Arch::Aarch64 => (images::build_hypervisor(Hypervisor::Deployed)?, DebianArch::Arm64),
        Arch::Armv7 => (images::build_hypervisor_armv7()?, DebianArch::Armhf),
    };
    let (kernel, initrd, linux) = match args.kernel {
        Some(kernel) => (kernel, args.initrd, None),
        None => {
            let linux = xtask::linux_guest::debian(debian)?;
            (linux.kernel.clone(), Some(args.initrd.unwrap_or_else(|| linux.initrd.clone())), Some(linux))
        }
    };
    // How the run ends too: no PSCI on Versatile Express, the hypervisor cannot turn it off.
    let (board, board_name, to_leave) = if args.board == BoardName::VexpressA15 {
        // Its device tree is in Debian's armhf kernel package, whichever kernel the guest runs.
        let linux = match linux {
            Some(linux) => linux,
            None => xtask::linux_guest::debian(DebianArch::Armhf)?,
        };
        let dtb = linux.board_device_tree(qemu::VEXPRESS_A15_DTB)?;
        let name = format!("vexpress-a15, {}", dtb.display());
        let leave = "to leave: press Ctrl-A then X (`poweroff` ends the VM, but this board has no PSCI to end QEMU)";
        (QemuBoard::VexpressA15 { dtb }, name, leave)
    } else {
        let leave =
            "to leave: `poweroff` in the guest ends the VM and QEMU; or press Ctrl-A then X to stop QEMU at once";
        (QemuBoard::Virt, "virt".to_string(), leave)
    };
    let disk = match args.disk {
        Some(disk) => disk,
        None => images::default_disk()?,
    };
    let bootargs = args
        .append
        .unwrap_or_else(|| format!("{} {}", xtask::linux_guest::BOOTARGS, xtask::linux_guest::NETWORK_BOOTARGS));
    let vm = VmEntry {
        name: "linux".into(),
        vcpus: args.vcpus,
        memory: args.vm_memory_mib << 20,
        kernel,
        initrd,
        bootargs: Some(bootargs),
        device_tree: args.dtb,
        devices: VmDevices { disk: Some(DiskSlice { offset: 0, size: 0 }), network: Some(None), ..Default::default() },
    };
    // No semihosting: the guest is not a trusted test guest (semihosting reaches the host).
    let bundle_path = bundle::write_file("linux", &[vm], &BundleOptions::default())?;
    let machine =
        Machine { board, disk: Some(disk.clone()), network: Some(vec![(args.http_port, 80)]), ..args.machine };
    if (machine.smp as u64) < u64::from(args.vcpus) {
        return Err(XtaskError::Usage(format!(
            "{} vCPUs need {} physical CPUs (each vCPU has its own); raise --smp",
            args.vcpus, args.vcpus
        )));
    }
    step(&format!(
        "booting the hypervisor and Linux ({} vCPUs, {} MiB) on QEMU {board_name} ({}, GICv{}, {} CPUs, {} MiB)",
        args.vcpus, args.vm_memory_mib, machine.cpu, machine.gic_version, machine.smp, machine.memory_mib
    ));
    step(&format!(
        "its disk is /dev/vda ({}); its httpd answers on http://127.0.0.1:{}/",
        disk.display(),
        args.http_port
    ));
    step(to_leave);
    run_on_terminal(machine.command(&hyp, Some(&bundle_path)), args.timeout)
}

/// The VMs of a manifest, interactive on this terminal (the first VM to write to the
/// console gets its input).
fn qemu_manifest(args: QemuArgs) -> Result<(), XtaskError> {
    let path = args.manifest.clone().expect("qemu_manifest runs with --manifest");
    let stem = path.file_stem().map_or("manifest".into(), |s| s.to_string_lossy().into_owned());
    let manifest = Manifest::load(&path, &mut |arch| {
        let linux = xtask::linux_guest::debian(arch)?;
        Ok(DebianGuest { kernel: linux.kernel, initrd: linux.initrd })
    })?;
    let given = |flag: &str| args.given.iter().any(|f| f == flag);
    let smp = if given("--smp") { args.machine.smp } else { manifest.board_cpus.unwrap_or(args.machine.smp) };
    let memory_mib = if given("--memory") {
        args.machine.memory_mib
    } else {
        manifest.board_memory_mib.unwrap_or(args.machine.memory_mib)
    };
    let disk = match (&args.disk, manifest.wants_disk()) {
        (Some(disk), _) => Some(disk.clone()),
        (None, true) => {
            let disk = images::workspace_root().join("vm-disks").join(format!("{stem}.img"));
            images::create_disk(&disk, images::DISK_SIZE)?;
            Some(disk)
        }
        (None, false) => None,
    };
    let disk_size = match &disk {
        None => None,
        Some(d) => Some(
            std::fs::metadata(d)
                .map_err(|e| XtaskError::Usage(format!("--disk: cannot read {}: {e}", d.display())))?
                .len(),
        ),
    };
    let board = Board::qemu_virt(smp, memory_mib, disk_size);
    // No semihosting: the guests are not trusted test guests (semihosting reaches the host).
    let blob = manifest.bundle(&board, &BundleOptions::default())?;
    let bundle_path = images::images_dir().join(format!("{stem}.bundle"));
    std::fs::create_dir_all(images::images_dir())
        .and_then(|_| std::fs::write(&bundle_path, blob))
        .map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", bundle_path.display())))?;
    step(&format!("{}: the VMs pass every check: {}", path.display(), manifest.summary()));
    let hyp = match args.machine.arch {
        Arch::Aarch64 => images::build_hypervisor(Hypervisor::Deployed)?,
        Arch::Armv7 => images::build_hypervisor_armv7()?,
    };
    let network = manifest.wants_network().then(|| vec![(args.http_port, 80)]);
    let machine = Machine { smp, memory_mib, disk: disk.clone(), network, ..args.machine };
    step(&format!(
        "booting the hypervisor and {} VMs on QEMU virt ({}, GICv{}, {} CPUs, {} MiB)",
        manifest.vms.len(),
        machine.cpu,
        machine.gic_version,
        machine.smp,
        machine.memory_mib
    ));
    if let Some(disk) = &disk {
        step(&format!("the board disk is {}; each VM's /dev/vda is its slice of it", disk.display()));
    }
    if machine.network.is_some() {
        step(&format!("http://127.0.0.1:{}/ reaches the guest at 10.0.2.15", args.http_port));
    }
    step("to leave: `poweroff` in every guest ends the run; or press Ctrl-A then X to stop QEMU at once");
    run_on_terminal(machine.command(&hyp, Some(&bundle_path)), args.timeout)
}

/// The hypervisor on QEMU `raspi4b` (docs/deploy-rpi4.md), with the linux guest on this
/// terminal, a manifest's VMs, or the selftest guest: the files `cargo xtask deploy rpi4`
/// writes, written by the same code into `target/rpi4-boot/NAME/` and booted as the Pi's
/// firmware boots them (the kernel and initramfs `config.txt` names, at the firmware's
/// address; Debian's device tree of the Pi 4 with the fix-ups QEMU needs, each printed).
fn qemu_raspi4b(args: QemuArgs) -> Result<(), XtaskError> {
    let linux = xtask::linux_guest::debian(DebianArch::Arm64)?;
    let selftest = args.guest == "selftest";
    let manifest = match &args.manifest {
        Some(path) => Some(Manifest::load(path, &mut |arch| {
            let linux = xtask::linux_guest::debian(arch)?;
            Ok(DebianGuest { kernel: linux.kernel, initrd: linux.initrd })
        })?),
        None => None,
    };
    let vm = if selftest {
        selftest_vm(images::build_test_guest("selftest")?)
    } else {
        let (kernel, initrd) = match (args.kernel, args.initrd) {
            (Some(kernel), initrd) => (kernel, initrd),
            (None, initrd) => (linux.kernel.clone(), Some(initrd.unwrap_or(linux.initrd.clone()))),
        };
        // The board has no NIC to be the switch's uplink: eth0 reaches the switch's other
        // ports only, so no gateway.
        let bootargs = args.append.unwrap_or_else(|| format!("{} guest.ip=10.0.2.15", xtask::linux_guest::BOOTARGS));
        VmEntry {
            name: "linux".into(),
            vcpus: args.vcpus,
            memory: args.vm_memory_mib << 20,
            kernel,
            initrd,
            bootargs: Some(bootargs),
            device_tree: args.dtb,
            devices: VmDevices { network: Some(None), ..Default::default() },
        }
    };
    let (name, vms) = match &manifest {
        Some(m) => {
            (m.path.file_stem().map_or("manifest".into(), |s| s.to_string_lossy().into_owned()), Vms::Manifest(m))
        }
        None => (vm.name.clone(), Vms::Options(std::slice::from_ref(&vm))),
    };
    let (hypervisor, options) = if selftest {
        (Hypervisor::TestHooks, BundleOptions { semihosting_exit: true, test_el2_fault: None })
    } else {
        (Hypervisor::Deployed, BundleOptions::default())
    };
    let what = Rpi4Deploy { vms, options, hypervisor };
    let deployed = deploy::rpi4(&deploy::qemu_dir(&name), &what, &linux)?;
    let (files, dtb) = deploy::qemu_boot_files(&deployed.files.dir, &deployed.qemu_dtb)?;
    step(&format!(
        "the boot partition `cargo xtask deploy rpi4` writes, in {}; QEMU loads what its config.txt names, as the \
         firmware does: {} at {:#x}, {} as the initramfs, {} as the firmware's device tree",
        files.dir.display(),
        files.kernel.display(),
        rpi4::FIRMWARE_LOAD_ADDRESS,
        files.bundle.display(),
        dtb.display()
    ));
    let summary = match &manifest {
        Some(m) => m.summary(),
        None => format!("{} ({} vCPUs, {} MiB)", vm.name, vm.vcpus, vm.memory >> 20),
    };
    step(&format!(
        "booting the hypervisor and {summary} on QEMU raspi4b (4 Cortex-A72s, GIC-400; the device tree declares \
         {} MiB of the 2 GiB QEMU maps)",
        deployed.board.memory_mib
    ));
    let owner = match &manifest {
        Some(m) => rpi4_sd::sdhci_owner(
            &m.vms,
            &std::fs::read(&dtb).map_err(|e| XtaskError::Build(format!("{}: {e}", dtb.display())))?,
        )?
        .map(|vm| vm.name.clone()),
        None => None,
    };
    let card = match (args.sd, &owner) {
        (Some(card), _) => Some(card),
        (None, Some(_)) => {
            let card = images::workspace_root().join("vm-disks").join(format!("{name}-sd.img"));
            rpi4_sd::ensure_card(&card)?;
            Some(card)
        }
        (None, None) => None,
    };
    let machine = Machine { board: QemuBoard::Raspi4b { dtb }, semihosting: selftest, ..args.machine };
    let mut cmd = machine.command(&files.kernel, Some(&files.bundle));
    if let Some(card) = &card {
        step(&format!(
            "the SD card {} in the SDHCI's slot{}",
            card.display(),
            owner.map_or(" (no VM owns the SDHCI)".into(), |vm| format!(", for VM {vm}, which owns the SDHCI"))
        ));
        cmd.args(rpi4_sd::sd_card_args(card));
    }
    if selftest {
        return run_selftest(cmd, Duration::from_secs(args.timeout.unwrap_or(120)));
    }
    step("the VMs' virtio devices (console, NIC on the switch) are the hypervisor's own; the board has none");
    if manifest.is_some() {
        step("Ctrl-] opens the management console (`list`, `focus NAME`, ...; docs/management.md)");
        step("to leave: `poweroff` in every guest ends the run; or press Ctrl-A then X to stop QEMU at once");
    } else {
        step("to leave: `poweroff` in the guest ends the VM and QEMU; or press Ctrl-A then X to stop QEMU at once");
    }
    run_on_terminal(cmd, args.timeout)
}

/// QEMU on this terminal until it exits (0: every VM ended cleanly) or the timeout.
fn run_on_terminal(cmd: std::process::Command, timeout: Option<u64>) -> Result<(), XtaskError> {
    match qemu::run_interactive(cmd, timeout.map(Duration::from_secs))? {
        None => Err(XtaskError::Failed(format!("stopped after {} s (--timeout)", timeout.unwrap_or(0)))),
        Some(0) => Ok(()),
        Some(s) => Err(XtaskError::Failed(format!("QEMU exited with status {s}"))),
    }
}

/// The selftest guest's VM: 2 vCPUs, 64 MiB, no devices.
fn selftest_vm(guest: PathBuf) -> VmEntry {
    VmEntry {
        name: "selftest".into(),
        vcpus: 2,
        memory: 64 << 20,
        kernel: guest,
        initrd: None,
        bootargs: None,
        device_tree: None,
        devices: VmDevices::default(),
    }
}

/// The selftest guest: checks the hypervisor from the inside and ends the run. A test run:
/// the image with the test hooks, whose semihosting exit makes a failure QEMU's status.
fn qemu_selftest(args: QemuArgs) -> Result<(), XtaskError> {
    let (hyp, guest) = build_all(Hypervisor::TestHooks)?;
    let vm = selftest_vm(guest);
    let bundle_path =
        bundle::write_file("selftest", &[vm], &BundleOptions { semihosting_exit: true, test_el2_fault: None })?;
    let machine = Machine { semihosting: true, ..args.machine };
    let timeout = Duration::from_secs(args.timeout.unwrap_or(120));
    step(&format!(
        "booting on QEMU virt (GICv{}, {} CPUs, {} MiB)",
        machine.gic_version, machine.smp, machine.memory_mib
    ));
    run_selftest(machine.command(&hyp, Some(&bundle_path)), timeout)
}

/// A selftest run, captured and stopped after `timeout`: passes when QEMU exits 0.
fn run_selftest(cmd: std::process::Command, timeout: Duration) -> Result<(), XtaskError> {
    step(&format!("stopping QEMU after {} s if it has not ended", timeout.as_secs()));
    let out = qemu::run_captured(cmd, timeout, true)?;
    match (out.timed_out, out.status) {
        (true, _) => {
            Err(XtaskError::Failed(format!("QEMU did not finish within {} s and was stopped", timeout.as_secs())))
        }
        (false, Some(0)) => {
            step("QEMU exited with status 0: every VM ended cleanly");
            Ok(())
        }
        (false, status) => Err(XtaskError::Failed(format!("QEMU exited with status {status:?}: a VM failed"))),
    }
}

fn cmd_test(args: &[String]) -> Result<(), XtaskError> {
    if let Some(a) = args.first() {
        return Err(XtaskError::Usage(format!("`test` takes no options (got `{a}`)")));
    }
    setup::ensure_rust_targets()?;
    setup::ensure_qemu()?;
    // xtask's host tests make an SD card image too.
    setup::ensure_e2fsprogs()?;
    let root = images::workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    setup::ensure_component("rustfmt", "fmt")?;
    step("the formatting: cargo fmt --check (rustfmt.toml; `cargo fmt --all` rewrites what it lists)");
    run(Command::new(&cargo).current_dir(&root).args(["fmt", "--all", "--", "--check"]))?;
    step("host tests: cargo test (hyp-core, hyp-runtime, stage2, vgic, vdev, sched, hyp-arch-arm, xtask)");
    run(Command::new(&cargo).current_dir(&root).arg("test"))?;
    step("the logic crates build for aarch64-unknown-none (no_std)");
    run(Command::new(&cargo)
        .current_dir(&root)
        .args(["build", "--quiet", "--target", images::AARCH64_TARGET])
        .args(["-p", "hyp-core", "-p", "hyp-runtime", "-p", "stage2", "-p", "vgic", "-p", "vdev", "-p", "sched"]))?;
    step("the shared GIC driver builds for both architectures (hyp-arch-arm: aarch64-unknown-none-softfloat, armv7a-none-eabi)");
    for target in [images::HYPERVISOR_TARGET, images::ARMV7_TARGET] {
        run(Command::new(&cargo).current_dir(&root).args([
            "build",
            "--quiet",
            "--target",
            target,
            "-p",
            "hyp-arch-arm",
        ]))?;
    }
    setup::ensure_component("clippy", "clippy")?;
    step("the lints: every `unsafe` block says why it is sound (cargo clippy: the logic crates, the image, the shared GIC driver for both architectures, the board layer, the test guests)");
    run(Command::new(&cargo).current_dir(&root).args(["clippy", "--quiet", "--all-targets"]))?;
    // The deployed image, the tests' image with the test hooks (docs/security.md, "Test
    // hooks"), the ARMv7 image with the shared crate for ARMv7, and the test guests (AArch64
    // and AArch32, with what they share).
    let bare_metal: [(&str, &[&str]); 5] = [
        (images::HYPERVISOR_TARGET, &["-p", "hyp-arch-armv8", "-p", "hyp-arch-arm", "-p", "hyp-board-qemu-virt"]),
        (
            images::HYPERVISOR_TARGET,
            &["-p", "hyp-arch-armv8", "-p", "hyp-board-qemu-virt", "--features", "hyp-arch-armv8/test-hooks"],
        ),
        (images::ARMV7_TARGET, &["-p", "hyp-arch-arm", "-p", "hyp-arch-armv7"]),
        (images::AARCH64_TARGET, &["-p", "selftest-guest", "-p", "guest-common"]),
        (images::ARMV7_TARGET, &["-p", "selftest32-guest", "-p", "guest-common"]),
    ];
    for (target, crates) in bare_metal {
        run(Command::new(&cargo)
            .current_dir(&root)
            .args(["clippy", "--quiet", "--release", "--target", target])
            .args(crates))?;
    }
    step(&format!("fuzzing: a short pass of every target ({FUZZ_SECONDS_IN_TEST} s each; docs/fuzzing.md)"));
    fuzz::ensure_tools()?;
    let results = fuzz::run(&root, &[], fuzz::Budget::Seconds(FUZZ_SECONDS_IN_TEST))?;
    eprint!("{}", fuzz::report(&results));
    if let Some(failed) = results.iter().find(|r| r.crash.is_some()) {
        return Err(XtaskError::Build(format!("fuzz target {} failed", failed.target)));
    }
    step("system tests: the hypervisor and its guests under QEMU");
    run(Command::new(&cargo).current_dir(&root).args(["test", "-p", "system-tests"]))?;
    step("all tests passed");
    Ok(())
}

/// Seconds each fuzz target runs in `cargo xtask test` (the full runs are `cargo xtask fuzz`).
const FUZZ_SECONDS_IN_TEST: u64 = 15;

fn cmd_fuzz(args: &[String]) -> Result<(), XtaskError> {
    let mut budget = fuzz::Budget::Seconds(60);
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |flag: &str| -> Result<u64, XtaskError> {
            it.next().and_then(|v| v.parse().ok()).ok_or_else(|| XtaskError::Usage(format!("{flag} needs a number")))
        };
        match arg.as_str() {
            "--time" => budget = fuzz::Budget::Seconds(number("--time")?),
            "--runs" => budget = fuzz::Budget::Runs(number("--runs")?),
            flag if flag.starts_with('-') => {
                return Err(XtaskError::Usage(format!("unknown option `{flag}` for fuzz (--time SECS, --runs N)")))
            }
            target => targets.push(target.to_string()),
        }
    }
    fuzz::ensure_tools()?;
    let results = fuzz::run(&images::workspace_root(), &targets, budget)?;
    print!("{}", fuzz::report(&results));
    match results.iter().find(|r| r.crash.is_some()) {
        Some(failed) => Err(XtaskError::Build(format!("fuzz target {} failed", failed.target))),
        None => Ok(()),
    }
}

fn cmd_soak(args: &[String]) -> Result<(), XtaskError> {
    let minutes = match args {
        [] => 30,
        [flag, n] if flag == "--minutes" => {
            n.parse().map_err(|_| XtaskError::Usage(format!("--minutes needs a number (got `{n}`)")))?
        }
        _ => return Err(XtaskError::Usage("soak takes only --minutes N".into())),
    };
    setup::ensure_rust_targets()?;
    setup::ensure_qemu()?;
    let run = soak::run(&images::workspace_root(), minutes)?;
    let verdict = soak::verdict(&run.samples, &run.work, &run.errors);
    print!("{}", soak::report(&run.samples, &run.work, &run.errors, &verdict));
    verdict.map_err(|e| XtaskError::Build(format!("soak: {e}")))
}

fn cmd_bench(args: &[String]) -> Result<(), XtaskError> {
    if let [only] = args {
        // The runs that stand alone, each with what it needs installed first.
        let run: Option<fn() -> Result<(), XtaskError>> = match only.as_str() {
            "--io" => Some(bench_io),
            "--io-cost" => Some(|| {
                bench_io_cost()?;
                step("written to target/bench/io-cost.json");
                Ok(())
            }),
            "--io-trace" => Some(bench_io_trace),
            "--scale" => Some(bench_scale),
            _ => None,
        };
        if let Some(run) = run {
            setup::ensure_rust_targets()?;
            setup::ensure_qemu()?;
            return run();
        }
    }
    let (armv7, raspi4b) = match args {
        [arch, value] if arch == "--arch" && value == "armv7" => (true, false),
        [arch, value] if arch == "--arch" && value == "aarch64" => (false, false),
        [board, value] if board == "--board" && value == "raspi4b" => (false, true),
        _ => {
            if let Some(a) = args.iter().find(|a| *a != "--quick") {
                return Err(XtaskError::Usage(format!(
                    "unknown option `{a}` for bench (--quick, --io, --io-cost, --io-trace, --scale, --arch aarch64|armv7, or \
                     --board raspi4b)"
                )));
            }
            (false, false)
        }
    };
    let quick = !args.is_empty();
    setup::ensure_rust_targets()?;
    setup::ensure_qemu()?;
    if raspi4b {
        let boot = bench::rpi4::linux_boot()?;
        print!("{}{}", bench::rpi4::report(&boot)?, bench::exits::table(std::slice::from_ref(&boot.exits)));
        step("figures written to target/bench/macro-rpi4.json");
        return Ok(());
    }
    if armv7 {
        let (under, native) = bench::micro_armv7()?;
        let micro = bench::report_armv7(&under, &native)?;
        let el2 = bench::trace::report(Isa::A32, &bench::trace::run(Isa::A32)?)?;
        let boot = bench::linux_boot_armv7()?;
        print!("{micro}{el2}{}", bench::armv7_report(&boot));
        step("figures written to target/bench/: micro-armv7.json, el2-micro-armv7.json");
        return Ok(());
    }
    let (under, native) = bench::micro()?;
    print!("{}", bench::report(&under, &native)?);
    let el2 = bench::trace::run(Isa::A64)?;
    print!("{}", bench::trace::report(Isa::A64, &el2)?);
    let linux = bench::linux_macro()?;
    print!("{}", bench::macro_report(&linux)?);
    let mut exits = linux.exits.clone();
    let io = if quick {
        step("--quick: the virtio throughput runs (disk write, disk read, TCP) are skipped; io.json is not updated");
        None
    } else {
        let io = bench::virtio_io()?;
        print!("{}", bench::io_report(&io)?);
        exits.extend(io.exits.iter().cloned());
        let cost = bench::io_cost::io_cost()?;
        print!("{}", bench::io_cost::table(&cost));
        Some(io)
    };
    print!("{}", bench::exits_report(&exits)?);
    let chart = bench::write_chart(&linux, io.as_ref())?;
    step(&format!(
        "figures written to target/bench/: micro.json, el2-micro.json, macro.json{}, exits.json; the chart of the ratios: {}",
        if quick { "" } else { ", io.json" },
        chart.display()
    ));
    Ok(())
}

/// `bench --io`: the virtio runs alone (throughput with and without a side core, their
/// exits, and the cost of a request under `-icount`).
fn bench_io() -> Result<(), XtaskError> {
    let io = bench::virtio_io()?;
    print!("{}", bench::io_report(&io)?);
    print!("{}", bench::exits_report(&io.exits)?);
    bench_io_cost()?;
    let chart = bench::write_io_chart(&io)?;
    step(&format!(
        "figures written to target/bench/: io.json, exits.json, io-cost.json; the chart: {}",
        chart.display()
    ));
    Ok(())
}

/// The cost of a virtio request under -icount, printed (`bench --io` and `--io-cost`).
fn bench_io_cost() -> Result<(), XtaskError> {
    let cost = bench::io_cost::io_cost()?;
    print!("{}", bench::io_cost::table(&cost));
    Ok(())
}

fn bench_io_trace() -> Result<(), XtaskError> {
    let windows = bench::io_trace::run()?;
    print!("{}", bench::io_trace::report(&windows));
    step("written to target/bench/io-trace.txt");
    Ok(())
}

fn bench_scale() -> Result<(), XtaskError> {
    let mut run = bench::scale::run(&bench::scale::ScaleConfig::BENCH)?;
    print!("{}", bench::scale::table(&run));
    let sharing = bench::scale::sharing_cost(4)?;
    print!("{}", bench::scale::sharing_table(&sharing));
    run.sharing = Some(sharing);
    let path = bench::scale::write_json(&run)?;
    step(&format!("figures written to {}", path.display()));
    let failures = run.failures();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(XtaskError::Failed(format!("the scale run failed: {}", failures.join("; "))))
    }
}

/// `deploy rpi4 DIR [--manifest FILE]`, parsed: the directory and the manifest.
fn parse_deploy_args(args: &[String]) -> Result<(PathBuf, PathBuf), XtaskError> {
    let usage = "usage: cargo xtask deploy rpi4 DIR [--manifest FILE]";
    let mut rest = match args {
        [board, rest @ ..] if board == "rpi4" => rest.iter(),
        [board, ..] => {
            return Err(XtaskError::Usage(format!("deploy: `{board}` is not a board deploy knows (rpi4); {usage}")))
        }
        [] => return Err(XtaskError::Usage(format!("deploy: which board? {usage}"))),
    };
    let (mut dir, mut manifest) = (None, None);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--manifest" => {
                let value = rest.next().ok_or_else(|| XtaskError::Usage("--manifest needs a value".into()))?;
                manifest = Some(existing_file(arg, value.clone())?);
            }
            flag if flag.starts_with('-') => {
                return Err(XtaskError::Usage(format!("unknown option `{flag}` for deploy; {usage}")))
            }
            given if dir.is_none() => dir = Some(PathBuf::from(given)),
            extra => {
                return Err(XtaskError::Usage(format!("deploy: one directory only (`{extra}` is a second); {usage}")))
            }
        }
    }
    let dir = dir.ok_or_else(|| XtaskError::Usage(format!("deploy rpi4: which directory? {usage}")))?;
    Ok((dir, manifest.unwrap_or_else(|| images::workspace_root().join(deploy::DEFAULT_MANIFEST))))
}

/// Writes a Raspberry Pi 4's boot partition (docs/deploy-rpi4.md).
fn cmd_deploy(args: &[String]) -> Result<(), XtaskError> {
    let (dir, manifest_path) = parse_deploy_args(args)?;
    // Refused before anything is built or fetched.
    deploy::boot_partition::check_dir(&dir)?;
    setup::ensure_rust_targets()?;
    // The manifest is checked against the board QEMU raspi4b's device tree describes.
    setup::ensure_qemu()?;
    let manifest = Manifest::load(&manifest_path, &mut |arch| {
        let linux = xtask::linux_guest::debian(arch)?;
        Ok(DebianGuest { kernel: linux.kernel, initrd: linux.initrd })
    })?;
    let linux = xtask::linux_guest::debian(DebianArch::Arm64)?;
    let what = Rpi4Deploy {
        vms: Vms::Manifest(&manifest),
        options: BundleOptions::default(),
        hypervisor: Hypervisor::Deployed,
    };
    let deployed = deploy::rpi4(&dir, &what, &linux)?;
    step(&format!("{}: {}", manifest_path.display(), manifest.summary()));
    for line in deploy::report(&deployed.files).lines() {
        step(line);
    }
    Ok(())
}

fn cmd_image() -> Result<(), XtaskError> {
    setup::ensure_rust_targets()?;
    build_all(Hypervisor::Deployed)?;
    for bin in ["isolation-secret", "isolation-probe", "microbench", "spinner", "passthrough"] {
        images::build_test_guest(bin)?;
    }
    for bin in ["selftest32", "microbench32"] {
        images::build_test_guest32(bin)?;
    }
    for arch in [DebianArch::Arm64, DebianArch::Armhf] {
        let linux = xtask::linux_guest::debian(arch)?;
        step(&format!(
            "Linux guest {} ({}): {} and {}",
            linux.release,
            arch.name(),
            linux.kernel.display(),
            linux.initrd.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<QemuArgs, String> {
        parse_qemu_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).map_err(|e| e.to_string())
    }

    #[test]
    fn with_no_arguments_the_guest_is_linux_with_2_vcpus() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.guest.as_str(), a.vcpus, a.vm_memory_mib, a.timeout), ("linux", 2, 512, None));
    }

    #[test]
    fn bad_options_are_refused_before_anything_is_built() {
        assert_eq!(parse(&["--kernel", "/no/such/Image"]).unwrap_err(), "--kernel: /no/such/Image is not a file");
        assert_eq!(parse(&["--vcpus", "5"]).unwrap_err(), "--vcpus: 5 is not between 1 and 4");
        let this_file = file!().replace("xtask/", "");
        assert_eq!(
            parse(&["--guest", "selftest", "--dtb", &this_file]).unwrap_err(),
            "--dtb is for the linux guest, not `selftest`"
        );
        assert_eq!(parse(&["--gic", "4"]).unwrap_err(), "--gic: `4` is not 2 or 3");
        assert_eq!(parse(&["--append"]).unwrap_err(), "--append needs a value");
        assert_eq!(parse(&["--manifest", "/no/such.toml"]).unwrap_err(), "--manifest: /no/such.toml is not a file");
    }

    #[test]
    fn raspi4b_takes_a_manifest_but_not_the_options_its_board_fixes() {
        let a = parse(&["--board", "raspi4b", "--vcpus", "3", "--timeout", "60"]).unwrap();
        assert_eq!(a.board, BoardName::Raspi4b);
        assert_eq!((a.vcpus, a.timeout), (3, Some(60)));
        assert_eq!(parse(&["--board", "raspi4b", "--guest", "selftest"]).unwrap().guest, "selftest");
        for flag in ["--smp", "--memory", "--gic", "--http-port"] {
            let err = parse(&["--board", "raspi4b", flag, "2"]).unwrap_err();
            assert!(err.starts_with(&format!("{flag}: not with --board raspi4b, whose board fixes it")), "{err}");
        }
        let err = parse(&["--arch", "armv7", "--board", "raspi4b"]).unwrap_err();
        assert!(err.starts_with("--arch: not with --board raspi4b"), "{err}");
        assert_eq!(parse(&["--board", "rpi5"]).unwrap_err(), "--board: `rpi5` is not virt, raspi4b or vexpress-a15");
        assert_eq!(parse(&["--board", "virt", "--smp", "2"]).unwrap().machine.smp, 2);
        let manifest = format!("{}/../manifests/rpi4-two-vms.toml", env!("CARGO_MANIFEST_DIR"));
        let a = parse(&["--board", "raspi4b", "--manifest", &manifest]).unwrap();
        assert_eq!(a.manifest.as_deref(), Some(std::path::Path::new(&manifest)));
        assert_eq!(
            parse(&["--board", "raspi4b", "--manifest", &manifest, "--vcpus", "1"]).unwrap_err(),
            "--vcpus: the manifest describes the VMs; change it there"
        );
    }

    fn deploy_args(args: &[&str]) -> Result<(PathBuf, PathBuf), String> {
        parse_deploy_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).map_err(|e| e.to_string())
    }

    #[test]
    fn deploy_rpi4_takes_a_directory_and_a_manifest_defaulting_to_the_two_vm_pi_one() {
        let (dir, manifest) = deploy_args(&["rpi4", "/mnt/boot"]).unwrap();
        assert_eq!(dir, PathBuf::from("/mnt/boot"));
        assert!(manifest.ends_with("manifests/rpi4-two-vms.toml") && manifest.is_file(), "{}", manifest.display());
        let three = format!("{}/../manifests/three-vms.toml", env!("CARGO_MANIFEST_DIR"));
        let (_, manifest) = deploy_args(&["rpi4", "--manifest", &three, "card"]).unwrap();
        assert_eq!(manifest, PathBuf::from(&three), "options before or after the directory");
        let usage = "usage: cargo xtask deploy rpi4 DIR [--manifest FILE]";
        assert_eq!(deploy_args(&[]).unwrap_err(), format!("deploy: which board? {usage}"));
        assert_eq!(
            deploy_args(&["rpi5", "d"]).unwrap_err(),
            format!("deploy: `rpi5` is not a board deploy knows (rpi4); {usage}")
        );
        assert_eq!(deploy_args(&["rpi4"]).unwrap_err(), format!("deploy rpi4: which directory? {usage}"));
        assert_eq!(
            deploy_args(&["rpi4", "a", "b"]).unwrap_err(),
            format!("deploy: one directory only (`b` is a second); {usage}")
        );
        assert_eq!(
            deploy_args(&["rpi4", "d", "--smp", "2"]).unwrap_err(),
            format!("unknown option `--smp` for deploy; {usage}")
        );
        assert_eq!(
            deploy_args(&["rpi4", "d", "--manifest", "/no/such.toml"]).unwrap_err(),
            "--manifest: /no/such.toml is not a file"
        );
    }

    #[test]
    fn armv7_is_a_cortex_a15_with_a_gicv2_and_boots_the_linux_guest() {
        let a = parse(&["--arch", "armv7"]).unwrap();
        let m = &a.machine;
        assert_eq!((m.arch, m.cpu.as_str(), m.gic_version, m.smp), (Arch::Armv7, "cortex-a15", 2, 2));
        let a = parse(&["--arch", "armv7", "--gic", "3", "--smp", "4"]).unwrap();
        assert_eq!((a.machine.gic_version, a.machine.smp), (3, 4));
        assert_eq!(parse(&["--arch", "armv7", "--vcpus", "1"]).unwrap().vcpus, 1);
        assert_eq!(
            parse(&["--arch", "armv7", "--guest", "selftest"]).unwrap_err(),
            "--guest selftest: --arch armv7 boots the linux guest only"
        );
        assert_eq!(parse(&["--arch", "x86"]).unwrap_err(), "--arch: `x86` is not aarch64 or armv7");
        let cmd = parse(&["--arch", "armv7"]).unwrap().machine.command(&PathBuf::from("hyp"), None);
        assert_eq!(cmd.get_program(), "qemu-system-arm");
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(args.contains(&"virt,virtualization=on,gic-version=2,highmem=off".to_string()), "{args:?}");
    }

    #[test]
    fn vexpress_a15_is_a_32_bit_board_for_the_linux_guest() {
        assert_eq!(parse(&["--arch", "armv7"]).unwrap().board, BoardName::Virt, "virt unless asked");
        let a = parse(&["--arch", "armv7", "--board", "vexpress-a15"]).unwrap();
        assert_eq!(a.board, BoardName::VexpressA15);
        assert_eq!((a.machine.arch, a.machine.cpu.as_str(), a.machine.smp), (Arch::Armv7, "cortex-a15", 2));
        assert!(parse(&["--board", "vexpress-a15", "--arch", "armv7", "--smp", "1"]).is_ok(), "in either order");
        assert_eq!(
            parse(&["--board", "vexpress-a15"]).unwrap_err(),
            "--board vexpress-a15: its CPUs are 32-bit Cortex-A15s; add --arch armv7"
        );
        assert_eq!(
            parse(&["--arch", "armv7", "--board", "vexpress-a15", "--gic", "3"]).unwrap_err(),
            "--gic: vexpress-a15's GIC is the Cortex-A15's own, a GICv2"
        );
        assert_eq!(
            parse(&["--arch", "armv7", "--board", "vexpress-a15", "--smp", "4"]).unwrap_err(),
            "--smp 4: vexpress-a15's device tree describes 2 CPUs"
        );
        let manifest = format!("{}/../manifests/armv7-two-vms.toml", env!("CARGO_MANIFEST_DIR"));
        assert!(parse(&["--arch", "armv7", "--board", "vexpress-a15", "--manifest", &manifest])
            .unwrap_err()
            .contains("a manifest is checked against QEMU's virt board"));
    }

    #[test]
    fn a_manifest_takes_the_place_of_the_vm_options() {
        let manifest = format!("{}/../manifests/three-vms.toml", env!("CARGO_MANIFEST_DIR"));
        let a = parse(&["--manifest", &manifest, "--smp", "2", "--http-port", "8081"]).unwrap();
        assert_eq!((a.manifest.is_some(), a.machine.smp, a.http_port), (true, 2, 8081));
        assert_eq!(
            parse(&["--manifest", &manifest, "--vcpus", "2"]).unwrap_err(),
            "--vcpus: the manifest describes the VMs; change it there"
        );
        assert_eq!(
            parse(&["--guest", "selftest", "--manifest", &manifest]).unwrap_err(),
            "--guest: the manifest describes the VMs; change it there"
        );
    }
}
