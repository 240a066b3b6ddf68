//! The guest's physical address map and interrupt numbers, the same for every VM and every
//! architecture (docs/architecture.md, "The guest's view"): shaped like QEMU's `virt`
//! board, so a kernel built for it finds its devices where it expects them. The guest's
//! device tree (`guest_fdt`) describes exactly this.

use crate::bundle::VmDevices;

/// The VM's RAM starts here.
pub const RAM_IPA: u64 = 0x4000_0000;
/// The GIC distributor (GICD), 64 KiB (`guest_fdt::GICD_SIZE`).
pub const GICD_IPA: u64 = 0x0800_0000;
/// GICv2: the CPU interface (GICC), where the board's virtual CPU interface is mapped.
pub const GICC_IPA: u64 = 0x0801_0000;
/// GICv3: the redistributors (GICR), one 128 KiB frame pair per vCPU in vCPU order; those of
/// the most vCPUs a VM may have end below the UART.
pub const GICR_IPA: u64 = 0x080a_0000;
/// GICv2 with the PCI transport: the GICv2m MSI frame its devices' MSIs go to (where QEMU's
/// `virt` has its own), one page.
pub const GICV2M_IPA: u64 = 0x0802_0000;
pub const GICV2M_SIZE: u64 = 0x1000;
/// GICv3 with the PCI transport: the ITS its devices' MSIs go to (where QEMU's `virt` has
/// its own), a control frame and a translation frame of 64 KiB each.
pub const ITS_IPA: u64 = 0x0808_0000;
pub const ITS_SIZE: u64 = 0x2_0000;
/// The PL011 console UART, one page.
pub const UART_IPA: u64 = 0x0900_0000;
pub const UART_SIZE: u64 = 0x1000;
/// The UART's SPI (INTID 33).
pub const UART_SPI: u32 = 1;
/// SPIs each VM's GIC has: INTIDs 32..127 (the UART is SPI 1, virtio from SPI 16).
pub const SPIS: usize = 96;
/// The virtual timer's PPI, the same INTID for the guest and the board.
pub const VTIMER_PPI: u32 = 27;
/// The guest's emulated devices (the GIC's windows, the UART, the virtio page) lie in
/// `EMULATED_BASE..EMULATED_END`: an identity-mapped VM's RAM, which shares the IPA space,
/// must miss it (docs/capability-model.md, D2).
pub const EMULATED_BASE: u64 = GICD_IPA;
pub const EMULATED_END: u64 = VIRTIO_IPA + VIRTIO_PAGE;
/// With the PCI transport, the host bridge's windows too: `PCI_WINDOWS_BASE..PCI_WINDOWS_END`.
pub const PCI_WINDOWS_BASE: u64 = PCI_ECAM_IPA;
pub const PCI_WINDOWS_END: u64 = PCI_MMIO_IPA + PCI_MMIO_SIZE;
/// IPA space of every VM: 40 bits (1 TiB), within what every supported CPU's PARange allows.
pub const IPA_BITS: u8 = 40;

/// virtio-mmio transports: one 0x200-byte window and SPI each, in one page from
/// `VIRTIO_IPA`, in a fixed order so a device keeps its address whatever else the VM has.
pub const VIRTIO_IPA: u64 = 0x0a00_0000;
pub const VIRTIO_SPI: u32 = 16;
pub const VIRTIO_WINDOW: u64 = 0x200;
/// The page of the transports: stage 2 traps by page, so this is the VM's capability.
pub const VIRTIO_PAGE: u64 = 0x1000;

/// virtio over PCI (`virtio_transport = "pci"`, docs/virtio.md, "The virtio-pci
/// transport"): the host bridge's configuration space, ECAM (one 4 KiB space per function
/// at bus << 20 | device << 15 | function << 12), bus 0 only. A device is function 0 of the
/// device number its `VirtioSlot` gives.
pub const PCI_ECAM_IPA: u64 = 0x0a10_0000;
pub const PCI_ECAM_SIZE: u64 = 0x10_0000;
/// The 32-bit memory window the guest places the functions' BARs in.
pub const PCI_MMIO_IPA: u64 = 0x0a20_0000;
pub const PCI_MMIO_SIZE: u64 = 0x10_0000;
/// The SPIs the GIC's doorbell takes messages for (a GICv3's GICD_SETSPI_NSR, the guest's
/// `mbi-ranges`; a GICv2's GICv2m frame): INTIDs 96 to 127, the last 32 of the VM's SPIs,
/// which nothing else of the VM's own uses.
pub const MBI_FIRST_INTID: u32 = 96;
pub const MBI_COUNT: u32 = 32;

/// A virtio transport's place in the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioSlot {
    Disk = 0,
    Nic = 1,
    Console = 2,
}

impl VirtioSlot {
    /// The transports a VM has: its console always, a disk and a NIC if its manifest says so.
    pub fn of(devices: &VmDevices) -> impl Iterator<Item = VirtioSlot> {
        [
            devices.disk.is_some().then_some(VirtioSlot::Disk),
            devices.network.is_some().then_some(VirtioSlot::Nic),
            Some(VirtioSlot::Console),
        ]
        .into_iter()
        .flatten()
    }
    /// Its window's IPA.
    pub fn ipa(self) -> u64 {
        VIRTIO_IPA + self as u64 * VIRTIO_WINDOW
    }
    /// Its SPI number (INTID - 32).
    pub fn spi(self) -> u32 {
        VIRTIO_SPI + self as u32
    }
    /// Its PCI device number on bus 0, with the PCI transport.
    pub fn pci_device(self) -> u8 {
        self as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_fdt::{GICC_SIZE, GICD_SIZE};

    // The windows do not overlap: the GIC's (with the redistributors of 64 vCPUs, 128 KiB
    // each), the UART, the virtio page, RAM.
    const _: () = assert!(GICD_IPA + GICD_SIZE <= GICC_IPA && GICC_IPA + GICC_SIZE <= GICR_IPA);
    const _: () = assert!(GICC_IPA + GICC_SIZE <= GICV2M_IPA && GICV2M_IPA + GICV2M_SIZE <= ITS_IPA);
    const _: () = assert!(ITS_IPA + ITS_SIZE <= GICR_IPA);
    const _: () = assert!(EMULATED_END <= PCI_WINDOWS_BASE && PCI_ECAM_IPA + PCI_ECAM_SIZE == PCI_MMIO_IPA);
    const _: () = assert!(GICR_IPA + 0x2_0000 * 64 <= UART_IPA);
    const _: () = assert!(UART_IPA + UART_SIZE <= VIRTIO_IPA && VIRTIO_IPA + VIRTIO_PAGE <= RAM_IPA);
    // Every emulated window lies in EMULATED_BASE..EMULATED_END.
    const _: () = assert!(EMULATED_BASE <= GICD_IPA && GICC_IPA + GICC_SIZE <= EMULATED_END);
    const _: () = assert!(UART_IPA + UART_SIZE <= EMULATED_END && VIRTIO_IPA + VIRTIO_PAGE <= EMULATED_END);
    const _: () = assert!(VIRTIO_IPA + VIRTIO_PAGE <= PCI_ECAM_IPA && PCI_ECAM_IPA + PCI_ECAM_SIZE <= PCI_MMIO_IPA);
    const _: () = assert!(PCI_MMIO_IPA + PCI_MMIO_SIZE <= RAM_IPA);
    // The message-based SPIs are the VM's, above the UART's and the transports'.
    const _: () = assert!(MBI_FIRST_INTID + MBI_COUNT == 32 + SPIS as u32);
    const _: () = assert!(MBI_FIRST_INTID > 32 + VIRTIO_SPI + 2 && MBI_FIRST_INTID > 32 + UART_SPI);

    #[test]
    fn the_transports_fit_their_page_and_have_their_own_spis() {
        for slot in [VirtioSlot::Disk, VirtioSlot::Nic, VirtioSlot::Console] {
            assert!(slot.ipa() + VIRTIO_WINDOW <= VIRTIO_IPA + VIRTIO_PAGE);
            assert!(32 + (slot.spi() as usize) < 32 + SPIS && slot.spi() != UART_SPI);
        }
    }

    #[test]
    fn a_vm_has_its_console_and_the_devices_its_manifest_names() {
        let mut devices = VmDevices::default();
        assert_eq!(VirtioSlot::of(&devices).collect::<Vec<_>>(), [VirtioSlot::Console]);
        devices.network = Some(None);
        assert_eq!(VirtioSlot::of(&devices).collect::<Vec<_>>(), [VirtioSlot::Nic, VirtioSlot::Console]);
    }
}
