//! A session from a recorded trajectory ([`crate::trajectory::Trajectory`]) and where its turns end.
//!
//! The trajectory format records no turn boundaries, so the caller says where each turn ended:
//! turn `k` ends at step `ends[k - 1]` (1-based), the model call whose reply is the turn's report
//! and ran no command. A step's messages are those recorded since the previous step; the user
//! messages before its model reply open a turn (instruction `k`), the model reply gives the
//! narration (its `content`) and reasoning (`reasoning_content` or `reasoning`), and the step's
//! actions give the tool calls. Turn 1's instruction is the user messages before the first step.

use serde_json::Value;

use super::{AgentMessage, FORMAT, Report, Session, SessionError, SessionTask, ToolCall, Turn, field};
use crate::trajectory::Trajectory;

/// Convert `trajectory` into a session whose turn `k` ends at step `ends[k - 1]`.
pub fn from_trajectory(trajectory: &Trajectory, ends: &[u32]) -> Result<Session, SessionError> {
    let steps = trajectory.length();
    if ends.is_empty() {
        return Err(field("turn ends", "are empty: a session has at least one turn"));
    }
    for (i, &end) in ends.iter().enumerate() {
        let previous = if i == 0 { 0 } else { ends[i - 1] };
        if end <= previous || end > steps {
            return Err(field(
                format!("turn ends[{i}] (turn {})", i + 1),
                format!("= {end} must be a step after {previous} and at most the trajectory's {steps} steps"),
            ));
        }
    }
    if *ends.last().expect("not empty") != steps {
        return Err(field(
            "turn ends",
            format!("the last turn ends at step {} but the trajectory has {steps} steps", ends.last().unwrap()),
        ));
    }
    let messages = &trajectory.messages;
    let mut system = Vec::new();
    let mut instruction = Vec::new();
    for (m, message) in messages[..trajectory.initial_messages].iter().enumerate() {
        match role(message) {
            Some("system") => system.push(text(message, &format!("messages[{m}]"))?),
            Some("user") => instruction.push(text(message, &format!("messages[{m}]"))?),
            _ => {}
        }
    }
    let mut turns = Vec::new();
    let mut agent: Vec<AgentMessage> = Vec::new();
    let mut start = trajectory.initial_messages;
    for (s, step) in trajectory.steps.iter().enumerate() {
        let number = s as u32 + 1;
        let turn = turns.len() + 1;
        let at = format!("steps[{s}] (step {number}, turn {turn})");
        let range = &messages[start..step.messages_end];
        let Some(reply) = range.iter().position(|m| role(m) == Some("assistant")) else {
            return Err(field(at, format!("messages[{start}..{}] hold no assistant message", step.messages_end)));
        };
        for (m, message) in range[..reply].iter().enumerate() {
            if role(message) == Some("user") {
                if !agent.is_empty() {
                    return Err(field(
                        format!("{at}.messages[{}]", start + m),
                        "a user message inside a turn: turn ends must fall where instructions were given",
                    ));
                }
                instruction.push(text(message, &format!("messages[{}]", start + m))?);
            }
        }
        let message = &range[reply];
        let place = format!("messages[{}]", start + reply);
        let reasoning =
            ["reasoning_content", "reasoning"].iter().find_map(|k| message.get(*k)?.as_str()).map(str::to_string);
        let content = text(message, &place)?;
        start = step.messages_end;
        if ends.contains(&number) {
            if !step.actions.is_empty() {
                return Err(field(
                    at,
                    format!("ends turn {turn} but ran {} command(s): a turn's report runs none", step.actions.len()),
                ));
            }
            if instruction.is_empty() {
                return Err(field(at, format!("turn {turn} has no instruction: no user message opened it")));
            }
            turns.push(Turn {
                instruction: std::mem::take(&mut instruction).join("\n\n"),
                messages: std::mem::take(&mut agent),
                report: Report { reasoning, text: content },
            });
            continue;
        }
        let tool_calls = step
            .actions
            .iter()
            .map(|a| ToolCall { command: a.command.clone(), output: a.output.clone(), returncode: a.returncode })
            .collect();
        agent.push(AgentMessage { reasoning, text: content, tool_calls });
    }
    let session = Session {
        format: FORMAT.into(),
        task: SessionTask {
            id: trajectory.task.id.clone(),
            statement: trajectory.task.problem_statement.clone().unwrap_or_default(),
        },
        system: if system.is_empty() { None } else { Some(system.join("\n\n")) },
        turns,
    };
    session.validate()?;
    Ok(session)
}

fn role(message: &Value) -> Option<&str> {
    message.get("role")?.as_str()
}

/// A message's text: its `content` as a string, or the text parts of a content list.
fn text(message: &Value, at: &str) -> Result<String, SessionError> {
    match message.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            Ok(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"))
        }
        Some(_) => Err(field(format!("{at}.content"), "is neither a string nor a list of text parts")),
    }
}
