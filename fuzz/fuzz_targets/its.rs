//! The virtual GICv3 ITS (`vgic::Its`) under any sequence of guest register accesses (any
//! offset, width and value, GITS_CWRITER and GITS_CTLR running the queue), any bytes in its
//! command queue (commands of the twelve kinds with the fuzzer's fields, or raw bytes),
//! devices' MSIs and resets. The ITS starts as Linux leaves it after its probe, its queue in
//! the fuzzer's RAM.
//! Checked: no panic; GITS_CREADR never ends beyond the queue; every LPI the distributor has
//! a route for is the translation of exactly one mapped event, no two events translate to
//! one LPI, and `translate` gives each mapped event the LPI and vCPU the distributor has;
//! INT and CLEAR only reach routed LPIs; reset leaves no route.
#![no_main]

use std::collections::{HashMap, HashSet};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vgic::{GuestMemory, Its, LpiTable, OutsideRam, FIRST_LPI, GITS_FRAME_SIZE, GITS_TRANSLATER};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_BYTES: usize = 0x2000;
const GITS_CTLR: u64 = 0x0;
const GITS_CBASER: u64 = 0x80;
const GITS_CWRITER: u64 = 0x88;
const GITS_CREADR: u64 = 0x90;

struct Ram(Vec<u8>);

impl GuestMemory for Ram {
    fn read(&self, ipa: u64, buf: &mut [u8]) -> Result<(), OutsideRam> {
        let start = usize::try_from(ipa.checked_sub(RAM_BASE).ok_or(OutsideRam)?).map_err(|_| OutsideRam)?;
        let end = start.checked_add(buf.len()).ok_or(OutsideRam)?;
        buf.copy_from_slice(self.0.get(start..end).ok_or(OutsideRam)?);
        Ok(())
    }
}

#[derive(Default)]
struct Lpis {
    routes: HashMap<u32, usize>,
}

impl LpiTable for Lpis {
    fn route(&mut self, lpi: u32, vcpu: usize) {
        self.routes.insert(lpi, vcpu);
    }
    fn unmap(&mut self, lpi: u32) {
        self.routes.remove(&lpi);
    }
    fn set_pending(&mut self, lpi: u32) {
        assert!(self.routes.contains_key(&lpi), "INT of LPI {lpi}, which has no route");
    }
    fn clear_pending(&mut self, lpi: u32) {
        assert!(self.routes.contains_key(&lpi), "CLEAR of LPI {lpi}, which has no route");
    }
    fn invalidate(&mut self, _: u32) {}
}

#[derive(Arbitrary, Debug)]
enum Op {
    Read {
        offset: u32,
        width: u8,
    },
    Write {
        offset: u32,
        width: u8,
        value: u64,
    },
    /// A command at the queue's slot `slot` (of the RAM's), then GITS_CWRITER past it.
    Command {
        slot: u8,
        number: u8,
        device: u8,
        event: u8,
        pintid: u8,
        icid: u8,
        rdbase: u8,
        size: u8,
        valid: bool,
    },
    /// Raw bytes anywhere in the RAM.
    Poke {
        at: u16,
        bytes: [u8; 8],
    },
    Msi {
        device: u16,
        event: u16,
    },
    Reset,
}

fn width(w: u8) -> usize {
    [1, 2, 4, 8, 3][usize::from(w % 5)]
}

const VCPUS: usize = 3;
const LPIS: u32 = 16;

fn check(its: &Its, lpis: &Lpis) {
    let translations: Vec<_> = its.translations().collect();
    let mapped: HashSet<u32> = translations.iter().map(|t| t.lpi).collect();
    assert_eq!(mapped.len(), translations.len(), "two events translate to one LPI");
    for lpi in lpis.routes.keys() {
        assert!(mapped.contains(lpi), "LPI {lpi} routed but the translation of no event");
    }
    for t in &translations {
        if let Ok((lpi, vcpu)) = its.translate(t.device_id, t.event_id) {
            assert_eq!(lpi, t.lpi);
            assert_eq!(lpis.routes.get(&lpi), Some(&vcpu));
        }
    }
    let creadr = its.read(GITS_CREADR, 8).unwrap();
    let queue_bytes = ((its.read(GITS_CBASER, 8).unwrap() & 0xff) + 1) * 4096;
    assert!(creadr < queue_bytes, "GITS_CREADR {creadr:#x} beyond the queue");
}

fuzz_target!(|ops: Vec<Op>| {
    let mut its = Its::new(VCPUS, LPIS).unwrap();
    let mut ram = Ram(vec![0; RAM_BYTES]);
    let mut lpis = Lpis::default();
    // Linux's probe: a one-page queue at the start of RAM, CWRITER 0, enabled.
    let probe = |its: &mut Its, ram: &Ram, lpis: &mut Lpis| {
        its.write(GITS_CBASER, 8, 1 << 63 | RAM_BASE, ram, lpis).unwrap();
        its.write(GITS_CWRITER, 8, 0, ram, lpis).unwrap();
        its.write(GITS_CTLR, 4, 1, ram, lpis).unwrap();
    };
    probe(&mut its, &ram, &mut lpis);
    for op in ops.into_iter().take(256) {
        match op {
            Op::Read { offset, width: w } => {
                let _ = its.read(u64::from(offset) % (GITS_FRAME_SIZE + 0x10), width(w));
            }
            Op::Write { offset, width: w, value } => {
                let _ = its.write(u64::from(offset) % (GITS_FRAME_SIZE + 0x10), width(w), value, &ram, &mut lpis);
            }
            Op::Command { slot, number, device, event, pintid, icid, rdbase, size, valid } => {
                // Mostly the twelve commands (0x01-0x0f), now and then any number.
                let number = if number < 0xf0 { number % 0x10 } else { number };
                let device = u64::from(device % 5);
                let event = u64::from(event % 9);
                let pintid = u64::from(FIRST_LPI - 1 + u32::from(pintid) % (LPIS + 2));
                let icid = u64::from(icid % 4);
                let rdbase = u64::from(rdbase % 4);
                let dw = [
                    u64::from(number) | device << 32,
                    event | pintid << 32 | u64::from(size % 10),
                    u64::from(valid) << 63 | rdbase << 16 | icid,
                    rdbase.wrapping_add(1) % 4 << 16,
                ];
                let at = usize::from(slot % 128) * 32;
                for (i, d) in dw.iter().enumerate() {
                    ram.0[at + 8 * i..at + 8 * i + 8].copy_from_slice(&d.to_le_bytes());
                }
                let _ = its.write(GITS_CWRITER, 4, ((at + 32) % 4096) as u64, &ram, &mut lpis);
            }
            Op::Poke { at, bytes } => {
                let at = usize::from(at) % (RAM_BYTES - 8);
                ram.0[at..at + 8].copy_from_slice(&bytes);
            }
            Op::Msi { device, event } => {
                if let Ok((lpi, vcpu)) = its.translate(u32::from(device), u32::from(event)) {
                    assert!((FIRST_LPI..FIRST_LPI + LPIS).contains(&lpi) && vcpu < VCPUS);
                }
            }
            Op::Reset => {
                its.reset(&mut lpis);
                assert!(lpis.routes.is_empty(), "reset left a route");
                probe(&mut its, &ram, &mut lpis);
            }
        }
        check(&its, &lpis);
    }
    // A guest CPU's write of GITS_TRANSLATER changes nothing.
    let before: Vec<_> = its.translations().collect();
    its.write(GITS_TRANSLATER, 4, 0, &ram, &mut lpis).unwrap();
    assert_eq!(its.translations().collect::<Vec<_>>(), before);
});
