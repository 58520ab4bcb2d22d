//! Connecting to a coordinator as a client (launch, status, export, cancel) — shared by the CLI
//! and the tests.

use std::path::{Path, PathBuf};

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
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

pub type StudyClient = StudyServiceClient<InterceptedService<Channel, Bearer>>;

/// Why a coordinator could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid coordinator URL {url:?}: {source}")]
    Url { url: String, source: tonic::transport::Error },
    #[error("cannot read the CA certificate {path}: {source}")]
    Ca { path: PathBuf, source: std::io::Error },
    #[error("cannot connect to the coordinator at {url}: {source}")]
    Connect { url: String, source: tonic::transport::Error },
    #[error("the token contains characters not allowed in a header")]
    Token,
}

/// Open a channel to the coordinator.
pub async fn channel(c: &Connection) -> Result<Channel, ConnectError> {
    let mut endpoint =
        Endpoint::from_shared(c.url.clone()).map_err(|source| ConnectError::Url { url: c.url.clone(), source })?;
    if let Some(path) = &c.tls_ca {
        let pem = std::fs::read(path).map_err(|source| ConnectError::Ca { path: path.clone(), source })?;
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            .map_err(|source| ConnectError::Url { url: c.url.clone(), source })?;
    }
    endpoint.connect().await.map_err(|source| ConnectError::Connect { url: c.url.clone(), source })
}

/// The bearer interceptor for a token.
pub fn bearer(token: Option<&str>) -> Result<Bearer, ConnectError> {
    token.map(|t| format!("Bearer {t}").parse().map_err(|_| ConnectError::Token)).transpose().map(Bearer)
}

pub async fn study_client(c: &Connection) -> Result<StudyClient, ConnectError> {
    let channel = channel(c).await?;
    Ok(StudyServiceClient::with_interceptor(channel, bearer(c.token.as_deref())?).max_decoding_message_size(256 << 20))
}

/// Read a token from a file (trimmed), or from an environment variable when no file is given.
pub fn read_token(file: Option<&Path>, env: &str) -> anyhow::Result<Option<String>> {
    use anyhow::Context;
    let token = match file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var(env).ok().map(|t| t.trim().to_string()),
    };
    match token {
        Some(t) if t.is_empty() => {
            anyhow::bail!("the token (from {}) is empty", file.map_or(env.to_string(), |p| p.display().to_string()))
        }
        t => Ok(t),
    }
}
