//! The board's GICv4.0 as the runtime's `BoardVlpis` (hyp_runtime::direct_lpis): the VMs'
//! vPEs and events on the board's ITS, their residency on each CPU's redistributor, and the
//! doorbells (docs/vgic.md, "Direct injection of LPIs (GICv4.0)").
//!
//! The numbering is fixed at boot, so nothing is looked up on the way to the guest:
//! - `SLOTS` VMs at a time; slot `s` holds vPEs `s × VPES_PER_SLOT` on, one per vCPU, and
//!   events `s × MAX_LPIS` on of DeviceID 0, one per guest LPI (event = slot's first +
//!   INTID − 8192);
//! - vPE `p`'s doorbell is physical LPI 8192 + `p`, enabled in the hypervisor's own LPI
//!   configuration table, which every redistributor shares;
//! - each slot keeps its tables (the vLPI configuration table, a pending table per vPE)
//!   for the next VM that takes it: the heap they come from is never given back.

use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::platform::MAX_CPUS;
use hyp_core::sync::Mutex;
use hyp_runtime::direct_lpis::{BoardVlpis, VlpiError, VlpiVm};
use spin::Once;
use vgic::{VlpiCommand, FIRST_LPI, MAX_LPIS};

use super::command::{DeviceId, Doorbell, EventId, ItsCommand, Lpi, RdBase, VpeId};
use super::redistributor::{allocate_pending_table, LpiConfigTable, LpiRedistributor};
use super::{BoardIts, HeapItsMemory, ItsError, ItsFeatures, GITS_TYPER};
use crate::gic::{CpuInterfaceRegisters, PRIORITY};
use crate::mmio::Frame;

/// VMs whose LPIs the board injects at once.
pub const SLOTS: usize = 8;
/// vCPUs of such a VM.
pub const VPES_PER_SLOT: usize = 16;
const VPES: usize = SLOTS * VPES_PER_SLOT;
/// INTID bits of the vLPIs and of the doorbells: 8192 + MAX_LPIS and 8192 + VPES fit.
const ID_BITS: u32 = 14;
const _: () = assert!(FIRST_LPI as usize + MAX_LPIS <= 1 << ID_BITS && FIRST_LPI as usize + VPES <= 1 << ID_BITS);
/// The hypervisor's own device on the board's ITS: a CPU's write of GITS_TRANSLATER
/// carries DeviceID 0 (docs/vgic.md).
const DEVICE: DeviceId = DeviceId(0);
const NONE: usize = usize::MAX;

/// A slot's tables, allocated by the first VM that takes it and kept.
struct SlotTables {
    /// The vLPI configuration table (GICR_VPROPBASER): the guest's priorities and enables.
    config: LpiConfigTable,
    /// Each vPE's pending table (64 KiB aligned), by vCPU.
    pending: [u64; VPES_PER_SLOT],
}

/// The board's ITS and GICv4.0 redistributors as the hypervisor drives them for its VMs.
pub struct BoardGicv4<C> {
    its: Mutex<BoardIts<C>>,
    translater: super::Translater<C>,
    /// Each CPU's redistributor and its RDbase, by CPU index; none for a CPU not online.
    redistributors: [Option<(LpiRedistributor, RdBase)>; MAX_CPUS],
    /// Each slot's VM index, NONE while free.
    slot_vm: [AtomicUsize; SLOTS],
    tables: [Once<SlotTables>; SLOTS],
    /// The CPU each vPE is mapped to (VMAPP, VMOVP).
    vpe_cpu: [AtomicUsize; VPES],
    /// The vPE resident on each CPU's redistributor, NONE if none.
    resident: [AtomicUsize; MAX_CPUS],
    /// The hypervisor's LPI configuration table: the doorbells'.
    _doorbells: LpiConfigTable,
}

impl<C: CpuInterfaceRegisters> BoardGicv4<C> {
    /// Brings the board's ITS at `its` up for direct injection: its tables for `VPES` vPEs,
    /// DeviceID 0 with an event per LPI of every slot, and each online CPU's redistributor
    /// (`redistributor(cpu)`) given the doorbells' LPI tables. An error if the ITS or a
    /// redistributor has no virtual LPIs (a GICv3), or the heap cannot hold the tables.
    ///
    /// # Safety
    ///
    /// `its` is the board's ITS, mapped as device memory at this address for the rest of
    /// the program, driven by nothing else; this runs once.
    pub unsafe fn init(
        its: usize,
        redistributor: impl Fn(usize) -> Option<LpiRedistributor>,
    ) -> Result<Self, ItsError> {
        let memory = &mut HeapItsMemory;
        // A GICv3's ITS is left as the firmware left it: the hypervisor uses none.
        // SAFETY: the caller's contract.
        if !ItsFeatures::from_typer(unsafe { Frame::new(its) }.read64(GITS_TYPER)).virtual_lpis {
            return Err(ItsError::NoVirtualLpis);
        }
        // SAFETY: the caller's contract.
        let mut board = unsafe { BoardIts::<C>::init(its, VPES, memory)? };
        let features = board.features();
        board.map_device(DEVICE, (SLOTS * MAX_LPIS) as u32, memory)?;
        let doorbells = LpiConfigTable::allocate(ID_BITS, memory)?;
        for vpe in 0..VPES as u32 {
            doorbells.set(Lpi(FIRST_LPI + vpe), PRIORITY, true)?;
        }
        let mut redistributors = [None; MAX_CPUS];
        for (cpu, slot) in redistributors.iter_mut().enumerate() {
            let Some(rd) = redistributor(cpu) else { continue };
            if !rd.has_virtual_lpis() {
                return Err(ItsError::NoVirtualLpis);
            }
            rd.enable_lpis(&doorbells, memory)?;
            *slot = Some((rd, features.rdbase(rd.typer(), rd.address())));
        }
        Ok(BoardGicv4 {
            translater: board.translater(),
            its: Mutex::new(board),
            redistributors,
            slot_vm: [const { AtomicUsize::new(NONE) }; SLOTS],
            tables: [const { Once::new() }; SLOTS],
            vpe_cpu: [const { AtomicUsize::new(NONE) }; VPES],
            resident: [const { AtomicUsize::new(NONE) }; MAX_CPUS],
            _doorbells: doorbells,
        })
    }

    /// vCPU `vcpu`'s vPE, if the VM has that vCPU.
    fn vpe_of(vm: &VlpiVm, vcpu: usize) -> Result<usize, VlpiError> {
        if vcpu < vm.vcpus.min(VPES_PER_SLOT) && vm.slot < SLOTS {
            Ok(vm.slot * VPES_PER_SLOT + vcpu)
        } else {
            Err(VlpiError::TooManyVcpus { vcpus: vcpu.saturating_add(1), max: vm.vcpus })
        }
    }

    fn event(vm: &VlpiVm, lpi: u32) -> EventId {
        EventId((vm.slot * MAX_LPIS) as u32 + lpi.wrapping_sub(FIRST_LPI))
    }

    fn doorbell_of(vpe: usize) -> Doorbell {
        Doorbell::Lpi(Lpi(FIRST_LPI + vpe as u32))
    }

    fn rdbase(&self, cpu: usize) -> Option<RdBase> {
        self.redistributors.get(cpu)?.map(|(_, rdbase)| rdbase)
    }

    fn send(&self, commands: &[ItsCommand]) -> Result<(), VlpiError> {
        self.its.lock().send(commands).map_err(|_| VlpiError::Board)
    }

    /// The slot's tables, allocated the first time; each pending table zeroed for a new VM.
    fn slot_tables(&self, slot: usize) -> Result<&SlotTables, VlpiError> {
        let tables = self.tables.get(slot).ok_or(VlpiError::NoSlot { slots: SLOTS })?;
        if let Some(t) = tables.get() {
            for &vpt in &t.pending {
                // SAFETY: the slot's pending table, allocated below (`bytes` long) and
                // never freed; its vPEs were unmapped (VMAPP V=0) when its last VM left,
                // so the GIC no longer writes it.
                unsafe { core::ptr::write_bytes(vpt as *mut u8, 0, (1usize << ID_BITS) / 8) };
            }
            return Ok(t);
        }
        let memory = &mut HeapItsMemory;
        let config = LpiConfigTable::allocate(ID_BITS, memory).map_err(|_| VlpiError::OutOfMemory)?;
        let mut pending = [0; VPES_PER_SLOT];
        for vpt in &mut pending {
            *vpt = allocate_pending_table(ID_BITS, memory).map_err(|_| VlpiError::OutOfMemory)?;
        }
        Ok(tables.call_once(|| SlotTables { config, pending }))
    }
}

impl<C: CpuInterfaceRegisters> BoardVlpis for BoardGicv4<C> {
    fn attach(&self, vm: usize, vcpus: usize, cpu: usize) -> Result<VlpiVm, VlpiError> {
        if vcpus > VPES_PER_SLOT {
            return Err(VlpiError::TooManyVcpus { vcpus, max: VPES_PER_SLOT });
        }
        let rdbase = self.rdbase(cpu).ok_or(VlpiError::Board)?;
        let slot = (0..SLOTS)
            .find(|&s| self.slot_vm[s].compare_exchange(NONE, vm, Ordering::AcqRel, Ordering::Acquire).is_ok())
            .ok_or(VlpiError::NoSlot { slots: SLOTS })?;
        let attached = VlpiVm { vm, slot, vcpus };
        let mapped = self.slot_tables(slot).and_then(|tables| {
            // The VM's LPIs start disabled; each is configured before it is mapped.
            for lpi in FIRST_LPI..FIRST_LPI + MAX_LPIS as u32 {
                let _ = tables.config.set(Lpi(lpi), 0, false);
            }
            for vcpu in 0..vcpus {
                let vpe = Self::vpe_of(&attached, vcpu)?;
                let table = (rdbase, tables.pending[vcpu], ID_BITS);
                // VINVALL after: the vPE number may have been another VM's, whose vLPI
                // configuration the redistributors may hold cached (Linux's its_map_vm does
                // the same).
                let id = VpeId(vpe as u16);
                self.send(&[ItsCommand::vmapp(id, Some(table)), ItsCommand::vinvall(id)])?;
                self.vpe_cpu[vpe].store(cpu, Ordering::Release);
            }
            Ok(())
        });
        if let Err(e) = mapped {
            self.detach(&attached);
            return Err(e);
        }
        Ok(attached)
    }

    fn detach(&self, vm: &VlpiVm) {
        for vpe in (0..vm.vcpus).filter_map(|vcpu| Self::vpe_of(vm, vcpu).ok()) {
            if self.vpe_cpu.get(vpe).is_some_and(|c| c.swap(NONE, Ordering::AcqRel) != NONE) {
                let _ = self.send(&[ItsCommand::vmapp(VpeId(vpe as u16), None)]);
            }
        }
        if let Some(slot) = self.slot_vm.get(vm.slot) {
            slot.store(NONE, Ordering::Release);
        }
    }

    fn apply(&self, vm: &VlpiVm, command: VlpiCommand) -> Result<(), VlpiError> {
        let tables = self.tables.get(vm.slot).and_then(Once::get).ok_or(VlpiError::Board)?;
        match command {
            VlpiCommand::Map { lpi, vcpu } => {
                let vpe = Self::vpe_of(vm, vcpu)?;
                let map = ItsCommand::vmapti(
                    DEVICE,
                    Self::event(vm, lpi),
                    VpeId(vpe as u16),
                    Lpi(lpi),
                    Self::doorbell_of(vpe),
                );
                self.send(&[map])
            }
            VlpiCommand::Move { lpi, vcpu } => {
                let vpe = Self::vpe_of(vm, vcpu)?;
                let moved =
                    ItsCommand::vmovi(DEVICE, Self::event(vm, lpi), VpeId(vpe as u16), Some(Self::doorbell_of(vpe)));
                self.send(&[moved])
            }
            VlpiCommand::Discard { lpi } => self.send(&[ItsCommand::discard(DEVICE, Self::event(vm, lpi))]),
            VlpiCommand::Configure { lpi, config, mapped } => {
                tables.config.set(Lpi(lpi), config & 0xfc, config & 1 != 0).map_err(|_| VlpiError::Board)?;
                if mapped {
                    self.send(&[ItsCommand::inv(DEVICE, Self::event(vm, lpi))])
                } else {
                    Ok(())
                }
            }
            VlpiCommand::Raise { lpi } => {
                self.translater.raise(Self::event(vm, lpi));
                Ok(())
            }
            VlpiCommand::Clear { lpi } => self.send(&[ItsCommand::clear(DEVICE, Self::event(vm, lpi))]),
        }
    }

    fn make_resident(&self, vm: &VlpiVm, vcpu: usize, cpu: usize) {
        let (Some(tables), Some(&Some((rd, rdbase)))) =
            (self.tables.get(vm.slot).and_then(Once::get), self.redistributors.get(cpu))
        else {
            return;
        };
        let Some((vpe, vpe_cpu, &vpt)) =
            Self::vpe_of(vm, vcpu).ok().and_then(|vpe| Some((vpe, self.vpe_cpu.get(vpe)?, tables.pending.get(vcpu)?)))
        else {
            return;
        };
        if vpe_cpu.load(Ordering::Acquire) != cpu {
            if self.send(&[ItsCommand::vmovp(VpeId(vpe as u16), rdbase)]).is_err() {
                return;
            }
            vpe_cpu.store(cpu, Ordering::Release);
        }
        self.make_non_resident(cpu);
        if rd.make_resident(tables.config.address(), ID_BITS, vpt).is_ok() {
            if let Some(resident) = self.resident.get(cpu) {
                resident.store(vpe, Ordering::Release);
            }
        }
    }

    fn make_non_resident(&self, cpu: usize) -> bool {
        let Some(resident) = self.resident.get(cpu) else { return false };
        if resident.load(Ordering::Relaxed) == NONE {
            return false;
        }
        resident.store(NONE, Ordering::Relaxed);
        let Some(&Some((rd, _))) = self.redistributors.get(cpu) else { return false };
        // A redistributor that never settles is reported as holding a vLPI: the vCPU then
        // does not wait for a doorbell that may not come.
        rd.make_non_resident().unwrap_or(true)
    }

    fn doorbell(&self, intid: u32) -> Option<(usize, usize)> {
        let vpe = intid.checked_sub(FIRST_LPI)? as usize;
        let vm = self.slot_vm.get(vpe / VPES_PER_SLOT)?.load(Ordering::Acquire);
        (vm != NONE).then_some((vm, vpe % VPES_PER_SLOT))
    }
}

#[cfg(test)]
mod tests;
