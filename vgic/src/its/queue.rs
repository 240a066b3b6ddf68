//! The command queue (IHI 0069H 5.2 and 12.19: GITS_CBASER, GITS_CWRITER, GITS_CREADR): a
//! ring of 32-byte commands in the guest's RAM that the ITS reads from GITS_CREADR up to
//! GITS_CWRITER. It is drained a bounded number of commands at a time, in the write that
//! posts them and in each later access to the ITS (the guest polls GITS_CREADR until it
//! reaches GITS_CWRITER), and never stalls (GITS_CREADR.Stalled reads 0).

use super::command::{doublewords, COMMAND_BYTES};
use super::error::{CommandError, CommandErrors};
use super::registers::{CBASER_PA, CBASER_SIZE, CBASER_VALID, CBASER_WRITABLE, QUEUE_OFFSET};
use super::{GuestMemory, OutsideRam};

/// The queue's three registers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(super) struct CommandQueue {
    pub cbaser: u64,
    pub cwriter: u64,
    pub creadr: u64,
}

impl CommandQueue {
    /// A GITS_CBASER write (the caller ignores it while the ITS is enabled): it keeps what
    /// was written but RES0 bits, and GITS_CREADR goes back to 0 (IHI 0069H 12.19, GITS_CREADR).
    pub(super) fn set_cbaser(&mut self, value: u64) {
        self.cbaser = value & CBASER_WRITABLE;
        self.creadr = 0;
    }

    /// A GITS_CWRITER write: Offset is kept; Retry means nothing where nothing stalls.
    pub(super) fn set_cwriter(&mut self, value: u64) {
        self.cwriter = value & QUEUE_OFFSET;
    }

    /// The queue's size in bytes: GITS_CBASER.Size + 1 pages of 4 KiB.
    fn bytes(&self) -> u64 {
        ((self.cbaser & CBASER_SIZE) + 1) * 4096
    }

    /// Whether no command waits: GITS_CBASER is not valid, GITS_CREADR has reached
    /// GITS_CWRITER, or GITS_CWRITER is beyond the queue (reported when it was written).
    pub(super) fn idle(&self) -> bool {
        self.cbaser & CBASER_VALID == 0 || self.creadr == self.cwriter || self.cwriter >= self.bytes()
    }

    /// Runs `run` on each command from GITS_CREADR up to GITS_CWRITER, `limit` of them at
    /// most, if GITS_CBASER is valid, recording every command that could not be read or
    /// that `run` refused.
    pub(super) fn drain(
        &mut self,
        mem: &impl GuestMemory,
        errors: &mut CommandErrors,
        limit: u64,
        mut run: impl FnMut([u64; 4]) -> Result<(), CommandError>,
    ) {
        if self.cbaser & CBASER_VALID == 0 {
            return;
        }
        let bytes = self.bytes();
        if self.cwriter >= bytes {
            errors.record(CommandError::WriterBeyondQueue { offset: self.cwriter, queue_bytes: bytes });
            return;
        }
        // GITS_CREADR only ever steps within the queue and goes back to 0 with GITS_CBASER,
        // so it is below `bytes`; the wrap below keeps it so.
        let base = self.cbaser & CBASER_PA;
        for _ in 0..(bytes / COMMAND_BYTES).min(limit) {
            if self.creadr == self.cwriter {
                break;
            }
            let ipa = base.wrapping_add(self.creadr);
            let mut command = [0u8; COMMAND_BYTES as usize];
            let read = base.checked_add(self.creadr).ok_or(OutsideRam).and_then(|ipa| mem.read(ipa, &mut command));
            let result = match read {
                Ok(()) => run(doublewords(&command)),
                Err(OutsideRam) => Err(CommandError::QueueOutsideRam { ipa }),
            };
            if let Err(e) = result {
                errors.record(e);
            }
            self.creadr = (self.creadr + COMMAND_BYTES) % bytes;
        }
    }
}
