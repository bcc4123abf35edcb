//! Builds the run manifest: who is running, with which plugin, frontends and environment.

use std::collections::BTreeMap;
use std::path::Path;

use tpuscope_core::event::{KeyValue, Manifest};

use crate::config::Config;

/// Packages whose versions every manifest records (the "pinned version matrix").
pub const TRACKED_PACKAGES: &[&str] =
    &["jax", "jaxlib", "torch", "torch_xla", "torch_tpu", "libtpu"];

/// Environment variables recorded: exact names, then prefixes.
const ENV_EXACT: &[&str] = &[
    "XLA_FLAGS",
    "LIBTPU_INIT_ARGS",
    "PJRT_DEVICE",
    "JAX_PLATFORMS",
    "PJRT_NAMES_AND_LIBRARY_PATHS",
    // Where dynamo's structured logs go, so `tpuscope report` finds them without `--torch-trace`.
    "TORCH_TRACE",
];
const ENV_PREFIXES: &[&str] = &["TPU_", "XLA_", "TORCH_TPU_", "TPUSCOPE_", "PT_XLA_", "JAX_"];

pub fn build(
    config: &Config,
    api_major: u32,
    api_minor: u32,
    start_mono_ns: u64,
    start_wall_ns: u64,
) -> Manifest {
    Manifest {
        pid: std::process::id(),
        host: crate::ffi::os::hostname(),
        start_wall_ns,
        start_mono_ns,
        command_line: command_line(),
        plugin_path: config
            .real_plugin
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        pjrt_api_major: api_major,
        pjrt_api_minor: api_minor,
        plugin_attributes: Vec::new(),
        package_versions: package_versions(&loaded_site_packages()),
        environment: environment(std::env::vars()),
        collector_version: env!("CARGO_PKG_VERSION").to_string(),
        job_id: config.job_id.clone(),
        process_index: config.process_index,
        frontend: String::new(),
        role: if config.standin {
            "standin".into()
        } else {
            "wrap".into()
        },
        process_start_wall_ns: crate::ffi::os::process_start_wall_ns(),
        // An attach session sets it.
        attach_owner_pid: 0,
    }
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The XLA/TPU/PJRT environment, sorted by name.
pub fn environment(vars: impl Iterator<Item = (String, String)>) -> Vec<KeyValue> {
    let mut env: Vec<KeyValue> = vars
        .filter(|(k, _)| {
            ENV_EXACT.contains(&k.as_str()) || ENV_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .map(|(key, value)| KeyValue { key, value })
        .collect();
    env.sort_by(|a, b| a.key.cmp(&b.key));
    env
}

/// `site-packages` / `dist-packages` directories of the shared objects this process has mapped:
/// the frontend that loads the plugin lives there, and so do its sibling packages.
fn loaded_site_packages() -> Vec<String> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut dirs: Vec<String> = Vec::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        for marker in ["/site-packages/", "/dist-packages/"] {
            if let Some(i) = path.find(marker) {
                let dir = &path[..i + marker.len() - 1];
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_string());
                }
            }
        }
    }
    if let Ok(extra) = std::env::var("TPUSCOPE_SITE_PACKAGES") {
        dirs.extend(extra.split(':').filter(|s| !s.is_empty()).map(String::from));
    }
    dirs
}

/// Versions of the tracked packages from their `*.dist-info` directory names.
pub fn package_versions(site_dirs: &[String]) -> Vec<KeyValue> {
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    for dir in site_dirs {
        let Ok(entries) = std::fs::read_dir(Path::new(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(".dist-info") else {
                continue;
            };
            let Some((pkg, version)) = stem.split_once('-') else {
                continue;
            };
            let pkg = pkg.to_ascii_lowercase().replace('-', "_");
            if TRACKED_PACKAGES.contains(&pkg.as_str()) {
                found.entry(pkg).or_insert_with(|| version.to_string());
            }
        }
    }
    found
        .into_iter()
        .map(|(key, value)| KeyValue { key, value })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_keeps_only_relevant_names_sorted() {
        let vars = vec![
            ("XLA_FLAGS".to_string(), "--x".to_string()),
            ("HOME".to_string(), "/root".to_string()),
            ("TPU_SKIP_MDS_QUERY".to_string(), "1".to_string()),
        ];
        let env = environment(vars.into_iter());
        let keys: Vec<&str> = env.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["TPU_SKIP_MDS_QUERY", "XLA_FLAGS"]);
    }

    #[test]
    fn versions_from_dist_info_names() {
        let dir = tempfile::tempdir().unwrap();
        for d in [
            "jax-0.10.2.dist-info",
            "torch_xla-2.9.0.dist-info",
            "numpy-2.0.dist-info",
        ] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let v = package_versions(&[dir.path().display().to_string()]);
        assert_eq!(
            v,
            vec![
                KeyValue {
                    key: "jax".into(),
                    value: "0.10.2".into()
                },
                KeyValue {
                    key: "torch_xla".into(),
                    value: "2.9.0".into()
                },
            ]
        );
    }
}
