//! Address newtypes: an IPA can never be passed where a physical address is wanted
//! (Hafnium's `addr.h`).

use crate::Stage2Error;

pub const PAGE_SIZE: u64 = 4096;

/// A physical address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct PhysAddr(pub u64);

/// An intermediate physical address: what a guest believes is physical.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Ipa(pub u64);

/// The half-open IPA range `[start, start + size)`; never empty, never wrapping.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpaRange {
    start: Ipa,
    size: u64,
}

impl IpaRange {
    pub fn new(start: Ipa, size: u64) -> Result<Self, Stage2Error> {
        if size == 0 {
            return Err(Stage2Error::ZeroSize);
        }
        if start.0.checked_add(size).is_none() {
            return Err(Stage2Error::Overflow { start: start.0, size });
        }
        Ok(IpaRange { start, size })
    }
    pub fn start(&self) -> Ipa {
        self.start
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The first IPA after the range.
    pub fn end(&self) -> u64 {
        self.start.0 + self.size
    }
    /// One subtraction and one comparison: below `start` the difference wraps to more than
    /// any size (a range never wraps), so it tests both ends at once (the MMIO bus asks on
    /// every trapped access).
    pub fn contains(&self, ipa: Ipa) -> bool {
        ipa.0.wrapping_sub(self.start.0) < self.size
    }
    pub fn overlaps(&self, other: &IpaRange) -> bool {
        self.start.0 < other.end() && other.start.0 < self.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_refuse_empty_and_wrapping() {
        assert_eq!(IpaRange::new(Ipa(0), 0), Err(Stage2Error::ZeroSize));
        assert_eq!(IpaRange::new(Ipa(u64::MAX), 2), Err(Stage2Error::Overflow { start: u64::MAX, size: 2 }));
        let r = IpaRange::new(Ipa(0x1000), 0x2000).unwrap();
        assert!(r.contains(Ipa(0x2fff)) && !r.contains(Ipa(0x3000)) && !r.contains(Ipa(0xfff)));
        assert!(r.contains(Ipa(0x1000)) && !r.contains(Ipa(0)) && !r.contains(Ipa(u64::MAX)));
        let top = IpaRange::new(Ipa(u64::MAX - 0xfff), 0xfff).unwrap();
        assert!(top.contains(Ipa(u64::MAX - 1)) && !top.contains(Ipa(u64::MAX)) && !top.contains(Ipa(0)));
        assert!(r.overlaps(&IpaRange::new(Ipa(0x2000), 0x4000).unwrap()));
        assert!(!r.overlaps(&IpaRange::new(Ipa(0x3000), 0x1000).unwrap()));
    }
}
