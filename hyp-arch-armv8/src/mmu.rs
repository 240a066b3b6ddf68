//! The hypervisor's own translation tables (EL2 stage 1): an identity map of the board's RAM
//! (Normal write-back) and of the devices the hypervisor drives (Device-nGnRE), in 2 MiB
//! blocks, or 1 GiB blocks where a whole gigabyte is RAM, and 4 KiB pages over its image.
//!
//! Writable XOR executable (docs/boot.md, "The EL2 memory map"): only the image's code is
//! executable, and it is read-only; its read-only data is read-only and never executable;
//! everything else (its writable data and stacks, the heap, guest RAM, free RAM, devices) is
//! read/write and never executable, and SCTLR_EL2.WXN makes any writable page
//! non-executable whatever its descriptor says. A bug in a device model can then not turn
//! guest data into hypervisor code, nor patch the hypervisor's code.
//!
//! Built with the MMU off before anything else needs memory; every CPU then uses the same
//! tables. ARM ARM D8 (VMSAv8-64), D8.3 (descriptor formats), D8.4.1 (stage 1 data access
//! permissions: AP[2:1] for a regime with one privilege level), D8.4.2 (execute-never: XN,
//! bit 54, for the EL2 regime), D24.2.175 (SCTLR_EL2.WXN).

use crate::boot::ImageLayout;

use core::arch::asm;

use hyp_core::platform::{PhysRange, Platform};

const GIB: u64 = 1 << 30;
const BLOCK_2M: u64 = 2 << 20;
/// Gigabytes of address space that may need 2 MiB granularity (devices beside RAM).
const MAX_L2_TABLES: usize = 16;
const PAGE: u64 = 4096;
/// 2 MiB blocks that may need 4 KiB pages: those the image lies in (it is at most a few MiB).
const MAX_L3_TABLES: usize = 4;
/// T0SZ = 25: 39-bit VA, translation starts at level 1 with 512 1 GiB entries.
const T0SZ: u64 = 25;

#[repr(C, align(4096))]
struct Table([u64; 512]);

static mut L1_TABLE: Table = Table([0; 512]);
static mut L2_TABLES: [Table; MAX_L2_TABLES] = [const { Table([0; 512]) }; MAX_L2_TABLES];
static mut L3_TABLES: [Table; MAX_L3_TABLES] = [const { Table([0; 512]) }; MAX_L3_TABLES];

/// MAIR_EL2: Attr0 Normal inner/outer write-back non-transient RW-allocate; Attr1
/// Device-nGnRE (D24.2.102).
const MAIR: u64 = 0xff | (0x04 << 8);
const ATTR_NORMAL: u64 = 0 << 2;
const ATTR_DEVICE: u64 = 1 << 2;
/// AP[1] is RES1 in the EL2 regime; AP[2] = 0 is read/write, 1 read-only.
const AP_RW: u64 = 1 << 6;
const AP_RO: u64 = (1 << 7) | (1 << 6);
const SH_INNER: u64 = 3 << 8;
const AF: u64 = 1 << 10;
const XN: u64 = 1 << 54;
const BLOCK: u64 = 0b01;
const TABLE: u64 = 0b11;
/// A level-3 descriptor that maps a page has the same low bits as a table descriptor.
const PAGE_DESCRIPTOR: u64 = 0b11;
/// The attribute bits of a block or page descriptor (everything but the type and address).
const ATTRIBUTES: u64 = !0x0000_ffff_ffff_f003;

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
    fn block_attributes(self) -> u64 {
        BLOCK | self.attributes()
    }
}

#[derive(Debug)]
pub enum MmuError {
    TooManyTables,
    BeyondVaSize,
    /// The image is not in the RAM the device tree describes.
    ImageOutsideRam,
}

/// The register values every CPU loads to turn its MMU on.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MmuRegisters {
    pub mair: u64,
    pub tcr: u64,
    pub ttbr0: u64,
    pub sctlr: u64,
}

/// Builds the identity map, with the image's parts as `image` says. Called once, by the boot
/// CPU, with the MMU off.
pub fn build(platform: &Platform<'_>, image: ImageLayout) -> Result<MmuRegisters, MmuError> {
    // References to `static mut` go through raw pointers.
    #[allow(clippy::deref_addrof)]
    // SAFETY: the boot CPU runs alone with the MMU off; nothing else references the tables.
    let (l1, l2, l3) = unsafe { (&mut *(&raw mut L1_TABLE), &mut *(&raw mut L2_TABLES), &mut *(&raw mut L3_TABLES)) };
    let mut l2_used = 0;
    let mut map = |range: PhysRange, kind: Kind| -> Result<(), MmuError> {
        // RAM is rounded inward (never map what is not RAM as Normal), devices outward.
        let (start, end) = match kind {
            Kind::Device => (range.base & !(BLOCK_2M - 1), range.end().next_multiple_of(BLOCK_2M)),
            _ => (range.base.next_multiple_of(BLOCK_2M), range.end() & !(BLOCK_2M - 1)),
        };
        let mut addr = start;
        while addr < end {
            let gib = (addr / GIB) as usize;
            if gib >= 512 {
                return Err(MmuError::BeyondVaSize);
            }
            if kind == Kind::Normal && addr % GIB == 0 && end - addr >= GIB && l1.0[gib] == 0 {
                l1.0[gib] = addr | kind.block_attributes();
                addr += GIB;
                continue;
            }
            if l1.0[gib] & 0b11 != TABLE {
                if l2_used == MAX_L2_TABLES {
                    return Err(MmuError::TooManyTables);
                }
                l1.0[gib] = (&raw const l2[l2_used] as u64) | TABLE;
                l2_used += 1;
            }
            let table = (l1.0[gib] & 0x0000_ffff_ffff_f000) as *mut Table;
            // SAFETY: `table` is one of L2_TABLES, installed just above or earlier.
            let table = unsafe { &mut *table };
            table.0[((addr % GIB) / BLOCK_2M) as usize] = addr | kind.block_attributes();
            addr += BLOCK_2M;
        }
        Ok(())
    };
    for region in &platform.memory {
        map(*region, Kind::Normal)?;
    }
    map(platform.uart, Kind::Device)?;
    for transport in &platform.virtio_mmio {
        map(transport.window, Kind::Device)?;
    }
    let gic = &platform.gic;
    for frame in
        [Some(gic.distributor), gic.redistributors, gic.cpu_interface, gic.hyp_interface, gic.virtual_cpu_interface]
            .into_iter()
            .flatten()
    {
        map(frame, Kind::Device)?;
    }
    let mut l3_used = 0;
    let mut page = image.start;
    while page < image.end {
        let kind = if page < image.text_end {
            Kind::Text
        } else if page < image.rodata_end {
            Kind::ReadOnly
        } else {
            Kind::Normal
        };
        let entry = page_entry(l1, l2, &mut l2_used, l3, &mut l3_used, page)?;
        *entry = page | PAGE_DESCRIPTOR | kind.attributes();
        page += PAGE;
    }

    let parange = aarch64_cpu::registers::ID_AA64MMFR0_EL1.get() & 0xf;
    // TG0 (bits [15:14]) stays 0: 4 KiB granule.
    let tcr = T0SZ
        | (0b01 << 8)   // IRGN0: write-back read/write-allocate
        | (0b01 << 10)  // ORGN0: write-back read/write-allocate
        | (0b11 << 12)  // SH0: inner shareable
        | (parange.min(0b101) << 16) // PS
        | (1 << 23) | (1 << 31); // RES1
                                 // SCTLR_EL2: RES1 bits, M, C, SA, I, WXN.
    let sctlr = 0x30c5_0830 | (1 << 0) | (1 << 2) | (1 << 3) | (1 << 12) | (1 << 19);
    Ok(MmuRegisters { mair: MAIR, tcr, ttbr0: &raw const L1_TABLE as u64, sctlr })
}

/// The level-3 entry that maps `page`, splitting the 1 GiB and 2 MiB blocks above it into
/// tables of the same attributes where needed.
fn page_entry<'t>(
    l1: &mut Table,
    l2: &'t mut [Table; MAX_L2_TABLES],
    l2_used: &mut usize,
    l3: &'t mut [Table; MAX_L3_TABLES],
    l3_used: &mut usize,
    page: u64,
) -> Result<&'t mut u64, MmuError> {
    let gib = (page / GIB) as usize;
    let l1_entry = *l1.0.get(gib).ok_or(MmuError::BeyondVaSize)?;
    let l2_table = match l1_entry & 0b11 {
        TABLE => l2.iter().position(|t| &raw const *t as u64 == l1_entry & !ATTRIBUTES & !0b11),
        BLOCK => {
            let index = *l2_used;
            let table = l2.get_mut(index).ok_or(MmuError::TooManyTables)?;
            let base = l1_entry & !ATTRIBUTES & !0b11;
            for (i, e) in table.0.iter_mut().enumerate() {
                *e = (base + i as u64 * BLOCK_2M) | (l1_entry & ATTRIBUTES) | BLOCK;
            }
            l1.0[gib] = (&raw const *table as u64) | TABLE;
            *l2_used += 1;
            Some(index)
        }
        _ => None,
    }
    .ok_or(MmuError::ImageOutsideRam)?;
    let l2_table = &mut l2[l2_table];
    let index = ((page % GIB) / BLOCK_2M) as usize;
    let l2_entry = l2_table.0[index];
    let l3_table = match l2_entry & 0b11 {
        TABLE => l3.iter().position(|t| &raw const *t as u64 == l2_entry & !ATTRIBUTES & !0b11),
        BLOCK => {
            let i = *l3_used;
            let table = l3.get_mut(i).ok_or(MmuError::TooManyTables)?;
            let base = l2_entry & !ATTRIBUTES & !0b11;
            for (n, e) in table.0.iter_mut().enumerate() {
                *e = (base + n as u64 * PAGE) | (l2_entry & ATTRIBUTES) | PAGE_DESCRIPTOR;
            }
            l2_table.0[index] = (&raw const *table as u64) | TABLE;
            *l3_used += 1;
            Some(i)
        }
        _ => None,
    }
    .ok_or(MmuError::ImageOutsideRam)?;
    Ok(&mut l3[l3_table].0[((page % BLOCK_2M) / PAGE) as usize])
}

use aarch64_cpu::registers::Readable;

/// Turns this CPU's MMU and caches on. Memory written with the MMU off must have no stale
/// lines in the caches: the boot CPU invalidates its image first (`invalidate_dcache_range`).
pub fn enable(regs: &MmuRegisters) {
    // SAFETY: the tables identity-map the code running now, its stack and the devices it
    // uses, so execution continues at the same addresses once translation is on.
    unsafe {
        asm!(
            "msr mair_el2, {mair}",
            "msr tcr_el2, {tcr}",
            "msr ttbr0_el2, {ttbr0}",
            "isb",
            "tlbi alle2",
            "dsb ish",
            "ic iallu",
            "dsb ish",
            "isb",
            "msr sctlr_el2, {sctlr}",
            "isb",
            mair = in(reg) regs.mair,
            tcr = in(reg) regs.tcr,
            ttbr0 = in(reg) regs.ttbr0,
            sctlr = in(reg) regs.sctlr,
            options(nostack),
        );
    }
}

pub fn dcache_line_size() -> u64 {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only identification register.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    4 << ((ctr >> 16) & 0xf)
}

/// Data cache maintenance by VA (ARM ARM C5.3): which operation.
#[derive(Clone, Copy)]
enum DcOp {
    /// DC IVAC: drop stale clean lines.
    Invalidate,
    /// DC CVAC: write dirty lines back to the point of coherency.
    Clean,
    /// DC CIVAC: both.
    CleanInvalidate,
}

fn dcache_range(start: u64, end: u64, op: DcOp) {
    let line = dcache_line_size();
    let mut addr = start & !(line - 1);
    while addr < end {
        // SAFETY: cache maintenance by VA on memory this image maps; invalidation is used only
        // on memory written with the caches off, so no dirty data is lost.
        unsafe {
            match op {
                DcOp::Invalidate => asm!("dc ivac, {}", in(reg) addr, options(nostack)),
                DcOp::Clean => asm!("dc cvac, {}", in(reg) addr, options(nostack)),
                DcOp::CleanInvalidate => asm!("dc civac, {}", in(reg) addr, options(nostack)),
            }
        }
        addr += line;
    }
    // SAFETY: a barrier.
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// Drops stale (clean) lines over `[start, end)` so memory written with the caches off is
/// read back correctly once they are on.
pub fn invalidate_dcache_range(start: u64, end: u64) {
    dcache_range(start, end, DcOp::Invalidate);
}

/// Makes what this CPU wrote over `[start, end)` visible to a CPU or guest that reads
/// memory with its MMU off.
pub fn clean_dcache_range(start: u64, end: u64) {
    dcache_range(start, end, DcOp::Clean);
}

/// What a guest's set/way maintenance asks of its memory.
pub fn clean_invalidate_dcache_range(start: u64, end: u64) {
    dcache_range(start, end, DcOp::CleanInvalidate);
}
