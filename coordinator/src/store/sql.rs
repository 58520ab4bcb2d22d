//! [`Store`] over sqlx, for PostgreSQL and SQLite.
//!
//! Both backends run the same statements through sqlx's `Any` driver (numbered `$N` parameters
//! work on both); where they differ — claiming work with `FOR UPDATE SKIP LOCKED`, connection
//! settings, migrations — [`Backend`] says which. SQLite runs on a single connection, so its
//! transactions are serialized; PostgreSQL serializes the transactions that touch one trajectory
//! by locking its row first, and those that admit into one study by locking the study's row.

use vcurve_method::schedule::Stage;
use vcurve_record::{Digest, StudyId, TrajectoryId, TrajectoryPayload};

use super::api::{LaunchInputs, LeasePolicy, Reported, Store, StoreError};
use crate::model::{
    ContinuationKey, HeartbeatVerdict, HeldJob, JobKey, JobReport, LeasedJob, Locality, Progress, StudyRecord,
    StudyState, TaskJob, WorkerInfo,
};
use crate::spec::StudySpec;

/// The condition that selects one continuation by its key, bound as `$1 … $5` by [`rows::bind_key`].
macro_rules! key_is {
    () => {
        "study = $1 AND trajectory = $2 AND series = $3 AND t = $4 AND seed = $5"
    };
}

/// The condition that selects one row of `jobs` by its key, bound as `$1 … $5` by [`rows::bind_job`].
macro_rules! job_is {
    () => {
        "study = $1 AND kind = $2 AND subject = $3 AND patch_sha256 = $4 AND seq = $5"
    };
}

// After the macros above, which they use. One module per capability of the store; `rows` decodes
// and binds the rows they share. Each names the sibling whose items it uses, and the store's
// types in `api`: this module only implements `Store` over them.
mod admission;
mod base_runs;
mod bench;
mod call_progress;
mod dispatch;
mod export;
mod files;
mod handle;
mod jobs;
mod judge_labels;
mod known;
mod lease;
mod progress;
mod replan;
mod report;
mod retired;
mod rows;
mod studies;
mod task_state;
mod verdicts;
mod workers;

pub use base_runs::base_run_trajectory_id;
pub use bench::{ScratchDatabase, ScratchError};
pub use dispatch::{DispatchSql, dispatch_sql};
pub use files::UPLOAD_TTL_MS;
pub use handle::{Backend, SqlStore};

impl Store for SqlStore {
    async fn pending_by_stage(&self, study: &StudyId) -> Result<Vec<(Stage, u64)>, StoreError> {
        progress::pending_by_stage(self, study).await
    }

    async fn live_workers(&self, now: i64, policy: LeasePolicy) -> Result<Vec<WorkerInfo>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        workers::live_workers(&mut conn, now, policy).await
    }

    async fn create_study(
        &self,
        spec: &StudySpec,
        payloads: &[TrajectoryPayload],
        inputs: &LaunchInputs,
        now: i64,
    ) -> Result<StudyId, StoreError> {
        studies::create_study(self, spec, payloads, inputs, now).await
    }

    async fn register_worker(
        &self,
        name: &str,
        slots: u32,
        capabilities: &[String],
        now: i64,
    ) -> Result<String, StoreError> {
        workers::register_worker(self, name, slots, capabilities, now).await
    }

    async fn lease(
        &self,
        worker: &str,
        max: u32,
        now: i64,
        policy: LeasePolicy,
        locality: &Locality,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        lease::lease(self, worker, max, now, policy, locality).await
    }

    async fn heartbeat(
        &self,
        worker: &str,
        held: &[HeldJob],
        now: i64,
        policy: LeasePolicy,
    ) -> Result<HeartbeatVerdict, StoreError> {
        lease::heartbeat(self, worker, held, now, policy).await
    }

    async fn report(&self, worker: &str, job: &HeldJob, report: &JobReport, now: i64) -> Result<Reported, StoreError> {
        report::report(self, worker, job, report, now).await
    }

    async fn release(&self, worker: &str, held: &[HeldJob]) -> Result<u32, StoreError> {
        lease::release(self, worker, held).await
    }

    async fn expire_leases(&self, now: i64) -> Result<u32, StoreError> {
        let mut tx = self.pool.begin().await?;
        let n = self.expire_in(&mut tx, now).await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn progress(&self, study: &StudyId, now: i64, policy: LeasePolicy) -> Result<Progress, StoreError> {
        progress::progress(self, study, now, policy).await
    }

    async fn list_studies(&self) -> Result<Vec<(StudyId, String, StudyState)>, StoreError> {
        studies::list_studies(self).await
    }

    async fn study(&self, study: &StudyId) -> Result<StudyRecord, StoreError> {
        self.collect_study(study, None).await
    }

    async fn restart_checks_of(&self, study: &StudyId) -> Result<Vec<StudyId>, StoreError> {
        studies::restart_checks_of(self, study).await
    }

    async fn trajectory(&self, study: &StudyId, trajectory: &TrajectoryId) -> Result<Option<StudyRecord>, StoreError> {
        let record = self.collect_study(study, Some(trajectory)).await?;
        Ok((!record.trajectories.is_empty()).then_some(record))
    }

    async fn cancel(&self, study: &StudyId, now: i64) -> Result<StudyState, StoreError> {
        studies::cancel(self, study, now).await
    }

    async fn put_file(&self, digest: &Digest, content: &[u8], now: i64) -> Result<bool, StoreError> {
        files::put_file(self, digest, content, now).await
    }

    async fn missing_files(&self, digests: &[Digest]) -> Result<Vec<Digest>, StoreError> {
        files::missing_files(self, digests).await
    }

    async fn begin_upload(&self, digest: &Digest, size: u64, now: i64) -> Result<String, StoreError> {
        files::begin_upload(self, digest, size, now).await
    }

    async fn upload_piece(&self, upload: &str, seq: u32, data: Vec<u8>) -> Result<(), StoreError> {
        files::upload_piece(self, upload, seq, data).await
    }

    async fn end_upload(&self, upload: &str, pieces: Option<u32>, now: i64) -> Result<bool, StoreError> {
        files::end_upload(self, upload, pieces, now).await
    }

    async fn file_pieces(&self, digest: &Digest) -> Result<Option<u32>, StoreError> {
        files::file_pieces(self, digest).await
    }

    async fn file_piece(&self, digest: &Digest, seq: u32) -> Result<Option<Vec<u8>>, StoreError> {
        files::file_piece(self, digest, seq).await
    }

    async fn launch_file(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        files::launch_file(self, digest).await
    }

    async fn discard_uploads(&self, digests: &[Digest]) -> Result<(), StoreError> {
        files::discard_uploads(self, digests).await
    }

    async fn file(&self, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        files::file(self, digest).await
    }

    async fn verdict(&self, study: &StudyId, task: &str, patch_sha256: &Digest) -> Result<Option<bool>, StoreError> {
        self.lookup_verdict(study, task, patch_sha256).await
    }

    async fn enqueue(&self, keys: &[JobKey], now: i64) -> Result<u32, StoreError> {
        jobs::enqueue(self, keys, now).await
    }

    async fn task_state_data(
        &self,
        study: &StudyId,
    ) -> Result<Option<vcurve_record::task_state::TaskStateData>, StoreError> {
        self.task_state_data(study).await
    }

    async fn task_jobs(&self, study: &StudyId) -> Result<Vec<TaskJob>, StoreError> {
        jobs::task_jobs(self, study).await
    }

    async fn leased(&self) -> Result<Vec<(ContinuationKey, u32, String)>, StoreError> {
        lease::leased(self).await
    }

    async fn study_parts(
        &self,
        study: &StudyId,
        parts: tokio::sync::mpsc::Sender<super::api::StudyPart>,
    ) -> Result<(), StoreError> {
        self.send_study(study, None, &parts).await
    }
}
