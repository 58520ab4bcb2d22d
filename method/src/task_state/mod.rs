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
//!
//! The exact two-sided binomial test of Table 33 is [`crate::stats::binomial_two_sided`].

pub mod estimate;
pub mod records;
pub mod settings;
pub mod tables;
pub mod usage;

pub use estimate::{
    Ci, Estimate, Exclusion, MeanInterval, Population, Quantity, eligibility, t_interval, task_paired_difference,
    view_score,
};
pub use records::{Category, CheckpointRecord, Credit, EligibilityFlags, ProbeRecord, StudyInput, View};
pub use settings::{EstimatorSettings, WeightScheme};
pub use tables::{Decomposition, TaskStateReport, analyze};
pub use usage::{CallRecord, GroupBy, Stage, UsageRow, UsageTotals};

/// What the task-state estimators refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskStateError {
    #[error("task-state input: {0}")]
    Input(String),
    #[error("task-state settings {0}")]
    Settings(String),
    #[error("call log: {0}")]
    CallLog(String),
}
