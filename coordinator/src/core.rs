//! The coordinator's logic between the wire and the store: a thin layer, since every decision is
//! either pure (`planner`, the method) or one store transaction. It keeps no state of its own
//! beyond a clock and a wake-up signal for waiting workers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::CoordinatorError;
use crate::model::{
    Digest, HeartbeatVerdict, HeldJob, JobReport, LeasedJob, Locality, Progress, ReportVerdict, StudyId, StudyState,
};
use crate::render::Renderer;
use crate::store::{LaunchInputs, LeasePolicy, Store};

/// Milliseconds since the Unix epoch: the system's, or a manual one that tests move by hand.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Wall-clock time at start, advanced by a monotonic clock.
    System { epoch_ms_at_start: i64, start: Instant },
    /// A clock that only moves when told to.
    Manual(Arc<std::sync::atomic::AtomicI64>),
}

impl Clock {
    pub fn system() -> Self {
        let epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        Clock::System { epoch_ms_at_start: epoch, start: Instant::now() }
    }

    /// A manual clock starting at `start_ms`.
    pub fn manual(start_ms: i64) -> Self {
        Clock::Manual(Arc::new(std::sync::atomic::AtomicI64::new(start_ms)))
    }

    /// Move a manual clock forward (no effect on the system clock).
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(ms) = self {
            ms.fetch_add(by.as_millis() as i64, std::sync::atomic::Ordering::SeqCst);
        }
    }

    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System { epoch_ms_at_start, start } => epoch_ms_at_start + start.elapsed().as_millis() as i64,
            Clock::Manual(ms) => ms.load(std::sync::atomic::Ordering::SeqCst),
        }
    }
}

/// Timing of the worker protocol.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub lease: LeasePolicy,
    /// How often workers heartbeat; a third of the lease timeout by default, so two heartbeats
    /// can be lost before a lease expires.
    pub heartbeat_interval: Duration,
    /// Longest a lease request may wait for work.
    pub max_lease_wait: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease: LeasePolicy::default(),
            heartbeat_interval: Duration::from_secs(10),
            max_lease_wait: Duration::from_secs(5),
        }
    }
}

/// The coordinator. Share it as `Arc<Coordinator<S>>`.
pub struct Coordinator<S> {
    store: S,
    clock: Clock,
    timing: Timing,
    /// Wakes lease requests waiting for work whenever work may have appeared.
    work: Notify,
    renderer: Arc<dyn Renderer>,
    /// The runner kinds a study may name: the ones this build offers, and any a test adds.
    runner_kinds: std::sync::RwLock<std::collections::BTreeSet<String>>,
    /// `(when, milliseconds)` of recent leases that handed out work.
    lease_latencies: std::sync::Mutex<std::collections::VecDeque<(i64, f64)>>,
    /// What this process measures for `/metrics` (the lease latency histogram).
    metrics: crate::metrics::process::ProcessMetrics,
}

/// How long lease latencies are kept for progress.
const LATENCY_WINDOW_MS: i64 = 300_000;
/// At most this many latencies are kept (the oldest go first).
const MAX_LATENCIES: usize = 100_000;

impl<S: Store> Coordinator<S> {
    /// A coordinator over `store`, rendering results with `renderer`.
    pub fn new(store: S, timing: Timing, renderer: Arc<dyn Renderer>) -> Arc<Self> {
        Self::with_clock(store, timing, Clock::system(), renderer)
    }

    /// A coordinator on a given clock (tests use [`Clock::manual`]).
    pub fn with_clock(store: S, timing: Timing, clock: Clock, renderer: Arc<dyn Renderer>) -> Arc<Self> {
        let runner_kinds = vcurve_record::runner::KINDS.iter().map(|k| k.to_string()).collect();
        Arc::new(Coordinator {
            store,
            clock,
            timing,
            work: Notify::new(),
            renderer,
            runner_kinds: std::sync::RwLock::new(runner_kinds),
            lease_latencies: Default::default(),
            metrics: Default::default(),
        })
    }

    /// Accept studies naming runner `kind` besides the ones this build offers (for tests whose
    /// workers run a test double).
    pub fn accept_runner_kind(&self, kind: &str) {
        self.runner_kinds.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(kind.to_string());
    }

    fn record_lease_latency(&self, ms: f64) {
        self.metrics.lease_latency.observe(ms / 1000.0);
        let now = self.now_ms();
        let mut latencies = self.lease_latencies.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        latencies.push_back((now, ms));
        while latencies.len() > MAX_LATENCIES || latencies.front().is_some_and(|(t, _)| *t < now - LATENCY_WINDOW_MS) {
            latencies.pop_front();
        }
    }

    /// p50 and p99 of the leases that handed out work in the last five minutes.
    fn lease_latency(&self) -> Option<crate::model::LeaseLatency> {
        let now = self.now_ms();
        let latencies = self.lease_latencies.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ms: Vec<f64> =
            latencies.iter().filter(|(t, _)| *t >= now - LATENCY_WINDOW_MS).map(|(_, ms)| *ms).collect();
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        // Nearest rank.
        let rank = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Some(crate::model::LeaseLatency { p50_ms: rank(0.50), p99_ms: rank(0.99), leases: ms.len() as u64 })
    }

    /// Run `render` over the renderer on the blocking pool: rendering is study-sized work and
    /// must not stall the heartbeats and leases served on the async runtime.
    pub async fn render<T: Send + 'static>(
        &self,
        render: impl FnOnce(&dyn Renderer) -> Result<T, crate::render::RenderError> + Send + 'static,
    ) -> Result<T, CoordinatorError> {
        let renderer = self.renderer.clone();
        tokio::task::spawn_blocking(move || render(renderer.as_ref()))
            .await
            .map_err(|e| CoordinatorError::Internal(format!("rendering panicked: {e}")))?
            .map_err(CoordinatorError::Render)
    }

    /// What this process measures itself, for `/metrics`.
    pub fn process_metrics(&self) -> &crate::metrics::process::ProcessMetrics {
        &self.metrics
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Register a worker; refuses another major protocol version.
    pub async fn register(
        &self,
        name: &str,
        slots: u32,
        capabilities: &[String],
        protocol: &str,
    ) -> Result<String, CoordinatorError> {
        let major = |v: &str| v.split('.').next().unwrap_or("").to_string();
        if major(protocol) != major(vcurve_proto::PROTOCOL_VERSION) {
            return Err(CoordinatorError::ProtocolMismatch {
                worker: protocol.to_string(),
                coordinator: vcurve_proto::PROTOCOL_VERSION.to_string(),
            });
        }
        if slots == 0 || slots > 100_000 {
            return Err(CoordinatorError::InvalidArgument(format!(
                "slots = {slots}: a worker needs 1 to 100000 slots"
            )));
        }
        let id = self.store.register_worker(name, slots, capabilities, self.now_ms()).await?;
        tracing::info!(worker = %id, name, slots, ?capabilities, "worker registered");
        // More slots may let new trajectories in.
        self.work.notify_waiters();
        Ok(id)
    }

    /// Lease up to `max` jobs, waiting up to `wait` for work to appear.
    pub async fn lease(&self, worker: &str, max: u32, wait: Duration) -> Result<Vec<LeasedJob>, CoordinatorError> {
        self.lease_near(worker, max, wait, &[]).await
    }

    /// [`Coordinator::lease`] for a worker that holds snapshots of the trajectories whose payload
    /// digests are `near`: their continuations come first.
    pub async fn lease_near(
        &self,
        worker: &str,
        max: u32,
        wait: Duration,
        near: &[Digest],
    ) -> Result<Vec<LeasedJob>, CoordinatorError> {
        self.lease_with(worker, max, wait, Locality::near(near)).await
    }

    /// [`Coordinator::lease`] for a worker with `locality`: the snapshots it holds, the registry
    /// it uses and what it pushed there, which is recorded first (once, in the first look's
    /// transaction). Continuations it holds snapshots of come first, then those with a snapshot
    /// in its registry. Pushed snapshots at step 0, registries that are not `HOST:PORT` and image
    /// ids that are not printable are dropped (digests are checked where they come from the wire).
    pub async fn lease_with(
        &self,
        worker: &str,
        max: u32,
        wait: Duration,
        locality: Locality,
    ) -> Result<Vec<LeasedJob>, CoordinatorError> {
        let registry = locality.registry.filter(|r| {
            r.len() <= 255 && r.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        });
        let mut pushed: Vec<_> = match &registry {
            Some(_) => locality
                .pushed
                .into_iter()
                .filter(|p| p.t > 0)
                .filter(|p| !p.image_id.is_empty() && p.image_id.len() <= 255)
                .filter(|p| p.image_id.bytes().all(|b| b.is_ascii_graphic()))
                .take(1000)
                .collect(),
            None => Vec::new(),
        };
        let near: Vec<Digest> = locality.near.into_iter().take(1000).collect();
        let started = Instant::now();
        let deadline = started + wait.min(self.timing.max_lease_wait);
        loop {
            let notified = self.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let locality =
                Locality { near: near.clone(), registry: registry.clone(), pushed: std::mem::take(&mut pushed) };
            let jobs = self.store.lease(worker, max, self.now_ms(), self.timing.lease, &locality).await?;
            if !jobs.is_empty() {
                self.record_lease_latency(started.elapsed().as_secs_f64() * 1000.0);
                for job in jobs.iter().filter(|j| j.key.continuation().is_some()) {
                    let held = job.trajectory_digest.as_ref().is_some_and(|d| near.contains(d));
                    self.metrics.continuation_leased(match (held, &job.registry_snapshot) {
                        (true, _) => "held",
                        (false, Some(_)) => "registry",
                        (false, None) => "none",
                    });
                }
                return Ok(jobs);
            }
            if Instant::now() >= deadline {
                return Ok(jobs);
            }
            // Leases expire and trajectories get admitted with time too: look again now and then.
            let recheck = Instant::now() + Duration::from_millis(500);
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline.min(recheck)) => {}
            }
        }
    }

    pub async fn heartbeat(&self, worker: &str, held: &[HeldJob]) -> Result<HeartbeatVerdict, CoordinatorError> {
        Ok(self.store.heartbeat(worker, held, self.now_ms(), self.timing.lease).await?)
    }

    pub async fn report(
        &self,
        worker: &str,
        job: &HeldJob,
        report: &JobReport,
    ) -> Result<ReportVerdict, CoordinatorError> {
        let reported = self.store.report(worker, job, report, self.now_ms()).await?;
        if reported.wakes {
            self.work.notify_waiters();
        }
        if let ReportVerdict::Ignored(why) = &reported.verdict {
            tracing::info!(worker, key = %job.key, attempt = job.attempt, why = %why, "report ignored");
        }
        Ok(reported.verdict)
    }

    pub async fn release(&self, worker: &str, held: &[HeldJob]) -> Result<u32, CoordinatorError> {
        let n = self.store.release(worker, held).await?;
        self.work.notify_waiters();
        Ok(n)
    }

    /// Validate and store a study; nothing is stored when the spec is invalid.
    pub async fn launch(&self, yaml: &str, files: &BTreeMap<String, String>) -> Result<StudyId, CoordinatorError> {
        self.launch_consuming(yaml, files.clone(), Vec::new(), BTreeMap::new()).await
    }

    /// [`Coordinator::launch`] with the files' contents, which the staged uploads `uploads` held:
    /// the study's transaction drops them. Its tasks' problem statements are taken out of the spec
    /// and stored once each, by digest ([`LaunchInputs`]); a statement that is one of `unread`
    /// (a marker → the digest of the file it stands for) stays that file.
    async fn launch_consuming(
        &self,
        yaml: &str,
        files: BTreeMap<String, String>,
        uploads: Vec<Digest>,
        unread: BTreeMap<String, Digest>,
    ) -> Result<StudyId, CoordinatorError> {
        let yaml = yaml.to_string();
        let kinds = self.runner_kinds.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // Recorded trajectories are megabytes of JSON: parse them off the async runtime.
        let request =
            tokio::task::spawn_blocking(move || crate::spec::parse_request(&yaml, &|p| files.get(p).cloned()))
                .await
                .map_err(|e| CoordinatorError::Internal(format!("parsing the spec panicked: {e}")))??;
        let launch = match request {
            crate::spec::Request::Study(launch) => *launch,
            crate::spec::Request::RestartCheck(check) => {
                crate::spec::Launch { spec: self.restart_check_spec(&check).await?, recorded: Default::default() }
            }
        };
        let kind = launch.spec.runner.kind();
        if !kinds.contains(kind) {
            return Err(CoordinatorError::Spec(crate::spec::SpecError::Field {
                field: "runner.kind".into(),
                message: format!(
                    "= {kind:?} is not a runner this build offers (it offers: {})",
                    kinds.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                ),
            }));
        }
        let mut launch = launch;
        let (mut statements, mut uploaded_statements) = (BTreeMap::new(), BTreeMap::new());
        for t in &mut launch.spec.tasks {
            if let Some(text) = t.task.problem_statement.take() {
                match unread.get(&text) {
                    Some(digest) => {
                        uploaded_statements.insert(t.task.id.clone(), digest.clone());
                    }
                    None => {
                        statements.insert(t.task.id.clone(), text);
                    }
                }
            }
        }
        let payloads = launch.payloads();
        let decoy_runs = launch.decoy_runs();
        let spec = launch.spec;
        let inputs = LaunchInputs { statements, uploaded_statements, uploads, decoy_runs };
        let id = self.store.create_study(&spec, &payloads, &inputs, self.now_ms()).await?;
        tracing::info!(study = %id, name = %spec.name, trajectories = spec.trajectories.len(), "study launched");
        self.work.notify_waiters();
        Ok(id)
    }

    /// The spec of an online restart check of a finished study (Appendix Q), from the study as
    /// stored: its runner, budget and tasks, and the rows the renderer finds (every trajectory
    /// with a restart point).
    async fn restart_check_spec(
        &self,
        check: &crate::spec::restart_check::RestartCheckRequest,
    ) -> Result<vcurve_record::StudySpec, CoordinatorError> {
        let refused = |message: String| {
            CoordinatorError::Spec(crate::spec::SpecError::Field { field: "restart_check.of".into(), message })
        };
        let checked = match self.store.study(&StudyId::from(check.of.as_str())).await {
            Ok(record) => record,
            Err(crate::store::StoreError::UnknownStudy(_)) => {
                return Err(refused(format!("= {:?} is not a study of this coordinator", check.of)));
            }
            Err(e) => return Err(e.into()),
        };
        if checked.state != StudyState::Done {
            return Err(refused(format!(
                "= {:?} is {}; its restart points are checked once it is done",
                check.of,
                checked.state.as_str()
            )));
        }
        // A row's task, where the study does not list it, is the task of its recorded run.
        let mut recorded_tasks = BTreeMap::new();
        for t in &checked.spec.trajectories {
            if checked.spec.tasks.iter().any(|x| x.task.id == t.task) {
                continue;
            }
            if let Some(digest) = t.recorded.as_deref().and_then(|d| Digest::parse(d).ok())
                && let Some(bytes) = self.store.file(&digest).await?
                && let Ok(run) = vcurve_record::Trajectory::from_json(&bytes)
            {
                recorded_tasks.insert(t.id.clone(), run.task);
            }
        }
        let spec = checked.spec.clone();
        let rows = self.render(move |r| r.restart_check_rows(&checked)).await?;
        Ok(crate::spec::restart_check::complete(check, &spec, rows, &|t| recorded_tasks.get(t).cloned())?)
    }

    /// Launch a study whose files were uploaded before: `files` maps each path in the spec to
    /// the SHA-256 it was uploaded under. The launch consumes the staged uploads it names: stored
    /// with its study (what the study references, each problem statement once) or, when it is
    /// refused for any reason, dropped — a refused launch leaves nothing behind.
    pub async fn launch_uploaded(
        &self,
        yaml: &str,
        files: &BTreeMap<String, Digest>,
    ) -> Result<StudyId, CoordinatorError> {
        let uploads: Vec<Digest> = files.values().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        let launched = async {
            // A file named only as a problem statement is not read: the spec is parsed with a
            // marker in its place, and the statement stays the file uploaded, kept by digest
            // inside the database — a 50 MB statement never passes through the coordinator here.
            let statement_files = crate::spec::problem_statement_files(yaml);
            let (mut contents, mut unread) = (BTreeMap::new(), BTreeMap::new());
            for (path, digest) in files {
                if statement_files.contains(path) {
                    if !self.store.missing_files(std::slice::from_ref(digest)).await?.is_empty() {
                        return Err(CoordinatorError::NotUploaded { path: path.clone(), digest: digest.clone() });
                    }
                    let marker = format!("\u{0}the problem statement uploaded as {digest}\u{0}");
                    unread.insert(marker.clone(), digest.clone());
                    contents.insert(path.clone(), marker);
                    continue;
                }
                let bytes = self
                    .store
                    .launch_file(digest)
                    .await?
                    .ok_or_else(|| CoordinatorError::NotUploaded { path: path.clone(), digest: digest.clone() })?;
                let text = String::from_utf8(bytes)
                    .map_err(|e| CoordinatorError::InvalidArgument(format!("{path}: not UTF-8 text: {e}")))?;
                contents.insert(path.clone(), text);
            }
            self.launch_consuming(yaml, contents, uploads.clone(), unread).await
        }
        .await;
        if launched.is_err()
            && let Err(e) = self.store.discard_uploads(&uploads).await
        {
            // They expire anyway (`UPLOAD_TTL_MS`); the refusal is what the client needs to hear.
            tracing::warn!(error = %e, "cannot drop the uploads of a refused launch");
        }
        launched
    }

    /// Keep a worker's file (a patch, a recorded run, fingerprints) after checking its size and
    /// digest; returns whether it was new.
    pub async fn upload(&self, digest: &Digest, content: &[u8]) -> Result<bool, CoordinatorError> {
        check_upload(digest, content)?;
        Ok(self.store.put_file(digest, content, self.now_ms()).await?)
    }

    /// The digests among `digests` neither uploaded for a launch nor kept.
    pub async fn missing_files(&self, digests: &[Digest]) -> Result<Vec<Digest>, CoordinatorError> {
        Ok(self.store.missing_files(digests).await?)
    }

    /// How a file is kept: 0 whole, `n` in `n` pieces ([`Coordinator::file_piece`]).
    pub async fn file_pieces(&self, digest: &Digest) -> Result<u32, CoordinatorError> {
        self.store
            .file_pieces(digest)
            .await?
            .ok_or_else(|| CoordinatorError::NotFound(format!("no trajectory or file with digest {digest}")))
    }

    /// Piece `seq` of a file kept in pieces.
    pub async fn file_piece(&self, digest: &Digest, seq: u32) -> Result<Vec<u8>, CoordinatorError> {
        self.store
            .file_piece(digest, seq)
            .await?
            .ok_or_else(|| CoordinatorError::NotFound(format!("no piece {seq} of the file with digest {digest}")))
    }

    /// A trajectory payload (or any stored file) by its digest.
    pub async fn file(&self, digest: &Digest) -> Result<Vec<u8>, CoordinatorError> {
        self.store
            .file(digest)
            .await?
            .ok_or_else(|| CoordinatorError::NotFound(format!("no trajectory or file with digest {digest}")))
    }

    /// The verdict of a patch already judged in a study (the patch cache, docs/method.md §6).
    pub async fn verdict(
        &self,
        study: &StudyId,
        task: &str,
        patch_sha256: &Digest,
    ) -> Result<Option<bool>, CoordinatorError> {
        Ok(self.store.verdict(study, task, patch_sha256).await?)
    }

    /// Queue evaluations and base runs (see [`Store::enqueue`]).
    pub async fn enqueue(&self, keys: &[crate::model::JobKey]) -> Result<u32, CoordinatorError> {
        let n = self.store.enqueue(keys, self.now_ms()).await?;
        if n > 0 {
            self.work.notify_waiters();
        }
        Ok(n)
    }

    pub async fn progress(&self, study: &StudyId) -> Result<Progress, CoordinatorError> {
        let mut progress = self.store.progress(study, self.now_ms(), self.timing.lease).await?;
        progress.lease_latency = self.lease_latency();
        Ok(progress)
    }

    /// A study's pending continuations by the stage of their trajectory.
    pub async fn pending_by_stage(
        &self,
        study: &StudyId,
    ) -> Result<Vec<(vcurve_method::schedule::Stage, u64)>, CoordinatorError> {
        Ok(self.store.pending_by_stage(study).await?)
    }

    /// The live workers, by name (also before any study exists).
    pub async fn live_workers(&self) -> Result<Vec<crate::model::WorkerInfo>, CoordinatorError> {
        Ok(self.store.live_workers(self.now_ms(), self.timing.lease).await?)
    }

    pub async fn list(&self) -> Result<Vec<Progress>, CoordinatorError> {
        let mut out = Vec::new();
        for (id, _, _) in self.store.list_studies().await? {
            out.push(self.progress(&id).await?);
        }
        Ok(out)
    }

    /// The study's export files, rendered on the blocking pool. A study whose restart points were
    /// checked online carries its newest finished check's `restart_check.csv` and
    /// `restart_check.json` (the check's own export has them, with its page).
    pub async fn export(&self, study: &StudyId) -> Result<BTreeMap<String, Vec<u8>>, CoordinatorError> {
        let mut files = self.export_files(study).await?;
        if let Some(data) = self.store.task_state_data(study).await? {
            let renderer = self.renderer.clone();
            let task_state = tokio::task::spawn_blocking(move || renderer.task_state_export(&data))
                .await
                .map_err(|e| CoordinatorError::Internal(format!("rendering panicked: {e}")))?
                .map_err(CoordinatorError::Render)?;
            files.extend(task_state);
        }
        if let Some(check) = self.store.restart_checks_of(study).await?.first() {
            let of_check = self.export_files(check).await?;
            files.extend(of_check.into_iter().filter(|(name, _)| name.starts_with("restart_check.")));
        }
        Ok(files)
    }

    /// One study's export: read from the store in parts ([`Store::study_parts`]) while the
    /// renderer takes them one trajectory at a time on the blocking pool, so the study is never
    /// in memory as a whole.
    async fn export_files(&self, study: &StudyId) -> Result<BTreeMap<String, Vec<u8>>, CoordinatorError> {
        use crate::store::StudyPart;
        let (parts, mut receiver) = tokio::sync::mpsc::channel(16);
        let renderer = self.renderer.clone();
        let render = tokio::task::spawn_blocking(move || {
            let Some(StudyPart::Head(head)) = receiver.blocking_recv() else { return Ok(None) };
            let mut trajectories = std::iter::from_fn(|| match receiver.blocking_recv()? {
                StudyPart::Trajectory(t) => Some(*t),
                StudyPart::Head(_) => None,
            });
            renderer.export_parts(*head, &mut trajectories).map(Some)
        });
        let read = self.store.study_parts(study, parts).await;
        let rendered = render.await.map_err(|e| CoordinatorError::Internal(format!("rendering panicked: {e}")))?;
        read?;
        rendered
            .map_err(CoordinatorError::Render)?
            .ok_or_else(|| CoordinatorError::Internal(format!("study {study:?} was read without its record")))
    }

    pub async fn cancel(&self, study: &StudyId) -> Result<StudyState, CoordinatorError> {
        let state = self.store.cancel(study, self.now_ms()).await?;
        tracing::info!(%study, state = state.as_str(), "study cancelled");
        Ok(state)
    }

    /// Re-issue expired leases now and then, so their keys do not wait for the next lease
    /// request. Runs until the returned task is aborted.
    pub fn spawn_sweeper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let period = Duration::from_millis((this.timing.lease.timeout_ms / 4).clamp(50, 5_000) as u64);
            loop {
                tokio::time::sleep(period).await;
                match this.store.expire_leases(this.now_ms()).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::warn!(expired = n, "leases expired without heartbeats; keys re-issued");
                        this.work.notify_waiters();
                    }
                    Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
                }
            }
        })
    }
}

/// The capabilities a registering worker is stored with: its runner kinds, and `agent:NAME` for
/// every agent its operator registered ([`vcurve_record::runner::agent_capability`]). A study of
/// the `agent` runner needs the capability of its agent (`RunnerSpec::capability`), so it goes only
/// to workers that offer that agent. For every network its operator offers beyond `none`
/// (`bridge`, `proxy`), each container runner's capability also comes with the network
/// (`agent:NAME+net:bridge`, [`vcurve_record::runner::Network::capability`]), so a study on a
/// network goes only to workers that offer it. A name that cannot be an agent's or a network's
/// is refused, naming it.
pub fn capabilities_offered(
    kinds: &[String],
    agents: &[String],
    networks: &[String],
) -> Result<Vec<String>, CoordinatorError> {
    use vcurve_record::runner::{Network, runs_containers};
    let mut capabilities = kinds.to_vec();
    for agent in agents {
        vcurve_record::runner::check_agent_name(agent)
            .map_err(|e| CoordinatorError::InvalidArgument(format!("the worker registers the agent {e}")))?;
        capabilities.push(vcurve_record::runner::agent_capability(agent));
    }
    let mut offered = Vec::new();
    for network in networks {
        let network = Network::parse(network)
            .map_err(|e| CoordinatorError::InvalidArgument(format!("the worker offers the network {e}")))?;
        if network != Network::None && !offered.contains(&network) {
            offered.push(network);
        }
    }
    let on_networks: Vec<String> = capabilities
        .iter()
        .filter(|c| runs_containers(c))
        .flat_map(|c| offered.iter().map(move |n| n.capability(c)))
        .collect();
    capabilities.extend(on_networks);
    for capability in &capabilities {
        if capability.is_empty() || capability.contains(',') {
            return Err(CoordinatorError::InvalidArgument(format!(
                "the worker registers the capability {capability:?}: a capability is a non-empty name without commas"
            )));
        }
    }
    Ok(capabilities)
}

/// The capabilities of the model endpoints a worker offers (`BASE_URL` or `BASE_URL=KEY_ENV`,
/// protocol 4.2): `model:BASE_URL` each, the capability a task-state study's model calls on that
/// endpoint need.
pub fn model_capabilities(endpoints: &[String]) -> Result<Vec<String>, CoordinatorError> {
    endpoints
        .iter()
        .map(|e| {
            let (url, _) = vcurve_record::task_state::parse_offered_endpoint(e)
                .map_err(|e| CoordinatorError::InvalidArgument(format!("the worker offers the {e}")))?;
            Ok(vcurve_record::task_state::endpoint_capability(&url))
        })
        .collect()
}

/// Check an uploaded file against the per-file limit and the digest it was announced under.
fn check_upload(digest: &Digest, content: &[u8]) -> Result<(), CoordinatorError> {
    if content.len() as u64 > crate::spec::MAX_FILE_BYTES {
        return Err(CoordinatorError::InvalidArgument(format!(
            "a file of {} bytes is over the limit of {} MiB per file",
            content.len(),
            crate::spec::MAX_FILE_BYTES >> 20
        )));
    }
    let found = Digest::of(content);
    if found != *digest {
        return Err(CoordinatorError::InvalidArgument(format!(
            "the upload's content has SHA-256 {found}, not the {digest} it announced"
        )));
    }
    Ok(())
}
