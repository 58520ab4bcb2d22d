//! One in-process cluster (feature `cluster`): a coordinator [`Service`] on a fresh store, with
//! in-process workers leasing from it over gRPC on loopback.
//!
//! ```ignore
//! use vcurve_testkit::cluster::Cluster;
//!
//! let runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
//! let cluster = Cluster::sqlite().workers(3, runners).slots(4).start().await;
//! let study = cluster.coordinator().launch(&yaml, &files).await.unwrap();
//! // … a gRPC client on cluster.grpc_url(), the store on cluster.store() …
//! let summaries = cluster.shutdown().await;
//! ```
//!
//! [`Cluster::sqlite`] serves a fresh in-memory SQLite store; [`Cluster::postgres`] a fresh
//! database on the test PostgreSQL, behind the gate of [`require`](crate::require) (`None`, after
//! the skip line, when there is none). The builder sets what the tests vary: the coordinator's
//! [`Timing`], its [`Renderer`] (none by default: tests of exports pass the CLI's), the gRPC
//! listener's tokens and TLS, the dashboard and metrics listeners, runner kinds the coordinator
//! accepts besides its own, and the workers (how many, their runners, slots and lease wait; they
//! use the cluster's worker token). [`Running::shutdown`] stops the workers first — so that none
//! talks to a server that is gone — then the service, which closes the store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::store::TestStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vcurve_coordinator::Renderer;
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::server::{ServeOptions, Tokens};
use vcurve_coordinator::service::{Service, ServiceConfig, ServiceError};
use vcurve_coordinator::store::SqlStore;
use vcurve_worker::metrics::WorkerMetrics;
use vcurve_worker::{Runners, WorkerConfig, WorkerError, WorkerSummary};

/// A worker's task: its summary once stopped.
pub type WorkerTask = JoinHandle<Result<WorkerSummary, WorkerError>>;

/// What to start; see the [module](self).
pub struct Cluster {
    store: Option<TestStore>,
    timing: Timing,
    renderer: Arc<dyn Renderer>,
    config: ServiceConfig,
    runner_kinds: Vec<String>,
    workers: u32,
    runners: Runners,
    slots: u32,
    lease_wait: Duration,
}

impl Cluster {
    fn on(store: TestStore) -> Cluster {
        Cluster {
            store: Some(store),
            timing: Timing::default(),
            renderer: vcurve_coordinator::testing::no_renderer(),
            config: ServiceConfig::loopback(),
            runner_kinds: Vec::new(),
            workers: 0,
            runners: Runners::new(),
            slots: 1,
            lease_wait: Duration::from_secs(1),
        }
    }

    /// A cluster on a fresh in-memory SQLite store.
    pub async fn sqlite() -> Cluster {
        Cluster::on(TestStore::sqlite().await)
    }

    /// A cluster on a fresh database of the test PostgreSQL; `None` when there is none (the test
    /// should return: it printed the skip line, or failed when `VCURVE_TEST_REQUIRE` requires it).
    pub async fn postgres() -> Option<Cluster> {
        let admin = crate::require::optional(crate::require::Service::Postgres)?;
        Some(Cluster::on(TestStore::postgres(admin).await))
    }

    /// The coordinator's lease timeout, heartbeat interval and longest lease wait.
    pub fn timing(mut self, timing: Timing) -> Cluster {
        self.timing = timing;
        self
    }

    /// What renders exports and the dashboard's figures (none by default).
    pub fn renderer(mut self, renderer: Arc<dyn Renderer>) -> Cluster {
        self.renderer = renderer;
        self
    }

    /// The gRPC listener's tokens and TLS.
    pub fn serve(mut self, serve: ServeOptions) -> Cluster {
        self.config.serve = serve;
        self
    }

    /// The gRPC listener's tokens, without TLS.
    pub fn tokens(self, worker: &str, client: &str) -> Cluster {
        self.serve(ServeOptions {
            tokens: Tokens { worker: Some(worker.into()), client: Some(client.into()) },
            tls: None,
        })
    }

    /// Serve the dashboard on a loopback port too.
    pub fn dashboard(mut self) -> Cluster {
        self.config.dashboard = Some("127.0.0.1:0".into());
        self
    }

    /// Serve the metrics (`/metrics`) on a loopback port too.
    pub fn metrics(mut self) -> Cluster {
        self.config.metrics = Some("127.0.0.1:0".into());
        self
    }

    /// A runner kind the coordinator accepts in specs besides its own (a test's runner double).
    pub fn accept_runner_kind(mut self, kind: &str) -> Cluster {
        self.runner_kinds.push(kind.into());
        self
    }

    /// `n` workers offering `runners`, named `w0`, `w1`, …
    pub fn workers(mut self, n: u32, runners: Runners) -> Cluster {
        self.workers = n;
        self.runners = runners;
        self
    }

    /// Slots of each worker (1 by default).
    pub fn slots(mut self, slots: u32) -> Cluster {
        self.slots = slots;
        self
    }

    /// How long a worker's lease request may wait (1 s by default, the worker's own).
    pub fn lease_wait(mut self, wait: Duration) -> Cluster {
        self.lease_wait = wait;
        self
    }

    /// Start the service, then the workers.
    pub async fn start(self) -> Running {
        self.try_start().await.expect("start the in-process cluster")
    }

    /// Start the service, then the workers; the service's error (the store is closed then, and a
    /// PostgreSQL test database dropped).
    pub async fn try_start(mut self) -> Result<Running, ServiceError> {
        let store = self.store.take().expect("a store");
        let coordinator = Coordinator::new(store.store.clone(), self.timing, self.renderer.clone());
        for kind in &self.runner_kinds {
            coordinator.accept_runner_kind(kind);
        }
        let worker_token = self.config.serve.tokens.worker.clone();
        let service = match Service::start(coordinator, self.config.clone()).await {
            Ok(service) => service,
            Err(e) => {
                store.store.close().await;
                store.finish().await;
                return Err(e);
            }
        };
        let mut running = Running {
            url: service.grpc_url(),
            service: Some(service),
            store: Some(store),
            worker_token,
            stop_workers: CancellationToken::new(),
            workers: Vec::new(),
        };
        for i in 0..self.workers {
            let mut config = running.worker_config();
            config.name = format!("w{i}");
            config.slots = self.slots;
            config.lease_wait = self.lease_wait;
            running.spawn_worker(config, self.runners.clone(), None);
        }
        Ok(running)
    }
}

/// A started [`Cluster`].
pub struct Running {
    url: String,
    service: Option<Service>,
    store: Option<TestStore>,
    worker_token: Option<String>,
    stop_workers: CancellationToken,
    workers: Vec<WorkerTask>,
}

impl Running {
    fn service(&self) -> &Service {
        self.service.as_ref().expect("serving until shut down")
    }

    /// The coordinator it serves.
    pub fn coordinator(&self) -> &Arc<Coordinator<SqlStore>> {
        self.service().coordinator()
    }

    /// The store it serves.
    pub fn store(&self) -> &SqlStore {
        self.coordinator().store()
    }

    /// The gRPC listener's URL (`https://127.0.0.1:…` with TLS).
    pub fn grpc_url(&self) -> String {
        self.url.clone()
    }

    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.service().grpc_addr()
    }

    /// The dashboard's address, when it is served.
    pub fn dashboard_addr(&self) -> Option<SocketAddr> {
        self.service().dashboard_addr()
    }

    /// The metrics listener's address, when it is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.service().metrics_addr()
    }

    /// A token cancelled once the service stops, for other servers of a test to stop with.
    pub fn stop_token(&self) -> CancellationToken {
        self.service().stop_token()
    }

    /// A worker configuration for this cluster: its URL and worker token, the worker's defaults
    /// otherwise.
    pub fn worker_config(&self) -> WorkerConfig {
        let mut config = WorkerConfig::new(self.url.clone());
        config.token = self.worker_token.clone();
        config
    }

    /// Start one more worker (with `metrics`, if given), stopped with the others.
    pub fn spawn_worker(&mut self, config: WorkerConfig, runners: Runners, metrics: Option<Arc<WorkerMetrics>>) {
        let stop = self.stop_workers.clone();
        self.workers.push(tokio::spawn(vcurve_worker::run_with_metrics(config, runners, metrics, async move {
            stop.cancelled().await
        })));
    }

    /// Stop every worker and wait for each: their summaries, in the order they were started.
    /// Panics if a worker failed.
    pub async fn stop_workers(&mut self) -> Vec<WorkerSummary> {
        self.stop_workers.cancel();
        let mut summaries = Vec::new();
        for w in std::mem::take(&mut self.workers) {
            summaries.push(w.await.expect("a worker task").expect("a worker"));
        }
        self.stop_workers = CancellationToken::new();
        summaries
    }

    /// Stop the workers, then the service, and close the store (dropping a PostgreSQL test
    /// database); the workers' summaries. Panics if a worker or a listener failed.
    pub async fn shutdown(mut self) -> Vec<WorkerSummary> {
        let summaries = self.stop_workers().await;
        self.service.take().expect("serving").shutdown().await.expect("every listener ended cleanly");
        if let Some(store) = self.store.take() {
            store.finish().await;
        }
        summaries
    }
}

impl Drop for Running {
    /// Without [`Running::shutdown`]: the workers are told to stop, and the service stops and
    /// closes the store in the background.
    fn drop(&mut self) {
        self.stop_workers.cancel();
    }
}
