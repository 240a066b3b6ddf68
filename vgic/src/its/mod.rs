//! A virtual GICv3 ITS (Interrupt Translation Service, IHI 0069H chapter 5 and 12.19): it
//! owns the translation of a device's MSI (a DeviceID and an EventID) to an LPI and a vCPU,
//! and the guest's side of it, its registers and command queue. The LPIs' own state
//! (pending, priority, enable) is the distributor's, which the commands reach through
//! [`LpiTable`]; the queue is in the guest's RAM, read through [`GuestMemory`].
//!
//! What the guest sees: a physical ITS (GITS_TYPER, `registers::typer`) whose device
//! table, ITTs and collections are held inside it (GITS_BASER0 names a device table it never
//! reads, the others read 0; HCC is the number of vCPUs), 16-bit DeviceIDs and EventIDs,
//! RDbase as a processor number. Commands run [`COMMANDS_PER_ACCESS`] at a time: in the
//! GITS_CWRITER write that posts them (or the GITS_CTLR write that enables the ITS), then
//! in each access to the ITS ([`Its::advance`]), which the guest makes as it polls
//! GITS_CREADR; GITS_CTLR.Quiescent reads 1 once none waits. A command the specification
//! makes an error is ignored (IHI 0069H 5.3, "ITS command error encodings": the ITS may
//! ignore it) and reported in the access's [`CommandErrors`]; `execute` lists the checks.
//!
//! One rule is this ITS's own: an LPI is the translation of one event at most (a MAPTI to
//! an LPI another event translates to is refused), so each LPI has one route, and the vCPU
//! [`Its::translate`] gives for an event is always the one [`LpiTable::route`] last named for
//! its LPI.
//!
//! Everything is allocated in [`Its::new`]; the capacities are in `tables`. No guest value
//! can make it panic, allocate, or run more than [`COMMANDS_PER_ACCESS`] commands in one
//! access: a full queue (32,768 commands), each walking every translation (MAPC, INVALL,
//! MOVALL), would hold the CPU of the vCPU that posted it for tens of milliseconds in one
//! exit, and another VM's vCPU sharing that CPU with it.

mod command;
mod error;
mod execute;
mod guest;
mod queue;
mod registers;
mod tables;

pub use error::{CommandError, CommandErrors, CommandFault, ItsError, TranslationError};
pub use guest::{GuestMemory, LpiTable, OutsideRam};

use crate::mmio::check;
use crate::AccessError;
use execute::Limits;
use queue::CommandQueue;
use registers::{Reg, CTLR_ENABLED, CTLR_QUIESCENT};
use tables::Tables;

/// The ITS's register frames: the control frame (64 KiB) then the translation frame (64 KiB).
pub const GITS_FRAME_SIZE: u64 = 0x2_0000;
/// GITS_TRANSLATER, from the frames' base: where a device's MSI is written.
pub const GITS_TRANSLATER: u64 = 0x1_0040;
/// The first LPI INTID (IHI 0069H 2.2.1).
pub const FIRST_LPI: u32 = 8192;
/// Commands one access to the ITS runs at most: a queue of one 4 KiB page (128), which is
/// Linux's, runs whole in the write that posts it.
pub const COMMANDS_PER_ACCESS: u64 = 256;

/// One mapped event, as [`Its::translations`] lists them: its LPI and collection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MappedEvent {
    pub device_id: u32,
    pub event_id: u32,
    pub lpi: u32,
    pub icid: u16,
}

/// A VM's ITS. A clone (the tests clone whole distributors) keeps the capacity reserved in
/// [`Its::new`], so it allocates no more than the original does.
#[derive(Clone, PartialEq, Eq)]
pub struct Its {
    vcpus: usize,
    lpi_end: u32,
    /// GITS_CTLR.Enabled.
    enabled: bool,
    /// GITS_BASER0's writable fields.
    device_baser: u64,
    queue: CommandQueue,
    tables: Tables,
}

impl core::fmt::Debug for Its {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Its")
            .field("vcpus", &self.vcpus)
            .field("lpi_end", &self.lpi_end)
            .field("enabled", &self.enabled)
            .field("queue", &self.queue)
            .field("translations", &self.tables.translations().len())
            .finish_non_exhaustive()
    }
}

impl Its {
    /// An ITS for a VM of `vcpus` vCPUs whose distributor keeps state for LPIs `FIRST_LPI..FIRST_LPI + lpis`.
    pub fn new(vcpus: usize, lpis: u32) -> Result<Its, ItsError> {
        if vcpus == 0 {
            return Err(ItsError::NoVcpus);
        }
        if vcpus > crate::MAX_VCPUS {
            return Err(ItsError::TooManyVcpus { requested: vcpus, max: crate::MAX_VCPUS });
        }
        if lpis == 0 {
            return Err(ItsError::NoLpis);
        }
        let lpi_end = FIRST_LPI.checked_add(lpis).ok_or(ItsError::TooManyLpis { requested: lpis })?;
        Ok(Its {
            vcpus,
            lpi_end,
            enabled: false,
            device_baser: 0,
            queue: CommandQueue::default(),
            tables: Tables::new(vcpus)?,
        })
    }

    /// A guest read, `offset` from the frames' base.
    pub fn read(&self, offset: u64, width: usize) -> Result<u64, AccessError> {
        let reg = Self::check(offset, width)?;
        let value = match reg {
            Reg::Ctlr if !self.enabled || self.queue.idle() => u64::from(self.enabled) | CTLR_QUIESCENT,
            Reg::Ctlr => CTLR_ENABLED,
            Reg::Iidr => crate::gicd::IIDR,
            Reg::Typer => registers::typer(self.vcpus),
            Reg::Cbaser => self.queue.cbaser,
            Reg::Cwriter => self.queue.cwriter,
            // Stalled, bit 0, reads 0: commands never stall.
            Reg::Creadr => self.queue.creadr,
            Reg::Pidr2 => crate::gicd::PIDR2_V3,
            // GITS_BASER0 names a device table the ITS never reads; the others are
            // unimplemented (Type 0): the collections are the ITS's own (HCC).
            Reg::Baser if offset < registers::GITS_BASER0_END => self.device_baser | registers::BASER_DEVICES,
            Reg::Baser | Reg::Translater | Reg::RazWi => 0,
        };
        Ok(match reg {
            Reg::Typer | Reg::Cbaser | Reg::Cwriter | Reg::Creadr | Reg::Baser => {
                registers::read_part(value, offset, width)
            }
            _ => value,
        })
    }

    /// A guest write. Writing GITS_CWRITER (or enabling the ITS with commands waiting) runs
    /// the queued commands, [`COMMANDS_PER_ACCESS`] at most: GITS_CREADR equals GITS_CWRITER
    /// when the write returns unless more were posted (then `advance` runs the rest).
    /// Commands the spec makes an error are ignored (IHI 0069H 5.3 "ITS command error
    /// encodings": the implementation may ignore the command) and reported in the returned CommandErrors.
    /// A guest CPU's own write to GITS_TRANSLATER is ignored (its DeviceID is not defined here; only devices send MSIs, via `translate`).
    pub fn write(
        &mut self,
        offset: u64,
        width: usize,
        value: u64,
        mem: &impl GuestMemory,
        lpis: &mut impl LpiTable,
    ) -> Result<CommandErrors, AccessError> {
        let reg = Self::check(offset, width)?;
        let mut errors = CommandErrors::default();
        match reg {
            Reg::Ctlr => {
                self.enabled = value & CTLR_ENABLED != 0;
                self.run(mem, lpis, &mut errors);
            }
            // A write while enabled is ignored (IHI 0069H 12.19, GITS_CBASER).
            Reg::Cbaser if !self.enabled => {
                let cbaser = registers::write_part(self.queue.cbaser, offset, width, value);
                self.queue.set_cbaser(cbaser);
            }
            Reg::Cwriter => {
                let cwriter = registers::write_part(self.queue.cwriter, offset, width, value);
                self.queue.set_cwriter(cwriter);
                self.run(mem, lpis, &mut errors);
            }
            // As GITS_CBASER, a write while enabled is ignored.
            Reg::Baser if offset < registers::GITS_BASER0_END && !self.enabled => {
                let baser = registers::write_part(self.device_baser, offset, width, value);
                self.device_baser = baser & registers::BASER_WRITABLE;
            }
            // A CPU's write has no DeviceID (IHI 0069H 5.1: the DeviceID comes with the
            // device's write), and a made-up one would let any vCPU raise any device's LPIs.
            Reg::Translater => {}
            Reg::Cbaser | Reg::Iidr | Reg::Typer | Reg::Creadr | Reg::Baser | Reg::Pidr2 | Reg::RazWi => {}
        }
        Ok(errors)
    }

    /// A device's MSI: the data `event_id` written to GITS_TRANSLATER by device `device_id`
    /// (for PCI, its requester ID). The LPI it makes pending and the vCPU it goes to.
    /// O(log devices), without allocation.
    pub fn translate(&self, device_id: u32, event_id: u32) -> Result<(u32, usize), TranslationError> {
        if !self.enabled {
            return Err(TranslationError::Disabled);
        }
        let events = self.tables.events(device_id).ok_or(TranslationError::DeviceNotMapped { device_id })?;
        if event_id >= events {
            return Err(TranslationError::EventOutOfRange { device_id, event_id, events });
        }
        let t = self
            .tables
            .find(device_id, event_id)
            .and_then(|i| self.tables.translation(i))
            .ok_or(TranslationError::EventNotMapped { device_id, event_id })?;
        match self.tables.collection(t.icid).flatten() {
            // `routed` is the collection's vCPU unless MOVALL moved the LPI since.
            Some(vcpu) => Ok((t.lpi, t.routed.map_or(vcpu, usize::from))),
            None => Err(TranslationError::CollectionNotMapped { device_id, event_id, icid: t.icid }),
        }
    }

    /// Back to the state at creation (a VM reset); LpiTable::unmap for every mapped LPI.
    pub fn reset(&mut self, lpis: &mut impl LpiTable) {
        for t in self.tables.translations() {
            lpis.unmap(t.lpi);
        }
        self.tables.clear();
        self.enabled = false;
        self.device_baser = 0;
        self.queue = CommandQueue::default();
    }

    /// Every mapped event, in no particular order.
    pub fn translations(&self) -> impl Iterator<Item = MappedEvent> + '_ {
        self.tables.translations().iter().map(|t| MappedEvent {
            device_id: t.device_id,
            event_id: u32::from(t.event_id),
            lpi: t.lpi,
            icid: t.icid,
        })
    }

    /// GITS_CTLR.Enabled.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Runs the next commands waiting, [`COMMANDS_PER_ACCESS`] at most: what the
    /// hypervisor does at each guest access to the ITS, before the access itself.
    pub fn advance(&mut self, mem: &impl GuestMemory, lpis: &mut impl LpiTable) -> CommandErrors {
        let mut errors = CommandErrors::default();
        if !self.queue.idle() {
            self.run(mem, lpis, &mut errors);
        }
        errors
    }

    /// Runs the queued commands if the ITS is enabled (GITS_CBASER.Valid is the queue's),
    /// [`COMMANDS_PER_ACCESS`] at most.
    fn run(&mut self, mem: &impl GuestMemory, lpis: &mut impl LpiTable, errors: &mut CommandErrors) {
        if !self.enabled {
            return;
        }
        let limits = Limits { vcpus: self.vcpus, lpi_end: self.lpi_end };
        let tables = &mut self.tables;
        self.queue.drain(mem, errors, COMMANDS_PER_ACCESS, |dw| execute::execute(tables, limits, dw, lpis));
    }

    fn check(offset: u64, width: usize) -> Result<Reg, AccessError> {
        if offset >= GITS_FRAME_SIZE {
            return Err(AccessError::OutsideFrame { offset });
        }
        let (reg, allowed) = registers::decode(offset);
        check(offset, width, allowed)?;
        Ok(reg)
    }
}
