use alloc::string::{String, ToString};
use alloc::vec::Vec;

use proptest::prelude::*;
use vm_fdt::FdtWriter;

use super::*;

const VIRT_GICV3: &[u8] = include_bytes!("../../tests/data/qemu-virt-gicv3-smp4.dtb");
const VIRT_GICV2: &[u8] = include_bytes!("../../tests/data/qemu-virt-gicv2-smp2.dtb");

/// Every node as its path-less name, its properties and its `reg`, in walk order.
/// Each node's path, its properties (name, value) and its `reg` entries.
type Summary = Vec<(String, Vec<(String, Vec<u8>)>, Vec<Reg>)>;

fn summary(fdt: &Fdt<'_>) -> Summary {
    fdt.all_nodes()
        .map(|n| {
            let props = n.properties().map(|p| (p.name.to_string(), p.value.to_vec())).collect();
            (n.name.to_string(), props, n.reg().collect())
        })
        .collect()
}

/// The same tree read by the `fdt` crate (checked against it on trees it reads correctly).
fn summary_by_fdt_crate(blob: &[u8]) -> Summary {
    let fdt = ::fdt::Fdt::new(blob).unwrap();
    fdt.all_nodes()
        .map(|n| {
            let props = n.properties().map(|p| (p.name.to_string(), p.value.to_vec())).collect();
            let reg = n
                .reg()
                .into_iter()
                .flatten()
                .map(|r| Reg { address: r.starting_address as u64, size: r.size.map(|s| s as u64) })
                .collect();
            // That crate names the root "/"; its name in the blob is empty.
            let name = if n.name == "/" { String::new() } else { n.name.to_string() };
            (name, props, reg)
        })
        .collect()
}

#[test]
fn qemu_virt_trees_read_as_the_fdt_crate_reads_them() {
    for blob in [VIRT_GICV3, VIRT_GICV2] {
        let fdt = Fdt::new(blob).unwrap();
        let ours = summary(&fdt);
        assert!(ours.len() > 20, "a virt tree has dozens of nodes, read {}", ours.len());
        let theirs = summary_by_fdt_crate(blob);
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!(a, b);
        }
        let theirs: Vec<_> = ::fdt::Fdt::new(blob)
            .unwrap()
            .memory_reservations()
            .map(|r| (r.address() as u64, r.size() as u64))
            .collect();
        let reservations: Vec<_> = fdt.memory_reservations().map(|r| (r.address, r.size)).collect();
        assert_eq!(reservations, theirs);
    }
}

#[test]
fn paths_match_a_name_with_or_without_its_unit_address() {
    let fdt = Fdt::new(VIRT_GICV3).unwrap();
    assert_eq!(fdt.find_node("/").unwrap().name, "");
    assert_eq!(fdt.find_node("/cpus/cpu@2").unwrap().name, "cpu@2");
    assert_eq!(fdt.find_node("/memory").unwrap().name, "memory@40000000");
    assert_eq!(
        fdt.find_node("/memory@40000000").unwrap().reg().collect::<Vec<_>>(),
        [Reg { address: 0x4000_0000, size: Some(0x4000_0000) }]
    );
    assert!(fdt.find_node("/memory@0").is_none());
    assert!(fdt.find_node("/cpus/cpu@2/nothing").is_none());
    assert_eq!(fdt.find_node("/cpus").unwrap().children().count(), 5, "four CPUs and cpu-map");
    assert_eq!(fdt.stdout().unwrap().name, "pl011@9000000");
    assert_eq!(fdt.find_compatible(&["nothing", "arm,pl031"]).unwrap().name, "pl031@9010000");
}

/// A tree built by `vm_fdt`: a root with the given cells and one node holding `reg`.
fn tree(address_cells: u32, size_cells: u32, reg: &[u32], extra: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
    let mut f = FdtWriter::new().unwrap();
    let root = f.begin_node("").unwrap();
    f.property_u32("#address-cells", address_cells).unwrap();
    f.property_u32("#size-cells", size_cells).unwrap();
    let dev = f.begin_node("dev@0").unwrap();
    f.property_array_u32("reg", reg).unwrap();
    f.end_node(dev).unwrap();
    extra(&mut f);
    f.end_node(root).unwrap();
    f.finish().unwrap()
}

#[test]
fn reg_reads_with_the_parents_cells() {
    let read = |blob: &[u8]| Fdt::new(blob).unwrap().find_node("/dev").unwrap().reg().collect::<Vec<_>>();
    assert_eq!(
        read(&tree(1, 1, &[0x10, 0x20, 0x30, 0x40], |_| {})),
        [Reg { address: 0x10, size: Some(0x20) }, Reg { address: 0x30, size: Some(0x40) }]
    );
    assert_eq!(read(&tree(2, 0, &[1, 2], |_| {})), [Reg { address: 0x1_0000_0002, size: None }]);
    assert_eq!(
        read(&tree(2, 2, &[0, 1, 0, 2, 9], |_| {})),
        [Reg { address: 1, size: Some(2) }],
        "a partial entry is left off"
    );
    assert!(read(&tree(3, 1, &[0, 0, 1, 2], |_| {})).is_empty(), "three address cells are not a number we use");
    assert!(read(&tree(0, 0, &[1], |_| {})).is_empty());
    assert!(read(&tree(0xffff_ffff, 0xffff_ffff, &[1, 2, 3], |_| {})).is_empty());
}

/// Versatile Express's motherboard, as its device tree nests it: the static memory bus
/// (chip select, offset: two cells) under the root (two cells), the motherboard (`ranges;`),
/// the I/O FPGA on chip select 3 (one cell), the UART at its offset 0x90000.
fn versatile_express(iofpga_ranges: Option<&[u32]>) -> Vec<u8> {
    let mut f = FdtWriter::new().unwrap();
    let root = f.begin_node("").unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 2).unwrap();
    let smb = f.begin_node("smb@8000000").unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_array_u32("ranges", &[0, 0, 0, 0x0800_0000, 0x0400_0000, 3, 0, 0, 0x1c00_0000, 0x0400_0000]).unwrap();
    let board = f.begin_node("motherboard").unwrap();
    f.property_u32("#address-cells", 2).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    f.property_null("ranges").unwrap();
    let fpga = f.begin_node("iofpga@3,00000000").unwrap();
    f.property_u32("#address-cells", 1).unwrap();
    f.property_u32("#size-cells", 1).unwrap();
    if let Some(ranges) = iofpga_ranges {
        f.property_array_u32("ranges", ranges).unwrap();
    }
    let uart = f.begin_node("uart@90000").unwrap();
    f.property_array_u32("reg", &[0x9_0000, 0x1000, 0x30_0000, 0x1000]).unwrap();
    f.end_node(uart).unwrap();
    f.end_node(fpga).unwrap();
    f.end_node(board).unwrap();
    f.end_node(smb).unwrap();
    let gic = f.begin_node("interrupt-controller@2c001000").unwrap();
    f.property_array_u32("reg", &[0, 0x2c00_1000, 0, 0x1000]).unwrap();
    f.end_node(gic).unwrap();
    f.end_node(root).unwrap();
    f.finish().unwrap()
}

#[test]
fn a_reg_is_translated_through_every_bus_above_it() {
    let physical =
        |blob: &[u8], path| Fdt::new(blob).unwrap().find_node(path).unwrap().physical_reg().collect::<Vec<_>>();
    // iofpga: offset 0 of its bus is chip select 3, offset 0, for 2 MiB.
    let blob = versatile_express(Some(&[0, 3, 0, 0x20_0000]));
    let uart = "/smb/motherboard/iofpga/uart";
    assert_eq!(
        physical(&blob, uart),
        [Reg { address: 0x1c09_0000, size: Some(0x1000) }],
        "0x90000 on the FPGA is 0x1c090000; 0x300000 lies outside its 2 MiB range and is left off"
    );
    assert_eq!(Fdt::new(&blob).unwrap().find_node(uart).unwrap().reg().next().unwrap().address, 0x9_0000, "reg is raw");
    assert_eq!(physical(&blob, "/interrupt-controller"), [Reg { address: 0x2c00_1000, size: Some(0x1000) }]);
    // A bus without `ranges` maps nothing into its parent's space.
    assert!(physical(&versatile_express(None), uart).is_empty());
}

#[test]
fn stdout_path_resolves_aliases_and_drops_options() {
    let blob = tree(1, 1, &[0x900_0000, 0x1000], |f| {
        let aliases = f.begin_node("aliases").unwrap();
        f.property_string("serial0", "/dev@0").unwrap();
        f.end_node(aliases).unwrap();
        let chosen = f.begin_node("chosen").unwrap();
        f.property_string("stdout-path", "serial0:115200n8").unwrap();
        f.end_node(chosen).unwrap();
    });
    assert_eq!(Fdt::new(&blob).unwrap().stdout().unwrap().name, "dev@0");
}

/// Big-endian words, as a structure block is written.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A blob with the given structure and strings blocks and a valid header and reservation
/// block, so each test breaks exactly one thing.
fn blob(structure: &[u8], strings: &[u8]) -> Vec<u8> {
    let reservations = 40;
    let off_struct = reservations + 16;
    let off_strings = off_struct + structure.len();
    let total = off_strings + strings.len();
    let mut b = words(&[
        MAGIC,
        total as u32,
        off_struct as u32,
        off_strings as u32,
        reservations as u32,
        17,
        16,
        0,
        strings.len() as u32,
        structure.len() as u32,
    ]);
    b.extend_from_slice(&[0; 16]);
    b.extend_from_slice(structure);
    b.extend_from_slice(strings);
    b
}

const ROOT: [u32; 2] = [FDT_BEGIN_NODE, 0];

#[test]
fn each_malformed_structure_gets_its_error() {
    let at = |i: usize| 56 + 4 * i;
    let ok = words(&[ROOT[0], ROOT[1], FDT_END_NODE, FDT_END]);
    assert!(Fdt::new(&blob(&ok, b"")).is_ok());
    let case = |ws: &[u32], strings: &[u8]| Fdt::new(&blob(&words(ws), strings)).err();
    assert_eq!(case(&[ROOT[0], ROOT[1], FDT_END_NODE], b""), Some(FdtError::Truncated { at: at(3) }));
    assert_eq!(
        case(&[ROOT[0], ROOT[1], 7, FDT_END_NODE, FDT_END], b""),
        Some(FdtError::UnknownToken { at: at(2), token: 7 })
    );
    assert_eq!(
        case(&[ROOT[0], ROOT[1], FDT_PROP, 0, 5, FDT_END_NODE, FDT_END], b"ab\0"),
        Some(FdtError::BadNameOffset { at: at(2) })
    );
    assert_eq!(
        case(&[ROOT[0], ROOT[1], FDT_PROP, 0, 0, FDT_END_NODE, FDT_END], b"ab"),
        Some(FdtError::BadName { at: at(2) })
    );
    assert_eq!(
        case(&[ROOT[0], ROOT[1], FDT_PROP, 0xffff_fff0, 0, FDT_END_NODE, FDT_END], b"a\0"),
        Some(FdtError::Truncated { at: at(2) })
    );
    assert_eq!(case(&[FDT_BEGIN_NODE, 0x6162_6364], b""), Some(FdtError::BadName { at: at(0) }));
    assert_eq!(case(&[FDT_END_NODE, FDT_END], b""), Some(FdtError::Unbalanced { at: at(0) }));
    assert_eq!(case(&[ROOT[0], ROOT[1], FDT_END], b""), Some(FdtError::Unbalanced { at: at(2) }));
    assert_eq!(case(&[FDT_END], b""), Some(FdtError::Unbalanced { at: at(0) }));
    assert_eq!(
        case(&[ROOT[0], ROOT[1], FDT_END_NODE, ROOT[0], ROOT[1], FDT_END_NODE, FDT_END], b""),
        Some(FdtError::Unbalanced { at: at(3) })
    );
    let child = [FDT_BEGIN_NODE, 0x6100_0000, FDT_END_NODE];
    let mut late_property = [ROOT[0], ROOT[1]].to_vec();
    late_property.extend(child);
    late_property.extend([FDT_PROP, 0, 0, FDT_END_NODE, FDT_END]);
    assert_eq!(case(&late_property, b"a\0"), Some(FdtError::PropertyAfterSubnode { at: at(5) }));
    let mut deep = Vec::new();
    for _ in 0..=MAX_DEPTH {
        deep.extend(ROOT);
    }
    assert_eq!(case(&deep, b""), Some(FdtError::TooDeep { at: at(2 * MAX_DEPTH) }));
}

#[test]
fn each_malformed_header_gets_its_error() {
    let good = blob(&words(&[ROOT[0], ROOT[1], FDT_END_NODE, FDT_END]), b"");
    let with = |word: usize, value: u32| {
        let mut b = good.clone();
        b[4 * word..4 * word + 4].copy_from_slice(&value.to_be_bytes());
        Fdt::new(&b).err()
    };
    assert_eq!(Fdt::new(&good[..39]).err(), Some(FdtError::TooShort));
    assert_eq!(with(0, 0xfeed_d00d), Some(FdtError::BadMagic));
    assert_eq!(with(1, 0xffff_ffff), Some(FdtError::BlockOutOfRange("total size")));
    assert_eq!(with(2, 0xffff_fffc), Some(FdtError::BlockOutOfRange("structure block")));
    assert_eq!(with(3, 0xffff_ffff), Some(FdtError::BlockOutOfRange("strings block")));
    assert_eq!(with(8, 1), Some(FdtError::BlockOutOfRange("strings block")));
    assert_eq!(with(9, 0xffff_ffff), Some(FdtError::BlockOutOfRange("structure block")));
    assert_eq!(with(5, 15), Some(FdtError::UnsupportedVersion { version: 15, last_compatible: 16 }));
    assert_eq!(with(6, 18), Some(FdtError::UnsupportedVersion { version: 17, last_compatible: 18 }));
    assert_eq!(with(4, 0xffff_fff8), Some(FdtError::BlockOutOfRange("reservation block")));
    assert_eq!(with(4, 60), Some(FdtError::BlockOutOfRange("structure or reservation block (misaligned)")));
    // A reservation entry as the blob's last bytes, with no (0, 0) after it.
    let mut unterminated = good.clone();
    let at = unterminated.len() as u32;
    unterminated.extend_from_slice(&[1; 16]);
    unterminated[4..8].copy_from_slice(&(at + 16).to_be_bytes());
    unterminated[16..20].copy_from_slice(&at.to_be_bytes());
    assert_eq!(Fdt::new(&unterminated).err(), Some(FdtError::UnterminatedReservations));
}

/// Walks everything a user of the reader can walk (the interrupt tree too when
/// `interrupts`: it follows phandles, which a broken tree may point anywhere); must end,
/// whatever the tree.
fn walk_everything(fdt: &Fdt<'_>, interrupts: bool) -> usize {
    let mut seen = 0;
    for node in fdt.all_nodes() {
        seen += node.properties().count() + node.reg().count() + node.compatible().count() + node.children().count();
        seen += usize::from(node.is_enabled());
        if interrupts {
            seen += node.interrupts().count() + usize::from(node.parent().is_some());
        }
    }
    seen += fdt.memory_reservations().count();
    seen += usize::from(fdt.stdout().is_some());
    seen += usize::from(fdt.find_node("/cpus/cpu@0").is_some());
    seen
}

#[test]
fn every_prefix_and_every_byte_flip_of_a_real_tree_is_refused_or_walks() {
    for len in 0..VIRT_GICV2.len() {
        assert!(Fdt::new(&VIRT_GICV2[..len]).is_err(), "a prefix of {len} bytes is shorter than totalsize");
    }
    let mut accepted = 0;
    let mut blob = VIRT_GICV2.to_vec();
    for i in 0..blob.len() {
        for flip in [0x01, 0x80, 0xff] {
            blob[i] ^= flip;
            if let Ok(fdt) = Fdt::new(&blob) {
                // The interrupt tree's walks cost a search of the tree per phandle: on a
                // sample of the flips, or this test takes seconds.
                walk_everything(&fdt, i % 16 == 0);
                accepted += 1;
            }
            blob[i] ^= flip;
        }
    }
    assert!(accepted > 0, "flips inside property values leave a valid tree");
}

proptest! {
    #[test]
    fn arbitrary_structure_blocks_are_refused_or_walk(
        ws in proptest::collection::vec(prop_oneof![
            Just(FDT_BEGIN_NODE), Just(FDT_END_NODE), Just(FDT_PROP), Just(FDT_NOP), Just(FDT_END),
            0u32..8, any::<u32>(),
        ], 0..64),
        strings in proptest::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..32),
    ) {
        let b = blob(&words(&ws), &strings);
        if let Ok(fdt) = Fdt::new(&b) {
            walk_everything(&fdt, true);
        }
    }
}

/// A name is read from the strings block the same way whether the block is valid UTF-8
/// whole (names are then slices of it) or holds a string that is not (names are then
/// checked one by one), at any offset (compilers share a name's tail: `phandle` inside
/// `linux,phandle`); a property that names the string that is not UTF-8 is refused.
#[test]
fn property_names_read_alike_from_any_strings_block() {
    let prop = |name_offset: u32| [FDT_PROP, 4, name_offset, 7];
    let structure: Vec<u32> =
        [&ROOT[..], &prop(0), &prop(6), &[FDT_END_NODE, FDT_END]].into_iter().flatten().copied().collect();
    for strings in [&b"linux,phandle\0"[..], &b"linux,phandle\0\xff\0"[..]] {
        let b = blob(&words(&structure), strings);
        let root = Fdt::new(&b).unwrap().root();
        let names: Vec<&str> = root.properties().map(|p| p.name).collect();
        assert_eq!(names, ["linux,phandle", "phandle"], "{strings:?}");
        assert_eq!(root.property("phandle").map(|p| p.name), Some("phandle"));
        assert_eq!(root.property("linux,phandle").and_then(|p| p.as_u32()), Some(7));
        assert!(root.property("linux").is_none() && root.property("handle").is_none(), "whole names only");
    }
    let bad: Vec<u32> = [&ROOT[..], &prop(14), &[FDT_END_NODE, FDT_END]].into_iter().flatten().copied().collect();
    assert_eq!(Fdt::new(&blob(&words(&bad), b"linux,phandle\0\xff\0")).err(), Some(FdtError::BadName { at: 56 + 8 }));
}

/// A lookup by name compares the name's bytes and its NUL, so a name that is a prefix of
/// another, or has one as a prefix, is not taken for it; and every property's lookup agrees
/// with the walk that reads the names.
#[test]
fn a_property_is_found_by_its_whole_name_only() {
    let mut w = FdtWriter::new().unwrap();
    let root = w.begin_node("").unwrap();
    w.property_u32("reg-names-x", 1).unwrap();
    w.property_u32("reg-names", 2).unwrap();
    w.property_u32("re", 3).unwrap();
    w.end_node(root).unwrap();
    let blob = w.finish().unwrap();
    let fdt = Fdt::new(&blob).unwrap();
    let root = fdt.root();
    assert_eq!(root.property("reg-names").and_then(|p| p.as_u32()), Some(2));
    assert_eq!(root.property("re").and_then(|p| p.as_u32()), Some(3));
    assert_eq!(root.property("reg-names-x").map(|p| p.name), Some("reg-names-x"));
    assert!(root.property("reg").is_none() && root.property("reg-names-").is_none() && root.property("").is_none());
    for blob in [VIRT_GICV3, VIRT_GICV2] {
        let fdt = Fdt::new(blob).unwrap();
        for node in fdt.all_nodes() {
            for p in node.properties() {
                assert_eq!(node.property(p.name), node.properties().find(|q| q.name == p.name), "{}", p.name);
            }
        }
    }
}
