//! List register formats: GICv3 ICH_LR<n>_EL2 (IHI 0069, register description of ICH_LR<n>_EL2) and GICv2
//! GICH_LR<n> (IHI 0048B 5.3.6). Both describe the same thing; `ListRegister` is the common
//! view the planner works with.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LrState {
    Invalid,
    Pending,
    Active,
    PendingActive,
}

impl LrState {
    fn bits(self) -> u64 {
        match self {
            LrState::Invalid => 0,
            LrState::Pending => 1,
            LrState::Active => 2,
            LrState::PendingActive => 3,
        }
    }
    fn from_bits(b: u64) -> Self {
        match b & 3 {
            0 => LrState::Invalid,
            1 => LrState::Pending,
            2 => LrState::Active,
            _ => LrState::PendingActive,
        }
    }
}

/// What one list register holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ListRegister {
    pub vintid: u32,
    pub state: LrState,
    pub priority: u8,
    pub group1: bool,
    /// Hardware-mapped to this physical INTID.
    pub hw: Option<u32>,
    /// For a software interrupt: raise a maintenance interrupt when the guest EOIs it (so a
    /// level-sensitive line can be sampled again).
    pub eoi_maintenance: bool,
    /// GICv2 SGIs: the source CPU.
    pub source: u8,
}

/// GICv3 ICH_LR<n>_EL2: vINTID [31:0], pINTID [44:32] (HW = 1) or EOI [41] (HW = 0),
/// Priority [55:48], Group [60], HW [61], State [63:62].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IchLr(pub u64);

impl IchLr {
    pub fn encode(lr: &ListRegister) -> IchLr {
        let mut v = u64::from(lr.vintid) | (u64::from(lr.priority) << 48) | (lr.state.bits() << 62);
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
    pub fn decode(self) -> ListRegister {
        let v = self.0;
        let hw = v & (1 << 61) != 0;
        ListRegister {
            vintid: v as u32,
            state: LrState::from_bits(v >> 62),
            priority: (v >> 48) as u8,
            group1: v & (1 << 60) != 0,
            hw: hw.then_some(((v >> 32) & 0x1fff) as u32),
            eoi_maintenance: !hw && v & (1 << 41) != 0,
            source: 0,
        }
    }
}

/// GICv2 GICH_LR<n>: VirtualID [9:0], PhysicalID [19:10] (HW = 1) or EOI [19] and CPUID
/// [12:10] (HW = 0), Priority [27:23] (the top 5 bits), State [29:28], Grp1 [30], HW [31].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GichLr(pub u32);

impl GichLr {
    pub fn encode(lr: &ListRegister) -> GichLr {
        let mut v = (lr.vintid & 0x3ff) | (u32::from(lr.priority >> 3) << 23) | ((lr.state.bits() as u32) << 28);
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
    pub fn decode(self) -> ListRegister {
        let v = self.0;
        let hw = v & (1 << 31) != 0;
        ListRegister {
            vintid: v & 0x3ff,
            state: LrState::from_bits(u64::from(v >> 28)),
            priority: (((v >> 23) & 0x1f) << 3) as u8,
            group1: v & (1 << 30) != 0,
            hw: hw.then_some((v >> 10) & 0x3ff),
            eoi_maintenance: !hw && v & (1 << 19) != 0,
            source: if hw { 0 } else { ((v >> 10) & 7) as u8 },
        }
    }
}
