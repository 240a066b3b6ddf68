//! Physical memory at run time: TLB maintenance for stage 2, and cache maintenance for
//! memory a guest will read with its MMU off (the heap: hyp_arch_arm::heap).

use core::arch::asm;

use stage2::{Ipa, TlbMaintenance};

/// Stage-2 TLB maintenance for one VMID (ARM ARM D8.14.5 and the TLBI IPAS2E1IS
/// description): by-IPA invalidation only reaches the VMID in VTTBR_EL2, so the VM's VTTBR
/// is loaded around the operation.
pub struct Stage2Tlb {
    pub vttbr: u64,
}

impl Stage2Tlb {
    fn with_vmid(&self, f: impl FnOnce()) {
        let saved: u64;
        // SAFETY: switching VTTBR_EL2 while at EL2 does not affect EL2's own translation;
        // it is restored before returning to any guest.
        unsafe {
            asm!("mrs {}, vttbr_el2", out(reg) saved, options(nomem, nostack));
            asm!("msr vttbr_el2, {}", "isb", in(reg) self.vttbr, options(nostack));
        }
        f();
        // SAFETY: as above.
        unsafe { asm!("msr vttbr_el2, {}", "isb", in(reg) saved, options(nostack)) };
    }
}

impl TlbMaintenance for Stage2Tlb {
    fn invalidate_ipa(&mut self, _vmid: u16, ipa: Ipa) {
        self.with_vmid(|| {
            // SAFETY: TLB maintenance has no effect on memory; the DSBs order it after the
            // descriptor store and before the next one (break-before-make).
            unsafe {
                asm!(
                    "dsb ishst",
                    "tlbi ipas2e1is, {}",
                    "dsb ish",
                    "tlbi vmalle1is",
                    "dsb ish",
                    "isb",
                    in(reg) ipa.0 >> 12,
                    options(nostack)
                )
            }
        });
    }

    fn invalidate_vmid(&mut self, _vmid: u16) {
        self.with_vmid(|| {
            // SAFETY: as above.
            unsafe { asm!("dsb ishst", "tlbi vmalls12e1is", "dsb ish", "isb", options(nostack)) }
        });
    }

    fn publish(&mut self) {
        // SAFETY: a barrier.
        unsafe { asm!("dsb ishst", options(nostack)) };
    }
}

/// Cleans `[start, start + len)` to the point of coherency and invalidates the instruction
/// cache: a guest starting with its MMU off reads memory, not the caches.
pub fn make_visible_to_guest(start: u64, len: u64) {
    crate::mmu::clean_dcache_range(start, start + len);
    // SAFETY: instruction cache invalidation has no effect on data.
    unsafe { asm!("ic ialluis", "dsb ish", "isb", options(nostack)) };
}

/// Zeroes `[start, start + len)` and cleans it to the point of coherency, so a guest reading
/// with its MMU off sees zeros and nothing that was there before. With DC ZVA (ARM ARM
/// C6.2.90; DCZID_EL0 gives its block size) each block is zeroed and cleaned by one
/// instruction each: a 512 MiB VM costs about 20 million instructions, not 230 million.
pub fn zero_for_guest(start: u64, len: u64) {
    let dczid: u64;
    // SAFETY: DCZID_EL0 is a read-only identification register.
    unsafe { asm!("mrs {}, dczid_el0", out(reg) dczid, options(nomem, nostack)) };
    let block = 4u64 << (dczid & 0xf);
    let line = crate::mmu::dcache_line_size();
    let prohibited = dczid & (1 << 4) != 0;
    if prohibited || block != line || !start.is_multiple_of(4 * block) || !len.is_multiple_of(4 * block) {
        // SAFETY: the caller owns the range, identity-mapped Normal memory.
        unsafe { core::ptr::write_bytes(start as *mut u8, 0, len as usize) };
        return crate::mmu::clean_dcache_range(start, start + len);
    }
    let mut addr = start;
    while addr < start + len {
        // SAFETY: as above; four blocks at a time, each zeroed then cleaned.
        unsafe {
            asm!(
                "dc zva, {a}", "dc cvac, {a}",
                "dc zva, {b}", "dc cvac, {b}",
                "dc zva, {c}", "dc cvac, {c}",
                "dc zva, {d}", "dc cvac, {d}",
                a = in(reg) addr,
                b = in(reg) addr + block,
                c = in(reg) addr + 2 * block,
                d = in(reg) addr + 3 * block,
                options(nostack)
            )
        };
        addr += 4 * block;
    }
    // SAFETY: a barrier: the zeros reach memory before the guest runs.
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// Copies `src` into `dst` (the same length) 64 bytes per step with paired 64-bit loads and
/// stores: without SIMD registers (the hypervisor has none, see images.rs) the library copy
/// moves 8 bytes at a time, and loading a Linux kernel and initramfs took 20 million
/// instructions.
pub fn copy_fast(dst: &mut [u8], src: &[u8]) {
    let len = dst.len().min(src.len());
    let bulk = len & !63;
    let (mut d, mut s) = (dst.as_mut_ptr(), src.as_ptr());
    let end = s.wrapping_add(bulk);
    while s != end {
        // SAFETY: `s` and `d` stay within the first `bulk` bytes of `src` and `dst`, which do
        // not overlap (one is borrowed mutably); unaligned pairs are allowed on Normal memory.
        unsafe {
            asm!(
                "ldp {a}, {b}, [{s}]", "ldp {c}, {e}, [{s}, #16]",
                "stp {a}, {b}, [{d}]", "stp {c}, {e}, [{d}, #16]",
                "ldp {a}, {b}, [{s}, #32]", "ldp {c}, {e}, [{s}, #48]",
                "stp {a}, {b}, [{d}, #32]", "stp {c}, {e}, [{d}, #48]",
                s = in(reg) s, d = in(reg) d,
                a = out(reg) _, b = out(reg) _, c = out(reg) _, e = out(reg) _,
                options(nostack)
            );
            s = s.add(64);
            d = d.add(64);
        }
    }
    dst[bulk..len].copy_from_slice(&src[bulk..len]);
}
