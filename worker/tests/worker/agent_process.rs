//! The agent process driver and the command evaluator with the real scripted agent
//! (`agents/vcurve_agents/scripted.py`) and the test task calc-1 (`deploy/images/task-calc`).
//!
//! - `host_*` tests run the scripted agent's commands on this machine, in a git copy of the task's
//!   testbed, through a [`FakeRuntime`] whose handler runs `bash -c` there: they need python3 and
//!   git, no Docker.
//! - `docker_*` tests run everything in real containers of the task image named by
//!   `VCURVE_TEST_TASK_IMAGE` (build it with `deploy/images/build`, which prints `task=TAG`, or run
//!   the tests through `scripts/test`). Each test labels its containers `vcurve.test=<key>` and
//!   removes them with the docker CLI when it ends, even when it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vcurve_testkit::require::Service;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vcurve_record::{EndType, Interpreter, Task, Trajectory};
use vcurve_worker::runners::agent::{AgentCommand, AgentExit, AgentLimits, AgentRun, AgentStart, run_agent};
use vcurve_worker::runners::evaluate::{ApplyMethod, evaluate_command};
use vcurve_worker::sandbox::container::double::{FakeFs, FakeRuntime};
use vcurve_worker::sandbox::container::{Container, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest};

const IMAGE_VAR: &str = "VCURVE_TEST_TASK_IMAGE";
const TEST_LABEL: &str = "vcurve.test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the worker crate sits in the repository").to_path_buf()
}

/// calc-1 as `deploy/images/build --print-task` prints it, with `image` filled in.
fn task(image: &str) -> Task {
    let path = repo().join("deploy/images/task-calc/task.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut value: Value = serde_json::from_str(&text).expect("task.json is JSON");
    value["image"] = image.into();
    serde_json::from_value(value).expect("task.json is a vcurve Task")
}

/// The scripted agent, with `model` as its parameters.
fn scripted(task: &Task, model: Value, budget: u32, seed: u64) -> AgentStart {
    AgentStart {
        command: AgentCommand {
            argv: vec!["python3".into(), "-m".into(), "vcurve_agents.scripted".into()],
            env: BTreeMap::from([("PYTHONPATH".to_string(), repo().join("agents").display().to_string())]),
            cwd: None,
            user: None,
        },
        task: task.clone(),
        interpreter: Interpreter::default(),
        messages: vec![],
        t: 0,
        budget,
        seed,
        model,
    }
}

/// A short plan: the decision at step 2, the fix at step 4, the submission at step 7.
fn model(q: f64, r: f64) -> Value {
    json!({"q": q, "r": r, "decision_step": 2, "temperature": 0.7})
}

fn limits() -> AgentLimits {
    AgentLimits::new(Duration::from_secs(300))
}

async fn run(container: &Container, start: AgentStart) -> AgentRun {
    match run_agent(container, start, limits(), CancellationToken::new()).await {
        Ok(run) => run,
        Err(e) => panic!("the scripted agent's run failed: {e}"),
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git").args(args).current_dir(dir).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A git copy of the task's testbed, committed as the task image's is.
fn testbed() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new("cp")
        .args(["-r", "--", &format!("{}/.", repo().join("deploy/images/task-calc/testbed").display())])
        .arg(dir.path())
        .output()
        .expect("cp runs");
    assert!(out.status.success(), "cp: {}", String::from_utf8_lossy(&out.stderr));
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "calc"]);
    dir
}

/// Run every command with its argument vector on this machine in `dir` (the request's workdir
/// stands for it), stdout and stderr merged.
fn host_shell(dir: PathBuf) -> impl Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync + 'static {
    move |_fs, request| {
        let fail = |what: String| ExecOutput { output: what.into_bytes(), exit_code: Some(126), timed_out: false };
        let Some((program, args)) = request.argv.split_first() else { return fail("empty argv".into()) };
        let (mut reader, writer) = match std::io::pipe() {
            Ok(pipe) => pipe,
            Err(e) => return fail(format!("pipe: {e}")),
        };
        let Ok(writer2) = writer.try_clone() else { return fail("pipe clone".into()) };
        let mut child = match Command::new(program)
            .args(args)
            .envs(&request.env)
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(writer)
            .stderr(writer2)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => return fail(format!("spawn: {e}")),
        };
        let mut output = Vec::new();
        let _ = std::io::Read::read_to_end(&mut reader, &mut output);
        let code = child.wait().ok().and_then(|s| s.code()).map(i64::from);
        ExecOutput { output, exit_code: code, timed_out: false }
    }
}

async fn host_container(dir: &Path) -> Container {
    let runtime = FakeRuntime::with_handler(host_shell(dir.to_path_buf()));
    runtime.add_image("host", [("/testbed/.keep", "")]);
    let spec = ContainerSpec {
        image: "host".into(),
        memory_bytes: 1 << 30,
        pids_limit: 256,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    };
    Container::start(Arc::new(runtime), &spec).await.expect("a fake container")
}

fn check_base_run(run: &AgentRun, task: &Task, steps: u32) -> Trajectory {
    assert_eq!(run.steps_used, steps, "{run:#?}");
    assert_eq!(run.exit, AgentExit::Exited(0), "stderr: {}", run.stderr_tail);
    assert!(run.stderr_tail.contains("scripted: seed"), "{}", run.stderr_tail);
    let trajectory =
        run.clone().into_trajectory(task.clone(), Interpreter::default(), vec![]).expect("a valid trajectory");
    assert_eq!(trajectory.initial_messages, 2, "the scripted agent's system prompt and task");
    assert_eq!(trajectory.length(), steps);
    let back = Trajectory::from_json(&trajectory.canonical_bytes()).expect("the trajectory reads back");
    assert_eq!(back, trajectory);
    trajectory
}

#[tokio::test(flavor = "multi_thread")]
async fn host_the_scripted_agent_records_a_base_run_and_resumes_from_its_prefix() {
    let task = task("host");
    let dir = testbed();
    let container = host_container(dir.path()).await;
    let base = run(&container, scripted(&task, model(1.0, 1.0), 30, 7)).await;
    assert_eq!(base.end_type, EndType::Submitted);
    assert!(base.submission.contains("node = BinOp(op, node, self.parse_term())"), "{}", base.submission);
    let trajectory = check_base_run(&base, &task, 7);
    let last = &trajectory.steps[6].actions[0];
    assert!(last.command.starts_with("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"), "{last:?}");
    assert_eq!(last.returncode, Some(0));

    // A continuation from h_3 in a fresh copy (steps 1..3 only read): the same run, resumed.
    let dir = testbed();
    let container = host_container(dir.path()).await;
    let mut resumed = scripted(&task, model(1.0, 1.0), 27, 8);
    resumed.messages = trajectory.prefix(3).to_vec();
    resumed.t = 3;
    let continuation = run(&container, resumed).await;
    assert_eq!(continuation.initial_messages, trajectory.prefix(3).len());
    assert_eq!(&continuation.messages[..continuation.initial_messages], trajectory.prefix(3));
    assert_eq!(continuation.steps_used, 4);
    assert_eq!(continuation.end_type, EndType::Submitted);
    assert_eq!(continuation.submission, base.submission);
}

#[tokio::test(flavor = "multi_thread")]
async fn host_a_budget_too_small_ends_in_a_step_cap_without_a_submission() {
    let task = task("host");
    let dir = testbed();
    let container = host_container(dir.path()).await;
    let run = run(&container, scripted(&task, model(1.0, 1.0), 3, 7)).await;
    assert_eq!((run.end_type, run.submission.as_str()), (EndType::StepCap, ""));
    let trajectory = check_base_run(&run, &task, 3);
    assert_eq!(trajectory.submission, None);
}

// ---- Docker ------------------------------------------------------------------------------------

fn image() -> String {
    match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.is_empty() => image,
        _ => panic!(
            "{IMAGE_VAR} is not set: these tests need the local image of the test task calc-1. Build it with \
             `deploy/images/build` and set {IMAGE_VAR} to the tag it prints as task=TAG, or run the tests \
             through `scripts/test`, which does both"
        ),
    }
}

/// This test's containers: labelled with its key, removed with the docker CLI when dropped.
struct Scope {
    key: String,
    runtime: Arc<dyn ContainerRuntime>,
}

impl Scope {
    async fn new(what: &str) -> Scope {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let key = format!("agent-{what}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let runtime = vcurve_worker::DockerRuntime::connect().await.expect("the Docker Engine answers");
        Scope { key, runtime: Arc::new(runtime) }
    }

    fn spec(&self, image: &str) -> ContainerSpec {
        ContainerSpec {
            image: image.into(),
            memory_bytes: 1 << 30,
            pids_limit: 512,
            labels: BTreeMap::from([
                (vcurve_worker::sandbox::container::labels::MANAGED.to_string(), "1".to_string()),
                (TEST_LABEL.to_string(), self.key.clone()),
            ]),
            network: Default::default(),
            exec_env: Default::default(),
        }
    }

    /// The ids of this test's containers that still exist.
    fn containers(&self) -> Vec<String> {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label={TEST_LABEL}={}", self.key)])
            .output()
            .expect("the docker CLI runs");
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let ids = self.containers();
        if !ids.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).output();
        }
    }
}

/// Run the scripted agent in a fresh task container; its run (the container removed).
async fn docker_base_run(scope: &Scope, task: &Task, model: Value, seed: u64) -> AgentRun {
    let container = Container::start(scope.runtime.clone(), &scope.spec(&task.image)).await.expect("a task container");
    let run = run(&container, scripted(task, model, 30, seed)).await;
    container.remove().await.expect("the container is removed");
    run
}

async fn judge(scope: &Scope, task: &Task, patch: &str) -> vcurve_worker::runners::evaluate::Verdict {
    let harness = vcurve_worker::SwebenchHarness::from_env();
    evaluate_command(scope.runtime.clone(), task, patch, &scope.spec("replaced"), &harness, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("the evaluation failed: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_the_scripted_agent_in_a_task_container_records_a_trajectory_whose_fix_resolves() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let task = task(&image());
    let scope = Scope::new("right").await;
    let run = docker_base_run(&scope, &task, model(1.0, 1.0), 11).await;
    assert_eq!(run.end_type, EndType::Submitted);
    let trajectory = check_base_run(&run, &task, 7);
    assert!(trajectory.steps.iter().all(|s| s.actions.len() == 1));
    let verdict = judge(&scope, &task, &run.submission).await;
    assert!(verdict.resolved, "{verdict:#?}");
    assert_eq!((verdict.applied, verdict.returncode), (Some(ApplyMethod::GitApply), Some(0)));
    assert_eq!(scope.containers(), Vec::<String>::new(), "every container was removed");
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_wrong_or_flawed_fix_is_unresolved() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let task = task(&image());
    let scope = Scope::new("wrong").await;
    for (q, r, what) in [(0.0, 1.0, "wrong"), (1.0, 0.0, "flawed")] {
        let run = docker_base_run(&scope, &task, model(q, r), 12).await;
        assert_eq!(run.end_type, EndType::Submitted, "{what}");
        let verdict = judge(&scope, &task, &run.submission).await;
        assert!(!verdict.resolved, "{what}: {verdict:#?}");
        assert_eq!(verdict.applied, Some(ApplyMethod::GitApply), "{what}");
        assert!(verdict.returncode.is_some_and(|c| c != 0), "{what}: {verdict:#?}");
    }
    assert_eq!(scope.containers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_patch_that_does_not_apply_is_unresolved_and_fuzz_is_left_to_patch() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let task = task(&image());
    let scope = Scope::new("apply").await;
    let foreign = "diff --git a/calc/nothing.py b/calc/nothing.py\n--- a/calc/nothing.py\n+++ b/calc/nothing.py\n\
                   @@ -1,2 +1,2 @@\n-this line\n+that line\n is not there\n";
    let verdict = judge(&scope, &task, foreign).await;
    assert_eq!((verdict.resolved, verdict.applied), (false, None), "{verdict:#?}");
    assert!(verdict.output_tail.contains("no method applied the patch"), "{verdict:#?}");

    // The right fix with its first context line changed: git apply refuses it, patch's fuzz takes it.
    let dir = testbed();
    let container = host_container(dir.path()).await;
    let right = run(&container, scripted(&task, model(1.0, 1.0), 30, 7)).await.submission;
    let mut changed = false;
    let fuzzy: String = right
        .lines()
        .filter(|l| !l.starts_with("index "))
        .map(|l| {
            if !changed && l.starts_with(' ') {
                changed = true;
                format!(" {} # changed\n", &l[1..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(changed);
    let verdict = judge(&scope, &task, &fuzzy).await;
    assert_eq!(verdict.applied, Some(ApplyMethod::Patch), "{verdict:#?}");
    assert!(verdict.resolved, "{verdict:#?}");
    assert_eq!(scope.containers(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_container_that_dies_under_an_exec_ends_the_run_as_an_infrastructure_failure() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let task = task(&image());
    let scope = Scope::new("gone").await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let agent = dir.path().join("agent.py");
    std::fs::write(
        &agent,
        r#"
import json, sys
start = json.loads(sys.stdin.readline())
print(json.dumps({"type": "exec", "command": "sleep 30", "timeout_s": 60}), flush=True)
print("got", sys.stdin.readline(), file=sys.stderr, flush=True)
"#,
    )
    .expect("the agent is written");
    let container = Container::start(scope.runtime.clone(), &scope.spec(&task.image)).await.expect("a task container");
    let id = container.id().to_owned();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Command::new("docker").args(["rm", "-f", &id]).output().expect("the docker CLI runs")
    });
    let mut start = scripted(&task, json!({}), 30, 1);
    start.command.argv = vec!["python3".into(), agent.display().to_string()];
    let began = std::time::Instant::now();
    let result = run_agent(&container, start, limits(), CancellationToken::new()).await;
    let _ = killer.await;
    match result {
        Err(vcurve_worker::runners::agent::AgentFailure::Infrastructure { reason }) => {
            assert!(reason.contains("the container failed running \"sleep 30\""), "{reason}")
        }
        other => panic!("expected an infrastructure failure, got {other:?}"),
    }
    assert!(began.elapsed() < Duration::from_secs(20), "{:?}", began.elapsed());
}

// ---- Sessions ----------------------------------------------------------------------------------

/// The study's four instructions.
fn paper_instructions() -> Vec<String> {
    vcurve_worker::runners::task_session::PAPER_INSTRUCTIONS.map(str::to_owned).to_vec()
}

/// The scripted session's STATE markers in `text`: their ids.
fn state_ids(text: &str) -> Vec<String> {
    text.match_indices("[[STATE id=")
        .map(|(i, m)| text[i + m.len()..].split(' ').next().unwrap_or_default().to_owned())
        .collect()
}

/// A four-turn scripted session's shape: turns, reports, markers, and the code state at each
/// checkpoint (nothing before the fix of turn 2, the fix from then on).
fn check_scripted_session(session: &vcurve_record::session::Session, patches: &[&str]) {
    assert_eq!(session.checkpoints(), 4);
    let instructions: Vec<&str> = session.turns.iter().map(|t| t.instruction.as_str()).collect();
    assert_eq!(instructions, vcurve_worker::runners::task_session::PAPER_INSTRUCTIONS);
    assert_eq!(session.turns.iter().map(|t| t.messages.len()).collect::<Vec<_>>(), [4, 3, 2, 2]);
    let report = &session.turns[0].report.text;
    assert!(report.starts_with("Turn 1 (Investigate; do not modify code) is done."), "{report}");
    assert!(report.contains("- evaluate('10 - 4 - 3') returns 9 instead of 3"), "{report}");
    assert!(!report.contains("[[STATE"), "reports state facts, not markers: {report}");
    // Markers in narration, in outputs (not in the command) and in reasoning.
    let turn1 = &session.turns[0].messages;
    assert_eq!(state_ids(&turn1[0].text), ["t1-symptom"]);
    assert_eq!(state_ids(turn1[1].reasoning.as_deref().unwrap_or_default()), ["t1-power-right"]);
    assert_eq!(state_ids(&turn1[3].tool_calls[0].output), ["t1-tests-cmd"]);
    assert!(state_ids(&turn1[3].tool_calls[0].command).is_empty());
    assert!(patches[0].is_empty(), "turn 1 changed no code: {:?}", patches[0]);
    for (k, patch) in patches.iter().enumerate().skip(1) {
        assert!(patch.contains("node = BinOp(op, node, self.parse_term())"), "checkpoint {}: {patch}", k + 1);
        assert_eq!(*patch, patches[1], "turns 3 and 4 change no code");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn host_the_scripted_agent_runs_a_four_turn_session_with_a_patch_at_each_checkpoint() {
    let task = task("host");
    let dir = testbed();
    let container = host_container(dir.path()).await;
    let start = scripted(&task, json!({"session": {"fix": "correct"}}), 10, 7);
    let run = vcurve_worker::runners::agent::run_session_marked(
        &container,
        start,
        &paper_instructions(),
        limits(),
        None,
        CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("the scripted session failed: {e}"));
    assert!(run.complete);
    assert_eq!(run.run.end_type, EndType::Submitted);
    assert_eq!(run.run.submission, run.turns[3].patch, "the submission is the last checkpoint's code");
    let patches: Vec<&str> = run.turns.iter().map(|t| t.patch.as_str()).collect();
    check_scripted_session(&run.to_session(&task).expect("a valid session"), &patches);
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_four_turn_scripted_session_is_recorded_and_each_checkpoint_judged() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    use vcurve_worker::runners::task_session::{SessionPlan, run_session};
    let task = task(&image());
    let scope = Scope::new("session").await;
    for (fix, fixed) in [("correct", true), ("flawed", false)] {
        let start = scripted(&task, json!({"session": {"fix": fix}}), 10, 11);
        let plan = SessionPlan::paper(limits(), Some(vcurve_worker::SwebenchHarness::from_env()));
        let record =
            run_session(scope.runtime.clone(), &scope.spec("replaced"), start, &plan, None, CancellationToken::new())
                .await
                .unwrap_or_else(|e| panic!("the {fix} session failed: {e}"));
        let patches: Vec<&str> = record.checkpoints.iter().map(|c| c.patch.as_str()).collect();
        if fix == "correct" {
            check_scripted_session(&record.session, &patches);
        }
        let judged: Vec<Option<bool>> = record.checkpoints.iter().map(|c| c.resolved).collect();
        assert_eq!(judged, [Some(false), Some(fixed), Some(fixed), Some(fixed)], "{fix}: fixed at k");
        assert_eq!(record.checkpoints.iter().map(|c| c.k).collect::<Vec<_>>(), [1, 2, 3, 4]);
        let report = &record.session.turns[2].report.text;
        assert!(report.contains("- all visible tests pass after the fix"), "{report}");
        assert!(record.run.history_at(4).is_some());
    }
    assert_eq!(scope.containers(), Vec::<String>::new(), "every container was removed");
}
