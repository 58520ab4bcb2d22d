//! What the benches measure of the store, through the store (`vcurve bench memory`, `vcurve bench
//! dispatch --pgbench`): the size of its tables, a scratch database, and the synthetic rows the
//! dispatch bench's pgbench script runs the store's own statements on. Kept here so that no
//! bench knows the store's tables.

use sqlx::{Connection as _, Row as _};

use super::handle::SqlStore;
use crate::store::api::StoreError;

/// The size in bytes of the store's tables on PostgreSQL (with their indexes and TOAST), as
/// `pg_total_relation_size` counts them; `None` on SQLite, whose size is its files'.
const TABLE_BYTES: &str = "SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) AS n FROM pg_class c \
     JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = current_schema() AND c.relkind = 'r'";

/// The bench's one running study.
const BENCH_STUDY: &str = "INSERT INTO studies (id, name, spec_json, config_json, runner_kind, state, created_ms) \
     VALUES ('pgbench', 'pgbench', '{}', '{}', 'synthetic', 'running', 0)";

/// `$1` running trajectories of the bench's study.
const BENCH_TRAJECTORIES: &str = "INSERT INTO trajectories (study, id, ord, state, stage, stage_rank, admit_order, plan_json, payload_digest) \
     SELECT 'pgbench', 't' || lpad(CAST(g AS TEXT), 6, '0'), g, 'running', 'screen', 0, g, '{}', 'pgbench' \
     FROM generate_series(0, CAST($1 AS BIGINT) - 1) AS g";

/// `$1` pending continuations, `$2` to a trajectory.
const BENCH_CONTINUATIONS: &str = "INSERT INTO continuations (study, trajectory, series, t, seed, state, created_ms) \
     SELECT 'pgbench', 't' || lpad(CAST(g / $2 AS TEXT), 6, '0'), 'main', g % $2, 0, 'pending', 0 \
     FROM generate_series(0, CAST($1 AS BIGINT) - 1) AS g";

const DONE_CONTINUATIONS: &str = "SELECT COUNT(*) FROM continuations WHERE state = 'done'";

impl SqlStore {
    /// The size in bytes of the store's tables on PostgreSQL; `None` on SQLite (its database
    /// file and write-ahead log are its size).
    pub async fn postgres_table_bytes(&self) -> Result<Option<u64>, StoreError> {
        if self.backend != super::handle::Backend::Postgres {
            return Ok(None);
        }
        let row = sqlx::query(TABLE_BYTES).fetch_one(&self.pool).await?;
        Ok(Some(row.try_get::<i64, _>("n")?.max(0) as u64))
    }

    /// For the dispatch bench, on a fresh PostgreSQL database: one running study `pgbench` with
    /// `rows` pending continuations, `per_trajectory` to a trajectory, and fresh statistics.
    pub async fn fill_dispatch_bench(&self, rows: u64, per_trajectory: u64) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        let trajectories = rows.div_ceil(per_trajectory).max(1) as i64;
        sqlx::query(BENCH_STUDY).execute(&mut *conn).await?;
        sqlx::query(BENCH_TRAJECTORIES).bind(trajectories).execute(&mut *conn).await?;
        sqlx::query(BENCH_CONTINUATIONS).bind(rows as i64).bind(per_trajectory as i64).execute(&mut *conn).await?;
        sqlx::query("ANALYZE").execute(&mut *conn).await?;
        Ok(())
    }

    /// How many continuations are done, in every study.
    pub async fn count_done_continuations(&self) -> Result<u64, StoreError> {
        let done: i64 = sqlx::query_scalar(DONE_CONTINUATIONS).fetch_one(&self.pool).await?;
        Ok(done.max(0) as u64)
    }
}

/// A fresh database on a PostgreSQL server, for a bench: created with [`ScratchDatabase::create`],
/// dropped with [`ScratchDatabase::drop_now`].
pub struct ScratchDatabase {
    admin: String,
    name: String,
    url: String,
}

/// Why a scratch database could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error("cannot connect: {0}")]
    Connect(sqlx::Error),
    #[error("cannot create a database (the user needs CREATEDB): {0}")]
    Create(sqlx::Error),
    #[error("not a postgres:// URL ending in /DATABASE")]
    Url,
}

impl ScratchDatabase {
    /// A new database `vcurve_<prefix>_<uuid>` on the server of `admin_url`.
    pub async fn create(admin_url: &str, prefix: &str) -> Result<ScratchDatabase, ScratchError> {
        sqlx::any::install_default_drivers();
        let (base, rest) = admin_url.rsplit_once('/').ok_or(ScratchError::Url)?;
        let mut conn = sqlx::AnyConnection::connect(admin_url).await.map_err(ScratchError::Connect)?;
        let name = format!("vcurve_{prefix}_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .map_err(ScratchError::Create)?;
        let query = rest.split_once('?').map(|(_, q)| format!("?{q}")).unwrap_or_default();
        Ok(ScratchDatabase { admin: admin_url.to_string(), url: format!("{base}/{name}{query}"), name })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Drop it (best effort: a server that went away keeps it).
    pub async fn drop_now(&self) {
        if let Ok(mut conn) = sqlx::AnyConnection::connect(&self.admin).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)))
                .execute(&mut conn)
                .await;
        }
    }
}
