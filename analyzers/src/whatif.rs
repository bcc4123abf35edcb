//! `tpuscope whatif`: what the programs of a CPU run would do on a TPU topology. The CLI replays
//! each distinct program with libtpu's compile-only path (in child processes) and hands the
//! results here; this module only puts them together: per program (fits in a chip's HBM or by
//! how much it overflows, compile time, flops, bytes, roofline time), per step (the sum of the
//! step's executables: a TPU step-time lower bound beside the CPU step) and per recompile family
//! (what its recompiles would cost on the TPU).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::units::{bytes, duration, fine_duration, num, plural};

/// What libtpu's compile-only path said of one program (the child process's answer).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Replayed {
    /// Wall time of `PJRT_Compile` for the topology.
    pub compile_ms: f64,
    /// `PJRT_Executable_GetCompiledMemoryStats`, bytes per device.
    pub memory: Option<CompiledMemory>,
    /// `PJRT_Executable_GetCostAnalysis` properties as libtpu names them (`flops`,
    /// `bytes accessed`, `optimal_seconds`, …), numeric ones only.
    #[serde(default)]
    pub cost: BTreeMap<String, f64>,
    /// Devices of the topology.
    pub topology_devices: u32,
    /// Chips of the topology (v4 has a device per TensorCore, two per chip); 0 when unknown.
    #[serde(default)]
    pub topology_chips: u32,
    /// HBM of one chip, with where the number comes from (`libtpu` or `tpuscope's table`).
    pub hbm_bytes_per_chip: Option<u64>,
    #[serde(default)]
    pub hbm_source: String,
    /// libtpu refused the program at compile time for not fitting in a chip's HBM
    /// (`CompileTimeHbmOom`): what it said it needs. `memory` is then absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hbm_oom: Option<HbmOom>,
    /// The optimized program's format and size (`hlo_with_config`).
    #[serde(default)]
    pub optimized_format: String,
    #[serde(default)]
    pub optimized_bytes: u64,
    /// The TPU compiler's passes during this compile (libtpu's profiler), heaviest first by
    /// self time; empty when the profiler gave none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<CompilerPass>,
}

/// One pass (or phase) of the TPU compiler, summed over its runs in one compile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompilerPass {
    pub name: String,
    /// Time in the pass itself, nested passes excluded.
    pub self_ms: f64,
    /// Time from its start to its end, nested passes included.
    pub total_ms: f64,
    /// How many times it ran.
    pub count: u64,
}

/// The program that took longest to compile for the topology, with the compiler's heaviest passes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlowestCompile {
    pub program: String,
    pub compile_ms: f64,
    /// Heaviest first by self time (empty: libtpu's profiler gave none).
    pub passes: Vec<CompilerPass>,
}

/// libtpu's `CompileTimeHbmOom`: the program needs more HBM than a chip has.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HbmOom {
    /// What libtpu says the program needs (from its message, to its 0.01 GiB).
    pub required_bytes: u64,
    /// What it says a chip has.
    pub available_bytes: u64,
    /// libtpu's message.
    pub message: String,
}

impl HbmOom {
    /// Reads libtpu's `CompileTimeHbmOom` message ("… the total memory required for HLO
    /// temporaries (18.63G) exceeds available HBM (15.75G) …"; G = GiB).
    pub fn parse(message: &str) -> Option<HbmOom> {
        if !message.contains("CompileTimeHbmOom") {
            return None;
        }
        let gib = |after: &str| -> Option<u64> {
            let rest = &message[message.find(after)? + after.len()..];
            let open = rest.find('(')?;
            let close = rest[open..].find(')')? + open;
            let v: f64 = rest[open + 1..close].trim_end_matches('G').parse().ok()?;
            Some((v * f64::from(1u32 << 30)) as u64)
        };
        Some(HbmOom {
            required_bytes: gib("required")?,
            available_bytes: gib("available HBM")?,
            message: message.lines().next().unwrap_or(message).to_string(),
        })
    }
}

/// Compiled memory of one executable on one device, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompiledMemory {
    pub argument: i64,
    pub output: i64,
    pub alias: i64,
    pub temp: i64,
    pub generated_code: i64,
    /// The plugin's own peak, when it gives one (0 otherwise).
    pub peak: i64,
}

impl CompiledMemory {
    /// What the executable needs on a device at once: arguments, outputs not aliased to an
    /// argument, temporaries and code.
    pub fn need(&self) -> i64 {
        self.argument + self.output - self.alias + self.temp + self.generated_code
    }
}

/// A program's identity across compiles and runs: its input program and compile options.
pub type ProgramKey = (u64, u64);

/// One distinct program of the traces and what it would do on the topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramRow {
    /// Executable name of its first compile.
    pub name: String,
    pub program_hash: String,
    /// Compiles of this program in the traces (a program compiled again is counted each time).
    pub compiles: u64,
    /// Mean CPU compile time of those compiles.
    pub cpu_compile_ms: f64,
    /// Absent when it was not replayed (then `not_replayed` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu: Option<TpuProgram>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_replayed: Option<String>,
}

/// A program as libtpu compiled it for the topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TpuProgram {
    pub compile_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<CompiledMemory>,
    /// Bytes one device needs at once (see [`CompiledMemory::need`]).
    pub need_bytes: i64,
    /// Against a chip's HBM: `Some(true)` fits, `Some(false)` does not, `None` unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits: Option<bool>,
    /// By how much it exceeds a chip's HBM (0 when it fits).
    pub overflow_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_accessed: Option<f64>,
    /// libtpu's `optimal_seconds`: the roofline time of one run of the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofline_ms: Option<f64>,
}

/// The steady-state step on the CPU stand-in beside its TPU lower bound.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepBound {
    /// Median steady-state step on the CPU run.
    pub cpu_step_ms: f64,
    /// Median over the same steps of the sum of the roofline times of the executables they
    /// launched: no step on the topology can be faster.
    pub tpu_step_lower_bound_ms: f64,
    pub steps: u64,
    /// Launches in those steps whose program has no roofline time (not replayed): the bound
    /// leaves them out.
    pub launches_without_roofline: u64,
}

/// What a recompiling graph would lose to compiling on the topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FamilyCost {
    pub graph: String,
    pub compiles: u64,
    /// The family's compiles priced at their TPU compile times (members not replayed are
    /// priced at the mean of those that were).
    pub tpu_compile_s: f64,
    /// `tpu_compile_s` × the topology's chips, in chip-hours (every chip waits for the compile).
    pub chip_hours: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

/// `tpuscope whatif`: the programs of the traces on one TPU topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WhatIfReport {
    pub topology: String,
    pub libtpu: String,
    pub chips: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hbm_bytes_per_chip: Option<u64>,
    pub hbm_source: String,
    pub programs: Vec<ProgramRow>,
    pub replayed: u64,
    pub not_replayed: u64,
    /// Programs that do not fit in a chip's HBM.
    pub not_fitting: u64,
    pub tpu_compile_s_total: f64,
    pub cpu_compile_s_total: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepBound>,
    pub recompiles: Vec<FamilyCost>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_chip_hour: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest_compile: Option<SlowestCompile>,
}

impl SlowestCompile {
    /// The heaviest passes' title: `TPU compiler's heaviest passes (slowest compile: jit_f, 632 ms)`.
    pub fn title(&self) -> String {
        format!(
            "TPU compiler's heaviest passes (slowest compile: {}, {})",
            self.program,
            duration(self.compile_ms)
        )
    }

    /// How much of the compile the first `shown` passes account for: most of a small program's
    /// compile is libtpu work its profiler names no pass for, and a reader should not take the
    /// list for the whole story.
    pub fn coverage_line(&self, shown: usize) -> String {
        let named: f64 = self.passes.iter().take(shown).map(|p| p.self_ms).sum();
        format!(
            "these passes: {} of the {} compile (the rest is compiler work libtpu's profiler names no pass for)",
            duration(named),
            duration(self.compile_ms)
        )
    }
}

// The report's words, shared by `tpuscope whatif`'s text and Markdown and the GUI's What-if tab.
impl WhatIfReport {
    /// `v5e:2x2 (4 chips, 15.7 GiB HBM per chip (libtpu))`.
    pub fn title(&self) -> String {
        let hbm = self.hbm_bytes_per_chip.map_or_else(
            || "HBM per chip unknown".to_string(),
            |b| format!("{} HBM per chip ({})", bytes(b as i64), self.hbm_source),
        );
        format!(
            "{} ({}, {hbm})",
            self.topology,
            plural(u64::from(self.chips), "chip", "chips")
        )
    }

    /// What was compiled and what fits (nothing is said to fit when nothing compiled).
    pub fn programs_line(&self) -> String {
        let programs = plural(self.programs.len() as u64, "program", "programs");
        if self.replayed == 0 {
            return format!("{programs}: none compiled for the topology");
        }
        format!(
            "{programs}: {} compiled for the topology, {} not; {} in a chip's HBM",
            self.replayed,
            self.not_replayed,
            match self.not_fitting {
                0 => "all compiled fit".to_string(),
                1 => "1 does not fit".to_string(),
                n => format!("{n} do not fit"),
            }
        )
    }

    /// Compile time on the TPU compiler beside the CPU stand-in's.
    pub fn compile_line(&self) -> String {
        format!(
            "compiling them all: {} on the TPU compiler (one each) vs {} on the CPU stand-in",
            duration(self.tpu_compile_s_total * 1e3),
            duration(self.cpu_compile_s_total * 1e3)
        )
    }

    /// The step on the CPU beside its TPU lower bound, when the traces have steady steps.
    pub fn step_line(&self) -> Option<String> {
        let s = self.step.as_ref()?;
        let missing = match s.launches_without_roofline {
            0 => String::new(),
            n => format!(
                "; {} without a roofline time (not compiled, or libtpu gives none) left out",
                plural(n, "launch", "launches")
            ),
        };
        if s.tpu_step_lower_bound_ms <= 0.0 {
            return Some(format!(
                "step: {} on the CPU stand-in; on the TPU unknown (libtpu gives no roofline time for the step's programs)",
                duration(s.cpu_step_ms)
            ));
        }
        Some(format!(
            "step: {} on the CPU stand-in; on the TPU at least {} (roofline of the step's programs, median of {}{missing})",
            duration(s.cpu_step_ms),
            fine_duration(s.tpu_step_lower_bound_ms),
            plural(s.steps, "steady step", "steady steps"),
        ))
    }

    /// A recompiling graph's cost on the topology.
    pub fn family_line(&self, f: &FamilyCost) -> String {
        let cost = match (f.cost, self.price_per_chip_hour) {
            (Some(c), Some(p)) => format!(", {} at {} per chip-hour", num(c), num(p)),
            _ => String::new(),
        };
        format!(
            "{}: {} × TPU compile = {} ({} chip-hours on {}{cost})",
            f.graph,
            plural(f.compiles, "compile", "compiles"),
            duration(f.tpu_compile_s * 1e3),
            num(f.chip_hours),
            plural(u64::from(self.chips), "chip", "chips")
        )
    }
}

impl TpuProgram {
    /// `yes`, `NO (+3.2 GiB)`, or `?` when the chip's HBM is unknown.
    pub fn fits_label(&self) -> String {
        match self.fits {
            Some(true) => "yes".to_string(),
            Some(false) => format!("NO (+{})", bytes(self.overflow_bytes)),
            None => "?".to_string(),
        }
    }
}

/// A run as what-if reads it: the trace's tables (the programs' blobs, the manifest) and the
/// digest of its events (its compiles are among the records the digest keeps whole), so a long
/// trace is never held decoded.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub trace: &'a tpuscope_core::Trace,
    pub digest: &'a crate::digest::Digest,
}

impl<'a> Run<'a> {
    /// Its compile records, in file order.
    pub fn compiles(&self) -> impl Iterator<Item = &'a tpuscope_core::event::Compile> + 'a {
        self.digest.others().filter_map(|(_, r)| match r {
            tpuscope_core::Record::Compile(c) => Some(&**c),
            _ => None,
        })
    }
}

/// What the CLI decided and measured, for [`build`].
pub struct Inputs<'a> {
    pub topology: &'a str,
    pub libtpu: &'a str,
    pub price_per_chip_hour: Option<f64>,
    /// Each distinct program's replay (or why it was not replayed).
    pub replays: &'a BTreeMap<ProgramKey, Result<Replayed, String>>,
}

/// Puts the replays together with the traces they came from (`report` is those traces'
/// report: its families are priced).
pub fn build(
    traces: &[Run<'_>],
    report: &crate::report::Report,
    inputs: &Inputs<'_>,
) -> WhatIfReport {
    let rows = program_rows(traces);
    let first_ok = inputs.replays.values().find_map(|r| r.as_ref().ok());
    let chips = first_ok.map_or(0, |r| {
        if r.topology_chips > 0 {
            r.topology_chips
        } else {
            r.topology_devices
        }
    });
    let hbm = first_ok.and_then(|r| r.hbm_bytes_per_chip);
    let slowest = slowest_compile(&rows, inputs.replays);
    let rows: Vec<ProgramRow> = rows
        .into_iter()
        .map(|(key, mut row)| {
            match inputs.replays.get(&key) {
                Some(Ok(r)) => row.tpu = Some(tpu_program(r, hbm)),
                Some(Err(why)) => row.not_replayed = Some(why.clone()),
                None => row.not_replayed = Some("not replayed".to_string()),
            }
            row
        })
        .collect();
    let count = |f: &dyn Fn(&ProgramRow) -> bool| rows.iter().filter(|r| f(r)).count() as u64;
    WhatIfReport {
        topology: inputs.topology.to_string(),
        libtpu: inputs.libtpu.to_string(),
        chips,
        hbm_bytes_per_chip: hbm,
        hbm_source: first_ok.map(|r| r.hbm_source.clone()).unwrap_or_default(),
        replayed: count(&|r| r.tpu.is_some()),
        not_replayed: count(&|r| r.tpu.is_none()),
        not_fitting: count(&|r| r.tpu.as_ref().is_some_and(|t| t.fits == Some(false))),
        tpu_compile_s_total: rows
            .iter()
            .filter_map(|r| {
                r.tpu
                    .as_ref()
                    .map(|t| t.compile_ms * r.compiles as f64 / 1e3)
            })
            .sum(),
        cpu_compile_s_total: rows
            .iter()
            .map(|r| r.cpu_compile_ms * r.compiles as f64 / 1e3)
            .sum(),
        step: step_bound(traces, inputs.replays),
        recompiles: family_costs(traces, report, inputs, chips),
        price_per_chip_hour: inputs.price_per_chip_hour,
        slowest_compile: slowest,
        programs: rows,
    }
}

fn slowest_compile(
    rows: &[(ProgramKey, ProgramRow)],
    replays: &BTreeMap<ProgramKey, Result<Replayed, String>>,
) -> Option<SlowestCompile> {
    let (row, r) = rows
        .iter()
        .filter_map(|(k, row)| Some((row, replays.get(k)?.as_ref().ok()?)))
        .max_by(|a, b| a.1.compile_ms.total_cmp(&b.1.compile_ms))?;
    Some(SlowestCompile {
        program: row.name.clone(),
        compile_ms: r.compile_ms,
        passes: r.passes.clone(),
    })
}

/// Each distinct program of the traces with its compiles (replay results not yet filled in).
fn program_rows(traces: &[Run<'_>]) -> Vec<(ProgramKey, ProgramRow)> {
    let mut rows: Vec<(ProgramKey, ProgramRow)> = Vec::new();
    for run in traces {
        for c in run.compiles() {
            if c.program_hash == 0 {
                continue;
            }
            let key = (c.program_hash, c.options_hash);
            let ms = c.dur_ns as f64 / 1e6;
            match rows.iter_mut().find(|(k, _)| *k == key) {
                Some((_, row)) => {
                    row.cpu_compile_ms =
                        (row.cpu_compile_ms * row.compiles as f64 + ms) / (row.compiles + 1) as f64;
                    row.compiles += 1;
                }
                None => rows.push((
                    key,
                    ProgramRow {
                        // A compile that failed made no executable to name.
                        name: if c.executable_name.is_empty() {
                            format!("(failed on the CPU stand-in, {})", c.program_format)
                        } else {
                            c.executable_name.clone()
                        },
                        program_hash: format!("{:016x}", c.program_hash),
                        compiles: 1,
                        cpu_compile_ms: ms,
                        tpu: None,
                        not_replayed: None,
                    },
                )),
            }
        }
    }
    rows
}

fn tpu_program(r: &Replayed, hbm: Option<u64>) -> TpuProgram {
    let oom_need = r
        .hbm_oom
        .as_ref()
        .and_then(|o| i64::try_from(o.required_bytes).ok());
    let need = oom_need.unwrap_or_else(|| r.memory.map_or(0, |m| m.need()));
    let hbm = hbm.and_then(|h| i64::try_from(h).ok());
    let fits = match (r.memory, oom_need, hbm) {
        (_, Some(_), _) => Some(false),
        (Some(_), None, Some(h)) => Some(need <= h),
        _ => None,
    };
    TpuProgram {
        compile_ms: r.compile_ms,
        memory: r.memory,
        need_bytes: need,
        fits,
        overflow_bytes: hbm.map_or(0, |h| (need - h).max(0)),
        flops: r.cost.get("flops").copied(),
        bytes_accessed: r.cost.get("bytes accessed").copied(),
        roofline_ms: r.cost.get("optimal_seconds").map(|s| s * 1e3),
    }
}

/// The program each executable of a trace runs (from its compile).
fn executable_programs(run: &Run<'_>) -> BTreeMap<u64, ProgramKey> {
    run.compiles()
        .filter(|c| c.executable_id != 0 && c.program_hash != 0)
        .map(|c| (c.executable_id, (c.program_hash, c.options_hash)))
        .collect()
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The steady-state steps of the first trace that has them: CPU step and TPU lower bound.
fn step_bound(
    traces: &[Run<'_>],
    replays: &BTreeMap<ProgramKey, Result<Replayed, String>>,
) -> Option<StepBound> {
    let roofline = |key: &ProgramKey| {
        replays
            .get(key)
            .and_then(|r| r.as_ref().ok())
            .and_then(|r| r.cost.get("optimal_seconds"))
            .map(|s| s * 1e3)
    };
    traces.iter().find_map(|run| {
        let steps = crate::steps::steps(run.trace, run.digest, &[]);
        let steady = steps.steady();
        if steady.is_empty() {
            return None;
        }
        let programs = executable_programs(run);
        let mut tpu = vec![0.0f64; steady.len()];
        let mut missing = 0u64;
        let first = steady.first()?.start_ns;
        let index = |t: u64| {
            let i = steady.partition_point(|s| s.end_ns <= t);
            steady
                .get(i)
                .filter(|s| s.start_ns <= t && t >= first)
                .map(|_| i)
        };
        let launches = run.digest.launches().map(|l| (l.executable_id, l.t_ns, 1));
        let summaries = run.digest.others().filter_map(|(_, r)| match r {
            tpuscope_core::Record::ExecuteSummary(e) => {
                Some((e.executable_id, e.t_start_ns, e.count))
            }
            _ => None,
        });
        for (id, t, n) in launches.chain(summaries) {
            let Some(i) = index(t) else { continue };
            match programs.get(&id).and_then(roofline) {
                Some(ms) => tpu[i] += ms * n as f64,
                None => missing += n,
            }
        }
        let mut cpu: Vec<f64> = steady
            .iter()
            .map(|s| s.end_ns.saturating_sub(s.start_ns) as f64 / 1e6)
            .collect();
        Some(StepBound {
            cpu_step_ms: median(&mut cpu)?,
            tpu_step_lower_bound_ms: median(&mut tpu)?,
            steps: steady.len() as u64,
            launches_without_roofline: missing,
        })
    })
}

/// Each recompiling family priced at TPU compile times.
fn family_costs(
    traces: &[Run<'_>],
    report: &crate::report::Report,
    inputs: &Inputs<'_>,
    chips: u32,
) -> Vec<FamilyCost> {
    report
        .recompiles
        .iter()
        .filter(|f| f.count >= 2)
        .filter_map(|f| {
            let run = traces.get(f.run)?;
            let times: Vec<Option<f64>> = f
                .members
                .iter()
                .filter(|m| !m.before_attach)
                .map(|m| match run.digest.other(m.event) {
                    Some(tpuscope_core::Record::Compile(c)) => inputs
                        .replays
                        .get(&(c.program_hash, c.options_hash))
                        .and_then(|r| r.as_ref().ok())
                        .map(|r| r.compile_ms),
                    _ => None,
                })
                .collect();
            let known: Vec<f64> = times.iter().flatten().copied().collect();
            if known.is_empty() {
                return None;
            }
            let mean = known.iter().sum::<f64>() / known.len() as f64;
            let ms: f64 = times.iter().map(|t| t.unwrap_or(mean)).sum();
            let tpu_compile_s = ms / 1e3;
            let chip_hours = tpu_compile_s * f64::from(chips.max(1)) / 3600.0;
            Some(FamilyCost {
                graph: f.graph.clone(),
                compiles: times.len() as u64,
                tpu_compile_s,
                chip_hours,
                cost: inputs.price_per_chip_hour.map(|p| p * chip_hours),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(name: &str) -> tpuscope_core::Trace {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real")
            .join(name);
        tpuscope_core::reader::read_trace_file(&p).unwrap()
    }

    fn replayed(temp: i64, roofline_s: f64) -> Replayed {
        Replayed {
            compile_ms: 1000.0,
            memory: Some(CompiledMemory {
                argument: 100,
                output: 50,
                alias: 10,
                temp,
                generated_code: 40,
                peak: 0,
            }),
            cost: BTreeMap::from([
                ("flops".to_string(), 2e6),
                ("optimal_seconds".to_string(), roofline_s),
            ]),
            topology_devices: 4,
            hbm_bytes_per_chip: Some(1000),
            hbm_source: "test".into(),
            ..Replayed::default()
        }
    }

    /// jax_lr recompiles `train_step` once per epoch (4 compiles of 4 programs): every program
    /// replayed at 1 s, one of them needing more than a chip holds.
    #[test]
    fn programs_fit_or_overflow_and_recompiles_are_priced_per_member() {
        let t = trace("jax_lr.tps");
        let d = crate::digest::Digest::of(&t);
        let run = Run {
            trace: &t,
            digest: &d,
        };
        let progs = program_rows(&[run]);
        assert!(progs.len() >= 4, "{progs:?}");
        let big = progs
            .iter()
            .find(|(_, r)| r.name.contains("train_step"))
            .map(|(k, _)| *k)
            .unwrap();
        let mut replays = BTreeMap::new();
        for (k, _) in &progs {
            let temp = if *k == big { 5000 } else { 100 };
            replays.insert(*k, Ok(replayed(temp, 0.001)));
        }
        let rep = crate::report::build_one("jax_lr.tps", &t, None);
        let w = build(
            &[run],
            &rep,
            &Inputs {
                topology: "v5e:2x2",
                libtpu: "libtpu.so",
                price_per_chip_hour: Some(1.2),
                replays: &replays,
            },
        );
        assert_eq!(w.chips, 4);
        assert_eq!(w.replayed as usize, progs.len());
        let row = w
            .programs
            .iter()
            .find(|r| r.tpu.as_ref().is_some_and(|t| t.fits == Some(false)))
            .unwrap();
        let tpu = row.tpu.as_ref().unwrap();
        // 100 + 50 - 10 + 5000 + 40 = 5180 bytes against 1000.
        assert_eq!(tpu.need_bytes, 5180);
        assert_eq!(tpu.overflow_bytes, 4180);
        assert_eq!(w.not_fitting, 1);
        let f = w
            .recompiles
            .iter()
            .find(|f| f.graph.contains("train_step"))
            .unwrap();
        let fam = rep.recompiles.iter().find(|x| x.graph == f.graph).unwrap();
        assert_eq!(f.compiles, fam.count);
        assert!((f.tpu_compile_s - fam.count as f64).abs() < 1e-9);
        assert!((f.chip_hours - f.tpu_compile_s * 4.0 / 3600.0).abs() < 1e-12);
        assert!((f.cost.unwrap() - f.chip_hours * 1.2).abs() < 1e-12);
        let step = w.step.as_ref().unwrap();
        assert!(step.tpu_step_lower_bound_ms > 0.0 && step.cpu_step_ms > 0.0);
    }

    #[test]
    fn libtpus_compile_time_hbm_oom_is_read_as_does_not_fit() {
        // libtpu 0.0.52's message for a 5e9-f32 output on v5e:2x2 (seen here).
        let m = "E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for \
                 HLO temporaries (18.63G) exceeds available HBM (15.75G). HLO module: jit_big.";
        let oom = HbmOom::parse(m).unwrap();
        assert_eq!(oom.required_bytes, (18.63 * f64::from(1u32 << 30)) as u64);
        assert_eq!(oom.available_bytes, (15.75 * f64::from(1u32 << 30)) as u64);
        assert!(HbmOom::parse("Custom emitter for lapack_sgetrf_ffi not found").is_none());
        let r = Replayed {
            hbm_oom: Some(oom.clone()),
            topology_devices: 4,
            ..Replayed::default()
        };
        let t = tpu_program(&r, Some(16_909_334_528));
        assert_eq!(t.fits, Some(false));
        assert_eq!(t.need_bytes as u64, oom.required_bytes);
        assert_eq!(t.overflow_bytes, t.need_bytes - 16_909_334_528);
    }

    #[test]
    fn a_program_not_replayed_says_why_and_is_not_counted_as_fitting() {
        let t = trace("jax_lr.tps");
        let d = crate::digest::Digest::of(&t);
        let run = Run {
            trace: &t,
            digest: &d,
        };
        let progs = program_rows(&[run]);
        let mut replays = BTreeMap::new();
        for (i, (k, _)) in progs.iter().enumerate() {
            let r = if i == 0 {
                Err("custom call lapack_sgetrf_ffi runs on CPU only".to_string())
            } else {
                Ok(replayed(10, 0.0))
            };
            replays.insert(*k, r);
        }
        let rep = crate::report::build_one("jax_lr.tps", &t, None);
        let w = build(
            &[run],
            &rep,
            &Inputs {
                topology: "v5e:2x2",
                libtpu: "libtpu.so",
                price_per_chip_hour: None,
                replays: &replays,
            },
        );
        assert_eq!(w.not_replayed, 1);
        assert!(
            w.programs_line()
                .ends_with(", 1 not; all compiled fit in a chip's HBM")
        );
        let row = &w.programs[0];
        assert!(row.tpu.is_none());
        assert!(row.not_replayed.as_deref().unwrap().contains("lapack"));
        assert_eq!(w.not_fitting, 0);
        assert!(w.recompiles.iter().all(|f| f.cost.is_none()));

        // Nothing compiled: nothing is said to fit.
        let failed: BTreeMap<ProgramKey, Result<Replayed, String>> = progs
            .iter()
            .map(|(k, _)| (*k, Err("libtpu: refused".to_string())))
            .collect();
        let w = build(
            &[run],
            &rep,
            &Inputs {
                topology: "v5e:2x2",
                libtpu: "libtpu.so",
                price_per_chip_hour: None,
                replays: &failed,
            },
        );
        assert_eq!(
            w.programs_line(),
            format!("{} programs: none compiled for the topology", progs.len())
        );
    }
}
