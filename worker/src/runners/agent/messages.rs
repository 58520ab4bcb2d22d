//! The messages of `vcurve.agent.v1` (docs/agent-protocol.md): building the worker's, parsing and
//! checking the agent's.

use serde_json::{Value, json};
use vcurve_record::EndType;
use vcurve_record::json::kind as json_kind;

use super::lines::first_bytes;
use super::start::AgentStart;
use crate::sandbox::exec::Observed;

/// The protocol name the `start` message carries.
pub const PROTOCOL: &str = "vcurve.agent.v1";

/// The end types `final.end_type` may name.
const END_TYPES: [EndType; 6] = [
    EndType::Submitted,
    EndType::StepCap,
    EndType::CostLimit,
    EndType::ContextWindow,
    EndType::FormatError,
    EndType::Error,
];

/// A message from the agent, its fields checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AgentMessage {
    Exec {
        command: String,
        timeout_s: f64,
    },
    Step {
        messages: Vec<Value>,
    },
    Final {
        end_type: EndType,
        submission: String,
        messages: Vec<Value>,
    },
    /// The end of a session's turn: its user-facing report and the agent's whole message list at
    /// the checkpoint.
    TurnEnd {
        report: String,
        messages: Vec<Value>,
    },
}

/// The `start` message; `container` is the id of the container the run's commands run in. A
/// session's carries `"turns": true` (a single run's has no such field, so its bytes are those
/// of the single-run protocol).
pub(crate) fn start_message(start: &AgentStart, container: &str, turns: bool) -> Value {
    let mut message = json!({
        "type": "start",
        "protocol": PROTOCOL,
        "task": {
            "id": start.task.id,
            "workdir": start.task.workdir,
            "problem_statement": start.task.problem_statement,
        },
        "messages": start.messages,
        "t": start.t,
        "budget": start.budget,
        "seed": start.seed,
        "model": start.model,
        "container": container,
    });
    if turns {
        message["turns"] = Value::Bool(true);
    }
    message
}

/// The `instruction` message opening turn `turn` (1-based) of a session.
pub(crate) fn instruction_message(turn: usize, content: &str, budget: u32) -> Value {
    json!({"type": "instruction", "turn": turn, "content": content, "budget": budget})
}

/// The `end` message: the session has no further instruction.
pub(crate) fn end_message() -> Value {
    json!({"type": "end"})
}

/// The `exec_result` message answering one `exec`.
pub(crate) fn exec_result_message(observed: &Observed) -> Value {
    json!({
        "type": "exec_result",
        "output": observed.output,
        "returncode": observed.returncode,
        "timed_out": observed.timed_out,
        "exception": null,
    })
}

/// A short, printable excerpt of a line for error messages.
pub(crate) fn excerpt(line: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&line[..line.len().min(MAX + 4)]);
    let cut = first_bytes(&text, MAX);
    if cut.len() < text.len() || line.len() > MAX + 4 {
        format!("{cut:?}… ({} bytes)", line.len())
    } else {
        format!("{cut:?}")
    }
}

/// Parse one line of the agent's stdout. The error says what is wrong with it; fields the
/// protocol does not define are ignored.
pub(crate) fn parse_message(line: &[u8]) -> Result<AgentMessage, String> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| format!("the line is not JSON ({e}): {}", excerpt(line)))?;
    let Value::Object(object) = value else {
        return Err(format!("the line is not a JSON object: {}", excerpt(line)));
    };
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(format!("\"type\" must be a string, got {}", json_kind(other))),
        None => return Err(format!("the message has no \"type\": {}", excerpt(line))),
    };
    match kind {
        "exec" => {
            let command = match object.get("command") {
                Some(Value::String(c)) => c.clone(),
                other => return Err(format!("exec.command must be a string, got {}", kind_of_opt(other))),
            };
            let timeout_s = match object.get("timeout_s").and_then(Value::as_f64) {
                Some(t) if t.is_finite() && t > 0.0 => t,
                _ => {
                    return Err(format!(
                        "exec.timeout_s must be a positive number of seconds, got {}",
                        shown_opt(object.get("timeout_s"))
                    ));
                }
            };
            Ok(AgentMessage::Exec { command, timeout_s })
        }
        "step" => {
            let messages = message_list(object.get("messages"), "step.messages")?;
            if messages.is_empty() {
                return Err("step.messages is empty: a step carries at least the model's reply".into());
            }
            Ok(AgentMessage::Step { messages })
        }
        "final" => {
            let end_type = match object.get("end_type") {
                Some(Value::String(s)) => END_TYPES.into_iter().find(|e| e.as_str() == s).ok_or_else(|| {
                    format!("final.end_type {s:?} is not one of {}", END_TYPES.map(EndType::as_str).join(", "))
                })?,
                other => return Err(format!("final.end_type must be a string, got {}", kind_of_opt(other))),
            };
            let submission = match object.get("submission") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) => String::new(),
                other => return Err(format!("final.submission must be a string or null, got {}", kind_of_opt(other))),
            };
            let messages = message_list(object.get("messages"), "final.messages")?;
            Ok(AgentMessage::Final { end_type, submission, messages })
        }
        "turn_end" => {
            let report = match object.get("report") {
                Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
                Some(Value::String(_)) => {
                    return Err("turn_end.report is empty: a turn ends with a user-facing report".into());
                }
                other => return Err(format!("turn_end.report must be a string, got {}", kind_of_opt(other))),
            };
            let messages = message_list(object.get("messages"), "turn_end.messages")?;
            Ok(AgentMessage::TurnEnd { report, messages })
        }
        "start" | "exec_result" | "instruction" | "end" => {
            Err(format!("{kind:?} is a message from the worker to the agent, not the reverse"))
        }
        other => Err(format!(
            "unknown message type {:?} (the agent sends exec, step, turn_end and final)",
            first_bytes(other, 100)
        )),
    }
}

fn message_list(value: Option<&Value>, what: &str) -> Result<Vec<Value>, String> {
    match value {
        Some(Value::Array(items)) => {
            if let Some(i) = items.iter().position(|m| !m.is_object()) {
                return Err(format!("{what}[{i}] must be a JSON object, got {}", json_kind(&items[i])));
            }
            Ok(items.clone())
        }
        other => Err(format!("{what} must be an array of JSON objects, got {}", kind_of_opt(other))),
    }
}

fn kind_of_opt(value: Option<&Value>) -> &'static str {
    value.map_or("nothing (the field is missing)", json_kind)
}

fn shown_opt(value: Option<&Value>) -> String {
    match value {
        None => "nothing (the field is missing)".into(),
        Some(v) => first_bytes(&v.to_string(), 100).to_string(),
    }
}

/// Check `final.messages` against the prefix handed to the agent and the messages its steps
/// carried, and return where the first step's messages begin (the run's initial messages).
///
/// `final.messages` must be `prefix ++ own ++ step_1 ++ … ++ step_n ++ trailing`, compared as
/// JSON values, where
/// - `own` (the agent's own system prompt and task message) may be non-empty only when the prefix
///   is empty; it ends where the step messages first occur in order;
/// - `trailing` (messages after the last step, e.g. a scaffold's exit notice) belong to no step.
///
/// With no steps, everything after the prefix counts as the agent's own when the prefix is empty
/// and as trailing otherwise.
pub(crate) fn locate_steps(prefix: &[Value], steps: &[Vec<Value>], messages: &[Value]) -> Result<usize, String> {
    locate(prefix, steps, messages, prefix.is_empty(), "final")
}

/// [`locate_steps`] for a session: `prefix` is the message list at the previous checkpoint (or
/// the start's prefix), and the agent's own messages (the instruction as it phrased it) may follow
/// it before the turn's steps. `what` names the message checked (`turn_end`, `final`).
pub(crate) fn locate_turn(
    prefix: &[Value],
    steps: &[Vec<Value>],
    messages: &[Value],
    what: &str,
) -> Result<usize, String> {
    locate(prefix, steps, messages, true, what)
}

fn locate(
    prefix: &[Value],
    steps: &[Vec<Value>],
    messages: &[Value],
    own_allowed: bool,
    what: &str,
) -> Result<usize, String> {
    if messages.len() < prefix.len() {
        return Err(format!(
            "{what}.messages has {} messages, fewer than the {} of the prefix the agent was handed",
            messages.len(),
            prefix.len()
        ));
    }
    if let Some(i) = prefix.iter().zip(messages).position(|(a, b)| a != b) {
        return Err(format!(
            "{what}.messages does not extend the prefix the agent was handed: message {i} differs ({} in the prefix, {} in {what})",
            excerpt_value(&prefix[i]),
            excerpt_value(&messages[i]),
        ));
    }
    let carried: Vec<&Value> = steps.iter().flatten().collect();
    if carried.is_empty() {
        return Ok(if prefix.is_empty() { messages.len() } else { prefix.len() });
    }
    let matches_at =
        |k: usize| messages.len() >= k + carried.len() && carried.iter().zip(&messages[k..]).all(|(a, b)| *a == b);
    if !own_allowed {
        if matches_at(prefix.len()) {
            return Ok(prefix.len());
        }
        // Name the first message that differs.
        let mut at = prefix.len();
        for (s, step) in steps.iter().enumerate() {
            for (j, m) in step.iter().enumerate() {
                match messages.get(at) {
                    None => {
                        return Err(format!(
                            "{what}.messages ends after {} messages, before message {j} of step {} ({} steps carry {} messages after the {}-message prefix)",
                            messages.len(),
                            s + 1,
                            steps.len(),
                            carried.len(),
                            prefix.len()
                        ));
                    }
                    Some(found) if found != m => {
                        return Err(format!(
                            "{what}.messages[{at}] is not message {j} of step {}: {} in the step, {} in {what}",
                            s + 1,
                            excerpt_value(m),
                            excerpt_value(found),
                        ));
                    }
                    Some(_) => at += 1,
                }
            }
        }
        return Err(format!("{what}.messages does not carry the steps' messages right after the prefix"));
    }
    (prefix.len()..=messages.len().saturating_sub(carried.len())).find(|&k| matches_at(k)).ok_or_else(|| {
        format!(
            "{what}.messages ({} messages) does not carry the {} messages of the {} steps, in order, after the agent's initial messages",
            messages.len(),
            carried.len(),
            steps.len()
        )
    })
}

fn excerpt_value(value: &Value) -> String {
    excerpt(value.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Value {
        json!({"role": "user", "content": s})
    }

    #[test]
    fn parses_the_agents_messages() {
        assert_eq!(
            parse_message(br#"{"type":"exec","command":"ls","timeout_s":5,"extra":1}"#),
            Ok(AgentMessage::Exec { command: "ls".into(), timeout_s: 5.0 })
        );
        assert_eq!(
            parse_message(br#"{"type":"final","end_type":"step_cap","submission":null,"messages":[]}"#),
            Ok(AgentMessage::Final { end_type: EndType::StepCap, submission: String::new(), messages: vec![] })
        );
        let refused = |line: &str, expected: &str| {
            let err = parse_message(line.as_bytes()).unwrap_err();
            assert!(err.contains(expected), "{err:?} should mention {expected:?}");
        };
        refused("not json", "not JSON");
        refused("[1]", "not a JSON object");
        refused(r#"{"command":"ls"}"#, "no \"type\"");
        refused(r#"{"type":3}"#, "\"type\" must be a string");
        refused(r#"{"type":"hello"}"#, "unknown message type \"hello\"");
        refused(r#"{"type":"start"}"#, "from the worker to the agent");
        refused(r#"{"type":"exec","command":["ls"],"timeout_s":1}"#, "exec.command must be a string, got an array");
        refused(r#"{"type":"exec","command":"ls"}"#, "exec.timeout_s must be a positive number");
        refused(r#"{"type":"exec","command":"ls","timeout_s":0}"#, "got 0");
        refused(r#"{"type":"exec","command":"ls","timeout_s":"5"}"#, "exec.timeout_s");
        refused(r#"{"type":"step","messages":[]}"#, "step.messages is empty");
        refused(r#"{"type":"step","messages":[{}, "x"]}"#, "step.messages[1] must be a JSON object");
        refused(r#"{"type":"step"}"#, "step.messages must be an array");
        refused(r#"{"type":"final","end_type":"done","submission":"","messages":[]}"#, "final.end_type \"done\"");
        refused(r#"{"type":"final","end_type":"error","submission":1,"messages":[]}"#, "final.submission");
        refused(r#"{"type":"final","end_type":"error","submission":""}"#, "final.messages must be an array");
    }

    #[test]
    fn final_messages_must_extend_the_prefix_and_the_steps() {
        let (s, u, a, b, c, x) = (m("sys"), m("task"), m("a"), m("b"), m("c"), m("exit"));
        let steps = vec![vec![a.clone(), b.clone()], vec![c.clone()]];
        // A continuation: the steps right after the prefix, trailing messages allowed.
        let prefix = vec![s.clone(), u.clone()];
        let full = vec![s.clone(), u.clone(), a.clone(), b.clone(), c.clone()];
        assert_eq!(locate_steps(&prefix, &steps, &full), Ok(2));
        let with_exit = [full.clone(), vec![x.clone()]].concat();
        assert_eq!(locate_steps(&prefix, &steps, &with_exit), Ok(2));
        // Nothing may come between a non-empty prefix and the first step.
        let err = locate_steps(&prefix, &steps, &[s.clone(), u.clone(), x.clone(), a.clone(), b.clone(), c.clone()])
            .unwrap_err();
        assert!(err.contains("final.messages[2] is not message 0 of step 1"), "{err}");
        let err = locate_steps(&prefix, &steps, &[s.clone(), x.clone(), a.clone()]).unwrap_err();
        assert!(err.contains("does not extend the prefix") && err.contains("message 1 differs"), "{err}");
        let err = locate_steps(&prefix, &steps, std::slice::from_ref(&s)).unwrap_err();
        assert!(err.contains("fewer than the 2"), "{err}");
        let err = locate_steps(&prefix, &steps, &[s.clone(), u.clone(), a.clone()]).unwrap_err();
        assert!(err.contains("ends after 3 messages, before message 1 of step 1"), "{err}");
        // A fresh base run builds its own initial messages.
        assert_eq!(locate_steps(&[], &steps, &full), Ok(2));
        assert_eq!(locate_steps(&[], &steps, &with_exit), Ok(2));
        let err = locate_steps(&[], &steps, &[s.clone(), a.clone(), c.clone(), b.clone()]).unwrap_err();
        assert!(err.contains("does not carry the 3 messages of the 2 steps"), "{err}");
        // No steps.
        assert_eq!(locate_steps(&[], &[], &full), Ok(5));
        assert_eq!(locate_steps(&prefix, &[], &full), Ok(2));
    }
}
