//! What a VM is given through the capability space before it is built, and taking all of
//! it back when it is destroyed (docs/capability-model.md). Nothing else gives a VM memory,
//! a device or an interrupt.

use hyp_core::bundle::RAM_GRANULE;
use hyp_core::cap::{CapError, CapId, CapSpace, RegionKind, Rights};
use hyp_core::guest_fdt::GICD_SIZE;
use hyp_core::guest_map::{
    GICC_IPA, GICD_IPA, GICR_IPA, GICV2M_IPA, GICV2M_SIZE, ITS_IPA, ITS_SIZE, PCI_ECAM_IPA, PCI_ECAM_SIZE,
    PCI_MMIO_IPA, PCI_MMIO_SIZE, RAM_IPA, UART_IPA, UART_SIZE, VIRTIO_IPA, VIRTIO_PAGE,
};
use hyp_core::platform::PhysRange;
use stage2::{Ipa, IpaRange, TableMemory, TlbMaintenance};
use vgic::GICR_FRAME_SIZE;

use crate::passthrough::PassthroughDevice;

/// Device model ids of the emulated windows.
pub const DEVICE_PL011: u32 = 1;
pub const DEVICE_GICD: u32 = 2;
pub const DEVICE_GICR: u32 = 3;
pub const DEVICE_VIRTIO: u32 = 4;
pub const DEVICE_PCI_ECAM: u32 = 5;
pub const DEVICE_PCI_MEMORY: u32 = 6;
pub const DEVICE_GICV2M: u32 = 7;
pub const DEVICE_ITS: u32 = 8;

/// What a VM asks the capability space for.
pub struct VmRequest<'a> {
    /// Bytes of RAM.
    pub memory: u64,
    pub vcpus: u32,
    /// GICv2: the board's virtual CPU interface, mapped at the guest's GICC address. None on
    /// GICv3, where the guest's CPU interface is system registers and its redistributors
    /// are emulated.
    pub gicv: Option<CapId>,
    /// Its passthrough devices.
    pub passthrough: &'a [PassthroughDevice],
    /// Identity-mapped: its RAM is exactly the physical memory from here, at the same IPA
    /// (docs/capability-model.md, D4); `None`: anywhere, at the guest's `RAM_IPA`.
    pub ram_at: Option<u64>,
    /// Where its UART's shadow page comes from (any untyped with a free page); with none,
    /// every access to its UART traps.
    pub shadow_from: &'a [CapId],
    /// Its virtio devices are PCI functions: it has the PCI host bridge's windows (and with
    /// a GICv2 its GICv2m frame), not the virtio-mmio page.
    pub pci: bool,
}

/// What a VM was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmResources {
    pub vm_cap: CapId,
    pub ram: PhysRange,
    /// The stage-2 root and its control register value (VTTBR/VTCR, or their ARMv7 LPAE
    /// equivalents, as the table format says).
    pub vttbr: u64,
    pub vtcr: u64,
    pub ipa_bits: u8,
    pub table_frames: usize,
}

/// Creates the VM in the capability space: a VM object with its stage-2 tables and vCPUs,
/// its RAM retyped from untyped memory (1 GiB-aligned for VMs of 1 GiB or more, so stage 2
/// uses 1 GiB blocks; else 2 MiB-aligned) and mapped at the guest's RAM address (an
/// identity-mapped VM: an identity VM object, its RAM exactly the range it names, mapped at
/// IPA = PA), its
/// emulated windows, and its passthrough devices (each region mapped at its own address,
/// IPA = PA, read and write, never executable: the region kind decides; each SPI granted).
/// On any failure nothing half-built stays behind: the VM and whatever it was given go.
/// `tlb` gives the TLB maintenance of the VM whose stage-2 root is the argument.
pub fn grant_resources<M: TableMemory, T: TlbMaintenance>(
    caps: &mut CapSpace,
    mem: &mut M,
    tlb: impl Fn(u64) -> T,
    untyped: &[CapId],
    request: &VmRequest<'_>,
) -> Result<VmResources, CapError> {
    let vm_cap = match request.ram_at {
        None => caps.create_vm(mem)?,
        Some(_) => caps.create_identity_vm(mem)?,
    };
    let granted = grant_to(caps, mem, &tlb, untyped, vm_cap, request);
    if granted.is_err() {
        let _ = caps.destroy_vm(mem, &mut tlb(vttbr_of(caps, vm_cap)), vm_cap);
    }
    granted
}

fn grant_to<M: TableMemory, T: TlbMaintenance>(
    caps: &mut CapSpace,
    mem: &mut M,
    tlb: &impl Fn(u64) -> T,
    untyped: &[CapId],
    vm_cap: CapId,
    request: &VmRequest<'_>,
) -> Result<VmResources, CapError> {
    let VmRequest { memory, vcpus, gicv, passthrough, ram_at, shadow_from, pci } = *request;
    for _ in 0..vcpus {
        caps.create_vcpu(vm_cap, vcpus)?;
    }
    let (region, ipa) = match ram_at {
        Some(base) => {
            let exact = PhysRange { base, size: memory };
            let retyped = untyped.iter().find_map(|u| caps.retype_at(*u, RegionKind::Ram, exact).ok());
            (retyped.ok_or(CapError::NotFree { base, size: memory })?, base)
        }
        None => {
            let align = if memory >= 1 << 30 { 1 << 30 } else { RAM_GRANULE };
            let retyped = [align, RAM_GRANULE]
                .iter()
                .flat_map(|a| untyped.iter().map(move |u| (*u, *a)))
                .find_map(|(u, a)| caps.retype(u, RegionKind::Ram, memory, a).ok());
            (retyped.ok_or(CapError::OutOfUntyped { size: memory })?, RAM_IPA)
        }
    };
    let vm = caps.vm_id(vm_cap)?;
    let mut tlb = tlb(vttbr_of(caps, vm_cap));
    caps.map(mem, &mut tlb, vm_cap, region, Ipa(ipa), Rights::RWX)?;
    let window = |base, size| IpaRange::new(Ipa(base), size).map_err(CapError::Stage2);
    // The UART's window is read from a page while nothing is received (docs/devices.md,
    // "The PL011's shadow page"), the virtio transports' always (docs/virtio.md, "The
    // transports' shadow page"); without a free page every access to the window traps.
    let shadowed = [(UART_IPA, UART_SIZE, DEVICE_PL011), (VIRTIO_IPA, VIRTIO_PAGE, DEVICE_VIRTIO)];
    for (ipa, size, device) in shadowed.into_iter().filter(|&(_, _, d)| !(pci && d == DEVICE_VIRTIO)) {
        let range = window(ipa, size)?;
        let shadowed =
            shadow_from.iter().any(|u| caps.add_shadowed_window(mem, &mut tlb, vm_cap, *u, range, device).is_ok());
        if !shadowed {
            caps.add_emulated_window(vm_cap, range, device)?;
        }
    }
    if pci {
        caps.add_emulated_window(vm_cap, window(PCI_ECAM_IPA, PCI_ECAM_SIZE)?, DEVICE_PCI_ECAM)?;
        caps.add_emulated_window(vm_cap, window(PCI_MMIO_IPA, PCI_MMIO_SIZE)?, DEVICE_PCI_MEMORY)?;
    }
    caps.add_emulated_window(vm_cap, window(GICD_IPA, GICD_SIZE)?, DEVICE_GICD)?;
    match gicv {
        None => {
            caps.add_emulated_window(vm_cap, window(GICR_IPA, GICR_FRAME_SIZE * u64::from(vcpus))?, DEVICE_GICR)?;
            if pci {
                caps.add_emulated_window(vm_cap, window(ITS_IPA, ITS_SIZE)?, DEVICE_ITS)?;
            }
        }
        Some(gicv) => {
            caps.map(mem, &mut tlb, vm_cap, gicv, Ipa(GICC_IPA), Rights::RW)?;
            if pci {
                caps.add_emulated_window(vm_cap, window(GICV2M_IPA, GICV2M_SIZE)?, DEVICE_GICV2M)?;
            }
        }
    }
    for device in passthrough {
        caps.map(mem, &mut tlb, vm_cap, device.region, Ipa(device.reg.base), Rights::RW)?;
        for spi in &device.spis {
            caps.grant_interrupt(vm_cap, spi.cap)?;
        }
    }
    let table = caps.vm_table(vm).ok_or(CapError::WrongType { cap: vm_cap, expected: "a VM" })?;
    Ok(VmResources {
        vm_cap,
        ram: caps.region(region)?.0,
        vttbr: table.vttbr(),
        vtcr: table.vtcr(),
        ipa_bits: table.geometry().ipa_bits,
        table_frames: table.table_frame_count(mem),
    })
}

/// The stage-2 root (VTTBR) of the VM `vm_cap` names, for its TLB maintenance; 0 when it
/// names no VM.
pub(crate) fn vttbr_of(caps: &CapSpace, vm_cap: CapId) -> u64 {
    caps.vm_id(vm_cap).ok().and_then(|id| caps.vm_table(id)).map_or(0, |t| t.vttbr())
}

/// Destroys an ended VM through its capability: every mapping and window revoked, its RAM
/// back to untyped memory, its stage-2 tables freed and its VMID's TLB entries invalidated
/// (`tlb`). Its passthrough SPIs must be quiet first (disabled and deactivated at the GIC).
pub fn revoke_all<M: TableMemory>(
    caps: &mut CapSpace,
    mem: &mut M,
    tlb: &mut impl TlbMaintenance,
    vm_cap: CapId,
) -> Result<(), CapError> {
    caps.destroy_vm(mem, tlb, vm_cap)
}
