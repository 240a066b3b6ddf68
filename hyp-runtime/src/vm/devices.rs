//! A VM's emulated devices: its console UART and its virtio devices, as its manifest entry
//! asks, each a window on the VM's MMIO bus.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::AtomicBool;

use hyp_core::bundle::{VirtioTransport, VmSpec};
use hyp_core::cap::CapError;
use hyp_core::guest_map::{
    VirtioSlot as Slot, GICV2M_IPA, GICV2M_SIZE, ITS_IPA, ITS_SIZE, MBI_COUNT, MBI_FIRST_INTID, PCI_ECAM_IPA,
    PCI_ECAM_SIZE, PCI_MMIO_IPA, PCI_MMIO_SIZE, VIRTIO_IPA, VIRTIO_WINDOW,
};
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::{BusDevice, MmioBus, MmioDevice, MmioError};
use hyp_core::platform::PhysRange;
use hyp_core::sync::Mutex;
use hyp_core::syndrome::AccessWidth;
use stage2::{Ipa, IpaRange};
use vdev::pl011::{ConsoleOutput, InterruptLine, Pl011, SHADOW_WORDS};
use vdev::virtio::block::VirtioBlock;
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::net::VirtioNet;
use vgic::{IntId, V2mFrame};

use super::VmError;
use crate::board::{Board, DiskCompletion, DiskQueue};
use crate::first_touch::FirstTouch;
use crate::focus::{ConsoleChoice, TrackedConsole};
use crate::io_core::{IoCore, Polled};
use crate::network::port_of_vm;
use crate::shared_vgic::SharedVgic;
use crate::virtio::console_bridge::ConsoleBridge;
use crate::virtio::disk_slice::DiskSliceBackend;
use crate::virtio::pci::{
    Doorbell, EcamWindow, ItsWindow, MemoryWindow, MessageTarget, PciBus, PciFunction, V2mWindow,
};
use crate::virtio::slot::{Signal, SlotSetup, VirtioSlot, VmEnv, Window, WindowPage};
use crate::virtio::switch_port::SwitchPort;

/// A VM's console UART, shared by its MMIO window and the console input path. Lock order:
/// the UART, then the vGIC; the UART, then the capability space (showing or hiding its
/// shadow page).
#[derive(Clone)]
pub struct SharedUart(Arc<Mutex<UartState>>);

/// A page of memory the VM reads an emulated window from without a trap: its UART's while
/// no read of the UART has a side effect (docs/devices.md, "The PL011's shadow page"), its
/// virtio transports' always (docs/virtio.md, "The transports' shadow page"); writes always
/// trap. The capability space gives the window its page (`CapSpace::add_shadowed_window`).
/// Shared: the virtio page's transports write their own words of it from whichever CPU
/// holds each transport.
pub trait ShadowPage: Send + Sync {
    /// Writes `words` at byte `offset` of the page, where the VM's reads see them: the VM
    /// reads the page as Device memory, past the caches the hypervisor writes through.
    /// Returns once a read by the VM would see them.
    fn write(&self, offset: usize, words: &[u32]);
    /// The word at byte `offset` of the page, as the last `write` left it.
    fn read(&self, offset: usize) -> u32;
    /// Lets the VM read the window from the page (`true`), or makes every access trap
    /// again (`false`); hiding returns once no CPU can still read the page for the VM.
    fn show(&self, visible: bool) -> Result<(), CapError>;
}

struct UartState {
    model: Pl011,
    shadow: Option<Shadow>,
}

struct Shadow {
    page: Arc<dyn ShadowPage>,
    shown: bool,
    /// What the page holds of `[0, SHADOW_SPAN)`.
    copy: [u32; SHADOW_WORDS],
}

impl UartState {
    /// Brings the page in line with the model after anything changed it: the changed
    /// words written, then the page shown while no read has a side effect, hidden while
    /// one would (input waits in the receive FIFO).
    fn sync_shadow(&mut self) {
        let Some(shadow) = &mut self.shadow else { return };
        let Some(words) = self.model.shadow() else {
            self.hide_shadow();
            return;
        };
        let changed = |i: &usize| words[*i] != shadow.copy[*i];
        if let (Some(first), Some(last)) = ((0..SHADOW_WORDS).find(changed), (0..SHADOW_WORDS).rfind(changed)) {
            shadow.page.write(first * 4, &words[first..=last]);
            shadow.copy = words;
        }
        if !shadow.shown {
            match shadow.page.show(true) {
                Ok(()) => shadow.shown = true,
                // The window has no page after all: every access traps, as without one.
                Err(_) => self.shadow = None,
            }
        }
    }

    fn hide_shadow(&mut self) {
        if let Some(shadow) = self.shadow.as_mut().filter(|s| s.shown) {
            match shadow.page.show(false) {
                Ok(()) => shadow.shown = false,
                // Only a VM whose capabilities are going has no window to hide: none of
                // its vCPUs runs again.
                Err(_) => self.shadow = None,
            }
        }
    }
}

impl SharedUart {
    /// The UART, read through `shadow` while it can be (`None`: every access traps).
    pub fn new(
        out: Box<dyn ConsoleOutput + Send>,
        line: Box<dyn InterruptLine + Send>,
        shadow: Option<Arc<dyn ShadowPage>>,
    ) -> Self {
        let shadow = shadow.map(|page| {
            for &(offset, id) in Pl011::id_registers() {
                page.write(offset as usize, &[id]);
            }
            // Differs from every state's first word (UARTDR reads a byte), so the first
            // sync writes the whole copy.
            Shadow { page, shown: false, copy: [u32::MAX; SHADOW_WORDS] }
        });
        let mut state = UartState { model: Pl011::new(out, line), shadow };
        state.sync_shadow();
        SharedUart(Arc::new(Mutex::new(state)))
    }
    /// Bytes typed for the guest; returns how many were dropped (its receive FIFO full).
    pub fn receive(&self, bytes: &[u8]) -> u64 {
        let mut uart = self.0.lock();
        // Hidden before the input can raise the UART's interrupt: a guest that takes it
        // reads UARTFR and UARTDR through the trap, never an empty FIFO from the page.
        uart.hide_shadow();
        let before = uart.model.dropped();
        for &b in bytes {
            uart.model.receive(b);
        }
        uart.sync_shadow();
        uart.model.dropped() - before
    }
    pub fn reset(&self) {
        let mut uart = self.0.lock();
        uart.model.reset();
        uart.sync_shadow();
    }
    /// The VM is ending: its shadow page goes back with its memory, so nothing writes it
    /// from now on (its vCPUs do not run again; console input still reaches the model).
    pub fn forget_shadow(&self) {
        let mut uart = self.0.lock();
        uart.hide_shadow();
        uart.shadow = None;
    }
}

impl BusDevice for SharedUart {
    fn name(&self) -> &'static str {
        "pl011"
    }
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let mut uart = self.0.lock();
        let value = uart.model.read(offset, width);
        uart.sync_shadow();
        value
    }
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let mut uart = self.0.lock();
        let result = uart.model.write(offset, width, value);
        uart.sync_shadow();
        result
    }
}

type Shared<D, E> = Arc<VirtioSlot<D, E>>;
/// A VM's disk device, over a slice of the board's disk.
type Disk<E> = VirtioBlock<DiskSliceBackend<<<E as VmEnv>::Board as Board>::Disk, <E as VmEnv>::Ram>>;
/// A VM's console on the board's console.
type Console<E> = <<E as VmEnv>::Board as Board>::Console;

/// A VM's virtio devices: its console always, a disk and a NIC if its manifest says so,
/// over the transport it names.
pub struct VirtioDevices<E: VmEnv> {
    pub disk: Option<Shared<Disk<E>, E>>,
    pub nic: Option<Shared<VirtioNet<SwitchPort>, E>>,
    pub console: Shared<VirtioConsole<ConsoleBridge<Console<E>>>, E>,
    /// With the PCI transport: the bus of its functions, and the GIC's window their
    /// messages go to (a GICv2's GICv2m frame, a GICv3's ITS).
    pci: Option<Arc<PciBus>>,
    msi_window: Option<MsiWindow<E>>,
}

/// The window of the GIC a VM's PCI functions send their messages to.
enum MsiWindow<E: VmEnv> {
    V2m(SharedVgic<E::Arch>, V2mFrame),
    Its(ItsWindow<E::Arch, E::Board, E::Ram>),
}

/// What the VM's devices are built with.
pub struct Setup<'a, E: VmEnv> {
    pub id: usize,
    pub spec: &'a VmSpec<'static>,
    pub ram: PhysRange,
    pub vgic: &'a SharedVgic<E::Arch>,
    pub console_choice: &'a ConsoleChoice,
    /// Which blocks of its RAM are zeroed, for the devices to zero the rest first.
    pub first_touch: &'a Arc<FirstTouch>,
    /// How many VMs share the board's disk (its queue is split between them).
    pub disk_vms: usize,
    /// The page the VM reads its transports' windows from, if the capability space gave
    /// their page one (docs/virtio.md, "The transports' shadow page").
    pub shadow: Option<Arc<dyn ShadowPage>>,
}

impl<E: VmEnv> VirtioDevices<E> {
    /// The devices the manifest entry asks for, over the VM's RAM; `log` and `work` are
    /// the VM's line limit and its flag for work left for later.
    pub fn create(setup: Setup<'_, E>, (log, work): (&Arc<GuestLogLimit>, &Arc<AtomicBool>)) -> Result<Self, VmError> {
        let Setup { id, spec, ram, vgic, console_choice, first_touch, disk_vms, shadow } = setup;
        let transport = spec.devices.transport;
        // A GICv2's MSIs go to its GICv2m frame, a GICv3's to its ITS (docs/virtio.md, "The
        // virtio-pci transport").
        let v2m = (vgic.lock().version() == vgic::GicVersion::V2)
            .then(|| V2mFrame::new(MBI_FIRST_INTID, MBI_COUNT))
            .flatten();
        let doorbell = match v2m {
            Some(_) => GICV2M_IPA + vgic::V2M_MSI_SETSPI_NS,
            None => ITS_IPA + vgic::GITS_TRANSLATER,
        };
        // A function is function 0 of its device number on bus 0: its requester ID
        // (PCI Local Bus 3.0, 6.2.1: bus [15:8], device [7:3], function [2:0]).
        let doorbell_of = |slot: Slot| match v2m {
            Some(frame) => Doorbell::V2m(frame),
            None => Doorbell::Its { device_id: u32::from(slot.pci_device()) << 3 },
        };
        // A virtio-pci function reads no window from the page: it has none.
        let shadow = shadow.filter(|_| transport == VirtioTransport::Mmio);
        let slot = |name, slot: Slot| SlotSetup::<E> {
            vm: id,
            name,
            ram: E::guest_ram(spec.ram_ipa(), ram.base, spec.memory, Arc::clone(first_touch)),
            signal: match transport {
                VirtioTransport::Mmio => Signal::Line(E::interrupt_line(vgic, IntId(32 + slot.spi()))),
                VirtioTransport::Pci => {
                    Signal::Messages(MessageTarget { vgic: Arc::clone(vgic), doorbell, kind: doorbell_of(slot) })
                }
            },
            log: Arc::clone(log),
            work: Arc::clone(work),
            shadow: shadow
                .as_ref()
                .map(|page| WindowPage { page: Arc::clone(page), offset: (slot.ipa() - VIRTIO_IPA) as usize }),
        };
        let console = ConsoleBridge(TrackedConsole::new(E::Board::vm_console(id, spec.name), console_choice, true));
        let console = Arc::new(VirtioSlot::new(slot("console", Slot::Console), VirtioConsole::new(console), 0));
        let disk = match spec.devices.disk {
            None => None,
            Some(slice) => {
                let board = E::Board::disk().ok_or(VmError::NoBoardDisk)?;
                let ram = E::guest_ram(spec.ram_ipa(), ram.base, spec.memory, Arc::clone(first_touch));
                let backend =
                    DiskSliceBackend::new(DiskQueue::new(board), slice, ram, id, disk_vms).map_err(VmError::Disk)?;
                Some(Arc::new(VirtioSlot::new(slot("blk", Slot::Disk), VirtioBlock::new(backend), 0)))
            }
        };
        let nic = spec.nic_mac(id).map(|mac| {
            let device = VirtioNet::new(mac, SwitchPort::default());
            Arc::new(VirtioSlot::new(slot("net", Slot::Nic), device, port_of_vm(id)))
        });
        // Every window present is written: the VM reads them from the page from now on (a
        // transport the VM does not have reads as zeros, its writes still refused). Refused,
        // every access traps as without the page.
        if let Some(page) = shadow {
            let _ = page.show(true);
        }
        let pci = (transport == VirtioTransport::Pci).then(|| {
            let mut functions: Vec<(u8, Arc<dyn PciFunction>)> =
                [(Slot::Console.pci_device(), Arc::clone(&console) as Arc<dyn PciFunction>)].to_vec();
            if let Some(disk) = &disk {
                functions.push((Slot::Disk.pci_device(), Arc::clone(disk) as Arc<dyn PciFunction>));
            }
            if let Some(nic) = &nic {
                functions.push((Slot::Nic.pci_device(), Arc::clone(nic) as Arc<dyn PciFunction>));
            }
            Arc::new(PciBus::new(functions))
        });
        let msi_window = pci.as_ref().map(|_| match v2m {
            Some(frame) => MsiWindow::V2m(Arc::clone(vgic), frame),
            None => MsiWindow::Its(ItsWindow {
                vm: id,
                vgic: Arc::clone(vgic),
                ram: E::guest_ram(spec.ram_ipa(), ram.base, spec.memory, Arc::clone(first_touch)),
                log: Arc::clone(log),
                board: core::marker::PhantomData,
            }),
        });
        Ok(VirtioDevices { disk, nic, console, pci, msi_window })
    }

    /// Each device's window on the bus, at its slot (granted by the capability space like
    /// the other windows: they cannot overlap).
    pub fn attach(&mut self, bus: &mut MmioBus) -> Result<(), VmError> {
        let range = |base, size| IpaRange::new(Ipa(base), size).map_err(|e| VmError::Capability(CapError::Stage2(e)));
        if let Some(pci) = &self.pci {
            let _ = bus.attach(range(PCI_ECAM_IPA, PCI_ECAM_SIZE)?, Box::new(EcamWindow(Arc::clone(pci))));
            let memory = MemoryWindow { bus: Arc::clone(pci), base: PCI_MMIO_IPA };
            let _ = bus.attach(range(PCI_MMIO_IPA, PCI_MMIO_SIZE)?, Box::new(memory));
            match self.msi_window.take() {
                Some(MsiWindow::V2m(vgic, frame)) => {
                    let _ = bus.attach(range(GICV2M_IPA, GICV2M_SIZE)?, Box::new(V2mWindow { vgic, frame }));
                }
                Some(MsiWindow::Its(its)) => {
                    let _ = bus.attach(range(ITS_IPA, ITS_SIZE)?, Box::new(its));
                }
                None => {}
            }
            return Ok(());
        }
        let window = |slot: Slot| range(slot.ipa(), VIRTIO_WINDOW);
        let _ = bus.attach(window(Slot::Console)?, Box::new(Window(Arc::clone(&self.console))));
        if let Some(disk) = &self.disk {
            let _ = bus.attach(window(Slot::Disk)?, Box::new(Window(Arc::clone(disk))));
        }
        if let Some(nic) = &self.nic {
            let _ = bus.attach(window(Slot::Nic)?, Box::new(Window(Arc::clone(nic))));
        }
        Ok(())
    }

    pub fn reset(&self) {
        self.console.reset();
        self.disk.iter().for_each(|d| d.reset());
        self.nic.iter().for_each(|n| n.reset());
        self.pci.iter().for_each(|p| p.reset());
    }

    pub fn continue_work(&self) {
        self.console.continue_work();
        self.disk.iter().for_each(|d| d.continue_work());
        self.nic.iter().for_each(|n| n.continue_work());
    }

    /// The board's disk finished a request of the VM's disk.
    pub fn disk_completed(&self, completion: DiskCompletion) {
        if let Some(disk) = &self.disk {
            disk.disk_completed(completion);
        }
    }

    /// Requests of the VM's disk in flight on the board's disk.
    pub fn disk_in_flight(&self) -> usize {
        self.disk.as_ref().map_or(0, |d| d.in_flight())
    }

    /// Takes the disk's chains that wait for room on the board's disk, if any wait.
    pub fn retry_disk(&self) {
        if let Some(disk) = self.disk.as_ref().filter(|d| d.waiting()) {
            disk.retry();
        }
    }

    /// The disk device reset (as by its driver): nothing new starts, and what is in flight
    /// finishes nothing for the guest.
    pub fn reset_disk(&self) {
        self.disk.iter().for_each(|d| d.reset());
    }

    /// From now on the side core `core` on CPU `cpu` serves the disk and the NIC (the
    /// console stays on the exits: its traffic is a person's typing); the devices to add to
    /// the core's list.
    pub fn serve_from(&self, core: &'static IoCore, cpu: usize) -> Vec<Arc<dyn Polled>> {
        let mut served: Vec<Arc<dyn Polled>> = Vec::new();
        if let Some(disk) = &self.disk {
            disk.serve_from(core, cpu);
            served.push(Arc::clone(disk) as Arc<dyn Polled>);
        }
        if let Some(nic) = &self.nic {
            nic.serve_from(core, cpu);
            served.push(Arc::clone(nic) as Arc<dyn Polled>);
        }
        served
    }

    pub fn shut_down(&self) {
        self.console.shut_down();
        self.disk.iter().for_each(|d| d.shut_down());
        self.nic.iter().for_each(|n| n.shut_down());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;
    use std::sync::Mutex as StdMutex;

    /// What happened to the page and the UART's line, in order.
    #[derive(Clone, Default)]
    struct Events(Arc<StdMutex<Vec<String>>>);
    impl Events {
        fn push(&self, e: String) {
            self.0.lock().unwrap().push(e);
        }
        fn take(&self) -> Vec<String> {
            core::mem::take(&mut *self.0.lock().unwrap())
        }
    }
    struct Page {
        events: Events,
        refuse: bool,
    }
    impl ShadowPage for Page {
        fn write(&self, offset: usize, words: &[u32]) {
            self.events.push(format!("write {offset:#x} {words:x?}"));
        }
        /// The UART never reads its page back: a read would show among the events.
        fn read(&self, offset: usize) -> u32 {
            self.events.push(format!("read {offset:#x}"));
            0
        }
        fn show(&self, visible: bool) -> Result<(), CapError> {
            self.events.push(format!("show {visible}"));
            if self.refuse {
                return Err(CapError::NoShadowedWindow { ipa: 0x0900_0000 });
            }
            Ok(())
        }
    }
    struct Line(Events);
    impl InterruptLine for Line {
        fn set_level(&mut self, high: bool) {
            self.0.push(format!("line {high}"));
        }
    }
    struct Quiet;
    impl ConsoleOutput for Quiet {
        fn put(&mut self, _: u8) {}
    }

    fn shadowed_uart(refuse: bool) -> (SharedUart, Events) {
        let events = Events::default();
        let page = Page { events: events.clone(), refuse };
        (SharedUart::new(Box::new(Quiet), Box::new(Line(events.clone())), Some(Arc::new(page))), events)
    }

    const FR: u64 = 0x18;
    const IBRD: u64 = 0x24;
    const IMSC: u64 = 0x38;
    /// UARTFR at reset: transmit and receive FIFOs empty.
    const FR_EMPTY: u32 = 0x90;

    #[test]
    fn the_page_gets_every_register_then_is_shown() {
        let (_uart, events) = shadowed_uart(false);
        let events = events.take();
        let ids: Vec<String> = Pl011::id_registers().iter().map(|(o, v)| format!("write {o:#x} [{v:x}]")).collect();
        assert_eq!(events[..ids.len()], ids[..]);
        let mut words = [0u32; SHADOW_WORDS];
        words[FR as usize / 4] = FR_EMPTY;
        words[0x30 / 4] = 0x300;
        words[0x34 / 4] = 0x12;
        assert_eq!(events[ids.len()..], [format!("write 0x0 {words:x?}"), "show true".into()]);
    }

    #[test]
    fn input_hides_the_page_before_it_raises_the_line_and_reading_it_all_shows_it_again() {
        let (uart, events) = shadowed_uart(false);
        uart.write(0, IMSC, AccessWidth::Word, 1 << 4).unwrap();
        assert_eq!(events.take().last().map(String::as_str), Some("write 0x38 [10]"), "only the changed word");
        assert_eq!(uart.receive(b"ab"), 0);
        assert_eq!(events.take(), ["show false", "line true"]);
        assert_eq!(uart.read(0, 0, AccessWidth::Word), Ok(u64::from(b'a')));
        uart.write(0, IBRD, AccessWidth::Word, 0x1234).unwrap();
        assert!(events.take().is_empty(), "input still waits: the page stays hidden, unwritten");
        assert_eq!(uart.read(0, 0, AccessWidth::Word), Ok(u64::from(b'b')));
        assert_eq!(events.take(), ["line false", "write 0x24 [1234]", "show true"], "written, then shown");
    }

    #[test]
    fn a_window_without_its_page_traps_as_before_and_a_forgotten_page_is_never_written() {
        let (uart, events) = shadowed_uart(true);
        assert_eq!(events.take().last().map(String::as_str), Some("show true"));
        uart.write(0, IMSC, AccessWidth::Word, 1 << 4).unwrap();
        assert_eq!(uart.receive(b"a"), 0);
        assert_eq!(events.take(), ["line true"], "refused once: the page is not asked again");
        assert_eq!(uart.read(0, FR, AccessWidth::Word), Ok(0x80));

        let (uart, events) = shadowed_uart(false);
        uart.forget_shadow();
        assert_eq!(events.take().last().map(String::as_str), Some("show false"));
        uart.write(0, IMSC, AccessWidth::Word, 1 << 5).unwrap();
        uart.reset();
        assert!(events.take().is_empty(), "nothing reaches the page once the VM ends");
    }
}
