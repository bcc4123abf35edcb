//! The cache of read traces (`cli/src/digest_cache.rs`): a second `report` of a long trace reads
//! the cache and says exactly what the first said; a cache that is damaged, stale or not ours
//! is never believed nor harmed, and a trace under the size floor or with the cache off leaves
//! nothing behind. The floor is set to 0 here so that a small real trace stands in for a long one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{repo_root, show, tpuscope};

fn report(trace: &Path, cache_home: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(tpuscope());
    c.arg("report")
        .arg(trace)
        .args(["--format", "json"])
        .env("XDG_CACHE_HOME", cache_home)
        .env("TPUSCOPE_DIGEST_CACHE_MIN_MB", "0")
        .env_remove("TPUSCOPE_DIGEST_CACHE");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    out
}

fn cache_files(cache_home: &Path) -> Vec<PathBuf> {
    let dir = cache_home.join("tpuscope/digests");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Sets a file's modification time to `secs` ago.
fn age(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs))
        .unwrap();
}

/// A trace copied into `dir` and reported once with the cache in `dir/cache`: the cache home,
/// the trace, the report and the one cache file it wrote.
fn reported_once(dir: &Path) -> (PathBuf, PathBuf, Output, PathBuf) {
    let home = dir.join("cache");
    let trace = trace_in(dir);
    let first = report(&trace, &home, &[]);
    let files = cache_files(&home);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files[0].clone();
    (home, trace, first, file)
}

/// A copy of a real trace in `dir`, so its times and inode are the test's.
fn trace_in(dir: &Path) -> PathBuf {
    let trace = dir.join("run.tps");
    std::fs::copy(repo_root().join("sample_traces/real/jax_lr.tps"), &trace).unwrap();
    trace
}

#[test]
fn a_second_report_reads_the_cache_and_says_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (home, trace, first, file) = reported_once(dir.path());
    let saved = std::fs::read(&file).unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let written = inode(&file);

    let second = report(&trace, &home, &[]);
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(second.stderr, first.stderr);
    // Read, not written again (a cache file is written to a new file renamed into place).
    assert_eq!(inode(&file), written);
    assert_eq!(std::fs::read(&file).unwrap(), saved);

    // The same as with no cache at all.
    let off = report(&trace, &home, &[("TPUSCOPE_DIGEST_CACHE", "0")]);
    assert_eq!(off.stdout, first.stdout);
}

/// A merged job file's hosts are read, analysed and kept one at a time: the cache is written
/// host by host, read back host by host, and says what the trace says; a host's bytes
/// damaged in the cache send the report back to the trace, and the cache is written anew.
#[test]
fn a_job_file_is_kept_and_read_back_host_by_host() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("cache");
    let trace = dir.path().join("job.tps");
    std::fs::copy(
        repo_root().join("sample_traces/golden/v1.1-merged.tps"),
        &trace,
    )
    .unwrap();
    let first = report(&trace, &home, &[]);
    let files = cache_files(&home);
    assert_eq!(files.len(), 1, "{files:?}");
    let saved = std::fs::read(&files[0]).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(json["traces"].as_array().unwrap().len(), 2, "{json}");

    let second = report(&trace, &home, &[]);
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(second.stderr, first.stderr);
    assert_eq!(std::fs::read(&files[0]).unwrap(), saved);
    let off = report(&trace, &home, &[("TPUSCOPE_DIGEST_CACHE", "0")]);
    assert_eq!(off.stdout, first.stdout);

    // A byte of the first host's part changed: its own sum catches it.
    let mut damaged = saved.clone();
    damaged[200] ^= 0x04;
    std::fs::write(&files[0], &damaged).unwrap();
    let again = report(&trace, &home, &[]);
    assert_eq!(again.stdout, first.stdout);
    assert_eq!(std::fs::read(&files[0]).unwrap(), saved);
}

#[test]
fn a_damaged_or_stale_cache_is_read_past_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (home, trace, first, file) = reported_once(dir.path());
    let saved = std::fs::read(&file).unwrap();

    // A byte changed in the middle, then the file cut: the trace is read again and the cache
    // written anew, the same bytes as before.
    let mut damaged = saved.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x10;
    for bytes in [damaged, saved[..saved.len() / 3].to_vec()] {
        std::fs::write(&file, bytes).unwrap();
        let again = report(&trace, &home, &[]);
        assert_eq!(again.stdout, first.stdout);
        assert_eq!(std::fs::read(&file).unwrap(), saved);
    }

    // The trace changed since (a new modification time): not believed, written anew.
    age(&trace, 3600);
    let again = report(&trace, &home, &[]);
    assert_eq!(again.stdout, first.stdout);
    let rewritten = std::fs::read(&file).unwrap();
    assert_ne!(rewritten, saved, "the stamp is the trace's new one");
    assert_eq!(cache_files(&home).len(), 1);
}

#[test]
fn what_is_not_ours_at_the_cache_path_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (home, trace, first, file) = reported_once(dir.path());
    std::fs::remove_file(&file).unwrap();
    // A directory where the cache file would go.
    std::fs::create_dir(&file).unwrap();
    std::fs::write(file.join("keep"), b"mine").unwrap();
    let again = report(&trace, &home, &[]);
    assert_eq!(again.stdout, first.stdout);
    assert_eq!(std::fs::read(file.join("keep")).unwrap(), b"mine");
    // No temporary file left behind.
    assert_eq!(cache_files(&home), vec![file]);
}

#[test]
fn a_small_trace_or_the_cache_off_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace_in(dir.path());
    let home = dir.path().join("off");
    report(&trace, &home, &[("TPUSCOPE_DIGEST_CACHE", "0")]);
    assert!(!home.exists());
    let home = dir.path().join("floor");
    // The default floor (32 MB) is far above the trace.
    report(&trace, &home, &[("TPUSCOPE_DIGEST_CACHE_MIN_MB", "")]);
    assert!(!home.exists());
}

#[test]
fn the_cache_keeps_to_its_size_by_dropping_the_least_recently_used() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("cache");
    let traces: Vec<PathBuf> = (0..2)
        .map(|i| {
            let d = dir.path().join(format!("t{i}"));
            std::fs::create_dir(&d).unwrap();
            trace_in(&d)
        })
        .collect();
    let cap = [("TPUSCOPE_DIGEST_CACHE_MB", "1")];
    report(&traces[0], &home, &cap);
    let first = cache_files(&home).remove(0);
    let one = std::fs::metadata(&first).unwrap().len();
    assert!(one < 1 << 18, "{one} bytes");
    // An old cache file that, with the next one, takes the cache past 1 MB; and a file not
    // named as ours, larger still.
    let digests = home.join("tpuscope/digests");
    let old = digests.join("0000000000000000.digest");
    std::fs::write(&old, vec![0u8; (1 << 20) - one as usize + 1]).unwrap();
    age(&old, 3600);
    let foreign = digests.join("notes.txt");
    std::fs::write(&foreign, vec![b'x'; 2 << 20]).unwrap();

    report(&traces[1], &home, &cap);
    assert!(!old.exists(), "the least recently used goes");
    assert!(first.exists(), "the others stay");
    assert!(foreign.exists(), "what is not ours stays");
    assert_eq!(cache_files(&home).len(), 3, "{:?}", cache_files(&home));
}

/// `view` keeps its read (with the window's lanes) in a file of its own: a second view of the
/// same trace reads it and draws the same picture, and the report's cache is another file.
#[test]
fn a_second_view_reads_its_own_cache_and_draws_the_same() {
    if !common::have_xvfb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("cache");
    let trace = trace_in(dir.path());
    let view = |png: &Path| {
        let out = Command::new("xvfb-run")
            .args(["-a", "-s", "-screen 0 1600x1000x24"])
            .arg(tpuscope())
            .arg("view")
            .arg(&trace)
            .args(["--tab", "timeline", "--screenshot"])
            .arg(png)
            .env("LIBGL_ALWAYS_SOFTWARE", "1")
            .env("XDG_CACHE_HOME", &home)
            .env("TPUSCOPE_DIGEST_CACHE_MIN_MB", "0")
            .env_remove("TPUSCOPE_DIGEST_CACHE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
    };
    let (first, second) = (dir.path().join("1.png"), dir.path().join("2.png"));
    view(&first);
    let files = cache_files(&home);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with(".view"), "{files:?}");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let written = inode(&files[0]);
    view(&second);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&second).unwrap()
    );
    // Read, not written again (a cache file is written to a new file renamed into place).
    assert_eq!(inode(&files[0]), written);
    assert_eq!(cache_files(&home), files);

    // The report's read is kept apart, and says what it says without the view's.
    let with = report(&trace, &home, &[]);
    assert_eq!(cache_files(&home).len(), 2);
    let without = report(&trace, &home, &[("TPUSCOPE_DIGEST_CACHE", "0")]);
    assert_eq!(with.stdout, without.stdout);
}
