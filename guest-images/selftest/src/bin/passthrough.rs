//! The passthrough test guest. Given QEMU `virt`'s PL031 real-time clock (`reg` 0x0901_0000,
//! SPI 2 = INTID 34) by `[[vm.passthrough]]`, it reads the PL031's identification registers
//! and its clock, sets a match one or two seconds ahead and takes the match interrupt
//! through its virtual GIC (hardware-mapped to the physical SPI), clears it, and checks that
//! it does not come again; then a match it discards through GICD_ICPENDR must not keep the
//! next one away. Without the device, reading its window must be a data abort.
#![no_std]
#![no_main]

use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

use selftest_guest::gic::{self, read32, write32, GICD};
use selftest_guest::*;

const RTC: usize = 0x0901_0000;
const RTCDR: usize = 0x000;
const RTCMR: usize = 0x004;
const RTCIMSC: usize = 0x010;
const RTCRIS: usize = 0x014;
const RTCICR: usize = 0x01c;
const RTC_INTID: u32 = 34;
/// PL031 PeriphID0-3 and PrimeCellID0-3 (0xFE0..0xFFC), as the PL031 TRM gives them.
const IDS: [u32; 8] = [0x31, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1];

/// Times INTID 34 was taken.
static TAKEN: AtomicU32 = AtomicU32::new(0);

fn rtc_read(offset: usize) -> u32 {
    // SAFETY: the PL031's register window, mapped into this VM (or an abort the vector catches).
    unsafe { read_volatile((RTC + offset) as *const u32) }
}

fn rtc_write(offset: usize, value: u32) {
    // SAFETY: as above.
    unsafe { write_volatile((RTC + offset) as *mut u32, value) }
}

extern "C" fn irq() {
    let iar = gic::acknowledge();
    if iar & 0x3ff == RTC_INTID {
        rtc_write(RTCICR, 1); // the line goes low before the interrupt is deactivated
        TAKEN.fetch_add(1, Ordering::SeqCst);
    }
    gic::end_of_interrupt(iar);
}

/// Waits up to `ms` milliseconds of virtual counter for INTID 34 to have been taken `count` times.
fn wait_for(count: u32, ms: u64) -> bool {
    for _ in 0..ms / 10 {
        if TAKEN.load(Ordering::SeqCst) >= count {
            return true;
        }
        wait_ms(10);
    }
    TAKEN.load(Ordering::SeqCst) >= count
}

/// SPI 34 in the guest's distributor: Group 1, priority 0x80, to vCPU 0, enabled.
fn enable_rtc_spi() {
    let (word, bit) = (4 * (RTC_INTID as usize / 32), 1u32 << (RTC_INTID % 32));
    if gic::is_v3() {
        write32(GICD + 0x80 + word, bit); // GICD_IGROUPR1
                                          // SAFETY: GICD_IROUTER34 of the emulated distributor (affinity 0.0.0.0: vCPU 0).
        unsafe { write_volatile((GICD + 0x6000 + 8 * RTC_INTID as usize) as *mut u64, 0) };
    } else {
        write32(GICD + 0x800 + 32, 1 << 16); // GICD_ITARGETSR8: INTID 34 (byte 2) to CPU 0
    }
    // GICD_IPRIORITYR8 holds INTIDs 32-35; 34 is byte 2.
    write32(GICD + 0x400 + 32, 0x80 << 16);
    write32(GICD + 0x100 + word, bit); // GICD_ISENABLER1
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let mut id0 = 0;
    let caught = expect_exception(|| id0 = rtc_read(0xfe0));
    if caught.is_some() {
        c.check(
            is_external_abort(caught, EC_DATA_ABORT_SAME_EL, RTC + 0xfe0),
            format_args!(
                "passthrough: without the device, reading {:#x} is a data abort (ESR_EL1 {:#x})",
                RTC + 0xfe0,
                caught.map_or(0, |(esr, _)| esr)
            ),
        );
        finish("passthrough", &c);
    }
    let ids: [u32; 8] = core::array::from_fn(|i| if i == 0 { id0 } else { rtc_read(0xfe0 + 4 * i) & 0xff });
    c.check(ids == IDS, format_args!("passthrough: the PL031's PeriphID and PrimeCellID read {ids:02x?}"));
    let now = rtc_read(RTCDR);
    c.check(now != 0, format_args!("passthrough: RTCDR reads {now} seconds"));

    set_irq_handler(irq);
    gic::enable_distributor();
    gic::bring_up_cpu_interface(0, 0);
    enable_rtc_spi();
    rtc_write(RTCICR, 1);
    rtc_write(RTCMR, rtc_read(RTCDR).wrapping_add(2));
    rtc_write(RTCIMSC, 1);
    let took = wait_for(1, 5000);
    c.check(took, format_args!("passthrough: the PL031 match interrupt (INTID 34) arrives through the virtual GIC"));
    let raw = rtc_read(RTCRIS);
    c.check(raw == 0, format_args!("passthrough: RTCICR cleared it (RTCRIS {raw})"));
    wait_ms(2500);
    let n = TAKEN.load(Ordering::SeqCst);
    c.check(n == 1, format_args!("passthrough: it came once and not again ({n} time(s))"));

    // A match with interrupts masked: the SPI fires (the physical interrupt brings this
    // vCPU out, the virtual one becomes pending), the guest clears it at the device by
    // polling, and after an exit (the hypervisor samples the line) it never arrives.
    // SAFETY: this vCPU's own PSTATE.I.
    unsafe { core::arch::asm!("msr daifset, #2", "isb") };
    rtc_write(RTCMR, rtc_read(RTCDR).wrapping_add(2));
    let mut polled = false;
    for _ in 0..500 {
        if rtc_read(RTCRIS) != 0 {
            polled = true;
            break;
        }
        wait_ms(10);
    }
    wait_ms(10);
    rtc_write(RTCICR, 1);
    hvc(SMCCC_VERSION, 0);
    // SAFETY: as above.
    unsafe { core::arch::asm!("msr daifclr, #2", "isb") };
    wait_ms(100);
    let again = TAKEN.load(Ordering::SeqCst) - n;
    c.check(
        polled && again == 0,
        format_args!(
            "passthrough: a match cleared at the device before it was taken does not arrive ({again} time(s))"
        ),
    );
    discarded_edge_then_another(&mut c);
    rtc_write(RTCIMSC, 0);
    finish("passthrough", &c)
}

/// Whether GICD_ISPENDR1 shows INTID 34 pending.
fn rtc_spi_pending() -> bool {
    read32(GICD + 0x200 + 4) & (1 << (RTC_INTID % 32)) != 0
}

/// The SPI made edge-triggered in this VM's distributor (GICD_ICFGR2, INTID 34's
/// Int_config[1]); a match with interrupts masked becomes pending; the guest clears the
/// device, then discards the interrupt through GICD_ICPENDR instead of taking it. The
/// hypervisor held the physical SPI active for the deactivation that now never comes: it
/// must deactivate it itself, or the device's next match never arrives.
fn discarded_edge_then_another(c: &mut Checks) {
    write32(GICD + 0xc00 + 8, read32(GICD + 0xc00 + 8) | 2 << (2 * (RTC_INTID % 16)));
    // SAFETY: this vCPU's own PSTATE.I.
    unsafe { core::arch::asm!("msr daifset, #2", "isb") };
    rtc_write(RTCMR, rtc_read(RTCDR).wrapping_add(2));
    let mut pending = false;
    for _ in 0..500 {
        if rtc_read(RTCRIS) != 0 && rtc_spi_pending() {
            pending = true;
            break;
        }
        wait_ms(10);
    }
    rtc_write(RTCICR, 1);
    write32(GICD + 0x280 + 4, 1 << (RTC_INTID % 32)); // GICD_ICPENDR1
    let cleared = !rtc_spi_pending();
    c.check(
        pending && cleared,
        format_args!(
            "passthrough: an edge-triggered match, pending ({pending}), cleared through GICD_ICPENDR ({cleared})"
        ),
    );
    let before = TAKEN.load(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { core::arch::asm!("msr daifclr, #2", "isb") };
    wait_ms(100);
    let early = TAKEN.load(Ordering::SeqCst) - before;
    rtc_write(RTCMR, rtc_read(RTCDR).wrapping_add(2));
    let took = wait_for(before + 1, 5000);
    let n = TAKEN.load(Ordering::SeqCst) - before;
    c.check(
        early == 0 && took,
        format_args!("passthrough: the next match arrives after one the guest discarded ({n} time(s))"),
    );
}
