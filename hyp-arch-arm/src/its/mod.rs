//! The board's ITS, as the hypervisor owns it for GICv4.0 direct injection of LPIs
//! (docs/vgic.md, "Direct injection of LPIs"): its tables and command queue set up once at
//! boot, collections and DeviceID 0 mapped, and an event raised by a write of
//! GITS_TRANSLATER. The GICv4.0 redistributor registers (the doorbells' LPI tables, a vPE's
//! residency) are in `redistributor`.
//!
//! - `command`: the commands' encodings (IHI 0069H 5.3).
//! - `queue`: the command queue (GITS_CBASER, GITS_CWRITER, GITS_CREADR).
//! - `redistributor`: GICR_PROPBASER, GICR_PENDBASER, GICR_VPROPBASER, GICR_VPENDBASER.
//!
//! The ITS registers: IHI 0069H 12.19. Every table is flat (GITS_BASER<n>.Indirect 0) in
//! 4 KiB pages, from memory the caller gives (`ItsMemory`), which the hypervisor keeps for
//! good: the ITS reads and writes it behind the hypervisor's back.

pub mod command;
pub mod queue;
pub mod redistributor;
pub mod vlpis;

use core::alloc::Layout;
use core::marker::PhantomData;

use hyp_core::platform::MAX_CPUS;

use crate::gic::CpuInterfaceRegisters;
use crate::mmio::Frame;
use command::{CollectionId, DeviceId, EventId, ItsCommand, RdBase};
use queue::ItsQueue;

// The ITS's registers (IHI 0069H 12.19): the control frame, then the translation frame
// 64 KiB on.
pub const GITS_CTLR: usize = 0x0000;
pub const GITS_TYPER: usize = 0x0008;
pub const GITS_CBASER: usize = 0x0080;
pub const GITS_CWRITER: usize = 0x0088;
pub const GITS_CREADR: usize = 0x0090;
/// GITS_BASER<n>, n = 0 to 7, 8 bytes apart.
pub const GITS_BASER: usize = 0x0100;
pub const GITS_BASERS: usize = 8;
pub const GITS_TRANSLATER: usize = 0x1_0040;
/// The two 64 KiB frames the ITS's base names.
pub const ITS_SIZE: usize = 0x2_0000;

/// GITS_CTLR.Enabled [0], Quiescent [31] (IHI 0069H 12.19, GITS_CTLR).
const CTLR_ENABLED: u32 = 1;
const CTLR_QUIESCENT: u32 = 1 << 31;

/// GITS_BASER<n> (IHI 0069H 12.19, GITS_BASER<n>): Valid [63], Type [58:56], Entry_Size
/// [52:48] (bytes minus one), Physical_Address [47:12] with 4 KiB pages, Page_Size [9:8]
/// (0: 4 KiB), Size [7:0] (pages minus one).
const BASER_VALID: u64 = 1 << 63;
const BASER_PA_MASK: u64 = ((1 << 48) - 1) & !0xfff;
const BASER_PAGE_SIZE: u64 = 0b11 << 8;
const BASER_MAX_PAGES: usize = 256;
/// GITS_BASER<n>.Type: devices, vPEs, collections.
pub const TABLE_DEVICES: u8 = 1;
pub const TABLE_VPES: u8 = 2;
pub const TABLE_COLLECTIONS: u8 = 4;

/// InnerCache [61:59] 0b111 (Normal, write-back, read- and write-allocate) and Shareability
/// [11:10] 0b01 (Inner Shareable), as GITS_BASER<n> and GITS_CBASER place them: the ITS
/// reads the tables and the queue coherently with the CPUs' caches.
const CACHEABLE_INNER_SHAREABLE: u64 = 0b111 << 59 | 0b01 << 10;
const SHAREABILITY: u64 = 0b11 << 10;

/// The 4 KiB page the tables and the queue are counted in.
const PAGE: usize = 4096;
/// The command queue's length: 128 commands, far more than bring-up or one guest command sends.
const QUEUE_PAGES: usize = 1;
/// An ITT's alignment (IHI 0069H 5.3, MAPD: ITT_addr [51:8]).
const ITT_ALIGN: usize = 256;

/// Zeroed, physically contiguous memory that the hypervisor keeps for as long as the ITS or
/// a redistributor may use it. The address is both the pointer and the physical address
/// (the hypervisor's heap is identity-mapped: `HeapItsMemory`).
pub trait ItsMemory {
    /// `bytes` zeroed bytes aligned to `align` (a power of two), or None when there is no
    /// such memory.
    fn allocate_zeroed(&mut self, bytes: usize, align: usize) -> Option<usize>;
}

/// The hypervisor's heap as the ITS's memory. What it hands out is never freed.
pub struct HeapItsMemory;

impl ItsMemory for HeapItsMemory {
    fn allocate_zeroed(&mut self, bytes: usize, align: usize) -> Option<usize> {
        let layout = Layout::from_size_align(bytes, align).ok().filter(|l| l.size() > 0)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(ptr as usize)
    }
}

/// What went wrong with the board's ITS or a redistributor's LPI registers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ItsError {
    /// The allocator had no `bytes` for this table: give the hypervisor a larger heap, or
    /// ask for fewer vPEs or events.
    OutOfMemory { table: &'static str, bytes: usize },
    /// A table would need more than 256 pages of 4 KiB (GITS_BASER<n>.Size is 8 bits): ask
    /// for fewer vPEs.
    TableTooLarge { baser: usize, pages: usize },
    /// GITS_BASER<n> read back another Page_Size than the 4 KiB written: this ITS's tables
    /// need pages of another size, which this driver does not build.
    PageSizeRefused { baser: usize },
    /// The register read back Shareability 0: the ITS does not read memory coherently
    /// with the CPUs' caches, and this driver does no cache maintenance.
    NotCoherent { register: &'static str },
    /// The ITS has no table of this GITS_BASER<n>.Type, which the hypervisor needs.
    NoTable { table_type: u8 },
    /// The ITS was enabled and did not become quiescent once disabled.
    NotQuiescent,
    /// The command queue's size must be 1 to 256 pages.
    QueueSize { pages: usize },
    /// The ITS stopped at the command at this offset of the queue (GITS_CREADR.Stalled): a
    /// command it could not execute (an unmapped table, an address outside memory).
    Stalled { command: u8, offset: u32 },
    /// GITS_CREADR did not move towards GITS_CWRITER for the whole wait: the ITS is not
    /// running (not enabled, or broken).
    NoProgress { creadr: u32, cwriter: u32 },
    /// A device's events need more EventID bits than GITS_TYPER.IDbits gives.
    TooManyEvents { events: u32, max_bits: u32 },
    /// A DeviceID beyond GITS_TYPER.Devbits or the device table.
    DeviceOutOfRange { device: u32 },
    /// The redistributor has no virtual LPIs (GICR_TYPER.VLPIS is 0), or the ITS none
    /// (GITS_TYPER.Virtual is 0): the board's GIC is not a GICv4.
    NoVirtualLpis,
    /// GICR_CTLR.EnableLPIs was already set (by the firmware): the LPI tables can no longer
    /// be given to the redistributor.
    LpisAlreadyEnabled,
    /// An LPI ID width outside 14 (the first LPI, 8192) to 24 bits.
    IdBits { bits: u32 },
    /// An INTID that is not an LPI of the table's width.
    NotAnLpi { intid: u32 },
    /// An address without the alignment its register needs (4 KiB for a configuration
    /// table, 64 KiB for a pending table).
    Misaligned { what: &'static str, address: u64 },
    /// GICR_VPENDBASER.Valid is already set: another vPE is resident on this redistributor.
    AlreadyResident,
    /// GICR_VPENDBASER.Dirty stayed set after the vPE was made not resident.
    StillDirty,
}

impl core::fmt::Display for ItsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ItsError::OutOfMemory { table, bytes } => write!(f, "no memory for the ITS's {table} ({bytes} bytes)"),
            ItsError::TableTooLarge { baser, pages } => {
                write!(f, "GITS_BASER{baser} would need {pages} pages of 4 KiB (at most 256): ask for fewer vPEs")
            }
            ItsError::PageSizeRefused { baser } => write!(f, "GITS_BASER{baser} refused 4 KiB pages"),
            ItsError::NotCoherent { register } => {
                write!(f, "{register} is not shareable: this ITS needs cache maintenance, which is not built")
            }
            ItsError::NoTable { table_type } => write!(f, "the ITS has no GITS_BASER of type {table_type}"),
            ItsError::NotQuiescent => write!(f, "the ITS did not become quiescent after it was disabled"),
            ItsError::QueueSize { pages } => write!(f, "a command queue of {pages} pages (1 to 256)"),
            ItsError::Stalled { command, offset } => {
                write!(f, "the ITS stalled at command {command:#04x} (queue offset {offset:#x})")
            }
            ItsError::NoProgress { creadr, cwriter } => {
                write!(
                    f,
                    "the ITS read no command (GITS_CREADR {creadr:#x}, GITS_CWRITER {cwriter:#x}): is it enabled?"
                )
            }
            ItsError::TooManyEvents { events, max_bits } => {
                write!(f, "{events} events need more than the ITS's {max_bits} EventID bits")
            }
            ItsError::DeviceOutOfRange { device } => write!(f, "DeviceID {device} is beyond the ITS's device table"),
            ItsError::NoVirtualLpis => write!(f, "no virtual LPIs: the board's GIC is not a GICv4"),
            ItsError::LpisAlreadyEnabled => {
                write!(f, "GICR_CTLR.EnableLPIs was already set: the LPI tables cannot be changed")
            }
            ItsError::IdBits { bits } => write!(f, "{bits} LPI ID bits (14 to 24)"),
            ItsError::NotAnLpi { intid } => write!(f, "INTID {intid} is not an LPI of the table"),
            ItsError::Misaligned { what, address } => write!(f, "{what} at {address:#x} is misaligned"),
            ItsError::AlreadyResident => write!(f, "a vPE is already resident on this redistributor"),
            ItsError::StillDirty => write!(f, "GICR_VPENDBASER.Dirty stayed set after the vPE left"),
        }
    }
}

/// What GITS_TYPER says of the ITS (IHI 0069H 12.19, GITS_TYPER).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ItsFeatures {
    /// Physical [0]: physical LPIs.
    pub physical: bool,
    /// Virtual [1]: GICv4 virtual LPIs (the V* commands); false on a GICv3 ITS.
    pub virtual_lpis: bool,
    /// ITT_entry_size [7:4] plus one: the bytes of an ITT entry.
    pub itt_entry_size: usize,
    /// IDbits [12:8] plus one: the EventID bits.
    pub event_id_bits: u32,
    /// Devbits [17:13] plus one: the DeviceID bits.
    pub device_id_bits: u32,
    /// PTA [19]: commands name a redistributor by its physical address, not its processor
    /// number.
    pub rdbase_is_address: bool,
    /// HCC [31:24]: collections the ITS holds itself, without a table.
    pub held_collections: usize,
}

impl ItsFeatures {
    pub const fn from_typer(typer: u64) -> Self {
        ItsFeatures {
            physical: typer & 1 != 0,
            virtual_lpis: typer & 1 << 1 != 0,
            itt_entry_size: ((typer >> 4) & 0xf) as usize + 1,
            event_id_bits: ((typer >> 8) & 0x1f) as u32 + 1,
            device_id_bits: ((typer >> 13) & 0x1f) as u32 + 1,
            rdbase_is_address: typer & 1 << 19 != 0,
            held_collections: ((typer >> 24) & 0xff) as usize,
        }
    }

    /// How this ITS's commands name the redistributor whose RD frame is at `rd_pa` and whose
    /// GICR_TYPER is `gicr_typer`: its Processor_Number [23:8], or with PTA its address.
    pub const fn rdbase(&self, gicr_typer: u64, rd_pa: u64) -> RdBase {
        if self.rdbase_is_address {
            RdBase::address(rd_pa)
        } else {
            RdBase::processor((gicr_typer >> 8) as u16)
        }
    }
}

/// A device's interrupt translation table, as MAPD named it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Itt {
    pub address: u64,
    /// The EventIDs it covers: 2^`event_id_bits`.
    pub event_id_bits: u32,
}

/// The board's ITS, brought up: its tables valid, its queue set, enabled.
pub struct BoardIts<C> {
    its: Frame,
    features: ItsFeatures,
    queue: ItsQueue<C>,
    /// DeviceIDs the device table covers.
    devices: u64,
}

/// How many entries the hypervisor needs in a table of this type: DeviceID 0, a collection
/// per CPU, a vPE per vCPU (`vpes`).
fn entries_needed(table_type: u8, vpes: usize) -> Option<usize> {
    match table_type {
        TABLE_DEVICES => Some(1),
        TABLE_COLLECTIONS => Some(MAX_CPUS),
        TABLE_VPES => Some(vpes),
        _ => None,
    }
}

impl<C: CpuInterfaceRegisters> BoardIts<C> {
    /// Brings the ITS at `base` up: every GITS_BASER<n> of a type the hypervisor uses gets a
    /// flat table of 4 KiB pages from `memory` (devices: DeviceID 0; collections: one per
    /// CPU; vPEs: `vpes`), then the command queue, then GITS_CTLR.Enabled: QEMU takes the
    /// tables' parameters when the ITS is enabled.
    ///
    /// # Safety
    ///
    /// `base` is the board's ITS (its control and translation frames, `ITS_SIZE` bytes),
    /// mapped as device memory at this address for the rest of the program, and nothing else
    /// drives it.
    pub unsafe fn init(base: usize, vpes: usize, memory: &mut impl ItsMemory) -> Result<Self, ItsError> {
        // SAFETY: the caller's contract.
        let its = unsafe { Frame::new(base) };
        let features = ItsFeatures::from_typer(its.read64(GITS_TYPER));
        disable(its)?;
        let mut devices = 0;
        let (mut have_devices, mut have_collections) = (false, features.held_collections >= MAX_CPUS);
        for n in 0..GITS_BASERS {
            let baser = its.read64(GITS_BASER + 8 * n);
            let table_type = ((baser >> 56) & 0b111) as u8;
            let Some(entries) = entries_needed(table_type, vpes).filter(|&e| e > 0) else { continue };
            let entry_size = ((baser >> 48) & 0x1f) as usize + 1;
            let pages = entries.checked_mul(entry_size).map_or(usize::MAX, |bytes| bytes.div_ceil(PAGE));
            if pages > BASER_MAX_PAGES {
                return Err(ItsError::TableTooLarge { baser: n, pages });
            }
            let bytes = pages * PAGE;
            let table = memory.allocate_zeroed(bytes, PAGE).ok_or(ItsError::OutOfMemory { table: "table", bytes })?;
            let value = BASER_VALID
                | CACHEABLE_INNER_SHAREABLE
                | u64::from(table_type) << 56
                | ((entry_size as u64 - 1) << 48)
                | (table as u64 & BASER_PA_MASK)
                | (pages as u64 - 1);
            its.write64(GITS_BASER + 8 * n, value);
            let back = its.read64(GITS_BASER + 8 * n);
            if back & BASER_PAGE_SIZE != 0 {
                return Err(ItsError::PageSizeRefused { baser: n });
            }
            if back & SHAREABILITY == 0 {
                return Err(ItsError::NotCoherent { register: "GITS_BASER<n>" });
            }
            match table_type {
                TABLE_DEVICES => (have_devices, devices) = (true, (bytes / entry_size) as u64),
                TABLE_COLLECTIONS => have_collections = true,
                _ => {}
            }
        }
        if !have_devices {
            return Err(ItsError::NoTable { table_type: TABLE_DEVICES });
        }
        if !have_collections {
            return Err(ItsError::NoTable { table_type: TABLE_COLLECTIONS });
        }
        let queue = ItsQueue::new(its, QUEUE_PAGES, memory)?;
        its.write32(GITS_CTLR, CTLR_ENABLED);
        let devices = devices.min(1 << features.device_id_bits.min(32));
        Ok(BoardIts { its, features, queue, devices })
    }

    pub fn features(&self) -> ItsFeatures {
        self.features
    }

    /// Sends `commands` and waits until the ITS has read them.
    pub fn send(&mut self, commands: &[ItsCommand]) -> Result<(), ItsError> {
        self.queue.send(commands)
    }

    /// How many polls without progress a send waits (`queue::DEFAULT_POLLS`).
    pub fn set_polls(&mut self, polls: u32) {
        self.queue.set_polls(polls);
    }

    /// MAPC of collection `icid` to `rdbase`, then SYNC: the collection is usable when this
    /// returns.
    pub fn map_collection(&mut self, icid: CollectionId, rdbase: RdBase) -> Result<(), ItsError> {
        self.send(&[ItsCommand::mapc(icid, Some(rdbase)), ItsCommand::sync(rdbase)])
    }

    /// MAPD of `device` with a new ITT from `memory` for `events` events (EventIDs 0 to
    /// `events` - 1): ITT_entry_size × 2^bits bytes, 256-byte aligned.
    pub fn map_device(&mut self, device: DeviceId, events: u32, memory: &mut impl ItsMemory) -> Result<Itt, ItsError> {
        if u64::from(device.0) >= self.devices {
            return Err(ItsError::DeviceOutOfRange { device: device.0 });
        }
        // MAPD's Size is EventID bits minus one: at least one bit.
        let max_bits = self.features.event_id_bits;
        let too_many = ItsError::TooManyEvents { events, max_bits };
        let bits = events.max(2).checked_next_power_of_two().ok_or(too_many)?.trailing_zeros();
        let bytes = 1usize.checked_shl(bits).and_then(|n| n.checked_mul(self.features.itt_entry_size));
        let bytes = bytes.filter(|_| bits <= max_bits && events > 0).ok_or(too_many)?;
        let address = memory.allocate_zeroed(bytes, ITT_ALIGN).ok_or(ItsError::OutOfMemory { table: "ITT", bytes })?;
        let itt = Itt { address: address as u64, event_id_bits: bits };
        self.send(&[ItsCommand::mapd(device, Some((itt.address, bits)))])?;
        Ok(itt)
    }

    /// The ITS's GITS_TRANSLATER, for raising events without the command queue's lock.
    pub fn translater(&self) -> Translater<C> {
        Translater { its: self.its, cpu: PhantomData }
    }
}

/// Disables the ITS if it was enabled (the firmware's), and waits until it is quiescent:
/// GITS_BASER<n> and GITS_CBASER are written only then (IHI 0069H 12.19, GITS_CTLR).
fn disable(its: Frame) -> Result<(), ItsError> {
    let ctlr = its.read32(GITS_CTLR);
    if ctlr & CTLR_ENABLED == 0 {
        return Ok(());
    }
    its.write32(GITS_CTLR, ctlr & !CTLR_ENABLED);
    for _ in 0..queue::DEFAULT_POLLS {
        if its.read32(GITS_CTLR) & CTLR_QUIESCENT != 0 {
            return Ok(());
        }
        core::hint::spin_loop();
    }
    Err(ItsError::NotQuiescent)
}

/// The ITS's translation register: a write of an EventID raises that event of DeviceID 0,
/// as a CPU's write carries DeviceID 0 (the requester ID of a CPU on QEMU `virt`).
pub struct Translater<C> {
    its: Frame,
    cpu: PhantomData<fn() -> C>,
}

impl<C> Clone for Translater<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Translater<C> {}

impl<C: CpuInterfaceRegisters> Translater<C> {
    /// Raises `event` of DeviceID 0: a 32-bit write of GITS_TRANSLATER (IHI 0069H 12.19),
    /// after a store barrier, so what this CPU wrote before (a used ring) is visible to the
    /// vCPU that takes the interrupt.
    #[inline]
    pub fn raise(&self, event: EventId) {
        C::store_barrier();
        self.its.write32(GITS_TRANSLATER, event.0);
    }
}

#[cfg(test)]
mod tests;
