//! What instruction counts hide (docs/performance.md): for each microbenchmark path, the
//! hypervisor's system register accesses, barriers, TLB and cache maintenance per operation,
//! counted in an instruction trace of the microbenchmark guest run under it.
//!
//! The run: the microbenchmark VM booted with `trace=N` in its bootargs (each benchmark runs
//! N times and marks its last N - 4 iterations between calls of `bench_window_open` and
//! `bench_window_close`, guest_common::bench), QEMU with one instruction per translation
//! block, no block chaining and `-icount shift=0`, so that its `exec` log has one line per
//! instruction executed, in the order the CPUs executed them. The log is turned on through
//! QEMU's monitor once the guest waits for a key (the boot is not traced: it is most of the
//! run), then the key is typed. Each log line gives the CPU, the PC and the translation
//! block's flags, whose MMU index says the exception level; each EL2 instruction is read
//! from the hypervisor's ELF at its PC less the load address the hypervisor prints, and
//! classed (`a64`) and put in the function whose symbol holds it (with LTO, the outermost
//! function its path is inlined into), per CPU; a window's counts over its iterations are
//! the figures per operation.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSymbol};

use super::a64::Class;
use super::{a32, a64, microbench_vm};
use crate::bundle::{self, BundleOptions};
use crate::images::{self, Hypervisor};
use crate::qemu::{Machine, Session};
use crate::util::step;
use crate::XtaskError;

/// Iterations of each benchmark in the traced run (the guest's first
/// `guest_common::bench::TRACE_WARM_UP` are outside the window).
pub const TRACED_ITERATIONS: u64 = 36;
/// The guest's iterations before a window opens (guest_common::bench::TRACE_WARM_UP).
const WARM_UP: u64 = 4;
/// The microbenchmark paths the table reports, in its order.
pub const PATHS: &[&str] = &[
    "hvc-unknown",
    "hvc-smccc-version",
    "mmio-read",
    "virtio-read",
    "virtio-write",
    "gicd-read",
    "virtual-ipi",
    "virtual-ipi-round-trip",
    "vtimer",
    "vtimer-periodic",
];

/// The instruction set of a traced image's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The AArch64 image.
    A64,
    /// The ARMv7 image (A32, HYP mode).
    A32,
}

impl Isa {
    fn classify(self, word: u32) -> Class {
        match self {
            Isa::A64 => a64::classify(word),
            Isa::A32 => a32::classify(word),
        }
    }

    fn describe(self, word: u32) -> String {
        match self {
            Isa::A64 => a64::describe(word),
            Isa::A32 => a32::describe(word),
        }
    }

    /// What the names of the files of this image's trace carry after their stem
    /// (`el2-trace.log`, `el2-micro-armv7.json`, ...).
    fn file_suffix(self) -> &'static str {
        match self {
            Isa::A64 => "",
            Isa::A32 => "-armv7",
        }
    }
}

/// What the hypervisor executed at EL2 in one window, or per operation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub instructions: f64,
    pub by_class: BTreeMap<Class, f64>,
    /// Each system instruction by name (`mrs ESR_EL2`, `dsb ish`, ...).
    pub by_name: BTreeMap<String, f64>,
    /// Every instruction by CPU and function (`cpu1 vgic::...::flush_to_hw`): which side of
    /// a path between two CPUs, and which part of it, the instructions are.
    pub by_function: BTreeMap<String, f64>,
}

impl Counts {
    fn add(&mut self, isa: Isa, word: u32) {
        self.instructions += 1.0;
        let class = isa.classify(word);
        if class != Class::Other {
            *self.by_class.entry(class).or_default() += 1.0;
            *self.by_name.entry(isa.describe(word)).or_default() += 1.0;
        }
    }

    pub fn class(&self, class: Class) -> f64 {
        self.by_class.get(&class).copied().unwrap_or(0.0)
    }

    fn add_to_function(&mut self, cpu: u32, function: &str) {
        *self.by_function.entry(format!("cpu{cpu} {function}")).or_default() += 1.0;
    }

    fn per(&self, n: f64) -> Counts {
        Counts {
            instructions: self.instructions / n,
            by_class: self.by_class.iter().map(|(c, v)| (*c, v / n)).collect(),
            by_name: self.by_name.iter().map(|(k, v)| (k.clone(), v / n)).collect(),
            by_function: self.by_function.iter().map(|(k, v)| (k.clone(), v / n)).collect(),
        }
    }
}

/// One line of QEMU's `-d exec` log: `Trace CPU: HOST [CS_BASE/PC/FLAGS/CFLAGS] SYMBOL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exec {
    pub cpu: u32,
    pub pc: u64,
    pub flags: u32,
}

pub fn parse_exec(line: &str) -> Option<Exec> {
    let rest = line.strip_prefix("Trace ")?;
    let (cpu, rest) = rest.split_once(':')?;
    let fields = rest.split_once('[')?.1.split_once(']')?.0;
    let mut fields = fields.split('/');
    let (_cs_base, pc, flags) = (fields.next()?, fields.next()?, fields.next()?);
    Some(Exec {
        cpu: cpu.trim().parse().ok()?,
        pc: u64::from_str_radix(pc, 16).ok()?,
        flags: u32::from_str_radix(flags, 16).ok()?,
    })
}

/// The exception level of a translation block (AArch64, or AArch32 where HYP mode is EL2),
/// from its flags' MMU index (QEMU 10, target/arm/cpu.h: TBFLAG_ANY.MMUIDX in bits [7:4],
/// the core index of `ARMMMUIdx`): 0 and 1 EL0 (E10_0, E20_0), 2 and 4 EL1 (E10_1, its PAN
/// form), 3, 5 and 6 EL2 (E20_2, its PAN form, E2), 7 EL3. None for anything else.
pub fn exception_level(flags: u32) -> Option<u8> {
    match flags >> 4 & 0xf {
        0 | 1 => Some(0),
        2 | 4 => Some(1),
        3 | 5 | 6 => Some(2),
        7 => Some(3),
        _ => None,
    }
}

/// The hypervisor's code as it runs: the ELF's executable segments (linked at 0) at the load
/// address, and its function symbols.
pub struct Code {
    base: u64,
    segments: Vec<(u64, Vec<u8>)>,
    functions: Vec<(u64, u64, String)>,
}

impl Code {
    pub fn new(elf: &[u8], base: u64) -> Result<Code, String> {
        let loaded = crate::elf::loadable(elf).ok_or("the hypervisor's ELF cannot be read")?;
        let segments: Vec<(u64, Vec<u8>)> =
            loaded.into_iter().filter(|l| l.executable).map(|l| (l.vaddr, l.bytes.to_vec())).collect();
        if segments.is_empty() {
            return Err("the hypervisor's ELF has no code".into());
        }
        Ok(Code { base, segments, functions: super::io_trace::functions(elf)? })
    }

    /// The function whose symbol holds `pc` ("?" if none does).
    pub fn function(&self, pc: u64) -> &str {
        super::io_trace::function_at(&self.functions, pc.wrapping_sub(self.base))
    }

    /// The instruction at `pc`, if it is the hypervisor's code.
    pub fn word(&self, pc: u64) -> Option<u32> {
        let at = pc.checked_sub(self.base)?;
        self.segments.iter().find_map(|(vaddr, bytes)| {
            let offset = usize::try_from(at.checked_sub(*vaddr)?).ok()?;
            Some(u32::from_le_bytes(bytes.get(offset..offset + 4)?.try_into().ok()?))
        })
    }
}

/// The load address the hypervisor's banner gives (`  image       0x40200000..0x40327000`).
pub fn image_base(console: &str) -> Option<u64> {
    console.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("image")?;
        let start = rest.trim_start().strip_prefix("0x")?.split("..").next()?;
        u64::from_str_radix(start, 16).ok()
    })
}

/// The address of `name` in the guest's ELF (it runs with its MMU off: VA = IPA, as linked).
pub fn symbol(elf: &[u8], name: &str) -> Option<u64> {
    let file = object::File::parse(elf).ok()?;
    file.symbols().find(|s| s.name() == Ok(name)).map(|s| s.address())
}

/// Where the windows are: the guest's two marks (EL1 PCs).
#[derive(Clone, Copy, Debug)]
pub struct Marks {
    pub open: u64,
    pub close: u64,
}

/// The EL2 instructions of each window of the log, every CPU's, in the order the windows
/// opened. An EL2 PC outside the hypervisor's code is an error (the trace is not what it
/// seems).
pub fn windows(log: impl BufRead, code: &Code, isa: Isa, marks: Marks) -> Result<Vec<Counts>, String> {
    let mut windows: Vec<Counts> = Vec::new();
    let mut open = false;
    for line in log.lines() {
        let line = line.map_err(|e| format!("reading the trace: {e}"))?;
        let Some(exec) = parse_exec(&line) else { continue };
        match exception_level(exec.flags) {
            Some(1) if exec.pc == marks.open => {
                open = true;
                windows.push(Counts::default());
            }
            Some(1) if exec.pc == marks.close => open = false,
            Some(2) if open => {
                let word = code
                    .word(exec.pc)
                    .ok_or_else(|| format!("an EL2 instruction outside the hypervisor's code: {line}"))?;
                if let Some(w) = windows.last_mut() {
                    w.add(isa, word);
                    w.add_to_function(exec.cpu, code.function(exec.pc));
                }
            }
            _ => {}
        }
    }
    Ok(windows)
}

/// The benchmarks of the console in the order they ran, and the iterations of each
/// (`bench NAME iterations=N ...`, `latency NAME samples=N ...`).
pub fn benchmarks(console: &str) -> Vec<(String, u64)> {
    console
        .lines()
        .filter_map(|line| {
            ["bench ", "latency "].iter().find_map(|kind| {
                let mut words = line.rsplit_once(kind)?.1.split_whitespace();
                let name = words.next()?;
                let n = words.next()?.split_once('=')?.1.parse().ok()?;
                Some((name.to_string(), n))
            })
        })
        .collect()
}

/// Each benchmark's counts per operation: its window's over the iterations in it.
pub fn per_operation(console: &str, windows: &[Counts]) -> Result<BTreeMap<String, Counts>, String> {
    let benchmarks = benchmarks(console);
    if benchmarks.len() != windows.len() {
        return Err(format!(
            "{} benchmarks printed and {} windows traced: the marks and the lines do not pair",
            benchmarks.len(),
            windows.len()
        ));
    }
    Ok(benchmarks
        .into_iter()
        .zip(windows)
        .map(|((name, n), w)| (name, w.per(n.saturating_sub(WARM_UP).max(1) as f64)))
        .collect())
}

/// Runs the microbenchmark guest under the hypervisor traced, and counts: `microbench` under
/// the AArch64 image (`Isa::A64`), or `microbench32` under the ARMv7 image (`Isa::A32`).
pub fn run(isa: Isa) -> Result<BTreeMap<String, Counts>, XtaskError> {
    let (guest_name, hyp, guest, hyp_elf, guest_elf) = match isa {
        Isa::A64 => (
            "microbench",
            images::build_hypervisor(Hypervisor::TestHooks)?,
            images::build_test_guest("microbench")?,
            images::hypervisor_elf(Hypervisor::TestHooks),
            images::test_guest_elf("microbench"),
        ),
        Isa::A32 => (
            "microbench32",
            images::build_hypervisor_armv7()?,
            images::build_test_guest32("microbench32")?,
            images::hypervisor_armv7_elf(),
            images::test_guest32_elf("microbench32"),
        ),
    };
    let (hyp_elf, guest_elf) = (read(&hyp_elf)?, read(&guest_elf)?);
    let mark = |name: &str| {
        symbol(&guest_elf, name).ok_or_else(|| XtaskError::Build(format!("the {guest_name} guest has no `{name}`")))
    };
    let marks = Marks { open: mark("bench_window_open")?, close: mark("bench_window_close")? };
    let mut vm = microbench_vm(guest_name, &guest);
    vm.bootargs = Some(format!("trace={TRACED_ITERATIONS}"));
    // The AArch64 run ends through the test hooks' semihosting exit; the ARMv7 image has no
    // test hooks, and its guest's PSCI SYSTEM_OFF ends the run with status 0.
    let options = BundleOptions { semihosting_exit: isa == Isa::A64, test_el2_fault: None };
    let bundle_path = bundle::write_file(&format!("{guest_name}-trace"), &[vm], &options)?;
    let dir = images::workspace_root().join("target").join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| XtaskError::Build(format!("cannot create {}: {e}", dir.display())))?;
    let log = dir.join(format!("el2-trace{}.log", isa.file_suffix()));
    let socket = std::env::temp_dir().join(format!("xtask-monitor-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    step(&format!(
        "tracing the microbenchmarks under the hypervisor ({TRACED_ITERATIONS} iterations each; \
         -icount shift=0, one instruction per block, -d exec)"
    ));
    let machine = match isa {
        Isa::A64 => Machine { smp: 2, icount: true, semihosting: true, ..Machine::default() },
        Isa::A32 => super::armv7_board(2),
    };
    let mut cmd = machine.command(&hyp, Some(&bundle_path));
    // One line per instruction: one instruction per block, and no block chained to the next
    // (a chained block's execution is not logged). `exec` is turned on later.
    cmd.args(["-accel", "tcg,one-insn-per-tb=on", "-d", "nochain", "-D"]).arg(&log);
    cmd.args(["-display", "none", "-serial", "stdio", "-monitor"]);
    cmd.arg(format!("unix:{},server=on,wait=off", socket.display()));
    let counted = (|| -> Result<(String, Vec<Counts>), String> {
        let mut session = Session::spawn(cmd, super::TIMEOUT, false).map_err(|e| e.to_string())?;
        let before = session.wait_for("waiting for a key", super::TIMEOUT)?;
        let base = image_base(&before).ok_or("the hypervisor did not print its image's address")?;
        monitor(&socket, "log exec,nochain")?;
        session.send_line("")?;
        session.wait_for(&format!("{guest_name}: done"), super::TIMEOUT)?;
        let out = session.finish();
        if std::env::var_os("XTASK_KEEP_TRACE").is_some() {
            let _ = std::fs::write(log.with_extension("console"), &out.console);
        }
        if out.status != Some(0) {
            return Err(format!("the traced run ended with status {:?}:\n{}", out.status, out.console));
        }
        let code = Code::new(&hyp_elf, base)?;
        let file = std::fs::File::open(&log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let windows = windows(BufReader::with_capacity(1 << 20, file), &code, isa, marks)?;
        Ok((out.console, windows))
    })();
    let _ = std::fs::remove_file(&socket);
    // XTASK_KEEP_TRACE=1 keeps the log (about 30 MB) and the console beside it, to be read
    // against the hypervisor's ELF (docs/performance.md, "Where the instructions go").
    if std::env::var_os("XTASK_KEEP_TRACE").is_some() {
        step(&format!("  the trace is kept: {} and its console beside it (.console)", log.display()));
    } else {
        let _ = std::fs::remove_file(&log);
    }
    let (console, windows) = counted.map_err(|e| XtaskError::Failed(format!("the traced microbenchmarks: {e}")))?;
    per_operation(&console, &windows).map_err(XtaskError::Failed)
}

fn read(path: &Path) -> Result<Vec<u8>, XtaskError> {
    std::fs::read(path).map_err(|e| XtaskError::Build(format!("cannot read {}: {e}", path.display())))
}

/// Gives QEMU's monitor (HMP, on `socket`) one command and waits for its next prompt.
pub(crate) fn monitor(socket: &PathBuf, command: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        match UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => return Err(format!("QEMU's monitor at {}: {e}", socket.display())),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let prompt = |stream: &mut UnixStream| -> Result<String, String> {
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !seen.ends_with(b"(qemu) ") {
            let n = stream.read(&mut buf).map_err(|e| format!("QEMU's monitor: {e}"))?;
            if n == 0 {
                return Err("QEMU's monitor closed".into());
            }
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(String::from_utf8_lossy(&seen).into_owned())
    };
    prompt(&mut stream)?;
    stream.write_all(format!("{command}\n").as_bytes()).map_err(|e| format!("QEMU's monitor: {e}"))?;
    let answer = prompt(&mut stream)?;
    // The monitor echoes the command; anything else it says is an error.
    let said: Vec<&str> = answer
        .lines()
        .map(|l| l.trim_matches(|c: char| c.is_whitespace() || c.is_control()))
        .filter(|l| !l.is_empty() && !l.contains(command) && *l != "(qemu)")
        .collect();
    if said.is_empty() {
        Ok(())
    } else {
        Err(format!("QEMU's monitor answered `{command}` with: {}", said.join(" / ")))
    }
}

/// Targets from the fast-paths issue: no TLB and no cache maintenance on these paths.
fn met(c: &Counts) -> bool {
    c.class(Class::Tlbi) == 0.0 && c.class(Class::Dc) == 0.0 && c.class(Class::Ic) == 0.0
}

/// The table of `counts` for the reported paths, and its JSON (`target/bench/el2-micro.json`).
pub fn table(counts: &BTreeMap<String, Counts>) -> (String, String) {
    let mut t = format!(
        "{:<24} {:>9} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}   {}\n",
        "EL2 per op (traced)", "instr.", "MRS", "MSR", "DSB", "DMB", "ISB", "TLBI", "DC", "IC", "no TLBI/DC/IC"
    );
    let mut json = Vec::new();
    let show = |v: f64| if (v - v.round()).abs() < 0.05 { format!("{v:.0}") } else { format!("{v:.1}") };
    for name in PATHS {
        let Some(c) = counts.get(*name) else { continue };
        let class = |k| show(c.class(k));
        t.push_str(&format!(
            "{:<24} {:>9} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5} {:>5}   {}\n",
            name,
            show(c.instructions),
            class(Class::Mrs),
            class(Class::Msr),
            class(Class::Dsb),
            class(Class::Dmb),
            class(Class::Isb),
            class(Class::Tlbi),
            class(Class::Dc),
            class(Class::Ic),
            if met(c) { "yes" } else { "NO" }
        ));
        let classes: Vec<String> = c.by_class.iter().map(|(k, v)| format!("\"{k}\": {v:.2}")).collect();
        let names: Vec<String> = c.by_name.iter().map(|(k, v)| format!("\"{k}\": {v:.2}")).collect();
        let mut by_function: Vec<(&String, &f64)> = c.by_function.iter().collect();
        by_function.sort_by(|a, b| b.1.total_cmp(a.1));
        let functions: Vec<String> = by_function.iter().map(|(k, v)| format!("\"{k}\": {v:.2}")).collect();
        json.push(format!(
            "    {{\"name\": \"{name}\", \"el2_instructions\": {:.1}, \"classes\": {{{}}}, \"instructions\": {{{}}}, \
             \"functions\": {{{}}}}}",
            c.instructions,
            classes.join(", "),
            names.join(", "),
            functions.join(", ")
        ));
    }
    t.push_str(&format!(
        "  (from an instruction trace of {} iterations of each, EL2 only; AT counted in the JSON; the \
         targets: no TLB or cache maintenance on these paths)\n",
        TRACED_ITERATIONS - WARM_UP
    ));
    let json = format!(
        "{{\n  \"unit\": \"instructions executed at EL2 per operation (QEMU -d exec trace)\",\n  \"micro\": [\n{}\n  ]\n}}\n",
        json.join(",\n")
    );
    (t, json)
}

/// The table and each path's system instructions, and `target/bench/el2-micro.json`
/// (`el2-micro-armv7.json` for the ARMv7 image).
pub fn report(isa: Isa, counts: &BTreeMap<String, Counts>) -> Result<String, XtaskError> {
    let (t, json) = table(counts);
    super::write_bench_file(&format!("el2-micro{}.json", isa.file_suffix()), &json)?;
    Ok(format!("{t}{}", details(counts)))
}

/// Each path's system instructions by name, one line per path (for the reader who wants to
/// know which registers and which barriers).
pub fn details(counts: &BTreeMap<String, Counts>) -> String {
    let mut out = String::new();
    let show = |v: f64| if (v - v.round()).abs() < 0.05 { format!("{v:.0}") } else { format!("{v:.1}") };
    for name in PATHS {
        let Some(c) = counts.get(*name) else { continue };
        let list: Vec<String> = c.by_name.iter().map(|(k, v)| format!("{k} x{}", show(*v))).collect();
        out.push_str(&format!("  {name}: {}\n", list.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_gives_cpu_pc_and_exception_level() {
        let el2 = "Trace 1: 0x7f1fc8718c80 [00000000/000000004021b6e4/00000061/ff022201] ";
        assert_eq!(parse_exec(el2), Some(Exec { cpu: 1, pc: 0x4021_b6e4, flags: 0x61 }));
        assert_eq!(exception_level(0x61), Some(2), "E2, with the MMU on");
        assert_eq!(exception_level(0x461), Some(2), "E2, alignment checked (MMU off)");
        assert_eq!(exception_level(0x21), Some(1), "E10_1");
        assert_eq!(exception_level(0x41), Some(1), "E10_1_PAN");
        assert_eq!(exception_level(0x01), Some(0));
        assert_eq!(exception_level(0xf1), None);
        let symbol = "Trace 0: 0x7f00 [00000000/0000000040200010/00000021/ff022201] guest_main";
        assert_eq!(parse_exec(symbol).map(|e| e.pc), Some(0x4020_0010));
        assert_eq!(parse_exec("Stopped execution of TB chain before 0x7f1fc8718e00 [000000004021b6e8]"), None);
        assert_eq!(parse_exec("Trace x: 0x1 [0/1/2/3]"), None);
    }

    #[test]
    fn the_load_address_is_the_banners() {
        let console = "hypervisor 0.1.0 (AArch64, EL2) on linux,dummy-virt\n  image       0x40200000..0x40327000\n";
        assert_eq!(image_base(console), Some(0x4020_0000));
        assert_eq!(image_base("no banner"), None);
    }

    /// Code at 0x1000 (linked at 0): isb, dsb ish, mrs x0, esr_el2, tlbi vmalle1, add.
    fn code() -> Code {
        let words = [0xd503_3fdfu32, 0xd503_3b9f, 0xd53c_5200, 0xd508_871f, 0x9100_0400];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let functions = vec![(0, 8, "barriers".to_string()), (8, 0x14, "rest".to_string())];
        Code { base: 0x1000, segments: vec![(0, bytes)], functions }
    }

    fn line(cpu: u32, pc: u64, flags: u32) -> String {
        format!("Trace {cpu}: 0x7f0000 [00000000/{pc:016x}/{flags:08x}/ff022201] \n")
    }

    const MARKS: Marks = Marks { open: 0x9000, close: 0x9004 };

    #[test]
    fn only_el2_instructions_inside_a_window_count_on_every_cpu() {
        let mut log = String::new();
        log += &line(0, 0x1000, 0x61); // before any window
        log += &line(0, MARKS.open, 0x21);
        log += &line(0, 0x1000, 0x61); // isb
        log += &line(1, 0x1004, 0x61); // dsb ish, the other CPU
        log += &line(0, 0x1000, 0x21); // EL1 at the same address: the guest's
        log += &line(0, 0x1008, 0x61); // mrs
        log += &line(0, 0x1010, 0x61); // add
        log += &line(0, MARKS.close, 0x21);
        log += &line(0, 0x100c, 0x61); // after it: tlbi
        log += &line(0, MARKS.open, 0x21);
        log += &line(1, 0x100c, 0x61); // tlbi
        log += "Stopped execution of TB chain before 0x7f1fc8718e00 [000000004021b6e8]\n";
        log += &line(0, MARKS.close, 0x21);
        let w = windows(log.as_bytes(), &code(), Isa::A64, MARKS).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].instructions, 4.0);
        assert_eq!((w[0].class(Class::Isb), w[0].class(Class::Dsb), w[0].class(Class::Mrs)), (1.0, 1.0, 1.0));
        assert_eq!(w[0].class(Class::Tlbi), 0.0, "the TLBI ran outside the window");
        assert_eq!(w[0].by_name.get("mrs ESR_EL2"), Some(&1.0));
        let by_function: Vec<(&str, f64)> = w[0].by_function.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(by_function, [("cpu0 barriers", 1.0), ("cpu0 rest", 2.0), ("cpu1 barriers", 1.0)]);
        assert_eq!((w[1].instructions, w[1].class(Class::Tlbi)), (1.0, 1.0));
    }

    #[test]
    fn an_el2_pc_outside_the_code_is_an_error() {
        let log = line(0, MARKS.open, 0x21) + &line(0, 0x5000, 0x61);
        assert!(windows(log.as_bytes(), &code(), Isa::A64, MARKS).unwrap_err().contains("outside"));
    }

    #[test]
    fn windows_pair_with_the_printed_benchmarks_and_are_divided_by_their_iterations() {
        let console = "microbench | bench loop iterations=36 ns=1\n\
                       microbench | bench hvc-unknown iterations=36 ns=5\n\
                       microbench | latency virtual-ipi samples=36 ns=9\n";
        assert_eq!(
            benchmarks(console),
            [("loop".to_string(), 36), ("hvc-unknown".to_string(), 36), ("virtual-ipi".to_string(), 36)]
        );
        let mut hvc = Counts::default();
        for _ in 0..64 {
            hvc.add(Isa::A64, 0xd503_3fdf);
        }
        let w = [Counts::default(), hvc, Counts::default()];
        let per = per_operation(console, &w).unwrap();
        assert_eq!(per["hvc-unknown"].class(Class::Isb), 2.0, "64 over the 32 iterations in the window");
        assert_eq!(per["hvc-unknown"].instructions, 2.0);
        assert!(per_operation(console, &w[..2]).unwrap_err().contains("do not pair"));
    }

    #[test]
    fn the_table_says_whether_a_path_has_tlb_or_cache_maintenance() {
        let mut clean = Counts::default();
        clean.add(Isa::A64, 0xd53c_5200);
        clean.add(Isa::A64, 0xd503_3fdf);
        let mut dirty = clean.clone();
        dirty.add(Isa::A64, 0xd508_871f);
        dirty.add_to_function(2, "vgic::flush");
        dirty.add_to_function(0, "run");
        dirty.add_to_function(2, "vgic::flush");
        let counts: BTreeMap<String, Counts> =
            [("hvc-unknown".to_string(), clean), ("vtimer".to_string(), dirty)].into_iter().collect();
        let (t, json) = table(&counts);
        let row = |name: &str| t.lines().find(|l| l.starts_with(name)).unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(row("hvc-unknown"), ["hvc-unknown", "2", "1", "0", "0", "0", "1", "0", "0", "0", "yes"]);
        assert_eq!(row("vtimer")[7..], ["1", "0", "0", "NO"]);
        assert!(json.contains("\"name\": \"vtimer\", \"el2_instructions\": 3.0"), "{json}");
        assert!(json.contains("\"tlbi vmalle1\": 1.00"), "{json}");
        assert!(json.contains("\"functions\": {\"cpu2 vgic::flush\": 2.00, \"cpu0 run\": 1.00}"), "{json}");
        assert_eq!(json.matches('{').count(), json.matches('}').count());
        assert!(details(&counts).contains("hvc-unknown: isb x1, mrs ESR_EL2 x1"));
    }
}
