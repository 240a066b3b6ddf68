//! The MMIO bus: which emulated device answers a trapped access at an IPA; and
//! `MmioDispatch`, the seam between the data-abort handler and a VM's devices.
//!
//! A device sees offsets within its window, never IPAs, and answers with a value or an
//! `MmioError`, which the caller turns into a synchronous external abort for the guest.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use stage2::{Ipa, IpaRange};

use crate::syndrome::AccessWidth;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MmioError {
    /// No register at this offset.
    NoRegister {
        offset: u64,
    },
    /// The register exists but not for this access width.
    BadWidth {
        offset: u64,
        width: AccessWidth,
    },
    /// The register cannot be written (or read).
    ReadOnly {
        offset: u64,
    },
    WriteOnly {
        offset: u64,
    },
    /// No device is mapped at this IPA.
    Unmapped {
        ipa: Ipa,
    },
}

impl fmt::Display for MmioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRegister { offset } => write!(f, "no register at offset {offset:#x}"),
            Self::BadWidth { offset, width } => {
                write!(f, "register at offset {offset:#x} does not allow {}-byte accesses", width.bytes())
            }
            Self::ReadOnly { offset } => write!(f, "register at offset {offset:#x} is read-only"),
            Self::WriteOnly { offset } => write!(f, "register at offset {offset:#x} is write-only"),
            Self::Unmapped { ipa } => write!(f, "no memory or device at IPA {:#x}", ipa.0),
        }
    }
}

/// An emulated device register window.
pub trait MmioDevice {
    fn name(&self) -> &'static str;
    fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u64, MmioError>;
    fn write(&mut self, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError>;
    /// An access by vCPU `vcpu`: devices with registers banked per CPU (the GICv2
    /// distributor) override these.
    fn read_by(&mut self, _vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.read(offset, width)
    }
    fn write_by(&mut self, _vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.write(offset, width, value)
    }
}

/// A device on a VM's bus, shared by the CPUs of the VM's vCPUs: it locks what it must
/// itself, so the bus, fixed once the VM is built, takes no lock, and accesses to two
/// devices never wait for each other.
pub trait BusDevice: Send + Sync {
    fn name(&self) -> &'static str;
    /// A read by vCPU `vcpu` at `offset` in the device's window.
    fn read(&self, vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError>;
    /// A write by vCPU `vcpu` at `offset` in the device's window.
    fn write(&self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError>;
}

/// A device model behind a lock, as a bus device.
pub struct Locked<T>(crate::sync::Mutex<T>);

impl<T> Locked<T> {
    pub fn new(device: T) -> Self {
        Locked(crate::sync::Mutex::new(device))
    }
    /// The model, locked.
    pub fn lock(&self) -> crate::sync::MutexGuard<'_, T> {
        self.0.lock()
    }
}

impl<T: MmioDevice + Send> BusDevice for Locked<T> {
    fn name(&self) -> &'static str {
        self.0.lock().name()
    }
    fn read(&self, vcpu: usize, offset: u64, width: AccessWidth) -> Result<u64, MmioError> {
        self.0.lock().read_by(vcpu, offset, width)
    }
    fn write(&self, vcpu: usize, offset: u64, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        self.0.lock().write_by(vcpu, offset, width, value)
    }
}

/// The emulated devices of one VM, by IPA window; fixed once the VM is built. The windows
/// are kept in the order of their IPAs (they never overlap), so a trapped access finds its
/// window by a binary search, not by testing each window in turn; and the window found last
/// is tried first, since a driver's accesses come in runs to one device (a QueueNotify
/// after another, an InterruptACK in each interrupt).
#[derive(Default)]
pub struct MmioBus {
    windows: Vec<(IpaRange, Box<dyn BusDevice>)>,
    /// The index of the window found last, by any vCPU: only a hint, each use checks that
    /// the window holds the IPA.
    last: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct WindowOverlap {
    pub existing: &'static str,
}

impl MmioBus {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn attach(&mut self, window: IpaRange, device: Box<dyn BusDevice>) -> Result<(), WindowOverlap> {
        if let Some((_, d)) = self.windows.iter().find(|(w, _)| w.overlaps(&window)) {
            return Err(WindowOverlap { existing: d.name() });
        }
        let at = self.windows.partition_point(|(w, _)| w.start() < window.start());
        self.windows.insert(at, (window, device));
        Ok(())
    }

    /// The window that holds `ipa`: the one found last if it does, else the last one
    /// starting at or below it, if it reaches it.
    fn window(&self, ipa: Ipa) -> Option<&(IpaRange, Box<dyn BusDevice>)> {
        let last = self.last.load(Ordering::Relaxed);
        if let Some(hit) = self.windows.get(last).filter(|(w, _)| w.contains(ipa)) {
            return Some(hit);
        }
        let i = self.windows.partition_point(|(w, _)| w.start() <= ipa).checked_sub(1)?;
        let found = self.windows.get(i).filter(|(w, _)| w.contains(ipa))?;
        self.last.store(i, Ordering::Relaxed);
        Some(found)
    }

    fn find(&self, ipa: Ipa, width: AccessWidth) -> Result<(u64, &dyn BusDevice), MmioError> {
        let (window, device) = self.window(ipa).ok_or(MmioError::Unmapped { ipa })?;
        let offset = ipa.0 - window.start().0;
        // An access that straddles the end of the window is not the device's.
        if offset + width.bytes() > window.size() {
            return Err(MmioError::BadWidth { offset, width });
        }
        Ok((offset, device.as_ref()))
    }

    /// A read by vCPU `vcpu` of the device at `ipa` (the load narrows the value to its width).
    /// Out of line, as the vGIC's: the exit path that calls it is inlined into the run loop.
    #[inline(never)]
    pub fn read(&self, vcpu: usize, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError> {
        let (offset, device) = self.find(ipa, width)?;
        device.read(vcpu, offset, width)
    }

    /// A write by vCPU `vcpu` of the device at `ipa`.
    #[inline(never)]
    pub fn write(&self, vcpu: usize, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        let (offset, device) = self.find(ipa, width)?;
        device.write(vcpu, offset, width, value & width.mask())
    }

    /// The name of the device at `ipa`, for log lines.
    pub fn device_name(&self, ipa: Ipa) -> Option<&'static str> {
        self.window(ipa).map(|(_, d)| d.name())
    }
}

/// Where a VM's trapped MMIO accesses go: its `MmioBus`, behind whatever the VM puts first
/// (the runtime sends the vGIC's fixed windows straight to the vGIC, without the bus's
/// lookup).
pub trait MmioDispatch {
    /// A read by vCPU `vcpu` (the load narrows the value to its width).
    fn read(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError>;
    /// A write by vCPU `vcpu` of `value` narrowed to `width`.
    fn write(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError>;
    /// The name of the device at `ipa`, for log lines.
    fn device_name(&mut self, ipa: Ipa) -> Option<&'static str>;
    /// A stage-2 fault at `ipa`, which no device answers: whether it is the VM's RAM, now
    /// zeroed and mapped (by this first touch, or by another vCPU's or a device's just
    /// before), so the access is to be made again (docs/capability-model.md, "Zeroing").
    /// Only a VM whose RAM is zeroed on first touch says yes.
    fn first_touch(&mut self, _ipa: Ipa) -> bool {
        false
    }
}

impl MmioDispatch for MmioBus {
    fn read(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth) -> Result<u64, MmioError> {
        MmioBus::read(self, vcpu, ipa, width)
    }
    fn write(&mut self, vcpu: usize, ipa: Ipa, width: AccessWidth, value: u64) -> Result<(), MmioError> {
        MmioBus::write(self, vcpu, ipa, width, value)
    }
    fn device_name(&mut self, ipa: Ipa) -> Option<&'static str> {
        MmioBus::device_name(self, ipa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(u64);
    impl MmioDevice for Scratch {
        fn name(&self) -> &'static str {
            "scratch"
        }
        fn read(&mut self, offset: u64, _: AccessWidth) -> Result<u64, MmioError> {
            if offset == 0 {
                Ok(self.0)
            } else {
                Err(MmioError::NoRegister { offset })
            }
        }
        fn write(&mut self, offset: u64, _: AccessWidth, value: u64) -> Result<(), MmioError> {
            if offset == 0 {
                self.0 = value;
                Ok(())
            } else {
                Err(MmioError::NoRegister { offset })
            }
        }
    }

    fn bus() -> MmioBus {
        let mut bus = MmioBus::new();
        bus.attach(IpaRange::new(Ipa(0x1000), 0x1000).unwrap(), Box::new(Locked::new(Scratch(0)))).unwrap();
        bus
    }

    #[test]
    fn accesses_reach_the_device_at_an_offset_and_writes_are_narrowed() {
        let bus = bus();
        bus.write(0, Ipa(0x1000), AccessWidth::Halfword, 0x1234_5678).unwrap();
        assert_eq!(bus.read(0, Ipa(0x1000), AccessWidth::Doubleword), Ok(0x5678));
        assert_eq!(bus.read(0, Ipa(0x1004), AccessWidth::Word), Err(MmioError::NoRegister { offset: 4 }));
    }

    #[test]
    fn an_ipa_outside_every_window_is_unmapped() {
        let bus = bus();
        assert_eq!(bus.read(0, Ipa(0x2000), AccessWidth::Word), Err(MmioError::Unmapped { ipa: Ipa(0x2000) }));
        assert_eq!(bus.write(0, Ipa(0xfff), AccessWidth::Byte, 1), Err(MmioError::Unmapped { ipa: Ipa(0xfff) }));
    }

    #[test]
    fn an_access_straddling_the_window_end_is_refused() {
        let bus = bus();
        assert_eq!(
            bus.read(0, Ipa(0x1ffc), AccessWidth::Doubleword),
            Err(MmioError::BadWidth { offset: 0xffc, width: AccessWidth::Doubleword })
        );
    }

    struct Named(&'static str);
    impl MmioDevice for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn read(&mut self, offset: u64, _: AccessWidth) -> Result<u64, MmioError> {
            Ok(offset)
        }
        fn write(&mut self, _: u64, _: AccessWidth, _: u64) -> Result<(), MmioError> {
            Ok(())
        }
    }

    /// Windows attached in any order, with gaps between them: every IPA reaches the window
    /// that holds it and only that one, as a test of each window in turn finds it; the gaps,
    /// the IPAs below the first and above the last, and an access running past a window's
    /// end reach none (the binary search's corners).
    #[test]
    fn every_ipa_reaches_the_window_that_holds_it_whatever_the_attach_order() {
        let windows = [(0x9000, 0x1000, "c"), (0x1000, 0x200, "a"), (0x1400, 0x200, "b"), (0x1200, 0x100, "d")];
        let mut bus = MmioBus::new();
        for (start, size, name) in windows {
            bus.attach(IpaRange::new(Ipa(start), size).unwrap(), Box::new(Locked::new(Named(name)))).unwrap();
        }
        let ipas: Vec<u64> = (0..0xb000)
            .step_by(0x40)
            .chain([0x11ff, 0x1200, 0x12ff, 0x1300, 0x13ff, 0x9fff, 0xa000, u64::MAX])
            .collect();
        // In order, then scrambled: the window found last is tried first, so each IPA is
        // looked up right after one of every other window (or of a gap) as well.
        let scrambled = (0..ipas.len()).map(|i| ipas[i * 97 % ipas.len()]);
        for ipa in ipas.iter().copied().chain(scrambled) {
            let holder = windows.iter().find(|(start, size, _)| (*start..*start + *size).contains(&ipa));
            assert_eq!(bus.device_name(Ipa(ipa)), holder.map(|w| w.2), "{ipa:#x}");
            let read = bus.read(0, Ipa(ipa), AccessWidth::Byte);
            match holder {
                Some(&(start, _, _)) => assert_eq!(read, Ok(ipa - start), "{ipa:#x}"),
                None => assert_eq!(read, Err(MmioError::Unmapped { ipa: Ipa(ipa) }), "{ipa:#x}"),
            }
        }
        assert_eq!(
            bus.read(0, Ipa(0x12fc), AccessWidth::Doubleword),
            Err(MmioError::BadWidth { offset: 0xfc, width: AccessWidth::Doubleword })
        );
        assert_eq!(
            MmioBus::new().read(0, Ipa(0x1000), AccessWidth::Word),
            Err(MmioError::Unmapped { ipa: Ipa(0x1000) })
        );
    }

    #[test]
    fn overlapping_windows_are_refused() {
        let mut bus = bus();
        let err =
            bus.attach(IpaRange::new(Ipa(0x1800), 0x1000).unwrap(), Box::new(Locked::new(Scratch(0)))).unwrap_err();
        assert_eq!(err, WindowOverlap { existing: "scratch" });
    }
}
