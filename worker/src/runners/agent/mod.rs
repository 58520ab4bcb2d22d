//! The worker's side of the agent process protocol `vcurve.agent.v1` (docs/agent-protocol.md):
//! [`run_agent`] starts one agent process for one run (a base run from `h_0` or a continuation
//! from `h_t`), answers its `exec`s through the one exec path ([`crate::sandbox::exec::run_command`]),
//! collects its `step`s and its `final`, and checks every message on the way.
//!
//! # What is checked
//!
//! - Every stdout line is one JSON object (at most [`MAX_LINE_BYTES`] before its `\n`; the last
//!   line may lack the `\n`) with a string `"type"`: `exec`, `step` or `final`. Fields the protocol
//!   does not define are ignored.
//! - `exec.command` is a string, `exec.timeout_s` a positive finite number (capped at
//!   [`crate::sandbox::exec::MAX_TIMEOUT_S`]; the action records the timeout applied).
//! - `step.messages` is a non-empty array of JSON objects; the step count never exceeds the
//!   budget. The `exec`s since the previous `step` are the step's actions. `exec`s after the last
//!   `step` and before `final` (say, a `git diff` to build the submission) belong to no step: they
//!   are kept in [`AgentRun::trailing_actions`], not in any step.
//! - `final.end_type` is one of the end types, `final.submission` a string or null,
//!   `final.messages` an array of JSON objects equal (as JSON values) to
//!   `prefix ++ own ++ step_1 ++ … ++ step_n ++ trailing`: it starts with the prefix the agent was
//!   handed; `own` (the agent's own system prompt and task) may be non-empty only when that prefix
//!   is empty; the steps' messages follow in order; `trailing` messages after the last step (a
//!   scaffold's exit notice) belong to no step.
//! - Nothing follows `final` on stdout.
//!
//! Any violation, a process that exits or closes its pipes before `final`, or one killed by a
//! signal is a no-outcome ([`AgentFailure`]), its reason naming what was wrong and ending with
//! the last 4 KiB of the agent's stderr.
//!
//! # Sessions
//!
//! [`run_session_marked`] runs a multi-turn session (docs/agent-protocol.md, "Sessions"): `start`
//! carries `"turns": true`, the worker sends instruction `k`, the agent ends the turn with
//! `turn_end` (a non-empty report and its whole message list, which must extend the previous
//! checkpoint's with the turn's steps in order), the worker takes the checkpoint's patch
//! ([`CHECKPOINT_PATCH_COMMAND`]) and answers with the next instruction or `end`. The budget is
//! per turn. A `turn_end` outside a session or after `end`, a step after `end` or beyond the
//! turn's budget break the protocol; a `final` before `end` ends the session early.
//! [`SessionRun::to_session`] records it as a `vcurve.session.v1` session.
//!
//! # After `final`
//!
//! The worker closes the agent's stdin and waits up to [`AgentLimits::exit_grace`] (10 s) for it
//! to exit, killing it then. The run is decided by its valid `final`: how the process ended
//! afterwards — a non-zero status, a signal, the kill after the grace — does not undo it (the
//! agent never touches the container, so nothing it does after `final` can change the run); it
//! is recorded in [`AgentRun::exit`] and logged at `warn`.
//!
//! # Processes
//!
//! The agent runs in its own process group; on every failure path the whole group is killed
//! (SIGKILL) and the child is reaped. The child is also killed if the future is dropped. Started
//! through [`run_agent_marked`], it carries a mark in its environment that its descendants
//! inherit, and every process with the mark is killed when the run ends: children that left the
//! group (`setsid`) die with the agent ([`crate::sandbox::instance`]).

mod lines;

pub(crate) use lines::last_bytes;
mod messages;
mod process;
#[cfg(test)]
mod protocol_props;
mod session;
#[cfg(test)]
mod session_tests;
mod start;
#[cfg(test)]
mod tests;

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use vcurve_record::runner::AgentOptions;
use vcurve_record::{Action, EndType, Fingerprint, Interpreter, Step, Task, Trajectory, TrajectoryError};

use crate::sandbox::container::Container;
use crate::sandbox::exec::{MAX_TIMEOUT_S, run_command};
use crate::sandbox::instance::AgentMark;
use crate::sandbox::replay::{ChangeSet, Fingerprinter};
use lines::{LineError, LineReader, Tail};
use messages::{
    AgentMessage, end_message, exec_result_message, instruction_message, locate_steps, locate_turn, parse_message,
    start_message,
};

pub use messages::PROTOCOL;
pub use process::AgentExit;
pub(crate) use process::GroupGuard;
use process::{MarkGuard, exit_of, kill, kill_group, signal_name};
pub use start::{AgentCommand, AgentStart};

/// The longest line the agent may write (before its `\n`).
pub const MAX_LINE_BYTES: usize = 64 << 20;
/// The most of a command's output the agent is handed and the run records: 8 MiB, head and tail.
/// A longer output is cut with a marker (`[vcurve: N bytes of output omitted]`) and its action
/// records the cut ([`vcurve_record::Omitted`]): whole, it would not fit on one protocol line to
/// the agent (JSON may escape a byte as six), nor its trajectory in the store (issue 24).
pub const MAX_OBSERVATION_BYTES: usize = 8 << 20;
/// How much of the agent's stderr is kept.
pub const STDERR_TAIL_BYTES: usize = 64 << 10;
/// How long an agent may take to exit after its `final`.
pub const EXIT_GRACE: Duration = Duration::from_secs(10);
/// How much of the stderr tail a failure's reason carries.
const REASON_STDERR_BYTES: usize = 4 << 10;
/// How long to wait for a killed agent's stderr to drain.
const STDERR_DRAIN_WAIT: Duration = Duration::from_secs(1);

/// The bounds of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// A cap on the whole run, from spawning the process to its `final` (the study's
    /// `runner.run_timeout_s`); `None`: none, the step budget bounds the run.
    pub run_timeout: Option<Duration>,
    /// How long the process may take to exit after `final` ([`EXIT_GRACE`]).
    pub exit_grace: Duration,
    /// The longest stdout line ([`MAX_LINE_BYTES`]).
    pub max_line_bytes: usize,
    /// How much stderr is kept ([`STDERR_TAIL_BYTES`]).
    pub stderr_tail_bytes: usize,
    /// Whether a base run (from `t = 0`, not a session) measures a fingerprint of the container
    /// after each step ([`AgentRun::fingerprints`]), where the runtime reads the writable layer.
    pub record_fingerprints: bool,
}

impl AgentLimits {
    /// The protocol's limits with the study's `runner.run_timeout_s`, if it sets one.
    pub fn from_options(options: &AgentOptions) -> Self {
        match options.run_timeout_s {
            Some(cap) => Self::new(Duration::from_secs(cap)),
            None => Self::uncapped(),
        }
    }

    /// The protocol's limits with the given cap on the run.
    pub fn new(run_timeout: Duration) -> Self {
        AgentLimits { run_timeout: Some(run_timeout), ..Self::uncapped() }
    }

    /// The protocol's limits with no cap on the run's time.
    pub fn uncapped() -> Self {
        AgentLimits {
            run_timeout: None,
            exit_grace: EXIT_GRACE,
            max_line_bytes: MAX_LINE_BYTES,
            stderr_tail_bytes: STDERR_TAIL_BYTES,
            record_fingerprints: false,
        }
    }
}

/// A run that ended with a valid `final`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    /// The whole message list (`final.messages`), prefix included.
    pub messages: Vec<Value>,
    /// Messages before the first step: the prefix's length, or, for an empty prefix, the agent's
    /// own initial messages (system prompt and task).
    pub initial_messages: usize,
    /// The steps this run took (after the prefix's `t`), their `messages_end` indices into
    /// [`AgentRun::messages`], fingerprints `None`.
    pub steps: Vec<Step>,
    /// `steps.len()`, at most the budget.
    pub steps_used: u32,
    pub end_type: EndType,
    /// The submitted patch; empty when none.
    pub submission: String,
    /// Commands run after the last step and before `final`; they belong to no step.
    pub trailing_actions: Vec<Action>,
    /// The `t` the run started from.
    pub t: u32,
    /// How the process ended after `final`.
    pub exit: AgentExit,
    /// The last bytes of the agent's stderr ([`AgentLimits::stderr_tail_bytes`]).
    pub stderr_tail: String,
    /// The state after each step, measured as the run went ([`AgentLimits::record_fingerprints`]):
    /// one per step, or none.
    pub fingerprints: Vec<Option<Fingerprint>>,
}

impl AgentRun {
    fn of(collected: Collected, t: u32, exit: AgentExit, stderr_tail: String) -> AgentRun {
        AgentRun {
            steps_used: collected.steps.len() as u32,
            messages: collected.messages,
            initial_messages: collected.initial_messages,
            steps: collected.steps,
            end_type: collected.end_type,
            submission: collected.submission,
            trailing_actions: collected.trailing_actions,
            t,
            exit,
            stderr_tail,
            fingerprints: collected.fingerprints,
        }
    }

    /// The base run as a recorded trajectory: the run must start from `t = 0`; `fingerprints`
    /// is empty (none recorded) or holds one entry per step. The result passes
    /// [`Trajectory::validate`] (a run of zero steps does not: a trajectory has at least one).
    pub fn into_trajectory(
        self,
        task: Task,
        interpreter: Interpreter,
        fingerprints: Vec<Option<Fingerprint>>,
    ) -> Result<Trajectory, TrajectoryError> {
        let field = |field: &str, message: String| TrajectoryError::Field { field: field.into(), message };
        if self.t != 0 {
            return Err(field("t", format!("= {}: only a base run (t = 0) is recorded as a trajectory", self.t)));
        }
        if !fingerprints.is_empty() && fingerprints.len() != self.steps.len() {
            return Err(field(
                "fingerprints",
                format!(
                    "has {} entries for {} steps (give none or one per step)",
                    fingerprints.len(),
                    self.steps.len()
                ),
            ));
        }
        let mut steps = self.steps;
        for (step, fingerprint) in steps.iter_mut().zip(fingerprints) {
            step.fingerprint = fingerprint;
        }
        let trajectory = Trajectory {
            format: vcurve_record::trajectory::FORMAT.to_string(),
            task,
            interpreter,
            messages: self.messages,
            initial_messages: self.initial_messages,
            steps,
            end_type: self.end_type,
            submission: (!self.submission.is_empty()).then_some(self.submission),
            policy: None,
        };
        trajectory.validate()?;
        Ok(trajectory)
    }
}

/// Why a run has no outcome. Every variant but `Cancelled` is reported as a no-outcome with
/// [`AgentFailure::reason`] and the key is run again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentFailure {
    /// The agent broke the protocol (a bad line, a message out of order, too many steps, a
    /// `final` that does not fit, an exit before `final`).
    #[error("the agent broke the protocol: {reason}")]
    Protocol { reason: String },
    /// A signal killed the agent before its `final` (the memory limit, the kernel).
    #[error("the agent was killed: {reason}")]
    Killed { reason: String },
    /// The run outlived its timeout and was killed.
    #[error("the agent run timed out: {reason}")]
    Timeout { reason: String },
    /// The container or the host failed (a runtime error during an exec, the agent could not be
    /// started).
    #[error("infrastructure failure: {reason}")]
    Infrastructure { reason: String },
    /// The caller cancelled the run; the agent was killed.
    #[error("the agent run was cancelled")]
    Cancelled,
}

impl AgentFailure {
    /// The no-outcome reason to report.
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// How the conversation stopped short of a valid `final`.
enum Stop {
    Cancelled,
    Timeout,
    Violation(String),
    /// The process ended (or closed its pipes) before `final`.
    Ended(String, Option<ExitStatus>),
    Infrastructure(String),
}

/// What a valid `final` delivered.
struct Collected {
    messages: Vec<Value>,
    initial_messages: usize,
    steps: Vec<Step>,
    end_type: EndType,
    submission: String,
    trailing_actions: Vec<Action>,
    /// A session's completed turns (none for a single run).
    turns: Vec<CollectedTurn>,
    /// One fingerprint per step, or none ([`AgentLimits::record_fingerprints`]).
    fingerprints: Vec<Option<Fingerprint>>,
}

struct AgentIo {
    stdin: Option<ChildStdin>,
    lines: LineReader<BufReader<ChildStdout>>,
}

impl AgentIo {
    async fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin is closed"));
        };
        let mut bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    }

    /// The next line, a bad one as a violation; `None` at the end of stdout.
    async fn next_line(&mut self, max: usize) -> Result<Option<Vec<u8>>, Stop> {
        match self.lines.next_line().await {
            Ok(line) => Ok(line),
            Err(LineError::TooLong) => Err(Stop::Violation(format!(
                "line {} of the agent's output is longer than {max} bytes",
                self.lines.line_no + 1
            ))),
            Err(LineError::Io(e)) => Err(Stop::Violation(format!("cannot read the agent's output: {e}"))),
        }
    }
}

/// Run one agent process to its `final` (see the module docs for what is checked).
pub async fn run_agent(
    container: &Container,
    start: AgentStart,
    limits: AgentLimits,
    cancel: CancellationToken,
) -> Result<AgentRun, AgentFailure> {
    run_agent_marked(container, start, limits, None, cancel).await
}

/// [`run_agent`] with the agent process started under `mark`
/// ([`crate::sandbox::instance::AgentMark`]): when the run ends, however it ends, every process
/// carrying the mark is killed — the agent's whole tree, also children that left its process
/// group or session (`setsid`) — and a worker that finds this one dead kills them by the mark.
pub async fn run_agent_marked(
    container: &Container,
    start: AgentStart,
    limits: AgentLimits,
    mark: Option<AgentMark>,
    cancel: CancellationToken,
) -> Result<AgentRun, AgentFailure> {
    let (collected, exit, stderr_tail) = run_process(container, &start, None, limits, mark, cancel).await?;
    Ok(AgentRun::of(collected, start.t, exit, stderr_tail))
}

/// A whole session of the agent (docs/agent-protocol.md, "Sessions"): `start` announces turns,
/// instruction `k` of `instructions` opens turn `k` with a budget of `start.budget` steps, and at
/// each `turn_end` the worker takes the checkpoint's patch before it answers with the next
/// instruction or with `end`. Started under `mark` as [`run_agent_marked`] is.
pub async fn run_session_marked(
    container: &Container,
    start: AgentStart,
    instructions: &[String],
    limits: AgentLimits,
    mark: Option<AgentMark>,
    cancel: CancellationToken,
) -> Result<SessionRun, AgentFailure> {
    if instructions.is_empty() {
        return Err(AgentFailure::Infrastructure { reason: "a session needs at least one instruction".into() });
    }
    if let Some(i) = instructions.iter().position(|i| i.trim().is_empty()) {
        return Err(AgentFailure::Infrastructure { reason: format!("instruction {} of the session is empty", i + 1) });
    }
    let turns = Turns { instructions };
    let (mut collected, exit, stderr_tail) = run_process(container, &start, Some(&turns), limits, mark, cancel).await?;
    let turns = std::mem::take(&mut collected.turns);
    Ok(SessionRun {
        complete: turns.len() == instructions.len(),
        turns,
        run: AgentRun::of(collected, start.t, exit, stderr_tail),
    })
}

/// A session that ended with a valid `final` ([`run_session_marked`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRun {
    /// The whole run: every turn's steps in order, the final message list, the end type.
    pub run: AgentRun,
    /// The completed turns, checkpoint `k` the end of `turns[k - 1]`.
    pub turns: Vec<CollectedTurn>,
    /// Whether every instruction's turn completed (false: the agent sent `final` mid-turn, and
    /// that unfinished turn has no checkpoint).
    pub complete: bool,
}

async fn run_process(
    container: &Container,
    start: &AgentStart,
    turns: Option<&Turns<'_>>,
    limits: AgentLimits,
    mark: Option<AgentMark>,
    cancel: CancellationToken,
) -> Result<(Collected, AgentExit, String), AgentFailure> {
    // Declared first, dropped last: after the child is reaped and its group killed.
    let _mark_guard = MarkGuard(mark.clone());
    if cancel.is_cancelled() {
        return Err(AgentFailure::Cancelled);
    }
    let deadline = limits.run_timeout.map(|cap| Instant::now() + cap);
    let capped = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    let Some((program, args)) = start.command.argv.split_first() else {
        return Err(AgentFailure::Infrastructure { reason: "the agent command is empty".into() });
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(crate::runners::agent_env::process_environment(&start.command.env))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(cwd) = &start.command.cwd {
        command.current_dir(cwd);
    }
    if let Some(mark) = &mark {
        mark.apply(&mut command);
    }
    if let Some((uid, gid)) = start.command.user {
        // As root, std drops the supplementary groups (setgroups) before switching.
        command.uid(uid).gid(gid);
    }
    let mut child = command.spawn().map_err(|e| AgentFailure::Infrastructure {
        reason: format!("cannot start the agent {:?}: {e}", start.command.argv),
    })?;
    let group = child.id();
    // Whatever happens from here on, even a drop of this future, nothing of the group survives.
    let _group_guard = GroupGuard(group);
    let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        kill(&mut child, group).await;
        return Err(AgentFailure::Infrastructure { reason: "the agent's pipes were not set up".into() });
    };
    let tail = Tail::new(limits.stderr_tail_bytes);
    let stderr_task = tokio::spawn(tail.clone().drain(stderr));
    let mut io = AgentIo {
        stdin: Some(stdin),
        lines: LineReader::new(BufReader::with_capacity(64 << 10, stdout), limits.max_line_bytes),
    };

    let conversation = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Stop::Cancelled),
        () = capped => Err(Stop::Timeout),
        r = converse(container, start, turns, &limits, &mut io, &mut child) => r,
    };
    let collected = match conversation {
        Ok(collected) => collected,
        Err(stop) => {
            drop(io);
            kill(&mut child, group).await;
            let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, stderr_task).await;
            return Err(failure(stop, &limits, &tail.snapshot()));
        }
    };

    // After final: close stdin, let it exit, refuse anything more on stdout.
    io.stdin = None;
    let max = limits.max_line_bytes;
    let after = async {
        match io.next_line(max).await? {
            Some(line) => Err(Stop::Violation(format!(
                "line {} of the agent's output follows its final message: {}",
                io.lines.line_no,
                messages::excerpt(&line)
            ))),
            None => Ok(child.wait().await),
        }
    };
    let ended = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Stop::Cancelled),
        r = tokio::time::timeout(limits.exit_grace, after) => match r {
            Ok(Ok(Ok(status))) => Ok(exit_of(status)),
            Ok(Ok(Err(e))) => Err(Stop::Infrastructure(format!("cannot wait for the agent process: {e}"))),
            Ok(Err(stop)) => Err(stop),
            Err(_) => Ok(AgentExit::KilledAfterGrace),
        },
    };
    drop(io);
    let exit = match ended {
        Ok(AgentExit::KilledAfterGrace) => {
            kill(&mut child, group).await;
            AgentExit::KilledAfterGrace
        }
        Ok(exit) => exit,
        Err(stop) => {
            kill(&mut child, group).await;
            let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, stderr_task).await;
            return Err(failure(stop, &limits, &tail.snapshot()));
        }
    };
    // Leave nothing of a finished agent behind (its group's background processes).
    kill_group(group);
    let _ = tokio::time::timeout(STDERR_DRAIN_WAIT, stderr_task).await;
    let stderr_tail = tail.snapshot();
    if exit != AgentExit::Exited(0) {
        tracing::warn!(task = %start.task.id, %exit, stderr = %last_bytes(&stderr_tail, REASON_STDERR_BYTES),
            "the agent process did not exit cleanly after a valid final; the run stands");
    }
    Ok((collected, exit, stderr_tail))
}

/// The instructions of a session and what each checkpoint takes ([`run_session_marked`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Turns<'a> {
    /// Instruction `k` opens turn `k` (1-based: `instructions[k - 1]`).
    pub instructions: &'a [String],
}

/// One completed turn of a session, as the conversation collected it.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectedTurn {
    /// The instruction the worker sent.
    pub instruction: String,
    /// `turn_end.report`.
    pub report: String,
    /// The turn's steps: `steps[first_step .. first_step + steps]` of the run.
    pub first_step: usize,
    pub steps: usize,
    /// Where the turn's messages begin in the run's message list (after the previous checkpoint's):
    /// the instruction as the agent phrased it and the turn's steps follow.
    pub first_message: usize,
    /// The length of the agent's message list at the checkpoint (`turn_end.messages`): the
    /// checkpoint's history is `messages[..messages_end]` of the run.
    pub messages_end: usize,
    /// Commands run after the turn's last step and before its `turn_end`; they belong to no step.
    pub trailing_actions: Vec<Action>,
    /// The code state at the checkpoint: the working tree's diff against `HEAD`, untracked files
    /// included, as [`CHECKPOINT_PATCH_COMMAND`] prints it (what the evaluator applies).
    pub patch: String,
}

/// How the worker takes a checkpoint's patch: `git add -A && git diff --cached` (the submission
/// the agents build, which the evaluator applies) through a temporary index, so the agent's own
/// index is left as it was.
pub const CHECKPOINT_PATCH_COMMAND: &str = "vcurve_index=$(mktemp) && trap 'rm -f \"$vcurve_index\"' EXIT && \
     GIT_INDEX_FILE=\"$vcurve_index\" git read-tree HEAD && GIT_INDEX_FILE=\"$vcurve_index\" git add -A && \
     GIT_INDEX_FILE=\"$vcurve_index\" git diff --cached HEAD";
/// The timeout of [`CHECKPOINT_PATCH_COMMAND`], seconds.
const CHECKPOINT_PATCH_TIMEOUT_S: f64 = 300.0;

/// Run [`CHECKPOINT_PATCH_COMMAND`] in the task's working directory.
async fn checkpoint_patch(container: &Container, task: &Task, turn: usize) -> Result<String, Stop> {
    let observed =
        run_command(container, task, &Interpreter::default(), CHECKPOINT_PATCH_COMMAND, CHECKPOINT_PATCH_TIMEOUT_S)
            .await
            .map_err(|e| Stop::Infrastructure(format!("the container failed taking checkpoint {turn}'s patch: {e}")))?;
    if observed.returncode != Some(0) {
        return Err(Stop::Infrastructure(format!(
            "cannot take checkpoint {turn}'s patch in {} (git exited with {}, timed out: {}): {}",
            task.workdir,
            observed.returncode.map_or("no status".to_string(), |c| c.to_string()),
            observed.timed_out,
            last_bytes(observed.output.trim_end(), REASON_STDERR_BYTES)
        )));
    }
    Ok(observed.output)
}

/// The conversation from `start` to a valid `final`; with `turns`, a session
/// (docs/agent-protocol.md, "Sessions").
async fn converse(
    container: &Container,
    start: &AgentStart,
    turns: Option<&Turns<'_>>,
    limits: &AgentLimits,
    io: &mut AgentIo,
    child: &mut Child,
) -> Result<Collected, Stop> {
    if let Err(e) = io.send(&start_message(start, container.id(), turns.is_some())).await {
        return Err(ended_early(child, limits, &format!("the agent closed its input before start ({e})")).await);
    }
    if let Some(turns) = turns {
        let Some(first) = turns.instructions.first() else {
            return Err(Stop::Infrastructure("a session needs at least one instruction".into()));
        };
        if let Err(e) = io.send(&instruction_message(1, first, start.budget)).await {
            let what = format!("the agent closed its input before instruction 1 ({e})");
            return Err(ended_early(child, limits, &what).await);
        }
    }
    let mut pending: Vec<Action> = Vec::new();
    // Each step's actions and the messages it carried.
    let mut step_actions: Vec<Vec<Action>> = Vec::new();
    let mut step_messages: Vec<Vec<Value>> = Vec::new();
    // A session's state: the turns completed, where the current turn's steps begin, the message
    // list at the last checkpoint, and whether the worker has sent `end`.
    let mut completed: Vec<CollectedTurn> = Vec::new();
    let mut turn_first_step = 0usize;
    let mut checkpoint: Vec<Value> = start.messages.clone();
    let mut ended = false;
    // A base run measures its states as it goes (a replay compares them later), but only where
    // the worker reads the writable layer: it stops, and keeps none, at the first step whose
    // layer has no stamp (each step would cost a diff from the engine, seconds).
    let mut fingerprinter = (limits.record_fingerprints && start.t == 0 && turns.is_none())
        .then(|| Fingerprinter::new(container, &start.task, &start.interpreter, ChangeSet::new()));
    let mut fingerprints: Vec<Option<Fingerprint>> = Vec::new();
    loop {
        let Some(line) = io.next_line(limits.max_line_bytes).await? else {
            let what = match turns {
                Some(_) => format!(
                    "the agent's output ended in turn {} after {} steps, before its final message",
                    completed.len() + 1,
                    step_actions.len()
                ),
                None => {
                    format!("the agent's output ended after {} steps, before its final message", step_actions.len())
                }
            };
            return Err(ended_early(child, limits, &what).await);
        };
        let line_no = io.lines.line_no;
        let message = parse_message(&line).map_err(|e| Stop::Violation(format!("line {line_no}: {e}")))?;
        match message {
            AgentMessage::Exec { command, timeout_s } => {
                let applied = timeout_s.min(MAX_TIMEOUT_S);
                let mut observed = run_command(container, &start.task, &start.interpreter, &command, applied)
                    .await
                    .map_err(|e| Stop::Infrastructure(format!("the container failed running {command:?}: {e}")))?;
                let half = MAX_OBSERVATION_BYTES / 2;
                let omitted = vcurve_record::Omitted::cut_to(&observed.output, half, half).map(|(cut, omitted)| {
                    observed.output = cut;
                    omitted
                });
                if let Err(e) = io.send(&exec_result_message(&observed)).await {
                    let what = format!("the agent closed its input before the result of exec {command:?} ({e})");
                    return Err(ended_early(child, limits, &what).await);
                }
                pending.push(Action {
                    command,
                    timeout_s: applied,
                    output: observed.output,
                    returncode: observed.returncode,
                    timed_out: observed.timed_out,
                    exception: None,
                    omitted,
                });
            }
            AgentMessage::Step { messages } => {
                if ended {
                    return Err(Stop::Violation(format!(
                        "line {line_no}: a step after the worker ended the session (only exec and final may follow end)"
                    )));
                }
                let taken = step_actions.len() - turn_first_step;
                if taken as u64 >= u64::from(start.budget) {
                    return Err(Stop::Violation(match turns {
                        Some(_) => format!(
                            "line {line_no}: step {} of turn {} is beyond the budget of {} steps per turn",
                            taken + 1,
                            completed.len() + 1,
                            start.budget
                        ),
                        None => {
                            format!("line {line_no}: step {} is beyond the budget of {} steps", taken + 1, start.budget)
                        }
                    }));
                }
                let returncode = pending.last().and_then(|a| a.returncode);
                step_actions.push(std::mem::take(&mut pending));
                step_messages.push(messages);
                if let Some(measure) = fingerprinter.as_mut() {
                    let t = step_actions.len() as u32;
                    let failed = |e| Stop::Infrastructure(format!("measuring the state after step {t}: {e}"));
                    let (_, stamp) = measure.changes_stamped(t).await.map_err(failed)?;
                    if stamp.is_some() {
                        fingerprints.push(Some(measure.fingerprint(t, returncode).await.map_err(failed)?));
                    } else {
                        fingerprinter = None;
                        fingerprints.clear();
                    }
                }
            }
            AgentMessage::TurnEnd { report, messages } => {
                let Some(turns) = turns else {
                    return Err(Stop::Violation(format!(
                        "line {line_no}: turn_end in a run that is not a session (its start had no \"turns\")"
                    )));
                };
                if ended {
                    return Err(Stop::Violation(format!(
                        "line {line_no}: turn_end after the worker ended the session: the agent owes its final message"
                    )));
                }
                let k = completed.len() + 1;
                let first_message = locate_turn(&checkpoint, &step_messages[turn_first_step..], &messages, "turn_end")
                    .map_err(|e| Stop::Violation(format!("line {line_no} (turn {k}): {e}")))?;
                let patch = checkpoint_patch(container, &start.task, k).await?;
                completed.push(CollectedTurn {
                    instruction: turns.instructions[k - 1].clone(),
                    report,
                    first_step: turn_first_step,
                    steps: step_actions.len() - turn_first_step,
                    first_message,
                    messages_end: messages.len(),
                    trailing_actions: std::mem::take(&mut pending),
                    patch,
                });
                checkpoint = messages;
                turn_first_step = step_actions.len();
                let next = match turns.instructions.get(k) {
                    Some(instruction) => instruction_message(k + 1, instruction, start.budget),
                    None => {
                        ended = true;
                        end_message()
                    }
                };
                if let Err(e) = io.send(&next).await {
                    let what = format!("the agent closed its input after turn {k}'s turn_end ({e})");
                    return Err(ended_early(child, limits, &what).await);
                }
            }
            AgentMessage::Final { end_type, submission, messages } => {
                let mut starts = Vec::with_capacity(completed.len() + 1);
                let located = match turns {
                    None => locate_steps(&start.messages, &step_messages, &messages),
                    Some(_) => locate_turn(&checkpoint, &step_messages[turn_first_step..], &messages, "final"),
                };
                let located = located.map_err(|e| Stop::Violation(format!("line {line_no}: {e}")))?;
                // Where each turn's steps begin (the unfinished turn's, if any, last).
                starts.extend(completed.iter().map(|t| (t.first_step, t.first_message)));
                if turns.is_none() || turn_first_step < step_actions.len() || completed.is_empty() {
                    starts.push((turn_first_step, located));
                }
                let initial_messages = starts.first().map_or(located, |&(_, m)| m);
                let mut steps = Vec::with_capacity(step_actions.len());
                let mut end = 0;
                for (i, (actions, carried)) in step_actions.into_iter().zip(&step_messages).enumerate() {
                    if let Some(&(_, first)) = starts.iter().rfind(|&&(s, _)| s == i) {
                        end = first;
                    }
                    end += carried.len();
                    steps.push(Step { actions, messages_end: end, fingerprint: None });
                }
                return Ok(Collected {
                    messages,
                    initial_messages,
                    steps,
                    end_type,
                    submission,
                    trailing_actions: pending,
                    turns: completed,
                    fingerprints,
                });
            }
        }
    }
}

/// The process stopped talking before `final`: see how it ended (waiting up to the exit grace).
async fn ended_early(child: &mut Child, limits: &AgentLimits, what: &str) -> Stop {
    match tokio::time::timeout(limits.exit_grace, child.wait()).await {
        Ok(Ok(status)) => Stop::Ended(what.to_string(), Some(status)),
        Ok(Err(e)) => Stop::Infrastructure(format!("{what}; cannot wait for the agent process: {e}")),
        Err(_) => Stop::Ended(format!("{what}, and the process was still running {:?} later", limits.exit_grace), None),
    }
}

fn failure(stop: Stop, limits: &AgentLimits, stderr_tail: &str) -> AgentFailure {
    let with_stderr = |reason: String| {
        let tail = last_bytes(stderr_tail.trim_end(), REASON_STDERR_BYTES);
        if tail.is_empty() {
            format!("{reason}; the agent wrote nothing to stderr")
        } else {
            format!("{reason}; agent stderr (last {REASON_STDERR_BYTES} bytes at most):\n{tail}")
        }
    };
    match stop {
        Stop::Cancelled => AgentFailure::Cancelled,
        Stop::Timeout => AgentFailure::Timeout {
            reason: with_stderr(format!(
                "the run took longer than its {} s and was killed",
                limits.run_timeout.unwrap_or_default().as_secs_f64()
            )),
        },
        Stop::Violation(reason) => AgentFailure::Protocol { reason: with_stderr(reason) },
        Stop::Infrastructure(reason) => AgentFailure::Infrastructure { reason: with_stderr(reason) },
        Stop::Ended(what, status) => match status.map(|s| (s.signal(), s.code())) {
            Some((Some(sig), _)) => AgentFailure::Killed {
                reason: with_stderr(format!("{what}: the process was killed by {}", signal_name(sig))),
            },
            Some((None, Some(code))) => {
                AgentFailure::Protocol { reason: with_stderr(format!("{what}: the process exited with status {code}")) }
            }
            _ => AgentFailure::Protocol { reason: with_stderr(what) },
        },
    }
}
