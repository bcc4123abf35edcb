//! Why a family recompiled, in the user's words: which constant, which dimension of which
//! argument, which op changed, and the fix.

use super::*;
use crate::diff::ConstantChange;

/// The family's one-line details, its fix, and the line a user would edit.
pub(super) fn explain(
    f: &Family,
    compiles: &[CompileView],
    cause: Cause,
    frontend: &Frontend,
) -> (String, String, Option<SourceLoc>) {
    let diffs: Vec<&Diff> = f
        .members
        .iter()
        .filter_map(|m| m.diff.as_ref())
        .filter(|d| d.cause == cause)
        .collect();
    // Where the recompiles were asked for: a graph first compiled in the loop and compiled
    // again for an evaluation names the evaluation's line, not the loop's.
    let call_site = most_common(
        f.members
            .iter()
            .skip(1)
            .filter_map(|m| compiles[m.compile].source.clone()),
    )
    .or_else(|| compiles[f.members[0].compile].source.clone());
    let n = f.members.len();
    let torch = frontend.is_torch();
    match cause {
        Cause::ConstantChanged => constant_explanation(f, &diffs, call_site, torch),
        Cause::ShapeChanged | Cause::DtypeChanged => {
            shape_explanation(f, compiles, &diffs, cause, call_site)
        }
        Cause::StructureChanged => structure_explanation(f, compiles, &diffs, call_site, torch),
        Cause::OptionsChanged => (
            format!("the same program compiled {n} times with different compile options"),
            "keep compile options (donation, shardings, device assignment, compiler flags) the same between calls".into(),
            call_site,
        ),
        Cause::IdenticalProgram => identical_explanation(n, call_site, torch),
        Cause::Unknown => (
            diffs
                .first()
                .map(|d| d.summary.clone())
                .unwrap_or_default(),
            "the programs differ in a way tpuscope does not classify: compare the members' HLO with `tpuscope view`".into(),
            call_site,
        ),
    }
}

/// A constant changed: its values, where it is, and how to keep it out of the program.
fn constant_explanation(
    f: &Family,
    diffs: &[&Diff],
    call_site: Option<SourceLoc>,
    torch: bool,
) -> (String, String, Option<SourceLoc>) {
    let n = f.members.len();
    let first = diffs.iter().find_map(|d| d.constants.first());
    let op_source = diffs
        .iter()
        .flat_map(|d| &d.constants)
        .find_map(|c| c.source.clone());
    // Where the traced function was called, when that is another line than the op's.
    let called = match (&op_source, &call_site) {
        (Some(o), Some(c)) if o != c => {
            let f = f.graph.strip_prefix("jit_").unwrap_or(&f.graph);
            format!(", in `{f}` called at {c}")
        }
        _ => String::new(),
    };
    let source = op_source.or(call_site);
    let Some(first) = first else {
        return (String::new(), String::new(), source);
    };
    let shown = constant_values(first, diffs);
    let used = if first.used_by.is_empty() {
        String::new()
    } else {
        format!(", used by {}", first.used_by.join(", "))
    };
    let at = source
        .as_ref()
        .map(|s| format!(" at {s}"))
        .unwrap_or_default();
    let details = if first.what == "argument became literal" {
        format!(
            "a scalar argument became the constant {} {}{used}{at}{called}",
            first.dtype, first.new
        )
    } else {
        format!(
            "{} of {} {} changed: {shown}{used}{at}{called}",
            first.what, first.op, first.dtype
        )
    };
    let suggestion = constant_suggestion(first, &at, &shown, n, torch);
    (details, suggestion, source)
}

/// The values the first changed constant took, in compile order (long runs elided).
fn constant_values(first: &ConstantChange, diffs: &[&Diff]) -> String {
    let mut values = vec![first.old.clone()];
    for d in diffs {
        if let Some(c) = d
            .constants
            .iter()
            .find(|c| c.what == first.what && c.op == first.op && c.dtype == first.dtype)
            && values.last() != Some(&c.new)
        {
            values.push(c.new.clone());
        }
    }
    if values.len() > 6 {
        format!(
            "{} → … → {} ({} values)",
            values[..3].join(" → "),
            values[values.len() - 1],
            values.len()
        )
    } else {
        values.join(" → ")
    }
}

/// The fix for a changed constant, by what changed and the frontend.
fn constant_suggestion(
    first: &ConstantChange,
    at: &str,
    shown: &str,
    n: usize,
    torch: bool,
) -> String {
    match first.what.as_str() {
        "argument became literal" => format!(
            "a Python scalar{at} was passed as data until it took the value {}, which the frontend bakes into the graph as a constant ({n} graphs so far; torch_xla does this for 0 and 1): keep it a device tensor (`torch.tensor(value, device=device)`), or keep it off those values (a warmup factor that ends at exactly 1.0)",
            first.new
        ),
        "literal" if torch => format!(
            "the Python scalar{at} is baked into the graph as {} {} ({n} graphs so far): keep it on the device as a tensor (e.g. `torch.tensor(value, device=device)`; for optimizers `capturable=True` / a tensor LR) so one graph serves every value",
            first.dtype, shown
        ),
        "literal" => format!(
            "the Python scalar{at} is baked into the program as {} {} ({n} compiles so far): pass it as an argument (`jnp.asarray(value)`) instead of closing over it, so one compiled program serves every value",
            first.dtype, shown
        ),
        "slice bounds" | "dynamic-slice sizes" | "gather slice sizes" if torch => format!(
            "a Python int index{at} becomes static slice bounds ({shown}): index with a device tensor (`x.index_select(dim, torch.tensor([i], device=device))`) so the index is data, not graph"
        ),
        "slice bounds" | "dynamic-slice sizes" | "gather slice sizes" => format!(
            "a Python int index{at} becomes static slice bounds ({shown}): use `jax.lax.dynamic_slice` / `jnp.take` with a traced index"
        ),
        _ => format!(
            "a size or attribute computed from a Python value{at} changes ({shown}): make it a fixed size, or pass the value as an array"
        ),
    }
}

/// The program's structure changed: which ops, where, and how to keep one graph.
fn structure_explanation(
    f: &Family,
    compiles: &[CompileView],
    diffs: &[&Diff],
    call_site: Option<SourceLoc>,
    torch: bool,
) -> (String, String, Option<SourceLoc>) {
    let n = f.members.len();
    let mut added: BTreeMap<String, u32> = BTreeMap::new();
    let mut removed: BTreeMap<String, u32> = BTreeMap::new();
    for d in diffs {
        for (k, v) in &d.ops_added {
            *added.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &d.ops_removed {
            *removed.entry(k.clone()).or_default() += v;
        }
    }
    let variants: BTreeSet<u64> = f
        .members
        .iter()
        .map(|m| compiles[m.compile].same_program_key)
        .collect();
    let details = format!(
        "{} variants of the graph over {n} compiles; {}",
        variants.len(),
        diffs.first().map(|d| d.summary.clone()).unwrap_or_default()
    );
    // The line of the ops that differ, when the HLO says; else where the graph is cut.
    let ops_source = most_common(diffs.iter().filter_map(|d| d.ops_source.clone()));
    let at = match (&ops_source, &call_site) {
        (Some(o), Some(c)) if o != c => format!(" at {o} (graph cut at {c})"),
        (Some(o), _) => format!(" at {o}"),
        (None, Some(c)) => format!(" reaching {c}"),
        (None, None) => String::new(),
    };
    let call_site = ops_source.or(call_site);
    let fix = if torch {
        "compute both branches with `torch.where`, or keep data-dependent `if`s and optional inputs out of the step"
    } else {
        "use `jax.lax.cond`/`jnp.where` instead of Python branches on values, and always pass the same set of inputs"
    };
    (
        details,
        format!(
            "Python control flow or optional inputs{at} trace {} different graphs: {fix}",
            variants.len()
        ),
        call_site,
    )
}

/// The same program compiled again: the cache missed or the function was re-created.
fn identical_explanation(
    n: usize,
    call_site: Option<SourceLoc>,
    torch: bool,
) -> (String, String, Option<SourceLoc>) {
    let at = call_site
        .as_ref()
        .map(|s| format!(" at {s}"))
        .unwrap_or_default();
    let fix = if torch {
        "the graph cache missed: avoid recreating modules/optimizers per step, and enable the persistent cache (`torch_xla.runtime.initialize_cache`)"
    } else {
        "the jitted function is re-created (a `jax.jit` or closure inside the loop): jit it once outside the loop, or enable the persistent compilation cache"
    };
    (
        format!("the same program compiled {n} times{at}"),
        format!("{fix} — {n} compiles where one would do"),
        call_site,
    )
}

pub(super) fn shape_explanation(
    f: &Family,
    compiles: &[CompileView],
    diffs: &[&Diff],
    cause: Cause,
    call_site: Option<SourceLoc>,
) -> (String, String, Option<SourceLoc>) {
    // Every (parameter, dim) that changed in some member, with every size it took.
    let mut churn: BTreeMap<(i64, usize), (Option<String>, BTreeSet<i64>)> = BTreeMap::new();
    let mut dtype_changes: BTreeMap<i64, (Option<String>, BTreeSet<String>)> = BTreeMap::new();
    for d in diffs {
        for p in &d.params {
            for &dim in &p.dims {
                churn
                    .entry((p.number, dim))
                    .or_insert((p.name.clone(), BTreeSet::new()));
            }
            if p.dtype_changed {
                dtype_changes
                    .entry(p.number)
                    .or_insert((p.name.clone(), BTreeSet::new()));
            }
        }
    }
    for m in &f.members {
        let Some(p) = &compiles[m.compile].program else {
            continue;
        };
        for ((num, dim), (_, sizes)) in churn.iter_mut() {
            if let Some(param) = p.params.iter().find(|q| q.number == *num)
                && let Some(&s) = param.dims.get(*dim)
            {
                sizes.insert(s);
            }
        }
        for (num, (_, types)) in dtype_changes.iter_mut() {
            if let Some(param) = p.params.iter().find(|q| q.number == *num) {
                types.insert(param.dtype.clone());
            }
        }
    }
    let n = f.members.len();
    let at = call_site
        .as_ref()
        .map(|s| format!(" called at {s}"))
        .unwrap_or_default();
    if cause == Cause::DtypeChanged || churn.is_empty() {
        let parts: Vec<String> = dtype_changes
            .iter()
            .map(|(num, (name, types))| {
                format!(
                    "{} took dtypes {}",
                    arg_label(*num, name.as_deref()),
                    types.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        return (
            parts.join("; "),
            format!(
                "cast the inputs to one dtype before the call{at} ({n} compiles for {} dtypes)",
                dtype_changes.values().map(|v| v.1.len()).max().unwrap_or(0)
            ),
            call_site,
        );
    }
    // Arguments whose same dim took the same sizes are one change (a batch or sequence size
    // shared by many inputs): said once.
    /// (dim, the sizes it took) → the arguments whose that dim took them.
    type Change = ((usize, Vec<i64>), Vec<String>);
    let mut changes: Vec<Change> = Vec::new();
    for ((num, dim), (name, sizes)) in churn.iter().filter(|(_, (_, s))| s.len() > 1) {
        let key = (*dim, sizes.iter().copied().collect::<Vec<i64>>());
        let label = arg_label(*num, name.as_deref());
        match changes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, labels)) => labels.push(label),
            None => changes.push((key, vec![label])),
        }
    }
    // The change most arguments share first: that is the size that churns.
    changes.sort_by_key(|(_, labels)| std::cmp::Reverse(labels.len()));
    let labels_of = |labels: &[String]| match labels {
        [one] => format!("argument {one}"),
        many if many.len() <= 4 => format!("arguments {}", many.join(", ")),
        many => format!(
            "arguments {} and {} more",
            many[..3].join(", "),
            many.len() - 3
        ),
    };
    const SHOWN: usize = 3;
    let mut details = Vec::new();
    let mut fixes = Vec::new();
    for ((dim, v), labels) in changes.iter().take(SHOWN) {
        let who = labels_of(labels);
        details.push(format!(
            "{who} dim {dim} took {} sizes {}",
            v.len(),
            suggest::set(v)
        ));
        if let Some(b) = suggest::buckets(v) {
            let how = if b.multiple > 0 {
                format!(" (multiples of {})", b.multiple)
            } else {
                String::new()
            };
            fixes.push(format!(
                "pad {} dim {dim} up to {}{how}: {} graph{} instead of {}",
                who.trim_start_matches("argument ").trim_start_matches("s "),
                suggest::set(&b.sizes),
                b.sizes.len(),
                if b.sizes.len() == 1 { "" } else { "s" },
                v.len()
            ));
        }
    }
    if changes.len() > SHOWN {
        details.push(format!("and {} more changes", changes.len() - SHOWN));
    }
    let fix = if fixes.is_empty() {
        format!("make the shapes{at} static (pad or bucket them)")
    } else {
        format!("{}{at}", fixes.join("; "))
    };
    (details.join("; "), fix, call_site)
}

pub(super) fn arg_label(num: i64, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("#{num} `{n}`"),
        None => format!("#{num}"),
    }
}

pub(super) fn most_common<T: Ord + Clone>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(t, _)| t)
}
