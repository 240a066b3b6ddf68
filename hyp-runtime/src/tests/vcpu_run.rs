//! The vCPU loop (crate::vcpu_run) through a fake CPU whose guest does what each test
//! scripts: a fresh start shows nothing of the CPU's last occupant, a shared vCPU's WFI
//! gives the CPU away and its state comes back whole, a pinned one keeps the CPU, calls and
//! SErrors end the VM, an ending VM's vCPU stops before it enters the guest again, and a
//! guest repeating an unknown call is logged once.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};

use hyp_core::debug_registers::DebugRegisters;
use std::sync::atomic::Ordering;

use hyp_core::exit::{GuestContext, InjectedException};
use hyp_core::exit_stats::ExitCounts;
use hyp_core::guest_map::{VirtioSlot, GICD_IPA};
use hyp_core::image::ExecutionState;
use hyp_core::mmio::MmioDispatch;
use hyp_core::smccc::{PSCI_SYSTEM_OFF, SMCCC_VERSION};
use hyp_core::syndrome::Syndrome;
use hyp_core::syndrome::{AccessWidth, ExceptionClass, MmioAccess};
use hyp_core::sysreg::{Encoding, IdRegisters, SysRegAccess};
use hyp_core::trap::{DecodedExit, Trap};
use hyp_core::vcpu_power::{EndReason, VcpuStart};
use sched::{Decision, VcpuState};
use stage2::Ipa;
use vdev::virtio::console::TX_BUDGET;
use vgic::{IntId, ListRegisters, Maintenance};

use super::hypervisor::{booted, booted_with_its, event, pend, take_events};
use super::leak;
use super::virtio::{console_write, image_ram, FakeEnv, CONSOLE, LINES, RAM_IPA};
use crate::fake::FakeArch;
use crate::hypervisor::{Hypervisor, VcpuExit};
use crate::scheduling::vcpu_ref;
use crate::shared_vgic::VgicHandle;
use crate::tlb::OnEntry;
use crate::vcpu_run::{
    in_vector, run_vcpu, CacheMaintenance, GuestExit, InVector, ResumeSlots, VcpuCpu, VectorAnswer, VectorKick,
};
use crate::vm::Vm;

/// What the run loop published for the vector: whether the vCPU holds list registers, and
/// the one the vector may write again with its value.
type Published = (bool, Option<(usize, u64)>);

/// What the guest does in one stay in the guest.
struct Step {
    exit: GuestExit,
    trap: Option<(DecodedExit, Syndrome)>,
    /// Register 0 is set to this first (a call's function ID).
    x0: Option<u64>,
    /// The virtual timer becomes this (`TIMER`) while the guest runs.
    timer: Option<(Option<u64>, bool)>,
    /// The guest acknowledges the interrupt in list register 0 (pending becomes active).
    ack: bool,
    /// Then deactivates it: a hardware-mapped one leaves the list register empty.
    deactivate: bool,
    /// This physical interrupt comes while the guest runs (the exit's, if it is one).
    interrupt: Option<u32>,
    /// Another CPU raises this edge SPI of VM 0 for vCPU 0 while the guest runs.
    raise: Option<u32>,
    /// The image's vector offers this synchronous exit to the run loop's `InVector` first
    /// (as the AArch64 vector does a data abort while the vCPU holds no list register).
    offered: bool,
    /// While the guest runs, something of this CPU asks its scheduler again without a kick
    /// (a vCPU of this CPU woken by the exit's answer, as `Scheduling::wake` asks it).
    reschedule: bool,
    /// While the guest runs, another vCPU's exits go on with the work VM 0's devices left
    /// for later until none is left.
    finish_device_work: bool,
    /// While the guest runs, another CPU does this to VM 0.
    meanwhile: Option<fn(&Vm<FakeEnv>)>,
}

thread_local! {
    static HYPERVISOR: Cell<Option<&'static Hypervisor<FakeArch>>> = const { Cell::new(None) };
    static SLOTS: RefCell<HashMap<usize, &'static ResumeSlots<FakeCpu>>> = RefCell::default();
    static STEPS: RefCell<VecDeque<Step>> = RefCell::default();
    static TRAP: Cell<Option<(DecodedExit, Syndrome)>> = const { Cell::new(None) };
    /// The PC and register 0 at each entry into the guest.
    static ENTRIES: RefCell<Vec<(u64, u64)>> = RefCell::default();
    static SAVES: Cell<u64> = const { Cell::new(0) };
    /// The guest's virtual timer: its deadline (CNTV_CVAL, if enabled and unmasked) and
    /// whether its output is asserted.
    static TIMER: Cell<(Option<u64>, bool)> = const { Cell::new((None, false)) };
    /// Each setting of the physical timer PPI's active state: (CPU, active).
    static TIMER_PPI: RefCell<Vec<(usize, bool)>> = RefCell::default();
    /// List register 0 at each entry into the guest.
    static LR0_AT_ENTRY: RefCell<Vec<u64>> = RefCell::default();
    /// At each list-register read, whether vCPU 0's list-register lock and VM 0's vGIC lock
    /// were held.
    static LR_READS: RefCell<Vec<(bool, bool)>> = RefCell::default();
    /// What the run loop gave the image's vector for the vCPU it runs (`vector_calls`): the
    /// addresses of its exit counts and of its VM's vGIC, the vCPU and the CPU.
    static VECTOR_CALLS: Cell<(usize, usize, (usize, usize))> = const { Cell::new((0, 0, (9, 9))) };
    /// What the run loop published for the vector after each step that changed vCPU 0's
    /// list registers (`vector_list_registers`).
    static PUBLISHED: RefCell<Vec<Published>> = RefCell::default();
    /// Whether each list-register read is an event too (`read lr N`), for a test of what
    /// comes before what.
    static LR_READ_EVENTS: Cell<bool> = const { Cell::new(false) };
    /// The vector's answer to each exit it offered.
    static OFFERED: RefCell<Vec<VectorAnswer>> = RefCell::default();
}

fn step(exit: GuestExit, trap: Option<(Trap, u32)>, x0: Option<u64>) {
    let trap =
        trap.map(|(trap, ec)| (DecodedExit { trap, instruction_bytes: 4 }, Syndrome(u64::from(ec) << 26 | 1 << 25)));
    STEPS.with(|s| {
        s.borrow_mut().push_back(Step {
            exit,
            trap,
            x0,
            timer: None,
            ack: false,
            deactivate: false,
            interrupt: None,
            raise: None,
            offered: false,
            reschedule: false,
            finish_device_work: false,
            meanwhile: None,
        })
    });
}

fn hvc(function: u32) {
    step(GuestExit::Sync, Some((Trap::Call { immediate: 0, smc: false }, 0x16)), Some(u64::from(function)));
}

fn wfi() {
    step(GuestExit::Sync, Some((Trap::Wait { interrupt: true }, 0x01)), None);
}

/// Four list registers, all empty until the loop writes them.
#[derive(Default)]
struct FakeLrs([u64; 4]);

impl ListRegisters for FakeLrs {
    fn count(&self) -> usize {
        4
    }
    fn read_lr(&self, index: usize) -> u64 {
        if let Some(vm) = HYPERVISOR.with(Cell::get).and_then(|h| h.vm(0)) {
            LR_READS.with(|r| r.borrow_mut().push((vm.vgic.lists[0].is_locked(), vm.vgic.is_locked())));
        }
        if LR_READ_EVENTS.with(Cell::get) {
            event(format!("read lr {index}"));
        }
        self.0[index]
    }
    fn write_lr(&mut self, index: usize, value: u64) {
        self.0[index] = value;
    }
    fn empty_status(&self) -> u32 {
        (0..4).filter(|&i| self.0[i] == 0).fold(0, |m, i| m | 1 << i)
    }
    fn eoi_status(&self) -> u32 {
        0
    }
    fn set_maintenance(&mut self, _: Maintenance) {}
    /// The guests of these tests deactivate only what a list register shows.
    fn take_eoi_count(&mut self) -> u32 {
        0
    }
    /// Nor do they trap DIR (`Outcome::Deactivate` has its own tests).
    fn eoi_split(&self) -> bool {
        false
    }
}

#[derive(Default)]
struct NoIdRegisters;

impl IdRegisters for NoIdRegisters {
    fn read(&self, _: Encoding) -> u64 {
        0
    }
}

/// What a descheduled vCPU left in the fake CPU: a number that tells one save from another.
struct FakeSaved(u64);

struct FakeCpu {
    lrs: FakeLrs,
    debug: DebugRegisters,
    /// Whether WFI traps though pinned (`trap_pinned_wfi`).
    wfi_for_work: bool,
}

impl VcpuCpu for FakeCpu {
    type V = FakeArch;
    type Registers = GuestContext;
    type Aarch32<'a> = &'a mut GuestContext;
    type Saved = FakeSaved;
    type ListRegisters = FakeLrs;
    type IdRegisters = NoIdRegisters;
    type Trap = (DecodedExit, Syndrome);

    fn hypervisor() -> &'static Hypervisor<FakeArch> {
        HYPERVISOR.with(Cell::get).expect("the test set its hypervisor")
    }
    fn resume_slots(vm: &Vm<FakeEnv>) -> &ResumeSlots<FakeCpu> {
        SLOTS.with(|s| {
            *s.borrow_mut()
                .entry(vm.id)
                .or_insert_with(|| leak((0..vm.spec.vcpus).map(|_| hyp_core::sync::Mutex::new(None)).collect()))
        })
    }
    fn enter(_: &Vm<FakeEnv>, vcpu: usize, shares: bool, resumed: Option<&FakeSaved>, tlb: OnEntry) -> FakeCpu {
        event(format!("enter vcpu{vcpu} shares {shares} resumed {:?}", resumed.map(|s| s.0)));
        if tlb == OnEntry::InvalidateStage1 {
            event("invalidate stage 1".into());
        }
        FakeCpu { lrs: FakeLrs::default(), debug: DebugRegisters::AT_RESET, wfi_for_work: false }
    }
    fn trap_pinned_wfi(&mut self, trap: bool) {
        if self.wfi_for_work != trap {
            self.wfi_for_work = trap;
            event(format!("wfi traps though pinned: {trap}"));
        }
    }
    fn restore(&mut self, saved: &FakeSaved) {
        event(format!("restore {}", saved.0));
    }
    fn restore_at_reset(&mut self) {
        event("state at reset".into());
    }
    fn fresh_registers(_: ExecutionState, start: VcpuStart) -> GuestContext {
        let mut ctx = GuestContext { pc: start.entry, ..Default::default() };
        ctx.x[0] = start.context;
        ctx
    }
    fn in_aarch32(_: &GuestContext) -> bool {
        false
    }
    const ONLY_AARCH32: bool = false;
    fn aarch32(registers: &mut GuestContext) -> &mut GuestContext {
        registers
    }
    fn save(&mut self) -> FakeSaved {
        let n = SAVES.with(|s| {
            s.set(s.get() + 1);
            s.get()
        });
        event(format!("save {n}"));
        FakeSaved(n)
    }
    fn leave(&mut self) {
        event("leave".into());
    }
    fn vector_calls(
        &mut self,
        exits: &ExitCounts,
        vgic: &VgicHandle<FakeArch>,
        at: (usize, usize),
        _: Option<u32>,
        _: VectorKick<'_>,
    ) {
        let address = |p: *const ()| p as usize;
        VECTOR_CALLS
            .with(|v| v.set((address(std::ptr::from_ref(exits).cast()), address(std::ptr::from_ref(vgic).cast()), at)));
    }
    fn list_registers(&mut self) -> &mut FakeLrs {
        &mut self.lrs
    }
    fn vector_list_registers(&mut self, in_use: bool, show_again: Option<(usize, u64)>) {
        PUBLISHED.with(|p| p.borrow_mut().push((in_use, show_again)));
    }
    const ANSWERS_IN_VECTOR: bool = true;
    fn run_guest(&mut self, registers: &mut GuestContext, here: &InVector<'_, FakeCpu>) -> GuestExit {
        ENTRIES.with(|e| e.borrow_mut().push((registers.pc, registers.x[0])));
        LR0_AT_ENTRY.with(|e| e.borrow_mut().push(self.lrs.0[0]));
        loop {
            let step = STEPS.with(|s| s.borrow_mut().pop_front()).expect("the test says what the guest does");
            if let Some(x0) = step.x0 {
                registers.x[0] = x0;
            }
            if let Some(timer) = step.timer {
                TIMER.with(|t| t.set(timer));
            }
            if step.ack {
                // ICH_LR<n>_EL2.State [63:62], GICH_LR<n>.State [29:28]: pending (01) to active (10).
                let lr = &mut self.lrs.0[0];
                *lr = if *lr >> 62 != 0 { (*lr & !(3 << 62)) | 2 << 62 } else { (*lr & !(3 << 28)) | 2 << 28 };
            }
            if step.deactivate {
                self.lrs.0[0] = 0;
            }
            if let Some(intid) = step.interrupt {
                pend(&[intid]);
            }
            if let Some(intid) = step.raise {
                let vm = FakeCpu::hypervisor().vm(0).expect("VM 0");
                let mut vgic = vm.vgic.lock();
                vgic.inject_edge(IntId(intid), 0).unwrap();
                vm.vgic.hint(vgic.take_kicks().0 as u32);
            }
            if step.reschedule {
                FakeCpu::hypervisor().scheduling.request_reschedule(1);
            }
            if let Some(meanwhile) = step.meanwhile {
                meanwhile(&FakeCpu::hypervisor().vm(0).expect("VM 0"));
            }
            if step.finish_device_work {
                let vm = FakeCpu::hypervisor().vm(0).expect("VM 0");
                while vm.device_work.swap(false, Ordering::AcqRel) {
                    vm.continue_device_work();
                }
            }
            TRAP.with(|t| t.set(step.trap));
            if !step.offered {
                return step.exit;
            }
            let answer = in_vector::answer(here, registers);
            OFFERED.with(|o| o.borrow_mut().push(answer));
            match answer {
                // The guest goes on: its next step, without the run loop.
                VectorAnswer::Resume => {}
                VectorAnswer::Answered => return GuestExit::Answered,
                VectorAnswer::NotHere => return step.exit,
            }
        }
    }
    fn read_trap() -> (DecodedExit, Syndrome) {
        TRAP.with(Cell::get)
            .unwrap_or((DecodedExit { trap: Trap::Wait { interrupt: false }, instruction_bytes: 4 }, Syndrome(0)))
    }
    fn syndrome(trap: &(DecodedExit, Syndrome)) -> Syndrome {
        trap.1
    }
    fn decode(trap: &(DecodedExit, Syndrome), _: &GuestContext) -> DecodedExit {
        trap.0
    }
    fn debug_registers(&mut self) -> &mut DebugRegisters {
        &mut self.debug
    }
    fn follow_debug(&mut self) {}
    fn cache_maintenance(&mut self, _: &Vm<FakeEnv>, _: &mut GuestContext, _: u8, trap: CacheMaintenance) {
        event(format!("cache maintenance {trap:?}"));
    }
    fn inject(&mut self, _: &mut GuestContext, exception: InjectedException, _: u8) {
        event(format!("inject {exception:?}"));
    }
    fn timer_deadline(_: &Vm<FakeEnv>) -> Option<u64> {
        TIMER.with(Cell::get).0
    }
    fn timer_line() -> bool {
        TIMER.with(Cell::get).1
    }
    fn timer_ppi() -> u32 {
        27
    }
    fn set_timer_ppi_active(cpu: usize, active: bool) {
        TIMER_PPI.with(|t| t.borrow_mut().push((cpu, active)));
    }
    fn deactivate(physical: IntId, _: usize) {
        event(format!("deactivate {}", physical.0));
    }
}

/// The booted fake hypervisor (VM 0: 2 vCPUs sharing CPU 1), as the fake CPU's, on CPU 1.
fn hypervisor() -> &'static Hypervisor<FakeArch> {
    as_the_fake_cpu_s(booted())
}

/// `hypervisor` as the fake CPU's, on CPU 1, with no event left from its boot.
fn as_the_fake_cpu_s(hypervisor: &'static Hypervisor<FakeArch>) -> &'static Hypervisor<FakeArch> {
    HYPERVISOR.with(|h| h.set(Some(hypervisor)));
    FakeArch::become_cpu(1);
    take_events();
    hypervisor
}

/// Runs vCPU 0 of VM 0 on CPU 1 as its scheduler decides (sharing the CPU, or `pinned`).
fn run(hypervisor: &'static Hypervisor<FakeArch>, pinned: bool) -> VcpuExit {
    let vm = hypervisor.vm(0).unwrap();
    let mut decision: Decision = hypervisor.scheduling.pick(1);
    assert_eq!(decision.run, Some(vcpu_ref(0, 0)));
    if pinned {
        decision.trap_wfi = false;
    }
    run_vcpu::<FakeCpu>(&vm, 0, 1, &decision)
}

fn entries() -> Vec<(u64, u64)> {
    ENTRIES.with(|e| std::mem::take(&mut *e.borrow_mut()))
}

#[test]
fn a_fresh_vcpu_starts_at_its_entry_with_its_state_at_reset_and_a_power_off_ends_the_vm() {
    let hypervisor = hypervisor();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(take_events(), ["enter vcpu0 shares true resumed None", "state at reset", "leave"]);
    let first = entries()[0];
    let vm = hypervisor.vm(0).unwrap();
    assert_eq!(first.0, hyp_core::guest_map::RAM_IPA, "the kernel's entry, at the base of RAM");
    assert!(first.1 > first.0 && first.1 < first.0 + vm.spec.memory, "x0: the device tree, in the VM's RAM");
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Stopped));
}

/// The vector answers a vCPU's exits from what the run loop gave it when the vCPU came
/// onto the CPU: its own exit counts and its own VM's vGIC (the copy of the control words,
/// the SGIs it posts), never another VM's, and which vCPU and CPU it is (vCPU 0 on CPU 1 here; docs/vgic.md, "The
/// control words answered in the vector", "Posted SGIs").
#[test]
fn the_vector_is_given_the_running_vcpu_s_counts_and_its_vm_s_vgic() {
    let hypervisor = hypervisor();
    VECTOR_CALLS.with(|v| v.set((0, 0, (9, 9))));
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let vm = hypervisor.vm(0).unwrap();
    let address = |p: *const ()| p as usize;
    let expected =
        (address(std::ptr::from_ref(&vm.exits[0]).cast()), address(std::ptr::from_ref(&*vm.vgic).cast()), (0, 1));
    assert_eq!(VECTOR_CALLS.with(Cell::get), expected);
}

#[test]
fn a_shared_vcpu_that_waits_gives_its_cpu_away_and_comes_back_where_it_was() {
    let hypervisor = hypervisor();
    hvc(SMCCC_VERSION);
    wfi();
    assert_eq!(run(hypervisor, false), VcpuExit::Descheduled);
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Blocked), "nothing was pending");
    assert_eq!(take_events(), ["enter vcpu0 shares true resumed None", "state at reset", "save 1", "leave"]);
    let before = entries();
    let vm = hypervisor.vm(0).unwrap();
    hypervisor.scheduling.wake(vcpu_ref(0, 0), &vm.vgic.waiting[0]);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(take_events(), ["enter vcpu0 shares true resumed Some(1)", "restore 1", "leave"]);
    let after = entries();
    assert_eq!(after[0].0, before[1].0 + 4, "resumed past its WFI");
    assert_eq!(after[0].1, hyp_core::smccc::SMCCC_VERSION_1_1, "with the answer of its last call in x0");
}

/// A shared vCPU that waits with its timer already due does not block, and its virtual
/// timer's interrupt is made pending from the timer's line there and then, its physical PPI
/// held active: it does not depend on the PPI being signalled again (which QEMU's GICv2
/// can fail to do after the guest's deactivation).
#[test]
fn a_shared_vcpu_that_waits_with_its_timer_due_gets_the_timer_s_interrupt_from_its_line() {
    let hypervisor = hypervisor();
    TIMER_PPI.with(|t| t.borrow_mut().clear());
    // The timer fires while the guest runs (its deadline 0 is past), and the guest waits;
    // no physical PPI reaches the hypervisor.
    wfi();
    last_step(|s| s.timer = Some((Some(0), true)));
    hvc(PSCI_SYSTEM_OFF);
    let end = run(hypervisor, false);
    TIMER.with(|t| t.set((None, false)));
    assert_eq!(end, VcpuExit::VmEnded(EndReason::PoweredOff), "not descheduled: its timer was due");
    let ppi = TIMER_PPI.with(|t| std::mem::take(&mut *t.borrow_mut()));
    assert_eq!(ppi.last(), Some(&(1, true)), "held active while the virtual one is pending: {ppi:?}");
    let vm = hypervisor.vm(0).unwrap();
    let timer = vm.vgic.lock().interrupt(0, IntId(27)).unwrap();
    assert!(timer.pending, "the virtual timer is pending for vCPU 0: {timer:?}");
    assert_eq!(entries().len(), 2, "it entered the guest again after its WFI");
}

/// QEMU's GICv2 does not signal the timer's PPI again when the guest's deactivation finds
/// its line still high: a pinned vCPU of a GICv2 VM has its WFI trapped after its timer's
/// interrupt, and a WFI with the timer due gets the timer's interrupt from its line; one
/// that finds it not due lifts the trap. A GICv3 VM's pinned vCPU is not trapped.
#[test]
fn a_pinned_vcpu_on_a_gicv2_that_waits_with_its_timer_due_gets_the_timer_s_interrupt() {
    for gic_v2 in [true, false] {
        let hypervisor = as_the_fake_cpu_s(if gic_v2 { super::hypervisor::booted_on_gicv2() } else { booted() });
        let vm = timer_for_vcpu_0(hypervisor);
        assert_eq!(vm.gic_v3, !gic_v2);
        TIMER_PPI.with(|t| t.borrow_mut().clear());
        // The tick; the guest's handler sets a deadline already past and ends it (the
        // physical PPI, deactivated with it, is not signalled again), then waits; once it
        // took the tick made from the line, it waits with its timer not due.
        step(GuestExit::Interrupt, None, None);
        last_step(|s| s.interrupt = Some(27));
        wfi();
        last_step(|s| (s.ack, s.deactivate, s.timer) = (true, true, Some((Some(0), true))));
        wfi();
        last_step(|s| (s.ack, s.deactivate, s.timer) = (true, true, Some((None, false))));
        hvc(PSCI_SYSTEM_OFF);
        assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
        TIMER.with(|t| t.set((None, false)));
        let traps: Vec<String> = take_events().into_iter().filter(|e| e.starts_with("wfi traps")).collect();
        if gic_v2 {
            assert_eq!(
                traps,
                ["wfi traps though pinned: true", "wfi traps though pinned: false"],
                "trapped from the tick to the WFI that found the timer not due"
            );
            let ppi = TIMER_PPI.with(|t| std::mem::take(&mut *t.borrow_mut()));
            assert!(ppi.contains(&(1, true)), "the physical PPI held active again: {ppi:?}");
            let timer = vm.vgic.lock().interrupt(0, IntId(27)).unwrap();
            assert!(!timer.pending && !timer.active, "the tick made from the line was taken: {timer:?}");
        } else {
            assert_eq!(traps, Vec::<String>::new(), "a GICv3 signals it: WFI does not trap");
        }
    }
}

thread_local! {
    /// The list registers vCPU 0 held while the guest ran a step (`meanwhile`).
    static HELD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The watched WFI that finds the timer not due costs only its exit: the list register the
/// guest completed (the tick's) is left for the next exit to take back, as when the WFI
/// does not trap, and that exit takes it back.
#[test]
fn a_pinned_gicv2_vcpu_s_wfi_with_its_timer_not_due_leaves_its_list_registers_to_the_next_exit() {
    let hypervisor = as_the_fake_cpu_s(super::hypervisor::booted_on_gicv2());
    let vm = timer_for_vcpu_0(hypervisor);
    // The tick; the guest's handler ends it with the next deadline in the future, then waits.
    step(GuestExit::Interrupt, None, None);
    last_step(|s| s.interrupt = Some(27));
    wfi();
    last_step(|s| (s.ack, s.deactivate, s.timer) = (true, true, Some((None, false))));
    hvc(SMCCC_VERSION);
    last_step(|s| s.meanwhile = Some(|vm| HELD.with(|h| h.set(vm.vgic.lists[0].lock().in_use()))));
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let traps: Vec<String> = take_events().into_iter().filter(|e| e.starts_with("wfi traps")).collect();
    assert_eq!(traps, ["wfi traps though pinned: true", "wfi traps though pinned: false"]);
    assert_eq!(HELD.with(Cell::get), 1, "the tick's list register, completed, not taken back at the WFI");
    let timer = vm.vgic.lock().interrupt(0, IntId(27)).unwrap();
    assert!(!timer.pending && !timer.active, "taken back at the call's exit: {timer:?}");
}

/// The watched WFI leaves its list registers to the next exit, but a plan made before that
/// exit (another vCPU's SGI hinted this one meanwhile) takes them back first: planned from
/// the record of the exit before, an SGI the guest completed since was written back active
/// and pending, which the guest never deactivates again, and every later SGI from that
/// source waited behind it for good (a Linux VM with pinned vCPUs on a GICv2 stalled in
/// `dd | sha256sum`: a task left on a CPU's wake list, docs/vgic.md).
#[test]
fn a_plan_after_a_watched_wfi_takes_back_what_the_guest_completed_first() {
    let hypervisor = as_the_fake_cpu_s(super::hypervisor::booted_on_gicv2());
    let vm = timer_for_vcpu_0(hypervisor);
    // GICD_SGIR from vCPU 1: SGI 1 to vCPU 0 (CPUTargetList bit 0).
    let sgi_from_vcpu_1 = |vm: &Vm<FakeEnv>| {
        vm.vgic.write_distributor(1, vgic::GICD_SGIR, AccessWidth::Word, 1 << 16 | 1).unwrap();
    };
    sgi_from_vcpu_1(&vm);
    // The guest acknowledges the SGI (list register 0, active), and its tick comes.
    step(GuestExit::Interrupt, None, None);
    last_step(|s| (s.ack, s.interrupt, s.timer) = (true, Some(27), Some((None, true))));
    // Its handler ends the SGI, and it waits with its timer not due; meanwhile vCPU 1
    // sends the same SGI again.
    wfi();
    last_step(|s| {
        (s.deactivate, s.timer) = (true, Some((None, false)));
        s.meanwhile = Some(sgi_from_vcpu_1);
    });
    hvc(SMCCC_VERSION);
    hvc(PSCI_SYSTEM_OFF);
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let entries = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    // GICH_LR: State [29:28] (01 pending, 11 pending and active), CPUID [12:10], VirtualID.
    let sgi_1_from_vcpu_1 = 1 << 10 | 1;
    assert_eq!(entries[0] & 0x3fff_ffff, 1 << 28 | sgi_1_from_vcpu_1, "the first SGI, pending: {entries:x?}");
    assert_eq!(
        entries[2] & 0x3fff_ffff,
        1 << 28 | sgi_1_from_vcpu_1,
        "after the WFI: the second SGI pending, not pending and active: {entries:x?}"
    );
}

/// VM 0's vGIC, locked, with its distributor's groups enabled and SPI 40 enabled, in Group 1,
/// routed to vCPU 0 (the reset route).
fn spi_40_for_vcpu_0(vm: &Vm<FakeEnv>) -> hyp_core::sync::MutexGuard<'_, vgic::Distributor> {
    let mut vgic = vm.vgic.lock();
    vgic.write(0, 0x000, 4, 0b11).unwrap();
    vgic.write(0, 0x084, 4, 1 << 8).unwrap();
    vgic.write(0, 0x104, 4, 1 << 8).unwrap();
    vgic
}

/// An exit whose list registers came back as they went in takes vCPU 0's own list-register
/// lock only, not the VM's vGIC lock (docs/architecture.md, "Lock order"); one that changed
/// them folds the change into the vGIC under both.
#[test]
fn an_exit_with_its_list_registers_unchanged_does_not_take_the_vms_vgic_lock() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    spi_40_for_vcpu_0(&vm).inject_edge(IntId(40), 0).unwrap();
    vm.vgic.hint(1);
    hvc(SMCCC_VERSION);
    hvc(SMCCC_VERSION);
    last_step(|s| s.ack = true);
    hvc(PSCI_SYSTEM_OFF);
    LR_READS.with(|r| r.borrow_mut().clear());
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let exits = LR_READS.with(|r| std::mem::take(&mut *r.borrow_mut()));
    assert!(exits.iter().all(|&(own, _)| own), "every read under the vCPU's own lock: {exits:?}");
    assert_eq!(exits.first(), Some(&(true, false)), "the first exit (nothing taken) reads without the VM's lock");
    assert!(exits.contains(&(true, true)), "the acknowledgement is folded in under the VM's lock: {exits:?}");
    let spi = vm.vgic.lock().interrupt(0, IntId(40)).unwrap();
    assert!(!spi.pending && spi.active, "acknowledged, not completed: active in the vGIC once it left: {spi:?}");
}

/// VM 0 with its virtual timer's PPI routed as the hypervisor's, Group 1 enabled, and PPI
/// 27 of vCPU 0 in Group 1 and enabled (GICv3: its SGI frame's IGROUPR0 and ISENABLER0;
/// GICv2: the distributor's, banked); no kick left from the set-up.
fn timer_for_vcpu_0(hypervisor: &'static Hypervisor<FakeArch>) -> std::sync::Arc<Vm<FakeEnv>> {
    hypervisor.routes.set(27, crate::interrupts::Route::VirtualTimer).unwrap();
    let vm = hypervisor.vm(0).unwrap();
    {
        let mut vgic = vm.vgic.lock();
        vgic.write(0, 0x000, 4, 0b11).unwrap();
        for offset in [0x080, 0x100] {
            if vm.gic_v3 {
                vgic.write_redistributor(0x1_0000 + offset, 4, 1 << 27).unwrap();
            } else {
                vgic.write(0, offset, 4, 1 << 27).unwrap();
            }
        }
        let _ = vgic.take_kicks();
    }
    vm
}

/// The virtual timer's interrupt at an exit (a PPI the hypervisor takes and leaves active):
/// at the next entry the vCPU's list register shows the virtual timer pending and
/// hardware-mapped, its line raised under the lock of that plan. An SGI the vCPU sends
/// kicks its target once: no change leaves a kick in the vGIC for a later one to send again
/// (a device's interrupt for vCPU 0 used to kick every vCPU that had taken an SGI or a
/// timer tick since).
#[test]
fn a_timer_interrupt_is_shown_at_the_next_entry_and_no_kick_is_left_behind() {
    let hypervisor = hypervisor();
    let vm = timer_for_vcpu_0(hypervisor);
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    // ICC_SGI1R_EL1 = x0: SGI 1 to vCPU 1 (TargetList bit 1).
    let sgi1r = SysRegAccess { op0: 3, op1: 0, crn: 12, crm: 11, op2: 5, rt: 0, is_read: false };
    step(GuestExit::Sync, Some((Trap::SystemRegister { access: sgi1r, iss: sgi1r.iss() }, 0x18)), Some(1 << 24 | 0b10));
    step(GuestExit::Interrupt, None, None);
    pend(&[27]);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    let shown = vgic::IchLr(lr0[2]).decode();
    assert_eq!((shown.vintid, shown.state, shown.hw), (IntId(27), vgic::LrState::Pending, Some(27)), "{lr0:x?}");
    let sgi = vm.vgic.lock().interrupt(1, IntId(1)).unwrap();
    assert!(sgi.pending, "vCPU 1 has its SGI");
    assert!(vm.vgic.take_hint(1), "and looks at it");
    assert_eq!(vm.vgic.lock().take_kicks(), vgic::VcpuMask::EMPTY, "every kick asked for was taken");
}

/// A periodic tick: each time the guest took the last one and deactivated it, the next
/// one's exit takes that list register back and shows the new tick in one step. Were the
/// take-back skipped, the vGIC would think the register still shows the last tick and write
/// nothing; were it done after the tick's line was raised, its fold would drop the line.
#[test]
fn each_tick_of_a_periodic_timer_is_shown_once_the_guest_completed_the_last() {
    let hypervisor = hypervisor();
    let vm = timer_for_vcpu_0(hypervisor);
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    for _ in 0..4 {
        step(GuestExit::Interrupt, None, None);
        last_step(|s| (s.ack, s.deactivate, s.interrupt) = (true, true, Some(27)));
    }
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    assert_eq!(lr0.len(), 5);
    for (entry, &raw) in lr0.iter().enumerate().skip(1) {
        let shown = vgic::IchLr(raw).decode();
        assert_eq!(
            (shown.vintid, shown.state, shown.hw),
            (IntId(27), vgic::LrState::Pending, Some(27)),
            "entry {entry}: {lr0:x?}"
        );
    }
    let timer = vm.vgic.lock().interrupt(0, IntId(27)).unwrap();
    assert!(!timer.active, "each tick's deactivation was taken back: {timer:?}");
    assert_eq!(vm.vgic.lock().take_kicks(), vgic::VcpuMask::EMPTY, "no kick left for the vCPU that planned");
}

/// SPI 40 as `spi_40_for_vcpu_0` sets it up, edge-triggered and raised once; vCPU 0 hinted,
/// no kick left from the set-up.
fn edge_spi_40_pending_for_vcpu_0(vm: &Vm<FakeEnv>) {
    let mut vgic = spi_40_for_vcpu_0(vm);
    // Edge-triggered (GICD_ICFGR2, INTID 40's field).
    vgic.write(0, 0xc08, 4, 2 << 16).unwrap();
    vgic.inject_edge(IntId(40), 0).unwrap();
    let _ = vgic.take_kicks();
    drop(vgic);
    vm.vgic.hint(1);
}

/// A kick's exit (its take-back comes after the exit's interrupt is taken): the guest
/// completed SPI 40 and another CPU raised it again, with a kick; the completion is folded
/// before the next plan shows the new edge. Were the take-back skipped, the vGIC would think
/// the register still shows the first and write nothing; the second edge would wait.
#[test]
fn a_kick_s_exit_folds_what_the_guest_completed_before_it_plans_what_the_kick_announced() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    edge_spi_40_pending_for_vcpu_0(&vm);
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    step(GuestExit::Interrupt, None, None);
    last_step(|s| {
        (s.ack, s.deactivate, s.raise, s.interrupt) = (true, true, Some(40), Some(crate::interrupts::KICK_SGI))
    });
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    assert_eq!(lr0.len(), 2);
    for (entry, &raw) in lr0.iter().enumerate() {
        let shown = vgic::IchLr(raw).decode();
        assert_eq!((shown.vintid, shown.state), (IntId(40), vgic::LrState::Pending), "entry {entry}: {lr0:x?}");
    }
    assert!(vm.exit_counts().to_string().contains("kick 1"));
}

/// An SPI the guest acknowledged on vCPU 0, then routed to vCPU 1 (GICD_IROUTER40), and
/// raised again meanwhile: pending for vCPU 1, which looked and found it still vCPU 0's.
/// When vCPU 0's exit takes back the guest's deactivation, vCPU 1 is made to look again
/// (hinted, and its CPU kicked), or it would sleep with the interrupt pending for it.
#[test]
fn an_spi_a_vcpu_lets_go_pending_for_another_vcpu_makes_that_vcpu_look_again() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    edge_spi_40_pending_for_vcpu_0(&vm);
    // vCPU 1 runs on CPU 2.
    vm.vgic.running_on[1].store(2, Ordering::Release);
    hvc(SMCCC_VERSION);
    last_step(|s| s.ack = true);
    hvc(SMCCC_VERSION);
    last_step(|s| {
        s.meanwhile = Some(|vm| {
            let mut vgic = vm.vgic.lock();
            // GICD_IROUTER40: Aff0 1, vCPU 1.
            vgic.write(0, 0x6000 + 8 * 40, 8, 1).unwrap();
            vgic.inject_edge(IntId(40), 0).unwrap();
            let kicks = vgic.take_kicks();
            drop(vgic);
            assert!(kicks.contains(1), "raised for vCPU 1");
            let _ = vm.vgic.take_hint(1);
        });
        s.deactivate = true;
    });
    hvc(PSCI_SYSTEM_OFF);
    FakeArch::take_kicks();
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert!(vm.vgic.is_hinted(1), "vCPU 1 looks at its interrupts again");
    assert_eq!(FakeArch::take_kicks(), [2], "vCPU 1's CPU is kicked");
    let spi = vm.vgic.lock().interrupt(1, IntId(40)).unwrap();
    assert!(spi.pending && !spi.active, "pending for vCPU 1: {spi:?}");
}

/// A passthrough device's edge SPI 40 (physical 72) shown pending in vCPU 0's list register,
/// cleared through GICD_ICPENDR by another vCPU while vCPU 0's guest runs: the write leaves
/// the physical interrupt alone (vCPU 0's guest may still take it there, and deactivate it
/// itself), and the next plan of vCPU 0, which empties that list register, deactivates it
/// at the board's GIC.
#[test]
fn a_passthrough_spi_cleared_while_its_list_register_shows_it_is_deactivated_when_the_plan_empties_it() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    edge_spi_40_pending_for_vcpu_0(&vm);
    vm.vgic.lock().set_hw(IntId(40), 0, Some(IntId(72))).unwrap();
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    hvc(SMCCC_VERSION);
    last_step(|s| {
        s.meanwhile = Some(|vm| {
            // GICD_ICPENDR1, from vCPU 1.
            vm.vgic.write_distributor(1, 0x284, AccessWidth::Word, 1 << 8).unwrap();
            assert!(FakeArch::take_deactivated_spis().is_empty(), "a list register still shows it");
        })
    });
    hvc(PSCI_SYSTEM_OFF);
    FakeArch::take_deactivated_spis();
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(FakeArch::take_deactivated_spis(), [72]);
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    let shown: Vec<_> = lr0.iter().map(|&raw| vgic::IchLr(raw).decode().state).collect();
    assert_eq!(shown, [vgic::LrState::Pending, vgic::LrState::Invalid], "{lr0:x?}");
}

/// An exit for an interrupt that is neither a kick nor the vCPU's timer (INTID 99, routed
/// nowhere) while the vCPU holds a list register the guest changed: the list registers are
/// taken back before the interrupt is handled, as a passthrough SPI's line must be raised
/// after the take-back's fold, not folded away by it.
#[test]
fn an_exit_s_other_interrupt_is_handled_after_the_list_registers_are_taken_back() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    spi_40_for_vcpu_0(&vm).inject_edge(IntId(40), 0).unwrap();
    vm.vgic.hint(1);
    step(GuestExit::Interrupt, None, None);
    last_step(|s| (s.ack, s.interrupt) = (true, Some(99)));
    hvc(PSCI_SYSTEM_OFF);
    take_events();
    LR_READ_EVENTS.with(|l| l.set(true));
    let end = run(hypervisor, true);
    LR_READ_EVENTS.with(|l| l.set(false));
    assert_eq!(end, VcpuExit::VmEnded(EndReason::PoweredOff));
    let events = take_events();
    let at = |e: &str| events.iter().position(|x| x == e);
    assert!(matches!((at("read lr 0"), at("end 99")), (Some(r), Some(e)) if r < e), "{events:?}");
    let spi = vm.vgic.lock().interrupt(0, IntId(40)).unwrap();
    assert!(spi.active && !spi.pending, "the acknowledgement was folded in: {spi:?}");
}

#[test]
fn a_pinned_vcpu_that_waits_keeps_its_cpu() {
    let hypervisor = hypervisor();
    wfi();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(take_events(), ["enter vcpu0 shares false resumed None", "state at reset", "leave"], "nothing saved");
    assert_eq!(entries().len(), 2, "it entered the guest again after its WFI");
}

/// VM 0's guest wrote `len` bytes of `#` to its virtio console in one notify, made before
/// the test's steps (as at an earlier exit): the console writes `TX_BUDGET` bytes a notify
/// or a continuation, so the rest is work left for later. Returns how many `#` the VM's
/// console has received so far, as a function.
fn console_output_left(len: u64) -> impl Fn() -> usize {
    let vm = FakeCpu::hypervisor().vm(0).unwrap();
    let reg = |offset: u64, value: u32| {
        vm.mmio().write(0, Ipa(VirtioSlot::Console.ipa() + offset), AccessWidth::Word, u64::from(value)).unwrap();
    };
    console_write(&reg, &image_ram(), RAM_IPA + 0x20_0000, len as u32, b'#');
    assert!(vm.device_work.load(Ordering::Acquire), "the notify left work for later");
    || CONSOLE.with(|c| c.lock().unwrap().iter().filter(|&&b| b == b'#').count())
}

/// While its VM's devices have work left for later, a pinned vCPU's WFI traps (an idle
/// guest would otherwise make no exit for that work to go on at); once a continuation
/// finishes it, WFI no longer traps.
#[test]
fn a_pinned_vcpu_s_wfi_traps_while_its_vm_s_devices_have_work_left() {
    let hypervisor = hypervisor();
    let written = console_output_left(4 * TX_BUDGET);
    take_events();
    hvc(SMCCC_VERSION);
    wfi();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(
        take_events(),
        [
            "enter vcpu0 shares false resumed None",
            "state at reset",
            "wfi traps though pinned: true",
            "wfi traps though pinned: false",
            "leave"
        ]
    );
    assert_eq!(written(), 4 * TX_BUDGET as usize, "a budget at the entry and at each exit, then nothing left");
}

/// Work left for later that another vCPU's exits finished: the next WFI of a vCPU that
/// trapped it for that work finds none, and WFI no longer traps.
#[test]
fn a_pinned_vcpu_s_wfi_stops_trapping_when_another_vcpu_finished_the_work() {
    let hypervisor = hypervisor();
    let written = console_output_left(3 * TX_BUDGET);
    take_events();
    wfi();
    last_step(|s| s.finish_device_work = true);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(
        take_events(),
        [
            "enter vcpu0 shares false resumed None",
            "state at reset",
            "wfi traps though pinned: true",
            "wfi traps though pinned: false",
            "leave"
        ]
    );
    assert_eq!(written(), 3 * TX_BUDGET as usize);
}

/// A shared vCPU's WFI while its VM's devices have work left does not give the CPU away:
/// the work goes on first, a budget at each exit.
#[test]
fn a_shared_vcpu_does_not_wait_while_its_vm_s_devices_have_work_left() {
    let hypervisor = hypervisor();
    let written = console_output_left(4 * TX_BUDGET);
    wfi();
    wfi();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff), "never descheduled");
    assert_eq!(written(), 4 * TX_BUDGET as usize);
}

/// The CPU invalidates its TLB for a vCPU only when another vCPU of its VM ran there since
/// its last turn (crate::tlb), and the decision reaches the arch's entry.
#[test]
fn a_vcpu_entering_where_another_vcpu_of_its_vm_ran_has_the_cpu_invalidate_first() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    // vCPU 1 had CPU 1 last.
    assert_eq!(vm.stage1.enter(1, 1), OnEntry::Nothing);
    wfi();
    assert_eq!(run(hypervisor, false), VcpuExit::Descheduled);
    assert_eq!(
        take_events(),
        ["enter vcpu0 shares true resumed None", "invalidate stage 1", "state at reset", "save 1", "leave"]
    );
    hypervisor.scheduling.wake(vcpu_ref(0, 0), &vm.vgic.waiting[0]);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(take_events(), ["enter vcpu0 shares true resumed Some(1)", "restore 1", "leave"], "its own turn again");
}

#[test]
fn an_serror_stops_the_vm_as_crashed_and_says_so() {
    let hypervisor = hypervisor();
    step(GuestExit::SError, None, None);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::Crashed));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l.starts_with("hypervisor: vm0 guest vcpu0: SError")), "{lines:?}");
}

#[test]
fn a_vm_ended_from_outside_stops_its_vcpu_before_it_enters_the_guest() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    assert!(!vm.request_end(EndReason::Destroyed), "vCPU 0 is on");
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::Destroyed));
    assert!(entries().is_empty(), "the guest never ran");
}

#[test]
fn a_guest_repeating_an_unknown_call_is_logged_once_and_answered_each_time() {
    let hypervisor = hypervisor();
    LINES.with(|l| l.borrow_mut().clear());
    hvc(0xc200_0000);
    hvc(0xc200_0000);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert_eq!(lines.iter().filter(|l| l.contains("unknown SMCCC function 0xc2000000")).count(), 1, "{lines:?}");
    let e = entries();
    assert_eq!((e[1].1, e[2].1), (hyp_core::smccc::NOT_SUPPORTED, hyp_core::smccc::NOT_SUPPORTED));
}

/// The step the test added last, changed.
fn last_step(change: impl FnOnce(&mut Step)) {
    STEPS.with(|s| change(s.borrow_mut().back_mut().expect("a step to change")));
}

/// The step the test added last is offered to the vector first.
fn offer_last() {
    last_step(|s| s.offered = true);
}

/// A data abort at `ipa` by a word access of register `rt` (a store if `write`), offered to
/// the vector first; `x0` is set first.
fn offered_access(ipa: u64, rt: u8, write: bool, x0: Option<u64>) {
    let access = Some(MmioAccess::new(AccessWidth::Word, write, rt, false, false));
    step(GuestExit::Sync, Some((Trap::DataAbort { ipa: Ipa(ipa), va: 0xdead_0000, access, write }, 0x24)), x0);
    offer_last();
}

fn offered() -> Vec<VectorAnswer> {
    OFFERED.with(|o| std::mem::take(&mut *o.borrow_mut()))
}

/// A distributor register read answered in the vector: the guest goes on from the next
/// instruction with the register's value, the run loop is not returned to, and the exit is
/// counted as the run loop counts it. A call offered to the vector is left to the run loop,
/// with nothing changed.
#[test]
fn an_mmio_read_answered_in_the_vector_goes_on_without_the_run_loop_and_is_counted() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    let typer = vm.vgic.lock().read(0, 0x004, 4).unwrap();
    let aborts = || vm.exits[0].class_counter(ExceptionClass::DATA_ABORT_LOWER).load(Ordering::Relaxed);
    let before = aborts();
    offered_access(GICD_IPA + 0x004, 0, false, None);
    wfi();
    hvc(SMCCC_VERSION);
    offer_last();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(offered(), [VectorAnswer::Resume, VectorAnswer::NotHere]);
    let e = entries();
    assert_eq!(e.len(), 3, "the read and the WFI in one entry, the call (answered by the run loop), the power-off");
    assert_eq!(e[1], (e[0].0 + 8, typer), "past the load and the WFI, with GICD_TYPER in x0");
    // An HVC's preferred return is already past it.
    assert_eq!(e[2], (e[1].0, hyp_core::smccc::SMCCC_VERSION_1_1), "the call answered by the run loop");
    assert_eq!(aborts() - before, 1, "the read is counted");
}

/// An access the vector answers with the guest's abort (no device, no memory there) goes to
/// the run loop, which injects it, and the guest's error is logged with its VM and vCPU.
#[test]
fn an_access_to_nothing_answered_in_the_vector_has_the_run_loop_inject_the_abort() {
    let hypervisor = hypervisor();
    LINES.with(|l| l.borrow_mut().clear());
    offered_access(0x0700_0000, 3, false, None);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(offered(), [VectorAnswer::Answered]);
    let events = take_events();
    assert!(
        events.contains(&"inject DataAbort { far: 3735879680, write: false }".to_string()),
        "the run loop injects the abort: {events:?}"
    );
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l.contains("vm0 guest vcpu0") && l.contains("0x7000000")), "{lines:?}");
}

/// An access that changes the vCPU's own interrupts (a pending SPI routed to it) goes to the
/// run loop before the guest goes on, which plans the list registers: the guest's next
/// entry shows the interrupt.
#[test]
fn an_access_that_pends_an_interrupt_for_its_own_vcpu_reaches_the_run_loop_before_the_guest_goes_on() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    let _ = spi_40_for_vcpu_0(&vm).take_kicks();
    let _ = vm.vgic.take_hint(0);
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    // GICD_ISPENDR1 = x0: SPI 40 pending.
    offered_access(GICD_IPA + 0x204, 0, true, Some(1 << 8));
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(offered(), [VectorAnswer::Answered]);
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    assert_eq!(vgic::IchLr(lr0[1]).decode().vintid, IntId(40), "planned before the next entry: {lr0:x?}");
}

/// An SGI sent through ICC_SGI1R_EL1 is answered in the vector: its target has it pending
/// and looks at it, and the guest goes on. One the vCPU sends itself reaches the run loop
/// before the guest goes on, and the next entry shows it. Other system registers are left to
/// the run loop.
#[test]
fn an_sgi_sent_through_the_cpu_interface_is_answered_in_the_vector() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    {
        // Group 1 enabled; SGIs 1 and 2 of both vCPUs in Group 1 and enabled (their SGI frames).
        let mut vgic = vm.vgic.lock();
        vgic.write(0, 0x000, 4, 0b11).unwrap();
        for frame in [0, 0x2_0000] {
            vgic.write_redistributor(frame + 0x1_0080, 4, 0b110).unwrap();
            vgic.write_redistributor(frame + 0x1_0100, 4, 0b110).unwrap();
        }
        let _ = vgic.take_kicks();
    }
    let _ = (vm.vgic.take_hint(0), vm.vgic.take_hint(1));
    LR0_AT_ENTRY.with(|e| e.borrow_mut().clear());
    let sgi1r = |rt| SysRegAccess { op0: 3, op1: 0, crn: 12, crm: 11, op2: 5, rt, is_read: false };
    // ICC_SGI1R_EL1 = x0: SGI 1 to vCPU 1 (TargetList bit 1), then SGI 2 to vCPU 0 itself.
    step(
        GuestExit::Sync,
        Some((Trap::SystemRegister { access: sgi1r(0), iss: sgi1r(0).iss() }, 0x18)),
        Some(1 << 24 | 0b10),
    );
    offer_last();
    step(
        GuestExit::Sync,
        Some((Trap::SystemRegister { access: sgi1r(0), iss: sgi1r(0).iss() }, 0x18)),
        Some(2 << 24 | 0b01),
    );
    offer_last();
    // MIDR_EL1 read into x3.
    let midr = SysRegAccess { op0: 3, op1: 0, crn: 0, crm: 0, op2: 0, rt: 3, is_read: true };
    step(GuestExit::Sync, Some((Trap::SystemRegister { access: midr, iss: midr.iss() }, 0x18)), None);
    offer_last();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(offered(), [VectorAnswer::Resume, VectorAnswer::Answered, VectorAnswer::NotHere]);
    assert!(vm.vgic.lock().interrupt(1, IntId(1)).unwrap().pending, "vCPU 1 has SGI 1");
    assert!(vm.vgic.take_hint(1), "and looks at it");
    let lr0 = LR0_AT_ENTRY.with(|e| std::mem::take(&mut *e.borrow_mut()));
    assert_eq!(vgic::IchLr(lr0[1]).decode().vintid, IntId(2), "the SGI to itself, shown at the next entry: {lr0:x?}");
    let e = entries();
    assert_eq!(e[1].0, e[0].0 + 8, "past both writes");
}

/// SGI 1 of vCPU 0 in Group 1 and enabled, posted to it by vCPU 1: hinted as a post alone.
fn sgi_1_posted_to_vcpu_0(vm: &Vm<FakeEnv>) {
    {
        let mut vgic = vm.vgic.lock();
        vgic.write(0, 0x000, 4, 0b11).unwrap();
        vgic.write_redistributor(0x1_0080, 4, 0b10).unwrap();
        vgic.write_redistributor(0x1_0100, 4, 0b10).unwrap();
        let _ = vgic.take_kicks();
    }
    let _ = vm.vgic.take_hint(0);
    assert!(vm.vgic.post_sgi(1, 0, 1));
    assert_eq!(vm.vgic.hint_of(0), crate::shared_vgic::HINT_POSTED);
}

fn published() -> Vec<Published> {
    PUBLISHED.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// The list register the vector may write again (docs/vgic.md, "The same SGI shown again
/// in the vector") is published with the plan that wrote it, and withdrawn by the first
/// take-back that changes it: one that reads it active, one that finds it emptied. A stale
/// one would have the vector write a register the vGIC no longer holds as it says.
#[test]
fn the_register_the_vector_may_write_again_is_published_with_its_plan_and_withdrawn_by_a_take_back() {
    for completed in [false, true] {
        let hypervisor = hypervisor();
        let vm = hypervisor.vm(0).unwrap();
        sgi_1_posted_to_vcpu_0(&vm);
        published();
        // The guest takes SGI 1 (and completes it, or not), then makes a call.
        hvc(SMCCC_VERSION);
        last_step(|s| (s.ack, s.deactivate) = (true, completed));
        hvc(PSCI_SYSTEM_OFF);
        assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
        let p = published();
        let (first, raw) = (p[0], p[0].1.map(|(_, raw)| raw));
        assert!(first.0, "{p:x?}");
        assert_eq!(first.1.map(|(n, _)| n), Some(0), "LR 0, as the plan wrote it: {p:x?}");
        let shown = vgic::IchLr(raw.unwrap()).decode();
        assert_eq!((shown.vintid, shown.state), (IntId(1), vgic::LrState::Pending));
        assert_eq!(p[1], (!completed, None), "withdrawn by the take-back (completed: {completed}): {p:x?}");
    }
}

/// An SGI answered in the vector while the sender holds a list register loses nothing of
/// it: what the guest did to that interrupt (it acknowledged it) is taken back at its next
/// exit to the run loop.
#[test]
fn an_sgi_answered_in_the_vector_while_the_sender_holds_a_list_register_loses_nothing_of_it() {
    let hypervisor = hypervisor();
    let vm = hypervisor.vm(0).unwrap();
    {
        // SPI 40 raised; SGI 1 of vCPU 1 in Group 1 and enabled.
        let mut vgic = spi_40_for_vcpu_0(&vm);
        vgic.write_redistributor(0x2_0000 + 0x1_0080, 4, 0b10).unwrap();
        vgic.write_redistributor(0x2_0000 + 0x1_0100, 4, 0b10).unwrap();
        vgic.inject_edge(IntId(40), 0).unwrap();
        let _ = vgic.take_kicks();
    }
    vm.vgic.hint(1);
    let sgi1r = SysRegAccess { op0: 3, op1: 0, crn: 12, crm: 11, op2: 5, rt: 0, is_read: false };
    // The guest acknowledges SPI 40, then sends SGI 1 to vCPU 1.
    step(GuestExit::Sync, Some((Trap::SystemRegister { access: sgi1r, iss: sgi1r.iss() }, 0x18)), Some(1 << 24 | 0b10));
    offer_last();
    last_step(|s| s.ack = true);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(offered(), [VectorAnswer::Resume]);
    let spi = vm.vgic.lock().interrupt(0, IntId(40)).unwrap();
    assert!(!spi.pending && spi.active, "the acknowledgement was taken back: {spi:?}");
    assert!(vm.vgic.lock().interrupt(1, IntId(1)).unwrap().pending, "vCPU 1 has SGI 1");
}

/// An exit answered in the vector after which this CPU's scheduler is to be asked again (a
/// vCPU of this CPU woken, which asks it without a kick) goes on to the run loop when the
/// vCPU shares its CPU, which asks the scheduler; a pinned vCPU's goes on in the guest.
#[test]
fn a_shared_vcpu_s_exit_that_asks_its_scheduler_again_reaches_the_run_loop() {
    for pinned in [false, true] {
        let hypervisor = hypervisor();
        offered_access(GICD_IPA + 0x004, 0, false, None);
        last_step(|s| s.reschedule = true);
        offered_access(GICD_IPA + 0x004, 0, false, None);
        hvc(PSCI_SYSTEM_OFF);
        assert_eq!(run(hypervisor, pinned), VcpuExit::VmEnded(EndReason::PoweredOff));
        // The second read resumes: the run loop took the request (left there, it would
        // send every later exit to the run loop); a pinned vCPU's never asks.
        let first = if pinned { VectorAnswer::Resume } else { VectorAnswer::Answered };
        assert_eq!(offered(), [first, VectorAnswer::Resume], "pinned {pinned}");
        let _ = hypervisor.scheduling.take_reschedule(1);
    }
}

// Direct injection through the board's GICv4.0 (crate::direct_lpis): a vCPU's vPE is
// resident from its entry until it leaves the CPU, and not while it waits off the CPU, so
// that a vLPI for it rings its doorbell.

/// The booted fake hypervisor with a GICv4.0, VM 0 (2 vCPUs sharing CPU 1) given an ITS
/// and attached to the board, as the fake CPU's.
fn hypervisor_with_gicv4() -> &'static Hypervisor<FakeArch> {
    FakeArch::give_gicv4(true);
    let hypervisor = as_the_fake_cpu_s(booted_with_its());
    let attached = FakeArch::take_vlpi_events();
    assert_eq!(attached, ["attach vm0 2 vcpus cpu0"], "attached at creation, on the boot CPU");
    hypervisor
}

#[test]
fn a_vcpu_s_vpe_is_resident_from_its_entry_until_it_leaves_its_cpu() {
    let hypervisor = hypervisor_with_gicv4();
    hvc(SMCCC_VERSION);
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, true), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(
        FakeArch::take_vlpi_events(),
        ["resident vcpu0 cpu1", "not resident cpu1"],
        "resident across its exits: a hypercall's costs nothing more"
    );
    FakeArch::give_gicv4(false);
}

#[test]
fn a_shared_vcpu_waits_with_its_vpe_not_resident_so_its_doorbell_wakes_it() {
    let hypervisor = hypervisor_with_gicv4();
    FakeArch::set_pending_last(false);
    wfi();
    assert_eq!(run(hypervisor, false), VcpuExit::Descheduled);
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Blocked), "no vLPI was pending");
    assert_eq!(FakeArch::take_vlpi_events(), ["resident vcpu0 cpu1", "not resident cpu1", "not resident cpu1"]);
    // Its doorbell (LPI 8192 + its vPE), taken on an idle CPU: it runs again, with nothing
    // made pending in the vGIC (the vLPI is in the vPE's table).
    take_events();
    pend(&[8192]);
    hypervisor.take_interrupts(None);
    assert_eq!(take_events(), ["drop priority 8192"], "an LPI has no active state to end");
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Runnable));
    let vm = hypervisor.vm(0).unwrap();
    assert!(!vm.vgic.lock().has_pending(0));
    assert_eq!(vm.vgic.doorbells(), 1, "counted, for the line at the VM's end");
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(FakeArch::take_vlpi_events(), ["resident vcpu0 cpu1", "not resident cpu1"]);
    FakeArch::give_gicv4(false);
}

#[test]
fn a_shared_vcpu_with_a_vlpi_pending_when_it_waits_does_not_wait() {
    let hypervisor = hypervisor_with_gicv4();
    FakeArch::set_pending_last(true);
    wfi();
    hvc(PSCI_SYSTEM_OFF);
    assert_eq!(run(hypervisor, false), VcpuExit::VmEnded(EndReason::PoweredOff));
    assert_eq!(
        FakeArch::take_vlpi_events(),
        ["resident vcpu0 cpu1", "not resident cpu1", "resident vcpu0 cpu1", "not resident cpu1"],
        "made resident again at once: the vLPI is delivered when it enters"
    );
    assert_eq!(entries().len(), 2, "it entered the guest again after its WFI");
    FakeArch::set_pending_last(false);
    FakeArch::give_gicv4(false);
}
