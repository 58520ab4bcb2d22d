//! A session run ([`super::SessionRun`]) as a recorded `vcurve.session.v1` session
//! ([`vcurve_record::session::Session`]): turn `k` is instruction `k`, one agent message per step
//! (the step's first assistant message's text and reasoning, its commands with their outputs as
//! tool calls) and the turn's `turn_end.report`.

use serde_json::Value;
use vcurve_record::Task;
use vcurve_record::session::{AgentMessage, FORMAT, Report, Session, SessionError, SessionTask, ToolCall, Turn};

use super::SessionRun;

impl SessionRun {
    /// The completed turns as a session of `task` (the unfinished turn of a session that ended
    /// early has no checkpoint and is left out). Refused, naming the field, when the session would
    /// not validate: no completed turn, or a command that is empty.
    pub fn to_session(&self, task: &Task) -> Result<Session, SessionError> {
        let run = &self.run;
        let messages = &run.messages;
        let system: Vec<String> = messages[..run.initial_messages.min(messages.len())]
            .iter()
            .filter(|m| role(m) == Some("system"))
            .map(text)
            .collect();
        let mut turns = Vec::with_capacity(self.turns.len());
        for turn in &self.turns {
            let mut agent = Vec::with_capacity(turn.steps);
            let mut begin = turn.first_message;
            for step in &run.steps[turn.first_step..turn.first_step + turn.steps] {
                let end = step.messages_end.min(messages.len());
                let range = &messages[begin.min(end)..end];
                let reply = range.iter().find(|m| role(m) == Some("assistant"));
                agent.push(AgentMessage {
                    reasoning: reply.and_then(reasoning),
                    text: reply.map(text).unwrap_or_default(),
                    tool_calls: step
                        .actions
                        .iter()
                        .map(|a| ToolCall {
                            command: a.command.clone(),
                            output: a.output.clone(),
                            returncode: a.returncode,
                        })
                        .collect(),
                });
                begin = end;
            }
            turns.push(Turn {
                instruction: turn.instruction.clone(),
                messages: agent,
                report: Report { reasoning: None, text: turn.report.clone() },
            });
        }
        let session = Session {
            format: FORMAT.into(),
            task: SessionTask { id: task.id.clone(), statement: task.problem_statement.clone().unwrap_or_default() },
            system: if system.is_empty() { None } else { Some(system.join("\n\n")) },
            turns,
        };
        session.validate()?;
        Ok(session)
    }

    /// The agent's message history at checkpoint `k` (1-based), as it held it at its `turn_end`.
    pub fn history_at(&self, k: u32) -> Option<&[Value]> {
        let turn = self.turns.get((k as usize).checked_sub(1)?)?;
        self.run.messages.get(..turn.messages_end)
    }
}

fn role(message: &Value) -> Option<&str> {
    message.get("role")?.as_str()
}

/// A message's text: its `content` string, or the text parts of a content list.
fn text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    }
}

fn reasoning(message: &Value) -> Option<String> {
    ["reasoning_content", "reasoning"].iter().find_map(|k| message.get(*k)?.as_str()).map(str::to_string)
}
