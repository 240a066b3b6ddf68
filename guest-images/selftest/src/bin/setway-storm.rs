//! A guest that makes the hypervisor clean its whole RAM as often as it can: it turns its
//! MMU and caches on and off, with a set/way instruction before each turn (each costs a
//! clean of the VM's RAM, hyp_core::set_way), for a while, then powers off. The watcher VM
//! that shares its CPU must not be held off it for long (tests/tests/set_way.rs).
#![no_std]
#![no_main]

use core::arch::asm;

use selftest_guest::*;

/// A level-1 table for TTBR0_EL1 (4 KiB granule, T0SZ 25: 1 GiB blocks), in this VM's RAM.
const TABLE: usize = 0x4080_0000;
/// Stage-1 block descriptors (ARM ARM D8.3): valid block, AF, AttrIndx; devices never
/// executable (UXN, PXN), RAM inner shareable. A device block's AttrIndx is 0.
const DEVICE_BLOCK: u64 = 0b01 | (1 << 10) | (1 << 53) | (1 << 54);
const RAM_BLOCK: u64 = 0x4000_0000 | 0b01 | (1 << 10) | (1 << 2) | (0b11 << 8);
/// MAIR_EL1: attribute 0 Device-nGnRnE, attribute 1 Normal write-back.
const MAIR: u64 = 0xff << 8;
/// TCR_EL1: T0SZ 25, inner and outer write-back, inner shareable, 4 KiB, EPD1 (no TTBR1
/// walks), IPS 40 bits.
const TCR: u64 = 25 | (1 << 8) | (1 << 10) | (0b11 << 12) | (1 << 23) | (0b010 << 32);
/// SCTLR_EL1.M, C, I.
const SCTLR_MMU_CACHES: u64 = (1 << 0) | (1 << 2) | (1 << 12);
const STORM_MS: u64 = 1200;

fn sctlr() -> u64 {
    let v: u64;
    // SAFETY: this vCPU's own SCTLR_EL1.
    unsafe { asm!("mrs {}, sctlr_el1", out(reg) v) };
    v
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    // SAFETY: this VM's own RAM, reserved for the table.
    unsafe {
        core::ptr::write_bytes(TABLE as *mut u8, 0, 4096);
        core::ptr::write_volatile(TABLE as *mut u64, DEVICE_BLOCK);
        core::ptr::write_volatile((TABLE + 8) as *mut u64, RAM_BLOCK);
        asm!(
            "msr mair_el1, {}", "msr tcr_el1, {}", "msr ttbr0_el1, {}", "dsb sy", "tlbi vmalle1", "dsb sy", "isb",
            in(reg) MAIR, in(reg) TCR, in(reg) TABLE as u64
        );
    }
    let off = sctlr() & !SCTLR_MMU_CACHES;
    let (mut turns, mut all_took) = (0u32, true);
    let until = counter_ms() + STORM_MS;
    while counter_ms() < until {
        // SAFETY: set/way maintenance of level 1, set 0, way 0 (a hint to the hypervisor),
        // then the MMU and caches on and off again over an identity map of this VM.
        unsafe {
            asm!("dc cisw, {}", in(reg) 0u64);
            asm!("msr sctlr_el1, {}", "isb", in(reg) off | SCTLR_MMU_CACHES);
        }
        all_took &= sctlr() & SCTLR_MMU_CACHES == SCTLR_MMU_CACHES;
        // SAFETY: as above.
        unsafe { asm!("msr sctlr_el1, {}", "isb", in(reg) off) };
        all_took &= sctlr() & SCTLR_MMU_CACHES == 0;
        turns += 1;
    }
    c.check(
        all_took && turns > 1,
        format_args!("set/way storm: {turns} rounds of DC CISW and the caches on and off, each write took effect"),
    );
    finish("setway-storm", &c)
}
