//! The Raspberry Pi 4 as QEMU's `raspi4b` models it (docs/deploy-rpi4.md): the hypervisor
//! image placed where the Pi's firmware places a kernel, and the Pi's device tree (Debian's
//! `broadcom/bcm2711-rpi-4-b.dtb`) fixed up for what QEMU's BCM2838 has.
//!
//! The fix-ups, each printed by `cargo xtask qemu --board raspi4b`:
//! - The nodes under `/soc` at bus addresses 0x7ef0_0000 to 0x7ef1_0000 (the HDMI and its
//!   DVP clock, reset and interrupt controllers, and the HDMI I2C buses: 0xfef0_0000 for the
//!   CPU) are disabled: QEMU 10 models nothing there, and a reader that believed them would
//!   fault (Debian's kernel started directly on `raspi4b` dies probing the DVP's interrupt
//!   controller at 0xfef0_0100).
//! - `/chosen/stdout-path` names the PL011 (`serial0`, QEMU's first `-serial`) instead of
//!   the mini UART (`serial1`, QEMU's second): the hypervisor drives a PL011 only, and with
//!   the path pointing at it the console it uses is the one the device tree chose.
//!
//! Everything else is copied as it is: QEMU itself fills in `/memory` (960 MiB of the
//! 2 GiB it maps) and `/chosen`'s initrd, and removes the PCIe, RNG, thermal and GENET
//! nodes it lacks (it says so on stderr).
//!
//! What QEMU then passes the image (`qemu_loaded_tree`, through `-machine dumpdtb`) is the
//! board a manifest is checked against on `raspi4b` and for a Pi (`qemu_board`).

use std::fmt;
use std::path::{Path, PathBuf};

use hyp_core::fdt::{Fdt, Node};
use vm_fdt::{FdtReserveEntry, FdtWriter};

use crate::images::images_dir;
use crate::linux_guest::LinuxGuest;
use crate::manifest::Board;
use crate::XtaskError;

/// Where the Pi 4's firmware loads a 64-bit kernel (`kernel_address` in config.txt,
/// whose default for `arm_64bit=1` this is), whatever the image's header says.
pub const FIRMWARE_LOAD_ADDRESS: u64 = 0x8_0000;
/// The device tree of the Pi 4 in Debian's arm64 kernel package.
pub const DEBIAN_DTB: &str = "broadcom/bcm2711-rpi-4-b.dtb";
/// The bus addresses of the `/soc` nodes QEMU does not model, `[start, end)`.
const UNMODELLED: (u64, u64) = (0x7ef0_0000, 0x7ef1_0000);
/// An arm64 Image's `text_offset` field (Documentation/arch/arm64/booting.rst).
const TEXT_OFFSET: std::ops::Range<usize> = 8..16;

/// One change to the device tree, as xtask prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixUp {
    /// The node's path.
    pub node: String,
    /// What changed, as `property = value`.
    pub change: String,
    pub why: &'static str,
}

impl fmt::Display for FixUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.node, self.change, self.why)
    }
}

/// A copy of the hypervisor image `image` that QEMU's `-kernel` puts at the firmware's
/// address (`at_firmware_address`), written beside it as `NAME-rpi4.Image`.
pub fn image_at_firmware_address(image: &Path) -> Result<PathBuf, XtaskError> {
    let bytes = std::fs::read(image).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", image.display())))?;
    let bytes = at_firmware_address(bytes).map_err(|e| XtaskError::Build(format!("{}: {e}", image.display())))?;
    let stem = image.file_stem().map_or("hypervisor".into(), |s| s.to_string_lossy().into_owned());
    let out = images_dir().join(format!("{stem}-rpi4.Image"));
    std::fs::write(&out, bytes).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}

/// The image `bytes` with the `text_offset` the firmware loads at: QEMU loads an arm64
/// Image at RAM base + `text_offset` (2 MiB up when that is 0), the firmware at 0x80000, so
/// the copy says 0x80000 and both put it at the same place. The image relocates itself and
/// runs anywhere; this only makes QEMU start it where the Pi would.
pub fn at_firmware_address(mut bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    if bytes.get(0x38..0x3c) != Some(b"ARM\x64".as_slice()) {
        return Err("is not an arm64 Image (no ARM\\x64 magic at 0x38)".into());
    }
    bytes[TEXT_OFFSET].copy_from_slice(&FIRMWARE_LOAD_ADDRESS.to_le_bytes());
    Ok(bytes)
}

/// The device tree QEMU's `raspi4b` passes a kernel when started with `dtb` and `kernel`
/// (`-machine dumpdtb`): `dtb` with QEMU's `/memory` (the RAM it declares), `/chosen` and
/// the nodes it removes; what the hypervisor will read, for checking a manifest against.
pub fn qemu_loaded_tree(dtb: &Path, kernel: &Path) -> Result<Vec<u8>, XtaskError> {
    let out = images_dir().join("raspi4b-as-loaded.dtb");
    let _ = std::fs::remove_file(&out);
    let mut cmd = std::process::Command::new("qemu-system-aarch64");
    cmd.arg("-M").arg(format!("raspi4b,dumpdtb={}", out.display())).arg("-dtb").arg(dtb).arg("-kernel").arg(kernel);
    // QEMU writes the tree and exits at once; the timeout is for a QEMU that does not.
    let run = crate::qemu::run_captured(cmd, std::time::Duration::from_secs(60), false)?;
    std::fs::read(&out).map_err(|e| {
        XtaskError::Tool(format!(
            "QEMU raspi4b did not write its device tree to {} ({e}; exit status {:?}):\n{}",
            out.display(),
            run.status,
            run.console
        ))
    })
}

/// The board QEMU's `raspi4b` is, as a manifest is checked against it: read from the tree it
/// passes (`qemu_loaded_tree`), so the RAM is what its device tree declares.
pub fn qemu_board(dtb: &Path, kernel: &Path) -> Result<Board, XtaskError> {
    let tree = qemu_loaded_tree(dtb, kernel)?;
    Board::from_device_tree(&tree).map_err(|e| {
        XtaskError::Tool(format!("the device tree QEMU raspi4b passes is not one the hypervisor reads: {e}"))
    })
}

/// Debian's device tree of the Pi 4 (from `linux`'s package), fixed up for QEMU, written to
/// `target/images/bcm2711-rpi-4-b-qemu.dtb`; with the fix-ups made.
pub fn qemu_device_tree(linux: &LinuxGuest) -> Result<(PathBuf, Vec<FixUp>), XtaskError> {
    let source = linux.board_device_tree(DEBIAN_DTB)?;
    let blob =
        std::fs::read(&source).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", source.display())))?;
    let (fixed, fix_ups) =
        fix_up_for_qemu(&blob).map_err(|e| XtaskError::Build(format!("{}: {e}", source.display())))?;
    let out = images_dir().join("bcm2711-rpi-4-b-qemu.dtb");
    std::fs::write(&out, fixed).map_err(|e| XtaskError::Build(format!("cannot write {}: {e}", out.display())))?;
    Ok((out, fix_ups))
}

/// What `qemu_device_tree` changes, on the blob: the tree written again, node by node and
/// property by property, with the fix-ups of this module's comment.
pub fn fix_up_for_qemu(dtb: &[u8]) -> Result<(Vec<u8>, Vec<FixUp>), String> {
    let fdt = Fdt::new(dtb).map_err(|e| format!("not a device tree: {e}"))?;
    let reservations: Vec<FdtReserveEntry> = fdt
        .memory_reservations()
        .map(|r| FdtReserveEntry::new(r.address, r.size))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("its /memreserve/ entries: {e}"))?;
    let console = console_alias(&fdt);
    let mut out = FdtWriter::new_with_mem_reserv(&reservations).map_err(|e| e.to_string())?;
    // The boot CPU's physical ID (header word 7), which the writer does not take from a tree.
    out.set_boot_cpuid_phys(u32::from_be_bytes([dtb[28], dtb[29], dtb[30], dtb[31]]));
    let mut fix_ups = Vec::new();
    copy_node(&mut out, fdt.root(), "", console.as_ref(), &mut fix_ups)?;
    Ok((out.finish().map_err(|e| e.to_string())?, fix_ups))
}

/// The `stdout-path` to write instead, when it names a UART other than a PL011 and an alias
/// names an enabled PL011: `serial0:115200n8` for Debian's `serial1:115200n8`.
fn console_alias(fdt: &Fdt<'_>) -> Option<String> {
    let is_pl011 = |n: &Node<'_>| n.compatible().any(|c| c == "arm,pl011") && n.is_enabled();
    let stdout = fdt.stdout()?;
    if is_pl011(&stdout) {
        return None;
    }
    let path = fdt.find_node("/chosen")?.property("stdout-path")?.as_str()?;
    let options = path.split_once(':').map(|(_, o)| o);
    let aliases = fdt.find_node("/aliases")?;
    let alias = aliases.properties().find(|p| {
        p.as_str().and_then(|target| fdt.find_node(target)).is_some_and(|n| is_pl011(&n))
            && p.name.starts_with("serial")
    })?;
    Some(match options {
        Some(options) => format!("{}:{options}", alias.name),
        None => alias.name.to_string(),
    })
}

/// The bus address of a node under `/soc`, from its unit address.
fn unit_address(name: &str) -> Option<u64> {
    u64::from_str_radix(name.split_once('@')?.1, 16).ok()
}

fn copy_node(
    out: &mut FdtWriter,
    node: Node<'_>,
    path: &str,
    console: Option<&String>,
    fix_ups: &mut Vec<FixUp>,
) -> Result<(), String> {
    let at = |e: vm_fdt::Error| format!("{}: {e}", if path.is_empty() { "/" } else { path });
    let handle = out.begin_node(node.name).map_err(at)?;
    let unmodelled = path.rsplit_once('/').is_some_and(|(parent, _)| parent == "/soc")
        && unit_address(node.name).is_some_and(|a| (UNMODELLED.0..UNMODELLED.1).contains(&a))
        && node.is_enabled();
    for property in node.properties() {
        let value = match property.name {
            "status" if unmodelled => continue,
            "stdout-path" if path == "/chosen" => match console {
                Some(alias) => {
                    fix_ups.push(FixUp {
                        node: path.into(),
                        change: format!("stdout-path = \"{alias}\", was \"{}\"", property.as_str().unwrap_or("")),
                        why: "the PL011 UART0, QEMU's first -serial, which the hypervisor drives, not the mini UART",
                    });
                    let mut bytes = alias.clone().into_bytes();
                    bytes.push(0);
                    out.property("stdout-path", &bytes).map_err(at)?;
                    continue;
                }
                None => property.value,
            },
            _ => property.value,
        };
        out.property(property.name, value).map_err(at)?;
    }
    if unmodelled {
        out.property_string("status", "disabled").map_err(at)?;
        fix_ups.push(FixUp {
            node: path.into(),
            change: "status = \"disabled\"".into(),
            why: "QEMU's BCM2838 has nothing at 0xfef00000..0xfef10000, the HDMI and DVP block",
        });
    }
    for child in node.children() {
        copy_node(out, child, &format!("{path}/{}", child.name), console, fix_ups)?;
    }
    out.end_node(handle).map_err(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree with the parts of Debian's `bcm2711-rpi-4-b.dtb` the fix-ups look at: its
    /// `/memreserve/`, aliases and stdout-path, and `/soc` nodes inside and outside the
    /// unmodelled range, with and without a `status`.
    fn debian_like() -> Vec<u8> {
        let mut w = FdtWriter::new_with_mem_reserv(&[FdtReserveEntry::new(0, 0x1000).unwrap()]).unwrap();
        let root = w.begin_node("").unwrap();
        w.property_string("model", "Raspberry Pi 4 Model B").unwrap();
        let aliases = w.begin_node("aliases").unwrap();
        w.property_string("serial0", "/soc/serial@7e201000").unwrap();
        w.property_string("serial1", "/soc/serial@7e215040").unwrap();
        w.end_node(aliases).unwrap();
        let chosen = w.begin_node("chosen").unwrap();
        w.property_string("stdout-path", "serial1:115200n8").unwrap();
        w.end_node(chosen).unwrap();
        let soc = w.begin_node("soc").unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        let node = |w: &mut FdtWriter, name: &str, compatible: &str, status: Option<&str>| {
            let n = w.begin_node(name).unwrap();
            w.property_string("compatible", compatible).unwrap();
            w.property_array_u32("reg", &[unit_address(name).unwrap() as u32, 0x100]).unwrap();
            if let Some(status) = status {
                w.property_string("status", status).unwrap();
            }
            if name.contains("7ef00100") {
                w.property_u32("phandle", 0x19).unwrap();
            }
            w.end_node(n).unwrap();
        };
        node(&mut w, "serial@7e201000", "arm,pl011", Some("okay"));
        node(&mut w, "serial@7e215040", "brcm,bcm2835-aux-uart", Some("okay"));
        node(&mut w, "clock@7ef00000", "brcm,brcm2711-dvp", None);
        node(&mut w, "interrupt-controller@7ef00100", "brcm,bcm2711-l2-intc", None);
        node(&mut w, "hdmi@7ef00700", "brcm,bcm2711-hdmi0", Some("okay"));
        node(&mut w, "i2c@7ef09500", "brcm,bcm2711-hdmi-i2c", Some("disabled"));
        node(&mut w, "mmc@7e340000", "brcm,bcm2711-emmc2", Some("okay"));
        w.end_node(soc).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    fn status(fdt: &Fdt<'_>, path: &str) -> Option<String> {
        let node = fdt.find_node(path).unwrap_or_else(|| panic!("{path} is gone"));
        node.property("status").and_then(|p| p.as_str()).map(str::to_string)
    }

    #[test]
    fn the_unmodelled_nodes_are_disabled_and_the_console_is_the_pl011_and_each_is_said() {
        let (fixed, fix_ups) = fix_up_for_qemu(&debian_like()).unwrap();
        let fdt = Fdt::new(&fixed).unwrap();
        for path in ["/soc/clock@7ef00000", "/soc/interrupt-controller@7ef00100", "/soc/hdmi@7ef00700"] {
            assert_eq!(status(&fdt, path).as_deref(), Some("disabled"), "{path}");
        }
        assert_eq!(status(&fdt, "/soc/i2c@7ef09500").as_deref(), Some("disabled"), "already disabled, left so");
        assert_eq!(status(&fdt, "/soc/mmc@7e340000").as_deref(), Some("okay"), "QEMU models the rest");
        assert_eq!(status(&fdt, "/soc/serial@7e215040").as_deref(), Some("okay"));
        let chosen = fdt.find_node("/chosen").unwrap();
        assert_eq!(chosen.property("stdout-path").and_then(|p| p.as_str()), Some("serial0:115200n8"));
        assert_eq!(fdt.stdout().map(|n| n.name), Some("serial@7e201000"));
        let printed: Vec<String> = fix_ups.iter().map(ToString::to_string).collect();
        assert_eq!(printed.len(), 4, "{printed:#?}");
        assert!(printed[0].starts_with("/chosen: stdout-path = \"serial0:115200n8\", was \"serial1:115200n8\" ("));
        assert!(printed[1].starts_with("/soc/clock@7ef00000: status = \"disabled\" (QEMU's BCM2838 has nothing"));
        assert!(printed[2].starts_with("/soc/interrupt-controller@7ef00100: status = \"disabled\""));
        assert!(printed[3].starts_with("/soc/hdmi@7ef00700: status = \"disabled\""));
    }

    #[test]
    fn everything_else_is_copied_as_it_was() {
        let original = debian_like();
        let (fixed, _) = fix_up_for_qemu(&original).unwrap();
        let (before, after) = (Fdt::new(&original).unwrap(), Fdt::new(&fixed).unwrap());
        assert_eq!(after.memory_reservations().collect::<Vec<_>>(), before.memory_reservations().collect::<Vec<_>>());
        type Properties = Vec<(String, Vec<u8>)>;
        let nodes = |fdt: &Fdt<'_>| -> Vec<(String, Properties)> {
            fdt.all_nodes()
                .map(|n| {
                    let properties = n
                        .properties()
                        .filter(|p| p.name != "status" && p.name != "stdout-path")
                        .map(|p| (p.name.to_string(), p.value.to_vec()))
                        .collect();
                    (n.name.to_string(), properties)
                })
                .collect()
        };
        assert_eq!(nodes(&after), nodes(&before), "the same nodes, in order, with the same properties");
        let phandle = after.find_node("/soc/interrupt-controller@7ef00100").unwrap().property("phandle");
        assert_eq!(phandle.and_then(|p| p.as_u32()), Some(0x19), "a disabled node keeps its phandle");
    }

    #[test]
    fn a_tree_already_fixed_up_needs_nothing_more() {
        let (fixed, _) = fix_up_for_qemu(&debian_like()).unwrap();
        let (again, fix_ups) = fix_up_for_qemu(&fixed).unwrap();
        assert_eq!(fix_ups, Vec::new());
        assert_eq!(again, fixed);
    }

    #[test]
    fn the_image_copy_asks_qemu_for_the_firmware_s_load_address() {
        let dir = images_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("rpi4-test-input.Image");
        let mut header = vec![0u8; 0x40];
        header[0x38..0x3c].copy_from_slice(b"ARM\x64");
        header[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        std::fs::write(&image, &header).unwrap();
        let copy = std::fs::read(image_at_firmware_address(&image).unwrap()).unwrap();
        assert_eq!(u64::from_le_bytes(copy[8..16].try_into().unwrap()), 0x8_0000, "text_offset");
        assert_eq!(copy[16..], header[16..], "the rest as it was (image_size, magic)");
        std::fs::write(&image, b"not an image").unwrap();
        assert!(image_at_firmware_address(&image).unwrap_err().to_string().contains("is not an arm64 Image"));
        assert_eq!(at_firmware_address(header.clone()).unwrap()[8..16], 0x8_0000u64.to_le_bytes());
    }
}
