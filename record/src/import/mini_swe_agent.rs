//! mini-swe-agent's `.traj.json` files, both formats, into a [`Trajectory`].
//!
//! - `mini-swe-agent-1.1` (mini-swe-agent 2.x, tool calls): an `assistant` message per model call
//!   with its commands in `extra.actions`; one `tool` message per executed action with
//!   `extra.raw_output`, `extra.returncode` and `extra.exception_info`; a reply the scaffold could
//!   not parse leaves no assistant message, only a `user` message with
//!   `extra.interrupt_type = "FormatError"`; the run ends with an `exit` message carrying
//!   `exit_status` and `submission`.
//! - `mini-swe-agent-1` (mini-swe-agent 1.x, text): one fenced ```` ```bash ```` block per
//!   assistant message; the observation is the next `user` message (`<returncode>…</returncode>`
//!   and `<output>…</output>`, a timeout notice, or a format error when the reply had not exactly one
//!   block); the run ends with a `user` message holding the submission or the limit's message.
//!
//! One step per model call: a format error is a step without actions, parallel tool calls are
//! several actions of one step. A step's message prefix ends after its last observation; the
//! closing `exit` (or terminating `user`) message belongs to no step. mini-swe-agent records no
//! observation for the action that submits (its environment raises before formatting one): its
//! output is reconstructed as the marker line followed by the submission, and the import says so
//! in its warnings.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::error::{ImportError, invalid};
use super::imported::Imported;
pub use super::messages::SUBMIT_MARKER;
use super::messages::text_of;
use super::observations::{first_edit, first_symptom};
use super::swebench_report::SwebenchReport;
use crate::policy::RecordedPolicy;
pub use crate::policy::{FORMAT_V1, FORMAT_V1_1};
use crate::trajectory::{Action, EndType, Evaluator, FORMAT, Interpreter, Step, Task, Trajectory};

/// mini-swe-agent's default command timeout, when the recorded configuration names none.
const DEFAULT_TIMEOUT_S: f64 = 30.0;

/// What an import may be told beside the file.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// The task image; `{instance_id}` is replaced by the instance id. Default: the SWE-bench
    /// harness's naming rule ([`swebench_image`]).
    pub image: Option<String>,
    /// A SWE-bench report the outcomes are taken from.
    pub report: Option<SwebenchReport>,
}

/// The SWE-bench harness's image for an instance:
/// `swebench/sweb.eval.x86_64.<id with "__" → "_1776_", lowercased>:latest`.
pub fn swebench_image(instance_id: &str) -> String {
    format!("swebench/sweb.eval.x86_64.{}:latest", instance_id.replace("__", "_1776_").to_lowercase())
}

/// Import one mini-swe-agent file. `source_name` (the file's name) stands in for the instance id
/// when the file names none.
pub fn import_mini_swe_agent(
    source_name: &str,
    bytes: &[u8],
    options: &ImportOptions,
) -> Result<Imported, ImportError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ImportError::Json(e.to_string()))?;
    let top = value.as_object().ok_or_else(|| invalid("the top level is not a JSON object"))?;
    let format = match top.get("trajectory_format") {
        None => {
            return Err(invalid(format!("`trajectory_format` is missing (expected {FORMAT_V1_1:?} or {FORMAT_V1:?})")));
        }
        Some(Value::String(s)) if s == FORMAT_V1 || s == FORMAT_V1_1 => s.clone(),
        Some(Value::String(s)) => return Err(ImportError::UnknownFormat { found: s.clone() }),
        Some(other) => return Err(invalid(format!("`trajectory_format` is {other}, not a string"))),
    };
    let messages = match top.get("messages") {
        None => return Err(invalid("`messages` is missing")),
        Some(Value::Array(m)) => m.clone(),
        Some(_) => return Err(invalid("`messages` is not a list")),
    };
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(Value::as_str).is_none() {
            return Err(invalid(format!("messages[{i}] has no role")));
        }
    }
    let null = Value::Null;
    let info = top.get("info").unwrap_or(&null);
    let mut warnings = Vec::new();

    let exit_message = messages.last().filter(|m| role(m) == "exit");
    let exit_status = info
        .get("exit_status")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| exit_message.and_then(|m| m.pointer("/extra/exit_status")).and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    if exit_status.is_empty() {
        return Err(invalid("the run had not ended when the file was saved (no exit status)"));
    }
    let submission = info
        .get("submission")
        .and_then(Value::as_str)
        .or_else(|| exit_message.and_then(|m| m.pointer("/extra/submission")).and_then(Value::as_str))
        .unwrap_or("")
        .to_string();

    let instance_id = match top.get("instance_id").and_then(Value::as_str).filter(|s| !s.trim().is_empty()) {
        Some(id) => id.to_string(),
        None => {
            let base = source_name.rsplit('/').next().unwrap_or(source_name);
            let id = base.trim_end_matches(".json").trim_end_matches(".traj").to_string();
            if id.is_empty() {
                return Err(invalid("`instance_id` is missing"));
            }
            warnings.push(format!("no instance_id in the file: using {id:?} from its name"));
            id
        }
    };

    if messages.len() < 2 || role(&messages[0]) != "system" || role(&messages[1]) != "user" {
        return Err(invalid("the messages do not begin with the system prompt and the task"));
    }
    let environment = info.pointer("/config/environment").unwrap_or(&null);
    let timeout_s = match environment.get("timeout").and_then(Value::as_f64) {
        Some(t) if t.is_finite() && t > 0.0 => t,
        _ => {
            warnings.push(format!(
                "no command timeout in info.config.environment: using mini-swe-agent's default {DEFAULT_TIMEOUT_S} s"
            ));
            DEFAULT_TIMEOUT_S
        }
    };
    let interpreter = interpreter(environment, info, &mut warnings);

    let mut parsed = Parsed { initial: 2, steps: Vec::new(), warnings };
    let context = Context { timeout_s, exit_status: &exit_status, submission: &submission };
    if format == FORMAT_V1_1 {
        parse_v1_1(&messages, &context, &mut parsed)?;
    } else {
        parse_v1(&messages, &context, &mut parsed)?;
    }
    let Parsed { initial, steps, mut warnings } = parsed;
    if steps.is_empty() {
        return Err(invalid("the run has no step (no model call was recorded)"));
    }
    if let Some(calls) = info.pointer("/model_stats/api_calls").and_then(Value::as_u64)
        && calls != steps.len() as u64
    {
        warnings.push(format!(
            "info.model_stats.api_calls = {calls} but {} model calls left messages (a call that failed leaves none)",
            steps.len()
        ));
    }

    let end_type = end_type(&exit_status, steps.len(), info, &mut warnings);
    let image = match &options.image {
        Some(template) => template.replace("{instance_id}", &instance_id),
        None => swebench_image(&instance_id),
    };
    let workdir = environment
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| c.starts_with('/') && *c != "/")
        .unwrap_or("/testbed")
        .to_string();
    let trajectory = Trajectory {
        format: FORMAT.into(),
        task: Task {
            id: instance_id.clone(),
            image,
            workdir,
            evaluator: Evaluator::Swebench { instance_id: instance_id.clone(), instance: None },
            problem_statement: problem_statement(&text_of(&messages[1])),
        },
        interpreter,
        messages,
        initial_messages: initial,
        steps,
        end_type,
        submission: (!submission.is_empty()).then_some(submission),
        policy: Some(policy(&format, info, &mut warnings)),
    };
    trajectory.validate().map_err(|e| invalid(format!("the imported trajectory is not valid: {e}")))?;
    let first_edit = first_edit(&trajectory);
    let first_symptom = first_edit.as_ref().and_then(|e| first_symptom(&trajectory, e.step));
    let outage = outage(&exit_status, info);
    let outcome = match &outage {
        // An outage ended the run, not the agent: whatever the harness made of its patch is no
        // outcome of the policy.
        Some(_) => None,
        None => options.report.as_ref().and_then(|r| r.outcome_of(&instance_id)),
    };
    Ok(Imported { trajectory, format, instance_id, exit_status, first_edit, first_symptom, outcome, outage, warnings })
}

/// The exception names litellm, the OpenAI client and httpx raise when the model server is down,
/// overloaded or unreachable (mini-swe-agent records the exception's class name as the exit
/// status).
const OUTAGES: &[&str] = &[
    "ServiceUnavailableError",
    "APIConnectionError",
    "Timeout",
    "APITimeoutError",
    "InternalServerError",
    "BadGatewayError",
    "RateLimitError",
    "APIError",
    "ConnectError",
    "ConnectTimeout",
    "ReadTimeout",
    "RemoteProtocolError",
];

/// The model-server outage the run ended on, if it ended on one: an exit status of
/// [`OUTAGES`], or an exception of litellm, the OpenAI client or httpx in the recorded traceback
/// (the rule the adapter applies to its own runs), but an exceeded context window, which is the
/// agent's.
fn outage(exit_status: &str, info: &Value) -> Option<String> {
    if exit_status.contains("ContextWindow") || KNOWN_ENDS.contains(&exit_status) {
        return None;
    }
    if OUTAGES.contains(&exit_status) {
        return Some(exit_status.to_string());
    }
    let traceback = info.get("traceback").and_then(Value::as_str)?;
    let last = traceback.trim_end().lines().next_back()?;
    ["litellm.", "openai.", "httpx.", "httpcore."].iter().any(|m| last.starts_with(m)).then(|| exit_status.to_string())
}

/// The exit statuses of runs the agent itself ended.
const KNOWN_ENDS: &[&str] = &["Submitted", "LimitsExceeded", "RepeatedFormatError", "FormatError", "TimeExceeded"];

/// The policy the run was recorded under, from `info.config` and `info.mini_version`.
fn policy(format: &str, info: &Value, warnings: &mut Vec<String>) -> RecordedPolicy {
    let text =
        |pointer: &str| info.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let policy = RecordedPolicy {
        agent: "mini-swe-agent".into(),
        format: format.to_string(),
        version: text("/mini_version"),
        model_name: text("/config/model/model_name"),
        model_kwargs: info
            .pointer("/config/model/model_kwargs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        environment: text("/config/environment_type"),
    };
    if policy.model_name.is_none() {
        warnings.push("no model recorded (info.config.model.model_name): the study's model is resumed".into());
    }
    if policy.singularity() {
        warnings.push(format!(
            "recorded in {} (Singularity): replayed and resumed in Docker, whose file system and \
             environment may differ from the recording's",
            policy.environment.as_deref().unwrap_or_default()
        ));
    }
    policy
}

struct Context<'a> {
    timeout_s: f64,
    exit_status: &'a str,
    submission: &'a str,
}

struct Parsed {
    initial: usize,
    steps: Vec<Step>,
    warnings: Vec<String>,
}

impl Parsed {
    /// A message that is neither a model call nor an observation (a user's interruption, an
    /// unexpected message): it joins the prefix before the next model call.
    fn absorb(&mut self, i: usize, what: &str) {
        self.warnings
            .push(format!("messages[{i}] ({what}) is not a model call: it joins the prefix before the next one"));
        match self.steps.last_mut() {
            Some(step) => step.messages_end = i + 1,
            None => self.initial = i + 1,
        }
    }
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

fn interpreter(environment: &Value, info: &Value, warnings: &mut Vec<String>) -> Interpreter {
    let env: BTreeMap<String, String> = environment
        .get("env")
        .and_then(Value::as_object)
        .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default();
    let recorded: Option<Vec<String>> = environment
        .get("interpreter")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .filter(|a: &Vec<String>| !a.is_empty());
    let argv = match recorded {
        Some(argv) => argv,
        None => {
            let kind = info.pointer("/config/environment_type").and_then(Value::as_str).unwrap_or("");
            if kind.contains("docker") {
                // mini-swe-agent's DockerEnvironment runs `bash -lc` (1.x: fixed; 2.x: the
                // default of its `interpreter` setting).
                vec!["bash".into(), "-lc".into()]
            } else {
                if kind.is_empty() {
                    warnings.push("no environment_type recorded: commands read as run by `bash -c`".into());
                }
                vec!["bash".into(), "-c".into()]
            }
        }
    };
    Interpreter::mini_swe_agent(argv, env)
}

fn end_type(exit_status: &str, model_calls: usize, info: &Value, warnings: &mut Vec<String>) -> EndType {
    let number = |pointer: &str| info.pointer(pointer).and_then(Value::as_f64).unwrap_or(0.0);
    match exit_status {
        "Submitted" => EndType::Submitted,
        "LimitsExceeded" => {
            let step_limit = number("/config/agent/step_limit");
            let cost_limit = number("/config/agent/cost_limit");
            let cost = number("/model_stats/instance_cost");
            if step_limit > 0.0 && model_calls as f64 >= step_limit {
                EndType::StepCap
            } else if cost_limit > 0.0 && cost >= cost_limit {
                EndType::CostLimit
            } else {
                warnings.push("LimitsExceeded with neither recorded limit reached: read as the step cap".into());
                EndType::StepCap
            }
        }
        "RepeatedFormatError" | "FormatError" => EndType::FormatError,
        s if s.contains("ContextWindow") => EndType::ContextWindow,
        s => {
            if s == "TimeExceeded" {
                warnings.push("the run hit its wall-clock limit (TimeExceeded): end type `error`".into());
            }
            EndType::Error
        }
    }
}

/// The issue text inside mini-swe-agent's SWE-bench task message, when it is recognizable.
fn problem_statement(task: &str) -> Option<String> {
    let start = task.find("<pr_description>")? + "<pr_description>".len();
    let end = start + task[start..].find("</pr_description>")?;
    let body = task[start..end].trim_start_matches('\n');
    let body = body.strip_prefix("Consider the following PR description:\n").unwrap_or(body);
    // The template puts one newline between the statement and the closing tag; the statement's
    // own trailing newlines are its own (SWE-bench's end with one), so exactly one goes.
    let body = body.strip_suffix('\n').unwrap_or(body);
    (!body.trim().is_empty()).then(|| body.to_string())
}

/// The submitting action's output, which mini-swe-agent does not record.
fn submitting_action(command: &str, context: &Context, returncode: Option<i32>) -> Action {
    Action {
        command: command.to_string(),
        timeout_s: context.timeout_s,
        output: format!("{SUBMIT_MARKER}\n{}", context.submission),
        returncode,
        timed_out: false,
        exception: None,
        omitted: None,
    }
}

fn parse_v1_1(messages: &[Value], context: &Context, parsed: &mut Parsed) -> Result<(), ImportError> {
    let n = messages.len();
    let mut i = parsed.initial;
    while i < n {
        let m = &messages[i];
        match role(m) {
            "assistant" => {
                let requested = match m.pointer("/extra/actions") {
                    Some(Value::Array(a)) => a,
                    _ => return Err(invalid(format!("messages[{i}] is a model reply without extra.actions"))),
                };
                let mut j = i + 1;
                while j < n && (role(&messages[j]) == "tool" || messages[j].pointer("/extra/raw_output").is_some()) {
                    j += 1;
                }
                let observations = &messages[i + 1..j];
                let step_number = parsed.steps.len() + 1;
                let submitted_here = observations.is_empty()
                    && j == n - 1
                    && role(&messages[j]) == "exit"
                    && context.exit_status == "Submitted";
                let mut actions = Vec::new();
                let mut submitted = false;
                for (k, request) in requested.iter().enumerate() {
                    let command = request
                        .get("command")
                        .and_then(Value::as_str)
                        .ok_or_else(|| invalid(format!("messages[{i}].extra.actions[{k}] has no command")))?;
                    let id = request.get("tool_call_id").and_then(Value::as_str);
                    let observation = id
                        .and_then(|id| {
                            observations.iter().find(|o| o.get("tool_call_id").and_then(Value::as_str) == Some(id))
                        })
                        .or_else(|| if id.is_none() { observations.get(k) } else { None });
                    match observation {
                        Some(o) => {
                            let extra = o.get("extra").unwrap_or(&Value::Null);
                            let exception =
                                extra.get("exception_info").and_then(Value::as_str).filter(|s| !s.is_empty());
                            if exception == Some("action was not executed") {
                                parsed
                                    .warnings
                                    .push(format!("step {step_number}: action {} was never executed: left out", k + 1));
                                continue;
                            }
                            let output = match extra.get("raw_output").and_then(Value::as_str) {
                                Some(s) => s.to_string(),
                                None => {
                                    parsed.warnings.push(format!(
                                        "step {step_number}: action {} has no extra.raw_output: its rendered observation stands in",
                                        k + 1
                                    ));
                                    text_of(o)
                                }
                            };
                            let returncode = extra.get("returncode").and_then(Value::as_i64).map(|r| r as i32);
                            let timed_out = extra.get("exception_type").and_then(Value::as_str)
                                == Some("TimeoutExpired")
                                || exception.is_some_and(|e| e.contains("timed out"));
                            actions.push(Action {
                                command: command.to_string(),
                                timeout_s: context.timeout_s,
                                output,
                                // A command that raised (timed out) did not finish: mini-swe-agent
                                // writes -1 for it.
                                returncode: if exception.is_some() { None } else { returncode },
                                omitted: None,
                                timed_out,
                                exception: exception.map(str::to_string),
                            });
                        }
                        None if submitted_here && !submitted => {
                            let submitter = command.contains(SUBMIT_MARKER)
                                || !requested[k + 1..].iter().any(|r| {
                                    r.get("command").and_then(Value::as_str).is_some_and(|c| c.contains(SUBMIT_MARKER))
                                });
                            if submitter {
                                parsed.warnings.push(format!(
                                    "step {step_number}: the submitting command's output is reconstructed from the submission (mini-swe-agent records none)"
                                ));
                                // mini-swe-agent 2.x submits only on return code 0.
                                actions.push(submitting_action(command, context, Some(0)));
                                submitted = true;
                            } else {
                                parsed.warnings.push(format!(
                                    "step {step_number}: action {} ran before the submitting one but its output was not recorded",
                                    k + 1
                                ));
                                actions.push(Action {
                                    command: command.to_string(),
                                    timeout_s: context.timeout_s,
                                    output: String::new(),
                                    returncode: None,
                                    timed_out: false,
                                    exception: Some("output not recorded: the run was submitted in this step".into()),
                                    omitted: None,
                                });
                            }
                        }
                        None => {
                            parsed
                                .warnings
                                .push(format!("step {step_number}: action {} has no observation: left out", k + 1));
                        }
                    }
                }
                parsed.steps.push(Step { actions, messages_end: j, fingerprint: None });
                i = j;
            }
            "user" if m.pointer("/extra/interrupt_type").and_then(Value::as_str) == Some("FormatError") => {
                parsed.steps.push(Step { actions: Vec::new(), messages_end: i + 1, fingerprint: None });
                i += 1;
            }
            "exit" => {
                if i != n - 1 {
                    return Err(invalid(format!("messages[{i}] ends the run but {} messages follow it", n - 1 - i)));
                }
                break;
            }
            other => {
                let what = match m.pointer("/extra/interrupt_type").and_then(Value::as_str) {
                    Some(t) => format!("a {other} message, {t}"),
                    None => format!("a {other} message"),
                };
                parsed.absorb(i, &what);
                i += 1;
            }
        }
    }
    Ok(())
}

static BASH_BLOCK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?s)```bash\s*\n(.*?)\n```").unwrap());
static RETURNCODE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^<returncode>(-?\d+)</returncode>").unwrap());
static ELIDED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<elided_chars>\s*(\d+)").unwrap());

/// The text between `open` and the last `close` after it.
fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = start + text[start..].rfind(close)?;
    Some(&text[start..end])
}

/// A 1.x observation's output (the template writes `<output>\n{output}</output>`), or head and
/// tail of an output the recording elided, and whether it was elided.
fn v1_output(content: &str) -> (String, bool) {
    if let Some(output) = between(content, "<output>\n", "</output>") {
        return (output.to_string(), false);
    }
    match (
        between(content, "<output_head>\n", "\n</output_head>"),
        between(content, "<output_tail>\n", "\n</output_tail>"),
    ) {
        (Some(head), Some(tail)) => {
            let elided = ELIDED.captures(content).map_or("some", |c| c.get(1).map_or("some", |m| m.as_str()));
            (format!("{head}\n[… {elided} characters elided in the recording …]\n{tail}"), true)
        }
        _ => (content.to_string(), true),
    }
}

fn parse_v1(messages: &[Value], context: &Context, parsed: &mut Parsed) -> Result<(), ImportError> {
    let n = messages.len();
    let mut i = parsed.initial;
    while i < n {
        let m = &messages[i];
        if role(m) != "assistant" {
            if role(m) == "user" && i == n - 1 {
                break; // the message that ended the run
            }
            parsed.absorb(i, &format!("a {} message", role(m)));
            i += 1;
            continue;
        }
        let step_number = parsed.steps.len() + 1;
        let content = text_of(m);
        let blocks: Vec<String> = BASH_BLOCK.captures_iter(&content).map(|c| c[1].trim().to_string()).collect();
        let reply = messages.get(i + 1).filter(|r| role(r) == "user");
        let Some(reply) = reply else {
            parsed.warnings.push(format!("step {step_number}: the model reply has no observation after it"));
            parsed.steps.push(Step { actions: Vec::new(), messages_end: i + 1, fingerprint: None });
            i += 1;
            continue;
        };
        if blocks.len() != 1 {
            // A format error: the scaffold answered with its format error message.
            parsed.steps.push(Step { actions: Vec::new(), messages_end: i + 2, fingerprint: None });
            i += 2;
            continue;
        }
        let command = &blocks[0];
        let text = text_of(reply);
        if i + 1 == n - 1 && context.exit_status == "Submitted" {
            parsed.warnings.push(format!(
                "step {step_number}: the submitting command's output is reconstructed from the submission and its return code is unknown (mini-swe-agent 1.x records neither)"
            ));
            parsed.steps.push(Step {
                actions: vec![submitting_action(command, context, None)],
                messages_end: i + 1,
                fingerprint: None,
            });
            break;
        }
        let action = if let Some(c) = RETURNCODE.captures(&text) {
            let (output, elided) = v1_output(&text);
            if elided {
                parsed.warnings.push(format!("step {step_number}: the recording elided part of the output"));
            }
            Action {
                command: command.clone(),
                timeout_s: context.timeout_s,
                output,
                returncode: c[1].parse().ok(),
                timed_out: false,
                exception: None,
                omitted: None,
            }
        } else if text.starts_with("The last command <command>") && text.contains("timed out") {
            Action {
                command: command.clone(),
                timeout_s: context.timeout_s,
                output: between(&text, "<output>\n", "\n</output>").unwrap_or("").to_string(),
                returncode: None,
                timed_out: true,
                exception: Some("the command timed out and was killed".into()),
                omitted: None,
            }
        } else {
            parsed
                .warnings
                .push(format!("step {step_number}: the observation is not in a known form: kept as the output"));
            Action {
                command: command.clone(),
                timeout_s: context.timeout_s,
                output: text,
                returncode: None,
                timed_out: false,
                exception: None,
                omitted: None,
            }
        };
        parsed.steps.push(Step { actions: vec![action], messages_end: i + 2, fingerprint: None });
        i += 2;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_image_rule() {
        assert_eq!(
            swebench_image("astropy__astropy-13236"),
            "swebench/sweb.eval.x86_64.astropy_1776_astropy-13236:latest"
        );
        assert_eq!(swebench_image("Django__Django-1"), "swebench/sweb.eval.x86_64.django_1776_django-1:latest");
    }

    #[test]
    fn problem_statements_are_read_from_the_task_message() {
        let task =
            "<pr_description>\nConsider the following PR description:\nIt breaks.\n</pr_description>\n\n<instructions>";
        assert_eq!(problem_statement(task).as_deref(), Some("It breaks."));
        // The statement's own trailing newline is kept: only the template's goes.
        let task = "<pr_description>\nConsider the following PR description:\nIt breaks.\n\n</pr_description>";
        assert_eq!(problem_statement(task).as_deref(), Some("It breaks.\n"));
        assert_eq!(problem_statement("just do it"), None);
    }

    #[test]
    fn v1_outputs() {
        assert_eq!(v1_output("<returncode>0</returncode>\n<output>\na\nb\n</output>"), ("a\nb\n".into(), false));
        assert_eq!(v1_output("<returncode>0</returncode>\n<output>\n</output>"), ("".into(), false));
        let long = "<returncode>0</returncode>\n<warning>\nlong\n</warning><output_head>\nHEAD\n</output_head>\n<elided_chars>\n12 characters elided\n</elided_chars>\n<output_tail>\nTAIL\n</output_tail>";
        let (out, elided) = v1_output(long);
        assert!(elided);
        assert!(out.starts_with("HEAD\n") && out.ends_with("\nTAIL") && out.contains("12 characters"), "{out}");
    }
}
