//! The mini-swe-agent round trip on real containers, with the real mini-swe-agent 2.4.6 code and a
//! mock OpenAI-compatible model server (`agents/tests/mock_openai.py`, a scripted stochastic
//! policy for the test task calc-1 that records every request):
//!
//! 1. a **base run** of mini-swe-agent as its users run it, without vcurve: its own `DefaultAgent`,
//!    `LitellmModel` and `DockerEnvironment` under its SWE-bench configuration, on the task image
//!    (`agents/tests/native_mini_swe_agent.py`), saved as a `.traj.json`;
//! 2. its **import** (`vcurve import mini-swe-agent --task`), checked against the run;
//! 3. a study with the **`mini-swe-agent` runner** on `vcurve worker --docker`: the recorded run is
//!    **replayed** in a fresh container of the task image (reproduced, snapshots committed), and
//!    **continued** from `h_t` by the adapter (`agents/vcurve_agents/mini_swe_agent.py`): the first
//!    request of a continuation from `h_t` carries exactly the recorded messages up to `o_t`
//!    (without mini-swe-agent's `extra`), and a seed of its own;
//! 4. a study **from a SWE-bench dataset** (the test task as the v5 instance `vcurve__calc-1` of
//!    `agents/tests/fixtures/swebench/calc-1.json`, its image the task image tagged with the
//!    harness's name) whose base runs are the adapter's from `h_0` — each opening with
//!    mini-swe-agent's SWE-bench system and instance messages rendered with the problem statement —
//!    and whose patches the official harness judges: a run that wrote the correct fix succeeds, one
//!    that wrote the flawed fix fails.
//!
//! Needs the images `deploy/images/build` makes (`VCURVE_TEST_TASK_IMAGE`) and the environments
//! `scripts/mini-swe-agent-venv` and `scripts/swebench-venv` make (`VCURVE_MSA_PYTHON`,
//! `VCURVE_SWEBENCH_PYTHON`); scripts/test provides them all. The studies are cancelled once they have shown what is checked (a whole curve of
//! mini-swe-agent runs takes too long for CI), and must then leave no container behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vcurve_testkit::require::Service;

use serde_json::Value;
use vcurve_e2e::{Process, TestDir, free_port, try_status_json, vcurve_ok};

const TASK_IMAGE_ENV: &str = "VCURVE_TEST_TASK_IMAGE";
const MSA_PYTHON_ENV: &str = "VCURVE_MSA_PYTHON";
const SWEBENCH_PYTHON_ENV: &str = "VCURVE_SWEBENCH_PYTHON";
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a study may take to show what is checked (about 2 minutes on 2 idle cores).
const STUDY_TIMEOUT: Duration = Duration::from_secs(900);
const POLL: Duration = Duration::from_millis(500);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the repository").to_path_buf()
}

fn required_env(name: &str, what: &str) -> String {
    std::env::var(name).ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| {
        panic!("{name} is not set: {what}; scripts/test sets it up and exports it (run the tests through scripts/test)")
    })
}

/// The mock model server, killed when dropped.
struct MockServer {
    child: Child,
    base_url: String,
    requests: PathBuf,
}

impl MockServer {
    fn start(dir: &Path) -> MockServer {
        let port_file = dir.join("mock.port");
        let requests = dir.join("requests.jsonl");
        let log = std::fs::File::create(dir.join("mock-openai.log")).expect("create the mock server's log");
        let child = Command::new("python3")
            .arg(repository().join("agents/tests/mock_openai.py"))
            .args(["--explore", "3", "--p-correct", "0.5", "--port-file"])
            .arg(&port_file)
            .arg("--requests")
            .arg(&requests)
            .env("PYTHONPATH", repository().join("agents"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone a file handle"))
            .stderr(log)
            .spawn()
            .expect("start agents/tests/mock_openai.py with python3");
        let mut server = MockServer { child, base_url: String::new(), requests };
        let started = vcurve_e2e::wait_every(Duration::from_secs(30), Duration::from_millis(50), || {
            port_file.exists() || server.child.try_wait().ok().flatten().is_some()
        });
        let port = std::fs::read_to_string(&port_file).unwrap_or_else(|_| {
            panic!(
                "the mock server wrote no port within 30 s (started: {started}); see {}/mock-openai.log",
                dir.display()
            )
        });
        server.base_url = format!("http://127.0.0.1:{}/v1", port.trim());
        server
    }

    /// Every request body received so far, in arrival order.
    fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.requests).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("the mock server writes JSON lines"))
            .collect()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `docker ps -a -q` of the containers carrying `label`.
fn containers_labelled(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", &format!("label={label}")])
        .output()
        .expect("run docker ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).filter(|l| !l.is_empty()).collect()
}

/// A value as it goes over the wire: the OpenAI client litellm uses leaves out fields whose value
/// is `null` (a recorded assistant message has `function_call: null`, …).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The recorded messages up to `o_t` for every `t` as a model server receives them: without
/// mini-swe-agent's `extra`, without null fields.
fn prefixes(trajectory: &Value) -> BTreeMap<u32, Vec<Value>> {
    let messages = trajectory["messages"].as_array().expect("a recorded trajectory's messages");
    let strip = |m: &Value| {
        let mut m = without_nulls(m);
        m.as_object_mut().expect("a message is an object").remove("extra");
        m
    };
    let upto = |end: usize| messages[..end].iter().map(strip).collect::<Vec<_>>();
    let mut out =
        BTreeMap::from([(0, upto(trajectory["initial_messages"].as_u64().expect("initial_messages") as usize))]);
    for (i, step) in trajectory["steps"].as_array().expect("steps").iter().enumerate() {
        out.insert(i as u32 + 1, upto(step["messages_end"].as_u64().expect("messages_end") as usize));
    }
    out
}

/// Wait for the study to show `condition` in its status; panics with the last status on time-out.
fn wait_for(url: &str, study: &str, what: &str, mut condition: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let mut met = false;
    vcurve_e2e::wait_every(STUDY_TIMEOUT, POLL, || match try_status_json(url, study) {
        Ok(status) => {
            assert_ne!(status["state"], "cancelled", "the study was cancelled: {status}");
            met = condition(&status);
            let over = met || status["state"] == "done";
            last = status;
            over
        }
        Err(_) => false,
    });
    assert!(met, "{what} did not happen (within {STUDY_TIMEOUT:?}, or before the study was done); last status: {last}");
    last
}

/// Cancel the study and wait until none of its containers is left.
fn cancel_and_check_clean(url: &str, study: &str) {
    vcurve_ok(&["cancel", study, "--coordinator", url], COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let label = format!("vcurve.study={study}");
    let clean = vcurve_e2e::wait_every(Duration::from_secs(120), POLL, || containers_labelled(&label).is_empty());
    assert!(clean, "containers of the cancelled study {study} are left: {:?}", containers_labelled(&label));
}

#[test]
fn mini_swe_agent_runs_are_imported_replayed_and_resumed_from_their_recorded_prefix() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::MiniSweAgent, Service::Swebench);
    let image = required_env(TASK_IMAGE_ENV, "the task image deploy/images/build makes");
    let python =
        required_env(MSA_PYTHON_ENV, "the python of the mini-swe-agent environment scripts/mini-swe-agent-venv makes");
    let swebench_python =
        required_env(SWEBENCH_PYTHON_ENV, "the python of the environment scripts/swebench-venv makes");
    let started = Instant::now();
    let dir = TestDir::new("mini-swe-agent");
    let repo = repository();

    let built =
        Command::new(repo.join("deploy/images/build")).arg("--print-task").output().expect("run deploy/images/build");
    assert!(built.status.success(), "deploy/images/build --print-task: {}", String::from_utf8_lossy(&built.stderr));
    let task_file = dir.path().join("calc-1.json");
    std::fs::write(&task_file, &built.stdout).expect("write the task");
    let task: Value = serde_json::from_slice(&built.stdout).expect("the task is JSON");
    assert_eq!(task["image"].as_str(), Some(image.as_str()));
    let server = MockServer::start(dir.path());

    // 1. mini-swe-agent's own run, saved by mini-swe-agent.
    let native = dir.path().join("calc-1.traj.json");
    let out = Command::new(&python)
        .arg(repo.join("agents/tests/native_mini_swe_agent.py"))
        .args(["--seed", "7", "--base-url", &server.base_url, "--task"])
        .arg(&task_file)
        .arg("--out")
        .arg(&native)
        .env("PYTHONPATH", repo.join("agents"))
        .output()
        .expect("run agents/tests/native_mini_swe_agent.py");
    assert!(out.status.success(), "the native mini-swe-agent run failed: {}", String::from_utf8_lossy(&out.stderr));
    let native_requests = server.requests().len();
    // The policy (mock_openai.py, explore 3): three exploration calls, the fix, the patch, the submission.
    assert_eq!(native_requests, 6, "the native run's model calls");
    assert!(containers_labelled("vcurve.test=native-mini-swe-agent").len() <= 1, "native containers pile up");

    // 2. Its import.
    let imported_dir = dir.path().join("imported");
    let (native_arg, task_arg, out_arg) =
        (native.to_string_lossy(), task_file.to_string_lossy(), imported_dir.to_string_lossy());
    vcurve_ok(&["import", "mini-swe-agent", &native_arg, "--task", &task_arg, "--out", &out_arg], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let inspected = vcurve_ok(&["inspect", &native_arg, "--json"], COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let inspected: Value = serde_json::from_str(&inspected).expect("inspect --json prints JSON");
    assert_eq!(inspected["format"], "mini-swe-agent-1.1");
    assert_eq!(inspected["steps"], 6);
    assert_eq!(inspected["exit_status"], "Submitted");
    assert!(inspected["submission_sha256"].is_string(), "the run submitted a patch: {inspected}");
    assert_eq!(inspected["first_edit"]["step"], 4, "the fix is the fourth call: {inspected}");
    for step in inspected["per_step"].as_array().expect("per_step") {
        assert!(step["returncodes"].as_array().is_some_and(|r| r.iter().all(|c| c == 0)), "{step}");
    }
    let recorded_path = imported_dir.join("calc-1.json");
    let recorded: Value =
        serde_json::from_slice(&std::fs::read(&recorded_path).expect("the imported trajectory")).expect("JSON");
    assert_eq!(recorded["task"], task, "the imported trajectory carries the --task");
    let prefixes = prefixes(&recorded);
    // The native run's own request for call k carried the messages up to o_k: what a continuation
    // from h_k must send first.
    let native_sent = server.requests();
    for (k, request) in native_sent.iter().enumerate() {
        assert_eq!(
            request["messages"].as_array(),
            Some(&prefixes[&(k as u32)]),
            "the native run's request {k} is not the recorded prefix up to o_{k} on the wire"
        );
    }

    // 3. A study continuing it with the mini-swe-agent runner.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let store = format!("sqlite://{}", dir.path().join("coordinator.sqlite").display());
    let listen = format!("127.0.0.1:{port}");
    let mut coordinator =
        Process::spawn(dir.path(), "coordinator", &["coordinator", "--store", &store, "--listen", &listen]);
    coordinator.wait_for_port(port, COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let agents = repo.join("agents");
    let name = format!("e2e-msa-{}", std::process::id());
    let worker_args = [
        "worker",
        "--docker",
        "--name",
        &name,
        "--slots",
        "2",
        "--coordinator",
        &url,
        "--snapshot-budget-gb",
        "2",
        "--mini-swe-agent-python",
        &python,
        "--swebench-python",
        &swebench_python,
        "--agents-dir",
        &agents.to_string_lossy(),
        // A mini-swe-agent study's containers have the bridge its recorded environment had.
        "--network",
        "bridge",
    ];
    let mut worker = Process::spawn_worker(dir.path(), "worker", &worker_args);
    let runner = format!(
        "runner:\n  kind: mini-swe-agent\n  model: {{model_name: openai/mock-model, base_url: \"{}\"}}\n  memory_mb: 512\n  run_timeout_s: 300\n",
        server.base_url
    );
    let thresholds = "thresholds: {k_screen: 2, k_confirm: 4, k_pnr: 4, k_label: 2, k_label_raised: 4}\n";
    let spec = dir.path().join("continue.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: e2e-mini-swe-agent\nseed: 3\nbudget: 12\n{runner}{thresholds}trajectories:\n  - {{id: calc-1-native, recorded: {}}}\n",
            recorded_path.display()
        ),
    )
    .expect("write the spec");
    let study = vcurve_ok(&["launch", &spec.to_string_lossy(), "--coordinator", &url], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .trim()
        .to_string();

    // Continuations from h_0 and from some h_t, t ≥ 1, each seen at the server by its first request.
    let mut firsts: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let count_firsts = |firsts: &mut BTreeMap<u32, Vec<u64>>| {
        firsts.clear();
        for request in server.requests().iter().skip(native_requests) {
            let messages = request["messages"].as_array().cloned().unwrap_or_default();
            if let Some((t, _)) = prefixes.iter().find(|(_, p)| **p == messages) {
                let seed = request["seed"].as_u64().unwrap_or_else(|| panic!("a request without a seed: {request}"));
                firsts.entry(*t).or_default().push(seed);
            }
        }
    };
    let status = wait_for(&url, &study, "continuations from h_0 and from a later step", |status| {
        count_firsts(&mut firsts);
        status["done"].as_u64().unwrap_or(0) >= 4 && firsts.keys().any(|t| *t >= 1)
    });
    eprintln!(
        "continuation first requests by t: {:?}; status: done {} after {:.1} s",
        firsts.iter().map(|(t, s)| (*t, s.len())).collect::<Vec<_>>(),
        status["done"],
        started.elapsed().as_secs_f64()
    );
    assert!(status["retired"] == 0, "retired continuations: {status}");
    // The replay reproduced the run (otherwise no continuation would have started), and every
    // continuation had a seed of its own, none the native run's.
    let seeds: Vec<u64> = firsts.values().flatten().copied().collect();
    let distinct: BTreeSet<u64> = seeds.iter().copied().collect();
    assert_eq!(distinct.len(), seeds.len(), "two continuations shared a seed: {firsts:?}");
    assert!(!distinct.contains(&7), "a continuation used the native run's seed");
    assert!(seeds.iter().all(|s| *s < 1 << 63), "seeds are sent below 2^63 (vLLM's signed 64-bit): {seeds:?}");
    cancel_and_check_clean(&url, &study);

    // 4. Base runs from h_0 with the same adapter, in a study from a SWE-bench dataset, judged by
    // the harness.
    let before = server.requests().len();
    let mut row: Value = serde_json::from_slice(
        &std::fs::read(repo.join("agents/tests/fixtures/swebench/calc-1.json")).expect("the SWE-bench test instance"),
    )
    .expect("JSON");
    let harness_image = format!("swebench/sweb.eval.x86_64.vcurve_1776_calc-1:e2e-{}", std::process::id());
    let tagged = Command::new("docker").args(["tag", &image, &harness_image]).status().expect("run docker tag");
    assert!(tagged.success(), "docker tag {image} {harness_image} failed");
    let _untag = Untag(harness_image.clone());
    row["image"] = Value::String(harness_image.clone());
    let dataset = dir.path().join("verified.jsonl");
    std::fs::write(&dataset, format!("{row}\n")).expect("write the dataset");
    let spec = dir.path().join("base-runs.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: e2e-mini-swe-agent-base-runs\nseed: 2\nbudget: 12\n{runner}{thresholds}swebench:\n  \
             dataset: {}\n  instances: [vcurve__calc-1]\n  image_field: image\n  base_runs: 2\n",
            dataset.display()
        ),
    )
    .expect("write the spec");
    let study = vcurve_ok(&["launch", &spec.to_string_lossy(), "--coordinator", &url], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .trim()
        .to_string();
    // Both base runs are in once the selection has run: a trajectory picked, or none and done.
    wait_for(&url, &study, "the two base runs", |status| {
        status["state"] == "done" || status["trajectories"].as_u64().is_some_and(|n| n >= 1)
    });
    let export_dir = dir.path().join("base-runs-export");
    vcurve_ok(&["export", &study, "--coordinator", &url, "--out", &export_dir.to_string_lossy()], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let base_runs = std::fs::read_to_string(export_dir.join("base_runs.csv")).expect("the export's base_runs.csv");
    let rows: Vec<&str> = base_runs.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "two base runs:\n{base_runs}");
    for line in &rows {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.get(4), Some(&"submitted"), "the policy submits after its fix: {line}");
        assert_eq!(fields.get(3), Some(&"6"), "six model calls: {line}");
    }
    let successes = rows.iter().filter(|r| r.split(',').nth(2) == Some("true")).count();
    let requests = server.requests();
    let openers: Vec<&Value> =
        requests[before..].iter().filter(|r| r["messages"].as_array().is_some_and(|m| m.len() == 2)).collect();
    assert_eq!(openers.len(), 2, "each base run opens with mini-swe-agent's system and instance messages");
    for opener in &openers {
        let messages = opener["messages"].as_array().expect("messages");
        assert_eq!(messages[0]["role"], "system");
        assert_eq!(messages[1]["role"], "user");
        let instance = messages[1]["content"].as_str().expect("the instance message is text");
        assert!(
            instance.contains(row["problem_statement"].as_str().expect("a problem statement").trim()),
            "the instance message carries the instance's problem statement: {instance}"
        );
    }
    assert_ne!(openers[0]["seed"], openers[1]["seed"], "two base runs with one seed");
    // The fix each run wrote, as its later requests carry the reply (mock_openai.py tags it), and
    // the harness's verdicts: the correct fix resolves calc-1, the flawed one does not.
    let correct = openers
        .iter()
        .filter(|opener| {
            requests[before..].iter().any(|r| {
                r["seed"] == opener["seed"]
                    && r["messages"].as_array().is_some_and(|m| {
                        m.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains(", correct)")))
                    })
            })
        })
        .count();
    assert_eq!(successes, correct, "base runs judged resolved by the harness vs runs that wrote the correct fix");
    // With study seed 2 the worker's run seeds (SHA-256 of "2/vcurve__calc-1/base_run/{i}", below
    // 2^63) make the mock write the correct fix in base run 0 and the flawed one in base run 1
    // (mock_openai.Policy.fix_of, computed for seeds 1–14): one verdict of each kind.
    assert_eq!(successes, 1, "one base run resolved, one not:\n{base_runs}");
    let harness_left = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", "name=sweb.eval.vcurve__calc-1"])
        .output()
        .expect("run docker ps");
    assert!(harness_left.stdout.is_empty(), "the harness's containers are left behind");
    eprintln!("base runs:\n{base_runs}");
    cancel_and_check_clean(&url, &study);
    assert!(worker.is_running(), "the worker exited; see {}", worker.log().display());
    eprintln!("mini-swe-agent round trip: {:.1} s", started.elapsed().as_secs_f64());
}

/// Removes a tag it was given when dropped (the image stays under its other tags).
struct Untag(String);

impl Drop for Untag {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}
