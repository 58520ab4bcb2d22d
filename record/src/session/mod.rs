//! A recorded multi-turn session of an agent on a task, and the views a reader is given of it (the
//! task-state study, docs/task-state.md).
//!
//! A [`Session`] is a task plus ordered [`Turn`]s: turn `k` is instruction `k` (a user message),
//! the agent's messages with their tool calls and outputs, its reasoning where recorded (kept
//! apart, so that the full context without reasoning can drop it), and the turn's user-facing
//! report. Checkpoint `k` is the end of turn `k`.
//!
//! - [`Session`] is vcurve's own form ([`FORMAT`]), serde, validated by [`Session::validate`].
//! - [`messages`]: the documented JSON format for sessions recorded elsewhere: a flat list of
//!   messages with roles, tool calls and outputs, and turn ends ([`messages::FORMAT`]).
//! - [`trajectory::from_trajectory`]: a session from a recorded vcurve trajectory and the steps
//!   where its turns end.
//! - [`views`]: the views of a checkpoint, rendered deterministically ([`views::render`]), each
//!   with its digest, characters and tokens, under [`views::VIEWS_VERSION`].

use serde::{Deserialize, Serialize};

pub mod messages;
pub mod trajectory;
pub mod views;

#[cfg(test)]
mod tests;

/// The format name every session file carries.
pub const FORMAT: &str = "vcurve.session.v1";

/// The task a session works on, as its reader is told it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionTask {
    /// The task's (issue's) id: the study's cluster.
    pub id: String,
    /// The issue text the agent was given.
    pub statement: String,
}

/// A recorded multi-turn session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// Always [`FORMAT`].
    pub format: String,
    pub task: SessionTask,
    /// The system prompt the agent's model was given, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Turn `k` is `turns[k - 1]`.
    pub turns: Vec<Turn>,
}

/// One turn: the instruction, the agent's work, and the report that ends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// The user message that opened the turn.
    pub instruction: String,
    /// The agent's messages before its report, in order.
    #[serde(default)]
    pub messages: Vec<AgentMessage>,
    /// The turn's final user-facing report.
    pub report: Report,
}

/// One message of the agent within a turn: its narration, the tool calls it asked for with
/// their outputs, and its reasoning where the recording kept it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMessage {
    /// The model's reasoning (thinking) before the message, kept apart from its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The user-visible text of the message (narration around tool calls); may be empty.
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
}

/// A tool call and what it returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The command as the agent asked for it (a shell command, or a tool's name and arguments).
    pub command: String,
    /// What the call returned (stdout and stderr merged, as recorded).
    pub output: String,
    /// `None` when the call has no return code (it timed out, or the tool gives none).
    #[serde(default)]
    pub returncode: Option<i32>,
}

/// The report that ends a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The reasoning before the report, when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub text: String,
}

/// Why a session, a session-messages file or a view request is refused; every message names what
/// is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("not a session: {0}")]
    Json(String),
    #[error("format is {found:?}; this version reads {expected:?}")]
    Format { found: String, expected: &'static str },
    #[error("{at}: {message}")]
    Field { at: String, message: String },
    #[error("checkpoint {checkpoint}: {message}")]
    Checkpoint { checkpoint: u32, message: String },
}

pub(crate) fn field(at: impl Into<String>, message: impl Into<String>) -> SessionError {
    SessionError::Field { at: at.into(), message: message.into() }
}

impl Session {
    /// Parse and validate a session file in vcurve's own format ([`FORMAT`]).
    pub fn from_json(bytes: &[u8]) -> Result<Session, SessionError> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| SessionError::Json(e.to_string()))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => return Err(SessionError::Format { found: other.into(), expected: FORMAT }),
            None => return Err(field("format", format!("is missing (expected {FORMAT:?})"))),
        }
        let session: Session = serde_json::from_value(value).map_err(|e| SessionError::Json(e.to_string()))?;
        session.validate()?;
        Ok(session)
    }

    /// Refuses what no view can be rendered from, naming the field: an empty task id, no turns, an
    /// empty instruction or report, an empty command.
    pub fn validate(&self) -> Result<(), SessionError> {
        if self.format != FORMAT {
            return Err(SessionError::Format { found: self.format.clone(), expected: FORMAT });
        }
        if self.task.id.trim().is_empty() {
            return Err(field("task.id", "is empty"));
        }
        if self.turns.is_empty() {
            return Err(field("turns", "is empty: a session has at least one turn"));
        }
        for (i, turn) in self.turns.iter().enumerate() {
            let at = |f: &str| format!("turns[{i}] (turn {}).{f}", i + 1);
            if turn.instruction.trim().is_empty() {
                return Err(field(at("instruction"), "is empty"));
            }
            if turn.report.text.trim().is_empty() {
                return Err(field(at("report.text"), "is empty: a turn ends with a user-facing report"));
            }
            for (j, message) in turn.messages.iter().enumerate() {
                for (c, call) in message.tool_calls.iter().enumerate() {
                    if call.command.trim().is_empty() {
                        return Err(field(at(&format!("messages[{j}].tool_calls[{c}].command")), "is empty"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The number of checkpoints: one per turn.
    pub fn checkpoints(&self) -> u32 {
        self.turns.len() as u32
    }

    /// The canonical encoding: compact JSON, fields in declaration order.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a session always serializes")
    }

    /// The SHA-256 of [`Session::canonical_bytes`].
    pub fn digest(&self) -> String {
        crate::trajectory::sha256_hex(&self.canonical_bytes())
    }
}
