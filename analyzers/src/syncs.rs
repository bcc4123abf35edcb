//! Host syncs: where the host waited for the device, by the user's line.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record};

use crate::digest::Digest;
use crate::source::{SourceLoc, innermost_frame, library_frame, user_frame};

/// One host sync.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncView {
    pub run: usize,
    /// Its record: the index in the run's `trace.events`.
    pub event: usize,
    pub t_ns: u64,
    pub stall_ns: u64,
    pub bytes: u64,
    /// `float32[8,16]` for reads, the wait's reason otherwise.
    pub what: String,
    /// Where it was made: shared by the syncs of one stack (a loop syncs from a handful).
    pub site: Arc<SyncSite>,
}

/// Where a host sync was made.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncSite {
    pub source: Option<SourceLoc>,
    /// The innermost frame when no frame is the user's.
    pub innermost: Option<SourceLoc>,
    /// The library frame that read, when the user's line called into a library that did.
    pub library: Option<SourceLoc>,
}

/// The host syncs of a trace: device-to-host reads that blocked the caller, and waits on device
/// events from a Python thread. Waits of the runtime's own threads (no Python stack) are the
/// frontend's business, not a user's line, and are counted apart.
pub fn host_syncs(trace: &Trace, d: &Digest, run: usize) -> (Vec<SyncView>, u64) {
    let mut out = Vec::new();
    let mut runtime_waits = 0;
    // A loop syncs from a handful of stacks: resolve each once.
    let mut sites: HashMap<u32, Arc<SyncSite>> = HashMap::new();
    let mut site_of = |stack: u32| {
        Arc::clone(sites.entry(stack).or_insert_with(|| {
            Arc::new(SyncSite {
                source: user_frame(trace, stack),
                innermost: innermost_frame(trace, stack),
                library: library_frame(trace, stack),
            })
        }))
    };
    // Blocking reads and waits are among the records the digest keeps whole.
    for (event, r) in d.others() {
        match r {
            Record::Transfer(t) if t.direction == Direction::D2h as i32 && t.sync => {
                let mut what = format!("{}[", t.dtype);
                for (i, d) in t.dims.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    let _ = write!(what, "{sep}{d}");
                }
                what.push(']');
                out.push(SyncView {
                    run,
                    event,
                    t_ns: t.t_ns,
                    stall_ns: t.blocked_ns,
                    bytes: t.bytes,
                    what,
                    site: site_of(t.stack),
                });
            }
            Record::Sync(s) => {
                if s.stack == 0 || !trace.stacks.contains_key(&s.stack) {
                    runtime_waits += 1;
                    continue;
                }
                out.push(SyncView {
                    run,
                    event,
                    t_ns: s.t_ns,
                    stall_ns: s.dur_ns,
                    bytes: 0,
                    what: s.reason.clone(),
                    site: site_of(s.stack),
                });
            }
            _ => {}
        }
    }
    (out, runtime_waits)
}

/// Syncs grouped by the user line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyncLine {
    /// The user's line; absent when the sync came from no user code (then `innermost` says where).
    pub source: Option<SourceLoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub innermost: Option<SourceLoc>,
    /// The library frame that does the read, when it is inside a library the user's line
    /// calls (with its function): the user's line is where to act, this is what reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<SourceLoc>,
    pub count: u64,
    pub bytes: u64,
    pub stall_ms: f64,
    /// Stall divided by the number of steps (absent without steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_ms_per_step: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_step: Option<f64>,
    /// In how many steady-state steps this line synced.
    pub steps_with_sync: u32,
    /// What was read (shapes) or waited on, up to five.
    pub what: Vec<String>,
    pub suggestion: String,
    /// Its syncs, in the order the report's runs and their records come: (run, index in that
    /// run's `trace.events`). For views that list or mark them; not in the JSON (a report read
    /// back has none).
    #[serde(skip)]
    pub events: Vec<(usize, usize)>,
}

/// Groups syncs by user line, most stall first. `step_of` maps a time to the index of the
/// steady-state step that holds it.
pub fn group(
    syncs: &[SyncView],
    steps: usize,
    torch: bool,
    step_of: impl Fn(usize, u64) -> Option<usize>,
) -> Vec<SyncLine> {
    /// (user line, innermost frame without one, library frame that read).
    type Key = (Option<SourceLoc>, Option<SourceLoc>, Option<SourceLoc>);
    /// count, bytes, stall, (run, step) pairs it synced in, what it read, its (run, event)s.
    type Acc = (
        u64,
        u64,
        u64,
        BTreeSet<(usize, usize)>,
        BTreeSet<String>,
        Vec<(usize, usize)>,
    );
    let key_of = |site: &SyncSite| -> Key {
        match &site.source {
            Some(src) => (Some(strip_function(src)), None, site.library.clone()),
            None => (None, site.innermost.as_ref().map(strip_function), None),
        }
    };
    // Each group's place in `accs`, by key; each site's group, found once per site rather than
    // once per sync (the syncs of a stack share one site).
    let mut group_at: BTreeMap<Key, usize> = BTreeMap::new();
    let mut site_group: HashMap<*const SyncSite, usize> = HashMap::new();
    let mut accs: Vec<Acc> = Vec::new();
    // The sites in the order their first sync came.
    let mut sites: Vec<&SyncSite> = Vec::new();
    for s in syncs {
        let at = *site_group.entry(Arc::as_ptr(&s.site)).or_insert_with(|| {
            sites.push(&s.site);
            *group_at.entry(key_of(&s.site)).or_insert_with(|| {
                accs.push(Acc::default());
                accs.len() - 1
            })
        });
        let Some(g) = accs.get_mut(at) else { continue };
        g.0 += 1;
        g.1 += s.bytes;
        g.2 += s.stall_ns;
        if let Some(i) = step_of(s.run, s.t_ns) {
            g.3.insert((s.run, i));
        }
        if g.4.len() < 5 {
            g.4.insert(s.what.clone());
        }
        g.5.push((s.run, s.event));
    }
    // The function of the first sync at that line: of the first site there, in that order.
    let function_of = |src: &SourceLoc| {
        sites
            .iter()
            .filter_map(|s| s.source.as_ref())
            .find(|s| s.file == src.file && s.line == src.line)
            .map(|s| s.function.clone())
            .unwrap_or_default()
    };
    let mut lines: Vec<SyncLine> = group_at
        .into_iter()
        .filter_map(|(key, at)| Some((key, std::mem::take(accs.get_mut(at)?))))
        .map(|((source, innermost, library), (count, bytes, stall, in_steps, what, events))| {
            let source = source.map(|s| SourceLoc {
                function: function_of(&s),
                ..s
            });
            let stall_ms = stall as f64 / 1e6;
            let per_step = (steps > 0).then(|| count as f64 / steps as f64);
            let suggestion = match (&source, &library) {
                (Some(src), Some(lib)) => library_fix(src, lib, count, stall_ms, &what, torch),
                (Some(src), None) => fix(src, count, stall_ms, &what, torch),
                (None, _) => "a read from framework code with no user frame: look at the stack in `tpuscope dump`".to_string(),
            };
            SyncLine {
                source,
                innermost,
                library,
                count,
                bytes,
                stall_ms,
                stall_ms_per_step: (steps > 0).then(|| stall_ms / steps as f64),
                per_step,
                steps_with_sync: u32::try_from(in_steps.len()).unwrap_or(u32::MAX),
                what: what.into_iter().collect(),
                suggestion,
                events,
            }
        })
        .collect();
    lines.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(b.stall_ms.total_cmp(&a.stall_ms))
            .then(a.source.cmp(&b.source))
    });
    lines
}

/// The fix for a sync line, by what it read: a `pred[]` is a Python `if` on a device value, a
/// scalar is a logged or checked metric, anything else a result pulled to the host.
fn fix(src: &SourceLoc, count: u64, stall_ms: f64, what: &BTreeSet<String>, torch: bool) -> String {
    let blocks = format!("{src} blocks the host {count}× ({stall_ms:.3} ms)");
    let scalar = |w: &String| w.ends_with("[]");
    if what.iter().any(|w| w.starts_with("pred")) {
        let instead = if torch {
            "`torch.where(cond, a, b)`"
        } else {
            "`jnp.where` or `jax.lax.cond`"
        };
        format!(
            "{blocks}: a Python `if` on a device value reads it every time — decide on the device with {instead}"
        )
    } else if !what.is_empty() && what.iter().all(scalar) {
        let read = if torch {
            "`.item()`"
        } else {
            "`float()`/`.item()`"
        };
        format!(
            "{blocks}: a {read} of a scalar — keep the metric on the device (accumulate it) and read it every N steps or after the loop"
        )
    } else {
        format!(
            "{blocks}: move the read out of the step, read less often, or copy asynchronously (`copy_to_host_async` / `non_blocking=True`) and consume it a step later"
        )
    }
}

/// The fix for a read a library does inside the user's call: what is known about that library's
/// read (a change the user can make from outside it), else a plain statement that the read is
/// the library's.
fn library_fix(
    src: &SourceLoc,
    lib: &SourceLoc,
    count: u64,
    stall_ms: f64,
    what: &BTreeSet<String>,
    torch: bool,
) -> String {
    let package = library_package(&lib.file);
    let blocks = format!(
        "{src} blocks the host {count}× ({stall_ms:.3} ms) inside {package}: `{}` reads {} at {lib}",
        lib.function,
        what.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    match crate::library_reads::known(lib, torch) {
        Some(k) => format!("{blocks}. {} — {}", k.why, k.fix),
        None => format!(
            "{blocks}. The read is {package}'s own, not a line of yours: look for an option of the call at {src} that avoids it (or call it less often); otherwise it is a cost of using {package} this way"
        ),
    }
}

/// `transformers` for `.../site-packages/transformers/masking_utils.py`.
pub fn library_package(file: &str) -> &str {
    ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| file.find(m).map(|i| &file[i + m.len()..]))
        .and_then(|rest| rest.split('/').next())
        .map_or(file, |p| p.strip_suffix(".py").unwrap_or(p))
}

fn strip_function(s: &SourceLoc) -> SourceLoc {
    SourceLoc {
        file: s.file.clone(),
        line: s.line,
        function: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(run: usize, event: usize, line: u32) -> SyncView {
        SyncView {
            run,
            event,
            t_ns: 0,
            stall_ns: 1,
            bytes: 4,
            what: "f32[]".into(),
            site: Arc::new(SyncSite {
                source: Some(SourceLoc {
                    file: "train.py".into(),
                    line,
                    function: "main".into(),
                }),
                innermost: None,
                library: None,
            }),
        }
    }

    #[test]
    fn the_syncs_of_one_line_group_together_whatever_their_stack() {
        // Two stacks through one line (another caller's function name, or another run's
        // stack table): two sites, one line, each sync counted once, in order.
        let mut other = view(1, 9, 10);
        other.site = Arc::new(SyncSite {
            source: other.site.source.clone().map(|s| SourceLoc {
                function: "step".into(),
                ..s
            }),
            innermost: None,
            library: None,
        });
        other.what = "s32[]".into();
        let syncs = [view(0, 3, 10), other, view(0, 5, 10), view(0, 7, 20)];
        let lines = group(&syncs, 0, false, |_, _| None);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].count, 3);
        assert_eq!(lines[0].events, [(0, 3), (1, 9), (0, 5)]);
        assert_eq!(lines[0].what, ["f32[]", "s32[]"]);
        assert_eq!(lines[1].events, [(0, 7)]);
    }

    #[test]
    fn a_line_keeps_the_records_of_its_syncs() {
        let syncs = [view(0, 3, 10), view(0, 7, 20), view(1, 2, 10)];
        let lines = group(&syncs, 0, false, |_, _| None);
        assert_eq!(lines[0].events, [(0, 3), (1, 2)]);
        assert_eq!(lines[1].events, [(0, 7)]);
    }
}
