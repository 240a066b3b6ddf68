//! What one vCPU should see in its list registers: its private interrupts and the SPIs
//! routed to it (or still held in its list registers), each with the list-register
//! contents that show its state, best first. Only the best `N` are kept (no more than the
//! list registers that could show them), with a count of the rest: no allocation, whatever
//! the number pending.

use crate::distributor::spi_holder;
use crate::gicr::Redistributor;
use crate::lr::{ListRegister, LrState};
use crate::mask::set_bits;
use crate::planner::Wanted;
use crate::state::IrqState;
use crate::{Distributor, IntId};

pub(crate) struct WantedList<const N: usize> {
    items: [Wanted; N],
    len: usize,
    total: usize,
    /// An active interrupt was pushed that the list has no room for.
    dropped_active: bool,
}

/// Active interrupts first (the guest must find them to deactivate them), then by
/// priority, lower value first, then by lower INTID (IHI 0069H 4.8, "Interrupt
/// prioritization"; IHI 0048B 3.3).
fn key(w: &Wanted) -> (bool, u8, u32) {
    (!w.lr.state.active(), w.lr.priority, w.lr.vintid.0)
}

impl<const N: usize> WantedList<N> {
    pub(crate) fn new() -> WantedList<N> {
        WantedList { items: [Wanted::default(); N], len: 0, total: 0, dropped_active: false }
    }

    // Inlined: called out of line, the copy of `w` into the list is a memcpy call.
    #[inline(always)]
    fn push(&mut self, w: Wanted) {
        self.total += 1;
        let k = key(&w);
        let pos = self.items[..self.len].iter().position(|x| key(x) > k).unwrap_or(self.len);
        if pos >= N {
            self.dropped_active |= w.lr.state.active();
            return;
        }
        if self.len < N {
            self.len += 1;
        } else {
            self.dropped_active |= self.items[N - 1].lr.state.active();
        }
        // Shifted one by one: a list this short (usually empty) is not worth a memmove call.
        for i in (pos + 1..self.len).rev() {
            self.items[i] = self.items[i - 1];
        }
        self.items[pos] = w;
    }

    pub(crate) fn as_slice(&self) -> &[Wanted] {
        &self.items[..self.len]
    }
    pub(crate) fn more_waiting(&self) -> bool {
        self.total > self.len
    }
    pub(crate) fn more_waiting_active(&self) -> bool {
        self.dropped_active
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.total == 0
    }
    pub(crate) fn any_pending(&self) -> bool {
        self.more_waiting() || self.as_slice().iter().any(|w| w.lr.state.pending())
    }
}

impl Distributor {
    /// Fills `list` (empty) with what `vcpu` should see. The caller owns the list, so the
    /// few hundred bytes of it are not copied on the way back.
    pub(crate) fn wanted<const N: usize>(&self, vcpu: usize, list: &mut WantedList<N>) {
        let Some(rd) = self.redistributors.get(vcpu) else { return };
        // Only the private interrupts that may not be quiet: usually one, or none.
        for intid in set_bits(rd.live()) {
            if let Some(w) = self.want_private(vcpu, intid as u32) {
                list.push(w);
            }
        }
        for slot in self.live_spis.0.slots() {
            let (Some(&irq), Some(&owner)) = (self.spi.get(slot), self.spi_owner.get(slot)) else { continue };
            if irq.quiet() {
                continue;
            }
            let holder = spi_holder(owner, irq);
            if holder.is_some_and(|h| h != vcpu) {
                continue;
            }
            let intid = self.shared_intid(slot);
            let on_target = self.target(vcpu, intid) == Some(vcpu);
            // An SPI routed elsewhere while in this vCPU's list register, or while active
            // here (`PARKED`), stays here until it is no longer active; its pending state
            // goes to the new target.
            if holder.is_none() && !on_target {
                continue;
            }
            if let Some(w) = self.want(irq, intid, on_target) {
                list.push(w);
            }
        }
    }

    /// The pending state is forwarded only if the interrupt is enabled, its group is enabled
    /// in GICD_CTLR (IHI 0069H 12.9.4, IHI 0048B 4.3.1) and it targets this vCPU; an active
    /// one is shown regardless, so the guest can deactivate it.
    // Inlined into each caller: out of line, its `Option<Wanted>` came back through memory
    // (a `memcpy` of about 30 instructions on the tick's path).
    #[inline(always)]
    pub(crate) fn want(&self, s: IrqState, intid: u32, on_target: bool) -> Option<Wanted> {
        let pending = on_target && s.enabled() && self.group_enabled(s) && s.wants_pending();
        if !pending && !s.active() {
            return None;
        }
        let lr = ListRegister {
            vintid: IntId(intid),
            state: LrState::from_parts(pending, s.active()),
            priority: s.priority,
            group1: s.group1(),
            hw: s.hw(),
            // A software level interrupt is sampled again when the guest deactivates it, if
            // its input is still high; one whose input dropped (a virtio driver's
            // InterruptACK before its EOI) has nothing to sample, and a later rise kicks
            // its vCPU and plans it afresh (`Distributor::set_level`), so its list register
            // asks for no maintenance interrupt.
            eoi_maintenance: s.hw().is_none() && !s.edge() && s.line(),
            source: 0,
        };
        Some(Wanted { lr, refill_on_ack: false })
    }

    /// A private interrupt. GICv2 SGIs show one source at a time (one list register per
    /// INTID); the others wait in `sgi_sources` and come in through the no-pending
    /// maintenance interrupt (after this one is acknowledged) or the EOI one (after it is
    /// deactivated).
    // Inlined, as `want`: out of line, its `Option<Wanted>` came back through memory and the
    // plan's fast path (`flush_one`) read it back field by field.
    #[inline(always)]
    pub(crate) fn want_private(&self, vcpu: usize, intid: u32) -> Option<Wanted> {
        self.want_private_of(self.redistributors.get(vcpu)?, intid)
    }

    /// `want_private` of the vCPU whose redistributor is `rd`.
    #[inline(always)]
    pub(crate) fn want_private_of(&self, rd: &Redistributor, intid: u32) -> Option<Wanted> {
        let s = *rd.irq(intid)?;
        if !self.is_v2_sgi(intid) {
            return self.want(s, intid, true);
        }
        let forward = s.enabled() && self.group_enabled(s);
        let waiting = rd.sgi_sources(intid);
        let (source, pending) = if s.active() || s.lr_pending() {
            let src = rd.sgi_lr_source[intid as usize] & 7;
            (src, forward && (s.lr_pending() || (s.active() && waiting & (1 << src) != 0)))
        } else {
            (waiting.trailing_zeros().min(7) as u8, forward && waiting != 0)
        };
        if !pending && !s.active() {
            return None;
        }
        let others = forward && waiting & !(1 << source) != 0;
        let lr = ListRegister {
            vintid: IntId(intid),
            state: LrState::from_parts(pending, s.active()),
            priority: s.priority,
            group1: s.group1(),
            hw: None,
            eoi_maintenance: s.active() && others,
            source,
        };
        Some(Wanted { lr, refill_on_ack: !s.active() && others })
    }
}
