//! The `tpuscope` command line.

mod attach;
mod child;
mod digest_cache;
mod doctor;
mod dump;
mod env_cmd;
mod export_cmd;
mod hangup;
mod live_stream;
mod live_ui;
mod locate;
mod merge_cmd;
mod metrics;
mod output;
mod ps;
mod report_cmd;
mod run;
mod spill;
mod summary;
mod torch_logs;
mod view_cmd;
mod whatif;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tpuscope",
    version,
    about = "PJRT-level profiler and graph debugger for JAX, torch_xla and TorchTPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a workload with the collector in front of its PJRT plugin and write a trace.
    Run(run::RunArgs),
    /// Print every record of a trace (JSON lines with --json).
    Dump {
        /// One JSON object per line: the manifest first, then events.
        #[arg(long)]
        json: bool,
        trace: PathBuf,
    },
    /// Live view of a running instrumented process (`--snapshot --json`: its state once).
    Attach(attach::AttachArgs),
    /// Explain recompiles, host syncs, steps, cache and memory of traces; check CI budgets.
    Report(report_cmd::ReportArgs),
    /// Print the environment variables that enable the collector without `tpuscope run`.
    Env(env_cmd::EnvArgs),
    /// List this user's instrumented processes (live sockets); stale sockets are removed.
    Ps(ps::PsArgs),
    /// Open traces in the GUI: timeline, recompile explorer with HLO diffs, syncs, HBM, flamegraph.
    View(view_cmd::ViewArgs),
    /// Export a trace: Chrome trace-event JSON (Perfetto UI) or a flamegraph SVG.
    Export(export_cmd::ExportArgs),
    /// Check Python, frontends, PJRT plugins, TPU, collector and environment; say how to fix problems.
    Doctor(doctor::DoctorArgs),
    /// Internal (doctor): load a PJRT plugin and print its API version as one JSON line.
    #[command(name = "__probe-plugin", hide = true)]
    ProbePlugin { path: PathBuf },
    /// Compile a run's programs for a TPU topology with libtpu (no TPU needed): HBM fit, compile
    /// time, roofline step time, what the recompiles would cost there.
    Whatif(whatif::WhatifArgs),
    /// Internal (whatif): compile one program for a TPU topology with libtpu, print one JSON line.
    #[command(name = "__whatif-compile", hide = true)]
    WhatifCompile(whatif::replay::CompileArgs),
    /// Internal (whatif): load libtpu and create a TPU topology, print what it is as one JSON line.
    #[command(name = "__whatif-topology", hide = true)]
    WhatifTopology(whatif::topology::CheckArgs),
    /// Merge the traces of one job's hosts into one file, aligned on their wall clocks.
    Merge(merge_cmd::MergeArgs),
    /// Internal (attach): lives until its standard input closes. An attach session in place
    /// ends when this process exits, so `tpuscope attach` can end it and wait for the trace.
    #[command(name = "__attach-hold", hide = true)]
    AttachHold,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if matches!(
        cli.command,
        Cmd::ProbePlugin { .. } | Cmd::WhatifCompile(_) | Cmd::WhatifTopology(_)
    ) {
        child::die_with_parent();
    }
    let result = match &cli.command {
        Cmd::Run(args) => run::run(args),
        Cmd::Dump { json, trace } => dump::dump(trace, *json).map(|()| 0),
        Cmd::Env(args) => env_cmd::env(args).map(|()| 0),
        Cmd::Report(args) => report_cmd::report(args),
        Cmd::Attach(args) => attach::attach(args),
        Cmd::Ps(args) => ps::ps(args),
        Cmd::View(args) => view_cmd::view(args),
        Cmd::Export(args) => export_cmd::export(args),
        Cmd::Doctor(args) => doctor::doctor(args),
        Cmd::ProbePlugin { path } => doctor::probe_plugin_cmd(path),
        Cmd::WhatifCompile(args) => whatif::replay::compile_cmd(args),
        Cmd::WhatifTopology(args) => whatif::topology::check_cmd(args),
        Cmd::Whatif(args) => whatif::whatif(args),
        Cmd::Merge(args) => merge_cmd::merge(args),
        Cmd::AttachHold => {
            // Until `tpuscope attach` closes the pipe, or dies (the pipe closes with it).
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            Ok(0)
        }
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("tpuscope: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
