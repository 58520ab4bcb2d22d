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
    let mut argv = interpreter.argv.clone();
    argv.push(command.to_owned());
    let timeout_s = if timeout_s.is_finite() && timeout_s > 0.0 { timeout_s.min(MAX_TIMEOUT_S) } else { MAX_TIMEOUT_S };
    let request = ExecRequest {
        argv,
        env: interpreter.env.clone(),
        workdir: task.workdir.clone(),
        timeout: Duration::from_secs_f64(timeout_s),
        leave_running: interpreter.on_timeout == vcurve_record::OnTimeout::Leave,
    };
    let out = container.exec(&request).await?;
    Ok(Observed {
        output: interpreter.output.decode(&out.output, out.timed_out),
        returncode: if out.timed_out { None } else { out.exit_code.map(|c| c as i32) },
        timed_out: out.timed_out,
    })
}
