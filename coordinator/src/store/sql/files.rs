//! Files kept by digest: payloads, recorded runs, patches.

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
        .bind(content.to_vec())
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

pub(super) async fn missing_files(store: &SqlStore, digests: &[String]) -> Result<Vec<String>, StoreError> {
    let mut missing = Vec::new();
    for digest in digests {
        let found = sqlx::query(HAS_FILE).bind(digest).fetch_optional(&store.pool).await?.is_some();
        if !found {
            missing.push(digest.clone());
        }
    }
    Ok(missing)
}

pub(super) async fn file(store: &SqlStore, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let row = sqlx::query(FILE_CONTENT).bind(digest).fetch_optional(&store.pool).await?;
    row.map(|r| r.try_get::<Vec<u8>, _>("content").map_err(StoreError::from)).transpose()
}
