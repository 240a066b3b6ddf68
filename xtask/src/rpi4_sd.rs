//! The Raspberry Pi 4's SD card in a VM (docs/deploy-rpi4.md, "The SD card in a VM"): the
//! board's SDHCI, its register window and SPI read from the board's device tree, given to
//! an identity-mapped Linux VM (docs/capability-model.md, "Identity-mapped VMs"), and the
//! card itself: a raw image with an MBR and one ext4 partition, written and read on the host
//! with e2fsprogs (`mke2fs -d` fills the file system from a directory, `debugfs` reads a
//! file back), which QEMU's `raspi4b` attaches to that SDHCI (`-drive if=sd`).
//!
//! Kept apart from `rpi4` (the board's image and device tree): this is one VM's device.

use std::path::{Path, PathBuf};
use std::process::Command;

use hyp_core::fdt::Fdt;

use crate::bundle::{Passthrough, VmDevices, VmEntry};
use crate::linux_guest::LinuxGuest;
use crate::util::step;
use crate::XtaskError;

/// The SD host controller Linux's `sdhci-iproc` drives as `bcm2835_data` (PIO: its
/// capabilities are the driver's, without DMA). On a Pi it serves the Wi-Fi chip; on QEMU's
/// `raspi4b` it holds the card of `-drive if=sd`.
pub const SDHCI_COMPATIBLE: &str = "brcm,bcm2835-sdhci";
/// The rate the guest is told the SDHCI's clock runs at. QEMU's model ignores the divider
/// the driver computes from it; on a Pi it must be the rate the firmware set
/// (docs/deploy-rpi4.md).
pub const SDHCI_CLOCK_HZ: u32 = 100_000_000;
/// QEMU takes an SD card image only if its size is a power of two.
pub const CARD_SIZE: u64 = 64 << 20;
/// Where the one partition starts (1 MiB, as partitioning tools align it).
pub const PARTITION_START: u64 = 1 << 20;
const SECTOR: u64 = 512;
/// MBR partition type of a Linux file system.
const LINUX_PARTITION: u8 = 0x83;

/// The board's SDHCI as a passthrough device: the first enabled node compatible with
/// `SDHCI_COMPATIBLE` in `dtb` (a device tree blob), its register window rounded out to its
/// page, its GIC SPIs as INTIDs (through the interrupt tree), and `SDHCI_CLOCK_HZ`.
pub fn sdhci_passthrough(dtb: &[u8]) -> Result<Passthrough, XtaskError> {
    let fdt = Fdt::new(dtb).map_err(|e| XtaskError::Build(format!("the board's device tree: {e}")))?;
    let node = fdt
        .all_nodes()
        .find(|n| n.is_enabled() && n.compatible().any(|c| c == SDHCI_COMPATIBLE))
        .ok_or_else(|| XtaskError::Build(format!("the board's device tree has no enabled {SDHCI_COMPATIBLE}")))?;
    let reg = node.physical_reg().next().and_then(|r| Some((r.address, r.size?))).ok_or_else(|| {
        XtaskError::Build(format!("{}: no `reg` the CPU reaches through the buses' `ranges`", node.name))
    })?;
    let mut interrupts = Vec::new();
    for interrupt in node.interrupts() {
        let interrupt = interrupt.map_err(|e| XtaskError::Build(format!("{}: its interrupts: {e}", node.name)))?;
        // A GIC specifier: type (0 SPI), number, flags (the GIC binding).
        if let [0, spi, _] = interrupt.specifier() {
            interrupts.push(32 + spi);
        }
    }
    let base = reg.0 & !0xfff;
    let size = (reg.0 + reg.1).next_multiple_of(0x1000) - base;
    Ok(Passthrough { name: "sdhci".into(), base, size, interrupts, clock_hz: Some(SDHCI_CLOCK_HZ) })
}

/// The Debian Linux guest as a VM that owns the SDHCI: `memory` bytes of RAM at IPA = PA =
/// `base` (identity-mapped: the controller would DMA on a Pi), one vCPU, its console on the
/// PL011.
pub fn sd_vm(linux: &LinuxGuest, sdhci: Passthrough, base: u64, memory: u64) -> VmEntry {
    VmEntry {
        name: "sd".into(),
        vcpus: 1,
        memory,
        kernel: linux.kernel.clone(),
        initrd: Some(linux.initrd.clone()),
        bootargs: Some(crate::linux_guest::BOOTARGS.into()),
        device_tree: None,
        devices: VmDevices { passthrough: vec![sdhci], identity_mapped: Some(base), ..VmDevices::default() },
    }
}

/// The VM of `vms` that owns the board's SDHCI (a passthrough device at its window), if
/// any: on QEMU `raspi4b` that VM's card is what `-drive if=sd` attaches.
pub fn sdhci_owner<'a>(vms: &'a [VmEntry], dtb: &[u8]) -> Result<Option<&'a VmEntry>, XtaskError> {
    let sdhci = sdhci_passthrough(dtb)?;
    Ok(vms.iter().find(|vm| vm.devices.passthrough.iter().any(|p| p.base == sdhci.base)))
}

/// The card `cargo xtask qemu --board raspi4b` puts in the SD slot when it is not given
/// one: `card`, kept between runs as a board disk is, or, on first use, a new one holding
/// `README.txt` (what it is) in its ext4 partition.
pub fn ensure_card(card: &Path) -> Result<(), XtaskError> {
    if card.is_file() {
        return Ok(());
    }
    crate::setup::ensure_e2fsprogs()?;
    if let Some(dir) = card.parent() {
        std::fs::create_dir_all(dir).map_err(|e| XtaskError::Build(format!("{}: {e}", dir.display())))?;
    }
    write_card(card, &[("README.txt", CARD_README.as_bytes())])
}

/// What a new card says of itself.
const CARD_README: &str = "The SD card of `cargo xtask qemu --board raspi4b`: QEMU raspi4b's SDHCI holds it, and \
                           the VM the manifest gives that controller mounts /dev/mmcblk0p1. Kept between runs.\n";

/// QEMU's arguments that put `card` in the board's SD slot (the SDHCI, on `raspi4b`).
pub fn sd_card_args(card: &Path) -> [String; 2] {
    ["-drive".into(), format!("if=sd,format=raw,file={}", card.display())]
}

/// The master boot record of a card of `CARD_SIZE` bytes with one Linux partition from
/// `PARTITION_START` to its end (the MBR's partition table: entries at 446, the signature
/// 0x55 0xAA at 510; CHS fields left at their "use LBA" values).
pub fn master_boot_record() -> [u8; 512] {
    let mut mbr = [0u8; 512];
    let entry = &mut mbr[446..462];
    entry[0] = 0x00; // not bootable
    entry[1..4].copy_from_slice(&[0xfe, 0xff, 0xff]);
    entry[4] = LINUX_PARTITION;
    entry[5..8].copy_from_slice(&[0xfe, 0xff, 0xff]);
    let first = (PARTITION_START / SECTOR) as u32;
    let sectors = ((CARD_SIZE - PARTITION_START) / SECTOR) as u32;
    entry[8..12].copy_from_slice(&first.to_le_bytes());
    entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    mbr
}

/// An e2fsprogs program: on the `PATH`, or in the sbin directories where Debian puts them
/// (not on a user's `PATH`).
fn e2fs_tool(name: &str) -> Result<PathBuf, XtaskError> {
    crate::setup::e2fs_tool(name)
        .ok_or_else(|| XtaskError::Tool(format!("{name} not found: run `cargo xtask test`, which installs e2fsprogs")))
}

/// Writes `card`: `CARD_SIZE` bytes, the MBR, and an ext4 file system in the partition
/// holding `files` (name, contents) at its root, made by `mke2fs -d` from a scratch
/// directory beside the card.
pub fn write_card(card: &Path, files: &[(&str, &[u8])]) -> Result<(), XtaskError> {
    let mke2fs = e2fs_tool("mke2fs")?;
    let io = |what: &str, e: std::io::Error| XtaskError::Build(format!("{what}: {e}"));
    let root = card.with_extension("root");
    let partition = card.with_extension("part");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).map_err(|e| io(&root.display().to_string(), e))?;
    for (name, contents) in files {
        std::fs::write(root.join(name), contents).map_err(|e| io(name, e))?;
    }
    let _ = std::fs::remove_file(&partition);
    step(&format!("making an ext4 file system of {} file(s) for the SD card {}", files.len(), card.display()));
    let kib = (CARD_SIZE - PARTITION_START) / 1024;
    crate::util::run_quiet(
        Command::new(&mke2fs)
            .args(["-q", "-F", "-t", "ext4", "-L", "sdcard", "-d"])
            .arg(&root)
            .arg(&partition)
            .arg(format!("{kib}k")),
    )?;
    let fs = std::fs::read(&partition).map_err(|e| io(&partition.display().to_string(), e))?;
    let mut image = vec![0u8; CARD_SIZE as usize];
    image[..512].copy_from_slice(&master_boot_record());
    let start = PARTITION_START as usize;
    image[start..start + fs.len()].copy_from_slice(&fs);
    std::fs::write(card, image).map_err(|e| io(&card.display().to_string(), e))?;
    let _ = std::fs::remove_file(&partition);
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

/// The file `name` at the root of the card's partition, as the card holds it now (read
/// with `debugfs` from a copy of the partition); `None` if the file system has no such file.
pub fn read_from_card(card: &Path, name: &str) -> Result<Option<Vec<u8>>, XtaskError> {
    let debugfs = e2fs_tool("debugfs")?;
    let bytes = std::fs::read(card).map_err(|e| XtaskError::Build(format!("{}: {e}", card.display())))?;
    let partition = card.with_extension("readback");
    std::fs::write(&partition, bytes.get(PARTITION_START as usize..).unwrap_or_default())
        .map_err(|e| XtaskError::Build(format!("{}: {e}", partition.display())))?;
    // `debugfs -R "stat"` says whether the file exists; `cat` alone prints nothing either way.
    let run = |request: String| {
        Command::new(&debugfs)
            .args(["-R", &request])
            .arg(&partition)
            .output()
            .map_err(|e| XtaskError::Tool(format!("cannot run {}: {e}", debugfs.display())))
    };
    let stat = run(format!("stat /{name}"))?;
    let found = !String::from_utf8_lossy(&stat.stderr).contains("File not found");
    let contents = run(format!("cat /{name}"))?;
    let _ = std::fs::remove_file(&partition);
    Ok(found.then_some(contents.stdout))
}

#[cfg(test)]
mod tests {
    use vm_fdt::FdtWriter;

    use super::*;

    #[test]
    fn the_mbr_has_one_linux_partition_from_1_mib_to_the_end_of_the_card() {
        let mbr = master_boot_record();
        assert_eq!(&mbr[510..], &[0x55, 0xaa]);
        assert_eq!(mbr[446 + 4], 0x83);
        assert_eq!(u32::from_le_bytes(mbr[454..458].try_into().unwrap()), 2048, "LBA 2048 = 1 MiB");
        assert_eq!(u32::from_le_bytes(mbr[458..462].try_into().unwrap()), (63 << 20) / 512);
        assert!(mbr[462..510].iter().all(|&b| b == 0), "no other partition");
        assert!(CARD_SIZE.is_power_of_two(), "QEMU takes only such SD cards");
    }

    /// A tree shaped like the Pi 4's where the SDHCI sits: `/soc` with one address cell and
    /// its `ranges`, the GIC the root's interrupt parent.
    fn pi_like(status: &str) -> Vec<u8> {
        let mut f = FdtWriter::new().unwrap();
        let root = f.begin_node("").unwrap();
        f.property_u32("#address-cells", 2).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        f.property_u32("interrupt-parent", 1).unwrap();
        let soc = f.begin_node("soc").unwrap();
        f.property_u32("#address-cells", 1).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        f.property_array_u32(
            "ranges",
            &[0x7e00_0000, 0, 0xfe00_0000, 0x180_0000, 0x4000_0000, 0, 0xff80_0000, 0x80_0000],
        )
        .unwrap();
        let gic = f.begin_node("interrupt-controller@40041000").unwrap();
        f.property_string("compatible", "arm,gic-400").unwrap();
        f.property_u32("#interrupt-cells", 3).unwrap();
        f.property_null("interrupt-controller").unwrap();
        f.property_array_u32("reg", &[0x4004_1000, 0x1000]).unwrap();
        f.property_u32("phandle", 1).unwrap();
        f.end_node(gic).unwrap();
        let mmc = f.begin_node("mmc@7e300000").unwrap();
        f.property_string("compatible", SDHCI_COMPATIBLE).unwrap();
        f.property_array_u32("reg", &[0x7e30_0000, 0x100]).unwrap();
        f.property_array_u32("interrupts", &[0, 126, 4]).unwrap();
        f.property_string("status", status).unwrap();
        f.end_node(mmc).unwrap();
        f.end_node(soc).unwrap();
        f.end_node(root).unwrap();
        f.finish().unwrap()
    }

    #[test]
    fn the_sdhci_is_found_through_the_buses_with_its_page_and_its_spi() {
        let sdhci = sdhci_passthrough(&pi_like("okay")).unwrap();
        assert_eq!((sdhci.base, sdhci.size), (0xfe30_0000, 0x1000), "bus 0x7e300000, 0x100 bytes, as its page");
        assert_eq!(sdhci.interrupts, vec![158], "SPI 126");
        assert_eq!(sdhci.clock_hz, Some(SDHCI_CLOCK_HZ));
        let err = sdhci_passthrough(&pi_like("disabled")).unwrap_err().to_string();
        assert!(err.contains("has no enabled brcm,bcm2835-sdhci"), "{err}");
    }

    #[test]
    fn the_vm_given_the_sdhci_s_window_owns_the_card() {
        let vm = |name: &str, passthrough: Vec<Passthrough>| VmEntry {
            name: name.into(),
            vcpus: 1,
            memory: 64 << 20,
            kernel: PathBuf::from("Image"),
            initrd: None,
            bootargs: None,
            device_tree: None,
            devices: VmDevices { passthrough, ..VmDevices::default() },
        };
        let tree = pi_like("okay");
        let sdhci = sdhci_passthrough(&tree).unwrap();
        let other =
            Passthrough { name: "gpio".into(), base: 0xfe20_0000, size: 0x1000, interrupts: vec![], clock_hz: None };
        let vms = [vm("a", vec![other]), vm("card", vec![sdhci]), vm("c", vec![])];
        assert_eq!(sdhci_owner(&vms, &tree).unwrap().map(|v| v.name.as_str()), Some("card"));
        assert!(sdhci_owner(&[vm("a", vec![]), vm("b", vec![])], &tree).unwrap().is_none(), "no VM has it");
    }

    #[test]
    fn a_card_made_for_qemu_is_made_once_and_then_kept() {
        let dir = crate::images::workspace_root().join("target").join("xtask-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let card = dir.join("kept-card.img");
        let _ = std::fs::remove_file(&card);
        ensure_card(&card).unwrap();
        assert_eq!(read_from_card(&card, "README.txt").unwrap().as_deref(), Some(CARD_README.as_bytes()));
        // What a VM wrote stays: a card that exists is not made again.
        let mut image = std::fs::read(&card).unwrap();
        image[CARD_SIZE as usize - 1] = 0x5a;
        std::fs::write(&card, &image).unwrap();
        ensure_card(&card).unwrap();
        assert_eq!(std::fs::read(&card).unwrap()[CARD_SIZE as usize - 1], 0x5a, "the card was kept");
        std::fs::remove_file(&card).unwrap();
    }

    #[test]
    fn a_card_written_holds_its_files_in_its_partition_and_reads_back() {
        let dir = crate::images::workspace_root().join("target").join("xtask-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let card = dir.join("card-test.img");
        write_card(&card, &[("hello.txt", b"hello from the host\n")]).unwrap();
        let image = std::fs::read(&card).unwrap();
        assert_eq!(image.len() as u64, CARD_SIZE);
        assert_eq!(image[..512], master_boot_record());
        // The ext4 superblock's magic 0xEF53, 1024 + 56 bytes into the partition.
        let magic = PARTITION_START as usize + 1024 + 56;
        assert_eq!(&image[magic..magic + 2], &[0x53, 0xef]);
        assert_eq!(read_from_card(&card, "hello.txt").unwrap().as_deref(), Some(&b"hello from the host\n"[..]));
        assert_eq!(read_from_card(&card, "absent.txt").unwrap(), None);
        std::fs::remove_file(&card).unwrap();
    }
}
