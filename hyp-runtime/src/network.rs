//! The virtual switch's ports (docs/virtio.md): port 0 is the uplink, the board's own NIC;
//! port 1 + n is VM n's NIC, with the address its manifest entry gives it (a VM keeps its
//! index and its address when the console restarts it).

pub const UPLINK_PORT: usize = 0;

/// The switch port of VM `vm`'s NIC.
pub fn port_of_vm(vm: usize) -> usize {
    vm + 1
}

/// The VM whose NIC is on `port`, if it is a VM's.
pub fn vm_of_port(port: usize) -> Option<usize> {
    port.checked_sub(1)
}
