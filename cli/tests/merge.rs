//! `tpuscope merge` and the per-host report: synthetic hosts whose monotonic clocks are offset
//! by known amounts (their wall clocks agree), and two real JAX processes of one job.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use common::{collector, repo_root, show, tpuscope, traces_in, venv_python};
use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, Trace, TraceWriter, align, read_traces_file};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
/// Wall clock of the job's t = 0 (ns since the epoch).
const WALL0: u64 = 1_700_000_000 * S;
/// Every host's monotonic clock reads this at t = 0, plus the host's shift.
const MONO0: u64 = 100 * S;
/// Host 1's monotonic clock is 5 s + 123 µs ahead of host 0's, host 2's 2.5 s behind (host 3
/// belongs to another job).
const SHIFT: [i64; 4] = [0, 5_000_123_000, -2_500_000_000, 700_000_000];
const STEPS: u64 = 12;
const JOB: &str = "job-42";

fn hlo(which: &str) -> Vec<u8> {
    std::fs::read(repo_root().join(format!(
        "sample_traces/hlo/jax_lr_cpu_lr{which}.optimized.hlo_with_config.pb"
    )))
    .unwrap()
}

/// Host `i`'s monotonic reading at job time `t` (ns).
fn mono(i: usize, t: u64) -> u64 {
    (MONO0 as i64 + t as i64 + SHIFT[i]) as u64
}

struct Host {
    index: usize,
    /// Step period; steps start at t = 1 s.
    period: u64,
    recompile_at: Vec<u64>,
    job: String,
}

/// A trace of one host: a clock anchor every second (with jitter, and on host 1 one anchor taken
/// across a wall-clock step), `jit_train_step` compiled at 0.9 s and launched every step,
/// recompiled at the steps in `recompile_at`, a host read per step.
fn host_trace(h: &Host) -> Vec<u8> {
    let i = h.index;
    let m = Manifest {
        pid: 1000 + i as u32,
        host: format!("host{i}"),
        start_wall_ns: WALL0,
        start_mono_ns: mono(i, 0),
        command_line: vec!["python".into(), "train.py".into()],
        collector_version: "test".into(),
        job_id: h.job.clone(),
        process_index: i as u32,
        frontend: "jax".into(),
        ..Manifest::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
    let end = S + STEPS * h.period + S;
    let mut anchors: Vec<(u64, u64)> = (0..=end / S)
        .map(|k| {
            let t = k * S;
            // ±40 µs of jitter between reading the two clocks.
            let jitter = (k * 37 % 81) * 1000;
            (mono(i, t), WALL0 + t + jitter - 40_000)
        })
        .collect();
    if i == 1 {
        // NTP stepped the wall clock by half a second for one anchor: the median ignores it.
        anchors[1].1 += S / 2;
    }
    let mut records: Vec<(u64, Record)> = anchors
        .iter()
        .map(|&(mono_ns, wall_ns)| (mono_ns, Record::Clock(Clock { mono_ns, wall_ns })))
        .collect();
    let stack = w
        .intern_stack(&[RawStackEntry {
            file: Arc::from("/home/me/train.py"),
            function: Arc::from("main"),
            line: 12,
        }])
        .unwrap();
    let mut compiles = vec![(S - 100 * MS, "0.1")];
    let mut exe_at = Vec::new();
    let mut exe = 1u64;
    for s in 0..STEPS {
        let t = S + s * h.period;
        if h.recompile_at.contains(&s) {
            exe += 1;
            compiles.push((t - MS, if exe.is_multiple_of(2) { "0.05" } else { "0.1" }));
        }
        exe_at.push((t, exe));
    }
    let mut hashes = Vec::new();
    for (_, which) in &compiles {
        hashes.push(
            w.put_blob("optimized", "hlo_with_config", &hlo(which))
                .unwrap(),
        );
    }
    for (n, ((t, _), hash)) in compiles.iter().zip(&hashes).enumerate() {
        records.push((
            mono(i, *t),
            Record::Compile(Box::new(Compile {
                t_ns: mono(i, *t),
                dur_ns: 5 * MS,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_hash: hash ^ 1,
                options_hash: 7,
                executable_name: "jit_train_step".into(),
                optimized_hash: *hash,
                optimized_format: "hlo_with_config".into(),
                stack,
                executable_id: n as u64 + 1,
                num_outputs: 1,
                num_devices: 1,
                ..Default::default()
            })),
        ));
    }
    for (t, exe) in exe_at {
        records.push((
            mono(i, t),
            Record::Execute(Execute {
                t_ns: mono(i, t),
                dur_ns: 1000,
                executable_id: exe,
                num_devices: 1,
                ..Default::default()
            }),
        ));
    }
    records.sort_by_key(|(t, _)| *t);
    for (_, r) in &records {
        w.write(r).unwrap();
    }
    w.write(&Record::End(End {
        t_ns: mono(i, end),
        ..Default::default()
    }))
    .unwrap();
    w.into_inner()
}

/// Three hosts of one job: host 1 recompiles alone, host 2 steps 40% slower.
fn write_hosts(dir: &Path) -> Vec<PathBuf> {
    let hosts = [
        Host {
            index: 0,
            period: 100 * MS,
            recompile_at: vec![],
            job: JOB.into(),
        },
        Host {
            index: 1,
            period: 100 * MS,
            recompile_at: vec![5, 8],
            job: JOB.into(),
        },
        Host {
            index: 2,
            period: 140 * MS,
            recompile_at: vec![],
            job: JOB.into(),
        },
    ];
    hosts
        .iter()
        .map(|h| {
            let p = dir.join(format!(
                "tpuscope-host{}-p{}-{}.tps",
                h.index,
                h.index,
                1000 + h.index
            ));
            std::fs::write(&p, host_trace(h)).unwrap();
            p
        })
        .collect()
}

fn tps(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(tpuscope())
        .args(args)
        .args(paths)
        .output()
        .unwrap()
}

fn report_json(paths: &[&Path]) -> serde_json::Value {
    let out = tps(&["report", "--format", "json"], paths);
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn merge(inputs: &[&Path], out: &Path, extra: &[&str]) -> Output {
    Command::new(tpuscope())
        .arg("merge")
        .args(inputs)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn exec_times(t: &Trace) -> Vec<i64> {
    let off = align::job_offset_ns(t);
    t.events
        .iter()
        .filter_map(|r| match r {
            Record::Execute(e) => Some(align::to_job_ns(e.t_ns, off)),
            _ => None,
        })
        .collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one merge scenario, its files built and checked in order"
)]
fn merged_hosts_align_on_the_job_timeline_and_report_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_hosts(dir.path());
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let job = dir.path().join("job.tps");
    // Given in another order than the process indices: the merge orders hosts by index.
    let out = merge(&[inputs[2], inputs[0], inputs[1]], &job, &[]);
    assert!(out.status.success(), "{}", show(&out));

    let segs = read_traces_file(&job).unwrap();
    assert_eq!(segs.len(), 3);
    // Each marker says its segment's length: the segments are found by hopping, end to end.
    let ranges = tpuscope_core::stream::segment_ranges(&job)
        .unwrap()
        .unwrap();
    let lens: Vec<u64> = segs
        .iter()
        .map(|t| t.segment.as_ref().unwrap().len)
        .collect();
    assert_eq!(ranges.iter().map(|(a, b)| b - a).collect::<Vec<_>>(), lens);
    assert_eq!(
        ranges.last().unwrap().1,
        std::fs::metadata(&job).unwrap().len()
    );
    for (i, t) in segs.iter().enumerate() {
        let m = t.manifest.as_ref().unwrap();
        let s = t.segment.as_ref().unwrap();
        assert_eq!(
            (m.host.as_str(), m.process_index),
            (format!("host{i}").as_str(), i as u32)
        );
        assert_eq!(
            (s.host.as_str(), s.process_index, s.index),
            (m.host.as_str(), i as u32, i as u32)
        );
        assert_eq!(s.job_id, JOB);
        assert_eq!(s.alignment, "clock_anchors");
        assert_eq!(t.completeness, tpuscope_core::Completeness::Complete);
        // The offset maps this host's monotonic clock onto wall time despite the shift.
        let want = WALL0 as i64 - MONO0 as i64 - SHIFT[i];
        assert!(
            (s.offset_ns - want).abs() < MS as i64,
            "host {i}: {} vs {want}",
            s.offset_ns
        );
    }
    // The same step on hosts 0 and 1 (same period) lands at the same job time to within 1 ms,
    // although their monotonic clocks are 5.000123 s apart; host 2's first step too.
    let (t0, t1, t2) = (
        exec_times(&segs[0]),
        exec_times(&segs[1]),
        exec_times(&segs[2]),
    );
    assert_eq!((t0.len(), t1.len()), (STEPS as usize, STEPS as usize));
    for (a, b) in t0.iter().zip(&t1) {
        assert!((a - b).abs() < MS as i64, "{a} vs {b}");
    }
    assert!((t0[0] - t2[0]).abs() < MS as i64);
    assert!((t0[0] - (WALL0 + S) as i64).abs() < MS as i64);
    // Unaligned, the raw monotonic times are seconds apart: the test would catch a no-op.
    let raw = |t: &Trace| match t.events.iter().find(|r| matches!(r, Record::Execute(_))) {
        Some(Record::Execute(e)) => e.t_ns as i64,
        _ => unreachable!(),
    };
    assert!((raw(&segs[1]) - raw(&segs[0]) - SHIFT[1]).abs() < MS as i64);

    // The report of the merged file is the report of the separate traces.
    let merged = report_json(&[&job]);
    let separate = report_json(&inputs);
    assert_eq!(merged["runs"]["assumed"], "multi_host_job");
    assert_eq!(separate["runs"]["assumed"], "multi_host_job");
    assert_eq!(merged["hosts"], separate["hosts"]);
    assert_eq!(merged["compiles"], separate["compiles"]);
    assert_eq!(merged["findings"], separate["findings"]);
    let hosts = merged["hosts"]["hosts"].as_array().unwrap();
    let col = |k: &str| -> Vec<serde_json::Value> { hosts.iter().map(|h| h[k].clone()).collect() };
    assert_eq!(col("host"), ["host0", "host1", "host2"]);
    assert_eq!(col("process_index"), [0, 1, 2]);
    assert_eq!(col("compiles"), [1, 3, 1]);
    assert_eq!(col("recompiles"), [0, 2, 0]);
    assert_eq!(col("steps"), [STEPS, STEPS, STEPS]);
    let med: Vec<f64> = col("median_step_ms")
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        (med[0] - 100.0).abs() < 0.01 && (med[2] - 140.0).abs() < 0.01,
        "{med:?}"
    );
    // First steps start together on the job timeline, whatever the monotonic clocks say.
    for h in hosts {
        assert!(h["first_step_ms"].as_f64().unwrap().abs() < 1.0, "{h}");
    }

    // Host 1 recompiles alone; host 2 straggles.
    let alone = merged["hosts"]["recompiles_alone"].as_array().unwrap();
    assert_eq!(alone.len(), 1, "{alone:?}");
    assert_eq!(
        (
            &alone[0]["host"],
            &alone[0]["graph"],
            &alone[0]["compiles"],
            &alone[0]["others_max"]
        ),
        (
            &"host1".into(),
            &"jit_train_step".into(),
            &3.into(),
            &1.into()
        )
    );
    let strag = merged["hosts"]["stragglers"].as_array().unwrap();
    assert!(
        strag
            .iter()
            .any(|s| s["host"] == "host2" && s["reason"] == "slow_steps"),
        "{strag:?}"
    );
    assert!(!strag.iter().any(|s| s["host"] != "host2"), "{strag:?}");
    // Its steps are explained by the same split as every run's: 40 ms more per step.
    let why = strag[0]["details"].as_str().unwrap();
    eprintln!("straggler: {why}");
    assert!(
        why.contains("where the extra goes: ")
            && why.ends_with(", 40.0 ms per step more than the median host's"),
        "{why}"
    );
    let titles: Vec<&str> = merged["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "host")
        .map(|f| f["title"].as_str().unwrap())
        .collect();
    assert!(
        titles
            .iter()
            .any(|t| t.contains("host1") && t.contains("recompiles jit_train_step alone")),
        "{titles:?}"
    );
    assert!(
        titles
            .iter()
            .any(|t| t.contains("host2") && t.contains("straggler")),
        "{titles:?}"
    );

    // The text report has the per-host table.
    let out = tps(&["report"], &[&job]);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Hosts: 3 hosts"), "{text}");
    assert!(text.contains("recompiles alone: host1"), "{text}");

    // dump shows each host after a segment line; export puts each host in its own process on
    // the job timeline.
    let out = tps(&["dump", "--json"], &[&job]);
    assert!(out.status.success(), "{}", show(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let segs_dumped: Vec<&serde_json::Value> =
        lines.iter().filter(|v| v["kind"] == "segment").collect();
    assert_eq!(segs_dumped.len(), 3);
    assert_eq!(segs_dumped[1]["host"], "host1");
    let chrome = dir.path().join("job.json");
    let out = tps(
        &["export", "--format", "chrome-json", "-o"],
        &[&chrome, &job],
    );
    assert!(out.status.success(), "{}", show(&out));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let execs = |pid: u64| -> Vec<f64> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["pid"] == pid && e["ph"] == "X" && e["cat"] == "execute")
            .map(|e| e["ts"].as_f64().unwrap())
            .collect()
    };
    let (e1, e2) = (execs(1), execs(2));
    assert_eq!((e1.len(), e2.len()), (STEPS as usize, STEPS as usize));
    for (a, b) in e1.iter().zip(&e2) {
        assert!((a - b).abs() < 1000.0, "{a} vs {b} µs");
    }

    // A merged file merges again (its segments are taken apart) into the same hosts.
    let again = dir.path().join("again.tps");
    let out = merge(&[&job], &again, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let segs2 = read_traces_file(&again).unwrap();
    assert_eq!(segs2.len(), 3);
    assert_eq!(report_json(&[&again])["hosts"], merged["hosts"]);
}

#[test]
fn merge_refuses_non_traces_other_jobs_and_existing_outputs_and_takes_cut_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = write_hosts(dir.path());
    let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    let job = dir.path().join("job.tps");

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a trace at all, just some text\n").unwrap();
    let out = merge(&[inputs[0], &notes], &job, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("tpuscope: error:")
            && err.contains("notes.txt")
            && err.contains("not a tpuscope trace"),
        "{err}"
    );
    assert!(!job.exists());

    // Another job's host.
    let other = dir.path().join("other.tps");
    std::fs::write(
        &other,
        host_trace(&Host {
            index: 3,
            period: 100 * MS,
            recompile_at: vec![],
            job: "job-7".into(),
        }),
    )
    .unwrap();
    let out = merge(&[inputs[0], &other], &job, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("different jobs"));
    assert!(!job.exists());

    // Never overwrites without --force.
    std::fs::write(&job, b"precious").unwrap();
    let out = merge(&inputs, &job, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&job).unwrap(), b"precious");
    let out = merge(&inputs, &job, &["--force"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(read_traces_file(&job).unwrap().len(), 3);

    // A trace cut mid-frame (a killed host) is merged with a warning, and said to be cut.
    let bytes = std::fs::read(inputs[2]).unwrap();
    let cut = dir.path().join("cut.tps");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let merged_cut = dir.path().join("with-cut.tps");
    let out = merge(&[inputs[0], inputs[1], &cut], &merged_cut, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("cut.tps: cut at byte"),
        "{err}"
    );
    let segs = read_traces_file(&merged_cut).unwrap();
    assert_eq!(segs.len(), 3);
    assert!(matches!(
        segs[2].completeness,
        tpuscope_core::Completeness::Cut { .. }
    ));
    assert_eq!(segs[2].segment.as_ref().unwrap().source_completeness, "cut");
    assert_eq!(segs[0].completeness, tpuscope_core::Completeness::Complete);
    let rep = report_json(&[&merged_cut]);
    assert_eq!(rep["traces"][2]["completeness"], "cut");
}

#[test]
fn hosts_without_a_job_id_get_one_from_the_merge() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..2)
        .map(|i| {
            let p = dir.path().join(format!("h{i}.tps"));
            std::fs::write(
                &p,
                host_trace(&Host {
                    index: i,
                    period: 100 * MS,
                    recompile_at: vec![],
                    job: String::new(),
                }),
            )
            .unwrap();
            p
        })
        .collect();
    let paths: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    // Separately, traces without a job id are successive runs...
    assert_eq!(report_json(&paths)["runs"]["assumed"], "successive_runs");
    // ...merged, they are the hosts of one job.
    let job = dir.path().join("job.tps");
    let out = merge(&paths, &job, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let segs = read_traces_file(&job).unwrap();
    let id = &segs[0].segment.as_ref().unwrap().job_id;
    assert!(id.starts_with("merged-"), "{id}");
    assert_eq!(&segs[1].segment.as_ref().unwrap().job_id, id);
    let rep = report_json(&[&job]);
    assert_eq!(rep["runs"]["assumed"], "multi_host_job");
    assert_eq!(rep["hosts"]["hosts"].as_array().unwrap().len(), 2);
    assert!(
        rep["hosts"]["recompiles_alone"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(rep["hosts"]["stragglers"].as_array().unwrap().is_empty());
}

/// Two real JAX processes of one job (a clean loop and one that bakes its learning rate into
/// the program), each under `tpuscope run`, merged and reported.
#[test]
fn two_real_jax_hosts_merge_and_the_lr_host_recompiles_alone() {
    let dir = tempfile::tempdir().unwrap();
    let py = venv_python("jax");
    let scripts = ["clean_loop.py", "lr_python_float.py"];
    let children: Vec<(PathBuf, std::process::Child)> = scripts
        .iter()
        .enumerate()
        .map(|(i, script)| {
            let out_dir = dir.path().join(format!("host{i}"));
            std::fs::create_dir_all(&out_dir).unwrap();
            let child = Command::new(tpuscope())
                .args(["run", "--no-tui", "--quiet", "--out"])
                .arg(&out_dir)
                .arg("--")
                .arg(&py)
                .arg(repo_root().join("examples/jax").join(script))
                .current_dir(repo_root())
                .env("TPUSCOPE_COLLECTOR", collector())
                .env("TPUSCOPE_JOB_ID", "real-job-1")
                .env("TPUSCOPE_PROCESS_INDEX", i.to_string())
                .env_remove("XLA_HLO_DEBUG")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (out_dir, child)
        })
        .collect();
    let mut traces = Vec::new();
    for (out_dir, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let t = traces_in(&out_dir);
        assert_eq!(t.len(), 1, "{t:?}");
        traces.push(t[0].clone());
    }
    // Names carry the process index.
    for (i, t) in traces.iter().enumerate() {
        let name = t.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.contains(&format!("-p{i}-")), "{name}");
    }
    let job = dir.path().join("job.tps");
    let inputs: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    let out = merge(&inputs, &job, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let rep = report_json(&[&job]);
    assert_eq!(rep["runs"]["assumed"], "multi_host_job");
    let hosts = rep["hosts"]["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    // Each host's compiles are what that trace's own report counts.
    for (i, t) in inputs.iter().enumerate() {
        let own = report_json(&[t]);
        assert_eq!(hosts[i]["process_index"], i);
        assert_eq!(hosts[i]["compiles"], own["compiles"]["total"], "host {i}");
        assert_eq!(hosts[i]["alignment"], "clock_anchors");
    }
    let alone = rep["hosts"]["recompiles_alone"].as_array().unwrap();
    assert!(
        alone
            .iter()
            .any(|a| a["process_index"] == 1 && a["graph"] == "jit_train_step"),
        "{alone:?}"
    );
    assert!(!alone.iter().any(|a| a["process_index"] == 0), "{alone:?}");
    assert!(rep["findings"].as_array().unwrap().iter().any(|f| {
        f["kind"] == "host"
            && f["title"]
                .as_str()
                .unwrap()
                .contains("(process 1) recompiles jit_train_step alone")
    }));
}

/// Two different scripts run on one host, each under `tpuscope run` with no launcher variables
/// (both process 0): not one job. merge says why in one line; `--force` merges them, and the
/// report says they may not be one job and compares no hosts.
#[test]
fn two_unrelated_runs_on_one_host_are_not_merged_as_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let py = venv_python("jax");
    let scripts = ["clean_loop.py", "lr_python_float.py"];
    let children: Vec<(PathBuf, std::process::Child)> = scripts
        .iter()
        .enumerate()
        .map(|(i, script)| {
            let out_dir = dir.path().join(format!("run{i}"));
            std::fs::create_dir_all(&out_dir).unwrap();
            let mut c = Command::new(tpuscope());
            c.args(["run", "--no-tui", "--quiet", "--out"])
                .arg(&out_dir)
                .arg("--")
                .arg(&py)
                .arg(repo_root().join("examples/jax").join(script))
                .current_dir(repo_root())
                .env("TPUSCOPE_COLLECTOR", collector())
                .env_remove("XLA_HLO_DEBUG")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            for v in [
                "TPUSCOPE_JOB_ID",
                "TPUSCOPE_PROCESS_INDEX",
                "JAX_PROCESS_ID",
                "RANK",
                "TPU_WORKER_ID",
                "CLOUD_TPU_TASK_ID",
                "SLURM_PROCID",
                "SLURM_JOB_ID",
                "TORCHELASTIC_RUN_ID",
                "JAX_COORDINATOR_ADDRESS",
                "MASTER_ADDR",
            ] {
                c.env_remove(v);
            }
            (out_dir, c.spawn().unwrap())
        })
        .collect();
    let mut traces = Vec::new();
    for (out_dir, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let t = traces_in(&out_dir);
        assert_eq!(t.len(), 1, "{t:?}");
        traces.push(t[0].clone());
    }
    let inputs: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    let job = dir.path().join("job.tps");
    let out = merge(&inputs, &job, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        err.contains("do not look like one job")
            && err.contains(&name(inputs[0]))
            && err.contains(&name(inputs[1]))
            && err.contains("both are process 0 on host")
            && err.contains("--force"),
        "{err}"
    );
    assert!(!job.exists());

    let out = merge(&inputs, &job, &["--force"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("merged anyway (--force)"),
        "{}",
        show(&out)
    );
    let rep = report_json(&[&job]);
    let why = rep["hosts"]["not_one_job"].as_str().unwrap_or_default();
    assert!(why.contains("both are process 0"), "{rep:#}");
    assert!(
        rep["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("may not be one job")),
        "{:#}",
        rep["warnings"]
    );
    // Without the check this report said "host vm (process 0) recompiles jit_train_step alone"
    // and named a straggler.
    let host_findings: Vec<&serde_json::Value> = rep["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "host")
        .collect();
    assert!(host_findings.is_empty(), "{host_findings:?}");
    assert!(
        rep["hosts"]["recompiles_alone"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(rep["hosts"]["stragglers"].as_array().unwrap().is_empty());
    // The text report says it too.
    let text = tps(&["report"], &[&job]);
    assert!(text.status.success(), "{}", show(&text));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&text.stdout),
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(all.contains("may not be one job"), "{all}");
    // Each run's own findings are still made (the lr run recompiles its train step).
    assert!(
        rep["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] != "host"),
        "{rep:#}"
    );
}
