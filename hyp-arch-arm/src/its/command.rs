//! The ITS commands the hypervisor sends to the board's ITS, as the four 64-bit words of a
//! command-queue entry (IHI 0069H 5.3: the command formats, the command number in DW0
//! [7:0]). Each constructor takes its fields typed and places them;
//! nothing here touches the ITS.
//!
//! GICv3 commands: MAPC, MAPD, MAPTI, INV, DISCARD, CLEAR, INT, SYNC. GICv4.0 commands (with
//! GITS_TYPER.Virtual): VMAPP, VMAPTI, VMOVI, VMOVP, VINVALL, VSYNC. Each is cited below by
//! its name in 5.3, where its layout is given.

/// A DeviceID: the requester the ITS translates an event of (a CPU's write of
/// GITS_TRANSLATER carries DeviceID 0 on QEMU `virt`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DeviceId(pub u32);

/// An EventID of a device: the value written to GITS_TRANSLATER.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EventId(pub u32);

/// A collection (ICID, 16 bits): the ITS's name for a target redistributor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CollectionId(pub u16);

/// A vPE ID (16 bits in GICv4.0): a virtual CPU the ITS can deliver vLPIs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct VpeId(pub u16);

/// An LPI's INTID (8192 and above): a physical LPI (MAPTI's pINTID, a doorbell) or a vLPI
/// (VMAPTI's vINTID).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Lpi(pub u32);

/// A target redistributor as commands name it, the value of their RDbase field [51:16]
/// (IHI 0069H 5.3, "RDbase"): with GITS_TYPER.PTA = 0 the redistributor's processor number
/// (GICR_TYPER.Processor_Number), with PTA = 1 its physical address [51:16] (64 KiB aligned).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RdBase(u64);

impl RdBase {
    /// The redistributor by its GICR_TYPER.Processor_Number (GITS_TYPER.PTA = 0).
    pub const fn processor(number: u16) -> Self {
        RdBase(number as u64)
    }

    /// The redistributor by the physical address of its RD frame (GITS_TYPER.PTA = 1).
    pub const fn address(pa: u64) -> Self {
        RdBase((pa >> 16) & RDBASE_MASK)
    }

    /// The field's value, as it sits in bits [51:16] shifted down.
    pub const fn field(self) -> u64 {
        self.0
    }

    const fn placed(self) -> u64 {
        (self.0 & RDBASE_MASK) << 16
    }
}

/// A doorbell: the physical LPI the redistributor raises when a vLPI arrives for a vPE that
/// is not resident, or none (INTID 1023) (IHI 0069H 5.3, VMAPTI, Dbell_pINTID).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Doorbell {
    Lpi(Lpi),
    None,
}

impl Doorbell {
    /// The Dbell_pINTID field's value: the LPI, or 1023 for none.
    pub const fn intid(self) -> u32 {
        match self {
            Doorbell::Lpi(lpi) => lpi.0,
            Doorbell::None => NO_DOORBELL,
        }
    }
}

/// Dbell_pINTID's value for "no doorbell" (IHI 0069H 5.3, VMAPTI).
pub const NO_DOORBELL: u32 = 1023;

/// RDbase and VPT_addr are 36 bits, [51:16].
const RDBASE_MASK: u64 = (1 << 36) - 1;
/// ITT_addr [51:8] (IHI 0069H 5.3, MAPD).
const ITT_ADDR_MASK: u64 = ((1 << 52) - 1) & !0xff;
/// VPT_addr [51:16] (IHI 0069H 5.3, VMAPP).
const VPT_ADDR_MASK: u64 = ((1 << 52) - 1) & !0xffff;
/// The valid bit of MAPC, MAPD and VMAPP, DW2 [63].
const VALID: u64 = 1 << 63;

/// The command numbers, DW0 [7:0] (IHI 0069H 5.3, the table of ITS commands).
pub mod opcode {
    pub const INT: u8 = 0x03;
    pub const CLEAR: u8 = 0x04;
    pub const SYNC: u8 = 0x05;
    pub const MAPD: u8 = 0x08;
    pub const MAPC: u8 = 0x09;
    pub const MAPTI: u8 = 0x0a;
    pub const INV: u8 = 0x0c;
    pub const DISCARD: u8 = 0x0f;
    pub const VMOVI: u8 = 0x21;
    pub const VMOVP: u8 = 0x22;
    pub const VSYNC: u8 = 0x25;
    pub const VMAPP: u8 = 0x29;
    pub const VMAPTI: u8 = 0x2a;
    pub const VINVALL: u8 = 0x2d;
}

/// One command-queue entry: four 64-bit words, DW0 first (IHI 0069H 5.3).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ItsCommand(pub [u64; 4]);

/// DW0 of a command of a device: the command number and DeviceID [63:32].
const fn of_device(opcode: u8, device: DeviceId) -> u64 {
    opcode as u64 | (device.0 as u64) << 32
}

impl ItsCommand {
    /// The command number, DW0 [7:0].
    pub const fn opcode(&self) -> u8 {
        self.0[0] as u8
    }

    /// MAPC: collection `icid` targets `rdbase` (valid), or is unmapped (IHI 0069H 5.3, MAPC):
    /// ICID DW2 [15:0], RDbase DW2 [51:16], V DW2 [63].
    pub const fn mapc(icid: CollectionId, rdbase: Option<RdBase>) -> Self {
        let target = match rdbase {
            Some(rd) => VALID | rd.placed(),
            None => 0,
        };
        ItsCommand([opcode::MAPC as u64, 0, target | icid.0 as u64, 0])
    }

    /// MAPD: `device`'s interrupt translation table `itt`, its address (256-byte aligned) and
    /// its EventID bits (2^bits events), valid; `None` unmaps the device (IHI 0069H 5.3, MAPD):
    /// DeviceID DW0 [63:32], Size DW1 [4:0] (EventID bits minus one), ITT_addr DW2 [51:8],
    /// V DW2 [63].
    pub const fn mapd(device: DeviceId, itt: Option<(u64, u32)>) -> Self {
        let (size, target) = match itt {
            Some((address, bits)) => ((bits.saturating_sub(1) & 0x1f) as u64, VALID | (address & ITT_ADDR_MASK)),
            None => (0, 0),
        };
        ItsCommand([of_device(opcode::MAPD, device), size, target, 0])
    }

    /// MAPTI: `event` of `device` becomes physical LPI `lpi` of collection `icid`
    /// (IHI 0069H 5.3, MAPTI): EventID DW1 [31:0], pINTID DW1 [63:32], ICID DW2 [15:0].
    pub const fn mapti(device: DeviceId, event: EventId, lpi: Lpi, icid: CollectionId) -> Self {
        ItsCommand([of_device(opcode::MAPTI, device), event.0 as u64 | (lpi.0 as u64) << 32, icid.0 as u64, 0])
    }

    /// INV: the redistributor rereads the configuration of the event's LPI or vLPI
    /// (IHI 0069H 5.3, INV): DeviceID DW0 [63:32], EventID DW1 [31:0].
    pub const fn inv(device: DeviceId, event: EventId) -> Self {
        Self::of_event(opcode::INV, device, event)
    }

    /// DISCARD: the event's translation is removed and its pending state cleared
    /// (IHI 0069H 5.3, DISCARD), fields as INV.
    pub const fn discard(device: DeviceId, event: EventId) -> Self {
        Self::of_event(opcode::DISCARD, device, event)
    }

    /// CLEAR: the event's interrupt stops being pending (IHI 0069H 5.3, CLEAR), fields as INV.
    pub const fn clear(device: DeviceId, event: EventId) -> Self {
        Self::of_event(opcode::CLEAR, device, event)
    }

    /// INT: the event's interrupt becomes pending, as a write of GITS_TRANSLATER would make
    /// it (IHI 0069H 5.3, INT), fields as INV.
    pub const fn int(device: DeviceId, event: EventId) -> Self {
        Self::of_event(opcode::INT, device, event)
    }

    const fn of_event(opcode: u8, device: DeviceId, event: EventId) -> Self {
        ItsCommand([of_device(opcode, device), event.0 as u64, 0, 0])
    }

    /// SYNC: the effects of the commands before it on `rdbase` are visible when it completes
    /// (IHI 0069H 5.3, SYNC): RDbase DW2 [51:16].
    pub const fn sync(rdbase: RdBase) -> Self {
        ItsCommand([opcode::SYNC as u64, 0, rdbase.placed(), 0])
    }

    /// VMAPP: `vpe` is resident-able on `rdbase` with its virtual pending table at `vpt`
    /// (64 KiB aligned) for vINTIDs of `id_bits` bits; `None` unmaps it (IHI 0069H 5.3, VMAPP,
    /// GICv4.0 layout): vPEID DW1 [47:32], RDbase DW2 [51:16], V DW2 [63], VPT_size DW3 [4:0]
    /// (ID bits minus one), VPT_addr DW3 [51:16].
    pub const fn vmapp(vpe: VpeId, target: Option<(RdBase, u64, u32)>) -> Self {
        let (dw2, dw3) = match target {
            Some((rd, vpt, id_bits)) => {
                (VALID | rd.placed(), (id_bits.saturating_sub(1) & 0x1f) as u64 | (vpt & VPT_ADDR_MASK))
            }
            None => (0, 0),
        };
        ItsCommand([opcode::VMAPP as u64, (vpe.0 as u64) << 32, dw2, dw3])
    }

    /// VMAPTI: `event` of `device` becomes vLPI `vintid` of `vpe`, with `doorbell` raised
    /// while the vPE is not resident (IHI 0069H 5.3, VMAPTI): DeviceID DW0 [63:32], EventID
    /// DW1 [31:0], vPEID DW1 [47:32], vINTID DW2 [31:0], Dbell_pINTID DW2 [63:32].
    pub const fn vmapti(device: DeviceId, event: EventId, vpe: VpeId, vintid: Lpi, doorbell: Doorbell) -> Self {
        ItsCommand([
            of_device(opcode::VMAPTI, device),
            event.0 as u64 | (vpe.0 as u64) << 32,
            vintid.0 as u64 | (doorbell.intid() as u64) << 32,
            0,
        ])
    }

    /// VMOVI: the event's vLPI moves to `vpe`, its doorbell replaced when `doorbell` is
    /// given (IHI 0069H 5.3, VMOVI): DeviceID DW0 [63:32], EventID DW1 [31:0], vPEID DW1 [47:32],
    /// D DW2 [0] (the doorbell field is valid), Dbell_pINTID DW2 [63:32].
    pub const fn vmovi(device: DeviceId, event: EventId, vpe: VpeId, doorbell: Option<Doorbell>) -> Self {
        let dw2 = match doorbell {
            Some(d) => 1 | (d.intid() as u64) << 32,
            None => 0,
        };
        ItsCommand([of_device(opcode::VMOVI, device), event.0 as u64 | (vpe.0 as u64) << 32, dw2, 0])
    }

    /// VMOVP: `vpe` moves to redistributor `rdbase` (IHI 0069H 5.3, VMOVP). With one ITS (or
    /// GITS_TYPER.VMOVP = 1, as QEMU's) SequenceNumber DW0 [47:32] and ITSList DW1 [15:0] are
    /// 0; vPEID DW1 [47:32], RDbase DW2 [51:16].
    pub const fn vmovp(vpe: VpeId, rdbase: RdBase) -> Self {
        ItsCommand([opcode::VMOVP as u64, (vpe.0 as u64) << 32, rdbase.placed(), 0])
    }

    /// VINVALL: the redistributor rereads the whole vLPI configuration of `vpe`
    /// (IHI 0069H 5.3, VINVALL): vPEID DW1 [47:32].
    pub const fn vinvall(vpe: VpeId) -> Self {
        ItsCommand([opcode::VINVALL as u64, (vpe.0 as u64) << 32, 0, 0])
    }

    /// VSYNC: the effects of the commands before it on `vpe` are visible when it completes
    /// (IHI 0069H 5.3, VSYNC): vPEID DW1 [47:32].
    pub const fn vsync(vpe: VpeId) -> Self {
        ItsCommand([opcode::VSYNC as u64, (vpe.0 as u64) << 32, 0, 0])
    }
}
