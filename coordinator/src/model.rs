//! The coordinator's own types: what the store keeps and the service hands out. Wire types are
//! converted to and from these in [`crate::wire`] only.

use serde::{Deserialize, Serialize};
use vcurve_method::schedule::{Series, Stage};
pub use vcurve_record::study::{StudyRecord, StudyState, TrajectoryRecord, TrajectoryState};

/// One continuation of one study: `(study, trajectory, series, t, seed)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ContinuationKey {
    pub study: String,
    pub trajectory: String,
    pub series: Series,
    pub t: u32,
    pub seed: u32,
}

/// A key with the attempt it was dispatched under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeldJob {
    pub key: ContinuationKey,
    pub attempt: u32,
}

/// A continuation handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedJob {
    pub key: ContinuationKey,
    pub attempt: u32,
    /// The continuation's step budget (`B − t`, or `B` for the budget control).
    pub budget: u32,
    pub runner_kind: String,
    /// The runner's options from the study spec, as JSON.
    pub runner_options: String,
    pub study_seed: u64,
    /// What the runner needs of the trajectory, as JSON.
    pub payload: String,
}

/// What a worker reports for a job.
#[derive(Debug, Clone, PartialEq)]
pub enum RunReport {
    Outcome {
        success: bool,
        steps: u32,
        end_type: String,
        patch_sha256: String,
    },
    /// The run had no outcome (killed, evaluation failed): the key is run again, and retired
    /// after the retry limit.
    NoOutcome {
        reason: String,
    },
}

/// Whether a report changed anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportVerdict {
    Accepted,
    /// Nothing changed: the key is unknown, finished, or was re-issued under a later attempt.
    Ignored(String),
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeartbeatVerdict {
    /// Held jobs that are no longer the worker's (finished or re-issued): stop them.
    pub revoked: Vec<HeldJob>,
    /// The worker is not known (it must register again).
    pub unknown_worker: bool,
}

/// A registered worker as progress reports show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerInfo {
    pub id: String,
    pub name: String,
    pub slots: u32,
    pub running: u32,
    pub last_seen_ms_ago: u64,
}

/// A study's progress at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub study: String,
    pub name: String,
    pub state: StudyState,
    /// Continuations with an outcome.
    pub done: u64,
    /// Continuations leased to a worker now.
    pub running: u64,
    /// Continuations requested and waiting for a worker.
    pub pending: u64,
    /// Continuations retired after repeated no-outcomes.
    pub retired: u64,
    pub trajectories: u32,
    pub trajectories_admitted: u32,
    pub trajectories_done: u32,
    pub trajectories_doomed: u32,
    /// Trajectories by stage (admitted ones; finished ones count as `done`).
    pub stages: Vec<(Stage, u32)>,
    pub workers: Vec<WorkerInfo>,
    /// Outcomes per minute over the last five minutes.
    pub throughput_per_min: f64,
    /// Estimated seconds to finish; `None` when unknown (no throughput yet).
    pub eta_seconds: Option<f64>,
}
