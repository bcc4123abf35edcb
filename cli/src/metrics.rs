//! `tpuscope run --metrics ADDR`: a Prometheus endpoint (`/metrics`, text format 0.0.4) for the
//! workload while it runs.
//!
//! The endpoint is bound before the workload starts (a taken port is bad input, not a run without
//! metrics). A watcher thread connects to the live socket of every instrumented descendant of
//! this process and feeds each stream into its own growing trace; a scrape analyses the traces
//! that received something since their last analysis (at most every [`REANALYSE_EVERY`], else
//! the cached numbers are served), so nothing is analysed while nobody scrapes and the analysis
//! never runs in the workload. The analysis is `tpuscope report`'s, dynamo's logs joined: the
//! scrape reads what the run appended to them since the last one (see `torch_logs::LogCache`).
//! The endpoint closes when the workload exits.

mod series;
mod text;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tpuscope_analyzers::report;

use crate::live_stream::{self, Chunk, Folded};
use crate::torch_logs::LogCache;
use series::{Monotonic, ProcMetrics, ProcState};

/// A scrape re-analyses a process at most this often; in between it serves the last numbers.
const REANALYSE_EVERY: Duration = Duration::from_millis(500);
/// How often the watcher moves arrived bytes into the traces.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// How often the watcher looks for new instrumented descendants.
const SCAN_EVERY: Duration = Duration::from_millis(500);
/// How long the server waits for a request before checking whether it should stop.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

/// The addresses `spec` names: `PORT` or `:PORT` (loopback), `HOST:PORT`, `[V6]:PORT`.
pub(crate) fn parse_addr(spec: &str) -> Result<Vec<SocketAddr>> {
    let spec = spec.trim();
    let port_only = spec.strip_prefix(':').unwrap_or(spec);
    if !port_only.is_empty() && port_only.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port_only
            .parse()
            .map_err(|_| anyhow!("--metrics {spec}: port out of range (0-65535)"))?;
        return Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))]);
    }
    let addrs: Vec<SocketAddr> = spec
        .to_socket_addrs()
        .map_err(|e| anyhow!("--metrics {spec}: expected PORT, :PORT or HOST:PORT ({e})"))?
        .collect();
    if addrs.is_empty() {
        bail!("--metrics {spec}: the host resolves to no address");
    }
    Ok(addrs)
}

/// The running endpoint; dropping it stops serving.
pub struct Exporter {
    /// Where `/metrics` is served.
    pub url: String,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Exporter {
    /// Binds `spec`, prints the address it serves on, and starts watching this process's
    /// instrumented descendants.
    pub fn start(spec: &str) -> Result<Exporter> {
        let (exporter, _) = Exporter::bind(spec)?;
        eprintln!("tpuscope: metrics on {}", exporter.url);
        Ok(exporter)
    }

    /// [`Exporter::start`] without the message; also returns the bound address.
    fn bind(spec: &str) -> Result<(Exporter, SocketAddr)> {
        let addrs = parse_addr(spec)?;
        let server = tiny_http::Server::http(&addrs[..]).map_err(|e| {
            let on: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
            anyhow!("cannot serve metrics on {}: {e}", on.join(", "))
        })?;
        let addr = server
            .server_addr()
            .to_ip()
            .context("the metrics server has no IP address")?;

        let limit = tpuscope_core::live::viewer_limit_bytes().map_err(|e| anyhow::anyhow!(e))?;
        let state = Arc::new(Mutex::new(State::new(
            std::process::id(),
            hostname(),
            limit,
        )));
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("tpuscope-metrics-watch".into())
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        lock(&state).poll();
                        std::thread::sleep(DRAIN_EVERY);
                    }
                })
                .context("cannot start the metrics watcher thread")?
        };
        let serve = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("tpuscope-metrics-http".into())
                .spawn(move || serve(&server, &state, &stop))
                .context("cannot start the metrics server thread")?
        };
        Ok((
            Exporter {
                url: format!("http://{addr}/metrics"),
                stop,
                threads: vec![watcher, serve],
            },
            addr,
        ))
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A panic in one scrape must not take the endpoint down with a poisoned lock.
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn serve(server: &tiny_http::Server, state: &Mutex<State>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let request = match server.recv_timeout(ACCEPT_POLL) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(_) => break,
        };
        let path = request.url().split('?').next().unwrap_or("");
        let get = matches!(
            request.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        );
        let response = if path != "/metrics" {
            plain(
                404,
                "not found: tpuscope serves /metrics\n".into(),
                "text/plain; charset=utf-8",
            )
        } else if !get {
            plain(
                405,
                "only GET /metrics\n".into(),
                "text/plain; charset=utf-8",
            )
        } else {
            let body = lock(state).render();
            plain(200, body, text::CONTENT_TYPE)
        };
        // A scraper that hung up is its own problem.
        let _ = request.respond(response);
    }
}

fn plain(
    status: u16,
    body: String,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut r = tiny_http::Response::from_string(body).with_status_code(status);
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()) {
        r = r.with_header(h);
    }
    r
}

/// This machine's name, for the series that belong to the endpoint rather than to one process.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// One watched process.
struct Proc {
    rx: Option<Receiver<Chunk>>,
    /// The stream folded: its tables and the digest of its events.
    fold: Folded,
    running: bool,
    new_data: bool,
    last_analysis: Option<Instant>,
    metrics: Option<ProcMetrics>,
    /// dynamo's logs as last read.
    logs: LogCache,
}

impl Proc {
    fn drain(&mut self) {
        let Some(rx) = &self.rx else { return };
        loop {
            match rx.try_recv() {
                Ok(Chunk::Data(d)) => {
                    self.new_data = true;
                    if self.fold.feed(&d).is_err() {
                        // Not a trace (or a newer major version): keep what was understood.
                        self.stop();
                        return;
                    }
                }
                Ok(Chunk::End(_)) | Err(TryRecvError::Disconnected) => {
                    self.new_data = true;
                    self.stop();
                    return;
                }
                Err(TryRecvError::Empty) => return,
            }
        }
    }

    fn stop(&mut self) {
        self.rx = None;
        self.running = false;
    }

    fn analyse_if_due(&mut self, pid: u32) {
        if !self.new_data
            || self
                .last_analysis
                .is_some_and(|t| t.elapsed() < REANALYSE_EVERY)
        {
            return;
        }
        let Some((trace, digest, _)) = self.fold.so_far() else {
            return;
        };
        // The report `tpuscope report` gives for this trace: dynamo's logs joined (read on
        // this scrape, from the cache: only what the run appended since the last one).
        let label = format!("pid {pid}");
        let logs = self.logs.find(trace, &label);
        let rep = report::build_one_digested(&label, trace, Some(&digest), logs);
        if let Some(m) = ProcMetrics::from_analysis(trace, &digest, &rep) {
            self.metrics = Some(m);
        }
        self.new_data = false;
        self.last_analysis = Some(Instant::now());
    }
}

struct State {
    /// Whose descendants are watched (this process: the workload is its child).
    root: u32,
    host: String,
    procs: BTreeMap<u32, Proc>,
    last_scan: Option<Instant>,
    guard: Monotonic,
    /// The most of a trace's tables held per process (`TPUSCOPE_LIVE_MAX_MB`).
    limit: u64,
}

impl State {
    fn new(root: u32, host: String, limit: u64) -> State {
        State {
            root,
            host,
            procs: BTreeMap::new(),
            last_scan: None,
            guard: Monotonic::default(),
            limit,
        }
    }

    /// Picks up new instrumented descendants and moves arrived bytes into the traces.
    fn poll(&mut self) {
        if self.last_scan.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
            self.last_scan = Some(Instant::now());
            for (pid, path) in tpuscope_core::live::pids_with_sockets() {
                if self.procs.contains_key(&pid) || !crate::live_ui::descends_from(pid, self.root) {
                    continue;
                }
                // Not listening yet (or gone): the next scan tries again.
                let Ok(stream) = UnixStream::connect(&path) else {
                    continue;
                };
                self.procs.insert(
                    pid,
                    Proc {
                        rx: Some(live_stream::spawn_reader(stream)),
                        // The events log is not shown here: no latest events kept.
                        fold: Folded::with_limit(0, self.limit),
                        running: true,
                        new_data: false,
                        last_analysis: None,
                        metrics: None,
                        logs: LogCache::default(),
                    },
                );
            }
        }
        for p in self.procs.values_mut() {
            p.drain();
        }
    }

    /// The exposition now.
    fn render(&mut self) -> String {
        self.poll();
        for (pid, p) in &mut self.procs {
            p.analyse_if_due(*pid);
        }
        let procs: Vec<ProcState<'_>> = self
            .procs
            .values()
            .filter_map(|p| {
                Some(ProcState {
                    metrics: p.metrics.as_ref()?,
                    running: p.running,
                })
            })
            .collect();
        let mut families = series::families(&self.host, &procs);
        self.guard.apply(&mut families);
        text::encode(&families)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_means_loopback() {
        let lo = |p: u16| vec![SocketAddr::from(([127, 0, 0, 1], p))];
        assert_eq!(parse_addr("9100").unwrap(), lo(9100));
        assert_eq!(parse_addr(":9100").unwrap(), lo(9100));
        assert_eq!(parse_addr("0").unwrap(), lo(0));
        assert_eq!(parse_addr("127.0.0.1:0").unwrap(), lo(0));
        assert_eq!(
            parse_addr("0.0.0.0:9100").unwrap(),
            vec![SocketAddr::from(([0, 0, 0, 0], 9100))]
        );
        assert_eq!(
            parse_addr("[::1]:9").unwrap(),
            vec!["[::1]:9".parse::<SocketAddr>().unwrap()]
        );
    }

    #[test]
    fn bad_addresses_are_refused_with_the_spec_in_the_message() {
        for bad in ["", "70000", ":70000", "host", "1.2.3.4:x", "1.2.3.4"] {
            let e = parse_addr(bad).unwrap_err().to_string();
            assert!(e.contains("--metrics"), "{bad}: {e}");
        }
    }

    #[test]
    fn this_process_descends_from_itself_and_from_its_parent_not_from_a_child_pid() {
        let me = std::process::id();
        assert!(crate::live_ui::descends_from(me, me));
        let parent = crate::live_ui::parent_of(me).unwrap();
        if parent > 1 {
            assert!(crate::live_ui::descends_from(me, parent));
        }
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(crate::live_ui::descends_from(child.id(), me));
        assert!(!crate::live_ui::descends_from(me, child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A stream whose run recorded dynamo's logs: the scrape counts the findings `report` has
    /// for the same trace, the graph break included.
    #[test]
    fn a_scrape_joins_the_logs_the_run_recorded_and_counts_the_findings_of_report() {
        let (bytes, logs) = live_stream::testing::graph_break_stream();
        let mut p = Proc {
            rx: None,
            fold: live_stream::Folded::with_limit(0, 1 << 30),
            running: false,
            new_data: true,
            last_analysis: None,
            metrics: None,
            logs: LogCache::default(),
        };
        for piece in bytes.chunks(4096) {
            p.fold.feed(piece).unwrap();
        }
        p.analyse_if_due(7);
        let m = p.metrics.as_ref().unwrap();
        let text = text::encode(&series::families(
            "me",
            &[ProcState {
                metrics: m,
                running: false,
            }],
        ));

        // `report` on the file, its logs beside it.
        let trace = tpuscope_core::read_trace(&bytes).unwrap();
        let file = logs.with_extension("tps");
        let logs = crate::torch_logs::find(None, Some(&file), Some(&trace), "f");
        let rep = report::build_one("f", &trace, logs);
        for kind in report::FindingKind::ALL {
            let n = rep.findings.iter().filter(|f| f.kind == kind).count();
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with("tpuscope_findings{") && l.contains(&format!("kind=\"{kind}\""))
                })
                .unwrap_or_else(|| panic!("no {kind} sample: {text}"));
            assert!(line.ends_with(&format!("}} {n}")), "{line}, report: {n}");
        }
        // Memory in use is the last sample's, not the allocator's peak.
        for d in &rep.hbm {
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with("tpuscope_hbm_bytes_in_use{")
                        && l.contains(&format!("device=\"{}\"", d.device))
                })
                .unwrap_or_else(|| panic!("no device {}: {text}", d.device));
            assert!(line.ends_with(&format!("}} {}", d.in_use_bytes)), "{line}");
        }
        assert!(
            !text.contains("kind=\"graph_break\"} 0"),
            "no graph break: {text}"
        );
    }

    /// The endpoint before any workload: 200 with the exposition, 404 elsewhere, bind errors.
    #[test]
    fn serves_metrics_404s_other_paths_and_refuses_a_taken_port() {
        use std::io::{Read, Write};
        let (exporter, addr) = Exporter::bind("127.0.0.1:0").unwrap();
        let port = addr.port();
        assert_ne!(port, 0);
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/metrics");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(ok.contains("# TYPE tpuscope_processes gauge"), "{ok}");
        assert!(ok.contains("tpuscope_processes{host="), "{ok}");
        let missing = get("/other");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let e = Exporter::start(&port.to_string())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot serve metrics on"), "{e}");
        drop(exporter);
        // Stopped: nothing listens any more (tiny_http's accept thread closes the listener
        // shortly after the server is dropped).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "still listening 5 s after the drop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod snapshot_tests;
