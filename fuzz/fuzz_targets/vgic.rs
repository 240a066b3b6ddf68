//! The virtual GIC under any sequence of guest register accesses (GICD, and GICR or the
//! banked GICv2 registers), SGIs, device lines, hardware mappings, and list register round
//! trips with a guest that acknowledges and deactivates what it sees (and deactivates by
//! INTID what no list register shows, which only EOIcount counts; with EOImode 1, by DIR,
//! trapped on GICv3 while the hypervisor asks), on GICv3 and GICv2; on a GICv3 with LPIs,
//! its ITS's registers and command queue, the LPI configuration table in a RAM the input
//! writes, and devices' MSIs; with or without the board's GICv4.0 injecting the LPIs
//! (vgic::VlpiCommand, applied to a model of the board's ITS).
//! Checked: no panic; no list register beyond the implemented ones is touched; after every
//! step, every interrupt that is not quiet is in the live masks (or it would never be
//! shown: `Distributor::live_masks_cover_every_busy_interrupt`), and every LPI that is
//! active is shown active by a list register (no EOI would end it otherwise: docs/vgic.md,
//! "LPIs"); with the board injecting them, the board's commands are ones it accepts (no
//! mapping twice, nothing of an unmapped event), it maps exactly the LPIs the guest's ITS
//! routes, to their vCPU, and the vGIC holds no LPI pending or active (docs/vgic.md,
//! "Direct injection of LPIs (GICv4.0)").
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;

use vgic::{
    Distributor, GicVersion, GichLr, GuestMemory, IchLr, IntId, LineSampler, ListRegister, ListRegisters, LrState,
    Maintenance, OutsideRam, RetiredLines, SgiRegister, VcpuInterfaceState, VgicConfig, VlpiCommand, FIRST_LPI,
};

/// The board's ITS as the VM's commands leave it: each LPI's vPE (its vCPU), if mapped.
#[derive(Default)]
struct Board {
    mapped: std::collections::BTreeMap<u32, usize>,
}

impl Board {
    fn apply(&mut self, c: VlpiCommand) {
        match c {
            VlpiCommand::Map { lpi, vcpu } => assert!(self.mapped.insert(lpi, vcpu).is_none(), "{lpi} mapped twice"),
            VlpiCommand::Move { lpi, vcpu } => *self.mapped.get_mut(&lpi).expect("a move of an unmapped event") = vcpu,
            VlpiCommand::Discard { lpi } => assert!(self.mapped.remove(&lpi).is_some(), "discard of {lpi} unmapped"),
            VlpiCommand::Configure { lpi, mapped, .. } => {
                assert_eq!(mapped, self.mapped.contains_key(&lpi), "INV of {lpi} only if mapped")
            }
            VlpiCommand::Raise { lpi } | VlpiCommand::Clear { lpi } => {
                assert!(self.mapped.contains_key(&lpi), "{c:?} of an unmapped event")
            }
        }
    }
}

/// The VM's RAM the ITS's queue and the LPI configuration table are read from: 64 KiB at
/// 0x4000_0000, written by the input.
const RAM: u64 = 0x4000_0000;
struct Ram(RefCell<Vec<u8>>);
impl GuestMemory for Ram {
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), OutsideRam> {
        let at = usize::try_from(ipa.checked_sub(RAM).ok_or(OutsideRam)?).map_err(|_| OutsideRam)?;
        let ram = self.0.borrow();
        buf.copy_from_slice(ram.get(at..at.checked_add(buf.len()).ok_or(OutsideRam)?).ok_or(OutsideRam)?);
        Ok(())
    }
}

/// List registers as the hardware keeps them, with a guest that takes and completes
/// interrupts.
struct Lrs {
    version: GicVersion,
    regs: [u64; 16],
    count: usize,
    /// ICH_HCR_EL2.EOIcount: the guest's deactivations that found no list register.
    eoi_count: u32,
    /// ICH_VMCR_EL2.VEOIM: the guest's EOImode is 1.
    eoi_split: bool,
    /// ICH_HCR_EL2.TDIR, which the GICv3 list-register file sets with LRENPIE.
    dir_traps: bool,
}

impl Lrs {
    fn decode(&self, i: usize) -> ListRegister {
        match self.version {
            GicVersion::V3 => IchLr(self.regs[i]).decode(),
            GicVersion::V2 => GichLr(self.regs[i] as u32).decode(),
        }
    }
    fn set_state(&mut self, i: usize, state: LrState) {
        let lr = ListRegister { state, ..self.decode(i) };
        self.regs[i] = match self.version {
            GicVersion::V3 => IchLr::encode(&lr).0,
            GicVersion::V2 => u64::from(GichLr::encode(&lr).0),
        };
    }
    /// The guest acknowledges list register `i` if pending, or deactivates it if active.
    fn guest(&mut self, i: usize) {
        let i = i % self.count;
        match self.decode(i).state {
            LrState::Pending => self.set_state(i, LrState::Active),
            LrState::Active => self.set_state(i, LrState::Invalid),
            LrState::PendingActive => self.set_state(i, LrState::Pending),
            LrState::Invalid => {}
        }
    }
    /// The list register that shows `intid` active, if one does.
    fn shown_active(&self, intid: u32) -> Option<usize> {
        (0..self.count).find(|&i| self.decode(i).vintid.0 == intid && self.decode(i).state.active())
    }
    /// The guest's EOI of `intid`: with EOImode 0 its deactivation; with EOImode 1 a
    /// priority drop, counted all the same when no list register shows it (as QEMU does).
    fn end(&mut self, intid: u32) {
        if !self.eoi_split || intid >= FIRST_LPI {
            // An LPI's EOI deactivates it whatever the EOImode (QEMU's icv_eoir_write).
            self.deactivate(intid);
        } else if self.shown_active(intid).is_none() {
            self.eoi_count = (self.eoi_count + 1) % 32;
        }
    }
    /// Deactivates `intid` (an EOI with EOImode 0, a DIR with EOImode 1): the list register
    /// that shows it active, or the count when none does (but for an LPI, as QEMU does).
    fn deactivate(&mut self, intid: u32) {
        match self.shown_active(intid) {
            Some(i) if self.decode(i).state == LrState::PendingActive => self.set_state(i, LrState::Pending),
            Some(i) => self.set_state(i, LrState::Invalid),
            None if intid >= FIRST_LPI => {}
            None => self.eoi_count = (self.eoi_count + 1) % 32,
        }
    }
}

impl ListRegisters for Lrs {
    fn count(&self) -> usize {
        self.count
    }
    fn read_lr(&self, n: usize) -> u64 {
        assert!(n < self.count, "read of LR {n} beyond {}", self.count);
        self.regs[n]
    }
    fn write_lr(&mut self, n: usize, value: u64) {
        assert!(n < self.count, "write of LR {n} beyond {}", self.count);
        self.regs[n] = value;
    }
    /// ICH_ELRSR_EL2 or GICH_ELRSR0: list registers 0 to 31 only.
    fn empty_status(&self) -> u32 {
        (0..self.count.min(32))
            .filter(|&i| {
                let lr = self.decode(i);
                lr.state == LrState::Invalid && (lr.hw.is_some() || !lr.eoi_maintenance)
            })
            .fold(0, |m, i| m | 1 << i)
    }
    fn eoi_status(&self) -> u32 {
        (0..self.count.min(32))
            .filter(|&i| {
                let lr = self.decode(i);
                lr.state == LrState::Invalid && lr.hw.is_none() && lr.eoi_maintenance
            })
            .fold(0, |m, i| m | 1 << i)
    }
    /// Writing ICH_HCR_EL2 clears EOIcount (`ListRegisterFile::set_maintenance`).
    fn set_maintenance(&mut self, maintenance: Maintenance) {
        self.eoi_count = 0;
        self.dir_traps = self.version == GicVersion::V3 && maintenance.entry_not_present;
    }
    fn take_eoi_count(&mut self) -> u32 {
        core::mem::take(&mut self.eoi_count)
    }
    fn eoi_split(&self) -> bool {
        self.eoi_split
    }
}

struct Sampler(bool);
impl LineSampler for Sampler {
    fn is_asserted(&mut self, _: IntId, _: IntId) -> bool {
        self.0
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Read {
        vcpu: u8,
        offset: u16,
        width: u8,
    },
    Write {
        vcpu: u8,
        offset: u16,
        width: u8,
        value: u64,
    },
    ReadRedistributor {
        offset: u32,
        width: u8,
    },
    WriteRedistributor {
        offset: u32,
        width: u8,
        value: u64,
    },
    Sgi {
        source: u8,
        register: u8,
        value: u64,
    },
    Level {
        intid: u16,
        vcpu: u8,
        high: bool,
    },
    Edge {
        intid: u16,
        vcpu: u8,
    },
    Hw {
        intid: u16,
        vcpu: u8,
        physical: Option<u16>,
    },
    /// Entry, the guest's turn on list register `lr`, exit (with the lines sampled so).
    Run {
        vcpu: u8,
        lr: u8,
        line_high: bool,
    },
    /// Entry, the guest's EOI of `intid`, exit.
    End {
        vcpu: u8,
        intid: u16,
    },
    /// Entry, the guest's DIR of `value` (trapped, or done by the CPU interface), exit.
    Dir {
        vcpu: u8,
        value: u64,
    },
    /// The guest's EOImode (ICC_CTLR_EL1.EOImode, ICH_VMCR_EL2.VEOIM).
    EoiMode {
        vcpu: u8,
        split: bool,
    },
    Put {
        vcpu: u8,
    },
    ReadIts {
        offset: u32,
        width: u8,
    },
    WriteIts {
        offset: u32,
        width: u8,
        value: u64,
    },
    /// Eight bytes of the RAM: a command, a configuration byte.
    Ram {
        at: u16,
        bytes: [u8; 8],
    },
    Msi {
        device: u16,
        event: u16,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    v3: bool,
    vcpus: u8,
    spis: u16,
    lpis: u8,
    /// The board's GICv4.0 injects the LPIs.
    direct: bool,
    list_registers: u8,
    ops: Vec<Op>,
}

fn width(w: u8) -> usize {
    1 << (w % 4)
}

fuzz_target!(|input: Input| {
    let version = if input.v3 { GicVersion::V3 } else { GicVersion::V2 };
    let lpis = if input.v3 { usize::from(input.lpis % 65) } else { 0 };
    let config =
        VgicConfig { version, vcpus: usize::from(input.vcpus % 9), spis: usize::from(input.spis % 1100), lpis };
    let Ok(mut g) = Distributor::new(config) else { return };
    let direct = input.direct && g.inject_lpis_directly().is_ok();
    let mut board = Board::default();
    let ram = Ram(RefCell::new(vec![0; 0x1_0000]));
    let mut lrs: Vec<Lrs> = (0..config.vcpus)
        .map(|_| Lrs {
            version,
            regs: [0; 16],
            count: usize::from(input.list_registers % 16) + 1,
            eoi_count: 0,
            eoi_split: false,
            dir_traps: false,
        })
        .collect();
    // Each vCPU's list-register state, which the hypervisor keeps under the vCPU's own lock.
    let mut lists = vec![VcpuInterfaceState::EMPTY; config.vcpus];
    for op in input.ops.iter().take(1024) {
        match *op {
            Op::Read { vcpu, offset, width: w } => {
                let _ = g.read(usize::from(vcpu), u64::from(offset), width(w));
            }
            Op::Write { vcpu, offset, width: w, value } => {
                let _ = g.write(usize::from(vcpu), u64::from(offset), width(w), value);
            }
            Op::ReadRedistributor { offset, width: w } => {
                let _ = g.read_redistributor(u64::from(offset), width(w));
            }
            Op::WriteRedistributor { offset, width: w, value } => {
                let _ = g.write_redistributor_in(u64::from(offset), width(w), value, &ram);
            }
            Op::Sgi { source, register, value } => {
                let register = [SgiRegister::Sgi1r, SgiRegister::Asgi1r, SgiRegister::Sgi0r][usize::from(register % 3)];
                let _ = g.generate_sgi(usize::from(source), register, value);
            }
            Op::Level { intid, vcpu, high } => {
                let _ = g.set_level(IntId(u32::from(intid)), usize::from(vcpu), high);
            }
            Op::Edge { intid, vcpu } => {
                let _ = g.inject_edge(IntId(u32::from(intid)), usize::from(vcpu));
            }
            Op::Hw { intid, vcpu, physical } => {
                let _ = g.set_hw(IntId(u32::from(intid)), usize::from(vcpu), physical.map(|p| IntId(u32::from(p))));
            }
            Op::Run { vcpu, lr, line_high } => {
                round_trip(&mut g, &mut lrs, &mut lists, vcpu, line_high, |l, _, _| l.guest(usize::from(lr)));
            }
            Op::End { vcpu, intid } => {
                round_trip(&mut g, &mut lrs, &mut lists, vcpu, true, |l, _, _| l.end(u32::from(intid)));
            }
            Op::Dir { vcpu, value } => {
                let v = usize::from(vcpu);
                round_trip(&mut g, &mut lrs, &mut lists, vcpu, true, |l, g, state| {
                    if l.dir_traps {
                        let _ = g.deactivate_by_dir(v, state, l, value, &mut RetiredLines::default());
                    } else if l.eoi_split {
                        l.deactivate(value as u32 & 0xff_ffff);
                    }
                });
            }
            Op::EoiMode { vcpu, split } => {
                if let Some(l) = lrs.get_mut(usize::from(vcpu)) {
                    l.eoi_split = split;
                }
            }
            Op::Put { vcpu } => {
                let v = usize::from(vcpu);
                if let (Some(l), Some(state)) = (lrs.get_mut(v), lists.get_mut(v)) {
                    let _ = g.put(v, state, l);
                }
            }
            Op::ReadIts { offset, width: w } => {
                let _ = g.read_its(u64::from(offset), width(w), &ram);
            }
            Op::WriteIts { offset, width: w, value } => {
                let _ = g.write_its(u64::from(offset), width(w), value, &ram);
            }
            Op::Ram { at, bytes } => {
                let at = usize::from(at) & !7;
                ram.0.borrow_mut()[at..at + 8].copy_from_slice(&bytes);
            }
            Op::Msi { device, event } => {
                let _ = g.send_msi(u32::from(device), u32::from(event));
            }
        }
        let _ = g.take_kicks();
        g.sync_direct(|c| board.apply(c));
        if direct {
            for lpi in (FIRST_LPI..).take(lpis) {
                assert_eq!(board.mapped.get(&lpi).copied(), g.lpi_target(IntId(lpi)), "LPI {lpi}'s mapping");
                for vcpu in 0..config.vcpus {
                    let s = g.interrupt(vcpu, IntId(lpi)).expect("one of the VM's LPIs");
                    assert!(!s.pending && !s.active, "LPI {lpi} pending or active in the vGIC");
                }
            }
        }
        assert!(g.live_masks_cover_every_busy_interrupt(), "an interrupt that is not quiet fell out of the live masks");
        for lpi in (FIRST_LPI..).take(lpis) {
            if g.interrupt(0, IntId(lpi)).is_ok_and(|s| s.active) {
                assert!(
                    lrs.iter().any(|l| l.shown_active(lpi).is_some()),
                    "LPI {lpi} active with no list register showing it"
                );
            }
        }
    }
});

/// Entry of `vcpu`, the guest's `turn` (given its list registers, and the vGIC and the
/// vCPU's state for a trapped access), exit, with the lines of hardware-mapped level
/// interrupts sampled as `line_high`.
fn round_trip(
    g: &mut Distributor,
    lrs: &mut [Lrs],
    lists: &mut [VcpuInterfaceState],
    vcpu: u8,
    line_high: bool,
    turn: impl FnOnce(&mut Lrs, &mut Distributor, &mut VcpuInterfaceState),
) {
    let v = usize::from(vcpu);
    let (Some(l), Some(state)) = (lrs.get_mut(v), lists.get_mut(v)) else { return };
    let _ = g.flush_to_hw(v, state, l);
    turn(l, g, state);
    if !state.came_back_unchanged(l) {
        let _ = g.sync_from_hw_sampling(v, state, l, &mut Sampler(line_high), &mut RetiredLines::default());
    }
}
