//! Connecting to a coordinator as a client (launch, status, export, cancel) — shared by the CLI
//! and the tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::{BoxFuture, Service, StdError, http};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use vcurve_proto::v1;
use vcurve_proto::v1::study_service_client::StudyServiceClient;

/// How to reach a coordinator.
#[derive(Clone, Default)]
pub struct Connection {
    pub url: String,
    pub token: Option<String>,
    /// PEM CA certificate to trust for `https://` URLs.
    pub tls_ca: Option<PathBuf>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls_ca", &self.tls_ca)
            .finish()
    }
}

/// Context for an error of a call to the coordinator: names it.
pub(crate) fn at(connection: &Connection) -> impl Fn() -> String + '_ {
    move || format!("the coordinator at {}", connection.url)
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

pub type StudyClient = StudyServiceClient<InterceptedService<CoordinatorChannel, Bearer>>;

/// Why a coordinator could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid coordinator URL {url:?}: {source}")]
    Url { url: String, source: tonic::transport::Error },
    #[error("the CA certificate: {reason}")]
    Ca { reason: String },
    #[error("the CA certificate {path} cannot be used: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error("--tls-ca is set but the coordinator URL {url} is not https://")]
    CaWithoutHttps { url: String },
    #[error("cannot connect to the coordinator at {url}: {source}")]
    Connect { url: String, source: tonic::transport::Error },
    /// The coordinator speaks TLS and the URL says plaintext, or the reverse (one line saying what
    /// to change).
    #[error("{0}")]
    Protocol(String),
    #[error("the token contains characters not allowed in a header")]
    Token,
}

/// Open a channel to the coordinator.
pub async fn channel(c: &Connection) -> Result<CoordinatorChannel, ConnectError> {
    let mut endpoint =
        Endpoint::from_shared(c.url.clone()).map_err(|source| ConnectError::Url { url: c.url.clone(), source })?;
    let https = c.url.starts_with("https://");
    if c.tls_ca.is_some() && !https {
        return Err(ConnectError::CaWithoutHttps { url: c.url.clone() });
    }
    if https {
        // Without --tls-ca only the roots built into tonic are trusted (none in vcurve's build).
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(path) = &c.tls_ca {
            let pem = vcurve_worker::lease::tls::read_pem(path).map_err(|reason| ConnectError::Ca { reason })?;
            // tonic skips what does not parse, which would leave nothing to trust.
            vcurve_worker::lease::tls::check_ca(&pem)
                .map_err(|reason| ConnectError::BadCa { path: path.clone(), reason })?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls).map_err(|source| ConnectError::Url { url: c.url.clone(), source })?;
    }
    match endpoint.connect().await {
        Ok(channel) => Ok(CoordinatorChannel { channel, url: c.url.as_str().into() }),
        Err(source) => Err(match protocol_mismatch(&c.url, &source).await {
            Some(line) => ConnectError::Protocol(line),
            None => ConnectError::Connect { url: c.url.clone(), source },
        }),
    }
}

/// A channel to the coordinator. A call that fails in the transport because the coordinator
/// speaks TLS and the URL says `http://` (or the reverse) fails with a status saying so, instead of
/// "transport error".
#[derive(Clone, Debug)]
pub struct CoordinatorChannel {
    channel: Channel,
    url: Arc<str>,
}

impl Service<http::Request<tonic::body::Body>> for CoordinatorChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = StdError;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let response = self.channel.call(request);
        let url = self.url.clone();
        Box::pin(async move {
            match response.await {
                Ok(response) => Ok(response),
                Err(error) => Err(match protocol_mismatch(&url, &error).await {
                    Some(line) => Box::new(tonic::Status::unavailable(line)) as StdError,
                    None => error.into(),
                }),
            }
        })
    }
}

/// When a connection to the coordinator at `url` failed with `error`: whether that is because
/// only one side speaks TLS, as one line saying what to change.
async fn protocol_mismatch(url: &str, error: &(dyn std::error::Error + Send + Sync + 'static)) -> Option<String> {
    if url.starts_with("https://") {
        return answered_not_tls(error)
            .then(|| format!("the coordinator at {url} does not speak TLS: use http://, without --tls-ca"));
    }
    // A plaintext HTTP/2 preface sent to a TLS server only breaks the connection; ask it.
    let authority = url.strip_prefix("http://")?.split('/').next()?;
    vcurve_worker::lease::tls::speaks_tls(authority)
        .await
        .then(|| format!("the coordinator at {url} speaks TLS: use https:// and --tls-ca"))
}

/// Whether rustls failed because the answer to its ClientHello was not TLS at all.
fn answered_not_tls(error: &(dyn std::error::Error + 'static)) -> bool {
    matches!(vcurve_worker::lease::tls::rustls_error(error), Some(rustls::Error::InvalidMessage(_)))
}

/// The bearer interceptor for a token.
pub fn bearer(token: Option<&str>) -> Result<Bearer, ConnectError> {
    token.map(|t| format!("Bearer {t}").parse().map_err(|_| ConnectError::Token)).transpose().map(Bearer)
}

pub async fn study_client(c: &Connection) -> Result<StudyClient, ConnectError> {
    let channel = channel(c).await?;
    Ok(StudyServiceClient::with_interceptor(channel, bearer(c.token.as_deref())?).max_decoding_message_size(256 << 20))
}

/// A study's export files as the coordinator sends them (in pieces, put back together here), in
/// its order. For a caller that reads the files; [`crate::commands::export_into`] writes them.
pub async fn export(client: &mut StudyClient, study: &str) -> Result<Vec<(String, Vec<u8>)>, tonic::Status> {
    let mut stream = client.export_files(v1::ExportRequest { study: study.to_owned() }).await?.into_inner();
    let mut files = vcurve_proto::ExportAssembler::default();
    while let Some(chunk) = stream.message().await? {
        files.push(chunk);
    }
    Ok(files.finish())
}

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{path}: {size} bytes is over the coordinator's limit of {limit} MiB per file")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("uploading {path}: {status}")]
    Upload { path: String, status: tonic::Status },
    #[error("the coordinator refused the study: {0}")]
    Refused(tonic::Status),
}

/// How many times [`upload_and_launch`] uploads what the coordinator lacks and launches, while the
/// launch is refused for a file not uploaded (another client's launch consumed an upload this one
/// relied on, or an upload expired).
const LAUNCH_ROUNDS: u32 = 3;

/// Upload every file a spec references that the coordinator does not have yet (by SHA-256, in
/// chunks, so no message nears a gRPC limit whatever the file's size), then launch the spec
/// naming each file by its digest. Returns the study id.
pub async fn upload_and_launch(
    client: &mut StudyClient,
    yaml: String,
    files: &BTreeMap<String, String>,
) -> Result<String, LaunchError> {
    let limit = vcurve_coordinator::spec::MAX_FILE_BYTES;
    let mut digests = BTreeMap::new();
    for (path, text) in files {
        if text.len() as u64 > limit {
            return Err(LaunchError::TooLarge { path: path.clone(), size: text.len() as u64, limit: limit >> 20 });
        }
        digests.insert(path.clone(), vcurve_record::trajectory::sha256_hex(text.as_bytes()));
    }
    let wanted: Vec<String> =
        digests.values().cloned().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let mut round = 1;
    loop {
        let missing: std::collections::BTreeSet<String> = client
            .has_files(v1::HasFilesRequest { sha256: wanted.clone() })
            .await
            .map_err(LaunchError::Refused)?
            .into_inner()
            .missing
            .into_iter()
            .collect();
        let mut sent = std::collections::BTreeSet::new();
        for (path, digest) in &digests {
            if !missing.contains(digest) || !sent.insert(digest.clone()) {
                continue;
            }
            let bytes = files[path].as_bytes();
            let chunks = vcurve_proto::upload_chunks(bytes, digest);
            client
                .upload(futures::stream::iter(chunks))
                .await
                .map_err(|status| LaunchError::Upload { path: path.clone(), status })?;
        }
        let request = v1::LaunchRequest { spec_yaml: yaml.clone(), files: digests.clone().into_iter().collect() };
        match client.launch(request).await {
            Ok(launched) => return Ok(launched.into_inner().study),
            Err(status) if status.code() == tonic::Code::FailedPrecondition && round < LAUNCH_ROUNDS => round += 1,
            Err(status) => return Err(LaunchError::Refused(status)),
        }
    }
}

/// Read a token from a file (trimmed), or from an environment variable when no file is given.
pub fn read_token(file: Option<&Path>, env: &str) -> anyhow::Result<Option<String>> {
    let token = match file {
        Some(path) => Some(read_secret_file(path, "token")?),
        None => std::env::var(env).ok().map(|t| t.trim().to_string()),
    };
    match token {
        Some(t) if t.is_empty() => {
            anyhow::bail!("the token (from {}) is empty", file.map_or(env.to_string(), |p| p.display().to_string()))
        }
        t => Ok(t),
    }
}

/// The text of a secret file (a token, a store URL), trimmed; errors name `what` and the file.
/// Empty text is returned as it is, for the caller to refuse in its own words.
pub fn read_secret_file(path: &Path, what: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let bytes = crate::input::read_small_file(path).with_context(|| format!("the {what} file {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("the {what} file {} is not UTF-8 text", path.display()))?;
    Ok(text.trim().to_string())
}

/// How to reach a coordinator as a client.
#[derive(Debug, clap::Args)]
pub struct Remote {
    /// The coordinator's URL.
    #[arg(long, env = "VCURVE_COORDINATOR", default_value = "http://127.0.0.1:7070")]
    pub coordinator: String,
    /// File holding the client bearer token [default: $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https:// coordinator.
    #[arg(long, env = "VCURVE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

impl Remote {
    pub fn connection(&self) -> anyhow::Result<Connection> {
        Ok(Connection {
            url: self.coordinator.clone(),
            token: read_token(self.token_file.as_deref(), "VCURVE_CLIENT_TOKEN")?,
            tls_ca: self.tls_ca.clone(),
        })
    }
}
