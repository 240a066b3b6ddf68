//! One virtio device of a VM ([`VirtioSlot`]): its `vdev` model behind a lock, behind its
//! transport's registers (a virtio-mmio window, [`Window`], or a virtio-pci function on the
//! VM's PCI bus, `super::pci`), shared by them and whatever feeds it from outside (the
//! switch, console input); after each access, what the device left is done outside its
//! lock: its interrupt line follows its level or its MSI-X messages are sent, its incidents
//! are logged within the VM's limit, the frames it sent go to the switch; and what the
//! guest reads of a virtio-mmio window is kept in the VM's virtio shadow page
//! (`WindowPage`), so those reads do not trap.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};

use hyp_core::cap::{CapError, CapId};
use hyp_core::log_limit::GuestLogLimit;
use hyp_core::mmio::{BusDevice, MmioError};
use hyp_core::sync::Mutex;
use hyp_core::syndrome::AccessWidth;
use spin::Once;
use vdev::pl011::{ConsoleOutput, InterruptLine};
use vdev::virtio::block::VirtioBlock;
use vdev::virtio::console::VirtioConsole;
use vdev::virtio::device::VirtioDevice;
use vdev::virtio::net::VirtioNet;
use vdev::virtio::pci::{Messages, VirtioPci};
use vdev::virtio::shadow::CHANGING;
use vdev::virtio::transport::{regs, InterruptState, InterruptWord, RegisterError, VirtioMmio};

use super::console_bridge::ConsoleBridge;
use super::disk_slice::DiskSliceBackend;
use super::pci::{MessageTarget, PciFunction, Undelivered};
use super::switch_port::SwitchPort;
use super::PhysicalRam;
use crate::arch::Arch;
use crate::board::{Board, BoardDisk, DiskCompletion};
use crate::first_touch::{Fill, FirstTouch};
use crate::guest_log::guest_line;
use crate::io_core::{Found, IoCore, Polled};
use crate::shared_vgic::SharedVgic;
use crate::vm::ShadowPage;
use stage2::IpaRange;
use vgic::IntId;

/// What a VM needs from the image it runs in: the architecture and the board, how its RAM
/// is reached, its interrupt lines and the switch. The arch crate implements
/// it (hyp-arch-armv8/src/vdev.rs); the host tests, with fakes.
pub trait VmEnv: 'static {
    type Arch: Arch;
    type Board: Board;
    /// The VM's RAM as the devices reach it.
    type Ram: PhysicalRam + Send + Sync;
    /// A device's interrupt line into the VM's vGIC.
    type Line: InterruptLine + Send;
    /// The VM's RAM: `size` bytes at IPA `ipa`, physical address `pa`, each block zeroed
    /// before a device first reaches it (`first_touch`).
    fn guest_ram(ipa: u64, pa: u64, size: u64, first_touch: Arc<FirstTouch>) -> Self::Ram;
    /// The first touch of `range` of VM `vm`'s private RAM: its pending stage-2 leaves
    /// zeroed (and cleaned to the point of coherency; not when the loader overwrites all of
    /// them, `Fill::Overwritten`) and made valid, through the capability space
    /// (`CapSpace::zero_on_first_touch`); the bytes made valid.
    fn zero_on_first_touch(vm: CapId, range: IpaRange, fill: Fill) -> Result<u64, CapError>;
    /// Interrupt `intid` of the VM's vGIC, as a device's line.
    fn interrupt_line(vgic: &SharedVgic<Self::Arch>, intid: IntId) -> Self::Line;
    /// A frame the NIC on switch port `from` sent, for the switch.
    fn forward_frame(from: usize, frame: &[u8]);
    /// The page VM `vm` reads its emulated window at `ipa` from (its console UART's, its
    /// virtio transports'), zeroed, if the capability space gave the window one
    /// (`ShadowPage`); without it, every access to the window traps.
    fn window_shadow(_vm: CapId, _ipa: u64) -> Option<Arc<dyn ShadowPage>> {
        None
    }
}

/// Work a device leaves for after its lock is released.
pub trait AfterAccess {
    /// Frames for the switch.
    fn take_frames(&mut self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// Whether requests wait on its ring for room on the board's disk.
    fn waiting(&self) -> bool {
        false
    }
    /// The VM is being destroyed: nothing of the device's touches its RAM from now on.
    fn shut_down(&mut self) {}
    /// Whether it has requests in flight: a side core serving it keeps polling.
    fn busy(&self) -> bool {
        false
    }
}
impl<K: BoardDisk, M: PhysicalRam> AfterAccess for VirtioBlock<DiskSliceBackend<K, M>> {
    fn waiting(&self) -> bool {
        VirtioBlock::waiting(self)
    }
    fn busy(&self) -> bool {
        self.backend().in_flight() > 0 || VirtioBlock::waiting(self)
    }
    fn shut_down(&mut self) {
        self.backend_mut().stop();
    }
}
impl<O: ConsoleOutput> AfterAccess for VirtioConsole<ConsoleBridge<O>> {}
impl AfterAccess for VirtioNet<SwitchPort> {
    fn take_frames(&mut self) -> Vec<Vec<u8>> {
        self.backend_mut().take_frames()
    }
}

/// A device behind its transport's registers. Both keep the device's transport-independent
/// state in a `VirtioMmio` (features, status, queues, a side core's passes), which this
/// dereferences to; a virtio-pci function adds its configuration space, BAR and MSI-X
/// table around it (boxed: four times a virtio-mmio device's size, which stays inline).
pub enum Transport<D: VirtioDevice> {
    Mmio(VirtioMmio<D>),
    Pci(Box<VirtioPci<D>>),
}

impl<D: VirtioDevice> Deref for Transport<D> {
    type Target = VirtioMmio<D>;
    fn deref(&self) -> &VirtioMmio<D> {
        match self {
            Transport::Mmio(m) => m,
            Transport::Pci(p) => p.core(),
        }
    }
}

impl<D: VirtioDevice> DerefMut for Transport<D> {
    fn deref_mut(&mut self) -> &mut VirtioMmio<D> {
        match self {
            Transport::Mmio(m) => m,
            Transport::Pci(p) => p.core_mut(),
        }
    }
}

impl<D: VirtioDevice> Transport<D> {
    /// Reset as at power-on (VM reboot): a PCI function's configuration space and MSI-X
    /// table too.
    pub fn reset(&mut self) {
        match self {
            Transport::Mmio(m) => m.reset(),
            Transport::Pci(p) => p.reset(),
        }
    }

    /// The MSI-X messages the device's interrupts since the last access ask for; none for
    /// a virtio-mmio device, whose line shows its level instead.
    fn take_messages(&mut self) -> Option<Messages> {
        match self {
            Transport::Mmio(_) => None,
            Transport::Pci(p) => Some(p.take_messages()).filter(|m| !m.is_empty()),
        }
    }
}

/// One virtio device of a VM, shared by its MMIO window and whatever feeds it from outside
/// (the switch, console input, the board disk's completions). Lock order
/// (docs/architecture.md, "Lock order"): this device, then the board's disk (a leaf, taken
/// only inside `DiskQueue`'s calls), or this device, released, then the vGIC; never two
/// devices at once.
pub struct VirtioSlot<D: VirtioDevice, E: VmEnv> {
    pub vm: usize,
    pub name: &'static str,
    /// The VM's limit on the lines its guest causes (the device's incidents are some).
    log: Arc<GuestLogLimit>,
    /// This device left work for later; `work` is the VM's flag for any of its devices.
    pending: AtomicBool,
    /// Requests wait on the device's ring for room on the board's disk
    /// (`Hypervisor::disk_interrupt` retries it after completions).
    waiting: AtomicBool,
    work: Arc<AtomicBool>,
    pub device: Mutex<Transport<D>>,
    pub ram: E::Ram,
    /// The interrupt line and what it shows (`access`): a virtio-mmio device's.
    line: Option<Mutex<ShownLevel<E::Line>>>,
    /// Where a virtio-pci function's messages go (`access`).
    messages: Option<MessageTarget<E::Arch>>,
    /// Set (under the device lock) when the VM is destroyed: the device touches its RAM no
    /// more, whoever still holds it.
    shut_down: AtomicBool,
    /// The switch port of a NIC.
    pub port: usize,
    /// The side core that serves it, and that core's CPU (`serve_from`); none: its
    /// notifies are served on the exit that makes them.
    io: Once<(&'static IoCore, usize)>,
    /// Queues notified since the side core's last pass (bit n: queue n), marked by the
    /// notifying exit without the device's lock.
    notified: AtomicU32,
    /// The device's InterruptStatus word (`VirtioMmio::interrupt_word`), which a side
    /// core's guest reads and acknowledges without the device's lock: its interrupt handler
    /// does not wait for a pass in progress. Its change count orders the levels shown on
    /// the line.
    interrupt: Arc<InterruptWord>,
    /// Its window in the VM's virtio shadow page, if the VM has the page.
    shadow: Option<WindowShadow>,
}

pub type Shared<D, E> = Arc<VirtioSlot<D, E>>;

/// A transport's window in its VM's virtio shadow page (docs/virtio.md, "The transports'
/// shadow page"): the page the VM reads the transports' windows from, shown from the VM's
/// creation (no read of a window has a side effect), `offset` the window's place in it.
#[derive(Clone)]
pub struct WindowPage {
    pub page: Arc<dyn ShadowPage>,
    pub offset: usize,
}

/// A slot's window in the page.
struct WindowShadow {
    at: WindowPage,
}

impl WindowShadow {
    /// Writes the `CHANGING` words that differ from what the page holds. Under the
    /// device's lock, so two writers never race on them.
    fn sync_changing(&self, words: [u32; 4]) {
        for (word, offset) in words.into_iter().zip(CHANGING) {
            let at = self.at.offset + offset as usize;
            if self.at.page.read(at) != word {
                self.at.page.write(at, &[word]);
            }
        }
    }

    /// Writes InterruptStatus as `state` has it, after the word took that change and before
    /// the line shows its level: a guest that takes the interrupt reads the bits that raised
    /// it. Two CPUs may change the word at once (the side core's pass raises a bit while a
    /// vCPU acknowledges without the device's lock) and reach the page in the other order,
    /// so each writes, then looks at the word again and writes once more if it changed since
    /// (its change may be the older one): whoever writes last, the page ends with the
    /// latest change's bits. The page's own word is the test of whether to write (a copy
    /// beside it could be stale against the page).
    fn publish_status(&self, word: &InterruptWord, mut state: InterruptState) {
        let offset = self.at.offset + regs::INTERRUPT_STATUS as usize;
        loop {
            if self.at.page.read(offset) != state.status {
                self.at.page.write(offset, &[state.status]);
            }
            // This CPU's store (or the load that found it done) before its next load of the
            // word: of two CPUs that each changed the word and then got here, at least one
            // sees the other's change, and that one writes the later change's bits after
            // the other's store.
            fence(Ordering::SeqCst);
            let now = word.load();
            if now.change == state.change {
                return;
            }
            state = now;
        }
    }
}

/// A device's interrupt line, and the change of the InterruptStatus word whose level it
/// shows. The level is found under the device's lock (or by an acknowledgement without it)
/// but set on the line after (the line takes the vGIC's lock and may wake a vCPU:
/// docs/architecture.md, "Lock order"), so two CPUs can reach the line in the other order
/// than they changed the word: a frame delivered from one CPU (level high) while the guest
/// acknowledges on another (level low) could leave the line low with the frame
/// unannounced, until the device's next access. The line shows the level of the latest
/// change only.
struct ShownLevel<L> {
    line: L,
    level: bool,
    access: u64,
}

impl<L: InterruptLine> ShownLevel<L> {
    /// `level`, as access number `access` found it, unless a later access was shown already.
    fn show(&mut self, level: bool, access: u64) {
        if access <= self.access {
            return;
        }
        self.access = access;
        if self.level != level {
            self.level = level;
            self.line.set_level(level);
        }
    }
}

/// How a device interrupts its VM, which decides its transport.
pub enum Signal<E: VmEnv> {
    /// A virtio-mmio window's level-triggered line.
    Line(E::Line),
    /// A virtio-pci function's MSI-X messages.
    Messages(MessageTarget<E::Arch>),
}

/// What every virtio device of a VM is built with.
pub struct SlotSetup<E: VmEnv> {
    pub vm: usize,
    pub name: &'static str,
    pub ram: E::Ram,
    pub signal: Signal<E>,
    pub log: Arc<GuestLogLimit>,
    /// Set when one of the VM's devices left work for later (the VM's next exit does it).
    pub work: Arc<AtomicBool>,
    /// Its window in the VM's virtio shadow page, if the VM has one (virtio-mmio only).
    pub shadow: Option<WindowPage>,
}

impl<D: VirtioDevice + AfterAccess, E: VmEnv> VirtioSlot<D, E> {
    pub fn new(setup: SlotSetup<E>, device: D, port: usize) -> Self {
        let SlotSetup { vm, name, ram, signal, log, work, shadow } = setup;
        let (device, line, messages, shadow) = match signal {
            Signal::Line(line) => {
                let device = VirtioMmio::new(device);
                let interrupt = device.interrupt_word();
                let shadow = shadow.map(|at| {
                    for (offset, word) in device.fixed_words() {
                        at.page.write(at.offset + offset as usize, &[word]);
                    }
                    let shadow = WindowShadow { at };
                    shadow.sync_changing(device.changing_words());
                    shadow.publish_status(&interrupt, interrupt.load());
                    shadow
                });
                let line = Mutex::new(ShownLevel { line, level: false, access: 0 });
                (Transport::Mmio(device), Some(line), None, shadow)
            }
            Signal::Messages(target) => (Transport::Pci(Box::new(VirtioPci::new(device))), None, Some(target), None),
        };
        let interrupt = device.interrupt_word();
        VirtioSlot {
            vm,
            name,
            log,
            pending: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
            work,
            device: Mutex::new(device),
            ram,
            line,
            messages,
            shut_down: AtomicBool::new(false),
            port,
            io: Once::new(),
            notified: AtomicU32::new(0),
            interrupt,
            shadow,
        }
    }

    /// From now on the side core `core` on CPU `cpu` serves the device: the guest's
    /// notifies only mark their queue and wake the core, which does the device's work
    /// (docs/virtio.md, "The side core"). Set before the VM's vCPUs start.
    pub fn serve_from(&self, core: &'static IoCore, cpu: usize) {
        self.io.call_once(|| (core, cpu));
        self.device.lock().set_polled(true);
    }

    /// Runs `f` on the device, then does what it left: the interrupt line follows the
    /// device's level, the incidents are logged, frames go to the switch. Nothing runs once
    /// the device is shut down.
    pub fn with_device<R>(&self, f: impl FnOnce(&mut VirtioMmio<D>, &E::Ram) -> R) -> Option<R> {
        self.access(|device, ram, live| live.then(|| f(device, ram)))
    }

    /// As `with_device`, but `f` runs on a shut-down device too (told so by its third
    /// argument, `live` false), for the bookkeeping that must go on then (a completion of
    /// the board's disk freeing its request); on a shut-down device it must not touch the
    /// VM's RAM, and nothing is done after it.
    fn access<R>(&self, f: impl FnOnce(&mut VirtioMmio<D>, &E::Ram, bool) -> R) -> R {
        self.access_transport(|device, ram, live| f(device, ram, live))
    }

    /// As `access`, with the transport's registers too.
    fn access_transport<R>(&self, f: impl FnOnce(&mut Transport<D>, &E::Ram, bool) -> R) -> R {
        let (result, state, incidents, frames, messages) = {
            let mut device = self.device.lock();
            if self.shut_down.load(Ordering::Acquire) {
                return f(&mut device, &self.ram, false);
            }
            let result = f(&mut device, &self.ram, true);
            self.waiting.store(device.device().waiting(), Ordering::Release);
            let pending = device.has_pending_work();
            self.pending.store(pending, Ordering::Release);
            // A side core's device goes on at the core's next pass, not at an exit.
            if pending && !device.is_polled() {
                self.work.store(true, Ordering::Release);
            }
            let frames = device.device_mut().take_frames();
            let state = device.interrupt_state();
            let incidents = device.has_incidents().then(|| device.take_incidents());
            // Under the device's lock, which a VM's destruction takes before its page goes
            // (`shut_down`): nothing writes the page after that.
            if let Some(shadow) = &self.shadow {
                shadow.sync_changing(device.changing_words());
                shadow.publish_status(&self.interrupt, state);
            }
            let messages = device.take_messages();
            (result, state, incidents, frames, messages)
        };
        if let Some(line) = &self.line {
            line.lock().show(state.status != 0, state.change);
        }
        if let Some(incidents) = incidents {
            self.log_incidents(incidents);
        }
        if let (Some(messages), Some(target)) = (messages, &self.messages) {
            self.send(target, &messages);
        }
        for frame in frames {
            E::forward_frame(self.port, &frame);
        }
        result
    }

    /// A register read by the guest. A read changes nothing of the device but its incident
    /// log (a legacy register, logged at once), so none of an access's after-work (work left,
    /// frames, the interrupt line) follows it. A shut-down device reads as zero.
    fn read_register(&self, offset: u64, width: AccessWidth) -> Result<u64, RegisterError> {
        let (value, incidents) = {
            let mut device = self.device.lock();
            if self.shut_down.load(Ordering::Acquire) {
                return Ok(0);
            }
            let value = match &mut *device {
                Transport::Mmio(m) => m.read(offset, width.bytes() as u8),
                Transport::Pci(_) => Err(RegisterError::NoRegister { offset }),
            };
            (value, device.has_incidents().then(|| device.take_incidents()))
        };
        if let Some(incidents) = incidents {
            self.log_incidents(incidents);
        }
        value
    }

    /// What the guest did wrong on the device, each a line under the VM's limit; logged
    /// after the device's lock is released. Reached only when the device logged something
    /// (`VirtioMmio::has_incidents`): taking and walking an empty log cost every register
    /// read 40 instructions (docs/performance.md, "Trapped MMIO accesses").
    #[cold]
    #[inline(never)]
    fn log_incidents(&self, incidents: Vec<vdev::virtio::incident::DeviceIncident>) {
        for incident in incidents {
            guest_line::<E::Arch, E::Board>(
                &self.log,
                format_args!("hypervisor: vm{} virtio-{}: {incident}", self.vm, self.name),
            );
        }
    }

    /// A virtio-pci function's messages, each a write of its data to its address
    /// (`MessageTarget`); one that names no doorbell of the VM, or that its ITS translates
    /// to no LPI, is dropped with a line.
    fn send(&self, target: &MessageTarget<E::Arch>, messages: &Messages) {
        for m in messages.iter() {
            match target.send(m) {
                Ok(()) => {}
                Err(Undelivered::NoDoorbell) => guest_line::<E::Arch, E::Board>(
                    &self.log,
                    format_args!(
                        "hypervisor: vm{} virtio-{}: an MSI-X message to {:#x} (data {:#x}) names no doorbell of \
                         the VM's GIC: dropped",
                        self.vm, self.name, m.address, m.data
                    ),
                ),
                Err(Undelivered::Untranslated(e)) => guest_line::<E::Arch, E::Board>(
                    &self.log,
                    format_args!(
                        "hypervisor: vm{} virtio-{}: an MSI-X message (EventID {:#x}) dropped: {e}",
                        self.vm, self.name, m.data
                    ),
                ),
            }
        }
    }

    /// Goes on with work the device left for later (a bounded notify), if it did. A side
    /// core's device goes on at the core's next pass, never on a vCPU's exit (which another
    /// device of the VM may send here): its work may wait for the board's devices.
    pub fn continue_work(&self) {
        if self.pending.load(Ordering::Acquire) && self.io.get().is_none() {
            let _ = self.with_device(|d, ram| d.continue_work(ram));
        }
    }

    /// The VM is being destroyed: once this returns, the device never touches its RAM.
    pub fn shut_down(&self) {
        let mut device = self.device.lock();
        device.device_mut().shut_down();
        self.shut_down.store(true, Ordering::Release);
    }

    /// Whether requests wait on its ring for room on the board's disk.
    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// After a VM reset: the device as at power-on, its line low.
    pub fn reset(&self) {
        self.access_transport(|d, _, live| {
            if live {
                d.reset()
            }
        });
    }
}

impl<K: BoardDisk, M: PhysicalRam, E: VmEnv> VirtioSlot<VirtioBlock<DiskSliceBackend<K, M>>, E> {
    /// The board's disk finished request `completion` of this device's: the backend takes
    /// it back (and starts a bounced request's next chunk), then the device finishes the
    /// request for the guest (its status, the used ring, its interrupt: `VirtioBlock::complete`)
    /// and takes the chains that waited for room. Under the device's lock alone: the board
    /// disk's lock was released when the completion was taken. A shut-down device only
    /// frees the request (its VM's RAM is not touched).
    pub fn disk_completed(&self, completion: DiskCompletion) {
        let DiskCompletion { tag, result, bounce, .. } = completion;
        self.access(|device, ram, live| {
            let finished = device.device_mut().backend_mut().completed(tag, result, bounce);
            if !live {
                return;
            }
            // A device the driver reset since does not run: nothing of it is finished.
            let _ = device.run(ram, |block, q| {
                if let Some((pending, result)) = finished {
                    block.complete(pending, result, q)?;
                }
                block.queue_notify(0, q)
            });
        });
    }

    /// Takes the chains that wait on its ring for room on the board's disk.
    pub fn retry(&self) {
        let _ = self.with_device(|device, ram| device.run(ram, |block, q| block.queue_notify(0, q)));
    }

    /// Its requests in flight on the board's disk.
    pub fn in_flight(&self) -> usize {
        self.device.lock().device().backend().in_flight()
    }
}

/// A side core's pass over the device, under its lock as any access (`access`: its
/// interrupt line, incidents and frames handled after the lock is released).
impl<D: VirtioDevice + AfterAccess + Send, E: VmEnv> Polled for VirtioSlot<D, E>
where
    E::Ram: Send + Sync,
{
    fn pass(&self) -> Found {
        let notified = self.notified.swap(0, Ordering::AcqRel);
        self.with_device(|device, ram| {
            for queue in (0..32u16).filter(|q| notified & (1 << q) != 0) {
                device.mark_notified(queue);
            }
            let work = device.poll(ram, true).active();
            Found { work, in_flight: device.device().busy() }
        })
        .unwrap_or_default()
    }

    fn enable_notifications(&self) -> bool {
        let pending = self.with_device(|device, ram| device.enable_notifications(ram)).unwrap_or(false);
        pending || self.notified.load(Ordering::Acquire) != 0
    }
}

/// The bus's error for a register error of an access of `width` (a data abort for the guest).
fn mmio_error(e: RegisterError, width: AccessWidth) -> MmioError {
    match e {
        RegisterError::NoRegister { offset } => MmioError::NoRegister { offset },
        RegisterError::BadWidth { offset, .. } => MmioError::BadWidth { offset, width },
        RegisterError::ReadOnly { offset } => MmioError::ReadOnly { offset },
        RegisterError::WriteOnly { offset } => MmioError::WriteOnly { offset },
    }
}

/// The MMIO window of a virtio device on the VM's bus.
pub struct Window<D: VirtioDevice, E: VmEnv>(pub Shared<D, E>);

impl<D: VirtioDevice + AfterAccess + Send, E: VmEnv> BusDevice for Window<D, E> {
    fn name(&self) -> &'static str {
        self.0.name
    }
    fn read(&self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        // A side core's device: InterruptStatus without the lock the core's pass may hold.
        // A bit is raised in the word before the line, so the handler the interrupt runs
        // sees the bits that raised it.
        if self.0.io.get().is_some() && offset == regs::INTERRUPT_STATUS && width == AccessWidth::Word {
            return Ok(u64::from(self.0.interrupt.load().status));
        }
        self.0.read_register(offset, width).map_err(|e| mmio_error(e, width))
    }
    fn write(&self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        // InterruptACK without the device's lock, whoever serves the device: one change of
        // the interrupt word, in its order with the bits the device raises (`InterruptWord`:
        // under the lock, on an exit or a side core's pass), written to the page and shown
        // on the line unless a later change was shown already. An acknowledgement changes
        // nothing else an access's after-work looks at (work left, frames, incidents).
        if offset == regs::INTERRUPT_ACK && width == AccessWidth::Word {
            // A vCPU's: the VM's vCPUs have stopped before its page goes.
            if !self.0.shut_down.load(Ordering::Acquire) {
                let state = self.0.interrupt.acknowledge(value as u32);
                if let Some(shadow) = &self.0.shadow {
                    shadow.publish_status(&self.0.interrupt, state);
                }
                if let Some(line) = &self.0.line {
                    line.lock().show(state.status != 0, state.change);
                }
            }
            return Ok(());
        }
        // A side core's device: a notify of one of its queues marks the queue and wakes the
        // core, taking no lock and running no device work (a bad queue index goes the
        // usual way, to be logged).
        if let Some(&(core, cpu)) = self.0.io.get() {
            if offset == regs::QUEUE_NOTIFY && width == AccessWidth::Word && value < 32 {
                self.0.notified.fetch_or(1 << value, Ordering::SeqCst);
                core.wake::<E::Arch>(cpu);
                return Ok(());
            }
        }
        // A shut-down device belongs to a VM whose vCPUs have stopped: no access reaches it.
        self.0
            .with_device(|d, ram| d.write(ram, offset, width.bytes() as u8, value))
            .unwrap_or(Ok(()))
            .map_err(|e| mmio_error(e, width))
    }
}

/// A virtio-pci function on the VM's PCI bus (`super::pci::PciBus`): its configuration
/// space and BAR0, each access under the device's lock with an access's after-work (a
/// configuration write may enable MSI-X with messages pending, a BAR write is a notify or
/// a driver's step). A side core's function takes a notify as a virtio-mmio window does:
/// the queue marked, the core woken, no lock taken. A shut-down function reads as zero and
/// ignores writes (its VM's vCPUs have stopped).
impl<D: VirtioDevice + AfterAccess + Send, E: VmEnv> PciFunction for VirtioSlot<D, E> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn config_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        let mut device = self.device.lock();
        match &mut *device {
            Transport::Pci(p) if !self.shut_down.load(Ordering::Acquire) => {
                p.config_read(offset, width.bytes() as u8).map(u64::from).map_err(|e| mmio_error(e, width))
            }
            _ => Ok(0),
        }
    }

    fn config_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.access_transport(|device, ram, live| match device {
            Transport::Pci(p) if live => p.config_write(ram, offset, width.bytes() as u8, value as u32),
            _ => Ok(()),
        })
        .map_err(|e| mmio_error(e, width))
    }

    fn bar0(&self) -> Option<u64> {
        match &*self.device.lock() {
            Transport::Pci(p) => p.bar0(),
            Transport::Mmio(_) => None,
        }
    }

    fn bar_read(&self, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        // A read of the ISR status acknowledges: an access, for the incidents it may log.
        self.access_transport(|device, _, live| match device {
            Transport::Pci(p) if live => p.bar_read(offset, width.bytes() as u8),
            _ => Ok(0),
        })
        .map_err(|e| mmio_error(e, width))
    }

    fn bar_write(&self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        if let Some(&(core, cpu)) = self.io.get() {
            if VirtioPci::<D>::is_notify(offset, width.bytes() as u8) && value < 32 {
                self.notified.fetch_or(1 << value, Ordering::SeqCst);
                core.wake::<E::Arch>(cpu);
                return Ok(());
            }
        }
        self.access_transport(|device, ram, live| match device {
            Transport::Pci(p) if live => p.bar_write(ram, offset, width.bytes() as u8, value),
            _ => Ok(()),
        })
        .map_err(|e| mmio_error(e, width))
    }
}

#[cfg(test)]
mod tests {
    use super::{ShownLevel, WindowPage, WindowShadow};
    use crate::fake::FakePage;
    use alloc::sync::Arc;
    use vdev::pl011::InterruptLine;
    use vdev::virtio::features::interrupt::USED_BUFFER;
    use vdev::virtio::transport::{regs::INTERRUPT_STATUS, InterruptWord};

    fn window(page: &Arc<FakePage>) -> WindowShadow {
        WindowShadow { at: WindowPage { page: page.clone(), offset: 0x400 } }
    }
    const STATUS_AT: usize = 0x400 + INTERRUPT_STATUS as usize;

    #[test]
    fn a_stale_change_that_reaches_the_page_last_does_not_stay_there() {
        let (page, word) = (FakePage::new(), InterruptWord::default());
        let shadow = window(&page);
        // The side core's pass raises the bit; before it writes the page, the guest
        // acknowledges on a vCPU and publishes first: the pass's write comes last, and is
        // stale.
        let raised = word.raise(USED_BUFFER);
        let acknowledged = word.acknowledge(USED_BUFFER);
        shadow.publish_status(&word, acknowledged);
        assert_eq!(page.word(STATUS_AT), 0);
        shadow.publish_status(&word, raised);
        assert_eq!(page.word(STATUS_AT), 0, "the page ends with the latest change's bits");
        assert_eq!(page.take_events(), ["write 0x460 1", "write 0x460 0"], "written stale, then again");
        // A change the page holds already is not written again.
        let again = word.acknowledge(USED_BUFFER);
        shadow.publish_status(&word, again);
        assert!(page.take_events().is_empty());
    }

    #[test]
    fn a_stale_acknowledgement_that_reaches_the_page_last_does_not_hide_a_completion() {
        let (page, word) = (FakePage::new(), InterruptWord::default());
        let shadow = window(&page);
        shadow.publish_status(&word, word.raise(USED_BUFFER));
        // The guest acknowledges; before it writes the page, the side core's pass raises the
        // bit for the next completion and publishes first.
        let acknowledged = word.acknowledge(USED_BUFFER);
        let raised = word.raise(USED_BUFFER);
        shadow.publish_status(&word, raised);
        shadow.publish_status(&word, acknowledged);
        assert_eq!(page.word(STATUS_AT), USED_BUFFER, "the completion's bit is what the guest reads");
    }

    #[derive(Default)]
    struct Levels(alloc::vec::Vec<bool>);
    impl InterruptLine for Levels {
        fn set_level(&mut self, high: bool) {
            self.0.push(high);
        }
    }

    #[test]
    fn the_line_shows_the_latest_access_whatever_order_they_reach_it_in() {
        let mut shown = ShownLevel { line: Levels::default(), level: false, access: 0 };
        // The guest read the interrupt status (access 1: low), then a frame was delivered
        // from another CPU (access 2: high), but access 2 reaches the line first: the line
        // stays high, or the frame would go unannounced.
        shown.show(true, 2);
        shown.show(false, 1);
        assert_eq!((shown.level, &shown.line.0[..]), (true, &[true][..]));
        // And the other way round: a stale high after a later low is not shown either.
        shown.show(false, 4);
        shown.show(true, 3);
        assert_eq!((shown.level, &shown.line.0[..]), (false, &[true, false][..]));
        // Accesses in order: each level change shown once.
        shown.show(true, 5);
        shown.show(true, 6);
        shown.show(false, 7);
        assert_eq!(&shown.line.0[..], &[true, false, true, false][..]);
    }
}
