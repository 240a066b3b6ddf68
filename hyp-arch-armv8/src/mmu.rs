//! The EL2 MMU: the registers that turn on the hypervisor's identity map (built by
//! hyp_arch_arm::hyp_map, writable XOR executable: docs/boot.md, "The EL2 memory map"), and
//! data cache maintenance by VA. ARM ARM D8 (VMSAv8-64), D24.2.175 (SCTLR_EL2.WXN).

use core::arch::asm;

use aarch64_cpu::registers::{Readable, ID_AA64MMFR0_EL1, SCTLR_EL2, TCR_EL2};
use hyp_arch_arm::hyp_map::{ImageLayout, MapError, TableMemory, MEMORY_ATTRIBUTES};
use hyp_core::platform::Platform;

/// Gigabytes of address space that may need 2 MiB granularity (devices beside RAM).
const MAX_L2_TABLES: usize = 16;
/// 2 MiB blocks that may need 4 KiB pages: those the image lies in (it is at most a few MiB).
const MAX_L3_TABLES: usize = 4;
/// T0SZ = 25: 39-bit VA, translation starts at level 1 with 512 1 GiB entries.
const T0SZ: u64 = 25;
/// The RES1 bits of TCR_EL2 ([31], [23]) and SCTLR_EL2 (with HCR_EL2.E2H 0: ARM ARM D24.2),
/// which `aarch64-cpu` does not name.
const TCR_EL2_RES1: u64 = (1 << 31) | (1 << 23);
const SCTLR_EL2_RES1: u64 = 0x30c5_0830;

static TABLES: TableMemory<MAX_L2_TABLES, MAX_L3_TABLES> = TableMemory::new();

/// The register values every CPU loads to turn its MMU on.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct MmuRegisters {
    pub mair: u64,
    pub tcr: u64,
    pub ttbr0: u64,
    pub sctlr: u64,
}

/// Builds the identity map (hyp_arch_arm::hyp_map), with the image's parts as `image` says.
/// Called once, by the boot CPU, with the MMU off.
pub fn build(platform: &Platform<'_>, image: ImageLayout) -> Result<MmuRegisters, MapError> {
    // SAFETY: the boot CPU runs alone with the MMU off, once. 512 level-1 entries: T0SZ.
    let ttbr0 = unsafe { TABLES.tables(512) }.build(platform, image)?;
    let parange = ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange).min(0b101);
    let tcr = TCR_EL2::T0SZ.val(T0SZ)
        + TCR_EL2::TG0::KiB_4
        + TCR_EL2::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + TCR_EL2::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + TCR_EL2::SH0::Inner
        + TCR_EL2::PS.val(parange);
    // WXN: any writable page is non-executable whatever its descriptor says (D24.2.175).
    let sctlr = SCTLR_EL2::M::Enable
        + SCTLR_EL2::C::Cacheable
        + SCTLR_EL2::SA::Enable
        + SCTLR_EL2::I::Cacheable
        + SCTLR_EL2::WXN::Enable;
    let (tcr, sctlr) = (tcr.value | TCR_EL2_RES1, sctlr.value | SCTLR_EL2_RES1);
    Ok(MmuRegisters { mair: MEMORY_ATTRIBUTES, tcr, ttbr0, sctlr })
}

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
