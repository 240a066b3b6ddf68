//! One interrupt's state, as the distributor keeps it (IHI 0069 4.1, "Interrupt states";
//! IHI 0048B 1.4.2).

/// An interrupt ID. Always 32 bits wide: never truncated to 8 bits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct IntId(pub u32);

impl IntId {
    pub const fn is_sgi(self) -> bool {
        self.0 < 16
    }
    pub const fn is_private(self) -> bool {
        self.0 < 32
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Trigger {
    Edge,
    Level,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IrqState {
    pub enabled: bool,
    /// The edge latch, or pending set by software (ISPENDR, SGI generation).
    pub pending_latch: bool,
    /// The input line of a level-sensitive interrupt.
    pub line_level: bool,
    pub active: bool,
    pub priority: u8,
    pub group1: bool,
    pub trigger: Trigger,
    /// Hardware-mapped: the physical INTID the guest's deactivation also deactivates.
    pub hw: Option<u32>,
}

impl Default for IrqState {
    fn default() -> Self {
        IrqState {
            enabled: false,
            pending_latch: false,
            line_level: false,
            active: false,
            priority: 0,
            group1: false,
            trigger: Trigger::Level,
            hw: None,
        }
    }
}

impl IrqState {
    pub const fn pending(&self) -> bool {
        self.pending_latch || (matches!(self.trigger, Trigger::Level) && self.line_level)
    }
    /// Pending or active and enabled: it belongs in a list register.
    pub const fn deliverable(&self) -> bool {
        self.enabled && (self.pending() || self.active)
    }
}
