//! Container tests: vcurve's `agent` runner on real Docker containers, driven as a user drives it
//! (the built `vcurve` binary as separate processes, the `docker` CLI to look at the engine).
//!
//! 1. `the_scripted_agent_study_recovers_the_known_truth_on_real_containers`: `vcurve demo
//!    --docker` runs the scripted known-truth agent (`agents/vcurve_agents/scripted.py`) on the
//!    test task `calc-1` and its random-token variant, from base runs through the selection to
//!    the online restart check; the exports must show what the agent's truth says (the decisive
//!    interval at its decision step, a cliff, a certified point of no return; the token
//!    trajectories refused at the token's step and back-filled from their stratum; the restart
//!    check's observed rates within their intervals of the true `R(x, B − t_r)`), every check of
//!    Table 4 measured and the `t = 0` sanity control passing, and no container of the study and
//!    no more snapshots than the worker's budget may be left behind.
//! 2. `a_worker_killed_mid_continuation_leaves_containers_that_its_restart_reaps`: a
//!    `vcurve worker --docker` process is SIGKILLed while a continuation's container runs; the
//!    container is left behind, the worker restarted under the same name removes it, and the
//!    study still ends with an outcome for every continuation and no container left.
//!
//! Both need the images `deploy/images/build` makes, and `VCURVE_TEST_TASK_IMAGE` naming the task
//! image (scripts/test builds them and exports it). They run one at a time ([`one_at_a_time`]):
//! they share the machine's cores and the engine's snapshot images, whose total the first checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vcurve_testkit::require::Service;

use serde_json::Value;
use vcurve_e2e::{Process, TestDir, docker, free_port, read_export, repository, try_status_json, vcurve_ok};

/// The task image scripts/test built (`task=…` of `deploy/images/build`).
const TASK_IMAGE_ENV: &str = "VCURVE_TEST_TASK_IMAGE";
/// The snapshot budget of the demo's worker (`cli/src/demo_docker.rs`: 4 GiB); the killed worker
/// of the second test gets the same, so that either test leaves the engine within it.
const SNAPSHOT_BUDGET_BYTES: u64 = 4 << 30;
const SNAPSHOT_BUDGET_GB: &str = "4";
/// How long the demo may take (about 8 minutes on 2 cores with its restart check; this is for a slow CI).
const DEMO_TIMEOUT: Duration = Duration::from_secs(1500);
/// How long the second test's study may take to reach a continuation, and to finish.
const STUDY_TIMEOUT: Duration = Duration::from_secs(900);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the engine and the coordinator are polled: each poll is a process on 2 busy cores.
const POLL: Duration = Duration::from_millis(500);

static DOCKER: Mutex<()> = Mutex::new(());

/// Held for the whole of a test: the tests of this file run one at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    DOCKER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The task image, which must exist on the engine.
fn task_image() -> String {
    let image = std::env::var(TASK_IMAGE_ENV).ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| {
        panic!(
            "{TASK_IMAGE_ENV} is not set: the container tests run through scripts/test, which builds the images \
             with deploy/images/build and exports {TASK_IMAGE_ENV} (or set it to the task=… tag that \
             deploy/images/build prints)"
        )
    });
    let inspected = Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", &image]).output();
    match inspected {
        Ok(out) if out.status.success() => image,
        Ok(out) => panic!(
            "{TASK_IMAGE_ENV}={image} is not an image of the Docker Engine (run scripts/test, which builds it): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("cannot run docker (the container tests need the docker CLI and a running engine): {e}"),
    }
}

/// One container the engine lists.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ContainerRow {
    id: String,
    job: String,
}

/// The containers (`all`: stopped ones too) carrying every label of `labels` (`key=value`).
fn containers(labels: &[String], all: bool) -> Vec<ContainerRow> {
    let mut args: Vec<String> = vec!["ps".into(), "--no-trunc".into()];
    if all {
        args.push("-a".into());
    }
    for label in labels {
        args.push("--filter".into());
        args.push(format!("label={label}"));
    }
    args.push("--format".into());
    args.push("{{.ID}}\t{{.Label \"vcurve.job\"}}".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&args)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (id, job) = l.split_once('\t').unwrap_or((l, ""));
            ContainerRow { id: id.trim().to_string(), job: job.trim().to_string() }
        })
        .collect()
}

/// Every container of a study, running or not.
fn study_containers(study: &str) -> Vec<ContainerRow> {
    containers(&["vcurve.managed=1".to_string(), format!("vcurve.study={study}")], true)
}

/// The step `t` of a continuation of the main series from its job label
/// (`STUDY/TRAJECTORY/main/T/SEED`); `None` for any other job.
fn continuation_step(job: &str) -> Option<u32> {
    match job.split('/').collect::<Vec<_>>()[..] {
        [_, _, "main", t, _] => t.parse().ok(),
        _ => None,
    }
}

/// Whether the engine still has a container of this id (running or not).
fn container_exists(id: &str) -> bool {
    !docker(&["ps", "-a", "-q", "--no-trunc", "--filter", &format!("id={id}")]).trim().is_empty()
}

/// The managed images (snapshots) and the sum of their own layers: the newest entry of each
/// image's history, as the worker's snapshot cache counts them.
fn managed_images() -> (usize, u64) {
    let ids: BTreeSet<String> = docker(&["images", "-q", "--no-trunc", "--filter", "label=vcurve.managed=1"])
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let bytes = ids
        .iter()
        .map(|id| {
            let history = docker(&["history", "--human=false", "--no-trunc", "--format", "{{.Size}}", id]);
            let own = history.lines().next().unwrap_or("0").trim();
            own.parse::<u64>().unwrap_or_else(|_| panic!("docker history of {id} gave no size in bytes: {own:?}"))
        })
        .sum();
    (ids.len(), bytes)
}

/// Poll `condition` every [`POLL`] until it holds (true) or `timeout` passes (false).
fn poll(timeout: Duration, condition: impl FnMut() -> bool) -> bool {
    vcurve_e2e::wait_every(timeout, POLL, condition)
}

/// The rows of a CSV file vcurve wrote, by column.
fn read_csv(path: &Path) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    csv_rows(&text, &path.display().to_string())
}

fn csv_rows(text: &str, what: &str) -> Vec<BTreeMap<String, String>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().unwrap_or_else(|e| panic!("{what}: no header: {e}")).clone();
    reader
        .records()
        .map(|row| {
            let row = row.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(row.len(), header.len(), "{what}: a row of another width than the header: {row:?}");
            header.iter().zip(row.iter()).map(|(h, f)| (h.to_string(), f.to_string())).collect()
        })
        .collect()
}

fn number(row: &BTreeMap<String, String>, column: &str) -> u64 {
    let value = row.get(column).unwrap_or_else(|| panic!("no column {column} in {row:?}"));
    value.parse().unwrap_or_else(|_| panic!("{column} = {value:?} is not a whole number in {row:?}"))
}

/// An exported study's trajectories by id, from results.json.
fn results_by_id(results: &Value) -> BTreeMap<String, Value> {
    results["trajectories"]
        .as_array()
        .expect("results.json lists trajectories")
        .iter()
        .map(|t| (t["trajectory"].as_str().expect("a trajectory id").to_string(), t.clone()))
        .collect()
}

/// The export agrees with itself: per trajectory, the continuations of trajectories.csv, of
/// results.json and the `n` of its points in curves.csv (every series) are one count, and no point
/// has more successes than runs. Returns the study's total.
fn check_export_consistent(export: &BTreeMap<String, Vec<u8>>) -> u64 {
    let text = |name: &str| String::from_utf8(export[name].clone()).unwrap_or_else(|_| panic!("{name} is not UTF-8"));
    let trajectories = csv_rows(&text("trajectories.csv"), "trajectories.csv");
    let curves = csv_rows(&text("curves.csv"), "curves.csv");
    let results: Value = serde_json::from_slice(&export["results.json"]).expect("results.json is JSON");
    let results = results_by_id(&results);
    let mut in_curves: BTreeMap<&str, u64> = BTreeMap::new();
    for point in &curves {
        assert!(number(point, "successes") <= number(point, "n"), "curves.csv: more successes than runs: {point:?}");
        *in_curves.entry(point["trajectory"].as_str()).or_default() += number(point, "n");
    }
    let mut total = 0;
    for row in &trajectories {
        let id = row["trajectory"].as_str();
        let continuations = number(row, "continuations");
        assert_eq!(
            in_curves.get(id).copied().unwrap_or(0),
            continuations,
            "{id}: curves.csv's points count other runs than trajectories.csv's continuations"
        );
        assert_eq!(
            results[id]["continuations"].as_u64(),
            Some(continuations),
            "{id}: results.json counts other continuations than trajectories.csv"
        );
        total += continuations;
    }
    total
}

/// Test 1: the scripted-agent study of `vcurve demo --docker`, checked against the truth it writes.
#[test]
fn the_scripted_agent_study_recovers_the_known_truth_on_real_containers() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let _one = one_at_a_time();
    let image = task_image();
    let started = Instant::now();
    let dir = TestDir::new("containers-demo");
    let out = dir.path().join("demo");
    let out_arg = out.to_string_lossy().into_owned();
    // Eight base runs of each task (the demo's seed: its cli/src/demo_docker.rs says what they
    // draw), three slots on 2 cores.
    let mut demo = Process::spawn(
        dir.path(),
        "demo",
        &["demo", "--docker", "--out", &out_arg, "--slots", "3", "--base-runs", "8"],
    );
    let status = demo.wait_exit(DEMO_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let log = std::fs::read_to_string(demo.log()).unwrap_or_default();
    assert!(status.success(), "vcurve demo --docker failed ({status}); see {}", demo.log().display());
    eprintln!("vcurve demo --docker: {:.1} s", started.elapsed().as_secs_f64());
    let study = log
        .lines()
        .find_map(|l| l.strip_prefix("study ").and_then(|rest| rest.split_once(" and its restart check ")))
        .map(|(id, rest)| (id.to_string(), rest.split_whitespace().next().unwrap_or("").to_string()))
        .unwrap_or_else(|| {
            panic!(
                "the demo printed no `study ID and its restart check ID finished in` line; see {}",
                demo.log().display()
            )
        });
    let (study, check_id) = study;

    // The demo ran on the image scripts/test built.
    let task: Value = serde_json::from_str(&std::fs::read_to_string(out.join("tasks/calc-1.json")).expect("tasks/"))
        .expect("the demo's task JSON");
    assert_eq!(task["image"].as_str(), Some(image.as_str()), "the demo's task image is not {TASK_IMAGE_ENV}");

    let export = read_export(&out);
    check_export_consistent(&export);
    let truth = read_csv(&out.join("truth.csv"));
    let rows: BTreeMap<String, BTreeMap<String, String>> =
        read_csv(&out.join("trajectories.csv")).into_iter().map(|r| (r["trajectory"].clone(), r)).collect();
    let results: Value = serde_json::from_slice(&export["results.json"]).expect("results.json is JSON");
    let by_id = results_by_id(&results);
    let analyses: Value = serde_json::from_slice(&export["analyses.json"]).expect("analyses.json is JSON");
    let summary = log.lines().skip_while(|l| !l.starts_with("trajectory ")).take(20).collect::<Vec<_>>().join("\n");
    eprintln!("{summary}");
    assert_eq!(
        truth.iter().map(|t| &t["trajectory"]).collect::<BTreeSet<_>>(),
        rows.keys().collect::<BTreeSet<_>>(),
        "truth.csv and trajectories.csv name other trajectories"
    );

    // Every wrong-hypothesis trajectory: a cliff at the decision step D, and no return after it.
    let wrong: Vec<_> =
        truth.iter().filter(|t| t["wrong_hypothesis"] == "true" && t["random_token_step"].is_empty()).collect();
    assert!(
        !wrong.is_empty(),
        "no trajectory took the wrong hypothesis: nothing to check the curves against\n{summary}"
    );
    for t in &wrong {
        let id = &t["trajectory"];
        let d = number(t, "decision_step");
        let row = &rows[id];
        let (a, b) = (number(row, "decisive_a"), number(row, "decisive_b"));
        assert!(
            (a < d && d <= b) || b.abs_diff(d) <= 1,
            "{id}: the decisive interval ({a}, {b}] neither contains D = {d} nor ends within one step of it: {row:?}"
        );
        assert_eq!(row["shape"], "cliff", "{id}: a drop from V(h_0) to 0 at one step is a cliff: {row:?}");
        assert_eq!(row["pnr_certified"], "true", "{id}: the point of no return is not certified: {row:?}");
        let pnr = number(row, "pnr");
        assert!(pnr >= d, "{id}: the point of no return {pnr} is before D = {d}, where V(h_t) is still q·r: {row:?}");
    }

    // Base runs record their fingerprints (the worker reads the writable layer here): a replay of
    // a trajectory drawn from one compares them with the original run's and records none itself.
    let replayed: Vec<_> =
        by_id.iter().filter_map(|(id, r)| Some((id, r.get("replay").filter(|p| !p.is_null())?))).collect();
    assert!(!replayed.is_empty(), "no trajectory was replayed");
    for (id, replay) in replayed {
        assert!(
            replay["fingerprints"].is_null(),
            "{id}: the replay recorded fingerprints, so its base run had none: {replay}"
        );
    }

    // Every random-token trajectory: refused at the token's step, never continued.
    let token: Vec<_> = truth.iter().filter(|t| !t["random_token_step"].is_empty()).collect();
    assert!(!token.is_empty(), "no trajectory of the random-token variant failed: nothing refused to check\n{summary}");
    for t in &token {
        let id = &t["trajectory"];
        let k = number(t, "random_token_step");
        let result = &by_id[id];
        assert_eq!(
            result["non_replayable"]["step"].as_u64(),
            Some(k),
            "{id}: not found non-replayable at the random token's step {k}: {}",
            result["non_replayable"]
        );
        assert!(
            result["non_replayable"]["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{id}: non-replayable without a reason: {}",
            result["non_replayable"]
        );
        assert_eq!(rows[id]["shape"], "non_replayable", "{id}: {:?}", rows[id]);
        assert_eq!(number(&rows[id], "continuations"), 0, "{id}: a non-replayable trajectory was continued");
    }

    // The `t = 0` sanity control (controls: {sanity: 2}): continuations from h_0 agree with the base
    // runs on every trajectory that carried it, and Table 4's check says so.
    // A back-filled trajectory's replacement carries its controls: count the ones that replayed.
    let carriers: BTreeSet<&String> = by_id
        .iter()
        .filter(|(_, t)| t["controls"]["sanity"] == true && t["non_replayable"].is_null())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(carriers.len(), 2, "controls: {{sanity: 2}} put the control on {carriers:?}");
    let sanity = &analyses["sanity"];
    let sanity_rows =
        sanity["rows"].as_array().unwrap_or_else(|| panic!("analyses.json: sanity not measured: {sanity}"));
    assert_eq!(
        sanity_rows.iter().filter_map(|r| r["trajectory"].as_str()).collect::<BTreeSet<_>>(),
        carriers.iter().map(|c| c.as_str()).collect::<BTreeSet<_>>(),
        "analyses.json: the sanity rows are not the carriers'"
    );
    for row in sanity_rows {
        // Deterministic given the demo's seed (SEED in cli/src/demo_docker.rs, chosen so that its
        // draws are typical): a failure here is a change in what the runs draw or in the control.
        assert_eq!(row["passes"], true, "the t = 0 sanity control fails: {row}");
    }
    let check = analyses["checks"]["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == "t0_sanity"))
        .unwrap_or_else(|| panic!("analyses.json: no t0_sanity check: {}", analyses["checks"]));
    assert_eq!(check["status"], "pass", "Table 4's t = 0 sanity check: {check}");

    // Studies from tasks: the selection drew the set from both tasks' base runs, and a trajectory
    // that printed the token was dropped and back-filled from its stratum (or found it exhausted).
    let selection: Value = serde_json::from_slice(&std::fs::read(out.join("selection.json")).expect("selection.json"))
        .expect("selection.json is JSON");
    let verdicts: BTreeMap<&str, &str> = selection["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["task"].as_str()?, t["verdict"].as_str()?)))
        .collect();
    assert_eq!(verdicts, BTreeMap::from([("calc-1", "band"), ("calc-1-token", "band")]), "{selection}");
    let back_fills = selection["back_fills"].as_array().cloned().unwrap_or_default();
    assert_eq!(back_fills.len(), token.len(), "one back-fill per dropped token trajectory: {back_fills:?}");
    assert!(
        back_fills.iter().any(|e| e["result"]["result"] == "replaced"),
        "no token trajectory was replaced from its stratum: {back_fills:?}"
    );
    // Table 4 fully measured: every check has a value.
    for c in analyses["checks"]["checks"].as_array().expect("analyses.json: checks") {
        assert_ne!(c["status"], "not_measured", "Table 4 has a check not measured: {c}");
    }

    // The online restart check: every trajectory with a restart point, and each one's observed
    // rate within its 95% Wilson interval of the agent's true R(x, B − t_r) (deterministic given
    // the seeds; a failure is a change in what the runs draw or in the check).
    let text = std::fs::read_to_string(out.join("restart_check.csv")).expect("DIR/restart_check.csv");
    assert_eq!(
        text.lines().next(),
        Some("trajectory,restart_point,runs,successes,observed,wilson_lo,wilson_hi,predicted,continuing")
    );
    let rows_rc = read_csv(&out.join("restart_check.csv"));
    let with_restart: BTreeSet<&String> =
        rows.iter().filter(|(_, r)| !r["restart_point"].is_empty()).map(|(id, _)| id).collect();
    assert_eq!(rows_rc.iter().map(|r| &r["trajectory"]).collect::<BTreeSet<_>>(), with_restart, "restart_check.csv");
    assert!(!rows_rc.is_empty(), "no trajectory has a restart point: nothing was checked");
    let v0: BTreeMap<&String, f64> =
        truth.iter().map(|t| (&t["trajectory"], t["v0"].parse::<f64>().expect("truth.csv v0"))).collect();
    for r in &rows_rc {
        let id = &r["trajectory"];
        let (lo, hi) = (r["wilson_lo"].parse::<f64>().unwrap(), r["wilson_hi"].parse::<f64>().unwrap());
        // B = 30 and T = 13: a fresh run after any restart point up to 17 can still submit.
        assert!(number(r, "restart_point") <= 17, "{id}: {r:?}");
        let truth = v0[id];
        assert!(lo <= truth && truth <= hi, "{id}: the true R(x, B − t_r) = {truth} is outside [{lo}, {hi}]: {r:?}");
        assert_eq!(number(r, "runs"), 8, "{id}: {r:?}");
    }
    assert!(!check_id.is_empty(), "the restart check's id");
    // The study's report shows its check.
    let report_dir = dir.path().join("report");
    vcurve_ok(&["report", "--from", &out_arg, "--out", &report_dir.to_string_lossy()], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let page = std::fs::read_to_string(report_dir.join("report.html")).expect("report.html");
    assert!(page.contains("id=\"restart_check\""), "the study's report has no restart check section");

    // Issue 28: replay measured every replayed trajectory's first edit — the scripted agent writes
    // its fix at F = D + 2 = 10, the first change to a file of the repository — and its first
    // symptom, and the report shows a note under each figure that says both.
    const FIX_STEP: u64 = 10;
    let replayed: Vec<&String> =
        by_id.iter().filter(|(_, t)| t["non_replayable"].is_null()).map(|(id, _)| id).collect();
    assert!(!replayed.is_empty(), "no trajectory replayed");
    for id in &replayed {
        let t = &by_id[*id];
        assert_eq!(t["first_edit"].as_u64(), Some(FIX_STEP), "{id}: first edit {}", t["first_edit"]);
        assert_eq!(t["first_edit_source"], "replay", "{id}");
        let symptom = &t["first_symptom"];
        assert!(symptom == "never" || symptom.as_u64().is_some_and(|s| s > FIX_STEP), "{id}: first symptom {symptom}");
    }
    let notes = read_csv(&out.join("notes.csv"));
    assert_eq!(notes.len(), by_id.len(), "notes.csv: one row per trajectory");
    for n in &notes {
        eprintln!("note: {}", n["note"]);
        if replayed.contains(&&n["trajectory"]) {
            assert_eq!(n["first_edit"], FIX_STEP.to_string(), "{n:?}");
            assert!(!n["first_symptom"].is_empty(), "{n:?}");
            assert!(n["note"].contains(&format!("the first edit (edit at {FIX_STEP})")), "{n:?}");
            assert!(
                n["note"].contains("no explicit failure signal") || n["note"].contains("first failure signal at"),
                "{n:?}"
            );
        }
    }
    let figures = page.matches("<figure ").count();
    assert_eq!(figures, replayed.len(), "one figure per replayed trajectory");
    assert_eq!(page.matches("<figcaption class=\"note\">").count(), figures, "a note under each figure");
    assert_eq!(page.matches(&format!("the first edit (edit at {FIX_STEP})")).count(), figures, "{page}");
    assert!(study_containers(&check_id).is_empty(), "containers of the restart check left after the demo");

    // Nothing left behind: no container of the study, and snapshots within the worker's budget.
    let left = study_containers(&study);
    assert!(left.is_empty(), "containers of study {study} left after the demo: {left:?}");
    let (images, bytes) = managed_images();
    eprintln!("managed images on the engine after the demo: {images}, {:.1} MB of own layers", bytes as f64 / 1e6);
    assert!(
        bytes <= SNAPSHOT_BUDGET_BYTES,
        "{images} managed images hold {bytes} bytes of own layers, over the demo worker's budget of {SNAPSHOT_BUDGET_BYTES}"
    );
    eprintln!("test 1 (the scripted-agent study): {:.1} s", started.elapsed().as_secs_f64());
}

/// The study of the second test: [`vcurve_e2e::write_scripted_calc_spec`], the scripted agent its
/// worker registers from this checkout's agents.
fn write_kill_spec(dir: &Path, task_json: &str) -> PathBuf {
    vcurve_e2e::write_scripted_calc_spec(dir, "e2e-worker-kill", task_json)
}

/// Test 2: a worker SIGKILLed while a continuation's container runs.
#[test]
fn a_worker_killed_mid_continuation_leaves_containers_that_its_restart_reaps() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let _one = one_at_a_time();
    let image = task_image();
    let started = Instant::now();
    let dir = TestDir::new("containers-kill");

    let built = Command::new(repository().join("deploy/images/build"))
        .arg("--print-task")
        .current_dir(repository())
        .output()
        .expect("run deploy/images/build --print-task");
    assert!(
        built.status.success(),
        "deploy/images/build --print-task failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let task_json = String::from_utf8(built.stdout).expect("the task JSON is UTF-8");
    let task: Value = serde_json::from_str(&task_json).expect("deploy/images/build --print-task prints JSON");
    assert_eq!(task["image"].as_str(), Some(image.as_str()), "--print-task names another image than {TASK_IMAGE_ENV}");
    let spec = write_kill_spec(dir.path(), &task_json);

    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let store = format!("sqlite://{}", dir.path().join("coordinator.sqlite").display());
    let listen = format!("127.0.0.1:{port}");
    let coordinator_args =
        ["coordinator", "--store", &store, "--listen", &listen, "--lease-timeout-ms", "5000", "--heartbeat-ms", "1000"];
    let mut coordinator = Process::spawn(dir.path(), "coordinator", &coordinator_args);
    coordinator.wait_for_port(port, COMMAND_TIMEOUT).unwrap_or_else(|e| panic!("{e:#}"));
    let name = format!("e2e-kill-{}", std::process::id());
    let agents = repository().join("agents");
    let agents = agents.to_string_lossy();
    let worker_args = [
        "worker",
        "--docker",
        "--agent",
        "scripted",
        "--agents-dir",
        &agents,
        "--name",
        &name,
        "--slots",
        "2",
        "--coordinator",
        &url,
        "--snapshot-budget-gb",
        SNAPSHOT_BUDGET_GB,
    ];
    let mut worker = Process::spawn_worker(dir.path(), "worker", &worker_args);
    let spec_arg = spec.to_string_lossy();
    let study = vcurve_ok(&["launch", &spec_arg, "--coordinator", &url], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .trim()
        .to_string();

    // A continuation from a snapshot (t ≥ 1, after the base runs, the replay and the first screened
    // point) in flight: then the SIGKILL. A continuation from a snapshot takes about a second here,
    // too short to catch by listing twice, so the worker is frozen (SIGSTOP) as soon as one is
    // listed: frozen, it removes nothing, so what is listed then is what its jobs hold at the
    // kill. None from t ≥ 1 among them (the one seen had just ended): thawed, and tried again.
    let worker_label = [format!("vcurve.worker={name}")];
    let mid_run = || -> Vec<ContainerRow> {
        containers(&worker_label, false)
            .into_iter()
            .filter(|c| continuation_step(&c.job).is_some_and(|t| t >= 1))
            .collect()
    };
    let mut victims = Vec::new();
    let found = poll(STUDY_TIMEOUT, || {
        if mid_run().is_empty() {
            return false;
        }
        assert!(worker.freeze(), "the worker {name} exited; see {}", worker.log().display());
        victims = mid_run();
        if victims.is_empty() {
            worker.thaw();
            return false;
        }
        worker.kill9();
        true
    });
    assert!(found, "no continuation from t ≥ 1 ran on worker {name} within {STUDY_TIMEOUT:?}");
    let at_kill = try_status_json(&url, &study).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "worker {name} SIGKILLed {:.1} s in, with {} continuations done, while running {:?}",
        started.elapsed().as_secs_f64(),
        at_kill["done"],
        victims.iter().map(|c| &c.job).collect::<Vec<_>>()
    );

    // Left behind by the dead worker: its containers at the kill, the victims among them.
    let left: Vec<ContainerRow> = containers(&worker_label, true);
    assert!(
        !left.is_empty(),
        "the killed worker {name} left no container behind (it was running {victims:?} a moment before)"
    );
    for victim in &victims {
        assert!(left.contains(victim), "the killed worker's container {victim:?} is gone before its restart: {left:?}");
    }
    // ...and reaped by its restart under the same name: every container of the killed life.
    worker.restart();
    let restarted = Instant::now();
    let reaped = poll(Duration::from_secs(120), || !left.iter().any(|c| container_exists(&c.id)));
    assert!(
        reaped,
        "the restarted worker {name} did not remove the containers its killed life left: {:?}",
        left.iter().filter(|c| container_exists(&c.id)).collect::<Vec<_>>()
    );
    eprintln!(
        "{} left-behind containers reaped {:.1} s after the restart",
        left.len(),
        restarted.elapsed().as_secs_f64()
    );
    assert!(worker.is_running(), "the restarted worker exited; see {}", worker.log().display());

    // The study ends with an outcome for every continuation, none retired.
    let mut last = Value::Null;
    let done = poll(STUDY_TIMEOUT, || match try_status_json(&url, &study) {
        Ok(status) => {
            assert_ne!(status["state"], "cancelled", "the study was cancelled: {status}");
            let done = status["state"] == "done";
            last = status;
            done
        }
        Err(_) => false,
    });
    assert!(done, "the study did not finish within {STUDY_TIMEOUT:?}; last status: {last}");
    let count = |field: &str| last[field].as_u64().unwrap_or_else(|| panic!("status has no integer {field}: {last}"));
    assert_eq!(count("retired"), 0, "a continuation was retired (three runs without an outcome): {last}");
    assert_eq!((count("running"), count("pending")), (0, 0), "work left in a done study: {last}");
    // A done study's status carries its checks (Table 4) with their verdict.
    assert!(
        last["checks"]["verdict"].is_string() && last["checks"]["checks"].as_array().is_some_and(|c| !c.is_empty()),
        "the status of a done study has no checks: {last}"
    );
    let export_dir = dir.path().join("export");
    let export_arg = export_dir.to_string_lossy();
    vcurve_ok(&["export", &study, "--coordinator", &url, "--out", &export_arg], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let export = read_export(&export_dir);
    let exported = check_export_consistent(&export);
    assert_eq!(exported, count("done"), "the export counts {exported} continuations; status: {last}");
    let results: Value = serde_json::from_slice(&export["results.json"]).expect("results.json is JSON");
    let by_id = results_by_id(&results);
    let continued: Vec<&String> =
        by_id.iter().filter(|(_, t)| t["continuations"].as_u64().is_some_and(|n| n > 0)).map(|(id, _)| id).collect();
    assert!(
        !continued.is_empty(),
        "no trajectory was continued: {}",
        String::from_utf8_lossy(&export["trajectories.csv"])
    );
    for id in &continued {
        let base_runs = by_id[*id]["base_runs"].as_array().expect("an agent trajectory's base runs");
        assert!(
            base_runs.iter().any(|r| r["success"] == true) && base_runs.iter().any(|r| r["success"] == false),
            "{id}: the seed was chosen for a base run that fails and one that passes: {base_runs:?}"
        );
        assert_eq!(by_id[*id]["retired"].as_u64(), Some(0), "{id}: retired continuations");
    }
    for victim in &victims {
        let trajectory = victim.job.split('/').nth(1).unwrap_or_default();
        assert!(
            by_id.contains_key(trajectory),
            "the killed continuation {} names no trajectory of the export",
            victim.job
        );
    }

    // Nothing of the study left on the engine.
    let left = study_containers(&study);
    assert!(left.is_empty(), "containers of study {study} left after it finished: {left:?}");
    eprintln!(
        "test 2 (worker killed mid-continuation): {exported} continuations, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
