//! Why a job ends without an outcome: [`NoOutcome`], the one type every runner's failure path
//! returns. A no-outcome is reported with its [`Display`](std::fmt::Display) text as the reason
//! (`JobReport::NoOutcome { reason }`), and the coordinator runs the key again (docs/method.md §6):
//! none of these says anything about the agent's chances, only that this attempt measured nothing.

use vcurve_record::jobs::JobReport;

use crate::runners::agent::AgentFailure;
use crate::runners::evaluate::EvalFailure;
use crate::sandbox::container::RuntimeError;
use crate::sandbox::replay::ReplayError;

/// Why a job has no outcome. The texts are the reasons reported to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoOutcome {
    /// The job cannot be run as it was handed over: a job of another runner, options that do not
    /// parse, a payload missing what the job's kind needs, a patch that is not text. The text says
    /// what is missing.
    #[error("{0}")]
    BadJob(String),
    /// The worker offers no runner of the job's kind.
    #[error("unsupported runner {0}")]
    UnsupportedRunner(String),
    /// The job's trajectory payload could not be fetched from the coordinator.
    #[error("cannot fetch trajectory {digest}: {error}")]
    Fetch { digest: String, error: String },
    /// A call to the coordinator's services (verdicts, files) failed, or the runner has none.
    #[error("{0}")]
    Services(String),
    /// The container engine failed (creating a container, or during an exec): `during` says what
    /// the worker was doing.
    #[error("{during}: {error}")]
    Engine { during: String, error: RuntimeError },
    /// Replay (of a replay job, or of the steps up to a continuation's `h_t`) met a runtime error
    /// or an unusable snapshot; `during` says what the worker was doing.
    #[error("{during}: {error}")]
    Replay { during: String, error: ReplayError },
    /// The agent process ended the run without a valid `final`: it broke the protocol, was
    /// killed, outlived the run's timeout, or could not be run (see [`AgentFailure`]).
    #[error(transparent)]
    Agent(#[from] AgentFailure),
    /// The evaluator could not judge the patch (see [`EvalFailure`]).
    #[error(transparent)]
    Evaluator(#[from] EvalFailure),
    /// This worker cannot call a model call's endpoint: its operator does not offer it, offers it
    /// with another key variable than the study names, or the key variable is unset. Run again,
    /// the call may land on a worker that fits.
    #[error("{0}")]
    ModelEndpoint(String),
    /// What the run produced cannot be encoded or stored (a transcript over the store's limit
    /// even after its cuts, JSON that does not encode).
    #[error("{0}")]
    Record(String),
    /// The runner panicked.
    #[error("runner {0} panicked")]
    Panicked(String),
    /// The job was cancelled before it finished.
    #[error("cancelled")]
    Cancelled,
    /// A no-outcome the synthetic runner injects on purpose (`no_outcome_rate`).
    #[error("injected")]
    Injected,
}

impl NoOutcome {
    /// The engine failed while the worker was doing `during`.
    pub fn engine(during: impl Into<String>) -> impl FnOnce(RuntimeError) -> NoOutcome {
        let during = during.into();
        move |error| NoOutcome::Engine { during, error }
    }

    /// The report of this no-outcome.
    pub fn report(&self) -> JobReport {
        JobReport::no_outcome(self.to_string())
    }

    /// A runner's report of attempt `attempt` of `key`: `result`'s report, or its no-outcome's,
    /// logged.
    pub fn or_report(
        result: Result<JobReport, NoOutcome>,
        key: &vcurve_record::jobs::JobKey,
        attempt: u32,
    ) -> JobReport {
        result.unwrap_or_else(|no| {
            tracing::warn!(key = %key, attempt, reason = %no, "no outcome");
            no.report()
        })
    }
}

impl From<NoOutcome> for JobReport {
    fn from(no: NoOutcome) -> JobReport {
        no.report()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_keep_the_texts_the_coordinator_and_the_tests_know() {
        assert_eq!(NoOutcome::UnsupportedRunner("process".into()).to_string(), "unsupported runner process");
        assert_eq!(NoOutcome::Injected.report(), JobReport::no_outcome("injected"));
        assert_eq!(NoOutcome::Cancelled.to_string(), "cancelled");
        assert_eq!(NoOutcome::Panicked("agent".into()).to_string(), "runner agent panicked");
        assert_eq!(
            NoOutcome::Fetch { digest: "ab".into(), error: "gone".into() }.to_string(),
            "cannot fetch trajectory ab: gone"
        );
        let engine = NoOutcome::engine("starting the task container")(RuntimeError::NoImage("x".into()));
        assert_eq!(engine.to_string(), "starting the task container: no image \"x\"");
        let agent = NoOutcome::from(AgentFailure::Cancelled);
        assert_eq!(agent.to_string(), "the agent run was cancelled");
    }
}
