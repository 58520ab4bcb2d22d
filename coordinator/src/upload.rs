//! A client's upload for a launch, received piece by piece: each piece is checked — the size
//! announced, UTF-8 text, the SHA-256 taken as it goes — and stored as it arrives, in pieces of
//! [`vcurve_proto::CHUNK_BYTES`], so the coordinator holds at most a piece or two of a file
//! whatever its size. The upload is complete once every byte arrived and matched its digest
//! ([`Upload::finish`]); until then, and if it fails or is abandoned, no launch can use it.

use sha2::{Digest as _, Sha256};

use crate::core::Coordinator;
use crate::error::CoordinatorError;
use crate::store::Store;
use vcurve_record::Digest;

/// An upload under way ([`Coordinator::begin_upload`]). Dropped without [`Upload::finish`] or
/// [`Upload::abandon`] (the client went away), it is left incomplete, and dropped with the expired
/// uploads an hour later.
pub struct Upload<'a, S> {
    coordinator: &'a Coordinator<S>,
    id: String,
    digest: Digest,
    size: u64,
    received: u64,
    sha256: Sha256,
    /// The bytes of a UTF-8 sequence the last piece ended inside (at most 3).
    partial_char: Vec<u8>,
    /// Bytes received but not stored yet (less than a stored piece).
    pending: Vec<u8>,
    /// Pieces stored.
    pieces: u32,
}

impl<S: Store> Coordinator<S> {
    /// Begin a client's upload for a launch of the file `digest` of `size` bytes.
    pub async fn begin_upload(&self, digest: &Digest, size: u64) -> Result<Upload<'_, S>, CoordinatorError> {
        let limit = crate::spec::MAX_FILE_BYTES;
        if size > limit {
            return Err(CoordinatorError::InvalidArgument(format!(
                "a file of {size} bytes is over the limit of {} MiB per file",
                limit >> 20
            )));
        }
        let id = self.store().begin_upload(digest, size, self.now_ms()).await?;
        Ok(Upload {
            coordinator: self,
            id,
            digest: digest.clone(),
            size,
            received: 0,
            sha256: Sha256::new(),
            partial_char: Vec::new(),
            pending: Vec::new(),
            pieces: 0,
        })
    }

    /// Upload `content` whole as a client's upload for a launch (in-process callers and tests;
    /// the study service receives uploads piece by piece); whether it was new.
    pub async fn stage_upload(&self, digest: &Digest, content: &[u8]) -> Result<bool, CoordinatorError> {
        let mut upload = self.begin_upload(digest, content.len() as u64).await?;
        for piece in content.chunks(vcurve_proto::CHUNK_BYTES) {
            if let Err(e) = upload.piece(piece).await {
                upload.abandon().await;
                return Err(e);
            }
        }
        upload.finish().await
    }
}

impl<S: Store> Upload<'_, S> {
    /// The next piece of the file, as received.
    pub async fn piece(&mut self, data: &[u8]) -> Result<(), CoordinatorError> {
        if self.received + data.len() as u64 > self.size {
            return Err(CoordinatorError::InvalidArgument(format!(
                "the upload is longer than the {} bytes it announced",
                self.size
            )));
        }
        self.check_utf8(data)?;
        self.sha256.update(data);
        self.received += data.len() as u64;
        self.pending.extend_from_slice(data);
        while self.pending.len() >= vcurve_proto::CHUNK_BYTES {
            let rest = self.pending.split_off(vcurve_proto::CHUNK_BYTES);
            let piece = std::mem::replace(&mut self.pending, rest);
            self.store_piece(piece).await?;
        }
        Ok(())
    }

    /// Every file a spec names is text, and a problem statement is kept without being read at
    /// launch: an upload must be UTF-8, checked across the pieces' boundaries.
    fn check_utf8(&mut self, data: &[u8]) -> Result<(), CoordinatorError> {
        let start = self.received - self.partial_char.len() as u64;
        let mut text = std::mem::take(&mut self.partial_char);
        text.extend_from_slice(data);
        match std::str::from_utf8(&text) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_none() => {
                self.partial_char = text[e.valid_up_to()..].to_vec();
                Ok(())
            }
            Err(e) => Err(not_utf8(start + e.valid_up_to() as u64)),
        }
    }

    async fn store_piece(&mut self, piece: Vec<u8>) -> Result<(), CoordinatorError> {
        self.coordinator.store().upload_piece(&self.id, self.pieces, piece).await?;
        self.pieces += 1;
        Ok(())
    }

    /// The upload ended: check that it is the whole file its digest names, and make it one a
    /// launch can use; whether the coordinator did not have the file already. A failed check
    /// drops the upload.
    pub async fn finish(mut self) -> Result<bool, CoordinatorError> {
        let checked = async {
            if self.received != self.size {
                return Err(CoordinatorError::InvalidArgument(format!(
                    "the upload ended after {} of the {} bytes it announced",
                    self.received, self.size
                )));
            }
            if !self.partial_char.is_empty() {
                return Err(not_utf8(self.received - self.partial_char.len() as u64));
            }
            let found = hex(&std::mem::take(&mut self.sha256).finalize());
            if found != self.digest.as_str() {
                return Err(CoordinatorError::InvalidArgument(format!(
                    "the upload's content has SHA-256 {found}, not the {} it announced",
                    self.digest
                )));
            }
            if !self.pending.is_empty() {
                let piece = std::mem::take(&mut self.pending);
                self.store_piece(piece).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = checked {
            self.abandon().await;
            return Err(e);
        }
        let now = self.coordinator.now_ms();
        Ok(self.coordinator.store().end_upload(&self.id, Some(self.pieces), now).await?)
    }

    /// Drop the upload (the client's stream failed, or a piece was refused).
    pub async fn abandon(self) {
        let now = self.coordinator.now_ms();
        if let Err(e) = self.coordinator.store().end_upload(&self.id, None, now).await {
            // It expires anyway; the client hears why its upload failed.
            tracing::warn!(error = %e, "cannot drop an abandoned upload");
        }
    }
}

fn not_utf8(at: u64) -> CoordinatorError {
    CoordinatorError::InvalidArgument(format!(
        "a file uploaded for a launch must be UTF-8 text, as every file a spec names is (byte {at} starts an \
         invalid sequence)"
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
