//! The worker's configuration, validated once before anything connects.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::lease::error::WorkerError;

/// How a worker reaches its coordinator and how much it runs at once.
///
/// `Debug` is written by hand: the token is shown as `<redacted>`, never its value.
#[derive(Clone)]
pub struct WorkerConfig {
    /// The coordinator's URL, `http://HOST:PORT` or `https://HOST:PORT`.
    pub coordinator: String,
    /// Continuations run at once (at least 1).
    pub slots: u32,
    /// A human-readable name for status displays (the CLI defaults it to the host name).
    pub name: String,
    /// The worker bearer token, sent as `authorization: Bearer <token>` on every request.
    pub token: Option<String>,
    /// A PEM file of CA certificates to trust for an `https` coordinator.
    pub tls_ca: Option<PathBuf>,
    /// How long one lease request may wait on the coordinator for work (long poll).
    pub lease_wait: Duration,
    /// On shutdown, how long running jobs may still finish and be reported before the rest are
    /// cancelled and released.
    pub shutdown_grace: Duration,
}

impl WorkerConfig {
    /// A configuration for `coordinator` with one slot, no token, no TLS CA, a 1 s lease wait and
    /// a 30 s shutdown grace.
    pub fn new(coordinator: impl Into<String>) -> Self {
        Self {
            coordinator: coordinator.into(),
            slots: 1,
            name: "vcurve-worker".to_owned(),
            token: None,
            tls_ca: None,
            lease_wait: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
        }
    }

    /// Check every field; the error names the field and the allowed values.
    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |msg: String| Err(WorkerError::Config(msg));
        if self.slots == 0 {
            return bad("slots must be at least 1".to_owned());
        }
        let scheme_end = self.coordinator.find("://");
        let scheme = scheme_end.map(|i| &self.coordinator[..i]);
        match scheme {
            Some("http") | Some("https") => {}
            _ => {
                return bad(format!("coordinator must be an http:// or https:// URL, got {:?}", self.coordinator));
            }
        }
        if self.tls_ca.is_some() && scheme != Some("https") {
            return bad("tls_ca is set but the coordinator URL is not https://".to_owned());
        }
        if self.lease_wait > Duration::from_millis(u64::from(u32::MAX)) {
            return bad(format!("lease_wait must be at most {} ms", u32::MAX));
        }
        if let Some(token) = &self.token {
            // Checked here so a bad token fails at start, with a message that does not show it.
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return bad("token must be non-empty printable ASCII without spaces".to_owned());
            }
        }
        Ok(())
    }
}

impl fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("coordinator", &self.coordinator)
            .field("slots", &self.slots)
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls_ca", &self.tls_ca)
            .field("lease_wait", &self.lease_wait)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_token() {
        let mut config = WorkerConfig::new("http://127.0.0.1:7070");
        config.token = Some("s3cret-token".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn validation_names_the_field() {
        let ok = WorkerConfig::new("https://coord.example:7070");
        assert!(ok.validate().is_ok());
        type Change = fn(&mut WorkerConfig);
        let cases: [(Change, &str); 5] = [
            (|c| c.slots = 0, "slots"),
            (|c| c.coordinator = "coord:7070".into(), "coordinator"),
            (|c| c.token = Some("has space".into()), "token"),
            (
                |c| {
                    c.coordinator = "http://127.0.0.1:1".into();
                    c.tls_ca = Some("ca.pem".into());
                },
                "tls_ca",
            ),
            (|c| c.lease_wait = Duration::from_secs(10_000_000), "lease_wait"),
        ];
        for (change, field) in cases {
            let mut config = ok.clone();
            change(&mut config);
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
