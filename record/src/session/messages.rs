//! The JSON format for sessions recorded elsewhere (docs/task-state.md, "The session-messages
//! format"): the task and a flat list of messages with roles, as chat harnesses log them.
//!
//! ```json
//! {"format": "vcurve.session-messages.v1",
//!  "task": {"id": "demo-1", "statement": "..."},
//!  "messages": [
//!    {"role": "system", "content": "..."},
//!    {"role": "user", "content": "Investigate; do not modify code"},
//!    {"role": "assistant", "content": "...", "reasoning": "...",
//!     "tool_calls": [{"id": "c1", "command": "grep -rn parse src"}]},
//!    {"role": "tool", "tool_call_id": "c1", "content": "...", "returncode": 0},
//!    {"role": "assistant", "content": "The report.", "turn_end": true}]}
//! ```
//!
//! A user message opens a turn (consecutive user messages at its start are its instruction); an
//! assistant message with `"turn_end": true` is the turn's report and closes it. Every error names
//! the message (`messages[i]`), the turn it falls in and the field.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{
    AgentMessage, FORMAT as SESSION_FORMAT, Report, Session, SessionError, SessionTask, ToolCall, Turn, field,
};

/// The format name of a session-messages file.
pub const FORMAT: &str = "vcurve.session-messages.v1";

struct OpenTurn {
    first_message: usize,
    instruction: Vec<String>,
    messages: Vec<AgentMessage>,
    /// Tool calls of the last assistant message still waiting for their output:
    /// (id, message index in `messages`, call index).
    pending: Vec<(String, usize, usize)>,
    ids: BTreeSet<String>,
}

/// Parse a session-messages file into a [`Session`].
pub fn parse(bytes: &[u8]) -> Result<Session, SessionError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| SessionError::Json(e.to_string()))?;
    from_value(&value)
}

/// Read a session-messages document already parsed as JSON.
pub fn from_value(value: &Value) -> Result<Session, SessionError> {
    let root = value.as_object().ok_or_else(|| field("(document)", "is not a JSON object"))?;
    match root.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(Value::String(f)) => return Err(SessionError::Format { found: f.clone(), expected: FORMAT }),
        Some(_) => return Err(field("format", "is not a string")),
        None => return Err(field("format", format!("is missing (expected {FORMAT:?})"))),
    }
    let task =
        root.get("task").and_then(Value::as_object).ok_or_else(|| field("task", "is missing or not an object"))?;
    let task = SessionTask {
        id: string(task, "id", "task.id")?.ok_or_else(|| field("task.id", "is missing"))?,
        statement: string(task, "statement", "task.statement")?.ok_or_else(|| field("task.statement", "is missing"))?,
    };
    if task.id.trim().is_empty() {
        return Err(field("task.id", "is empty"));
    }
    let messages = root
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| field("messages", "is missing or not an array"))?;

    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<Turn> = Vec::new();
    let mut open: Option<OpenTurn> = None;
    for (i, message) in messages.iter().enumerate() {
        let turn = match (&open, turns.len()) {
            (Some(_), done) => format!("turn {}", done + 1),
            (None, 0) => "before turn 1".to_string(),
            (None, done) => format!("after turn {done}"),
        };
        let place = |f: &str| {
            if f.is_empty() { format!("messages[{i}] ({turn})") } else { format!("messages[{i}] ({turn}).{f}") }
        };
        let m = message.as_object().ok_or_else(|| field(place(""), "is not a JSON object"))?;
        let role = string(m, "role", &place("role"))?.ok_or_else(|| field(place("role"), "is missing"))?;
        match role.as_str() {
            "system" => {
                if !turns.is_empty() || open.is_some() {
                    return Err(field(
                        place("role"),
                        "a system message after the first turn began; the system prompt comes first",
                    ));
                }
                system.push(string(m, "content", &place("content"))?.unwrap_or_default());
            }
            "user" => {
                let content = string(m, "content", &place("content"))?.unwrap_or_default();
                match &mut open {
                    None => {
                        open = Some(OpenTurn {
                            first_message: i,
                            instruction: vec![content],
                            messages: Vec::new(),
                            pending: Vec::new(),
                            ids: BTreeSet::new(),
                        })
                    }
                    Some(turn) if turn.messages.is_empty() => turn.instruction.push(content),
                    Some(_) => {
                        return Err(field(
                            place("role"),
                            "a user message after the agent began its turn: a turn's instruction comes first, \
                             tool outputs are \"tool\" messages, and the next instruction follows the turn's \
                             report (\"turn_end\": true)",
                        ));
                    }
                }
            }
            "assistant" => {
                let Some(turn) = &mut open else {
                    return Err(field(
                        place("role"),
                        "an assistant message outside a turn: a turn opens with a user message",
                    ));
                };
                if let Some((id, _, _)) = turn.pending.first() {
                    return Err(field(
                        place(""),
                        format!("the assistant speaks again before tool call {id:?} has its \"tool\" message"),
                    ));
                }
                let text = string(m, "content", &place("content"))?.unwrap_or_default();
                let reasoning = string(m, "reasoning", &place("reasoning"))?;
                let turn_end = match m.get("turn_end") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(field(place("turn_end"), "is not true or false")),
                };
                let calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => &[][..],
                    Some(Value::Array(calls)) => calls.as_slice(),
                    Some(_) => return Err(field(place("tool_calls"), "is not an array")),
                };
                if turn_end {
                    if !calls.is_empty() {
                        return Err(field(place("tool_calls"), "a turn's report (\"turn_end\": true) calls no tool"));
                    }
                    if text.trim().is_empty() {
                        return Err(field(place("content"), "is empty: a turn ends with a user-facing report"));
                    }
                    let turn = open.take().expect("a turn is open");
                    turns.push(Turn {
                        instruction: turn.instruction.join("\n\n"),
                        messages: turn.messages,
                        report: Report { reasoning, text },
                    });
                    continue;
                }
                let index = turn.messages.len();
                let mut tool_calls = Vec::with_capacity(calls.len());
                for (c, call) in calls.iter().enumerate() {
                    let at = place(&format!("tool_calls[{c}]"));
                    let call = call.as_object().ok_or_else(|| field(at.clone(), "is not a JSON object"))?;
                    let id = string(call, "id", &format!("{at}.id"))?
                        .ok_or_else(|| field(format!("{at}.id"), "is missing"))?;
                    let command = string(call, "command", &format!("{at}.command"))?
                        .ok_or_else(|| field(format!("{at}.command"), "is missing"))?;
                    if command.trim().is_empty() {
                        return Err(field(format!("{at}.command"), "is empty"));
                    }
                    if !turn.ids.insert(id.clone()) {
                        return Err(field(format!("{at}.id"), format!("{id:?} is used twice in this turn")));
                    }
                    turn.pending.push((id, index, c));
                    tool_calls.push(ToolCall { command, output: String::new(), returncode: None });
                }
                turn.messages.push(AgentMessage { reasoning, text, tool_calls });
            }
            "tool" => {
                let Some(turn) = &mut open else {
                    return Err(field(place("role"), "a tool message outside a turn"));
                };
                let id = string(m, "tool_call_id", &place("tool_call_id"))?
                    .ok_or_else(|| field(place("tool_call_id"), "is missing"))?;
                let Some(p) = turn.pending.iter().position(|(pending, _, _)| *pending == id) else {
                    let why = if turn.ids.contains(&id) {
                        "already has its output"
                    } else {
                        "names no tool call of this turn"
                    };
                    return Err(field(place("tool_call_id"), format!("{id:?} {why}")));
                };
                let (_, message, call) = turn.pending.remove(p);
                let output = string(m, "content", &place("content"))?.unwrap_or_default();
                let returncode = match m.get("returncode") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(
                        v.as_i64()
                            .and_then(|n| i32::try_from(n).ok())
                            .ok_or_else(|| field(place("returncode"), format!("{v} is not an integer return code")))?,
                    ),
                };
                let call = &mut turn.messages[message].tool_calls[call];
                call.output = output;
                call.returncode = returncode;
            }
            other => {
                return Err(field(
                    place("role"),
                    format!("{other:?} is not a role of this format (system, user, assistant, tool)"),
                ));
            }
        }
    }
    if let Some(turn) = open {
        let pending = match turn.pending.first() {
            Some((id, _, _)) => format!("; tool call {id:?} has no output"),
            None => String::new(),
        };
        return Err(field(
            format!("turn {} (from messages[{}])", turns.len() + 1, turn.first_message),
            format!("has no turn end: it needs an assistant message with \"turn_end\": true{pending}"),
        ));
    }
    let session = Session {
        format: SESSION_FORMAT.into(),
        task,
        system: if system.is_empty() { None } else { Some(system.join("\n\n")) },
        turns,
    };
    if session.turns.is_empty() {
        return Err(field("messages", "hold no turn: a turn is a user message, the agent's messages and a report"));
    }
    session.validate()?;
    Ok(session)
}

/// A string field: `None` when absent or null, an error naming the field when not a string.
fn string(object: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, SessionError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(field(at, format!("is not a string: {}", crate::json::kind(other)))),
    }
}
