//! A task-state study's `task_state:` section (docs/task-state.md, "A task-state study"): the
//! session's instructions, the views read, the answer samples, and a model per stage.
//!
//! ```yaml
//! task_state:
//!   samples: 3                      # answer samples per view and per actor probe (Table 7)
//!   models:
//!     default: {base_url: "http://vllm:8000/v1", model: Qwen/Qwen3-32B, api_key_env: VLLM_KEY}
//!     actor: {base_url: "http://agent-vllm:8000/v1", model: the-agents-model}
//! ```
//!
//! Every stage's model is `models.<stage>` or else `models.default`; a stage without either is
//! refused. The sampling of each stage is the study's (Table 7: extraction, probes and the judge
//! at temperature 0; readers and the actor at 0.7; thinking disabled) unless `models.<stage>`
//! sets `temperature`.

use serde_norway::{Mapping, Value};
use vcurve_method::task_state::View;
use vcurve_record::task_state::{ModelRef, StageModel, StageSampling, TaskStateSettings};

use crate::value::{Problem, check_keys, problem, real, show, text, uint};

/// The study's four instructions (CTXGAP, Tables 6 and 7), in order.
pub const PAPER_INSTRUCTIONS: [&str; 4] =
    ["Investigate; do not modify code", "Implement a fix", "Run tests and report the result", "Assess remaining risk"];

/// The settings' name and version.
pub const SETTINGS_VERSION: &str = "ctxgap-1";

const FIELDS: &[&str] = &["instructions", "views", "actor", "samples", "min_importance", "models"];
const STAGES: &[&str] = &["default", "atoms", "probes", "reader", "actor", "judge"];
const MODEL_FIELDS: &[&str] =
    &["base_url", "model", "api_key_env", "concurrency", "request_timeout_s", "thinking", "temperature", "max_tokens"];

/// Parse `task_state:` (at `value`) into the study's settings.
pub(crate) fn parse(value: &Value) -> Result<TaskStateSettings, Problem> {
    let Value::Mapping(map) = value else {
        return Err(problem("task_state", format!("must be a mapping with models; found {}", show(value))));
    };
    check_keys(map, FIELDS, "task_state.", "task_state")?;
    let get = |k: &str| map.get(k).filter(|v| !v.is_null());

    let instructions = match get("instructions") {
        None => PAPER_INSTRUCTIONS.map(str::to_owned).to_vec(),
        Some(Value::Sequence(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| text(v, &format!("task_state.instructions[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(problem(
                "task_state.instructions",
                format!("must be a non-empty list of instructions, one per turn; found {}", show(other)),
            ));
        }
    };
    if instructions.len() > 32 {
        return Err(problem("task_state.instructions", format!("has {} turns; at most 32", instructions.len())));
    }

    let views = match get("views") {
        None => View::ALL.into_iter().filter(|v| *v != View::Actor).collect(),
        Some(Value::Sequence(items)) if !items.is_empty() => {
            let mut views = Vec::new();
            for (i, v) in items.iter().enumerate() {
                let field = format!("task_state.views[{i}]");
                let name = text(v, &field)?;
                let view = View::ALL.into_iter().find(|x| x.key() == name && *x != View::Actor).ok_or_else(|| {
                    let names: Vec<&str> = View::ALL.iter().filter(|x| **x != View::Actor).map(|x| x.key()).collect();
                    problem(&field, format!("= {name:?} is not a view; expected one of: {}", names.join(", ")))
                })?;
                if views.contains(&view) {
                    return Err(problem(&field, format!("= {name:?} is listed twice")));
                }
                views.push(view);
            }
            if !views.contains(&View::Full) {
                return Err(problem(
                    "task_state.views",
                    "must include full: every gap is measured against the full context (T)",
                ));
            }
            views
        }
        Some(other) => {
            return Err(problem(
                "task_state.views",
                format!("must be a non-empty list of views; found {}", show(other)),
            ));
        }
    };
    let actor = match get("actor") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(problem("task_state.actor", format!("must be true or false, found {}", show(other))));
        }
    };
    let samples = match get("samples") {
        None => 3,
        Some(v) => uint(v, "task_state.samples", 1, 20)? as u32,
    };
    let min_importance = match get("min_importance") {
        None => 2,
        Some(v) => uint(v, "task_state.min_importance", 1, 3)? as u32,
    };

    let models = match get("models") {
        Some(Value::Mapping(m)) => m,
        None => return Err(problem("task_state.models", "is missing: name a model per stage, or a default")),
        Some(other) => {
            return Err(problem(
                "task_state.models",
                format!("must be a mapping from stage to model; found {}", show(other)),
            ));
        }
    };
    check_keys(models, STAGES, "task_state.models.", "task_state.models")?;
    // Table 7: extraction, probes and the judge at temperature 0; readers and the actor sample at 0.7.
    let stage = |name: &str, temperature: f64| -> Result<StageModel, Problem> {
        let (at, value) = match models.get(name).filter(|v| !v.is_null()) {
            Some(v) => (format!("task_state.models.{name}"), v),
            None => match models.get("default").filter(|v| !v.is_null()) {
                Some(v) => ("task_state.models.default".to_string(), v),
                None => {
                    return Err(problem(
                        format!("task_state.models.{name}"),
                        "is missing and there is no task_state.models.default",
                    ));
                }
            },
        };
        parse_model(value, &at, temperature)
    };
    Ok(TaskStateSettings {
        version: SETTINGS_VERSION.to_string(),
        instructions,
        views,
        actor,
        samples,
        min_importance,
        atoms: stage("atoms", 0.0)?,
        probes: stage("probes", 0.0)?,
        reader: stage("reader", 0.7)?,
        actor_model: stage("actor", 0.7)?,
        judge: stage("judge", 0.0)?,
    })
}

pub(crate) fn parse_model(value: &Value, at: &str, temperature: f64) -> Result<StageModel, Problem> {
    let Value::Mapping(map) = value else {
        return Err(problem(at, format!("must be a mapping with base_url and model; found {}", show(value))));
    };
    check_keys(map, MODEL_FIELDS, &format!("{at}."), "a stage's model")?;
    let get = |k: &str| map.get(k).filter(|v| !v.is_null());
    let field = |k: &str| format!("{at}.{k}");
    let base_url = text(get("base_url").ok_or_else(|| problem(field("base_url"), "is missing"))?, &field("base_url"))?;
    check_base_url(&base_url).map_err(|m| problem(field("base_url"), format!("= {base_url:?} {m}")))?;
    let model = text(get("model").ok_or_else(|| problem(field("model"), "is missing"))?, &field("model"))?;
    let api_key_env = match get("api_key_env") {
        None => None,
        Some(v) => {
            let name = text(v, &field("api_key_env"))?;
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(problem(field("api_key_env"), format!("= {name:?} is not an environment variable's name")));
            }
            Some(name)
        }
    };
    let concurrency = match get("concurrency") {
        None => 8,
        Some(v) => uint(v, &field("concurrency"), 1, 1024)? as u32,
    };
    let request_timeout_s = match get("request_timeout_s") {
        None => 600,
        Some(v) => uint(v, &field("request_timeout_s"), 1, 3600)? as u32,
    };
    let thinking_kwargs = match get("thinking") {
        None => true,
        Some(Value::String(s)) if s == "chat_template_kwargs" => true,
        Some(Value::String(s)) if s == "none" => false,
        Some(other) => {
            return Err(problem(
                field("thinking"),
                format!(
                    "= {} is not how the server is told not to think; expected chat_template_kwargs (vLLM, SGLang) or none (a server that refuses unknown fields)",
                    show(other)
                ),
            ));
        }
    };
    let temperature = match get("temperature") {
        None => temperature,
        Some(v) => real(v, &field("temperature"), 0.0, 2.0)?,
    };
    let max_tokens = match get("max_tokens") {
        None => None,
        Some(v) => Some(uint(v, &field("max_tokens"), 1, 1_000_000)? as u32),
    };
    Ok(StageModel {
        endpoint: ModelRef { base_url, model, api_key_env, concurrency, request_timeout_s, thinking_kwargs },
        sampling: StageSampling { temperature: Some(temperature), top_p: None, max_tokens, disable_thinking: true },
    })
}

/// An http(s) URL up to `/v1`, without credentials, query or fragment.
fn check_base_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("is not an http:// or https:// URL")?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() {
        return Err("names no host".into());
    }
    if host.contains('@') {
        return Err("carries credentials: give the key in api_key_env, never in the spec".into());
    }
    if url.contains(['?', '#', ' ']) {
        return Err("has a query, a fragment or a blank; give the base URL up to /v1".into());
    }
    Ok(())
}

/// A task-state study's section exists alongside what it refuses: it records sessions of its
/// tasks, so it has no trajectories, decoys or selection of its own.
pub(crate) fn check_alone(top: &Mapping) -> Result<(), Problem> {
    for field in ["trajectories", "decoys", "selection", "base_runs", "judges"] {
        if top.get(field).is_some_and(|v| !v.is_null()) {
            return Err(problem(
                field,
                "is not a field of a task-state study: it records a session of each of its tasks (task_state)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vcurve_method::task_state::View;

    const SPEC: &str = r#"
name: ts
seed: 1
runner: {kind: agent, agent: scripted, model: {q: 0.7}}
task_state:
  models:
    default: {base_url: "http://127.0.0.1:8000/v1", model: reader-model, api_key_env: READER_KEY}
    actor: {base_url: "http://127.0.0.1:8001/v1", model: agent-model, thinking: none, concurrency: 2}
tasks:
  - task: tasks/calc.json
"#;

    const CALC: &str = r#"{"id": "calc-1", "image": "vcurve-task-calc:abc", "workdir": "/testbed",
  "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}}"#;

    fn parse(yaml: &str) -> Result<vcurve_record::StudySpec, String> {
        let files = BTreeMap::from([("tasks/calc.json".to_string(), CALC.to_string())]);
        crate::parse(yaml, &|p| files.get(p).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_task_state_study_takes_the_papers_settings_and_a_model_per_stage() {
        let spec = parse(SPEC).unwrap();
        let s = spec.task_state.as_ref().unwrap();
        assert_eq!(s.version, "ctxgap-1");
        assert_eq!(s.instructions, super::PAPER_INSTRUCTIONS.map(str::to_owned).to_vec());
        assert_eq!((s.samples, s.min_importance, s.actor), (3, 2, true));
        assert_eq!(s.views.len(), 10);
        assert!(!s.views.contains(&View::Actor));
        assert_eq!(s.reader.endpoint.model, "reader-model");
        assert_eq!(s.reader.endpoint.api_key_env.as_deref(), Some("READER_KEY"));
        assert_eq!((s.reader.sampling.temperature, s.judge.sampling.temperature), (Some(0.7), Some(0.0)));
        assert_eq!((s.atoms.sampling.temperature, s.probes.sampling.temperature), (Some(0.0), Some(0.0)));
        assert!(s.judge.sampling.disable_thinking);
        assert_eq!(s.actor_model.endpoint.model, "agent-model");
        assert!(!s.actor_model.endpoint.thinking_kwargs && s.reader.endpoint.thinking_kwargs);
        assert_eq!((s.actor_model.endpoint.concurrency, s.actor_model.sampling.temperature), (2, Some(0.7)));
        // One session per task, no base runs, no selection.
        assert_eq!(spec.tasks[0].base_runs, 0);
        assert!(spec.selection.is_none() && spec.trajectories.is_empty());
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<vcurve_record::StudySpec>(&json).unwrap(), spec);
    }

    #[test]
    fn bad_task_state_sections_are_refused_naming_the_field() {
        let cases = [
            (SPEC.replace("    actor: {", "    reader: {base_url: ftp://x, model: m}\n    actor: {"), "task_state.models.reader.base_url = \"ftp://x\" is not an http"),
            (SPEC.replace("http://127.0.0.1:8000/v1", "http://user:pw@127.0.0.1:8000/v1"), "carries credentials"),
            (SPEC.replace("READER_KEY", "\"READER-KEY\""), "task_state.models.default.api_key_env = \"READER-KEY\" is not an environment variable"),
            (SPEC.replace("thinking: none", "thinking: off"), "task_state.models.actor.thinking = \"off\" is not how"),
            (SPEC.replace("  models:", "  samples: 0\n  models:"), "task_state.samples = 0 is outside 1..=20"),
            (SPEC.replace("  models:", "  views: [reports, reportz]\n  models:"), "task_state.views[1] = \"reportz\" is not a view"),
            (SPEC.replace("  models:", "  views: [reports]\n  models:"), "task_state.views must include full"),
            (SPEC.replace("  models:", "  readers: 3\n  models:"), "task_state.readers is not a field of task_state"),
            (SPEC.replace("    default: {base_url: \"http://127.0.0.1:8000/v1\", model: reader-model, api_key_env: READER_KEY}\n", ""), "task_state.models.atoms is missing and there is no task_state.models.default"),
            (SPEC.replace("  - task: tasks/calc.json", "  - task: tasks/calc.json\n    base_runs: 3"), "tasks[0].base_runs is not a field of a task-state study"),
            (SPEC.replace("seed: 1", "seed: 1\nselection: {seed: 1}"), "selection is not a field of a task-state study"),
            (SPEC.replace("runner: {kind: agent, agent: scripted, model: {q: 0.7}}", "runner: {kind: synthetic}"), "runner.kind must run an agent in containers"),
            (SPEC.replace("tasks:\n  - task: tasks/calc.json\n", ""), "tasks is missing: a task-state study"),
        ];
        for (yaml, expected) in cases {
            let err = parse(&yaml).unwrap_err();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
        }
    }
}
