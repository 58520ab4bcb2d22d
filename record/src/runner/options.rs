//! The runner kinds, the capabilities they need and each kind's typed options.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The runner kind whose outcomes are a pure function of the key (testing, capacity planning).
pub const SYNTHETIC: &str = "synthetic";

/// The runner kind that runs a real agent process in containers (docs/agent-protocol.md): replays
/// recorded runs, resumes the agent from a step, judges its patch through the study's cache.
pub const AGENT: &str = "agent";

/// The runner kind that runs mini-swe-agent 2.4.6 (the paper's agent) in containers: the `agent`
/// runner with the agent the worker ships under this name (`agents/vcurve_agents/mini_swe_agent.py`
/// under the worker's mini-swe-agent virtual environment), so a study names the model and not
/// an agent.
pub const MINI_SWE_AGENT: &str = "mini-swe-agent";

/// The agent a stored study from before studies named agents runs: its options named a host
/// command (`command`), which no worker runs any more. No worker should register an agent of
/// this name; such a study waits, with the reason shown, until it is relaunched naming an agent.
pub const LEGACY_COMMAND_AGENT: &str = "legacy-command";

/// The capability prefix of a registered agent: a worker offering the agent `scripted` registers
/// the capability `agent:scripted`, and a study of `{kind: agent, agent: scripted}` needs it.
pub const AGENT_CAPABILITY_PREFIX: &str = "agent:";

/// The capability a worker registers for offering the agent `name`.
pub fn agent_capability(name: &str) -> String {
    format!("{AGENT_CAPABILITY_PREFIX}{name}")
}

/// Whether `name` can name an agent: 1 to 64 ASCII letters, digits, `.`, `_` or `-`, starting
/// with a letter or digit. The error says what is wrong.
pub fn check_agent_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 64 {
        return Err(format!("{name:?} must be 1 to 64 characters long"));
    }
    if !name.chars().all(ok_char) || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "{name:?} is not an agent name: use ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit"
        ));
    }
    Ok(())
}

/// The runner kinds this build offers: a study naming another is refused at launch.
pub const KINDS: &[&str] = &[SYNTHETIC, AGENT, MINI_SWE_AGENT];

/// Why a study may not name a command: the refusal of `runner.command`, for every kind.
pub const NO_COMMAND: &str = "a study cannot put a command line on a worker's host; name an agent \
     the workers' operators registered instead, e.g. `agent: scripted` (vcurve worker --agent, --agents; \
     docs/agent-protocol.md)";

/// Whether a runner kind runs agent processes in containers (replays, snapshots, patches judged
/// through the study's cache), so its options are [`AgentOptions`]. Also true of the capability a
/// study of such a kind needs (`agent:NAME`, [`RunnerSpec::capability`]).
pub fn runs_containers(kind: &str) -> bool {
    let kind = kind.split(NETWORK_CAPABILITY_INFIX).next().unwrap_or(kind);
    kind == AGENT || kind == MINI_SWE_AGENT || kind.starts_with(AGENT_CAPABILITY_PREFIX)
}

/// The options of the `synthetic` runner.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SyntheticOptions {
    /// Simulated work per continuation, in milliseconds.
    pub duration_ms: u64,
    /// Probability of an injected no-outcome per attempt, in `[0, 1]`.
    pub no_outcome_rate: f64,
}

impl SyntheticOptions {
    /// The option names, for error messages.
    pub const FIELDS: &'static [&'static str] = &["duration_ms", "no_outcome_rate"];

    /// Parse and validate the options JSON; `null` means every default; other fields (such as
    /// `kind`) are ignored — the study spec refuses unknown ones. The error names the field.
    pub fn from_json(options: &serde_json::Value) -> Result<Self, String> {
        if options.is_null() {
            return Ok(Self::default());
        }
        if !options.is_object() {
            return Err(format!("invalid synthetic runner options: expected a JSON object, got {options}"));
        }
        let parsed = Self::deserialize(options).map_err(|e| format!("invalid synthetic runner options: {e}"))?;
        if !(0.0..=1.0).contains(&parsed.no_outcome_rate) {
            return Err(format!(
                "invalid synthetic runner options: no_outcome_rate = {} is outside [0, 1]",
                parsed.no_outcome_rate
            ));
        }
        Ok(parsed)
    }
}

/// The options of the `agent` runner (the study spec's `runner:` map).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentOptions {
    /// The agent the study runs, by the name the workers' operators registered it under (e.g.
    /// `scripted`): each worker runs its own registration's command, never one from the study.
    pub agent: String,
    /// Variables added to the agent process's environment; a worker sets only those its
    /// registration of the agent allows (the others are refused as a no-outcome).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The model settings handed to the agent as written (`start.model`).
    #[serde(default = "empty_object")]
    pub model: serde_json::Value,
    /// The memory limit of every container, in MiB.
    #[serde(default = "AgentOptions::default_memory_mb")]
    pub memory_mb: u64,
    /// The largest number of processes in a container.
    #[serde(default = "AgentOptions::default_pids_limit")]
    pub pids_limit: u32,
    /// A cap on a run's wall-clock time (the agent process from start to final), in seconds;
    /// `None` (the default): no limit, the step budget bounds a run. A run killed at the cap is
    /// `capped`: it has no outcome, is not run again, and is counted (never left out unseen: a
    /// cap censors the slow runs, which are mostly the failing ones).
    #[serde(default)]
    pub run_timeout_s: Option<u64>,
    /// Keep every continuation's transcript (its full message list), stored by digest.
    #[serde(default)]
    pub keep_transcripts: bool,
    /// Where replay measures the state fingerprint (changed paths, git diff, git status): `record`
    /// (default) at every step, comparing the recorded ones and recording one where the trajectory
    /// has none (kept with the replay); `compare` only at steps with a recorded fingerprint, which
    /// saves a container diff per step.
    #[serde(default)]
    pub fingerprints: FingerprintPolicy,
    /// The normalization rules replay compares outputs under, replacing the shipped set
    /// (`record/rules/normalization.yaml`, a good start for a study's own); `None`: the shipped set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalization: Option<Vec<crate::replay::Rule>>,
    /// The network of the agent's containers (replays and continuations; never the evaluator's):
    /// `none` (the `agent` runner's default), `bridge` (the `mini-swe-agent` runner's default:
    /// what mini-swe-agent's `DockerEnvironment` had) or `proxy` (only the package index or proxy
    /// the deployment runs). A study runs on workers whose operators offer its network.
    #[serde(default)]
    pub network: Network,
    /// The share of unique patches evaluated a second time as a flake check (docs/method.md §6).
    #[serde(default = "AgentOptions::default_flake_recheck_rate")]
    pub flake_recheck_rate: f64,
    /// Above this flake rate every patch is evaluated twice.
    #[serde(default = "AgentOptions::default_flake_threshold")]
    pub flake_threshold: f64,
}

/// The network of an agent's containers (see [`AgentOptions::network`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Only the loopback interface.
    #[default]
    None,
    /// The Engine's default bridge: whatever the worker's host reaches.
    Bridge,
    /// Only the Docker network the worker's operator names, where the deployment runs a package
    /// index or caching proxy (`vcurve worker --network proxy=NETWORK`).
    Proxy,
}

impl Network {
    /// Every network, as a study names them.
    pub const ALL: [Network; 3] = [Network::None, Network::Bridge, Network::Proxy];

    /// The name a study and a worker's operator use.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Proxy => "proxy",
        }
    }

    /// The network named `name`; the error lists the names.
    pub fn parse(name: &str) -> Result<Network, String> {
        Network::ALL
            .into_iter()
            .find(|n| n.as_str() == name)
            .ok_or_else(|| format!("{name:?} is not a network: use none, bridge or proxy"))
    }

    /// The capability of a container runner's study on this network: `base` itself for `none`,
    /// `base+net:NAME` otherwise (a worker registers it for every container runner it offers
    /// when its operator offers the network).
    pub fn capability(self, base: &str) -> String {
        match self {
            Network::None => base.to_owned(),
            other => format!("{base}{NETWORK_CAPABILITY_INFIX}{}", other.as_str()),
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What joins a container runner's capability and its network (`mini-swe-agent+net:bridge`).
pub const NETWORK_CAPABILITY_INFIX: &str = "+net:";

/// Where a replay measures state fingerprints (see [`AgentOptions::fingerprints`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FingerprintPolicy {
    #[default]
    Record,
    Compare,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl AgentOptions {
    /// The option names, for error messages.
    pub const FIELDS: &'static [&'static str] = &[
        "agent",
        "env",
        "model",
        "memory_mb",
        "pids_limit",
        "run_timeout_s",
        "keep_transcripts",
        "flake_recheck_rate",
        "flake_threshold",
        "fingerprints",
        "normalization",
        "network",
    ];

    fn default_memory_mb() -> u64 {
        2048
    }

    fn default_pids_limit() -> u32 {
        1024
    }

    fn default_flake_recheck_rate() -> f64 {
        0.10
    }

    fn default_flake_threshold() -> f64 {
        0.03
    }

    /// Parse and validate the options JSON (`kind` is ignored); the error names the field.
    pub fn from_json(options: &serde_json::Value) -> Result<Self, String> {
        let mut options = options.clone();
        if let Some(map) = options.as_object_mut() {
            map.remove("kind");
        } else {
            return Err(format!("invalid agent runner options: expected a mapping with `agent`, got {options}"));
        }
        if options.get("command").is_some() {
            return Err(format!("invalid agent runner options: command: {NO_COMMAND}"));
        }
        // serde names an enum's bad variant but not its field: name it here.
        if let Some(f) = options.get("fingerprints")
            && !matches!(f.as_str(), Some("record" | "compare"))
        {
            return Err(format!("invalid agent runner options: fingerprints must be `record` or `compare`, got {f}"));
        }
        if let Some(n) = options.get("network")
            && n.as_str().is_none_or(|n| Network::parse(n).is_err())
        {
            return Err(format!("invalid agent runner options: network must be `none`, `bridge` or `proxy`, got {n}"));
        }
        let parsed = Self::deserialize(&options).map_err(|e| format!("invalid agent runner options: {e}"))?;
        let bad = |field: &str, message: String| Err(format!("invalid agent runner options: {field} {message}"));
        if let Err(e) = check_agent_name(&parsed.agent) {
            return bad("agent", format!("= {e}; name an agent the workers' operators registered, e.g. scripted"));
        }
        if !parsed.model.is_object() {
            return bad("model", format!("must be a mapping of model settings, got {}", parsed.model));
        }
        if !(64..=1 << 20).contains(&parsed.memory_mb) {
            return bad("memory_mb", format!("= {} is outside [64, 1048576]", parsed.memory_mb));
        }
        if !(16..=1 << 20).contains(&parsed.pids_limit) {
            return bad("pids_limit", format!("= {} is outside [16, 1048576]", parsed.pids_limit));
        }
        if let Some(cap) = parsed.run_timeout_s
            && !(1..=7 * 24 * 3600).contains(&cap)
        {
            return bad("run_timeout_s", format!("= {cap} is outside [1, 604800] (leave it out for no limit)"));
        }
        for (field, value) in
            [("flake_recheck_rate", parsed.flake_recheck_rate), ("flake_threshold", parsed.flake_threshold)]
        {
            if !(0.0..=1.0).contains(&value) {
                return bad(field, format!("= {value} is outside [0, 1]"));
            }
        }
        if let Some(rules) = &parsed.normalization {
            crate::replay::Normalizer::new(rules)
                .map_err(|e| format!("invalid agent runner options: normalization: {e}"))?;
        }
        Ok(parsed)
    }

    /// The options of a container runner of `kind` ([`runs_containers`]): for `agent` as
    /// [`AgentOptions::from_json`]; for `mini-swe-agent` the same options less `agent` (the agent
    /// the worker ships under the name [`MINI_SWE_AGENT`]), and a `model` that names the model as the
    /// adapter reads it (`model_name`, `base_url`, `api_key` or `api_key_env`, `temperature`,
    /// `top_p`, `timeout_s`, …). The error names the field.
    pub fn for_kind(kind: &str, options: &serde_json::Value) -> Result<Self, String> {
        if kind != MINI_SWE_AGENT {
            return Self::from_json(options);
        }
        let bad = |message: String| Err(format!("invalid mini-swe-agent runner options: {message}"));
        let Some(map) = options.as_object() else {
            return bad(format!("expected a mapping with `model`, got {options}"));
        };
        if map.contains_key("command") {
            return bad(format!("command: {NO_COMMAND}; the mini-swe-agent runner runs the worker's own adapter"));
        }
        if map.contains_key("agent") {
            return bad("agent: the mini-swe-agent runner runs the worker's own adapter (vcurve worker \
                 --mini-swe-agent-python); give no agent, or use kind: agent to run another one"
                .into());
        }
        if let Err(e) = check_mini_swe_agent_model(map.get("model").unwrap_or(&serde_json::Value::Null)) {
            return bad(format!("model.{e}").replace("model.: ", "model: "));
        }
        let mut with_agent = map.clone();
        with_agent.insert("agent".into(), serde_json::json!(MINI_SWE_AGENT));
        // What the recorded environment had: mini-swe-agent's DockerEnvironment starts its
        // containers on the Engine's default network.
        with_agent.entry("network").or_insert_with(|| serde_json::json!(Network::Bridge.as_str()));
        Self::from_json(&serde_json::Value::Object(with_agent))
            .map_err(|e| e.replace("invalid agent runner options", "invalid mini-swe-agent runner options"))
    }

    /// The normalizer replay uses: the study's rules, or the shipped set.
    pub fn normalizer(&self) -> Result<crate::replay::Normalizer, String> {
        match &self.normalization {
            Some(rules) => crate::replay::Normalizer::new(rules),
            None => Ok(crate::replay::Normalizer::default()),
        }
    }
}

/// The model settings the mini-swe-agent adapter reads (its module docs), checked at launch so
/// that a typo is refused then rather than failing every run; the error starts with the key.
fn check_mini_swe_agent_model(model: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    let Some(m) = model.as_object() else {
        return Err(match model {
            Value::Null => "model_name: missing; the study must name the model, e.g. \
                            model: {model_name: openai/Qwen/Qwen3-32B, base_url: http://HOST:8000/v1}"
                .into(),
            other => format!(": must be a mapping of model settings, got {other}"),
        });
    };
    let name = m.get("model_name").or_else(|| m.get("name"));
    match name {
        Some(Value::String(s)) if !s.trim().is_empty() => {}
        Some(other) => return Err(format!("model_name must be a non-empty string, got {other}")),
        None => {
            return Err("model_name: missing; the litellm model name, e.g. openai/Qwen/Qwen3-32B".into());
        }
    }
    for key in ["base_url", "api_base", "api_key", "api_key_env", "cost_tracking"] {
        if let Some(v) = m.get(key)
            && !v.is_string()
        {
            return Err(format!("{key} must be a string, got {v}"));
        }
    }
    let number = |key: &str, range: std::ops::RangeInclusive<f64>| -> Result<(), String> {
        match m.get(key) {
            // `temperature: null`, `top_p: null`: the adapter sends none (the server's default).
            None | Some(Value::Null) if key == "temperature" || key == "top_p" => Ok(()),
            None => Ok(()),
            Some(v) => match v.as_f64() {
                Some(x) if range.contains(&x) => Ok(()),
                _ => Err(format!("{key} = {v} is outside [{}, {}]", range.start(), range.end())),
            },
        }
    };
    number("temperature", 0.0..=2.0)?;
    number("top_p", 0.0..=1.0)?;
    number("timeout_s", 0.001..=86_400.0)?;
    number("cost_limit", 0.0..=f64::MAX)?;
    if let Some(v) = m.get("max_consecutive_format_errors")
        && v.as_u64().is_none()
    {
        return Err(format!("max_consecutive_format_errors must be a whole number, got {v}"));
    }
    if let Some(v) = m.get("model_kwargs")
        && !v.is_object()
    {
        return Err(format!("model_kwargs must be a mapping of litellm arguments, got {v}"));
    }
    Ok(())
}
