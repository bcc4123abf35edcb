//! Snapshots of the `/metrics` exposition for the sample traces, each as one finished process:
//! the report `Proc::analyse_if_due` makes (dynamo's logs joined), turned into families and
//! encoded as on a scrape.
//! The snapshots are kept with the binary's others, in `cli/tests/snapshots/`.

use std::path::Path;

use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::report;

use super::series::{self, ProcMetrics, ProcState};
use super::text;

#[test]
fn exposition_of_sample_traces() {
    for rel in [
        "real/jax_aot_v5e.tps",
        "real/jax_lr.tps",
        "real/jax_shapes.tps",
        "real/torch_tpu_cache.tps",
        "real/torch_xla_item.tps",
        "torch_trace/graph_break_and_guard.tps",
        "torch_trace/torch_xla_openxla.tps",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces")
            .join(rel);
        let trace = tpuscope_core::read_trace_file(&path).unwrap();
        let pid = trace.manifest.as_ref().map_or(0, |m| m.pid);
        // The report `tpuscope report` gives for the file (its dynamo logs beside it), which
        // `Proc::analyse_if_due` gives for the same trace streamed by a run that recorded them.
        let label = format!("pid {pid}");
        let logs = crate::torch_logs::find(None, Some(&path), Some(&trace), &label);
        let rep = report::build_one(&label, &trace, logs);
        let metrics = ProcMetrics::from_analysis(&trace, &Digest::of(&trace), &rep).unwrap();
        let text = text::encode(&series::families(
            "endpoint-host",
            &[ProcState {
                metrics: &metrics,
                running: false,
            }],
        ));
        let name = format!(
            "metrics__{}",
            rel.trim_end_matches(".tps").replace(['/', '.', '-'], "_")
        );
        insta::with_settings!({ snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, text);
        });
    }
}

/// The category series of a sample add up to its run's wall time, and name only what the trace
/// can tell: with completion events device busy and host-bound, without them untimed.
#[test]
fn time_series_add_up_to_the_wall_time() {
    for (rel, timed) in [
        ("real/jax_lr.tps", true),
        ("real/torch_xla_item.tps", true),
        ("real/torch_tpu_cache.tps", false),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces")
            .join(rel);
        let trace = tpuscope_core::read_trace_file(&path).unwrap();
        let rep = report::build_one("t", &trace, None);
        let metrics = ProcMetrics::from_analysis(&trace, &Digest::of(&trace), &rep).unwrap();
        let fams = series::families(
            "h",
            &[ProcState {
                metrics: &metrics,
                running: false,
            }],
        );
        let time = fams
            .iter()
            .find(|f| f.name == "tpuscope_time_seconds_total")
            .unwrap();
        let by_category: Vec<(&str, f64)> = time
            .samples
            .iter()
            .map(|(labels, v)| {
                let c = labels.iter().find(|(k, _)| *k == "category").unwrap();
                (c.1.as_str(), *v)
            })
            .collect();
        let sum: f64 = by_category.iter().map(|(_, v)| v).sum();
        let wall: f64 = rep.time.iter().map(|b| b.total.wall_ms).sum::<f64>() / 1e3;
        assert!(wall > 0.1, "{rel}: {wall}");
        assert!(
            (sum - wall).abs() < 1e-9,
            "{rel}: {by_category:?} add up to {sum}, wall {wall}"
        );
        let has = |c: &str| by_category.iter().any(|(n, _)| *n == c);
        assert!(has("compiling") && has("blocked"), "{rel}: {by_category:?}");
        assert_eq!(has("device_busy"), timed, "{rel}: {by_category:?}");
        assert_eq!(has("host_bound"), timed, "{rel}: {by_category:?}");
        assert_eq!(has("untimed"), !timed, "{rel}: {by_category:?}");
        let busy = fams
            .iter()
            .find(|f| f.name == "tpuscope_device_busy_ratio")
            .unwrap();
        assert_eq!(busy.samples.is_empty(), !timed, "{rel}");
    }
}
