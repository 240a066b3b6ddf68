//! The one list register an image's exception vector may write again by itself: a vCPU's
//! SGI that comes back posted (docs/vgic.md, "The same SGI shown again in the vector").
//!
//! A vCPU that took an SGI through the plan's list register and completed it, with no exit
//! since, still has that register in its record as the plan wrote it: pending, with the
//! SGI's priority and group (and on a GICv2 its source CPU). If the same SGI is posted to it again, the truth becomes what
//! the record already says the moment the register is written again with the record's own
//! value: the SGI pending in that list register. The vector can then take the kick and
//! write the register without the run loop, the locks or a plan, and the take-back at the
//! vCPU's next exit to the run loop folds whatever the guest did with it, as for any
//! register the plan wrote. Nothing else may be written that way: another SGI would have to
//! be folded into the record first, and that is the run loop's.

use crate::interface::VcpuInterfaceState;
use crate::lr::Maintenance;
use crate::{Distributor, GicVersion, POSTED_SGIS};

impl Distributor {
    /// The list register `vcpu`'s exception vector may write again, and its value, when one
    /// of SGIs 0 to 7 comes back posted: `Some((n, raw))` if the vCPU holds list register n
    /// alone, its record (ICH_LR<n>_EL2, or GICH_LR<n> with the SGI's source CPU) shows
    /// one of those SGIs pending, no maintenance interrupt is asked for, the SGI has no
    /// pending state of its own left out of the register (on a GICv2, from no source) and is
    /// not active, and the plan would write exactly `raw` for it now (enabled, its group
    /// enabled, the same priority, group and source: `want_private`). On a GICv2 the vector
    /// takes only a post from the source the register names. The
    /// vector writes it only if every list register is empty, so that no other one shows
    /// the SGI (one vINTID in two valid list registers is UNPREDICTABLE: IHI 0069H,
    /// ICH_LR<n>_EL2), and the vCPU's posted SGIs are that one alone.
    pub fn sgi_to_show_again(&self, vcpu: usize, state: &VcpuInterfaceState) -> Option<(usize, u64)> {
        // The cheapest tests first: a tick's plan (the timer's PPI in one register) asks too.
        let owned = state.owned();
        if owned == 0 || owned & (owned - 1) != 0 {
            return None;
        }
        let n = owned.trailing_zeros() as usize;
        let raw = *state.lr.get(n)?;
        let intid = self.vintid_of(raw);
        if intid >= POSTED_SGIS || state.maintenance() != Maintenance::NONE {
            return None;
        }
        let rd = self.redistributors.get(vcpu)?;
        let s = rd.irq(intid)?;
        // A GICv2's SGI is pending per source (IHI 0048B 3.2.3): no source of it may wait
        // outside the register, whose value names the one it shows.
        let waiting = match self.version {
            GicVersion::V3 => s.latch(),
            GicVersion::V2 => rd.sgi_sources(intid) != 0,
        };
        if waiting || s.active() || !s.lr_pending() {
            return None;
        }
        let wanted = self.want_private_of(rd, intid)?;
        (!wanted.refill_on_ack && self.encode(&wanted.lr) == raw).then_some((n, raw))
    }
}
