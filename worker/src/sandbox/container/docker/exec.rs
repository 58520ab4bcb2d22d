//! Commands in a container: the wrapper every command runs under, the kill of what a command
//! leaves behind, and the exec that reads a command's output until it returns or its timeout runs
//! out (the parent module's docs, "Commands").

use std::time::{Duration, Instant};

use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::StreamExt;

use super::engine::{container_error, engine, start_failure, status};
use super::output::{Collector, Header, OUTPUT_CAP, glob_escape};
use super::{DockerRuntime, ExecOutput, ExecRequest, RuntimeError};

/// The wrapper every command runs under (`sh -c WRAPPER vcurve-exec ARGV...`); see the module docs.
/// `/proc/$$/stat` field 5 is the process group.
pub const WRAPPER: &str = r#"exec 2>&1
read -r _ _ _ _ g _ < /proc/$$/stat
if [ "$g" = "$$" ]; then
  printf 'vcurve-exec %s %s\n' "$$" "$(readlink /proc/$$/fd/1 2>/dev/null || echo -)"
  exec "$@"
fi
exec setsid -w sh -c 'printf "vcurve-exec %s %s\n" "$$" "$(readlink /proc/$$/fd/1 2>/dev/null || echo -)"
exec "$@"' vcurve-exec "$@"
"#;

/// Kills process group `$1` and every process holding the output `$2` (a `find -lname` pattern;
/// `-` for none), again and again until none is left (at most ~10 s; init reaps them, so zombies
/// do not stay). Exit 0 when none is left.
pub const KILL_SCRIPT: &str = r#"pg=$1; pipe=$2; i=0
while :; do
  alive=
  if kill -s 0 -- "-$pg" 2>/dev/null; then alive=1; kill -s KILL -- "-$pg" 2>/dev/null; fi
  [ "$pipe" = - ] || for f in $(find /proc/[0-9]*/fd -maxdepth 1 -lname "$pipe" 2>/dev/null); do
    p=${f#/proc/}; p=${p%%/*}
    if [ "$p" != "$$" ]; then alive=1; kill -s KILL -- "$p" 2>/dev/null; fi
  done
  [ -z "$alive" ] && exit 0
  i=$((i+1))
  if [ "$i" -ge 200 ]; then echo "process group $pg still alive after SIGKILL"; exit 1; fi
  sleep 0.05
done
"#;

/// How long an exec waits for its header after its timeout ran out before giving up on it.
const HEADER_GRACE: Duration = Duration::from_secs(5);
/// How long the output of a killed command is still read after the kill.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How soon, and then how often at most, an exec asks the engine whether the command's own
/// process has returned while its output is still open (the interval doubles in between).
const EXIT_POLL_FIRST: Duration = Duration::from_millis(50);
const EXIT_POLL_MAX: Duration = Duration::from_secs(1);
/// How long a command killed by SIGKILL waits to see whether its container is dying as a whole.
const DEATH_GRACE: Duration = Duration::from_millis(500);
/// How long the kill of a command's leftovers is tried again when its exec cannot start.
const KILL_RETRY: Duration = Duration::from_secs(5);

impl DockerRuntime {
    /// Run `argv` as it is (no wrapper, no timeout), wait for its end: (output, exit code).
    pub(super) async fn run_plain(
        &self,
        container: &str,
        argv: Vec<String>,
    ) -> Result<(Vec<u8>, Option<i64>), RuntimeError> {
        let options = CreateExecOptions {
            cmd: Some(argv),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, options).await.map_err(|e| container_error(container, e))?;
        let mut output = Vec::new();
        match self.docker.start_exec(&exec.id, None).await.map_err(|e| container_error(container, e))? {
            StartExecResults::Attached { output: mut stream, .. } => {
                while let Some(item) = stream.next().await {
                    let chunk = item.map_err(engine)?.into_bytes();
                    let room = OUTPUT_CAP.saturating_sub(output.len());
                    output.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
            }
            StartExecResults::Detached => {}
        }
        let exit_code = self.exit_code(container, &exec.id).await?;
        Ok((output, exit_code))
    }

    /// The exit code of a finished exec (it may still show as running for a moment after its
    /// stream ended).
    async fn exit_code(&self, container: &str, exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        let start = Instant::now();
        loop {
            let inspect = self.docker.inspect_exec(exec_id).await.map_err(|e| container_error(container, e))?;
            if inspect.running != Some(true) || start.elapsed() > Duration::from_secs(5) {
                return Ok(inspect.exit_code);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the container is still running; a container that is gone is `false`.
    pub(super) async fn running(&self, container: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_container(container, None).await {
            Ok(inspect) => Ok(inspect.state.and_then(|s| s.running).unwrap_or(false)),
            Err(e) if status(&e) == Some(404) => Ok(false),
            Err(e) => Err(engine(e)),
        }
    }

    /// Whether the container stops running within [`DEATH_GRACE`].
    async fn dies_soon(&self, container: &str) -> Result<bool, RuntimeError> {
        let start = Instant::now();
        loop {
            if !self.running(container).await? {
                return Ok(true);
            }
            if start.elapsed() >= DEATH_GRACE {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) async fn exec_impl(&self, container: &str, request: &ExecRequest) -> Result<ExecOutput, RuntimeError> {
        if request.argv.is_empty() {
            return Err(RuntimeError::Engine("an exec needs a command (empty argv)".to_owned()));
        }
        let deadline = tokio::time::Instant::now() + request.timeout;
        let mut cmd = vec!["sh".to_owned(), "-c".to_owned(), WRAPPER.to_owned(), "vcurve-exec".to_owned()];
        cmd.extend(request.argv.iter().cloned());
        let options = CreateExecOptions {
            cmd: Some(cmd),
            env: Some(request.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            working_dir: if request.workdir.is_empty() { None } else { Some(request.workdir.clone()) },
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            ..Default::default()
        };
        let exec = self.docker.create_exec(container, options).await.map_err(|e| container_error(container, e))?;
        let started = self.docker.start_exec(&exec.id, None).await.map_err(|e| container_error(container, e))?;
        let StartExecResults::Attached { output: mut stream, .. } = started else {
            return Err(RuntimeError::Engine("the engine started an attached exec detached".to_owned()));
        };
        let mut collector = Collector::default();
        let mut timed_out = false;
        // Whether the command's own process ended while its output was still open (a background
        // child holds it): what is left of it is killed at once instead of waiting for the engine
        // to give up on the stream.
        let mut returned = false;
        let mut poll = EXIT_POLL_FIRST;
        let mut next_poll = tokio::time::Instant::now() + poll;
        loop {
            // Under `leave_running` the exec ends as a plain `docker exec` does: when the engine
            // closes the output, whoever holds it.
            let polling = collector.header.is_some() && !request.leave_running;
            tokio::select! {
                item = tokio::time::timeout_at(deadline, stream.next()) => match item {
                    Ok(Some(item)) => collector.push(&item.map_err(engine)?.into_bytes()),
                    Ok(None) => break,
                    Err(_) => {
                        timed_out = true;
                        break;
                    }
                },
                () = tokio::time::sleep_until(next_poll), if polling => {
                    let inspect = self.docker.inspect_exec(&exec.id).await.map_err(|e| container_error(container, e))?;
                    if inspect.running == Some(false) {
                        returned = true;
                        break;
                    }
                    poll = (poll * 2).min(EXIT_POLL_MAX);
                    next_poll = tokio::time::Instant::now() + poll;
                }
            }
        }
        if !timed_out {
            if let Some(header) = collector.header.clone().filter(|_| !request.leave_running && !request.reaps_itself) {
                // The command returned: nothing of it outlives it (its process group, and whatever
                // left the group but still holds its output).
                self.kill_group(container, &header).await?;
            }
            if returned {
                // What it printed before it returned may still be on its way.
                let drain_deadline = tokio::time::Instant::now() + DRAIN_GRACE;
                while let Ok(Some(item)) = tokio::time::timeout_at(drain_deadline, stream.next()).await {
                    collector.push(&item.map_err(engine)?.into_bytes());
                }
            }
            collector.finish();
            let exit_code = self.exit_code(container, &exec.id).await?;
            // A container killed as a whole (its init OOM-killed, or removed) takes the exec with it
            // (SIGKILL: 137); the engine may see the exec end before the container.
            if exit_code.is_none_or(|c| c == 137) && self.dies_soon(container).await? {
                return Err(RuntimeError::Gone(container.to_owned()));
            }
            if collector.header.is_none()
                && let Some(error) = start_failure(container, &collector.output)
            {
                return Err(error);
            }
            return Ok(ExecOutput { output: collector.output, exit_code, timed_out: false });
        }

        if request.leave_running {
            // As mini-swe-agent's DockerEnvironment: only the wait ends; the command runs on.
            collector.finish();
            return Ok(ExecOutput { output: collector.output, exit_code: None, timed_out: true });
        }
        // Timed out: find the group (the header may still be on its way), kill it, read what is left.
        let header_deadline = tokio::time::Instant::now() + HEADER_GRACE;
        let mut ended = false;
        while collector.header.is_none() && !collector.header_failed {
            match tokio::time::timeout_at(header_deadline, stream.next()).await {
                Ok(Some(item)) => collector.push(&item.map_err(engine)?.into_bytes()),
                Ok(None) => {
                    ended = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let Some(header) = collector.header.clone() else {
            if !self.running(container).await? {
                return Err(RuntimeError::Gone(container.to_owned()));
            }
            if ended {
                // It ended just after its timeout without ever starting the command.
                collector.finish();
                return Ok(ExecOutput { output: collector.output, exit_code: None, timed_out: true });
            }
            return Err(RuntimeError::Engine(format!(
                "a command in container {container} outlived its timeout and never reported its process group; it may still run"
            )));
        };
        // Even a command whose output ended just now may have left members of its group behind.
        self.kill_group(container, &header).await?;
        if !ended {
            let drain_deadline = tokio::time::Instant::now() + DRAIN_GRACE;
            while let Ok(Some(item)) = tokio::time::timeout_at(drain_deadline, stream.next()).await {
                collector.push(&item.map_err(engine)?.into_bytes());
            }
        }
        collector.finish();
        Ok(ExecOutput { output: collector.output, exit_code: None, timed_out: true })
    }

    /// Kill the process group (and the holders of the output pipe) of a command that timed out or
    /// returned, and wait until they are gone.
    async fn kill_group(&self, container: &str, header: &Header) -> Result<(), RuntimeError> {
        let argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            KILL_SCRIPT.to_owned(),
            "vcurve-kill".to_owned(),
            header.pgid.to_string(),
            header.pipe.as_deref().map_or_else(|| "-".to_owned(), glob_escape),
        ];
        // A container at its pids limit (a fork bomb) cannot start the kill's exec ("OCI runtime
        // exec failed"); processes of the bomb die and free a slot now and then, so the kill is
        // tried again for a while before it is an engine error (and the job a no-outcome, whose
        // container is removed).
        let give_up = Instant::now() + KILL_RETRY;
        loop {
            let failure = match self.run_plain(container, argv.clone()).await {
                Ok((_, Some(0))) => return Ok(()),
                Ok((output, code)) => {
                    // A container being killed refuses execs ("cannot exec in a stopped state") a
                    // moment before the engine reports it stopped: give it the grace to say so.
                    if self.dies_soon(container).await? {
                        return Err(RuntimeError::Gone(container.to_owned()));
                    }
                    RuntimeError::Engine(format!(
                        "cannot kill what is left of a command's process group {} in container {container} (exit {code:?}): {}",
                        header.pgid,
                        String::from_utf8_lossy(&output).trim()
                    ))
                }
                Err(RuntimeError::Engine(_)) if self.dies_soon(container).await? => {
                    return Err(RuntimeError::Gone(container.to_owned()));
                }
                Err(e @ RuntimeError::Engine(_)) => e,
                Err(e) => return Err(e),
            };
            if Instant::now() >= give_up {
                return Err(failure);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
