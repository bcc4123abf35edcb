//! What a skimming reader hands out, kept comparable: readers that must agree (one pass, piped,
//! chunked on several threads) are checked item by item.

use tpuscope_core::Trace;
use tpuscope_core::event::RecordKind;
use tpuscope_core::stream::Skimmed;

/// Each event handed out: its segment, its frame's offset, its kind and its payload (a decoded
/// one encoded again).
pub type Seen = Vec<(usize, u64, RecordKind, Vec<u8>)>;

pub fn keep(seen: &mut Seen, segment: usize, frame: u64, r: Skimmed<'_>) {
    let (kind, payload) = match r {
        Skimmed::Decoded(r) => {
            let mut buf = Vec::new();
            r.encode_payload(&mut buf);
            (r.kind(), buf)
        }
        Skimmed::Raw(kind, p) => (kind, p.to_vec()),
    };
    seen.push((segment, frame, kind, payload));
}

/// The traces two readers ended with (no events: those were handed out) are the same.
pub fn assert_same_tables(a: &[Trace], b: &[Trace], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: segments");
    for (a, b) in a.iter().zip(b) {
        assert_eq!(a.damage, b.damage, "{what}: damage");
        assert_eq!(a.completeness, b.completeness, "{what}: completeness");
        assert_eq!(a.end, b.end, "{what}");
        assert_eq!(a.manifest, b.manifest, "{what}");
        assert_eq!(a.client, b.client, "{what}");
        assert_eq!(a.segment, b.segment, "{what}");
        assert_eq!(a.strings, b.strings, "{what}");
        assert_eq!(a.stacks, b.stacks, "{what}");
        assert_eq!(a.blobs, b.blobs, "{what}");
        assert_eq!(a.unknown_records, b.unknown_records, "{what}");
        assert_eq!(a.undecodable_records, b.undecodable_records, "{what}");
    }
}

/// What one pass (`skim_frames`) hands out, each event with its frame's offset, and the traces.
pub fn one_pass<R: std::io::Read>(
    stream: Result<tpuscope_core::TraceStream<R>, tpuscope_core::ReadError>,
    decode: fn(RecordKind) -> bool,
) -> (Result<Vec<Trace>, tpuscope_core::ReadError>, Seen) {
    let mut seen: Seen = Vec::new();
    let frame_at = std::cell::Cell::new(0u64);
    let read = stream.and_then(|s| {
        s.skim_frames(
            decode,
            |seg, r| keep(&mut seen, seg, frame_at.get(), r),
            |_, start, _| frame_at.set(start),
        )
    });
    (read, seen)
}
