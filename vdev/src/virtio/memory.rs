//! Guest-physical memory as the device models may touch it: the access trait, the checked
//! segment type handed to backends, and `VecMemory`, a host implementation for tests.

use alloc::vec;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::fmt;

/// Guest-physical memory of one VM, as the device model may touch it. Implementations check
/// every access against the VM's RAM (its capabilities) and fail without touching anything.
pub trait GuestMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError>;
    /// Whether [addr, addr+len) lies wholly in the VM's RAM (checked arithmetic).
    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError>;
}

/// An access to guest memory that does not lie wholly in the VM's RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestMemoryError {
    pub addr: u64,
    pub len: u64,
}

impl fmt::Display for GuestMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "guest memory {:#x}..+{:#x} lies outside the VM's RAM: the guest driver passed an address it does not own",
            self.addr, self.len
        )
    }
}

/// A range of guest memory one request reads or writes, already checked with GuestMemory::check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
}

/// Little-endian helpers: every virtio structure is little-endian with VIRTIO_F_VERSION_1 (2.4).
pub(crate) fn read_u16(mem: &dyn GuestMemory, addr: u64) -> Result<u16, GuestMemoryError> {
    let mut b = [0u8; 2];
    mem.read(addr, &mut b)?;
    Ok(u16::from_le_bytes(b))
}

pub(crate) fn write_u16(mem: &dyn GuestMemory, addr: u64, value: u16) -> Result<(), GuestMemoryError> {
    mem.write(addr, &value.to_le_bytes())
}

pub(crate) fn write_u32(mem: &dyn GuestMemory, addr: u64, value: u32) -> Result<(), GuestMemoryError> {
    mem.write(addr, &value.to_le_bytes())
}

/// A test/host implementation over a `Vec<u8>` at a base address. It counts the reads and
/// writes it refused, so tests can assert the device model never even tried to touch memory
/// outside RAM (it must `check` first).
pub struct VecMemory {
    base: u64,
    bytes: RefCell<Vec<u8>>,
    refused: Cell<u64>,
}

impl VecMemory {
    pub fn new(base: u64, size: usize) -> Self {
        VecMemory { base, bytes: RefCell::new(vec![0; size]), refused: Cell::new(0) }
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn size(&self) -> usize {
        self.bytes.borrow().len()
    }

    /// Reads and writes refused because they reached outside the memory (`check` calls are not counted).
    pub fn refused_accesses(&self) -> u64 {
        self.refused.get()
    }

    /// A copy of the whole memory, to compare before and after.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.borrow().clone()
    }

    /// The offset into the vector of [addr, addr+len), if wholly inside.
    fn range(&self, addr: u64, len: u64) -> Result<core::ops::Range<usize>, GuestMemoryError> {
        let err = GuestMemoryError { addr, len };
        let start = addr.checked_sub(self.base).ok_or(err)?;
        let end = start.checked_add(len).ok_or(err)?;
        let size = self.bytes.borrow().len() as u64;
        if end > size {
            return Err(err);
        }
        let start = usize::try_from(start).map_err(|_| err)?;
        let end = usize::try_from(end).map_err(|_| err)?;
        Ok(start..end)
    }
}

impl GuestMemory for VecMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), GuestMemoryError> {
        match self.range(addr, buf.len() as u64) {
            Ok(r) => {
                buf.copy_from_slice(&self.bytes.borrow()[r]);
                Ok(())
            }
            Err(e) => {
                self.refused.set(self.refused.get() + 1);
                Err(e)
            }
        }
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), GuestMemoryError> {
        match self.range(addr, data.len() as u64) {
            Ok(r) => {
                self.bytes.borrow_mut()[r].copy_from_slice(data);
                Ok(())
            }
            Err(e) => {
                self.refused.set(self.refused.get() + 1);
                Err(e)
            }
        }
    }

    fn check(&self, addr: u64, len: u64) -> Result<(), GuestMemoryError> {
        self.range(addr, len).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_memory_refuses_accesses_outside_and_counts_them() {
        let m = VecMemory::new(0x1000, 0x100);
        assert!(m.check(0x1000, 0x100).is_ok());
        assert!(m.check(0x1000, 0x101).is_err());
        assert!(m.check(0xfff, 1).is_err());
        assert!(m.check(u64::MAX, 2).is_err());
        assert_eq!(m.refused_accesses(), 0);
        assert!(m.write(0x10ff, &[1, 2]).is_err());
        assert_eq!(m.refused_accesses(), 1);
        m.write(0x10fe, &[1, 2]).unwrap();
        let mut b = [0; 2];
        m.read(0x10fe, &mut b).unwrap();
        assert_eq!(b, [1, 2]);
    }
}
