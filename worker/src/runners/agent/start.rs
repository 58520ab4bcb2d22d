//! What one agent run is started with: the process ([`AgentCommand`]) and the `start` message's
//! content ([`AgentStart`]). Both the runner and the protocol's messages use them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use vcurve_record::runner::AgentOptions;
use vcurve_record::{Interpreter, Task};

/// The process to start: the study's `runner.command`, `runner.env` and working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    /// The argument vector, e.g. `["python3", "-m", "vcurve_agents.scripted"]`.
    pub argv: Vec<String>,
    /// Variables added to the worker's environment.
    pub env: BTreeMap<String, String>,
    /// The working directory; `None` is the worker's.
    pub cwd: Option<PathBuf>,
}

impl AgentCommand {
    /// The study's `runner.command` and `runner.env`, run in the worker's working directory.
    pub fn from_options(options: &AgentOptions) -> Self {
        AgentCommand { argv: options.command.clone(), env: options.env.clone(), cwd: None }
    }
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
