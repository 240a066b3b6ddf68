//! The files `cargo xtask deploy rpi4` writes on a Raspberry Pi 4's boot partition (FAT), and
//! how the Pi's firmware reads them back (docs/deploy-rpi4.md): `config.txt`, the hypervisor
//! image and the boot bundle. The firmware's own files (`start4.elf`, ...) are the user's to
//! copy from the Raspberry Pi firmware release: xtask names them and downloads nothing.
//!
//! A directory is written only if it is empty or holds a previous deploy, recognised by the
//! first line of its `config.txt` ([`MARKER`]): a boot partition that holds another system
//! is never overwritten.

use std::fmt;
use std::path::{Path, PathBuf};

/// The firmware's configuration file, read by `start4.elf`.
pub const CONFIG_TXT: &str = "config.txt";
/// The hypervisor image as the firmware loads it (`kernel=`): the copy whose `text_offset`
/// says 0x80000 (`rpi4::at_firmware_address`).
pub const KERNEL: &str = "hypervisor8.img";
/// The boot bundle (`initramfs ... followkernel`): the manifest and the guests' images.
pub const BUNDLE: &str = "hypervisor.bundle";
/// The first line of every `config.txt` written here: how a previous deploy is recognised.
pub const MARKER: &str = "# Written by `cargo xtask deploy rpi4` (docs/deploy-rpi4.md); it rewrites this file.";

/// A file of the Raspberry Pi firmware release that the boot partition needs beside ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareFile {
    /// Its path in the release's `boot/` folder, and on the partition.
    pub path: &'static str,
    pub why: &'static str,
}

/// What the Pi 4's firmware needs from its release to start the hypervisor with this
/// `config.txt`. The EEPROM bootloader loads `start4.elf`; a Pi 4 needs no `bootcode.bin`.
pub const FIRMWARE_FILES: [FirmwareFile; 4] = [
    FirmwareFile { path: "start4.elf", why: "the VideoCore firmware that reads config.txt and loads the files" },
    FirmwareFile { path: "fixup4.dat", why: "the memory split that goes with start4.elf" },
    FirmwareFile {
        path: "bcm2711-rpi-4-b.dtb",
        why: "the Pi 4's device tree, which the firmware completes (memory, /chosen) and passes in x0",
    },
    FirmwareFile {
        path: "overlays/disable-bt.dtbo",
        why: "dtoverlay=disable-bt: the PL011 UART0 on GPIO 14/15 instead of the Bluetooth module",
    },
];

/// What the firmware loads, as `config.txt` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootFiles {
    /// `kernel=`: loaded and entered at EL2 with x0 = the device tree.
    pub kernel: String,
    /// `initramfs FILE followkernel`: loaded after the kernel, its range written to
    /// `/chosen` (`linux,initrd-start`, `linux,initrd-end`).
    pub initramfs: String,
}

/// The files of one deploy, in its directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployment {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub kernel: PathBuf,
    pub bundle: PathBuf,
}

#[derive(Debug)]
pub enum DeployError {
    /// The path exists and is not a directory.
    NotADirectory(PathBuf),
    /// The directory holds files and no `config.txt` of a previous deploy.
    NotEmpty { dir: PathBuf, entries: Vec<String> },
    /// Reading or writing a file failed.
    Io { path: PathBuf, error: String },
    /// A `config.txt` lacks a line the firmware needs to start the hypervisor.
    ConfigTxt { path: PathBuf, missing: &'static str },
}

impl fmt::Display for DeployError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeployError::NotADirectory(path) => {
                write!(
                    f,
                    "{} is not a directory; give the mounted boot partition (or an empty directory)",
                    path.display()
                )
            }
            DeployError::NotEmpty { dir, entries } => {
                const SHOWN: usize = 5;
                let mut listed = entries.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
                if entries.len() > SHOWN {
                    listed.push_str(&format!(" and {} more", entries.len() - SHOWN));
                }
                write!(
                    f,
                    "{} is not empty ({listed}) and holds no previous deploy (its {CONFIG_TXT} does not start \
                     with the line deploy writes): nothing was written. Give an empty directory or a freshly \
                     formatted boot partition, or move its files away first",
                    dir.display()
                )
            }
            DeployError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            DeployError::ConfigTxt { path, missing } => write!(
                f,
                "{}: no `{missing}` line, so the firmware would not load the hypervisor; run `cargo xtask deploy \
                 rpi4` again to rewrite it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DeployError {}

impl From<DeployError> for crate::XtaskError {
    fn from(e: DeployError) -> Self {
        match e {
            DeployError::Io { .. } => crate::XtaskError::Build(e.to_string()),
            _ => crate::XtaskError::Usage(e.to_string()),
        }
    }
}

/// The `config.txt` that starts the hypervisor with `files`; each setting says why.
pub fn config_txt(files: &BootFiles) -> String {
    format!(
        "{MARKER}
# The Raspberry Pi 4's firmware (start4.elf) reads it: every other file it names is beside it.

# Start the Cortex-A72s in AArch64; the boot CPU enters the kernel at EL2 with x0 = the
# device tree, the other three wait in the firmware's spin table (no PSCI).
arm_64bit=1
# The hypervisor, an arm64 Image (its header's text_offset says 0x80000, where the
# firmware loads a 64-bit kernel); it relocates itself and runs wherever it is put.
kernel={kernel}
# The boot bundle (the VMs' manifest and images), loaded after the kernel; the firmware
# writes where it put it into /chosen (linux,initrd-start, linux,initrd-end).
initramfs {initramfs} followkernel
# The console: the PL011 (UART0) on GPIO 14 (TXD) and 15 (RXD), 115200 8N1. Without the
# overlay UART0 drives the Bluetooth module and the header pins get the mini UART, which
# the hypervisor does not drive; with it Bluetooth is off and UART0 is serial0.
enable_uart=1
dtoverlay=disable-bt
",
        kernel = files.kernel,
        initramfs = files.initramfs,
    )
}

/// What the firmware loads, read from a `config.txt` as it reads it: `kernel=NAME` and
/// `initramfs NAME followkernel`, the last of each winning; comments and other settings
/// skipped. `Err` names the missing line.
pub fn boot_files(config: &str) -> Result<BootFiles, &'static str> {
    let (mut kernel, mut initramfs) = (None, None);
    for line in config.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        if let Some(name) = line.strip_prefix("kernel=") {
            kernel = Some(name.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("initramfs ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some("followkernel")) = (words.next(), words.next()) {
                initramfs = Some(name.to_string());
            }
        }
    }
    Ok(BootFiles { kernel: kernel.ok_or("kernel=")?, initramfs: initramfs.ok_or("initramfs FILE followkernel")? })
}

/// Whether `dir` may be written: it does not exist yet, is empty, or holds a previous
/// deploy.
pub fn check_dir(dir: &Path) -> Result<(), DeployError> {
    let io = |error: std::io::Error| DeployError::Io { path: dir.to_path_buf(), error: error.to_string() };
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(DeployError::NotADirectory(dir.to_path_buf()));
    }
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    if entries.is_empty() {
        return Ok(());
    }
    let config = dir.join(CONFIG_TXT);
    let previous = std::fs::read_to_string(&config).is_ok_and(|text| text.lines().next() == Some(MARKER));
    if previous {
        return Ok(());
    }
    entries.sort();
    Err(DeployError::NotEmpty { dir: dir.to_path_buf(), entries })
}

/// Writes `config.txt`, the image (already the firmware-address copy) and the bundle into
/// `dir` (created if missing), after `check_dir`. Other files of a previous deploy (the
/// firmware's, copied there by the user) are left as they are.
pub fn write(dir: &Path, image: &[u8], bundle: &[u8]) -> Result<Deployment, DeployError> {
    check_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| DeployError::Io { path: dir.to_path_buf(), error: e.to_string() })?;
    let files = BootFiles { kernel: KERNEL.into(), initramfs: BUNDLE.into() };
    let deployment = Deployment {
        dir: dir.to_path_buf(),
        config: dir.join(CONFIG_TXT),
        kernel: dir.join(&files.kernel),
        bundle: dir.join(&files.initramfs),
    };
    // config.txt last: an interrupted deploy leaves no config.txt naming files not written.
    for (path, bytes) in
        [(&deployment.kernel, image), (&deployment.bundle, bundle), (&deployment.config, config_txt(&files).as_bytes())]
    {
        std::fs::write(path, bytes).map_err(|e| DeployError::Io { path: path.clone(), error: e.to_string() })?;
    }
    Ok(deployment)
}

/// The files the firmware would load from `dir`, found as it finds them: through
/// `config.txt`.
pub fn read(dir: &Path) -> Result<Deployment, DeployError> {
    let config = dir.join(CONFIG_TXT);
    let text =
        std::fs::read_to_string(&config).map_err(|e| DeployError::Io { path: config.clone(), error: e.to_string() })?;
    let files = boot_files(&text).map_err(|missing| DeployError::ConfigTxt { path: config.clone(), missing })?;
    Ok(Deployment { dir: dir.to_path_buf(), kernel: dir.join(files.kernel), bundle: dir.join(files.initramfs), config })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test's own (tests run in parallel).
    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xtask-boot-partition-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn config_txt_starts_the_hypervisor_with_its_bundle_and_the_pl011_console() {
        let files = BootFiles { kernel: KERNEL.into(), initramfs: BUNDLE.into() };
        let text = config_txt(&files);
        assert_eq!(text.lines().next(), Some(MARKER), "the marker is the first line");
        let settings: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
        assert_eq!(
            settings,
            [
                "arm_64bit=1",
                "kernel=hypervisor8.img",
                "initramfs hypervisor.bundle followkernel",
                "enable_uart=1",
                "dtoverlay=disable-bt"
            ]
        );
        assert_eq!(boot_files(&text), Ok(files), "read back as the firmware reads it");
    }

    #[test]
    fn the_firmware_s_reading_takes_the_last_line_and_skips_comments() {
        let text = "# kernel=commented.img\nkernel=a.img\nkernel=b.img\ninitramfs x.cpio followkernel\n";
        assert_eq!(boot_files(text), Ok(BootFiles { kernel: "b.img".into(), initramfs: "x.cpio".into() }));
        assert_eq!(boot_files("initramfs x.cpio followkernel\n"), Err("kernel="));
        assert_eq!(
            boot_files("kernel=a.img\ninitramfs x.cpio 0x2000000\n"),
            Err("initramfs FILE followkernel"),
            "only the followkernel form is the one deploy writes"
        );
    }

    #[test]
    fn write_puts_the_three_files_in_an_empty_or_new_directory_and_reads_back() {
        let dir = tempdir("new");
        let d = write(&dir, b"image bytes", b"bundle bytes").unwrap();
        assert_eq!(std::fs::read(&d.kernel).unwrap(), b"image bytes");
        assert_eq!(std::fs::read(&d.bundle).unwrap(), b"bundle bytes");
        assert_eq!((d.kernel.file_name().unwrap(), d.bundle.file_name().unwrap()), (KERNEL.as_ref(), BUNDLE.as_ref()));
        assert_eq!(read(&dir).unwrap(), d, "the files config.txt names are the ones written");
        let empty = tempdir("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(write(&empty, b"i", b"b").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn a_previous_deploy_is_rewritten_and_the_firmware_s_files_beside_it_are_kept() {
        let dir = tempdir("again");
        write(&dir, b"old image", b"old bundle").unwrap();
        std::fs::write(dir.join("start4.elf"), b"firmware").unwrap();
        let d = write(&dir, b"new image", b"new bundle").unwrap();
        assert_eq!(std::fs::read(&d.kernel).unwrap(), b"new image");
        assert_eq!(std::fs::read(&d.bundle).unwrap(), b"new bundle");
        assert_eq!(std::fs::read(dir.join("start4.elf")).unwrap(), b"firmware");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_system_s_boot_partition_is_refused_and_left_untouched() {
        let dir = tempdir("other");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(CONFIG_TXT), "# Raspberry Pi OS\narm_64bit=1\n").unwrap();
        std::fs::write(dir.join("kernel8.img"), b"linux").unwrap();
        let err = write(&dir, b"image", b"bundle").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{} is not empty (config.txt, kernel8.img) and holds no previous deploy",
                dir.display()
            )),
            "{err}"
        );
        assert!(err.ends_with("or move its files away first"), "{err}");
        assert_eq!(std::fs::read_to_string(dir.join(CONFIG_TXT)).unwrap(), "# Raspberry Pi OS\narm_64bit=1\n");
        assert!(!dir.join(KERNEL).exists() && !dir.join(BUNDLE).exists(), "nothing written");
        let file = dir.join("kernel8.img");
        assert!(write(&file, b"image", b"bundle").unwrap_err().to_string().contains("is not a directory"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn many_entries_are_summed_up_in_the_refusal() {
        let entries = (0..8).map(|i| format!("f{i}")).collect();
        let err = DeployError::NotEmpty { dir: "/mnt/boot".into(), entries }.to_string();
        assert!(err.starts_with("/mnt/boot is not empty (f0, f1, f2, f3, f4 and 3 more)"), "{err}");
    }

    #[test]
    fn a_config_txt_without_the_kernel_line_is_an_error_that_says_what_to_do() {
        let dir = tempdir("broken");
        write(&dir, b"i", b"b").unwrap();
        std::fs::write(dir.join(CONFIG_TXT), format!("{MARKER}\ninitramfs {BUNDLE} followkernel\n")).unwrap();
        let err = read(&dir).unwrap_err().to_string();
        assert!(err.ends_with("config.txt: no `kernel=` line, so the firmware would not load the hypervisor; run `cargo xtask deploy rpi4` again to rewrite it"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
