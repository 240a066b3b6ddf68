//! The microbenchmark guest (docs/performance.md): times hypervisor paths with the virtual
//! counter around many iterations. Run with QEMU's `-icount shift=0`, where one nanosecond
//! of virtual time is one instruction, so the figures are instruction counts. The same image
//! runs directly on QEMU (EL1, no hypervisor) for the reference row.
//!
//! Prints `bench NAME iterations=N ns=T` for a loop of N operations (the `loop` line is the
//! empty loop, subtracted by xtask), and `latency NAME samples=N ns=T` for N measured
//! intervals between two counter reads (the `counter` line is two reads back to back,
//! subtracted by xtask), then powers off.
//!
//! vCPU 1 waits in WFI for the virtual IPI (a sleeping target is what Linux's IPIs meet; a
//! spinning one would keep QEMU's only vCPU thread until its time slice ends).
//!
//! Beside the one-way IPI, `virtual-ipi-round-trip`: vCPU 0's SGI to vCPU 1, whose handler
//! sends one back, timed from vCPU 0's counter read before its SGI write to the counter read
//! in its handler of the answer (vCPU 0 waits with YIELD, so it is running when the answer
//! comes). And `vtimer-periodic`: vCPU 0's virtual timer re-armed every 10 ms by its handler
//! (CNTV_CVAL += 10 ms) while vCPU 0 otherwise waits in WFI; per tick, the instructions from
//! the tick's deadline until vCPU 0 is back from its handler, about to wait in WFI again.
//! The guest counts its wake-ups from WFI too (`microbench: periodic ticks=N wakes=W`): a
//! wake-up without a tick would be work the per-tick window does not see, and is timed
//! (`vtimer-periodic-wake`, from the WFI to its return: on a GICv2 a pinned vCPU's WFI
//! traps after each tick, and the hypervisor returns from it at once unless the timer is due).
//!
//! With `trace=N` in its bootargs (`xtask::bench::trace`) each benchmark runs N times with
//! its window marked (guest_common::bench), after the guest has waited for a byte at the
//! console: xtask turns QEMU's instruction trace on first, so the boot is not traced.
#![no_std]
#![no_main]

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use guest_common::bench::{self, Seen};
use selftest_guest::gic::{self, VTIMER};
use selftest_guest::*;

/// A function id no one implements (owner 2, "SiP service", function 0): NOT_SUPPORTED.
const UNKNOWN_FUNCTION: u64 = 0xc200_0000;
const UARTFR: usize = guest_common::console::UARTFR;
/// MagicValue of the virtio-mmio transport at 0x0a00_0400: the VM's virtio console (slot 2),
/// one of QEMU virt's transports natively.
const VIRTIO_MAGIC: usize = 0x0a00_0400;
/// InterruptACK of the same transport: acknowledging nothing changes nothing.
const VIRTIO_INTERRUPT_ACK: usize = 0x0a00_0464;
const GICD_TYPER: usize = gic::GICD + 0x4;
/// vCPU 0 -> vCPU 1.
const IPI: u32 = 2;
/// vCPU 0 -> itself, for the EOI figure.
const SELF_SGI: u32 = 3;
/// vCPU 0 -> vCPU 1, which answers with ANSWER.
const ASK: u32 = 4;
/// vCPU 1 -> vCPU 0.
const ANSWER: u32 = 5;

/// CNTVCT_EL0 and CNTFRQ_EL0.
struct Counter;

impl bench::Counter for Counter {
    fn now() -> u64 {
        counter()
    }
    fn frequency() -> u64 {
        frequency()
    }
}

fn counter() -> u64 {
    let v: u64;
    // SAFETY: the virtual counter is readable at EL1; the ISB keeps it in program order.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", "isb", out(reg) v) };
    v
}

fn frequency() -> u64 {
    let v: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) v) };
    v
}

fn bench(name: &str, body: impl FnMut()) {
    bench::bench::<Counter>(name, body)
}

fn latency(name: &str, measure: impl FnMut(u64) -> u64) {
    bench::latency::<Counter>(name, measure)
}

static IPI_SEEN: Seen = Seen::new();
static ANSWER_SEEN: Seen = Seen::new();
/// The periodic timer's ticks; `PERIOD` non-zero while it runs, `DEADLINE` the compare value
/// of the tick to come, `LAST_DEADLINE` that of the tick last taken.
static TICK_SEEN: Seen = Seen::new();
static PERIOD: AtomicU64 = AtomicU64::new(0);
static DEADLINE: AtomicU64 = AtomicU64::new(0);
static LAST_DEADLINE: AtomicU64 = AtomicU64::new(0);
static TIMER_SEEN: Seen = Seen::new();
/// For the self-SGI: the ticks its EOI took.
static EOI_SEEN: Seen = Seen::new();
static VCPU1_READY: AtomicBool = AtomicBool::new(false);

extern "C" fn irq() {
    let entered = counter();
    let iar = gic::acknowledge();
    match iar & 0x3ff {
        IPI => IPI_SEEN.record(entered),
        ASK => gic::send_sgi(ANSWER, 0),
        ANSWER => ANSWER_SEEN.record(entered),
        VTIMER if PERIOD.load(Ordering::Relaxed) != 0 => {
            // The next tick one period after this one's deadline: the compare value moves
            // past the count, so the timer's level drops, unless this tick came more than a
            // period late (a host that stalled QEMU, without -icount): then the next one is
            // due already and is taken as soon as this handler returns.
            let deadline = DEADLINE.load(Ordering::Relaxed);
            let next = deadline + PERIOD.load(Ordering::Relaxed);
            // SAFETY: this vCPU's own virtual timer's compare value.
            unsafe { asm!("msr cntv_cval_el0, {}", "isb", in(reg) next) };
            DEADLINE.store(next, Ordering::Relaxed);
            LAST_DEADLINE.store(deadline, Ordering::Relaxed);
            TICK_SEEN.record(entered);
        }
        VTIMER => {
            // SAFETY: disabling this vCPU's own virtual timer, so its level drops.
            unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
            TIMER_SEEN.record(entered);
        }
        SELF_SGI => {
            let before = counter();
            gic::end_of_interrupt(iar);
            EOI_SEEN.record(counter() - before);
            return;
        }
        other => println!("microbench: unexpected interrupt {other}"),
    }
    gic::end_of_interrupt(iar);
}

extern "C" fn vcpu1(_: u64) {
    gic::bring_up_cpu_interface(1, (1 << IPI) | (1 << ASK));
    VCPU1_READY.store(true, Ordering::SeqCst);
    loop {
        // SAFETY: waiting for an interrupt; the handler runs and WFI is entered again.
        unsafe { asm!("wfi") };
    }
}

/// The periodic timer's ticks measured.
const PERIODIC_TICKS: u64 = 1000;

/// The virtual timer every 10 ms, vCPU 0 waiting in WFI between ticks: per tick, from its
/// deadline until vCPU 0 is back from the handler.
fn periodic_timer() {
    let period = frequency() / 100;
    let (mut wakes, start_ticks) = (0u64, TICK_SEEN.count());
    // Wake-ups without a tick, and the counter ticks from their WFI to its return.
    let (mut idle_wakes, mut idle_ticks) = (0u64, 0u64);
    let first = counter() + period;
    DEADLINE.store(first, Ordering::SeqCst);
    PERIOD.store(period, Ordering::SeqCst);
    // SAFETY: this vCPU's virtual timer: compare value, then enabled and unmasked.
    unsafe { asm!("msr cntv_cval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) first, in(reg) 1u64) };
    // 1,000 ticks: 10 s of waiting where the clock is not `-icount`'s (the system test).
    bench::latency_at_most::<Counter>("vtimer-periodic", PERIODIC_TICKS, |i| {
        let n = start_ticks + i + 1;
        loop {
            // IRQs masked from the test to the WFI, so a tick cannot slip in between and
            // leave the WFI waiting a whole period: a pending IRQ wakes a WFI masked or not,
            // and is taken when unmasked.
            // SAFETY: masking IRQs at EL1.
            unsafe { asm!("msr daifset, #2") };
            // At least, not exactly: a late tick's successor is taken right after it (the
            // handler's comment), so the count can pass `n` between two looks.
            if TICK_SEEN.count() >= n {
                // SAFETY: unmasking IRQs at EL1; the handler is installed.
                unsafe { asm!("msr daifclr, #2") };
                break;
            }
            let (seen, before) = (TICK_SEEN.count(), counter());
            // SAFETY: waiting for an interrupt, then taking it.
            unsafe { asm!("wfi", "msr daifclr, #2", "isb") };
            wakes += 1;
            // Read only after a wake-up without a tick: a tick's window (its deadline to
            // here and on) does not carry the read.
            if TICK_SEEN.count() == seen {
                idle_wakes += 1;
                idle_ticks += counter() - before;
            }
        }
        counter() - LAST_DEADLINE.load(Ordering::SeqCst)
    });
    PERIOD.store(0, Ordering::SeqCst);
    // SAFETY: this vCPU's virtual timer off.
    unsafe { asm!("msr cntv_ctl_el0, xzr", "isb") };
    println!("microbench: periodic ticks={} wakes={wakes}", TICK_SEEN.count() - start_ticks);
    bench::report_latency::<Counter>("vtimer-periodic-wake", idle_wakes, idle_ticks);
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    println!("microbench: EL{}, counter at {} Hz", current_el(), frequency());
    // SAFETY: the device tree the hypervisor (or QEMU) gave this vCPU in x0, which nothing
    // writes.
    let bootargs = unsafe { guest_common::fdt::Fdt::at(boot_x0() as usize) }
        .ok()
        .and_then(|fdt| fdt.root_child_string("chosen", "bootargs"));
    bench::trace_if_asked("microbench", bootargs);
    // The loop and counter overhead, subtracted from every figure.
    bench("loop", || core::hint::black_box(()));
    bench("hvc-unknown", || {
        core::hint::black_box(hvc(UNKNOWN_FUNCTION, 0));
    });
    bench("hvc-smccc-version", || {
        core::hint::black_box(hvc(SMCCC_VERSION, 0));
    });
    bench("mmio-read", || {
        // SAFETY: UARTFR of the VM's PL011: under the hypervisor, from its shadow page while
        // nothing is received (docs/devices.md); QEMU's PL011 natively.
        core::hint::black_box(unsafe { read_volatile(UARTFR as *const u32) });
    });
    bench("virtio-read", || {
        // SAFETY: MagicValue of the VM's virtio console transport: under the hypervisor, from
        // the transports' shadow page (docs/virtio.md); QEMU's virtio-mmio transport natively.
        core::hint::black_box(unsafe { read_volatile(VIRTIO_MAGIC as *const u32) });
    });
    bench("virtio-write", || {
        // SAFETY: InterruptACK of the same transport, 0 (no bit acknowledged): a trapped
        // device register write under the hypervisor, the emulated device's exit path.
        unsafe { write_volatile(VIRTIO_INTERRUPT_ACK as *mut u32, 0) };
    });
    bench("gicd-read", || {
        // SAFETY: GICD_TYPER of the VM's GIC distributor (the vGIC, or QEMU's GIC natively).
        core::hint::black_box(unsafe { read_volatile(GICD_TYPER as *const u32) });
    });

    set_irq_handler(irq);
    gic::enable_distributor();
    gic::bring_up_cpu_interface(0, (1 << VTIMER) | (1 << SELF_SGI) | (1 << ANSWER));
    if start_vcpu(1, vcpu1, 0) != 0 {
        println!("microbench: vCPU 1 did not start");
        hvc(HYP_VM_EXIT, 1);
    }
    // YIELD, not spin_loop's ISB: QEMU moves to vCPU 1's CPU on it, where an ISB loop
    // spins through whole turns (38 million traced instructions, docs/performance.md).
    while !VCPU1_READY.load(Ordering::SeqCst) {
        guest_common::yield_cpu();
    }
    latency("counter", |_| {
        let start = counter();
        counter() - start
    });
    latency("virtual-ipi", |i| {
        let sent = counter();
        gic::send_sgi(IPI, 1);
        IPI_SEEN.wait_for(i + 1) - sent
    });
    latency("virtual-ipi-round-trip", |i| {
        let sent = counter();
        gic::send_sgi(ASK, 1);
        ANSWER_SEEN.wait_for(i + 1) - sent
    });
    latency("eoi", |i| {
        gic::send_sgi(SELF_SGI, 0);
        EOI_SEEN.wait_for(i + 1)
    });
    // 2 us ahead: well after the handler of the previous one has returned.
    let ahead = frequency() / 500_000;
    latency("vtimer", |i| {
        let deadline = counter() + ahead;
        // SAFETY: this vCPU's virtual timer: compare value, then enabled and unmasked.
        unsafe { asm!("msr cntv_cval_el0, {}", "msr cntv_ctl_el0, {}", "isb", in(reg) deadline, in(reg) 1u64) };
        TIMER_SEEN.wait_for(i + 1) - deadline
    });
    periodic_timer();
    println!("microbench: done");
    hvc(PSCI_SYSTEM_OFF, 0);
    loop {
        core::hint::spin_loop();
    }
}
