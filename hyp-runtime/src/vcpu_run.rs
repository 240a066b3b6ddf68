//! A vCPU on a physical CPU: the loop that enters the guest, answers each exit and decides
//! when the vCPU leaves the CPU (docs/architecture.md, "The path of an exit"). What names
//! registers, entering the guest, reading its syndrome, injecting an exception, saving what
//! a vCPU leaves in the CPU, is the architecture's, behind [`VcpuCpu`]; what to do with an
//! exit is decided here once for every architecture.
//!
//! Only a vCPU that shares its CPU is ever descheduled (its WFI and WFE trap); a pinned
//! vCPU's state stays in its CPU and its exits never reach the scheduler.

use alloc::boxed::Box;
use core::borrow::Borrow;
use core::marker::PhantomData;
use core::sync::atomic::{fence, Ordering};

use hyp_core::coprocessor::RegisterPart;
use hyp_core::debug_registers::DebugRegisters;
use hyp_core::exit::{self, Incident, IncidentLog, InjectedException, Outcome, SysRegEnv};
use hyp_core::exit_stats::{ExitCounts, ExitReason};
use hyp_core::guest_map::VTIMER_PPI;
use hyp_core::image::ExecutionState;
use hyp_core::smccc;
use hyp_core::sync::Mutex;
use hyp_core::syndrome::{ExceptionClass, Syndrome};
use hyp_core::sysreg::{IdRegisters, SgiGenerationRegister, VmControlRegister, VmFeatures};
use hyp_core::trap::{DecodedExit, GuestRegisters};
use hyp_core::vcpu_power::{EndReason, VcpuStart};
use sched::Decision;
use vgic::{IntId, LineSampler, ListRegisters, RetiredLines, SgiRegister};

use crate::arch::Arch;
use crate::hypervisor::interrupts::{Acknowledged, ExitInterrupt};
use crate::hypervisor::{Hypervisor, VcpuExit, Virtualization};
use crate::scheduling::vcpu_ref;
use crate::shared_vgic::VgicHandle;
use crate::tlb::OnEntry;
use crate::virtio::slot::VmEnv;
use crate::vm::{CallEffect, Vm};

pub mod in_vector;
pub use in_vector::{InVector, VectorAnswer};

/// The list-register state of a vCPU the VM does not have (the vGIC refuses it): never
/// reached, since a VM runs only its own vCPUs.
static NO_LISTS: Mutex<vgic::VcpuInterfaceState> = Mutex::new(vgic::VcpuInterfaceState::EMPTY);

/// How the guest came out.
pub enum GuestExit {
    /// A synchronous exception: the syndrome registers say which ([`VcpuCpu::read_trap`]).
    Sync,
    /// A physical interrupt (IRQ or FIQ): the GIC says which.
    Interrupt,
    /// An SError: the VM is stopped.
    SError,
    /// A synchronous exception the vector answered itself, sent on for the run loop to
    /// look before the guest goes on (in_vector): the outcome it left is carried out.
    Answered,
    /// An exit the architecture's entry code does not know: the VM is stopped.
    Unknown(u64),
}

/// A trapped set/way cache maintenance instruction, or a write to a VM control register
/// while set/way maintenance is watched (hyp_core::set_way).
#[derive(Clone, Copy, Debug)]
pub enum CacheMaintenance {
    SetWay,
    /// `value` written into `part` of `register` (an AArch32 view may cover half of it).
    ControlWrite {
        register: VmControlRegister,
        part: RegisterPart,
        value: u64,
    },
}

/// A descheduled vCPU: its general registers, what it left in the CPU, and the last
/// unknown function it called (a guest repeating it is logged once).
pub struct Resume<C: VcpuCpu> {
    registers: C::Registers,
    saved: C::Saved,
    last_unknown: Option<u32>,
}

/// Where a VM keeps each descheduled vCPU's [`Resume`], by vCPU.
pub type ResumeSlots<C> = Box<[Mutex<Option<Box<Resume<C>>>>]>;

/// What a vCPU holds of its physical CPU while it runs there, as the architecture keeps it
/// (its traps, its list registers, its debug registers loaded or not), and the operations
/// on it that name registers.
pub trait VcpuCpu: Sized {
    type V: Virtualization;
    /// The general registers, PC and processor state, as the guest's exit saved them.
    type Registers: GuestRegisters + Send;
    /// The registers of an AArch32 guest as its syndrome names them.
    type Aarch32<'a>: GuestRegisters
    where
        Self: 'a;
    /// What a descheduled vCPU leaves in the CPU beyond its general registers.
    type Saved: Send;
    /// This CPU's list registers.
    type ListRegisters: ListRegisters;
    /// The ID registers of this CPU, which a VM sees sanitised (hyp_core::sysreg).
    type IdRegisters: IdRegisters + Default;
    /// A synchronous exit as the syndrome registers describe it: a few words, passed by
    /// value to the out-of-line AArch32 path (by reference, the exit path stored them on
    /// the stack on every exit).
    type Trap: Copy;

    /// The state every CPU shares.
    fn hypervisor() -> &'static Hypervisor<Self::V>;
    /// Each descheduled vCPU's state, kept in the architecture's VM.
    fn resume_slots(vm: &<Self::V as Virtualization>::Vm) -> &ResumeSlots<Self>;
    /// vCPU `vcpu` of `vm` comes onto this CPU: the VM's translation regime, its traps
    /// (WFI and WFE trap if it `shares` the CPU), its identity and its counter offset.
    /// `resumed` is what it left when it was descheduled, if it was. `tlb` is what this
    /// CPU's TLB needs first (crate::tlb decided it), carried out once the VM's VMID is in
    /// VTTBR; nothing else here invalidates the TLB.
    fn enter(
        vm: &<Self::V as Virtualization>::Vm,
        vcpu: usize,
        shares: bool,
        resumed: Option<&Self::Saved>,
        tlb: OnEntry,
    ) -> Self;
    /// Whether WFI traps though the vCPU does not share its CPU (one that does always traps
    /// it): while its VM's devices have work left for later, so a guest that goes idle makes
    /// the exit that work goes on at (docs/virtio.md, "Locks"); and on a GICv2 after its
    /// timer's interrupt, so a guest that goes idle with its timer due is seen
    /// (`timer_due_at_wait`); lifted when neither holds. Changes the trap only when `trap`
    /// differs from what it is.
    fn trap_pinned_wfi(&mut self, trap: bool);
    /// Puts back what the vCPU left in the CPU.
    fn restore(&mut self, saved: &Self::Saved);
    /// A fresh start: every register the guest can read as at reset, so nothing of the
    /// context that ran here before shows.
    fn restore_at_reset(&mut self);
    /// The registers of a vCPU of a VM whose kernel runs in `state`, starting as `start`
    /// says, interrupts masked: the kernel's boot protocol (its device tree in x0, or in r2
    /// with r0 = 0 and r1 = ~0), or a PSCI CPU_ON's entry (the context ID in x0 or r0).
    fn fresh_registers(state: ExecutionState, start: VcpuStart) -> Self::Registers;
    /// Whether the guest executes in AArch32 now (its exits are then decoded by
    /// hyp_core::trap::aarch32 and handled over [`VcpuCpu::aarch32`]).
    fn in_aarch32(registers: &Self::Registers) -> bool;
    /// Every guest of this image runs in AArch32 (an ARMv7 CPU).
    const ONLY_AARCH32: bool;
    /// The registers of a guest in AArch32.
    fn aarch32(registers: &mut Self::Registers) -> Self::Aarch32<'_>;
    /// Takes out of the CPU what the vCPU leaves in it (stopping its timer).
    fn save(&mut self) -> Self::Saved;
    /// The CPU leaves the VM: hardware debug registers cleared, the virtual timer's PPI not
    /// left active, no stage-2 translation regime.
    fn leave(&mut self);
    fn list_registers(&mut self) -> &mut Self::ListRegisters;
    /// Whether the image's exception vector answers exits itself (in_vector) and so
    /// `run_guest` can return `GuestExit::Answered`. An image whose vector does not compiles
    /// the run loop without that path: present but never taken, it cost the ARMv7 image's
    /// trapped MMIO accesses 17 instructions in the loop's layout.
    const ANSWERS_IN_VECTOR: bool;
    /// Runs the guest until it exits to the run loop. `here` is what the image's exception
    /// vector needs to answer an exit itself meanwhile (in_vector); an image whose vector
    /// answers none ignores it.
    fn run_guest(&mut self, registers: &mut Self::Registers, here: &InVector<'_, Self>) -> GuestExit;
    /// The syndrome registers of the exit that just happened on this CPU. Read where they
    /// are used, after the list registers are taken back: read ahead, they were kept on the
    /// stack across that and cost an exit 7 instructions.
    fn read_trap() -> Self::Trap;
    /// The exit's syndrome, in the layout ESR_EL2 and HSR share.
    fn syndrome(trap: &Self::Trap) -> Syndrome;
    /// The exit decoded into an arch-neutral trap (hyp_core::trap) by the decoder of the
    /// state the image's guests mostly run in (AArch64 on ARMv8, AArch32 on ARMv7; the
    /// registers give the guest's CPSR). Decoded where it is handled, so the compiler fuses
    /// the two (decoded ahead and kept, it cost a hypercall 30 instructions).
    fn decode(trap: &Self::Trap, registers: &Self::Registers) -> DecodedExit;
    /// The exit of a guest in AArch32 on an image whose guests may run in either state.
    fn decode_aarch32(trap: &Self::Trap, registers: &Self::Registers) -> DecodedExit {
        Self::decode(trap, registers)
    }
    /// The vCPU's debug registers (its accesses to them trap into this copy).
    fn debug_registers(&mut self) -> &mut DebugRegisters;
    /// The hardware debug registers follow the vCPU's copy (loaded while something of it
    /// could fire).
    fn follow_debug(&mut self);
    /// Carries out a trapped cache maintenance step (hyp_core::set_way); the instruction of
    /// `bytes` bytes completes when it is the last step.
    fn cache_maintenance(
        &mut self,
        vm: &<Self::V as Virtualization>::Vm,
        registers: &mut Self::Registers,
        bytes: u8,
        trap: CacheMaintenance,
    );
    /// Delivers `exception` to the guest's own exception vector.
    fn inject(&mut self, registers: &mut Self::Registers, exception: InjectedException, bytes: u8);
    /// The virtual timer's deadline in system counter ticks, if it is enabled and unmasked.
    fn timer_deadline(vm: &<Self::V as Virtualization>::Vm) -> Option<u64>;
    /// Whether the virtual timer's output is asserted now.
    fn timer_line() -> bool;
    /// The board's INTID of the virtual timer's PPI, the physical interrupt behind the
    /// guest's (hyp_core::guest_map::VTIMER_PPI); the device tree says which.
    fn timer_ppi() -> u32;
    /// Holds the virtual timer's physical PPI active on CPU `cpu` (or not).
    fn set_timer_ppi_active(cpu: usize, active: bool);
    /// A hardware-mapped interrupt the guest will not deactivate is deactivated here.
    fn deactivate(physical: IntId, cpu: usize);
    /// What the image's exception vector needs to answer this vCPU's exits itself: its
    /// exit counters and its VM's vGIC (its control words, vgic::ControlWords, and the SGIs
    /// posted to its vCPUs, `VgicHandle::post_sgi`), which outlive its stay on this CPU
    /// (`leave` forgets them), the vCPU and the CPU, and the function it was last told was
    /// unknown (hyp_core::smccc::answered_in_vector). An image whose vector answers nothing
    /// ignores it.
    fn vector_calls(
        &mut self,
        _exits: &ExitCounts,
        _vgic: &VgicHandle<Self::V>,
        _at: (usize, usize),
        _last_unknown: Option<u32>,
        _kick: VectorKick<'_>,
    ) {
    }
    /// The vCPU on this CPU was just told that `function` is unknown (`vector_calls`).
    fn vector_unknown_call(_function: u32) {}
    /// Whether the vCPU on this CPU holds list registers: while it does, every exit goes to
    /// the run loop, which samples the lines of the level interrupts in them (a guest that
    /// turned its timer off and made a call expects its interrupt gone). And the list
    /// register the vector may write again when the SGI it showed comes back posted
    /// (vgic::Distributor::sgi_to_show_again), until the next exit to the run loop.
    fn vector_list_registers(&mut self, _in_use: bool, _show_again: Option<(usize, u64)>) {}
}

/// What the vector checks before it takes a kick for a posted SGI itself, as the run loop
/// checks them before each entry (docs/vgic.md, "The same SGI shown again in the vector"):
/// the VM's end and its devices' work left for later; a vCPU that shares its CPU is not
/// offered (its scheduler's requests come by kicks too).
#[derive(Clone, Copy)]
pub struct VectorKick<'a> {
    pub ending: &'a core::sync::atomic::AtomicBool,
    pub device_work: &'a core::sync::atomic::AtomicBool,
    pub shared: bool,
}

/// The list-register state the vector works from, published after a plan (under the VM's
/// lock, whose distributor `sgi_to_show_again` reads). Returns whether the vCPU holds list
/// registers.
#[inline(always)]
fn publish_lists<C: VcpuCpu>(
    here: &mut C,
    vgic: &vgic::Distributor,
    vcpu: usize,
    lists: &vgic::VcpuInterfaceState,
) -> bool {
    let in_use = lists.in_use() > 0;
    let again = if C::ANSWERS_IN_VECTOR && in_use { vgic.sgi_to_show_again(vcpu, lists) } else { None };
    here.vector_list_registers(in_use, again);
    in_use
}

/// After any other step that changed `lists` (a take-back, the tick's): whether the vCPU
/// holds list registers, and no register the vector may write again (withdrawing costs the
/// tick nothing it need not pay; only a plan offers one). Returns whether it holds any.
#[inline(always)]
fn withdraw_lists<C: VcpuCpu>(here: &mut C, lists: &vgic::VcpuInterfaceState) -> bool {
    let in_use = lists.in_use() > 0;
    here.vector_list_registers(in_use, None);
    in_use
}

/// Runs vCPU `vcpu` of `vm` on this CPU (`cpu`) as the scheduler decided, from where it left
/// off or from its PSCI entry point, until it leaves the CPU.
#[inline]
pub fn run_vcpu<C: VcpuCpu>(
    vm: &<C::V as Virtualization>::Vm,
    vcpu: usize,
    cpu: usize,
    decision: &Decision,
) -> VcpuExit {
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    let hypervisor = C::hypervisor();
    core.vgic.running_on[vcpu].store(cpu, Ordering::Release);
    let resumed = C::resume_slots(vm).get(vcpu).and_then(|s| s.lock().take());
    let shared = decision.trap_wfi;
    // Another vCPU of the VM may have left its stage-1 translations in this CPU's TLB.
    let tlb = core.stage1.enter(cpu, vcpu);
    let mut here = C::enter(vm, vcpu, shared, resumed.as_ref().map(|r| &r.saved), tlb);
    // Its vPE resident here until it leaves the CPU (crate::direct_lpis).
    if let Some((board, direct)) = core.vgic.board() {
        board.make_resident(direct, vcpu, cpu);
    }
    let (mut registers, mut last_unknown) = match resumed {
        Some(resume) => {
            here.restore(&resume.saved);
            // Its list registers went back into the vGIC: planned again before entry.
            core.vgic.hint(1 << vcpu);
            (resume.registers, resume.last_unknown)
        }
        None => {
            let Some(start) = core.power.lock().started(vcpu) else {
                return stop(vm, vcpu, &mut here);
            };
            if vcpu == 0 {
                let (entry, state) = (start.entry, core.execution_state());
                // Within the VM's limit: after SYSTEM_RESET the guest asked for it.
                core.log_caused(vcpu, format_args!("starting at IPA {entry:#x} ({state:?})"));
                route_passthrough::<C>(core, vcpu, cpu);
            }
            here.restore_at_reset();
            (C::fresh_registers(core.execution_state(), start), None)
        }
    };
    here.follow_debug();
    hypervisor.scheduling.program_timer(cpu, decision.until);
    let no_counts = ExitCounts::default();
    let exits = core.exits.get(vcpu).unwrap_or(&no_counts);
    let kick = VectorKick { ending: core.ending_flag(), device_work: &core.device_work, shared };
    here.vector_calls(exits, &core.vgic, (vcpu, cpu), last_unknown, kick);
    // The guest's virtual timer PPI is backed by the physical one, deactivated by the guest.
    let _ = core.vgic.lock().set_hw(IntId(VTIMER_PPI), vcpu, Some(IntId(C::timer_ppi())));
    let in_vector = InVector::<C> { vm, vcpu, cpu, shared, exits, outcome: core::cell::Cell::new(None) };
    load_timer_line::<C>(core, vcpu, cpu);
    // Whether this vCPU holds list registers (then they are taken back on every exit),
    // and whether what came back changed (then they are planned again before entry).
    let (mut lrs_in_use, mut lrs_changed) = (false, false);
    // Whether its virtual timer fired at the last exit and the tick was not shown in one
    // step: the line goes into the vGIC with the next plan, after the take-back of the
    // deactivation that dropped it.
    let mut timer_fired = false;
    // Whether a pinned vCPU of a GICv2 VM has its WFI trapped for its timer
    // (`timer_due_at_wait`): from its timer's interrupt until a WFI finds the timer not due.
    let mut watch_timer = false;
    // Whether the last exit left its list registers to the next one (a watched WFI that
    // found the timer not due): the record is then the exit before's, and a plan before
    // the next exit takes them back first.
    let mut take_back_deferred = false;
    loop {
        if core.is_ending() {
            return stop(vm, vcpu, &mut here);
        }
        if core.device_work.load(Ordering::Relaxed) && core.device_work.swap(false, Ordering::AcqRel) {
            core.continue_device_work();
            // A pinned vCPU's guest idle in an untrapped WFI makes no exit until its next
            // interrupt, which an idle kernel may not have for a long time: while work is
            // left its WFI traps, and each trap goes on with a budget of it.
            here.trap_pinned_wfi(core.device_work.load(Ordering::Relaxed) || watch_timer);
        }
        // The common case, nothing in flight and nothing new: one load, no lock. The hint
        // is taken whatever else asks for a plan, or the next entry would plan again.
        let hinted = core.vgic.take_hint(vcpu);
        if hinted && core::mem::take(&mut take_back_deferred) {
            take_back_after_exit::<C>(core, vcpu, cpu, &mut here, &mut lrs_changed, &mut lrs_in_use);
        }
        if lrs_changed || timer_fired || hinted {
            // The vCPU's own list-register state, then the VM's vGIC (shared_vgic, "Locks").
            let mut lists = core.vgic.lists.get(vcpu).unwrap_or(&NO_LISTS).lock();
            let mut vgic = core.vgic.lock();
            if core::mem::take(&mut timer_fired) {
                let _ = vgic.set_level(IntId(VTIMER_PPI), vcpu, true);
            }
            let _ = vgic.flush_to_hw(vcpu, &mut lists, here.list_registers());
            lrs_in_use = publish_lists(&mut here, &vgic, vcpu, &lists);
            // The timer's kick is this vCPU's, which is planning now; a spill's is another's.
            let others = others_kicked::<C::V>(&mut vgic, vcpu);
            drop(vgic);
            drop(lists);
            kick_others(core, others);
        }
        let exit_kind = here.run_guest(&mut registers, &in_vector);
        lrs_changed = false;
        // An interrupt exit takes its list registers back in its arm below. A WFI watched
        // for the timer (`timer_due_at_wait`) that finds it not due needs nothing of them
        // unless something asks for a plan before the next exit (`take_back_deferred`):
        // the one the guest completed is taken back at the next exit (the next tick's, in
        // one step), as when the WFI does not trap.
        take_back_deferred = false;
        if lrs_in_use && !matches!(exit_kind, GuestExit::Interrupt) {
            if watch_timer && wfx_with_timer_low::<C>(&exit_kind) {
                take_back_deferred = true;
            } else {
                take_back_after_exit::<C>(core, vcpu, cpu, &mut here, &mut lrs_changed, &mut lrs_in_use);
            }
        }
        match exit_kind {
            GuestExit::Sync => {
                let trap = C::read_trap();
                let syndrome = C::syndrome(&trap);
                exits.record_sync(syndrome);
                // A WFI's answer decided whether the next one traps for the timer.
                if watch_timer && syndrome.class() == ExceptionClass::WFX {
                    watch_timer = C::timer_line();
                }
                // WFE (ISS.TI = 1) of a shared vCPU: its turn ends (lock-holder preemption).
                if shared && syndrome.class() == ExceptionClass::WFX && syndrome.iss() & 0b11 == 1 {
                    hypervisor.scheduling.yield_now(cpu, vcpu_ref(core.id, vcpu));
                }
                // Each state's exit is decoded, handled and answered on its own path, so
                // the three fuse and a hypercall's answer is a jump back to the guest; on
                // an image whose guests run mostly in AArch64, the AArch32 path is out of
                // line. Even so, that path costs the AArch64 one 30 to 50 instructions in
                // this function's layout (docs/performance.md, "Current figures").
                let leave = if C::ONLY_AARCH32 || !C::in_aarch32(&registers) {
                    let outcome = {
                        let mut env = VcpuEnv::<C::IdRegisters, _, _>::new(
                            core,
                            vcpu,
                            here.debug_registers(),
                            &mut last_unknown,
                            C::vector_unknown_call,
                        );
                        // Decoded right where it is handled: decoded ahead, the decoded
                        // exit was built and matched again.
                        let exit = C::decode(&trap, &registers);
                        if C::ONLY_AARCH32 {
                            exit::handle(&exit, &mut C::aarch32(&mut registers), vcpu, &mut core.mmio(), &mut env)
                        } else {
                            exit::handle(&exit, &mut registers, vcpu, &mut core.mmio(), &mut env)
                        }
                    };
                    // The common answer first: the guest goes on. `Exiting` is built only past
                    // it: built ahead, it was stored on the stack on every exit (the AArch32
                    // path below takes its address).
                    if let Outcome::Resume = outcome {
                        None
                    } else {
                        let exiting = Exiting { vm, vcpu, cpu, shared };
                        answer(&exiting, &mut here, &mut registers, outcome, instruction_bytes(syndrome))
                    }
                } else {
                    let exiting = Exiting { vm, vcpu, cpu, shared };
                    answer_aarch32(&exiting, trap, &mut here, &mut registers, &mut last_unknown)
                };
                match leave {
                    None => {}
                    Some(Leave::Deschedule) => return deschedule(vm, vcpu, &mut here, registers, last_unknown),
                    Some(Leave::Exit(exit)) => return exit,
                }
            }
            GuestExit::Answered if C::ANSWERS_IN_VECTOR => {
                let exiting = Exiting { vm, vcpu, cpu, shared };
                match answered_in_vector(&exiting, &in_vector, &mut here, &mut registers) {
                    None => {}
                    Some(Leave::Deschedule) => return deschedule(vm, vcpu, &mut here, registers, last_unknown),
                    Some(Leave::Exit(exit)) => return exit,
                }
            }
            // Never returned where the vector answers nothing.
            GuestExit::Answered => {}
            // Its interrupt (a kick SGI, the maintenance or timer interrupt, console input, a
            // passthrough SPI) comes first: any but a kick or the virtual timer takes the list
            // registers back before it is handled, and the timer's tick takes them back in the
            // same step as it is shown where it can (`tick_in_one_step`).
            GuestExit::Interrupt => {
                let mut owed = lrs_in_use;
                match hypervisor.take_exit_interrupt((vm, vcpu)) {
                    ExitInterrupt::Taken => {}
                    ExitInterrupt::VirtualTimer => {
                        match tick_in_one_step::<C>(core, vcpu, &mut here, !owed) {
                            Some(in_use) => (lrs_in_use, owed) = (in_use, false),
                            // The line goes into the vGIC with the next plan, after the take-back.
                            None => timer_fired = true,
                        }
                        // Its next WFI is seen (`timer_due_at_wait`).
                        if !shared && !core.gic_v3 {
                            watch_timer = true;
                            here.trap_pinned_wfi(true);
                        }
                    }
                    ExitInterrupt::Other(interrupt) => {
                        let exiting = Exiting { vm, vcpu, cpu, shared };
                        take_other_interrupt(&exiting, &mut here, owed, &mut lrs_changed, &mut lrs_in_use, interrupt);
                        owed = false;
                    }
                }
                if owed {
                    match take_back_with_plan::<C>(core, vcpu, &mut here) {
                        Some(in_use) => lrs_in_use = in_use,
                        None => {
                            take_back_after_exit::<C>(core, vcpu, cpu, &mut here, &mut lrs_changed, &mut lrs_in_use)
                        }
                    }
                }
            }
            GuestExit::SError => {
                let syndrome = C::syndrome(&C::read_trap()).0;
                core.count_exit(vcpu, ExitReason::SError);
                crate::vm_log!(
                    <C::V as Virtualization>::Env,
                    core,
                    vcpu,
                    "SError (syndrome {syndrome:#x}): the VM is stopped"
                );
                return crash(vm, vcpu, &mut here);
            }
            GuestExit::Unknown(kind) => {
                crate::vm_log!(
                    <C::V as Virtualization>::Env,
                    core,
                    vcpu,
                    "exit of unknown kind {kind}: the VM is stopped"
                );
                return crash(vm, vcpu, &mut here);
            }
        }
        // A shared vCPU's slice ended, or another vCPU of this CPU became runnable.
        if shared && hypervisor.scheduling.take_reschedule(cpu) {
            let next = hypervisor.scheduling.tick(cpu);
            if next.run != Some(vcpu_ref(core.id, vcpu)) {
                return deschedule(vm, vcpu, &mut here, registers, last_unknown);
            }
            hypervisor.scheduling.program_timer(cpu, next.until);
        }
    }
}

/// The vCPU whose synchronous exit is being answered, and how it holds its CPU.
struct Exiting<'a, C: VcpuCpu> {
    vm: &'a <C::V as Virtualization>::Vm,
    vcpu: usize,
    cpu: usize,
    shared: bool,
}

/// How a vCPU's run on this CPU ends after an exit, if it does.
enum Leave {
    /// It waits off the CPU (its registers go with it).
    Deschedule,
    Exit(VcpuExit),
}

/// The length of the trapped instruction (ESR_EL2.IL, HSR.IL: the decoders' rule too).
fn instruction_bytes(syndrome: Syndrome) -> u8 {
    if syndrome.instruction_is_32bit() {
        4
    } else {
        2
    }
}

/// An exit of a guest in AArch32 on an image whose guests run mostly in AArch64: decoded,
/// handled over the AArch32 view of its registers and answered, out of line.
#[cold]
#[inline(never)]
fn answer_aarch32<C: VcpuCpu>(
    exiting: &Exiting<'_, C>,
    trap: C::Trap,
    here: &mut C,
    registers: &mut C::Registers,
    last_unknown: &mut Option<u32>,
) -> Option<Leave> {
    let core: &Vm<<C::V as Virtualization>::Env> = exiting.vm.borrow();
    let exit = C::decode_aarch32(&trap, registers);
    let outcome = {
        let mut env = VcpuEnv::<C::IdRegisters, _, _>::new(
            core,
            exiting.vcpu,
            here.debug_registers(),
            last_unknown,
            C::vector_unknown_call,
        );
        exit::handle(&exit, &mut C::aarch32(registers), exiting.vcpu, &mut core.mmio(), &mut env)
    };
    answer(exiting, here, registers, outcome, exit.instruction_bytes)
}

/// An exit the vector answered (in_vector): what it left to carry out (the guest's abort),
/// if anything. Out of line and cold: rare, and a second copy of `answer` inlined into the
/// run loop would only lengthen it.
#[cold]
#[inline(never)]
fn answered_in_vector<C: VcpuCpu>(
    exiting: &Exiting<'_, C>,
    in_vector: &InVector<'_, C>,
    here: &mut C,
    registers: &mut C::Registers,
) -> Option<Leave> {
    let (outcome, bytes) = in_vector.outcome.take()?;
    answer(exiting, here, registers, outcome, bytes)
}

/// Carries out what the handler of a synchronous exit decided; `bytes` is the trapped
/// instruction's length. Returns how the vCPU's run on this CPU ends, if it does.
#[inline(always)]
fn answer<C: VcpuCpu>(
    exiting: &Exiting<'_, C>,
    here: &mut C,
    registers: &mut C::Registers,
    outcome: Outcome,
    bytes: u8,
) -> Option<Leave> {
    let &Exiting { vm, vcpu, cpu, shared } = exiting;
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    let hypervisor = C::hypervisor();
    match outcome {
        // Unless an interrupt is pending or its timer is due, a shared vCPU waits off the
        // CPU, woken by an interrupt or by its virtual timer.
        // With device work left for later (`Vm::device_work`) the vCPU does not wait: the
        // run loop goes on with that work first.
        Outcome::WaitForInterrupt if shared && !core.device_work.load(Ordering::Relaxed) => {
            let timer = C::timer_deadline(vm);
            if timer.is_none_or(|deadline| deadline > C::V::now()) {
                let v = vcpu_ref(core.id, vcpu);
                let waiting = &core.vgic.waiting[vcpu];
                // Its vPE not resident while it waits, so a vLPI for it rings the doorbell; one
                // that came before is pending already (crate::direct_lpis).
                let direct = core.vgic.board();
                let vlpi_pending = direct.is_some_and(|(board, _)| board.make_non_resident(cpu));
                // The fence: `waiting` set before any posted SGI is looked for
                // (`VgicHandle::post_sgi`).
                let pending = || {
                    fence(Ordering::SeqCst);
                    vlpi_pending || core.vgic.lock().has_pending(vcpu)
                };
                if hypervisor.scheduling.block(v, waiting, pending) {
                    if let Some(deadline) = timer {
                        hypervisor.scheduling.wake_at(cpu, v, deadline);
                    }
                    return Some(Leave::Deschedule);
                }
                if let Some((board, direct)) = direct {
                    board.make_resident(direct, vcpu, cpu);
                }
            } else {
                // Its timer is due: the virtual timer's interrupt is taken from the timer's
                // line now, not left to the physical PPI, which QEMU's GICv2 does not
                // signal again when the guest's deactivation finds it pending once more
                // (docs/deploy-rpi4.md, "QEMU's GICv2 and a pinned vCPU"); on a GIC that
                // does, this only makes pending what the PPI would have.
                load_timer_line::<C>(core, vcpu, cpu);
            }
        }
        // Its WFI trapped for device work that another vCPU's exit finished, or after its
        // timer's interrupt on a GICv2: it no longer traps (`trap_pinned_wfi`), unless its
        // timer is due now.
        Outcome::WaitForInterrupt if !shared => {
            let due = timer_due_at_wait::<C>(core, vcpu, cpu);
            here.trap_pinned_wfi(due || core.device_work.load(Ordering::Relaxed))
        }
        Outcome::Resume | Outcome::WaitForInterrupt => {}
        Outcome::SetWay => here.cache_maintenance(vm, registers, bytes, CacheMaintenance::SetWay),
        Outcome::ControlWrite { register, part, value } => {
            here.cache_maintenance(vm, registers, bytes, CacheMaintenance::ControlWrite { register, part, value })
        }
        Outcome::DebugStateChanged => here.follow_debug(),
        Outcome::GenerateSgi { register, value } => generate_sgi(core, vcpu, register, value),
        Outcome::Deactivate { value } => deactivate_by_dir(core, vcpu, cpu, here, value),
        Outcome::InjectAbort { instruction: false, far, write } => {
            here.inject(registers, InjectedException::DataAbort { far, write }, bytes)
        }
        Outcome::InjectAbort { instruction: true, far, .. } => {
            here.inject(registers, InjectedException::InstructionAbort { far }, bytes)
        }
        Outcome::InjectUndefined => here.inject(registers, InjectedException::Undefined, bytes),
        Outcome::Call => return vm_call(vm, registers, vcpu, here).map(Leave::Exit),
    }
    None
}

/// The VM's passthrough SPIs are taken on this CPU (`cpu`, where vCPU `vcpu` starts) at the
/// hypervisor's priority and enabled. Guest routing (GICD_IROUTER, GICD_ITARGETSR) moves
/// only the virtual SPI: the physical one keeps coming here and is forwarded (a kick) to
/// whichever vCPU the guest chose.
fn route_passthrough<C: VcpuCpu>(vm: &Vm<<C::V as Virtualization>::Env>, vcpu: usize, cpu: usize) {
    for spi in &vm.passthrough_spis {
        C::V::enable_interrupt(spi.intid, cpu);
        vm.log_caused(
            vcpu,
            format_args!(
                "passthrough SPI INTID {} ({}) routed to cpu{cpu} and enabled",
                spi.intid,
                if spi.edge() { "edge" } else { "level" }
            ),
        );
    }
}

/// Whether the exit is a WFI or WFE with the virtual timer's line low: cold, taken only
/// while a pinned GICv2 vCPU's WFI is watched for its timer.
#[cold]
#[inline(never)]
fn wfx_with_timer_low<C: VcpuCpu>(exit: &GuestExit) -> bool {
    matches!(exit, GuestExit::Sync) && C::syndrome(&C::read_trap()).class() == ExceptionClass::WFX && !C::timer_line()
}

/// A pinned vCPU of a GICv2 VM waits (its WFI trapped after its timer's interrupt): if its
/// timer is due, its interrupt is made pending from the timer's line (`load_timer_line`),
/// as for a shared vCPU that waits. QEMU's GICv2 does not signal the physical PPI again
/// when the guest's deactivation, through the hardware-mapped list register, finds the
/// line still high (a deadline already past): untrapped, the guest's WFI waited for good
/// (docs/vgic.md, "QEMU's GICv2 and the timer of a pinned vCPU"). On a GIC that signals it
/// this costs the exit of the guest's first WFI after each timer interrupt.
fn timer_due_at_wait<C: VcpuCpu>(vm: &Vm<<C::V as Virtualization>::Env>, vcpu: usize, cpu: usize) -> bool {
    let due = !vm.gic_v3 && C::timer_line();
    if due {
        load_timer_line::<C>(vm, vcpu, cpu);
    }
    due
}

/// When the vCPU comes onto this CPU (its timer registers restored): the timer's line as
/// it is now goes into the vGIC (a stale level from before it left is dropped), and the
/// physical PPI is held active while the virtual one is active or pending, so it does not
/// fire at the hypervisor while the guest has it (the guest's deactivation reaches it).
fn load_timer_line<C: VcpuCpu>(vm: &Vm<<C::V as Virtualization>::Env>, vcpu: usize, cpu: usize) {
    let line = C::timer_line();
    let (active, others) = {
        let mut vgic = vm.vgic.lock();
        let _ = vgic.set_level(IntId(VTIMER_PPI), vcpu, line);
        // The kick it asks for is this vCPU's, which is hinted below if it needs to look.
        let others = others_kicked::<C::V>(&mut vgic, vcpu);
        (vgic.interrupt(vcpu, IntId(VTIMER_PPI)).is_ok_and(|s| s.active), others)
    };
    kick_others(vm, others);
    C::set_timer_ppi_active(cpu, active || line);
    if line {
        vm.vgic.hint(1 << vcpu);
    }
}

/// After an exit of a vCPU holding list registers (`lrs_in_use`): they are taken back,
/// `lrs_changed` says whether the next entry plans them again, and once the guest completed
/// everything it held the vector may answer calls again.
#[inline(always)]
fn take_back_after_exit<C: VcpuCpu>(
    vm: &Vm<<C::V as Virtualization>::Env>,
    vcpu: usize,
    cpu: usize,
    here: &mut C,
    lrs_changed: &mut bool,
    lrs_in_use: &mut bool,
) {
    let in_use;
    (*lrs_changed, in_use) = take_back_list_registers::<C>(vm, vcpu, cpu, here);
    *lrs_in_use = in_use;
}

/// An exit's interrupt other than a kick or the timer (`ExitInterrupt::Other`): the list
/// registers taken back first if the vCPU holds any (`owed`), then the interrupt handled by
/// its route. Out of line, so that the interrupts' dispatch stays as small as it was
/// without it.
#[cold]
#[inline(never)]
fn take_other_interrupt<C: VcpuCpu>(
    exiting: &Exiting<'_, C>,
    here: &mut C,
    owed: bool,
    lrs_changed: &mut bool,
    lrs_in_use: &mut bool,
    interrupt: Acknowledged,
) {
    let (vm, vcpu, cpu) = (exiting.vm, exiting.vcpu, exiting.cpu);
    if owed {
        take_back_after_exit::<C>(vm.borrow(), vcpu, cpu, here, lrs_changed, lrs_in_use);
    }
    C::hypervisor().take_exit_interrupt_routed(interrupt, (vm, vcpu));
}

/// The running vCPU's virtual timer fired: where the vGIC can (`vgic::Distributor::
/// hw_level_fired`), the list registers of its exit taken back (unless `taken_back`
/// already), the tick's line raised and the list registers planned, in one step under the
/// vCPU's and the VM's locks (docs/vgic.md, "The virtual timer's tick"). Returns whether the
/// vCPU then holds list registers, or `None` with nothing changed: the run loop takes those
/// steps itself.
fn tick_in_one_step<C: VcpuCpu>(
    vm: &Vm<<C::V as Virtualization>::Env>,
    vcpu: usize,
    here: &mut C,
    taken_back: bool,
) -> Option<bool> {
    let mut lists = vm.vgic.lists.get(vcpu).unwrap_or(&NO_LISTS).lock();
    if !vm.vgic.lock().hw_level_fired(vcpu, IntId(VTIMER_PPI), taken_back, &mut lists, here.list_registers()) {
        return None;
    }
    Some(withdraw_lists(here, &lists))
}

/// An interrupt exit that asks the vCPU to plan again (a kick: its hint is set) while it
/// holds at most one list register, which the guest completed: the take-back is the fold of
/// that register, done with the plan under the same two locks
/// (`vgic::Distributor::take_back_one_and_plan`), the hint taken. Returns whether the vCPU
/// then holds list registers, or `None` with nothing changed (the hint set again where it
/// was taken): the run loop takes them back and plans as usual.
fn take_back_with_plan<C: VcpuCpu>(vm: &Vm<<C::V as Virtualization>::Env>, vcpu: usize, here: &mut C) -> Option<bool> {
    // Taken before the plan reads the vGIC: a change made after it hints the vCPU again.
    if !vm.vgic.take_hint(vcpu) {
        return None;
    }
    let mut lists = vm.vgic.lists.get(vcpu).unwrap_or(&NO_LISTS).lock();
    if !lists.holds_at_most_one_emptied(here.list_registers()) {
        drop(lists);
        vm.vgic.hint_vcpu(vcpu);
        return None;
    }
    let mut vgic = vm.vgic.lock();
    if !vgic.take_back_one_and_plan(vcpu, &mut lists, here.list_registers()).unwrap_or(false) {
        drop(vgic);
        vm.vgic.hint_vcpu(vcpu);
        return None;
    }
    let in_use = publish_lists(here, &vgic, vcpu, &lists);
    let others = others_kicked::<C::V>(&mut vgic, vcpu);
    drop(vgic);
    drop(lists);
    kick_others(vm, others);
    Some(in_use)
}

/// After an exit of a vCPU holding list registers: their state goes back into the vGIC,
/// and a hardware-mapped level interrupt still pending there whose input went low is
/// retired (its physical interrupt deactivated here). Returns whether the next entry must
/// plan the list registers again, and whether the vCPU still holds any. List registers that
/// came back as they went in take the vCPU's own lock only, not the VM's
/// (`VcpuInterfaceState::came_back_unchanged`).
fn take_back_list_registers<C: VcpuCpu>(
    vm: &Vm<<C::V as Virtualization>::Env>,
    vcpu: usize,
    cpu: usize,
    here: &mut C,
) -> (bool, bool) {
    let Some(lists) = vm.vgic.lists.get(vcpu) else { return (true, true) };
    let mut lists = lists.lock();
    if lists.came_back_unchanged(here.list_registers()) {
        return (false, true);
    }
    let mut retired = RetiredLines::default();
    let (plan, others) = {
        let mut vgic = vm.vgic.lock();
        let plan = vgic
            .sync_from_hw_sampling(
                vcpu,
                &mut lists,
                here.list_registers(),
                &mut HwLines::<C>(PhantomData),
                &mut retired,
            )
            .unwrap_or(true);
        (plan, others_kicked::<C::V>(&mut vgic, vcpu))
    };
    let in_use = withdraw_lists(here, &lists);
    drop(lists);
    for physical in retired.iter() {
        C::deactivate(physical, cpu);
    }
    kick_others(vm, others);
    (plan, in_use)
}

/// The vCPUs other than `vcpu` that a step of `vcpu`'s with its list registers asked to
/// look (the vGIC's kick set, taken under its lock): one that let go of an SPI still
/// pending and routed to another vCPU since asks that one (docs/vgic.md). `vcpu`'s own kick
/// is dropped: it is planning now, or its step said whether it must. A passthrough SPI
/// the step let go of, cleared by the guest while a list register showed it, is
/// deactivated at the board's GIC.
#[inline(always)]
fn others_kicked<A: Arch>(vgic: &mut vgic::Distributor, vcpu: usize) -> u32 {
    crate::shared_vgic::deactivate_retired::<A>(vgic);
    vgic.take_kicks().0 as u32 & !(1 << vcpu)
}

/// Makes the vCPUs `others_kicked` gave look, once the vGIC's locks are released.
#[inline(always)]
fn kick_others<E: VmEnv>(vm: &Vm<E>, others: u32) {
    if others != 0 {
        kick_others_now(vm, others);
    }
}

#[cold]
#[inline(never)]
fn kick_others_now<E: VmEnv>(vm: &Vm<E>, others: u32) {
    vm.vgic.hint(others);
    vm.vgic.kick(others);
}

/// The inputs of a VM's hardware-mapped level interrupts, as the vGIC asks for them after an
/// exit, on the CPU of the vCPU that exited: its virtual timer's output, or a passthrough
/// SPI's pending state at the distributor (held active, a level SPI is pending exactly
/// while its input is asserted).
struct HwLines<C>(PhantomData<C>);

impl<C: VcpuCpu> LineSampler for HwLines<C> {
    #[inline(always)]
    fn is_asserted(&mut self, _: IntId, physical: IntId) -> bool {
        if physical.0 == C::timer_ppi() {
            C::timer_line()
        } else if physical.is_spi() {
            C::V::spi_pending(physical.0)
        } else {
            true
        }
    }
}

/// What the handler needs of one exiting vCPU beyond its registers and devices: its view
/// of the system registers, and the log of what it did wrong (a guest repeating the same
/// unknown function is logged once).
struct VcpuEnv<'a, I, E: VmEnv, T: Fn(u32)> {
    id: I,
    debug: &'a mut DebugRegisters,
    vm: &'a Vm<E>,
    vcpu: usize,
    last_unknown: &'a mut Option<u32>,
    /// Who else learns of a new unknown function: the image's vector
    /// (`VcpuCpu::vector_unknown_call`, a function item: nothing to store).
    tell: T,
}

impl<'a, I: IdRegisters + Default, E: VmEnv, T: Fn(u32)> VcpuEnv<'a, I, E, T> {
    fn new(
        vm: &'a Vm<E>,
        vcpu: usize,
        debug: &'a mut DebugRegisters,
        last_unknown: &'a mut Option<u32>,
        tell: T,
    ) -> Self {
        VcpuEnv { id: I::default(), debug, vm, vcpu, last_unknown, tell }
    }
}

impl<I: IdRegisters, E: VmEnv, T: Fn(u32)> SysRegEnv for VcpuEnv<'_, I, E, T> {
    fn features(&self) -> VmFeatures {
        VmFeatures { gic_v3: self.vm.gic_v3, ipa_bits: self.vm.stage2_ipa_bits }
    }
    fn id_registers(&self) -> &impl IdRegisters {
        &self.id
    }
    fn debug_registers(&mut self) -> &mut DebugRegisters {
        self.debug
    }
}

impl<I, E: VmEnv, T: Fn(u32)> IncidentLog for VcpuEnv<'_, I, E, T> {
    fn incident(&mut self, incident: Incident) {
        if let Incident::UnknownHypercall { function } = incident {
            if *self.last_unknown == Some(function) {
                return;
            }
            *self.last_unknown = Some(function);
            (self.tell)(function);
        }
        self.vm.log_incident(self.vcpu, incident);
    }
}

/// A trapped write of an SGI generation register: the vGIC raises the SGI at its targets,
/// which are hinted, and kicked if they run elsewhere. An ICC_SGI1R_EL1 write naming one
/// other vCPU is posted, without the VM's lock (`VgicHandle::post_sgi`).
fn generate_sgi<E: VmEnv>(vm: &Vm<E>, vcpu: usize, register: SgiGenerationRegister, value: u64) {
    if register == SgiGenerationRegister::Sgi1r {
        let vcpus = vm.vgic.posting_vcpus().count_ones() as usize;
        if vgic::single_sgi_target(value, vcpu, vcpus)
            .is_some_and(|(target, intid)| vm.vgic.post_sgi(vcpu, target, intid))
        {
            return;
        }
    }
    let register = match register {
        SgiGenerationRegister::Sgi1r => SgiRegister::Sgi1r,
        SgiGenerationRegister::Asgi1r => SgiRegister::Asgi1r,
        SgiGenerationRegister::Sgi0r => SgiRegister::Sgi0r,
    };
    let targets = {
        let mut vgic = vm.vgic.lock();
        let _ = vgic.generate_sgi(vcpu, register, value);
        // Its targets, taken from the kick set: left there, a later change's kick (a
        // device's interrupt for another vCPU) would kick them again for nothing.
        vgic.take_kicks().0 as u32
    };
    vm.vgic.hint(targets);
    vm.vgic.kick(targets & !(1 << vcpu));
}

/// The guest's ICC_DIR_EL1 write, trapped while an active interrupt is left out of its list
/// registers (docs/vgic.md, "Active interrupts no list register shows"), which were taken
/// back at this exit: the vGIC deactivates the interrupt it names, the hypervisor the
/// physical interrupt of a hardware-mapped one, and the next entry plans again.
#[cold]
#[inline(never)]
fn deactivate_by_dir<C: VcpuCpu>(
    vm: &Vm<<C::V as Virtualization>::Env>,
    vcpu: usize,
    cpu: usize,
    here: &mut C,
    value: u64,
) {
    let Some(lists) = vm.vgic.lists.get(vcpu) else { return };
    let mut lists = lists.lock();
    let mut retired = RetiredLines::default();
    let others = {
        let mut vgic = vm.vgic.lock();
        // Refused only for a vCPU the VM does not have, which this exit's is not.
        let _ = vgic.deactivate_by_dir(vcpu, &mut lists, here.list_registers(), value, &mut retired);
        others_kicked::<C::V>(&mut vgic, vcpu)
    };
    drop(lists);
    for physical in retired.iter() {
        C::deactivate(physical, cpu);
    }
    kick_others(vm, others);
    vm.vgic.hint(1 << vcpu);
}

/// PSCI and VM calls that change the VM's state. Returns how this vCPU's run ends, if it
/// does.
fn vm_call<C: VcpuCpu>(
    vm: &<C::V as Virtualization>::Vm,
    registers: &mut C::Registers,
    vcpu: usize,
    here: &mut C,
) -> Option<VcpuExit> {
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    match core.call(vcpu, smccc::decode(registers.call_arguments())) {
        CallEffect::Resume(result) => {
            if let Some(x0) = result {
                registers.set_reg(0, x0);
            }
            None
        }
        CallEffect::Stop => Some(stop(vm, vcpu, here)),
        CallEffect::End(reason) => {
            let _ = core.end(vcpu, reason);
            Some(stop(vm, vcpu, here))
        }
    }
}

/// The vCPU's list registers go back into the vGIC, the CPU leaves the VM, and `resume`
/// is what the vCPU goes on from, if it does.
fn leave_cpu<C: VcpuCpu>(vm: &<C::V as Virtualization>::Vm, vcpu: usize, here: &mut C, resume: Option<Box<Resume<C>>>) {
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    if let Some(lists) = core.vgic.lists.get(vcpu) {
        let mut lists = lists.lock();
        let others = {
            let mut vgic = core.vgic.lock();
            let _ = vgic.put(vcpu, &mut lists, here.list_registers());
            others_kicked::<C::V>(&mut vgic, vcpu)
        };
        drop(lists);
        kick_others(core, others);
    }
    if let Some((board, _)) = core.vgic.board() {
        board.make_non_resident(C::V::current_cpu());
    }
    here.leave();
    if let Some(slot) = C::resume_slots(vm).get(vcpu) {
        *slot.lock() = resume;
    }
    core.vgic.running_on[vcpu].store(usize::MAX, Ordering::Release);
}

/// This vCPU leaves the CPU to another one: what it leaves in the CPU is saved in the VM.
fn deschedule<C: VcpuCpu>(
    vm: &<C::V as Virtualization>::Vm,
    vcpu: usize,
    here: &mut C,
    registers: C::Registers,
    last_unknown: Option<u32>,
) -> VcpuExit {
    let saved = here.save();
    leave_cpu(vm, vcpu, here, Some(Box::new(Resume { registers, saved, last_unknown })));
    VcpuExit::Descheduled
}

/// The VM crashed: it ends, and this vCPU stops.
fn crash<C: VcpuCpu>(vm: &<C::V as Virtualization>::Vm, vcpu: usize, here: &mut C) -> VcpuExit {
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    let _ = core.end(vcpu, EndReason::Crashed);
    stop(vm, vcpu, here)
}

/// This vCPU stops for good, with nothing to resume from; the scheduler and the VM's power
/// state learn it.
fn stop<C: VcpuCpu>(vm: &<C::V as Virtualization>::Vm, vcpu: usize, here: &mut C) -> VcpuExit {
    leave_cpu(vm, vcpu, here, None);
    let core: &Vm<<C::V as Virtualization>::Env> = vm.borrow();
    core.vcpu_stopped(vcpu).map_or(VcpuExit::Stopped, VcpuExit::VmEnded)
}
