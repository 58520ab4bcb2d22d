//! Where a worker finds the mini-swe-agent adapter it runs for the `mini-swe-agent` runner kind:
//! the virtual environment `scripts/mini-swe-agent-venv` makes (mini-swe-agent 2.4.6, the
//! paper's version) and the repository's `agents/` folder holding `vcurve_agents`.
//!
//! The worker checks both once, before it registers: a python that cannot import the adapter, or
//! has another mini-swe-agent version, is refused then with what to run, rather than failing
//! every run of a study.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vcurve_record::Interpreter;

use crate::runners::agents::{AgentRegistry, AgentUser, RegisteredAgent};
use crate::runners::python_env::PythonEnv;

/// The mini-swe-agent version the adapter is written for.
pub const VERSION: &str = "2.4.6";

/// The variables a study's `runner.env` may set for mini-swe-agent: a model endpoint's key and
/// address (`OPENAI_API_KEY`, `OPENAI_API_BASE`, …), litellm's and mini-swe-agent's own settings.
pub const ALLOWED_ENV: &[&str] = &["*_API_KEY", "*_API_BASE", "*_BASE_URL", "LITELLM_*", "MSWEA_*"];

/// The environment's python, relative to the worker's working directory, when none is named.
pub const DEFAULT_PYTHON: &str = ".venv/mini-swe-agent/bin/python";

/// The folder holding the `vcurve_agents` package, relative to the worker's working directory,
/// when none is named.
pub const DEFAULT_AGENTS_DIR: &str = "agents";

/// A checked adapter: its python and the folder on its `PYTHONPATH`, both absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniSweAgent {
    pub python: PathBuf,
    pub agents_dir: PathBuf,
}

impl MiniSweAgent {
    /// Find the adapter: `python` (or [`DEFAULT_PYTHON`]) and `agents_dir` (or
    /// [`DEFAULT_AGENTS_DIR`]). `Ok(None)` when neither was named and the default python does not
    /// exist (the worker then does not offer the kind); an error when a named one is missing.
    pub fn locate(python: Option<&Path>, agents_dir: Option<&Path>) -> Result<Option<MiniSweAgent>, String> {
        let named = python.is_some();
        let python = python.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_PYTHON));
        if !python.exists() {
            if named {
                return Err(format!(
                    "the mini-swe-agent python {} does not exist; create the environment with \
                     scripts/mini-swe-agent-venv (it prints the python's path)",
                    python.display()
                ));
            }
            return Ok(None);
        }
        let agents = agents_dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(DEFAULT_AGENTS_DIR));
        if !agents.join("vcurve_agents").join("mini_swe_agent.py").is_file() {
            return Err(format!(
                "{} holds no vcurve_agents/mini_swe_agent.py; point --agents-dir at the repository's agents/ folder",
                agents.display()
            ));
        }
        let absolute =
            |p: &Path, what: &str| std::path::absolute(p).map_err(|e| format!("the {what} {}: {e}", p.display()));
        Ok(Some(MiniSweAgent {
            python: absolute(&python, "mini-swe-agent python")?,
            agents_dir: absolute(&agents, "agents folder")?,
        }))
    }

    /// The agent the worker ships as `mini-swe-agent`: the environment's python running the
    /// adapter, `PYTHONPATH` the agents folder. A study may set the variables mini-swe-agent and
    /// litellm read for a model's endpoint and key ([`ALLOWED_ENV`]), and no other.
    pub fn registration(&self) -> RegisteredAgent {
        RegisteredAgent {
            command: vec![self.python.display().to_string(), "-m".into(), "vcurve_agents.mini_swe_agent".into()],
            env: BTreeMap::from([("PYTHONPATH".to_owned(), self.agents_dir.display().to_string())]),
            allow_env: ALLOWED_ENV.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The registry of the `mini-swe-agent` runner: [`MiniSweAgent::registration`] as
    /// `mini-swe-agent`, its processes run as `user` (`None`: the worker's).
    pub fn registry(&self, user: Option<AgentUser>) -> AgentRegistry {
        let mut registry = AgentRegistry::new()
            .with(vcurve_record::runner::MINI_SWE_AGENT, self.registration())
            .expect("the shipped mini-swe-agent registration is valid");
        registry.run_as(user);
        registry
    }

    /// The probe of the adapter's environment, run as `user`.
    fn env<'a>(&'a self, user: Option<&'a AgentUser>) -> PythonEnv<'a> {
        PythonEnv {
            user,
            python: &self.python,
            agents_dir: &self.agents_dir,
            what: "the mini-swe-agent adapter",
            make: "scripts/mini-swe-agent-venv",
        }
    }

    /// Import the adapter and mini-swe-agent with the environment's python and check the
    /// version; the error says what is wrong and what to run. Returns how mini-swe-agent's
    /// SWE-bench configuration runs commands (its `environment.interpreter` and `environment.env`:
    /// `bash -c` with `PAGER=cat`, `BASH_ENV=/root/.bashrc` — which activates a SWE-bench image's
    /// conda environment — …), the interpreter of the runs that start from `h_0`.
    ///
    /// The probe runs as `user`, the user the agent's processes will run as (`None`: the
    /// worker's), so an environment that user cannot run is refused here, at the worker's start.
    pub async fn check(&self, user: Option<&AgentUser>) -> Result<Interpreter, String> {
        let script = "import importlib.metadata as m, json, vcurve_agents.mini_swe_agent as a, minisweagent; \
                      e = a.swebench_config()['environment']; \
                      print(json.dumps({'version': m.version('mini-swe-agent'), \
                      'interpreter': e.get('interpreter', ['bash', '-c']), 'env': e.get('env', {})}))";
        let env = self.env(user);
        let stdout = env.probe(script).await?;
        #[derive(serde::Deserialize)]
        struct Found {
            version: String,
            interpreter: Vec<String>,
            env: BTreeMap<String, String>,
        }
        let found: Found = serde_json::from_str(&stdout).map_err(|e| {
            format!("{} printed no mini-swe-agent configuration ({e}): {stdout}", self.python.display())
        })?;
        env.pinned("mini-swe-agent", &found.version, VERSION)?;
        if found.interpreter.is_empty() {
            return Err(format!(
                "{}: mini-swe-agent's SWE-bench configuration names no interpreter",
                self.python.display()
            ));
        }
        Ok(Interpreter::mini_swe_agent(found.interpreter, found.env))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_python_that_is_missing_is_an_error() {
        let missing = Path::new("/nonexistent/venv/bin/python");
        let e = MiniSweAgent::locate(Some(missing), None).unwrap_err();
        assert!(e.contains("/nonexistent/venv/bin/python") && e.contains("scripts/mini-swe-agent-venv"), "{e}");
    }

    #[test]
    fn the_agents_folder_must_hold_the_adapter() {
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python");
        std::fs::write(&python, "").unwrap();
        let e = MiniSweAgent::locate(Some(&python), Some(dir.path())).unwrap_err();
        assert!(e.contains("vcurve_agents/mini_swe_agent.py"), "{e}");
        let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        let found = MiniSweAgent::locate(Some(&python), Some(&agents)).unwrap().unwrap();
        let agent = found.registration();
        assert_eq!(agent.command[1..], ["-m", "vcurve_agents.mini_swe_agent"]);
        assert!(Path::new(&agent.command[0]).is_absolute());
        assert!(Path::new(&agent.env["PYTHONPATH"]).is_absolute());
        assert!(agent.allows("OPENAI_API_KEY") && !agent.allows("PYTHONPATH") && !agent.allows("VCURVE_WORKER_TOKEN"));
        assert_eq!(found.registry(None).names(), ["mini-swe-agent"]);
    }

    /// With the real environment (scripts/test makes it and sets `VCURVE_MSA_PYTHON`): the
    /// version is checked and the SWE-bench configuration's interpreter comes back.
    #[tokio::test]
    async fn the_real_environment_passes_and_gives_the_swebench_interpreter() {
        let python = vcurve_testkit::require!(vcurve_testkit::require::Service::MiniSweAgent);
        let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        let adapter = MiniSweAgent::locate(Some(Path::new(&python)), Some(&agents)).unwrap().unwrap();
        let interpreter = adapter.check(None).await.unwrap();
        assert_eq!(interpreter.argv, ["bash", "-c"]);
        assert_eq!(interpreter.env.get("BASH_ENV").map(String::as_str), Some("/root/.bashrc"));
        assert_eq!(interpreter.env.get("PAGER").map(String::as_str), Some("cat"));
        // The environment scripts/mini-swe-agent-venv makes is one the default agent user can run
        // (a worker running as root starts the adapter as `nobody`).
        if crate::runners::agents::running_as_root() {
            let nobody = AgentUser::lookup(crate::runners::agents::DEFAULT_AGENT_USER).unwrap();
            assert_eq!(adapter.check(Some(&nobody)).await.unwrap(), interpreter);
        }
    }

    /// A python the agent user cannot reach (under a folder only root may enter, as pyenv's is
    /// under /root) is refused at the check, naming the user and what to do, not at every run.
    #[tokio::test]
    async fn a_python_the_agent_user_cannot_run_is_refused_at_the_check() {
        if !crate::runners::agents::running_as_root() {
            eprintln!("skipped: needs root, to run the probe as another user");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let private = tempfile::tempdir().unwrap();
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let python = private.path().join("python");
        std::fs::write(
            &python,
            "#!/bin/sh\necho '{\"version\": \"2.4.6\", \"interpreter\": [\"bash\", \"-c\"], \"env\": {}}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        let adapter = MiniSweAgent::locate(Some(&python), Some(&agents)).unwrap().unwrap();
        assert_eq!(adapter.check(None).await.unwrap().argv, ["bash", "-c"], "root runs it");
        let nobody = AgentUser::lookup(crate::runners::agents::DEFAULT_AGENT_USER).unwrap();
        let e = adapter.check(Some(&nobody)).await.unwrap_err();
        assert!(e.contains("as the agent user nobody") && e.contains("Permission denied"), "{e}");
        assert!(e.contains("PYTHON=/usr/bin/python3") && e.contains("scripts/mini-swe-agent-venv"), "{e}");
    }
}
