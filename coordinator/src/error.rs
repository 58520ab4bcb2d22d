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
    /// A worker speaks another protocol version; fatal for that worker.
    #[error("protocol version {worker} is not compatible with the coordinator's {coordinator}")]
    ProtocolMismatch { worker: String, coordinator: String },
    /// Stored outcomes could not be analyzed (a corrupted store); fatal for the request.
    #[error("cannot analyze the study: {0}")]
    Analysis(#[from] vcurve_method::CurveError),
    /// The study's analyses failed on its labels or base runs; fatal for the request.
    #[error("cannot compute the study's analyses: {0}")]
    Analyses(#[from] crate::study_analyses::AnalysesError),
}

impl From<CoordinatorError> for tonic::Status {
    fn from(e: CoordinatorError) -> Self {
        let message = e.to_string();
        match e {
            CoordinatorError::Store(StoreError::UnknownStudy(_)) => tonic::Status::not_found(message),
            CoordinatorError::Store(StoreError::Database(_)) => tonic::Status::unavailable(message),
            CoordinatorError::Store(_) | CoordinatorError::Analysis(_) | CoordinatorError::Analyses(_) => {
                tonic::Status::internal(message)
            }
            CoordinatorError::Spec(_) | CoordinatorError::InvalidArgument(_) => {
                tonic::Status::invalid_argument(message)
            }
            CoordinatorError::ProtocolMismatch { .. } => tonic::Status::failed_precondition(message),
        }
    }
}
