//! The worker's one error enum.

use std::time::Duration;

/// Why a worker stopped, or why one RPC failed.
///
/// [`crate::run`] only ever returns the **fatal** variants: the retryable ones are handled inside
/// the lease loop (logged at `warn`, then retried with capped exponential backoff), because the
/// coordinator may just be restarting and the worker must carry on once it is back.
///
/// A **rejection** — the coordinator refusing the worker's token, or the TLS handshake failing — is
/// retried too, but only until [`WorkerError::REJECTED_ATTEMPTS`] calls in a row were rejected:
/// then it is fatal. A call the coordinator answers otherwise starts the count again.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// **Fatal.** The configuration is invalid (the message names the field and what is allowed).
    #[error("invalid worker configuration: {0}")]
    Config(String),

    /// **Fatal**, at start. The TLS setup failed: the CA file cannot be read, holds no PEM
    /// certificate, or holds one that does not parse.
    #[error("TLS setup: {0}")]
    Tls(String),

    /// **A rejection** (fatal at the [`WorkerError::REJECTED_ATTEMPTS`]th in a row). The
    /// coordinator rejected the worker's token (gRPC `UNAUTHENTICATED` or `PERMISSION_DENIED`).
    #[error("the coordinator rejected the worker's credentials on {rpc}: {message}")]
    Unauthenticated {
        /// The RPC that was rejected.
        rpc: &'static str,
        /// The coordinator's message.
        message: String,
        /// How many calls in a row were rejected, this one included.
        attempt: u32,
    },

    /// **A rejection** (fatal at the [`WorkerError::REJECTED_ATTEMPTS`]th in a row). No TLS
    /// session with the coordinator: its certificate is not trusted through the CA file, the
    /// handshake failed, or only one side speaks TLS (the message says which, and what to change).
    #[error("TLS with the coordinator failed on {rpc}: {message}")]
    TlsRejected {
        /// The RPC that could not be sent.
        rpc: &'static str,
        /// What went wrong, and what to change.
        message: String,
        /// How many calls in a row were rejected, this one included.
        attempt: u32,
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
    /// How many calls in a row may be rejected (token or TLS) before the worker stops: 3.
    ///
    /// A rejection means a misconfiguration (wrong token, CA, or scheme), and the same
    /// configuration gets the same answer, so the worker stops and says so at once: the backoff
    /// between three attempts is at most 150 ms. More than one lets a single odd answer pass —
    /// say, one connection that reached the old coordinator while its certificate or tokens are
    /// being replaced. Connections that fail without an answer (refused, reset, timed out) are
    /// not rejections and never count: they are retried for as long as it takes.
    pub const REJECTED_ATTEMPTS: u32 = 3;

    /// Whether retrying the same request later (after registering again, for
    /// [`WorkerError::UnknownWorker`]) can succeed. A rejection is retryable until
    /// [`WorkerError::REJECTED_ATTEMPTS`] calls in a row were rejected.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::Timeout { .. } | Self::UnknownWorker { .. } => true,
            Self::Unauthenticated { attempt, .. } | Self::TlsRejected { attempt, .. } => {
                *attempt < Self::REJECTED_ATTEMPTS
            }
            Self::Config(_) | Self::Tls(_) | Self::Refused { .. } => false,
        }
    }

    /// Whether the coordinator rejected the worker's token, or TLS with it failed.
    pub fn is_rejection(&self) -> bool {
        matches!(self, Self::Unauthenticated { .. } | Self::TlsRejected { .. })
    }

    /// Record that this is the `n`th rejection in a row (no-op for other errors).
    pub(crate) fn with_attempt(mut self, n: u32) -> Self {
        if let Self::Unauthenticated { attempt, .. } | Self::TlsRejected { attempt, .. } = &mut self {
            *attempt = n;
        }
        self
    }

    /// Classify a gRPC status returned by `rpc` (a rejection is counted as the first in a row).
    pub(crate) fn from_status(rpc: &'static str, status: &tonic::Status) -> Self {
        use tonic::Code;
        let message = status.message().to_owned();
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => Self::Unauthenticated { rpc, message, attempt: 1 },
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
        assert!(matches!(e, WorkerError::Unauthenticated { attempt: 1, .. }) && e.is_rejection());
        assert!(e.is_retryable(), "a first rejection is retried");
        let e = e.with_attempt(WorkerError::REJECTED_ATTEMPTS);
        assert!(!e.is_retryable(), "the last allowed rejection is fatal");
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
