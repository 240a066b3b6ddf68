//! Starting a CPU that waits in the firmware's spin table (Documentation/arch/arm64/
//! booting.rst, "spin-table"; the Raspberry Pi 4's firmware and QEMU's `raspi4b` leave the
//! secondary CPUs so): the CPU loops on WFE reading its `cpu-release-addr` word with its MMU
//! off, and jumps to the address it finds there once that is not zero, at EL2, with nothing
//! useful in its registers (x0 is 0).
//!
//! So a released CPU cannot be handed its `SecondaryBoot` the way PSCI CPU_ON's context
//! argument hands it: it enters the image's spin-table entry, which finds its record in
//! `SPIN_TABLE_CPUS` by its own MPIDR, then goes the way a CPU_ON'd one goes
//! (hyp-arch-armv8/src/boot.rs, `spin_table_entry`, then `secondary_entry`).

use core::cell::UnsafeCell;
use core::fmt;

use hyp_core::platform::{Platform, SpinTableError, MAX_CPUS};
use hyp_runtime::Board;

use crate::cpus::MPIDR_AFFINITY_MASK;
use crate::image::ArmImage;

/// Why a CPU waiting in a spin table stays there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReleaseError {
    /// Its release address is not one the hypervisor can write.
    Address(SpinTableError),
    /// This image has no spin-table entry (the ARMv7 image: spin tables are an arm64 boot
    /// protocol).
    NotOnThisImage { release: u64 },
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Address(e) => write!(f, "{e}"),
            Self::NotOnThisImage { release } => write!(
                f,
                "it waits in a spin table (release address {release:#x}), which this image does not drive; \
                 boot the AArch64 image, or give the CPU enable-method = \"psci\""
            ),
        }
    }
}

/// One CPU's entry: its MPIDR affinity (`NONE` until it is released) and the address of its
/// `SecondaryBoot`. The spin-table entry reads it with the MMU off, at these offsets.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SpinTableCpu {
    pub mpidr: u64,
    pub boot: u64,
}

// The layout the images' spin-table entries read: 16 bytes a CPU, `boot` at 8.
const _: () = assert!(core::mem::size_of::<SpinTableCpu>() == 16);
const _: () = assert!(core::mem::offset_of!(SpinTableCpu, boot) == 8);

/// No CPU's affinity: an MPIDR's affinity fields are at most 40 bits.
pub const NONE: u64 = u64::MAX;

/// The CPUs released from a spin table, for the image's spin-table entry to search (its
/// symbol: the entry takes the table's address with ADRP).
#[no_mangle]
pub static SPIN_TABLE_CPUS: SpinTableCpus =
    SpinTableCpus(UnsafeCell::new([SpinTableCpu { mpidr: NONE, boot: 0 }; MAX_CPUS]));

#[repr(transparent)]
pub struct SpinTableCpus(UnsafeCell<[SpinTableCpu; MAX_CPUS]>);

// SAFETY: only the boot CPU writes an entry, before it releases that entry's CPU; a released
// CPU only reads, and only its own entry is the one it uses.
unsafe impl Sync for SpinTableCpus {}

/// Releases CPU `index` (MPIDR `mpidr`, as the device tree lists it) from its spin table at `release`: its record
/// prepared and entered in `SPIN_TABLE_CPUS`, both cleaned to the point of coherency, the
/// image's spin-table entry written to the release word and cleaned too, then SEV wakes the
/// CPU from its WFE. Says so on the console first (the CPU's own "online" comes after). An
/// error says why the CPU stays off.
pub fn release<I: ArmImage>(
    platform: &Platform<'_>,
    index: usize,
    mpidr: u64,
    release: u64,
) -> Result<(), ReleaseError> {
    platform.check_release_address(release).map_err(ReleaseError::Address)?;
    let entry = I::spin_table_entry().ok_or(ReleaseError::NotOnThisImage { release })?;
    let boot = I::prepare_cpu_start(index);
    let slot = index.min(MAX_CPUS - 1);
    // SAFETY: the boot CPU alone writes the table, before it releases this CPU (the
    // `Sync` contract); no released CPU reads this entry yet.
    let at = unsafe {
        let entry = &mut (*SPIN_TABLE_CPUS.0.get())[slot];
        // The entry compares the affinity fields of the CPU's MPIDR_EL1 only.
        *entry = SpinTableCpu { mpidr: mpidr & MPIDR_AFFINITY_MASK, boot };
        entry as *const SpinTableCpu as u64
    };
    I::clean_to_point_of_coherency(at, at + core::mem::size_of::<SpinTableCpu>() as u64);
    <I::Board as Board>::print(format_args!(
        "hypervisor: cpu{index} (MPIDR {mpidr:#x}) released from its spin table (release address {release:#x})"
    ));
    // SAFETY: `check_release_address` found an aligned word of RAM, which the hypervisor's
    // identity map maps Normal and `Platform::firmware_memory` keeps from the heap and the
    // VMs: the only other party to it is the CPU spinning on it.
    unsafe { core::ptr::write_volatile(release as *mut u64, entry) };
    I::clean_to_point_of_coherency(release, release + 8);
    I::send_event();
    Ok(())
}
