//! What every register access shares: the width and alignment rules (IHI 0069H 12.1 and
//! IHI 0048B 4.1, "GIC register access"), and the interrupt register block at offsets 0x080-0xEFF, which has the
//! same layout in the distributor and in a GICv3 redistributor's SGI frame (IHI 0069H 12.10):
//! IGROUPR, I[SC]ENABLER, I[SC]PENDR, I[SC]ACTIVER, IPRIORITYR, ICFGR, IGRPMODR, NSACR.

use crate::{AccessError, Distributor, GicVersion};

/// Allowed access widths, as a mask of the widths in bytes.
pub(crate) const WORD: u8 = 4;
pub(crate) const BYTE_OR_WORD: u8 = 1 | 4;
pub(crate) const WORD_OR_DOUBLE: u8 = 4 | 8;

pub(crate) fn check(offset: u64, width: usize, allowed: u8) -> Result<(), AccessError> {
    if !matches!(width, 1 | 2 | 4 | 8) || allowed & width as u8 == 0 {
        return Err(AccessError::BadWidth { offset, width });
    }
    // The width is a power of two, so the offset's low bits alone say whether it is aligned
    // (a 64-bit remainder cost a 32-bit CPU ten instructions a register access).
    if offset as u32 & (width as u32 - 1) != 0 {
        return Err(AccessError::Unaligned { offset, width });
    }
    Ok(())
}

/// Which frame an access to the interrupt block came through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Frame {
    /// The distributor, accessed by this vCPU (GICv2 banks the private interrupts by it).
    Distributor { accessor: usize },
    /// A GICv3 redistributor's SGI frame: the private interrupts of this vCPU only.
    Sgi { vcpu: usize },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BitReg {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BlockReg {
    Bits(BitReg, u32),
    Priority(u32),
    Config(u32),
    /// IGRPMODR (RAZ/WI with GICD_CTLR.DS = 1: IHI 0069H 12.9, GICD_IGRPMODR<n>), NSACR (RAZ/WI without
    /// two Security states), and the implementation-defined space of GICv2.
    RazWi,
}

/// The offsets of the interrupt block (`block_reg` decodes them).
pub(crate) const INTERRUPT_BLOCK: core::ops::Range<u32> = 0x080..0xf00;

/// The register at `offset` in a frame (of 64 KiB at most, so its offsets are 32-bit: in
/// 64 bits every comparison and subtraction is two instructions on a 32-bit CPU).
fn block_reg(offset: u32) -> Option<(BlockReg, u8)> {
    let n = |base: u32| (offset - base) / 4;
    let reg = match offset {
        0x080..0x100 => (BlockReg::Bits(BitReg::Group, n(0x080)), WORD),
        0x100..0x180 => (BlockReg::Bits(BitReg::SetEnable, n(0x100)), WORD),
        0x180..0x200 => (BlockReg::Bits(BitReg::ClearEnable, n(0x180)), WORD),
        0x200..0x280 => (BlockReg::Bits(BitReg::SetPending, n(0x200)), WORD),
        0x280..0x300 => (BlockReg::Bits(BitReg::ClearPending, n(0x280)), WORD),
        0x300..0x380 => (BlockReg::Bits(BitReg::SetActive, n(0x300)), WORD),
        0x380..0x400 => (BlockReg::Bits(BitReg::ClearActive, n(0x380)), WORD),
        0x400..0x800 => (BlockReg::Priority(offset - 0x400), BYTE_OR_WORD),
        0xc00..0xd00 => (BlockReg::Config(n(0xc00)), WORD),
        0xd00..0xf00 => (BlockReg::RazWi, WORD),
        _ => return None,
    };
    Some(reg)
}

impl Distributor {
    /// The vCPU whose bank holds `intid` for an access through `frame` (ignored for SPIs),
    /// or None where the register is RAZ/WI: the distributor's private bank under affinity
    /// routing (IHI 0069H 12.9: those registers live in the redistributors), INTIDs the VM
    /// does not have, and INTIDs beyond 31 in an SGI frame.
    fn bank(&self, frame: Frame, intid: u32) -> Option<usize> {
        match frame {
            Frame::Distributor { accessor } if intid < 32 => (self.version == GicVersion::V2).then_some(accessor),
            Frame::Distributor { accessor } => (intid < 32 + self.spis as u32).then_some(accessor),
            Frame::Sgi { vcpu } => (intid < 32).then_some(vcpu),
        }
    }

    /// An access in the interrupt block: `None` if `offset` is not in it.
    pub(crate) fn read_block(&self, frame: Frame, offset: u32, width: usize) -> Option<Result<u64, AccessError>> {
        let (reg, allowed) = block_reg(offset)?;
        Some(check(u64::from(offset), width, allowed).map(|()| match reg {
            BlockReg::Bits(reg, n) => u64::from(self.read_bits(frame, reg, n)),
            BlockReg::Priority(first) => (0..width as u32).fold(0, |v, i| {
                let p = self.bank(frame, first + i).and_then(|b| self.irq(b, first + i)).map_or(0, |s| s.priority);
                v | (u64::from(p) << (8 * i))
            }),
            BlockReg::Config(n) => u64::from(self.read_config(frame, n)),
            BlockReg::RazWi => 0,
        }))
    }

    pub(crate) fn write_block(
        &mut self,
        frame: Frame,
        offset: u32,
        width: usize,
        value: u64,
    ) -> Option<Result<(), AccessError>> {
        let (reg, allowed) = block_reg(offset)?;
        if let Err(e) = check(u64::from(offset), width, allowed) {
            return Some(Err(e));
        }
        match reg {
            BlockReg::Bits(reg, n) => self.write_bits(frame, reg, n, value as u32),
            BlockReg::Priority(first) => {
                for i in 0..width as u32 {
                    let byte = (value >> (8 * i)) as u8 & crate::state::PRIORITY_MASK;
                    self.update(frame, first + i, |s| s.priority = byte);
                }
            }
            BlockReg::Config(n) => {
                for i in (0..16).filter(|i| n * 16 + i >= 16) {
                    // Int_config[1] of each field: 1 = edge. SGIs' ICFGR0 is read-only.
                    let edge = value & (2 << (2 * i)) != 0;
                    self.update(frame, n * 16 + i, |s| s.set_edge(edge));
                }
            }
            BlockReg::RazWi => {}
        }
        Some(Ok(()))
    }

    /// Applies `f` to `intid` in the bank `frame` reaches, and kicks its target if that
    /// changed anything.
    fn update(&mut self, frame: Frame, intid: u32, f: impl FnOnce(&mut crate::state::IrqState)) {
        let Some(bank) = self.bank(frame, intid) else { return };
        let Some(s) = self.irq_mut(bank, intid) else { return };
        let before = *s;
        f(s);
        if *s != before {
            self.kick_target(bank, intid);
        }
    }

    fn read_bits(&self, frame: Frame, reg: BitReg, n: u32) -> u32 {
        let mut out = 0;
        for b in 0..32 {
            let intid = n * 32 + b;
            let Some(bank) = self.bank(frame, intid) else { continue };
            let Some(&s) = self.irq(bank, intid) else { continue };
            let set = match reg {
                BitReg::Group => s.group1(),
                BitReg::SetEnable | BitReg::ClearEnable => s.enabled(),
                BitReg::SetPending | BitReg::ClearPending if self.is_v2_sgi(intid) => {
                    self.redistributors[bank].sgi_pending_sources(intid, s) != 0
                }
                BitReg::SetPending | BitReg::ClearPending => s.pending_view(),
                BitReg::SetActive | BitReg::ClearActive => s.active(),
            };
            out |= u32::from(set) << b;
        }
        out
    }

    pub(crate) fn write_bits(&mut self, frame: Frame, reg: BitReg, n: u32, value: u32) {
        for b in 0..32 {
            let intid = n * 32 + b;
            let on = value & (1 << b) != 0;
            // GICv2 SGIs: enables are RAO/WI, and pending is per source, set and cleared
            // through SPENDSGIR/CPENDSGIR only (IHI 0048B 4.3.7, 4.3.8).
            let v2_sgi = self.is_v2_sgi(intid);
            let clears = on && matches!(reg, BitReg::ClearPending | BitReg::ClearActive);
            let was_busy = clears
                && self
                    .bank(frame, intid)
                    .and_then(|b| self.irq(b, intid))
                    .is_some_and(|s| s.pending_view() || s.active());
            self.update(frame, intid, |s| match reg {
                BitReg::Group => s.set_group1(on),
                BitReg::SetEnable if on && !v2_sgi => s.set_enabled(true),
                BitReg::ClearEnable if on && !v2_sgi => s.set_enabled(false),
                BitReg::SetPending if on && !v2_sgi => s.set_latch(true),
                BitReg::ClearPending if on && !v2_sgi => {
                    // A level interrupt whose line is high stays pending (IHI 0069H 12.9, GICD_ICPENDR<n>).
                    s.set_latch(false);
                    s.set_lr_pending(false);
                }
                BitReg::SetActive if on => s.set_active(true),
                BitReg::ClearActive if on => s.set_active(false),
                _ => {}
            });
            if reg == BitReg::ClearActive && on && self.bank(frame, intid).is_some() {
                // No longer active: no longer any vCPU's but the one a list register holds
                // it in.
                self.unpark(intid);
            }
            if was_busy && !self.in_list_register(intid) {
                // A hardware-mapped SPI's physical interrupt stays active until the guest's
                // deactivation reaches it; this write discarded what it would deactivate.
                // (One a list register holds is retired when that register lets it go.)
                self.retire_if_discarded(intid);
            }
        }
    }

    fn read_config(&self, frame: Frame, n: u32) -> u32 {
        let mut out = 0;
        for i in 0..16 {
            let intid = n * 16 + i;
            let edge = self.bank(frame, intid).and_then(|b| self.irq(b, intid)).is_some_and(|s| s.edge());
            out |= u32::from(edge) << (2 * i + 1);
        }
        out
    }
}
