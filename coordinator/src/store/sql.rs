//! [`Store`] over sqlx, for PostgreSQL and SQLite.
//!
//! Both backends run the same statements through sqlx's `Any` driver (numbered `$N` parameters
//! work on both); where they differ — claiming work with `FOR UPDATE SKIP LOCKED`, connection
//! settings, migrations — [`Backend`] says which. SQLite runs on a single connection, so its
//! transactions are serialized; PostgreSQL serializes the transactions that touch one trajectory
//! by locking its row first, and those that admit into one study by locking the study's row.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{Any, AnyPool, Row, Transaction};
use vcurve_method::Thresholds;
use vcurve_method::schedule::variants::variant_by_name;
use vcurve_method::schedule::{Key, Outcome, Series, Stage, TrajectoryPlan, Variant};

use vcurve_record::TrajectoryPayload;
use vcurve_record::jobs::NonReplayable;

use super::{LeasePolicy, Reported, Store, StoreError};
use crate::model::{
    ContinuationKey, HeartbeatVerdict, HeldJob, JobKey, JobKind, JobReport, LeasedJob, Locality, Progress,
    RegistrySnapshot, ReportVerdict, StudyRecord, StudyState, TaskJob, TrajectoryState, WorkerInfo,
};
use crate::planner::{self, AdmitDecision};
use crate::spec::{Admission, ControlCounts, StudySpec};

/// The condition that selects one continuation by its key, bound as `$1 … $5` by [`bind_key`].
macro_rules! key_is {
    () => {
        "study = $1 AND trajectory = $2 AND series = $3 AND t = $4 AND seed = $5"
    };
}

/// The condition that selects one row of `jobs` by its key, bound as `$1 … $5` by [`bind_job`].
macro_rules! job_is {
    () => {
        "study = $1 AND kind = $2 AND subject = $3 AND patch_sha256 = $4 AND seq = $5"
    };
}

// After the macros above, which they use.
mod base_runs;
mod dispatch;
mod export;
mod verdicts;

pub use base_runs::base_run_trajectory_id;
pub use dispatch::{DispatchSql, dispatch_sql};

type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>;

/// Bind a continuation key as `$1 … $5` (see [`key_is!`]).
fn bind_key<'q>(query: AnyQuery<'q>, key: &ContinuationKey) -> AnyQuery<'q> {
    query
        .bind(key.study.clone())
        .bind(key.trajectory.clone())
        .bind(key.series.as_str())
        .bind(i64::from(key.t))
        .bind(i64::from(key.seed))
}

/// A row of `jobs`: `(study, kind, subject, patch_sha256, seq)`.
fn job_row(key: &JobKey) -> Option<(String, &'static str, String, String, i64)> {
    Some(match key {
        JobKey::Continuation(_) => return None,
        JobKey::Replay { study, trajectory } => (study.clone(), "replay", trajectory.clone(), String::new(), 0),
        JobKey::Evaluation { study, task, patch_sha256, round } => {
            (study.clone(), "evaluation", task.clone(), patch_sha256.clone(), i64::from(*round))
        }
        JobKey::BaseRun { study, task, seed } => {
            (study.clone(), "base_run", task.clone(), String::new(), i64::from(*seed))
        }
    })
}

/// The key of a row of `jobs`.
fn job_key_of(row: &AnyRow) -> Result<JobKey, StoreError> {
    let study: String = row.try_get("study")?;
    let kind: String = row.try_get("kind")?;
    let subject: String = row.try_get("subject")?;
    let seq = get_u32(row, "seq")?;
    Ok(match kind.as_str() {
        "replay" => JobKey::Replay { study, trajectory: subject },
        "evaluation" => {
            JobKey::Evaluation { study, task: subject, patch_sha256: row.try_get("patch_sha256")?, round: seq }
        }
        "base_run" => JobKey::BaseRun { study, task: subject, seed: seq },
        other => return Err(corrupt(format!("unknown job kind {other:?}"))),
    })
}

/// Where a held job lives: its table, the condition selecting it, and the query with the key
/// bound as `$1 … $5`. `sql` is the statement with `{table}` and `{key}` placeholders.
fn keyed<'q>(sql: &str, key: &JobKey) -> AnyQuery<'q> {
    match key {
        JobKey::Continuation(k) => bind_key(
            sqlx::query(sqlx::AssertSqlSafe(sql.replace("{table}", "continuations").replace("{key}", key_is!()))),
            k,
        ),
        other => {
            let (study, kind, subject, patch, seq) = job_row(other).expect("not a continuation");
            sqlx::query(sqlx::AssertSqlSafe(sql.replace("{table}", "jobs").replace("{key}", job_is!())))
                .bind(study)
                .bind(kind)
                .bind(subject)
                .bind(patch)
                .bind(seq)
        }
    }
}

/// Bind a key of `jobs` as `$1 … $5` (see [`job_is!`]).
fn bind_job<'q>(query: AnyQuery<'q>, key: &JobKey) -> AnyQuery<'q> {
    let (study, kind, subject, patch, seq) = job_row(key).expect("not a continuation");
    query.bind(study).bind(kind).bind(subject).bind(patch).bind(seq)
}

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

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    /// Study configurations are immutable once stored; cached to keep reports cheap.
    configs: Arc<Mutex<HashMap<String, Arc<StudyConfig>>>>,
    /// What each trajectory's last replan here read and requested, by `(study, trajectory)`: the
    /// next report's replan checks it against the trajectory's counters instead of reading all of
    /// its continuations again (see [`SqlStore::replan`]).
    known: Arc<Mutex<HashMap<(String, String), Known>>>,
}

/// A trajectory's continuations as of its last replan in this process.
#[derive(Debug, Clone)]
struct Known {
    /// The trajectory's counters right after that replan. Every change to the set of keys or
    /// outcomes raises one of them (the store only ever adds keys and outcomes), so under the
    /// trajectory's row lock, counters equal to these mean nothing happened since but the report
    /// being made — in this coordinator or any other on the same store.
    version: Counters,
    existing: BTreeSet<Key>,
    outcomes: Vec<(Key, Outcome)>,
}

/// The condition on a trajectory's columns that it is in flight: admitted, not finished.
const IN_FLIGHT: &str = "state IN ('running', 'replaying')";

/// The columns admission weighs (`$1` the oldest visit of a live worker): `slots` of live workers,
/// `leased` and `runnable` jobs of both tables (pending in running studies).
const DEMAND: &str = "(SELECT CAST(COALESCE(SUM(slots), 0) AS BIGINT) FROM workers WHERE last_seen_ms >= $1) AS slots, \
     (SELECT COUNT(*) FROM continuations WHERE state = 'leased') \
       + (SELECT COUNT(*) FROM jobs WHERE state = 'leased') AS leased, \
     (SELECT COUNT(*) FROM continuations c JOIN studies s ON s.id = c.study \
       WHERE c.state = 'pending' AND s.state = 'running') \
       + (SELECT COUNT(*) FROM jobs j JOIN studies s ON s.id = j.study \
       WHERE j.state = 'pending' AND s.state = 'running') AS runnable";

/// A trajectory's continuation counters: `n_requested`, `n_done + n_retired` and `n_dropped`
/// ([`dispatch::COUNTERS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counters {
    requested: i64,
    finished: i64,
    dropped: i64,
}

impl Counters {
    /// From a row with the [`dispatch::COUNTERS`] columns.
    fn of(row: &AnyRow) -> Result<Counters, StoreError> {
        Ok(Counters {
            requested: row.try_get("n_requested")?,
            finished: row.try_get("n_finished")?,
            dropped: row.try_get("n_dropped")?,
        })
    }
}

/// At most this many trajectories are known at once; past it the map starts over (a miss only
/// costs the full read). Finished trajectories are forgotten at once. A trajectory's entry is
/// its keys and outcomes, a few hundred of each: some tens of kB, so at most some tens of MB.
const MAX_KNOWN: usize = 1024;

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("backend", &self.backend).finish_non_exhaustive()
    }
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn get_u32(row: &AnyRow, column: &str) -> Result<u32, StoreError> {
    let v: i64 = row.try_get(column)?;
    u32::try_from(v).map_err(|_| corrupt(format!("{column} = {v} out of range")))
}

fn series_of(s: &str) -> Result<Series, StoreError> {
    Series::parse(s).ok_or_else(|| corrupt(format!("unknown series {s:?}")))
}

fn stage_of(s: &str) -> Result<Stage, StoreError> {
    Stage::parse(s).ok_or_else(|| corrupt(format!("unknown stage {s:?}")))
}

/// A nullable JSON column.
fn json_column<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>, StoreError> {
    row.try_get::<Option<String>, _>(column)?
        .map(|json| serde_json::from_str(&json).map_err(|e| corrupt(format!("{column}: {e}"))))
        .transpose()
}

/// The outcome a finished continuation row holds.
fn outcome_of(row: &AnyRow) -> Result<Outcome, StoreError> {
    let state: String = row.try_get("state")?;
    Ok(match state.as_str() {
        "retired" => Outcome::Retired,
        _ => match row.try_get::<Option<i64>, _>("success")? {
            Some(1) => Outcome::Success,
            Some(_) => Outcome::Failure,
            None => return Err(corrupt("a done continuation without an outcome")),
        },
    })
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
        let row = sqlx::query("SELECT config_json FROM studies WHERE id = $1")
            .bind(study)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.to_string()))?;
        let json: String = row.try_get("config_json")?;
        let config: Arc<StudyConfig> = Arc::new(serde_json::from_str(&json).map_err(corrupt)?);
        self.configs.lock().expect("config cache poisoned").insert(study.to_string(), config.clone());
        Ok(config)
    }

    /// Rebuild a trajectory's schedule (`(study, id, plan)`) from its stored continuations, create
    /// the continuations it now asks for, and record its stage, its counters — and the study's end
    /// when this was its last trajectory.
    /// Returns how many continuations were created and whether the trajectory is done.
    ///
    /// `locked` is the trajectory's counters as this transaction's row lock read them
    /// ([`SqlStore::lock_trajectory`]), `None` to read them here. `fresh` is the outcome this
    /// transaction has just recorded, if any: this replan counts it (`n_done`, or `n_retired` for
    /// [`Outcome::Retired`]). Then, when the counters are exactly what this trajectory's last
    /// replan in this process left ([`Known`]), that replan's keys and outcomes plus `fresh` are
    /// the trajectory's, and its continuations are not read again. Must run under the
    /// trajectory's row lock.
    async fn replan(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        (study, trajectory, plan): (&str, &str, &TrajectoryPlan),
        locked: Option<Counters>,
        fresh: Option<(Key, Outcome)>,
        now: i64,
    ) -> Result<(u64, bool), StoreError> {
        let version = match locked {
            Some(counters) => counters,
            None => {
                let sql = format!("SELECT {} FROM trajectories WHERE study = $1 AND id = $2", dispatch::COUNTERS);
                let row =
                    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).bind(trajectory).fetch_one(&mut **tx).await?;
                Counters::of(&row)?
            }
        };
        let id = (study.to_string(), trajectory.to_string());
        let cached = fresh.and_then(|(key, outcome)| {
            let mut known = self.known.lock().expect("known cache poisoned").remove(&id)?;
            let fits = known.version == version
                && known.existing.contains(&key)
                && known.outcomes.iter().all(|(k, _)| *k != key);
            fits.then(|| {
                known.outcomes.push((key, outcome));
                known
            })
        });
        let (mut existing, outcomes) = match cached {
            Some(known) => (known.existing, known.outcomes),
            None => self.read_continuations(tx, study, trajectory).await?,
        };
        let replan = planner::replan(plan, &config.params, config.variant()?, outcomes.iter().copied());
        let new: Vec<&Key> = replan.pending.iter().filter(|k| !existing.contains(k)).collect();
        // One multi-row insert per 100 keys (5 parameters a row stays far below every limit).
        for chunk in new.chunks(100) {
            let sql = dispatch::request(chunk.len());
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).bind(trajectory).bind(now);
            for k in chunk {
                q = q.bind(k.series.as_str()).bind(i64::from(k.t)).bind(i64::from(k.seed));
            }
            q.execute(&mut **tx).await?;
        }
        let state = if replan.done { TrajectoryState::Done } else { TrajectoryState::Running };
        let (done, retired) = match fresh {
            Some((_, Outcome::Retired)) => (0, 1),
            Some(_) => (1, 0),
            None => (0, 0),
        };
        sqlx::query(dispatch::ADVANCE)
            .bind(replan.stage.as_str())
            .bind(planner::stage_rank(replan.stage))
            .bind(state.as_str())
            .bind(new.len() as i64)
            .bind(done)
            .bind(retired)
            .bind(study)
            .bind(trajectory)
            .execute(&mut **tx)
            .await?;
        let created = new.len() as u64;
        {
            let mut known = self.known.lock().expect("known cache poisoned");
            if replan.done {
                known.remove(&id);
            } else {
                existing.extend(replan.pending.iter().copied());
                if known.len() >= MAX_KNOWN {
                    known.clear();
                }
                let version = Counters {
                    requested: version.requested + created as i64,
                    finished: version.finished + done + retired,
                    dropped: version.dropped,
                };
                known.insert(id, Known { version, existing, outcomes });
            }
        }
        if replan.done {
            self.finish_if_done(tx, study, now).await?;
        }
        Ok((created, replan.done))
    }

    /// A trajectory's continuation keys and the outcomes among them.
    async fn read_continuations(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<(BTreeSet<Key>, Vec<(Key, Outcome)>), StoreError> {
        let rows = sqlx::query(
            "SELECT series, t, seed, state, success FROM continuations WHERE study = $1 AND trajectory = $2",
        )
        .bind(study)
        .bind(trajectory)
        .fetch_all(&mut **tx)
        .await?;
        let mut existing = BTreeSet::new();
        let mut outcomes = Vec::new();
        for row in &rows {
            let key = Key {
                series: series_of(&row.try_get::<String, _>("series")?)?,
                t: get_u32(row, "t")?,
                seed: get_u32(row, "seed")?,
            };
            existing.insert(key);
            let state: String = row.try_get("state")?;
            if state == "done" || state == "retired" {
                outcomes.push((key, outcome_of(row)?));
            }
        }
        Ok((existing, outcomes))
    }

    /// Add `n` to one of a trajectory's continuation counters (`n_dropped`: a report's outcome is
    /// counted by its replan's [`dispatch::ADVANCE`]), inside the transaction that changed them.
    async fn count(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
        counter: &'static str,
        n: u64,
    ) -> Result<(), StoreError> {
        if n == 0 {
            return Ok(());
        }
        sqlx::query(sqlx::AssertSqlSafe(dispatch::count(counter)))
            .bind(n as i64)
            .bind(study)
            .bind(trajectory)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Mark a study done once none of its trajectories is waiting, replaying or running.
    async fn finish_if_done(&self, tx: &mut Transaction<'_, Any>, study: &str, now: i64) -> Result<(), StoreError> {
        // Open trajectories, and jobs still to run (flake re-checks, base runs).
        let open: i64 = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM trajectories WHERE study = $1 AND state IN ('waiting', 'replaying', 'running')) \
             + (SELECT COUNT(*) FROM jobs WHERE study = $1 AND state IN ('pending', 'leased')) AS n",
        )
        .bind(study)
        .fetch_one(&mut **tx)
        .await?
        .try_get("n")?;
        if open == 0 {
            sqlx::query("UPDATE studies SET state = 'done', finished_ms = $1 WHERE id = $2 AND state = 'running'")
                .bind(now)
                .bind(study)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Drop a trajectory whose state differs from the record: it becomes non-replayable with the
    /// reason, its requested continuations are dropped (leased ones are revoked at the next
    /// heartbeat), and the study ends if it was the last one open.
    async fn drop_non_replayable(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
        why: &NonReplayable,
        now: i64,
    ) -> Result<(), StoreError> {
        tracing::warn!(study, trajectory, step = why.step, level = why.level.as_str(), reason = %why.reason, "trajectory is non-replayable");
        sqlx::query(
            "UPDATE trajectories SET state = 'non_replayable', non_replayable_json = $1 WHERE study = $2 AND id = $3",
        )
        .bind(serde_json::to_string(why).map_err(corrupt)?)
        .bind(study)
        .bind(trajectory)
        .execute(&mut **tx)
        .await?;
        let dropped = sqlx::query(
            "UPDATE continuations SET state = 'dropped', worker = NULL, lease_expires_ms = NULL \
             WHERE study = $1 AND trajectory = $2 AND state IN ('pending', 'leased')",
        )
        .bind(study)
        .bind(trajectory)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        self.count(tx, study, trajectory, "n_dropped", dropped).await?;
        self.back_fill(tx, study, trajectory, now).await?;
        self.finish_if_done(tx, study, now).await
    }

    /// Admit trajectories as each running study's admission rule asks (see
    /// [`planner::admission`]).
    ///
    /// Concurrent leases — of one coordinator or of several on one store — admit into a study one
    /// after the other: under the study row's lock, the admitting transaction reads the next rank
    /// from the row's `admitted` counter and makes the batch rule's in-flight check, and every
    /// statement after the lock sees what the admitter before it committed (READ COMMITTED). So
    /// ranks are unique, trajectories are admitted in spec order, and the rule is applied to what
    /// was admitted, not to a stale count. Controls are not decided here: they were stored with
    /// each trajectory's plan at launch (see [`planner::controls_at_launch`]).
    ///
    /// The lock is taken only when a first look without it finds something to admit, so leases
    /// with nothing to admit go on to claim work without waiting for each other. Lock order:
    /// studies (oldest first), then their waiting trajectories — rows that no report locks, since
    /// reports lock only admitted trajectories (and their studies' rows last, when they end them).
    async fn admit(&self, tx: &mut Transaction<'_, Any>, now: i64, policy: LeasePolicy) -> Result<(), StoreError> {
        // Only studies that still have trajectories to admit; once every trajectory is in, a
        // lease costs this one query here. With each, its trajectories in flight and (the same on
        // every row) the demand: one round trip for the look without the lock.
        let sql = format!(
            "SELECT s.id, (SELECT COUNT(*) FROM trajectories t WHERE t.study = s.id AND t.{IN_FLIGHT}) AS in_flight, \
             {DEMAND} FROM studies s WHERE s.state = 'running' \
             AND EXISTS (SELECT 1 FROM trajectories t WHERE t.study = s.id AND t.state = 'waiting') \
             ORDER BY s.created_ms, s.id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now - policy.timeout_ms).fetch_all(&mut **tx).await?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let (mut free, mut runnable) = Self::demand_of(first)?;
        for row in &rows {
            let study: String = row.try_get("id")?;
            let config = self.config(tx, &study).await?;
            let in_flight = u32::try_from(row.try_get::<i64, _>("in_flight")?).unwrap_or(u32::MAX);
            if planner::admission(&config.admission, in_flight, runnable, free) == AdmitDecision::Nothing {
                continue;
            }
            let sql = format!(
                "SELECT admitted, controls_at_launch FROM studies WHERE id = $1 AND state = 'running'{}",
                self.for_update()
            );
            let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&study).fetch_optional(&mut **tx).await? else {
                continue; // cancelled or ended meanwhile
            };
            let first_rank: i64 = row.try_get("admitted")?;
            let controls_at_launch = row.try_get::<i64, _>("controls_at_launch")? != 0;
            let mut rank = first_rank;
            // Under the lock, the demand as it is now: other admitters may have met it meanwhile.
            (free, runnable) = self.demand(tx, now, policy).await?;
            loop {
                let in_flight = self.in_flight(tx, &study).await?;
                let take = match planner::admission(&config.admission, in_flight, runnable, free) {
                    AdmitDecision::Nothing => break,
                    AdmitDecision::One => 1,
                    AdmitDecision::Batch(n) => n,
                };
                let sql = format!(
                    "SELECT id, plan_json, recorded_digest FROM trajectories WHERE study = $1 AND state = 'waiting' \
                     ORDER BY ord LIMIT $2{}",
                    self.for_update()
                );
                let waiting = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&study)
                    .bind(i64::from(take))
                    .fetch_all(&mut **tx)
                    .await?;
                if waiting.is_empty() {
                    break;
                }
                for row in waiting {
                    let id: String = row.try_get("id")?;
                    let mut plan: TrajectoryPlan =
                        serde_json::from_str(&row.try_get::<String, _>("plan_json")?).map_err(corrupt)?;
                    if !controls_at_launch {
                        // A study stored before controls were decided at launch: by rank, the
                        // rule it was launched under.
                        let rank = u32::try_from(rank).map_err(|_| corrupt(format!("admission rank {rank}")))?;
                        plan.controls = planner::controls_for(rank, &config.controls);
                    }
                    // A recorded run is replayed first: no continuation before its states are
                    // known to match the record (docs/method.md §5).
                    let recorded = row.try_get::<Option<String>, _>("recorded_digest")?.is_some();
                    let state = if recorded { TrajectoryState::Replaying } else { TrajectoryState::Running };
                    sqlx::query("UPDATE trajectories SET state = $1, admit_order = $2, plan_json = $3 WHERE study = $4 AND id = $5")
                        .bind(state.as_str())
                        .bind(rank)
                        .bind(serde_json::to_string(&plan).map_err(corrupt)?)
                        .bind(&study)
                        .bind(&id)
                        .execute(&mut **tx)
                        .await?;
                    rank += 1;
                    if recorded {
                        insert_job(tx, &JobKey::Replay { study: study.clone(), trajectory: id.clone() }, now).await?;
                        runnable += 1;
                    } else {
                        runnable += self.replan(tx, &config, (&study, &id, &plan), None, None, now).await?.0;
                    }
                }
                if take > 1 {
                    break;
                }
            }
            if rank > first_rank {
                sqlx::query("UPDATE studies SET admitted = $1 WHERE id = $2")
                    .bind(rank)
                    .bind(&study)
                    .execute(&mut **tx)
                    .await?;
            }
        }
        Ok(())
    }

    /// What demand admission weighs, over every running study: the free worker slots (of workers
    /// seen since `$1`) and the runnable jobs.
    async fn demand(
        &self,
        tx: &mut Transaction<'_, Any>,
        now: i64,
        policy: LeasePolicy,
    ) -> Result<(u64, u64), StoreError> {
        let sql = format!("SELECT {DEMAND}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now - policy.timeout_ms).fetch_one(&mut **tx).await?;
        Self::demand_of(&row)
    }

    /// The free slots and runnable jobs of a row with the [`DEMAND`] columns.
    fn demand_of(row: &AnyRow) -> Result<(u64, u64), StoreError> {
        let (slots, leased): (i64, i64) = (row.try_get("slots")?, row.try_get("leased")?);
        Ok(((slots - leased).max(0) as u64, row.try_get::<i64, _>("runnable")?.max(0) as u64))
    }

    /// A study's trajectories in flight (admitted, not finished), for the batch rule.
    async fn in_flight(&self, tx: &mut Transaction<'_, Any>, study: &str) -> Result<u32, StoreError> {
        count_trajectories(tx, study, IN_FLIGHT).await
    }

    /// `IN ($first, …)` over the runner kinds a worker offers.
    fn kinds_in(kinds: &[String], first: usize) -> String {
        let placeholders: Vec<String> = (0..kinds.len()).map(|i| format!("${}", i + first)).collect();
        format!("IN ({})", placeholders.join(", "))
    }

    /// Lease up to `max` pending replays, evaluations and base runs of running studies whose
    /// runner the worker offers.
    async fn claim_jobs(
        &self,
        tx: &mut Transaction<'_, Any>,
        worker: &str,
        max: u32,
        kinds: &[String],
        now: i64,
        policy: LeasePolicy,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        let sql = format!(
            "SELECT j.study, j.kind, j.subject, j.patch_sha256, j.seq, j.attempt, \
             COALESCE(tr.payload_digest, j.payload_digest) AS payload_digest, tr.plan_json \
             FROM jobs j \
             JOIN studies s ON s.id = j.study \
             LEFT JOIN trajectories tr ON j.kind = 'replay' AND tr.study = j.study AND tr.id = j.subject \
             WHERE j.state = 'pending' AND s.state = 'running' AND s.runner_kind {} \
             ORDER BY s.created_ms, j.created_ms, j.kind, j.subject, j.seq \
             LIMIT $1{}",
            Self::kinds_in(kinds, 2),
            if self.backend == Backend::Postgres { " FOR UPDATE OF j SKIP LOCKED" } else { "" }
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(max));
        for k in kinds {
            q = q.bind(k.as_str());
        }
        let rows = q.fetch_all(&mut **tx).await?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            let key = job_key_of(&row)?;
            let attempt = get_u32(&row, "attempt")? + 1;
            mark_leased(tx, &key, attempt, worker, now + policy.timeout_ms).await?;
            let config = self.config(tx, key.study()).await?;
            let anchors = match row.try_get::<Option<String>, _>("plan_json")? {
                Some(plan) if key.kind() == JobKind::Replay => {
                    let plan: TrajectoryPlan = serde_json::from_str(&plan).map_err(corrupt)?;
                    config.params.anchors(plan.length)
                }
                _ => Vec::new(),
            };
            let budget = match &key {
                JobKey::BaseRun { task, .. } => config.base_run_of(task).1,
                _ => config.budget,
            };
            jobs.push(LeasedJob {
                budget,
                runner_kind: config.runner_kind.clone(),
                runner_options: config.runner_options.to_string(),
                study_seed: config.seed,
                trajectory_digest: row.try_get("payload_digest")?,
                anchors,
                registry_snapshot: None,
                attempt,
                key,
            });
        }
        Ok(jobs)
    }

    /// Lease up to `max` pending continuations, trajectories in later stages first.
    async fn claim_continuations(
        &self,
        tx: &mut Transaction<'_, Any>,
        worker: &str,
        max: u32,
        kinds: &[String],
        expires_ms: i64,
        locality: &Locality,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        // Locality: continuations of trajectories the worker holds snapshots of come first, then
        // those with a snapshot at or before their step in the worker's registry; the rest of the
        // order (and the limit) is unchanged, so no free slot waits on locality.
        let near = &locality.near;
        let held = (!near.is_empty()).then(|| format!("tr.payload_digest {}", Self::kinds_in(near, 2 + kinds.len())));
        let in_registry = locality.registry.as_ref().map(|_| {
            format!(
                "EXISTS (SELECT 1 FROM registry_snapshots r WHERE r.registry = ${} \
                 AND r.payload_digest = tr.payload_digest AND r.t <= c.t)",
                2 + kinds.len() + near.len()
            )
        });
        let locality_order = match (held, in_registry) {
            (None, None) => String::new(),
            (Some(held), None) => format!("CASE WHEN {held} THEN 0 ELSE 1 END, "),
            (None, Some(in_registry)) => format!("CASE WHEN {in_registry} THEN 1 ELSE 2 END, "),
            (Some(held), Some(in_registry)) => {
                format!("CASE WHEN {held} THEN 0 WHEN {in_registry} THEN 1 ELSE 2 END, ")
            }
        };
        let sql = dispatch::claim(&Self::kinds_in(kinds, 2), &locality_order, self.backend == Backend::Postgres);
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(max));
        for k in kinds.iter().chain(near).chain(&locality.registry) {
            q = q.bind(k.as_str());
        }
        let rows = q.fetch_all(&mut **tx).await?;
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            let key = ContinuationKey {
                study: row.try_get("study")?,
                trajectory: row.try_get("trajectory")?,
                series: series_of(&row.try_get::<String, _>("series")?)?,
                t: get_u32(&row, "t")?,
                seed: get_u32(&row, "seed")?,
            };
            let attempt = get_u32(&row, "attempt")? + 1;
            let config = self.config(tx, &key.study).await?;
            let budget = key.series.budget(config.budget, key.t);
            let trajectory_digest: Option<String> = row.try_get("payload_digest")?;
            let registry_snapshot = match (&locality.registry, &trajectory_digest) {
                (Some(registry), Some(digest)) => Self::registry_snapshot(tx, registry, digest, key.t).await?,
                _ => None,
            };
            let key = JobKey::Continuation(key);
            mark_leased(tx, &key, attempt, worker, expires_ms).await?;
            jobs.push(LeasedJob {
                budget,
                runner_kind: config.runner_kind.clone(),
                runner_options: config.runner_options.to_string(),
                study_seed: config.seed,
                trajectory_digest,
                anchors: Vec::new(),
                registry_snapshot,
                attempt,
                key,
            });
        }
        Ok(jobs)
    }

    /// The nearest snapshot at or before `t` (`t > 0`) of the trajectory with payload `digest` in
    /// `registry`.
    async fn registry_snapshot(
        tx: &mut Transaction<'_, Any>,
        registry: &str,
        digest: &str,
        t: u32,
    ) -> Result<Option<RegistrySnapshot>, StoreError> {
        let row = sqlx::query(
            "SELECT t, image_id FROM registry_snapshots WHERE registry = $1 AND payload_digest = $2 \
             AND t > 0 AND t <= $3 ORDER BY t DESC LIMIT 1",
        )
        .bind(registry)
        .bind(digest)
        .bind(i64::from(t))
        .fetch_optional(&mut **tx)
        .await?;
        row.map(|row| {
            Ok(RegistrySnapshot {
                trajectory_digest: digest.to_owned(),
                t: get_u32(&row, "t")?,
                image_id: row.try_get("image_id")?,
            })
        })
        .transpose()
    }

    /// Record snapshots pushed to `registry` (a push of a key already recorded replaces it).
    async fn record_pushed(
        tx: &mut Transaction<'_, Any>,
        registry: &str,
        pushed: &[RegistrySnapshot],
        now: i64,
    ) -> Result<(), StoreError> {
        for p in pushed {
            sqlx::query(
                "INSERT INTO registry_snapshots (registry, payload_digest, t, image_id, pushed_ms) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (registry, payload_digest, t) \
                 DO UPDATE SET image_id = excluded.image_id, pushed_ms = excluded.pushed_ms",
            )
            .bind(registry)
            .bind(p.trajectory_digest.as_str())
            .bind(i64::from(p.t))
            .bind(p.image_id.as_str())
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Lock a trajectory's row (reports of one trajectory replan one after the other); its plan
    /// and counters.
    async fn lock_trajectory(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<Option<(TrajectoryPlan, Counters)>, StoreError> {
        let sql = dispatch::lock_trajectory(self.for_update());
        let Some(row) =
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).bind(trajectory).fetch_optional(&mut **tx).await?
        else {
            return Ok(None);
        };
        let plan = serde_json::from_str(&row.try_get::<String, _>("plan_json")?).map_err(corrupt)?;
        Ok(Some((plan, Counters::of(&row)?)))
    }

    /// A trajectory's task and payload digest. A trajectory stored before the `task` column
    /// takes its task from the spec.
    async fn task_of(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<(String, Option<String>), StoreError> {
        let row = sqlx::query("SELECT task, payload_digest FROM trajectories WHERE study = $1 AND id = $2")
            .bind(study)
            .bind(trajectory)
            .fetch_one(&mut **tx)
            .await?;
        let payload: Option<String> = row.try_get("payload_digest")?;
        if let Some(task) = row.try_get::<Option<String>, _>("task")? {
            return Ok((task, payload));
        }
        let spec: String = sqlx::query("SELECT spec_json FROM studies WHERE id = $1")
            .bind(study)
            .fetch_one(&mut **tx)
            .await?
            .try_get("spec_json")?;
        let spec: StudySpec = serde_json::from_str(&spec).map_err(corrupt)?;
        let task = spec.trajectories.iter().find(|t| t.id == trajectory).map(|t| t.task.clone());
        Ok((task.unwrap_or_else(|| trajectory.to_string()), payload))
    }

    /// Whether a job row may take a report for `attempt`: `Err` carries why not.
    fn check_attempt(row: &AnyRow, attempt: u32) -> Result<Result<(), String>, StoreError> {
        let state: String = row.try_get("state")?;
        let current = get_u32(row, "attempt")?;
        Ok(match state.as_str() {
            "done" | "retired" => Err("the key already has an outcome".into()),
            "dropped" => Err("the trajectory was dropped as non-replayable".into()),
            "leased" if current == attempt => Ok(()),
            _ => Err(format!("attempt {attempt} is stale (current attempt {current}, {state})")),
        })
    }

    /// Record a no-outcome of a job of either table: the key is run again, or retired once it has
    /// had as many no-outcomes as the study allows. Returns whether it was retired, and how many
    /// no-outcomes it has had.
    async fn no_outcome(
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        row: &AnyRow,
        reason: &str,
        config: &StudyConfig,
        now: i64,
    ) -> Result<(bool, u32), StoreError> {
        let no_outcomes = get_u32(row, "no_outcomes")? + 1;
        let retired = no_outcomes >= config.params.retries_before_retired;
        keyed(
            "UPDATE {table} SET state = $6, no_outcomes = $7, last_reason = $8, worker = NULL, \
             lease_expires_ms = NULL, done_ms = $9 WHERE {key}",
            key,
        )
        .bind(if retired { "retired" } else { "pending" })
        .bind(i64::from(no_outcomes))
        .bind(reason)
        .bind(if retired { Some(now) } else { None })
        .execute(&mut **tx)
        .await?;
        Ok((retired, no_outcomes))
    }

    async fn report_continuation(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &ContinuationKey,
        attempt: u32,
        report: &JobReport,
        now: i64,
    ) -> Result<Reported, StoreError> {
        let Some((plan, counters)) = self.lock_trajectory(tx, &key.study, &key.trajectory).await? else {
            return Ok(Reported::ignored("unknown key"));
        };
        let k = Key { series: key.series, t: key.t, seed: key.seed };
        let mut rechecks = false;
        // The outcome this report records, if any: the replan's `fresh`.
        let (config, fresh) = match report {
            JobReport::Outcome(o) => {
                // The update checks the attempt itself; only a report it does not take reads the
                // row, to say why.
                let completed = bind_key(sqlx::query(dispatch::COMPLETE), key)
                    .bind(i64::from(o.success))
                    .bind(i64::from(o.steps))
                    .bind(o.end_type.as_str())
                    .bind(o.patch_sha256.as_str())
                    .bind(o.judged.as_str())
                    .bind(now)
                    .bind(i64::from(attempt))
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                if completed == 0 {
                    let job = JobKey::Continuation(key.clone());
                    return Ok(match self.current_row(tx, &job, attempt).await? {
                        Err(ignored) => ignored,
                        Ok(_) => Reported::ignored(format!("attempt {attempt} could not be recorded")),
                    });
                }
                let config = self.config(tx, &key.study).await?;
                if vcurve_record::runner::runs_containers(&config.runner_kind) {
                    let (task, payload) = self.task_of(tx, &key.study, &key.trajectory).await?;
                    let run = verdicts::RunOf { study: &key.study, task: &task, payload: payload.as_deref() };
                    rechecks = self.judge_run(tx, &config, run, o, now).await?;
                }
                (config, Some((k, if o.success { Outcome::Success } else { Outcome::Failure })))
            }
            JobReport::NoOutcome { reason } => {
                let job = JobKey::Continuation(key.clone());
                let row = match self.current_row(tx, &job, attempt).await? {
                    Ok(row) => row,
                    Err(ignored) => return Ok(ignored),
                };
                let config = self.config(tx, &key.study).await?;
                let (retired, _) = Self::no_outcome(tx, &job, &row, reason, &config, now).await?;
                (config, retired.then_some((k, Outcome::Retired)))
            }
            JobReport::NonReplayable(why) => {
                if let Err(ignored) = self.current_row(tx, &JobKey::Continuation(key.clone()), attempt).await? {
                    return Ok(ignored);
                }
                self.drop_non_replayable(tx, &key.study, &key.trajectory, why, now).await?;
                // The study may be over, or another trajectory admitted.
                return Ok(Reported::accepted(true));
            }
            JobReport::Replayed(_) | JobReport::Evaluated { .. } => unreachable!("checked by JobReport::fits"),
        };
        // A no-outcome puts its key back, a re-check is new work: either wakes a waiting worker.
        let mut wakes = matches!(report, JobReport::NoOutcome { .. }) || rechecks;
        if fresh.is_some() {
            let (created, finished) =
                self.replan(tx, &config, (&key.study, &key.trajectory, &plan), Some(counters), fresh, now).await?;
            wakes |= created > 0 || finished;
        }
        Ok(Reported::accepted(wakes))
    }

    /// A job's row (of either table) for a report of `attempt`, locked on PostgreSQL (state,
    /// attempt and no-outcomes), or the report ignored with why: an unknown key, or not that
    /// attempt's lease.
    async fn current_row(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        attempt: u32,
    ) -> Result<Result<AnyRow, Reported>, StoreError> {
        let sql = format!("SELECT state, attempt, no_outcomes FROM {{table}} WHERE {{key}}{}", self.for_update());
        let Some(row) = keyed(&sql, key).fetch_optional(&mut **tx).await? else {
            return Ok(Err(Reported::ignored("unknown key")));
        };
        Ok(Self::check_attempt(&row, attempt)?.map(|()| row).map_err(Reported::ignored))
    }

    async fn report_job(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        attempt: u32,
        report: &JobReport,
        now: i64,
    ) -> Result<Reported, StoreError> {
        let study = key.study();
        let locked = match key {
            JobKey::Replay { trajectory, .. } => match self.lock_trajectory(tx, study, trajectory).await? {
                Some(locked) => Some(locked),
                None => return Ok(Reported::ignored("unknown key")),
            },
            _ => None,
        };
        let row = match self.current_row(tx, key, attempt).await? {
            Ok(row) => row,
            Err(ignored) => return Ok(ignored),
        };
        let config = self.config(tx, study).await?;
        if let JobReport::NoOutcome { reason } = report {
            let (retired, no_outcomes) = Self::no_outcome(tx, key, &row, reason, &config, now).await?;
            if retired && let JobKey::BaseRun { task, .. } = key {
                self.take_base_runs(tx, &config, study, task, now).await?;
                self.finish_if_done(tx, study, now).await?;
            } else if retired && let JobKey::Replay { trajectory, .. } = key {
                // No replay could be carried out: no state is known to match the record, so no
                // continuation may run from it.
                let why = NonReplayable::no_outcome(format!(
                    "the replay had no outcome in {no_outcomes} attempts (last: {reason})"
                ));
                self.drop_non_replayable(tx, study, trajectory, &why, now).await?;
            } else if retired {
                self.finish_if_done(tx, study, now).await?;
            }
            return Ok(Reported::accepted(true));
        }
        bind_job(
            sqlx::query(concat!(
                "UPDATE jobs SET state = 'done', result_json = $6, done_ms = $7, worker = NULL, lease_expires_ms = NULL \
                 WHERE ",
                job_is!()
            )),
            key,
        )
        .bind(serde_json::to_string(report).map_err(corrupt)?)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        match (key, report) {
            (JobKey::Replay { trajectory, .. }, JobReport::Replayed(replayed)) => {
                sqlx::query("UPDATE trajectories SET state = 'running', replay_json = $1 WHERE study = $2 AND id = $3")
                    .bind(serde_json::to_string(replayed).map_err(corrupt)?)
                    .bind(study)
                    .bind(trajectory)
                    .execute(&mut **tx)
                    .await?;
                let (plan, counters) = locked.expect("locked above");
                self.replan(tx, &config, (study, trajectory, &plan), Some(counters), None, now).await?;
                Ok(Reported::accepted(true))
            }
            (JobKey::Replay { trajectory, .. }, JobReport::NonReplayable(why)) => {
                self.drop_non_replayable(tx, study, trajectory, why, now).await?;
                Ok(Reported::accepted(true))
            }
            (JobKey::BaseRun { task: subject, .. }, JobReport::Outcome(o)) => {
                let mut wakes = false;
                if vcurve_record::runner::runs_containers(&config.runner_kind) {
                    let payload = self.job_payload(tx, key).await?;
                    let (task, _) = config.base_run_of(subject);
                    let run = verdicts::RunOf { study, task, payload: payload.as_deref() };
                    wakes |= self.judge_run(tx, &config, run, o, now).await?;
                }
                wakes |= self.take_base_runs(tx, &config, study, subject, now).await? > 0;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(wakes))
            }
            (JobKey::Evaluation { task, patch_sha256, .. }, JobReport::Evaluated { resolved }) => {
                self.add_evaluation(tx, study, task, patch_sha256, *resolved, true).await?;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(false))
            }
            _ => {
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(false))
            }
        }
    }

    async fn worker_known(
        &self,
        tx: &mut Transaction<'_, Any>,
        worker: &str,
        now: i64,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let row = sqlx::query("UPDATE workers SET last_seen_ms = $1 WHERE id = $2 RETURNING capabilities")
            .bind(now)
            .bind(worker)
            .fetch_optional(&mut **tx)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let caps: String = row.try_get("capabilities")?;
        Ok(Some(caps.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()))
    }

    /// Put back every lease of either table that expired before `now`; how many.
    async fn expire_in(&self, tx: &mut Transaction<'_, Any>, now: i64) -> Result<u32, StoreError> {
        let expire = |table: &str| {
            format!(
                "UPDATE {table} SET state = 'pending', worker = NULL, lease_expires_ms = NULL \
                 WHERE state = 'leased' AND lease_expires_ms < $1"
            )
        };
        if self.backend == Backend::Postgres {
            // Both tables in one round trip: every lease runs this.
            let sql = format!(
                "WITH c AS ({} RETURNING 1), j AS ({} RETURNING 1) \
                 SELECT (SELECT COUNT(*) FROM c) + (SELECT COUNT(*) FROM j) AS n",
                expire("continuations"),
                expire("jobs")
            );
            let n: i64 = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).fetch_one(&mut **tx).await?.try_get("n")?;
            return Ok(u32::try_from(n).unwrap_or(u32::MAX));
        }
        let mut expired = 0;
        for table in ["continuations", "jobs"] {
            let sql = expire(table);
            expired += sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).execute(&mut **tx).await?.rows_affected() as u32;
        }
        Ok(expired)
    }
}

/// How many trajectories of `study` satisfy `condition` (a fixed SQL condition on their columns).
async fn count_trajectories(
    tx: &mut Transaction<'_, Any>,
    study: &str,
    condition: &'static str,
) -> Result<u32, StoreError> {
    let sql = format!("SELECT COUNT(*) AS n FROM trajectories WHERE study = $1 AND {condition}");
    let n: i64 = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).fetch_one(&mut **tx).await?.try_get("n")?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// Lease a claimed job of either table to `worker` under `attempt`, until `expires_ms`.
async fn mark_leased(
    tx: &mut Transaction<'_, Any>,
    key: &JobKey,
    attempt: u32,
    worker: &str,
    expires_ms: i64,
) -> Result<(), StoreError> {
    keyed(dispatch::MARK_LEASED, key).bind(i64::from(attempt)).bind(worker).bind(expires_ms).execute(&mut **tx).await?;
    Ok(())
}

/// Queue a job of `jobs` (not a continuation) unless it exists; returns whether it was new.
async fn insert_job(tx: &mut Transaction<'_, Any>, key: &JobKey, now: i64) -> Result<bool, StoreError> {
    let done = bind_job(
        sqlx::query(
            "INSERT INTO jobs (study, kind, subject, patch_sha256, seq, state, created_ms) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6) ON CONFLICT DO NOTHING",
        ),
        key,
    )
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Name the payload that carries a job's task (evaluations, base runs).
async fn set_job_payload(tx: &mut Transaction<'_, Any>, key: &JobKey, payload: Option<&str>) -> Result<(), StoreError> {
    bind_job(sqlx::query(concat!("UPDATE jobs SET payload_digest = $6 WHERE ", job_is!())), key)
        .bind(payload.map(str::to_string))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Keep a file by digest inside a transaction; returns whether it was new.
async fn insert_file(
    tx: &mut Transaction<'_, Any>,
    digest: &str,
    content: &[u8],
    now: i64,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO files (digest, size, content, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING",
    )
    .bind(digest)
    .bind(content.len() as i64)
    .bind(content.to_vec())
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The live workers (seen within the lease timeout) with the jobs each holds, by name.
async fn live_workers(
    conn: &mut sqlx::AnyConnection,
    now: i64,
    policy: LeasePolicy,
) -> Result<Vec<WorkerInfo>, StoreError> {
    sqlx::query(
        "SELECT w.id, w.name, w.slots, w.last_seen_ms, w.capabilities, \
         (SELECT COUNT(*) FROM continuations c WHERE c.worker = w.id AND c.state = 'leased') \
           + (SELECT COUNT(*) FROM jobs j WHERE j.worker = w.id AND j.state = 'leased') AS running \
         FROM workers w WHERE w.last_seen_ms >= $1 ORDER BY w.name, w.id",
    )
    .bind(now - policy.timeout_ms)
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|r| {
        Ok(WorkerInfo {
            id: r.try_get("id")?,
            name: r.try_get("name")?,
            slots: get_u32(r, "slots")?,
            running: get_u32(r, "running")?,
            last_seen_ms_ago: (now - r.try_get::<i64, _>("last_seen_ms")?).max(0) as u64,
            capabilities: r
                .try_get::<String, _>("capabilities")?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        })
    })
    .collect::<Result<Vec<_>, StoreError>>()
}

impl Store for SqlStore {
    async fn pending_by_stage(&self, study: &str) -> Result<Vec<(Stage, u64)>, StoreError> {
        sqlx::query(
            "SELECT t.stage AS stage, COUNT(*) AS n FROM continuations c \
             JOIN trajectories t ON t.study = c.study AND t.id = c.trajectory \
             WHERE c.study = $1 AND c.state = 'pending' GROUP BY t.stage",
        )
        .bind(study)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| Ok((stage_of(&r.try_get::<String, _>("stage")?)?, r.try_get::<i64, _>("n")?.max(0) as u64)))
        .collect()
    }

    async fn live_workers(&self, now: i64, policy: LeasePolicy) -> Result<Vec<WorkerInfo>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        live_workers(&mut conn, now, policy).await
    }

    async fn create_study(
        &self,
        spec: &StudySpec,
        payloads: &[TrajectoryPayload],
        now: i64,
    ) -> Result<String, StoreError> {
        if payloads.len() != spec.trajectories.len() {
            return Err(StoreError::Invalid(format!(
                "{} payloads for {} trajectories",
                payloads.len(),
                spec.trajectories.len()
            )));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let config = StudyConfig {
            params: spec.thresholds.clone(),
            schedule: spec.schedule.clone(),
            budget: spec.budget,
            seed: spec.seed,
            runner_kind: spec.runner.kind.clone(),
            runner_options: spec.runner.options.clone(),
            controls: spec.controls,
            admission: spec.admission,
            base_run_subjects: base_runs::base_run_subjects(spec),
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO studies (id, name, spec_json, config_json, runner_kind, state, created_ms, controls_at_launch) \
             VALUES ($1, $2, $3, $4, $5, 'running', $6, 1)",
        )
        .bind(&id)
        .bind(&spec.name)
        .bind(serde_json::to_string(spec).map_err(corrupt)?)
        .bind(serde_json::to_string(&config).map_err(corrupt)?)
        .bind(&spec.runner.kind)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let doomed: Vec<bool> = spec
            .trajectories
            .iter()
            .map(|t| {
                t.base_runs
                    .pass_rate()
                    .is_some_and(|p| vcurve_method::meets_at_most(p, spec.thresholds.doomed_threshold))
            })
            .collect();
        // Which trajectories carry which control is decided here, once, from the spec alone.
        let controls = planner::controls_at_launch(&doomed, &spec.controls);
        for (ord, (trajectory, payload)) in spec.trajectories.iter().zip(payloads).enumerate() {
            let plan = TrajectoryPlan {
                length: trajectory.length,
                labels: trajectory.labels.iter().filter_map(|l| l.step).collect(),
                controls: controls[ord],
            };
            let doomed = doomed[ord];
            let state = if doomed { TrajectoryState::Doomed } else { TrajectoryState::Waiting };
            let bytes = payload.canonical_bytes();
            let digest = vcurve_record::trajectory::sha256_hex(&bytes);
            insert_file(&mut tx, &digest, &bytes, now).await?;
            // The recorded run under its own digest too (the spec's `recorded`), for what reads
            // it without its payload: a restart check takes the run's task from it.
            if let Some(run) = &payload.recorded {
                insert_file(&mut tx, &run.digest(), &run.canonical_bytes(), now).await?;
            }
            sqlx::query(
                "INSERT INTO trajectories (study, id, ord, state, stage, stage_rank, plan_json, payload_digest, \
                 recorded_digest, task) VALUES ($1, $2, $3, $4, 'screen', 0, $5, $6, $7, $8)",
            )
            .bind(&id)
            .bind(&trajectory.id)
            .bind(ord as i64)
            .bind(state.as_str())
            .bind(serde_json::to_string(&plan).map_err(corrupt)?)
            .bind(&digest)
            .bind(trajectory.recorded.as_deref())
            .bind(&trajectory.task)
            .execute(&mut *tx)
            .await?;
        }
        self.queue_base_runs(&mut tx, &id, spec, now).await?;
        if doomed.iter().all(|&d| d) && spec.tasks.is_empty() {
            sqlx::query("UPDATE studies SET state = 'done', finished_ms = $1 WHERE id = $2")
                .bind(now)
                .bind(&id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    async fn register_worker(
        &self,
        name: &str,
        slots: u32,
        capabilities: &[String],
        now: i64,
    ) -> Result<String, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO workers (id, name, slots, capabilities, registered_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(&id)
        .bind(name)
        .bind(i64::from(slots))
        .bind(capabilities.join(","))
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(id)
    }

    async fn lease(
        &self,
        worker: &str,
        max: u32,
        now: i64,
        policy: LeasePolicy,
        locality: &Locality,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        let mut tx = self.pool.begin().await?;
        if let Some(registry) = &locality.registry {
            Self::record_pushed(&mut tx, registry, &locality.pushed, now).await?;
        }
        let Some(capabilities) = self.worker_known(&mut tx, worker, now).await? else {
            tx.commit().await?;
            return Ok(Vec::new());
        };
        self.expire_in(&mut tx, now).await?;
        self.admit(&mut tx, now, policy).await?;
        if max == 0 || capabilities.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let kinds: Vec<String> = capabilities;
        // Replays, evaluations and base runs first: a trajectory's curve waits on its replay.
        let mut jobs = self.claim_jobs(&mut tx, worker, max, &kinds, now, policy).await?;
        let left = max - jobs.len() as u32;
        if left > 0 {
            jobs.extend(
                self.claim_continuations(&mut tx, worker, left, &kinds, now + policy.timeout_ms, locality).await?,
            );
        }
        tx.commit().await?;
        Ok(jobs)
    }

    async fn heartbeat(
        &self,
        worker: &str,
        held: &[HeldJob],
        now: i64,
        policy: LeasePolicy,
    ) -> Result<HeartbeatVerdict, StoreError> {
        let mut tx = self.pool.begin().await?;
        if self.worker_known(&mut tx, worker, now).await?.is_none() {
            tx.commit().await?;
            return Ok(HeartbeatVerdict { revoked: held.to_vec(), unknown_worker: true });
        }
        let mut revoked = Vec::new();
        for job in held {
            let done = keyed(
                "UPDATE {table} SET lease_expires_ms = $6 WHERE {key} AND state = 'leased' AND attempt = $7 \
                 AND worker = $8 AND study IN (SELECT id FROM studies WHERE state = 'running')",
                &job.key,
            )
            .bind(now + policy.timeout_ms)
            .bind(i64::from(job.attempt))
            .bind(worker)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                revoked.push(job.clone());
            }
        }
        tx.commit().await?;
        Ok(HeartbeatVerdict { revoked, unknown_worker: false })
    }

    async fn report(&self, worker: &str, job: &HeldJob, report: &JobReport, now: i64) -> Result<Reported, StoreError> {
        if !report.fits(job.key.kind()) {
            return Err(StoreError::Invalid(format!("a {} job cannot report {report:?}", job.key.kind().as_str())));
        }
        let mut tx = self.pool.begin().await?;
        let reported = match &job.key {
            JobKey::Continuation(key) => self.report_continuation(&mut tx, key, job.attempt, report, now).await?,
            other => self.report_job(&mut tx, other, job.attempt, report, now).await?,
        };
        if reported.verdict == ReportVerdict::Accepted {
            tracing::debug!(worker, key = %job.key, attempt = job.attempt, "report recorded");
            tx.commit().await?;
        }
        Ok(reported)
    }

    async fn release(&self, worker: &str, held: &[HeldJob]) -> Result<u32, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut released = 0;
        for job in held {
            let done = keyed(
                "UPDATE {table} SET state = 'pending', worker = NULL, lease_expires_ms = NULL \
                 WHERE {key} AND state = 'leased' AND attempt = $6 AND worker = $7",
                &job.key,
            )
            .bind(i64::from(job.attempt))
            .bind(worker)
            .execute(&mut *tx)
            .await?;
            released += done.rows_affected() as u32;
        }
        tx.commit().await?;
        Ok(released)
    }

    async fn expire_leases(&self, now: i64) -> Result<u32, StoreError> {
        let mut tx = self.pool.begin().await?;
        let n = self.expire_in(&mut tx, now).await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn progress(&self, study: &str, now: i64, policy: LeasePolicy) -> Result<Progress, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT name, state, runner_kind, created_ms, finished_ms FROM studies WHERE id = $1")
            .bind(study)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.to_string()))?;
        let name: String = row.try_get("name")?;
        let state = StudyState::parse(&row.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))?;
        let runner_kind: String = row.try_get("runner_kind")?;
        let window = planner::ThroughputWindow::of(
            row.try_get("created_ms")?,
            row.try_get::<Option<i64>, _>("finished_ms")?,
            now,
        );
        // Counters kept by the transactions that create and finish continuations: no scan of the
        // study's continuations per poll.
        let mut by_state: HashMap<String, u32> = HashMap::new();
        let mut stages: std::collections::BTreeMap<Stage, u32> = Default::default();
        let mut admitted = 0;
        let (mut requested, mut done, mut retired, mut dropped) = (0u64, 0u64, 0u64, 0u64);
        for r in sqlx::query(
            "SELECT state, stage, admit_order, n_requested, n_done, n_retired, n_dropped FROM trajectories \
             WHERE study = $1",
        )
        .bind(study)
        .fetch_all(&mut *tx)
        .await?
        {
            let s: String = r.try_get("state")?;
            if r.try_get::<Option<i64>, _>("admit_order")?.is_some() {
                admitted += 1;
            }
            if s == "running" {
                *stages.entry(stage_of(&r.try_get::<String, _>("stage")?)?).or_default() += 1;
            }
            *by_state.entry(s).or_default() += 1;
            requested += r.try_get::<i64, _>("n_requested")? as u64;
            done += r.try_get::<i64, _>("n_done")? as u64;
            retired += r.try_get::<i64, _>("n_retired")? as u64;
            dropped += r.try_get::<i64, _>("n_dropped")? as u64;
        }
        // Bounded by the workers' slots, through a partial index.
        let running = sqlx::query("SELECT COUNT(*) AS n FROM continuations WHERE study = $1 AND state = 'leased'")
            .bind(study)
            .fetch_one(&mut *tx)
            .await?
            .try_get::<i64, _>("n")? as u64;
        let pending = requested.saturating_sub(done + retired + dropped + running);
        let trajectories: u32 = by_state.values().sum();
        let recent: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM continuations WHERE study = $1 AND done_ms >= $2 AND done_ms <= $3")
                .bind(study)
                .bind(window.start_ms)
                .bind(window.end_ms)
                .fetch_one(&mut *tx)
                .await?
                .try_get("n")?;
        let evaluation = if vcurve_record::runner::runs_containers(&runner_kind) {
            Some(self.verdict_totals(&mut *tx, study).await?)
        } else {
            None
        };
        let workers = live_workers(&mut tx, now, policy).await?;
        tx.commit().await?;
        let throughput_per_min = window.per_minute(recent as u64);
        let offered = workers.iter().any(|w| w.capabilities.contains(&runner_kind));
        let waiting_for_runner = (state == StudyState::Running && !offered).then_some(runner_kind);
        let waiting = by_state.get("waiting").copied().unwrap_or(0);
        let per_trajectory =
            if admitted > 0 { (done + running + pending + retired) as f64 / f64::from(admitted) } else { 300.0 };
        let remaining = (pending + running) as f64 + f64::from(waiting) * per_trajectory;
        let eta_seconds = match state {
            StudyState::Running if throughput_per_min > 0.0 => Some(remaining / (throughput_per_min / 60.0)),
            StudyState::Running => None,
            _ => Some(0.0),
        };
        Ok(Progress {
            study: study.to_string(),
            name,
            state,
            done,
            running,
            pending,
            retired,
            trajectories,
            trajectories_admitted: admitted,
            trajectories_done: by_state.get("done").copied().unwrap_or(0),
            trajectories_doomed: by_state.get("doomed").copied().unwrap_or(0),
            trajectories_non_replayable: by_state.get("non_replayable").copied().unwrap_or(0),
            stages: stages.into_iter().collect(),
            workers,
            throughput_per_min,
            eta_seconds,
            waiting_for_runner,
            lease_latency: None,
            evaluation,
        })
    }

    async fn list_studies(&self) -> Result<Vec<(String, String, StudyState)>, StoreError> {
        sqlx::query("SELECT id, name, state FROM studies ORDER BY created_ms DESC, id")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                let state =
                    StudyState::parse(&r.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))?;
                Ok((r.try_get("id")?, r.try_get("name")?, state))
            })
            .collect()
    }

    async fn study(&self, study: &str) -> Result<StudyRecord, StoreError> {
        self.collect_study(study, None).await
    }

    async fn restart_checks_of(&self, study: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, spec_json FROM studies WHERE state = 'done' AND spec_json LIKE '%\"restart_check\"%' \
             ORDER BY created_ms DESC, id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut checks = Vec::new();
        for r in &rows {
            let spec: StudySpec = serde_json::from_str(&r.try_get::<String, _>("spec_json")?).map_err(corrupt)?;
            if spec.restart_check.is_some_and(|c| c.of == study) {
                checks.push(r.try_get("id")?);
            }
        }
        Ok(checks)
    }

    async fn trajectory(&self, study: &str, trajectory: &str) -> Result<Option<StudyRecord>, StoreError> {
        let record = self.collect_study(study, Some(trajectory)).await?;
        Ok((!record.trajectories.is_empty()).then_some(record))
    }

    async fn cancel(&self, study: &str, now: i64) -> Result<StudyState, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE studies SET state = 'cancelled', finished_ms = $1 WHERE id = $2 AND state = 'running'")
            .bind(now)
            .bind(study)
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query("SELECT state FROM studies WHERE id = $1")
            .bind(study)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.to_string()))?;
        tx.commit().await?;
        StudyState::parse(&row.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))
    }

    async fn put_file(&self, digest: &str, content: &[u8], now: i64) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let new = insert_file(&mut tx, digest, content, now).await?;
        tx.commit().await?;
        Ok(new)
    }

    async fn missing_files(&self, digests: &[String]) -> Result<Vec<String>, StoreError> {
        let mut missing = Vec::new();
        for digest in digests {
            let found = sqlx::query("SELECT 1 AS one FROM files WHERE digest = $1")
                .bind(digest)
                .fetch_optional(&self.pool)
                .await?
                .is_some();
            if !found {
                missing.push(digest.clone());
            }
        }
        Ok(missing)
    }

    async fn file(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row =
            sqlx::query("SELECT content FROM files WHERE digest = $1").bind(digest).fetch_optional(&self.pool).await?;
        row.map(|r| r.try_get::<Vec<u8>, _>("content").map_err(StoreError::from)).transpose()
    }

    async fn verdict(&self, study: &str, task: &str, patch_sha256: &str) -> Result<Option<bool>, StoreError> {
        self.lookup_verdict(study, task, patch_sha256).await
    }

    async fn enqueue(&self, keys: &[JobKey], now: i64) -> Result<u32, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut new = 0;
        for key in keys {
            if !matches!(key, JobKey::Evaluation { .. } | JobKey::BaseRun { .. }) {
                return Err(StoreError::Invalid(format!(
                    "only evaluations and base runs are queued by hand; {key} is a {}",
                    key.kind().as_str()
                )));
            }
            let row = sqlx::query("SELECT state FROM studies WHERE id = $1")
                .bind(key.study())
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::UnknownStudy(key.study().to_string()))?;
            if row.try_get::<String, _>("state")? != "running" {
                return Err(StoreError::Invalid(format!("study {} is not running", key.study())));
            }
            new += u32::from(insert_job(&mut tx, key, now).await?);
        }
        tx.commit().await?;
        Ok(new)
    }

    async fn task_jobs(&self, study: &str) -> Result<Vec<TaskJob>, StoreError> {
        sqlx::query(
            "SELECT study, kind, subject, patch_sha256, seq, state, attempt, result_json, last_reason FROM jobs \
             WHERE study = $1 ORDER BY kind, subject, patch_sha256, seq",
        )
        .bind(study)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(TaskJob {
                key: job_key_of(r)?,
                state: r.try_get("state")?,
                attempt: get_u32(r, "attempt")?,
                result: json_column(r, "result_json")?,
                last_reason: r.try_get("last_reason")?,
            })
        })
        .collect()
    }

    async fn leased(&self) -> Result<Vec<(ContinuationKey, u32, String)>, StoreError> {
        sqlx::query(
            "SELECT study, trajectory, series, t, seed, attempt, worker FROM continuations WHERE state = 'leased' \
             ORDER BY study, trajectory, series, t, seed",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok((
                ContinuationKey {
                    study: r.try_get("study")?,
                    trajectory: r.try_get("trajectory")?,
                    series: series_of(&r.try_get::<String, _>("series")?)?,
                    t: get_u32(r, "t")?,
                    seed: get_u32(r, "seed")?,
                },
                get_u32(r, "attempt")?,
                r.try_get("worker")?,
            ))
        })
        .collect()
    }

    async fn study_parts(
        &self,
        study: &str,
        parts: tokio::sync::mpsc::Sender<super::StudyPart>,
    ) -> Result<(), StoreError> {
        self.send_study(study, None, &parts).await
    }
}
