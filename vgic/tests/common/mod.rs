//! Shared by the integration tests: vGIC set-ups, register offsets, and `FakeLrs`, a list
//! register file that behaves as the hardware does (ELRSR/EISR semantics of IHI 0069H 12.4
//! and IHI 0048B 5.3) with a guest that acknowledges, EOIs and deactivates.
#![allow(dead_code)]

use std::cell::RefCell;

use vgic::*;

pub const GICD_CTLR: u64 = 0x000;
pub const GICD_TYPER: u64 = 0x004;
pub const GICD_IIDR: u64 = 0x008;
pub const IGROUPR: u64 = 0x080;
pub const ISENABLER: u64 = 0x100;
pub const ICENABLER: u64 = 0x180;
pub const ISPENDR: u64 = 0x200;
pub const ICPENDR: u64 = 0x280;
pub const ISACTIVER: u64 = 0x300;
pub const ICACTIVER: u64 = 0x380;
pub const IPRIORITYR: u64 = 0x400;
pub const ITARGETSR: u64 = 0x800;
pub const ICFGR: u64 = 0xc00;
pub const IGRPMODR: u64 = 0xd00;
pub const CPENDSGIR: u64 = 0xf10;
pub const SPENDSGIR: u64 = 0xf20;
pub const IROUTER: u64 = 0x6000;
pub const SGI_FRAME: u64 = 0x1_0000;

/// A VM's vGIC as the hypervisor holds it: the distributor (the VM's lock) and each vCPU's
/// list-register state (the vCPU's own lock), which the list-register calls take beside it.
/// Everything else is the distributor's (`Deref`).
#[derive(Clone, Debug, PartialEq)]
pub struct Vgic {
    pub d: Distributor,
    pub lists: Vec<VcpuInterfaceState>,
}

impl std::ops::Deref for Vgic {
    type Target = Distributor;
    fn deref(&self) -> &Distributor {
        &self.d
    }
}

impl std::ops::DerefMut for Vgic {
    fn deref_mut(&mut self) -> &mut Distributor {
        &mut self.d
    }
}

impl Vgic {
    pub fn new(d: Distributor) -> Vgic {
        let lists = vec![VcpuInterfaceState::default(); d.vcpus()];
        Vgic { d, lists }
    }
    /// `vcpu`'s list-register state, and a spare one for a vCPU the VM does not have (the
    /// distributor refuses it).
    fn list(&mut self, vcpu: usize) -> (&mut Distributor, &mut VcpuInterfaceState) {
        if vcpu >= self.lists.len() {
            self.lists.resize(vcpu + 1, VcpuInterfaceState::default());
        }
        (&mut self.d, &mut self.lists[vcpu])
    }
    pub fn flush_to_hw(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<(), VgicError> {
        let (d, state) = self.list(vcpu);
        d.flush_to_hw(vcpu, state, lrs)
    }
    pub fn flush_to_hw_general(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<(), VgicError> {
        let (d, state) = self.list(vcpu);
        d.flush_to_hw_general(vcpu, state, lrs)
    }
    pub fn flush_to_hw_fast(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<bool, VgicError> {
        let (d, state) = self.list(vcpu);
        d.flush_to_hw_fast(vcpu, state, lrs)
    }
    pub fn sync_from_hw(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<bool, VgicError> {
        let (d, state) = self.list(vcpu);
        d.sync_from_hw(vcpu, state, lrs)
    }
    pub fn sync_from_hw_sampling(
        &mut self,
        vcpu: usize,
        lrs: &mut impl ListRegisters,
        sampler: &mut impl LineSampler,
        retired: &mut RetiredLines,
    ) -> Result<bool, VgicError> {
        let (d, state) = self.list(vcpu);
        d.sync_from_hw_sampling(vcpu, state, lrs, sampler, retired)
    }
    pub fn hw_level_fired(
        &mut self,
        vcpu: usize,
        intid: IntId,
        taken_back: bool,
        lrs: &mut impl ListRegisters,
    ) -> bool {
        let (d, state) = self.list(vcpu);
        d.hw_level_fired(vcpu, intid, taken_back, state, lrs)
    }
    pub fn take_back_one_and_plan(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<bool, VgicError> {
        let (d, state) = self.list(vcpu);
        d.take_back_one_and_plan(vcpu, state, lrs)
    }
    pub fn deactivate_by_dir(
        &mut self,
        vcpu: usize,
        lrs: &mut impl ListRegisters,
        value: u64,
        retired: &mut RetiredLines,
    ) -> Result<(), VgicError> {
        let (d, state) = self.list(vcpu);
        d.deactivate_by_dir(vcpu, state, lrs, value, retired)
    }
    pub fn put(&mut self, vcpu: usize, lrs: &mut impl ListRegisters) -> Result<(), VgicError> {
        let (d, state) = self.list(vcpu);
        d.put(vcpu, state, lrs)
    }
    pub fn interface(&self, vcpu: usize) -> Option<&VcpuInterfaceState> {
        self.lists.get(vcpu)
    }
}

pub fn gic(version: GicVersion, vcpus: usize) -> Vgic {
    let mut g = Distributor::new(VgicConfig { version, vcpus, spis: 64, lpis: 0 }).unwrap();
    g.write(0, GICD_CTLR, 4, 0b11).unwrap();
    Vgic::new(g)
}
pub fn v3(vcpus: usize) -> Vgic {
    gic(GicVersion::V3, vcpus)
}
pub fn v2(vcpus: usize) -> Vgic {
    gic(GicVersion::V2, vcpus)
}

/// Runs `f` on a GICv3 and on a GICv2 vGIC with `vcpus` vCPUs.
pub fn both(vcpus: usize, f: impl Fn(Vgic)) {
    f(v3(vcpus));
    f(v2(vcpus));
}

/// The offset of `intid`'s word in a one-bit-per-INTID register block, and its bit there.
pub fn bit(intid: u32) -> (u64, u64) {
    (4 * u64::from(intid / 32), 1 << (intid % 32))
}

/// Enables SPI `intid`, Group 1, edge-triggered, with `priority`, routed to vCPU `target`.
pub fn spi(g: &mut Distributor, intid: u32, priority: u8, target: usize) {
    let (word, mask) = bit(intid);
    let group = g.read(0, IGROUPR + word, 4).unwrap();
    g.write(0, IGROUPR + word, 4, group | mask).unwrap();
    g.write(0, ISENABLER + word, 4, mask).unwrap();
    g.write(0, IPRIORITYR + u64::from(intid), 1, u64::from(priority)).unwrap();
    set_trigger(g, intid, Trigger::Edge);
    route(g, intid, target);
}

pub fn route(g: &mut Distributor, intid: u32, target: usize) {
    match g.version() {
        GicVersion::V3 => g.write(0, IROUTER + 8 * u64::from(intid), 8, Distributor::vcpu_affinity(target)).unwrap(),
        GicVersion::V2 => g.write(0, ITARGETSR + u64::from(intid), 1, 1 << target).unwrap(),
    }
}

pub fn set_trigger(g: &mut Distributor, intid: u32, trigger: Trigger) {
    let reg = ICFGR + 4 * u64::from(intid / 16);
    let field = 2 << (2 * (intid % 16));
    let old = g.read(0, reg, 4).unwrap();
    let new = if trigger == Trigger::Edge { old | field } else { old & !field };
    g.write(0, reg, 4, new).unwrap();
}

/// Writes a private-interrupt register of `vcpu`: its GICR SGI frame (GICv3) or the
/// banked distributor register (GICv2).
pub fn private_write(g: &mut Distributor, vcpu: usize, offset: u64, width: usize, value: u64) {
    match g.version() {
        GicVersion::V3 => {
            g.write_redistributor(vcpu as u64 * GICR_FRAME_SIZE + SGI_FRAME + offset, width, value).unwrap()
        }
        GicVersion::V2 => g.write(vcpu, offset, width, value).unwrap(),
    }
}

/// Enables PPI or SGI `intid` of `vcpu`, Group 1, with `priority`.
pub fn private_irq(g: &mut Distributor, vcpu: usize, intid: u32, priority: u8) {
    let group = match g.version() {
        GicVersion::V3 => g.read_redistributor(vcpu as u64 * GICR_FRAME_SIZE + SGI_FRAME + IGROUPR, 4).unwrap(),
        GicVersion::V2 => g.read(vcpu, IGROUPR, 4).unwrap(),
    };
    private_write(g, vcpu, IGROUPR, 4, group | 1 << intid);
    private_write(g, vcpu, ISENABLER, 4, 1 << intid);
    private_write(g, vcpu, IPRIORITYR + u64::from(intid), 1, u64::from(priority));
}

/// A CPU's list registers, with the guest's side of the virtual CPU interface.
#[derive(Clone, Debug)]
pub struct FakeLrs {
    pub version: GicVersion,
    pub regs: [u64; 64],
    pub count: usize,
    pub maintenance: Maintenance,
    pub reads: RefCell<Vec<usize>>,
    pub writes: Vec<usize>,
    /// Physical INTIDs deactivated through HW = 1 list registers.
    pub physical_deactivations: Vec<u32>,
    /// ICH_HCR_EL2.EOIcount: deactivations that found no list register.
    pub eoi_count: u32,
    /// ICH_VMCR_EL2.VEOIM: the guest's EOImode is 1.
    pub eoi_split: bool,
}

impl FakeLrs {
    pub fn new(version: GicVersion, count: usize) -> FakeLrs {
        FakeLrs {
            version,
            regs: [0; 64],
            count,
            maintenance: Maintenance::default(),
            reads: RefCell::new(vec![]),
            writes: vec![],
            physical_deactivations: vec![],
            eoi_count: 0,
            eoi_split: false,
        }
    }
    pub fn for_gic(g: &Distributor, count: usize) -> FakeLrs {
        FakeLrs::new(g.version(), count)
    }

    pub fn lr(&self, i: usize) -> ListRegister {
        match self.version {
            GicVersion::V3 => IchLr(self.regs[i]).decode(),
            GicVersion::V2 => GichLr(self.regs[i] as u32).decode(),
        }
    }
    fn set(&mut self, i: usize, lr: ListRegister) {
        // A guest state change keeps every other field, as the hardware does.
        let old = self.lr(i);
        let new = match self.version {
            GicVersion::V3 => IchLr::encode(&ListRegister { state: lr.state, ..old }).0,
            GicVersion::V2 => u64::from(GichLr::encode(&ListRegister { state: lr.state, ..old }).0),
        };
        self.regs[i] = new;
    }
    /// Valid list registers, as (INTID, state, source).
    pub fn valid(&self) -> Vec<(u32, LrState, u8)> {
        (0..self.count)
            .map(|i| self.lr(i))
            .filter(|l| l.state != LrState::Invalid)
            .map(|l| (l.vintid.0, l.state, l.source))
            .collect()
    }
    pub fn intids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.valid().iter().map(|v| v.0).collect();
        v.sort();
        v
    }

    /// The guest acknowledges its highest-priority pending interrupt (GICV_IAR /
    /// ICV_IAR1_EL1): pending becomes active. Returns (INTID, source).
    pub fn ack(&mut self) -> Option<(u32, u8)> {
        let i = (0..self.count)
            .filter(|&i| self.lr(i).state == LrState::Pending)
            .min_by_key(|&i| (self.lr(i).priority, i))?;
        let lr = self.lr(i);
        self.set(i, ListRegister { state: LrState::Active, ..lr });
        Some((lr.vintid.0, lr.source))
    }
    fn find_active(&self, intid: u32) -> Option<usize> {
        (0..self.count).find(|&i| self.lr(i).vintid.0 == intid && self.lr(i).state.active())
    }
    /// Deactivation (EOImode 0 EOI, or EOImode 1 DIR): active is cleared; one that no list
    /// register shows active is only counted (IHI 0069H 12.4, ICH_HCR_EL2.EOIcount), but
    /// for an LPI, which is not counted (as QEMU's virtual CPU interface does).
    pub fn deactivate(&mut self, intid: u32) {
        if let Some(i) = self.find_active(intid) {
            let lr = self.lr(i);
            let state = if lr.state == LrState::PendingActive { LrState::Pending } else { LrState::Invalid };
            self.set(i, ListRegister { state, ..lr });
            if let (Some(p), LrState::Invalid) = (lr.hw, state) {
                self.physical_deactivations.push(p);
            }
        } else if intid < FIRST_LPI {
            self.eoi_count = (self.eoi_count + 1) % 32;
        }
    }
    /// EOImode 1 priority drop: the list register does not change.
    pub fn drop_priority(&mut self, intid: u32) {
        assert!(self.find_active(intid).is_some(), "EOI of an interrupt that is not active");
    }
    /// EOImode 1 priority drop of an interrupt no list register shows: counted in
    /// EOIcount all the same, as QEMU's virtual CPU interface does.
    pub fn drop_priority_unlisted(&mut self, intid: u32) {
        assert!(self.find_active(intid).is_none(), "{intid} is shown");
        self.eoi_count = (self.eoi_count + 1) % 32;
    }
    /// The guest completes the handlers it is in, then takes and completes everything it
    /// can see (EOImode 0).
    pub fn take_all(&mut self) -> Vec<(u32, u8)> {
        for (intid, ..) in self.valid().into_iter().filter(|l| l.1.active()) {
            self.deactivate(intid);
        }
        let mut taken = vec![];
        while let Some((intid, source)) = self.ack() {
            self.deactivate(intid);
            taken.push((intid, source));
        }
        taken
    }
    fn empty(&self, i: usize) -> bool {
        let lr = self.lr(i);
        lr.state == LrState::Invalid && (lr.hw.is_some() || !lr.eoi_maintenance)
    }
    /// Whether a maintenance interrupt is asserted (IHI 0069H 12.4, ICH_MISR_EL2).
    pub fn maintenance_asserted(&self) -> bool {
        let valid = self.valid();
        (self.maintenance.underflow && valid.len() <= 1)
            || (self.maintenance.no_pending && !valid.iter().any(|v| v.1.pending()))
            || (self.maintenance.entry_not_present && self.eoi_count != 0)
            || self.eoi_status() != 0
    }
    pub fn clear_log(&mut self) {
        self.reads.borrow_mut().clear();
        self.writes.clear();
    }
}

impl ListRegisters for FakeLrs {
    fn count(&self) -> usize {
        self.count
    }
    fn read_lr(&self, index: usize) -> u64 {
        assert!(index < self.count, "read of LR {index} beyond the {} implemented", self.count);
        self.reads.borrow_mut().push(index);
        self.regs[index]
    }
    fn write_lr(&mut self, index: usize, value: u64) {
        assert!(index < self.count, "write to LR {index} beyond the {} implemented", self.count);
        self.writes.push(index);
        self.regs[index] = value;
    }
    /// ICH_ELRSR_EL2 or GICH_ELRSR0: list registers 0 to 31 only.
    fn empty_status(&self) -> u32 {
        (0..self.count.min(32)).filter(|&i| self.empty(i)).fold(0, |m, i| m | 1 << i)
    }
    fn eoi_status(&self) -> u32 {
        (0..self.count.min(32))
            .filter(|&i| {
                let lr = self.lr(i);
                lr.state == LrState::Invalid && lr.hw.is_none() && lr.eoi_maintenance
            })
            .fold(0, |m, i| m | 1 << i)
    }
    fn set_maintenance(&mut self, maintenance: Maintenance) {
        self.maintenance = maintenance;
        self.eoi_count = 0;
    }
    fn take_eoi_count(&mut self) -> u32 {
        core::mem::take(&mut self.eoi_count)
    }
    fn eoi_split(&self) -> bool {
        self.eoi_split
    }
}

/// Entry, the guest's turn, exit.
pub fn run(g: &mut Vgic, vcpu: usize, lrs: &mut FakeLrs, guest: impl FnOnce(&mut FakeLrs)) {
    g.flush_to_hw(vcpu, lrs).unwrap();
    guest(lrs);
    g.sync_from_hw(vcpu, lrs).unwrap();
}

/// Runs `vcpu` until it has nothing left to take, the guest completing everything each
/// time; returns what it took, in order.
pub fn deliver_all(g: &mut Vgic, vcpu: usize, lrs: &mut FakeLrs) -> Vec<(u32, u8)> {
    let mut taken = vec![];
    for _ in 0..200 {
        run(g, vcpu, lrs, |l| taken.extend(l.take_all()));
        if !g.has_pending(vcpu) {
            break;
        }
    }
    taken
}
