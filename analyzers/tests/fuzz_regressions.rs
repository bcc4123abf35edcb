//! Inputs the fuzz targets (`fuzz/`, run by `scripts/fuzz.sh`) found, kept as tests of the normal
//! suite: each names the target, what it broke, and checks the property the target checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tpuscope_analyzers::torch_trace;

/// A TORCH_TRACE header line of process 6027 at 06:40:08.854 on Nov 22, with `meta` as its JSON.
fn header(meta: &str) -> String {
    format!("V1122 06:40:08.854000 6027 torch/_dynamo/utils.py:2473] {meta}\n")
}

/// A chromium event of compile 0/0 at Unix time `ts` (µs, as torch writes it).
fn chromium(ts: &str) -> String {
    header(
        r#"{"chromium_event": {}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "x"}"#,
    ) + &format!(
        "\t{{\"name\": \"dynamo\", \"ts\": {ts}, \"args\": {{\"compile_id\": \"0/0\"}}, \"ph\": \"B\"}}\n"
    )
}

/// torch_trace target: a chromium event's `ts` far outside any real clock (here 9.2e18 µs, the
/// f64 saturating to i64::MAX) made the zone-offset calibration overflow an i64 (`attempt to
/// multiply with overflow` in `Stamp::naive_us`, a panic in debug builds, garbage in release).
/// Such a time is now ignored, and the sane ones around it still calibrate the clock.
#[test]
fn an_absurd_chromium_timestamp_is_ignored() {
    for ts in ["9.2e18", "-9.2e18", "1e300", "-1e300"] {
        let log = chromium("1795329608854700.5") + &chromium(ts) + &chromium("1795329608856104.5");
        let parsed = torch_trace::parse([log.as_str()]);
        let p = &parsed.processes[&6027];
        assert_eq!(p.entries, 3, "ts {ts}");
        // The header says 06:40:08 local; the sane events say 06:40:08 UTC: offset 0.
        assert_eq!(p.utc_offset_s, Some(0), "ts {ts}");
        let f = p.frames.values().next().unwrap();
        let (a, b) = (f.first_us.unwrap(), f.last_us.unwrap());
        assert!(
            (1_795_329_608_000_000..1_795_329_609_000_000).contains(&a) && a <= b,
            "ts {ts}: span {a}..{b} is not the sane events'"
        );
    }
}

/// Same family of overflow through `compilation_metrics`: a start time or duration no clock
/// gives must not overflow the span (`start + duration`), and the span falls back to the
/// entries' own times.
#[test]
fn absurd_compile_metrics_fall_back_to_entry_times() {
    for (start, dur) in [
        ("1e300", "0.5"),
        ("1795329608.8", "1e300"),
        ("9.2e12", "9.2e12"),
    ] {
        let metrics = header(&format!(
            r#"{{"compilation_metrics": {{"compile_id": "0/0", "co_name": "f", "co_filename": "/x.py", "co_firstlineno": 3, "start_time": {start}, "entire_frame_compile_time_s": {dur}}}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}}"#
        ));
        let log = chromium("1795329608854700.5") + &metrics;
        let parsed = torch_trace::parse([log.as_str()]);
        let f = parsed.processes[&6027].frames.values().next().unwrap();
        let (a, b) = f.span_us().unwrap();
        assert!(a <= b, "start {start} duration {dur}: span {a}..{b}");
        assert!(
            (1_795_329_608_000_000..1_795_329_609_000_000).contains(&a),
            "start {start} duration {dur}: span {a}..{b}"
        );
    }
}
