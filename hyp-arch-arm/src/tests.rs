//! Host tests: the register offsets against arm-gic's register maps, the values computed for
//! the registers, and the driver run over GIC frames in ordinary memory (a register keeps
//! what was last written to it; reads return what the test put there), with the CPU's
//! system registers faked per test thread.

use std::cell::RefCell;
use std::mem::offset_of;
use std::vec::Vec;

use hyp_core::platform::{GicDescription, GicVersion, PhysRange};
use vgic::{ListRegisters, Maintenance};

use crate::gic::*;
use crate::list_registers::*;
use crate::registers::*;

/// An SGI number, as the runtime's kick uses (hyp_runtime::interrupts::KICK_SGI).
const KICK: u32 = 1;

// ---- the fakes ----

/// Frames of a GIC in memory: the distributor, four redistributors, a GICv2 CPU interface
/// and a GICH frame.
struct Memory {
    base: usize,
}

const GICD_AT: usize = 0;
const GICR_AT: usize = 0x1_0000;
/// The four redistributors: CPU 1's has virtual LPIs (four 64 KiB frames), the others two.
const GICR_FRAMES: [(usize, u64); 4] = [(0x0_0000, 0), (0x2_0000, 1), (0x6_0000, 2), (0x8_0000, 3)];
const GICR_SIZE: usize = 0xa_0000;
const GICC_AT: usize = GICR_AT + GICR_SIZE;
const GICH_AT: usize = GICC_AT + 0x2000;
const SIZE: usize = GICH_AT + 0x1000;

impl Memory {
    fn new() -> Self {
        let words: &'static mut [u64] = Vec::leak(vec![0u64; SIZE / 8]);
        let memory = Memory { base: words.as_mut_ptr() as usize };
        for (i, &(at, mpidr)) in GICR_FRAMES.iter().enumerate() {
            let vlpis = if i == 1 { GICR_TYPER_VLPIS } else { 0 };
            let last = if i == GICR_FRAMES.len() - 1 { GICR_TYPER_LAST } else { 0 };
            memory.write64(GICR_AT + at + GICR_TYPER, redistributor_affinity(mpidr) << 32 | vlpis | last);
        }
        memory
    }

    fn description(&self, version: GicVersion) -> GicDescription {
        let range = |at: usize, size: usize| PhysRange { base: (self.base + at) as u64, size: size as u64 };
        GicDescription {
            version,
            distributor: range(GICD_AT, 0x1_0000),
            redistributors: (version == GicVersion::V3).then(|| range(GICR_AT, GICR_SIZE)),
            cpu_interface: (version == GicVersion::V2).then(|| range(GICC_AT, 0x2000)),
            hyp_interface: (version == GicVersion::V2).then(|| range(GICH_AT, 0x1000)),
            virtual_cpu_interface: None,
            maintenance_intid: Some(25),
            its: None,
        }
    }

    fn read32(&self, at: usize) -> u32 {
        // SAFETY: inside the leaked words of `new`; the driver's accesses are volatile too.
        unsafe { core::ptr::read_volatile((self.base + at) as *const u32) }
    }

    fn write32(&self, at: usize, value: u32) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base + at) as *mut u32, value) }
    }

    fn read8(&self, at: usize) -> u8 {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::read_volatile((self.base + at) as *const u8) }
    }

    fn read64(&self, at: usize) -> u64 {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::read_volatile((self.base + at) as *const u64) }
    }

    fn write64(&self, at: usize, value: u64) {
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile((self.base + at) as *mut u64, value) }
    }

    fn gicd(&self, offset: usize) -> u32 {
        self.read32(GICD_AT + offset)
    }

    fn gicc(&self, offset: usize) -> u32 {
        self.read32(GICC_AT + offset)
    }

    /// The RD frame of redistributor `n` of `GICR_FRAMES`.
    fn gicr(&self, n: usize) -> usize {
        GICR_AT + GICR_FRAMES[n].0
    }

    /// A GIC over these frames, its distributor initialised.
    fn gic(&self, version: GicVersion) -> Gic<FakeIcc> {
        // SAFETY: `init_distributor` is the first call; the frames are this memory, which is
        // never freed.
        let gic = unsafe { Gic::new() };
        // SAFETY: as above.
        unsafe { gic.init_distributor(&self.description(version)) };
        gic
    }

    /// The GICH frame as the list registers' file.
    fn list_registers(&self) -> ListRegisterFile<FakeIch> {
        // SAFETY: the GICH frame of this memory, which is never freed.
        unsafe { ListRegisterFile::v2(self.base + GICH_AT) }
    }
}

/// What the driver did with the fake CPU interface, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Icc {
    Enable(u8),
    Acknowledge,
    EndOfInterrupt(u32),
    PriorityDrop(u32),
    Sgi(u64),
    Barrier,
}

thread_local! {
    static ICC: RefCell<(Vec<Icc>, u32)> = const { RefCell::new((Vec::new(), SPURIOUS)) };
    static ICH: RefCell<FakeIchState> = RefCell::new(FakeIchState::default());
}

fn icc_log() -> Vec<Icc> {
    ICC.with(|icc| core::mem::take(&mut icc.borrow_mut().0))
}

fn icc(call: Icc) {
    ICC.with(|icc| icc.borrow_mut().0.push(call));
}

struct FakeIcc;

impl CpuInterfaceRegisters for FakeIcc {
    fn enable(pmr: u8) {
        icc(Icc::Enable(pmr));
    }
    fn acknowledge() -> u32 {
        icc(Icc::Acknowledge);
        ICC.with(|icc| icc.borrow().1)
    }
    fn end_of_interrupt(iar: u32) {
        icc(Icc::EndOfInterrupt(iar));
    }
    fn priority_drop(iar: u32) {
        icc(Icc::PriorityDrop(iar));
    }
    fn send_sgi(sgi1r: u64) {
        icc(Icc::Sgi(sgi1r));
    }
    fn store_barrier() {
        icc(Icc::Barrier);
    }
}

#[derive(Default)]
struct FakeIchState {
    lrs: [u64; 20],
    hcr: Option<u64>,
    interface: [u64; 3],
    resets: usize,
}

struct FakeIch;

impl ListRegisterAccess for FakeIch {
    fn count() -> usize {
        20
    }
    fn read_lr(n: usize) -> u64 {
        ICH.with(|ich| ich.borrow().lrs[n])
    }
    fn write_lr(n: usize, value: u64) {
        ICH.with(|ich| ich.borrow_mut().lrs[n] = value);
    }
    fn empty_status() -> u32 {
        0xfff0
    }
    fn eoi_status() -> u32 {
        0b101
    }
    fn read_hcr() -> u64 {
        ICH.with(|ich| ich.borrow().hcr.unwrap_or(0))
    }
    fn write_hcr(value: u64) {
        ICH.with(|ich| ich.borrow_mut().hcr = Some(value));
    }
    fn read_interface() -> [u64; 3] {
        ICH.with(|ich| ich.borrow().interface)
    }
    fn write_interface(state: [u64; 3]) {
        ICH.with(|ich| ich.borrow_mut().interface = state);
    }
    fn reset_interface() {
        ICH.with(|ich| {
            let mut ich = ich.borrow_mut();
            ich.interface = [0; 3];
            ich.resets += 1;
        });
    }
}

/// Aff3 7, Aff2 3, Aff1 2, Aff0 1, with MPIDR_EL1's RES1 bit 31 and MT bit 24 set.
const MPIDR: u64 = 7 << 32 | 1 << 31 | 1 << 24 | 0x03_0201;

// ---- the register maps ----

#[test]
fn distributor_offsets_are_arm_gics() {
    use arm_gic::gicv2::registers::Gicd as GicdV2;
    use arm_gic::gicv3::registers::Gicd;
    assert_eq!(GICD_CTLR, offset_of!(Gicd, ctlr));
    assert_eq!(GICD_IGROUPR, offset_of!(Gicd, igroupr));
    assert_eq!(GICD_ISENABLER, offset_of!(Gicd, isenabler));
    assert_eq!(GICD_ICENABLER, offset_of!(Gicd, icenabler));
    assert_eq!(GICD_ISPENDR, offset_of!(Gicd, ispendr));
    assert_eq!(GICD_ICPENDR, offset_of!(Gicd, icpendr));
    assert_eq!(GICD_ISACTIVER, offset_of!(Gicd, isactiver));
    assert_eq!(GICD_ICACTIVER, offset_of!(Gicd, icactiver));
    assert_eq!(GICD_IPRIORITYR, offset_of!(Gicd, ipriorityr));
    assert_eq!(GICD_ICFGR, offset_of!(Gicd, icfgr));
    assert_eq!(GICD_IROUTER, offset_of!(Gicd, irouter) - 8 * 32, "GICD_IROUTER<n> from n = 0");
    assert_eq!(GICD_ITARGETSR, offset_of!(GicdV2, itargetsr));
    assert_eq!(GICD_SGIR, offset_of!(GicdV2, sgir));
    for (v3, v2) in [
        (offset_of!(Gicd, isenabler), offset_of!(GicdV2, isenabler)),
        (offset_of!(Gicd, icactiver), offset_of!(GicdV2, icactiver)),
        (offset_of!(Gicd, ipriorityr), offset_of!(GicdV2, ipriorityr)),
        (offset_of!(Gicd, icfgr), offset_of!(GicdV2, icfgr)),
    ] {
        assert_eq!(v3, v2, "the same distributor map in both versions");
    }
}

#[test]
fn redistributor_and_cpu_interface_offsets_are_arm_gics() {
    use arm_gic::gicv2::registers::Gicc;
    use arm_gic::gicv3::registers::GicrSgi;
    assert_eq!(GICR_TYPER, offset_of!(GicrSgi, gicr.typer));
    assert_eq!(GICR_SGI_FRAME, offset_of!(GicrSgi, sgi));
    assert_eq!(GICR_ISACTIVER0, offset_of!(GicrSgi, sgi.isactiver));
    assert_eq!(GICR_ICACTIVER0, offset_of!(GicrSgi, sgi.icactiver));
    assert_eq!(GICC_CTLR, offset_of!(Gicc, ctlr));
    assert_eq!(GICC_PMR, offset_of!(Gicc, pmr));
    assert_eq!(GICC_IAR, offset_of!(Gicc, iar));
    assert_eq!(GICC_EOIR, offset_of!(Gicc, eoir));
    assert_eq!(GICC_DIR, offset_of!(Gicc, dir));
}

// ---- the values ----

#[test]
fn one_bit_and_two_bit_registers_place_an_intid() {
    assert_eq!(bit_of(0), (0, 1));
    assert_eq!(bit_of(33), (4, 1 << 1));
    assert_eq!(bit_of(1019), (4 * 31, 1 << 27));
    assert_eq!(edge_bit_of(33), (8, 1 << 3));
    assert_eq!(edge_bit_of(47), (8, 1 << 31));
    assert_eq!(edge_bit_of(48), (12, 1 << 1));
}

#[test]
fn affinities_leave_out_what_is_not_affinity() {
    // GICR_TYPER[63:32]: Aff3.Aff2.Aff1.Aff0; GICD_IROUTER: Aff3 at [39:32], IRM [31] clear.
    assert_eq!(redistributor_affinity(MPIDR), 0x0703_0201);
    assert_eq!(irouter(MPIDR), 0x7_0003_0201);
    assert_eq!(irouter(MPIDR) & 1 << 31, 0, "routed to this CPU, not to any");
}

#[test]
fn sgis_name_their_one_target() {
    assert_eq!(sgi1r(MPIDR, KICK), 7 << 48 | 3 << 32 | 1 << 24 | 2 << 16 | 1 << 1);
    assert_eq!(sgi1r(0xf, 0x1f), 0xf << 24 | 1 << 15, "INTID is 4 bits, Aff0 one bit of 16");
    assert_eq!(gicv2_sgir(2, KICK), 1 << 18 | 1);
    assert_eq!(gicv2_sgir(7, 0x1f) >> 24, 0, "TargetListFilter 0: the list");
    assert_eq!(gicv2_sgir_to_others(0x1f), 1 << 24 | 0xf, "TargetListFilter 1: all but the sender");
    assert_eq!(sgi1r_to_others(0x1f), 1 << 40 | 0xf << 24, "IRM: all but the sender, no affinity or list");
}

#[test]
fn a_cpu_enables_its_sgis_and_only_its_ppis() {
    assert_eq!(private_enables(&[]), 0xffff);
    assert_eq!(private_enables(&[25, 26, 30, 40, 1020]), 0xffff | 1 << 25 | 1 << 26 | 1 << 30);
}

#[test]
fn the_intid_of_an_acknowledge_leaves_the_source_cpu_out() {
    assert_eq!(interrupt_id(0x0c01), 1, "GICC_IAR's CPUID is not the INTID");
    assert_eq!(interrupt_id(SPURIOUS), SPURIOUS);
    // The largest GICv2 SGI value (CPUID 7) is still below the LPIs.
    assert_eq!(interrupt_id(0x1c0f), 15);
    // ICC_IAR1_EL1 of an LPI (a doorbell of the board's GICv4): the whole INTID.
    assert_eq!(interrupt_id(8192 + 130), 8322);
    assert_eq!(interrupt_id(0xff_ffff), 0xff_ffff);
    assert!(is_interrupt(8192) && is_interrupt(1019) && is_interrupt(0));
    assert!(!is_interrupt(1020) && !is_interrupt(SPURIOUS) && !is_interrupt(8191));
}

// ---- the driver, GICv3 ----

#[test]
fn gicv3_distributor_is_enabled_with_affinity_routing() {
    let memory = Memory::new();
    let _gic = memory.gic(GicVersion::V3);
    assert_eq!(memory.gicd(GICD_CTLR), 0x13, "ARE_NS, EnableGrp1A, EnableGrp1");
}

#[test]
fn gicv3_cpu_finds_its_redistributor_by_affinity_past_a_gicv4_frame() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    gic.init_cpu(5, 2, &[25, 27]).unwrap();
    assert_eq!(icc_log(), [Icc::Enable(MASK_NONE)]);
    let rd = memory.gicr(2);
    let sgi = rd + GICR_SGI_FRAME;
    assert_eq!(memory.read32(sgi + 0x80), 0xffff_ffff, "GICR_IGROUPR0: Group 1");
    assert_eq!(memory.read32(sgi + 0x180), 0xffff_ffff, "GICR_ICENABLER0: all off first");
    assert!((0..32).all(|i| memory.read8(sgi + 0x400 + i) == PRIORITY), "GICR_IPRIORITYR");
    assert_eq!(memory.read32(sgi + 0x100), 1 << 27, "GICR_ISENABLER0, the last enable written");
    for other in [0, 1, 3] {
        let sgi = memory.gicr(other) + GICR_SGI_FRAME;
        assert_eq!(memory.read32(sgi + 0x80) | memory.read32(sgi + 0x100), 0, "redistributor {other} untouched");
    }
    // The CPU's index now reaches its redistributor.
    gic.set_active_private(27, 5, true);
    assert_eq!(memory.read32(rd + GICR_ISACTIVER0), 1 << 27);
    gic.clear_active_private(26, 5);
    assert_eq!(memory.read32(rd + GICR_ICACTIVER0), 1 << 26);
    gic.set_active_private(32, 5, true);
    assert_eq!(memory.read32(rd + GICR_ISACTIVER0), 1 << 27, "an SPI is no private interrupt");
}

/// Once a CPU has brought its interface up, an SGI to it takes the target recorded then,
/// without its MPIDR (`send_sgi`'s `mpidr` is for a CPU that has not yet).
#[test]
fn an_sgi_to_a_cpu_that_brought_its_interface_up_takes_the_target_recorded_then() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    gic.init_cpu(5, 2, &[]).unwrap();
    icc_log();
    gic.send_sgi(5, || panic!("the MPIDR of a CPU whose interface is up is not looked up"), KICK);
    gic.send_sgi(6, || MPIDR, KICK);
    gic.send_sgi(5, || 0, 0x1f);
    assert_eq!(icc_log(), [Icc::Sgi(sgi1r(2, KICK)), Icc::Sgi(sgi1r(MPIDR, KICK)), Icc::Sgi(sgi1r(2, 0xf))]);
    let memory = Memory::new();
    let gic = gicv2(&memory);
    gic.send_sgi(1, || panic!("GICv2 targets interfaces"), 0x1f);
    assert_eq!(memory.gicd(GICD_SGIR), 1 << 18 | 0xf, "interface 2, four bits of INTID");
}

#[test]
fn gicv3_cpu_without_a_redistributor_is_refused() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    assert!(matches!(gic.init_cpu(0, 9, &[]), Err(GicError::NoRedistributor)));
    assert_eq!(icc_log(), []);
    gic.set_active_private(27, 0, true); // no frame recorded: nothing is written
    assert!((0..4).all(|n| memory.read32(memory.gicr(n) + GICR_ISACTIVER0) == 0));
    // Again: the search is not left holding the redistributors.
    assert!(gic.init_cpu(0, 1, &[]).is_ok());
}

#[test]
fn gicv3_spi_is_grouped_prioritised_routed_and_enabled() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    memory.write32(GICD_AT + GICD_IGROUPR + 4, 1 << 3);
    gic.enable_spi(40, 1, MPIDR);
    assert_eq!(memory.gicd(GICD_IGROUPR + 4), 1 << 3 | 1 << 8, "read, modified, written");
    assert_eq!(memory.read8(GICD_AT + GICD_IPRIORITYR + 40), PRIORITY);
    assert_eq!(memory.read64(GICD_AT + GICD_IROUTER + 8 * 40), 0x7_0003_0201);
    assert_eq!(memory.gicd(GICD_ISENABLER + 4), 1 << 8);
}

#[test]
fn spi_state_is_read_and_cleared_by_its_bit() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    memory.write32(GICD_AT + GICD_ISPENDR + 4, 1 << 8);
    memory.write32(GICD_AT + GICD_ISENABLER + 4, 1 << 9);
    assert!(gic.spi_pending(40) && !gic.spi_pending(41));
    assert!(gic.spi_enabled(41) && !gic.spi_enabled(40));
    gic.disable_spi(42);
    assert_eq!(memory.gicd(GICD_ICENABLER + 4), 1 << 10);
    gic.clear_spi(43);
    assert_eq!((memory.gicd(GICD_ICPENDR + 4), memory.gicd(GICD_ICACTIVER + 4)), (1 << 11, 1 << 11));
    gic.deactivate_spi(63);
    assert_eq!(memory.gicd(GICD_ICACTIVER + 4), 1 << 31);
}

#[test]
fn spi_trigger_changes_only_its_bit() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    memory.write32(GICD_AT + GICD_ICFGR + 8, 0x5555_5555);
    gic.configure_spi(40, true);
    assert_eq!(memory.gicd(GICD_ICFGR + 8), 0x5555_5555 | 1 << 17);
    gic.configure_spi(40, false);
    assert_eq!(memory.gicd(GICD_ICFGR + 8), 0x5555_5555);
}

#[test]
fn no_spi_beyond_the_spi_range_is_touched() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    for intid in [0, 31, 1020, 1023, u32::MAX] {
        gic.enable_spi(intid, 0, 0);
        gic.disable_spi(intid);
        gic.clear_spi(intid);
        gic.deactivate_spi(intid);
        gic.configure_spi(intid, true);
        assert!(!gic.spi_pending(intid) && !gic.spi_enabled(intid));
    }
    assert!((4..0x1_0000).step_by(4).all(|at| memory.gicd(at) == 0), "only GICD_CTLR written");
}

#[test]
fn gicv3_hot_paths_are_the_cpu_interfaces() {
    let memory = Memory::new();
    let gic = memory.gic(GicVersion::V3);
    ICC.with(|icc| icc.borrow_mut().1 = 27);
    assert_eq!(gic.acknowledge(), 27);
    gic.end_of_interrupt(27);
    gic.priority_drop(40);
    gic.send_sgi(3, || MPIDR, KICK);
    gic.send_sgi_to_others(KICK);
    assert_eq!(
        icc_log(),
        [
            Icc::Acknowledge,
            Icc::EndOfInterrupt(27),
            Icc::PriorityDrop(40),
            Icc::Sgi(sgi1r(MPIDR, KICK)),
            Icc::Sgi(1 << 40 | u64::from(KICK) << 24)
        ]
    );
    assert_eq!(memory.gicd(GICD_SGIR), 0, "no GICv2 SGI");
}

// ---- the driver, GICv2 ----

/// A GICv2 whose calling CPU is interface 2 (GICD_ITARGETSR0 reads as its mask).
fn gicv2(memory: &Memory) -> Gic<FakeIcc> {
    memory.write32(GICD_AT + GICD_ITARGETSR, 0x0404_0404);
    let gic = memory.gic(GicVersion::V2);
    gic.init_cpu(1, 0x1, &[26, 27]).unwrap();
    gic
}

#[test]
fn gicv2_cpu_sets_up_its_banked_registers_and_its_interface() {
    let memory = Memory::new();
    let gic = gicv2(&memory);
    assert_eq!(memory.gicd(GICD_CTLR), 1, "EnableGrp1");
    assert_eq!(memory.gicd(GICD_ICENABLER), 0xffff_ffff);
    assert!((0..8).all(|i| memory.gicd(GICD_IPRIORITYR + 4 * i) == 0xa0a0_a0a0));
    assert_eq!(memory.gicd(GICD_ISENABLER), 0xffff | 1 << 26 | 1 << 27);
    assert_eq!(memory.gicc(GICC_PMR), 0xff);
    assert_eq!(memory.gicc(GICC_CTLR), 1 | 1 << 9, "EnableGrp1, EOImodeNS");
    assert_eq!(icc_log(), [], "no system register on GICv2");
    gic.set_active_private(27, 1, true);
    assert_eq!(memory.gicd(GICD_ISACTIVER), 1 << 27, "the banked GICD_ISACTIVER0");
    gic.set_active_private(27, 1, false);
    assert_eq!(memory.gicd(GICD_ICACTIVER), 1 << 27);
}

#[test]
fn gicv2_sgi_and_spi_target_the_cpu_interface() {
    let memory = Memory::new();
    let gic = gicv2(&memory);
    gic.send_sgi(1, || 0x1, KICK);
    assert_eq!(memory.gicd(GICD_SGIR), 1 << 18 | 1);
    assert_eq!(icc_log(), [Icc::Barrier], "a store barrier before the SGI");
    gic.send_sgi_to_others(KICK);
    assert_eq!(memory.gicd(GICD_SGIR), 1 << 24 | 1, "every CPU but this one, whatever their interfaces");
    assert_eq!(icc_log(), [Icc::Barrier], "and its store barrier");
    gic.enable_spi(40, 1, 0x1);
    assert_eq!(memory.read8(GICD_AT + GICD_ITARGETSR + 40), 1 << 2);
    assert_eq!(memory.gicd(GICD_IGROUPR + 4), 0, "GICv2 leaves the groups as they are");
    assert_eq!(memory.gicd(GICD_ISENABLER + 4), 1 << 8);
}

#[test]
fn gicv2_acknowledge_and_end_go_through_gicc() {
    let memory = Memory::new();
    let gic = gicv2(&memory);
    memory.write32(GICC_AT + GICC_IAR, 0x0c01);
    let iar = gic.acknowledge();
    assert_eq!(iar, 0x0c01, "the whole GICC_IAR, the source CPU with it");
    gic.priority_drop(iar);
    assert_eq!((memory.gicc(GICC_EOIR), memory.gicc(GICC_DIR)), (0x0c01, 0));
    gic.end_of_interrupt(0x21);
    assert_eq!((memory.gicc(GICC_EOIR), memory.gicc(GICC_DIR)), (0x21, 0x21));
    assert_eq!(icc_log(), []);
}

// ---- the list registers ----

#[test]
fn gich_list_registers_and_status() {
    let memory = Memory::new();
    let gich = GICH_AT;
    memory.write32(gich + GICH_VTR, 3);
    memory.write32(gich + GICH_ELRSR0, 0b1100);
    memory.write32(gich + GICH_ELRSR1, 1);
    memory.write32(gich + GICH_EISR0, 0b10);
    let mut lrs = memory.list_registers();
    assert_eq!(lrs.count(), 4);
    lrs.write_lr(2, 0x1_2345_6789);
    assert_eq!(memory.read32(gich + GICH_LR0 + 8), 0x2345_6789, "GICH_LR<n> is 32 bits");
    assert_eq!(lrs.read_lr(2), 0x2345_6789);
    lrs.write_lr(GICH_LRS + 1, 7);
    assert_eq!(memory.read32(gich + GICH_LR0 + 4), 7, "never past GICH_LR63");
    assert_eq!(lrs.empty_status(), 0b1100, "GICH_ELRSR1 (list registers 32 to 63) is never used");
    assert_eq!(lrs.eoi_status(), 0b10);
    lrs.set_maintenance(Maintenance { underflow: true, no_pending: true, entry_not_present: false });
    assert_eq!(memory.read32(gich + GICH_HCR), 1 | 1 << 1 | 1 << 3, "En, UIE, NPIE");
    lrs.set_maintenance(Maintenance { entry_not_present: true, ..Maintenance::NONE });
    assert_eq!(memory.read32(gich + GICH_HCR), 1 | 1 << 2, "En, LRENPIE (no TDIR: bit 14 is reserved)");
    // The guest deactivated 3 interrupts no list register showed (GICH_HCR.EOICount).
    memory.write32(gich + GICH_HCR, 3 << 27 | 1 | 1 << 2);
    assert_eq!(lrs.take_eoi_count(), 3);
    assert_eq!(memory.read32(gich + GICH_HCR), 1 | 1 << 2, "EOICount cleared, the rest kept");
    assert_eq!(lrs.take_eoi_count(), 0);
    memory.write32(gich + GICH_HCR, 31 << 27 | 1);
    assert_eq!(lrs.take_eoi_count(), 31, "all five bits");
    assert!(!lrs.eoi_split());
    memory.write32(gich + GICH_VMCR, 1 << 9 | 1);
    assert!(lrs.eoi_split(), "GICH_VMCR.VEM");
}

#[test]
fn gich_interface_is_saved_restored_and_reset() {
    let memory = Memory::new();
    let gich = GICH_AT;
    memory.write32(gich + GICH_VTR, 3);
    memory.write32(gich + GICH_VMCR, 0xf000_0001);
    memory.write32(gich + GICH_APR, 0x8);
    let lrs = memory.list_registers();
    assert_eq!(lrs.gich().map(Gich::base), Some(memory.base + GICH_AT));
    let saved = lrs.save_interface();
    lrs.reset();
    assert_eq!((memory.read32(gich + GICH_VMCR), memory.read32(gich + GICH_APR)), (0, 0));
    assert_eq!(memory.read32(gich + GICH_HCR), 1, "on, no maintenance asked for");
    lrs.restore_interface(&saved);
    assert_eq!((memory.read32(gich + GICH_VMCR), memory.read32(gich + GICH_APR)), (0xf000_0001, 0x8));
}

#[test]
fn gicv3_list_registers_are_the_system_registers() {
    let mut lrs = ListRegisterFile::<FakeIch>::v3();
    assert!(lrs.gich().is_none());
    assert_eq!(lrs.count(), 16, "at most the 16 ICH_LR<n>_EL2");
    lrs.write_lr(15, u64::MAX);
    assert_eq!(lrs.read_lr(15), u64::MAX);
    assert_eq!((lrs.empty_status(), lrs.eoi_status()), (0xfff0, 0b101));
    lrs.set_maintenance(Maintenance { underflow: true, ..Maintenance::NONE });
    assert_eq!(ICH.with(|ich| ich.borrow().hcr), Some(1 | 1 << 1));
    lrs.set_maintenance(Maintenance { entry_not_present: true, ..Maintenance::NONE });
    assert_eq!(ICH.with(|ich| ich.borrow().hcr), Some(1 | 1 << 2 | 1 << 14), "LRENPIE with TDIR");
    // ICH_HCR_EL2.EOIcount: taken and cleared, the rest kept; not written when 0.
    ICH.with(|ich| ich.borrow_mut().hcr = Some(2 << 27 | 1 | 1 << 2));
    assert_eq!(lrs.take_eoi_count(), 2);
    assert_eq!(ICH.with(|ich| ich.borrow().hcr), Some(1 | 1 << 2));
    ICH.with(|ich| ich.borrow_mut().hcr = None);
    assert_eq!(lrs.take_eoi_count(), 0);
    assert_eq!(ICH.with(|ich| ich.borrow().hcr), None, "a count of 0 writes nothing");
    ICH.with(|ich| ich.borrow_mut().interface = [1, 2, 3]);
    let saved = lrs.save_interface();
    lrs.reset();
    ICH.with(|ich| {
        let ich = ich.borrow();
        assert_eq!((ich.resets, ich.interface, ich.hcr), (1, [0; 3], Some(1)));
        assert!(ich.lrs[..16].iter().all(|lr| *lr == 0));
    });
    lrs.restore_interface(&saved);
    assert_eq!(ICH.with(|ich| ich.borrow().interface), [1, 2, 3]);
    assert!(!lrs.eoi_split());
    ICH.with(|ich| ich.borrow_mut().interface = [1 << 9 | 1, 2, 3]);
    assert!(lrs.eoi_split(), "ICH_VMCR_EL2.VEOIM");
}
