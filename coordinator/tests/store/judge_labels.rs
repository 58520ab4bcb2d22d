//! Judge labels (`judges:` in a curve study's spec), on both backends: one label call per
//! trajectory and judge queued at launch; a trajectory's schedule waits for all its judges; the
//! labels join its plan (m = i + 1, -1 "no mistake", a malformed answer no label) and the export's
//! spec; the points probed equal those of the same labels given in the spec; nothing is asked twice.
//! Each decoy's recorded run is labelled likewise, its labels joining the export's decoys.

use std::collections::{BTreeMap, BTreeSet};

use vcurve_method::schedule::Series;
use vcurve_record::task_state::{CallInput, CallKey};

use super::replays::{DOUBLE, replayed};
use super::*;

const JUDGE_URL: &str = "http://127.0.0.1:9/v1";

/// The 0-based answer of each judge for each trajectory; `None`: a malformed answer.
fn judged(trajectory: &str, judge: &str) -> Option<i64> {
    match (trajectory, judge) {
        ("r1", "a") => Some(9),
        ("r1", "b") => Some(-1),
        ("r2", "a") => None,
        ("r2", "b") => Some(19),
        ("d1", _) => Some(4),
        ("d2", _) => Some(-1),
        other => panic!("no answer for {other:?}"),
    }
}

/// The cliff of each trajectory's deterministic outcomes.
fn cliff(trajectory: &str) -> u32 {
    if trajectory == "r1" { 12 } else { 21 }
}

fn yaml(labels: bool) -> (String, BTreeMap<String, String>) {
    let (mut yaml, files) = vcurve_coordinator::testing::recorded_spec("judged", DOUBLE, &[("r1", 30), ("r2", 30)]);
    if labels {
        // The labels the judges give, written in the spec.
        yaml = yaml
            .replace("recorded: runs/r1.json\n", "recorded: runs/r1.json\n    labels: {a: 10, b: none}\n")
            .replace("recorded: runs/r2.json\n", "recorded: runs/r2.json\n    labels: {b: 20}\n");
    } else {
        yaml = yaml.replace(
            "trajectories:\n",
            &format!(
                "judges:\n  a: {{base_url: \"{JUDGE_URL}\", model: judge-a}}\n  b: {{base_url: \"{JUDGE_URL}\", model: judge-b}}\ntrajectories:\n"
            ),
        );
    }
    (yaml, files)
}

async fn answer(c: &Coordinator<SqlStore>, job: &LeasedJob) -> JobReport {
    answer_with(c, job, judged).await
}

/// The report of a label call `job` whose judge answers `judged(trajectory, judge)` (0-based,
/// `-1` for no mistake; `None`: a malformed answer).
pub(crate) async fn answer_with(
    c: &Coordinator<SqlStore>,
    job: &LeasedJob,
    judged: impl Fn(&str, &str) -> Option<i64>,
) -> JobReport {
    let digest = job.trajectory_digest.as_ref().expect("a model call names its input");
    let input: CallInput = serde_json::from_slice(&c.file(digest).await.unwrap()).unwrap();
    let CallKey::Label { trajectory, judge, .. } = &input.key else { panic!("not a label call: {}", input.key) };
    let answer = judged(trajectory, judge).map(|i| format!("{{\"first_mistake\": {i}, \"explanation\": \"e\"}}"));
    let output = super::task_state::output(&input, answer);
    let bytes = serde_json::to_vec(&output).unwrap();
    let digest = vcurve_record::Digest::of(&bytes);
    c.upload(&digest, &bytes).await.unwrap();
    JobReport::CallAnswered { output: digest.into_string() }
}

/// Run the double's jobs (replays, continuations with a step curve) until none is left; returns
/// the continuation keys it ran.
async fn run_double(c: &Coordinator<SqlStore>, w: &str) -> Vec<(String, Series, u32, u32)> {
    let mut ran = Vec::new();
    for _ in 0..10_000 {
        let jobs = lease(c, w, 16).await;
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let report = match &job.key {
                JobKey::Replay { .. } => replayed(30),
                JobKey::Continuation(k) => {
                    ran.push((k.trajectory.clone(), k.series, k.t, k.seed));
                    outcome(vcurve_coordinator::testing::step_outcome(cliff(&k.trajectory), k.t, k.seed))
                }
                other => panic!("the double ran {other}"),
            };
            assert_eq!(c.report(w, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
    }
    ran
}

/// The label-stage points of a finished study, by trajectory.
fn label_points(record: &StudyRecord) -> BTreeMap<String, BTreeSet<(u32, u32)>> {
    record
        .trajectories
        .iter()
        .map(|t| {
            let keys = t.outcomes.iter().map(|(_, t, seed, _)| (*t, *seed)).collect();
            (t.id.clone(), keys)
        })
        .collect()
}

#[tokio::test]
async fn judge_labels_are_asked_once_wait_for_the_schedule_and_probe_what_spec_labels_probe() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        c.accept_runner_kind(DOUBLE);
        let (judged_yaml, files) = yaml(false);
        let study = c.launch(&judged_yaml, &files).await.unwrap();
        let p = c.progress(&study).await.unwrap();
        let label =
            |p: &vcurve_coordinator::model::Progress| p.call_stages.iter().find(|s| s.stage == "label").cloned();
        let stage = label(&p).expect("a label stage");
        assert_eq!((stage.pending, stage.expected), (4, Some(4)), "{}: a call per trajectory and judge", ts.name);
        assert_eq!(p.waiting_for_endpoints, vec![format!("model:{JUDGE_URL}")], "{}", ts.name);

        // The double replays both trajectories, and no continuation starts while judges are pending.
        let double = c.register("double", 16, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert!(run_double(&c, &double).await.is_empty(), "{}: no continuation before the labels", ts.name);
        let record = c.store().study(&study).await.unwrap();
        assert!(record.trajectories.iter().all(|t| t.state == TrajectoryState::Running), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Running, "{}", ts.name);

        // The judges answer one by one: a trajectory's schedule starts with its last judge.
        let judge =
            c.register("judge", 1, &[format!("model:{JUDGE_URL}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let mut asked = Vec::new();
        let mut continuations = 0;
        for _ in 0..8 {
            let Some(job) = lease(&c, &judge, 1).await.pop() else { break };
            let report = answer(&c, &job).await;
            assert_eq!(c.report(&judge, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted);
            let JobKey::ModelCall { call, .. } = &job.key else { panic!("{}", job.key) };
            asked.push(call.clone());
            let CallKey::Label { trajectory, .. } = CallKey::parse(call).unwrap() else { unreachable!() };
            let answered = asked.iter().filter(|a| a.starts_with(&format!("label:{trajectory}/"))).count();
            let pending = c.progress(&study).await.unwrap().pending;
            assert_eq!(pending > continuations, answered == 2, "{}: continuations after {call}", ts.name);
            continuations = pending;
        }
        asked.sort();
        assert_eq!(asked, ["label:r1/a", "label:r1/b", "label:r2/a", "label:r2/b"], "{}: each call once", ts.name);
        let with_judges = run_double(&c, &double).await;
        assert!(!with_judges.is_empty());
        assert!(lease(&c, &judge, 4).await.is_empty(), "{}: nothing is asked again", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.state, StudyState::Done, "{}", ts.name);
        let stage = label(&p).unwrap();
        assert_eq!((stage.done, stage.malformed, stage.expected), (4, 1, Some(4)), "{}", ts.name);

        // The judges' labels are in the plan and in the export's spec, under their names.
        let record = c.store().study(&study).await.unwrap();
        let labels: Vec<Vec<(String, Option<u32>)>> = record
            .spec
            .trajectories
            .iter()
            .map(|t| t.labels.iter().map(|l| (l.source.clone(), l.step)).collect())
            .collect();
        assert_eq!(
            labels,
            [vec![("a".to_string(), Some(10)), ("b".to_string(), None)], vec![("b".to_string(), Some(20))]],
            "{}",
            ts.name
        );
        assert_eq!(record.trajectories[0].plan.labels, [10], "{}", ts.name);
        assert_eq!(record.trajectories[1].plan.labels, [20], "{}", ts.name);

        // The same labels given in the spec: the same points, every one.
        let (static_yaml, files) = yaml(true);
        let given = c.launch(&static_yaml, &files).await.unwrap();
        run_double(&c, &double).await;
        let given = c.store().study(&given).await.unwrap();
        assert_eq!(given.state, StudyState::Done, "{}", ts.name);
        assert_eq!(label_points(&record), label_points(&given), "{}: the same points probed", ts.name);
        let probes = |r: &StudyRecord| r.trajectories[0].outcomes.iter().filter(|o| o.1 == 9 || o.1 == 10).count();
        assert!(probes(&record) > 0, "{}: the label's points m − 1 and m are probed", ts.name);
        assert_eq!(
            given.spec.trajectories.iter().map(|t| t.labels.clone()).collect::<Vec<_>>(),
            record.spec.trajectories.iter().map(|t| t.labels.clone()).collect::<Vec<_>>(),
        );
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_retired_label_call_gives_no_label_and_lets_the_schedule_start() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        c.accept_runner_kind(DOUBLE);
        let (yaml, files) = yaml(false);
        let study = c.launch(&yaml, &files).await.unwrap();
        let double = c.register("double", 16, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert!(run_double(&c, &double).await.is_empty());
        let judge =
            c.register("judge", 8, &[format!("model:{JUDGE_URL}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        // Every call ends without an outcome until retired.
        for _ in 0..20 {
            let jobs = lease(&c, &judge, 8).await;
            if jobs.is_empty() {
                break;
            }
            for job in jobs {
                let report = JobReport::NoOutcome { reason: "the endpoint is down".into() };
                assert_eq!(c.report(&judge, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted);
            }
        }
        let ran = run_double(&c, &double).await;
        assert!(!ran.is_empty(), "{}: the schedules started once every call was retired", ts.name);
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.state, StudyState::Done, "{}", ts.name);
        assert!(record.spec.trajectories.iter().all(|t| t.labels.is_empty()), "{}", ts.name);
        assert!(record.trajectories.iter().all(|t| t.plan.labels.is_empty()), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn decoys_are_labelled_by_every_judge_and_the_export_gives_their_labels() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        c.accept_runner_kind(DOUBLE);
        let (mut yaml, mut files) = yaml(false);
        // A decoy of each trajectory's task, with a recorded run for the judges to read.
        yaml.push_str("decoys:\n  - {id: d1, task: task-r1, recorded: runs/d1.json}\n  - {id: d2, task: task-r2, recorded: runs/d2.json}\n");
        files.insert("runs/d1.json".into(), vcurve_coordinator::testing::recorded_trajectory("task-r1", 20));
        files.insert("runs/d2.json".into(), vcurve_coordinator::testing::recorded_trajectory("task-r2", 15));
        let study = c.launch(&yaml, &files).await.unwrap();
        let stage =
            |p: &vcurve_coordinator::model::Progress| p.call_stages.iter().find(|s| s.stage == "label").cloned();
        let p = c.progress(&study).await.unwrap();
        assert_eq!(stage(&p).unwrap().expected, Some(8), "{}: a call per trajectory or decoy and judge", ts.name);

        // Every call is leased; the trajectories' are answered, the decoys' are held.
        let judge =
            c.register("judge", 16, &[format!("model:{JUDGE_URL}")], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &judge, 16).await;
        let subject = |job: &LeasedJob| match &job.key {
            JobKey::ModelCall { call, .. } => call.clone(),
            other => panic!("{other}"),
        };
        let mut subjects: Vec<String> = jobs.iter().map(subject).collect();
        subjects.sort();
        assert_eq!(
            subjects,
            [
                "label-decoy:d1/a",
                "label-decoy:d1/b",
                "label-decoy:d2/a",
                "label-decoy:d2/b",
                "label:r1/a",
                "label:r1/b",
                "label:r2/a",
                "label:r2/b"
            ],
            "{}",
            ts.name
        );
        let (decoys, trajectories): (Vec<_>, Vec<_>) =
            jobs.into_iter().partition(|j| subject(j).starts_with("label-decoy:"));
        for job in &trajectories {
            let report = answer(&c, job).await;
            assert_eq!(c.report(&judge, &held(job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
        let double = c.register("double", 16, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert!(!run_double(&c, &double).await.is_empty());
        // Every trajectory is done, and the study waits for its decoys' judges.
        let record = c.store().study(&study).await.unwrap();
        assert!(record.trajectories.iter().all(|t| t.state != TrajectoryState::Running), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Running, "{}", ts.name);
        for job in &decoys {
            let report = answer(&c, job).await;
            assert_eq!(c.report(&judge, &held(job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.state, StudyState::Done, "{}", ts.name);
        assert_eq!((stage(&p).unwrap().done, stage(&p).unwrap().malformed), (8, 1), "{}", ts.name);
        assert_eq!(p.pending, 0, "{}: a decoy's label plans nothing", ts.name);

        // The export's decoys carry the judges' labels (m = i + 1, -1 "no mistake"), the
        // trajectories theirs alone.
        let record = c.store().study(&study).await.unwrap();
        let labels = |labels: &[vcurve_record::Label]| -> Vec<(String, Option<u32>)> {
            labels.iter().map(|l| (l.source.clone(), l.step)).collect()
        };
        let by_decoy: Vec<_> = record.spec.decoys.iter().map(|d| (d.id.as_str(), labels(&d.labels))).collect();
        let both = |m: Option<u32>| vec![("a".to_string(), m), ("b".to_string(), m)];
        assert_eq!(by_decoy, [("d1", both(Some(5))), ("d2", both(None))], "{}", ts.name);
        assert_eq!(labels(&record.spec.trajectories[0].labels), [("a".to_string(), Some(10)), ("b".to_string(), None)]);
        // Every label call's log, the malformed one's too, in call-key order: the export's
        // calls.csv. One trajectory's record has its own calls only.
        let calls = |record: &StudyRecord| record.calls.iter().map(|c| c.call.clone()).collect::<Vec<_>>();
        assert_eq!(calls(&record), subjects, "{}", ts.name);
        let one = c.store().trajectory(&study, &"r2".into()).await.unwrap().unwrap();
        assert_eq!(calls(&one), ["label:r2/a", "label:r2/b"], "{}", ts.name);
        ts.finish().await;
    }
}
