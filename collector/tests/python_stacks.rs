//! Python stack capture, end to end: CPython 3.11, 3.12 and 3.13 load the built collector with
//! ctypes and run the scripts in `tests/py/` (GIL held → C-API reader, GIL released → direct
//! reader, a native thread without Python state, 8 threads at once, the compile-request hand-off).
//! 3.11 is required; 3.12 and 3.13 are skipped with a message when absent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{collector_so, env_cpu_plugin, env_python, trace_in};

const VERSIONS: &[(&str, bool)] = &[("3.11", true), ("3.12", false), ("3.13", false)];

/// `python3.X`: $TPUSCOPE_PYTHON3X, else pyenv's `/root/.pyenv/versions/3.X.*`, else PATH.
fn find_python(minor: &str) -> Option<PathBuf> {
    let var = format!("TPUSCOPE_PYTHON{}", minor.replace('.', ""));
    if let Some(p) = std::env::var_os(&var) {
        return Some(PathBuf::from(p));
    }
    let exe = format!("python{minor}");
    let roots = [
        std::env::var_os("PYENV_ROOT").map(PathBuf::from),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")),
        Some(PathBuf::from("/root/.pyenv")),
    ];
    for root in roots.into_iter().flatten() {
        let Ok(entries) = std::fs::read_dir(root.join("versions")) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix(minor)
                    .is_some_and(|rest| rest.starts_with('.') && !rest.contains('t'))
            })
            .map(|e| e.path().join("bin").join(&exe))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        if let Some(p) = found.pop() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(&exe))
        .find(|p| p.is_file())
}

/// The interpreters to test; a missing required one fails the test.
fn pythons() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for (minor, required) in VERSIONS {
        match find_python(minor) {
            Some(p) => out.push((minor.to_string(), p)),
            None if *required => panic!(
                "python{minor} not found (set TPUSCOPE_PYTHON{} or install it with pyenv)",
                minor.replace('.', "")
            ),
            None => println!("python{minor} not found: skipping it"),
        }
    }
    out
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// Runs a script under `python` with a time limit; returns its stdout, panicking on failure.
fn run(python: &Path, args: &[&str], limit: Duration) -> String {
    run_with(python, args, &[], limit).0
}

/// `collector/python`: the agent and its sitecustomize.
fn agent_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Like `run`, with extra environment; returns (stdout, stderr).
fn run_with(
    python: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (String, String) {
    let mut cmd = Command::new(python);
    cmd.args(args)
        .env("TPUSCOPE_QUIET", "1")
        .env_remove("PYTHONPATH")
        .env_remove("TPUSCOPE_COLLECTOR")
        .env_remove("TPUSCOPE_SETUP");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{} {args:?} hung (> {limit:?}); stdout:\n{}\nstderr:\n{}",
                python.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}); stdout:\n{stdout}\nstderr:\n{stderr}",
        python.display(),
        out.status,
    );
    (stdout, stderr)
}

#[test]
fn capture_paths_agree_on_every_python() {
    let so = collector_so();
    for (minor, py) in pythons() {
        let out = run(
            &py,
            &[
                script("capture_paths.py").to_str().unwrap(),
                so.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        );
        assert!(out.contains("OK capture_paths"), "python{minor}: {out}");
        println!("python{minor}: {}", out.trim());
    }
}

#[test]
fn concurrent_captures_without_the_gil() {
    let so = collector_so();
    for (minor, py) in pythons() {
        let out = run(
            &py,
            &[
                script("capture_threads.py").to_str().unwrap(),
                so.to_str().unwrap(),
                "3",
            ],
            Duration::from_secs(90),
        );
        assert!(out.contains("OK capture_threads"), "python{minor}: {out}");
        println!("python{minor}: {}", out.trim());
    }
}

#[test]
fn capture_cost_per_stack() {
    let so = collector_so();
    for (_, py) in pythons() {
        let out = run(
            &py,
            &[
                script("bench_capture.py").to_str().unwrap(),
                so.to_str().unwrap(),
                "2000",
            ],
            Duration::from_secs(120),
        );
        for line in out.lines().filter(|l| l.starts_with("BENCH")) {
            // Printed for the record (a debug build when run under `cargo test`); a stack must
            // never cost a millisecond.
            println!("{line}");
            for ns in line
                .split_whitespace()
                .filter_map(|kv| kv.split_once("_ns="))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
            {
                assert!(ns < 1_000_000, "{line}");
            }
        }
    }
}

#[test]
fn agent_wraps_jax_compile_requests() {
    let so = collector_so();
    let agent = agent_dir();
    let plugin = env_cpu_plugin("jax");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.tps");
    let names = format!("tpuscope:{}", so.display());
    let (out, err) = run_with(
        &env_python("jax"),
        &[script("agent_jax.py").to_str().unwrap()],
        &[
            ("PYTHONPATH", agent.to_str().unwrap()),
            ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
            ("PJRT_NAMES_AND_LIBRARY_PATHS", &names),
            ("JAX_PLATFORMS", "tpuscope"),
            ("TPUSCOPE_REAL_PLUGIN", plugin.to_str().unwrap()),
            ("TPUSCOPE_OUT", trace.to_str().unwrap()),
        ],
        Duration::from_secs(120),
    );
    assert!(out.contains("OK agent_jax"), "{out}\n{err}");
    assert!(!err.contains("tpuscope:"), "the agent complained: {err}");
    // "OK agent_jax <file> <line of user_step's jit call>"
    let ok = out.lines().find(|l| l.starts_with("OK agent_jax")).unwrap();
    let mut words = ok.split_whitespace().skip(2);
    let (file, line) = (
        words.next().unwrap(),
        words.next().unwrap().parse::<u32>().unwrap(),
    );

    let t = tpuscope_core::reader::read_trace_file(&trace).unwrap();
    assert_eq!(
        t.manifest.as_ref().map(|m| m.frontend.as_str()),
        Some("jax")
    );
    let stacks: Vec<Vec<(String, u32, String)>> = t
        .events
        .iter()
        .filter_map(|r| match r {
            tpuscope_core::event::Record::Compile(c) => Some(c.stack),
            _ => None,
        })
        .map(|id| {
            t.stacks
                .get(&id)
                .map(|s| {
                    s.frames
                        .iter()
                        .map(|f| {
                            let file = t.string(f.file).to_string();
                            (file, f.line, t.string(f.function).to_string())
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    assert!(!stacks.is_empty(), "no compile recorded");
    // Every compile (arange, the jit, sum) was asked for by this script: each has its stack.
    for s in &stacks {
        assert!(
            s.iter().any(|f| f.0 == file),
            "a compile without the script's frames: {s:?}"
        );
        assert!(
            !s.iter().any(|f| f.0.contains("tpuscope_agent")),
            "agent frames kept: {s:?}"
        );
    }
    let mine: Vec<_> = stacks
        .iter()
        .filter(|s| s.iter().any(|f| f.2 == "user_step"))
        .collect();
    assert_eq!(mine.len(), 1, "compiles from user_step: {stacks:?}");
    let user: Vec<(u32, &str)> = mine[0]
        .iter()
        .filter(|f| f.0 == file)
        .map(|f| (f.1, f.2.as_str()))
        .collect();
    assert_eq!(user[0], (line, "user_step"), "{:?}", mine[0]);
    assert_eq!(user[1].1, "outer");
    assert_eq!(user[2].1, "<module>");
    println!("compile stack of user_step: {:?}", mine[0]);
}

#[test]
fn agent_marks_steps_on_stand_in_frontends() {
    let so = collector_so();
    let agent = agent_dir();
    for (minor, py) in pythons() {
        let (out, err) = run_with(
            &py,
            &[script("agent_fake_frontends.py").to_str().unwrap()],
            &[
                ("PYTHONPATH", agent.to_str().unwrap()),
                ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
            ],
            Duration::from_secs(60),
        );
        assert!(
            out.contains("OK agent_fake_frontends"),
            "python{minor}: {out}\n{err}"
        );
        assert!(
            !err.contains("tpuscope:"),
            "python{minor}: the agent complained: {err}"
        );
    }
}

#[test]
fn sitecustomize_chains_never_raises_and_is_cheap() {
    let so = collector_so();
    let agent = agent_dir();
    let (_, py) = pythons().into_iter().next().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // Another sitecustomize further on the path (and a second copy of ours before it, which
    // must be skipped, not run twice or looped on).
    let other = tmp.path().join("other");
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::write(other.join("sitecustomize.py"), "print('OTHER-SITE')\n").unwrap();
    std::fs::copy(
        agent.join("sitecustomize.py"),
        copy.join("sitecustomize.py"),
    )
    .unwrap();
    // A stand-in `jax` package: importing it makes the agent load the collector.
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(fake.join("jax")).unwrap();
    std::fs::write(fake.join("jax/__init__.py"), "").unwrap();
    let path = std::env::join_paths([&agent, &copy, &other, &fake]).unwrap();
    let path = path.to_str().unwrap();
    let code = "import sys; print('agent', 'tpuscope_agent' in sys.modules)";

    let (out, err) = run_with(
        &py,
        &["-c", code],
        &[
            ("PYTHONPATH", path),
            ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out, "OTHER-SITE\nagent True\n", "stderr: {err}");
    assert!(err.is_empty(), "{err}");

    // A collector that cannot load: one `tpuscope:` line, and the program runs on.
    let (out, err) = run_with(
        &py,
        &["-c", "import jax; print('survived')"],
        &[
            ("PYTHONPATH", path),
            ("TPUSCOPE_COLLECTOR", "/nonexistent/libx.so"),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out, "OTHER-SITE\nsurvived\n");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("tpuscope: cannot load the collector"),
        "{err}"
    );

    // A next sitecustomize that raises: reported in one line, the program runs on.
    std::fs::write(other.join("sitecustomize.py"), "raise ValueError('boom')\n").unwrap();
    let (out, err) = run_with(
        &py,
        &["-c", "print('survived')"],
        &[
            ("PYTHONPATH", path),
            ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out, "survived\n");
    assert_eq!(
        err.trim(),
        "tpuscope: error in the next sitecustomize: ValueError: boom"
    );

    // Start-up cost, as Python measures imports (microseconds, cumulative); the best of 5 runs,
    // since other tests load both cores meanwhile.
    let us = (0..5)
        .map(|_| {
            let (_, err) = run_with(
                &py,
                &["-X", "importtime", "-c", "pass"],
                &[
                    ("PYTHONPATH", agent.to_str().unwrap()),
                    ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
                ],
                Duration::from_secs(30),
            );
            err.lines()
                .map(|l| l.split('|').collect::<Vec<_>>())
                .find(|cols| cols.len() == 3 && cols[2].trim() == "sitecustomize")
                .and_then(|cols| cols[1].trim().parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no sitecustomize line in -X importtime output:\n{err}"))
        })
        .min()
        .unwrap();
    println!("sitecustomize + agent start-up: {us} us");
    assert!(us < 50_000, "sitecustomize took {us} us");
}

fn frontend_of(t: &tpuscope_core::reader::Trace) -> &str {
    t.manifest
        .as_ref()
        .map(|m| m.frontend.as_str())
        .unwrap_or("")
}

#[test]
fn agent_registers_the_collector_as_torch_xla_plugin() {
    let so = collector_so();
    let agent = agent_dir();
    let plugin = env_cpu_plugin("torch_xla");
    let out_dir = tempfile::tempdir().unwrap();
    let (out, err) = run_with(
        &env_python("torch_xla"),
        &[script("agent_torch_xla.py").to_str().unwrap()],
        &[
            ("PYTHONPATH", agent.to_str().unwrap()),
            ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
            ("TPUSCOPE_SETUP", "torch_xla"),
            ("PJRT_DEVICE", "TPUSCOPE"),
            ("TPUSCOPE_REAL_PLUGIN", plugin.to_str().unwrap()),
            ("TPUSCOPE_OUT", out_dir.path().to_str().unwrap()),
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains("OK agent_torch_xla"), "{out}\n{err}");
    assert!(!err.contains("tpuscope:"), "the agent complained: {err}");
    assert_eq!(frontend_of(&trace_in(out_dir.path())), "torch_xla");
}

#[test]
fn agent_starts_the_torch_tpu_device_on_the_stand_in() {
    let so = collector_so();
    let agent = agent_dir();
    let plugin = env_cpu_plugin("torch_tpu");
    let out_dir = tempfile::tempdir().unwrap();
    let (out, err) = run_with(
        &env_python("torch_tpu"),
        &[script("agent_torch_tpu.py").to_str().unwrap()],
        &[
            ("PYTHONPATH", agent.to_str().unwrap()),
            ("TPUSCOPE_COLLECTOR", so.to_str().unwrap()),
            ("TPUSCOPE_SETUP", "torch_tpu"),
            ("TPU_LIBRARY_PATH", so.to_str().unwrap()),
            ("TPUSCOPE_REAL_PLUGIN", plugin.to_str().unwrap()),
            ("TPUSCOPE_ROLE", "standin"),
            ("TPUSCOPE_OUT", out_dir.path().to_str().unwrap()),
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains("OK agent_torch_tpu"), "{out}\n{err}");
    assert!(!err.contains("tpuscope: "), "the agent complained: {err}");
    // torch_tpu loads its plugin while `import torch` autoloads it: the frontend must already
    // be known then, since the manifest is written at that moment.
    let t = trace_in(out_dir.path());
    assert_eq!(frontend_of(&t), "torch_tpu");
    let steps: Vec<(String, u64)> = t
        .events
        .iter()
        .filter_map(|r| match r {
            tpuscope_core::event::Record::Step(s) => Some((s.marker.clone(), s.number)),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("optimizer.step".to_string(), 1),
            ("optimizer.step".to_string(), 2)
        ]
    );
}
