//! LPIs (IHI 0069H 5.1, "LPIs"): the message-based interrupts a VM's ITS translates its
//! devices' MSIs into. Each is kept as an SPI is, in the distributor's shared slots after
//! the SPIs (`Distributor::shared_slot`): an edge-triggered Group 1 interrupt routed to the
//! vCPU its ITS collection names. What differs is owned here:
//! - its priority and enable bit come from the guest's LPI configuration table
//!   (GICR_PROPBASER), read when the ITS says the guest changed them (INV, INVALL, a new
//!   mapping: IHI 0069H 5.1.1 lets the GIC cache them until then);
//! - it has no active state (IHI 0069H 4.1): a list register shows it active between the
//!   guest's acknowledgement and its EOI, which finds it there; a list register taken back
//!   while it is active (spilled for another, or the vCPU leaving its CPU) ends the active
//!   state, for the guest's EOI of an LPI no list register holds is not counted (no
//!   EOIcount: IHI 0069H, ICH_HCR_EL2) and would leave it active for good;
//! - its pending state is kept here, not in the guest's LPI pending table (GICR_PENDBASER),
//!   which the hypervisor neither reads nor writes: IHI 0069H 5.1.2 makes the table's
//!   contents the redistributor's own while GICR_CTLR.EnableLPIs is 1.

use core::fmt;

use crate::its::{CommandErrors, GuestMemory, LpiTable, TranslationError, FIRST_LPI};
use crate::state::PRIORITY_MASK;
use crate::{AccessError, Distributor, IntId};

/// LPIs a VM may have: INTIDs 8192 to 8192 + 1023. Linux allocates its LPIs from the
/// lowest INTID up, a few per device.
pub const MAX_LPIS: usize = 1024;

/// The route of an LPI no event translates to: Aff2 = 0xff, which `Distributor::target`
/// finds no vCPU at.
pub(crate) const UNROUTED: u32 = 0xff << 16;

/// GICR_PROPBASER bits that hold state (IHI 0069H 12.11.23): IDbits [4:0], InnerCache
/// [9:7], Shareability [11:10], Physical_Address [51:12], OuterCache [58:56].
const PROPBASER_MASK: u64 = 0x0700_ffff_ffff_ff9f;
/// GICR_PENDBASER bits that hold state (IHI 0069H 12.11.22): InnerCache [9:7],
/// Shareability [11:10], Physical_Address [51:16], OuterCache [58:56]; PTZ [62] reads 0.
const PENDBASER_MASK: u64 = 0x0700_ffff_ffff_0f80;
/// An LPI configuration byte (IHI 0069H 5.1.1): Priority [7:2], Enable [0].
const CONFIG_ENABLE: u8 = 1;

/// A redistributor's LPI registers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) struct LpiRegisters {
    pub(crate) propbaser: u64,
    pub(crate) pendbaser: u64,
    /// GICR_CTLR.EnableLPIs: once set, it stays set until the VM is reset (IHI 0069H
    /// 12.11.2 lets an implementation refuse to clear it).
    pub(crate) enabled: bool,
}

impl LpiRegisters {
    /// A write of GICR_PROPBASER or GICR_PENDBASER (`high`: its upper word alone).
    /// Ignored while LPIs are enabled (IHI 0069H 12.11.22, 12.11.23: UNPREDICTABLE then).
    pub(crate) fn write_base(&mut self, pending: bool, value: u64, width: usize, high: bool) {
        if self.enabled {
            return;
        }
        let (reg, mask) =
            if pending { (&mut self.pendbaser, PENDBASER_MASK) } else { (&mut self.propbaser, PROPBASER_MASK) };
        let merged = match (width, high) {
            (8, _) => value,
            (_, false) => (*reg & !0xffff_ffff) | (value & 0xffff_ffff),
            (_, true) => (*reg & 0xffff_ffff) | (value << 32),
        };
        *reg = merged & mask;
    }

    /// The configuration byte of `lpi` from the table GICR_PROPBASER names; None while LPIs
    /// are off, beyond the table's IDbits, or where the table is not the VM's RAM.
    fn config(&self, lpi: u32, mem: &impl GuestMemory) -> Option<u8> {
        let id_bits = (self.propbaser & 0x1f) as u32 + 1;
        if !self.enabled || id_bits < 14 || u64::from(lpi) >= 1u64 << id_bits.min(32) {
            return None;
        }
        let at = (self.propbaser & 0x000f_ffff_ffff_f000).checked_add(u64::from(lpi - FIRST_LPI))?;
        let mut byte = [0];
        mem.read(at, &mut byte).ok()?;
        Some(byte[0])
    }
}

impl Distributor {
    /// LPIs this VM has (INTIDs `FIRST_LPI..FIRST_LPI + lpis`).
    pub fn lpis(&self) -> usize {
        self.lpis
    }

    /// The vCPU LPI `lpi` is routed to (its ITS collection's), if it is one of the VM's
    /// LPIs and routed.
    pub fn lpi_target(&self, lpi: IntId) -> Option<usize> {
        self.lpi_slot(lpi.0)?;
        self.target(0, lpi.0).filter(|&v| v < self.vcpus)
    }

    /// Whether a shared slot is an LPI's (after the SPIs').
    pub(crate) fn is_lpi_slot(&self, slot: usize) -> bool {
        slot.wrapping_sub(self.spis) < self.lpis
    }

    /// Where LPI `lpi`'s state is kept, if it is one of the VM's LPIs (not an SPI).
    fn lpi_slot(&self, lpi: u32) -> Option<usize> {
        self.shared_slot(lpi).filter(|&s| self.is_lpi_slot(s))
    }

    /// `lpi` becomes pending, as an edge (a device's MSI, an INT command): its vCPU looks.
    fn make_lpi_pending(&mut self, lpi: u32) {
        if self.lpi_slot(lpi).is_some() && !self.direct_pending(lpi, true) {
            if let Some(s) = self.irq_mut(0, lpi) {
                s.set_latch(true);
            }
            self.kick_target(0, lpi);
        }
    }

    /// `lpi`'s priority and enable bit read again from the configuration table of the
    /// redistributor it is routed to (all of them name the same table: Linux writes one
    /// GICR_PROPBASER everywhere); disabled if it reaches no vCPU or the byte cannot be read.
    pub(crate) fn reload_lpi_config(&mut self, lpi: u32, mem: &impl GuestMemory) {
        let config =
            self.target(0, lpi).and_then(|vcpu| self.redistributors.get(vcpu)).and_then(|rd| rd.lpi.config(lpi, mem));
        self.direct_changed(lpi);
        let Some(s) = self.irq_mut(0, lpi) else { return };
        let before = *s;
        s.set_enabled(config.is_some_and(|c| c & CONFIG_ENABLE != 0));
        s.priority = config.unwrap_or(0) & PRIORITY_MASK;
        if *s != before {
            self.kick_target(0, lpi);
        }
    }

    /// GICR_CTLR.EnableLPIs set on `vcpu`'s redistributor: the LPIs routed there take
    /// their configuration from its table now.
    pub(crate) fn enable_lpis(&mut self, vcpu: usize, mem: &impl GuestMemory) {
        let Some(rd) = self.redistributors.get_mut(vcpu) else { return };
        if rd.lpi.enabled {
            return;
        }
        rd.lpi.enabled = true;
        for slot in self.spis..self.spis + self.lpis {
            let lpi = self.shared_intid(slot);
            if self.target(0, lpi) == Some(vcpu) {
                self.reload_lpi_config(lpi, mem);
            }
        }
    }

    /// The vCPU whose list register holds `lpi`, or that it is pending for: both look again
    /// after a change that may take it away from one and give it to the other.
    fn kick_holder_and_target(&mut self, lpi: u32) {
        if let Some(holder) = self.shared_slot(lpi).and_then(|slot| {
            let (&owner, &s) = (self.spi_owner.get(slot)?, self.spi.get(slot)?);
            crate::distributor::spi_holder(owner, s)
        }) {
            self.kicks.insert(holder);
        }
        self.kick_target(0, lpi);
    }
}

/// No RAM at all: what a VM's vGIC reads where the caller gives it none (the GICv2
/// paths, the tests that need no table).
pub struct NoMemory;

impl GuestMemory for NoMemory {
    fn read(&self, _ipa: u64, _buf: &mut [u8]) -> Result<(), crate::its::OutsideRam> {
        Err(crate::its::OutsideRam)
    }
}

/// Why a device's MSI made nothing pending.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MsiError {
    /// The VM has no ITS (its vGIC has no LPIs).
    NoIts,
    /// The ITS has no translation for it.
    Untranslated(TranslationError),
}

impl fmt::Display for MsiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoIts => write!(f, "the VM has no ITS to translate an MSI"),
            Self::Untranslated(e) => write!(f, "the ITS translates it to no LPI: {e:?}"),
        }
    }
}

impl Distributor {
    /// A guest read of the ITS's frames, `offset` from their base, after the next commands
    /// waiting have run (`Its::advance`: the guest polls GITS_CREADR until they have).
    pub fn read_its(
        &mut self,
        offset: u64,
        width: usize,
        mem: &impl GuestMemory,
    ) -> Result<(u64, CommandErrors), AccessError> {
        let mut its = self.its.take().ok_or(AccessError::NoIts { offset })?;
        let errors = its.advance(mem, &mut LpiUpdate { gic: self, mem });
        let value = its.read(offset, width);
        self.its = Some(its);
        Ok((value?, errors))
    }

    /// A guest write of the ITS's frames: a write of GITS_CWRITER runs the commands it
    /// queued (a bounded number: `Its::advance`), with their effects on the LPIs
    /// (configuration read from `mem`) made here.
    pub fn write_its(
        &mut self,
        offset: u64,
        width: usize,
        value: u64,
        mem: &impl GuestMemory,
    ) -> Result<CommandErrors, AccessError> {
        let mut its = self.its.take().ok_or(AccessError::NoIts { offset })?;
        let mut update = LpiUpdate { gic: self, mem };
        let mut errors = its.advance(mem, &mut update);
        let done = its.write(offset, width, value, mem, &mut update);
        self.its = Some(its);
        errors.merge(done?);
        Ok(errors)
    }

    /// A device's MSI: `event_id` written to GITS_TRANSLATER by device `device_id`. The
    /// LPI it translates to becomes pending, and its vCPU looks (`take_kicks`).
    pub fn send_msi(&mut self, device_id: u32, event_id: u32) -> Result<IntId, MsiError> {
        let its = self.its.as_ref().ok_or(MsiError::NoIts)?;
        let (lpi, _) = its.translate(device_id, event_id).map_err(MsiError::Untranslated)?;
        self.make_lpi_pending(lpi);
        Ok(IntId(lpi))
    }
}

/// The distributor as the ITS's commands change it, with the guest memory its
/// configuration table is read from.
pub(crate) struct LpiUpdate<'a, M: GuestMemory> {
    pub(crate) gic: &'a mut Distributor,
    pub(crate) mem: &'a M,
}

impl<M: GuestMemory> LpiTable for LpiUpdate<'_, M> {
    fn route(&mut self, lpi: u32, vcpu: usize) {
        let Some(slot) = self.gic.lpi_slot(lpi) else { return };
        if vcpu >= self.gic.vcpus {
            return;
        }
        let route = Distributor::vcpu_affinity(vcpu) as u32;
        if self.gic.route.get(slot) == Some(&route) {
            return;
        }
        self.gic.kick_holder_and_target(lpi);
        if let Some(r) = self.gic.route.get_mut(slot) {
            *r = route;
        }
        // The new redistributor's EnableLPIs decides whether it is delivered.
        self.gic.reload_lpi_config(lpi, self.mem);
        self.gic.kick_target(0, lpi);
    }

    fn unmap(&mut self, lpi: u32) {
        let Some(slot) = self.gic.lpi_slot(lpi) else { return };
        self.clear_pending(lpi);
        if let Some(s) = self.gic.irq_mut(0, lpi) {
            s.set_enabled(false);
        }
        if let Some(r) = self.gic.route.get_mut(slot) {
            *r = UNROUTED;
        }
        self.gic.direct_changed(lpi);
    }

    fn set_pending(&mut self, lpi: u32) {
        self.gic.make_lpi_pending(lpi);
    }

    fn clear_pending(&mut self, lpi: u32) {
        if self.gic.lpi_slot(lpi).is_some() {
            self.gic.direct_pending(lpi, false);
            if let Some(s) = self.gic.irq_mut(0, lpi) {
                s.set_latch(false);
                s.set_lr_pending(false);
            }
            self.gic.kick_holder_and_target(lpi);
        }
    }

    fn invalidate(&mut self, lpi: u32) {
        if self.gic.lpi_slot(lpi).is_some() {
            self.gic.reload_lpi_config(lpi, self.mem);
        }
    }
}
