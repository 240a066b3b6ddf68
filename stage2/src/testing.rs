//! Test doubles: table memory in a Vec and a TLB that records what it was asked, sharing
//! one event log so tests can check the order of descriptor writes and invalidations
//! (break-before-make).

extern crate std;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::vec::Vec;

use crate::{Ipa, PhysAddr, TableMemory, TlbMaintenance, PAGE_SIZE};

/// Something that happened to the tables or the TLB, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Write { frame: PhysAddr, index: usize, old: u64, new: u64 },
    InvalidateIpa { vmid: u16, ipa: Ipa },
    InvalidateVmid { vmid: u16 },
    Publish,
}

pub type EventLog = Rc<RefCell<Vec<Event>>>;

/// Table frames at fake physical addresses from 0x1_0000_0000, with a budget of frames.
pub struct VecTableMemory {
    frames: BTreeMap<u64, [u64; 512]>,
    next: u64,
    budget: usize,
    log: EventLog,
}

impl VecTableMemory {
    /// Room for `frames` frames in use at once.
    pub fn with_capacity(frames: usize) -> Self {
        VecTableMemory { frames: BTreeMap::new(), next: 0x1_0000_0000, budget: frames, log: EventLog::default() }
    }

    pub fn frames_in_use(&self) -> usize {
        self.frames.len()
    }

    /// Frames that can still be allocated.
    pub fn frames_left(&self) -> usize {
        self.budget.saturating_sub(self.frames.len())
    }

    pub fn set_budget(&mut self, frames: usize) {
        self.budget = frames;
    }

    /// Every frame's contents: equal snapshots mean identical tables.
    pub fn snapshot(&self) -> BTreeMap<u64, [u64; 512]> {
        self.frames.clone()
    }

    pub fn log(&self) -> EventLog {
        Rc::clone(&self.log)
    }
}

impl TableMemory for VecTableMemory {
    fn allocate_zeroed_frames(&mut self, count: usize) -> Option<PhysAddr> {
        if self.frames.len() + count > self.budget {
            return None;
        }
        let align = count as u64 * PAGE_SIZE;
        let base = self.next.next_multiple_of(align);
        self.next = base + align;
        for i in 0..count as u64 {
            self.frames.insert(base + i * PAGE_SIZE, [0; 512]);
        }
        Some(PhysAddr(base))
    }

    fn free_frames(&mut self, base: PhysAddr, count: usize) {
        for i in 0..count as u64 {
            let removed = self.frames.remove(&(base.0 + i * PAGE_SIZE));
            assert!(removed.is_some(), "freeing frame {:#x}, which is not allocated", base.0 + i * PAGE_SIZE);
        }
    }

    fn read_descriptor(&self, table: PhysAddr, index: usize) -> u64 {
        let frame =
            self.frames.get(&table.0).unwrap_or_else(|| panic!("reading frame {:#x}, which is not allocated", table.0));
        frame[index]
    }

    fn write_descriptor(&mut self, table: PhysAddr, index: usize, value: u64) {
        let frame = self
            .frames
            .get_mut(&table.0)
            .unwrap_or_else(|| panic!("writing frame {:#x}, which is not allocated", table.0));
        let old = std::mem::replace(&mut frame[index], value);
        self.log.borrow_mut().push(Event::Write { frame: table, index, old, new: value });
    }
}

/// A TLB that records each maintenance operation in the shared log.
pub struct RecordingTlb {
    log: EventLog,
}

impl RecordingTlb {
    /// Records into the same log as `mem`.
    pub fn sharing(mem: &VecTableMemory) -> Self {
        RecordingTlb { log: mem.log() }
    }
    pub fn events(&self) -> Vec<Event> {
        self.log.borrow().clone()
    }
}

impl TlbMaintenance for RecordingTlb {
    fn invalidate_ipa(&mut self, vmid: u16, ipa: Ipa) {
        self.log.borrow_mut().push(Event::InvalidateIpa { vmid, ipa });
    }
    fn invalidate_vmid(&mut self, vmid: u16) {
        self.log.borrow_mut().push(Event::InvalidateVmid { vmid });
    }
    fn publish(&mut self) {
        self.log.borrow_mut().push(Event::Publish);
    }
}
