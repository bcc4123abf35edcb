//! The trace readers on arbitrary bytes: `read_trace`, `read_traces` and the streaming
//! `TraceStream` (fed in pieces, with an input-derived resync window) agree with each other and
//! with the model of the valid frame chain (`tpuscope_fuzz::chain`); re-reading gives the same
//! trace; a prefix of the input reads as the input's prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tpuscope_core::{TraceStream, read_trace, read_traces};
use tpuscope_fuzz::{
    Pieces, Stop, assert_same_trace, chain, check_against_chain, events_before, fnv,
};

fuzz_target!(|data: &[u8]| {
    let one = read_trace(data);
    let all = read_traces(data);
    let h = fnv(data);
    // The streaming reader, in pieces of 1..=4096 bytes, examining 1..=256 resync candidates per
    // window step (the real window is 16 MiB: small ones exercise its steps on small inputs).
    let streamed = |first_only: bool| {
        let mut s = TraceStream::new(Pieces::new(data, h, 1 + (h >> 8) as usize % 4096), "fuzz")?;
        s.set_scan_window(1 + (h >> 24) as usize % 256);
        s.read_all(first_only)
    };
    let (s_one, s_all) = (streamed(true), streamed(false));
    let (t, segments) = match (one, all) {
        (Ok(t), Ok(segments)) => (t, segments),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string());
            assert!(
                chain(data).is_none(),
                "header parses but the read failed: {a}"
            );
            assert!(
                s_all.is_err(),
                "read_traces failed ({a}), TraceStream did not"
            );
            return;
        }
        (a, b) => panic!("read_trace {:?} but read_traces {:?}", a.err(), b.err()),
    };
    assert!(!segments.is_empty(), "read_traces returned no trace");
    assert_same_trace(&t, &segments[0], "read_trace vs read_traces[0]");
    let again = read_trace(data).unwrap_or_else(|e| panic!("second read: {e}"));
    assert_same_trace(&t, &again, "re-read");

    let s_one = s_one.unwrap_or_else(|e| panic!("read_trace read it, TraceStream: {e}"));
    let s_all = s_all.unwrap_or_else(|e| panic!("read_traces read it, TraceStream: {e}"));
    assert_eq!(
        s_one.len(),
        1,
        "TraceStream first_only gave {} traces",
        s_one.len()
    );
    assert_same_trace(&s_one[0], &t, "TraceStream (first only) vs read_trace");
    assert_eq!(
        s_all.len(),
        segments.len(),
        "TraceStream vs read_traces: segments"
    );
    for (i, (a, b)) in s_all.iter().zip(&segments).enumerate() {
        assert_same_trace(a, b, &format!("TraceStream vs read_traces, segment {i}"));
    }

    let Some(c) = chain(data) else {
        panic!("the read succeeded but the header does not parse");
    };
    check_against_chain(&t, &c, data, "read_trace", true);

    // A prefix: a cut at an input-derived offset inside the body.
    let body = data.len() - c.header_len;
    if body == 0 {
        return;
    }
    let cut = c.header_len + (h % body as u64) as usize;
    let prefix = &data[..cut];
    let p = read_trace(prefix).unwrap_or_else(|e| panic!("prefix {cut}: {e}"));
    let Some(pc) = chain(prefix) else {
        panic!("prefix {cut}: header");
    };
    check_against_chain(&p, &pc, prefix, "read_trace of a prefix", true);
    let n = events_before(&c, cut);
    assert!(
        p.events.len() >= n && p.events[..n] == c.events[..n],
        "prefix {cut}: not the whole trace's first {n} events"
    );
    if p.damage.is_empty() && !matches!(pc.stop, Some(Stop::Segment(_))) {
        assert_eq!(p.events.len(), n, "prefix {cut}: events past the cut");
    }
});
