//! A redistributor's LPI registers, for GICv4.0 direct injection: the physical LPI tables
//! its doorbells need (GICR_PROPBASER, GICR_PENDBASER, GICR_CTLR.EnableLPIs) and a vPE's
//! residency (GICR_VPROPBASER, GICR_VPENDBASER in the VLPI frame). IHI 0069H 12.11 (the
//! registers), 5.1 (the LPI configuration and pending tables).
//!
//! The redistributor is the one `Gic` found for a CPU (`Gic::lpi_redistributor`); with
//! GICR_TYPER.VLPIS its frames are RD, SGI, VLPI (at +0x2_0000) and a reserved one.

use super::command::Lpi;
use super::{ItsError, ItsMemory};
use crate::mmio::Frame;
use vgic::FIRST_LPI;

// IHI 0069H 12.11: in the RD frame, and in the VLPI frame.
pub const GICR_CTLR: usize = 0x0000;
pub const GICR_TYPER: usize = 0x0008;
pub const GICR_PROPBASER: usize = 0x0070;
pub const GICR_PENDBASER: usize = 0x0078;
pub const GICR_VLPI_FRAME: usize = 0x2_0000;
pub const GICR_VPROPBASER: usize = GICR_VLPI_FRAME + 0x0070;
pub const GICR_VPENDBASER: usize = GICR_VLPI_FRAME + 0x0078;

/// GICR_CTLR.EnableLPIs [0]; GICR_TYPER.PLPIS [0], VLPIS [1].
const CTLR_ENABLE_LPIS: u32 = 1;
const TYPER_VLPIS: u64 = 1 << 1;
/// InnerCache [9:7] 0b111 (write-back, read- and write-allocate), Shareability [11:10] 0b01
/// (Inner Shareable), as the four *BASER registers here place them.
const CACHEABLE_INNER_SHAREABLE: u64 = 0b111 << 7 | 0b01 << 10;
/// Physical_Address [51:12] (GICR_PROPBASER, GICR_VPROPBASER), [51:16] (the pending tables).
const CONFIG_PA_MASK: u64 = ((1 << 52) - 1) & !0xfff;
const PENDING_PA_MASK: u64 = ((1 << 52) - 1) & !0xffff;
/// GICR_PENDBASER.PTZ [62]: the pending table is zero (it was allocated zeroed).
const PENDBASER_PTZ: u64 = 1 << 62;
/// GICR_VPENDBASER (GICv4.0): Valid [63], IDAI [62], PendingLast [61], Dirty [60].
pub const VPENDBASER_VALID: u64 = 1 << 63;
pub const VPENDBASER_IDAI: u64 = 1 << 62;
pub const VPENDBASER_PENDING_LAST: u64 = 1 << 61;
pub const VPENDBASER_DIRTY: u64 = 1 << 60;
/// Polls of GICR_VPENDBASER.Dirty after the vPE is made not resident (QEMU's is always 0).
const DIRTY_POLLS: u32 = 1_000_000;

/// The LPI ID widths the tables here are built for: from the first LPI to 16 M INTIDs.
const ID_BITS: core::ops::RangeInclusive<u32> = 14..=24;

/// An LPI configuration table's byte (IHI 0069H 5.1.1): Priority [7:2], bit [1] RES1,
/// Enable [0].
pub const fn lpi_config(priority: u8, enabled: bool) -> u8 {
    (priority & 0xfc) | 1 << 1 | enabled as u8
}

fn check_id_bits(bits: u32) -> Result<(), ItsError> {
    if ID_BITS.contains(&bits) {
        Ok(())
    } else {
        Err(ItsError::IdBits { bits })
    }
}

/// An LPI configuration table (one byte per LPI from 8192), in memory the hypervisor keeps:
/// the physical one of the doorbells (GICR_PROPBASER, shared by every redistributor), or a
/// VM's vLPI one (GICR_VPROPBASER).
pub struct LpiConfigTable {
    base: usize,
    id_bits: u32,
}

impl LpiConfigTable {
    /// A zeroed table (every LPI disabled) for INTIDs of `id_bits` bits (14 to 24).
    pub fn allocate(id_bits: u32, memory: &mut impl ItsMemory) -> Result<Self, ItsError> {
        check_id_bits(id_bits)?;
        let bytes = (1usize << id_bits) - FIRST_LPI as usize;
        let base =
            memory.allocate_zeroed(bytes, 4096).ok_or(ItsError::OutOfMemory { table: "LPI configuration", bytes })?;
        Ok(LpiConfigTable { base, id_bits })
    }

    pub fn address(&self) -> u64 {
        self.base as u64
    }

    pub fn id_bits(&self) -> u32 {
        self.id_bits
    }

    /// Sets `lpi`'s priority and enable. A redistributor that already uses the table may
    /// cache the old byte until an invalidation (an INV of an event mapped to it).
    pub fn set(&self, lpi: Lpi, priority: u8, enabled: bool) -> Result<(), ItsError> {
        if !(FIRST_LPI..1 << self.id_bits).contains(&lpi.0) {
            return Err(ItsError::NotAnLpi { intid: lpi.0 });
        }
        let at = self.base + (lpi.0 - FIRST_LPI) as usize;
        // SAFETY: `at` is inside the table `allocate` took (one byte per LPI below
        // 2^id_bits), which is the hypervisor's for good.
        unsafe { (at as *mut u8).write_volatile(lpi_config(priority, enabled)) };
        Ok(())
    }

    /// The byte of `lpi`, as `set` left it; None outside the table.
    pub fn get(&self, lpi: Lpi) -> Option<u8> {
        (FIRST_LPI..1 << self.id_bits).contains(&lpi.0).then(|| {
            // SAFETY: inside the table, as in `set`.
            unsafe { ((self.base + (lpi.0 - FIRST_LPI) as usize) as *const u8).read_volatile() }
        })
    }
}

/// A zeroed pending table for INTIDs of `id_bits` bits (one bit per INTID, 64 KiB aligned):
/// a redistributor's physical one (GICR_PENDBASER) or a vPE's (VMAPP, GICR_VPENDBASER).
pub fn allocate_pending_table(id_bits: u32, memory: &mut impl ItsMemory) -> Result<u64, ItsError> {
    check_id_bits(id_bits)?;
    let bytes = (1usize << id_bits) / 8;
    let base = memory.allocate_zeroed(bytes, 0x1_0000).ok_or(ItsError::OutOfMemory { table: "LPI pending", bytes })?;
    Ok(base as u64)
}

/// One CPU's redistributor, by its RD frame.
#[derive(Clone, Copy, Debug)]
pub struct LpiRedistributor {
    rd: Frame,
}

impl LpiRedistributor {
    /// # Safety
    ///
    /// `rd` is the RD frame of a redistributor, mapped as device memory for the rest of the
    /// program with the frames that follow it (two more with GICR_TYPER.VLPIS).
    pub const unsafe fn new(rd: usize) -> Self {
        // SAFETY: the caller's contract.
        LpiRedistributor { rd: unsafe { Frame::new(rd) } }
    }

    pub fn address(&self) -> u64 {
        self.rd.base() as u64
    }

    pub fn typer(&self) -> u64 {
        self.rd.read64(GICR_TYPER)
    }

    /// GICR_TYPER.Processor_Number [23:8]: the RDbase of commands with GITS_TYPER.PTA = 0.
    pub fn processor_number(&self) -> u16 {
        (self.typer() >> 8) as u16
    }

    /// Whether it has virtual LPIs (GICR_TYPER.VLPIS): a GICv4's.
    pub fn has_virtual_lpis(&self) -> bool {
        self.typer() & TYPER_VLPIS != 0
    }

    fn check_vlpis(&self) -> Result<(), ItsError> {
        if !self.has_virtual_lpis() {
            return Err(ItsError::NoVirtualLpis);
        }
        Ok(())
    }

    /// Gives the redistributor the physical LPI tables, `config` (shared) and a new pending
    /// table from `memory`, then sets GICR_CTLR.EnableLPIs: once set, it may not be cleared
    /// on every implementation, and the tables then cannot change. Returns the pending
    /// table's address.
    pub fn enable_lpis(&self, config: &LpiConfigTable, memory: &mut impl ItsMemory) -> Result<u64, ItsError> {
        let ctlr = self.rd.read32(GICR_CTLR);
        if ctlr & CTLR_ENABLE_LPIS != 0 {
            return Err(ItsError::LpisAlreadyEnabled);
        }
        let pending = allocate_pending_table(config.id_bits, memory)?;
        let propbaser = (config.address() & CONFIG_PA_MASK) | CACHEABLE_INNER_SHAREABLE | u64::from(config.id_bits - 1);
        self.rd.write64(GICR_PROPBASER, propbaser);
        self.rd.write64(GICR_PENDBASER, (pending & PENDING_PA_MASK) | CACHEABLE_INNER_SHAREABLE | PENDBASER_PTZ);
        self.rd.write32(GICR_CTLR, ctlr | CTLR_ENABLE_LPIS);
        Ok(pending)
    }

    /// Makes a vPE resident: its VM's vLPI configuration table at `vprop_pa` (4 KiB aligned,
    /// vINTIDs of `id_bits` bits) in GICR_VPROPBASER, then its pending table `vpt_pa` (64 KiB
    /// aligned, the address its VMAPP gave) in GICR_VPENDBASER with Valid. Only while no vPE
    /// is resident (changing GICR_VPENDBASER while Valid is UNPREDICTABLE).
    ///
    /// PendingLast and IDAI are written set: the redistributor scans the pending table
    /// rather than trusting a summary it may not have (a fresh table, or one another
    /// redistributor wrote).
    pub fn make_resident(&self, vprop_pa: u64, id_bits: u32, vpt_pa: u64) -> Result<(), ItsError> {
        self.check_vlpis()?;
        check_id_bits(id_bits)?;
        if vprop_pa & 0xfff != 0 {
            return Err(ItsError::Misaligned { what: "vLPI configuration table", address: vprop_pa });
        }
        if vpt_pa & 0xffff != 0 {
            return Err(ItsError::Misaligned { what: "virtual pending table", address: vpt_pa });
        }
        if self.rd.read64(GICR_VPENDBASER) & VPENDBASER_VALID != 0 {
            return Err(ItsError::AlreadyResident);
        }
        let vpropbaser = (vprop_pa & CONFIG_PA_MASK) | CACHEABLE_INNER_SHAREABLE | u64::from(id_bits - 1);
        self.rd.write64(GICR_VPROPBASER, vpropbaser);
        let vpendbaser = (vpt_pa & PENDING_PA_MASK)
            | CACHEABLE_INNER_SHAREABLE
            | VPENDBASER_VALID
            | VPENDBASER_IDAI
            | VPENDBASER_PENDING_LAST;
        self.rd.write64(GICR_VPENDBASER, vpendbaser);
        Ok(())
    }

    /// Makes the resident vPE not resident: GICR_VPENDBASER.Valid cleared (its table and
    /// attributes kept), then Dirty polled until the redistributor has written the pending
    /// table back. Returns PendingLast: whether a vLPI of the vPE is pending. False, with
    /// nothing written, if no vPE was resident.
    pub fn make_non_resident(&self) -> Result<bool, ItsError> {
        self.check_vlpis()?;
        let vpendbaser = self.rd.read64(GICR_VPENDBASER);
        if vpendbaser & VPENDBASER_VALID == 0 {
            return Ok(false);
        }
        let status = VPENDBASER_VALID | VPENDBASER_IDAI | VPENDBASER_PENDING_LAST | VPENDBASER_DIRTY;
        self.rd.write64(GICR_VPENDBASER, vpendbaser & !status);
        let settled = settle(|| self.rd.read64(GICR_VPENDBASER), DIRTY_POLLS)?;
        Ok(settled & VPENDBASER_PENDING_LAST != 0)
    }
}

/// Reads GICR_VPENDBASER until Dirty is clear, at most `polls` times: its value then.
pub(crate) fn settle(mut read: impl FnMut() -> u64, polls: u32) -> Result<u64, ItsError> {
    for _ in 0..polls {
        let value = read();
        if value & VPENDBASER_DIRTY == 0 {
            return Ok(value);
        }
        core::hint::spin_loop();
    }
    Err(ItsError::StillDirty)
}
