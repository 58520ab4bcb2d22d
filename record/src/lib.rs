//! # vcurve-record
//!
//! The data vcurve records, as pure code: no I/O, no async.
//!
//! - [`trajectory`]: a recorded run — [`Task`], [`Trajectory`] (steps of model calls with their
//!   [`Action`]s, fingerprints, message prefixes, end type, submission) and its content digest.
//! - [`ids`]: [`StudyId`], [`TrajectoryId`] and [`Digest`] (a checked SHA-256 hex digest), the
//!   identifiers the store, the coordinator and the wire pass around.
//! - [`oversize`]: a run too large for the store's per-file limit, its longest outputs cut to
//!   their head and tail with a marker, each cut recorded ([`Omitted`], in [`omitted`]).
//! - [`policy`]: the policy a run was recorded under ([`RecordedPolicy`]), which a study resumes.
//! - [`payload`]: what a worker fetches by digest to run a study's jobs on one trajectory.
//! - [`runner`]: the runner a study names with its typed options ([`RunnerSpec`]), parsed once.
//! - [`jobs`]: the kinds of work a coordinator hands out and the typed reports that come back.
//! - [`session`]: a multi-turn session of an agent (turns, tool calls, reasoning, reports), the
//!   JSON format sessions recorded elsewhere are read from, and the views of a checkpoint.
//! - [`task_state`]: the task-state study's settings, call keys, call inputs and outputs, and
//!   recorded sessions.
//! - [`snapshot`]: a trajectory state pushed to a snapshot registry ([`snapshot::RegistrySnapshot`]).
//! - [`study`]: a study as data — the validated [`StudySpec`] it runs from and the
//!   [`StudyRecord`] the store hands out (every trajectory's state and outcomes).

pub mod ids;
pub mod import;
pub mod jobs;
pub mod json;
pub mod judge_labels;
pub mod llm;
pub mod omitted;
pub mod oversize;
pub mod payload;
pub mod policy;
pub mod replay;
pub mod runner;
pub mod session;
pub mod snapshot;
pub mod study;
pub mod task_state;
pub mod trajectory;

pub use ids::{Digest, InvalidDigest, StudyId, TrajectoryId};
pub use oversize::{MAX_FILE_BYTES, Omitted};
pub use payload::TrajectoryPayload;
pub use policy::RecordedPolicy;
pub use study::{
    Admission, BaseRunRecord, ControlCounts, DecoySpec, EvaluationStats, Label, RestartCheckRow, RestartCheckSpec,
    RunnerSpec, SelectionSpec, StudyRecord, StudySpec, StudyState, TaskRuns, TrajectoryRecord, TrajectorySpec,
    TrajectoryState,
};
pub use trajectory::{
    Action, EndType, Evaluator, Fingerprint, Interpreter, OnTimeout, OutputDecoding, Step, Task, Trajectory,
    TrajectoryError,
};
