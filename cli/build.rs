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
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("agent_files.rs");
    if let Err(e) = std::fs::write(&out, code) {
        println!("cargo:warning=cannot write {}: {e}", out.display());
    }
}
