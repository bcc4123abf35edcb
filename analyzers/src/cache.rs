//! Compile caches: in-memory reuse, persistent stores and loads, and the hits that should have
//! been.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};
use tpuscope_core::event::Record;

use crate::digest::Digest;
use crate::families::CompileView;

/// A deserialize failure, by message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadFailure {
    pub message: String,
    pub count: u64,
}

/// An executable stored to the persistent cache in one run and compiled again in a later one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredNotLoaded {
    pub graph: String,
    pub stored_in_run: usize,
    pub recompiled_in_run: usize,
    /// Loads the later run asked the plugin for, successful or not: 0 means the frontend never
    /// tried (it rejected the entry itself, or looked elsewhere).
    pub loads_attempted_in_run: u64,
}

/// Cache behaviour over all analysed runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheReport {
    /// Distinct executables launched, and launches of an executable already launched before.
    pub executables_run: u64,
    pub in_memory_reuse: u64,
    /// Successful loads from the persistent cache (`DeserializeAndLoad`).
    pub persistent_hits: u64,
    pub persistent_stores: u64,
    pub deserialize_failures: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<LoadFailure>,
    /// Compiles of a program (and options) already compiled earlier in this run or an earlier
    /// given run: the hits that should have been.
    pub recompiled_same_program: u64,
    /// Of those, compiles of a program that an earlier run stored: the cache was written but not
    /// read back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stored_but_recompiled: Vec<StoredNotLoaded>,
}

/// What [`cache`] reads of one run's events: made per run, beside its other analyses.
#[derive(Debug, Default)]
pub(crate) struct RunCache {
    executables_run: u64,
    in_memory_reuse: u64,
    persistent_hits: u64,
    persistent_stores: u64,
    deserialize_failures: u64,
    failures: BTreeMap<String, u64>,
    /// Names of the executables it stored.
    stored: HashSet<String>,
    /// Loads it asked the plugin for.
    load_attempts: u64,
}

impl RunCache {
    pub(crate) fn of(d: &Digest) -> RunCache {
        let mut out = RunCache::default();
        let mut launched: rustc_hash::FxHashSet<u64> = rustc_hash::FxHashSet::default();
        // Executes in file order among the summaries (a summary's first launch counts once).
        let mut launches = d.launches().peekable();
        // The executable launched last: launched before (runs of one executable are common).
        let mut last = None;
        let mut reuse = |launched: &mut rustc_hash::FxHashSet<u64>, id: u64| {
            let again = last == Some(id) || !launched.insert(id);
            last = Some(id);
            u64::from(again)
        };
        for (i, r) in d.others() {
            while let Some(e) = launches.next_if(|e| (e.event as usize) < i) {
                out.in_memory_reuse += reuse(&mut launched, e.executable_id);
            }
            if matches!(r, Record::CacheLoad(_)) {
                out.load_attempts += 1;
            }
            match r {
                Record::ExecuteSummary(e) => {
                    let first = u64::from(launched.insert(e.executable_id));
                    out.in_memory_reuse += e.count.saturating_sub(first);
                }
                Record::CacheStore(s) if s.error.is_none() => {
                    out.persistent_stores += 1;
                    out.stored.insert(s.executable_name.clone());
                }
                Record::CacheLoad(l) if l.ok => out.persistent_hits += 1,
                Record::CacheLoad(l) => {
                    out.deserialize_failures += 1;
                    let msg = l
                        .error
                        .as_ref()
                        .map_or_else(|| "unknown error".to_string(), |e| e.message.clone());
                    *out.failures.entry(msg).or_default() += 1;
                }
                _ => {}
            }
        }
        for e in launches {
            out.in_memory_reuse += reuse(&mut launched, e.executable_id);
        }
        out.executables_run = launched.len() as u64;
        out
    }
}

/// Cache behaviour of runs given in order (what each one's events gave, [`RunCache::of`]);
/// `compiles[i]` are the compiles of run `i`. `across_runs` is false for the hosts of one job,
/// which compile the same programs at once.
pub(crate) fn cache(
    runs: &[RunCache],
    compiles: &[Vec<CompileView>],
    across_runs: bool,
) -> CacheReport {
    let mut out = CacheReport::default();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for r in runs {
        out.executables_run += r.executables_run;
        out.in_memory_reuse += r.in_memory_reuse;
        out.persistent_hits += r.persistent_hits;
        out.persistent_stores += r.persistent_stores;
        out.deserialize_failures += r.deserialize_failures;
        for (msg, n) in &r.failures {
            *failures.entry(msg.clone()).or_default() += n;
        }
    }
    out.failures = failures
        .into_iter()
        .map(|(message, count)| LoadFailure { message, count })
        .collect();

    // (program, options) → (run of first compile, whether some run stored it).
    let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
    let mut stored_in: HashMap<(u64, u64), usize> = HashMap::new();
    for (run, list) in compiles.iter().enumerate() {
        let mut this_run: HashMap<(u64, u64), usize> = HashMap::new();
        for c in list.iter().filter(|c| !c.failed) {
            let key = (c.same_program_key, c.options_hash);
            let earlier_run = seen.get(&key).copied().filter(|_| across_runs);
            if this_run.contains_key(&key) || earlier_run.is_some() {
                out.recompiled_same_program += 1;
            }
            if let Some(&stored_run) = stored_in.get(&key)
                && across_runs
                && stored_run < run
                && !this_run.contains_key(&key)
            {
                out.stored_but_recompiled.push(StoredNotLoaded {
                    graph: c.name.clone(),
                    stored_in_run: stored_run,
                    recompiled_in_run: run,
                    loads_attempted_in_run: runs.get(run).map_or(0, |r| r.load_attempts),
                });
            }
            this_run.entry(key).or_insert(run);
            if runs.get(run).is_some_and(|r| r.stored.contains(&c.name)) {
                stored_in.entry(key).or_insert(run);
            }
        }
        for (k, r) in this_run {
            seen.entry(k).or_insert(r);
        }
    }
    out
}
