//! Where a bus master's DMA lands (Devicetree Specification v0.4, §2.3.9 `dma-ranges`):
//! the buses above a device translate the addresses it puts on its bus into CPU physical
//! addresses, each through its `dma-ranges` (child bus address, parent bus address, length).
//! An identity-mapped VM must have its RAM where its device reaches, and its device tree
//! carries the same translation (docs/capability-model.md, D3).
//!
//! A bus with no `dma-ranges`, or an empty one, passes addresses through unchanged: that is
//! how Linux reads a tree (the specification says an absent property maps nothing, but the
//! boards' trees leave it out where no translation happens, and their kernels DMA through
//! such buses).

use heapless::Vec as FixedVec;

use super::{be32, be64, Node};

/// The most windows a reach is made of (a Raspberry Pi 4's buses give one).
pub const MAX_DMA_RANGES: usize = 4;

/// One window of a device's DMA: its bus addresses `bus..bus + size` are the CPU physical
/// addresses `cpu..cpu + size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRange {
    pub bus: u64,
    pub cpu: u64,
    pub size: u64,
}

impl DmaRange {
    /// The end of its CPU addresses (saturated at the top of the address space).
    pub fn cpu_end(&self) -> u64 {
        self.cpu.saturating_add(self.size)
    }
}

/// What a device's DMA reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DmaReach {
    /// No bus above it translates: its bus addresses are CPU physical addresses, all of them.
    Everything,
    /// Only these windows (none: it reaches no memory at all).
    Windows(FixedVec<DmaRange, MAX_DMA_RANGES>),
}

impl DmaReach {
    /// Whether the CPU physical range `base..base + size` lies in one window.
    pub fn covers(&self, base: u64, size: u64) -> bool {
        match self {
            DmaReach::Everything => true,
            DmaReach::Windows(w) => {
                w.iter().any(|r| base >= r.cpu && base.checked_add(size).is_some_and(|end| end <= r.cpu_end()))
            }
        }
    }
}

impl<'a> Node<'a> {
    /// What this node's DMA reaches through the buses above it, innermost first. `None` when
    /// it cannot be read: a `dma-ranges` with entries of more than two cells or whose length
    /// is not a whole number of entries, more than `MAX_DMA_RANGES` windows, or more buses
    /// than the reader follows. A device whose reach is unknown must not be trusted with an
    /// identity-mapped VM's buffers.
    pub fn dma_reach(&self) -> Option<DmaReach> {
        let (path, depth) = self.buses()?;
        let mut reach: Option<FixedVec<DmaRange, MAX_DMA_RANGES>> = None;
        for bus in path[..depth].iter().rev().flatten() {
            let Some(property) = bus.property("dma-ranges") else { continue };
            if property.value.is_empty() {
                continue;
            }
            let (child, parent, size) = (bus.own_cells().address, bus.parent_cells.address, bus.own_cells().size);
            if ![child, parent, size].iter().all(|c| (1..=2).contains(c)) {
                return None;
            }
            let entry = 4 * (child + parent + size) as usize;
            if !property.value.len().is_multiple_of(entry) {
                return None;
            }
            let number =
                |bytes: &[u8], cells: u32| if cells == 1 { be32(bytes, 0).map(u64::from) } else { be64(bytes, 0) };
            let (c, p) = (4 * child as usize, 4 * (child + parent) as usize);
            // What the device reaches so far, as addresses on this bus's children's side.
            let whole = DmaRange { bus: 0, cpu: 0, size: u64::MAX };
            let so_far = reach.take().unwrap_or_else(|| FixedVec::from_slice(&[whole]).unwrap_or_default());
            let mut next = FixedVec::new();
            for e in property.value.chunks_exact(entry) {
                let (from, to, length) = (number(&e[..c], child)?, number(&e[c..p], parent)?, number(&e[p..], size)?);
                for r in &so_far {
                    let lo = r.cpu.max(from);
                    let hi = r.cpu_end().min(from.saturating_add(length));
                    if lo < hi {
                        let window =
                            DmaRange { bus: r.bus + (lo - r.cpu), cpu: to.checked_add(lo - from)?, size: hi - lo };
                        next.push(window).ok()?;
                    }
                }
            }
            reach = Some(next);
        }
        Some(reach.map_or(DmaReach::Everything, DmaReach::Windows))
    }
}

#[cfg(test)]
mod tests {
    use vm_fdt::FdtWriter;

    use super::*;
    use crate::fdt::Fdt;

    /// A root with two cells, `/soc` (one cell, `soc_dma`), a device in it, a bus with two
    /// cells (`bus_dma`) and a device in it, and a device at the root.
    fn tree(soc_dma: Option<&[u32]>, bus_dma: Option<&[u32]>) -> std::vec::Vec<u8> {
        let mut f = FdtWriter::new().unwrap();
        let root = f.begin_node("").unwrap();
        f.property_u32("#address-cells", 2).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        let soc = f.begin_node("soc").unwrap();
        f.property_u32("#address-cells", 1).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        f.property_array_u32("ranges", &[0x7e00_0000, 0, 0xfe00_0000, 0x180_0000]).unwrap();
        if let Some(d) = soc_dma {
            f.property_array_u32("dma-ranges", d).unwrap();
        }
        let mmc = f.begin_node("mmc@7e300000").unwrap();
        f.property_array_u32("reg", &[0x7e30_0000, 0x100]).unwrap();
        f.end_node(mmc).unwrap();
        let inner = f.begin_node("inner").unwrap();
        f.property_u32("#address-cells", 2).unwrap();
        f.property_u32("#size-cells", 1).unwrap();
        f.property_array_u32("ranges", &[0, 0x7e00_0000, 0x7e00_0000, 0x100_0000]).unwrap();
        if let Some(d) = bus_dma {
            f.property_array_u32("dma-ranges", d).unwrap();
        }
        let deep = f.begin_node("dev@7e340000").unwrap();
        f.property_array_u32("reg", &[0, 0x7e34_0000, 0x100]).unwrap();
        f.end_node(deep).unwrap();
        f.end_node(inner).unwrap();
        f.end_node(soc).unwrap();
        let top = f.begin_node("dev@9000000").unwrap();
        f.property_array_u32("reg", &[0, 0x0900_0000, 0x1000]).unwrap();
        f.end_node(top).unwrap();
        f.end_node(root).unwrap();
        f.finish().unwrap()
    }

    fn reach(blob: &[u8], path: &str) -> Option<DmaReach> {
        Fdt::new(blob).unwrap().find_node(path).unwrap().dma_reach()
    }

    fn windows(w: &[DmaRange]) -> Option<DmaReach> {
        Some(DmaReach::Windows(FixedVec::from_slice(w).unwrap()))
    }

    #[test]
    fn a_raspberry_pi_4_s_soc_reaches_the_first_gib_at_bus_address_0xc0000000() {
        // bcm2711.dtsi: `/soc` dma-ranges = <0xc0000000  0x0 0x0  0x40000000>.
        let blob = tree(Some(&[0xc000_0000, 0, 0, 0x4000_0000]), None);
        let pi = DmaRange { bus: 0xc000_0000, cpu: 0, size: 0x4000_0000 };
        assert_eq!(reach(&blob, "/soc/mmc@7e300000"), windows(&[pi]));
        assert_eq!(reach(&blob, "/soc/inner/dev@7e340000"), windows(&[pi]), "a bus without dma-ranges passes through");
        assert_eq!(reach(&blob, "/dev@9000000"), Some(DmaReach::Everything), "no bus above it");
        let r = reach(&blob, "/soc/mmc@7e300000").unwrap();
        assert!(r.covers(0x2000_0000, 0x1000_0000));
        assert!(!r.covers(0x3800_0000, 0x1000_0000), "it runs past the first GiB");
        assert!(!r.covers(0x4000_0000, 0x1000));
    }

    #[test]
    fn translations_compose_from_the_device_outward() {
        // The inner bus maps its bus addresses 0x1000_0000.. to the soc's 0xc000_0000..
        // (256 MiB), which the soc maps to CPU 0x0..: the device reaches CPU 0..256 MiB.
        let blob = tree(Some(&[0xc000_0000, 0, 0, 0x4000_0000]), Some(&[0, 0x1000_0000, 0xc000_0000, 0x1000_0000]));
        let expected = DmaRange { bus: 0x1000_0000, cpu: 0, size: 0x1000_0000 };
        assert_eq!(reach(&blob, "/soc/inner/dev@7e340000"), windows(&[expected]));
        // Windows that miss each other reach nothing.
        let blob = tree(Some(&[0xc000_0000, 0, 0, 0x4000_0000]), Some(&[0, 0, 0x1000_0000, 0x1000]));
        assert_eq!(reach(&blob, "/soc/inner/dev@7e340000"), windows(&[]));
        // An empty dma-ranges is one to one.
        let blob = tree(Some(&[]), None);
        assert_eq!(reach(&blob, "/soc/mmc@7e300000"), Some(DmaReach::Everything));
    }

    #[test]
    fn a_dma_ranges_it_cannot_read_is_an_unknown_reach() {
        let blob = tree(Some(&[0xc000_0000, 0, 0]), None);
        assert_eq!(reach(&blob, "/soc/mmc@7e300000"), None, "not a whole entry");
        let five: std::vec::Vec<u32> = (0..5u32).flat_map(|i| [i << 24, 0, i << 24, 0x10_0000]).collect();
        assert_eq!(reach(&tree(Some(&five), None), "/soc/mmc@7e300000"), None, "more windows than kept");
    }
}
