//! Output files of `export -o` and `merge -o`: a device, a FIFO or stdout is written in place and
//! never replaced nor removed (also when the write fails), a symlink is followed and stays, a
//! failed write leaves the old file, and an input is never the output.
//!
//! Device nodes are made with mknod, which needs root: those tests print why they skip otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{repo_root, show, tpuscope};
use tpuscope_core::TraceWriter;
use tpuscope_core::event::{End, Execute, Manifest, Record};

fn sample() -> PathBuf {
    repo_root().join("sample_traces/real/jax_lr.tps")
}

fn root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if uid != "0" {
        eprintln!("skipped: mknod needs root (uid {uid})");
    }
    uid == "0"
}

/// A character device node `name` in `dir` with the numbers of a /dev node (1,7 /dev/full;
/// 1,3 /dev/null).
fn char_dev(dir: &Path, name: &str, major: u32, minor: u32) -> PathBuf {
    let p = dir.join(name);
    let st = Command::new("mknod")
        .arg(&p)
        .arg("c")
        .arg(major.to_string())
        .arg(minor.to_string())
        .status()
        .unwrap();
    assert!(st.success());
    p
}

fn assert_char_dev(p: &Path, major: u64, minor: u64) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{} is gone: {e}", p.display()));
    assert!(m.file_type().is_char_device(), "{} is {:?}", p.display(), m);
    assert_eq!((m.rdev() >> 8, m.rdev() & 0xff), (major, minor));
}

fn tps(args: &[&str]) -> Output {
    Command::new(tpuscope()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn one_error_line(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", show(o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tpuscope: error:"), "{err}");
    err
}

/// A trace of `n` executes: its Chrome JSON is far larger than a pipe's buffer.
fn big_trace(dir: &Path, n: u64) -> PathBuf {
    let m = Manifest {
        pid: 7,
        host: "vm".into(),
        start_wall_ns: 1_700_000_000_000_000_000,
        start_mono_ns: 1_000,
        command_line: vec!["python".into(), "train.py".into()],
        collector_version: "test".into(),
        ..Manifest::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
    for i in 0..n {
        w.write(&Record::Execute(Execute {
            t_ns: 2_000 + i * 1_000,
            dur_ns: 500,
            executable_id: 1,
            seq: i,
            num_devices: 1,
            ..Default::default()
        }))
        .unwrap();
    }
    w.write(&Record::End(End {
        t_ns: 3_000 + n * 1_000,
        ..Default::default()
    }))
    .unwrap();
    let p = dir.join("big.tps");
    std::fs::write(&p, w.into_inner()).unwrap();
    p
}

#[test]
fn export_to_a_full_device_fails_in_one_line_and_the_node_stays() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let full = char_dev(dir.path(), "full", 1, 7);
    let o = tps(&[
        "export",
        s(&sample()),
        "--format",
        "chrome-json",
        "-o",
        s(&full),
        "--force",
    ]);
    let err = one_error_line(&o);
    assert!(
        err.contains("cannot write") && err.contains("No space left"),
        "{err}"
    );
    assert_char_dev(&full, 1, 7);
    // Nothing else was left in the directory (no temporary file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // A copy of /dev/null takes the export, with or without --force, and stays a device.
    let null = char_dev(dir.path(), "null", 1, 3);
    let sample = sample();
    for force in [false, true] {
        let mut args = vec![
            "export",
            s(&sample),
            "--format",
            "flamegraph-svg",
            "-o",
            s(&null),
        ];
        if force {
            args.push("--force");
        }
        let o = tps(&args);
        assert!(o.status.success(), "{}", show(&o));
        assert_char_dev(&null, 1, 3);
    }
}

#[test]
fn a_symlink_to_stdout_into_a_closed_pipe_stays() {
    let dir = tempfile::tempdir().unwrap();
    let big = big_trace(dir.path(), 50_000);
    let link = dir.path().join("out.json");
    std::os::unix::fs::symlink("/dev/stdout", &link).unwrap();
    let o = Command::new("bash")
        .arg("-c")
        .arg(r#""$0" export "$1" --format chrome-json -o "$2" --force | head -c 10; echo " status=${PIPESTATUS[0]}""#)
        .arg(tpuscope())
        .arg(&big)
        .arg(&link)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("{\""), "{}", show(&o));
    // head closed the pipe after 10 of several MB: the write failed, said in one line.
    assert!(stdout.ends_with(" status=2\n"), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("Broken pipe"), "{err}");
    let m = std::fs::symlink_metadata(&link).unwrap();
    assert!(m.file_type().is_symlink());
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("/dev/stdout"));

    // `-` is stdout too.
    let o = Command::new(tpuscope())
        .args(["export", s(&sample()), "--format", "chrome-json", "-o", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
    assert!(!Path::new("-").exists());
}

#[test]
fn merge_onto_a_device_a_symlink_or_a_fifo_keeps_each_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.tps");
    let o = tps(&["merge", s(&sample()), "-o", s(&plain)]);
    assert!(o.status.success(), "{}", show(&o));
    let merged = std::fs::read(&plain).unwrap();

    // A symlink to a regular file: the file gets the merge, the link stays.
    let real = dir.path().join("real.tps");
    std::fs::write(&real, b"old").unwrap();
    let link = dir.path().join("link.tps");
    std::os::unix::fs::symlink("real.tps", &link).unwrap();
    let o = tps(&["merge", s(&sample()), "-o", s(&link)]);
    let err = one_error_line(&o);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&real).unwrap(), b"old");
    let o = tps(&["merge", s(&sample()), "-o", s(&link), "--force"]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&real).unwrap(), merged);

    // A FIFO: the reader gets the bytes, the FIFO stays.
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = tps(&["merge", s(&sample()), "-o", s(&fifo), "--force"]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(reader.join().unwrap(), merged);
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // Export into a FIFO too.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = tps(&[
        "export",
        s(&sample()),
        "--format",
        "chrome-json",
        "-o",
        s(&fifo),
    ]);
    assert!(o.status.success(), "{}", show(&o));
    let doc: serde_json::Value = serde_json::from_slice(&reader.join().unwrap()).unwrap();
    assert!(doc["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));

    if !root() {
        return;
    }
    let null = char_dev(dir.path(), "null", 1, 3);
    let o = tps(&["merge", s(&sample()), "-o", s(&null), "--force"]);
    assert!(o.status.success(), "{}", show(&o));
    assert_char_dev(&null, 1, 3);
    let full = char_dev(dir.path(), "full", 1, 7);
    let o = tps(&["merge", s(&sample()), "-o", s(&full), "--force"]);
    let err = one_error_line(&o);
    assert!(err.contains("No space left"), "{err}");
    assert_char_dev(&full, 1, 7);
    // A symlink to a device: written through, both stay.
    let to_null = dir.path().join("to-null");
    std::os::unix::fs::symlink(&null, &to_null).unwrap();
    let o = tps(&["merge", s(&sample()), "-o", s(&to_null), "--force"]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        std::fs::symlink_metadata(&to_null)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_char_dev(&null, 1, 3);
}

#[test]
fn an_input_is_never_the_output_also_through_links() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("A.tps");
    std::fs::copy(sample(), &a).unwrap();
    let bytes = std::fs::read(&a).unwrap();
    let hard = dir.path().join("hard.json");
    std::fs::hard_link(&a, &hard).unwrap();
    let soft = dir.path().join("soft.json");
    std::os::unix::fs::symlink("A.tps", &soft).unwrap();
    for out in [&a, &hard, &soft] {
        let o = tps(&[
            "export",
            s(&a),
            "--format",
            "chrome-json",
            "-o",
            s(out),
            "--force",
        ]);
        let err = one_error_line(&o);
        assert!(err.contains("input"), "{err}");
        assert_eq!(std::fs::read(&a).unwrap(), bytes);

        let o = tps(&["merge", s(&a), "-o", s(out), "--force"]);
        let err = one_error_line(&o);
        assert!(err.contains("input"), "{err}");
        assert_eq!(std::fs::read(&a).unwrap(), bytes);
    }
    // A screenshot is not written over a trace the view reads (refused before any window).
    for out in [&a, &hard, &soft] {
        let o = tps(&["view", s(&a), "--screenshot", s(out)]);
        let err = one_error_line(&o);
        assert!(err.contains("input"), "{err}");
        assert_eq!(std::fs::read(&a).unwrap(), bytes);
    }
    // stdout appended to the input is refused too.
    let o = Command::new("bash")
        .arg("-c")
        .arg(r#""$0" export "$1" --format chrome-json -o - >> "$1""#)
        .arg(tpuscope())
        .arg(&a)
        .output()
        .unwrap();
    let err = one_error_line(&o);
    assert!(err.contains("input"), "{err}");
    assert_eq!(std::fs::read(&a).unwrap(), bytes);
    // Only A.tps and the two links: no temporary file left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

#[test]
fn a_failed_export_leaves_the_existing_file_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    std::fs::write(&out, b"precious").unwrap();
    let bogus = dir.path().join("bogus.tps");
    std::fs::write(&bogus, b"not a trace\n").unwrap();
    let o = tps(&[
        "export",
        s(&bogus),
        "--format",
        "chrome-json",
        "-o",
        s(&out),
        "--force",
    ]);
    one_error_line(&o);
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    // A directory is not an output.
    let o = tps(&[
        "export",
        s(&sample()),
        "--format",
        "chrome-json",
        "-o",
        s(dir.path()),
        "--force",
    ]);
    let err = one_error_line(&o);
    assert!(err.contains("is a directory"), "{err}");
}
