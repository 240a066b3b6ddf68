//! The stage-2 descriptor format shared by VMSAv8-64 and ARMv7 LPAE (ARM ARM D8.3
//! "Translation table descriptor formats" and D8.3.2 "Block and Page descriptor attributes"
//! for stage 2; ARMv7 ARM B3.6.1 "Long-descriptor translation table format descriptors" and
//! B3.6.2 "Memory attributes in the Long-descriptor translation table format descriptors").
//! The encodings agree bit for bit, so one set of functions serves both formats.
//!
//! bits [1:0]   0b11 table or page (level 3), 0b01 block (levels 1 and 2), bit 0 valid
//! bits [5:2]   MemAttr: 0b1111 Normal write-back, 0b0001 Device-nGnRE
//! bits [7:6]   S2AP: bit 6 read, bit 7 write
//! bits [9:8]   SH: 0b11 inner shareable (Normal memory)
//! bit 10       AF, always set (no access-flag faults)
//! bits [58:55] software: the ownership state
//! A leaf zeroed on first touch is the same descriptor with bit 0 clear: invalid to the
//! hardware (a Translation fault for the guest; every other bit is IGNORED, ARM ARM D8.3.1),
//! and told from an empty entry by AF, which every leaf has (`is_pending`). A hidden leaf
//! (an emulated window's shadow page while the guest must not read it) is encoded the same
//! way; the two are told apart by MemAttr: a leaf waiting for its first touch is Normal
//! memory (`map_range_pending` refuses anything else), a hidden leaf read-only Device
//! memory (`is_shadow`; `map_range_hidden` refuses anything else).
//! bits [54:53] VMSAv8-64 XN: 0b10 = execute-never at EL1 and EL0 (with FEAT_XNX; without
//!              it bit 53 is RES0 and bit 54 is XN); ARMv7 LPAE: XN is bit 54. Device
//!              memory is always execute-never (a speculative instruction fetch from a
//!              device would be a read with side effects).

use crate::format::LevelDescription;
use crate::{MappingAttributes, MemoryType, OwnershipState, Permissions, PhysAddr};

pub const VALID: u64 = 1;
const TYPE_TABLE_OR_PAGE: u64 = 1 << 1;
const MEMATTR_NORMAL_WB: u64 = 0b1111 << 2;
const MEMATTR_DEVICE_NGNRE: u64 = 0b0001 << 2;
const MEMATTR_MASK: u64 = 0b1111 << 2;
const S2AP_READ: u64 = 1 << 6;
const S2AP_WRITE: u64 = 1 << 7;
const SH_INNER: u64 = 0b11 << 8;
const AF: u64 = 1 << 10;
const XN: u64 = 1 << 54;
/// XN[0] (FEAT_XNX): kept clear so that bit 54 alone means execute-never at EL1 and EL0.
const XN_LOW: u64 = 1 << 53;
const SW_SHIFT: u32 = 55;
const SW_MASK: u64 = 0b1111 << SW_SHIFT;
/// Output address bits [47:12] (a 48-bit PA; ARMv7 LPAE physical addresses are 40 bits and
/// `TableFormat::geometry` never allows more).
pub const OA_MASK: u64 = 0x0000_ffff_ffff_f000;

pub fn is_valid(d: u64) -> bool {
    d & VALID != 0
}

/// A leaf written invalid until the guest first touches it: everything of the leaf but the
/// valid bit. Table descriptors never have AF, empty entries are 0.
pub fn is_pending(d: u64) -> bool {
    d & (VALID | AF) == AF
}

/// A leaf or a pending leaf: something is mapped there.
pub fn is_present(d: u64) -> bool {
    d != 0
}

/// Whether leaf `d`, valid or not, has the attributes of a shadow page (Device-nGnRE,
/// read-only, never executable): the only leaves `show_range` and `hide_range` change.
pub fn is_shadow(d: u64) -> bool {
    attributes(d) == MappingAttributes::READ_ONLY_DEVICE
}

/// Leaf `d` written invalid, to be made valid on first touch or when shown (`activated`).
pub fn pending(d: u64) -> u64 {
    d & !VALID
}

/// The pending leaf `d` made valid.
pub fn activated(d: u64) -> u64 {
    d | VALID
}

/// A table descriptor (at levels above 3) or a page descriptor (at level 3).
pub fn is_table_or_page(d: u64) -> bool {
    d & 0b11 == 0b11
}

pub fn output_address(d: u64) -> PhysAddr {
    PhysAddr(d & OA_MASK)
}

pub fn table(next: PhysAddr) -> u64 {
    (next.0 & OA_MASK) | TYPE_TABLE_OR_PAGE | VALID
}

fn owner_bits(owner: OwnershipState) -> u64 {
    let v = match owner {
        OwnershipState::Owned => 0,
        OwnershipState::Shared => 1,
        OwnershipState::Borrowed => 2,
    };
    v << SW_SHIFT
}

/// S2AP and XN; device memory is execute-never whatever is asked.
fn permission_bits(p: Permissions, memory: MemoryType) -> u64 {
    let never_execute = !p.execute || memory == MemoryType::DeviceNGnRE;
    (if p.read { S2AP_READ } else { 0 }) | (if p.write { S2AP_WRITE } else { 0 }) | (if never_execute { XN } else { 0 })
}

fn leaf_type(level: &LevelDescription) -> u64 {
    if level.is_last() {
        TYPE_TABLE_OR_PAGE | VALID
    } else {
        VALID
    }
}

/// A block (levels 1-2) or page (level 3) descriptor.
pub fn leaf(pa: PhysAddr, level: &LevelDescription, attrs: MappingAttributes, owner: OwnershipState) -> u64 {
    let memory = match attrs.memory {
        MemoryType::NormalWriteBack => MEMATTR_NORMAL_WB | SH_INNER,
        MemoryType::DeviceNGnRE => MEMATTR_DEVICE_NGNRE,
    };
    (pa.0 & OA_MASK)
        | leaf_type(level)
        | memory
        | permission_bits(attrs.permissions, attrs.memory)
        | AF
        | owner_bits(owner)
}

/// The same leaf at the next level down, for splitting a block: pending if it was.
pub fn leaf_at_level(d: u64, pa: PhysAddr, level: &LevelDescription) -> u64 {
    let kind = if is_valid(d) { leaf_type(level) } else { leaf_type(level) & !VALID };
    (d & !(OA_MASK | 0b11)) | (pa.0 & OA_MASK) | kind
}

pub fn with_permissions(d: u64, p: Permissions) -> u64 {
    (d & !(S2AP_READ | S2AP_WRITE | XN | XN_LOW)) | permission_bits(p, attributes(d).memory)
}

pub fn attributes(d: u64) -> MappingAttributes {
    let memory =
        if d & MEMATTR_MASK == MEMATTR_NORMAL_WB { MemoryType::NormalWriteBack } else { MemoryType::DeviceNGnRE };
    let permissions = Permissions { read: d & S2AP_READ != 0, write: d & S2AP_WRITE != 0, execute: d & XN == 0 };
    MappingAttributes { memory, permissions }
}

pub fn owner(d: u64) -> OwnershipState {
    match (d & SW_MASK) >> SW_SHIFT {
        1 => OwnershipState::Shared,
        2 => OwnershipState::Borrowed,
        _ => OwnershipState::Owned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::LEVELS;

    #[test]
    fn ram_and_device_leaves_encode_as_the_arm_arm_says() {
        let ram = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RWX };
        let d = leaf(PhysAddr(0x8000_0000), &LEVELS[2], ram, OwnershipState::Owned);
        assert_eq!(d, 0x8000_0000 | 0b01 | (0b1111 << 2) | (0b11 << 6) | (0b11 << 8) | (1 << 10));
        let dev = MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RW };
        let d = leaf(PhysAddr(0x0900_0000), &LEVELS[3], dev, OwnershipState::Shared);
        assert_eq!(d, 0x0900_0000 | 0b11 | (0b0001 << 2) | (0b11 << 6) | (1 << 10) | (1 << 54) | (1 << 55));
        assert_eq!(attributes(d), dev);
        assert_eq!(owner(d), OwnershipState::Shared);
    }

    #[test]
    fn permissions_change_without_touching_the_rest() {
        let ram = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RWX };
        let d = leaf(PhysAddr(0x4000_0000), &LEVELS[1], ram, OwnershipState::Borrowed);
        let ro = with_permissions(d, Permissions::RO);
        assert_eq!(attributes(ro).permissions, Permissions::RO);
        assert_eq!(
            (output_address(ro), owner(ro), attributes(ro).memory),
            (PhysAddr(0x4000_0000), OwnershipState::Borrowed, MemoryType::NormalWriteBack)
        );
    }

    #[test]
    fn tables_pages_and_software_bits() {
        assert_eq!(table(PhysAddr(0x1234_5000)), 0x1234_5003, "table descriptor: address and 0b11");
        let ram = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RO };
        for (owner, bits) in [(OwnershipState::Owned, 0), (OwnershipState::Shared, 1), (OwnershipState::Borrowed, 2)] {
            let d = leaf(PhysAddr(0x4000_0000), &LEVELS[1], ram, owner);
            assert_eq!((d >> 55) & 0b1111, bits);
            assert_eq!(super::owner(d), owner);
        }
        // Execute-never is bit 54 alone (XN = 0b10 for VMSAv8-64, XN for ARMv7 LPAE).
        let d = leaf(PhysAddr(0x4000_0000), &LEVELS[3], ram, OwnershipState::Owned);
        assert_eq!((d >> 53) & 0b11, 0b10);
        assert_eq!(d & 0b11, 0b11, "a level-3 leaf is a page descriptor");
    }

    #[test]
    fn a_pending_leaf_is_the_leaf_without_its_valid_bit_and_stays_pending_when_split() {
        let ram = MappingAttributes { memory: MemoryType::NormalWriteBack, permissions: Permissions::RWX };
        let d = leaf(PhysAddr(0x4020_0000), &LEVELS[2], ram, OwnershipState::Owned);
        let p = pending(d);
        assert!(!is_valid(p) && is_pending(p) && is_present(p));
        assert!(!is_pending(d) && !is_pending(0) && !is_present(0) && !is_pending(table(PhysAddr(0x1000))));
        assert_eq!((output_address(p), attributes(p), owner(p)), (output_address(d), ram, OwnershipState::Owned));
        assert_eq!(activated(p), d);
        let page = leaf_at_level(p, PhysAddr(0x4020_1000), &LEVELS[3]);
        assert!(is_pending(page), "a split pending block gives pending pages");
        assert_eq!(activated(page), leaf_at_level(d, PhysAddr(0x4020_1000), &LEVELS[3]));
        assert!(is_pending(with_permissions(p, Permissions::RO)), "a permission change keeps it pending");
    }

    #[test]
    fn device_memory_stays_execute_never() {
        let dev = MappingAttributes { memory: MemoryType::DeviceNGnRE, permissions: Permissions::RWX };
        let d = leaf(PhysAddr(0x0900_0000), &LEVELS[3], dev, OwnershipState::Owned);
        assert!(!attributes(d).permissions.execute);
        assert!(!attributes(with_permissions(d, Permissions::RWX)).permissions.execute);
    }
}
