//! The secret-holder of the AArch32 register-leak test (tests/tests/register_leak32.rs):
//! fills every register a PL1 guest can write without breaking itself with a marker (0x5ec2
//! in its top half where the register holds one): the CP15 registers of its translation
//! regime, fault reporting, thread IDs and timer control, the virtual timer, then in
//! `hold_markers` the VFP and Advanced SIMD registers and FPSCR, the banked SP, LR and SPSR
//! of every mode, R8_fiq-R12_fiq, and r0-r12, and spins so on a CPU it shares with the
//! reader's vCPUs, which must find none of it. One check says which registers took their
//! marker (some are RAZ/WI on a CPU, and prove nothing there); another that the ThumbEE
//! registers (TEECR, TEEHBR), where the CPU has them, hold theirs.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

use selftest32_guest::*;

/// How long it holds its markers (virtual counter): past the reader's two boots.
const HOLD_UNTIL_MS: u64 = 8000;

/// A different 64-bit marker in each of d0-d31.
#[no_mangle]
static D_MARKERS: [u64; 32] = {
    let mut m = [0u64; 32];
    let mut i = 0;
    while i < 32 {
        m[i] = 0x5ec2_d000_5ec2_d000 | (i as u64) << 32 | i as u64;
        i += 1;
    }
    m
};

/// Where `hold_markers` keeps the SPs it replaces with markers (SVC, System, Abort,
/// Undefined, IRQ, FIQ), to put them back.
#[no_mangle]
static mut SAVED_SPS: [u32; 6] = [0; 6];
/// The deadline, CNTVCT's low and high words.
#[no_mangle]
static mut HOLD_UNTIL: [u32; 2] = [0; 2];

global_asm!(
    r#"
    .arm
    .fpu    neon-vfpv4
    .section .text, "ax"

// Mode `m`'s SP into SAVED_SPS[i], and markers into its SP, LR and SPSR (r4: SAVED_SPS).
.macro MARK_MODE m, i, sp, lr, spsr
    cps     #\m
    str     sp, [r4, #(\i * 4)]
    ldr     sp, =\sp
    ldr     lr, =\lr
    ldr     r5, =\spsr
    msr     spsr_fsxc, r5
.endm

    // void hold_markers(void): marks the VFP registers, the banked registers of every mode
    // and r0-r12, and spins until CNTVCT >= HOLD_UNTIL; then puts back what it needs.
    .global hold_markers
hold_markers:
    push    {{r4-r12, lr}}
    ldr     r4, =SAVED_SPS
    ldr     r0, =D_MARKERS
    vldmia  r0!, {{d0-d15}}
    vldmia  r0, {{d16-d31}}
    // FPSCR (B6.1.6): N, Z, C, V, QC, DN, FZ, RMode toward zero, every cumulative flag.
    ldr     r0, =0xfbc0009f
    vmsr    fpscr, r0
    MARK_MODE 0x1f, 1, 0x5ec2005c, 0x5ec2001e, 0x580f0110
    MARK_MODE 0x17, 2, 0x5ec2ab5c, 0x5ec2ab1e, 0x580f0117
    MARK_MODE 0x1b, 3, 0x5ec2bd5c, 0x5ec2bd1e, 0x580f011b
    MARK_MODE 0x12, 4, 0x5ec2e15c, 0x5ec2e11e, 0x580f0112
    MARK_MODE 0x11, 5, 0x5ec2f15c, 0x5ec2f11e, 0x580f0111
    ldr     r8, =0x5ec2f108
    ldr     r9, =0x5ec2f109
    ldr     r10, =0x5ec2f10a
    ldr     r11, =0x5ec2f10b
    ldr     r12, =0x5ec2f10c
    cps     #0x13
    str     sp, [r4]
    ldr     r5, =0x580f0113
    msr     spsr_fsxc, r5
    ldr     sp, =0x5ec2535c
    ldr     lr, =0x5ec2531e
    ldr     r4, =0x5ec20004
    ldr     r5, =0x5ec20005
    ldr     r6, =0x5ec20006
    ldr     r7, =0x5ec20007
    ldr     r8, =0x5ec20008
    ldr     r9, =0x5ec20009
    ldr     r10, =0x5ec2000a
    ldr     r11, =0x5ec2000b
    ldr     r12, =0x5ec2000c
    // r0-r3 read the counter and the deadline, and hold markers between reads.
1:  isb
    mrrc    p15, 1, r0, r1, c14     // CNTVCT
    ldr     r2, =HOLD_UNTIL
    ldm     r2, {{r2, r3}}
    subs    r0, r0, r2
    sbcs    r1, r1, r3
    bhs     2f
    ldr     r0, =0x5ec20000
    ldr     r1, =0x5ec20001
    ldr     r2, =0x5ec20002
    ldr     r3, =0x5ec20003
    .rept   64
    nop
    .endr
    b       1b
    // The SPs back (LR and SPSR of the other modes are used by no exception of this guest
    // before it powers off).
2:  ldr     r4, =SAVED_SPS
    .irp    m, 0x1f, 0x17, 0x1b, 0x12, 0x11
    cps     #\m
    add     r4, r4, #4
    ldr     sp, [r4]
    .endr
    cps     #0x13
    ldr     r4, =SAVED_SPS
    ldr     sp, [r4]
    pop     {{r4-r12, pc}}
    .ltorg
"#
);

extern "C" {
    fn hold_markers();
}

/// Writes `$value` to the CP15 register `$enc` ("op1, {}, CRn, CRm, op2") and reads it back.
macro_rules! mark {
    ($enc:literal, $value:expr) => {{
        let wanted: u32 = $value;
        let read: u32;
        // SAFETY: a PL1 register of this VM's translation regime (the MMU is off, so its
        // tables, attributes and domains are not used), fault reporting, thread ID or timer
        // control: none changes what this guest's code or memory accesses do. VBAR is put
        // back before any exception could use it.
        unsafe {
            asm!(concat!("mcr p15, ", $enc), "isb", concat!("mrc p15, ", $enc), in(reg) wanted, lateout(reg) read,
                options(nostack))
        };
        (wanted, read)
    }};
}

/// Writes `$value` to the 64-bit CP15 register `$op1, $crm` and reads it back.
macro_rules! mark64 {
    ($op1:literal, $crm:literal, $value:expr) => {{
        let wanted: u64 = $value;
        let (lo, hi): (u32, u32);
        // SAFETY: as `mark!`: a TTBR (the MMU is off), PAR or the virtual timer's compare
        // value (its interrupt is masked: CNTV_CTL.IMASK, and IRQs are masked in the CPSR).
        unsafe {
            asm!(
                concat!("mcrr p15, ", $op1, ", {}, {}, ", $crm), "isb", concat!("mrrc p15, ", $op1, ", {}, {}, ", $crm),
                in(reg) wanted as u32, in(reg) (wanted >> 32) as u32, lateout(reg) lo, lateout(reg) hi,
                options(nostack)
            )
        };
        (wanted, (u64::from(hi) << 32) | u64::from(lo))
    }};
}

/// Marks the CP15 registers and the virtual timer; prints each that did not keep its marker
/// (RAZ/WI or fixed bits on this CPU); returns (marked, kept).
fn mark_cp15() -> (u32, u32) {
    let (mut marked, mut kept) = (0, 0);
    let mut note = |name: &str, (wanted, read): (u64, u64)| {
        marked += 1;
        if wanted == read {
            kept += 1;
        } else {
            println!("# {name}: wrote {wanted:#x}, reads {read:#x}");
        }
    };
    let w = |(a, b): (u32, u32)| (u64::from(a), u64::from(b));
    // CPACR: full access to cp10 and cp11, and FPEXC.EN, for `hold_markers`' VFP markers.
    note("CPACR", w(mark!("0, {}, c1, c0, 2", 0xf << 20)));
    let fpexc: u32;
    // SAFETY: FPEXC.EN (B6.1.7): the VFP registers this guest marks become accessible.
    unsafe { asm!(".fpu vfpv3", "vmsr fpexc, {0}", "isb", "vmrs {0}, fpexc", inout(reg) 1u32 << 30 => fpexc) };
    note("FPEXC", (1 << 30, u64::from(fpexc)));
    // SCTLR.TRE and AFE (B4.1.130) only change what translation tables mean; the MMU is off.
    let sctlr = cp15::sctlr();
    note("SCTLR", w(mark!("0, {}, c1, c0, 0", sctlr | 3 << 28)));
    note("TTBCR", w(mark!("0, {}, c2, c0, 2", 0x35))); // N 5, PD0, PD1; EAE clear
    note("DACR", w(mark!("0, {}, c3, c0, 0", 0x5ec2_5d5d)));
    note("DFSR", w(mark!("0, {}, c5, c0, 0", 0x1c06)));
    note("IFSR", w(mark!("0, {}, c5, c0, 1", 0x100d)));
    note("ADFSR", w(mark!("0, {}, c5, c1, 0", 0x5ec2_adf5)));
    note("AIFSR", w(mark!("0, {}, c5, c1, 1", 0x5ec2_a1f5)));
    note("DFAR", w(mark!("0, {}, c6, c0, 0", 0x5ec2_dfa0)));
    note("IFAR", w(mark!("0, {}, c6, c0, 2", 0x5ec2_1fa0)));
    note("PRRR", w(mark!("0, {}, c10, c2, 0", 0x5ec2_9a9a)));
    note("NMRR", w(mark!("0, {}, c10, c2, 1", 0x5ec2_a9a9)));
    note("AMAIR0", w(mark!("0, {}, c10, c3, 0", 0x5ec2_a0a0)));
    note("AMAIR1", w(mark!("0, {}, c10, c3, 1", 0x5ec2_a1a1)));
    note("VBAR", w(mark!("0, {}, c12, c0, 0", 0x5ec2_0be0)));
    note("CONTEXTIDR", w(mark!("0, {}, c13, c0, 1", 0x5ec2_c1d0)));
    note("TPIDRURW", w(mark!("0, {}, c13, c0, 2", 0x5ec2_0e0e)));
    note("TPIDRURO", w(mark!("0, {}, c13, c0, 3", 0x5ec2_0e0f)));
    note("TPIDRPRW", w(mark!("0, {}, c13, c0, 4", 0x5ec2_0e10)));
    note("CNTKCTL", w(mark!("0, {}, c14, c1, 0", 0x303))); // PL0PCTEN, PL0VCTEN, PL0VTEN, PL0PTEN
    note("CSSELR", w(mark!("2, {}, c0, c0, 0", 2))); // the level 2 cache
    note("TTBR0", mark64!("0", "c2", 0x0000_005e_c2e7_0000));
    note("TTBR1", mark64!("1", "c2", 0x0000_005e_c2e7_1000));
    note("PAR", mark64!("0", "c7", 0x5ec2_0000_5ec2_7a00));
    note("CNTV_CVAL", mark64!("3", "c14", 0x5ec2_e7e7_1234_5000));
    note("CNTV_CTL", w(mark!("0, {}, c14, c3, 1", 3))); // enabled, masked
    (marked, kept)
}

/// Marks TEECR (XED: unprivileged access UNDEFINED, which this guest never makes) and
/// TEEHBR (HandlerBase, bits [31:2]) where the CPU implements ThumbEE; says whether both
/// hold their marker, or that there is none.
fn mark_thumbee(c: &mut Checks) {
    if !cp15::has_thumbee() {
        c.check(true, format_args!("marks: no ThumbEE on this CPU (ID_PFR0 {:#x})", cp15::id_pfr0()));
        return;
    }
    // SAFETY: ThumbEE's configuration, used only by ThumbEE code, which this guest never runs.
    unsafe {
        asm!("mcr p14, 6, {}, c0, c0, 0", "mcr p14, 6, {}, c1, c0, 0", "isb", in(reg) 1u32, in(reg) 0x5ec2_7ee0u32,
            options(nostack))
    };
    let (teecr, teehbr) = cp15::thumbee();
    c.check(
        (teecr, teehbr) == (1, 0x5ec2_7ee0),
        format_args!("marks: ThumbEE TEECR {teecr:#x} and TEEHBR {teehbr:#x} hold their marker"),
    );
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    let mut c = Checks::default();
    let vbar = cp15::vbar();
    let (marked, kept) = mark_cp15();
    c.check(true, format_args!("marks: {kept} of {marked} CP15 and timer registers hold their marker"));
    mark_thumbee(&mut c);
    println!("leak-secret32: holding markers in every register until {HOLD_UNTIL_MS} ms");
    let until = HOLD_UNTIL_MS * frequency() / 1000;
    // SAFETY: written before `hold_markers` reads it, on this vCPU only.
    unsafe { *core::ptr::addr_of_mut!(HOLD_UNTIL) = [until as u32, (until >> 32) as u32] };
    // SAFETY: spins with this vCPU's registers marked; puts back its SPs and returns after
    // the deadline.
    unsafe { hold_markers() };
    cp15::set_vbar(vbar);
    finish("leak-secret32", &c)
}
