//! Replays a recorded trace in the live view, as if the workload were running now.
//!
//! `cargo run -p tpuscope-tui --example replay -- TRACE.tps [SPEED]` (SPEED: stream seconds per
//! wall second, default 1). Every 250 ms the bytes "received" so far are decoded, analysed and
//! shown, the way `tpuscope attach` does with its socket stream; keys as in the real view.
//! `TPUSCOPE_REPLAY_PANIC=1` panics after two seconds (to check that the terminal is restored).

use std::error::Error;
use std::time::{Duration, Instant};

use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::event::RecordKind;
use tpuscope_core::format::FRAME_HEADER_LEN;
use tpuscope_core::reader::{FrameItem, FrameIter, parse_header};
use tpuscope_core::{Record, read_trace};
use tpuscope_tui::crossterm::event::{self, Event};
use tpuscope_tui::{Action, App, Extra, Model, RunState, term, view};

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: replay TRACE.tps [SPEED]")?;
    let speed: f64 = args.next().map_or(Ok(1.0), |s| s.parse())?;
    let bytes = std::fs::read(&path)?;
    let header = parse_header(&bytes)?;
    let start_mono = read_trace(&bytes)?.manifest.map_or(0, |m| m.start_mono_ns);
    // (end offset, time since start) of each frame; times made non-decreasing so that a prefix of
    // the stream is what arrived by then.
    let mut frames: Vec<(usize, u64)> = Vec::new();
    let mut t_max = 0;
    for item in FrameIter::new(&bytes, header.len) {
        if let FrameItem::Frame(f) = item {
            let t = RecordKind::from_u16(f.kind)
                .and_then(|k| Record::decode_payload(k, f.payload).ok())
                .and_then(|r| r.t_ns())
                .map_or(0, |t| t.saturating_sub(start_mono));
            t_max = t_max.max(t);
            frames.push((
                f.offset as usize + FRAME_HEADER_LEN + f.payload.len(),
                t_max,
            ));
        }
    }
    let panic_at = std::env::var_os("TPUSCOPE_REPLAY_PANIC").map(|_| Duration::from_secs(2));

    let mut terminal = term::init()?;
    let started = Instant::now();
    let mut app = App::new();
    let mut last_rebuild: Option<Instant> = None;
    let result = (|| -> Result<(), Box<dyn Error>> {
        loop {
            let wall = started.elapsed();
            let now_ms = wall.as_millis() as u64;
            if last_rebuild.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
                let stream_ns = (wall.as_secs_f64() * speed * 1e9) as u64;
                let n = frames.partition_point(|f| f.1 <= stream_ns);
                let end = frames.get(n.wrapping_sub(1)).map_or(header.len, |f| f.0);
                let trace = read_trace(&bytes[..end])?;
                let report = report::build(
                    &[Input::new(path.clone(), &trace)],
                    &report::Options::default(),
                );
                let state = if n == frames.len() {
                    RunState::Ended
                } else {
                    RunState::Live
                };
                let now_ns = (state == RunState::Live).then_some(start_mono + stream_ns);
                let extra = Extra {
                    state,
                    ..Extra::default()
                };
                app.set_model(Model::build(&trace, report, now_ns, extra), now_ms);
                last_rebuild = Some(Instant::now());
            }
            if panic_at.is_some_and(|p| wall >= p) {
                panic!("replay: panic on request");
            }
            app.tick(now_ms);
            terminal.draw(|f| view::draw_app(f, &mut app))?;
            if event::poll(Duration::from_millis(100))?
                && let Event::Key(k) = event::read()?
                && app.handle_key(k, started.elapsed().as_millis() as u64) == Action::Quit
            {
                return Ok(());
            }
        }
    })();
    term::restore();
    result
}
