//! A fake architecture for the host tests: each test thread is a CPU (its index settable),
//! the counter is a per-thread number the test moves, and kicks and the hypervisor timer are
//! recorded instead of sent, as are the board's SPIs it deactivates.

use std::cell::{Cell, RefCell};
use std::vec::Vec;

use crate::arch::Arch;

pub struct FakeArch;

thread_local! {
    static CPU: Cell<usize> = const { Cell::new(0) };
    static NOW: Cell<u64> = const { Cell::new(0) };
    static KICKS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static TIMER: Cell<Option<u64>> = const { Cell::new(None) };
    static DEACTIVATED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
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
    /// The board's SPIs this thread deactivated since the last call.
    pub fn take_deactivated_spis() -> Vec<u32> {
        DEACTIVATED.with(|d| core::mem::take(&mut *d.borrow_mut()))
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
    fn deactivate_spi(intid: u32) {
        DEACTIVATED.with(|d| d.borrow_mut().push(intid));
    }
}

/// A shadow page in host memory (`crate::vm::ShadowPage`): its words, and a record of what
/// happened to it (each write's offset and first word, each show), in order, for the tests
/// that check what comes before what.
pub struct FakePage {
    pub words: std::sync::Mutex<Vec<u32>>,
    pub events: std::sync::Mutex<Vec<std::string::String>>,
}

impl FakePage {
    pub fn new() -> std::sync::Arc<FakePage> {
        std::sync::Arc::new(FakePage { words: std::sync::Mutex::new(vec![0; 1024]), events: Default::default() })
    }
    pub fn word(&self, offset: usize) -> u32 {
        self.words.lock().unwrap()[offset / 4]
    }
    pub fn take_events(&self) -> Vec<std::string::String> {
        core::mem::take(&mut *self.events.lock().unwrap())
    }
}

impl crate::vm::ShadowPage for FakePage {
    fn write(&self, offset: usize, words: &[u32]) {
        let mut page = self.words.lock().unwrap();
        page[offset / 4..offset / 4 + words.len()].copy_from_slice(words);
        self.events.lock().unwrap().push(std::format!("write {offset:#x} {:x}", words[0]));
    }
    fn read(&self, offset: usize) -> u32 {
        self.word(offset)
    }
    fn show(&self, visible: bool) -> Result<(), hyp_core::cap::CapError> {
        self.events.lock().unwrap().push(std::format!("show {visible}"));
        Ok(())
    }
}
