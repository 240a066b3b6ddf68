//! Deactivations of active interrupts that no list register shows (docs/vgic.md, "Active
//! interrupts no list register shows").
//!
//! When more interrupts are active on a vCPU than its list registers hold (a guest that set
//! them active through GICD_ISACTIVER or GICR_ISACTIVER0 above those it took), the plan
//! leaves the lowest-priority active ones out and asks for LRENPIE. The guest's deactivation
//! of one of those finds no list register: the virtual CPU interface only counts it, in
//! ICH_HCR_EL2.EOIcount or GICH_HCR.EOICount (IHI 0069H 12.4; IHI 0048B 5.3), and raises
//! the maintenance interrupt. The count names no INTID. With EOImode 0 a guest deactivates
//! in the order of its running priorities, the highest first (IHI 0069H 4.8, "Interrupt
//! prioritization"; IHI 0048B 3.3), so the hypervisor deactivates that many of the
//! vCPU's active interrupts no list register shows, highest priority first: the order the
//! plan keeps them in (`wanted`), the one it shows them by.

use crate::distributor::PARKED;
use crate::interface::VcpuInterfaceState;
use crate::wanted::WantedList;
use crate::{Distributor, IntId, RetiredLines, MAX_LIST_REGISTERS};

impl Distributor {
    /// The guest deactivated `count` interrupts that no list register of `vcpu` showed.
    /// Its list registers are taken back (their own deactivations folded) before this.
    pub(crate) fn deactivate_unlisted(
        &mut self,
        vcpu: usize,
        state: &VcpuInterfaceState,
        count: u32,
        retired: &mut RetiredLines,
    ) {
        // The best 16 are enough: EOIcount counts deactivations since the last exit, and
        // more active interrupts than that are left out only of a CPU with fewer list
        // registers than the wanted list's length.
        let mut wanted = WantedList::<MAX_LIST_REGISTERS>::new();
        self.wanted(vcpu, &mut wanted);
        let shown =
            |intid: u32| (0..MAX_LIST_REGISTERS).any(|i| state.lr[i] != 0 && self.vintid_of(state.lr[i]) == intid);
        let mut left = count;
        let mut chosen = [0u32; MAX_LIST_REGISTERS];
        let mut n = 0;
        for w in wanted.as_slice().iter().take_while(|w| w.lr.state.active()) {
            if left == 0 {
                break;
            }
            if !shown(w.lr.vintid.0) {
                chosen[n] = w.lr.vintid.0;
                n += 1;
                left -= 1;
            }
        }
        for &intid in &chosen[..n] {
            self.deactivate_unlisted_one(vcpu, intid, retired);
        }
    }

    /// What a list register's deactivation does (`fold` of an emptied register), for an
    /// interrupt no list register held: its active state ends; a level interrupt whose input
    /// is still high is pending again; a hardware-mapped one's physical interrupt, which no
    /// HW = 1 register deactivated, goes to the hypervisor to deactivate (an SPI's from any
    /// CPU, `deactivate_retired`; a PPI's, the virtual timer's, on this CPU, `retired`); an
    /// SPI parked with this vCPU is no longer its.
    fn deactivate_unlisted_one(&mut self, vcpu: usize, intid: u32, retired: &mut RetiredLines) {
        let Some(s) = self.irq_mut(vcpu, intid) else { return };
        s.set_active(false);
        let physical = s.hw();
        if physical.is_some() {
            s.set_line(s.refired());
            s.set_refired(false);
        }
        let slot = (intid as usize).wrapping_sub(32);
        match self.spi_owner.get(slot).copied() {
            Some(owner) => {
                if owner == vcpu as u8 | PARKED {
                    self.unpark(intid);
                }
                if physical.is_some() {
                    self.retired.insert(slot);
                }
            }
            None => {
                if let Some(p) = physical {
                    retired.push(IntId(p));
                }
            }
        }
    }
}
