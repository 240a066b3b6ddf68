//! The ITS's command queue: a ring of 32-byte commands in memory the hypervisor keeps,
//! named to the ITS by GITS_CBASER; commands are written at GITS_CWRITER's offset, and the
//! ITS reads them up to it, advancing GITS_CREADR (IHI 0069H 12.19: GITS_CBASER, GITS_CWRITER,
//! GITS_CREADR; 5.3 the commands). The queue waits for the ITS to have read every command it
//! posted, a bounded number of polls: an ITS that stalls or makes no progress is an error,
//! never a hang.

use core::marker::PhantomData;

use super::command::ItsCommand;
use super::{
    ItsError, ItsMemory, CACHEABLE_INNER_SHAREABLE, GITS_CBASER, GITS_CREADR, GITS_CWRITER, PAGE, SHAREABILITY,
};
use crate::gic::CpuInterfaceRegisters;
use crate::mmio::Frame;

/// The bytes of one command (IHI 0069H 5.3).
pub const COMMAND_BYTES: usize = 32;
/// GITS_CBASER.Valid [63], Size [7:0] (4 KiB pages minus one), Physical_Address [51:12].
const CBASER_VALID: u64 = 1 << 63;
const CBASER_MAX_PAGES: usize = 256;
/// GITS_CREADR and GITS_CWRITER: Offset [19:5], in bytes from the queue's base; GITS_CREADR
/// Stalled [0] (the ITS stopped at a command it could not execute).
const OFFSET_MASK: u32 = 0xf_ffe0;
const CREADR_STALLED: u32 = 1;
/// Polls of GITS_CREADR without progress before the ITS is taken to have stopped: about a
/// second on hardware (as Linux's ITS driver waits); QEMU reads every command within the
/// write of GITS_CWRITER, so it needs one.
pub const DEFAULT_POLLS: u32 = 1_000_000;
/// What a new queue waits. The host tests' ITS is a thread, which a loaded host may leave
/// unscheduled for longer than `DEFAULT_POLLS` polls take (milliseconds): there a test
/// waits for it about a minute rather than fail by the host's timing.
const NEW_QUEUE_POLLS: u32 = if cfg!(test) { 1 << 30 } else { DEFAULT_POLLS };

/// The command queue of one ITS. `C` gives the store barrier that makes the commands visible
/// to the ITS before GITS_CWRITER names them.
pub struct ItsQueue<C> {
    its: Frame,
    ring: usize,
    /// The ring's length in commands.
    slots: usize,
    /// Where the next command goes, in commands: the offset last written to GITS_CWRITER.
    write: usize,
    polls: u32,
    cpu: PhantomData<fn() -> C>,
}

impl<C: CpuInterfaceRegisters> ItsQueue<C> {
    /// A queue of `pages` 4 KiB pages (1 to 256) from `memory`, named in GITS_CBASER, with
    /// GITS_CWRITER at its start. Only while the ITS is disabled (GITS_CBASER is then
    /// writable, and writing it resets GITS_CREADR to 0).
    pub(crate) fn new(its: Frame, pages: usize, memory: &mut impl ItsMemory) -> Result<Self, ItsError> {
        if !(1..=CBASER_MAX_PAGES).contains(&pages) {
            return Err(ItsError::QueueSize { pages });
        }
        let bytes = pages * PAGE;
        let ring =
            memory.allocate_zeroed(bytes, PAGE).ok_or(ItsError::OutOfMemory { table: "command queue", bytes })?;
        let cbaser = CBASER_VALID | CACHEABLE_INNER_SHAREABLE | (ring as u64 & PA_MASK) | (pages as u64 - 1);
        its.write64(GITS_CBASER, cbaser);
        if its.read64(GITS_CBASER) & SHAREABILITY == 0 {
            return Err(ItsError::NotCoherent { register: "GITS_CBASER" });
        }
        its.write32(GITS_CWRITER, 0);
        Ok(ItsQueue { its, ring, slots: bytes / COMMAND_BYTES, write: 0, polls: NEW_QUEUE_POLLS, cpu: PhantomData })
    }

    /// How many polls of GITS_CREADR without progress `send` waits before it gives up.
    pub fn set_polls(&mut self, polls: u32) {
        self.polls = polls.max(1);
    }

    /// The ring's length in commands; `send` posts at most one fewer at a time (a full ring
    /// would read as empty: GITS_CWRITER equal to GITS_CREADR).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Posts `commands` in order and waits until the ITS has read them all, in chunks of at
    /// most `slots() - 1`, each waited for before the next is written.
    pub fn send(&mut self, commands: &[ItsCommand]) -> Result<(), ItsError> {
        for chunk in commands.chunks(self.slots - 1) {
            for command in chunk {
                self.write_slot(self.write, command);
                self.write = (self.write + 1) % self.slots;
            }
            // The commands in memory before the ITS is told of them.
            C::store_barrier();
            self.its.write32(GITS_CWRITER, (self.write * COMMAND_BYTES) as u32);
            self.wait()?;
        }
        Ok(())
    }

    fn write_slot(&self, slot: usize, command: &ItsCommand) {
        let entry = (self.ring + slot * COMMAND_BYTES) as *mut u64;
        for (i, word) in command.0.iter().enumerate() {
            // SAFETY: `slot` < `slots`, so the entry's four words are inside the ring `new`
            // allocated (identity-mapped, the hypervisor's for good); volatile, as the ITS
            // reads them.
            unsafe { entry.add(i).write_volatile(*word) };
        }
    }

    /// Until GITS_CREADR reaches GITS_CWRITER: an error when the ITS reports a stall, or
    /// when `polls` polls in a row saw no progress.
    fn wait(&self) -> Result<(), ItsError> {
        let target = (self.write * COMMAND_BYTES) as u32;
        let mut last = u32::MAX;
        let mut idle = 0;
        loop {
            let creadr = self.its.read32(GITS_CREADR);
            let offset = creadr & OFFSET_MASK;
            if creadr & CREADR_STALLED != 0 {
                return Err(ItsError::Stalled { command: self.opcode_at(offset as usize / COMMAND_BYTES), offset });
            }
            if offset == target {
                return Ok(());
            }
            if offset != last {
                (last, idle) = (offset, 0);
            } else {
                idle += 1;
                if idle >= self.polls {
                    return Err(ItsError::NoProgress { creadr: offset, cwriter: target });
                }
            }
            core::hint::spin_loop();
        }
    }

    /// The command number at `slot`, for the error that names the command the ITS stalled at.
    fn opcode_at(&self, slot: usize) -> u8 {
        if slot >= self.slots {
            return 0;
        }
        // SAFETY: inside the ring, as in `write_slot`.
        unsafe { ((self.ring + slot * COMMAND_BYTES) as *const u64).read_volatile() as u8 }
    }
}

/// GITS_CBASER.Physical_Address [51:12].
const PA_MASK: u64 = ((1 << 52) - 1) & !0xfff;
