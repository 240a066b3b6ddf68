//! GICv3 redistributors (IHI 0069H 12.10, 12.11): one per vCPU, each an RD frame (control,
//! identification, GICR_WAKER) and an SGI frame holding that vCPU's private interrupts.
//! `Redistributor` is also where a GICv2 VM keeps each vCPU's banked private interrupts
//! and its SGIs' per-source pending state.

use crate::its::GuestMemory;
use crate::lpi::LpiRegisters;
use crate::mask::{set_bits, Cache};
use crate::mmio::{check, Frame, WORD, WORD_OR_DOUBLE};
use crate::state::IrqState;
use crate::{AccessError, Distributor, GicVersion};

/// One redistributor's address space: an RD frame and an SGI frame of 64 KiB each.
pub const GICR_FRAME_SIZE: u64 = 0x2_0000;
const SGI_FRAME: u64 = 0x1_0000;

const GICR_CTLR: u64 = 0x0000;
const GICR_IIDR: u64 = 0x0004;
const GICR_TYPER: u64 = 0x0008;
const GICR_TYPER_HIGH: u64 = 0x000c;
const GICR_WAKER: u64 = 0x0014;
const GICR_PROPBASER: u64 = 0x0070;
const GICR_PENDBASER: u64 = 0x0078;
const CTLR_ENABLE_LPIS: u64 = 1;
const TYPER_PLPIS: u64 = 1;
const GICR_PIDR2: u64 = 0xffe8;

const WAKER_PROCESSOR_SLEEP: u64 = 1 << 1;
const WAKER_CHILDREN_ASLEEP: u64 = 1 << 2;

/// One vCPU's private interrupts and what goes with them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Redistributor {
    /// Changed only through `irq_mut`, which keeps `live`.
    irqs: [IrqState; 32],
    /// GICv2: per SGI, the source CPUs it is pending from and not yet in a list register
    /// (IHI 0048B 4.3.16): two sources are two interrupts, neither may be lost. Changed only
    /// through `sgi_sources_mut`, which keeps `live`.
    sgi_sources: [u8; 16],
    /// GICv2: the source of the SGI in a list register (pending or active there).
    pub(crate) sgi_lr_source: [u8; 16],
    /// GICR_WAKER.ProcessorSleep.
    pub(crate) processor_sleep: bool,
    /// GICR_CTLR.EnableLPIs, GICR_PROPBASER and GICR_PENDBASER (`crate::lpi`).
    pub(crate) lpi: LpiRegisters,
    /// Bit n set: private interrupt n may not be quiet. Set whenever its state may change,
    /// cleared when it is found quiet, so that finding what to show a vCPU (on every
    /// interrupt it is sent) looks at those few instead of all 32.
    live: Cache<u32>,
}

impl Redistributor {
    pub(crate) const fn new(irqs: [IrqState; 32]) -> Redistributor {
        Redistributor {
            irqs,
            sgi_sources: [0; 16],
            sgi_lr_source: [0; 16],
            processor_sleep: true,
            lpi: LpiRegisters { propbaser: 0, pendbaser: 0, enabled: false },
            live: Cache(u32::MAX),
        }
    }

    pub(crate) fn irq(&self, intid: u32) -> Option<&IrqState> {
        self.irqs.get(intid as usize)
    }
    pub(crate) fn irq_mut(&mut self, intid: u32) -> Option<&mut IrqState> {
        let irq = self.irqs.get_mut(intid as usize)?;
        self.live.0 |= 1 << intid;
        Some(irq)
    }

    /// GICv2: the sources `sgi` is pending from, not counting one in a list register.
    pub(crate) fn sgi_sources(&self, sgi: u32) -> u8 {
        self.sgi_sources.get(sgi as usize).copied().unwrap_or(0)
    }
    pub(crate) fn sgi_sources_mut(&mut self, sgi: u32) -> Option<&mut u8> {
        let sources = self.sgi_sources.get_mut(sgi as usize)?;
        self.live.0 |= 1 << sgi;
        Some(sources)
    }

    /// GICv2: `sgi` from `source` is shown pending in a list register.
    pub(crate) fn sgi_to_lr(&mut self, sgi: u32, source: u8) {
        if let Some(sources) = self.sgi_sources_mut(sgi) {
            *sources &= !(1 << (source & 7));
        }
        if let Some(s) = self.irq_mut(sgi) {
            s.set_lr_pending(true);
        }
    }

    /// GICv2: the pending state `sgi` showed in a list register goes back to its source.
    pub(crate) fn sgi_from_lr(&mut self, sgi: u32) {
        let source = self.sgi_lr_source.get(sgi as usize).map_or(0, |s| s & 7);
        let Some(s) = self.irq_mut(sgi).filter(|s| s.lr_pending()) else { return };
        s.set_lr_pending(false);
        if let Some(sources) = self.sgi_sources_mut(sgi) {
            *sources |= 1 << source;
        }
    }

    /// The private interrupts that may not be quiet (a bit per INTID).
    pub(crate) fn live(&self) -> u64 {
        u64::from(self.live.0)
    }

    /// Clears the live bits of the private interrupts that turned out quiet.
    pub(crate) fn forget_quiet(&mut self) {
        for intid in set_bits(self.live()) {
            if self.irqs[intid].quiet() && self.sgi_sources(intid as u32) == 0 {
                self.live.0 &= !(1 << intid);
            }
        }
    }

    /// The invariant behind `live`: every private interrupt that is not quiet has its bit.
    pub(crate) fn live_covers_every_busy_interrupt(&self) -> bool {
        (0..32u32).all(|i| (self.irqs[i as usize].quiet() && self.sgi_sources(i) == 0) || self.live() & (1 << i) != 0)
    }

    /// GICR_WAKER.ProcessorSleep: the guest has not yet woken this redistributor.
    pub fn processor_sleep(&self) -> bool {
        self.processor_sleep
    }

    /// GICv2: the sources `sgi` is pending from, including one already in a list register.
    pub(crate) fn sgi_pending_sources(&self, sgi: u32, irq: IrqState) -> u8 {
        let waiting = self.sgi_sources(sgi);
        let in_lr = self.sgi_lr_source.get(sgi as usize).copied().unwrap_or(0);
        waiting | if irq.lr_pending() { 1 << (in_lr & 7) } else { 0 }
    }
}

impl Distributor {
    fn redistributor_at(&self, offset: u64) -> Result<(usize, u64), AccessError> {
        if self.version != GicVersion::V3 {
            return Err(AccessError::NotPresent { offset });
        }
        let vcpu = usize::try_from(offset / GICR_FRAME_SIZE).unwrap_or(usize::MAX);
        if vcpu >= self.vcpus {
            return Err(AccessError::NoSuchVcpu { vcpu });
        }
        Ok((vcpu, offset % GICR_FRAME_SIZE))
    }

    fn gicr_typer(&self, vcpu: usize) -> u64 {
        let last = u64::from(vcpu + 1 == self.vcpus) << 4;
        let plpis = if self.lpis > 0 { TYPER_PLPIS } else { 0 };
        // Affinity_Value [63:32], Processor_Number [23:8] (what an ITS with GITS_TYPER.PTA
        // = 0 names it by), Last [4], PLPIS [0] with an ITS; no DirectLPI, no vLPIs.
        (Distributor::vcpu_affinity(vcpu) << 32) | ((vcpu as u64 & 0xffff) << 8) | last | plpis
    }

    /// A guest read of the redistributor region, `offset` from its base (vCPU n's
    /// redistributor at n * GICR_FRAME_SIZE).
    pub fn read_redistributor(&self, offset: u64, width: usize) -> Result<u64, AccessError> {
        let (vcpu, off) = self.redistributor_at(offset)?;
        if off >= SGI_FRAME {
            // Within the 64 KiB SGI frame.
            let off = (off - SGI_FRAME) as u32;
            let r = self
                .read_block(Frame::Sgi { vcpu }, off, width)
                .unwrap_or_else(|| check(u64::from(off), width, WORD).map(|()| 0));
            return r.map_err(|e| e.at(offset));
        }
        check(offset, width, Self::rd_widths(off))?;
        let typer = self.gicr_typer(vcpu);
        let rd = &self.redistributors[vcpu];
        let (base, high) = (off & !7, off & 4 != 0);
        if self.lpis > 0 && (base == GICR_PROPBASER || base == GICR_PENDBASER) {
            let reg = if base == GICR_PROPBASER { rd.lpi.propbaser } else { rd.lpi.pendbaser };
            return Ok(match (width, high) {
                (8, _) => reg,
                (_, false) => reg & 0xffff_ffff,
                (_, true) => reg >> 32,
            });
        }
        Ok(match off {
            GICR_IIDR => crate::gicd::IIDR,
            GICR_TYPER if width == 8 => typer,
            GICR_TYPER => typer & 0xffff_ffff,
            GICR_TYPER_HIGH => typer >> 32,
            GICR_WAKER if self.redistributors[vcpu].processor_sleep => WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP,
            GICR_PIDR2 => crate::gicd::PIDR2_V3,
            // GICR_CTLR: EnableLPIs [0]; writes complete at once (RWP = 0).
            GICR_CTLR => u64::from(rd.lpi.enabled),
            // Everything else reserved or unimplemented (GICR_PROPBASER and GICR_PENDBASER
            // without LPIs): RAZ/WI.
            _ => 0,
        })
    }

    /// The widths a register of the RD frame takes: GICR_TYPER, GICR_PROPBASER and
    /// GICR_PENDBASER are 64-bit registers, also accessed as two words (IHI 0069H 12.1.3).
    fn rd_widths(off: u64) -> u8 {
        match off & !7 {
            GICR_TYPER | GICR_PROPBASER | GICR_PENDBASER if off & 4 == 0 => WORD_OR_DOUBLE,
            _ => WORD,
        }
    }

    /// A guest write of the redistributor region, `offset` from its base. A VM with an ITS
    /// passes its RAM (`write_redistributor_in`): setting GICR_CTLR.EnableLPIs reads the
    /// LPI configuration table.
    pub fn write_redistributor(&mut self, offset: u64, width: usize, value: u64) -> Result<(), AccessError> {
        self.write_redistributor_in(offset, width, value, &crate::lpi::NoMemory)
    }

    pub fn write_redistributor_in(
        &mut self,
        offset: u64,
        width: usize,
        value: u64,
        mem: &impl GuestMemory,
    ) -> Result<(), AccessError> {
        let (vcpu, off) = self.redistributor_at(offset)?;
        if off >= SGI_FRAME {
            // Within the 64 KiB SGI frame.
            let off = (off - SGI_FRAME) as u32;
            let r = self
                .write_block(Frame::Sgi { vcpu }, off, width, value)
                .unwrap_or_else(|| check(u64::from(off), width, WORD));
            return r.map_err(|e| e.at(offset));
        }
        check(offset, width, Self::rd_widths(off))?;
        let (base, high) = (off & !7, off & 4 != 0);
        if self.lpis > 0 && (base == GICR_PROPBASER || base == GICR_PENDBASER) {
            self.redistributors[vcpu].lpi.write_base(base == GICR_PENDBASER, value, width, high);
        }
        if off == GICR_CTLR && self.lpis > 0 && value & CTLR_ENABLE_LPIS != 0 {
            self.enable_lpis(vcpu, mem);
        }
        if off == GICR_WAKER {
            // ChildrenAsleep follows ProcessorSleep at once: the handshake of IHI 0069H
            // 12.11.42 completes on the first poll.
            self.redistributors[vcpu].processor_sleep = value & WAKER_PROCESSOR_SLEEP != 0;
        }
        // GICR_CTLR's other bits, GICR_TYPER, GICR_IIDR, PIDR2: read-only or RAZ/WI here.
        Ok(())
    }
}
