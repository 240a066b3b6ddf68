//! The GIC test guest: brings its interrupt controller up as Linux does (GICv3 system
//! registers, or the GICv2 CPU interface at 0x0801_0000, whichever ID_AA64PFR0_EL1.GIC
//! says), takes a virtual timer interrupt, and takes an SGI that its second vCPU (started
//! with PSCI CPU_ON) sends it. One line per check.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, Ordering};

use selftest_guest::*;

const GICD: usize = 0x0800_0000;
const GICC: usize = 0x0801_0000;
const GICR: usize = 0x080a_0000;
const GICR_FRAME: usize = 0x2_0000;
const SGI_FRAME: usize = 0x1_0000;
const VTIMER: u32 = 27;
const SGI_FROM_VCPU1: u32 = 1;

/// INTIDs taken, as a bitmask (INTIDs below 32).
static TAKEN: AtomicU32 = AtomicU32::new(0);

fn write32(addr: usize, v: u32) {
    // SAFETY: a register of the VM's emulated GIC.
    unsafe { write_volatile(addr as *mut u32, v) }
}
fn read32(addr: usize) -> u32 {
    // SAFETY: as above.
    unsafe { read_volatile(addr as *const u32) }
}

/// ID_AA64PFR0_EL1.GIC: the system register interface, so a GICv3.
fn gic_v3() -> bool {
    let pfr0: u64;
    // SAFETY: an ID register read (trapped and sanitised by the hypervisor).
    unsafe { asm!("mrs {}, id_aa64pfr0_el1", out(reg) pfr0) };
    (pfr0 >> 24) & 0xf != 0
}

extern "C" fn irq() {
    let iar: u64 = if gic_v3() {
        let v: u64;
        // SAFETY: acknowledge with ICC_IAR1_EL1.
        unsafe { asm!("mrs {}, S3_0_C12_C12_0", out(reg) v) };
        v
    } else {
        u64::from(read32(GICC + 0xc)) // GICC_IAR
    };
    let intid = (iar & 0x3ff) as u32;
    if intid == VTIMER {
        // SAFETY: disabling this vCPU's own virtual timer.
        unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
    }
    if intid < 32 {
        TAKEN.fetch_or(1 << intid, Ordering::SeqCst);
    }
    if gic_v3() {
        // SAFETY: end of interrupt with ICC_EOIR1_EL1 (EOImode 0: drop and deactivate).
        unsafe { asm!("msr S3_0_C12_C12_1, {}", "isb", in(reg) iar) };
    } else {
        write32(GICC + 0x10, iar as u32); // GICC_EOIR
    }
}

/// GICv2: SGI 1 and the timer PPI enabled (banked in the distributor), the CPU interface
/// (the hardware GICV frame, mapped by the hypervisor) on, IRQs unmasked.
fn bring_up_gicv2_cpu_interface() {
    write32(GICD + 0x400 + 24, 0x8080_8080);
    write32(GICD + 0x400, 0x8080_8080);
    write32(GICD + 0x100, (1 << VTIMER) | (1 << SGI_FROM_VCPU1));
    write32(GICC + 0x4, 0xf8); // GICC_PMR
    write32(GICC, 1); // GICC_CTLR.EnableGrp0
                      // SAFETY: unmasking IRQs at EL1.
    unsafe { asm!("msr daifclr, #2") };
}

/// This vCPU's redistributor awake, its SGI 1 and the timer PPI enabled in group 1, and its
/// CPU interface on (ICC_SRE_EL1.SRE, PMR, group 1 enable), IRQs unmasked.
fn bring_up_cpu_interface(vcpu: usize) {
    let rd = GICR + vcpu * GICR_FRAME;
    write32(rd + 0x14, read32(rd + 0x14) & !(1 << 1));
    while read32(rd + 0x14) & (1 << 2) != 0 {}
    let sgi = rd + SGI_FRAME;
    write32(sgi + 0x80, 0xffff_ffff);
    write32(sgi + 0x400 + 24, 0x8080_8080); // IPRIORITYR6: INTIDs 24-27
    write32(sgi + 0x400, 0x8080_8080); // IPRIORITYR0: INTIDs 0-3
    write32(sgi + 0x100, (1 << VTIMER) | (1 << SGI_FROM_VCPU1));
    // SAFETY: the virtual CPU interface's system registers (ICV_* under the hypervisor).
    unsafe {
        asm!(
            "mrs {t}, S3_0_C12_C12_5", "orr {t}, {t}, #1", "msr S3_0_C12_C12_5, {t}", "isb", // ICC_SRE_EL1.SRE
            "msr S3_0_C4_C6_0, {pmr}",  // ICC_PMR_EL1
            "msr S3_0_C12_C12_3, xzr",  // ICC_BPR1_EL1
            "msr S3_0_C12_C12_7, {one}", // ICC_IGRPEN1_EL1
            "isb",
            "msr daifclr, #2",
            t = out(reg) _, pmr = in(reg) 0xffu64, one = in(reg) 1u64,
        );
    }
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
    if gic_v3() {
        // ICC_SGI1R_EL1: INTID 1, TargetList {vCPU 0}, Aff1-3 zero.
        let sgi: u64 = (u64::from(SGI_FROM_VCPU1) << 24) | 1;
        // SAFETY: an SGI generation register write; the hypervisor traps and emulates it.
        unsafe { asm!("msr S3_0_C12_C11_5, {}", "isb", in(reg) sgi) };
    } else {
        write32(GICD + 0xf00, (1 << 16) | SGI_FROM_VCPU1); // GICD_SGIR: CPUTargetList {0}
    }
    hvc(PSCI_CPU_OFF, 0);
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    set_irq_handler(irq);
    if gic_v3() {
        write32(GICD, 0b10); // GICD_CTLR.EnableGrp1
        let ctlr = read32(GICD);
        c.check(
            ctlr & 0x52 == 0x52,
            format_args!("gic: the distributor is enabled with affinity routing (GICD_CTLR {ctlr:#x})"),
        );
        bring_up_cpu_interface(0);
    } else {
        write32(GICD, 1); // GICD_CTLR.EnableGrp0
        let typer = read32(GICD + 0x4);
        c.check(
            read32(GICD) == 1 && (typer >> 5) & 7 == 1,
            format_args!("gic: the GICv2 distributor is enabled and reports 2 CPUs (GICD_TYPER {typer:#x})"),
        );
        bring_up_gicv2_cpu_interface();
    }

    let freq: u64;
    // SAFETY: the virtual timer: fire in 1 ms, unmasked.
    unsafe {
        asm!("mrs {}, cntfrq_el0", out(reg) freq);
        asm!("msr cntv_tval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) freq / 1000, in(reg) 1u64);
    }
    c.check(wait_for(VTIMER), format_args!("gic: the virtual timer interrupt (INTID 27) arrives"));

    let status = start_vcpu(1, vcpu1, 0);
    let took = wait_for(SGI_FROM_VCPU1);
    let how = if gic_v3() { "ICC_SGI1R_EL1" } else { "GICD_SGIR" };
    c.check(status == 0 && took, format_args!("gic: SGI 1 sent by vCPU 1 with {how} arrives on vCPU 0"));
    finish("gic", &c)
}
