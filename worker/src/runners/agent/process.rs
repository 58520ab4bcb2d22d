//! The agent's process on the worker's host: how it ended, and the kills that leave nothing of it
//! (its process group, and whatever carries its mark).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;

use crate::sandbox::instance::AgentMark;

/// How long a killed agent is waited for, to reap it.
const REAP_WAIT: Duration = Duration::from_secs(5);

/// How the agent process ended after its `final`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentExit {
    /// It exited with this status (0 is what the protocol asks for).
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
    /// It had not exited within the grace and was killed.
    KilledAfterGrace,
}

impl std::fmt::Display for AgentExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentExit::Exited(code) => write!(f, "exited with status {code}"),
            AgentExit::Signaled(sig) => write!(f, "was killed by {}", signal_name(*sig)),
            AgentExit::KilledAfterGrace => {
                f.write_str("had not exited within the grace after its final and was killed")
            }
        }
    }
}

pub(crate) fn exit_of(status: ExitStatus) -> AgentExit {
    match (status.code(), status.signal()) {
        (Some(code), _) => AgentExit::Exited(code),
        (None, Some(sig)) => AgentExit::Signaled(sig),
        (None, None) => AgentExit::Exited(-1),
    }
}

/// Kill the agent and its process group (`group`: the agent's pid, taken at spawn, since a reaped
/// child no longer has one), and reap it.
pub(crate) async fn kill(child: &mut Child, group: Option<u32>) {
    let _ = child.start_kill();
    kill_group(group);
    let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
}

/// Kills what is left of a child's process group when dropped (`kill_on_drop` kills the child
/// alone, not what it started: the agent's commands, the harness's `docker` calls).
pub(crate) struct GroupGuard(pub(crate) Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// Kills every process carrying an agent's mark when dropped (what left the agent's group too).
pub(crate) struct MarkGuard(pub(crate) Option<AgentMark>);

impl Drop for MarkGuard {
    fn drop(&mut self) {
        if let Some(mark) = &self.0 {
            let killed = mark.kill();
            if killed > 0 {
                tracing::info!(killed, mark = mark.value(), "killed what the agent process left running");
            }
        }
    }
}

/// SIGKILL whatever is left of a child's process group (the child made it, with
/// `process_group(0)`).
pub(crate) fn kill_group(group: Option<u32>) {
    if let Some(pid) = group.and_then(|id| i32::try_from(id).ok()).and_then(rustix::process::Pid::from_raw) {
        // The group may be empty by now; that is not an error worth reporting.
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("signal {sig}"),
    };
    format!("signal {sig} ({name})")
}
