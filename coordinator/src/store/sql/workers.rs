//! Workers: their registration, their visits, and the live ones with the jobs they hold.

use sqlx::{Any, Row, Transaction};

use super::handle::SqlStore;
use super::rows::get_u32;
use crate::model::WorkerInfo;
use crate::store::api::{LeasePolicy, StoreError};

/// Record a visit of worker `$2` at `$1`; its capabilities (no row: an unknown worker).
const VISIT: &str = "UPDATE workers SET last_seen_ms = $1 WHERE id = $2 RETURNING capabilities";

/// The workers seen since `$1` with how many jobs of either table each holds, by name.
const LIVE_WORKERS: &str = "SELECT w.id, w.name, w.slots, w.last_seen_ms, w.capabilities, \
     (SELECT COUNT(*) FROM continuations c WHERE c.worker = w.id AND c.state = 'leased') \
     + (SELECT COUNT(*) FROM jobs j WHERE j.worker = w.id AND j.state = 'leased') AS running \
     FROM workers w WHERE w.last_seen_ms >= $1 ORDER BY w.name, w.id";

/// A new worker: `$1` id, `$2` name, `$3` slots, `$4` capabilities (comma-separated), `$5` now.
const REGISTER_WORKER: &str =
    "INSERT INTO workers (id, name, slots, capabilities, registered_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5, $5)";

impl SqlStore {
    pub(super) async fn worker_known(
        &self,
        tx: &mut Transaction<'_, Any>,
        worker: &str,
        now: i64,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let row = sqlx::query(VISIT).bind(now).bind(worker).fetch_optional(&mut **tx).await?;
        let Some(row) = row else { return Ok(None) };
        let caps: String = row.try_get("capabilities")?;
        Ok(Some(caps.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()))
    }
}

/// The live workers (seen within the lease timeout) with the jobs each holds, by name.
pub(super) async fn live_workers(
    conn: &mut sqlx::AnyConnection,
    now: i64,
    policy: LeasePolicy,
) -> Result<Vec<WorkerInfo>, StoreError> {
    sqlx::query(LIVE_WORKERS)
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

pub(super) async fn register_worker(
    store: &SqlStore,
    name: &str,
    slots: u32,
    capabilities: &[String],
    now: i64,
) -> Result<String, StoreError> {
    let id = uuid::Uuid::new_v4().to_string();
    sqlx::query(REGISTER_WORKER)
        .bind(&id)
        .bind(name)
        .bind(i64::from(slots))
        .bind(capabilities.join(","))
        .bind(now)
        .execute(&store.pool)
        .await?;
    Ok(id)
}
