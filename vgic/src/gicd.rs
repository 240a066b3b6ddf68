//! The distributor's registers (IHI 0069H 12.8, 12.9 for GICv3; IHI 0048B 4.1, 4.3 for
//! GICv2), as the guest reads and writes them. The interrupt block (IGROUPR to NSACR) is in
//! `mmio`; here are the control and identification registers, GICv2's ITARGETSR and SGI
//! registers, and GICv3's IROUTER.

use crate::distributor::IRM;
use crate::mmio::{check, BitReg, Frame, BYTE_OR_WORD, INTERRUPT_BLOCK, WORD, WORD_OR_DOUBLE};
use crate::{AccessError, Distributor, GicVersion, VcpuMask};

/// GICv2's GICD_SGIR, in the distributor's frame (IHI 0048B 4.3.15): an SGI's generation,
/// which the AArch64 vector answers even while the sender holds list registers, as it does
/// a write of ICC_SGI1R_EL1 (hyp_runtime::vcpu_run::in_vector).
pub const GICD_SGIR: u64 = 0xf00;
/// `GICD_SGIR` as the decoder's 32-bit frame offsets write it.
const SGIR: u32 = GICD_SGIR as u32;

/// GICv3's GICD_SETSPI_NSR (IHI 0069H 12.9.23): a message-based SPI's doorbell
/// (GICD_TYPER.MBIS), the address a device's MSI writes the SPI's INTID to.
pub const GICD_SETSPI_NSR: u64 = 0x040;
/// GICv3's GICD_CLRSPI_NSR (IHI 0069H 12.9.3): takes back what GICD_SETSPI_NSR set.
pub const GICD_CLRSPI_NSR: u64 = 0x048;
/// The INTID field of both, bits [12:0].
const MESSAGE_INTID: u32 = 0x1fff;
/// GICD_TYPER.MBIS [16]: message-based SPIs are supported.
const TYPER_MBIS: u32 = 1 << 16;
const TYPER_LPIS: u32 = 1 << 17;

/// GICD_IIDR / GICR_IIDR: implementer Arm (JEP106 0x43b), product 0x48.
pub(crate) const IIDR: u64 = 0x4800_043b;
/// GICD_PIDR2 / GICR_PIDR2: ArchRev [7:4] = 3 (GICv3), JEDEC-assigned [3].
pub(crate) const PIDR2_V3: u64 = 0x3b;
/// GICD_ICPIDR2: ArchRev = 2 (GICv2), as GIC-400.
const PIDR2_V2: u64 = 0x2b;

const CTLR_ENABLE_GRP0: u64 = 1 << 0;
const CTLR_ENABLE_GRP1: u64 = 1 << 1;
/// ARE [4] and DS [6] read as one and ignore writes (IHI 0069H 12.9.4).
const CTLR_ARE_DS: u64 = (1 << 4) | (1 << 6);

/// GICD_IROUTER<n> bits kept: Interrupt_Routing_Mode [31], Aff2-Aff0 [23:0]; Aff3 is zero
/// only (GICD_TYPER.A3V = 0).
const IROUTER_MASK: u32 = IRM | 0xff_ffff;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DistReg {
    Ctlr,
    Typer,
    Iidr,
    Pidr2,
    /// GICv2 GICD_ITARGETSR<n>, from this INTID.
    Targets(u32),
    /// GICv2 GICD_SGIR (write-only).
    Sgir,
    /// GICv3 GICD_SETSPI_NSR (`set`) or GICD_CLRSPI_NSR (write-only).
    MessageSpi {
        set: bool,
    },
    /// GICv2 GICD_SPENDSGIR<n> (`set`) or GICD_CPENDSGIR<n>, from this SGI.
    SgiPending {
        set: bool,
        first: u32,
    },
    /// GICv3 GICD_IROUTER<n>, for this INTID; `high` for the upper word.
    Router {
        intid: u32,
        high: bool,
    },
    /// Reserved, read-only, or absent in this configuration: RAZ/WI.
    RazWi,
}

impl Distributor {
    fn frame_size(&self) -> u32 {
        match self.version {
            GicVersion::V3 => 0x1_0000,
            GicVersion::V2 => 0x1000,
        }
    }

    /// The register at `offset` (within the frame: `check_dist`).
    fn dist_reg(&self, offset: u32) -> (DistReg, u8) {
        let v2 = self.version == GicVersion::V2;
        match offset {
            0x000 => (DistReg::Ctlr, WORD),
            0x004 => (DistReg::Typer, WORD),
            0x008 => (DistReg::Iidr, WORD),
            0x040 if !v2 => (DistReg::MessageSpi { set: true }, WORD),
            0x048 if !v2 => (DistReg::MessageSpi { set: false }, WORD),
            // ITARGETSR: RES0 under affinity routing, yet byte-accessible (IHI 0069H 12.9, GICD_ITARGETSR<n>).
            0x800..0xc00 if v2 => (DistReg::Targets(offset - 0x800), BYTE_OR_WORD),
            0x800..0xc00 => (DistReg::RazWi, BYTE_OR_WORD),
            SGIR if v2 => (DistReg::Sgir, WORD),
            0xf10..0xf20 if v2 => (DistReg::SgiPending { set: false, first: offset - 0xf10 }, BYTE_OR_WORD),
            0xf20..0xf30 if v2 => (DistReg::SgiPending { set: true, first: offset - 0xf20 }, BYTE_OR_WORD),
            0xf10..0xf30 => (DistReg::RazWi, BYTE_OR_WORD),
            0x6000..0x8000 if !v2 => {
                let intid = (offset - 0x6000) / 8;
                (DistReg::Router { intid, high: offset % 8 == 4 }, WORD_OR_DOUBLE)
            }
            0xfe8 if v2 => (DistReg::Pidr2, WORD),
            0xffe8 if !v2 => (DistReg::Pidr2, WORD),
            // GICD_TYPER2 (0x00c) reads 0: no vPEs, no nASSGI. The rest is reserved.
            _ => (DistReg::RazWi, WORD),
        }
    }

    /// The accessing vCPU exists and `offset` lies in the frame: the offset within it.
    fn check_dist(&self, vcpu: usize, offset: u64) -> Result<u32, AccessError> {
        if vcpu >= self.vcpus {
            return Err(AccessError::NoSuchVcpu { vcpu });
        }
        if offset >= u64::from(self.frame_size()) {
            return Err(AccessError::OutsideFrame { offset });
        }
        Ok(offset as u32)
    }

    /// A guest read of the distributor at `offset`, `width` bytes, by `vcpu`.
    pub fn read(&self, vcpu: usize, offset: u64, width: usize) -> Result<u64, AccessError> {
        let offset = self.check_dist(vcpu, offset)?;
        // Tested here, not only inside: GICD_CTLR and GICD_TYPER, the most read, are below
        // the block and should not pay for the call. The call is the read's last step, so
        // nothing of this function is kept in a register across it.
        if INTERRUPT_BLOCK.contains(&offset) {
            return self.read_in_block(vcpu, offset, width);
        }
        self.read_register(vcpu, offset, width)
    }

    /// A read at an offset of the interrupt block's range: one of its registers, or one of
    /// those the range holds besides (GICv2's ITARGETSR). Out of line, with the loops of
    /// the block's registers: inlined, they made every distributor read save and restore
    /// every register it could use (docs/performance.md, "Trapped MMIO accesses").
    #[inline(never)]
    fn read_in_block(&self, vcpu: usize, offset: u32, width: usize) -> Result<u64, AccessError> {
        match self.read_block(Frame::Distributor { accessor: vcpu }, offset, width) {
            Some(r) => r,
            None => self.read_register(vcpu, offset, width),
        }
    }

    /// A write at an offset of the interrupt block's range (`write_block`), or None for an
    /// offset the block does not hold. Out of line, as `read_in_block`.
    #[inline(never)]
    fn write_in_block(
        &mut self,
        vcpu: usize,
        offset: u32,
        width: usize,
        value: u64,
    ) -> Option<Result<(), AccessError>> {
        self.write_block(Frame::Distributor { accessor: vcpu }, offset, width, value)
    }

    /// A read of the register at `offset` (within the frame), not in the interrupt block.
    #[inline(always)]
    fn read_register(&self, vcpu: usize, offset: u32, width: usize) -> Result<u64, AccessError> {
        let (reg, allowed) = self.dist_reg(offset);
        check(u64::from(offset), width, allowed)?;
        Ok(match reg {
            DistReg::Ctlr => {
                let enables =
                    u64::from(self.enable_grp0) * CTLR_ENABLE_GRP0 + u64::from(self.enable_grp1) * CTLR_ENABLE_GRP1;
                enables | if self.version == GicVersion::V3 { CTLR_ARE_DS } else { 0 }
            }
            DistReg::Typer => self.typer(),
            DistReg::Iidr => IIDR,
            DistReg::Pidr2 if self.version == GicVersion::V3 => PIDR2_V3,
            DistReg::Pidr2 => PIDR2_V2,
            DistReg::Sgir | DistReg::MessageSpi { .. } | DistReg::RazWi => 0,
            DistReg::Targets(_) | DistReg::SgiPending { .. } | DistReg::Router { .. } => {
                self.read_per_interrupt(vcpu, reg, width)
            }
        })
    }

    /// The registers of `read` that hold a field per interrupt (GICv2's ITARGETSR and SGI
    /// pending registers, GICv3's IROUTER). Out of line: inlined, their loops made `read`
    /// save and restore every register it could use, for GICD_CTLR and GICD_TYPER too
    /// (docs/performance.md, "Trapped MMIO accesses").
    #[inline(never)]
    fn read_per_interrupt(&self, vcpu: usize, reg: DistReg, width: usize) -> u64 {
        match reg {
            DistReg::Targets(first) => {
                (0..width as u32).fold(0, |v, i| v | (self.targets_byte(vcpu, first + i) << (8 * i)))
            }
            DistReg::SgiPending { first, .. } => (0..width as u32).fold(0, |v, i| {
                let sgi = first + i;
                let sources = self.irq(vcpu, sgi).map_or(0, |&s| self.redistributors[vcpu].sgi_pending_sources(sgi, s));
                v | (u64::from(sources) << (8 * i))
            }),
            DistReg::Router { intid, high } => match self.route_slot(intid) {
                Some(r) if !high => u64::from(self.route[r]),
                _ => 0,
            },
            DistReg::Ctlr
            | DistReg::Typer
            | DistReg::Iidr
            | DistReg::Pidr2
            | DistReg::Sgir
            | DistReg::MessageSpi { .. }
            | DistReg::RazWi => 0,
        }
    }

    /// A guest write of the distributor. vCPUs that may have a new interrupt to show are
    /// added to the kick set (`take_kicks`).
    pub fn write(&mut self, vcpu: usize, offset: u64, width: usize, value: u64) -> Result<(), AccessError> {
        let offset = self.check_dist(vcpu, offset)?;
        // GICv2's GICD_SGIR, a word (every SGI a GICv2 guest sends), before any decode; any
        // other width of it is refused below, as `dist_reg` says.
        if offset == SGIR && width == 4 && self.version == GicVersion::V2 {
            self.write_sgir(vcpu, value as u32);
            return Ok(());
        }
        // As in `read`: GICD_CTLR is outside the block and should not pay for its decode.
        if INTERRUPT_BLOCK.contains(&offset) {
            if let Some(r) = self.write_in_block(vcpu, offset, width, value) {
                return r;
            }
        }
        let (reg, allowed) = self.dist_reg(offset);
        check(u64::from(offset), width, allowed)?;
        match reg {
            DistReg::Ctlr => {
                let (grp0, grp1) = (value & CTLR_ENABLE_GRP0 != 0, value & CTLR_ENABLE_GRP1 != 0);
                if (grp0, grp1) != (self.enable_grp0, self.enable_grp1) {
                    (self.enable_grp0, self.enable_grp1) = (grp0, grp1);
                    self.kicks = self.kicks | VcpuMask::first(self.vcpus);
                }
            }
            DistReg::Targets(first) => {
                for i in 0..width as u32 {
                    self.write_targets_byte(first + i, (value >> (8 * i)) as u8);
                }
            }
            DistReg::Sgir => self.write_sgir(vcpu, value as u32),
            DistReg::MessageSpi { set } => self.write_message_spi(value as u32 & MESSAGE_INTID, set),
            DistReg::SgiPending { set, first } => {
                for i in 0..width as u32 {
                    self.write_sgi_pending(vcpu, first + i, (value >> (8 * i)) as u8, set);
                }
            }
            DistReg::Router { intid, high: false } => {
                if let Some(r) = self.route_slot(intid) {
                    self.set_route(r, value as u32 & IROUTER_MASK);
                }
            }
            DistReg::Router { high: true, .. } | DistReg::Typer | DistReg::Iidr | DistReg::Pidr2 | DistReg::RazWi => {}
        }
        Ok(())
    }

    /// GICD_TYPER: ITLinesNumber [4:0]; GICv3: IDbits [23:19], MBIS [16] (the SPI
    /// doorbells above), LPIS [17] with an ITS, no extended SPIs, A3V = 0, RSS = 0 (IHI
    /// 0069H 12.9, GICD_TYPER); GICv2: CPUNumber [7:5] (IHI 0048B 4.3.2). IDbits is 10 bits
    /// without LPIs and 14 with them, the fewest that reach INTID 8192 and above (IHI
    /// 0069H 5.1: the LPI configuration table then covers INTIDs 8192 to 16383).
    fn typer(&self) -> u64 {
        // 32 * (ITLinesNumber + 1) INTIDs: 32 private ones, then the SPIs in blocks of 32.
        // At most 988 SPIs and 8 vCPUs: in 32 bits.
        let lines = (self.spis as u32).div_ceil(32);
        u64::from(match self.version {
            GicVersion::V3 if self.lpis > 0 => lines | (13 << 19) | TYPER_MBIS | TYPER_LPIS,
            GicVersion::V3 => lines | (9 << 19) | TYPER_MBIS,
            GicVersion::V2 => lines | ((self.vcpus as u32 - 1) << 5),
        })
    }

    /// A write of GICD_SETSPI_NSR (`set`) or GICD_CLRSPI_NSR naming `intid` (IHI 0069H
    /// 12.9.23, 12.9.3): an edge-triggered SPI is made pending, or its pending state removed,
    /// as by GICD_ISPENDR / GICD_ICPENDR; a level-sensitive one is asserted until the
    /// GICD_CLRSPI_NSR write deasserts it, as its input would be. A value naming no SPI of
    /// the VM has no effect. A passthrough SPI is its board device's to assert: neither
    /// register moves its input, which would have the hypervisor deactivate a physical
    /// interrupt that never fired.
    fn write_message_spi(&mut self, intid: u32, set: bool) {
        if self.route_slot(intid).is_none() {
            return;
        }
        let Some(&s) = self.irq(0, intid) else { return };
        if s.edge() {
            let reg = if set { BitReg::SetPending } else { BitReg::ClearPending };
            self.write_bits(Frame::Distributor { accessor: 0 }, reg, intid / 32, 1 << (intid % 32));
        } else if s.hw().is_none() {
            let _ = self.set_level(crate::IntId(intid), 0, set);
        }
    }

    fn route_slot(&self, intid: u32) -> Option<usize> {
        let slot = (intid as usize).checked_sub(32)?;
        (slot < self.spis).then_some(slot)
    }

    /// Changes an SPI's routing; the vCPUs it leaves and reaches both look again.
    fn set_route(&mut self, slot: usize, route: u32) {
        let intid = slot as u32 + 32;
        if self.route[slot] != route {
            self.kick_target(0, intid);
            self.route[slot] = route;
            self.kick_target(0, intid);
        }
    }

    /// GICD_ITARGETSR byte for `intid` (IHI 0048B 4.3.12): SGIs and PPIs read the accessing
    /// CPU's own bit and are read-only; with one CPU, all are RAZ/WI.
    fn targets_byte(&self, vcpu: usize, intid: u32) -> u64 {
        if self.vcpus == 1 {
            0
        } else if intid < 32 {
            1 << vcpu
        } else {
            self.route_slot(intid).map_or(0, |r| u64::from(self.route[r] & 0xff))
        }
    }

    fn write_targets_byte(&mut self, intid: u32, byte: u8) {
        if self.vcpus > 1 {
            if let Some(r) = self.route_slot(intid) {
                self.set_route(r, u32::from(byte & self.v2_cpu_mask()));
            }
        }
    }

    /// GICD_SPENDSGIR / GICD_CPENDSGIR byte for `sgi` of the accessing vCPU: one bit per
    /// source CPU (IHI 0048B 4.3.16, 4.3.17).
    fn write_sgi_pending(&mut self, vcpu: usize, sgi: u32, sources: u8, set: bool) {
        let sources = sources & self.v2_cpu_mask();
        let Some(rd) = self.redistributors.get_mut(vcpu) else { return };
        let in_lr = rd.sgi_lr_source.get(sgi as usize).map_or(0, |s| s & 7);
        let before = (rd.sgi_sources(sgi), rd.irq(sgi).copied());
        if let Some(waiting) = rd.sgi_sources_mut(sgi) {
            if set {
                *waiting |= sources;
            } else {
                *waiting &= !sources;
            }
        }
        if !set && sources & (1 << in_lr) != 0 {
            if let Some(s) = rd.irq_mut(sgi) {
                s.set_lr_pending(false);
            }
        }
        if before != (rd.sgi_sources(sgi), rd.irq(sgi).copied()) {
            self.kicks.insert(vcpu);
        }
    }
}
