//! Files kept by digest: payloads, recorded runs, problem statements, patches; and a client's
//! uploads for a launch (migration 0008), received in pieces, stored as they arrive and held
//! apart until a launch consumes them: a launch keeps what its study references and drops the
//! rest in its own transaction, a refused launch drops them, and uploads no launch consumed are
//! dropped after [`UPLOAD_TTL_MS`]. A file kept from an upload stays in its pieces
//! (`file_pieces`), which workers are sent one at a time; the others are whole in `content`.

use sqlx::{Any, AnyConnection, Row, Transaction};

use vcurve_record::Digest;

use super::handle::SqlStore;
use crate::store::api::StoreError;

/// Keep a file (`$1` digest, `$2` size, `$3` content, `$4` now) unless it is kept.
const INSERT_FILE: &str =
    "INSERT INTO files (digest, size, content, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING";

/// A row when the file `$1` is kept.
const HAS_FILE: &str = "SELECT 1 AS one FROM files WHERE digest = $1";

/// The content of the file `$1`, and its number of pieces (0: whole in `content`).
const FILE_CONTENT: &str = "SELECT content, pieces FROM files WHERE digest = $1";

/// The number of pieces of the file `$1`.
const FILE_PIECES: &str = "SELECT pieces FROM files WHERE digest = $1";

/// Piece `$2` of the file `$1`.
const FILE_PIECE: &str = "SELECT data FROM file_pieces WHERE digest = $1 AND seq = $2";

/// Every piece of the file `$1`, in order.
const ALL_FILE_PIECES: &str = "SELECT data FROM file_pieces WHERE digest = $1 ORDER BY seq";

/// How long an upload no launch consumed is kept: long enough for a client to upload a spec's
/// files one after another and launch, short enough that uploads of clients that never launched
/// do not pile up. A launch whose uploads expired is refused as not uploaded, and the client
/// uploads them again.
pub const UPLOAD_TTL_MS: i64 = 3_600_000;

/// A new upload (`$1` id, `$2` digest, `$3` size, `$4` now), its pieces to come.
const BEGIN_UPLOAD: &str = "INSERT INTO uploads (id, digest, size, created_ms) VALUES ($1, $2, $3, $4)";

/// Piece `$2` of the upload `$1`.
const INSERT_UPLOAD_PIECE: &str = "INSERT INTO upload_pieces (upload, seq, data) VALUES ($1, $2, $3)";

/// The pieces of the uploads begun before `$1`, and those uploads.
const DROP_EXPIRED_UPLOAD_PIECES: &str =
    "DELETE FROM upload_pieces WHERE upload IN (SELECT id FROM uploads WHERE created_ms < $1)";
const DROP_EXPIRED_UPLOADS: &str = "DELETE FROM uploads WHERE created_ms < $1";

/// The digest of the upload `$1`.
const UPLOAD_DIGEST: &str = "SELECT digest FROM uploads WHERE id = $1";

/// The complete upload of the file `$1`.
const COMPLETE_UPLOAD_OF: &str = "SELECT id, pieces FROM uploads WHERE digest = $1 AND complete = 1";

/// Mark the upload `$1` complete with `$2` pieces at `$3`.
const COMPLETE_UPLOAD: &str = "UPDATE uploads SET complete = 1, pieces = $2, created_ms = $3 WHERE id = $1";

/// Keep the upload `$1` until `$2` + the time to live.
const REFRESH_UPLOAD: &str = "UPDATE uploads SET created_ms = $2 WHERE id = $1";

/// The pieces of the upload `$1`, in order.
const UPLOAD_PIECES: &str = "SELECT data FROM upload_pieces WHERE upload = $1 ORDER BY seq";

/// Drop the upload `$1`: its pieces, then itself.
const DROP_UPLOAD_PIECES: &str = "DELETE FROM upload_pieces WHERE upload = $1";
const DROP_UPLOAD: &str = "DELETE FROM uploads WHERE id = $1";

/// Keep the complete upload of `$1` as a file at `$2`, in its pieces (`$3`: the empty content),
/// unless the file is kept. SQLite needs the `WHERE` to read `ON CONFLICT` as the upsert's.
const KEEP_UPLOAD: &str = "INSERT INTO files (digest, size, content, created_ms, pieces) \
     SELECT digest, size, $3, $2, pieces FROM uploads WHERE digest = $1 AND complete = 1 ON CONFLICT (digest) DO NOTHING";

/// The pieces of the complete upload of `$1`, as the pieces of the file `$1`.
const KEEP_UPLOAD_PIECES: &str = "INSERT INTO file_pieces (digest, seq, data) \
     SELECT u.digest, p.seq, p.data FROM upload_pieces p JOIN uploads u ON u.id = p.upload \
     WHERE u.digest = $1 AND u.complete = 1";

/// Keep a file by digest inside a transaction; returns whether it was new.
pub(super) async fn insert_file(
    tx: &mut Transaction<'_, Any>,
    digest: &Digest,
    content: &[u8],
    now: i64,
) -> Result<bool, StoreError> {
    let done = sqlx::query(INSERT_FILE)
        .bind(digest.as_str())
        .bind(content.len() as i64)
        .bind(content)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn put_file(store: &SqlStore, digest: &Digest, content: &[u8], now: i64) -> Result<bool, StoreError> {
    let mut tx = store.pool.begin().await?;
    let new = insert_file(&mut tx, digest, content, now).await?;
    tx.commit().await?;
    Ok(new)
}

/// The digests a launch could not read: neither kept nor uploaded whole.
pub(super) async fn missing_files(store: &SqlStore, digests: &[Digest]) -> Result<Vec<Digest>, StoreError> {
    let mut missing = Vec::new();
    for digest in digests {
        let found = sqlx::query(HAS_FILE).bind(digest.as_str()).fetch_optional(&store.pool).await?.is_some()
            || sqlx::query(COMPLETE_UPLOAD_OF).bind(digest.as_str()).fetch_optional(&store.pool).await?.is_some();
        if !found {
            missing.push(digest.clone());
        }
    }
    Ok(missing)
}

/// The file `digest`, whole, read on `conn` (a transaction's, or the pool's).
pub(super) async fn read_file(conn: &mut AnyConnection, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(row) = sqlx::query(FILE_CONTENT).bind(digest.as_str()).fetch_optional(&mut *conn).await? else {
        return Ok(None);
    };
    if row.try_get::<i64, _>("pieces")? == 0 {
        return Ok(Some(row.try_get("content")?));
    }
    let pieces = sqlx::query(ALL_FILE_PIECES).bind(digest.as_str()).fetch_all(&mut *conn).await?;
    joined(&pieces).map(Some)
}

/// The `data` of `rows`, one after another.
fn joined(rows: &[sqlx::any::AnyRow]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        out.extend_from_slice(&row.try_get::<Vec<u8>, _>("data")?);
    }
    Ok(out)
}

pub(super) async fn file(store: &SqlStore, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    read_file(&mut conn, digest).await
}

/// How the file `digest` is kept: `None` if it is not, 0 whole, `n` in `n` pieces.
pub(super) async fn file_pieces(store: &SqlStore, digest: &Digest) -> Result<Option<u32>, StoreError> {
    let row = sqlx::query(FILE_PIECES).bind(digest.as_str()).fetch_optional(&store.pool).await?;
    row.map(|r| super::rows::get_u32(&r, "pieces")).transpose()
}

/// Piece `seq` of the file `digest` kept in pieces.
pub(super) async fn file_piece(store: &SqlStore, digest: &Digest, seq: u32) -> Result<Option<Vec<u8>>, StoreError> {
    let row = sqlx::query(FILE_PIECE).bind(digest.as_str()).bind(i64::from(seq)).fetch_optional(&store.pool).await?;
    row.map(|r| r.try_get::<Vec<u8>, _>("data").map_err(StoreError::from)).transpose()
}

/// Begin a client's upload of the file `digest` of `size` bytes, dropping expired uploads; its id.
pub(super) async fn begin_upload(store: &SqlStore, digest: &Digest, size: u64, now: i64) -> Result<String, StoreError> {
    let id = uuid::Uuid::new_v4().to_string();
    let mut tx = store.pool.begin().await?;
    sqlx::query(DROP_EXPIRED_UPLOAD_PIECES).bind(now - UPLOAD_TTL_MS).execute(&mut *tx).await?;
    sqlx::query(DROP_EXPIRED_UPLOADS).bind(now - UPLOAD_TTL_MS).execute(&mut *tx).await?;
    let size = i64::try_from(size).map_err(|_| StoreError::Invalid(format!("an upload of {size} bytes")))?;
    sqlx::query(BEGIN_UPLOAD).bind(&id).bind(digest.as_str()).bind(size).bind(now).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(id)
}

/// Store piece `seq` of the upload `upload`.
pub(super) async fn upload_piece(store: &SqlStore, upload: &str, seq: u32, data: Vec<u8>) -> Result<(), StoreError> {
    sqlx::query(INSERT_UPLOAD_PIECE)
        .bind(upload)
        .bind(i64::from(seq))
        .bind(data)
        .execute(&mut *store.pool.acquire().await?)
        .await?;
    Ok(())
}

/// End the upload `upload`: complete in `pieces` pieces (whether the file was new: an upload of a
/// file kept or uploaded already is dropped), or abandoned (`None`: dropped).
pub(super) async fn end_upload(
    store: &SqlStore,
    upload: &str,
    pieces: Option<u32>,
    now: i64,
) -> Result<bool, StoreError> {
    let mut tx = store.pool.begin().await?;
    let Some(pieces) = pieces else {
        drop_upload(&mut tx, upload).await?;
        tx.commit().await?;
        return Ok(false);
    };
    let Some(row) = sqlx::query(UPLOAD_DIGEST).bind(upload).fetch_optional(&mut *tx).await? else {
        return Err(StoreError::Invalid(format!(
            "the upload took longer than {} minutes and was dropped; upload it again",
            UPLOAD_TTL_MS / 60_000
        )));
    };
    let digest: String = row.try_get("digest")?;
    let new = if sqlx::query(HAS_FILE).bind(&digest).fetch_optional(&mut *tx).await?.is_some() {
        drop_upload(&mut tx, upload).await?;
        false
    } else if let Some(earlier) = sqlx::query(COMPLETE_UPLOAD_OF).bind(&digest).fetch_optional(&mut *tx).await? {
        drop_upload(&mut tx, upload).await?;
        let earlier: String = earlier.try_get("id")?;
        sqlx::query(REFRESH_UPLOAD).bind(&earlier).bind(now).execute(&mut *tx).await?;
        false
    } else {
        sqlx::query(COMPLETE_UPLOAD).bind(upload).bind(i64::from(pieces)).bind(now).execute(&mut *tx).await?;
        true
    };
    tx.commit().await?;
    Ok(new)
}

async fn drop_upload(tx: &mut Transaction<'_, Any>, upload: &str) -> Result<(), StoreError> {
    sqlx::query(DROP_UPLOAD_PIECES).bind(upload).execute(&mut **tx).await?;
    sqlx::query(DROP_UPLOAD).bind(upload).execute(&mut **tx).await?;
    Ok(())
}

/// What a launch reads for a digest its spec names: a complete upload, or a kept file; whole.
pub(super) async fn launch_file(store: &SqlStore, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
    let mut conn = store.pool.acquire().await?;
    if let Some(row) = sqlx::query(COMPLETE_UPLOAD_OF).bind(digest.as_str()).fetch_optional(&mut *conn).await? {
        let id: String = row.try_get("id")?;
        let pieces = sqlx::query(UPLOAD_PIECES).bind(&id).fetch_all(&mut *conn).await?;
        return joined(&pieces).map(Some);
    }
    read_file(&mut conn, digest).await
}

/// Keep the complete upload of `digest` as a file in its pieces (unless a file of that digest is
/// kept already), inside a transaction, without reading it; an error if there is neither.
pub(super) async fn keep_upload(tx: &mut Transaction<'_, Any>, digest: &Digest, now: i64) -> Result<(), StoreError> {
    let kept =
        sqlx::query(KEEP_UPLOAD).bind(digest.as_str()).bind(now).bind(Vec::<u8>::new()).execute(&mut **tx).await?;
    if kept.rows_affected() > 0 {
        sqlx::query(KEEP_UPLOAD_PIECES).bind(digest.as_str()).execute(&mut **tx).await?;
    }
    if sqlx::query(HAS_FILE).bind(digest.as_str()).fetch_optional(&mut **tx).await?.is_none() {
        return Err(StoreError::NotUploaded(digest.clone()));
    }
    Ok(())
}

/// Drop the complete uploads of `digests` (those a launch read), inside a transaction.
pub(super) async fn drop_uploads(tx: &mut Transaction<'_, Any>, digests: &[Digest]) -> Result<(), StoreError> {
    for digest in digests {
        if let Some(row) = sqlx::query(COMPLETE_UPLOAD_OF).bind(digest.as_str()).fetch_optional(&mut **tx).await? {
            drop_upload(tx, &row.try_get::<String, _>("id")?).await?;
        }
    }
    Ok(())
}

/// Drop the complete uploads of `digests` (those a refused launch read).
pub(super) async fn discard_uploads(store: &SqlStore, digests: &[Digest]) -> Result<(), StoreError> {
    let mut tx = store.pool.begin().await?;
    drop_uploads(&mut tx, digests).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(any(test, feature = "test-support"))]
impl SqlStore {
    /// How many rows a table of the store has, for tests that check what a refusal left behind.
    pub async fn rows(&self, table: &str) -> Result<i64, StoreError> {
        const TABLES: &[&str] =
            &["studies", "trajectories", "jobs", "continuations", "files", "file_pieces", "uploads", "upload_pieces"];
        if !TABLES.contains(&table) {
            return Err(StoreError::Invalid(format!("{table:?} is not one of the tables {TABLES:?}")));
        }
        let sql = format!("SELECT COUNT(*) AS n FROM {table}");
        Ok(sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_one(&self.pool).await?.try_get("n")?)
    }
}
