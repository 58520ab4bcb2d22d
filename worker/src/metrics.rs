//! The worker's Prometheus endpoint: `GET /metrics` in the Prometheus text format 0.0.4 on its
//! own listener (`vcurve worker --metrics ADDR`), served with axum like the coordinator's.
//!
//! [`WorkerMetrics`] is what one worker process measures: its jobs (running now, finished by kind
//! and result, durations), the container operations its runners make — timed by
//! [`MeteredRuntime`], a [`ContainerRuntime`] wrapping the real one, so the Docker code is
//! untouched — and the disk its snapshot cache uses, read from the cache at scrape time, with where
//! continuations found their state (`vcurve_worker_snapshot_hits{source="local"|"registry"|"rebuild"}`)
//! and the registry's pushes and pulls (`vcurve_worker_snapshot_transfers{direction,result}`; their
//! durations are the container operations `push` and `pull`).
//! [`crate::run_with_metrics`] feeds the job families; [`crate::run`] keeps none.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;

use crate::runners::seam::{JobKind, JobReport};
use crate::sandbox::container::{
    Change, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest, ImageInfo, PendingImage, RuntimeError,
    StampedDiff,
};
use crate::sandbox::snapshots::SnapshotStats;

/// The content type of the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds of the container operation buckets, in seconds: an exec of `ls` takes
/// milliseconds, a commit of a large container or an agent step minutes.
pub const CONTAINER_BUCKETS: [f64; 14] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Upper bounds of the job duration buckets, in seconds: a synthetic job takes milliseconds, an
/// agent run up to hours.
pub const JOB_BUCKETS: [f64; 14] =
    [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

type Labels = Vec<(&'static str, String)>;

/// A histogram family: a constructor that captures nothing, so the type can be named.
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// What the snapshot cache holds: bytes on disk and snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotUsage {
    pub bytes: u64,
    pub snapshots: u64,
    pub budget_bytes: u64,
}

type SnapshotSource = Arc<dyn Fn() -> SnapshotUsage + Send + Sync>;
type StatsSource = Arc<dyn Fn() -> SnapshotStats + Send + Sync>;

/// One worker's measurements. Share it as `Arc<WorkerMetrics>`.
pub struct WorkerMetrics {
    registry: Registry,
    slots: Gauge,
    jobs_running: Gauge,
    jobs: Family<Labels, Counter>,
    job_seconds: Histograms,
    container_seconds: Histograms,
    container_errors: Family<Labels, Counter>,
    snapshot_bytes: Gauge,
    snapshots: Gauge,
    snapshot_budget_bytes: Gauge,
    snapshot_source: Mutex<Option<SnapshotSource>>,
    snapshot_hits: Family<Labels, Counter>,
    snapshot_transfers: Family<Labels, Counter>,
    stats_source: Mutex<Option<StatsSource>>,
}

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMetrics").finish_non_exhaustive()
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let slots = Gauge::default();
        registry.register("vcurve_worker_slots", "Jobs this worker runs at once", slots.clone());
        let jobs_running = Gauge::default();
        registry.register(
            "vcurve_worker_jobs_running",
            "Jobs running or being reported now (each holds a slot)",
            jobs_running.clone(),
        );
        let jobs = Family::<Labels, Counter>::default();
        registry.register(
            "vcurve_worker_jobs",
            "Jobs ended, by kind and result (the report's kind, or cancelled)",
            jobs.clone(),
        );
        let job_seconds: Histograms = Family::new_with_constructor(|| Histogram::new(JOB_BUCKETS));
        registry.register(
            "vcurve_worker_job_duration_seconds",
            "Seconds from a job's start to its result, by kind",
            job_seconds.clone(),
        );
        let container_seconds: Histograms = Family::new_with_constructor(|| Histogram::new(CONTAINER_BUCKETS));
        registry.register(
            "vcurve_worker_container_operation_duration_seconds",
            "Seconds per container runtime operation (start, exec, commit, remove, …), failed ones included",
            container_seconds.clone(),
        );
        let container_errors = Family::<Labels, Counter>::default();
        registry.register(
            "vcurve_worker_container_operation_errors",
            "Container runtime operations that failed, by operation",
            container_errors.clone(),
        );
        let snapshot_bytes = Gauge::default();
        registry.register(
            "vcurve_worker_snapshot_bytes",
            "Disk used by the snapshot cache's images",
            snapshot_bytes.clone(),
        );
        let snapshots = Gauge::default();
        registry.register("vcurve_worker_snapshots", "Snapshot images the cache holds", snapshots.clone());
        let snapshot_budget_bytes = Gauge::default();
        registry.register(
            "vcurve_worker_snapshot_budget_bytes",
            "The snapshot cache's disk budget",
            snapshot_budget_bytes.clone(),
        );
        let snapshot_hits = Family::<Labels, Counter>::default();
        registry.register(
            "vcurve_worker_snapshot_hits",
            "Continuations from t > 0 by where their container started: a snapshot held here (local), one pulled \
             from the registry (registry), the task image replaying every step (rebuild)",
            snapshot_hits.clone(),
        );
        let snapshot_transfers = Family::<Labels, Counter>::default();
        registry.register(
            "vcurve_worker_snapshot_transfers",
            "Snapshot pushes to and pulls from the registry, by direction and result (failed: an error, a \
             snapshot the registry lacks, or a pulled one that did not check out)",
            snapshot_transfers.clone(),
        );
        WorkerMetrics {
            registry,
            slots,
            jobs_running,
            jobs,
            job_seconds,
            container_seconds,
            container_errors,
            snapshot_bytes,
            snapshots,
            snapshot_budget_bytes,
            snapshot_source: Mutex::new(None),
            snapshot_hits,
            snapshot_transfers,
            stats_source: Mutex::new(None),
        }
    }

    pub(crate) fn set_slots(&self, slots: u32) {
        self.slots.set(i64::from(slots));
    }

    /// A job started: it counts as running until the returned guard is dropped.
    pub(crate) fn job_started(self: &Arc<Self>) -> RunningJob {
        self.jobs_running.inc();
        RunningJob(self.clone())
    }

    /// A job of `kind` ended with `result` (`None`: cancelled) after `took`.
    pub(crate) fn job_ended(&self, kind: JobKind, result: Option<&JobReport>, took: Duration) {
        let result = match result {
            Some(JobReport::Outcome(_)) => "outcome",
            Some(JobReport::NoOutcome { .. }) => "no_outcome",
            Some(JobReport::Capped { .. }) => "capped",
            Some(JobReport::NonReplayable(_)) => "non_replayable",
            Some(JobReport::Replayed(_)) => "replayed",
            Some(JobReport::Evaluated { .. }) => "evaluated",
            Some(JobReport::SessionRecorded { .. }) => "session_recorded",
            Some(JobReport::CallAnswered { .. }) => "call_answered",
            None => "cancelled",
        };
        let kind = kind.as_str().to_string();
        self.jobs.get_or_create(&vec![("kind", kind.clone()), ("result", result.to_string())]).inc();
        if result != "cancelled" {
            self.job_seconds.get_or_create(&vec![("kind", kind)]).observe(took.as_secs_f64());
        }
    }

    fn container_operation(&self, operation: &'static str, took: Duration, ok: bool) {
        let labels = vec![("operation", operation.to_string())];
        self.container_seconds.get_or_create(&labels).observe(took.as_secs_f64());
        if !ok {
            self.container_errors.get_or_create(&labels).inc();
        }
    }

    /// Read the snapshot cache's usage from `source` at every scrape.
    pub fn watch_snapshots(&self, source: impl Fn() -> SnapshotUsage + Send + Sync + 'static) {
        *self.snapshot_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(source));
    }

    /// Read the snapshot cache's counts from `source` at every scrape.
    pub fn watch_snapshot_stats(&self, source: impl Fn() -> SnapshotStats + Send + Sync + 'static) {
        *self.stats_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(source));
    }

    /// The exposition of every family now.
    pub fn encode(&self) -> String {
        let stats = self.stats_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(stats) = stats {
            let s = stats();
            // The cache's counts only grow: each counter takes what it has not seen yet.
            let catch_up = |family: &Family<Labels, Counter>, labels: Labels, total: u64| {
                let counter = family.get_or_create(&labels);
                counter.inc_by(total.saturating_sub(counter.get()));
            };
            catch_up(&self.snapshot_hits, vec![("source", "local".into())], s.hits_local);
            catch_up(&self.snapshot_hits, vec![("source", "registry".into())], s.hits_registry);
            catch_up(&self.snapshot_hits, vec![("source", "rebuild".into())], s.rebuilds);
            let transfer =
                |direction: &str, result: &str| vec![("direction", direction.into()), ("result", result.into())];
            catch_up(&self.snapshot_transfers, transfer("push", "ok"), s.pushes);
            catch_up(&self.snapshot_transfers, transfer("push", "failed"), s.push_failures);
            catch_up(&self.snapshot_transfers, transfer("pull", "ok"), s.pulls);
            catch_up(&self.snapshot_transfers, transfer("pull", "failed"), s.pull_failures);
        }
        let source = self.snapshot_source.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(source) = source {
            let usage = source();
            let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.snapshot_bytes.set(count(usage.bytes));
            self.snapshots.set(count(usage.snapshots));
            self.snapshot_budget_bytes.set(count(usage.budget_bytes));
        }
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// A running job, counted in `vcurve_worker_jobs_running` while it lives.
pub(crate) struct RunningJob(Arc<WorkerMetrics>);

impl Drop for RunningJob {
    fn drop(&mut self) {
        self.0.jobs_running.dec();
    }
}

/// A [`ContainerRuntime`] that times every operation of the one it wraps into
/// `vcurve_worker_container_operation_duration_seconds{operation}`.
pub struct MeteredRuntime {
    inner: Arc<dyn ContainerRuntime>,
    metrics: Arc<WorkerMetrics>,
}

impl MeteredRuntime {
    pub fn new(inner: Arc<dyn ContainerRuntime>, metrics: Arc<WorkerMetrics>) -> Self {
        MeteredRuntime { inner, metrics }
    }

    fn timed<'a, T: Send + 'a>(
        &'a self,
        operation: &'static str,
        call: BoxFuture<'a, Result<T, RuntimeError>>,
    ) -> BoxFuture<'a, Result<T, RuntimeError>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = call.await;
            self.metrics.container_operation(operation, started.elapsed(), result.is_ok());
            result
        })
    }
}

impl ContainerRuntime for MeteredRuntime {
    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<String, RuntimeError>> {
        self.timed("start", self.inner.create(spec))
    }

    fn exec<'a>(
        &'a self,
        container: &'a str,
        request: &'a ExecRequest,
    ) -> BoxFuture<'a, Result<ExecOutput, RuntimeError>> {
        self.timed("exec", self.inner.exec(container, request))
    }

    fn put_file<'a>(
        &'a self,
        container: &'a str,
        path: &'a str,
        content: &'a [u8],
        mode: u32,
    ) -> BoxFuture<'a, Result<(), RuntimeError>> {
        self.timed("put_file", self.inner.put_file(container, path, content, mode))
    }

    fn diff<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<Vec<Change>, RuntimeError>> {
        self.timed("diff", self.inner.diff(container))
    }

    fn diff_stamped<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<StampedDiff, RuntimeError>> {
        self.timed("diff", self.inner.diff_stamped(container))
    }

    fn commit<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, RuntimeError>> {
        self.timed("commit", self.inner.commit(container, reference, labels))
    }

    /// Timed as one `commit`, from the state taken to the image made.
    fn commit_later<'a>(
        &'a self,
        container: &'a str,
        reference: &'a str,
        labels: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<PendingImage, RuntimeError>> {
        Box::pin(async move {
            let started = Instant::now();
            match self.inner.commit_later(container, reference, labels).await {
                Ok(pending) => {
                    let metrics = self.metrics.clone();
                    Ok(Box::pin(async move {
                        let result = pending.await;
                        metrics.container_operation("commit", started.elapsed(), result.is_ok());
                        result
                    }) as PendingImage)
                }
                Err(e) => {
                    self.metrics.container_operation("commit", started.elapsed(), false);
                    Err(e)
                }
            }
        })
    }

    fn tag<'a>(&'a self, source: &'a str, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        self.timed("tag", self.inner.tag(source, reference))
    }

    fn remove<'a>(&'a self, container: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        self.timed("remove", self.inner.remove(container))
    }

    fn image_exists<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<bool, RuntimeError>> {
        self.timed("image_exists", self.inner.image_exists(reference))
    }

    fn remove_image<'a>(&'a self, reference: &'a str) -> BoxFuture<'a, Result<(), RuntimeError>> {
        self.timed("remove_image", self.inner.remove_image(reference))
    }

    fn containers<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<String>, RuntimeError>> {
        self.timed("list_containers", self.inner.containers(filter))
    }

    fn images<'a>(
        &'a self,
        filter: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<Vec<ImageInfo>, RuntimeError>> {
        self.timed("list_images", self.inner.images(filter))
    }

    fn push_image<'a>(&'a self, reference: &'a str, remote: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        self.timed("push", self.inner.push_image(reference, remote))
    }

    fn pull_image<'a>(&'a self, remote: &'a str, reference: &'a str) -> BoxFuture<'a, Result<String, RuntimeError>> {
        self.timed("pull", self.inner.pull_image(remote, reference))
    }
}

struct Endpoint {
    metrics: Arc<WorkerMetrics>,
    token: Option<String>,
}

/// The metrics route; with a `token`, every request must present it as a bearer token.
pub fn router(metrics: Arc<WorkerMetrics>, token: Option<String>) -> Router {
    Router::new().route("/metrics", get(scrape)).with_state(Arc::new(Endpoint { metrics, token }))
}

/// Serve `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    metrics: Arc<WorkerMetrics>,
    listener: TcpListener,
    token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "metrics listening");
    axum::serve(listener, router(metrics, token)).with_graceful_shutdown(shutdown).await
}

async fn scrape(State(e): State<Arc<Endpoint>>, headers: HeaderMap) -> Response {
    if let Some(expected) = &e.token {
        let presented =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(expected.as_bytes()))) {
            return (StatusCode::UNAUTHORIZED, "token required: Authorization: Bearer …\n").into_response();
        }
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], e.metrics.encode()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_hits_and_transfers_follow_the_caches_counts() {
        let metrics = WorkerMetrics::new();
        let stats = Arc::new(Mutex::new(SnapshotStats { hits_local: 3, rebuilds: 1, pushes: 2, ..Default::default() }));
        let source = stats.clone();
        metrics.watch_snapshot_stats(move || *source.lock().unwrap());
        let text = metrics.encode();
        assert!(text.contains("vcurve_worker_snapshot_hits_total{source=\"local\"} 3"), "{text}");
        assert!(text.contains("vcurve_worker_snapshot_hits_total{source=\"rebuild\"} 1"), "{text}");
        assert!(text.contains("vcurve_worker_snapshot_transfers_total{direction=\"push\",result=\"ok\"} 2"), "{text}");
        stats.lock().unwrap().hits_registry = 5;
        stats.lock().unwrap().hits_local = 4;
        let text = metrics.encode();
        assert!(text.contains("vcurve_worker_snapshot_hits_total{source=\"registry\"} 5"), "{text}");
        assert!(text.contains("vcurve_worker_snapshot_hits_total{source=\"local\"} 4"), "{text}");
    }
}
