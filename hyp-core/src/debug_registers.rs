//! The self-hosted debug registers as one vCPU sees them (ARM ARM D2, "AArch64 Self-hosted
//! Debug"; the registers in D19, "AArch64 Debug registers"). Every guest access to them
//! traps (MDCR_EL2.TDA, TDOSA and TDRA) and lands here, in a per-vCPU copy, so that no VM's
//! breakpoint, watchpoint, OS lock or claim tag is left in a physical CPU that another VM
//! runs on. The hardware breakpoint and watchpoint registers hold a vCPU's values only
//! while that vCPU runs and has something that could fire (`needs_hardware`): the arch
//! crate loads them then and clears them when the vCPU leaves its CPU.
//!
//! What the guest sees (docs/security.md, "Debug registers"):
//! - as many breakpoints and watchpoints as the CPU has (ID_AA64DFR0_EL1.BRPs, WRPs); an
//!   access to one beyond them is an undefined instruction, as on the hardware;
//! - MDSCR_EL1's SS, TDCC, KDE and MDE bits; the status bits read as zero;
//! - the OS lock (OSLAR_EL1 / OSLSR_EL1), the OS double lock (OSDLR_EL1.DLK) and
//!   DBGPRCR_EL1.CORENPDRQ as state of the vCPU alone: locking the OS lock turns the
//!   vCPU's breakpoints, watchpoints and software step off, as the architecture says;
//! - the claim tags; no external debugger (the DCC registers read as zero, writes are
//!   ignored; MDRAR_EL1 says there is no ROM table).
//!
//! A vCPU starts with everything off and the OS lock unlocked (the architecture leaves a
//! cold reset's OS lock IMPLEMENTATION DEFINED-ly set; an unlocked lock is what KVM gives
//! and what a guest that never touches debug expects).

use crate::sysreg::{Encoding, SysRegAccess};

/// The most breakpoints and watchpoints the architecture allows (BRPs, WRPs: 4 bits + 1).
pub const MAX_BREAKPOINTS: usize = 16;
pub const MAX_WATCHPOINTS: usize = 16;

/// MDSCR_EL1 bits a guest may set (D19.2.x, MDSCR_EL1): SS [0], TDCC [12], KDE [13],
/// MDE [15]. The others are status bits of the external debug interface, or later
/// extensions not offered.
pub const MDSCR_SS: u64 = 1 << 0;
pub const MDSCR_TDCC: u64 = 1 << 12;
pub const MDSCR_KDE: u64 = 1 << 13;
pub const MDSCR_MDE: u64 = 1 << 15;
const MDSCR_WRITABLE: u64 = MDSCR_SS | MDSCR_TDCC | MDSCR_KDE | MDSCR_MDE;
/// DBGBCR<n>_EL1: E [0], PMC [2:1], BAS [8:5], HMC [13], SSC [15:14], LBN [19:16], BT [23:20].
const BCR_WRITABLE: u64 = 0x00ff_e1e7;
/// DBGWCR<n>_EL1: E [0], PAC [2:1], LSC [4:3], BAS [12:5], HMC [13], SSC [15:14], LBN [19:16],
/// WT [20], MASK [28:24].
const WCR_WRITABLE: u64 = 0x1f1f_ffff;
/// DBGBVR/DBGWVR: bits [1:0] are RES0.
const VR_WRITABLE: u64 = !0b11;
/// OSLSR_EL1.OSLM = 0b10 (bit 3 set, bit 0 clear): the OS lock is implemented (D19.2.x).
const OSLSR_OSLM_IMPLEMENTED: u64 = 1 << 3;
/// MDCCINT_EL1: RX [30], TX [29].
const MDCCINT_WRITABLE: u64 = (1 << 30) | (1 << 29);
/// DBGAUTHSTATUS_EL1: non-secure invasive and non-invasive debug implemented and enabled
/// (NSID, NSNID = 0b11); no Secure state in the VM (SID, SNID = 0b00).
const AUTHSTATUS: u64 = 0b1111;
/// The claim tags: eight, as the CPUs this runs on implement.
const CLAIM_TAGS: u64 = 0xff;

pub const MDCCINT_EL1: Encoding = Encoding(2, 0, 0, 2, 0);
pub const MDSCR_EL1: Encoding = Encoding(2, 0, 0, 2, 2);
pub const OSDTRRX_EL1: Encoding = Encoding(2, 0, 0, 0, 2);
pub const OSDTRTX_EL1: Encoding = Encoding(2, 0, 0, 3, 2);
pub const OSECCR_EL1: Encoding = Encoding(2, 0, 0, 6, 2);
pub const MDRAR_EL1: Encoding = Encoding(2, 0, 1, 0, 0);
pub const OSLAR_EL1: Encoding = Encoding(2, 0, 1, 0, 4);
pub const OSLSR_EL1: Encoding = Encoding(2, 0, 1, 1, 4);
pub const OSDLR_EL1: Encoding = Encoding(2, 0, 1, 3, 4);
pub const DBGPRCR_EL1: Encoding = Encoding(2, 0, 1, 4, 4);
pub const DBGCLAIMSET_EL1: Encoding = Encoding(2, 0, 7, 8, 6);
pub const DBGCLAIMCLR_EL1: Encoding = Encoding(2, 0, 7, 9, 6);
pub const DBGAUTHSTATUS_EL1: Encoding = Encoding(2, 0, 7, 14, 6);
pub const MDCCSR_EL0: Encoding = Encoding(2, 3, 0, 1, 0);
pub const DBGDTR_EL0: Encoding = Encoding(2, 3, 0, 4, 0);
/// DBGDTRRX_EL0 when read, DBGDTRTX_EL0 when written.
pub const DBGDTRRXTX_EL0: Encoding = Encoding(2, 3, 0, 5, 0);

/// How many breakpoints and watchpoints the CPU implements, from ID_AA64DFR0_EL1 (BRPs
/// [15:12] and WRPs [23:20], each the number minus one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugGeometry {
    pub breakpoints: usize,
    pub watchpoints: usize,
}

impl DebugGeometry {
    pub fn from_id_aa64dfr0(dfr0: u64) -> DebugGeometry {
        DebugGeometry { breakpoints: ((dfr0 >> 12) & 0xf) as usize + 1, watchpoints: ((dfr0 >> 20) & 0xf) as usize + 1 }
    }
}

/// What a trapped debug register access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugAccess {
    /// The value the guest's register gets.
    Read(u64),
    /// The vCPU's debug state may have changed: the hardware follows (`needs_hardware`).
    Written,
    /// No such register for this access (a breakpoint beyond the implemented ones, a write
    /// to a read-only register, a read of a write-only one): an undefined instruction.
    Undefined,
}

/// One vCPU's debug registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugRegisters {
    pub bvr: [u64; MAX_BREAKPOINTS],
    pub bcr: [u64; MAX_BREAKPOINTS],
    pub wvr: [u64; MAX_WATCHPOINTS],
    pub wcr: [u64; MAX_WATCHPOINTS],
    pub mdscr: u64,
    os_lock: bool,
    double_lock: bool,
    power_down_request: bool,
    mdccint: u64,
    claim: u64,
}

impl Default for DebugRegisters {
    fn default() -> Self {
        DebugRegisters::AT_RESET
    }
}

impl DebugRegisters {
    /// A vCPU's debug state when it starts: nothing enabled, the OS lock unlocked.
    pub const AT_RESET: DebugRegisters = DebugRegisters {
        bvr: [0; MAX_BREAKPOINTS],
        bcr: [0; MAX_BREAKPOINTS],
        wvr: [0; MAX_WATCHPOINTS],
        wcr: [0; MAX_WATCHPOINTS],
        mdscr: 0,
        os_lock: false,
        double_lock: false,
        power_down_request: false,
        mdccint: 0,
        claim: 0,
    };

    /// Whether `access` names a debug register (op0 = 2, the debug register space of
    /// D18.3, "System instruction class encoding overview"): then `access` handles it.
    pub fn is_debug_register(access: &SysRegAccess) -> bool {
        access.op0 == 2
    }

    /// A trapped MRS/MSR of a debug register; `value` is the written value (of Rt).
    pub fn access(&mut self, access: &SysRegAccess, value: u64, geometry: DebugGeometry) -> DebugAccess {
        let encoding = access.encoding();
        let Encoding(_, op1, crn, crm, op2) = encoding;
        let read = access.is_read;
        // DBGBVR<n>, DBGBCR<n>, DBGWVR<n>, DBGWCR<n>: op1 0, CRn 0, CRm n, op2 4-7.
        if op1 == 0 && crn == 0 && (4..=7).contains(&op2) {
            let n = usize::from(crm);
            let (registers, mask, count) = match op2 {
                4 => (&mut self.bvr, VR_WRITABLE, geometry.breakpoints),
                5 => (&mut self.bcr, BCR_WRITABLE, geometry.breakpoints),
                6 => (&mut self.wvr, VR_WRITABLE, geometry.watchpoints),
                _ => (&mut self.wcr, WCR_WRITABLE, geometry.watchpoints),
            };
            let Some(register) = registers.get_mut(n).filter(|_| n < count) else {
                return DebugAccess::Undefined;
            };
            return if read {
                DebugAccess::Read(*register)
            } else {
                *register = value & mask;
                DebugAccess::Written
            };
        }
        match (encoding, read) {
            (MDSCR_EL1, true) => DebugAccess::Read(self.mdscr),
            (MDSCR_EL1, false) => {
                self.mdscr = value & MDSCR_WRITABLE;
                DebugAccess::Written
            }
            (OSLAR_EL1, false) => {
                self.os_lock = value & 1 != 0;
                DebugAccess::Written
            }
            (OSLSR_EL1, true) => DebugAccess::Read(OSLSR_OSLM_IMPLEMENTED | (u64::from(self.os_lock) << 1)),
            (OSDLR_EL1, true) => DebugAccess::Read(u64::from(self.double_lock)),
            (OSDLR_EL1, false) => {
                self.double_lock = value & 1 != 0;
                DebugAccess::Written
            }
            (DBGPRCR_EL1, true) => DebugAccess::Read(u64::from(self.power_down_request)),
            (DBGPRCR_EL1, false) => {
                self.power_down_request = value & 1 != 0;
                DebugAccess::Written
            }
            (MDCCINT_EL1, true) => DebugAccess::Read(self.mdccint),
            (MDCCINT_EL1, false) => {
                self.mdccint = value & MDCCINT_WRITABLE;
                DebugAccess::Written
            }
            (DBGCLAIMSET_EL1, true) => DebugAccess::Read(CLAIM_TAGS),
            (DBGCLAIMSET_EL1, false) => {
                self.claim |= value & CLAIM_TAGS;
                DebugAccess::Written
            }
            (DBGCLAIMCLR_EL1, true) => DebugAccess::Read(self.claim),
            (DBGCLAIMCLR_EL1, false) => {
                self.claim &= !value;
                DebugAccess::Written
            }
            (DBGAUTHSTATUS_EL1, true) => DebugAccess::Read(AUTHSTATUS),
            // No ROM table (ROMADDRV = 0), no external debugger on the other side of the
            // DCC: its status reads as empty, its data registers as zero.
            (MDRAR_EL1, true) | (MDCCSR_EL0, true) => DebugAccess::Read(0),
            (DBGDTR_EL0 | DBGDTRRXTX_EL0 | OSDTRRX_EL1 | OSDTRTX_EL1 | OSECCR_EL1, true) => DebugAccess::Read(0),
            (DBGDTR_EL0 | DBGDTRRXTX_EL0 | OSDTRRX_EL1 | OSDTRTX_EL1 | OSECCR_EL1, false) => DebugAccess::Written,
            _ => DebugAccess::Undefined,
        }
    }

    /// Whether a breakpoint, watchpoint or software step of this vCPU could fire: then its
    /// registers must be in the hardware while it runs. Debug exceptions other than BRK
    /// need MDSCR_EL1.MDE (EL0) or KDE (EL1), or SS for software step, and none are taken
    /// while the OS lock is locked (D2.4, "The OS Lock"; D2.9, "Software Step exceptions").
    pub fn needs_hardware(&self) -> bool {
        !self.os_lock && self.mdscr & (MDSCR_SS | MDSCR_KDE | MDSCR_MDE) != 0
    }

    /// Whether the OS lock is locked.
    pub fn os_lock(&self) -> bool {
        self.os_lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A72: DebugGeometry = DebugGeometry { breakpoints: 6, watchpoints: 4 };

    fn at(e: Encoding, is_read: bool) -> SysRegAccess {
        SysRegAccess { op0: e.0, op1: e.1, crn: e.2, crm: e.3, op2: e.4, rt: 1, is_read }
    }

    fn read(d: &mut DebugRegisters, e: Encoding) -> DebugAccess {
        d.access(&at(e, true), 0, A72)
    }

    fn write(d: &mut DebugRegisters, e: Encoding, value: u64) -> DebugAccess {
        d.access(&at(e, false), value, A72)
    }

    fn bvr(n: u8) -> Encoding {
        Encoding(2, 0, 0, n, 4)
    }
    fn bcr(n: u8) -> Encoding {
        Encoding(2, 0, 0, n, 5)
    }
    fn wvr(n: u8) -> Encoding {
        Encoding(2, 0, 0, n, 6)
    }
    fn wcr(n: u8) -> Encoding {
        Encoding(2, 0, 0, n, 7)
    }

    #[test]
    fn the_geometry_comes_from_id_aa64dfr0() {
        // Cortex-A72: BRPs = 5, WRPs = 3, CTX_CMPs = 1, DebugVer = 6.
        assert_eq!(DebugGeometry::from_id_aa64dfr0(0x1030_5106), A72);
        assert_eq!(DebugGeometry::from_id_aa64dfr0(0x00f0_f000), DebugGeometry { breakpoints: 16, watchpoints: 16 });
    }

    #[test]
    fn a_fresh_vcpu_reads_zero_everywhere_and_the_os_lock_unlocked() {
        let mut d = DebugRegisters::AT_RESET;
        for n in 0..6 {
            assert_eq!(read(&mut d, bvr(n)), DebugAccess::Read(0));
            assert_eq!(read(&mut d, bcr(n)), DebugAccess::Read(0));
        }
        for n in 0..4 {
            assert_eq!(read(&mut d, wvr(n)), DebugAccess::Read(0));
            assert_eq!(read(&mut d, wcr(n)), DebugAccess::Read(0));
        }
        assert_eq!(read(&mut d, MDSCR_EL1), DebugAccess::Read(0));
        assert_eq!(read(&mut d, OSLSR_EL1), DebugAccess::Read(0b1000), "OSLM = 0b10, OSLK = 0");
        assert_eq!(read(&mut d, DBGCLAIMCLR_EL1), DebugAccess::Read(0));
        assert!(!d.needs_hardware());
    }

    #[test]
    fn breakpoints_and_watchpoints_keep_what_is_written_within_their_fields() {
        let mut d = DebugRegisters::AT_RESET;
        for n in 0..6 {
            assert_eq!(write(&mut d, bvr(n), u64::MAX), DebugAccess::Written);
            assert_eq!(write(&mut d, bcr(n), u64::MAX), DebugAccess::Written);
            assert_eq!(read(&mut d, bvr(n)), DebugAccess::Read(!3), "BVR bits [1:0] are RES0");
            assert_eq!(read(&mut d, bcr(n)), DebugAccess::Read(0x00ff_e1e7), "BCR: only its fields");
        }
        for n in 0..4 {
            write(&mut d, wvr(n), 0x1234_5677);
            write(&mut d, wcr(n), u64::MAX);
            assert_eq!(read(&mut d, wvr(n)), DebugAccess::Read(0x1234_5674));
            assert_eq!(read(&mut d, wcr(n)), DebugAccess::Read(0x1f1f_ffff));
        }
        // Each register is its own: the first breakpoint's value is not the others'.
        write(&mut d, bvr(0), 0x4000_1000);
        assert_eq!(read(&mut d, bvr(0)), DebugAccess::Read(0x4000_1000));
        assert_eq!(read(&mut d, bvr(1)), DebugAccess::Read(!3));
    }

    #[test]
    fn a_breakpoint_or_watchpoint_beyond_the_implemented_ones_is_undefined() {
        let mut d = DebugRegisters::AT_RESET;
        for n in 6..16 {
            assert_eq!(read(&mut d, bvr(n)), DebugAccess::Undefined);
            assert_eq!(write(&mut d, bcr(n), 1), DebugAccess::Undefined);
        }
        for n in 4..16 {
            assert_eq!(read(&mut d, wvr(n)), DebugAccess::Undefined);
            assert_eq!(write(&mut d, wcr(n), 1), DebugAccess::Undefined);
        }
        assert_eq!(d, DebugRegisters::AT_RESET, "a refused access changes nothing");
    }

    #[test]
    fn mdscr_keeps_its_writable_bits_only_and_decides_whether_the_hardware_is_needed() {
        let mut d = DebugRegisters::AT_RESET;
        write(&mut d, MDSCR_EL1, u64::MAX);
        assert_eq!(read(&mut d, MDSCR_EL1), DebugAccess::Read(MDSCR_SS | MDSCR_TDCC | MDSCR_KDE | MDSCR_MDE));
        assert!(d.needs_hardware());
        write(&mut d, MDSCR_EL1, MDSCR_TDCC);
        assert!(!d.needs_hardware(), "TDCC alone enables no debug exception");
        for bit in [MDSCR_SS, MDSCR_KDE, MDSCR_MDE] {
            write(&mut d, MDSCR_EL1, bit);
            assert!(d.needs_hardware(), "{bit:#x}");
        }
    }

    #[test]
    fn the_os_lock_is_the_vcpus_own_and_holds_debug_exceptions_off() {
        let mut d = DebugRegisters::AT_RESET;
        write(&mut d, MDSCR_EL1, MDSCR_MDE | MDSCR_KDE);
        assert_eq!(write(&mut d, OSLAR_EL1, 1), DebugAccess::Written);
        assert_eq!(read(&mut d, OSLSR_EL1), DebugAccess::Read(0b1010));
        assert!(d.os_lock());
        assert!(!d.needs_hardware(), "no breakpoint fires while the OS lock is locked");
        write(&mut d, OSLAR_EL1, 0);
        assert_eq!(read(&mut d, OSLSR_EL1), DebugAccess::Read(0b1000));
        assert!(d.needs_hardware());
        assert_eq!(read(&mut d, OSLAR_EL1), DebugAccess::Undefined, "OSLAR_EL1 is write-only");
        assert_eq!(write(&mut d, OSLSR_EL1, 0), DebugAccess::Undefined, "OSLSR_EL1 is read-only");
    }

    #[test]
    fn the_double_lock_power_request_dcc_interrupts_and_claim_tags_are_kept() {
        let mut d = DebugRegisters::AT_RESET;
        write(&mut d, OSDLR_EL1, u64::MAX);
        write(&mut d, DBGPRCR_EL1, u64::MAX);
        write(&mut d, MDCCINT_EL1, u64::MAX);
        assert_eq!(read(&mut d, OSDLR_EL1), DebugAccess::Read(1));
        assert_eq!(read(&mut d, DBGPRCR_EL1), DebugAccess::Read(1));
        assert_eq!(read(&mut d, MDCCINT_EL1), DebugAccess::Read(0b11 << 29));
        assert_eq!(read(&mut d, DBGCLAIMSET_EL1), DebugAccess::Read(0xff), "the implemented tags");
        write(&mut d, DBGCLAIMSET_EL1, 0x1_0005);
        assert_eq!(read(&mut d, DBGCLAIMCLR_EL1), DebugAccess::Read(0x05));
        write(&mut d, DBGCLAIMCLR_EL1, 0x01);
        assert_eq!(read(&mut d, DBGCLAIMCLR_EL1), DebugAccess::Read(0x04));
    }

    #[test]
    fn there_is_no_external_debugger_or_rom_table() {
        let mut d = DebugRegisters::AT_RESET;
        for e in [MDRAR_EL1, MDCCSR_EL0, DBGDTR_EL0, DBGDTRRXTX_EL0, OSDTRRX_EL1, OSDTRTX_EL1, OSECCR_EL1] {
            assert_eq!(read(&mut d, e), DebugAccess::Read(0), "{e:?}");
        }
        for e in [DBGDTR_EL0, DBGDTRRXTX_EL0, OSECCR_EL1] {
            assert_eq!(write(&mut d, e, u64::MAX), DebugAccess::Written, "{e:?}");
        }
        assert_eq!(d, DebugRegisters::AT_RESET, "writes to the DCC keep nothing");
        assert_eq!(read(&mut d, DBGAUTHSTATUS_EL1), DebugAccess::Read(0b1111));
        assert_eq!(write(&mut d, MDRAR_EL1, 1), DebugAccess::Undefined);
        assert_eq!(write(&mut d, DBGAUTHSTATUS_EL1, 1), DebugAccess::Undefined);
    }

    #[test]
    fn unallocated_debug_encodings_are_undefined_and_change_nothing() {
        let mut d = DebugRegisters::AT_RESET;
        // DBGVCR32_EL2 (op1 4) is not an EL1 register; op1 1 and CRn 2-6 are unallocated.
        for e in [Encoding(2, 4, 0, 7, 0), Encoding(2, 1, 0, 0, 0), Encoding(2, 0, 3, 0, 0), Encoding(2, 0, 0, 1, 0)] {
            assert_eq!(read(&mut d, e), DebugAccess::Undefined, "{e:?}");
            assert_eq!(write(&mut d, e, u64::MAX), DebugAccess::Undefined, "{e:?}");
        }
        assert_eq!(d, DebugRegisters::AT_RESET);
    }
}
