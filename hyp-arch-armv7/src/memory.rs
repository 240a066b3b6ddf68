//! Physical memory at run time: TLB maintenance for stage 2, and cache maintenance for
//! memory a guest will read with its MMU off (hyp_arch_arm::image::ArmImage).

use core::arch::asm;

use stage2::{Ipa, TlbMaintenance};

use crate::sysregs::Vttbr;

/// Stage-2 TLB maintenance for one VMID (ARM ARM B4.2.2, "TLB maintenance operations"):
/// TLBIIPAS2IS and TLBIALLIS reach the VMID in VTTBR, so the VM's VTTBR is loaded around
/// the operation.
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
    fn invalidate_ipa(&mut self, _vmid: u16, ipa: Ipa) {
        let _in_vmid = InVmid::enter(self.vttbr);
        // SAFETY: TLB maintenance has no effect on memory; the DSBs order it after the
        // descriptor store and before the next one (break-before-make). TLBIIPAS2IS takes
        // IPA[39:12] in bits [27:0]; TLBIALLIS then drops the combined stage 1 and 2
        // entries of the VMID, which by-IPA invalidation does not reach.
        unsafe {
            asm!(
                "dsb ishst",
                "mcr p15, 4, {ipa}, c8, c0, 1",
                "dsb ish",
                "mcr p15, 0, {ipa}, c8, c3, 0",
                "dsb ish",
                "isb",
                ipa = in(reg) (ipa.0 >> 12) as u32,
                options(nostack)
            )
        }
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
    // SAFETY: the caller owns the range, identity-mapped Normal memory.
    unsafe { core::ptr::write_bytes(start as usize as *mut u8, 0, len as usize) };
    crate::mmu::dcache_range(start, start + len, crate::mmu::DcOp::Clean);
}
