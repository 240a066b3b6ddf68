//! LPIs end to end (IHI 0069H 5.1, 5.3): a guest's ITS set up through its command queue in
//! its RAM, its LPI configuration table there, a device's MSI, and the LPI through the list
//! registers; the redistributor's LPI registers; what the LPIs' state does in the corners
//! (an LPI taken out of a list register while active, one unmapped or moved while shown).

mod common;

use std::cell::RefCell;

use common::*;
use vgic::*;

const RAM: u64 = 0x4000_0000;
const QUEUE: u64 = RAM;
const PROPS: u64 = RAM + 0x1_0000;
const PENDING: u64 = RAM + 0x2_0000;

const GICR_CTLR: u64 = 0x0000;
const GICR_TYPER: u64 = 0x0008;
const GICR_PROPBASER: u64 = 0x0070;
const GICR_PENDBASER: u64 = 0x0078;
const GITS_CTLR: u64 = 0x0000;
const GITS_CBASER: u64 = 0x0080;
const GITS_CWRITER: u64 = 0x0088;

/// The guest's RAM: its ITS command queue, LPI configuration and pending tables.
struct Ram(RefCell<Vec<u8>>);

impl GuestMemory for Ram {
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), OutsideRam> {
        let at = ipa.checked_sub(RAM).ok_or(OutsideRam)? as usize;
        let ram = self.0.borrow();
        buf.copy_from_slice(ram.get(at..at + buf.len()).ok_or(OutsideRam)?);
        Ok(())
    }
}

impl Ram {
    fn write(&self, ipa: u64, bytes: &[u8]) {
        let at = (ipa - RAM) as usize;
        self.0.borrow_mut()[at..at + bytes.len()].copy_from_slice(bytes);
    }
    /// LPI `lpi`'s configuration byte (IHI 0069H 5.1.1): priority [7:2], enable [0].
    fn configure(&self, lpi: u32, priority: u8, enabled: bool) {
        self.write(PROPS + u64::from(lpi - FIRST_LPI), &[priority & 0xfc | u8::from(enabled)]);
    }
}

/// A guest with an ITS: its RAM, its vGIC, and where its next command goes.
struct Guest {
    g: Vgic,
    ram: Ram,
    cwriter: u64,
}

impl Guest {
    /// What Linux does at boot (its-gic-v3.c, as IHI 0069H 5 describes): every vCPU's
    /// redistributor given the tables and LPIs enabled, the ITS given its queue and
    /// enabled, each vCPU's collection mapped.
    fn booted(vcpus: usize) -> Guest {
        let mut guest = Guest::fresh(vcpus);
        for vcpu in 0..vcpus {
            let rd = vcpu as u64 * GICR_FRAME_SIZE;
            // IDbits 13: INTIDs up to 16383.
            guest.redistributor_write(rd + GICR_PROPBASER, 8, PROPS | 13);
            guest.redistributor_write(rd + GICR_PENDBASER, 8, PENDING);
            guest.redistributor_write(rd + GICR_CTLR, 4, 1);
        }
        guest.its_on();
        guest
    }
    /// A VM of `vcpus` vCPUs with 64 LPIs, its distributor's groups enabled, nothing else.
    fn fresh(vcpus: usize) -> Guest {
        let d = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus, spis: 64, lpis: 64 }).unwrap();
        let mut guest = Guest { g: Vgic::new(d), ram: Ram(RefCell::new(vec![0; 0x3_0000])), cwriter: 0 };
        guest.g.write(0, GICD_CTLR, 4, 0b11).unwrap();
        guest
    }
    /// The ITS given its queue and enabled, each vCPU's collection mapped (ICID = vCPU).
    fn its_on(&mut self) {
        self.its_write(GITS_CBASER, 8, 1 << 63 | QUEUE);
        self.its_write(GITS_CTLR, 4, 1);
        for vcpu in 0..self.g.vcpus() as u64 {
            self.command([0x09, 0, 1 << 63 | vcpu << 16 | vcpu, 0]);
        }
    }
    fn redistributor_write(&mut self, offset: u64, width: usize, value: u64) {
        let Guest { g, ram, .. } = self;
        g.d.write_redistributor_in(offset, width, value, ram).unwrap();
    }
    fn its_write(&mut self, offset: u64, width: usize, value: u64) -> CommandErrors {
        let Guest { g, ram, .. } = self;
        g.d.write_its(offset, width, value, ram).unwrap()
    }
    /// One command through the queue, run at once; it must be accepted.
    fn command(&mut self, dw: [u64; 4]) {
        let bytes: Vec<u8> = dw.iter().flat_map(|d| d.to_le_bytes()).collect();
        self.ram.write(QUEUE + self.cwriter, &bytes);
        self.cwriter = (self.cwriter + 32) % 0x1000;
        let errors = self.its_write(GITS_CWRITER, 8, self.cwriter);
        assert_eq!(errors.count(), 0, "{:?}", errors.first());
    }
    /// MAPD of `device` with 16 events.
    fn map_device(&mut self, device: u64) {
        self.command([0x08 | device << 32, 3, 1 << 63 | (RAM + 0x2_8000), 0]);
    }
    /// MAPTI of `event` to `lpi` in `vcpu`'s collection, its configuration written first
    /// and INV after (Linux's order).
    fn map(&mut self, device: u64, event: u64, lpi: u32, vcpu: u64, priority: u8) {
        self.ram.configure(lpi, priority, true);
        self.command([0x0a | device << 32, event | u64::from(lpi) << 32, vcpu, 0]);
        self.command([0x0c | device << 32, event, 0, 0]);
    }
}

#[test]
fn an_msi_through_the_its_reaches_its_vcpu_as_the_lpi_the_guest_mapped() {
    let mut guest = Guest::booted(2);
    guest.map_device(8);
    guest.map(8, 1, 8200, 1, 0xa0);
    let mut lrs = FakeLrs::for_gic(&guest.g, 4);
    guest.g.take_kicks();
    assert_eq!(guest.g.send_msi(8, 1), Ok(IntId(8200)));
    assert_eq!(guest.g.take_kicks().0, 1 << 1, "vCPU 1 looks");
    assert!(!guest.g.has_pending(0), "not vCPU 0's");
    guest.g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.valid(), [(8200, LrState::Pending, 0)]);
    let lr = lrs.lr(0);
    assert_eq!((lr.priority, lr.group1, lr.hw, lr.eoi_maintenance), (0xa0, true, None, false), "Group 1, edge");
    assert_eq!(lrs.ack(), Some((8200, 0)));
    // A second MSI while the guest handles the first is a new edge, shown with it.
    guest.g.sync_from_hw(1, &mut lrs).unwrap();
    guest.g.send_msi(8, 1).unwrap();
    guest.g.flush_to_hw(1, &mut lrs).unwrap();
    assert_eq!(lrs.valid(), [(8200, LrState::PendingActive, 0)]);
    lrs.deactivate(8200);
    guest.g.sync_from_hw(1, &mut lrs).unwrap();
    assert_eq!(deliver_all(&mut guest.g, 1, &mut lrs), [(8200, 0)]);
    assert!(!guest.g.has_pending(1));
    // Untranslated: another event, another device, a VM without an ITS.
    assert!(matches!(guest.g.send_msi(8, 2), Err(MsiError::Untranslated(_))));
    assert!(matches!(guest.g.send_msi(9, 1), Err(MsiError::Untranslated(_))));
    let mut none = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 64, lpis: 0 }).unwrap();
    assert_eq!(none.send_msi(8, 1), Err(MsiError::NoIts));
    assert!(none.read_its(0, 4, &NoMemory).is_err(), "no ITS frames");
}

#[test]
fn the_configuration_table_enables_and_prioritises_each_lpi_after_an_inv() {
    let mut guest = Guest::booted(1);
    guest.map_device(8);
    guest.map(8, 0, 8192, 0, 0x40);
    guest.map(8, 1, 8193, 0, 0x20);
    let mut lrs = FakeLrs::for_gic(&guest.g, 4);
    guest.g.send_msi(8, 0).unwrap();
    guest.g.send_msi(8, 1).unwrap();
    assert_eq!(deliver_all(&mut guest.g, 0, &mut lrs), [(8193, 0), (8192, 0)], "by priority");
    // Disabled in the table: the GIC may go on with what it cached until the INV
    // (IHI 0069H 5.1.1), and takes the change with it.
    guest.ram.configure(8192, 0x40, false);
    guest.command([0x0c | 8 << 32, 0, 0, 0]);
    guest.g.send_msi(8, 0).unwrap();
    assert!(!guest.g.has_pending(0), "disabled: kept pending, not shown");
    assert!(guest.g.interrupt(0, IntId(8192)).unwrap().pending);
    guest.ram.configure(8192, 0x40, true);
    guest.command([0x0d, 0, 0, 0]); // INVALL of collection 0
    assert_eq!(deliver_all(&mut guest.g, 0, &mut lrs), [(8192, 0)], "enabled again: the pending one comes");
    guest.redistributor_write(GICR_PROPBASER, 8, RAM | 13);
    assert_eq!(guest.g.read_redistributor(GICR_PROPBASER, 8), Ok(PROPS | 13), "ignored once LPIs are on");
}

#[test]
fn an_lpi_whose_configuration_cannot_be_read_stays_disabled() {
    // A table outside the VM's RAM, or one too small for INTID 8192 (IDbits below 13).
    for propbaser in [0x1000 | 13, PROPS | 12] {
        let mut guest = Guest::fresh(1);
        guest.redistributor_write(GICR_PROPBASER, 8, propbaser);
        guest.redistributor_write(GICR_CTLR, 4, 1);
        guest.its_on();
        guest.map_device(8);
        guest.map(8, 0, 8192, 0, 0x40);
        guest.g.send_msi(8, 0).unwrap();
        assert!(!guest.g.has_pending(0), "{propbaser:#x}");
        assert!(!guest.g.interrupt(0, IntId(8192)).unwrap().enabled);
    }
}

#[test]
fn an_lpi_mapped_before_its_redistributor_enabled_lpis_takes_its_configuration_then() {
    let mut guest = Guest::fresh(1);
    guest.redistributor_write(GICR_PROPBASER, 8, PROPS | 13);
    guest.its_on();
    guest.map_device(8);
    guest.map(8, 0, 8192, 0, 0x40);
    guest.g.send_msi(8, 0).unwrap();
    assert!(!guest.g.has_pending(0), "EnableLPIs is 0");
    guest.redistributor_write(GICR_CTLR, 4, 1);
    let mut lrs = FakeLrs::for_gic(&guest.g, 4);
    assert_eq!(deliver_all(&mut guest.g, 0, &mut lrs), [(8192, 0)]);
}

#[test]
fn an_lpi_taken_out_of_its_list_register_while_active_is_no_longer_active() {
    // The guest's EOI of an LPI no list register holds is not counted (IHI 0069H,
    // ICH_HCR_EL2.EOIcount), so it could never end an active state kept here.
    let mut guest = Guest::booted(1);
    guest.map_device(8);
    guest.map(8, 0, 8192, 0, 0x80);
    let mut lrs = FakeLrs::for_gic(&guest.g, 4);
    guest.g.send_msi(8, 0).unwrap();
    run(&mut guest.g, 0, &mut lrs, |l| assert_eq!(l.ack(), Some((8192, 0))));
    assert!(guest.g.interrupt(0, IntId(8192)).unwrap().active, "active while its list register shows it");
    guest.g.put(0, &mut lrs).unwrap();
    assert!(!guest.g.interrupt(0, IntId(8192)).unwrap().active, "put ends it");
    guest.g.flush_to_hw(0, &mut lrs).unwrap();
    assert_eq!(lrs.valid(), [], "nothing to show again");
    lrs.deactivate(8192);
    assert_eq!(lrs.take_eoi_count(), 0, "the guest's EOI finds nothing, counts nothing");
    guest.g.send_msi(8, 0).unwrap();
    assert_eq!(deliver_all(&mut guest.g, 0, &mut lrs), [(8192, 0)], "and the next MSI comes");
}

#[test]
fn an_lpi_unmapped_or_moved_while_shown_leaves_its_list_register() {
    let mut guest = Guest::booted(2);
    guest.map_device(8);
    guest.map(8, 0, 8192, 0, 0x80);
    let (mut lrs0, mut lrs1) = (FakeLrs::for_gic(&guest.g, 4), FakeLrs::for_gic(&guest.g, 4));
    guest.g.send_msi(8, 0).unwrap();
    guest.g.flush_to_hw(0, &mut lrs0).unwrap();
    assert_eq!(lrs0.valid(), [(8192, LrState::Pending, 0)]);
    // MOVI to vCPU 1's collection: vCPU 0 gives it up at its next exit, vCPU 1 shows it.
    guest.g.take_kicks();
    guest.command([0x01 | 8 << 32, 0, 1, 0]);
    assert_eq!(guest.g.take_kicks().0, 0b11, "both look");
    guest.g.sync_from_hw(0, &mut lrs0).unwrap();
    guest.g.flush_to_hw(0, &mut lrs0).unwrap();
    assert_eq!(lrs0.valid(), []);
    assert_eq!(deliver_all(&mut guest.g, 1, &mut lrs1), [(8192, 0)]);
    assert_eq!(guest.g.send_msi(8, 0), Ok(IntId(8192)));
    guest.g.flush_to_hw(1, &mut lrs1).unwrap();
    assert_eq!(lrs1.valid(), [(8192, LrState::Pending, 0)]);
    // DISCARD while shown pending: gone from the list register, never taken.
    guest.command([0x0f | 8 << 32, 0, 0, 0]);
    guest.g.sync_from_hw(1, &mut lrs1).unwrap();
    guest.g.flush_to_hw(1, &mut lrs1).unwrap();
    assert_eq!(lrs1.valid(), []);
    assert!(!guest.g.interrupt(1, IntId(8192)).unwrap().pending);
    assert!(matches!(guest.g.send_msi(8, 0), Err(MsiError::Untranslated(_))));
}

#[test]
fn the_redistributors_say_they_have_lpis_and_keep_their_tables_registers() {
    let mut guest = Guest::booted(2);
    let typer = guest.g.read(0, GICD_TYPER, 4).unwrap();
    assert_eq!((typer >> 17) & 1, 1, "GICD_TYPER.LPIS");
    assert_eq!((typer >> 19) & 0x1f, 13, "14 INTID bits: LPIs from 8192");
    let rd1 = GICR_FRAME_SIZE;
    assert_eq!(guest.g.read_redistributor(rd1 + GICR_TYPER, 8).unwrap() & 1, 1, "GICR_TYPER.PLPIS");
    assert_eq!(guest.g.read_redistributor(rd1 + GICR_CTLR, 4), Ok(1), "EnableLPIs");
    assert_eq!(guest.g.read_redistributor(rd1 + GICR_PENDBASER, 8), Ok(PENDING));
    assert_eq!(guest.g.read_redistributor(rd1 + GICR_PROPBASER + 4, 4), Ok(0), "the upper word");
    guest.redistributor_write(rd1 + GICR_CTLR, 4, 0);
    assert_eq!(guest.g.read_redistributor(rd1 + GICR_CTLR, 4), Ok(1), "EnableLPIs stays set");
    // A fresh redistributor: all ones written keeps only the fields (RES0 and PTZ read 0),
    // in halves as in one access.
    let fresh = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 64, lpis: 64 }).unwrap();
    let mut g = fresh.clone();
    g.write_redistributor(GICR_PROPBASER, 8, u64::MAX).unwrap();
    assert_eq!(g.read_redistributor(GICR_PROPBASER, 8), Ok(0x0700_ffff_ffff_ff9f));
    g.write_redistributor(GICR_PENDBASER, 4, u64::from(u32::MAX)).unwrap();
    g.write_redistributor(GICR_PENDBASER + 4, 4, u64::from(u32::MAX)).unwrap();
    assert_eq!(g.read_redistributor(GICR_PENDBASER, 8), Ok(0x0700_ffff_ffff_0f80));
    assert!(g.write_redistributor(GICR_PENDBASER + 4, 8, 0).is_err(), "a doubleword at the upper half");
    // Without LPIs: RAZ/WI, and no PLPIS.
    let mut plain = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 64, lpis: 0 }).unwrap();
    plain.write_redistributor(GICR_PROPBASER, 8, PROPS).unwrap();
    plain.write_redistributor(GICR_CTLR, 4, 1).unwrap();
    assert_eq!(plain.read_redistributor(GICR_PROPBASER, 8), Ok(0));
    assert_eq!(plain.read_redistributor(GICR_CTLR, 4), Ok(0));
    assert_eq!(plain.read_redistributor(GICR_TYPER, 8).unwrap() & 1, 0);
    assert_eq!((plain.read(0, GICD_TYPER, 4).unwrap() >> 17) & 1, 0);
}

#[test]
fn lpis_need_a_gicv3_and_fit_the_limit() {
    let v2 = VgicConfig { version: GicVersion::V2, vcpus: 1, spis: 64, lpis: 8 };
    assert_eq!(Distributor::new(v2), Err(VgicError::WrongVersion { needs: GicVersion::V3 }));
    let many = VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 64, lpis: MAX_LPIS + 1 };
    assert_eq!(Distributor::new(many), Err(VgicError::TooManyLpis { requested: MAX_LPIS + 1, max: MAX_LPIS }));
    let mut g =
        Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: MAX_SPIS, lpis: MAX_LPIS }).unwrap();
    // An LPI is no line, and its INTIDs are not an SPI's registers.
    assert!(g.inject_edge(IntId(FIRST_LPI), 0).is_err());
    assert!(g.set_level(IntId(FIRST_LPI + 1), 0, true).is_err());
    assert!(g.interrupt(0, IntId(FIRST_LPI + MAX_LPIS as u32)).is_err(), "beyond the last LPI");
}

// Direct injection through the board's GICv4.0 (crate::direct): the board's ITS given the
// guest's mappings, the vGIC keeping no pending LPI.

/// The board's ITS as the VM's commands leave it: each LPI's vPE and configuration byte,
/// and which are pending in a vPE's table.
#[derive(Default, Debug)]
struct Board {
    mapped: std::collections::BTreeMap<u32, (usize, u8)>,
    pending: std::collections::BTreeSet<u32>,
    log: Vec<VlpiCommand>,
}

impl Board {
    fn apply(&mut self, c: VlpiCommand) {
        self.log.push(c);
        match c {
            VlpiCommand::Map { lpi, vcpu } => {
                let config = self.mapped.get(&lpi).map_or(0, |m| m.1);
                assert!(
                    self.mapped.insert(lpi, (vcpu, config)).is_none_or(|m| m.0 == usize::MAX),
                    "{lpi} mapped twice"
                );
            }
            VlpiCommand::Move { lpi, vcpu } => self.mapped.get_mut(&lpi).expect("a move of an unmapped event").0 = vcpu,
            VlpiCommand::Discard { lpi } => {
                assert!(self.mapped.remove(&lpi).is_some_and(|m| m.0 != usize::MAX), "discard of an unmapped event");
                self.pending.remove(&lpi);
            }
            // The configuration table is the hypervisor's: written before the mapping too.
            VlpiCommand::Configure { lpi, config, mapped } => {
                let entry = self.mapped.entry(lpi).or_insert((usize::MAX, 0));
                assert_eq!(mapped, entry.0 != usize::MAX, "INV only of a mapped event");
                entry.1 = config;
            }
            VlpiCommand::Raise { lpi } => {
                assert!(self.mapped.get(&lpi).is_some_and(|m| m.0 != usize::MAX), "raise of an unmapped event");
                self.pending.insert(lpi);
            }
            VlpiCommand::Clear { lpi } => {
                self.pending.remove(&lpi);
            }
        }
    }
    fn sync(&mut self, g: &mut Distributor) -> Vec<VlpiCommand> {
        let start = self.log.len();
        g.sync_direct(|c| self.apply(c));
        self.log[start..].to_vec()
    }
}

impl Guest {
    fn direct(vcpus: usize) -> Guest {
        let mut guest = Guest::booted(vcpus);
        guest.g.inject_lpis_directly().unwrap();
        guest
    }
}

#[test]
fn with_direct_injection_the_board_holds_the_guests_mappings_and_the_vgic_no_pending_lpi() {
    let mut guest = Guest::direct(2);
    let mut board = Board::default();
    guest.map_device(8);
    guest.map(8, 1, 8200, 1, 0xa0);
    assert_eq!(
        board.sync(&mut guest.g),
        [VlpiCommand::Configure { lpi: 8200, config: 0xa1, mapped: false }, VlpiCommand::Map { lpi: 8200, vcpu: 1 }],
        "configured, then mapped: a mapped event is delivered at once"
    );
    // A device's message: no kick, nothing pending in the vGIC; the board raises it.
    guest.g.take_kicks();
    assert_eq!(guest.g.send_msi(8, 1), Ok(IntId(8200)));
    assert_eq!(guest.g.take_kicks(), VcpuMask::EMPTY);
    assert!(!guest.g.has_pending(1) && !guest.g.interrupt(1, IntId(8200)).unwrap().pending);
    assert_eq!(board.sync(&mut guest.g), [VlpiCommand::Raise { lpi: 8200 }]);
    // The guest's INT is the same raise; nothing changed gives nothing.
    guest.command([0x03 | 8 << 32, 1, 0, 0]);
    assert_eq!(board.sync(&mut guest.g), [VlpiCommand::Raise { lpi: 8200 }]);
    assert_eq!(board.sync(&mut guest.g), []);
    // MOVI to vCPU 0's collection, a new priority with its INV, CLEAR, DISCARD.
    guest.command([0x01 | 8 << 32, 1, 0, 0]);
    assert_eq!(board.sync(&mut guest.g), [VlpiCommand::Move { lpi: 8200, vcpu: 0 }]);
    guest.ram.configure(8200, 0x40, true);
    guest.command([0x0c | 8 << 32, 1, 0, 0]);
    assert_eq!(board.sync(&mut guest.g), [VlpiCommand::Configure { lpi: 8200, config: 0x41, mapped: true }]);
    guest.command([0x04 | 8 << 32, 1, 0, 0]);
    assert_eq!(board.sync(&mut guest.g), [VlpiCommand::Clear { lpi: 8200 }]);
    guest.command([0x0f | 8 << 32, 1, 0, 0]);
    assert_eq!(
        board.sync(&mut guest.g),
        [VlpiCommand::Clear { lpi: 8200 }, VlpiCommand::Discard { lpi: 8200 }],
        "its pending state ends with the mapping"
    );
    assert_eq!(guest.g.direct_mapping(8200), None);
    // A message with no translation is refused as before and raises nothing.
    assert!(guest.g.send_msi(8, 1).is_err());
    assert_eq!(board.sync(&mut guest.g), []);
}

#[test]
fn a_raise_in_the_same_sync_as_its_mapping_comes_after_it_and_release_discards_everything() {
    let mut guest = Guest::direct(2);
    let mut board = Board::default();
    guest.map_device(8);
    guest.map(8, 0, 8192, 0, 0x40);
    guest.map(8, 1, 8193, 1, 0x40);
    guest.g.send_msi(8, 1).unwrap();
    let commands = board.sync(&mut guest.g);
    assert_eq!(commands.last(), Some(&VlpiCommand::Raise { lpi: 8193 }), "{commands:?}");
    assert_eq!(board.mapped.len(), 2);
    let mut released = Vec::new();
    guest.g.release_direct(|c| released.push(c));
    assert_eq!(released, [VlpiCommand::Discard { lpi: 8192 }, VlpiCommand::Discard { lpi: 8193 }]);
    assert_eq!(board.sync(&mut guest.g), [], "nothing left to sync after a release");
    // Only a VM with LPIs can have them injected by the board.
    let mut plain = Distributor::new(VgicConfig { version: GicVersion::V3, vcpus: 1, spis: 64, lpis: 0 }).unwrap();
    assert_eq!(plain.inject_lpis_directly(), Err(VgicError::NoLpis));
    assert!(VgicError::NoLpis.to_string().contains("ITS"));
    assert!(!plain.injects_lpis_directly());
}

mod direct_differential {
    use super::*;
    use proptest::prelude::*;

    /// One guest step: a command through its queue (device 0..2, event 0..4, LPI 8192..8200,
    /// collection 0..3), a configuration byte written, or a device's message.
    #[derive(Clone, Debug)]
    enum Step {
        Command([u64; 4]),
        Configure { lpi: u32, priority: u8, enabled: bool },
        Message { device: u32, event: u32 },
    }

    fn step() -> impl Strategy<Value = Step> {
        let (dev, ev, lpi, col) = (0u64..2, 0u64..4, 8192u32..8200, 0u64..3);
        prop_oneof![
            4 => (dev.clone(), ev.clone(), lpi.clone(), col.clone())
                .prop_map(|(d, e, l, c)| Step::Command([0x0a | d << 32, e | u64::from(l) << 32, c, 0])),
            2 => (dev.clone(), ev.clone(), col.clone()).prop_map(|(d, e, c)| Step::Command([0x01 | d << 32, e, c, 0])),
            1 => (dev.clone(), ev.clone()).prop_map(|(d, e)| Step::Command([0x0f | d << 32, e, 0, 0])),
            1 => (dev.clone(), ev.clone()).prop_map(|(d, e)| Step::Command([0x03 | d << 32, e, 0, 0])),
            1 => (dev.clone(), ev.clone()).prop_map(|(d, e)| Step::Command([0x04 | d << 32, e, 0, 0])),
            1 => (dev.clone(), ev.clone()).prop_map(|(d, e)| Step::Command([0x0c | d << 32, e, 0, 0])),
            1 => col.clone().prop_map(|c| Step::Command([0x0d, 0, c, 0])),
            1 => (col.clone(), 0u64..3, prop::bool::weighted(0.7))
                .prop_map(|(c, r, v)| Step::Command([0x09, 0, u64::from(v) << 63 | r << 16 | c, 0])),
            1 => (dev.clone(), prop::bool::weighted(0.7))
                .prop_map(|(d, v)| Step::Command([0x08 | d << 32, 3, u64::from(v) << 63 | (RAM + 0x2_8000 + d * 0x100), 0])),
            1 => (0u64..3, 0u64..3).prop_map(|(a, b)| Step::Command([0x0e, 0, a << 16, b << 16])),
            2 => (lpi, any::<u8>(), any::<bool>()).prop_map(|(lpi, priority, enabled)| Step::Configure { lpi, priority, enabled }),
            3 => (0u32..2, 0u32..4).prop_map(|(device, event)| Step::Message { device, event }),
        ]
    }

    fn run(guest: &mut Guest, step: &Step) {
        match *step {
            Step::Command(dw) => {
                let bytes: Vec<u8> = dw.iter().flat_map(|d| d.to_le_bytes()).collect();
                guest.ram.write(QUEUE + guest.cwriter, &bytes);
                guest.cwriter = (guest.cwriter + 32) % 0x1000;
                let cwriter = guest.cwriter;
                guest.its_write(GITS_CWRITER, 8, cwriter);
            }
            Step::Configure { lpi, priority, enabled } => guest.ram.configure(lpi, priority, enabled),
            Step::Message { device, event } => {
                let _ = guest.g.send_msi(device, event);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The same steps given to a VM whose vGIC keeps its LPIs and to one whose board
        /// injects them: after each, the board maps exactly the LPIs the first routes, to the
        /// same vCPU with the same priority and enable, holds pending exactly those the first
        /// has pending, and the second's vGIC has nothing pending at all.
        #[test]
        fn the_board_holds_what_the_vgic_would(steps in prop::collection::vec(step(), 1..60)) {
            let mut soft = Guest::booted(3);
            let mut direct = Guest::direct(3);
            let mut board = Board::default();
            for step in &steps {
                run(&mut soft, step);
                run(&mut direct, step);
                board.sync(&mut direct.g);
                for lpi in FIRST_LPI..FIRST_LPI + 64 {
                    let route = soft.g.lpi_target(IntId(lpi));
                    let mapped = board.mapped.get(&lpi).filter(|m| m.0 != usize::MAX).map(|m| m.0);
                    prop_assert_eq!(mapped, route, "LPI {}", lpi);
                    prop_assert_eq!(direct.g.direct_mapping(lpi), route);
                    if let Some(vcpu) = route {
                        let s = soft.g.interrupt(vcpu, IntId(lpi)).unwrap();
                        prop_assert_eq!(board.mapped[&lpi].1, s.priority | u8::from(s.enabled), "LPI {}", lpi);
                        prop_assert_eq!(board.pending.contains(&lpi), s.pending, "LPI {} pending", lpi);
                    }
                }
                for vcpu in 0..3 {
                    prop_assert!(!direct.g.has_pending(vcpu));
                }
            }
        }
    }
}
