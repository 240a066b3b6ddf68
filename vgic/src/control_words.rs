//! The distributor's first four words (GICD_CTLR, GICD_TYPER, GICD_IIDR and GICD_TYPER2;
//! on GICv2 the reserved word at 0x00c) as a copy outside the distributor's lock, from which
//! the AArch64 image's exception vector answers a guest's word load of them without the
//! run loop (docs/vgic.md, "The control words answered in the vector").
//!
//! Why a copy is enough: of the four, only GICD_CTLR changes, by a guest's write of it
//! (IHI 0069H 12.9.4, IHI 0048B 4.3.1); the others are fixed by the VM's configuration
//! (ITLinesNumber, CPUNumber, IDbits) or by this implementation. None of them reads
//! interrupt state, which the list registers would hold; none is banked per vCPU. The
//! holder of the distributor's lock refreshes the copy after every write at these offsets
//! and whenever the distributor is replaced (a SYSTEM_RESET), before it lets the lock go:
//! a reader sees the value before a write or after it, and no effect of a write (an
//! interrupt a group's enable lets through is planned under the same lock) before the copy
//! shows it.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::Distributor;

/// The frame offset past the last word copied.
pub const CONTROL_WORDS_END: u64 = 0x10;

/// The copy: the word at frame offset `4 * i` in entry `i` (the vector indexes it with
/// the offset's bits 3 and 2).
#[repr(C)]
pub struct ControlWords([AtomicU32; 4]);

impl ControlWords {
    /// All zero: what a CPU's vector holds while no vCPU is loaded (it reads nothing then).
    pub const fn zero() -> Self {
        ControlWords([const { AtomicU32::new(0) }; 4])
    }

    /// The words `distributor` reads now.
    pub fn new(distributor: &Distributor) -> Self {
        let words = Self::zero();
        words.refresh(distributor);
        words
    }

    /// Copies the words again from `distributor` (under its lock): a new distributor.
    pub fn refresh(&self, distributor: &Distributor) {
        for (offset, word) in (0..CONTROL_WORDS_END).step_by(4).zip(&self.0) {
            // vCPU 0 exists in every distributor, and none of the words is banked.
            let value = distributor.read(0, offset, 4).unwrap_or(0);
            word.store(value as u32, Ordering::Relaxed);
        }
    }

    /// After `distributor` took a guest's write at frame offset `offset` (under its lock,
    /// refused or not): only a write among the four words can change them.
    #[inline(always)]
    pub fn after_write(&self, distributor: &Distributor, offset: u64) {
        if offset < CONTROL_WORDS_END {
            self.refresh(distributor);
        }
    }

    /// The answer to a word load at frame offset `offset`, as the vector gives it: a word
    /// among the four, aligned; anything else is the distributor's (None).
    pub fn read(&self, offset: u64) -> Option<u32> {
        if offset >= CONTROL_WORDS_END || !offset.is_multiple_of(4) {
            return None;
        }
        self.0.get(offset as usize / 4).map(|w| w.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GicVersion, VgicConfig};

    fn distributor(version: GicVersion) -> Distributor {
        Distributor::new(VgicConfig { version, vcpus: 2, spis: 64, lpis: 0 }).unwrap()
    }

    #[test]
    fn the_copy_is_what_the_distributor_reads_and_follows_a_write_of_gicd_ctlr() {
        for (version, enabled) in [(GicVersion::V3, 0x53), (GicVersion::V2, 0x3)] {
            let mut d = distributor(version);
            let words = ControlWords::new(&d);
            for offset in [0, 4, 8, 0xc] {
                assert_eq!(words.read(offset).map(u64::from), d.read(1, offset, 4).ok(), "{version:?} {offset:#x}");
            }
            d.write(1, 0, 4, u64::from(u32::MAX)).unwrap();
            assert_ne!(words.read(0).map(u64::from), d.read(0, 0, 4).ok(), "not refreshed yet");
            words.after_write(&d, 0);
            assert_eq!(words.read(0), Some(enabled), "{version:?}");
            assert_eq!(words.read(0x8), Some(0x4800_043b), "GICD_IIDR");
            assert_eq!(words.read(0xc), Some(0), "GICD_TYPER2 or reserved");
        }
    }

    #[test]
    fn only_aligned_words_among_the_four_are_answered() {
        let words = ControlWords::new(&distributor(GicVersion::V3));
        for offset in [2, 5, 0xe, 0x10, 0x100, u64::MAX] {
            assert_eq!(words.read(offset), None, "{offset:#x}");
        }
    }
}
