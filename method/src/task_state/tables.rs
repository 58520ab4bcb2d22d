//! The tables of a task-state study, from its records: the inventory (Table 4), the views with
//! their accuracies and gaps (Tables 1, 5 and 14), task-equal means (Table 52's estimator), the
//! telescoping decomposition (Table 13), the checkpoints (Tables 15 and 50) and the outcome
//! subsets (Table 1's last row, Table 10).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::error::TaskStateError;
use super::estimate::{
    Ci, Estimate, Exclusion, MeanInterval, Population, Quantity, Statistic, cluster_percentile, eligibility,
};
use super::records::{StudyInput, View};
use super::settings::EstimatorSettings;

/// What the study holds (Table 4, and Table 2's first row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub tasks: u32,
    pub checkpoints: u32,
    pub probes_generated: u64,
    pub probes_eligible: u64,
    /// Probes left out, by the first reason that applies.
    pub exclusions: BTreeMap<Exclusion, u64>,
    /// Scored answer samples per view, over every probe.
    pub scored_samples: BTreeMap<View, u64>,
    /// `Gap_view(U)` on the eligible probes minus on every probe scored in the full context (the
    /// study: "+0.56 pp"); `None` when either is undefined.
    pub eligibility_effect: Option<f64>,
}

/// A view's row: Tables 1, 5 and 14.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewRow {
    pub view: View,
    pub symbol: String,
    /// Mean characters of the view's text over the checkpoints that recorded it.
    pub mean_chars: Option<f64>,
    pub accuracy: Estimate,
    /// `Acc(T) − Acc(view)`.
    pub gap_view: Estimate,
    /// `Acc(A) − Acc(view)`.
    pub gap_actor: Estimate,
}

/// Task-equal means of a view with Student-t intervals (the cross-harness estimator, Table 52).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEqualRow {
    pub view: View,
    pub accuracy: Option<MeanInterval>,
    pub gap_view: Option<MeanInterval>,
    pub gap_actor: Option<MeanInterval>,
}

/// One step of the telescoping decomposition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecompositionRow {
    pub view: View,
    pub accuracy: f64,
    /// The increase from the preceding view (`None` on the first).
    pub step: Option<f64>,
    /// The step over the whole gap (`None` on the first, or when the gap is 0).
    pub share: Option<f64>,
    /// Paired task-cluster percentile interval of the share.
    pub share_ci: Option<Ci>,
}

/// The telescoping decomposition of the report-to-full-context gap (Table 13): the steps add up
/// to the gap exactly, so the shares add up to one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decomposition {
    /// Probes scored in every view of the chain.
    pub probes: u64,
    pub tasks: u32,
    pub rows: Vec<DecompositionRow>,
    /// Last view's accuracy minus the first's.
    pub gap: f64,
}

/// A gap within this of 0, in accuracy, is none: two views' equal accuracies come out of their
/// different sums a rounding error (about 1e-16) apart, and shares of such a gap would be
/// rounding errors over rounding errors (±10^14).
pub const NO_GAP: f64 = 1e-12;

impl Decomposition {
    /// Steps and shares from the chain's accuracies, without intervals; no shares when the gap is
    /// within [`NO_GAP`] of 0 (and the gap is then 0).
    pub fn from_accuracies(chain: &[(View, f64)]) -> Option<Decomposition> {
        let (first, last) = (chain.first()?.1, chain.last()?.1);
        let gap = if (last - first).abs() <= NO_GAP { 0.0 } else { last - first };
        let rows = chain
            .iter()
            .enumerate()
            .map(|(i, &(view, accuracy))| {
                let step = (i > 0).then(|| accuracy - chain[i - 1].1);
                DecompositionRow {
                    view,
                    accuracy,
                    step,
                    share: step.filter(|_| gap != 0.0).map(|s| s / gap),
                    share_ci: None,
                }
            })
            .collect();
        Some(Decomposition { probes: 0, tasks: 0, rows, gap })
    }
}

/// The decomposition on the probes scored in every view of the settings' chain, with share
/// intervals from `decomposition_draws` paired task-cluster resamples.
pub fn decomposition(pop: &Population) -> Option<Decomposition> {
    let chain = &pop.settings.decomposition_chain;
    let complete = pop.filter(|p| chain.iter().all(|v| p.scores[v.index()].is_some()));
    if complete.is_empty() {
        return None;
    }
    let accuracies: Vec<(View, f64)> =
        chain.iter().map(|&v| Some((v, complete.point(Quantity::accuracy(v))?))).collect::<Option<_>>()?;
    let mut d = Decomposition::from_accuracies(&accuracies)?;
    // Per task: [Σw, Σw·s(chain[0]), …, Σw·s(chain[m])].
    let (tasks, sums) = complete.cluster_sums_width(chain.len() + 1, |p, out| {
        out[0] += p.weight;
        for (i, v) in chain.iter().enumerate() {
            out[i + 1] += p.weight * p.scores[v.index()].expect("complete probes are scored in the chain");
        }
    });
    let last = chain.len();
    let stats: Vec<Statistic> = (1..chain.len())
        .map(|i| {
            Box::new(move |s: &[f64]| {
                // Weighted sums: the gap's accuracy is `total / s[0]`.
                let total = s[last] - s[1];
                (total.abs() > NO_GAP * s[0].abs()).then(|| (s[i + 1] - s[i]) / total)
            }) as Box<_>
        })
        .collect();
    let cis =
        cluster_percentile(&sums, &stats, pop.settings.decomposition_draws, pop.settings.seed, pop.settings.confidence);
    for (row, ci) in d.rows.iter_mut().skip(1).zip(cis) {
        row.share_ci = if row.share.is_some() { ci } else { None };
    }
    d.probes = complete.len() as u64;
    d.tasks = tasks.len() as u32;
    Some(d)
}

/// A checkpoint number's row: Tables 15 and 50.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRow {
    pub checkpoint: u32,
    /// Sessions with this checkpoint.
    pub sessions: u32,
    pub probes: u64,
    /// Mean weighted count per checkpoint of unaligned atoms that arose in this turn.
    pub fresh: f64,
    /// … that arose in an earlier turn.
    pub earlier: f64,
    /// `fresh + earlier`.
    pub unaligned: f64,
    pub accuracy_reports: Option<f64>,
    pub accuracy_full: Option<f64>,
    pub accuracy_actor: Option<f64>,
    pub gap_view: Estimate,
    pub gap_actor: Estimate,
}

/// Which probes an outcome row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subset {
    /// The final checkpoint of each task whose final checkpoint is judged fixed (Table 1's last row).
    FixedAtFinal,
    /// Every checkpoint of the tasks fixed at their final checkpoint (Table 10, "Fixed; all k").
    FixedAllCheckpoints,
    /// The final checkpoint of every task (Table 10, "All runs; k = 4").
    AllAtFinal,
}

/// Table 10's rows (and Table 1's last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRow {
    pub subset: Subset,
    pub accuracy_reports: Option<f64>,
    pub accuracy_full: Option<f64>,
    pub gap_view: Estimate,
    pub gap_actor: Estimate,
}

/// Every table of a study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStateReport {
    pub settings: EstimatorSettings,
    pub inventory: Inventory,
    /// Every view with at least one scored probe, in [`View::ALL`] order.
    pub views: Vec<ViewRow>,
    pub task_equal: Vec<TaskEqualRow>,
    pub decomposition: Option<Decomposition>,
    pub checkpoints: Vec<CheckpointRow>,
    pub outcomes: Vec<OutcomeRow>,
}

impl TaskStateReport {
    /// The pooled accuracy of every measured view, by its key (the `accuracy` object of an
    /// export's `task_state.json`).
    pub fn accuracy(&self) -> BTreeMap<String, f64> {
        self.views.iter().filter_map(|r| Some((r.view.key().to_string(), r.accuracy.value?))).collect()
    }
}

/// Every table of a study from its records.
pub fn analyze(input: &StudyInput, settings: &EstimatorSettings) -> Result<TaskStateReport, TaskStateError> {
    settings.validate()?;
    input.validate(settings.samples_per_view)?;
    let pop = Population::eligible(input, settings, |_| true)?;

    let views: Vec<View> =
        View::ALL.into_iter().filter(|v| pop.probes.iter().any(|p| p.scores[v.index()].is_some())).collect();
    let quantities: Vec<Quantity> =
        views.iter().flat_map(|&v| [Quantity::accuracy(v), Quantity::gap_view(v), Quantity::gap_actor(v)]).collect();
    let estimates = pop.estimates(&quantities);
    let view_rows = views
        .iter()
        .zip(estimates.chunks(3))
        .map(|(&view, e)| ViewRow {
            view,
            symbol: view.symbol().into(),
            mean_chars: mean_chars(input, view),
            accuracy: e[0],
            gap_view: e[1],
            gap_actor: e[2],
        })
        .collect();
    let task_equal = views
        .iter()
        .map(|&view| TaskEqualRow {
            view,
            accuracy: pop.task_equal(Quantity::accuracy(view)),
            gap_view: pop.task_equal(Quantity::gap_view(view)),
            gap_actor: pop.task_equal(Quantity::gap_actor(view)),
        })
        .collect();

    Ok(TaskStateReport {
        settings: settings.clone(),
        inventory: inventory(input, settings, &pop)?,
        views: view_rows,
        task_equal,
        decomposition: decomposition(&pop),
        checkpoints: checkpoint_rows(input, &pop),
        outcomes: outcome_rows(input, &pop),
    })
}

fn mean_chars(input: &StudyInput, view: View) -> Option<f64> {
    let chars: Vec<u64> = input.checkpoints.iter().filter_map(|c| c.view_chars.get(&view).copied()).collect();
    (!chars.is_empty()).then(|| chars.iter().sum::<u64>() as f64 / chars.len() as f64)
}

/// Table 4 for one study, with the eligibility filter's effect on `Gap_view(U)`.
pub fn inventory(
    input: &StudyInput,
    settings: &EstimatorSettings,
    eligible: &Population,
) -> Result<Inventory, TaskStateError> {
    let mut exclusions = BTreeMap::new();
    let mut scored_samples = BTreeMap::new();
    for p in &input.probes {
        if let Err(why) = eligibility(p, settings) {
            *exclusions.entry(why).or_insert(0) += 1;
        }
        for (view, credits) in &p.credits {
            *scored_samples.entry(*view).or_insert(0) += credits.len() as u64;
        }
    }
    let gap = Quantity::gap_view(View::Reports);
    let all = Population::scored(input, settings)?;
    let eligibility_effect = eligible.point(gap).zip(all.point(gap)).map(|(e, a)| e - a);
    Ok(Inventory {
        tasks: input.checkpoints.iter().map(|c| c.task.as_str()).collect::<BTreeSet<_>>().len() as u32,
        checkpoints: input.checkpoints.len() as u32,
        probes_generated: input.probes.len() as u64,
        probes_eligible: eligible.len() as u64,
        exclusions,
        scored_samples,
        eligibility_effect,
    })
}

/// Tables 15 and 50: per checkpoint number. A probe is unaligned when its score in the settings'
/// `unaligned_reference` view exceeds its score in `U`; its weight counts as that many atoms.
pub fn checkpoint_rows(input: &StudyInput, pop: &Population) -> Vec<CheckpointRow> {
    let reference = pop.settings.unaligned_reference;
    let ks: BTreeSet<u32> = input.checkpoints.iter().map(|c| c.checkpoint).collect();
    ks.into_iter()
        .map(|k| {
            let sessions = input.checkpoints.iter().filter(|c| c.checkpoint == k).count() as u32;
            let at_k = pop.filter(|p| p.record.checkpoint == k);
            let (mut fresh, mut earlier) = (0.0, 0.0);
            for p in &at_k.probes {
                let unaligned = matches!(
                    (p.scores[reference.index()], p.scores[View::Reports.index()]),
                    (Some(r), Some(u)) if r > u
                );
                if unaligned {
                    if p.record.origin_turn == k { fresh += p.weight } else { earlier += p.weight }
                }
            }
            let per = |x: f64| if sessions == 0 { 0.0 } else { x / f64::from(sessions) };
            let e = at_k.estimates(&[Quantity::gap_view(View::Reports), Quantity::gap_actor(View::Reports)]);
            CheckpointRow {
                checkpoint: k,
                sessions,
                probes: at_k.len() as u64,
                fresh: per(fresh),
                earlier: per(earlier),
                unaligned: per(fresh + earlier),
                accuracy_reports: at_k.point(Quantity::accuracy(View::Reports)),
                accuracy_full: at_k.point(Quantity::accuracy(View::Full)),
                accuracy_actor: at_k.point(Quantity::accuracy(View::Actor)),
                gap_view: e[0],
                gap_actor: e[1],
            }
        })
        .collect()
}

/// Table 10's rows. A task's final checkpoint is the last one it has; "fixed" is the evaluator's
/// verdict there (a task not judged there is in no fixed row).
pub fn outcome_rows(input: &StudyInput, pop: &Population) -> Vec<OutcomeRow> {
    let mut last: BTreeMap<&str, (u32, Option<bool>)> = BTreeMap::new();
    for c in &input.checkpoints {
        let e = last.entry(c.task.as_str()).or_insert((c.checkpoint, c.fixed));
        if c.checkpoint >= e.0 {
            *e = (c.checkpoint, c.fixed);
        }
    }
    [Subset::FixedAtFinal, Subset::FixedAllCheckpoints, Subset::AllAtFinal]
        .into_iter()
        .map(|subset| {
            let sub = pop.filter(|p| {
                let Some(&(final_k, fixed)) = last.get(p.record.task.as_str()) else {
                    return false;
                };
                match subset {
                    Subset::FixedAtFinal => p.record.checkpoint == final_k && fixed == Some(true),
                    Subset::FixedAllCheckpoints => fixed == Some(true),
                    Subset::AllAtFinal => p.record.checkpoint == final_k,
                }
            });
            let e = sub.estimates(&[Quantity::gap_view(View::Reports), Quantity::gap_actor(View::Reports)]);
            OutcomeRow {
                subset,
                accuracy_reports: sub.point(Quantity::accuracy(View::Reports)),
                accuracy_full: sub.point(Quantity::accuracy(View::Full)),
                gap_view: e[0],
                gap_actor: e[1],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
