//! [`RunnerSpec`]: the runner a study names with its options, parsed once — by the study spec at
//! launch, by serde when a stored study is read, by the worker when a job arrives — and carried
//! typed from there, so no runner parses its options again.
//!
//! Stored and on the wire it keeps the shape it had as a plain pair: `{kind, options}` with the
//! options a JSON object (`v1::RunnerSpec { kind, options_json }`), so a store written before the
//! options were typed still loads. A kind no runner of this build has is carried as it was
//! written ([`RunnerSpec::Other`]): a coordinator may accept it for workers that offer it (test
//! doubles), and a study of it waits, with the reason shown, until one does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::options::{
    AGENT, AgentOptions, LEGACY_COMMAND_AGENT, MINI_SWE_AGENT, SYNTHETIC, SyntheticOptions, agent_capability,
};

/// Which agent runner the workers use, and its options.
#[derive(Debug, Clone, PartialEq)]
pub enum RunnerSpec {
    /// `synthetic`: outcomes hashed from the key (testing, capacity planning).
    Synthetic(SyntheticOptions),
    /// `agent`: an agent a worker's operator registered, by name, in containers.
    Agent(AgentOptions),
    /// `mini-swe-agent`: the worker's mini-swe-agent adapter in containers; `agent` is always
    /// [`MINI_SWE_AGENT`] and is not written out (the study names none).
    MiniSweAgent(AgentOptions),
    /// A kind no runner of this build has, with its options as written (a JSON object).
    Other { kind: String, options: serde_json::Value },
}

/// Why a runner's options were refused. Fatal: the study spec (or the stored study, or the job)
/// must be fixed; retrying the same options fails the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidRunnerOptions {
    /// The runner kind whose options these are.
    pub kind: String,
    /// What is wrong, naming the option: "invalid agent runner options: memory_mb = 1 is …".
    pub message: String,
}

impl RunnerSpec {
    /// Parse a runner's options (a JSON object of every key but `kind`) for its kind: the
    /// built-in kinds into their typed options, validated; any other kind as written.
    pub fn parse(kind: &str, options: serde_json::Value) -> Result<Self, InvalidRunnerOptions> {
        let invalid = |message: String| InvalidRunnerOptions { kind: kind.to_string(), message };
        match kind {
            SYNTHETIC => SyntheticOptions::from_json(&options).map(Self::Synthetic).map_err(invalid),
            AGENT => AgentOptions::for_kind(kind, &options).map(Self::Agent).map_err(invalid),
            MINI_SWE_AGENT => AgentOptions::for_kind(kind, &options).map(Self::MiniSweAgent).map_err(invalid),
            _ => Ok(Self::Other { kind: kind.to_string(), options }),
        }
    }

    /// [`RunnerSpec::parse`] for options a store holds. A study stored before studies named
    /// agents named a host command (`command`): it loads naming the legacy agent
    /// ([`LEGACY_COMMAND_AGENT`]), which no worker offers, so it waits instead of running it.
    pub fn parse_stored(kind: &str, mut options: serde_json::Value) -> Result<Self, InvalidRunnerOptions> {
        if kind == AGENT
            && let Some(map) = options.as_object_mut()
            && map.remove("command").is_some()
        {
            map.entry("agent").or_insert_with(|| LEGACY_COMMAND_AGENT.into());
        }
        Self::parse(kind, options)
    }

    /// The runner kind, as a study names it.
    pub fn kind(&self) -> &str {
        match self {
            Self::Synthetic(_) => SYNTHETIC,
            Self::Agent(_) => AGENT,
            Self::MiniSweAgent(_) => MINI_SWE_AGENT,
            Self::Other { kind, .. } => kind,
        }
    }

    /// The options as a JSON object, as they are stored and sent: every option of a built-in
    /// kind with its value in effect (defaults filled in), another kind's as written.
    pub fn options_json(&self) -> serde_json::Value {
        let typed = match self {
            Self::Synthetic(o) => serde_json::to_value(o),
            Self::Agent(o) => serde_json::to_value(o),
            Self::MiniSweAgent(o) => serde_json::to_value(o).map(|mut v| {
                if let Some(map) = v.as_object_mut() {
                    map.remove("agent");
                }
                v
            }),
            Self::Other { options, .. } => return options.clone(),
        };
        typed.expect("typed runner options serialize to JSON")
    }

    /// The options of a runner that runs agent processes in containers (`agent`,
    /// `mini-swe-agent`).
    pub fn agent_options(&self) -> Option<&AgentOptions> {
        match self {
            Self::Agent(o) | Self::MiniSweAgent(o) => Some(o),
            Self::Synthetic(_) | Self::Other { .. } => None,
        }
    }

    /// The capability a worker must have registered to run this study's jobs: `agent:NAME` for
    /// an agent (the worker's operator registered the agent NAME), the kind for any other; a
    /// container runner on a network other than `none` adds it (`mini-swe-agent+net:bridge`,
    /// [`super::Network::capability`]).
    pub fn capability(&self) -> String {
        match self {
            Self::Agent(o) => o.network.capability(&agent_capability(&o.agent)),
            Self::MiniSweAgent(o) => o.network.capability(MINI_SWE_AGENT),
            other => other.kind().to_owned(),
        }
    }

    /// Whether the runner runs agent processes in containers ([`runs_containers`](super::runs_containers)).
    pub fn runs_containers(&self) -> bool {
        self.agent_options().is_some()
    }
}

/// The stored shape: `{kind, options}`.
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    options: serde_json::Value,
}

impl Serialize for RunnerSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Stored { kind: self.kind().into(), options: self.options_json() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RunnerSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let stored = Stored::deserialize(deserializer)?;
        let options = match stored.options {
            serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
            options => options,
        };
        RunnerSpec::parse_stored(&stored.kind, options).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::runner::FingerprintPolicy;

    fn mini_swe_agent_options() -> serde_json::Value {
        json!({"model": {"model_name": "openai/Qwen/Qwen3-32B", "temperature": 0.7}, "memory_mb": 4096})
    }

    #[test]
    fn each_built_in_kind_parses_into_its_typed_options() {
        let synthetic = RunnerSpec::parse(SYNTHETIC, json!({"duration_ms": 5})).unwrap();
        assert_eq!(synthetic, RunnerSpec::Synthetic(SyntheticOptions { duration_ms: 5, no_outcome_rate: 0.0 }));
        assert_eq!((synthetic.kind(), synthetic.runs_containers()), (SYNTHETIC, false));

        let agent = RunnerSpec::parse(AGENT, json!({"agent": "scripted", "fingerprints": "compare"})).unwrap();
        let RunnerSpec::Agent(options) = &agent else { panic!("{agent:?}") };
        assert_eq!(
            (options.agent.as_str(), options.fingerprints, options.memory_mb),
            ("scripted", FingerprintPolicy::Compare, 2048)
        );
        assert_eq!((agent.kind(), agent.runs_containers()), (AGENT, true));
        assert_eq!(agent.capability(), "agent:scripted");

        let mini = RunnerSpec::parse(MINI_SWE_AGENT, mini_swe_agent_options()).unwrap();
        let RunnerSpec::MiniSweAgent(options) = &mini else { panic!("{mini:?}") };
        assert_eq!(options.agent, MINI_SWE_AGENT);
        assert_eq!(options.model["model_name"], "openai/Qwen/Qwen3-32B");
        assert_eq!(mini.agent_options().map(|o| o.memory_mb), Some(4096));
        assert!(mini.options_json().get("agent").is_none(), "the adapter's name is not written out");
        assert_eq!(mini.capability(), "mini-swe-agent+net:bridge", "the recorded environment's network");
    }

    #[test]
    fn a_study_chooses_its_containers_network_and_needs_a_worker_offering_it() {
        use crate::runner::Network;
        let agent = |network: Option<&str>| {
            let mut options = json!({"agent": "scripted"});
            if let Some(n) = network {
                options["network"] = json!(n);
            }
            RunnerSpec::parse(AGENT, options).unwrap()
        };
        assert_eq!(agent(None).agent_options().unwrap().network, Network::None, "vcurve's own agents: no network");
        assert_eq!(agent(None).capability(), "agent:scripted");
        assert_eq!(agent(Some("bridge")).capability(), "agent:scripted+net:bridge");
        assert_eq!(agent(Some("proxy")).capability(), "agent:scripted+net:proxy");
        assert!(crate::runner::runs_containers("agent:scripted+net:proxy"));
        assert!(crate::runner::runs_containers("mini-swe-agent+net:bridge"));
        assert!(!crate::runner::runs_containers("synthetic+net:bridge"));

        let mut options = mini_swe_agent_options();
        options["network"] = json!("none");
        let mini = RunnerSpec::parse(MINI_SWE_AGENT, options.clone()).unwrap();
        assert_eq!(mini.capability(), "mini-swe-agent", "a study may take the network away");
        options["network"] = json!("proxy");
        assert_eq!(RunnerSpec::parse(MINI_SWE_AGENT, options).unwrap().capability(), "mini-swe-agent+net:proxy");
        // Stored and sent with the network in effect, so a worker runs what the study chose.
        let stored = serde_json::to_value(agent(Some("bridge"))).unwrap();
        assert_eq!(stored["options"]["network"], "bridge");
        assert_eq!(serde_json::from_value::<RunnerSpec>(stored).unwrap(), agent(Some("bridge")));

        for bad in [json!("host"), json!(1), json!("container:x")] {
            let e = RunnerSpec::parse(AGENT, json!({"agent": "x", "network": bad})).unwrap_err().to_string();
            assert!(e.contains("network must be `none`, `bridge` or `proxy`"), "{e}");
        }
    }

    #[test]
    fn an_unknown_kind_is_carried_as_written() {
        let options = json!({"model": {"name": "gpt-5.5"}, "retries": [1, 2]});
        let other = RunnerSpec::parse("my-agent", options.clone()).unwrap();
        assert_eq!(other, RunnerSpec::Other { kind: "my-agent".into(), options: options.clone() });
        assert_eq!((other.kind(), other.options_json(), other.runs_containers()), ("my-agent", options, false));
        let json = serde_json::to_value(&other).unwrap();
        assert_eq!(serde_json::from_value::<RunnerSpec>(json).unwrap(), other);
    }

    #[test]
    fn a_bad_option_is_refused_naming_it_and_its_runner() {
        for (kind, options, named) in [
            (SYNTHETIC, json!({"no_outcome_rate": 1.5}), "no_outcome_rate"),
            (SYNTHETIC, json!([1]), "synthetic runner options"),
            (AGENT, json!({"agent": "x", "memory_mb": 1}), "memory_mb"),
            (AGENT, json!({"agent": "x", "colour": "red"}), "colour"),
            (AGENT, json!({"command": ["sh", "-c", "id"]}), "command"),
            (MINI_SWE_AGENT, json!({"model": {"model_name": "m", "top_p": 2}}), "top_p"),
            (MINI_SWE_AGENT, json!({"model": {"model_name": "m"}, "command": ["python3"]}), "command"),
        ] {
            let e = RunnerSpec::parse(kind, options).unwrap_err();
            assert_eq!(e.kind, kind);
            assert!(e.to_string().contains(named) && e.to_string().contains(kind), "{e} should name {named}");
        }
        // A stored study whose options no longer parse is refused by serde with the same message.
        let e = serde_json::from_value::<RunnerSpec>(json!({"kind": "agent", "options": {"agent": ""}}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid agent runner options: agent"), "{e}");
    }

    #[test]
    fn the_stored_shape_is_kind_and_options_and_reads_what_older_stores_wrote() {
        // As the previous version stored them: the options as written, some left to defaults.
        for (old, kind) in [
            (r#"{"kind":"synthetic","options":{"duration_ms":2,"no_outcome_rate":0.01}}"#, SYNTHETIC),
            (r#"{"kind":"synthetic","options":{}}"#, SYNTHETIC),
            (
                r#"{"kind":"agent","options":{"command":["python3","-m","vcurve_agents.scripted"],"model":{"q":0.7}}}"#,
                AGENT,
            ),
            (
                r#"{"kind":"mini-swe-agent","options":{"model":{"model_name":"openai/Qwen/Qwen3-32B","top_p":0.8},"memory_mb":4096}}"#,
                MINI_SWE_AGENT,
            ),
            (r#"{"kind":"docker","options":{"image":"x"}}"#, "docker"),
        ] {
            let runner: RunnerSpec = serde_json::from_str(old).unwrap();
            assert_eq!(runner.kind(), kind, "{old}");
            if kind == AGENT {
                // Its host command is dropped: it names the legacy agent, which no worker offers.
                assert_eq!(runner.capability(), "agent:legacy-command", "{old}");
                assert!(serde_json::to_string(&runner).unwrap().find("vcurve_agents").is_none());
            }
            let stored = serde_json::to_value(&runner).unwrap();
            assert_eq!(stored["kind"], kind);
            assert!(stored["options"].is_object(), "{stored}");
            assert_eq!(serde_json::from_value::<RunnerSpec>(stored).unwrap(), runner, "{old} round-trips");
        }
        let runner: RunnerSpec =
            serde_json::from_str(r#"{"kind":"synthetic","options":{"duration_ms":2,"no_outcome_rate":0.01}}"#).unwrap();
        assert_eq!(runner, RunnerSpec::Synthetic(SyntheticOptions { duration_ms: 2, no_outcome_rate: 0.01 }));
        assert_eq!(
            serde_json::to_string(&runner).unwrap(),
            r#"{"kind":"synthetic","options":{"duration_ms":2,"no_outcome_rate":0.01}}"#
        );
    }
}
