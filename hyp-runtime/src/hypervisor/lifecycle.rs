//! A VM's life after boot: created from its manifest entry through the capability space,
//! rebooted in place after a SYSTEM_RESET, destroyed when it ends (its capabilities revoked,
//! its memory returned) and created again when it restarts (docs/management.md).

use alloc::format;
use alloc::string::String;
use core::borrow::Borrow;

use hyp_core::bundle::{VirtioTransport, VmSpec};
use hyp_core::vcpu_power::EndReason;

use super::{say, Hypervisor, Virtualization};
use crate::scheduling::vcpu_ref;
use crate::vm::{is_clean, Vm, VmBuild};
use crate::vm_resources::VmRequest;
use crate::vm_table::RunEnd;

impl<V: Virtualization> Hypervisor<V> {
    /// Creates VM `id` from its manifest entry, through the capability space.
    pub(crate) fn create_vm(&'static self, id: usize, spec: VmSpec<'static>) -> Result<V::Vm, String> {
        let (Some(factory), Some(caps)) = (self.factory.get(), self.caps.get()) else {
            return Err(format!("vm{id} {}: the hypervisor is not ready to create VMs", spec.name));
        };
        let devices = factory.passthrough.get(id).map_or(&[][..], |d| d.as_slice());
        let request = VmRequest {
            memory: spec.memory,
            vcpus: spec.vcpus,
            gicv: factory.gicv,
            passthrough: devices,
            ram_at: spec.identity_mapped,
            shadow_from: factory.untyped.as_slice(),
            pci: spec.devices.transport == VirtioTransport::Pci,
        };
        // An identity-mapped VM's RAM comes from the untyped made of exactly its range
        // (docs/capability-model.md, D4); every other VM's from the rest.
        let untyped = match factory.identity_untyped.get(id).and_then(Option::as_ref) {
            Some(own) => core::slice::from_ref(own),
            None => factory.untyped.as_slice(),
        };
        let granted = V::grant_resources(&mut caps.lock(), untyped, &request)
            .map_err(|e| format!("vm{id} {}: {e}", spec.name))?;
        let build = VmBuild {
            id,
            spec,
            granted: &granted,
            gic_v3: factory.gic_v3,
            passthrough: devices,
            seeds: self.next_seeds(id),
            disk_vms: factory.disk_vms,
        };
        let vm = V::create_vm(build, &self.scheduling).map_err(|e| format!("vm{id} {}: {e}", spec.name))?;
        let core: &Vm<V::Env> = vm.borrow();
        for spi in &core.passthrough_spis {
            V::disable_spi(spi.intid);
            V::clear_spi(spi.intid);
            V::configure_spi(spi.intid, spi.edge());
            self.routes.claim(spi.intid, id);
        }
        // Its disk and NIC served by its side core, before any of its vCPUs runs.
        if let Some(cpu) = spec.devices.io_cpu.map(|c| c as usize) {
            match self.io.get(cpu) {
                Some(io) => io.add(id, core.serve_from(io, cpu).into_iter()),
                None => say!(
                    V,
                    "hypervisor: vm{id} {}: cpu{cpu} is not a side core: its devices are served on its exits",
                    spec.name
                ),
            }
        }
        Ok(vm)
    }

    /// This CPU stopped the last vCPU of a VM that asked for a SYSTEM_RESET: it reboots the
    /// VM, from vCPU 0.
    pub(crate) fn reboot(&'static self, vm: &V::Vm) {
        let core: &Vm<V::Env> = vm.borrow();
        // Its passthrough SPIs off, and not left active, until vCPU 0 enables them again.
        for spi in &core.passthrough_spis {
            V::disable_spi(spi.intid);
            V::clear_spi(spi.intid);
        }
        // Its RAM is zeroed and loaded again: not while the board's disk may write it.
        core.reset_disk();
        self.drain_disk(core);
        V::reset_vm(vm, self.next_seeds(core.id));
        if let Err(e) = self.scheduling.start(vcpu_ref(core.id, 0)) {
            say!(V, "hypervisor: vm{} {}: cannot restart: {e}", core.id, core.spec.name);
        }
    }

    /// The VM's last vCPU stopped (or the console ended a VM with none running): it is
    /// destroyed through its capability, and created again if it restarts. When it was the
    /// last VM running, the machine stops.
    pub fn vm_ended(&'static self, vm: &V::Vm, end: EndReason) {
        let core: &Vm<V::Env> = vm.borrow();
        let (id, name) = (core.id, core.spec.name);
        let clean = is_clean(end);
        say!(V, "hypervisor: vm{id} {name} ended: {end:?} ({})", if clean { "clean" } else { "failed" });
        say!(V, "hypervisor: vm{id} {name}: {}", core.exit_counts());
        if core.vgic.direct().is_some() {
            let (doorbells, failures) = (core.vgic.doorbells(), core.vgic.direct_failures());
            say!(
                V,
                "hypervisor: vm{id} {name}: its LPIs were injected by the board's GICv4.0: {doorbells} doorbell(s) \
                 woke its vCPUs; {failures} command(s) of the board's ITS failed{}",
                if failures > 0 { " (those LPIs may not have reached it)" } else { "" }
            );
        }
        let left_out = core.guest_log.left_out();
        if left_out > 0 {
            say!(
                V,
                "hypervisor: vm{id} {name}: {left_out} more line(s) the guest caused were left out (after the first {}, one a second)",
                hyp_core::log_limit::BURST
            );
        }
        // Nothing may reach its RAM once the memory goes back: not the switch, not console
        // input, not the board's disk (its requests in flight complete first; the VM stays
        // in the table until then, where their completions find it).
        // The side core first: once it has let go of the VM's devices it never touches them
        // (nor the VM's RAM) again (crate::io_core).
        self.io.remove_vm(id);
        core.shut_down_devices();
        self.drain_disk(core);
        let _ = self.vms.take(id);
        self.release_passthrough(core);
        if let Some(caps) = self.caps.get() {
            match V::destroy_vm(&mut caps.lock(), vm) {
                Ok(()) => say!(
                    V,
                    "hypervisor: vm{id} {name}: capabilities revoked, {} MiB returned to untyped memory",
                    core.spec.memory >> 20
                ),
                Err(e) => say!(V, "hypervisor: vm{id} {name}: destroying it failed: {e}"),
            }
        }
        if end == EndReason::Restart {
            match self.recreate(id) {
                Ok(()) => return say!(V, "hypervisor: vm{id} {name}: created again from its manifest entry"),
                Err(e) => say!(V, "hypervisor: cannot restart: {e}"),
            }
        }
        if let Some(RunEnd { total, failed }) = self.vms.ended(clean) {
            say!(V, "hypervisor: all {total} VM(s) ended: {} clean, {failed} failed", total - failed);
            V::all_vms_ended(failed == 0);
        }
    }

    /// Before an ended VM's capabilities are revoked: each passthrough SPI stops being
    /// forwarded, is disabled and has its pending and active states cleared (a guest that
    /// stopped before deactivating it leaves it active).
    fn release_passthrough(&self, core: &Vm<V::Env>) {
        for spi in &core.passthrough_spis {
            V::disable_spi(spi.intid);
            self.routes.release(spi.intid);
            V::clear_spi(spi.intid);
            say!(
                V,
                "hypervisor: vm{} {}: passthrough SPI INTID {} disabled and deactivated (enabled: {})",
                core.id,
                core.spec.name,
                spi.intid,
                V::spi_enabled(spi.intid)
            );
        }
    }

    /// VM `id` anew from its manifest entry, started from vCPU 0 on its CPUs.
    fn recreate(&'static self, id: usize) -> Result<(), String> {
        let spec = self.vms.spec(id).ok_or_else(|| format!("vm{id}: no such VM"))?;
        let vm = self.create_vm(id, spec)?;
        V::load_vm(&vm);
        self.vms.put(id, vm);
        self.scheduling.start(vcpu_ref(id, 0)).map_err(|e| format!("vm{id} {}: {e}", spec.name))
    }

    /// A destroyed VM created again by the console (it counts as running again).
    pub(crate) fn start_again(&'static self, id: usize) -> Result<(), String> {
        self.recreate(id)?;
        self.vms.running_again();
        Ok(())
    }
}
