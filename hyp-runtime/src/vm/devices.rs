//! A VM's emulated devices: its console UART and its virtio devices, as its manifest entry
//! asks, each a window on the VM's MMIO bus.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::AtomicBool;

use hyp_core::bundle::VmSpec;
use hyp_core::cap::CapError;
use hyp_core::guest_map::{VirtioSlot as Slot, VIRTIO_WINDOW};
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::{BusDevice, MmioBus, MmioDevice, MmioError};
use hyp_core::platform::PhysRange;
use hyp_core::syndrome::AccessWidth;
use spin::Mutex;
use stage2::{Ipa, IpaRange};
use vdev::pl011::{ConsoleOutput, InterruptLine, Pl011};
use vdev::virtio::block::VirtioBlock;
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::net::VirtioNet;
use vgic::IntId;

use super::VmError;
use crate::board::{Board, DiskCompletion, DiskQueue};
use crate::first_touch::FirstTouch;
use crate::focus::{ConsoleChoice, TrackedConsole};
use crate::io_core::{IoCore, Polled};
use crate::network::port_of_vm;
use crate::shared_vgic::SharedVgic;
use crate::virtio::console_bridge::ConsoleBridge;
use crate::virtio::disk_slice::DiskSliceBackend;
use crate::virtio::slot::{SlotSetup, VirtioSlot, VmEnv, Window};
use crate::virtio::switch_port::SwitchPort;

/// A VM's console UART, shared by its MMIO window and the console input path. Lock order:
/// the UART, then the vGIC.
#[derive(Clone)]
pub struct SharedUart(Arc<Mutex<Pl011>>);

impl SharedUart {
    pub fn new(out: Box<dyn ConsoleOutput + Send>, line: Box<dyn InterruptLine + Send>) -> Self {
        SharedUart(Arc::new(Mutex::new(Pl011::new(out, line))))
    }
    /// Bytes typed for the guest; returns how many were dropped (its receive FIFO full).
    pub fn receive(&self, bytes: &[u8]) -> u64 {
        let mut uart = self.0.lock();
        let before = uart.dropped();
        for &b in bytes {
            uart.receive(b);
        }
        uart.dropped() - before
    }
    pub fn reset(&self) {
        self.0.lock().reset();
    }
}

impl BusDevice for SharedUart {
    fn name(&self) -> &'static str {
        "pl011"
    }
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.lock().read(offset, width)
    }
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.0.lock().write(offset, width, value)
    }
}

type Shared<D, E> = Arc<VirtioSlot<D, E>>;
/// A VM's disk device, over a slice of the board's disk.
type Disk<E> = VirtioBlock<DiskSliceBackend<<<E as VmEnv>::Board as Board>::Disk, <E as VmEnv>::Ram>>;
/// A VM's console on the board's console.
type Console<E> = <<E as VmEnv>::Board as Board>::Console;

/// A VM's virtio devices: its console always, a disk and a NIC if its manifest says so.
pub struct VirtioDevices<E: VmEnv> {
    pub disk: Option<Shared<Disk<E>, E>>,
    pub nic: Option<Shared<VirtioNet<SwitchPort>, E>>,
    pub console: Shared<VirtioConsole<ConsoleBridge<Console<E>>>, E>,
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
}

impl<E: VmEnv> VirtioDevices<E> {
    /// The devices the manifest entry asks for, over the VM's RAM; `log` and `work` are
    /// the VM's line limit and its flag for work left for later.
    pub fn create(setup: Setup<'_, E>, (log, work): (&Arc<GuestLogLimit>, &Arc<AtomicBool>)) -> Result<Self, VmError> {
        let Setup { id, spec, ram, vgic, console_choice, first_touch, disk_vms } = setup;
        let slot = |name, slot: Slot| SlotSetup::<E> {
            vm: id,
            name,
            ram: E::guest_ram(spec.ram_ipa(), ram.base, spec.memory, Arc::clone(first_touch)),
            line: E::interrupt_line(vgic, IntId(32 + slot.spi())),
            log: Arc::clone(log),
            work: Arc::clone(work),
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
        Ok(VirtioDevices { disk, nic, console })
    }

    /// Each device's window on the bus, at its slot (granted by the capability space like
    /// the other windows: they cannot overlap).
    pub fn attach(&self, bus: &mut MmioBus) -> Result<(), VmError> {
        let window = |slot: Slot| {
            IpaRange::new(Ipa(slot.ipa()), VIRTIO_WINDOW).map_err(|e| VmError::Capability(CapError::Stage2(e)))
        };
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
