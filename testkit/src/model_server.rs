//! The deterministic model server of the task-state tests (and, later, the demo): an
//! OpenAI-compatible `POST /v1/chat/completions` on loopback whose answers are rules keyed by the
//! prompt template a request names (the `template: ID` line every vcurve template opens with).
//!
//! Its truth comes from markers in the session text:
//! `[[STATE id=S1 category=failures importance=3 fact=the test suite needs TZ=UTC]]` (the fact runs
//! to the closing `]]`; `fact="…"` is the text between the quotes), read by
//! `vcurve_record::task_state::markers`, which holds the extraction and judge rules too, so that
//! `vcurve_record::task_state::truth` computes what a study against this server must measure
//! without asking it. The rules:
//!
//! - `task_state.extract_atoms.v1`: one atom per marker id in the context (its first occurrence),
//!   the statement its fact, the origin turn the `## Turn j` block it is in (0 before any turn),
//!   the provenance the block label above it (`[output]` → `tool_output`, `$ cmd` → `command`, …).
//! - `task_state.generate_probes.v1`: one probe per atom, the reference its statement; the
//!   question names the atom and carries the statement hex-encoded (`[probe-key …]`), so later
//!   stages know the fact without the server keeping state.
//! - `task_state.reader.v1`: a probe's answer is its fact exactly when the fact occurs in the
//!   context it was given, else `unknown`.
//! - `task_state.actor_probe.v1`: the same, over the messages before the question (the agent's own
//!   history).
//! - `task_state.judge.v1`: credit 1 when the answer equals the reference (case and whitespace
//!   aside), 0.5 when one contains the other (the answer neither empty nor `unknown`), else 0.
//!
//! - `labels.first_mistake.v1`: the 0-based index of the `### Step i` block holding the first
//!   `[[MISTAKE]]` marker of the trajectory, `-1` when none does.
//!
//! Faults for the next N requests ([`ModelServer::inject`]): a 429 with `Retry-After`, a 500, any
//! status, a delay, a malformed answer. It counts requests and answers per template, the most
//! requests it had in flight at once, and keeps every request body.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use vcurve_record::llm::templates::find_template_line;
pub use vcurve_record::task_state::markers::{Marker, markers};
use vcurve_record::task_state::markers::{extraction_answer, judge_credit, message_text};

/// The marker a trajectory step carries where the judge's truth puts its first mistake.
pub const MISTAKE_MARKER: &str = "[[MISTAKE]]";

/// A fault the server answers a request with instead of its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 429 with `Retry-After: secs`.
    RateLimited { retry_after_secs: u32 },
    /// 500.
    ServerError,
    /// Any status, with an error body.
    Status(u16),
    /// Wait this long, then answer by the rule (a client with a shorter timeout gives up first).
    Delay(Duration),
    /// 200 with a completion whose content is not the template's JSON.
    Malformed,
}

#[derive(Default)]
struct Counts {
    requests: BTreeMap<String, u64>,
    answered: BTreeMap<String, u64>,
    bodies: Vec<Value>,
    seen_system: HashSet<u64>,
}

struct Inner {
    api_key: Option<String>,
    faults: Mutex<VecDeque<Fault>>,
    latency: Mutex<Duration>,
    counts: Mutex<Counts>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running server; stopped when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ModelServer {
    /// A server on a free loopback port that asks no API key.
    pub async fn start() -> std::io::Result<ModelServer> {
        ModelServer::start_with_key(None).await
    }

    /// A server that answers 401 to a request without `Authorization: Bearer KEY`.
    pub async fn start_with_key(api_key: Option<String>) -> std::io::Result<ModelServer> {
        let inner = Arc::new(Inner {
            api_key,
            faults: Mutex::new(VecDeque::new()),
            latency: Mutex::new(Duration::ZERO),
            counts: Mutex::new(Counts::default()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ModelServer { addr, inner, task })
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL a client is given.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answers the next `count` requests (of any template) with `fault`, after those already
    /// queued.
    pub fn inject(&self, fault: Fault, count: usize) {
        let mut q = self.inner.faults.lock().expect("not poisoned");
        q.extend(std::iter::repeat_n(fault, count));
    }

    /// Every request waits this long before it is answered (to make concurrency visible).
    pub fn set_latency(&self, latency: Duration) {
        *self.inner.latency.lock().expect("not poisoned") = latency;
    }

    /// Requests that named `template` (`task_state.reader.v1`), faulted ones included.
    pub fn requests(&self, template: &str) -> u64 {
        self.inner.counts.lock().expect("not poisoned").requests.get(template).copied().unwrap_or(0)
    }

    /// Requests of `template` answered by its rule with a 200.
    pub fn answered(&self, template: &str) -> u64 {
        self.inner.counts.lock().expect("not poisoned").answered.get(template).copied().unwrap_or(0)
    }

    /// Requests per template (`"(none)"` for a request naming none).
    pub fn requests_by_template(&self) -> BTreeMap<String, u64> {
        self.inner.counts.lock().expect("not poisoned").requests.clone()
    }

    /// The most requests in flight at once so far.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// Every request body received, in order of arrival.
    pub fn bodies(&self) -> Vec<Value> {
        self.inner.counts.lock().expect("not poisoned").bodies.clone()
    }
}

struct InFlight<'a>(&'a Inner);

impl<'a> InFlight<'a> {
    fn enter(inner: &'a Inner) -> InFlight<'a> {
        let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(inner)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({"error": {"message": message, "type": "vcurve_model_server"}}))).into_response()
}

async fn chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> Response {
    let _guard = InFlight::enter(&inner);
    let request: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("the body is not JSON: {e}")),
    };
    let (Some(model), Some(messages)) =
        (request.get("model").and_then(Value::as_str), request.get("messages").and_then(Value::as_array))
    else {
        return error(StatusCode::BAD_REQUEST, "a request needs \"model\" and \"messages\"".into());
    };
    let texts: Vec<String> = messages.iter().map(message_text).collect();
    let template = find_template_line(texts.iter().map(String::as_str)).unwrap_or_else(|| "(none)".into());
    let cached = {
        let mut counts = inner.counts.lock().expect("not poisoned");
        *counts.requests.entry(template.clone()).or_insert(0) += 1;
        counts.bodies.push(request.clone());
        // A system message seen before is read from the cache, as a prefix cache would.
        match messages.first().filter(|m| m.get("role").and_then(Value::as_str) == Some("system")) {
            Some(m) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                message_text(m).hash(&mut h);
                if counts.seen_system.insert(h.finish()) { 0 } else { tokens(&message_text(m)) }
            }
            None => 0,
        }
    };
    // Counted above: a refused request is a request.
    if let Some(key) = &inner.api_key {
        let sent = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if sent != Some(format!("Bearer {key}").as_str()) {
            return error(StatusCode::UNAUTHORIZED, "a missing or wrong API key".into());
        }
    }
    let latency = *inner.latency.lock().expect("not poisoned");
    let fault = inner.faults.lock().expect("not poisoned").pop_front();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let content = match fault {
        Some(Fault::RateLimited { retry_after_secs }) => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "rate limited (injected)".into());
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return r;
        }
        Some(Fault::ServerError) => return error(StatusCode::INTERNAL_SERVER_ERROR, "server error (injected)".into()),
        Some(Fault::Status(s)) => {
            let status = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, format!("status {s} (injected)"));
        }
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            None
        }
        Some(Fault::Malformed) => Some("I think the answer is probably in the logs.".to_string()),
        None => None,
    };
    let content = match content {
        Some(c) => c,
        None => match answer(&template, &texts) {
            Ok(v) => v.to_string(),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("template {template}: {e}")),
        },
    };
    inner.counts.lock().expect("not poisoned").answered.entry(template).and_modify(|n| *n += 1).or_insert(1);
    let n = request.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
    let input: u64 = texts.iter().map(|t| tokens(t)).sum();
    let output = tokens(&content) * n;
    let choices: Vec<Value> = (0..n)
        .map(|i| json!({"index": i, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}))
        .collect();
    axum::Json(json!({
        "id": "chatcmpl-vcurve-model-server",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
                  "prompt_tokens_details": {"cached_tokens": cached}}
    }))
    .into_response()
}

/// The tokens the server reports for a text: `ceil(UTF-8 bytes / 4)`.
pub fn tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Result<&'a str, String> {
    let start = text.find(open).ok_or_else(|| format!("no {open:?} in the request"))? + open.len();
    let end = text.rfind(close).filter(|e| *e >= start).ok_or_else(|| format!("no {close:?} after {open:?}"))?;
    Ok(&text[start..end])
}

fn last_user(texts: &[String]) -> Result<&str, String> {
    texts.last().map(String::as_str).ok_or_else(|| "no messages".to_string())
}

fn hex_encode(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

/// The fact a probe question of this server carries, if it carries one.
fn probe_fact(question: &str) -> Option<String> {
    let start = question.find("[probe-key ")? + "[probe-key ".len();
    let end = question[start..].find(']')? + start;
    hex_decode(&question[start..end])
}

fn recall(question: &str, text: &str) -> String {
    match probe_fact(question) {
        Some(fact) if text.contains(&fact) => fact,
        _ => "unknown".into(),
    }
}

/// The rule's answer to a request of `template` whose messages' texts are `texts`.
fn answer(template: &str, texts: &[String]) -> Result<Value, String> {
    match template {
        "task_state.extract_atoms.v1" => {
            Ok(extraction_answer(between(last_user(texts)?, "<context>\n", "\n</context>")?))
        }
        "task_state.generate_probes.v1" => {
            let atoms: Vec<Value> = serde_json::from_str(between(last_user(texts)?, "<atoms>\n", "\n</atoms>")?)
                .map_err(|e| format!("the atoms are not a JSON array: {e}"))?;
            let probes = atoms
                .iter()
                .map(|a| {
                    let field = |k: &str| a.get(k).and_then(Value::as_str).ok_or_else(|| format!("an atom without {k:?}"));
                    let (id, category, statement) = (field("id")?, field("category")?, field("statement")?);
                    Ok(json!({"atom": id,
                              "question": format!("What does the session record about {id} ({category})? [probe-key {}]", hex_encode(statement)),
                              "reference": statement}))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(json!({"probes": probes}))
        }
        "task_state.reader.v1" => {
            let user = last_user(texts)?;
            let context = between(user, "<context>\n", "\n</context>")?;
            let questions: Vec<Value> = serde_json::from_str(between(user, "<questions>\n", "\n</questions>")?)
                .map_err(|e| format!("the questions are not a JSON array: {e}"))?;
            let answers = questions
                .iter()
                .map(|q| {
                    let id = q.get("id").and_then(Value::as_str).ok_or("a question without \"id\"")?;
                    let question =
                        q.get("question").and_then(Value::as_str).ok_or("a question without \"question\"")?;
                    Ok(json!({"id": id, "answer": recall(question, context)}))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(json!({"answers": answers}))
        }
        "task_state.actor_probe.v1" => {
            let (question, history) = texts.split_last().ok_or("no messages")?;
            Ok(json!({"answer": recall(question, &history.join("\n\n"))}))
        }
        "task_state.judge.v1" => {
            let items: Vec<Value> = serde_json::from_str(between(last_user(texts)?, "<items>\n", "\n</items>")?)
                .map_err(|e| format!("the items are not a JSON array: {e}"))?;
            let scores = items
                .iter()
                .map(|i| {
                    let field =
                        |k: &str| i.get(k).and_then(Value::as_str).ok_or_else(|| format!("an item without {k:?}"));
                    // 1 and 0 as integers, as a model writes them.
                    let credit = match judge_credit(field("reference")?, field("answer")?).value() {
                        0.5 => json!(0.5),
                        c => json!(c as u8),
                    };
                    let id = field("id")?;
                    Ok(json!({"id": id, "credit": credit}))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(json!({"scores": scores}))
        }
        "labels.first_mistake.v1" => {
            let trajectory = between(last_user(texts)?, "<trajectory", "\n</trajectory>")?;
            let marker = trajectory.find(MISTAKE_MARKER);
            let mut index = -1i64;
            if let Some(at) = marker {
                for line in trajectory[..at].lines() {
                    if let Some(i) = line.strip_prefix("### Step ").and_then(|i| i.trim().parse::<i64>().ok()) {
                        index = i;
                    }
                }
            }
            Ok(json!({"first_mistake": index, "explanation": "the step of the first [[MISTAKE]] marker"}))
        }
        other => Err(format!("no rule for template {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_read_with_their_fields_and_bad_ones_skipped() {
        let t = "x [[STATE id=S1 category=failures importance=3 fact=pip install fails: no network]] y \
                 [[STATE id=S2 category=risks importance=7 fact=z]] [[STATE id=S3 fact=w]]";
        let m = markers(t);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].id.as_str(), m[0].category.as_str(), m[0].importance), ("S1", "failures", 3));
        assert_eq!(m[0].fact, "pip install fails: no network");
        assert_eq!(hex_decode(&hex_encode("é ok")).as_deref(), Some("é ok"));
    }

    #[test]
    fn atoms_carry_their_turn_and_block_and_readers_answer_from_what_they_were_given() {
        let context = "# Task t\n\nfix it\n\n## Turn 1\n[user]\nInvestigate\n\n$ run\n[output]\n\
                       [[STATE id=S1 category=failures importance=3 fact=run crashes on empty input]]\n[exit code 1]\n\n\
                       ## Turn 2\n[user]\nFix\n\n[report]\nDone. [[STATE id=S2 category=progress importance=2 fact=patched parse]]";
        let user = format!("Task: t\nCheckpoint: end of turn 2\n\n<context>\n{context}\n</context>\n\nWrite.");
        let atoms = answer("task_state.extract_atoms.v1", &["sys".into(), user]).unwrap();
        assert_eq!(atoms["atoms"][0]["provenance"], "tool_output");
        assert_eq!(atoms["atoms"][0]["origin_turn"], 1);
        assert_eq!(atoms["atoms"][1]["provenance"], "report");
        assert_eq!(atoms["atoms"][1]["origin_turn"], 2);

        let given =
            json!([{"id": "S1", "category": "failures", "importance": 3, "statement": "run crashes on empty input"}]);
        let probes = answer("task_state.generate_probes.v1", &[format!("<atoms>\n{given}\n</atoms>")]).unwrap();
        let question = probes["probes"][0]["question"].as_str().unwrap().to_string();
        assert!(!question.contains("crashes"), "the question does not show the fact: {question}");
        let ask = |ctx: &str| {
            let qs = json!([{"id": "p1", "question": question}]);
            answer(
                "task_state.reader.v1",
                &[format!("<context>\n{ctx}\n</context>\n\n<questions>\n{qs}\n</questions>")],
            )
            .unwrap()["answers"][0]["answer"]
                .clone()
        };
        assert_eq!(ask("the run crashes on empty input, sadly"), "run crashes on empty input");
        assert_eq!(ask("nothing here"), "unknown");
        let actor =
            answer("task_state.actor_probe.v1", &["I saw: run crashes on empty input".into(), question.clone()])
                .unwrap();
        assert_eq!(actor["answer"], "run crashes on empty input");

        let items = json!([
            {"id": "a", "question": "q", "reference": "Run crashes  on empty input", "answer": "run crashes on empty input"},
            {"id": "b", "question": "q", "reference": "run crashes on empty input", "answer": "crashes"},
            {"id": "c", "question": "q", "reference": "run crashes on empty input", "answer": "unknown"}]);
        let scores = answer("task_state.judge.v1", &[format!("<items>\n{items}\n</items>")]).unwrap();
        assert_eq!(
            scores,
            json!({"scores": [{"id": "a", "credit": 1}, {"id": "b", "credit": 0.5}, {"id": "c", "credit": 0}]})
        );
        assert!(answer("nope.v1", &[]).unwrap_err().contains("no rule"));
        let label = |steps: &str| {
            answer("labels.first_mistake.v1", &[format!("<trajectory steps=\"2\">\n{steps}\n</trajectory>")]).unwrap()
                ["first_mistake"]
                .clone()
        };
        assert_eq!(label("### Step 0\nls\n\n### Step 1\nrm tests [[MISTAKE]]"), 1);
        assert_eq!(label("### Step 0\nls"), -1);
    }
}
