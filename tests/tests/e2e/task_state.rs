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
