//! The one exec path: every command of a recorded run, a replay, a continuation or an evaluation
//! runs through [`run_command`], so they all execute it the same way.

use std::time::Duration;

use vcurve_record::{Interpreter, Task};

use crate::sandbox::container::{Container, ExecRequest, RuntimeError};

/// The longest timeout any command gets, whatever it asks for.
pub const MAX_TIMEOUT_S: f64 = 3600.0;

/// What a command observed, decoded as the recording agent decodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// stdout and stderr merged, UTF-8 with invalid bytes replaced (Python's `errors="replace"`).
    pub output: String,
    /// `None` when the command did not finish.
    pub returncode: Option<i32>,
    pub timed_out: bool,
}

/// Run `command` with the trajectory's interpreter in the task's working directory, with the
/// interpreter's environment and `timeout_s` (capped at [`MAX_TIMEOUT_S`]; a non-positive or
/// non-finite timeout is the cap too). A command that outlives its timeout is killed inside the
/// container with its whole process group.
pub async fn run_command(
    container: &Container,
    task: &Task,
    interpreter: &Interpreter,
    command: &str,
    timeout_s: f64,
) -> Result<Observed, RuntimeError> {
    run(container, task, interpreter, command.to_owned(), timeout_s, false).await
}

/// What [`run_own_command`] appends to vcurve's own shell script: with the script's exit status
/// kept, it sends `SIGKILL` to every other member of the script's process group (the shell leads
/// it: the exec wrapper sees to that) and to every process holding the script's output pipe, again
/// and again until none is left (zombies aside: init reaps them), and then exits with the status.
/// It is what the kill exec after any other command does ([`crate::sandbox::container`]), done by
/// the command itself, which spares one exec (a round trip to the engine and a process start, tens
/// of milliseconds). It reads `/proc` with shell built-ins and `find`, as the kill exec does, and
/// runs under `sh` (dash) and bash alike; its own variables start with `__vcurve_`.
pub const REAP_TAIL: &str = r#"__vcurve_rc=$?
{
__vcurve_pipe=$(readlink /proc/$$/fd/1) || __vcurve_pipe=-
case $__vcurve_pipe in pipe:\[*\]) __vcurve_pipe=${__vcurve_pipe#pipe:?}; __vcurve_pipe="pipe:?${__vcurve_pipe%?}?" ;; *) __vcurve_pipe=- ;; esac
__vcurve_i=0
while :; do
  __vcurve_alive=
  for __vcurve_s in /proc/[0-9]*/stat; do
    __vcurve_p=${__vcurve_s#/proc/}; __vcurve_p=${__vcurve_p%/stat}
    [ "$__vcurve_p" = "$$" ] && continue
    read -r __vcurve_l < "$__vcurve_s" || continue
    set -- ${__vcurve_l##*) }
    [ "$3" = "$$" ] && [ "$1" != Z ] && kill -s KILL "$__vcurve_p" && __vcurve_alive=1
  done
  [ "$__vcurve_pipe" = - ] || for __vcurve_f in $(find /proc/[0-9]*/fd -maxdepth 1 -lname "$__vcurve_pipe"); do
    __vcurve_p=${__vcurve_f#/proc/}; __vcurve_p=${__vcurve_p%%/*}
    [ "$__vcurve_p" != "$$" ] && kill -s KILL "$__vcurve_p" && __vcurve_alive=1
  done
  [ -z "$__vcurve_alive" ] && break
  __vcurve_i=$((__vcurve_i+1))
  if [ "$__vcurve_i" -ge 200 ]; then echo "vcurve: what the command left still runs after SIGKILL" >&2; exit 125; fi
  sleep 0.05
done
} 2>/dev/null
exit $__vcurve_rc"#;

/// [`run_command`] for a shell script of vcurve's own (a fingerprint's `git diff` and `git
/// status`; it must not `exit` itself), run through the trajectory's interpreter (which must be a
/// shell) so that it sees the recorded environment: the script kills what it leaves behind itself
/// ([`REAP_TAIL`]) instead of a second exec doing it. At its timeout it is killed as any command
/// is.
pub async fn run_own_command(
    container: &Container,
    task: &Task,
    interpreter: &Interpreter,
    script: &str,
    timeout_s: f64,
) -> Result<Observed, RuntimeError> {
    run(container, task, interpreter, format!("{script}\n{REAP_TAIL}"), timeout_s, true).await
}

async fn run(
    container: &Container,
    task: &Task,
    interpreter: &Interpreter,
    command: String,
    timeout_s: f64,
    reaps_itself: bool,
) -> Result<Observed, RuntimeError> {
    let mut argv = interpreter.argv.clone();
    argv.push(command);
    let timeout_s = if timeout_s.is_finite() && timeout_s > 0.0 { timeout_s.min(MAX_TIMEOUT_S) } else { MAX_TIMEOUT_S };
    let request = ExecRequest {
        argv,
        env: interpreter.env.clone(),
        workdir: task.workdir.clone(),
        timeout: Duration::from_secs_f64(timeout_s),
        leave_running: interpreter.on_timeout == vcurve_record::OnTimeout::Leave,
        reaps_itself,
    };
    let out = container.exec(&request).await?;
    Ok(Observed {
        output: interpreter.output.decode(&out.output, out.timed_out),
        returncode: if out.timed_out { None } else { out.exit_code.map(|c| c as i32) },
        timed_out: out.timed_out,
    })
}
