//! The hardware list registers of this CPU, GICv3 (ICH_* system registers, `ich`) or GICv2
//! (the GICH frame, IHI 0048B 5.3): one interface for the vCPU run loop.

use core::ptr::{read_volatile, write_volatile};

use vgic::{GichLr, IchLr, ListRegister, ListRegisters};

use crate::ich;

const GICH_HCR: usize = 0x000;
const GICH_VTR: usize = 0x004;
const GICH_VMCR: usize = 0x008;
const GICH_LR0: usize = 0x100;

#[derive(Clone, Copy)]
pub enum ListRegisterFile {
    V3,
    /// The GICH frame's address.
    V2 {
        gich: usize,
    },
}

impl ListRegisterFile {
    /// A vCPU's virtual interface starts with everything off.
    pub fn reset(mut self) {
        match self {
            ListRegisterFile::V3 => ich::reset_vmcr(),
            ListRegisterFile::V2 { gich } => Self::gich_write(gich, GICH_VMCR, 0),
        }
        self.enable(false);
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

    fn write(&mut self, n: usize, lr: Option<&ListRegister>) {
        match *self {
            ListRegisterFile::V3 => ich::write_lr(n, lr.map_or(0, |l| IchLr::encode(l).0)),
            ListRegisterFile::V2 { gich } => {
                Self::gich_write(gich, GICH_LR0 + 4 * n, lr.map_or(0, |l| GichLr::encode(l).0))
            }
        }
    }

    fn read(&self, n: usize) -> ListRegister {
        match *self {
            ListRegisterFile::V3 => IchLr(ich::read_lr(n)).decode(),
            ListRegisterFile::V2 { gich } => GichLr(Self::gich_read(gich, GICH_LR0 + 4 * n)).decode(),
        }
    }

    /// HCR.En and UIE: the same bits in ICH_HCR_EL2 and GICH_HCR.
    fn enable(&mut self, underflow: bool) {
        let hcr = ich::HCR_EN | if underflow { ich::HCR_UIE } else { 0 };
        match *self {
            ListRegisterFile::V3 => ich::write_hcr(hcr),
            ListRegisterFile::V2 { gich } => Self::gich_write(gich, GICH_HCR, hcr as u32),
        }
    }
}
