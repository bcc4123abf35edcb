//! Inputs the fuzz targets (`fuzz/`, run by `scripts/fuzz.sh`) found, kept as tests of the normal
//! suite: each names the target, what it broke, and checks the property the target checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tpuscope_core::event::{Blob, RecordKind, StringDef};
use tpuscope_core::format::{self, FORMAT_MAJOR, FORMAT_MINOR};
use tpuscope_core::live::{LiveDecoder, LiveError, encode_record_frame};
use tpuscope_core::{Record, TraceBuilder, read_trace};

/// A header and one frame of kind `kind` holding `payload`.
fn stream_with_frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut s = format::encode_header(FORMAT_MAJOR, FORMAT_MINOR).to_vec();
    format::encode_frame(&mut s, kind, 0, payload);
    s
}

/// live_stream target: after a frame failed its CRC, `LiveDecoder::push` returned `Damaged` and
/// then, pushed more, went on decoding the frames after it (its doc: "after an error the decoder
/// takes nothing more"). A client that pushes on would read past damage as if it were fine.
#[test]
fn live_decoder_takes_nothing_after_a_damaged_frame() {
    let frame = |id: u8, text: &[u8]| {
        let mut payload = vec![0x08, id, 0x12, text.len() as u8];
        payload.extend_from_slice(text);
        let mut f = Vec::new();
        format::encode_frame(&mut f, 2, 0, &payload);
        f
    };
    // A string definition (kind 2) whose last payload byte is flipped: its CRC no longer checks.
    let mut bad = frame(2, b"bad");
    let last = bad.len() - 1;
    bad[last] ^= 0xff;

    let mut d = LiveDecoder::new(u64::MAX);
    let mut start = stream_with_frame(2, &[0x08, 1, 0x12, 2, b'o', b'k']);
    start.extend_from_slice(&frame(3, b"also ok"));
    assert_eq!(d.push(&start).unwrap().consumed, start.len());
    assert_eq!(d.trace().unwrap().strings.len(), 2);
    match d.push(&bad) {
        Err(LiveError::Damaged { .. }) => {}
        other => panic!("a frame failing its CRC: {other:?}"),
    }
    let good = frame(4, b"after the damage");
    match d.push(&good) {
        Err(_) => {}
        Ok(p) => assert_eq!(
            p.consumed,
            0,
            "took {} bytes after the error, and read them: strings {:?}",
            p.consumed,
            d.trace().map(|t| &t.strings)
        ),
    }
}

/// A trace whose blob holds, among its bytes, a whole valid frame (here a string definition: a
/// program blob may hold any bytes), then one more string; and where the blob's frame starts.
fn trace_with_a_frame_inside_a_blob() -> (Vec<u8>, usize) {
    let mut t = format::encode_header(FORMAT_MAJOR, FORMAT_MINOR).to_vec();
    t.extend(encode_record_frame(&Record::StringDef(StringDef {
        id: 1,
        text: "before".into(),
    })));
    let inner = encode_record_frame(&Record::StringDef(StringDef {
        id: 7,
        text: "not a record: bytes of a blob".into(),
    }));
    let mut data = vec![0xab; 64];
    data.extend_from_slice(&inner);
    data.extend_from_slice(&[0xcd; 4096]);
    let blob_at = t.len();
    t.extend(encode_record_frame(&Record::Blob(Blob {
        hash: 42,
        role: "input_program".into(),
        format: "hlo".into(),
        data,
    })));
    t.extend(encode_record_frame(&Record::StringDef(StringDef {
        id: 2,
        text: "after".into(),
    })));
    assert_eq!(
        format::parse_frame_header(&t[blob_at..]).map(|h| h.kind),
        Some(RecordKind::Blob as u16)
    );
    (t, blob_at)
}

/// live_stream target: a piece of a stream that ends inside a large frame, after whole frames,
/// went to `TraceBuilder::push`, which resynchronises inside the incomplete frame: a valid frame
/// among its payload bytes is taken for a record after damage. `LiveDecoder` (which checks every
/// frame itself) then stopped a sound stream with "damaged"; `TraceBuilder` alone (the GUI
/// following a growing file) reads a record that is not there and loses the blob. Whole, the same
/// bytes read cleanly.
#[test]
fn trace_builder_does_not_resync_into_a_frame_still_arriving() {
    let (t, blob_at) = trace_with_a_frame_inside_a_blob();
    let whole = read_trace(&t).unwrap();
    assert!(whole.damage.is_empty());
    assert_eq!(whole.strings.len(), 2);
    // Cut inside the blob, past the frame its data holds.
    let cut = blob_at + 12 + 200;

    let mut b = TraceBuilder::new();
    b.push(&t[..cut]).unwrap();
    b.push(&t[cut..]).unwrap();
    let followed = b.finish().unwrap();
    assert!(
        followed.damage.is_empty(),
        "TraceBuilder: damage {:?}",
        followed.damage
    );
    assert_eq!(followed.strings, whole.strings, "TraceBuilder: strings");
    assert_eq!(followed.blobs, whole.blobs, "TraceBuilder: blobs");
}

/// The same stream through `LiveDecoder`, which checks each frame itself and passes its pieces
/// to a `TraceBuilder`: "the stream is damaged", and the viewer stops.
#[test]
fn live_decoder_reads_a_sound_stream_cut_inside_a_large_frame() {
    let (t, blob_at) = trace_with_a_frame_inside_a_blob();
    let whole = read_trace(&t).unwrap();
    let cut = blob_at + 12 + 200;
    let mut d = LiveDecoder::new(u64::MAX);
    for piece in [&t[..cut], &t[cut..]] {
        if let Err(e) = d.push(piece) {
            panic!("LiveDecoder on a sound stream: {e}");
        }
    }
    let live = d.into_trace().unwrap();
    assert_eq!(live.strings, whole.strings, "LiveDecoder: strings");
    assert_eq!(live.blobs, whole.blobs, "LiveDecoder: blobs");
}
