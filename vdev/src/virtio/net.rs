//! The network device (virtio 1.2, 5.1; device ID 1): a MAC address, link always up, no
//! offloads and no mergeable buffers. Transmitted frames go to a `NetBackend` without their
//! virtio_net_hdr; frames from outside are written into the guest's receive buffers.

use alloc::vec::Vec;
use core::fmt;

use crate::virtio::chain::Chain;
use crate::virtio::device::{read_config_image, ConfigError, NeedsReset, QueueAccess, VirtioDevice};
use crate::virtio::incident::DeviceIncident;
use crate::virtio::transport::VirtioMmio;
use crate::virtio::GuestMemory;

/// Feature bits (5.1.3).
pub const VIRTIO_NET_F_MAC: u64 = 1 << 5;
pub const VIRTIO_NET_F_STATUS: u64 = 1 << 16;
/// Link status bit of the `status` config field (5.1.4).
pub const VIRTIO_NET_S_LINK_UP: u16 = 1;
/// struct virtio_net_hdr with VIRTIO_F_VERSION_1 (5.1.6): 12 bytes, num_buffers included.
pub const NET_HDR_LEN: usize = 12;
/// Largest frame accepted either way: 65535 of IP payload plus Ethernet and VLAN headers.
pub const MAX_FRAME: usize = 65550;
/// QueueNumMax of both queues.
pub const QUEUE_SIZE: u16 = 256;
/// Queue indices (5.1.2).
pub const RECEIVEQ: u16 = 0;
pub const TRANSMITQ: u16 = 1;
/// Configuration space: mac[6], le16 status, le16 max_virtqueue_pairs, le16 mtu (5.1.4).
const CONFIG_LEN: usize = 12;

/// Where transmitted frames go (usually a `Switch` port).
pub trait NetBackend {
    /// `frame` is an Ethernet frame without the virtio_net_hdr. False: it was dropped (the
    /// backend had no memory for it); the device counts it in `tx_dropped`.
    fn transmit(&mut self, frame: &[u8]) -> bool;

    /// Whether it can take a frame of up to MAX_FRAME bytes now. When it cannot, the device
    /// leaves the rest of the transmit queue where it is, for `continue_work` once the
    /// backend has passed its frames on: what one exit copies is bounded, and nothing is
    /// dropped for it.
    fn ready(&self) -> bool {
        true
    }
}

/// Why a received frame was not delivered (it was dropped and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxError {
    /// The driver has not set DRIVER_OK, the receive queue is not ready, or the device needs a reset.
    NotReady,
    /// The guest has no receive buffer available.
    NoBuffer,
    /// The frame is larger than MAX_FRAME or than the next receive buffer.
    TooBig { len: usize, room: u64 },
    /// The next receive buffer was malformed (outside RAM or device-readable); it was returned empty.
    BadBuffer,
    /// The receive ring itself was malformed: the device now needs a reset.
    NeedsReset,
}

impl fmt::Display for RxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RxError::NotReady => write!(f, "frame dropped: the guest's network driver is not running"),
            RxError::NoBuffer => write!(f, "frame dropped: the guest has no receive buffer available"),
            RxError::TooBig { len, room } => {
                write!(f, "frame of {len} bytes dropped: the receive buffer holds {room} bytes with the header")
            }
            RxError::BadBuffer => write!(f, "frame dropped: the guest's receive buffer is malformed (see incidents)"),
            RxError::NeedsReset => write!(f, "frame dropped: the receive ring is malformed; the device needs a reset"),
        }
    }
}

/// Counters for the hypervisor's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub tx_frames: u64,
    pub tx_dropped: u64,
    pub rx_frames: u64,
    pub rx_dropped_not_ready: u64,
    pub rx_dropped_no_buffer: u64,
    pub rx_dropped_too_big: u64,
    pub rx_dropped_bad_buffer: u64,
}

/// The virtio network device model.
pub struct VirtioNet<N: NetBackend> {
    mac: [u8; 6],
    backend: N,
    stats: NetStats,
    /// Reused for every transmitted frame (at most NET_HDR_LEN + MAX_FRAME bytes).
    tx_buffer: Vec<u8>,
    /// The backend was not ready: transmit chains may wait in the queue.
    more_to_send: bool,
}

impl<N: NetBackend> VirtioNet<N> {
    pub fn new(mac: [u8; 6], backend: N) -> Self {
        VirtioNet { mac, backend, stats: NetStats::default(), tx_buffer: Vec::new(), more_to_send: false }
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub fn backend(&self) -> &N {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut N {
        &mut self.backend
    }

    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Transmit chains while the backend is ready for a frame; the rest wait for
    /// `continue_work`.
    fn send(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        self.more_to_send = false;
        loop {
            if !self.backend.ready() {
                self.more_to_send = true;
                return Ok(());
            }
            let Some(chain) = q.pop(TRANSMITQ)? else { return Ok(()) };
            self.transmit(&chain, q);
            // Transmit buffers are only read: the used length is 0 (2.7.8).
            q.push_used(TRANSMITQ, chain.head, 0)?;
        }
    }

    /// One transmit chain: header then frame, all device-readable (5.1.6.2).
    fn transmit(&mut self, chain: &Chain, q: &mut QueueAccess<'_>) {
        let head = chain.head;
        let queue = TRANSMITQ;
        let incident = if let Some(b) = chain.outside_ram() {
            Some(DeviceIncident::DescriptorOutsideRam { queue, descriptor: b.descriptor, addr: b.addr, len: b.len })
        } else if chain.writable_len() != 0 {
            let what = "a transmit buffer is device-writable; the device must read it";
            Some(DeviceIncident::WrongDirection { queue, head, what })
        } else {
            let len = chain.readable_len();
            if len < NET_HDR_LEN as u64 || len > (NET_HDR_LEN + MAX_FRAME) as u64 {
                let what = "a transmitted frame must hold the 12-byte header and at most 65550 bytes";
                Some(DeviceIncident::BadLength { queue, head, what, len })
            } else {
                // Bounded just above, so the length fits and the buffer stays small; grown
                // fallibly all the same (out of heap drops the frame).
                let frame_len = len as usize - NET_HDR_LEN;
                let grown = frame_len <= self.tx_buffer.len()
                    || self.tx_buffer.try_reserve_exact(frame_len - self.tx_buffer.len()).is_ok();
                if grown {
                    self.tx_buffer.resize(frame_len, 0);
                }
                if !grown {
                    Some(DeviceIncident::RequestFailed { queue, head, what: "no memory for the frame" })
                } else if !chain.read_bytes(q.mem(), NET_HDR_LEN as u64, &mut self.tx_buffer) {
                    Some(DeviceIncident::RequestFailed { queue, head, what: "the frame could not be read" })
                } else if self.backend.transmit(&self.tx_buffer) {
                    self.stats.tx_frames += 1;
                    return;
                } else {
                    Some(DeviceIncident::RequestFailed { queue, head, what: "no memory to pass the frame on" })
                }
            }
        };
        if let Some(incident) = incident {
            q.incident(incident);
        }
        self.stats.tx_dropped += 1;
    }

    /// Writes a frame into the next receive buffer; `Ok(Err(_))` is a dropped frame.
    fn receive(&mut self, frame: &[u8], q: &mut QueueAccess<'_>) -> Result<Result<(), RxError>, NeedsReset> {
        let Some(chain) = q.pop(RECEIVEQ)? else {
            self.stats.rx_dropped_no_buffer += 1;
            return Ok(Err(RxError::NoBuffer));
        };
        let head = chain.head;
        let queue = RECEIVEQ;
        let bad = if let Some(b) = chain.outside_ram() {
            Some(DeviceIncident::DescriptorOutsideRam { queue, descriptor: b.descriptor, addr: b.addr, len: b.len })
        } else if chain.readable_len() != 0 {
            let what = "a receive buffer is device-readable; the device must write into it";
            Some(DeviceIncident::WrongDirection { queue, head, what })
        } else {
            None
        };
        if let Some(incident) = bad {
            q.incident(incident);
            q.push_used(queue, head, 0)?;
            self.stats.rx_dropped_bad_buffer += 1;
            return Ok(Err(RxError::BadBuffer));
        }
        let room = chain.writable_len();
        let need = NET_HDR_LEN + frame.len();
        if room < need as u64 {
            // Leave the buffer for a smaller frame.
            q.unpop(queue);
            self.stats.rx_dropped_too_big += 1;
            return Ok(Err(RxError::TooBig { len: frame.len(), room }));
        }
        // 5.1.6.4: no offloads, so all fields zero but num_buffers, which is 1 (5.1.6.3.2).
        let mut header = [0u8; NET_HDR_LEN];
        header[10] = 1;
        let mem = q.mem();
        if !chain.write_bytes(mem, 0, &header) || !chain.write_bytes(mem, NET_HDR_LEN as u64, frame) {
            q.incident(DeviceIncident::RequestFailed { queue, head, what: "the receive buffer could not be written" });
            q.push_used(queue, head, 0)?;
            self.stats.rx_dropped_bad_buffer += 1;
            return Ok(Err(RxError::BadBuffer));
        }
        // need <= MAX_FRAME + 12 (checked by the caller), so it fits in u32.
        q.push_used(queue, head, need as u32)?;
        self.stats.rx_frames += 1;
        Ok(Ok(()))
    }
}

impl<N: NetBackend> VirtioDevice for VirtioNet<N> {
    fn device_id(&self) -> u32 {
        1
    }

    fn device_features(&self) -> u64 {
        VIRTIO_NET_F_MAC | VIRTIO_NET_F_STATUS
    }

    fn num_queues(&self) -> u16 {
        2
    }

    fn queue_max_size(&self, _queue: u16) -> u16 {
        QUEUE_SIZE
    }

    fn read_config(&self, offset: u64, width: u8) -> Result<u64, ConfigError> {
        let mut c = [0u8; CONFIG_LEN];
        c[0..6].copy_from_slice(&self.mac);
        c[6..8].copy_from_slice(&VIRTIO_NET_S_LINK_UP.to_le_bytes());
        // max_virtqueue_pairs: one pair (meaningful only with VIRTIO_NET_F_MQ, not offered).
        c[8..10].copy_from_slice(&1u16.to_le_bytes());
        read_config_image(&c, &[], offset, width)
    }

    fn queue_notify(&mut self, queue: u16, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        // Receive buffers are only taken when a frame arrives.
        if queue != TRANSMITQ {
            return Ok(());
        }
        self.send(q)
    }

    fn notify_needed(&self, queue: u16) -> bool {
        queue == TRANSMITQ
    }

    fn has_pending_work(&self) -> bool {
        self.more_to_send
    }

    fn continue_work(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        self.send(q)
    }

    fn reset(&mut self) {
        self.more_to_send = false;
    }
}

impl<N: NetBackend> VirtioMmio<VirtioNet<N>> {
    /// A frame from outside (switch): written into the next receive buffer with a zeroed
    /// virtio_net_hdr (12 bytes, 5.1.6, num_buffers=1), used ring updated, interrupt raised per
    /// the EVENT_IDX rules. A dropped frame is counted in the device's stats.
    pub fn receive_frame(&mut self, mem: &dyn GuestMemory, frame: &[u8]) -> Result<(), RxError> {
        if !self.running() || !self.queue_ready(RECEIVEQ) {
            self.device.stats.rx_dropped_not_ready += 1;
            return Err(RxError::NotReady);
        }
        if frame.len() > MAX_FRAME {
            self.device.stats.rx_dropped_too_big += 1;
            return Err(RxError::TooBig { len: frame.len(), room: 0 });
        }
        match self.run(mem, |device, q| device.receive(frame, q)) {
            Ok(result) => result,
            Err(NeedsReset) => Err(RxError::NeedsReset),
        }
    }
}
