//! The agent-runner seam: what a worker hands a runner ([`JobSpec`]), what it gets back
//! ([`JobReport`]), and the registry of runners a worker offers ([`Runners`]).
//!
//! These are the worker's own types; the wire types of `vcurve.v1` are converted to and from them
//! in `lease/wire.rs` only, so a runner never sees protobuf.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use vcurve_record::jobs::{ContinuationKey, HeldJob, JobKey, JobKind, JobReport};
use vcurve_record::{RunnerSpec, TrajectoryPayload};

use crate::runners::services::JobServices;
use crate::sandbox::snapshots::RegistrySnapshot;

/// Everything a runner is given for one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The job to run.
    pub key: JobKey,
    /// The attempt this lease is for (a re-run of a key after a no-outcome has a higher one).
    pub attempt: u32,
    /// The step budget: `B − t` on the main series of a continuation, `B` on `full_budget` and
    /// for base runs.
    pub budget: u32,
    /// The runner the study asks for with its options, parsed once from the wire: a runner
    /// reads its typed options from here (the lease loop hands a job to the runner of its kind).
    pub runner: RunnerSpec,
    /// The study's seed, from which runners derive their randomness.
    pub study_seed: u64,
    /// The digest of the trajectory's payload the job names (continuations and replays).
    pub trajectory_digest: Option<String>,
    /// The payload itself, fetched by the worker (once per digest) before the runner starts.
    pub trajectory: Option<Arc<TrajectoryPayload>>,
    /// A replay's anchors, where it commits the container.
    pub anchors: Vec<u32>,
    /// A continuation's nearest snapshot at or before its step in the worker's snapshot registry,
    /// when the coordinator knows one: pulled when the worker holds none as near.
    pub registry_snapshot: Option<RegistrySnapshot>,
}

impl JobSpec {
    /// The `(key, attempt)` pair heartbeats and reports refer to.
    pub fn held(&self) -> HeldJob {
        HeldJob { key: self.key.clone(), attempt: self.attempt }
    }
}

/// Runs the jobs of one runner kind (`synthetic`, later the container-backed agents): a runner
/// reports what its job's kind allows ([`JobReport::fits`]), and a no-outcome for a kind it does
/// not run.
///
/// `run` returns a boxed `'static` future so that the trait stays dyn-compatible and the worker
/// can spawn the run on its own task. A runner must honour `cancel`: when it fires (the
/// coordinator revoked the job, or the worker is shutting down past its grace period) the run
/// should stop its work and return promptly; what it returns then is discarded.
pub trait AgentRunner: Send + Sync {
    /// The runner kind this implementation serves, as named in study specs.
    fn kind(&self) -> &'static str;

    /// Run one job to its report.
    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, JobReport>;

    /// The agents this runner runs, by the names its operator registered them under (the runner
    /// of the `agent` kind); the worker registers them with the coordinator. Others run none.
    fn agents(&self) -> Vec<String> {
        Vec::new()
    }

    /// The networks beyond `none` this runner's containers may have (its operator's
    /// `--network`); the worker registers them with the coordinator. Others offer none.
    fn networks(&self) -> Vec<String> {
        Vec::new()
    }

    /// Payload digests of the trajectories this runner holds snapshots of, for the coordinator to
    /// hand their continuations to this worker first. Runners without snapshots hold none.
    fn snapshot_trajectories(&self) -> Vec<String> {
        Vec::new()
    }

    /// The snapshot registry this runner pushes to and pulls from (`HOST:PORT`), if any.
    fn snapshot_registry(&self) -> Option<String> {
        None
    }

    /// The snapshots pushed to [`AgentRunner::snapshot_registry`] since the last call, for the
    /// next lease request. Give them back with [`AgentRunner::untake_pushed`] when that fails.
    fn take_pushed(&self) -> Vec<RegistrySnapshot> {
        Vec::new()
    }

    fn untake_pushed(&self, pushed: Vec<RegistrySnapshot>) {
        let _ = pushed;
    }

    /// The model endpoints this runner calls (the model-call runner's, as its operator offered
    /// them: `BASE_URL` or `BASE_URL=KEY_ENV`); the worker registers them with the coordinator.
    /// Others call none.
    fn model_endpoints(&self) -> Vec<String> {
        Vec::new()
    }

    /// Hand the runner the coordinator's services (verdicts, files), once, when the worker
    /// starts. Runners that need none ignore it.
    fn attach(&self, services: Arc<dyn JobServices>) {
        let _ = services;
    }
}

/// The runners a worker offers, by kind. Their kinds are the capabilities the worker registers
/// with. Beside them, the runner of model calls ([`Runners::set_model_calls`]), which runs every
/// `model_call` job whatever its study's runner.
#[derive(Clone, Default)]
pub struct Runners {
    by_kind: BTreeMap<&'static str, Arc<dyn AgentRunner>>,
    model_calls: Option<Arc<dyn AgentRunner>>,
}

impl Runners {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a runner, replacing any earlier one of the same kind (builder style).
    pub fn with(mut self, runner: impl AgentRunner + 'static) -> Self {
        self.insert(Arc::new(runner));
        self
    }

    /// Add a runner; returns the one of the same kind it replaced, if any.
    pub fn insert(&mut self, runner: Arc<dyn AgentRunner>) -> Option<Arc<dyn AgentRunner>> {
        self.by_kind.insert(runner.kind(), runner)
    }

    /// The runner for `kind`.
    pub fn get(&self, kind: &str) -> Option<&Arc<dyn AgentRunner>> {
        self.by_kind.get(kind)
    }

    /// Run `model_call` jobs with `runner` (builder style; see [`Runners::set_model_calls`]).
    pub fn with_model_calls(mut self, runner: impl AgentRunner + 'static) -> Self {
        self.set_model_calls(Arc::new(runner));
        self
    }

    /// Run `model_call` jobs with `runner`, replacing any earlier one. Model calls need no
    /// container runtime: they are routed by their job kind, never by the study's runner kind.
    pub fn set_model_calls(&mut self, runner: Arc<dyn AgentRunner>) {
        self.model_calls = Some(runner);
    }

    /// The runner of `job`: the model-call runner for a `model_call` job, else the runner of its
    /// study's runner kind.
    pub fn for_job(&self, job: &JobSpec) -> Option<&Arc<dyn AgentRunner>> {
        match job.key.kind() {
            JobKind::ModelCall => self.model_calls.as_ref(),
            _ => self.get(job.runner.kind()),
        }
    }

    /// The model endpoints offered ([`AgentRunner::model_endpoints`] of the model-call runner).
    pub fn model_endpoints(&self) -> Vec<String> {
        self.model_calls.as_ref().map(|r| r.model_endpoints()).unwrap_or_default()
    }

    /// The kinds offered, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.by_kind.keys().copied().collect()
    }

    /// The agents offered, sorted, without repeats ([`AgentRunner::agents`]).
    pub fn agents(&self) -> Vec<String> {
        let agents: std::collections::BTreeSet<String> = self.by_kind.values().flat_map(|r| r.agents()).collect();
        agents.into_iter().collect()
    }

    /// The networks offered, sorted, without repeats ([`AgentRunner::networks`]).
    pub fn networks(&self) -> Vec<String> {
        let networks: std::collections::BTreeSet<String> = self.by_kind.values().flat_map(|r| r.networks()).collect();
        networks.into_iter().collect()
    }

    /// The capabilities the worker registers with: its kinds, but for `agent`, whose studies need
    /// the capability of their agent (`agent:NAME`, from [`Runners::agents`]) instead.
    pub fn capabilities(&self) -> Vec<String> {
        self.kinds().into_iter().filter(|k| *k != vcurve_record::runner::AGENT).map(str::to_owned).collect()
    }

    /// Every runner, the model-call runner included, for handing them the coordinator's services.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn AgentRunner>> {
        self.by_kind.values().chain(self.model_calls.as_ref())
    }

    /// Whether no runner is registered (not even a model-call runner).
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty() && self.model_calls.is_none()
    }
}

impl fmt::Debug for Runners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runners")
            .field("kinds", &self.kinds())
            .field("model_endpoints", &self.model_endpoints())
            .finish()
    }
}
