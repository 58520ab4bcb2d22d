//! The parameters of docs/method.md §8 (the paper's Table 7) as one validated type.
//!
//! The schedule and the estimator read nothing else. A thresholds file is YAML with any subset of
//! the fields below; the rest keep the paper's values. Unknown fields and out-of-range values are
//! rejected with the field's name and its allowed range.

use serde::{Deserialize, Serialize};

/// Why a thresholds file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ThresholdsError {
    #[error("thresholds are not valid YAML for vcurve: {0}")]
    Parse(String),
    #[error("threshold `{field}` = {value} is out of range: {allowed}")]
    OutOfRange { field: &'static str, value: String, allowed: String },
}

/// Every parameter of the method (docs/method.md §8), with the paper's values as defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// Step budget `B` of a run.
    pub budget: u32,
    /// Base runs per task.
    pub base_runs_per_task: u32,
    /// Selection band: tasks with `band_min ..= band_max` successes of the base runs.
    pub band_min: u32,
    pub band_max: u32,
    /// Failed trajectories kept per task, at most.
    pub trajectories_per_task: u32,
    /// Successful runs of band tasks kept as decoys.
    pub decoys: u32,
    /// Anchor spacing up to `anchor_dense_until` (inclusive), then `anchor_sparse_step`; `T − 1` always.
    pub anchor_dense_step: u32,
    pub anchor_dense_until: u32,
    pub anchor_sparse_step: u32,
    /// Continuations per screened point; also the least `n` of a resolved point.
    pub k_screen: u32,
    /// Smallest screened drop `V̂(a) − V̂(b)` that is bisected.
    pub delta_screen: f64,
    /// Bisected intervals per trajectory, at most.
    pub max_bisected: u32,
    /// Continuations at both ends of a confirmed drop.
    pub k_confirm: u32,
    /// Smallest drop of the second-ranked pair that is confirmed too.
    pub second_drop_min: f64,
    /// Continuations at `m − 1` and `m` of a labeled step, raised to `k_label_raised` when the
    /// probed drop is at least `label_drop_raise`.
    pub k_label: u32,
    pub k_label_raised: u32,
    pub label_drop_raise: f64,
    /// Distinct labeled steps probed per trajectory, at most.
    pub max_labels_probed: u32,
    /// Continuations at a point-of-no-return candidate, and the certification bound `ε`.
    pub k_pnr: u32,
    pub epsilon: f64,
    /// Concentration `C` at or above which a curve is a cliff.
    pub cliff_threshold: f64,
    /// Significance level of the Fisher tests.
    pub alpha: f64,
    /// Wilson `z`: two-sided bands, one-sided certification bound.
    pub z_two_sided: f64,
    pub z_one_sided: f64,
    /// Restart margin `μ`.
    pub restart_margin: f64,
    /// Pass rate at or below which a task is doomed (`ε₀`).
    pub doomed_threshold: f64,
    /// No-outcome runs of one key before it is retired.
    pub retries_before_retired: u32,
    /// Admission batch size, and the in-flight count below which a new batch is admitted.
    pub batch_size: u32,
    pub pipeline_threshold: u32,
    /// Trajectories that carry each control.
    pub sanity_trajectories: u32,
    pub retest_trajectories: u32,
    pub budget_control_trajectories: u32,
    /// Resamples of the task-level cluster bootstrap.
    pub bootstrap_resamples: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            budget: 100,
            base_runs_per_task: 8,
            band_min: 2,
            band_max: 6,
            trajectories_per_task: 3,
            decoys: 10,
            anchor_dense_step: 5,
            anchor_dense_until: 50,
            anchor_sparse_step: 10,
            k_screen: 8,
            delta_screen: 0.25,
            max_bisected: 3,
            k_confirm: 32,
            second_drop_min: 0.25,
            k_label: 16,
            k_label_raised: 32,
            label_drop_raise: 0.20,
            max_labels_probed: 4,
            k_pnr: 24,
            epsilon: 0.15,
            cliff_threshold: 0.5,
            alpha: 0.05,
            z_two_sided: 1.960,
            z_one_sided: 1.645,
            restart_margin: 0.10,
            doomed_threshold: 1.0 / 8.0,
            retries_before_retired: 3,
            batch_size: 10,
            pipeline_threshold: 3,
            sanity_trajectories: 5,
            retest_trajectories: 10,
            budget_control_trajectories: 10,
            bootstrap_resamples: 10_000,
        }
    }
}

/// Upper bound on any continuation count, so that a typo (`k_confirm: 3200000`) cannot schedule
/// millions of agent runs.
const MAX_K: u32 = 10_000;

impl Thresholds {
    /// Parse a thresholds YAML document (any subset of fields) and validate it.
    pub fn from_yaml(text: &str) -> Result<Self, ThresholdsError> {
        // An empty document means "all defaults".
        let parsed: Thresholds = if text.trim().is_empty() {
            Thresholds::default()
        } else {
            serde_norway::from_str(text).map_err(|e| ThresholdsError::Parse(e.to_string()))?
        };
        parsed.validate()?;
        Ok(parsed)
    }

    /// Check every field against its allowed range.
    pub fn validate(&self) -> Result<(), ThresholdsError> {
        fn int(field: &'static str, value: u32, lo: u32, hi: u32) -> Result<(), ThresholdsError> {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(ThresholdsError::OutOfRange {
                    field,
                    value: value.to_string(),
                    allowed: format!("an integer from {lo} to {hi}"),
                })
            }
        }
        fn real(field: &'static str, value: f64, lo: f64, hi: f64, open_low: bool) -> Result<(), ThresholdsError> {
            let above = if open_low { value > lo } else { value >= lo };
            if value.is_finite() && above && value <= hi {
                Ok(())
            } else {
                let bracket = if open_low { "(" } else { "[" };
                Err(ThresholdsError::OutOfRange {
                    field,
                    value: value.to_string(),
                    allowed: format!("a number in {bracket}{lo}, {hi}]"),
                })
            }
        }
        int("budget", self.budget, 1, 100_000)?;
        int("base_runs_per_task", self.base_runs_per_task, 1, MAX_K)?;
        int("band_min", self.band_min, 0, self.base_runs_per_task)?;
        int("band_max", self.band_max, self.band_min, self.base_runs_per_task)?;
        int("trajectories_per_task", self.trajectories_per_task, 1, 1_000)?;
        int("decoys", self.decoys, 0, 100_000)?;
        int("anchor_dense_step", self.anchor_dense_step, 1, 100_000)?;
        int("anchor_dense_until", self.anchor_dense_until, 0, 100_000)?;
        int("anchor_sparse_step", self.anchor_sparse_step, 1, 100_000)?;
        int("k_screen", self.k_screen, 1, MAX_K)?;
        real("delta_screen", self.delta_screen, 0.0, 1.0, true)?;
        int("max_bisected", self.max_bisected, 0, 1_000)?;
        int("k_confirm", self.k_confirm, self.k_screen, MAX_K)?;
        real("second_drop_min", self.second_drop_min, 0.0, 1.0, false)?;
        int("k_label", self.k_label, 1, MAX_K)?;
        int("k_label_raised", self.k_label_raised, self.k_label, MAX_K)?;
        real("label_drop_raise", self.label_drop_raise, 0.0, 1.0, false)?;
        int("max_labels_probed", self.max_labels_probed, 0, 1_000)?;
        int("k_pnr", self.k_pnr, 1, MAX_K)?;
        real("epsilon", self.epsilon, 0.0, 1.0, true)?;
        real("cliff_threshold", self.cliff_threshold, 0.0, 1.0, true)?;
        real("alpha", self.alpha, 0.0, 1.0, true)?;
        real("z_two_sided", self.z_two_sided, 0.0, 10.0, true)?;
        real("z_one_sided", self.z_one_sided, 0.0, 10.0, true)?;
        real("restart_margin", self.restart_margin, 0.0, 1.0, false)?;
        real("doomed_threshold", self.doomed_threshold, 0.0, 1.0, false)?;
        int("retries_before_retired", self.retries_before_retired, 1, 1_000)?;
        int("batch_size", self.batch_size, 1, 1_000_000)?;
        int("pipeline_threshold", self.pipeline_threshold, 0, 1_000_000)?;
        int("sanity_trajectories", self.sanity_trajectories, 0, 1_000_000)?;
        int("retest_trajectories", self.retest_trajectories, 0, 1_000_000)?;
        int("budget_control_trajectories", self.budget_control_trajectories, 0, 1_000_000)?;
        int("bootstrap_resamples", self.bootstrap_resamples, 1, 10_000_000)?;
        Ok(())
    }

    /// The anchors of a trajectory of length `length` (docs/method.md §4): the multiples of
    /// `anchor_dense_step` up to `anchor_dense_until`, the multiples of `anchor_sparse_step` after
    /// it, and `T − 1`; all `< T`, sorted, distinct. `0` is always an anchor.
    pub fn anchors(&self, length: u32) -> Vec<u32> {
        let Some(last) = length.checked_sub(1) else {
            return Vec::new();
        };
        let dense = (0..length).step_by(self.anchor_dense_step as usize).take_while(|&t| t <= self.anchor_dense_until);
        let sparse = (0..length).step_by(self.anchor_sparse_step as usize).filter(|&t| t > self.anchor_dense_until);
        let mut anchors: Vec<u32> = dense.chain(sparse).chain([last]).collect();
        anchors.sort_unstable();
        anchors.dedup();
        anchors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers_table_7() {
        let t = Thresholds::default();
        t.validate().unwrap();
        assert_eq!((t.k_screen, t.k_confirm, t.k_label, t.k_label_raised, t.k_pnr), (8, 32, 16, 32, 24));
        assert_eq!((t.epsilon, t.restart_margin, t.doomed_threshold), (0.15, 0.10, 0.125));
    }

    #[test]
    fn empty_and_partial_files_keep_defaults() {
        assert_eq!(Thresholds::from_yaml("").unwrap(), Thresholds::default());
        let t = Thresholds::from_yaml("epsilon: 0.2\nk_pnr: 30\n").unwrap();
        assert_eq!((t.epsilon, t.k_pnr, t.k_screen), (0.2, 30, 8));
    }

    #[test]
    fn out_of_range_names_field_and_range() {
        let err = Thresholds::from_yaml("epsilon: 1.5").unwrap_err().to_string();
        assert!(err.contains("epsilon") && err.contains("(0, 1]"), "{err}");
        let err = Thresholds::from_yaml("k_screen: 0").unwrap_err().to_string();
        assert!(err.contains("k_screen") && err.contains("from 1 to"), "{err}");
        let err = Thresholds::from_yaml("k_confirm: 4").unwrap_err().to_string();
        assert!(err.contains("k_confirm") && err.contains("from 8"), "{err}");
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_rejected() {
        let err = Thresholds::from_yaml("epsilonn: 0.1").unwrap_err().to_string();
        assert!(err.contains("epsilonn"), "{err}");
        let err = Thresholds::from_yaml("k_screen: many").unwrap_err().to_string();
        assert!(err.contains("k_screen"), "{err}");
    }

    #[test]
    fn anchors_follow_the_paper() {
        let t = Thresholds::default();
        assert_eq!(t.anchors(40), vec![0, 5, 10, 15, 20, 25, 30, 35, 39]);
        assert_eq!(t.anchors(57), vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 56]);
        assert_eq!(t.anchors(100), vec![0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 60, 70, 80, 90, 99]);
        assert_eq!(t.anchors(1), vec![0]);
        assert_eq!(t.anchors(6), vec![0, 5]);
        let sparse = Thresholds { anchor_dense_step: 10, ..Thresholds::default() };
        assert_eq!(sparse.anchors(57), vec![0, 10, 20, 30, 40, 50, 56]);
    }
}
