//! The policy a run was recorded under ([`RecordedPolicy`]): the model, its sampling settings,
//! the agent's version and the environment class, as the agent's own file names them. A study
//! resumes the recorded policy ([`RecordedPolicy::resume_model`]) unless its spec overrides a
//! setting, and launch says where the two differ ([`RecordedPolicy::differences`]) — a different
//! policy has a different `V(h_t)`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The text format of mini-swe-agent 1.x.
pub const FORMAT_V1: &str = "mini-swe-agent-1";
/// The tool-call format of mini-swe-agent 2.x.
pub const FORMAT_V1_1: &str = "mini-swe-agent-1.1";

/// The version of mini-swe-agent the worker's adapter runs (`scripts/mini-swe-agent-venv`).
pub const MINI_SWE_AGENT_VERSION: &str = "2.4.6";

/// Model arguments that say where the model is served, not how it samples: a study's
/// deployment gives them (`base_url`, `api_key`), never the recording.
const DEPLOYMENT_KEYS: &[&str] = &["api_base", "base_url", "api_key", "api_key_env", "api_version", "extra_headers"];

/// The sampling settings the adapter gives a named value to (its own defaults otherwise).
const SAMPLING_KEYS: &[&str] = &["temperature", "top_p"];

/// The policy a run was recorded under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedPolicy {
    /// The agent, e.g. `mini-swe-agent`.
    pub agent: String,
    /// The source file's format, e.g. `mini-swe-agent-1.1` (tool calls) or `mini-swe-agent-1`
    /// (text: fenced bash blocks, a scaffold the tool-call adapter cannot resume).
    pub format: String,
    /// The agent's version, e.g. `2.4.6`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The model as the agent named it (litellm's name, e.g. `hosted_vllm/Qwen/Qwen3-32B`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// The model arguments as recorded (`temperature`, `top_p`, `drop_params`, …; the recorded
    /// endpoint too, which a resumed run never takes).
    #[serde(default)]
    pub model_kwargs: Map<String, Value>,
    /// The environment class the run was recorded in, e.g.
    /// `minisweagent.environments.docker.DockerEnvironment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

impl RecordedPolicy {
    /// Whether the run was recorded in the text (1.x) scaffold, which the tool-call adapter of
    /// mini-swe-agent 2.x cannot resume.
    pub fn text_format(&self) -> bool {
        self.format == FORMAT_V1
    }

    /// Whether the recorded environment was a Singularity (Apptainer) container, replayed in
    /// Docker here.
    pub fn singularity(&self) -> bool {
        self.environment.as_deref().is_some_and(|e| {
            let e = e.to_ascii_lowercase();
            e.contains("singularity") || e.contains("apptainer")
        })
    }

    /// The recorded sampling arguments a resumed run takes: every model argument but the
    /// endpoint's.
    fn sampling(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.model_kwargs.iter().filter(|(k, _)| !DEPLOYMENT_KEYS.contains(&k.as_str()))
    }

    /// The mini-swe-agent adapter's `model` object for a run resumed from this recording: the
    /// spec's `model` with the recorded settings it does not name. A sampling setting the
    /// recording did not name (the server's default then) is sent as `null`, which the adapter
    /// reads as "send none", not as its own default. The endpoint and `model_name` are the spec's.
    pub fn resume_model(&self, spec: &Value) -> Value {
        let mut model = spec.as_object().cloned().unwrap_or_default();
        let spec_kwargs = model.get("model_kwargs").and_then(Value::as_object).cloned().unwrap_or_default();
        let mut kwargs = spec_kwargs.clone();
        for key in SAMPLING_KEYS {
            if model.contains_key(*key) || spec_kwargs.contains_key(*key) {
                continue;
            }
            model.insert((*key).into(), self.model_kwargs.get(*key).cloned().unwrap_or(Value::Null));
        }
        for (key, value) in self.sampling() {
            if !SAMPLING_KEYS.contains(&key.as_str()) && !spec_kwargs.contains_key(key) {
                kwargs.insert(key.clone(), value.clone());
            }
        }
        if !kwargs.is_empty() {
            model.insert("model_kwargs".into(), Value::Object(kwargs));
        }
        Value::Object(model)
    }

    /// The spec's value of a sampling setting, where it names one (`model.KEY`, else
    /// `model.model_kwargs.KEY`).
    fn spec_value<'a>(spec: &'a Value, key: &str) -> Option<&'a Value> {
        spec.get(key).or_else(|| spec.pointer(&format!("/model_kwargs/{key}")))
    }

    /// Where the spec's `model` (the mini-swe-agent adapter's object) runs another policy than the
    /// recorded one, one sentence each: the model's name, a recorded setting the spec overrides,
    /// another agent version, the recorded environment class when it is not Docker's.
    pub fn differences(&self, spec: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let spec_name = spec.get("model_name").or_else(|| spec.get("name")).and_then(Value::as_str);
        if let (Some(recorded), Some(name)) = (&self.model_name, spec_name)
            && recorded != name
        {
            out.push(format!("model_name: the spec's {name:?}, recorded {recorded:?}"));
        }
        for (key, recorded) in self.sampling() {
            if let Some(value) = Self::spec_value(spec, key)
                && !same(value, recorded)
            {
                out.push(format!("{key}: the spec's {value}, recorded {recorded}"));
            }
        }
        for key in SAMPLING_KEYS {
            if !self.model_kwargs.contains_key(*key)
                && let Some(value) = Self::spec_value(spec, key).filter(|v| !v.is_null())
            {
                out.push(format!("{key}: the spec's {value}, recorded none (the server's default)"));
            }
        }
        if let Some(version) = &self.version
            && version != MINI_SWE_AGENT_VERSION
        {
            out.push(format!("agent version: recorded {} {version}, resumed by {MINI_SWE_AGENT_VERSION}", self.agent));
        }
        if self.singularity() {
            out.push(format!(
                "environment: recorded in {}, replayed and resumed in Docker",
                self.environment.as_deref().unwrap_or_default()
            ));
        }
        out
    }

    /// Whether the resumed policy samples at temperature 0 (its curves are near-degenerate: every
    /// continuation from a prefix is nearly the same run).
    pub fn deterministic(resumed: &Value) -> bool {
        Self::spec_value(resumed, "temperature").and_then(Value::as_f64) == Some(0.0)
    }
}

/// JSON values equal as numbers where both are numbers (`0` and `0.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recorded() -> RecordedPolicy {
        RecordedPolicy {
            agent: "mini-swe-agent".into(),
            format: "mini-swe-agent-1.1".into(),
            version: Some("2.4.6".into()),
            model_name: Some("hosted_vllm/Qwen/Qwen3-32B".into()),
            model_kwargs: json!({"api_base": "http://localhost:8000/v1", "temperature": 0, "drop_params": true})
                .as_object()
                .cloned()
                .unwrap(),
            environment: Some("minisweagent.environments.docker.DockerEnvironment".into()),
        }
    }

    #[test]
    fn a_resumed_run_takes_the_recorded_settings_the_spec_does_not_name() {
        let spec = json!({"model_name": "openai/Qwen/Qwen3-32B", "base_url": "http://gpu:8000/v1"});
        let model = recorded().resume_model(&spec);
        // The recorded temperature, no top_p (the server's default, as recorded), the recorded
        // drop_params; never the recorded endpoint.
        assert_eq!(
            model,
            json!({"model_name": "openai/Qwen/Qwen3-32B", "base_url": "http://gpu:8000/v1", "temperature": 0,
                   "top_p": null, "model_kwargs": {"drop_params": true}})
        );
        // The spec's settings win, wherever it names them.
        let spec = json!({"model_name": "m", "temperature": 0.7, "model_kwargs": {"top_p": 0.8, "drop_params": false}});
        let model = recorded().resume_model(&spec);
        assert_eq!(model["temperature"], 0.7);
        assert_eq!(model.get("top_p"), None);
        assert_eq!(model["model_kwargs"], json!({"top_p": 0.8, "drop_params": false}));
        assert!(RecordedPolicy::deterministic(&recorded().resume_model(&json!({"model_name": "m"}))));
        assert!(!RecordedPolicy::deterministic(&model));
    }

    #[test]
    fn differences_name_every_setting_the_spec_changes() {
        let same_policy = json!({"model_name": "hosted_vllm/Qwen/Qwen3-32B", "temperature": 0.0});
        assert_eq!(recorded().differences(&same_policy), Vec::<String>::new());
        let other = json!({"model_name": "openai/Qwen/Qwen3-32B", "temperature": 0.7, "top_p": 0.8,
                           "base_url": "http://gpu:8000/v1"});
        let d = recorded().differences(&other);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].starts_with("model_name: the spec's \"openai/Qwen/Qwen3-32B\""), "{d:?}");
        assert!(d[1].contains("temperature: the spec's 0.7, recorded 0"), "{d:?}");
        assert!(d[2].contains("top_p: the spec's 0.8, recorded none"), "{d:?}");
        let old = RecordedPolicy {
            version: Some("1.15.0".into()),
            environment: Some("minisweagent.environments.singularity.SingularityEnvironment".into()),
            ..recorded()
        };
        let d = old.differences(&same_policy);
        assert!(d.iter().any(|x| x.contains("recorded mini-swe-agent 1.15.0, resumed by 2.4.6")), "{d:?}");
        assert!(d.iter().any(|x| x.contains("SingularityEnvironment, replayed and resumed in Docker")), "{d:?}");
        assert!(old.singularity() && !recorded().singularity());
    }
}
