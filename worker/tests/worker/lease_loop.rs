//! The worker against a fake coordinator: a `WorkerService` implemented here, served by tonic on
//! `127.0.0.1:0`, handing out a fixed set of jobs and recording every call.
//!
//! Small durations; the tests that wait for a deadline to pass (a slow fetch, the coordinator
//! away while the worker backs off, retries, the shutdown grace, nothing more happening) run on a
//! paused clock (`start_paused`, which also runs them on one thread): tokio advances it whenever
//! every task is idle, so they take no real time and see timers fire in order. The fake
//! coordinator's long poll wakes when jobs are added ([`Fake::add_jobs`]), not on a timer.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use vcurve_proto::v1;
use vcurve_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use vcurve_record::{EndType, TrajectoryPayload};
use vcurve_worker::runners::synthetic::synthetic_result;
use vcurve_worker::{
    AgentRunner, JobKey, JobReport, JobSpec, Judged, RunOutcome, Runners, SyntheticRunner, WorkerConfig, WorkerError,
    WorkerSummary,
};

const TOKEN: &str = "worker-token";
const WORKER_ID: &str = "w-1";

// ------------------------------------------------------------------------------------------------
// The fake coordinator
// ------------------------------------------------------------------------------------------------

/// `(trajectory/series/t/seed, attempt)`: enough to tell the jobs of one test apart.
type Held = (String, u32);

fn held_of(key: Option<&v1::JobKey>, attempt: u32) -> Held {
    let k = key.expect("every message names its key");
    match k.call.as_str() {
        "" => (format!("{}/{}/{}/{}", k.trajectory, k.series, k.t, k.seed), attempt),
        call => (format!("call/{call}"), attempt),
    }
}

#[derive(Default)]
struct Ledger {
    queue: VecDeque<v1::Job>,
    leased: Vec<Held>,
    /// Leased and not yet reported, released or revoked.
    outstanding: BTreeSet<Held>,
    max_outstanding: usize,
    registrations: Vec<v1::RegisterRequest>,
    reports: Vec<v1::ReportRequest>,
    heartbeats: Vec<Vec<Held>>,
    released: Vec<Held>,
    /// Revoke these the first time a heartbeat lists them.
    to_revoke: BTreeSet<Held>,
    revoked: Vec<Held>,
    /// Answer this many heartbeats with `unknown_worker` (after the first registration).
    forget_worker: u32,
    /// The snapshot registry and the pushed snapshots of every lease request answered.
    lease_localities: Vec<(String, Vec<v1::RegistrySnapshot>)>,
}

#[derive(Default)]
struct Fake {
    ledger: Mutex<Ledger>,
    /// Fail this many Report calls with `UNAVAILABLE` before accepting any.
    fail_reports: AtomicU32,
    report_calls: AtomicU32,
    /// Fail this many Lease calls with `UNAVAILABLE` before answering any.
    fail_leases: AtomicU32,
    lease_calls: AtomicU32,
    /// Register calls, answered or refused.
    register_calls: AtomicU32,
    /// TCP connections accepted, whether or not a TLS handshake or an RPC followed.
    connections: AtomicU32,
    refuse_register: bool,
    heartbeat_ms: u32,
    /// How long GetTrajectory takes to answer.
    fetch_delay: Duration,
    /// GetTrajectory calls, by digest.
    fetches: Mutex<BTreeMap<String, u32>>,
    /// Wakes a waiting Lease when jobs are added.
    work: Notify,
    /// Files by digest: uploaded with PutFile, or given by a test; GetTrajectory serves them.
    files: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl Fake {
    fn new(jobs: Vec<v1::Job>) -> Self {
        let ledger = Ledger { queue: jobs.into(), ..Ledger::default() };
        Self { ledger: Mutex::new(ledger), heartbeat_ms: 20, ..Self::default() }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap()
    }

    /// Queue more jobs, waking a Lease that waits for work.
    fn add_jobs(&self, jobs: impl IntoIterator<Item = v1::Job>) {
        self.ledger().queue.extend(jobs);
        self.work.notify_waiters();
    }

    fn check_token<T>(request: &Request<T>) -> Result<(), Status> {
        let expected = format!("Bearer {TOKEN}");
        match request.metadata().get("authorization").map(|v| v.to_str()) {
            Some(Ok(value)) if value == expected => Ok(()),
            _ => Err(Status::unauthenticated("missing or wrong worker token")),
        }
    }
}

/// The service is implemented on a handle so the same ledger survives a server restart.
#[derive(Clone)]
struct FakeService(Arc<Fake>);

#[tonic::async_trait]
impl WorkerService for FakeService {
    async fn register(&self, request: Request<v1::RegisterRequest>) -> Result<Response<v1::RegisterResponse>, Status> {
        self.0.register_calls.fetch_add(1, Ordering::SeqCst);
        Fake::check_token(&request)?;
        if self.0.refuse_register {
            return Err(Status::failed_precondition("protocol version 1.0 is not supported"));
        }
        let mut ledger = self.0.ledger();
        ledger.registrations.push(request.into_inner());
        let worker_id = format!("w-{}", ledger.registrations.len());
        Ok(Response::new(v1::RegisterResponse {
            worker_id,
            heartbeat_interval_ms: self.0.heartbeat_ms,
            lease_timeout_ms: 10_000,
        }))
    }

    async fn lease(&self, request: Request<v1::LeaseRequest>) -> Result<Response<v1::LeaseResponse>, Status> {
        Fake::check_token(&request)?;
        self.0.lease_calls.fetch_add(1, Ordering::SeqCst);
        if self.0.fail_leases.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(Status::unavailable("the store is restarting"));
        }
        let request = request.into_inner();
        self.0.ledger().lease_localities.push((request.snapshot_registry.clone(), request.pushed_snapshots.clone()));
        let deadline = Instant::now() + Duration::from_millis(u64::from(request.wait_ms));
        loop {
            // Registered before the queue is looked at, so jobs added in between still wake it.
            let added = self.0.work.notified();
            tokio::pin!(added);
            added.as_mut().enable();
            {
                let mut ledger = self.0.ledger();
                if !ledger.queue.is_empty() {
                    let n = (request.max_jobs as usize).min(ledger.queue.len());
                    let jobs: Vec<v1::Job> = ledger.queue.drain(..n).collect();
                    for job in &jobs {
                        let held = held_of(job.key.as_ref(), job.attempt);
                        ledger.leased.push(held.clone());
                        ledger.outstanding.insert(held);
                    }
                    ledger.max_outstanding = ledger.max_outstanding.max(ledger.outstanding.len());
                    return Ok(Response::new(v1::LeaseResponse { jobs }));
                }
            }
            if Instant::now() >= deadline {
                return Ok(Response::new(v1::LeaseResponse { jobs: vec![] }));
            }
            tokio::select! {
                () = added => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        Fake::check_token(&request)?;
        let request = request.into_inner();
        let mut ledger = self.0.ledger();
        if ledger.forget_worker > 0 {
            ledger.forget_worker -= 1;
            return Ok(Response::new(v1::HeartbeatResponse { revoked: vec![], unknown_worker: true }));
        }
        let listed: Vec<Held> = request.jobs.iter().map(|j| held_of(j.key.as_ref(), j.attempt)).collect();
        let mut revoked = Vec::new();
        for (wire, held) in request.jobs.iter().zip(&listed) {
            if ledger.to_revoke.remove(held) {
                ledger.outstanding.remove(held);
                ledger.revoked.push(held.clone());
                revoked.push(wire.clone());
            }
        }
        ledger.heartbeats.push(listed);
        Ok(Response::new(v1::HeartbeatResponse { revoked, unknown_worker: false }))
    }

    async fn report(&self, request: Request<v1::ReportRequest>) -> Result<Response<v1::ReportResponse>, Status> {
        Fake::check_token(&request)?;
        self.0.report_calls.fetch_add(1, Ordering::SeqCst);
        let fail = self.0.fail_reports.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if fail.is_ok() {
            return Err(Status::unavailable("the store is restarting"));
        }
        let request = request.into_inner();
        let mut ledger = self.0.ledger();
        let accepted = ledger.outstanding.remove(&held_of(request.key.as_ref(), request.attempt));
        ledger.reports.push(request);
        Ok(Response::new(v1::ReportResponse { accepted, detail: String::new() }))
    }

    async fn release(&self, request: Request<v1::ReleaseRequest>) -> Result<Response<v1::ReleaseResponse>, Status> {
        Fake::check_token(&request)?;
        let mut ledger = self.0.ledger();
        let mut released = 0;
        for job in request.into_inner().jobs {
            let held = held_of(job.key.as_ref(), job.attempt);
            if ledger.outstanding.remove(&held) {
                released += 1;
            }
            ledger.released.push(held);
        }
        Ok(Response::new(v1::ReleaseResponse { released }))
    }

    type GetTrajectoryStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<v1::Chunk, Status>> + Send + 'static>>;

    async fn put_file(
        &self,
        request: Request<tonic::Streaming<v1::UploadChunk>>,
    ) -> Result<Response<v1::UploadResponse>, Status> {
        Fake::check_token(&request)?;
        let mut stream = request.into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await? {
            bytes.extend_from_slice(&chunk.data);
        }
        let digest = vcurve_record::trajectory::sha256_hex(&bytes);
        self.0.files.lock().unwrap().insert(digest, bytes);
        Ok(Response::new(v1::UploadResponse::default()))
    }

    async fn lookup_verdict(&self, _: Request<v1::VerdictRequest>) -> Result<Response<v1::VerdictResponse>, Status> {
        Err(Status::unimplemented("the synthetic runner judges no patch"))
    }

    async fn get_trajectory(
        &self,
        request: Request<v1::GetTrajectoryRequest>,
    ) -> Result<Response<Self::GetTrajectoryStream>, Status> {
        Fake::check_token(&request)?;
        let digest = request.into_inner().digest;
        *self.0.fetches.lock().unwrap().entry(digest.clone()).or_default() += 1;
        tokio::time::sleep(self.0.fetch_delay).await;
        if let Some(file) = self.0.files.lock().unwrap().get(&digest) {
            return Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(v1::Chunk { data: file.clone() })]))));
        }
        let payload = curve_payload();
        if digest != payload.digest() {
            return Err(Status::not_found(format!("no trajectory {digest}")));
        }
        // Two chunks, as a large payload would come.
        let bytes = payload.canonical_bytes();
        let (a, b) = bytes.split_at(bytes.len() / 2);
        let chunks = vec![Ok(v1::Chunk { data: a.to_vec() }), Ok(v1::Chunk { data: b.to_vec() })];
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }
}

/// A running fake server; dropping the handle's sender stops it gracefully.
struct Server {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(fake: &Arc<Fake>, listener: TcpListener) -> Self {
        Self::start_with(fake, listener, None).await
    }

    async fn start_with(
        fake: &Arc<Fake>,
        listener: TcpListener,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = WorkerServiceServer::new(FakeService(fake.clone()));
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).expect("server TLS config");
        }
        let fake = fake.clone();
        let incoming = TcpListenerStream::new(listener).inspect(move |_| {
            fake.connections.fetch_add(1, Ordering::SeqCst);
        });
        let task = tokio::spawn(async move {
            builder
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .expect("fake coordinator serves");
        });
        Self { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(3), self.task).await;
    }
}

async fn start_fake(fake: Fake) -> (Arc<Fake>, SocketAddr, Server) {
    let fake = Arc::new(fake);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::start(&fake, listener).await;
    (fake, addr, server)
}

// ------------------------------------------------------------------------------------------------
// Jobs, a probing runner, helpers
// ------------------------------------------------------------------------------------------------

/// The one trajectory payload the fake coordinator serves.
fn curve_payload() -> TrajectoryPayload {
    TrajectoryPayload {
        task: "task".into(),
        length: 4,
        curve: Some(vec![0.9, 0.7, 0.5, 0.1]),
        recorded: None,
        task_def: None,
        problem_statement_sha256: None,
        instructions: None,
    }
}

fn job(trajectory: &str, seed: u32, attempt: u32, kind: &str, options: &str) -> v1::Job {
    v1::Job {
        key: Some(v1::JobKey {
            kind: v1::JobKind::Continuation.into(),
            study: "study-1".into(),
            trajectory: trajectory.into(),
            series: "main".into(),
            t: 2,
            seed,
            ..Default::default()
        }),
        attempt,
        budget: 98,
        runner: Some(v1::RunnerSpec { kind: kind.into(), options_json: options.into(), study_seed: 7 }),
        trajectory_digest: curve_payload().digest(),
        anchors: vec![],
        registry_snapshot: None,
    }
}

fn probe_job(seed: u32, duration_ms: u64) -> v1::Job {
    job("probe", seed, 1, "probe", &format!(r#"{{"duration_ms": {duration_ms}}}"#))
}

fn held(trajectory: &str, seed: u32, attempt: u32) -> Held {
    (format!("{trajectory}/main/2/{seed}"), attempt)
}

/// Counts concurrent runs and records which runs were cancelled.
#[derive(Default)]
struct Probe {
    running: AtomicUsize,
    max_running: AtomicUsize,
    started: Mutex<Vec<Held>>,
    cancelled: Mutex<Vec<Held>>,
}

struct ProbeRunner(Arc<Probe>);

impl AgentRunner for ProbeRunner {
    fn kind(&self) -> &'static str {
        "probe"
    }

    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, JobReport> {
        let probe = self.0.clone();
        Box::pin(async move {
            let seed = job.key.continuation().expect("a continuation").seed;
            probe.started.lock().unwrap().push(held("probe", seed, job.attempt));
            let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
            probe.max_running.fetch_max(now, Ordering::SeqCst);
            let ms = job.runner.options_json()["duration_ms"].as_u64().unwrap_or(20);
            let cancelled = tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => false,
                () = cancel.cancelled() => true,
            };
            probe.running.fetch_sub(1, Ordering::SeqCst);
            if cancelled {
                probe.cancelled.lock().unwrap().push(held("probe", seed, job.attempt));
                return JobReport::no_outcome("cancelled");
            }
            assert_eq!(job.trajectory.as_deref(), Some(&curve_payload()), "the payload is fetched before the run");
            JobReport::Outcome(RunOutcome {
                success: true,
                steps: 1,
                end_type: EndType::Submitted,
                patch_sha256: "probe".into(),
                judged: Judged::Evaluated,
                recorded: None,
            })
        })
    }
}

fn runners(probe: &Arc<Probe>) -> Runners {
    Runners::new().with(SyntheticRunner).with(ProbeRunner(probe.clone()))
}

fn config(addr: SocketAddr, slots: u32) -> WorkerConfig {
    let mut config = WorkerConfig::new(format!("http://{addr}"));
    config.slots = slots;
    config.name = "test-worker".into();
    config.token = Some(TOKEN.into());
    config.lease_wait = Duration::from_millis(100);
    config.shutdown_grace = Duration::from_millis(300);
    config
}

/// Wait until `condition` holds ([`vcurve_testkit::wait::until`]); panics after `within`.
async fn eventually(what: &str, within: Duration, condition: impl Fn() -> bool) {
    vcurve_testkit::wait::until(within, what, async || if condition() { Ok(()) } else { Err("not yet") }).await;
}

/// Start a worker whose shutdown is the returned token.
fn spawn_worker(
    config: WorkerConfig,
    runners: Runners,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerSummary, WorkerError>>) {
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    let worker = tokio::spawn(vcurve_worker::run(config, runners, async move {
        signal.cancelled().await;
    }));
    (shutdown, worker)
}

async fn finish(
    worker: tokio::task::JoinHandle<Result<WorkerSummary, WorkerError>>,
) -> Result<WorkerSummary, WorkerError> {
    tokio::time::timeout(Duration::from_secs(5), worker).await.expect("worker stops").unwrap()
}

/// Reports per `(key, attempt)`.
fn report_counts(reports: &[v1::ReportRequest]) -> BTreeMap<Held, usize> {
    let mut counts = BTreeMap::new();
    for r in reports {
        *counts.entry(held_of(r.key.as_ref(), r.attempt)).or_default() += 1;
    }
    counts
}

// ------------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_reported_once_with_its_attempt_within_the_slots() {
    let mut jobs = Vec::new();
    for seed in 0..8 {
        jobs.push(job("traj-a", seed, 1 + seed % 3, "synthetic", r#"{"duration_ms": 15}"#));
        jobs.push(probe_job(seed, 30));
    }
    jobs.push(job("traj-x", 0, 2, "nope", "{}"));
    let specs: Vec<v1::Job> = jobs.clone();
    let total = jobs.len();
    let (fake, addr, server) = start_fake(Fake::new(jobs)).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 3), runners(&probe));
    eventually("all reported", Duration::from_secs(5), || fake.ledger().reports.len() >= total).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    // Exactly once per key, with the attempt it was leased under.
    let counts = report_counts(&fake.ledger().reports);
    assert_eq!(counts.len(), total, "{counts:?}");
    for job in &specs {
        assert_eq!(counts.get(&held_of(job.key.as_ref(), job.attempt)), Some(&1));
    }

    let ledger = fake.ledger();
    // Slots: never more than 3 leases outstanding, never more than 3 runs at once; and the
    // worker did use its slots.
    assert!(ledger.max_outstanding <= 3, "outstanding {}", ledger.max_outstanding);
    assert!(ledger.max_outstanding >= 2, "outstanding {}", ledger.max_outstanding);
    assert!(probe.max_running.load(Ordering::SeqCst) <= 3);

    // Registration: name, slots, capabilities, protocol version; reports carry the worker id.
    assert_eq!(ledger.registrations.len(), 1);
    let registration = &ledger.registrations[0];
    assert_eq!((registration.name.as_str(), registration.slots), ("test-worker", 3));
    assert_eq!(registration.capabilities, vec!["probe".to_owned(), "synthetic".to_owned()]);
    assert_eq!(registration.protocol_version, vcurve_worker::PROTOCOL_VERSION);
    assert!(ledger.reports.iter().all(|r| r.worker_id == WORKER_ID));

    // Heartbeats list held jobs, and only jobs that were leased.
    assert!(ledger.heartbeats.iter().any(|listed| !listed.is_empty()), "{:?}", ledger.heartbeats);
    for listed in &ledger.heartbeats {
        assert!(listed.len() <= 3);
        assert!(listed.iter().all(|h| ledger.leased.contains(h)));
    }

    // Results: the synthetic ones are the runner's pure function of the key; the unknown kind is
    // a no-outcome naming it.
    for report in &ledger.reports {
        let key = report.key.as_ref().unwrap();
        match key.trajectory.as_str() {
            "traj-a" => {
                let spec = JobSpec {
                    key: JobKey::Continuation(vcurve_worker::ContinuationKey {
                        study: key.study.clone(),
                        trajectory: key.trajectory.clone(),
                        series: vcurve_method::schedule::Series::parse(&key.series).unwrap(),
                        t: key.t,
                        seed: key.seed,
                    }),
                    attempt: report.attempt,
                    budget: 98,
                    runner: vcurve_record::RunnerSpec::Synthetic(Default::default()),
                    study_seed: 7,
                    trajectory_digest: None,
                    trajectory: Some(Arc::new(curve_payload())),
                    anchors: vec![],
                    registry_snapshot: None,
                };
                let Some(v1::report_request::Result::Outcome(o)) = &report.result else { panic!("{report:?}") };
                let JobReport::Outcome(expected) = synthetic_result(&spec) else { panic!("not an outcome") };
                assert_eq!(
                    (o.success, o.steps, o.patch_sha256.as_str()),
                    (expected.success, expected.steps, expected.patch_sha256.as_str())
                );
                assert_eq!(
                    o.end_type,
                    i32::from(match expected.end_type {
                        EndType::StepCap => v1::EndType::StepCap,
                        _ => v1::EndType::Submitted,
                    })
                );
                assert_eq!(o.judged, i32::from(v1::Judged::Evaluated));
                assert!(report.duration_ms >= 15);
            }
            "traj-x" => assert_eq!(
                report.result,
                Some(v1::report_request::Result::NoOutcome(v1::NoOutcome { reason: "unsupported runner nope".into() }))
            ),
            _ => {}
        }
    }
    drop(ledger);

    assert_eq!(summary.reported, total as u64);
    assert_eq!(summary.accepted, total as u64);
    assert_eq!(summary.no_outcomes, 1);
    assert_eq!((summary.released, summary.revoked, summary.abandoned), (0, 0, 0));
    assert_eq!(summary.worker_id.as_deref(), Some(WORKER_ID));
    // Every job names the same trajectory by digest: it was fetched once, and kept.
    assert_eq!(*fake.fetches.lock().unwrap(), BTreeMap::from([(curve_payload().digest(), 1)]));
    assert_eq!(summary.trajectories_fetched, 1);
}

#[tokio::test(start_paused = true)]
async fn failed_reports_are_retried_until_they_go_through() {
    let jobs: Vec<v1::Job> = (0..5).map(|seed| probe_job(seed, 5)).collect();
    let fake = Fake { fail_reports: AtomicU32::new(6), ..Fake::new(jobs) };
    let (fake, addr, server) = start_fake(fake).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 2), runners(&probe));
    eventually("all reported", Duration::from_secs(5), || fake.ledger().reports.len() >= 5).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    let counts = report_counts(&fake.ledger().reports);
    assert_eq!(counts.len(), 5);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    assert_eq!(fake.report_calls.load(Ordering::SeqCst), 11, "6 refused, then 5 accepted");
    assert_eq!((summary.reported, summary.accepted), (5, 5));
    assert!(fake.ledger().max_outstanding <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_job_is_cancelled_and_not_reported() {
    let jobs = vec![probe_job(0, 60_000), probe_job(1, 100)];
    let fake = Fake::new(jobs);
    fake.ledger().to_revoke.insert(held("probe", 0, 1));
    let (fake, addr, server) = start_fake(fake).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 2), runners(&probe));
    eventually("the long job is revoked", Duration::from_secs(5), || !fake.ledger().revoked.is_empty()).await;
    eventually("the short job is reported", Duration::from_secs(5), || fake.ledger().reports.len() == 1).await;
    // The revocation may land while the job still fetches its trajectory: then its runner never
    // starts. Either way nothing runs once the short job is done (the long one would take 60 s).
    eventually("no job runs", Duration::from_secs(5), || probe.running.load(Ordering::SeqCst) == 0).await;
    // A few more heartbeats: the revoked job must no longer be listed.
    let seen = fake.ledger().heartbeats.len();
    eventually("two more heartbeats", Duration::from_secs(2), || fake.ledger().heartbeats.len() >= seen + 2).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    let long = held("probe", 0, 1);
    let started_long = probe.started.lock().unwrap().contains(&long);
    assert_eq!(probe.cancelled.lock().unwrap().contains(&long), started_long, "started means cancelled");
    let ledger = fake.ledger();
    assert_eq!(ledger.revoked, vec![long]);
    assert_eq!(held_of(ledger.reports[0].key.as_ref(), 1), held("probe", 1, 1));
    assert!(ledger.heartbeats[seen..].iter().all(|listed| !listed.contains(&held("probe", 0, 1))));
    assert!(ledger.released.is_empty());
    assert_eq!((summary.revoked, summary.reported, summary.released), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_job_revoked_while_its_trajectory_is_fetched_never_runs() {
    let fake = Fake { fetch_delay: Duration::from_millis(400), ..Fake::new(vec![probe_job(0, 60_000)]) };
    fake.ledger().to_revoke.insert(held("probe", 0, 1));
    let (fake, addr, server) = start_fake(fake).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 1), runners(&probe));
    eventually("the job is revoked", Duration::from_secs(5), || !fake.ledger().revoked.is_empty()).await;
    // Past the fetch: a runner that started now would be seen.
    tokio::time::sleep(Duration::from_millis(600)).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    assert!(probe.started.lock().unwrap().is_empty(), "the runner never starts");
    let ledger = fake.ledger();
    assert!(ledger.reports.is_empty() && ledger.released.is_empty());
    assert_eq!((summary.revoked, summary.reported, summary.released), (1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn shutdown_finishes_short_jobs_and_releases_the_rest() {
    // Three slots: a short job and two long ones; when the short one is done a fourth (long)
    // job takes its slot. Shutdown then: grace 300 ms, the long ones are released.
    let jobs = vec![probe_job(0, 30), probe_job(1, 60_000), probe_job(2, 60_000), probe_job(3, 60_000)];
    let (fake, addr, server) = start_fake(Fake::new(jobs)).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 3), runners(&probe));
    eventually("four leased, three running", Duration::from_secs(5), || {
        fake.ledger().leased.len() == 4 && probe.running.load(Ordering::SeqCst) == 3
    })
    .await;
    // Work that appears now is not leased: leasing stops at shutdown.
    fake.add_jobs([probe_job(9, 10)]);
    let started = Instant::now();
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    let took = started.elapsed();
    server.stop().await;

    let ledger = fake.ledger();
    let released: BTreeSet<Held> = ledger.released.iter().cloned().collect();
    let expected: BTreeSet<Held> = (1..=3).map(|seed| held("probe", seed, 1)).collect();
    assert_eq!(released, expected);
    assert_eq!(ledger.reports.len(), 1, "only the short job is reported");
    assert!(ledger.queue.len() == 1, "no lease after shutdown");
    assert!(ledger.outstanding.is_empty());
    let cancelled: BTreeSet<Held> = probe.cancelled.lock().unwrap().iter().cloned().collect();
    assert_eq!(cancelled, expected);
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{took:?}");
    assert_eq!((summary.leased, summary.reported, summary.released), (4, 1, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_finishing_within_the_grace_are_reported_not_released() {
    let jobs = vec![probe_job(0, 100), probe_job(1, 150)];
    let (fake, addr, server) = start_fake(Fake::new(jobs)).await;
    let probe = Arc::new(Probe::default());

    let mut config = config(addr, 2);
    config.shutdown_grace = Duration::from_secs(3);
    let (shutdown, worker) = spawn_worker(config, runners(&probe));
    eventually("both running", Duration::from_secs(5), || probe.running.load(Ordering::SeqCst) == 2).await;
    // A slot frees up during the grace period, but leasing has stopped.
    fake.add_jobs([probe_job(9, 10)]);
    let started = Instant::now();
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2), "it did not wait out the grace");
    server.stop().await;
    assert_eq!((summary.leased, summary.reported, summary.released), (2, 2, 0));
    assert!(fake.ledger().released.is_empty());
    assert_eq!(fake.ledger().queue.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_worker_registers_again_and_carries_on() {
    let jobs: Vec<v1::Job> = (0..4).map(|seed| probe_job(seed, 40)).collect();
    let fake = Fake::new(jobs);
    fake.ledger().forget_worker = 1;
    let (fake, addr, server) = start_fake(fake).await;
    let probe = Arc::new(Probe::default());

    let (shutdown, worker) = spawn_worker(config(addr, 1), runners(&probe));
    eventually("all reported", Duration::from_secs(5), || fake.ledger().reports.len() >= 4).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    let ledger = fake.ledger();
    assert_eq!(ledger.registrations.len(), 2);
    assert_eq!(summary.registrations, 2);
    assert_eq!(summary.worker_id.as_deref(), Some("w-2"));
    assert!(ledger.reports.iter().any(|r| r.worker_id == "w-2"));
    assert_eq!(report_counts(&ledger.reports).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_token_or_refused_registration_is_fatal() {
    let (_fake, addr, server) = start_fake(Fake::new(vec![])).await;
    let probe = Arc::new(Probe::default());

    let mut wrong = config(addr, 1);
    wrong.token = Some("not-the-token".into());
    let (_shutdown, worker) = spawn_worker(wrong, runners(&probe));
    let error = finish(worker).await.unwrap_err();
    assert!(matches!(error, WorkerError::Unauthenticated { rpc: "Register", .. }), "{error}");
    assert!(!error.is_retryable());
    assert!(!error.to_string().contains("not-the-token"));

    let mut none = config(addr, 1);
    none.token = None;
    let (_shutdown, worker) = spawn_worker(none, runners(&probe));
    assert!(matches!(finish(worker).await, Err(WorkerError::Unauthenticated { .. })));
    server.stop().await;

    let refusing = Fake { refuse_register: true, ..Fake::new(vec![]) };
    let (_fake, addr, server) = start_fake(refusing).await;
    let (_shutdown, worker) = spawn_worker(config(addr, 1), runners(&probe));
    let error = finish(worker).await.unwrap_err();
    assert!(matches!(error, WorkerError::Refused { code: tonic::Code::FailedPrecondition, .. }), "{error}");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_worker_waits_for_the_coordinator_and_survives_its_restart() {
    // Reserve a port, then start the worker before anything listens on it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let jobs: Vec<v1::Job> = (0..8).map(|seed| probe_job(seed, 40)).collect();
    let fake = Arc::new(Fake::new(jobs));
    let probe = Arc::new(Probe::default());
    let (shutdown, worker) = spawn_worker(config(addr, 2), runners(&probe));

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fake.ledger().registrations.is_empty());
    let server = Server::start(&fake, TcpListener::bind(addr).await.unwrap()).await;
    eventually("three reported", Duration::from_secs(5), || fake.ledger().reports.len() >= 3).await;

    // The coordinator goes away for a while: leases, heartbeats and reports fail meanwhile.
    server.stop().await;
    let reported_before = fake.ledger().reports.len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = Server::start(&fake, TcpListener::bind(addr).await.unwrap()).await;
    eventually("all reported", Duration::from_secs(5), || fake.ledger().reports.len() >= 8).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    assert!(reported_before < 8, "the restart happened mid-study");
    let counts = report_counts(&fake.ledger().reports);
    assert_eq!(counts.len(), 8);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    assert_eq!(fake.ledger().registrations.len(), 1, "the restarted coordinator still knows it");
    assert_eq!((summary.reported, summary.released, summary.abandoned), (8, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_coordinator_is_trusted_through_the_configured_ca() -> anyhow::Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tonic::transport::{Identity, ServerTlsConfig};

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let server_key = KeyPair::generate()?;
    let server_cert = CertificateParams::new(vec!["localhost".to_owned()])?.signed_by(&server_key, &ca)?;
    let dir = tempfile::tempdir()?;
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem())?;

    let fake = Arc::new(Fake::new((0..3).map(|seed| probe_job(seed, 5)).collect()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(server_cert.pem(), server_key.serialize_pem()));
    let server = Server::start_with(&fake, listener, Some(tls)).await;

    let probe = Arc::new(Probe::default());
    let mut config = config(([127, 0, 0, 1], port).into(), 2);
    config.coordinator = format!("https://localhost:{port}");
    config.tls_ca = Some(ca_file);
    let (shutdown, worker) = spawn_worker(config, runners(&probe));
    eventually("all reported over TLS", Duration::from_secs(5), || fake.ledger().reports.len() >= 3).await;
    shutdown.cancel();
    let summary = finish(worker).await?;
    server.stop().await;
    assert_eq!(summary.reported, 3);

    // A CA file that does not exist is a fatal TLS error, before any connection.
    let mut missing = WorkerConfig::new(format!("https://localhost:{port}"));
    missing.tls_ca = Some(dir.path().join("absent.pem"));
    let error = vcurve_worker::run(missing, Runners::builtin(), std::future::pending()).await.unwrap_err();
    assert!(matches!(error, WorkerError::Tls(_)), "{error}");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn dropping_the_worker_future_cancels_its_jobs_and_stops_leasing() {
    let jobs: Vec<v1::Job> = (0..4).map(|seed| probe_job(seed, 60_000)).collect();
    let (fake, addr, server) = start_fake(Fake::new(jobs)).await;
    let probe = Arc::new(Probe::default());
    let (_shutdown, worker) = spawn_worker(config(addr, 2), runners(&probe));
    eventually("two running", Duration::from_secs(5), || probe.running.load(Ordering::SeqCst) == 2).await;
    worker.abort();
    eventually("runs cancelled", Duration::from_secs(5), || probe.cancelled.lock().unwrap().len() == 2).await;
    let heartbeats = fake.ledger().heartbeats.len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (leased, heartbeats_after) = {
        let ledger = fake.ledger();
        (ledger.leased.len(), ledger.heartbeats.len())
    };
    server.stop().await;
    assert_eq!(leased, 2, "no lease after the worker was dropped");
    assert!(heartbeats_after <= heartbeats + 1, "heartbeats stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_is_asked_for_after_shutdown_even_with_free_slots() {
    let (fake, addr, server) = start_fake(Fake::new(vec![probe_job(0, 60_000)])).await;
    let probe = Arc::new(Probe::default());
    let (shutdown, worker) = spawn_worker(config(addr, 4), runners(&probe));
    eventually("one running", Duration::from_secs(5), || probe.running.load(Ordering::SeqCst) == 1).await;
    let calls_at_shutdown = fake.lease_calls.load(Ordering::SeqCst);
    shutdown.cancel();
    // Work appears right after: at most the lease already in flight may take (and release) it.
    fake.add_jobs((1..=30).map(|seed| probe_job(seed, 10)));
    let summary = finish(worker).await.unwrap();
    server.stop().await;
    let extra = fake.lease_calls.load(Ordering::SeqCst) - calls_at_shutdown;
    assert!(extra <= 1, "{extra} lease calls after shutdown");
    // The running job, plus at most the in-flight lease's batch (3 free slots), given back.
    assert!((1..=4).contains(&summary.released), "{summary:?}");
    assert_eq!(summary.reported, 0);
}

/// A CA and a certificate for `localhost` it signed, with its key: the TLS side of a fake
/// coordinator, and the PEM file a worker would trust it through.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new() -> Self {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
        Self { ca_pem: ca.pem(), cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    fn server_tls(&self) -> tonic::transport::ServerTlsConfig {
        let identity = tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem);
        tonic::transport::ServerTlsConfig::new().identity(identity)
    }
}

/// A fake coordinator serving TLS with `pki`'s certificate, on `127.0.0.1`.
async fn start_tls_fake(pki: &Pki) -> (Arc<Fake>, u16, Server) {
    let fake = Arc::new(Fake::new(vec![]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = Server::start_with(&fake, listener, Some(pki.server_tls())).await;
    (fake, port, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_does_not_parse_is_refused_at_start() {
    let pki = Pki::new();
    let (fake, port, server) = start_tls_fake(&pki).await;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("garbage.pem", "garbage\n".to_owned(), "no PEM certificate"),
        ("key.pem", pki.key_pem.clone(), "no PEM certificate"),
        (
            "bad.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_owned(),
            "not a valid certificate",
        ),
    ];
    let probe = Arc::new(Probe::default());
    for (name, contents, expected) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        let mut config = config(([127, 0, 0, 1], port).into(), 1);
        config.coordinator = format!("https://localhost:{port}");
        config.tls_ca = Some(path.clone());
        let (_shutdown, worker) = spawn_worker(config, runners(&probe));
        let error = finish(worker).await.unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, WorkerError::Tls(_)), "{message}");
        assert!(message.contains(&path.display().to_string()) && message.contains(expected), "{expected:?}: {message}");
    }
    assert_eq!(fake.connections.load(Ordering::SeqCst), 0, "refused before any connection");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_certificate_or_a_rejected_token_stops_the_worker_after_a_few_attempts() {
    const BOUND: u32 = WorkerError::REJECTED_ATTEMPTS;
    let probe = Arc::new(Probe::default());
    let dir = tempfile::tempdir().unwrap();

    // The coordinator's certificate is signed by a CA the worker does not trust.
    let (pki, other) = (Pki::new(), Pki::new());
    let (fake, port, server) = start_tls_fake(&pki).await;
    let untrusted = dir.path().join("other-ca.pem");
    std::fs::write(&untrusted, &other.ca_pem).unwrap();
    let mut config_tls = config(([127, 0, 0, 1], port).into(), 1);
    config_tls.coordinator = format!("https://localhost:{port}");
    config_tls.tls_ca = Some(untrusted);
    let (_shutdown, worker) = spawn_worker(config_tls, runners(&probe));
    let error = finish(worker).await.unwrap_err();
    let message = error.to_string();
    assert!(!error.is_retryable(), "{message}");
    assert!(message.contains("certificate") && message.contains("--tls-ca"), "{message}");
    let connections = fake.connections.load(Ordering::SeqCst);
    assert!((1..=BOUND).contains(&connections), "{connections} connections");
    server.stop().await;

    // A token the coordinator rejects.
    let (fake, addr, server) = start_fake(Fake::new(vec![])).await;
    let mut wrong = config(addr, 1);
    wrong.token = Some("not-the-token".into());
    let (_shutdown, worker) = spawn_worker(wrong, runners(&probe));
    let error = finish(worker).await.unwrap_err();
    assert!(matches!(error, WorkerError::Unauthenticated { rpc: "Register", .. }), "{error}");
    assert_eq!(fake.register_calls.load(Ordering::SeqCst), BOUND);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_meeting_the_other_protocol_is_told_so() {
    let pki = Pki::new();
    let probe = Arc::new(Probe::default());

    // Plaintext worker, TLS coordinator.
    let (_fake, port, server) = start_tls_fake(&pki).await;
    let url = format!("http://127.0.0.1:{port}");
    let mut plain = config(([127, 0, 0, 1], port).into(), 1);
    plain.coordinator = url.clone();
    let (_shutdown, worker) = spawn_worker(plain, runners(&probe));
    let error = finish(worker).await.unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(
        error.to_string().contains(&format!("the coordinator at {url} speaks TLS: use https:// and --tls-ca")),
        "{error}"
    );
    server.stop().await;

    // TLS worker, plaintext coordinator.
    let (_fake, addr, server) = start_fake(Fake::new(vec![])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let url = format!("https://localhost:{}", addr.port());
    let mut tls = config(addr, 1);
    tls.coordinator = url.clone();
    tls.tls_ca = Some(ca);
    let (_shutdown, worker) = spawn_worker(tls, runners(&probe));
    let error = finish(worker).await.unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(
        error.to_string().contains(&format!("the coordinator at {url} does not speak TLS: use http://")),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_dropped_before_any_answer_are_retried_past_the_rejection_bound() {
    const BOUND: u32 = WorkerError::REJECTED_ATTEMPTS;
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    for tls in [false, true] {
        // A coordinator restarting: the port accepts and at once closes every connection.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dropped = Arc::new(AtomicU32::new(0));
        let dropping = tokio::spawn({
            let dropped = dropped.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    drop(stream);
                    dropped.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let probe = Arc::new(Probe::default());
        let mut config = config(addr, 1);
        if tls {
            config.coordinator = format!("https://localhost:{}", addr.port());
            config.tls_ca = Some(ca.clone());
        }
        let (shutdown, worker) = spawn_worker(config, runners(&probe));
        // An attempt past the bound; over plaintext each failed attempt also probes for TLS.
        let connections_per_attempt = if tls { 1 } else { 2 };
        eventually("an attempt past the bound", Duration::from_secs(10), || {
            dropped.load(Ordering::SeqCst) >= (BOUND + 1) * connections_per_attempt
        })
        .await;
        assert!(!worker.is_finished(), "tls {tls}: the worker gave up on a transient failure");
        dropping.abort();
        let _ = dropping.await;

        // The coordinator is back: the worker registers and carries on.
        let fake = Arc::new(Fake::new(vec![probe_job(0, 5)]));
        let listener = TcpListener::bind(addr).await.unwrap();
        let server = Server::start_with(&fake, listener, tls.then(|| pki.server_tls())).await;
        eventually("the job reported", Duration::from_secs(10), || fake.ledger().reports.len() == 1).await;
        shutdown.cancel();
        let summary = finish(worker).await.unwrap();
        server.stop().await;
        assert_eq!((summary.registrations, summary.reported), (1, 1), "tls {tls}");
    }
}

/// A runner with a snapshot registry: hands out what it "pushed" once, takes back what a failed
/// lease request could not tell, and records the registry snapshot each job names.
struct RegistryRunner {
    pushed: Mutex<Vec<vcurve_worker::sandbox::snapshots::RegistrySnapshot>>,
    named: Mutex<Vec<Option<vcurve_worker::sandbox::snapshots::RegistrySnapshot>>>,
}

impl AgentRunner for RegistryRunner {
    fn kind(&self) -> &'static str {
        "registry"
    }

    fn run(&self, job: JobSpec, _cancel: CancellationToken) -> BoxFuture<'static, JobReport> {
        self.named.lock().unwrap().push(job.registry_snapshot.clone());
        Box::pin(async { JobReport::no_outcome("only looking") })
    }

    fn snapshot_registry(&self) -> Option<String> {
        Some("registry.test:5000".into())
    }

    fn take_pushed(&self) -> Vec<vcurve_worker::sandbox::snapshots::RegistrySnapshot> {
        std::mem::take(&mut *self.pushed.lock().unwrap())
    }

    fn untake_pushed(&self, pushed: Vec<vcurve_worker::sandbox::snapshots::RegistrySnapshot>) {
        self.pushed.lock().unwrap().extend(pushed);
    }
}

#[tokio::test(start_paused = true)]
async fn pushed_snapshots_reach_the_coordinator_once_even_when_a_lease_fails_and_jobs_name_registry_snapshots() {
    let snapshot = vcurve_worker::sandbox::snapshots::RegistrySnapshot {
        trajectory_digest: vcurve_record::Digest::parse(&curve_payload().digest()).unwrap(),
        t: 2,
        image_id: "sha256:abc".into(),
    };
    let mut job = job("traj-r", 0, 1, "registry", "{}");
    job.registry_snapshot = Some(v1::RegistrySnapshot {
        trajectory_digest: snapshot.trajectory_digest.to_string(),
        t: 2,
        image_id: "sha256:abc".into(),
    });
    let fake = Fake { fail_leases: AtomicU32::new(2), ..Fake::new(vec![job]) };
    let (fake, addr, server) = start_fake(fake).await;
    let runner = Arc::new(RegistryRunner { pushed: Mutex::new(vec![snapshot.clone()]), named: Mutex::default() });
    let mut runners = Runners::new();
    runners.insert(runner.clone());
    let (shutdown, worker) = spawn_worker(config(addr, 1), runners);
    eventually("the job reported", Duration::from_secs(10), || !fake.ledger().reports.is_empty()).await;
    shutdown.cancel();
    finish(worker).await.unwrap();
    server.stop().await;

    assert!(fake.lease_calls.load(Ordering::SeqCst) >= 3, "two failed, then answered");
    let localities = fake.ledger().lease_localities.clone();
    assert!(localities.iter().all(|(registry, _)| registry == "registry.test:5000"), "{localities:?}");
    let told: Vec<&v1::RegistrySnapshot> = localities.iter().flat_map(|(_, p)| p).collect();
    assert_eq!(told.len(), 1, "told once, after the failed requests: {localities:?}");
    assert_eq!((told[0].t, told[0].image_id.as_str()), (2, "sha256:abc"));
    assert_eq!(*runner.named.lock().unwrap(), vec![Some(snapshot)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_job_runs_on_a_worker_offering_only_a_model_endpoint() {
    use super::task_state_jobs::{fast_retry, reader_input};
    use vcurve_record::task_state::CallOutput;
    use vcurve_worker::{ModelCallRunner, ModelEndpoints};

    let model = vcurve_testkit::model_server::ModelServer::start().await.unwrap();
    let input = reader_input(&model.base_url(), None);
    let bytes = serde_json::to_vec(&input).unwrap();
    let digest = vcurve_record::trajectory::sha256_hex(&bytes);
    let call = input.key.as_subject();
    let model_call = |call: &str, attempt: u32| v1::Job {
        key: Some(v1::JobKey {
            kind: v1::JobKind::ModelCall.into(),
            study: "study-1".into(),
            call: call.into(),
            ..Default::default()
        }),
        attempt,
        budget: 0,
        // The study's runner, which this worker does not offer: a model call does not need it.
        runner: Some(v1::RunnerSpec {
            kind: "agent".into(),
            options_json: r#"{"agent": "scripted"}"#.into(),
            study_seed: 7,
        }),
        trajectory_digest: digest.clone(),
        anchors: vec![],
        registry_snapshot: None,
    };
    let fake = Fake::new(vec![model_call(&call, 1)]);
    fake.files.lock().unwrap().insert(digest.clone(), bytes);
    let (fake, addr, server) = start_fake(fake).await;
    // No container runtime, no runner of any kind: the model endpoint alone.
    let endpoints = ModelEndpoints::from_flags(&[model.base_url()]).unwrap();
    let runners = Runners::new().with_model_calls(ModelCallRunner::with_retry(endpoints, fast_retry()));
    let (shutdown, worker) = spawn_worker(config(addr, 2), runners);
    eventually("the call is reported", Duration::from_secs(10), || !fake.ledger().reports.is_empty()).await;
    shutdown.cancel();
    let summary = finish(worker).await.unwrap();
    server.stop().await;

    let ledger = fake.ledger();
    assert_eq!(ledger.registrations[0].model_endpoints, [model.base_url()]);
    assert!(ledger.registrations[0].capabilities.is_empty(), "{:?}", ledger.registrations[0].capabilities);
    assert_eq!((summary.reported, summary.accepted, summary.no_outcomes), (1, 1, 0));
    assert_eq!(summary.trajectories_fetched, 0, "the call's input is a file, not a trajectory payload");
    let report = &ledger.reports[0];
    assert_eq!(held_of(report.key.as_ref(), report.attempt), (format!("call/{call}"), 1));
    let Some(v1::report_request::Result::CallAnswered(answered)) = &report.result else {
        panic!("not call_answered: {:?}", report.result)
    };
    let output: CallOutput =
        serde_json::from_slice(&fake.files.lock().unwrap()[&answered.output_digest]).expect("the uploaded output");
    assert_eq!(output.log.call, call);
    assert!(output.answer.is_some(), "{:?}", output.log.status);
    assert_eq!(model.requests("task_state.reader.v1"), 1);
    assert_eq!(fake.fetches.lock().unwrap().get(&digest), Some(&1), "the input was fetched once, by its digest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_on_a_worker_without_model_endpoints_is_a_no_outcome() {
    let call = v1::Job {
        key: Some(v1::JobKey {
            kind: v1::JobKind::ModelCall.into(),
            study: "study-1".into(),
            call: "calc-1/k1/atoms".into(),
            ..Default::default()
        }),
        attempt: 1,
        budget: 0,
        runner: Some(v1::RunnerSpec { kind: "synthetic".into(), options_json: "{}".into(), study_seed: 7 }),
        trajectory_digest: "ab".repeat(32),
        anchors: vec![],
        registry_snapshot: None,
    };
    let (fake, addr, server) = start_fake(Fake::new(vec![call])).await;
    let (shutdown, worker) = spawn_worker(config(addr, 1), Runners::new().with(SyntheticRunner));
    eventually("the call is reported", Duration::from_secs(10), || !fake.ledger().reports.is_empty()).await;
    shutdown.cancel();
    finish(worker).await.unwrap();
    server.stop().await;
    let ledger = fake.ledger();
    assert!(ledger.registrations[0].model_endpoints.is_empty());
    let Some(v1::report_request::Result::NoOutcome(no)) = &ledger.reports[0].result else {
        panic!("not a no-outcome: {:?}", ledger.reports[0].result)
    };
    assert_eq!(no.reason, "this worker offers no model endpoint: it runs no model calls");
    assert!(fake.fetches.lock().unwrap().is_empty(), "nothing was fetched");
}
