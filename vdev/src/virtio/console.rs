//! The console device (virtio 1.2, 5.3; device ID 3): one port, no features. What the guest
//! transmits goes to a `ConsoleBackend`; what the user types is delivered into the guest's
//! receive buffers, or held in a bounded backlog until the guest adds some.

use alloc::collections::VecDeque;

use crate::virtio::chain::Chain;
use crate::virtio::device::{read_config_image, ConfigError, NeedsReset, QueueAccess, VirtioDevice};
use crate::virtio::incident::DeviceIncident;
use crate::virtio::transport::VirtioMmio;
use crate::virtio::GuestMemory;

/// Queue indices (5.3.2): receiveq0 and transmitq0 only, no multiport.
pub const RECEIVEQ: u16 = 0;
pub const TRANSMITQ: u16 = 1;
/// QueueNumMax of both queues.
pub const QUEUE_SIZE: u16 = 128;
/// Bytes typed while the guest has no receive buffer that are kept; the rest are dropped.
pub const BACKLOG_CAPACITY: usize = 4096;
/// Longest transmit chain accepted: more than any console write, small enough to bound a notify.
pub const MAX_TX_CHAIN: u64 = 64 * 1024;
/// Bytes written out per notify or per `continue_work`: a guest's output never keeps the
/// exit that carries it for long (the hypervisor's UART takes a few microseconds a byte under
/// QEMU; one exit once printed 1 MiB in 3.4 s).
pub const TX_BUDGET: u64 = 1024;
/// Bytes moved per step when streaming a transmit chain to the backend.
const CHUNK: usize = 256;
/// Configuration space: le16 cols, le16 rows, le32 max_nr_ports, le32 emerg_wr (5.3.4).
const CONFIG_LEN: usize = 12;

/// Where the guest's console output goes.
pub trait ConsoleBackend {
    fn write(&mut self, bytes: &[u8]);
}

/// Counters for the hypervisor's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsoleStats {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    /// Typed bytes dropped because the backlog was full.
    pub rx_dropped: u64,
    /// Chains returned unused because they were malformed.
    pub bad_chains: u64,
}

/// The virtio console device model.
pub struct VirtioConsole<C: ConsoleBackend> {
    backend: C,
    backlog: VecDeque<u8>,
    stats: ConsoleStats,
    /// The transmit chain being written out, and how much of it is done.
    sending: Option<(Chain, u64)>,
    /// Transmit buffers may wait in the queue (the last turn ran out of budget).
    more_to_send: bool,
}

impl<C: ConsoleBackend> VirtioConsole<C> {
    pub fn new(backend: C) -> Self {
        VirtioConsole {
            backend,
            backlog: VecDeque::new(),
            stats: ConsoleStats::default(),
            sending: None,
            more_to_send: false,
        }
    }

    pub fn backend(&self) -> &C {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut C {
        &mut self.backend
    }

    pub fn stats(&self) -> ConsoleStats {
        self.stats
    }

    /// Typed bytes waiting for a receive buffer.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// A chain with a buffer outside RAM or going the wrong way; `None` if usable.
    fn malformed(chain: &Chain, queue: u16, writable: bool) -> Option<DeviceIncident> {
        let head = chain.head;
        if let Some(b) = chain.outside_ram() {
            return Some(DeviceIncident::DescriptorOutsideRam {
                queue,
                descriptor: b.descriptor,
                addr: b.addr,
                len: b.len,
            });
        }
        if writable && chain.readable_len() != 0 {
            let what = "a receive buffer is device-readable; the device must write into it";
            return Some(DeviceIncident::WrongDirection { queue, head, what });
        }
        if !writable && chain.writable_len() != 0 {
            let what = "a transmit buffer is device-writable; the device must read it";
            return Some(DeviceIncident::WrongDirection { queue, head, what });
        }
        None
    }

    /// Streams one transmit chain to the backend in small chunks (no allocation).
    /// Checks a transmit chain: false (with an incident) if it is malformed.
    fn sendable(&mut self, chain: &Chain, q: &mut QueueAccess<'_>) -> bool {
        let incident = Self::malformed(chain, TRANSMITQ, false).or_else(|| {
            let len = chain.readable_len();
            (len > MAX_TX_CHAIN).then_some(DeviceIncident::BadLength {
                queue: TRANSMITQ,
                head: chain.head,
                what: "a console transmit chain may hold at most 64 KiB",
                len,
            })
        });
        if let Some(incident) = incident {
            q.incident(incident);
            self.stats.bad_chains += 1;
            return false;
        }
        true
    }

    /// Writes out transmit buffers until `TX_BUDGET` bytes are out: the chain in progress
    /// first, then new ones. A chain is used when all of it is out; what the budget did not
    /// cover waits for `continue_work` (the next exit of the VM), so one exit never prints
    /// more than the budget, however much the guest queued.
    fn send(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        let mut budget = TX_BUDGET;
        loop {
            let (chain, done) = match self.sending.take() {
                Some(sending) => sending,
                None => {
                    let Some(chain) = q.pop(TRANSMITQ)? else {
                        self.more_to_send = false;
                        return Ok(());
                    };
                    if !self.sendable(&chain, q) {
                        q.push_used(TRANSMITQ, chain.head, 0)?;
                        continue;
                    }
                    (chain, 0)
                }
            };
            if budget == 0 {
                self.sending = Some((chain, done));
                self.more_to_send = true;
                return Ok(());
            }
            let len = chain.readable_len();
            let n = (len - done).min(budget);
            let mut chunk = [0u8; CHUNK];
            let mut at = done;
            while at < done + n {
                let part_len = (done + n - at).min(CHUNK as u64) as usize;
                let Some(part) = chunk.get_mut(..part_len) else { break };
                if !chain.read_bytes(q.mem(), at, part) {
                    break;
                }
                self.backend.write(part);
                self.stats.tx_bytes += part_len as u64;
                at += part_len as u64;
            }
            budget -= n;
            if done + n < len && at == done + n {
                self.sending = Some((chain, done + n));
            } else {
                q.push_used(TRANSMITQ, chain.head, 0)?;
            }
        }
    }

    fn deliver(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        while !self.backlog.is_empty() {
            let Some(chain) = q.pop(RECEIVEQ)? else {
                return Ok(());
            };
            if let Some(incident) = Self::malformed(&chain, RECEIVEQ, true) {
                q.incident(incident);
                self.stats.bad_chains += 1;
                q.push_used(RECEIVEQ, chain.head, 0)?;
                continue;
            }
            let n = usize::try_from(chain.writable_len()).unwrap_or(usize::MAX).min(self.backlog.len());
            let (first, second) = self.backlog.as_slices();
            let a = first.len().min(n);
            let b = n - a;
            let written = chain.write_bytes(q.mem(), 0, &first[..a])
                && second.get(..b).is_some_and(|s| chain.write_bytes(q.mem(), a as u64, s));
            if !written {
                q.push_used(RECEIVEQ, chain.head, 0)?;
                continue;
            }
            self.backlog.drain(..n);
            self.stats.rx_bytes += n as u64;
            // n <= backlog capacity, so it fits in u32.
            q.push_used(RECEIVEQ, chain.head, n as u32)?;
        }
        Ok(())
    }
}

impl<C: ConsoleBackend> VirtioDevice for VirtioConsole<C> {
    fn device_id(&self) -> u32 {
        3
    }

    fn device_features(&self) -> u64 {
        0
    }

    fn num_queues(&self) -> u16 {
        2
    }

    fn queue_max_size(&self, _queue: u16) -> u16 {
        QUEUE_SIZE
    }

    fn read_config(&self, offset: u64, width: u8) -> Result<u64, ConfigError> {
        // cols, rows and max_nr_ports are meaningful only with features we do not offer: zero.
        read_config_image(&[0u8; CONFIG_LEN], &[], offset, width)
    }

    fn queue_notify(&mut self, queue: u16, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        match queue {
            RECEIVEQ => self.deliver(q),
            TRANSMITQ => self.send(q),
            _ => Ok(()),
        }
    }

    fn has_pending_work(&self) -> bool {
        self.more_to_send
    }

    fn continue_work(&mut self, q: &mut QueueAccess<'_>) -> Result<(), NeedsReset> {
        self.send(q)
    }

    /// The driver's reset keeps the backlog: what the user typed while the guest's driver was
    /// (re)starting still reaches it once it has receive buffers. A transmit chain in
    /// progress belongs to the old queue: it is forgotten.
    fn reset(&mut self) {
        self.sending = None;
        self.more_to_send = false;
    }

    fn power_on_reset(&mut self) {
        self.backlog.clear();
        self.reset();
    }
}

impl<C: ConsoleBackend> VirtioMmio<VirtioConsole<C>> {
    /// Bytes typed by the user: delivered into receive buffers now, the rest kept in a bounded
    /// backlog (BACKLOG_CAPACITY bytes, excess dropped and counted) and delivered when the guest
    /// adds buffers. Returns how many were accepted (delivered or queued).
    pub fn receive_input(&mut self, mem: &dyn GuestMemory, bytes: &[u8]) -> usize {
        let mut accepted = 0;
        loop {
            let free = BACKLOG_CAPACITY.saturating_sub(self.device.backlog.len());
            let take = free.min(bytes.len() - accepted);
            self.device.backlog.extend(&bytes[accepted..accepted + take]);
            accepted += take;
            let before = self.device.backlog.len();
            self.deliver_backlog(mem);
            // Stop when everything is in, or when delivering freed no room (no buffers left).
            if accepted == bytes.len() || self.device.backlog.len() == before {
                break;
            }
        }
        self.device.stats.rx_dropped += (bytes.len() - accepted) as u64;
        accepted
    }

    fn deliver_backlog(&mut self, mem: &dyn GuestMemory) {
        if self.running() && self.queue_ready(RECEIVEQ) {
            // A driver bug became DEVICE_NEEDS_RESET inside `run`; the bytes stay in the backlog.
            let _ = self.run(mem, |device, q| device.deliver(q));
        }
    }
}
