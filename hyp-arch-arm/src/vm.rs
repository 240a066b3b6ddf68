//! A VM as an ARM image runs it: the runtime's VM with what the CPU needs beside it, the same
//! on ARMv7 and ARMv8: the registers of its stage-2 tables (VTTBR and VTCR), the counter
//! value its virtual counter is offset by (CNTVOFF), and the saved state of each
//! descheduled vCPU. Building, loading, resetting and destroying it, over the image's cache
//! and TLB maintenance (`ArmImage`).

use core::borrow::Borrow;
use core::ops::Deref;

use hyp_core::cap::{CapError, CapId, CapSpace};
use hyp_core::coprocessor::RegisterPart;
use hyp_core::entropy::GuestSeeds;
use hyp_core::image::ExecutionState;
use hyp_core::set_way::{CacheStep, CacheTrap, SetWayState};
use hyp_core::sync::Mutex;
use hyp_core::sysreg::VmControlRegister;
use hyp_runtime::scheduling::Scheduling;
use hyp_runtime::vcpu_run::{CacheMaintenance, ResumeSlots, VcpuCpu};
use hyp_runtime::vm::{Vm, VmBuild, VmError};
use hyp_runtime::vm_resources::{self, revoke_all, VmRequest, VmResources};
use hyp_runtime::{Board, Virtualization};

use crate::identity_map::HeapTableMemory;
use crate::image::ArmImage;

type EnvOf<C> = <<C as VcpuCpu>::V as Virtualization>::Env;

/// A VM of an ARM image whose vCPUs run as `C`.
pub struct ArmVm<C: VcpuCpu> {
    core: Vm<EnvOf<C>>,
    /// The saved state of each descheduled vCPU.
    pub saved: ResumeSlots<C>,
    /// The system counter when the VM was created (CNTVOFF): its virtual counter starts at
    /// zero.
    pub counter_offset: u64,
    /// VTTBR and VTCR of the VM's stage-2 tables (which the capability space owns).
    pub vttbr: u64,
    pub vtcr: u64,
}

impl<C: VcpuCpu> Borrow<Vm<EnvOf<C>>> for ArmVm<C> {
    fn borrow(&self) -> &Vm<EnvOf<C>> {
        &self.core
    }
}

impl<C: VcpuCpu> Deref for ArmVm<C> {
    type Target = Vm<EnvOf<C>>;
    fn deref(&self) -> &Vm<EnvOf<C>> {
        &self.core
    }
}

/// A new VM's capabilities and stage-2 tables, the tables' frames from the heap.
pub fn grant_resources<I: ArmImage>(
    caps: &mut CapSpace,
    untyped: &[CapId],
    request: &VmRequest<'_>,
) -> Result<VmResources, CapError> {
    vm_resources::grant_resources(caps, &mut HeapTableMemory, I::stage2_tlb, untyped, request)
}

impl<C: VcpuCpu> ArmVm<C>
where
    C::V: ArmImage,
{
    /// Builds the VM `build` describes, with the resources its capabilities grant.
    pub fn create(build: VmBuild<'_>, scheduling: &'static Scheduling<C::V>) -> Result<Self, VmError> {
        let (id, spec, vttbr, vtcr) = (build.id, build.spec, build.granted.vttbr, build.granted.vtcr);
        let core = Vm::create(build, scheduling)?;
        if !<C::V as ArmImage>::AARCH64_GUESTS && core.execution_state() == ExecutionState::Aarch64 {
            return Err(VmError::Aarch64KernelOnArmv7);
        }
        let counter_offset = <C::V as hyp_runtime::Arch>::now();
        <<C::V as ArmImage>::Board as Board>::print(format_args!(
            "hypervisor: vm{id} {}: its virtual counter starts at physical count {counter_offset}",
            spec.name
        ));
        Ok(ArmVm { saved: (0..spec.vcpus).map(|_| Mutex::new(None)).collect(), counter_offset, vttbr, vtcr, core })
    }

    /// Loads the kernel, initrd and device tree, cleaned to the point of coherency (the
    /// guest starts with its MMU off), into RAM no earlier VM's data is left in
    /// (docs/capability-model.md, "Zeroing"): the blocks the VM already touched (before a
    /// reset), or all of an identity-mapped VM's RAM, are zeroed now; a block the loader
    /// writes part of is zeroed and mapped first, one it writes whole only mapped
    /// (`FirstTouch::prepare_overwritten`: no vCPU runs until every byte of it is written);
    /// every other block stays pending, zeroed when the VM first touches it.
    pub fn load(&self) {
        let (base, size) = (self.ram.base, self.spec.memory);
        for (offset, len) in self.first_touch.done_blocks() {
            C::V::zero_for_guest(base + offset, len);
        }
        // SAFETY: `ram` belongs to this VM alone, is identity-mapped Normal memory, and no
        // vCPU of this VM runs while it is loaded.
        let ram = unsafe { core::slice::from_raw_parts_mut(base as *mut u8, size as usize) };
        let ipa = self.spec.ram_ipa();
        self.core.load(|offset, bytes| {
            if let Err(e) = self.first_touch.prepare_overwritten(ipa + offset, bytes.len() as u64) {
                // Written anyway: the VM's first touch would zero it, and the guest fail to
                // boot; no other VM's data is exposed.
                <<C::V as ArmImage>::Board as Board>::print(format_args!(
                    "hypervisor: vm{} {}: RAM at IPA {:#x} not zeroed for loading ({e})",
                    self.id,
                    self.spec.name,
                    ipa + offset
                ));
            }
            let at = offset as usize;
            C::V::copy_to_guest(&mut ram[at..at + bytes.len()], bytes);
            C::V::make_visible_to_guest(base + offset, bytes.len() as u64);
        });
    }

    /// After a SYSTEM_RESET has stopped every vCPU: the VM as at power-on (hyp_runtime::vm),
    /// no vCPU state kept, the kernel reloaded.
    pub fn reset(&self, seeds: Option<GuestSeeds>) {
        self.core.reset(seeds);
        self.saved.iter().for_each(|s| *s.lock() = None);
        self.load();
    }

    /// Destroys the ended VM through its capability (hyp_runtime::vm_resources::revoke_all).
    pub fn destroy(&self, caps: &mut CapSpace) -> Result<(), CapError> {
        revoke_all(caps, &mut HeapTableMemory, &mut C::V::stage2_tlb(self.vttbr), self.cap)
    }
}

/// A control register write the trapped instruction carries: `value` into `part` of it.
pub type ControlWrite = (VmControlRegister, RegisterPart, u64);

/// One step of a vCPU's trapped set/way maintenance or watched control register write
/// (hyp_core::set_way), the same on both images: the part of the VM's RAM (`ram_base`,
/// `memory` bytes) the step names is cleaned and invalidated by `clean` (start, end);
/// `sctlr` reads the guest's SCTLR, whose caches a write may turn on or off. Returns None
/// while the guest is to trap at the instruction again; else it completes now, and the image
/// applies the control register write it returns, if any, and moves the PC on.
pub fn cache_maintenance_step(
    set_way: &mut SetWayState,
    trap: CacheMaintenance,
    pc: u64,
    (ram_base, memory): (u64, u64),
    sctlr: impl FnOnce() -> u64,
    clean: impl FnOnce(u64, u64),
) -> Option<Option<ControlWrite>> {
    let (trap, write) = match trap {
        CacheMaintenance::SetWay => (CacheTrap::SetWay, None),
        CacheMaintenance::ControlWrite { register: VmControlRegister::Sctlr, part, value } => {
            let old = sctlr();
            (CacheTrap::SctlrWrite { old, new: part.merge(old, value) }, Some((VmControlRegister::Sctlr, part, value)))
        }
        CacheMaintenance::ControlWrite { register, part, value } => {
            (CacheTrap::OtherControlWrite, Some((register, part, value)))
        }
    };
    let completes = match set_way.on_trap(trap, pc, memory) {
        CacheStep::CleanPart { offset, len, last } => {
            clean(ram_base + offset, ram_base + offset + len);
            last
        }
        CacheStep::Complete => true,
    };
    completes.then_some(write)
}
