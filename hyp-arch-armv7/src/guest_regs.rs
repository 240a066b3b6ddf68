//! An AArch32 guest's registers as an exit leaves them (exceptions.rs): r0-r12, LR_usr, the
//! PC and the CPSR, and the registers the guest's current mode banks (its SP and LR, and in
//! FIQ mode r8-r12), which stay in the CPU while the vCPU runs there and are reached through
//! the banked-register MRS and MSR of the Virtualization Extensions (ARM ARM B9.3.9).

use core::arch::asm;

use hyp_core::trap::GuestRegisters;

use hyp_core::trap::aarch32::mode::{
    ABT as MODE_ABT, FIQ as MODE_FIQ, IRQ as MODE_IRQ, SVC as MODE_SVC, SYS as MODE_SYS, UND as MODE_UND,
    USR as MODE_USR,
};
use hyp_core::trap::aarch32::{advance_it_state, CPSR_T};

/// The guest's registers (layout used by exceptions.rs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Registers {
    /// r0..r12 (in FIQ mode, r8..r12 here are the User mode ones).
    pub r: [u32; 13],
    /// LR_usr, which HYP mode uses as its own LR.
    pub lr_usr: u32,
    /// The preferred return address (ELR_hyp).
    pub pc: u32,
    /// The guest's CPSR (SPSR_hyp).
    pub cpsr: u32,
}

/// Reads the banked register `$name` (e.g. "sp_svc") of the guest running on this CPU.
macro_rules! read_banked {
    ($name:literal) => {{
        let v: u32;
        // SAFETY: reading a banked register of a guest mode from HYP mode has no side effect.
        unsafe {
            asm!(concat!(".arch_extension virt\nmrs {}, ", $name), out(reg) v, options(nomem, nostack, preserves_flags))
        };
        v
    }};
}

/// Writes the banked register `$name` of the guest running on this CPU.
macro_rules! write_banked {
    ($name:literal, $value:expr) => {{
        let v: u32 = $value;
        // SAFETY: a register of the guest running on this CPU, written as its exit handling
        // decided; HYP mode's own registers are not reachable this way.
        unsafe { asm!(concat!(".arch_extension virt\nmsr ", $name, ", {}"), in(reg) v, options(nomem, nostack)) };
    }};
}
pub(crate) use {read_banked, write_banked};

/// `$action!` (read_banked or write_banked) on the SP (`$n` 13) or LR (14) that mode `$mode`
/// banks; LR_usr, which the exit saved, is not among them.
macro_rules! sp_or_lr {
    ($mode:expr, $n:expr, $action:ident $(, $v:expr)?) => {
        match ($mode, $n) {
            (MODE_USR | MODE_SYS, 13) => $action!("sp_usr" $(, $v)?),
            (MODE_FIQ, 13) => $action!("sp_fiq" $(, $v)?),
            (MODE_FIQ, _) => $action!("lr_fiq" $(, $v)?),
            (MODE_IRQ, 13) => $action!("sp_irq" $(, $v)?),
            (MODE_IRQ, _) => $action!("lr_irq" $(, $v)?),
            (MODE_SVC, 13) => $action!("sp_svc" $(, $v)?),
            (MODE_SVC, _) => $action!("lr_svc" $(, $v)?),
            (MODE_ABT, 13) => $action!("sp_abt" $(, $v)?),
            (MODE_ABT, _) => $action!("lr_abt" $(, $v)?),
            (MODE_UND, 13) => $action!("sp_und" $(, $v)?),
            (MODE_UND, _) => $action!("lr_und" $(, $v)?),
            _ => Default::default(),
        }
    };
}

fn read_fiq_high(n: u8) -> u32 {
    match n {
        8 => read_banked!("r8_fiq"),
        9 => read_banked!("r9_fiq"),
        10 => read_banked!("r10_fiq"),
        11 => read_banked!("r11_fiq"),
        _ => read_banked!("r12_fiq"),
    }
}

fn write_fiq_high(n: u8, v: u32) {
    match n {
        8 => write_banked!("r8_fiq", v),
        9 => write_banked!("r9_fiq", v),
        10 => write_banked!("r10_fiq", v),
        11 => write_banked!("r11_fiq", v),
        _ => write_banked!("r12_fiq", v),
    }
}

impl Registers {
    fn mode(&self) -> u32 {
        self.cpsr & 0x1f
    }
}

impl GuestRegisters for Registers {
    const AARCH32: bool = true;
    /// Register `n` as the guest's current mode sees it (15: the PC as an instruction reads
    /// it, 8 or 4 bytes ahead). r0-r7 are never banked: inlined, with no mode to look at for
    /// them (most accesses); the others out of line (inlined whole, the banked registers'
    /// cases made the exit path call it, about 10 instructions).
    #[inline(always)]
    fn reg(&self, n: u8) -> u64 {
        if n < 8 {
            u64::from(self.r[usize::from(n)])
        } else {
            u64::from(self.banked_reg(n))
        }
    }

    #[inline(always)]
    fn set_reg(&mut self, n: u8, value: u64) {
        if n < 8 {
            self.r[usize::from(n)] = value as u32;
        } else {
            self.set_banked_reg(n, value as u32);
        }
    }

    /// Past the trapped instruction; in a Thumb IT block the IT state moves on too, as the
    /// instruction's completion would have moved it (B1.3.3, ITSTATE).
    fn advance_pc(&mut self, bytes: u8) {
        self.pc = self.pc.wrapping_add(u32::from(bytes));
        self.cpsr = advance_it_state(self.cpsr);
    }
}

impl Registers {
    /// Register `n` (8-15) of the guest's current mode.
    #[inline(never)]
    fn banked_reg(&self, n: u8) -> u32 {
        let mode = self.mode();
        match n {
            8..=12 if mode == MODE_FIQ => read_fiq_high(n),
            0..=12 => self.r[usize::from(n)],
            14 if matches!(mode, MODE_USR | MODE_SYS) => self.lr_usr,
            13 | 14 => sp_or_lr!(mode, n, read_banked),
            _ => self.pc.wrapping_add(if self.cpsr & CPSR_T != 0 { 4 } else { 8 }),
        }
    }

    /// Register `n` (8-15) of the guest's current mode written.
    #[inline(never)]
    fn set_banked_reg(&mut self, n: u8, v: u32) {
        let mode = self.mode();
        match n {
            8..=12 if mode == MODE_FIQ => write_fiq_high(n, v),
            0..=12 => self.r[usize::from(n)] = v,
            14 if matches!(mode, MODE_USR | MODE_SYS) => self.lr_usr = v,
            13 | 14 => sp_or_lr!(mode, n, write_banked, v),
            // A write to the PC by an emulated load is not something a trapped access does.
            _ => {}
        }
    }
}
