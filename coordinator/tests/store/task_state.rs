//! A task-state study through the coordinator, on both backends: a session per task at launch,
//! then each stage's calls planned as the one before ends, each key once; malformed calls are
//! recorded and end their chain; a coordinator reopened on the same store mid-study asks no stored
//! call again; the export reads every session and call back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{HeldJob, JobKey, JobReport, LeasedJob, ReportVerdict, StudyState};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_coordinator::testing::NoRenderer;
use vcurve_record::Digest;
use vcurve_record::llm::{CallStatus, ModelCall, SamplingSent};
use vcurve_record::session::Session;
use vcurve_record::task_state::{CallInput, CallKey, CallOutput, CheckpointState, RecordedSession};
use vcurve_testkit::store::TestStore;

const T0: i64 = 1_700_000_000_000;
const READER: &str = "http://127.0.0.1:9/v1";
const ACTOR: &str = "http://127.0.0.1:10/v1";

fn coordinator(store: &SqlStore) -> Arc<Coordinator<SqlStore>> {
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    };
    Coordinator::with_clock(store.clone(), timing, Clock::manual(T0), Arc::new(NoRenderer))
}

fn spec() -> (String, BTreeMap<String, String>) {
    let yaml = format!(
        "name: ts\nseed: 3\nbudget: 20\nrunner: {{kind: agent, agent: agent}}\n\
         task_state:\n  instructions: [Investigate, Fix]\n  views: [reports, full]\n  samples: 2\n  models:\n    \
         default: {{base_url: \"{READER}\", model: reader}}\n    actor: {{base_url: \"{ACTOR}\", model: agent-model}}\n\
         tasks:\n  - task: tasks/calc.json\n"
    );
    let task = serde_json::json!({"id": "calc", "image": "vcurve-task-calc:test", "workdir": "/testbed",
        "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}});
    (yaml, BTreeMap::from([("tasks/calc.json".to_string(), task.to_string())]))
}

/// A two-turn session whose first report says one fact and whose second turn's output another.
fn recorded_session() -> RecordedSession {
    let session = Session::from_json(
        serde_json::json!({"format": "vcurve.session.v1", "task": {"id": "calc", "statement": "fix parse"},
          "turns": [
            {"instruction": "Investigate", "messages": [{"text": "Looking.", "tool_calls": [
                {"command": "grep -rn parse .", "output": "calc.py:3: def parse\n", "returncode": 0}]}],
             "report": {"text": "parse is in calc.py."}},
            {"instruction": "Fix", "messages": [{"text": "Fixing.", "tool_calls": [
                {"command": "python3 -m unittest", "output": "OK\n", "returncode": 0}]}],
             "report": {"text": "Fixed."}}]})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let messages = (0..6).map(|i| serde_json::json!({"role": "user", "content": format!("m{i}")})).collect();
    RecordedSession {
        session,
        checkpoints: vec![
            CheckpointState { k: 1, patch_sha256: "e".repeat(64), fixed: Some(false) },
            CheckpointState { k: 2, patch_sha256: "f".repeat(64), fixed: Some(true) },
        ],
        messages,
        history_ends: vec![3, 6],
    }
}

fn held(job: &LeasedJob) -> HeldJob {
    HeldJob { key: job.key.clone(), attempt: job.attempt }
}

async fn upload(c: &Coordinator<SqlStore>, bytes: &[u8]) -> String {
    let digest = Digest::of(bytes);
    c.upload(&digest, bytes).await.unwrap();
    digest.into_string()
}

/// The answer a deterministic model gives each stage: two atoms (one below the minimum
/// importance), one probe, the reference as every answer, full credit; `malformed` answers the
/// reader of view `full`, sample 1, with nothing it can read.
fn answer(input: &CallInput) -> Option<String> {
    Some(match &input.key {
        CallKey::Atoms { k, .. } => serde_json::json!({"atoms": [
            {"id": format!("A{k}"), "category": "facts", "importance": 3, "statement": "parse is in calc.py",
             "provenance": "report", "origin_turn": 1},
            {"id": format!("B{k}"), "category": "risks", "importance": 1, "statement": "minor",
             "provenance": "report", "origin_turn": 1}]})
        .to_string(),
        CallKey::Probes { k, .. } => {
            serde_json::json!({"probes": [{"atom": format!("A{k}"), "question": "Where is parse?", "reference": "calc.py"}]})
                .to_string()
        }
        CallKey::Reader { view, sample: 1, .. } if view.key() == "full" => return None,
        CallKey::Reader { k, .. } => {
            serde_json::json!({"answers": [{"id": format!("A{k}"), "answer": "calc.py"}]}).to_string()
        }
        CallKey::Actor { .. } => serde_json::json!({"answer": "calc.py"}).to_string(),
        CallKey::Judge { of } => {
            let (_, k) = of.checkpoint();
            serde_json::json!({"scores": [{"id": format!("A{k}"), "credit": 1}]}).to_string()
        }
        CallKey::Label { .. } => panic!("a task-state study asks no label call"),
    })
}

/// The output of a call `input` that answered `answer` (`None`: a malformed answer), as the
/// worker's model-call runner uploads it.
pub(crate) fn output(input: &CallInput, answer: Option<String>) -> CallOutput {
    let status = match &answer {
        Some(_) => CallStatus::Ok,
        None => CallStatus::Malformed { reason: "no JSON object".into() },
    };
    CallOutput {
        answer,
        log: ModelCall {
            call: input.key.as_subject(),
            stage: input.key.stage(),
            purpose: input.purpose,
            model: input.model.endpoint.model.clone(),
            endpoint: input.model.endpoint.base_url.clone(),
            template: input.template.template().versioned_id(),
            template_hash: input.template.template().sha256.clone(),
            sampling: SamplingSent::default(),
            attempts: Vec::new(),
            retries: 0,
            tokens: None,
            latency_ms: 1,
            status,
        },
    }
}

/// Run every leased job of the worker `w` to its report; returns the keys it ran.
async fn run_all(c: &Coordinator<SqlStore>, w: &str, limit: usize) -> Vec<JobKey> {
    let mut ran = Vec::new();
    for _ in 0..limit {
        let jobs = c.lease(w, 64, Duration::ZERO).await.unwrap();
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let report = match &job.key {
                JobKey::Session { .. } => {
                    let bytes = serde_json::to_vec(&recorded_session()).unwrap();
                    JobReport::SessionRecorded { recorded: upload(c, &bytes).await }
                }
                JobKey::ModelCall { .. } => {
                    let digest = job.trajectory_digest.as_ref().expect("a model call names its input");
                    let input: CallInput = serde_json::from_slice(&c.file(digest).await.unwrap()).unwrap();
                    let out = output(&input, answer(&input));
                    JobReport::CallAnswered { output: upload(c, &serde_json::to_vec(&out).unwrap()).await }
                }
                other => panic!("not a task-state job: {other:?}"),
            };
            assert_eq!(c.report(w, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted, "{}", job.key);
            ran.push(job.key);
        }
    }
    ran
}

fn stage_of(key: &JobKey) -> &'static str {
    match key {
        JobKey::Session { .. } => "session",
        JobKey::ModelCall { call, .. } => CallKey::parse(call).unwrap().stage().key(),
        _ => "other",
    }
}

#[tokio::test]
async fn a_task_state_study_plans_each_stage_once_and_records_malformed_calls_without_scoring_them() {
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let (yaml, files) = spec();
        let study = c.launch(&yaml, &files).await.unwrap();
        // A worker offering the runner but no endpoint records the session and gets no call.
        let agent = c.register("agent", 4, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let ran = run_all(&c, &agent, 4).await;
        assert_eq!(ran.len(), 1, "{}: only the session", ts.name);
        let JobKey::Session { task, .. } = &ran[0] else { panic!("{:?}", ran[0]) };
        assert_eq!(task, "calc");
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.state, StudyState::Running);
        assert_eq!(p.waiting_for_endpoints, vec![format!("model:{READER}")], "{}", ts.name);
        let atoms = p.call_stages.iter().find(|s| s.stage == "atoms").unwrap();
        assert_eq!((atoms.pending, atoms.expected), (2, Some(2)), "{}: one extraction per checkpoint", ts.name);

        // Readers' endpoint only: the actor's calls wait for a worker offering theirs.
        let reader =
            c.register("reader", 8, &[format!("model:{READER}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let ran = run_all(&c, &reader, 20).await;
        assert!(ran.iter().all(|k| stage_of(k) != "actor"), "{}: no actor call on the reader's endpoint", ts.name);
        let actor = c.register("actor", 8, &[format!("model:{ACTOR}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let mut all = ran;
        all.extend(run_all(&c, &actor, 20).await);
        all.extend(run_all(&c, &reader, 20).await);
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for key in &all {
            *counts.entry(stage_of(key)).or_default() += 1;
        }
        // Per checkpoint: 1 extraction, 1 probe call, 2 views × 2 samples readers, 1 probe × 2
        // samples actor calls; a judge per answered reader and actor call (one reader malformed).
        assert_eq!(
            counts,
            BTreeMap::from([("atoms", 2), ("probes", 2), ("reader", 8), ("actor", 4), ("judge", 10)]),
            "{}",
            ts.name
        );
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{}: each call asked once", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.state, StudyState::Done, "{}", ts.name);
        let readers = p.call_stages.iter().find(|s| s.stage == "reader").unwrap();
        assert_eq!((readers.done, readers.malformed, readers.expected), (8, 2, Some(8)), "{}", ts.name);
        let judges = p.call_stages.iter().find(|s| s.stage == "judge").unwrap();
        assert_eq!((judges.done, judges.expected), (10, Some(12)), "{}: expected before malformed readers", ts.name);

        let data = ts.store.task_state_data(&study).await.unwrap().expect("a task-state study");
        assert_eq!(data.sessions.len(), 1);
        assert_eq!(data.calls.len(), 26, "{}", ts.name);
        assert!(data.calls.values().all(|(input, _)| input.messages.is_empty()), "the export drops messages");
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_coordinator_reopened_mid_study_asks_no_stored_call_again() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("store.sqlite").display());
    let (yaml, files) = spec();
    let store = SqlStore::connect(&url).await.unwrap();
    let c = coordinator(&store);
    let study = c.launch(&yaml, &files).await.unwrap();
    let caps = ["agent:agent".to_string(), format!("model:{READER}"), format!("model:{ACTOR}")];
    let w = c.register("w", 64, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    // The session and the extractions, then one lease of probe calls that is never reported.
    let first = run_all(&c, &w, 2).await;
    assert_eq!(first.iter().map(stage_of).collect::<Vec<_>>(), ["session", "atoms", "atoms"]);
    let lost = c.lease(&w, 64, Duration::ZERO).await.unwrap();
    assert_eq!(lost.iter().map(|j| stage_of(&j.key)).collect::<Vec<_>>(), ["probes", "probes"]);
    drop(c);
    store.close().await;

    // Reopened: the stored calls stay done; the lost lease expires and is asked again.
    let store = SqlStore::connect(&url).await.unwrap();
    let c = Coordinator::with_clock(
        store.clone(),
        Timing {
            lease: LeasePolicy { timeout_ms: 30_000 },
            heartbeat_interval: Duration::from_secs(10),
            max_lease_wait: Duration::ZERO,
        },
        Clock::manual(T0 + 60_000),
        Arc::new(NoRenderer),
    );
    let w = c.register("w2", 64, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    let rest = run_all(&c, &w, 20).await;
    assert!(rest.iter().all(|k| !first.contains(k)), "a stored call was asked again: {rest:?}");
    assert_eq!(rest.iter().filter(|k| stage_of(k) == "probes").count(), 2, "the lost probe calls, once each");
    assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Done);
}

/// The last two jobs of a study reported at the same moment, in concurrent transactions, end it:
/// each report counts the study's open work under the study's lock, so the second to count sees
/// the first one's commit (on PostgreSQL without the lock, each counted the other as still open
/// and the study never ended).
#[tokio::test]
async fn the_last_two_jobs_of_a_study_reported_at_once_end_it() {
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let (yaml, mut files) = spec();
        let yaml = yaml.replace(
            "tasks:\n  - task: tasks/calc.json\n",
            "tasks:\n  - task: tasks/calc.json\n  - task: tasks/calc2.json\n",
        );
        let task = serde_json::json!({"id": "calc2", "image": "vcurve-task-calc:test", "workdir": "/testbed",
            "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}});
        files.insert("tasks/calc2.json".into(), task.to_string());
        let agent = c.register("agent", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        // A recording the planner cannot read retires its session: nothing follows it.
        let unreadable = upload(&c, b"not a recorded session").await;
        let report = JobReport::SessionRecorded { recorded: unreadable };
        for round in 0..12 {
            let study = c.launch(&yaml, &files).await.unwrap();
            let jobs = c.lease(&agent, 8, Duration::ZERO).await.unwrap();
            assert_eq!(jobs.len(), 2, "{}: round {round}: both sessions", ts.name);
            let (a, b) = (held(&jobs[0]), held(&jobs[1]));
            let (ra, rb) = tokio::join!(c.report(&agent, &a, &report), c.report(&agent, &b, &report));
            assert_eq!((ra.unwrap(), rb.unwrap()), (ReportVerdict::Accepted, ReportVerdict::Accepted));
            let p = c.progress(&study).await.unwrap();
            assert_eq!(p.state, StudyState::Done, "{}: round {round}: nothing is open, the study is not done", ts.name);
        }
        ts.finish().await;
    }
}
