//! A trace decoded from pieces equals the trace decoded whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_core::{Completeness, TraceBuilder, read_trace};

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real")
            .join(name),
    )
    .unwrap()
}

#[test]
fn pieces_of_any_size_give_the_whole_trace() {
    for name in ["jax_lr.tps", "torch_xla_item.tps", "torch_tpu_cache.tps"] {
        let bytes = sample(name);
        let whole = read_trace(&bytes).unwrap();
        for chunk in [1usize, 7, 13, 4096, 65536, bytes.len()] {
            let mut b = TraceBuilder::new();
            let mut absorbed = 0;
            let mut seen_partial = false;
            for piece in bytes.chunks(chunk) {
                absorbed += b.push(piece).unwrap();
                if let Some(t) = b.trace()
                    && t.end.is_none()
                {
                    seen_partial = true;
                    assert!(matches!(t.completeness, Completeness::NoEndRecord { .. }));
                }
            }
            assert!(seen_partial || chunk >= bytes.len(), "{name} {chunk}");
            assert_eq!(b.bytes_received(), bytes.len() as u64);
            let t = b.finish().unwrap();
            assert_eq!(t.events, whole.events, "{name} in pieces of {chunk}");
            assert_eq!(t.strings, whole.strings);
            assert_eq!(t.blobs.len(), whole.blobs.len());
            assert_eq!(t.completeness, Completeness::Complete);
            assert!(t.damage.is_empty());
            assert!(absorbed >= t.events.len());
        }
    }
}

#[test]
fn a_stream_that_stops_mid_frame_is_cut_where_it_stopped() {
    let bytes = sample("jax_lr.tps");
    let mut b = TraceBuilder::new();
    b.push(&bytes[..bytes.len() - 5]).unwrap();
    let n = b.trace().unwrap().events.len();
    let t = b.finish().unwrap();
    assert_eq!(t.events.len(), n);
    assert!(
        matches!(t.completeness, Completeness::Cut { .. }),
        "{:?}",
        t.completeness
    );
}

#[test]
fn not_a_trace_is_an_error_once_the_header_is_in() {
    let mut b = TraceBuilder::new();
    assert_eq!(b.push(b"hello").unwrap(), 0);
    assert!(b.push(b" world, not a trace at all").is_err());
    assert!(b.trace().is_none());
}
