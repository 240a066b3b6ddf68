//! Physical interrupts taken by the hypervisor, on a CPU running a guest (its exit path) or
//! an idle one (its wait), handled by their route (crate::interrupts): one dispatcher for
//! both, so an interrupt means the same wherever it lands.

use core::borrow::Borrow;

use hyp_core::exit_stats::ExitReason;

use super::{Hypervisor, Virtualization};
use crate::interrupts::{Route, KICK_SGI};
use crate::vm::Vm;

impl<V: Virtualization> Hypervisor<V> {
    /// Takes every pending physical interrupt of this CPU. `running` is the vCPU that was in
    /// the guest when they came (its exits are counted by reason, and it looks at its vGIC
    /// again before entering the guest); none on an idle CPU. Returns whether the running
    /// vCPU's virtual timer fired.
    pub fn take_interrupts(&'static self, running: Option<(&V::Vm, usize)>) -> bool {
        let running: Option<(&Vm<V::Env>, usize)> = running.map(|(vm, vcpu)| (vm.borrow(), vcpu));
        let mut timer = false;
        while let Some((iar, intid)) = V::acknowledge_interrupt() {
            timer |= self.take_interrupt(iar, intid, running, &mut || {});
        }
        timer
    }

    /// The interrupt a guest's exit came for: one acknowledgement per exception, as each
    /// exception is taken for one interrupt. Another one pending is taken as soon as the
    /// guest is entered again (HCR_EL2.IMO / HCR.IMO route it here whatever the guest's
    /// mask): a second read of the acknowledge register on every interrupt exit, which
    /// finds nothing but the spurious INTID almost always, is saved. `take_back` (the running
    /// vCPU's list registers taken back) runs before any interrupt but a kick or the running
    /// vCPU's virtual timer is handled, since those may change its vGIC (a passthrough SPI's
    /// line) and the vGIC's view of its list registers must be current first. Returns
    /// whether it was the running vCPU's virtual timer, whose line goes into the vGIC with
    /// the take-back and the plan in one step, by the caller (`vcpu_run`, docs/vgic.md, "The
    /// virtual timer's tick").
    #[inline(never)]
    pub fn take_exit_interrupt(&'static self, running: (&V::Vm, usize), mut take_back: impl FnMut()) -> bool {
        let Some((iar, intid)) = V::acknowledge_interrupt() else { return false };
        let (vm, vcpu) = running;
        self.take_interrupt(iar, intid, Some((vm.borrow(), vcpu)), &mut take_back)
    }

    /// One acknowledged interrupt. The two the exit path takes most, a kick and the running
    /// vCPU's virtual timer, are handled here calling nothing, so that this needs no stack
    /// frame; every other one is handed on to `take_routed`. With every route in the loop
    /// above, the loop saved twelve registers and loaded the routes' constants before the
    /// first interrupt: 23 instructions a kick or a timer interrupt paid (docs/performance.md).
    /// Returns whether it was the running vCPU's virtual timer.
    #[inline(never)]
    fn take_interrupt(
        &'static self,
        iar: u32,
        intid: u32,
        running: Option<(&Vm<V::Env>, usize)>,
        take_back: &mut impl FnMut(),
    ) -> bool {
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
                return true;
            }
            _ => self.take_routed(iar, intid, route, running, take_back),
        }
        false
    }

    /// Any interrupt but a kick or the running vCPU's virtual timer, by its route.
    /// `take_back` first, as `take_exit_interrupt` says.
    #[inline(never)]
    fn take_routed(
        &'static self,
        iar: u32,
        intid: u32,
        route: Route,
        running: Option<(&Vm<V::Env>, usize)>,
        take_back: &mut impl FnMut(),
    ) {
        take_back();
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
            Route::Passthrough | Route::Unrouted => {
                count(ExitReason::OtherInterrupt);
                V::end_interrupt(iar);
            }
        }
        if let Some((vm, vcpu)) = running {
            vm.vgic.hint_vcpu(vcpu);
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
