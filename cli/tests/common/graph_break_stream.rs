//! The sample trace with dynamo logs as a live stream would bring it, its manifest recording
//! where the logs are: shared by the binary's live-view tests and the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use tpuscope_core::event::{KeyValue, Record, RecordKind};
use tpuscope_core::format;

/// The sample trace with dynamo logs, as its stream would come, with a manifest that records
/// where its logs are (`tpuscope run` records the directory it sets `TORCH_TRACE` to; the
/// sample was recorded without `tpuscope run`), and that directory.
pub fn graph_break_stream() -> (Vec<u8>, std::path::PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/torch_trace");
    let logs = dir.join("graph_break_and_guard.torch_trace");
    let bytes = std::fs::read(dir.join("graph_break_and_guard.tps")).unwrap();
    (recording_logs_in(&bytes, &logs), logs)
}

/// `trace` with `TPUSCOPE_TORCH_TRACE=logs` in its manifest (the first record).
pub fn recording_logs_in(trace: &[u8], logs: &Path) -> Vec<u8> {
    let (head, rest) = trace.split_at(format::HEADER_LEN);
    let h = format::parse_frame_header(rest).unwrap();
    assert_eq!(h.kind, RecordKind::Manifest as u16);
    let end = format::FRAME_HEADER_LEN + h.len as usize;
    let payload = &rest[format::FRAME_HEADER_LEN..end];
    let Record::Manifest(mut m) = Record::decode_payload(RecordKind::Manifest, payload).unwrap()
    else {
        unreachable!("decoded as a manifest")
    };
    m.environment.retain(|kv| !kv.key.contains("TORCH_TRACE"));
    m.environment.push(KeyValue {
        key: "TPUSCOPE_TORCH_TRACE".into(),
        value: logs.display().to_string(),
    });
    let mut new_payload = Vec::new();
    Record::Manifest(m).encode_payload(&mut new_payload);
    let mut out = head.to_vec();
    format::encode_frame(&mut out, h.kind, h.flags, &new_payload);
    out.extend_from_slice(&rest[end..]);
    out
}
