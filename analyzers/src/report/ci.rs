//! What a CI step checks: budgets and the comparison with a baseline report.

use super::*;

/// A CI budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BudgetKey {
    #[serde(rename = "compiles")]
    Compiles,
    #[serde(rename = "recompiles")]
    Recompiles,
    #[serde(rename = "syncs-per-step")]
    SyncsPerStep,
    #[serde(rename = "graph-fragments-per-step")]
    GraphFragmentsPerStep,
    #[serde(rename = "cache-misses")]
    CacheMisses,
    #[serde(rename = "hbm-peak-fraction")]
    HbmPeakFraction,
}

impl BudgetKey {
    pub const ALL: [BudgetKey; 6] = [
        BudgetKey::Compiles,
        BudgetKey::Recompiles,
        BudgetKey::SyncsPerStep,
        BudgetKey::GraphFragmentsPerStep,
        BudgetKey::CacheMisses,
        BudgetKey::HbmPeakFraction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BudgetKey::Compiles => "compiles",
            BudgetKey::Recompiles => "recompiles",
            BudgetKey::SyncsPerStep => "syncs-per-step",
            BudgetKey::GraphFragmentsPerStep => "graph-fragments-per-step",
            BudgetKey::CacheMisses => "cache-misses",
            BudgetKey::HbmPeakFraction => "hbm-peak-fraction",
        }
    }
}

/// A budget given as `KEY=N`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    pub key: BudgetKey,
    pub limit: f64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BudgetError {
    #[error("budget {0:?} is not KEY=N")]
    Syntax(String),
    #[error("unknown budget key {0:?} (known: {known})", known = BudgetKey::ALL.map(BudgetKey::name).join(", "))]
    UnknownKey(String),
    #[error("budget {key}: {value:?} is not a non-negative number")]
    BadLimit { key: String, value: String },
}

impl std::str::FromStr for Budget {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Budget, BudgetError> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| BudgetError::Syntax(s.to_string()))?;
        let key = BudgetKey::ALL
            .into_iter()
            .find(|b| b.name() == k.trim())
            .ok_or_else(|| BudgetError::UnknownKey(k.to_string()))?;
        let limit: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|l: &f64| l.is_finite() && *l >= 0.0)
            .ok_or_else(|| BudgetError::BadLimit {
                key: k.to_string(),
                value: v.to_string(),
            })?;
        Ok(Budget { key, limit })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BudgetResult {
    pub name: String,
    pub limit: f64,
    /// Absent when the trace cannot tell (no memory limit reported).
    pub actual: Option<f64>,
    pub ok: bool,
    pub status: BudgetStatus,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BaselineResult {
    pub regressions: Vec<String>,
    pub improvements: Vec<String>,
    pub ok: bool,
}

/// Evaluates budgets against a report.
pub fn apply_budgets(report: &mut Report, budgets: &[Budget]) {
    report.budgets = budgets
        .iter()
        .map(|b| {
            let actual = match b.key {
                BudgetKey::Compiles => Some(report.compiles.total as f64),
                BudgetKey::Recompiles => Some(report.compiles.recompiles as f64),
                BudgetKey::SyncsPerStep => Some(report.steps.syncs_per_step as f64),
                BudgetKey::GraphFragmentsPerStep => {
                    Some(report.steps.graph_fragments_per_step as f64)
                }
                BudgetKey::CacheMisses => Some(report.cache.recompiled_same_program as f64),
                BudgetKey::HbmPeakFraction => report
                    .hbm
                    .iter()
                    .filter_map(|d| d.peak_fraction)
                    .max_by(f64::total_cmp),
            };
            let (ok, status) = match actual {
                None => (true, BudgetStatus::Unknown),
                Some(a) if a <= b.limit => (true, BudgetStatus::Ok),
                Some(_) => (false, BudgetStatus::Exceeded),
            };
            BudgetResult {
                name: b.key.name().to_string(),
                limit: b.limit,
                actual,
                ok,
                status,
            }
        })
        .collect();
}

/// Compares a report with an earlier JSON report: new recompile families, more syncs or graph
/// fragments per step, more cache misses are regressions.
pub fn compare_baseline(report: &mut Report, baseline: &serde_json::Value) {
    let fam_key = |graph: &str, cause: &str, file: &str| {
        format!(
            "{} {cause} {}",
            families::graph_name(graph),
            crate::source::short_path(file)
        )
    };
    let old_families: BTreeSet<String> = baseline["recompiles"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    fam_key(
                        f["graph"].as_str().unwrap_or(""),
                        f["cause"].as_str().unwrap_or(""),
                        f["source"]["file"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut regressions = Vec::new();
    let mut improvements = Vec::new();
    let mut new_keys = BTreeSet::new();
    for f in &report.recompiles {
        let key = fam_key(
            &f.graph,
            f.cause.as_str(),
            f.source.as_ref().map_or("", |s| s.file.as_str()),
        );
        if !old_families.contains(&key) {
            let at = f
                .source
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            regressions.push(format!(
                "new recompile family: {} compiled {}× ({}){at}",
                f.graph, f.count, f.cause
            ));
        }
        new_keys.insert(key);
    }
    for k in old_families.difference(&new_keys) {
        improvements.push(format!("recompile family gone: {k}"));
    }
    let mut compare = |name: &str, old: Option<f64>, new: f64| {
        if let Some(old) = old {
            if new > old {
                regressions.push(format!("{name}: {old} → {new}"));
            } else if new < old {
                improvements.push(format!("{name}: {old} → {new}"));
            }
        }
    };
    compare(
        "syncs per step",
        baseline["steps"]["syncs_per_step"].as_f64(),
        report.steps.syncs_per_step as f64,
    );
    compare(
        "graph fragments per step",
        baseline["steps"]["graph_fragments_per_step"].as_f64(),
        report.steps.graph_fragments_per_step as f64,
    );
    compare(
        "cache misses",
        baseline["cache"]["recompiled_same_program"].as_f64(),
        report.cache.recompiled_same_program as f64,
    );
    report.baseline = Some(BaselineResult {
        ok: regressions.is_empty(),
        regressions,
        improvements,
    });
}

/// The exit status a CI step wants: 1 when a budget is exceeded or the baseline regressed.
pub fn failed(report: &Report) -> bool {
    report.budgets.iter().any(|b| !b.ok) || report.baseline.as_ref().is_some_and(|b| !b.ok)
}

/// A budget's outcome (`ok`, `exceeded`, `unknown` in the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetStatus {
    Ok,
    Exceeded,
    /// The trace cannot tell (no memory limit reported).
    Unknown,
}

impl BudgetStatus {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Exceeded => "exceeded",
            Self::Unknown => "unknown",
        }
    }
}
