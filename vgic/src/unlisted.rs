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
//!
//! A guest with EOImode 1 deactivates with ICV_DIR_EL1 in any order it likes, so the count
//! cannot say which interrupt it ended. On GICv3 its DIR writes trap while an active
//! interrupt is left out (ICH_HCR_EL2.TDIR beside LRENPIE, IHI 0069H 12.4) and name the
//! interrupt (`deactivate_by_dir`). GICv2's GICV_DIR is in the guest's mapped page of the
//! CPU interface and cannot trap there: a GICv2 guest that ends them out of order gets the
//! highest-priority one ended instead.

use crate::distributor::PARKED;
use crate::interface::VcpuInterfaceState;
use crate::wanted::WantedList;
use crate::{Distributor, GicVersion, IntId, ListRegisters, RetiredLines, VgicError, MAX_LIST_REGISTERS};

/// INTIDs 1020 and above: special (1020-1023) or LPIs, which a DIR write of this GIC does
/// not deactivate (IHI 0069H 2.2, "INTIDs").
const FIRST_SPECIAL: u32 = 1020;

impl Distributor {
    /// EOIcount, taken: how many interrupts no list register showed the guest deactivated
    /// since the last take-back. Not one on GICv3 with EOImode 1: its DIR writes trap and
    /// are answered one by one (`deactivate_by_dir`), and its EOIs only drop the running
    /// priority, though one that finds no list register may be counted all the same (QEMU's
    /// virtual CPU interface counts it).
    pub(crate) fn deactivations_counted(&self, lrs: &mut impl ListRegisters) -> u32 {
        let count = lrs.take_eoi_count();
        if count != 0 && self.version() == GicVersion::V3 && lrs.eoi_split() {
            return 0;
        }
        count
    }

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
        let mut left = count;
        let mut chosen = [0u32; MAX_LIST_REGISTERS];
        let mut n = 0;
        for w in wanted.as_slice().iter().take_while(|w| w.lr.state.active()) {
            if left == 0 {
                break;
            }
            if self.list_register_of(state, w.lr.vintid.0).is_none() {
                chosen[n] = w.lr.vintid.0;
                n += 1;
                left -= 1;
            }
        }
        for &intid in &chosen[..n] {
            self.deactivate_unlisted_one(vcpu, intid, retired);
        }
    }

    /// The guest wrote `value` to ICV_DIR_EL1, trapped (TDIR) while an active interrupt was
    /// left out of `vcpu`'s list registers: the interrupt it names [23:0] is deactivated
    /// as the virtual CPU interface would have (IHI 0069H, ICC_DIR_EL1 and its virtual
    /// twin ICV_DIR_EL1). As there, the write does nothing with EOImode 0, for a special
    /// INTID, or for an interrupt that is not active. A list register that shows the interrupt
    /// is emptied, its pending state back in the distributor, and the interrupt is then
    /// deactivated as one no list register shows: a hardware-mapped one's physical
    /// interrupt, which the trapped write did not reach, goes to the hypervisor. The caller
    /// plans the list registers again.
    pub fn deactivate_by_dir(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
        lrs: &mut impl ListRegisters,
        value: u64,
        retired: &mut RetiredLines,
    ) -> Result<(), VgicError> {
        // What the guest did before the write (its EOIs, its counted deactivations) first.
        self.take_back(vcpu, state, lrs, retired)?;
        let intid = (value & 0xff_ffff) as u32;
        if !lrs.eoi_split() || intid >= FIRST_SPECIAL {
            return Ok(());
        }
        match self.list_register_of(state, intid) {
            Some(i) => {
                let lr = self.decode(state.lr[i]);
                if !lr.state.active() {
                    return Ok(());
                }
                self.released(vcpu, &lr);
                state.clear_lr(i);
                lrs.write_lr(i, 0);
            }
            None if !self.irq(vcpu, intid).is_some_and(|s| s.active()) => return Ok(()),
            None => {}
        }
        self.deactivate_unlisted_one(vcpu, intid, retired);
        Ok(())
    }

    /// The list register of `state`'s vCPU that shows `intid`, if one does.
    fn list_register_of(&self, state: &VcpuInterfaceState, intid: u32) -> Option<usize> {
        (0..MAX_LIST_REGISTERS).find(|&i| state.lr[i] != 0 && self.vintid_of(state.lr[i]) == intid)
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
        let slot = self.shared_slot(intid).unwrap_or(usize::MAX);
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
