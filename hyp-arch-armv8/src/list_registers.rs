//! The hardware list registers of this CPU, GICv3 (ICH_* system registers, `ich`) or GICv2
//! (the GICH frame, IHI 0048B 5.3): one interface for the vCPU run loop.

use core::ptr::{read_volatile, write_volatile};

use vgic::{ListRegisters, Maintenance};

use crate::ich;

const GICH_HCR: usize = 0x000;
const GICH_VTR: usize = 0x004;
const GICH_VMCR: usize = 0x008;
const GICH_EISR0: usize = 0x020;
const GICH_EISR1: usize = 0x024;
const GICH_ELRSR0: usize = 0x030;
const GICH_ELRSR1: usize = 0x034;
const GICH_APR: usize = 0x0f0;
const GICH_LR0: usize = 0x100;

/// The virtual CPU interface's control and active-priority registers of a vCPU:
/// ICH_VMCR_EL2, ICH_AP0R0_EL2, ICH_AP1R0_EL2 (GICv3) or GICH_VMCR, GICH_APR (GICv2).
#[derive(Clone, Copy, Default, Debug)]
pub struct InterfaceState([u64; 3]);

#[derive(Clone, Copy)]
pub enum ListRegisterFile {
    V3,
    /// The GICH frame's address.
    V2 {
        gich: usize,
    },
}

impl ListRegisterFile {
    /// A vCPU's virtual interface starts with everything off: no interrupt in a list
    /// register and none active (what an earlier vCPU on this CPU left is gone).
    pub fn reset(mut self) {
        match self {
            ListRegisterFile::V3 => ich::reset_vmcr(),
            ListRegisterFile::V2 { gich } => {
                Self::gich_write(gich, GICH_VMCR, 0);
                Self::gich_write(gich, GICH_APR, 0);
            }
        }
        for n in 0..self.count() {
            self.write_lr(n, 0);
        }
        self.set_maintenance(Maintenance::default());
    }

    pub fn save_interface(self) -> InterfaceState {
        match self {
            ListRegisterFile::V3 => InterfaceState(ich::read_interface()),
            ListRegisterFile::V2 { gich } => InterfaceState([
                u64::from(Self::gich_read(gich, GICH_VMCR)),
                u64::from(Self::gich_read(gich, GICH_APR)),
                0,
            ]),
        }
    }

    pub fn restore_interface(self, state: &InterfaceState) {
        match self {
            ListRegisterFile::V3 => ich::write_interface(state.0),
            ListRegisterFile::V2 { gich } => {
                Self::gich_write(gich, GICH_VMCR, state.0[0] as u32);
                Self::gich_write(gich, GICH_APR, state.0[1] as u32);
            }
        }
    }

    fn gich_read(gich: usize, offset: usize) -> u32 {
        // SAFETY: a register of the GICH frame the device tree names, mapped Device-nGnRE at EL2.
        unsafe { read_volatile((gich + offset) as *const u32) }
    }
    fn gich_write(gich: usize, offset: usize, v: u32) {
        // SAFETY: as for `gich_read`; GICH belongs to this CPU's running vCPU.
        unsafe { write_volatile((gich + offset) as *mut u32, v) }
    }
}

impl ListRegisters for ListRegisterFile {
    fn count(&self) -> usize {
        match *self {
            ListRegisterFile::V3 => ich::list_register_count().min(16),
            ListRegisterFile::V2 { gich } => (Self::gich_read(gich, GICH_VTR) & 0x3f) as usize + 1,
        }
    }

    fn read_lr(&self, n: usize) -> u64 {
        match *self {
            ListRegisterFile::V3 => ich::read_lr(n),
            ListRegisterFile::V2 { gich } => u64::from(Self::gich_read(gich, GICH_LR0 + 4 * n)),
        }
    }

    fn write_lr(&mut self, n: usize, value: u64) {
        match *self {
            ListRegisterFile::V3 => ich::write_lr(n, value),
            ListRegisterFile::V2 { gich } => Self::gich_write(gich, GICH_LR0 + 4 * n, value as u32),
        }
    }

    fn empty_status(&self) -> u64 {
        match *self {
            ListRegisterFile::V3 => ich::read_elrsr(),
            ListRegisterFile::V2 { gich } => {
                u64::from(Self::gich_read(gich, GICH_ELRSR0)) | u64::from(Self::gich_read(gich, GICH_ELRSR1)) << 32
            }
        }
    }

    fn eoi_status(&self) -> u64 {
        match *self {
            ListRegisterFile::V3 => ich::read_eisr(),
            ListRegisterFile::V2 { gich } => {
                u64::from(Self::gich_read(gich, GICH_EISR0)) | u64::from(Self::gich_read(gich, GICH_EISR1)) << 32
            }
        }
    }

    /// En, UIE and NPIE: the same bits in ICH_HCR_EL2 and GICH_HCR.
    fn set_maintenance(&mut self, maintenance: Maintenance) {
        let hcr = ich::HCR_EN | u64::from(maintenance.hcr_bits());
        match *self {
            ListRegisterFile::V3 => ich::write_hcr(hcr),
            ListRegisterFile::V2 { gich } => Self::gich_write(gich, GICH_HCR, hcr as u32),
        }
    }
}
