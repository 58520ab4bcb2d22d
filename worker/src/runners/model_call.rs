//! The model calls of a task-state study (docs/task-state.md, "Endpoints"): the endpoints a
//! worker's operator offers ([`ModelEndpoints`], `vcurve worker --model-endpoint
//! BASE_URL[=KEY_ENV]`) and the runner of `model_call` jobs ([`ModelCallRunner`]).
//!
//! A `model_call` job is routed by its kind, not by its study's runner: it needs no container
//! runtime, so a worker with endpoints and no Docker runs it. Its `trajectory_digest` names the
//! [`CallInput`] the coordinator stored (a JSON file, fetched and checked against the digest);
//! the runner checks that this worker offers the input's endpoint, sends the one call through an
//! [`OpenAiClient`] (one per endpoint, model and settings, shared by the calls of every job, so
//! the endpoint's concurrency limit holds over them), uploads the [`CallOutput`] (the accepted
//! answer, if any, and the call's log) and reports `call_answered` with its digest. A malformed or
//! failed call is answered too: recorded, never scored, never asked again.
//!
//! The API key is the operator's: the worker reads only the variable its operator named for the
//! endpoint. A study naming another variable makes the job a no-outcome naming both, and so does
//! an endpoint this worker does not offer (the coordinator routes calls by the capability
//! `model:BASE_URL`, so either means a worker configured otherwise than the study expects: run
//! again, it may land on one that fits). No key is ever logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vcurve_record::llm::CallStatus;
use vcurve_record::task_state::{CallInput, CallOutput, ModelRef};

use crate::llm::{
    CallRequest, EndpointConfig, ModelClient, OpenAiClient, RetryPolicy, SamplingParams, ThinkingControl,
};
use crate::runners::no_outcome::NoOutcome;
use crate::runners::seam::{AgentRunner, JobKey, JobReport, JobSpec};
use crate::runners::services::JobServices;

/// One endpoint a worker's operator offers: `--model-endpoint BASE_URL[=KEY_ENV]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedEndpoint {
    /// The OpenAI-compatible base URL up to `/v1`, without a trailing `/`.
    pub base_url: String,
    /// The environment variable the endpoint's API key is read from; `None`: no key is sent.
    pub key_env: Option<String>,
}

impl OfferedEndpoint {
    /// Reads one `--model-endpoint` value. The base URL is http(s) without credentials, query or
    /// fragment (a key belongs in a variable, never on a command line); `KEY_ENV` is a variable
    /// name (letters, digits and `_`, not starting with a digit).
    pub fn parse(flag: &str) -> Result<OfferedEndpoint, String> {
        let bad = |why: String| format!("--model-endpoint {flag:?}: {why}");
        let (url, key_env) = match flag.rsplit_once('=') {
            Some((url, var)) if url.contains("://") && !url.contains(['?', '#']) && !var.contains('/') => {
                (url, Some(var))
            }
            _ => (flag, None),
        };
        if let Some(var) = key_env
            && !is_variable_name(var)
        {
            return Err(bad(format!("{var:?} is not an environment variable name (KEY_ENV of BASE_URL=KEY_ENV)")));
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| bad(format!("the base URL does not parse: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad(format!("the scheme {:?} is not http or https", parsed.scheme())));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("the base URL carries credentials: name the variable holding the key instead \
                            (BASE_URL=KEY_ENV)"
                .to_owned()));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("the base URL has a query or a fragment: give it up to /v1".to_owned()));
        }
        Ok(OfferedEndpoint { base_url: trimmed(url).to_owned(), key_env: key_env.map(str::to_owned) })
    }

    /// The form the worker registers it in: `BASE_URL` or `BASE_URL=KEY_ENV`.
    pub fn wire(&self) -> String {
        match &self.key_env {
            Some(var) => format!("{}={var}", self.base_url),
            None => self.base_url.clone(),
        }
    }
}

/// A base URL as endpoints are compared: without its trailing `/`s.
pub fn trimmed(base_url: &str) -> &str {
    base_url.trim_end_matches('/')
}

fn is_variable_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The endpoints a worker's operator offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelEndpoints {
    endpoints: Vec<OfferedEndpoint>,
}

impl ModelEndpoints {
    /// The `--model-endpoint` values; an error names the value and what is wrong, and refuses the
    /// same base URL offered twice.
    pub fn from_flags(flags: &[String]) -> Result<ModelEndpoints, String> {
        let mut endpoints: Vec<OfferedEndpoint> = Vec::with_capacity(flags.len());
        for flag in flags {
            let endpoint = OfferedEndpoint::parse(flag)?;
            if endpoints.iter().any(|e| e.base_url == endpoint.base_url) {
                return Err(format!("--model-endpoint {}: offered twice", endpoint.base_url));
            }
            endpoints.push(endpoint);
        }
        Ok(ModelEndpoints { endpoints })
    }

    /// Check that every named key variable is set and not empty (its value is not kept), so a
    /// worker without its keys stops at its start instead of failing every call.
    pub fn check_keys(&self) -> Result<(), String> {
        for endpoint in &self.endpoints {
            if let Some(var) = &endpoint.key_env {
                match std::env::var_os(var) {
                    Some(value) if !value.to_string_lossy().trim().is_empty() => {}
                    Some(_) => {
                        return Err(format!("--model-endpoint {}: the variable {var} is empty", endpoint.wire()));
                    }
                    None => return Err(format!("--model-endpoint {}: the variable {var} is not set", endpoint.wire())),
                }
            }
        }
        Ok(())
    }

    /// The endpoint offered at `base_url` (compared without trailing `/`s).
    pub fn find(&self, base_url: &str) -> Option<&OfferedEndpoint> {
        self.endpoints.iter().find(|e| e.base_url == trimmed(base_url))
    }

    /// Each endpoint as the worker registers it ([`OfferedEndpoint::wire`]).
    pub fn wire(&self) -> Vec<String> {
        self.endpoints.iter().map(OfferedEndpoint::wire).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

/// The variable a call to `offered` reads its key from, when the study's endpoint names
/// `study_key_env`: the operator's, which a study may repeat or leave out; another one is
/// refused, naming both, and never read.
pub fn key_variable(offered: &OfferedEndpoint, study_key_env: Option<&str>) -> Result<Option<String>, String> {
    match (offered.key_env.as_deref(), study_key_env) {
        (operator, None) => Ok(operator.map(str::to_owned)),
        (Some(operator), Some(study)) if operator == study => Ok(Some(operator.to_owned())),
        (Some(operator), Some(study)) => Err(format!(
            "the study reads the key of model endpoint {} from {study}, but this worker's operator offers it with \
             {operator} (--model-endpoint {}): the worker reads no variable its operator did not name",
            offered.base_url,
            offered.wire()
        )),
        (None, Some(study)) => Err(format!(
            "the study reads the key of model endpoint {} from {study}, but this worker's operator offers it without \
             a key variable (--model-endpoint {0}={study} would offer it with that one): the worker reads no variable \
             its operator did not name",
            offered.base_url
        )),
    }
}

/// What a client is shared by: the endpoint, the model and every setting its requests depend on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    base_url: String,
    model: String,
    key_env: Option<String>,
    concurrency: u32,
    request_timeout_s: u32,
    thinking_kwargs: bool,
}

/// The runner of `model_call` jobs (see the module docs).
#[derive(Clone)]
pub struct ModelCallRunner {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: ModelEndpoints,
    retry: RetryPolicy,
    clients: Mutex<HashMap<ClientKey, Arc<OpenAiClient>>>,
    services: OnceLock<Arc<dyn JobServices>>,
}

impl ModelCallRunner {
    /// The kind it reports under (a panic's no-outcome names it); model calls are routed by their
    /// job kind, not by a study's runner.
    pub const KIND: &'static str = "model_call";

    /// A runner calling the endpoints of `endpoints` with the default [`RetryPolicy`].
    pub fn new(endpoints: ModelEndpoints) -> ModelCallRunner {
        ModelCallRunner::with_retry(endpoints, RetryPolicy::default())
    }

    /// [`ModelCallRunner::new`] with another retry policy (the tests' short waits).
    pub fn with_retry(endpoints: ModelEndpoints, retry: RetryPolicy) -> ModelCallRunner {
        ModelCallRunner {
            inner: Arc::new(Inner { endpoints, retry, clients: Mutex::new(HashMap::new()), services: OnceLock::new() }),
        }
    }

    pub fn endpoints(&self) -> &ModelEndpoints {
        &self.inner.endpoints
    }
}

impl AgentRunner for ModelCallRunner {
    fn kind(&self) -> &'static str {
        ModelCallRunner::KIND
    }

    fn run(&self, job: JobSpec, cancel: CancellationToken) -> BoxFuture<'static, JobReport> {
        let inner = self.inner.clone();
        Box::pin(async move { NoOutcome::or_report(inner.run(&job, &cancel).await, &job.key, job.attempt) })
    }

    fn model_endpoints(&self) -> Vec<String> {
        self.inner.endpoints.wire()
    }

    fn attach(&self, services: Arc<dyn JobServices>) {
        let _ = self.inner.services.set(services);
    }
}

impl Inner {
    async fn run(&self, job: &JobSpec, cancel: &CancellationToken) -> Result<JobReport, NoOutcome> {
        let JobKey::ModelCall { call, .. } = &job.key else {
            return Err(NoOutcome::BadJob(format!(
                "the model-call runner was handed a {} job",
                job.key.kind().as_str()
            )));
        };
        let digest = job
            .trajectory_digest
            .as_deref()
            .ok_or_else(|| NoOutcome::BadJob(format!("model call {call} names no input (no trajectory_digest)")))?;
        let services = self.services.get().ok_or_else(|| {
            NoOutcome::Services("the model-call runner has no connection to the coordinator's services".to_owned())
        })?;
        let bytes = tokio::select! {
            fetched = services.fetch_file(digest) => fetched.map_err(|e| {
                NoOutcome::Services(format!("cannot fetch the input {digest} of model call {call}: {e}"))
            })?,
            () = cancel.cancelled() => return Err(NoOutcome::Cancelled),
        };
        let input: CallInput = serde_json::from_slice(&bytes).map_err(|e| {
            NoOutcome::BadJob(format!("the input {digest} of model call {call} is not a call input: {e}"))
        })?;
        if input.key.as_subject() != *call {
            return Err(NoOutcome::BadJob(format!(
                "the input {digest} is that of model call {}, not of {call}",
                input.key.as_subject()
            )));
        }
        let client = self.client(&input.model.endpoint).map_err(NoOutcome::ModelEndpoint)?;
        let CallInput { key, purpose, template, messages, model, check } = input;
        let s = model.sampling;
        let answer_check = |text: &str| check.check(text);
        let request = CallRequest {
            call: call.clone(),
            stage: key.stage(),
            purpose,
            template: template.template(),
            messages,
            sampling: SamplingParams {
                temperature: s.temperature,
                top_p: s.top_p,
                max_tokens: s.max_tokens,
                seed: None,
                n: None,
                disable_thinking: s.disable_thinking,
            },
            check: &answer_check,
        };
        let result = tokio::select! {
            result = client.call(request) => result,
            () = cancel.cancelled() => return Err(NoOutcome::Cancelled),
        };
        let status = match &result.log.status {
            CallStatus::Ok => "ok",
            CallStatus::Malformed { .. } => "malformed",
            CallStatus::Failed { .. } => "failed",
        };
        tracing::info!(call = %call, status, retries = result.log.retries, endpoint = %result.log.endpoint,
            model = %result.log.model, "model call ended");
        let output = CallOutput { answer: result.answers.ok().and_then(|a| a.into_iter().next()), log: result.log };
        let bytes = serde_json::to_vec(&output)
            .map_err(|e| NoOutcome::Record(format!("the output of model call {call} does not encode: {e}")))?;
        let output = services.put_file(&bytes).await.map_err(NoOutcome::Services)?;
        Ok(JobReport::CallAnswered { output })
    }

    /// The client of `model`'s endpoint, made on its first call (reading its key variable then).
    fn client(&self, model: &ModelRef) -> Result<Arc<OpenAiClient>, String> {
        let offered = self.endpoints.find(&model.base_url).ok_or_else(|| {
            let offered = self.endpoints.wire();
            format!(
                "this worker does not offer the model endpoint {} (it offers {})",
                trimmed(&model.base_url),
                if offered.is_empty() { "none".to_owned() } else { offered.join(", ") }
            )
        })?;
        let key_env = key_variable(offered, model.api_key_env.as_deref())?;
        let key = ClientKey {
            base_url: offered.base_url.clone(),
            model: model.model.clone(),
            key_env: key_env.clone(),
            concurrency: model.concurrency,
            request_timeout_s: model.request_timeout_s,
            thinking_kwargs: model.thinking_kwargs,
        };
        let mut clients = self.clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = OpenAiClient::new(EndpointConfig {
            base_url: offered.base_url.clone(),
            model: model.model.clone(),
            api_key_env: key_env,
            max_concurrency: model.concurrency as usize,
            request_timeout: Duration::from_secs(u64::from(model.request_timeout_s)),
            retry: self.retry.clone(),
            thinking: if model.thinking_kwargs { ThinkingControl::ChatTemplateKwargs } else { ThinkingControl::None },
        })
        .map_err(|e| e.to_string())?;
        let client = Arc::new(client);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(base_url: &str, key_env: Option<&str>) -> OfferedEndpoint {
        OfferedEndpoint { base_url: base_url.into(), key_env: key_env.map(str::to_owned) }
    }

    #[test]
    fn flags_read_a_base_url_and_its_key_variable() {
        assert_eq!(OfferedEndpoint::parse("http://vllm:8000/v1/").unwrap(), endpoint("http://vllm:8000/v1", None));
        let keyed = OfferedEndpoint::parse("https://api.example/v1=OPENAI_API_KEY").unwrap();
        assert_eq!(keyed, endpoint("https://api.example/v1", Some("OPENAI_API_KEY")));
        assert_eq!(keyed.wire(), "https://api.example/v1=OPENAI_API_KEY");
        for (flag, says) in [
            ("/v1", "does not parse"),
            ("vllm:8000/v1", "not http or https"),
            ("ftp://vllm/v1", "not http or https"),
            ("http://user:secret@vllm/v1", "credentials"),
            ("http://vllm/v1?key=1", "query"),
            ("http://vllm/v1=1KEY", "not an environment variable name"),
            ("http://vllm/v1=MY-KEY", "not an environment variable name"),
        ] {
            let err = OfferedEndpoint::parse(flag).unwrap_err();
            assert!(err.contains(says) && err.contains("--model-endpoint"), "{flag}: {err}");
            assert!(!err.contains("secret") || says == "credentials", "{err}");
        }
        let twice = ModelEndpoints::from_flags(&["http://a/v1".into(), "http://a/v1/=K".into()]).unwrap_err();
        assert!(twice.contains("offered twice"), "{twice}");
    }

    #[test]
    fn endpoints_are_found_without_trailing_slashes() {
        let offer = ModelEndpoints::from_flags(&["http://a:1/v1".into(), "http://b:2/v1=B_KEY".into()]).unwrap();
        assert_eq!(offer.find("http://a:1/v1/").map(|e| e.base_url.as_str()), Some("http://a:1/v1"));
        assert!(offer.find("http://a:1").is_none());
        assert_eq!(offer.wire(), ["http://a:1/v1", "http://b:2/v1=B_KEY"]);
    }

    #[test]
    fn the_key_variable_is_the_operators() {
        let keyed = endpoint("http://e/v1", Some("OP_KEY"));
        let open = endpoint("http://e/v1", None);
        assert_eq!(key_variable(&keyed, None), Ok(Some("OP_KEY".into())));
        assert_eq!(key_variable(&keyed, Some("OP_KEY")), Ok(Some("OP_KEY".into())));
        assert_eq!(key_variable(&open, None), Ok(None));
        let other = key_variable(&keyed, Some("STUDY_KEY")).unwrap_err();
        assert!(other.contains("STUDY_KEY") && other.contains("OP_KEY"), "{other}");
        let none = key_variable(&open, Some("STUDY_KEY")).unwrap_err();
        assert!(none.contains("STUDY_KEY") && none.contains("without a key variable"), "{none}");
    }

    #[test]
    fn an_unset_key_variable_is_refused_at_the_start() {
        let offer = ModelEndpoints::from_flags(&["http://e/v1=VCURVE_TEST_NO_SUCH_VARIABLE_SET".into()]).unwrap();
        let err = offer.check_keys().unwrap_err();
        assert!(err.contains("VCURVE_TEST_NO_SUCH_VARIABLE_SET is not set"), "{err}");
        let set = ModelEndpoints::from_flags(&["http://e/v1=CARGO_PKG_NAME".into()]).unwrap();
        assert_eq!(set.check_keys(), Ok(()));
    }
}
