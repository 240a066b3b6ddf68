//! Where this crate touches device memory: a register frame (of the GIC, the BCM2835 power
//! manager, or Versatile Express's system registers), by its base address, and volatile
//! accesses to the registers at offsets in it. Nothing here knows a register; the frames'
//! modules (`gic`, `list_registers`, `power`, `sys_flags`) name them and keep their offsets
//! inside the frame. (The one other memory this crate writes is a spin table's release
//! word: `spin_table`.)

use core::ptr::{read_volatile, write_volatile};

/// A memory-mapped register frame: of the GIC (GICD, a GICR frame pair, GICC or GICH), or
/// the BCM2835 power manager's, or Versatile Express's system registers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Frame(usize);

impl Frame {
    /// # Safety
    ///
    /// `base` is where a frame begins, mapped as device memory (Device-nGnRE on
    /// AArch64, Device on ARMv7) at this address for the rest of the program, and the
    /// offsets this crate reaches from it are registers of that frame (each register's
    /// module keeps its offsets inside the frame's architected size).
    pub(crate) const unsafe fn new(base: usize) -> Self {
        Frame(base)
    }

    pub(crate) const fn base(self) -> usize {
        self.0
    }

    #[inline(always)]
    pub(crate) fn read32(self, offset: usize) -> u32 {
        // SAFETY: a register of the frame `Frame::new`'s caller named (its contract).
        unsafe { read_volatile((self.0 + offset) as *const u32) }
    }

    #[inline(always)]
    pub(crate) fn write32(self, offset: usize, value: u32) {
        // SAFETY: as for `read32`.
        unsafe { write_volatile((self.0 + offset) as *mut u32, value) }
    }

    /// A byte of a byte-accessible register (GICD_IPRIORITYR, GICD_ITARGETSR).
    #[inline(always)]
    pub(crate) fn write8(self, offset: usize, value: u8) {
        // SAFETY: as for `read32`.
        unsafe { write_volatile((self.0 + offset) as *mut u8, value) }
    }

    /// A 64-bit register (GICR_TYPER); on ARMv7 the access is two 32-bit ones, which the GIC
    /// allows for its 64-bit registers (IHI 0069H 12.1).
    #[inline(always)]
    pub(crate) fn read64(self, offset: usize) -> u64 {
        // SAFETY: as for `read32`.
        unsafe { read_volatile((self.0 + offset) as *const u64) }
    }

    /// A 64-bit register (GICD_IROUTER<n>), as `read64`.
    #[inline(always)]
    pub(crate) fn write64(self, offset: usize, value: u64) {
        // SAFETY: as for `read32`.
        unsafe { write_volatile((self.0 + offset) as *mut u64, value) }
    }
}
