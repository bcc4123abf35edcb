//! Inputs that are not traces, or traces followed by endless bytes, or that arrive through a
//! FIFO: every reading command checks the header first, holds bounded memory, and says what is
//! wrong in one line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{repo_root, show, tpuscope};

/// Address space given to a command that must refuse its input after reading 16 bytes: the
/// debug binary and its runtime fit easily, a 2 GiB input read whole does not.
const SMALL_AS: &str = "--as=1073741824";

fn jax_lr() -> PathBuf {
    repo_root().join("sample_traces/real/jax_lr.tps")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tpuscope ARGS` under `prlimit` (when `limit` is given) with a deadline: a command that never
/// ends fails the test instead of hanging it.
fn run_bounded(args: &[&str], limit: Option<&str>, deadline: Duration) -> Output {
    let mut c = match limit {
        Some(l) => {
            let mut c = Command::new("prlimit");
            c.arg(l).arg("--").arg(tpuscope());
            c
        }
        None => Command::new(tpuscope()),
    };
    let child = c
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, deadline, &format!("{args:?}"))
}

fn wait_bounded(mut child: Child, deadline: Duration, what: &str) -> Output {
    use std::io::Read;
    // Drained while it runs: a full pipe would stall the command.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let st = child.wait().unwrap();
            let o = Output {
                status: st,
                stdout: out.join().unwrap(),
                stderr: err.join().unwrap(),
            };
            panic!("{what} still running after {deadline:?}\n{}", show(&o));
        }
        thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// The reading commands, with `input` as their trace (outputs in `dir`).
fn readers(input: &Path, dir: &Path) -> Vec<Vec<String>> {
    let i = input.to_str().unwrap().to_string();
    let json = dir.join("out.json").to_str().unwrap().to_string();
    let merged = dir.join("merged.tps").to_str().unwrap().to_string();
    vec![
        vec![
            "merge".into(),
            jax_lr().to_str().unwrap().into(),
            i.clone(),
            "-o".into(),
            merged,
        ],
        vec!["dump".into(), i.clone()],
        vec!["dump".into(), "--json".into(), i.clone()],
        vec!["report".into(), i.clone()],
        vec![
            "export".into(),
            i,
            "--format".into(),
            "chrome-json".into(),
            "-o".into(),
            json,
        ],
    ]
}

fn assert_one_error_line(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{}", show(out));
    assert_eq!(err.lines().count(), 1, "{}", show(out));
    assert!(
        err.starts_with("tpuscope: error:") && err.contains(needle),
        "{}",
        show(out)
    );
}

#[test]
fn a_2_gib_non_trace_is_refused_from_its_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.tps");
    // Sparse: 2 GiB of zeroes that take no disk.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    for args in readers(&big, dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_bounded(&args, Some(SMALL_AS), Duration::from_secs(60));
        assert_one_error_line(&out, "not a tpuscope trace");
        assert!(stderr(&out).contains("big.tps"), "{}", show(&out));
    }
    assert!(!dir.path().join("out.json").exists());
}

#[test]
fn dev_zero_and_dev_urandom_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for dev in ["/dev/zero", "/dev/urandom"] {
        for args in readers(Path::new(dev), dir.path()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_bounded(&args, Some(SMALL_AS), Duration::from_secs(60));
            assert_one_error_line(&out, "not a tpuscope trace");
        }
    }
}

/// Makes a FIFO and feeds it `bytes` from a thread (once a reader opens it).
fn fifo_with(
    dir: &Path,
    name: &str,
    bytes: impl IntoIterator<Item = Vec<u8>> + Send + 'static,
) -> (PathBuf, thread::JoinHandle<()>) {
    let p = dir.join(name);
    let st = Command::new("mkfifo").arg(&p).status().unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
    let writer_path = p.clone();
    let h = thread::spawn(move || {
        // Blocks until the reader opens the FIFO; a reader that stops early ends the writes.
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&writer_path) else {
            return;
        };
        for chunk in bytes {
            if f.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    (p, h)
}

#[test]
fn a_fifo_carrying_a_trace_reads_as_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = jax_lr();
    let bytes = std::fs::read(&file).unwrap();
    // Each command sees the file, then the same bytes through a FIFO.
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["dump"], ""),
        (vec!["dump", "--json"], ""),
        (vec!["report", "--format", "json"], ""),
        (vec!["export", "--format", "chrome-json", "-o"], "json"),
        (
            vec![
                "export",
                "--format",
                "flamegraph-svg",
                "--flame",
                "sync",
                "-o",
            ],
            "svg",
        ),
    ];
    for (i, (args, ext)) in cases.iter().enumerate() {
        let run = |input: &Path, tag: &str| -> (Output, Vec<u8>) {
            let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let out_file = dir.path().join(format!("{i}-{tag}.{ext}"));
            if ext.is_empty() {
                a.push(input.to_str().unwrap().into());
            } else {
                a.push(out_file.to_str().unwrap().into());
                a.insert(1, input.to_str().unwrap().into());
            }
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            let out = run_bounded(&a, None, Duration::from_secs(120));
            let produced = if ext.is_empty() {
                out.stdout.clone()
            } else {
                std::fs::read(&out_file).unwrap_or_default()
            };
            (out, produced)
        };
        let (from_file, want) = run(&file, "file");
        assert!(from_file.status.success(), "{}", show(&from_file));
        let (fifo, writer) = fifo_with(dir.path(), &format!("p{i}"), [bytes.clone()]);
        let (from_fifo, got) = run(&fifo, "fifo");
        writer.join().unwrap();
        assert!(from_fifo.status.success(), "{args:?}: {}", show(&from_fifo));
        assert!(!want.is_empty(), "{args:?}");
        if args[0] == "report" {
            // The report names its input: compare with the path replaced.
            let f = file.to_str().unwrap();
            let p = fifo.to_str().unwrap();
            let want = String::from_utf8_lossy(&want).replace(f, p);
            assert_eq!(String::from_utf8_lossy(&got), want, "{args:?}");
        } else {
            // A flamegraph's title names its input.
            let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
            let got = String::from_utf8_lossy(&got).replace(&name(&fifo), &name(&file));
            assert!(
                got == String::from_utf8_lossy(&want),
                "{args:?}: FIFO output differs from the file's"
            );
        }
    }
}

/// Peak RSS (VmHWM, kB) of a running process, polled until it exits.
fn run_measuring_peak(args: &[&str], deadline: Duration) -> (Output, u64) {
    let mut child = Command::new(tpuscope())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let start = Instant::now();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Ok(s) = std::fs::read_to_string(&status)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            panic!("{args:?} still running after {deadline:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
    (child.wait_with_output().unwrap(), peak)
}

/// 128 MiB after a valid header, in 1 MiB pieces: `f(i)` makes piece `i`.
fn pieces(f: fn(u64) -> Vec<u8>) -> impl Iterator<Item = Vec<u8>> + Send + 'static {
    let header = tpuscope_core::format::encode_header(1, 0).to_vec();
    std::iter::once(header).chain((0..128u64).map(f))
}

fn garbage(i: u64) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1d ^ (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_header_then_endless_bytes_is_read_in_bounded_memory_until_the_input_ends() {
    let dir = tempfile::tempdir().unwrap();
    // What the old whole-file reader held for this input: at least the 128 MiB themselves.
    const INPUT_KB: u64 = 128 << 10;
    for (name, f) in [
        ("zeroes", (|_| vec![0u8; 1 << 20]) as fn(u64) -> Vec<u8>),
        ("garbage", garbage),
    ] {
        // A frame header right after the file header announcing a long payload makes the
        // reader hold that payload (the format allows 512 MiB) before it can check it: that is
        // the one allowance on top of the resync window.
        let first = f(0);
        let claimed = u64::from(u32::from_le_bytes(first[..4].try_into().unwrap()));
        let allowance_kb = if claimed <= 512 << 20 {
            claimed.min(INPUT_KB << 10) >> 10
        } else {
            0
        };
        let (fifo, writer) = fifo_with(dir.path(), name, pieces(f));
        let (out, peak_kb) =
            run_measuring_peak(&["dump", fifo.to_str().unwrap()], Duration::from_secs(300));
        writer.join().unwrap();
        let err = stderr(&out);
        eprintln!("{name}: peak RSS {peak_kb} kB for {INPUT_KB} kB of input; {err}");
        // The input ended: the read ends, with a cut right after the header and nothing else.
        assert!(out.status.success(), "{name}: {}", show(&out));
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains("was cut at byte 16 of"), "{name}: {err}");
        // The resync window is 32 MiB; the binary and its runtime some tens of MiB.
        assert!(
            peak_kb < (96 << 10) + allowance_kb,
            "{name}: peak RSS {peak_kb} kB (allowance {allowance_kb} kB)"
        );
    }
}

#[test]
fn a_forged_file_of_100k_segments_warns_a_few_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("forged.tps");
    let mut bytes = tpuscope_core::format::encode_header(1, 1).to_vec();
    // Segment{host: "h"}: 100 000 empty host segments.
    for _ in 0..100_000 {
        tpuscope_core::format::encode_frame(
            &mut bytes,
            tpuscope_core::event::SEGMENT_KIND,
            0,
            b"\x12\x01h",
        );
    }
    std::fs::write(&p, &bytes).unwrap();
    let out = run_bounded(
        &["dump", p.to_str().unwrap()],
        None,
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert!(
        err.lines().count() <= 8,
        "{} lines:\n{}",
        err.lines().count(),
        &err[..err.len().min(2000)]
    );
    assert!(err.contains("and 99997 more like this"), "{err}");
    let out = run_bounded(
        &["report", p.to_str().unwrap()],
        None,
        Duration::from_secs(300),
    );
    let err = stderr(&out);
    assert!(err.lines().count() <= 8, "{} lines", err.lines().count());
    assert!(err.contains("more like this"), "{err}");
}

#[test]
fn a_missing_file_names_the_path_and_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.tps");
    for args in readers(&missing, dir.path()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_bounded(&args, None, Duration::from_secs(60));
        assert_one_error_line(&out, "No such file or directory");
        let err = stderr(&out);
        assert_eq!(err.matches("missing.tps").count(), 1, "{err}");
        assert_eq!(err.matches("No such file").count(), 1, "{err}");
    }
}

#[test]
fn a_damaged_header_says_what_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let header = |major: u16, len: u32| {
        let mut b = b"TPUSCOPE".to_vec();
        b.extend_from_slice(&major.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&[0; 64]);
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("major0.tps", header(0, 16), "version field 0.0"),
        ("hdrlen.tps", header(1, 3), "header length field 3"),
        (
            "past.tps",
            header(1, 1 << 20),
            "runs past the end of the file",
        ),
        (
            "short.tps",
            b"TPUSCOPE\x01\x00".to_vec(),
            "ends inside the header",
        ),
        (
            "newer.tps",
            header(7, 16),
            "newer than this tpuscope understands",
        ),
    ];
    for (name, bytes, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        for args in readers(&p, dir.path()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_bounded(&args, None, Duration::from_secs(60));
            assert_one_error_line(&out, needle);
            if name != "newer.tps" {
                assert!(
                    stderr(&out).contains("damaged tpuscope header"),
                    "{}",
                    show(&out)
                );
            }
        }
    }
}
