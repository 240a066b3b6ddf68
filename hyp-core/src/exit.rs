//! What to do with a guest's synchronous exit: hypercalls, emulated MMIO, and the
//! architected fault for everything else. Pure logic over the saved guest registers: the
//! arch crate reads the syndrome registers, a decoder of its architecture (`trap`) says what
//! the exit asks for, `handle` answers it, and the arch crate applies the outcome.
//!
//! Every path a guest can drive ends in a result for the guest (a value, an external abort,
//! an undefined instruction) and, where the guest did something wrong, an `Incident` the
//! hypervisor logs with the VM and vCPU. None ends in a panic.

use core::fmt;

use stage2::Ipa;

use crate::coprocessor::{self, RegisterPart};
use crate::mmio::{MmioDispatch, MmioError};
use crate::smccc::{self, Hypercall};
use crate::syndrome::{ExceptionClass, MmioAccess, Syndrome};
pub use crate::sysreg::SysRegEnv;
use crate::sysreg::{self, SgiGenerationRegister, SysRegAction, VmControlRegister};
use crate::trap::{self, CoprocessorAccess, DecodedExit, GuestRegisters, Trap, WideCoprocessorAccess};

/// A vCPU's general registers, PC and PSTATE as saved on exit (layout shared with the exit
/// assembly: x0..x30 at 0, pc at 248, pstate at 256).
#[repr(C)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestContext {
    pub x: [u64; 31],
    pub pc: u64,
    pub pstate: u64,
}

impl GuestContext {
    /// Register `n` as an instruction sees it: 31 is the zero register.
    pub fn reg(&self, n: u8) -> u64 {
        self.x.get(usize::from(n)).copied().unwrap_or(0)
    }
    pub fn set_reg(&mut self, n: u8, value: u64) {
        if let Some(r) = self.x.get_mut(usize::from(n)) {
            *r = value;
        }
    }
    /// Moves past the instruction that trapped with `syndrome` (it completed).
    pub fn skip_instruction(&mut self, syndrome: Syndrome) {
        self.pc = self.pc.wrapping_add(if syndrome.instruction_is_32bit() { 4 } else { 2 });
    }
}

impl GuestRegisters for GuestContext {
    fn reg(&self, n: u8) -> u64 {
        GuestContext::reg(self, n)
    }
    fn set_reg(&mut self, n: u8, value: u64) {
        GuestContext::set_reg(self, n, value)
    }
    fn advance_pc(&mut self, bytes: u8) {
        self.pc = self.pc.wrapping_add(u64::from(bytes));
    }
}

/// The syndrome registers of one synchronous exit.
#[derive(Clone, Copy, Debug)]
pub struct SyncExit {
    pub syndrome: Syndrome,
    /// FAR_EL2: the faulting virtual address.
    pub far: u64,
    /// HPFAR_EL2: the faulting IPA's page (FIPA, bits [43:4] = IPA[51:12]).
    pub hpfar: u64,
}

impl SyncExit {
    pub fn fault_ipa(&self) -> Ipa {
        Ipa(((self.hpfar & 0x0000_0fff_ffff_fff0) << 8) | (self.far & 0xfff))
    }
}

/// What the arch crate does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Re-enter the guest (registers and PC already updated).
    Resume,
    /// A synchronous external abort for the guest at its own EL1 vector.
    InjectAbort { instruction: bool, far: u64, write: bool },
    /// An undefined-instruction exception for the guest.
    InjectUndefined,
    /// A PSCI or VM call the VM layer carries out: the guest's registers still hold it
    /// (`smccc::decode` of their call arguments says which); the PC is already past the call.
    /// Not carried here, so an outcome fits in two registers.
    Call,
    /// WFI: the vCPU waits for an interrupt.
    WaitForInterrupt,
    /// Set/way cache maintenance (hyp_core::set_way says what to do). The PC is still at the
    /// instruction: the arch crate moves past it when it completes.
    SetWay,
    /// A write of `value` to a VM control register, trapped by HCR_EL2.TVM while set/way
    /// maintenance is watched (hyp_core::set_way). The PC is still at the instruction.
    ControlWrite { register: VmControlRegister, part: RegisterPart, value: u64 },
    /// A write of `value` to ICC_SGI1R_EL1, ICC_ASGI1R_EL1 or ICC_SGI0R_EL1: generate the
    /// SGIs, then resume (the PC is already past the instruction).
    GenerateSgi { register: SgiGenerationRegister, value: u64 },
    /// A write of `value` to ICC_DIR_EL1: the vGIC deactivates the interrupt it names, then
    /// resume (the PC is already past the instruction).
    Deactivate { value: u64 },
    /// A debug register of the vCPU (`SysRegEnv::debug_registers`) was written: the
    /// hardware's debug registers follow it, then resume (the PC is already past the
    /// instruction).
    DebugStateChanged,
}

/// Something a guest did that the hypervisor logs (with the VM and vCPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incident {
    UnknownHypercall {
        function: u32,
    },
    NonZeroCallImmediate {
        immediate: u16,
    },
    /// A load or store at an IPA where the VM has neither memory nor a device.
    NoMemoryOrDevice {
        ipa: Ipa,
        va: u64,
        write: bool,
    },
    /// A device refused the access (no such register, wrong width...).
    DeviceRefused {
        ipa: Ipa,
        error: MmioError,
    },
    /// An access to a device window the hardware gave no syndrome for (e.g. LDP, writeback).
    NotEmulatable {
        ipa: Ipa,
    },
    InstructionFetchOutsideMemory {
        ipa: Ipa,
    },
    /// A stage-2 abort whose IPA the hardware does not give (its fault status code).
    AbortWithoutIpa {
        va: u64,
        status: u8,
        instruction: bool,
    },
    /// MSR/MRS to a system register the hypervisor does not emulate (ISS of EC 0x18).
    SystemRegister {
        iss: u32,
    },
    /// An AArch32 MCR/MRC to a coprocessor register the hypervisor does not emulate.
    Coprocessor {
        cp: u8,
        access: CoprocessorAccess,
    },
    /// An AArch32 MCRR/MRRC to a coprocessor register the hypervisor does not emulate.
    WideCoprocessor {
        cp: u8,
        access: WideCoprocessorAccess,
    },
    UnexpectedClass {
        class: ExceptionClass,
    },
}

impl fmt::Display for Incident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownHypercall { function } => write!(f, "unknown SMCCC function {function:#010x}: returned NOT_SUPPORTED"),
            Self::NonZeroCallImmediate { immediate } => write!(f, "HVC/SMC with immediate {immediate:#x} (only #0 is defined): returned NOT_SUPPORTED"),
            Self::NoMemoryOrDevice { ipa, va, write } => write!(
                f, "{} at IPA {:#x} (VA {va:#x}): no memory or device there: external abort injected",
                if *write { "store" } else { "load" }, ipa.0
            ),
            Self::DeviceRefused { ipa, error } => write!(f, "device access at IPA {:#x} refused ({error}): external abort injected", ipa.0),
            Self::NotEmulatable { ipa } => write!(f, "device access at IPA {:#x} with no instruction syndrome (pair, writeback or SIMD access): external abort injected", ipa.0),
            Self::InstructionFetchOutsideMemory { ipa } => write!(f, "instruction fetch from IPA {:#x}, outside the VM's memory: external abort injected", ipa.0),
            Self::AbortWithoutIpa { va, status, instruction } => write!(
                f,
                "{} at VA {va:#x} faulted at stage 2 with status {status:#x} (no IPA given for it: not a translation, access flag or permission fault): external abort injected",
                if *instruction { "instruction fetch" } else { "data access" }
            ),
            Self::SystemRegister { iss } => {
                let (op0, op1, crn, crm, op2) = (iss >> 20 & 3, iss >> 14 & 7, iss >> 10 & 0xf, iss >> 1 & 0xf, iss >> 17 & 7);
                let dir = if iss & 1 != 0 { "read" } else { "write" };
                write!(f, "{dir} of system register S{op0}_{op1}_C{crn}_C{crm}_{op2}: not emulated, undefined instruction injected")
            }
            Self::Coprocessor { cp, access: a } => write!(
                f, "{} of p{cp}, {}, c{}, c{}, {}: not emulated, undefined instruction injected",
                if a.is_read { "MRC" } else { "MCR" }, a.opc1, a.crn, a.crm, a.opc2
            ),
            Self::WideCoprocessor { cp, access: a } => write!(
                f, "{} of p{cp}, {}, c{}: not emulated, undefined instruction injected",
                if a.is_read { "MRRC" } else { "MCRR" }, a.opc1, a.crm
            ),
            Self::UnexpectedClass { class } => write!(f, "trap {class} not handled: undefined instruction injected"),
        }
    }
}

/// Where the handler reports, as it happens, what a guest did that the hypervisor logs
/// (the runtime logs it with the VM and vCPU). Reported at the site rather than returned,
/// so the common answer, an outcome alone, stays small on the exit path.
pub trait IncidentLog {
    fn incident(&mut self, incident: Incident);
}

/// What the handler needs of the exiting vCPU beyond its registers and devices.
pub trait ExitEnv: SysRegEnv + IncidentLog {}
impl<T: SysRegEnv + IncidentLog> ExitEnv for T {}

/// Handles one synchronous exit of a guest running at EL1/EL0 in AArch64: decoded
/// (`trap::aarch64`), then answered (`handle`).
pub fn handle_sync(
    ctx: &mut GuestContext,
    vcpu: usize,
    exit: &SyncExit,
    mmio: &mut impl MmioDispatch,
    env: &mut impl ExitEnv,
) -> Outcome {
    handle(&trap::aarch64::decode(exit), ctx, vcpu, mmio, env)
}

/// Answers one decoded exit of vCPU `vcpu`, whatever the architecture that trapped it, over
/// its registers: a hypercall, an emulated MMIO access, a system register, a wait, or the
/// architected fault for everything else; what the guest did wrong goes to `env`'s log.
/// Meant to be inlined into each architecture's exit path (out of line, it cost a
/// hypercall 40 instructions).
#[inline(always)]
pub fn handle<R: GuestRegisters>(
    exit: &DecodedExit,
    regs: &mut R,
    vcpu: usize,
    mmio: &mut impl MmioDispatch,
    env: &mut impl ExitEnv,
) -> Outcome {
    let len = exit.instruction_bytes;
    match exit.trap {
        Trap::Call { immediate, smc } => {
            // HVC's preferred return is the next instruction; a trapped SMC's is the SMC.
            if smc {
                regs.advance_pc(len);
            }
            if immediate != 0 {
                regs.set_reg(0, smccc::NOT_SUPPORTED);
                env.incident(Incident::NonZeroCallImmediate { immediate });
                return Outcome::Resume;
            }
            let arguments = regs.call_arguments();
            // The SMC64/HVC64 calling convention is AArch64's only (DEN 0028, 2.5): from
            // AArch32 an Arm or PSCI function using it is unknown (Xen and KVM answer so).
            if R::AARCH32 {
                let function = arguments[0] as u32;
                if smccc::is_aarch64_only(function) {
                    regs.set_reg(0, smccc::NOT_SUPPORTED);
                    env.incident(Incident::UnknownHypercall { function });
                    return Outcome::Resume;
                }
                if smccc::asks_about_aarch64_only(function, arguments[1] as u32) {
                    regs.set_reg(0, smccc::NOT_SUPPORTED);
                    return Outcome::Resume;
                }
            }
            match smccc::decode(arguments) {
                Hypercall::Return(value) => {
                    regs.set_reg(0, value);
                    Outcome::Resume
                }
                Hypercall::Unknown { function } => {
                    regs.set_reg(0, smccc::NOT_SUPPORTED);
                    env.incident(Incident::UnknownHypercall { function });
                    Outcome::Resume
                }
                _ => Outcome::Call,
            }
        }
        Trap::DataAbort { ipa, va, access, write } => data_abort(regs, len, vcpu, ipa, va, access, write, mmio, env),
        Trap::AbortWithoutIpa { va, status, write, instruction } => {
            env.incident(Incident::AbortWithoutIpa { va, status, instruction });
            Outcome::InjectAbort { instruction, far: va, write }
        }
        Trap::InstructionAbort { ipa, .. } if mmio.first_touch(ipa) => Outcome::Resume,
        Trap::InstructionAbort { ipa, va } => {
            env.incident(Incident::InstructionFetchOutsideMemory { ipa });
            Outcome::InjectAbort { instruction: true, far: va, write: false }
        }
        Trap::Wait { interrupt } => {
            regs.advance_pc(len);
            if interrupt {
                Outcome::WaitForInterrupt
            } else {
                Outcome::Resume
            }
        }
        Trap::SystemRegister { access, iss } => {
            let value = regs.reg(access.rt);
            let answer = sysreg::emulate(&access, value, env);
            let undefined = Incident::SystemRegister { iss };
            system_register(answer, RegisterPart::Whole, value, access.rt, regs, len, undefined, env)
        }
        // Out of line, given the access in registers (`CoprocessorAccess::to_bits`).
        Trap::Coprocessor { cp, access } => coprocessor_access(cp, access.to_bits(), regs, len, env),
        Trap::WideCoprocessor { cp, access } => wide_coprocessor_access(cp, access.to_bits(), regs, len, env),
        Trap::ConditionFailed => {
            regs.advance_pc(len);
            Outcome::Resume
        }
        Trap::Other(class) => {
            env.incident(Incident::UnexpectedClass { class });
            Outcome::InjectUndefined
        }
    }
}

/// A trapped AArch32 MCR or MRC (`Trap::Coprocessor`), its access as `to_bits` gave it: out
/// of line, so the handler inlined into the exit path stays small (an AArch64 hypercall paid
/// for it: 155 instructions became 230).
#[cold]
#[inline(never)]
fn coprocessor_access(cp: u8, access: u64, regs: &mut impl GuestRegisters, len: u8, env: &mut impl ExitEnv) -> Outcome {
    let access = CoprocessorAccess::from_bits(access);
    let value = regs.reg(access.rt);
    let answer = coprocessor::emulate(cp, &access, value, env);
    let undefined = Incident::Coprocessor { cp, access };
    system_register(answer.action, answer.part, value, access.rt, regs, len, undefined, env)
}

/// A trapped AArch32 MCRR or MRRC (`Trap::WideCoprocessor`), as `coprocessor_access`.
#[cold]
#[inline(never)]
fn wide_coprocessor_access(
    cp: u8,
    access: u64,
    regs: &mut impl GuestRegisters,
    len: u8,
    env: &mut impl ExitEnv,
) -> Outcome {
    let access = WideCoprocessorAccess::from_bits(access);
    let answer = coprocessor::emulate_wide(cp, &access, env.features());
    if let SysRegAction::Read(value) = answer.action {
        regs.set_reg(access.rt2, value >> 32);
    }
    let value = regs.reg(access.rt2) << 32 | regs.reg(access.rt);
    let undefined = Incident::WideCoprocessor { cp, access };
    system_register(answer.action, answer.part, value, access.rt, regs, len, undefined, env)
}

/// The outcome of a trapped system register or coprocessor access whose emulation
/// answered `action`: `value` is what a write writes (into `part` of a control register),
/// `rt` the register a read fills; `undefined` is logged if the access is refused.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn system_register(
    action: SysRegAction,
    part: RegisterPart,
    value: u64,
    rt: u8,
    regs: &mut impl GuestRegisters,
    len: u8,
    undefined: Incident,
    log: &mut impl IncidentLog,
) -> Outcome {
    match action {
        SysRegAction::Read(value) => {
            regs.set_reg(rt, value);
            regs.advance_pc(len);
            Outcome::Resume
        }
        SysRegAction::WriteIgnored => {
            regs.advance_pc(len);
            Outcome::Resume
        }
        SysRegAction::SetWay => Outcome::SetWay,
        SysRegAction::ControlWrite(register) => Outcome::ControlWrite { register, part, value },
        SysRegAction::DebugStateChanged => {
            regs.advance_pc(len);
            Outcome::DebugStateChanged
        }
        SysRegAction::GenerateSgi(register) => {
            regs.advance_pc(len);
            Outcome::GenerateSgi { register, value }
        }
        SysRegAction::Deactivate => {
            regs.advance_pc(len);
            Outcome::Deactivate { value }
        }
        SysRegAction::Undefined => {
            log.incident(undefined);
            Outcome::InjectUndefined
        }
    }
}

/// A stage-2 data abort of vCPU `vcpu` at `ipa` (virtual address `va`) by an instruction of
/// `len` bytes, `access` as its syndrome gave it: the emulated access carried out over the
/// registers, RAM touched for the first time made, or the guest's abort; what the guest did
/// wrong goes to `log`. `handle`'s answer to a `Trap::DataAbort`, and the whole of an exit
/// the image's vector answers (hyp_runtime::vcpu_run::in_vector).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn data_abort(
    regs: &mut impl GuestRegisters,
    len: u8,
    vcpu: usize,
    ipa: Ipa,
    va: u64,
    access: Option<MmioAccess>,
    write: bool,
    mmio: &mut impl MmioDispatch,
    log: &mut impl IncidentLog,
) -> Outcome {
    // WnR as the abort reported it (ISS WnR is valid for every stage-2 data abort). Built
    // where it is answered: built ahead, every emulated access stored it on the stack.
    let inject = || Outcome::InjectAbort { instruction: false, far: va, write };
    let Some(access) = access else {
        log.incident(match mmio.device_name(ipa) {
            Some(_) => Incident::NotEmulatable { ipa },
            // RAM touched for the first time (a pair, a writeback or a cache maintenance
            // instruction has no syndrome): made again, the PC where it was.
            None if mmio.first_touch(ipa) => return Outcome::Resume,
            None => Incident::NoMemoryOrDevice { ipa, va, write },
        });
        return inject();
    };
    let result = if access.is_write() {
        mmio.write(vcpu, ipa, access.width(), regs.reg(access.register()))
    } else {
        mmio.read(vcpu, ipa, access.width()).map(|value| regs.set_reg(access.register(), access.load_result(value)))
    };
    match result {
        Ok(()) => {
            regs.advance_pc(len);
            Outcome::Resume
        }
        Err(MmioError::Unmapped { .. }) if mmio.first_touch(ipa) => Outcome::Resume,
        Err(MmioError::Unmapped { .. }) => {
            log.incident(Incident::NoMemoryOrDevice { ipa, va, write: access.is_write() });
            inject()
        }
        Err(error) => {
            log.incident(Incident::DeviceRefused { ipa, error });
            inject()
        }
    }
}

/// An exception delivered to the guest's EL1 (ARM ARM D1.10, "Exception entry"): the values
/// of its EL1 registers and its new PC and PSTATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct El1Exception {
    pub esr_el1: u64,
    /// FAR_EL1, for aborts.
    pub far_el1: Option<u64>,
    pub elr_el1: u64,
    pub spsr_el1: u64,
    pub pc: u64,
    pub pstate: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedException {
    /// Synchronous external abort on a data access (DFSC 0b010000), by a write or a read
    /// (ISS WnR; DFSR.WnR for an AArch32 EL1).
    DataAbort {
        far: u64,
        write: bool,
    },
    /// Synchronous external abort on an instruction fetch (IFSC 0b010000).
    InstructionAbort {
        far: u64,
    },
    Undefined,
}

/// PSTATE on exception entry to EL1: EL1h with D, A, I and F masked.
const PSTATE_EL1H_MASKED: u64 = 0x3c5;
const FSC_SYNC_EXTERNAL_ABORT: u64 = 0x10;
/// ISS.WnR of a data abort (ARM ARM D24.2.40): the access was a write.
const ISS_WNR: u64 = 6;
/// DFSR.WnR (ARM ARM G8, DFSR, both formats): the access was a write.
const DFSR_WNR: u32 = 1 << 11;

/// Computes the entry into the guest's EL1 synchronous vector for `exception`, taken from the
/// guest state in `ctx` (vector offsets: ARM ARM D1.10.2, table D1-7).
pub fn exception_to_el1(ctx: &GuestContext, vbar_el1: u64, exception: InjectedException, il: bool) -> El1Exception {
    let mode = ctx.pstate & 0x1f;
    let from_el1 = mode & 0x10 == 0 && (mode >> 2) & 0b11 == 1;
    let vector_offset = match mode {
        m if m & 0x10 != 0 => 0x600, // lower EL using AArch32
        0b0100 => 0x000,             // EL1t: current EL with SP_EL0
        0b0101 => 0x200,             // EL1h: current EL with SP_ELx
        _ => 0x400,                  // EL0t: lower EL using AArch64
    };
    let (class, iss, far) = match exception {
        InjectedException::DataAbort { far, write } => {
            (if from_el1 { 0x25 } else { 0x24 }, FSC_SYNC_EXTERNAL_ABORT | u64::from(write) << ISS_WNR, Some(far))
        }
        InjectedException::InstructionAbort { far } => {
            (if from_el1 { 0x21 } else { 0x20 }, FSC_SYNC_EXTERNAL_ABORT, Some(far))
        }
        InjectedException::Undefined => (0x00, 0, None),
    };
    // An undefined-instruction syndrome always has IL set (ESR_ELx.IL, EC 0x00).
    let il = il || class == 0;
    El1Exception {
        esr_el1: (class << 26) | (u64::from(il) << 25) | iss,
        far_el1: far,
        elr_el1: ctx.pc,
        spsr_el1: ctx.pstate,
        pc: vbar_el1.wrapping_add(vector_offset),
        pstate: PSTATE_EL1H_MASKED,
    }
}

/// An exception entry to an AArch32 guest's EL1: the mode it enters, the registers it
/// writes there, where it goes (ARM ARM G1, "Exception entry", "Exception vectors", and the
/// table of link register offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aarch32Exception {
    /// The mode taken to: Undefined or Abort.
    pub mode: u32,
    /// That mode's LR.
    pub lr: u32,
    /// That mode's SPSR: the CPSR the exception was taken from.
    pub spsr: u32,
    pub cpsr: u32,
    pub pc: u32,
    /// For an abort: its fault status and address registers.
    pub fault: Option<Aarch32Fault>,
}

/// DFSR and DFAR (a data abort) or IFSR and IFAR (a prefetch abort).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aarch32Fault {
    pub instruction: bool,
    pub status: u32,
    pub address: u32,
}

impl Aarch32Fault {
    /// FAR_EL1 (of an AArch64 EL2) with this fault's address written: DFAR is its [31:0],
    /// IFAR its [63:32].
    pub fn far_el1(&self, far_el1: u64) -> u64 {
        let part = if self.instruction { RegisterPart::High } else { RegisterPart::Low };
        part.merge(far_el1, u64::from(self.address))
    }
}

/// SCTLR.V [13] (the vectors at 0xffff0000), EE [25], TE [30].
const SCTLR_V: u32 = 1 << 13;
const SCTLR_EE: u32 = 1 << 25;
const SCTLR_TE: u32 = 1 << 30;
/// CPSR bits exception entry sets, clears or replaces: IT [26:25, 15:10], J [24], E [9],
/// A [8], I [7], T [5], M [4:0].
const CPSR_ENTRY_FIELDS: u32 = 0x0700_ffbf;

/// Computes the entry into an AArch32 EL1's vector for `exception`, from CPSR `cpsr` at
/// `pc`, with the guest's SCTLR, VBAR and TTBCR.EAE (`long_descriptors`: the fault status
/// takes the LPAE format). A synchronous external abort has status 0b010000 with LPAE
/// [9] set in the long format, 0b01000 in the short one.
pub fn exception_to_aarch32(
    cpsr: u32,
    pc: u32,
    sctlr: u32,
    vbar: u32,
    long_descriptors: bool,
    exception: InjectedException,
) -> Aarch32Exception {
    use crate::trap::aarch32::{mode, CPSR_T};
    let status = if long_descriptors { (1 << 9) | 0x10 } else { 0x08 };
    let thumb = cpsr & CPSR_T != 0;
    // (mode, vector offset, LR offset from the faulting instruction, A set, fault)
    let (m, offset, lr, mask_aborts, fault) = match exception {
        InjectedException::Undefined => (mode::UND, 0x04, if thumb { 2 } else { 4 }, false, None),
        InjectedException::InstructionAbort { far } => {
            (mode::ABT, 0x0c, 4, true, Some(Aarch32Fault { instruction: true, status, address: far as u32 }))
        }
        InjectedException::DataAbort { far, write } => {
            let status = status | if write { DFSR_WNR } else { 0 };
            (mode::ABT, 0x10, 8, true, Some(Aarch32Fault { instruction: false, status, address: far as u32 }))
        }
    };
    // VBAR[4:0] are RES0.
    let base = if sctlr & SCTLR_V != 0 { 0xffff_0000 } else { vbar & !0x1f };
    let new = m
        | (1 << 7)
        | if mask_aborts { 1 << 8 } else { cpsr & (1 << 8) }
        | if sctlr & SCTLR_EE != 0 { 1 << 9 } else { 0 }
        | if sctlr & SCTLR_TE != 0 { CPSR_T } else { 0 };
    Aarch32Exception {
        mode: m,
        lr: pc.wrapping_add(lr),
        spsr: cpsr,
        cpsr: (cpsr & !CPSR_ENTRY_FIELDS) | new,
        pc: base.wrapping_add(offset),
        fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debug_registers::DebugRegisters;
    use crate::mmio::{Locked, MmioBus, MmioDevice};
    use crate::syndrome::AccessWidth;
    use crate::sysreg::{IdRegisters, VmFeatures};
    use alloc::boxed::Box;
    use stage2::IpaRange;

    /// What the exit path's tests need of a device: two registers of a PL011 (UARTDR at 0,
    /// UARTFR at 0x18 reading TXFE | RXFE), 8- to 32-bit accesses.
    struct Uart;
    impl Uart {
        fn check(offset: u64, width: AccessWidth) -> Result<(), MmioError> {
            match (offset, width) {
                (_, AccessWidth::Doubleword) => Err(MmioError::BadWidth { offset, width }),
                (0 | 0x18, _) => Ok(()),
                _ => Err(MmioError::NoRegister { offset }),
            }
        }
    }
    impl MmioDevice for Uart {
        fn name(&self) -> &'static str {
            "uart"
        }
        fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
            Self::check(offset, width).map(|()| if offset == 0x18 { 0x90 } else { 0 })
        }
        fn write(&mut self, offset: u64, width: AccessWidth, _: u64) -> Result<(), MmioError> {
            Self::check(offset, width)
        }
    }

    struct Ids;
    impl IdRegisters for Ids {
        fn read(&self, _: crate::sysreg::Encoding) -> u64 {
            0x1111_1111_1111_1111
        }
    }
    /// The vCPU's debug registers, and what the handler logged.
    #[derive(Default)]
    struct Env(DebugRegisters, Vec<Incident>);
    impl SysRegEnv for Env {
        fn features(&self) -> VmFeatures {
            VmFeatures { gic_v3: true, ipa_bits: 40 }
        }
        fn id_registers(&self) -> &impl IdRegisters {
            &Ids
        }
        fn debug_registers(&mut self) -> &mut DebugRegisters {
            &mut self.0
        }
    }
    impl IncidentLog for Env {
        fn incident(&mut self, incident: Incident) {
            self.1.push(incident);
        }
    }

    /// `super::handle_sync`'s outcome, and the incident it logged: at most one per exit.
    fn handle_sync(
        ctx: &mut GuestContext,
        vcpu: usize,
        exit: &SyncExit,
        mmio: &mut impl MmioDispatch,
        env: &mut Env,
    ) -> (Outcome, Option<Incident>) {
        env.1.clear();
        let outcome = super::handle_sync(ctx, vcpu, exit, mmio, env);
        assert!(env.1.len() <= 1, "one exit, one incident at most: {:?}", env.1);
        (outcome, env.1.pop())
    }

    /// `super::handle`'s outcome, and the incident it logged: at most one per exit.
    fn handle(
        exit: &DecodedExit,
        regs: &mut impl GuestRegisters,
        vcpu: usize,
        mmio: &mut impl MmioDispatch,
        env: &mut Env,
    ) -> (Outcome, Option<Incident>) {
        env.1.clear();
        let outcome = super::handle(exit, regs, vcpu, mmio, env);
        assert!(env.1.len() <= 1, "one exit, one incident at most: {:?}", env.1);
        (outcome, env.1.pop())
    }

    fn bus_with_uart() -> MmioBus {
        let mut bus = MmioBus::new();
        bus.attach(IpaRange::new(Ipa(0x0900_0000), 0x1000).unwrap(), Box::new(Locked::new(Uart))).unwrap();
        bus
    }

    fn hvc(x0: u64) -> (GuestContext, SyncExit) {
        let mut ctx = GuestContext { pc: 0x4000_1004, ..Default::default() };
        ctx.x[0] = x0;
        (ctx, SyncExit { syndrome: Syndrome((0x16 << 26) | (1 << 25)), far: 0, hpfar: 0 })
    }

    /// A data abort at `ipa` for `ldr w<reg>` (or `str` when `write`) with a valid syndrome.
    fn abort(ipa: u64, reg: u64, write: bool, isv: bool) -> SyncExit {
        let iss = (u64::from(isv) << 24) | (2 << 22) | (reg << 16) | (u64::from(write) << 6) | 0x07;
        SyncExit { syndrome: Syndrome((0x24 << 26) | (1 << 25) | iss), far: ipa, hpfar: (ipa >> 12) << 4 }
    }

    #[test]
    fn psci_version_returns_1_1_and_resumes_after_the_hvc() {
        let (mut ctx, exit) = hvc(smccc::PSCI_VERSION as u64);
        assert_eq!(handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()), (Outcome::Resume, None));
        assert_eq!(ctx.x[0], 0x1_0001);
        assert_eq!(ctx.pc, 0x4000_1004, "HVC's return address is already the next instruction");
    }

    #[test]
    fn an_unknown_function_returns_not_supported_and_is_logged() {
        let (mut ctx, exit) = hvc(0xc200_1234);
        let (outcome, incident) = handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(outcome, Outcome::Resume);
        assert_eq!(incident, Some(Incident::UnknownHypercall { function: 0xc200_1234 }));
        assert_eq!(ctx.x[0] as i64, -1);
    }

    #[test]
    fn a_trapped_smc_is_skipped_and_answered_like_an_hvc() {
        let (mut ctx, mut exit) = hvc(smccc::SMCCC_VERSION as u64);
        exit.syndrome = Syndrome((0x17 << 26) | (1 << 25));
        assert_eq!(handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()).0, Outcome::Resume);
        assert_eq!((ctx.x[0], ctx.pc), (0x1_0001, 0x4000_1008));
    }

    #[test]
    fn a_non_zero_immediate_is_not_supported() {
        let (mut ctx, mut exit) = hvc(smccc::PSCI_VERSION as u64);
        exit.syndrome = Syndrome((0x16 << 26) | (1 << 25) | 0x42);
        let (_, incident) = handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(incident, Some(Incident::NonZeroCallImmediate { immediate: 0x42 }));
        assert_eq!(ctx.x[0] as i64, -1);
    }

    #[test]
    fn lifecycle_calls_go_to_the_vm_layer() {
        let (mut ctx, exit) = hvc(smccc::PSCI_SYSTEM_OFF as u64);
        assert_eq!(handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()), (Outcome::Call, None));
        assert_eq!(smccc::decode(ctx.call_arguments()), Hypercall::SystemOff, "the call stays in the registers");
    }

    #[test]
    fn uart_reads_and_writes_are_emulated_and_skip_the_instruction() {
        let mut bus = bus_with_uart();
        let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
        ctx.x[3] = b'A' as u64;
        let (outcome, incident) =
            handle_sync(&mut ctx, 0, &abort(0x0900_0000, 3, true, true), &mut bus, &mut Env::default());
        assert_eq!((outcome, incident, ctx.pc), (Outcome::Resume, None, 0x4000_0004));
        ctx.x[5] = 0xdead;
        assert_eq!(
            handle_sync(&mut ctx, 0, &abort(0x0900_0018, 5, false, true), &mut bus, &mut Env::default()).0,
            Outcome::Resume
        );
        assert_eq!(ctx.x[5], 0x90, "UARTFR: TXFE | RXFE");
    }

    #[test]
    fn a_load_from_an_unmapped_ipa_gets_an_external_abort_and_a_log_line() {
        let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
        let exit = abort(0x2000_0000, 1, false, true);
        let (outcome, incident) = handle_sync(&mut ctx, 0, &exit, &mut bus_with_uart(), &mut Env::default());
        assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: 0x2000_0000, write: false });
        assert_eq!(incident, Some(Incident::NoMemoryOrDevice { ipa: Ipa(0x2000_0000), va: 0x2000_0000, write: false }));
        assert_eq!(ctx.pc, 0x4000_0000, "the faulting instruction is not skipped");
    }

    /// HPFAR is UNKNOWN for a stage-2 fault that is not a translation, access flag or
    /// permission fault (an alignment fault a Device mapping causes, here with ISV set and
    /// HPFAR still naming the UART): nothing is emulated at whatever HPFAR holds.
    #[test]
    fn an_abort_whose_ipa_the_hardware_does_not_give_reaches_no_device() {
        for (class, instruction, status) in [(0x24, false, 0x21), (0x24, false, 0x30), (0x20, false, 0x10)] {
            let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
            ctx.x[1] = u64::from(b'!');
            let iss = (1 << 24) | (2 << 22) | (1 << 16) | (1 << 6) | status;
            let exit = SyncExit {
                syndrome: Syndrome((class << 26) | (1 << 25) | iss),
                far: 0x7000_0003,
                hpfar: 0x0900_0000 >> 8,
            };
            let write = class == 0x24;
            let (outcome, incident) = handle_sync(&mut ctx, 0, &exit, &mut bus_with_uart(), &mut Env::default());
            let instruction = instruction || class == 0x20;
            assert_eq!(outcome, Outcome::InjectAbort { instruction, far: 0x7000_0003, write }, "status {status:#x}");
            assert_eq!(
                incident,
                Some(Incident::AbortWithoutIpa { va: 0x7000_0003, status: status as u8, instruction })
            );
            assert_eq!(ctx.pc, 0x4000_0000, "not stepped: nothing was emulated");
        }
        // A translation fault with the same syndrome is the UART's store.
        let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
        let (outcome, _) =
            handle_sync(&mut ctx, 0, &abort(0x0900_0000, 1, true, true), &mut bus_with_uart(), &mut Env::default());
        assert_eq!((outcome, ctx.pc), (Outcome::Resume, 0x4000_0004));
    }

    #[test]
    fn a_refused_store_gets_an_abort_that_says_it_was_a_write() {
        let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
        for (ipa, isv) in [(0x2000_0008, true), (0x0900_0800, true), (0x0900_0000, false)] {
            let (outcome, _) =
                handle_sync(&mut ctx, 0, &abort(ipa, 1, true, isv), &mut bus_with_uart(), &mut Env::default());
            assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: ipa, write: true }, "at {ipa:#x}");
        }
    }

    /// The UART's bus, with RAM from 0x4000_0000 (32 MiB) zeroed on first touch: the
    /// blocks touched, in order.
    struct LazyRam(MmioBus, Vec<u64>);
    impl MmioDispatch for LazyRam {
        fn read(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError> {
            self.0.read(vcpu, ipa, width)
        }
        fn write(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError> {
            self.0.write(vcpu, ipa, width, value)
        }
        fn device_name(&mut self, ipa: Ipa) -> Option<&'static str> {
            self.0.device_name(ipa)
        }
        fn first_touch(&mut self, ipa: Ipa) -> bool {
            let ram = (0x4000_0000..0x4200_0000).contains(&ipa.0);
            if ram {
                self.1.push(ipa.0 & !0x1f_ffff);
            }
            ram
        }
    }

    #[test]
    fn a_first_touch_of_ram_is_made_again_whatever_the_access() {
        let mut ram = LazyRam(bus_with_uart(), Vec::new());
        let mut ctx = GuestContext { pc: 0x4000_0000, ..Default::default() };
        // A load with a syndrome, a store pair without one, an instruction fetch.
        for (exit, block) in [
            (abort(0x4020_0010, 1, false, true), 0x4020_0000),
            (abort(0x41e0_0ff8, 2, true, false), 0x41e0_0000),
            (
                SyncExit {
                    syndrome: Syndrome((0x20 << 26) | (1 << 25) | 0x07),
                    far: 0x4100_0000,
                    hpfar: (0x4100_0000 >> 12) << 4,
                },
                0x4100_0000,
            ),
        ] {
            let (outcome, incident) = handle_sync(&mut ctx, 0, &exit, &mut ram, &mut Env::default());
            assert_eq!((outcome, incident, ctx.pc), (Outcome::Resume, None, 0x4000_0000), "retried, not skipped");
            assert_eq!(ram.1.pop(), Some(block));
        }
        // Beyond RAM, or a device's register: as before.
        let (outcome, _) = handle_sync(&mut ctx, 0, &abort(0x4200_0000, 1, false, true), &mut ram, &mut Env::default());
        assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: 0x4200_0000, write: false });
        let (outcome, _) = handle_sync(&mut ctx, 0, &abort(0x0900_0800, 1, false, true), &mut ram, &mut Env::default());
        assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: 0x0900_0800, write: false });
        assert!(ram.1.is_empty(), "nothing outside RAM is taken for a first touch");
    }

    #[test]
    fn an_access_to_a_missing_register_gets_an_external_abort() {
        let mut ctx = GuestContext::default();
        let (outcome, incident) =
            handle_sync(&mut ctx, 0, &abort(0x0900_0800, 1, false, true), &mut bus_with_uart(), &mut Env::default());
        assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: 0x0900_0800, write: false });
        assert_eq!(
            incident,
            Some(Incident::DeviceRefused { ipa: Ipa(0x0900_0800), error: MmioError::NoRegister { offset: 0x800 } })
        );
    }

    #[test]
    fn a_device_access_without_syndrome_gets_an_external_abort() {
        let mut ctx = GuestContext::default();
        let (outcome, incident) =
            handle_sync(&mut ctx, 0, &abort(0x0900_0000, 1, false, false), &mut bus_with_uart(), &mut Env::default());
        assert_eq!(outcome, Outcome::InjectAbort { instruction: false, far: 0x0900_0000, write: false });
        assert_eq!(incident, Some(Incident::NotEmulatable { ipa: Ipa(0x0900_0000) }));
    }

    #[test]
    fn a_64_bit_access_to_the_uart_is_refused() {
        let mut ctx = GuestContext::default();
        let mut exit = abort(0x0900_0000, 1, false, true);
        exit.syndrome = Syndrome(exit.syndrome.0 | (3 << 22));
        let (_, incident) = handle_sync(&mut ctx, 0, &exit, &mut bus_with_uart(), &mut Env::default());
        assert_eq!(
            incident,
            Some(Incident::DeviceRefused {
                ipa: Ipa(0x0900_0000),
                error: MmioError::BadWidth { offset: 0, width: AccessWidth::Doubleword }
            })
        );
    }

    #[test]
    fn an_id_register_read_is_emulated_into_its_register() {
        let mut ctx = GuestContext { pc: 0x100, ..Default::default() };
        // MRS x3, ID_AA64PFR0_EL1.
        let iss = (3 << 20) | (3 << 5) | (4 << 1) | 1;
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        assert_eq!(handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()), (Outcome::Resume, None));
        assert_eq!(
            ctx.x[3],
            crate::sysreg::sanitised_id(
                crate::sysreg::ID_AA64PFR0_EL1,
                0x1111_1111_1111_1111,
                Env::default().features()
            )
        );
        assert_eq!(ctx.pc, 0x104);
    }

    #[test]
    fn an_sgi1r_write_generates_sgis_with_the_value_of_rt() {
        let mut ctx = GuestContext::default();
        ctx.x[2] = (1 << 24) | 0b10;
        // MSR ICC_SGI1R_EL1, x2: op0 3, op1 0, CRn 12, CRm 11, op2 5, Rt 2, write.
        let iss = (3 << 20) | (5 << 17) | (12 << 10) | (2 << 5) | (11 << 1);
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        assert_eq!(
            handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()),
            (Outcome::GenerateSgi { register: SgiGenerationRegister::Sgi1r, value: (1 << 24) | 0b10 }, None)
        );
        assert_eq!(ctx.pc, 4);
        // MSR ICC_SGI0R_EL1, x2 (op2 7) and MSR ICC_ASGI1R_EL1, x2 (op2 6) say which they were.
        for (op2, register) in [(7, SgiGenerationRegister::Sgi0r), (6, SgiGenerationRegister::Asgi1r)] {
            let exit = SyncExit {
                syndrome: Syndrome((0x18 << 26) | (1 << 25) | (iss & !(7 << 17)) | (op2 << 17)),
                far: 0,
                hpfar: 0,
            };
            let (outcome, _) = handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default());
            assert_eq!(outcome, Outcome::GenerateSgi { register, value: (1 << 24) | 0b10 });
        }
    }

    #[test]
    fn a_dir_write_is_the_vgic_s_with_the_value_of_rt() {
        let mut ctx = GuestContext::default();
        ctx.x[7] = u64::MAX;
        // MSR ICC_DIR_EL1, x7: op0 3, op1 0, CRn 12, CRm 11, op2 1, Rt 7, write.
        let iss = (3 << 20) | (1 << 17) | (12 << 10) | (7 << 5) | (11 << 1);
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        let answer = handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(
            answer,
            (Outcome::Deactivate { value: u64::MAX }, None),
            "all ones: the vGIC takes the INTID's bits"
        );
        assert_eq!(ctx.pc, 4);
        // A read (Direction 1): ICC_DIR_EL1 is write-only.
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss | 1), far: 0, hpfar: 0 };
        assert_eq!(
            handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()).0,
            Outcome::InjectUndefined
        );
    }

    #[test]
    fn set_way_maintenance_and_control_writes_leave_the_pc_to_the_set_way_emulation() {
        let mut ctx = GuestContext::default();
        // DC CISW, x0: op0 1, op1 0, CRn 7, CRm 14, op2 2, write.
        let iss = (1 << 20) | (2 << 17) | (7 << 10) | (14 << 1);
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        assert_eq!(handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()), (Outcome::SetWay, None));
        assert_eq!(ctx.pc, 0, "the instruction completes when its clean is done");
        // MSR SCTLR_EL1, x3 (trapped by HCR_EL2.TVM).
        ctx.x[3] = 0x30d0_0805;
        let iss = (3 << 20) | (1 << 10) | (3 << 5);
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        assert_eq!(
            handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()),
            (
                Outcome::ControlWrite {
                    register: VmControlRegister::Sctlr,
                    part: RegisterPart::Whole,
                    value: 0x30d0_0805
                },
                None
            )
        );
        assert_eq!(ctx.pc, 0);
    }

    #[test]
    fn debug_registers_are_the_vcpus_own_copy() {
        // MSR/MRS DBGBVR<n>_EL1, x<rt>: op0 2, op1 0, CRn 0, CRm n, op2 4.
        let bvr = |n: u64, rt: u64, read: bool| SyncExit {
            syndrome: Syndrome(
                (0x18 << 26) | (1 << 25) | (2 << 20) | (4 << 17) | (n << 1) | (rt << 5) | u64::from(read),
            ),
            far: 0,
            hpfar: 0,
        };
        let mut env = Env::default();
        let mut ctx = GuestContext::default();
        ctx.x[4] = 0x4000_1000;
        assert_eq!(
            handle_sync(&mut ctx, 0, &bvr(1, 4, false), &mut MmioBus::new(), &mut env),
            (Outcome::DebugStateChanged, None)
        );
        assert_eq!((env.0.bvr[1], ctx.pc), (0x4000_1000, 4));
        assert_eq!(handle_sync(&mut ctx, 0, &bvr(1, 5, true), &mut MmioBus::new(), &mut env), (Outcome::Resume, None));
        assert_eq!((ctx.x[5], ctx.pc), (0x4000_1000, 8));
        // ID_AA64DFR0_EL1 reads 0x..1111 here: BRPs = 1, so two breakpoints and no DBGBVR2.
        let (outcome, incident) = handle_sync(&mut ctx, 0, &bvr(2, 4, false), &mut MmioBus::new(), &mut env);
        assert_eq!(outcome, Outcome::InjectUndefined);
        assert!(matches!(incident, Some(Incident::SystemRegister { .. })));
        assert_eq!(ctx.pc, 8, "an undefined instruction is not skipped");
    }

    #[test]
    fn untrapped_classes_and_system_registers_get_undefined() {
        let mut ctx = GuestContext::default();
        // MRS of PMCCNTR_EL0 (op0 3, op1 3, CRn 9, CRm 13, op2 0).
        let iss = (3 << 20) | (3 << 14) | (9 << 10) | (13 << 1) | 1;
        let exit = SyncExit { syndrome: Syndrome((0x18 << 26) | (1 << 25) | iss), far: 0, hpfar: 0 };
        let (outcome, incident) = handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(outcome, Outcome::InjectUndefined);
        assert!(matches!(incident, Some(Incident::SystemRegister { .. })));
        let exit = SyncExit { syndrome: Syndrome(0x07 << 26), far: 0, hpfar: 0 };
        assert_eq!(
            handle_sync(&mut ctx, 0, &exit, &mut MmioBus::new(), &mut Env::default()).0,
            Outcome::InjectUndefined
        );
    }

    #[test]
    fn wfi_waits_and_wfe_resumes() {
        let mut ctx = GuestContext::default();
        let wfi = SyncExit { syndrome: Syndrome((0x01 << 26) | (1 << 25)), far: 0, hpfar: 0 };
        assert_eq!(
            handle_sync(&mut ctx, 0, &wfi, &mut MmioBus::new(), &mut Env::default()).0,
            Outcome::WaitForInterrupt
        );
        let wfe = SyncExit { syndrome: Syndrome((0x01 << 26) | (1 << 25) | 1), far: 0, hpfar: 0 };
        assert_eq!(handle_sync(&mut ctx, 0, &wfe, &mut MmioBus::new(), &mut Env::default()).0, Outcome::Resume);
        assert_eq!(ctx.pc, 8);
    }

    #[test]
    fn fault_ipa_combines_hpfar_page_and_far_offset() {
        let exit = SyncExit { syndrome: Syndrome(0), far: 0xffff_0000_1234_5678, hpfar: (0x12_3456_7000 >> 12) << 4 };
        assert_eq!(exit.fault_ipa(), Ipa(0x12_3456_7678));
    }

    #[test]
    fn an_abort_from_el1h_enters_the_current_el_spx_vector() {
        let ctx = GuestContext { pc: 0x4000_2000, pstate: 0x3c5, ..Default::default() };
        let e =
            exception_to_el1(&ctx, 0x4000_0800, InjectedException::DataAbort { far: 0x2000_0000, write: false }, true);
        assert_eq!(e.esr_el1, (0x25 << 26) | (1 << 25) | 0x10);
        let store = InjectedException::DataAbort { far: 0x2000_0000, write: true };
        assert_eq!(
            exception_to_el1(&ctx, 0x4000_0800, store, true).esr_el1,
            (0x25 << 26) | (1 << 25) | (1 << 6) | 0x10,
            "WnR"
        );
        assert_eq!(e.far_el1, Some(0x2000_0000));
        assert_eq!((e.elr_el1, e.spsr_el1), (0x4000_2000, 0x3c5));
        assert_eq!((e.pc, e.pstate), (0x4000_0a00, 0x3c5));
    }

    #[test]
    fn vector_offsets_follow_the_mode_the_exception_came_from() {
        let at = |pstate| {
            exception_to_el1(&GuestContext { pstate, ..Default::default() }, 0, InjectedException::Undefined, false)
        };
        assert_eq!(at(0b0100).pc, 0x000);
        assert_eq!(at(0b0101).pc, 0x200);
        assert_eq!(at(0b0000).pc, 0x400);
        assert_eq!(at(0b10000).pc, 0x600);
        assert_eq!(at(0b0000).esr_el1, 1 << 25, "EC 0 with IL");
        let from_el0 =
            exception_to_el1(&GuestContext::default(), 0, InjectedException::InstructionAbort { far: 4 }, true);
        assert_eq!(from_el0.esr_el1 >> 26, 0x20);
    }

    #[test]
    fn an_aarch32_guest_gets_the_same_answers_through_its_own_decoder() {
        use crate::trap::aarch32::{decode, HypExit, Registers};
        let mut regs = Registers { pc: 0x8000, ..Default::default() };
        regs.r[0] = smccc::PSCI_VERSION;
        let hvc = decode(&HypExit { hsr: (0x12 << 26) | (1 << 25), far: 0, hpfar: 0, cpsr: 0x13, aarch64_view: false });
        let answer = handle(&hvc, &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(answer, (Outcome::Resume, None));
        assert_eq!(u64::from(regs.r[0]), smccc::PSCI_VERSION_1_1, "r0 holds the version");
        assert_eq!(regs.pc, 0x8000, "an HVC's return address is past it already");
        // A word store of r2 to the UART's data register, through the emulated PL011.
        regs.r[2] = u32::from(b'x');
        // ISV, word, r2, a write; a translation fault at level 3.
        let iss = (1 << 24) | (2 << 22) | (2 << 16) | (1 << 6) | 0x07;
        let store = decode(&HypExit {
            hsr: (0x24 << 26) | (1 << 25) | iss,
            far: 0x0900_0000,
            hpfar: 0x0900_0000 >> 8,
            cpsr: 0x13,
            aarch64_view: false,
        });
        assert_eq!(handle(&store, &mut regs, 0, &mut bus_with_uart(), &mut Env::default()), (Outcome::Resume, None));
        assert_eq!(regs.pc, 0x8004, "the store completed");
        // SCTLR read (never trapped, so not emulated): an undefined instruction and a line
        // naming it.
        let mrc = |iss: u32| {
            decode(&HypExit { hsr: (0x03 << 26) | (1 << 25) | iss, far: 0, hpfar: 0, cpsr: 0x13, aarch64_view: false })
        };
        let (outcome, incident) =
            handle(&mrc((1 << 10) | (2 << 5) | 1), &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(outcome, Outcome::InjectUndefined);
        let line = alloc::format!("{}", incident.unwrap());
        assert_eq!(line, "MRC of p15, 0, c1, c0, 0: not emulated, undefined instruction injected");
        // ACTLR read into r2: zero, and the MRC completes.
        regs.r[2] = 7;
        let (outcome, incident) =
            handle(&mrc((1 << 17) | (1 << 10) | (2 << 5) | 1), &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!((outcome, incident, regs.r[2], regs.pc), (Outcome::Resume, None, 0, 0x8008));
        // MCRR p15, 0, r4, r5, c2 (TTBR0) while watched: the whole register, Rt2:Rt.
        (regs.r[4], regs.r[5]) = (0x8000_4000, 0x0100);
        let mcrr = decode(&HypExit {
            hsr: (0x04 << 26) | (1 << 25) | (5 << 10) | (4 << 5) | (2 << 1),
            far: 0,
            hpfar: 0,
            cpsr: 0x13,
            aarch64_view: false,
        });
        let (outcome, _) = handle(&mcrr, &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        let ttbr0 = Outcome::ControlWrite {
            register: VmControlRegister::Ttbr0,
            part: RegisterPart::Whole,
            value: 0x100_8000_4000,
        };
        assert_eq!(outcome, ttbr0);
        assert_eq!(regs.pc, 0x8008, "the write completes when the set/way emulation says");
    }

    #[test]
    fn an_aarch32_guest_takes_an_injected_exception_at_its_own_vector() {
        use crate::trap::aarch32::{mode, CPSR_T};
        // From SVC in A32 with flags NZ set, IRQs unmasked, VBAR 0xc000_8000.
        let cpsr = 0xc000_0000 | mode::SVC;
        let undef = exception_to_aarch32(cpsr, 0x8000_1000, 0, 0xc000_8000, false, InjectedException::Undefined);
        assert_eq!(
            undef,
            Aarch32Exception {
                mode: mode::UND,
                lr: 0x8000_1004,
                spsr: cpsr,
                cpsr: 0xc000_0000 | (1 << 7) | mode::UND,
                pc: 0xc000_8004,
                fault: None
            }
        );
        // From T32 in an IT block (IT = 0x08): LR + 2, IT cleared; SCTLR.TE: the handler is T32.
        let t32 = cpsr | CPSR_T | (0b10 << 10);
        let undef = exception_to_aarch32(t32, 0x8000_1000, 1 << 30, 0, false, InjectedException::Undefined);
        assert_eq!((undef.lr, undef.cpsr & 0x0600_fc00, undef.cpsr & CPSR_T), (0x8000_1002, 0, CPSR_T));
        // A data abort with the vectors high (SCTLR.V) and LPAE descriptors: A masked too.
        let dabt = exception_to_aarch32(
            cpsr,
            0x8000_1000,
            1 << 13,
            0,
            true,
            InjectedException::DataAbort { far: 0x0a00_0000, write: false },
        );
        assert_eq!((dabt.mode, dabt.lr, dabt.pc), (mode::ABT, 0x8000_1008, 0xffff_0010));
        assert_eq!(dabt.cpsr & 0x1ff, (1 << 8) | (1 << 7) | mode::ABT);
        assert_eq!(dabt.fault, Some(Aarch32Fault { instruction: false, status: 0x210, address: 0x0a00_0000 }));
        // A store's abort, short descriptors: DFSR.WnR set.
        let store = InjectedException::DataAbort { far: 0x0a00_0000, write: true };
        let dabt_store = exception_to_aarch32(cpsr, 0x8000_1000, 0, 0, false, store);
        assert_eq!(dabt_store.fault.map(|f| f.status), Some((1 << 11) | 0x08));
        // A prefetch abort, short descriptors: IFSR's synchronous external abort.
        let pabt = exception_to_aarch32(cpsr, 0x4000, 0, 0, false, InjectedException::InstructionAbort { far: 0x4000 });
        assert_eq!((pabt.lr, pabt.pc), (0x4004, 0x0c));
        assert_eq!(pabt.fault, Some(Aarch32Fault { instruction: true, status: 0x08, address: 0x4000 }));
        // In an AArch64 EL2's FAR_EL1: IFAR is the high half, DFAR the low.
        assert_eq!(pabt.fault.unwrap().far_el1(0x1_2345_6789), 0x4000_2345_6789);
        assert_eq!(dabt.fault.unwrap().far_el1(0x1_2345_6789), 0x1_0a00_0000);
    }

    /// The SMC64/HVC64 convention is AArch64's only (DEN 0028, 2.5): an AArch32 guest's
    /// CPU_ON_64 is an unknown function, in its own registers or in an ARMv8 hypervisor's
    /// AArch64 frame; its CPU_ON_32 and HYP_VM_EXIT (the project's, owner 6), and an AArch64
    /// guest's CPU_ON_64, are calls. PSCI_FEATURES and SMCCC_ARCH_FEATURES say the same.
    #[test]
    fn an_smc64_function_from_aarch32_is_unknown() {
        use crate::trap::aarch32::{decode, Aarch32View, HypExit, Registers};
        let on_64 = smccc::PSCI_CPU_ON_64;
        let unknown = (Outcome::Resume, Some(Incident::UnknownHypercall { function: on_64 }));
        let hvc32 = |aarch64_view| {
            decode(&HypExit { hsr: (0x12 << 26) | (1 << 25), far: 0, hpfar: 0, cpsr: 0x13, aarch64_view })
        };
        let mut regs = Registers::default();
        regs.r[0] = on_64;
        assert_eq!(handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default()), unknown);
        assert_eq!(regs.r[0], u32::MAX, "NOT_SUPPORTED in r0");
        regs.r[0] = smccc::PSCI_CPU_ON_32;
        assert_eq!(handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default()).0, Outcome::Call);
        // The project's own call is not the architecture's: an AArch32 test guest ends with it.
        regs.r[0] = smccc::HYP_VM_EXIT;
        assert_eq!(
            handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default()),
            (Outcome::Call, None)
        );
        // SMCCC_VERSION with bit 30 set is an Arm-architecture SMC64 identifier.
        regs.r[0] = smccc::SMCCC_VERSION | 1 << 30;
        let answer = handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(
            answer,
            (Outcome::Resume, Some(Incident::UnknownHypercall { function: smccc::SMCCC_VERSION | 1 << 30 }))
        );
        assert_eq!(regs.r[0], u32::MAX);
        let mut ctx = GuestContext::default();
        ctx.x[0] = u64::from(on_64);
        let answer = handle(&hvc32(true), &mut Aarch32View(&mut ctx), 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!((answer, ctx.x[0]), (unknown, 0xffff_ffff));
        let mut ctx = GuestContext::default();
        ctx.x[0] = u64::from(on_64);
        let hvc64 = DecodedExit { trap: Trap::Call { immediate: 0, smc: false }, instruction_bytes: 4 };
        assert_eq!(handle(&hvc64, &mut ctx, 0, &mut MmioBus::new(), &mut Env::default()).0, Outcome::Call);
        // Whether CPU_ON_64 is implemented: not for an AArch32 caller, which cannot call it
        // (and asking is no incident); CPU_ON_32 is; for an AArch64 caller both are.
        for (queried, aarch32, aarch64) in [(on_64, u32::MAX, 0u32), (smccc::PSCI_CPU_ON_32, 0, 0)] {
            regs.r[..2].copy_from_slice(&[smccc::PSCI_FEATURES, queried]);
            let answer = handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
            assert_eq!((answer, regs.r[0]), ((Outcome::Resume, None), aarch32), "PSCI_FEATURES({queried:#x}), AArch32");
            ctx.x[..2].copy_from_slice(&[u64::from(smccc::PSCI_FEATURES), u64::from(queried)]);
            let answer = handle(&hvc64, &mut ctx, 0, &mut MmioBus::new(), &mut Env::default());
            assert_eq!(
                (answer, ctx.x[0]),
                ((Outcome::Resume, None), u64::from(aarch64)),
                "PSCI_FEATURES({queried:#x})"
            );
        }
        regs.r[..2].copy_from_slice(&[smccc::SMCCC_ARCH_FEATURES, smccc::SMCCC_ARCH_FEATURES | 1 << 30]);
        let answer = handle(&hvc32(false), &mut regs, 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!((answer, regs.r[0]), ((Outcome::Resume, None), u32::MAX), "SMCCC_ARCH_FEATURES of an SMC64 ID");
    }

    #[test]
    fn an_aarch32_guest_in_an_aarch64_frame_reads_an_id_register_into_its_banked_lr() {
        use crate::trap::aarch32::{decode, Aarch32View, HypExit};
        // MRC p15, 0, lr, c0, c1, 4 (ID_MMFR0) from Supervisor mode, as a Linux guest does:
        // ESR_EL2 names LR_svc as x18.
        let mut ctx = GuestContext { pc: 0xc120_43c4, pstate: 0x6000_01d3, ..Default::default() };
        ctx.x[14] = 0xdead;
        let exit = decode(&HypExit { hsr: 0x0fe8_0243, far: 0, hpfar: 0, cpsr: 0x6000_01d3, aarch64_view: true });
        let answer = handle(&exit, &mut Aarch32View(&mut ctx), 0, &mut MmioBus::new(), &mut Env::default());
        assert_eq!(answer, (Outcome::Resume, None));
        assert_eq!((ctx.x[18], ctx.x[14], ctx.pc), (0x1111_1111, 0xdead, 0xc120_43c8), "LR_svc is X18");
    }
}
