//! The Debian arm64 Linux guest: the kernel from the `linux-image-arm64` metapackage and a
//! busybox initramfs that mounts the usual filesystems, loads the virtio modules and starts
//! a shell. Packages come through apt with foreign-architecture options (the machine's own
//! dpkg setup is untouched) and are cached under `target/guest-cache/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::cpio::Cpio;
use crate::images::{images_dir, workspace_root};
use crate::util::step;
use crate::XtaskError;

const METAPACKAGE: &str = "linux-image-arm64";
const BUSYBOX: &str = "busybox-static";
/// The modules the initramfs loads, in an order that satisfies their dependencies (checked
/// against each module's `.modinfo` `depends=` when the initramfs is built).
const MODULES: &[&str] = &[
    "failover",
    "net_failover",
    "virtio_mmio",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    "crc16",
    "mbcache",
    "jbd2",
    "crc32c_generic",
    "ext4",
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
    /// The kernel release, e.g. `6.1.0-56-arm64`.
    pub release: String,
}

fn cache_dir() -> PathBuf {
    workspace_root().join("target").join("guest-cache").join("debian-arm64")
}

fn apt_options(dir: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        "APT::Architecture=arm64".into(),
        "-o".into(),
        "APT::Architectures=arm64".into(),
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

/// The package the metapackage depends on now, e.g. `linux-image-6.1.0-56-arm64`.
fn resolve_kernel_package(dir: &Path) -> Result<String, XtaskError> {
    let text =
        output(Command::new("apt-cache").args(apt_options(dir)).args(["depends", METAPACKAGE]), "apt-cache depends")?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
        .ok_or_else(|| XtaskError::Tool(format!("{METAPACKAGE} depends on no linux-image package:\n{text}")))
}

/// Downloads (or finds in the cache) the kernel and busybox packages, unpacked.
fn fetch(dir: &Path) -> Result<(PathBuf, String), XtaskError> {
    for sub in ["lists/partial", "cache/archives/partial", "debs", "root"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.join(sub).display())))?;
    }
    if !lists_are_fresh(dir) {
        step("updating the Debian arm64 package lists (cached for a day)");
        output(Command::new("apt-get").args(apt_options(dir)).arg("update"), "apt-get update (arm64 lists)")?;
        let _ = std::fs::write(dir.join("lists").join(".updated"), b"");
    }
    let package = resolve_kernel_package(dir)?;
    let release = package.trim_start_matches("linux-image-").to_string();
    let root = dir.join("root");
    let done = root.join(format!(".unpacked-{package}"));
    if !done.exists() {
        step(&format!("downloading {package} and {BUSYBOX} (arm64, about 60 MB)"));
        let debs = dir.join("debs");
        output(
            Command::new("apt-get").current_dir(&debs).args(apt_options(dir)).args(["download", &package, BUSYBOX]),
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

/// `/bin/cntvct`: a static arm64 Linux program that writes CNTVCT_EL0 (readable at EL0:
/// Linux enables it for the vDSO) to stdout as 8 raw bytes (`od -An -tu8` shows it). The
/// benchmarks time the boot with it. Hand-assembled, so the initramfs needs no toolchain.
fn cntvct_program() -> Vec<u8> {
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
    const BASE: u64 = 0x40_0000;
    const HEADERS: u64 = 64 + 56;
    let size = HEADERS + 4 * CODE.len() as u64;
    let mut elf = Vec::new();
    // ELF header (System V gABI, "ELF Header"): 64-bit, little-endian, ET_EXEC, EM_AARCH64.
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    elf.extend_from_slice(&2u16.to_le_bytes()); // e_type ET_EXEC
    elf.extend_from_slice(&183u16.to_le_bytes()); // e_machine EM_AARCH64
    elf.extend_from_slice(&1u32.to_le_bytes()); // e_version
    elf.extend_from_slice(&(BASE + HEADERS).to_le_bytes()); // e_entry
    elf.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for half in [64u16, 56, 1, 64, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    // One PT_LOAD of the whole file, read and execute.
    elf.extend_from_slice(&1u32.to_le_bytes()); // p_type PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // p_flags R X
    for word in [0, BASE, BASE, size, size, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes()); // offset, vaddr, paddr, filesz, memsz, align
    }
    for insn in CODE {
        elf.extend_from_slice(&insn.to_le_bytes());
    }
    elf
}

/// Builds the initramfs from the unpacked packages.
fn initramfs(root: &Path, release: &str) -> Result<Vec<u8>, XtaskError> {
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
    c.file("bin/cntvct", 0o755, &cntvct_program());
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

/// The kernel and initramfs, building what the cache does not have.
pub fn debian_arm64() -> Result<LinuxGuest, XtaskError> {
    let dir = cache_dir();
    let (root, release) = fetch(&dir)?;
    let kernel = root.join("boot").join(format!("vmlinuz-{release}"));
    let bytes = std::fs::read(&kernel).map_err(|e| XtaskError::Build(format!("{}: {e}", kernel.display())))?;
    hyp_core::image::Arm64Image::parse(&bytes).map_err(|e| XtaskError::Build(format!("{}: {e}", kernel.display())))?;
    let initrd = images_dir().join(format!("initramfs-{release}.cpio"));
    std::fs::create_dir_all(images_dir()).map_err(|e| XtaskError::Build(e.to_string()))?;
    std::fs::write(&initrd, initramfs(&root, &release)?)
        .map_err(|e| XtaskError::Build(format!("{}: {e}", initrd.display())))?;
    Ok(LinuxGuest { kernel, initrd, release })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_program_is_an_arm64_executable_whose_entry_is_its_code() {
        let elf = cntvct_program();
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
}
