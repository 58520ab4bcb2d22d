//! The model stages' pure parts: the prompt templates ([`templates`]), the parsers of their
//! answers ([`answers`]) and the call log ([`calls`]). The HTTP client that sends the requests and
//! fills the log is the worker's (`vcurve_worker::llm`); docs/task-state.md, "Model calls".

pub mod answers;
pub mod calls;
pub mod templates;

pub use answers::MalformedAnswer;
pub use calls::{Attempt, AttemptOutcome, CallStatus, ModelCall, SamplingSent, ThinkingSent};
pub use templates::{ChatMessage, Role, Template, TemplateError, TemplateName};
