//! `tpuscope view`: the offline GUI (egui/eframe, OpenGL through glow).
//!
//! [`App`] is the whole window's state and drawing, independent of the native window so that
//! tests drive it with egui_kittest and benchmarks with a bare `egui::Context`; [`run`] puts it in
//! a native window, follows growing traces with notify, and takes `--screenshot`s.

pub mod analysis;
pub mod app;
pub mod data;
pub mod describe;
pub mod flame;
pub mod fmt;
pub mod hbm;
pub mod kept;
pub mod lanes;
pub mod recompiles;
pub mod summary;
pub mod syncs;
pub mod time;
pub mod timeline;
pub mod whatif;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use eframe::egui;

pub use app::{App, Tab};
pub use data::Source;

/// How a view ended.
#[derive(Debug, Default)]
pub struct Viewed {
    /// The screenshot asked for.
    pub png: Option<Vec<u8>>,
    /// Some trace given could not be read (the window showed the others, and said why).
    pub input_failed: bool,
}

/// What `tpuscope view` was asked for.
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    /// Traces to open; none: the bundled sample.
    pub traces: Vec<PathBuf>,
    /// Render the window once, as a PNG [`run`] returns, and close it (the caller writes the
    /// file). Every trace must then open: a screenshot missing one is refused.
    pub screenshot: bool,
    /// Follow the traces as they grow (always done for a trace without an end record).
    pub follow: bool,
    /// The tab shown first (Summary when `None`).
    pub tab: Option<Tab>,
    /// Window size in points (1400×900 when `None`).
    pub size: Option<(f32, f32)>,
    /// dynamo's logs of the traces (TORCH_TRACE), read by the caller.
    pub torch_logs: Vec<tpuscope_analyzers::torch_trace::TorchLogs>,
    pub whatif: WhatIfSetup,
    /// Where the reads of long finished traces are kept between opens (none: nothing is kept).
    pub read_cache: Option<Arc<dyn kept::ReadCache>>,
}

/// The What-if tab's start.
#[derive(Clone, Default)]
pub struct WhatIfSetup {
    /// How to compile for a topology (the CLI's); without one the tab only shows `report`.
    pub launcher: Option<whatif::Launcher>,
    /// A what-if to show (`tpuscope whatif --format json`); the bundled sample's when no trace
    /// and no report is given.
    pub report: Option<tpuscope_analyzers::whatif::WhatIfReport>,
    /// Compile for this topology as the window opens.
    pub start: Option<String>,
}

impl std::fmt::Debug for WhatIfSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatIfSetup")
            .field("launcher", &self.launcher.is_some())
            .field("report", &self.report.as_ref().map(|r| &r.topology))
            .field("start", &self.start)
            .finish()
    }
}

/// Frames drawn before a screenshot is taken: layout settles over the first frames.
const SCREENSHOT_AFTER_FRAMES: u32 = 4;
/// Give up on a screenshot after this long.
const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens the window; returns when it is closed, or with the PNG of a screenshot.
pub fn run(opts: ViewOptions) -> anyhow::Result<Viewed> {
    let sources = data::open_all_with(&opts.traces, opts.follow, opts.read_cache.as_deref());
    let errors: Vec<&str> = sources.iter().filter_map(|s| s.error.as_deref()).collect();
    if opts.screenshot && !errors.is_empty() {
        // A picture of an error screen, or of some of the traces, is not what was asked for.
        return Err(anyhow!("{}; no screenshot taken", errors.join("; ")));
    }
    if !errors.is_empty() && sources.iter().all(|s| !s.has_trace()) {
        // Nothing to show: a window would only repeat the error.
        return Err(anyhow!("{}", errors.join("; ")));
    }
    let input_failed = !errors.is_empty();
    for e in errors {
        eprintln!("tpuscope: error: {e}");
    }
    let (w, h) = opts.size.unwrap_or((1400.0, 900.0));
    let mut viewport = egui::ViewportBuilder::default()
        .with_title("tpuscope")
        .with_inner_size([w, h]);
    if opts.screenshot {
        viewport = viewport.with_resizable(false);
    }
    let native = eframe::NativeOptions {
        viewport,
        renderer: eframe::Renderer::Glow,
        ..Default::default()
    };
    let outcome: ShotOutcome = Arc::new(Mutex::new(None));
    let shot = opts.screenshot.then(|| Shot {
        frames: 0,
        requested: false,
        started: Instant::now(),
        image: Arc::new(Mutex::new(None)),
        outcome: Arc::clone(&outcome),
    });
    let tab = opts.tab.unwrap_or(Tab::Summary);
    let torch_logs = opts.torch_logs;
    let mut whatif_setup = opts.whatif;
    if opts.traces.is_empty() && whatif_setup.report.is_none() {
        whatif_setup.report = data::sample_whatif();
    }
    let watch_paths: Vec<PathBuf> = sources
        .iter()
        .filter(|s| s.is_live())
        .filter_map(|s| s.path.clone())
        .collect();
    // Made (and its analysis started) before the window: they run while the window opens.
    let mut app = App::with_torch_logs(sources, tab, true, torch_logs);
    eframe::run_native(
        "tpuscope",
        native,
        Box::new(move |cc| {
            app.whatif = whatif::WhatIf::new(whatif_setup.launcher, whatif_setup.report);
            app.set_context(&cc.egui_ctx);
            if let Some(t) = whatif_setup.start {
                app.whatif.topology = t;
                app.whatif.start(&app.sources);
            }
            app.rec.auto_select = true;
            let watcher = watch(&watch_paths, &app, &cc.egui_ctx);
            Ok(Box::new(Native {
                app,
                shot,
                _watcher: watcher,
            }))
        }),
    )
    .map_err(|e| {
        anyhow!(
            "cannot open the window: {e} (is $DISPLAY set? on a headless machine use xvfb-run -a tpuscope view …)"
        )
    })?;
    let result = outcome.lock().map(|mut o| o.take()).unwrap_or(None);
    let png = match (opts.screenshot, result) {
        (false, _) => None,
        (true, Some(Ok(png))) => Some(png),
        (true, Some(Err(e))) => return Err(anyhow!(e)),
        (true, None) => return Err(anyhow!("the window closed before the screenshot was taken")),
    };
    Ok(Viewed { png, input_failed })
}

/// A file watcher that wakes the window when a followed trace changes.
fn watch(paths: &[PathBuf], app: &App, ctx: &egui::Context) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    if paths.is_empty() {
        return None;
    }
    let changed = Arc::clone(&app.changed);
    let ctx = ctx.clone();
    let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if ev.is_ok() {
            changed.store(true, Ordering::Relaxed);
            ctx.request_repaint();
        }
    })
    .ok()?;
    for p in paths {
        // Without notifications the app still checks the files every second.
        if let Err(e) = w.watch(p, notify::RecursiveMode::NonRecursive) {
            eprintln!("tpuscope: warning: cannot watch {}: {e}", p.display());
        }
    }
    Some(w)
}

/// The PNG of a screenshot, or why there is none; `None` until the window has tried.
type ShotOutcome = Arc<Mutex<Option<Result<Vec<u8>, String>>>>;

/// A pending `--screenshot`.
struct Shot {
    frames: u32,
    requested: bool,
    started: Instant,
    image: Arc<Mutex<Option<Arc<egui::ColorImage>>>>,
    outcome: ShotOutcome,
}

struct Native {
    app: App,
    shot: Option<Shot>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl eframe::App for Native {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        if self.shot.is_some() {
            // The screenshot shows the finished analysis and what-if, not a spinner.
            self.app.wait_analysis();
            self.app.whatif.wait();
        }
        self.app.ui(ui);
        let ctx = ui.ctx().clone();
        if let Some(shot) = &mut self.shot {
            shot.frames += 1;
            let taken = shot.image.lock().ok().and_then(|mut i| i.take());
            if let Some(img) = taken {
                let r = encode_png(&img);
                if let Ok(mut o) = shot.outcome.lock() {
                    *o = Some(r);
                }
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            } else if !shot.requested && shot.frames >= SCREENSHOT_AFTER_FRAMES {
                shot.requested = true;
                let slot = Arc::clone(&shot.image);
                let waker = ctx.clone();
                ctx.request_screenshot(move |img| {
                    if let Ok(mut s) = slot.lock() {
                        *s = Some(img);
                    }
                    waker.request_repaint();
                });
            } else if shot.started.elapsed() > SCREENSHOT_TIMEOUT {
                if let Ok(mut o) = shot.outcome.lock() {
                    *o = Some(Err(format!(
                        "no frame was captured for the screenshot in {} s (is the display working?)",
                        SCREENSHOT_TIMEOUT.as_secs()
                    )));
                }
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
            ctx.request_repaint();
        }
    }
}

fn encode_png(img: &egui::ColorImage) -> Result<Vec<u8>, String> {
    use image::ImageEncoder;
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let [w, h] = img.size;
    let mut rgba = Vec::with_capacity(w * h * 4);
    for p in &img.pixels {
        rgba.extend_from_slice(&p.to_srgba_unmultiplied());
    }
    let mut png = Vec::new();
    // Screenshots go into docs: the smaller file is worth the second it takes.
    PngEncoder::new_with_quality(&mut png, CompressionType::Best, FilterType::Adaptive)
        .write_image(&rgba, w as u32, h as u32, image::ExtendedColorType::Rgba8)
        .map_err(|e| format!("cannot encode the screenshot as PNG: {e}"))?;
    Ok(png)
}

/// What a PNG holds, for tests of screenshots: size, distinct colours, the share of the most
/// common colour, and whether a colour (within a tolerance) appears.
#[derive(Clone, Debug)]
pub struct PngStats {
    pub width: u32,
    pub height: u32,
    pub distinct_colours: usize,
    pub dominant_share: f64,
    pixels: Vec<[u8; 3]>,
}

impl PngStats {
    pub fn read(path: &std::path::Path) -> Result<PngStats, String> {
        let img = image::open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .to_rgb8();
        let pixels: Vec<[u8; 3]> = img.pixels().map(|p| p.0).collect();
        let mut counts: std::collections::HashMap<[u8; 3], usize> =
            std::collections::HashMap::new();
        for p in &pixels {
            *counts.entry(*p).or_default() += 1;
        }
        let top = counts.values().copied().max().unwrap_or(0);
        Ok(PngStats {
            width: img.width(),
            height: img.height(),
            distinct_colours: counts.len(),
            dominant_share: top as f64 / pixels.len().max(1) as f64,
            pixels,
        })
    }

    /// Pixels within `tol` of `rgb` in every channel.
    pub fn count_near(&self, rgb: [u8; 3], tol: u8) -> usize {
        self.pixels
            .iter()
            .filter(|p| p.iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= tol))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_watcher_flags_a_followed_file_that_grows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live.tps");
        let mut f = std::fs::File::create(&p).unwrap();
        let mut w = tpuscope_core::TraceWriter::new(Vec::new(), &Default::default()).unwrap();
        w.flush().unwrap();
        f.write_all(w.get_ref()).unwrap();
        f.flush().unwrap();
        let src = Source::open(&p, true);
        assert!(src.is_live());
        let app = App::new(vec![src], Tab::Timeline, false);
        let ctx = egui::Context::default();
        let watcher = watch(std::slice::from_ref(&p), &app, &ctx);
        assert!(watcher.is_some());
        assert!(!app.changed.load(Ordering::Relaxed));
        f.write_all(b"more bytes").unwrap();
        f.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !app.changed.load(Ordering::Relaxed) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            app.changed.load(Ordering::Relaxed),
            "no change notification"
        );
    }
}
