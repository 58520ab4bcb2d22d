//! The `swebench` evaluator through the worker's path ([`evaluate_swebench`], as
//! `evaluate_command` dispatches it) with the real harness, `swebench==5.0.2`, in real containers.
//!
//! The instance is the test task calc-1 as a SWE-bench v5 row
//! (`agents/tests/fixtures/swebench/calc-1.json`), its image the local task image named by
//! `VCURVE_TEST_TASK_IMAGE` tagged under the harness's naming rule
//! (`swebench/sweb.eval.x86_64.vcurve_1776_calc-1:<this test's tag>`, removed at the end); the
//! patches are the scripted agent's correct and flawed fixes (`calc-1-correct.diff`,
//! `calc-1-flawed.diff`, which the agents' tests check against `scripted.FIXES`). The harness runs
//! under `VCURVE_SWEBENCH_PYTHON` (else `.venv/swebench/bin/python` in the repository): create it
//! with `scripts/swebench-venv`. Like the other `docker_*` tests these fail, saying what to do,
//! when the image or the environment is missing; `scripts/test` provides both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcurve_testkit::require::Service;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use vcurve_record::{Evaluator, Task};
use vcurve_worker::ContainerRuntime;
use vcurve_worker::runners::evaluate::swebench::{SwebenchHarness, container_name, evaluate_swebench};
use vcurve_worker::runners::evaluate::{ApplyMethod, EvalFailure, Verdict};

const IMAGE_VAR: &str = "VCURVE_TEST_TASK_IMAGE";
const PYTHON_VAR: &str = "VCURVE_SWEBENCH_PYTHON";
const HARNESS_IMAGE: &str = "swebench/sweb.eval.x86_64.vcurve_1776_calc-1";
const INSTANCE: &str = "vcurve__calc-1";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the worker crate sits in the repository").to_path_buf()
}

fn fixture(name: &str) -> String {
    let path = repo().join("agents/tests/fixtures/swebench").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn task_image() -> String {
    match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.is_empty() => image,
        _ => panic!(
            "{IMAGE_VAR} is not set: these tests need the local image of the test task calc-1. Build it with \
             `deploy/images/build` and set {IMAGE_VAR} to the tag it prints as task=TAG, or run the tests \
             through `scripts/test`, which does both"
        ),
    }
}

/// The harness, its log folders in a temporary folder of the test's.
fn harness(logs: &Path) -> SwebenchHarness {
    let python = std::env::var_os(PYTHON_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/swebench/bin/python"));
    assert!(
        python.is_file(),
        "no python with swebench 5.0.2 at {} ({PYTHON_VAR} unset or wrong): run scripts/swebench-venv and set \
         {PYTHON_VAR} to the path it prints, or run the tests through scripts/test",
        python.display()
    );
    SwebenchHarness {
        log_root: logs.to_path_buf(),
        ..SwebenchHarness::new(python, repo().join("agents")).with_test_timeout(300)
    }
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("the docker CLI runs");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The task image under the harness's name, with a tag of this test's; the tag is removed when
/// dropped (the task image keeps its own).
struct HarnessImage(String);

impl HarnessImage {
    fn new(what: &str) -> HarnessImage {
        let tag = format!("{HARNESS_IMAGE}:rust-{what}-{}", std::process::id());
        docker(&["tag", &task_image(), &tag]);
        HarnessImage(tag)
    }

    /// calc-1 whose evaluator is the harness for its row, with this image.
    fn task(&self) -> Task {
        let mut row: Value = serde_json::from_str(&fixture("calc-1.json")).expect("the row is JSON");
        row["image"] = self.0.clone().into();
        Task {
            id: "calc-1-swebench".into(),
            image: self.0.clone(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Swebench { instance_id: INSTANCE.into(), instance: Some(row) },
            problem_statement: None,
        }
    }
}

impl Drop for HarnessImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}

/// The harness's containers of this instance whose run id starts with `prefix`.
fn containers(prefix: &str) -> Vec<String> {
    let name = container_name(INSTANCE, prefix);
    docker(&["ps", "-a", "--format", "{{.Names}}", "--filter", &format!("name={name}")])
        .lines()
        .filter(|n| n.starts_with(&name))
        .map(str::to_owned)
        .collect()
}

fn digest_prefix(patch: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(patch.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("vcurve-{}-", &hex[..16])
}

async fn runtime() -> Arc<dyn ContainerRuntime> {
    Arc::new(vcurve_worker::DockerRuntime::connect().await.expect("the Docker Engine answers"))
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).expect("the log root exists").next().is_none()
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_swebench_resolves_the_correct_fix_and_not_the_flawed_one() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Swebench);
    let image = HarnessImage::new("verdicts");
    let task = image.task();
    let logs = tempfile::tempdir().expect("a temporary folder");
    let harness = harness(logs.path());
    harness.check().await.unwrap_or_else(|e| panic!("the harness's environment: {e}"));
    let runtime = runtime().await;
    let (correct, flawed) = (fixture("calc-1-correct.diff"), fixture("calc-1-flawed.diff"));
    // Concurrently: two evaluations of one instance never share a container name.
    let (resolved, unresolved) = tokio::join!(
        evaluate_swebench(&harness, runtime.clone(), &task, &correct, CancellationToken::new()),
        evaluate_swebench(&harness, runtime.clone(), &task, &flawed, CancellationToken::new()),
    );
    let resolved: Verdict = resolved.unwrap_or_else(|e| panic!("the correct fix's evaluation failed: {e}"));
    assert!(resolved.resolved, "{resolved:#?}");
    assert_eq!(
        (resolved.applied, resolved.returncode, resolved.timed_out),
        (Some(ApplyMethod::GitApply), Some(0), false)
    );
    assert!(resolved.output_tail.contains("Ran 7 tests") && resolved.output_tail.contains("OK"), "{resolved:#?}");

    let unresolved: Verdict = unresolved.unwrap_or_else(|e| panic!("the flawed fix's evaluation failed: {e}"));
    assert!(!unresolved.resolved, "{unresolved:#?}");
    assert_eq!((unresolved.applied, unresolved.returncode), (Some(ApplyMethod::GitApply), Some(1)));
    assert!(unresolved.output_tail.contains("FAIL: test_division_chains"), "{unresolved:#?}");

    assert_eq!(containers("vcurve-"), Vec::<String>::new(), "the harness's containers are removed");
    assert!(empty(logs.path()), "the log folders are removed");
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_swebench_a_patch_that_does_not_apply_is_unresolved_and_a_missing_image_is_no_outcome() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Swebench);
    let image = HarnessImage::new("apply");
    let task = image.task();
    let logs = tempfile::tempdir().expect("a temporary folder");
    let harness = harness(logs.path());
    let runtime = runtime().await;
    let foreign = "diff --git a/calc/nothing.py b/calc/nothing.py\n--- a/calc/nothing.py\n+++ b/calc/nothing.py\n\
                   @@ -1,2 +1,2 @@\n-this line\n+that line\n is not there\n";
    let verdict = evaluate_swebench(&harness, runtime.clone(), &task, foreign, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("a patch that does not apply is a verdict, not {e}"));
    assert_eq!((verdict.resolved, verdict.applied, verdict.returncode), (false, None, None), "{verdict:#?}");
    assert!(verdict.output_tail.contains("the patch does not apply (Patch Apply Failed)"), "{verdict:#?}");

    let mut gone = task.clone();
    let missing = format!("{HARNESS_IMAGE}:missing-{}", std::process::id());
    if let Evaluator::Swebench { instance: Some(row), .. } = &mut gone.evaluator {
        row["image"] = missing.clone().into();
    }
    match evaluate_swebench(&harness, runtime.clone(), &gone, foreign, CancellationToken::new()).await {
        Err(EvalFailure::Infrastructure(reason)) => {
            assert!(
                reason.starts_with("task calc-1-swebench: the SWE-bench harness could not evaluate instance"),
                "{reason}"
            );
            assert!(
                reason.contains(&format!("the image {missing} of vcurve__calc-1 is not on this Docker Engine")),
                "{reason}"
            );
        }
        other => panic!("expected an infrastructure failure, got {other:?}"),
    }
    assert_eq!(containers(&digest_prefix(foreign)), Vec::<String>::new());
    assert!(empty(logs.path()));
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_swebench_cancel_kills_the_harness_and_removes_its_container() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Swebench);
    let image = HarnessImage::new("cancel");
    let task = image.task();
    let logs = tempfile::tempdir().expect("a temporary folder");
    let harness = harness(logs.path());
    let runtime = runtime().await;
    // A patch of its own, so that its containers are told apart from the other tests'.
    let patch = format!("{}\n", fixture("calc-1-correct.diff"));
    let prefix = digest_prefix(&patch);
    let cancel = CancellationToken::new();
    let watch = {
        let (cancel, prefix) = (cancel.clone(), prefix.clone());
        tokio::spawn(async move {
            let start = Instant::now();
            while containers(&prefix).is_empty() {
                assert!(start.elapsed() < Duration::from_secs(120), "the harness made no container within 120 s");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let result = evaluate_swebench(&harness, runtime.clone(), &task, &patch, cancel).await;
    watch.await.expect("the watcher saw the container");
    assert_eq!(result, Err(EvalFailure::Cancelled));
    let cancelled_after = started.elapsed();
    let start = Instant::now();
    while !containers(&prefix).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the container outlived the cancel: {:?}",
            containers(&prefix)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(empty(logs.path()), "the log folder is removed");
    eprintln!("cancelled after {cancelled_after:?}");
}
