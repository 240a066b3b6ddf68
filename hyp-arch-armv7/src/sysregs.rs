//! HYP-mode registers `aarch32-cpu` does not have (ARM ARM B4.1): the translation registers of
//! HYP mode (HTCR, HTTBR) and of the guests' stage 2 (VTCR, VTTBR), through the crate's
//! register traits, which emit the MRC/MCR and MRRC/MCRR for the encodings given here; and
//! CNTHP_CVAL, which the crate (0.4.0) encodes with opc1 2, CNTP_CVAL's: its `CnthpCval`
//! sets the PL1 physical timer's compare value, and the Hyp timer, left at 0, fires at once.

use aarch32_cpu::register::{SysReg, SysReg64, SysRegRead, SysRegRead64, SysRegWrite, SysRegWrite64};

/// A 32-bit CP15 register by its encoding (`MRC p15, op1, Rt, CRn, CRm, op2`).
macro_rules! register32 {
    ($(#[$doc:meta])* $name:ident, $op1:literal, $crn:literal, $crm:literal, $op2:literal) => {
        $(#[$doc])*
        pub struct $name;
        impl SysReg for $name {
            const CP: u32 = 15;
            const CRN: u32 = $crn;
            const OP1: u32 = $op1;
            const CRM: u32 = $crm;
            const OP2: u32 = $op2;
        }
        impl SysRegRead for $name {}
        impl SysRegWrite for $name {}
        impl $name {
            #[allow(dead_code)]
            pub fn read() -> u32 {
                <Self as SysRegRead>::read_raw()
            }
            /// # Safety
            /// The value must be one the ARM ARM allows, for what this register controls.
            pub unsafe fn write(value: u32) {
                // SAFETY: the caller's promise.
                unsafe { <Self as SysRegWrite>::write_raw(value) }
            }
        }
    };
}

/// A 64-bit CP15 register by its encoding (`MRRC p15, op1, Rt, Rt2, CRm`).
macro_rules! register64 {
    ($(#[$doc:meta])* $name:ident, $op1:literal, $crm:literal) => {
        $(#[$doc])*
        pub struct $name;
        impl SysReg64 for $name {
            const CP: u32 = 15;
            const OP1: u32 = $op1;
            const CRM: u32 = $crm;
        }
        impl SysRegRead64 for $name {}
        impl SysRegWrite64 for $name {}
        impl $name {
            #[allow(dead_code)]
            pub fn read() -> u64 {
                <Self as SysRegRead64>::read_raw()
            }
            /// # Safety
            /// The value must be one the ARM ARM allows, for what this register controls.
            pub unsafe fn write(value: u64) {
                // SAFETY: the caller's promise.
                unsafe { <Self as SysRegWrite64>::write_raw(value) }
            }
        }
    };
}

register32!(
    /// Hyp Translation Control Register (B4.1.76).
    Htcr, 4, 2, 0, 2
);
register32!(
    /// Virtualization Translation Control Register (B4.1.159).
    Vtcr, 4, 2, 1, 2
);
register64!(
    /// Hyp Translation Table Base Register (B4.1.77).
    Httbr, 4, 2
);
register64!(
    /// Virtualization Translation Table Base Register (B4.1.161): the VMID in bits [55:48].
    Vttbr, 6, 2
);
register64!(
    /// Counter-timer Hyp Physical CompareValue register (B4.1.24): `MCRR p15, 6, Rt, Rt2, c14`.
    CnthpCval, 6, 14
);
