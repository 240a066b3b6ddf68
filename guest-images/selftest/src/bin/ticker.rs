//! A periodic virtual timer, as a tickful kernel runs it: every `PERIOD_US` the interrupt
//! handler moves CNTV_CVAL_EL0 one period on and completes the interrupt; the guest
//! spins meanwhile. After `TICKS` ticks it powers off, and the hypervisor's exit counts for
//! the VM say what each tick cost in exits (tests/tests/gic.rs: one).
#![no_std]
#![no_main]

use core::arch::asm;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use selftest_guest::gic::{self, VTIMER};
use selftest_guest::*;

pub const TICKS: u32 = 200;
const PERIOD_US: u64 = 1000;

static TAKEN: AtomicU32 = AtomicU32::new(0);
static PERIOD: AtomicU64 = AtomicU64::new(0);

extern "C" fn irq() {
    let iar = gic::acknowledge();
    if iar & 0x3ff == VTIMER {
        TAKEN.fetch_add(1, Ordering::SeqCst);
        let period = PERIOD.load(Ordering::Relaxed);
        // SAFETY: this vCPU's own virtual timer: the next tick, one period after this one
        // was due (the line drops at once).
        unsafe {
            asm!(
                "mrs {t}, cntv_cval_el0",
                "add {t}, {t}, {p}",
                "msr cntv_cval_el0, {t}",
                "isb",
                t = out(reg) _,
                p = in(reg) period,
            )
        };
    }
    gic::end_of_interrupt(iar);
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    set_irq_handler(irq);
    gic::enable_distributor();
    gic::bring_up_cpu_interface(0, 1 << VTIMER);
    let freq: u64;
    // SAFETY: the counter frequency, readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) freq) };
    let period = freq * PERIOD_US / 1_000_000;
    PERIOD.store(period, Ordering::SeqCst);
    // SAFETY: this vCPU's own timer, first tick one period from now; then interrupts on.
    unsafe {
        asm!(
            "mrs {t}, cntvct_el0",
            "add {t}, {t}, {p}",
            "msr cntv_cval_el0, {t}",
            "msr cntv_ctl_el0, {one}",
            "isb",
            "msr daifclr, #2",
            t = out(reg) _,
            p = in(reg) period,
            one = in(reg) 1u64,
        )
    };
    let deadline = counter_ms() + 5000;
    while TAKEN.load(Ordering::SeqCst) < TICKS && counter_ms() < deadline {
        core::hint::spin_loop();
    }
    // SAFETY: interrupts and the timer off before the last words.
    unsafe { asm!("msr daifset, #2", "msr cntv_ctl_el0, xzr", "isb") };
    let taken = TAKEN.load(Ordering::SeqCst);
    c.check(taken >= TICKS, format_args!("ticker: {taken} ticks of {PERIOD_US} us taken"));
    finish("ticker", &c)
}
