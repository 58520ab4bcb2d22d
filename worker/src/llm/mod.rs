//! The model call layer of the task-state study: an OpenAI-compatible chat-completions client
//! behind the narrow [`ModelClient`] trait.
//!
//! One [`OpenAiClient`] serves one endpoint (a base URL and a model). Each [`ModelClient::call`]
//! is one logical call: it sends `POST {base_url}/chat/completions` with the rendered messages and
//! the sampling parameters given (nothing else is sent; see [`request_body`]), holds one of the
//! endpoint's concurrency permits during each request (not during waits), retries on 429 (after
//! the server's `Retry-After` when it is longer than the backoff), on 5xx, on connection errors
//! and on timeouts with exponential backoff and jitter, and retries a malformed answer (one the
//! stage's check refuses) under a budget of its own. Any other 4xx fails the call at once. Every
//! call returns its [`ModelCall`] log record with every attempt, whatever the outcome. The API
//! key is read once from the environment variable the spec names and is never logged.
//! docs/task-state.md, "Model calls".

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use vcurve_method::task_state::usage::{Purpose, Stage, Tokens};
use vcurve_record::llm::{
    Attempt, AttemptOutcome, CallStatus, ChatMessage, MalformedAnswer, ModelCall, SamplingSent, Template,
    TemplateError, ThinkingSent,
};

/// How a server is told not to think.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThinkingControl {
    /// The server has no flag (or the model does not think): nothing is sent.
    #[default]
    None,
    /// `"chat_template_kwargs": {"enable_thinking": false, "thinking": false}`: vLLM and SGLang
    /// pass it to the chat template (Qwen3 reads `enable_thinking`, DeepSeek V3.1 `thinking`).
    ChatTemplateKwargs,
}

/// Retries of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Requests a call may take on 429, 5xx, timeouts and connection errors, the first included.
    pub max_attempts: u32,
    /// Malformed answers a call may get before it ends as malformed.
    pub max_malformed: u32,
    /// The first backoff; it doubles with each retry, up to `max_delay`, and is then scaled by a
    /// jitter factor in [0.5, 1).
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// The longest `Retry-After` honoured; a longer one is cut to this.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            max_malformed: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// One endpoint: where, which model, how many requests at once, and how long each may take.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// The OpenAI-compatible base URL, up to `/v1` (`http://127.0.0.1:8000/v1`).
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key, sent as `Authorization: Bearer`; `None`
    /// sends no key.
    pub api_key_env: Option<String>,
    /// Requests in flight at once, over every call of this client.
    pub max_concurrency: usize,
    /// The longest one request may take, from sending to the whole answer read.
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    pub thinking: ThinkingControl,
}

/// The sampling parameters of a call; a `None` is not sent (the server's default).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SamplingParams {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    pub seed: Option<u64>,
    /// Choices in one request; vcurve asks one per call (each sample is its own job), so `None`.
    pub n: Option<u32>,
    /// Ask the server not to think, as the endpoint's [`ThinkingControl`] says.
    pub disable_thinking: bool,
}

/// Checks an answer's text against its stage's schema (one of `vcurve_record::llm::answers`'s
/// parsers, its value dropped).
pub type AnswerCheck<'a> = &'a (dyn Fn(&str) -> Result<(), MalformedAnswer> + Send + Sync);

/// One logical call.
pub struct CallRequest<'a> {
    /// The call's id (its job key), shared by its attempts in the log.
    pub call: String,
    pub stage: Stage,
    pub purpose: Purpose,
    /// The template the messages were rendered from (its id and hash go in the log).
    pub template: &'a Template,
    /// The chat messages as sent: the template's rendering, or (the actor fork) the agent's own
    /// history with the template's message appended.
    pub messages: Vec<Value>,
    pub sampling: SamplingParams,
    pub check: AnswerCheck<'a>,
}

impl<'a> CallRequest<'a> {
    /// A call whose messages are `template` rendered with `values`.
    pub fn render(
        call: impl Into<String>,
        stage: Stage,
        template: &'a Template,
        values: &std::collections::BTreeMap<&str, String>,
        sampling: SamplingParams,
        check: AnswerCheck<'a>,
    ) -> Result<CallRequest<'a>, TemplateError> {
        let messages = template.render(values)?.iter().map(message_json).collect();
        Ok(CallRequest { call: call.into(), stage, purpose: Purpose::Core, template, messages, sampling, check })
    }
}

/// A chat message as the API takes it.
pub fn message_json(m: &ChatMessage) -> Value {
    json!({"role": m.role.key(), "content": m.content})
}

/// Why a call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The last answer broke the stage's schema (after the malformed budget was spent).
    #[error(transparent)]
    Malformed(MalformedAnswer),
    /// An HTTP error, a timeout or a connection error that was not retried or was retried to the
    /// limit.
    #[error("model call failed: {0}")]
    Failed(String),
}

/// A call's answers (one text per choice, each passing the check) and its log record.
#[derive(Debug, Clone)]
pub struct CallResult {
    pub answers: Result<Vec<String>, CallError>,
    pub log: ModelCall,
}

/// A model endpoint that answers calls. The one implementation is [`OpenAiClient`].
pub trait ModelClient: Send + Sync {
    fn call<'a>(&'a self, request: CallRequest<'a>) -> Pin<Box<dyn Future<Output = CallResult> + Send + 'a>>;
}

/// A configuration this client cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("model endpoint {base_url}: {reason}")]
    Config { base_url: String, reason: String },
}

/// The OpenAI-compatible chat-completions client of one endpoint.
pub struct OpenAiClient {
    http: reqwest::Client,
    config: EndpointConfig,
    url: reqwest::Url,
    /// The base URL without credentials or query: what the log records.
    endpoint: String,
    api_key: Option<String>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("OpenAiClient").field("endpoint", &self.endpoint).field("model", &self.config.model).finish()
    }
}

impl OpenAiClient {
    /// A client of `config`'s endpoint, reading its API key from the environment now. Refuses a
    /// base URL that is not http(s), a named key variable that is unset or empty, a concurrency
    /// of 0 and a retry policy without attempts.
    pub fn new(config: EndpointConfig) -> Result<OpenAiClient, ClientError> {
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.trim().is_empty() => Some(k),
                Ok(_) => return Err(config_error(&config, format!("the API key variable {var} is empty"))),
                Err(_) => return Err(config_error(&config, format!("the API key variable {var} is not set"))),
            },
        };
        OpenAiClient::with_key(config, api_key)
    }

    fn with_key(config: EndpointConfig, api_key: Option<String>) -> Result<OpenAiClient, ClientError> {
        let base = reqwest::Url::parse(config.base_url.trim_end_matches('/'))
            .map_err(|e| config_error(&config, format!("not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(config_error(&config, format!("the scheme {:?} is not http or https", base.scheme())));
        }
        if config.max_concurrency == 0 {
            return Err(config_error(&config, "max_concurrency is 0: at least one request at once".into()));
        }
        if config.retry.max_attempts == 0 || config.retry.max_malformed == 0 {
            return Err(config_error(&config, "a retry policy needs at least one attempt".into()));
        }
        let url = reqwest::Url::parse(&format!("{}/chat/completions", base.as_str().trim_end_matches('/')))
            .map_err(|e| config_error(&config, format!("not a URL: {e}")))?;
        let mut shown = base.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_query(None);
        shown.set_fragment(None);
        let endpoint = shown.as_str().trim_end_matches('/').to_string();
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .build()
            .map_err(|e| config_error(&config, format!("the HTTP client does not start: {e}")))?;
        let permits = Arc::new(Semaphore::new(config.max_concurrency));
        Ok(OpenAiClient { http, config, url, endpoint, api_key, permits })
    }

    /// The endpoint as logged: the base URL without credentials.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn model(&self) -> &str {
        &self.config.model
    }

    async fn run(&self, request: CallRequest<'_>) -> CallResult {
        let body = request_body(&self.config.model, &request.messages, &request.sampling, self.config.thinking);
        let retry = &self.config.retry;
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut failures = 0u32;
        let mut malformed = 0u32;
        let answers = loop {
            let n = attempts.len() as u32 + 1;
            let sent = self.send(&body).await;
            let (attempt, result, retry_after) = judge_response(n, sent, request.check, request.sampling.n);
            let done = match &result {
                Step::Answers(a) => Some(Ok(a.clone())),
                Step::Malformed(m) => {
                    malformed += 1;
                    (malformed >= retry.max_malformed).then(|| Err(CallError::Malformed(m.clone())))
                }
                Step::Retryable(reason) => {
                    failures += 1;
                    (failures >= retry.max_attempts)
                        .then(|| Err(CallError::Failed(format!("{reason} (gave up after {n} requests)"))))
                }
                Step::Fatal(reason) => Some(Err(CallError::Failed(reason.clone()))),
            };
            attempts.push(attempt);
            if let Some(done) = done {
                break done;
            }
            let wait = backoff(retry, &request.call, n, retry_after);
            attempts.last_mut().expect("pushed above").wait_before_next_ms = Some(wait.as_millis() as u64);
            tracing::debug!(call = %request.call, attempt = n, wait_ms = wait.as_millis() as u64, "model call retried");
            tokio::time::sleep(wait).await;
        };
        let status = match &answers {
            Ok(_) => CallStatus::Ok,
            Err(CallError::Malformed(m)) => CallStatus::Malformed { reason: m.to_string() },
            Err(CallError::Failed(r)) => CallStatus::Failed { reason: r.clone() },
        };
        let tokens = attempts.iter().rev().find(|a| a.outcome == AttemptOutcome::Ok).and_then(|a| a.tokens);
        let log = ModelCall {
            call: request.call,
            stage: request.stage,
            purpose: request.purpose,
            model: self.config.model.clone(),
            endpoint: self.endpoint.clone(),
            template: request.template.versioned_id(),
            template_hash: request.template.sha256.clone(),
            sampling: sampling_sent(&request.sampling, self.config.thinking),
            retries: attempts.len() as u32 - 1,
            tokens,
            latency_ms: attempts.iter().map(|a| a.latency_ms).sum(),
            attempts,
            status,
        };
        CallResult { answers, log }
    }

    /// One request, holding a permit from sending until the whole answer is read.
    async fn send(&self, body: &Value) -> Sent {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        let start = Instant::now();
        let mut req = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let result = match req.send().await {
            Err(e) => Err(e),
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64);
                resp.text().await.map(|text| (status, retry_after, text))
            }
        };
        let latency_ms = start.elapsed().as_millis() as u64;
        match result {
            Ok((status, retry_after, text)) => Sent::Response { status, retry_after, text, latency_ms },
            Err(e) => Sent::Error { reason: transport_reason(&e, self.config.request_timeout), latency_ms },
        }
    }
}

impl ModelClient for OpenAiClient {
    fn call<'a>(&'a self, request: CallRequest<'a>) -> Pin<Box<dyn Future<Output = CallResult> + Send + 'a>> {
        Box::pin(self.run(request))
    }
}

fn config_error(config: &EndpointConfig, reason: String) -> ClientError {
    ClientError::Config { base_url: strip_credentials(&config.base_url), reason }
}

fn strip_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        Err(_) => "(not a URL)".into(),
    }
}

fn transport_reason(e: &reqwest::Error, timeout: Duration) -> String {
    // Without the URL: it is the endpoint's, logged apart.
    let e2 = e.without_url_ref();
    if e.is_timeout() {
        format!("timeout: no whole answer within {} ms", timeout.as_millis())
    } else if e.is_connect() {
        format!("connection error: {}", chain(e2))
    } else {
        format!("transport error: {}", chain(e2))
    }
}

trait WithoutUrlRef {
    fn without_url_ref(&self) -> &(dyn std::error::Error + 'static);
}

impl WithoutUrlRef for reqwest::Error {
    fn without_url_ref(&self) -> &(dyn std::error::Error + 'static) {
        // reqwest's Display names the URL; its sources do not.
        match std::error::Error::source(self) {
            Some(s) => s,
            None => self,
        }
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.dedup();
    parts.join(": ")
}

enum Sent {
    Response { status: u16, retry_after: Option<Duration>, text: String, latency_ms: u64 },
    Error { reason: String, latency_ms: u64 },
}

enum Step {
    Answers(Vec<String>),
    Malformed(MalformedAnswer),
    Retryable(String),
    Fatal(String),
}

/// The request body: `model`, `messages`, `stream: false`, and each sampling parameter that is
/// set; `chat_template_kwargs` when thinking is disabled through it.
pub fn request_body(model: &str, messages: &[Value], s: &SamplingParams, thinking: ThinkingControl) -> Value {
    let mut body = json!({"model": model, "messages": messages, "stream": false});
    let obj = body.as_object_mut().expect("a JSON object");
    if let Some(t) = s.temperature {
        obj.insert("temperature".into(), json!(t));
    }
    if let Some(p) = s.top_p {
        obj.insert("top_p".into(), json!(p));
    }
    if let Some(m) = s.max_tokens {
        obj.insert("max_tokens".into(), json!(m));
    }
    if let Some(seed) = s.seed {
        obj.insert("seed".into(), json!(seed));
    }
    if let Some(n) = s.n {
        obj.insert("n".into(), json!(n));
    }
    if s.disable_thinking && thinking == ThinkingControl::ChatTemplateKwargs {
        obj.insert("chat_template_kwargs".into(), json!({"enable_thinking": false, "thinking": false}));
    }
    body
}

fn sampling_sent(s: &SamplingParams, thinking: ThinkingControl) -> SamplingSent {
    SamplingSent {
        temperature: s.temperature,
        top_p: s.top_p,
        max_tokens: s.max_tokens,
        seed: s.seed,
        n: s.n,
        thinking: if s.disable_thinking && thinking == ThinkingControl::ChatTemplateKwargs {
            ThinkingSent::ChatTemplateKwargsDisabled
        } else {
            ThinkingSent::NotSent
        },
    }
}

fn excerpt(text: &str) -> String {
    let t: String = text.trim().chars().take(300).collect();
    if t.len() < text.trim().len() { format!("{t}…") } else { t }
}

/// What one request's outcome means: its log entry, the step it leads to, and the server's
/// Retry-After.
fn judge_response(
    n: u32,
    sent: Sent,
    check: AnswerCheck<'_>,
    choices: Option<u32>,
) -> (Attempt, Step, Option<Duration>) {
    let attempt = |http_status, tokens, latency_ms, outcome| Attempt {
        attempt: n,
        http_status,
        tokens,
        latency_ms,
        wait_before_next_ms: None,
        outcome,
    };
    match sent {
        Sent::Error { reason, latency_ms } => (
            attempt(None, None, latency_ms, AttemptOutcome::Failed { reason: reason.clone() }),
            Step::Retryable(reason),
            None,
        ),
        Sent::Response { status, retry_after, text, latency_ms } => {
            if status == 429 || (500..600).contains(&status) {
                let reason = format!("HTTP {status}: {}", excerpt(&text));
                return (
                    attempt(Some(status), None, latency_ms, AttemptOutcome::Failed { reason: reason.clone() }),
                    Step::Retryable(reason),
                    if status == 429 { retry_after } else { None },
                );
            }
            if status != 200 {
                let reason = format!("HTTP {status}: {}", excerpt(&text));
                return (
                    attempt(Some(status), None, latency_ms, AttemptOutcome::Failed { reason: reason.clone() }),
                    Step::Fatal(reason),
                    None,
                );
            }
            let (tokens, answers) = read_completion(&text, choices);
            let checked = answers.and_then(|answers| {
                for a in &answers {
                    check(a)?;
                }
                Ok(answers)
            });
            match checked {
                Ok(answers) => {
                    (attempt(Some(status), tokens, latency_ms, AttemptOutcome::Ok), Step::Answers(answers), None)
                }
                Err(m) => (
                    attempt(Some(status), tokens, latency_ms, AttemptOutcome::Malformed { reason: m.to_string() }),
                    Step::Malformed(m),
                    None,
                ),
            }
        }
    }
}

/// The usage and the choices' texts of a chat completion.
fn read_completion(text: &str, choices: Option<u32>) -> (Option<Tokens>, Result<Vec<String>, MalformedAnswer>) {
    let bad = |reason: String| MalformedAnswer { stage: "completion".into(), reason };
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return (None, Err(bad(format!("the response is not JSON ({e}): {}", excerpt(text))))),
    };
    let tokens = v.get("usage").filter(|u| u.is_object()).map(|u| Tokens {
        input: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output: u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
        cached: u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    let Some(list) = v.get("choices").and_then(Value::as_array) else {
        return (tokens, Err(bad("the response has no \"choices\" array".into())));
    };
    let want = choices.unwrap_or(1) as usize;
    if list.len() != want {
        return (tokens, Err(bad(format!("the response has {} choices, {want} were asked", list.len()))));
    }
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        match c.pointer("/message/content").and_then(Value::as_str) {
            Some(s) => out.push(s.to_string()),
            None => return (tokens, Err(bad(format!("choices[{i}].message.content is not a string")))),
        }
    }
    (tokens, Ok(out))
}

/// The wait before retry `attempt + 1`: `base_delay · 2^(attempt−1)` capped at `max_delay`,
/// scaled by a jitter factor in [0.5, 1) drawn from the call id and the attempt (so workers
/// retrying together spread out, and a test sees the same waits every run), and never shorter
/// than the server's Retry-After (itself capped at `max_retry_after`).
pub fn backoff(policy: &RetryPolicy, call: &str, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exp = policy.base_delay.saturating_mul(1u32.checked_shl(attempt.saturating_sub(1).min(30)).unwrap_or(u32::MAX));
    let capped = exp.min(policy.max_delay);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (call, attempt).hash(&mut h);
    let jitter = 0.5 + (h.finish() % 1000) as f64 / 2000.0;
    let backoff = capped.mul_f64(jitter);
    match retry_after {
        Some(r) => backoff.max(r.min(policy.max_retry_after)),
        None => backoff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_is_capped_jittered_and_honours_retry_after() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        for attempt in 1..=8 {
            let full = Duration::from_millis(100 * (1u64 << (attempt - 1))).min(Duration::from_millis(1000));
            let b = backoff(&p, "c", attempt, None);
            assert!(b >= full / 2 && b < full, "attempt {attempt}: {b:?} against {full:?}");
            assert_eq!(b, backoff(&p, "c", attempt, None), "the same call and attempt wait the same");
        }
        assert_eq!(backoff(&p, "c", 1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        let capped = RetryPolicy { max_retry_after: Duration::from_secs(3), ..p.clone() };
        assert_eq!(backoff(&capped, "c", 1, Some(Duration::from_secs(3600))), Duration::from_secs(3));
    }

    #[test]
    fn the_body_sends_only_the_parameters_set() {
        let msgs = vec![json!({"role": "user", "content": "hi"})];
        let s = SamplingParams { temperature: Some(0.0), disable_thinking: true, ..SamplingParams::default() };
        let b = request_body("m", &msgs, &s, ThinkingControl::ChatTemplateKwargs);
        assert_eq!(
            b,
            json!({"model": "m", "messages": msgs, "stream": false, "temperature": 0.0,
                   "chat_template_kwargs": {"enable_thinking": false, "thinking": false}})
        );
        let b = request_body("m", &msgs, &s, ThinkingControl::None);
        assert!(b.get("chat_template_kwargs").is_none());
        assert_eq!(sampling_sent(&s, ThinkingControl::None).thinking, ThinkingSent::NotSent);
    }

    #[test]
    fn a_config_with_credentials_logs_the_endpoint_without_them() {
        let c = EndpointConfig {
            base_url: "http://user:pw@127.0.0.1:9/v1/?k=1".into(),
            model: "m".into(),
            api_key_env: None,
            max_concurrency: 1,
            request_timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            thinking: ThinkingControl::None,
        };
        let client = OpenAiClient::new(c.clone()).unwrap();
        assert_eq!(client.endpoint(), "http://127.0.0.1:9/v1");
        let missing =
            OpenAiClient::new(EndpointConfig { api_key_env: Some("VCURVE_TEST_NO_SUCH_KEY_VAR".into()), ..c.clone() })
                .unwrap_err()
                .to_string();
        assert!(missing.contains("the API key variable VCURVE_TEST_NO_SUCH_KEY_VAR is not set"), "{missing}");
        assert!(!missing.contains("pw"), "{missing}");
        let zero = OpenAiClient::new(EndpointConfig { max_concurrency: 0, ..c }).unwrap_err().to_string();
        assert!(zero.contains("max_concurrency is 0"));
    }
}
