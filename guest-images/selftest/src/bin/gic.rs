//! The GIC test guest: brings its interrupt controller up as Linux does (GICv3 system
//! registers, or the GICv2 CPU interface at 0x0801_0000, whichever ID_AA64PFR0_EL1.GIC
//! says), takes a virtual timer interrupt, and takes an SGI that its second vCPU (started
//! with PSCI CPU_ON) sends it. The timer's interrupt is level-sensitive: one that became
//! pending and was then turned off (ENABLE = 0 or IMASK = 1) while the guest had interrupts
//! masked is not taken once an exit has let the hypervisor see its line low. With six
//! interrupts active on four list registers, those no list register shows end when the
//! guest ends them (the hypervisor reads EOIcount), and on GICv3 with EOImode 1 each DIR
//! ends the interrupt it names, in any order (the hypervisor traps DIR meanwhile). The
//! distributor's control words read the same whichever load reads them (the hypervisor's
//! vector answers a word load of them itself), and GICD_CTLR as last written. One line per
//! check.
#![no_std]
#![no_main]

use core::arch::asm;
use core::sync::atomic::{AtomicU32, Ordering};

use selftest_guest::gic::{self, read32, write32, GICD, VTIMER};
use selftest_guest::*;

const SGI_FROM_VCPU1: u32 = 1;
/// The ping-pong's SGIs: vCPU 0 sends PING or PING_OTHER to vCPU 1, whose handler answers
/// PONG.
const PING: u32 = 2;
const PING_OTHER: u32 = 4;
const PONG: u32 = 3;
/// Its rounds: every fifth one (and the two after the seventh) PING_OTHER, so that the
/// same SGI comes back many times in a row, and sometimes another one comes between.
const ROUNDS: u32 = 400;

/// SGIs each vCPU took in the ping-pong: PING and PING_OTHER on vCPU 1, PONG on vCPU 0.
static PINGS: AtomicU32 = AtomicU32::new(0);
static PONGS: AtomicU32 = AtomicU32::new(0);

/// INTIDs taken, as a bitmask (INTIDs below 32).
static TAKEN: AtomicU32 = AtomicU32::new(0);
/// Virtual timer interrupts taken.
static TIMER_INTERRUPTS: AtomicU32 = AtomicU32::new(0);
/// Timer interrupts whose handler leaves the timer due (a compare value already past) before
/// it ends them, counted down; then the handler turns the timer off, as it always does else.
static LEAVE_DUE: AtomicU32 = AtomicU32::new(0);

extern "C" fn irq() {
    let iar = gic::acknowledge();
    let intid = iar & 0x3ff;
    if intid == VTIMER {
        TIMER_INTERRUPTS.fetch_add(1, Ordering::SeqCst);
        if LEAVE_DUE.load(Ordering::SeqCst) > 0 {
            LEAVE_DUE.fetch_sub(1, Ordering::SeqCst);
            // SAFETY: this vCPU's own virtual timer: due at once (compare value 0), its line
            // still high when the interrupt ends.
            unsafe { asm!("msr cntv_cval_el0, xzr", "isb") };
        } else {
            // SAFETY: disabling this vCPU's own virtual timer.
            unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
        }
    }
    match intid {
        PING | PING_OTHER => {
            PINGS.fetch_add(1, Ordering::SeqCst);
            gic::send_sgi(PONG, 0);
        }
        PONG => {
            PONGS.fetch_add(1, Ordering::SeqCst);
        }
        _ => {}
    }
    if intid < 32 {
        TAKEN.fetch_or(1 << intid, Ordering::SeqCst);
    }
    gic::end_of_interrupt(iar);
}

/// vCPU 1 again (started afresh after its CPU_OFF): answers each ping with a PONG from its
/// handler, waiting in WFI between them.
extern "C" fn ponger(_: u64) {
    gic::bring_up_cpu_interface(1, (1 << PING) | (1 << PING_OTHER));
    PINGS.store(u32::MAX, Ordering::SeqCst);
    loop {
        // SAFETY: waiting for an interrupt; the handler runs and WFI is entered again.
        unsafe { asm!("wfi") };
    }
}

/// Waits up to 100 ms for `counter` to reach `value`; its value then.
fn wait_count(counter: &AtomicU32, value: u32) -> u32 {
    let start = counter_ms();
    while counter.load(Ordering::SeqCst) < value && counter_ms() - start < 100 {
        core::hint::spin_loop();
    }
    counter.load(Ordering::SeqCst)
}

/// What `ping_pong` saw: PINGS and PONGS after the rounds, whether PONG read disabled after
/// vCPU 0 disabled it (a GICv2's SGIs may be always enabled, RAO/WI: IHI 0048B 4.3.5), PONGS
/// after the wait with it disabled, and after the enable.
type PingPong = (u32, u32, bool, u32, u32);

/// ROUNDS pings of vCPU 1, each answered by a PONG before the next (the hypervisor's vector
/// shows an SGI that comes back to a vCPU again by itself: every one must arrive once), then
/// one PONG while vCPU 0 has it disabled, which must wait until it is enabled again.
fn ping_pong() -> Result<PingPong, &'static str> {
    // vCPU 1 turns itself off after its first SGI: started again once it is off (PSCI
    // ALREADY_ON, -4, until then).
    let start = counter_ms();
    loop {
        match start_vcpu(1, ponger, 0) {
            0 => break,
            -4 if counter_ms() - start < 1000 => wait_ms(1),
            _ => return Err("vCPU 1 did not start again"),
        }
    }
    gic::set_private_enabled(0, PONG, true);
    let start = counter_ms();
    while PINGS.load(Ordering::SeqCst) != u32::MAX {
        if counter_ms() - start > 1000 {
            return Err("vCPU 1 did not come up");
        }
    }
    PINGS.store(0, Ordering::SeqCst);
    PONGS.store(0, Ordering::SeqCst);
    for round in 0..ROUNDS {
        let other = round % 5 == 4 || round == 8 || round == 9;
        gic::send_sgi(if other { PING_OTHER } else { PING }, 1);
        if wait_count(&PONGS, round + 1) != round + 1 {
            break;
        }
    }
    let after_rounds = (PINGS.load(Ordering::SeqCst), PONGS.load(Ordering::SeqCst));
    gic::set_private_enabled(0, PONG, false);
    let disabled = !gic::private_enabled(0, PONG);
    gic::send_sgi(PING, 1);
    wait_count(&PINGS, after_rounds.0 + 1);
    wait_ms(5);
    let while_disabled = PONGS.load(Ordering::SeqCst);
    gic::set_private_enabled(0, PONG, true);
    wait_count(&PONGS, after_rounds.1 + 1);
    wait_ms(5);
    Ok((after_rounds.0, after_rounds.1, disabled, while_disabled, PONGS.load(Ordering::SeqCst)))
}

/// The distributor's first four words, each read by LDR Wt, LDRSW (its 64 bits) and LDAR
/// Wt (the hypervisor's vector answers the first and third itself, the run loop the
/// second), then GICD_CTLR read after a write turning its groups off and after one turning
/// them on again.
fn control_words() -> ([(u32, u64, u32); 4], u32, u32) {
    let mut words = [(0, 0, 0); 4];
    for (i, word) in words.iter_mut().enumerate() {
        let address = GICD + 4 * i;
        // SAFETY: word loads of the VM's GIC distributor's control and identification registers.
        unsafe {
            asm!("ldr {:w}, [{}]", out(reg) word.0, in(reg) address);
            asm!("ldrsw {}, [{}]", out(reg) word.1, in(reg) address);
            asm!("ldar {:w}, [{}]", out(reg) word.2, in(reg) address);
        }
    }
    write32(GICD, words[0].0 & !0b11);
    let off = read32(GICD);
    write32(GICD, words[0].0);
    (words, off, read32(GICD))
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
    let (words, ctlr_off, ctlr_on) = control_words();
    c.check(
        words.iter().all(|&(w, sign_extended, acquire)| sign_extended == w as i32 as u64 && w == acquire)
            && words[2].0 == 0x4800_043b
            && words[3].0 == 0
            && ctlr_off == words[0].0 & !0b11
            && ctlr_on == words[0].0,
        format_args!(
            "gic: GICD_CTLR, GICD_TYPER, GICD_IIDR and GICD_TYPER2 read alike by LDR, LDRSW and LDAR, \
             GICD_CTLR as last written ({words:x?}; GICD_CTLR {ctlr_off:#x} with its groups off, {ctlr_on:#x} on again)"
        ),
    );
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

    let pong = ping_pong();
    // Where the SGI cannot be disabled, the last one arrives at once.
    let disabled = pong.is_ok_and(|p| p.2);
    let waits = if disabled { ROUNDS } else { ROUNDS + 1 };
    let how = if disabled { "waits until it enables it" } else { "arrives at once, as it stays enabled" };
    c.check(
        pong == Ok((ROUNDS, ROUNDS, disabled, waits, ROUNDS + 1)),
        format_args!(
            "gic: {ROUNDS} SGIs to vCPU 1, each answered by one to vCPU 0, all arrive once; one sent to vCPU 0 \
             after it disables it {how}, once (PINGS, PONGS, disabled, PONGS then, after: {pong:?})"
        ),
    );

    c.check(
        TIMER_INTERRUPTS.load(Ordering::SeqCst) == 1,
        format_args!(
            "gic: one expiry of the timer is one interrupt (took {})",
            TIMER_INTERRUPTS.load(Ordering::SeqCst)
        ),
    );
    for (how, ctl) in [("turned off (ENABLE = 0)", 0u64), ("masked (IMASK = 1)", 0b011)] {
        let taken = timer_pending_then_quiet(freq, ctl);
        c.check(
            taken == 0,
            format_args!(
                "gic: a timer interrupt pending while {how} with interrupts masked is not taken (took {taken})"
            ),
        );
    }
    let taken = timer_due_when_its_handler_ends(freq);
    c.check(
        taken == 4,
        format_args!(
            "gic: a timer still due when its handler ends fires again, the vCPU waiting in WFI (took {taken} of 4)"
        ),
    );
    let (taken, left, again) = six_active_on_four_list_registers();
    c.check(
        taken == NESTED && left == 0 && again == NESTED[0],
        format_args!(
            "gic: six interrupts active on four list registers all end when the guest ends them \
             (taken {taken:?}, then GICD_ISACTIVER1 {left:#x}, and SPI 40 taken again: {again})"
        ),
    );
    if gic::is_v3() {
        let (first, left, again) = six_active_ended_by_dir_out_of_order();
        c.check(
            first == SIX & !(1 << (NESTED[0] - 32)) && left == 0 && again == NESTED[0],
            format_args!(
                "gic: with EOImode 1, DIR ends the interrupt it names, in any order \
                 (GICD_ISACTIVER1 {first:#x} after SPI 40's, {left:#x} after all, and SPI 40 taken again: {again})"
            ),
        );
    }
    finish("gic", &c)
}

/// SPIs 40 to 43, taken in that order, each preempting the last (priorities 0xa0 down to
/// 0x70), and SPIs 44 and 45, priorities 0x10 and 0x20.
const NESTED: [u32; 4] = [40, 41, 42, 43];
const ON_TOP: [u32; 2] = [44, 45];

/// GICD_ISACTIVER1's bits of SPIs 40 to 45.
const SIX: u32 = 0x3f << (NESTED[0] - 32);

/// With interrupts masked (the caller's), takes SPIs 40 to 43 nested (each pended through
/// GICD_ISPENDR1 and acknowledged at a higher priority than the last: four list registers
/// hold them active, QEMU's four), then sets SPIs 44 and 45 active through GICD_ISACTIVER1:
/// of the six active, the hypervisor shows the four of highest priority, and SPIs 40 and
/// 41 none. Returns the IARs acknowledged.
fn six_active() -> [u32; 4] {
    let on_top = ON_TOP.iter().fold(0, |m, intid| m | 1 << (intid - 32));
    if gic::is_v3() {
        write32(GICD + 0x84, read32(GICD + 0x84) | SIX); // GICD_IGROUPR1: group 1
        for intid in NESTED.iter().chain(&ON_TOP) {
            // SAFETY: GICD_IROUTER<n> of the emulated distributor (affinity 0.0.0.0: vCPU 0).
            unsafe { core::ptr::write_volatile((GICD + 0x6000 + 8 * *intid as usize) as *mut u64, 0) };
        }
    } else {
        write32(GICD + 0x828, 0x0101_0101); // GICD_ITARGETSR10: 40-43 to CPU 0
        write32(GICD + 0x82c, 0x0101); // GICD_ITARGETSR11: 44 and 45 to CPU 0
    }
    write32(GICD + 0x428, 0x7080_90a0); // GICD_IPRIORITYR10: 40-43
    write32(GICD + 0x42c, 0x2010); // GICD_IPRIORITYR11: 44, 45
    let edge = (0..6).fold(0, |m, k| m | 2 << (2 * ((NESTED[0] + k) % 16)));
    write32(GICD + 0xc08, read32(GICD + 0xc08) | edge); // GICD_ICFGR2
    write32(GICD + 0x104, SIX); // GICD_ISENABLER1
    let mut taken = [0u32; 4];
    for (k, &intid) in NESTED.iter().enumerate() {
        write32(GICD + 0x204, 1 << (intid - 32)); // GICD_ISPENDR1
        taken[k] = gic::acknowledge();
    }
    write32(GICD + 0x304, on_top); // GICD_ISACTIVER1
    taken
}

/// `six_active`, then the guest ends them with EOImode 0, innermost first: those no list
/// register shows are only counted (EOIcount); two list registers stay valid, so the
/// underflow maintenance interrupt does not bring them in first. Returns the INTIDs
/// acknowledged, GICD_ISACTIVER1's bits for SPIs 40 to 45 once 44 and 45 are cleared
/// through GICD_ICACTIVER1 (0: none left active), and the INTID acknowledged after SPI 40
/// is pended again (40: it can be taken again).
fn six_active_on_four_list_registers() -> ([u32; 4], u32, u32) {
    // SAFETY: this vCPU's own PSTATE.I.
    unsafe { asm!("msr daifset, #2", "isb") };
    let taken = six_active();
    for &iar in taken.iter().rev() {
        gic::end_of_interrupt(iar);
    }
    let on_top = ON_TOP.iter().fold(0, |m, intid| m | 1 << (intid - 32));
    write32(GICD + 0x384, on_top); // GICD_ICACTIVER1
    let left = read32(GICD + 0x304) & SIX; // GICD_ISACTIVER1
    let again = take_spi_40_again(false);
    // SAFETY: as above.
    unsafe { asm!("msr daifclr, #2", "isb") };
    (taken.map(|iar| iar & 0x3ff), left, again)
}

/// GICv3 only: `six_active` with EOImode 1, each EOI (innermost first) a priority drop;
/// then DIR of SPI 40 first, the lowest priority, which no list register shows (EOIcount
/// alone would have ended 41, the highest-priority one left out), and of the rest out of
/// priority order. Returns GICD_ISACTIVER1's bits for SPIs 40 to 45 after SPI 40's DIR
/// and after all, and the INTID acknowledged after SPI 40 is pended again.
fn six_active_ended_by_dir_out_of_order() -> (u32, u32, u32) {
    // SAFETY: this vCPU's own PSTATE.I.
    unsafe { asm!("msr daifset, #2", "isb") };
    gic::set_eoi_mode(true);
    let taken = six_active();
    for &iar in taken.iter().rev() {
        gic::end_of_interrupt(iar);
    }
    gic::deactivate(NESTED[0]);
    let first = read32(GICD + 0x304) & SIX; // GICD_ISACTIVER1
    for intid in [43, 41, 45, 42, 44] {
        gic::deactivate(intid);
    }
    let left = read32(GICD + 0x304) & SIX;
    let again = take_spi_40_again(true);
    gic::set_eoi_mode(false);
    // SAFETY: as above.
    unsafe { asm!("msr daifclr, #2", "isb") };
    (first, left, again)
}

/// SPI 40 pended again and taken (its INTID), ended (and with EOImode 1, `split`,
/// deactivated); then SPIs 40 to 45 are disabled (GICD_ICENABLER1).
fn take_spi_40_again(split: bool) -> u32 {
    write32(GICD + 0x204, 1 << (NESTED[0] - 32)); // GICD_ISPENDR1
    let again = gic::acknowledge();
    gic::end_of_interrupt(again);
    if split {
        gic::deactivate(again & 0x3ff);
    }
    write32(GICD + 0x184, SIX); // GICD_ICENABLER1
    again & 0x3ff
}

/// Arms the timer 1 ms ahead; its handler leaves it due (a compare value already past) for
/// the first three interrupts, so the line is high when each ends, then turns it off; the
/// vCPU waits in WFI meanwhile. QEMU's GICv2 does not signal the physical PPI again after
/// such an end through a hardware-mapped list register (docs/vgic.md, "QEMU's GICv2 and
/// the timer of a pinned vCPU"): without the hypervisor's watch the WFI waited for good,
/// and the run ended at its time limit after the line below. Returns the interrupts taken.
fn timer_due_when_its_handler_ends(freq: u64) -> u32 {
    let before = TIMER_INTERRUPTS.load(Ordering::SeqCst);
    LEAVE_DUE.store(3, Ordering::SeqCst);
    println!("gic: waiting in WFI for 4 timer interrupts, 3 of them ended with the timer due");
    // SAFETY: this vCPU's own virtual timer: due in 1 ms, enabled and unmasked.
    unsafe { asm!("msr cntv_tval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) freq / 1000, in(reg) 1u64) };
    while TIMER_INTERRUPTS.load(Ordering::SeqCst) - before < 4 {
        // SAFETY: waiting for an interrupt; IRQs are unmasked, the handler installed.
        unsafe { asm!("wfi") };
    }
    TIMER_INTERRUPTS.load(Ordering::SeqCst) - before
}

/// Lets the timer fire with interrupts masked (its interrupt becomes pending in the vGIC:
/// the physical one brought the vCPU out), writes `ctl` to CNTV_CTL_EL0 (the timer's output
/// goes low), exits once (an HVC: the hypervisor samples the line), unmasks interrupts for
/// a while: returns how many timer interrupts came.
fn timer_pending_then_quiet(freq: u64, ctl: u64) -> u32 {
    // SAFETY: this vCPU's own PSTATE.I and virtual timer.
    unsafe {
        asm!("msr daifset, #2", "isb");
        asm!("msr cntv_tval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) freq / 1000, in(reg) 1u64);
    }
    // Past the deadline, and long enough for the physical interrupt to reach EL2.
    wait_ms(5);
    let before = TIMER_INTERRUPTS.load(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { asm!("msr cntv_ctl_el0, {}", "isb", in(reg) ctl) };
    hvc(SMCCC_VERSION, 0);
    // SAFETY: as above.
    unsafe { asm!("msr daifclr, #2", "isb") };
    wait_ms(5);
    // SAFETY: as above: the timer off for the next check.
    unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
    TIMER_INTERRUPTS.load(Ordering::SeqCst) - before
}
