//! Files kept by digest: payloads, recorded runs, problem statements, patches; and a client's
//! uploads for a launch, staged apart until a launch consumes them (migration 0008): a launch
//! keeps what its study references and drops the rest in its own transaction, a refused launch
//! drops them, and uploads no launch consumed are dropped after [`UPLOAD_TTL_MS`].

use sqlx::{Any, Row, Transaction};

use super::SqlStore;
use crate::store::StoreError;

/// Keep a file (`$1` digest, `$2` size, `$3` content, `$4` now) unless it is kept.
const INSERT_FILE: &str =
    "INSERT INTO files (digest, size, content, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING";

/// A row when the file `$1` is kept.
const HAS_FILE: &str = "SELECT 1 AS one FROM files WHERE digest = $1";

/// The content of the file `$1`.
const FILE_CONTENT: &str = "SELECT content FROM files WHERE digest = $1";

/// How long an upload no launch consumed is kept: long enough for a client to upload a spec's
/// files one after another and launch, short enough that uploads of clients that never launched
/// do not pile up. A launch whose uploads expired is refused as not uploaded, and the client
/// uploads them again.
pub const UPLOAD_TTL_MS: i64 = 3_600_000;

/// Stage an upload (`$1` digest, `$2` size, `$3` content, `$4` now), or refresh one staged.
const INSERT_UPLOAD: &str = "INSERT INTO uploads (digest, size, content, created_ms) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (digest) DO UPDATE SET created_ms = excluded.created_ms";

/// Drop the uploads staged before `$1`.
const DROP_EXPIRED_UPLOADS: &str = "DELETE FROM uploads WHERE created_ms < $1";

/// A row when an upload `$1` is staged.
const HAS_UPLOAD: &str = "SELECT 1 AS one FROM uploads WHERE digest = $1";

/// The content of the upload `$1`.
const UPLOAD_CONTENT: &str = "SELECT content FROM uploads WHERE digest = $1";

/// Keep the upload `$1` as a file at `$2` unless it is kept (the content is copied inside the
/// database). SQLite needs the `WHERE` to read `ON CONFLICT` as the upsert's.
const KEEP_UPLOAD: &str = "INSERT INTO files (digest, size, content, created_ms) \
     SELECT digest, size, content, $2 FROM uploads WHERE digest = $1 ON CONFLICT (digest) DO NOTHING";

/// Drop the upload `$1`.
const DROP_UPLOAD: &str = "DELETE FROM uploads WHERE digest = $1";

/// Keep a file by digest inside a transaction; returns whether it was new.
pub(super) async fn insert_file(
    tx: &mut Transaction<'_, Any>,
    digest: &str,
    content: &[u8],
    now: i64,
) -> Result<bool, StoreError> {
    let done = sqlx::query(INSERT_FILE)
        .bind(digest)
        .bind(content.len() as i64)
        .bind(content)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn put_file(store: &SqlStore, digest: &str, content: &[u8], now: i64) -> Result<bool, StoreError> {
    let mut tx = store.pool.begin().await?;
    let new = insert_file(&mut tx, digest, content, now).await?;
    tx.commit().await?;
    Ok(new)
}

/// The digests a launch could not read: neither kept nor staged.
pub(super) async fn missing_files(store: &SqlStore, digests: &[String]) -> Result<Vec<String>, StoreError> {
    let mut missing = Vec::new();
    for digest in digests {
        let found = sqlx::query(HAS_FILE).bind(digest).fetch_optional(&store.pool).await?.is_some()
            || sqlx::query(HAS_UPLOAD).bind(digest).fetch_optional(&store.pool).await?.is_some();
        if !found {
            missing.push(digest.clone());
        }
    }
    Ok(missing)
}

/// Stage a client's upload for a launch (checked by the caller), dropping expired uploads; returns
/// whether it was new (an upload of a kept file is not staged: the launch reads the kept one).
pub(super) async fn stage_upload(
    store: &SqlStore,
    digest: &str,
    content: Vec<u8>,
    now: i64,
) -> Result<bool, StoreError> {
    let mut tx = store.pool.begin().await?;
    sqlx::query(DROP_EXPIRED_UPLOADS).bind(now - UPLOAD_TTL_MS).execute(&mut *tx).await?;
    let new = if sqlx::query(HAS_FILE).bind(digest).fetch_optional(&mut *tx).await?.is_some() {
        false
    } else {
        let staged = sqlx::query(HAS_UPLOAD).bind(digest).fetch_optional(&mut *tx).await?.is_some();
        let size = content.len() as i64;
        sqlx::query(INSERT_UPLOAD).bind(digest).bind(size).bind(content).bind(now).execute(&mut *tx).await?;
        !staged
    };
    tx.commit().await?;
    Ok(new)
}

/// What a launch reads for a digest its spec names: a staged upload, or a kept file.
pub(super) async fn launch_file(store: &SqlStore, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
    if let Some(row) = sqlx::query(UPLOAD_CONTENT).bind(digest).fetch_optional(&store.pool).await? {
        return Ok(Some(row.try_get::<Vec<u8>, _>("content")?));
    }
    file(store, digest).await
}

/// Keep the staged upload `digest` as a file (unless a file of that digest is kept already),
/// inside a transaction, without reading it; an error if there is neither.
pub(super) async fn keep_upload(tx: &mut Transaction<'_, Any>, digest: &str, now: i64) -> Result<(), StoreError> {
    sqlx::query(KEEP_UPLOAD).bind(digest).bind(now).execute(&mut **tx).await?;
    if sqlx::query(HAS_FILE).bind(digest).fetch_optional(&mut **tx).await?.is_none() {
        return Err(StoreError::NotUploaded(digest.to_string()));
    }
    Ok(())
}

/// Drop the staged uploads `digests` (those a launch read), inside a transaction.
pub(super) async fn drop_uploads(tx: &mut Transaction<'_, Any>, digests: &[String]) -> Result<(), StoreError> {
    for digest in digests {
        sqlx::query(DROP_UPLOAD).bind(digest).execute(&mut **tx).await?;
    }
    Ok(())
}

/// Drop the staged uploads `digests` (those a refused launch read).
pub(super) async fn discard_uploads(store: &SqlStore, digests: &[String]) -> Result<(), StoreError> {
    let mut tx = store.pool.begin().await?;
    drop_uploads(&mut tx, digests).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(any(test, feature = "test-support"))]
impl SqlStore {
    /// How many rows a table of the store has, for tests that check what a refusal left behind.
    pub async fn rows(&self, table: &str) -> Result<i64, StoreError> {
        const TABLES: &[&str] = &["studies", "trajectories", "jobs", "continuations", "files", "uploads"];
        if !TABLES.contains(&table) {
            return Err(StoreError::Invalid(format!("{table:?} is not one of the tables {TABLES:?}")));
        }
        let sql = format!("SELECT COUNT(*) AS n FROM {table}");
        Ok(sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_one(&self.pool).await?.try_get("n")?)
    }
}

pub(super) async fn file(store: &SqlStore, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let row = sqlx::query(FILE_CONTENT).bind(digest).fetch_optional(&store.pool).await?;
    row.map(|r| r.try_get::<Vec<u8>, _>("content").map_err(StoreError::from)).transpose()
}
