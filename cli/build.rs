//! Embeds the Python agent (collector/python) into the binary so a user who only has the
//! `tpuscope` binary can still run workloads under it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "py") {
            out.push(p);
        }
    }
}

/// With the `embed-collector` feature, builds the collector cdylib (release) into OUT_DIR so the
/// binary can carry it: `cargo install` installs only the binary.
fn embed_collector(manifest_dir: &Path, out_dir: &Path) -> String {
    if std::env::var_os("CARGO_FEATURE_EMBED_COLLECTOR").is_none() {
        return "/// No collector embedded (feature `embed-collector` off).\npub const EMBEDDED_COLLECTOR: Option<&[u8]> = None;\n".into();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = out_dir.join("collector-build");
    let workspace = manifest_dir.join("../Cargo.toml");
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../collector/src").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../core/src").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../pjrt/src").display()
    );
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "tpuscope-collector",
            "--lib",
            "--manifest-path",
        ])
        .arg(&workspace)
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .status();
    let so = target_dir.join("release/libtpuscope_collector.so");
    match status {
        Ok(s) if s.success() && so.is_file() => format!(
            "/// The collector library, built with this binary.\npub const EMBEDDED_COLLECTOR: Option<&[u8]> = Some(include_bytes!({:?}));\n",
            so.display().to_string()
        ),
        other => panic!("embed-collector: building the collector failed: {other:?}"),
    }
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let agent = manifest_dir.join("../collector/python");
    println!("cargo:rerun-if-changed={}", agent.display());
    let mut files = Vec::new();
    walk(&agent, &mut files);
    let mut code = String::from(
        "/// The Python agent's files: (path relative to the agent dir, contents).\npub const AGENT_FILES: &[(&str, &[u8])] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f.strip_prefix(&agent).unwrap_or(f);
        let _ = writeln!(
            code,
            "    ({:?}, include_bytes!({:?})),",
            rel.display().to_string(),
            f.canonicalize().unwrap_or(f.clone()).display().to_string()
        );
    }
    code.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    code.push_str(&embed_collector(&manifest_dir, &out_dir));
    let out = out_dir.join("agent_files.rs");
    if let Err(e) = std::fs::write(&out, code) {
        println!("cargo:warning=cannot write {}: {e}", out.display());
    }
}
