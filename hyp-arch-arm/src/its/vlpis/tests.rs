//! Host tests of `BoardGicv4` over the ITS driver's fakes (its/tests.rs): the ITS's frames
//! and each CPU's redistributor in ordinary memory, a fake ITS on a thread that reads the
//! command queue. Every command is checked word for word against `ItsCommand`'s
//! constructors (themselves checked against the spec's layouts there); the tables come from
//! the host's heap, as `HeapItsMemory` takes them from the hypervisor's.

use std::vec::Vec;

use super::super::command::{Doorbell, EventId, ItsCommand, Lpi, RdBase, VpeId};
use super::super::redistributor::{
    lpi_config, LpiRedistributor, GICR_CTLR, GICR_PENDBASER, GICR_PROPBASER, GICR_TYPER, GICR_VPENDBASER,
    GICR_VPROPBASER, VPENDBASER_IDAI, VPENDBASER_PENDING_LAST, VPENDBASER_VALID,
};
use super::super::tests::{fake_redistributor, qemu_its, Behaviour, FakeIts, NoCpu, Regs};
use super::super::{ItsError, GITS_BASER, GITS_CBASER, GITS_CTLR, GITS_TRANSLATER, ITS_SIZE};
use super::*;

/// InnerCache write-back and Inner Shareable, as the redistributor's *BASER registers place
/// them (redistributor.rs).
const RD_ATTRIBUTES: u64 = 0b111 << 7 | 1 << 10;
/// Physical_Address [51:12] of GICR_PROPBASER and GICR_VPROPBASER.
const CONFIG_PA: u64 = 0x000f_ffff_ffff_f000;
/// Physical_Address [51:16] of the pending tables' registers.
const PENDING_PA: u64 = 0x000f_ffff_ffff_0000;
/// Each CPU's redistributor has Processor_Number 10 + its index, so an RDbase that named
/// the CPU's index instead would show.
const PROCESSOR_BASE: u16 = 10;

/// The board's GICv4.0 brought up over the fakes: the ITS frame, the fake ITS reading its
/// queue (from before `init`, which sends MAPD), and the redistributors of CPUs 0 to
/// `cpus - 1`.
struct Board {
    its: Regs,
    fake: FakeIts,
    rds: Vec<Regs>,
    gicv4: BoardGicv4<NoCpu>,
}

fn redistributors(cpus: usize) -> Vec<(Regs, LpiRedistributor)> {
    (0..cpus).map(|cpu| fake_redistributor(PROCESSOR_BASE + cpu as u16, true)).collect()
}

fn init(its: Regs, rds: &[(Regs, LpiRedistributor)]) -> Result<BoardGicv4<NoCpu>, ItsError> {
    // SAFETY: the leaked words of `Regs::new`, ITS_SIZE bytes, this test's alone; once.
    unsafe { BoardGicv4::init(its.0, |cpu| rds.get(cpu).map(|&(_, rd)| rd)) }
}

fn board(cpus: usize) -> Board {
    let its = qemu_its(true);
    let fake = FakeIts::start(its, Behaviour::Consume);
    let rds = redistributors(cpus);
    let gicv4 = init(its, &rds).unwrap();
    fake.take();
    Board { its, fake, rds: rds.iter().map(|&(regs, _)| regs).collect(), gicv4 }
}

impl Board {
    fn tables(&self, slot: usize) -> &SlotTables {
        self.gicv4.tables[slot].get().unwrap()
    }

    /// VMAPP of vCPU `vcpu` of the VM in `slot` to CPU `cpu`'s redistributor, with the
    /// slot's pending table for it, then VINVALL of the vPE.
    fn vmapp(&self, slot: usize, vcpu: usize, cpu: usize) -> [ItsCommand; 2] {
        let vpe = VpeId((slot * VPES_PER_SLOT + vcpu) as u16);
        let table = (RdBase::processor(PROCESSOR_BASE + cpu as u16), self.tables(slot).pending[vcpu], 14);
        [ItsCommand::vmapp(vpe, Some(table)), ItsCommand::vinvall(vpe)]
    }
}

/// A byte of an LPI configuration table at `table` (its address), for LPI `lpi`.
fn config_byte(table: u64, lpi: u32) -> u8 {
    // SAFETY: `table` is a configuration table the board allocated for 14 ID bits (a byte
    // per LPI from 8192 to 16383), never freed; `lpi` is inside it.
    unsafe { ((table as usize + (lpi - FIRST_LPI) as usize) as *const u8).read_volatile() }
}

/// The bytes of a pending table (2048 of them, for 14 ID bits).
fn pending_bytes(table: u64) -> &'static mut [u8] {
    // SAFETY: a pending table the board allocated (2048 bytes), never freed; the fakes have
    // no GIC that writes it, so the test is its only user.
    unsafe { core::slice::from_raw_parts_mut(table as *mut u8, (1 << ID_BITS) / 8) }
}

// ---- init ----

#[test]
fn a_gicv3_its_is_refused_and_left_untouched() {
    let its = qemu_its(false);
    let before: Vec<u64> = (0..ITS_SIZE).step_by(8).map(|at| its.read64(at)).collect();
    let asked = core::cell::Cell::new(0);
    // SAFETY: as in `init`.
    let board = unsafe {
        BoardGicv4::<NoCpu>::init(its.0, |_| {
            asked.set(asked.get() + 1);
            None
        })
    };
    assert_eq!(board.err(), Some(ItsError::NoVirtualLpis));
    let after: Vec<u64> = (0..ITS_SIZE).step_by(8).map(|at| its.read64(at)).collect();
    assert!(before == after, "no GITS_BASER, GITS_CBASER or GITS_CTLR written");
    assert_eq!((its.read32(GITS_CTLR), its.read64(GITS_CBASER)), (0, 0));
    assert_eq!(asked.get(), 0, "no redistributor looked at");
}

#[test]
fn init_brings_the_its_up_maps_device_zero_and_gives_each_redistributor_the_doorbells() {
    let its = qemu_its(true);
    let fake = FakeIts::start(its, Behaviour::Consume);
    // CPUs 0 and 2 online, 1 not.
    let rds = redistributors(3);
    let online = [Some(rds[0]), None, Some(rds[2])];
    // SAFETY: as in `init`.
    let board = unsafe { BoardGicv4::<NoCpu>::init(its.0, |cpu| online.get(cpu).copied().flatten().map(|r| r.1)) };
    let board = board.unwrap();

    assert_eq!(its.read32(GITS_CTLR), 1, "enabled");
    for n in 0..3 {
        assert_eq!(its.read64(GITS_BASER + 8 * n) >> 63, 1, "GITS_BASER{n} valid");
    }
    // DeviceID 0 with an event per LPI of every slot: 8 × 1024 events, 13 EventID bits.
    let read = fake.take();
    assert_eq!(read.len(), 1);
    let itt = read[0].0[2] & 0x000f_ffff_ffff_ff00;
    assert_eq!((SLOTS * MAX_LPIS, itt % 256), (8192, 0));
    assert_eq!(read[0], ItsCommand::mapd(DeviceId(0), Some((itt, 13))));

    // Every redistributor has the same doorbells' table, its own pending table, LPIs on.
    let rd0 = rds[0].0;
    let propbaser = rd0.read64(GICR_PROPBASER);
    let doorbells = propbaser & CONFIG_PA;
    assert_eq!(propbaser, doorbells | RD_ATTRIBUTES | 13, "IDbits 14 - 1");
    for vpe in 0..VPES as u32 {
        assert_eq!(config_byte(doorbells, FIRST_LPI + vpe), lpi_config(PRIORITY, true), "vPE {vpe}'s doorbell");
    }
    assert_eq!(config_byte(doorbells, FIRST_LPI + VPES as u32), 0, "no doorbell beyond the vPEs");
    let mut pending = Vec::new();
    for cpu in [0, 2] {
        let rd = rds[cpu].0;
        assert_eq!(rd.read64(GICR_PROPBASER), propbaser, "CPU {cpu}: the shared doorbells' table");
        let pendbaser = rd.read64(GICR_PENDBASER);
        let table = pendbaser & PENDING_PA;
        assert_eq!(pendbaser, table | RD_ATTRIBUTES | 1 << 62, "CPU {cpu}: PTZ");
        assert_eq!(table % 0x1_0000, 0);
        pending.push(table);
        assert_eq!(rd.read32(GICR_CTLR), 1, "CPU {cpu}: EnableLPIs");
        let rdbase = RdBase::processor(PROCESSOR_BASE + cpu as u16);
        assert_eq!(board.redistributors[cpu].map(|(_, rdbase)| rdbase), Some(rdbase));
    }
    assert_ne!(pending[0], pending[1], "a pending table each");
    let rd1 = rds[1].0;
    assert_eq!((rd1.read64(GICR_PROPBASER), rd1.read64(GICR_PENDBASER), rd1.read32(GICR_CTLR)), (0, 0, 0));
    assert!(board.redistributors[1].is_none() && board.redistributors[3..].iter().all(Option::is_none));
}

#[test]
fn a_redistributor_without_virtual_lpis_is_an_error() {
    let its = qemu_its(true);
    let _fake = FakeIts::start(its, Behaviour::Consume);
    let rds = [fake_redistributor(PROCESSOR_BASE, true), fake_redistributor(PROCESSOR_BASE + 1, false)];
    assert_eq!(init(its, &rds).err(), Some(ItsError::NoVirtualLpis));
    assert_eq!(rds[1].0.read32(GICR_CTLR), 0, "the GICv3 redistributor's LPIs left off");
}

// ---- attach, detach ----

#[test]
fn attach_maps_each_vpe_to_the_cpus_redistributor_slot_by_slot() {
    let b = board(2);
    let first = b.gicv4.attach(7, 2, 0).unwrap();
    assert_eq!(first, VlpiVm { vm: 7, slot: 0, vcpus: 2 });
    let pending = b.tables(0).pending;
    assert!(pending.iter().all(|p| p % 0x1_0000 == 0), "64 KiB aligned");
    assert!((1..VPES_PER_SLOT).all(|i| !pending[..i].contains(&pending[i])), "a pending table each");
    assert_eq!(
        b.fake.take(),
        [
            ItsCommand::vmapp(VpeId(0), Some((RdBase::processor(10), pending[0], 14))),
            ItsCommand::vinvall(VpeId(0)),
            ItsCommand::vmapp(VpeId(1), Some((RdBase::processor(10), pending[1], 14))),
            ItsCommand::vinvall(VpeId(1)),
        ],
        "each vPE mapped, then its cached configuration (another VM's, once) invalidated"
    );
    let second = b.gicv4.attach(8, VPES_PER_SLOT, 1).unwrap();
    assert_eq!(second, VlpiVm { vm: 8, slot: 1, vcpus: VPES_PER_SLOT });
    let expected: Vec<_> = (0..VPES_PER_SLOT).flat_map(|vcpu| b.vmapp(1, vcpu, 1)).collect();
    assert_eq!(b.fake.take(), expected, "vPEs 16 to 31, to CPU 1's RDbase");
    assert_eq!(expected[0].0[1] >> 32, 16);

    for slot in 2..SLOTS {
        assert_eq!(b.gicv4.attach(100 + slot, 1, 0).map(|vm| vm.slot), Ok(slot));
    }
    b.fake.take();
    assert_eq!(b.gicv4.attach(99, 1, 0), Err(VlpiError::NoSlot { slots: SLOTS }));
    assert_eq!(
        b.gicv4.attach(99, VPES_PER_SLOT + 1, 0),
        Err(VlpiError::TooManyVcpus { vcpus: VPES_PER_SLOT + 1, max: VPES_PER_SLOT })
    );
    assert_eq!(b.gicv4.attach(99, 1, 2), Err(VlpiError::Board), "no redistributor for CPU 2");
    assert_eq!(b.fake.take(), [], "nothing sent for a refused VM");
}

#[test]
fn a_vm_with_too_many_vcpus_takes_no_slot() {
    let b = board(1);
    assert!(matches!(b.gicv4.attach(1, VPES_PER_SLOT + 1, 0), Err(VlpiError::TooManyVcpus { .. })));
    assert!(matches!(b.gicv4.attach(1, 1, 5), Err(VlpiError::Board)));
    assert_eq!(b.gicv4.attach(2, 1, 0).map(|vm| vm.slot), Ok(0), "slot 0 still free");
}

#[test]
fn detach_unmaps_and_the_next_vm_gets_the_slot_with_its_tables_reset() {
    let b = board(1);
    let a = b.gicv4.attach(1, 1, 0).unwrap();
    let vm = b.gicv4.attach(2, 3, 0).unwrap();
    assert_eq!(vm.slot, 1);
    b.fake.take();
    // The VM's vLPIs configured and pending, as the guest and the GIC leave them.
    for lpi in [FIRST_LPI, FIRST_LPI + 700, FIRST_LPI + MAX_LPIS as u32 - 1] {
        b.gicv4.apply(&vm, VlpiCommand::Configure { lpi, config: 0xa1, mapped: false }).unwrap();
    }
    let config = b.tables(1).config.address();
    assert_eq!(config_byte(config, FIRST_LPI + 700), 0xa3);
    let pending = b.tables(1).pending;
    for &table in &pending {
        pending_bytes(table).fill(0xff);
    }

    b.gicv4.detach(&vm);
    let unmapped: Vec<_> = (16..19).map(|vpe| ItsCommand::vmapp(VpeId(vpe), None)).collect();
    assert_eq!(b.fake.take(), unmapped, "VMAPP V=0 of vPEs 16 to 18");
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 16), None, "the slot is free");

    let next = b.gicv4.attach(3, 2, 0).unwrap();
    assert_eq!(next, VlpiVm { vm: 3, slot: 1, vcpus: 2 }, "the freed slot, not slot 2");
    assert_eq!(b.tables(1).pending, pending, "the slot's tables kept");
    assert_eq!(b.fake.take(), [b.vmapp(1, 0, 0), b.vmapp(1, 1, 0)].concat());
    for &table in &pending {
        assert!(pending_bytes(table).iter().all(|&byte| byte == 0), "pending table zeroed");
    }
    for lpi in FIRST_LPI..FIRST_LPI + MAX_LPIS as u32 {
        assert_eq!(config_byte(config, lpi), lpi_config(0, false), "vLPI {lpi} disabled");
    }
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 17), Some((3, 1)));

    // A slot whose VM had fewer vCPUs than the last: only the mapped vPEs are unmapped.
    b.gicv4.detach(&a);
    assert_eq!(b.fake.take(), [ItsCommand::vmapp(VpeId(0), None)]);
    assert_eq!(b.gicv4.attach(4, 1, 0).map(|vm| vm.slot), Ok(0));
}

#[test]
fn a_vm_the_its_refuses_gives_its_slot_back() {
    let its = qemu_its(true);
    // MAPD at init goes through; the ITS stalls at the first VMAPP.
    let fake = FakeIts::start(its, Behaviour::StallAt(0x29));
    let rds = redistributors(1);
    let gicv4 = init(its, &rds).unwrap();
    assert_eq!(gicv4.attach(1, 2, 0), Err(VlpiError::Board));
    assert_eq!(fake.commands().iter().map(ItsCommand::opcode).collect::<Vec<_>>(), [0x08, 0x29]);
    assert_eq!(gicv4.doorbell(FIRST_LPI), None, "slot 0 free again");
    assert!(gicv4.vpe_cpu.iter().all(|cpu| cpu.load(core::sync::atomic::Ordering::Relaxed) == NONE));
}

// ---- apply ----

/// A VM in slot 1 (a VM in slot 0 before it), with 4 vCPUs: its events from 1024, its
/// vPEs from 16.
fn board_with_vm_in_slot_one() -> (Board, VlpiVm) {
    let b = board(1);
    b.gicv4.attach(1, 1, 0).unwrap();
    let vm = b.gicv4.attach(2, 4, 0).unwrap();
    assert_eq!(vm.slot, 1);
    b.fake.take();
    (b, vm)
}

#[test]
fn map_move_discard_and_clear_are_the_commands_of_the_vms_event() {
    let (b, vm) = board_with_vm_in_slot_one();
    let dev = DeviceId(0);
    let lpi = FIRST_LPI + 5;
    b.gicv4.apply(&vm, VlpiCommand::Map { lpi, vcpu: 2 }).unwrap();
    assert_eq!(
        b.fake.take(),
        [ItsCommand::vmapti(dev, EventId(1024 + 5), VpeId(18), Lpi(lpi), Doorbell::Lpi(Lpi(8192 + 18)))]
    );
    b.gicv4.apply(&vm, VlpiCommand::Move { lpi, vcpu: 3 }).unwrap();
    assert_eq!(
        b.fake.take(),
        [ItsCommand::vmovi(dev, EventId(1029), VpeId(19), Some(Doorbell::Lpi(Lpi(8192 + 19))))],
        "the new vPE's doorbell"
    );
    b.gicv4.apply(&vm, VlpiCommand::Clear { lpi }).unwrap();
    assert_eq!(b.fake.take(), [ItsCommand::clear(dev, EventId(1029))]);
    b.gicv4.apply(&vm, VlpiCommand::Discard { lpi }).unwrap();
    assert_eq!(b.fake.take(), [ItsCommand::discard(dev, EventId(1029))]);

    // The VM's last LPI: the slot's last event.
    let last = FIRST_LPI + MAX_LPIS as u32 - 1;
    b.gicv4.apply(&vm, VlpiCommand::Map { lpi: last, vcpu: 0 }).unwrap();
    assert_eq!(
        b.fake.take(),
        [ItsCommand::vmapti(dev, EventId(2047), VpeId(16), Lpi(last), Doorbell::Lpi(Lpi(8192 + 16)))]
    );
    // A vCPU the VM does not have (4 vCPUs) names no vPE, not the next VM's: refused,
    // nothing sent.
    for vcpu in [4, 16, usize::MAX] {
        assert_eq!(
            b.gicv4.apply(&vm, VlpiCommand::Map { lpi, vcpu }),
            Err(VlpiError::TooManyVcpus { vcpus: vcpu.saturating_add(1), max: 4 })
        );
        assert!(b.gicv4.apply(&vm, VlpiCommand::Move { lpi, vcpu }).is_err());
    }
    assert_eq!(b.fake.take(), []);
}

#[test]
fn configure_writes_the_slots_table_and_invalidates_only_a_mapped_event() {
    let (b, vm) = board_with_vm_in_slot_one();
    let config = b.tables(1).config.address();
    let lpi = FIRST_LPI + 9;
    b.gicv4.apply(&vm, VlpiCommand::Configure { lpi, config: 0xa1, mapped: false }).unwrap();
    assert_eq!(config_byte(config, lpi), 0xa3, "priority 0xa0, RES1, enabled");
    assert_eq!(b.fake.take(), [], "no INV of an unmapped event");
    b.gicv4.apply(&vm, VlpiCommand::Configure { lpi, config: 0x5c, mapped: true }).unwrap();
    assert_eq!(config_byte(config, lpi), 0x5e, "priority 0x5c, disabled");
    assert_eq!(b.fake.take(), [ItsCommand::inv(DeviceId(0), EventId(1024 + 9))]);
    b.gicv4.apply(&vm, VlpiCommand::Configure { lpi, config: 0xff, mapped: true }).unwrap();
    assert_eq!(config_byte(config, lpi), 0xff);
    b.fake.take();
    assert_eq!(config_byte(config, lpi - 1), lpi_config(0, false), "its neighbours untouched");
    assert_eq!(config_byte(config, lpi + 1), lpi_config(0, false));
    assert_eq!(config_byte(b.tables(0).config.address(), lpi), lpi_config(0, false), "slot 0's table untouched");
}

#[test]
fn raise_writes_the_event_to_translater_and_sends_nothing() {
    let (b, vm) = board_with_vm_in_slot_one();
    assert_eq!(GITS_TRANSLATER, 0x1_0040);
    b.gicv4.apply(&vm, VlpiCommand::Raise { lpi: FIRST_LPI + 300 }).unwrap();
    assert_eq!(b.its.read32(GITS_TRANSLATER), 1024 + 300);
    assert_eq!(b.fake.take(), []);
}

// ---- residency ----

/// GICR_VPENDBASER of a resident vPE with this pending table.
fn resident(table: u64) -> u64 {
    table | RD_ATTRIBUTES | VPENDBASER_VALID | VPENDBASER_IDAI | VPENDBASER_PENDING_LAST
}

#[test]
fn make_resident_moves_the_vpe_first_then_gives_the_redistributor_its_tables() {
    let b = board(2);
    b.gicv4.attach(1, 1, 0).unwrap();
    let vm = b.gicv4.attach(2, 3, 0).unwrap();
    b.fake.take();
    let (config, pending) = (b.tables(1).config.address(), b.tables(1).pending);
    let (rd0, rd1) = (b.rds[0], b.rds[1]);

    b.gicv4.make_resident(&vm, 0, 0);
    assert_eq!(b.fake.take(), [], "mapped to CPU 0 by its VMAPP: no VMOVP");
    assert_eq!(rd0.read64(GICR_VPROPBASER), config | RD_ATTRIBUTES | 13, "the slot's vLPI table, 14 bits");
    assert_eq!(rd0.read64(GICR_VPENDBASER), resident(pending[0]));

    // Another vPE on the same CPU: the first is made non-resident before.
    b.gicv4.make_resident(&vm, 1, 0);
    assert_eq!(rd0.read64(GICR_VPENDBASER), resident(pending[1]));
    assert_eq!(b.fake.take(), []);

    // vCPU 2 runs on CPU 1: VMOVP to its RDbase, once.
    b.gicv4.make_resident(&vm, 2, 1);
    assert_eq!(b.fake.take(), [ItsCommand::vmovp(VpeId(18), RdBase::processor(11))]);
    assert_eq!(rd1.read64(GICR_VPROPBASER), config | RD_ATTRIBUTES | 13);
    assert_eq!(rd1.read64(GICR_VPENDBASER), resident(pending[2]));
    assert!(!b.gicv4.make_non_resident(1), "nothing pending: PendingLast clear");
    assert_eq!(rd1.read64(GICR_VPENDBASER), pending[2] | RD_ATTRIBUTES, "Valid cleared, the table kept");
    b.gicv4.make_resident(&vm, 2, 1);
    assert_eq!(b.fake.take(), [], "already on CPU 1");
    assert_eq!(rd1.read64(GICR_VPENDBASER), resident(pending[2]));
    assert!(!b.gicv4.make_non_resident(1));

    // vCPU 0 to CPU 1 and back.
    b.gicv4.make_non_resident(0);
    b.gicv4.make_resident(&vm, 0, 1);
    b.gicv4.make_non_resident(1);
    b.gicv4.make_resident(&vm, 0, 0);
    assert_eq!(
        b.fake.take(),
        [ItsCommand::vmovp(VpeId(16), RdBase::processor(11)), ItsCommand::vmovp(VpeId(16), RdBase::processor(10))]
    );
    assert_eq!(rd0.read64(GICR_VPENDBASER), resident(pending[0]));
}

#[test]
fn make_non_resident_with_none_resident_writes_nothing() {
    let b = board(2);
    let vm = b.gicv4.attach(1, 1, 0).unwrap();
    // A value no write of the driver's would leave: any write would show.
    let untouched = 0x1234_0000 | VPENDBASER_VALID;
    b.rds[1].write64(GICR_VPENDBASER, untouched);
    assert!(!b.gicv4.make_non_resident(1));
    assert_eq!(b.rds[1].read64(GICR_VPENDBASER), untouched);
    assert!(!b.gicv4.make_non_resident(MAX_CPUS), "no such CPU");
    assert!(!b.gicv4.make_non_resident(usize::MAX));

    b.gicv4.make_resident(&vm, 0, 0);
    assert!(!b.gicv4.make_non_resident(0));
    let left = b.rds[0].read64(GICR_VPENDBASER);
    b.rds[0].write64(GICR_VPENDBASER, left | VPENDBASER_VALID);
    assert!(!b.gicv4.make_non_resident(0), "once: the CPU has none resident since");
    assert_eq!(b.rds[0].read64(GICR_VPENDBASER), left | VPENDBASER_VALID);
}

#[test]
fn a_redistributor_that_errs_when_left_counts_as_holding_a_vlpi() {
    // GICR_VPENDBASER's PendingLast can only be seen by a GIC that writes it after the
    // driver's write; what the fake can show is the error's side: a redistributor that
    // refuses (here its GICR_TYPER.VLPIS gone) is reported as holding a vLPI, so the vCPU
    // does not wait for a doorbell.
    let b = board(1);
    let vm = b.gicv4.attach(1, 1, 0).unwrap();
    b.gicv4.make_resident(&vm, 0, 0);
    b.rds[0].write64(GICR_TYPER, b.rds[0].read64(GICR_TYPER) & !(1 << 1));
    assert!(b.gicv4.make_non_resident(0));
    assert!(!b.gicv4.make_non_resident(0), "none resident since");
}

// ---- doorbells ----

#[test]
fn a_doorbell_names_the_vm_and_vcpu_of_an_attached_slot() {
    let b = board(1);
    let first = b.gicv4.attach(7, 2, 0).unwrap();
    b.gicv4.attach(9, 3, 0).unwrap();
    assert_eq!(b.gicv4.doorbell(FIRST_LPI), Some((7, 0)));
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 1), Some((7, 1)));
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 16), Some((9, 0)));
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 18), Some((9, 2)));
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + 32), None, "slot 2 is free");
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + VPES as u32 - 1), None, "the last slot is free");
    assert_eq!(b.gicv4.doorbell(FIRST_LPI - 1), None, "not an LPI");
    assert_eq!(b.gicv4.doorbell(27), None);
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + VPES as u32), None, "beyond the vPEs");
    assert_eq!(b.gicv4.doorbell(u32::MAX), None);
    b.gicv4.detach(&first);
    assert_eq!(b.gicv4.doorbell(FIRST_LPI), None, "detached");
    // Every slot taken (slot 0 again first): the last slot's doorbells are its VM's.
    let slots: Vec<_> = (100..100 + SLOTS - 1).map(|vm| b.gicv4.attach(vm, 1, 0).unwrap().slot).collect();
    assert_eq!(slots[..2], [0, 2]);
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + VPES as u32 - VPES_PER_SLOT as u32), Some((100 + SLOTS - 2, 0)));
    assert_eq!(b.gicv4.doorbell(FIRST_LPI + VPES as u32), None, "beyond the vPEs, every slot taken");
}
