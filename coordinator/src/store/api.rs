//! The store's interface: the [`Store`] trait every backend implements, and what its methods take
//! and return. [`SqlStore`](super::SqlStore) implements it; nothing here knows SQL.

use std::future::Future;

use vcurve_method::schedule::Stage;
use vcurve_record::{Digest, StudyId, TrajectoryId, TrajectoryPayload};

use crate::model::{
    ContinuationKey, HeartbeatVerdict, HeldJob, JobKey, JobReport, LeasedJob, Locality, Progress, ReportVerdict,
    StudyRecord, StudyState, TaskJob, WorkerInfo,
};
use crate::spec::StudySpec;

/// What a launch stores beside its spec and payloads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchInputs {
    /// Each task's problem statement, by task id, taken out of the spec's tasks: stored once, as
    /// a file of its own under its SHA-256, which the tasks' payloads name; the stored spec keeps
    /// its tasks without them. A restart check's tasks without one use the checked study's.
    pub statements: std::collections::BTreeMap<String, String>,
    /// The tasks whose problem statement is a file the launch named but did not read (a
    /// `problem_statement_file`): its digest, by task id. The staged upload becomes the kept
    /// file, inside the database.
    pub uploaded_statements: std::collections::BTreeMap<String, Digest>,
    /// The staged uploads the launch read (digests), dropped in its transaction.
    pub uploads: Vec<Digest>,
    /// Each decoy's recorded run (`recorded:`), by decoy id: its judges' label calls read it.
    pub decoy_runs: std::collections::BTreeMap<String, vcurve_record::Trajectory>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or failed the statement. Retryable: the operation was
    /// rolled back as a whole.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the schema failed. Fatal.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// No such study. Fatal for the request.
    #[error("no study {0:?}")]
    UnknownStudy(StudyId),
    /// The store holds something this version cannot read (a corrupted row or a newer schema).
    /// Fatal.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The request cannot be carried out as asked (e.g. queueing a continuation by hand). Fatal
    /// for the request.
    #[error("{0}")]
    Invalid(String),
    /// A launch names a file by a digest the store neither has staged nor kept (another launch
    /// consumed the upload, or it expired). Retryable after uploading it again.
    #[error("no file with SHA-256 {0} was uploaded for this launch (or its upload expired); upload it again")]
    NotUploaded(Digest),
    /// The URL names no supported backend. Fatal.
    #[error("unsupported store URL {0:?}: use postgres://… or sqlite://PATH (or sqlite::memory:)")]
    UnsupportedUrl(String),
}

/// What a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub verdict: ReportVerdict,
    /// Whether waiting lease requests should look again: the report created work (new keys, a
    /// key put back, a trajectory finished so another may be admitted). Most reports only add
    /// an outcome to a stage that is still waiting on others, and wake nobody.
    pub wakes: bool,
}

impl Reported {
    pub fn accepted(wakes: bool) -> Self {
        Reported { verdict: ReportVerdict::Accepted, wakes }
    }

    pub fn ignored(why: impl Into<String>) -> Self {
        Reported { verdict: ReportVerdict::Ignored(why.into()), wakes: false }
    }
}

/// Timing parameters of leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// A lease not extended by a heartbeat for this long expires and its key is re-issued.
    pub timeout_ms: i64,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy { timeout_ms: 30_000 }
    }
}

/// The coordinator's state. Times are milliseconds since the Unix epoch, passed in by the caller.
pub trait Store: Send + Sync + 'static {
    /// Store a validated study and its trajectories' payloads (in the spec's order), with what
    /// its launch brought beside them ([`LaunchInputs`]: its tasks' problem statements, stored
    /// once each by digest, and the uploads it consumed, dropped); its trajectories wait for
    /// admission. Returns the study id.
    fn create_study(
        &self,
        spec: &StudySpec,
        payloads: &[TrajectoryPayload],
        inputs: &LaunchInputs,
        now: i64,
    ) -> impl Future<Output = Result<StudyId, StoreError>> + Send;

    /// Keep a file by its SHA-256 (checked by the caller); returns whether it was new.
    fn put_file(
        &self,
        digest: &Digest,
        content: &[u8],
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Begin a client's upload for a launch of the file `digest` of `size` bytes (checked by the
    /// caller as the pieces arrive); its id. Drops the uploads begun over an hour ago that no
    /// launch consumed.
    fn begin_upload(
        &self,
        digest: &Digest,
        size: u64,
        now: i64,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Store piece `seq` (from 0, in order) of an upload.
    fn upload_piece(
        &self,
        upload: &str,
        seq: u32,
        data: Vec<u8>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// End an upload: complete in `pieces` pieces (whether the file was new; an upload of a file
    /// kept or uploaded already is dropped), or abandoned (`None`: dropped).
    fn end_upload(
        &self,
        upload: &str,
        pieces: Option<u32>,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// How a file is kept: not at all (`None`), whole (0), or in `n` pieces ([`Store::file_piece`]).
    fn file_pieces(&self, digest: &Digest) -> impl Future<Output = Result<Option<u32>, StoreError>> + Send;

    /// Piece `seq` of a file kept in pieces.
    fn file_piece(&self, digest: &Digest, seq: u32)
    -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// What a launch reads for a digest its spec names: a staged upload or a kept file.
    fn launch_file(&self, digest: &Digest) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Drop the staged uploads `digests`: those of a refused launch.
    fn discard_uploads(&self, digests: &[Digest]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The digests among `digests` a launch could not read (neither kept nor staged).
    fn missing_files(&self, digests: &[Digest]) -> impl Future<Output = Result<Vec<Digest>, StoreError>> + Send;

    /// The verdict of a patch already judged in the study's patch cache (docs/method.md §6).
    fn verdict(
        &self,
        study: &StudyId,
        task: &str,
        patch_sha256: &Digest,
    ) -> impl Future<Output = Result<Option<bool>, StoreError>> + Send;

    /// A file by its digest.
    fn file(&self, digest: &Digest) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// Queue evaluations and base runs of a running study (a key already queued is left as it
    /// is); returns how many were new. Continuations and replays are created by the schedule,
    /// never queued from outside.
    fn enqueue(&self, keys: &[JobKey], now: i64) -> impl Future<Output = Result<u32, StoreError>> + Send;

    /// A task-state study's recorded sessions and ended model calls (their inputs without their
    /// messages); `None` for a curve study.
    fn task_state_data(
        &self,
        study: &StudyId,
    ) -> impl Future<Output = Result<Option<vcurve_record::task_state::TaskStateData>, StoreError>> + Send;

    /// A study's replays, evaluations and base runs with their state and result.
    fn task_jobs(&self, study: &StudyId) -> impl Future<Output = Result<Vec<TaskJob>, StoreError>> + Send;

    /// Register a worker; returns its id.
    fn register_worker(
        &self,
        name: &str,
        slots: u32,
        capabilities: &[String],
        now: i64,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Record the snapshots `locality.pushed` to `locality.registry`, expire stale leases, admit
    /// trajectories as the admission rule asks, and lease up to `max` runnable continuations to
    /// `worker` (an unknown worker gets none), all in one transaction. Continuations of the
    /// trajectories whose payload digests are in `locality.near` (the worker holds their
    /// snapshots) come first, then those with a snapshot at or before their step in the worker's
    /// registry (their jobs name the nearest), then the rest: the order never leaves a slot free
    /// while anything is runnable.
    fn lease(
        &self,
        worker: &str,
        max: u32,
        now: i64,
        policy: LeasePolicy,
        locality: &Locality,
    ) -> impl Future<Output = Result<Vec<LeasedJob>, StoreError>> + Send;

    /// Extend the leases of the jobs a worker holds; say which are no longer its own.
    fn heartbeat(
        &self,
        worker: &str,
        held: &[HeldJob],
        now: i64,
        policy: LeasePolicy,
    ) -> impl Future<Output = Result<HeartbeatVerdict, StoreError>> + Send;

    /// Record a worker's report. A key accepts exactly one outcome; a report for an old attempt,
    /// a finished key or an unknown key changes nothing.
    fn report(
        &self,
        worker: &str,
        job: &HeldJob,
        report: &JobReport,
        now: i64,
    ) -> impl Future<Output = Result<Reported, StoreError>> + Send;

    /// Give jobs back unrun: they are re-issued, and it does not count as a no-outcome.
    fn release(&self, worker: &str, held: &[HeldJob]) -> impl Future<Output = Result<u32, StoreError>> + Send;

    /// Re-issue every lease not extended in time; returns how many.
    fn expire_leases(&self, now: i64) -> impl Future<Output = Result<u32, StoreError>> + Send;

    fn progress(
        &self,
        study: &StudyId,
        now: i64,
        policy: LeasePolicy,
    ) -> impl Future<Output = Result<Progress, StoreError>> + Send;

    /// The live workers (seen within `policy`'s lease timeout before `now`), by name: what every
    /// study's progress lists, also when there is no study.
    fn live_workers(
        &self,
        now: i64,
        policy: LeasePolicy,
    ) -> impl Future<Output = Result<Vec<WorkerInfo>, StoreError>> + Send;

    /// A study's pending continuations (runnable, waiting for a worker) by the schedule stage of
    /// their trajectory: the queue depth by stage.
    fn pending_by_stage(&self, study: &StudyId) -> impl Future<Output = Result<Vec<(Stage, u64)>, StoreError>> + Send;

    /// Every study, newest first.
    fn list_studies(&self) -> impl Future<Output = Result<Vec<(StudyId, String, StudyState)>, StoreError>> + Send;

    /// The finished online restart checks of `study` (Appendix Q), newest first.
    fn restart_checks_of(&self, study: &StudyId) -> impl Future<Output = Result<Vec<StudyId>, StoreError>> + Send;

    /// A study's spec, trajectories and outcomes.
    fn study(&self, study: &StudyId) -> impl Future<Output = Result<StudyRecord, StoreError>> + Send;

    /// One trajectory of a study as a study record of its own (`None`: no such trajectory).
    fn trajectory(
        &self,
        study: &StudyId,
        trajectory: &TrajectoryId,
    ) -> impl Future<Output = Result<Option<StudyRecord>, StoreError>> + Send;

    /// Stop handing out a study's work; returns its state afterwards.
    fn cancel(&self, study: &StudyId, now: i64) -> impl Future<Output = Result<StudyState, StoreError>> + Send;

    /// Continuation keys currently leased, with their worker (for tests and diagnostics).
    fn leased(&self) -> impl Future<Output = Result<Vec<(ContinuationKey, u32, String)>, StoreError>> + Send;

    /// A study as [`Store::study`] reads it, in parts and in one transaction: its head first (the
    /// record without its trajectories), then each trajectory with its outcomes in processing
    /// order. The whole study is never in memory at once, so an export's memory does not grow with
    /// the study's continuations. Returns early, without an error, when `parts` is closed.
    fn study_parts(
        &self,
        study: &StudyId,
        parts: tokio::sync::mpsc::Sender<StudyPart>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A part of a study as [`Store::study_parts`] sends it.
#[derive(Debug, Clone, PartialEq)]
pub enum StudyPart {
    /// The study's record without its trajectories (the spec lists them all).
    Head(Box<StudyRecord>),
    /// One trajectory with its outcomes.
    Trajectory(Box<crate::model::TrajectoryRecord>),
}
