//! The ITS's registers (IHI 0069H 12.19): where each is, which access widths it takes, and
//! the fixed values it reads. Both 64 KiB frames' other words are RAZ/WI, 32-bit.

use crate::mmio::{WORD, WORD_OR_DOUBLE};

/// GITS_CTLR: Enabled, bit 0; Quiescent, bit 31.
pub(super) const GITS_CTLR: u64 = 0x0000;
/// GITS_IIDR.
pub(super) const GITS_IIDR: u64 = 0x0004;
/// GITS_TYPER, 64-bit, read-only.
pub(super) const GITS_TYPER: u64 = 0x0008;
/// GITS_CBASER, 64-bit: the command queue.
pub(super) const GITS_CBASER: u64 = 0x0080;
/// GITS_CWRITER, 64-bit: where the guest's next command goes.
pub(super) const GITS_CWRITER: u64 = 0x0088;
/// GITS_CREADR, 64-bit, read-only: the next command the ITS runs.
pub(super) const GITS_CREADR: u64 = 0x0090;
/// GITS_BASER<n>, eight 64-bit registers.
pub(super) const GITS_BASER: u64 = 0x0100;
const GITS_BASER_END: u64 = 0x0140;
/// GITS_PIDR2: ArchRev [7:4] = 3, as the distributor's.
pub(super) const GITS_PIDR2: u64 = 0xffe8;

/// GITS_BASER0, the device table's (IHI 0069H 12.19, GITS_BASER<n>): Type [58:56] = 1
/// (Devices) and Entry_Size [52:48] = 7 (8 bytes) read-only; Valid [63], InnerCache
/// [61:59], OuterCache [55:53], Physical_Address [47:12], Shareability [11:10], Page_Size
/// [9:8] and Size [7:0] keep what the guest writes; Indirect [62] is RAZ/WI (a flat table).
/// The ITS keeps its devices itself and never reads the table: it is there because Linux
/// (its_alloc_device_table) takes DeviceID 0 for out of range without one.
pub(super) const BASER_DEVICES: u64 = (1 << 56) | (7 << 48);
pub(super) const BASER_WRITABLE: u64 = (1 << 63) | (7 << 59) | (7 << 53) | (((1 << 48) - 1) & !0xfff) | 0xfff;
pub(super) const GITS_BASER0_END: u64 = GITS_BASER + 8;

pub(super) const CTLR_ENABLED: u64 = 1;
pub(super) const CTLR_QUIESCENT: u64 = 1 << 31;

/// GITS_CBASER's fields: Valid [63], InnerCache [61:59], OuterCache [55:53],
/// Physical_Address [51:12], Shareability [11:10], Size [7:0]; the rest is RES0.
pub(super) const CBASER_VALID: u64 = 1 << 63;
pub(super) const CBASER_PA: u64 = ((1 << 52) - 1) & !0xfff;
pub(super) const CBASER_SIZE: u64 = 0xff;
pub(super) const CBASER_WRITABLE: u64 = CBASER_VALID | (7 << 59) | (7 << 53) | CBASER_PA | (3 << 10) | CBASER_SIZE;
/// GITS_CWRITER.Offset and GITS_CREADR.Offset, bits [19:5]: 32-byte commands in a queue of
/// up to 256 pages of 4 KiB.
pub(super) const QUEUE_OFFSET: u64 = 0xf_ffe0;

/// GITS_TYPER for an ITS of `collections` collections (IHI 0069H 12.19, GITS_TYPER):
/// Physical = 1: physical LPIs; Virtual = 0: no GICv4.
/// ITT_entry_size [7:4] = 7: 8-byte entries (the guest sizes the ITT memory it gives MAPD
/// by it; the ITS keeps the ITT itself and never reads that memory).
/// ID_bits [12:8] = 15: 16-bit EventIDs. Devbits [17:13] = 15: 16-bit DeviceIDs, a PCI
/// requester ID.
/// PTA [19] = 0: RDbase is a processor number, vCPU n's redistributor being n.
/// HCC [31:24]: the collections the ITS holds itself, one per vCPU, so no collection table
/// in memory. CIL [36] = 0: 16-bit ICIDs.
pub(super) fn typer(collections: usize) -> u64 {
    let hcc = collections.min(0xff) as u64;
    1 | (7 << 4) | (15 << 8) | (15 << 13) | (hcc << 24)
}

/// The register an offset of the frames is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Reg {
    Ctlr,
    Iidr,
    Typer,
    Cbaser,
    Cwriter,
    Creadr,
    Baser,
    Pidr2,
    Translater,
    RazWi,
}

/// The register at `offset` (within the frames) and the widths it allows. A 64-bit
/// register's upper word is the same register, reached as a 32-bit half (12.1, "GIC
/// register access").
pub(super) fn decode(offset: u64) -> (Reg, u8) {
    let double = offset & !7;
    match double {
        GITS_TYPER => return (Reg::Typer, WORD_OR_DOUBLE),
        GITS_CBASER => return (Reg::Cbaser, WORD_OR_DOUBLE),
        GITS_CWRITER => return (Reg::Cwriter, WORD_OR_DOUBLE),
        GITS_CREADR => return (Reg::Creadr, WORD_OR_DOUBLE),
        GITS_BASER..GITS_BASER_END => return (Reg::Baser, WORD_OR_DOUBLE),
        _ => {}
    }
    match offset {
        GITS_CTLR => (Reg::Ctlr, WORD),
        GITS_IIDR => (Reg::Iidr, WORD),
        GITS_PIDR2 => (Reg::Pidr2, WORD),
        // 16-bit and 32-bit writes, as a device's MSI may be either (IHI 0069H 12.19, GITS_TRANSLATER).
        super::GITS_TRANSLATER => (Reg::Translater, 2 | WORD),
        _ => (Reg::RazWi, WORD),
    }
}

/// The part of a 64-bit register's `value` a read of `width` at `offset` returns.
pub(super) fn read_part(value: u64, offset: u64, width: usize) -> u64 {
    if width == 8 {
        value
    } else {
        (value >> (8 * (offset & 4))) & 0xffff_ffff
    }
}

/// A 64-bit register after a write of `width` at `offset` of `value`: a 32-bit write
/// changes its half only.
pub(super) fn write_part(old: u64, offset: u64, width: usize, value: u64) -> u64 {
    if width == 8 {
        return value;
    }
    let shift = 8 * (offset & 4);
    (old & !(0xffff_ffff << shift)) | ((value & 0xffff_ffff) << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typer_fields() {
        let t = typer(4);
        assert_eq!(t & 1, 1, "Physical");
        assert_eq!(t >> 1 & 1, 0, "Virtual");
        assert_eq!(t >> 4 & 0xf, 7, "ITT_entry_size");
        assert_eq!(t >> 8 & 0x1f, 15, "ID_bits");
        assert_eq!(t >> 13 & 0x1f, 15, "Devbits");
        assert_eq!(t >> 19 & 1, 0, "PTA");
        assert_eq!(t >> 24 & 0xff, 4, "HCC");
        assert_eq!(t >> 32, 0, "CIDbits, CIL");
    }

    #[test]
    fn halves_of_64_bit_registers() {
        assert_eq!(read_part(0x1122_3344_5566_7788, 0x80, 4), 0x5566_7788);
        assert_eq!(read_part(0x1122_3344_5566_7788, 0x84, 4), 0x1122_3344);
        assert_eq!(read_part(0x1122_3344_5566_7788, 0x80, 8), 0x1122_3344_5566_7788);
        assert_eq!(write_part(0x1122_3344_5566_7788, 0x84, 4, 0xffff_ffff_aabb_ccdd), 0xaabb_ccdd_5566_7788);
        assert_eq!(write_part(0x1122_3344_5566_7788, 0x80, 4, 0xaabb_ccdd), 0x1122_3344_aabb_ccdd);
        assert_eq!(decode(0xc), (Reg::Typer, WORD_OR_DOUBLE));
        assert_eq!(decode(0x8c), (Reg::Cwriter, WORD_OR_DOUBLE));
        assert_eq!(decode(0x13c), (Reg::Baser, WORD_OR_DOUBLE));
        assert_eq!(decode(0x140), (Reg::RazWi, WORD));
        assert_eq!(decode(0x10044), (Reg::RazWi, WORD));
    }
}
