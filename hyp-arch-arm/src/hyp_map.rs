//! The hypervisor's own translation tables: an identity map of the board's RAM (Normal
//! write-back) and of the devices the hypervisor drives (Device-nGnRE), in 2 MiB blocks, or
//! 1 GiB blocks where a whole gigabyte is RAM, and 4 KiB pages over its image.
//!
//! One builder for both architectures: AArch64's EL2 stage 1 (TTBR0_EL2) and ARMv7's HYP
//! mode stage 1 (HTTBR, LPAE) read the same long-descriptor format with a 4 KiB granule
//! (ARM ARM D8.3, descriptor formats; G5.5 for the VMSAv7 long-descriptor format), start at
//! level 1 for the address spaces used here, and give the one privilege level of the regime
//! AP[2] for read-only (AP[1] RES1, D8.4.1; SBO in HYP mode) and XN at bit 54 (D8.4.2). The
//! arch crate gives the tables' memory, the width of its address space and the registers
//! (MAIR/HMAIR: attribute index 0 Normal, 1 Device; `MEMORY_ATTRIBUTES`).
//!
//! Writable XOR executable (docs/boot.md, "The EL2 memory map"): only the image's code is
//! executable, and it is read-only; its read-only data is read-only and never executable;
//! everything else (its writable data and stacks, the heap, guest RAM, free RAM, devices) is
//! read/write and never executable. A bug in a device model can then not turn guest data
//! into hypervisor code, nor patch the hypervisor's code.
//!
//! Built with the MMU off, before anything else needs memory: no allocation, no atomics.

use hyp_core::platform::{CpuStart, PhysRange, Platform};

const GIB: u64 = 1 << 30;
const BLOCK_2M: u64 = 2 << 20;
const PAGE: u64 = 4096;

/// Attribute index 0: Normal inner/outer write-back non-transient read/write-allocate;
/// 1: Device-nGnRE. The value of MAIR_EL2 (D24.2.102), and of HMAIR0 on ARMv7.
pub const MEMORY_ATTRIBUTES: u64 = 0xff | (0x04 << 8);
const ATTR_NORMAL: u64 = 0 << 2;
const ATTR_DEVICE: u64 = 1 << 2;
const AP_RW: u64 = 1 << 6;
const AP_RO: u64 = (1 << 7) | (1 << 6);
const SH_INNER: u64 = 3 << 8;
const AF: u64 = 1 << 10;
const XN: u64 = 1 << 54;
const BLOCK: u64 = 0b01;
const TABLE: u64 = 0b11;
/// A level-3 descriptor that maps a page has the same low bits as a table descriptor.
const PAGE_DESCRIPTOR: u64 = 0b11;
/// The output address of a descriptor.
const ADDRESS: u64 = 0x0000_ffff_ffff_f000;

/// One translation table of the 4 KiB granule.
#[repr(C, align(4096))]
pub struct Table(pub [u64; 512]);

impl Table {
    pub const EMPTY: Table = Table([0; 512]);
}

/// Where the image's parts are: `[start, text_end)` code, `[text_end, rodata_end)`
/// read-only data, `[rodata_end, end)` writable data, stacks and BSS; page-aligned.
#[derive(Clone, Copy, Debug)]
pub struct ImageLayout {
    pub start: u64,
    pub text_end: u64,
    pub rodata_end: u64,
    pub end: u64,
}

#[cfg(target_os = "none")]
extern "C" {
    static __image_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __image_end: u8;
}

#[cfg(target_os = "none")]
impl ImageLayout {
    /// The running image's parts, as its linker script (link.ld of either image) marks them,
    /// BSS included (identity-mapped: VA == PA). Only the addresses of the linker-script
    /// symbols are taken, never their contents.
    pub fn of_this_image() -> ImageLayout {
        ImageLayout {
            start: &raw const __image_start as u64,
            text_end: &raw const __text_end as u64,
            rodata_end: &raw const __rodata_end as u64,
            end: &raw const __image_end as u64,
        }
    }
}

/// The image's own memory for its tables (a static: the map is built before the heap
/// exists): one level-1 table, `L2` level-2 and `L3` level-3 tables.
pub struct TableMemory<const L2: usize, const L3: usize> {
    l1: core::cell::UnsafeCell<Table>,
    l2: core::cell::UnsafeCell<[Table; L2]>,
    l3: core::cell::UnsafeCell<[Table; L3]>,
}

// SAFETY: the tables are written only through `tables`, whose caller promises to be alone
// (the boot CPU, with the MMU off); afterwards only the MMU reads them.
unsafe impl<const L2: usize, const L3: usize> Sync for TableMemory<L2, L3> {}

impl<const L2: usize, const L3: usize> TableMemory<L2, L3> {
    pub const fn new() -> Self {
        TableMemory {
            l1: core::cell::UnsafeCell::new(Table::EMPTY),
            l2: core::cell::UnsafeCell::new([const { Table::EMPTY }; L2]),
            l3: core::cell::UnsafeCell::new([const { Table::EMPTY }; L3]),
        }
    }

    /// The tables to build the map in, the first `level1_entries` of the level-1 table used.
    ///
    /// # Safety
    /// Called once, by the boot CPU running alone, before any MMU uses the tables.
    #[allow(clippy::mut_from_ref)] // the caller's promise: the one reference there is
    pub unsafe fn tables(&self, level1_entries: usize) -> Tables<'_> {
        // SAFETY: the caller's promise: nothing else references the tables.
        unsafe { Tables { l1: &mut *self.l1.get(), l2: &mut *self.l2.get(), l3: &mut *self.l3.get(), level1_entries } }
    }
}

impl<const L2: usize, const L3: usize> Default for TableMemory<L2, L3> {
    fn default() -> Self {
        Self::new()
    }
}

/// The memory the tables are built in: one level-1 table (its first `level1_entries` used:
/// 512 for a 39-bit address space, 4 for ARMv7's 32 bits), level-2 tables for the
/// gigabytes mapped in 2 MiB blocks, level-3 tables for the 2 MiB blocks the image lies in.
/// The table addresses are the addresses the tables are at (identity-mapped).
pub struct Tables<'t> {
    pub l1: &'t mut Table,
    pub l2: &'t mut [Table],
    pub l3: &'t mut [Table],
    pub level1_entries: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// More gigabytes need 2 MiB blocks, or the image more level-3 tables, than `Tables` has.
    TooManyTables,
    /// The board puts RAM or a device beyond the address space.
    BeyondAddressSpace,
    /// The image is not in the RAM the device tree describes.
    ImageOutsideRam,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// RAM: read/write, never executable.
    Normal,
    Device,
    /// The image's code: read-only, executable.
    Text,
    /// The image's read-only data.
    ReadOnly,
}

impl Kind {
    /// Everything of a descriptor but its type bits and address.
    fn attributes(self) -> u64 {
        match self {
            Kind::Normal => ATTR_NORMAL | AP_RW | SH_INNER | AF | XN,
            Kind::Device => ATTR_DEVICE | AP_RW | AF | XN,
            Kind::Text => ATTR_NORMAL | AP_RO | SH_INNER | AF,
            Kind::ReadOnly => ATTR_NORMAL | AP_RO | SH_INNER | AF | XN,
        }
    }
}

fn address_of(table: &Table) -> u64 {
    table as *const Table as u64
}

impl Tables<'_> {
    /// Builds the identity map of `platform`'s RAM and devices, with the image's parts as
    /// `image` says; returns the level-1 table's address (TTBR0_EL2 or HTTBR).
    pub fn build(mut self, platform: &Platform<'_>, image: ImageLayout) -> Result<u64, MapError> {
        let mut l2_used = 0;
        for region in &platform.memory {
            self.map_blocks(&mut l2_used, *region, Kind::Normal)?;
        }
        let gic = &platform.gic;
        let frames = [
            Some(gic.distributor),
            gic.redistributors,
            gic.cpu_interface,
            gic.hyp_interface,
            gic.virtual_cpu_interface,
            gic.its,
        ];
        // The system registers through which a Versatile Express's CPUs are started.
        let sys_flags = platform.cpu_start.iter().filter_map(|start| match start {
            CpuStart::SysFlags(flags) => Some(flags.registers),
            _ => None,
        });
        let power = platform.power_controller.map(|c| match c {
            hyp_core::platform::PowerController::Bcm2835Pm { registers } => registers,
        });
        let devices = core::iter::once(platform.uart)
            .chain(power)
            .chain(platform.virtio_mmio.iter().map(|t| t.window))
            .chain(frames.into_iter().flatten())
            .chain(sys_flags);
        for device in devices {
            self.map_blocks(&mut l2_used, device, Kind::Device)?;
        }
        let mut l3_used = 0;
        for page in (image.start..image.end).step_by(PAGE as usize) {
            let kind = if page < image.text_end {
                Kind::Text
            } else if page < image.rodata_end {
                Kind::ReadOnly
            } else {
                Kind::Normal
            };
            *self.page_entry(&mut l2_used, &mut l3_used, page)? = page | PAGE_DESCRIPTOR | kind.attributes();
        }
        Ok(address_of(self.l1))
    }

    /// Maps `range` in blocks: RAM rounded inward (never map what is not RAM as Normal),
    /// devices outward.
    fn map_blocks(&mut self, l2_used: &mut usize, range: PhysRange, kind: Kind) -> Result<(), MapError> {
        let (start, end) = match kind {
            Kind::Device => (range.base & !(BLOCK_2M - 1), range.end().next_multiple_of(BLOCK_2M)),
            _ => (range.base.next_multiple_of(BLOCK_2M), range.end() & !(BLOCK_2M - 1)),
        };
        let mut addr = start;
        while addr < end {
            let gib = (addr / GIB) as usize;
            if gib >= self.level1_entries {
                return Err(MapError::BeyondAddressSpace);
            }
            if kind == Kind::Normal && addr % GIB == 0 && end - addr >= GIB && self.l1.0[gib] == 0 {
                self.l1.0[gib] = addr | BLOCK | kind.attributes();
                addr += GIB;
                continue;
            }
            let l2 = match self.next_level(self.l1.0[gib], true) {
                Some(index) => index,
                None => {
                    let index = *l2_used;
                    let table = self.l2.get(index).ok_or(MapError::TooManyTables)?;
                    self.l1.0[gib] = address_of(table) | TABLE;
                    *l2_used += 1;
                    index
                }
            };
            self.l2[l2].0[((addr % GIB) / BLOCK_2M) as usize] = addr | BLOCK | kind.attributes();
            addr += BLOCK_2M;
        }
        Ok(())
    }

    /// The index in `l2` (or `l3`) of the table `entry` points to, if it is a table.
    fn next_level(&self, entry: u64, level2: bool) -> Option<usize> {
        let tables: &[Table] = if level2 { self.l2 } else { self.l3 };
        (entry & 0b11 == TABLE).then(|| tables.iter().position(|t| address_of(t) == entry & ADDRESS))?
    }

    /// The level-3 entry that maps `page`, splitting the 1 GiB and 2 MiB blocks above it into
    /// tables of the same attributes where needed.
    fn page_entry(&mut self, l2_used: &mut usize, l3_used: &mut usize, page: u64) -> Result<&mut u64, MapError> {
        let gib = (page / GIB) as usize;
        if gib >= self.level1_entries {
            return Err(MapError::BeyondAddressSpace);
        }
        let l1_entry = self.l1.0[gib];
        let l2 = match self.next_level(l1_entry, true) {
            Some(index) => index,
            None if l1_entry & 0b11 == BLOCK => {
                let index = *l2_used;
                let table = self.l2.get_mut(index).ok_or(MapError::TooManyTables)?;
                split(table, l1_entry, BLOCK_2M, BLOCK);
                self.l1.0[gib] = address_of(table) | TABLE;
                *l2_used += 1;
                index
            }
            None => return Err(MapError::ImageOutsideRam),
        };
        let at = ((page % GIB) / BLOCK_2M) as usize;
        let l2_entry = self.l2[l2].0[at];
        let l3 = match self.next_level(l2_entry, false) {
            Some(index) => index,
            None if l2_entry & 0b11 == BLOCK => {
                let index = *l3_used;
                let table = self.l3.get_mut(index).ok_or(MapError::TooManyTables)?;
                split(table, l2_entry, PAGE, PAGE_DESCRIPTOR);
                self.l2[l2].0[at] = address_of(table) | TABLE;
                *l3_used += 1;
                index
            }
            None => return Err(MapError::ImageOutsideRam),
        };
        Ok(&mut self.l3[l3].0[((page % BLOCK_2M) / PAGE) as usize])
    }
}

/// Fills `table` with the 512 entries of `step` bytes that map what `block` mapped, with its
/// attributes.
fn split(table: &mut Table, block: u64, step: u64, kind_bits: u64) {
    let base = block & ADDRESS;
    let attributes = block & !ADDRESS & !0b11;
    for (i, entry) in table.0.iter_mut().enumerate() {
        *entry = (base + i as u64 * step) | attributes | kind_bits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use hyp_core::platform::SysFlags;

    const DTB: &[u8] = include_bytes!("../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb");

    fn memory(l2: usize, l3: usize) -> (Box<Table>, Vec<Table>, Vec<Table>) {
        (Box::new(Table::EMPTY), (0..l2).map(|_| Table::EMPTY).collect(), (0..l3).map(|_| Table::EMPTY).collect())
    }

    /// What the tables map `va` to: (output address, descriptor attributes), by walking them
    /// as the MMU does (the table addresses are this process's own).
    fn translate(l1: &Table, va: u64) -> Option<(u64, u64)> {
        let mut entry = l1.0[(va / GIB) as usize];
        for (size, level) in [(GIB, 1), (BLOCK_2M, 2), (PAGE, 3)] {
            match (entry & 0b11, level) {
                (0b00 | 0b10, _) => return None,
                (0b11, 3) | (BLOCK, 1 | 2) => return Some(((entry & ADDRESS) + va % size, entry & !ADDRESS & !0b11)),
                _ => {}
            }
            // SAFETY: a table descriptor the builder wrote points at one of the test's tables.
            let next = unsafe { &*((entry & ADDRESS) as *const Table) };
            let index = if level == 1 { (va % GIB) / BLOCK_2M } else { (va % BLOCK_2M) / PAGE };
            entry = next.0[index as usize];
        }
        None
    }

    fn image() -> ImageLayout {
        // QEMU virt's RAM starts at 1 GiB; an image 2 MiB + 12 KiB in, over a 2 MiB boundary.
        let start = 0x4020_0000 - 0x3000;
        ImageLayout { start, text_end: start + 0x5000, rodata_end: start + 0x7000, end: start + 0x9000 }
    }

    #[test]
    fn the_image_is_writable_xor_executable_and_everything_else_never_executable() {
        let platform = Platform::from_device_tree(DTB).unwrap();
        let (mut l1, mut l2, mut l3) = memory(16, 4);
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 512 };
        let root = tables.build(&platform, image()).unwrap();
        assert_eq!(root, address_of(&l1));
        let image = image();
        let ram = platform.memory[0];
        let mut probes: Vec<u64> = (image.start - 2 * PAGE..image.end + 2 * PAGE).step_by(PAGE as usize).collect();
        probes.extend([
            ram.base,
            ram.base + ram.size / 2,
            ram.end() - PAGE,
            platform.uart.base,
            platform.gic.distributor.base,
        ]);
        for va in probes {
            let (pa, attributes) = translate(&l1, va).unwrap_or_else(|| panic!("{va:#x} is not mapped"));
            assert_eq!(pa, va, "identity map");
            let writable = attributes & AP_RO != AP_RO;
            let executable = attributes & XN == 0;
            assert!(!(writable && executable), "{va:#x} is writable and executable");
            assert_eq!(attributes & AF, AF, "{va:#x}: no access fault on first use");
            let in_text = (image.start..image.text_end).contains(&va);
            let in_rodata = (image.text_end..image.rodata_end).contains(&va);
            assert_eq!(executable, in_text, "{va:#x}");
            assert_eq!(writable, !in_text && !in_rodata, "{va:#x}");
            let within = |r: PhysRange| (r.base..r.end()).contains(&va);
            let device = within(platform.uart) || within(platform.gic.distributor);
            assert_eq!(attributes & (0b111 << 2) == ATTR_DEVICE, device, "{va:#x} memory type");
        }
        // Nothing but RAM and devices: the flash below RAM's first device is not mapped.
        assert_eq!(translate(&l1, 0), None);
        assert_eq!(translate(&l1, ram.end() + GIB), None);
    }

    #[test]
    fn the_system_registers_a_cpu_is_started_through_are_mapped_as_a_device() {
        let mut platform = Platform::from_device_tree(DTB).unwrap();
        // Versatile Express's, 0x1c01_0000, where nothing of QEMU's virt is mapped.
        let registers = PhysRange { base: 0x1c01_0000, size: 0x1000 };
        let (mut l1, mut l2, mut l3) = memory(16, 4);
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 512 };
        tables.build(&platform, image()).unwrap();
        assert_eq!(translate(&l1, registers.base), None, "mapped only for a CPU started through them");
        platform.cpu_start[1] = CpuStart::SysFlags(SysFlags { registers });
        let (mut l1, mut l2, mut l3) = memory(16, 4);
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 512 };
        tables.build(&platform, image()).unwrap();
        let flags = SysFlags { registers };
        for va in [flags.set_register(), flags.clear_register()] {
            let (pa, attributes) = translate(&l1, va).unwrap_or_else(|| panic!("{va:#x} is not mapped"));
            assert_eq!((pa, attributes & (0b111 << 2)), (va, ATTR_DEVICE), "{va:#x}");
            assert_ne!(attributes & XN, 0, "never executable");
        }
    }

    #[test]
    fn too_few_tables_and_an_image_outside_ram_are_refused() {
        let platform = Platform::from_device_tree(DTB).unwrap();
        let (mut l1, mut l2, mut l3) = memory(16, 1);
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 512 };
        // Over a 2 MiB boundary, the image needs two level-3 tables.
        assert_eq!(tables.build(&platform, image()), Err(MapError::TooManyTables));

        let (mut l1, mut l2, mut l3) = memory(16, 4);
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 512 };
        let outside =
            ImageLayout { start: 0x1000_0000, text_end: 0x1000_1000, rodata_end: 0x1000_2000, end: 0x1000_3000 };
        assert_eq!(tables.build(&platform, outside), Err(MapError::ImageOutsideRam));

        // A 32-bit address space (ARMv7 HYP mode) has four level-1 entries.
        let (mut l1, mut l2, mut l3) = memory(16, 4);
        let mut beyond = Platform::from_device_tree(DTB).unwrap();
        beyond.memory[0] = PhysRange { base: 0x1_0000_0000, size: GIB };
        let tables = Tables { l1: &mut l1, l2: &mut l2, l3: &mut l3, level1_entries: 4 };
        assert_eq!(tables.build(&beyond, image()), Err(MapError::BeyondAddressSpace));
    }
}
