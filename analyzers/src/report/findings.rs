//! The findings: what is worth a user's attention, with a fix, ranked.

use super::*;

/// Set-up and tail compiles are a finding only past both: on a real job a minute of init
/// compiles is noise next to hours of training, but half an hour of it is not.
pub(super) const SETUP_COMPILE_FINDING_MS: f64 = 30_000.0;

pub(super) const SETUP_COMPILE_FINDING_SHARE: f64 = 0.2;

/// An op site in the steady state is a finding when it keeps compiling: at least this many
/// compiles, in at least this many distinct steps.
pub(super) const OP_SITE_FINDING_COMPILES: u64 = 3;

pub(super) const OP_SITE_FINDING_STEPS: u32 = 3;

/// A sync line is a finding when it blocks in at least this share of the steady-state steps.
pub(super) const SYNC_STEP_SHARE: f64 = 0.25;

pub(super) fn findings(report: &Report, frontend: &Frontend, steps: &[Steps]) -> Vec<Finding> {
    let mut out = Vec::new();
    recompile_findings(report, &mut out);
    op_site_findings(report, frontend, &mut out);
    out.extend(setup_compile_finding(report, frontend));
    sync_findings(report, steps, &mut out);
    cache_findings(report, frontend, &mut out);
    out.extend(oom_finding(report));
    hbm_findings(report, &mut out);
    out
}

/// The families marked as findings, each with the families recompiled in the same steps.
fn recompile_findings(report: &Report, out: &mut Vec<Finding>) {
    for f in report.recompiles.iter().filter(|f| f.finding) {
        let with: Vec<&FamilyReport> = report
            .recompiles
            .iter()
            .filter(|o| o.run == f.run && o.recompiled_with.as_deref() == Some(f.graph.as_str()))
            .collect();
        let also = if with.is_empty() {
            String::new()
        } else {
            format!(
                "; with it, in the same steps: {}",
                with.iter()
                    .map(|o| format!("{} {}× ({:.0} ms)", o.graph, o.count, o.compile_ms))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        out.push(Finding {
            kind: crate::report::FindingKind::Recompile,
            title: format!(
                "{} compiled {}× ({}, {:.0} ms{}): {}{also}",
                f.graph,
                f.count,
                f.cause,
                f.compile_ms,
                f.before_attach_note(),
                f.details
            ),
            source: f.source.clone(),
            suggestion: f.suggestion.clone(),
        });
    }
}

/// Eager op sites that keep compiling in the steady state.
fn op_site_findings(report: &Report, frontend: &Frontend, out: &mut Vec<Finding>) {
    for p in report.phases.iter().filter(|p| p.phase == Phase::Steady) {
        for o in &p.op_sites {
            if o.compiles < OP_SITE_FINDING_COMPILES
                || o.steps < OP_SITE_FINDING_STEPS
                || o.explained_by.is_some()
            {
                continue;
            }
            let at = o
                .source
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            let inside = o
                .library
                .as_ref()
                .map(|l| format!(" (inside {} {})", l, l.function))
                .unwrap_or_default();
            out.push(Finding {
                kind: crate::report::FindingKind::Recompile,
                title: format!(
                    "eager ops{at}{inside} kept compiling in the steady state: {} compiles in {} steps ({:.0} ms): {}",
                    o.compiles,
                    o.steps,
                    o.compile_ms,
                    o.ops.join(", ")
                ),
                source: o.source.clone(),
                suggestion: if frontend.is_jax() {
                    format!("each new shape compiles these ops again: move the code{at} into the jitted step (or `jax.jit` the function that holds it) and keep its shapes fixed")
                } else {
                    format!("each new shape compiles these ops again: keep the shapes{at} fixed (pad or bucket them)")
                },
            });
        }
    }
}

/// Compiling outside the training loop, when it is a large share of the run.
fn setup_compile_finding(report: &Report, frontend: &Frontend) -> Option<Finding> {
    let outside: f64 = report
        .phases
        .iter()
        .filter(|p| p.phase != Phase::Steady)
        .map(|p| p.compile_ms)
        .sum();
    let wall: f64 = report.phases.iter().map(|p| p.dur_ms).sum();
    let large = outside >= SETUP_COMPILE_FINDING_MS
        && wall > 0.0
        && outside / wall >= SETUP_COMPILE_FINDING_SHARE;
    if !large {
        return None;
    }
    let ops: u64 = report
        .phases
        .iter()
        .filter(|p| p.phase != Phase::Steady)
        .map(|p| p.op_compiles)
        .sum();
    let op_part = if ops > 0 {
        if frontend.is_jax() {
            format!(
                "; {ops} of them are eager ops: `jax.jit` the set-up code (e.g. `jax.jit(model.init)`) so one program replaces them"
            )
        } else {
            format!("; {ops} of them are eager ops compiled one by one")
        }
    } else {
        String::new()
    };
    Some(Finding {
        kind: crate::report::FindingKind::SetupCompile,
        title: format!(
            "compiling outside the training loop takes {:.1} s, {:.0}% of the run (set-up {:.1} s, tail {:.1} s)",
            outside / 1e3,
            outside / wall * 100.0,
            report.compiles.setup_compile_ms / 1e3,
            (outside - report.compiles.setup_compile_ms) / 1e3
        ),
        source: None,
        suggestion: format!(
            "every start pays this again: enable the persistent compilation cache so restarts load the programs{op_part}"
        ),
    })
}

/// Host syncs frequent enough in the steady state to be worth removing.
fn sync_findings(report: &Report, steps: &[Steps], out: &mut Vec<Finding>) {
    let later_steps: usize = steps.iter().map(|s| s.steady().len()).sum();

    for s in &report.syncs {
        let frequent = if later_steps > 0 {
            s.count >= 2
                && f64::from(s.steps_with_sync) >= (later_steps as f64 * SYNC_STEP_SHARE).max(1.0)
        } else {
            s.count >= 3
        };
        // A wait that reads nothing (`block_until_ready`, equinox's wait after every
        // `filter_jit` call) is recorded only when it happened to block, so how often it shows
        // depends on timing; and it is most often deliberate. It is listed with its stall, never
        // a finding: the reads a value is needed for are.
        let wait_only = s.bytes == 0 && s.what.iter().all(|w| !w.contains('['));
        if !frequent || wait_only {
            continue;
        }
        let Some(src) = &s.source else { continue };
        let per_step = s
            .per_step
            .map(|p| format!(", {p:.1} per step"))
            .unwrap_or_default();
        out.push(Finding {
            kind: crate::report::FindingKind::Sync,
            title: match &s.library {
                Some(lib) => format!(
                    "host sync inside {} (`{}` at {lib}) called from {src}: {}× ({:.3} ms stalled{per_step})",
                    syncs::library_package(&lib.file),
                    lib.function,
                    s.count,
                    s.stall_ms
                ),
                None => format!(
                    "host sync at {src}: {}× ({:.3} ms stalled{per_step})",
                    s.count, s.stall_ms
                ),
            },
            source: Some(src.clone()),
            suggestion: s.suggestion.clone(),
        });
    }
}

/// Cache entries stored but compiled again in a later run, and entries that failed to load.
fn cache_findings(report: &Report, frontend: &Frontend, out: &mut Vec<Finding>) {
    let c = &report.cache;
    // One finding per pair of runs, naming the graphs.
    let mut pairs: BTreeMap<(usize, usize), (Vec<&str>, u64)> = BTreeMap::new();
    for s in &c.stored_but_recompiled {
        let e = pairs
            .entry((s.stored_in_run, s.recompiled_in_run))
            .or_insert((Vec::new(), s.loads_attempted_in_run));
        if !e.0.contains(&s.graph.as_str()) {
            e.0.push(&s.graph);
        }
    }
    for ((stored, again), (graphs, attempts)) in pairs {
        let listed = if graphs.len() > 4 {
            format!("{} and {} more", graphs[..4].join(", "), graphs.len() - 4)
        } else {
            graphs.join(", ")
        };
        let why = if attempts == 0 {
            format!(
                "run {again} never asked the plugin to load anything: the frontend rejected or skipped the cached entries before PJRT"
            )
        } else {
            format!("run {again} tried {attempts} load(s), but compiled these anyway")
        };
        let suggestion = match (frontend, attempts) {
            (Frontend::TorchXla, 0) => "torch_xla 2.9 fails to deserialize its own cache entries through the PJRT C API (it logs `Deserializing serialized executable not supported`; pytorch/xla#9094): the cache only costs write time here — disable it, or use a torch_xla/plugin pair that deserializes".to_string(),
            (_, 0) => "check that run 2 points at the same cache directory, with the same compile options and versions, and that the frontend's cache is enabled before the first compile".to_string(),
            _ => "compare the failed loads' messages (deserialize failures) and keep frontend, plugin and compile options identical between runs".to_string(),
        };
        out.push(Finding {
            kind: crate::report::FindingKind::Cache,
            title: format!(
                "cache written but never read back: {} graph(s) stored in run {stored} were compiled again in run {again} ({listed}); {why}",
                graphs.len()
            ),
            source: None,
            suggestion,
        });
    }
    for fl in &c.failures {
        out.push(Finding {
            kind: crate::report::FindingKind::Cache,
            title: format!(
                "{}× persistent cache entry failed to load: {}",
                fl.count, fl.message
            ),
            source: None,
            suggestion: "the cache is written but cannot be read back on this plugin/version: every restart recompiles; fix the plugin version or disable the cache to save the write time".into(),
        });
    }
}

/// The out-of-memory error, with the largest executable to shrink.
fn oom_finding(report: &Report) -> Option<Finding> {
    report.oom.as_ref().map(|o| {
        Finding {
            kind: crate::report::FindingKind::Oom,
            title: format!("out of device memory at {:.1} ms in {}: {}", o.t_ms, o.api, o.message.lines().next().unwrap_or("")),
            source: None,
            suggestion: match o.largest_executables.first() {
                Some(e) => format!(
                    "the largest executable is {} (peak {} MiB, temp {} MiB): shard it, rematerialize, or lower the batch size",
                    e.graph,
                    e.peak_bytes / (1 << 20),
                    e.temp_bytes / (1 << 20)
                ),
                None => "lower the batch size or shard the model".into(),
            },
        }
    })
}

/// Devices whose memory grows step after step.
fn hbm_findings(report: &Report, out: &mut Vec<Finding>) {
    for d in &report.hbm {
        if let (Some(g), Some(limit)) = (d.growth_bytes_per_step, d.limit_bytes)
            && g > 0.0
            && report.steps.count >= 5
            && g * report.steps.count as f64 > 0.05 * limit as f64
        {
            out.push(Finding {
                kind: crate::report::FindingKind::Hbm,
                title: format!(
                    "device {} memory grows {:.0} KiB per step (peak {:.1}% of the limit)",
                    d.device,
                    g / 1024.0,
                    d.peak_fraction.unwrap_or(0.0) * 100.0
                ),
                source: None,
                suggestion: "something keeps device arrays alive across steps (a growing list of losses or activations): keep Python references per step only".into(),
            });
        }
    }
}
