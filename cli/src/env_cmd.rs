//! `tpuscope env`: the environment that switches the collector on without `tpuscope run`
//! (fixed entrypoints: Kubernetes/GKE jobs, launch scripts).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

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
    let cwd = std::env::current_dir()?;
    let out = if args.out == Path::new(".") {
        cwd
    } else if args.out.is_absolute() {
        args.out.clone()
    } else {
        cwd.join(&args.out)
    };
    let mut text = format!("# tpuscope collector in front of {}\n", plugin.display());
    text.push_str(match mode {
        Mode::Tpu => "# TPU: JAX, torch_xla and torch_tpu load the collector through TPU_LIBRARY_PATH\n",
        Mode::CpuStandin => {
            "# CPU stand-in: JAX via PJRT_NAMES_AND_LIBRARY_PATHS + JAX_PLATFORMS, torch_xla via the agent's DevicePlugin (PJRT_DEVICE), torch_tpu via TPU_LIBRARY_PATH\n"
        }
    });
    for (k, v) in run::launch_env(mode, &collector, &plugin, &agent_dir, &out) {
        if k == "PYTHONPATH" {
            // Keep whatever PYTHONPATH the job's own environment has when the line runs.
            let agent = shell_quote(&agent_dir.to_string_lossy());
            text.push_str(&format!(
                "export PYTHONPATH={agent}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            ));
        } else {
            text.push_str(&format!(
                "export {k}={}\n",
                shell_quote(&v.to_string_lossy())
            ));
        }
    }
    text.push_str(
        "# optional: TPUSCOPE_MEMORY_INTERVAL_MS (100), TPUSCOPE_SIZE_CAP_MB (4096), TPUSCOPE_STACKS=0, TPUSCOPE_ENABLE=0\n",
    );
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}
