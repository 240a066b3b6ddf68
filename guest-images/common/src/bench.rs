//! The microbenchmarks' lines (docs/performance.md), as `xtask::bench::parse` reads them:
//! `bench NAME iterations=N ns=T` for a loop of N operations (the `loop` line is the empty
//! loop, which xtask subtracts) and `latency NAME samples=N ns=T` for N measured intervals
//! between two counter reads (the `counter` line is two reads back to back, subtracted).
//! Under QEMU's `-icount shift=0` one nanosecond of virtual time is one instruction.
//!
//! Traced (`trace=N` in the guest's bootargs: `xtask::bench::trace`), each loop and each
//! latency runs N iterations, and after the first [`TRACE_WARM_UP`] of them the guest calls
//! [`bench_window_open`], after the last [`bench_window_close`]: the addresses of the two in
//! QEMU's instruction trace mark which hypervisor instructions belong to which benchmark.

use core::sync::atomic::{AtomicU64, Ordering};

/// Iterations of every loop, samples of every latency (untraced).
pub const ITERATIONS: u64 = 10_000;
/// Traced, the iterations of each benchmark that run before its window opens: the first
/// calls of a path do what later ones do not (the hypervisor logs an unknown function once).
pub const TRACE_WARM_UP: u64 = 4;

static TRACED_ITERATIONS: AtomicU64 = AtomicU64::new(0);
static WINDOW: AtomicU64 = AtomicU64::new(0);

/// From now on each benchmark runs `iterations` times (at least one more than
/// [`TRACE_WARM_UP`]), with its window marked for an instruction trace.
pub fn trace(iterations: u64) {
    TRACED_ITERATIONS.store(iterations.max(TRACE_WARM_UP + 1), Ordering::SeqCst);
}

/// With `trace=N` in `bootargs` (the `guest`'s device tree's): every benchmark from here on
/// runs N times with its window marked, once a key is typed (the tracer turns its log on
/// while the guest waits: xtask::bench::trace).
pub fn trace_if_asked(guest: &str, bootargs: Option<&str>) {
    if let Some(n) = bootargs.and_then(traced_iterations) {
        trace(n);
        crate::println!("{guest}: traced, {n} iterations a benchmark; waiting for a key");
        crate::console::read_byte();
    }
}

/// The `trace=N` of a command line: N iterations per benchmark, traced.
pub fn traced_iterations(bootargs: &str) -> Option<u64> {
    bootargs.split_whitespace().find_map(|w| w.strip_prefix("trace=")?.parse().ok())
}

/// How many iterations each benchmark runs, and whether it is traced.
fn iterations() -> (u64, bool) {
    match TRACED_ITERATIONS.load(Ordering::SeqCst) {
        0 => (ITERATIONS, false),
        n => (n, true),
    }
}

/// Called where a benchmark's traced iterations begin: its address in the trace is the
/// mark. Not inlined, not removed (its store goes through a pointer the optimiser cannot
/// see through, so the call has an effect), and unlike [`bench_window_close`] (two
/// functions merged would share an address).
#[no_mangle]
#[inline(never)]
pub extern "C" fn bench_window_open() {
    core::hint::black_box(&WINDOW).store(1, Ordering::SeqCst);
}

/// Called where a benchmark's traced iterations end.
#[no_mangle]
#[inline(never)]
pub extern "C" fn bench_window_close() {
    core::hint::black_box(&WINDOW).store(2, Ordering::SeqCst);
}

/// The virtual counter, as an architecture reads it.
pub trait Counter {
    /// The virtual count, read in program order (ISB on both sides).
    fn now() -> u64;
    /// Its frequency in Hz.
    fn frequency() -> u64;
}

/// `ticks` of a counter running at `frequency` Hz, in nanoseconds.
pub fn nanoseconds(ticks: u64, frequency: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(frequency.max(1))) as u64
}

/// Times ITERATIONS runs of `body` and prints its `bench` line.
pub fn bench<C: Counter>(name: &str, mut body: impl FnMut()) {
    let (iterations, traced) = iterations();
    let start = C::now();
    if traced {
        for i in 0..iterations {
            if i == TRACE_WARM_UP {
                bench_window_open();
            }
            body();
        }
        bench_window_close();
    } else {
        for _ in 0..iterations {
            body();
        }
    }
    let ns = nanoseconds(C::now() - start, C::frequency());
    crate::println!("bench {name} iterations={iterations} ns={ns}");
}

/// Sums ITERATIONS samples, `measure(i)` returning the counter ticks of sample `i`, and
/// prints the `latency` line.
pub fn latency<C: Counter>(name: &str, measure: impl FnMut(u64) -> u64) {
    latency_at_most::<C>(name, u64::MAX, measure)
}

/// As [`latency`], with at most `most` samples: for a sample that waits for real time (a
/// periodic timer's tick), which `-icount`'s `sleep=off` skips but a run without it waits.
pub fn latency_at_most<C: Counter>(name: &str, most: u64, mut measure: impl FnMut(u64) -> u64) {
    let (iterations, traced) = iterations();
    let iterations = iterations.min(most);
    let ticks: u64 = if traced {
        let ticks = (0..iterations)
            .map(|i| {
                if i == TRACE_WARM_UP {
                    bench_window_open();
                }
                measure(i)
            })
            .sum();
        bench_window_close();
        ticks
    } else {
        (0..iterations).map(&mut measure).sum()
    };
    report_latency::<C>(name, iterations, ticks);
}

/// Prints the `latency` line of `samples` samples that took `ticks` counter ticks in all;
/// none for no samples.
pub fn report_latency<C: Counter>(name: &str, samples: u64, ticks: u64) {
    if samples > 0 {
        crate::println!("latency {name} samples={samples} ns={}", nanoseconds(ticks, C::frequency()));
    }
}

/// What an interrupt handler saw of one interrupt: how many were taken and the counter at
/// the last one's handler. Each is written by one vCPU's handler only.
pub struct Seen {
    count: AtomicU64,
    at: AtomicU64,
}

impl Seen {
    pub const fn new() -> Self {
        Seen { count: AtomicU64::new(0), at: AtomicU64::new(0) }
    }

    pub fn record(&self, at: u64) {
        self.at.store(at, Ordering::SeqCst);
        self.count.store(self.count.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
    }

    /// How many were taken.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits for the `n`th interrupt (yielding: `yield_cpu`); the counter at its handler.
    pub fn wait_for(&self, n: u64) -> u64 {
        while self.count.load(Ordering::SeqCst) != n {
            crate::yield_cpu();
        }
        self.at.load(Ordering::SeqCst)
    }
}

impl Default for Seen {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_asked_for_by_the_command_line() {
        assert_eq!(traced_iterations("trace=64"), Some(64));
        assert_eq!(traced_iterations("console=ttyAMA0 trace=8 quiet"), Some(8));
        assert_eq!(traced_iterations(""), None);
        assert_eq!(traced_iterations("trace=many"), None);
    }

    #[test]
    fn ticks_become_nanoseconds_without_overflow() {
        assert_eq!(nanoseconds(62_500_000, 62_500_000), 1_000_000_000);
        assert_eq!(nanoseconds(16, 62_500_000), 256);
        assert_eq!(nanoseconds(u64::MAX / 2, 1_000_000_000), u64::MAX / 2, "no overflow in the product");
        assert_eq!(nanoseconds(5, 0), 5_000_000_000, "a zero frequency does not divide by zero");
    }
}
