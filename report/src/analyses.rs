//! The paper's analyses (docs/method.md §9) of one study, from its exported [`Results`]: the glue between
//! the export and the pure analyses of `vcurve_method::analyses`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vcurve_method::analyses::checks::{
    self, BudgetControlInput, BudgetControlReport, CacheFigures, CacheUse, CheckCriteria, CheckInputs, ChecksReport,
    RetestInput, RetestReport, SanityInput, SanityReport, Screening,
};
use vcurve_method::analyses::labels::{PlacementOptions, PlacementReport, place_labels};
use vcurve_method::analyses::localizers::{LocalizerReport, rank_localizers};
use vcurve_method::analyses::restart::{FIXED_STEPS, RestartReport, RestartStudy, restart_policies};
use vcurve_method::analyses::stages::{StageCounts, StageTable, measured_stage_table};
use vcurve_method::analyses::{AnalysisError, BOOTSTRAP_SEED, CurveRecord, DecoyLabel, Label, Measured, Ratio};
use vcurve_method::schedule::Series;
use vcurve_method::{BaseRuns, CurveAnalysis, CurveError, Point, analyze};

use crate::results::{Results, TrajectoryResult};

/// Why a study's analyses could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum AnalysesError {
    #[error(transparent)]
    Curve(#[from] CurveError),
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
    /// The export's `calls.csv`.
    #[error(transparent)]
    Calls(#[from] crate::calls::CallsCsvError),
}

/// Every analysis of one study. What the study has not measured is `null` in the JSON, never an
/// empty table of zeros.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyAnalyses {
    /// Labels against curves (Tables 2 and 21).
    pub labels: PlacementReport,
    /// Restart policies offline (Tables 23–24); `None` (not measured) when a labeled task has no
    /// base runs.
    pub restart: Option<RestartReport>,
    /// Value captured per localizer (Table 32).
    pub localizers: LocalizerReport,
    /// Checks before any claim (Table 4).
    pub checks: ChecksReport,
    /// `t = 0` sanity (Table 18); not measured when no trajectory carried the control.
    pub sanity: Measured<SanityReport>,
    /// Test–retest (Table 19); not measured when no anchor was re-screened.
    pub retest: Measured<RetestReport>,
    /// Budget control (Table 20); not measured when no trajectory was screened with the full budget.
    pub budget_control: Measured<BudgetControlReport>,
    /// Continuations by schedule stage (Table 13); not measured when no trajectory's stage counts
    /// are known (the study's schedule cannot be rebuilt).
    pub stages: Measured<StageTable>,
    /// Rises of the raw estimates that the per-curve notes call genuine recoveries (the paper
    /// found 2 of its 47 curves); absent in an `analyses.json` written before the notes.
    #[serde(default)]
    pub recoveries: Recoveries,
}

/// The genuine recoveries of a study's curves ([`crate::notes::Rise`]): curves whose raw estimates
/// rise between two sampled points whose Wilson 95% intervals do not overlap, which the monotone
/// fit flattens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recoveries {
    /// The measured curves the count is out of.
    pub curves: u32,
    /// How many of them recover genuinely.
    pub genuine: u32,
    /// Those trajectories, in the study's order.
    pub trajectories: Vec<String>,
}

impl Recoveries {
    /// The count over `notes` (a note without a curve counts in neither).
    pub fn of(notes: &[crate::notes::Note]) -> Recoveries {
        let curves: Vec<_> = notes.iter().filter(|n| n.shape.is_some()).collect();
        let trajectories: Vec<String> =
            curves.iter().filter(|n| n.rise.is_some_and(|r| r.genuine)).map(|n| n.trajectory.clone()).collect();
        Recoveries { curves: curves.len() as u32, genuine: trajectories.len() as u32, trajectories }
    }
}

/// A report of a control, or not measured when the control has no rows.
fn measured_if<T>(has_rows: bool, report: T) -> Measured<T> {
    if has_rows { Measured::Value(report) } else { Measured::NotMeasured }
}

/// An exported first edit or first symptom: known only once the trajectory is replayed, so `None`
/// is not measured (the export cannot yet say "never").
fn points(tr: &TrajectoryResult, series: Series) -> Vec<Point> {
    tr.series
        .get(&series)
        .map(|ps| ps.iter().map(|p| Point { t: p.t, n: p.n, successes: p.successes }).collect())
        .unwrap_or_default()
}

/// The analyzed main curve of every trajectory that has one.
fn curves(results: &Results) -> Result<Vec<(&TrajectoryResult, CurveAnalysis)>, CurveError> {
    results
        .trajectories
        .iter()
        .filter(|tr| tr.series.contains_key(&Series::Main))
        .map(|tr| {
            let base = (!tr.base_runs.0.is_empty()).then_some(&tr.base_runs);
            Ok((tr, analyze(tr.length, &points(tr, Series::Main), base, results.budget, &results.thresholds)?))
        })
        .collect()
}

/// A count of the patch cache as a [`Ratio`]'s `u32`, saturating.
fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The replay check's ratio: of the trajectories with a recorded run whose replay finished, the
/// ones it reconstructed (see [`TrajectoryResult::replay_reconstructed`]); `None` when there is
/// none (a synthetic study, or no replay finished yet).
fn replay_ratio(results: &Results) -> Option<Ratio> {
    let finished: Vec<bool> = results.trajectories.iter().filter_map(TrajectoryResult::replay_reconstructed).collect();
    let hits = finished.iter().filter(|&&r| r).count() as u32;
    (!finished.is_empty()).then_some(Ratio { hits, total: finished.len() as u32 })
}

/// The cache check's counts: the runs with an outcome — continuations and base runs, each needed a
/// verdict on its patch — against the runs the patch cache judged. `None` (not measured) for a
/// study whose runner judges no patch.
fn cache_use(results: &Results) -> Option<CacheUse> {
    let e = results.evaluation?;
    let runs: u32 = results.trajectories.iter().map(|t| t.continuations - t.retired).sum::<u32>()
        + saturate(e.stats.base_run_outcomes);
    Some(CacheUse {
        evaluations: runs,
        through_cache: saturate(e.stats.judged_runs()),
        unique_patches: saturate(e.stats.unique_patches),
    })
}

/// Compute every analysis of a study.
pub fn analyses(results: &Results) -> Result<StudyAnalyses, AnalysesError> {
    let params = &results.thresholds;
    let curves = curves(results)?;
    let records: Vec<CurveRecord> = curves
        .iter()
        .map(|(tr, a)| {
            let mut r = CurveRecord::from_analysis(&tr.trajectory, &tr.task, a, params);
            r.first_edit = tr.first_edit;
            r.first_symptom = tr.first_symptom;
            r
        })
        .collect();
    let labels: Vec<Label> = curves
        .iter()
        .flat_map(|(tr, _)| {
            tr.labels.iter().map(|(source, step)| Label {
                trajectory: tr.trajectory.clone(),
                source: source.clone(),
                step: *step,
            })
        })
        .collect();
    let mut base_runs: BTreeMap<String, BaseRuns> = BTreeMap::new();
    for tr in &results.trajectories {
        if !tr.base_runs.0.is_empty() {
            base_runs.entry(tr.task.clone()).or_insert_with(|| tr.base_runs.clone());
        }
    }

    let decoys: Vec<DecoyLabel> = results
        .decoys
        .iter()
        .flat_map(|d| {
            d.labels.iter().map(|l| DecoyLabel {
                decoy: d.id.clone(),
                task: d.task.clone(),
                source: l.source.clone(),
                step: l.step,
                length: Some(d.length),
            })
        })
        .collect();

    let placement = place_labels(&records, &labels, &PlacementOptions::default(), params)?;
    let tasks_with_runs =
        records.iter().map(|r| &r.task).chain(decoys.iter().map(|d| &d.task)).all(|t| base_runs.contains_key(t));
    let restart = if tasks_with_runs {
        let study = RestartStudy {
            trajectories: &records,
            labels: &labels,
            decoys: &decoys,
            base_runs: &base_runs,
            judges: None,
            fixed_steps: &FIXED_STEPS,
        };
        Some(restart_policies(&study, params)?)
    } else {
        None
    };
    let localizers = rank_localizers(&records, &labels, None, BOOTSTRAP_SEED)?;

    let sanity_inputs: Vec<SanityInput> = curves
        .iter()
        .filter(|(tr, _)| tr.controls.sanity && !tr.base_runs.0.is_empty())
        .filter_map(|(tr, a)| {
            let h0 = a.points.iter().find(|p| p.t == 0)?;
            Some(SanityInput::new(&tr.trajectory, Point { t: 0, n: h0.n, successes: h0.successes }, &tr.base_runs))
        })
        .collect();
    let sanity = checks::sanity_control(&sanity_inputs, params);

    // Test–retest: the main series' estimate at each re-screened anchor against the fresh seeds.
    let retest_inputs: Vec<RetestInput> = results
        .trajectories
        .iter()
        .flat_map(|tr| {
            let main = points(tr, Series::Main);
            points(tr, Series::Retest).into_iter().filter_map(move |again| {
                let first = main.iter().find(|p| p.t == again.t)?;
                Some(RetestInput {
                    trajectory: tr.trajectory.clone(),
                    t: again.t,
                    first: Ratio { hits: first.successes, total: first.n },
                    second: Ratio { hits: again.successes, total: again.n },
                })
            })
        })
        .collect();
    let retest = checks::retest_control(&retest_inputs, params);

    // Budget control: screening of the anchors with budget B − t against budget B.
    let mut budget_inputs = Vec::new();
    for (tr, a) in &curves {
        let full = points(tr, Series::FullBudget);
        if full.is_empty() {
            continue;
        }
        let anchors: Vec<u32> = full.iter().map(|p| p.t).collect();
        let remaining: Vec<Point> = points(tr, Series::Main).into_iter().filter(|p| anchors.contains(&p.t)).collect();
        let remaining = analyze(tr.length, &remaining, None, results.budget, params)?;
        let full = analyze(tr.length, &full, None, results.budget, params)?;
        budget_inputs.push(BudgetControlInput {
            trajectory: tr.trajectory.clone(),
            length: tr.length,
            remaining: Screening::from(&remaining),
            full: Screening::from(&full),
            final_t_star: a.t_star,
        });
    }
    let budget_control = checks::budget_control(&budget_inputs);

    let inputs = CheckInputs {
        replay: replay_ratio(results),
        flake: results
            .evaluation
            .map(|e| Ratio { hits: saturate(e.stats.flakes), total: saturate(e.stats.flake_checks) }),
        sanity: sanity.clone(),
        retest: retest.clone(),
        // Runs that ended at the step cap among every continuation with an outcome.
        cap_hits: {
            let total: u32 = results.trajectories.iter().map(|t| t.continuations - t.retired).sum();
            (total > 0).then(|| Ratio { hits: results.trajectories.iter().map(|t| t.cap_hits).sum(), total })
        },
        resolved: checks::resolved(&records),
        cache: cache_use(results),
    };
    let mut checks = checks::checks(&inputs, &CheckCriteria::default(), params);
    if let Some(e) = &results.evaluation {
        let figures = CacheFigures { evaluations: e.stats.evaluations, saved_share: e.saved_share };
        checks = checks.with_cache_figures(&figures);
    }
    // Runs the study's wall-clock cap stopped: retired at once, counted beside the cap hits.
    checks = checks.with_capped_runs(results.retired_jobs.iter().map(|r| r.capped()).sum());
    let stages = measured_stage_table(
        &results
            .trajectories
            .iter()
            .filter(|tr| !tr.continuations_by_stage.is_empty())
            .map(|tr| StageCounts {
                trajectory: tr.trajectory.clone(),
                counts: tr.continuations_by_stage.iter().map(|(s, n)| (*s, u64::from(*n))).collect(),
            })
            .collect::<Vec<_>>(),
    );
    Ok(StudyAnalyses {
        labels: placement,
        restart,
        localizers,
        checks,
        sanity: measured_if(!sanity.rows.is_empty(), sanity),
        retest: measured_if(!retest.rows.is_empty(), retest),
        budget_control: measured_if(!budget_control.rows.is_empty(), budget_control),
        stages,
        recoveries: Recoveries::of(&crate::notes::of_results(results)?),
    })
}
