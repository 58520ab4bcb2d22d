//! The coordinator as one running service: its gRPC listener, its optional dashboard and metrics
//! listeners, and the store they all read — started from one [`ServiceConfig`], stopped together.
//!
//! Every process that serves a coordinator (`vcurve coordinator`, `vcurve demo`, `vcurve demo
//! --docker`, the tests' in-process cluster) goes through [`Service`], so there is one shutdown:
//!
//! - [`Service::shutdown`] stops every listener and closes the store, whatever stopped first
//!   (a signal, [`Service::stop`], a listener that failed) and whether or not a listener failed.
//! - [`Service::stop_serving`] stops every listener but hands back the store, open, in a
//!   [`Stopped`] for the reads a caller does after serving (`vcurve demo --docker` reads its
//!   study from the store after its worker and server are gone); [`Stopped::close`] or
//!   [`Stopped::close_after`] closes it.
//!
//! Closing matters on SQLite: it checkpoints the write-ahead log into the database file and
//! removes `-wal`, so the file alone is the whole store. A [`Service`] or [`Stopped`] dropped
//! without either stops its listeners and closes the store on the runtime in the background (best
//! effort: a runtime that is itself shutting down may not get to it).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::core::Coordinator;
use crate::server::{self, ServeError, ServeOptions};
use crate::store::SqlStore;

/// What to serve, and where. Addresses are anything [`TcpListener::bind`] takes; port 0 picks a
/// free port ([`Service::grpc_addr`] and the others say which).
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The gRPC listener (worker and study services).
    pub grpc: String,
    /// Tokens and TLS of the gRPC listener; the client token also guards the dashboard and the
    /// metrics.
    pub serve: ServeOptions,
    /// The dashboard's listener, if any.
    pub dashboard: Option<String>,
    /// The metrics listener (`/metrics`), if any.
    pub metrics: Option<String>,
}

impl ServiceConfig {
    /// gRPC on `grpc`, without tokens, TLS, dashboard or metrics.
    pub fn new(grpc: impl Into<String>) -> ServiceConfig {
        ServiceConfig { grpc: grpc.into(), serve: ServeOptions::default(), dashboard: None, metrics: None }
    }

    /// gRPC on a free loopback port, nothing else.
    pub fn loopback() -> ServiceConfig {
        ServiceConfig::new("127.0.0.1:0")
    }
}

/// Which listener a [`ServiceError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Grpc,
    Dashboard,
    Metrics,
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Listener::Grpc => "gRPC",
            Listener::Dashboard => "dashboard",
            Listener::Metrics => "metrics",
        })
    }
}

/// Why the service would not start, or how a listener stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("cannot listen on {addr}: {source}")]
    BindGrpc { addr: String, source: std::io::Error },
    #[error("cannot serve the dashboard on {addr}: {source}")]
    BindDashboard { addr: String, source: std::io::Error },
    #[error("cannot serve metrics on {addr}: {source}")]
    BindMetrics { addr: String, source: std::io::Error },
    #[error("refusing to serve the dashboard on {0} without a client token")]
    DashboardTokenRequired(SocketAddr),
    #[error("refusing to serve metrics on {0} without a client token")]
    MetricsTokenRequired(SocketAddr),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("the {0} listener failed: {1}")]
    Http(Listener, std::io::Error),
    #[error("the {0} listener panicked or was cancelled: {1}")]
    Task(Listener, tokio::task::JoinError),
    #[error("cannot read a listener's address: {0}")]
    Io(#[from] std::io::Error),
}

type Task = (Listener, JoinHandle<Result<(), ServiceError>>);

/// A running coordinator service; see the [module](self) for how it stops.
pub struct Service {
    coordinator: Arc<Coordinator<SqlStore>>,
    grpc_addr: SocketAddr,
    dashboard_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    tls: bool,
    stop: CancellationToken,
    /// Taken by [`Service::stop_serving`]; what is left at drop is stopped in the background.
    tasks: Vec<Task>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("grpc_addr", &self.grpc_addr)
            .field("dashboard_addr", &self.dashboard_addr)
            .field("metrics_addr", &self.metrics_addr)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Every listener of a [`ServiceConfig`] bound and checked, nothing served yet: what a process
/// makes before it opens its store, so that a coordinator that cannot serve (an address taken or
/// malformed, a public listener without its tokens, TLS files that do not go together) refuses to
/// start before it has created or migrated anything. [`Bound::serve`] serves a coordinator on them.
pub struct Bound {
    grpc: TcpListener,
    grpc_addr: SocketAddr,
    serve: ServeOptions,
    dashboard: Option<TcpListener>,
    metrics: Option<TcpListener>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("grpc_addr", &self.grpc_addr).finish_non_exhaustive()
    }
}

impl Bound {
    /// Bind every listener of `config` and check that each may be exposed where it is bound
    /// (tokens off loopback, TLS files that go together).
    pub async fn bind(config: ServiceConfig) -> Result<Bound, ServiceError> {
        let ServiceConfig { grpc, serve, dashboard, metrics } = config;
        let grpc_listener =
            bind(&grpc).await.map_err(|source| ServiceError::BindGrpc { addr: grpc.clone(), source })?;
        let grpc_addr = grpc_listener.local_addr()?;
        server::check_exposure(grpc_addr, &serve.tokens)?;
        if let Some((cert, key)) = &serve.tls {
            server::check_tls(cert, key).map_err(ServeError::from)?;
        }
        let has_client_token = serve.tokens.client.is_some();
        let dashboard_listener = match &dashboard {
            Some(addr) => {
                let l =
                    bind(addr).await.map_err(|source| ServiceError::BindDashboard { addr: addr.clone(), source })?;
                let local = l.local_addr()?;
                if !local.ip().is_loopback() && !has_client_token {
                    return Err(ServiceError::DashboardTokenRequired(local));
                }
                Some(l)
            }
            None => None,
        };
        let metrics_listener = match &metrics {
            Some(addr) => {
                let l = bind(addr).await.map_err(|source| ServiceError::BindMetrics { addr: addr.clone(), source })?;
                let local = l.local_addr()?;
                if !local.ip().is_loopback() && !has_client_token {
                    return Err(ServiceError::MetricsTokenRequired(local));
                }
                Some(l)
            }
            None => None,
        };
        Ok(Bound { grpc: grpc_listener, grpc_addr, serve, dashboard: dashboard_listener, metrics: metrics_listener })
    }

    /// The address the gRPC listener is bound to.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Serve `coordinator` on the listeners.
    pub fn serve(self, coordinator: Arc<Coordinator<SqlStore>>) -> Result<Service, ServiceError> {
        let Bound { grpc: grpc_listener, grpc_addr, serve, dashboard: dashboard_listener, metrics: metrics_listener } =
            self;
        let client_token = serve.tokens.client.clone();
        let dashboard_addr = dashboard_listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let metrics_addr = metrics_listener.as_ref().map(TcpListener::local_addr).transpose()?;

        let stop = CancellationToken::new();
        let tls = serve.tls.is_some();
        let mut service = Service {
            coordinator: coordinator.clone(),
            grpc_addr,
            dashboard_addr,
            metrics_addr,
            tls,
            stop: stop.clone(),
            tasks: Vec::new(),
        };
        service.spawn(Listener::Grpc, {
            let (coordinator, stop) = (coordinator.clone(), stop.clone());
            async move {
                server::serve(coordinator, grpc_listener, serve, async move { stop.cancelled().await })
                    .await
                    .map_err(ServiceError::from)
            }
        });
        type MakeRouter = fn(Arc<Coordinator<SqlStore>>, Option<String>) -> crate::http::Router;
        let http: [(Listener, Option<TcpListener>, MakeRouter, &'static str); 2] = [
            (Listener::Dashboard, dashboard_listener, crate::dashboard::router, "dashboard"),
            (Listener::Metrics, metrics_listener, crate::metrics::router, "metrics"),
        ];
        for (which, listener, router, what) in http {
            let Some(listener) = listener else { continue };
            let router = router(coordinator.clone(), client_token.clone());
            let stop = stop.clone();
            service.spawn(which, async move {
                crate::http::serve(listener, router, what, async move { stop.cancelled().await })
                    .await
                    .map_err(|e| ServiceError::Http(which, e))
            });
        }
        Ok(service)
    }
}

impl Service {
    /// Bind every listener of `config`, check that each may be exposed where it is bound (tokens
    /// off loopback, TLS files that go together), then serve `coordinator` on them ([`Bound`]).
    /// Nothing serves unless all of it does; on an error the store is left open for the caller
    /// (who opened it) — [`SqlStore::close`] it, or hand it to another service.
    pub async fn start(
        coordinator: Arc<Coordinator<SqlStore>>,
        config: ServiceConfig,
    ) -> Result<Service, ServiceError> {
        Bound::bind(config).await?.serve(coordinator)
    }

    /// Run listener `which`; as it ends, for whatever reason, it stops the others: a service is
    /// whole or stopping.
    fn spawn(&mut self, which: Listener, serve: impl Future<Output = Result<(), ServiceError>> + Send + 'static) {
        let stop = self.stop.clone();
        self.tasks.push((
            which,
            tokio::spawn(async move {
                let served = serve.await;
                stop.cancel();
                served
            }),
        ));
    }

    /// The coordinator it serves.
    pub fn coordinator(&self) -> &Arc<Coordinator<SqlStore>> {
        &self.coordinator
    }

    /// The address the gRPC listener is bound to.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// A URL to reach the gRPC listener from this machine: `http://` or `https://`, with a
    /// loopback address in place of an unspecified one (`0.0.0.0`, `::`).
    pub fn grpc_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", reachable(self.grpc_addr))
    }

    /// The address the dashboard is bound to, if it is served.
    pub fn dashboard_addr(&self) -> Option<SocketAddr> {
        self.dashboard_addr
    }

    /// The address the metrics listener is bound to, if it is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// A token that stops the service when cancelled (as [`Service::stop`] does), and that is
    /// cancelled once any listener has ended: other servers of a process can stop with it.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Ask every listener to stop (without waiting; [`Service::shutdown`] waits).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once the service is stopping: [`Service::stop`] or its token was called, or a
    /// listener ended (an error, which [`Service::shutdown`] returns).
    pub async fn stopping(&self) {
        self.stop.cancelled().await
    }

    /// Stop every listener and close the store; the first listener error, if any (the store is
    /// closed either way).
    pub async fn shutdown(self) -> Result<(), ServiceError> {
        self.stop_serving().await.close().await
    }

    /// Stop every listener, waiting for each; the store stays open in the [`Stopped`] for reads
    /// after serving.
    pub async fn stop_serving(mut self) -> Stopped {
        self.stop.cancel();
        let tasks = std::mem::take(&mut self.tasks);
        let served = join(tasks).await;
        Stopped { coordinator: Some(self.coordinator.clone()), served }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.cancel();
        if self.tasks.is_empty() {
            return;
        }
        let tasks = std::mem::take(&mut self.tasks);
        let store = self.coordinator.store().clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = join(tasks).await;
                store.close().await;
            });
        }
    }
}

/// Wait for every listener; the first error.
async fn join(tasks: Vec<Task>) -> Result<(), ServiceError> {
    let mut first = Ok(());
    for (which, task) in tasks {
        let result = match task.await {
            Ok(served) => served,
            Err(e) => Err(ServiceError::Task(which, e)),
        };
        if let Err(e) = result {
            tracing::warn!(listener = %which, error = %e, "listener stopped with an error");
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from(([127, 0, 0, 1], a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
        a => a,
    }
}

/// A service whose listeners have all stopped, its store still open for reads after serving.
/// [`Stopped::close`] (or [`Stopped::close_after`]) closes the store and says how serving ended;
/// dropped, it closes the store in the background.
pub struct Stopped {
    coordinator: Option<Arc<Coordinator<SqlStore>>>,
    served: Result<(), ServiceError>,
}

impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stopped").field("served", &self.served).finish_non_exhaustive()
    }
}

impl Stopped {
    /// The coordinator, over the still-open store.
    pub fn coordinator(&self) -> &Arc<Coordinator<SqlStore>> {
        self.coordinator.as_ref().expect("open until closed")
    }

    /// How serving ended: the first listener error, if any.
    pub fn served(&self) -> Result<(), &ServiceError> {
        self.served.as_ref().map(|_| ())
    }

    /// Close the store; how serving ended.
    pub async fn close(mut self) -> Result<(), ServiceError> {
        if let Some(c) = self.coordinator.take() {
            c.store().close().await;
        }
        std::mem::replace(&mut self.served, Ok(()))
    }

    /// Run the last reads `f` on the coordinator, then close the store whatever they returned;
    /// their result, and how serving ended.
    pub async fn close_after<T>(
        self,
        f: impl AsyncFnOnce(&Arc<Coordinator<SqlStore>>) -> T,
    ) -> (T, Result<(), ServiceError>) {
        let read = f(self.coordinator()).await;
        (read, self.close().await)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(c) = self.coordinator.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { c.store().close().await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Timing;
    use crate::server::Tokens;
    use crate::store::Store;
    use crate::testing::no_renderer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn on_file(dir: &std::path::Path) -> Arc<Coordinator<SqlStore>> {
        let url = format!("sqlite://{}", dir.join("c.sqlite").display());
        Coordinator::new(SqlStore::connect(&url).await.unwrap(), Timing::default(), no_renderer())
    }

    fn wal(dir: &std::path::Path) -> std::path::PathBuf {
        dir.join("c.sqlite-wal")
    }

    fn every_listener() -> ServiceConfig {
        ServiceConfig {
            dashboard: Some("127.0.0.1:0".into()),
            metrics: Some("127.0.0.1:0".into()),
            ..ServiceConfig::loopback()
        }
    }

    /// An HTTP/1.0 GET of `path`: the status line.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        text.lines().next().unwrap_or_default().to_string()
    }

    async fn refused(addr: SocketAddr) -> bool {
        tokio::net::TcpStream::connect(addr).await.is_err()
    }

    #[tokio::test]
    async fn serves_every_listener_and_shutdown_stops_them_and_closes_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let coordinator = on_file(dir.path()).await;
        let (yaml, files) =
            crate::testing::spec("s", "", &[crate::testing::Tr { id: "t", length: 10, cliff: 5, p: 0.8, labels: "" }]);
        coordinator.launch(&yaml, &files).await.unwrap();
        let service = Service::start(coordinator, every_listener()).await.unwrap();
        let (grpc, dashboard, metrics) =
            (service.grpc_addr(), service.dashboard_addr().unwrap(), service.metrics_addr().unwrap());
        assert_ne!(grpc.port(), 0);
        assert_eq!(service.grpc_url(), format!("http://{grpc}"));
        assert!(get(metrics, "/metrics").await.contains("200"));
        assert!(get(dashboard, "/api/studies").await.contains("200"));
        tokio::net::TcpStream::connect(grpc).await.unwrap();
        assert!(wal(dir.path()).exists(), "a written SQLite store has its write-ahead log while open");
        service.shutdown().await.unwrap();
        for addr in [grpc, dashboard, metrics] {
            assert!(refused(addr).await, "{addr} still listens");
        }
        assert!(!wal(dir.path()).exists(), "shutdown closes the store, checkpointing its -wal");
    }

    #[tokio::test]
    async fn serves_grpc_alone() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::start(on_file(dir.path()).await, ServiceConfig::loopback()).await.unwrap();
        assert!(service.dashboard_addr().is_none() && service.metrics_addr().is_none());
        let grpc = service.grpc_addr();
        service.stop();
        service.stopping().await;
        service.shutdown().await.unwrap();
        assert!(refused(grpc).await);
        assert!(!wal(dir.path()).exists());
    }

    #[tokio::test]
    async fn stop_serving_keeps_the_store_open_for_last_reads_then_closes_it() {
        let dir = tempfile::tempdir().unwrap();
        let coordinator = on_file(dir.path()).await;
        let (yaml, files) =
            crate::testing::spec("s", "", &[crate::testing::Tr { id: "t", length: 10, cliff: 5, p: 0.8, labels: "" }]);
        let study = coordinator.launch(&yaml, &files).await.unwrap();
        let service = Service::start(coordinator, every_listener()).await.unwrap();
        let grpc = service.grpc_addr();
        let stopped = service.stop_serving().await;
        assert!(refused(grpc).await);
        let (read, served) = stopped.close_after(async |c| c.store().study(&study).await.map(|r| r.spec.name)).await;
        assert_eq!(read.unwrap(), "s");
        served.unwrap();
        assert!(!wal(dir.path()).exists());
    }

    #[tokio::test]
    async fn a_listener_that_fails_stops_the_others_and_shutdown_still_closes_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let coordinator = on_file(dir.path()).await;
        let (yaml, files) =
            crate::testing::spec("s", "", &[crate::testing::Tr { id: "t", length: 10, cliff: 5, p: 0.8, labels: "" }]);
        coordinator.launch(&yaml, &files).await.unwrap();
        let mut service = Service::start(coordinator, every_listener()).await.unwrap();
        let (grpc, metrics) = (service.grpc_addr(), service.metrics_addr().unwrap());
        service.spawn(Listener::Dashboard, async {
            Err(ServiceError::Http(Listener::Dashboard, std::io::Error::other("accept failed")))
        });
        // The failure alone stops the service: nothing cancelled it.
        service.stopping().await;
        let err = service.shutdown().await.unwrap_err();
        assert!(matches!(err, ServiceError::Http(Listener::Dashboard, _)), "{err}");
        assert!(err.to_string().contains("dashboard listener failed: accept failed"), "{err}");
        assert!(refused(grpc).await && refused(metrics).await);
        assert!(!wal(dir.path()).exists(), "closed although a listener failed");
    }

    #[tokio::test]
    async fn refuses_exposed_listeners_without_tokens_before_serving() {
        let dir = tempfile::tempdir().unwrap();
        let coordinator = on_file(dir.path()).await;
        let err = Service::start(coordinator.clone(), ServiceConfig::new("0.0.0.0:0")).await.unwrap_err();
        assert!(matches!(err, ServiceError::Serve(ServeError::TokensRequired(_))), "{err}");
        let tokens = Tokens { worker: Some("w".into()), client: None };
        let config = ServiceConfig {
            serve: ServeOptions { tokens, tls: None },
            metrics: Some("0.0.0.0:0".into()),
            ..ServiceConfig::loopback()
        };
        let err = Service::start(coordinator.clone(), config).await.unwrap_err().to_string();
        assert!(err.contains("refusing to serve metrics") && err.contains("client token"), "{err}");
        let config = ServiceConfig { dashboard: Some("0.0.0.0:0".into()), ..ServiceConfig::loopback() };
        let err = Service::start(coordinator.clone(), config).await.unwrap_err().to_string();
        assert!(err.contains("refusing to serve the dashboard"), "{err}");
        let err = Service::start(coordinator.clone(), ServiceConfig::new("256.0.0.1:0")).await.unwrap_err();
        assert!(err.to_string().starts_with("cannot listen on 256.0.0.1:0"), "{err}");
        coordinator.store().close().await;
    }
}
