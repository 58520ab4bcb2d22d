//! Leases: jobs of both tables claimed for a worker, extended by its heartbeats, given back,
//! expired.

use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::TrajectoryPlan;

use super::dispatch;
use super::handle::{Backend, SqlStore};
use super::rows::{corrupt, digest_column, get_u32, job_key_of, keyed, series_of};
use crate::model::{
    ContinuationKey, Digest, HeartbeatVerdict, HeldJob, JobKey, JobKind, LeasedJob, Locality, RegistrySnapshot,
};
use crate::store::api::{LeasePolicy, StoreError};

/// The nearest snapshot at `t` in `1 ..= $3` of payload `$2` in registry `$1`.
const NEAREST_SNAPSHOT: &str = "SELECT t, image_id FROM registry_snapshots WHERE registry = $1 AND payload_digest = $2 \
     AND t > 0 AND t <= $3 ORDER BY t DESC LIMIT 1";

/// Record a snapshot pushed to registry `$1`: payload `$2`, step `$3`, image `$4`, at `$5`.
const RECORD_PUSHED: &str = "INSERT INTO registry_snapshots (registry, payload_digest, t, image_id, pushed_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (registry, payload_digest, t) \
     DO UPDATE SET image_id = excluded.image_id, pushed_ms = excluded.pushed_ms";

/// Every leased continuation with its attempt and worker, in key order.
const LEASED: &str = "SELECT study, trajectory, series, t, seed, attempt, worker FROM continuations WHERE state = 'leased' \
     ORDER BY study, trajectory, series, t, seed";

/// Extend a lease of `{table}` (`{key}`, `$1 … $5`) to `$6`, while attempt `$7` of worker `$8` holds it in a running study.
const EXTEND_LEASE: &str = "UPDATE {table} SET lease_expires_ms = $6 WHERE {key} AND state = 'leased' AND attempt = $7 \
     AND worker = $8 AND study IN (SELECT id FROM studies WHERE state = 'running')";

/// Give back a lease of `{table}` (`{key}`, `$1 … $5`) held in attempt `$6` by worker `$7`.
const RELEASE: &str = "UPDATE {table} SET state = 'pending', worker = NULL, lease_expires_ms = NULL \
     WHERE {key} AND state = 'leased' AND attempt = $6 AND worker = $7";

impl SqlStore {
    /// `IN ($first, …)` over the runner kinds a worker offers.
    pub(super) fn kinds_in<T>(kinds: &[T], first: usize) -> String {
        let placeholders: Vec<String> = (0..kinds.len()).map(|i| format!("${}", i + first)).collect();
        format!("IN ({})", placeholders.join(", "))
    }

    /// Lease up to `max` pending replays, evaluations, base runs, sessions and model calls of
    /// running studies whose runner the worker offers (a model call: whose endpoint it offers).
    pub(super) async fn claim_jobs(
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
             WHERE j.state = 'pending' AND s.state = 'running' AND COALESCE(j.needs, s.runner_kind) {} \
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
            mark_leased(tx, &key, (attempt, worker), now, now + policy.timeout_ms).await?;
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
                runner: config.runner.clone(),
                study_seed: config.seed,
                trajectory_digest: digest_column(&row, "payload_digest")?,
                anchors,
                registry_snapshot: None,
                attempt,
                key,
            });
        }
        Ok(jobs)
    }

    /// Lease up to `max` pending continuations, trajectories in later stages first.
    pub(super) async fn claim_continuations(
        &self,
        tx: &mut Transaction<'_, Any>,
        worker: &str,
        max: u32,
        kinds: &[String],
        (now, expires_ms): (i64, i64),
        locality: &Locality,
    ) -> Result<Vec<LeasedJob>, StoreError> {
        // Locality: continuations of trajectories the worker holds snapshots of come first, then
        // those with a snapshot at or before their step in the worker's registry; the rest of the
        // order (and the limit) is unchanged, so no free slot waits on locality. Trajectories are
        // ranked first (`tr`): by the registry's snapshots of any step; then their continuations
        // (`top`, `c`) by those at or before each one's.
        let near = &locality.near;
        let held = |tr: &str| {
            (!near.is_empty()).then(|| format!("{tr}.payload_digest {}", Self::kinds_in(near, 2 + kinds.len())))
        };
        let in_registry = |tr: &str, at_or_before: &str| {
            locality.registry.as_ref().map(|_| {
                format!(
                    "EXISTS (SELECT 1 FROM registry_snapshots r WHERE r.registry = ${} \
                     AND r.payload_digest = {tr}.payload_digest{at_or_before})",
                    2 + kinds.len() + near.len()
                )
            })
        };
        let order = |held: Option<String>, in_registry: Option<String>| match (held, in_registry) {
            (None, None) => String::new(),
            (Some(held), None) => format!("CASE WHEN {held} THEN 0 ELSE 1 END, "),
            (None, Some(in_registry)) => format!("CASE WHEN {in_registry} THEN 1 ELSE 2 END, "),
            (Some(held), Some(in_registry)) => {
                format!("CASE WHEN {held} THEN 0 WHEN {in_registry} THEN 1 ELSE 2 END, ")
            }
        };
        let trajectories = order(held("tr"), in_registry("tr", ""));
        let continuations = order(held("top"), in_registry("top", " AND r.t <= c.t"));
        let sql = dispatch::claim(
            &Self::kinds_in(kinds, 2),
            &trajectories,
            &continuations,
            self.backend == Backend::Postgres,
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(i64::from(max));
        for k in
            kinds.iter().map(String::as_str).chain(near.iter().map(Digest::as_str)).chain(locality.registry.as_deref())
        {
            q = q.bind(k);
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
            let trajectory_digest = digest_column(&row, "payload_digest")?;
            let registry_snapshot = match (&locality.registry, &trajectory_digest) {
                (Some(registry), Some(digest)) => Self::registry_snapshot(tx, registry, digest, key.t).await?,
                _ => None,
            };
            let key = JobKey::Continuation(key);
            mark_leased(tx, &key, (attempt, worker), now, expires_ms).await?;
            jobs.push(LeasedJob {
                budget,
                runner: config.runner.clone(),
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
    pub(super) async fn registry_snapshot(
        tx: &mut Transaction<'_, Any>,
        registry: &str,
        digest: &Digest,
        t: u32,
    ) -> Result<Option<RegistrySnapshot>, StoreError> {
        let row = sqlx::query(NEAREST_SNAPSHOT)
            .bind(registry)
            .bind(digest.as_str())
            .bind(i64::from(t))
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|row| {
            Ok(RegistrySnapshot {
                trajectory_digest: digest.clone(),
                t: get_u32(&row, "t")?,
                image_id: row.try_get("image_id")?,
            })
        })
        .transpose()
    }

    /// Record snapshots pushed to `registry` (a push of a key already recorded replaces it).
    pub(super) async fn record_pushed(
        tx: &mut Transaction<'_, Any>,
        registry: &str,
        pushed: &[RegistrySnapshot],
        now: i64,
    ) -> Result<(), StoreError> {
        for p in pushed {
            sqlx::query(RECORD_PUSHED)
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

    /// Put back every lease of either table that expired before `now`; how many.
    pub(super) async fn expire_in(&self, tx: &mut Transaction<'_, Any>, now: i64) -> Result<u32, StoreError> {
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

/// Lease a claimed job of either table to `worker` under `attempt` at `now`, until `expires_ms`.
pub(super) async fn mark_leased(
    tx: &mut Transaction<'_, Any>,
    key: &JobKey,
    (attempt, worker): (u32, &str),
    now: i64,
    expires_ms: i64,
) -> Result<(), StoreError> {
    keyed(dispatch::MARK_LEASED, key)
        .bind(i64::from(attempt))
        .bind(worker)
        .bind(expires_ms)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn lease(
    store: &SqlStore,
    worker: &str,
    max: u32,
    now: i64,
    policy: LeasePolicy,
    locality: &Locality,
) -> Result<Vec<LeasedJob>, StoreError> {
    let mut tx = store.pool.begin().await?;
    if let Some(registry) = &locality.registry {
        SqlStore::record_pushed(&mut tx, registry, &locality.pushed, now).await?;
    }
    let Some(capabilities) = store.worker_known(&mut tx, worker, now).await? else {
        tx.commit().await?;
        return Ok(Vec::new());
    };
    store.expire_in(&mut tx, now).await?;
    store.admit(&mut tx, now, policy).await?;
    if max == 0 || capabilities.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let kinds: Vec<String> = capabilities;
    // Replays, evaluations and base runs first: a trajectory's curve waits on its replay.
    let mut jobs = store.claim_jobs(&mut tx, worker, max, &kinds, now, policy).await?;
    let left = max - jobs.len() as u32;
    if left > 0 {
        jobs.extend(
            store.claim_continuations(&mut tx, worker, left, &kinds, (now, now + policy.timeout_ms), locality).await?,
        );
    }
    tx.commit().await?;
    Ok(jobs)
}

pub(super) async fn heartbeat(
    store: &SqlStore,
    worker: &str,
    held: &[HeldJob],
    now: i64,
    policy: LeasePolicy,
) -> Result<HeartbeatVerdict, StoreError> {
    let mut tx = store.pool.begin().await?;
    if store.worker_known(&mut tx, worker, now).await?.is_none() {
        tx.commit().await?;
        return Ok(HeartbeatVerdict { revoked: held.to_vec(), unknown_worker: true });
    }
    let mut revoked = Vec::new();
    for job in held {
        let done = keyed(EXTEND_LEASE, &job.key)
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

pub(super) async fn release(store: &SqlStore, worker: &str, held: &[HeldJob]) -> Result<u32, StoreError> {
    let mut tx = store.pool.begin().await?;
    let mut released = 0;
    for job in held {
        let done = keyed(RELEASE, &job.key).bind(i64::from(job.attempt)).bind(worker).execute(&mut *tx).await?;
        released += done.rows_affected() as u32;
    }
    tx.commit().await?;
    Ok(released)
}

pub(super) async fn leased(store: &SqlStore) -> Result<Vec<(ContinuationKey, u32, String)>, StoreError> {
    sqlx::query(LEASED)
        .fetch_all(&store.pool)
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
