//! Rights a capability carries.

use stage2::Permissions;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rights(u8);

impl Rights {
    pub const NONE: Rights = Rights(0);
    pub const READ: Rights = Rights(1);
    pub const WRITE: Rights = Rights(2);
    pub const EXECUTE: Rights = Rights(4);
    /// Authority to give: carve untyped, map into a VM, grant an interrupt.
    pub const GRANT: Rights = Rights(8);
    pub const ALL: Rights = Rights(15);
    pub const RW: Rights = Rights(3);
    pub const RWX: Rights = Rights(7);

    /// Rights from their bits (READ 1, WRITE 2, EXECUTE 4, GRANT 8); other bits are dropped.
    pub const fn from_bits(bits: u8) -> Rights {
        Rights(bits & 15)
    }
    pub const fn contains(self, other: Rights) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn union(self, other: Rights) -> Rights {
        Rights(self.0 | other.0)
    }
    pub const fn without(self, other: Rights) -> Rights {
        Rights(self.0 & !other.0)
    }
    pub fn permissions(self) -> Permissions {
        Permissions {
            read: self.contains(Rights::READ),
            write: self.contains(Rights::WRITE),
            execute: self.contains(Rights::EXECUTE),
        }
    }
}
