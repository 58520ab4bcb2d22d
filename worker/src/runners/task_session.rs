//! A whole multi-turn session of an agent on a task, in a container of the task image (the
//! task-state study, docs/task-state.md; the protocol's sessions, docs/agent-protocol.md).
//!
//! [`run_session`] starts a fresh container of the task image, runs the agent process through the
//! session protocol ([`run_session_marked`]: instruction `k` opens turn `k`, the agent ends it
//! with a report, the worker takes the checkpoint's patch), removes the container, records the
//! session as a `vcurve.session.v1` [`Session`], and judges each checkpoint's patch with the
//! task's evaluator ([`evaluate_command`], one evaluation per distinct patch; an empty patch is
//! unresolved without a container) — "fixed at `k`".

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use vcurve_record::session::Session;

use crate::runners::agent::{AgentLimits, AgentStart, SessionRun, run_session_marked};
use crate::runners::evaluate::{SwebenchHarness, evaluate_command};
use crate::runners::no_outcome::NoOutcome;
use crate::sandbox::container::{Container, ContainerRuntime, ContainerSpec};
use crate::sandbox::instance::AgentMark;

/// The study's four instructions (CTXGAP, Tables 6 and 7), in order.
pub const PAPER_INSTRUCTIONS: [&str; 4] =
    ["Investigate; do not modify code", "Implement a fix", "Run tests and report the result", "Assess remaining risk"];

/// What a session is run with beside the agent's start.
#[derive(Debug, Clone)]
pub struct SessionPlan {
    /// Instruction `k` opens turn `k`.
    pub instructions: Vec<String>,
    /// The run's limits (`run_timeout` caps the whole session).
    pub limits: AgentLimits,
    /// Judge every checkpoint's patch with the task's evaluator (the harness for SWE-bench
    /// tasks); `None`: the checkpoints are not judged.
    pub evaluate: Option<SwebenchHarness>,
}

impl SessionPlan {
    /// The study's four instructions ([`PAPER_INSTRUCTIONS`]).
    pub fn paper(limits: AgentLimits, evaluate: Option<SwebenchHarness>) -> SessionPlan {
        SessionPlan { instructions: PAPER_INSTRUCTIONS.map(str::to_owned).to_vec(), limits, evaluate }
    }
}

/// The code state at one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// `k`, 1-based: the end of turn `k`.
    pub k: u32,
    /// The working tree's diff against `HEAD` at the end of turn `k`, untracked files included.
    pub patch: String,
    /// The SHA-256 of `patch`, as the patch cache keys patches.
    pub patch_sha256: String,
    /// The evaluator's verdict on `patch` (`None`: not judged).
    pub resolved: Option<bool>,
}

/// A recorded session with its checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    /// The session as the study reads it (its completed turns).
    pub session: Session,
    /// One per completed turn, in order.
    pub checkpoints: Vec<Checkpoint>,
    /// The run as the protocol collected it: the agent's messages (its history at checkpoint `k`
    /// is [`SessionRun::history_at`]), the steps with their actions, how it ended.
    pub run: SessionRun,
}

/// Run `start`'s agent through a session of `plan.instructions` on `start.task` in a fresh
/// container of the task image (`base` gives the limits and labels; its image is replaced), each
/// turn with a budget of `start.budget` steps (see the module docs).
pub async fn run_session(
    runtime: Arc<dyn ContainerRuntime>,
    base: &ContainerSpec,
    start: AgentStart,
    plan: &SessionPlan,
    mark: Option<AgentMark>,
    cancel: CancellationToken,
) -> Result<SessionRecord, NoOutcome> {
    let task = start.task.clone();
    let spec = ContainerSpec { image: task.image.clone(), ..base.clone() };
    let container =
        Container::start(runtime.clone(), &spec).await.map_err(NoOutcome::engine("starting the task container"))?;
    let run = run_session_marked(&container, start, &plan.instructions, plan.limits, mark, cancel.clone()).await;
    if let Err(e) = container.remove().await {
        tracing::warn!(error = %e, "cannot remove a finished session's container");
    }
    let run = run?;
    let session = run
        .to_session(&task)
        .map_err(|e| NoOutcome::Record(format!("the session of task {} cannot be recorded: {e}", task.id)))?;
    let mut verdicts: BTreeMap<String, bool> = BTreeMap::new();
    let mut checkpoints = Vec::with_capacity(run.turns.len());
    for (i, turn) in run.turns.iter().enumerate() {
        let patch_sha256 = vcurve_record::trajectory::sha256_hex(turn.patch.as_bytes());
        let resolved = match &plan.evaluate {
            None => None,
            Some(harness) => Some(match verdicts.get(&patch_sha256) {
                Some(&resolved) => resolved,
                None => {
                    let verdict =
                        evaluate_command(runtime.clone(), &task, &turn.patch, base, harness, cancel.clone()).await?;
                    verdicts.insert(patch_sha256.clone(), verdict.resolved);
                    verdict.resolved
                }
            }),
        };
        checkpoints.push(Checkpoint { k: i as u32 + 1, patch: turn.patch.clone(), patch_sha256, resolved });
    }
    Ok(SessionRecord { session, checkpoints, run })
}
