//! `tpuscope attach <pid>`: the live view of a running instrumented process, or (with
//! `--snapshot --json`) its current state once, in the shape of `report --format json`.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tpuscope_analyzers::present;
use tpuscope_analyzers::report;
use tpuscope_analyzers::units::plural;

use crate::live_stream;
use crate::report_cmd::term::Style;
use crate::report_cmd::text;

/// How long `--snapshot` waits for more of the process's backlog before it gives up (the
/// backlog comes at once: it is the trace file so far, read back by the collector).
const SNAPSHOT_SILENCE: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The process id (see `tpuscope ps`).
    pub pid: u32,
    /// Print the current state once and exit instead of opening the live view.
    #[arg(long)]
    pub snapshot: bool,
    /// With --snapshot: JSON, the shape of `tpuscope report --format json` plus `pid`.
    #[arg(long, requires = "snapshot")]
    pub json: bool,
}

pub fn attach(args: &AttachArgs) -> Result<i32> {
    let (stream, path) = live_stream::connect(args.pid)?;
    if args.snapshot {
        return snapshot(args, stream, &path);
    }
    crate::live_ui::attach(args.pid, stream)
}

fn snapshot(
    args: &AttachArgs,
    stream: std::os::unix::net::UnixStream,
    path: &std::path::Path,
) -> Result<i32> {
    let trace = live_stream::snapshot(stream, SNAPSHOT_SILENCE)
        .with_context(|| format!("reading {}", path.display()))?;
    let label = format!("pid {} (live)", args.pid);
    let logs = crate::torch_logs::find(None, None, Some(&trace), &label);
    let rep = report::build_one(&label, &trace, logs);
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = serde_json::to_value(&rep).context("serializing the state")?;
        let Some(obj) = v.as_object_mut() else {
            bail!("the report did not serialize to an object");
        };
        obj.insert("pid".into(), args.pid.into());
        let text = serde_json::to_string_pretty(&v).context("serializing the state")?;
        writeln!(out, "{text}").context("writing to stdout")?;
    } else {
        // The report's counts and its findings, worded as `tpuscope report` words them.
        writeln!(
            out,
            "pid {}: {}, {}, {}",
            args.pid,
            plural(rep.compiles.total, "compile", "compiles"),
            plural(rep.compiles.recompiles, "recompile", "recompiles"),
            plural(rep.sync_total(), "host sync", "host syncs"),
        )
        .context("writing to stdout")?;
        let findings = present::findings(&rep);
        write!(
            out,
            "{}",
            text::section_text(&findings, &Style::for_stdout())
        )
        .context("writing to stdout")?;
    }
    Ok(0)
}
