//! The AArch32 selftest guest: a 32-bit kernel as the hypervisor runs it (a zImage entered
//! in SVC mode, MMU off) that checks from the inside what the hypervisor promises an AArch32
//! guest: the boot state, SMCCC and PSCI by HVC, the trapped CP15 and CP14 accesses and
//! their emulation (conditional ones included), the exceptions it injects at the guest's
//! own vectors, MMIO, a second vCPU by CPU_ON, and interrupts through the GIC (an SGI and
//! the virtual timer). One line per check, then PSCI SYSTEM_OFF when every check passed,
//! or HYP_VM_EXIT(1). It runs on both images: the ARMv7 image in HYP mode, and the AArch64
//! image with the VM in AArch32 at EL1.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::read_volatile;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use guest_common::bench::Seen;
use guest_common::console::{UARTDR, UARTFR};
use guest_common::fdt::Fdt;
use selftest32_guest::gic::{self, VTIMER};
use selftest32_guest::*;

/// An IPA where the VM has neither RAM nor a device.
const UNMAPPED_IPA: u32 = 0x3000_0000;
/// DFSR of a synchronous external abort, short-descriptor format (ARM ARM B4.1.52, FS
/// 0b01000): the MMU is off, so TTBCR.EAE is clear.
const DFSR_SYNC_EXTERNAL_ABORT: u32 = 0x08;
/// DFSR.WnR [11]: the abort was on a write.
const DFSR_WNR: u32 = 1 << 11;
/// What a register holds before an instruction that must not write it.
const UNTOUCHED: u32 = 0x5a5a_5a5a;
/// vCPU 0 -> vCPU 1.
const SGI: u32 = 1;
const CONTEXT: u32 = 0x5eed_1234;

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    println!("selftest32: running in AArch32, mode {:#x}, under the hypervisor", boot_state().cpsr & mode::MASK);
    boot_checks(&mut c);
    hypercall_checks(&mut c);
    register_checks(&mut c);
    conditional_checks(&mut c);
    exception_checks(&mut c);
    mmio_checks(&mut c);
    gic_checks(&mut c);
    finish("selftest32", &c)
}

fn boot_checks(c: &mut Checks) {
    let b = boot_state();
    let masked = mode::A | mode::I | mode::F;
    c.check(
        b.cpsr & mode::MASK == mode::SVC && b.cpsr & masked == masked && b.cpsr & mode::T == 0,
        format_args!(
            "boot: entered in SVC mode, A32, with asynchronous aborts, IRQs and FIQs masked (CPSR {:#x})",
            b.cpsr
        ),
    );
    c.check(
        b.r0 == 0 && b.r1 == 0xffff_ffff,
        format_args!(
            "boot: r0 = 0 and r1 = 0xffffffff, the device tree's machine type (r0 {:#x}, r1 {:#x})",
            b.r0, b.r1
        ),
    );
    c.check(
        b.sctlr & 1 == 0 && b.sctlr & (1 << 13) == 0,
        format_args!(
            "boot: the MMU is off and the vectors are low (SCTLR.M {}, SCTLR.V {})",
            b.sctlr & 1,
            (b.sctlr >> 13) & 1
        ),
    );
    let mut magic = 0;
    let caught = expect_exception(|| {
        // SAFETY: reads where r2 says the device tree is; an abort (r2 outside RAM) is
        // caught.
        let tree = unsafe { Fdt::at(b.r2 as usize) };
        magic = tree.map_or_else(|found| found, |_| guest_common::fdt::MAGIC);
    });
    c.check(
        caught.is_none() && magic == guest_common::fdt::MAGIC && b.r2 >= 0x4000_0000,
        format_args!("boot: r2 points to a device tree in RAM (magic {magic:#x})"),
    );
}

fn hypercall_checks(c: &mut Checks) {
    let v = hvc(SMCCC_VERSION, 0, 0, 0);
    c.check(v == VERSION_1_1, format_args!("smccc: SMCCC_VERSION by HVC returns 1.1 in r0 (got {v:#x})"));
    let v = hvc(PSCI_VERSION, 0, 0, 0);
    c.check(v == VERSION_1_1, format_args!("psci: PSCI_VERSION by HVC returns 1.1 in r0 (got {v:#x})"));
    let v = hvc(0x8200_0042, 0, 0, 0) as i32;
    c.check(
        v == NOT_SUPPORTED,
        format_args!("smccc: an unknown SMC32 function (0x82000042) returns NOT_SUPPORTED (got {v})"),
    );
}

fn register_checks(c: &mut Checks) {
    let pfr1 = cp15::id_pfr1();
    c.check(
        (pfr1 >> 12) & 0xf == 0,
        format_args!(
            "sysreg: ID_PFR1 offers no virtualization (Virtualization {}, ID_PFR1 {pfr1:#x})",
            (pfr1 >> 12) & 0xf
        ),
    );
    let dfr0 = cp15::id_dfr0();
    c.check(
        dfr0 & 0xf == 0,
        format_args!("sysreg: ID_DFR0 offers no debug architecture (CopDbg {}, ID_DFR0 {dfr0:#x})", dfr0 & 0xf),
    );
    let actlr = cp15::actlr();
    c.check(actlr == 0, format_args!("sysreg: ACTLR reads as zero (got {actlr:#x})"));
    cp15::set_actlr(0x41); // SMP [6] and FW [0] on a Cortex-A15
    let after = cp15::actlr();
    c.check(after == 0, format_args!("sysreg: a write of 0x41 to ACTLR is ignored (reads {after:#x})"));
    let didr = cp15::dbgdidr();
    c.check(didr == 0, format_args!("debug: DBGDIDR (MRC p14, 0, c0, c0, 0) reads as zero (got {didr:#x})"));
    cp15::set_cpacr(cp15::cpacr() | (0xf << 20)); // cp10 and cp11: PL1 and PL0 access
    let mvfr0 = cp15::mvfr0();
    c.check(
        mvfr0 & 0xf == 2,
        format_args!(
            "sysreg: VMRS of MVFR0 reads the CPU's floating-point registers (A_SIMD registers {}, MVFR0 {mvfr0:#x})",
            mvfr0 & 0xf
        ),
    );
    let caught = expect_exception(|| cp15::dccisw(0));
    c.check(
        caught.is_none(),
        format_args!("cache: a set/way clean and invalidate (DCCISW, MCR p15, 0, c7, c14, 2) completes"),
    );
}

fn conditional_checks(c: &mut Checks) {
    let mut v = UNTOUCHED;
    // SAFETY: MOVS sets Z, so the MRC (of ID_PFR0) does not execute; only `v` and the
    // flags, declared, can change.
    unsafe {
        asm!("movs {z}, #0", "mrcne p15, 0, {v}, c0, c1, 0", z = out(reg) _, v = inout(reg) v, options(nomem, nostack))
    };
    c.check(v == UNTOUCHED, format_args!("cond: MRCNE of ID_PFR0 with Z set leaves its register alone (got {v:#x})"));
    let mut v = UNTOUCHED;
    // SAFETY: MOVS sets Z, so the MRC of DBGDIDR executes (and traps); only `v` and the
    // flags, declared, change.
    unsafe {
        asm!("movs {z}, #0", "mrceq p14, 0, {v}, c0, c0, 0", z = out(reg) _, v = inout(reg) v, options(nomem, nostack))
    };
    c.check(v == 0, format_args!("cond: MRCEQ of DBGDIDR with Z set executes, trapped and emulated (got {v:#x})"));
    let caught = expect_exception(|| {
        // SAFETY: MOVS sets Z, so the set/way operation does not execute; were it to, it
        // cleans and invalidates one line, which nothing here depends on.
        unsafe { asm!("movs {z}, #0", "mcrne p15, 0, {z}, c7, c14, 2", z = out(reg) _, options(nostack)) };
    });
    c.check(caught.is_none(), format_args!("cond: MCRNE of DCCISW with Z set does nothing and completes"));
}

fn exception_checks(c: &mut Checks) {
    let vbar = cp15::vbar();
    let mut at = 0u32;
    let l2ctlr = expect_exception(|| {
        // SAFETY: L2CTLR, an IMPLEMENTATION DEFINED register (HCR.TIDCP traps it): the
        // hypervisor injects an Undefined instruction, which `expect_exception` catches and
        // resumes after; only the declared registers change.
        unsafe {
            asm!("adr {at}, 1f", "1: mrc p15, 1, {v}, c9, c0, 2", at = out(reg) at, v = out(reg) _, options(nostack))
        };
    });
    undefined_check(c, l2ctlr, at, vbar, "L2CTLR (MRC p15, 1, c9, c0, 2; HCR.TIDCP)");
    let l2actlr = expect_exception(|| {
        // SAFETY: L2ACTLR, an IMPLEMENTATION DEFINED c15 register (HSTR.T15 traps CRn 15): as
        // above.
        unsafe {
            asm!("adr {at}, 1f", "1: mrc p15, 1, {v}, c15, c0, 0", at = out(reg) at, v = out(reg) _, options(nostack))
        };
    });
    undefined_check(c, l2actlr, at, vbar, "L2ACTLR (MRC p15, 1, c15, c0, 0; HSTR.T15)");

    let load = expect_exception(|| {
        // SAFETY: a load from an IPA with nothing there: the hypervisor injects a Data Abort,
        // which `expect_exception` catches and resumes after; only the declared registers
        // change.
        unsafe {
            asm!("adr {at}, 1f", "1: ldr {v}, [{a}]", at = out(reg) at, v = out(reg) _, a = in(reg) UNMAPPED_IPA, options(nostack))
        };
    });
    let ok = matches!(load, Some(k) if k.vector == vector::DATA_ABORT && k.mode == mode::ABT
        && k.lr == at.wrapping_add(8) && k.fsr == DFSR_SYNC_EXTERNAL_ABORT && k.far == UNMAPPED_IPA);
    let k = load.unwrap_or_default();
    c.check(
        ok,
        format_args!(
            "abort: a load from IPA {UNMAPPED_IPA:#x} takes the Data Abort vector in ABT mode, LR = the instruction + 8, \
             DFSR = synchronous external abort (vector {:#x}, mode {:#x}, LR - instruction {}, DFSR {:#x}, DFAR {:#x})",
            k.vector * 4,
            k.mode,
            k.lr.wrapping_sub(at) as i32,
            k.fsr,
            k.far
        ),
    );

    let store = expect_exception(|| {
        // SAFETY: a store to an IPA with nothing there: as the load above.
        unsafe {
            asm!("adr {at}, 1f", "1: str {v}, [{a}]", at = out(reg) at, v = in(reg) 0x5a, a = in(reg) UNMAPPED_IPA, options(nostack))
        };
    });
    let ok = matches!(store, Some(k) if k.vector == vector::DATA_ABORT && k.fsr == DFSR_SYNC_EXTERNAL_ABORT | DFSR_WNR
        && k.far == UNMAPPED_IPA);
    let k = store.unwrap_or_default();
    c.check(
        ok,
        format_args!(
            "abort: a store's Data Abort says it was a write (DFSR.WnR; vector {:#x}, DFSR {:#x}, DFAR {:#x})",
            k.vector * 4,
            k.fsr,
            k.far
        ),
    );

    // Each exception's SPSR is the CPSR it was taken from: SVC mode, A32, the masks as
    // they were (the flags are the asm blocks' own).
    let cpsr: u32;
    // SAFETY: reads the status register.
    unsafe { asm!("mrs {}, cpsr", out(reg) cpsr, options(nomem, nostack, preserves_flags)) };
    let spsrs = [l2ctlr, l2actlr, load].map(|k| k.map_or(0, |k| k.spsr));
    c.check(
        spsrs.iter().all(|s| s & CPSR_STATE == cpsr & CPSR_STATE),
        format_args!(
            "exceptions: each SPSR is the CPSR the exception was taken from (SPSR_und {:#x} and {:#x}, SPSR_abt {:#x}; \
             CPSR {:#x})",
            spsrs[0] & CPSR_STATE,
            spsrs[1] & CPSR_STATE,
            spsrs[2] & CPSR_STATE,
            cpsr & CPSR_STATE
        ),
    );
}

/// The check that `caught` is an Undefined instruction at `at`, taken at the vector table
/// at `vbar` in UND mode, with LR_und = `at` + 4.
fn undefined_check(c: &mut Checks, caught: Option<Caught>, at: u32, vbar: u32, what: &str) {
    let ok = matches!(caught, Some(k) if k.vector == vector::UNDEFINED && k.mode == mode::UND
        && k.lr == at.wrapping_add(4));
    let k = caught.unwrap_or_default();
    c.check(
        ok && vbar != 0,
        format_args!(
            "undef: {what} takes the Undefined vector at VBAR in UND mode, LR = the instruction + 4 (vector {:#x}, \
             mode {:#x}, LR - instruction {})",
            k.vector * 4,
            k.mode,
            k.lr.wrapping_sub(at) as i32,
        ),
    );
}

fn mmio_checks(c: &mut Checks) {
    let mut v = UNTOUCHED;
    // SAFETY: MOVS sets Z, so the load from UARTFR (MMIO) does not execute; only `v` and
    // the flags, declared, can change.
    unsafe {
        asm!("movs {z}, #0", "ldrne {v}, [{a}]", z = out(reg) _, v = inout(reg) v, a = in(reg) UARTFR, options(nostack))
    };
    // SAFETY: a read of the VM's emulated PL011 (MMIO).
    let fr = unsafe { read_volatile(UARTFR as *const u32) };
    c.check(
        v == UNTOUCHED && fr & 0x80 != 0,
        format_args!("mmio: LDRNE from UARTFR with Z set leaves its register alone (got {v:#x}; UARTFR reads {fr:#x})"),
    );
    print!("conditional store: [");
    let caught = expect_exception(|| {
        // SAFETY: MOVS sets Z, so the store of '#' to UARTDR (MMIO) does not execute; were
        // it to, it would print that character between the brackets.
        unsafe {
            asm!("movs {z}, #0", "strne {ch}, [{a}]", z = out(reg) _, ch = in(reg) u32::from(b'#'), a = in(reg) UARTDR, options(nostack))
        };
    });
    println!("]");
    c.check(
        caught.is_none(),
        format_args!("mmio: STRNE to UARTDR with Z set prints nothing (the brackets on the line above are empty)"),
    );
}

static VCPU1_RAN: AtomicBool = AtomicBool::new(false);
static VCPU1_CONTEXT: AtomicU32 = AtomicU32::new(0);
static VCPU1_CPSR: AtomicU32 = AtomicU32::new(0);
static SGI_SEEN: Seen = Seen::new();
static TIMER_SEEN: Seen = Seen::new();
/// The IAR of the last interrupt the handler did not expect (0: none).
static UNEXPECTED_IRQ: AtomicU32 = AtomicU32::new(0);

extern "C" fn irq() {
    let at = counter();
    let iar = gic::acknowledge();
    match iar & 0x3ff {
        SGI => SGI_SEEN.record(at),
        VTIMER => {
            cp15::set_cntv_ctl(0); // the timer off, so its level drops
            TIMER_SEEN.record(at);
        }
        1020..=1023 => return, // spurious
        _ => UNEXPECTED_IRQ.store(iar | 1 << 31, Ordering::SeqCst),
    }
    gic::end_of_interrupt(iar);
}

extern "C" fn vcpu1_main(context: u32, cpsr: u32) {
    VCPU1_CONTEXT.store(context, Ordering::SeqCst);
    VCPU1_CPSR.store(cpsr, Ordering::SeqCst);
    println!("vcpu1: started in mode {:#x} with r0 {context:#x}", cpsr & mode::MASK);
    gic::bring_up_cpu_interface(1, 1 << SGI);
    VCPU1_RAN.store(true, Ordering::SeqCst);
    halt()
}

fn gic_checks(c: &mut Checks) {
    set_irq_handler(irq);
    gic::enable_distributor();
    let status = start_vcpu(1, vcpu1_main, CONTEXT);
    let ran = wait_until(|| VCPU1_RAN.load(Ordering::SeqCst));
    let (context, cpsr) = (VCPU1_CONTEXT.load(Ordering::SeqCst), VCPU1_CPSR.load(Ordering::SeqCst));
    c.check(
        status == PSCI_SUCCESS && ran && context == CONTEXT && cpsr & mode::MASK == mode::SVC,
        format_args!(
            "psci: CPU_ON starts vCPU 1 in SVC mode with r0 = its context ID (status {status}, r0 {context:#x}, mode {:#x})",
            cpsr & mode::MASK
        ),
    );

    // SAFETY: the device tree the entry's checks found at r2, which nothing writes.
    let intc = match unsafe { Fdt::at(boot_state().r2 as usize) } {
        Ok(fdt) => fdt.root_child_compatible("intc"),
        Err(_) => None,
    };
    let v3 = gic::is_v3();
    let wanted = if v3 { "arm,gic-v3" } else { "arm,cortex-a15-gic" };
    c.check(
        intc == Some(wanted),
        format_args!(
            "gic: the device tree's /intc is {} and ID_PFR1.GIC says GICv{}",
            intc.unwrap_or("missing"),
            if v3 { 3 } else { 2 }
        ),
    );

    gic::bring_up_cpu_interface(0, 1 << VTIMER);
    gic::send_sgi(SGI, 1);
    let taken = wait_until(|| SGI_SEEN.count() == 1);
    c.check(taken, format_args!("gic: SGI {SGI} from vCPU 0 reaches vCPU 1's IRQ vector"));

    let deadline = counter() + frequency() / 1000;
    cp15::set_cntv_cval(deadline);
    cp15::set_cntv_ctl(1);
    let fired = wait_until(|| TIMER_SEEN.count() == 1);
    let at = TIMER_SEEN.wait_for(u64::from(fired));
    c.check(
        fired && at >= deadline,
        format_args!(
            "timer: the virtual timer (CNTV_CVAL by MCRR, CNTV_CTL by MCR) fires through the GIC as INTID {VTIMER}, \
             after its deadline"
        ),
    );
    let unexpected = UNEXPECTED_IRQ.load(Ordering::SeqCst);
    c.check(unexpected == 0, format_args!("gic: no unexpected interrupt (IAR {:#x})", unexpected & 0x1fff));
}
