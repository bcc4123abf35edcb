//! The collector's configuration, read once from the environment (documented in README and by
//! `tpuscope env`).

use std::path::PathBuf;
use std::time::Duration;

/// Environment variable naming the real PJRT plugin the collector wraps.
pub const ENV_REAL_PLUGIN: &str = "TPUSCOPE_REAL_PLUGIN";
/// Trace file, or a directory to create a trace in (default: the current directory).
pub const ENV_OUT: &str = "TPUSCOPE_OUT";
/// `0`/`off` turns recording off: pure pass-through.
pub const ENV_ENABLE: &str = "TPUSCOPE_ENABLE";
pub const ENV_MEMORY_INTERVAL_MS: &str = "TPUSCOPE_MEMORY_INTERVAL_MS";
pub const ENV_SIZE_CAP_MB: &str = "TPUSCOPE_SIZE_CAP_MB";
pub const ENV_QUEUE_CAPACITY: &str = "TPUSCOPE_QUEUE_CAPACITY";
/// Events are queued by value (176 bytes a slot): 16384 slots are about 3 MiB, several
/// milliseconds of the fastest event rates the hooks can produce.
pub const DEFAULT_QUEUE_CAPACITY: u64 = 16384;
/// `standin`: the real plugin stands in for another (CPU for TPU): drop create options it rejects.
pub const ENV_ROLE: &str = "TPUSCOPE_ROLE";
/// Comma-separated create-option names to drop before `PJRT_Client_Create`.
pub const ENV_DROP_CREATE_OPTIONS: &str = "TPUSCOPE_DROP_CREATE_OPTIONS";
/// `0` turns Python stack capture off.
pub const ENV_STACKS: &str = "TPUSCOPE_STACKS";
/// `0` turns the live socket off (no `tpuscope ps`/`attach` for this process).
pub const ENV_LIVE: &str = "TPUSCOPE_LIVE";
/// Bytes of frames queued for one live viewer before frames are lost to it.
pub const ENV_LIVE_VIEWER_BUDGET_BYTES: &str = "TPUSCOPE_LIVE_VIEWER_BUDGET_BYTES";
pub const DEFAULT_LIVE_VIEWER_BUDGET_BYTES: u64 = 32 << 20;
/// Job identity and process index for multi-host jobs.
pub const ENV_JOB_ID: &str = "TPUSCOPE_JOB_ID";
pub const ENV_PROCESS_INDEX: &str = "TPUSCOPE_PROCESS_INDEX";

/// Create options a stand-in CPU plugin rejects (TorchTPU passes them to libtpu).
pub const STANDIN_DROPPED_CREATE_OPTIONS: &[&str] = &["premapped_buffer_size"];

#[derive(Clone, Debug)]
pub struct Config {
    pub real_plugin: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub enabled: bool,
    pub memory_interval: Duration,
    pub size_cap_bytes: u64,
    pub queue_capacity: usize,
    pub standin: bool,
    pub drop_create_options: Vec<String>,
    pub stacks: bool,
    pub job_id: String,
    pub process_index: u32,
    pub live: bool,
    pub live_viewer_budget_bytes: usize,
}

impl Config {
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str, default: u64| {
            get(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        let off =
            |k: &str| get(k).is_some_and(|v| matches!(v.trim(), "0" | "off" | "false" | "no"));
        let standin = get(ENV_ROLE).is_some_and(|v| v.trim() == "standin");
        let mut drop_create_options: Vec<String> = get(ENV_DROP_CREATE_OPTIONS)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if standin {
            for o in STANDIN_DROPPED_CREATE_OPTIONS {
                if !drop_create_options.iter().any(|d| d == o) {
                    drop_create_options.push((*o).to_string());
                }
            }
        }
        Config {
            real_plugin: get(ENV_REAL_PLUGIN)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            out: get(ENV_OUT).filter(|s| !s.is_empty()).map(PathBuf::from),
            enabled: !off(ENV_ENABLE),
            memory_interval: Duration::from_millis(num(ENV_MEMORY_INTERVAL_MS, 100).max(1)),
            size_cap_bytes: num(ENV_SIZE_CAP_MB, 4096).saturating_mul(1 << 20),
            queue_capacity: num(ENV_QUEUE_CAPACITY, DEFAULT_QUEUE_CAPACITY).clamp(16, 1 << 20)
                as usize,
            standin,
            drop_create_options,
            stacks: !off(ENV_STACKS),
            job_id: get(ENV_JOB_ID).unwrap_or_default(),
            process_index: num(ENV_PROCESS_INDEX, 0) as u32,
            live: !off(ENV_LIVE),
            live_viewer_budget_bytes: usize::try_from(num(
                ENV_LIVE_VIEWER_BUDGET_BYTES,
                DEFAULT_LIVE_VIEWER_BUDGET_BYTES,
            ))
            .unwrap_or(usize::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standin_drops_premapped_buffer_size() {
        let c = Config::from_lookup(|k| (k == ENV_ROLE).then(|| "standin".to_string()));
        assert_eq!(
            c.drop_create_options,
            vec!["premapped_buffer_size".to_string()]
        );
        assert!(c.enabled && c.stacks);
        assert_eq!(c.memory_interval, Duration::from_millis(100));
    }

    #[test]
    fn off_switches() {
        let c = Config::from_lookup(|k| {
            matches!(k, ENV_ENABLE | ENV_STACKS | ENV_LIVE).then(|| "0".to_string())
        });
        assert!(!c.enabled && !c.stacks && !c.live);
        let on = Config::from_lookup(|_| None);
        assert!(on.live);
        assert_eq!(on.live_viewer_budget_bytes, 32 << 20);
    }
}
