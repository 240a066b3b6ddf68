//! The hostile guest of tests/tests/hostile.rs (docs/hostile-guests.md): it attacks every
//! surface a guest reaches, as an attacker would, and checks that each gets the architected
//! answer; a bystander VM beside it must finish its own checks untouched. 3 vCPUs, a disk.
//!
//! - the GIC: every distributor (and, on GICv3, redistributor) offset at every width, read,
//!   then written with all ones; redistributor frames beyond its vCPUs;
//! - SMCCC: pseudo-random function IDs over HVC and SMC, and non-zero immediates;
//! - system registers: a read of every op0 = 2 and op0 = 3 encoding; writes of all ones to
//!   the ID, implementation defined, PMU, EL2/EL3 and debug classes; TLBI, AT and set/way
//!   operations with all-ones operands;
//! - PSCI: bad targets and entry points, and two vCPUs racing to start a third;
//! - virtqueues: descriptors out of RAM, into MMIO, looping, overflowing, a request over the
//!   size limit, indirect tables of bad sizes, sectors beyond the disk, and descriptors
//!   changed by a second vCPU while the device reads them;
//! - the virtio page: every offset at every width read (from its shadow page), then written
//!   with all ones.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use selftest_guest::virtio::*;
use selftest_guest::*;

const RAM: usize = 0x4000_0000;
const RAM_SIZE: usize = 64 << 20;
/// Generated instructions (one access each) go here.
const CODE: usize = 0x4080_0000;
/// The block device's rings and request header.
const QUEUE: usize = 0x4100_0000;
/// Data buffers.
const BUFFER_A: usize = 0x4110_0000;
const BUFFER_B: usize = 0x4120_0000;
/// An indirect descriptor table.
const TABLE: usize = 0x4130_0000;
const NOT_SUPPORTED: u64 = u64::MAX;
const EC_UNKNOWN: u64 = 0;

// ---- generated instructions -------------------------------------------------------------

/// `mrs x0, S<op0>_<op1>_C<n>_C<m>_<op2>`.
fn mrs(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    0xd520_0000 | op0 << 19 | op1 << 16 | crn << 12 | crm << 8 | op2 << 5
}

/// `msr S<op0>_<op1>_C<n>_C<m>_<op2>, x0` (op0 = 1: the SYS instruction with x0).
fn msr(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    0xd500_0000 | op0 << 19 | op1 << 16 | crn << 12 | crm << 8 | op2 << 5
}

/// `mov x0, #-1`.
const ALL_ONES_X0: u32 = 0x9280_0000;

/// Runs `insns` then `ret` as code: None if it completed, Some(ESR) if it took an exception.
fn run(insns: &[u32]) -> Option<u64> {
    let mut code = [RET; 4];
    code[..insns.len()].copy_from_slice(insns);
    place_code(CODE, &code);
    expect_exception(|| call_code(CODE)).map(|(esr, _)| esr)
}

// ---- GIC --------------------------------------------------------------------------------

/// One access of `width` bytes at `addr`: whether it completed (else it took a data abort;
/// any other exception is reported and counted as a failure in `other`).
fn window_access(addr: usize, width: usize, write: bool, other: &mut u32) -> bool {
    // SAFETY: a register window of this VM (its GIC, its UART): the hypervisor serves the access or
    // injects an abort, which the vector catches.
    let caught = expect_exception(|| unsafe {
        match (width, write) {
            (1, false) => drop(read_volatile(addr as *const u8)),
            (2, false) => drop(read_volatile(addr as *const u16)),
            (4, false) => drop(read_volatile(addr as *const u32)),
            (8, false) => drop(read_volatile(addr as *const u64)),
            (1, true) => write_volatile(addr as *mut u8, u8::MAX),
            (2, true) => write_volatile(addr as *mut u16, u16::MAX),
            (4, true) => write_volatile(addr as *mut u32, u32::MAX),
            _ => write_volatile(addr as *mut u64, u64::MAX),
        }
    });
    match caught {
        None => true,
        Some((esr, far)) if esr >> 26 == EC_DATA_ABORT_SAME_EL && far == addr as u64 => false,
        Some((esr, far)) => {
            *other += 1;
            println!("# {addr:#x} width {width}: ESR_EL1 {esr:#x} FAR_EL1 {far:#x}");
            false
        }
    }
}

/// Every offset of `[base, base + size)` at every width: (accesses served, aborted).
fn sweep(base: usize, size: usize, write: bool, other: &mut u32) -> (u32, u32) {
    let (mut served, mut aborted) = (0, 0);
    for width in [1, 2, 4, 8] {
        for offset in (0..size).step_by(width) {
            if window_access(base + offset, width, write, other) {
                served += 1;
            } else {
                aborted += 1;
            }
        }
    }
    (served, aborted)
}

fn attack_gic(c: &mut Checks) {
    let v3 = gic::is_v3();
    let mut other = 0;
    let (dist_read, dist_read_aborted) = sweep(gic::GICD, 0x1_0000, false, &mut other);
    let (dist_written, dist_write_aborted) = sweep(gic::GICD, 0x1_0000, true, &mut other);
    c.check(
        other == 0 && dist_read > 0 && dist_written > 0,
        format_args!(
            "gic: every distributor offset at widths 1/2/4/8: {dist_read} reads served, {dist_read_aborted} aborted; \
             all ones written {dist_written} times, {dist_write_aborted} aborted; no other exception"
        ),
    );
    if v3 {
        // Its three redistributors (RD and SGI frames), then the frames beyond them.
        let (rd_read, _) = sweep(gic::GICR, 3 * 0x2_0000, false, &mut other);
        let (rd_written, _) = sweep(gic::GICR, 3 * 0x2_0000, true, &mut other);
        let mut beyond_served = 0;
        for frame in 3..16 {
            for offset in [0, 0x8, 0x14, 0x1_0000, 0x1_0100, 0x1_ffff & !3] {
                let addr = gic::GICR + frame * 0x2_0000 + offset;
                beyond_served += u32::from(window_access(addr, 4, false, &mut other));
                beyond_served += u32::from(window_access(addr, 4, true, &mut other));
            }
        }
        c.check(
            other == 0 && rd_read > 0 && rd_written > 0 && beyond_served == 0,
            format_args!(
                "gic: its redistributors swept ({rd_read} reads and {rd_written} writes served); every access to \
                 the 13 frames beyond its 3 vCPUs aborted ({beyond_served} served)"
            ),
        );
        // SGIs to everyone with every field set: ICC_SGI1R_EL1, ICC_SGI0R_EL1, ICC_ASGI1R_EL1.
        let sgis = [msr(3, 0, 12, 11, 5), msr(3, 0, 12, 11, 7), msr(3, 0, 12, 11, 6)];
        let refused = sgis.iter().filter(|&&insn| run(&[ALL_ONES_X0, insn]).is_some()).count();
        c.check(refused == 0, format_args!("gic: all-ones SGI register writes taken without a fault"));
    } else {
        let (cpu_read, _) = sweep(gic::GICC, 0x2000, false, &mut other);
        let mut beyond_served = 0;
        for offset in (0x2000..0x1_0000).step_by(0x800) {
            beyond_served += u32::from(window_access(gic::GICC + offset, 4, false, &mut other));
        }
        c.check(
            other == 0 && cpu_read > 0 && beyond_served == 0,
            format_args!("gic: its CPU interface swept ({cpu_read} reads served); beyond its 8 KiB every read aborted"),
        );
    }
    // Put the distributor back in order: nothing enabled, pending or active.
    for reg in (0..0x80).step_by(4) {
        gic::write32(gic::GICD + 0x180 + reg, u32::MAX); // ICENABLER
        gic::write32(gic::GICD + 0x280 + reg, u32::MAX); // ICPENDR
        gic::write32(gic::GICD + 0x380 + reg, u32::MAX); // ICACTIVER
    }
    gic::write32(gic::GICD, 0);
}

// ---- SMCCC ------------------------------------------------------------------------------

/// xorshift64: the same sequence at every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Function IDs that do something to this VM (PSCI, the hypervisor's VM exit): not sent.
fn acts(function: u32) -> bool {
    function & 0xbfff_ffe0 == 0x8400_0000 || function & 0xbfff_ffff == 0x8600_0001
}

/// `smc #0` with x0 = `function` and x1-x3 as given: x0 after.
fn smc(function: u64, x1: u64, x2: u64, x3: u64) -> u64 {
    let mut r = function;
    // SAFETY: an SMC the hypervisor traps (HCR_EL2.TSC) and answers like an HVC.
    unsafe {
        asm!("smc #0", inout("x0") r, inout("x1") x1 => _, inout("x2") x2 => _, inout("x3") x3 => _, out("x4") _,
            out("x5") _, out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _, options(nostack));
    }
    r
}

fn attack_smccc(c: &mut Checks) {
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let (mut calls, mut answered) = (0, 0);
    while calls < 4000 {
        let x0 = random.next();
        let function = x0 as u32;
        if acts(function) || function & 0xffff_fffe == 0x8000_0000 {
            continue;
        }
        let (x1, x2, x3) = (random.next(), random.next(), random.next());
        let result = if calls % 2 == 0 { hvc3(x0, x1, x2, x3) } else { smc(x0, x1, x2, x3) };
        calls += 1;
        answered += u32::from(result == NOT_SUPPORTED);
    }
    c.check(
        answered == calls,
        format_args!("smccc: {calls} random function IDs over HVC and SMC: {answered} answered NOT_SUPPORTED"),
    );
    // HVC and SMC with non-zero immediates (generated), with a function that would be
    // answered over #0.
    let (mut tried, mut refused) = (0, 0);
    for imm in (1..=0xffffu32).step_by(257).chain([0xffff]) {
        for insn in [0xd400_0002 | imm << 5, 0xd400_0003 | imm << 5] {
            // mov x0, #0x8000_0000 (SMCCC_VERSION): movz x0, #0x8000, lsl #16.
            let answer = run_returning(&[0xd2b0_0000, insn]);
            tried += 1;
            refused += u32::from(answer == Some(NOT_SUPPORTED));
        }
    }
    c.check(
        refused == tried,
        format_args!("smccc: HVC and SMC with {tried} non-zero immediates: every one answered NOT_SUPPORTED"),
    );
}

/// Runs `insns` then `ret`, returning x0 (None if it took an exception).
fn run_returning(insns: &[u32]) -> Option<u64> {
    let mut code = [RET; 4];
    code[..insns.len()].copy_from_slice(insns);
    place_code(CODE, &code);
    let mut x0 = 0;
    let caught = expect_exception(|| {
        // SAFETY: the code placed above, which changes only x0 (and whatever an HVC or SMC
        // clobbers, all caller-saved).
        unsafe { asm!("blr {}", in(reg) CODE, out("x0") x0, clobber_abi("C")) };
    });
    caught.is_none().then_some(x0)
}

// ---- system registers -------------------------------------------------------------------

/// Reads every op0 = `op0` encoding: (read, UNDEFINED, other exceptions).
fn read_space(op0: u32, undefined_in: impl Fn(u32, u32, u32, u32) -> bool) -> (u32, u32, u32, u32) {
    let (mut read, mut undefined, mut other, mut wrong) = (0, 0, 0, 0);
    for op1 in 0..8 {
        for crn in 0..16 {
            for crm in 0..16 {
                for op2 in 0..8 {
                    match run(&[mrs(op0, op1, crn, crm, op2)]) {
                        None => {
                            read += 1;
                            if undefined_in(op1, crn, crm, op2) {
                                wrong += 1;
                                println!("# S{op0}_{op1}_C{crn}_C{crm}_{op2} was read; it must be UNDEFINED");
                            }
                        }
                        Some(esr) if esr >> 26 == EC_UNKNOWN => undefined += 1,
                        Some(esr) => {
                            other += 1;
                            println!("# S{op0}_{op1}_C{crn}_C{crm}_{op2}: ESR_EL1 {esr:#x}");
                        }
                    }
                }
            }
        }
    }
    (read, undefined, other, wrong)
}

/// EL2 (op1 4), EL12/EL02 (op1 5) and EL3 (op1 6) registers, never accessible at EL1 here.
fn higher_el(op1: u32) -> bool {
    (4..=6).contains(&op1)
}

/// The PMU's registers (PMCR_EL0 ... PMEVTYPER<n>_EL0, PMINTEN*_EL1): not offered to guests.
fn pmu(op1: u32, crn: u32, crm: u32) -> bool {
    (op1 == 3 && crn == 9 && (12..=14).contains(&crm))
        || (op1 == 3 && crn == 14 && crm >= 8)
        || (op1 == 0 && crn == 9 && crm == 14)
}

fn attack_system_registers(c: &mut Checks) {
    let (read, undefined, other, wrong) = read_space(3, |op1, crn, crm, _| higher_el(op1) || pmu(op1, crn, crm));
    c.check(
        other == 0 && wrong == 0 && read > 0,
        format_args!(
            "sysreg: all 16384 op0=3 encodings read: {read} read, {undefined} UNDEFINED (EL2/EL3 and PMU among them), \
             no other exception"
        ),
    );
    let (read, undefined, other, wrong) = read_space(2, |op1, _, _, _| higher_el(op1));
    c.check(
        other == 0 && wrong == 0,
        format_args!(
            "sysreg: all 16384 op0=2 (debug) encodings read: {read} read, {undefined} UNDEFINED, no other exception"
        ),
    );

    // All ones written where a write must fault: the ID registers (read-only), the
    // implementation defined space (trapped: HCR_EL2.TIDCP), the PMU, EL2 and EL3.
    let mut must_fault = 0;
    let mut faulted = 0;
    let mut attempt = |insn: u32| {
        must_fault += 1;
        if matches!(run(&[ALL_ONES_X0, insn]), Some(esr) if esr >> 26 == EC_UNKNOWN) {
            faulted += 1;
        }
    };
    for crm in 0..8 {
        for op2 in 0..8 {
            attempt(msr(3, 0, 0, crm, op2));
        }
    }
    for op1 in 0..8 {
        for crn in [11, 15] {
            for crm in 0..16 {
                for op2 in 0..8 {
                    attempt(msr(3, op1, crn, crm, op2));
                }
            }
        }
    }
    for crm in 12..=14 {
        for op2 in 0..8 {
            attempt(msr(3, 3, 9, crm, op2));
        }
    }
    for op1 in 4..=6 {
        for crn in [1, 2, 4, 12] {
            for op2 in 0..8 {
                attempt(msr(3, op1, crn, 0, op2));
            }
        }
    }
    c.check(
        faulted == must_fault,
        format_args!(
            "sysreg: all ones written to {must_fault} ID, IMPDEF, PMU, EL2 and EL3 registers: {faulted} UNDEFINED"
        ),
    );

    // The debug registers take all ones and give back what the architecture keeps of it,
    // then are cleared (breakpoints and watchpoints 0-15, and the claim tags).
    let (breakpoints, watchpoints) = debug::counts();
    let mut taken = 0;
    let mut debug_faults = 0;
    for (count, crn_op2) in [(breakpoints, [4u32, 5]), (watchpoints, [6, 7])] {
        for n in 0..count as u32 {
            for op2 in crn_op2 {
                debug_faults += u32::from(run(&[ALL_ONES_X0, msr(2, 0, 0, n, op2)]).is_some());
                debug_faults += u32::from(run(&[0xd280_0000, msr(2, 0, 0, n, op2)]).is_some()); // mov x0, #0
                taken += 1;
            }
        }
    }
    c.check(debug_faults == 0, format_args!("sysreg: {taken} debug registers took all ones, then zero"));

    // TLBI (op1 0; 4 and 6 are EL2's and EL3's), AT, and the set/way operations, with an
    // all-ones operand: each completes or is UNDEFINED, and the EL2/EL3 ones are UNDEFINED.
    let (mut done, mut undefined, mut other, mut wrong) = (0, 0, 0, 0);
    let mut sys = |op1: u32, crn: u32, crm: u32, op2: u32| match run(&[ALL_ONES_X0, msr(1, op1, crn, crm, op2)]) {
        None if higher_el(op1) => wrong += 1,
        None => done += 1,
        Some(esr) if esr >> 26 == EC_UNKNOWN => undefined += 1,
        Some(esr) => {
            other += 1;
            println!("# SYS #{op1}, C{crn}, C{crm}, #{op2}: ESR_EL1 {esr:#x}");
        }
    };
    for op1 in [0, 4, 6] {
        for crm in 0..16 {
            for op2 in 0..8 {
                sys(op1, 8, crm, op2);
            }
        }
        for op2 in 0..8 {
            sys(op1, 7, 8, op2);
        }
    }
    for crm in [6, 10, 14] {
        sys(0, 7, crm, 2); // DC ISW, CSW, CISW
    }
    c.check(
        other == 0 && wrong == 0,
        format_args!(
            "sysreg: TLBI, AT and set/way operations with all-ones operands: {done} done, {undefined} UNDEFINED \
             (every EL2/EL3 one), no other exception"
        ),
    );
}

// ---- PSCI -------------------------------------------------------------------------------

const SUCCESS: i64 = 0;
const INVALID_PARAMETERS: i64 = -2;
const ALREADY_ON: i64 = -4;
const ON_PENDING: i64 = -5;
const INVALID_ADDRESS: i64 = -9;
const AFFINITY_OFF: i64 = 1;

// vCPU 2's entry: counts its starts and records its context id, then turns itself off. It
// needs no stack, so it cannot disturb vCPU 1's.
global_asm!(
    r#"
    .section .text, "ax"
    .global vcpu2_entry
vcpu2_entry:
    adrp    x1, VCPU2_STARTS
    add     x1, x1, :lo12:VCPU2_STARTS
1:  ldxr    x2, [x1]
    add     x2, x2, #1
    stxr    w3, x2, [x1]
    cbnz    w3, 1b
    str     x0, [x1, #8]
    dmb     ish
    movz    x0, #0x0002
    movk    x0, #0x8400, lsl #16
    hvc     #0
2:  b       2b
"#
);

extern "C" {
    fn vcpu2_entry();
}

/// vCPU 2's starts and the context id of its last one.
#[no_mangle]
static mut VCPU2_STARTS: [u64; 2] = [0; 2];

fn vcpu2_starts() -> u64 {
    // SAFETY: written by vCPU 2's entry with exclusives; read whole.
    unsafe { read_volatile(&raw const VCPU2_STARTS[0]) }
}

/// The round vCPU 1 is to race in, and what its CPU_ON got.
static ROUND: AtomicU64 = AtomicU64::new(0);
static RACER_RESULT: AtomicU64 = AtomicU64::new(0);
static RACER_DONE: AtomicU64 = AtomicU64::new(0);
const ROUNDS: u64 = 200;

fn cpu_on(target: u64, entry: u64, context: u64) -> i64 {
    hvc3(PSCI_CPU_ON_64, target, entry, context) as i64
}

extern "C" fn racer(_: u64) {
    for round in 1..=ROUNDS {
        while ROUND.load(Ordering::SeqCst) != round {}
        let r = cpu_on(2, vcpu2_entry as *const () as u64, 2 * round + 1);
        RACER_RESULT.store(r as u64, Ordering::SeqCst);
        RACER_DONE.store(round, Ordering::SeqCst);
    }
    hvc(PSCI_CPU_OFF, 0);
}

fn attack_psci(c: &mut Checks) {
    let entry = vcpu2_entry as *const () as u64;
    let bad_targets = [3u64, 0xff, 0x100, 0x1_0000, 0xff_0000_0002, u64::MAX, 0x8000_0002];
    let invalid = bad_targets.iter().filter(|&&t| cpu_on(t, entry, 0) == INVALID_PARAMETERS).count();
    let info_invalid =
        bad_targets.iter().filter(|&&t| hvc3(PSCI_AFFINITY_INFO_64, t, 0, 0) as i64 == INVALID_PARAMETERS).count();
    c.check(
        invalid == bad_targets.len() && info_invalid == bad_targets.len(),
        format_args!(
            "psci: CPU_ON and AFFINITY_INFO of {} vCPUs that do not exist: INVALID_PARAMETERS ({invalid}, {info_invalid})",
            bad_targets.len()
        ),
    );
    let bad_entries = [0u64, 0x1000, gic::GICD as u64, (RAM + RAM_SIZE) as u64, u64::MAX, (RAM + RAM_SIZE - 2) as u64];
    let refused = bad_entries.iter().filter(|&&e| cpu_on(2, e, 0) == INVALID_ADDRESS).count();
    let still_off = hvc3(PSCI_AFFINITY_INFO_64, 2, 0, 0) as i64 == AFFINITY_OFF && vcpu2_starts() == 0;
    c.check(
        refused == bad_entries.len() && still_off,
        format_args!(
            "psci: CPU_ON with {} entry points outside RAM: INVALID_ADDRESS, the vCPU stays off",
            bad_entries.len()
        ),
    );
    c.check(cpu_on(0, entry, 0) == ALREADY_ON, format_args!("psci: CPU_ON of the calling vCPU: ALREADY_ON"));

    // Two vCPUs race to start a third, ROUNDS times: every SUCCESS starts it exactly once,
    // every other answer is ALREADY_ON or ON_PENDING.
    if start_vcpu(1, racer, 0) != SUCCESS {
        c.check(false, format_args!("psci: vCPU 1 started for the race"));
        return;
    }
    let (mut successes, mut others_ok, mut answers) = (0u64, 0u64, 0u64);
    for round in 1..=ROUNDS {
        ROUND.store(round, Ordering::SeqCst);
        let mine = cpu_on(2, entry, 2 * round);
        while RACER_DONE.load(Ordering::SeqCst) != round {}
        let theirs = RACER_RESULT.load(Ordering::SeqCst) as i64;
        for r in [mine, theirs] {
            answers += 1;
            match r {
                SUCCESS => successes += 1,
                ALREADY_ON | ON_PENDING => others_ok += 1,
                other => println!("# round {round}: CPU_ON answered {other}"),
            }
        }
        let start = counter_ms();
        while hvc3(PSCI_AFFINITY_INFO_64, 2, 0, 0) as i64 != AFFINITY_OFF && counter_ms() - start < 2000 {}
    }
    let starts = vcpu2_starts();
    c.check(
        successes == starts && successes >= ROUNDS && successes + others_ok == answers,
        format_args!(
            "psci: two vCPUs raced {ROUNDS} times to start a third: {successes} SUCCESS, {starts} starts, \
             {others_ok} ALREADY_ON or ON_PENDING"
        ),
    );
    let start = counter_ms();
    while hvc3(PSCI_AFFINITY_INFO_64, 1, 0, 0) as i64 != AFFINITY_OFF && counter_ms() - start < 2000 {}
}

// ---- virtqueues -------------------------------------------------------------------------

/// Set by vCPU 0 to stop the descriptor flipper.
static FLIP: AtomicU32 = AtomicU32::new(0);

extern "C" fn flipper(desc: u64) {
    let addr = desc as *mut u64;
    let mut n = 0u64;
    while FLIP.load(Ordering::Relaxed) == 1 {
        let value = if n.is_multiple_of(2) { BUFFER_A as u64 } else { 0x1_0000_0000 };
        // SAFETY: descriptor 1's address field in this VM's queue, which this vCPU flips
        // while the device reads it.
        unsafe { write_volatile(addr, value) };
        n += 1;
    }
    FLIP.store(2, Ordering::SeqCst);
    hvc(PSCI_CPU_OFF, 0);
}

fn fill(at: usize, len: usize, byte: u8) {
    for i in 0..len {
        // SAFETY: this VM's RAM.
        unsafe { write_volatile((at + i) as *mut u8, byte) };
    }
}

fn attack_virtqueues(c: &mut Checks) {
    let Some(mut blk) = Block::new(QUEUE) else {
        c.check(false, format_args!("virtio: a block device to attack"));
        return;
    };
    let sectors = blk.capacity();
    fill(BUFFER_A, 4096, 0x5a);
    let good = blk.transfer(BLK_T_OUT, 0, BUFFER_A, 4096);
    c.check(
        good == Completion::Used { status: BLK_S_OK, written: 1 },
        format_args!("virtio: a good 4 KiB write to its {sectors}-sector disk: {good:?}"),
    );
    let (h, s) = (blk.header as u64, blk.status as u64);
    // Each attack: its chain, and what it must get.
    let ioerr = Completion::Used { status: BLK_S_IOERR, written: 1 };
    type Chain<'a> = &'a [(u64, u32, u16)];
    let attacks: [(&str, Chain<'_>, Completion); 9] = [
        ("data outside RAM", &[(h, 16, F_NEXT), (0x1_0000_0000, 4096, F_NEXT | F_WRITE), (s, 1, F_WRITE)], ioerr),
        (
            "data in the GIC's window",
            &[(h, 16, F_NEXT), (gic::GICD as u64, 4096, F_NEXT | F_WRITE), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "data at the last byte of RAM",
            &[(h, 16, F_NEXT), ((RAM + RAM_SIZE - 1) as u64, 512, F_NEXT | F_WRITE), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "a length that wraps the address",
            &[(h, 16, F_NEXT), (u64::MAX - 511, 1024, F_NEXT | F_WRITE), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "a 4 GiB - 1 length",
            &[(h, 16, F_NEXT), (BUFFER_A as u64, u32::MAX, F_NEXT | F_WRITE), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "32 MiB in two overlapping 16 MiB buffers",
            &[
                (h, 16, F_NEXT),
                (RAM as u64, 16 << 20, F_NEXT | F_WRITE),
                (RAM as u64, 16 << 20, F_NEXT | F_WRITE),
                (s, 1, F_WRITE),
            ],
            ioerr,
        ),
        (
            "a device-readable buffer to read into",
            &[(h, 16, F_NEXT), (BUFFER_A as u64, 512, F_NEXT), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "the header outside RAM",
            &[(0x1_0000_0000, 16, F_NEXT), (BUFFER_A as u64, 512, F_NEXT | F_WRITE), (s, 1, F_WRITE)],
            ioerr,
        ),
        (
            "a status byte outside RAM",
            &[(h, 16, F_NEXT), (BUFFER_A as u64, 512, F_NEXT | F_WRITE), (0x1_0000_0000, 1, F_WRITE)],
            Completion::NeedsReset,
        ),
    ];
    let mut recovered = 0;
    for (what, chain, expected) in attacks {
        blk.prepare(BLK_T_IN, 0);
        let got = blk.submit(chain, 5000);
        c.check(got == expected, format_args!("virtio: {what}: {got:?}"));
        blk.reset();
        recovered +=
            u32::from(blk.transfer(BLK_T_IN, 0, BUFFER_B, 512) == Completion::Used { status: BLK_S_OK, written: 513 });
    }
    c.check(recovered == 9, format_args!("virtio: after each attack a good read works again ({recovered} of 9)"));

    // Two descriptors over the same 4 KiB, within the limits: the device reads 8 KiB into
    // it, each half through a descriptor of the same memory (the hypervisor hands the board's
    // disk physical runs, never Rust objects, so it may be named twice), in an order the
    // guest cannot rely on (as on hardware): each byte ends as the disk's first 4 KiB (0x5a,
    // written above) or its second (0, never written), and none as it was before.
    fill(BUFFER_B, 4096, 0xee);
    blk.prepare(BLK_T_IN, 0);
    blk.queue.set_descriptor(0, h, 16, F_NEXT, 1);
    blk.queue.set_descriptor(1, BUFFER_B as u64, 4096, F_NEXT | F_WRITE, 2);
    blk.queue.set_descriptor(2, BUFFER_B as u64, 4096, F_NEXT | F_WRITE, 3);
    blk.queue.set_descriptor(3, s, 1, F_WRITE, 0);
    let twice = blk.publish_and_wait(0, 5000);
    // SAFETY: this VM's RAM.
    let byte = |i: usize| unsafe { read_volatile((BUFFER_B + i) as *const u8) };
    let first = (0..4096).filter(|&i| byte(i) == 0x5a).count();
    let second = (0..4096).filter(|&i| byte(i) == 0).count();
    c.check(
        twice == Completion::Used { status: BLK_S_OK, written: 8193 } && first + second == 4096,
        format_args!(
            "virtio: 8 KiB read into one 4 KiB buffer named twice: {twice:?}, its bytes the disk's: {first} of the first 4 KiB, {second} of the second"
        ),
    );

    // A descriptor loop, and indirect tables of bad sizes: the ring cannot be trusted, so
    // the device needs a reset (virtio 1.2, 2.1.2), with no status to write.
    blk.prepare(BLK_T_IN, 0);
    blk.queue.set_descriptor(0, h, 16, F_NEXT, 1);
    blk.queue.set_descriptor(1, BUFFER_A as u64, 512, F_NEXT | F_WRITE, 0);
    let looped = blk.publish_and_wait(0, 5000);
    blk.reset();
    c.check(looped == Completion::NeedsReset, format_args!("virtio: a descriptor loop: {looped:?}"));
    for (len, what) in
        [(0u32, "empty"), (15, "not a multiple of 16"), (16 * 1024, "longer than the queue"), (!15, "4 GiB")]
    {
        blk.prepare(BLK_T_IN, 0);
        let table = TABLE as u64;
        let entry = |i: usize, addr: u64, len: u32, flags: u16, next: u16| {
            let at = TABLE + 16 * i;
            // SAFETY: this VM's RAM (the indirect table).
            unsafe {
                write_volatile(at as *mut u64, addr);
                write_volatile((at + 8) as *mut u32, len);
                write_volatile((at + 12) as *mut u16, flags);
                write_volatile((at + 14) as *mut u16, next);
            }
        };
        entry(0, h, 16, F_NEXT, 1);
        entry(1, BUFFER_A as u64, 512, F_NEXT | F_WRITE, 2);
        entry(2, s, 1, F_WRITE, 0);
        blk.queue.set_descriptor(0, table, len, F_INDIRECT, 0);
        let got = blk.publish_and_wait(0, 5000);
        c.check(got == Completion::NeedsReset, format_args!("virtio: an indirect table {what} ({len} bytes): {got:?}"));
        blk.reset();
    }

    // Sectors beyond the disk, and a request that ends past it.
    let mut beyond_refused = 0;
    for (sector, len) in [(sectors, 512u32), (sectors - 1, 1024), (u64::MAX, 512), (u64::MAX / 512 + 1, 512)] {
        for kind in [BLK_T_IN, BLK_T_OUT] {
            beyond_refused += u32::from(blk.transfer(kind, sector, BUFFER_A, len) == ioerr);
        }
    }
    c.check(
        beyond_refused == 8,
        format_args!("virtio: reads and writes beyond the disk's {sectors} sectors: IOERR ({beyond_refused} of 8)"),
    );

    // vCPU 1 flips descriptor 1 between a good buffer and no memory while the device reads
    // the chain: each request gets OK or IOERR, never anything else.
    FLIP.store(1, Ordering::SeqCst);
    if start_vcpu(1, flipper, (blk.queue.desc + 16) as u64) != SUCCESS {
        c.check(false, format_args!("virtio: vCPU 1 started to flip descriptors"));
        return;
    }
    let (mut ok, mut refused, mut other) = (0, 0, 0);
    for _ in 0..300 {
        blk.prepare(BLK_T_IN, 0);
        blk.queue.set_descriptor(0, h, 16, F_NEXT, 1);
        blk.queue.set_descriptor(2, s, 1, F_WRITE, 0);
        // Descriptor 1's length, flags and next; its address is vCPU 1's.
        let d1 = blk.queue.desc + 16;
        // SAFETY: this VM's RAM (the descriptor table).
        unsafe {
            write_volatile((d1 + 8) as *mut u32, 512);
            write_volatile((d1 + 12) as *mut u16, F_NEXT | F_WRITE);
            write_volatile((d1 + 14) as *mut u16, 2);
        }
        match blk.publish_and_wait(0, 5000) {
            Completion::Used { status: BLK_S_OK, .. } => ok += 1,
            Completion::Used { status: BLK_S_IOERR, .. } => refused += 1,
            got => {
                other += 1;
                println!("# a request under flipping descriptors: {got:?}");
                blk.reset();
            }
        }
    }
    FLIP.store(0, Ordering::SeqCst);
    let start = counter_ms();
    while FLIP.load(Ordering::SeqCst) != 2 && counter_ms() - start < 2000 {}
    c.check(
        other == 0 && ok + refused == 300,
        format_args!(
            "virtio: 300 requests while another vCPU flips a descriptor: each OK or IOERR ({ok} OK, {refused} IOERR)"
        ),
    );
    blk.reset();
    let after = blk.transfer(BLK_T_IN, 0, BUFFER_B, 4096);
    // SAFETY: this VM's RAM.
    let intact = (0..4096).all(|i| unsafe { read_volatile((BUFFER_B + i) as *const u8) } == 0x5a);
    c.check(
        after == Completion::Used { status: BLK_S_OK, written: 4097 } && intact,
        format_args!("virtio: the first 4 KiB it wrote read back intact after the attacks"),
    );
}

// ---- PL011 ------------------------------------------------------------------------------

const UART_FR: usize = UART + 0x18;
const UART_CR: usize = UART + 0x30;
const UART_IMSC: usize = UART + 0x38;
const UART_ICR: usize = UART + 0x44;
/// UARTFR.RXFE: the receive FIFO is empty.
const FR_RXFE: u32 = 1 << 4;
/// UARTCR: UARTEN, TXE, RXE and LBE (loopback: a byte written comes back as received).
const CR_LOOPBACK: u32 = 0x381;
const CR_RESET: u32 = 0x300;
const LOOPBACK_ROUNDS: u32 = 2000;

fn uart_read(addr: usize) -> u32 {
    // SAFETY: a register of this VM's PL011 (its shadow page, or a trap).
    unsafe { read_volatile(addr as *const u32) }
}

fn uart_write(addr: usize, value: u32) {
    // SAFETY: a register of this VM's PL011 (a trap).
    unsafe { write_volatile(addr as *mut u32, value) }
}

/// The UART's page read at every offset and width (from its shadow page: docs/devices.md);
/// in loopback, each byte written must show in UARTFR and come out of UARTDR at once (the
/// page hidden before the byte is received, shown again when it is read), 2,000 times; then
/// every register but UARTDR and UARTRSR written with all ones. Nothing is printed while
/// in loopback: it would come back as input.
fn attack_uart(c: &mut Checks) {
    let mut other = 0;
    let (read, read_aborted) = sweep(UART, 0x1000, false, &mut other);
    uart_write(UART_CR, CR_LOOPBACK);
    let mut stale = 0;
    for i in 0..LOOPBACK_ROUNDS {
        let byte = b'a' + (i % 26) as u8;
        uart_write(UART, u32::from(byte));
        let waiting = uart_read(UART_FR) & FR_RXFE == 0;
        let got = uart_read(UART) as u8;
        let empty = uart_read(UART_FR) & FR_RXFE != 0;
        stale += u32::from(!(waiting && got == byte && empty));
    }
    let (written, write_aborted) = sweep(UART + 8, 0x1000 - 8, true, &mut other);
    // As it was: loopback off, interrupts masked and cleared, nothing left received.
    uart_write(UART_CR, CR_RESET);
    uart_write(UART_IMSC, 0);
    uart_write(UART_ICR, 0x7ff);
    let mut drained = 0;
    while uart_read(UART_FR) & FR_RXFE == 0 && drained < 64 {
        uart_read(UART);
        drained += 1;
    }
    c.check(
        other == 0 && read_aborted == 0 && stale == 0 && written > 0,
        format_args!(
            "uart: every offset at widths 1/2/4/8: {read} reads served, {read_aborted} aborted; {LOOPBACK_ROUNDS} \
             bytes looped back, {stale} not seen at once; all ones written {written} times, {write_aborted} aborted; \
             no other exception"
        ),
    );
}

/// MagicValue, "virt" (virtio 1.2, 4.2.2).
const VIRT: u32 = 0x7472_6976;

fn page_word(addr: usize) -> u32 {
    // SAFETY: a word of this VM's virtio page (its shadow page, or a trap).
    unsafe { read_volatile(addr as *const u32) }
}

/// The virtio page (three transports' windows; this VM has the disk, slot 0, and the
/// console, slot 2) read at every offset and width: from its shadow page (docs/virtio.md),
/// so nothing aborts and the NIC's window, which it does not have, reads as zeros; then
/// every offset written with all ones, each write served or aborted by the model, never
/// changing what the page says of a read-only register. Last: it leaves the devices in
/// whatever state all ones put them.
fn attack_virtio_page(c: &mut Checks) {
    let mut other = 0;
    let (read, read_aborted) = sweep(TRANSPORTS, 0x1000, false, &mut other);
    let nic_window = (0x200..0x400).step_by(4).all(|o| page_word(TRANSPORTS + o) == 0);
    let (written, write_aborted) = sweep(TRANSPORTS, 0x1000, true, &mut other);
    let magic = [0, 0x400].map(|slot| page_word(TRANSPORTS + slot));
    let (again, again_aborted) = sweep(TRANSPORTS, 0x1000, false, &mut other);
    c.check(
        other == 0 && read_aborted == 0 && again_aborted == 0 && nic_window && magic == [VIRT; 2] && written > 0,
        format_args!(
            "virtio page: every offset at widths 1/2/4/8: {read} reads served, {read_aborted} aborted, the absent \
             NIC's window zeros: {nic_window}; all ones written {written} times, {write_aborted} aborted; then \
             MagicValue {magic:x?}, {again} reads served, {again_aborted} aborted; no other exception"
        ),
    );
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    println!("hostile: attacking");
    type Attack = (&'static str, fn(&mut Checks));
    let attacks: [Attack; 7] = [
        // The UART first: its loopback must not meet the other vCPUs' output (psci starts them).
        ("uart", attack_uart),
        ("gic", attack_gic),
        ("smccc", attack_smccc),
        ("sysreg", attack_system_registers),
        ("psci", attack_psci),
        ("virtio", attack_virtqueues),
        ("virtio-page", attack_virtio_page),
    ];
    for (name, attack) in attacks {
        let start = counter_ms();
        attack(&mut c);
        println!("# {name}: {} ms", counter_ms() - start);
    }
    finish("hostile", &c)
}
