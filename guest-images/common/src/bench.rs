//! The microbenchmarks' lines (docs/performance.md), as `xtask::bench::parse` reads them:
//! `bench NAME iterations=N ns=T` for a loop of N operations (the `loop` line is the empty
//! loop, which xtask subtracts) and `latency NAME samples=N ns=T` for N measured intervals
//! between two counter reads (the `counter` line is two reads back to back, subtracted).
//! Under QEMU's `-icount shift=0` one nanosecond of virtual time is one instruction.

use core::sync::atomic::{AtomicU64, Ordering};

/// Iterations of every loop, samples of every latency.
pub const ITERATIONS: u64 = 10_000;

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
    let start = C::now();
    for _ in 0..ITERATIONS {
        body();
    }
    let ns = nanoseconds(C::now() - start, C::frequency());
    crate::println!("bench {name} iterations={ITERATIONS} ns={ns}");
}

/// Sums ITERATIONS samples, `measure(i)` returning the counter ticks of sample `i`, and
/// prints the `latency` line.
pub fn latency<C: Counter>(name: &str, mut measure: impl FnMut(u64) -> u64) {
    let ticks: u64 = (0..ITERATIONS).map(&mut measure).sum();
    crate::println!("latency {name} samples={ITERATIONS} ns={}", nanoseconds(ticks, C::frequency()));
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
    fn ticks_become_nanoseconds_without_overflow() {
        assert_eq!(nanoseconds(62_500_000, 62_500_000), 1_000_000_000);
        assert_eq!(nanoseconds(16, 62_500_000), 256);
        assert_eq!(nanoseconds(u64::MAX / 2, 1_000_000_000), u64::MAX / 2, "no overflow in the product");
        assert_eq!(nanoseconds(5, 0), 5_000_000_000, "a zero frequency does not divide by zero");
    }
}
