//! A recorded run of an agent on a task: what replay re-executes and continuations resume from.
//!
//! A [`Trajectory`] is the agent's run as recorded: for each step `t = 1..T` one model call and
//! the actions it asked for (shell commands with their timeouts, outputs and return codes), an
//! optional recorded state [`Fingerprint`], and where the message list stood after the step (the
//! message prefix a continuation from `h_t` is handed). `h_0` is the task alone.
//!
//! Trajectories travel by content: [`Trajectory::digest`] is the SHA-256 of the canonical
//! encoding ([`Trajectory::canonical_bytes`]: compact JSON, fields in declaration order, object
//! keys sorted), so two files that decode to the same trajectory share one digest, and a worker
//! that fetched a digest once never fetches it again.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::Digest;
pub use crate::ids::is_digest;

/// The format name every trajectory file carries, so that another format is refused by name.
pub const FORMAT: &str = "vcurve.trajectory.v1";

/// A task: a repository issue with a container image, a working directory and an evaluator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The task's id, e.g. `django__django-11555`.
    pub id: String,
    /// The container image the task runs in.
    pub image: String,
    /// The working directory of every command, e.g. `/testbed`.
    pub workdir: String,
    /// How a submitted patch is judged.
    pub evaluator: Evaluator,
    /// The issue text the agent was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_statement: Option<String>,
}

/// How a patch is judged resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Evaluator {
    /// Apply the patch in a fresh container of the task image and run `command` there: resolved
    /// iff it exits 0 within `timeout_s`.
    Command { command: String, timeout_s: u32 },
    /// The official SWE-bench harness (`swebench==5.0.2`) for one instance.
    Swebench {
        instance_id: String,
        /// The instance's dataset row as the harness reads it (SWE-bench Verified's fields:
        /// `repo`, `version`, `base_commit`, `test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`, …).
        /// Absent on a task imported from a trajectory alone: such a task cannot be evaluated
        /// until a study gives it its row (a SWE-bench dataset file).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<serde_json::Value>,
    },
}

/// How the recording agent ran commands: the interpreter's argument vector before the command
/// (mini-swe-agent's SWE-bench configuration: `["bash", "-c"]`) and its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interpreter {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How the recording environment turned a command's output into text (written only when it
    /// is not vcurve's own, `bytes`).
    #[serde(default, skip_serializing_if = "OutputDecoding::is_bytes")]
    pub output: OutputDecoding,
    /// What the recording environment did with a command at its timeout (written only when it is
    /// not vcurve's own, `kill`).
    #[serde(default, skip_serializing_if = "OnTimeout::is_kill")]
    pub on_timeout: OnTimeout,
}

impl Default for Interpreter {
    fn default() -> Self {
        Interpreter {
            argv: vec!["bash".into(), "-c".into()],
            env: BTreeMap::new(),
            output: OutputDecoding::Bytes,
            on_timeout: OnTimeout::Kill,
        }
    }
}

impl Interpreter {
    /// How mini-swe-agent's environments (docker, local, singularity, …) run a command with this
    /// argv and environment: they read its output with Python's `subprocess.run(text=True)`
    /// (universal newlines) and, at its timeout, kill only their own client, leaving the command
    /// running.
    pub fn mini_swe_agent(argv: Vec<String>, env: BTreeMap<String, String>) -> Interpreter {
        Interpreter { argv, env, output: OutputDecoding::Text, on_timeout: OnTimeout::Leave }
    }
}

/// How a recording environment decoded what a command printed (stdout and stderr merged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputDecoding {
    /// vcurve's own: UTF-8 with invalid bytes replaced, every byte kept (`\r` included).
    #[default]
    Bytes,
    /// Python's text mode (`subprocess.run(text=True, errors="replace")`): UTF-8 with invalid bytes
    /// replaced, then universal newlines (`\r\n` and `\r` read as `\n`). The partial output of a
    /// command that timed out is decoded without the newline translation, as Python hands it over
    /// (`TimeoutExpired.output` is the bytes read so far).
    Text,
}

impl OutputDecoding {
    fn is_bytes(&self) -> bool {
        *self == OutputDecoding::Bytes
    }

    /// `output` as this environment decoded it; `timed_out`: the command's partial output.
    pub fn decode(self, output: &[u8], timed_out: bool) -> String {
        let text = String::from_utf8_lossy(output);
        match self {
            OutputDecoding::Text if !timed_out && text.contains('\r') => text.replace("\r\n", "\n").replace('\r', "\n"),
            _ => text.into_owned(),
        }
    }
}

/// What a recording environment did with a command when its timeout ran out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// vcurve's own: the command's whole process group is killed inside the container (and with
    /// it anything a command leaves running when it returns).
    #[default]
    Kill,
    /// As under a plain `docker exec` (mini-swe-agent's `DockerEnvironment`): only the client is
    /// stopped; the command, and anything it left in the background, keeps running.
    Leave,
}

impl OnTimeout {
    fn is_kill(&self) -> bool {
        *self == OnTimeout::Kill
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndType {
    /// The agent submitted a patch (possibly empty).
    Submitted,
    /// The agent used its whole step budget.
    StepCap,
    /// The run's cost limit was reached.
    CostLimit,
    /// The model's context window was exceeded.
    ContextWindow,
    /// The agent kept answering in a format the scaffold could not parse.
    FormatError,
    /// The scaffold or the model raised an error that ended the run.
    Error,
}

impl EndType {
    pub fn as_str(self) -> &'static str {
        match self {
            EndType::Submitted => "submitted",
            EndType::StepCap => "step_cap",
            EndType::CostLimit => "cost_limit",
            EndType::ContextWindow => "context_window",
            EndType::FormatError => "format_error",
            EndType::Error => "error",
        }
    }
}

impl fmt::Display for EndType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One command the agent asked for, and what it observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub command: String,
    /// The command's timeout in seconds, as the recording environment applied it.
    pub timeout_s: f64,
    /// stdout and stderr merged, decoded as the recording agent decoded them.
    pub output: String,
    /// `None` when the command did not finish (it timed out or raised).
    pub returncode: Option<i32>,
    /// Whether the command was stopped by its timeout.
    #[serde(default)]
    pub timed_out: bool,
    /// The exception the environment reported, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    /// What of `output` was left out so that the run fits the store's per-file limit
    /// ([`crate::oversize`], [`crate::omitted`]): `output` is then its head, a marker and its tail. `None`: whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<crate::omitted::Omitted>,
}

/// The state after a step, as far as replay compares it (docs/method.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    /// Paths the container diff shows changed, outside caches and logs, sorted.
    pub changed_paths: Vec<String>,
    /// The return code of the step's last action.
    pub returncode: Option<i32>,
    /// `git diff` of the working directory.
    pub git_diff: String,
    /// `git status --porcelain` of the working directory.
    pub git_status: String,
}

/// One model call and the actions it asked for (none for a reply the scaffold could not parse).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub actions: Vec<Action>,
    /// How many of the trajectory's messages existed after this step's observations: the message
    /// prefix a continuation from `h_t` is handed is `messages[..messages_end]`.
    pub messages_end: usize,
    /// The recorded state after the step, when the recording captured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Fingerprint>,
}

/// A recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trajectory {
    /// Always [`FORMAT`].
    pub format: String,
    pub task: Task,
    #[serde(default)]
    pub interpreter: Interpreter,
    /// The agent's whole message list as recorded (system prompt, task, model replies,
    /// observations), each message a JSON object.
    pub messages: Vec<serde_json::Value>,
    /// Messages before the first step (`h_0`: the system prompt and the task).
    pub initial_messages: usize,
    pub steps: Vec<Step>,
    pub end_type: EndType,
    /// The submitted patch; `None` or empty when nothing was submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission: Option<String>,
    /// The policy the run was recorded under, where the import could read it (model, sampling
    /// settings, agent version, environment class): a study resumes it unless its spec overrides
    /// a setting. `None` for a run vcurve recorded itself (the study's own runner settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::RecordedPolicy>,
}

/// Why a trajectory is not valid. Fatal: the file must be fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrajectoryError {
    #[error("not a vcurve trajectory: {0}")]
    Json(String),
    #[error("format is {found:?}; this version reads {FORMAT:?}")]
    Format { found: String },
    #[error("{field} {message}")]
    Field { field: String, message: String },
}

fn field(field: impl Into<String>, message: impl Into<String>) -> TrajectoryError {
    TrajectoryError::Field { field: field.into(), message: message.into() }
}

impl Trajectory {
    /// Parse and validate a trajectory file.
    pub fn from_json(bytes: &[u8]) -> Result<Trajectory, TrajectoryError> {
        // Look at the format first, so another format is refused by name, not by its first
        // unknown field.
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| TrajectoryError::Json(e.to_string()))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => return Err(TrajectoryError::Format { found: other.to_string() }),
            None => return Err(field("format", format!("is missing (expected {FORMAT:?})"))),
        }
        let trajectory: Trajectory = serde_json::from_value(value).map_err(|e| TrajectoryError::Json(e.to_string()))?;
        trajectory.validate()?;
        Ok(trajectory)
    }

    /// Check what the types cannot: step bounds, message prefixes, timeouts.
    pub fn validate(&self) -> Result<(), TrajectoryError> {
        if self.format != FORMAT {
            return Err(TrajectoryError::Format { found: self.format.clone() });
        }
        if self.task.id.trim().is_empty() {
            return Err(field("task.id", "is empty"));
        }
        if self.task.image.trim().is_empty() {
            return Err(field("task.image", "is empty"));
        }
        if !self.task.workdir.starts_with('/') {
            return Err(field("task.workdir", format!("{:?} is not an absolute path", self.task.workdir)));
        }
        if self.interpreter.argv.is_empty() {
            return Err(field("interpreter.argv", "is empty"));
        }
        if self.steps.is_empty() {
            return Err(field("steps", "is empty: a trajectory has at least one step"));
        }
        if self.initial_messages > self.messages.len() {
            return Err(field(
                "initial_messages",
                format!("= {} but there are {} messages", self.initial_messages, self.messages.len()),
            ));
        }
        let mut previous = self.initial_messages;
        for (i, step) in self.steps.iter().enumerate() {
            let at = |f: &str| format!("steps[{i}].{f}");
            if step.messages_end < previous || step.messages_end > self.messages.len() {
                return Err(field(
                    at("messages_end"),
                    format!(
                        "= {} must lie between the previous step's {previous} and the {} messages",
                        step.messages_end,
                        self.messages.len()
                    ),
                ));
            }
            previous = step.messages_end;
            for (j, action) in step.actions.iter().enumerate() {
                if !(action.timeout_s.is_finite() && action.timeout_s > 0.0) {
                    return Err(field(
                        format!("steps[{i}].actions[{j}].timeout_s"),
                        format!("= {} must be a positive number of seconds", action.timeout_s),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `T`, the number of steps.
    pub fn length(&self) -> u32 {
        self.steps.len() as u32
    }

    /// The message prefix a continuation from `h_t` is handed (`t = 0`: the task alone).
    pub fn prefix(&self, t: u32) -> &[serde_json::Value] {
        let end = match t {
            0 => self.initial_messages,
            t => self.steps.get(t as usize - 1).map_or(self.messages.len(), |s| s.messages_end),
        };
        &self.messages[..end]
    }

    /// The canonical encoding the digest is taken over.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a trajectory always serializes")
    }

    /// SHA-256 of the canonical encoding, as lowercase hex.
    pub fn digest(&self) -> String {
        sha256_hex(&self.canonical_bytes())
    }
}

/// Lowercase hex SHA-256 of `bytes`: the text of [`Digest::of`].
pub fn sha256_hex(bytes: &[u8]) -> String {
    Digest::of(bytes).into_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn output_is_decoded_as_the_recording_environment_did() {
        let printed = b"a\r\nb\rc\n\xff end";
        assert_eq!(OutputDecoding::Bytes.decode(printed, false), "a\r\nb\rc\n\u{fffd} end", "vcurve keeps every byte");
        // Python's subprocess.run(text=True, errors="replace"): universal newlines.
        assert_eq!(OutputDecoding::Text.decode(printed, false), "a\nb\nc\n\u{fffd} end");
        // TimeoutExpired.output is the bytes read so far, decoded by mini-swe-agent without them.
        assert_eq!(OutputDecoding::Text.decode(printed, true), "a\r\nb\rc\n\u{fffd} end");
    }

    #[test]
    fn an_interpreter_writes_its_environment_only_when_it_is_not_vcurves_own() {
        let own = serde_json::to_value(Interpreter::default()).unwrap();
        assert_eq!(
            own,
            serde_json::json!({"argv": ["bash", "-c"], "env": {}}),
            "digests of existing records unchanged"
        );
        let msa = Interpreter::mini_swe_agent(vec!["bash".into(), "-lc".into()], BTreeMap::new());
        let written = serde_json::to_value(&msa).unwrap();
        assert_eq!((written["output"].as_str(), written["on_timeout"].as_str()), (Some("text"), Some("leave")));
        assert_eq!(serde_json::from_value::<Interpreter>(written).unwrap(), msa);
        let bad = serde_json::json!({"argv": ["bash", "-c"], "output": "utf16"});
        assert!(serde_json::from_value::<Interpreter>(bad).is_err());
    }

    pub(crate) fn sample() -> Trajectory {
        let msg = |role: &str, content: &str| serde_json::json!({"role": role, "content": content});
        Trajectory {
            format: FORMAT.into(),
            task: Task {
                id: "demo__pkg-1".into(),
                image: "vcurve/task:abc".into(),
                workdir: "/testbed".into(),
                evaluator: Evaluator::Command { command: "python3 -m pytest -q".into(), timeout_s: 600 },
                problem_statement: Some("fix it".into()),
            },
            interpreter: Interpreter::default(),
            messages: vec![
                msg("system", "you are an agent"),
                msg("user", "fix it"),
                msg("assistant", "ls"),
                msg("user", "a b"),
                msg("assistant", "oops"),
                msg("user", "format error"),
            ],
            initial_messages: 2,
            steps: vec![
                Step {
                    actions: vec![Action {
                        command: "ls".into(),
                        timeout_s: 60.0,
                        output: "a b\n".into(),
                        returncode: Some(0),
                        timed_out: false,
                        exception: None,
                        omitted: None,
                    }],
                    messages_end: 4,
                    fingerprint: None,
                },
                Step { actions: vec![], messages_end: 6, fingerprint: None },
            ],
            end_type: EndType::StepCap,
            submission: None,
            policy: None,
        }
    }

    #[test]
    fn round_trips_and_digests_canonically() {
        let t = sample();
        let bytes = t.canonical_bytes();
        let back = Trajectory::from_json(&bytes).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.digest(), t.digest());
        assert!(is_digest(&t.digest()));
        // Pretty-printed with reordered keys: the same trajectory, the same digest.
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value.as_object_mut().unwrap().remove("interpreter");
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        assert_eq!(Trajectory::from_json(&pretty).unwrap().digest(), t.digest());
    }

    #[test]
    fn prefixes_follow_the_steps() {
        let t = sample();
        assert_eq!(t.length(), 2);
        assert_eq!(t.prefix(0).len(), 2);
        assert_eq!(t.prefix(1).len(), 4);
        assert_eq!(t.prefix(2).len(), 6);
    }

    #[test]
    fn bad_files_are_refused_with_the_field() {
        let good = serde_json::to_value(sample()).unwrap();
        let refuse = |edit: &dyn Fn(&mut serde_json::Value), expected: &str| {
            let mut v = good.clone();
            edit(&mut v);
            let err = Trajectory::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err().to_string();
            assert!(err.contains(expected), "{err:?} should mention {expected:?}");
        };
        refuse(&|v| v["format"] = "mini-swe-agent-1.1".into(), "mini-swe-agent-1.1");
        refuse(&|v| v.as_object_mut().unwrap().remove("format").map(|_| ()).unwrap(), "format");
        refuse(&|v| v["steps"] = serde_json::json!([]), "steps");
        refuse(&|v| v["steps"][1]["messages_end"] = 3.into(), "steps[1].messages_end");
        refuse(&|v| v["steps"][0]["actions"][0]["timeout_s"] = 0.into(), "steps[0].actions[0].timeout_s");
        refuse(&|v| v["task"]["workdir"] = "testbed".into(), "task.workdir");
        refuse(&|v| v["surprise"] = 1.into(), "surprise");
        assert!(Trajectory::from_json(b"{\"format\": ").unwrap_err().to_string().contains("not a vcurve trajectory"));
    }
}
