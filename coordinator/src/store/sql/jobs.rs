//! The jobs of the `jobs` table (replays, evaluations, base runs): queued, named a payload, listed.

use sqlx::{Any, Row, Transaction};

use super::handle::SqlStore;
use super::rows::{bind_job, get_u32, job_key_of, json_column};
use crate::model::{JobKey, TaskJob};
use crate::store::api::StoreError;

/// Name the payload `$6` of a job of `jobs` (`$1 … $5` its key).
const SET_JOB_PAYLOAD: &str = concat!("UPDATE jobs SET payload_digest = $6 WHERE ", job_is!());

/// Queue a job of `jobs` (`$1 … $5` its key) at `$6` unless it exists.
const INSERT_JOB: &str = "INSERT INTO jobs (study, kind, subject, patch_sha256, seq, state, created_ms) \
     VALUES ($1, $2, $3, $4, $5, 'pending', $6) ON CONFLICT DO NOTHING";

/// The state of study `$1`.
const STUDY_STATE: &str = "SELECT state FROM studies WHERE id = $1";

/// The jobs of study `$1` with their state and result, in key order.
const TASK_JOBS: &str = "SELECT study, kind, subject, patch_sha256, seq, state, attempt, result_json, last_reason FROM jobs \
     WHERE study = $1 ORDER BY kind, subject, patch_sha256, seq";

/// Queue a job of `jobs` (not a continuation) unless it exists; returns whether it was new.
pub(super) async fn insert_job(tx: &mut Transaction<'_, Any>, key: &JobKey, now: i64) -> Result<bool, StoreError> {
    let done = bind_job(sqlx::query(INSERT_JOB), key).bind(now).execute(&mut **tx).await?;
    Ok(done.rows_affected() > 0)
}

/// Name the payload that carries a job's task (evaluations, base runs).
pub(super) async fn set_job_payload(
    tx: &mut Transaction<'_, Any>,
    key: &JobKey,
    payload: Option<&str>,
) -> Result<(), StoreError> {
    bind_job(sqlx::query(SET_JOB_PAYLOAD), key).bind(payload.map(str::to_string)).execute(&mut **tx).await?;
    Ok(())
}

pub(super) async fn enqueue(store: &SqlStore, keys: &[JobKey], now: i64) -> Result<u32, StoreError> {
    let mut tx = store.pool.begin().await?;
    let mut new = 0;
    for key in keys {
        if !matches!(key, JobKey::Evaluation { .. } | JobKey::BaseRun { .. }) {
            return Err(StoreError::Invalid(format!(
                "only evaluations and base runs are queued by hand; {key} is a {}",
                key.kind().as_str()
            )));
        }
        let row = sqlx::query(STUDY_STATE)
            .bind(key.study())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(key.study().into()))?;
        if row.try_get::<String, _>("state")? != "running" {
            return Err(StoreError::Invalid(format!("study {} is not running", key.study())));
        }
        new += u32::from(insert_job(&mut tx, key, now).await?);
    }
    tx.commit().await?;
    Ok(new)
}

pub(super) async fn task_jobs(store: &SqlStore, study: &str) -> Result<Vec<TaskJob>, StoreError> {
    sqlx::query(TASK_JOBS)
        .bind(study)
        .fetch_all(&store.pool)
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
