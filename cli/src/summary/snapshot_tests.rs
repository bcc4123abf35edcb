//! Snapshots of what `tpuscope run` prints after a workload, on the sample traces, without
//! running one: the counts its first lines state and the findings block (`findings_text`). The
//! snapshots are kept with the binary's others, in `cli/tests/snapshots/`.

use std::path::Path;

use super::{completeness_warning, count, findings_text, read_counted};

#[test]
fn run_summary_of_sample_traces() {
    for rel in [
        "real/jax_aot_v5e.tps",
        "real/jax_killed.tps",
        "real/jax_lr.tps",
        "real/jax_shapes.tps",
        "real/torch_tpu_cache.tps",
        "real/torch_xla_item.tps",
        // Its dynamo logs are next to it, as `tpuscope run` leaves them.
        "torch_trace/graph_break_and_guard.tps",
        "torch_trace/torch_xla_openxla.tps",
    ] {
        // Relative to the crate (the directory tests run in), as a user's path would be.
        let path = Path::new("../sample_traces").join(rel);
        // Read as `tpuscope run` reads it, streaming; counted as the trace decoded whole is.
        let (trace, digest, counts) = read_counted(&path).unwrap();
        let whole = tpuscope_core::read_trace_file(&path).unwrap();
        assert_eq!(counts, count(&whole), "{rel}");
        let stopped = tpuscope_analyzers::report::recording_stopped(&trace)
            .map(|s| tpuscope_analyzers::report::stopped_line(&s));
        let text = format!(
            "{:#?}\nstopped: {stopped:?}\nincomplete: {:?}\n--- findings\n{}",
            counts,
            completeness_warning(&path, &trace),
            findings_text(&path, &trace, &digest)
        );
        let name = format!(
            "run_summary__{}",
            rel.trim_end_matches(".tps").replace(['/', '.', '-'], "_")
        );
        insta::with_settings!({ snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, text);
        });
    }
}
