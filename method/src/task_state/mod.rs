//! The task-state study's estimators (the CTXGAP study, "What Coding Agents Leave Unsaid"), as
//! pure code: how much of an agent's task state a reader recovers from each view of a checkpoint,
//! against the full recorded context (`T`) and the agent itself asked (`A`). docs/method.md
//! ("Task-state recoverability") states the method; docs/decisions.md ("Task-state study
//! (CTXGAP)") lists the choices where the study is silent. Every table number refers to the study.
//!
//! - [`records`]: the inputs: per (checkpoint, probe) the judge's credits per [`View`], per
//!   checkpoint its view sizes, atom counts and outcome.
//! - [`settings`]: [`EstimatorSettings`], named and versioned (`ctxgap-1`).
//! - [`estimate`]: eligibility, weights, the pooled estimator, the issue-clustered percentile
//!   bootstrap and task-equal means with Student-t intervals.
//! - [`tables`]: the tables of a study: inventory (Table 4), views (Tables 1, 5, 14), the
//!   telescoping decomposition (Table 13), checkpoints (Tables 15, 50), outcomes (Tables 1, 10).
//! - [`usage`]: the call log and usage by stage (Tables 12, 59–63).
//! - [`annotation`]: human annotation of gap atoms: the stratified sample, Cohen's κ and
//!   inverse-probability weighted shares of the gap mass (Tables 2, 22).
//!
//! The exact two-sided binomial test of Table 33 is [`crate::stats::binomial_two_sided`], and
//! [`discordance_p`] applies it to two raters' discordant pairs.

pub mod annotation;
mod error;
pub mod estimate;
pub mod records;
pub mod settings;
pub mod tables;
pub mod usage;

pub use error::TaskStateError;
pub use estimate::{
    Ci, Estimate, Exclusion, MeanInterval, Population, Quantity, eligibility, t_interval, task_paired_difference,
    view_score,
};
pub use records::{Category, CheckpointRecord, Credit, EligibilityFlags, ProbeRecord, StudyInput, View};
pub use settings::{EstimatorSettings, WeightScheme};
pub use tables::{Decomposition, TaskStateReport, analyze};
pub use usage::{CallRecord, GroupBy, Stage, UsageRow, UsageTotals};

/// The exact two-sided test of discordant pairs (Table 33): of `stricter + looser` items on which
/// two raters disagree, is one side more frequent than chance (p = 1/2)? 5 against 2 gives 29/64;
/// 11 against 0 gives 2/2048. No discordance gives 1.
pub fn discordance_p(stricter: u32, looser: u32) -> f64 {
    crate::stats::binomial_two_sided(stricter, stricter + looser, 0.5).expect("stricter ≤ stricter + looser, p = 1/2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_33_discordance_tests() {
        // Annotator 1: stricter / looser 5 / 2, exact p .453125; annotator 2: 11 / 0, p .000977.
        assert_eq!(discordance_p(5, 2), 0.453125);
        assert_eq!(format!("{:.6}", discordance_p(11, 0)), "0.000977");
        assert_eq!(discordance_p(0, 0), 1.0);
    }

    #[test]
    fn an_empty_study_has_tables_without_values() {
        let input = StudyInput {
            checkpoints: vec![CheckpointRecord {
                task: "t".into(),
                checkpoint: 1,
                fixed: Some(true),
                view_chars: Default::default(),
                atoms: Default::default(),
            }],
            probes: vec![],
        };
        let report = analyze(&input, &EstimatorSettings::ctxgap_1()).unwrap();
        assert!(report.views.is_empty() && report.decomposition.is_none());
        assert_eq!(report.inventory.eligibility_effect, None);
        assert_eq!(report.checkpoints[0].probes, 0);
        assert_eq!(report.checkpoints[0].gap_view.value, None);
        assert_eq!(report.outcomes[0].gap_view.ci, None);
        assert!(report.accuracy().is_empty());
    }
}
