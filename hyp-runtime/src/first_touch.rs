//! A VM's RAM zeroed on first touch (docs/capability-model.md, "Zeroing"): a translated
//! VM's private RAM is mapped pending, 2 MiB blocks invalid to the hardware
//! (`stage2::Stage2Table::map_range_pending`), and a block is zeroed and made valid the
//! first time anything touches it: a vCPU (its stage-2 Translation fault, `exit::handle`
//! through `MmioDispatch::first_touch`), one of the VM's devices or the board's disk
//! (`GuestMemory` and `PhysicalRam` of the arch crate's `GuestRam`), or the loader. So a VM
//! pays for the memory it uses, not for all it is given, and nothing reaches its memory
//! before that memory was zeroed.
//!
//! Which blocks are done is in the stage-2 tables (a valid leaf); `FirstTouch` keeps a copy
//! of it, one bit per block, which only ever goes from pending to done while the VM lives,
//! so that a device's access to done memory costs one load, and it holds the lock under
//! which a block is zeroed, so two vCPUs, or a vCPU and a device, never zero one block twice
//! (the second would wipe what the first wrote after its zeroing).

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};

use hyp_core::cap::{CapError, CapId};
use hyp_core::sync::Mutex;
use stage2::{Ipa, IpaRange, FIRST_TOUCH_BLOCK};

/// How a VM's pending RAM in a range is zeroed (or not: `Fill`) and made valid: the
/// capability space's `zero_on_first_touch` on the image's table memory and cache
/// maintenance (`VmEnv::zero_on_first_touch`); the bytes made valid.
pub type Activate = fn(CapId, IpaRange, Fill) -> Result<u64, CapError>;

/// What is in a block when it is made valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Zeroed first.
    Zeroed,
    /// Not zeroed: the loader writes every byte of it before any vCPU of the VM runs.
    Overwritten,
}

pub struct FirstTouch {
    vm: CapId,
    /// The VM's RAM in its IPA space.
    ipa: u64,
    size: u64,
    /// Bit n: block n (of `FIRST_TOUCH_BLOCK` bytes from `ipa`) is zeroed and valid.
    done: Box<[AtomicU64]>,
    /// Held from the test of a block's bit to its setting.
    zeroing: Mutex<()>,
    activate: Activate,
}

impl FirstTouch {
    /// The RAM of VM `vm`, `size` bytes at IPA `ipa`, every block pending (`done`: false) or
    /// every block done, as an identity-mapped VM's, whose RAM is zeroed before it starts.
    pub fn new(vm: CapId, ipa: u64, size: u64, done: bool, activate: Activate) -> Self {
        let blocks = size.div_ceil(FIRST_TOUCH_BLOCK);
        let words = blocks.div_ceil(64) as usize;
        let done = (0..words)
            .map(|w| {
                let bits = blocks.saturating_sub(w as u64 * 64).min(64);
                AtomicU64::new(if done { u64::MAX >> (64 - bits) } else { 0 })
            })
            .collect();
        FirstTouch { vm, ipa, size, done, zeroing: Mutex::new(()), activate }
    }

    /// Whether `ipa` is in the VM's RAM.
    pub fn contains(&self, ipa: u64) -> bool {
        ipa.wrapping_sub(self.ipa) < self.size
    }

    fn is_done(&self, block: u64) -> bool {
        let word = self.done.get((block / 64) as usize);
        // Acquire: the zeros (and the valid descriptor) are seen before what follows.
        word.is_some_and(|w| w.load(Ordering::Acquire) & (1 << (block % 64)) != 0)
    }

    /// The blocks `[ipa, ipa + len)` lies in (`len` of 0 counts as 1 byte), if it lies in RAM.
    fn blocks(&self, ipa: u64, len: u64) -> Option<core::ops::Range<u64>> {
        let offset = ipa.checked_sub(self.ipa)?;
        let end = offset.checked_add(len.max(1)).filter(|&end| end <= self.size)?;
        Some(offset / FIRST_TOUCH_BLOCK..end.div_ceil(FIRST_TOUCH_BLOCK))
    }

    /// Makes sure every block of `[ipa, ipa + len)` is zeroed and valid, zeroing those that
    /// are not (under the lock, each tested again there). Refused when the range does not
    /// lie in RAM.
    #[inline]
    pub fn prepare(&self, ipa: u64, len: u64) -> Result<(), CapError> {
        if self.ready(ipa, len) {
            return Ok(());
        }
        self.prepare_with(ipa, len, false)
    }

    /// Whether `[ipa, ipa + len)` lies in one block that is done: the common case of a
    /// device's access (a ring entry, a run of a request), one load, inline, where the
    /// general walk cost a disk request about 20 instructions per run. `false` says only
    /// that `prepare` has more to find out.
    #[inline]
    pub fn ready(&self, ipa: u64, len: u64) -> bool {
        let Some(offset) = ipa.checked_sub(self.ipa) else { return false };
        let block = offset / FIRST_TOUCH_BLOCK;
        let last =
            offset.checked_add(len.max(1)).filter(|&end| end <= self.size).map(|end| (end - 1) / FIRST_TOUCH_BLOCK);
        last == Some(block) && self.is_done(block)
    }

    /// `prepare` for the loader, which writes all of `[ipa, ipa + len)` before any vCPU of
    /// the VM runs: a block wholly inside it is mapped without being zeroed first (every
    /// byte of it is the loader's), the blocks it lies in only partly are zeroed.
    pub fn prepare_overwritten(&self, ipa: u64, len: u64) -> Result<(), CapError> {
        self.prepare_with(ipa, len, true)
    }

    #[inline(never)]
    fn prepare_with(&self, ipa: u64, len: u64, overwritten: bool) -> Result<(), CapError> {
        let blocks = self.blocks(ipa, len).ok_or(CapError::NotPrivateRam { ipa })?;
        if blocks.clone().all(|b| self.is_done(b)) {
            return Ok(());
        }
        let _zeroing = self.zeroing.lock();
        for block in blocks.filter(|&b| !self.is_done(b)) {
            let start = self.ipa + block * FIRST_TOUCH_BLOCK;
            let size = FIRST_TOUCH_BLOCK.min(self.size - block * FIRST_TOUCH_BLOCK);
            let range = IpaRange::new(Ipa(start), size).map_err(CapError::Stage2)?;
            let whole = ipa <= start && start + size <= ipa + len;
            let fill = if overwritten && whole { Fill::Overwritten } else { Fill::Zeroed };
            (self.activate)(self.vm, range, fill)?;
            if let Some(word) = self.done.get((block / 64) as usize) {
                word.fetch_or(1 << (block % 64), Ordering::Release);
            }
        }
        Ok(())
    }

    /// A vCPU's stage-2 fault at `ipa`: whether it was the VM's RAM, now zeroed and valid, so
    /// the access is to be made again. Out of line: it runs once per block.
    #[cold]
    #[inline(never)]
    pub fn fault(&self, ipa: u64) -> bool {
        self.contains(ipa) && self.prepare(ipa, 1).is_ok()
    }

    /// The offset in RAM and the size of every block that is done, for a reset to zero
    /// again (an identity-mapped VM: all of its RAM).
    pub fn done_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let blocks = self.size.div_ceil(FIRST_TOUCH_BLOCK);
        (0..blocks)
            .filter(|&b| self.is_done(b))
            .map(|b| (b * FIRST_TOUCH_BLOCK, FIRST_TOUCH_BLOCK.min(self.size - b * FIRST_TOUCH_BLOCK)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use std::sync::Mutex as StdMutex;

    const RAM: u64 = 0x4000_0000;
    const MIB2: u64 = 2 << 20;

    static ZEROED: StdMutex<Vec<(usize, u64, u64)>> = StdMutex::new(Vec::new());
    static OVERWRITTEN: StdMutex<Vec<(usize, u64, u64)>> = StdMutex::new(Vec::new());

    fn record(vm: CapId, range: IpaRange, fill: Fill) -> Result<u64, CapError> {
        let list = if fill == Fill::Zeroed { &ZEROED } else { &OVERWRITTEN };
        list.lock().unwrap().push((vm.0 as usize, range.start().0, range.size()));
        Ok(range.size())
    }

    fn zeroed_by(vm: usize) -> Vec<(u64, u64)> {
        ZEROED.lock().unwrap().iter().filter(|z| z.0 == vm).map(|z| (z.1, z.2)).collect()
    }

    #[test]
    fn each_block_is_zeroed_once_whoever_touches_it_first() {
        let ram = FirstTouch::new(CapId(101), RAM, 8 * MIB2, false, record);
        assert!(ram.fault(RAM + 3 * MIB2 + 8), "a vCPU's fault in RAM: zeroed, the access made again");
        assert!(ram.fault(RAM + 3 * MIB2 + 0x1000), "the same block again (another vCPU raced): retried, not zeroed");
        ram.prepare(RAM + 4 * MIB2 - 4, 8).unwrap();
        assert_eq!(zeroed_by(101), [(RAM + 3 * MIB2, MIB2), (RAM + 4 * MIB2, MIB2)]);
        assert_eq!(ram.done_blocks().collect::<Vec<_>>(), [(3 * MIB2, MIB2), (4 * MIB2, MIB2)]);
    }

    #[test]
    fn the_loader_s_blocks_are_zeroed_unless_it_writes_all_of_them() {
        let ram = FirstTouch::new(CapId(106), RAM, 16 * MIB2, false, record);
        // A kernel from 2 MiB + 512 KiB to 8 MiB + 512 KiB: blocks 1 and 4 partly, 2 and 3 whole.
        ram.prepare_overwritten(RAM + MIB2 + MIB2 / 4, 3 * MIB2).unwrap();
        assert_eq!(zeroed_by(106), [(RAM + MIB2, MIB2), (RAM + 4 * MIB2, MIB2)]);
        let overwritten: Vec<_> =
            OVERWRITTEN.lock().unwrap().iter().filter(|z| z.0 == 106).map(|z| (z.1, z.2)).collect();
        assert_eq!(overwritten, [(RAM + 2 * MIB2, MIB2), (RAM + 3 * MIB2, MIB2)]);
        assert_eq!(ram.done_blocks().count(), 4);
    }

    #[test]
    fn a_range_in_one_done_block_is_ready_and_one_reaching_a_pending_block_zeroes_it() {
        let ram = FirstTouch::new(CapId(119), RAM, 8 * MIB2, false, record);
        ram.prepare(RAM + MIB2 + 16, 4096).unwrap();
        assert_eq!(zeroed_by(119), [(RAM + MIB2, MIB2)]);
        // Inside the done block, up to its last byte: nothing more.
        ram.prepare(RAM + MIB2, MIB2).unwrap();
        ram.prepare(RAM + 2 * MIB2 - 1, 1).unwrap();
        ram.prepare(RAM + MIB2, 0).unwrap();
        assert_eq!(zeroed_by(119).len(), 1);
        // One byte further, into the next block, pending: zeroed.
        ram.prepare(RAM + 2 * MIB2 - 1, 2).unwrap();
        assert_eq!(zeroed_by(119), [(RAM + MIB2, MIB2), (RAM + 2 * MIB2, MIB2)]);
        // The last block, done, and past the end of RAM: refused, as before.
        ram.prepare(RAM + 8 * MIB2 - 8, 8).unwrap();
        assert_eq!(ram.prepare(RAM + 8 * MIB2 - 8, 9), Err(CapError::NotPrivateRam { ipa: RAM + 8 * MIB2 - 8 }));
    }

    #[test]
    fn nothing_outside_ram_is_zeroed() {
        let ram = FirstTouch::new(CapId(102), RAM, 8 * MIB2, false, record);
        assert!(!ram.fault(RAM - 1) && !ram.fault(RAM + 8 * MIB2) && !ram.fault(0x0900_0000));
        for (ipa, len) in [(RAM + 8 * MIB2 - 4, 8), (RAM - 4, 8), (u64::MAX, 2), (RAM, u64::MAX)] {
            assert_eq!(ram.prepare(ipa, len), Err(CapError::NotPrivateRam { ipa }), "{ipa:#x}+{len:#x}");
        }
        assert!(zeroed_by(102).is_empty());
    }

    #[test]
    fn an_identity_mapped_vm_s_ram_is_done_from_the_start() {
        let ram = FirstTouch::new(CapId(103), RAM, 130 * MIB2, true, record);
        ram.prepare(RAM, 130 * MIB2).unwrap();
        assert!(zeroed_by(103).is_empty());
        assert_eq!(ram.done_blocks().count(), 130);
        assert_eq!(ram.done_blocks().map(|b| b.1).sum::<u64>(), 130 * MIB2);
    }

    #[test]
    fn a_refused_activation_leaves_the_block_pending() {
        fn refuse(_: CapId, range: IpaRange, _: Fill) -> Result<u64, CapError> {
            Err(CapError::NotPrivateRam { ipa: range.start().0 })
        }
        let ram = FirstTouch::new(CapId(104), RAM, 4 * MIB2, false, refuse);
        assert!(!ram.fault(RAM));
        assert_eq!(ram.done_blocks().count(), 0);
    }

    #[test]
    fn vcpus_touching_one_block_at_once_zero_it_once() {
        let ram = std::sync::Arc::new(FirstTouch::new(CapId(105), RAM, 64 * MIB2, false, record));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let ram = std::sync::Arc::clone(&ram);
                std::thread::spawn(move || {
                    for b in 0..32u64 {
                        assert!(ram.fault(RAM + ((b + t * 7) % 32) * MIB2 + t * 0x1000));
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut zeroed = zeroed_by(105);
        zeroed.sort();
        assert_eq!(zeroed, (0..32).map(|b| (RAM + b * MIB2, MIB2)).collect::<Vec<_>>());
    }
}
