//! The HYP-mode MMU: the registers that turn on the hypervisor's identity map (built by
//! hyp_arch_arm::hyp_map in the long-descriptor format, writable XOR executable: docs/boot.md,
//! "The EL2 memory map"), and data cache maintenance by MVA. ARM ARM B3.6 (the
//! long-descriptor format), B4.1.67 (HTCR), B4.1.66 (HSCTLR.WXN), B4.2.1 (cache maintenance).

use core::arch::asm;

use aarch32_cpu::register::{Hmair0, Hmair1, Hsctlr};
use hyp_arch_arm::hyp_map::{ImageLayout, MapError, TableMemory, MEMORY_ATTRIBUTES};
use hyp_core::platform::Platform;

use crate::sysregs::{Htcr, Httbr};

/// A 32-bit address space has four gigabytes, each of which may need 2 MiB granularity.
const MAX_L2_TABLES: usize = 4;
/// 2 MiB blocks that may need 4 KiB pages: those the image lies in (it is at most a few MiB).
const MAX_L3_TABLES: usize = 4;
/// HTCR (B4.1.67): T0SZ 0 (the whole 32-bit VA space, translation from level 1 with four
/// entries), walks Inner and Outer write-back write-allocate cacheable, Inner Shareable; bit
/// 31 is RES1 (UNK/SBOP on ARMv7, RES1 on ARMv8's AArch32).
const HTCR_VALUE: u32 = (1 << 31) | (0b11 << 12) | (0b01 << 10) | (0b01 << 8);

static TABLES: TableMemory<MAX_L2_TABLES, MAX_L3_TABLES> = TableMemory::new();

/// The register values every CPU loads to turn its MMU on (the layout `secondary_entry`
/// reads, boot.rs).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MmuRegisters {
    pub hmair0: u32,
    pub htcr: u32,
    pub hsctlr: u32,
    pub httbr: u64,
}

/// Builds the identity map (hyp_arch_arm::hyp_map), with the image's parts as `image` says.
/// Called once, by the boot CPU, with the MMU off.
pub fn build(platform: &Platform<'_>, image: ImageLayout) -> Result<MmuRegisters, MapError> {
    // SAFETY: the boot CPU runs alone with the MMU off, once. Four level-1 entries: the
    // 32-bit VA space.
    let httbr = unsafe { TABLES.tables(4) }.build(platform, image)?;
    // WXN: any writable page is never executable, whatever its descriptor says.
    let hsctlr = Hsctlr::new_with_raw_value(crate::boot::HSCTLR_RES1)
        .with_m(true)
        .with_c(true)
        .with_i(true)
        .with_wxn(true)
        .raw_value();
    Ok(MmuRegisters { hmair0: MEMORY_ATTRIBUTES as u32, htcr: HTCR_VALUE, hsctlr, httbr })
}

/// Turns this CPU's MMU and caches on. Memory written with the MMU off must have no stale
/// lines in the caches: the boot CPU invalidates its image first (`invalidate_dcache_range`).
pub fn enable(regs: &MmuRegisters) {
    // SAFETY: the translation registers of HYP mode, not in use while HSCTLR.M is clear:
    // attribute 0 Normal write-back, 1 Device (hyp_map::MEMORY_ATTRIBUTES), the tables built
    // by `build`.
    unsafe {
        Hmair0::write(Hmair0(regs.hmair0));
        Hmair1::write(Hmair1(0));
        Htcr::write(regs.htcr);
        Httbr::write(regs.httbr);
    }
    // SAFETY: the tables identity-map the code running now, its stack and the devices it
    // uses, so execution continues at the same addresses once translation is on. TLBIALLH
    // and ICIALLU drop whatever the CPU held from before.
    unsafe {
        asm!(
            "isb",
            "mcr p15, 4, {z}, c8, c7, 0",
            "dsb ish",
            "mcr p15, 0, {z}, c7, c5, 0",
            "dsb ish",
            "isb",
            z = in(reg) 0u32,
            options(nostack),
        );
    }
    Hsctlr::write(Hsctlr::new_with_raw_value(regs.hsctlr));
    // SAFETY: a barrier: the MMU is on for the next instruction.
    unsafe { asm!("isb", options(nostack)) };
}

/// The smallest data cache line (CTR.DminLine, B4.1.42), in bytes.
pub fn dcache_line_size() -> u32 {
    let ctr = aarch32_cpu::register::Ctr::read().0;
    4 << ((ctr >> 16) & 0xf)
}

/// Data cache maintenance by MVA to the point of coherency (B4.2.1): which operation.
#[derive(Clone, Copy)]
pub enum DcOp {
    /// DCIMVAC: drop stale clean lines (of memory written with the caches off, which is then
    /// read back correctly once they are on).
    Invalidate,
    /// DCCMVAC: write dirty lines back to the point of coherency (for a CPU or guest that
    /// reads memory with its MMU off).
    Clean,
    /// DCCIMVAC: both (what a guest's set/way maintenance asks of its memory).
    CleanInvalidate,
}

/// `op` on every data cache line of `[start, end)`, then a DSB.
pub fn dcache_range(start: u64, end: u64, op: DcOp) {
    let line = dcache_line_size();
    let (start, end) = (start as u32, end.min(1 << 32) as u32);
    let mut addr = start & !(line - 1);
    while addr < end {
        // SAFETY: cache maintenance by MVA on memory this image maps; invalidation is used only
        // on memory written with the caches off, so no dirty data is lost.
        unsafe {
            match op {
                DcOp::Invalidate => asm!("mcr p15, 0, {}, c7, c6, 1", in(reg) addr, options(nostack)),
                DcOp::Clean => asm!("mcr p15, 0, {}, c7, c10, 1", in(reg) addr, options(nostack)),
                DcOp::CleanInvalidate => asm!("mcr p15, 0, {}, c7, c14, 1", in(reg) addr, options(nostack)),
            }
        }
        let Some(next) = addr.checked_add(line) else { break };
        addr = next;
    }
    // SAFETY: a barrier.
    unsafe { asm!("dsb sy", options(nostack)) };
}
