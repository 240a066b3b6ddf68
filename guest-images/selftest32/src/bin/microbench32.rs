//! The AArch32 microbenchmark guest (docs/performance.md): the operations of the AArch64
//! `microbench`, made by a 32-bit guest, timed with the virtual counter (CNTVCT by MRRC)
//! around many iterations. Run with QEMU's `-icount shift=0`, where one nanosecond of
//! virtual time is one instruction, so the figures are instruction counts. The same image
//! runs directly on QEMU (`qemu-system-arm`, SVC mode, no hypervisor) for the reference row.
//!
//! Prints the lines of `guest_common::bench`, then `microbench32: done` and powers off. Beside
//! the AArch64 guest's figures, `virtual-ipi-round-trip`: vCPU 0 sends an SGI to vCPU 1,
//! whose handler sends one back, timed to vCPU 0's handler. With `trace=N` in its bootargs
//! (`xtask::bench::trace`), each benchmark runs N times with its window marked, once a key
//! is typed.
//!
//! vCPU 1 waits in WFI for the virtual IPI (a sleeping target is what Linux's IPIs meet).
#![no_std]
#![no_main]

use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{AtomicBool, Ordering};

use guest_common::bench::{self, Seen};
use guest_common::console::UARTFR;

/// MagicValue of the virtio-mmio transport at 0x0a00_0400: the VM's virtio console (slot 2),
/// one of QEMU virt's transports natively.
const VIRTIO_MAGIC: usize = 0x0a00_0400;
/// InterruptACK of the same transport: acknowledging nothing changes nothing.
const VIRTIO_INTERRUPT_ACK: usize = 0x0a00_0464;
use selftest32_guest::gic::{self, GICD_TYPER, VTIMER};
use selftest32_guest::*;

/// A function id no one implements (owner 2, "SiP service", SMC32 function 0): NOT_SUPPORTED.
const UNKNOWN_FUNCTION: u32 = 0x8200_0000;
/// vCPU 0 -> vCPU 1.
const IPI: u32 = 2;
/// vCPU 0 -> itself, for the EOI figure.
const SELF_SGI: u32 = 3;
/// vCPU 0 -> vCPU 1, which answers with ANSWER.
const ASK: u32 = 4;
/// vCPU 1 -> vCPU 0.
const ANSWER: u32 = 5;

fn bench(name: &str, body: impl FnMut()) {
    bench::bench::<VirtualCounter>(name, body)
}

fn latency(name: &str, measure: impl FnMut(u64) -> u64) {
    bench::latency::<VirtualCounter>(name, measure)
}

static IPI_SEEN: Seen = Seen::new();
static ANSWER_SEEN: Seen = Seen::new();
static TIMER_SEEN: Seen = Seen::new();
/// For the self-SGI: the ticks its EOI took.
static EOI_SEEN: Seen = Seen::new();
static VCPU1_READY: AtomicBool = AtomicBool::new(false);

extern "C" fn irq() {
    let entered = counter();
    let iar = gic::acknowledge();
    match iar & 0x3ff {
        IPI => IPI_SEEN.record(entered),
        ASK => gic::send_sgi(ANSWER, 0),
        ANSWER => ANSWER_SEEN.record(entered),
        VTIMER => {
            cp15::set_cntv_ctl(0); // this vCPU's virtual timer off, so its level drops
            TIMER_SEEN.record(entered);
        }
        SELF_SGI => {
            let before = counter();
            gic::end_of_interrupt(iar);
            EOI_SEEN.record(counter() - before);
            return;
        }
        1020..=1023 => return, // spurious
        other => println!("microbench32: unexpected interrupt {other}"),
    }
    gic::end_of_interrupt(iar);
}

extern "C" fn vcpu1(_: u32, _: u32) {
    gic::bring_up_cpu_interface(1, (1 << IPI) | (1 << ASK));
    VCPU1_READY.store(true, Ordering::SeqCst);
    halt()
}

#[no_mangle]
extern "C" fn guest_main() -> ! {
    println!("microbench32: AArch32, mode {:#x}, counter at {} Hz", boot_state().cpsr & mode::MASK, frequency());
    // SAFETY: the device tree the hypervisor (or QEMU) gave this vCPU in r2, which nothing
    // writes.
    let bootargs = unsafe { guest_common::fdt::Fdt::at(boot_state().r2 as usize) }
        .ok()
        .and_then(|fdt| fdt.root_child_string("chosen", "bootargs"));
    bench::trace_if_asked("microbench32", bootargs);
    // The loop and counter overhead, subtracted from every figure.
    bench("loop", || core::hint::black_box(()));
    bench("hvc-unknown", || {
        core::hint::black_box(hvc(UNKNOWN_FUNCTION, 0, 0, 0));
    });
    bench("hvc-smccc-version", || {
        core::hint::black_box(hvc(SMCCC_VERSION, 0, 0, 0));
    });
    bench("mmio-read", || {
        // SAFETY: UARTFR of the VM's PL011: under the hypervisor, from its shadow page while
        // nothing is received (docs/devices.md); QEMU's PL011 natively.
        core::hint::black_box(unsafe { read_volatile(UARTFR as *const u32) });
    });
    bench("virtio-read", || {
        // SAFETY: MagicValue of the VM's virtio console transport: under the hypervisor, from
        // the transports' shadow page (docs/virtio.md); QEMU's virtio-mmio transport natively.
        core::hint::black_box(unsafe { read_volatile(VIRTIO_MAGIC as *const u32) });
    });
    bench("virtio-write", || {
        // SAFETY: InterruptACK of the same transport, 0 (no bit acknowledged): a trapped
        // device register write under the hypervisor, the emulated device's exit path.
        unsafe { write_volatile(VIRTIO_INTERRUPT_ACK as *mut u32, 0) };
    });
    bench("gicd-read", || {
        // SAFETY: GICD_TYPER of the VM's GIC distributor (the vGIC, or QEMU's GIC natively).
        core::hint::black_box(unsafe { read_volatile(GICD_TYPER as *const u32) });
    });

    set_irq_handler(irq);
    gic::enable_distributor();
    gic::bring_up_cpu_interface(0, (1 << VTIMER) | (1 << SELF_SGI) | (1 << ANSWER));
    if start_vcpu(1, vcpu1, 0) != PSCI_SUCCESS {
        println!("microbench32: vCPU 1 did not start");
        hvc(HYP_VM_EXIT, 1, 0, 0);
    }
    while !VCPU1_READY.load(Ordering::SeqCst) {
        core::hint::spin_loop();
    }
    latency("counter", |_| {
        let start = counter();
        counter() - start
    });
    latency("virtual-ipi", |i| {
        let sent = counter();
        gic::send_sgi(IPI, 1);
        IPI_SEEN.wait_for(i + 1) - sent
    });
    latency("virtual-ipi-round-trip", |i| {
        let sent = counter();
        gic::send_sgi(ASK, 1);
        ANSWER_SEEN.wait_for(i + 1) - sent
    });
    latency("eoi", |i| {
        gic::send_sgi(SELF_SGI, 0);
        EOI_SEEN.wait_for(i + 1)
    });
    // 2 us ahead: well after the handler of the previous one has returned.
    let ahead = frequency() / 500_000;
    latency("vtimer", |i| {
        let deadline = counter() + ahead;
        cp15::set_cntv_cval(deadline);
        cp15::set_cntv_ctl(1);
        TIMER_SEEN.wait_for(i + 1) - deadline
    });
    println!("microbench32: done");
    hvc(PSCI_SYSTEM_OFF, 0, 0, 0);
    halt()
}
