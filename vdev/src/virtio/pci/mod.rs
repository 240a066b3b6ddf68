//! The virtio-pci transport, device side (virtio 1.2, 4.1): a PCI function with one memory
//! BAR holding the virtio structures and the MSI-X table, and MSI-X as its only interrupt.
//! It is a front end: a `VirtioMmio` core does everything transport-independent (feature
//! negotiation, status, queue set-up and validation, notifies, the side core's `poll`,
//! `run`, incidents), and this module translates PCI's registers to the core's and the
//! core's interrupts (`VirtioMmio::take_raised`) into MSI-X messages (`take_messages`).
//!
//! BAR0 is one 64-bit, non-prefetchable memory BAR (BAR0 + BAR1) of `BAR0_SIZE` bytes:
//!
//! | offset | length         | structure                      | accesses (4.1.3.1, 6.8.2)        |
//! |--------|----------------|--------------------------------|----------------------------------|
//! | 0x0000 | 0x38           | common cfg (4.1.4.3)           | each field at its width; 64-bit ring addresses also as two 32-bit halves |
//! | 0x1000 | 1              | ISR status (4.1.4.5)           | 1 byte; a read returns and clears it |
//! | 0x2000 | the device's (≤ 0x1000) | device cfg (4.1.4.6)  | as the device model allows       |
//! | 0x3000 | 2              | notify (4.1.4.4), multiplier 0 | 16-bit write of the queue index  |
//! | 0x3800 | 16 a vector    | MSI-X table (PCI 3.0, 6.8.2.6) | aligned 32 or 64 bits            |
//! | 0x3c00 | 8              | MSI-X PBA (PCI 3.0, 6.8.2.10)  | aligned 32 or 64 bits, read-only |
//!
//! Everything else in BAR0 is no register. The configuration space and its capability list
//! are in `header`; MSI-X in `msix`; the common cfg in `common_cfg`; `ecam` decodes the
//! ECAM window the hypervisor exposes the function through.
//!
//! Vectors: `num_queues + 1`, so a driver can give each queue its own vector and
//! configuration changes one more (Linux's first choice, `vp_find_vqs_msix`).

pub mod ecam;

mod common_cfg;
mod header;
mod msix;

pub use common_cfg::field as common_field;
pub use header::{cap, class_code, command, reg, DEVICE_ID_BASE, SUBSYSTEM_ID, SUBSYSTEM_VENDOR_ID, VENDOR_ID};
pub use msix::{Message, Messages};

use crate::virtio::device::VirtioDevice;
use crate::virtio::memory::GuestMemory;
use crate::virtio::transport::{config_error, regs, RegisterError, VirtioMmio, MAX_QUEUES};

/// Bytes of BAR0: a power of two, so the BAR is naturally aligned (PCI 3.0, 6.2.5.1).
pub const BAR0_SIZE: u64 = 0x4000;
/// "No MSI-X vector" for config_msix_vector and queue_msix_vector (virtio 1.2, 4.1.5.1.2).
pub const NO_VECTOR: u16 = 0xffff;
/// The most vectors a function has: one a queue and one for configuration changes.
pub const MAX_VECTORS: usize = MAX_QUEUES + 1;
/// Bytes of one function's configuration space (PCIe ECAM).
pub const CONFIG_SPACE_SIZE: u64 = 0x1000;

/// Where each structure lives in BAR0 (the table above).
pub mod layout {
    pub const COMMON_CFG: u64 = 0x0000;
    pub const COMMON_CFG_LEN: u64 = super::common_cfg::field::END;
    pub const ISR: u64 = 0x1000;
    pub const DEVICE_CFG: u64 = 0x2000;
    pub const DEVICE_CFG_MAX: u64 = 0x1000;
    pub const NOTIFY: u64 = 0x3000;
    pub const NOTIFY_LEN: u64 = 2;
    pub const MSIX_TABLE: u64 = 0x3800;
    pub const MSIX_PBA: u64 = 0x3c00;
    pub const MSIX_PBA_LEN: u64 = 8;
}

/// One virtio device behind the virtio-pci transport.
pub struct VirtioPci<D: VirtioDevice> {
    core: VirtioMmio<D>,
    header: header::Header,
    identity: header::Identity,
    common: common_cfg::CommonCfg,
    msix: msix::Msix,
    /// Messages sent and not yet taken (`take_messages`).
    outbox: Messages,
}

impl<D: VirtioDevice> VirtioPci<D> {
    pub fn new(device: D) -> Self {
        let core = VirtioMmio::new(device);
        let identity = header::Identity {
            virtio_device_id: core.device.device_id(),
            device_cfg_len: device_cfg_len(&core.device),
        };
        // The core keeps at most MAX_QUEUES queues.
        let vectors = core.queues.len() as u16 + 1;
        VirtioPci {
            core,
            header: header::Header::default(),
            identity,
            common: common_cfg::CommonCfg::default(),
            msix: msix::Msix::new(vectors),
            outbox: Messages::default(),
        }
    }

    pub fn core(&self) -> &VirtioMmio<D> {
        &self.core
    }

    pub fn core_mut(&mut self) -> &mut VirtioMmio<D> {
        &mut self.core
    }

    /// MSI-X Table Size: the vectors the function has.
    pub fn vectors(&self) -> u16 {
        self.msix.size()
    }

    /// A read of the PCI configuration space (`offset` < 4096). Accesses of 1, 2 or 4 bytes,
    /// naturally aligned, never fail: what is not implemented reads 0 (PCI 3.0, 6.1).
    pub fn config_read(&mut self, offset: u64, width: u8) -> Result<u32, RegisterError> {
        check_config_access(offset, width)?;
        self.collect();
        let reg = (offset & !3) as u16;
        if reg == cap::PCI_CFG_DATA {
            self.pci_cfg_read();
        }
        let dword = self.header.read_dword(self.identity, reg, self.msix.message_control());
        Ok((dword >> (8 * (offset & 3))) & width_mask(width))
    }

    /// A write of the PCI configuration space. Aligned writes of 1, 2 or 4 bytes never fail:
    /// read-only and reserved bits ignore them (PCI 3.0, 6.1). A write to pci_cfg_data is a
    /// BAR0 write (virtio 1.2, 4.1.4.9), hence `mem` (a notify runs the device).
    pub fn config_write(
        &mut self,
        mem: &dyn GuestMemory,
        offset: u64,
        width: u8,
        value: u32,
    ) -> Result<(), RegisterError> {
        check_config_access(offset, width)?;
        self.collect();
        let reg = (offset & !3) as u16;
        let shift = 8 * (offset & 3);
        let mask = width_mask(width) << shift;
        let value = (value << shift) & mask;
        if reg == cap::MSIX {
            // Message Control is the upper half of the capability's first dword.
            if mask >> 16 != 0 {
                let old = u32::from(self.msix.message_control()) << 16;
                let new = (old & !mask) | value;
                self.msix.write_message_control((new >> 16) as u16);
            }
        } else {
            self.header.write_dword(reg, value, mask);
        }
        if reg == cap::PCI_CFG_DATA {
            self.pci_cfg_write(mem);
        }
        // MSI-X enabled, the Function Mask cleared or Bus Master enabled: what was pending
        // and is no longer masked goes now (PCI 3.0, 6.8.2.9).
        self.msix.release(self.header.bus_master(), &mut self.outbox);
        Ok(())
    }

    /// BAR0's guest-physical base while Memory Space is enabled and the BAR holds an address
    /// (not while being sized: all ones written, PCI 3.0 6.2.5.1).
    pub fn bar0(&self) -> Option<u64> {
        (self.header.memory_space() && !self.header.bar0_sizing()).then_some(self.header.bar0)
    }

    /// A read of `width` bytes at `offset` inside BAR0 (virtio 1.2, 4.1.3.1; the table in
    /// the module comment). A refused access changes nothing.
    pub fn bar_read(&mut self, offset: u64, width: u8) -> Result<u64, RegisterError> {
        check_bar_access(offset, width)?;
        self.collect();
        match offset {
            o if o < layout::COMMON_CFG_LEN => self.common_read(o, width),
            layout::ISR => {
                if width != 1 {
                    return Err(RegisterError::BadWidth { offset, width });
                }
                Ok(u64::from(self.read_isr()))
            }
            o if (layout::DEVICE_CFG..layout::DEVICE_CFG + layout::DEVICE_CFG_MAX).contains(&o) => {
                self.core.device.read_config(o - layout::DEVICE_CFG, width).map_err(|e| config_error(e, offset, width))
            }
            // Notifies are writes; a read of the register returns 0, as QEMU's does.
            layout::NOTIFY if width == 2 => Ok(0),
            o if (layout::MSIX_TABLE..layout::MSIX_PBA + layout::MSIX_PBA_LEN).contains(&o) => self.msix_read(o, width),
            _ => Err(bar_error(offset, width)),
        }
    }

    /// A write of `width` bytes at `offset` inside BAR0. A notify processes its queue at
    /// once against `mem` (unless a side core polls the device).
    pub fn bar_write(
        &mut self,
        mem: &dyn GuestMemory,
        offset: u64,
        width: u8,
        value: u64,
    ) -> Result<(), RegisterError> {
        check_bar_access(offset, width)?;
        self.collect();
        match offset {
            o if o < layout::COMMON_CFG_LEN => self.common_write(mem, o, width, value)?,
            layout::ISR => return Err(RegisterError::ReadOnly { offset }),
            o if (layout::DEVICE_CFG..layout::DEVICE_CFG + layout::DEVICE_CFG_MAX).contains(&o) => {
                let field = o - layout::DEVICE_CFG;
                // The read decides whether the field exists and the width fits it.
                self.core.device.read_config(field, width).map_err(|e| config_error(e, offset, width))?;
                self.core.device.write_config(field, width, value).map_err(|e| config_error(e, offset, width))?;
            }
            // Without VIRTIO_F_NOTIFICATION_DATA the driver writes the queue index, 16 bits
            // (4.1.4.4, 4.1.5.2).
            layout::NOTIFY if width == 2 => {
                self.core.write(mem, regs::QUEUE_NOTIFY, 4, value & 0xffff)?;
            }
            o if (layout::MSIX_TABLE..layout::MSIX_PBA + layout::MSIX_PBA_LEN).contains(&o) => {
                self.msix_write(o, width, value)?
            }
            _ => return Err(bar_error(offset, width)),
        }
        // The access may have completed requests (a notify) or raised nothing at all.
        self.collect();
        Ok(())
    }

    /// Whether (offset, width) in BAR0 is the notify register: the test a side core's fast
    /// path makes before it marks the queue (`VirtioMmio::mark_notified`) without running
    /// the device.
    pub fn is_notify(offset: u64, width: u8) -> bool {
        offset == layout::NOTIFY && width == 2
    }

    /// The MSI-X messages the device's interrupts since the last call ask for (from
    /// `core_mut().take_raised()`, the vectors, the masks and the PBA): the caller writes
    /// each `data` to its `address` after releasing the device's lock. Call it after every
    /// access, `poll`, `run` or completion. Never more than `vectors()` messages.
    pub fn take_messages(&mut self) -> Messages {
        self.collect();
        core::mem::take(&mut self.outbox)
    }

    /// Power-on reset (VM reboot): the configuration space and MSI-X state as at creation,
    /// and the core's `reset`.
    pub fn reset(&mut self) {
        self.core.reset();
        self.header = header::Header::default();
        self.common = common_cfg::CommonCfg::default();
        self.msix = msix::Msix::new(self.msix.size());
        self.outbox = Messages::default();
    }

    /// The core's interrupts since the last look, each to its vector (virtio 1.2, 4.1.5.3
    /// and 4.1.5.4): a message now, a pending bit, or nothing.
    fn collect(&mut self) {
        let raised = self.core.take_raised();
        if raised.is_empty() {
            return;
        }
        let bus_master = self.header.bus_master();
        let mut queues = raised.queues;
        while queues != 0 {
            let queue = queues.trailing_zeros() as usize;
            queues &= queues - 1;
            let vector = self.common.queue_msix_vector.get(queue).copied().unwrap_or(NO_VECTOR);
            self.signal(vector, bus_master);
        }
        if raised.config {
            self.signal(self.common.config_msix_vector, bus_master);
        }
    }

    fn signal(&mut self, vector: u16, bus_master: bool) {
        if let Some(message) = self.msix.signal(vector, bus_master) {
            self.outbox.push(vector, message);
        }
    }

    /// ISR status (4.1.4.5): "the device MUST reset ISR status to 0 on driver read". Bits
    /// raised between the load and the acknowledgement stay raised (`InterruptWord`).
    fn read_isr(&mut self) -> u8 {
        let word = self.core.interrupt_ref();
        let status = word.load().status;
        if status != 0 {
            word.acknowledge(status);
        }
        status as u8
    }

    fn msix_read(&self, offset: u64, width: u8) -> Result<u64, RegisterError> {
        let dwords = self.msix_dwords(offset, width)?;
        let read = |d: u64| {
            if offset >= layout::MSIX_PBA {
                Some(self.msix.pba_dword(d))
            } else {
                self.msix.table_dword(d)
            }
        };
        let low = read(dwords.0).ok_or(RegisterError::NoRegister { offset })?;
        let high = match dwords.1 {
            Some(d) => read(d).ok_or(RegisterError::NoRegister { offset })?,
            None => 0,
        };
        Ok(u64::from(low) | (u64::from(high) << 32))
    }

    fn msix_write(&mut self, offset: u64, width: u8, value: u64) -> Result<(), RegisterError> {
        let dwords = self.msix_dwords(offset, width)?;
        if offset >= layout::MSIX_PBA {
            // Pending bits are the function's; software never writes them (PCI 3.0,
            // 6.8.2.10), and a write here changes nothing.
            return Ok(());
        }
        // Check both halves exist before changing either.
        if dwords.1.is_some_and(|d| self.msix.table_dword(d).is_none()) || self.msix.table_dword(dwords.0).is_none() {
            return Err(RegisterError::NoRegister { offset });
        }
        self.msix.write_table_dword(dwords.0, value as u32);
        if let Some(d) = dwords.1 {
            self.msix.write_table_dword(d, (value >> 32) as u32);
        }
        // An entry unmasked with its pending bit set sends the message (6.8.2.9).
        self.msix.release(self.header.bus_master(), &mut self.outbox);
        Ok(())
    }

    /// The dword indices (from the table's or the PBA's start) an MSI-X access covers: 32 or
    /// 64 bits, aligned (PCI 3.0, 6.8.2: "DWORD or aligned QWORD").
    fn msix_dwords(&self, offset: u64, width: u8) -> Result<(u64, Option<u64>), RegisterError> {
        let base = if offset >= layout::MSIX_PBA { layout::MSIX_PBA } else { layout::MSIX_TABLE };
        let first = (offset - base) / 4;
        match width {
            4 => Ok((first, None)),
            8 => Ok((first, Some(first + 1))),
            _ => Err(RegisterError::BadWidth { offset, width }),
        }
    }

    /// The window's BAR access, if cap.bar, cap.offset and cap.length name one the driver
    /// may make (virtio 1.2, 4.1.4.9): BAR0, 1, 2 or 4 bytes, aligned, inside the BAR.
    fn pci_cfg_access(&self) -> Option<(u64, u8)> {
        let h = &self.header;
        let width = u8::try_from(h.cfg_length).ok().filter(|w| matches!(w, 1 | 2 | 4))?;
        let offset = u64::from(h.cfg_offset);
        (h.cfg_bar == 0 && offset.is_multiple_of(u64::from(width)) && offset + u64::from(width) <= BAR0_SIZE)
            .then_some((offset, width))
    }

    /// A read of pci_cfg_data: the BAR read it names fills its first cap.length bytes. An
    /// access the window does not name, or the BAR refuses, leaves the data as it was: a
    /// configuration access never faults.
    fn pci_cfg_read(&mut self) {
        let Some((offset, width)) = self.pci_cfg_access() else { return };
        if let Ok(value) = self.bar_read(offset, width) {
            let mask = width_mask(width);
            self.header.cfg_data = (self.header.cfg_data & !mask) | (value as u32 & mask);
        }
    }

    /// A write of pci_cfg_data: its first cap.length bytes are written to the BAR.
    fn pci_cfg_write(&mut self, mem: &dyn GuestMemory) {
        let Some((offset, width)) = self.pci_cfg_access() else { return };
        let value = self.header.cfg_data & width_mask(width);
        let _refused = self.bar_write(mem, offset, width, u64::from(value));
    }
}

/// The length of a device's configuration space: up to its last byte that reads. Looked
/// at once, at creation; 0 for a device without one.
fn device_cfg_len<D: VirtioDevice>(device: &D) -> u32 {
    let last = (0..layout::DEVICE_CFG_MAX).rev().find(|&o| device.read_config(o, 1).is_ok());
    // The capability's length, rounded up to whole dwords as the offset is (4.1.4.6).
    last.map_or(0, |o| ((o as u32) + 4) & !3)
}

fn width_mask(width: u8) -> u32 {
    match width {
        1 => 0xff,
        2 => 0xffff,
        _ => u32::MAX,
    }
}

/// 1, 2 or 4 bytes, naturally aligned, inside the 4 KiB space; anything else is an access
/// PCI does not have, which the caller turns into a data abort.
fn check_config_access(offset: u64, width: u8) -> Result<(), RegisterError> {
    if offset >= CONFIG_SPACE_SIZE {
        return Err(RegisterError::NoRegister { offset });
    }
    if !matches!(width, 1 | 2 | 4) || !offset.is_multiple_of(u64::from(width)) {
        return Err(RegisterError::BadWidth { offset, width });
    }
    Ok(())
}

/// 1, 2, 4 or 8 bytes, naturally aligned, inside BAR0: every register of BAR0 takes an
/// aligned access of its own width (4.1.3.1), so a misaligned one is refused up front.
fn check_bar_access(offset: u64, width: u8) -> Result<(), RegisterError> {
    if offset >= BAR0_SIZE {
        return Err(RegisterError::NoRegister { offset });
    }
    if !matches!(width, 1 | 2 | 4 | 8) || !offset.is_multiple_of(u64::from(width)) {
        return Err(RegisterError::BadWidth { offset, width });
    }
    Ok(())
}

/// The error for an access at no register, or at the notify register with the wrong width.
fn bar_error(offset: u64, width: u8) -> RegisterError {
    if offset == layout::NOTIFY {
        RegisterError::BadWidth { offset, width }
    } else {
        RegisterError::NoRegister { offset }
    }
}
