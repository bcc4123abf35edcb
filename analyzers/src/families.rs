//! Graph families: the compiles of one graph, and why each one after the first happened.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

use crate::diff::{Cause, Diff, diff_programs};
use crate::digest::Digest;
use crate::phases::{Origin, origin_of_name, origin_of_stack};
use crate::program::{Program, decode_compile};
use crate::source::{SourceLoc, library_frame, outside_frame, user_frame};

/// One compile, with what the analyses need from it.
#[derive(Clone, Debug)]
pub struct CompileView {
    /// Index of the trace among the analysed ones.
    pub run: usize,
    /// Index of the record in `trace.events`.
    pub event: usize,
    pub t_ns: u64,
    /// Where the compile belongs in the run: the first launch of what it compiled (else its own
    /// start). TorchTPU compiles on a thread that runs ahead of the one that launches, so a
    /// compile's own time can fall steps before the program is needed; the launch cannot. (The
    /// report uses the compile's own time when steps are cut at markers: see `report::analyze`.)
    pub at_ns: u64,
    pub dur_ns: u64,
    pub name: String,
    pub program_hash: u64,
    pub program_format: String,
    pub options_hash: u64,
    pub executable_id: u64,
    pub stack: u32,
    pub source: Option<SourceLoc>,
    pub failed: bool,
    pub program: Option<Arc<Program>>,
    /// Equal for the same program (decoded: names and ids ignored; else the raw bytes).
    pub same_program_key: u64,
    /// A graph (families are made of these) or an eager op (grouped by call site instead).
    pub origin: Origin,
    /// The library frame that asked for it, for ops a library's code ran (flax's initializers).
    pub library: Option<SourceLoc>,
    /// Not a compile: an executable compiled before `tpuscope attach` (an `ExecutableSeen`),
    /// the program the first compile after the attach is compared with. Never counted.
    pub before_attach: bool,
}

/// The compiles of a run (its trace's tables and the digest of its events), with programs
/// decoded once per distinct blob.
pub fn compiles(trace: &Trace, d: &Digest, run: usize) -> Vec<CompileView> {
    let frontend = crate::report::frontend_of(trace);
    // Each compile's first launch of its executable at or after it (ids are handles: a freed
    // one may be reused later), found in one pass over the launches without keeping them.
    // Per id, (compile time, first launch since) sorted by time: the answers never decrease.
    let mut first_after: rustc_hash::FxHashMap<u64, Vec<(u64, u64)>> =
        rustc_hash::FxHashMap::default();
    for (_, r) in d.others() {
        if let Record::Compile(c) = r {
            first_after
                .entry(c.executable_id)
                .or_default()
                .push((c.t_ns, u64::MAX));
        }
    }
    for v in first_after.values_mut() {
        v.sort_unstable();
    }
    let summaries = d.others().filter_map(|(_, r)| match r {
        Record::ExecuteSummary(e) => Some((e.executable_id, e.t_start_ns)),
        _ => None,
    });
    for (id, t) in d
        .launches()
        .map(|l| (l.executable_id, l.t_ns))
        .chain(summaries)
    {
        let Some(v) = first_after.get_mut(&id) else {
            continue;
        };
        let k = v.partition_point(|&(c, _)| c <= t);
        for (_, first) in v.get_mut(..k).unwrap_or_default().iter_mut().rev() {
            if *first <= t {
                break;
            }
            *first = t;
        }
    }
    let first_launch_after = |id: u64, t: u64| {
        let v = first_after.get(&id)?;
        let &(_, first) = v.get(v.partition_point(|&(c, _)| c < t))?;
        (first != u64::MAX).then_some(first)
    };
    let mut decoded: HashMap<(u64, u64), Option<Arc<Program>>> = HashMap::new();
    // What a compile's stack says, once per stack (a long run compiles from a few sites, and
    // each question walks the stack's frames classifying their files).
    type StackFacts = (
        Option<SourceLoc>,
        Option<Origin>,
        Option<SourceLoc>,
        Option<SourceLoc>,
    );
    let mut by_stack: rustc_hash::FxHashMap<u32, StackFacts> = rustc_hash::FxHashMap::default();
    let mut out = Vec::new();
    for (event, r) in d.others() {
        let Record::Compile(c) = r else { continue };
        let (caller, stack_origin, user, library) = by_stack
            .entry(c.stack)
            .or_insert_with(|| {
                (
                    outside_frame(trace, c.stack),
                    origin_of_stack(trace, c.stack),
                    user_frame(trace, c.stack),
                    library_frame(trace, c.stack),
                )
            })
            .clone();
        let program = decoded
            .entry((c.program_hash, c.optimized_hash))
            .or_insert_with(|| {
                let input = trace
                    .blobs
                    .get(&c.program_hash)
                    .filter(|_| c.program_hash != 0)
                    .map(|b| (c.program_format.as_str(), b.data.as_slice()));
                let optimized = trace
                    .blobs
                    .get(&c.optimized_hash)
                    .filter(|_| c.optimized_hash != 0)
                    .map(|b| (c.optimized_format.as_str(), b.data.as_slice()));
                decode_compile(input, optimized).map(Arc::new)
            })
            .clone();
        let same_program_key = match (&program, c.program_format.as_str()) {
            // The input program decoded: equal modulo names and ids (which count up per process).
            (Some(p), "hlo" | "hlo_with_config") => p.exact_key,
            _ => c.program_hash,
        };
        let origin = match stack_origin {
            Some(Origin::Graph)
                if caller.is_some()
                    && program.as_ref().and_then(|p| p.body_frame.as_ref()) == caller.as_ref() =>
            {
                Origin::Op
            }
            Some(o) => o,
            None => origin_of_name(&frontend, &c.executable_name).unwrap_or_else(|| {
                program
                    .as_ref()
                    .map_or(Origin::Graph, |p| origin_of_program(p))
            }),
        };
        out.push(CompileView {
            run,
            event,
            t_ns: c.t_ns,
            at_ns: first_launch_after(c.executable_id, c.t_ns).unwrap_or(c.t_ns),
            dur_ns: c.dur_ns,
            name: c.executable_name.clone(),
            program_hash: c.program_hash,
            program_format: c.program_format.clone(),
            options_hash: c.options_hash,
            executable_id: c.executable_id,
            stack: c.stack,
            source: user.or_else(|| program.as_ref().and_then(|p| p.call_site.clone())),
            failed: c.error.is_some(),
            program,
            same_program_key,
            origin,
            library,
            before_attach: false,
        });
    }
    out
}

/// The executables an attached trace saw compiled before the attach (its `ExecutableSeen`
/// records), as the first members their graphs' families compare with; empty for other traces.
/// Their programs are the optimized HLO.
pub fn seen_before_attach(trace: &Trace, d: &Digest, run: usize) -> Vec<CompileView> {
    let frontend = crate::report::frontend_of(trace);
    d.others()
        .filter_map(|(event, r)| match r {
            Record::ExecutableSeen(x) => Some((event, x)),
            _ => None,
        })
        .map(|(event, x)| {
            let optimized = trace
                .blobs
                .get(&x.optimized_hash)
                .filter(|_| x.optimized_hash != 0)
                .map(|b| (x.optimized_format.as_str(), b.data.as_slice()));
            let program = decode_compile(None, optimized).map(Arc::new);
            let origin = origin_of_name(&frontend, &x.executable_name).unwrap_or_else(|| {
                program
                    .as_ref()
                    .map_or(Origin::Graph, |p| origin_of_program(p))
            });
            CompileView {
                run,
                event,
                t_ns: x.t_ns,
                at_ns: x.t_ns,
                dur_ns: 0,
                name: x.executable_name.clone(),
                program_hash: x.optimized_hash,
                program_format: x.optimized_format.clone(),
                options_hash: 0,
                executable_id: x.executable_id,
                stack: 0,
                source: program.as_ref().and_then(|p| p.call_site.clone()),
                failed: false,
                same_program_key: program.as_ref().map_or(x.optimized_hash, |p| p.exact_key),
                program,
                origin,
                library: None,
                before_attach: true,
            }
        })
        .collect()
}

/// [`seen_before_attach`] then [`compiles`]: the list an attached trace's families are made of
/// (member indexes point into it), of a run's trace tables and digest.
pub fn compiles_and_baselines(trace: &Trace, d: &Digest, run: usize) -> Vec<CompileView> {
    let mut all = seen_before_attach(trace, d, run);
    all.extend(compiles(trace, d, run));
    all
}

/// Whether a compile's program was decoded from its input HLO (torch_xla): it cannot be compared
/// with an optimized program from before an attach.
fn from_input_hlo(c: &CompileView) -> bool {
    !c.before_attach && matches!(c.program_format.as_str(), "hlo" | "hlo_with_config")
}

/// Opcodes that carry no computation of their own.
const PLUMBING: &[&str] = &[
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "copy",
    "reshape",
    "broadcast",
];

/// Without a stack, a program that does one thing is taken for an eager op. Its work is counted
/// over all computations (so a fusion counts for what it fuses), leaving out plumbing and the
/// scalar reducers that `reduce` and friends apply.
fn origin_of_program(p: &Program) -> Origin {
    const WITH_REDUCER: &[&str] = &[
        "reduce",
        "reduce-window",
        "scatter",
        "select-and-scatter",
        "sort",
        "map",
        "all-reduce",
        "reduce-scatter",
    ];
    let reducers: std::collections::HashSet<i64> = p
        .module
        .computations
        .iter()
        .flat_map(|c| &c.instructions)
        .filter(|i| WITH_REDUCER.contains(&i.opcode.as_str()))
        .flat_map(|i| i.called_computation_ids.iter().copied())
        .collect();
    let work = p
        .module
        .computations
        .iter()
        .filter(|c| !reducers.contains(&c.id))
        .flat_map(|c| &c.instructions)
        .filter(|i| !PLUMBING.contains(&i.opcode.as_str()) && i.opcode != "fusion")
        .count();
    if work <= 1 { Origin::Op } else { Origin::Graph }
}

/// `SyncTensorsGraph.52` → `SyncTensorsGraph`: torch_xla numbers its graphs.
pub fn graph_name(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((base, n)) if !base.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => name,
    }
}

/// A compile in a family: which earlier member it is compared with, and what changed.
#[derive(Clone, Debug)]
pub struct Member {
    /// Index into the compile list.
    pub compile: usize,
    /// The earlier member it is compared with (index into the compile list).
    pub against: Option<usize>,
    pub diff: Option<Diff>,
}

/// The compiles of one graph.
#[derive(Clone, Debug)]
pub struct Family {
    pub graph: String,
    pub run: usize,
    pub structure_key: Option<u64>,
    pub members: Vec<Member>,
}

impl Family {
    /// The cause of most members after the first (ties: the earliest seen).
    pub fn cause(&self) -> Option<Cause> {
        self.cause_among(|_| true)
    }

    /// The cause of most of the members `keep` selects (ties: the earliest seen).
    pub fn cause_among(&self, keep: impl Fn(&Member) -> bool) -> Option<Cause> {
        let mut counts: Vec<(Cause, usize)> = Vec::new();
        for d in self
            .members
            .iter()
            .filter(|m| keep(m))
            .filter_map(|m| m.diff.as_ref())
        {
            match counts.iter_mut().find(|(c, _)| *c == d.cause) {
                Some((_, n)) => *n += 1,
                None => counts.push((d.cause, 1)),
            }
        }
        let best = counts.iter().map(|(_, n)| *n).max()?;
        counts.iter().find(|(_, n)| *n == best).map(|(c, _)| *c)
    }
}

/// Two differently-structured programs of the same graph name and call site are one family when
/// they share at least this share of their ops: XLA fuses differently for different shapes, and
/// a data-dependent branch changes only part of a graph.
const MERGE_SIMILARITY: f64 = 0.5;

/// Groups the (successful) compiles of one run into families and diffs each member.
pub fn families(compiles: &[CompileView]) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for (idx, c) in compiles.iter().enumerate() {
        // Ops are grouped by call site, not into families (`phases`).
        if c.failed || c.origin == Origin::Op {
            continue;
        }
        let name = graph_name(&c.name);
        let structure = c.program.as_ref().map(|p| p.structure_key);
        // A program from before an attach (optimized HLO) only meets compiles whose program is
        // the optimized HLO too.
        let comparable =
            |f: &Family| !(from_input_hlo(c) && compiles[f.members[0].compile].before_attach);
        let exact = families.iter().position(|f| {
            f.run == c.run
                && graph_name(&f.graph) == name
                && f.structure_key == structure
                && (structure.is_some() || same_site(compiles, f, c))
                && comparable(f)
        });
        let joined = exact.or_else(|| {
            let p = c.program.as_ref()?;
            families
                .iter()
                .enumerate()
                .filter(|(_, f)| {
                    f.run == c.run
                        && graph_name(&f.graph) == name
                        && same_site(compiles, f, c)
                        && comparable(f)
                })
                .filter_map(|(i, f)| {
                    let first = compiles[f.members[0].compile].program.as_ref()?;
                    let s = first.similarity(p);
                    (s >= MERGE_SIMILARITY).then_some((i, s))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i)
        });
        match joined {
            // One program from before the attach per family: the one its compiles are
            // compared with (a second is not a recompile anybody saw).
            Some(_) if c.before_attach => {}
            Some(i) => {
                let f = &mut families[i];
                let against = nearest_sibling(compiles, f, c);
                let diff = Some(member_diff(&compiles[against], c));
                f.members.push(Member {
                    compile: idx,
                    against: Some(against),
                    diff,
                });
            }
            None => families.push(Family {
                graph: c.name.clone(),
                run: c.run,
                structure_key: structure,
                members: vec![Member {
                    compile: idx,
                    against: None,
                    diff: None,
                }],
            }),
        }
    }
    families
}

/// Same call site: the user lines of the compiles match. Two unknown sites are the same only
/// for an exact structure match: similar-looking graphs from nowhere in particular (eager ops)
/// are not one family.
fn same_site(compiles: &[CompileView], f: &Family, c: &CompileView) -> bool {
    let first = &compiles[f.members[0].compile].source;
    first.is_some() && *first == c.source
}

/// The earlier member with the same program if there is one (a cache miss), else the latest
/// with the same parameter types (what changed is then in the program, not its inputs: a loop
/// that alternates two batch shapes and recompiles both for each new baked-in value is told as
/// the value changing, not as shapes churning), else the latest.
fn nearest_sibling(compiles: &[CompileView], f: &Family, c: &CompileView) -> usize {
    let earlier = || f.members.iter().rev().map(|m| m.compile);
    let same_params = |i: usize| {
        let (a, b) = (compiles[i].program.as_ref(), c.program.as_ref());
        a.zip(b).is_some_and(|(a, b)| {
            a.params.len() == b.params.len()
                && a.params
                    .iter()
                    .zip(&b.params)
                    .all(|(x, y)| x.dtype == y.dtype && x.dims == y.dims)
        })
    };
    earlier()
        .find(|&i| compiles[i].same_program_key == c.same_program_key)
        .or_else(|| earlier().find(|&i| same_params(i)))
        .unwrap_or_else(|| f.members.last().map_or(0, |m| m.compile))
}

fn member_diff(a: &CompileView, b: &CompileView) -> Diff {
    // The options of an executable compiled before an attach are not known: not a difference.
    let options_equal = a.options_hash == b.options_hash || a.before_attach || b.before_attach;
    match (&a.program, &b.program) {
        (Some(pa), Some(pb)) => diff_programs(pa, pb, options_equal),
        _ if a.program_hash == b.program_hash && options_equal => Diff {
            cause: Cause::IdenticalProgram,
            summary: "the same program was compiled again".to_string(),
            ..empty_diff()
        },
        _ if a.program_hash == b.program_hash => Diff {
            cause: Cause::OptionsChanged,
            summary: "the same program was compiled with different compile options".to_string(),
            ..empty_diff()
        },
        _ => Diff {
            cause: Cause::Unknown,
            summary: format!(
                "the {} programs differ ({:016x} → {:016x}) and no decodable HLO was recorded",
                b.program_format, a.program_hash, b.program_hash
            ),
            ..empty_diff()
        },
    }
}

fn empty_diff() -> Diff {
    Diff {
        cause: Cause::Unknown,
        summary: String::new(),
        params: Vec::new(),
        constants: Vec::new(),
        ops_added: Default::default(),
        ops_removed: Default::default(),
        params_count: None,
        ops_source: None,
    }
}

/// Serializable pointer to a member, for reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberRef {
    pub run: usize,
    pub event: usize,
}
