//! The coordinator's own types: what the store keeps and the service hands out. Wire types are
//! converted to and from these in [`crate::wire`] only.

use serde::Serialize;
use vcurve_method::schedule::Stage;
pub use vcurve_record::jobs::{ContinuationKey, HeldJob, JobKey, JobKind, JobReport};
pub use vcurve_record::snapshot::RegistrySnapshot;
pub use vcurve_record::study::{StudyRecord, StudyState, TrajectoryRecord, TrajectoryState};
pub use vcurve_record::{Digest, StudyId, TrajectoryId};

/// A job handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedJob {
    pub key: JobKey,
    pub attempt: u32,
    /// The step budget (`B − t` for a continuation, `B` for the budget control and base runs).
    pub budget: u32,
    /// The study's runner with its options, as the spec parsed them.
    pub runner: vcurve_record::RunnerSpec,
    pub study_seed: u64,
    /// The digest of the trajectory's payload (continuations and replays), fetched by workers
    /// with `GetTrajectory`.
    pub trajectory_digest: Option<Digest>,
    /// A replay's anchors, where it commits the container.
    pub anchors: Vec<u32>,
    /// A continuation's nearest snapshot at or before its step in the worker's registry.
    pub registry_snapshot: Option<RegistrySnapshot>,
}

/// What a lease request says about the snapshots a worker can start from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locality {
    /// Payload digests of the trajectories whose snapshots the worker holds.
    pub near: Vec<Digest>,
    /// The snapshot registry the worker pushes to and pulls from (`HOST:PORT`).
    pub registry: Option<String>,
    /// Snapshots the worker pushed to `registry` since it last asked.
    pub pushed: Vec<RegistrySnapshot>,
}

impl Locality {
    /// A worker that holds snapshots of the trajectories `near` and uses no registry.
    pub fn near(near: &[Digest]) -> Locality {
        Locality { near: near.to_vec(), ..Locality::default() }
    }
}

/// A replay, evaluation or base run as the store holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskJob {
    pub key: JobKey,
    /// `pending`, `leased`, `done`, `retired` or `dropped`.
    pub state: String,
    pub attempt: u32,
    /// The report that finished it.
    pub result: Option<JobReport>,
    /// The reason of its last no-outcome.
    pub last_reason: Option<String>,
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
    /// The runner kinds it offers.
    pub capabilities: Vec<String>,
}

/// A study's progress at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    pub study: StudyId,
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
    /// Every job retired after repeated no-outcomes, by kind (continuations, replays, evaluations,
    /// base runs), with the reasons of their last no-outcomes; only the kinds with one.
    pub retired_jobs: Vec<vcurve_record::jobs::RetiredJobs>,
    pub trajectories: u32,
    pub trajectories_admitted: u32,
    pub trajectories_done: u32,
    pub trajectories_doomed: u32,
    pub trajectories_non_replayable: u32,
    /// Trajectories by stage (admitted ones; finished ones count as `done`).
    pub stages: Vec<(Stage, u32)>,
    pub workers: Vec<WorkerInfo>,
    /// Outcomes per minute over the last five minutes of the study's run, or over its whole run
    /// when it ran for less.
    pub throughput_per_min: f64,
    /// Estimated seconds to finish; `None` when unknown. A curve study's reads its continuations'
    /// durations once one of its trajectories finished ([`crate::durations::eta_ms`]), and its
    /// outcomes per minute before; a task-state study's, its calls left over its calls per minute.
    pub eta_seconds: Option<f64>,
    /// The study's runner kind when no live worker offers it (its work waits for one).
    pub waiting_for_runner: Option<String>,
    /// This coordinator's lease latency over the last five minutes; `None` when not measured.
    pub lease_latency: Option<LeaseLatency>,
    /// How the study's patches were judged (the patch cache); `None` for a runner that judges
    /// none (synthetic). `empty_patches` is not counted here (exports count it).
    pub evaluation: Option<vcurve_record::EvaluationStats>,
    /// A task-state study's jobs by stage (sessions, then each model stage); empty for a curve
    /// study.
    pub call_stages: Vec<StageProgress>,
    /// Endpoints a task-state study's pending model calls need that no live worker offers.
    pub waiting_for_endpoints: Vec<String>,
}

/// A task-state study's jobs of one stage.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct StageProgress {
    /// `session`, `atoms`, `probes`, `reader`, `actor`, `judge`.
    pub stage: String,
    /// Answered (or recorded, for sessions), whatever their status.
    pub done: u64,
    pub running: u64,
    pub pending: u64,
    /// Retired after repeated no-outcomes (no answer recorded).
    pub retired: u64,
    /// Done calls whose answer was malformed, or that failed: recorded, never scored.
    pub malformed: u64,
    pub failed: u64,
    /// Tokens of the done calls (their final successful requests).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// The calls this stage will have made when the study ends, as far as is known now
    /// (`vcurve_record::task_state::expected`); `None`: not known yet.
    pub expected: Option<u64>,
}

/// Latency of leases that handed out work (request to answer, long-poll waiting included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeaseLatency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Leases measured.
    pub leases: u64,
}
