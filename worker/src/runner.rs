//! The agent-runner seam: what a worker hands a runner ([`JobSpec`]), what it gets back
//! ([`RunResult`]), and the registry of runners a worker offers ([`Runners`]).
//!
//! These are the worker's own types; the wire types of `vcurve.v1` are converted to and from them
//! in `wire.rs` only, so a runner never sees protobuf.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::synthetic::SyntheticRunner;

/// One continuation's identity: a resumed run from `h_t` of `trajectory` in `series`, with the
/// `seed`-th fresh seed of that point (SPEC.md §1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContinuationKey {
    /// The study id.
    pub study: String,
    /// The trajectory id within the study.
    pub trajectory: String,
    /// `main`, `retest` or `full_budget`.
    pub series: String,
    /// The prefix length: the continuation resumes from `h_t`.
    pub t: u32,
    /// The 0-based seed index within the point.
    pub seed: u32,
}

impl fmt::Display for ContinuationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}/{}", self.study, self.trajectory, self.series, self.t, self.seed)
    }
}

/// A key as leased: the same key leased again after a lost lease or a no-outcome carries a higher
/// attempt, and every heartbeat, report and release names the attempt it is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeldJob {
    /// The continuation.
    pub key: ContinuationKey,
    /// The attempt the coordinator issued it under.
    pub attempt: u32,
}

/// Everything a runner is given for one continuation.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The continuation to run.
    pub key: ContinuationKey,
    /// The attempt this lease is for (a re-run of a key after a no-outcome has a higher one).
    pub attempt: u32,
    /// The remaining step budget: `B − t` on the main series, `B` on `full_budget`.
    pub budget: u32,
    /// The runner kind the study asks for, e.g. `"synthetic"`.
    pub runner_kind: String,
    /// The runner's options from the study spec; `{}` when the study gives none.
    pub options: serde_json::Value,
    /// The study's seed, from which runners derive their randomness.
    pub study_seed: u64,
    /// What the runner needs to know of the trajectory (for `synthetic`: `{"curve": [...]}`);
    /// `null` when the coordinator sends nothing.
    pub trajectory: serde_json::Value,
}

impl JobSpec {
    /// The `(key, attempt)` pair heartbeats and reports refer to.
    pub fn held(&self) -> HeldJob {
        HeldJob { key: self.key.clone(), attempt: self.attempt }
    }
}

/// How a continuation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunResult {
    /// The run finished and was evaluated: `Y = success`.
    Outcome {
        /// Whether the submitted patch resolved the task.
        success: bool,
        /// Steps the agent used, at most the budget.
        steps: u32,
        /// How the run ended: `"submitted"`, `"step_cap"`, ...
        end_type: String,
        /// Hex SHA-256 of the submitted patch.
        patch_sha256: String,
    },
    /// The run produced no outcome (killed, evaluation failed, bad options); the coordinator runs
    /// the key again under the next attempt and retires it after 3 such attempts.
    NoOutcome {
        /// Why, for the study's records.
        reason: String,
    },
}

impl RunResult {
    /// A [`RunResult::NoOutcome`] with the given reason.
    pub fn no_outcome(reason: impl Into<String>) -> Self {
        Self::NoOutcome { reason: reason.into() }
    }
}

/// Runs continuations of one kind (`synthetic`, later the container-backed agents).
///
/// `run` returns a boxed `'static` future so that the trait stays dyn-compatible and the worker
/// can spawn the run on its own task. A runner must honour `cancel`: when it fires (the
/// coordinator revoked the job, or the worker is shutting down past its grace period) the run
/// should stop its work and return promptly; what it returns then is discarded.
pub trait AgentRunner: Send + Sync {
    /// The runner kind this implementation serves, as named in study specs.
    fn kind(&self) -> &'static str;

    /// Run one continuation to its result.
    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, RunResult>;
}

/// The runners a worker offers, by kind. Their kinds are the capabilities the worker registers
/// with.
#[derive(Clone, Default)]
pub struct Runners {
    by_kind: BTreeMap<&'static str, Arc<dyn AgentRunner>>,
}

impl Runners {
    /// The runners this build of the worker ships: `synthetic` for now.
    pub fn builtin() -> Self {
        Self::new().with(SyntheticRunner)
    }

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

    /// The kinds offered, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.by_kind.keys().copied().collect()
    }

    /// Whether no runner is registered.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }
}

impl fmt::Debug for Runners {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runners").field("kinds", &self.kinds()).finish()
    }
}
