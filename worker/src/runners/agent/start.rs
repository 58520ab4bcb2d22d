//! What one agent run is started with: the process ([`AgentCommand`]) and the `start` message's
//! content ([`AgentStart`]). Both the runner and the protocol's messages use them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use vcurve_record::{Interpreter, Task};

/// The process to start: a registered agent's command ([`crate::runners::agents`]), its
/// environment and working directory, and the user it runs as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentCommand {
    /// The argument vector, e.g. `["python3", "-m", "vcurve_agents.scripted"]`.
    pub argv: Vec<String>,
    /// Variables added to the few the process takes from the worker's environment (`PATH`,
    /// `HOME`, the locale: [`crate::runners::agent_env::process_environment`]); it gets no other.
    pub env: BTreeMap<String, String>,
    /// The working directory; `None` is the worker's.
    pub cwd: Option<PathBuf>,
    /// `(uid, gid)` to run as, with no supplementary groups; `None`: the worker's user.
    pub user: Option<(u32, u32)>,
}

/// Everything one run is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentStart {
    pub command: AgentCommand,
    /// The task (its id, workdir and problem statement go into `start`; commands run in its
    /// workdir).
    pub task: Task,
    /// How the agent's commands are run (the trajectory's interpreter; the default for base runs
    /// of tasks without a recorded run).
    pub interpreter: Interpreter,
    /// The message prefix the agent resumes from (empty for a base run without recorded initial
    /// messages).
    pub messages: Vec<Value>,
    /// Steps already taken in the prefix.
    pub t: u32,
    /// Steps the agent may still take.
    pub budget: u32,
    /// The run's sampling seed.
    pub seed: u64,
    /// The study's `runner.model` object, passed through.
    pub model: Value,
}
