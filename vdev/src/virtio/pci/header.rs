//! The function's PCI configuration space: the type 0 header (PCI Local Bus 3.0, 6.1 and
//! 6.2), BAR0 with its sizing (6.2.5.1), and the capability list (6.7) — the virtio
//! structure capabilities (virtio 1.2, 4.1.4) and MSI-X (PCI Local Bus 3.0, 6.8.2). Reads
//! are rendered from the state on each access; writes change only the few writable fields.
//!
//! | offset | capability                              | length |
//! |--------|-----------------------------------------|--------|
//! | 0x40   | virtio common cfg (cfg_type 1)          | 16     |
//! | 0x50   | virtio notify cfg (2) + multiplier      | 20     |
//! | 0x64   | virtio ISR cfg (3)                      | 16     |
//! | 0x74   | virtio device cfg (4), if the device has one | 16 |
//! | 0x84   | virtio PCI cfg access (5) + pci_cfg_data | 20    |
//! | 0x98   | MSI-X (id 0x11)                         | 12     |

use super::{layout, BAR0_SIZE};

/// Vendor ID every virtio device has (virtio 1.2, 4.1.2.1).
pub const VENDOR_ID: u16 = 0x1af4;
/// Device ID = 0x1040 + virtio device ID: a non-transitional device (4.1.2.1).
pub const DEVICE_ID_BASE: u16 = 0x1040;
/// "Non-transitional devices SHOULD have a PCI Revision ID of 1 or higher" (4.1.2.1).
pub const REVISION: u8 = 1;
/// Subsystem Vendor ID: Red Hat's, as QEMU presents (4.1.2.1 leaves it informational).
pub const SUBSYSTEM_VENDOR_ID: u16 = 0x1af4;
/// "Non-transitional devices SHOULD have a PCI Subsystem Device ID of 0x40 or higher"
/// (4.1.2.1), which keeps a legacy driver (it matches 0x1000-0x103f with subsystem IDs 1-39)
/// away.
pub const SUBSYSTEM_ID: u16 = 0x40;

/// Command register bits (PCI Local Bus 3.0, 6.2.2).
pub mod command {
    pub const MEMORY_SPACE: u16 = 1 << 1;
    pub const BUS_MASTER: u16 = 1 << 2;
    pub const INTX_DISABLE: u16 = 1 << 10;
    /// The only writable ones: no I/O BAR, no parity or SERR reporting, no MWI.
    pub const WRITABLE: u16 = MEMORY_SPACE | BUS_MASTER | INTX_DISABLE;
}

/// Status bit 4: the function has a capability list (6.2.3).
pub const STATUS_CAPABILITIES_LIST: u16 = 1 << 4;

/// Header registers (dword offsets, 6.1).
pub mod reg {
    pub const ID: u16 = 0x00;
    pub const COMMAND_STATUS: u16 = 0x04;
    pub const CLASS_REVISION: u16 = 0x08;
    pub const BAR0: u16 = 0x10;
    pub const BAR1: u16 = 0x14;
    pub const SUBSYSTEM: u16 = 0x2c;
    pub const EXPANSION_ROM: u16 = 0x30;
    pub const CAPABILITIES_POINTER: u16 = 0x34;
    pub const INTERRUPT: u16 = 0x3c;
}

/// Capability offsets (the table above).
pub mod cap {
    pub const COMMON: u16 = 0x40;
    pub const NOTIFY: u16 = 0x50;
    pub const ISR: u16 = 0x64;
    pub const DEVICE: u16 = 0x74;
    pub const PCI_CFG: u16 = 0x84;
    pub const MSIX: u16 = 0x98;
    /// The PCI cfg access capability's writable fields (virtio 1.2, 4.1.4.9).
    pub const PCI_CFG_BAR: u16 = PCI_CFG + 4;
    pub const PCI_CFG_OFFSET: u16 = PCI_CFG + 8;
    pub const PCI_CFG_LENGTH: u16 = PCI_CFG + 12;
    pub const PCI_CFG_DATA: u16 = PCI_CFG + 16;
}

/// Capability IDs (PCI Local Bus 3.0, appendix H) and virtio cfg_types (virtio 1.2, 4.1.4).
const CAP_ID_VENDOR: u32 = 0x09;
const CAP_ID_MSIX: u32 = 0x11;
const VIRTIO_PCI_CAP_COMMON_CFG: u32 = 1;
const VIRTIO_PCI_CAP_NOTIFY_CFG: u32 = 2;
const VIRTIO_PCI_CAP_ISR_CFG: u32 = 3;
const VIRTIO_PCI_CAP_DEVICE_CFG: u32 = 4;
const VIRTIO_PCI_CAP_PCI_CFG: u32 = 5;

/// BAR0's low dword type bits: memory space (bit 0 = 0), 64-bit (bits 2:1 = 10b), not
/// prefetchable (bit 3 = 0) (6.2.5.1).
const BAR0_TYPE_64: u32 = 0b100;
/// The address bits of BAR0: the BAR is naturally aligned to its size (6.2.5.1).
pub const BAR0_ADDRESS_MASK: u64 = !(BAR0_SIZE - 1);

/// The class code a guest sees for a virtio device ID (base class, sub-class, interface).
/// Block is "mass storage, other" (0x0180): it is no SCSI controller, which QEMU's historic
/// 0x0100 claims. Network "Ethernet" (0x0200), console "simple communication, other"
/// (0x0780) as QEMU; anything else "no defined class" (0xff).
pub fn class_code(virtio_device_id: u32) -> u32 {
    match virtio_device_id {
        1 => 0x02_00_00,
        2 => 0x01_80_00,
        3 => 0x07_80_00,
        _ => 0xff_00_00,
    }
}

/// The writable part of the configuration space.
#[derive(Clone, Debug, Default)]
pub(super) struct Header {
    pub(super) command: u16,
    /// BAR0 and BAR1 as one 64-bit address; only the bits of `BAR0_ADDRESS_MASK` exist.
    pub(super) bar0: u64,
    /// Interrupt Line: a scratch byte for software (6.2.4), read/write even without a pin.
    pub(super) interrupt_line: u8,
    /// The PCI cfg access capability's window (virtio 1.2, 4.1.4.9).
    pub(super) cfg_bar: u8,
    pub(super) cfg_offset: u32,
    pub(super) cfg_length: u32,
    pub(super) cfg_data: u32,
}

/// What the read-only part of the configuration space depends on, fixed at creation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Identity {
    pub(super) virtio_device_id: u32,
    /// Length of the device-specific configuration (0: no device cfg capability).
    pub(super) device_cfg_len: u32,
}

impl Header {
    pub(super) fn memory_space(&self) -> bool {
        self.command & command::MEMORY_SPACE != 0
    }

    pub(super) fn bus_master(&self) -> bool {
        self.command & command::BUS_MASTER != 0
    }

    /// A BAR being sized holds all ones in its address bits (6.2.5.1): not an address.
    pub(super) fn bar0_sizing(&self) -> bool {
        self.bar0 as u32 == BAR0_ADDRESS_MASK as u32 || (self.bar0 >> 32) as u32 == u32::MAX
    }

    /// A write of the bits `mask` of `value` to header dword `reg` (the registers that are
    /// not here are read-only, or belong to the MSI-X or PCI cfg capability).
    pub(super) fn write_dword(&mut self, reg: u16, value: u32, mask: u32) {
        let merge = |old: u32, writable: u32| (old & !(mask & writable)) | (value & mask & writable);
        match reg {
            reg::COMMAND_STATUS => {
                // Status (the upper half) has no bit software may set or clear here: its
                // RW1C error bits are never set by this device.
                self.command = merge(u32::from(self.command), u32::from(command::WRITABLE)) as u16;
            }
            reg::BAR0 => {
                let low = merge(self.bar0 as u32, BAR0_ADDRESS_MASK as u32);
                self.bar0 = (self.bar0 & !0xffff_ffff) | u64::from(low);
            }
            reg::BAR1 => {
                let high = merge((self.bar0 >> 32) as u32, u32::MAX);
                self.bar0 = (self.bar0 & 0xffff_ffff) | (u64::from(high) << 32);
            }
            reg::INTERRUPT => self.interrupt_line = merge(u32::from(self.interrupt_line), 0xff) as u8,
            cap::PCI_CFG_BAR => self.cfg_bar = merge(u32::from(self.cfg_bar), 0xff) as u8,
            cap::PCI_CFG_OFFSET => self.cfg_offset = merge(self.cfg_offset, u32::MAX),
            cap::PCI_CFG_LENGTH => self.cfg_length = merge(self.cfg_length, u32::MAX),
            cap::PCI_CFG_DATA => self.cfg_data = merge(self.cfg_data, u32::MAX),
            _ => {}
        }
    }

    /// Header dword `reg` (a multiple of 4 below 4096); `msix_control` is the MSI-X Message
    /// Control the capability shows. Anything not implemented reads 0 (6.1): the other
    /// BARs, the expansion ROM BAR, Cardbus CIS, BIST, the extended configuration space.
    pub(super) fn read_dword(&self, id: Identity, reg: u16, msix_control: u16) -> u32 {
        let device_id = DEVICE_ID_BASE.wrapping_add(id.virtio_device_id as u16);
        let has_device_cfg = id.device_cfg_len != 0;
        match reg {
            reg::ID => u32::from(VENDOR_ID) | (u32::from(device_id) << 16),
            reg::COMMAND_STATUS => u32::from(self.command) | (u32::from(STATUS_CAPABILITIES_LIST) << 16),
            reg::CLASS_REVISION => u32::from(REVISION) | (class_code(id.virtio_device_id) << 8),
            // Cache Line Size, Latency Timer, Header Type 0 (single function), BIST: all 0.
            reg::BAR0 => self.bar0 as u32 | BAR0_TYPE_64,
            reg::BAR1 => (self.bar0 >> 32) as u32,
            reg::SUBSYSTEM => u32::from(SUBSYSTEM_VENDOR_ID) | (u32::from(SUBSYSTEM_ID) << 16),
            reg::EXPANSION_ROM => 0,
            reg::CAPABILITIES_POINTER => u32::from(cap::COMMON),
            // Interrupt Pin 0: no INTx (6.2.4); MSI-X is the only interrupt.
            reg::INTERRUPT => u32::from(self.interrupt_line),

            // struct virtio_pci_cap (virtio 1.2, 4.1.4): cap_vndr, cap_next, cap_len,
            // cfg_type; bar, id, padding; offset; length.
            cap::COMMON => vendor_cap(cap::NOTIFY, 16, VIRTIO_PCI_CAP_COMMON_CFG),
            r if r == cap::COMMON + 8 => layout::COMMON_CFG as u32,
            r if r == cap::COMMON + 12 => layout::COMMON_CFG_LEN as u32,

            // The notify capability adds notify_off_multiplier (4.1.4.4): 0, every queue
            // notifies at the region's start, its index as the value.
            cap::NOTIFY => vendor_cap(cap::ISR, 20, VIRTIO_PCI_CAP_NOTIFY_CFG),
            r if r == cap::NOTIFY + 8 => layout::NOTIFY as u32,
            r if r == cap::NOTIFY + 12 => layout::NOTIFY_LEN as u32,
            r if r == cap::NOTIFY + 16 => 0,

            cap::ISR => {
                let next = if has_device_cfg { cap::DEVICE } else { cap::PCI_CFG };
                vendor_cap(next, 16, VIRTIO_PCI_CAP_ISR_CFG)
            }
            r if r == cap::ISR + 8 => layout::ISR as u32,
            r if r == cap::ISR + 12 => 1,

            // Present only for a device with a configuration space (4.1.4.6); else 0x74..0x84
            // is outside the list and reads 0.
            cap::DEVICE if has_device_cfg => vendor_cap(cap::PCI_CFG, 16, VIRTIO_PCI_CAP_DEVICE_CFG),
            r if r == cap::DEVICE + 8 && has_device_cfg => layout::DEVICE_CFG as u32,
            r if r == cap::DEVICE + 12 && has_device_cfg => id.device_cfg_len,

            // The PCI cfg access capability (4.1.4.9): its bar, offset and length are the
            // driver's to write, and pci_cfg_data is a window onto the BAR they name.
            cap::PCI_CFG => vendor_cap(cap::MSIX, 20, VIRTIO_PCI_CAP_PCI_CFG),
            cap::PCI_CFG_BAR => u32::from(self.cfg_bar),
            cap::PCI_CFG_OFFSET => self.cfg_offset,
            cap::PCI_CFG_LENGTH => self.cfg_length,
            cap::PCI_CFG_DATA => self.cfg_data,

            // MSI-X capability (PCI Local Bus 3.0, 6.8.2.1-6.8.2.5): the last in the list;
            // table and PBA in BAR0 (BIR 0).
            cap::MSIX => CAP_ID_MSIX | (u32::from(msix_control) << 16),
            r if r == cap::MSIX + 4 => layout::MSIX_TABLE as u32,
            r if r == cap::MSIX + 8 => layout::MSIX_PBA as u32,
            _ => 0,
        }
    }
}

/// The first dword of a virtio structure capability; its bar (byte 4) is 0, BAR0, as the
/// zero of the next dword says.
fn vendor_cap(next: u16, len: u32, cfg_type: u32) -> u32 {
    CAP_ID_VENDOR | (u32::from(next) << 8) | (len << 16) | (cfg_type << 24)
}
