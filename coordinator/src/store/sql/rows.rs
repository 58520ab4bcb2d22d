//! Row decoding and key binding, shared by every capability of the store, and the count of a
//! study's trajectories in some state.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::{Outcome, Series, Stage};

use crate::model::{ContinuationKey, Digest, JobKey};
use crate::store::api::StoreError;

pub(super) type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>;

/// Bind a continuation key as `$1 … $5` (see [`key_is!`]).
pub(super) fn bind_key<'q>(query: AnyQuery<'q>, key: &ContinuationKey) -> AnyQuery<'q> {
    query
        .bind(key.study.clone())
        .bind(key.trajectory.clone())
        .bind(key.series.as_str())
        .bind(i64::from(key.t))
        .bind(i64::from(key.seed))
}

/// A row of `jobs`: `(study, kind, subject, patch_sha256, seq)`.
pub(super) fn job_row(key: &JobKey) -> Option<(String, &'static str, String, String, i64)> {
    Some(match key {
        JobKey::Continuation(_) => return None,
        JobKey::Replay { study, trajectory } => (study.clone(), "replay", trajectory.clone(), String::new(), 0),
        JobKey::Evaluation { study, task, patch_sha256, round } => {
            (study.clone(), "evaluation", task.clone(), patch_sha256.clone(), i64::from(*round))
        }
        JobKey::BaseRun { study, task, seed } => {
            (study.clone(), "base_run", task.clone(), String::new(), i64::from(*seed))
        }
        JobKey::Session { study, task } => (study.clone(), "session", task.clone(), String::new(), 0),
        JobKey::ModelCall { study, call } => (study.clone(), "model_call", call.clone(), String::new(), 0),
    })
}

/// The key of a row of `jobs`.
pub(super) fn job_key_of(row: &AnyRow) -> Result<JobKey, StoreError> {
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
        "session" => JobKey::Session { study, task: subject },
        "model_call" => JobKey::ModelCall { study, call: subject },
        other => return Err(corrupt(format!("unknown job kind {other:?}"))),
    })
}

/// Where a held job lives: its table, the condition selecting it, and the query with the key
/// bound as `$1 … $5`. `sql` is the statement with `{table}` and `{key}` placeholders.
pub(super) fn keyed<'q>(sql: &str, key: &JobKey) -> AnyQuery<'q> {
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
pub(super) fn bind_job<'q>(query: AnyQuery<'q>, key: &JobKey) -> AnyQuery<'q> {
    let (study, kind, subject, patch, seq) = job_row(key).expect("not a continuation");
    query.bind(study).bind(kind).bind(subject).bind(patch).bind(seq)
}

pub(super) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

pub(super) fn get_u32(row: &AnyRow, column: &str) -> Result<u32, StoreError> {
    let v: i64 = row.try_get(column)?;
    u32::try_from(v).map_err(|_| corrupt(format!("{column} = {v} out of range")))
}

pub(super) fn series_of(s: &str) -> Result<Series, StoreError> {
    Series::parse(s).ok_or_else(|| corrupt(format!("unknown series {s:?}")))
}

pub(super) fn stage_of(s: &str) -> Result<Stage, StoreError> {
    Stage::parse(s).ok_or_else(|| corrupt(format!("unknown stage {s:?}")))
}

/// A nullable column of digests.
pub(super) fn digest_column(row: &AnyRow, column: &str) -> Result<Option<Digest>, StoreError> {
    row.try_get::<Option<String>, _>(column)?
        .map(|d| Digest::try_from(d).map_err(|e| corrupt(format!("{column}: {e}"))))
        .transpose()
}

/// A nullable JSON column.
pub(super) fn json_column<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> Result<Option<T>, StoreError> {
    row.try_get::<Option<String>, _>(column)?
        .map(|json| serde_json::from_str(&json).map_err(|e| corrupt(format!("{column}: {e}"))))
        .transpose()
}

/// The outcome a finished continuation row holds.
pub(super) fn outcome_of(row: &AnyRow) -> Result<Outcome, StoreError> {
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

/// How many trajectories of `study` satisfy `condition` (a fixed SQL condition on their columns).
pub(super) async fn count_trajectories(
    tx: &mut Transaction<'_, Any>,
    study: &str,
    condition: &'static str,
) -> Result<u32, StoreError> {
    let sql = format!("SELECT COUNT(*) AS n FROM trajectories WHERE study = $1 AND {condition}");
    let n: i64 = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).fetch_one(&mut **tx).await?.try_get("n")?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}
