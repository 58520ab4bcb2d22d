//! The runners room: what runs a job, and the seam the lease loop runs them through.
//!
//! - [`seam`]: [`AgentRunner`], [`Runners`], [`JobSpec`], [`JobReport`] — what the worker hands a
//!   runner and gets back. [`services`]: [`JobServices`], what a running job may ask of the
//!   coordinator (verdicts, files).
//! - [`synthetic`]: the `synthetic` runner, whose outcomes are a pure function of the key.
//! - [`agent_runner`]: [`AgentProcessRunner`], the container-backed runner (`process` kind): base
//!   runs, replays, continuations and evaluations in containers of the [`sandbox`](crate::sandbox).
//! - [`agent`]: one agent process in a container, speaking the line protocol.
//! - [`agents`]: the agents a worker's operator registered, and each process's environment and user.
//! - [`agent_env`]: the worker's variables an agent process inherits, and a process's whole environment.
//! - [`mini_swe_agent`]: the `mini-swe-agent` runner kind on top of the agent process runner.
//! - [`model_call`]: [`ModelCallRunner`], the runner of a task-state study's `model_call` jobs on
//!   the model endpoints a worker's operator offers ([`ModelEndpoints`]); no container runtime.
//! - [`task_session`]: a whole multi-turn session of an agent on a task, each checkpoint's patch
//!   judged (the task-state study).
//! - [`evaluate`]: the evaluators (a command, SWE-bench's harness).
//! - [`no_outcome`]: [`NoOutcome`], why a job ends without an outcome (its text is the reason
//!   reported).
//!
//! The children do not import this module's re-exports: each names the sibling it uses, so the
//! seam never depends on a runner.

pub mod agent;
pub mod agent_env;
pub mod agent_runner;
pub mod agents;
pub mod evaluate;
pub mod mini_swe_agent;
pub mod model_call;
pub mod networks;
pub mod no_outcome;
mod python_env;
pub mod seam;
pub mod services;
pub mod synthetic;
pub mod task_session;

pub use agent_runner::AgentProcessRunner;
pub use agents::{AgentRegistry, AgentUser, RegisteredAgent};
pub use mini_swe_agent::MiniSweAgent;
pub use model_call::{ModelCallRunner, ModelEndpoints};
pub use no_outcome::NoOutcome;
pub use seam::{AgentRunner, ContinuationKey, HeldJob, JobKey, JobKind, JobReport, JobSpec, Runners};
pub use services::JobServices;
pub use synthetic::SyntheticRunner;

impl Runners {
    /// The runners this build of the worker ships without a container runtime: `synthetic`.
    pub fn builtin() -> Self {
        Self::new().with(SyntheticRunner)
    }
}
