//! The worker's one error enum.

use std::time::Duration;

/// Why a worker stopped, or why one RPC failed.
///
/// [`crate::run`] only ever returns the **fatal** variants: the retryable ones are handled inside
/// the lease loop (logged at `warn`, then retried with capped exponential backoff), because the
/// coordinator may just be restarting and the worker must carry on once it is back.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// **Fatal.** The configuration is invalid (the message names the field and what is allowed).
    #[error("invalid worker configuration: {0}")]
    Config(String),

    /// **Fatal.** The TLS setup failed: unreadable CA file or a CA the TLS stack rejects.
    #[error("TLS setup: {0}")]
    Tls(String),

    /// **Fatal.** The coordinator rejected the worker's token (gRPC `UNAUTHENTICATED` or
    /// `PERMISSION_DENIED`): retrying with the same token cannot help.
    #[error("the coordinator rejected the worker's credentials on {rpc}: {message}")]
    Unauthenticated {
        /// The RPC that was rejected.
        rpc: &'static str,
        /// The coordinator's message.
        message: String,
    },

    /// **Fatal.** The coordinator refused the request for a reason retrying cannot fix, e.g. a
    /// protocol-version mismatch at `Register` (`FAILED_PRECONDITION`), or a request it deems
    /// invalid.
    #[error("the coordinator refused {rpc} ({code:?}): {message}")]
    Refused {
        /// The RPC that was refused.
        rpc: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The coordinator's message.
        message: String,
    },

    /// **Retryable.** The RPC did not go through: the coordinator is unreachable, restarting,
    /// overloaded, or failed internally (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INTERNAL`,
    /// `UNKNOWN`, `ABORTED`, `RESOURCE_EXHAUSTED`, `CANCELLED`).
    #[error("{rpc} failed ({code:?}): {message}")]
    Unavailable {
        /// The RPC that failed.
        rpc: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The transport's or coordinator's message.
        message: String,
    },

    /// **Retryable.** The RPC got no answer within its deadline.
    #[error("{rpc} got no answer within {after:?}")]
    Timeout {
        /// The RPC that timed out.
        rpc: &'static str,
        /// The deadline.
        after: Duration,
    },

    /// **Retryable** by registering again: the coordinator does not know this worker (gRPC
    /// `NOT_FOUND` on `Lease` or `Heartbeat`, or a heartbeat answering `unknown_worker`).
    #[error("the coordinator does not know this worker ({rpc}): {message}")]
    UnknownWorker {
        /// The RPC that said so.
        rpc: &'static str,
        /// The coordinator's message.
        message: String,
    },
}

impl WorkerError {
    /// Whether retrying the same request later (after registering again, for
    /// [`WorkerError::UnknownWorker`]) can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Timeout { .. } | Self::UnknownWorker { .. })
    }

    /// Classify a gRPC status returned by `rpc`.
    pub(crate) fn from_status(rpc: &'static str, status: &tonic::Status) -> Self {
        use tonic::Code;
        let message = status.message().to_owned();
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => Self::Unauthenticated { rpc, message },
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Unknown
            | Code::Aborted
            | Code::ResourceExhausted
            | Code::Cancelled => Self::Unavailable { rpc, code: status.code(), message },
            Code::NotFound if matches!(rpc, "Lease" | "Heartbeat") => Self::UnknownWorker { rpc, message },
            code => Self::Refused { rpc, code, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    #[test]
    fn classification() {
        let e = WorkerError::from_status("Lease", &Status::unavailable("tcp connect error"));
        assert!(e.is_retryable());
        let e = WorkerError::from_status("Register", &Status::unauthenticated("bad token"));
        assert!(matches!(e, WorkerError::Unauthenticated { .. }) && !e.is_retryable());
        let e = WorkerError::from_status("Register", &Status::failed_precondition("protocol 2.0"));
        assert!(matches!(e, WorkerError::Refused { .. }) && !e.is_retryable());
        let e = WorkerError::from_status("Heartbeat", &Status::not_found("worker"));
        assert!(matches!(e, WorkerError::UnknownWorker { .. }) && e.is_retryable());
        let e = WorkerError::from_status("Register", &Status::not_found("?"));
        assert!(!e.is_retryable());
        let e = WorkerError::from_status("Report", &Status::not_found("no such key"));
        assert!(matches!(e, WorkerError::Refused { .. }));
    }
}
