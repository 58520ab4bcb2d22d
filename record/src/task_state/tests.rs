use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};
use vcurve_method::task_state::usage::Stage;
use vcurve_method::task_state::{Category, Credit, EstimatorSettings, View, analyze};

use super::markers::{extraction_answer, history_text, judge_credit};
use super::plan::{check_session, probe_id};
use super::*;
use crate::llm::{CallStatus, ModelCall, SamplingSent};
use crate::session::views::render;
use crate::session::{AgentMessage, FORMAT, Report, Session, SessionTask, ToolCall, Turn};

fn model(name: &str) -> StageModel {
    StageModel {
        endpoint: ModelRef {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: name.into(),
            api_key_env: None,
            concurrency: 4,
            request_timeout_s: 60,
            thinking_kwargs: true,
        },
        sampling: StageSampling { temperature: Some(0.0), top_p: None, max_tokens: None, disable_thinking: true },
    }
}

fn settings(views: &[View], actor: bool, samples: u32) -> TaskStateSettings {
    let mut reader = model("reader");
    reader.sampling.temperature = Some(0.7);
    TaskStateSettings {
        version: "test".into(),
        instructions: vec!["Investigate".into(), "Fix".into()],
        views: views.to_vec(),
        actor,
        samples,
        min_importance: 2,
        atoms: model("atoms"),
        probes: model("probes"),
        reader,
        actor_model: model("agent"),
        judge: model("judge"),
    }
}

fn marker(id: &str, category: &str, importance: u8, fact: &str) -> String {
    format!("[[STATE id={id} category={category} importance={importance} fact=\"{fact}\"]]")
}

/// Two turns. Turn 1: R1 only in reasoning, N1 in narration (and in the task statement and the
/// report), L1 (importance 1) in narration, O1 in an output. Turn 2: N2 in narration, and the
/// report states O1's fact.
fn recorded(task: &str) -> RecordedSession {
    let r1 = marker("R1", "assumptions", 2, "the cache is cold");
    let n1 = marker("N1", "facts", 3, "alpha is broken");
    let l1 = marker("L1", "facts", 1, "a minor detail");
    let o1 = marker("O1", "failures", 2, "beta fails on empty input");
    let n2 = marker("N2", "decisions", 2, "patch the loop");
    let session = Session {
        format: FORMAT.into(),
        task: SessionTask { id: task.into(), statement: "Bug report: alpha is broken somewhere.".into() },
        system: Some("You are an engineer.".into()),
        turns: vec![
            Turn {
                instruction: "Investigate".into(),
                messages: vec![AgentMessage {
                    reasoning: Some(r1.clone()),
                    text: format!("Looking. {n1} {l1}"),
                    tool_calls: vec![ToolCall {
                        command: "run".into(),
                        output: format!("{o1}\n"),
                        returncode: Some(1),
                    }],
                }],
                report: Report { reasoning: None, text: "Found: alpha is broken.".into() },
            },
            Turn {
                instruction: "Fix".into(),
                messages: vec![AgentMessage {
                    reasoning: None,
                    text: format!("Fixing. {n2}"),
                    tool_calls: vec![ToolCall { command: "edit".into(), output: "ok\n".into(), returncode: Some(0) }],
                }],
                report: Report { reasoning: None, text: "Done: beta fails on empty input, now fixed.".into() },
            },
        ],
    };
    let messages = vec![
        json!({"role": "system", "content": "You are an engineer."}),
        json!({"role": "user", "content": "Bug report: alpha is broken somewhere."}),
        json!({"role": "user", "content": "Investigate"}),
        json!({"role": "assistant", "content": format!("Looking. {n1} {l1}\n```bash\nrun\n```"), "reasoning_content": r1}),
        json!({"role": "user", "content": format!("<output>\n{o1}\n</output>")}),
        json!({"role": "assistant", "content": "Found: alpha is broken."}),
        json!({"role": "user", "content": "Fix"}),
        json!({"role": "assistant", "content": format!("Fixing. {n2}\n```bash\nedit\n```")}),
        json!({"role": "user", "content": "<output>\nok\n</output>"}),
        json!({"role": "assistant", "content": "Done: beta fails on empty input, now fixed."}),
    ];
    RecordedSession {
        session,
        checkpoints: vec![
            CheckpointState { k: 1, patch_sha256: "e3b0".into(), fixed: Some(false) },
            CheckpointState { k: 2, patch_sha256: "ab12".into(), fixed: Some(true) },
        ],
        messages,
        history_ends: vec![6, 10],
    }
}

fn log(key: &CallKey, ok: bool) -> ModelCall {
    ModelCall {
        call: key.as_subject(),
        stage: key.stage(),
        purpose: Default::default(),
        model: "m".into(),
        endpoint: "http://127.0.0.1:9/v1".into(),
        template: "t".into(),
        template_hash: "h".into(),
        sampling: SamplingSent::default(),
        attempts: vec![],
        retries: 0,
        tokens: None,
        latency_ms: 1,
        status: if ok { CallStatus::Ok } else { CallStatus::Malformed { reason: "not JSON".into() } },
    }
}

fn answered(key: &CallKey, answer: Value) -> CallOutput {
    CallOutput { answer: Some(answer.to_string()), log: log(key, true) }
}

fn malformed(key: &CallKey) -> CallOutput {
    CallOutput { answer: None, log: log(key, false) }
}

fn content(input: &CallInput, i: usize) -> &str {
    input.messages[i]["content"].as_str().unwrap()
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text.find(open).unwrap() + open.len();
    &text[start..text.rfind(close).unwrap()]
}

#[test]
fn call_keys_round_trip_through_their_subjects_and_json() {
    let reader = CallKey::Reader { task: "django-1".into(), k: 2, view: View::FullMinusReasoning, sample: 1 };
    let actor = CallKey::Actor { task: "django-1".into(), k: 4, probe: probe_id("a 1/x"), sample: 2 };
    let keys = [
        CallKey::Atoms { task: "django-1".into(), k: 1 },
        CallKey::Probes { task: "t".into(), k: 3 },
        reader.clone(),
        actor.clone(),
        CallKey::Judge { of: Box::new(reader) },
        CallKey::Judge { of: Box::new(actor) },
    ];
    let subjects: Vec<String> = keys.iter().map(CallKey::as_subject).collect();
    assert_eq!(
        subjects,
        [
            "django-1/k1/atoms",
            "t/k3/probes",
            "django-1/k2/reader/full_minus_reasoning/s1",
            "django-1/k4/actor/a%201%2Fx/s2",
            "judge:django-1/k2/reader/full_minus_reasoning/s1",
            "judge:django-1/k4/actor/a%201%2Fx/s2",
        ]
    );
    for key in &keys {
        assert_eq!(CallKey::parse(&key.as_subject()).unwrap(), *key);
        assert_eq!(key.to_string(), key.as_subject());
        let json = serde_json::to_string(key).unwrap();
        assert_eq!(serde_json::from_str::<CallKey>(&json).unwrap(), *key);
    }
    assert_eq!(keys[4].stage(), Stage::Judge);
    assert_eq!(keys[4].checkpoint(), ("django-1", 2));
    for bad in [
        "judge:t/k1/atoms",
        "t/k0/atoms",
        "t/k1/reader/actor/s0",
        "t/k1/reader/nope/s0",
        "t/k1/actor//s0",
        "t/k1/reader/full/0",
        "/k1/atoms",
        "t/k1",
    ] {
        assert!(CallKey::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn probe_ids_are_the_atom_ids_or_their_escapes() {
    assert_eq!(probe_id("a1"), "a1");
    assert_eq!(probe_id("t1-parse_right.v2"), "t1-parse_right.v2");
    assert_eq!(probe_id("a/1 b%"), "a%2F1%20b%25");
    assert_ne!(probe_id("a/1"), probe_id("a%2F1"));
}

#[test]
fn a_session_gives_one_extraction_per_checkpoint_from_its_full_context() {
    let s = settings(&[View::Reports, View::Full], true, 3);
    let rec = recorded("t-1");
    let calls = after_session(&s, &rec).unwrap();
    assert_eq!(calls.len(), 2);
    for (i, c) in calls.iter().enumerate() {
        let k = i as u32 + 1;
        assert_eq!(c.key, CallKey::Atoms { task: "t-1".into(), k });
        assert_eq!(c.template, crate::llm::TemplateName::ExtractAtoms);
        assert_eq!(c.check, AnswerCheck::Atoms { checkpoint: k });
        assert_eq!(c.model, s.atoms);
        assert_eq!(c.messages.len(), 2);
        assert_eq!(c.messages[0]["role"], "system");
        let user = content(c, 1);
        assert!(user.starts_with(&format!("Task: t-1\nCheckpoint: end of turn {k}\n")), "{user}");
        assert_eq!(between(user, "<context>\n", "\n</context>"), render(&rec.session, View::Full, k).unwrap().text);
    }
    // Planning twice gives the same calls.
    assert_eq!(after_session(&s, &rec).unwrap(), calls);
}

#[test]
fn bad_sessions_and_settings_are_refused_naming_what() {
    let s = settings(&[View::Reports, View::Full], true, 3);
    let err = |rec: &RecordedSession| after_session(&s, rec).unwrap_err().to_string();
    let mut rec = recorded("t");
    rec.checkpoints.pop();
    assert_eq!(err(&rec), "task t: recorded session: it has 1 checkpoint states for 2 turns (one per turn's end)");
    let mut rec = recorded("t");
    rec.checkpoints[1].k = 3;
    assert!(err(&rec).contains("checkpoints[1] is checkpoint 3, not 2"));
    let mut rec = recorded("t");
    rec.history_ends = vec![6, 6];
    assert!(err(&rec).contains("history_ends[1] (checkpoint 2) is 6, not after the previous end 6"));
    let mut rec = recorded("t");
    rec.history_ends = vec![6, 11];
    assert!(err(&rec).contains("history_ends[1] (checkpoint 2) is 11, beyond the 10 messages"));
    let mut rec = recorded("t");
    rec.history_ends = vec![6];
    assert!(err(&rec).contains("history_ends has 1 entries for 2 turns"));
    let mut rec = recorded("t");
    rec.history_ends.clear();
    assert!(err(&rec).contains("no agent history"));
    assert!(check_session(&settings(&[View::Full], false, 3), &rec).is_ok(), "without the actor no history is needed");
    let rec = recorded("a/b");
    assert!(err(&rec).contains("cannot name the study's calls"));
    let mut rec = recorded("t");
    rec.messages[2] = json!("Investigate");
    assert!(err(&rec).contains("messages[2] is not a chat message"));

    let rec = recorded("t");
    let bad = |s: TaskStateSettings| after_session(&s, &rec).unwrap_err().to_string();
    assert!(bad(settings(&[View::Full, View::Actor], true, 3)).contains("views: the actor is not a text view"));
    assert!(bad(settings(&[View::Full, View::Full], true, 3)).contains("views: full is listed twice"));
    assert!(bad(settings(&[View::Full], true, 0)).contains("samples"));
}

fn atoms_answer() -> Value {
    json!({"atoms": [
        {"id": "a1", "category": "facts", "importance": 3, "statement": "alpha is broken",
         "provenance": "assistant_text", "origin_turn": 1},
        {"id": "a/2", "category": "failures", "importance": 2, "statement": "beta fails on empty input",
         "provenance": "tool_output", "origin_turn": 1},
        {"id": "a3", "category": "facts", "importance": 1, "statement": "a minor detail",
         "provenance": "assistant_text", "origin_turn": 1}]})
}

fn probes_answer() -> Value {
    json!({"probes": [
        {"atom": "a/2", "question": "What fails?", "reference": "beta fails on empty input"},
        {"atom": "a1", "question": "What is broken?", "reference": "alpha is broken"}]})
}

#[test]
fn the_planner_follows_each_stage_with_the_next() {
    let s = settings(&[View::Reports, View::Full], true, 3);
    let rec = recorded("t");
    let sessions = after_session(&s, &rec).unwrap();
    let atoms_call = &sessions[0];
    let none = CheckpointAnswers::default();

    // Atoms: the kept ones (importance ≥ 2) go to one probe-generation call.
    let atoms_out = answered(&atoms_call.key, atoms_answer());
    let probes = after_call(&s, &rec, atoms_call, &atoms_out, &none).unwrap();
    assert_eq!(probes.len(), 1);
    let probes_call = &probes[0];
    assert_eq!(probes_call.key, CallKey::Probes { task: "t".into(), k: 1 });
    assert_eq!(probes_call.check, AnswerCheck::Probes { atoms: vec!["a1".into(), "a/2".into()] });
    assert_eq!(probes_call.model, s.probes);
    let given: Value = serde_json::from_str(between(content(probes_call, 1), "<atoms>\n", "\n</atoms>")).unwrap();
    assert_eq!(
        given,
        json!([{"id": "a1", "category": "facts", "importance": 3, "statement": "alpha is broken"},
               {"id": "a/2", "category": "failures", "importance": 2, "statement": "beta fails on empty input"}])
    );
    // No atom kept, or no answer: nothing follows.
    let minor = answered(&atoms_call.key, json!({"atoms": [atoms_answer()["atoms"][2]]}));
    assert!(after_call(&s, &rec, atoms_call, &minor, &none).unwrap().is_empty());
    assert!(after_call(&s, &rec, atoms_call, &malformed(&atoms_call.key), &none).unwrap().is_empty());

    // Probes: views × samples readers, probes × samples actors.
    let probes_out = answered(&probes_call.key, probes_answer());
    let err = after_call(&s, &rec, probes_call, &probes_out, &none).unwrap_err().to_string();
    assert_eq!(err, "call t/k1/probes: the answer of t/k1/atoms is not given");
    let with_atoms = CheckpointAnswers { atoms: Some(&atoms_out), probes: None };
    let answers = after_call(&s, &rec, probes_call, &probes_out, &with_atoms).unwrap();
    assert_eq!(answers.len(), 2 * 3 + 2 * 3);
    let readers: Vec<&CallInput> = answers.iter().filter(|c| c.key.stage() == Stage::Reader).collect();
    let actors: Vec<&CallInput> = answers.iter().filter(|c| c.key.stage() == Stage::Actor).collect();
    assert_eq!(readers.len(), 6);
    assert_eq!(actors.len(), 6);
    let ids = vec!["a1".to_string(), "a%2F2".to_string()];
    for r in &readers {
        let CallKey::Reader { view, sample, .. } = r.key else { unreachable!() };
        assert!(sample < 3);
        assert_eq!(r.check, AnswerCheck::Reader { probes: ids.clone() });
        assert_eq!(r.model, s.reader);
        let user = content(r, 1);
        assert_eq!(between(user, "<context>\n", "\n</context>"), render(&rec.session, view, 1).unwrap().text);
        let questions: Value = serde_json::from_str(between(user, "<questions>\n", "\n</questions>")).unwrap();
        assert_eq!(
            questions,
            json!([{"id": "a1", "question": "What is broken?"}, {"id": "a%2F2", "question": "What fails?"}])
        );
    }
    for a in &actors {
        let CallKey::Actor { probe, .. } = &a.key else { unreachable!() };
        assert!(ids.contains(probe));
        assert_eq!(a.check, AnswerCheck::Actor);
        assert_eq!(a.model, s.actor_model);
        assert_eq!(a.messages.len(), 6 + 1, "the history at checkpoint 1 and the question");
        assert_eq!(a.messages[..6], rec.messages[..6]);
        assert_eq!(a.messages[6]["role"], "user");
        assert!(content(a, 6).starts_with("template: task_state.actor_probe.v1\n"));
        assert!(content(a, 6).contains(if probe == "a1" { "What is broken?" } else { "What fails?" }));
    }
    let no_actor = settings(&[View::Reports, View::Full], false, 2);
    assert_eq!(after_call(&no_actor, &rec, probes_call, &probes_out, &with_atoms).unwrap().len(), 2 * 2);

    // A reader's answers: one judge call for all of them.
    let with_probes = CheckpointAnswers { atoms: Some(&atoms_out), probes: Some(&probes_out) };
    let reader = readers[0];
    let reader_out = answered(
        &reader.key,
        json!({"answers": [{"id": "a%2F2", "answer": "unknown"}, {"id": "a1", "answer": "alpha"}]}),
    );
    let judges = after_call(&s, &rec, reader, &reader_out, &with_probes).unwrap();
    assert_eq!(judges.len(), 1);
    assert_eq!(judges[0].key, CallKey::Judge { of: Box::new(reader.key.clone()) });
    assert_eq!(judges[0].check, AnswerCheck::Judge { items: ids.clone() });
    assert_eq!(judges[0].model, s.judge);
    let items_text = between(content(&judges[0], 1), "<items>\n", "\n</items>");
    assert!(
        items_text.starts_with("[\n  {\"id\":\"a1\",\"question\":\"What is broken?\",\"reference\":"),
        "one item per line, fields in the template's order: {items_text}"
    );
    let items: Value = serde_json::from_str(items_text).unwrap();
    assert_eq!(
        items,
        json!([{"id": "a1", "question": "What is broken?", "reference": "alpha is broken", "answer": "alpha"},
               {"id": "a%2F2", "question": "What fails?", "reference": "beta fails on empty input", "answer": "unknown"}])
    );
    assert!(after_call(&s, &rec, reader, &reader_out, &with_atoms).unwrap_err().to_string().contains("t/k1/probes"));
    assert!(after_call(&s, &rec, reader, &malformed(&reader.key), &with_probes).unwrap().is_empty());

    // An actor's answer: one judge call of one item.
    let actor = actors.iter().find(|a| matches!(&a.key, CallKey::Actor { probe, .. } if probe == "a%2F2")).unwrap();
    let actor_out = answered(&actor.key, json!({"answer": "beta fails"}));
    let judges = after_call(&s, &rec, actor, &actor_out, &with_probes).unwrap();
    assert_eq!(judges.len(), 1);
    assert_eq!(judges[0].check, AnswerCheck::Judge { items: vec!["a%2F2".into()] });
    let items: Value = serde_json::from_str(between(content(&judges[0], 1), "<items>\n", "\n</items>")).unwrap();
    assert_eq!(items[0]["answer"], "beta fails");
    assert_eq!(items[0]["reference"], "beta fails on empty input");

    // A judge's answer ends the chain.
    let judge_out = answered(&judges[0].key, json!({"scores": [{"id": "a%2F2", "credit": 0.5}]}));
    assert!(after_call(&s, &rec, &judges[0], &judge_out, &with_probes).unwrap().is_empty());

    // A call of another task's session is refused.
    let other = recorded("u");
    assert!(after_call(&s, &other, reader, &reader_out, &with_probes).unwrap_err().to_string().contains("task u"));
}

/// The deterministic server's rules, for the round trip below (the probe question carries its
/// fact in brackets; the testkit's server hex-encodes it).
fn respond(input: &CallInput) -> String {
    let last = content(input, input.messages.len() - 1);
    let fact = |q: &str| between(q, "[fact: ", "]").to_string();
    let recall = |q: &str, text: &str| if text.contains(&fact(q)) { fact(q) } else { "unknown".into() };
    let answer = match &input.key {
        CallKey::Atoms { .. } => extraction_answer(between(last, "<context>\n", "\n</context>")),
        CallKey::Probes { .. } => {
            let atoms: Vec<Value> = serde_json::from_str(between(last, "<atoms>\n", "\n</atoms>")).unwrap();
            let probes: Vec<Value> = atoms
                .iter()
                .map(|a| {
                    json!({"atom": a["id"], "reference": a["statement"],
                           "question": format!("About {}? [fact: {}]", a["id"], a["statement"].as_str().unwrap())})
                })
                .collect();
            json!({ "probes": probes })
        }
        CallKey::Reader { .. } => {
            let context = between(last, "<context>\n", "\n</context>");
            let qs: Vec<Value> = serde_json::from_str(between(last, "<questions>\n", "\n</questions>")).unwrap();
            let answers: Vec<Value> = qs
                .iter()
                .map(|q| json!({"id": q["id"], "answer": recall(q["question"].as_str().unwrap(), context)}))
                .collect();
            json!({ "answers": answers })
        }
        CallKey::Actor { .. } => {
            let history = history_text(&input.messages[..input.messages.len() - 1]);
            json!({"answer": recall(last, &history)})
        }
        CallKey::Judge { .. } => {
            let items: Vec<Value> = serde_json::from_str(between(last, "<items>\n", "\n</items>")).unwrap();
            let scores: Vec<Value> = items
                .iter()
                .map(|i| {
                    let credit = judge_credit(i["reference"].as_str().unwrap(), i["answer"].as_str().unwrap());
                    json!({"id": i["id"], "credit": credit})
                })
                .collect();
            json!({ "scores": scores })
        }
        CallKey::Label { .. } => unreachable!("a task-state study asks no label call"),
    };
    answer.to_string()
}

type Outputs = BTreeMap<CallKey, (CallInput, CallOutput)>;

/// Runs the whole study on `sessions`, answering by [`respond`]; `fail` says which calls end
/// without an answer.
fn run_study(
    s: &TaskStateSettings,
    sessions: &BTreeMap<String, RecordedSession>,
    fail: impl Fn(&CallKey) -> bool,
) -> Outputs {
    let mut queue: VecDeque<CallInput> = VecDeque::new();
    for rec in sessions.values() {
        queue.extend(after_session(s, rec).unwrap());
    }
    let mut outputs = Outputs::new();
    while let Some(input) = queue.pop_front() {
        let key = input.key.clone();
        let output = if fail(&key) {
            malformed(&key)
        } else {
            let answer = respond(&input);
            input.check.check(&answer).unwrap_or_else(|e| panic!("{key}: {e}"));
            CallOutput { answer: Some(answer), log: log(&key, true) }
        };
        let (task, k) = key.checkpoint();
        let rec = &sessions[task];
        let atoms_key = CallKey::Atoms { task: task.into(), k };
        let probes_key = CallKey::Probes { task: task.into(), k };
        let next = {
            let stored = |key: &CallKey| outputs.get(key).map(|(_, o): &(CallInput, CallOutput)| o);
            let cp = CheckpointAnswers { atoms: stored(&atoms_key), probes: stored(&probes_key) };
            after_call(s, rec, &input, &output, &cp).unwrap()
        };
        assert!(outputs.insert(key.clone(), (input, output)).is_none(), "{key} planned twice");
        queue.extend(next);
    }
    outputs
}

#[test]
fn marker_truth_gives_the_hand_computed_accuracies() {
    // k = 1 keeps R1 (reasoning only), N1 (narration, task, report), O1 (output); L1 is minor.
    // k = 2 adds N2 (narration). Each probe is alone in its stratum, so every weight is 1.
    //   reports:   k1 N1 → 1/3;  k2 N1, O1 (turn 2's report) → 2/4;   3/7
    //   full:      every atom → 7/7
    //   task_only: N1 (in the statement) at both → 2/7
    //   actor:     k1 N1, O1; k2 N1, O1, N2 (reasoning is not in the history's content) → 5/7
    let s = settings(&[View::Reports, View::Full, View::TaskOnly], true, 3);
    let sessions = BTreeMap::from([("t".to_string(), recorded("t"))]);
    let truth = marker_truth(&s, &sessions).unwrap();
    let want = BTreeMap::from([
        ("actor".to_string(), 5.0 / 7.0),
        ("full".to_string(), 1.0),
        ("reports".to_string(), 3.0 / 7.0),
        ("task_only".to_string(), 2.0 / 7.0),
    ]);
    assert_eq!(truth.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (view, v) in &want {
        assert!((truth[view] - v).abs() < 1e-12, "{view}: {} against {v}", truth[view]);
    }
    let study = truth::marker_study(&s, &sessions).unwrap();
    assert_eq!(study.probes.len(), 7);
    assert_eq!(
        study.checkpoints[1].atoms,
        BTreeMap::from([
            (Category::Facts, 1),
            (Category::Failures, 1),
            (Category::Decisions, 1),
            (Category::Assumptions, 1)
        ])
    );
    assert_eq!(study.checkpoints[1].fixed, Some(true));

    // An unknown category makes the server's extraction malformed: that checkpoint has no atoms.
    let mut odd = recorded("t");
    odd.session.turns[1].report.text.push_str(&format!(" {}", marker("X1", "gossip", 3, "x")));
    let study = truth::marker_study(&s, &BTreeMap::from([("t".to_string(), odd)])).unwrap();
    assert_eq!(study.probes.len(), 3);
    assert!(study.checkpoints[1].atoms.is_empty());
}

#[test]
fn a_study_answered_by_the_server_rules_assembles_to_its_truth() {
    let s = settings(&[View::Reports, View::ReportsNarration, View::Full, View::TaskOnly], true, 3);
    let sessions = BTreeMap::from([("t".to_string(), recorded("t")), ("u".to_string(), recorded("u"))]);
    let outputs = run_study(&s, &sessions, |_| false);
    // Per task: 2 extractions, 2 probe generations, (4 views × 3 + probes × 3 actors) answers, one
    // judge each; probes 3 at k1 and 4 at k2.
    let count = |stage: Stage| outputs.keys().filter(|k| k.stage() == stage).count();
    assert_eq!(count(Stage::Atoms), 4);
    assert_eq!(count(Stage::Probes), 4);
    assert_eq!(count(Stage::Reader), 2 * 2 * 4 * 3);
    assert_eq!(count(Stage::Actor), 2 * (3 + 4) * 3);
    assert_eq!(count(Stage::Judge), count(Stage::Reader) + count(Stage::Actor));

    let assembled = assemble(&s, &sessions, &outputs).unwrap();
    assert_eq!(assembled.calls.len(), outputs.len());
    assert_eq!(assembled.views.len(), 2 * 2 * 4, "reports, narration, full and task only per checkpoint");
    assert_eq!(assembled.input, truth::marker_study(&s, &sessions).unwrap());
    let report = analyze(&assembled.input, &EstimatorSettings::ctxgap_1()).unwrap();
    assert_eq!(report.accuracy(), marker_truth(&s, &sessions).unwrap());
    assert_eq!(report.accuracy()["reports"], 3.0 / 7.0);

    // A malformed reader sample and a failed judge give no credit; the other samples still count.
    let dropped = CallKey::Reader { task: "t".into(), k: 2, view: View::Reports, sample: 1 };
    let judge_of = CallKey::Reader { task: "t".into(), k: 2, view: View::Full, sample: 0 };
    let failed_judge = CallKey::Judge { of: Box::new(judge_of) };
    let outputs = run_study(&s, &sessions, |k| *k == dropped || *k == failed_judge);
    assert!(!outputs.contains_key(&CallKey::Judge { of: Box::new(dropped.clone()) }));
    let assembled = assemble(&s, &sessions, &outputs).unwrap();
    let probe = assembled.input.probes.iter().find(|p| p.probe == "t/k2/O1").unwrap();
    assert_eq!(probe.credits[&View::Reports], vec![Credit::Full; 2]);
    assert_eq!(probe.credits[&View::Full], vec![Credit::Full; 2]);
    assert_eq!(probe.credits[&View::Actor], vec![Credit::Full; 3]);
    assert_eq!(assembled.scores.iter().filter(|r| r.probe == "t/k2/O1" && r.view == View::Reports).count(), 2);
    let report = analyze(&assembled.input, &EstimatorSettings::ctxgap_1()).unwrap();
    assert_eq!(report.accuracy(), marker_truth(&s, &sessions).unwrap());
}

#[test]
fn hand_written_answers_land_where_they_belong() {
    let s = settings(&[View::Reports, View::Full], true, 3);
    let rec = recorded("t");
    let sessions = BTreeMap::from([("t".to_string(), rec.clone())]);
    let mut outputs = Outputs::new();
    let mut put = |input: &CallInput, output: CallOutput| {
        outputs.insert(input.key.clone(), (input.clone(), output));
    };
    let first = after_session(&s, &rec).unwrap();
    let atoms_out = answered(&first[0].key, atoms_answer());
    put(&first[0], atoms_out.clone());
    put(&first[1], malformed(&first[1].key));
    let probes_call = after_call(&s, &rec, &first[0], &atoms_out, &CheckpointAnswers::default()).unwrap().remove(0);
    let probes_out = answered(&probes_call.key, probes_answer());
    put(&probes_call, probes_out.clone());
    let cp = CheckpointAnswers { atoms: Some(&atoms_out), probes: Some(&probes_out) };
    let answer_calls = after_call(&s, &rec, &probes_call, &probes_out, &cp).unwrap();
    let find = |key: &CallKey| answer_calls.iter().find(|c| c.key == *key).unwrap().clone();
    // Reports: sample 0 judged 1 / 0, sample 1's judge failed, sample 2 judged 0.5 / 0.
    // Full: sample 0 judged 1 / 1. Actor on a/2: sample 1 judged 0.5.
    let reader = |view, sample| CallKey::Reader { task: "t".into(), k: 1, view, sample };
    let scored = [
        (reader(View::Reports, 0), Some(json!([["a1", 1.0], ["a%2F2", 0.0]]))),
        (reader(View::Reports, 1), None),
        (reader(View::Reports, 2), Some(json!([["a1", 0.5], ["a%2F2", 0.0]]))),
        (reader(View::Full, 0), Some(json!([["a1", 1.0], ["a%2F2", 1.0]]))),
    ];
    for (key, credits) in scored {
        let input = find(&key);
        let out = answered(&key, json!({"answers": [{"id": "a1", "answer": "x"}, {"id": "a%2F2", "answer": "y"}]}));
        put(&input, out.clone());
        let judge = after_call(&s, &rec, &input, &out, &cp).unwrap().remove(0);
        let judged = match credits {
            Some(c) => {
                let scores: Vec<Value> =
                    c.as_array().unwrap().iter().map(|p| json!({"id": p[0], "credit": p[1]})).collect();
                answered(&judge.key, json!({ "scores": scores }))
            }
            None => malformed(&judge.key),
        };
        put(&judge, judged);
    }
    let actor_key = CallKey::Actor { task: "t".into(), k: 1, probe: "a%2F2".into(), sample: 1 };
    let actor = find(&actor_key);
    let actor_out = answered(&actor_key, json!({"answer": "beta"}));
    put(&actor, actor_out.clone());
    let judge = after_call(&s, &rec, &actor, &actor_out, &cp).unwrap().remove(0);
    put(&judge, answered(&judge.key, json!({"scores": [{"id": "a%2F2", "credit": 0.5}]})));
    let malformed_actor = find(&CallKey::Actor { task: "t".into(), k: 1, probe: "a1".into(), sample: 0 });
    put(&malformed_actor, malformed(&malformed_actor.key));

    let a = assemble(&s, &sessions, &outputs).unwrap();
    assert_eq!(a.input.checkpoints.len(), 2);
    assert_eq!(a.input.checkpoints[0].atoms, BTreeMap::from([(Category::Facts, 1), (Category::Failures, 1)]));
    assert!(a.input.checkpoints[1].atoms.is_empty(), "checkpoint 2's extraction was malformed");
    assert_eq!(a.input.checkpoints[0].fixed, Some(false));
    assert_eq!(a.input.checkpoints[0].view_chars.keys().copied().collect::<Vec<_>>(), [View::Reports, View::Full]);
    assert_eq!(a.input.checkpoints[0].view_chars[&View::Full], render(&rec.session, View::Full, 1).unwrap().chars);
    let ids: Vec<&str> = a.input.probes.iter().map(|p| p.probe.as_str()).collect();
    assert_eq!(ids, ["t/k1/a1", "t/k1/a%2F2"]);
    let (p1, p2) = (&a.input.probes[0], &a.input.probes[1]);
    assert!(p1.flags.well_formed && p2.flags.well_formed);
    assert_eq!((p1.category, p1.importance, p1.origin_turn), (Category::Facts, 3, 1));
    assert_eq!(p1.credits[&View::Reports], [Credit::Full, Credit::Partial]);
    assert_eq!(p1.credits[&View::Full], [Credit::Full]);
    assert!(!p1.credits.contains_key(&View::Actor));
    assert_eq!(p2.credits[&View::Reports], [Credit::None, Credit::None]);
    assert_eq!(p2.credits[&View::Actor], [Credit::Partial]);
    assert_eq!(a.answers.len(), 4 * 2 + 1);
    assert_eq!(a.scores.len(), 3 * 2 + 1);
    let actor_score = a.scores.iter().find(|r| r.view == View::Actor).unwrap();
    assert_eq!(
        (actor_score.probe.as_str(), actor_score.sample, actor_score.credit, actor_score.judge_call.as_str()),
        ("t/k1/a%2F2", 1, Credit::Partial, "judge:t/k1/actor/a%2F2/s1")
    );
    assert_eq!(a.probes[1].atom, "a/2");
    assert_eq!(a.probes[1].question.as_deref(), Some("What fails?"));
    let report = analyze(&a.input, &EstimatorSettings::ctxgap_1()).unwrap();
    // Weights 1: Acc(reports) = (0.75 + 0) / 2, Acc(full) = 1.
    assert_eq!(report.accuracy()["reports"], 0.375);
    assert_eq!(report.accuracy()["full"], 1.0);

    // A kept atom whose probe generation failed is a probe that is not well formed.
    let mut no_probes = outputs.clone();
    no_probes.retain(|k, _| matches!(k, CallKey::Atoms { .. }));
    no_probes.insert(probes_call.key.clone(), (probes_call.clone(), malformed(&probes_call.key)));
    let a = assemble(&s, &sessions, &no_probes).unwrap();
    assert_eq!(a.input.probes.len(), 2);
    assert!(a.input.probes.iter().all(|p| !p.flags.well_formed && p.credits.is_empty()));
    assert_eq!(a.probes[0].question, None);
    analyze(&a.input, &EstimatorSettings::ctxgap_1()).unwrap();

    // Stored calls the settings or sessions do not know are refused.
    let mut extra = outputs.clone();
    let stray = CallKey::Reader { task: "t".into(), k: 1, view: View::Scrollback, sample: 0 };
    let mut input = find(&reader(View::Reports, 0));
    input.key = stray.clone();
    extra.insert(stray, (input, malformed(&reader(View::Reports, 0))));
    assert!(assemble(&s, &sessions, &extra).unwrap_err().to_string().contains("view scrollback is not one of"));
    let mut extra = outputs.clone();
    let (input, output) = outputs[&reader(View::Reports, 0)].clone();
    extra.insert(reader(View::Reports, 1), (input, output));
    assert!(assemble(&s, &sessions, &extra).unwrap_err().to_string().contains("stored under this key"));
    assert!(assemble(&s, &BTreeMap::new(), &outputs).unwrap_err().to_string().contains("no session of task t"));
}
