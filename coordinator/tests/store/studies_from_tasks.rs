//! Studies from tasks through the coordinator, on both backends: base runs, then the selection
//! once every base run is in, back-fills of non-replayable picks from their stratum, and the
//! online restart check as a study of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::Renderer;
use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{
    HeldJob, JobKey, JobKind, JobReport, LeasedJob, ReportVerdict, StudyState, TrajectoryState,
};
use vcurve_coordinator::render::{RenderError, TrajectorySummary};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_coordinator::testing::recorded_trajectory;
use vcurve_method::selection::{BackFill, Verdict};
use vcurve_record::jobs::{Judged, NonReplayable, RunOutcome};
use vcurve_record::{EndType, RestartCheckRow, StudyRecord};
use vcurve_testkit::store::TestStore;

const T0: i64 = 1_700_000_000_000;

/// Renders only the rows of a restart check: every trajectory of the record, restart point 10.
struct RowsRenderer;

impl Renderer for RowsRenderer {
    fn export(&self, _: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn summaries(&self, _: &StudyRecord) -> Result<Vec<TrajectorySummary>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn figure_svg(&self, _: &StudyRecord) -> Result<Option<String>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn restart_check_rows(&self, study: &StudyRecord) -> Result<Vec<RestartCheckRow>, RenderError> {
        Ok(study
            .spec
            .trajectories
            .iter()
            .map(|t| RestartCheckRow {
                trajectory: t.id.clone(),
                task: t.task.clone(),
                restart_point: 10,
                predicted: 0.5,
                continuing: 0.125,
            })
            .collect())
    }
}

fn coordinator(store: &SqlStore) -> Arc<Coordinator<SqlStore>> {
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    };
    Coordinator::with_clock(store.clone(), timing, Clock::manual(T0), Arc::new(RowsRenderer))
}

fn task_json(id: &str) -> String {
    serde_json::json!({
        "id": id, "image": "vcurve-task-calc:test", "workdir": "/testbed",
        "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}
    })
    .to_string()
}

/// Two tasks of 8 base runs: `calc` (in the band) and `doom` (doomed).
fn spec(extra: &str) -> (String, BTreeMap<String, String>) {
    let yaml = format!(
        "name: from-tasks\nseed: 7\nbudget: 30\nrunner: {{kind: agent, agent: agent, flake_recheck_rate: 0.0}}\n\
         controls: {{sanity: 1}}\n{extra}\
         tasks:\n  - task: tasks/calc.json\n  - task: tasks/doom.json\n"
    );
    let files =
        [("tasks/calc.json".to_string(), task_json("calc")), ("tasks/doom.json".to_string(), task_json("doom"))];
    (yaml, files.into())
}

async fn lease(c: &Coordinator<SqlStore>, worker: &str, max: u32) -> Vec<LeasedJob> {
    c.lease(worker, max, Duration::ZERO).await.unwrap()
}

fn held(job: &LeasedJob) -> HeldJob {
    HeldJob { key: job.key.clone(), attempt: job.attempt }
}

/// A base run's outcome: `calc` succeeds on seeds 0–2, `doom` never; every run uploads its
/// recorded run (as a worker does) but `calc`'s seed 7, which uploads none.
async fn finish_base_run(c: &Coordinator<SqlStore>, worker: &str, job: &LeasedJob) {
    let JobKey::BaseRun { task, seed, .. } = &job.key else { panic!("not a base run: {:?}", job.key) };
    let success = task == "calc" && *seed < 3;
    let recorded = if task == "calc" && *seed == 7 {
        None
    } else {
        let run = recorded_trajectory(task, 12);
        let digest = vcurve_record::Digest::of(run.as_bytes());
        c.upload(&digest, run.as_bytes()).await.unwrap();
        Some(digest.into_string())
    };
    let report = JobReport::Outcome(RunOutcome {
        success,
        steps: 12,
        end_type: EndType::Submitted,
        patch_sha256: vcurve_record::trajectory::sha256_hex(format!("{task} {seed}").as_bytes()),
        judged: Judged::Evaluated,
        recorded,
    });
    assert_eq!(c.report(worker, &held(job), &report).await.unwrap(), ReportVerdict::Accepted);
}

/// Report every replay `open` holds, and every one leased after, non-replayable, until none is left.
async fn drop_every_replay(c: &Coordinator<SqlStore>, worker: &str, open: &mut Vec<LeasedJob>) {
    for _ in 0..32 {
        open.extend(lease(c, worker, 32).await);
        let Some(at) = open.iter().position(|j| j.key.kind() == JobKind::Replay) else { return };
        let replay = open.remove(at);
        let why = NonReplayable { step: 1, reason: "differs".into(), ..NonReplayable::no_outcome("") };
        c.report(worker, &held(&replay), &JobReport::NonReplayable(why)).await.unwrap();
    }
    panic!("replays kept coming");
}

#[tokio::test]
async fn the_selection_waits_for_every_base_run_then_back_fills_non_replayable_picks_from_their_stratum() {
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let (yaml, files) = spec("selection: {per_task: 2, decoys: 2, seed: 5}\n");
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 32, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 32).await;
        assert_eq!(jobs.len(), 16, "{}: 8 base runs of each task", ts.name);
        // calc's base runs all finish first: still no trajectory, doom's are not in.
        let (calc, doom): (Vec<_>, Vec<_>) =
            jobs.iter().partition(|j| matches!(&j.key, JobKey::BaseRun { task, .. } if task == "calc"));
        for job in &calc {
            finish_base_run(&c, &w, job).await;
        }
        let record = c.store().study(&study).await.unwrap();
        assert!(record.trajectories.is_empty() && record.selection.is_none(), "{}", ts.name);
        for job in &doom {
            finish_base_run(&c, &w, job).await;
        }

        let record = c.store().study(&study).await.unwrap();
        let selection = record.selection.as_ref().expect("selected once every base run is in");
        let verdict = |task: &str| selection.tasks.iter().find(|t| t.task == task).unwrap().verdict;
        assert_eq!((verdict("calc"), verdict("doom")), (Verdict::Band, Verdict::Doomed), "{}", ts.name);
        assert_eq!(record.base_runs.len(), 16, "{}", ts.name);
        // Every failed calc run has length 12: one stratum (ties go up), L2-submit, of 5 runs.
        assert_eq!(selection.strata.len(), 1, "{}", ts.name);
        assert_eq!(selection.strata[0].stratum.to_string(), "L2-submit", "{}", ts.name);
        // Two decoys from calc's three successes, judged and never continued.
        assert_eq!(record.spec.decoys.len(), 2, "{}", ts.name);
        assert!(record.spec.decoys.iter().all(|d| d.task == "calc" && d.length == 12), "{}", ts.name);
        // The picks in processing order; seed 7 left no recorded run, so if picked it is dropped
        // at once and back-filled.
        let active: Vec<String> = selection.active().map(|p| format!("calc-base{}", p.id.seed)).collect();
        assert_eq!(active.len(), 2, "{}: the per-task cap", ts.name);
        let waiting: Vec<&str> =
            record.trajectories.iter().filter(|t| t.state == TrajectoryState::Waiting).map(|t| t.id.as_str()).collect();
        assert_eq!(waiting, active.iter().map(String::as_str).collect::<Vec<_>>(), "{}", ts.name);
        for t in &record.trajectories {
            let pick = selection.picks.iter().find(|p| format!("calc-base{}", p.id.seed) == t.id).unwrap();
            assert_eq!(t.state == TrajectoryState::NonReplayable, pick.non_replayable, "{}: {}", ts.name, t.id);
        }
        // The first in processing order carries the sanity control.
        let first = record.trajectories.iter().find(|t| t.id == active[0]).unwrap();
        assert!(first.plan.controls.sanity, "{}", ts.name);

        // The first pick's replay meets another state: it is dropped and back-filled.
        let replays = lease(&c, &w, 32).await;
        let replay = replays
            .iter()
            .find(|j| matches!(&j.key, JobKey::Replay { trajectory, .. } if *trajectory == active[0]))
            .expect("the first pick is replayed")
            .clone();
        let why = NonReplayable { step: 3, reason: "observation differs".into(), ..NonReplayable::no_outcome("") };
        c.report(&w, &held(&replay), &JobReport::NonReplayable(why)).await.unwrap();
        let record = c.store().study(&study).await.unwrap();
        let selection = record.selection.as_ref().unwrap();
        let last = selection.back_fills.last().unwrap();
        let BackFill::Replaced { replacement, round, .. } = &last.result else { panic!("{}: {last:?}", ts.name) };
        let replacement = format!("calc-base{}", replacement.seed);
        assert!(*round >= 1, "{}", ts.name);
        let new = record.trajectories.iter().find(|t| t.id == replacement).unwrap();
        assert_eq!(new.state, TrajectoryState::Waiting, "{}", ts.name);
        assert!(new.plan.controls.sanity, "{}: the replacement carries the dropped one's controls", ts.name);
        assert!(record.spec.trajectories.iter().any(|t| t.id == replacement), "{}", ts.name);

        // Dropping every pick exhausts the stratum; the study says so and ends.
        let mut open: Vec<LeasedJob> = replays.into_iter().filter(|j| j.key != replay.key).collect();
        drop_every_replay(&c, &w, &mut open).await;
        let record = c.store().study(&study).await.unwrap();
        let selection = record.selection.as_ref().unwrap();
        assert!(
            selection.back_fills.iter().any(|e| matches!(e.result, BackFill::StratumExhausted { .. })),
            "{}: {:?}",
            ts.name,
            selection.back_fills
        );
        assert_eq!(selection.active().count(), 0, "{}", ts.name);
        assert_eq!(record.state, StudyState::Done, "{}", ts.name);
        ts.finish().await;
    }
}

/// A study from tasks with judges: each trajectory the selection makes of a failed base run, and
/// each decoy it draws, gets a label call per judge, rendered from the run it recorded; a
/// trajectory is replayed, but continued only once its judges have answered, with their labels in
/// its plan; the decoy's label joins its labels.
#[tokio::test]
async fn a_study_from_tasks_with_judges_labels_each_selected_trajectory_before_it_is_continued() {
    const JUDGE: &str = "http://127.0.0.1:9/v1";
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let judges = format!("judges:\n  a: {{base_url: \"{JUDGE}\", model: judge-a}}\n");
        let (yaml, files) = spec(&format!("selection: {{per_task: 2, decoys: 1, seed: 5}}\n{judges}"));
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 32, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        for job in lease(&c, &w, 32).await {
            finish_base_run(&c, &w, &job).await;
        }
        let record = c.store().study(&study).await.unwrap();
        let mut judged: Vec<String> = record
            .trajectories
            .iter()
            .filter(|t| t.state == TrajectoryState::Waiting)
            .map(|t| format!("label:{}/a", t.id))
            .collect();
        assert_eq!(judged.len(), 2, "{}: the per-task cap", ts.name);
        assert_eq!(record.spec.decoys.len(), 1, "{}", ts.name);
        let decoy = record.spec.decoys[0].id.clone();
        assert!(record.spec.decoys[0].recorded.is_some(), "{}: the decoy's recorded run is named", ts.name);
        judged.push(format!("label-decoy:{decoy}/a"));
        judged.sort();

        // The replays run; no continuation before the judge has answered.
        let mut open = lease(&c, &w, 32).await;
        assert!(open.iter().all(|j| j.key.kind() == JobKind::Replay), "{}: {open:?}", ts.name);
        for job in open.drain(..) {
            let report = super::replays::replayed(12);
            assert_eq!(c.report(&w, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
        assert!(lease(&c, &w, 32).await.is_empty(), "{}: continued before its judge answered", ts.name);

        // The judge's calls, one per selected trajectory, each labelling step 4 (m = 5).
        let judge = c.register("judge", 8, &[format!("model:{JUDGE}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let calls = lease(&c, &judge, 8).await;
        let mut keys: Vec<String> = calls
            .iter()
            .map(|j| match &j.key {
                JobKey::ModelCall { call, .. } => call.clone(),
                other => panic!("{}: not a label call: {other}", ts.name),
            })
            .collect();
        keys.sort();
        assert_eq!(keys, judged, "{}", ts.name);
        for job in &calls {
            let report = super::judge_labels::answer_with(&c, job, |_, _| Some(4)).await;
            assert_eq!(c.report(&judge, &held(job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
        let record = c.store().study(&study).await.unwrap();
        let labelled: Vec<String> = record
            .trajectories
            .iter()
            .filter(|t| t.state == TrajectoryState::Running && t.plan.labels == [5])
            .map(|t| format!("label:{}/a", t.id))
            .collect();
        assert_eq!(labelled.len(), 2, "{}: each selected trajectory runs with the label m = 5", ts.name);
        let labels: Vec<(&str, Option<u32>)> =
            record.spec.decoys[0].labels.iter().map(|l| (l.source.as_str(), l.step)).collect();
        assert_eq!(labels, [("a", Some(5))], "{}: the decoy's label", ts.name);
        assert!(!lease(&c, &w, 32).await.is_empty(), "{}: labelled, the trajectories are continued", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_restart_check_runs_fresh_base_runs_with_the_budget_left_at_each_restart_point() {
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let (yaml, files) = spec("");
        let study = c.launch(&yaml, &files).await.unwrap();
        let check = format!("restart_check: {{of: {study}, runs: 3}}\n");
        // Not before the study is done; never of an unknown study.
        let e = c.launch(&check, &BTreeMap::new()).await.unwrap_err().to_string();
        assert!(e.contains("restart_check.of") && e.contains("running"), "{}: {e}", ts.name);
        let e = c.launch("restart_check: {of: nowhere}\n", &BTreeMap::new()).await.unwrap_err().to_string();
        assert!(e.contains("restart_check.of") && e.contains("nowhere"), "{}: {e}", ts.name);
        let e = c.launch(&format!("{check}budget: 3\n"), &BTreeMap::new()).await.unwrap_err().to_string();
        assert!(e.contains("budget"), "{}: {e}", ts.name);

        // Finish the study: every base run in, every pick dropped.
        let w = c.register("w", 32, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        for job in lease(&c, &w, 32).await {
            finish_base_run(&c, &w, &job).await;
        }
        drop_every_replay(&c, &w, &mut Vec::new()).await;
        let checked = c.store().study(&study).await.unwrap();
        assert_eq!(checked.state, StudyState::Done, "{}", ts.name);

        let id = c.launch(&check, &BTreeMap::new()).await.unwrap();
        assert!(c.store().restart_checks_of(&study).await.unwrap().is_empty(), "{}: not before it is done", ts.name);
        let record = c.store().study(&id).await.unwrap();
        let spec = record.spec.restart_check.as_ref().unwrap();
        assert_eq!(
            (spec.of.as_str(), spec.runs, spec.rows.len()),
            (study.as_str(), 3, checked.spec.trajectories.len())
        );
        assert_eq!(record.spec.name, "from-tasks-restart-check", "{}", ts.name);
        assert_ne!(record.spec.seed, checked.spec.seed, "{}: new seeds", ts.name);
        assert_eq!(record.spec.runner, checked.spec.runner, "{}", ts.name);
        let jobs = lease(&c, &w, 64).await;
        assert_eq!(jobs.len(), 3 * spec.rows.len(), "{}", ts.name);
        for job in &jobs {
            let JobKey::BaseRun { task: subject, .. } = &job.key else { panic!("{:?}", job.key) };
            assert!(spec.rows.iter().any(|r| &r.trajectory == subject), "{}: one subject per row", ts.name);
            assert_eq!(job.budget, 20, "{}: B − t_r = 30 − 10", ts.name);
            let report = JobReport::Outcome(RunOutcome {
                success: job.attempt == 1,
                steps: 9,
                end_type: EndType::Submitted,
                patch_sha256: vcurve_record::trajectory::sha256_hex(b"fix"),
                judged: Judged::Evaluated,
                recorded: None,
            });
            c.report(&w, &held(job), &report).await.unwrap();
        }
        let record = c.store().study(&id).await.unwrap();
        assert_eq!(record.state, StudyState::Done, "{}", ts.name);
        assert!(record.trajectories.is_empty(), "{}: a restart check makes no trajectory", ts.name);
        assert_eq!(c.store().restart_checks_of(&study).await.unwrap(), std::slice::from_ref(&id), "{}", ts.name);
        assert!(c.store().restart_checks_of(&id).await.unwrap().is_empty(), "{}", ts.name);
        assert_eq!(record.base_runs.len(), jobs.len(), "{}", ts.name);
        // Judged under the row's task: one patch, one unique verdict for `calc`.
        assert_eq!(record.evaluation.unique_patches, 1, "{}", ts.name);
        // A restart check of a restart check is refused.
        let e = c.launch(&format!("restart_check: {{of: {id}}}\n"), &BTreeMap::new()).await.unwrap_err().to_string();
        assert!(e.contains("itself a restart check"), "{}: {e}", ts.name);
        ts.finish().await;
    }
}

/// A restart check runs the checked study's tasks with their problem statements, which the checked
/// study stored once, apart from its spec: its base runs' payloads name the same statement.
#[tokio::test]
async fn a_restart_check_runs_its_tasks_with_the_checked_studys_problem_statements() {
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let (yaml, mut files) = spec("");
        let mut calc: serde_json::Value = serde_json::from_str(&files["tasks/calc.json"]).unwrap();
        calc["problem_statement"] = "add() is off by one.".into();
        files.insert("tasks/calc.json".into(), calc.to_string());
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 32, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        for job in lease(&c, &w, 32).await {
            finish_base_run(&c, &w, &job).await;
        }
        drop_every_replay(&c, &w, &mut Vec::new()).await;
        assert_eq!(c.store().study(&study).await.unwrap().state, StudyState::Done, "{}", ts.name);

        let check = c.launch(&format!("restart_check: {{of: {study}, runs: 1}}\n"), &BTreeMap::new()).await.unwrap();
        let record = c.store().study(&check).await.unwrap();
        assert!(record.spec.tasks.iter().all(|t| t.task.problem_statement.is_none()), "{}", ts.name);
        let jobs = lease(&c, &w, 64).await;
        assert!(!jobs.is_empty(), "{}", ts.name);
        for job in &jobs {
            let digest = job.trajectory_digest.as_ref().unwrap();
            let mut payload =
                vcurve_record::TrajectoryPayload::from_fetched(&c.file(digest).await.unwrap(), digest).unwrap();
            let statement = payload.problem_statement_sha256.clone().expect("the statement, by digest");
            payload.fill_problem_statement(c.file(&statement.parse().unwrap()).await.unwrap()).unwrap();
            let task = payload.task_def().unwrap();
            assert_eq!((task.id.as_str(), task.problem_statement.as_deref()), ("calc", Some("add() is off by one.")));
        }
        ts.finish().await;
    }
}
