//! A GICv2m MSI frame (Arm Server Base System Architecture, appendix "GICv2m"; Linux's
//! `arm,gic-v2m-frame` binding): the doorbell a GICv2 VM's devices send their MSIs to,
//! each naming one SPI of a fixed range, which becomes pending as an edge. A GICv3 VM has
//! the distributor's own doorbell instead (GICD_SETSPI_NSR, `gicd`).

use crate::mmio::{check, WORD};
use crate::{AccessError, IntId};

/// MSI_TYPER: the frame's SPIs, the first INTID in bits [25:16] and how many in [9:0].
pub const V2M_MSI_TYPER: u64 = 0x008;
/// MSI_SETSPI_NS: a write of an INTID of the frame's range makes that SPI pending.
pub const V2M_MSI_SETSPI_NS: u64 = 0x040;
/// MSI_IIDR: reads 0, no implementer's quirks for Linux to apply.
pub const V2M_MSI_IIDR: u64 = 0xfcc;
/// The frame's size.
pub const V2M_FRAME_SIZE: u64 = 0x1000;

/// One frame: its SPIs are INTIDs `first..first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct V2mFrame {
    first: u32,
    count: u32,
}

impl V2mFrame {
    /// A frame for `count` SPIs from INTID `first`: None unless they are SPIs (32 to 1019)
    /// the 10-bit fields of MSI_TYPER can name.
    pub fn new(first: u32, count: u32) -> Option<Self> {
        let end = first.checked_add(count)?;
        (first >= 32 && count > 0 && end <= 1020 && count < 1 << 10).then_some(V2mFrame { first, count })
    }

    /// A guest read: MSI_TYPER and MSI_IIDR, 32 bits; every other word reads 0.
    pub fn read(&self, offset: u64, width: usize) -> Result<u64, AccessError> {
        Self::check(offset, width)?;
        Ok(match offset {
            V2M_MSI_TYPER => u64::from((self.first << 16) | self.count),
            _ => 0,
        })
    }

    /// A write, by the guest or as a device's MSI: the SPI MSI_SETSPI_NS names, if it is one
    /// of the frame's (a value naming another is ignored, as any other write).
    pub fn write(&self, offset: u64, width: usize, value: u64) -> Result<Option<IntId>, AccessError> {
        Self::check(offset, width)?;
        Ok((offset == V2M_MSI_SETSPI_NS).then(|| self.spi(value as u32)).flatten())
    }

    /// The SPI `data` names, if the frame has it (INTID in bits [9:0]).
    pub fn spi(&self, data: u32) -> Option<IntId> {
        let intid = data & 0x3ff;
        (self.first..self.first + self.count).contains(&intid).then_some(IntId(intid))
    }

    fn check(offset: u64, width: usize) -> Result<(), AccessError> {
        if offset >= V2M_FRAME_SIZE {
            return Err(AccessError::OutsideFrame { offset });
        }
        check(offset, width, WORD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msi_typer_names_the_range_and_only_its_spis_are_set() {
        let frame = V2mFrame::new(96, 32).unwrap();
        assert_eq!(frame.read(V2M_MSI_TYPER, 4), Ok((96 << 16) | 32));
        assert_eq!(frame.read(V2M_MSI_IIDR, 4), Ok(0));
        assert_eq!(frame.read(V2M_MSI_SETSPI_NS, 4), Ok(0), "write-only: reads 0");
        assert_eq!(frame.write(V2M_MSI_SETSPI_NS, 4, 96), Ok(Some(IntId(96))));
        assert_eq!(frame.write(V2M_MSI_SETSPI_NS, 4, 127), Ok(Some(IntId(127))));
        assert_eq!(frame.write(V2M_MSI_SETSPI_NS, 4, 0xffff_fc00 | 100), Ok(Some(IntId(100))), "bits [9:0]");
        for outside in [0, 31, 95, 128, 1023] {
            assert_eq!(frame.write(V2M_MSI_SETSPI_NS, 4, outside), Ok(None), "{outside}");
        }
        assert_eq!(frame.write(V2M_MSI_TYPER, 4, 96), Ok(None), "read-only");
        assert!(frame.write(V2M_MSI_SETSPI_NS, 2, 96).is_err(), "32-bit accesses only");
        assert!(frame.write(V2M_MSI_SETSPI_NS + 2, 4, 96).is_err(), "aligned");
        assert!(frame.read(V2M_FRAME_SIZE, 4).is_err(), "beyond the frame");
        assert_eq!(V2mFrame::new(16, 8), None, "SGIs and PPIs are no SPIs");
        assert_eq!(V2mFrame::new(1000, 32), None, "past INTID 1019");
        assert_eq!(V2mFrame::new(96, 0), None);
    }
}
