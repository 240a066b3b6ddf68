//! The hypervisor as a whole through the fake image: a boot bundle's VMs created on a QEMU
//! `virt` board's device tree and started; each CPU's turn carrying out how a VM ended
//! (destroyed with its memory returned, created again, rebooted in place, the machine
//! stopped); console input and the management commands carried out.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use hyp_core::bundle::{BootBundle, COMPATIBLE};
use hyp_core::cap::{CapError, CapId, CapSpace};
use hyp_core::entropy::GuestSeeds;
use hyp_core::guest_map::UART_IPA;
use hyp_core::management::{Command, VmName};
use hyp_core::manifest::{DeviceTreeDevices, HeldMemory, Holder};
use hyp_core::mmio::MmioDispatch;
use hyp_core::platform::{PhysRange, Platform};
use hyp_core::syndrome::AccessWidth;
use hyp_core::vcpu_power::EndReason;
use sched::{Decision, VcpuState};
use stage2::testing::VecTableMemory;
use stage2::{Ipa, TableFormat, TlbMaintenance};
use vm_fdt::FdtWriter;

use super::leak;
use super::virtio::{board_disk, image_ram, BlkGuest, FakeEnv, DISK_INTID, LINES, RAM_IPA, RAM_PA, RAM_SIZE, TYPED};
use crate::fake::FakeArch;
use crate::hypervisor::boot::BootedBoard;
use crate::hypervisor::interrupts::ExitInterrupt;
use crate::hypervisor::{Hypervisor, VcpuExit, Virtualization};
use crate::interrupts::Route;
use crate::scheduling::{vcpu_ref, Scheduling};
use crate::vm::{Vm, VmBuild, VmError};
use crate::vm_resources::{grant_resources, revoke_all, VmRequest, VmResources};
use hyp_core::guest_map::VirtioSlot as Slot;

const VIRT_GICV3: &[u8] = include_bytes!("../../../hyp-core/tests/data/qemu-virt-gicv3-smp4.dtb");
const VIRT_GICV2: &[u8] = include_bytes!("../../../hyp-core/tests/data/qemu-virt-gicv2-smp2.dtb");
/// The console's interrupt on that board (the PL011's SPI 1).
const UART_INTID: u32 = 33;
/// The board's PL031 real-time clock and its interrupt (SPI 2, level-triggered).
const RTC_BASE: u64 = 0x0901_0000;
const RTC_INTID: u32 = 34;
/// The board's fw-cfg, which can DMA (`dma-coherent`).
const FW_CFG_BASE: u64 = 0x0902_0000;

thread_local! {
    /// The stage-2 tables of this thread's VMs.
    static TABLES: RefCell<VecTableMemory> = RefCell::new(VecTableMemory::with_capacity(64));
    /// What the guest does in the next runs of a vCPU.
    static SCRIPT: RefCell<VecDeque<Guest>> = RefCell::default();
    /// What the fake architecture was asked to do, in order.
    static EVENTS: RefCell<Vec<String>> = RefCell::default();
    /// The INTIDs pending at this thread's CPU interface, in the order it acknowledges them.
    static PENDING: RefCell<VecDeque<u32>> = RefCell::default();
}

/// What a guest does while its vCPU runs.
enum Guest {
    /// Its slice ends, or it waits for an interrupt.
    LeavesTheCpu,
    /// It powers off, resets, crashes...
    EndsTheVm(EndReason),
}

pub(super) fn event(text: String) {
    EVENTS.with(|e| e.borrow_mut().push(text));
}

pub(super) fn take_events() -> Vec<String> {
    EVENTS.with(|e| std::mem::take(&mut *e.borrow_mut()))
}

struct NoTlb;

impl TlbMaintenance for NoTlb {
    fn invalidate_ipa(&mut self, _: u16, _: Ipa) {}
    fn invalidate_vmid(&mut self, _: u16) {}
    fn publish(&mut self) {}
}

impl Virtualization for FakeArch {
    type Env = FakeEnv;
    type Vm = Vm<FakeEnv>;

    fn grant_resources(
        caps: &mut CapSpace,
        untyped: &[CapId],
        request: &VmRequest<'_>,
    ) -> Result<VmResources, CapError> {
        TABLES.with(|t| grant_resources(caps, &mut *t.borrow_mut(), |_| NoTlb, untyped, request))
    }
    fn create_vm(build: VmBuild<'_>, scheduling: &'static Scheduling<Self>) -> Result<Vm<FakeEnv>, VmError> {
        event(format!("create vm{} at {:#x}", build.id, build.granted.ram.base));
        Vm::create(build, scheduling)
    }
    fn load_vm(vm: &Vm<FakeEnv>) {
        event(format!("load vm{}", vm.id));
        vm.load(|_, _| {});
    }
    fn reset_vm(vm: &Vm<FakeEnv>, seeds: Option<GuestSeeds>) {
        event(format!("reset vm{}", vm.id));
        vm.reset(seeds);
    }
    fn destroy_vm(caps: &mut CapSpace, vm: &Vm<FakeEnv>) -> Result<(), CapError> {
        event(format!("destroy vm{}", vm.id));
        TABLES.with(|t| revoke_all(caps, &mut *t.borrow_mut(), &mut NoTlb, vm.cap))
    }
    /// As the arch's run loop: an ending VM's vCPU stops at once; otherwise the guest runs
    /// as the test's script says, and a guest that ends its VM stops its vCPU.
    fn run_vcpu(vm: &Vm<FakeEnv>, vcpu: usize, cpu: usize, _: &Decision) -> VcpuExit {
        event(format!("run vm{} vcpu{vcpu} on cpu{cpu}", vm.id));
        if !vm.is_ending() {
            match SCRIPT.with(|s| s.borrow_mut().pop_front()).expect("the test says how each run ends") {
                Guest::LeavesTheCpu => return VcpuExit::Descheduled,
                Guest::EndsTheVm(reason) => {
                    vm.end(vcpu, reason);
                }
            }
        }
        vm.vcpu_stopped(vcpu).map_or(VcpuExit::Stopped, VcpuExit::VmEnded)
    }
    fn enable_interrupt(intid: u32, cpu: usize) {
        event(format!("interrupt {intid} to cpu{cpu}"));
    }
    /// The acknowledge value is the INTID plus 0x1000, so a test sees which one is ended.
    fn acknowledge_interrupt() -> Option<(u32, u32)> {
        PENDING.with(|p| p.borrow_mut().pop_front()).map(|intid| (intid + 0x1000, intid))
    }
    fn end_interrupt(iar: u32) {
        event(format!("end {}", iar - 0x1000));
    }
    fn drop_interrupt_priority(iar: u32) {
        event(format!("drop priority {}", iar - 0x1000));
    }
    fn disable_spi(intid: u32) {
        event(format!("disable {intid}"));
    }
    fn clear_spi(intid: u32) {
        event(format!("clear {intid}"));
    }
    fn configure_spi(intid: u32, edge: bool) {
        event(format!("configure {intid} {}", if edge { "edge" } else { "level" }));
    }
    fn spi_enabled(_: u32) -> bool {
        false
    }
    fn spi_pending(_: u32) -> bool {
        false
    }
    fn heap_usage() -> (u64, u64) {
        (1 << 20, 32 << 20)
    }
    fn all_vms_ended(clean: bool) {
        event(format!("all ended, clean: {clean}"));
    }
}

/// An arm64 `Image` of 64 KiB: its header (booting.rst) and nothing else.
fn kernel() -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[16..24].copy_from_slice(&(64u64 << 10).to_le_bytes());
    h[0x38..0x3c].copy_from_slice(b"ARM\x64");
    h
}

/// A boot bundle of one VM "guest" with 2 vCPUs sharing CPU 1 and the fake image's RAM size,
/// given the board's PL031 (SPI 2, level) if `rtc`.
fn bundle(rtc: bool) -> BootBundle<'static> {
    bundle_with(rtc, false, false)
}

/// As `bundle`, the VM given the whole board disk if `disk`, its virtio devices PCI
/// functions (with an ITS on a GICv3) if `pci`.
fn bundle_with(rtc: bool, disk: bool, pci: bool) -> BootBundle<'static> {
    let mut fdt = FdtWriter::new().unwrap();
    let root = fdt.begin_node("").unwrap();
    fdt.property_string("compatible", COMPATIBLE).unwrap();
    let vms = fdt.begin_node("vms").unwrap();
    let vm = fdt.begin_node("vm@0").unwrap();
    fdt.property_string("name", "guest").unwrap();
    fdt.property_u32("vcpus", 2).unwrap();
    fdt.property_u64("memory", RAM_SIZE as u64).unwrap();
    fdt.property("kernel", &kernel()).unwrap();
    fdt.property_array_u32("cpus", &[1, 1]).unwrap();
    fdt.property_string("policy", "shared").unwrap();
    if disk {
        fdt.property_array_u64("disk", &[0, 0]).unwrap();
    }
    if pci {
        fdt.property_string("virtio-transport", "pci").unwrap();
    }
    if rtc {
        let device = fdt.begin_node("passthrough@0").unwrap();
        fdt.property_string("name", "rtc").unwrap();
        fdt.property_array_u64("reg", &[RTC_BASE, 0x1000]).unwrap();
        fdt.property_array_u32("interrupts", &[RTC_INTID]).unwrap();
        fdt.end_node(device).unwrap();
    }
    fdt.end_node(vm).unwrap();
    fdt.end_node(vms).unwrap();
    fdt.end_node(root).unwrap();
    let blob: &'static [u8] = Box::leak(fdt.finish().unwrap().into_boxed_slice());
    BootBundle::parse(blob).unwrap()
}

/// A bundle of one identity-mapped VM "dma" whose RAM is the fake image's RAM (at IPA =
/// PA), given `virt`'s fw-cfg (a device that does DMA: `dma-coherent`, no `dma-ranges`).
fn identity_bundle() -> BootBundle<'static> {
    let mut fdt = FdtWriter::new().unwrap();
    let root = fdt.begin_node("").unwrap();
    fdt.property_string("compatible", COMPATIBLE).unwrap();
    let vms = fdt.begin_node("vms").unwrap();
    let vm = fdt.begin_node("vm@0").unwrap();
    fdt.property_string("name", "dma").unwrap();
    fdt.property_u32("vcpus", 1).unwrap();
    fdt.property_u64("memory", RAM_SIZE as u64).unwrap();
    fdt.property("kernel", &kernel()).unwrap();
    fdt.property_array_u32("cpus", &[1]).unwrap();
    fdt.property_u64("identity-mapped", RAM_PA).unwrap();
    let device = fdt.begin_node("passthrough@0").unwrap();
    fdt.property_string("name", "fw-cfg").unwrap();
    fdt.property_array_u64("reg", &[FW_CFG_BASE, 0x1000]).unwrap();
    fdt.end_node(device).unwrap();
    fdt.end_node(vm).unwrap();
    fdt.end_node(vms).unwrap();
    fdt.end_node(root).unwrap();
    let blob: &'static [u8] = Box::leak(fdt.finish().unwrap().into_boxed_slice());
    BootBundle::parse(blob).unwrap()
}

/// A hypervisor that booted the bundle on QEMU `virt` (4 CPUs, GICv3) with exactly one
/// VM's worth of free memory: a VM created again can only have the memory its earlier self
/// gave back.
pub(super) fn booted() -> &'static Hypervisor<FakeArch> {
    booted_with(bundle(false))
}

/// As `booted`, VM 0's devices PCI functions, its MSIs through an ITS (LPIs).
pub(super) fn booted_with_its() -> &'static Hypervisor<FakeArch> {
    booted_with(bundle_with(false, false, true))
}

/// As `booted`, on QEMU `virt` with 2 CPUs and a GICv2: the VM's GIC is a GICv2.
pub(super) fn booted_on_gicv2() -> &'static Hypervisor<FakeArch> {
    try_boot_on(VIRT_GICV2, bundle(false), &[]).unwrap()
}

fn booted_with(bundle: BootBundle<'static>) -> &'static Hypervisor<FakeArch> {
    try_boot(bundle, &[]).unwrap()
}

/// As `booted_with`, with `held` the RAM the hypervisor and firmware hold.
fn try_boot(bundle: BootBundle<'static>, held: &[HeldMemory]) -> Result<&'static Hypervisor<FakeArch>, String> {
    try_boot_on(VIRT_GICV3, bundle, held)
}

/// As `try_boot`, on the board of `device_tree`.
fn try_boot_on(
    device_tree: &'static [u8],
    bundle: BootBundle<'static>,
    held: &[HeldMemory],
) -> Result<&'static Hypervisor<FakeArch>, String> {
    let hypervisor = leak(Hypervisor::new());
    let mut platform = Platform::from_device_tree(device_tree).unwrap();
    // The fake image's RAM is a second bank of the board's (its device tree has 1 GiB at
    // 0x4000_0000), so the free memory is the board's RAM as at boot.
    platform.memory.push(PhysRange { base: RAM_PA, size: RAM_SIZE as u64 }).unwrap();
    let devices = DeviceTreeDevices::new(device_tree).unwrap();
    let free = [PhysRange { base: RAM_PA, size: RAM_SIZE as u64 }];
    let board = BootedBoard {
        platform: &platform,
        devices: &devices,
        free: &free,
        held,
        stage2: TableFormat::Vmsav8_64 { ipa_bits: 40, pa_bits: 40 },
        disk_sectors: Some(64),
        boot_cpu: 0,
        usable_cpu: &|_| true,
    };
    hypervisor.start(&bundle, &board)?;
    Ok(hypervisor)
}

/// CPU 1 takes one turn, in which the guest does `guest`.
fn turn(hypervisor: &'static Hypervisor<FakeArch>, guest: Guest) {
    FakeArch::become_cpu(1);
    SCRIPT.with(|s| s.borrow_mut().push_back(guest));
    assert!(hypervisor.run_next(1), "a vCPU was runnable");
}

fn read_uart(vm: &Vm<FakeEnv>) -> u64 {
    vm.mmio().read(0, Ipa(UART_IPA), AccessWidth::Word).unwrap()
}

#[test]
fn the_bundle_s_vms_are_created_loaded_and_started_and_the_console_is_routed() {
    let hypervisor = booted();
    assert_eq!(
        take_events(),
        [
            format!("create vm0 at {RAM_PA:#x}"),
            "load vm0".into(),
            format!("interrupt {DISK_INTID} to cpu0"),
            format!("interrupt {UART_INTID} to cpu0")
        ]
    );
    assert_eq!(hypervisor.routes.of(DISK_INTID), Route::Disk, "the board disk's completions");
    assert!(hypervisor.vm(0).is_some());
    assert_eq!(hypervisor.routes.of(UART_INTID), Route::ConsoleInput);
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Runnable), "vCPU 0 starts");
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 1)), Some(VcpuState::Stopped), "vCPU 1 waits for CPU_ON");
    FakeArch::become_cpu(0);
    assert!(!hypervisor.run_next(0), "nothing is homed on the boot CPU");
}

#[test]
fn a_vm_that_restarts_is_destroyed_and_created_again_in_the_memory_it_gave_back() {
    let hypervisor = booted();
    let first = hypervisor.vm(0).unwrap();
    take_events();
    turn(hypervisor, Guest::EndsTheVm(EndReason::Restart));
    assert_eq!(
        take_events(),
        ["run vm0 vcpu0 on cpu1", "destroy vm0", &format!("create vm0 at {RAM_PA:#x}"), "load vm0"]
    );
    let second = hypervisor.vm(0).unwrap();
    assert!(!Arc::ptr_eq(&first, &second), "a new VM");
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Runnable));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l == "hypervisor: vm0 guest: capabilities revoked, 4 MiB returned to untyped memory"));
    assert!(lines.iter().any(|l| l == "hypervisor: vm0 guest: created again from its manifest entry"));
}

/// docs/capability-model.md, D2 and D4 at boot: the identity-mapped VM's RAM is exactly its
/// range, at IPA = PA, its guest's device tree says so and its vCPU 0 starts there; created
/// again, it is in the same place; a range the hypervisor holds is refused before any VM.
#[test]
fn an_identity_mapped_vm_boots_with_its_ram_at_its_physical_address_and_keeps_it_across_a_restart() {
    let hypervisor = booted_with(identity_bundle());
    let created = format!("create vm0 at {RAM_PA:#x}");
    assert_eq!(take_events()[..2], [created.as_str(), "load vm0"]);
    let vm = hypervisor.vm(0).unwrap();
    assert_eq!(vm.spec.ram_ipa(), RAM_PA);
    let tree = vm.device_tree.lock().clone();
    let guest = Platform::from_device_tree(&tree).unwrap();
    assert_eq!(guest.memory.as_slice(), &[PhysRange { base: RAM_PA, size: RAM_SIZE as u64 }], "RAM at IPA = PA");
    let fdt = hyp_core::fdt::Fdt::new(&tree).unwrap();
    assert!(fdt.find_compatible(&["qemu,fw-cfg-mmio"]).is_some(), "its device, at the root (no dma-ranges)");
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    let line = format!(
        "hypervisor: vm0 dma: 4 MiB RAM at IPA {RAM_PA:#x} (PA {RAM_PA:#x}, identity-mapped), 1 vCPU(s), stage-2 tables in"
    );
    assert!(lines.iter().any(|l| l.starts_with(&line)), "{lines:#?}");
    turn(hypervisor, Guest::EndsTheVm(EndReason::Restart));
    assert_eq!(take_events()[..3], ["run vm0 vcpu0 on cpu1", "destroy vm0", created.as_str()]);

    // The same VM whose range runs into the hypervisor's heap is refused, naming both.
    let heap = HeldMemory { range: PhysRange { base: RAM_PA + 0x10_0000, size: 0x1000 }, holder: Holder::Heap };
    let err = try_boot(identity_bundle(), &[heap]).map(|_| ()).unwrap_err();
    assert_eq!(
        err,
        format!(
            "boot bundle: VM dma: field `identity_mapped`: its RAM {RAM_PA:#x}..{:#x} overlaps the hypervisor's heap \
             at 0x80100000..0x80101000; give a base outside it",
            RAM_PA + RAM_SIZE as u64
        )
    );
}

#[test]
fn a_passthrough_spi_is_quiet_and_claimed_before_its_vm_runs_and_released_before_its_memory_returns() {
    let hypervisor = booted_with(bundle(true));
    let created = format!("create vm0 at {RAM_PA:#x}");
    let quiet_and_configured = ["disable 34", "clear 34", "configure 34 level"];
    let events = take_events();
    assert_eq!(
        events[..4],
        [created.as_str(), quiet_and_configured[0], quiet_and_configured[1], quiet_and_configured[2]]
    );
    assert_eq!(hypervisor.routes.owner(RTC_INTID), Some(0));
    assert_eq!(hypervisor.routes.of(RTC_INTID), Route::Passthrough);

    // A reset: off and not left active until the guest enables it again; still its own.
    turn(hypervisor, Guest::EndsTheVm(EndReason::Reset));
    assert_eq!(take_events(), ["run vm0 vcpu0 on cpu1", "disable 34", "clear 34", "reset vm0"]);
    assert_eq!(hypervisor.routes.owner(RTC_INTID), Some(0));

    // A restart: released (disabled first, so nothing is forwarded once it has no owner)
    // before the capabilities go, claimed again by the VM created anew.
    turn(hypervisor, Guest::EndsTheVm(EndReason::Restart));
    let events = take_events();
    assert_eq!(events[..4], ["run vm0 vcpu0 on cpu1", "disable 34", "clear 34", "destroy vm0"]);
    assert_eq!(
        events[4..8],
        [created.as_str(), quiet_and_configured[0], quiet_and_configured[1], quiet_and_configured[2]]
    );
    assert_eq!(hypervisor.routes.owner(RTC_INTID), Some(0));
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines
        .iter()
        .any(|l| l == "hypervisor: vm0 guest: passthrough SPI INTID 34 disabled and deactivated (enabled: false)"));

    // The end: released for good.
    turn(hypervisor, Guest::EndsTheVm(EndReason::PoweredOff));
    assert_eq!(hypervisor.routes.owner(RTC_INTID), None);
}

#[test]
fn a_reset_reboots_the_vm_in_place_from_vcpu_0() {
    let hypervisor = booted();
    let before = hypervisor.vm(0).unwrap();
    take_events();
    turn(hypervisor, Guest::EndsTheVm(EndReason::Reset));
    assert_eq!(take_events(), ["run vm0 vcpu0 on cpu1", "reset vm0"]);
    assert!(Arc::ptr_eq(&before, &hypervisor.vm(0).unwrap()), "the same VM, its capabilities kept");
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Runnable));
}

#[test]
fn the_machine_stops_when_the_last_vm_ends_and_says_whether_one_failed() {
    for (end, clean) in [(EndReason::PoweredOff, true), (EndReason::Crashed, false)] {
        let hypervisor = booted();
        take_events();
        turn(hypervisor, Guest::EndsTheVm(end));
        assert_eq!(take_events(), ["run vm0 vcpu0 on cpu1", "destroy vm0", &format!("all ended, clean: {clean}")]);
        assert!(hypervisor.vm(0).is_none(), "nothing reaches a destroyed VM");
    }
}

#[test]
fn a_vcpu_that_leaves_its_cpu_ends_nothing() {
    let hypervisor = booted();
    take_events();
    turn(hypervisor, Guest::LeavesTheCpu);
    assert_eq!(take_events(), ["run vm0 vcpu0 on cpu1"]);
    assert!(hypervisor.vm(0).is_some());
}

#[test]
fn the_console_s_destroy_ends_the_vm_at_its_vcpu_s_next_turn_and_restart_creates_it_again() {
    let hypervisor = booted();
    take_events();
    let guest = || VmName::Name("guest".into());
    hypervisor.run_command(Command::Destroy(guest()));
    assert_eq!(take_events(), Vec::<String>::new(), "vCPU 0 is on: it stops at its next turn");
    assert!(hypervisor.vm(0).is_some_and(|vm| vm.is_ending()));
    FakeArch::become_cpu(1);
    assert!(hypervisor.run_next(1));
    assert_eq!(
        take_events(),
        ["run vm0 vcpu0 on cpu1", "destroy vm0", "all ended, clean: true"],
        "destroyed on purpose is a clean end"
    );
    assert!(hypervisor.vm(0).is_none());
    hypervisor.run_command(Command::Restart(guest()));
    assert_eq!(take_events(), [format!("create vm0 at {RAM_PA:#x}"), "load vm0".into()]);
    assert!(hypervisor.vm(0).is_some());
    assert_eq!(hypervisor.scheduling.state(vcpu_ref(0, 0)), Some(VcpuState::Runnable));
}

#[test]
fn typed_bytes_reach_the_focused_vm_and_ctrl_close_bracket_opens_the_command_line() {
    let hypervisor = booted();
    TYPED.with(|t| t.borrow_mut().extend(b"a"));
    hypervisor.console_interrupt();
    assert_eq!(read_uart(&hypervisor.vm(0).unwrap()), u64::from(b'a'), "into the VM's PL011");
    LINES.with(|l| l.borrow_mut().clear());
    TYPED.with(|t| t.borrow_mut().extend(b"\x1dlist\r"));
    hypervisor.console_interrupt();
    let lines = LINES.with(|l| std::mem::take(&mut *l.borrow_mut()));
    assert!(lines.iter().any(|l| l.contains("guest") && l.contains("running")), "{lines:?}");
    TYPED.with(|t| t.borrow_mut().extend(b"b"));
    hypervisor.console_interrupt();
    assert_eq!(read_uart(&hypervisor.vm(0).unwrap()), u64::from(b'b'), "the command line closed with its line");
}

/// Physical interrupts this CPU will acknowledge, in order.
pub(super) fn pend(intids: &[u32]) {
    PENDING.with(|p| p.borrow_mut().extend(intids));
}

#[test]
fn every_pending_interrupt_is_handled_by_its_route_and_ended_once() {
    let hypervisor = booted();
    hypervisor.routes.set(26, Route::HypTimer).unwrap();
    hypervisor.routes.set(27, Route::VirtualTimer).unwrap();
    take_events();
    let vm = hypervisor.vm(0).unwrap();
    TYPED.with(|t| t.borrow_mut().extend(b"x"));
    PENDING.with(|p| p.borrow_mut().extend([1, UART_INTID, 27, 26, 99]));
    FakeArch::become_cpu(1);
    let timer_fired = hypervisor.take_interrupts(Some((&vm, 0)));
    assert_eq!(
        take_events(),
        ["end 1", &format!("end {UART_INTID}"), "drop priority 27", "end 26", "end 99"],
        "the virtual timer's PPI is left active for the guest to deactivate; every other one is ended"
    );
    assert_eq!(read_uart(&vm), u64::from(b'x'), "console input reached the focused VM");
    assert!(timer_fired, "the running vCPU's timer fired: its run loop raises the line with its next plan");
    assert!(!hypervisor.take_interrupts(Some((&vm, 0))), "nothing more was pending");
    let counts = vm.exit_counts().to_string();
    assert!(counts.contains("kick 1") && counts.contains("timer-irq 1"), "{counts}");
}

/// On a guest's exit, one interrupt is taken (the one the exception came for; another one
/// comes as an exception of its own). A kick is handled and the running vCPU's timer left
/// to its caller with its priority dropped; any other interrupt is acknowledged and left
/// to the caller, not ended, so that the running vCPU's list registers can be taken back
/// before it may change its vGIC (a passthrough SPI's line raised after the take-back, not
/// folded away by it: the run loop's order, `tests/vcpu_run.rs`).
#[test]
fn an_exit_takes_one_interrupt_and_leaves_any_but_a_kick_or_its_timer_to_its_caller() {
    let hypervisor = booted();
    hypervisor.routes.set(26, Route::HypTimer).unwrap();
    hypervisor.routes.set(27, Route::VirtualTimer).unwrap();
    take_events();
    let vm = hypervisor.vm(0).unwrap();
    FakeArch::become_cpu(1);
    PENDING.with(|p| p.borrow_mut().extend([1, 27, 26, 99]));
    let exit = || hypervisor.take_exit_interrupt((&vm, 0));
    assert_eq!(exit(), ExitInterrupt::Taken);
    assert_eq!(take_events(), ["end 1"], "a kick: handled, nothing else taken");
    assert!(vm.vgic.take_hint(0), "the kicked vCPU looks at its vGIC");
    assert_eq!(exit(), ExitInterrupt::VirtualTimer);
    assert_eq!(take_events(), ["drop priority 27"], "the timer: left active for the guest");
    for intid in [26, 99] {
        let ExitInterrupt::Other(interrupt) = exit() else { panic!("INTID {intid} is the caller's") };
        assert!(take_events().is_empty(), "INTID {intid}: acknowledged, not ended, before the caller's take-back");
        hypervisor.take_exit_interrupt_routed(interrupt, (&vm, 0));
        assert_eq!(take_events(), [format!("end {intid}")]);
    }
    assert_eq!(exit(), ExitInterrupt::Taken, "nothing left: the spurious INTID");
    assert!(take_events().is_empty());
}

#[test]
fn an_idle_cpu_ends_even_the_virtual_timer_s_interrupt() {
    let hypervisor = booted();
    hypervisor.routes.set(27, Route::VirtualTimer).unwrap();
    take_events();
    PENDING.with(|p| p.borrow_mut().extend([27, 1]));
    hypervisor.take_interrupts(None);
    assert_eq!(take_events(), ["end 27", "end 1"], "no vCPU runs here to deactivate it");
}

/// A guest driving VM `vm`'s disk through its MMIO window, its rings at `base`.
fn disk_guest(vm: &Arc<Vm<FakeEnv>>, base: u64) -> BlkGuest {
    let vm = Arc::clone(vm);
    let reg = move |offset: u64, value: u32| {
        vm.mmio().write(0, Ipa(Slot::Disk.ipa() + offset), AccessWidth::Word, u64::from(value)).unwrap();
    };
    BlkGuest::new(Box::new(reg), image_ram(), base)
}

/// A hypervisor whose VM has the whole board disk and a read of it in flight: its status
/// byte.
fn booted_with_a_read_in_flight() -> (&'static Hypervisor<FakeArch>, BlkGuest, u64) {
    let hypervisor = booted_with(bundle_with(false, true, false));
    let vm = hypervisor.vm(0).unwrap();
    let mut guest = disk_guest(&vm, RAM_IPA + 0x10_0000);
    let (_, _, status) = guest.request(false, 1, 512);
    guest.notify();
    assert_eq!(vm.disk_in_flight(), 1);
    assert_eq!(board_disk().lock().in_flight(), 1);
    take_events();
    // From now on the disk completes what it has when the hypervisor looks.
    board_disk().lock().complete_when_polled = true;
    (hypervisor, guest, status)
}

#[test]
fn a_vm_is_destroyed_and_its_memory_returned_only_once_its_disk_requests_have_completed() {
    let (hypervisor, guest, status) = booted_with_a_read_in_flight();
    turn(hypervisor, Guest::EndsTheVm(EndReason::PoweredOff));
    assert_eq!(
        take_events(),
        ["run vm0 vcpu0 on cpu1", "disk completes tag 0 of vm0", "destroy vm0", "all ended, clean: true"],
        "the disk's completion before the capabilities go"
    );
    assert_eq!(board_disk().lock().in_flight(), 0);
    assert!(guest.used().is_empty(), "the device was shut down: the completion wrote nothing");
    assert_eq!(guest.byte(status), 0xff);
}

#[test]
fn a_vm_reboots_only_once_its_disk_requests_have_completed_and_they_finish_nothing_after() {
    let (hypervisor, guest, status) = booted_with_a_read_in_flight();
    let vm = hypervisor.vm(0).unwrap();
    turn(hypervisor, Guest::EndsTheVm(EndReason::Reset));
    assert_eq!(
        take_events(),
        ["run vm0 vcpu0 on cpu1", "disk completes tag 0 of vm0", "reset vm0"],
        "the disk's completion before the RAM is zeroed and loaded again"
    );
    assert_eq!(vm.disk_in_flight(), 0);
    assert!(guest.used().is_empty(), "a request of the device before its reset finishes nothing");
    assert_eq!(guest.byte(status), 0xff);
}

#[test]
fn the_board_disk_s_interrupt_finishes_a_vm_s_request() {
    let (hypervisor, guest, status) = booted_with_a_read_in_flight();
    board_disk().lock().complete_when_polled = false;
    board_disk().lock().complete_all();
    PENDING.with(|p| p.borrow_mut().push_back(DISK_INTID));
    hypervisor.take_interrupts(None);
    assert_eq!(take_events(), [format!("end {DISK_INTID}")]);
    assert_eq!(guest.used().len(), 1);
    assert_eq!(guest.byte(status), 0, "VIRTIO_BLK_S_OK");
    assert_eq!(hypervisor.vm(0).unwrap().disk_in_flight(), 0);
}
