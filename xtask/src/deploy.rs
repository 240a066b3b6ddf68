//! `cargo xtask deploy rpi4 DIR`: the hypervisor, its boot bundle and `config.txt` for a
//! Raspberry Pi 4's boot partition (docs/deploy-rpi4.md). `cargo xtask qemu --board raspi4b`
//! writes the same files with the same code into `target/rpi4-boot/NAME/` and boots them as
//! the firmware would, so what runs on QEMU is what goes on the card.

pub mod boot_partition;

use std::path::{Path, PathBuf};

use crate::bundle::{self, BundleOptions, VmEntry};
use crate::images::{self, Hypervisor};
use crate::linux_guest::LinuxGuest;
use crate::manifest::{Board, Manifest};
use crate::rpi4;
use crate::util::step;
use crate::XtaskError;

pub use boot_partition::{BootFiles, Deployment, FIRMWARE_FILES};

/// The manifest `cargo xtask deploy rpi4` deploys unless `--manifest` names another.
pub const DEFAULT_MANIFEST: &str = "manifests/rpi4-two-vms.toml";

/// The board every Pi 4 deploy is checked against: QEMU's `raspi4b`, as its device tree
/// describes it (4 CPUs; 960 MiB, the first RAM bank, which every Pi 4's firmware
/// declares). The hypervisor checks the real board again at boot.
pub const BOARD_NAME: &str = "QEMU raspi4b";

/// What a Pi 4 deploy is made of.
pub struct Rpi4Deploy<'a> {
    pub vms: Vms<'a>,
    pub options: BundleOptions,
    pub hypervisor: Hypervisor,
}

/// The VMs of a deploy.
pub enum Vms<'a> {
    /// A manifest's: its `[board]` must be the Pi's, its path starts every error.
    Manifest(&'a Manifest),
    /// VMs made from xtask's options (`cargo xtask qemu --board raspi4b` without a manifest).
    Options(&'a [VmEntry]),
}

impl Vms<'_> {
    fn entries(&self) -> &[VmEntry] {
        match self {
            Vms::Manifest(m) => &m.vms,
            Vms::Options(vms) => vms,
        }
    }

    /// Put before a check's error.
    fn source(&self) -> String {
        match self {
            Vms::Manifest(m) => m.path.display().to_string(),
            Vms::Options(_) => "--board raspi4b".into(),
        }
    }
}

/// What a deploy wrote, and the board its VMs were checked against.
pub struct Deployed {
    pub files: Deployment,
    pub board: Board,
    /// Debian's `bcm2711-rpi-4-b.dtb` fixed up for QEMU (`rpi4::qemu_device_tree`), the tree
    /// the check read and QEMU's stand-in for the firmware's.
    pub qemu_dtb: PathBuf,
}

/// Writes the boot partition's files for `what` into `dir`: refused before anything is built
/// if `dir` holds something other than a previous deploy; the VMs are checked against the
/// Pi 4's board before anything is written.
pub fn rpi4(dir: &Path, what: &Rpi4Deploy<'_>, linux: &LinuxGuest) -> Result<Deployed, XtaskError> {
    boot_partition::check_dir(dir)?;
    let (qemu_dtb, fix_ups) = rpi4::qemu_device_tree(linux)?;
    step(&format!(
        "device tree: Debian's {} fixed up for QEMU raspi4b, {} change(s), written to {}:",
        rpi4::DEBIAN_DTB,
        fix_ups.len(),
        qemu_dtb.display()
    ));
    for fix_up in &fix_ups {
        step(&format!("  {fix_up}"));
    }
    let image = images::build_hypervisor(what.hypervisor)?;
    let bytes =
        std::fs::read(&image).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", image.display())))?;
    let copy = rpi4::at_firmware_address(bytes).map_err(|e| XtaskError::Build(format!("{}: {e}", image.display())))?;
    let board = rpi4::qemu_board(&qemu_dtb, &image)?;
    if let Vms::Manifest(manifest) = what.vms {
        manifest.check_fixed_board(&board, BOARD_NAME)?;
    }
    let blob = bundle::write_for_board(what.vms.entries(), &what.options, |size| board.limits(size))
        .map_err(|e| XtaskError::Usage(format!("{}: {e}", what.vms.source())))?;
    step(&format!(
        "{}: the VMs pass every check against {BOARD_NAME} ({} CPUs, {} MiB as its device tree declares)",
        what.vms.source(),
        board.cpus,
        board.memory_mib
    ));
    let files = boot_partition::write(dir, &copy, &blob)?;
    Ok(Deployed { files, board, qemu_dtb })
}

/// What xtask prints after a deploy: the files written, then the firmware's the user copies.
pub fn report(files: &Deployment) -> String {
    let mut text = format!("wrote {}:\n", files.dir.display());
    for (path, what) in [
        (&files.config, "the firmware's configuration"),
        (&files.kernel, "the hypervisor, loaded at 0x80000"),
        (&files.bundle, "the boot bundle: the VMs' manifest and images"),
    ] {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        text.push_str(&format!("  {:<22} {size:>10} bytes  {what}\n", file_name(path)));
    }
    text.push_str(
        "copy these from the Raspberry Pi firmware release (github.com/raspberrypi/firmware, its boot/ \
         folder) into the same directory; xtask downloads nothing:\n",
    );
    for f in FIRMWARE_FILES {
        text.push_str(&format!("  {:<26} {}\n", f.path, f.why));
    }
    text.push_str(
        "then put the card in the Pi, connect a 3.3 V serial adapter to GPIO 14 (TXD) and 15 (RXD) and GND, \
         115200 8N1, and power it on: docs/deploy-rpi4.md\n",
    );
    text
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// The directory under `target/` that `cargo xtask qemu --board raspi4b` deploys `name` into.
pub fn qemu_dir(name: &str) -> PathBuf {
    images::workspace_root().join("target").join("rpi4-boot").join(name)
}

/// The files QEMU boots from a deploy in `dir`, found as the firmware finds them (through
/// `config.txt`), with `dtb` copied beside them as the firmware's device tree (on QEMU
/// there is no firmware to bring one: Debian's, fixed up, stands in for it).
pub fn qemu_boot_files(dir: &Path, dtb: &Path) -> Result<(Deployment, PathBuf), XtaskError> {
    let files = boot_partition::read(dir)?;
    let firmware_dtb = dir.join(FIRMWARE_FILES[2].path);
    std::fs::copy(dtb, &firmware_dtb)
        .map_err(|e| XtaskError::Build(format!("cannot copy {} to {}: {e}", dtb.display(), firmware_dtb.display())))?;
    Ok((files, firmware_dtb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_file_written_and_each_the_user_copies() {
        let dir = std::env::temp_dir().join(format!("xtask-deploy-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = boot_partition::write(&dir, &[0u8; 1000], &[0u8; 2000]).unwrap();
        let text = report(&files);
        assert!(text.contains("  hypervisor8.img              1000 bytes  the hypervisor"), "{text}");
        assert!(text.contains("  hypervisor.bundle            2000 bytes  the boot bundle"), "{text}");
        for f in FIRMWARE_FILES {
            assert!(text.contains(&format!("  {:<26} {}", f.path, f.why)), "{text}");
        }
        assert!(text.contains("xtask downloads nothing"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn qemu_boots_the_files_config_txt_names_and_the_dtb_as_the_firmware_s() {
        let dir = std::env::temp_dir().join(format!("xtask-deploy-qemu-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = boot_partition::write(&dir, b"image", b"bundle").unwrap();
        let dtb = dir.with_extension("dtb");
        std::fs::write(&dtb, b"fixed tree").unwrap();
        let (files, firmware_dtb) = qemu_boot_files(&dir, &dtb).unwrap();
        assert_eq!(files, written);
        assert_eq!(firmware_dtb, dir.join("bcm2711-rpi-4-b.dtb"));
        assert_eq!(std::fs::read(&firmware_dtb).unwrap(), b"fixed tree");
        let board = crate::qemu::QemuBoard::Raspi4b { dtb: firmware_dtb.clone() };
        let cmd = crate::qemu::Machine { board, ..Default::default() }.command(&files.kernel, Some(&files.bundle));
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let expected = [
            "-M".to_string(),
            "raspi4b".into(),
            "-dtb".into(),
            firmware_dtb.display().to_string(),
            "-kernel".into(),
            dir.join("hypervisor8.img").display().to_string(),
            "-no-reboot".into(),
            "-initrd".into(),
            dir.join("hypervisor.bundle").display().to_string(),
        ];
        assert_eq!(args, expected);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&dtb).unwrap();
    }
}
