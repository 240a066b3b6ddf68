//! The ITS as a guest drives it: Linux's probe and boot sequence through the command queue,
//! every command error (refused, nothing changed, counted, later commands still run), the
//! queue's edges (wrap-around, GITS_CWRITER beyond it, outside RAM), register widths, reset,
//! and, as properties, random command sequences keeping every LPI on one route that
//! `translate` agrees with.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use vgic::*;

const GITS_CTLR: u64 = 0x0000;
const GITS_IIDR: u64 = 0x0004;
const GITS_TYPER: u64 = 0x0008;
const GITS_CBASER: u64 = 0x0080;
const GITS_CWRITER: u64 = 0x0088;
const GITS_CREADR: u64 = 0x0090;
const GITS_BASER: u64 = 0x0100;
const GITS_PIDR2: u64 = 0xffe8;

const RAM_BASE: u64 = 0x4000_0000;
const RAM_BYTES: usize = 0x2_0000;
/// Where the guest puts its command queue.
const QUEUE: u64 = RAM_BASE + 0x1_0000;
const CBASER_VALID: u64 = 1 << 63;

/// The VM's RAM.
struct Ram(Vec<u8>);

impl GuestMemory for Ram {
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), OutsideRam> {
        let start = usize::try_from(ipa.checked_sub(RAM_BASE).ok_or(OutsideRam)?).map_err(|_| OutsideRam)?;
        let end = start.checked_add(buf.len()).ok_or(OutsideRam)?;
        buf.copy_from_slice(self.0.get(start..end).ok_or(OutsideRam)?);
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Call {
    Route(u32, usize),
    Unmap(u32),
    SetPending(u32),
    ClearPending(u32),
    Invalidate(u32),
}

/// The distributor's side, recorded.
#[derive(Default)]
struct Lpis {
    calls: Vec<Call>,
    routes: HashMap<u32, usize>,
    pending: HashSet<u32>,
    /// INT or CLEAR of an LPI with no route: the ITS made pending what goes nowhere.
    unrouted: Vec<u32>,
}

impl LpiTable for Lpis {
    fn route(&mut self, lpi: u32, vcpu: usize) {
        self.calls.push(Call::Route(lpi, vcpu));
        self.routes.insert(lpi, vcpu);
    }
    fn unmap(&mut self, lpi: u32) {
        self.calls.push(Call::Unmap(lpi));
        self.routes.remove(&lpi);
        self.pending.remove(&lpi);
    }
    fn set_pending(&mut self, lpi: u32) {
        self.calls.push(Call::SetPending(lpi));
        if !self.routes.contains_key(&lpi) {
            self.unrouted.push(lpi);
        }
        self.pending.insert(lpi);
    }
    fn clear_pending(&mut self, lpi: u32) {
        self.calls.push(Call::ClearPending(lpi));
        if !self.routes.contains_key(&lpi) {
            self.unrouted.push(lpi);
        }
        self.pending.remove(&lpi);
    }
    fn invalidate(&mut self, lpi: u32) {
        self.calls.push(Call::Invalidate(lpi));
    }
}

// The commands, encoded as IHI 0069H 5.3 lays them out.
fn dw0(number: u64, device_id: u32) -> u64 {
    number | u64::from(device_id) << 32
}
fn movi(device_id: u32, event_id: u32, icid: u16) -> [u64; 4] {
    [dw0(0x01, device_id), u64::from(event_id), u64::from(icid), 0]
}
fn int(device_id: u32, event_id: u32) -> [u64; 4] {
    [dw0(0x03, device_id), u64::from(event_id), 0, 0]
}
fn clear(device_id: u32, event_id: u32) -> [u64; 4] {
    [dw0(0x04, device_id), u64::from(event_id), 0, 0]
}
fn sync(rdbase: u64) -> [u64; 4] {
    [0x05, 0, rdbase << 16, 0]
}
/// MAPD with an ITT of 2^(size+1) events at an address the ITS never reads.
fn mapd(device_id: u32, size: u8, valid: bool) -> [u64; 4] {
    [dw0(0x08, device_id), u64::from(size), u64::from(valid) << 63 | 0x4001_2300, 0]
}
fn mapc(icid: u16, rdbase: u64, valid: bool) -> [u64; 4] {
    [0x09, 0, u64::from(valid) << 63 | rdbase << 16 | u64::from(icid), 0]
}
fn mapti(device_id: u32, event_id: u32, pintid: u32, icid: u16) -> [u64; 4] {
    [dw0(0x0a, device_id), u64::from(pintid) << 32 | u64::from(event_id), u64::from(icid), 0]
}
fn mapi(device_id: u32, event_id: u32, icid: u16) -> [u64; 4] {
    [dw0(0x0b, device_id), u64::from(event_id), u64::from(icid), 0]
}
fn inv(device_id: u32, event_id: u32) -> [u64; 4] {
    [dw0(0x0c, device_id), u64::from(event_id), 0, 0]
}
fn invall(icid: u16) -> [u64; 4] {
    [0x0d, 0, u64::from(icid), 0]
}
fn movall(rdbase1: u64, rdbase2: u64) -> [u64; 4] {
    [0x0e, 0, rdbase1 << 16, rdbase2 << 16]
}
fn discard(device_id: u32, event_id: u32) -> [u64; 4] {
    [dw0(0x0f, device_id), u64::from(event_id), 0, 0]
}

/// A guest with its ITS, its RAM and the distributor's record.
struct Guest {
    its: Its,
    ram: Ram,
    lpis: Lpis,
    /// The queue's base and size (GITS_CBASER).
    queue: u64,
    queue_bytes: u64,
    /// Where the guest writes its next command.
    writer: u64,
}

impl Guest {
    /// Linux's probe (drivers/irqchip/irq-gic-v3-its.c, `its_probe_one`): TYPER and CTLR
    /// read (quiescent), the command queue given (one 4 KiB page), CWRITER = 0, enabled.
    fn linux(vcpus: usize) -> Guest {
        let its = Its::new(vcpus, 64).unwrap();
        let mut g = Guest {
            its,
            ram: Ram(vec![0; RAM_BYTES]),
            lpis: Lpis::default(),
            queue: QUEUE,
            queue_bytes: 0x1000,
            writer: 0,
        };
        let typer = g.read(GITS_TYPER, 8);
        assert_eq!(typer & 1, 1, "Physical");
        assert_eq!((typer >> 24) & 0xff, vcpus as u64, "HCC");
        assert_ne!(g.read(GITS_CTLR, 4) & (1 << 31), 0, "Quiescent");
        // GITS_BASER0: a device table (Type 1, 8-byte entries), which Linux allocates and
        // gives (its_setup_baser) and the ITS never reads; the others unimplemented.
        assert_eq!(g.read(GITS_BASER, 8), 1 << 56 | 7 << 48, "GITS_BASER0: Devices");
        for n in 1..8 {
            assert_eq!(g.read(GITS_BASER + 8 * n, 8), 0, "GITS_BASER{n}: no table");
        }
        let device_table = 1 << 63 | 5 << 59 | (RAM_BASE + 0x8_0000) | 1 << 10 | 15;
        assert!(g.write(GITS_BASER, 8, device_table | 1 << 62).is_empty());
        assert_eq!(g.read(GITS_BASER, 8), device_table | 1 << 56 | 7 << 48, "kept, but flat: Indirect RAZ/WI");
        // Valid, inner write-back cacheable, inner shareable, Size 0 (one page).
        let cbaser = CBASER_VALID | 5 << 59 | QUEUE | 1 << 10;
        assert!(g.write(GITS_CBASER, 8, cbaser).is_empty());
        assert_eq!(g.read(GITS_CBASER, 8), cbaser, "kept as written (Linux checks Shareability)");
        assert!(g.write(GITS_CWRITER, 8, 0).is_empty());
        let ctlr = g.read(GITS_CTLR, 4);
        assert!(g.write(GITS_CTLR, 4, ctlr | 1).is_empty());
        assert_eq!(g.read(GITS_CTLR, 4), 1 | 1 << 31);
        g
    }

    fn read(&self, offset: u64, width: usize) -> u64 {
        self.its.read(offset, width).unwrap()
    }

    fn write(&mut self, offset: u64, width: usize, value: u64) -> CommandErrors {
        self.its.write(offset, width, value, &self.ram, &mut self.lpis).unwrap()
    }

    /// Puts `commands` in the queue and posts them with one 32-bit GITS_CWRITER write, as
    /// Linux's `its_post_commands` does; they have all run when it returns.
    fn send(&mut self, commands: &[[u64; 4]]) -> CommandErrors {
        for c in commands {
            let at = (self.queue - RAM_BASE + self.writer) as usize;
            for (i, dw) in c.iter().enumerate() {
                self.ram.0[at + 8 * i..at + 8 * i + 8].copy_from_slice(&dw.to_le_bytes());
            }
            self.writer = (self.writer + 32) % self.queue_bytes;
        }
        let errors = self.write(GITS_CWRITER, 4, self.writer);
        assert_eq!(self.read(GITS_CREADR, 8), self.writer, "every command ran");
        errors
    }

    /// Sends commands that must all succeed.
    fn ok(&mut self, commands: &[[u64; 4]]) {
        let errors = self.send(commands);
        assert!(errors.is_empty(), "{errors}");
    }

    /// Every mapped event, sorted.
    fn translations(&self) -> Vec<MappedEvent> {
        let mut t: Vec<_> = self.its.translations().collect();
        t.sort_by_key(|t| (t.device_id, t.event_id));
        t
    }

    /// Collections 0..vcpus mapped to the vCPUs of the same number, each followed by INVALL,
    /// as `its_cpu_init_collection` does on each CPU.
    fn map_collections(&mut self, vcpus: usize) {
        for v in 0..vcpus {
            self.ok(&[mapc(v as u16, v as u64, true), invall(v as u16)]);
        }
    }
}

const DEV: u32 = 0x0008; // 00:01.0, a PCI requester ID

#[test]
fn linux_probe_and_boot_end_with_each_msi_translated_to_its_lpi_and_vcpu() {
    let mut g = Guest::linux(2);
    assert_eq!(g.read(GITS_IIDR, 4), 0x4800_043b);
    assert_eq!(g.read(GITS_PIDR2, 4), 0x3b);
    let typer = g.read(GITS_TYPER, 8);
    assert_eq!((typer >> 4) & 0xf, 7, "ITT_entry_size: 8 bytes");
    assert_eq!((typer >> 8) & 0x1f, 15, "ID_bits: 16-bit EventIDs");
    assert_eq!((typer >> 13) & 0x1f, 15, "Devbits: 16-bit DeviceIDs");
    assert_eq!((typer >> 19) & 1, 0, "PTA: RDbase is a processor number");
    g.map_collections(2);
    // A PCI device's MSI-X with three vectors: an ITT of 4 events (Size 1), its LPIs on
    // vCPU 0, 1 and 0, then INV for each as `its_irq_domain_activate` and unmask do.
    g.ok(&[mapd(DEV, 1, true), sync(0)]);
    g.ok(&[mapti(DEV, 0, 8192, 0), mapti(DEV, 1, 8193, 1), mapti(DEV, 2, 8194, 0), sync(1)]);
    g.ok(&[inv(DEV, 0), sync(0), inv(DEV, 1), sync(1)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 0)));
    assert_eq!(g.its.translate(DEV, 1), Ok((8193, 1)));
    assert_eq!(g.its.translate(DEV, 2), Ok((8194, 0)));
    assert_eq!(g.its.translate(DEV, 3), Err(TranslationError::EventNotMapped { device_id: DEV, event_id: 3 }));
    use Call::*;
    assert_eq!(
        g.lpis.calls,
        [
            Route(8192, 0),
            Invalidate(8192),
            Route(8193, 1),
            Invalidate(8193),
            Route(8194, 0),
            Invalidate(8194),
            Invalidate(8192),
            Invalidate(8193)
        ]
    );
}

#[test]
fn translation_needs_the_its_enabled_and_the_device_event_and_collection_mapped() {
    let mut g = Guest::linux(3);
    g.map_collections(2);
    g.ok(&[mapd(DEV, 0, true), mapti(DEV, 0, 8200, 2)]);
    let its = &g.its;
    assert_eq!(
        its.translate(DEV, 0),
        Err(TranslationError::CollectionNotMapped { device_id: DEV, event_id: 0, icid: 2 })
    );
    assert_eq!(its.translate(DEV, 1), Err(TranslationError::EventNotMapped { device_id: DEV, event_id: 1 }));
    assert_eq!(
        its.translate(DEV, 2),
        Err(TranslationError::EventOutOfRange { device_id: DEV, event_id: 2, events: 2 })
    );
    assert_eq!(its.translate(9, 0), Err(TranslationError::DeviceNotMapped { device_id: 9 }));
    assert_eq!(its.translate(0x1_0000, 0), Err(TranslationError::DeviceNotMapped { device_id: 0x1_0000 }));
    assert!(!g.lpis.routes.contains_key(&8200), "no route while its collection is unmapped");
    g.ok(&[mapc(2, 1, true)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8200, 1)));
    assert_eq!(g.lpis.routes[&8200], 1);
    assert!(g.write(GITS_CTLR, 4, 0).is_empty());
    assert_eq!(g.its.translate(DEV, 0), Err(TranslationError::Disabled));
    for e in [TranslationError::Disabled, TranslationError::CollectionNotMapped { device_id: 1, event_id: 2, icid: 3 }]
    {
        assert!(e.to_string().starts_with("MSI dropped"), "{e}");
    }
}

/// The state every error row starts from: 3 vCPUs, collections 0 and 1 mapped to vCPUs 0
/// and 1, collection 2 not; device DEV with 4 events, event 0 on LPI 8192 (collection 0),
/// event 1 on 8193 (collection 1), event 2 on 8194 (collection 2, unmapped); event 3 unmapped.
fn baseline() -> Guest {
    let mut g = Guest::linux(3);
    g.map_collections(2);
    g.ok(&[mapd(DEV, 1, true), mapti(DEV, 0, 8192, 0), mapti(DEV, 1, 8193, 1), mapti(DEV, 2, 8194, 2)]);
    g.lpis.calls.clear();
    g
}

#[test]
fn every_command_error_is_ignored_counted_and_later_commands_still_run() {
    use CommandFault::*;
    let out_of_range_device = 0x1_0000;
    let rows: Vec<([u64; 4], CommandFault)> = vec![
        (int(out_of_range_device, 0), DeviceOutOfRange),
        (mapd(out_of_range_device, 1, true), DeviceOutOfRange),
        (mapti(out_of_range_device, 0, 8200, 0), DeviceOutOfRange),
        (int(0x99, 0), DeviceNotMapped),
        (clear(0x99, 0), DeviceNotMapped),
        (inv(0x99, 0), DeviceNotMapped),
        (movi(0x99, 0, 1), DeviceNotMapped),
        (discard(0x99, 0), DeviceNotMapped),
        (mapti(0x99, 0, 8200, 0), DeviceNotMapped),
        (int(DEV, 4), EventOutOfRange { events: 4 }),
        (mapti(DEV, 4, 8200, 0), EventOutOfRange { events: 4 }),
        (discard(DEV, 0xffff_ffff), EventOutOfRange { events: 4 }),
        (int(DEV, 3), EventNotMapped),
        (clear(DEV, 3), EventNotMapped),
        (inv(DEV, 3), EventNotMapped),
        (movi(DEV, 3, 1), EventNotMapped),
        (discard(DEV, 3), EventNotMapped),
        (mapti(DEV, 3, 8200, 3), CollectionOutOfRange { icid: 3, collections: 3 }),
        (mapc(3, 0, true), CollectionOutOfRange { icid: 3, collections: 3 }),
        (mapc(0xffff, 0, false), CollectionOutOfRange { icid: 0xffff, collections: 3 }),
        (movi(DEV, 0, 3), CollectionOutOfRange { icid: 3, collections: 3 }),
        (invall(3), CollectionOutOfRange { icid: 3, collections: 3 }),
        // The event's collection (2) is not mapped: the commands that act on its
        // redistributor are refused.
        (int(DEV, 2), CollectionNotMapped { icid: 2 }),
        (clear(DEV, 2), CollectionNotMapped { icid: 2 }),
        (inv(DEV, 2), CollectionNotMapped { icid: 2 }),
        (discard(DEV, 2), CollectionNotMapped { icid: 2 }),
        (movi(DEV, 2, 0), CollectionNotMapped { icid: 2 }),
        (movi(DEV, 0, 2), CollectionNotMapped { icid: 2 }),
        (invall(2), CollectionNotMapped { icid: 2 }),
        (mapc(2, 3, true), NoSuchVcpu { rdbase: 3, vcpus: 3 }),
        (mapc(2, (1 << 36) - 1, true), NoSuchVcpu { rdbase: (1 << 36) - 1, vcpus: 3 }),
        (sync(3), NoSuchVcpu { rdbase: 3, vcpus: 3 }),
        (movall(3, 0), NoSuchVcpu { rdbase: 3, vcpus: 3 }),
        (movall(0, 7), NoSuchVcpu { rdbase: 7, vcpus: 3 }),
        (mapti(DEV, 3, 8191, 0), NotAnLpi { pintid: 8191, first: 8192, end: 8256 }),
        (mapti(DEV, 3, 8256, 0), NotAnLpi { pintid: 8256, first: 8192, end: 8256 }),
        (mapti(DEV, 3, 1023, 0), NotAnLpi { pintid: 1023, first: 8192, end: 8256 }),
        (mapi(DEV, 3, 0), NotAnLpi { pintid: 3, first: 8192, end: 8256 }),
        // One route per LPI: 8192 translates event 0 already.
        (mapti(DEV, 3, 8192, 1), LpiInUse { pintid: 8192, device_id: DEV, event_id: 0 }),
        (mapti(DEV, 1, 8194, 1), LpiInUse { pintid: 8194, device_id: DEV, event_id: 2 }),
        (mapd(0x20, 8, true), IttTooLarge { size: 8 }),
        (mapd(DEV, 31, true), IttTooLarge { size: 31 }),
        ([0x02, 0, 0, 0], Unknown),
        ([0x00, 0, 0, 0], Unknown),
        ([0x29, 0, 0, 0], Unknown), // GICv4's VMAPP
        ([0xff, u64::MAX, u64::MAX, u64::MAX], Unknown),
    ];
    for (bad, fault) in rows {
        let mut g = baseline();
        let before = g.translations();
        let errors = g.send(&[bad, int(DEV, 0)]);
        assert_eq!(errors.count(), 1, "{fault:?}");
        let number = bad[0] as u8;
        let expected =
            CommandError::Refused { number, device_id: (bad[0] >> 32) as u32, event_id: bad[1] as u32, fault };
        assert_eq!(errors.first(), Some(expected));
        assert_eq!(g.translations(), before, "{expected}: nothing changed");
        assert_eq!(g.lpis.calls, [Call::SetPending(8192)], "{expected}: only the next command did anything");
        assert!(!expected.to_string().is_empty());
    }
}

#[test]
fn out_of_capacity_is_a_command_error() {
    let mut g = Guest::linux(1);
    g.map_collections(1);
    for d in 0..64 {
        g.ok(&[mapd(d, 7, true)]);
    }
    let errors = g.send(&[mapd(64, 0, true), mapd(3, 2, true), sync(0)]);
    assert_eq!(errors.count(), 1, "a full table refuses a new device, not a new ITT for a mapped one");
    assert!(matches!(
        errors.first(),
        Some(CommandError::Refused { fault: CommandFault::DeviceTableFull, device_id: 64, .. })
    ));
    assert!(errors.to_string().contains("unmap one"), "{errors}");
    // 1024 translations: four devices of 256 events, over 1024 of the 8192 LPIs... which
    // this VM does not have: give it enough.
    let mut g = Guest { its: Its::new(1, 2048).unwrap(), ..Guest::linux(1) };
    g.write(GITS_CBASER, 8, CBASER_VALID | QUEUE);
    g.write(GITS_CWRITER, 8, 0);
    g.write(GITS_CTLR, 4, 1);
    g.map_collections(1);
    let mut lpi = 8192;
    for d in 0..4 {
        g.ok(&[mapd(d, 7, true)]);
        for e in (0..256).step_by(64) {
            let batch: Vec<_> = (e..e + 64).map(|e| mapti(d, e, lpi + e, 0)).collect();
            g.ok(&batch);
        }
        lpi += 256;
    }
    assert_eq!(g.its.translations().count(), 1024);
    g.ok(&[mapd(4, 0, true)]);
    let errors = g.send(&[mapti(4, 0, lpi, 0), mapti(0, 5, 8192 + 5, 0)]);
    assert_eq!(errors.count(), 1, "a full list refuses a new event, not a new translation of a mapped one");
    assert!(matches!(errors.first(), Some(CommandError::Refused { fault: CommandFault::TranslationsFull, .. })));
    assert_eq!(g.its.translate(4, 0), Err(TranslationError::EventNotMapped { device_id: 4, event_id: 0 }));
    g.ok(&[discard(0, 0), mapti(4, 0, lpi, 0)]);
    assert_eq!(g.its.translate(4, 0), Ok((lpi, 0)));
}

#[test]
fn one_route_per_lpi() {
    let mut g = baseline();
    // The same event to the same LPI in another collection: a move, its pending state kept.
    g.ok(&[mapti(DEV, 0, 8192, 1)]);
    assert_eq!(g.lpis.calls, [Call::Route(8192, 1), Call::Invalidate(8192)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 1)));
    // The same event to another LPI: the old one's translation ends.
    g.lpis.calls.clear();
    g.ok(&[mapti(DEV, 0, 8200, 0)]);
    assert_eq!(g.lpis.calls, [Call::Unmap(8192), Call::Route(8200, 0), Call::Invalidate(8200)]);
    // Another event to an LPI in use: refused; once DISCARDed, the LPI is free again.
    let errors = g.send(&[mapti(DEV, 3, 8200, 1)]);
    assert!(errors.to_string().contains("DISCARD that event first"), "{errors}");
    g.ok(&[discard(DEV, 0), mapti(DEV, 3, 8200, 1)]);
    assert_eq!(g.its.translate(DEV, 3), Ok((8200, 1)));
    assert_eq!(g.lpis.routes[&8200], 1);
    // The LPI unmapped with the event a second device's MAPTI reuses.
    g.ok(&[mapd(DEV, 1, false), mapd(0x10, 0, true), mapti(0x10, 1, 8193, 0)]);
    assert_eq!(g.its.translate(0x10, 1), Ok((8193, 0)));
    assert_eq!(g.translations().len(), 1);
}

#[test]
fn mapd_ends_the_device_s_translations() {
    let mut g = baseline();
    g.ok(&[mapd(DEV, 2, true)]);
    let mut unmapped: Vec<_> = g.lpis.calls.iter().map(|c| if let Call::Unmap(l) = c { *l } else { 0 }).collect();
    unmapped.sort();
    assert_eq!(unmapped, [8192, 8193, 8194], "a new ITT over a mapped device");
    assert_eq!(g.its.translate(DEV, 0), Err(TranslationError::EventNotMapped { device_id: DEV, event_id: 0 }));
    g.ok(&[mapti(DEV, 7, 8192, 0), mapd(DEV, 0, false)]);
    assert_eq!(g.lpis.calls.last(), Some(&Call::Unmap(8192)));
    assert_eq!(g.its.translate(DEV, 7), Err(TranslationError::DeviceNotMapped { device_id: DEV }));
    assert!(g.lpis.routes.is_empty());
    g.ok(&[mapd(0x1234, 0, false)]); // unmapping an unmapped device is no error
}

#[test]
fn mapc_moves_a_collection_and_its_lpis() {
    let mut g = baseline();
    g.ok(&[mapc(0, 2, true)]);
    assert_eq!(g.lpis.calls, [Call::Route(8192, 2)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 2)));
    assert_eq!(g.its.translate(DEV, 1), Ok((8193, 1)), "the other collections stay");
    g.ok(&[mapc(0, 0, false)]);
    assert_eq!(
        g.its.translate(DEV, 0),
        Err(TranslationError::CollectionNotMapped { device_id: DEV, event_id: 0, icid: 0 })
    );
    assert_eq!(g.translations().len(), 3, "an unmapped collection's events stay mapped");
    g.lpis.calls.clear();
    g.ok(&[mapc(0, 1, true), mapc(2, 1, true)]);
    assert_eq!(g.lpis.calls, [Call::Route(8192, 1), Call::Route(8194, 1)]);
    assert_eq!(g.its.translate(DEV, 2), Ok((8194, 1)));
}

#[test]
fn movi_and_movall_move_lpis() {
    let mut g = baseline();
    g.ok(&[movi(DEV, 0, 1)]);
    assert_eq!(g.lpis.calls, [Call::Route(8192, 1)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 1)));
    assert!(g.translations().iter().all(|t| t.icid == 1 || t.lpi == 8194));
    g.lpis.calls.clear();
    g.ok(&[movall(1, 0)]);
    assert_eq!(g.lpis.calls, [Call::Route(8192, 0), Call::Route(8193, 0)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 0)));
    assert_eq!(g.its.translate(DEV, 1), Ok((8193, 0)));
    assert!(g.translations().iter().filter(|t| t.lpi != 8194).all(|t| t.icid == 1), "collections stay");
    g.lpis.calls.clear();
    g.ok(&[movall(0, 0), movall(2, 1), sync(2)]);
    assert!(g.lpis.calls.is_empty());
    // The collection, still on vCPU 1, takes its LPIs back when mapped again.
    g.ok(&[mapc(1, 1, true)]);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 1)));
}

#[test]
fn int_and_clear_set_and_end_pending_state() {
    let mut g = baseline();
    g.ok(&[int(DEV, 0), int(DEV, 1), clear(DEV, 0)]);
    assert_eq!(g.lpis.calls, [Call::SetPending(8192), Call::SetPending(8193), Call::ClearPending(8192)]);
    assert_eq!(g.lpis.pending, HashSet::from([8193]));
    g.lpis.calls.clear();
    g.ok(&[invall(1), invall(0)]);
    assert_eq!(g.lpis.calls, [Call::Invalidate(8193), Call::Invalidate(8192)]);
    g.lpis.calls.clear();
    g.ok(&[discard(DEV, 1)]);
    assert_eq!(g.lpis.calls, [Call::Unmap(8193)]);
    assert!(g.lpis.pending.is_empty());
}

#[test]
fn the_queue_wraps_around() {
    let mut g = baseline();
    // 4 KiB: 128 commands; fill 120, then 16 that run over the end.
    g.ok(&vec![sync(0); 120]);
    let batch: Vec<_> = (0..16).map(|i| if i % 2 == 0 { int(DEV, 0) } else { clear(DEV, 1) }).collect();
    g.lpis.calls.clear();
    g.ok(&batch);
    assert_eq!(g.read(GITS_CREADR, 4), (8 + 120 + 16) % 128 * 32, "baseline sent 8");
    assert_eq!(g.lpis.calls.len(), 16);
    // A full lap less one, the most a guest can post at once.
    g.lpis.calls.clear();
    g.ok(&vec![int(DEV, 1); 127]);
    assert_eq!(g.lpis.calls.len(), 127);
}

#[test]
fn cwriter_beyond_the_queue_runs_nothing() {
    let mut g = baseline();
    let creadr = g.read(GITS_CREADR, 8);
    let errors = g.write(GITS_CWRITER, 8, 0x1000);
    assert_eq!(errors.first(), Some(CommandError::WriterBeyondQueue { offset: 0x1000, queue_bytes: 0x1000 }));
    assert!(errors.to_string().contains("GITS_CBASER.Size"), "{errors}");
    assert_eq!(g.read(GITS_CREADR, 8), creadr);
    assert_eq!(g.read(GITS_CWRITER, 8), 0x1000);
    // Retry (bit 0) and bits beyond Offset are not kept.
    g.write(GITS_CWRITER, 8, 0xffff_ffff_fff0_0001 | creadr);
    assert_eq!(g.read(GITS_CWRITER, 8), creadr);
    g.writer = creadr;
    g.ok(&[int(DEV, 0)]);
    assert_eq!(g.lpis.calls, [Call::SetPending(8192)]);
}

#[test]
fn a_queue_outside_ram_is_a_command_error_per_command() {
    let mut g = Guest::linux(1);
    g.write(GITS_CTLR, 4, 0);
    // The queue's page is past the end of RAM.
    let outside = RAM_BASE + RAM_BYTES as u64;
    g.write(GITS_CBASER, 8, CBASER_VALID | outside);
    g.write(GITS_CTLR, 4, 1);
    let errors = g.write(GITS_CWRITER, 4, 3 * 32);
    assert_eq!(errors.count(), 3);
    assert_eq!(errors.first(), Some(CommandError::QueueOutsideRam { ipa: outside }));
    assert_eq!(g.read(GITS_CREADR, 4), 3 * 32, "skipped, never stalled");
    assert_eq!(g.read(GITS_CREADR, 4) & 1, 0, "Stalled");
    // A queue at the top of the address space: the address wraps, which is no RAM either.
    g.write(GITS_CTLR, 4, 0);
    g.write(GITS_CBASER, 8, CBASER_VALID | 0x000f_ffff_ffff_f000 | 0xff);
    g.write(GITS_CWRITER, 4, 0);
    g.write(GITS_CTLR, 4, 1);
    assert_eq!(g.write(GITS_CWRITER, 4, 0x1000).count(), 128);
    assert!(g.lpis.calls.is_empty());
}

#[test]
fn no_command_runs_while_disabled_or_without_a_valid_queue() {
    let mut g = Guest::linux(1);
    g.write(GITS_CTLR, 4, 0);
    g.ok_put(&[mapc(0, 0, true), mapd(DEV, 0, true), mapti(DEV, 0, 8192, 0)]);
    assert_eq!(g.read(GITS_CREADR, 4), 0);
    // Enabling runs what waits.
    assert!(g.write(GITS_CTLR, 4, 1).is_empty());
    assert_eq!(g.read(GITS_CREADR, 4), 3 * 32);
    assert_eq!(g.its.translate(DEV, 0), Ok((8192, 0)));
    // Without GITS_CBASER.Valid nothing runs.
    g.write(GITS_CTLR, 4, 0);
    g.write(GITS_CBASER, 8, QUEUE);
    g.writer = 0;
    g.write(GITS_CTLR, 4, 1);
    g.ok_put(&[int(DEV, 0)]);
    assert_eq!(g.read(GITS_CREADR, 4), 0);
    assert!(g.lpis.calls.iter().all(|c| !matches!(c, Call::SetPending(_))));
}

impl Guest {
    /// Puts commands in the queue and writes GITS_CWRITER, not expecting them to run.
    fn ok_put(&mut self, commands: &[[u64; 4]]) {
        for c in commands {
            let at = (self.queue - RAM_BASE + self.writer) as usize;
            for (i, dw) in c.iter().enumerate() {
                self.ram.0[at + 8 * i..at + 8 * i + 8].copy_from_slice(&dw.to_le_bytes());
            }
            self.writer = (self.writer + 32) % self.queue_bytes;
        }
        assert!(self.write(GITS_CWRITER, 4, self.writer).is_empty());
    }
}

#[test]
fn cbaser_is_ignored_while_enabled_and_resets_creadr() {
    let mut g = baseline();
    let cbaser = g.read(GITS_CBASER, 8);
    let creadr = g.read(GITS_CREADR, 8);
    assert_ne!(creadr, 0);
    g.write(GITS_CBASER, 8, CBASER_VALID | (QUEUE + 0x1000));
    g.write(GITS_CBASER + 4, 4, 0);
    assert_eq!(g.read(GITS_CBASER, 8), cbaser);
    assert_eq!(g.read(GITS_CREADR, 8), creadr);
    g.write(GITS_CTLR, 4, 0);
    // RES0 bits are not kept.
    g.write(GITS_CBASER, 8, u64::MAX);
    assert_eq!(g.read(GITS_CBASER, 8), 0xb8ef_ffff_ffff_fcff);
    assert_eq!(g.read(GITS_CREADR, 8), 0);
    // 32-bit halves, the low one first: each write sets GITS_CREADR to 0.
    g.write(GITS_CBASER, 4, QUEUE | 1);
    g.write(GITS_CBASER + 4, 4, CBASER_VALID >> 32);
    assert_eq!(g.read(GITS_CBASER, 8), CBASER_VALID | QUEUE | 1);
    assert_eq!(g.read(GITS_CBASER + 4, 4), CBASER_VALID >> 32);
}

#[test]
fn register_widths_and_alignment() {
    let mut g = Guest::linux(4);
    let typer = g.read(GITS_TYPER, 8);
    assert_eq!(g.read(GITS_TYPER, 4), typer & 0xffff_ffff);
    assert_eq!(g.read(GITS_TYPER + 4, 4), typer >> 32);
    assert_eq!(g.read(GITS_CREADR + 4, 4), 0);
    assert_eq!(g.read(GITS_CWRITER + 4, 4), 0);
    assert_eq!(g.read(GITS_BASER + 0x3c, 4), 0);
    g.write(GITS_TYPER, 8, 0);
    assert_eq!(g.read(GITS_TYPER, 8), typer, "read-only");
    let (ram, lpis) = (&g.ram, &mut g.lpis);
    for (offset, width) in [
        (GITS_CTLR, 8),
        (GITS_CTLR, 2),
        (GITS_CTLR, 1),
        (GITS_IIDR, 8),
        (0x40, 8),
        (0xffe8, 2),
        (GITS_TRANSLATER, 8),
        (GITS_TRANSLATER, 1),
        (GITS_TYPER, 3),
        (0x1_0000, 8),
    ] {
        assert_eq!(g.its.read(offset, width), Err(AccessError::BadWidth { offset, width }), "{offset:#x} {width}");
        assert_eq!(g.its.write(offset, width, 0, ram, lpis), Err(AccessError::BadWidth { offset, width }));
    }
    for (offset, width) in [(GITS_TYPER + 4, 8), (GITS_CBASER + 2, 4), (GITS_TRANSLATER + 2, 4), (0x102, 4)] {
        assert_eq!(g.its.read(offset, width), Err(AccessError::Unaligned { offset, width }), "{offset:#x} {width}");
        assert_eq!(g.its.write(offset, width, 0, ram, lpis), Err(AccessError::Unaligned { offset, width }));
    }
    for offset in [GITS_FRAME_SIZE, u64::MAX - 3] {
        assert_eq!(g.its.read(offset, 4), Err(AccessError::OutsideFrame { offset }));
    }
    // Both frames' other words are RAZ/WI.
    for offset in [0x0c0, 0x1000, 0xfffc, 0x1_0000, 0x1_0044, 0x1_fffc] {
        assert_eq!(g.its.read(offset, 4), Ok(0), "{offset:#x}");
        assert_eq!(g.its.write(offset, 4, u64::MAX, ram, lpis), Ok(CommandErrors::default()));
    }
    assert_eq!(g.its.read(GITS_TRANSLATER, 4), Ok(0));
    assert_eq!(g.its.read(GITS_TRANSLATER, 2), Ok(0));
}

#[test]
fn a_guest_cpu_s_translater_write_is_ignored() {
    let mut g = baseline();
    for width in [2, 4] {
        assert!(g.write(GITS_TRANSLATER, width, 0).is_empty());
        assert!(g.write(GITS_TRANSLATER, width, 1).is_empty());
    }
    assert!(g.lpis.calls.is_empty());
}

#[test]
fn reset_unmaps_every_lpi_and_goes_back_to_creation() {
    let mut g = baseline();
    g.its.reset(&mut g.lpis);
    let mut unmapped = g.lpis.calls.clone();
    unmapped.sort_by_key(|c| if let Call::Unmap(l) = c { *l } else { 0 });
    assert_eq!(unmapped, [Call::Unmap(8192), Call::Unmap(8193), Call::Unmap(8194)]);
    assert_eq!(g.its.translate(DEV, 0), Err(TranslationError::Disabled));
    assert_eq!(g.read(GITS_CTLR, 4), 1 << 31);
    for offset in [GITS_CBASER, GITS_CWRITER, GITS_CREADR] {
        assert_eq!(g.read(offset, 8), 0);
    }
    assert_eq!(g.its.translations().count(), 0);
    // The guest boots again on the same ITS.
    let Guest { its, .. } = g;
    let mut again = Guest::linux(3);
    again.its = its;
    again.write(GITS_CBASER, 8, CBASER_VALID | QUEUE);
    again.write(GITS_CWRITER, 8, 0);
    again.write(GITS_CTLR, 4, 1);
    again.map_collections(1);
    again.ok(&[mapd(DEV, 0, true), mapti(DEV, 1, 8193, 0)]);
    assert_eq!(again.its.translate(DEV, 1), Ok((8193, 0)));
    assert_eq!(again.its.translate(DEV, 0), Err(TranslationError::EventNotMapped { device_id: DEV, event_id: 0 }));
}

#[test]
fn creation_refuses_what_it_cannot_hold() {
    assert_eq!(Its::new(0, 64).err(), Some(ItsError::NoVcpus));
    assert_eq!(Its::new(65, 64).err(), Some(ItsError::TooManyVcpus { requested: 65, max: 64 }));
    assert_eq!(Its::new(1, 0).err(), Some(ItsError::NoLpis));
    assert_eq!(Its::new(1, u32::MAX).err(), Some(ItsError::TooManyLpis { requested: u32::MAX }));
    assert!(Its::new(64, u32::MAX - FIRST_LPI).is_ok());
    assert!(ItsError::OutOfMemory.to_string().contains("more heap"));
}

#[test]
fn a_write_s_errors_are_counted_and_the_first_kept() {
    let mut g = baseline();
    let errors = g.send(&[int(9, 0), sync(0), [0x02, 0, 0, 0], int(DEV, 3)]);
    assert_eq!(errors.count(), 3);
    assert_eq!(
        errors.first(),
        Some(CommandError::Refused { number: 0x03, device_id: 9, event_id: 0, fault: CommandFault::DeviceNotMapped })
    );
    let message = errors.to_string();
    assert!(
        message.starts_with("3 ITS command errors; the first: ITS INT (command 0x03) for DeviceID 0x9"),
        "{message}"
    );
    assert!(message.contains("MAPD"), "{message}");
}

// Random command sequences.

fn command() -> impl Strategy<Value = [u64; 4]> {
    let device = prop_oneof![8 => 0u32..4, 1 => Just(0x1_0000u32)];
    let event = 0u32..6;
    let pintid = FIRST_LPI - 1..FIRST_LPI + 10;
    let icid = 0u16..4;
    let rdbase = 0u64..4;
    prop_oneof![
        1 => (device.clone(), event.clone(), icid.clone()).prop_map(|(d, e, c)| movi(d, e, c)),
        1 => (device.clone(), event.clone()).prop_map(|(d, e)| int(d, e)),
        1 => (device.clone(), event.clone()).prop_map(|(d, e)| clear(d, e)),
        1 => rdbase.clone().prop_map(sync),
        1 => (device.clone(), prop_oneof![4 => 0u8..3, 1 => Just(9u8)], prop::bool::weighted(0.8))
            .prop_map(|(d, s, v)| mapd(d, s, v)),
        1 => (icid.clone(), rdbase.clone(), prop::bool::weighted(0.8)).prop_map(|(c, r, v)| mapc(c, r, v)),
        4 => (device.clone(), event.clone(), pintid, icid.clone()).prop_map(|(d, e, p, c)| mapti(d, e, p, c)),
        1 => (device.clone(), event.clone(), icid.clone()).prop_map(|(d, e, c)| mapi(d, e, c)),
        1 => (device.clone(), event.clone()).prop_map(|(d, e)| inv(d, e)),
        1 => icid.prop_map(invall),
        1 => (rdbase.clone(), rdbase).prop_map(|(a, b)| movall(a, b)),
        1 => (device, event).prop_map(|(d, e)| discard(d, e)),
        1 => any::<[u64; 4]>(),
    ]
}

/// Every LPI the distributor has a route for is the translation of exactly one mapped
/// event, and `translate` gives every mapped event the LPI and vCPU the distributor has.
fn check_routes(g: &Guest) {
    let translations = g.translations();
    let lpis: HashSet<u32> = translations.iter().map(|t| t.lpi).collect();
    assert_eq!(lpis.len(), translations.len(), "two events translate to one LPI: {translations:?}");
    for lpi in g.lpis.routes.keys() {
        assert!(lpis.contains(lpi), "LPI {lpi} routed but the translation of no event");
    }
    for t in &translations {
        if let Ok((lpi, vcpu)) = g.its.translate(t.device_id, t.event_id) {
            assert_eq!(lpi, t.lpi);
            assert_eq!(g.lpis.routes.get(&lpi), Some(&vcpu), "{t:?}");
        }
    }
    assert!(g.lpis.unrouted.is_empty(), "INT or CLEAR of LPIs with no route: {:?}", g.lpis.unrouted);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_lpi_has_one_route_that_translate_agrees_with(
        batches in prop::collection::vec((prop::collection::vec(command(), 1..12), any::<u8>()), 1..12),
    ) {
        let mut g = Guest::linux(3);
        // A start that lets the random commands find mapped devices and collections.
        let start = [mapc(0, 0, true), mapc(1, 1, true), mapd(0, 1, true), mapd(1, 2, true), mapd(2, 0, true)];
        g.ok(&start);
        for (batch, action) in batches {
            g.send(&batch);
            check_routes(&g);
            match action {
                // Now and then a reset, and the guest's probe again.
                0..=3 => {
                    g.its.reset(&mut g.lpis);
                    prop_assert!(g.lpis.routes.is_empty());
                    g.write(GITS_CBASER, 8, CBASER_VALID | QUEUE);
                    g.write(GITS_CWRITER, 8, 0);
                    g.write(GITS_CTLR, 4, 1);
                    g.writer = 0;
                    g.ok(&start);
                }
                // Or the ITS disabled and enabled again around a batch.
                4..=15 => {
                    g.write(GITS_CTLR, 4, 0);
                    g.write(GITS_CTLR, 4, 1);
                }
                _ => {}
            }
            check_routes(&g);
        }
    }

    #[test]
    fn any_register_access_is_answered_without_panic(
        accesses in prop::collection::vec((0u64..0x2_0100, prop_oneof![Just(1usize), Just(2), Just(4), Just(8)], any::<u64>()), 1..40),
    ) {
        let mut g = baseline();
        for (offset, width, value) in accesses {
            let _ = g.its.read(offset, width);
            let _ = g.its.write(offset, width, value, &g.ram, &mut g.lpis);
            check_routes(&g);
        }
    }
}

#[test]
fn the_device_table_register_keeps_its_fields_and_no_write_while_enabled() {
    // All ones: Type and Entry_Size stay the ITS's, Indirect and the RES0 bits read 0.
    let mut g = Guest::linux(1);
    let kept = g.read(GITS_BASER, 8);
    g.write(GITS_BASER, 8, u64::MAX);
    assert_eq!(g.read(GITS_BASER, 8), kept, "ignored while GITS_CTLR.Enabled is 1");
    let ctlr = g.read(GITS_CTLR, 4);
    g.write(GITS_CTLR, 4, ctlr & !1);
    g.write(GITS_BASER, 4, u64::MAX);
    g.write(GITS_BASER + 4, 4, u64::MAX);
    // Valid, InnerCache, Type 1, OuterCache, Entry_Size 7, Physical_Address, Shareability,
    // Page_Size, Size; Indirect [62] and bit [51] read 0.
    assert_eq!(g.read(GITS_BASER, 8), 0xb9e7_ffff_ffff_ffff);
    assert_eq!(g.read(GITS_BASER + 8, 8), 0, "GITS_BASER1 stays unimplemented");
}

#[test]
fn a_full_queue_runs_a_bounded_number_of_commands_an_access_and_the_rest_as_the_guest_polls() {
    // A queue of 16 pages (2,048 commands): one access must not run them all (a guest could
    // hold its CPU for each command's walk of every translation), and polling GITS_CREADR,
    // as Linux's its_wait_for_range_completion does, runs the rest.
    let mut g = Guest::linux(1);
    let ctlr = g.read(GITS_CTLR, 4);
    g.write(GITS_CTLR, 4, ctlr & !1);
    g.write(GITS_CBASER, 8, CBASER_VALID | QUEUE | 15);
    g.write(GITS_CTLR, 4, 1);
    g.queue_bytes = 16 * 4096;
    g.ok(&[mapc(0, 0, true), mapd(1, 3, true), mapti(1, 0, 8192, 0)]);
    let posted = 2000;
    for i in 0..posted {
        let c = if i % 2 == 0 { int(1, 0) } else { clear(1, 0) };
        let at = (g.queue - RAM_BASE + g.writer) as usize;
        for (k, dw) in c.iter().enumerate() {
            g.ram.0[at + 8 * k..at + 8 * k + 8].copy_from_slice(&dw.to_le_bytes());
        }
        g.writer = (g.writer + 32) % g.queue_bytes;
    }
    let before = g.lpis.calls.len();
    assert!(g.write(GITS_CWRITER, 8, g.writer).is_empty());
    assert_eq!(g.lpis.calls.len() - before, COMMANDS_PER_ACCESS as usize, "one access runs its share");
    assert_eq!(g.read(GITS_CTLR, 4) & 1 << 31, 0, "not quiescent while commands wait");
    let mut polls = 0;
    while g.its.read(GITS_CREADR, 8).unwrap() != g.writer {
        assert!(g.its.advance(&g.ram, &mut g.lpis).is_empty());
        polls += 1;
        assert!(polls <= posted / COMMANDS_PER_ACCESS as usize + 1, "every poll runs its share");
    }
    assert_eq!(g.lpis.calls.len() - before, posted, "every command ran, once");
    assert_eq!(g.read(GITS_CTLR, 4), 1 | 1 << 31, "quiescent again");
    assert!(g.its.advance(&g.ram, &mut g.lpis).is_empty());
    assert_eq!(g.lpis.calls.len() - before, posted, "nothing more to run");
}
