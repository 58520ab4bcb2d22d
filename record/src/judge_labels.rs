//! Judge labels of a curve study (`judges:` in its spec; docs/spec.md, "Judge labels"): each judge
//! model reads a trajectory's recorded steps under the rubric of `labels.first_mistake.v1` and
//! names its first mistake, as one durable `model_call` job per trajectory and judge
//! ([`CallKey::Label`]); likewise each decoy's recorded run (`decoy`). The answer's 0-based index `i` is stored as the label `m = i + 1`, `-1`
//! as "no mistake"; a malformed or failed call gives no label.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use vcurve_method::task_state::usage::Purpose;

use crate::llm::answers::parse_first_mistake;
use crate::llm::{TemplateError, TemplateName};
use crate::task_state::{AnswerCheck, CallInput, CallKey, CallOutput, StageModel};
use crate::trajectory::Trajectory;

/// The call judge `judge` (on `model`) is asked about trajectory `trajectory` (the decoy of that
/// id when `decoy`), whose recorded run is `run`.
pub fn label_call(
    trajectory: &str,
    decoy: bool,
    judge: &str,
    model: &StageModel,
    run: &Trajectory,
) -> Result<CallInput, TemplateError> {
    let values = BTreeMap::from([
        ("task", task_statement(run)),
        ("step_count", run.steps.len().to_string()),
        ("steps", render_steps(run)),
    ]);
    let messages = TemplateName::FirstMistake.template().render(&values)?;
    Ok(CallInput {
        key: CallKey::Label { trajectory: trajectory.to_string(), judge: judge.to_string(), decoy },
        purpose: Purpose::Core,
        template: TemplateName::FirstMistake,
        messages: messages.iter().map(|m| json!({"role": m.role.key(), "content": m.content})).collect(),
        model: model.clone(),
        check: AnswerCheck::FirstMistake { steps: run.steps.len() as u32 },
    })
}

/// The label an answered label call gives: `Some(Some(m))` a first mistake at step `m` (1-based),
/// `Some(None)` "no mistake", `None` no label (not a label call, or a malformed or failed one).
pub fn label_of(input: &CallInput, output: &CallOutput) -> Option<Option<u32>> {
    let AnswerCheck::FirstMistake { steps } = input.check else { return None };
    let answer = output.answer.as_deref()?;
    parse_first_mistake(answer, steps).ok().map(|label| label.step)
}

/// The task as the judge reads it: the task's problem statement, else the last message before
/// the first step that is the user's (the task as the agent was given it), else the task's id.
pub fn task_statement(run: &Trajectory) -> String {
    if let Some(statement) = run.task.problem_statement.as_deref().filter(|s| !s.trim().is_empty()) {
        return statement.to_string();
    }
    run.messages[..run.initial_messages.min(run.messages.len())]
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(message_text)
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| run.task.id.clone())
}

/// The steps as the template's `{{steps}}`: step `i` (from 0) opened by a line `### Step i`, then
/// the agent's messages of the step and each command it ran with its exit code and output.
pub fn render_steps(run: &Trajectory) -> String {
    let mut blocks = Vec::with_capacity(run.steps.len());
    let mut start = run.initial_messages;
    for (i, step) in run.steps.iter().enumerate() {
        let mut block = format!("### Step {i}\n");
        let end = step.messages_end.min(run.messages.len());
        for message in run.messages.get(start.min(end)..end).unwrap_or_default() {
            if message.get("role").and_then(Value::as_str) == Some("assistant") {
                let text = message_text(message);
                if !text.trim().is_empty() {
                    block.push_str(text.trim_end());
                    block.push('\n');
                }
            }
        }
        for action in &step.actions {
            let status = match (action.returncode, action.timed_out) {
                (_, true) => "timed out".to_string(),
                (Some(code), false) => format!("exit {code}"),
                (None, false) => "did not finish".to_string(),
            };
            block.push_str(&format!("$ {}\n[{status}]\n{}", action.command, action.output));
            if !action.output.ends_with('\n') {
                block.push('\n');
            }
        }
        start = step.messages_end;
        blocks.push(block);
    }
    blocks.join("\n")
}

/// A chat message's text: its `content` string, or the text parts of a content list, and the
/// arguments of its tool calls.
fn message_text(message: &Value) -> String {
    let mut text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    };
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                text.push('\n');
                text.push_str(args);
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{CallStatus, ModelCall, SamplingSent};
    use crate::task_state::{ModelRef, StageSampling};
    use crate::trajectory::{Action, EndType, Evaluator, FORMAT, Interpreter, Step, Task};

    fn run(mistake: Option<usize>) -> Trajectory {
        let mut messages =
            vec![json!({"role": "system", "content": "agent"}), json!({"role": "user", "content": "Fix parse."})];
        let mut steps = Vec::new();
        for i in 0..3 {
            let marker = if Some(i) == mistake { " [[MISTAKE]]" } else { "" };
            messages.push(json!({"role": "assistant", "content": format!("thinking {i}{marker}")}));
            messages.push(json!({"role": "user", "content": format!("{i}\n")}));
            steps.push(Step {
                actions: vec![Action {
                    command: format!("echo {i}"),
                    timeout_s: 60.0,
                    output: format!("{i}\n"),
                    returncode: Some(0),
                    timed_out: false,
                    exception: None,
                    omitted: None,
                }],
                messages_end: messages.len(),
                fingerprint: None,
            });
        }
        Trajectory {
            format: FORMAT.into(),
            task: Task {
                id: "calc".into(),
                image: "img".into(),
                workdir: "/testbed".into(),
                evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
                problem_statement: None,
            },
            interpreter: Interpreter::default(),
            messages,
            initial_messages: 2,
            steps,
            end_type: EndType::Submitted,
            submission: None,
            policy: None,
        }
    }

    fn model() -> StageModel {
        StageModel {
            endpoint: ModelRef {
                base_url: "http://127.0.0.1:9/v1".into(),
                model: "judge".into(),
                api_key_env: None,
                concurrency: 1,
                request_timeout_s: 60,
                thinking_kwargs: true,
            },
            sampling: StageSampling { temperature: Some(0.0), ..Default::default() },
        }
    }

    #[test]
    fn a_label_call_shows_every_step_from_0_with_its_message_and_commands() {
        let input = label_call("calc-run", false, "o3", &model(), &run(Some(1))).unwrap();
        assert_eq!(input.key.as_subject(), "label:calc-run/o3");
        let decoy = label_call("calc-run", true, "o3", &model(), &run(Some(1))).unwrap();
        assert_eq!(decoy.key.as_subject(), "label-decoy:calc-run/o3");
        assert_eq!(decoy.messages, input.messages, "a decoy's call reads its steps as a trajectory's");
        assert_eq!(input.check, AnswerCheck::FirstMistake { steps: 3 });
        let user = input.messages[1]["content"].as_str().unwrap();
        assert!(user.contains("<task>\nFix parse.\n</task>"), "{user}");
        assert!(user.contains("<trajectory steps=\"3\">\n### Step 0\nthinking 0\n$ echo 0\n[exit 0]\n0\n\n### Step 1\nthinking 1 [[MISTAKE]]\n"), "{user}");
        assert!(user.contains("### Step 2\n"));
    }

    #[test]
    fn an_answer_is_a_label_m_equal_to_i_plus_1_none_for_minus_1_and_nothing_when_malformed() {
        let input = label_call("r", false, "o3", &model(), &run(None)).unwrap();
        let out = |answer: Option<&str>| CallOutput {
            answer: answer.map(str::to_string),
            log: ModelCall {
                call: "label:r/o3".into(),
                stage: input.key.stage(),
                purpose: Purpose::Core,
                model: "judge".into(),
                endpoint: "http://127.0.0.1:9/v1".into(),
                template: "labels.first_mistake.v1".into(),
                template_hash: String::new(),
                sampling: SamplingSent::default(),
                attempts: Vec::new(),
                retries: 0,
                tokens: None,
                latency_ms: 1,
                status: CallStatus::Ok,
            },
        };
        assert_eq!(label_of(&input, &out(Some(r#"{"first_mistake": 1}"#))), Some(Some(2)));
        assert_eq!(label_of(&input, &out(Some(r#"{"first_mistake": -1}"#))), Some(None));
        assert_eq!(label_of(&input, &out(Some(r#"{"first_mistake": 3}"#))), None);
        assert_eq!(label_of(&input, &out(None)), None);
    }
}
