use std::sync::Arc;
use std::time::Duration;

use vcurve_record::jobs::MismatchKind;
use vcurve_record::trajectory::{EndType, Evaluator, FORMAT, Interpreter, Step, Task};
use vcurve_record::{Action, Fingerprint};

use super::*;
use crate::sandbox::container::ContainerRuntime;
use crate::sandbox::container::double::{Call, FakeRuntime, Op};

pub(crate) const IMAGE: &str = "vcurve/task:demo";

pub(crate) fn limits() -> ContainerLimits {
    ContainerLimits {
        memory_bytes: 1 << 30,
        pids_limit: 512,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    }
}

/// A fake runtime holding the task image: a repository with two files.
pub(crate) fn runtime() -> Arc<FakeRuntime> {
    let rt = Arc::new(FakeRuntime::new());
    rt.add_image(IMAGE, [("/testbed/a.py", "print('a')\n"), ("/testbed/README", "demo\n")]);
    rt
}

fn task() -> Task {
    Task {
        id: "demo-1".into(),
        image: IMAGE.into(),
        workdir: "/testbed".into(),
        evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
        problem_statement: None,
    }
}

/// Record a trajectory by running `steps` (each a list of commands with timeouts) in a fresh
/// container of the task image, with a fingerprint after each step when `fingerprints`.
pub(crate) async fn record(rt: &Arc<FakeRuntime>, steps: &[&[(&str, f64)]], fingerprints: bool) -> Trajectory {
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let container = Container::start(runtime, &limits().spec(IMAGE)).await.unwrap();
    let mut trajectory = Trajectory {
        format: FORMAT.into(),
        task: task(),
        interpreter: Interpreter::default(),
        messages: vec![serde_json::json!({"role": "system"}), serde_json::json!({"role": "user"})],
        initial_messages: 2,
        steps: Vec::new(),
        end_type: EndType::StepCap,
        submission: None,
        policy: None,
    };
    for commands in steps {
        let mut actions = Vec::new();
        for (command, timeout_s) in *commands {
            let o = exec::run_command(&container, &trajectory.task, &trajectory.interpreter, command, *timeout_s)
                .await
                .unwrap();
            actions.push(Action {
                command: (*command).into(),
                timeout_s: *timeout_s,
                output: o.output,
                returncode: o.returncode,
                timed_out: o.timed_out,
                exception: None,
                omitted: None,
            });
        }
        trajectory.messages.push(serde_json::json!({"role": "assistant"}));
        trajectory.messages.push(serde_json::json!({"role": "user"}));
        let messages_end = trajectory.messages.len();
        trajectory.steps.push(Step { actions, messages_end, fingerprint: None });
        if fingerprints {
            let t = trajectory.steps.len() as u32;
            let mut measure =
                Fingerprinter::new(&container, &trajectory.task, &trajectory.interpreter, ChangeSet::new());
            let code = trajectory.steps.last().unwrap().actions.last().and_then(|a| a.returncode);
            let fp = measure.fingerprint(t, code).await.unwrap();
            trajectory.steps.last_mut().unwrap().fingerprint = Some(fp);
        }
    }
    container.remove().await.unwrap();
    trajectory.validate().unwrap();
    rt.clear_calls();
    trajectory
}

async fn replay_all(
    rt: &Arc<FakeRuntime>,
    trajectory: &Trajectory,
    mode: FingerprintMode,
) -> Result<Verdict<ReplayedSteps>, ReplayError> {
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let container = Container::start(runtime, &limits().spec(IMAGE)).await.unwrap();
    let normalizer = Normalizer::default();
    let out =
        replay_steps(&container, trajectory, 0, trajectory.length(), &normalizer, mode, ChangeSet::new(), &mut ())
            .await;
    container.remove().await.unwrap();
    out
}

fn reproduced(v: Result<Verdict<ReplayedSteps>, ReplayError>) -> ReplayedSteps {
    match v.unwrap() {
        Verdict::Reproduced(s) => s,
        Verdict::NonReplayable(n) => panic!("non-replayable: {n:?}"),
    }
}

fn non_replayable(v: Result<Verdict<ReplayedSteps>, ReplayError>) -> NonReplayable {
    match v.unwrap() {
        Verdict::Reproduced(s) => panic!("reproduced: {s:?}"),
        Verdict::NonReplayable(n) => n,
    }
}

#[tokio::test]
async fn an_exact_replay_runs_just_the_recorded_commands() {
    let rt = runtime();
    let t = record(&rt, &[&[("echo hi > b.txt", 10.0)], &[("cat b.txt", 10.0), ("ls", 5.0)], &[]], false).await;
    let steps = reproduced(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert_eq!(steps.levels, vec![CompareLevel::Exact; 3]);
    assert!(steps.fingerprints.is_empty());
    assert_eq!(rt.commands(), vec!["echo hi > b.txt", "cat b.txt", "ls"]);
    // No fingerprint recorded or asked for: no diff.
    assert_eq!(rt.count(Op::Diff), 0);
    // Each command with its recorded timeout, in the working directory, through the interpreter.
    let execs: Vec<(Vec<String>, String, Duration)> = rt
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Exec { argv, workdir, timeout, .. } => Some((argv, workdir, timeout)),
            _ => None,
        })
        .collect();
    assert_eq!(execs[2], (vec!["bash".into(), "-c".into(), "ls".into()], "/testbed".into(), Duration::from_secs(5)));
}

#[tokio::test]
async fn reordered_lines_match_at_sorted_lines_and_reordered_characters_match_at_no_level() {
    let rt = runtime();
    let t = record(&rt, &[&[("shuffle w x y z", 10.0)], &[("shuffle p q r", 10.0), ("echo ok", 10.0)]], false).await;
    let steps = reproduced(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    // The fake's call counter moved on since the recording: every shuffle differs in order only.
    assert_eq!(steps.levels, vec![CompareLevel::SortedLines, CompareLevel::SortedLines]);

    // A line whose characters are the same in another order is a changed line (issue 24): the
    // trajectory is non-replayable at that step, and nothing after it runs.
    let rt = runtime();
    let t = record(
        &rt,
        &[
            &[("shuffle w x y z", 10.0)],
            &[("echo same", 10.0), ("scramble abcd", 10.0)],
            &[("shuffle p q", 10.0), ("echo ok", 10.0)],
        ],
        false,
    )
    .await;
    let n = non_replayable(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert_eq!((n.step, n.level, n.mismatch), (2, CompareLevel::SortedLines, Some(MismatchKind::Observation)));
    assert_eq!(n.command.as_deref(), Some("scramble abcd"));
    assert_eq!(rt.commands(), vec!["shuffle w x y z", "echo same", "scramble abcd"]);
}

#[tokio::test]
async fn normalization_masks_what_varies_with_a_context() {
    let rt = runtime();
    let t = record(&rt, &[&[("date", 10.0)], &[("echo pid 1234", 10.0)]], false).await;
    let mut t2 = t.clone();
    t2.steps[1].actions[0].output = "pid 999\n".into();
    let steps = reproduced(replay_all(&rt, &t2, FingerprintMode::CompareOnly).await);
    assert_eq!(steps.levels, vec![CompareLevel::Exact, CompareLevel::Exact]);
    assert_ne!(t.steps[0].actions[0].output, "Tue Dec  1 11:15:01 UTC 2026\n");
}

#[tokio::test]
async fn a_random_token_is_non_replayable_at_its_step_and_nothing_after_runs() {
    let rt = runtime();
    let t = record(
        &rt,
        &[&[("echo start", 10.0)], &[("echo x > f; random", 10.0)], &[("echo later", 10.0)], &[("echo last", 10.0)]],
        false,
    )
    .await;
    let n = non_replayable(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert_eq!(n.step, 2);
    assert_eq!(n.level, CompareLevel::SortedLines);
    assert_eq!(n.mismatch, Some(MismatchKind::Observation));
    assert_eq!(n.command.as_deref(), Some("echo x > f; random"));
    assert!(n.reason.contains("output differs"), "{}", n.reason);
    assert_eq!(n.recorded_excerpt, t.steps[1].actions[0].output);
    assert_ne!(n.replayed_excerpt, n.recorded_excerpt);
    assert_eq!(rt.commands(), vec!["echo start", "echo x > f; random"]);
}

#[tokio::test]
async fn a_recorded_timeout_is_replayed_with_its_timeout_and_partial_output() {
    let rt = runtime();
    let t = record(&rt, &[&[("echo started; sleep 100", 5.0)], &[("echo after", 10.0)]], false).await;
    let a = &t.steps[0].actions[0];
    assert!(a.timed_out && a.returncode.is_none() && a.output == "started\n");
    let steps = reproduced(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert_eq!(steps.levels, vec![CompareLevel::Exact; 2]);
    assert!(rt.calls().contains(&Call::Exec {
        container: match &rt.calls()[0] {
            Call::Create { container, .. } => container.clone(),
            other => panic!("{other:?}"),
        },
        argv: vec!["bash".into(), "-c".into(), "echo started; sleep 100".into()],
        workdir: "/testbed".into(),
        timeout: Duration::from_secs(5),
    }));
    // A command that finished in the record but times out in the replay is a mismatch.
    let mut t2 = t.clone();
    t2.steps[0].actions[0].timed_out = false;
    t2.steps[0].actions[0].returncode = Some(0);
    let n = non_replayable(replay_all(&rt, &t2, FingerprintMode::CompareOnly).await);
    assert_eq!((n.step, n.level, n.mismatch), (1, CompareLevel::Exact, Some(MismatchKind::Timeout)));
    assert!(n.reason.contains("the replayed command timed out"), "{}", n.reason);
}

#[tokio::test]
async fn a_different_return_code_is_a_mismatch() {
    let rt = runtime();
    let mut t = record(&rt, &[&[("cat missing", 10.0)]], false).await;
    t.steps[0].actions[0].returncode = Some(0);
    let n = non_replayable(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert!(n.reason.contains("return code 0 recorded, 1 replayed"), "{}", n.reason);
    assert_eq!((n.mismatch, n.command.as_deref()), (Some(MismatchKind::Returncode), Some("cat missing")));
}

#[tokio::test]
async fn recorded_fingerprints_are_compared_and_missing_ones_recorded() {
    let rt = runtime();
    let steps: &[&[(&str, f64)]] = &[&[("echo x > new.py", 10.0)], &[("echo y >> a.py", 10.0)], &[("rm new.py", 10.0)]];
    let t = record(&rt, steps, true).await;
    assert_eq!(t.steps[0].fingerprint.as_ref().unwrap().changed_paths, vec!["/testbed/new.py"]);
    assert_eq!(t.steps[1].fingerprint.as_ref().unwrap().git_status, " M a.py\n?? new.py\n");
    assert_eq!(t.steps[2].fingerprint.as_ref().unwrap().changed_paths, vec!["/testbed/a.py"]);
    let replayed = reproduced(replay_all(&rt, &t, FingerprintMode::CompareOnly).await);
    assert_eq!(replayed.levels, vec![CompareLevel::Exact; 3]);
    assert_eq!(rt.count(Op::Diff), 3);
    // git diff and git status ran, in one exec a step, and are not steps.
    let commands = rt.commands();
    let git = |c: &&String| c.starts_with(&format!("{GIT_DIFF_COMMAND}\necho {GIT_STATE_SEPARATOR}-"));
    assert_eq!(commands.iter().filter(git).count(), 3);
    assert!(commands.iter().filter(git).all(|c| c.ends_with(&format!("\n{GIT_STATUS_COMMAND}"))));
    assert!(!commands.iter().any(|c| c.as_str() == GIT_DIFF_COMMAND || c.as_str() == GIT_STATUS_COMMAND));

    // A trajectory without fingerprints: compared nowhere, recorded everywhere when asked.
    let mut bare = t.clone();
    for s in &mut bare.steps {
        s.fingerprint = None;
    }
    rt.clear_calls();
    let replayed = reproduced(replay_all(&rt, &bare, FingerprintMode::RecordMissing).await);
    let recorded: Vec<Fingerprint> = t.steps.iter().map(|s| s.fingerprint.clone().unwrap()).collect();
    assert_eq!(replayed.fingerprints.values().cloned().collect::<Vec<_>>(), recorded);
    assert_eq!(replayed.fingerprints.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
}

/// An edit of a recorded fingerprint.
type Edit = Box<dyn Fn(&mut Fingerprint)>;

#[tokio::test]
async fn each_kind_of_fingerprint_mismatch_is_found_at_its_step() {
    let rt = runtime();
    let t = record(&rt, &[&[("echo x > new.py", 10.0)], &[("echo y >> a.py", 10.0)]], true).await;
    let edits: Vec<(&str, MismatchKind, Edit)> = vec![
        (
            "only in the replay: /testbed/a.py, /testbed/new.py",
            MismatchKind::ChangedPaths,
            Box::new(|f| f.changed_paths.clear()),
        ),
        ("return code 1 recorded, 0 replayed", MismatchKind::Returncode, Box::new(|f| f.returncode = Some(1))),
        ("git diff differs", MismatchKind::GitDiff, Box::new(|f| f.git_diff.push_str("+more\n"))),
        ("git status differs", MismatchKind::GitStatus, Box::new(|f| f.git_status = " M a.py\n".into())),
    ];
    for (expected, kind, edit) in edits {
        let mut t2 = t.clone();
        edit(t2.steps[1].fingerprint.as_mut().unwrap());
        let n = non_replayable(replay_all(&rt, &t2, FingerprintMode::CompareOnly).await);
        assert_eq!((n.step, n.level), (2, CompareLevel::Fingerprint), "{expected}");
        assert!(n.reason.contains(expected), "{expected}: {}", n.reason);
        // The state after step 2 differs: its command is the one recorded with the report.
        assert_eq!((n.mismatch, n.command.as_deref()), (Some(kind), Some("echo y >> a.py")), "{expected}");
    }
}

#[tokio::test]
async fn from_a_snapshot_paths_stay_relative_to_the_task_image() {
    let rt = runtime();
    let steps: &[&[(&str, f64)]] = &[
        &[("echo x > new.py", 10.0)],
        &[("echo tmp > /tmp/tmpab12cd34", 10.0)],
        &[("rm new.py; echo z > z.py", 10.0)],
    ];
    let t = record(&rt, steps, true).await;
    assert_eq!(t.steps[2].fingerprint.as_ref().unwrap().changed_paths, vec!["/testbed/z.py"]);
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let normalizer = Normalizer::default();
    // Replay to h_2 and commit it with its changes.
    let first = Container::start(runtime.clone(), &limits().spec(IMAGE)).await.unwrap();
    let mut replay = Replay::new(&first, &t, &normalizer, FingerprintMode::CompareOnly, 0, ChangeSet::new()).unwrap();
    assert!(replay.step().await.unwrap().is_none());
    assert!(replay.step().await.unwrap().is_none());
    let changes = replay.changes().await.unwrap();
    assert_eq!(replay.changes().await.unwrap(), changes, "measured once per step");
    let label = changes.to_label();
    // The temporary file is below an excluded directory: only the directory is kept.
    assert!(label.contains("A /testbed/new.py\n") && label.contains("A /tmp\n"), "{label}");
    assert!(!label.contains("tmpab12cd34"), "{label}");
    first.commit("snap:2", &BTreeMap::new()).await.unwrap();
    first.remove().await.unwrap();
    // From the snapshot, step 3 deletes what step 1 added: no change at all for new.py.
    let second = Container::start(runtime, &limits().spec("snap:2")).await.unwrap();
    let base = ChangeSet::from_label(&label).unwrap();
    let out = replay_steps(&second, &t, 2, 3, &normalizer, FingerprintMode::CompareOnly, base, &mut ()).await;
    let steps = reproduced(out);
    assert_eq!(steps.levels, vec![CompareLevel::Exact]);
    second.remove().await.unwrap();
}

#[test]
fn change_sets_compose_layers() {
    let c = |path: &str, kind| Change { path: path.into(), kind };
    let base = ChangeSet::from_changes(&[
        c("/testbed", ChangeKind::Modified),
        c("/testbed/added", ChangeKind::Added),
        c("/testbed/gone", ChangeKind::Deleted),
        c("/testbed/mod", ChangeKind::Modified),
        c("/testbed/dir", ChangeKind::Added),
        c("/testbed/dir/f", ChangeKind::Added),
        c("/root/.cache", ChangeKind::Added),
        c("/root/.cache/pip/a", ChangeKind::Added),
    ]);
    // Below an excluded path nothing is kept; the excluded path is.
    assert!(base.iter().any(|(p, _)| p == "/root/.cache"));
    assert!(!base.iter().any(|(p, _)| p == "/root/.cache/pip/a"));
    let next = base.then(&[
        c("/testbed/added", ChangeKind::Deleted),
        c("/testbed/gone", ChangeKind::Added),
        c("/testbed/mod", ChangeKind::Modified),
        c("/testbed/dir", ChangeKind::Deleted),
        c("/testbed/new", ChangeKind::Added),
    ]);
    let listed: Vec<(&str, ChangeKind)> = next.iter().collect();
    assert_eq!(
        listed,
        vec![
            ("/root/.cache", ChangeKind::Added),
            ("/testbed", ChangeKind::Modified),
            ("/testbed/gone", ChangeKind::Modified),
            ("/testbed/mod", ChangeKind::Modified),
            ("/testbed/new", ChangeKind::Added),
        ]
    );
    assert_eq!(ChangeSet::from_label(&next.to_label()).unwrap(), next);
    assert!(ChangeSet::from_label("X /a").unwrap_err().contains("line 1"));
    assert!(ChangeSet::from_label("A relative").unwrap_err().contains("not absolute"));
    assert!(ChangeSet::from_label("A").unwrap_err().contains("line 1"));
}

#[tokio::test]
async fn bad_ranges_and_runtime_errors_are_errors_not_verdicts() {
    let rt = runtime();
    let t = record(&rt, &[&[("echo a", 10.0)], &[("echo b", 10.0)]], false).await;
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let container = Container::start(runtime, &limits().spec(IMAGE)).await.unwrap();
    let n = Normalizer::default();
    let mode = FingerprintMode::CompareOnly;
    let range = replay_steps(&container, &t, 0, 3, &n, mode, ChangeSet::new(), &mut ()).await;
    assert!(matches!(range, Err(ReplayError::Range { to: 3, length: 2, .. })), "{range:?}");
    let range = replay_steps(&container, &t, 2, 1, &n, mode, ChangeSet::new(), &mut ()).await;
    assert!(matches!(range, Err(ReplayError::Range { .. })));
    rt.fail_next(Op::Exec, RuntimeError::Gone(container.id().into()));
    let gone = replay_steps(&container, &t, 0, 2, &n, mode, ChangeSet::new(), &mut ()).await;
    assert!(matches!(gone, Err(ReplayError::Runtime(RuntimeError::Gone(_)))), "{gone:?}");
    container.remove().await.unwrap();
}

/// Records the steps it is called at.
struct Seen(Vec<u32>);

impl OnStep for Seen {
    fn reached<'r>(&'r mut self, replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>> {
        self.0.push(replay.t());
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn on_step_is_called_after_every_reproduced_step() {
    let rt = runtime();
    let t = record(&rt, &[&[("echo a", 10.0)], &[("echo b", 10.0)], &[("echo c", 10.0)]], false).await;
    let runtime: Arc<dyn ContainerRuntime> = rt.clone();
    let container = Container::start(runtime, &limits().spec(IMAGE)).await.unwrap();
    let mut seen = Seen(Vec::new());
    let n = Normalizer::default();
    let out = replay_steps(&container, &t, 1, 3, &n, FingerprintMode::CompareOnly, ChangeSet::new(), &mut seen).await;
    assert_eq!(reproduced(out).levels.len(), 2);
    assert_eq!(seen.0, vec![2, 3]);
    container.remove().await.unwrap();
}
