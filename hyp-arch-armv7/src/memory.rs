//! Physical memory at run time: TLB maintenance for stage 2, and cache maintenance for
//! memory a guest will read with its MMU off (hyp_arch_arm::image::ArmImage).

use core::arch::asm;

use stage2::{Ipa, TlbMaintenance};

use crate::sysregs::Vttbr;

/// Stage-2 TLB maintenance for one VMID (ARM ARM B4.2.2, "TLB maintenance operations"):
/// TLBIALLIS reaches the VMID in VTTBR, so the VM's VTTBR is loaded around the operation.
pub struct Stage2Tlb {
    pub vttbr: u64,
}

/// The VMID of a VTTBR in force until dropped: by-VMID maintenance applies to the VMID in
/// VTTBR, whose earlier value comes back after it.
struct InVmid(u64);

impl InVmid {
    fn enter(vttbr: u64) -> InVmid {
        let saved = InVmid(Vttbr::read());
        // SAFETY: switching VTTBR while in HYP mode does not affect HYP's own translation;
        // the earlier value is back before any guest runs (`drop`).
        unsafe { Vttbr::write(vttbr) };
        aarch32_cpu::asm::isb();
        saved
    }
}

impl Drop for InVmid {
    fn drop(&mut self) {
        // SAFETY: as in `enter`: the VTTBR that was in force.
        unsafe { Vttbr::write(self.0) };
        aarch32_cpu::asm::isb();
    }
}

impl TlbMaintenance for Stage2Tlb {
    fn invalidate_ipa(&mut self, vmid: u16, _ipa: Ipa) {
        // ARMv7 has no stage-2 invalidation by IPA (TLBIIPAS2IS came with ARMv8's AArch32
        // and is an undefined instruction on a Cortex-A15): TLBIALLIS for the VMID drops
        // its stage-2 and combined entries alike, the IPA's among them.
        self.invalidate_vmid(vmid);
    }

    fn invalidate_vmid(&mut self, _vmid: u16) {
        let _in_vmid = InVmid::enter(self.vttbr);
        // SAFETY: as above: TLBIALLIS for the VMID in VTTBR.
        unsafe { asm!("dsb ishst", "mcr p15, 0, {z}, c8, c3, 0", "dsb ish", "isb", z = in(reg) 0u32, options(nostack)) }
    }

    fn publish(&mut self) {
        // SAFETY: a barrier.
        unsafe { asm!("dsb ishst", options(nostack)) };
    }
}

/// Cleans `[start, start + len)` to the point of coherency and invalidates the instruction
/// caches (ICIALLUIS): a guest starting with its MMU off reads memory, not the caches.
pub fn make_visible_to_guest(start: u64, len: u64) {
    crate::mmu::dcache_range(start, start + len, crate::mmu::DcOp::Clean);
    // SAFETY: instruction cache invalidation has no effect on data.
    unsafe { asm!("mcr p15, 0, {z}, c7, c1, 0", "dsb ish", "isb", z = in(reg) 0u32, options(nostack)) };
}

/// Zeroes `[start, start + len)` and cleans it to the point of coherency, so a guest reading
/// with its MMU off sees zeros and nothing that was there before.
pub fn zero_for_guest(start: u64, len: u64) {
    let (start, end) = (start as usize, (start + len) as usize);
    // ARMv7 has no DC ZVA: the bulk goes 128 bytes per loop, four STMs of eight zeroed
    // registers (the compiler's memset stores a word at a time: 400 million instructions
    // for a 512 MiB VM, 12% of a Linux boot).
    let bulk_start = start.next_multiple_of(BULK).min(end);
    let bulk_end = bulk_start + (end - bulk_start) / BULK * BULK;
    // SAFETY: the caller owns the range, identity-mapped Normal memory.
    unsafe { core::ptr::write_bytes(start as *mut u8, 0, bulk_start - start) };
    if bulk_end > bulk_start {
        // SAFETY: [bulk_start, bulk_end) lies in the caller's range, a whole number of
        // 128-byte blocks; only the named registers are written.
        unsafe {
            asm!(
                "2:",
                "stmia r12!, {{r0-r5, r8, r10}}",
                "stmia r12!, {{r0-r5, r8, r10}}",
                "stmia r12!, {{r0-r5, r8, r10}}",
                "stmia r12!, {{r0-r5, r8, r10}}",
                "cmp r12, lr",
                "blo 2b",
                inout("r12") bulk_start => _,
                in("lr") bulk_end,
                in("r0") 0, in("r1") 0, in("r2") 0, in("r3") 0,
                in("r4") 0, in("r5") 0, in("r8") 0, in("r10") 0,
                options(nostack)
            )
        };
    }
    // SAFETY: as above, the tail.
    unsafe { core::ptr::write_bytes(bulk_end as *mut u8, 0, end - bulk_end) };
    crate::mmu::dcache_range(start as u64, end as u64, crate::mmu::DcOp::Clean);
}

/// What one loop of `zero_for_guest` zeroes.
const BULK: usize = 128;
