//! The physical CPUs as both ARM images keep them: what each CPU keeps of its own
//! (`PerCpu`, which the image's per-CPU register points at: TPIDR_EL2 on AArch64, HTPIDR in
//! HYP mode), which CPU this is, what a started CPU reads with its MMU off (its stack, the
//! MMU's registers, its index: `CpuStarts`), and where CPUs that the board releases all
//! alike wait to be let through one by one (`Pen`). Which CPUs are online, and their
//! boot-time work, is the runtime's (hyp_runtime::cpus).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use hyp_core::platform::{Platform, MAX_CPUS};
use vgic::ControlWords;

/// The affinity fields of an MPIDR (Aff3 on AArch64, Aff2..Aff0): what the device tree's
/// `reg` of a CPU holds.
pub const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// What one CPU keeps of its own. The image's per-CPU register points at its entry in
/// `PER_CPU` from the time it is online, so finding it takes one register read.
#[repr(C)]
pub struct PerCpu {
    /// The guest registers of the vCPU this CPU is running: the guest exit path stores the
    /// guest's registers there (the images' exception code relies on it being the first
    /// field).
    pub guest: AtomicUsize,
    /// Its MPIDR affinity, as the device tree listed it.
    mpidr: AtomicUsize,
    /// What the exception vector needs to answer the running vCPU's calls itself.
    pub vector_calls: VectorCalls,
}

/// The running vCPU's state that the image's exception vector reads to answer a hypercall
/// without leaving it (hyp_core::smccc::answered_in_vector; docs/hypercalls.md, "Answered
/// in the vector"), loaded with the vCPU and after each call the handler answered.
#[repr(C)]
pub struct VectorCalls {
    /// The function the vCPU was last told was unknown
    /// (hyp_core::smccc::vector_unknown_word).
    pub unknown: AtomicU64,
    /// The address of the vCPU's counter of HVC exits, which the vector increments
    /// (hyp_core::exit_stats::ExitCounts::class_counter).
    pub hvc_exits: AtomicPtr<AtomicU64>,
    /// The same for its data aborts: the vector answers a word load of the distributor's
    /// control words.
    pub abort_exits: AtomicPtr<AtomicU64>,
    /// The VM's copy of its distributor's control words, from which the vector answers
    /// that load (vgic::ControlWords).
    pub control_words: AtomicPtr<ControlWords>,
    /// Non-zero while the vCPU holds list registers: the vector answers no call and offers
    /// no data abort then, so that those exits reach the run loop, which samples their level
    /// interrupts' lines (an SGI it still offers: hyp_runtime::vcpu_run::in_vector).
    pub list_registers_in_use: AtomicU64,
    /// The run loop's `hyp_runtime::vcpu_run::InVector` for the guest running on this CPU,
    /// through which the vector answers its exits: the AArch64 image's `enter_guest` stores
    /// it at each entry, valid until the guest exits to the run loop.
    pub in_vector: AtomicPtr<()>,
    /// What the vector posts the vCPU's SGIs with (`SgiPosting`): the VM's vGIC, if its
    /// guest writes ICC_SGI1R_EL1 (`sgi1r_vgic`) or GICD_SGIR (`sgir_vgic`) and the vector
    /// posts them (null otherwise), the vCPU's counter of the exits they are, the vCPU, this
    /// CPU, the first of the CPUs' kick targets and, on a GICv2, the board's GICD_SGIR.
    pub sgi1r_vgic: AtomicPtr<()>,
    pub sgir_vgic: AtomicPtr<()>,
    pub sgi_exits: AtomicPtr<AtomicU64>,
    pub sgi_vcpu: AtomicU64,
    pub sgi_cpu: AtomicU64,
    pub sgi_kick_targets: AtomicPtr<AtomicU64>,
    pub sgi_board_sgir: AtomicUsize,
    /// What the vector takes a kick with itself (`KickInVector`; docs/vgic.md, "The same
    /// SGI shown again in the vector"): the code that does (0: every kick goes to the run
    /// loop), the vCPU's counter of kicks, the VM's `ending` and `device_work` flags, the
    /// empty status (ICH_ELRSR_EL2 or GICH_ELRSR0) of every implemented list register, and
    /// on a GICv2 its CPU interface and list-register frames. The VM's vGIC is the one its
    /// SGIs are posted with (`sgi1r_vgic`, `sgir_vgic`): a kick is taken only for a vCPU
    /// that posts.
    pub kick_entry: AtomicUsize,
    pub kick_gicc: AtomicUsize,
    pub kick_gich: AtomicUsize,
    pub kick_exits: AtomicPtr<AtomicU64>,
    pub kick_ending: AtomicPtr<AtomicBool>,
    pub kick_device_work: AtomicPtr<AtomicBool>,
    pub kick_all_empty: AtomicU64,
    /// The list register the vector may write again and its value (value 0: none), as the
    /// run loop last published them (hyp_runtime::vcpu_run's `vector_list_registers`).
    pub again_lr: AtomicU64,
    pub again_value: AtomicU64,
    /// An interrupt the vector acknowledged and left to the run loop (ICC_IAR1_EL1's value
    /// with bit 32 set; 0: none), which the next acknowledgement returns before it reads the
    /// GIC.
    pub acknowledged: AtomicU64,
}

/// What the AArch64 vector needs to take a kick for a posted SGI itself (`VectorCalls`'
/// `kick_*`), beside the vCPU's `SgiPosting`: the vCPU's counter of kicks, the flags the
/// run loop checks before each entry, and the empty status of a full set of list registers.
#[derive(Clone, Copy)]
pub struct KickInVector<'a> {
    pub entry: usize,
    /// A GICv2's GICC and GICH frames.
    pub gicv2: Option<(usize, usize)>,
    pub exits: &'a AtomicU64,
    pub ending: &'a AtomicBool,
    pub device_work: &'a AtomicBool,
    pub all_empty: u64,
}

/// What the AArch64 vector needs to post a vCPU's SGI to another vCPU itself
/// (hyp_runtime::shared_vgic::VgicHandle::post_sgi, docs/vgic.md "Posted SGIs"): the VM's
/// `VgicHandle`, which outlives the vCPU's stay on the CPU, whether its guest writes
/// ICC_SGI1R_EL1 (a GICv3) or GICD_SGIR (a GICv2), the counter of those exits, which vCPU
/// and CPU this is, and each CPU's SGI target fields with, on a GICv2, the board's
/// GICD_SGIR (hyp_arch_arm::gic::Gic::kick_targets) to kick the target's.
#[derive(Clone, Copy)]
pub struct SgiPosting<'a> {
    pub vgic: *const (),
    pub gicd_sgir: bool,
    pub exits: &'a AtomicU64,
    pub vcpu: usize,
    pub cpu: usize,
    pub kick_targets: &'a [AtomicU64; MAX_CPUS],
    pub board_sgir: Option<usize>,
}

/// What the vector counts into while no vCPU is loaded: nothing reads it.
static NO_VCPU_EXITS: AtomicU64 = AtomicU64::new(0);
/// What it would answer from while no vCPU is loaded: no guest runs then.
static NO_CONTROL_WORDS: ControlWords = ControlWords::zero();
/// The flags it would check while no vCPU is loaded: it takes no kick then.
static NO_FLAG: AtomicBool = AtomicBool::new(true);

impl VectorCalls {
    /// No vCPU loaded: the vector answers nothing and takes no kick.
    pub const fn unloaded() -> VectorCalls {
        VectorCalls {
            unknown: AtomicU64::new(1 << 32),
            hvc_exits: AtomicPtr::new(core::ptr::from_ref(&NO_VCPU_EXITS).cast_mut()),
            abort_exits: AtomicPtr::new(core::ptr::from_ref(&NO_VCPU_EXITS).cast_mut()),
            control_words: AtomicPtr::new(core::ptr::from_ref(&NO_CONTROL_WORDS).cast_mut()),
            list_registers_in_use: AtomicU64::new(0),
            in_vector: AtomicPtr::new(core::ptr::null_mut()),
            sgi1r_vgic: AtomicPtr::new(core::ptr::null_mut()),
            sgir_vgic: AtomicPtr::new(core::ptr::null_mut()),
            sgi_exits: AtomicPtr::new(core::ptr::from_ref(&NO_VCPU_EXITS).cast_mut()),
            sgi_vcpu: AtomicU64::new(0),
            sgi_cpu: AtomicU64::new(0),
            sgi_kick_targets: AtomicPtr::new(core::ptr::null_mut()),
            sgi_board_sgir: AtomicUsize::new(0),
            kick_entry: AtomicUsize::new(0),
            kick_gicc: AtomicUsize::new(0),
            kick_gich: AtomicUsize::new(0),
            kick_exits: AtomicPtr::new(core::ptr::from_ref(&NO_VCPU_EXITS).cast_mut()),
            kick_ending: AtomicPtr::new(core::ptr::from_ref(&NO_FLAG).cast_mut()),
            kick_device_work: AtomicPtr::new(core::ptr::from_ref(&NO_FLAG).cast_mut()),
            kick_all_empty: AtomicU64::new(0),
            again_lr: AtomicU64::new(0),
            again_value: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
        }
    }

    /// The vCPU now on this CPU: its last unknown function, its HVC and data abort exit
    /// counters, its VM's control words and what it posts SGIs with, if it does, which must
    /// outlive its stay here (`unload` ends it).
    pub fn load(
        &self,
        exits: [&AtomicU64; 2],
        control_words: &ControlWords,
        last_unknown: Option<u32>,
        posting: Option<SgiPosting<'_>>,
        kick: Option<KickInVector<'_>>,
    ) {
        let [hvc_exits, abort_exits] = exits;
        self.unknown.store(hyp_core::smccc::vector_unknown_word(last_unknown), Ordering::Relaxed);
        self.hvc_exits.store(core::ptr::from_ref(hvc_exits).cast_mut(), Ordering::Relaxed);
        self.abort_exits.store(core::ptr::from_ref(abort_exits).cast_mut(), Ordering::Relaxed);
        self.control_words.store(core::ptr::from_ref(control_words).cast_mut(), Ordering::Relaxed);
        self.list_registers(false, None);
        let none = core::ptr::null();
        let (sgi1r, sgir, exits, targets) = match posting {
            Some(p) => {
                self.sgi_vcpu.store(p.vcpu as u64, Ordering::Relaxed);
                self.sgi_cpu.store(p.cpu as u64, Ordering::Relaxed);
                self.sgi_board_sgir.store(p.board_sgir.unwrap_or(0), Ordering::Relaxed);
                let (sgi1r, sgir) = if p.gicd_sgir { (none, p.vgic) } else { (p.vgic, none) };
                (sgi1r, sgir, p.exits, p.kick_targets.as_ptr())
            }
            None => (none, none, &NO_VCPU_EXITS, none.cast()),
        };
        self.sgi_exits.store(core::ptr::from_ref(exits).cast_mut(), Ordering::Relaxed);
        self.sgi_kick_targets.store(targets.cast_mut(), Ordering::Relaxed);
        self.sgi1r_vgic.store(sgi1r.cast_mut(), Ordering::Relaxed);
        self.sgir_vgic.store(sgir.cast_mut(), Ordering::Relaxed);
        // `acknowledged` is left as it is: the run loop takes it at the exit that left it.
        let (entry, (gicc, gich)) = kick.map_or((0, (0, 0)), |k| (k.entry, k.gicv2.unwrap_or((0, 0))));
        self.kick_gicc.store(gicc, Ordering::Relaxed);
        self.kick_gich.store(gich, Ordering::Relaxed);
        let (exits, ending, device_work, all_empty) = match kick {
            Some(k) => (k.exits, k.ending, k.device_work, k.all_empty),
            None => (&NO_VCPU_EXITS, &NO_FLAG, &NO_FLAG, 0),
        };
        self.kick_exits.store(core::ptr::from_ref(exits).cast_mut(), Ordering::Relaxed);
        self.kick_ending.store(core::ptr::from_ref(ending).cast_mut(), Ordering::Relaxed);
        self.kick_device_work.store(core::ptr::from_ref(device_work).cast_mut(), Ordering::Relaxed);
        self.kick_all_empty.store(all_empty, Ordering::Relaxed);
        self.kick_entry.store(entry, Ordering::Relaxed);
    }

    /// Whether the vCPU now holds list registers, and the one the vector may write again
    /// (the run loop's plan before an entry, or a take-back after an exit).
    pub fn list_registers(&self, in_use: bool, again: Option<(usize, u64)>) {
        self.list_registers_in_use.store(u64::from(in_use), Ordering::Relaxed);
        let (n, value) = again.unwrap_or((0, 0));
        self.again_lr.store(n as u64, Ordering::Relaxed);
        self.again_value.store(value, Ordering::Relaxed);
    }

    /// An interrupt the vector acknowledged and left to the run loop, taken (once). The
    /// image looks at `acknowledged` before it calls this (`left_by_vector`).
    pub fn take_acknowledged(&self) -> Option<u32> {
        let left = self.acknowledged.swap(0, Ordering::Relaxed);
        (left != 0).then_some(left as u32)
    }

    /// The vCPU on this CPU was just told `function` is unknown.
    pub fn remember_unknown(&self, function: u32) {
        self.unknown.store(hyp_core::smccc::vector_unknown_word(Some(function)), Ordering::Relaxed);
    }

    /// No vCPU on this CPU: the vector answers nothing from the one that left.
    pub fn unload(&self) {
        self.load([&NO_VCPU_EXITS; 2], &NO_CONTROL_WORDS, None, None, None);
    }
}

pub static PER_CPU: [PerCpu; MAX_CPUS] = [const {
    PerCpu { guest: AtomicUsize::new(0), mpidr: AtomicUsize::new(usize::MAX), vector_calls: VectorCalls::unloaded() }
}; MAX_CPUS];

const _: () = assert!(core::mem::offset_of!(PerCpu, guest) == 0);
/// Where the AArch64 image's vector finds `VectorCalls` (hyp-arch-armv8's exceptions.rs).
pub const VECTOR_CALLS_UNKNOWN: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, unknown);
pub const VECTOR_CALLS_HVC_EXITS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, hvc_exits);
pub const VECTOR_CALLS_ABORT_EXITS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, abort_exits);
pub const VECTOR_CALLS_CONTROL_WORDS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, control_words);
pub const VECTOR_CALLS_LISTS_IN_USE: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, list_registers_in_use);
pub const VECTOR_CALLS_IN_VECTOR: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, in_vector);
pub const VECTOR_CALLS_SGI1R_VGIC: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi1r_vgic);
pub const VECTOR_CALLS_SGIR_VGIC: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgir_vgic);
pub const VECTOR_CALLS_SGI_BOARD_SGIR: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi_board_sgir);
pub const VECTOR_CALLS_SGI_EXITS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi_exits);
pub const VECTOR_CALLS_SGI_VCPU: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi_vcpu);
pub const VECTOR_CALLS_SGI_CPU: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi_cpu);
pub const VECTOR_CALLS_KICK_ENTRY: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_entry);
pub const VECTOR_CALLS_KICK_GICC: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_gicc);
pub const VECTOR_CALLS_KICK_GICH: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_gich);
pub const VECTOR_CALLS_KICK_EXITS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_exits);
pub const VECTOR_CALLS_KICK_ENDING: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_ending);
pub const VECTOR_CALLS_KICK_DEVICE_WORK: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_device_work);
pub const VECTOR_CALLS_KICK_ALL_EMPTY: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, kick_all_empty);
pub const VECTOR_CALLS_AGAIN_LR: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, again_lr);
pub const VECTOR_CALLS_AGAIN_VALUE: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, again_value);
pub const VECTOR_CALLS_ACKNOWLEDGED: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, acknowledged);
pub const VECTOR_CALLS_SGI_KICK_TARGETS: usize =
    core::mem::offset_of!(PerCpu, vector_calls) + core::mem::offset_of!(VectorCalls, sgi_kick_targets);

/// This CPU's index in the device tree's CPU list: from the per-CPU register's value `entry`
/// once it is online (an address in `PER_CPU`: a subtraction and a division by a constant,
/// no memory access), by its MPIDR affinity before (`by_mpidr`, out of line: an exit or a
/// kick never searches the table).
#[inline]
pub fn index(entry: usize, mpidr: impl FnOnce() -> u64) -> usize {
    let first = PER_CPU.as_ptr() as usize;
    match entry.checked_sub(first).map(|offset| offset / core::mem::size_of::<PerCpu>()) {
        Some(index) if index < MAX_CPUS => index,
        _ => by_mpidr(mpidr()),
    }
}

/// The CPU whose MPIDR affinity is `mpidr`'s (CPU 0 if none is): before this CPU is online.
#[cold]
#[inline(never)]
fn by_mpidr(mpidr: u64) -> usize {
    position((mpidr & MPIDR_AFFINITY_MASK) as usize).unwrap_or(0)
}

fn position(mpidr: usize) -> Option<usize> {
    PER_CPU.iter().position(|c| c.mpidr.load(Ordering::Relaxed) == mpidr)
}

/// Records the board's CPUs, as the device tree lists them; returns the index of the CPU
/// whose MPIDR is `mine` (the boot CPU), which then enters its `PerCpu`.
pub fn record_cpus(platform: &Platform<'_>, mine: u64) -> usize {
    for (cpu, m) in PER_CPU.iter().zip(platform.cpus.iter()) {
        cpu.mpidr.store((*m & MPIDR_AFFINITY_MASK) as usize, Ordering::Relaxed);
    }
    position((mine & MPIDR_AFFINITY_MASK) as usize).unwrap_or(0)
}

/// The address of CPU `index`'s `PerCpu`: what its per-CPU register holds.
pub fn entry(index: usize) -> usize {
    &PER_CPU[index.min(MAX_CPUS - 1)] as *const PerCpu as usize
}

/// CPU `index`'s MPIDR affinity, as the device tree listed it.
pub fn mpidr_of(index: usize) -> u64 {
    PER_CPU.get(index).map_or(0, |c| c.mpidr.load(Ordering::Relaxed) as u64)
}

/// Each started CPU's stack.
pub const STACK_SIZE: usize = 64 * 1024;

#[repr(C, align(16))]
pub struct Stack([u8; STACK_SIZE]);

/// What a starting CPU reads with its MMU off (the image's entry code reads it at these
/// offsets): its stack's top, the registers that turn its MMU on (`M`, the image's), and
/// its index.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SecondaryBoot<M> {
    pub stack_top: usize,
    pub mmu: M,
    pub cpu_index: usize,
}

/// The stacks of the CPUs started after the boot CPU, and what each reads when it starts.
pub struct CpuStarts<M> {
    stacks: UnsafeCell<[Stack; MAX_CPUS]>,
    boot: UnsafeCell<[SecondaryBoot<M>; MAX_CPUS]>,
}

// SAFETY: only the boot CPU writes a CPU's entry (`prepare`), before it starts that CPU,
// which alone reads it (and uses its stack) from then on.
unsafe impl<M> Sync for CpuStarts<M> {}

impl<M: Copy> CpuStarts<M> {
    /// `off`: the image's MMU registers before they are known.
    pub const fn new(off: M) -> Self {
        CpuStarts {
            stacks: UnsafeCell::new([const { Stack([0; STACK_SIZE]) }; MAX_CPUS]),
            boot: UnsafeCell::new([SecondaryBoot { stack_top: 0, mmu: off, cpu_index: 0 }; MAX_CPUS]),
        }
    }

    /// Writes what CPU `index` reads when it starts, and has `clean` (start, end) clean it to
    /// the point of coherency (the CPU reads it with its MMU off); returns its address, which
    /// CPU_ON passes the CPU.
    ///
    /// # Safety
    /// Called by the boot CPU only, before it starts CPU `index`.
    pub unsafe fn prepare(&self, index: usize, mmu: M, clean: impl FnOnce(u64, u64)) -> u64 {
        let index = index.min(MAX_CPUS - 1);
        // SAFETY: the caller's promise: no other CPU reads or writes these entries now.
        let stack_top = unsafe { (&raw const (*self.stacks.get())[index]) as usize + STACK_SIZE };
        // SAFETY: as above.
        let boot = unsafe { &mut (*self.boot.get())[index] };
        *boot = SecondaryBoot { stack_top, mmu, cpu_index: index };
        let at = boot as *const SecondaryBoot<M> as usize as u64;
        clean(at, at + core::mem::size_of::<SecondaryBoot<M>>() as u64);
        at
    }
}

/// A pen entry: a CPU's MPIDR affinity and the address of its `SecondaryBoot`.
#[repr(C)]
pub struct PenEntry {
    pub mpidr: AtomicUsize,
    /// 0 until the CPU may go through; written after `mpidr`.
    pub boot: AtomicUsize,
}

/// Cache lines of at least this many bytes hold nothing but the pen's parts (the Cortex-A15
/// and A7 have 64-byte lines; twice that leaves room for a core with larger ones).
const PEN_LINE: usize = 128;

/// The CPSR a CPU left in the pen, on lines of its own (`PEN_LINE`): it writes them with its
/// MMU off, so no other data may share them.
#[repr(C, align(128))]
struct Refusal(AtomicUsize);

const _: () = assert!(core::mem::align_of::<Refusal>() == PEN_LINE);
// The refusal lies past every entry, on lines of its own.
const _: () = assert!(Pen::REFUSAL >= Pen::ENTRY_SIZE * MAX_CPUS && Pen::REFUSAL.is_multiple_of(PEN_LINE));

/// Where the CPUs a board releases all alike wait: Versatile Express's firmware sends every
/// waiting CPU that an interrupt wakes to the one address in SYS_FLAGS, with nothing to say
/// which CPU it is. The image's pen entry, its MMU off, finds the entry with its own MPIDR
/// and a boot address (which the boot CPU writes, one CPU at a time, and cleans to memory),
/// and goes on as a CPU started through PSCI CPU_ON with that address would; until then it
/// waits (WFE; the boot CPU sends an event after each entry it writes). A CPU that comes to
/// the pen in a mode the image cannot run in leaves its CPSR and stops there.
#[repr(C)]
pub struct Pen {
    pub entries: [PenEntry; MAX_CPUS],
    refusal: Refusal,
}

impl Pen {
    /// The offsets the image's pen entry reads at.
    pub const ENTRY_SIZE: usize = core::mem::size_of::<PenEntry>();
    pub const ENTRY_MPIDR: usize = core::mem::offset_of!(PenEntry, mpidr);
    pub const ENTRY_BOOT: usize = core::mem::offset_of!(PenEntry, boot);
    pub const REFUSAL: usize = core::mem::offset_of!(Pen, refusal);

    pub const fn new() -> Self {
        Pen {
            entries: [const { PenEntry { mpidr: AtomicUsize::new(0), boot: AtomicUsize::new(0) } }; MAX_CPUS],
            refusal: Refusal(AtomicUsize::new(0)),
        }
    }

    /// Lets CPU `index`, whose MPIDR is `mpidr`, through with `boot` (what
    /// `CpuStarts::prepare` returned for it), and has `clean` (start, end) clean the entry to
    /// the point of coherency: the CPU reads it with its MMU off. The boot CPU's only.
    pub fn open(&self, index: usize, mpidr: u64, boot: u64, clean: impl FnOnce(u64, u64)) {
        let entry = &self.entries[index.min(MAX_CPUS - 1)];
        entry.mpidr.store((mpidr & MPIDR_AFFINITY_MASK) as usize, Ordering::Relaxed);
        // After the MPIDR: however the line is written back, memory never holds the boot
        // address without the MPIDR beside it, and the pen entry reads the address first.
        entry.boot.store(boot as usize, Ordering::Release);
        let at = entry as *const PenEntry as usize as u64;
        clean(at, at + Self::ENTRY_SIZE as u64);
    }

    /// The CPSR of a CPU that came to the pen in a mode the image cannot run in, if one did;
    /// `invalidate` (start, end) first drops any copy of it this CPU's caches hold (that CPU
    /// wrote memory with its MMU off; this one never writes it, so no line of it is dirty).
    pub fn refusal(&self, invalidate: impl FnOnce(u64, u64)) -> Option<usize> {
        let at = &self.refusal as *const Refusal as usize as u64;
        invalidate(at, at + PEN_LINE as u64);
        Some(self.refusal.0.load(Ordering::Acquire)).filter(|&cpsr| cpsr != 0)
    }
}

impl Default for Pen {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod pen_tests {
    use super::*;

    #[test]
    fn a_cpu_is_let_through_with_its_mpidr_and_boot_address_cleaned_to_memory() {
        let pen = Pen::new();
        let mut cleaned = None;
        pen.open(1, 0x8000_0101, 0x4010_2000, |start, end| cleaned = Some((start, end)));
        let entry = &pen.entries[1];
        assert_eq!(entry.mpidr.load(Ordering::Relaxed), 0x101, "the affinity fields only");
        assert_eq!(entry.boot.load(Ordering::Relaxed), 0x4010_2000);
        let at = entry as *const PenEntry as u64;
        assert_eq!(cleaned, Some((at, at + Pen::ENTRY_SIZE as u64)), "the entry, to the point of coherency");
        assert_eq!(pen.entries[0].boot.load(Ordering::Relaxed), 0, "no other CPU let through");
        assert_eq!(at - &pen as *const Pen as u64, (Pen::ENTRY_SIZE + Pen::ENTRY_MPIDR) as u64);
        assert_eq!(Pen::ENTRY_BOOT, Pen::ENTRY_MPIDR + core::mem::size_of::<usize>());
    }

    #[test]
    fn a_refusal_is_read_from_its_own_lines_after_they_are_invalidated() {
        let pen = Pen::new();
        let mut invalidated = None;
        assert_eq!(pen.refusal(|start, end| invalidated = Some((start, end))), None);
        let at = &pen as *const Pen as u64 + Pen::REFUSAL as u64;
        assert_eq!(invalidated, Some((at, at + PEN_LINE as u64)));
        // What the image's pen entry does with its MMU off, for a CPU in SVC mode.
        pen.refusal.0.store(0x1d3, Ordering::Relaxed);
        assert_eq!(pen.refusal(|_, _| {}), Some(0x1d3));
    }
}

#[cfg(test)]
mod vector_calls_tests {
    use super::*;

    /// The list register a vCPU's vector may write again, and the way it takes kicks, are
    /// that vCPU's alone: the next vCPU loaded on the CPU (another VM's, or after a
    /// SYSTEM_RESET) finds none published, and a vCPU loaded without kicks in the vector, or
    /// no vCPU, has every kick go to the run loop (docs/vgic.md, "The same SGI shown again in
    /// the vector").
    #[test]
    fn what_the_vector_takes_a_kick_with_is_the_loaded_vcpu_s_alone() {
        let calls = VectorCalls::unloaded();
        let (exits, ending, work) = (AtomicU64::new(0), AtomicBool::new(false), AtomicBool::new(false));
        let kick = KickInVector {
            entry: 0x4000,
            gicv2: Some((0x801_0000, 0x803_0000)),
            exits: &exits,
            ending: &ending,
            device_work: &work,
            all_empty: 0xf,
        };
        calls.load([&exits; 2], &NO_CONTROL_WORDS, None, None, Some(kick));
        assert_eq!(calls.kick_entry.load(Ordering::Relaxed), 0x4000);
        assert_eq!(calls.kick_gich.load(Ordering::Relaxed), 0x803_0000);
        assert_eq!(calls.kick_all_empty.load(Ordering::Relaxed), 0xf);
        calls.list_registers(true, Some((2, 0x4000_0000_0000_0003)));
        assert_eq!(calls.again_lr.load(Ordering::Relaxed), 2);
        assert_eq!(calls.again_value.load(Ordering::Relaxed), 0x4000_0000_0000_0003);
        // Another vCPU, without kicks in the vector: nothing of the last one's.
        calls.load([&exits; 2], &NO_CONTROL_WORDS, None, None, None);
        assert_eq!(calls.again_value.load(Ordering::Relaxed), 0, "no register value left from the last vCPU");
        assert_eq!(calls.list_registers_in_use.load(Ordering::Relaxed), 0);
        assert_eq!(calls.kick_entry.load(Ordering::Relaxed), 0, "every kick to the run loop");
        assert_eq!((calls.kick_gicc.load(Ordering::Relaxed), calls.kick_gich.load(Ordering::Relaxed)), (0, 0));
        // No vCPU: the flags the vector would check say the VM is ending.
        calls.load([&exits; 2], &NO_CONTROL_WORDS, None, None, Some(kick));
        calls.list_registers(true, Some((1, 7)));
        calls.unload();
        assert_eq!((calls.kick_entry.load(Ordering::Relaxed), calls.again_value.load(Ordering::Relaxed)), (0, 0));
        // SAFETY: `unload` stored the address of `NO_FLAG`, a static.
        assert!(unsafe { &*calls.kick_ending.load(Ordering::Relaxed) }.load(Ordering::Relaxed));
    }

    /// An interrupt the vector left to the run loop is taken once.
    #[test]
    fn an_interrupt_left_by_the_vector_is_taken_once() {
        let calls = VectorCalls::unloaded();
        assert_eq!(calls.take_acknowledged(), None);
        calls.acknowledged.store((1 << 32) | 27, Ordering::Relaxed);
        assert_eq!(calls.take_acknowledged(), Some(27));
        assert_eq!(calls.take_acknowledged(), None);
        // INTID 0 (an SGI) is not mistaken for none.
        calls.acknowledged.store(1 << 32, Ordering::Relaxed);
        assert_eq!(calls.take_acknowledged(), Some(0));
    }
}
