//! The driver against small Python agents on the host, with a closure-driven container runtime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use vcurve_record::{EndType, Evaluator, Fingerprint, Interpreter, Task};

use super::*;
use crate::sandbox::container::double::{Call, FakeFs, FakeRuntime, Op};
use crate::sandbox::container::{Container, ContainerSpec, ExecOutput, ExecRequest, RuntimeError};

/// `echo X` prints `X`; `exit N` exits N; `slow` times out after printing an invalid byte.
fn shell(_fs: &mut FakeFs, request: &ExecRequest) -> ExecOutput {
    let command = request.argv.last().cloned().unwrap_or_default();
    if command == "slow" {
        return ExecOutput { output: b"partial\xff".to_vec(), exit_code: None, timed_out: true };
    }
    if let Some(code) = command.strip_prefix("exit ") {
        return ExecOutput { output: vec![], exit_code: code.parse().ok(), timed_out: false };
    }
    let output = command.strip_prefix("echo ").map(|s| format!("{s}\n")).unwrap_or_default();
    ExecOutput { output: output.into_bytes(), exit_code: Some(0), timed_out: false }
}

/// The exec requests the runtime saw: (argv, workdir, timeout).
fn execs(runtime: &FakeRuntime) -> Vec<(Vec<String>, String, Duration)> {
    runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Exec { argv, workdir, timeout, .. } => Some((argv, workdir, timeout)),
            _ => None,
        })
        .collect()
}

/// One Python agent for every behaviour, chosen by its first argument.
const AGENT: &str = r#"
import json, os, subprocess, sys, time

mode = sys.argv[1]
out = sys.stdout

def send(m):
    out.write(json.dumps(m) + "\n")
    out.flush()

def recv():
    line = sys.stdin.readline()
    if not line:
        sys.exit(7)
    return json.loads(line)

start = recv()
assert start["type"] == "start" and start["protocol"] == "vcurve.agent.v1", start
msgs = list(start["messages"])
if not msgs:
    msgs = [{"role": "system", "content": "you fix bugs"}, {"role": "user", "content": start["task"]["problem_statement"]}]
print("agent started in mode", mode, file=sys.stderr, flush=True)
time.sleep(float(os.environ.get("PAUSE", "0")))

if mode == "hang":
    time.sleep(1000)
if mode == "group":
    child = subprocess.Popen(["sleep", "1000"])
    with open(sys.argv[2], "w") as f:
        f.write(str(child.pid))
    time.sleep(1000)
if mode == "bad_json":
    out.write("{not json\n"); out.flush(); time.sleep(1000)
if mode == "unknown_type":
    send({"type": "thought", "text": "hmm"}); time.sleep(1000)
if mode == "long_line":
    out.write('{"type":"step","messages":[{"content":"' + "a" * (65 << 20) + '"}]}\n'); out.flush(); time.sleep(1000)
if mode == "stderr":
    for i in range(20000):
        sys.stderr.write(f"noise line {i}\n")
    sys.stderr.write("the last words\n"); sys.stderr.flush()
    out.write("[]\n"); out.flush(); time.sleep(1000)
if mode == "sigkill":
    send({"type": "exec", "command": "echo x", "timeout_s": 5}); recv()
    print("about to die", file=sys.stderr, flush=True)
    os.kill(os.getpid(), 9)
if mode == "infra":
    send({"type": "exec", "command": "explode", "timeout_s": 5}); recv(); time.sleep(1000)

steps = int(os.environ.get("STEPS", "2"))
for i in range(steps):
    n = len(msgs)
    for cmd, timeout in ([("echo %d" % n, 30)] if mode != "mixed" else [("echo a", 0.5), ("exit 3", 99999), ("slow", 2)]):
        send({"type": "exec", "command": cmd, "timeout_s": timeout})
        r = recv()
        assert r["type"] == "exec_result", r
        obs = r["output"]
    step = [{"role": "assistant", "content": "step %d" % n}, {"role": "user", "content": obs, "rc": r["returncode"]}]
    msgs += step
    send({"type": "step", "messages": step})
    if mode == "exit_early":
        print("giving up", file=sys.stderr, flush=True)
        sys.exit(3)

if mode == "trailing":
    send({"type": "exec", "command": "echo diff", "timeout_s": 10}); recv()
    msgs.append({"role": "user", "content": "exit notice"})
if mode == "bad_prefix":
    msgs = msgs[1:]
if mode == "bad_steps":
    msgs = msgs[:-1]
send({"type": "final", "end_type": os.environ.get("END", "submitted"), "submission": os.environ.get("PATCH"), "messages": msgs})
if mode == "exec_after_final":
    send({"type": "exec", "command": "echo late", "timeout_s": 5})
    time.sleep(1000)
if mode == "linger":
    time.sleep(1000)
if mode == "exit5":
    sys.exit(5)
"#;

struct Fixture {
    dir: tempfile::TempDir,
    script: PathBuf,
    runtime: Arc<FakeRuntime>,
    container: Container,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let runtime = Arc::new(FakeRuntime::with_handler(shell));
    runtime.add_image("img", [("/testbed/README", "")]);
    let spec = image_spec();
    let container = Container::start(runtime.clone(), &spec).await.unwrap();
    Fixture { dir, script, runtime, container }
}

/// The container of the image `img`.
fn image_spec() -> ContainerSpec {
    ContainerSpec {
        image: "img".into(),
        memory_bytes: 1 << 30,
        pids_limit: 64,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    }
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

fn start(script: &Path, mode: &str, env: &[(&str, &str)]) -> AgentStart {
    AgentStart {
        command: AgentCommand {
            argv: vec!["python3".into(), script.display().to_string(), mode.into()],
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            cwd: None,
            user: None,
        },
        task: task(),
        interpreter: Interpreter::default(),
        messages: vec![],
        t: 0,
        budget: 5,
        seed: 1234567890123,
        model: json!({"temperature": 0.7}),
    }
}

fn limits() -> AgentLimits {
    AgentLimits { exit_grace: Duration::from_millis(500), ..AgentLimits::new(Duration::from_secs(30)) }
}

async fn run(f: &Fixture, start: AgentStart, limits: AgentLimits) -> Result<AgentRun, AgentFailure> {
    run_agent(&f.container, start, limits, CancellationToken::new()).await
}

fn protocol_reason(result: Result<AgentRun, AgentFailure>) -> String {
    match result {
        Err(AgentFailure::Protocol { reason }) => reason,
        other => panic!("expected a protocol failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_conforming_base_run_becomes_a_valid_trajectory() {
    let f = fixture().await;
    let run = run(&f, start(&f.script, "ok", &[("PATCH", "diff --git a/x b/x\n")]), limits()).await.unwrap();
    assert_eq!(run.steps_used, 2);
    assert_eq!(run.end_type, EndType::Submitted);
    assert_eq!(run.submission, "diff --git a/x b/x\n");
    assert_eq!(run.initial_messages, 2, "the agent's own system prompt and task");
    assert_eq!(run.messages.len(), 6);
    assert_eq!(run.steps.iter().map(|s| s.messages_end).collect::<Vec<_>>(), vec![4, 6]);
    let action = &run.steps[1].actions[0];
    assert_eq!((action.command.as_str(), action.output.as_str(), action.returncode), ("echo 4", "4\n", Some(0)));
    assert_eq!(action.timeout_s, 30.0);
    assert_eq!(run.exit, AgentExit::Exited(0));
    assert!(run.stderr_tail.contains("agent started in mode ok"), "{:?}", run.stderr_tail);
    // Every command went through the exec path: the interpreter, the workdir, the timeout.
    let execs = execs(&f.runtime);
    assert_eq!(execs.len(), 2);
    assert_eq!(
        execs[0],
        (vec!["bash".to_string(), "-c".into(), "echo 2".into()], "/testbed".into(), Duration::from_secs(30))
    );

    let fingerprint = Fingerprint {
        changed_paths: vec!["/testbed/x".into()],
        returncode: Some(0),
        git_diff: "d".into(),
        git_status: "M x".into(),
    };
    let trajectory =
        run.clone().into_trajectory(task(), Interpreter::default(), vec![None, Some(fingerprint.clone())]).unwrap();
    assert_eq!(trajectory.initial_messages, 2);
    assert_eq!(trajectory.prefix(1).len(), 4);
    assert_eq!(trajectory.steps[1].fingerprint, Some(fingerprint));
    assert_eq!(trajectory.submission.as_deref(), Some("diff --git a/x b/x\n"));
    let back = vcurve_record::Trajectory::from_json(&trajectory.canonical_bytes()).unwrap();
    assert_eq!(back, trajectory);
    let err = run.clone().into_trajectory(task(), Interpreter::default(), vec![None]).unwrap_err();
    assert!(err.to_string().contains("fingerprints has 1 entries for 2 steps"), "{err}");
    let err = AgentRun { t: 3, ..run }.into_trajectory(task(), Interpreter::default(), vec![]).unwrap_err();
    assert!(err.to_string().contains("only a base run"), "{err}");
}

#[tokio::test]
async fn a_continuation_extends_its_prefix_and_records_what_each_exec_observed() {
    let f = fixture().await;
    let prefix = vec![
        json!({"role": "system", "content": "s"}),
        json!({"role": "user", "content": "u"}),
        json!({"role": "assistant", "content": "a"}),
    ];
    let mut s = start(&f.script, "mixed", &[("STEPS", "1"), ("END", "step_cap")]);
    s.messages = prefix.clone();
    s.t = 1;
    s.budget = 1;
    let run = run(&f, s, limits()).await.unwrap();
    assert_eq!(run.initial_messages, 3);
    assert_eq!(&run.messages[..3], &prefix[..]);
    assert_eq!(run.steps.len(), 1);
    assert_eq!(run.steps[0].messages_end, 5);
    assert_eq!(run.end_type, EndType::StepCap);
    assert_eq!(run.submission, "", "a null submission is none");
    let actions = &run.steps[0].actions;
    assert_eq!(actions.len(), 3);
    assert_eq!((actions[0].timeout_s, actions[0].returncode), (0.5, Some(0)));
    assert_eq!((actions[1].timeout_s, actions[1].returncode), (3600.0, Some(3)), "the timeout is capped");
    assert_eq!((actions[2].returncode, actions[2].timed_out), (None, true));
    assert_eq!(actions[2].output, "partial\u{fffd}");
    // What the agent was told matches what was recorded.
    assert_eq!(run.messages[4]["content"], "partial\u{fffd}");
    assert!(run.messages[4]["rc"].is_null());
    assert_eq!(execs(&f.runtime)[1].2, Duration::from_secs(3600));
    // A continuation is not a trajectory.
    assert!(run.into_trajectory(task(), Interpreter::default(), vec![]).is_err());
}

#[tokio::test]
async fn execs_after_the_last_step_and_trailing_messages_belong_to_no_step() {
    let f = fixture().await;
    let run = run(&f, start(&f.script, "trailing", &[("STEPS", "1")]), limits()).await.unwrap();
    assert_eq!(run.steps.len(), 1);
    assert_eq!(run.steps[0].actions.len(), 1);
    assert_eq!(run.trailing_actions.len(), 1);
    assert_eq!(run.trailing_actions[0].command, "echo diff");
    assert_eq!(run.messages.len(), 5);
    assert_eq!(run.steps[0].messages_end, 4);
    let trajectory = run.into_trajectory(task(), Interpreter::default(), vec![]).unwrap();
    assert_eq!(trajectory.submission, None);
}

#[tokio::test]
async fn protocol_violations_are_no_outcomes_naming_what_was_wrong() {
    let f = fixture().await;
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("bad_json", &[], "line 1: the line is not JSON"),
        ("unknown_type", &[], "unknown message type \"thought\""),
        ("exec_after_final", &[], "follows its final message"),
        ("ok", &[("STEPS", "6")], "step 6 is beyond the budget of 5 steps"),
        ("bad_steps", &[], "does not carry the 4 messages of the 2 steps"),
        ("ok", &[("END", "gave_up")], "final.end_type \"gave_up\" is not one of submitted, step_cap"),
        ("exit_early", &[], "before its final message: the process exited with status 3"),
    ];
    for (mode, env, expected) in cases {
        let reason = protocol_reason(run(&f, start(&f.script, mode, env), limits()).await);
        assert!(reason.contains(expected), "{mode}: {reason:?} should mention {expected:?}");
    }
    // The stderr tail is in the reason.
    let reason = protocol_reason(run(&f, start(&f.script, "exit_early", &[]), limits()).await);
    assert!(reason.contains("giving up"), "{reason}");
}

#[tokio::test]
async fn a_prefix_the_final_does_not_extend_is_refused() {
    let f = fixture().await;
    let mut s = start(&f.script, "bad_prefix", &[("STEPS", "1")]);
    s.messages = vec![json!({"role": "system", "content": "s"}), json!({"role": "user", "content": "u"})];
    let reason = protocol_reason(run(&f, s, limits()).await);
    assert!(reason.contains("does not extend the prefix the agent was handed: message 0 differs"), "{reason}");
}

#[tokio::test]
async fn a_line_over_64_mib_breaks_the_protocol() {
    let f = fixture().await;
    let reason = protocol_reason(run(&f, start(&f.script, "long_line", &[]), limits()).await);
    assert!(reason.contains("line 1 of the agent's output is longer than 67108864 bytes"), "{reason}");
}

#[tokio::test]
async fn the_reason_ends_with_the_stderr_tail() {
    let f = fixture().await;
    let reason = protocol_reason(run(&f, start(&f.script, "stderr", &[]), limits()).await);
    assert!(reason.contains("not a JSON object"), "{reason}");
    assert!(reason.trim_end().ends_with("the last words"), "{reason}");
    assert!(!reason.contains("noise line 100\n"), "only the tail is kept");
    assert!(reason.len() < 5000, "{} bytes", reason.len());
}

#[tokio::test]
async fn a_process_killed_by_a_signal_is_killed() {
    let f = fixture().await;
    match run(&f, start(&f.script, "sigkill", &[]), limits()).await {
        Err(AgentFailure::Killed { reason }) => {
            assert!(reason.contains("signal 9 (SIGKILL)"), "{reason}");
            assert!(reason.contains("about to die"), "{reason}");
        }
        other => panic!("expected Killed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_runtime_error_during_an_exec_is_an_infrastructure_failure() {
    let f = fixture().await;
    f.runtime.fail_next(Op::Exec, RuntimeError::Gone("c1".into()));
    match run(&f, start(&f.script, "infra", &[]), limits()).await {
        Err(AgentFailure::Infrastructure { reason }) => {
            assert!(reason.contains("the container failed running \"explode\": container c1 is gone"), "{reason}")
        }
        other => panic!("expected Infrastructure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_hanging_agent_times_out_and_its_process_group_is_killed() {
    let f = fixture().await;
    let pid_file = f.dir.path().join("child.pid");
    let mut s = start(&f.script, "group", &[]);
    s.command.argv.push(pid_file.display().to_string());
    let limits = AgentLimits { run_timeout: Some(Duration::from_secs(2)), ..limits() };
    let began = Instant::now();
    match run(&f, s, limits).await {
        Err(AgentFailure::Timeout { reason }) => {
            assert!(reason.contains("longer than its 2 s"), "{reason}");
            assert!(reason.contains("agent started in mode group"), "{reason}");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    assert_dead(&pid_file);
}

#[tokio::test(start_paused = true)]
async fn no_default_limit_censors_a_run_longer_than_the_old_hour() {
    // The clock is paused: whenever the runtime only waits (here on the agent, which thinks for
    // a real second before its first step), it jumps to the next timer. Under the old default
    // cap of 3,600 s that timer is the cap: the run is killed, an hour "later".
    let f = fixture().await;
    let old_default = run(&f, start(&f.script, "ok", &[("PAUSE", "1")]), AgentLimits::new(Duration::from_secs(3600)));
    match old_default.await {
        Err(AgentFailure::Timeout { reason }) => assert!(reason.contains("longer than its 3600 s"), "{reason}"),
        other => panic!("expected the old cap to kill the run, got {other:?}"),
    }
    // A study's default options set no cap: the same run completes, however long it takes.
    let options = vcurve_record::runner::AgentOptions::from_json(&json!({"agent": "x"})).unwrap();
    let limits = AgentLimits { exit_grace: Duration::from_millis(500), ..AgentLimits::from_options(&options) };
    assert_eq!(limits.run_timeout, None);
    let done = run(&f, start(&f.script, "ok", &[("PAUSE", "1")]), limits).await.unwrap();
    assert_eq!(done.steps_used, 2);
}

#[tokio::test]
async fn cancel_kills_the_agent_promptly() {
    let f = fixture().await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let began = Instant::now();
    let result = run_agent(&f.container, start(&f.script, "hang", &[]), limits(), cancel).await;
    assert_eq!(result, Err(AgentFailure::Cancelled));
    assert!(began.elapsed() < Duration::from_secs(3), "{:?}", began.elapsed());
}

#[tokio::test]
async fn after_a_valid_final_how_the_process_ends_does_not_undo_the_run() {
    let f = fixture().await;
    let run5 = run(&f, start(&f.script, "exit5", &[]), limits()).await.unwrap();
    assert_eq!(run5.exit, AgentExit::Exited(5));
    assert_eq!(run5.steps_used, 2);
    let began = Instant::now();
    let lingering = run(&f, start(&f.script, "linger", &[]), limits()).await.unwrap();
    assert_eq!(lingering.exit, AgentExit::KilledAfterGrace);
    assert!(began.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_agent_that_cannot_start_is_an_infrastructure_failure() {
    let f = fixture().await;
    let mut s = start(&f.script, "ok", &[]);
    s.command.argv = vec!["/nonexistent/agent".into()];
    match run(&f, s.clone(), limits()).await {
        Err(AgentFailure::Infrastructure { reason }) => assert!(reason.contains("/nonexistent/agent"), "{reason}"),
        other => panic!("expected Infrastructure, got {other:?}"),
    }
    s.command.argv = vec![];
    assert!(matches!(run(&f, s, limits()).await, Err(AgentFailure::Infrastructure { .. })));
}

#[tokio::test]
async fn a_budget_of_zero_allows_a_final_without_steps() {
    let f = fixture().await;
    let mut s = start(&f.script, "ok", &[("STEPS", "0"), ("END", "step_cap")]);
    s.budget = 0;
    let run = run(&f, s, limits()).await.unwrap();
    assert_eq!(run.steps_used, 0);
    assert_eq!(run.initial_messages, 2);
    let err = run.into_trajectory(task(), Interpreter::default(), vec![]).unwrap_err();
    assert!(err.to_string().contains("steps is empty"), "{err}");
}

#[test]
fn commands_and_limits_come_from_the_study_options() {
    let options = vcurve_record::runner::AgentOptions::from_json(&json!({
        "agent": "scripted",
        "env": {"SCRIPTED_MODE": "x"},
        "run_timeout_s": 90,
    }))
    .unwrap();
    let agents = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let mut registry = crate::runners::agents::AgentRegistry::new();
    registry.register_flag("scripted", &agents).unwrap();
    // The registration allows no variable: the study's is refused, naming it.
    let e = registry.command(&options).unwrap_err();
    assert!(e.contains("SCRIPTED_MODE"), "{e}");
    let options = vcurve_record::runner::AgentOptions { env: Default::default(), ..options };
    let command = registry.command(&options).unwrap();
    assert_eq!(command.argv[1..], ["-m", "vcurve_agents.scripted"]);
    assert!(command.argv[0].ends_with("python3"), "{:?}", command.argv);
    assert!(command.env["PYTHONPATH"].ends_with("agents"), "{:?}", command.env);
    assert_eq!((command.cwd, command.user), (None, None));
    let limits = AgentLimits::from_options(&options);
    assert_eq!(limits, AgentLimits::new(Duration::from_secs(90)));
    assert_eq!((limits.exit_grace, limits.max_line_bytes, limits.stderr_tail_bytes), (EXIT_GRACE, 64 << 20, 64 << 10));
}

/// The process whose pid `pid_file` holds is gone (or a zombie) within a second.
fn assert_dead(pid_file: &Path) {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let dead = (0..50).any(|_| {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let dead = state.is_empty() || state.contains(") Z ");
        if !dead {
            std::thread::sleep(Duration::from_millis(20));
        }
        dead
    });
    assert!(dead, "the agent's child {pid} outlived it");
}

#[tokio::test]
async fn dropping_the_run_kills_the_agent_and_its_process_group() {
    let f = fixture().await;
    let pid_file = f.dir.path().join("child.pid");
    let mut s = start(&f.script, "group", &[]);
    s.command.argv.push(pid_file.display().to_string());
    let run = run_agent(&f.container, s, limits(), CancellationToken::new());
    assert!(tokio::time::timeout(Duration::from_millis(1500), run).await.is_err(), "the agent hangs");
    assert_dead(&pid_file);
}

#[tokio::test]
async fn a_setsid_child_of_the_agent_dies_with_its_run() {
    // Issue 24: a child that left the agent's process group and session outlived the group kill.
    // The run's mark reaches it.
    let f = fixture().await;
    let instance = crate::sandbox::instance::Instance::open(&f.dir.path().join("state"), "w").unwrap();
    let pid_file = f.dir.path().join("setsid.pid");
    let mut s = start(&f.script, "unused", &[]);
    s.command.argv = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 1000' </dev/null >/dev/null 2>&1 & sleep 0.5; exit 3",
            pid_file.display()
        ),
    ];
    let result =
        run_agent_marked(&f.container, s, limits(), Some(instance.agent_mark()), CancellationToken::new()).await;
    assert!(protocol_reason(result).contains("exited with status 3"));
    assert_dead(&pid_file);
}

/// [`shell`], where `echo N` also writes `N` to `/testbed/out`, and the one exec of a
/// fingerprint's git state prints a diff naming the file's content, the separator and a status.
fn shell_with_git(fs: &mut FakeFs, request: &ExecRequest) -> ExecOutput {
    let command = request.argv.last().cloned().unwrap_or_default();
    if let Some(line) = command.lines().find(|l| l.contains(crate::sandbox::replay::GIT_STATE_SEPARATOR)) {
        let separator = line.trim_start_matches("echo ");
        let out = fs.files().get("/testbed/out").map(|c| String::from_utf8_lossy(c).into_owned()).unwrap_or_default();
        let output = format!("+{out}{separator}\n M out\n");
        return ExecOutput { output: output.into_bytes(), exit_code: Some(0), timed_out: false };
    }
    if let Some(text) = command.strip_prefix("echo ") {
        fs.write("/testbed/out", format!("{text}\n").into_bytes());
    }
    shell(fs, request)
}

/// A base run told to record fingerprints measures the state after each step where the runtime
/// stamps the writable layer, and its trajectory carries them; where it does not (a diff from the
/// engine at every step), and in a continuation, none are measured.
#[tokio::test]
async fn a_base_run_records_a_fingerprint_after_each_step_where_the_layer_is_stamped() {
    let f = fixture().await;
    let runtime = Arc::new(FakeRuntime::with_handler(shell_with_git));
    runtime.add_image("img", [("/testbed/README", "")]);
    runtime.set_stamps(true);
    let spec = image_spec();
    let measuring = AgentLimits { record_fingerprints: true, ..limits() };
    let container = Container::start(runtime.clone(), &spec).await.unwrap();
    let run = run_agent(&container, start(&f.script, "ok", &[]), measuring, CancellationToken::new()).await.unwrap();
    assert_eq!(run.fingerprints.len(), 2, "one per step");
    let second = run.fingerprints[1].clone().expect("measured");
    assert_eq!(second.changed_paths, vec!["/testbed/out".to_string()]);
    assert_eq!(
        (second.returncode, second.git_diff.as_str(), second.git_status.as_str()),
        (Some(0), "+4\n", " M out\n")
    );
    assert_eq!(run.fingerprints[0].as_ref().unwrap().git_diff, "+2\n", "the state after step 1, not after the run");
    let mut run = run;
    let fingerprints = std::mem::take(&mut run.fingerprints);
    let trajectory = run.into_trajectory(task(), Interpreter::default(), fingerprints).unwrap();
    assert_eq!(trajectory.steps[1].fingerprint.as_ref(), Some(&second));

    // A continuation (t > 0) measures nothing.
    let mut from_prefix = start(&f.script, "ok", &[]);
    from_prefix.messages = vec![json!({"role": "system", "content": "s"}), json!({"role": "user", "content": "u"})];
    from_prefix.t = 1;
    let run = run_agent(&container, from_prefix, measuring, CancellationToken::new()).await.unwrap();
    assert!(run.fingerprints.is_empty());
    container.remove().await.unwrap();

    // Without a stamp, nothing is measured: not even the git state.
    runtime.set_stamps(false);
    let container = Container::start(runtime.clone(), &spec).await.unwrap();
    let before = runtime.count(Op::Exec);
    let run = run_agent(&container, start(&f.script, "ok", &[]), measuring, CancellationToken::new()).await.unwrap();
    assert!(run.fingerprints.is_empty());
    assert_eq!(runtime.count(Op::Exec) - before, 2, "the agent's two commands only");
}
