//! Sessions through the driver ([`run_session_marked`]): small Python agents on the host speaking
//! turns, a fake container whose `edit X` changes the code state the checkpoint patch shows.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use vcurve_record::{EndType, Evaluator, Interpreter, Task};

use super::*;
use crate::sandbox::container::double::{FakeFs, FakeRuntime};
use crate::sandbox::container::{Container, ContainerSpec, ExecOutput, ExecRequest};

/// One Python session agent for every behaviour, chosen by its first argument.
const AGENT: &str = r#"
import json, sys

mode = sys.argv[1]

def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()

def recv():
    line = sys.stdin.readline()
    if not line:
        sys.exit(7)
    return json.loads(line)

start = recv()
assert start["type"] == "start", start
print("turns:", start.get("turns"), file=sys.stderr, flush=True)
if mode == "single_turn_end":
    send({"type": "turn_end", "report": "done", "messages": []})
    sys.exit(0)
msgs = [{"role": "system", "content": "you fix bugs"}, {"role": "user", "content": start["task"]["problem_statement"]}]
turn = 0
while True:
    m = recv()
    if m["type"] == "end":
        break
    assert m["type"] == "instruction" and m["turn"] == turn + 1, m
    turn = m["turn"]
    msgs.append({"role": "user", "content": m["content"]})
    steps = {"over_budget": m["budget"] + 1, "zero_step": 0 if turn == 2 else 1}.get(mode, 2)
    for i in range(steps):
        cmd = "edit turn%d" % turn if i == steps - 1 else "echo t%d.%d" % (turn, i)
        send({"type": "exec", "command": cmd, "timeout_s": 5})
        r = recv()
        step = [{"role": "assistant", "content": "turn %d step %d" % (turn, i), "reasoning_content": "why %d" % turn},
                {"role": "user", "content": r["output"]}]
        msgs += step
        send({"type": "step", "messages": step})
    if mode == "early_final" and turn == 2:
        send({"type": "final", "end_type": "step_cap", "submission": None, "messages": msgs})
        sys.exit(0)
    if turn == 1:
        send({"type": "exec", "command": "echo checking", "timeout_s": 5}); recv()
    report = "report %d" % turn
    msgs.append({"role": "assistant", "content": report})
    if mode == "empty_report":
        report = "  "
    sent = msgs[2:] if mode == "bad_messages" and turn == 2 else msgs
    send({"type": "turn_end", "report": report, "messages": sent})
if mode == "step_after_end":
    send({"type": "step", "messages": [{"role": "assistant", "content": "more"}]})
if mode == "turn_end_after_end":
    send({"type": "turn_end", "report": "again", "messages": msgs})
send({"type": "exec", "command": "echo submit", "timeout_s": 5}); recv()
send({"type": "final", "end_type": "submitted", "submission": "the patch", "messages": msgs})
"#;

struct Fixture {
    _dir: tempfile::TempDir,
    script: std::path::PathBuf,
    container: Container,
}

/// `edit X` makes the code state `X`; the checkpoint command prints it as a patch; `echo X`
/// prints `X`.
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let code = Arc::new(Mutex::new(String::new()));
    let runtime = FakeRuntime::with_handler(move |_fs: &mut FakeFs, request: &ExecRequest| {
        let command = request.argv.last().cloned().unwrap_or_default();
        let mut code = code.lock().unwrap();
        let output = if command == CHECKPOINT_PATCH_COMMAND {
            if code.is_empty() { String::new() } else { format!("diff --git a/{0} b/{0}\n", *code) }
        } else if let Some(state) = command.strip_prefix("edit ") {
            *code = state.to_owned();
            "edited\n".to_owned()
        } else {
            command.strip_prefix("echo ").map(|s| format!("{s}\n")).unwrap_or_default()
        };
        ExecOutput { output: output.into_bytes(), exit_code: Some(0), timed_out: false }
    });
    runtime.add_image("img", [("/testbed/README", "")]);
    let spec = ContainerSpec {
        image: "img".into(),
        memory_bytes: 1 << 30,
        pids_limit: 64,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    };
    let container = Container::start(Arc::new(runtime), &spec).await.unwrap();
    Fixture { _dir: dir, script, container }
}

fn task() -> Task {
    Task {
        id: "calc-1".into(),
        image: "img".into(),
        workdir: "/testbed".into(),
        evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
        problem_statement: Some("fix the sign".into()),
    }
}

fn start(script: &Path, mode: &str) -> AgentStart {
    AgentStart {
        command: AgentCommand {
            argv: vec!["python3".into(), script.display().to_string(), mode.into()],
            env: BTreeMap::new(),
            cwd: None,
            user: None,
        },
        task: task(),
        interpreter: Interpreter::default(),
        messages: vec![],
        t: 0,
        budget: 3,
        seed: 7,
        model: json!({}),
    }
}

fn instructions(n: usize) -> Vec<String> {
    (1..=n).map(|k| format!("instruction {k}")).collect()
}

fn limits() -> AgentLimits {
    // Generous: the machine running the tests may be loaded; nothing here waits for the cap.
    AgentLimits { exit_grace: Duration::from_secs(5), ..AgentLimits::new(Duration::from_secs(300)) }
}

async fn session(mode: &str, turns: usize) -> Result<SessionRun, AgentFailure> {
    let f = fixture().await;
    run_session_marked(
        &f.container,
        start(&f.script, mode),
        &instructions(turns),
        limits(),
        None,
        CancellationToken::new(),
    )
    .await
}

fn protocol_reason(result: Result<SessionRun, AgentFailure>) -> String {
    match result {
        Err(AgentFailure::Protocol { reason }) => reason,
        other => panic!("expected a protocol failure, got {other:?}"),
    }
}

#[test]
fn a_single_runs_start_is_what_it_was_and_a_sessions_announces_turns() {
    let f = AgentStart { model: json!({"q": 1}), ..start(Path::new("/agent"), "ok") };
    let single = serde_json::to_string(&messages::start_message(&f, "c1", false)).unwrap();
    assert_eq!(
        single,
        r#"{"budget":3,"container":"c1","messages":[],"model":{"q":1},"protocol":"vcurve.agent.v1","seed":7,"t":0,"task":{"id":"calc-1","problem_statement":"fix the sign","workdir":"/testbed"},"type":"start"}"#
    );
    let session = messages::start_message(&f, "c1", true);
    assert_eq!(session["turns"], json!(true));
    assert_eq!(
        messages::instruction_message(2, "Implement a fix", 30),
        json!({"type": "instruction", "turn": 2, "content": "Implement a fix", "budget": 30})
    );
    assert_eq!(messages::end_message(), json!({"type": "end"}));
}

#[test]
fn turn_end_messages_are_checked() {
    use messages::{AgentMessage, parse_message};
    assert_eq!(
        parse_message(br#"{"type":"turn_end","report":"r","messages":[{}]}"#),
        Ok(AgentMessage::TurnEnd { report: "r".into(), messages: vec![json!({})] })
    );
    let refused = |line: &str, expected: &str| {
        let err = parse_message(line.as_bytes()).unwrap_err();
        assert!(err.contains(expected), "{err:?} should mention {expected:?}");
    };
    refused(r#"{"type":"turn_end","report":"","messages":[]}"#, "turn_end.report is empty");
    refused(r#"{"type":"turn_end","report":3,"messages":[]}"#, "turn_end.report must be a string, got a number");
    refused(r#"{"type":"turn_end","report":"r"}"#, "turn_end.messages must be an array");
    refused(r#"{"type":"instruction","content":"x"}"#, "from the worker to the agent");
    refused(r#"{"type":"end"}"#, "from the worker to the agent");
}

#[tokio::test]
async fn a_session_records_its_turns_reports_and_each_checkpoints_patch() {
    let run = session("ok", 3).await.unwrap();
    assert!(run.complete);
    assert_eq!(run.run.end_type, EndType::Submitted);
    assert_eq!(run.run.submission, "the patch");
    assert_eq!(run.turns.len(), 3);
    assert_eq!(run.run.steps_used, 6, "two steps per turn, the budget per turn");
    assert_eq!(run.run.initial_messages, 3, "system, task and instruction 1");
    let patches: Vec<&str> = run.turns.iter().map(|t| t.patch.as_str()).collect();
    assert_eq!(
        patches,
        ["diff --git a/turn1 b/turn1\n", "diff --git a/turn2 b/turn2\n", "diff --git a/turn3 b/turn3\n"]
    );
    let turn = &run.turns[0];
    assert_eq!((turn.instruction.as_str(), turn.report.as_str()), ("instruction 1", "report 1"));
    assert_eq!((turn.first_step, turn.steps, turn.first_message, turn.messages_end), (0, 2, 3, 8));
    assert_eq!(turn.trailing_actions.len(), 1, "the exec after the turn's last step");
    assert_eq!((run.turns[1].first_step, run.turns[1].first_message, run.turns[1].messages_end), (2, 9, 14));
    assert_eq!(run.run.steps.iter().map(|s| s.messages_end).collect::<Vec<_>>(), [5, 7, 11, 13, 17, 19]);
    assert_eq!(run.run.trailing_actions.len(), 1, "the submission's exec after end");
    assert_eq!(run.history_at(2).unwrap().last().unwrap()["content"], "report 2");
    assert!(run.history_at(4).is_none() && run.history_at(0).is_none());
    assert!(run.run.stderr_tail.contains("turns: True"), "{}", run.run.stderr_tail);

    let session = run.to_session(&task()).unwrap();
    assert_eq!(session.checkpoints(), 3);
    assert_eq!(session.system.as_deref(), Some("you fix bugs"));
    assert_eq!(session.task.statement, "fix the sign");
    let turn2 = &session.turns[1];
    assert_eq!(turn2.instruction, "instruction 2");
    assert_eq!(turn2.report.text, "report 2");
    assert_eq!(turn2.messages.len(), 2);
    assert_eq!(turn2.messages[1].text, "turn 2 step 1");
    assert_eq!(turn2.messages[1].reasoning.as_deref(), Some("why 2"));
    assert_eq!(turn2.messages[1].tool_calls[0].command, "edit turn2");
    assert_eq!(turn2.messages[1].tool_calls[0].output, "edited\n");
    session.validate().unwrap();
}

#[tokio::test]
async fn a_turn_may_take_no_step_and_a_final_mid_turn_ends_the_session_early() {
    let run = session("zero_step", 3).await.unwrap();
    assert!(run.complete);
    assert_eq!(run.turns.iter().map(|t| t.steps).collect::<Vec<_>>(), [1, 0, 1]);
    assert_eq!(run.turns[1].patch, run.turns[0].patch, "nothing changed in turn 2");
    let session = run.to_session(&task()).unwrap();
    assert!(session.turns[1].messages.is_empty());
    assert_eq!(session.turns[2].messages[0].tool_calls[0].command, "edit turn3");

    let early = session_of("early_final", 3).await;
    assert!(!early.complete);
    assert_eq!(early.turns.len(), 1, "turn 2 did not end: no checkpoint");
    assert_eq!(early.run.end_type, EndType::StepCap);
    assert_eq!(early.run.steps_used, 4, "turn 2's steps are in the run");
    assert_eq!(early.run.steps.last().unwrap().messages_end, early.run.messages.len());
    assert_eq!(early.to_session(&task()).unwrap().checkpoints(), 1);
}

async fn session_of(mode: &str, turns: usize) -> SessionRun {
    session(mode, turns).await.unwrap_or_else(|e| panic!("{mode}: {e}"))
}

#[tokio::test]
async fn bad_turn_messages_break_the_protocol_with_their_reason() {
    let reason = protocol_reason(session("empty_report", 2).await);
    assert!(reason.contains("turn_end.report is empty"), "{reason}");
    let reason = protocol_reason(session("over_budget", 2).await);
    assert!(reason.contains("step 4 of turn 1 is beyond the budget of 3 steps per turn"), "{reason}");
    let reason = protocol_reason(session("bad_messages", 2).await);
    assert!(reason.contains("(turn 2): turn_end.messages does not extend the prefix"), "{reason}");
    let reason = protocol_reason(session("step_after_end", 2).await);
    assert!(reason.contains("a step after the worker ended the session"), "{reason}");
    let reason = protocol_reason(session("turn_end_after_end", 2).await);
    assert!(reason.contains("turn_end after the worker ended the session"), "{reason}");
    // A turn_end in a run that is not a session.
    let f = fixture().await;
    let single = run_agent(&f.container, start(&f.script, "single_turn_end"), limits(), CancellationToken::new()).await;
    match single {
        Err(AgentFailure::Protocol { reason }) => {
            assert!(reason.contains("turn_end in a run that is not a session"), "{reason}");
        }
        other => panic!("expected a protocol failure, got {other:?}"),
    }
    // No instruction is no session.
    let f = fixture().await;
    let none =
        run_session_marked(&f.container, start(&f.script, "ok"), &[], limits(), None, CancellationToken::new()).await;
    assert!(
        matches!(none, Err(AgentFailure::Infrastructure { ref reason }) if reason.contains("at least one instruction"))
    );
}
