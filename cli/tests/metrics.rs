//! `tpuscope run --metrics`: a real JAX workload is scraped over HTTP while it runs (with and
//! without the live view), the exposition is read by the Prometheus project's own Python parser,
//! and the values agree with `tpuscope report --format json` of the finished trace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tmux::{Tmux, shell_quote, wait_file};
use common::*;

/// Steps of the workload between its gates; it syncs once per step.
const STEPS: u64 = 200;

/// One HTTP response.
struct Http {
    status: u16,
    head: String,
    body: String,
}

fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<Http> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"));
    Ok(Http {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

/// One sample as the parser read it.
#[derive(Clone, Debug)]
struct Sample {
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape read by `prometheus_client.parser`: family types by family name, samples by name.
struct Scrape {
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, Vec<Sample>>,
}

impl Scrape {
    fn all(&self, name: &str) -> &[Sample] {
        self.samples.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The value of the only sample of `name`.
    fn one(&self, name: &str) -> f64 {
        let s = self.all(name);
        assert_eq!(s.len(), 1, "{name}: {s:?}");
        s[0].value
    }

    /// The counters that stand still while the workload waits, by name and labels.
    fn counters(&self) -> BTreeMap<(String, Vec<(String, String)>), f64> {
        let mut out = BTreeMap::new();
        for (name, samples) in &self.samples {
            // Grow while the workload waits at a gate: the records with every memory sample,
            // and the run's time split (host-bound time) with the clock record the collector
            // writes every second. Two scrapes straddle one whenever a scrape and its parse take
            // over 300 ms, as they did on 2 busy cores.
            if matches!(
                name.as_str(),
                "tpuscope_trace_records_total" | "tpuscope_time_seconds_total"
            ) {
                continue;
            }
            let family = name.strip_suffix("_total").unwrap_or(name);
            if self.types.get(family).map(String::as_str) != Some("counter") {
                continue;
            }
            for s in samples {
                let labels = s.labels.clone().into_iter().collect();
                out.insert((name.clone(), labels), s.value);
            }
        }
        out
    }
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    out.append({"name": f.name, "type": f.type, "help": f.documentation,
                "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]})
print(json.dumps(out))
"#;

/// Parses an exposition with the Prometheus Python client's parser (a parse error fails).
fn parse(text: &str) -> Scrape {
    let mut child = Command::new(venv_python("jax"))
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client could not parse the exposition (is prometheus-client in scripts/envs/jax.txt installed? scripts/setup-envs.sh jax):\n{}\n--- text\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut scrape = Scrape {
        types: BTreeMap::new(),
        samples: BTreeMap::new(),
    };
    for f in families.as_array().unwrap() {
        let name = f["name"].as_str().unwrap().to_string();
        let ty = f["type"].as_str().unwrap().to_string();
        assert!(
            ty == "counter" || ty == "gauge",
            "{name} has type {ty}: every family needs its TYPE line"
        );
        assert!(
            !f["help"].as_str().unwrap().is_empty(),
            "{name} has no HELP"
        );
        for s in f["samples"].as_array().unwrap() {
            let labels = s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            scrape
                .samples
                .entry(s["name"].as_str().unwrap().to_string())
                .or_default()
                .push(Sample {
                    labels,
                    value: s["value"].as_f64().unwrap(),
                });
        }
        scrape.types.insert(name, ty);
    }
    scrape
}

/// Scrapes `/metrics`, checking the response is the text format, and parses it.
fn scrape(addr: SocketAddr) -> Scrape {
    let r = http(addr, "GET", "/metrics").unwrap();
    assert_eq!(r.status, 200, "{}", r.head);
    assert!(
        r.head
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.head
    );
    parse(&r.body)
}

/// Scrapes until `done` holds for a scrape, and the next scrape (past the re-analysis period)
/// shows the same counters: the endpoint has caught up with a workload that stopped moving.
fn scrape_until_settled(addr: SocketAddr, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last: Option<Scrape> = None;
    loop {
        let s = scrape(addr);
        if done(&s) {
            if let Some(prev) = &last
                && prev.counters() == s.counters()
            {
                return s;
            }
            last = Some(s);
        } else {
            last = None;
        }
        assert!(Instant::now() < deadline, "the metrics never showed {what}");
        std::thread::sleep(Duration::from_millis(700));
    }
}

/// The address from tpuscope's `metrics on http://ADDR/metrics` line.
fn metrics_addr(line: &str) -> SocketAddr {
    let rest = line
        .strip_prefix("tpuscope: metrics on http://")
        .unwrap_or_else(|| panic!("not the metrics line: {line:?}"));
    rest.strip_suffix("/metrics").unwrap().parse().unwrap()
}

/// `tpuscope report --format json` of the one trace in `out`.
fn report_of(out: &Path) -> serde_json::Value {
    let traces = traces_in(out);
    assert_eq!(traces.len(), 1, "{traces:?}");
    let o = Command::new(tpuscope())
        .args(["report", "--format", "json", traces[0].to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.code().is_some_and(|c| c < 2), "{}", show(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every counter of `early` is at most its value in `late`.
fn assert_monotonic(early: &Scrape, late: &Scrape) {
    let late = late.counters();
    for (key, v) in early.counters() {
        let now = late
            .get(&key)
            .unwrap_or_else(|| panic!("counter {key:?} vanished"));
        assert!(*now >= v, "counter {key:?} went from {v} to {now}");
    }
}

/// The scrape agrees with the report of the finished trace.
fn assert_agrees_with_report(s: &Scrape, report: &serde_json::Value) {
    let t = &report["traces"][0];
    // Every series of the process carries the manifest's host, process index and pid.
    let who = [
        ("host", t["host"].as_str().unwrap().to_string()),
        ("process_index", t["process_index"].to_string()),
        ("pid", t["pid"].to_string()),
    ];
    for (name, samples) in &s.samples {
        if name == "tpuscope_processes" {
            continue;
        }
        for smp in samples {
            for (k, v) in &who {
                assert_eq!(smp.labels.get(*k), Some(v), "{name} {:?}", smp.labels);
            }
        }
    }
    assert_eq!(s.one("tpuscope_processes"), 1.0);
    let info = s.all("tpuscope_info");
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].labels["frontend"], "jax");

    assert_eq!(
        s.one("tpuscope_compiles_total"),
        report["compiles"]["total"].as_f64().unwrap()
    );
    assert_eq!(
        s.one("tpuscope_graph_families"),
        report["compiles"]["families"].as_f64().unwrap()
    );
    // Recompiles by family and by the cause of each member after the first.
    let mut want: BTreeMap<(String, String), f64> = BTreeMap::new();
    for fam in report["recompiles"].as_array().unwrap() {
        for m in fam["members"].as_array().unwrap().iter().skip(1) {
            let cause = m["cause"]
                .as_str()
                .unwrap_or(fam["cause"].as_str().unwrap());
            *want
                .entry((
                    fam["graph"].as_str().unwrap().to_string(),
                    cause.to_string(),
                ))
                .or_default() += 1.0;
        }
    }
    let got: BTreeMap<(String, String), f64> = s
        .all("tpuscope_recompiles_total")
        .iter()
        .map(|x| {
            (
                (x.labels["family"].clone(), x.labels["cause"].clone()),
                x.value,
            )
        })
        .collect();
    assert!(!want.is_empty(), "the workload recompiles: {report}");
    assert_eq!(got, want);

    let syncs: u64 = report["syncs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["count"].as_u64().unwrap())
        .sum();
    assert_eq!(syncs, STEPS);
    assert_eq!(s.one("tpuscope_host_syncs_total"), syncs as f64);
    assert_eq!(
        s.one("tpuscope_steps_total"),
        report["steps"]["count"].as_f64().unwrap()
    );
    assert_eq!(
        s.one("tpuscope_cache_hits_total"),
        report["cache"]["persistent_hits"].as_f64().unwrap()
    );
    assert_eq!(
        s.one("tpuscope_cache_misses_total"),
        report["cache"]["recompiled_same_program"].as_f64().unwrap()
    );
    assert_eq!(
        s.one("tpuscope_dropped_events_total"),
        t["dropped_events"].as_f64().unwrap()
    );
    // Memory: one series per device the report has.
    let devices = |name: &str| -> BTreeSet<String> {
        s.all(name)
            .iter()
            .map(|x| x.labels["device"].clone())
            .collect()
    };
    let want_devices: BTreeSet<String> = report["hbm"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].to_string())
        .collect();
    assert!(!want_devices.is_empty(), "{report}");
    assert_eq!(devices("tpuscope_hbm_bytes_in_use"), want_devices);
    assert_eq!(devices("tpuscope_hbm_peak_bytes"), want_devices);
    for x in s.all("tpuscope_hbm_bytes_in_use") {
        assert!(x.value > 0.0, "{x:?}");
    }
}

/// Collects a child's stderr lines on a thread.
fn collect_lines(pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            l2.lock().unwrap().push(line);
        }
    });
    lines
}

fn wait_line(lines: &Mutex<Vec<String>>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(l) = lines.lock().unwrap().iter().find(|l| l.starts_with(prefix)) {
            return l.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {prefix:?} line; stderr so far: {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the child if the test fails half-way.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn metrics_during_a_plain_run_parse_and_agree_with_the_report() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&gates).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let child = Command::new(tpuscope())
        .args([
            "run",
            "--no-tui",
            "--metrics",
            "127.0.0.1:0",
            "--out",
            &format!("{}/", out.display()),
            "--",
        ])
        .arg(&py)
        .arg(workload("live_wait.py"))
        .env("LIVE_GATE_DIR", &gates)
        .env("LIVE_STEPS", STEPS.to_string())
        .env("TPUSCOPE_COLLECTOR", collector())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reap(Some(child));
    let c = child.0.as_mut().unwrap();
    let stdout = collect_lines(c.stdout.take().unwrap());
    let stderr = collect_lines(c.stderr.take().unwrap());
    let addr = metrics_addr(&wait_line(&stderr, "tpuscope: metrics on "));
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_ne!(addr.port(), 0);

    // Other paths and methods.
    let r = http(addr, "GET", "/other").unwrap();
    assert_eq!(r.status, 404, "{}", r.head);
    let r = http(addr, "POST", "/metrics").unwrap();
    assert_eq!(r.status, 405, "{}", r.head);

    // At the first gate the program compiled and ran a few steps.
    wait_file(&gates.join("ready"));
    let early = scrape_until_settled(addr, "the first compiles", |s| {
        s.all("tpuscope_compiles_total")
            .first()
            .is_some_and(|x| x.value >= 1.0)
    });
    assert_eq!(early.one("tpuscope_process_running"), 1.0);

    // At the second gate it has done all its steps (one sync each) and waits.
    std::fs::write(gates.join("go"), "").unwrap();
    wait_file(&gates.join("done"));
    let late = scrape_until_settled(addr, "all the steps' syncs", |s| {
        s.all("tpuscope_host_syncs_total")
            .first()
            .is_some_and(|x| x.value >= STEPS as f64)
    });
    assert_monotonic(&early, &late);
    assert!(
        late.one("tpuscope_compiles_total") > early.one("tpuscope_compiles_total"),
        "new shapes compiled between the gates"
    );
    assert_eq!(late.one("tpuscope_process_running"), 1.0);

    // The endpoint closes with the workload.
    std::fs::write(gates.join("exit"), "").unwrap();
    let status = child.0.take().unwrap().wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "stdout {:?} stderr {:?}",
        stdout.lock().unwrap(),
        stderr.lock().unwrap()
    );
    assert!(
        http(addr, "GET", "/metrics").is_err(),
        "still serving after the workload exited"
    );

    assert_agrees_with_report(&late, &report_of(&out));
}

#[test]
fn a_taken_port_or_a_bad_address_is_one_error_before_the_workload_starts() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let marker = dir.path().join("started");
    let code = format!("open({:?}, 'w').close()", marker.to_str().unwrap());
    for spec in [
        format!("127.0.0.1:{port}"),
        port.clone(),
        "127.0.0.1:notaport".to_string(),
        "70000".to_string(),
    ] {
        let o = Command::new(tpuscope())
            .args(["run", "--no-tui", "--metrics", &spec, "--out"])
            .arg(dir.path())
            .arg("--")
            .arg(&py)
            .args(["-c", &code])
            .env("TPUSCOPE_COLLECTOR", collector())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{spec}: {err}");
        assert!(err.starts_with("tpuscope: error: "), "{spec}: {err}");
        assert!(err.contains(&spec), "{spec}: {err}");
        assert!(!marker.exists(), "{spec}: the workload ran");
        assert!(traces_in(dir.path()).is_empty(), "{spec}");
    }
    drop(taken);
}

#[test]
fn metrics_are_served_alongside_the_live_view() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&gates).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let stderr: PathBuf = dir.path().join("stderr.txt");
    let tmux = Tmux::new("metrics");
    // The view owns the terminal; tpuscope's own stderr goes to a file to read the address from.
    let run_cmd = format!(
        "cd {root} && env LIVE_GATE_DIR={gates} LIVE_STEPS={STEPS} TPUSCOPE_COLLECTOR={collector} {bin} run --metrics 0 --out {out}/ -- {py} {wl} 2>{err}; echo TPUSCOPE-EXIT=$?; sleep 600",
        root = shell_quote(&repo_root()),
        gates = shell_quote(&gates),
        collector = shell_quote(&collector()),
        bin = shell_quote(&tpuscope()),
        out = shell_quote(&out),
        py = shell_quote(&py),
        wl = shell_quote(&workload("live_wait.py")),
        err = shell_quote(&stderr),
    );
    tmux.start(&run_cmd);
    wait_file(&gates.join("ready"));
    let text = std::fs::read_to_string(&stderr).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("tpuscope: metrics on "))
        .unwrap_or_else(|| panic!("no metrics line in {text:?}"));
    let addr = metrics_addr(line);
    assert!(addr.ip().is_loopback(), "{addr}");

    std::fs::write(gates.join("go"), "").unwrap();
    wait_file(&gates.join("done"));
    tmux.wait_for("t:0", "the live view", |s| s.contains("host syncs "));
    // The terminal's stderr is behind the view: the Output tab (the last one) names the address.
    tmux.cmd(&["send-keys", "-t", "t:0", "BTab"]);
    tmux.wait_for("t:0", "the metrics address in the Output tab", |s| {
        s.contains(&format!("tpuscope: metrics on http://{addr}/metrics"))
    });
    let late = scrape_until_settled(addr, "all the steps' syncs", |s| {
        s.all("tpuscope_host_syncs_total")
            .first()
            .is_some_and(|x| x.value >= STEPS as f64)
    });

    std::fs::write(gates.join("exit"), "").unwrap();
    tmux.wait_for("t:0", "the ended state", |s| s.contains("ended"));
    tmux.cmd(&["send-keys", "-t", "t:0", "q"]);
    tmux.wait_for("t:0", "run's exit", |s| s.contains("TPUSCOPE-EXIT=0"));
    assert_agrees_with_report(&late, &report_of(&out));
}
