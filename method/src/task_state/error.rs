//! What the task-state estimators refuse ([`TaskStateError`]).

/// What the task-state estimators refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskStateError {
    #[error("task-state input: {0}")]
    Input(String),
    #[error("task-state settings {0}")]
    Settings(String),
    #[error("call log: {0}")]
    CallLog(String),
}
