//! The memory-mapped GIC registers this crate uses, by their offset in their frame, and the
//! values it computes for them: the same on ARMv7-A and ARMv8-A.
//!
//! GICv3: IHI 0069 (GICD 12.9, GICR 12.10/12.11, ICC_SGI1R 12.2.23); GICv2: IHI 0048B (GICD
//! 4.3, GICC 4.4, GICH 5.3). The host tests check the offsets against the register maps of
//! the `arm-gic` crate.

// Distributor (GICD), IHI 0069 12.9 / IHI 0048B 4.3.
pub const GICD_CTLR: usize = 0x000;
pub const GICD_IGROUPR: usize = 0x080;
pub const GICD_ISENABLER: usize = 0x100;
pub const GICD_ICENABLER: usize = 0x180;
pub const GICD_ISPENDR: usize = 0x200;
pub const GICD_ICPENDR: usize = 0x280;
pub const GICD_ISACTIVER: usize = 0x300;
pub const GICD_ICACTIVER: usize = 0x380;
pub const GICD_IPRIORITYR: usize = 0x400;
/// GICv2 only (IHI 0048B 4.3.12).
pub const GICD_ITARGETSR: usize = 0x800;
pub const GICD_ICFGR: usize = 0xc00;
/// GICv2 only (IHI 0048B 4.3.15).
pub const GICD_SGIR: usize = 0xf00;
/// GICv3 only (IHI 0069 12.9.22).
pub const GICD_IROUTER: usize = 0x6000;

/// GICD_CTLR as a Non-secure access sees it (IHI 0069 12.9.4): ARE_NS [4], EnableGrp1A [1],
/// EnableGrp1 [0] (the same bits are ARE, EnableGrp1, EnableGrp0 with one security state);
/// RWP [31]. GICv2's Non-secure view has EnableGrp1 at [0] (IHI 0048B 4.3.1).
pub const CTLR_RWP: u32 = 1 << 31;
pub const CTLR_V3_ENABLE: u32 = (1 << 4) | (1 << 1) | 1;
pub const CTLR_V2_ENABLE: u32 = 1;

// Redistributor (GICR), IHI 0069 12.10/12.11: an RD frame, then the SGI frame 64 KiB on.
pub const GICR_TYPER: usize = 0x0008;
/// GICR_TYPER.VLPIS [1]: two more 64 KiB frames follow (GICv4); Last [4].
pub const GICR_TYPER_VLPIS: u64 = 1 << 1;
pub const GICR_TYPER_LAST: u64 = 1 << 4;
pub const GICR_SGI_FRAME: usize = 0x1_0000;
/// GICR_ISACTIVER0 and GICR_ICACTIVER0, in the SGI frame (IHI 0069 12.10.7).
pub const GICR_ISACTIVER0: usize = GICR_SGI_FRAME + 0x300;
pub const GICR_ICACTIVER0: usize = GICR_SGI_FRAME + 0x380;

// GICv2 CPU interface (GICC), IHI 0048B 4.4.
pub const GICC_CTLR: usize = 0x0000;
pub const GICC_PMR: usize = 0x0004;
pub const GICC_IAR: usize = 0x000c;
pub const GICC_EOIR: usize = 0x0010;
pub const GICC_HPPIR: usize = 0x0018;
pub const GICC_DIR: usize = 0x1000;
/// GICC_CTLR: EnableGrp1 [0], EOImodeNS [9] (IHI 0048B 4.4.1).
pub const GICC_CTLR_ENABLE_EOIMODE: u32 = 1 | (1 << 9);

// GICv2 virtual interface control (GICH), IHI 0048B 5.3.
pub const GICH_HCR: usize = 0x000;
pub const GICH_VTR: usize = 0x004;
pub const GICH_VMCR: usize = 0x008;
pub const GICH_EISR0: usize = 0x020;
pub const GICH_EISR1: usize = 0x024;
pub const GICH_ELRSR0: usize = 0x030;
pub const GICH_ELRSR1: usize = 0x034;
pub const GICH_APR: usize = 0x0f0;
pub const GICH_LR0: usize = 0x100;
/// GICH_LR0 to GICH_LR63 (GICH_VTR.ListRegs is 6 bits).
pub const GICH_LRS: usize = 64;

/// The word and the bit of `intid` in a register array of one bit per interrupt
/// (GICD_IGROUPR, GICD_IS/ICENABLER, GICD_IS/ICPENDR, GICD_IS/ICACTIVER).
#[inline(always)]
pub const fn bit_of(intid: u32) -> (usize, u32) {
    (4 * (intid as usize / 32), 1 << (intid % 32))
}

/// The word and the bit of `intid`'s Int_config[1] (edge-triggered) in GICD_ICFGR<n>, two
/// bits per interrupt (IHI 0069 12.9.7 / IHI 0048B 4.3.13).
pub const fn edge_bit_of(intid: u32) -> (usize, u32) {
    (4 * (intid as usize / 16), 1 << (2 * (intid % 16) + 1))
}

/// The affinity of an MPIDR as GICR_TYPER[63:32] gives it: Aff3.Aff2.Aff1.Aff0
/// (IHI 0069 12.11, GICR_TYPER).
pub const fn redistributor_affinity(mpidr: u64) -> u64 {
    ((mpidr >> 32 & 0xff) << 24) | (mpidr & 0xff_ffff)
}

/// GICD_IROUTER<n> for delivery to the CPU with this MPIDR: Aff3 [39:32], Aff2.Aff1.Aff0
/// [23:0], Interrupt_Routing_Mode [31] clear (IHI 0069 12.9.22).
pub const fn irouter(mpidr: u64) -> u64 {
    ((mpidr >> 32 & 0xff) << 32) | (mpidr & 0xff_ffff)
}

/// ICC_SGI1R for SGI `intid` to the one CPU with this MPIDR (IHI 0069 12.2.23): Aff3 [55:48],
/// Aff2 [39:32], INTID [27:24], Aff1 [23:16], TargetList [15:0] (one bit: Aff0 < 16).
#[inline(always)]
pub const fn sgi1r(mpidr: u64, intid: u32) -> u64 {
    ((mpidr >> 32 & 0xff) << 48)
        | ((mpidr >> 16 & 0xff) << 32)
        | sgi1r_intid(intid)
        | ((mpidr >> 8 & 0xff) << 16)
        | (1 << (mpidr & 0xf))
}

/// ICC_SGI1R's INTID field [27:24] for SGI `intid` (the rest of `sgi1r`: its targets).
#[inline(always)]
pub const fn sgi1r_intid(intid: u32) -> u64 {
    ((intid & 0xf) as u64) << 24
}

/// GICD_SGIR for SGI `intid` to the CPU interface `interface` (IHI 0048B 4.3.15):
/// TargetListFilter 0, CPUTargetList [23:16], SGIINTID [3:0].
#[inline(always)]
pub const fn gicv2_sgir(interface: u8, intid: u32) -> u32 {
    (1 << (16 + interface as u32)) | gicv2_sgir_intid(intid)
}

/// GICD_SGIR's SGIINTID field [3:0] for SGI `intid` (the rest of `gicv2_sgir`: its target).
#[inline(always)]
pub const fn gicv2_sgir_intid(intid: u32) -> u32 {
    intid & 0xf
}

/// ICC_SGI1R for SGI `intid` to every CPU but the sender (IHI 0069 12.2.23): IRM [40] 1,
/// INTID [27:24].
#[inline(always)]
pub const fn sgi1r_to_others(intid: u32) -> u64 {
    1 << 40 | ((intid & 0xf) as u64) << 24
}

/// GICD_SGIR for SGI `intid` to every CPU interface but the sender's (IHI 0048B 4.3.15):
/// TargetListFilter [25:24] 0b01, SGIINTID [3:0].
#[inline(always)]
pub const fn gicv2_sgir_to_others(intid: u32) -> u32 {
    1 << 24 | (intid & 0xf)
}

/// The enables of a CPU's private interrupts: every SGI (0-15) and the PPIs (16-31) given.
pub fn private_enables(ppis: &[u32]) -> u32 {
    ppis.iter().filter(|p| (16..32).contains(*p)).fold(0xffff, |enable, ppi| enable | 1 << ppi)
}
