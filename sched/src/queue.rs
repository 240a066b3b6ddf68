//! A CPU's run queue: its runnable vCPUs, in the order they will run.
//!
//! One deque in two sections. In front, the vCPUs woken (by a virtual interrupt) in the middle
//! of their turn, first woken first: they run as soon as the current slice ends, which is what
//! bounds the wake-up latency to one slice. Behind them, the round-robin queue proper, where a
//! vCPU goes when it starts a new turn (preempted at the end of its slice, started, yielded,
//! or woken with its turn used up). Only a vCPU with some of its turn left may go in front, so
//! blocking and waking never lets a vCPU run more than one slice per round: that keeps the
//! round-robin bound for everyone else.

use alloc::collections::VecDeque;

use crate::VcpuRef;

#[derive(Clone, Debug, Default)]
pub(crate) struct RunQueue {
    deque: VecDeque<VcpuRef>,
    /// The length of the front section (woken vCPUs resuming their turn).
    woken: usize,
}

impl RunQueue {
    /// Room for `n` vCPUs in all: reserved when a vCPU is added, so that waking and preempting
    /// (on the exit path, under the scheduler lock) never allocate.
    pub fn reserve_total(&mut self, n: usize) {
        self.deque.reserve(n.saturating_sub(self.deque.len()));
    }

    pub fn is_empty(&self) -> bool {
        self.deque.is_empty()
    }

    /// Queue `v` for a new turn, after everyone already waiting.
    pub fn push_back(&mut self, v: VcpuRef) {
        self.deque.push_back(v);
    }

    /// Queue `v`, woken in the middle of its turn, after the other such vCPUs but before the
    /// round-robin section.
    pub fn push_woken(&mut self, v: VcpuRef) {
        self.deque.insert(self.woken, v);
        self.woken += 1;
    }

    pub fn pop_front(&mut self) -> Option<VcpuRef> {
        let v = self.deque.pop_front()?;
        self.woken = self.woken.saturating_sub(1);
        Some(v)
    }

    /// Take `v` out wherever it is (stopped or removed while waiting). Returns whether it was
    /// there.
    pub fn remove(&mut self, v: VcpuRef) -> bool {
        match self.deque.iter().position(|&w| w == v) {
            Some(i) => {
                self.deque.remove(i);
                if i < self.woken {
                    self.woken -= 1;
                }
                true
            }
            None => false,
        }
    }

    /// The waiting vCPUs, next first.
    pub fn iter(&self) -> impl Iterator<Item = VcpuRef> + '_ {
        self.deque.iter().copied()
    }

    /// How many of the first vCPUs are woken ones resuming their turn.
    pub fn woken(&self) -> usize {
        self.woken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: u16) -> VcpuRef {
        VcpuRef::new(0, i)
    }

    #[test]
    fn woken_vcpus_go_in_front_first_woken_first_and_removal_keeps_the_sections() {
        let mut q = RunQueue::default();
        q.push_back(v(0));
        q.push_back(v(1));
        q.push_woken(v(2));
        q.push_woken(v(3));
        assert_eq!(q.iter().collect::<alloc::vec::Vec<_>>(), [v(2), v(3), v(0), v(1)]);
        assert!(q.remove(v(2)));
        assert_eq!(q.woken(), 1);
        q.push_woken(v(4));
        assert_eq!(q.iter().collect::<alloc::vec::Vec<_>>(), [v(3), v(4), v(0), v(1)]);
        assert_eq!(q.pop_front(), Some(v(3)));
        assert_eq!(q.woken(), 1);
        assert!(!q.remove(v(9)));
        assert!(q.remove(v(1)));
        assert_eq!((q.pop_front(), q.pop_front(), q.pop_front()), (Some(v(4)), Some(v(0)), None));
        assert_eq!(q.woken(), 0);
    }
}
