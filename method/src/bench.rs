//! The schedule benchmark of issue 3 (the paper's Table 33): run a schedule on synthetic curves
//! with Bernoulli outcomes, analyze each curve, and compare with the truth.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::curve::Shape;
use crate::schedule::{Series, Stage, TrajectoryPlan, TrajectorySchedule, Variant};
use crate::synthetic::{Family, SyntheticCurve};
use crate::{Thresholds, analyze, meets_at_least};

/// What one simulated curve gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveResult {
    pub family: Family,
    pub length: u32,
    pub true_t_star: u32,
    pub true_drop: f64,
    pub true_shape: Option<Shape>,
    pub t_star: Option<u32>,
    pub shape: Shape,
    pub drop_found: bool,
    pub onset_found: bool,
    pub pnr_certified: bool,
    pub continuations: u32,
    pub by_stage: BTreeMap<Stage, u32>,
}

/// Run `variant` on curve `index` of `family` to the end and analyze it.
pub fn simulate(
    variant: &'static dyn Variant,
    params: &Thresholds,
    family: Family,
    seed: u64,
    index: u64,
) -> CurveResult {
    let curve = SyntheticCurve::draw(family, seed, index);
    let length = curve.length();
    let plan = TrajectoryPlan { length, labels: Vec::new(), controls: Default::default() };
    let mut schedule = TrajectorySchedule::new(plan, params, variant);
    while !schedule.is_done() {
        let outcomes = schedule.pending().into_iter().map(|key| {
            let outcome =
                if curve.outcome(key) { crate::schedule::Outcome::Success } else { crate::schedule::Outcome::Failure };
            (key, outcome)
        });
        let outcomes: Vec<_> = outcomes.collect();
        schedule.record_all(outcomes).expect("keys come from the schedule");
    }
    let points = schedule.points().sampled(Series::Main);
    let analysis = analyze(length, &points, None, schedule.params().budget, schedule.params()).expect("valid points");
    let (true_t_star, true_drop) = curve.true_t_star();
    CurveResult {
        family,
        length,
        true_t_star,
        true_drop,
        true_shape: curve.true_shape(),
        t_star: analysis.t_star,
        shape: analysis.shape,
        drop_found: drop_found(&schedule),
        onset_found: analysis.onset.is_some(),
        pnr_certified: analysis.pnr_certified,
        continuations: schedule.requested_total(),
        by_stage: schedule.cost_by_stage().clone(),
    }
}

/// The largest confirmed bracketed drop before the terminal step is still at least
/// `δ_screen` once its ends are at `K_confirm`.
fn drop_found(schedule: &TrajectorySchedule) -> bool {
    let params = schedule.params();
    let points = schedule.points();
    schedule
        .memory()
        .confirmed
        .iter()
        .filter(|&&(_, b)| b < schedule.plan().length)
        .filter(|&&(a, b)| {
            points.counts(Series::Main, a).0 >= params.k_confirm && points.counts(Series::Main, b).0 >= params.k_confirm
        })
        .map(|&(a, b)| points.drop(Series::Main, a, b))
        .fold(None, |best: Option<f64>, d| Some(best.map_or(d, |b| b.max(d))))
        .is_some_and(|d| meets_at_least(d, params.delta_screen))
}

/// One family's figures (the columns of the paper's Table 33).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyReport {
    pub curves: usize,
    /// Share of curves whose estimated shape is the true one (`None` for flat curves).
    pub shape_accuracy: Option<f64>,
    pub cliff_share: f64,
    pub drop_found: f64,
    pub onset_found: f64,
    pub pnr_certified: f64,
    pub continuations_mean: f64,
    pub continuations_median: f64,
    pub continuations_p90: f64,
    /// Curves whose true largest drop is at least 0.4.
    pub big_cliff_n: usize,
    pub big_cliff_median_abs_error: Option<f64>,
    pub big_cliff_within_one: Option<f64>,
    /// Mean continuations per curve by stage.
    pub continuations_by_stage: BTreeMap<Stage, f64>,
}

fn share(results: &[&CurveResult], f: impl Fn(&CurveResult) -> bool) -> f64 {
    if results.is_empty() {
        return 0.0;
    }
    results.iter().filter(|r| f(r)).count() as f64 / results.len() as f64
}

/// Linear-interpolation quantile of unsorted values.
fn quantile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// The true largest drop that makes a big cliff.
pub const BIG_CLIFF: f64 = 0.4;

/// Aggregate one family's results.
pub fn family_report(results: &[&CurveResult]) -> FamilyReport {
    let costs: Vec<f64> = results.iter().map(|r| f64::from(r.continuations)).collect();
    let with_shape: Vec<&CurveResult> = results.iter().copied().filter(|r| r.true_shape.is_some()).collect();
    let big: Vec<&CurveResult> = results.iter().copied().filter(|r| meets_at_least(r.true_drop, BIG_CLIFF)).collect();
    let errors: Vec<f64> =
        big.iter().map(|r| r.t_star.map_or(f64::INFINITY, |t| f64::from(t.abs_diff(r.true_t_star)))).collect();
    let mut by_stage: BTreeMap<Stage, f64> = BTreeMap::new();
    for r in results {
        for (stage, n) in &r.by_stage {
            *by_stage.entry(*stage).or_default() += f64::from(*n);
        }
    }
    for v in by_stage.values_mut() {
        *v /= results.len().max(1) as f64;
    }
    FamilyReport {
        curves: results.len(),
        shape_accuracy: (!with_shape.is_empty()).then(|| share(&with_shape, |r| Some(r.shape) == r.true_shape)),
        cliff_share: share(results, |r| r.shape == Shape::Cliff),
        drop_found: share(results, |r| r.drop_found),
        onset_found: share(results, |r| r.onset_found),
        pnr_certified: share(results, |r| r.pnr_certified),
        continuations_mean: costs.iter().sum::<f64>() / costs.len().max(1) as f64,
        continuations_median: quantile(&costs, 0.5).unwrap_or(0.0),
        continuations_p90: quantile(&costs, 0.9).unwrap_or(0.0),
        big_cliff_n: big.len(),
        big_cliff_median_abs_error: quantile(&errors, 0.5),
        big_cliff_within_one: (!big.is_empty())
            .then(|| errors.iter().filter(|&&e| e <= 1.0).count() as f64 / big.len() as f64),
        continuations_by_stage: by_stage,
    }
}

/// A schedule's figures on every family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleReport {
    pub schedule: &'static str,
    pub families: BTreeMap<&'static str, FamilyReport>,
}

/// Aggregate results of one schedule by family.
pub fn schedule_report(schedule: &'static str, results: &[CurveResult]) -> ScheduleReport {
    let families = Family::ALL
        .iter()
        .filter_map(|&family| {
            let of: Vec<&CurveResult> = results.iter().filter(|r| r.family == family).collect();
            (!of.is_empty()).then(|| (family.as_str(), family_report(&of)))
        })
        .collect();
    ScheduleReport { schedule, families }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::variant_by_name;

    #[test]
    fn a_small_bench_behaves_like_the_paper() {
        let paper = variant_by_name("paper").unwrap();
        let params = Thresholds::default();
        let results: Vec<CurveResult> = Family::ALL
            .iter()
            .flat_map(|&f| (0..60).map(move |i| (f, i)))
            .map(|(f, i)| simulate(paper, &params, f, 3, i))
            .collect();
        let report = schedule_report("paper", &results);
        let plateau = &report.families["plateau_cliff"];
        assert!(plateau.shape_accuracy.unwrap() > 0.8, "{plateau:?}");
        assert!(plateau.pnr_certified > 0.9);
        assert!((150.0..400.0).contains(&plateau.continuations_mean));
        let erosion = &report.families["erosion"];
        assert!(erosion.shape_accuracy.unwrap() > 0.7, "{erosion:?}");
        let flat = &report.families["flat"];
        assert_eq!(flat.shape_accuracy, None);
        assert!(flat.pnr_certified < 0.1);
    }

    #[test]
    fn simulation_is_reproducible() {
        let paper = variant_by_name("paper").unwrap();
        let params = Thresholds::default();
        assert_eq!(simulate(paper, &params, Family::Cliff, 9, 4), simulate(paper, &params, Family::Cliff, 9, 4));
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0], 0.5), Some(2.5));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9), Some(9.1));
        assert_eq!(quantile(&[], 0.9), None);
    }
}
