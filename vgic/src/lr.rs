//! List registers: the common view (`ListRegister`), its two hardware encodings, GICv3
//! ICH_LR<n>_EL2 (IHI 0069H 12.4, `IchLr`) and GICv2 GICH_LR<n> (IHI 0048B 5.3, `GichLr`),
//! and the `ListRegisters` trait through which the arch crate gives access to one CPU's list
//! registers and maintenance controls.

use crate::IntId;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum LrState {
    #[default]
    Invalid,
    Pending,
    Active,
    PendingActive,
}

impl LrState {
    pub const fn from_parts(pending: bool, active: bool) -> LrState {
        match (pending, active) {
            (false, false) => LrState::Invalid,
            (true, false) => LrState::Pending,
            (false, true) => LrState::Active,
            (true, true) => LrState::PendingActive,
        }
    }
    pub const fn pending(self) -> bool {
        matches!(self, LrState::Pending | LrState::PendingActive)
    }
    pub const fn active(self) -> bool {
        matches!(self, LrState::Active | LrState::PendingActive)
    }
    const fn bits(self) -> u64 {
        match self {
            LrState::Invalid => 0,
            LrState::Pending => 1,
            LrState::Active => 2,
            LrState::PendingActive => 3,
        }
    }
    const fn from_bits(bits: u64) -> LrState {
        LrState::from_parts(bits & 1 != 0, bits & 2 != 0)
    }
}

/// What one list register holds, in either GIC version's terms.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ListRegister {
    pub vintid: IntId,
    pub state: LrState,
    pub priority: u8,
    pub group1: bool,
    /// HW = 1: the physical INTID that the guest's deactivation also deactivates.
    pub hw: Option<u32>,
    /// HW = 0 only: raise the EOI maintenance interrupt when the guest deactivates it (to
    /// sample a level line again, or to bring in the next source of a GICv2 SGI).
    pub eoi_maintenance: bool,
    /// GICv2 SGIs: the source CPU, which the guest reads in GICV_IAR.CPUID.
    pub source: u8,
}

impl ListRegister {
    /// An empty list register (encodes as 0 in both formats).
    pub const INVALID: ListRegister = ListRegister {
        vintid: IntId(0),
        state: LrState::Invalid,
        priority: 0,
        group1: false,
        hw: None,
        eoi_maintenance: false,
        source: 0,
    };
}

/// ICH_LR<n>_EL2: vINTID [31:0], pINTID [44:32] (HW = 1) or EOI [41] (HW = 0),
/// Priority [55:48], Group [60], HW [61], State [63:62].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IchLr(pub u64);

impl IchLr {
    #[inline(always)]
    pub fn encode(lr: &ListRegister) -> IchLr {
        let mut v = u64::from(lr.vintid.0) | (u64::from(lr.priority) << 48) | (lr.state.bits() << 62);
        if lr.group1 {
            v |= 1 << 60;
        }
        match lr.hw {
            Some(p) => v |= (1 << 61) | (u64::from(p & 0x1fff) << 32),
            None if lr.eoi_maintenance => v |= 1 << 41,
            None => {}
        }
        IchLr(v)
    }
    /// vINTID alone.
    pub fn vintid(self) -> u32 {
        self.0 as u32
    }
    /// HW alone.
    pub fn hw(self) -> bool {
        self.0 & (1 << 61) != 0
    }
    pub fn decode(self) -> ListRegister {
        let v = self.0;
        let hw = v & (1 << 61) != 0;
        ListRegister {
            vintid: IntId(v as u32),
            state: LrState::from_bits(v >> 62),
            priority: (v >> 48) as u8,
            group1: v & (1 << 60) != 0,
            hw: hw.then_some(((v >> 32) & 0x1fff) as u32),
            eoi_maintenance: !hw && v & (1 << 41) != 0,
            source: 0,
        }
    }
}

/// GICH_LR<n>: VirtualID [9:0], PhysicalID [19:10] (HW = 1) or, with HW = 0, EOI [19] and
/// CPUID [12:10] for SGIs; Priority [27:23] (the top five bits), State [29:28], Grp1 [30],
/// HW [31].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GichLr(pub u32);

impl GichLr {
    #[inline(always)]
    pub fn encode(lr: &ListRegister) -> GichLr {
        let mut v = (lr.vintid.0 & 0x3ff) | (u32::from(lr.priority >> 3) << 23) | ((lr.state.bits() as u32) << 28);
        if lr.group1 {
            v |= 1 << 30;
        }
        match lr.hw {
            Some(p) => v |= (1 << 31) | ((p & 0x3ff) << 10),
            None => {
                v |= u32::from(lr.source & 7) << 10;
                if lr.eoi_maintenance {
                    v |= 1 << 19;
                }
            }
        }
        GichLr(v)
    }
    /// VirtualID alone.
    pub fn vintid(self) -> u32 {
        self.0 & 0x3ff
    }
    /// HW alone.
    pub fn hw(self) -> bool {
        self.0 & (1 << 31) != 0
    }
    pub fn decode(self) -> ListRegister {
        let v = self.0;
        let hw = v & (1 << 31) != 0;
        ListRegister {
            vintid: IntId(v & 0x3ff),
            state: LrState::from_bits(u64::from(v >> 28)),
            priority: (((v >> 23) & 0x1f) << 3) as u8,
            group1: v & (1 << 30) != 0,
            hw: hw.then_some((v >> 10) & 0x3ff),
            eoi_maintenance: !hw && v & (1 << 19) != 0,
            source: if hw { 0 } else { ((v >> 10) & 7) as u8 },
        }
    }
}

/// Maintenance interrupts to ask for (ICH_HCR_EL2 / GICH_HCR, same bit positions).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Maintenance {
    /// UIE: when at most one list register holds a valid interrupt, so the rest can come in.
    pub underflow: bool,
    /// NPIE: when no list register holds a pending interrupt (a GICv2 SGI's next source
    /// waits for the current one to be acknowledged).
    pub no_pending: bool,
    /// LRENPIE: when the guest deactivated an interrupt no list register shows (EOIcount
    /// not 0): asked for while an active interrupt is left out of them (docs/vgic.md,
    /// "Active interrupts no list register shows"). On GICv3 the list-register file also
    /// traps the guest's ICV_DIR_EL1 writes meanwhile (ICH_HCR_EL2.TDIR), which name the
    /// interrupt they deactivate (`Distributor::deactivate_by_dir`).
    pub entry_not_present: bool,
}

impl Maintenance {
    /// None asked for (the `Default`).
    pub const NONE: Maintenance = Maintenance { underflow: false, no_pending: false, entry_not_present: false };

    /// The UIE [1], LRENPIE [2] and NPIE [3] bits of ICH_HCR_EL2 and GICH_HCR.
    pub const fn hcr_bits(self) -> u32 {
        ((self.underflow as u32) << 1) | ((self.entry_not_present as u32) << 2) | ((self.no_pending as u32) << 3)
    }
}

/// ICH_HCR_EL2.EOIcount / GICH_HCR.EOICount [31:27] (IHI 0069H 12.4; IHI 0048B 5.3, GICH_HCR): the
/// guest's deactivations (an EOI with EOImode 0, or a DIR) of interrupts no list register
/// showed, counted by the virtual CPU interface.
pub const HCR_EOI_COUNT_SHIFT: u32 = 27;

/// One CPU's list registers and their status registers. The arch crate implements it over
/// ICH_*_EL2 (GICv3) or the GICH frame (GICv2); the vGIC reads and writes only the list
/// registers it uses, in the raw format of the VM's GIC version (ICH_LR<n>_EL2, or GICH_LR<n>
/// in the low 32 bits).
pub trait ListRegisters {
    /// Implemented list registers: ICH_VTR_EL2.ListRegs + 1, or GICH_VTR.ListRegs + 1.
    fn count(&self) -> usize;
    fn read_lr(&self, index: usize) -> u64;
    fn write_lr(&mut self, index: usize, value: u64);
    /// ICH_ELRSR_EL2, or GICH_ELRSR0: bit n set = LR n holds no valid interrupt and no
    /// pending EOI maintenance. 32 bits: no more than `MAX_LIST_REGISTERS` (16) list
    /// registers are used, so GICH_ELRSR1 (LRs 32 to 63) is never read, and a 32-bit CPU
    /// handles the mask in one register.
    fn empty_status(&self) -> u32;
    /// ICH_EISR_EL2, or GICH_EISR0: bit n set = the guest deactivated the interrupt of LR n,
    /// which asked for an EOI maintenance interrupt.
    fn eoi_status(&self) -> u32;
    /// Sets UIE, LRENPIE and NPIE in ICH_HCR_EL2 / GICH_HCR (En stays the arch crate's
    /// business).
    fn set_maintenance(&mut self, maintenance: Maintenance);
    /// ICH_HCR_EL2.EOIcount / GICH_HCR.EOICount, which it sets to 0 (the rest of the register
    /// as it was): how many interrupts the guest deactivated that no list register showed
    /// since the last call.
    fn take_eoi_count(&mut self) -> u32;
    /// ICH_VMCR_EL2.VEOIM / GICH_VMCR.VEM [9]: the guest's EOImode is 1, its EOI only drops
    /// the running priority and a write of ICV_DIR_EL1 / GICV_DIR deactivates.
    fn eoi_split(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ich_lr_round_trips_a_32_bit_vintid_and_13_bit_pintid() {
        // IHI 0069H 12.4, ICH_LR<n>_EL2: vINTID is 32 bits; nothing is truncated to 8.
        let lr = ListRegister {
            vintid: IntId(1019),
            state: LrState::PendingActive,
            priority: 0xa8,
            group1: true,
            hw: Some(4000),
            ..ListRegister::INVALID
        };
        let raw = IchLr::encode(&lr);
        assert_eq!(raw.decode(), lr);
        assert_eq!(raw.0 & 0xffff_ffff, 1019);
        assert_eq!((raw.0 >> 32) & 0x1fff, 4000);
        assert_eq!(raw.0 >> 62, 3);
        assert_eq!((raw.0 >> 48) & 0xff, 0xa8);
        assert_eq!(raw.0 & (3 << 60), 3 << 60, "Group and HW");
    }

    #[test]
    fn ich_lr_eoi_bit_only_without_hw() {
        let sw =
            ListRegister { vintid: IntId(40), state: LrState::Pending, eoi_maintenance: true, ..ListRegister::INVALID };
        assert_eq!(IchLr::encode(&sw).0, 40 | (1 << 41) | (1 << 62));
        let hw = ListRegister { hw: Some(27), ..sw };
        assert!(!IchLr::encode(&hw).decode().eoi_maintenance, "bit 41 is pINTID with HW = 1");
    }

    #[test]
    fn gich_lr_layout() {
        // IHI 0048B 5.3, GICH_LRn.
        let sgi = ListRegister {
            vintid: IntId(3),
            state: LrState::Pending,
            priority: 0x10,
            eoi_maintenance: true,
            source: 5,
            ..ListRegister::INVALID
        };
        assert_eq!(GichLr::encode(&sgi).0, 3 | (5 << 10) | (1 << 19) | (2 << 23) | (1 << 28));
        assert_eq!(GichLr::encode(&sgi).decode(), sgi);
        let hw = ListRegister {
            vintid: IntId(27),
            state: LrState::Active,
            priority: 0xf8,
            group1: true,
            hw: Some(27),
            ..ListRegister::INVALID
        };
        assert_eq!(GichLr::encode(&hw).0, 27 | (27 << 10) | (0x1f << 23) | (2 << 28) | (1 << 30) | (1 << 31));
        assert_eq!(GichLr::encode(&hw).decode(), hw);
    }

    #[test]
    fn invalid_encodes_as_zero() {
        assert_eq!(IchLr::encode(&ListRegister::INVALID).0, 0);
        assert_eq!(GichLr::encode(&ListRegister::INVALID).0, 0);
    }

    #[test]
    fn maintenance_bits_match_ich_hcr() {
        assert_eq!(Maintenance { underflow: true, ..Maintenance::NONE }.hcr_bits(), 1 << 1);
        assert_eq!(Maintenance { entry_not_present: true, ..Maintenance::NONE }.hcr_bits(), 1 << 2);
        assert_eq!(Maintenance { no_pending: true, ..Maintenance::NONE }.hcr_bits(), 1 << 3);
    }
}
