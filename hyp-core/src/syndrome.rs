//! Decoding of the exception syndrome (ESR_EL2 on AArch64; HSR on ARMv7 has the same EC and
//! data-abort ISS layout for the classes used here). ARM ARM D24.2.40 (ESR_EL2) and ARMv7 ARM
//! B3.13.6 (HSR).

use core::fmt;
use core::num::NonZeroU32;

/// The exception class, ESR_ELx.EC (bits [31:26]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ExceptionClass(pub u8);

impl ExceptionClass {
    pub const UNKNOWN: Self = Self(0x00);
    pub const WFX: Self = Self(0x01);
    pub const CP15_MCR_MRC: Self = Self(0x03);
    pub const CP15_MCRR_MRRC: Self = Self(0x04);
    pub const CP14_MCR_MRC: Self = Self(0x05);
    pub const CP14_LDC_STC: Self = Self(0x06);
    pub const SIMD_FP: Self = Self(0x07);
    /// VMRS of an ID group register (MVFR0-2), trapped by HCR_EL2.TID3 / HCR.TID3.
    pub const VMRS_ID: Self = Self(0x08);
    pub const CP14_MRRC: Self = Self(0x0c);
    pub const ILLEGAL_STATE: Self = Self(0x0e);
    pub const SVC32: Self = Self(0x11);
    pub const HVC32: Self = Self(0x12);
    pub const SMC32: Self = Self(0x13);
    pub const SVC64: Self = Self(0x15);
    pub const HVC64: Self = Self(0x16);
    pub const SMC64: Self = Self(0x17);
    pub const SYSREG64: Self = Self(0x18);
    pub const SVE: Self = Self(0x19);
    pub const INSTRUCTION_ABORT_LOWER: Self = Self(0x20);
    pub const INSTRUCTION_ABORT_SAME: Self = Self(0x21);
    pub const PC_ALIGNMENT: Self = Self(0x22);
    pub const DATA_ABORT_LOWER: Self = Self(0x24);
    pub const DATA_ABORT_SAME: Self = Self(0x25);
    pub const SP_ALIGNMENT: Self = Self(0x26);
    pub const FP32: Self = Self(0x28);
    pub const FP64: Self = Self(0x2c);
    pub const SERROR: Self = Self(0x2f);
    pub const BREAKPOINT_LOWER: Self = Self(0x30);
    pub const BREAKPOINT_SAME: Self = Self(0x31);
    pub const SOFTWARE_STEP_LOWER: Self = Self(0x32);
    pub const SOFTWARE_STEP_SAME: Self = Self(0x33);
    pub const WATCHPOINT_LOWER: Self = Self(0x34);
    pub const WATCHPOINT_SAME: Self = Self(0x35);
    pub const BKPT32: Self = Self(0x38);
    pub const BRK64: Self = Self(0x3c);

    /// The name the ARM ARM gives the class, for logs a person reads.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "unknown reason",
            0x01 => "WFI/WFE",
            0x03 => "MCR/MRC to CP15",
            0x04 => "MCRR/MRRC to CP15",
            0x05 => "MCR/MRC to CP14",
            0x06 => "LDC/STC to CP14",
            0x08 => "VMRS of an ID register",
            0x0c => "MRRC to CP14",
            0x07 => "SIMD/FP access",
            0x0e => "illegal execution state",
            0x11 => "SVC (AArch32)",
            0x12 => "HVC (AArch32)",
            0x13 => "SMC (AArch32)",
            0x15 => "SVC (AArch64)",
            0x16 => "HVC (AArch64)",
            0x17 => "SMC (AArch64)",
            0x18 => "MSR/MRS/system instruction",
            0x19 => "SVE access",
            0x20 => "instruction abort from a lower EL",
            0x21 => "instruction abort at the same EL",
            0x22 => "PC alignment fault",
            0x24 => "data abort from a lower EL",
            0x25 => "data abort at the same EL",
            0x26 => "SP alignment fault",
            0x28 => "floating-point exception (AArch32)",
            0x2c => "floating-point exception (AArch64)",
            0x2f => "SError interrupt",
            0x30 => "breakpoint from a lower EL",
            0x31 => "breakpoint at the same EL",
            0x32 => "software step from a lower EL",
            0x33 => "software step at the same EL",
            0x34 => "watchpoint from a lower EL",
            0x35 => "watchpoint at the same EL",
            0x38 => "BKPT (AArch32)",
            0x3c => "BRK (AArch64)",
            _ => "reserved exception class",
        }
    }
}

impl fmt::Display for ExceptionClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EC {:#04x} ({})", self.0, self.name())
    }
}

/// A syndrome register value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Syndrome(pub u64);

impl Syndrome {
    pub fn class(self) -> ExceptionClass {
        ExceptionClass(((self.0 >> 26) & 0x3f) as u8)
    }
    /// IL: the trapped instruction was 32 bits long (otherwise a 16-bit T32 one).
    pub fn instruction_is_32bit(self) -> bool {
        self.0 & (1 << 25) != 0
    }
    pub fn iss(self) -> u32 {
        (self.0 & 0x1ff_ffff) as u32
    }
    /// The immediate of an HVC or SMC (ISS.imm16).
    pub fn call_immediate(self) -> u16 {
        (self.0 & 0xffff) as u16
    }
    pub fn data_abort(self) -> DataAbort {
        DataAbort(self.iss())
    }
}

/// Width of a data access; the value is log2 of the bytes, as ISS.SAS encodes it (ARM ARM
/// D24.2.40).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum AccessWidth {
    Byte = 0,
    Halfword = 1,
    Word = 2,
    Doubleword = 3,
}

impl AccessWidth {
    /// A shift, not a match: every MMIO exit asks more than once. In 32 bits, then widened:
    /// a 64-bit shift is five instructions on a 32-bit CPU.
    pub const fn bytes(self) -> u64 {
        (1u32 << self as u32) as u64
    }
    pub const fn from_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            1 => Some(Self::Byte),
            2 => Some(Self::Halfword),
            4 => Some(Self::Word),
            8 => Some(Self::Doubleword),
            _ => None,
        }
    }
    /// The bits of a register that an access of this width carries.
    pub const fn mask(self) -> u64 {
        u64::MAX >> (64 - 8 * self.bytes())
    }
}

/// The ISS of a data abort (ARM ARM D24.2.40, "ISS encoding for an exception from a Data
/// Abort").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DataAbort(pub u32);

/// One emulatable load or store, decoded from a data abort with a valid instruction
/// syndrome: the ISS bits that describe it (SAS, SSE, SRT, SF, WnR; ARM ARM D24.2.40), kept
/// as the syndrome holds them. Each field is read where it is used, one bitfield extract:
/// unpacked into a struct at the decode and packed again to cross the handler, the fields
/// cost every trapped MMIO access 12 instructions (docs/performance.md, "Trapped MMIO
/// accesses"). ISV is kept too: always set, it makes the value non-zero, so an
/// `Option<MmioAccess>` is one word (with a separate tag, the compiler no longer fused the decoder with the
/// handler's match: 14 instructions more).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MmioAccess(NonZeroU32);

/// ISS.ISV [24], SAS [23:22], SSE [21], SRT [20:16], SF [15], WnR [6].
const ISV: u32 = 1 << 24;
const ACCESS_BITS: u32 = ISV | (0b11 << 22) | (1 << 21) | (0x1f << 16) | (1 << 15) | (1 << 6);
const SF: u32 = 1 << 15;

impl MmioAccess {
    /// The access as a syndrome would describe it.
    pub const fn new(
        width: AccessWidth,
        is_write: bool,
        register: u8,
        sign_extend: bool,
        register_is_64bit: bool,
    ) -> Self {
        let bits = ISV
            | ((width as u32) << 22)
            | ((sign_extend as u32) << 21)
            | (((register & 0x1f) as u32) << 16)
            | ((register_is_64bit as u32) << 15)
            | ((is_write as u32) << 6);
        // `bits` has ISV set, so 1 + (bits - 1) is `bits`, never saturated.
        MmioAccess(NonZeroU32::MIN.saturating_add(bits - 1))
    }
    const fn bits(self) -> u32 {
        self.0.get()
    }
    pub const fn width(self) -> AccessWidth {
        match (self.bits() >> 22) & 0b11 {
            0 => AccessWidth::Byte,
            1 => AccessWidth::Halfword,
            2 => AccessWidth::Word,
            _ => AccessWidth::Doubleword,
        }
    }
    pub const fn is_write(self) -> bool {
        self.bits() & (1 << 6) != 0
    }
    /// The transfer register, 0..=30; 31 is the zero register (XZR/WZR).
    pub const fn register(self) -> u8 {
        ((self.bits() >> 16) & 0x1f) as u8
    }
    /// SSE: a load sign-extends to the register width.
    pub const fn sign_extend(self) -> bool {
        self.bits() & (1 << 21) != 0
    }
    /// SF: the register is 64 bits wide (X), not 32 (W).
    pub const fn register_is_64bit(self) -> bool {
        self.bits() & SF != 0
    }
    /// The same access to a 32-bit register (an AArch32 guest's: SF is RES0 in an HSR).
    pub const fn to_32bit_register(self) -> Self {
        // ISV stays set: never zero.
        match NonZeroU32::new(self.bits() & !SF) {
            Some(bits) => MmioAccess(bits),
            None => self,
        }
    }
}

impl fmt::Debug for MmioAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmioAccess")
            .field("width", &self.width())
            .field("is_write", &self.is_write())
            .field("register", &self.register())
            .field("sign_extend", &self.sign_extend())
            .field("register_is_64bit", &self.register_is_64bit())
            .finish()
    }
}

impl DataAbort {
    /// ISV: bits [23:14] hold a valid instruction syndrome.
    pub fn syndrome_valid(self) -> bool {
        self.0 & (1 << 24) != 0
    }
    pub fn is_write(self) -> bool {
        self.0 & (1 << 6) != 0
    }
    /// S1PTW: the fault happened on the guest's own stage-1 table walk.
    pub fn on_stage1_walk(self) -> bool {
        self.0 & (1 << 7) != 0
    }
    /// CM: a cache maintenance instruction faulted.
    pub fn cache_maintenance(self) -> bool {
        self.0 & (1 << 8) != 0
    }
    /// FnV: FAR is not valid.
    pub fn far_not_valid(self) -> bool {
        self.0 & (1 << 10) != 0
    }
    /// DFSC: the data fault status code (bits [5:0]).
    pub fn status_code(self) -> u8 {
        (self.0 & 0x3f) as u8
    }
    /// A stage-2 translation fault at any level (DFSC 0b0001LL).
    pub fn is_translation_fault(self) -> bool {
        self.status_code() & 0x3c == 0x04
    }
    /// A stage-2 permission fault at any level (DFSC 0b0011LL).
    pub fn is_permission_fault(self) -> bool {
        self.status_code() & 0x3c == 0x0c
    }
    /// HPFAR holds the faulting IPA: a translation, access flag or permission fault (DFSC
    /// 0b0001LL to 0b0011LL; ARM ARM D24.2.59, HPFAR_EL2, and B4.1.71 HPFAR on ARMv7, which
    /// use the same codes in HSR). For any other fault (an alignment fault a stage-2 Device
    /// mapping causes, a TLB conflict, an external abort) HPFAR is UNKNOWN. The same test
    /// holds for an instruction abort's IFSC.
    pub fn ipa_is_known(self) -> bool {
        (0x04..=0x0f).contains(&self.status_code())
    }

    /// The access to emulate, or None when the hardware gave no instruction syndrome (load or
    /// store pair, writeback addressing, SIMD registers...): such an access cannot be emulated
    /// without decoding the instruction, and the guest gets an external abort instead.
    pub fn mmio_access(self) -> Option<MmioAccess> {
        if !self.syndrome_valid() || self.on_stage1_walk() || self.cache_maintenance() {
            return None;
        }
        // ISV is set (tested above): never None here.
        NonZeroU32::new(self.0 & ACCESS_BITS).map(MmioAccess)
    }
}

impl MmioAccess {
    /// The register value a load leaves, from the device's `value`: narrowed to the access
    /// width, sign-extended when SSE says so, then limited to the register's width
    /// (a W register write zeroes the upper 32 bits).
    pub fn load_result(&self, value: u64) -> u64 {
        let width = self.width();
        if !self.register_is_64bit() {
            // A W register, or an AArch32 guest's: in 32-bit arithmetic, which a 32-bit CPU
            // does in one instruction a step where the 64-bit mask and shifts took it about 20
            // (docs/performance.md, "ARMv7"). A word or doubleword load leaves the low word.
            // 32 less the access's bits, none for a word or doubleword: 24, 16, 0, 0 by SAS,
            // one byte each of a constant (a shift and a mask; the subtraction saturated
            // took five).
            let shift = (0x0000_1018u32 >> (8 * width as u32)) & 0xff;
            let shifted = (value as u32) << shift;
            let extended = if self.sign_extend() { ((shifted as i32) >> shift) as u32 } else { shifted >> shift };
            return u64::from(extended);
        }
        let bits = 8 * width.bytes() as u32;
        let narrowed = value & width.mask();
        if self.sign_extend() && bits < 64 {
            let shift = 64 - bits;
            (((narrowed << shift) as i64) >> shift) as u64
        } else {
            narrowed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ldr w1, [x0]` at a lower EL hitting an unmapped stage-2 page: EC 0x24, IL, ISV, SAS=2,
    /// SRT=1, DFSC level-3 translation fault.
    const LDR_W1: u64 = (0x24 << 26) | (1 << 25) | (1 << 24) | (2 << 22) | (1 << 16) | 0x07;

    #[test]
    fn a_word_load_decodes_to_its_register_and_width() {
        let s = Syndrome(LDR_W1);
        assert_eq!(s.class(), ExceptionClass::DATA_ABORT_LOWER);
        assert!(s.instruction_is_32bit());
        let abort = s.data_abort();
        assert!(abort.is_translation_fault());
        assert!(!abort.is_permission_fault());
        let access = abort.mmio_access().unwrap();
        assert_eq!(access, MmioAccess::new(AccessWidth::Word, false, 1, false, false));
        assert_eq!(
            (access.width(), access.is_write(), access.register(), access.sign_extend(), access.register_is_64bit()),
            (AccessWidth::Word, false, 1, false, false)
        );
    }

    #[test]
    fn an_access_and_its_absence_fit_in_one_word() {
        assert_eq!(core::mem::size_of::<Option<MmioAccess>>(), 4);
        let all = MmioAccess::new(AccessWidth::Doubleword, true, 31, true, true);
        assert_eq!(Syndrome(u64::from(u32::MAX)).data_abort().mmio_access(), None, "S1PTW and CM set");
        let every_field = (0x24 << 26) | (1 << 25) | 0x1ff_fe7f & !(1 << 7) & !(1 << 8);
        assert_eq!(Syndrome(every_field).data_abort().mmio_access(), Some(all));
        assert_eq!(all.to_32bit_register(), MmioAccess::new(AccessWidth::Doubleword, true, 31, true, false));
    }

    #[test]
    fn without_isv_nothing_is_emulated() {
        let s = Syndrome(LDR_W1 & !(1 << 24));
        assert_eq!(s.data_abort().mmio_access(), None);
    }

    #[test]
    fn stage1_walk_and_cache_maintenance_faults_are_not_mmio() {
        assert_eq!(Syndrome(LDR_W1 | 1 << 7).data_abort().mmio_access(), None);
        assert_eq!(Syndrome(LDR_W1 | 1 << 8).data_abort().mmio_access(), None);
    }

    #[test]
    fn a_store_of_xzr_decodes_register_31() {
        let strb_xzr = (0x24 << 26) | (1 << 25) | (1 << 24) | (31 << 16) | (1 << 6) | 0x06;
        let access = Syndrome(strb_xzr).data_abort().mmio_access().unwrap();
        assert_eq!(access.width(), AccessWidth::Byte);
        assert!(access.is_write());
        assert_eq!(access.register(), 31);
    }

    #[test]
    fn loads_sign_extend_and_narrow_as_the_syndrome_says() {
        let ldrsb_x = MmioAccess::new(AccessWidth::Byte, false, 0, true, true);
        assert_eq!(ldrsb_x.load_result(0x1_80), 0xffff_ffff_ffff_ff80);
        let ldrsb_w = ldrsb_x.to_32bit_register();
        assert_eq!(ldrsb_w, MmioAccess::new(AccessWidth::Byte, false, 0, true, false));
        assert_eq!(ldrsb_w.load_result(0x80), 0xffff_ff80);
        let ldrh = MmioAccess::new(AccessWidth::Halfword, false, 0, false, true);
        assert_eq!(ldrh.load_result(0xdead_beef), 0xbeef);
        let ldr_x = MmioAccess::new(AccessWidth::Doubleword, false, 0, false, true);
        assert_eq!(ldr_x.load_result(u64::MAX), u64::MAX);
    }

    /// `load_result` as the architecture states it: narrow, sign-extend to 64 bits, keep the
    /// register's width.
    fn load_result_reference(access: &MmioAccess, value: u64) -> u64 {
        let bits = 8 * access.width().bytes() as u32;
        let narrowed = value & access.width().mask();
        let extended = if access.sign_extend() && bits < 64 {
            (((narrowed << (64 - bits)) as i64) >> (64 - bits)) as u64
        } else {
            narrowed
        };
        if access.register_is_64bit() {
            extended
        } else {
            extended & 0xffff_ffff
        }
    }

    proptest::proptest! {
        #[test]
        fn every_load_leaves_what_the_architecture_says(value: u64, width in 0u8..4, sign_extend: bool, wide: bool) {
            let width = [AccessWidth::Byte, AccessWidth::Halfword, AccessWidth::Word, AccessWidth::Doubleword][usize::from(width)];
            let access = MmioAccess::new(width, false, 1, sign_extend, wide);
            proptest::prop_assert_eq!(access.load_result(value), load_result_reference(&access, value));
        }
    }

    #[test]
    fn every_class_has_a_name() {
        assert_eq!(ExceptionClass::HVC64.name(), "HVC (AArch64)");
        assert_eq!(ExceptionClass(0x3f).name(), "reserved exception class");
    }

    #[test]
    fn access_widths_round_trip() {
        for w in [AccessWidth::Byte, AccessWidth::Halfword, AccessWidth::Word, AccessWidth::Doubleword] {
            assert_eq!(AccessWidth::from_bytes(w.bytes()), Some(w));
        }
        assert_eq!(AccessWidth::from_bytes(3), None);
        assert_eq!(AccessWidth::Byte.mask(), 0xff);
        assert_eq!(AccessWidth::Halfword.mask(), 0xffff);
        assert_eq!(AccessWidth::Word.mask(), 0xffff_ffff);
        assert_eq!(AccessWidth::Doubleword.mask(), u64::MAX);
    }
}
