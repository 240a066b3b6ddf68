//! Physical interrupts taken by the hypervisor, on a CPU running a guest (its exit path) or
//! an idle one (its wait), handled by their route (crate::interrupts): one dispatcher for
//! both, so an interrupt means the same wherever it lands.

use core::borrow::Borrow;

use hyp_core::exit_stats::ExitReason;

use super::{Hypervisor, Virtualization};
use crate::interrupts::{Route, KICK_SGI};
use crate::vm::Vm;

/// What `take_interrupt` did with an acknowledged interrupt.
enum Taken {
    Done,
    /// The running vCPU's virtual timer, its priority dropped.
    VirtualTimer,
    /// Any other: `take_routed`'s.
    Routed(Route),
}

/// What `Hypervisor::take_exit_interrupt` did with the interrupt an exit came for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitInterrupt {
    /// Handled (a kick: the running vCPU's hint is set), or none was pending.
    Taken,
    /// The running vCPU's virtual timer, its priority dropped: the caller raises its line.
    VirtualTimer,
    /// Acknowledged and not handled: the caller takes the running vCPU's list registers
    /// back, then hands it to `Hypervisor::take_exit_interrupt_routed`.
    Other(Acknowledged),
}

/// An interrupt acknowledged at the GIC's CPU interface and not yet ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    iar: u32,
    intid: u32,
    route: Route,
}

impl<V: Virtualization> Hypervisor<V> {
    /// Takes every pending physical interrupt of this CPU. `running` is the vCPU that was in
    /// the guest when they came (its exits are counted by reason, and it looks at its vGIC
    /// again before entering the guest); none on an idle CPU. Returns whether the running
    /// vCPU's virtual timer fired.
    pub fn take_interrupts(&'static self, running: Option<(&V::Vm, usize)>) -> bool {
        let running: Option<(&Vm<V::Env>, usize)> = running.map(|(vm, vcpu)| (vm.borrow(), vcpu));
        let mut timer = false;
        while let Some((iar, intid)) = V::acknowledge_interrupt() {
            match self.take_interrupt(iar, intid, running) {
                Taken::Done => {}
                Taken::VirtualTimer => timer = true,
                Taken::Routed(route) => self.take_routed(iar, intid, route, running),
            }
        }
        timer
    }

    /// The interrupt a guest's exit came for: one acknowledgement per exception, as each
    /// exception is taken for one interrupt. Another one pending is taken as soon as the
    /// guest is entered again (HCR_EL2.IMO / HCR.IMO route it here whatever the guest's
    /// mask): a second read of the acknowledge register on every interrupt exit, which
    /// finds nothing but the spurious INTID almost always, is saved. A kick is handled here;
    /// the running vCPU's virtual timer is the caller's, whose line goes into the vGIC with
    /// the take-back and the plan in one step (`vcpu_run`, docs/vgic.md, "The virtual
    /// timer's tick"); any other interrupt is left to the caller too, acknowledged
    /// (`ExitInterrupt::Other`), since it may change the running vCPU's vGIC (a passthrough
    /// SPI's line) and the vGIC's view of its list registers must be current first: the
    /// caller takes them back, then hands it to `take_exit_interrupt_routed`. A kick's exit,
    /// the most frequent, so builds nothing for the other cases' take-back. Inlined into the
    /// run loop: out of line, its answer came back through memory.
    #[inline(always)]
    pub fn take_exit_interrupt(&'static self, running: (&V::Vm, usize)) -> ExitInterrupt {
        let Some((iar, intid)) = V::acknowledge_interrupt() else { return ExitInterrupt::Taken };
        let (vm, vcpu) = running;
        match self.take_interrupt(iar, intid, Some((vm.borrow(), vcpu))) {
            Taken::Done => ExitInterrupt::Taken,
            Taken::VirtualTimer => ExitInterrupt::VirtualTimer,
            Taken::Routed(route) => ExitInterrupt::Other(Acknowledged { iar, intid, route }),
        }
    }

    /// An interrupt `take_exit_interrupt` left to its caller, once the running vCPU's list
    /// registers are taken back.
    pub fn take_exit_interrupt_routed(&'static self, interrupt: Acknowledged, running: (&V::Vm, usize)) {
        let (vm, vcpu) = running;
        self.take_routed(interrupt.iar, interrupt.intid, interrupt.route, Some((vm.borrow(), vcpu)));
    }

    /// One acknowledged interrupt. The two the exit path takes most, a kick and the running
    /// vCPU's virtual timer, are handled here calling nothing, so that this needs no stack
    /// frame; every other one is the caller's, for `take_routed`. With every route in the
    /// loop above, the loop saved twelve registers and loaded the routes' constants before
    /// the first interrupt: 23 instructions a kick or a timer interrupt paid
    /// (docs/performance.md).
    #[inline(never)]
    fn take_interrupt(&'static self, iar: u32, intid: u32, running: Option<(&Vm<V::Env>, usize)>) -> Taken {
        // The most frequent first, before the table: another CPU made this one look (an
        // IPI, an I/O completion).
        let route = if intid == KICK_SGI { Route::Kick } else { self.routes.of(intid) };
        match (route, running) {
            (Route::Kick, None) => V::end_interrupt(iar),
            (Route::Kick, Some((vm, vcpu))) => {
                vm.count_exit(vcpu, ExitReason::Kick);
                V::end_interrupt(iar);
                vm.vgic.hint_vcpu(vcpu);
            }
            // Hardware-mapped: the running vCPU's, left active until its guest deactivates it.
            // Its line goes into the vGIC with the vCPU's next plan, in the same step as the
            // take-back of the deactivation that let it fire (docs/vgic.md, "The virtual
            // timer's tick").
            (Route::VirtualTimer, Some((vm, vcpu))) => {
                vm.count_exit(vcpu, ExitReason::TimerInterrupt);
                V::drop_interrupt_priority(iar);
                return Taken::VirtualTimer;
            }
            _ => return Taken::Routed(route),
        }
        Taken::Done
    }

    /// Any interrupt but a kick or the running vCPU's virtual timer, by its route; on an
    /// exit, after the running vCPU's list registers were taken back
    /// (`take_exit_interrupt`).
    #[inline(never)]
    fn take_routed(&'static self, iar: u32, intid: u32, route: Route, running: Option<(&Vm<V::Env>, usize)>) {
        let count = |reason| {
            if let Some((vm, vcpu)) = running {
                vm.count_exit(vcpu, reason);
            }
        };
        match route {
            // Only the virtual timer's PPI on an idle CPU comes here (`take_interrupt` takes
            // the rest): no vCPU runs to deactivate it.
            Route::Kick | Route::VirtualTimer => V::end_interrupt(iar),
            Route::Passthrough if self.forward_passthrough(intid, iar) => count(ExitReason::OtherInterrupt),
            Route::ConsoleInput => {
                count(ExitReason::ConsoleInput);
                self.console_interrupt();
                V::end_interrupt(iar);
            }
            Route::Uplink => {
                count(ExitReason::OtherInterrupt);
                self.uplink_interrupt();
                V::end_interrupt(iar);
            }
            Route::Disk => {
                count(ExitReason::OtherInterrupt);
                self.disk_interrupt();
                V::end_interrupt(iar);
            }
            Route::HypTimer => {
                count(ExitReason::SliceEnd);
                let cpu = V::current_cpu();
                self.scheduling.timer_fired(cpu, |v| self.wake_waiting(v));
                if running.is_some() {
                    self.scheduling.request_reschedule(cpu);
                }
                V::end_interrupt(iar);
            }
            Route::Maintenance => {
                count(ExitReason::Maintenance);
                V::end_interrupt(iar);
            }
            // An LPI has no active state: its priority dropped is its end (IHI 0069H 4.1).
            Route::Doorbell => {
                count(ExitReason::OtherInterrupt);
                self.doorbell(intid);
                V::drop_interrupt_priority(iar);
            }
            Route::Passthrough | Route::Unrouted => {
                count(ExitReason::OtherInterrupt);
                V::end_interrupt(iar);
            }
        }
        if let Some((vm, vcpu)) = running {
            vm.vgic.hint_vcpu(vcpu);
        }
    }

    /// A doorbell of the board's GICv4.0: its vCPU, waiting off its CPU with its vPE not
    /// resident, runs again and takes the vLPI from the vPE's pending table when it is made
    /// resident (crate::direct_lpis). Nothing is made pending in the vGIC.
    #[inline(never)]
    fn doorbell(&self, intid: u32) {
        let Some((vm, vcpu)) = V::vlpis().and_then(|board| board.doorbell(intid)) else { return };
        if let Some(vm) = self.vm(vm) {
            Borrow::<Vm<V::Env>>::borrow(&*vm).vgic.doorbell(vcpu);
        }
    }

    /// A passthrough SPI (`iar` as acknowledged), on whichever CPU took it: only its
    /// priority is dropped and it becomes its VM's hardware-mapped virtual SPI, left active
    /// until the guest deactivates it. Returns false if no VM owns it.
    #[inline(never)]
    fn forward_passthrough(&self, intid: u32, iar: u32) -> bool {
        let Some(index) = self.routes.owner(intid) else { return false };
        let vm = self.vm(index);
        match vm.as_deref().map(Borrow::<Vm<V::Env>>::borrow) {
            Some(vm) if !vm.is_ending() => {
                V::drop_interrupt_priority(iar);
                vm.passthrough_interrupt(intid);
            }
            // The VM is going: nobody will deactivate it.
            _ => V::end_interrupt(iar),
        }
        true
    }
}
