//! Stopping the machine once every VM has ended, or when nothing can run: PSCI SYSTEM_OFF
//! through the firmware when it has PSCI; otherwise the board's own power controller, if
//! the device tree names one this hypervisor drives (the BCM2835 power manager's watchdog,
//! whose halt the Raspberry Pi's firmware honours and QEMU's `raspi4b` turns into a
//! shutdown: hyp_core::bcm2835_pm). When neither stops it, the caller is told why, says so
//! on the console and halts its CPU: the machine is then safe to switch off.

use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use hyp_core::bcm2835_pm::{self, PmRegisters};
use hyp_core::platform::{Platform, PowerController};
use hyp_runtime::Board;

use crate::firmware::PsciError;
use crate::image::ArmImage;
use crate::mmio::Frame;

/// The BCM2835 power manager's `pm` window, or 0 without one.
static BCM2835_PM: AtomicUsize = AtomicUsize::new(0);

/// How long to wait for the watchdog to stop the machine: its 10 ticks are about 150
/// microseconds; this is tens of milliseconds on any core.
const WATCHDOG_WAIT_SPINS: u32 = 50_000_000;

/// Once, by the boot CPU: the board's power controller, from its device tree.
pub fn init(platform: &Platform<'_>) {
    if let Some(PowerController::Bcm2835Pm { registers }) = platform.power_controller {
        BCM2835_PM.store(registers.base as usize, Ordering::Relaxed);
    }
}

/// Why the machine is still running after `off`.
#[derive(Debug)]
pub enum StillOn {
    /// The firmware has PSCI and SYSTEM_OFF returned (with this error, if it gave one).
    PsciRefused(Option<PsciError>),
    /// The power manager's watchdog was armed and the machine did not stop.
    WatchdogIgnored,
    /// No PSCI and no power controller this hypervisor drives.
    NoWayToPowerOff,
}

impl fmt::Display for StillOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PsciRefused(Some(e)) => write!(f, "the firmware did not power off: PSCI SYSTEM_OFF: {e}"),
            Self::PsciRefused(None) => write!(f, "the firmware did not power off: PSCI SYSTEM_OFF returned"),
            Self::WatchdogIgnored => write!(f, "the BCM2835 power manager's watchdog did not stop the machine"),
            Self::NoWayToPowerOff => write!(
                f,
                "this machine cannot be powered off: its firmware has no PSCI and its device tree names no \
                 power controller this hypervisor drives"
            ),
        }
    }
}

/// The PM block through its frame.
struct PmFrame(Frame);

impl PmRegisters for PmFrame {
    fn read(&mut self, offset: u64) -> u32 {
        self.0.read32(offset as usize)
    }
    fn write(&mut self, offset: u64, value: u32) {
        self.0.write32(offset as usize, value)
    }
}

/// Powers the machine off; returns only if it is still on, and why.
pub fn off<I: ArmImage>() -> StillOn {
    if crate::firmware::has_psci() {
        // SYSTEM_OFF does not return when it works.
        return StillOn::PsciRefused(crate::firmware::system_off().err());
    }
    let base = BCM2835_PM.load(Ordering::Relaxed);
    if base == 0 {
        return StillOn::NoWayToPowerOff;
    }
    <I::Board as Board>::print(format_args!(
        "hypervisor: no PSCI: halting the machine through the BCM2835 power manager's watchdog at {base:#x}"
    ));
    // SAFETY: the device tree's PM window, which the hypervisor's identity map maps as
    // device memory (hyp_map); `bcm2835_pm` reaches RSTC, RSTS and WDOG, inside it.
    let mut pm = PmFrame(unsafe { Frame::new(base) });
    bcm2835_pm::halt(&mut pm);
    for _ in 0..WATCHDOG_WAIT_SPINS {
        core::hint::spin_loop();
    }
    StillOn::WatchdogIgnored
}
