//! The live stream decoders, fed the input in chunks whose sizes come from its first two bytes:
//! `TraceBuilder::push` (a growing trace file) against the model of the valid frame chain and
//! `read_trace`; `live::LiveDecoder` (a viewer's socket) against a model of the live stream's
//! rules (`tpuscope_fuzz::live_model`); `live::manifest_from_prefix` at every chunk boundary.
//!
//! Input: `[seed lo, seed hi, stream…]`. The seed's low two bits pick the chunking: tiny (1..=16
//! bytes), medium (1..=4096), the whole stream at once, or a mix; bit 2 gives the live decoder a
//! small memory budget (4 KiB) instead of an unlimited one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tpuscope_core::format::HEADER_LEN;
use tpuscope_core::live::{LiveDecoder, LiveError, manifest_from_prefix};
use tpuscope_core::{TraceBuilder, read_trace};
use tpuscope_fuzz::{
    LiveEnd, Rng, Stop, assert_same_trace, check_against_chain, live_model, stream_chain,
};

fn chunks(seed: u16, len: usize) -> Vec<usize> {
    let mut rng = Rng::new(u64::from(seed));
    let mut out = Vec::new();
    let mut fed = 0;
    while fed < len {
        let n = match seed & 3 {
            0 => rng.size(16),
            1 => rng.size(4096),
            2 => len,
            _ => {
                let max = if rng.next_u64().is_multiple_of(4) {
                    4096
                } else {
                    64
                };
                rng.size(max)
            }
        }
        .min(len - fed);
        out.push(n);
        fed += n;
    }
    out
}

/// `TraceBuilder` over the stream as a growing trace file.
fn builder(seed: u16, stream: &[u8]) {
    let whole = read_trace(stream);
    let model = stream_chain(stream);
    let mut b = TraceBuilder::new();
    let mut fed = 0;
    let mut absorbed = 0u64;
    let mut failed: Option<String> = None;
    let mut manifest_seen = None;
    for n in chunks(seed, stream.len()) {
        let chunk = &stream[fed..fed + n];
        fed += n;
        match b.push(chunk) {
            Ok(k) => {
                assert!(
                    failed.is_none(),
                    "push succeeded after an error: {failed:?}"
                );
                absorbed += k as u64;
            }
            Err(e) => {
                assert!(
                    whole.is_err(),
                    "push failed ({e}) after {fed} bytes, but the stream reads as a trace"
                );
                failed = Some(e.to_string());
            }
        }
        // Once the manifest is there, it stays the same one.
        let m = manifest_from_prefix(&stream[..fed]);
        if manifest_seen.is_some() {
            assert_eq!(m, manifest_seen, "manifest_from_prefix after {fed} bytes");
        }
        manifest_seen = m;
    }
    assert_eq!(b.bytes_received(), stream.len() as u64, "bytes_received");

    let Some(c) = model else {
        assert!(
            manifest_seen.is_none(),
            "a manifest from bytes with no header"
        );
        return;
    };
    if let Some(m) = &manifest_seen {
        assert_eq!(
            c.manifest.as_ref(),
            Some(m),
            "manifest_from_prefix is not the trace's"
        );
    } else if c.header_len == HEADER_LEN && c.first_is_manifest {
        panic!("the stream's first frame is its manifest, manifest_from_prefix missed it");
    }
    let Some(t) = b.finish() else {
        panic!("no trace after a whole header ({} bytes)", stream.len());
    };
    check_against_chain(&t, &c, stream, "TraceBuilder", true);
    if t.damage.is_empty() {
        assert_eq!(absorbed, c.decoded, "records push() said it absorbed");
    }
    // A stream that is one clean chain of frames decodes as the file does, whatever the chunks.
    // (A valid frame of kind 0 is never written; the builder scans rather than waits for one.)
    // (Segment markers split a file read into hosts; a stream decoder keeps one trace.)
    if c.stop == Some(Stop::Eof) && !c.has_kind_zero && !c.has_segment {
        let w = whole.unwrap_or_else(|e| panic!("clean stream, read_trace: {e}"));
        assert!(
            t.damage.is_empty(),
            "damage in a clean stream: {:?}",
            t.damage
        );
        assert_same_trace(&t, &w, "TraceBuilder vs read_trace");
    }
}

/// `LiveDecoder` over the stream as a viewer's socket.
fn live(seed: u16, stream: &[u8]) {
    let limited = seed & 4 != 0;
    let mut d = LiveDecoder::new(if limited { 4 << 10 } else { u64::MAX });
    let model = live_model(stream);
    let mut fed = 0;
    let mut error: Option<LiveError> = None;
    let mut backlog_ends = 0;
    'chunks: for n in chunks(seed, stream.len()) {
        let mut chunk = &stream[fed..fed + n];
        fed += n;
        while !chunk.is_empty() {
            match d.push(chunk) {
                Ok(p) => {
                    assert!(
                        error.is_none(),
                        "push took {} bytes after an error: {error:?}",
                        p.consumed
                    );
                    assert!(p.consumed <= chunk.len());
                    if p.backlog_end {
                        backlog_ends += 1;
                    } else {
                        assert_eq!(p.consumed, chunk.len(), "stopped early without the mark");
                    }
                    chunk = &chunk[p.consumed..];
                }
                Err(e) => {
                    // The client stops at the first error; the decoder must keep refusing.
                    if error.is_some() {
                        break 'chunks;
                    }
                    error = Some(e);
                    // Once more: still an error, or nothing taken.
                    if let Ok(p) = d.push(chunk) {
                        assert_eq!(p.consumed, 0, "took bytes after {error:?}");
                    }
                    break 'chunks;
                }
            }
        }
    }
    match (&error, model.end) {
        (None, LiveEnd::Clean) => {}
        (Some(LiveError::OverLimit { .. }), _) => assert!(limited, "over an unlimited budget"),
        (Some(LiveError::Refused(_)), LiveEnd::Refused) => {}
        (Some(LiveError::NotATrace(_)), LiveEnd::Bad) => {}
        (Some(LiveError::FrameTooLarge { .. } | LiveError::Damaged { .. }), LiveEnd::Bad) => {}
        (e, end) => panic!("live decoder: {e:?}, but the stream is {end:?}"),
    }
    if error.is_none() {
        assert_eq!(d.bytes_received(), stream.len() as u64, "bytes_received");
        assert_eq!(d.backlog_end(), model.backlog_end, "backlog end");
        assert_eq!(
            backlog_ends, model.backlog_marks,
            "end-of-backlog marks reported"
        );
    }
    // The model's trace bytes are whole frames with good CRCs up to an incomplete last one: the
    // decoder passed exactly these to its trace (after an error, a prefix of them).
    match (d.trace(), stream_chain(&model.trace_bytes)) {
        (Some(t), Some(c)) => {
            assert!(
                t.damage.is_empty(),
                "damage in a checked live stream: {:?}",
                t.damage
            );
            if error.is_none() {
                check_against_chain(t, &c, &model.trace_bytes, "LiveDecoder", false);
            } else {
                assert!(
                    t.events.len() <= c.events.len() && t.events[..] == c.events[..t.events.len()],
                    "LiveDecoder after {error:?}: not a prefix of the stream's events"
                );
            }
        }
        (None, Some(_)) => assert!(error.is_some(), "no trace after a whole header"),
        (Some(_), None) => panic!("a trace from a stream with no whole header"),
        (None, None) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((seed, stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let seed = u16::from_le_bytes(*seed);
    builder(seed, stream);
    live(seed, stream);
});
