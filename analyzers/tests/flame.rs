//! Flamegraphs of compile time and sync stall from real traces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use quick_xml::Reader;
use quick_xml::events::Event;
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::flame::{FlameError, FlameKind, NO_STACK, folded, svg};
use tpuscope_analyzers::syncs::host_syncs;
use tpuscope_core::Trace;
use tpuscope_core::event::Record;
use tpuscope_core::reader::read_trace_file;

fn trace(name: &str) -> Trace {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/real")
        .join(name);
    read_trace_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn compile_ns(t: &Trace) -> u64 {
    t.events
        .iter()
        .filter_map(|r| match r {
            Record::Compile(c) => Some(c.dur_ns),
            _ => None,
        })
        .sum()
}

fn stall_ns(t: &Trace) -> u64 {
    host_syncs(t, &Digest::of(t), 0)
        .0
        .iter()
        .map(|s| s.stall_ns)
        .sum()
}

/// The weights add up to the total in microseconds: each entry rounds by at most half a
/// microsecond (and entries that round to zero are left out).
fn check_sum(f: &[(String, u64)], total_ns: u64) {
    let sum_us: u64 = f.iter().map(|(_, w)| w).sum();
    let total_us = total_ns as f64 / 1000.0;
    let slack = (f.len() as f64).max(1.0) * 0.5 + 0.5;
    assert!(
        (sum_us as f64 - total_us).abs() <= slack,
        "sum {sum_us} µs vs total {total_us} µs over {} stacks",
        f.len()
    );
}

fn check_sorted_and_positive(f: &[(String, u64)]) {
    assert!(f.windows(2).all(|w| w[0].0 < w[1].0), "not sorted/distinct");
    assert!(f.iter().all(|(_, w)| *w > 0));
    for (stack, _) in f {
        assert!(!stack.contains('\n'));
        assert!(stack.split(';').all(|frame| !frame.is_empty()), "{stack}");
    }
}

fn weight_where(f: &[(String, u64)], pred: impl Fn(&str) -> bool) -> u64 {
    f.iter().filter(|(s, _)| pred(s)).map(|(_, w)| w).sum()
}

#[test]
fn jax_compile_time_by_stack() {
    let t = trace("jax_lr.tps");
    let f = folded(&t, FlameKind::CompileTime);
    assert!(!f.is_empty());
    check_sorted_and_positive(&f);
    let total = compile_ns(&t);
    assert!(total > 0);
    check_sum(&f, total);
    // The user's frames, outermost first: the module-level call, then `main`'s line 36.
    let train = f
        .iter()
        .find(|(s, _)| s.contains("jax_lr.py:36 main"))
        .unwrap_or_else(|| panic!("{f:#?}"));
    let outer = train.0.find("jax_lr.py:44 <module>").unwrap();
    let inner = train.0.find("jax_lr.py:36 main").unwrap();
    assert!(outer < inner, "{}", train.0);
    assert!(
        train.0.starts_with("workloads/jax_lr.py:44 <module>"),
        "{}",
        train.0
    );
    // Framework frames are kept, shortened from site-packages on.
    assert!(train.0.contains(";site-packages/jax/_src/"), "{}", train.0);
    assert!(!train.0.contains("/root/"), "{}", train.0);
    // The train step's four compiles are all under line 36.
    let line36_ns: u64 = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Compile(c) if c.executable_name == "jit_train_step" => Some(c.dur_ns),
            _ => None,
        })
        .sum();
    let line36 = weight_where(&f, |s| s.contains("jax_lr.py:36 main"));
    assert!(
        (line36 as f64 - line36_ns as f64 / 1000.0).abs() <= 2.0,
        "{line36} µs vs {line36_ns} ns"
    );
}

#[test]
fn torch_sync_stall_by_stack() {
    let t = trace("torch_xla_item.tps");
    let f = folded(&t, FlameKind::SyncStall);
    assert!(!f.is_empty());
    check_sorted_and_positive(&f);
    let total = stall_ns(&t);
    assert!(total > 0);
    check_sum(&f, total);
    // The `.item()` in the loop.
    let (syncs, _) = host_syncs(&t, &Digest::of(&t), 0);
    let line27_ns: u64 = syncs
        .iter()
        .filter(|s| {
            s.site
                .source
                .as_ref()
                .is_some_and(|src| src.file.ends_with("torch_xla_item.py") && src.line == 27)
        })
        .map(|s| s.stall_ns)
        .sum();
    assert!(line27_ns > 0);
    let line27 = weight_where(&f, |s| s.contains("torch_xla_item.py:27 main"));
    assert!(
        (line27 as f64 - line27_ns as f64 / 1000.0).abs() <= 2.0,
        "{line27} µs vs {line27_ns} ns: {f:#?}"
    );
    // And the compile flamegraph of the same trace.
    let c = folded(&t, FlameKind::CompileTime);
    check_sorted_and_positive(&c);
    check_sum(&c, compile_ns(&t));
    assert!(
        c.iter()
            .any(|(s, _)| s.contains("torch_xla_item.py:29 main"))
    );
}

#[test]
fn jax_sync_stall_sums_to_the_host_syncs() {
    let t = trace("jax_lr.tps");
    let f = folded(&t, FlameKind::SyncStall);
    check_sorted_and_positive(&f);
    check_sum(&f, stall_ns(&t));
}

#[test]
fn compiles_without_a_stack_go_under_their_executable() {
    let mut t = trace("torch_xla_item.tps");
    let mut moved = Vec::new();
    for r in &mut t.events {
        if let Record::Compile(c) = r {
            c.stack = 0;
            moved.push((c.executable_name.clone(), c.dur_ns));
        }
    }
    assert!(!moved.is_empty());
    let f = folded(&t, FlameKind::CompileTime);
    check_sorted_and_positive(&f);
    for (name, ns) in &moved {
        let key = format!("{NO_STACK};{name}");
        let w = weight_where(&f, |s| s == key);
        assert!(
            (w as f64 - *ns as f64 / 1000.0).abs() <= 0.5,
            "{key}: {w} vs {ns} ns"
        );
    }
    assert_eq!(f.len(), moved.len());
}

/// Element names and text of an XML document; panics if it is not well-formed.
fn parse_xml(doc: &str) -> (Vec<String>, Vec<String>) {
    let mut reader = Reader::from_str(doc);
    let mut elements = Vec::new();
    let mut texts = Vec::new();
    let mut depth = 0i32;
    loop {
        match reader.read_event().unwrap() {
            Event::Start(e) => {
                depth += 1;
                elements.push(String::from_utf8(e.name().as_ref().to_vec()).unwrap());
            }
            Event::Empty(e) => {
                elements.push(String::from_utf8(e.name().as_ref().to_vec()).unwrap());
            }
            Event::End(_) => depth -= 1,
            Event::Text(t) => texts.push(t.decode().unwrap().into_owned()),
            Event::GeneralRef(r) => {
                // `&lt;module&gt;`: keep the text readable for the checks below.
                let name = String::from_utf8(r.to_vec()).unwrap();
                let ch = match name.as_str() {
                    "lt" => "<",
                    "gt" => ">",
                    "amp" => "&",
                    "quot" => "\"",
                    "apos" => "'",
                    _ => "?",
                };
                texts.push(ch.to_string());
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(depth, 0, "unbalanced elements");
    (elements, texts)
}

#[test]
fn svg_is_a_flamegraph_of_the_stacks() {
    let t = trace("jax_lr.tps");
    let f = folded(&t, FlameKind::CompileTime);
    let title = "Compile time by Python stack — jax_lr";
    let doc = svg(&f, title).unwrap();
    let (elements, texts) = parse_xml(&doc);
    assert_eq!(elements.first().map(String::as_str), Some("svg"));
    let all_text = texts.concat();
    assert!(all_text.contains(title));
    // One box per distinct frame path at least: every stack's frames are drawn.
    let rects = elements.iter().filter(|e| *e == "rect").count();
    let deepest = f.iter().map(|(s, _)| s.split(';').count()).max().unwrap();
    assert!(rects >= deepest, "{rects} boxes for stacks {deepest} deep");
    assert!(all_text.contains("jax_lr.py:36 main"));
    assert!(
        all_text.contains("jax_lr.py:44 <module>"),
        "escaped names read back"
    );
    // Same input, same bytes (colours from names, no randomness or clock).
    assert_eq!(svg(&f, title).unwrap(), doc);
    // The sync flamegraph of another trace renders too.
    let s = folded(&trace("torch_xla_item.tps"), FlameKind::SyncStall);
    let doc = svg(&s, "sync stall").unwrap();
    let (_, texts) = parse_xml(&doc);
    assert!(texts.concat().contains("torch_xla_item.py:27 main"));
}

#[test]
fn nothing_to_draw_is_an_error_not_a_broken_svg() {
    assert!(matches!(svg(&[], "t"), Err(FlameError::Empty)));
    assert!(matches!(
        svg(&[("a;b".to_string(), 0)], "t"),
        Err(FlameError::Empty)
    ));
}
