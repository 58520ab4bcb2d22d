//! The checks before any claim (the paper's Table 4, docs/method.md §7) and the controls behind them
//! (Tables 18–20).
//!
//! - **`t = 0` sanity** (Table 18): the continuations from the empty history against the task's base
//!   runs, two-sided Fisher exact test; a trajectory passes when `p ≥ α`.
//! - **Test–retest** (Table 19): the screening estimate at an anchor from the main schedule and from
//!   fresh seeds; the gap `|V̂₁ − V̂₂|`, its median and maximum, how many anchors agree exactly and how
//!   many differ by more than `δ_screen` (0.25).
//! - **Budget control** (Table 20): the decisive step and shape from screening with budget `B − t`
//!   and with the full budget `B`; agreement within three steps, shape agreement, and in which
//!   direction `t*` moves (later, earlier, to the last step).
//! - **Checks** (Table 4): replay `≥ 70%` of selected trajectories; harness flake rate `≤ 3%`; every
//!   sanity trajectory passes; retest median gap `≤ 0.2`; continuations that exhaust their budget
//!   `< 35%` (through [`meets_below`], so with the `1e-9` tolerance in favour of meeting it, as
//!   every threshold: exactly 35% meets); a confirmed drop or a certified point of no return on
//!   `≥ 60%` of trajectories; every evaluation through the cache (every run that needed a verdict
//!   judged by the patch cache: evaluated for it, a verdict already cached, or an empty patch). A
//!   check with nothing measured (no trajectory with a recorded run whose replay finished, no flake
//!   check made, a study whose runner judges no patch, no sanity trajectories yet) is
//!   `not_measured`, not a failure: its value prints as "not measured" and is exported as `null`.
//!   The verdict is `pass` only when every check passes, `fail` when any fails, `incomplete`
//!   otherwise.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{CurveRecord, NOT_MEASURED, Ratio};
use crate::curve::{CurveAnalysis, Point, Shape};
use crate::stats::TwoByTwo;
use crate::{BaseRuns, Thresholds, meets_at_least, meets_at_most, meets_below};

/// Continuations from `h_0` of one trajectory against its task's base runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SanityInput {
    pub trajectory: String,
    /// Successes of the continuations from the empty history.
    pub at_h0: Ratio,
    /// Successes of the task's base runs.
    pub base: Ratio,
}

impl SanityInput {
    /// From the main series' point at `t = 0` and the task's base runs.
    pub fn new(trajectory: impl Into<String>, h0: Point, runs: &BaseRuns) -> SanityInput {
        let successes = runs.0.iter().filter(|r| r.success).count() as u32;
        SanityInput {
            trajectory: trajectory.into(),
            at_h0: Ratio { hits: h0.successes, total: h0.n },
            base: Ratio { hits: successes, total: runs.0.len() as u32 },
        }
    }
}

/// A row of Table 18.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SanityRow {
    pub trajectory: String,
    pub at_h0: Ratio,
    pub base: Ratio,
    /// `p(x)` from the base runs.
    pub pass_rate: Option<f64>,
    /// Two-sided Fisher exact `p`.
    pub p_value: f64,
    /// `p ≥ α`.
    pub passes: bool,
}

/// Table 18.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SanityReport {
    pub rows: Vec<SanityRow>,
    /// Trajectories that pass, of all.
    pub passed: Ratio,
}

/// The `t = 0` sanity control.
pub fn sanity_control(inputs: &[SanityInput], params: &Thresholds) -> SanityReport {
    let mut passed = Ratio::default();
    let rows = inputs
        .iter()
        .map(|input| {
            let p_value = TwoByTwo::new(input.at_h0.hits, input.at_h0.total, input.base.hits, input.base.total)
                .fisher_two_sided();
            let passes = meets_at_least(p_value, params.alpha);
            passed.count(passes);
            SanityRow {
                trajectory: input.trajectory.clone(),
                at_h0: input.at_h0,
                base: input.base,
                pass_rate: input.base.share(),
                p_value,
                passes,
            }
        })
        .collect();
    SanityReport { rows, passed }
}

/// One re-screened anchor: the main schedule's point and the fresh-seed point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetestInput {
    pub trajectory: String,
    pub t: u32,
    pub first: Ratio,
    pub second: Ratio,
}

/// A row of Table 19.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetestRow {
    pub trajectory: String,
    pub t: u32,
    pub v1: f64,
    pub v2: f64,
    pub gap: f64,
}

/// Table 19.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetestReport {
    pub rows: Vec<RetestRow>,
    pub anchors: u32,
    pub median_gap: Option<f64>,
    pub max_gap: Option<f64>,
    /// Anchors whose two estimates agree exactly.
    pub identical: u32,
    /// Anchors whose gap exceeds `δ_screen`.
    pub beyond_delta: u32,
}

/// The test–retest control. Anchors with no continuations on either side are left out.
pub fn retest_control(inputs: &[RetestInput], params: &Thresholds) -> RetestReport {
    let rows: Vec<RetestRow> = inputs
        .iter()
        .filter_map(|input| {
            let (v1, v2) = (input.first.share()?, input.second.share()?);
            Some(RetestRow { trajectory: input.trajectory.clone(), t: input.t, v1, v2, gap: (v1 - v2).abs() })
        })
        .collect();
    let mut gaps: Vec<f64> = rows.iter().map(|r| r.gap).collect();
    gaps.sort_by(f64::total_cmp);
    let median_gap = (!gaps.is_empty()).then(|| {
        let mid = gaps.len() / 2;
        if gaps.len() % 2 == 1 { gaps[mid] } else { (gaps[mid - 1] + gaps[mid]) / 2.0 }
    });
    RetestReport {
        anchors: rows.len() as u32,
        median_gap,
        max_gap: gaps.last().copied(),
        identical: gaps.iter().filter(|&&g| meets_at_most(g, 0.0)).count() as u32,
        beyond_delta: gaps.iter().filter(|&&g| !meets_at_most(g, params.delta_screen)).count() as u32,
        rows,
    }
}

/// The decisive step and shape of one screening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Screening {
    pub t_star: Option<u32>,
    pub shape: Shape,
}

impl From<&CurveAnalysis> for Screening {
    fn from(analysis: &CurveAnalysis) -> Screening {
        Screening { t_star: analysis.t_star, shape: analysis.shape }
    }
}

/// One trajectory of the budget control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetControlInput {
    pub trajectory: String,
    pub length: u32,
    /// Screening with the remaining budget `B − t` (the main series' screening points).
    pub remaining: Screening,
    /// Screening with the full budget `B`.
    pub full: Screening,
    /// The study's final `t*`.
    pub final_t_star: Option<u32>,
}

/// A row of Table 20.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetControlRow {
    #[serde(flatten)]
    pub input: BudgetControlInput,
    /// `|t*_B − t*_{B−t}| ≤ 3` (or neither screening finds a drop).
    pub within_three: bool,
    pub shape_agrees: bool,
    /// `t*_B − t*_{B−t}`, when both exist.
    pub shift: Option<i64>,
    /// `t*_B = T`.
    pub full_at_last_step: bool,
}

/// Table 20.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetControlReport {
    pub rows: Vec<BudgetControlRow>,
    pub within_three: Ratio,
    pub shape_agrees: Ratio,
    /// Trajectories whose `t*` moves later (earlier) with the full budget.
    pub later: u32,
    pub earlier: u32,
    /// Of the later ones, those moved to the last step.
    pub to_last_step: u32,
}

/// The budget control.
pub fn budget_control(inputs: &[BudgetControlInput]) -> BudgetControlReport {
    let (mut within_three, mut shape_agrees) = (Ratio::default(), Ratio::default());
    let (mut later, mut earlier, mut to_last_step) = (0, 0, 0);
    let rows = inputs
        .iter()
        .map(|input| {
            let shift = input.full.t_star.zip(input.remaining.t_star).map(|(b, r)| i64::from(b) - i64::from(r));
            let within = match shift {
                Some(s) => s.abs() <= 3,
                None => input.full.t_star.is_none() && input.remaining.t_star.is_none(),
            };
            let full_at_last_step = input.full.t_star == Some(input.length);
            within_three.count(within);
            shape_agrees.count(input.full.shape == input.remaining.shape);
            if shift.is_some_and(|s| s > 0) {
                later += 1;
                to_last_step += u32::from(full_at_last_step);
            }
            earlier += u32::from(shift.is_some_and(|s| s < 0));
            BudgetControlRow {
                input: input.clone(),
                within_three: within,
                shape_agrees: input.full.shape == input.remaining.shape,
                shift,
                full_at_last_step,
            }
        })
        .collect();
    BudgetControlReport { rows, within_three, shape_agrees, later, earlier, to_last_step }
}

/// The thresholds of Table 4 that docs/method.md §8 does not list (the paper's values by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckCriteria {
    /// Replay reconstructs at least this share of the selected trajectories.
    pub replay_min: f64,
    /// Harness flake rate at most this (above it, every patch is evaluated twice).
    pub flake_max: f64,
    /// Test–retest median gap at most this.
    pub retest_median_gap_max: f64,
    /// Continuations that exhaust their budget: strictly below this share.
    pub cap_hits_below: f64,
    /// Trajectories with a confirmed drop or a certified point of no return: at least this share.
    pub resolved_min: f64,
}

impl Default for CheckCriteria {
    fn default() -> Self {
        CheckCriteria {
            replay_min: 0.70,
            flake_max: 0.03,
            retest_median_gap_max: 0.2,
            cap_hits_below: 0.35,
            resolved_min: 0.60,
        }
    }
}

/// Evaluations and how many went through the patch cache.
///
/// An evaluation here is a verdict a run needed on its patch (the paper's count): one per run with
/// an outcome. The cache check is measured when either count is not zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheUse {
    /// Verdicts needed: the runs with an outcome, each of which judged its patch.
    pub evaluations: u32,
    /// Of those, the runs the patch cache judged: evaluated for them, a verdict already in the
    /// cache, or an empty patch that fails without evaluation.
    pub through_cache: u32,
    /// Distinct non-empty patches judged.
    pub unique_patches: u32,
}

/// The patch cache's own figures (docs/method.md §6), shown with the cache check by
/// [`ChecksReport::with_cache_figures`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CacheFigures {
    /// Evaluations carried out in all: the runs' own and the flake re-checks.
    pub evaluations: u64,
    /// The share of judged runs that needed no evaluation of their own (a verdict already in the
    /// cache, or an empty patch); `None` with no run judged.
    pub saved_share: Option<f64>,
}

/// What Table 4 is computed from. `None` (or an empty report) = not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckInputs {
    /// Trajectories replayed exactly, of the selected ones with a recorded run whose replay
    /// finished (reproduced, or dropped as non-replayable); `None` when there is none (a
    /// synthetic study).
    pub replay: Option<Ratio>,
    /// Harness disagreements, of the re-evaluated patches (not measured with none re-evaluated).
    pub flake: Option<Ratio>,
    pub sanity: SanityReport,
    pub retest: RetestReport,
    /// Continuations that exhausted their budget, of all continuations with an outcome.
    pub cap_hits: Option<Ratio>,
    /// Trajectories with a confirmed drop or a certified point of no return (see [`resolved`]).
    pub resolved: Ratio,
    /// `None` for a study whose runner judges no patch (synthetic).
    pub cache: Option<CacheUse>,
}

/// Whether a check is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    NotMeasured,
}

/// The study's verdict over every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every check passes: claims may be made.
    Pass,
    /// At least one check fails.
    Fail,
    /// None fails, but some are not measured.
    Incomplete,
}

/// A row of Table 4. Exported with `value: null` when the check is not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "CheckJson", from = "CheckJson")]
pub struct Check {
    pub id: String,
    pub check: String,
    pub criterion: String,
    /// The measured value as the paper prints it; [`NOT_MEASURED`] when `status` is
    /// [`Status::NotMeasured`].
    pub value: String,
    pub status: Status,
}

/// [`Check`] as exported: the value of a check not measured is `null`, its status `not_measured`.
#[derive(Serialize, Deserialize)]
struct CheckJson {
    id: String,
    check: String,
    criterion: String,
    value: Option<String>,
    status: Status,
}

impl From<Check> for CheckJson {
    fn from(c: Check) -> Self {
        let value = (c.status != Status::NotMeasured).then_some(c.value);
        CheckJson { id: c.id, check: c.check, criterion: c.criterion, value, status: c.status }
    }
}

impl From<CheckJson> for Check {
    fn from(c: CheckJson) -> Self {
        let value = c.value.unwrap_or_else(|| NOT_MEASURED.into());
        Check { id: c.id, check: c.check, criterion: c.criterion, value, status: c.status }
    }
}

/// Table 4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChecksReport {
    pub checks: Vec<Check>,
    pub verdict: Verdict,
}

impl ChecksReport {
    /// The report with the cache check's value followed by the cache's figures, when the check
    /// is measured: `1200/1200 (805 unique patches); 830 evaluations, 31% saved by the cache`.
    /// A check not measured stays so.
    pub fn with_cache_figures(mut self, figures: &CacheFigures) -> ChecksReport {
        for c in self.checks.iter_mut().filter(|c| c.id == "cache" && c.status != Status::NotMeasured) {
            let _ = write!(c.value, "; {} evaluations", figures.evaluations);
            if let Some(saved) = figures.saved_share {
                let _ = write!(c.value, ", {} saved by the cache", percent(saved));
            }
        }
        self
    }
}

impl ChecksReport {
    /// The report with the runs the study's wall-clock cap stopped (`runner.run_timeout_s`: no
    /// outcome, not run again, so left out of every `n`) after the cap-hits check's value, when
    /// there are any: `12/100 (12%); 3 runs capped by the wall-clock limit (no outcome, not in n)`.
    /// A cap censors slow runs, mostly failing ones, so the count is shown beside the step-cap
    /// hits it would otherwise hide among; it changes no status.
    pub fn with_capped_runs(mut self, capped: u64) -> ChecksReport {
        if capped == 0 {
            return self;
        }
        let runs = if capped == 1 { "run" } else { "runs" };
        for c in self.checks.iter_mut().filter(|c| c.id == "cap_hits") {
            let note = format!("{capped} {runs} capped by the wall-clock limit (no outcome, not in n)");
            if c.status == Status::NotMeasured {
                // A check not measured exports no value: the count goes into its name.
                c.check = format!("{} ({note})", c.check);
            } else {
                c.value = format!("{}; {note}", c.value);
            }
        }
        self
    }
}

/// Trajectories with a confirmed drop (both ends at `K ≥ K_confirm`) or a certified point of no
/// return, of all.
pub fn resolved(trajectories: &[CurveRecord]) -> Ratio {
    let mut ratio = Ratio::default();
    for r in trajectories {
        ratio.count(r.confirmed_drop || r.pnr_certified());
    }
    ratio
}

fn percent(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

/// Table 4 with pass/fail per criterion.
pub fn checks(inputs: &CheckInputs, criteria: &CheckCriteria, params: &Thresholds) -> ChecksReport {
    let status = |measured: bool, met: bool| match (measured, met) {
        (false, _) => Status::NotMeasured,
        (true, true) => Status::Pass,
        (true, false) => Status::Fail,
    };
    let ratio_check = |id: &str, check: &str, criterion: String, ratio: Option<Ratio>, met: &dyn Fn(f64) -> bool| {
        let share = ratio.and_then(|r| r.share());
        Check {
            id: id.into(),
            check: check.into(),
            criterion,
            value: match (ratio, share) {
                (Some(r), Some(s)) => format!("{}/{} ({})", r.hits, r.total, percent(s)),
                _ => NOT_MEASURED.into(),
            },
            status: status(share.is_some(), share.is_some_and(met)),
        }
    };

    let mut list = vec![
        ratio_check(
            "replay",
            "Replay match",
            format!("≥ {} of selected", percent(criteria.replay_min)),
            inputs.replay,
            &|s| meets_at_least(s, criteria.replay_min),
        ),
        ratio_check(
            "flake",
            "Harness flake rate",
            format!("≤ {} (double evaluation above)", percent(criteria.flake_max)),
            inputs.flake,
            &|s| meets_at_most(s, criteria.flake_max),
        ),
    ];

    let sanity = &inputs.sanity;
    list.push(Check {
        id: "t0_sanity".into(),
        check: format!("t = 0 sanity, {} traj.", sanity.rows.len()),
        criterion: format!("two-sided Fisher exact, p ≥ {}", params.alpha),
        value: if sanity.rows.is_empty() {
            NOT_MEASURED.into()
        } else {
            format!("{}/{}", sanity.passed.hits, sanity.passed.total)
        },
        status: status(!sanity.rows.is_empty(), sanity.passed.hits == sanity.passed.total),
    });

    let retest = &inputs.retest;
    list.push(Check {
        id: "test_retest".into(),
        check: "Test–retest".into(),
        criterion: format!("median gap ≤ {}", criteria.retest_median_gap_max),
        value: match (retest.median_gap, retest.max_gap) {
            (Some(median), Some(max)) => format!("{median:.2} ({} anchors; max {max:.2})", retest.anchors),
            _ => NOT_MEASURED.into(),
        },
        status: status(
            retest.median_gap.is_some(),
            retest.median_gap.is_some_and(|g| meets_at_most(g, criteria.retest_median_gap_max)),
        ),
    });

    list.push(ratio_check(
        "cap_hits",
        "Cap hits, continuations",
        format!("< {}", percent(criteria.cap_hits_below)),
        inputs.cap_hits,
        &|s| meets_below(s, criteria.cap_hits_below),
    ));
    list.push(ratio_check(
        "resolved",
        "Confirmed drop or certified t_pnr",
        format!("≥ {} of trajectories", percent(criteria.resolved_min)),
        Some(inputs.resolved),
        &|s| meets_at_least(s, criteria.resolved_min),
    ));
    list.push(Check {
        id: "cache".into(),
        check: "Evaluations via cache".into(),
        criterion: "all".into(),
        value: match inputs.cache {
            Some(c) if c.evaluations > 0 || c.through_cache > 0 => {
                format!("{}/{} ({} unique patches)", c.through_cache, c.evaluations, c.unique_patches)
            }
            _ => NOT_MEASURED.into(),
        },
        status: match inputs.cache {
            Some(c) if c.evaluations > 0 || c.through_cache > 0 => status(true, c.through_cache == c.evaluations),
            _ => Status::NotMeasured,
        },
    });

    let verdict = if list.iter().any(|c| c.status == Status::Fail) {
        Verdict::Fail
    } else if list.iter().all(|c| c.status == Status::Pass) {
        Verdict::Pass
    } else {
        Verdict::Incomplete
    };
    ChecksReport { checks: list, verdict }
}

#[cfg(test)]
mod tests;
