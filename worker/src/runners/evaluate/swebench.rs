//! The `swebench` evaluator: a patch judged by the official SWE-bench harness, `swebench==5.0.2`
//! (docs/method.md §6), for the one instance a task's [`Evaluator::Swebench`] names.
//!
//! The harness is Python, so the worker runs it as a child process: the program
//! `agents/vcurve_agents/swebench_eval.py` under the python of the virtual environment
//! `scripts/swebench-venv` makes ([`SwebenchHarness`]: `VCURVE_SWEBENCH_PYTHON`, default
//! [`DEFAULT_PYTHON`] relative to the worker's working directory). One evaluation:
//!
//! 1. The task must carry its dataset row (`instance`); a task imported from a trajectory alone
//!    has none and is refused ([`EvalFailure::InvalidTask`]) before anything runs.
//! 2. A run id `vcurve-<first 16 hex of sha256(patch)>-<8 random hex>` ([`run_id`]): the
//!    harness returns an existing `report.json` of the same run id instead of running, and names
//!    its container `sweb.eval.<instance, lowercased>.<run id>` ([`container_name`]), so the
//!    digest keeps its report cache from answering for another patch and the random part keeps
//!    two concurrent evaluations of one patch apart.
//! 3. A fresh log folder the worker owns, removed afterwards whatever happened
//!    (`<temp>/vcurve-swebench-<run id>`): the harness writes `logs/run_evaluation/...` under
//!    the working directory, which is this folder.
//! 4. The program gets the row, the patch, the run id, the folder, the task's image (for a row
//!    without `image`) and the tests' timeout as one JSON object on stdin, calls the harness's
//!    `run_instance` against the local Docker Engine, removes the harness's container by name,
//!    and prints one JSON line: resolved, unresolved (tests failed, the patch did not apply, the
//!    tests ran past the timeout), an infrastructure failure (image missing, Docker error, harness
//!    crash), or a row the harness cannot evaluate. A report the harness flags `infra_failure`
//!    (advisory) keeps the harness's verdict, unresolved, as its run report counts it; the flag
//!    is counted ([`infra_failure_verdicts`]) and logged, never run again.
//! 5. The child runs in its own process group with [`SwebenchHarness::timeout`] (the tests'
//!    timeout plus [`HARNESS_MARGIN_S`] for the container's start, the patch, the harness's 15 s
//!    `docker stop` and the imports). On that timeout or on cancel the whole group is killed and
//!    the container is removed by its name through the [`ContainerRuntime`].
//!
//! A resolved or unresolved answer is a [`Verdict`]; everything else is an [`EvalFailure`]:
//! infrastructure (no outcome, run again) or an invalid task.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use vcurve_record::{Evaluator, Task};

use super::verdict::{ApplyMethod, EvalFailure, OUTPUT_TAIL_BYTES, Verdict, is_empty_patch};
use crate::runners::agent::{GroupGuard, last_bytes as tail};
use crate::runners::python_env::PythonEnv;
use crate::sandbox::container::ContainerRuntime;

/// The harness's version: the paper's evaluator.
pub const VERSION: &str = "5.0.2";
/// The variable naming the python of the harness's virtual environment.
pub const PYTHON_VAR: &str = "VCURVE_SWEBENCH_PYTHON";
/// The harness's python, relative to the worker's working directory, when none is named.
pub const DEFAULT_PYTHON: &str = ".venv/swebench/bin/python";
/// The variable naming the folder that holds `vcurve_agents`.
pub const AGENTS_DIR_VAR: &str = "VCURVE_AGENTS_DIR";
/// The folder holding `vcurve_agents`, relative to the worker's working directory, when none is
/// named.
pub const DEFAULT_AGENTS_DIR: &str = "agents";
/// The module the python runs.
pub const MODULE: &str = "vcurve_agents.swebench_eval";
/// The tests' timeout handed to `run_instance`: the harness's own default (`--timeout 1800`).
pub const DEFAULT_TEST_TIMEOUT_S: u32 = 1800;
/// How long the harness may take beyond the tests' timeout before it is killed.
pub const HARNESS_MARGIN_S: u64 = 600;
/// How much of the program's stderr an infrastructure failure quotes.
const STDERR_TAIL_BYTES: usize = 2048;

/// Where the harness runs from: its python, the folder on its `PYTHONPATH`, the tests' timeout
/// and where log folders go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwebenchHarness {
    pub python: PathBuf,
    pub agents_dir: PathBuf,
    pub test_timeout_s: u32,
    /// The whole run's timeout; [`SwebenchHarness::new`] makes it the tests' plus
    /// [`HARNESS_MARGIN_S`].
    pub timeout: Duration,
    /// The folder the per-evaluation log folders are made in (the system's temporary folder).
    pub log_root: PathBuf,
}

impl SwebenchHarness {
    /// The harness at `python` with `vcurve_agents` in `agents_dir` (both made absolute, since
    /// the program runs in its log folder).
    pub fn new(python: impl AsRef<Path>, agents_dir: impl AsRef<Path>) -> SwebenchHarness {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        SwebenchHarness {
            python: absolute(python.as_ref()),
            agents_dir: absolute(agents_dir.as_ref()),
            test_timeout_s: DEFAULT_TEST_TIMEOUT_S,
            timeout: Duration::from_secs(u64::from(DEFAULT_TEST_TIMEOUT_S) + HARNESS_MARGIN_S),
            log_root: std::env::temp_dir(),
        }
    }

    /// The worker's harness: [`PYTHON_VAR`] (default [`DEFAULT_PYTHON`]) and [`AGENTS_DIR_VAR`]
    /// (default [`DEFAULT_AGENTS_DIR`]), relative paths taken from the working directory.
    pub fn from_env() -> SwebenchHarness {
        let var = |name: &str, default: &str| {
            std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| default.into())
        };
        SwebenchHarness::new(var(PYTHON_VAR, DEFAULT_PYTHON), var(AGENTS_DIR_VAR, DEFAULT_AGENTS_DIR))
    }

    /// The same harness with the tests' timeout `seconds` (and the run's timeout after it).
    pub fn with_test_timeout(mut self, seconds: u32) -> SwebenchHarness {
        self.test_timeout_s = seconds;
        self.timeout = Duration::from_secs(u64::from(seconds) + HARNESS_MARGIN_S);
        self
    }
}

impl SwebenchHarness {
    /// Import the evaluator and the harness with the environment's python and check the harness's
    /// version, so that a worker can refuse a broken environment once, at its start, rather than
    /// fail every evaluation; the error says what is wrong and what to run.
    pub async fn check(&self) -> Result<(), String> {
        let script = "import importlib.metadata as m, vcurve_agents.swebench_eval, swebench.harness.run_evaluation; \
                      print(m.version('swebench'))";
        let env = PythonEnv {
            python: &self.python,
            agents_dir: &self.agents_dir,
            what: "the SWE-bench evaluator",
            make: "scripts/swebench-venv",
            // The harness runs as the worker's user: it judges, it is not the agent.
            user: None,
        };
        let version = env.probe(script).await.map_err(|e| {
            if e.starts_with("cannot run") { format!("{e}, and set {PYTHON_VAR} to the path it prints") } else { e }
        })?;
        env.pinned("swebench", &version, VERSION)?;
        Ok(())
    }
}

/// A fresh run id for an evaluation of `patch` (see the module docs).
pub fn run_id(patch: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let digest = Sha256::digest(patch.as_bytes());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut random = Sha256::new();
    random.update(nanos.to_le_bytes());
    random.update(std::process::id().to_le_bytes());
    random.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    random.update(format!("{:?}", std::thread::current().id()).as_bytes());
    format!("vcurve-{}-{}", &hex(&digest)[..16], &hex(&random.finalize())[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name the harness gives the evaluation's container (`run_evaluation.create_container`).
pub fn container_name(instance_id: &str, run_id: &str) -> String {
    format!("sweb.eval.{}.{run_id}", instance_id.to_lowercase())
}

/// The program's answer (its one stdout line).
#[derive(Debug, Deserialize)]
struct Answer {
    outcome: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    apply_command: Option<String>,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    test_exit_code: Option<i32>,
    #[serde(default)]
    output_tail: Option<String>,
    #[serde(default)]
    infra_failure: Option<String>,
}

/// Verdicts the harness flagged `infra_failure` since the worker started (their verdict is the
/// harness's, unresolved; [`infra_failure_verdicts`]).
static INFRA_FAILURE_VERDICTS: AtomicU64 = AtomicU64::new(0);

/// How many verdicts of this process the SWE-bench harness flagged `infra_failure` (advisory:
/// its environment-tier signatures, such as a test killed for memory). They stand as the
/// harness's verdict and are counted here and in the worker's log, never run again.
pub fn infra_failure_verdicts() -> u64 {
    INFRA_FAILURE_VERDICTS.load(Ordering::Relaxed)
}

fn apply_method(command: Option<&str>) -> Option<ApplyMethod> {
    match command? {
        "git apply --verbose" => Some(ApplyMethod::GitApply),
        "git apply --verbose --3way" => Some(ApplyMethod::GitApply3Way),
        "git apply --verbose --reject" => Some(ApplyMethod::GitApplyReject),
        c if c.starts_with("patch ") => Some(ApplyMethod::Patch),
        _ => None,
    }
}

/// Removes the evaluation's log folder when dropped.
struct LogDir(PathBuf);

impl Drop for LogDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.0.display(), error = %e, "cannot remove a SWE-bench log folder");
        }
    }
}

/// Judge `patch` for `task`, whose evaluator is [`Evaluator::Swebench`], with `harness` (see the
/// module docs). `runtime` removes the harness's container when the run is killed.
pub async fn evaluate_swebench(
    harness: &SwebenchHarness,
    runtime: Arc<dyn ContainerRuntime>,
    task: &Task,
    patch: &str,
    cancel: CancellationToken,
) -> Result<Verdict, EvalFailure> {
    let Evaluator::Swebench { instance_id, instance } = &task.evaluator else {
        return Err(EvalFailure::Unsupported(format!("task {}: its evaluator is not of kind `swebench`", task.id)));
    };
    if is_empty_patch(patch) {
        return Ok(Verdict::unresolved(String::new()));
    }
    let Some(row) = instance else {
        return Err(EvalFailure::InvalidTask(format!(
            "task {}: its SWE-bench evaluator (instance {instance_id}) carries no dataset row, which the harness \
             needs (FAIL_TO_PASS, PASS_TO_PASS, eval_script, log_parser, …); a task imported from a trajectory has \
             none: launch the study from a SWE-bench dataset file (tasks by instance id) so that each task carries \
             its row",
            task.id
        )));
    };
    match row.get("instance_id") {
        Some(Value::String(id)) if id == instance_id => {}
        other => {
            return Err(EvalFailure::InvalidTask(format!(
                "task {}: its SWE-bench evaluator names instance {instance_id} but its dataset row's instance_id is {}",
                task.id,
                other.map_or("missing".to_owned(), Value::to_string)
            )));
        }
    }
    if let Some(Value::String(image)) = row.get("image")
        && !image.is_empty()
        && *image != task.image
    {
        // The harness evaluates in the row's image; the agent ran in the task's.
        tracing::warn!(task = %task.id, row_image = %image, task_image = %task.image,
            "the SWE-bench row names another image than the task's: the harness uses the row's");
    }
    if cancel.is_cancelled() {
        return Err(EvalFailure::Cancelled);
    }
    if !harness.python.is_file() {
        return Err(EvalFailure::Unsupported(format!(
            "task {}: the SWE-bench harness's python {} does not exist on this worker; create the environment with \
             scripts/swebench-venv and set {PYTHON_VAR} to the path it prints",
            task.id,
            harness.python.display()
        )));
    }
    let run_id = run_id(patch);
    let container = container_name(instance_id, &run_id);
    let log_dir = harness.log_root.join(format!("vcurve-swebench-{run_id}"));
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        EvalFailure::Infrastructure(format!("cannot create the SWE-bench log folder {}: {e}", log_dir.display()))
    })?;
    let log_dir = LogDir(log_dir);
    let request = serde_json::json!({
        "instance": row,
        "patch": patch,
        "run_id": run_id,
        "log_dir": log_dir.0,
        "image": task.image,
        "timeout_s": harness.test_timeout_s,
    });
    tracing::debug!(task = %task.id, instance = %instance_id, run_id = %run_id, "evaluating with the SWE-bench harness");
    let ran = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(Stop::Cancelled),
        () = tokio::time::sleep(harness.timeout) => Err(Stop::Timeout),
        r = run(harness, &log_dir.0, &request) => r,
    };
    // The select has dropped the child future: kill_on_drop and the group guard killed it.
    let answer = match ran {
        Ok(answer) => answer,
        Err(stop) => {
            let what = match stop {
                Stop::Cancelled => EvalFailure::Cancelled,
                Stop::Timeout => EvalFailure::Infrastructure(format!(
                    "task {}: the SWE-bench harness did not finish evaluating instance {instance_id} within {} s and \
                     was killed",
                    task.id,
                    harness.timeout.as_secs()
                )),
                Stop::Failed(reason) => EvalFailure::Infrastructure(format!(
                    "task {}: the SWE-bench evaluator ({} -m {MODULE}) failed on instance {instance_id}: {reason}",
                    task.id,
                    harness.python.display()
                )),
            };
            // The program may have been killed (or have crashed) before it removed its container.
            remove_container(runtime, container, matches!(what, EvalFailure::Cancelled)).await;
            return Err(what);
        }
    };
    let run_log = || format!("run {run_id}, container {container}");
    match answer.outcome.as_str() {
        "resolved" | "unresolved" => {
            let resolved = answer.outcome == "resolved";
            let output = match (answer.output_tail.as_deref(), answer.detail.as_deref()) {
                (Some(out), _) if !out.is_empty() => out.to_owned(),
                (_, Some(detail)) => detail.to_owned(),
                _ => String::new(),
            };
            if let Some(reason) = &answer.infra_failure {
                let count = INFRA_FAILURE_VERDICTS.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(task = %task.id, instance = %instance_id, %reason, count,
                    "the SWE-bench harness flags an infrastructure failure: its verdict (unresolved) stands, counted");
            }
            Ok(Verdict {
                resolved,
                applied: apply_method(answer.apply_command.as_deref()),
                returncode: answer.test_exit_code,
                timed_out: answer.timed_out,
                output_tail: tail(&output, OUTPUT_TAIL_BYTES).to_owned(),
                infra_failure: answer.infra_failure,
            })
        }
        "infrastructure" => Err(EvalFailure::Infrastructure(format!(
            "task {}: the SWE-bench harness could not evaluate instance {instance_id} ({}): {}",
            task.id,
            run_log(),
            answer.reason.as_deref().unwrap_or("no reason given")
        ))),
        "invalid_instance" => Err(EvalFailure::InvalidTask(format!(
            "task {}: the SWE-bench harness cannot evaluate instance {instance_id}: {}",
            task.id,
            answer.reason.as_deref().unwrap_or("no reason given")
        ))),
        other => Err(EvalFailure::Infrastructure(format!(
            "task {}: the SWE-bench evaluator answered the unknown outcome {other:?} for instance {instance_id}",
            task.id
        ))),
    }
}

enum Stop {
    Cancelled,
    Timeout,
    Failed(String),
}

/// Remove the harness's container by name: awaited after a timeout or a failure, in the
/// background after a cancel (which returns at once). A create the engine was still serving
/// when the program was killed may land after the first removal, so it is tried again.
async fn remove_container(runtime: Arc<dyn ContainerRuntime>, name: String, background: bool) {
    let remove = async move {
        for wait in [Duration::ZERO, Duration::from_secs(5)] {
            tokio::time::sleep(wait).await;
            if let Err(e) = runtime.remove(&name).await {
                tracing::warn!(container = %name, error = %e, "cannot remove a SWE-bench harness container");
            }
        }
    };
    if background {
        tokio::spawn(remove);
    } else {
        remove.await;
    }
}

/// Run the program once: its answer, or why there is none.
async fn run(harness: &SwebenchHarness, log_dir: &Path, request: &Value) -> Result<Answer, Stop> {
    let mut command = Command::new(&harness.python);
    command
        .args(["-m", MODULE])
        .env("PYTHONPATH", &harness.agents_dir)
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(log_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = command.spawn().map_err(|e| Stop::Failed(format!("cannot start it: {e}")))?;
    let _group = GroupGuard(child.id());
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(Stop::Failed("its pipes were not set up".into()));
    };
    let body = serde_json::to_vec(request).map_err(|e| Stop::Failed(format!("cannot encode the request: {e}")))?;
    let write = async move {
        let written = stdin.write_all(&body).await;
        drop(stdin);
        written
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (written, read_out, read_err) = tokio::join!(write, stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
    let status = child.wait().await.map_err(|e| Stop::Failed(format!("cannot wait for it: {e}")))?;
    let err = String::from_utf8_lossy(&err);
    let stderr_tail = || {
        let t = tail(err.trim_end(), STDERR_TAIL_BYTES);
        if t.is_empty() { "its stderr is empty".to_owned() } else { format!("its stderr ends:\n{t}") }
    };
    if let Err(e) = written.and(read_out.map(drop)).and(read_err.map(drop)) {
        return Err(Stop::Failed(format!("cannot talk to it: {e}; {}", stderr_tail())));
    }
    let out = String::from_utf8_lossy(&out);
    let Some(line) = out.lines().rev().find(|l| !l.trim().is_empty()) else {
        return Err(Stop::Failed(format!("it exited ({status}) without an answer; {}", stderr_tail())));
    };
    serde_json::from_str::<Answer>(line).map_err(|e| {
        Stop::Failed(format!("its answer {:?} is not the expected JSON ({e}); exit {status}; {}", line, stderr_tail()))
    })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::sandbox::container::double::{Call, FakeRuntime};

    const INSTANCE: &str = "Vcurve__calc-1";

    fn task(instance: Option<Value>) -> Task {
        Task {
            id: "calc-1".into(),
            image: "task:calc".into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Swebench { instance_id: INSTANCE.into(), instance },
            problem_statement: None,
        }
    }

    fn row() -> Value {
        json!({"instance_id": INSTANCE, "repo": "vcurve/calc", "version": "1.0", "FAIL_TO_PASS": "[]"})
    }

    /// A harness whose "python" is the bash script `body` (it sees `-m vcurve_agents.swebench_eval`
    /// as its arguments), in `dir`, with its log folders there too.
    fn fake(dir: &Path, body: &str) -> SwebenchHarness {
        use std::os::unix::fs::PermissionsExt;
        let python = dir.join("python");
        std::fs::write(&python, format!("#!/bin/bash\n{body}\n")).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        SwebenchHarness { log_root: logs, ..SwebenchHarness::new(&python, dir.join("agents")) }
    }

    async fn evaluate(
        harness: &SwebenchHarness,
        runtime: &Arc<FakeRuntime>,
        task: &Task,
    ) -> Result<Verdict, EvalFailure> {
        evaluate_swebench(harness, runtime.clone(), task, "diff --git a/x b/x\n", CancellationToken::new()).await
    }

    fn log_folders(harness: &SwebenchHarness) -> Vec<PathBuf> {
        std::fs::read_dir(&harness.log_root).unwrap().map(|e| e.unwrap().path()).collect()
    }

    #[test]
    fn run_ids_carry_the_patch_digest_and_differ_and_container_names_follow_the_harness() {
        let (a, b) = (run_id("p"), run_id("p"));
        // sha256("p")
        assert!(a.starts_with("vcurve-148de9c5a7a44d19-"), "{a}");
        assert_eq!(a.len(), "vcurve-".len() + 16 + 1 + 8);
        assert_ne!(a, b);
        assert!(run_id("q").starts_with("vcurve-8e35c2cd3bf6641b-"));
        assert_eq!(container_name("Django__django-1", "vcurve-1-2"), "sweb.eval.django__django-1.vcurve-1-2");
    }

    #[test]
    fn the_worker_harness_defaults_to_the_venv_relative_to_the_working_directory() {
        let cwd = std::env::current_dir().unwrap();
        let harness = SwebenchHarness::new(DEFAULT_PYTHON, DEFAULT_AGENTS_DIR);
        assert_eq!(harness.python, cwd.join(".venv/swebench/bin/python"));
        assert_eq!(harness.agents_dir, cwd.join("agents"));
        assert_eq!(harness.timeout, Duration::from_secs(1800 + HARNESS_MARGIN_S));
        assert_eq!(harness.with_test_timeout(60).timeout, Duration::from_secs(60 + HARNESS_MARGIN_S));
    }

    #[tokio::test]
    async fn the_program_gets_its_request_in_its_own_log_folder_and_its_answer_is_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        let harness = fake(
            dir.path(),
            &format!(
                "cat > {seen}.json; pwd > {seen}.cwd; echo \"$@\" > {seen}.args; echo \"$PYTHONPATH\" > {seen}.path\n\
                 echo 'harness noise'; echo noise >&2\n\
                 echo '{{\"outcome\": \"resolved\", \"apply_command\": \"git apply --verbose\", \"test_exit_code\": 0, \"output_tail\": \"Ran 7 tests\\nOK\"}}'",
                seen = seen.display()
            ),
        );
        let runtime = Arc::new(FakeRuntime::new());
        let verdict = evaluate(&harness, &runtime, &task(Some(row()))).await.unwrap();
        assert_eq!(
            verdict,
            Verdict {
                resolved: true,
                applied: Some(ApplyMethod::GitApply),
                returncode: Some(0),
                timed_out: false,
                output_tail: "Ran 7 tests\nOK".into(),
                infra_failure: None,
            }
        );
        let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", seen.display())).unwrap();
        let request: Value = serde_json::from_str(&read("json")).unwrap();
        assert_eq!(request["instance"], row());
        assert_eq!(request["patch"], "diff --git a/x b/x\n");
        assert_eq!((request["image"].as_str(), request["timeout_s"].as_u64()), (Some("task:calc"), Some(1800)));
        let run_id = request["run_id"].as_str().unwrap();
        assert!(run_id.starts_with("vcurve-"), "{run_id}");
        let log_dir = PathBuf::from(request["log_dir"].as_str().unwrap());
        assert_eq!(log_dir, harness.log_root.join(format!("vcurve-swebench-{run_id}")));
        assert_eq!(read("cwd").trim_end(), log_dir.display().to_string());
        assert_eq!(read("args").trim_end(), "-m vcurve_agents.swebench_eval");
        assert_eq!(read("path").trim_end(), harness.agents_dir.display().to_string());
        assert_eq!(log_folders(&harness), Vec::<PathBuf>::new(), "the log folder is removed");
        assert_eq!(runtime.calls(), vec![], "the program removes its container itself");
    }

    #[tokio::test]
    async fn every_answer_of_the_program_maps_to_a_verdict_or_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Arc::new(FakeRuntime::new());
        let answer = |line: &str| fake(dir.path(), &format!("cat >/dev/null; echo '{line}'"));

        let harness =
            answer(r#"{"outcome": "unresolved", "apply_command": null, "detail": "the patch does not apply"}"#);
        let verdict = evaluate(&harness, &runtime, &task(Some(row()))).await.unwrap();
        assert_eq!((verdict.resolved, verdict.applied, verdict.returncode), (false, None, None));
        assert_eq!(verdict.output_tail, "the patch does not apply");

        let harness = answer(
            r#"{"outcome": "unresolved", "apply_command": "patch --batch --forward --fuzz=5 -p1 -i", "timed_out": true}"#,
        );
        let verdict = evaluate(&harness, &runtime, &task(Some(row()))).await.unwrap();
        assert_eq!((verdict.resolved, verdict.applied, verdict.timed_out), (false, Some(ApplyMethod::Patch), true));

        // The harness's advisory infra_failure flag: its verdict stands (unresolved), counted.
        let before = infra_failure_verdicts();
        let harness = answer(
            r#"{"outcome": "unresolved", "apply_command": "git apply --verbose", "infra_failure": "Killed (out of memory)"}"#,
        );
        let verdict = evaluate(&harness, &runtime, &task(Some(row()))).await.unwrap();
        assert_eq!((verdict.resolved, verdict.infra_failure.as_deref()), (false, Some("Killed (out of memory)")));
        assert!(infra_failure_verdicts() > before);

        let harness = answer(r#"{"outcome": "infrastructure", "reason": "the image x is not on this Docker Engine"}"#);
        match evaluate(&harness, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::Infrastructure(reason)) => {
                assert!(
                    reason.starts_with(
                        "task calc-1: the SWE-bench harness could not evaluate instance Vcurve__calc-1 (run vcurve-"
                    ),
                    "{reason}"
                );
                assert!(reason.contains("container sweb.eval.vcurve__calc-1.vcurve-"), "{reason}");
                assert!(reason.ends_with("the image x is not on this Docker Engine"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let harness = answer(r#"{"outcome": "invalid_instance", "reason": "the row lacks eval_script"}"#);
        match evaluate(&harness, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::InvalidTask(reason)) => assert_eq!(
                reason,
                "task calc-1: the SWE-bench harness cannot evaluate instance Vcurve__calc-1: the row lacks eval_script"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(runtime.calls(), vec![]);

        // No answer: an infrastructure failure quoting the program's stderr; its container removed.
        let harness = fake(dir.path(), "cat >/dev/null; echo 'Traceback: ModuleNotFoundError: swebench' >&2; exit 1");
        match evaluate(&harness, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::Infrastructure(reason)) => {
                assert!(
                    reason.contains("failed on instance Vcurve__calc-1: it exited (exit status: 1) without an answer"),
                    "{reason}"
                );
                assert!(reason.ends_with("its stderr ends:\nTraceback: ModuleNotFoundError: swebench"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let harness = fake(dir.path(), "cat >/dev/null; echo 'not json'");
        match evaluate(&harness, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::Infrastructure(reason)) => {
                assert!(reason.contains("its answer \"not json\" is not the expected JSON"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(runtime.calls().iter().all(
            |c| matches!(c, Call::Remove { container } if container.starts_with("sweb.eval.vcurve__calc-1.vcurve-"))
        ));
        assert_eq!(log_folders(&harness), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn a_harness_past_its_timeout_is_killed_with_its_group_and_its_container_removed() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let mut harness = fake(dir.path(), &format!("sleep 60 & echo $! > {}; wait", pid.display()));
        harness.timeout = Duration::from_millis(500);
        let runtime = Arc::new(FakeRuntime::new());
        match evaluate(&harness, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::Infrastructure(reason)) => assert!(
                reason.contains(
                    "the SWE-bench harness did not finish evaluating instance Vcurve__calc-1 within 0 s and was killed"
                ),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
        let calls = runtime.calls();
        assert_eq!(calls.len(), 2, "removed twice (a late create): {calls:?}");
        assert!(
            matches!(&calls[0], Call::Remove { container } if container.starts_with("sweb.eval.vcurve__calc-1.vcurve-"))
        );
        let sleeper = std::fs::read_to_string(&pid).unwrap();
        assert!(!Path::new(&format!("/proc/{}", sleeper.trim())).exists(), "the group's sleep was killed");
        assert_eq!(log_folders(&harness), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn cancel_returns_at_once_and_removes_the_container_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let harness = fake(dir.path(), "sleep 60");
        let runtime = Arc::new(FakeRuntime::new());
        let cancel = CancellationToken::new();
        let fire = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            fire.cancel();
        });
        let started = Instant::now();
        let result = evaluate_swebench(&harness, runtime.clone(), &task(Some(row())), "p", cancel).await;
        assert_eq!(result, Err(EvalFailure::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        for _ in 0..100 {
            if !runtime.calls().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            matches!(runtime.calls().first(), Some(Call::Remove { container }) if container.starts_with("sweb.eval.vcurve__calc-1.vcurve-"))
        );
        assert_eq!(log_folders(&harness), Vec::<PathBuf>::new());
    }

    #[tokio::test]
    async fn the_check_wants_the_harness_at_its_version() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(fake(dir.path(), "echo 5.0.2").check().await, Ok(()));
        let e = fake(dir.path(), "echo 4.1.0").check().await.unwrap_err();
        assert!(e.ends_with("has swebench 4.1.0; the SWE-bench evaluator is written for 5.0.2 (the paper's): recreate the environment with scripts/swebench-venv"), "{e}");
        let e = fake(dir.path(), "echo 'ModuleNotFoundError: No module named swebench' >&2; exit 1")
            .check()
            .await
            .unwrap_err();
        assert!(
            e.contains("cannot import the SWE-bench evaluator (ModuleNotFoundError: No module named swebench)"),
            "{e}"
        );
        let missing = SwebenchHarness::new(dir.path().join("nothing"), dir.path());
        let e = missing.check().await.unwrap_err();
        assert!(
            e.contains("cannot run the python of the SWE-bench evaluator") && e.contains("scripts/swebench-venv"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn what_is_refused_before_anything_runs() {
        let dir = tempfile::tempdir().unwrap();
        let harness = fake(dir.path(), "echo ran > ran");
        let runtime = Arc::new(FakeRuntime::new());
        match evaluate(&harness, &runtime, &task(None)).await {
            Err(EvalFailure::InvalidTask(reason)) => {
                assert!(
                    reason.contains(
                        "task calc-1: its SWE-bench evaluator (instance Vcurve__calc-1) carries no dataset row"
                    ),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        match evaluate(&harness, &runtime, &task(Some(json!({"instance_id": "other__other-2"})))).await {
            Err(EvalFailure::InvalidTask(reason)) => {
                assert!(
                    reason.contains(
                        "names instance Vcurve__calc-1 but its dataset row's instance_id is \"other__other-2\""
                    ),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let missing = SwebenchHarness { python: dir.path().join("no-python"), ..harness.clone() };
        match evaluate(&missing, &runtime, &task(Some(row()))).await {
            Err(EvalFailure::Unsupported(reason)) => {
                assert!(reason.contains("no-python does not exist on this worker"), "{reason}");
                assert!(reason.contains("scripts/swebench-venv and set VCURVE_SWEBENCH_PYTHON"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let empty = evaluate_swebench(&harness, runtime.clone(), &task(None), " \n", CancellationToken::new()).await;
        assert!(!empty.unwrap().resolved, "an empty patch is unresolved without the harness");
        assert!(!dir.path().join("ran").exists() && !harness.log_root.join("ran").exists());
        assert_eq!(runtime.calls(), vec![]);
    }
}
