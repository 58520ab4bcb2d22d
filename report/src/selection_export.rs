//! The base-run pool and the selection of the study set (docs/method.md §7; the paper's Appendix I,
//! Table 8, and §5 "Selection"), from a study's exported [`Results`]: pure code.
//!
//! - `selection.json`: the [`Selection`] as the study stored it — every task's verdict, the
//!   terciles, the candidates, the strata's orders and queues, the picks in processing order, the
//!   decoys and the back-fills.
//! - `selection.csv` ([`selection_csv`]): one row per base run of a task the selection judged,
//!   with its task's verdict, its stratum and its role — `selected` (round 0), `back-fill`,
//!   `queued` (a candidate left in its stratum's queue), `decoy`, `decoy-pool` (a successful run of
//!   a band task not drawn as a decoy) or `not in band`.
//! - `base_runs.csv` ([`base_runs_csv`]): every base run with an outcome.
//! - The report's section "Base runs and selection" ([`tables`]): the pool in Table 8's terms
//!   ([`Pool`]), the tasks by number of successes, the strata with what was selected from them,
//!   the decoys and the back-fills.
//!
//! A study without a selection has none of this (no file, no table): not a table of zeros.
//! `base_runs.csv` is written whenever the study has base runs (a restart check has them too).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use vcurve_method::selection::{BackFill, Initial, RunId, Selection, Stratum, Verdict};
use vcurve_record::{BaseRunRecord, EndType};

use crate::replay_table::exhausted_strata;
use crate::results::Results;
pub use crate::results::by_subject_and_seed;
use crate::table::{Table, csv_field, opt};

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::NoBaseRuns => "no_base_runs",
        Verdict::Doomed => "doomed",
        Verdict::BelowBand => "below_band",
        Verdict::Band => "band",
        Verdict::Saturated => "saturated",
    }
}

/// What the selection made of a base run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectionRole {
    /// Picked by the initial selection.
    Selected,
    /// Picked by a back-fill.
    BackFill,
    /// A candidate (failed run of a band task) not picked.
    Queued,
    /// A successful run of a band task drawn as a decoy.
    Decoy,
    /// A successful run of a band task not drawn.
    DecoyPool,
    /// A run of a task outside the band.
    NotInBand,
}

impl SelectionRole {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionRole::Selected => "selected",
            SelectionRole::BackFill => "back-fill",
            SelectionRole::Queued => "queued",
            SelectionRole::Decoy => "decoy",
            SelectionRole::DecoyPool => "decoy-pool",
            SelectionRole::NotInBand => "not in band",
        }
    }
}

/// One row of `selection.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionRow<'a> {
    pub run: &'a BaseRunRecord,
    pub verdict: Option<Verdict>,
    pub stratum: Option<Stratum>,
    /// Its place in its stratum's processing order (candidates).
    pub stratum_order: Option<u32>,
    pub role: SelectionRole,
    /// Its place in the study's processing order (picks).
    pub position: Option<u32>,
    pub round: Option<u32>,
    /// Dropped as non-replayable (picks).
    pub non_replayable: Option<bool>,
    pub reason: String,
}

/// Every base run of a task the selection judged, by task and seed, with what the selection made
/// of it.
pub fn selection_rows<'a>(selection: &'a Selection, base_runs: &'a [BaseRunRecord]) -> Vec<SelectionRow<'a>> {
    let verdicts: BTreeMap<&str, &vcurve_method::selection::TaskVerdict> =
        selection.tasks.iter().map(|t| (t.task.as_str(), t)).collect();
    let candidates: BTreeMap<&RunId, &vcurve_method::selection::Candidate> =
        selection.candidates.iter().map(|c| (&c.id, c)).collect();
    let picks: BTreeMap<&RunId, &vcurve_method::selection::Pick> = selection.picks.iter().map(|p| (&p.id, p)).collect();
    let decoys: BTreeMap<&RunId, &vcurve_method::selection::Decoy> =
        selection.decoys.iter().map(|d| (&d.id, d)).collect();
    let mut runs: Vec<&BaseRunRecord> =
        base_runs.iter().filter(|r| verdicts.contains_key(r.subject.as_str())).collect();
    runs.sort_by(|a, b| by_subject_and_seed(a, b));
    runs.into_iter()
        .map(|run| {
            let id = RunId::new(run.subject.as_str(), run.seed);
            let verdict = verdicts.get(run.subject.as_str()).map(|v| v.verdict);
            let candidate = candidates.get(&id);
            let mut row = SelectionRow {
                run,
                verdict,
                stratum: candidate.map(|c| c.stratum),
                stratum_order: candidate.map(|c| c.order),
                role: SelectionRole::NotInBand,
                position: None,
                round: None,
                non_replayable: None,
                reason: String::new(),
            };
            if let Some(p) = picks.get(&id) {
                row.role = if p.round == 0 { SelectionRole::Selected } else { SelectionRole::BackFill };
                row.position = Some(p.position);
                row.round = Some(p.round);
                row.non_replayable = Some(p.non_replayable);
                row.reason = p.reason.clone();
            } else if let Some(c) = candidate {
                row.role = SelectionRole::Queued;
                let why = match c.initial {
                    Initial::TaskAtCap => "left in the queue: its task had its cap selected",
                    Initial::TargetReached => "left in the queue: the target was reached first",
                    // Selected, then no longer a pick: cannot happen in a stored selection.
                    Initial::Selected { .. } => "left in the queue",
                };
                row.reason = format!("{}; {why}", c.reason);
            } else if let Some(d) = decoys.get(&id) {
                row.role = SelectionRole::Decoy;
                row.reason = d.reason.clone();
            } else if verdict == Some(Verdict::Band) && run.success {
                row.role = SelectionRole::DecoyPool;
                row.reason = "successful run of a band task, not drawn as a decoy".to_string();
            } else {
                row.reason = verdicts.get(run.subject.as_str()).map(|v| v.reason.clone()).unwrap_or_default();
            }
            row
        })
        .collect()
}

/// `selection.csv`: [`selection_rows`], one a line.
pub fn selection_csv(selection: &Selection, base_runs: &[BaseRunRecord]) -> String {
    let mut out = String::from(
        "task,seed,verdict,success,steps,end_type,stratum,stratum_order,role,position,round,non_replayable,reason\n",
    );
    for r in selection_rows(selection, base_runs) {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.run.subject),
            r.run.seed,
            opt(r.verdict.map(verdict_str)),
            r.run.success,
            r.run.steps,
            r.run.end_type.as_str(),
            opt(r.stratum),
            opt(r.stratum_order),
            r.role.as_str(),
            opt(r.position),
            opt(r.round),
            opt(r.non_replayable),
            csv_field(&r.reason)
        );
    }
    out
}

/// `base_runs.csv`: every base run with an outcome, by subject and seed.
pub fn base_runs_csv(base_runs: &[BaseRunRecord]) -> String {
    let mut runs: Vec<&BaseRunRecord> = base_runs.iter().collect();
    runs.sort_by(|a, b| by_subject_and_seed(a, b));
    let mut out = String::from("subject,seed,success,steps,end_type\n");
    for r in runs {
        let _ = writeln!(out, "{},{},{},{},{}", csv_field(&r.subject), r.seed, r.success, r.steps, r.end_type.as_str());
    }
    out
}

/// `selection.json`: the selection as stored.
pub fn selection_json(selection: &Selection) -> Vec<u8> {
    let mut json = serde_json::to_vec_pretty(selection).expect("a selection serializes");
    json.push(b'\n');
    json
}

/// The base-run pool in the terms of the paper's Table 8.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    pub tasks: u32,
    /// Base runs with an outcome, over the tasks.
    pub runs: u32,
    pub successes: u32,
    /// The mean of the tasks' pass rates; `None` without a run.
    pub pass_at_1: Option<f64>,
    /// Tasks by verdict: doomed, below band, band, saturated, no base runs.
    pub doomed: u32,
    pub below_band: u32,
    pub band: u32,
    pub saturated: u32,
    pub no_base_runs: u32,
    /// Base runs of the tasks that hit the step cap, and the runs whose end is known; `None`
    /// when the record holds none of the tasks' base runs.
    pub cap_hits: Option<(u32, u32)>,
    /// `successes[k]`: the tasks with `k` successes, `k = 0..=N` (`N` the base runs per task, or
    /// the most any task has).
    pub successes_histogram: Vec<u32>,
}

impl Pool {
    pub fn of(selection: &Selection, base_runs: &[BaseRunRecord]) -> Pool {
        let tasks = &selection.tasks;
        let count = |v: Verdict| tasks.iter().filter(|t| t.verdict == v).count() as u32;
        let rates: Vec<f64> = tasks.iter().filter_map(|t| t.pass_rate).collect();
        let n = tasks.iter().map(|t| t.runs).max().unwrap_or(0).max(selection.params.base_runs_per_task);
        let mut successes_histogram = vec![0u32; n as usize + 1];
        for t in tasks.iter().filter(|t| t.runs > 0) {
            successes_histogram[t.successes.min(n) as usize] += 1;
        }
        let judged: Vec<&BaseRunRecord> =
            base_runs.iter().filter(|r| tasks.iter().any(|t| t.task == r.subject)).collect();
        let capped = judged.iter().filter(|r| r.end_type == EndType::StepCap).count() as u32;
        Pool {
            tasks: tasks.len() as u32,
            runs: tasks.iter().map(|t| t.runs).sum(),
            successes: tasks.iter().map(|t| t.successes).sum(),
            pass_at_1: (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64),
            doomed: count(Verdict::Doomed),
            below_band: count(Verdict::BelowBand),
            band: count(Verdict::Band),
            saturated: count(Verdict::Saturated),
            no_base_runs: count(Verdict::NoBaseRuns),
            cap_hits: (!judged.is_empty()).then_some((capped, judged.len() as u32)),
            successes_histogram,
        }
    }
}

/// `k/n` with the share to two places.
fn share(k: u32, n: u32) -> String {
    if n == 0 { format!("{k}/0") } else { format!("{:.2} ({k} of {n})", f64::from(k) / f64::from(n)) }
}

/// The report's section "Base runs and selection"; empty for a study without a selection.
pub fn tables(results: &Results) -> Vec<Table> {
    let Some(selection) = &results.selection else {
        return Vec::new();
    };
    let p = &selection.params;
    let pool = Pool::of(selection, &results.base_runs);
    let per = p.base_runs_per_task;

    let mut summary = Table::new(
        "base_run_pool",
        "Base runs and selection",
        "The base-run pool (the paper's Table 8, left): tasks and their base runs, pass@1 (the mean of the tasks' pass rates), the tasks by verdict — doomed (pass rate at most ε₀), in the band, saturated above it — with their shares of the tasks, and the share of base runs that hit the step cap; then the selection drawn from the band's failed runs.",
        &["quantity", "value"],
    );
    summary.row(vec!["tasks, runs".into(), format!("{}, {}", pool.tasks, pool.runs)]);
    summary.row(vec![
        "pass@1".into(),
        pool.pass_at_1.map_or_else(|| vcurve_method::analyses::NOT_MEASURED.to_string(), |v| format!("{v:.3}")),
    ]);
    summary.row(vec![format!("doomed (p ≤ {:.3})", p.doomed_threshold), share(pool.doomed, pool.tasks)]);
    if pool.below_band > 0 {
        summary.row(vec![format!("below the band (< {} of {per})", p.band_min), share(pool.below_band, pool.tasks)]);
    }
    summary.row(vec![format!("band ({}–{} of {per})", p.band_min, p.band_max), share(pool.band, pool.tasks)]);
    summary.row(vec![format!("saturated (> {} of {per})", p.band_max), share(pool.saturated, pool.tasks)]);
    if pool.no_base_runs > 0 {
        summary.row(vec!["no base run".into(), share(pool.no_base_runs, pool.tasks)]);
    }
    summary.row(vec![
        "cap hits".into(),
        pool.cap_hits.map_or_else(|| vcurve_method::analyses::NOT_MEASURED.to_string(), |(k, n)| share(k, n)),
    ]);
    let cuts = selection.terciles.map_or_else(
        || "none (no failed run in the band)".to_string(),
        |t| format!("{:.2} and {:.2} over {} failed runs", t.lower, t.upper, t.failed_runs),
    );
    summary.row(vec!["tercile cuts".into(), cuts]);
    summary.row(vec![
        "selection".into(),
        format!(
            "seed {}, target {}, at most {} per task: {} candidates, {} selected initially, {} back-filled",
            selection.seed,
            selection.target.map_or_else(|| "none".to_string(), |t| t.to_string()),
            p.trajectories_per_task,
            selection.candidates.len(),
            selection.initial(),
            selection.back_fill_count()
        ),
    ]);
    summary.row(vec![
        "decoys".into(),
        format!("{} of {} successful band runs", selection.decoys.len(), selection.decoy_pool),
    ]);

    let mut histogram = Table::new(
        "base_run_successes",
        "Base runs: tasks by successes",
        "The tasks by their number of successful base runs (the paper's Table 8, right).",
        &["successes", "tasks"],
    );
    for (k, tasks) in pool.successes_histogram.iter().enumerate() {
        histogram.row(vec![k.to_string(), tasks.to_string()]);
    }

    let mut strata = Table::new(
        "selection_strata",
        "Selection: strata",
        "The strata of the band's failed runs (length tercile and end type) in canonical order: their candidates, the picks of the initial selection and of the back-fills, the picks dropped as non-replayable, the active ones, the candidates left in the queue, and whether a back-fill found the stratum exhausted.",
        &["stratum", "candidates", "selected", "back-filled", "non-replayable", "active", "queued", "exhausted"],
    );
    let exhausted: Vec<Stratum> = exhausted_strata(selection).collect();
    for s in &selection.strata {
        let picks: Vec<&vcurve_method::selection::Pick> =
            selection.picks.iter().filter(|p| p.stratum == s.stratum).collect();
        let of = |f: &dyn Fn(&vcurve_method::selection::Pick) -> bool| picks.iter().filter(|p| f(p)).count();
        let times = exhausted.iter().filter(|e| **e == s.stratum).count();
        strata.row(vec![
            s.stratum.to_string(),
            s.order.len().to_string(),
            of(&|p| p.round == 0).to_string(),
            of(&|p| p.round > 0).to_string(),
            of(&|p| p.non_replayable).to_string(),
            of(&|p| !p.non_replayable).to_string(),
            s.queue.len().to_string(),
            if times == 0 { "no".into() } else { format!("yes ({times} drop(s) not replaced)") },
        ]);
    }

    let mut decoys = Table::new(
        "selection_decoys",
        "Selection: decoys",
        "Successful runs of band tasks drawn in the decoy order: judged, never continued, never back-filled.",
        &["run", "steps", "end", "reason"],
    );
    for d in &selection.decoys {
        decoys.row(vec![d.id.to_string(), d.steps.to_string(), d.end.as_str().into(), d.reason.clone()]);
    }

    let mut back_fills = Table::new(
        "selection_back_fills",
        "Selection: back-fills",
        "Each non-replayable pick in the order it was dropped, and what its back-fill did: the replacement from the same stratum and its round, or the stratum exhausted.",
        &["non-replayable", "stratum", "result", "round"],
    );
    for e in &selection.back_fills {
        let stratum = selection.picks.iter().find(|p| p.id == e.non_replayable).map(|p| p.stratum.to_string());
        let (result, round) = match &e.result {
            BackFill::Replaced { replacement, round, .. } => (format!("replaced by {replacement}"), Some(*round)),
            BackFill::StratumExhausted { round, .. } => ("stratum exhausted".to_string(), Some(*round)),
            BackFill::NotSelected => ("not a pick: nothing done".to_string(), None),
            BackFill::AlreadyNonReplayable => ("already dropped: nothing done".to_string(), None),
        };
        back_fills.row(vec![
            e.non_replayable.to_string(),
            stratum.unwrap_or_default(),
            result,
            round.map_or_else(String::new, |r| r.to_string()),
        ]);
    }
    vec![summary, histogram, strata, decoys, back_fills]
}

#[cfg(test)]
mod tests;
