//! Interrupt IDs (IHI 0069H 2.2, "INTIDs"; IHI 0048B 2.2.1, "Interrupt IDs"): 0-15 SGIs, 16-31 PPIs, 32-1019
//! SPIs, 1020-1023 special. Always 32 bits wide, never truncated.

use core::fmt;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash, Default)]
pub struct IntId(pub u32);

impl IntId {
    pub const fn is_sgi(self) -> bool {
        self.0 < 16
    }
    pub const fn is_ppi(self) -> bool {
        self.0 >= 16 && self.0 < 32
    }
    pub const fn is_private(self) -> bool {
        self.0 < 32
    }
    pub const fn is_spi(self) -> bool {
        self.0 >= 32 && self.0 < 1020
    }
}

impl fmt::Display for IntId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "INTID {}", self.0)
    }
}
