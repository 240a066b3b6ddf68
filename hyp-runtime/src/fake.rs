//! A fake architecture for the host tests: each test thread is a CPU (its index settable),
//! the counter is a per-thread number the test moves, and kicks and the hypervisor timer are
//! recorded instead of sent, as are the board's SPIs it deactivates.

use std::cell::{Cell, RefCell};
use std::vec::Vec;

use crate::arch::Arch;
use crate::direct_lpis::{BoardVlpis, VlpiError, VlpiVm};

pub struct FakeArch;

thread_local! {
    static CPU: Cell<usize> = const { Cell::new(0) };
    static NOW: Cell<u64> = const { Cell::new(0) };
    static KICKS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static TIMER: Cell<Option<u64>> = const { Cell::new(None) };
    static DEACTIVATED: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static GICV4: Cell<bool> = const { Cell::new(false) };
    static VLPI_EVENTS: RefCell<Vec<std::string::String>> = const { RefCell::new(Vec::new()) };
    static PENDING_LAST: Cell<bool> = const { Cell::new(false) };
    static VLPI_REFUSED: Cell<bool> = const { Cell::new(false) };
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
    /// From now on this thread's board has a GICv4.0 (`Arch::vlpis`), or not.
    pub fn give_gicv4(on: bool) {
        GICV4.with(|g| g.set(on));
    }
    /// What this thread asked of the board's GICv4.0 since the last call, in order.
    pub fn take_vlpi_events() -> Vec<std::string::String> {
        VLPI_EVENTS.with(|e| core::mem::take(&mut *e.borrow_mut()))
    }
    /// Whether the board's ITS refuses every step from now on.
    pub fn refuse_vlpi_commands(refuse: bool) {
        VLPI_REFUSED.with(|r| r.set(refuse));
    }
    /// Whether a vPE made non-resident from now on had vLPIs pending (PendingLast).
    pub fn set_pending_last(pending: bool) {
        PENDING_LAST.with(|p| p.set(pending));
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
    fn vlpis() -> Option<&'static dyn BoardVlpis> {
        GICV4.with(Cell::get).then_some(&FakeVlpis)
    }
}

/// The board's GICv4.0 of a thread that was given one (`FakeArch::give_gicv4`): every VM
/// takes slot 0, vPE `n`'s doorbell is LPI 8192 + `n` of VM 0, and what is asked of it is
/// recorded.
pub struct FakeVlpis;

fn vlpi_event(e: std::string::String) {
    VLPI_EVENTS.with(|v| v.borrow_mut().push(e));
}

impl BoardVlpis for FakeVlpis {
    fn attach(&self, vm: usize, vcpus: usize, cpu: usize) -> Result<VlpiVm, VlpiError> {
        vlpi_event(std::format!("attach vm{vm} {vcpus} vcpus cpu{cpu}"));
        Ok(VlpiVm { vm, slot: 0, vcpus })
    }
    fn detach(&self, vm: &VlpiVm) {
        vlpi_event(std::format!("detach vm{}", vm.vm));
    }
    fn apply(&self, _: &VlpiVm, command: vgic::VlpiCommand) -> Result<(), VlpiError> {
        vlpi_event(std::format!("{command:?}"));
        if VLPI_REFUSED.with(Cell::get) {
            return Err(VlpiError::Board);
        }
        Ok(())
    }
    fn make_resident(&self, _: &VlpiVm, vcpu: usize, cpu: usize) {
        vlpi_event(std::format!("resident vcpu{vcpu} cpu{cpu}"));
    }
    fn make_non_resident(&self, cpu: usize) -> bool {
        vlpi_event(std::format!("not resident cpu{cpu}"));
        PENDING_LAST.with(Cell::get)
    }
    fn doorbell(&self, intid: u32) -> Option<(usize, usize)> {
        Some((0, intid.checked_sub(8192)? as usize))
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
