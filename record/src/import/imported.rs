//! A run imported from another agent's file, with what the trajectory schema has no place for
//! ([`Imported`]).

use serde::Serialize;

use super::observations::{FirstEdit, FirstSymptom, Summary};
use super::swebench_report::ReportOutcome;
use crate::trajectory::Trajectory;

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
