#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The view model against the traces it is built from.

use std::path::Path;

use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::event::*;
use tpuscope_core::{Record, Trace, TraceWriter, read_trace, read_trace_file};
use tpuscope_tui::model::{EVENT_LINES, EventKind};
use tpuscope_tui::{Extra, Model};

fn load(name: &str) -> Trace {
    read_trace_file(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real")
            .join(name),
    )
    .unwrap()
}

fn build(trace: &Trace, now_ns: Option<u64>, extra: Extra) -> Model {
    let report = report::build(&[Input::new("t.tps", trace)], &report::Options::default());
    Model::build(trace, report, now_ns, extra)
}

const START: u64 = 1_000_000_000;

fn manifest() -> Manifest {
    Manifest {
        pid: 4242,
        start_mono_ns: START,
        command_line: vec!["/usr/bin/python3".into(), "/home/u/proj/train.py".into()],
        plugin_path: "/x/site-packages/libtpu/libtpu.so".into(),
        pjrt_api_major: 0,
        pjrt_api_minor: 70,
        package_versions: vec![
            KeyValue {
                key: "libtpu".into(),
                value: "0.0.52".into(),
            },
            KeyValue {
                key: "numpy".into(),
                value: "2.0".into(),
            },
            KeyValue {
                key: "jax".into(),
                value: "0.10.2".into(),
            },
        ],
        frontend: "jax".into(),
        ..Default::default()
    }
}

fn synthetic(write: impl FnOnce(&mut TraceWriter<Vec<u8>>)) -> Trace {
    let mut w = TraceWriter::new(Vec::new(), &manifest()).unwrap();
    write(&mut w);
    read_trace(w.get_ref()).unwrap()
}

#[test]
fn jax_lr_family_members_and_counters_match_the_trace() {
    let trace = load("jax_lr.tps");
    let m = build(&trace, None, Extra::default());
    let compiles = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Compile(_)))
        .count() as u64;
    assert_eq!(m.counters.compiles, compiles);
    assert_eq!(m.counters.events, trace.events.len() as u64);
    assert_eq!(m.families.len(), 1);
    let f = &m.families[0];
    assert_eq!(f.graph, "jit_train_step");
    assert_eq!(f.cause, "constant_changed");
    assert_eq!(f.source.as_deref(), Some("workloads/jax_lr.py:33"));
    let train_compiles = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Compile(c) if c.executable_name == "jit_train_step"))
        .count();
    assert_eq!(f.members.len(), train_compiles);
    assert_eq!(f.count as usize, train_compiles);
    assert_eq!(m.counters.recompiles, f.count - 1);
    assert_eq!(f.members[0].cause, "first");
    assert_eq!(f.members[1].against, Some(1));
    assert!(
        f.members[1]
            .changes
            .iter()
            .any(|c| c.contains("0.1 → 0.05")),
        "{:?}",
        f.members[1].changes
    );
    // The member's stack: the user's frames are marked, and the call line is among them.
    let user: Vec<&str> = f.members[1]
        .stack
        .iter()
        .filter(|s| s.user)
        .map(|s| s.text.as_str())
        .collect();
    assert!(user.contains(&"workloads/jax_lr.py:36 main"), "{user:?}");
    assert!(f.members[1].stack.iter().any(|s| !s.user));
    // The header from the manifest.
    let man = trace.manifest.as_ref().unwrap();
    assert_eq!(m.header.pid, man.pid);
    assert_eq!(m.header.command, "python workloads/jax_lr.py");
    assert_eq!(m.header.frontend, "jax");
    assert!(m.header.plugin.ends_with("pjrt_c_api_cpu_plugin.so"));
    let names: Vec<&str> = m.header.packages.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(&names[..2], ["jax", "jaxlib"]);
    // Without a time given, uptime runs to the last event.
    let last = trace.events.iter().filter_map(Record::t_ns).max().unwrap();
    assert_eq!(m.header.uptime_ns, last - man.start_mono_ns);
    let m2 = build(
        &trace,
        Some(man.start_mono_ns + 7_000_000_000),
        Extra::default(),
    );
    assert_eq!(m2.header.uptime_ns, 7_000_000_000);
}

#[test]
fn torch_xla_syncs_and_live_buffer_memory() {
    let trace = load("torch_xla_item.tps");
    let m = build(&trace, None, Extra::default());
    assert!(
        m.syncs[0]
            .line
            .starts_with("workloads/torch_xla_item.py:27")
    );
    assert_eq!(m.syncs[0].place, "workloads/torch_xla_item.py:27");
    let blocking_reads = trace
        .events
        .iter()
        .filter(
            |r| matches!(r, Record::Transfer(t) if t.sync && t.direction == Direction::D2h as i32),
        )
        .count() as u64;
    assert_eq!(m.counters.host_syncs, blocking_reads);
    assert_eq!(m.syncs.iter().map(|s| s.count).sum::<u64>(), blocking_reads);
    // The CPU plugin reports no allocator stats: only tpuscope's live-buffer count.
    let samples: Vec<&Memory> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Memory(x) if x.device == 0 => Some(&**x),
            _ => None,
        })
        .collect();
    assert_eq!(m.memory.len(), 1);
    let d = &m.memory[0];
    assert!(!d.reported);
    assert_eq!(d.samples, samples.len() as u64);
    assert_eq!(d.series.len(), samples.len());
    assert_eq!(d.last_bytes, samples.last().unwrap().bytes_in_use);
    assert_eq!(d.live_buffers, samples.last().unwrap().live_buffers);
    assert_eq!(d.limit_bytes, None);
    // Step markers: the torch_xla.sync steps counted over the run (shorter than the 5 s window).
    let steps: Vec<u64> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Step(s) if s.marker == "torch_xla.sync" => Some(s.t_ns),
            _ => None,
        })
        .collect();
    let run_s = m.header.uptime_ns as f64 / 1e9;
    assert!(run_s < 5.0);
    let want = steps.len() as f64 / run_s;
    let got = m.header.steps_per_s.unwrap();
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
    assert_eq!(m.counters.steps, steps.len() as u64);
}

#[test]
fn plugin_memory_stats_win_over_live_buffers() {
    let trace = synthetic(|w| {
        for i in 0..300u64 {
            for (origin, bytes) in [
                (MemoryOrigin::LiveBuffers, 100 + i as i64),
                (MemoryOrigin::PluginStats, 1000 * i as i64),
            ] {
                w.write(&Record::Memory(Box::new(Memory {
                    t_ns: START + i * 1_000_000,
                    device: 0,
                    origin: origin as i32,
                    bytes_in_use: bytes,
                    bytes_limit: (origin == MemoryOrigin::PluginStats).then_some(1_000_000),
                    peak_bytes_in_use: None,
                    live_buffers: Some(3),
                    ..Default::default()
                })))
                .unwrap();
            }
        }
    });
    let m = build(&trace, None, Extra::default());
    assert_eq!(m.memory.len(), 1);
    let d = &m.memory[0];
    assert!(d.reported);
    assert_eq!(d.limit_bytes, Some(1_000_000));
    assert_eq!(d.last_bytes, 299_000);
    assert_eq!(d.peak_bytes, 299_000);
    assert!((d.fraction.unwrap() - 0.299).abs() < 1e-9);
    // The sparkline keeps the newest samples only.
    assert_eq!(d.series.len(), tpuscope_tui::model::MEMORY_SAMPLES);
    assert_eq!(*d.series.last().unwrap(), 299_000);
    // Versions: the PJRT packages in a fixed order, others left out.
    let names: Vec<&str> = m.header.packages.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["jax", "libtpu"]);
    assert_eq!(m.header.plugin, "libtpu/libtpu.so");
}

#[test]
fn drops_and_viewer_lag_are_counted() {
    let trace = synthetic(|w| {
        for (t, total) in [(1, 5u64), (2, 12)] {
            w.write(&Record::Dropped(Dropped {
                t_ns: START + t,
                count: 5,
                total,
            }))
            .unwrap();
        }
        for lost in ["2", "9", "not a number"] {
            w.write(&Record::Note(Note {
                t_ns: START + 3,
                thread: 0,
                topic: "viewer_lagged".into(),
                message: lost.into(),
            }))
            .unwrap();
        }
    });
    let m = build(
        &trace,
        None,
        Extra {
            viewer_lost: 4,
            ..Extra::default()
        },
    );
    assert_eq!(m.counters.dropped, 12);
    assert_eq!(m.counters.viewer_lost, 9);
    let m = build(
        &trace,
        None,
        Extra {
            viewer_lost: 40,
            ..Extra::default()
        },
    );
    assert_eq!(m.counters.viewer_lost, 40);
    assert!(
        m.events
            .iter()
            .any(|e| e.kind == EventKind::Error && e.text.contains("(12 total)"))
    );
}

#[test]
fn the_events_log_collapses_loops_and_stays_bounded() {
    let trace = synthetic(|w| {
        let sig = w.intern_string("f32[8]").unwrap();
        let exec = |w: &mut TraceWriter<Vec<u8>>, t: u64, id: u64| {
            w.write(&Record::Execute(Execute {
                t_ns: START + t,
                executable_id: id,
                num_devices: 1,
                arg_signature: sig,
                dur_ns: 1000 + t,
                ..Default::default()
            }))
            .unwrap();
        };
        w.write(&Record::Compile(Box::new(Compile {
            t_ns: START,
            executable_name: "jit_step".into(),
            executable_id: 7,
            ..Default::default()
        })))
        .unwrap();
        for i in 0..1000 {
            exec(w, 10 + i, 7);
        }
        // Then alternating executables: nothing collapses.
        for i in 0..1000 {
            exec(w, 2000 + i, if i % 2 == 0 { 7 } else { 8 });
        }
        w.write(&Record::Step(Step {
            t_ns: START + 5000,
            marker: "user".into(),
            number: 1,
            ..Default::default()
        }))
        .unwrap();
    });
    let m = build(&trace, None, Extra::default());
    assert_eq!(m.events.len(), EVENT_LINES);
    let last = m.events.last().unwrap();
    assert_eq!(last.kind, EventKind::Step);
    assert!(last.text.starts_with("step (user)"), "{}", last.text);
    let alternating = &m.events[m.events.len() - 2];
    assert!(
        alternating.text.starts_with("execute 8 "),
        "{}",
        alternating.text
    );
    assert!(alternating.text.contains("dispatch"));

    let trace = synthetic(|w| {
        w.write(&Record::Compile(Box::new(Compile {
            t_ns: START,
            executable_name: "jit_step".into(),
            executable_id: 7,
            ..Default::default()
        })))
        .unwrap();
        for i in 0..1000 {
            w.write(&Record::Execute(Execute {
                t_ns: START + 10 + i,
                executable_id: 7,
                num_devices: 1,
                dur_ns: 1000 + i,
                ..Default::default()
            }))
            .unwrap();
        }
    });
    let m = build(&trace, None, Extra::default());
    assert_eq!(m.events.len(), 2);
    assert!(m.events[0].text.starts_with("compile jit_step"));
    assert_eq!(m.events[1].repeat, 1000);
    assert!(
        m.events[1]
            .text
            .starts_with("execute jit_step on 1 device(s)")
    );
    // A line for many events carries no single dispatch time.
    assert!(!m.events[1].text.contains("dispatch"));
}

#[test]
fn workload_output_is_made_safe_for_the_terminal() {
    let trace = load("jax_lr.tps");
    let m = build(
        &trace,
        None,
        Extra {
            output: vec![
                "\u{1b}[32mepoch 1\u{1b}[0m done".into(),
                "  3%|▎    \r 90%|█████████".into(),
            ],
            ..Extra::default()
        },
    );
    assert_eq!(m.output, ["epoch 1 done", " 90%|█████████"]);
}

#[test]
fn memory_is_red_by_the_reports_rule_and_partial_traces_say_why() {
    // In use is low at the end, but the allocator's peak came within 5% of the limit: the
    // report calls that peak a problem, so the screen does too.
    let trace = synthetic(|w| {
        for i in 0..10u64 {
            w.write(&Record::Memory(Box::new(Memory {
                t_ns: START + i * 1_000_000,
                device: 0,
                origin: MemoryOrigin::PluginStats as i32,
                bytes_in_use: 100_000,
                bytes_limit: Some(1_000_000),
                peak_bytes_in_use: Some(950_000),
                ..Default::default()
            })))
            .unwrap();
        }
    });
    let m = build(&trace, None, Extra::default());
    let d = &m.memory[0];
    assert_eq!(d.last_bytes, 100_000);
    assert_eq!(d.peak_bytes, 950_000);
    assert!((d.fraction.unwrap() - 0.1).abs() < 1e-9);
    assert!(d.near_limit);
    // The writer was never finished: no end record, in the report's words.
    let report = report::build(&[Input::new("t.tps", &trace)], &report::Options::default());
    assert_eq!(m.header.partial, Some(report.traces[0].completeness_line()));
    let partial = m.header.partial.unwrap();
    assert!(partial.starts_with("no end record"), "{partial}");
    // Where it stops: the last memory sample, 9 ms after the first, before any step.
    assert!(
        partial.ends_with("; recording stopped 9.0 ms into the run"),
        "{partial}"
    );
}

#[test]
fn events_read_like_dump_and_the_largest_compiled_list_one_graph_once() {
    let trace = load("jax_shapes.tps");
    let m = build(&trace, None, Extra::default());
    let graphs: Vec<&str> = m.largest_compiled.iter().map(|g| g.0.as_str()).collect();
    let mut unique = graphs.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), graphs.len(), "{graphs:?}");
    // The last event's line is the shared describer's line for that record.
    let names = tpuscope_analyzers::steps::executable_names(&trace);
    let last = trace
        .events
        .iter()
        .rev()
        // The log leaves out per-device completions: the execute line says it ran.
        .filter(|r| !matches!(r, Record::ExecuteComplete(_)))
        .find_map(|r| tpuscope_analyzers::describe::record(&trace, r, &names))
        .unwrap();
    let shown = m.events.last().unwrap();
    assert_eq!(shown.kind, last.kind);
    if shown.repeat == 1 {
        assert_eq!(shown.text, last.line());
    } else {
        assert_eq!(shown.text, last.summary());
    }
}

/// The time section is the report's breakdown of the run: its words, its steps (the running one
/// left out while the run goes on) and what is unknown.
#[test]
fn where_the_time_goes_follows_the_report() {
    use tpuscope_tui::RunState;
    use tpuscope_tui::model::Category;
    let trace = load("jax_lr.tps");
    let report = report::build(&[Input::new("t.tps", &trace)], &report::Options::default());
    let b = report.time[0].clone();
    let ended = Extra {
        state: RunState::Ended,
        ..Extra::default()
    };
    let m = build(&trace, None, ended);
    let t = m.time.as_ref().unwrap();
    assert_eq!(t.total, b.total);
    let words: String = t.headline.iter().map(|w| w.text.as_str()).collect();
    assert_eq!(
        words,
        tpuscope_analyzers::present::split_line(&b.total).text()
    );
    // Every category the words name is tagged with it; separators are not.
    for w in &t.headline {
        match w.category {
            Some(c) => assert!(w.text.starts_with(c.label()), "{w:?}"),
            None => assert_eq!(w.text, " · "),
        }
    }
    assert!(
        t.headline
            .iter()
            .any(|w| w.category == Some(Category::Compiling))
    );
    assert_eq!(t.steps.len(), b.steps.len());
    assert_eq!(
        t.current.as_ref().map(|c| c.0),
        b.steps.last().map(|s| s.number)
    );
    assert_eq!(t.step_time, b.step_time);
    assert_eq!(t.steps_per_s, b.steps_per_s);
    // The CPU plugin's launches have completion events here: nothing is unknown.
    assert!(b.device_timing.complete());
    assert_eq!(t.untimed, None);

    let live = build(&trace, None, Extra::default());
    let lt = live.time.as_ref().unwrap();
    assert_eq!(lt.steps.len(), b.steps.len() - 1);
    assert_eq!(
        lt.current.as_ref().map(|c| c.0),
        Some(b.steps[b.steps.len() - 2].number)
    );
}

/// TorchTPU asks for no completion events: the view says device time is unknown, in words.
#[test]
fn missing_device_timing_is_said() {
    let trace = load("torch_tpu_cache.tps");
    let m = build(&trace, None, Extra::default());
    let t = m.time.as_ref().unwrap();
    // In the report's words (one wording for every view).
    let untimed = t.untimed.as_deref().unwrap();
    assert!(
        untimed.starts_with("device time unknown: ")
            && untimed.contains(" no completion event (the frontend did not ask for one)"),
        "{untimed}"
    );
    let report = tpuscope_analyzers::report::build_one("t", &trace, None);
    let section = format!("{:?}", tpuscope_analyzers::present::time(&report));
    assert!(section.contains(untimed), "{section}");
    assert_eq!(t.total.device_busy_ms, 0.0);
    assert!(t.total.untimed_ms > 0.0);
}
