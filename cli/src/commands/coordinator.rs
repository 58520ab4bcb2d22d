//! `vcurve coordinator`: serve the adaptive schedule over a store, for workers and clients, with
//! the live dashboard and the Prometheus endpoint when asked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::server::{self, ServeOptions, Tokens};
use vcurve_coordinator::store::{LeasePolicy, SqlStore};

use super::serving::shutdown_signal;
use crate::client;
use crate::store_url::redact_url;

#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The store: postgres://USER:PASSWORD@HOST/DB, or sqlite://PATH for the embedded store.
    #[arg(long, env = "VCURVE_STORE", default_value = "sqlite://vcurve.sqlite")]
    pub store: String,
    /// File holding the store URL instead of --store (a mounted secret: the URL carries the
    /// database password).
    #[arg(long, env = "VCURVE_STORE_FILE", value_name = "FILE")]
    pub store_file: Option<PathBuf>,
    /// Address to listen on. A non-loopback address requires both tokens.
    #[arg(long, env = "VCURVE_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// File holding the worker bearer token [default: $VCURVE_WORKER_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub worker_token_file: Option<PathBuf>,
    /// File holding the client bearer token [default: $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub client_token_file: Option<PathBuf>,
    /// PEM certificate chain: serve TLS (with --tls-key).
    #[arg(long, env = "VCURVE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "VCURVE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// A lease not extended by a heartbeat for this long expires and its key is re-issued.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(200..=86_400_000))]
    pub lease_timeout_ms: u64,
    /// How often workers heartbeat.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(50..=3_600_000))]
    pub heartbeat_ms: u64,
    /// Also serve the live dashboard (a read-only web page; client token required) here.
    #[arg(long, env = "VCURVE_DASHBOARD", value_name = "ADDR")]
    pub dashboard: Option<String>,
    /// Also serve Prometheus metrics at http://ADDR/metrics (client token as a bearer token when
    /// one is set; required on a non-loopback address).
    #[arg(long, env = "VCURVE_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,
}

impl CoordinatorArgs {
    /// The store URL: the content of --store-file (trimmed) when given, else --store.
    pub fn store_url(&self) -> anyhow::Result<String> {
        let Some(path) = &self.store_file else { return Ok(self.store.clone()) };
        let url = client::read_secret_file(path, "store")?;
        if url.is_empty() {
            bail!("the store file {} is empty (it should hold postgres://USER:PASSWORD@HOST/DB)", path.display());
        }
        Ok(url)
    }
}

/// `vcurve coordinator`: its arguments (and tokens) read, serve until SIGTERM or Ctrl-C.
pub async fn run(a: CoordinatorArgs) -> anyhow::Result<()> {
    let tokens = Tokens {
        worker: client::read_token(a.worker_token_file.as_deref(), "VCURVE_WORKER_TOKEN")?,
        client: client::read_token(a.client_token_file.as_deref(), "VCURVE_CLIENT_TOKEN")?,
    };
    run_coordinator(CoordinatorSettings {
        store: a.store_url()?,
        listen: a.listen,
        tokens,
        tls_cert: a.tls_cert,
        tls_key: a.tls_key,
        lease_timeout: Duration::from_millis(a.lease_timeout_ms),
        heartbeat_interval: Duration::from_millis(a.heartbeat_ms),
        dashboard: a.dashboard,
        metrics: a.metrics,
    })
    .await
}

/// What `vcurve coordinator` needs.
#[derive(Debug, Clone)]
pub struct CoordinatorSettings {
    pub store: String,
    pub listen: String,
    pub tokens: Tokens,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub lease_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Where to serve the live dashboard, if anywhere.
    pub dashboard: Option<String>,
    /// Where to serve the Prometheus endpoint `/metrics`, if anywhere.
    pub metrics: Option<String>,
}

pub async fn run_coordinator(args: CoordinatorSettings) -> anyhow::Result<()> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(read_tls_files(cert, key)?),
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    if args.heartbeat_interval >= args.lease_timeout {
        bail!(
            "--heartbeat-ms ({} ms) must be shorter than --lease-timeout-ms ({} ms), or every lease expires between heartbeats",
            args.heartbeat_interval.as_millis(),
            args.lease_timeout.as_millis()
        );
    }
    let has_client_token = args.tokens.client.is_some();
    let config = vcurve_coordinator::service::ServiceConfig {
        grpc: args.listen.clone(),
        serve: ServeOptions { tokens: args.tokens, tls },
        dashboard: args.dashboard.clone(),
        metrics: args.metrics.clone(),
    };
    // Every listener bound and checked before the store is opened: a coordinator that refuses to
    // start has created and migrated nothing.
    let bound = vcurve_coordinator::service::Bound::bind(config).await?;
    let store = SqlStore::connect(&args.store)
        .await
        .with_context(|| format!("cannot open the store {}", redact_url(&args.store)))?;
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: args.lease_timeout.as_millis() as i64 },
        heartbeat_interval: args.heartbeat_interval,
        ..Timing::default()
    };
    let coordinator = Coordinator::new(store.clone(), timing, crate::render::ReportRenderer::shared());
    let service = match bound.serve(coordinator) {
        Ok(service) => service,
        Err(e) => {
            store.close().await;
            return Err(e.into());
        }
    };
    eprintln!("vcurve coordinator listening on {} (store {})", service.grpc_addr(), redact_url(&args.store));
    if let Some(local) = service.dashboard_addr() {
        eprintln!("vcurve dashboard on http://{local}/{}", if has_client_token { "?token=…" } else { "" });
    }
    if let Some(local) = service.metrics_addr() {
        eprintln!("vcurve metrics on http://{local}/metrics");
    }
    tokio::select! {
        () = shutdown_signal() => {}
        () = service.stopping() => {}
    }
    // Every listener stopped and the store closed, whatever stopped them, so SQLite's write-ahead
    // log is in the file.
    service.shutdown().await?;
    Ok(())
}

/// Read `--tls-cert` and `--tls-key` and check that they can be served, before the store is opened
/// or anything listens; the error names the file at fault.
fn read_tls_files(cert: &Path, key: &Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let cert_pem = crate::input::read_small_file(cert).with_context(|| format!("--tls-cert {}", cert.display()))?;
    let key_pem = crate::input::read_small_file(key).with_context(|| format!("--tls-key {}", key.display()))?;
    if let Err(e) = server::check_tls(&cert_pem, &key_pem) {
        let files = match e.file() {
            server::TlsFile::Certificate => format!("--tls-cert {}", cert.display()),
            server::TlsFile::Key => format!("--tls-key {}", key.display()),
            server::TlsFile::Both => format!("--tls-cert {} and --tls-key {}", cert.display(), key.display()),
        };
        bail!("{files}: {e}");
    }
    Ok((cert_pem, key_pem))
}

/// Keep `Arc` in scope for callers that build coordinators by hand.
pub type SharedCoordinator = Arc<Coordinator<SqlStore>>;
