//! The `agent` runner: the paper's real work in containers (docs/method.md §5–§6). It runs every kind
//! of job:
//!
//! - **replay**: re-execute the recorded trajectory in a fresh container of the task image under
//!   replay's checks, committing a snapshot at every anchor ([`crate::sandbox::replay`],
//!   [`crate::sandbox::snapshots`]);
//! - **continuation** from `h_t`: a container at `h_t` (from the nearest snapshot, replaying the
//!   steps in between under the same checks and committing `h_t`), the agent process resumed from
//!   the recorded messages up to `o_t` with budget `B − t` and the run's seed ([`crate::runners::agent`]),
//!   and its patch judged through the study's patch cache;
//! - **base run**: the agent from `h_0` in a fresh container with budget `B`, recorded as a
//!   `vcurve.trajectory.v1` trajectory and uploaded, its patch judged the same way;
//! - **evaluation**: a flake re-check of a patch the cache holds ([`crate::runners::evaluate`]);
//! - **session** (a task-state study's): the agent through every turn of a session from `h_0` in
//!   a fresh container, each checkpoint's patch judged, recorded and uploaded
//!   (`agent_runner/session_job.rs`).
//!
//! Judging a patch: an empty patch fails without evaluation (`empty_patch`); a patch the study
//! judged before takes its verdict (`cached`); any other is evaluated in a fresh container of the
//! task image, uploaded, and reported `evaluated` — the coordinator stores its verdict.
//!
//! Every container carries the labels of [`crate::sandbox::container::labels`] (the worker's name,
//! its instance, the job, the study) and is removed when its job ends, whatever the outcome; every
//! agent process carries its instance's mark. What a killed worker left behind — containers and
//! agent processes — is reaped by the next worker that starts with the same state directory,
//! whatever its name, and nothing of a live worker is touched ([`AgentProcessRunner::start_in`],
//! [`crate::sandbox::instance`]).
//! An infrastructure failure (the runtime, the coordinator's services, the agent process killed
//! or breaking the protocol) is a no-outcome: the key is run again.

use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_record::runner::{AGENT, AgentOptions, FingerprintPolicy, MINI_SWE_AGENT};
use vcurve_record::{EndType, Interpreter, RunnerSpec, Task, Trajectory, TrajectoryPayload};

use crate::runners::agent::{AgentCommand, AgentFailure, AgentLimits, AgentStart, run_agent_marked};
use crate::runners::agents::AgentRegistry;
use crate::runners::evaluate::{SwebenchHarness, evaluate_command, is_empty_patch};
use crate::runners::networks::NetworkOffer;
use crate::runners::no_outcome::NoOutcome;
use crate::runners::seam::{AgentRunner, JobKey, JobReport, JobSpec};
use crate::runners::services::JobServices;
use crate::sandbox::container::{Container, ContainerRuntime, ContainerSpec, labels};
use crate::sandbox::instance::Instance;
use crate::sandbox::replay::{ContainerLimits, FingerprintMode, Normalizer, Verdict};
use crate::sandbox::replay_job::replay_trajectory;
use crate::sandbox::snapshots::SnapshotCache;

/// The `agent` runner (see the module docs).
#[derive(Clone)]
pub struct AgentProcessRunner {
    inner: Arc<Inner>,
}

struct Inner {
    /// The runner kind served: `agent` (the agents of `agents`) or `mini-swe-agent` (`agents`
    /// holding the worker's mini-swe-agent adapter alone).
    kind: &'static str,
    /// The agents this runner runs, registered by the worker's operator, and the user their
    /// processes run as ([`AgentProcessRunner::use_agents`]); unset: none.
    agents: OnceLock<AgentRegistry>,
    /// How a run from `h_0` runs its commands, where no recorded run says: the kind's
    /// (mini-swe-agent's SWE-bench configuration), or `bash -c`.
    base_interpreter: Interpreter,
    runtime: Arc<dyn ContainerRuntime>,
    snapshots: SnapshotCache,
    /// This worker process: every container is labelled with its instance id (and the worker's
    /// name), every agent process marked, and what a dead predecessor left reaped at the start.
    instance: Instance,
    /// The shipped normalization rules, for studies that give none of their own.
    normalizer: Normalizer,
    services: OnceLock<Arc<dyn JobServices>>,
    /// The SWE-bench harness tasks judged by `swebench` are evaluated with
    /// ([`AgentProcessRunner::use_swebench`]); unset: [`SwebenchHarness::from_env`].
    swebench: OnceLock<SwebenchHarness>,
    /// The networks the worker's operator offers agent containers
    /// ([`AgentProcessRunner::use_networks`]); unset: `none` alone.
    networks: OnceLock<NetworkOffer>,
}

impl AgentProcessRunner {
    /// The runner kind, as named in study specs.
    pub const KIND: &'static str = AGENT;

    /// A runner on `runtime` for the worker `worker_name`, as a new instance in the default state
    /// directory ([`crate::sandbox::instance::default_state_dir`]; see
    /// [`AgentProcessRunner::start_in`]).
    pub async fn start(
        runtime: Arc<dyn ContainerRuntime>,
        worker_name: &str,
        snapshot_budget_bytes: u64,
    ) -> Result<AgentProcessRunner, crate::sandbox::container::RuntimeError> {
        AgentProcessRunner::start_with_registry(runtime, worker_name, snapshot_budget_bytes, None).await
    }

    /// [`AgentProcessRunner::start`] with the snapshot cache pushing to and pulling from
    /// `snapshot_registry` (`HOST:PORT`; see [`crate::sandbox::snapshots`]).
    pub async fn start_with_registry(
        runtime: Arc<dyn ContainerRuntime>,
        worker_name: &str,
        snapshot_budget_bytes: u64,
        snapshot_registry: Option<String>,
    ) -> Result<AgentProcessRunner, crate::sandbox::container::RuntimeError> {
        let instance = Instance::open_default(worker_name)
            .map_err(|e| crate::sandbox::container::RuntimeError::Engine(e.to_string()))?;
        AgentProcessRunner::start_in(runtime, instance, snapshot_budget_bytes, snapshot_registry).await
    }

    /// A runner on `runtime` for the worker process `instance`: removes what dead predecessors
    /// in the instance's state directory left (their containers, whatever their worker's name,
    /// and their agent processes: a SIGKILL leaves both; [`crate::sandbox::instance`]) and opens
    /// the snapshot cache with its disk budget (rebuilt from the snapshot images that survived),
    /// pushing to and pulling from `snapshot_registry` when given.
    pub async fn start_in(
        runtime: Arc<dyn ContainerRuntime>,
        instance: Instance,
        snapshot_budget_bytes: u64,
        snapshot_registry: Option<String>,
    ) -> Result<AgentProcessRunner, crate::sandbox::container::RuntimeError> {
        let reaped = instance.reap_predecessors(runtime.as_ref()).await?;
        if !reaped.instances.is_empty() {
            tracing::info!(
                instances = ?reaped.instances,
                containers = reaped.containers,
                processes = reaped.processes,
                worker = instance.worker_name(),
                "removed what dead worker processes left behind"
            );
        }
        let snapshots = SnapshotCache::open_in_lineage(
            runtime.clone(),
            snapshot_budget_bytes,
            snapshot_registry,
            Some(instance.lineage().to_owned()),
        )
        .await?;
        Ok(AgentProcessRunner {
            inner: Arc::new(Inner {
                kind: AGENT,
                agents: OnceLock::new(),
                base_interpreter: Interpreter::default(),
                runtime,
                snapshots,
                instance,
                normalizer: Normalizer::default(),
                services: OnceLock::new(),
                swebench: OnceLock::new(),
                networks: OnceLock::new(),
            }),
        })
    }

    /// The `mini-swe-agent` runner beside this one: the same runtime, snapshot cache and worker,
    /// every run's agent process the one `adapter` registers as `mini-swe-agent` (the worker's
    /// mini-swe-agent environment running `vcurve_agents.mini_swe_agent`, see
    /// [`crate::MiniSweAgent::registry`]), and base runs running their commands with
    /// `interpreter` (what [`crate::MiniSweAgent::check`] found in mini-swe-agent's SWE-bench
    /// configuration).
    pub fn mini_swe_agent(&self, adapter: AgentRegistry, interpreter: Interpreter) -> AgentProcessRunner {
        let inner = &self.inner;
        AgentProcessRunner {
            inner: Arc::new(Inner {
                kind: MINI_SWE_AGENT,
                agents: OnceLock::from(adapter),
                base_interpreter: interpreter,
                runtime: inner.runtime.clone(),
                snapshots: inner.snapshots.clone(),
                instance: inner.instance.clone(),
                normalizer: inner.normalizer.clone(),
                services: OnceLock::new(),
                swebench: inner.swebench.clone(),
                networks: inner.networks.clone(),
            }),
        }
    }

    /// Evaluate SWE-bench tasks with `harness` (the worker's checked one); false when a harness
    /// was set before. Call it before [`AgentProcessRunner::mini_swe_agent`], which takes this
    /// runner's.
    pub fn use_swebench(&self, harness: SwebenchHarness) -> bool {
        self.inner.swebench.set(harness).is_ok()
    }

    /// Run the agents of `agents` (the worker operator's registrations, and the user their
    /// processes run as); false when agents were set before. A study naming an agent not in it is
    /// a no-outcome naming the agent, and the worker does not offer it to the coordinator.
    pub fn use_agents(&self, agents: AgentRegistry) -> bool {
        self.inner.agents.set(agents).is_ok()
    }

    /// Offer agent containers the networks of `offer` beyond `none`; false when networks were
    /// set before. Call it before [`AgentProcessRunner::mini_swe_agent`], which takes this
    /// runner's.
    pub fn use_networks(&self, offer: NetworkOffer) -> bool {
        self.inner.networks.set(offer).is_ok()
    }

    /// The names of the agents this runner runs.
    pub fn agent_names(&self) -> Vec<String> {
        self.inner.agents.get().map(AgentRegistry::names).unwrap_or_default()
    }

    /// Run a whole session of the study's agent (`options`) on `task` in a fresh container of its
    /// image, from `h_0`: instruction `k` of `instructions` opens turn `k`, each turn with a
    /// budget of `budget_per_turn` steps, the run's seed `seed`; every checkpoint's patch is
    /// judged by the task's evaluator ([`crate::runners::task_session`]). `job` labels the
    /// containers (with `study`), as a job's key does. The agent process and its commands run as
    /// a base run's do (the registered agent, its user, this kind's interpreter, the mark).
    #[allow(clippy::too_many_arguments)]
    pub async fn run_session(
        &self,
        task: &Task,
        options: &AgentOptions,
        instructions: &[String],
        budget_per_turn: u32,
        seed: u64,
        (study, job): (&str, &str),
        cancel: CancellationToken,
    ) -> Result<crate::runners::task_session::SessionRecord, NoOutcome> {
        let limits = self.inner.labelled_limits(study, job, options)?;
        self.inner.session(task, options, instructions, budget_per_turn, seed, &limits, &cancel).await
    }

    /// The snapshots this worker holds, `(payload digest, t)`.
    pub fn held_snapshots(&self) -> Vec<(String, u32)> {
        self.inner.snapshots.held()
    }

    /// Remove every snapshot image of this worker's lineage that no job uses; how many.
    pub async fn remove_snapshots(&self) -> usize {
        self.inner.snapshots.remove_all().await
    }

    /// The snapshot cache's size on disk, in bytes.
    pub fn snapshot_bytes(&self) -> u64 {
        self.inner.snapshots.total_bytes()
    }

    /// Where continuations found their state, and the registry's pushes and pulls, so far.
    pub fn snapshot_stats(&self) -> crate::sandbox::snapshots::SnapshotStats {
        self.inner.snapshots.stats()
    }
}

impl AgentRunner for AgentProcessRunner {
    fn kind(&self) -> &'static str {
        self.inner.kind
    }

    fn agents(&self) -> Vec<String> {
        // The mini-swe-agent runner's one agent is its kind.
        if self.inner.kind == AGENT { self.agent_names() } else { Vec::new() }
    }

    fn networks(&self) -> Vec<String> {
        self.inner.networks.get().map(NetworkOffer::names).unwrap_or_default()
    }

    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, JobReport> {
        let inner = self.inner.clone();
        Box::pin(async move { NoOutcome::or_report(inner.run(&job, &cancel).await, &job.key, job.attempt) })
    }

    fn snapshot_trajectories(&self) -> Vec<String> {
        let mut digests: Vec<String> = self.inner.snapshots.held().into_iter().map(|(d, _)| d).collect();
        digests.sort();
        digests.dedup();
        digests
    }

    fn snapshot_registry(&self) -> Option<String> {
        self.inner.snapshots.registry().map(str::to_owned)
    }

    fn take_pushed(&self) -> Vec<crate::sandbox::snapshots::RegistrySnapshot> {
        self.inner.snapshots.take_pushed()
    }

    fn untake_pushed(&self, pushed: Vec<crate::sandbox::snapshots::RegistrySnapshot>) {
        self.inner.snapshots.untake_pushed(pushed);
    }

    fn attach(&self, services: Arc<dyn JobServices>) {
        let _ = self.inner.services.set(services);
    }
}

/// The no-outcome of a job missing what its kind needs.
fn bad_job(what: &str) -> NoOutcome {
    NoOutcome::BadJob(what.to_owned())
}

/// A run's seed: the same key always gets the same one, another key (another seed index) another.
pub fn run_seed(study_seed: u64, key: &JobKey) -> u64 {
    let text = match key {
        JobKey::Continuation(k) => format!("{study_seed}/{}/{}/{}/{}", k.trajectory, k.series.as_str(), k.t, k.seed),
        JobKey::BaseRun { task, seed, .. } => format!("{study_seed}/{task}/base_run/{seed}"),
        JobKey::Replay { trajectory, .. } => format!("{study_seed}/{trajectory}/replay"),
        JobKey::Evaluation { task, patch_sha256, round, .. } => format!("{study_seed}/{task}/{patch_sha256}/{round}"),
        JobKey::Session { task, .. } => format!("{study_seed}/{task}/session"),
        JobKey::ModelCall { call, .. } => format!("{study_seed}/call/{call}"),
    };
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The messages a continuation from `h_t` is handed: the recorded ones up to `o_t`.
fn prefix(recorded: &Trajectory, t: u32) -> Vec<serde_json::Value> {
    let end = match t {
        0 => recorded.initial_messages,
        t => recorded.steps[t as usize - 1].messages_end,
    };
    recorded.messages[..end.min(recorded.messages.len())].to_vec()
}

impl Inner {
    fn swebench(&self) -> SwebenchHarness {
        self.swebench.get().cloned().unwrap_or_else(SwebenchHarness::from_env)
    }

    fn services(&self) -> Result<&Arc<dyn JobServices>, NoOutcome> {
        self.services.get().ok_or_else(|| {
            NoOutcome::Services("the agent runner has no connection to the coordinator's services".to_owned())
        })
    }

    /// How the job's containers are made: the study's limits, the job's labels, and the
    /// container network of the study's `network` as this worker offers it (an error, a bad job,
    /// when it does not).
    fn limits(&self, job: &JobSpec, options: &AgentOptions) -> Result<ContainerLimits, NoOutcome> {
        self.labelled_limits(job.key.study(), &job.key.to_string(), options)
    }

    /// [`Inner::limits`] for containers labelled with `study` and `job` (a job key, or a session's
    /// label).
    fn labelled_limits(&self, study: &str, job: &str, options: &AgentOptions) -> Result<ContainerLimits, NoOutcome> {
        let (network, exec_env) = self
            .networks
            .get()
            .cloned()
            .unwrap_or_default()
            .container_network(options.network)
            .map_err(NoOutcome::BadJob)?;
        Ok(ContainerLimits {
            network,
            exec_env,
            memory_bytes: options.memory_mb << 20,
            pids_limit: i64::from(options.pids_limit),
            labels: {
                let mut labels = self.instance.container_labels();
                labels.insert(labels::JOB.to_owned(), job.to_owned());
                labels.insert(labels::STUDY.to_owned(), study.to_owned());
                labels
            },
        })
    }

    /// The agent process of a run: the registration of the study's agent, with the environment
    /// built from the allow-list ([`AgentRegistry::command`]); an error when this worker does not
    /// offer the agent.
    fn command(&self, options: &AgentOptions) -> Result<AgentCommand, String> {
        match self.agents.get() {
            Some(agents) => agents.command(options),
            None => Err(format!("this worker offers no agent {:?} (it offers none)", options.agent)),
        }
    }

    /// The `model` object a continuation of `recorded` starts with: for mini-swe-agent, the
    /// recorded policy's settings where the study's `model` names none
    /// ([`vcurve_record::RecordedPolicy::resume_model`]); for another agent the study's as written.
    fn resumed_model(&self, options: &AgentOptions, recorded: &vcurve_record::Trajectory) -> serde_json::Value {
        match (&recorded.policy, self.kind) {
            (Some(policy), MINI_SWE_AGENT) => policy.resume_model(&options.model),
            _ => options.model.clone(),
        }
    }

    async fn run(&self, job: &JobSpec, cancel: &CancellationToken) -> Result<JobReport, NoOutcome> {
        let options = match (&job.runner, self.kind) {
            (RunnerSpec::Agent(options), AGENT) | (RunnerSpec::MiniSweAgent(options), MINI_SWE_AGENT) => options,
            (other, kind) => {
                return Err(NoOutcome::BadJob(format!(
                    "the {kind} runner was handed a job of the {} runner",
                    other.kind()
                )));
            }
        };
        // A study of an agent this worker does not offer: nothing to prepare.
        self.command(options).map_err(NoOutcome::BadJob)?;
        let limits = self.limits(job, options)?;
        let own = match &options.normalization {
            Some(_) => Some(options.normalizer().map_err(NoOutcome::BadJob)?),
            None => None,
        };
        let normalizer = own.as_ref().unwrap_or(&self.normalizer);
        let payload = job.trajectory.as_deref().ok_or_else(|| bad_job("the job names no trajectory payload"))?;
        let digest = job.trajectory_digest.as_deref().ok_or_else(|| bad_job("the job names no trajectory digest"))?;
        match &job.key {
            JobKey::Replay { .. } => self.replay(job, options, normalizer, payload, digest, &limits).await,
            JobKey::Continuation(k) => {
                let recorded =
                    payload.recorded.as_ref().ok_or_else(|| bad_job("a continuation needs a recorded trajectory"))?;
                let prepared = match self
                    .snapshots
                    .prepare_from(recorded, digest, k.t, normalizer, &limits, job.registry_snapshot.as_ref())
                    .await
                    .map_err(|error| NoOutcome::Replay { during: format!("preparing h_{}", k.t), error })?
                {
                    Verdict::Reproduced(prepared) => prepared,
                    Verdict::NonReplayable(why) => return Ok(JobReport::NonReplayable(why)),
                };
                let start = AgentStart {
                    command: self.command(options).map_err(NoOutcome::BadJob)?,
                    task: recorded.task.clone(),
                    interpreter: recorded.interpreter.clone(),
                    messages: prefix(recorded, k.t),
                    t: k.t,
                    budget: job.budget,
                    seed: run_seed(job.study_seed, &job.key),
                    model: self.resumed_model(options, recorded),
                };
                let run = match self.run_agent_in(prepared.container, start, options, false, cancel).await? {
                    Ok(run) => run,
                    Err(capped) => return Ok(capped),
                };
                drop(prepared.pin);
                let transcript = if options.keep_transcripts {
                    let mut messages = run.messages;
                    let cuts = vcurve_record::oversize::fit_messages(&mut messages, vcurve_record::MAX_FILE_BYTES)
                        .map_err(|e| NoOutcome::Record(format!("the transcript {e}")))?;
                    if cuts.texts > 0 {
                        tracing::warn!(key = %job.key, texts = cuts.texts, omitted_bytes = cuts.bytes,
                            "the transcript was over the store's per-file limit: its longest texts were cut");
                    }
                    let bytes = serde_json::to_vec(&messages).map_err(|e| NoOutcome::Record(e.to_string()))?;
                    Some(self.services()?.put_file(&bytes).await.map_err(NoOutcome::Services)?)
                } else {
                    None
                };
                self.outcome(
                    job,
                    &recorded.task,
                    &run.submission,
                    run.steps_used,
                    run.end_type,
                    transcript,
                    &limits,
                    cancel,
                )
                .await
            }
            JobKey::BaseRun { .. } => {
                let task = payload.task_def().ok_or_else(|| bad_job("a base run's payload carries no task"))?.clone();
                let container = Container::start(self.runtime.clone(), &limits.spec(&task.image))
                    .await
                    .map_err(NoOutcome::engine("starting the task container"))?;
                let interpreter = self.base_interpreter.clone();
                let start = AgentStart {
                    command: self.command(options).map_err(NoOutcome::BadJob)?,
                    task: task.clone(),
                    interpreter: interpreter.clone(),
                    messages: Vec::new(),
                    t: 0,
                    budget: job.budget,
                    seed: run_seed(job.study_seed, &job.key),
                    model: options.model.clone(),
                };
                // A base run records its states for the replays of its trajectory to compare.
                let measure = options.fingerprints == FingerprintPolicy::Record;
                let mut run = match self.run_agent_in(container, start, options, measure, cancel).await? {
                    Ok(run) => run,
                    Err(capped) => return Ok(capped),
                };
                let (submission, steps, end_type) = (run.submission.clone(), run.steps_used, run.end_type);
                // A run too large for the store is cut to fit, each cut recorded in its action
                // (issue 24: it failed at every upload and the base run was retired).
                let fingerprints = std::mem::take(&mut run.fingerprints);
                let recorded = match run.into_trajectory(task.clone(), interpreter, fingerprints).and_then(|mut t| {
                    let cuts = t.fit_within(vcurve_record::MAX_FILE_BYTES)?;
                    Ok((t, cuts))
                }) {
                    Ok((trajectory, cuts)) => {
                        if cuts.texts > 0 {
                            tracing::warn!(key = %job.key, texts = cuts.texts, omitted_bytes = cuts.bytes,
                                "the base run's trajectory was over the store's per-file limit: its longest outputs were cut");
                        }
                        Some(
                            self.services()?
                                .put_file(&trajectory.canonical_bytes())
                                .await
                                .map_err(NoOutcome::Services)?,
                        )
                    }
                    Err(e) => {
                        tracing::warn!(key = %job.key, error = %e, "the base run cannot be recorded as a trajectory");
                        None
                    }
                };
                self.outcome(job, &task, &submission, steps, end_type, recorded, &limits, cancel).await
            }
            JobKey::Evaluation { patch_sha256, .. } => {
                let task = payload.task_def().ok_or_else(|| bad_job("the evaluation's payload carries no task"))?;
                let bytes = self.services()?.fetch_file(patch_sha256).await.map_err(NoOutcome::Services)?;
                let patch = String::from_utf8(bytes)
                    .map_err(|_| NoOutcome::BadJob(format!("patch {patch_sha256} is not UTF-8 text")))?;
                let spec = limits.spec(&task.image);
                let verdict =
                    evaluate_command(self.runtime.clone(), task, &patch, &spec, &self.swebench(), cancel.clone())
                        .await?;
                Ok(JobReport::Evaluated { resolved: verdict.resolved })
            }
            JobKey::Session { .. } => self.session_job(job, options, payload, &limits, cancel).await,
            JobKey::ModelCall { .. } => {
                Err(bad_job("a model call is run by the worker's model-call runner, not by the agent runner"))
            }
        }
    }

    async fn replay(
        &self,
        job: &JobSpec,
        options: &AgentOptions,
        normalizer: &Normalizer,
        payload: &TrajectoryPayload,
        digest: &str,
        limits: &ContainerLimits,
    ) -> Result<JobReport, NoOutcome> {
        let recorded = payload.recorded.as_ref().ok_or_else(|| bad_job("a replay needs a recorded trajectory"))?;
        let verdict = replay_trajectory(
            &self.snapshots,
            recorded,
            digest,
            &job.anchors,
            normalizer,
            match options.fingerprints {
                FingerprintPolicy::Record => FingerprintMode::RecordMissing,
                FingerprintPolicy::Compare => FingerprintMode::CompareOnly,
            },
            limits,
        )
        .await
        .map_err(|error| NoOutcome::Replay { during: "replay".to_owned(), error })?;
        Ok(match verdict {
            Verdict::Reproduced(mut done) => {
                if !done.fingerprints.is_empty() {
                    let bytes = serde_json::to_vec(&done.fingerprints).map_err(|e| NoOutcome::Record(e.to_string()))?;
                    done.replayed.fingerprints =
                        Some(self.services()?.put_file(&bytes).await.map_err(NoOutcome::Services)?);
                }
                JobReport::Replayed(done.replayed)
            }
            Verdict::NonReplayable(why) => JobReport::NonReplayable(why),
        })
    }

    /// Run the agent in `container`, measuring its states after each step when `fingerprints`
    /// ([`AgentLimits::record_fingerprints`]), and remove the container afterwards whatever
    /// happened.
    async fn run_agent_in(
        &self,
        container: Container,
        start: AgentStart,
        options: &AgentOptions,
        fingerprints: bool,
        cancel: &CancellationToken,
    ) -> Result<Result<crate::runners::agent::AgentRun, JobReport>, NoOutcome> {
        let mark = Some(self.instance.agent_mark());
        let limits = AgentLimits { record_fingerprints: fingerprints, ..AgentLimits::from_options(options) };
        let run = run_agent_marked(&container, start, limits, mark, cancel.clone()).await;
        if let Err(e) = container.remove().await {
            tracing::warn!(error = %e, "cannot remove a finished run's container");
        }
        match run {
            Ok(run) => Ok(Ok(run)),
            // The study's cap stopped it: no outcome, not run again, counted.
            Err(AgentFailure::Timeout { reason }) => Ok(Err(JobReport::capped(reason))),
            Err(e) => Err(NoOutcome::from(e)),
        }
    }

    /// Judge a run's submission through the patch cache and make its outcome.
    #[allow(clippy::too_many_arguments)]
    async fn outcome(
        &self,
        job: &JobSpec,
        task: &Task,
        submission: &str,
        steps: u32,
        end_type: EndType,
        recorded: Option<String>,
        limits: &ContainerLimits,
        cancel: &CancellationToken,
    ) -> Result<JobReport, NoOutcome> {
        let patch_sha256 = vcurve_record::trajectory::sha256_hex(submission.as_bytes());
        let (success, judged) = if is_empty_patch(submission) {
            (false, Judged::EmptyPatch)
        } else {
            let services = self.services()?;
            match services
                .lookup_verdict(job.key.study(), &task.id, &patch_sha256)
                .await
                .map_err(NoOutcome::Services)?
            {
                Some(resolved) => (resolved, Judged::Cached),
                None => {
                    let spec: ContainerSpec = limits.spec(&task.image);
                    let harness = self.swebench();
                    let verdict =
                        evaluate_command(self.runtime.clone(), task, submission, &spec, &harness, cancel.clone())
                            .await?;
                    // The patch is kept by the coordinator, for its flake re-check.
                    services.put_file(submission.as_bytes()).await.map_err(NoOutcome::Services)?;
                    (verdict.resolved, Judged::Evaluated)
                }
            }
        };
        Ok(JobReport::Outcome(RunOutcome { success, steps, end_type, patch_sha256, judged, recorded }))
    }
}

mod session_job;
#[cfg(test)]
mod tests;
