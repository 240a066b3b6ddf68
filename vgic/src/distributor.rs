//! The distributor (and, for GICv3, the redistributors) of one VM: register emulation and
//! the state of every interrupt, private ones per vCPU.
//!
//! GICv3 is presented with affinity routing on (GICD_CTLR.ARE forced to 1) and one security
//! state (DS = 1): the private interrupts' registers live in each vCPU's redistributor SGI
//! frame and their distributor copies are RAZ/WI (IHI 0069 12.9). GICv2 banks them in the
//! distributor (IHI 0048B 4.3) and keeps SGIs pending per source CPU.

use alloc::vec;
use alloc::vec::Vec;

use crate::irq::{IntId, IrqState, Trigger};
use crate::lr::{ListRegister, LrState};
use crate::{AccessError, MAX_VCPUS};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GicVersion {
    V2,
    V3,
}

/// One vCPU's redistributor: an RD frame and an SGI frame of 64 KiB each.
pub const GICR_FRAME_SIZE: u64 = 0x2_0000;
const SGI_FRAME: u64 = 0x1_0000;

const GICD_CTLR: u64 = 0x000;
const GICD_TYPER: u64 = 0x004;
const GICD_IIDR: u64 = 0x008;
const GICD_IGROUPR: u64 = 0x080;
const GICD_ISENABLER: u64 = 0x100;
const GICD_ICENABLER: u64 = 0x180;
const GICD_ISPENDR: u64 = 0x200;
const GICD_ICPENDR: u64 = 0x280;
const GICD_ISACTIVER: u64 = 0x300;
const GICD_ICACTIVER: u64 = 0x380;
const GICD_IPRIORITYR: u64 = 0x400;
const GICD_ITARGETSR: u64 = 0x800;
const GICD_ICFGR: u64 = 0xc00;
const GICD_SGIR: u64 = 0xf00;
const GICD_CPENDSGIR: u64 = 0xf10;
const GICD_SPENDSGIR: u64 = 0xf20;
const GICD_IROUTER: u64 = 0x6000;
const GICD_PIDR2_V3: u64 = 0xffe8;
const GICD_PIDR2_V2: u64 = 0xfe8;
/// Our implementer code in GICD_IIDR / GICR_IIDR (JEP106 for Arm, product 0x48 "hyp").
const IIDR: u64 = 0x4800_043b;

const GICR_CTLR: u64 = 0x0000;
const GICR_IIDR: u64 = 0x0004;
const GICR_TYPER: u64 = 0x0008;
const GICR_WAKER: u64 = 0x0014;
const GICR_PIDR2: u64 = 0xffe8;

/// Which register frame an access reaches: the distributor, or a GICR SGI frame (the
/// distributor's layout for one vCPU's private interrupts).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Frame {
    Distributor,
    Sgi,
}

pub struct Vgic {
    version: GicVersion,
    vcpus: usize,
    spis: usize,
    enable_grp0: bool,
    enable_grp1: bool,
    private: Vec<[IrqState; 32]>,
    /// GICv2: for each target vCPU and SGI, the source vCPUs it is pending from.
    sgi_sources: Vec<[u8; 16]>,
    spi: Vec<IrqState>,
    /// GICv3: GICD_IROUTER (affinity); GICv2: GICD_ITARGETSR (a CPU mask).
    route: Vec<u64>,
    /// GICv3: GICR_WAKER.ProcessorSleep.
    asleep: Vec<bool>,
}

/// A pending interrupt ready to go into a list register.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Candidate {
    pub lr: ListRegister,
}

/// GICv3 with ARE: the distributor's copies of the private registers (register bank 0 of
/// the bit and byte arrays) are RAZ/WI.
fn bank_hidden(version: GicVersion, frame: Frame, bank: u64) -> bool {
    version == GicVersion::V3 && bank == 0 && frame == Frame::Distributor
}

fn check_width(offset: u64, bytes: u8, allowed: &[u8]) -> Result<(), AccessError> {
    if !allowed.contains(&bytes) {
        return Err(AccessError::BadWidth { offset, bytes });
    }
    if !offset.is_multiple_of(u64::from(bytes)) {
        return Err(AccessError::Unaligned { offset });
    }
    Ok(())
}

impl Vgic {
    /// A GIC for `vcpus` vCPUs and `spis` shared interrupts (rounded up to a multiple of 32,
    /// at most 988: INTIDs 32..1019).
    pub fn new(version: GicVersion, vcpus: usize, spis: usize) -> Vgic {
        let vcpus = vcpus.clamp(1, MAX_VCPUS);
        let spis = spis.next_multiple_of(32).min(988);
        let mut private = vec![[IrqState::default(); 32]; vcpus];
        for p in private.iter_mut() {
            // SGIs are always enabled-edge in their configuration (ICFGR0 is read-only).
            for sgi in p.iter_mut().take(16) {
                sgi.trigger = Trigger::Edge;
            }
        }
        Vgic {
            version,
            vcpus,
            spis,
            enable_grp0: false,
            enable_grp1: false,
            private,
            sgi_sources: vec![[0; 16]; vcpus],
            spi: vec![IrqState::default(); spis],
            route: vec![if version == GicVersion::V2 { 1 } else { 0 }; spis],
            asleep: vec![true; vcpus],
        }
    }

    pub fn version(&self) -> GicVersion {
        self.version
    }
    pub fn vcpus(&self) -> usize {
        self.vcpus
    }

    fn max_intid(&self) -> u32 {
        32 + self.spis as u32
    }

    /// The state of `intid` as `vcpu` sees it (private interrupts are per vCPU).
    pub fn irq(&self, vcpu: usize, intid: IntId) -> Option<&IrqState> {
        if intid.is_private() {
            self.private.get(vcpu)?.get(intid.0 as usize)
        } else {
            self.spi.get((intid.0 - 32) as usize)
        }
    }

    fn irq_mut(&mut self, vcpu: usize, intid: IntId) -> Option<&mut IrqState> {
        if intid.is_private() {
            self.private.get_mut(vcpu)?.get_mut(intid.0 as usize)
        } else {
            self.spi.get_mut((intid.0 - 32) as usize)
        }
    }

    /// The vCPU an SPI is delivered to.
    pub fn spi_target(&self, intid: IntId) -> Option<usize> {
        let route = *self.route.get((intid.0.checked_sub(32)?) as usize)?;
        let vcpu = match self.version {
            // IROUTER: Interrupt_Routing_Mode (bit 31) = any vCPU, else Aff0 names one.
            GicVersion::V3 if route & (1 << 31) != 0 => 0,
            GicVersion::V3 => (route & 0xff) as usize,
            // ITARGETSR: the lowest CPU in the mask.
            GicVersion::V2 if route & 0xff == 0 => return None,
            GicVersion::V2 => (route & 0xff).trailing_zeros() as usize,
        };
        (vcpu < self.vcpus).then_some(vcpu)
    }

    // Interrupt sources.

    /// A level-sensitive input (an SPI, or a PPI of `vcpu`) goes high or low.
    pub fn set_level(&mut self, vcpu: usize, intid: IntId, level: bool) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.line_level = level;
        }
    }

    /// An edge on an interrupt (an SPI, or a PPI of `vcpu`).
    pub fn inject_edge(&mut self, vcpu: usize, intid: IntId) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.pending_latch = true;
        }
    }

    /// Maps `intid` of `vcpu` to a physical interrupt (the guest's deactivation deactivates
    /// the physical one: passthrough devices and the virtual timer).
    pub fn set_hw(&mut self, vcpu: usize, intid: IntId, physical: Option<u32>) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.hw = physical;
        }
    }

    /// A trapped write of ICC_SGI1R_EL1 (IHI 0069 12.2.23) by `source`: marks the SGI
    /// pending on every target and returns them as a bitmask (the caller kicks those vCPUs).
    /// Targets that name no vCPU are ignored.
    pub fn generate_sgi(&mut self, source: usize, value: u64) -> u32 {
        let intid = ((value >> 24) & 0xf) as usize;
        let target_list = value & 0xffff;
        let aff1 = (value >> 16) & 0xff;
        let aff2 = (value >> 32) & 0xff;
        let aff3 = (value >> 48) & 0xff;
        let irm = value & (1 << 40) != 0;
        let rs = (value >> 44) & 0xf;
        let mut targets = 0u32;
        for vcpu in 0..self.vcpus {
            // Our vCPUs' MPIDRs are Aff0 = index, the other levels zero.
            let selected = if irm {
                vcpu != source
            } else {
                aff1 == 0
                    && aff2 == 0
                    && aff3 == 0
                    && (vcpu as u64) >> 4 == rs
                    && target_list & (1 << (vcpu & 0xf)) != 0
            };
            if selected {
                self.private[vcpu][intid].pending_latch = true;
                targets |= 1 << vcpu;
            }
        }
        targets
    }

    /// GICD_SGIR (IHI 0048B 4.3.15): TargetListFilter [25:24], CPUTargetList [23:16],
    /// SGIINTID [3:0]. Pending is kept per source.
    fn write_sgir(&mut self, source: usize, value: u32) -> u32 {
        let sgi = (value & 0xf) as usize;
        let mask = match (value >> 24) & 3 {
            0 => (value >> 16) & 0xff,
            1 => 0xff & !(1 << source),
            2 => 1 << source,
            _ => 0,
        };
        let mut targets = 0;
        for vcpu in (0..self.vcpus).filter(|v| mask & (1 << v) != 0) {
            self.sgi_sources[vcpu][sgi] |= 1 << source;
            targets |= 1 << vcpu;
        }
        targets
    }

    // Delivery.

    fn group_enabled(&self, irq: &IrqState) -> bool {
        if irq.group1 {
            self.enable_grp1
        } else {
            self.enable_grp0
        }
    }

    /// What `vcpu` should see in its list registers: its deliverable interrupts, highest
    /// priority first (lower value; equal priorities by lower INTID: IHI 0069, "Interrupt prioritization"), only
    /// for enabled groups. GICv2 SGIs appear once per pending source.
    pub fn candidates(&self, vcpu: usize) -> Vec<Candidate> {
        let mut out = Vec::new();
        let Some(private) = self.private.get(vcpu) else { return out };
        let mut push = |intid: u32, irq: &IrqState, source: u8, pending: bool| {
            let state = match (pending, irq.active) {
                (true, true) => LrState::PendingActive,
                (true, false) => LrState::Pending,
                (false, true) => LrState::Active,
                (false, false) => return,
            };
            out.push(Candidate {
                lr: ListRegister {
                    vintid: intid,
                    state,
                    priority: irq.priority,
                    group1: irq.group1,
                    hw: irq.hw,
                    eoi_maintenance: irq.hw.is_none() && irq.trigger == Trigger::Level,
                    source,
                },
            });
        };
        for (i, irq) in private.iter().enumerate() {
            if !irq.enabled || !self.group_enabled(irq) {
                continue;
            }
            if self.version == GicVersion::V2 && i < 16 {
                // One source at a time per SGI; the others stay pending in `sgi_sources`.
                let sources = self.sgi_sources[vcpu][i];
                if irq.active || sources != 0 {
                    let source = if sources != 0 { sources.trailing_zeros() as u8 } else { 0 };
                    push(i as u32, irq, source, sources != 0 && !irq.active);
                }
            } else if irq.deliverable() {
                push(i as u32, irq, 0, irq.pending());
            }
        }
        for (i, irq) in self.spi.iter().enumerate() {
            let intid = IntId(32 + i as u32);
            if irq.deliverable() && self.group_enabled(irq) && self.spi_target(intid) == Some(vcpu) {
                push(intid.0, irq, 0, irq.pending());
            }
        }
        out.sort_by_key(|c| (c.lr.priority, c.lr.vintid));
        out
    }

    /// The list registers `vcpu` left behind on exit: their state becomes the interrupts'
    /// state again. A software level interrupt whose LR became invalid was deactivated: its
    /// line is sampled again (it stays pending while the line is high).
    pub fn sync_from_lrs(&mut self, vcpu: usize, lrs: &[ListRegister]) {
        for lr in lrs {
            let (pending, active) = match lr.state {
                LrState::Invalid => (false, false),
                LrState::Pending => (true, false),
                LrState::Active => (false, true),
                LrState::PendingActive => (true, true),
            };
            if self.version == GicVersion::V2 && lr.vintid < 16 {
                if let Some(sources) = self.sgi_sources.get_mut(vcpu).and_then(|s| s.get_mut(lr.vintid as usize)) {
                    // Delivered (taken) from this source: no longer pending from it.
                    if !pending {
                        *sources &= !(1 << lr.source);
                    }
                }
            }
            if let Some(irq) = self.irq_mut(vcpu, IntId(lr.vintid)) {
                irq.active = active;
                irq.pending_latch = pending && (irq.trigger == Trigger::Edge || irq.pending_latch);
                // A hardware-mapped interrupt the guest has acknowledged is active at the
                // physical level too: it cannot be pending again until the guest deactivates it,
                // and then, if its source is still asserted, it fires as a new physical interrupt.
                if irq.hw.is_some() && lr.state != LrState::Pending {
                    irq.line_level = false;
                }
            }
        }
    }

    // Register emulation.

    /// A guest read of the distributor at `offset`, `bytes` wide, by `vcpu`.
    pub fn read(&mut self, vcpu: usize, offset: u64, bytes: u8) -> Result<u64, AccessError> {
        self.read_frame(vcpu, offset, bytes, Frame::Distributor)
    }

    /// A guest write of the distributor. Returns the vCPUs (bitmask) that may have a new
    /// deliverable interrupt and should be kicked.
    pub fn write(&mut self, vcpu: usize, offset: u64, bytes: u8, value: u64) -> Result<u32, AccessError> {
        self.write_frame(vcpu, offset, bytes, value, Frame::Distributor)
    }

    fn read_frame(&mut self, vcpu: usize, offset: u64, bytes: u8, frame: Frame) -> Result<u64, AccessError> {
        if frame == Frame::Sgi && !Self::in_sgi_frame(offset) {
            check_width(offset, bytes, &[1, 2, 4, 8]).ok();
            return Ok(0);
        }
        if vcpu >= self.vcpus {
            return Err(AccessError::NoSuchVcpu { vcpu });
        }
        if self.version == GicVersion::V3 && (GICD_IROUTER + 32 * 8..GICD_IROUTER + 1020 * 8).contains(&offset) {
            check_width(offset, bytes, &[4, 8])?;
            let n = ((offset - GICD_IROUTER) / 8) as usize;
            let value = self.route.get(n - 32).copied().unwrap_or(0);
            return Ok(if bytes == 4 && offset % 8 == 4 {
                value >> 32
            } else if bytes == 4 {
                value & 0xffff_ffff
            } else {
                value
            });
        }
        self.check_access(offset, bytes)?;
        let version = self.version;
        let hidden = move |n: u64| bank_hidden(version, frame, n);
        let value = match offset {
            GICD_CTLR => {
                let mut v = u64::from(self.enable_grp0) | (u64::from(self.enable_grp1) << 1);
                if self.version == GicVersion::V3 {
                    v |= (1 << 4) | (1 << 6); // ARE, DS
                }
                v
            }
            GICD_TYPER => {
                let lines = (self.max_intid() / 32 - 1) as u64;
                let cpus = if self.version == GicVersion::V2 { ((self.vcpus - 1) as u64) << 5 } else { 0 };
                // IDbits: 10 INTID bits (9 + 1), for GICv3.
                let idbits = if self.version == GicVersion::V3 { 9 << 19 } else { 0 };
                lines | cpus | idbits
            }
            GICD_IIDR => IIDR,
            GICD_PIDR2_V3 if self.version == GicVersion::V3 => 0x3b,
            GICD_PIDR2_V2 if self.version == GicVersion::V2 => 0x2b,
            o if (GICD_IPRIORITYR..GICD_IPRIORITYR + 0x400).contains(&o) => {
                self.read_bytes(vcpu, o - GICD_IPRIORITYR, bytes, frame, |s| u64::from(s.priority))
            }
            o if self.version == GicVersion::V2 && (GICD_ITARGETSR..GICD_ITARGETSR + 0x400).contains(&o) => {
                let mut v = 0;
                for i in 0..u64::from(bytes) {
                    let intid = (o - GICD_ITARGETSR + i) as u32;
                    let t = if intid < 32 {
                        1 << vcpu
                    } else {
                        self.route.get((intid - 32) as usize).copied().unwrap_or(0) & 0xff
                    };
                    if intid < self.max_intid() {
                        v |= t << (8 * i);
                    }
                }
                v
            }
            o if self.version == GicVersion::V2 && (GICD_CPENDSGIR..GICD_SPENDSGIR + 0x10).contains(&o) => {
                let first = ((o - GICD_CPENDSGIR) % 0x10) as usize;
                (0..bytes as usize).fold(0, |v, i| v | u64::from(self.sgi_sources[vcpu][first + i]) << (8 * i))
            }
            o if (GICD_ICFGR..GICD_ICFGR + 0x100).contains(&o) => {
                let n = (o - GICD_ICFGR) / 4;
                if hidden(n / 2) {
                    0
                } else {
                    let mut v = 0;
                    for i in 0..16 {
                        let intid = IntId((n * 16 + i) as u32);
                        if self.irq(vcpu, intid).is_some_and(|s| s.trigger == Trigger::Edge)
                            && intid.0 < self.max_intid()
                        {
                            v |= 2 << (2 * i);
                        }
                    }
                    v
                }
            }
            o if (GICD_IGROUPR..GICD_IPRIORITYR).contains(&o) => {
                let n = (o % 0x80) / 4;
                if hidden(n) {
                    0
                } else {
                    match o & !0x7f {
                        GICD_IGROUPR => self.read_bits(vcpu, n, |s| s.group1),
                        GICD_ISENABLER | GICD_ICENABLER => self.read_bits(vcpu, n, |s| s.enabled),
                        GICD_ISPENDR | GICD_ICPENDR => self.read_bits(vcpu, n, IrqState::pending),
                        _ => self.read_bits(vcpu, n, |s| s.active), // GICD_ISACTIVER, GICD_ICACTIVER
                    }
                }
            }
            // Reserved and unimplemented locations are RES0 (IHI 0069, "GIC register map"): RAZ/WI.
            _ => 0,
        };
        Ok(value)
    }

    fn write_frame(
        &mut self,
        vcpu: usize,
        offset: u64,
        bytes: u8,
        value: u64,
        frame: Frame,
    ) -> Result<u32, AccessError> {
        if frame == Frame::Sgi && !Self::in_sgi_frame(offset) {
            return Ok(0);
        }
        if vcpu >= self.vcpus {
            return Err(AccessError::NoSuchVcpu { vcpu });
        }
        let all = (1u32 << self.vcpus) - 1;
        if self.version == GicVersion::V3 && (GICD_IROUTER + 32 * 8..GICD_IROUTER + 1020 * 8).contains(&offset) {
            check_width(offset, bytes, &[4, 8])?;
            let n = ((offset - GICD_IROUTER) / 8) as usize - 32;
            if let Some(r) = self.route.get_mut(n) {
                // Aff3 [39:32], IRM [31], Aff2/1/0 [23:0]; the rest is RES0.
                const MASK: u64 = 0xff_8000_0000 | 0xff_ffff;
                *r = match (bytes, offset % 8) {
                    (8, _) => value & MASK,
                    (_, 0) => (*r & !0xffff_ffff) | (value & MASK & 0xffff_ffff),
                    _ => (*r & 0xffff_ffff) | ((value << 32) & MASK),
                };
            }
            return Ok(all);
        }
        self.check_access(offset, bytes)?;
        let version = self.version;
        let hidden = move |n: u64| bank_hidden(version, frame, n);
        let value32 = value as u32;
        match offset {
            GICD_CTLR => {
                self.enable_grp0 = value32 & 1 != 0;
                self.enable_grp1 = value32 & 2 != 0;
            }
            GICD_SGIR if self.version == GicVersion::V2 => return Ok(self.write_sgir(vcpu, value32)),
            o if (GICD_IPRIORITYR..GICD_IPRIORITYR + 0x400).contains(&o) => {
                self.write_bytes(vcpu, o - GICD_IPRIORITYR, bytes, value, frame, |s, b| s.priority = b as u8)
            }
            o if self.version == GicVersion::V2 && (GICD_ITARGETSR..GICD_ITARGETSR + 0x400).contains(&o) => {
                for i in 0..u64::from(bytes) {
                    let intid = o - GICD_ITARGETSR + i;
                    // 0-31 are read-only; targets beyond the VM's vCPUs are dropped.
                    if intid >= 32 {
                        if let Some(r) = self.route.get_mut((intid - 32) as usize) {
                            *r = (value >> (8 * i)) & 0xff & u64::from(all);
                        }
                    }
                }
            }
            o if self.version == GicVersion::V2 && (GICD_CPENDSGIR..GICD_SPENDSGIR + 0x10).contains(&o) => {
                let set = o >= GICD_SPENDSGIR;
                let first = ((o - GICD_CPENDSGIR) % 0x10) as usize;
                for i in 0..bytes as usize {
                    let bits = ((value >> (8 * i)) & 0xff) as u8 & all as u8;
                    let s = &mut self.sgi_sources[vcpu][first + i];
                    *s = if set { *s | bits } else { *s & !bits };
                }
            }
            o if (GICD_ICFGR..GICD_ICFGR + 0x100).contains(&o) => {
                let n = (o - GICD_ICFGR) / 4;
                // ICFGR0 (SGIs) is read-only; the private bank is hidden under ARE.
                let max = u64::from(self.max_intid());
                if n != 0 && !hidden(n / 2) {
                    for i in (0..16).filter(|i| n * 16 + i < max) {
                        let edge = value32 & (2 << (2 * i)) != 0;
                        if let Some(s) = self.irq_mut(vcpu, IntId((n * 16 + i) as u32)) {
                            s.trigger = if edge { Trigger::Edge } else { Trigger::Level };
                        }
                    }
                }
            }
            o if (GICD_IGROUPR..GICD_IPRIORITYR).contains(&o) => {
                let n = (o % 0x80) / 4;
                if !hidden(n) {
                    match o & !0x7f {
                        GICD_IGROUPR => self.write_group(vcpu, n, value32),
                        GICD_ISENABLER => self.write_bits(vcpu, n, value32, |s| s.enabled = true),
                        GICD_ICENABLER => self.write_bits(vcpu, n, value32, |s| s.enabled = false),
                        GICD_ISPENDR => self.write_bits(vcpu, n, value32, |s| s.pending_latch = true),
                        GICD_ICPENDR => self.write_bits(vcpu, n, value32, |s| s.pending_latch = false),
                        GICD_ISACTIVER => self.write_bits(vcpu, n, value32, |s| s.active = true),
                        _ => self.write_bits(vcpu, n, value32, |s| s.active = false), // GICD_ICACTIVER
                    }
                }
            }
            _ => {} // read-only or reserved: WI
        }
        Ok(all)
    }

    /// The registers of a GICR SGI frame (IHI 0069 12.11): the distributor's layout for
    /// INTIDs 0-31 only (IGROUPR0 to ICACTIVER0, IPRIORITYR0-7, ICFGR0-1).
    fn in_sgi_frame(offset: u64) -> bool {
        matches!(
            offset,
            GICD_IGROUPR
                | GICD_ISENABLER
                | GICD_ICENABLER
                | GICD_ISPENDR
                | GICD_ICPENDR
                | GICD_ISACTIVER
                | GICD_ICACTIVER
        ) || (GICD_IPRIORITYR..GICD_IPRIORITYR + 0x20).contains(&offset)
            || (GICD_ICFGR..GICD_ICFGR + 8).contains(&offset)
    }

    /// The sizes the spec allows at `offset`: bytes for IPRIORITYR (and, on GICv2,
    /// ITARGETSR and the SGI pending registers), words elsewhere; aligned.
    fn check_access(&self, offset: u64, bytes: u8) -> Result<(), AccessError> {
        let v2 = self.version == GicVersion::V2;
        let byte_ok = (GICD_IPRIORITYR..GICD_IPRIORITYR + 0x400).contains(&offset)
            || (v2 && (GICD_ITARGETSR..GICD_ITARGETSR + 0x400).contains(&offset))
            || (v2 && (GICD_CPENDSGIR..GICD_SPENDSGIR + 0x10).contains(&offset));
        check_width(offset, bytes, if byte_ok { &[1, 4] } else { &[4] })
    }

    fn private_bank_hidden(&self, intid: u32, frame: Frame) -> bool {
        bank_hidden(self.version, frame, u64::from(intid / 32))
    }

    fn read_bits(&self, vcpu: usize, n: u64, f: impl Fn(&IrqState) -> bool) -> u64 {
        let mut v = 0u64;
        for b in 0..32 {
            let intid = IntId((n * 32 + b) as u32);
            if intid.0 < self.max_intid() && self.irq(vcpu, intid).is_some_and(&f) {
                v |= 1 << b;
            }
        }
        v
    }

    fn write_bits(&mut self, vcpu: usize, n: u64, value: u32, f: impl Fn(&mut IrqState)) {
        let max = self.max_intid();
        for b in (0..32).filter(|b| value & (1 << b) != 0) {
            let intid = IntId((n * 32 + b) as u32);
            if intid.0 < max {
                if let Some(s) = self.irq_mut(vcpu, intid) {
                    f(s);
                }
            }
        }
    }

    fn write_group(&mut self, vcpu: usize, n: u64, value: u32) {
        let max = self.max_intid();
        for b in 0..32 {
            let intid = IntId((n * 32 + b) as u32);
            if intid.0 < max {
                if let Some(s) = self.irq_mut(vcpu, intid) {
                    s.group1 = value & (1 << b) != 0;
                }
            }
        }
    }

    fn read_bytes(&self, vcpu: usize, first: u64, bytes: u8, frame: Frame, f: impl Fn(&IrqState) -> u64) -> u64 {
        let mut v = 0;
        for i in 0..u64::from(bytes) {
            let intid = IntId((first + i) as u32);
            if self.private_bank_hidden(intid.0, frame) {
                continue;
            }
            if let Some(s) = self.irq(vcpu, intid).filter(|_| intid.0 < self.max_intid()) {
                v |= f(s) << (8 * i);
            }
        }
        v
    }

    fn write_bytes(
        &mut self,
        vcpu: usize,
        first: u64,
        bytes: u8,
        value: u64,
        frame: Frame,
        f: impl Fn(&mut IrqState, u64),
    ) {
        let max = self.max_intid();
        for i in 0..u64::from(bytes) {
            let intid = IntId((first + i) as u32);
            if intid.0 >= max || self.private_bank_hidden(intid.0, frame) {
                continue;
            }
            if let Some(s) = self.irq_mut(vcpu, intid) {
                f(s, (value >> (8 * i)) & 0xff);
            }
        }
    }

    /// A guest read of the redistributor region (GICv3) at `offset` from its base.
    pub fn read_redistributor(&mut self, offset: u64, bytes: u8) -> Result<u64, AccessError> {
        let (vcpu, frame_offset) = self.redistributor_of(offset)?;
        if frame_offset >= SGI_FRAME {
            return self.read_frame(vcpu, frame_offset - SGI_FRAME, bytes, Frame::Sgi);
        }
        check_width(frame_offset, bytes, if frame_offset == GICR_TYPER { &[4, 8] } else { &[4] })?;
        Ok(match frame_offset {
            GICR_CTLR => 0,
            GICR_IIDR => IIDR,
            GICR_TYPER | 0x000c => {
                // Affinity [63:32] = our MPIDR (Aff0 = index), Processor_Number [23:8], Last [4].
                let last = u64::from(vcpu + 1 == self.vcpus) << 4;
                let typer = ((vcpu as u64) << 32) | ((vcpu as u64) << 8) | last;
                match (frame_offset, bytes) {
                    (GICR_TYPER, 8) => typer,
                    (GICR_TYPER, _) => typer & 0xffff_ffff,
                    _ => typer >> 32,
                }
            }
            GICR_WAKER => {
                let sleep = u64::from(self.asleep[vcpu]);
                (sleep << 1) | (sleep << 2) // ChildrenAsleep follows ProcessorSleep at once
            }
            GICR_PIDR2 => 0x3b,
            _ => 0,
        })
    }

    /// A guest write of the redistributor region; returns the vCPUs to kick.
    pub fn write_redistributor(&mut self, offset: u64, bytes: u8, value: u64) -> Result<u32, AccessError> {
        let (vcpu, frame_offset) = self.redistributor_of(offset)?;
        if frame_offset >= SGI_FRAME {
            return self.write_frame(vcpu, frame_offset - SGI_FRAME, bytes, value, Frame::Sgi).map(|k| k & (1 << vcpu));
        }
        check_width(frame_offset, bytes, &[4])?;
        if frame_offset == GICR_WAKER {
            self.asleep[vcpu] = value & (1 << 1) != 0;
        }
        Ok(0)
    }

    fn redistributor_of(&self, offset: u64) -> Result<(usize, u64), AccessError> {
        let vcpu = (offset / GICR_FRAME_SIZE) as usize;
        if self.version != GicVersion::V3 || vcpu >= self.vcpus {
            return Err(AccessError::NoSuchVcpu { vcpu });
        }
        Ok((vcpu, offset % GICR_FRAME_SIZE))
    }
}
