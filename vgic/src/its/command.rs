//! The ITS commands, decoded from their 32 bytes in the queue (IHI 0069H 5.3: four
//! little-endian doublewords DW0..DW3, the command number in DW0[7:0]). Only the physical
//! commands of GICv3 are known here; GICv4's V* commands decode as `Unknown`
//! (GITS_TYPER.Virtual is 0).

/// Command numbers (IHI 0069H 5.3).
pub(super) const MOVI: u8 = 0x01;
pub(super) const INT: u8 = 0x03;
pub(super) const CLEAR: u8 = 0x04;
pub(super) const SYNC: u8 = 0x05;
pub(super) const MAPD: u8 = 0x08;
pub(super) const MAPC: u8 = 0x09;
pub(super) const MAPTI: u8 = 0x0a;
pub(super) const MAPI: u8 = 0x0b;
pub(super) const INV: u8 = 0x0c;
pub(super) const INVALL: u8 = 0x0d;
pub(super) const MOVALL: u8 = 0x0e;
pub(super) const DISCARD: u8 = 0x0f;

/// One command's size in the queue.
pub(super) const COMMAND_BYTES: u64 = 32;

/// A command and its fields (IHI 0069H 5.3 gives each command's layout under its name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Command {
    /// MOVI: the event's translation moves to collection `icid`.
    Movi { device_id: u32, event_id: u32, icid: u16 },
    /// INT: the event's LPI becomes pending.
    Int { device_id: u32, event_id: u32 },
    /// CLEAR: the event's LPI's pending state ends.
    Clear { device_id: u32, event_id: u32 },
    /// SYNC: the redistributor `rdbase` has seen every earlier command.
    Sync { rdbase: u64 },
    /// MAPD: device `device_id` gets an ITT of 2^(size+1) events (V=1), or none (V=0).
    Mapd { device_id: u32, size: u8, valid: bool },
    /// MAPC: collection `icid` targets redistributor `rdbase` (V=1), or nothing (V=0).
    Mapc { icid: u16, rdbase: u64, valid: bool },
    /// MAPTI, and MAPI with `pintid` = `event_id`.
    Mapti { device_id: u32, event_id: u32, pintid: u32, icid: u16 },
    /// INV: the event's LPI's configuration is read again.
    Inv { device_id: u32, event_id: u32 },
    /// INVALL: the configuration of every LPI of collection `icid` is read again.
    Invall { icid: u16 },
    /// MOVALL: redistributor `rdbase1`'s LPIs move to `rdbase2`.
    Movall { rdbase1: u64, rdbase2: u64 },
    /// DISCARD: the event's translation ends.
    Discard { device_id: u32, event_id: u32 },
    /// Any other command number.
    Unknown,
}

/// The fields every command error names, whatever the command (DW0[7:0], DW0[63:32],
/// DW1[31:0]): the number, DeviceID and EventID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub number: u8,
    pub device_id: u32,
    pub event_id: u32,
}

/// The four doublewords of a command read from the queue.
pub(super) fn doublewords(bytes: &[u8; COMMAND_BYTES as usize]) -> [u64; 4] {
    let mut dw = [0u64; 4];
    for (d, chunk) in dw.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *d = u64::from_le_bytes(b);
    }
    dw
}

pub(super) fn header(dw: [u64; 4]) -> Header {
    Header { number: dw[0] as u8, device_id: (dw[0] >> 32) as u32, event_id: dw[1] as u32 }
}

/// RDbase (DW2[51:16] of MAPC and SYNC, DW3[51:16] of MOVALL's second): with
/// GITS_TYPER.PTA = 0, the target redistributor's processor number (IHI 0069H 5.3, "MAPC").
fn rdbase(dw: u64) -> u64 {
    (dw >> 16) & ((1 << 36) - 1)
}

/// V (DW2[63] of MAPD and MAPC).
fn valid(dw: u64) -> bool {
    dw >> 63 != 0
}

/// ICID (DW2[15:0]).
fn icid(dw: u64) -> u16 {
    dw as u16
}

pub(super) fn decode(dw: [u64; 4]) -> Command {
    let Header { number, device_id, event_id } = header(dw);
    match number {
        MOVI => Command::Movi { device_id, event_id, icid: icid(dw[2]) },
        INT => Command::Int { device_id, event_id },
        CLEAR => Command::Clear { device_id, event_id },
        SYNC => Command::Sync { rdbase: rdbase(dw[2]) },
        // Size: DW1[4:0]; ITT_addr (DW2[51:8]) is not read, the ITT being the ITS's own.
        MAPD => Command::Mapd { device_id, size: dw[1] as u8 & 0x1f, valid: valid(dw[2]) },
        MAPC => Command::Mapc { icid: icid(dw[2]), rdbase: rdbase(dw[2]), valid: valid(dw[2]) },
        MAPTI => Command::Mapti { device_id, event_id, pintid: (dw[1] >> 32) as u32, icid: icid(dw[2]) },
        MAPI => Command::Mapti { device_id, event_id, pintid: event_id, icid: icid(dw[2]) },
        INV => Command::Inv { device_id, event_id },
        INVALL => Command::Invall { icid: icid(dw[2]) },
        MOVALL => Command::Movall { rdbase1: rdbase(dw[2]), rdbase2: rdbase(dw[3]) },
        DISCARD => Command::Discard { device_id, event_id },
        _ => Command::Unknown,
    }
}

/// The command's name in IHI 0069H 5.3, for messages.
pub(super) fn name(number: u8) -> &'static str {
    match number {
        MOVI => "MOVI",
        INT => "INT",
        CLEAR => "CLEAR",
        SYNC => "SYNC",
        MAPD => "MAPD",
        MAPC => "MAPC",
        MAPTI => "MAPTI",
        MAPI => "MAPI",
        INV => "INV",
        INVALL => "INVALL",
        MOVALL => "MOVALL",
        DISCARD => "DISCARD",
        _ => "unknown command",
    }
}

/// Whether the command names a device and an event (so a message about it names them).
pub(super) fn names_an_event(number: u8) -> bool {
    matches!(number, MOVI | INT | CLEAR | MAPD | MAPTI | MAPI | INV | DISCARD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_their_doublewords() {
        let dw = [0x0000_0010_0000_000a, 0x0000_2005_0000_0003, 0x8000_0000_0002_0007, 0];
        assert_eq!(decode(dw), Command::Mapti { device_id: 0x10, event_id: 3, pintid: 0x2005, icid: 7 });
        let dw = [0x0000_0010_0000_000b, 3, 7, 0];
        assert_eq!(decode(dw), Command::Mapti { device_id: 0x10, event_id: 3, pintid: 3, icid: 7 });
        let dw = [0x0000_0001_0000_0008, 0xffff_ffe4, 0x8000_0000_1234_5600, 0];
        assert_eq!(decode(dw), Command::Mapd { device_id: 1, size: 4, valid: true });
        let dw = [0x09, 0, 0x8000_0000_0003_0002, 0];
        assert_eq!(decode(dw), Command::Mapc { icid: 2, rdbase: 3, valid: true });
        let dw = [0x0e, 0, 0x000f_ffff_ffff_0000, 0x0000_0000_0002_0000];
        assert_eq!(decode(dw), Command::Movall { rdbase1: (1 << 36) - 1, rdbase2: 2 });
        assert_eq!(decode([0x05, 0, 1 << 16, 0]), Command::Sync { rdbase: 1 });
        assert_eq!(decode([0x0d, 0, 5, 0]), Command::Invall { icid: 5 });
        for number in [0x00, 0x02, 0x06, 0x07, 0x10, 0x21, 0x2a, 0xff] {
            assert_eq!(decode([number, 0, 0, 0]), Command::Unknown, "{number:#x}");
        }
    }

    #[test]
    fn doublewords_are_little_endian() {
        let mut bytes = [0u8; 32];
        bytes[0] = 0x0a;
        bytes[4] = 0x10;
        bytes[8] = 3;
        bytes[31] = 0x80;
        assert_eq!(doublewords(&bytes), [0x10_0000_000a, 3, 0, 0x8000_0000_0000_0000]);
    }
}
