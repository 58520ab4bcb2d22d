//! The model call layer (`vcurve_worker::llm`) against the deterministic model server of the
//! testkit: what is sent, the log of every call, retries on 429 / 5xx / timeouts / connection
//! errors, malformed answers, the concurrency limit, and the task-state stages end to end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use vcurve_method::task_state::Credit;
use vcurve_method::task_state::usage::{GroupBy, Stage, Tokens, usage};
use vcurve_record::llm::answers::{self, MalformedAnswer};
use vcurve_record::llm::{AttemptOutcome, CallStatus, ModelCall, TemplateName, ThinkingSent};
use vcurve_testkit::model_server::{Fault, ModelServer, tokens};
use vcurve_worker::llm::{
    CallError, CallRequest, CallResult, EndpointConfig, ModelClient, OpenAiClient, RetryPolicy, SamplingParams,
    ThinkingControl,
};

fn config(base_url: String) -> EndpointConfig {
    EndpointConfig {
        base_url,
        model: "test-model".into(),
        api_key_env: None,
        max_concurrency: 4,
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 4,
            max_malformed: 2,
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_millis(80),
            max_retry_after: Duration::from_secs(5),
        },
        thinking: ThinkingControl::ChatTemplateKwargs,
    }
}

fn judge_check(text: &str) -> Result<(), MalformedAnswer> {
    answers::parse_judge(text, &["s1"]).map(drop)
}

fn judge_values() -> BTreeMap<&'static str, String> {
    let items = serde_json::json!([{"id": "s1", "question": "Which test fails?", "reference": "test_parse", "answer": "test_parse"}]);
    BTreeMap::from([("items", items.to_string())])
}

async fn judge_call(client: &OpenAiClient, call: &str) -> CallResult {
    let sampling =
        SamplingParams { temperature: Some(0.0), seed: Some(7), disable_thinking: true, ..SamplingParams::default() };
    let request = CallRequest::render(
        call,
        Stage::Judge,
        TemplateName::Judge.template(),
        &judge_values(),
        sampling,
        &judge_check,
    )
    .expect("the judge's variables");
    client.call(request).await
}

fn statuses(log: &ModelCall) -> Vec<Option<u16>> {
    log.attempts.iter().map(|a| a.http_status).collect()
}

#[tokio::test]
async fn a_call_sends_its_template_and_parameters_and_logs_tokens_without_the_key() {
    // cargo and nextest both set CARGO_PKG_NAME for a test process: a variable the test can name
    // without setting one (edition 2024 makes `set_var` unsafe, and this workspace forbids it).
    let key = std::env::var("CARGO_PKG_NAME").expect("the test runner sets CARGO_PKG_NAME");
    let server = ModelServer::start_with_key(Some(key.clone())).await.unwrap();
    let client =
        OpenAiClient::new(EndpointConfig { api_key_env: Some("CARGO_PKG_NAME".into()), ..config(server.base_url()) })
            .unwrap();

    let result = judge_call(&client, "judge/c1/s1").await;
    let texts = result.answers.expect("an answer");
    assert_eq!(answers::parse_judge(&texts[0], &["s1"]).unwrap()[0].credit, Credit::Full);

    let body = &server.bodies()[0];
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 7);
    assert_eq!(body["chat_template_kwargs"], serde_json::json!({"enable_thinking": false, "thinking": false}));
    assert!(body.get("top_p").is_none() && body.get("n").is_none() && body.get("max_tokens").is_none(), "{body}");

    let log = result.log;
    let template = TemplateName::Judge.template();
    assert_eq!(log.template, "task_state.judge.v1");
    assert_eq!(log.template_hash, template.sha256);
    assert_eq!(log.endpoint, server.base_url());
    assert_eq!(
        (log.stage, log.model.as_str(), log.retries, &log.status),
        (Stage::Judge, "test-model", 0, &CallStatus::Ok)
    );
    assert_eq!(log.sampling.temperature, Some(0.0));
    assert_eq!(log.sampling.seed, Some(7));
    assert_eq!(log.sampling.thinking, ThinkingSent::ChatTemplateKwargsDisabled);
    let input: u64 = body["messages"].as_array().unwrap().iter().map(|m| tokens(m["content"].as_str().unwrap())).sum();
    let want = Tokens { input, output: tokens(&texts[0]), cached: 0 };
    assert_eq!(log.tokens, Some(want));
    assert_eq!(log.attempts[0].tokens, Some(want));

    // The same system prompt again is a cache read.
    let again = judge_call(&client, "judge/c1/s2").await.log;
    let system = tokens(body["messages"][0]["content"].as_str().unwrap());
    assert_eq!(again.tokens.unwrap().cached, system);
    let rows = usage(&[log.requests(), again.requests()].concat(), GroupBy::Stage).unwrap();
    assert_eq!((rows[0].calls, rows[0].requests, rows[0].effective.cached), (2, 2, system));

    let json = serde_json::to_string(&log).unwrap();
    assert!(!json.contains(&key), "the API key is never logged: {json}");
    assert!(!format!("{client:?}").contains(&key));

    // Without the key the server answers 401: a failure at once, not retried.
    let keyless = OpenAiClient::new(config(server.base_url())).unwrap();
    let denied = judge_call(&keyless, "judge/c1/s3").await;
    assert!(matches!(&denied.answers, Err(CallError::Failed(r)) if r.starts_with("HTTP 401")), "{:?}", denied.answers);
    assert_eq!(statuses(&denied.log), [Some(401)]);
    assert_eq!(server.requests("task_state.judge.v1"), 3);
}

#[tokio::test]
async fn rate_limits_are_retried_after_retry_after_and_recorded() {
    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    server.inject(Fault::RateLimited { retry_after_secs: 1 }, 1);
    let start = Instant::now();
    let result = judge_call(&client, "judge/429").await;
    assert!(start.elapsed() >= Duration::from_secs(1), "the client waited the server's Retry-After");
    assert!(result.answers.is_ok(), "{:?}", result.answers);
    let log = result.log;
    assert_eq!(statuses(&log), [Some(429), Some(200)]);
    assert_eq!(log.retries, 1);
    assert_eq!(log.attempts[0].wait_before_next_ms, Some(1000));
    assert!(matches!(&log.attempts[0].outcome, AttemptOutcome::Failed { reason } if reason.starts_with("HTTP 429")));
    assert_eq!(log.attempts[0].tokens, None);
    assert_eq!(log.status, CallStatus::Ok);
    assert_eq!((server.requests("task_state.judge.v1"), server.answered("task_state.judge.v1")), (2, 1));
}

#[tokio::test]
async fn server_errors_and_timeouts_are_retried_with_backoff_and_recorded() {
    let server = ModelServer::start().await.unwrap();
    let client =
        OpenAiClient::new(EndpointConfig { request_timeout: Duration::from_millis(300), ..config(server.base_url()) })
            .unwrap();
    server.inject(Fault::ServerError, 1);
    server.inject(Fault::Delay(Duration::from_secs(2)), 1);
    server.inject(Fault::Status(503), 1);
    let result = judge_call(&client, "judge/5xx").await;
    assert!(result.answers.is_ok(), "{:?}", result.answers);
    let log = result.log;
    assert_eq!(statuses(&log), [Some(500), None, Some(503), Some(200)]);
    let AttemptOutcome::Failed { reason } = &log.attempts[1].outcome else { panic!("{log:?}") };
    assert_eq!(reason, "timeout: no whole answer within 300 ms");
    assert!(log.attempts[1].latency_ms >= 300);
    // Backoff doubles from 20 ms (capped at 80 ms), each wait jittered into [half, whole).
    let waits: Vec<u64> = log.attempts.iter().filter_map(|a| a.wait_before_next_ms).collect();
    assert_eq!(waits.len(), 3);
    for (i, (w, full)) in waits.iter().zip([20, 40, 80]).enumerate() {
        assert!(*w >= full / 2 && *w < full, "wait {i}: {w} ms against {full} ms");
    }
    assert_eq!(log.retries, 3);
    assert_eq!(log.latency_ms, log.attempts.iter().map(|a| a.latency_ms).sum::<u64>());
}

#[tokio::test]
async fn retries_end_at_the_limit_and_a_client_error_fails_at_once() {
    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    server.inject(Fault::ServerError, 10);
    let result = judge_call(&client, "judge/limit").await;
    let Err(CallError::Failed(reason)) = &result.answers else { panic!("{:?}", result.answers) };
    assert!(reason.starts_with("HTTP 500") && reason.ends_with("(gave up after 4 requests)"), "{reason}");
    assert_eq!(result.log.attempts.len(), 4);
    assert!(matches!(&result.log.status, CallStatus::Failed { .. }));
    assert_eq!(result.log.tokens, None);
    assert_eq!(result.log.attempts.last().unwrap().wait_before_next_ms, None);

    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    server.inject(Fault::Status(400), 1);
    let result = judge_call(&client, "judge/400").await;
    assert!(matches!(&result.answers, Err(CallError::Failed(r)) if r.starts_with("HTTP 400")));
    assert_eq!(statuses(&result.log), [Some(400)]);
    assert_eq!(server.requests("task_state.judge.v1"), 1);
}

#[tokio::test]
async fn connection_errors_are_retried_and_recorded() {
    let closed = {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        listener.local_addr().unwrap()
    };
    let client = OpenAiClient::new(config(format!("http://{closed}/v1"))).unwrap();
    let result = judge_call(&client, "judge/refused").await;
    let Err(CallError::Failed(reason)) = &result.answers else { panic!("{:?}", result.answers) };
    assert!(reason.starts_with("connection error") && reason.ends_with("(gave up after 4 requests)"), "{reason}");
    assert_eq!(statuses(&result.log), [None, None, None, None]);
}

#[tokio::test]
async fn malformed_answers_are_retried_then_recorded_as_malformed_never_as_answers() {
    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    server.inject(Fault::Malformed, 1);
    let result = judge_call(&client, "judge/malformed-once").await;
    assert!(result.answers.is_ok());
    let log = result.log;
    assert!(
        matches!(&log.attempts[0].outcome, AttemptOutcome::Malformed { reason } if reason.contains("malformed judge answer"))
    );
    assert!(log.attempts[0].tokens.is_some(), "a malformed answer's tokens were spent: they are actual usage");
    assert_eq!(log.tokens, log.attempts[1].tokens, "effective usage is the successful request's");

    server.inject(Fault::Malformed, 2);
    let result = judge_call(&client, "judge/malformed").await;
    let Err(CallError::Malformed(m)) = &result.answers else { panic!("{:?}", result.answers) };
    assert_eq!(m.stage, "judge");
    assert_eq!(result.log.attempts.len(), 2);
    assert!(matches!(&result.log.status, CallStatus::Malformed { .. }));
    let rows = usage(&result.log.requests(), GroupBy::Stage).unwrap();
    assert_eq!((rows[0].failed_calls, rows[0].effective), (1, Tokens::default()));
}

#[tokio::test]
async fn the_endpoint_concurrency_limit_holds() {
    let server = ModelServer::start().await.unwrap();
    server.set_latency(Duration::from_millis(100));
    let client = OpenAiClient::new(EndpointConfig { max_concurrency: 2, ..config(server.base_url()) }).unwrap();
    let calls: Vec<_> =
        (0..8).map(|i| judge_call(&client, Box::leak(format!("judge/par/{i}").into_boxed_str()))).collect();
    let start = Instant::now();
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(|r| r.answers.is_ok()));
    assert_eq!(server.max_in_flight(), 2);
    assert!(start.elapsed() >= Duration::from_millis(400), "8 calls of 100 ms, 2 at a time");
}

#[tokio::test]
async fn the_task_state_stages_run_through_the_deterministic_server() {
    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    let full = "# Task demo\n\nparse('1.0') fails\n\n## Turn 1\n[user]\nInvestigate; do not modify code\n\n\
                $ python -m pytest\n[output]\n[[STATE id=S1 category=environment importance=3 fact=the tests need TZ=UTC]]\n[exit code 1]\n\n\
                [assistant reasoning]\n[[STATE id=S2 category=risks importance=2 fact=two-part versions may be used elsewhere]]\n\n\
                [report]\nparse rejects two-part versions; the tests need TZ=UTC";
    let reports = "# Task demo\n\nparse('1.0') fails\n\n## Turn 1\n[user]\nInvestigate; do not modify code\n\n\
                   [report]\nparse rejects two-part versions; the tests need TZ=UTC";

    let t0 = SamplingParams { temperature: Some(0.0), ..SamplingParams::default() };
    let values =
        BTreeMap::from([("task_id", "demo".to_string()), ("checkpoint", "1".into()), ("context", full.into())]);
    let check = |t: &str| answers::parse_atoms(t, 1).map(drop);
    let req = CallRequest::render("atoms/1", Stage::Atoms, TemplateName::ExtractAtoms.template(), &values, t0, &check)
        .unwrap();
    let atoms = answers::parse_atoms(&client.call(req).await.answers.unwrap()[0], 1).unwrap();
    assert_eq!(
        atoms.iter().map(|a| (a.id.as_str(), a.importance, a.origin_turn)).collect::<Vec<_>>(),
        [("S1", 3, 1), ("S2", 2, 1)]
    );

    let given = serde_json::to_string(
        &atoms.iter().map(|a| serde_json::json!({"id": a.id, "category": a.category, "importance": a.importance, "statement": a.statement})).collect::<Vec<_>>(),
    )
    .unwrap();
    let values = BTreeMap::from([("task_id", "demo".to_string()), ("checkpoint", "1".into()), ("atoms", given)]);
    let check = |t: &str| answers::parse_probes(t, &["S1", "S2"]).map(drop);
    let req =
        CallRequest::render("probes/1", Stage::Probes, TemplateName::GenerateProbes.template(), &values, t0, &check)
            .unwrap();
    let probes = answers::parse_probes(&client.call(req).await.answers.unwrap()[0], &["S1", "S2"]).unwrap();

    let questions = serde_json::to_string(
        &probes.iter().map(|p| serde_json::json!({"id": p.atom, "question": p.question})).collect::<Vec<_>>(),
    )
    .unwrap();
    let t7 = SamplingParams { temperature: Some(0.7), disable_thinking: true, ..SamplingParams::default() };
    let mut by_view = BTreeMap::new();
    for (view, text) in [("full", full), ("reports", reports)] {
        let values = BTreeMap::from([("context", text.to_string()), ("questions", questions.clone())]);
        let check = |t: &str| answers::parse_reader(t, &["S1", "S2"]).map(drop);
        let req = CallRequest::render(
            format!("reader/1/{view}/0"),
            Stage::Reader,
            TemplateName::Reader.template(),
            &values,
            t7,
            &check,
        )
        .unwrap();
        by_view
            .insert(view, answers::parse_reader(&client.call(req).await.answers.unwrap()[0], &["S1", "S2"]).unwrap());
    }
    assert_eq!(by_view["full"][1].answer, "two-part versions may be used elsewhere");
    assert_eq!(by_view["reports"][0].answer, "the tests need TZ=UTC");
    assert_eq!(by_view["reports"][1].answer, "unknown", "the risk is not in the reports");

    // The actor: the agent's own history plus the template's one message.
    let actor = TemplateName::ActorProbe.template();
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are an agent."}),
        serde_json::json!({"role": "assistant", "content": full}),
    ];
    let probe = actor.render(&BTreeMap::from([("question", probes[1].question.clone())])).unwrap();
    messages.push(vcurve_worker::llm::message_json(&probe[0]));
    let check = |t: &str| answers::parse_actor(t).map(drop);
    let req = CallRequest {
        call: "actor/1/S2/0".into(),
        stage: Stage::Actor,
        purpose: Default::default(),
        template: actor,
        messages,
        sampling: t7,
        check: &check,
    };
    assert_eq!(
        answers::parse_actor(&client.call(req).await.answers.unwrap()[0]).unwrap(),
        "two-part versions may be used elsewhere"
    );

    let items = serde_json::to_string(
        &probes
            .iter()
            .zip(&by_view["reports"])
            .map(|(p, a)| serde_json::json!({"id": p.atom, "question": p.question, "reference": p.reference, "answer": a.answer}))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let check = |t: &str| answers::parse_judge(t, &["S1", "S2"]).map(drop);
    let req = CallRequest::render(
        "judge/1/reports/0",
        Stage::Judge,
        TemplateName::Judge.template(),
        &BTreeMap::from([("items", items)]),
        t0,
        &check,
    )
    .unwrap();
    let scores = answers::parse_judge(&client.call(req).await.answers.unwrap()[0], &["S1", "S2"]).unwrap();
    assert_eq!(scores.iter().map(|s| s.credit).collect::<Vec<_>>(), [Credit::Full, Credit::None]);

    let counts = server.requests_by_template();
    assert_eq!(counts.values().sum::<u64>(), 6);
    assert_eq!(counts["task_state.reader.v1"], 2);
    assert_eq!(counts["task_state.actor_probe.v1"], 1);
}

#[tokio::test]
async fn a_judge_labels_the_first_mistake_through_the_deterministic_server() {
    let server = ModelServer::start().await.unwrap();
    let client = OpenAiClient::new(config(server.base_url())).unwrap();
    let steps = "### Step 0\n$ grep -rn parse\n\n### Step 1\n$ sed -i 's/assert/pass/' tests/test_parse.py [[MISTAKE]]\n\n### Step 2\n$ pytest";
    let values = BTreeMap::from([
        ("task", "parse('1.0') fails".to_string()),
        ("step_count", "3".into()),
        ("steps", steps.into()),
    ]);
    let check = |t: &str| answers::parse_first_mistake(t, 3).map(drop);
    let sampling = SamplingParams { temperature: Some(0.0), ..SamplingParams::default() };
    let req = CallRequest::render(
        "label/traj-1/judge-a",
        Stage::Judge,
        TemplateName::FirstMistake.template(),
        &values,
        sampling,
        &check,
    )
    .unwrap();
    let result = client.call(req).await;
    assert_eq!(result.log.template, "labels.first_mistake.v1");
    let label = answers::parse_first_mistake(&result.answers.unwrap()[0], 3).unwrap();
    assert_eq!(label.step, Some(2), "index 1 is stored as m = 2");
}
