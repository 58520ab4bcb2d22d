//! A task-state study's jobs as a worker runs them: `model_call` jobs through the model-call
//! runner against the testkit's deterministic model server (the input fetched by digest, the
//! call checked, its output uploaded and reported; a malformed answer recorded; an endpoint not
//! offered or another key variable refused), and a `session` job through the agent runner with
//! the scripted agent in real containers of the test task (`docker_*`), recorded with its
//! checkpoints and its history ends. The coordinator's services are an in-memory double.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vcurve_method::task_state::View;
use vcurve_method::task_state::usage::{Purpose, Stage};
use vcurve_record::llm::answers;
use vcurve_record::llm::{CallStatus, TemplateName};
use vcurve_record::runner::AGENT;
use vcurve_record::task_state::{
    AnswerCheck, CallInput, CallKey, CallOutput, ModelRef, RecordedSession, StageModel, StageSampling,
};
use vcurve_record::{RunnerSpec, TrajectoryPayload};
use vcurve_testkit::model_server::{Fault, ModelServer};
use vcurve_testkit::require::Service;
use vcurve_worker::llm::{RetryPolicy, message_json};
use vcurve_worker::{AgentRunner, JobKey, JobReport, JobServices, JobSpec, ModelCallRunner, ModelEndpoints};

/// The coordinator's files in memory.
#[derive(Default)]
pub struct Files {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl Files {
    fn get(&self, digest: &str) -> Option<Vec<u8>> {
        self.files.lock().unwrap().get(digest).cloned()
    }

    fn digests(&self) -> BTreeSet<String> {
        self.files.lock().unwrap().keys().cloned().collect()
    }
}

impl JobServices for Files {
    fn lookup_verdict<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async { Ok(None) })
    }

    fn put_file<'a>(&'a self, content: &'a [u8]) -> BoxFuture<'a, Result<String, String>> {
        let digest = vcurve_record::trajectory::sha256_hex(content);
        self.files.lock().unwrap().insert(digest.clone(), content.to_vec());
        Box::pin(async move { Ok(digest) })
    }

    fn fetch_file<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        let file = self.get(digest);
        Box::pin(async move { file.ok_or_else(|| format!("no file {digest}")) })
    }
}

/// A probe question the deterministic server can answer: it carries its fact hex-encoded.
fn question(id: &str, fact: &str) -> Value {
    let hex: String = fact.bytes().map(|b| format!("{b:02x}")).collect();
    json!({"id": id, "question": format!("What does the session record about {id}? [probe-key {hex}]")})
}

/// Short waits between attempts, so a malformed answer's retries take no time.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        max_malformed: 2,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_retry_after: Duration::from_secs(1),
    }
}

/// A reader call of checkpoint 1 on `base_url`, reading the `reports` view of a session that
/// states S1's fact and not S2's.
pub fn reader_input(base_url: &str, api_key_env: Option<&str>) -> CallInput {
    let template = TemplateName::Reader.template();
    let context =
        "# Task calc-1\n\n## Turn 1\n[user]\nInvestigate; do not modify code\n\n[report]\nthe tests need TZ=UTC";
    let questions = json!([question("S1", "the tests need TZ=UTC"), question("S2", "the parser drops a sign")]);
    let values = BTreeMap::from([("context", context.to_string()), ("questions", questions.to_string())]);
    CallInput {
        key: CallKey::Reader { task: "calc-1".into(), k: 1, view: View::Reports, sample: 0 },
        purpose: Purpose::Core,
        template: TemplateName::Reader,
        messages: template.render(&values).expect("the reader's variables").iter().map(message_json).collect(),
        model: StageModel {
            endpoint: ModelRef {
                base_url: base_url.to_owned(),
                model: "reader-model".into(),
                api_key_env: api_key_env.map(str::to_owned),
                concurrency: 2,
                request_timeout_s: 5,
                thinking_kwargs: true,
            },
            sampling: StageSampling { temperature: Some(0.7), top_p: None, max_tokens: None, disable_thinking: true },
        },
        check: AnswerCheck::Reader { probes: vec!["S1".into(), "S2".into()] },
    }
}

/// A `model_call` job for `input`, stored in `files` (the study's runner is the agent runner, which
/// a model call does not need).
pub fn call_job(files: &Files, input: &CallInput) -> JobSpec {
    let bytes = serde_json::to_vec(input).unwrap();
    let digest = vcurve_record::trajectory::sha256_hex(&bytes);
    files.files.lock().unwrap().insert(digest.clone(), bytes);
    JobSpec {
        key: JobKey::ModelCall { study: "ts".into(), call: input.key.as_subject() },
        attempt: 1,
        budget: 0,
        runner: RunnerSpec::parse(AGENT, json!({"agent": "scripted"})).expect("valid agent options"),
        study_seed: 7,
        trajectory_digest: Some(digest),
        trajectory: None,
        anchors: vec![],
        registry_snapshot: None,
    }
}

fn model_runner(flags: &[String]) -> (ModelCallRunner, Arc<Files>) {
    let runner = ModelCallRunner::with_retry(ModelEndpoints::from_flags(flags).unwrap(), fast_retry());
    let files = Arc::new(Files::default());
    runner.attach(files.clone());
    (runner, files)
}

fn output_of(files: &Files, report: &JobReport) -> CallOutput {
    let JobReport::CallAnswered { output } = report else { panic!("not call_answered: {report:?}") };
    serde_json::from_slice(&files.get(output).expect("the output was uploaded")).expect("a CallOutput")
}

#[tokio::test]
async fn a_reader_call_is_sent_checked_uploaded_and_reported() {
    let server = ModelServer::start().await.unwrap();
    // The operator offers the endpoint with a trailing slash: the same endpoint.
    let (runner, files) = model_runner(&[format!("{}/", server.base_url())]);
    assert_eq!(runner.model_endpoints(), [server.base_url()]);
    let input = reader_input(&server.base_url(), None);
    let report = runner.run(call_job(&files, &input), CancellationToken::new()).await;
    let output = output_of(&files, &report);

    let answer = output.answer.expect("an accepted answer");
    let read = answers::parse_reader(&answer, &["S1", "S2"]).unwrap();
    assert_eq!(
        read.iter().map(|a| (a.id.as_str(), a.answer.as_str())).collect::<Vec<_>>(),
        [("S1", "the tests need TZ=UTC"), ("S2", "unknown")]
    );
    let log = &output.log;
    assert_eq!(log.call, "calc-1/k1/reader/reports/s0", "the call is its job's key");
    assert_eq!((log.stage, log.purpose, &log.status), (Stage::Reader, Purpose::Core, &CallStatus::Ok));
    assert_eq!((log.model.as_str(), log.endpoint.as_str()), ("reader-model", server.base_url().as_str()));
    assert_eq!(log.template, "task_state.reader.v1");
    assert_eq!(log.template_hash, TemplateName::Reader.template().sha256);
    let body = &server.bodies()[0];
    assert_eq!(body["messages"], Value::Array(input.messages.clone()), "the messages as the input has them");
    assert_eq!(body["temperature"], 0.7);
    assert_eq!(body["chat_template_kwargs"], json!({"enable_thinking": false, "thinking": false}));
    assert!(body.get("seed").is_none() && body.get("top_p").is_none() && body.get("n").is_none(), "{body}");
}

#[tokio::test]
async fn a_malformed_answer_is_answered_and_recorded_as_malformed() {
    let server = ModelServer::start().await.unwrap();
    server.inject(Fault::Malformed, 10);
    let (runner, files) = model_runner(&[server.base_url()]);
    let report = runner.run(call_job(&files, &reader_input(&server.base_url(), None)), CancellationToken::new()).await;
    let output = output_of(&files, &report);
    assert_eq!(output.answer, None, "never scored");
    assert!(matches!(&output.log.status, CallStatus::Malformed { .. }), "{:?}", output.log.status);
    assert_eq!(output.log.attempts.len(), 2, "the malformed budget of the retry policy");
    assert_eq!(server.requests("task_state.reader.v1"), 2);
}

#[tokio::test]
async fn a_failed_call_is_answered_too() {
    let server = ModelServer::start().await.unwrap();
    server.inject(Fault::Status(400), 1);
    let (runner, files) = model_runner(&[server.base_url()]);
    let report = runner.run(call_job(&files, &reader_input(&server.base_url(), None)), CancellationToken::new()).await;
    let output = output_of(&files, &report);
    assert_eq!(output.answer, None);
    assert!(matches!(&output.log.status, CallStatus::Failed { reason } if reason.starts_with("HTTP 400")));
}

#[tokio::test]
async fn an_endpoint_not_offered_or_another_key_variable_is_a_no_outcome_naming_it() {
    let server = ModelServer::start().await.unwrap();
    let elsewhere = "http://127.0.0.1:9/v1";
    let (runner, files) = model_runner(&[format!("{elsewhere}=CARGO_PKG_NAME")]);
    let no_outcome = |report: JobReport| match report {
        JobReport::NoOutcome { reason } => reason,
        other => panic!("not a no-outcome: {other:?}"),
    };

    let reason = no_outcome(
        runner.run(call_job(&files, &reader_input(&server.base_url(), None)), CancellationToken::new()).await,
    );
    assert!(reason.contains(&format!("does not offer the model endpoint {}", server.base_url())), "{reason}");
    assert!(reason.contains(elsewhere) && !reason.contains("crate"), "{reason}");

    let input = reader_input(elsewhere, Some("STUDY_API_KEY"));
    let reason = no_outcome(runner.run(call_job(&files, &input), CancellationToken::new()).await);
    assert!(reason.contains("STUDY_API_KEY") && reason.contains("CARGO_PKG_NAME"), "names both variables: {reason}");

    let (open, open_files) = model_runner(&[server.base_url()]);
    let input = reader_input(&server.base_url(), Some("CARGO_PKG_NAME"));
    let reason = no_outcome(open.run(call_job(&open_files, &input), CancellationToken::new()).await);
    assert!(reason.contains("without a key variable") && reason.contains("CARGO_PKG_NAME"), "{reason}");
    assert_eq!(server.requests("task_state.reader.v1"), 0, "nothing was sent");
}

#[tokio::test]
async fn the_operators_key_is_sent_and_never_recorded() {
    // cargo and nextest set CARGO_PKG_NAME for a test process: a variable the test can name.
    let key = std::env::var("CARGO_PKG_NAME").expect("the test runner sets CARGO_PKG_NAME");
    let server = ModelServer::start_with_key(Some(key.clone())).await.unwrap();
    let (runner, files) = model_runner(&[format!("{}=CARGO_PKG_NAME", server.base_url())]);
    // The study names the same variable, or none: the operator's is read either way.
    for (sample, named) in [(0, Some("CARGO_PKG_NAME")), (1, None)] {
        let mut input = reader_input(&server.base_url(), named);
        if let CallKey::Reader { sample: s, .. } = &mut input.key {
            *s = sample;
        }
        let report = runner.run(call_job(&files, &input), CancellationToken::new()).await;
        let output = output_of(&files, &report);
        assert_eq!(output.log.status, CallStatus::Ok, "{named:?}");
    }
    for digest in files.digests() {
        let text = String::from_utf8_lossy(&files.get(&digest).unwrap()).into_owned();
        assert!(!text.contains(&key), "no file holds the key: {digest}");
    }
}

// ------------------------------------------------------------------------------------------------
// A session job on Docker
// ------------------------------------------------------------------------------------------------

/// Removes the containers of `study` with the docker CLI when dropped.
struct Cleanup(String);

impl Cleanup {
    fn containers(&self) -> Vec<String> {
        let filter = format!("label={}={}", vcurve_worker::sandbox::container::labels::STUDY, self.0);
        let out = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output().expect("docker runs");
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let ids = self.containers();
        if !ids.is_empty() {
            let _ = Command::new("docker").arg("rm").arg("-fv").args(&ids).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_session_job_uploads_its_recorded_session_with_checkpoints_and_history_ends() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let image = std::env::var("VCURVE_TEST_TASK_IMAGE").expect("the gate checked VCURVE_TEST_TASK_IMAGE");
    let study = format!("ts-session-{}", std::process::id());
    let cleanup = Cleanup(study.clone());
    let runtime = Arc::new(vcurve_worker::DockerRuntime::connect().await.expect("the Docker Engine answers"));
    let state = tempfile::tempdir().unwrap();
    let instance = vcurve_worker::sandbox::instance::Instance::open(state.path(), "ts-session").unwrap();
    let runner = vcurve_worker::AgentProcessRunner::start_in(runtime, instance, 1 << 30, None).await.unwrap();
    let mut agents = vcurve_worker::AgentRegistry::new();
    agents.register_flag("scripted", &super::support::repo().join("agents")).unwrap();
    runner.use_agents(agents);
    let files = Arc::new(Files::default());
    runner.attach(files.clone());

    let task = super::support::calc_task(&image);
    let instructions: Vec<String> =
        vcurve_worker::runners::task_session::PAPER_INSTRUCTIONS.iter().map(|s| s.to_string()).collect();
    let payload = TrajectoryPayload { instructions: Some(instructions.clone()), ..TrajectoryPayload::of_task(&task) };
    let job = JobSpec {
        key: JobKey::Session { study: study.clone(), task: task.id.clone() },
        attempt: 1,
        budget: 10,
        runner: RunnerSpec::parse(AGENT, json!({"agent": "scripted", "model": {"session": {"fix": "correct"}}}))
            .expect("valid agent options"),
        study_seed: 7,
        trajectory_digest: Some(payload.digest()),
        trajectory: Some(Arc::new(payload)),
        anchors: vec![],
        registry_snapshot: None,
    };
    let report = runner.run(job, CancellationToken::new()).await;
    let JobReport::SessionRecorded { recorded } = &report else { panic!("not session_recorded: {report:?}") };
    let recorded: RecordedSession = serde_json::from_slice(&files.get(recorded).expect("uploaded")).unwrap();

    assert_eq!(recorded.session.checkpoints(), 4);
    let opened: Vec<&str> = recorded.session.turns.iter().map(|t| t.instruction.as_str()).collect();
    assert_eq!(opened, instructions);
    let ks: Vec<u32> = recorded.checkpoints.iter().map(|c| c.k).collect();
    assert_eq!(ks, [1, 2, 3, 4]);
    let fixed: Vec<Option<bool>> = recorded.checkpoints.iter().map(|c| c.fixed).collect();
    assert_eq!(fixed, [Some(false), Some(true), Some(true), Some(true)], "fixed at k: the fix lands in turn 2");
    let empty = vcurve_record::trajectory::sha256_hex(b"");
    assert_eq!(recorded.checkpoints[0].patch_sha256, empty, "turn 1 changes no code");
    let fix = &recorded.checkpoints[1].patch_sha256;
    assert!(recorded.checkpoints[2..].iter().all(|c| &c.patch_sha256 == fix), "turns 3 and 4 change no code");
    let patch = String::from_utf8(files.get(fix).expect("the checkpoint's patch was uploaded")).unwrap();
    assert!(patch.contains("node = BinOp(op, node, self.parse_term())"), "{patch}");

    // Checkpoint k's history ends with its report, and the next turn opens with its instruction.
    let ends = &recorded.history_ends;
    assert_eq!(ends.len(), 4);
    assert!(ends.windows(2).all(|w| w[0] < w[1]) && ends[3] <= recorded.messages.len(), "{ends:?}");
    for (k, &end) in ends.iter().enumerate() {
        let last = &recorded.messages[end - 1];
        assert_eq!(last["role"], "assistant", "checkpoint {}", k + 1);
        assert_eq!(last["content"], recorded.session.turns[k].report.text.as_str(), "checkpoint {}", k + 1);
        if let Some(next) = instructions.get(k + 1) {
            let opening = &recorded.messages[end];
            assert_eq!((opening["role"].as_str(), opening["content"].as_str()), (Some("user"), Some(next.as_str())));
        }
    }
    assert_eq!(cleanup.containers(), Vec::<String>::new(), "every container was removed");
}
