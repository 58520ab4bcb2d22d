//! Eligibility, weights, the category-weighted pooled estimator, the issue-clustered percentile
//! bootstrap and task-equal means with Student-t intervals.
//!
//! A probe's score in a view is the mean credit of its scored samples ("U: 0/3, T: 3/3"). The
//! pooled accuracy of a view is `Σ w_p s_p(v) / Σ w_p` over the probes scored in it; a difference
//! of two views (`Gap_view(v) = Acc(T) − Acc(v)`, `Gap_actor(v) = Acc(A) − Acc(v)`) is taken on
//! the probes scored in both, so it is paired, and with complete data it is exactly the difference
//! of the two accuracies.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::error::TaskStateError;
use super::records::{Category, CheckpointRecord, Credit, ProbeRecord, StudyInput, View};
use super::settings::{EstimatorSettings, WeightScheme};
use crate::bootstrap::quantile;

/// Why a probe is not eligible, the first reason that applies in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// Probe generation gave no question and reference bound to its atom.
    NotWellFormed,
    /// A later stage or an audit excluded it (its reason is on the record).
    Excluded,
    /// Its atom's importance is below the minimum.
    BelowMinImportance,
    /// Eligibility is settled after full-context scoring: without a full-context score a probe
    /// has no reference point for any gap.
    NotScoredInFull,
}

/// The eligibility rule of `settings`: `Ok` or the first reason the probe is left out.
pub fn eligibility(probe: &ProbeRecord, settings: &EstimatorSettings) -> Result<(), Exclusion> {
    if !probe.flags.well_formed {
        return Err(Exclusion::NotWellFormed);
    }
    if probe.flags.excluded.is_some() {
        return Err(Exclusion::Excluded);
    }
    if probe.importance < settings.min_importance {
        return Err(Exclusion::BelowMinImportance);
    }
    if view_score(probe, View::Full, settings).is_none() {
        return Err(Exclusion::NotScoredInFull);
    }
    Ok(())
}

/// The mean credit of a probe's scored samples in `view`, when it has at least
/// `min_scored_samples` of them.
pub fn view_score(probe: &ProbeRecord, view: View, settings: &EstimatorSettings) -> Option<f64> {
    let credits = probe.credits.get(&view)?;
    mean_credit(credits, settings.min_scored_samples)
}

fn mean_credit(credits: &[Credit], min: u32) -> Option<f64> {
    (credits.len() >= min.max(1) as usize)
        .then(|| credits.iter().map(|c| c.value()).sum::<f64>() / credits.len() as f64)
}

/// A two-sided interval (a gap may be negative, so not clamped to `[0, 1]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ci {
    pub lo: f64,
    pub hi: f64,
}

/// A pooled estimate with its issue-clustered percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Probes that entered it.
    pub probes: u64,
    /// Tasks (clusters) among them.
    pub tasks: u32,
    /// `None` when no probe entered it.
    pub value: Option<f64>,
    pub ci: Option<Ci>,
}

/// What a pooled estimate measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Quantity {
    /// `Acc(view)`.
    Accuracy { view: View },
    /// `Acc(minuend) − Acc(subtrahend)` on the probes scored in both.
    Difference { minuend: View, subtrahend: View },
}

impl Quantity {
    pub fn accuracy(view: View) -> Quantity {
        Quantity::Accuracy { view }
    }

    /// `Gap_view(v) = Acc(T) − Acc(v)`.
    pub fn gap_view(view: View) -> Quantity {
        Quantity::Difference { minuend: View::Full, subtrahend: view }
    }

    /// `Gap_actor(v) = Acc(A) − Acc(v)`.
    pub fn gap_actor(view: View) -> Quantity {
        Quantity::Difference { minuend: View::Actor, subtrahend: view }
    }

    /// The probe's term `x_p`, when the probe enters the quantity.
    fn term(self, scores: &Scores) -> Option<f64> {
        match self {
            Quantity::Accuracy { view } => scores[view.index()],
            Quantity::Difference { minuend, subtrahend } => {
                Some(scores[minuend.index()]? - scores[subtrahend.index()]?)
            }
        }
    }
}

pub(crate) type Scores = [Option<f64>; View::ALL.len()];

/// A statistic of a resample's summed cluster vector.
pub(crate) type Statistic = Box<dyn Fn(&[f64]) -> Option<f64>>;

/// An eligible probe ready for the estimators.
#[derive(Debug, Clone)]
pub(crate) struct Weighted<'a> {
    pub record: &'a ProbeRecord,
    pub weight: f64,
    pub scores: Scores,
}

/// A set of weighted probes and the settings to estimate on them.
#[derive(Debug, Clone)]
pub struct Population<'a> {
    pub(crate) probes: Vec<Weighted<'a>>,
    pub(crate) settings: &'a EstimatorSettings,
}

impl<'a> Population<'a> {
    /// The eligible probes of `input` that `keep` accepts, weighted by the settings' scheme over
    /// that same set.
    pub fn eligible(
        input: &'a StudyInput,
        settings: &'a EstimatorSettings,
        keep: impl Fn(&ProbeRecord) -> bool,
    ) -> Result<Population<'a>, TaskStateError> {
        let chosen: Vec<&ProbeRecord> =
            input.probes.iter().filter(|p| eligibility(p, settings).is_ok() && keep(p)).collect();
        Population::weighted(input, settings, chosen, true)
    }

    /// Every probe scored in the full context, eligible or not (for the eligibility filter's
    /// effect). Weights do not check that a stratum has as many atoms as probes.
    pub fn scored(input: &'a StudyInput, settings: &'a EstimatorSettings) -> Result<Population<'a>, TaskStateError> {
        let chosen = input.probes.iter().filter(|p| view_score(p, View::Full, settings).is_some()).collect();
        Population::weighted(input, settings, chosen, false)
    }

    fn weighted(
        input: &'a StudyInput,
        settings: &'a EstimatorSettings,
        chosen: Vec<&'a ProbeRecord>,
        strict: bool,
    ) -> Result<Population<'a>, TaskStateError> {
        let weights = weights(&chosen, &input.checkpoints, &settings.weights, strict)?;
        let probes = chosen
            .into_iter()
            .zip(weights)
            .map(|(record, weight)| {
                let scores = View::ALL.map(|v| view_score(record, v, settings));
                Weighted { record, weight, scores }
            })
            .collect();
        Ok(Population { probes, settings })
    }

    /// The probes this population holds.
    pub fn len(&self) -> usize {
        self.probes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// A sub-population (weights kept as they are).
    pub(crate) fn filter(&self, keep: impl Fn(&Weighted<'a>) -> bool) -> Population<'a> {
        Population { probes: self.probes.iter().filter(|p| keep(p)).cloned().collect(), settings: self.settings }
    }

    /// The point value of a quantity, without an interval.
    pub fn point(&self, quantity: Quantity) -> Option<f64> {
        let (w, wx) = self
            .probes
            .iter()
            .filter_map(|p| quantity.term(&p.scores).map(|x| (p.weight, p.weight * x)))
            .fold((0.0, 0.0), |(a, b), (w, wx)| (a + w, b + wx));
        (w > 0.0).then(|| wx / w)
    }

    /// Quantities with their issue-clustered percentile intervals, all from the same draws
    /// (`settings.bootstrap_draws`, seed `settings.seed`).
    pub fn estimates(&self, quantities: &[Quantity]) -> Vec<Estimate> {
        self.estimates_with(quantities, self.settings.bootstrap_draws)
    }

    pub(crate) fn estimates_with(&self, quantities: &[Quantity], draws: u32) -> Vec<Estimate> {
        let (_, sums) = self.cluster_sums(quantities.len(), |p, out| {
            for (i, q) in quantities.iter().enumerate() {
                if let Some(x) = q.term(&p.scores) {
                    out[2 * i] += p.weight;
                    out[2 * i + 1] += p.weight * x;
                }
            }
        });
        let stats: Vec<Statistic> = (0..quantities.len())
            .map(|i| Box::new(move |s: &[f64]| (s[2 * i] > 0.0).then(|| s[2 * i + 1] / s[2 * i])) as Box<_>)
            .collect();
        let cis = cluster_percentile(&sums, &stats, draws, self.settings.seed, self.settings.confidence);
        quantities
            .iter()
            .zip(cis)
            .map(|(q, ci)| {
                let entering: Vec<&Weighted> = self.probes.iter().filter(|p| q.term(&p.scores).is_some()).collect();
                let clusters =
                    entering.iter().map(|p| p.record.task.as_str()).collect::<std::collections::BTreeSet<_>>();
                Estimate {
                    probes: entering.len() as u64,
                    tasks: clusters.len() as u32,
                    value: self.point(*q),
                    ci: if entering.is_empty() { None } else { ci },
                }
            })
            .collect()
    }

    /// Per task (cluster), the additive sums `fill` computes; tasks in name order.
    pub(crate) fn cluster_sums(
        &self,
        quantities: usize,
        fill: impl Fn(&Weighted, &mut [f64]),
    ) -> (Vec<String>, Vec<Vec<f64>>) {
        self.cluster_sums_width(2 * quantities, fill)
    }

    pub(crate) fn cluster_sums_width(
        &self,
        width: usize,
        fill: impl Fn(&Weighted, &mut [f64]),
    ) -> (Vec<String>, Vec<Vec<f64>>) {
        let mut by_task: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for p in &self.probes {
            fill(p, by_task.entry(p.record.task.as_str()).or_insert_with(|| vec![0.0; width]));
        }
        by_task.into_iter().map(|(t, s)| (t.to_string(), s)).unzip()
    }

    /// The quantity within each task: the task-equal means' per-task values.
    pub fn per_task(&self, quantity: Quantity) -> BTreeMap<String, f64> {
        let mut by_task: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for p in &self.probes {
            if let Some(x) = quantity.term(&p.scores) {
                let e = by_task.entry(p.record.task.as_str()).or_default();
                e.0 += p.weight;
                e.1 += p.weight * x;
            }
        }
        by_task.into_iter().filter(|(_, (w, _))| *w > 0.0).map(|(t, (w, wx))| (t.to_string(), wx / w)).collect()
    }

    /// The task-equal mean of a quantity with its Student-t interval (`df` = tasks − 1).
    pub fn task_equal(&self, quantity: Quantity) -> Option<MeanInterval> {
        let values: Vec<f64> = self.per_task(quantity).into_values().collect();
        t_interval(&values, self.settings.confidence)
    }
}

/// The weights of `probes` under `scheme`. `strict`: a stratum may not hold more probes than atoms.
fn weights(
    probes: &[&ProbeRecord],
    checkpoints: &[CheckpointRecord],
    scheme: &WeightScheme,
    strict: bool,
) -> Result<Vec<f64>, TaskStateError> {
    match scheme {
        WeightScheme::Uniform => Ok(vec![1.0; probes.len()]),
        WeightScheme::PerCategory { weights } => probes
            .iter()
            .map(|p| {
                weights.get(&p.category).copied().ok_or_else(|| {
                    TaskStateError::Input(format!(
                        "probe {} (task {}, checkpoint {}): category {:?} has no weight in the settings",
                        p.probe, p.task, p.checkpoint, p.category
                    ))
                })
            })
            .collect(),
        WeightScheme::InverseSamplingFraction => {
            let atoms: BTreeMap<(&str, u32), &BTreeMap<Category, u32>> =
                checkpoints.iter().map(|c| ((c.task.as_str(), c.checkpoint), &c.atoms)).collect();
            let mut probes_in: BTreeMap<(&str, u32, Category), u32> = BTreeMap::new();
            for p in probes {
                *probes_in.entry((p.task.as_str(), p.checkpoint, p.category)).or_default() += 1;
            }
            probes
                .iter()
                .map(|p| {
                    let n = probes_in[&(p.task.as_str(), p.checkpoint, p.category)];
                    let a = atoms
                        .get(&(p.task.as_str(), p.checkpoint))
                        .and_then(|m| m.get(&p.category))
                        .copied()
                        .unwrap_or(0);
                    let at = format!("task {}, checkpoint {}, category {:?}", p.task, p.checkpoint, p.category);
                    if a == 0 {
                        return Err(TaskStateError::Input(format!(
                            "{at}: {n} probe(s) but no atoms recorded for the stratum (the inverse-sampling-fraction weights need its atom count)"
                        )));
                    }
                    if strict && a < n {
                        return Err(TaskStateError::Input(format!(
                            "{at}: {n} eligible probes but only {a} atoms; probes are a sample of the atoms"
                        )));
                    }
                    Ok(f64::from(a) / f64::from(n))
                })
                .collect()
        }
    }
}

/// Percentile intervals of `stats` over cluster resamples: each draw takes as many clusters as
/// there are, with replacement (ChaCha8 from `seed`), adds their sums, and evaluates every
/// statistic on the total. A draw on which a statistic is undefined is left out of its interval.
pub(crate) fn cluster_percentile(
    clusters: &[Vec<f64>],
    stats: &[Statistic],
    draws: u32,
    seed: u64,
    confidence: f64,
) -> Vec<Option<Ci>> {
    if clusters.is_empty() || draws == 0 {
        return vec![None; stats.len()];
    }
    let width = clusters[0].len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut values: Vec<Vec<f64>> = vec![Vec::with_capacity(draws as usize); stats.len()];
    let mut total = vec![0.0; width];
    for _ in 0..draws {
        total.iter_mut().for_each(|t| *t = 0.0);
        for _ in 0..clusters.len() {
            let c = &clusters[rng.random_range(0..clusters.len())];
            total.iter_mut().zip(c).for_each(|(t, x)| *t += x);
        }
        for (stat, out) in stats.iter().zip(&mut values) {
            if let Some(v) = stat(&total).filter(|v| v.is_finite()) {
                out.push(v);
            }
        }
    }
    let tail = (1.0 - confidence) / 2.0;
    values
        .into_iter()
        .map(|mut v| {
            if v.is_empty() {
                return None;
            }
            v.sort_by(f64::total_cmp);
            Some(Ci { lo: quantile(&v, tail), hi: quantile(&v, 1.0 - tail) })
        })
        .collect()
}

/// A mean over tasks with its two-sided Student-t interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanInterval {
    pub tasks: u32,
    pub mean: f64,
    /// `None` with fewer than two tasks.
    pub ci: Option<Ci>,
    /// Degrees of freedom, tasks − 1.
    pub df: u32,
}

/// The mean of `values` (one per task) with the Student-t interval `mean ± t_{df} · sd / √n`.
pub fn t_interval(values: &[f64], confidence: f64) -> Option<MeanInterval> {
    if values.is_empty() {
        return None;
    }
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let df = (n - 1) as u32;
    let ci = (n >= 2).then(|| {
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = StudentsT::new(0.0, 1.0, f64::from(df))
            .expect("df ≥ 1 is a valid Student-t")
            .inverse_cdf(1.0 - (1.0 - confidence) / 2.0);
        let half = t * (var / n as f64).sqrt();
        Ci { lo: mean - half, hi: mean + half }
    });
    Some(MeanInterval { tasks: n as u32, mean, ci, df })
}

/// The task-paired difference `a − b` over the tasks both have, with its Student-t interval
/// (the cross-harness contrasts).
pub fn task_paired_difference(
    a: &BTreeMap<String, f64>,
    b: &BTreeMap<String, f64>,
    confidence: f64,
) -> Option<MeanInterval> {
    let diffs: Vec<f64> = a.iter().filter_map(|(task, x)| b.get(task).map(|y| x - y)).collect();
    t_interval(&diffs, confidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_state::records::EligibilityFlags;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    pub(crate) fn probe(task: &str, id: &str, k: u32, category: Category, credits: &[(View, &[f64])]) -> ProbeRecord {
        ProbeRecord {
            probe: id.into(),
            task: task.into(),
            checkpoint: k,
            category,
            importance: 2,
            origin_turn: k,
            flags: EligibilityFlags { well_formed: true, excluded: None },
            credits: credits
                .iter()
                .map(|(v, cs)| (*v, cs.iter().map(|&c| Credit::try_from(c).unwrap()).collect()))
                .collect(),
        }
    }

    fn checkpoint(task: &str, k: u32, atoms: &[(Category, u32)]) -> CheckpointRecord {
        CheckpointRecord {
            task: task.into(),
            checkpoint: k,
            fixed: None,
            view_chars: BTreeMap::new(),
            atoms: atoms.iter().copied().collect(),
        }
    }

    #[test]
    fn eligibility_rule_table_7_minimum_importance_and_full_context_scoring() {
        let s = EstimatorSettings::ctxgap_1();
        let mut p = probe("t", "p", 1, Category::Facts, &[(View::Full, &[1.0, 1.0, 0.5])]);
        assert_eq!(eligibility(&p, &s), Ok(()));
        p.importance = 1;
        assert_eq!(eligibility(&p, &s), Err(Exclusion::BelowMinImportance));
        p.importance = 2;
        p.credits.clear();
        assert_eq!(eligibility(&p, &s), Err(Exclusion::NotScoredInFull));
        p.flags.excluded = Some("audit: probe-atom mismatch".into());
        assert_eq!(eligibility(&p, &s), Err(Exclusion::Excluded));
        p.flags.well_formed = false;
        assert_eq!(eligibility(&p, &s), Err(Exclusion::NotWellFormed));
    }

    #[test]
    fn a_probes_view_score_is_its_mean_credit_figure_1() {
        // Figure 1's archived cases: U 0/3, T 3/3.
        let s = EstimatorSettings::ctxgap_1();
        let p =
            probe("t", "p", 1, Category::Risks, &[(View::Reports, &[0.0, 0.0, 0.0]), (View::Full, &[1.0, 1.0, 1.0])]);
        assert_eq!(view_score(&p, View::Reports, &s), Some(0.0));
        assert_eq!(view_score(&p, View::Full, &s), Some(1.0));
        let p = probe("t", "p", 1, Category::Risks, &[(View::Full, &[1.0, 0.5]), (View::Reports, &[])]);
        assert_eq!(view_score(&p, View::Full, &s), Some(0.75));
        assert_eq!(view_score(&p, View::Reports, &s), None);
        assert_eq!(view_score(&p, View::Actor, &s), None);
    }

    #[test]
    fn inverse_sampling_fraction_weights_and_the_pooled_estimator() {
        let s = EstimatorSettings::ctxgap_1();
        // Task a: 2 probes of 10 failure atoms (weight 5 each); task b: 1 probe of 1 fact atom (weight 1).
        let input = StudyInput {
            checkpoints: vec![
                checkpoint("a", 1, &[(Category::Failures, 10)]),
                checkpoint("b", 1, &[(Category::Facts, 1)]),
            ],
            probes: vec![
                probe("a", "a1", 1, Category::Failures, &[(View::Reports, &[0.0; 3]), (View::Full, &[1.0; 3])]),
                probe("a", "a2", 1, Category::Failures, &[(View::Reports, &[1.0; 3]), (View::Full, &[1.0; 3])]),
                probe("b", "b1", 1, Category::Facts, &[(View::Reports, &[1.0; 3]), (View::Full, &[0.5, 0.5, 1.0])]),
            ],
        };
        let pop = Population::eligible(&input, &s, |_| true).unwrap();
        let w: Vec<f64> = pop.probes.iter().map(|p| p.weight).collect();
        assert_eq!(w, vec![5.0, 5.0, 1.0]);
        // Acc(U) = (5·0 + 5·1 + 1·1) / 11; Acc(T) = (5 + 5 + 2/3) / 11.
        assert!(close(pop.point(Quantity::accuracy(View::Reports)).unwrap(), 6.0 / 11.0, 1e-15));
        let t = (10.0 + 2.0 / 3.0) / 11.0;
        assert!(close(pop.point(Quantity::accuracy(View::Full)).unwrap(), t, 1e-15));
        // The gap is the difference of the accuracies on the same probes.
        assert!(close(pop.point(Quantity::gap_view(View::Reports)).unwrap(), t - 6.0 / 11.0, 1e-15));
        assert_eq!(pop.point(Quantity::accuracy(View::Actor)), None);

        let uniform = EstimatorSettings { weights: WeightScheme::Uniform, ..s.clone() };
        let pop = Population::eligible(&input, &uniform, |_| true).unwrap();
        assert!(close(pop.point(Quantity::accuracy(View::Reports)).unwrap(), 2.0 / 3.0, 1e-15));
    }

    #[test]
    fn weights_refuse_strata_without_atoms_naming_the_stratum() {
        let s = EstimatorSettings::ctxgap_1();
        let mut input = StudyInput {
            checkpoints: vec![checkpoint("a", 2, &[(Category::Failures, 1)])],
            probes: vec![
                probe("a", "a1", 2, Category::Failures, &[(View::Full, &[1.0; 3])]),
                probe("a", "a2", 2, Category::Failures, &[(View::Full, &[1.0; 3])]),
            ],
        };
        let err = Population::eligible(&input, &s, |_| true).unwrap_err().to_string();
        assert!(err.contains("task a, checkpoint 2, category Failures: 2 eligible probes but only 1 atoms"), "{err}");
        input.probes[1].category = Category::Risks;
        let err = Population::eligible(&input, &s, |_| true).unwrap_err().to_string();
        assert!(err.contains("task a, checkpoint 2, category Risks: 1 probe(s) but no atoms recorded"), "{err}");
        let per = EstimatorSettings {
            weights: WeightScheme::PerCategory { weights: BTreeMap::from([(Category::Failures, 2.0)]) },
            ..s
        };
        let err = Population::eligible(&input, &per, |_| true).unwrap_err().to_string();
        assert!(err.contains("probe a2 (task a, checkpoint 2): category Risks has no weight"), "{err}");
    }

    fn clustered_input(tasks: usize) -> StudyInput {
        let mut input = StudyInput::default();
        for t in 0..tasks {
            let task = format!("task-{t:02}");
            input.checkpoints.push(checkpoint(&task, 1, &[(Category::Facts, 4)]));
            for i in 0..4 {
                let u = if (t + i) % 3 == 0 { 1.0 } else { 0.0 };
                let a = if (t * 7 + i) % 5 == 0 { 0.5 } else { 1.0 };
                input.probes.push(probe(
                    &task,
                    &format!("{task}-{i}"),
                    1,
                    Category::Facts,
                    &[(View::Reports, &[u, u, 0.0]), (View::Full, &[1.0, 1.0, a]), (View::Actor, &[a, 1.0, 1.0])],
                ));
            }
        }
        input
    }

    #[test]
    fn the_issue_clustered_bootstrap_is_deterministic_given_the_seed_table_5() {
        let s = EstimatorSettings::ctxgap_1();
        let input = clustered_input(12);
        let pop = Population::eligible(&input, &s, |_| true).unwrap();
        let q =
            [Quantity::accuracy(View::Reports), Quantity::gap_view(View::Reports), Quantity::gap_actor(View::Reports)];
        let first = pop.estimates(&q);
        assert_eq!(pop.estimates(&q), first);
        for e in &first {
            let (v, ci) = (e.value.unwrap(), e.ci.unwrap());
            assert!(ci.lo < v && v < ci.hi, "{e:?}");
            assert_eq!((e.probes, e.tasks), (48, 12));
        }
        // The seed drives the draws: with few draws, another seed gives another interval.
        let other = EstimatorSettings { seed: 1, ..s.clone() };
        let pop1 = Population::eligible(&input, &other, |_| true).unwrap();
        assert_ne!(pop1.estimates_with(&q, 20), pop.estimates_with(&q, 20));
        assert_eq!(pop.estimates_with(&q, 20), pop.estimates_with(&q, 20));
        // Identical clusters: a point interval.
        let same = StudyInput {
            checkpoints: (0..5).map(|t| checkpoint(&format!("t{t}"), 1, &[(Category::Facts, 1)])).collect(),
            probes: (0..5)
                .map(|t| {
                    probe(
                        &format!("t{t}"),
                        &format!("p{t}"),
                        1,
                        Category::Facts,
                        &[(View::Reports, &[1.0, 0.0]), (View::Full, &[1.0; 3])],
                    )
                })
                .collect(),
        };
        let pop = Population::eligible(&same, &s, |_| true).unwrap();
        assert_eq!(pop.estimates(&[Quantity::accuracy(View::Reports)])[0].ci, Some(Ci { lo: 0.5, hi: 0.5 }));
        // Nothing entered: no value, no interval.
        let e = pop.estimates(&[Quantity::accuracy(View::Actor)])[0];
        assert_eq!((e.probes, e.value, e.ci), (0, None, None));
    }

    #[test]
    fn the_bootstrap_resamples_issues_not_probes() {
        // Copying every probe of every task 5 times leaves each resample's pooled ratio unchanged,
        // so the issue-clustered interval is the same; a probe-level bootstrap would narrow it.
        let s = EstimatorSettings {
            weights: WeightScheme::Uniform,
            bootstrap_draws: 2_000,
            ..EstimatorSettings::ctxgap_1()
        };
        let once = clustered_input(10);
        let mut five = once.clone();
        five.probes = (0..5)
            .flat_map(|copy| {
                once.probes.iter().map(move |p| ProbeRecord { probe: format!("{}-{copy}", p.probe), ..p.clone() })
            })
            .collect();
        let q = [Quantity::accuracy(View::Reports), Quantity::gap_view(View::Reports)];
        let a = Population::eligible(&once, &s, |_| true).unwrap().estimates(&q);
        let b = Population::eligible(&five, &s, |_| true).unwrap().estimates(&q);
        for (a, b) in a.iter().zip(&b) {
            assert_eq!((a.tasks, b.tasks, a.probes * 5), (10, 10, b.probes));
            assert!(close(a.value.unwrap(), b.value.unwrap(), 1e-12));
            let (ca, cb) = (a.ci.unwrap(), b.ci.unwrap());
            assert!(close(ca.lo, cb.lo, 1e-12) && close(ca.hi, cb.hi, 1e-12), "{ca:?} {cb:?}");
        }
    }

    #[test]
    fn student_t_intervals_use_tasks_minus_one_degrees_of_freedom_table_52() {
        // 12 tasks -> df = 11, t_{.975, 11} = 2.200985.
        let values: Vec<f64> = (0..12).map(|i| 0.3 + 0.02 * f64::from(i)).collect();
        let m = t_interval(&values, 0.95).unwrap();
        assert_eq!((m.tasks, m.df), (12, 11));
        assert!(close(m.mean, 0.41, 1e-12));
        let sd = (values.iter().map(|v| (v - 0.41).powi(2)).sum::<f64>() / 11.0).sqrt();
        let ci = m.ci.unwrap();
        assert!(close(ci.hi - m.mean, 2.200_985 * sd / 12f64.sqrt(), 1e-6), "{ci:?}");
        assert!(close(m.mean - ci.lo, ci.hi - m.mean, 1e-12));
        let one = t_interval(&[0.5], 0.95).unwrap();
        assert_eq!((one.mean, one.ci, one.df), (0.5, None, 0));
        assert_eq!(t_interval(&[], 0.95), None);
    }

    #[test]
    fn task_paired_differences_are_differences_of_task_equal_means_table_53() {
        // Table 53's pairs are differences of Table 52's task-level gaps: .407 − .390 = .017,
        // .407 − .490 = −.083, .390 − .490 = −.100. With the same tasks the mean of the paired
        // differences equals the difference of the task-equal means.
        let a: BTreeMap<String, f64> = (0..12).map(|i| (format!("i{i}"), 0.3 + 0.01 * f64::from(i * i % 7))).collect();
        let b: BTreeMap<String, f64> = (0..12).map(|i| (format!("i{i}"), 0.35 + 0.02 * f64::from(i % 5))).collect();
        let d = task_paired_difference(&a, &b, 0.95).unwrap();
        let ma = t_interval(&a.values().copied().collect::<Vec<_>>(), 0.95).unwrap().mean;
        let mb = t_interval(&b.values().copied().collect::<Vec<_>>(), 0.95).unwrap().mean;
        assert!(close(d.mean, ma - mb, 1e-12));
        assert_eq!(d.df, 11);
        for (x, y, printed) in [(0.407, 0.390, 0.017), (0.407, 0.490, -0.083), (0.390, 0.490, -0.100)] {
            assert!(close(x - y, printed, 5e-4));
        }
    }

    #[test]
    fn task_equal_means_weight_every_task_alike() {
        let s = EstimatorSettings { weights: WeightScheme::Uniform, ..EstimatorSettings::ctxgap_1() };
        let input = StudyInput {
            checkpoints: vec![checkpoint("a", 1, &[]), checkpoint("b", 1, &[])],
            probes: vec![
                probe("a", "a1", 1, Category::Facts, &[(View::Reports, &[1.0; 3]), (View::Full, &[1.0; 3])]),
                probe("b", "b1", 1, Category::Facts, &[(View::Reports, &[0.0; 3]), (View::Full, &[1.0; 3])]),
                probe("b", "b2", 1, Category::Facts, &[(View::Reports, &[0.0; 3]), (View::Full, &[1.0; 3])]),
                probe("b", "b3", 1, Category::Facts, &[(View::Reports, &[0.0; 3]), (View::Full, &[1.0; 3])]),
            ],
        };
        let pop = Population::eligible(&input, &s, |_| true).unwrap();
        assert_eq!(pop.point(Quantity::accuracy(View::Reports)), Some(0.25));
        let te = pop.task_equal(Quantity::accuracy(View::Reports)).unwrap();
        assert_eq!((te.tasks, te.mean), (2, 0.5));
        assert_eq!(
            pop.per_task(Quantity::gap_view(View::Reports)),
            BTreeMap::from([("a".into(), 0.0), ("b".into(), 1.0)])
        );
    }
}
