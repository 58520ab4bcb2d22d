//! The coordinator's error type, and its one conversion to a gRPC status.

use crate::store::StoreError;

/// Why a coordinator operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The store failed; retryable (the operation was rolled back).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A study spec was rejected; fatal for the request, nothing was stored.
    #[error("invalid study spec: {0}")]
    Spec(#[from] crate::spec::SpecError),
    /// A request was malformed; fatal for the request.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The request names something the coordinator does not have; fatal for the request.
    #[error("{0}")]
    NotFound(String),
    /// A launch names a file that was not uploaded, or whose upload expired or was consumed by
    /// another launch meanwhile; retryable after uploading it again (`FAILED_PRECONDITION`).
    #[error(
        "{path}: no file with SHA-256 {digest} was uploaded for this launch (or its upload expired); upload it again"
    )]
    NotUploaded { path: String, digest: vcurve_record::Digest },
    /// A worker speaks another protocol version; fatal for that worker.
    #[error("protocol version {worker} is not compatible with the coordinator's {coordinator}")]
    ProtocolMismatch { worker: String, coordinator: String },
    /// The study's results could not be rendered (outcomes or labels that cannot be analyzed);
    /// fatal for the request.
    #[error("cannot render the study's results: {0}")]
    Render(crate::render::RenderError),
    /// A bug: a task of the coordinator failed. Fatal for the request.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<CoordinatorError> for tonic::Status {
    fn from(e: CoordinatorError) -> Self {
        let message = e.to_string();
        match e {
            CoordinatorError::Store(StoreError::UnknownStudy(_)) | CoordinatorError::NotFound(_) => {
                tonic::Status::not_found(message)
            }
            CoordinatorError::Store(StoreError::Invalid(_)) => tonic::Status::invalid_argument(message),
            CoordinatorError::Store(StoreError::NotUploaded(_)) => tonic::Status::failed_precondition(message),
            CoordinatorError::Store(StoreError::Database(_)) => tonic::Status::unavailable(message),
            CoordinatorError::Store(_) | CoordinatorError::Render(_) | CoordinatorError::Internal(_) => {
                tonic::Status::internal(message)
            }
            CoordinatorError::Spec(_) | CoordinatorError::InvalidArgument(_) => {
                tonic::Status::invalid_argument(message)
            }
            CoordinatorError::ProtocolMismatch { .. } | CoordinatorError::NotUploaded { .. } => {
                tonic::Status::failed_precondition(message)
            }
        }
    }
}
