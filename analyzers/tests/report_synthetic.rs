//! The report over traces written with the real trace writer: each analysis against a run whose
//! answer is known by construction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use tpuscope_analyzers::phases::Phase;
use tpuscope_analyzers::report::{
    Budget, Finding, Input, Report, analyze, apply_budgets, compare_baseline,
};
use tpuscope_analyzers::{BudgetKey, Cause};
use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, Trace, TraceWriter, read_trace};

const MS: u64 = 1_000_000;

struct Run {
    w: TraceWriter<Vec<u8>>,
}

fn frame(file: &str, line: u32, function: &str) -> RawStackEntry {
    RawStackEntry {
        file: Arc::from(file),
        function: Arc::from(function),
        line,
    }
}

const JAX_FRAME: &str = "/venv/lib/python3.11/site-packages/jax/_src/pjit.py";

impl Run {
    fn new(job: &str, process_index: u32, start_wall_ns: u64) -> Run {
        let m = Manifest {
            pid: 100 + process_index,
            host: format!("host{process_index}"),
            start_wall_ns,
            start_mono_ns: 0,
            command_line: vec!["python".into(), "train.py".into()],
            plugin_path: "/x/pjrt_c_api_cpu_plugin.so".into(),
            pjrt_api_major: 0,
            pjrt_api_minor: 115,
            collector_version: "test".into(),
            job_id: job.into(),
            process_index,
            frontend: "jax".into(),
            ..Manifest::default()
        };
        Run {
            w: TraceWriter::new(Vec::new(), &m).unwrap(),
        }
    }

    fn stack(&mut self, line: u32) -> u32 {
        self.w
            .intern_stack(&[
                frame(JAX_FRAME, 10, "cache_miss"),
                frame("/home/me/train.py", line, "main"),
            ])
            .unwrap()
    }

    fn compile(&mut self, t: u64, name: &str, hlo: &[u8], exe: u64, line: u32) {
        self.compile_for(t, name, hlo, exe, line, 5 * MS);
    }

    /// A compile of `dur` of a graph the user's `line` called.
    fn compile_for(&mut self, t: u64, name: &str, hlo: &[u8], exe: u64, line: u32, dur: u64) {
        let stack = self.stack(line);
        self.compile_with_stack(t, name, hlo, exe, stack, dur);
    }

    fn compile_with_stack(
        &mut self,
        t: u64,
        name: &str,
        hlo: &[u8],
        exe: u64,
        stack: u32,
        dur: u64,
    ) {
        let h = self
            .w
            .put_blob("optimized", "hlo_with_config", hlo)
            .unwrap();
        self.w
            .write(&Record::Compile(Box::new(Compile {
                t_ns: t,
                dur_ns: dur,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_hash: h ^ 1,
                options_hash: 7,
                executable_name: name.into(),
                optimized_hash: h,
                optimized_format: "hlo_with_config".into(),
                memory: Some(CompiledMemoryStats {
                    argument_size: 1000,
                    output_size: 500,
                    temp_size: exe as i64 * 100,
                    peak_memory: exe as i64 * 1000,
                    ..Default::default()
                }),
                stack,
                executable_id: exe,
                num_outputs: 1,
                num_devices: 1,
                ..Default::default()
            })))
            .unwrap();
    }

    /// A compile of `dur` asked for by an eager op (JAX's `apply_primitive`) that flax's
    /// initializers ran from the user's `line`.
    fn op_compile(&mut self, t: u64, name: &str, hlo: &[u8], exe: u64, line: u32, dur: u64) {
        let stack = self
            .w
            .intern_stack(&[
                frame(JAX_FRAME, 10, "cache_miss"),
                frame(
                    "/venv/lib/python3.11/site-packages/jax/_src/dispatch.py",
                    88,
                    "apply_primitive",
                ),
                frame(
                    "/venv/lib/python3.11/site-packages/jax/_src/nn/initializers.py",
                    300,
                    "init",
                ),
                frame(
                    "/venv/lib/python3.11/site-packages/flax/core/scope.py",
                    983,
                    "Scope.param",
                ),
                frame("/home/me/train.py", line, "main"),
            ])
            .unwrap();
        self.compile_with_stack(t, name, hlo, exe, stack, dur);
    }

    fn execute_for(&mut self, t: u64, exe: u64, dur: u64) {
        self.w
            .write(&Record::Execute(Execute {
                t_ns: t,
                dur_ns: dur,
                executable_id: exe,
                num_devices: 1,
                ..Default::default()
            }))
            .unwrap();
    }

    fn execute(&mut self, t: u64, exe: u64) {
        self.w
            .write(&Record::Execute(Execute {
                t_ns: t,
                dur_ns: 1000,
                executable_id: exe,
                num_devices: 1,
                ..Default::default()
            }))
            .unwrap();
    }

    fn read(&mut self, t: u64, line: u32, blocked: u64) {
        let stack = self
            .w
            .intern_stack(&[
                frame(
                    "/venv/lib/python3.11/site-packages/jax/_src/array.py",
                    623,
                    "_value",
                ),
                frame("/home/me/train.py", line, "main"),
            ])
            .unwrap();
        self.w
            .write(&Record::Transfer(Box::new(Transfer {
                t_ns: t,
                direction: Direction::D2h as i32,
                api: "PJRT_Buffer_ToHostBuffer".into(),
                bytes: 4,
                dtype: "f32".into(),
                sync: true,
                blocked_ns: blocked,
                stack,
                ..Default::default()
            })))
            .unwrap();
    }

    fn memory(&mut self, t: u64, bytes: i64, limit: Option<i64>) {
        self.w
            .write(&Record::Memory(Box::new(Memory {
                t_ns: t,
                device: 0,
                origin: MemoryOrigin::PluginStats as i32,
                bytes_in_use: bytes,
                bytes_limit: limit,
                ..Default::default()
            })))
            .unwrap();
    }

    fn write(&mut self, r: Record) {
        self.w.write(&r).unwrap();
    }

    fn finish(mut self, t: u64) -> Trace {
        self.w
            .write(&Record::End(End {
                t_ns: t,
                ..Default::default()
            }))
            .unwrap();
        read_trace(&self.w.into_inner()).unwrap()
    }
}

fn hlo(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/hlo")
            .join(name),
    )
    .unwrap()
}

fn lr(which: &str) -> Vec<u8> {
    hlo(&format!(
        "jax_lr_cpu_lr{which}.optimized.hlo_with_config.pb"
    ))
}

/// The findings of one kind.
fn findings_of<'a>(rep: &'a Report, kind: &str) -> Vec<&'a Finding> {
    rep.findings
        .iter()
        .filter(|f| f.kind.as_str() == kind)
        .collect()
}

fn report(traces: &[&Trace]) -> Report {
    let inputs: Vec<Input<'_>> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| Input::new(format!("t{i}.tps"), t))
        .collect();
    analyze(&inputs)
}

/// A loop of `steps` steps of one executable, 10 ms apart from t=100 ms, with a read at line 20
/// every step, and the learning rate changed (recompiled) at the steps in `recompile_at`.
fn training(steps: u64, recompile_at: &[u64]) -> Trace {
    let mut r = Run::new("", 0, 1);
    r.compile(90 * MS, "jit_train_step", &lr("0.1"), 1, 12);
    let mut exe = 1;
    for s in 0..steps {
        let t = 100 * MS + s * 10 * MS;
        if recompile_at.contains(&s) {
            exe += 1;
            let which = if exe % 2 == 0 { "0.05" } else { "0.1" };
            r.compile(t - MS, "jit_train_step", &lr(which), exe, 12);
        }
        r.execute(t, exe);
        r.read(t + 2 * MS, 20, 50_000);
        r.memory(t + 3 * MS, 1_000_000 + s as i64 * 10_000, Some(100_000_000));
    }
    r.finish(100 * MS + steps * 10 * MS)
}

#[test]
fn steady_state_recompiles_are_findings_with_the_values_and_line() {
    let t = training(10, &[5, 7]);
    let rep = report(&[&t]);
    assert_eq!(rep.compiles.total, 3);
    assert_eq!(rep.recompiles.len(), 1, "{:#?}", rep.recompiles);
    let f = &rep.recompiles[0];
    assert_eq!(
        (f.graph.as_str(), f.count, f.cause),
        ("jit_train_step", 3, Cause::ConstantChanged)
    );
    assert!(f.finding);
    assert_eq!(f.steady_state_recompiles, 2);
    assert!(f.details.contains("0.1 → 0.05"), "{}", f.details);
    // The third compile is the first program again: compared with it, not with the second.
    let last = f.members.last().unwrap();
    assert_eq!(last.against, Some(0));
    assert_eq!(last.cause, Some(Cause::IdenticalProgram));
    assert_eq!(rep.cache.recompiled_same_program, 1);
    // The HLO names the line of `lr * g` in the workload it was recorded from.
    assert!(f.source.as_ref().unwrap().file.ends_with("jax_lr.py"));
    assert_eq!(rep.compiles.recompiles, 2);
    assert_eq!(rep.compiles.by_cause.get("constant_changed"), Some(&2));
    assert!(
        rep.findings
            .iter()
            .any(|x| x.kind == tpuscope_analyzers::report::FindingKind::Recompile)
    );
}

#[test]
fn recompiles_during_warm_up_are_listed_but_not_findings() {
    // Recompiled at step index 1: still warm-up.
    let t = training(10, &[1]);
    let rep = report(&[&t]);
    assert_eq!(rep.recompiles.len(), 1);
    assert!(!rep.recompiles[0].finding);
    assert_eq!(rep.compiles.recompiles, 0);
    assert_eq!(rep.compiles.warmup_recompiles, 1);
    assert!(
        !rep.findings
            .iter()
            .any(|x| x.kind == tpuscope_analyzers::report::FindingKind::Recompile)
    );
}

#[test]
fn syncs_group_by_the_user_line_and_steps_come_from_the_dominant_executable() {
    let t = training(10, &[]);
    let rep = report(&[&t]);
    assert_eq!(rep.steps.count, 10);
    assert!(
        rep.steps.detected_by.contains("jit_train_step"),
        "{}",
        rep.steps.detected_by
    );
    assert_eq!(rep.steps.syncs_per_step, 1);
    assert_eq!(rep.steps.graph_fragments_per_step, 1);
    assert_eq!(rep.syncs.len(), 1);
    let s = &rep.syncs[0];
    let src = s.source.as_ref().unwrap();
    // The innermost frame is jax's; the user's line is the one reported.
    assert_eq!((src.file.as_str(), src.line), ("/home/me/train.py", 20));
    assert_eq!((s.count, s.bytes), (10, 40));
    assert!((s.stall_ms - 0.5).abs() < 1e-9, "{}", s.stall_ms);
    assert!(
        rep.findings
            .iter()
            .any(|f| f.kind == tpuscope_analyzers::report::FindingKind::Sync)
    );
}

/// The plugin gave a destroyed warm-up graph's address to the training step (a long run's
/// common case: an old `jit` dropped, a graph evicted from torch_xla's cache): the step's
/// launches are its own, not the warm-up's.
#[test]
fn an_executable_at_a_reused_address_is_its_own() {
    let mut r = Run::new("", 0, 1);
    r.compile(
        10 * MS,
        "jit_warm_up",
        &hlo("torch_xla_item_step0.optimized.hlo_with_config.pb"),
        7,
        9,
    );
    r.execute(20 * MS, 7);
    r.execute(21 * MS, 7);
    // The step's compile returns the same address (90..95 ms); a launch of the warm-up written
    // after it in the file, made before it returned, stays the warm-up's.
    r.compile(90 * MS, "jit_train_step", &lr("0.1"), 7, 12);
    r.execute(92 * MS, 7);
    for s in 0..10 {
        let t = 100 * MS + s * 10 * MS;
        r.execute(t, 7);
        r.read(t + 2 * MS, 20, 50_000);
    }
    let t = r.finish(200 * MS);
    let rep = report(&[&t]);
    assert!(
        rep.steps.detected_by.contains("jit_train_step"),
        "{}",
        rep.steps.detected_by
    );
    assert_eq!(rep.steps.count, 10);
    assert_eq!(rep.steps.graph_fragments_per_step, 1);
    // Each graph was compiled once: no recompile of either.
    assert!(
        findings_of(&rep, "recompile").is_empty(),
        "{:?}",
        rep.findings
    );
}

#[test]
fn markers_define_steps_and_fragments_per_step() {
    let mut r = Run::new("", 0, 1);
    r.compile(MS, "a", &lr("0.1"), 1, 12);
    r.compile(2 * MS, "b", &lr("0.05"), 2, 13);
    for s in 0..6u64 {
        let t = 10 * MS + s * 10 * MS;
        r.execute(t, 1);
        // Step 3 is split into three fragments.
        for k in 0..if s == 3 { 3 } else { 1 } {
            r.execute(t + (k + 1) * MS, 2);
        }
        r.write(Record::Step(Step {
            t_ns: t + 8 * MS,
            marker: "torch_xla.sync".into(),
            number: s + 1,
            ..Default::default()
        }));
        r.write(Record::Step(Step {
            t_ns: t + 7 * MS,
            marker: "optimizer.step".into(),
            number: s + 1,
            ..Default::default()
        }));
    }
    let t = r.finish(100 * MS);
    let rep = report(&[&t]);
    assert_eq!(rep.steps.detected_by, "marker torch_xla.sync");
    assert_eq!(rep.steps.count, 6);
    assert_eq!(rep.steps.graph_fragments_per_step, 4);
    assert!(rep.steps.mean_graph_fragments_per_step > 2.0);
    assert_eq!(rep.steps.syncs_per_step, 0);
}

#[test]
fn hbm_peak_limit_and_growth() {
    let t = training(10, &[]);
    let rep = report(&[&t]);
    assert_eq!(rep.hbm.len(), 1);
    let d = &rep.hbm[0];
    assert_eq!(d.peak_bytes, 1_090_000);
    assert_eq!(d.limit_bytes, Some(100_000_000));
    assert!((d.peak_fraction.unwrap() - 0.0109).abs() < 1e-9);
    let g = d.growth_bytes_per_step.unwrap();
    assert!((g - 10_000.0).abs() < 1.0, "{g}");
}

#[test]
fn out_of_memory_gets_a_post_mortem() {
    let mut r = Run::new("", 0, 1);
    r.compile(MS, "small", &lr("0.1"), 1, 12);
    r.compile(2 * MS, "huge", &lr("0.05"), 9, 13);
    r.memory(3 * MS, 123_456, Some(1_000_000));
    r.execute(4 * MS, 9);
    r.write(Record::Error(ErrorEvent {
        t_ns: 5 * MS,
        api: "PJRT_LoadedExecutable_Execute".into(),
        code: 8,
        message: "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 17G of 16G hbm."
            .into(),
        ..Default::default()
    }));
    let t = r.finish(6 * MS);
    let rep = report(&[&t]);
    let o = rep.oom.as_ref().expect("an OOM post-mortem");
    assert_eq!(o.api, "PJRT_LoadedExecutable_Execute");
    assert_eq!(o.largest_executables[0].graph, "huge");
    assert_eq!(o.memory_at_error.get(&0), Some(&123_456));
    assert!(
        o.last_events.last().unwrap().contains("execute huge"),
        "{:?}",
        o.last_events
    );
    assert!(
        rep.findings
            .iter()
            .any(|f| f.kind == tpuscope_analyzers::report::FindingKind::Oom
                && f.suggestion.contains("huge"))
    );
    assert_eq!(rep.errors.len(), 1);
}

#[test]
fn budgets_pass_fail_and_unknown() {
    let t = training(10, &[5, 7]);
    let mut rep = report(&[&t]);
    let b = |s: &str| s.parse::<Budget>().unwrap();
    apply_budgets(
        &mut rep,
        &[
            b("recompiles=1"),
            b("recompiles=2"),
            b("syncs-per-step=0"),
            b("compiles=3"),
            b("hbm-peak-fraction=0.5"),
            b("cache-misses=0"),
        ],
    );
    let got: Vec<(String, bool, String)> = rep
        .budgets
        .iter()
        .map(|b| (b.name.clone(), b.ok, b.status.as_str().to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("recompiles".into(), false, "exceeded".into()),
            ("recompiles".into(), true, "ok".into()),
            ("syncs-per-step".into(), false, "exceeded".into()),
            ("compiles".into(), true, "ok".into()),
            ("hbm-peak-fraction".into(), true, "ok".into()),
            // lr 0.1 → 0.05 → 0.1: the last compile is a program compiled before.
            ("cache-misses".into(), false, "exceeded".into()),
        ]
    );
    assert!(tpuscope_analyzers::report::failed(&rep));

    // Without a memory limit the fraction is unknown, which does not fail.
    let mut r = Run::new("", 0, 1);
    r.memory(MS, 5, None);
    let t = r.finish(2 * MS);
    let mut rep = report(&[&t]);
    apply_budgets(&mut rep, &[b("hbm-peak-fraction=0.1")]);
    assert_eq!(rep.budgets[0].status.as_str(), "unknown");
    assert!(rep.budgets[0].ok && rep.budgets[0].actual.is_none());
    assert!(!tpuscope_analyzers::report::failed(&rep));
}

#[test]
fn budget_specs_are_checked() {
    assert_eq!(
        "syncs-per-step=2".parse::<Budget>().unwrap().key,
        BudgetKey::SyncsPerStep
    );
    for bad in [
        "foo=1",
        "compiles",
        "compiles=x",
        "compiles=-1",
        "compiles=inf",
    ] {
        assert!(bad.parse::<Budget>().is_err(), "{bad}");
    }
}

#[test]
fn baseline_flags_new_families_and_more_syncs() {
    let clean = training(10, &[]);
    let old = serde_json::to_value(report(&[&clean])).unwrap();
    let worse = training(10, &[5, 7]);
    let mut rep = report(&[&worse]);
    compare_baseline(&mut rep, &old);
    let b = rep.baseline.as_ref().unwrap();
    assert!(!b.ok);
    assert!(
        b.regressions
            .iter()
            .any(|r| r.contains("new recompile family")),
        "{b:?}"
    );

    let mut same = report(&[&clean]);
    compare_baseline(&mut same, &old);
    assert!(same.baseline.as_ref().unwrap().ok);

    // Fewer syncs per step than the baseline is an improvement, more is a regression.
    let mut more = serde_json::to_value(report(&[&clean])).unwrap();
    more["steps"]["syncs_per_step"] = 0.into();
    let mut rep = report(&[&clean]);
    compare_baseline(&mut rep, &more);
    let b = rep.baseline.as_ref().unwrap();
    assert!(
        b.regressions.iter().any(|r| r.contains("syncs per step")),
        "{b:?}"
    );
}

#[test]
fn successive_runs_are_ordered_by_start_and_cache_misses_cross_runs() {
    let mk = |start: u64, store: bool| {
        let mut r = Run::new("", 0, start);
        r.compile(MS, "jit_f", &lr("0.1"), 1, 12);
        if store {
            r.write(Record::CacheStore(Box::new(CacheStore {
                t_ns: 2 * MS,
                executable_id: 77,
                executable_name: "jit_f".into(),
                bytes: 100,
                ..Default::default()
            })));
        }
        r.finish(3 * MS)
    };
    let first = mk(1_000, true);
    let second = mk(2_000, false);
    // Given in the wrong order: the report orders them by start time.
    let rep = report(&[&second, &first]);
    assert_eq!(rep.runs.assumed, "successive_runs");
    assert_eq!(rep.traces[0].start_wall_ns, 1_000);
    assert_eq!(rep.cache.persistent_stores, 1);
    assert_eq!(rep.cache.recompiled_same_program, 1);
    assert_eq!(rep.cache.stored_but_recompiled.len(), 1);
    assert_eq!(rep.cache.stored_but_recompiled[0].stored_in_run, 0);
    assert!(
        rep.findings
            .iter()
            .any(|f| f.kind == tpuscope_analyzers::report::FindingKind::Cache
                && f.title.contains("never read back"))
    );
}

#[test]
fn hosts_of_one_job_are_not_cache_misses_of_each_other() {
    let mk = |idx: u32| {
        let mut r = Run::new("job-42", idx, 1_000 + u64::from(idx));
        r.compile(MS, "jit_f", &lr("0.1"), 1, 12);
        r.finish(3 * MS)
    };
    let (a, b) = (mk(1), mk(0));
    let rep = report(&[&a, &b]);
    assert_eq!(rep.runs.assumed, "multi_host_job");
    assert_eq!(rep.traces[0].process_index, 0);
    assert_eq!(rep.cache.recompiled_same_program, 0);
    assert_eq!(rep.compiles.total, 2);
}

#[test]
fn a_cut_trace_reports_what_it_holds() {
    let t = training(10, &[5, 7]);
    let mut r = Run::new("", 0, 1);
    r.compile(MS, "jit_f", &lr("0.1"), 1, 12);
    let mut bytes = r.w.into_inner();
    let whole = bytes.len();
    bytes.truncate(whole - 3);
    let cut = read_trace(&bytes).unwrap();
    let rep = report(&[&cut]);
    assert!(
        rep.warnings.iter().any(|w| w.contains("cut")),
        "{:?}",
        rep.warnings
    );
    assert_eq!(rep.traces[0].completeness.as_str(), "cut");
    // And the whole one is complete, with no warning.
    let rep = report(&[&t]);
    assert!(rep.warnings.is_empty(), "{:?}", rep.warnings);
}

/// A killed process's trace (no end record) says when recording stopped and in which step: its
/// last record's end from the run's start, and the step under way then.
#[test]
fn a_killed_run_says_when_and_in_which_step_recording_stopped() {
    // Launch-cut steps: the loop's 7th launch at 160 ms starts step 7; the kill comes after its
    // read (162 ms) and memory sample (163 ms): no launch started an 8th. The manifest has no
    // start time: the run starts at its first record, the compile at 90 ms.
    let mut r = Run::new("", 0, 1);
    r.compile(90 * MS, "jit_train_step", &lr("0.1"), 1, 12);
    for s in 0..7u64 {
        let t = 100 * MS + s * 10 * MS;
        r.execute(t, 1);
        r.read(t + 2 * MS, 20, 50_000);
        r.memory(t + 3 * MS, 1_000_000, Some(100_000_000));
    }
    let killed = read_trace(&r.w.into_inner()).unwrap();
    let rep = report(&[&killed]);
    let last = rep.traces[0].last_record.unwrap();
    assert!((last.at_s - 0.073).abs() < 1e-12, "{last:?}");
    assert_eq!(last.step, Some(7));
    assert_eq!(rep.steps.count, 7);
    assert_eq!(
        rep.traces[0].completeness_line(),
        "no end record: the process died or is still running, partial report; recording stopped 73.0 ms into the run, in step 7"
    );
    assert_eq!(
        rep.warnings,
        [
            "t0.tps: no end record (the process died or is still running): recording stopped 73.0 ms into the run, in step 7; the report covers what it holds"
        ]
    );

    // Marker-cut steps: after the 4th marker the 5th step is under way (its launch ran, its
    // marker never came).
    let mut r = Run::new("", 0, 1);
    r.compile(MS, "a", &lr("0.1"), 1, 12);
    for s in 0..5u64 {
        let t = 10 * MS + s * 10 * MS;
        r.execute_for(t, 1, 2 * MS);
        if s < 4 {
            r.write(Record::Step(Step {
                t_ns: t + 8 * MS,
                marker: "torch_xla.sync".into(),
                number: s + 1,
                ..Default::default()
            }));
        }
    }
    let killed = read_trace(&r.w.into_inner()).unwrap();
    let rep = report(&[&killed]);
    assert_eq!(rep.steps.count, 4);
    let last = rep.traces[0].last_record.unwrap();
    // From the compile at 1 ms to the end of the 5th launch (50 ms, 2 ms long).
    assert!((last.at_s - 0.051).abs() < 1e-12, "{last:?}");
    assert_eq!(last.step, Some(5));

    // Killed during set-up, before any loop: no step to name.
    let mut r = Run::new("", 0, 1);
    r.compile(MS, "a", &lr("0.1"), 1, 12);
    let killed = read_trace(&r.w.into_inner()).unwrap();
    let rep = report(&[&killed]);
    let last = rep.traces[0].last_record.unwrap();
    assert_eq!(last.step, None);
    assert!(
        rep.warnings[0].contains(": recording stopped 5.0 ms into the run; the report"),
        "{:?}",
        rep.warnings
    );

    // A complete trace has none.
    let rep = report(&[&training(10, &[])]);
    assert!(rep.traces[0].last_record.is_none());
    assert_eq!(rep.traces[0].completeness_line(), "complete");
}

/// A plain TPU VM pod sets no job id nor process index: every trace says process 0. The PJRT
/// client knows better (8 devices over 2 processes, this process's addressable), so traces that
/// ran at the same time are one job's hosts, with PJRT's indices.
#[test]
fn processes_of_one_multi_process_pjrt_client_are_hosts_of_one_job_without_a_job_id() {
    let mk = |me: i32, start_wall: u64| {
        let mut r = Run::new("", 0, start_wall);
        r.write(Record::Client(Box::new(Client {
            t_ns: MS / 2,
            platform_name: "tpu".into(),
            devices: (0..8)
                .map(|id| DeviceInfo {
                    id,
                    kind: "TPU v5 lite".into(),
                    process_index: id / 4,
                    addressable: id / 4 == me,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })));
        r.compile(MS, "jit_f", &lr("0.1"), 1, 12);
        r.finish(3_000 * MS)
    };
    // Process 1 is given first and started 1 ms later: ordered by PJRT's index.
    let (h1, h0) = (mk(1, 1_001 * MS), mk(0, 1_000 * MS));
    let rep = report(&[&h1, &h0]);
    assert_eq!(rep.runs.assumed, "multi_host_job", "{}", rep.runs.note);
    assert!(rep.runs.note.contains("PJRT client"), "{}", rep.runs.note);
    let idx: Vec<u32> = rep.traces.iter().map(|t| t.process_index).collect();
    assert_eq!(idx, [0, 1]);
    let hosts = rep.hosts.as_ref().expect("a per-host table");
    let rows: Vec<u32> = hosts.hosts.iter().map(|h| h.process_index).collect();
    assert_eq!(rows, [0, 1]);

    // The same processes one after the other (a second run): successive runs.
    let later = mk(1, 1_000 * MS + 10_000 * MS);
    let rep = report(&[&h0, &later]);
    assert_eq!(rep.runs.assumed, "successive_runs", "{}", rep.runs.note);
    // Two traces of the same process index: successive runs too.
    let again = mk(0, 1_001 * MS);
    assert_eq!(report(&[&h0, &again]).runs.assumed, "successive_runs");
}

/// Set-up as flax runs it: dozens of eager ops (each compiled once per shape, some executed more
/// often than the loop's step) before a loop of one jitted step.
fn flax_like(setup_compile_ms: u64, steps: u64) -> Trace {
    let mut r = Run::new("", 0, 1);
    let mut t = 10 * MS;
    // 12 eager ops from one user line (the model's init), each compile setup_compile_ms / 12.
    for k in 0..12u64 {
        let which = if k % 2 == 0 { "0.1" } else { "0.05" };
        r.op_compile(
            t,
            "jit_broadcast_in_dim",
            &lr(which),
            100 + k,
            14,
            setup_compile_ms * MS / 12,
        );
        t += setup_compile_ms * MS / 12 + MS;
        // Cheap, and launched more often than the step will be.
        for _ in 0..(steps + 5) {
            r.execute_for(t, 100 + k, 10_000);
            t += 20_000;
        }
    }
    r.compile(t, "jit_train_step", &lr("0.1"), 1, 30);
    t += 10 * MS;
    for _ in 0..steps {
        r.execute_for(t, 1, 2 * MS);
        t += 10 * MS;
    }
    r.finish(t)
}

#[test]
fn eager_ops_of_set_up_are_grouped_by_line_not_recompiles_and_steps_come_from_the_step() {
    let t = flax_like(600, 20);
    let rep = report(&[&t]);
    // Twelve compiles of one op name with two programs: distinct eager programs, not a family.
    assert!(rep.recompiles.is_empty(), "{:#?}", rep.recompiles);
    assert_eq!(rep.compiles.op_compiles, 12);
    assert_eq!(rep.compiles.families, 1);
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
    // The step's graph, not the op launched more often.
    assert_eq!(rep.steps.count, 20);
    assert!(
        rep.steps.detected_by.contains("jit_train_step"),
        "{}",
        rep.steps.detected_by
    );
    let setup = rep.phases.iter().find(|p| p.phase == Phase::Setup).unwrap();
    assert_eq!(setup.op_compiles, 12);
    assert_eq!(setup.op_sites.len(), 1);
    let site = &setup.op_sites[0];
    assert_eq!(site.source.as_ref().unwrap().line, 14);
    assert!(
        site.library
            .as_ref()
            .unwrap()
            .file
            .ends_with("flax/core/scope.py")
    );
    // Stated, finding or not.
    assert!(rep.compiles.setup_compile_ms >= 600.0, "{:?}", rep.compiles);
    assert!(rep.compiles.setup_compile_share > 0.3, "{:?}", rep.compiles);
}

#[test]
fn set_up_compiles_are_a_finding_only_past_both_thresholds() {
    // 40 s of compiling in a ~41 s run: a finding, with the fix for eager init.
    let t = flax_like(40_000, 20);
    let rep = report(&[&t]);
    let f = findings_of(&rep, "setup_compile");
    assert_eq!(f.len(), 1, "{:#?}", rep.findings);
    assert!(
        f[0].suggestion.contains("jax.jit(model.init)"),
        "{}",
        f[0].suggestion
    );
    // 40 s of set-up compiles in a run whose loop takes far longer: under 20 %, not a finding.
    let t = flax_like(40_000, 30_000);
    let rep = report(&[&t]);
    assert!(
        rep.findings
            .iter()
            .all(|f| f.kind != tpuscope_analyzers::report::FindingKind::SetupCompile),
        "{:#?}",
        rep.findings
    );
    assert!(rep.compiles.setup_compile_share < 0.2, "{:?}", rep.compiles);
}

#[test]
fn graphs_recompiling_in_the_same_steps_for_the_same_cause_are_one_finding() {
    let mut r = Run::new("", 0, 1);
    r.compile_for(MS, "jit_fwd", &lr("0.1"), 1, 30, 50 * MS);
    r.compile_for(2 * MS, "jit_bwd", &lr("0.1"), 2, 30, 20 * MS);
    let (mut fwd, mut bwd) = (1, 2);
    for s in 0..10u64 {
        let t = 100 * MS + s * 10 * MS;
        if s == 5 || s == 7 {
            fwd += 10;
            bwd += 10;
            let which = if s == 5 { "0.05" } else { "0.1" };
            r.compile_for(t - 2 * MS, "jit_fwd", &lr(which), fwd, 30, 50 * MS);
            r.compile_for(t - MS, "jit_bwd", &lr(which), bwd, 30, 20 * MS);
        }
        r.execute_for(t, fwd, 3 * MS);
        r.execute_for(t + 4 * MS, bwd, 2 * MS);
    }
    let t = r.finish(300 * MS);
    let rep = report(&[&t]);
    let rec = findings_of(&rep, "recompile");
    assert_eq!(rec.len(), 1, "{:#?}", rep.findings);
    // The costlier graph carries it and names the other.
    assert!(rec[0].title.starts_with("jit_fwd"), "{}", rec[0].title);
    assert!(rec[0].title.contains("jit_bwd 3×"), "{}", rec[0].title);
    let bwd = rep
        .recompiles
        .iter()
        .find(|f| f.graph == "jit_bwd")
        .unwrap();
    assert!(!bwd.finding);
    assert_eq!(bwd.recompiled_with.as_deref(), Some("jit_fwd"));
    // Both count as recompiles.
    assert_eq!(rep.compiles.recompiles, 4);
}

#[test]
fn eager_ops_that_keep_compiling_in_the_loop_are_a_finding_unless_a_graph_explains_them() {
    // An eager op at line 40 compiles for a new shape in steps 4, 6 and 8 of the loop (a growing
    // Python list stacked every other step, say), while the step's graph never recompiles.
    let build = |recompile_graph: bool| {
        let mut r = Run::new("", 0, 1);
        r.compile(MS, "jit_train_step", &lr("0.1"), 1, 30);
        let mut graph = 1;
        let mut op = 100;
        for s in 0..12u64 {
            let t = 100 * MS + s * 10 * MS;
            let new_shape = (4..=8).contains(&s) && s % 2 == 0;
            if new_shape && recompile_graph {
                graph += 1;
                let which = if graph % 2 == 0 { "0.05" } else { "0.1" };
                r.compile(t - 2 * MS, "jit_train_step", &lr(which), graph, 30);
            }
            r.execute_for(t, graph, 3 * MS);
            if new_shape || s == 0 {
                op += 1;
                r.op_compile(t + 4 * MS, "jit_stack", &lr("0.1"), op, 40, MS);
            }
            r.execute_for(t + 6 * MS, op, 10_000);
        }
        r.finish(300 * MS)
    };
    let rep = report(&[&build(false)]);
    let f = findings_of(&rep, "recompile");
    assert_eq!(f.len(), 1, "{:#?}", rep.findings);
    assert!(
        f[0].title.starts_with("eager ops at me/train.py:40"),
        "{}",
        f[0].title
    );
    assert_eq!(f[0].source.as_ref().unwrap().line, 40);
    // The same op compiles, but each time with a recompile of the step's graph for the same
    // steps: that graph's finding says it, once.
    let rep = report(&[&build(true)]);
    let f = findings_of(&rep, "recompile");
    assert_eq!(f.len(), 1, "{:#?}", rep.findings);
    assert!(f[0].title.starts_with("jit_train_step"), "{}", f[0].title);
    let steady = rep
        .phases
        .iter()
        .find(|p| p.phase == Phase::Steady)
        .unwrap();
    assert_eq!(
        steady.op_sites[0].explained_by.as_deref(),
        Some("jit_train_step")
    );
}

#[test]
fn with_step_markers_a_compile_belongs_to_the_step_it_ran_in_not_to_its_later_launch() {
    // torch_xla: the second step's graph compiles inside its `sync()` (before the marker), and
    // a worker thread may launch it just after the marker: still warm-up, not a recompile of the
    // steady state.
    let mut r = Run::new("", 0, 1);
    let marker = |r: &mut Run, t: u64, n: u64| {
        r.write(Record::Step(Step {
            t_ns: t,
            marker: "torch_xla.sync".into(),
            number: n,
            ..Default::default()
        }))
    };
    r.compile(10 * MS, "SyncTensorsGraph.1", &lr("0.1"), 1, 30);
    r.execute(15 * MS, 1);
    marker(&mut r, 16 * MS, 1);
    r.compile(20 * MS, "SyncTensorsGraph.2", &lr("0.05"), 2, 30);
    marker(&mut r, 26 * MS, 2);
    r.execute(26 * MS + 50_000, 2);
    for s in 3..12u64 {
        let t = 20 * MS + s * 10 * MS;
        marker(&mut r, t, s);
        r.execute(t + 50_000, 2);
    }
    let t = r.finish(200 * MS);
    let rep = report(&[&t]);
    assert_eq!(rep.steps.detected_by, "marker torch_xla.sync");
    assert_eq!(rep.recompiles.len(), 1, "{:#?}", rep.recompiles);
    assert!(!rep.recompiles[0].finding, "{:#?}", rep.recompiles);
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
}

/// The live steps/s counts the report's own steps: the starts it keeps are the first run's
/// steps of the last window, cut by the report's rule (never re-derived by a view).
#[test]
fn the_report_keeps_the_latest_step_starts_for_a_live_rate() {
    use tpuscope_analyzers::report::{STEP_RATE_WINDOW_NS, build_one};
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/real/jax_lr.tps");
    let trace = &tpuscope_core::read_traces(&std::fs::read(path).unwrap()).unwrap()[0];
    let report = build_one("jax_lr", trace, None);
    let starts = &report.steps.recent_starts;
    assert!(!starts.is_empty() && report.steps.count > 0);
    let t0 = trace.manifest.as_ref().unwrap().start_mono_ns;
    // The per-step rows are the same steps: the last row is the last kept start.
    let last_row = report.steps.per_step.last().unwrap();
    let last = *starts.iter().max().unwrap();
    assert!(((last - t0) as f64 / 1e6 - last_row.t_ms).abs() < 1e-3);
    assert!(starts.iter().all(|&t| t + STEP_RATE_WINDOW_NS > last));
    let in_rows = report
        .steps
        .per_step
        .iter()
        .filter(|r| r.t_ms * 1e6 + t0 as f64 > last.saturating_sub(STEP_RATE_WINDOW_NS) as f64)
        .count();
    assert_eq!(in_rows, starts.len());
    assert!(report.steps.rate_at(last, t0).is_some_and(|r| r > 0.0));
}
