//! `tpuscope view`: the GUI over one or several traces.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use tpuscope_gui::{Tab, ViewOptions};

const AFTER_HELP: &str = "\
With no trace, opens a sample recorded from a real JAX workload (a train step recompiled every
epoch because the learning rate is a Python float).

Views: Summary (the numbers and findings of `tpuscope report`), Timeline (lanes per thread and
device; wheel or +/- zoom, drag or arrows pan, 0 fits, click for details), Recompiles (families,
members, side-by-side HLO of a member and the one it was compared with), Syncs (click a line to
see its syncs on the timeline), HBM (bytes in use per device), Flamegraph (compile time and sync
stall by Python stack; Export SVG writes flame.svg).

A trace without an end record (a workload still running) is followed as it grows; --follow
follows any trace. On a machine without a display, run it under xvfb-run:
  xvfb-run -a -s \"-screen 0 1600x1000x24\" tpuscope view TRACE --screenshot view.png";

#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct ViewArgs {
    /// Traces: one run, successive runs of one program, or the hosts of one job.
    pub traces: Vec<PathBuf>,
    /// Render the window into this PNG and exit (needs $DISPLAY; see --help).
    #[arg(long, value_name = "FILE.png")]
    pub screenshot: Option<PathBuf>,
    /// Follow the traces as they grow.
    #[arg(long)]
    pub follow: bool,
    /// The view shown first: summary, timeline, recompiles, syncs, hbm, flame.
    #[arg(long, value_name = "VIEW")]
    pub tab: Option<String>,
    /// Window size in points, WxH (default 1400x900).
    #[arg(long, value_name = "WxH")]
    pub size: Option<String>,
    /// dynamo's TORCH_TRACE logs (default: `<trace>.torch_trace/` next to each trace).
    #[arg(long, value_name = "DIR")]
    pub torch_trace: Option<PathBuf>,
}

pub fn view(args: &ViewArgs) -> Result<i32> {
    let tab = match &args.tab {
        Some(t) => Some(t.parse::<Tab>().map_err(|e| anyhow!("--tab: {e}"))?),
        None => None,
    };
    let size = match &args.size {
        Some(s) => {
            Some(parse_size(s).ok_or_else(|| anyhow!("--size {s}: not WxH, e.g. 1400x900"))?)
        }
        None => None,
    };
    // Only where `tpuscope run` leaves them (or --torch-trace): the manifest's record would
    // need the trace read twice.
    let torch_logs = args
        .traces
        .iter()
        .filter_map(|p| {
            crate::torch_logs::find(
                args.torch_trace.as_deref(),
                Some(p),
                None,
                &p.display().to_string(),
            )
        })
        .collect();
    if let Some(shot) = &args.screenshot {
        let inputs: Vec<&std::path::Path> = args.traces.iter().map(PathBuf::as_path).collect();
        crate::output::refuse_inputs(shot, &inputs)?;
    }
    tpuscope_gui::run(ViewOptions {
        traces: args.traces.clone(),
        screenshot: args.screenshot.clone(),
        follow: args.follow,
        tab,
        size,
        torch_logs,
    })?;
    Ok(0)
}

fn parse_size(s: &str) -> Option<(f32, f32)> {
    let (w, h) = s.split_once(['x', 'X'])?;
    let w: f32 = w.trim().parse().ok()?;
    let h: f32 = h.trim().parse().ok()?;
    (w >= 200.0 && h >= 150.0 && w <= 8000.0 && h <= 8000.0).then_some((w, h))
}
