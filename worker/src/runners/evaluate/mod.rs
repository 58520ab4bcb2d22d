//! Judging a submitted patch with its task's evaluator (docs/method.md §6).
//!
//! [`evaluate_command`] judges a patch for a task whose evaluator is
//! [`Evaluator::Command`]:
//!
//! 1. An empty patch (nothing but whitespace, [`is_empty_patch`]) is unresolved without any
//!    container; the caller counts it as `Judged::EmptyPatch`.
//! 2. Otherwise a **fresh** container of the task image starts (the caller's [`ContainerSpec`]:
//!    network disabled, limits, labels; its image is replaced by the task's), the patch is written
//!    to [`PATCH_PATH`], outside the working directory, and applied in the task's working
//!    directory as the SWE-bench harness does, trying [`ApplyMethod::CASCADE`] in order and
//!    stopping at the first that exits 0: `git apply --verbose`, `git apply --verbose --3way`,
//!    `git apply --verbose --reject`, `patch --batch --fuzz=5 -p1 -i`. Before the `--reject` and
//!    the `patch` attempts the tree is reset with [`RESET_COMMAND`] (`git reset --hard -q && git
//!    clean -fdq`: back to the committed `HEAD`, which is the task image's working tree), since a
//!    failed `--3way` leaves conflicts and a failed `--reject` partial changes; a plain
//!    `git apply` that fails changes nothing. A patch no method applies is **unresolved** — a
//!    verdict, not a failure.
//! 3. The evaluator's `command` runs through the one exec path (`bash -c`, the task's working
//!    directory, its `timeout_s`): resolved iff it exits 0; a timeout is unresolved.
//! 4. The container is removed whatever happened (the [`Container`] guard removes it if the
//!    future is dropped).
//!
//! A runtime error at any point, or a tree that cannot be reset, is an
//! [`EvalFailure::Infrastructure`]: the evaluation has no outcome and is run again.
//!
//! A task whose evaluator is [`Evaluator::Swebench`] is judged by the official SWE-bench harness
//! instead, run as a child process ([`swebench`], with the worker's [`SwebenchHarness::from_env`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use vcurve_record::{Evaluator, Interpreter, Task};

use crate::runners::agent::last_bytes as tail;
use crate::sandbox::container::{Container, ContainerRuntime, ContainerSpec, RuntimeError};
use crate::sandbox::exec::{Observed, run_command};

pub mod swebench;
mod verdict;

pub use swebench::{SwebenchHarness, evaluate_swebench};
pub use verdict::{ApplyMethod, EvalFailure, OUTPUT_TAIL_BYTES, PATCH_PATH, Verdict, is_empty_patch};

/// The timeout of each apply attempt and reset, in seconds.
pub const APPLY_TIMEOUT_S: f64 = 300.0;
/// How the working tree is reset between apply attempts.
pub const RESET_COMMAND: &str = "git reset --hard -q && git clean -fdq";

/// Judge `patch` for `task` (see the module docs). `base` gives the container's limits and
/// labels; its image is replaced by the task's. A SWE-bench task goes to [`evaluate_swebench`]
/// with the worker's `swebench` harness; `base` does not apply to the harness's container.
pub async fn evaluate_command(
    runtime: Arc<dyn ContainerRuntime>,
    task: &Task,
    patch: &str,
    base: &ContainerSpec,
    swebench: &SwebenchHarness,
    cancel: CancellationToken,
) -> Result<Verdict, EvalFailure> {
    if is_empty_patch(patch) {
        return Ok(Verdict::unresolved(String::new()));
    }
    let (command, timeout_s) = match &task.evaluator {
        Evaluator::Command { command, timeout_s } => (command.as_str(), *timeout_s),
        Evaluator::Swebench { .. } => {
            return evaluate_swebench(swebench, runtime, task, patch, cancel).await;
        }
    };
    if cancel.is_cancelled() {
        return Err(EvalFailure::Cancelled);
    }
    // The evaluator's container has no network, whatever the agent's had: a verdict does not
    // depend on what the network serves that day.
    let spec = ContainerSpec {
        image: task.image.clone(),
        network: crate::sandbox::container::ContainerNetwork::None,
        exec_env: BTreeMap::new(),
        ..base.clone()
    };
    // Creation is not raced with `cancel`: a container created by a dropped future would have no
    // guard to remove it.
    let container = Container::start(runtime, &spec)
        .await
        .map_err(|e| EvalFailure::Infrastructure(format!("cannot start a container of {}: {e}", task.image)))?;
    let judged = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(EvalFailure::Cancelled),
        r = judge(&container, task, patch, command, timeout_s) => r,
    };
    if matches!(judged, Err(EvalFailure::Cancelled)) {
        // Dropping the guard removes the container in the background: return promptly.
        drop(container);
        return judged;
    }
    let id = container.id().to_owned();
    if let Err(e) = container.remove().await {
        // The verdict stands; the worker reaps what it left behind at its next start.
        tracing::warn!(container = %id, task = %task.id, error = %e, "cannot remove an evaluation container");
    }
    judged
}

async fn judge(
    container: &Container,
    task: &Task,
    patch: &str,
    command: &str,
    timeout_s: u32,
) -> Result<Verdict, EvalFailure> {
    let infra = |what: String| move |e: RuntimeError| EvalFailure::Infrastructure(format!("{what}: {e}"));
    container
        .put_file(PATCH_PATH, patch.as_bytes(), 0o644)
        .await
        .map_err(infra(format!("cannot write {PATCH_PATH}")))?;
    let bash = Interpreter::default();
    let mut last: Option<(ApplyMethod, Observed)> = None;
    let mut applied = None;
    for method in ApplyMethod::CASCADE {
        if method.resets_first() {
            let reset = run_command(container, task, &bash, RESET_COMMAND, APPLY_TIMEOUT_S)
                .await
                .map_err(infra(format!("cannot reset the working tree {}", task.workdir)))?;
            if reset.returncode != Some(0) {
                return Err(EvalFailure::Infrastructure(format!(
                    "cannot reset the working tree {} before `{}` ({}): {}",
                    task.workdir,
                    method.command(),
                    ended(&reset),
                    tail(&reset.output, 1024).trim_end()
                )));
            }
        }
        let observed = run_command(container, task, &bash, &method.command(), APPLY_TIMEOUT_S)
            .await
            .map_err(infra(format!("cannot run `{}`", method.command())))?;
        if observed.returncode == Some(0) && !observed.timed_out {
            applied = Some(method);
            break;
        }
        last = Some((method, observed));
    }
    let Some(method) = applied else {
        let output = last.map_or(String::new(), |(method, o)| {
            format!("no method applied the patch; the last, `{}`, {}:\n{}", method.command(), ended(&o), o.output)
        });
        return Ok(Verdict::unresolved(tail(&output, OUTPUT_TAIL_BYTES).to_owned()));
    };
    let observed = run_command(container, task, &bash, command, f64::from(timeout_s))
        .await
        .map_err(infra(format!("cannot run the evaluator command {command:?}")))?;
    Ok(Verdict {
        resolved: observed.returncode == Some(0) && !observed.timed_out,
        applied: Some(method),
        returncode: observed.returncode,
        timed_out: observed.timed_out,
        output_tail: tail(&observed.output, OUTPUT_TAIL_BYTES).to_owned(),
        infra_failure: None,
    })
}

fn ended(o: &Observed) -> String {
    match (o.timed_out, o.returncode) {
        (true, _) => "timed out".into(),
        (false, Some(code)) => format!("exited {code}"),
        (false, None) => "did not finish".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::sandbox::container::double::{Call, FakeFs, FakeRuntime, Op};
    use crate::sandbox::container::{ExecOutput, ExecRequest};

    const TESTS: &str = "run-tests";

    /// A fake git: the patch's `first=<method>` line names the first method that applies it
    /// (`first=none`: none does); `fix=<text>` is what applying writes to /testbed/fix. A failed
    /// `--3way` or `--reject` leaves /testbed/partial; the reset removes both. The tests pass iff
    /// the fix is `right` and nothing partial is left; `slow-tests` times out.
    fn git(fs: &mut FakeFs, request: &ExecRequest) -> ExecOutput {
        let command = request.argv.last().cloned().unwrap_or_default();
        let done = |code: i64, output: &str| ExecOutput {
            output: output.as_bytes().to_vec(),
            exit_code: Some(code),
            timed_out: false,
        };
        let patch = fs.read_string(PATCH_PATH).unwrap_or_default();
        let field = |name: &str| {
            patch.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_default().to_string()
        };
        if let Some(i) = ApplyMethod::CASCADE.iter().position(|m| m.command() == command) {
            let first = ApplyMethod::CASCADE.iter().position(|m| m.as_str() == field("first"));
            if first.is_some_and(|f| i >= f) {
                fs.write("/testbed/fix", field("fix"));
                return done(0, "Applied patch cleanly.\n");
            }
            if matches!(ApplyMethod::CASCADE[i], ApplyMethod::GitApply3Way | ApplyMethod::GitApplyReject) {
                fs.write("/testbed/partial", "<<<<<<<");
            }
            return done(1, &format!("error: {} does not apply\n", ApplyMethod::CASCADE[i]));
        }
        if command == RESET_COMMAND {
            if fs.exists("/testbed/no-reset") {
                return done(128, "fatal: not a git repository\n");
            }
            fs.remove("/testbed/partial");
            fs.remove("/testbed/fix");
            return done(0, "");
        }
        if command == TESTS {
            let right = fs.read_string("/testbed/fix").as_deref() == Some("right") && !fs.exists("/testbed/partial");
            let noise = "x".repeat(10_000);
            return if right { done(0, &format!("{noise}\nOK\n")) } else { done(1, &format!("{noise}\nFAILED\n")) };
        }
        if command == "slow-tests" {
            return ExecOutput { output: b"running".to_vec(), exit_code: None, timed_out: true };
        }
        done(127, "command not found\n")
    }

    fn runtime() -> Arc<FakeRuntime> {
        let runtime = FakeRuntime::with_handler(git);
        runtime.add_image("task:calc", [("/testbed/calc.py", "x = 1\n")]);
        Arc::new(runtime)
    }

    fn task(command: &str) -> Task {
        Task {
            id: "calc-1".into(),
            image: "task:calc".into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Command { command: command.into(), timeout_s: 60 },
            problem_statement: None,
        }
    }

    fn harness() -> SwebenchHarness {
        SwebenchHarness::from_env()
    }

    fn base() -> ContainerSpec {
        ContainerSpec {
            image: "ignored".into(),
            memory_bytes: 1 << 30,
            pids_limit: 256,
            labels: BTreeMap::from([("vcurve.managed".to_string(), "1".to_string())]),
            network: Default::default(),
            exec_env: BTreeMap::new(),
        }
    }

    async fn evaluate(runtime: &Arc<FakeRuntime>, task: &Task, patch: &str) -> Result<Verdict, EvalFailure> {
        evaluate_command(runtime.clone(), task, patch, &base(), &SwebenchHarness::from_env(), CancellationToken::new())
            .await
    }

    fn patch(first: &str, fix: &str) -> String {
        format!("diff --git a/calc.py b/calc.py\nfirst={first}\nfix={fix}\n")
    }

    #[tokio::test]
    async fn an_empty_patch_is_unresolved_without_a_container() {
        let runtime = runtime();
        for empty in ["", "  \n\t\n"] {
            assert!(is_empty_patch(empty));
            let verdict = evaluate(&runtime, &task(TESTS), empty).await.unwrap();
            assert_eq!(verdict, Verdict::unresolved(String::new()));
        }
        // Even for an evaluator this worker cannot run.
        let mut swebench = task(TESTS);
        swebench.evaluator = Evaluator::Swebench { instance_id: "django__django-1".into(), instance: None };
        assert!(!evaluate(&runtime, &swebench, "").await.unwrap().resolved);
        assert_eq!(runtime.calls(), vec![]);
        assert!(!is_empty_patch(" x "));
    }

    #[tokio::test]
    async fn the_right_fix_resolves_in_a_fresh_container_that_is_removed() {
        let runtime = runtime();
        let verdict = evaluate(&runtime, &task(TESTS), &patch("git_apply", "right")).await.unwrap();
        assert!(verdict.resolved);
        assert_eq!(
            (verdict.applied, verdict.returncode, verdict.timed_out),
            (Some(ApplyMethod::GitApply), Some(0), false)
        );
        assert!(verdict.output_tail.ends_with("x\nOK\n"));
        assert_eq!(verdict.output_tail.len(), OUTPUT_TAIL_BYTES);
        let calls = runtime.calls();
        assert!(
            matches!(&calls[0], Call::Create { image, labels, .. } if image == "task:calc" && labels == &base().labels),
            "{calls:?}"
        );
        assert!(matches!(&calls[1], Call::PutFile { path, .. } if path == PATCH_PATH), "{calls:?}");
        let Call::Exec { argv, workdir, timeout, .. } = &calls[3] else { panic!("{calls:?}") };
        assert_eq!(
            (argv.as_slice(), workdir.as_str()),
            (&["bash".to_string(), "-c".into(), TESTS.into()][..], "/testbed")
        );
        assert_eq!(*timeout, Duration::from_secs(60));
        assert!(matches!(calls.last(), Some(Call::Remove { .. })), "{calls:?}");
        assert_eq!(runtime.running(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn the_apply_cascade_runs_in_order_resetting_after_attempts_that_leave_changes() {
        let runtime = runtime();
        let verdict = evaluate(&runtime, &task(TESTS), &patch("patch", "right")).await.unwrap();
        assert_eq!(verdict.applied, Some(ApplyMethod::Patch));
        assert!(verdict.resolved, "the partial changes of failed attempts were reset: {verdict:?}");
        let expected: Vec<String> = vec![
            ApplyMethod::GitApply.command(),
            ApplyMethod::GitApply3Way.command(),
            RESET_COMMAND.into(),
            ApplyMethod::GitApplyReject.command(),
            RESET_COMMAND.into(),
            ApplyMethod::Patch.command(),
            TESTS.into(),
        ];
        assert_eq!(runtime.commands(), expected);
        assert_eq!(ApplyMethod::Patch.command(), "patch --batch --fuzz=5 -p1 -i /tmp/vcurve/patch.diff");

        let runtime = self::runtime();
        let verdict = evaluate(&runtime, &task(TESTS), &patch("git_apply_3way", "right")).await.unwrap();
        assert_eq!((verdict.applied, verdict.resolved), (Some(ApplyMethod::GitApply3Way), true));
        assert_eq!(
            runtime.commands(),
            vec![ApplyMethod::GitApply.command(), ApplyMethod::GitApply3Way.command(), TESTS.into()]
        );
    }

    #[tokio::test]
    async fn a_patch_nothing_applies_a_wrong_fix_and_a_timeout_are_unresolved_verdicts() {
        let runtime = runtime();
        let verdict = evaluate(&runtime, &task(TESTS), &patch("none", "right")).await.unwrap();
        assert_eq!((verdict.resolved, verdict.applied, verdict.returncode), (false, None, None));
        assert!(verdict.output_tail.contains("no method applied the patch; the last, `patch --batch"), "{verdict:?}");
        assert!(!runtime.commands().contains(&TESTS.to_string()), "the tests do not run");
        assert_eq!(runtime.running(), Vec::<String>::new());

        let verdict = evaluate(&runtime, &task(TESTS), &patch("git_apply", "wrong")).await.unwrap();
        assert_eq!(
            (verdict.resolved, verdict.applied, verdict.returncode),
            (false, Some(ApplyMethod::GitApply), Some(1))
        );
        assert!(verdict.output_tail.ends_with("FAILED\n"));

        let verdict = evaluate(&runtime, &task("slow-tests"), &patch("git_apply", "right")).await.unwrap();
        assert_eq!((verdict.resolved, verdict.returncode, verdict.timed_out), (false, None, true));
        assert_eq!(runtime.running(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn runtime_errors_are_infrastructure_failures_and_the_container_is_removed() {
        for (op, at) in [
            (Op::Create, "cannot start a container of task:calc"),
            (Op::PutFile, "cannot write"),
            (Op::Exec, "cannot run `git apply --verbose"),
        ] {
            let runtime = runtime();
            runtime.fail_next(op, RuntimeError::Engine("engine down".into()));
            match evaluate(&runtime, &task(TESTS), &patch("git_apply", "right")).await {
                Err(EvalFailure::Infrastructure(reason)) => {
                    assert!(reason.contains(at) && reason.contains("engine down"), "{op:?}: {reason}")
                }
                other => panic!("{op:?}: expected an infrastructure failure, got {other:?}"),
            }
            assert_eq!(runtime.running(), Vec::<String>::new(), "{op:?}");
        }
        // A tree that cannot be reset.
        let runtime2 = Arc::new(FakeRuntime::with_handler(git));
        runtime2.add_image("task:calc", [("/testbed/no-reset", "")]);
        match evaluate(&runtime2, &task(TESTS), &patch("patch", "right")).await {
            Err(EvalFailure::Infrastructure(reason)) => {
                assert!(
                    reason.contains("cannot reset the working tree /testbed before `git apply --verbose --reject"),
                    "{reason}"
                );
                assert!(reason.contains("exited 128") && reason.contains("not a git repository"), "{reason}");
            }
            other => panic!("expected an infrastructure failure, got {other:?}"),
        }
        assert_eq!(runtime2.running(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_removal_that_fails_does_not_undo_the_verdict() {
        let runtime = runtime();
        runtime.fail_next(Op::Remove, RuntimeError::Engine("busy".into()));
        assert!(evaluate(&runtime, &task(TESTS), &patch("git_apply", "right")).await.unwrap().resolved);
    }

    #[tokio::test]
    async fn swebench_without_its_row_is_an_invalid_task_and_cancel_stops_the_evaluation() {
        let runtime = runtime();
        let mut swebench = task(TESTS);
        swebench.evaluator = Evaluator::Swebench { instance_id: "django__django-1".into(), instance: None };
        match evaluate(&runtime, &swebench, &patch("git_apply", "right")).await {
            Err(EvalFailure::InvalidTask(reason)) => {
                assert!(
                    reason.starts_with(
                        "task calc-1: its SWE-bench evaluator (instance django__django-1) carries no dataset row"
                    ),
                    "{reason}"
                );
                assert!(reason.contains("launch the study from a SWE-bench dataset file"), "{reason}");
            }
            other => panic!("expected InvalidTask, got {other:?}"),
        }
        assert_eq!(runtime.calls(), vec![]);

        let cancel = CancellationToken::new();
        let fire = cancel.clone();
        let runtime = Arc::new(FakeRuntime::with_handler(move |fs, request| {
            // Cancel while the first apply attempt runs.
            fire.cancel();
            git(fs, request)
        }));
        runtime.add_image("task:calc", [("/testbed/calc.py", "")]);
        let result =
            evaluate_command(runtime.clone(), &task(TESTS), &patch("git_apply", "right"), &base(), &harness(), cancel)
                .await;
        assert_eq!(result, Err(EvalFailure::Cancelled));
        assert!(!runtime.commands().contains(&TESTS.to_string()));
        for _ in 0..100 {
            if runtime.running().is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(runtime.running(), Vec::<String>::new(), "the guard removed the container");

        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let runtime = self::runtime();
        let result = evaluate_command(
            runtime.clone(),
            &task(TESTS),
            &patch("git_apply", "right"),
            &base(),
            &harness(),
            cancelled,
        )
        .await;
        assert_eq!(result, Err(EvalFailure::Cancelled));
        assert_eq!(runtime.calls(), vec![]);
    }
}
