//! Feature bits and status bits shared by the transport and the devices (virtio 1.2, 2.1, 2.2, 6).

/// Device status bits (2.1).
pub mod status {
    pub const ACKNOWLEDGE: u32 = 1;
    pub const DRIVER: u32 = 2;
    pub const DRIVER_OK: u32 = 4;
    pub const FEATURES_OK: u32 = 8;
    /// Set by the device when it hit an error it cannot recover from (2.1.2).
    pub const DEVICE_NEEDS_RESET: u32 = 64;
    pub const FAILED: u32 = 128;
}

/// Reserved feature bits the transport offers for every device (6).
pub const VIRTIO_F_INDIRECT_DESC: u64 = 1 << 28;
pub const VIRTIO_F_EVENT_IDX: u64 = 1 << 29;
pub const VIRTIO_F_VERSION_1: u64 = 1 << 32;

/// The transport's own offer, added to each device's bits.
pub const TRANSPORT_FEATURES: u64 = VIRTIO_F_INDIRECT_DESC | VIRTIO_F_EVENT_IDX | VIRTIO_F_VERSION_1;

/// Interrupt status bits (4.2.2, InterruptStatus).
pub mod interrupt {
    /// Used buffer notification.
    pub const USED_BUFFER: u32 = 1;
    /// Configuration change notification (also sent after DEVICE_NEEDS_RESET, 2.1.2).
    pub const CONFIG_CHANGE: u32 = 2;
}
