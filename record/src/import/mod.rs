//! Import of runs recorded by other agents into the recorded-trajectory model.
//!
//! [`mini_swe_agent`] reads mini-swe-agent's `.traj.json` files (formats `mini-swe-agent-1` and
//! `mini-swe-agent-1.1`) into a [`Trajectory`]; [`swebench_report`] attaches outcomes from a
//! SWE-bench harness report; [`observations`] reads the first edit (a heuristic on the commands,
//! until replay measures it) and the first symptom (docs/method.md §3) off a trajectory, and summarizes
//! one for `vcurve inspect`. Both read recorded messages the same way (`messages`: a message's text,
//! the submit marker).
//!
//! What the trajectory schema has no place for (the source format, the recorded exit status, the
//! first edit and symptom, the outcome, what the import had to guess) travels beside it in
//! [`Imported`], so the trajectory's digest keeps its meaning.

mod messages;
pub mod mini_swe_agent;
pub mod observations;
pub mod swebench_report;

use serde::Serialize;

use crate::trajectory::Trajectory;

pub use mini_swe_agent::{FORMAT_V1, FORMAT_V1_1, ImportOptions, import_mini_swe_agent, swebench_image};
pub use observations::{
    CommandKind, FirstEdit, FirstSymptom, Summary, command_kind, failure_signal, first_edit, first_symptom,
};
pub use swebench_report::{ReportOutcome, SwebenchReport};

/// A run imported from another agent's file, with what the trajectory schema has no place for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imported {
    pub trajectory: Trajectory,
    /// The source file's format, e.g. `mini-swe-agent-1.1`.
    pub format: String,
    pub instance_id: String,
    /// The exit status as the agent recorded it, e.g. `Submitted`, `LimitsExceeded`,
    /// `ContextWindowExceededError`.
    pub exit_status: String,
    pub first_edit: Option<FirstEdit>,
    pub first_symptom: Option<FirstSymptom>,
    /// From a SWE-bench report, when one was given and names the instance.
    pub outcome: Option<ReportOutcome>,
    /// The model-server outage the run ended on (`ServiceUnavailableError`, litellm's
    /// `Timeout`, `APIConnectionError`, …), when it ended on one: an infrastructure run, which no
    /// study takes as a trajectory or counts among a task's runs (no outcome, never selected).
    pub outage: Option<String>,
    /// What the import could not take from the file as recorded (reconstructed outputs, elided
    /// outputs, dropped actions, defaults), one sentence each.
    pub warnings: Vec<String>,
}

impl Imported {
    /// The outcome as resolved (`Some(true)`), not resolved (`Some(false)`) or unknown.
    pub fn resolved(&self) -> Option<bool> {
        self.outcome.and_then(ReportOutcome::resolved)
    }

    /// The summary `vcurve inspect` prints.
    pub fn summary(&self) -> Summary {
        Summary::new(&self.trajectory, &self.format, &self.exit_status)
    }
}

/// Why a file was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("unknown trajectory_format {found:?}; this version reads {FORMAT_V1:?} and {FORMAT_V1_1:?}")]
    UnknownFormat { found: String },
    #[error("{0}")]
    Invalid(String),
}

pub(crate) fn invalid(message: impl Into<String>) -> ImportError {
    ImportError::Invalid(message.into())
}

#[cfg(test)]
mod tests;
