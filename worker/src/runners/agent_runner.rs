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
//! - **evaluation**: a flake re-check of a patch the cache holds ([`crate::runners::evaluate`]).
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
        use crate::runners::task_session::{SessionPlan, run_session};
        let inner = &self.inner;
        let start = AgentStart {
            command: inner.command(options).map_err(NoOutcome::BadJob)?,
            task: task.clone(),
            interpreter: inner.base_interpreter.clone(),
            messages: Vec::new(),
            t: 0,
            budget: budget_per_turn,
            seed,
            model: options.model.clone(),
        };
        let limits = inner.labelled_limits(study, job, options)?;
        let plan = SessionPlan {
            instructions: instructions.to_vec(),
            limits: AgentLimits::from_options(options),
            evaluate: Some(inner.swebench()),
        };
        let mark = Some(inner.instance.agent_mark());
        run_session(inner.runtime.clone(), &limits.spec(&task.image), start, &plan, mark, cancel).await
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
        Box::pin(async move {
            match inner.run(&job, &cancel).await {
                Ok(report) => report,
                Err(no) => {
                    tracing::warn!(key = %job.key, attempt = job.attempt, reason = %no, "no outcome");
                    no.report()
                }
            }
        })
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
                let run = match self.run_agent_in(prepared.container, start, options, cancel).await? {
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
                let run = match self.run_agent_in(container, start, options, cancel).await? {
                    Ok(run) => run,
                    Err(capped) => return Ok(capped),
                };
                let (submission, steps, end_type) = (run.submission.clone(), run.steps_used, run.end_type);
                // A run too large for the store is cut to fit, each cut recorded in its action
                // (issue 24: it failed at every upload and the base run was retired).
                let recorded = match run.into_trajectory(task.clone(), interpreter, Vec::new()).and_then(|mut t| {
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

    /// Run the agent in `container`, and remove the container afterwards whatever happened.
    async fn run_agent_in(
        &self,
        container: Container,
        start: AgentStart,
        options: &AgentOptions,
        cancel: &CancellationToken,
    ) -> Result<Result<crate::runners::agent::AgentRun, JobReport>, NoOutcome> {
        let mark = Some(self.instance.agent_mark());
        let run = run_agent_marked(&container, start, AgentLimits::from_options(options), mark, cancel.clone()).await;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use vcurve_method::schedule::Series;
    use vcurve_record::Evaluator;

    use super::*;
    use crate::runners::seam::ContinuationKey;
    use crate::sandbox::container::double::{Call, FakeFs, FakeRuntime, Op};
    use crate::sandbox::container::{ExecOutput, ExecRequest};

    const IMAGE: &str = "task:test";
    const PATCH: &str = "diff --git a/calc/parse.py b/calc/parse.py\n";

    /// Every command succeeds; the scripted agent's submission prints the marker and `PATCH` (or
    /// nothing after the marker when `empty`).
    fn handler(empty: bool) -> impl Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync + 'static {
        move |_fs, request| {
            let command = request.argv.last().cloned().unwrap_or_default();
            let separator = command
                .lines()
                .find_map(|l| l.strip_prefix("echo "))
                .filter(|l| l.starts_with(crate::sandbox::replay::GIT_STATE_SEPARATOR));
            let output = if command.contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT") {
                format!("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n{}", if empty { "" } else { PATCH })
            } else if let Some(separator) = separator {
                // The fingerprint's git state: an empty diff and status around the separator.
                format!("{separator}\n")
            } else {
                "ok\n".to_string()
            };
            ExecOutput { output: output.into_bytes(), exit_code: Some(0), timed_out: false }
        }
    }

    /// The coordinator's services in memory.
    #[derive(Default)]
    struct Services {
        files: Mutex<BTreeMap<String, Vec<u8>>>,
        verdicts: Mutex<BTreeMap<String, bool>>,
        lookups: Mutex<u32>,
    }

    impl JobServices for Services {
        fn lookup_verdict<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            sha: &'a str,
        ) -> BoxFuture<'a, Result<Option<bool>, String>> {
            *self.lookups.lock().unwrap() += 1;
            let verdict = self.verdicts.lock().unwrap().get(sha).copied();
            Box::pin(async move { Ok(verdict) })
        }

        fn put_file<'a>(&'a self, content: &'a [u8]) -> BoxFuture<'a, Result<String, String>> {
            let digest = vcurve_record::trajectory::sha256_hex(content);
            self.files.lock().unwrap().insert(digest.clone(), content.to_vec());
            Box::pin(async move { Ok(digest) })
        }

        fn fetch_file<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Vec<u8>, String>> {
            let file = self.files.lock().unwrap().get(digest).cloned();
            Box::pin(async move { file.ok_or_else(|| format!("no file {digest}")) })
        }
    }

    fn task() -> Task {
        Task {
            id: "calc-1".into(),
            image: IMAGE.into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
            problem_statement: Some("subtraction is wrong".into()),
        }
    }

    fn options() -> serde_json::Value {
        serde_json::json!({"agent": "scripted", "model": {"q": 1.0, "r": 1.0}})
    }

    /// `runner` offering the shipped scripted agent, as `vcurve worker --agent scripted` does.
    fn offer_scripted(runner: &AgentProcessRunner) {
        let agents = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        let mut registry = AgentRegistry::new();
        registry.register_flag("scripted", &agents).unwrap();
        assert!(runner.use_agents(registry));
    }

    async fn runner(empty: bool) -> (AgentProcessRunner, Arc<FakeRuntime>, Arc<Services>) {
        let runtime = Arc::new(FakeRuntime::with_handler(handler(empty)));
        runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
        let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
        offer_scripted(&runner);
        let services = Arc::new(Services::default());
        runner.attach(services.clone());
        (runner, runtime, services)
    }

    fn job(key: JobKey, payload: TrajectoryPayload, budget: u32) -> JobSpec {
        JobSpec {
            key,
            attempt: 1,
            budget,
            runner: RunnerSpec::parse(AGENT, options()).expect("valid agent options"),
            study_seed: 7,
            trajectory_digest: Some(payload.digest()),
            trajectory: Some(Arc::new(payload)),
            anchors: vec![0, 5, 10, 12],
            registry_snapshot: None,
        }
    }

    fn base_run() -> JobSpec {
        let key = JobKey::BaseRun { study: "s".into(), task: "calc-1".into(), seed: 0 };
        job(key, TrajectoryPayload::of_task(&task()), 20)
    }

    /// A base run through the runner: its outcome and the recorded trajectory it uploaded.
    /// The payload of a trajectory of calc-1 that is `recorded`.
    fn payload_of(recorded: &Trajectory) -> TrajectoryPayload {
        TrajectoryPayload {
            task: "calc-1".into(),
            length: recorded.length(),
            curve: None,
            recorded: Some(recorded.clone()),
            task_def: None,
            problem_statement_sha256: None,
        }
    }

    async fn recorded_base_run() -> (RunOutcome, Trajectory) {
        let (runner, _, services) = runner(false).await;
        let JobReport::Outcome(outcome) = runner.run(base_run(), CancellationToken::new()).await else {
            panic!("a base run has an outcome")
        };
        let digest = outcome.recorded.clone().expect("a recorded run");
        let bytes = services.files.lock().unwrap()[&digest].clone();
        (outcome, Trajectory::from_json(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_run_past_the_studys_wall_clock_cap_is_reported_capped() {
        // An agent that never answers, under a cap of 1 s: capped (not run again, counted), not
        // a no-outcome that would be retried and retired.
        let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
        runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
        let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
        let mut registry = AgentRegistry::new();
        registry.register_flag("sleeper=sleep 30", std::path::Path::new(".")).unwrap();
        assert!(runner.use_agents(registry));
        runner.attach(Arc::new(Services::default()));
        let mut spec = base_run();
        let options = serde_json::json!({"agent": "sleeper", "run_timeout_s": 1});
        spec.runner = RunnerSpec::parse(AGENT, options).unwrap();
        let report = runner.run(spec, CancellationToken::new()).await;
        let JobReport::Capped { reason } = &report else { panic!("{report:?}") };
        assert!(reason.starts_with(vcurve_record::jobs::CAPPED), "{reason}");
        assert!(reason.contains("longer than its 1 s"), "{reason}");
        assert_eq!(runtime.running().len(), 0, "its container is removed");
    }

    /// A study's `network` is the network of its agent's containers when the worker's operator
    /// offers it, never of the evaluator's; on a worker that does not offer it the job is a
    /// no-outcome naming the network (the coordinator hands it only to workers that do).
    #[tokio::test]
    async fn agent_containers_get_the_studys_network_when_the_worker_offers_it() {
        use crate::runners::networks::NetworkOffer;
        use crate::sandbox::container::ContainerNetwork;
        let bridge_job = || {
            let mut spec = base_run();
            let options = serde_json::json!({"agent": "scripted", "model": {"q": 1.0, "r": 1.0}, "network": "bridge"});
            spec.runner = RunnerSpec::parse(AGENT, options).unwrap();
            spec
        };
        let (closed, runtime, _) = runner(false).await;
        let report = closed.run(bridge_job(), CancellationToken::new()).await;
        let JobReport::NoOutcome { reason, .. } = &report else { panic!("{report:?}") };
        assert!(reason.contains("does not offer the network bridge"), "{reason}");
        assert_eq!(runtime.count(Op::Create), 0, "nothing started");

        let (open, runtime, _) = runner(false).await;
        let offer = NetworkOffer::from_flags(&["bridge".into()], &[]).unwrap();
        assert!(open.use_networks(offer));
        assert_eq!(open.networks(), ["bridge"], "registered with the coordinator");
        let report = open.run(bridge_job(), CancellationToken::new()).await;
        assert!(matches!(report, JobReport::Outcome(_)), "{report:?}");
        let networks: Vec<(String, ContainerNetwork)> = runtime
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Create { labels, network, .. } => {
                    Some((labels.get(labels::JOB).cloned().unwrap_or_default(), network))
                }
                _ => None,
            })
            .collect();
        assert!(networks.len() >= 2, "{networks:?}");
        assert_eq!(networks[0].1, ContainerNetwork::Bridge, "the agent's container: {networks:?}");
        assert_eq!(networks.last().unwrap().1, ContainerNetwork::None, "the evaluator's: {networks:?}");
    }

    #[tokio::test]
    async fn a_session_runs_the_studys_agent_in_a_labelled_container_and_judges_each_distinct_patch_once() {
        let (runner, runtime, _services) = runner(false).await;
        let RunnerSpec::Agent(options) = RunnerSpec::parse(AGENT, options()).unwrap() else { unreachable!() };
        let instructions: Vec<String> = crate::runners::task_session::PAPER_INSTRUCTIONS.map(str::to_owned).to_vec();
        let record = runner
            .run_session(
                &task(),
                &options,
                &instructions,
                10,
                7,
                ("s1", "s1/calc-1/session/0"),
                CancellationToken::new(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.session.checkpoints(), 4);
        assert_eq!(record.session.turns[3].instruction, "Assess remaining risk");
        // Every command prints "ok": the same patch at every checkpoint, evaluated once, resolved.
        assert!(record.checkpoints.iter().all(|c| c.patch == "ok\n" && c.resolved == Some(true)));
        let jobs: Vec<String> = runtime
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Create { labels, .. } => Some(format!("{}|{}", labels[labels::STUDY], labels[labels::JOB])),
                _ => None,
            })
            .collect();
        assert_eq!(jobs, ["s1|s1/calc-1/session/0"; 2], "the session's container and one evaluation's");
        assert_eq!(runtime.running().len(), 0, "both removed");
        // An agent this worker does not offer is a bad job, before any container.
        let mut other = options.clone();
        other.agent = "nobody".into();
        let err = runner
            .run_session(&task(), &other, &instructions, 10, 7, ("s1", "j"), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, NoOutcome::BadJob(ref why) if why.contains("nobody")), "{err}");
    }

    #[tokio::test]
    async fn a_base_run_is_recorded_uploaded_and_its_patch_evaluated() {
        let (runner, runtime, services) = runner(false).await;
        let report = runner.run(base_run(), CancellationToken::new()).await;
        let JobReport::Outcome(o) = report else { panic!("{report:?}") };
        assert_eq!((o.success, o.steps, o.end_type, o.judged), (true, 13, EndType::Submitted, Judged::Evaluated));
        assert_eq!(o.patch_sha256, vcurve_record::trajectory::sha256_hex(PATCH.as_bytes()));
        let files = services.files.lock().unwrap();
        assert!(files.contains_key(&o.patch_sha256), "the evaluated patch is uploaded for re-checks");
        let recorded = Trajectory::from_json(&files[o.recorded.as_ref().unwrap()]).unwrap();
        assert_eq!((recorded.length(), recorded.task.id.as_str()), (13, "calc-1"));
        assert_eq!(*services.lookups.lock().unwrap(), 1);
        // The run's container and the evaluation's: both created and removed.
        assert_eq!((runtime.count(Op::Create), runtime.running().len()), (2, 0));
    }

    #[tokio::test]
    async fn a_base_run_whose_command_printed_more_than_the_store_keeps_is_recorded_cut_and_uploaded() {
        // Issue 24: 64 MiB of output made the trajectory unstorable; every attempt failed at its
        // upload and the base run was retired. The first command here prints 40 MiB, which the
        // trajectory holds twice (the action's output and the agent's next message).
        let printed_bytes = (40u64 << 20) + 22;
        let (recorded, size) = base_run_printing(1, printed_bytes as usize).await;
        assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
        let action = &recorded.steps[0].actions[0];
        let omitted = action.omitted.expect("the cut is recorded in the action");
        assert_eq!(omitted.head + omitted.bytes + omitted.tail, printed_bytes);
        assert!(action.output.starts_with("FIRST LINE\n") && action.output.ends_with("\nLAST LINE\n"));
        assert!(action.output.contains(&format!("[vcurve: {} bytes of output omitted]", omitted.bytes)));
    }

    /// A base run through a runtime whose first `n` commands print `bytes` bytes each (a first
    /// and a last line around `x`s); the trajectory it uploaded, and its encoded size.
    async fn base_run_printing(n: usize, bytes: usize) -> (Trajectory, usize) {
        let printed = std::sync::atomic::AtomicUsize::new(0);
        let big = format!("FIRST LINE\n{}\nLAST LINE\n", "x".repeat(bytes - 22));
        let plain = handler(false);
        let runtime = Arc::new(FakeRuntime::with_handler(move |fs, request| {
            if printed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                return ExecOutput { output: big.clone().into_bytes(), exit_code: Some(0), timed_out: false };
            }
            plain(fs, request)
        }));
        runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
        let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
        offer_scripted(&runner);
        let services = Arc::new(Services::default());
        runner.attach(services.clone());
        let report = runner.run(base_run(), CancellationToken::new()).await;
        let JobReport::Outcome(o) = report else { panic!("{report:?}") };
        let files = services.files.lock().unwrap();
        let bytes = &files[o.recorded.as_ref().expect("the run is recorded")];
        (Trajectory::from_json(bytes).unwrap(), bytes.len())
    }

    #[tokio::test]
    async fn a_command_printing_65_mib_is_handed_and_recorded_cut_and_its_base_run_uploaded() {
        // Issue 24: 64 MiB of output made the base run's trajectory unstorable (or the agent's
        // protocol line too long): every attempt failed and the base run was retired.
        let (recorded, size) = base_run_printing(1, 65 << 20).await;
        assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
        let action = &recorded.steps[0].actions[0];
        let omitted = action.omitted.expect("the cut is recorded in the action");
        assert_eq!(omitted.head + omitted.bytes + omitted.tail, 65 << 20);
        assert_eq!(omitted.head + omitted.tail, crate::runners::agent::MAX_OBSERVATION_BYTES as u64);
        assert!(action.output.starts_with("FIRST LINE\n") && action.output.ends_with("\nLAST LINE\n"));
        assert!(action.output.contains(&format!("\n[vcurve: {} bytes of output omitted]\n", omitted.bytes)));
        // The agent was handed the cut output: the next message shows it.
        assert!(recorded.messages.iter().any(|m| m.to_string().contains(" bytes of output omitted]")));
    }

    #[tokio::test]
    async fn a_run_of_many_long_outputs_is_cut_again_to_fit_the_store() {
        // Nine outputs of 6 MiB, each kept whole for the agent but twice in the trajectory:
        // 108 MiB, cut to one cap to fit.
        let (recorded, size) = base_run_printing(9, 6 << 20).await;
        assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
        let cut: Vec<_> = recorded.steps.iter().flat_map(|s| &s.actions).filter_map(|a| a.omitted).collect();
        assert_eq!(cut.len(), 9);
        assert!(cut.iter().all(|o| o.head + o.bytes + o.tail == 6 << 20), "{cut:?}");
    }

    #[tokio::test]
    async fn a_patch_judged_before_is_not_evaluated_again_and_an_empty_one_not_at_all() {
        let (runner, runtime, services) = runner(false).await;
        services.verdicts.lock().unwrap().insert(vcurve_record::trajectory::sha256_hex(PATCH.as_bytes()), false);
        let JobReport::Outcome(o) = runner.run(base_run(), CancellationToken::new()).await else { panic!() };
        assert_eq!((o.success, o.judged), (false, Judged::Cached), "the cached verdict stands");
        assert_eq!(runtime.count(Op::Create), 1, "no evaluation container");

        let (runner, runtime, services) = self::runner(true).await;
        let JobReport::Outcome(o) = runner.run(base_run(), CancellationToken::new()).await else { panic!() };
        assert_eq!((o.success, o.judged), (false, Judged::EmptyPatch));
        assert_eq!((runtime.count(Op::Create), *services.lookups.lock().unwrap()), (1, 0));
    }

    #[tokio::test]
    async fn a_continuation_resumes_from_its_step_in_a_replayed_state_and_a_replay_commits_anchors() {
        let (_, recorded) = recorded_base_run().await;
        let payload = payload_of(&recorded);
        let (runner, runtime, services) = runner(false).await;
        let replay = job(JobKey::Replay { study: "s".into(), trajectory: "calc-1-base0".into() }, payload.clone(), 20);
        let report = runner.run(replay, CancellationToken::new()).await;
        let JobReport::Replayed(replayed) = report else { panic!("{report:?}") };
        assert_eq!(replayed.anchors, vec![5, 10, 12]);
        let fingerprints = replayed.fingerprints.expect("fingerprints recorded at every step");
        assert!(services.files.lock().unwrap().contains_key(&fingerprints));
        assert_eq!(runner.snapshot_trajectories(), vec![payload.digest()]);

        let key = ContinuationKey {
            study: "s".into(),
            trajectory: "calc-1-base0".into(),
            series: Series::Main,
            t: 7,
            seed: 0,
        };
        let execs_before = runtime.count(Op::Exec);
        let report = runner.run(job(JobKey::Continuation(key), payload, 13), CancellationToken::new()).await;
        let JobReport::Outcome(o) = report else { panic!("{report:?}") };
        // Resumed after step 7: six more steps, the same plan.
        assert_eq!((o.steps, o.end_type, o.success), (6, EndType::Submitted, true));
        // From the anchor at 5: steps 6 and 7 replayed, then the agent's six, then the evaluation.
        let commands = runtime.commands()[execs_before..].to_vec();
        assert_eq!(commands[0], recorded.steps[5].actions[0].command);
        assert_eq!(commands[1], recorded.steps[6].actions[0].command);
        assert!(runner.held_snapshots().contains(&(runner.snapshot_trajectories()[0].clone(), 7)), "h_7 committed");
        assert!(runtime.running().is_empty());
    }

    #[tokio::test]
    async fn a_continuation_on_another_host_starts_from_the_registry_snapshot_its_job_names() {
        let (_, recorded) = recorded_base_run().await;
        let payload = payload_of(&recorded);
        // Two hosts sharing a registry: A replays and pushes the anchors.
        let host = |registry: Option<crate::sandbox::container::double::FakeRegistry>| async move {
            let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
            runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
            if let Some(registry) = registry {
                runtime.use_registry(registry);
            }
            let runner =
                AgentProcessRunner::start_with_registry(runtime.clone(), "w", 1 << 30, Some("reg.test:5000".into()))
                    .await
                    .unwrap();
            offer_scripted(&runner);
            runner.attach(Arc::new(Services::default()));
            (runner, runtime)
        };
        let (a, runtime_a) = host(None).await;
        assert_eq!(a.snapshot_registry().as_deref(), Some("reg.test:5000"));
        let replay = job(JobKey::Replay { study: "s".into(), trajectory: "calc-1-base0".into() }, payload.clone(), 20);
        assert!(matches!(a.run(replay, CancellationToken::new()).await, JobReport::Replayed(_)));
        a.inner.snapshots.pushes_done().await;
        let pushed = a.take_pushed();
        assert_eq!(pushed.iter().map(|p| p.t).collect::<std::collections::BTreeSet<_>>(), [5, 10, 12].into());
        // B holds nothing; its continuation from h_7 names A's h_5.
        let (b, runtime_b) = host(Some(runtime_a.registry())).await;
        let key = ContinuationKey {
            study: "s".into(),
            trajectory: "calc-1-base0".into(),
            series: Series::Main,
            t: 7,
            seed: 0,
        };
        let mut continuation = job(JobKey::Continuation(key), payload, 13);
        continuation.registry_snapshot = pushed.into_iter().find(|p| p.t == 5);
        let execs_before = runtime_b.count(Op::Exec);
        let report = b.run(continuation, CancellationToken::new()).await;
        let JobReport::Outcome(o) = report else { panic!("{report:?}") };
        assert_eq!((o.steps, o.end_type, o.success), (6, EndType::Submitted, true));
        assert_eq!(runtime_b.count(Op::Pull), 1);
        // Pulled h_5, then replayed steps 6 and 7 only.
        let commands = runtime_b.commands()[execs_before..].to_vec();
        assert_eq!(commands[0], recorded.steps[5].actions[0].command);
        let stats = b.snapshot_stats();
        assert_eq!((stats.pulls, stats.hits_registry, stats.rebuilds), (1, 1, 0));
        assert!(runtime_b.running().is_empty());
    }

    #[tokio::test]
    async fn an_evaluation_rechecks_a_patch_the_coordinator_keeps() {
        let (_, recorded) = recorded_base_run().await;
        let payload = payload_of(&recorded);
        let (runner, _, services) = runner(false).await;
        let sha = services.put_file(PATCH.as_bytes()).await.unwrap();
        let key = JobKey::Evaluation { study: "s".into(), task: "calc-1".into(), patch_sha256: sha, round: 1 };
        assert_eq!(
            runner.run(job(key, payload.clone(), 0), CancellationToken::new()).await,
            JobReport::Evaluated { resolved: true }
        );
        let missing =
            JobKey::Evaluation { study: "s".into(), task: "calc-1".into(), patch_sha256: "0".repeat(64), round: 1 };
        let report = runner.run(job(missing, payload, 0), CancellationToken::new()).await;
        assert!(matches!(&report, JobReport::NoOutcome { reason } if reason.contains("no file")), "{report:?}");
    }

    #[tokio::test]
    async fn bad_options_and_missing_services_are_no_outcomes() {
        let (runner, _, _) = runner(false).await;
        // Options that do not parse are refused as the job arrives (`lease::wire`); a job of
        // another runner is refused here.
        let mut bad = base_run();
        bad.runner = RunnerSpec::Synthetic(Default::default());
        let report = runner.run(bad, CancellationToken::new()).await;
        assert!(
            matches!(&report, JobReport::NoOutcome { reason } if reason.contains("a job of the synthetic runner")),
            "{report:?}"
        );

        let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
        runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
        let unattached = AgentProcessRunner::start(runtime, "w2", 1 << 30).await.unwrap();
        // Without the study's agent registered: a no-outcome naming it, and no agent offered.
        let report = unattached.run(base_run(), CancellationToken::new()).await;
        assert!(
            matches!(&report, JobReport::NoOutcome { reason } if reason.contains("offers no agent \"scripted\"")),
            "{report:?}"
        );
        assert!(unattached.agents().is_empty());
        offer_scripted(&unattached);
        assert_eq!(unattached.agents(), ["scripted"]);
        let runners = crate::Runners::new().with(unattached.clone()).with(crate::SyntheticRunner);
        assert_eq!(
            (runners.agents(), runners.capabilities()),
            (vec!["scripted".to_owned()], vec!["synthetic".to_owned()])
        );
        let report = unattached.run(base_run(), CancellationToken::new()).await;
        assert!(matches!(&report, JobReport::NoOutcome { reason } if reason.contains("services")), "{report:?}");
    }

    #[tokio::test]
    async fn an_engine_error_during_an_exec_is_a_no_outcome_never_an_observation() {
        // Issue 24: after a fork bomb the engine's `OCI runtime exec failed …` was recorded as the
        // step's output. A runtime error during the agent's exec ends the run as a no-outcome.
        let (runner, runtime, services) = runner(false).await;
        let engine = "the engine could not start a command in container c: OCI runtime exec failed: fork";
        runtime.fail_next(Op::Exec, crate::sandbox::container::RuntimeError::Engine(engine.into()));
        let report = runner.run(base_run(), CancellationToken::new()).await;
        let JobReport::NoOutcome { reason } = &report else { panic!("{report:?}") };
        assert!(reason.contains("infrastructure failure") && reason.contains(engine), "{reason}");
        assert!(services.files.lock().unwrap().is_empty(), "nothing recorded or uploaded");
        assert!(runtime.running().is_empty(), "the run's container is removed");
    }
}
