//! Trapped system register accesses (EC 0x18): the ID registers a guest reads, sanitised so
//! it is not offered what the hypervisor does not virtualise; the debug registers (kept per
//! vCPU: `debug_registers`); set/way cache maintenance; ACTLR_EL1; and UNDEF for the rest.
//!
//! ARM ARM D24.2.40 (ISS for EC 0x18), D23.1 (the ID register space: op0 3, op1 0, CRn 0,
//! CRm 1-7 is RAZ where unallocated), D24.2 field descriptions of each register.

use crate::debug_registers::{DebugAccess, DebugGeometry, DebugRegisters};

/// One MSR/MRS or system instruction, decoded from the ISS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegAccess {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
    /// The general register, 0..=30; 31 is XZR.
    pub rt: u8,
    pub is_read: bool,
}

/// A system register's encoding: (op0, op1, CRn, CRm, op2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Encoding(pub u8, pub u8, pub u8, pub u8, pub u8);

impl SysRegAccess {
    pub fn decode(iss: u32) -> Self {
        SysRegAccess {
            op0: (iss >> 20 & 3) as u8,
            op2: (iss >> 17 & 7) as u8,
            op1: (iss >> 14 & 7) as u8,
            crn: (iss >> 10 & 0xf) as u8,
            rt: (iss >> 5 & 0x1f) as u8,
            crm: (iss >> 1 & 0xf) as u8,
            is_read: iss & 1 != 0,
        }
    }
    pub fn encoding(&self) -> Encoding {
        Encoding(self.op0, self.op1, self.crn, self.crm, self.op2)
    }
    /// The ISS this access was decoded from (`decode`'s inverse).
    pub fn iss(&self) -> u32 {
        iss_of(self.encoding()) | u32::from(self.rt) << 5 | u32::from(self.is_read)
    }
    /// In the ID register space (op0 3, op1 0, CRn 0, CRm 1-7).
    pub fn is_id_register(&self) -> bool {
        self.op0 == 3 && self.op1 == 0 && self.crn == 0 && (1..=7).contains(&self.crm)
    }
}

pub const ID_AA64PFR0_EL1: Encoding = Encoding(3, 0, 0, 4, 0);
pub const ID_AA64PFR1_EL1: Encoding = Encoding(3, 0, 0, 4, 1);
pub const ID_AA64ZFR0_EL1: Encoding = Encoding(3, 0, 0, 4, 4);
pub const ID_AA64SMFR0_EL1: Encoding = Encoding(3, 0, 0, 4, 5);
pub const ID_AA64DFR0_EL1: Encoding = Encoding(3, 0, 0, 5, 0);
pub const ID_AA64ISAR1_EL1: Encoding = Encoding(3, 0, 0, 6, 1);
pub const ID_AA64ISAR2_EL1: Encoding = Encoding(3, 0, 0, 6, 2);
pub const ID_AA64MMFR0_EL1: Encoding = Encoding(3, 0, 0, 7, 0);
pub const ID_AA64MMFR1_EL1: Encoding = Encoding(3, 0, 0, 7, 1);
pub const ID_PFR1_EL1: Encoding = Encoding(3, 0, 0, 1, 1);
pub const ID_DFR0_EL1: Encoding = Encoding(3, 0, 0, 1, 2);
pub const ACTLR_EL1: Encoding = Encoding(3, 0, 1, 0, 1);
/// The VM control registers whose writes HCR_EL2.TVM traps (ARM ARM D24.2.x, HCR_EL2.TVM),
/// watched while a guest uses set/way maintenance (`set_way`).
pub const SCTLR_EL1: Encoding = Encoding(3, 0, 1, 0, 0);
pub const TTBR0_EL1: Encoding = Encoding(3, 0, 2, 0, 0);
pub const TTBR1_EL1: Encoding = Encoding(3, 0, 2, 0, 1);
pub const TCR_EL1: Encoding = Encoding(3, 0, 2, 0, 2);
pub const AFSR0_EL1: Encoding = Encoding(3, 0, 5, 1, 0);
pub const AFSR1_EL1: Encoding = Encoding(3, 0, 5, 1, 1);
pub const ESR_EL1: Encoding = Encoding(3, 0, 5, 2, 0);
pub const FAR_EL1: Encoding = Encoding(3, 0, 6, 0, 0);
pub const MAIR_EL1: Encoding = Encoding(3, 0, 10, 2, 0);
pub const AMAIR_EL1: Encoding = Encoding(3, 0, 10, 3, 0);
pub const CONTEXTIDR_EL1: Encoding = Encoding(3, 0, 13, 0, 1);

/// A register HCR_EL2.TVM traps writes to. `Dacr` and `Ifsr` are written only by an
/// AArch32 guest (DACR32_EL2, IFSR32_EL2: `coprocessor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmControlRegister {
    Sctlr,
    Ttbr0,
    Ttbr1,
    Tcr,
    Afsr0,
    Afsr1,
    Esr,
    Far,
    Mair,
    Amair,
    Contextidr,
    Dacr,
    Ifsr,
}

impl VmControlRegister {
    pub fn from_encoding(e: Encoding) -> Option<VmControlRegister> {
        Some(match e {
            SCTLR_EL1 => VmControlRegister::Sctlr,
            TTBR0_EL1 => VmControlRegister::Ttbr0,
            TTBR1_EL1 => VmControlRegister::Ttbr1,
            TCR_EL1 => VmControlRegister::Tcr,
            AFSR0_EL1 => VmControlRegister::Afsr0,
            AFSR1_EL1 => VmControlRegister::Afsr1,
            ESR_EL1 => VmControlRegister::Esr,
            FAR_EL1 => VmControlRegister::Far,
            MAIR_EL1 => VmControlRegister::Mair,
            AMAIR_EL1 => VmControlRegister::Amair,
            CONTEXTIDR_EL1 => VmControlRegister::Contextidr,
            _ => return None,
        })
    }
}

/// DC ISW, DC CSW, DC CISW (set/way maintenance, trapped by HCR_EL2.TSW).
pub const DC_ISW: Encoding = Encoding(1, 0, 7, 6, 2);
pub const DC_CSW: Encoding = Encoding(1, 0, 7, 10, 2);
pub const DC_CISW: Encoding = Encoding(1, 0, 7, 14, 2);
/// SGI generation (IHI 0069 12.2.22-24), trapped with HCR_EL2.IMO/FMO.
pub const ICC_SGI1R_EL1: Encoding = Encoding(3, 0, 12, 11, 5);
pub const ICC_ASGI1R_EL1: Encoding = Encoding(3, 0, 12, 11, 6);
pub const ICC_SGI0R_EL1: Encoding = Encoding(3, 0, 12, 11, 7);
/// Deactivation (IHI 0069 12.2, ICC_DIR_EL1), trapped with ICH_HCR_EL2.TDIR while an active
/// interrupt is left out of the vCPU's list registers (vgic's `deactivate_by_dir`).
pub const ICC_DIR_EL1: Encoding = Encoding(3, 0, 12, 11, 1);

/// What the VM is offered, beyond what every VM gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmFeatures {
    /// The guest's GIC is a GICv3 (its CPU interface is the system registers).
    pub gic_v3: bool,
    /// The VM's IPA size, as ID_AA64MMFR0_EL1.PARange says it.
    pub ipa_bits: u8,
}

/// The real value of an ID register, from the hardware.
pub trait IdRegisters {
    fn read(&self, register: Encoding) -> u64;
}

/// Which SGI generation register a guest wrote: they differ in the groups they may
/// generate (IHI 0069 12.2.22-24), which the vGIC applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgiGenerationRegister {
    Sgi1r,
    Asgi1r,
    Sgi0r,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SysRegAction {
    /// Write this value to the access's Rt (the PC moves on).
    Read(u64),
    /// A write with no effect (RAZ/WI register).
    WriteIgnored,
    /// Set/way maintenance (`set_way` decides what it costs).
    SetWay,
    /// A write to a VM control register, trapped while set/way maintenance is watched
    /// (`set_way`); the value is in Rt.
    ControlWrite(VmControlRegister),
    /// A write to an SGI generation register (the value written is in Rt).
    GenerateSgi(SgiGenerationRegister),
    /// A write to ICC_DIR_EL1 (the value written, the INTID, is in Rt).
    Deactivate,
    /// A debug register was written: the vCPU's debug state may need the hardware now, or
    /// no longer (`DebugRegisters::needs_hardware`).
    DebugStateChanged,
    /// Not emulated: the guest gets an undefined instruction.
    Undefined,
}

fn clear(value: u64, lsb: u32, width: u32) -> u64 {
    value & !(((1u64 << width) - 1) << lsb)
}

fn set(value: u64, lsb: u32, width: u32, field: u64) -> u64 {
    clear(value, lsb, width) | (field << lsb)
}

/// ID_AA64MMFR0_EL1.PARange for an address size (D24.2.64).
fn parange(bits: u8) -> u64 {
    match bits {
        0..=32 => 0,
        33..=36 => 1,
        37..=40 => 2,
        41..=42 => 3,
        43..=44 => 4,
        45..=48 => 5,
        _ => 6,
    }
}

/// The value a guest reads from an ID register.
pub fn sanitised_id(register: Encoding, real: u64, vm: VmFeatures) -> u64 {
    match register {
        // SVE [35:32], MPAM [43:40], AMU [47:44], EL2 [11:8] (no nested virtualization),
        // GIC [27:24] (system register interface only for a GICv3 guest).
        ID_AA64PFR0_EL1 => {
            let v = clear(clear(clear(clear(real, 32, 4), 40, 4), 44, 4), 8, 4);
            set(v, 24, 4, u64::from(vm.gic_v3))
        }
        // MTE [11:8], MPAM_frac [19:16], SME [27:24], NMI [39:36], GCS [47:44].
        ID_AA64PFR1_EL1 => clear(clear(clear(clear(clear(real, 8, 4), 16, 4), 24, 4), 36, 4), 44, 4),
        ID_AA64ZFR0_EL1 | ID_AA64SMFR0_EL1 => 0,
        // TraceVer [7:4] (trace is trapped), PMUVer [11:8] (no PMU), PMSVer [35:32] (no SPE),
        // TraceFilt [43:40], TraceBuffer [47:44].
        ID_AA64DFR0_EL1 => clear(clear(clear(clear(clear(real, 4, 4), 8, 4), 32, 4), 40, 4), 44, 4),
        // Pointer authentication (APA [7:4], API [11:8], GPA [27:24], GPI [31:28]): its keys
        // are not switched per vCPU.
        ID_AA64ISAR1_EL1 => clear(clear(clear(clear(real, 4, 4), 8, 4), 24, 4), 28, 4),
        // GPA3 [11:8], APA3 [15:12].
        ID_AA64ISAR2_EL1 => clear(clear(real, 8, 4), 12, 4),
        // PARange [3:0] is the VM's IPA size, not the host's physical address size.
        ID_AA64MMFR0_EL1 => set(real, 0, 4, parange(vm.ipa_bits).min(real & 0xf)),
        // VH [11:8]: no VHE for guests.
        ID_AA64MMFR1_EL1 => clear(real, 8, 4),
        // PerfMon [27:24]; and debug and trace, which AArch32 guests are not offered
        // (`coprocessor`): CopDbg [3:0], CopSDbg [7:4], CopTrc [11:8], MMapTrc [15:12],
        // MMapDbg [19:16].
        ID_DFR0_EL1 => real & !0x0f0f_ffff,
        // Virtualization [15:12] and Virt_frac [23:20]: no HYP mode for guests; GIC [31:28]
        // (the system register interface) only for a GICv3 guest.
        ID_PFR1_EL1 => set(clear(clear(real, 12, 4), 20, 4), 28, 4, u64::from(vm.gic_v3)),
        _ => real,
    }
}

/// What a trapped system register access needs from the VM, the vCPU and the CPU.
pub trait SysRegEnv {
    fn features(&self) -> VmFeatures;
    fn id_registers(&self) -> &impl IdRegisters;
    /// The exiting vCPU's debug registers (trapped, and kept per vCPU).
    fn debug_registers(&mut self) -> &mut DebugRegisters;
}

/// Emulates one trapped access of the vCPU `env` describes; `value` is what a write writes
/// (the guest's Rt).
pub fn emulate(access: &SysRegAccess, value: u64, env: &mut impl SysRegEnv) -> SysRegAction {
    let encoding = access.encoding();
    let vm = env.features();
    // An SMP guest's most frequent trapped access (every IPI it sends), tested first: behind
    // the tests below, a virtual IPI's sender paid for each of them.
    if let Some(register) = sgi_generation(access, vm.gic_v3) {
        return SysRegAction::GenerateSgi(register);
    }
    if DebugRegisters::is_debug_register(access) {
        let geometry = DebugGeometry::from_id_aa64dfr0(env.id_registers().read(ID_AA64DFR0_EL1));
        return match env.debug_registers().access(access, value, geometry) {
            DebugAccess::Read(v) => SysRegAction::Read(v),
            DebugAccess::Written => SysRegAction::DebugStateChanged,
            DebugAccess::Undefined => SysRegAction::Undefined,
        };
    }
    if access.is_id_register() {
        return if access.is_read {
            SysRegAction::Read(sanitised_id(encoding, env.id_registers().read(encoding), vm))
        } else {
            SysRegAction::Undefined
        };
    }
    match encoding {
        // IMPLEMENTATION DEFINED auxiliary control: RAZ/WI for guests.
        ACTLR_EL1 if access.is_read => SysRegAction::Read(0),
        ACTLR_EL1 => SysRegAction::WriteIgnored,
        DC_ISW | DC_CSW | DC_CISW if !access.is_read => SysRegAction::SetWay,
        ICC_DIR_EL1 if !access.is_read && vm.gic_v3 => SysRegAction::Deactivate,
        _ if !access.is_read && VmControlRegister::from_encoding(encoding).is_some() => {
            VmControlRegister::from_encoding(encoding).map_or(SysRegAction::Undefined, SysRegAction::ControlWrite)
        }
        _ => SysRegAction::Undefined,
    }
}

/// The SGI generation register a trapped access writes, if it is one: ICC_SGI1R_EL1,
/// ICC_ASGI1R_EL1 or ICC_SGI0R_EL1 (IHI 0069 12.2, the GICv3 CPU interface; a VM on a
/// GICv2 has none of them).
#[inline(always)]
pub fn sgi_generation(access: &SysRegAccess, gic_v3: bool) -> Option<SgiGenerationRegister> {
    if access.is_read || !gic_v3 {
        return None;
    }
    match access.encoding() {
        ICC_SGI1R_EL1 => Some(SgiGenerationRegister::Sgi1r),
        ICC_ASGI1R_EL1 => Some(SgiGenerationRegister::Asgi1r),
        ICC_SGI0R_EL1 => Some(SgiGenerationRegister::Sgi0r),
        _ => None,
    }
}

/// `sgi_generation` of the access whose ISS (ESR_EL2 for EC 0x18, ARM ARM D24.2.40: Op0
/// [21:20], Op2 [19:17], Op1 [16:14], CRn [13:10], Rt [9:5], CRm [4:1], Direction [0]) is
/// `iss`, tested on the ISS itself: the answer in the vector asks it of every trapped system
/// register access, where a decoded `SysRegAccess` was built field by field on the stack
/// and loaded back (about 10 instructions of the sending side of an IPI).
#[inline(always)]
pub fn sgi_generation_of_iss(iss: u32, gic_v3: bool) -> Option<SgiGenerationRegister> {
    if !gic_v3 {
        return None;
    }
    // Everything but Rt: the encoding, and Direction 0 (a write).
    const MASK: u32 = iss_of(Encoding(3, 7, 15, 15, 7)) | 1;
    const SGI1R: u32 = iss_of(ICC_SGI1R_EL1);
    const ASGI1R: u32 = iss_of(ICC_ASGI1R_EL1);
    const SGI0R: u32 = iss_of(ICC_SGI0R_EL1);
    match iss & MASK {
        SGI1R => Some(SgiGenerationRegister::Sgi1r),
        ASGI1R => Some(SgiGenerationRegister::Asgi1r),
        SGI0R => Some(SgiGenerationRegister::Sgi0r),
        _ => None,
    }
}

/// The ISS bits of a write of the register `e` to X0 (`SysRegAccess::decode`'s layout).
const fn iss_of(e: Encoding) -> u32 {
    let Encoding(op0, op1, crn, crm, op2) = e;
    (op0 as u32) << 20 | (op2 as u32) << 17 | (op1 as u32) << 14 | (crn as u32) << 10 | (crm as u32) << 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ISS test says what the decoded one says, for every ISS of a trapped system
    /// register access (bits [24:22] are RES0 and Rt only moves the register), on both GICs.
    #[test]
    fn the_sgi_generation_register_read_off_the_iss_is_the_decoded_one() {
        for iss in 0..1u32 << 22 {
            let access = SysRegAccess::decode(iss);
            assert_eq!(access.iss(), iss);
            for gic_v3 in [false, true] {
                assert_eq!(sgi_generation_of_iss(iss, gic_v3), sgi_generation(&access, gic_v3), "{iss:#x}");
            }
        }
    }

    /// ID values as QEMU's `-cpu max` reports them (SVE, SME, MTE, PAuth, PMU, SPE, VHE).
    struct Max;
    impl IdRegisters for Max {
        fn read(&self, r: Encoding) -> u64 {
            match r {
                ID_AA64PFR0_EL1 => 0x1201_1111_1111_2222,
                ID_AA64PFR1_EL1 => 0x0000_0000_1101_0321,
                ID_AA64ZFR0_EL1 => 0x0110_1101_0001_0011,
                ID_AA64DFR0_EL1 => 0x0000_0101_1030_5719,
                ID_AA64ISAR1_EL1 => 0x0011_1111_1011_1151,
                ID_AA64MMFR0_EL1 => 0x0000_1122_3010_1125,
                ID_AA64MMFR1_EL1 => 0x1001_1111_1021_1122,
                _ => 0x1111,
            }
        }
    }

    const V3: VmFeatures = VmFeatures { gic_v3: true, ipa_bits: 40 };
    const V2: VmFeatures = VmFeatures { gic_v3: false, ipa_bits: 40 };

    fn read(e: Encoding, vm: VmFeatures) -> u64 {
        let access = SysRegAccess { op0: e.0, op1: e.1, crn: e.2, crm: e.3, op2: e.4, rt: 0, is_read: true };
        match emu(&access, vm) {
            SysRegAction::Read(v) => v,
            other => panic!("{other:?}"),
        }
    }

    /// A vCPU of a VM with `features` on a `-cpu max` CPU.
    pub(crate) struct MaxVcpu {
        pub(crate) features: VmFeatures,
        pub(crate) debug: DebugRegisters,
    }
    impl SysRegEnv for MaxVcpu {
        fn features(&self) -> VmFeatures {
            self.features
        }
        fn id_registers(&self) -> &impl IdRegisters {
            &Max
        }
        fn debug_registers(&mut self) -> &mut DebugRegisters {
            &mut self.debug
        }
    }

    fn emu(access: &SysRegAccess, vm: VmFeatures) -> SysRegAction {
        emulate(access, 0, &mut MaxVcpu { features: vm, debug: DebugRegisters::AT_RESET })
    }

    fn field(v: u64, lsb: u32) -> u64 {
        v >> lsb & 0xf
    }

    #[test]
    fn iss_decodes_to_the_register_and_direction() {
        // MRS x3, ID_AA64PFR0_EL1: op0 3, op2 0, op1 0, CRn 0, Rt 3, CRm 4, read.
        let iss = (3 << 20) | (3 << 5) | (4 << 1) | 1;
        let a = SysRegAccess::decode(iss);
        assert_eq!(a, SysRegAccess { op0: 3, op1: 0, crn: 0, crm: 4, op2: 0, rt: 3, is_read: true });
        assert!(a.is_id_register());
    }

    #[test]
    fn sve_sme_mte_amu_and_nested_virtualization_are_hidden() {
        let pfr0 = read(ID_AA64PFR0_EL1, V3);
        assert_eq!((field(pfr0, 32), field(pfr0, 44), field(pfr0, 40), field(pfr0, 8)), (0, 0, 0, 0));
        assert_eq!(field(pfr0, 0), 2, "EL0 AArch32 support is kept");
        let pfr1 = read(ID_AA64PFR1_EL1, V3);
        assert_eq!((field(pfr1, 8), field(pfr1, 24)), (0, 0));
        assert_eq!(field(pfr1, 4), 2, "SSBS is kept");
        assert_eq!(read(ID_AA64ZFR0_EL1, V3), 0);
    }

    #[test]
    fn the_gic_field_follows_the_vms_gic() {
        assert_eq!(field(read(ID_AA64PFR0_EL1, V3), 24), 1);
        assert_eq!(field(read(ID_AA64PFR0_EL1, V2), 24), 0);
    }

    #[test]
    fn pmu_spe_trace_and_pointer_authentication_are_hidden() {
        let dfr0 = read(ID_AA64DFR0_EL1, V3);
        assert_eq!((field(dfr0, 8), field(dfr0, 32), field(dfr0, 4)), (0, 0, 0));
        assert_eq!(field(dfr0, 0), 9, "DebugVer is kept");
        let isar1 = read(ID_AA64ISAR1_EL1, V3);
        assert_eq!((field(isar1, 4), field(isar1, 8), field(isar1, 24), field(isar1, 28)), (0, 0, 0, 0));
    }

    #[test]
    fn parange_is_the_ipa_size_and_vhe_is_hidden() {
        assert_eq!(field(read(ID_AA64MMFR0_EL1, V3), 0), 2, "40 bits");
        assert_eq!(field(read(ID_AA64MMFR0_EL1, VmFeatures { gic_v3: true, ipa_bits: 48 }), 0), 5);
        assert_eq!(field(read(ID_AA64MMFR1_EL1, V3), 8), 0);
    }

    #[test]
    fn other_id_registers_read_as_the_hardware_and_writes_are_undefined() {
        assert_eq!(read(Encoding(3, 0, 0, 6, 0), V3), 0x1111);
        let write = SysRegAccess { op0: 3, op1: 0, crn: 0, crm: 4, op2: 0, rt: 0, is_read: false };
        assert_eq!(emu(&write, V3), SysRegAction::Undefined);
    }

    #[test]
    fn actlr_is_raz_wi_and_set_way_goes_to_the_set_way_emulation() {
        let a =
            |e: Encoding, is_read| SysRegAccess { op0: e.0, op1: e.1, crn: e.2, crm: e.3, op2: e.4, rt: 1, is_read };
        assert_eq!(emu(&a(ACTLR_EL1, true), V3), SysRegAction::Read(0));
        assert_eq!(emu(&a(ACTLR_EL1, false), V3), SysRegAction::WriteIgnored);
        for dc in [DC_ISW, DC_CSW, DC_CISW] {
            assert_eq!(emu(&a(dc, false), V3), SysRegAction::SetWay);
        }
        for (e, r) in [(SCTLR_EL1, VmControlRegister::Sctlr), (CONTEXTIDR_EL1, VmControlRegister::Contextidr)] {
            assert_eq!(emu(&a(e, false), V3), SysRegAction::ControlWrite(r));
            assert_eq!(emu(&a(e, true), V3), SysRegAction::Undefined, "reads are never trapped (no TRVM)");
        }
        assert_eq!(emu(&a(Encoding(3, 3, 9, 13, 0), true), V3), SysRegAction::Undefined, "PMCCNTR_EL0");
        assert_eq!(emu(&a(ICC_SGI1R_EL1, false), V3), SysRegAction::GenerateSgi(SgiGenerationRegister::Sgi1r));
        assert_eq!(emu(&a(ICC_ASGI1R_EL1, false), V3), SysRegAction::GenerateSgi(SgiGenerationRegister::Asgi1r));
        assert_eq!(emu(&a(ICC_SGI0R_EL1, false), V3), SysRegAction::GenerateSgi(SgiGenerationRegister::Sgi0r));
        assert_eq!(emu(&a(ICC_SGI1R_EL1, false), V2), SysRegAction::Undefined, "no system register interface on GICv2");
        assert_eq!(emu(&a(ICC_SGI1R_EL1, true), V3), SysRegAction::Undefined, "write-only");
        assert_eq!(emu(&a(ICC_DIR_EL1, false), V3), SysRegAction::Deactivate);
        assert_eq!(emu(&a(ICC_DIR_EL1, true), V3), SysRegAction::Undefined, "write-only");
        assert_eq!(emu(&a(ICC_DIR_EL1, false), V2), SysRegAction::Undefined);
    }
}
