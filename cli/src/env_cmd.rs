//! `tpuscope env`: the environment that switches the collector on without `tpuscope run`
//! (fixed entrypoints: Kubernetes/GKE jobs, launch scripts).

use std::path::PathBuf;

use anyhow::Result;

use crate::locate;
use crate::run::{self, Mode};

#[derive(Debug, clap::Args)]
pub struct EnvArgs {
    /// The real plugin to wrap (default: found like `tpuscope run` does).
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Where traces go (a directory; each process writes its own file).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// The Python whose packages to search for a plugin (default: python3 on PATH).
    #[arg(long)]
    pub python: Option<PathBuf>,
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub fn env(args: &EnvArgs) -> Result<()> {
    let collector = locate::collector_path()?;
    let agent_dir = locate::agent_dir()?;
    let python = args
        .python
        .clone()
        .or_else(|| locate::workload_python(&["python3".to_string()]));
    let py_env = match (&python, &args.plugin) {
        (Some(p), None) => Some(locate::probe_python(p)?),
        _ => None,
    };
    let plugin = run::choose_plugin(args.plugin.as_deref(), py_env.as_ref())?;
    let mode = run::mode_for_plugin(&plugin);
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        std::env::current_dir()?.join(&args.out)
    };
    println!("# tpuscope collector in front of {}", plugin.display());
    match mode {
        Mode::Tpu => println!(
            "# TPU: JAX, torch_xla and torch_tpu load the collector through TPU_LIBRARY_PATH"
        ),
        Mode::CpuStandin => println!(
            "# CPU stand-in: JAX via PJRT_NAMES_AND_LIBRARY_PATHS + JAX_PLATFORMS, torch_xla via the agent's DevicePlugin (PJRT_DEVICE), torch_tpu via TPU_LIBRARY_PATH"
        ),
    }
    for (k, v) in run::launch_env(mode, &collector, &plugin, &agent_dir, &out) {
        println!("export {k}={}", shell_quote(&v.to_string_lossy()));
    }
    println!(
        "# optional: TPUSCOPE_MEMORY_INTERVAL_MS (100), TPUSCOPE_SIZE_CAP_MB (4096), TPUSCOPE_STACKS=0, TPUSCOPE_ENABLE=0"
    );
    Ok(())
}
