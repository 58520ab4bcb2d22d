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

mod error;
mod imported;
mod messages;
pub mod mini_swe_agent;
pub mod observations;
pub mod swebench_report;

pub use error::ImportError;
pub use imported::Imported;
pub use mini_swe_agent::{FORMAT_V1, FORMAT_V1_1, ImportOptions, import_mini_swe_agent, swebench_image};
pub use observations::{
    CommandKind, FirstEdit, FirstSymptom, Summary, command_kind, failure_signal, first_edit, first_symptom,
};
pub use swebench_report::{ReportOutcome, SwebenchReport};

#[cfg(test)]
mod tests;
