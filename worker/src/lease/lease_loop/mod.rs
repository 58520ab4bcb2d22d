//! The worker's life: register, lease, run, heartbeat, report, shut down.
//!
//! # Tasks
//!
//! [`run`] spawns three kinds of tasks around one shared state ([`Shared`]):
//!
//! - the **lease loop** waits for a free slot (a semaphore permit), asks for as many jobs as there
//!   are free slots, and spawns a job task per job, moving a permit into it;
//! - the **heartbeat loop** lists every held job at the coordinator's interval, cancels the ones it
//!   answers as revoked (a job whose result is already being reported only stops retrying: the
//!   report in flight may be what finished the key), and registers again when the coordinator
//!   has forgotten the worker;
//! - a **job task** per job runs it through its runner, then reports the result, retrying until
//!   the report goes through. It keeps its slot until then, so the coordinator's count of the
//!   worker's leases never exceeds its slots, and its job stays in the heartbeat until then, so a
//!   finished outcome waiting for a restarting coordinator keeps its lease.
//!
//! The held-job table (`Shared::held`) is the single record of what the worker owns; each entry's
//! [`Fate`] says what happens to the job when its task ends: reported (`Running`), dropped
//! (`Revoked`: the coordinator took it back), or given back with `Release` (`Released`: shutdown
//! cancelled it). Locks on it are never held across an `await`.
//!
//! Every stop and cancel token is a child of one root token that is cancelled when `run` returns
//! or its future is dropped, so no task outlives the worker.
//!
//! Here: [`run`], the shared state and registration, the lease and heartbeat loops; a job's task
//! is in `job`, the held-job table's other uses (heartbeat, revocation, shutdown) in `held`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use vcurve_proto::v1;

use crate::lease::cache::{DEFAULT_BUDGET_BYTES, TrajectoryCache};
use crate::lease::client::{Backoff, Coordinator};
use crate::lease::config::WorkerConfig;
use crate::lease::error::WorkerError;
use crate::lease::wire;
use crate::metrics::WorkerMetrics;
use crate::runners::seam::{HeldJob, Runners};

mod held;
mod job;

/// How long a cancelled runner may take to return before its future is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// Heartbeat interval when the coordinator states none.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// The pause after an empty lease that came back early, so the lease loop never spins.
const EMPTY_POLL_PAUSE: Duration = Duration::from_millis(50);
/// How often `Release` is tried at shutdown before the leases are left to expire.
const RELEASE_ATTEMPTS: u32 = 3;

/// What a worker did, returned by [`run`] after a graceful shutdown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// The worker id of the last registration (`None` if shut down before registering).
    pub worker_id: Option<String>,
    /// Registrations, counting the first: more than one means the coordinator forgot the worker.
    pub registrations: u32,
    /// Jobs leased.
    pub leased: u64,
    /// Reports the coordinator answered, accepted or not.
    pub reported: u64,
    /// Of those, the ones it accepted (`accepted = false` is a late or duplicate report: it
    /// changed nothing and is not an error).
    pub accepted: u64,
    /// Of the reported, how many were no-outcomes.
    pub no_outcomes: u64,
    /// Jobs the coordinator revoked, cancelled and not reported.
    pub revoked: u64,
    /// Jobs given back unrun (or unfinished) with `Release` at shutdown.
    pub released: u64,
    /// Jobs neither reported nor released (the coordinator refused the report, or could not be
    /// reached at shutdown): their leases expire and the coordinator issues them again.
    pub abandoned: u64,
    /// Trajectory payloads fetched from the coordinator (each digest once while it is cached).
    pub trajectories_fetched: u64,
}

/// Run a worker until `shutdown` resolves or a fatal error occurs.
///
/// Registers (retrying while the coordinator is unreachable), then leases, runs and reports jobs
/// with `config.slots` at once. When `shutdown` resolves: stops leasing, lets running jobs finish
/// and be reported for up to `config.shutdown_grace`, cancels the rest and releases them.
///
/// Returns an error only for the fatal [`WorkerError`]s (bad configuration or CA file, refused
/// registration, and a token or TLS handshake rejected [`WorkerError::REJECTED_ATTEMPTS`] calls in
/// a row); transport errors are retried for as long as it takes.
///
/// Must run inside a tokio runtime. Dropping the future instead of resolving `shutdown` cancels
/// every job at once and releases nothing (their leases expire).
pub async fn run(
    config: WorkerConfig,
    runners: Runners,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<WorkerSummary, WorkerError> {
    run_with_metrics(config, runners, None, shutdown).await
}

/// [`run`], counting its slots and jobs into `metrics` (`vcurve worker --metrics`).
pub async fn run_with_metrics(
    config: WorkerConfig,
    runners: Runners,
    metrics: Option<Arc<WorkerMetrics>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<WorkerSummary, WorkerError> {
    config.validate()?;
    if runners.is_empty() {
        return Err(WorkerError::Config("no agent runners: at least one kind is needed".into()));
    }
    let coordinator = Coordinator::connect(&config).await?;
    let services: Arc<dyn crate::runners::services::JobServices> = Arc::new(coordinator.clone());
    for runner in runners.all() {
        runner.attach(services.clone());
    }
    if let Some(m) = &metrics {
        m.set_slots(config.slots);
    }
    let mut shared = Shared::new(config, runners, coordinator);
    shared.metrics = metrics;
    let shared = Arc::new(shared);
    let mut shutdown = std::pin::pin!(shutdown);

    // If this future is dropped midway (an aborted task, a timeout around it), the guard cancels
    // the root token: the loops stop and every job is cancelled instead of running on detached.
    let _stop_everything_on_drop = shared.root.clone().drop_guard();

    // First registration. The coordinator may be restarting: keep trying until shutdown.
    tokio::select! {
        registered = shared.register(0, &shared.root) => registered?,
        () = &mut shutdown => {
            tracing::info!("shutdown before the coordinator answered; nothing to release");
            return Ok(shared.summary());
        }
    }

    let stop_leasing = shared.root.child_token();
    let stop_heartbeats = shared.root.child_token();
    let lease_loop = tokio::spawn(lease_loop(shared.clone(), stop_leasing.clone()));
    let heartbeat_loop = tokio::spawn(heartbeat_loop(shared.clone(), stop_heartbeats.clone()));

    tokio::select! {
        () = &mut shutdown => tracing::info!("shutdown requested: no more leases"),
        () = shared.fatal.cancelled() => {}
    }
    let grace = shared.config.shutdown_grace;
    let grace_over = tokio::time::Instant::now() + grace;
    stop_leasing.cancel();
    // The loop ends once its in-flight lease (at most `lease_wait` plus a deadline) returns; jobs
    // that arrive after the stop are released at once.
    let _ = lease_loop.await;
    shared.tracker.close();

    if let Some(error) = shared.fatal_error() {
        shared.cancel_all(Fate::Abandoned);
        shared.tracker.wait().await;
        stop_heartbeats.cancel();
        let _ = heartbeat_loop.await;
        tracing::error!(worker = %shared.worker_id(), %error, "worker stopped");
        return Err(error);
    }

    let finished = tokio::select! {
        biased;
        () = shared.tracker.wait() => true,
        () = tokio::time::sleep_until(grace_over) => false,
        () = shared.fatal.cancelled() => false,
    };
    if !finished {
        let cancelled = shared.cancel_all(Fate::Released);
        tracing::info!(jobs = cancelled, ?grace, "shutdown grace over: cancelling unfinished jobs");
        shared.tracker.wait().await;
    }
    let to_release = shared.take(Fate::Released);
    if !to_release.is_empty() {
        shared.release(to_release).await;
    }
    stop_heartbeats.cancel();
    let _ = heartbeat_loop.await;

    // Jobs whose report was refused or whose task ended on a fatal error leave nothing held.
    let leftover = shared.take(Fate::Abandoned).len() as u64;
    shared.counters.abandoned.fetch_add(leftover, Ordering::Relaxed);
    if let Some(error) = shared.fatal_error() {
        return Err(error);
    }
    let summary = shared.summary();
    tracing::info!(
        worker = %shared.worker_id(),
        reported = summary.reported,
        released = summary.released,
        abandoned = summary.abandoned,
        "worker stopped"
    );
    Ok(summary)
}

/// What becomes of a held job when its task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Run it and report its result.
    Running,
    /// The coordinator took it back: drop it silently.
    Revoked,
    /// Shutdown cancelled it: give it back with `Release`.
    Released,
    /// A fatal error stopped the worker: leave it to expire.
    Abandoned,
}

#[derive(Debug)]
struct Entry {
    cancel: CancellationToken,
    fate: Fate,
    /// The run is over and its result is being reported. A revocation then only stops the
    /// retries: the report in flight may well be what finished the key, and its answer counts.
    reporting: bool,
}

#[derive(Debug)]
struct Session {
    /// Bumped by every registration, so concurrent discoverers of an unknown worker register once.
    generation: u64,
    worker_id: String,
    heartbeat_interval: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    registrations: AtomicU64,
    leased: AtomicU64,
    reported: AtomicU64,
    accepted: AtomicU64,
    no_outcomes: AtomicU64,
    revoked: AtomicU64,
    released: AtomicU64,
    abandoned: AtomicU64,
}

/// State shared by the lease loop, the heartbeat loop and the job tasks.
struct Shared {
    config: WorkerConfig,
    runners: Runners,
    coordinator: Coordinator,
    /// Trajectory payloads by digest, fetched once each.
    cache: TrajectoryCache,
    session: Mutex<Session>,
    /// Serializes registrations (held across the Register RPC, hence tokio's mutex).
    registering: tokio::sync::Mutex<()>,
    held: Mutex<HashMap<HeldJob, Entry>>,
    tracker: TaskTracker,
    counters: Counters,
    /// `vcurve worker --metrics`: the job families.
    metrics: Option<Arc<WorkerMetrics>>,
    fatal: CancellationToken,
    fatal_error: Mutex<Option<WorkerError>>,
    /// The parent of every stop and job-cancel token; cancelled when `run` returns or is dropped.
    root: CancellationToken,
}

/// Lock a std mutex, ignoring poison: every critical section here leaves the data consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn new(config: WorkerConfig, runners: Runners, coordinator: Coordinator) -> Self {
        Self {
            config,
            runners,
            coordinator,
            cache: TrajectoryCache::new(DEFAULT_BUDGET_BYTES),
            session: Mutex::new(Session {
                generation: 0,
                worker_id: String::new(),
                heartbeat_interval: DEFAULT_HEARTBEAT,
            }),
            registering: tokio::sync::Mutex::new(()),
            held: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            counters: Counters::default(),
            metrics: None,
            fatal: CancellationToken::new(),
            fatal_error: Mutex::new(None),
            root: CancellationToken::new(),
        }
    }

    fn worker_id(&self) -> String {
        lock(&self.session).worker_id.clone()
    }

    fn session(&self) -> (u64, String) {
        let s = lock(&self.session);
        (s.generation, s.worker_id.clone())
    }

    fn set_fatal(&self, error: WorkerError) {
        let mut slot = lock(&self.fatal_error);
        if slot.is_none() {
            *slot = Some(error);
        }
        self.fatal.cancel();
    }

    fn fatal_error(&self) -> Option<WorkerError> {
        lock(&self.fatal_error).take()
    }

    fn summary(&self) -> WorkerSummary {
        let c = &self.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let (generation, worker_id) = self.session();
        WorkerSummary {
            worker_id: (generation > 0).then_some(worker_id),
            registrations: u32::try_from(get(&c.registrations)).unwrap_or(u32::MAX),
            leased: get(&c.leased),
            reported: get(&c.reported),
            accepted: get(&c.accepted),
            no_outcomes: get(&c.no_outcomes),
            revoked: get(&c.revoked),
            released: get(&c.released),
            abandoned: get(&c.abandoned),
            trajectories_fetched: self.cache.fetches(),
        }
    }

    /// Register unless someone registered since `seen_generation`; retries transport errors with
    /// backoff until `stop`. Fatal errors are returned (and not recorded: the caller decides).
    async fn register(&self, seen_generation: u64, stop: &CancellationToken) -> Result<(), WorkerError> {
        // Not a plain `lock().await`: a registration retrying against an absent coordinator
        // must not keep a stopping caller waiting.
        let _one_at_a_time = tokio::select! {
            guard = self.registering.lock() => guard,
            () = stop.cancelled() => return Ok(()),
        };
        if lock(&self.session).generation != seen_generation {
            return Ok(());
        }
        let request = v1::RegisterRequest {
            name: self.config.name.clone(),
            slots: self.config.slots,
            capabilities: self.runners.capabilities(),
            agents: self.runners.agents(),
            networks: self.runners.networks(),
            model_endpoints: self.runners.model_endpoints(),
            protocol_version: vcurve_proto::PROTOCOL_VERSION.to_owned(),
        };
        let mut backoff = Backoff::new();
        let mut failures = 0u32;
        loop {
            match self.coordinator.register(request.clone()).await {
                Ok(response) => {
                    let interval = match response.heartbeat_interval_ms {
                        0 => DEFAULT_HEARTBEAT,
                        ms => Duration::from_millis(u64::from(ms).max(10)),
                    };
                    let mut session = lock(&self.session);
                    session.generation += 1;
                    session.worker_id = response.worker_id;
                    session.heartbeat_interval = interval;
                    self.counters.registrations.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        worker = %session.worker_id,
                        name = %self.config.name,
                        slots = self.config.slots,
                        capabilities = ?request.capabilities,
                        model_endpoints = ?request.model_endpoints,
                        heartbeat_ms = interval.as_millis() as u64,
                        lease_timeout_ms = response.lease_timeout_ms,
                        "registered"
                    );
                    return Ok(());
                }
                Err(error) if error.is_retryable() => {
                    failures += 1;
                    let delay = backoff.next_delay();
                    tracing::warn!(
                        coordinator = %self.config.coordinator,
                        %error,
                        failures,
                        retry_in_ms = delay.as_millis() as u64,
                        "cannot register yet"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stop.cancelled() => return Ok(()),
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Register again after the coordinator said it does not know this worker.
    async fn reregister(&self, seen_generation: u64, stop: &CancellationToken) {
        tracing::warn!(worker = %self.worker_id(), "the coordinator does not know this worker: registering again");
        if let Err(error) = self.register(seen_generation, stop).await {
            self.set_fatal(error);
        }
    }
}

async fn lease_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(shared.config.slots as usize));
    let wait = shared.config.lease_wait;
    let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
    let mut backoff = Backoff::new();
    let mut failures = 0u32;
    let mut unknown_in_a_row = 0u32;
    loop {
        // `biased`: once stopped, a free slot must not win the race against the stop.
        let first = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            permit = slots.clone().acquire_owned() => permit.expect("the slot semaphore is never closed"),
        };
        let mut permits = vec![first];
        while let Ok(permit) = slots.clone().try_acquire_owned() {
            permits.push(permit);
        }
        let (generation, worker_id) = shared.session();
        let snapshot_trajectories = shared.runners.all().flat_map(|r| r.snapshot_trajectories()).collect();
        // The registry snapshots travel through, and what was pushed there since the last answer
        // (given back to its runner if this request fails, for the next one).
        let snapshot_registry = shared.runners.all().find_map(|r| r.snapshot_registry());
        let pushed: Vec<_> = shared
            .runners
            .all()
            .filter(|r| snapshot_registry.is_some() && r.snapshot_registry() == snapshot_registry)
            .map(|r| (r.clone(), r.take_pushed()))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        let request = v1::LeaseRequest {
            worker_id,
            max_jobs: u32::try_from(permits.len()).unwrap_or(u32::MAX),
            wait_ms,
            snapshot_trajectories,
            snapshot_registry: snapshot_registry.unwrap_or_default(),
            pushed_snapshots: pushed.iter().flat_map(|(_, p)| p.iter().map(wire::registry_snapshot_to_wire)).collect(),
        };
        let asked = Instant::now();
        // Not raced against `stop`: dropping the call could lose jobs the coordinator has already
        // leased to us; they would sit unheld until their leases expire.
        let leased = shared.coordinator.lease(request, wait).await;
        if leased.is_err() {
            for (runner, pushed) in pushed {
                runner.untake_pushed(pushed);
            }
        }
        match leased {
            Ok(response) => {
                unknown_in_a_row = 0;
                if failures > 0 {
                    tracing::info!(failures, "coordinator reachable again");
                    failures = 0;
                }
                backoff.reset();
                let empty = response.jobs.is_empty();
                let mut give_back = Vec::new();
                for job in response.jobs {
                    match permits.pop() {
                        Some(permit) if !stop.is_cancelled() => shared.start(job, permit),
                        _ => give_back
                            .extend(wire::job_from_wire(job).map_or_else(|bad| bad.held, |spec| Some(spec.held()))),
                    }
                }
                if !give_back.is_empty() {
                    tracing::info!(
                        jobs = give_back.len(),
                        "giving back jobs leased during shutdown or beyond the free slots"
                    );
                    shared.release(give_back).await;
                }
                // A coordinator that answers an empty lease before the wait is over (or a zero
                // wait) would make this loop spin; pace it.
                let pause = if wait.is_zero() {
                    EMPTY_POLL_PAUSE
                } else {
                    wait.saturating_sub(asked.elapsed()).min(4 * EMPTY_POLL_PAUSE)
                };
                if empty && !pause.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
            Err(WorkerError::UnknownWorker { .. }) => {
                drop(permits);
                // Forgotten again right after registering: something is off at the coordinator;
                // do not churn registrations.
                unknown_in_a_row += 1;
                if unknown_in_a_row > 1 {
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = stop.cancelled() => return,
                    }
                }
                shared.reregister(generation, &stop).await;
            }
            Err(error) if error.is_retryable() => {
                drop(permits);
                failures += 1;
                let delay = backoff.next_delay();
                if failures == 1 {
                    tracing::warn!(%error, "lease failed; retrying with backoff");
                } else {
                    tracing::debug!(%error, failures, "lease failed again");
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => return,
                }
            }
            Err(error) => {
                shared.set_fatal(error);
                return;
            }
        }
    }
}

async fn heartbeat_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let interval = lock(&shared.session).heartbeat_interval;
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let (generation, worker_id) = shared.session();
        let jobs = shared.held_jobs();
        let request = v1::HeartbeatRequest { worker_id, jobs: jobs.iter().map(wire::held_to_wire).collect() };
        match shared.coordinator.heartbeat(request).await {
            Ok(response) => {
                if failures > 0 {
                    tracing::info!(failures, held = jobs.len(), "heartbeats go through again");
                    failures = 0;
                }
                for revoked in response.revoked.into_iter().filter_map(wire::held_from_wire) {
                    shared.revoke(&revoked);
                }
                if response.unknown_worker {
                    shared.reregister(generation, &stop).await;
                }
            }
            Err(WorkerError::UnknownWorker { .. }) => shared.reregister(generation, &stop).await,
            Err(error) if error.is_rejection() && !error.is_retryable() => {
                shared.set_fatal(error);
                return;
            }
            Err(error) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(%error, held = jobs.len(), "heartbeat failed; the leases hold until the lease timeout");
                } else {
                    tracing::debug!(%error, failures, "heartbeat failed again");
                }
            }
        }
    }
}
