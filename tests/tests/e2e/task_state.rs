//! The task-state study end to end (docs/task-state.md): `vcurve demo --task-state` on real
//! containers and the deterministic model server reproduces its known truth exactly, in every
//! table; the export it writes is what `vcurve report` and `vcurve annotate` read.

use std::time::{Duration, Instant};

use serde_json::Value;
use vcurve_e2e::{Process, TestDir, vcurve_ok};
use vcurve_testkit::require::Service;

const DEMO_TIMEOUT: Duration = Duration::from_secs(900);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

fn json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_task_state_demo_measures_exactly_its_known_truth() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let started = Instant::now();
    let dir = TestDir::new("task-state-demo");
    let out = dir.path().join("demo");
    let out_arg = out.to_string_lossy().into_owned();
    let mut demo = Process::spawn(dir.path(), "demo", &["demo", "--task-state", "--out", &out_arg, "--slots", "4"]);
    let status = demo.wait_exit(DEMO_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let log = std::fs::read_to_string(demo.log()).unwrap_or_default();
    assert!(status.success(), "vcurve demo --task-state failed ({status}):\n{log}");
    eprintln!("vcurve demo --task-state: {:.1} s", started.elapsed().as_secs_f64());
    assert!(log.contains("measured equals truth"), "{log}");

    // truth.json beside the export's task_state.json: the same accuracy object, key for key and
    // exactly, and the same tables.
    let truth = json(&out.join("truth.json"));
    let measured = json(&out.join("task_state.json"));
    let keys: Vec<&String> = truth["accuracy"].as_object().unwrap().keys().collect();
    for view in ["latest_report", "reports", "scrollback", "full_minus_reasoning", "full", "task_only", "actor"] {
        assert!(keys.iter().any(|k| k.as_str() == view), "truth.json has no {view}: {keys:?}");
    }
    assert_eq!(measured["accuracy"], truth["accuracy"], "accuracy measured ≠ truth");
    assert_eq!(measured["report"], truth["report"], "the tables measured ≠ truth");
    // The reports of the quiet task say nothing, so U recovers less than T.
    let (u, t) = (truth["accuracy"]["reports"].as_f64().unwrap(), truth["accuracy"]["full"].as_f64().unwrap());
    assert!(u < t, "U {u} ≥ T {t}");
    for file in
        ["probes.csv", "answers.csv", "scores.csv", "calls.csv", "figures/task_state.svg", "figures/task_state.png"]
    {
        assert!(out.join(file).is_file(), "{file} missing from the export");
    }
    // Every call logged with its template's hash; the sessions' view texts kept by digest.
    let calls = std::fs::read_to_string(out.join("calls.csv")).unwrap();
    assert!(calls.lines().count() > 100, "{} calls", calls.lines().count());
    assert!(calls.lines().skip(1).all(|l| l.contains("task_state.")), "a call without its template");
    for v in measured["views"].as_array().unwrap() {
        let digest = v["digest"].as_str().unwrap();
        assert!(out.join("views").join(format!("{digest}.txt")).is_file(), "view {digest} not written");
    }

    // The report of the export, and an annotation sample of its gap atoms.
    let report_dir = dir.path().join("report");
    let printed = vcurve_ok(&["report", "--from", &out_arg, "--out", report_dir.to_str().unwrap()], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(printed.trim().ends_with("report.html"), "{printed}");
    let html = std::fs::read_to_string(report_dir.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("Telescoping"), "the report has no Figure 2 or Table 13");
    let annotation = dir.path().join("annotation");
    let sampled = vcurve_ok(
        &["annotate", "sample", "--from", &out_arg, "--out", annotation.to_str().unwrap(), "--atoms", "20"],
        COMMAND_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(sampled.contains("gap atoms"), "{sampled}");
    assert!(annotation.join("annotation.csv").is_file());
}

/// A task-state study launched from a spec against an OpenAI-compatible endpoint (the
/// deterministic server, answering with 429s, 500s and a timeout now and then), through a worker
/// process and a coordinator on PostgreSQL that is SIGKILLed mid-study and started again: it ends
/// with exactly the demo's truth for the same sessions, every fault retried and logged, and no
/// call whose answer was stored asked again.
#[test]
fn a_task_state_study_on_postgres_survives_a_coordinator_kill_and_asks_no_stored_call_again() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Postgres);
    use vcurve_testkit::model_server::{Fault, ModelServer};
    let dir = TestDir::new("task-state-postgres");
    // The demo first: its spec and its truth, on sessions a run of the same spec records again.
    let demo = dir.path().join("demo");
    let demo_arg = demo.to_string_lossy().into_owned();
    let mut run = Process::spawn(dir.path(), "demo", &["demo", "--task-state", "--out", &demo_arg, "--slots", "4"]);
    assert!(run.wait_exit(DEMO_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}")).success(), "the demo failed");
    let truth = json(&demo.join("truth.json"));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(ModelServer::start()).unwrap();
    let spec = std::fs::read_to_string(demo.join("demo-study.yaml")).unwrap();
    let old_url = spec.split("base_url: \"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_string();
    // A per-request timeout of 2 s, so that a delayed answer times out and is asked again.
    let spec =
        spec.replace(&old_url, &server.base_url()).replace("thinking: none}", "thinking: none, request_timeout_s: 2}");
    let spec_path = demo.join("postgres-study.yaml");
    std::fs::write(&spec_path, spec).unwrap();

    let (postgres, _database) = vcurve_e2e::fresh_postgres();
    let port = vcurve_e2e::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let coordinator_args = [
        "coordinator",
        "--store",
        &postgres,
        "--listen",
        &listen,
        "--lease-timeout-ms",
        "5000",
        "--heartbeat-ms",
        "1000",
    ];
    let mut coordinator = Process::spawn(dir.path(), "coordinator", &coordinator_args);
    coordinator.wait_for_port(port, COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let agents = vcurve_e2e::repository().join("agents");
    let agents = agents.to_string_lossy();
    let endpoint = server.base_url();
    let worker_args = [
        "worker",
        "--docker",
        "--agent",
        "scripted",
        "--agents-dir",
        &agents,
        "--name",
        "ts-worker",
        "--slots",
        "4",
        "--coordinator",
        &url,
        "--model-endpoint",
        &endpoint,
    ];
    let mut worker = Process::spawn_worker(dir.path(), "worker", &worker_args);
    let spec_arg = spec_path.to_string_lossy();
    let study = vcurve_ok(&["launch", &spec_arg, "--coordinator", &url], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .trim()
        .to_string();

    // Faults once the model stages run; then the coordinator is killed while calls are answered.
    let judges_done = |status: &Value| {
        status["call_stages"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["stage"] == "judge"))
            .and_then(|s| s["done"].as_u64())
            .unwrap_or(0)
    };
    let started = vcurve_e2e::wait_until(DEMO_TIMEOUT, || {
        vcurve_e2e::try_status_json(&url, &study).is_ok_and(|s| {
            s["call_stages"].as_array().is_some_and(|st| st.iter().any(|s| s["stage"] == "atoms" && s["done"] != 0))
        })
    });
    assert!(started, "no extraction was answered; see {}", dir.path().display());
    server.inject(Fault::RateLimited { retry_after_secs: 1 }, 2);
    server.inject(Fault::ServerError, 2);
    server.inject(Fault::Delay(Duration::from_secs(4)), 1);
    let reached = vcurve_e2e::wait_until(DEMO_TIMEOUT, || {
        vcurve_e2e::try_status_json(&url, &study).is_ok_and(|s| judges_done(&s) >= 40)
    });
    assert!(reached, "the judges did not start; see {}", dir.path().display());
    coordinator.kill9();
    coordinator.restart();
    coordinator.wait_for_port(port, COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let done = vcurve_e2e::wait_until(DEMO_TIMEOUT, || {
        vcurve_e2e::try_status_json(&url, &study).is_ok_and(|s| s["state"] == "done")
    });
    assert!(done, "the study did not finish after the kill; see {}", dir.path().display());
    assert!(worker.is_running(), "the worker exited; see {}", worker.log().display());

    let out = dir.path().join("export");
    vcurve_ok(&["export", &study, "--coordinator", &url, "--out", &out.to_string_lossy()], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let measured = json(&out.join("task_state.json"));
    assert_eq!(measured["accuracy"], truth["accuracy"], "accuracy after the faults and the kill ≠ truth");
    assert_eq!(measured["report"], truth["report"], "the tables after the faults and the kill ≠ truth");

    // Every request the server had is a logged attempt of a stored call, but for the few whose
    // answers were in flight when the coordinator died (at most the worker's slots): no stored
    // call was asked again.
    let calls = std::fs::read_to_string(out.join("calls.csv")).unwrap();
    let logged = calls.lines().count() as u64 - 1;
    let requests: u64 = server.requests_by_template().values().sum();
    assert!(requests >= logged && requests <= logged + 4, "{requests} requests for {logged} logged attempts");
    // The faults were retried and logged as failed attempts of calls that then succeeded.
    let failed = calls.lines().filter(|l| l.contains("failed")).count();
    assert!(failed >= 5, "{failed} failed attempts logged; 5 faults were injected:\n{calls}");
    drop(worker);
}
