//! [`Store`] over sqlx, for PostgreSQL and SQLite.
//!
//! Both backends run the same statements through sqlx's `Any` driver (numbered `$N` parameters
//! work on both); where they differ — claiming work with `FOR UPDATE SKIP LOCKED`, connection
//! settings, migrations — [`Backend`] says which. SQLite runs on a single connection, so its
//! transactions are serialized; PostgreSQL serializes the transactions that touch one trajectory
//! by locking its row first, and those that admit into one study by locking the study's row.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyPool, Row, Transaction};
use vcurve_method::Thresholds;
use vcurve_method::schedule::variants::variant_by_name;
use vcurve_method::schedule::{Stage, Variant};
use vcurve_record::TrajectoryPayload;

use super::{LeasePolicy, Reported, Store, StoreError};
use crate::model::{
    ContinuationKey, HeartbeatVerdict, HeldJob, JobKey, JobReport, LeasedJob, Locality, Progress, StudyRecord,
    StudyState, TaskJob, WorkerInfo,
};
use crate::spec::{Admission, ControlCounts, StudySpec};

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
// and binds the rows they share.
mod admission;
mod base_runs;
mod bench;
mod dispatch;
mod export;
mod files;
mod jobs;
mod known;
mod lease;
mod progress;
mod replan;
mod report;
mod rows;
mod studies;
mod verdicts;
mod workers;

pub use base_runs::base_run_trajectory_id;
pub use bench::{ScratchDatabase, ScratchError};
pub use dispatch::{DispatchSql, dispatch_sql};

use files::insert_file;
use jobs::{insert_job, set_job_payload};
use rows::{bind_job, bind_key, corrupt, get_u32, job_key_of, json_column, keyed, outcome_of, series_of, stage_of};
use studies::count_trajectories;

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// What scheduling needs of a study, stored beside the spec so that a report does not parse every
/// trajectory's curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StudyConfig {
    params: Thresholds,
    schedule: String,
    budget: u32,
    seed: u64,
    runner_kind: String,
    runner_options: serde_json::Value,
    controls: ControlCounts,
    admission: Admission,
    /// Base-run subjects with their own task and budget (a restart check's rows).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    base_run_subjects: std::collections::BTreeMap<String, base_runs::BaseRunSubject>,
}

impl StudyConfig {
    /// The task and the budget of the base runs of `subject`.
    fn base_run_of<'a>(&'a self, subject: &'a str) -> (&'a str, u32) {
        match self.base_run_subjects.get(subject) {
            Some(s) => (s.task.as_str(), s.budget),
            None => (subject, self.budget),
        }
    }

    fn variant(&self) -> Result<&'static dyn Variant, StoreError> {
        variant_by_name(&self.schedule)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown schedule {:?}", self.schedule)))
    }
}

/// A study's stored [`StudyConfig`] (`$1` its id).
const CONFIG_OF: &str = "SELECT config_json FROM studies WHERE id = $1";

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// Study configurations are immutable once stored; cached to keep reports cheap.
    configs: Arc<Mutex<HashMap<String, Arc<StudyConfig>>>>,
    /// What each trajectory's last replan here read and requested, by `(study, trajectory)`: the
    /// next report's replan checks it against the trajectory's counters instead of reading all of
    /// its continuations again (see [`SqlStore::replan`] and [`known`]).
    known: Arc<known::KnownCache>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl SqlStore {
    /// Close the store's connections, waiting for the ones in use. On SQLite this checkpoints the
    /// write-ahead log into the database file and removes it, so the file alone is the whole store
    /// (a copy of it alone loses nothing). A process that owns the store calls it as it stops.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Connect to `url` (`postgres://…`, `sqlite://PATH` or `sqlite::memory:`) and bring its
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        };
        let pool = match backend {
            Backend::Postgres => AnyPoolOptions::new().max_connections(16).connect(url).await?,
            Backend::Sqlite => {
                // `sqlite::memory:` (or `mode=memory`) is in memory; a file whose path merely says
                // "memory" is a file.
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                let url = if in_memory || url.contains('?') { url.to_string() } else { format!("{url}?mode=rwc") };
                // One connection, kept forever: SQLite serializes writers anyway, and an in-memory
                // database lives only as long as its connection.
                AnyPoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            use sqlx::Executor;
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            conn.execute("PRAGMA busy_timeout = 10000").await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
        };
        // One portable schema serves both backends (SQLite accepts PostgreSQL's type names).
        sqlx::migrate!("../migrations").run(&pool).await?;
        Ok(SqlStore { pool, backend, configs: Arc::default(), known: Arc::default() })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// ` FOR UPDATE` where the backend has row locks.
    fn for_update(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        }
    }

    async fn config(&self, tx: &mut Transaction<'_, Any>, study: &str) -> Result<Arc<StudyConfig>, StoreError> {
        if let Some(c) = self.configs.lock().expect("config cache poisoned").get(study) {
            return Ok(c.clone());
        }
        let row = sqlx::query(CONFIG_OF)
            .bind(study)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.to_string()))?;
        let json: String = row.try_get("config_json")?;
        let config: Arc<StudyConfig> = Arc::new(serde_json::from_str(&json).map_err(corrupt)?);
        self.configs.lock().expect("config cache poisoned").insert(study.to_string(), config.clone());
        Ok(config)
    }
}

impl Store for SqlStore {
    async fn pending_by_stage(&self, study: &str) -> Result<Vec<(Stage, u64)>, StoreError> {
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
        now: i64,
    ) -> Result<String, StoreError> {
        studies::create_study(self, spec, payloads, now).await
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

    async fn progress(&self, study: &str, now: i64, policy: LeasePolicy) -> Result<Progress, StoreError> {
        progress::progress(self, study, now, policy).await
    }

    async fn list_studies(&self) -> Result<Vec<(String, String, StudyState)>, StoreError> {
        studies::list_studies(self).await
    }

    async fn study(&self, study: &str) -> Result<StudyRecord, StoreError> {
        self.collect_study(study, None).await
    }

    async fn restart_checks_of(&self, study: &str) -> Result<Vec<String>, StoreError> {
        studies::restart_checks_of(self, study).await
    }

    async fn trajectory(&self, study: &str, trajectory: &str) -> Result<Option<StudyRecord>, StoreError> {
        let record = self.collect_study(study, Some(trajectory)).await?;
        Ok((!record.trajectories.is_empty()).then_some(record))
    }

    async fn cancel(&self, study: &str, now: i64) -> Result<StudyState, StoreError> {
        studies::cancel(self, study, now).await
    }

    async fn put_file(&self, digest: &str, content: &[u8], now: i64) -> Result<bool, StoreError> {
        files::put_file(self, digest, content, now).await
    }

    async fn missing_files(&self, digests: &[String]) -> Result<Vec<String>, StoreError> {
        files::missing_files(self, digests).await
    }

    async fn file(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        files::file(self, digest).await
    }

    async fn verdict(&self, study: &str, task: &str, patch_sha256: &str) -> Result<Option<bool>, StoreError> {
        self.lookup_verdict(study, task, patch_sha256).await
    }

    async fn enqueue(&self, keys: &[JobKey], now: i64) -> Result<u32, StoreError> {
        jobs::enqueue(self, keys, now).await
    }

    async fn task_jobs(&self, study: &str) -> Result<Vec<TaskJob>, StoreError> {
        jobs::task_jobs(self, study).await
    }

    async fn leased(&self) -> Result<Vec<(ContinuationKey, u32, String)>, StoreError> {
        lease::leased(self).await
    }

    async fn study_parts(
        &self,
        study: &str,
        parts: tokio::sync::mpsc::Sender<super::StudyPart>,
    ) -> Result<(), StoreError> {
        self.send_study(study, None, &parts).await
    }
}
