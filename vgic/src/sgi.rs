//! Software-generated interrupts. GICv3: trapped writes of ICC_SGI1R_EL1, ICC_ASGI1R_EL1 and
//! ICC_SGI0R_EL1 (IHI 0069H 12.2), targets named by affinity, target list, RS and IRM.
//! GICv2: GICD_SGIR (IHI 0048B 4.3.15), pending per source CPU.

use crate::{Distributor, GicVersion, VcpuMask, VgicError};

/// Which SGI register the guest wrote.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SgiRegister {
    /// ICC_SGI1R_EL1: may generate SGIs of either group (a single Security state).
    Sgi1r,
    /// ICC_ASGI1R_EL1: with GICD_CTLR.DS = 1, Group 0 SGIs only, as ICC_SGI0R_EL1.
    Asgi1r,
    /// ICC_SGI0R_EL1: Group 0 SGIs only.
    Sgi0r,
}

/// The fields of ICC_SGI1R_EL1 (same layout for the other two).
struct SgiRequest {
    intid: u32,
    target_list: u16,
    aff1: u64,
    aff2: u64,
    aff3: u64,
    /// Range selector: TargetList bit n names Aff0 = RS * 16 + n.
    rs: u64,
    /// Interrupt_Routing_Mode: every PE but the sender.
    irm: bool,
}

impl SgiRequest {
    fn decode(value: u64) -> SgiRequest {
        SgiRequest {
            target_list: value as u16,
            aff1: (value >> 16) & 0xff,
            intid: ((value >> 24) & 0xf) as u32,
            aff2: (value >> 32) & 0xff,
            irm: value & (1 << 40) != 0,
            rs: (value >> 44) & 0xf,
            aff3: (value >> 48) & 0xff,
        }
    }

    /// The vCPUs of a VM of `vcpus` this request names, `source` sending: with IRM every one
    /// but the sender; otherwise those whose affinity (`Distributor::vcpu_affinity`, Aff1 =
    /// vCPU / 16, Aff0 = vCPU % 16, Aff2 = Aff3 = 0) matches Aff3.Aff2.Aff1 and has its
    /// TargetList bit, Aff0 = RS * 16 + bit (IHI 0069H 12.2.22). Aff0 is below 16, so only
    /// RS = 0 names anyone, and the list is the mask of cluster Aff1 at once: no walk over
    /// the VM's vCPUs.
    fn targets(&self, source: usize, vcpus: usize) -> u64 {
        let all = VcpuMask::first(vcpus).0;
        if self.irm {
            return all & !VcpuMask::single(source).0;
        }
        if self.aff3 != 0 || self.aff2 != 0 || self.rs != 0 || self.aff1 >= 4 {
            return 0;
        }
        (u64::from(self.target_list) << (self.aff1 * 16)) & all
    }
}

/// The SGIs that may be posted (`Distributor::deliver_posted_sgis`): SGIs 0 to 7 (those
/// Linux sends as IPIs) of vCPUs 0 to 7, 8 bits a vCPU in one 64-bit word.
pub const POSTED_SGIS: u32 = 8;

/// The bit of the posted word that posts SGI `intid` for vCPU `vcpu`: 8 * `vcpu` + `intid`;
/// none for an SGI or a vCPU past those that may be posted.
pub fn posted_sgi_bit(vcpu: usize, intid: u32) -> Option<u64> {
    (vcpu < 64 / POSTED_SGIS as usize && intid < POSTED_SGIS)
        .then(|| 1 << (vcpu * POSTED_SGIS as usize + intid as usize))
}

/// The one vCPU and SGI a write of ICC_SGI1R_EL1 `value` by `source` names, when it names
/// exactly one vCPU other than `source` by its target list (IRM, RS, Aff3, Aff2 and Aff1
/// zero, one bit of the list, below `vcpus`): the writes another CPU may post for later
/// delivery (`deliver_posted_sgis`) instead of `generate_sgi`, to which they come to the same.
/// Anything else is `None`.
pub fn single_sgi_target(value: u64, source: usize, vcpus: usize) -> Option<(usize, u32)> {
    let req = SgiRequest::decode(value);
    if req.irm || req.rs != 0 || req.aff3 != 0 || req.aff2 != 0 || req.aff1 != 0 {
        return None;
    }
    let list = u64::from(req.target_list) & VcpuMask::first(vcpus).0;
    let vcpu = list.trailing_zeros() as usize;
    (list.count_ones() == 1 && vcpu != source).then_some((vcpu, req.intid))
}

/// The one vCPU and SGI a GICv2 guest's GICD_SGIR write `value` by `source` names, when it
/// names exactly one vCPU other than `source` by its list (TargetListFilter 0, one bit of
/// CPUTargetList among the VM's vCPUs): the writes another CPU may post, per source, for
/// later delivery (`deliver_posted_sgis_from`) instead of `write_sgir`, to which they come
/// to the same. Anything else is `None`.
pub fn single_sgir_target(value: u32, source: usize, vcpus: usize) -> Option<(usize, u32)> {
    if (value >> 24) & 3 != 0 {
        return None;
    }
    let list = (value >> 16) & 0xff & VcpuMask::first(vcpus.min(crate::MAX_VCPUS_V2)).0 as u32;
    let vcpu = list.trailing_zeros() as usize;
    (list.count_ones() == 1 && vcpu != source).then_some((vcpu, value & 0xf))
}

impl Distributor {
    /// GICv2: SGIs posted by vCPU `source` (`posted_sgi_bit` of each target and SGI): each
    /// made pending from `source` as the GICD_SGIR write that named it would have
    /// (`write_sgir`, `single_sgir_target`), without the kick set: whoever posted it kicked
    /// its vCPU. Bits of vCPUs the VM lacks are ignored.
    pub fn deliver_posted_sgis_from(&mut self, source: usize, posted: u64) {
        if self.version != GicVersion::V2 || source >= self.vcpus {
            return;
        }
        for bit in VcpuMask(posted).iter() {
            let (vcpu, sgi) = (bit / POSTED_SGIS as usize, bit as u32 % POSTED_SGIS);
            if let Some(sources) = self.redistributors.get_mut(vcpu).and_then(|rd| rd.sgi_sources_mut(sgi)) {
                *sources |= 1 << source;
            }
        }
    }

    /// SGIs posted by another CPU (`posted_sgi_bit`): each made pending as the write of
    /// ICC_SGI1R_EL1 that named it would have (`generate_sgi`, `single_sgi_target`), without
    /// the kick set: whoever posted it kicked its vCPU. Bits of vCPUs the VM lacks are
    /// ignored.
    pub fn deliver_posted_sgis(&mut self, posted: u64) {
        if self.version != GicVersion::V3 {
            return;
        }
        for bit in VcpuMask(posted).iter() {
            let (vcpu, intid) = (bit / POSTED_SGIS as usize, bit as u32 % POSTED_SGIS);
            if let Some(sgi) = self.redistributors.get_mut(vcpu).and_then(|rd| rd.irq_mut(intid)) {
                sgi.set_latch(true);
            }
        }
    }

    /// A trapped write of an SGI register by `source`: makes the SGI pending on each vCPU it
    /// names and returns them (also added to the kick set). An affinity that names no vCPU
    /// is ignored, as on hardware.
    pub fn generate_sgi(&mut self, source: usize, register: SgiRegister, value: u64) -> Result<VcpuMask, VgicError> {
        if self.version != GicVersion::V3 {
            return Err(VgicError::WrongVersion { needs: GicVersion::V3 });
        }
        self.check_vcpu(source)?;
        let req = SgiRequest::decode(value);
        let mut targets = VcpuMask::EMPTY;
        for vcpu in VcpuMask(req.targets(source, self.vcpus)).iter() {
            let Some(sgi) = self.redistributors.get_mut(vcpu).and_then(|rd| rd.irq_mut(req.intid)) else { continue };
            // An access for Group 0 generates only Group 0 SGIs; ICC_SGI1R_EL1 either
            // group, there being one Security state (IHI 0069H 12.2.22, Table 12-14).
            if register == SgiRegister::Sgi1r || !sgi.group1() {
                sgi.set_latch(true);
                targets.insert(vcpu);
            }
        }
        self.kicks = self.kicks | targets;
        Ok(targets)
    }

    /// GICD_SGIR: TargetListFilter [25:24] (0: the list, 1: all but the sender, 2: the sender
    /// only, 3: reserved, nothing), CPUTargetList [23:16], SGIINTID [3:0].
    pub(crate) fn write_sgir(&mut self, source: usize, value: u32) {
        let sgi = value & 0xf;
        let mask = u32::from(self.v2_cpu_mask())
            & match (value >> 24) & 3 {
                0 => (value >> 16) & 0xff,
                1 => !(1 << source),
                2 => 1 << source,
                _ => 0,
            };
        // Only the vCPUs named: `mask` holds none past the VM's (`v2_cpu_mask`).
        for vcpu in VcpuMask(u64::from(mask)).iter() {
            if let Some(sources) = self.redistributors.get_mut(vcpu).and_then(|rd| rd.sgi_sources_mut(sgi)) {
                *sources |= 1 << source;
            }
            self.kicks.insert(vcpu);
        }
    }
}
