//! What each command does (IHI 0069H 5.3), and when it is an error. An error leaves
//! everything as it was: each command checks all it needs before it changes anything.
//!
//! The checks, per command, in the order the pseudocode of IHI 0069H 5.3 makes them:
//! - every command naming an event (MOVI, INT, CLEAR, INV, DISCARD, MAPTI, MAPI) and MAPD:
//!   the DeviceID within Devbits; but MAPD, the device mapped; the EventID within the
//!   device's ITT;
//! - MOVI, INT, CLEAR, INV, DISCARD: the event mapped, and its collection mapped (each
//!   acts on the redistributor its collection targets); MOVI also the new ICID below HCC
//!   and its collection mapped;
//! - MAPTI, MAPI: the pINTID one of the VM's LPIs, the ICID below HCC (its collection may
//!   be unmapped: the LPI is routed when MAPC maps it), and, beyond the specification,
//!   the pINTID not the translation of another event: two events translating to one LPI
//!   would give it two routes, so the second MAPTI is refused (one over the same event
//!   replaces its translation);
//! - MAPC: the ICID below HCC; with V=1, the RDbase a vCPU's processor number;
//! - MAPD with V=1: Size at most 7 (256 events);
//! - INVALL: the ICID below HCC and its collection mapped;
//! - MOVALL: both RDbases vCPUs; SYNC: its RDbase a vCPU;
//! - the capacities: a free device slot for a new MAPD, a free translation for a MAPTI
//!   of an unmapped event.

use super::command::{header, Command, Header};
use super::error::{CommandError, CommandFault};
use super::tables::{Tables, MAX_ITT_SIZE};
use super::{LpiTable, FIRST_LPI};

/// DeviceIDs of GITS_TYPER.Devbits + 1 = 16 bits.
const DEVICE_IDS: u32 = 1 << 16;

/// What the commands check against: the VM's vCPUs and LPIs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub vcpus: usize,
    /// The VM's LPIs are `FIRST_LPI..lpi_end`.
    pub lpi_end: u32,
}

/// Runs one command read from the queue.
pub(super) fn execute(
    tables: &mut Tables,
    limits: Limits,
    dw: [u64; 4],
    lpis: &mut impl LpiTable,
) -> Result<(), CommandError> {
    let Header { number, device_id, event_id } = header(dw);
    run(tables, limits, super::command::decode(dw), lpis).map_err(|fault| CommandError::Refused {
        number,
        device_id,
        event_id,
        fault,
    })
}

fn run(tables: &mut Tables, limits: Limits, command: Command, lpis: &mut impl LpiTable) -> Result<(), CommandFault> {
    match command {
        Command::Mapd { device_id, size, valid } => mapd(tables, device_id, size, valid, lpis),
        Command::Mapc { icid, rdbase, valid } => mapc(tables, limits, icid, rdbase, valid, lpis),
        Command::Mapti { device_id, event_id, pintid, icid } => {
            mapti(tables, limits, device_id, event_id, pintid, icid, lpis)
        }
        Command::Movi { device_id, event_id, icid } => {
            let (i, _) = mapped_event(tables, device_id, event_id)?;
            let vcpu = mapped_collection(tables, icid)?;
            if let Some(t) = tables.translation_mut(i) {
                t.icid = icid;
                t.routed = u16::try_from(vcpu).ok();
                lpis.route(t.lpi, vcpu);
            }
            Ok(())
        }
        Command::Int { device_id, event_id } => {
            let (i, _) = mapped_event(tables, device_id, event_id)?;
            tables.translation(i).into_iter().for_each(|t| lpis.set_pending(t.lpi));
            Ok(())
        }
        Command::Clear { device_id, event_id } => {
            let (i, _) = mapped_event(tables, device_id, event_id)?;
            tables.translation(i).into_iter().for_each(|t| lpis.clear_pending(t.lpi));
            Ok(())
        }
        Command::Inv { device_id, event_id } => {
            let (i, _) = mapped_event(tables, device_id, event_id)?;
            tables.translation(i).into_iter().for_each(|t| lpis.invalidate(t.lpi));
            Ok(())
        }
        Command::Discard { device_id, event_id } => {
            let (i, _) = mapped_event(tables, device_id, event_id)?;
            if let Some(t) = tables.remove(i) {
                lpis.unmap(t.lpi);
            }
            Ok(())
        }
        Command::Invall { icid } => {
            mapped_collection(tables, icid)?;
            tables.translations().iter().filter(|t| t.icid == icid).for_each(|t| lpis.invalidate(t.lpi));
            Ok(())
        }
        Command::Movall { rdbase1, rdbase2 } => {
            let from = vcpu(limits, rdbase1)?;
            let to = vcpu(limits, rdbase2)?;
            // The LPIs at the first redistributor go to the second; the collections stay
            // as they are (IHI 0069H 5.3, MOVALL: software maps them again with MAPC).
            if from != to {
                for t in tables.translations_mut().iter_mut().filter(|t| t.routed.map(usize::from) == Some(from)) {
                    t.routed = u16::try_from(to).ok();
                    lpis.route(t.lpi, to);
                }
            }
            Ok(())
        }
        Command::Sync { rdbase } => vcpu(limits, rdbase).map(|_| ()),
        Command::Unknown => Err(CommandFault::Unknown),
    }
}

/// The vCPU an RDbase names (a processor number: GITS_TYPER.PTA = 0).
fn vcpu(limits: Limits, rdbase: u64) -> Result<usize, CommandFault> {
    usize::try_from(rdbase)
        .ok()
        .filter(|&v| v < limits.vcpus)
        .ok_or(CommandFault::NoSuchVcpu { rdbase, vcpus: limits.vcpus })
}

/// The number of events of mapped device `device_id`, checking EventID `event_id` is one.
fn mapped_device(tables: &Tables, device_id: u32, event_id: u32) -> Result<u32, CommandFault> {
    if device_id >= DEVICE_IDS {
        return Err(CommandFault::DeviceOutOfRange);
    }
    let events = tables.events(device_id).ok_or(CommandFault::DeviceNotMapped)?;
    if event_id >= events {
        return Err(CommandFault::EventOutOfRange { events });
    }
    Ok(events)
}

/// The mapped collection `icid`'s vCPU.
fn mapped_collection(tables: &Tables, icid: u16) -> Result<usize, CommandFault> {
    match tables.collection(icid) {
        None => Err(CommandFault::CollectionOutOfRange { icid, collections: tables.collections() }),
        Some(None) => Err(CommandFault::CollectionNotMapped { icid }),
        Some(Some(vcpu)) => Ok(vcpu),
    }
}

/// The translation of a mapped event whose collection is mapped, and that collection's vCPU.
fn mapped_event(tables: &Tables, device_id: u32, event_id: u32) -> Result<(usize, usize), CommandFault> {
    mapped_device(tables, device_id, event_id)?;
    let i = tables.find(device_id, event_id).ok_or(CommandFault::EventNotMapped)?;
    let icid = tables.translation(i).ok_or(CommandFault::EventNotMapped)?.icid;
    Ok((i, mapped_collection(tables, icid)?))
}

fn mapd(
    tables: &mut Tables,
    device_id: u32,
    size: u8,
    valid: bool,
    lpis: &mut impl LpiTable,
) -> Result<(), CommandFault> {
    if device_id >= DEVICE_IDS {
        return Err(CommandFault::DeviceOutOfRange);
    }
    if !valid {
        tables.unmap_device(device_id, |lpi| lpis.unmap(lpi));
        return Ok(());
    }
    if size > MAX_ITT_SIZE {
        return Err(CommandFault::IttTooLarge { size });
    }
    let remapped = tables.events(device_id).is_some();
    if !remapped && !tables.has_free_device() {
        return Err(CommandFault::DeviceTableFull);
    }
    // A new ITT over a mapped device: the old one's translations end.
    tables.unmap_device(device_id, |lpi| lpis.unmap(lpi));
    if tables.map_device(device_id, size + 1) {
        Ok(())
    } else {
        Err(CommandFault::DeviceTableFull)
    }
}

fn mapc(
    tables: &mut Tables,
    limits: Limits,
    icid: u16,
    rdbase: u64,
    valid: bool,
    lpis: &mut impl LpiTable,
) -> Result<(), CommandFault> {
    if tables.collection(icid).is_none() {
        return Err(CommandFault::CollectionOutOfRange { icid, collections: tables.collections() });
    }
    if !valid {
        // Its LPIs keep their translations; they translate again once it is mapped.
        tables.set_collection(icid, None);
        return Ok(());
    }
    let target = vcpu(limits, rdbase)?;
    tables.set_collection(icid, Some(target));
    for t in tables.translations_mut().iter_mut().filter(|t| t.icid == icid) {
        t.routed = u16::try_from(target).ok();
        lpis.route(t.lpi, target);
    }
    Ok(())
}

fn mapti(
    tables: &mut Tables,
    limits: Limits,
    device_id: u32,
    event_id: u32,
    pintid: u32,
    icid: u16,
    lpis: &mut impl LpiTable,
) -> Result<(), CommandFault> {
    mapped_device(tables, device_id, event_id)?;
    if !(FIRST_LPI..limits.lpi_end).contains(&pintid) {
        return Err(CommandFault::NotAnLpi { pintid, first: FIRST_LPI, end: limits.lpi_end });
    }
    let target = tables
        .collection(icid)
        .ok_or(CommandFault::CollectionOutOfRange { icid, collections: tables.collections() })?;
    let existing = tables.find(device_id, event_id);
    if let Some(owner) = tables.owner_of(pintid).filter(|&o| Some(o) != existing) {
        let other = tables.translation(owner).copied();
        return Err(CommandFault::LpiInUse {
            pintid,
            device_id: other.map_or(0, |t| t.device_id),
            event_id: other.map_or(0, |t| u32::from(t.event_id)),
        });
    }
    // A translation replaced by one to the same LPI keeps its route while its new
    // collection is unmapped (its pending state stays, and so does its route).
    let kept = existing.and_then(|i| tables.translation(i)).filter(|t| t.lpi == pintid).and_then(|t| t.routed);
    let routed = target.and_then(|v| u16::try_from(v).ok()).or(kept);
    let replaced =
        tables.insert(device_id, event_id, pintid, icid, routed).map_err(|()| CommandFault::TranslationsFull)?;
    if let Some(old) = replaced.filter(|old| old.lpi != pintid) {
        lpis.unmap(old.lpi);
    }
    if let Some(vcpu) = target {
        lpis.route(pintid, vcpu);
    }
    lpis.invalidate(pintid);
    Ok(())
}
