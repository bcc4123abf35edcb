//! `tpuscope view`: the GUI over one or several traces.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};

use tpuscope_analyzers::report::{self, Input, Options};
use tpuscope_analyzers::units::duration;
use tpuscope_gui::whatif::{Launcher, Update};
use tpuscope_gui::{Tab, ViewOptions, WhatIfSetup};

use crate::output::Output;
use crate::whatif::Progress;

const AFTER_HELP: &str = "\
With no trace, opens a sample recorded from a real JAX workload (a train step recompiled every
epoch because the learning rate is a Python float).

Views: Summary (the numbers and findings of `tpuscope report`), Time (where the time goes: the
run's split into devices busy, compiling, host-bound and blocked, each step's split as a stacked
bar; click a step or a slow step to see it on the timeline), Timeline (lanes per thread and
device; wheel or +/- zoom, drag or arrows pan, 0 fits, click for details), Recompiles (families,
members, side-by-side HLO of a member and the one it was compared with), Syncs (click a line to
see its syncs on the timeline), HBM (bytes in use per device), Flamegraph (compile time and sync
stall by Python stack; Export SVG writes flame.svg), What-if on TPU (the run's programs compiled
for a TPU topology by libtpu, as `tpuscope whatif`: HBM need against a chip, TPU compile time,
roofline, recompiles priced; pick a topology there, or pass --whatif).

A trace without an end record (a workload still running) is followed as it grows; --follow
follows any trace. On a machine without a display, run it under xvfb-run:
  xvfb-run -a -s \"-screen 0 1600x1000x24\" tpuscope view TRACE --screenshot view.png";

#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct ViewArgs {
    /// Traces: one run, successive runs of one program, or the hosts of one job.
    pub traces: Vec<PathBuf>,
    /// Render the window into this PNG and exit (needs $DISPLAY; see --help). Every trace must
    /// open, else nothing is written.
    #[arg(long, value_name = "FILE.png")]
    pub screenshot: Option<PathBuf>,
    /// Overwrite the --screenshot FILE.png if it exists.
    #[arg(long, requires = "screenshot")]
    pub force: bool,
    /// Follow the traces as they grow.
    #[arg(long)]
    pub follow: bool,
    /// The view shown first: summary, time, timeline, recompiles, syncs, hbm, flame, whatif.
    #[arg(long, value_name = "VIEW")]
    pub tab: Option<String>,
    /// Window size in points, WxH (default 1400x900).
    #[arg(long, value_name = "WxH")]
    pub size: Option<String>,
    /// dynamo's TORCH_TRACE logs (default: `<trace>.torch_trace/` next to each trace).
    #[arg(long, value_name = "DIR")]
    pub torch_trace: Option<PathBuf>,
    /// What-if on TPU: compile the programs for this topology as the window opens (v5e:2x2, …),
    /// or show a saved `tpuscope whatif --format json` (a .json file).
    #[arg(long, value_name = "TOPOLOGY|FILE.json")]
    pub whatif: Option<String>,
    /// The libtpu the What-if tab compiles with (default: the run's Python's `libtpu` package).
    #[arg(long, value_name = "PATH")]
    pub libtpu: Option<PathBuf>,
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
    let whatif = whatif_setup(args)?;
    // Opened first, as `export -o`: a window is not rendered for an output we may not write.
    let shot = match &args.screenshot {
        Some(path) => {
            let inputs: Vec<&Path> = args.traces.iter().map(PathBuf::as_path).collect();
            Some(Output::create(path, args.force, &inputs)?)
        }
        None => None,
    };
    let viewed = tpuscope_gui::run(ViewOptions {
        traces: args.traces.clone(),
        screenshot: shot.is_some(),
        follow: args.follow,
        tab,
        size,
        torch_logs,
        whatif,
        read_cache: Some(std::sync::Arc::new(crate::digest_cache::ViewCache)),
    })?;
    // Without a PNG the output is dropped unwritten: nothing it held before changes.
    if let (Some(mut out), Some(png)) = (shot, viewed.png) {
        // The output's write errors name it already.
        out.write_all(&png)?;
        out.commit()?;
    }
    // A trace that could not be read was said when the window opened; the exit says it too.
    Ok(if viewed.input_failed { 2 } else { 0 })
}

/// `--whatif`: a saved report to show, or a topology to compile for at once; the tab can
/// always compile for another.
fn whatif_setup(args: &ViewArgs) -> Result<WhatIfSetup> {
    let mut setup = WhatIfSetup {
        launcher: Some(whatif_launcher(args.libtpu.clone())),
        ..WhatIfSetup::default()
    };
    match &args.whatif {
        Some(w) if w.ends_with(".json") => {
            let text = crate::dump::read_text_input(Path::new(w), "--whatif")?;
            setup.report = Some(serde_json::from_str(&text).with_context(|| {
                format!("--whatif {w}: not the JSON of `tpuscope whatif --format json`")
            })?);
        }
        Some(topology) => {
            crate::whatif::check_topology(topology)?;
            setup.start = Some(topology.clone());
        }
        None => {}
    }
    Ok(setup)
}

/// Compiles for a topology on a thread of its own, as `tpuscope whatif` does, telling the tab
/// of each program.
fn whatif_launcher(libtpu: Option<PathBuf>) -> Launcher {
    Arc::new(move |topology, traces, sink| {
        let libtpu = libtpu.clone();
        std::thread::spawn(move || {
            // Compiles end on several threads; the tab's sink takes one at a time.
            let sink = Mutex::new(sink);
            let tell = |u: Update| {
                if let Ok(s) = sink.lock() {
                    s(u);
                }
            };
            let progress = |p: &Progress<'_>| {
                tell(Update::Progress {
                    done: p.done,
                    total: p.total,
                    line: match p.result {
                        Ok(r) => format!("{}: compiled in {}", p.name, duration(r.compile_ms)),
                        Err(e) => format!("{}: not compiled: {e}", p.name),
                    },
                });
            };
            let result = crate::whatif::check_topology(&topology).and_then(|()| {
                let inputs: Vec<Input<'_>> = traces
                    .iter()
                    .map(|(label, t, d)| Input {
                        digest: Some(d),
                        ..Input::new(label.clone(), t)
                    })
                    .collect();
                let rep = report::build(&inputs, &Options::default());
                let runs: Vec<tpuscope_analyzers::whatif::Run<'_>> = traces
                    .iter()
                    .map(|(_, t, digest)| tpuscope_analyzers::whatif::Run { trace: t, digest })
                    .collect();
                crate::whatif::compute(
                    &runs,
                    &rep,
                    &crate::whatif::Settings {
                        topology: &topology,
                        libtpu: libtpu.as_deref(),
                        price_per_chip_hour: None,
                        jobs: 2,
                        timeout: Duration::from_secs(600),
                        progress: &progress,
                    },
                )
            });
            tell(Update::Done(
                result.map(Box::new).map_err(|e| format!("{e:#}")),
            ));
        });
    })
}

fn parse_size(s: &str) -> Option<(f32, f32)> {
    let (w, h) = s.split_once(['x', 'X'])?;
    let w: f32 = w.trim().parse().ok()?;
    let h: f32 = h.trim().parse().ok()?;
    (w >= 200.0 && h >= 150.0 && w <= 8000.0 && h <= 8000.0).then_some((w, h))
}
