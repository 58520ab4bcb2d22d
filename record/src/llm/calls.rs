//! The call log: one [`ModelCall`] per logical call to a model endpoint, with every request
//! (attempt) it took. [`ModelCall::requests`] gives the per-request rows the usage tables of
//! `vcurve_method::task_state::usage` read.

use serde::{Deserialize, Serialize};
use vcurve_method::task_state::usage::{CallOutcome, CallRecord, Purpose, Sampling, Stage, Tokens};

/// How "thinking" was turned off in a request, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingSent {
    /// Nothing was sent: the server's default.
    #[default]
    NotSent,
    /// `"chat_template_kwargs": {"enable_thinking": false, "thinking": false}` (vLLM, SGLang).
    ChatTemplateKwargsDisabled,
}

/// The sampling parameters a request sent; `None` for one it omitted.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SamplingSent {
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// Choices asked in one request (`n`); `None` when omitted (one).
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub thinking: ThinkingSent,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum AttemptOutcome {
    Ok,
    /// The server answered, but not in the stage's schema (or not as a chat completion).
    Malformed {
        reason: String,
    },
    /// An HTTP error, a timeout or a connection error.
    Failed {
        reason: String,
    },
}

/// One request of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based.
    pub attempt: u32,
    /// The HTTP status, when a response came.
    #[serde(default)]
    pub http_status: Option<u16>,
    /// `None` when the response reported no usage (or none came).
    #[serde(default)]
    pub tokens: Option<Tokens>,
    pub latency_ms: u64,
    /// How long the client waited before the next attempt (backoff, or the server's Retry-After).
    #[serde(default)]
    pub wait_before_next_ms: Option<u64>,
    pub outcome: AttemptOutcome,
}

/// How a call ended: its last attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CallStatus {
    Ok,
    Malformed { reason: String },
    Failed { reason: String },
}

/// One logical call to a model endpoint: what was sent, and every request it took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCall {
    /// The logical call's id (its job key); all its attempts share it.
    pub call: String,
    pub stage: Stage,
    #[serde(default)]
    pub purpose: Purpose,
    pub model: String,
    /// The endpoint's base URL, without credentials or query.
    pub endpoint: String,
    /// `task_state.reader.v1`.
    pub template: String,
    /// SHA-256 of the template file.
    pub template_hash: String,
    pub sampling: SamplingSent,
    pub attempts: Vec<Attempt>,
    /// Attempts after the first.
    pub retries: u32,
    /// Tokens of the final successful request ("effective" usage), if it reported usage.
    #[serde(default)]
    pub tokens: Option<Tokens>,
    /// Every attempt's latency, waits excluded.
    pub latency_ms: u64,
    pub status: CallStatus,
}

impl ModelCall {
    /// One usage row per request, in attempt order.
    pub fn requests(&self) -> Vec<CallRecord> {
        let sampling = Sampling {
            temperature: self.sampling.temperature,
            top_p: self.sampling.top_p,
            top_k: None,
            max_tokens: self.sampling.max_tokens,
        };
        self.attempts
            .iter()
            .map(|a| CallRecord {
                call: self.call.clone(),
                attempt: a.attempt,
                stage: self.stage,
                purpose: self.purpose,
                model: self.model.clone(),
                endpoint: self.endpoint.clone(),
                template: self.template.clone(),
                template_hash: self.template_hash.clone(),
                sampling,
                tokens: a.tokens,
                latency_ms: a.latency_ms,
                outcome: match &a.outcome {
                    AttemptOutcome::Ok => CallOutcome::Success,
                    AttemptOutcome::Malformed { reason } => {
                        CallOutcome::Failed { reason: format!("malformed: {reason}") }
                    }
                    AttemptOutcome::Failed { reason } => CallOutcome::Failed { reason: reason.clone() },
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcurve_method::task_state::usage::{GroupBy, usage};

    #[test]
    fn a_call_gives_one_usage_row_per_request_and_effective_tokens_are_its_last_success() {
        let tokens = |i| Some(Tokens { input: i, output: 5, cached: 1 });
        let call = ModelCall {
            call: "c1".into(),
            stage: Stage::Reader,
            purpose: Purpose::Core,
            model: "m".into(),
            endpoint: "http://127.0.0.1:1/v1".into(),
            template: "task_state.reader.v1".into(),
            template_hash: "ab".into(),
            sampling: SamplingSent { temperature: Some(0.7), ..SamplingSent::default() },
            attempts: vec![
                Attempt {
                    attempt: 1,
                    http_status: Some(429),
                    tokens: None,
                    latency_ms: 3,
                    wait_before_next_ms: Some(1000),
                    outcome: AttemptOutcome::Failed { reason: "HTTP 429".into() },
                },
                Attempt {
                    attempt: 2,
                    http_status: Some(200),
                    tokens: tokens(10),
                    latency_ms: 4,
                    wait_before_next_ms: Some(10),
                    outcome: AttemptOutcome::Malformed { reason: "x".into() },
                },
                Attempt {
                    attempt: 3,
                    http_status: Some(200),
                    tokens: tokens(20),
                    latency_ms: 5,
                    wait_before_next_ms: None,
                    outcome: AttemptOutcome::Ok,
                },
            ],
            retries: 2,
            tokens: tokens(20),
            latency_ms: 12,
            status: CallStatus::Ok,
        };
        let json = serde_json::to_string(&call).unwrap();
        assert_eq!(serde_json::from_str::<ModelCall>(&json).unwrap(), call);
        let rows = usage(&call.requests(), GroupBy::Stage).unwrap();
        assert_eq!(rows[0].calls, 1);
        assert_eq!(rows[0].requests, 3);
        assert_eq!(rows[0].requests_without_usage, 1);
        assert_eq!(rows[0].effective, Tokens { input: 20, output: 5, cached: 1 });
        assert_eq!(rows[0].actual, Tokens { input: 30, output: 10, cached: 2 });
        assert_eq!(rows[0].temperatures.get("0.7"), Some(&1));
    }
}
