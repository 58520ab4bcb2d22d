//! Studies from SWE-bench instances through the coordinator, on both backends: a spec's
//! `swebench:` block read from disk as `vcurve launch` reads it, base runs queued per instance
//! with the harness's images and the dataset rows, the selection once they are in; and an
//! imported mini-swe-agent run replayed with its instance's row filled in.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::Renderer;
use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{HeldJob, JobKey, JobKind, JobReport, LeasedJob, ReportVerdict};
use vcurve_coordinator::render::{RenderError, TrajectorySummary};
use vcurve_coordinator::spec;
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_method::selection::Verdict;
use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_record::{EndType, Evaluator, RestartCheckRow, StudyRecord, TrajectoryPayload};
use vcurve_testkit::store::TestStore;

const T0: i64 = 1_700_000_000_000;
const DATASET: &str = include_str!("../fixtures/swebench/verified-3.jsonl");
const DJANGO_RUN: &[u8] =
    include_bytes!("../../../record/tests/fixtures/mini-swe-agent/django__django-10999.v1.traj.json");

struct NoRenderer;

impl Renderer for NoRenderer {
    fn export(&self, _: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn summaries(&self, _: &StudyRecord) -> Result<Vec<TrajectorySummary>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn figure_svg(&self, _: &StudyRecord) -> Result<Option<String>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
    fn restart_check_rows(&self, _: &StudyRecord) -> Result<Vec<RestartCheckRow>, RenderError> {
        Err(RenderError("not in this test".into()))
    }
}

fn coordinator(store: &SqlStore) -> Arc<Coordinator<SqlStore>> {
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    };
    Coordinator::with_clock(store.clone(), timing, Clock::manual(T0), Arc::new(NoRenderer))
}

/// The dataset's row of `instance_id`, as a JSON value.
fn row(instance_id: &str) -> serde_json::Value {
    DATASET
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["instance_id"] == instance_id)
        .unwrap()
}

/// Write a spec and its dataset into `dir`, and read them back as `vcurve launch` does.
fn read_spec(dir: &Path, yaml: &str) -> (String, BTreeMap<String, String>) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/verified.jsonl"), DATASET).unwrap();
    std::fs::write(dir.join("study.yaml"), yaml).unwrap();
    spec::read_with_files(&dir.join("study.yaml")).unwrap()
}

/// A job's payload as a worker has it: fetched by its digest, with its task's problem statement
/// (stored apart, once) fetched by its own and filled in.
async fn payload(c: &Coordinator<SqlStore>, job: &LeasedJob) -> TrajectoryPayload {
    let digest = job.trajectory_digest.as_ref().expect("the job names its payload");
    let mut payload = TrajectoryPayload::from_fetched(&c.file(digest).await.unwrap(), digest).unwrap();
    if let Some(statement) = payload.problem_statement_sha256.clone() {
        payload.fill_problem_statement(c.file(&statement.parse().unwrap()).await.unwrap()).unwrap();
    }
    payload
}

fn held(job: &LeasedJob) -> HeldJob {
    HeldJob { key: job.key.clone(), attempt: job.attempt }
}

const STUDY: &str = "name: swe\nseed: 7\nbudget: 30\nrunner: {kind: agent, agent: agent, flake_recheck_rate: 0.0}
selection: {band: [1, 3]}
swebench:
  dataset: data/verified.jsonl
  instances: [django__django-10999, astropy__astropy-14309]
  base_runs: 3
tasks:
  - id: calc
    image: vcurve-task-calc:test
    workdir: /testbed
    evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}
    base_runs: 2
";

#[tokio::test]
async fn a_study_of_swebench_instances_queues_base_runs_per_instance_with_their_images_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, files) = read_spec(dir.path(), STUDY);
    assert_eq!(files.keys().collect::<Vec<_>>(), ["data/verified.jsonl"], "the dataset is read beside the spec");
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let study = c.launch(&yaml, &files).await.unwrap();
        let record = c.store().study(&study).await.unwrap();
        let tasks: Vec<(&str, u32)> = record.spec.tasks.iter().map(|t| (t.task.id.as_str(), t.base_runs)).collect();
        assert_eq!(
            tasks,
            [("calc", 2), ("django__django-10999", 3), ("astropy__astropy-14309", 3)],
            "{}: the tasks entries, then the instances",
            ts.name
        );

        let w = c.register("w", 32, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = c.lease(&w, 32, Duration::ZERO).await.unwrap();
        let mut per_task: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for job in &jobs {
            let JobKey::BaseRun { task, seed, .. } = &job.key else {
                panic!("{}: not a base run: {:?}", ts.name, job.key)
            };
            per_task.entry(task.clone()).or_default().push(*seed);
            assert_eq!(job.budget, 30, "{}", ts.name);
            let payload = payload(&c, job).await;
            let def = payload.task_def().expect("a base run's payload carries its task");
            assert_eq!(&def.id, task, "{}", ts.name);
            if task == "calc" {
                assert_eq!(def.image, "vcurve-task-calc:test", "{}", ts.name);
                continue;
            }
            let image = format!("swebench/sweb.eval.x86_64.{}:latest", task.replace("__", "_1776_"));
            assert_eq!(def.image, image, "{}", ts.name);
            assert_eq!(def.workdir, "/testbed", "{}", ts.name);
            assert_eq!(def.problem_statement.as_deref(), row(task)["problem_statement"].as_str(), "{}", ts.name);
            assert_eq!(
                def.evaluator,
                Evaluator::Swebench { instance_id: task.clone(), instance: Some(row(task)) },
                "{}: judged by the harness with the whole row",
                ts.name
            );
        }
        for seeds in per_task.values_mut() {
            seeds.sort();
        }
        let expected: BTreeMap<String, Vec<u32>> = [
            ("astropy__astropy-14309".to_string(), vec![0, 1, 2]),
            ("calc".to_string(), vec![0, 1]),
            ("django__django-10999".to_string(), vec![0, 1, 2]),
        ]
        .into();
        assert_eq!(per_task, expected, "{}: base runs per instance", ts.name);

        // Every base run in: django succeeds once of 3 (2.67 of 8, in the band [1, 3]), the others never.
        for job in &jobs {
            let JobKey::BaseRun { task, seed, .. } = &job.key else { unreachable!() };
            let report = JobReport::Outcome(RunOutcome {
                success: task == "django__django-10999" && *seed == 0,
                steps: 12,
                end_type: EndType::Submitted,
                patch_sha256: vcurve_record::trajectory::sha256_hex(format!("{task} {seed}").as_bytes()),
                judged: Judged::Evaluated,
                recorded: None,
            });
            assert_eq!(c.report(&w, &held(job), &report).await.unwrap(), ReportVerdict::Accepted, "{}", ts.name);
        }
        let record = c.store().study(&study).await.unwrap();
        let selection = record.selection.as_ref().expect("selected once every base run is in");
        let verdict = |task: &str| selection.tasks.iter().find(|t| t.task == task).unwrap().verdict;
        assert_eq!(verdict("django__django-10999"), Verdict::Band, "{}", ts.name);
        assert_eq!(verdict("astropy__astropy-14309"), Verdict::Doomed, "{}", ts.name);
        assert_eq!(record.base_runs.len(), 8, "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn an_imported_mini_swe_agent_run_is_replayed_with_its_instance_row() {
    let imported = vcurve_record::import::import_mini_swe_agent(
        "django__django-10999.v1.traj.json",
        DJANGO_RUN,
        &vcurve_record::import::ImportOptions::default(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    // As `vcurve import mini-swe-agent` writes it: without the row.
    std::fs::write(dir.path().join("runs/django.json"), serde_json::to_vec_pretty(&imported.trajectory).unwrap())
        .unwrap();
    let yaml = "name: imported\nseed: 3\nrunner: {kind: agent, agent: agent}\n\
                swebench: {dataset: data/verified.jsonl}\n\
                trajectories:\n  - id: dj-1\n    recorded: runs/django.json\n";
    let (yaml, files) = read_spec(dir.path(), yaml);
    for ts in TestStore::both().await {
        let c = coordinator(&ts.store);
        let study = c.launch(&yaml, &files).await.unwrap();
        let record = c.store().study(&study).await.unwrap();
        assert!(record.spec.tasks.is_empty(), "{}: no instances, no base runs", ts.name);
        let digest = record.spec.trajectories[0].recorded.clone().unwrap();
        assert_ne!(digest, imported.trajectory.digest(), "{}: digested with the row", ts.name);
        let kept = c.file(&digest.parse().unwrap()).await.unwrap();
        let kept = vcurve_record::Trajectory::from_json(&kept).expect("the run is kept under its digest");
        assert_eq!(kept.digest(), digest, "{}: what a restart check reads the run's task from", ts.name);

        let w = c.register("w", 4, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = c.lease(&w, 4, Duration::ZERO).await.unwrap();
        assert_eq!(jobs.iter().map(|j| j.key.kind()).collect::<Vec<_>>(), [JobKind::Replay], "{}", ts.name);
        let payload = payload(&c, &jobs[0]).await;
        let run = payload.recorded.as_ref().expect("a replay's payload carries the run");
        assert_eq!(run.digest(), digest, "{}: the study's digest is the payload's run's", ts.name);
        assert_eq!(
            run.task.evaluator,
            Evaluator::Swebench {
                instance_id: "django__django-10999".into(),
                instance: Some(row("django__django-10999"))
            },
            "{}",
            ts.name
        );
        assert_eq!(run.steps, imported.trajectory.steps, "{}: the run itself is as recorded", ts.name);
        assert_eq!(run.task.image, imported.trajectory.task.image, "{}", ts.name);
        ts.finish().await;
    }
}
