//! Why a file was not imported ([`ImportError`]).

use crate::policy::{FORMAT_V1, FORMAT_V1_1};

/// Why a file was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("unknown trajectory_format {found:?}; this version reads {FORMAT_V1:?} and {FORMAT_V1_1:?}")]
    UnknownFormat { found: String },
    #[error("{0}")]
    Invalid(String),
}

pub(crate) fn invalid(message: impl Into<String>) -> ImportError {
    ImportError::Invalid(message.into())
}
