//! The agents a worker's operator registered, and how their processes start.
//!
//! A study names an agent (`runner: {kind: agent, agent: NAME}`); it never names a command. Each
//! worker offers the agents its operator registered — from a file (`vcurve worker --agents FILE`)
//! and flags (`--agent NAME=CMD`, `--agent scripted` for the shipped scripted agent) — and tells
//! the coordinator their names when it registers, so a study goes only to workers that offer its
//! agent. Each registration is:
//!
//! - `command`: the argument vector the worker runs (its working directory is the worker's);
//! - `env`: the agent's own variables, fixed by the operator;
//! - `allow_env`: the variable names a study's `runner.env` may set for it (`NAME`, or a pattern
//!   with one `*` at either end: `*_API_KEY`, `LITELLM_*`); a study setting any other is refused
//!   at the worker as a no-outcome naming the variable.
//!
//! An agent process's environment is built from an allow-list ([`agent_environment`]): `PATH`,
//! `HOME`, `LANG`, `LC_*` and `TZ` from the worker's own environment, then the registration's `env`,
//! then the study's allowed `env`; nothing else of the worker's environment (its
//! `VCURVE_WORKER_TOKEN` in particular) reaches it. With an agent user ([`AgentUser`], `vcurve
//! worker --agent-user`), the process runs as that user, with no supplementary groups (so not the
//! `docker` group) and `HOME` a directory of its own: it cannot reach the Docker socket, and talks
//! to the worker only over its stdin and stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use vcurve_record::runner::{AgentOptions, check_agent_name};

use crate::runners::agent::AgentCommand;
pub use crate::runners::agent_env::{INHERITED, inherited, process_environment, worker_environment};

/// The name of the shipped scripted known-truth agent (`agents/vcurve_agents/scripted.py`).
pub const SCRIPTED: &str = "scripted";

/// The python the scripted agent runs with when it exists (it needs only the standard library).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// The user agent processes run as when the worker runs as root and none is named.
pub const DEFAULT_AGENT_USER: &str = "nobody";

/// One agent an operator registered (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisteredAgent {
    /// The argument vector, e.g. `[python3, -m, vcurve_agents.scripted]`.
    pub command: Vec<String>,
    /// The agent's own variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The variable names (or `*` patterns) a study's `runner.env` may set.
    #[serde(default)]
    pub allow_env: BTreeSet<String>,
}

impl RegisteredAgent {
    /// The shipped scripted agent with the `vcurve_agents` package in `agents_dir` (made
    /// absolute): `python3 -m vcurve_agents.scripted` ([`SYSTEM_PYTHON`] when it exists),
    /// `PYTHONPATH` the folder; a study may set no variable.
    pub fn scripted(agents_dir: &Path) -> Result<RegisteredAgent, String> {
        let dir =
            std::path::absolute(agents_dir).map_err(|e| format!("the agents folder {}: {e}", agents_dir.display()))?;
        if !dir.join("vcurve_agents").join("scripted.py").is_file() {
            return Err(format!(
                "{} holds no vcurve_agents/scripted.py; point --agents-dir at the repository's agents/ folder",
                dir.display()
            ));
        }
        // The system's python when there is one: an agent user can run it, where a `python3`
        // first on the worker's PATH may live under the worker's home (pyenv under /root).
        let python = if Path::new(SYSTEM_PYTHON).is_file() { SYSTEM_PYTHON } else { "python3" };
        Ok(RegisteredAgent {
            command: vec![python.into(), "-m".into(), "vcurve_agents.scripted".into()],
            env: BTreeMap::from([("PYTHONPATH".into(), dir.display().to_string())]),
            allow_env: BTreeSet::new(),
        })
    }

    /// Whether a study may set the variable `name` for this agent.
    pub fn allows(&self, name: &str) -> bool {
        self.allow_env.iter().any(|pattern| match (pattern.strip_prefix('*'), pattern.strip_suffix('*')) {
            (Some(suffix), _) => name.ends_with(suffix),
            (_, Some(prefix)) => name.starts_with(prefix),
            _ => pattern == name,
        })
    }

    fn check(&self, name: &str) -> Result<(), String> {
        check_agent_name(name).map_err(|e| format!("the agent {e}"))?;
        if self.command.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(format!(
                "the agent {name}: command must name a program, e.g. [python3, -m, vcurve_agents.scripted]"
            ));
        }
        for var in self.env.keys() {
            check_variable_name(var).map_err(|e| format!("the agent {name}: env: {e}"))?;
        }
        for pattern in &self.allow_env {
            let bare = pattern.trim_start_matches('*').trim_end_matches('*');
            if bare.is_empty() || pattern.matches('*').count() > 1 || bare.contains('*') {
                return Err(format!(
                    "the agent {name}: allow_env: {pattern:?} is not a variable name or a pattern with one `*` at an end"
                ));
            }
            check_variable_name(bare).map_err(|e| format!("the agent {name}: allow_env: {e}"))?;
        }
        Ok(())
    }
}

/// A variable name: ASCII letters, digits and `_`, not starting with a digit.
fn check_variable_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok { Ok(()) } else { Err(format!("{name:?} is not a variable name")) }
}

/// The unprivileged user agent processes run as (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUser {
    /// As named (`nobody`, or `UID:GID`).
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// The agent processes' `HOME`: the user's own when it exists, else one the worker made.
    pub home: PathBuf,
}

impl AgentUser {
    /// The user `spec`: a name in `/etc/passwd`, or `UID:GID`. Its home is the one `/etc/passwd`
    /// gives when that directory exists; otherwise (`nobody`'s is `/nonexistent`) a directory of
    /// the system's temporary folder the worker makes for it (`vcurve-agent-home.UID`, mode 0700,
    /// owned by the user).
    pub fn lookup(spec: &str) -> Result<AgentUser, String> {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let mut user = Self::lookup_in(&passwd, spec)?;
        if !user.home.is_dir() {
            user.home = std::env::temp_dir().join(format!("vcurve-agent-home.{}", user.uid));
            make_home(&user.home, user.uid, user.gid)
                .map_err(|e| format!("the agent user {spec}: cannot make its home {}: {e}", user.home.display()))?;
        }
        Ok(user)
    }

    /// [`AgentUser::lookup`] in the text of a passwd file, without making a home.
    pub fn lookup_in(passwd: &str, spec: &str) -> Result<AgentUser, String> {
        if let Some((uid, gid)) = spec.split_once(':') {
            let id = |s: &str| s.parse::<u32>().map_err(|_| format!("the agent user {spec:?}: {s:?} is not a number"));
            let (uid, gid) = (id(uid)?, id(gid)?);
            let home = passwd
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 7 && f[2] == uid.to_string())
                .map(|f| PathBuf::from(f[5]))
                .unwrap_or_else(|| PathBuf::from("/nonexistent"));
            return Ok(AgentUser { name: spec.to_owned(), uid, gid, home });
        }
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() >= 7 && f[0] == spec {
                let id = |s: &str| s.parse::<u32>().map_err(|_| format!("/etc/passwd: the user {spec} has id {s:?}"));
                return Ok(AgentUser {
                    name: spec.to_owned(),
                    uid: id(f[2])?,
                    gid: id(f[3])?,
                    home: PathBuf::from(f[5]),
                });
            }
        }
        Err(format!("the agent user {spec:?} is not in /etc/passwd; name an existing user or give UID:GID"))
    }
}

fn make_home(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Whether this process runs as root (its effective user): a worker that does runs its agents as
/// an agent user.
pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The agents a worker offers, and the user their processes run as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentRegistry {
    agents: BTreeMap<String, RegisteredAgent>,
    user: Option<AgentUser>,
}

/// The registry file's shape: `agents: {NAME: {command, env, allow_env}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsFile {
    agents: BTreeMap<String, RegisteredAgent>,
}

impl AgentRegistry {
    /// No agent.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register `agent` as `name` (builder style); the error names what is wrong.
    pub fn with(mut self, name: &str, agent: RegisteredAgent) -> Result<Self, String> {
        self.register(name, agent)?;
        Ok(self)
    }

    /// Register `agent` as `name`; a name registered twice is refused.
    pub fn register(&mut self, name: &str, agent: RegisteredAgent) -> Result<(), String> {
        agent.check(name)?;
        if self.agents.contains_key(name) {
            return Err(format!("the agent {name} is registered twice"));
        }
        self.agents.insert(name.to_owned(), agent);
        Ok(())
    }

    /// Register every agent of a registry file's text (YAML, see the module docs); `origin`
    /// names the file in errors.
    pub fn register_file(&mut self, text: &str, origin: &str) -> Result<(), String> {
        let file: AgentsFile = serde_norway::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        for (name, agent) in file.agents {
            self.register(&name, agent).map_err(|e| format!("{origin}: {e}"))?;
        }
        Ok(())
    }

    /// Register one `--agent` flag: `NAME=COMMAND LINE` (split as a POSIX shell would, without
    /// running one), or `scripted` alone for the shipped scripted agent in `agents_dir`.
    pub fn register_flag(&mut self, flag: &str, agents_dir: &Path) -> Result<(), String> {
        let agent = match flag.split_once('=') {
            None if flag == SCRIPTED => RegisteredAgent::scripted(agents_dir)?,
            None => {
                return Err(format!(
                    "--agent {flag}: give NAME=COMMAND (e.g. my-agent='python3 -m my_agent'), or `scripted`"
                ));
            }
            Some((name, line)) => {
                let command = shlex::split(line)
                    .ok_or_else(|| format!("--agent {flag}: the command line has an unbalanced quote"))?;
                return self
                    .register(name, RegisteredAgent { command, env: BTreeMap::new(), allow_env: BTreeSet::new() })
                    .map_err(|e| format!("--agent {flag}: {e}"));
            }
        };
        self.register(SCRIPTED, agent).map_err(|e| format!("--agent {flag}: {e}"))
    }

    /// Run every agent process as `user` (`None`: as the worker's user).
    pub fn run_as(&mut self, user: Option<AgentUser>) {
        self.user = user;
    }

    /// The user agent processes run as, if not the worker's.
    pub fn user(&self) -> Option<&AgentUser> {
        self.user.as_ref()
    }

    /// The names offered, sorted.
    pub fn names(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }

    /// The agent registered as `name`.
    pub fn get(&self, name: &str) -> Option<&RegisteredAgent> {
        self.agents.get(name)
    }

    /// Whether no agent is registered.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    /// The process of a run of the study's agent: the registration of `options.agent`, with the
    /// environment [`agent_environment`] builds. An error (a no-outcome) when this worker does not
    /// offer the agent or the study sets a variable the registration does not allow.
    pub fn command(&self, options: &AgentOptions) -> Result<AgentCommand, String> {
        let agent = self.agents.get(&options.agent).ok_or_else(|| {
            format!(
                "this worker offers no agent {:?} (it offers: {})",
                options.agent,
                if self.agents.is_empty() { "none".to_owned() } else { self.names().join(", ") }
            )
        })?;
        let home = self.user.as_ref().map(|u| u.home.as_path());
        // What the process adds to the worker's inherited variables ([`process_environment`]).
        let env = agent_environment(&options.agent, agent, &options.env, [], home)?;
        Ok(AgentCommand {
            argv: agent.command.clone(),
            env,
            cwd: None,
            user: self.user.as_ref().map(|u| (u.uid, u.gid)),
        })
    }
}

/// The whole environment of a process of the agent `name` registered as `agent`: the inherited
/// variables of `worker` ([`inherited`]; `HOME` replaced by `home` when given), then the
/// registration's `env`, then the study's `study_env` — each of whose names the registration must
/// allow, or the error names the variable.
pub fn agent_environment(
    name: &str,
    agent: &RegisteredAgent,
    study_env: &BTreeMap<String, String>,
    worker: impl IntoIterator<Item = (String, String)>,
    home: Option<&Path>,
) -> Result<BTreeMap<String, String>, String> {
    if let Some(refused) = study_env.keys().find(|k| !agent.allows(k)) {
        return Err(format!(
            "runner.env sets {refused}, which this worker's registration of the agent {name} does not allow \
             (it allows: {})",
            if agent.allow_env.is_empty() {
                "none".to_owned()
            } else {
                agent.allow_env.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        ));
    }
    let mut env: BTreeMap<String, String> = worker.into_iter().filter(|(k, _)| inherited(k)).collect();
    if let Some(home) = home {
        env.insert("HOME".into(), home.display().to_string());
    }
    env.extend(agent.env.clone());
    env.extend(study_env.clone());
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(allow: &[&str]) -> RegisteredAgent {
        RegisteredAgent {
            command: vec!["python3".into(), "-m".into(), "a".into()],
            env: BTreeMap::from([("PYTHONPATH".into(), "/opt/agents".into())]),
            allow_env: allow.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn worker_env() -> Vec<(String, String)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/root"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("VCURVE_WORKER_TOKEN", "worker-secret"),
            ("VCURVE_CLIENT_TOKEN", "client-secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("DOCKER_HOST", "unix:///var/run/docker.sock"),
            ("LD_PRELOAD", "/tmp/x.so"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn the_environment_is_the_allow_list_and_never_the_workers_secrets() {
        let study = BTreeMap::from([("OPENAI_API_KEY".to_string(), "sk".to_string())]);
        let env = agent_environment("a", &agent(&["*_API_KEY"]), &study, worker_env(), None).unwrap();
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(names, ["HOME", "LANG", "LC_ALL", "OPENAI_API_KEY", "PATH", "PYTHONPATH"]);
        assert_eq!(env["HOME"], "/root");
        let home = Path::new("/tmp/vcurve-agent-home.65534");
        let env = agent_environment("a", &agent(&[]), &BTreeMap::new(), worker_env(), Some(home)).unwrap();
        assert_eq!(env["HOME"], "/tmp/vcurve-agent-home.65534");
        assert!(!env.contains_key("VCURVE_WORKER_TOKEN") && !env.contains_key("DOCKER_HOST"));
    }

    #[test]
    fn a_study_variable_the_registration_does_not_allow_is_refused_naming_it() {
        for (allow, var) in [
            (&[][..], "LD_PRELOAD"),
            (&["OPENAI_API_KEY"][..], "PATH"),
            (&["*_API_KEY"][..], "VCURVE_WORKER_TOKEN"),
            (&["LITELLM_*"][..], "PYTHONPATH"),
        ] {
            let study = BTreeMap::from([(var.to_string(), "x".to_string())]);
            let e = agent_environment("a", &agent(allow), &study, worker_env(), None).unwrap_err();
            assert!(e.contains(var) && e.contains("runner.env") && e.contains("agent a"), "{e}");
        }
        assert!(agent(&["LITELLM_*"]).allows("LITELLM_LOG") && agent(&["X"]).allows("X"));
        assert!(!agent(&["X"]).allows("XY"));
    }

    #[test]
    fn registrations_are_read_from_a_file_and_flags_and_bad_ones_are_named() {
        let mut r = AgentRegistry::new();
        let file = "agents:\n  my-agent:\n    command: [python3, -m, my_agent]\n    env: {MY_MODE: fast}\n    \
                    allow_env: [OPENAI_API_KEY, 'LITELLM_*']\n";
        r.register_file(file, "agents.yaml").unwrap();
        let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
        r.register_flag("scripted", &agents).unwrap();
        r.register_flag("other=/opt/other/bin/agent --mode 'a b'", &agents).unwrap();
        assert_eq!(r.names(), ["my-agent", "other", "scripted"]);
        assert_eq!(r.get("other").unwrap().command, ["/opt/other/bin/agent", "--mode", "a b"]);
        assert!(Path::new(&r.get("scripted").unwrap().env["PYTHONPATH"]).is_absolute());
        for (file, named) in [
            ("agents:\n  bad name:\n    command: [x]\n", "bad name"),
            ("agents:\n  a:\n    command: []\n", "command"),
            ("agents:\n  a:\n    command: [x]\n    colour: red\n", "colour"),
            ("agents:\n  a:\n    command: [x]\n    allow_env: ['*']\n", "allow_env"),
            ("agents:\n  a:\n    command: [x]\n    env: {'A-B': x}\n", "A-B"),
            ("agent: {}\n", "agent"),
        ] {
            let e = AgentRegistry::new().register_file(file, "agents.yaml").unwrap_err();
            assert!(e.contains("agents.yaml") && e.contains(named), "{file}: {e}");
        }
        for (flag, named) in [("my-agent", "NAME=COMMAND"), ("a='x", "quote"), ("scripted", "twice")] {
            let e = r.register_flag(flag, &agents).unwrap_err();
            assert!(e.contains(named), "{flag}: {e}");
        }
        let e = AgentRegistry::new().register_flag("scripted", Path::new("/nonexistent")).unwrap_err();
        assert!(e.contains("--agents-dir"), "{e}");
    }

    #[test]
    fn a_study_gets_its_registered_agent_or_a_reason() {
        let registry = AgentRegistry::new().with("a", agent(&[])).unwrap();
        let options = |name: &str| AgentOptions::from_json(&serde_json::json!({"agent": name})).unwrap();
        let command = registry.command(&options("a")).unwrap();
        assert_eq!((command.argv[0].as_str(), command.user), ("python3", None));
        assert_eq!(command.env["PYTHONPATH"], "/opt/agents");
        let e = registry.command(&options("b")).unwrap_err();
        assert!(e.contains("offers no agent \"b\"") && e.contains("it offers: a"), "{e}");
    }

    #[test]
    fn agent_users_come_from_passwd_or_ids() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let nobody = AgentUser::lookup_in(passwd, "nobody").unwrap();
        assert_eq!((nobody.uid, nobody.gid, nobody.home.as_path()), (65534, 65534, Path::new("/nonexistent")));
        assert_eq!(AgentUser::lookup_in(passwd, "1000:1000").unwrap().uid, 1000);
        assert!(AgentUser::lookup_in(passwd, "ghost").unwrap_err().contains("ghost"));
        assert!(AgentUser::lookup_in(passwd, "x:1").unwrap_err().contains("\"x\""));
    }
}
