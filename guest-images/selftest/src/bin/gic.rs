//! The GIC test guest: brings its interrupt controller up as Linux does (GICv3 system
//! registers, or the GICv2 CPU interface at 0x0801_0000, whichever ID_AA64PFR0_EL1.GIC
//! says), takes a virtual timer interrupt, and takes an SGI that its second vCPU (started
//! with PSCI CPU_ON) sends it. One line per check.
#![no_std]
#![no_main]

use core::arch::asm;
use core::sync::atomic::{AtomicU32, Ordering};

use selftest_guest::gic::{self, read32, GICD, VTIMER};
use selftest_guest::*;

const SGI_FROM_VCPU1: u32 = 1;

/// INTIDs taken, as a bitmask (INTIDs below 32).
static TAKEN: AtomicU32 = AtomicU32::new(0);

extern "C" fn irq() {
    let iar = gic::acknowledge();
    let intid = iar & 0x3ff;
    if intid == VTIMER {
        // SAFETY: disabling this vCPU's own virtual timer.
        unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
    }
    if intid < 32 {
        TAKEN.fetch_or(1 << intid, Ordering::SeqCst);
    }
    gic::end_of_interrupt(iar);
}

fn wait_for(intid: u32) -> bool {
    for _ in 0..1000 {
        if TAKEN.load(Ordering::SeqCst) & (1 << intid) != 0 {
            return true;
        }
        wait_ms(1);
    }
    false
}

extern "C" fn vcpu1(_: u64) {
    gic::send_sgi(SGI_FROM_VCPU1, 0);
    hvc(PSCI_CPU_OFF, 0);
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    set_irq_handler(irq);
    gic::enable_distributor();
    if gic::is_v3() {
        let ctlr = read32(GICD);
        c.check(
            ctlr & 0x52 == 0x52,
            format_args!("gic: the distributor is enabled with affinity routing (GICD_CTLR {ctlr:#x})"),
        );
    } else {
        let typer = read32(GICD + 0x4);
        c.check(
            read32(GICD) == 1 && (typer >> 5) & 7 == 1,
            format_args!("gic: the GICv2 distributor is enabled and reports 2 CPUs (GICD_TYPER {typer:#x})"),
        );
    }
    gic::bring_up_cpu_interface(0, (1 << VTIMER) | (1 << SGI_FROM_VCPU1));

    let freq: u64;
    // SAFETY: the virtual timer: fire in 1 ms, unmasked.
    unsafe {
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
        asm!("msr cntv_tval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) freq / 1000, in(reg) 1u64);
    }
    c.check(wait_for(VTIMER), format_args!("gic: the virtual timer interrupt (INTID 27) arrives"));

    let status = start_vcpu(1, vcpu1, 0);
    let took = wait_for(SGI_FROM_VCPU1);
    let how = if gic::is_v3() { "ICC_SGI1R_EL1" } else { "GICD_SGIR" };
    c.check(status == 0 && took, format_args!("gic: SGI 1 sent by vCPU 1 with {how} arrives on vCPU 0"));
    finish("gic", &c)
}
