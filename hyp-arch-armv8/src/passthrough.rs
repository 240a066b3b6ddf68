//! Passthrough SPIs taken at EL2 (hyp_runtime::passthrough describes the devices): each is
//! forwarded to the VM that owns it as a hardware-mapped virtual SPI.

use crate::arch::HYPERVISOR;

/// A physical interrupt `iar` taken at EL2 on any CPU, whichever VM (if any) runs there:
/// if it is a passthrough SPI, only its priority is dropped (EOImode 1) and it becomes its
/// VM's hardware-mapped virtual SPI, left active until the guest deactivates it. Returns
/// whether it was one (and so is handled).
pub fn forward(intid: u32, iar: u32) -> bool {
    let Some(index) = HYPERVISOR.spi_owners.owner(intid) else { return false };
    match HYPERVISOR.vm(index) {
        Some(vm) if !vm.is_ending() => {
            crate::gic::priority_drop(iar);
            vm.passthrough_interrupt(intid);
        }
        // The VM is going: nobody will deactivate it.
        _ => crate::gic::end_of_interrupt(iar),
    }
    true
}
