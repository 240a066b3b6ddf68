//! The PCI Express Enhanced Configuration Access Mechanism (PCIe Base 3.0, 7.2.2): where
//! an offset into the ECAM window lands — bus, device, function and the register in that
//! function's 4 KiB configuration space.

/// One function's configuration register, decoded from an offset into the ECAM window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcamAddress {
    pub bus: u8,
    /// 0..=31.
    pub device: u8,
    /// 0..=7.
    pub function: u8,
    /// 0..=4095: the offset in the function's configuration space.
    pub register: u16,
}

impl EcamAddress {
    /// `offset` = bus << 20 | device << 15 | function << 12 | register; bits above the bus
    /// (a window of more than 256 buses) are not part of the address.
    pub fn decode(offset: u64) -> Self {
        EcamAddress {
            bus: (offset >> 20) as u8,
            device: ((offset >> 15) & 0x1f) as u8,
            function: ((offset >> 12) & 0x7) as u8,
            register: (offset & 0xfff) as u16,
        }
    }

    /// The offset in the ECAM window that `decode` maps to this address.
    pub fn offset(&self) -> u64 {
        (u64::from(self.bus) << 20)
            | (u64::from(self.device & 0x1f) << 15)
            | (u64::from(self.function & 0x7) << 12)
            | u64::from(self.register & 0xfff)
    }
}

/// `EcamAddress::decode`.
pub fn decode(offset: u64) -> EcamAddress {
    EcamAddress::decode(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_comes_from_its_own_bits() {
        let a = decode((3 << 20) | (31 << 15) | (5 << 12) | 0xabc);
        assert_eq!(a, EcamAddress { bus: 3, device: 31, function: 5, register: 0xabc });
        assert_eq!(a.offset(), (3 << 20) | (31 << 15) | (5 << 12) | 0xabc);
        assert_eq!(decode(0), EcamAddress { bus: 0, device: 0, function: 0, register: 0 });
        assert_eq!(decode(0x0ff0_8004), EcamAddress { bus: 0xff, device: 1, function: 0, register: 4 });
    }
}
