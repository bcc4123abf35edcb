//! The `pip install tpuscope` wheel and the GitHub Actions recipe (docs/ci/github-actions.yml),
//! for real: scripts/build-wheel.sh builds the wheel (incrementally, in target/wheel; its
//! tpuscope binary unoptimized, the packaging the same as a release wheel's), it is
//! installed next to JAX in fresh Python 3.11 venvs, and only the venv's `tpuscope` runs (no
//! target/ on PATH). The recipe's `run:` steps are executed in order with bash, offline: pip
//! finds tpuscope and the workload's pinned dependencies in local directories only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use common::{compiles, repo_root, show, target_dir, traces_in, venv_python};
use tpuscope_analyzers::report::Report;

/// The newest glibc symbol version a manylinux_2_28 wheel may need.
const GLIBC_MAX: (u32, u32) = (2, 28);

/// The workload's pinned dependencies: the `jax` test env's own pins (scripts/envs/jax.txt)
/// before its outside-code corpus part — jax, jaxlib, the CPU plugin. The examples import
/// nothing else, and flax, transformers, tensorstore… installed in four venvs cost CI minutes.
fn jax_requirements() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let all = std::fs::read_to_string(repo_root().join("scripts/envs/jax.txt")).unwrap();
        let pins: Vec<&str> = all
            .lines()
            .skip_while(|l| l.starts_with('#'))
            .take_while(|l| !l.starts_with('#'))
            .filter(|l| !l.trim().is_empty())
            .collect();
        for name in ["jax==", "jaxlib==", "lammps-jax-pjrt-cpu=="] {
            assert!(
                pins.iter().any(|p| p.starts_with(name)),
                "scripts/envs/jax.txt: no {name} pin before the corpus part: {pins:?}"
            );
        }
        let dir = target_dir().parent().unwrap().join("wheel");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("workload-requirements.txt");
        std::fs::write(&p, pins.join("\n") + "\n").unwrap();
        p
    })
    .clone()
}

struct Built {
    wheel: PathBuf,
    /// Wheels of the JAX pins, so venvs install offline (`--no-index --find-links`).
    wheelhouse: PathBuf,
}

/// Builds the wheel once per test process (never reused from an earlier run: a persistent
/// CARGO_TARGET_DIR makes it incremental instead) and fills the wheelhouse.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = target_dir().parent().unwrap().join("wheel");
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/build-wheel.sh"))
            .env("CARGO_TARGET_DIR", &target)
            // The packaging is what is under test: an unoptimized tpuscope binary halves the
            // build (254 s against 485 s on 2 cores); the embedded collector, which runs in
            // the workload, is the release build either way.
            .env("TPUSCOPE_WHEEL_PROFILE", "dev")
            .env_remove("TPUSCOPE_WHEEL_OUT")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "build-wheel.sh failed\n{}",
            show(&out)
        );
        let stdout = String::from_utf8(out.stdout.clone()).unwrap();
        let wheel = PathBuf::from(stdout.lines().last().unwrap_or_default());
        assert!(
            wheel.is_file(),
            "build-wheel.sh printed no wheel\n{}",
            show(&out)
        );
        eprintln!(
            "wheel: built {} in {:.1} s",
            wheel.display(),
            t0.elapsed().as_secs_f64()
        );

        let wheelhouse = target.join("wheelhouse");
        let t0 = Instant::now();
        let py = venv_python("jax");
        let download = |online: bool| {
            let mut c = Command::new(&py);
            c.args(["-m", "pip", "download", "--disable-pip-version-check", "-q"])
                .arg("--dest")
                .arg(&wheelhouse)
                .arg("-r")
                .arg(jax_requirements());
            if !online {
                c.arg("--no-index").arg("--find-links").arg(&wheelhouse);
            }
            c.output().unwrap()
        };
        // Offline when the wheelhouse already has every pin; else from the index (pip's cache).
        if !download(false).status.success() {
            let out = download(true);
            assert!(out.status.success(), "pip download failed\n{}", show(&out));
        }
        eprintln!(
            "wheel: wheelhouse ready in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        Built { wheel, wheelhouse }
    })
}

/// `PATH` for commands that must use the venv's tpuscope: the venv first, then the system
/// directories, and nothing of this workspace's target/.
fn venv_path(venv: &Path) -> String {
    let target = target_dir().parent().unwrap().to_path_buf();
    let mut dirs = vec![venv.join("bin")];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p).filter(|d| !d.starts_with(&target)));
    }
    let p = std::env::join_paths(dirs).unwrap().into_string().unwrap();
    assert!(
        !p.contains(target.to_str().unwrap()),
        "PATH still names {}: {p}",
        target.display()
    );
    p
}

/// A fresh Python 3.11 venv (the interpreter of the pinned `jax` env) without packages.
fn fresh_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let out = Command::new(venv_python("jax"))
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python -m venv failed\n{}",
        show(&out)
    );
    let version = Command::new(venv.join("bin/python"))
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), "3.11");
    venv
}

/// The environment every venv command gets: pip offline on the local wheel and wheelhouse, a
/// private cache for the unpacked collector and agent, nothing that points tpuscope elsewhere.
fn venv_command(program: &Path, venv: &Path, cache: &Path) -> Command {
    let b = built();
    let mut c = Command::new(program);
    c.env("PATH", venv_path(venv))
        .env("VIRTUAL_ENV", venv)
        .env("PIP_NO_INDEX", "1")
        .env(
            "PIP_FIND_LINKS",
            format!(
                "{} {}",
                b.wheel.parent().unwrap().display(),
                b.wheelhouse.display()
            ),
        )
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("XDG_CACHE_HOME", cache);
    for k in [
        "TPUSCOPE_COLLECTOR",
        "TPUSCOPE_AGENT_DIR",
        "TPUSCOPE_PYTHON",
        "TPUSCOPE_OUT",
        "PYTHONPATH",
        "PYTHONHOME",
        // cargo test points this at target/: nothing of the dev build may leak in.
        "LD_LIBRARY_PATH",
    ] {
        c.env_remove(k);
    }
    c
}

/// The newest `GLIBC_x.y` version an ELF file needs (`objdump -T`).
fn newest_glibc(elf: &Path) -> (u32, u32) {
    let out = Command::new("objdump").arg("-T").arg(elf).output().unwrap();
    assert!(
        out.status.success(),
        "objdump -T {}\n{}",
        elf.display(),
        show(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let newest = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next().flatten().unwrap_or(0)))
        })
        .max();
    newest.unwrap_or_else(|| panic!("no GLIBC versions in {}", elf.display()))
}

/// Strong undefined dynamic symbols without a version: they bind to whatever the running glibc
/// has, so one that glibc 2.28 lacks fails the load there without showing in `newest_glibc`.
fn unversioned_undefined(elf: &Path) -> Vec<String> {
    let out = Command::new("objdump").arg("-T").arg(elf).output().unwrap();
    assert!(
        out.status.success(),
        "objdump -T {}\n{}",
        elf.display(),
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5 && f[2] == "*UND*").then(|| f[4].to_string())
        })
        .collect()
}

/// The libraries an ELF file names as NEEDED (`readelf -d`).
fn needed_libs(elf: &Path) -> Vec<String> {
    let out = Command::new("readelf").arg("-d").arg(elf).output().unwrap();
    assert!(
        out.status.success(),
        "readelf -d {}\n{}",
        elf.display(),
        show(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect()
}

/// What the manylinux policy lets a wheel's binaries link against (the GUI dlopens X11 and GL).
const MANYLINUX_LIBS: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
];

fn assert_manylinux_elf(elf: &Path) {
    let glibc = newest_glibc(elf);
    assert!(
        glibc <= GLIBC_MAX,
        "{} needs GLIBC_{}.{}, newer than manylinux_2_28 allows",
        elf.display(),
        glibc.0,
        glibc.1
    );
    let unversioned = unversioned_undefined(elf);
    assert!(
        unversioned.is_empty(),
        "{} has undefined symbols without a version: {unversioned:?}",
        elf.display()
    );
    let needed = needed_libs(elf);
    assert!(!needed.is_empty(), "{}: no NEEDED entries?", elf.display());
    for lib in &needed {
        assert!(
            MANYLINUX_LIBS.contains(&lib.as_str()),
            "{} needs {lib}, outside the manylinux set",
            elf.display()
        );
    }
}

/// `py3-none-manylinux_2_X_x86_64` with X ≤ 28, from the file name and from the WHEEL metadata.
fn assert_wheel_tags(wheel: &Path, venv_python: &Path) {
    let name = wheel.file_name().unwrap().to_str().unwrap();
    let tag = name
        .strip_suffix(".whl")
        .and_then(|s| s.splitn(3, '-').nth(2))
        .unwrap_or_else(|| panic!("not a wheel name: {name}"));
    let minor = tag
        .strip_prefix("py3-none-manylinux_2_")
        .and_then(|s| s.strip_suffix("_x86_64"))
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("wheel tag {tag} is not py3-none-manylinux_2_X_x86_64"));
    assert!(
        minor <= GLIBC_MAX.1,
        "wheel tag {tag} needs a glibc newer than 2.28"
    );
    let out = Command::new(venv_python)
        .args([
            "-c",
            "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nfor n in z.namelist():\n    if n.endswith('.dist-info/WHEEL'):\n        print(z.read(n).decode())",
        ])
        .arg(wheel)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let meta = String::from_utf8_lossy(&out.stdout);
    let tags: Vec<&str> = meta
        .lines()
        .filter_map(|l| l.strip_prefix("Tag: "))
        .collect();
    assert!(
        !tags.is_empty() && tags.iter().all(|t| t.trim() == tag),
        "WHEEL tags {tags:?} differ from the file name's {tag}"
    );
}

/// The collector the venv's tpuscope unpacked into the private cache.
fn unpacked_collector(cache: &Path) -> PathBuf {
    let dir = cache.join("tpuscope");
    let found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path().join("libtpuscope_collector.so"))
        .filter(|p| p.is_file())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "unpacked collectors in {}: {found:?}",
        dir.display()
    );
    found[0].clone()
}

fn example(name: &str) -> PathBuf {
    let p = repo_root().join("examples/jax").join(name);
    assert!(p.is_file(), "{} missing", p.display());
    p
}

#[test]
fn wheel_installs_next_to_jax_and_records_a_trace() {
    let b = built();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let venv = fresh_venv(dir.path());
    let py = venv.join("bin/python");
    assert_wheel_tags(&b.wheel, &py);

    let t0 = Instant::now();
    let out = venv_command(&py, &venv, &cache)
        .args(["-m", "pip", "install", "-q", "tpuscope", "-r"])
        .arg(jax_requirements())
        .output()
        .unwrap();
    assert!(out.status.success(), "pip install failed\n{}", show(&out));
    eprintln!("wheel: venv install in {:.1} s", t0.elapsed().as_secs_f64());

    let tpuscope = venv.join("bin/tpuscope");
    assert!(
        tpuscope.is_file(),
        "the wheel installed no {}",
        tpuscope.display()
    );
    let out = venv_command(&tpuscope, &venv, &cache)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tpuscope {}", env!("CARGO_PKG_VERSION")),
        "the wheel's tpuscope is not this workspace's version"
    );
    assert_manylinux_elf(&tpuscope);

    let traces = dir.path().join("traces");
    let cwd = dir.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let t0 = Instant::now();
    let out = venv_command(&tpuscope, &venv, &cache)
        .current_dir(&cwd)
        .args(["run", "--no-tui", "--out"])
        .arg(format!("{}/", traces.display()))
        .arg("--")
        .arg(&py)
        .arg(example("clean_loop.py"))
        .output()
        .unwrap();
    assert!(out.status.success(), "tpuscope run failed\n{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("RESULT clean_loop"),
        "the workload did not finish\n{}",
        show(&out)
    );
    eprintln!(
        "wheel: clean_loop under tpuscope in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    // No collector next to the binary: the embedded one was unpacked, and it is manylinux too.
    assert!(!venv.join("bin/libtpuscope_collector.so").exists());
    assert_manylinux_elf(&unpacked_collector(&cache));

    let files = traces_in(&traces);
    assert_eq!(files.len(), 1, "{files:?}\n{}", show(&out));
    let trace = tpuscope_core::read_trace_file(&files[0]).unwrap();
    let compiled = compiles(&trace);
    assert!(!compiled.is_empty(), "no compiles in the trace");

    let out = venv_command(&tpuscope, &venv, &cache)
        .arg("report")
        .arg(&files[0])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("jit_train_step")
            || String::from_utf8_lossy(&out.stdout).contains("compile"),
        "text report says nothing of compiles\n{}",
        show(&out)
    );
    let out = venv_command(&tpuscope, &venv, &cache)
        .args(["report", "--format", "json"])
        .arg(&files[0])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let report: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report.compiles.total as usize, compiled.len());
    assert_eq!(report.compiles.recompiles, 0, "clean_loop recompiled?");
}

// ---- the GitHub Actions recipe ----------------------------------------------------------

fn recipe_path() -> PathBuf {
    repo_root().join("docs/ci/github-actions.yml")
}

fn yaml_str<'a>(v: &'a serde_norway::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(|x| x.as_str())
}

/// The steps of the recipe's single job, and that job's `env:`.
fn recipe() -> (Vec<serde_norway::Value>, BTreeMap<String, String>) {
    let text = std::fs::read_to_string(recipe_path()).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let jobs = doc.get("jobs").and_then(|j| j.as_mapping()).expect("jobs:");
    assert_eq!(jobs.len(), 1, "the recipe has one job");
    let job = jobs.values().next().unwrap();
    let env = job
        .get("env")
        .and_then(|e| e.as_mapping())
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        serde_norway::Value::String(s) => s.clone(),
                        other => serde_norway::to_string(other).unwrap().trim().to_string(),
                    };
                    (k.as_str().unwrap().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    let steps = job
        .get("steps")
        .and_then(|s| s.as_sequence())
        .expect("steps:")
        .clone();
    (steps, env)
}

/// What happened to one step.
struct StepRun {
    name: String,
    /// None: a `uses:` step (not run here) or skipped after an earlier failure.
    output: Option<Output>,
}

/// Runs the recipe's `run:` steps in order, as GitHub's runner does (`bash -eo pipefail`, a
/// failed step skips the later ones unless they say `if: always()`), with `TRAIN_SCRIPT` and
/// `REQUIREMENTS` overridden like a caller's own values. Returns the steps and the summary.
fn run_recipe(dir: &Path, train_script: &Path) -> (Vec<StepRun>, String) {
    let (steps, job_env) = recipe();
    for key in ["TRAIN_SCRIPT", "REQUIREMENTS"] {
        assert!(
            job_env.contains_key(key),
            "the recipe's job env lacks {key}"
        );
    }
    let venv = fresh_venv(dir);
    let cache = dir.join("cache");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let summary = dir.join("step_summary.md");
    std::fs::write(&summary, "").unwrap();

    let mut runs = Vec::new();
    let mut failed = false;
    for (i, step) in steps.iter().enumerate() {
        let name = yaml_str(step, "name")
            .or_else(|| yaml_str(step, "uses"))
            .map_or_else(|| format!("step {i}"), String::from);
        let Some(script) = yaml_str(step, "run") else {
            assert!(
                yaml_str(step, "uses").is_some(),
                "{name}: neither run nor uses"
            );
            runs.push(StepRun { name, output: None });
            continue;
        };
        let always = yaml_str(step, "if").is_some_and(|c| c.contains("always()"));
        if failed && !always {
            runs.push(StepRun { name, output: None });
            continue;
        }
        let t0 = Instant::now();
        let mut c = venv_command(Path::new("bash"), &venv, &cache);
        c.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
            .current_dir(&work)
            .envs(&job_env)
            .env("TRAIN_SCRIPT", train_script)
            .env("REQUIREMENTS", jax_requirements())
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("CI", "true");
        let out = c.output().unwrap();
        eprintln!(
            "recipe {}: step {name:?} exit {:?} in {:.1} s",
            train_script.file_name().unwrap().to_string_lossy(),
            out.status.code(),
            t0.elapsed().as_secs_f64()
        );
        failed |= !out.status.success();
        runs.push(StepRun {
            name,
            output: Some(out),
        });
    }
    (runs, std::fs::read_to_string(&summary).unwrap())
}

fn step<'a>(runs: &'a [StepRun], name: &str) -> &'a Output {
    let s = runs
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name:?} in the recipe"));
    s.output
        .as_ref()
        .unwrap_or_else(|| panic!("step {name:?} did not run"))
}

const INSTALL: &str = "Install tpuscope and the workload's dependencies";
const TRAIN: &str = "Train under tpuscope";
const REPORT: &str = "Report and budgets";

/// The recipe keeps the steps a reader copies it for.
#[test]
fn ci_recipe_sets_up_python_and_uploads_the_trace() {
    let (steps, _) = recipe();
    let uses: Vec<&str> = steps.iter().filter_map(|s| yaml_str(s, "uses")).collect();
    let setup = steps
        .iter()
        .find(|s| yaml_str(s, "uses").is_some_and(|u| u.starts_with("actions/setup-python@")))
        .unwrap_or_else(|| panic!("no actions/setup-python step: {uses:?}"));
    let with = setup.get("with").unwrap();
    assert_eq!(yaml_str(with, "python-version"), Some("3.11"));
    let upload = steps
        .iter()
        .find(|s| yaml_str(s, "uses").is_some_and(|u| u.starts_with("actions/upload-artifact@")))
        .unwrap_or_else(|| panic!("no actions/upload-artifact step: {uses:?}"));
    assert_eq!(yaml_str(upload, "if"), Some("always()"));
    assert_eq!(
        yaml_str(upload.get("with").unwrap(), "path"),
        Some("traces/"),
        "the artifact is not the traces directory `tpuscope run --out` writes"
    );

    // docs/ci.md shows the same YAML as the file the tests run.
    let doc = std::fs::read_to_string(repo_root().join("docs/ci.md")).unwrap();
    let block = doc
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```yaml block in docs/ci.md");
    assert_eq!(
        block,
        std::fs::read_to_string(recipe_path()).unwrap(),
        "docs/ci.md's YAML differs from docs/ci/github-actions.yml"
    );
}

#[test]
fn ci_recipe_fails_the_job_on_recompiles_and_writes_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (runs, summary) = run_recipe(dir.path(), &example("lr_python_float.py"));
    let install = step(&runs, INSTALL);
    assert!(install.status.success(), "{}", show(install));
    let train = step(&runs, TRAIN);
    assert!(
        train.status.success(),
        "the workload itself is fine\n{}",
        show(train)
    );
    let report = step(&runs, REPORT);
    assert_eq!(
        report.status.code(),
        Some(1),
        "recompiles=0 must fail on lr_python_float\n{}",
        show(report)
    );

    assert!(summary.starts_with("## tpuscope report: "), "{summary}");
    assert!(summary.contains("### Recompiles"), "{summary}");
    assert!(summary.contains("jit_train_step"), "{summary}");
    let budget_row = summary
        .lines()
        .find(|l| l.starts_with("| recompiles "))
        .unwrap_or_else(|| panic!("no recompiles budget row\n{summary}"));
    assert!(budget_row.contains("EXCEEDED"), "{budget_row}");
}

#[test]
fn ci_recipe_passes_on_a_clean_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (runs, summary) = run_recipe(dir.path(), &example("clean_loop.py"));
    for r in &runs {
        if let Some(out) = &r.output {
            assert!(
                out.status.success(),
                "step {:?} failed\n{}",
                r.name,
                show(out)
            );
        }
    }
    assert!(runs.iter().filter(|r| r.output.is_some()).count() >= 3);
    // What pip installed is the wheel just built.
    let pip = step(&runs, INSTALL);
    let wheel_name = built()
        .wheel
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        String::from_utf8_lossy(&pip.stdout).contains(&wheel_name),
        "pip did not install {wheel_name}\n{}",
        show(pip)
    );
    assert!(summary.starts_with("## tpuscope report: "), "{summary}");
    assert!(summary.contains("### Budgets"), "{summary}");
    for key in ["recompiles", "syncs-per-step"] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {key} ")))
            .unwrap_or_else(|| panic!("no {key} budget row\n{summary}"));
        assert!(row.contains("| ok |") && !row.contains("EXCEEDED"), "{row}");
    }
    assert_eq!(traces_in(&dir.path().join("work/traces")).len(), 1);
}
