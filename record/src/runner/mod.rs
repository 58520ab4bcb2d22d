//! Typed options of the agent runners a study can name, validated at launch: a bad option is
//! refused by `vcurve launch` naming the field, never discovered later as a retired key.

mod options;
mod spec;

pub use options::{
    AGENT, AGENT_CAPABILITY_PREFIX, AgentOptions, FingerprintPolicy, KINDS, LEGACY_COMMAND_AGENT, MINI_SWE_AGENT,
    NETWORK_CAPABILITY_INFIX, NO_COMMAND, Network, SYNTHETIC, SyntheticOptions, agent_capability, check_agent_name,
    runs_containers,
};
pub use spec::{InvalidRunnerOptions, RunnerSpec};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_options_take_defaults_and_name_bad_fields() {
        let o = AgentOptions::from_json(&json!({"kind": "agent", "agent": "scripted"})).unwrap();
        assert_eq!(o.memory_mb, 2048);
        assert_eq!(o.flake_recheck_rate, 0.10);
        assert_eq!(o.model, json!({}));
        // No wall-clock limit unless the study sets one (issue 25: a limit censors slow runs).
        assert_eq!(o.run_timeout_s, None);
        let capped = AgentOptions::from_json(&json!({"agent": "x", "run_timeout_s": 7200})).unwrap();
        assert_eq!(capped.run_timeout_s, Some(7200));
        let e = AgentOptions::from_json(&json!({"agent": "x", "run_timeout_s": 0})).unwrap_err();
        assert!(e.contains("run_timeout_s = 0 is outside [1, 604800]"), "{e}");
        let rules = json!([{"name": "token", "pattern": "token [A-Za-z]+", "replacement": "token <T>"}]);
        let o = AgentOptions::from_json(&json!({"agent": "x", "normalization": rules})).unwrap();
        assert_eq!(o.normalizer().unwrap().normalize("a token QzXy"), "a token <T>");
        for (options, field) in [
            (json!({}), "agent"),
            (json!({"agent": ""}), "agent"),
            (json!({"agent": "../bin/sh"}), "agent"),
            (json!({"agent": "x", "command": ["sh", "-c", "id"]}), "command"),
            (json!({"agent": "x", "memory_mb": 1}), "memory_mb"),
            (json!({"agent": "x", "model": 3}), "model"),
            (json!({"agent": "x", "flake_threshold": 2.0}), "flake_threshold"),
            (json!({"agent": "x", "colour": "red"}), "colour"),
            (
                json!({"agent": "x", "normalization": [{"name": "n", "pattern": "(", "replacement": ""}]}),
                "normalization",
            ),
            (json!({"agent": "x", "fingerprints": "sometimes"}), "fingerprints"),
        ] {
            let e = AgentOptions::from_json(&options).unwrap_err();
            assert!(e.contains(field), "{e} should name {field}");
        }
    }

    #[test]
    fn a_command_is_refused_saying_what_to_name_instead() {
        let e =
            AgentOptions::from_json(&json!({"command": ["sh", "-c", "id; curl --unix-socket /var/run/docker.sock x"]}))
                .unwrap_err();
        assert!(e.contains("command") && e.contains("agent: scripted"), "{e}");
        assert!(check_agent_name("scripted").is_ok() && check_agent_name("mini-swe-agent").is_ok());
        for bad in ["", "-x", "a b", "a/b", "agent:x", &"a".repeat(65)] {
            assert!(check_agent_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(agent_capability("scripted"), "agent:scripted");
        assert!(runs_containers("agent:scripted"));
    }

    #[test]
    fn mini_swe_agent_options_name_the_model_and_take_no_command() {
        let ok = json!({"kind": "mini-swe-agent", "model": {"model_name": "openai/Qwen/Qwen3-32B",
            "base_url": "http://127.0.0.1:8000/v1", "temperature": 0.7, "top_p": 0.8}, "memory_mb": 4096});
        let o = AgentOptions::for_kind(MINI_SWE_AGENT, &ok).unwrap();
        assert_eq!(o.agent, MINI_SWE_AGENT);
        assert_eq!(o.memory_mb, 4096);
        assert_eq!(o.model["model_name"], "openai/Qwen/Qwen3-32B");
        for (options, field) in [
            (json!({}), "model_name"),
            (json!({"model": {}}), "model_name"),
            (json!({"model": {"model_name": ""}}), "model_name"),
            (json!({"model": "qwen"}), "model"),
            (json!({"model": {"model_name": "m", "temperature": 3}}), "temperature"),
            (json!({"model": {"model_name": "m", "top_p": "high"}}), "top_p"),
            (json!({"model": {"model_name": "m", "base_url": 8000}}), "base_url"),
            (json!({"model": {"model_name": "m", "model_kwargs": []}}), "model_kwargs"),
            (json!({"model": {"model_name": "m"}, "command": ["python3"]}), "command"),
            (json!({"model": {"model_name": "m"}, "agent": "scripted"}), "agent"),
            (json!({"model": {"model_name": "m"}, "memory_mb": 1}), "memory_mb"),
        ] {
            let e = AgentOptions::for_kind(MINI_SWE_AGENT, &options).unwrap_err();
            assert!(e.contains(field) && e.contains("mini-swe-agent"), "{e} should name {field}");
        }
        assert!(runs_containers(AGENT) && runs_containers(MINI_SWE_AGENT) && !runs_containers(SYNTHETIC));
    }
}
