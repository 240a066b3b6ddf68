//! The seam between the runtime and the CPU architecture it runs on (docs/architecture.md,
//! "The two traits").
//!
//! An image has one architecture, so the trait has associated functions, not methods: the
//! runtime's types take it as a type parameter (`Scheduling<A>`, `SharedVgic<A>`) and every
//! call is resolved when the image is built, costing what a direct call costs. Each function
//! is one the runtime cannot do without and cannot do itself: it names a register, an
//! instruction or an interrupt controller. `hyp-arch-armv8` implements it for AArch64 at
//! EL2; the runtime's host tests implement it with a fake whose CPUs are threads.

/// What the runtime asks of the architecture.
pub trait Arch: 'static {
    /// The index of the CPU this runs on, in the board's CPU list.
    fn current_cpu() -> usize;

    /// Makes CPU `cpu` leave the guest it runs, or its wait for an interrupt, and look at
    /// its state again (on ARM, a software-generated interrupt). Never called for the CPU
    /// the caller runs on: that one is in the hypervisor already.
    fn kick_cpu(cpu: usize);

    /// The system counter: the same on every CPU, the scheduler's clock.
    fn now() -> u64;

    /// The counter's ticks per second.
    fn counter_frequency() -> u64;

    /// A pause in a polling loop (a side core's passes): a hint that this CPU only waits.
    /// On AArch64, YIELD, on which an emulator running its CPUs in turn (QEMU with
    /// `-icount`) goes on to the next one.
    fn pause() {
        core::hint::spin_loop();
    }

    /// Programs this CPU's hypervisor timer to interrupt at counter value `deadline`, or
    /// stops it (`None`).
    fn set_hyp_timer(deadline: Option<u64>);

    /// Deactivates the board's SPI `intid`, from any CPU: a passthrough interrupt the
    /// hypervisor held active for the guest, whose virtual state the guest discarded
    /// (vgic::Distributor::deactivate_retired).
    fn deactivate_spi(intid: u32);

    /// Whether a GICv3 VM's SGIs may be posted without the VM's lock
    /// (`shared_vgic::VgicHandle::post_sgi`): an image that drives only GICv2s has no such
    /// VM, and its lock of a vGIC then does not look for posted SGIs.
    const POSTS_SGIS: bool = true;

    /// The board's GICv4.0, which injects the LPIs of VMs with an ITS directly
    /// (crate::direct_lpis); none on a board without one.
    fn vlpis() -> Option<&'static dyn crate::direct_lpis::BoardVlpis> {
        None
    }
}
