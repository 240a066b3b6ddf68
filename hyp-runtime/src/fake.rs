//! A fake architecture for the host tests: each test thread is a CPU (its index settable),
//! the counter is a per-thread number the test moves, and kicks and the hypervisor timer are
//! recorded instead of sent.

use std::cell::{Cell, RefCell};
use std::vec::Vec;

use crate::arch::Arch;

pub struct FakeArch;

thread_local! {
    static CPU: Cell<usize> = const { Cell::new(0) };
    static NOW: Cell<u64> = const { Cell::new(0) };
    static KICKS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static TIMER: Cell<Option<u64>> = const { Cell::new(None) };
}

impl FakeArch {
    /// This thread is CPU `cpu` from now on.
    pub fn become_cpu(cpu: usize) {
        CPU.with(|c| c.set(cpu));
    }
    pub fn set_now(now: u64) {
        NOW.with(|n| n.set(now));
    }
    /// The CPUs this thread kicked since the last call.
    pub fn take_kicks() -> Vec<usize> {
        KICKS.with(|k| core::mem::take(&mut *k.borrow_mut()))
    }
    /// The deadline of this thread's hypervisor timer.
    pub fn timer() -> Option<u64> {
        TIMER.with(Cell::get)
    }
}

impl Arch for FakeArch {
    fn current_cpu() -> usize {
        CPU.with(Cell::get)
    }
    fn kick_cpu(cpu: usize) {
        assert_ne!(cpu, Self::current_cpu(), "a CPU never kicks itself: it is in the hypervisor already");
        KICKS.with(|k| k.borrow_mut().push(cpu));
    }
    fn now() -> u64 {
        NOW.with(Cell::get)
    }
    fn counter_frequency() -> u64 {
        62_500_000
    }
    fn set_hyp_timer(deadline: Option<u64>) {
        TIMER.with(|t| t.set(deadline));
    }
}
