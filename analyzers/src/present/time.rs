//! Where the time goes: the headline split of each run, its phases, its devices, step-time
//! percentiles and the slow steps with what made them slow.

use super::{Align, Block, Line, Section, SectionId, Span, Table, Tone, run_suffix};
use crate::breakdown::{Category, DeviceTiming, RunBreakdown, TimeSplit};
use crate::report::Report;
use crate::units::{duration, ms, percent, plural};

/// Categories below this share are left out of a split's line (they are in the JSON).
const SHOWN_SHARE: f64 = 0.0005;

/// `devices busy 12% · compiling 40% · host-bound 47% · blocked on reads 1.0%`: the categories
/// of a split in headline order, with the badput ones toned when they dominate.
/// Why a run's device time is unknown, in the words every view shows (`None` when every launch
/// has its completion event).
pub fn device_time_unknown(t: &DeviceTiming) -> Option<String> {
    let untimed = t.launches.saturating_sub(t.timed);
    (untimed > 0).then(|| {
        format!(
            "device time unknown: {untimed} of {} {} no completion event (the frontend did not ask for one), so the time neither compiling nor blocked is not split into devices busy and host-bound",
            plural(t.launches, "launch", "launches"),
            if untimed == 1 { "has" } else { "have" }
        )
    })
}

pub fn split_line(s: &TimeSplit) -> Line {
    if s.wall_ms <= 0.0 {
        return Line::new("no time recorded", Tone::Dim);
    }
    let mut line = Line::default();
    for c in Category::ALL {
        let share = s.share(c);
        if share < SHOWN_SHARE && !(c == Category::DeviceBusy && s.untimed_ms == 0.0) {
            continue;
        }
        if !line.is_empty() {
            line = line.then(" · ");
        }
        let tone = match c {
            Category::DeviceBusy => Tone::Plain,
            Category::Untimed => Tone::Warn,
            _ if share >= 0.25 => Tone::Bad,
            _ => Tone::Plain,
        };
        line = line.and(format!("{} {}", c.label(), percent(share)), tone);
    }
    line
}

/// The section: the headline (the first run's, or all runs added up) as its summary, then per
/// run its wall time, throughput, phases, devices and slow steps.
pub fn time(r: &Report) -> Section {
    let Some(first) = r.time.first() else {
        return Section::new(
            SectionId::Time,
            "Where the time goes",
            Line::plain("no run"),
        );
    };
    let headline = if r.time.len() > 1 {
        crate::breakdown::sum(&r.time)
    } else {
        first.total
    };
    let mut s = Section::new(
        SectionId::Time,
        "Where the time goes",
        split_line(&headline),
    );
    for b in &r.time {
        run_blocks(r, b, &mut s);
    }
    s
}

fn run_blocks(r: &Report, b: &RunBreakdown, s: &mut Section) {
    let suffix = run_suffix(r, b.run);
    let mut head = format!("{} of wall time{suffix}", duration(b.total.wall_ms));
    if let (Some(sps), Some(p)) = (b.steps_per_s, b.step_time) {
        let per = match &b.batch {
            Some(x) => {
                let mut t = format!(
                    " ({} samples/s",
                    crate::units::num(x.samples_per_s.unwrap_or(0.0).round())
                );
                if let Some(tok) = x.tokens_per_s {
                    t.push_str(&format!(", {} tokens/s", crate::units::num(tok.round())));
                }
                t.push_str(&format!(" from the per-step inputs {})", x.inputs));
                t
            }
            None => String::new(),
        };
        head.push_str(&format!(
            "; steady state {:.1} steps/s{per}, step p50 {} ms · p90 {} ms · p99 {} ms",
            sps,
            ms(p.p50_ms),
            ms(p.p90_ms),
            ms(p.p99_ms)
        ));
    }
    s.line(1, Line::plain(head));
    if r.time.len() > 1 {
        s.line(2, split_line(&b.total));
    }
    let depth = if r.time.len() > 1 { 2 } else { 1 };
    // A phase of no length (a loop of one step has no steady state) says nothing.
    let lines: Vec<Line> = b
        .phases
        .iter()
        .filter(|(_, x)| x.wall_ms > 0.0)
        .map(|(p, x)| {
            Line::plain(format!("{:<13} {:>9}  ", p.as_str(), duration(x.wall_ms)))
                .and(split_line(x).text(), Tone::Plain)
        })
        .collect();
    if !lines.is_empty() {
        s.blocks.push(Block::Labeled {
            depth,
            label: Span::plain("phases:"),
            lines,
        });
    }
    // Under a millisecond blocked is not worth a line (the headline still has it).
    if b.total.blocked_ms >= 1.0 && b.device_timing.complete() {
        s.line(
            depth,
            Line::plain(format!(
                "blocked {} ms, of which {} ms waiting for device work to finish (the rest: copies and waits with the devices idle)",
                ms(b.total.blocked_ms),
                ms(b.total.blocked_on_device_ms)
            )),
        );
    }
    if let Some(unknown) = device_time_unknown(&b.device_timing) {
        s.blocks.push(Block::Para {
            depth,
            label: None,
            text: Line::new(unknown, Tone::Warn),
        });
    } else if !b.devices.is_empty() {
        let devices = b
            .devices
            .iter()
            .map(|d| {
                format!(
                    "device {} {} ({})",
                    d.device,
                    duration(d.busy_ms),
                    percent(d.utilisation)
                )
            })
            .collect::<Vec<_>>()
            .join(" · ");
        s.line(depth, Line::plain(format!("busy: {devices}")));
    }
    if !b.slow_steps.is_empty() {
        s.line(
            depth,
            Line::plain(format!(
                "{} at least twice the median step:",
                plural(b.slow_steps.len() as u64, "step", "steps")
            )),
        );
        let mut t = Table::new(&[
            ("step", Align::Right),
            ("ms", Align::Right),
            ("× median", Align::Right),
            ("why", Align::Left),
        ]);
        for x in &b.slow_steps {
            let mut why = format!("{} +{} ms", x.cause.label(), ms(x.cause_extra_ms));
            if !x.notes.is_empty() {
                why.push_str(&format!(": {}", x.notes.join(", ")));
            }
            t.row(
                vec![
                    Line::plain(x.number.to_string()),
                    Line::plain(ms(x.ms)),
                    Line::plain(format!("{:.1}", x.times_median)),
                    Line::plain(why),
                ],
                None,
            );
        }
        s.table(depth + 1, t);
    }
}
