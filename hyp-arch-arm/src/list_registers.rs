//! The hardware list registers of this CPU, for the vCPU run loop: GICv2's GICH frame
//! (IHI 0048B 5.3), memory-mapped and the same on ARMv7 and ARMv8, here; GICv3's ICH_*
//! system registers (IHI 0069 12.5) through the image's `ListRegisterAccess`.

use core::marker::PhantomData;

use vgic::{ListRegisters, Maintenance, HCR_EOI_COUNT_SHIFT};

use crate::mmio::Frame;
use crate::registers::*;

/// ICH_HCR_EL2.En / GICH_HCR.En: the virtual CPU interface is on (the same bit in both).
pub const HCR_EN: u32 = 1 << 0;

/// ICH_HCR_EL2.TDIR (IHI 0069H 12.4): the guest's ICV_DIR_EL1 writes trap to EL2. GICH_HCR
/// has no such bit (GICV_DIR is in the guest's page).
pub const ICH_HCR_TDIR: u32 = 1 << 14;

/// ICH_VMCR_EL2.VEOIM / GICH_VMCR.VEM: the guest's EOImode (the same bit in both).
pub const VMCR_EOI_SPLIT: u64 = 1 << 9;

/// The GICv3 virtual CPU interface control registers at the hypervisor's level (IHI 0069
/// 12.5: MRS/MSR on AArch64; MCR/MRC on AArch32, where a list register is ICH_LR<n> and
/// ICH_LRC<n>), as the image gives them. Associated functions, as `CpuInterfaceRegisters`.
pub trait ListRegisterAccess {
    /// Implemented list registers: ICH_VTR_EL2.ListRegs + 1.
    fn count() -> usize;
    /// ICH_LR<n>_EL2, n < 16.
    fn read_lr(n: usize) -> u64;
    fn write_lr(n: usize, value: u64);
    /// ICH_ELRSR_EL2 (32 bits, 16 used): bit n set = list register n is empty.
    fn empty_status() -> u32;
    /// ICH_EISR_EL2 (32 bits, 16 used): bit n set = list register n raised an EOI
    /// maintenance interrupt.
    fn eoi_status() -> u32;
    /// ICH_HCR_EL2.
    fn read_hcr() -> u64;
    /// ICH_HCR_EL2, synchronised before it returns.
    fn write_hcr(value: u64);
    /// ICH_VMCR_EL2 and the first active-priority register of each group (ICH_AP0R0_EL2,
    /// ICH_AP1R0_EL2: 5 bits of virtual priority).
    fn read_interface() -> [u64; 3];
    fn write_interface(state: [u64; 3]);
    /// `write_interface` of all zeros: everything off, no active priority.
    fn reset_interface();
}

/// The GICv2 virtual interface control frame (GICH) of this CPU: its list registers and
/// their status, the vCPU's VMCR and active priorities.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Gich(Frame);

impl Gich {
    /// # Safety
    ///
    /// `base` is the GICH frame (4 KiB, each CPU's own bank at the same address), mapped as
    /// device memory at this address for the rest of the program.
    pub const unsafe fn new(base: usize) -> Self {
        // SAFETY: the caller's contract is `Frame::new`'s.
        Gich(unsafe { Frame::new(base) })
    }

    pub const fn base(self) -> usize {
        self.0.base()
    }

    /// GICH_VTR.ListRegs + 1.
    pub fn count(self) -> usize {
        (self.0.read32(GICH_VTR) & 0x3f) as usize + 1
    }

    /// GICH_LR<n> (n taken modulo 64, the architected list registers).
    #[inline]
    pub fn read_lr(self, n: usize) -> u32 {
        self.0.read32(GICH_LR0 + 4 * (n % GICH_LRS))
    }

    #[inline]
    pub fn write_lr(self, n: usize, value: u32) {
        self.0.write32(GICH_LR0 + 4 * (n % GICH_LRS), value)
    }

    /// GICH_ELRSR0: list registers 0 to 31. No more than `vgic::MAX_LIST_REGISTERS` (16)
    /// are used, so GICH_ELRSR1 (32 to 63) is not read: one device access fewer on every
    /// exit that asks (the GIC-400 has 4).
    pub fn empty_status(self) -> u32 {
        self.0.read32(GICH_ELRSR0)
    }

    /// GICH_EISR0, as `empty_status`.
    pub fn eoi_status(self) -> u32 {
        self.0.read32(GICH_EISR0)
    }

    pub fn read_hcr(self) -> u32 {
        self.0.read32(GICH_HCR)
    }

    pub fn write_hcr(self, value: u32) {
        self.0.write32(GICH_HCR, value)
    }

    /// GICH_VMCR and GICH_APR.
    pub fn read_interface(self) -> (u32, u32) {
        (self.0.read32(GICH_VMCR), self.0.read32(GICH_APR))
    }

    pub fn write_interface(self, vmcr: u32, apr: u32) {
        self.0.write32(GICH_VMCR, vmcr);
        self.0.write32(GICH_APR, apr);
    }
}

/// The virtual CPU interface's control and active-priority registers of a vCPU:
/// ICH_VMCR_EL2, ICH_AP0R0_EL2, ICH_AP1R0_EL2 (GICv3) or GICH_VMCR, GICH_APR (GICv2).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct InterfaceState([u64; 3]);

/// This CPU's list registers: the GICv3 system registers (`S`) or a GICv2 GICH frame.
pub struct ListRegisterFile<S> {
    /// None: GICv3.
    gich: Option<Gich>,
    /// The list registers implemented (ICH_VTR_EL2.ListRegs + 1, at most 16; GICH_VTR.ListRegs
    /// + 1), read when the file is made: every plan asks, and the register does not change.
    count: u8,
    registers: PhantomData<fn() -> S>,
}

impl<S> Clone for ListRegisterFile<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for ListRegisterFile<S> {}

impl<S: ListRegisterAccess> ListRegisterFile<S> {
    /// GICv3: the ICH_* system registers.
    pub fn v3() -> Self {
        ListRegisterFile { gich: None, count: S::count().min(16) as u8, registers: PhantomData }
    }

    /// GICv2: the GICH frame at `gich`.
    ///
    /// # Safety
    ///
    /// As `Gich::new`.
    pub unsafe fn v2(gich: usize) -> Self {
        // SAFETY: the caller's contract is `Gich::new`'s.
        let gich = unsafe { Gich::new(gich) };
        ListRegisterFile { gich: Some(gich), count: gich.count() as u8, registers: PhantomData }
    }

    /// The GICH frame, on GICv2.
    pub const fn gich(self) -> Option<Gich> {
        self.gich
    }

    /// A vCPU's virtual interface starts with everything off: no interrupt in a list
    /// register and none active (what an earlier vCPU on this CPU left is gone).
    pub fn reset(mut self) {
        match self.gich {
            None => S::reset_interface(),
            Some(gich) => gich.write_interface(0, 0),
        }
        for n in 0..self.count() {
            self.write_lr(n, 0);
        }
        self.set_maintenance(Maintenance::default());
    }

    pub fn save_interface(self) -> InterfaceState {
        match self.gich {
            None => InterfaceState(S::read_interface()),
            Some(gich) => {
                let (vmcr, apr) = gich.read_interface();
                InterfaceState([u64::from(vmcr), u64::from(apr), 0])
            }
        }
    }

    pub fn restore_interface(self, state: &InterfaceState) {
        match self.gich {
            None => S::write_interface(state.0),
            Some(gich) => gich.write_interface(state.0[0] as u32, state.0[1] as u32),
        }
    }
}

impl<S: ListRegisterAccess> ListRegisters for ListRegisterFile<S> {
    fn count(&self) -> usize {
        usize::from(self.count)
    }

    fn read_lr(&self, n: usize) -> u64 {
        match self.gich {
            None => S::read_lr(n),
            Some(gich) => u64::from(gich.read_lr(n)),
        }
    }

    // Inlined into the plan's fast path (vgic's `flush_one`), which it would otherwise make
    // a caller with a frame to save.
    #[inline(always)]
    fn write_lr(&mut self, n: usize, value: u64) {
        match self.gich {
            None => S::write_lr(n, value),
            Some(gich) => gich.write_lr(n, value as u32),
        }
    }

    fn empty_status(&self) -> u32 {
        match self.gich {
            None => S::empty_status(),
            Some(gich) => gich.empty_status(),
        }
    }

    fn eoi_status(&self) -> u32 {
        match self.gich {
            None => S::eoi_status(),
            Some(gich) => gich.eoi_status(),
        }
    }

    /// En, UIE, LRENPIE and NPIE: the same bits in ICH_HCR_EL2 and GICH_HCR (EOIcount 0).
    /// On GICv3, TDIR with LRENPIE: while an active interrupt is left out, a guest's DIR
    /// names the interrupt it ends (vgic's `Distributor::deactivate_by_dir`).
    fn set_maintenance(&mut self, maintenance: Maintenance) {
        let hcr = HCR_EN | maintenance.hcr_bits();
        match self.gich {
            None => S::write_hcr(u64::from(if maintenance.entry_not_present { hcr | ICH_HCR_TDIR } else { hcr })),
            Some(gich) => gich.write_hcr(hcr),
        }
    }

    /// EOIcount is the same field in ICH_HCR_EL2 and GICH_HCR; the register is written
    /// back without it only when it is not 0.
    fn take_eoi_count(&mut self) -> u32 {
        let hcr = match self.gich {
            None => S::read_hcr() as u32,
            Some(gich) => gich.read_hcr(),
        };
        let count = hcr >> HCR_EOI_COUNT_SHIFT;
        if count != 0 {
            let rest = hcr & !(u32::MAX << HCR_EOI_COUNT_SHIFT);
            match self.gich {
                None => S::write_hcr(u64::from(rest)),
                Some(gich) => gich.write_hcr(rest),
            }
        }
        count
    }

    fn eoi_split(&self) -> bool {
        let vmcr = match self.gich {
            None => S::read_interface()[0],
            Some(gich) => u64::from(gich.read_interface().0),
        };
        vmcr & VMCR_EOI_SPLIT != 0
    }
}
