//! The start-up probe of a pinned Python environment (the mini-swe-agent adapter's, the SWE-bench
//! harness's): run a short script with the environment's python and the agents package on
//! `PYTHONPATH`, so that a worker refuses a broken environment once, at its start, with what is
//! wrong and the script that makes the environment, rather than fail every job.

use std::path::Path;
use std::time::Duration;

/// How long an import of a heavy package (litellm, the harness) may take on a busy machine.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// A pinned environment: its python, the folder holding `vcurve_agents`, what the probe imports
/// (for messages) and the script that (re)creates it.
pub(crate) struct PythonEnv<'a> {
    pub python: &'a Path,
    pub agents_dir: &'a Path,
    pub what: &'a str,
    pub make: &'a str,
}

impl PythonEnv<'_> {
    /// Run `python -c script`; its stdout, trimmed. A python that cannot be run, that times out or
    /// fails (named by the last line of its stderr) is an error naming it and the script to run.
    pub async fn probe(&self, script: &str) -> Result<String, String> {
        let python = self.python.display();
        let mut child = tokio::process::Command::new(self.python);
        child.arg("-c").arg(script).env("PYTHONPATH", self.agents_dir).kill_on_drop(true);
        let output = tokio::time::timeout(PROBE_TIMEOUT, child.output())
            .await
            .map_err(|_| format!("{python} did not import {} within {} s", self.what, PROBE_TIMEOUT.as_secs()))?
            .map_err(|e| {
                format!("cannot run the python of {} {python}: {e}; create it with {}", self.what, self.make)
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            return Err(format!(
                "{python} cannot import {} ({last}) with PYTHONPATH={}; recreate the environment with {}",
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
