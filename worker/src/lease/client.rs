//! The connection to the coordinator: channel and TLS setup, the bearer-token interceptor, one
//! deadline per RPC, status classification (with the count of rejections in a row), and the
//! backoff used between retries.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use vcurve_proto::v1;
use vcurve_proto::v1::worker_service_client::WorkerServiceClient;

use crate::lease::config::WorkerConfig;
use crate::lease::error::WorkerError;
use crate::lease::tls::{check_ca, read_pem, rustls_error, speaks_tls};

/// The deadline of every RPC but `Lease`, whose deadline adds the long-poll wait.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings notice a coordinator host that vanished without closing its sockets.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Adds `authorization: Bearer <token>` to every request when a token is configured.
#[derive(Clone)]
pub(crate) struct BearerAuth(Option<MetadataValue<Ascii>>);

impl BearerAuth {
    fn new(token: Option<&str>) -> Result<Self, WorkerError> {
        let value = token
            .map(|t| {
                let mut v: MetadataValue<Ascii> = format!("Bearer {t}")
                    .parse()
                    .map_err(|_| WorkerError::Config("token is not a valid header value".to_owned()))?;
                v.set_sensitive(true);
                Ok::<_, WorkerError>(v)
            })
            .transpose()?;
        Ok(Self(value))
    }
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "BearerAuth(<redacted>)" } else { "BearerAuth(none)" })
    }
}

impl Interceptor for BearerAuth {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Client = WorkerServiceClient<InterceptedService<Channel, BearerAuth>>;

/// The coordinator's worker service, as the worker calls it: every call has a deadline and
/// returns a classified [`WorkerError`].
#[derive(Clone, Debug)]
pub(crate) struct Coordinator {
    client: Client,
    /// The coordinator's URL, for messages and for probing it.
    url: Arc<str>,
    /// Calls rejected in a row (token or TLS), shared by every clone.
    rejections: Arc<AtomicU32>,
}

impl Coordinator {
    /// Set up the channel. It connects lazily (and reconnects by itself), so an unreachable
    /// coordinator is not an error here: the first RPCs fail and are retried.
    pub(crate) async fn connect(config: &WorkerConfig) -> Result<Self, WorkerError> {
        let mut endpoint = Endpoint::from_shared(config.coordinator.clone())
            .map_err(|e| WorkerError::Config(format!("coordinator URL: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if config.coordinator.starts_with("https://") {
            // `with_enabled_roots` adds the system or webpki roots when tonic is built with them;
            // vcurve's default build has neither, so an https coordinator needs `tls_ca`.
            let mut tls = ClientTlsConfig::new().with_enabled_roots();
            match &config.tls_ca {
                Some(path) => {
                    let pem = read_pem(path).map_err(|e| WorkerError::Tls(format!("CA file: {e}")))?;
                    // tonic skips what does not parse, which would leave nothing to trust.
                    check_ca(&pem).map_err(|e| WorkerError::Tls(format!("CA file {}: {e}", path.display())))?;
                    tls = tls.ca_certificate(Certificate::from_pem(pem));
                }
                None => tracing::warn!(
                    "https coordinator without a CA file: only the TLS roots built into tonic are trusted"
                ),
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| WorkerError::Tls(e.to_string()))?;
        }
        let auth = BearerAuth::new(config.token.as_deref())?;
        Ok(Self {
            client: WorkerServiceClient::with_interceptor(endpoint.connect_lazy(), auth),
            url: config.coordinator.as_str().into(),
            rejections: Arc::default(),
        })
    }

    pub(crate) async fn register(&self, request: v1::RegisterRequest) -> Result<v1::RegisterResponse, WorkerError> {
        let mut client = self.client.clone();
        self.call("Register", RPC_TIMEOUT, client.register(request)).await
    }

    pub(crate) async fn lease(
        &self,
        request: v1::LeaseRequest,
        wait: Duration,
    ) -> Result<v1::LeaseResponse, WorkerError> {
        let mut client = self.client.clone();
        self.call("Lease", RPC_TIMEOUT + wait, client.lease(request)).await
    }

    pub(crate) async fn heartbeat(&self, request: v1::HeartbeatRequest) -> Result<v1::HeartbeatResponse, WorkerError> {
        let mut client = self.client.clone();
        self.call("Heartbeat", RPC_TIMEOUT, client.heartbeat(request)).await
    }

    pub(crate) async fn report(&self, request: v1::ReportRequest) -> Result<v1::ReportResponse, WorkerError> {
        let mut client = self.client.clone();
        self.call("Report", RPC_TIMEOUT, client.report(request)).await
    }

    pub(crate) async fn release(&self, request: v1::ReleaseRequest) -> Result<v1::ReleaseResponse, WorkerError> {
        let mut client = self.client.clone();
        self.call("Release", RPC_TIMEOUT, client.release(request)).await
    }

    /// A trajectory payload's bytes by digest, gathered from its chunks.
    pub(crate) async fn get_trajectory(&self, digest: &str) -> Result<Vec<u8>, WorkerError> {
        let mut client = self.client.clone();
        let request = v1::GetTrajectoryRequest { digest: digest.to_owned() };
        let fetch = async move {
            let mut stream = client.get_trajectory(request).await?.into_inner();
            let mut bytes = Vec::new();
            while let Some(chunk) = stream.message().await? {
                bytes.extend_from_slice(&chunk.data);
            }
            Ok::<_, tonic::Status>(tonic::Response::new(bytes))
        };
        self.call("GetTrajectory", FETCH_TIMEOUT, fetch).await
    }
}

impl crate::runners::services::JobServices for Coordinator {
    fn lookup_verdict<'a>(
        &'a self,
        study: &'a str,
        task: &'a str,
        patch_sha256: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            let mut client = self.client.clone();
            let request = v1::VerdictRequest {
                study: study.to_owned(),
                task: task.to_owned(),
                patch_sha256: patch_sha256.to_owned(),
            };
            let answer = self
                .call("LookupVerdict", RPC_TIMEOUT, client.lookup_verdict(request))
                .await
                .map_err(|e| e.to_string())?;
            Ok(answer.known.then_some(answer.resolved))
        })
    }

    fn put_file<'a>(&'a self, content: &'a [u8]) -> futures::future::BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let digest = vcurve_record::trajectory::sha256_hex(content);
            let chunks = vcurve_proto::upload_chunks(content, &digest);
            let mut client = self.client.clone();
            self.call("PutFile", FETCH_TIMEOUT, client.put_file(futures::stream::iter(chunks)))
                .await
                .map_err(|e| e.to_string())?;
            Ok(digest)
        })
    }

    fn fetch_file<'a>(&'a self, digest: &'a str) -> futures::future::BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let bytes = self.get_trajectory(digest).await.map_err(|e| e.to_string())?;
            let found = vcurve_record::trajectory::sha256_hex(&bytes);
            if found != digest {
                return Err(format!("fetched bytes have digest {found}, not {digest}"));
            }
            Ok(bytes)
        })
    }
}

/// How long fetching one trajectory payload may take (tens of MB over a slow link).
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);

impl Coordinator {
    async fn call<T>(
        &self,
        rpc: &'static str,
        deadline: Duration,
        response: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, WorkerError> {
        let status = match tokio::time::timeout(deadline, response).await {
            Err(_) => return Err(WorkerError::Timeout { rpc, after: deadline }),
            Ok(Ok(response)) => {
                self.rejections.store(0, Ordering::Relaxed);
                return Ok(response.into_inner());
            }
            Ok(Err(status)) => status,
        };
        // A status the transport made up carries its cause; one the coordinator sent does not.
        let answered = std::error::Error::source(&status).is_none();
        let error = match tls_failure(&self.url, &status).await {
            Some(message) => WorkerError::TlsRejected { rpc, message, attempt: 1 },
            None => WorkerError::from_status(rpc, &status),
        };
        if error.is_rejection() {
            Err(error.with_attempt(self.rejections.fetch_add(1, Ordering::Relaxed).saturating_add(1)))
        } else {
            if answered {
                // The coordinator took the worker's TLS and token to answer at all.
                self.rejections.store(0, Ordering::Relaxed);
            }
            Err(error)
        }
    }
}

/// When a call to the coordinator at `url` failed in the transport because of TLS — the handshake
/// failed, or only one side speaks TLS — what happened and what to change.
async fn tls_failure(url: &str, status: &tonic::Status) -> Option<String> {
    let cause = std::error::Error::source(status)?;
    if let Some(tls) = rustls_error(cause) {
        return Some(match tls {
            // The answer to the ClientHello was not TLS at all.
            rustls::Error::InvalidMessage(_) => {
                format!("the coordinator at {url} does not speak TLS: use http://, without --tls-ca")
            }
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                format!(
                    "the coordinator at {url} presented a certificate the worker does not trust ({tls}): check --tls-ca"
                )
            }
            other => format!("the TLS handshake with the coordinator at {url} failed: {other}"),
        });
    }
    // A plaintext HTTP/2 preface sent to a TLS server only breaks the connection; ask it.
    let authority = url.strip_prefix("http://")?.split('/').next()?;
    speaks_tls(authority).await.then(|| format!("the coordinator at {url} speaks TLS: use https:// and --tls-ca"))
}

/// Capped exponential backoff with jitter, for retrying RPCs while the coordinator is away.
///
/// The jitter (each delay drawn from the upper half of its step) keeps the workers of a fleet from
/// hammering a restarting coordinator in lockstep.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) const MIN: Duration = Duration::from_millis(50);
    pub(crate) const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        Self { next: Self::MIN }
    }

    pub(crate) fn reset(&mut self) {
        self.next = Self::MIN;
    }

    /// The delay before the next retry; doubles the one after, up to [`Backoff::MAX`].
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        step.mul_f64(0.5 + 0.5 * jitter())
    }
}

/// A number in `[0, 1)`, different on every call; not for anything but spreading retries.
fn jitter() -> f64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let h = RandomState::new().hash_one(CALLS.fetch_add(1, Ordering::Relaxed));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Backoff::MIN / 2 && delays[0] <= Backoff::MIN);
        assert!(delays.iter().all(|d| *d <= Backoff::MAX));
        assert!(delays[11] >= Backoff::MAX / 2);
        b.reset();
        assert!(b.next_delay() <= Backoff::MIN);
    }

    #[test]
    fn auth_debug_hides_the_token() {
        let auth = BearerAuth::new(Some("s3cret")).unwrap();
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
