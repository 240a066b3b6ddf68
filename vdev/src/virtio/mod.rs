//! virtio devices as guests see them (device side, virtio 1.2): the virtio-mmio version 2
//! transport (`transport`), and the virtio-pci transport (`pci`: a PCI function with MSI-X
//! whose front end translates PCI's registers to a virtio-mmio core), split virtqueues over a
//! guest-memory accessor, block, network and console device models with their backends
//! behind traits, and the virtual switch; and one queue seen from the driver's side
//! (`driver_queue`), the hypervisor's own on the board's disk.

pub mod block;
pub mod bounce;
pub mod chain;
pub mod console;
pub mod device;
pub mod driver_queue;
pub mod features;
pub mod incident;
pub mod memory;
pub mod net;
pub mod pci;
pub mod poll;
pub mod queue;
pub mod shadow;
pub mod switch;
pub mod transport;

pub use block::{BlockBackend, BlockError, RamDisk, VirtioBlock};
pub use chain::{Buffer, Chain};
pub use console::{ConsoleBackend, VirtioConsole};
pub use device::{ConfigError, NeedsReset, QueueAccess, VirtioDevice};
pub use incident::DeviceIncident;
pub use memory::{GuestMemory, GuestMemoryError, Segment, VecMemory};
pub use net::{NetBackend, RxError, VirtioNet};
pub use pci::VirtioPci;
pub use switch::{Forward, PortId, Switch};
pub use transport::{Raised, RegisterError, VirtioMmio};
