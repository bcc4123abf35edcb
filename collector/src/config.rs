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
pub const MIN_QUEUE_CAPACITY: u64 = 16;
pub const MAX_QUEUE_CAPACITY: u64 = 1 << 20;
/// `standin`: the real plugin stands in for another (CPU for TPU): drop create options it rejects.
pub const ENV_ROLE: &str = "TPUSCOPE_ROLE";
/// Comma-separated create-option names to drop before `PJRT_Client_Create`.
pub const ENV_DROP_CREATE_OPTIONS: &str = "TPUSCOPE_DROP_CREATE_OPTIONS";
/// `0` turns Python stack capture off.
pub const ENV_STACKS: &str = "TPUSCOPE_STACKS";
/// `0` turns the live socket off (no `tpuscope ps`/`attach` for this process).
pub const ENV_LIVE: &str = "TPUSCOPE_LIVE";
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
    /// What was wrong with the numeric variables (not a number, out of range) and what is used
    /// instead: one line each, printed once per process by `from_env`.
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads the environment; says on stderr what it could not take as given (the session reads
    /// the configuration once per process).
    pub fn from_env() -> Self {
        let c = Self::from_lookup(|k| std::env::var(k).ok());
        for w in &c.warnings {
            eprintln!("tpuscope: {w}");
        }
        c
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let warnings = std::cell::RefCell::new(Vec::new());
        // A number within `min..=max`, else the default (not a number) or the nearest bound,
        // with a warning either way. Empty means unset.
        let ranged = |k: &str, default: u64, min: u64, max: u64| {
            let Some(v) = get(k).filter(|v| !v.trim().is_empty()) else {
                return default;
            };
            match v.trim().parse::<u64>() {
                Ok(n) if n < min => {
                    warnings
                        .borrow_mut()
                        .push(format!("{k}={v} is below the minimum {min}; using {min}"));
                    min
                }
                Ok(n) if n > max => {
                    warnings
                        .borrow_mut()
                        .push(format!("{k}={v} is above the maximum {max}; using {max}"));
                    max
                }
                Ok(n) => n,
                Err(_) => {
                    warnings.borrow_mut().push(format!(
                        "{k}={v} is not a whole number; using the default {default}"
                    ));
                    default
                }
            }
        };
        let num = |k: &str, default: u64| ranged(k, default, 0, u64::MAX);
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
            memory_interval: Duration::from_millis(ranged(
                ENV_MEMORY_INTERVAL_MS,
                100,
                1,
                u64::MAX,
            )),
            size_cap_bytes: num(ENV_SIZE_CAP_MB, 4096).saturating_mul(1 << 20),
            queue_capacity: ranged(
                ENV_QUEUE_CAPACITY,
                DEFAULT_QUEUE_CAPACITY,
                MIN_QUEUE_CAPACITY,
                MAX_QUEUE_CAPACITY,
            ) as usize,
            standin,
            drop_create_options,
            stacks: !off(ENV_STACKS),
            job_id: job_id(&get),
            process_index: {
                // Checked here only to say so; `process_index` falls back to the launchers'.
                ranged(ENV_PROCESS_INDEX, 0, 0, u64::from(u32::MAX));
                process_index(&get)
            },
            live: !off(ENV_LIVE),
            warnings: warnings.take(),
        }
    }
}

/// Where a pod's launchers put the process's index, most specific first: jax's launch variables
/// (XPK and similar set them for `jax.distributed.initialize`), torch distributed's rank
/// (torchrun), the TPU worker number of the slice (GKE's TPU webhook, Cloud TPU VMs, torch_xla),
/// SLURM, Open MPI, and a Kubernetes indexed Job's completion index.
const PROCESS_INDEX_VARS: &[&str] = &[
    "JAX_PROCESS_ID",
    "RANK",
    "TPU_WORKER_ID",
    "CLOUD_TPU_TASK_ID",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "JOB_COMPLETION_INDEX",
];

/// The process index: `TPUSCOPE_PROCESS_INDEX`, else the first launcher variable that holds a
/// number, else 0. A multislice job (`MEGASCALE_SLICE_ID`) numbers workers per slice, so the TPU
/// worker number is offset by the slice times the slice's host count.
fn process_index(get: &impl Fn(&str) -> Option<String>) -> u32 {
    let parse = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
    if let Some(i) = parse(ENV_PROCESS_INDEX) {
        return i;
    }
    for k in PROCESS_INDEX_VARS {
        let Some(i) = parse(k) else { continue };
        if matches!(*k, "TPU_WORKER_ID" | "CLOUD_TPU_TASK_ID")
            && let Some(slice) = parse("MEGASCALE_SLICE_ID")
        {
            let hosts = get("TPU_WORKER_HOSTNAMES")
                .map_or(0, |h| h.split(',').filter(|s| !s.trim().is_empty()).count());
            if let Ok(hosts) = u32::try_from(hosts)
                && hosts > 0
            {
                return slice.saturating_mul(hosts).saturating_add(i);
            }
        }
        return i;
    }
    0
}

/// The job id: `TPUSCOPE_JOB_ID`, else an id the launcher gives every process of the run
/// (torchrun's rendezvous id, SLURM's job id), else a hash of what all the job's hosts are told
/// alike: the coordinator address (jax, multislice, torch distributed) or the slice's host list.
/// Empty when nothing is known. Read once at start: it costs the hooks nothing.
fn job_id(get: &impl Fn(&str) -> Option<String>) -> String {
    let val = |k: &str| {
        get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if let Some(v) = get(ENV_JOB_ID) {
        return v;
    }
    // torchrun's default rendezvous id is "none": shared by every torchrun job, so no identity.
    if let Some(v) = val("TORCHELASTIC_RUN_ID").filter(|v| v != "none") {
        return format!("torchelastic-{v}");
    }
    if let Some(v) = val("SLURM_JOB_ID") {
        return format!("slurm-{v}");
    }
    let master = match (val("MASTER_ADDR"), val("MASTER_PORT")) {
        (Some(a), Some(p)) => Some(format!("{a}:{p}")),
        _ => None,
    };
    let keyed = [
        ("jax", val("JAX_COORDINATOR_ADDRESS")),
        ("megascale", val("MEGASCALE_COORDINATOR_ADDRESS")),
        ("torch", master),
        ("tpu", val("TPU_WORKER_HOSTNAMES")),
    ];
    for (kind, v) in keyed {
        if let Some(v) = v {
            return format!(
                "{kind}-{:016x}",
                tpuscope_core::writer::blob_hash(v.as_bytes())
            );
        }
    }
    String::new()
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

    fn env(pairs: &[(&str, &str)]) -> Config {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn process_index_and_job_id_from_pod_launchers() {
        let none = env(&[]);
        assert_eq!((none.process_index, none.job_id.as_str()), (0, ""));
        // Explicit settings win over what launchers set.
        let c = env(&[
            (ENV_PROCESS_INDEX, "7"),
            (ENV_JOB_ID, "run-a"),
            ("TPU_WORKER_ID", "3"),
            ("SLURM_JOB_ID", "99"),
        ]);
        assert_eq!((c.process_index, c.job_id.as_str()), (7, "run-a"));
        // A TPU slice on GKE: worker number, and the host list every worker is given.
        let hosts = "t1v-0,t1v-1,t1v-2,t1v-3";
        let w2 = env(&[("TPU_WORKER_ID", "2"), ("TPU_WORKER_HOSTNAMES", hosts)]);
        let w0 = env(&[("TPU_WORKER_ID", "0"), ("TPU_WORKER_HOSTNAMES", hosts)]);
        assert_eq!((w2.process_index, w0.process_index), (2, 0));
        assert!(w2.job_id.starts_with("tpu-") && w2.job_id == w0.job_id);
        let other = env(&[("TPU_WORKER_ID", "0"), ("TPU_WORKER_HOSTNAMES", "x,y")]);
        assert_ne!(other.job_id, w0.job_id);
        // Multislice: slice 1 of two 4-host slices, worker 2 → process 6.
        let ms = env(&[
            ("TPU_WORKER_ID", "2"),
            ("TPU_WORKER_HOSTNAMES", hosts),
            ("MEGASCALE_SLICE_ID", "1"),
            ("MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.2:8080"),
        ]);
        assert_eq!(ms.process_index, 6);
        assert!(ms.job_id.starts_with("megascale-"));
        // jax's launch variables come before the TPU worker number.
        let j = env(&[
            ("JAX_PROCESS_ID", "5"),
            ("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234"),
            ("TPU_WORKER_ID", "1"),
        ]);
        assert_eq!(j.process_index, 5);
        assert!(j.job_id.starts_with("jax-"));
        // torchrun: rank, and its rendezvous id unless it is the default "none".
        let t = env(&[("RANK", "3"), ("TORCHELASTIC_RUN_ID", "abc")]);
        assert_eq!(
            (t.process_index, t.job_id.as_str()),
            (3, "torchelastic-abc")
        );
        let t = env(&[
            ("RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "none"),
            ("MASTER_ADDR", "h0"),
            ("MASTER_PORT", "29500"),
        ]);
        assert!(t.job_id.starts_with("torch-"), "{}", t.job_id);
        let s = env(&[("SLURM_PROCID", "4"), ("SLURM_JOB_ID", "123")]);
        assert_eq!((s.process_index, s.job_id.as_str()), (4, "slurm-123"));
        // Garbage is ignored, not taken as 0 from a later variable's absence.
        let g = env(&[("JAX_PROCESS_ID", "x"), ("TPU_WORKER_ID", "2")]);
        assert_eq!(g.process_index, 2);
    }

    #[test]
    fn numbers_that_are_not_taken_as_given_are_said_once_each() {
        let c = env(&[
            (ENV_QUEUE_CAPACITY, "abc"),
            (ENV_MEMORY_INTERVAL_MS, "0"),
            (ENV_SIZE_CAP_MB, "12x"),
            (ENV_PROCESS_INDEX, "-1"),
        ]);
        assert_eq!(c.queue_capacity, DEFAULT_QUEUE_CAPACITY as usize);
        assert_eq!(c.memory_interval, Duration::from_millis(1));
        assert_eq!(c.size_cap_bytes, 4096 << 20);
        assert_eq!(c.warnings.len(), 4, "{:?}", c.warnings);
        let said = |what: &str| c.warnings.iter().filter(|w| w.contains(what)).count();
        assert_eq!(
            said("TPUSCOPE_QUEUE_CAPACITY=abc is not a whole number; using the default 16384"),
            1
        );
        assert_eq!(
            said("TPUSCOPE_MEMORY_INTERVAL_MS=0 is below the minimum 1"),
            1
        );
        assert_eq!(said("TPUSCOPE_PROCESS_INDEX=-1 is not a whole number"), 1);
        let c = env(&[(ENV_QUEUE_CAPACITY, "0")]);
        assert_eq!(c.queue_capacity, 16);
        assert_eq!(
            c.warnings,
            ["TPUSCOPE_QUEUE_CAPACITY=0 is below the minimum 16; using 16"]
        );
        let c = env(&[(ENV_QUEUE_CAPACITY, "99999999")]);
        assert_eq!(c.queue_capacity, 1 << 20);
        assert_eq!(c.warnings.len(), 1);
        // Valid and empty values say nothing.
        let c = env(&[(ENV_QUEUE_CAPACITY, " 64 "), (ENV_SIZE_CAP_MB, "")]);
        assert_eq!((c.queue_capacity, c.warnings.len()), (64, 0));
    }

    #[test]
    fn off_switches() {
        let c = Config::from_lookup(|k| {
            matches!(k, ENV_ENABLE | ENV_STACKS | ENV_LIVE).then(|| "0".to_string())
        });
        assert!(!c.enabled && !c.stacks && !c.live);
        let on = Config::from_lookup(|_| None);
        assert!(on.live);
    }
}
