//! The gRPC services over a [`Coordinator`], with bearer-token authentication and optional TLS.
//!
//! `serve` is the library entry point (mini-redis style): the caller binds the listener, so tests
//! can bind `127.0.0.1:0`, and passes a shutdown future.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};
use vcurve_proto::v1;
use vcurve_proto::v1::study_service_server::{StudyService, StudyServiceServer};
use vcurve_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};

use crate::core::Coordinator;
use crate::model::{Digest, HeldJob, ReportVerdict, StudyId, StudyState};
use crate::store::Store;
use crate::wire;

/// Bearer tokens: one for workers, one for clients (launch, status, export, cancel).
#[derive(Clone, Default)]
pub struct Tokens {
    pub worker: Option<String>,
    pub client: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("worker", &self.worker.as_ref().map(|_| "<redacted>"))
            .field("client", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Check `authorization: Bearer <token>` against `expected` in constant time.
fn check_bearer(request: &Request<()>, expected: &Option<String>) -> Result<(), Status> {
    let Some(expected) = expected else { return Ok(()) };
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| Status::unauthenticated("missing bearer token"))?;
    if presented.as_bytes().ct_eq(expected.as_bytes()).into() {
        Ok(())
    } else {
        Err(Status::unauthenticated("invalid bearer token"))
    }
}

/// Where and how to serve.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub tokens: Tokens,
    /// PEM certificate chain and key: serve TLS.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
}

/// Why the server would not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to listen on {0} without worker and client tokens: set both, or listen on a loopback address")]
    TokensRequired(SocketAddr),
    #[error(
        "refusing to listen on {0} with the same token for workers and clients: a worker could act as a client (launch, export, cancel); give each role its own token"
    )]
    SameToken(SocketAddr),
    #[error("cannot serve TLS: {0}")]
    Tls(#[from] TlsFilesError),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("cannot read the listener's address: {0}")]
    Io(#[from] std::io::Error),
}

/// Refuse a listener on a non-loopback address without both tokens, or with one token for both
/// roles (which would let every worker launch, export and cancel studies).
pub fn check_exposure(addr: SocketAddr, tokens: &Tokens) -> Result<(), ServeError> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    match (&tokens.worker, &tokens.client) {
        (Some(worker), Some(client)) if worker.as_bytes().ct_eq(client.as_bytes()).into() => {
            Err(ServeError::SameToken(addr))
        }
        (Some(_), Some(_)) => Ok(()),
        _ => Err(ServeError::TokensRequired(addr)),
    }
}

/// Which of the two TLS files a [`TlsFilesError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    Certificate,
    Key,
    /// Each file parses, but they do not go together.
    Both,
}

/// Why a PEM certificate chain and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsFilesError {
    #[error("the certificate file holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    #[error("certificate {index} of the certificate file is not a valid certificate: {reason}")]
    BadCertificate { index: usize, reason: String },
    #[error("the key file holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC)")]
    NoKey,
    #[error("the key file's private key cannot be used: {0}")]
    BadKey(String),
    #[error("the private key does not match the certificate (the first one of the certificate file)")]
    Mismatch,
}

impl TlsFilesError {
    /// The file to name in a message.
    pub fn file(&self) -> TlsFile {
        match self {
            Self::NoCertificate | Self::BadCertificate { .. } => TlsFile::Certificate,
            Self::NoKey | Self::BadKey(_) => TlsFile::Key,
            Self::Mismatch => TlsFile::Both,
        }
    }
}

/// Check that `cert_pem` holds a certificate chain and `key_pem` the private key of its first
/// certificate, so that a server with them can complete a handshake. tonic checks less, and says
/// "peer sent no certificates" for a certificate file it could not read.
pub fn check_tls(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsFilesError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let mut chain = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(cert_pem).enumerate() {
        let bad = |reason: String| TlsFilesError::BadCertificate { index: i + 1, reason };
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        // Parsing it as a trust anchor reads the whole certificate structure.
        rustls::RootCertStore::empty().add(cert.clone()).map_err(|e| bad(e.to_string()))?;
        chain.push(cert);
    }
    if chain.is_empty() {
        return Err(TlsFilesError::NoCertificate);
    }
    let key = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(key) => key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => return Err(TlsFilesError::NoKey),
        Err(e) => return Err(TlsFilesError::BadKey(e.to_string())),
    };
    let provider = rustls::crypto::ring::default_provider();
    let key = provider.key_provider.load_private_key(key).map_err(|e| TlsFilesError::BadKey(e.to_string()))?;
    match rustls::sign::CertifiedKey::new(chain, key).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(_) => Err(TlsFilesError::Mismatch),
    }
}

/// Serve the worker and study services on `listener` until `shutdown` resolves.
pub async fn serve<S: Store>(
    coordinator: Arc<Coordinator<S>>,
    listener: TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr = listener.local_addr()?;
    check_exposure(addr, &options.tokens)?;
    let mut builder = Server::builder();
    if let Some((cert, key)) = &options.tls {
        check_tls(cert, key)?;
        builder = builder.tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))?;
    }
    let sweeper = coordinator.spawn_sweeper();
    let worker_token = options.tokens.worker.clone();
    let client_token = options.tokens.client.clone();
    let workers = InterceptedService::new(
        WorkerServiceServer::new(WorkerApi { coordinator: coordinator.clone() }),
        move |r: Request<()>| check_bearer(&r, &worker_token).map(|_| r),
    );
    let studies = InterceptedService::new(StudyServiceServer::new(StudyApi { coordinator }), move |r: Request<()>| {
        check_bearer(&r, &client_token).map(|_| r)
    });
    tracing::info!(%addr, tls = options.tls.is_some(), "coordinator listening");
    // Small request/response messages: without TCP_NODELAY, Nagle's algorithm and delayed ACKs
    // add ~40 ms to every lease.
    let incoming = TcpListenerStream::new(listener).map(|stream| {
        let stream = stream?;
        stream.set_nodelay(true)?;
        Ok::<_, std::io::Error>(stream)
    });
    let result =
        builder.add_service(workers).add_service(studies).serve_with_incoming_shutdown(incoming, shutdown).await;
    sweeper.abort();
    Ok(result?)
}

struct WorkerApi<S> {
    coordinator: Arc<Coordinator<S>>,
}

#[tonic::async_trait]
impl<S: Store> WorkerService for WorkerApi<S> {
    async fn register(&self, request: Request<v1::RegisterRequest>) -> Result<Response<v1::RegisterResponse>, Status> {
        let r = request.into_inner();
        let mut capabilities = crate::core::capabilities_offered(&r.capabilities, &r.agents, &r.networks)?;
        capabilities.extend(crate::core::model_capabilities(&r.model_endpoints)?);
        let id = self.coordinator.register(&r.name, r.slots, &capabilities, &r.protocol_version).await?;
        let timing = self.coordinator.timing();
        Ok(Response::new(v1::RegisterResponse {
            worker_id: id,
            heartbeat_interval_ms: timing.heartbeat_interval.as_millis() as u32,
            lease_timeout_ms: timing.lease.timeout_ms as u32,
        }))
    }

    async fn lease(&self, request: Request<v1::LeaseRequest>) -> Result<Response<v1::LeaseResponse>, Status> {
        let r = request.into_inner();
        let wait = Duration::from_millis(u64::from(r.wait_ms));
        let locality = wire::locality_from_wire(r.snapshot_trajectories, r.snapshot_registry, r.pushed_snapshots);
        let jobs = self.coordinator.lease_with(&r.worker_id, r.max_jobs, wait, locality).await?;
        Ok(Response::new(v1::LeaseResponse { jobs: jobs.iter().map(wire::job_to_wire).collect() }))
    }

    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let r = request.into_inner();
        let held = wire::held_from_wire(r.jobs)?;
        let verdict = self.coordinator.heartbeat(&r.worker_id, &held).await?;
        Ok(Response::new(v1::HeartbeatResponse {
            revoked: wire::held_to_wire(&verdict.revoked),
            unknown_worker: verdict.unknown_worker,
        }))
    }

    async fn report(&self, request: Request<v1::ReportRequest>) -> Result<Response<v1::ReportResponse>, Status> {
        let r = request.into_inner();
        let job = HeldJob { key: wire::key_from_wire(r.key)?, attempt: r.attempt };
        let report = wire::report_from_wire(r.result)?;
        let verdict = self.coordinator.report(&r.worker_id, &job, &report).await?;
        Ok(Response::new(match verdict {
            ReportVerdict::Accepted => v1::ReportResponse { accepted: true, detail: String::new() },
            ReportVerdict::Ignored(detail) => v1::ReportResponse { accepted: false, detail },
        }))
    }

    async fn release(&self, request: Request<v1::ReleaseRequest>) -> Result<Response<v1::ReleaseResponse>, Status> {
        let r = request.into_inner();
        let held = wire::held_from_wire(r.jobs)?;
        let released = self.coordinator.release(&r.worker_id, &held).await?;
        Ok(Response::new(v1::ReleaseResponse { released }))
    }

    type GetTrajectoryStream = ChunkStream;

    async fn put_file(
        &self,
        request: Request<tonic::Streaming<v1::UploadChunk>>,
    ) -> Result<Response<v1::UploadResponse>, Status> {
        let (digest, content) = receive_upload(request.into_inner()).await?;
        let size = content.len() as u64;
        let stored = self.coordinator.upload(&digest, &content).await?;
        Ok(Response::new(v1::UploadResponse { sha256: digest.into_string(), size, stored }))
    }

    async fn lookup_verdict(
        &self,
        request: Request<v1::VerdictRequest>,
    ) -> Result<Response<v1::VerdictResponse>, Status> {
        let r = request.into_inner();
        let patch = wire::digest_from_wire("patch_sha256", &r.patch_sha256)?;
        let verdict = self.coordinator.verdict(&r.study.into(), &r.task, &patch).await?;
        Ok(Response::new(v1::VerdictResponse { known: verdict.is_some(), resolved: verdict.unwrap_or(false) }))
    }

    /// A file kept in pieces (an upload a launch kept: a problem statement) is read and sent one
    /// piece at a time as the worker takes them; another is read whole, then sent in pieces.
    async fn get_trajectory(
        &self,
        request: Request<v1::GetTrajectoryRequest>,
    ) -> Result<Response<ChunkStream>, Status> {
        let digest = wire::digest_from_wire("digest", &request.into_inner().digest)?;
        let pieces = self.coordinator.file_pieces(&digest).await?;
        if pieces == 0 {
            return Ok(Response::new(chunked(self.coordinator.file(&digest).await?)));
        }
        let coordinator = self.coordinator.clone();
        let stream = futures::stream::unfold(0, move |seq| {
            let (coordinator, digest) = (coordinator.clone(), digest.clone());
            async move {
                if seq == pieces {
                    return None;
                }
                let piece = coordinator.file_piece(&digest, seq).await.map(|data| v1::Chunk { data });
                Some((piece.map_err(Status::from), seq + 1))
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Receive a worker's uploaded file (a patch, a recorded run, fingerprints): the first chunk
/// states its SHA-256 and size, both checked against what arrives (the digest by the caller,
/// which keeps it). Its digest and content.
async fn receive_upload(mut stream: tonic::Streaming<v1::UploadChunk>) -> Result<(Digest, Vec<u8>), Status> {
    let limit = crate::spec::MAX_FILE_BYTES;
    let first = stream.message().await?.ok_or_else(|| Status::invalid_argument("an upload needs a chunk"))?;
    let (digest, size) = (wire::digest_from_wire("sha256", &first.sha256)?, first.size);
    if size > limit {
        return Err(Status::invalid_argument(format!(
            "a file of {size} bytes is over the limit of {} MiB per file",
            limit >> 20
        )));
    }
    // Not reserved from the announced size: a client announcing 64 MiB and sending nothing would
    // hold that much of the coordinator's memory per upload.
    let mut content = first.data;
    while let Some(chunk) = stream.message().await? {
        if (content.len() + chunk.data.len()) as u64 > size {
            return Err(Status::invalid_argument(format!("the upload is longer than the {size} bytes it announced")));
        }
        content.extend_from_slice(&chunk.data);
    }
    if content.len() as u64 != size {
        return Err(Status::invalid_argument(format!(
            "the upload ended after {} of the {size} bytes it announced",
            content.len()
        )));
    }
    Ok((digest, content))
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<v1::Chunk, Status>> + Send>>;

/// A file as a stream of chunks of at most [`vcurve_proto::CHUNK_BYTES`], each within every gRPC
/// message limit whatever the file's size.
fn chunked(bytes: Vec<u8>) -> ChunkStream {
    let chunks: Vec<Result<v1::Chunk, Status>> =
        bytes.chunks(vcurve_proto::CHUNK_BYTES).map(|c| Ok(v1::Chunk { data: c.to_vec() })).collect();
    Box::pin(futures::stream::iter(chunks))
}

struct StudyApi<S> {
    coordinator: Arc<Coordinator<S>>,
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<v1::Progress, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Store> StudyService for StudyApi<S> {
    async fn upload(
        &self,
        request: Request<tonic::Streaming<v1::UploadChunk>>,
    ) -> Result<Response<v1::UploadResponse>, Status> {
        let mut stream = request.into_inner();
        let first = stream.message().await?.ok_or_else(|| Status::invalid_argument("an upload needs a chunk"))?;
        let (digest, size) = (wire::digest_from_wire("sha256", &first.sha256)?, first.size);
        // Stored piece by piece as it arrives (`crate::upload`): never held whole.
        let mut upload = self.coordinator.begin_upload(&digest, size).await?;
        let received = async {
            upload.piece(&first.data).await?;
            while let Some(chunk) = stream.message().await? {
                upload.piece(&chunk.data).await?;
            }
            Ok::<_, Status>(())
        }
        .await;
        if let Err(e) = received {
            upload.abandon().await;
            return Err(e);
        }
        let stored = upload.finish().await?;
        Ok(Response::new(v1::UploadResponse { sha256: digest.into_string(), size, stored }))
    }

    async fn has_files(&self, request: Request<v1::HasFilesRequest>) -> Result<Response<v1::HasFilesResponse>, Status> {
        let wanted = request.into_inner().sha256;
        let wanted: Vec<Digest> =
            wanted.iter().map(|d| wire::digest_from_wire("sha256", d)).collect::<Result<_, _>>()?;
        let missing = self.coordinator.missing_files(&wanted).await?;
        Ok(Response::new(v1::HasFilesResponse { missing: missing.into_iter().map(Digest::into_string).collect() }))
    }

    async fn launch(&self, request: Request<v1::LaunchRequest>) -> Result<Response<v1::LaunchResponse>, Status> {
        let r = request.into_inner();
        let files: BTreeMap<String, Digest> = r
            .files
            .into_iter()
            .map(|(path, d)| Ok((path.clone(), wire::digest_from_wire(&format!("files[{path:?}]"), &d)?)))
            .collect::<Result<_, Status>>()?;
        let study = self.coordinator.launch_uploaded(&r.spec_yaml, &files).await?;
        Ok(Response::new(v1::LaunchResponse { study: study.into_string() }))
    }

    async fn get_progress(&self, request: Request<v1::ProgressRequest>) -> Result<Response<v1::Progress>, Status> {
        let p = self.coordinator.progress(&request.into_inner().study.into()).await?;
        Ok(Response::new(wire::progress_to_wire(&p)))
    }

    type WatchProgressStream = ProgressStream;

    async fn watch_progress(&self, request: Request<v1::ProgressRequest>) -> Result<Response<ProgressStream>, Status> {
        let study = StudyId::from(request.into_inner().study);
        // Fail fast on an unknown study, before the stream starts.
        self.coordinator.progress(&study).await?;
        let coordinator = self.coordinator.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let item = coordinator.progress(&study).await.map(|p| wire::progress_to_wire(&p)).map_err(Status::from);
                let finished = matches!(&item, Ok(p) if p.state != StudyState::Running.as_str()) || item.is_err();
                if tx.send(item).await.is_err() || finished {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type ExportFilesStream = Pin<Box<dyn Stream<Item = Result<v1::ExportChunk, Status>> + Send>>;

    /// The export is rendered whole (the renderer makes whole files), then sent in pieces as the
    /// client takes them, each file dropped once sent: no message holds the export.
    async fn export_files(
        &self,
        request: Request<v1::ExportRequest>,
    ) -> Result<Response<Self::ExportFilesStream>, Status> {
        let files = self.coordinator.export(&request.into_inner().study.into()).await?;
        let chunks = files.into_iter().flat_map(|(name, contents)| vcurve_proto::export_chunks(name, contents)).map(Ok);
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    async fn cancel(&self, request: Request<v1::CancelRequest>) -> Result<Response<v1::CancelResponse>, Status> {
        let state = self.coordinator.cancel(&request.into_inner().study.into()).await?;
        Ok(Response::new(v1::CancelResponse { state: state.as_str().to_string() }))
    }

    async fn list_studies(
        &self,
        _: Request<v1::ListStudiesRequest>,
    ) -> Result<Response<v1::ListStudiesResponse>, Status> {
        let studies = self.coordinator.list().await?;
        Ok(Response::new(v1::ListStudiesResponse { studies: studies.iter().map(wire::progress_to_wire).collect() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_listener_needs_two_distinct_tokens() {
        let tokens = |worker: Option<&str>, client: Option<&str>| Tokens {
            worker: worker.map(str::to_owned),
            client: client.map(str::to_owned),
        };
        let public: SocketAddr = "0.0.0.0:7070".parse().unwrap();
        let loopback: SocketAddr = "127.0.0.1:7070".parse().unwrap();
        assert!(check_exposure(public, &tokens(Some("w"), Some("c"))).is_ok());
        for missing in [tokens(None, Some("c")), tokens(Some("w"), None), tokens(None, None)] {
            assert!(matches!(check_exposure(public, &missing), Err(ServeError::TokensRequired(_))));
        }
        let err = check_exposure(public, &tokens(Some("s3cret"), Some("s3cret"))).unwrap_err();
        assert!(matches!(err, ServeError::SameToken(_)), "{err}");
        assert!(!err.to_string().contains("s3cret"), "the message shows the token: {err}");
        // On loopback, one token (or none) for both roles is the user's call.
        assert!(check_exposure(loopback, &tokens(Some("same"), Some("same"))).is_ok());
        assert!(check_exposure(loopback, &tokens(None, None)).is_ok());
    }
}
