//! The deterministic cost of a virtio request under `-icount shift=0`, with and without a
//! side core, over virtio-mmio and over virtio-pci (docs/performance.md, "What a request
//! costs", "virtio over PCI"): the exits of the guest's vCPUs
//! per 1 MiB disk request (O_DIRECT `dd`, one request per block) and per TCP packet the
//! guest receives and sends, by reason, and the side core's own work per request (the
//! counter ticks of its passes that found something: at 62.5 MHz and one instruction per
//! nanosecond a tick is 16 instructions). Wall time plays no part: the exit counts do not
//! depend on the machine's load, and the side core's idle polling is not counted. The disk
//! workloads' exits are less those of the same measuring around an empty command (the shell
//! and its output on the emulated UART).

use std::collections::BTreeMap;

use super::exits::ExitSnapshot;
use super::{
    boot, bundle, images, linux_guest, linux_vm, side_core_vm, timed, write_bench_file, BundleOptions, Hypervisor,
    Machine, VmDevices, VmEntry, XtaskError, NET_GUEST_PORT,
};
use crate::util::step;
use hyp_core::bundle::VirtioTransport;

/// Requests of each disk workload: 32 blocks of 1 MiB.
const DISK_REQUESTS: usize = 32;
/// Bytes the host sends the guest over TCP, and the guest the host.
const NET_BYTES: usize = 4 << 20;

/// One workload of one configuration.
#[derive(Clone, Debug)]
pub struct Cost {
    pub config: &'static str,
    pub workload: &'static str,
    /// Disk requests, or packets the guest received or sent.
    pub units: u64,
    pub unit: &'static str,
    /// For TCP, the packets that went the other way meanwhile (the acknowledgements).
    pub acknowledgements: Option<u64>,
    pub exits: ExitSnapshot,
    /// The side core's busy ticks over the workload, and the counter's rate.
    pub side_ticks: Option<(u64, f64)>,
}

impl Cost {
    pub fn exits_per_unit(&self) -> f64 {
        self.exits.total as f64 / self.units as f64
    }
    /// The side core's instructions per unit: its busy ticks at one instruction per ns.
    pub fn side_instructions_per_unit(&self) -> Option<f64> {
        self.side_ticks.map(|(ticks, hz)| ticks as f64 * (1e9 / hz) / self.units as f64)
    }
}

/// `busy ticks` of a side core's `list` line.
fn busy_ticks(line: Option<&str>) -> Option<u64> {
    let line = line?;
    let (before, _) = line.rsplit_once(" busy ticks")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// Both configurations, each in a boot of its own under `-icount shift=0`.
pub fn io_cost() -> Result<Vec<Cost>, XtaskError> {
    let hyp = images::build_hypervisor(Hypervisor::TestHooks)?;
    let linux = linux_guest::debian_arm64()?;
    let disk = super::bench_dir()?.join("io-cost-disk.img");
    super::allocated_disk(&disk, DISK_REQUESTS << 20)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| XtaskError::Tool(format!("no free port on 127.0.0.1: {e}")))?;
    let bootargs = format!("{} {}", linux_guest::BOOTARGS, linux_guest::NETWORK_BOOTARGS);
    let vm = linux_vm(
        &linux,
        &bootargs,
        VmDevices { disk: Some(bundle::DiskSlice { offset: 0, size: 0 }), network: Some(None), ..Default::default() },
    );
    let machine = Machine {
        smp: 2,
        icount: true,
        disk: Some(disk),
        network: Some(vec![(port, NET_GUEST_PORT)]),
        ..Machine::default()
    };
    let mut all = Vec::new();
    // The same VM with its devices as PCI functions (docs/virtio.md, "The virtio-pci
    // transport"): MSI-X messages, no InterruptACK.
    let pci = VmEntry { devices: VmDevices { transport: VirtioTransport::Pci, ..vm.devices.clone() }, ..vm.clone() };
    // The last on a GICv4 board, whose ITS the hypervisor injects the VM's LPIs through
    // (docs/vgic.md, "Direct injection of LPIs (GICv4.0)"): the completion's kick gone.
    for (config, vm, smp, gic_version) in [
        ("hypervisor", vm.clone(), 2, 3),
        ("side core", side_core_vm(&vm), 3, 3),
        ("pci", pci.clone(), 2, 3),
        ("pci, side core", side_core_vm(&pci), 3, 3),
        ("pci, side core, GICv4", side_core_vm(&pci), 3, 4),
    ] {
        step(&format!(
            "the cost of a request under -icount shift=0, {config}: {DISK_REQUESTS} x 1 MiB dd write and read \
             (O_DIRECT), {} MiB TCP from the host and to it",
            NET_BYTES >> 20
        ));
        let name = format!("io-cost-{}-{}", smp, vm.devices.transport.name());
        let bundle_path = bundle::write_file(&name, &[vm], &BundleOptions::default())?;
        let cmd = Machine { smp, gic_version, ..machine.clone() }.command(&hyp, Some(&bundle_path));
        all.extend(one_config(cmd, config, port)?);
    }
    write_bench_file("io-cost.json", &json(&all))?;
    Ok(all)
}

/// `window` less what the same measuring costs around an empty command (`baseline`: the
/// shell, the counter reads, the lines printed, each character a few PL011 exits), reason
/// by reason, never below zero.
fn less_baseline(window: &ExitSnapshot, baseline: &ExitSnapshot) -> ExitSnapshot {
    let by_reason: BTreeMap<String, u64> = window
        .by_reason
        .iter()
        .map(|(r, n)| (r.clone(), n.saturating_sub(baseline.by_reason.get(r).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect();
    ExitSnapshot { total: by_reason.values().sum(), by_reason }
}

fn one_config(cmd: std::process::Command, config: &'static str, port: u16) -> Result<Vec<Cost>, XtaskError> {
    let mut b = boot(cmd, true)?;
    let mut costs = Vec::new();
    // What measuring costs: the same window around an empty command, the smallest of three.
    let mut baseline: Option<ExitSnapshot> = None;
    for _ in 0..3 {
        let (_, window) = b.shell.measured(&timed(":"), true)?;
        let window = window.ok_or_else(|| XtaskError::Failed("no exit counts".into()))?;
        if baseline.as_ref().is_none_or(|b| window.total < b.total) {
            baseline = Some(window);
        }
    }
    let baseline = baseline.unwrap_or_default();
    for (workload, command) in [
        ("disk write", format!("dd if=/dev/zero of=/dev/vda bs=1M count={DISK_REQUESTS} oflag=direct 2>/dev/null")),
        ("disk read", format!("dd if=/dev/vda of=/dev/null bs=1M count={DISK_REQUESTS} iflag=direct 2>/dev/null")),
    ] {
        b.shell.exits(None)?;
        let ticks_before = busy_ticks(b.shell.io_line.as_deref());
        let (_, window) = b.shell.measured(&timed(&command), true)?;
        let ticks_after = busy_ticks(b.shell.io_line.as_deref());
        let exits = less_baseline(&window.ok_or_else(|| XtaskError::Failed("no exit counts".into()))?, &baseline);
        let side_ticks = ticks_before.zip(ticks_after).map(|(a, z)| (z.saturating_sub(a), b.hz));
        costs.push(Cost {
            config,
            workload,
            units: DISK_REQUESTS as u64,
            unit: "1 MiB request",
            acknowledgements: None,
            exits,
            side_ticks,
        });
    }
    for receive in [true, false] {
        if receive {
            super::listen_in_guest(&mut b.shell)?;
        } else {
            super::serve_from_guest(&mut b.shell, NET_BYTES)?;
        }
        let (rx0, tx0) = super::packet_counts(&mut b.shell)?;
        let before = b.shell.exits(None)?;
        let ticks_before = busy_ticks(b.shell.io_line.as_deref());
        if receive {
            super::send_to_guest(&mut b.shell, port, NET_BYTES)?;
        } else {
            super::receive_from_guest(port, NET_BYTES)?;
        }
        let exits = b.shell.exits(None)?.since(&before)?;
        let ticks_after = busy_ticks(b.shell.io_line.as_deref());
        let (rx1, tx1) = super::packet_counts(&mut b.shell)?;
        let (received, sent) = (rx1.saturating_sub(rx0), tx1.saturating_sub(tx0));
        let (workload, units, unit, other) = match receive {
            true => ("TCP receive", received, "packet received", sent),
            false => ("TCP send", sent, "packet sent", received),
        };
        costs.push(Cost {
            config,
            workload,
            units: units.max(1),
            unit,
            acknowledgements: Some(other),
            exits,
            side_ticks: ticks_before.zip(ticks_after).map(|(a, z)| (z.saturating_sub(a), b.hz)),
        });
    }
    b.shell.power_off();
    Ok(costs)
}

/// The table: per configuration and workload, the units, the exits per unit with the
/// reasons that make them, and the side core's instructions per unit.
pub fn table(costs: &[Cost]) -> String {
    let mut table = format!(
        "{:<21} {:<12} {:>7} {:>10} {:>10} {:>14}  {}\n",
        "-icount", "workload", "units", "exits", "per unit", "side core ins.", "exits by reason (per unit)"
    );
    for c in costs {
        let reasons: Vec<String> =
            c.exits.by_reason.iter().map(|(reason, n)| format!("{reason} {:.2}", *n as f64 / c.units as f64)).collect();
        let side = c.side_instructions_per_unit().map_or("-".to_string(), |i| format!("{i:.0}"));
        table.push_str(&format!(
            "{:<21} {:<12} {:>7} {:>10} {:>10.2} {:>14}  {}\n",
            c.config,
            c.workload,
            c.units,
            c.exits.total,
            c.exits_per_unit(),
            side,
            reasons.join(", ")
        ));
    }
    let acknowledgements: Vec<String> =
        costs.iter().filter_map(|c| c.acknowledgements.map(|a| format!("{} {} {a}", c.config, c.workload))).collect();
    table.push_str(&format!(
        "  (units: {DISK_REQUESTS} requests of 1 MiB per disk workload; TCP: the packets of {} MiB, each way; \
         the acknowledgements the other way: {})\n",
        NET_BYTES >> 20,
        acknowledgements.join(", ")
    ));
    table
}

fn json(costs: &[Cost]) -> String {
    let rows: Vec<String> = costs
        .iter()
        .map(|c| {
            let reasons: BTreeMap<&str, u64> = c.exits.by_reason.iter().map(|(r, n)| (r.as_str(), *n)).collect();
            let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("\"{r}\": {n}")).collect();
            format!(
                "    {{ \"config\": \"{}\", \"workload\": \"{}\", \"units\": {}, \"unit\": \"{}\", \"acknowledgements\": {}, \
                 \"exits\": {}, \"exits_per_unit\": {:.3}, \"by_reason\": {{ {} }}, \
                 \"side_core_instructions_per_unit\": {} }}",
                c.config,
                c.workload,
                c.units,
                c.unit,
                c.acknowledgements.map_or("null".into(), |s| s.to_string()),
                c.exits.total,
                c.exits_per_unit(),
                reasons.join(", "),
                c.side_instructions_per_unit().map_or("null".into(), |i| format!("{i:.0}"))
            )
        })
        .collect();
    format!("{{\n  \"unit\": \"-icount shift=0\",\n  \"costs\": [\n{}\n  ]\n}}\n", rows.join(",\n"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_busy_ticks_are_read_from_the_side_cores_line() {
        let line = "io cpu2: polling; 120 passes, 40 busy, 3 wakes, 2 sleeps, 0 late chains, 98765 busy ticks";
        assert_eq!(super::busy_ticks(Some(line)), Some(98765));
        assert_eq!(super::busy_ticks(None), None);
    }
}
