//! Snapshots of the `/metrics` exposition for the sample traces, each as one finished process:
//! the report `Proc::analyse_if_due` makes (dynamo's logs joined), turned into families and
//! encoded as on a scrape.
//! The snapshots are kept with the binary's others, in `cli/tests/snapshots/`.

use std::path::Path;

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
        let metrics = ProcMetrics::from_analysis(&trace, &rep).unwrap();
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
