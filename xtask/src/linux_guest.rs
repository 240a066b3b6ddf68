//! The Debian Linux guests: the kernel from Debian's metapackage for the architecture and a
//! BusyBox initramfs that mounts the usual filesystems, loads the virtio modules, sets up
//! the network from the command line and starts a shell. Packages come through apt with
//! foreign-architecture options (the machine's own dpkg setup is untouched) and are cached
//! under `target/guest-cache/debian-ARCH/`.
//!
//! One code path serves both architectures ([`DebianArch`]); what differs between them:
//!
//! | | arm64 ([`debian_arm64`]) | armhf ([`debian_armhf`]) |
//! |---|---|---|
//! | kernel package | `linux-image-arm64` | `linux-image-armmp` (ARMv7 multiplatform, no LPAE) |
//! | kernel file | `/boot/vmlinuz-*-arm64`: an arm64 `Image` (Documentation/arch/arm64/booting.rst) | `/boot/vmlinuz-*-armmp`: a zImage, booted per Documentation/arch/arm/booting.rst |
//! | `/bin/cntvct` | ELF64, `mrs cntvct_el0` | ELF32 (EABI5, ARM state), `mrrc p15, 1, r0, r1, c14` |
//! | physical addresses | 48 bits | 32 bits: without LPAE the kernel reaches nothing above 4 GiB (QEMU `virt` needs `highmem=off`); `linux-image-armmp-lpae` has LPAE (40 bits) |
//!
//! The same drivers are built in and the same are modules in both kernels (Debian 12's
//! `config-6.1.0-*-armmp` and `-arm64`): built in are the PL011 and its console
//! (earlycon too), the virtio core, the GICv2 and GICv3 drivers (and the ITS), the
//! architected timer, PSCI, devtmpfs and the generic ECAM PCI host bridge; modules are
//! virtio-mmio, virtio-pci (with `virtio_pci_modern_dev` and `virtio_pci_legacy_dev`),
//! virtio-blk, virtio-net
//! (with failover and net_failover), virtio-console, and ext4 (with jbd2, mbcache, crc16 and
//! the crc32c it checksums with: `crc32c_generic`, as the Cortex-A15 has no CRC32
//! instructions for `crc32-arm-ce`), and the SD host controller drivers `sdhci`,
//! `sdhci-pltfm` and `sdhci-iproc` (the MMC core and block driver are built in). So [`MODULES`] is the same list for both, checked
//! against each module's `depends=` when the initramfs is built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use hyp_core::image::{ExecutionState, KernelImage};

use crate::cpio::Cpio;
use crate::images::{images_dir, workspace_root};
use crate::util::step;
use crate::XtaskError;

const BUSYBOX: &str = "busybox-static";
/// The modules the initramfs loads, in an order that satisfies their dependencies (checked
/// against each module's `.modinfo` `depends=` when the initramfs is built).
const MODULES: &[&str] = &[
    "failover",
    "net_failover",
    "virtio_mmio",
    // virtio over PCI (`virtio_transport = "pci"`); without the PCI host bridge in the VM's
    // device tree it finds no device.
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    "crc16",
    "mbcache",
    "jbd2",
    "crc32c_generic",
    "ext4",
    // The SD host controllers of the Raspberry Pi 4 (Linux's sdhci-iproc), for a VM that
    // owns one (docs/deploy-rpi4.md); on other boards they find no device and do nothing.
    "sdhci",
    "sdhci-pltfm",
    "sdhci-iproc",
];
/// The kernel command line when the user gives none: the console on the VM's PL011.
pub const BOOTARGS: &str = "console=ttyAMA0 earlycon";
/// Added to the command line of a guest with a NIC on QEMU's user-mode network: the address
/// QEMU's `hostfwd` forwards to, and QEMU's gateway (/init reads both).
pub const NETWORK_BOOTARGS: &str = "guest.ip=10.0.2.15 guest.gw=10.0.2.2";
/// Package lists older than this are refreshed.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

pub struct LinuxGuest {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The kernel release, e.g. `6.1.0-56-arm64` or `6.1.0-50-armmp`.
    pub release: String,
}

impl LinuxGuest {
    /// A board's device tree that the kernel's package carries, by its path under the
    /// package's `usr/lib/linux-image-RELEASE/` beside its `boot/` (armhf's
    /// `vexpress-v2p-ca15-tc1.dtb`, arm64's `broadcom/bcm2711-rpi-4-b.dtb`).
    pub fn board_device_tree(&self, name: &str) -> Result<PathBuf, XtaskError> {
        let root = self.kernel.parent().and_then(Path::parent).ok_or_else(|| {
            XtaskError::Build(format!("{}: the kernel is not in an unpacked package's boot/", self.kernel.display()))
        })?;
        let dtb = root.join("usr/lib").join(format!("linux-image-{}", self.release)).join(name);
        if dtb.is_file() {
            Ok(dtb)
        } else {
            Err(XtaskError::Build(format!(
                "{}: the kernel package {} has no such device tree",
                dtb.display(),
                self.release
            )))
        }
    }
}

/// A Debian architecture a guest is made of: its kernel package, how its kernel file is
/// checked, and its `/bin/cntvct`. Everything else is the same for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebianArch {
    /// AArch64: `linux-image-arm64`, an arm64 `Image`.
    Arm64,
    /// 32-bit ARMv7-A, hard-float: `linux-image-armmp`, a zImage.
    Armhf,
}

impl DebianArch {
    /// Debian's name of the architecture (`dpkg --print-architecture`).
    pub fn name(self) -> &'static str {
        match self {
            DebianArch::Arm64 => "arm64",
            DebianArch::Armhf => "armhf",
        }
    }

    /// The metapackage that depends on the current kernel package.
    pub fn metapackage(self) -> &'static str {
        match self {
            DebianArch::Arm64 => "linux-image-arm64",
            DebianArch::Armhf => "linux-image-armmp",
        }
    }

    /// The kernel flavour, the end of the kernel's release (`6.1.0-50-armmp`).
    fn flavour(self) -> &'static str {
        match self {
            DebianArch::Arm64 => "arm64",
            DebianArch::Armhf => "armmp",
        }
    }

    /// Roughly what the kernel and BusyBox packages weigh, for the download's message.
    fn download_size(self) -> &'static str {
        match self {
            DebianArch::Arm64 => "about 60 MB",
            DebianArch::Armhf => "about 45 MB",
        }
    }

    /// Where its packages, lists and unpacked files are kept: `target/guest-cache/debian-ARCH`.
    pub fn cache_dir(self) -> PathBuf {
        workspace_root().join("target").join("guest-cache").join(format!("debian-{}", self.name()))
    }

    /// The kernel file in the unpacked package: `boot/vmlinuz-RELEASE` for both.
    fn kernel_path(self, root: &Path, release: &str) -> PathBuf {
        root.join("boot").join(format!("vmlinuz-{release}"))
    }

    /// Checks that `kernel` is the kind of kernel file this architecture boots (as the
    /// hypervisor reads it: hyp_core::image).
    fn check_kernel(self, kernel: &[u8]) -> Result<(), String> {
        let image = KernelImage::parse(kernel).map_err(|e| e.to_string())?;
        match (self, image.execution_state()) {
            (DebianArch::Arm64, ExecutionState::Aarch64) | (DebianArch::Armhf, ExecutionState::Aarch32) => Ok(()),
            (DebianArch::Arm64, _) => Err("a 32-bit zImage where an arm64 Image was expected".into()),
            (DebianArch::Armhf, _) => Err("an arm64 Image where a 32-bit zImage was expected".into()),
        }
    }

    /// `/bin/cntvct` for this architecture.
    fn cntvct_program(self) -> Vec<u8> {
        match self {
            DebianArch::Arm64 => cntvct_arm64(),
            DebianArch::Armhf => cntvct_armhf(),
        }
    }
}

fn apt_options(arch: DebianArch, dir: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        format!("APT::Architecture={}", arch.name()),
        "-o".into(),
        format!("APT::Architectures={}", arch.name()),
        "-o".into(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        "-o".into(),
        format!("Dir::Cache={}", dir.join("cache").display()),
        "-o".into(),
        "Dir::State::status=/dev/null".into(),
        "-o".into(),
        "APT::Sandbox::User=root".into(),
        "-q".into(),
    ]
}

fn output(cmd: &mut Command, what: &str) -> Result<String, XtaskError> {
    let out = cmd.output().map_err(|e| XtaskError::Tool(format!("{what}: cannot run {cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(XtaskError::Tool(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn lists_are_fresh(dir: &Path) -> bool {
    let stamp = dir.join("lists").join(".updated");
    std::fs::metadata(stamp)
        .and_then(|m| m.modified())
        .map(|t| SystemTime::now().duration_since(t).unwrap_or(Duration::MAX) < LISTS_MAX_AGE)
        .unwrap_or(false)
}

/// The kernel package in `apt-cache depends METAPACKAGE`'s output, e.g.
/// `linux-image-6.1.0-56-arm64`: the first `linux-image-` package it depends on whose
/// release ends in the architecture's flavour.
fn kernel_package_in(arch: DebianArch, depends: &str) -> Option<String> {
    depends
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .map(|p| p.split_whitespace().next().unwrap_or(p))
        .find(|p| p.starts_with("linux-image-") && p.ends_with(&format!("-{}", arch.flavour())))
        .map(str::to_string)
}

/// The package the metapackage depends on now, e.g. `linux-image-6.1.0-56-arm64`.
/// `update_failed` is why the last list update failed, if it did, for the error message.
fn resolve_kernel_package(arch: DebianArch, dir: &Path, update_failed: Option<&str>) -> Result<String, XtaskError> {
    let metapackage = arch.metapackage();
    let text = output(
        Command::new("apt-cache").args(apt_options(arch, dir)).args(["depends", metapackage]),
        "apt-cache depends",
    );
    let text = match (text, update_failed) {
        (Ok(text), _) => text,
        (Err(e), Some(update)) => return Err(XtaskError::Tool(format!("{e}\n(after {update})"))),
        (Err(e), None) => return Err(e),
    };
    kernel_package_in(arch, &text)
        .ok_or_else(|| XtaskError::Tool(format!("{metapackage} depends on no linux-image package:\n{text}")))
}

/// Downloads (or finds in the cache) the kernel and busybox packages, unpacked.
fn fetch(arch: DebianArch, dir: &Path) -> Result<(PathBuf, String), XtaskError> {
    for sub in ["lists/partial", "cache/archives/partial", "debs", "root"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.join(sub).display())))?;
    }
    let name = arch.name();
    let mut update_failed = None;
    if !lists_are_fresh(dir) {
        step(&format!("updating the Debian {name} package lists (cached for a day)"));
        // One index failing (a mirror in sync, say) leaves the others updated: go on with
        // what apt has, and update again next time; the kernel's look-up says if it needs
        // what failed.
        match output(
            Command::new("apt-get").args(apt_options(arch, dir)).arg("update"),
            &format!("apt-get update ({name} lists)"),
        ) {
            Ok(_) => {
                let _ = std::fs::write(dir.join("lists").join(".updated"), b"");
            }
            Err(e) => {
                step(&format!("{e}; going on with the lists apt has"));
                update_failed = Some(e.to_string());
            }
        }
    }
    let package = resolve_kernel_package(arch, dir, update_failed.as_deref())?;
    let release = package.trim_start_matches("linux-image-").to_string();
    let root = dir.join("root");
    let done = root.join(format!(".unpacked-{package}"));
    if !done.exists() {
        step(&format!("downloading {package} and {BUSYBOX} ({name}, {})", arch.download_size()));
        let debs = dir.join("debs");
        output(
            Command::new("apt-get")
                .current_dir(&debs)
                .args(apt_options(arch, dir))
                .args(["download", &package, BUSYBOX]),
            "apt-get download",
        )?;
        for entry in std::fs::read_dir(&debs).map_err(|e| XtaskError::Build(format!("{}: {e}", debs.display())))? {
            let path = entry.map_err(|e| XtaskError::Build(e.to_string()))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".deb") && (name.starts_with(&package) || name.starts_with(BUSYBOX)) {
                output(Command::new("dpkg-deb").arg("-x").arg(&path).arg(&root), "dpkg-deb -x")?;
            }
        }
        std::fs::write(&done, b"").map_err(|e| XtaskError::Build(e.to_string()))?;
    }
    Ok((root, release))
}

/// The `depends=` of a module's `.modinfo` section.
fn module_depends(ko: &[u8]) -> Vec<String> {
    let Some(at) = ko.windows(8).position(|w| w == b"depends=") else { return Vec::new() };
    let value = &ko[at + 8..];
    let end = value.iter().position(|&b| b == 0).unwrap_or(0);
    String::from_utf8_lossy(&value[..end]).split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()
}

fn find_module(modules: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![modules.join("kernel")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().and_then(|n| n.to_str()) == Some(&format!("{name}.ko")) {
                return Some(path);
            }
        }
    }
    None
}

const INITTAB: &str = "\
::sysinit:/etc/init.d/rcS
::respawn:/bin/cttyhack /bin/sh -l
::ctrlaltdel:/bin/reboot
::shutdown:/bin/umount -a -r
";

const RCS: &str = r#"#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
for m in $(cat /etc/modules); do
    insmod /lib/modules/$m.ko || echo "init: could not load module $m"
done
hostname guest
ifconfig lo 127.0.0.1 up
# The network, from the kernel command line: guest.ip=ADDRESS (a /24) and guest.gw=GATEWAY.
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        guest.ip=*) ifconfig eth0 "${arg#guest.ip=}" netmask 255.255.255.0 up && started_network=1 ;;
        guest.gw=*) gateway="${arg#guest.gw=}" ;;
    esac
done
if [ -n "$started_network" ]; then
    [ -n "$gateway" ] && route add default gw "$gateway"
    mkdir -p /www
    echo "hello from $(hostname), Linux $(uname -r)" > /www/index.html
    httpd -p 80 -h /www
    echo "guest: eth0 is $(ifconfig eth0 | sed -n 's/.*inet addr:\([0-9.]*\).*/\1/p'); httpd serves /www on port 80"
fi
echo "guest: Linux $(uname -r) up with $(grep -c ^processor /proc/cpuinfo) CPU(s); 'poweroff' ends the VM, 'reboot' restarts it"
echo "guest: shell ready at virtual count $(/bin/cntvct | od -An -tu8 | tr -d ' ')"
"#;

/// `/bin/cntvct`: a static Linux program that writes the virtual count (CNTVCT, readable
/// at EL0: Linux's arch timer driver enables it for the vDSO on both architectures) to
/// stdout as 8 raw little-endian bytes (`od -An -tu8` shows it). The benchmarks time the
/// boot with it. Hand-assembled, so the initramfs needs no toolchain. This one is arm64's.
fn cntvct_arm64() -> Vec<u8> {
    const CODE: [u32; 12] = [
        0xd503_3fdf, // isb
        0xd53b_e041, // mrs  x1, cntvct_el0
        0xf81f_0fe1, // str  x1, [sp, #-16]!
        0xd280_0020, // mov  x0, #1          (stdout)
        0x9100_03e1, // mov  x1, sp
        0xd280_0102, // mov  x2, #8
        0xd280_0808, // mov  x8, #64         (write)
        0xd400_0001, // svc  #0
        0xd280_0000, // mov  x0, #0
        0xd280_0ba8, // mov  x8, #93         (exit)
        0xd400_0001, // svc  #0
        0xd420_0000, // brk  #0              (not reached)
    ];
    static_executable(Elf::Arm64, &CODE)
}

/// armhf's `/bin/cntvct` (see `cntvct_arm64`), in ARM state (A32), the Linux EABI's
/// system calls (number in r7).
fn cntvct_armhf() -> Vec<u8> {
    const CODE: [u32; 12] = [
        0xf57f_f06f, // isb  sy
        0xec51_0f1e, // mrrc p15, 1, r0, r1, c14   (CNTVCT: r0 low word, r1 high)
        0xe92d_0003, // push {r0, r1}              (the low word at the lower address)
        0xe3a0_0001, // mov  r0, #1                (stdout)
        0xe1a0_100d, // mov  r1, sp
        0xe3a0_2008, // mov  r2, #8
        0xe3a0_7004, // mov  r7, #4                (write)
        0xef00_0000, // svc  #0
        0xe3a0_0000, // mov  r0, #0
        0xe3a0_7001, // mov  r7, #1                (exit)
        0xef00_0000, // svc  #0
        0xe7f0_00f0, // udf  #0                    (not reached)
    ];
    static_executable(Elf::Arm32, &CODE)
}

/// The kinds of static executable `static_executable` writes.
#[derive(Clone, Copy)]
enum Elf {
    /// ELFCLASS64, EM_AARCH64, loaded at 0x40_0000.
    Arm64,
    /// ELFCLASS32, EM_ARM with the EABI version 5 and hard-float flags a Debian armhf
    /// binary has, loaded at 0x1_0000, with a PT_GNU_STACK header: without one, 32-bit ARM
    /// Linux makes every readable mapping executable (`arm_elf_read_implies_exec`) and
    /// logs "started with executable stack".
    Arm32,
}

/// A static Linux executable of `code` (little-endian instructions): the ELF header, a
/// PT_LOAD program header of the whole file (read and execute) and for `Elf::Arm32` a
/// PT_GNU_STACK one (read and write), then the code, which is the entry point (System V
/// gABI, "ELF Header" and "Program Header").
fn static_executable(kind: Elf, code: &[u32]) -> Vec<u8> {
    const PT_LOAD: u32 = 1;
    const PT_GNU_STACK: u32 = 0x6474_e551;
    const PF_R_X: u32 = 5;
    const PF_R_W: u32 = 6;
    let (wide, machine, flags, base, phnum): (bool, u16, u32, u64, u16) = match kind {
        Elf::Arm64 => (true, 183, 0, 0x40_0000, 1),
        // EF_ARM_EABI_VER5 | EF_ARM_ABI_FLOAT_HARD (ELF for the Arm Architecture, "ELF Header").
        Elf::Arm32 => (false, 40, 0x0500_0400, 0x1_0000, 2),
    };
    let (ehsize, phentsize, shentsize): (u16, u16, u16) = if wide { (64, 56, 64) } else { (52, 32, 40) };
    let headers = u64::from(ehsize + phnum * phentsize);
    let size = headers + 4 * code.len() as u64;
    // A word of the header's native size: 8 bytes in ELF64, 4 in ELF32 (the values fit).
    let addr = |elf: &mut Vec<u8>, value: u64| {
        if wide {
            elf.extend_from_slice(&value.to_le_bytes())
        } else {
            elf.extend_from_slice(&(value as u32).to_le_bytes())
        }
    };
    // A program header; ELF64 puts p_flags second, ELF32 after p_memsz.
    let program_header = |elf: &mut Vec<u8>, p_type: u32, p_flags: u32, words: [u64; 6]| {
        elf.extend_from_slice(&p_type.to_le_bytes());
        if wide {
            elf.extend_from_slice(&p_flags.to_le_bytes());
        }
        for word in &words[..5] {
            addr(elf, *word); // offset, vaddr, paddr, filesz, memsz
        }
        if !wide {
            elf.extend_from_slice(&p_flags.to_le_bytes());
        }
        addr(elf, words[5]); // align
    };
    let mut elf = Vec::new();
    // e_ident: class (2 = 64-bit, 1 = 32-bit), little-endian, version 1, System V ABI.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', if wide { 2 } else { 1 }, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type ET_EXEC
    elf.extend_from_slice(&machine.to_le_bytes()); // e_machine
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    addr(&mut elf, base + headers); // e_entry
    addr(&mut elf, u64::from(ehsize)); // e_phoff
    addr(&mut elf, 0); // e_shoff
    elf.extend_from_slice(&flags.to_le_bytes()); // e_flags
    for half in [ehsize, phentsize, phnum, shentsize, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    program_header(&mut elf, PT_LOAD, PF_R_X, [0, base, base, size, size, 0x1000]);
    if phnum > 1 {
        program_header(&mut elf, PT_GNU_STACK, PF_R_W, [0; 6]);
    }
    debug_assert_eq!(elf.len() as u64, headers);
    for insn in code {
        elf.extend_from_slice(&insn.to_le_bytes());
    }
    elf
}

/// Builds the initramfs from the unpacked packages.
fn initramfs(arch: DebianArch, root: &Path, release: &str) -> Result<Vec<u8>, XtaskError> {
    let busybox = std::fs::read(root.join("bin/busybox"))
        .map_err(|e| XtaskError::Build(format!("{BUSYBOX} did not unpack bin/busybox: {e}")))?;
    let modules_dir = root.join("lib/modules").join(release);
    let mut c = Cpio::default();
    for d in ["bin", "dev", "etc", "etc/init.d", "lib", "lib/modules", "mnt", "proc", "root", "sys", "tmp"] {
        c.dir(d);
    }
    c.char_device("dev/console", 0o600, 5, 1);
    c.file("bin/busybox", 0o755, &busybox);
    c.symlink("bin/sh", "busybox");
    c.symlink("init", "bin/busybox");
    c.file("etc/inittab", 0o644, INITTAB.as_bytes());
    c.file("bin/cntvct", 0o755, &arch.cntvct_program());
    c.file("etc/init.d/rcS", 0o755, RCS.as_bytes());
    let mut loaded: Vec<&str> = Vec::new();
    for name in MODULES {
        let path = find_module(&modules_dir, name)
            .ok_or_else(|| XtaskError::Build(format!("module {name}.ko not found under {}", modules_dir.display())))?;
        let ko = std::fs::read(&path).map_err(|e| XtaskError::Build(format!("{}: {e}", path.display())))?;
        if let Some(missing) = module_depends(&ko).into_iter().find(|d| !loaded.contains(&d.as_str())) {
            return Err(XtaskError::Build(format!("module {name} needs {missing}, which is not loaded before it")));
        }
        c.file(&format!("lib/modules/{name}.ko"), 0o644, &ko);
        loaded.push(name);
    }
    c.file("etc/modules", 0o644, MODULES.join("\n").as_bytes());
    Ok(c.finish())
}

/// The guest of `arch`: its kernel and initramfs (`target/images/initramfs-RELEASE.cpio`),
/// building what the cache does not have.
pub fn debian(arch: DebianArch) -> Result<LinuxGuest, XtaskError> {
    let (root, release) = fetch(arch, &arch.cache_dir())?;
    let kernel = arch.kernel_path(&root, &release);
    let bytes = std::fs::read(&kernel).map_err(|e| XtaskError::Build(format!("{}: {e}", kernel.display())))?;
    arch.check_kernel(&bytes).map_err(|e| XtaskError::Build(format!("{}: {e}", kernel.display())))?;
    let initrd = images_dir().join(format!("initramfs-{release}.cpio"));
    std::fs::create_dir_all(images_dir()).map_err(|e| XtaskError::Build(e.to_string()))?;
    std::fs::write(&initrd, initramfs(arch, &root, &release)?)
        .map_err(|e| XtaskError::Build(format!("{}: {e}", initrd.display())))?;
    Ok(LinuxGuest { kernel, initrd, release })
}

/// The 64-bit guest: Debian's arm64 kernel (an `Image`) and BusyBox.
pub fn debian_arm64() -> Result<LinuxGuest, XtaskError> {
    debian(DebianArch::Arm64)
}

/// The 32-bit guest: Debian's armhf `armmp` kernel (a zImage) and BusyBox, booted per the
/// 32-bit ARM boot protocol (Documentation/arch/arm/booting.rst: r0 = 0, r1 = ~0, r2 = the
/// device tree's address, MMU off, in SVC or HYP mode).
pub fn debian_armhf() -> Result<LinuxGuest, XtaskError> {
    debian(DebianArch::Armhf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_program_is_an_arm64_executable_whose_entry_is_its_code() {
        let elf = DebianArch::Arm64.cntvct_program();
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 183, "EM_AARCH64");
        let entry = u64::from_le_bytes(elf[24..32].try_into().unwrap());
        assert_eq!(entry, 0x40_0000 + 120, "right after the ELF and program headers");
        let filesz = u64::from_le_bytes(elf[64 + 32..64 + 40].try_into().unwrap());
        assert_eq!(filesz, elf.len() as u64, "PT_LOAD covers the whole file");
        assert_eq!(&elf[120..124], &0xd503_3fdfu32.to_le_bytes(), "the first instruction is ISB");
    }

    #[test]
    fn module_dependencies_come_from_modinfo() {
        let ko = b"\x7fELF....license=GPL\0depends=net_failover,failover\0intree=Y\0";
        assert_eq!(module_depends(ko), vec!["net_failover", "failover"]);
        assert!(module_depends(b"depends=\0").is_empty());
        assert!(module_depends(b"no modinfo").is_empty());
    }

    #[test]
    fn the_armhf_counter_program_is_an_eabi5_arm_executable_whose_entry_is_its_code() {
        let elf = DebianArch::Armhf.cntvct_program();
        assert_eq!(&elf[..5], b"\x7fELF\x01", "ELFCLASS32");
        assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 40, "EM_ARM");
        assert_eq!(u32::from_le_bytes(elf[36..40].try_into().unwrap()), 0x0500_0400, "EABI5, hard-float");
        let entry = u32::from_le_bytes(elf[24..28].try_into().unwrap());
        assert_eq!(entry, 0x1_0000 + 52 + 2 * 32, "right after the ELF and program headers");
        assert_eq!(&elf[116..120], &0xf57f_f06fu32.to_le_bytes(), "the first instruction is ISB");
        assert_eq!(&elf[120..124], &0xec51_0f1eu32.to_le_bytes(), "then the read of CNTVCT");
        // The second program header: PT_GNU_STACK, read and write, so the stack is not
        // executable.
        let ph = 52 + 32;
        assert_eq!(u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap()), 0x6474_e551, "PT_GNU_STACK");
        assert_eq!(u32::from_le_bytes(elf[ph + 24..ph + 28].try_into().unwrap()), 6, "PF_R | PF_W");
        // The `object` crate reads it as one executable segment of the whole file.
        let loaded = crate::elf::loadable(&elf).expect("an ELF file");
        assert_eq!(loaded.len(), 1);
        assert_eq!((loaded[0].vaddr, loaded[0].bytes.len(), loaded[0].executable), (0x1_0000, elf.len(), true));
    }

    #[test]
    fn the_arm64_counter_program_reads_as_one_executable_segment_too() {
        let elf = DebianArch::Arm64.cntvct_program();
        let loaded = crate::elf::loadable(&elf).expect("an ELF file");
        assert_eq!(loaded.len(), 1);
        assert_eq!((loaded[0].vaddr, loaded[0].bytes.len(), loaded[0].executable), (0x40_0000, elf.len(), true));
    }

    #[test]
    fn packages_cache_and_kernel_file_follow_the_architecture() {
        assert_eq!(DebianArch::Arm64.metapackage(), "linux-image-arm64");
        assert_eq!(DebianArch::Armhf.metapackage(), "linux-image-armmp");
        assert!(DebianArch::Arm64.cache_dir().ends_with("target/guest-cache/debian-arm64"));
        assert!(DebianArch::Armhf.cache_dir().ends_with("target/guest-cache/debian-armhf"));
        let root = Path::new("root");
        assert_eq!(
            DebianArch::Armhf.kernel_path(root, "6.1.0-50-armmp"),
            Path::new("root/boot/vmlinuz-6.1.0-50-armmp")
        );
        let options = apt_options(DebianArch::Armhf, Path::new("cache"));
        assert!(options.contains(&"APT::Architecture=armhf".to_string()));
        assert!(options.contains(&"APT::Architectures=armhf".to_string()));
        assert!(!options.iter().any(|o| o.contains("arm64")));
    }

    #[test]
    fn the_kernel_package_is_the_metapackage_s_dependency_of_the_architecture_s_flavour() {
        let armmp = "linux-image-armmp\n  Depends: linux-image-6.1.0-50-armmp\n";
        assert_eq!(kernel_package_in(DebianArch::Armhf, armmp).as_deref(), Some("linux-image-6.1.0-50-armmp"));
        let arm64 = "linux-image-arm64\n  Depends: linux-image-6.1.0-56-arm64 (= 6.1.158-1)\n";
        assert_eq!(kernel_package_in(DebianArch::Arm64, arm64).as_deref(), Some("linux-image-6.1.0-56-arm64"));
        // The LPAE flavour's package is not armmp's, nor another architecture's kernel.
        let lpae = "linux-image-armmp-lpae\n  Depends: linux-image-6.1.0-50-armmp-lpae\n";
        assert_eq!(kernel_package_in(DebianArch::Armhf, lpae), None);
        assert_eq!(kernel_package_in(DebianArch::Arm64, armmp), None);
    }

    /// A zImage's header words: its magic, its size, little-endian.
    fn zimage_header(len: usize) -> Vec<u8> {
        let mut z = vec![0u8; len];
        z[0x24..0x28].copy_from_slice(&0x016f_2818u32.to_le_bytes());
        z[0x2c..0x30].copy_from_slice(&(len as u32).to_le_bytes());
        z[0x30..0x34].copy_from_slice(&0x0403_0201u32.to_le_bytes());
        z
    }

    #[test]
    fn armhf_takes_a_zimage_and_arm64_an_image() {
        let z = zimage_header(0x1000);
        assert_eq!(DebianArch::Armhf.check_kernel(&z), Ok(()));
        assert!(DebianArch::Arm64.check_kernel(&z).unwrap_err().contains("zImage where an arm64 Image"));
        let mut with_dtb = z.clone();
        with_dtb.extend_from_slice(&[0; 64]);
        assert_eq!(DebianArch::Armhf.check_kernel(&with_dtb), Ok(()), "a device tree may follow it");
        assert!(DebianArch::Armhf.check_kernel(&z[..0x800]).unwrap_err().contains("broken 32-bit ARM zImage"));
        let mut big_endian = z.clone();
        big_endian[0x30..0x34].copy_from_slice(&0x0403_0201u32.to_be_bytes());
        assert!(DebianArch::Armhf.check_kernel(&big_endian).unwrap_err().contains("big-endian"));
        let mut arm64 = vec![0u8; 0x40];
        arm64[0x38..0x3c].copy_from_slice(b"ARM\x64");
        assert!(DebianArch::Armhf.check_kernel(&arm64).unwrap_err().contains("arm64 Image where a 32-bit zImage"));
        assert!(DebianArch::Armhf.check_kernel(b"short").unwrap_err().contains("less than"));
    }
}
