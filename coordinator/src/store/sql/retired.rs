//! The jobs a study retired, of every kind, with the reasons of their last no-outcomes: what
//! `vcurve status`, the export and the report show, so that no job disappears unseen.

use sqlx::Row;
use vcurve_record::jobs::{JobKind, RetiredJobs};

use super::rows::corrupt;
use crate::store::api::StoreError;

/// The retired continuations of study `$1` by the reason of their last no-outcome (through the
/// index on `(state, study)`).
const RETIRED_CONTINUATIONS: &str = "SELECT last_reason, COUNT(*) AS n FROM continuations \
     WHERE state = 'retired' AND study = $1 GROUP BY last_reason";

/// The retired replays, evaluations and base runs of study `$1` by kind and reason.
const RETIRED_JOBS: &str = "SELECT kind, last_reason, COUNT(*) AS n FROM jobs WHERE state = 'retired' AND study = $1 GROUP BY kind, last_reason";

/// Study `study`'s retired jobs by kind, in [`JobKind`]'s order; only the kinds with one.
pub(super) async fn retired_jobs(conn: &mut sqlx::AnyConnection, study: &str) -> Result<Vec<RetiredJobs>, StoreError> {
    let mut by_kind: std::collections::BTreeMap<JobKind, Vec<(Option<String>, u64)>> = Default::default();
    for r in sqlx::query(RETIRED_CONTINUATIONS).bind(study).fetch_all(&mut *conn).await? {
        let n = r.try_get::<i64, _>("n")?.max(0) as u64;
        by_kind.entry(JobKind::Continuation).or_default().push((r.try_get("last_reason")?, n));
    }
    for r in sqlx::query(RETIRED_JOBS).bind(study).fetch_all(&mut *conn).await? {
        let kind = match r.try_get::<String, _>("kind")?.as_str() {
            "replay" => JobKind::Replay,
            "evaluation" => JobKind::Evaluation,
            "base_run" => JobKind::BaseRun,
            "session" => JobKind::Session,
            "model_call" => JobKind::ModelCall,
            other => return Err(corrupt(format!("job kind {other:?}"))),
        };
        let n = r.try_get::<i64, _>("n")?.max(0) as u64;
        by_kind.entry(kind).or_default().push((r.try_get("last_reason")?, n));
    }
    Ok(by_kind.into_iter().filter_map(|(kind, reasons)| RetiredJobs::of(kind, reasons)).collect())
}
