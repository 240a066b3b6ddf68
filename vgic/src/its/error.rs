//! The ITS's errors: `ItsError` for a VM the hypervisor cannot give an ITS, `CommandError`
//! for a command the ITS refused (IHI 0069H 5.3, "ITS command error encodings": the ITS
//! ignores it and goes on with the queue), `TranslationError` for a device's MSI that
//! translates to nothing (IHI 0069H 5.2: a write that translates to nothing is ignored).

use core::fmt;

use super::command::{name, names_an_event};
use super::tables::{MAX_DEVICES, MAX_EVENTS_PER_DEVICE, MAX_TRANSLATIONS};

/// The hypervisor asked for an ITS this module cannot build.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ItsError {
    /// A VM needs at least one vCPU.
    NoVcpus,
    /// More vCPUs than the vGIC holds (each vCPU is a collection, GITS_TYPER.HCC).
    TooManyVcpus { requested: usize, max: usize },
    /// An ITS with no LPIs to translate to.
    NoLpis,
    /// The LPIs would run past the last INTID a 32-bit INTID can name.
    TooManyLpis { requested: u32 },
    /// The hypervisor's heap cannot hold the ITS's tables.
    OutOfMemory,
}

impl fmt::Display for ItsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoVcpus => write!(f, "an ITS needs a VM of at least one vCPU"),
            Self::TooManyVcpus { requested, max } => {
                write!(f, "{requested} vCPUs requested, the ITS supports at most {max}")
            }
            Self::NoLpis => write!(f, "an ITS needs at least one LPI to translate to; give the VM LPIs"),
            Self::TooManyLpis { requested } => {
                write!(f, "{requested} LPIs from INTID 8192 run past the largest INTID; give the VM fewer LPIs")
            }
            Self::OutOfMemory => write!(
                f,
                "not enough hypervisor heap for the ITS's device and translation tables; give the hypervisor more heap"
            ),
        }
    }
}

/// Why the ITS refused one command.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CommandFault {
    /// Not a physical GICv3 command (GICv4's V* commands included: GITS_TYPER.Virtual is 0).
    Unknown,
    /// The DeviceID is wider than GITS_TYPER.Devbits allows (16 bits).
    DeviceOutOfRange,
    /// The device has no ITT: no MAPD with V=1 for it.
    DeviceNotMapped,
    /// The EventID is beyond the device's ITT, of `events` events (MAPD Size).
    EventOutOfRange { events: u32 },
    /// The event has no translation: no MAPTI or MAPI for it.
    EventNotMapped,
    /// The ICID is not below GITS_TYPER.HCC, the `collections` the ITS holds.
    CollectionOutOfRange { icid: u16, collections: usize },
    /// The collection has no target: no MAPC with V=1 for it.
    CollectionNotMapped { icid: u16 },
    /// The RDbase (a processor number, GITS_TYPER.PTA = 0) names no vCPU of the VM.
    NoSuchVcpu { rdbase: u64, vcpus: usize },
    /// The pINTID is not one of the VM's LPIs, `first..end`.
    NotAnLpi { pintid: u32, first: u32, end: u32 },
    /// The pINTID already translates another event: an LPI has one translation, so one route.
    LpiInUse { pintid: u32, device_id: u32, event_id: u32 },
    /// MAPD's Size asks for more events than a device may have here.
    IttTooLarge { size: u8 },
    /// Every device slot is taken.
    DeviceTableFull,
    /// Every translation is taken.
    TranslationsFull,
}

impl fmt::Display for CommandFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Unknown => write!(f, "not a GICv3 physical ITS command (GITS_TYPER.Virtual is 0: no GICv4 commands)"),
            Self::DeviceOutOfRange => write!(f, "the DeviceID is wider than GITS_TYPER.Devbits allows (16 bits)"),
            Self::DeviceNotMapped => write!(f, "the device is not mapped; issue MAPD with V=1 for it first"),
            Self::EventOutOfRange { events } => write!(
                f,
                "the EventID is beyond the device's ITT of {events} events; map the device with a larger MAPD Size"
            ),
            Self::EventNotMapped => write!(f, "the event has no translation; issue MAPTI for it first"),
            Self::CollectionOutOfRange { icid, collections } => {
                write!(f, "ICID {icid} is not below GITS_TYPER.HCC ({collections}); use one collection per vCPU")
            }
            Self::CollectionNotMapped { icid } => {
                write!(f, "collection {icid} is not mapped; issue MAPC with V=1 for it first")
            }
            Self::NoSuchVcpu { rdbase, vcpus } => write!(
                f,
                "RDbase {rdbase:#x} names no vCPU: with GITS_TYPER.PTA 0 it is a processor number below {vcpus}"
            ),
            Self::NotAnLpi { pintid, first, end } => {
                write!(f, "pINTID {pintid} is not one of the VM's LPIs ({first} to {})", end.wrapping_sub(1))
            }
            Self::LpiInUse { pintid, device_id, event_id } => write!(
                f,
                "pINTID {pintid} already translates DeviceID {device_id:#x} EventID {event_id} (an LPI has one \
                 translation here); DISCARD that event first"
            ),
            Self::IttTooLarge { size } => write!(
                f,
                "MAPD Size {size} asks for {} events; this ITS holds at most {MAX_EVENTS_PER_DEVICE} per device (Size 7)",
                1u64 << (u32::from(size) + 1).min(63)
            ),
            Self::DeviceTableFull => {
                write!(f, "{MAX_DEVICES} devices are mapped already, the most this ITS holds; unmap one (MAPD V=0) first")
            }
            Self::TranslationsFull => write!(
                f,
                "{MAX_TRANSLATIONS} events are mapped already, the most this ITS holds; DISCARD some first"
            ),
        }
    }
}

/// One command error.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CommandError {
    /// The command at `ipa` (GITS_CBASER's Physical_Address plus GITS_CREADR) is not the
    /// VM's RAM: it is skipped.
    QueueOutsideRam { ipa: u64 },
    /// GITS_CWRITER's offset is at or beyond the queue's size (GITS_CBASER.Size): nothing ran
    /// (IHI 0069H 12.19, GITS_CWRITER).
    WriterBeyondQueue { offset: u64, queue_bytes: u64 },
    /// A command the ITS refused and ignored: its number, the DeviceID (DW0[63:32]) and
    /// EventID (DW1[31:0]) it carried, and why.
    Refused { number: u8, device_id: u32, event_id: u32, fault: CommandFault },
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::QueueOutsideRam { ipa } => write!(
                f,
                "the ITS command at {ipa:#x} is outside the VM's RAM; point GITS_CBASER at the VM's RAM"
            ),
            Self::WriterBeyondQueue { offset, queue_bytes } => write!(
                f,
                "GITS_CWRITER offset {offset:#x} is beyond the command queue's {queue_bytes:#x} bytes (GITS_CBASER.Size); \
                 no command ran"
            ),
            Self::Refused { number, device_id, event_id, fault } if names_an_event(number) => write!(
                f,
                "ITS {} (command {number:#04x}) for DeviceID {device_id:#x} EventID {event_id} ignored: {fault}",
                name(number)
            ),
            Self::Refused { number, fault, .. } => {
                write!(f, "ITS {} (command {number:#04x}) ignored: {fault}", name(number))
            }
        }
    }
}

/// The command errors of one access: how many, and the first.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CommandErrors {
    count: u32,
    first: Option<CommandError>,
}

impl CommandErrors {
    /// How many commands failed (saturating).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The first command error, if any.
    pub fn first(&self) -> Option<CommandError> {
        self.first
    }

    /// No command failed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(super) fn record(&mut self, error: CommandError) {
        self.count = self.count.saturating_add(1);
        self.first.get_or_insert(error);
    }

    /// `later`'s errors added after these.
    pub(crate) fn merge(&mut self, later: CommandErrors) {
        self.count = self.count.saturating_add(later.count);
        if self.first.is_none() {
            self.first = later.first;
        }
    }
}

impl fmt::Display for CommandErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first {
            None => write!(f, "no ITS command error"),
            Some(first) if self.count == 1 => write!(f, "{first}"),
            Some(first) => write!(f, "{} ITS command errors; the first: {first}", self.count),
        }
    }
}

/// Why a device's MSI translates to no LPI (IHI 0069H 5.2: such a write is ignored).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TranslationError {
    /// GITS_CTLR.Enabled is 0.
    Disabled,
    /// The device has no ITT (no MAPD with V=1).
    DeviceNotMapped { device_id: u32 },
    /// The EventID is beyond the device's ITT.
    EventOutOfRange { device_id: u32, event_id: u32, events: u32 },
    /// The event has no translation (no MAPTI).
    EventNotMapped { device_id: u32, event_id: u32 },
    /// The event's collection has no target (no MAPC with V=1).
    CollectionNotMapped { device_id: u32, event_id: u32, icid: u16 },
}

impl fmt::Display for TranslationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Disabled => write!(f, "MSI dropped: the guest has not enabled its ITS (GITS_CTLR.Enabled is 0)"),
            Self::DeviceNotMapped { device_id } => {
                write!(f, "MSI dropped: DeviceID {device_id:#x} is not mapped in the ITS (no MAPD)")
            }
            Self::EventOutOfRange { device_id, event_id, events } => write!(
                f,
                "MSI dropped: EventID {event_id} is beyond DeviceID {device_id:#x}'s ITT of {events} events"
            ),
            Self::EventNotMapped { device_id, event_id } => {
                write!(f, "MSI dropped: DeviceID {device_id:#x} EventID {event_id} has no translation (no MAPTI)")
            }
            Self::CollectionNotMapped { device_id, event_id, icid } => write!(
                f,
                "MSI dropped: DeviceID {device_id:#x} EventID {event_id} is in collection {icid}, which is not mapped (no MAPC)"
            ),
        }
    }
}
