#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A merged job file (`tpuscope merge`) in the viewer: one source per host, lanes grouped by
//! host on the job timeline, and the per-host table in the summary.

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use tpuscope_core::event::{
    Clock, Compile, End, Execute, Manifest, Record, SEGMENT_KIND, SEGMENT_MINOR, Segment,
};
use tpuscope_core::format::{FORMAT_MAJOR, HEADER_LEN, encode_frame, encode_header};
use tpuscope_core::{TraceWriter, align};
use tpuscope_gui::{App, Tab, data};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const WALL0: u64 = 1_700_000_000 * S;
/// Host 1's monotonic clock is 5 s + 123 µs ahead of host 0's.
const SHIFT: [u64; 2] = [0, 5_000_123_000];

/// One host: executes of `jit_step` every 100 ms from job time 1 s, clock anchors each second.
/// Host 1's process starts 300 ms after host 0's, so drawing each host from its own start
/// would put the same step 300 ms apart.
fn host(i: usize) -> Vec<u8> {
    let mono = |t: u64| 50 * S + SHIFT[i] + t;
    let start = i as u64 * 300 * MS;
    let m = Manifest {
        pid: 10 + i as u32,
        host: format!("host{i}"),
        start_wall_ns: WALL0 + start,
        start_mono_ns: mono(start),
        job_id: "job-1".into(),
        process_index: i as u32,
        frontend: "jax".into(),
        ..Manifest::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
    w.write(&Record::Compile(Box::new(Compile {
        t_ns: mono(S / 2),
        thread: 1,
        dur_ns: 5 * MS,
        executable_name: "jit_step".into(),
        executable_id: 1,
        ..Default::default()
    })))
    .unwrap();
    for k in 1..3 {
        w.write(&Record::Clock(Clock {
            mono_ns: mono(k * S),
            wall_ns: WALL0 + k * S,
        }))
        .unwrap();
    }
    for s in 0..10 {
        w.write(&Record::Execute(Execute {
            t_ns: mono(S + s * 100 * MS),
            thread: 1,
            dur_ns: MS,
            executable_id: 1,
            num_devices: 1,
            ..Default::default()
        }))
        .unwrap();
    }
    w.write(&Record::End(End {
        t_ns: mono(3 * S),
        ..Default::default()
    }))
    .unwrap();
    w.into_inner()
}

/// A merged file laid out as docs/trace-format.md says: header, then per host a segment record
/// and the host's frames unchanged.
fn merged() -> Vec<u8> {
    let mut out = encode_header(FORMAT_MAJOR, SEGMENT_MINOR).to_vec();
    for i in 0..2 {
        let bytes = host(i);
        let t = tpuscope_core::read_trace(&bytes).unwrap();
        let a = align::alignment(&t);
        let seg = Segment {
            index: i as u32,
            host: format!("host{i}"),
            process_index: i as u32,
            job_id: "job-1".into(),
            offset_ns: a.offset_ns,
            alignment: a.method.into(),
            anchors: a.anchors,
            source: format!("host{i}.tps"),
            source_completeness: "complete".into(),
            pid: 10 + i as u32,
            ..Default::default()
        };
        encode_frame(&mut out, SEGMENT_KIND, 0, &seg.payload());
        out.extend_from_slice(&bytes[HEADER_LEN..]);
    }
    out
}

#[test]
fn a_merged_file_shows_lanes_per_host_on_the_job_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("job.tps");
    std::fs::write(&p, merged()).unwrap();
    let sources = data::open_all(std::slice::from_ref(&p), false);
    assert_eq!(sources.len(), 2);
    let app = App::new(sources, Tab::Timeline, false);
    let mut h = Harness::builder()
        .with_size((1400.0, 900.0))
        .allow_missing_glyphs()
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run();
    let tl = &h.state().timeline;
    assert!(tl.aligned);
    let lane = |label: &str| {
        tl.lanes
            .iter()
            .find(|l| l.label.starts_with(label) && !l.device)
            .unwrap_or_else(|| {
                let all: Vec<&str> = tl.lanes.iter().map(|l| l.label.as_str()).collect();
                panic!("no lane {label}: {all:?}")
            })
    };
    let (l0, l1) = (lane("p0 host0 · thread 1"), lane("p1 host1 · thread 1"));
    assert_eq!((l0.source, l1.source), (0, 1));
    // The same step is at the same x on both hosts (to 1 ms), although the hosts' monotonic
    // clocks are 5.000123 s apart.
    assert_eq!(l0.len(), l1.len());
    for i in 0..l0.len() {
        let (a, b) = (l0.start(i).unwrap(), l1.start(i).unwrap());
        assert!(a.abs_diff(b) < MS, "{a} vs {b}");
    }
    // Lanes are grouped by host, host 0's first.
    let first_of_1 = tl.lanes.iter().position(|l| l.source == 1).unwrap();
    assert!(tl.lanes[..first_of_1].iter().all(|l| l.source == 0));

    // The summary has the per-host table.
    h.state_mut().tab = Tab::Summary;
    h.run();
    let a = h.state().analysis.as_ref().unwrap();
    let hosts = a.report.hosts.as_ref().expect("a multi-host report");
    assert_eq!(hosts.hosts.len(), 2);
    // As `tpuscope report` says it.
    h.get_by_label_contains("Hosts: 2 hosts");
    h.get_by_label("host1");
}
