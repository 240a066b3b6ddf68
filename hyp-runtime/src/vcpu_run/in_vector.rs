//! Synchronous exits answered from the image's exception vector, on the run loop's stack
//! but without returning into it (docs/performance.md, "Answered in the vector"): an
//! emulated MMIO access of a vCPU that holds no list register, or an SGI sent through the
//! GICv3 CPU interface or GICv2's GICD_SGIR.
//!
//! The run loop gives each entry into the guest its [`InVector`] (`VcpuCpu::run_guest`),
//! and the vector offers it a data abort or a system register access with the guest's
//! registers saved. [`answer`] says what the vector does next ([`answer_posted`] after the
//! AArch64 vector posted an SGI itself, docs/vgic.md "Posted SGIs"). Nothing the run loop does
//! between two entries is skipped where it could matter:
//! - the exit is counted by reason as the run loop counts it;
//! - what another CPU asks of this vCPU (a kick, the end of a VM, the end of a shared
//!   vCPU's slice) comes as an interrupt, which the guest takes to EL2 as soon as the ERET
//!   unmasks it;
//! - what the exit itself asks of this vCPU (its own hint, the VM's end, device work left
//!   for later, and for a vCPU sharing its CPU a vCPU of this CPU woken, which asks this
//!   CPU's scheduler again without a kick) sends the exit on to the run loop, answered
//!   ([`VectorAnswer::Answered`]);
//! - an answer that is not "resume" (the guest's abort) is carried out by the run loop;
//! - the vector offers no data abort while the vCPU holds list registers: their take-back
//!   after every exit samples the lines of the level interrupts in them (docs/vgic.md), and
//!   a read of the distributor's pending and active state needs what the guest did to them.
//!   An SGI is answered whatever the sender holds (a write of ICC_SGI1R_EL1, or a data
//!   abort at GICD_SGIR's IPA, which the vector offers even then): the vGIC takes an SGI for
//!   a vCPU whose list registers are live in its CPU (another CPU's SGI to a running vCPU
//!   is the same case), and the list registers are taken back at the vCPU's next exit to
//!   the run loop, as if this exit had not been. Nothing at that IPA reads interrupt state
//!   (GICD_SGIR is write-only on GICv2, the offset reserved on GICv3), so whatever is
//!   offered there is answered as the run loop would.

use core::borrow::Borrow;
use core::cell::Cell;
use core::sync::atomic::Ordering;

use hyp_core::exit::{self, Incident, IncidentLog, Outcome};
use hyp_core::exit_stats::ExitCounts;
use hyp_core::sysreg;
use hyp_core::trap::{GuestRegisters, Trap};

use super::VcpuCpu;
use crate::hypervisor::Virtualization;
use crate::virtio::slot::VmEnv;
use crate::vm::Vm;

/// What the vector needs of the vCPU the run loop runs, on the run loop's stack.
pub struct InVector<'a, C: VcpuCpu> {
    pub(super) vm: &'a <C::V as Virtualization>::Vm,
    pub(super) vcpu: usize,
    /// This CPU, and whether the vCPU shares it (its scheduler may want it back).
    pub(super) cpu: usize,
    pub(super) shared: bool,
    pub(super) exits: &'a ExitCounts,
    /// An exit answered here whose outcome the run loop carries out, with the length of
    /// the trapped instruction.
    pub(super) outcome: Cell<Option<(Outcome, u8)>>,
}

/// What the vector does after offering an exit to [`answer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VectorAnswer {
    /// Not one answered here: nothing was changed, the run loop takes the exit.
    NotHere,
    /// Answered; the run loop looks before the guest goes on (`GuestExit::Answered`).
    Answered,
    /// Answered: the guest goes on from its registers.
    Resume,
}

/// Answers the synchronous exit the vector offers, if it is a stage-2 data abort with its
/// IPA known or a write of an SGI generation register; `registers` are the guest's, saved
/// by the vector (an image offers only exits whose registers are `C::Registers` as they
/// are: the AArch64 image's from AArch64).
#[inline(always)]
pub fn answer<C: VcpuCpu>(here: &InVector<'_, C>, registers: &mut C::Registers) -> VectorAnswer {
    let trap = C::read_trap();
    let exit = C::decode(&trap, registers);
    let (core, vcpu): (&Vm<<C::V as Virtualization>::Env>, _) = (here.vm.borrow(), here.vcpu);
    let bytes = exit.instruction_bytes;
    let outcome = match exit.trap {
        Trap::DataAbort { ipa, va, access, write } => {
            let mut log = Incidents { vm: core, vcpu };
            exit::data_abort(registers, bytes, vcpu, ipa, va, access, write, &mut core.mmio(), &mut log)
        }
        Trap::SystemRegister { access, iss } => {
            let Some(register) = sysreg::sgi_generation_of_iss(iss, core.gic_v3) else { return VectorAnswer::NotHere };
            let value = registers.reg(access.rt);
            registers.advance_pc(bytes);
            super::generate_sgi(core, vcpu, register, value);
            Outcome::Resume
        }
        _ => return VectorAnswer::NotHere,
    };
    here.exits.record_sync(C::syndrome(&trap));
    if outcome != Outcome::Resume {
        here.outcome.set(Some((outcome, bytes)));
        return VectorAnswer::Answered;
    }
    go_on(here, core)
}

/// A write of ICC_SGI1R_EL1 or GICD_SGIR whose SGI the vector posted
/// (`VgicHandle::post_sgi`: posted, hinted, the barrier) and whose target it then found
/// waiting for an interrupt off its CPU (or on a CPU it cannot kick itself): the target
/// woken and kicked as `post_sgi` does, the write's exit counted, and the guest goes on past
/// it. The vector comes here for nothing else: the SGI must not be posted twice.
#[inline(never)]
pub fn answer_posted<C: VcpuCpu>(here: &InVector<'_, C>, registers: &mut C::Registers) -> VectorAnswer {
    let trap = C::read_trap();
    let exit = C::decode(&trap, registers);
    let core: &Vm<<C::V as Virtualization>::Env> = here.vm.borrow();
    let vcpus = core.vgic.posting_vcpus().count_ones() as usize;
    let target = match exit.trap {
        Trap::SystemRegister { access, .. } => {
            vgic::single_sgi_target(registers.reg(access.rt), here.vcpu, vcpus).map(|(target, _)| target)
        }
        Trap::DataAbort { access: Some(access), write: true, .. } => {
            let value = registers.reg(access.register()) as u32;
            vgic::single_sgir_target(value, here.vcpu, vcpus).map(|(target, _)| target)
        }
        _ => None,
    };
    registers.advance_pc(exit.instruction_bytes);
    if let Some(target) = target {
        core.vgic.kick(1 << target);
    }
    here.exits.record_sync(C::syndrome(&trap));
    go_on(here, core)
}

/// After an exit answered here: whether the guest goes on at once.
#[inline(always)]
fn go_on<C: VcpuCpu>(here: &InVector<'_, C>, core: &Vm<<C::V as Virtualization>::Env>) -> VectorAnswer {
    let vcpu = here.vcpu;
    // What the run loop looks at before each entry: the VM's end, device work left for
    // later, this vCPU's hint (a change of its interrupts the access made, or another
    // CPU's; another CPU also kicks it), and after a shared vCPU's exit its scheduler's
    // request (a vCPU of this CPU the exit woke asks it without a kick).
    let rescheduling = here.shared && C::hypervisor().scheduling.reschedule_requested(here.cpu);
    if core.is_ending() || core.device_work.load(Ordering::Relaxed) || core.vgic.is_hinted(vcpu) || rescheduling {
        return VectorAnswer::Answered;
    }
    VectorAnswer::Resume
}

/// What a guest did wrong in an access answered in the vector, logged with its VM and vCPU.
struct Incidents<'a, E: VmEnv> {
    vm: &'a Vm<E>,
    vcpu: usize,
}

impl<E: VmEnv> IncidentLog for Incidents<'_, E> {
    fn incident(&mut self, incident: Incident) {
        self.vm.log_incident(self.vcpu, incident);
    }
}
