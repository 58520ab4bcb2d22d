//! The start-up probe of a pinned Python environment (the mini-swe-agent adapter's, the SWE-bench
//! harness's): run a short script with the environment's python and the agents package on
//! `PYTHONPATH`, so that a worker refuses a broken environment once, at its start, with what is
//! wrong and the script that makes the environment, rather than fail every job.

use std::path::Path;
use std::time::Duration;

use crate::runners::agents::AgentUser;

/// How long an import of a heavy package (litellm, the harness) may take on a busy machine: a
/// cold import of the harness took over 120 s on a 2-core host running other builds, and a worker
/// refusing to start for a slow disk is worse than one starting late.
const PROBE_TIMEOUT: Duration = Duration::from_secs(600);

/// A pinned environment: its python, the folder holding `vcurve_agents`, what the probe imports
/// (for messages) and the script that (re)creates it.
pub(crate) struct PythonEnv<'a> {
    pub python: &'a Path,
    pub agents_dir: &'a Path,
    pub what: &'a str,
    pub make: &'a str,
    /// The user the environment's programs run as (the agent user), when not the worker's: the
    /// probe runs as it, so an environment that user cannot read (a virtual environment whose
    /// python links into root's private home) is refused at start rather than at every run.
    pub user: Option<&'a AgentUser>,
}

impl PythonEnv<'_> {
    /// Run `python -c script`; its stdout, trimmed. A python that cannot be run, that times out or
    /// fails (named by the last line of its stderr) is an error naming it and the script to run.
    pub async fn probe(&self, script: &str) -> Result<String, String> {
        let python = self.python.display();
        let mut child = tokio::process::Command::new(self.python);
        child.arg("-c").arg(script).env("PYTHONPATH", self.agents_dir).kill_on_drop(true);
        let user = match self.user {
            Some(user) => {
                // As root, std drops the supplementary groups (setgroups) before switching, as for
                // the agent's own process.
                child.uid(user.uid).gid(user.gid).env("HOME", &user.home);
                format!(" as the agent user {}", user.name)
            }
            None => String::new(),
        };
        let output = tokio::time::timeout(PROBE_TIMEOUT, child.output())
            .await
            .map_err(|_| format!("{python} did not import {} within {} s", self.what, PROBE_TIMEOUT.as_secs()))?
            .map_err(|e| {
                let hint = if self.user.is_some() && e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (the agent user must be able to read the environment and every folder above it: \
                     a virtual environment made from a python under a private home, such as pyenv's \
                     under /root, is not; make it with the system's python, PYTHON=/usr/bin/python3)"
                } else {
                    ""
                };
                format!(
                    "cannot run the python of {} {python}{user}: {e}{hint}; create it with {}",
                    self.what, self.make
                )
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            return Err(format!(
                "{python}{user} cannot import {} ({last}) with PYTHONPATH={}; recreate the environment with {}",
                self.what,
                self.agents_dir.display(),
                self.make
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// `found` must be the pinned `version` of `package`, which the code here is written for.
    pub fn pinned(&self, package: &str, found: &str, version: &str) -> Result<(), String> {
        if found == version {
            return Ok(());
        }
        Err(format!(
            "{} has {package} {found}; {} is written for {version} (the paper's): recreate the environment with {}",
            self.python.display(),
            self.what,
            self.make
        ))
    }
}
