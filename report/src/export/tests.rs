//! How a study's patches were judged, in the export and in the checks of Table 4: measured for a
//! study of the `agent` runner, not measured (never 0) for a `synthetic` one; the replay check
//! over the trajectories with a recorded run whose replay finished.

use serde_json::{Value, json};
use vcurve_method::analyses::NOT_MEASURED;
use vcurve_method::analyses::checks::{Check, Status};
use vcurve_method::schedule::{Outcome, Series, Stage, TrajectoryPlan};
use vcurve_method::{BaseRuns, Thresholds};
use vcurve_record::jobs::{CompareLevel, NonReplayable, Replayed};
use vcurve_record::runner::{AGENT, SYNTHETIC};
use vcurve_record::{
    Admission, ControlCounts, EvaluationStats, RunnerSpec, StudyRecord, StudySpec, StudyState, TrajectoryRecord,
    TrajectorySpec,
};

use super::*;
use crate::analyses::analyses;

const LENGTH: u32 = 10;

/// How a trajectory's replay went.
#[derive(Clone, Copy)]
enum Replay {
    /// No recorded run: replay does not apply.
    NotRecorded,
    /// Recorded, its replay not finished.
    Pending,
    Reproduced,
    /// Dropped by its replay.
    Dropped,
    /// Reproduced, then dropped by a continuation's replay of its prefix.
    DroppedLater,
}

fn replayed() -> Replayed {
    Replayed {
        anchors: vec![0, 5],
        levels: vec![CompareLevel::Exact; LENGTH as usize],
        fingerprints: None,
        ..Default::default()
    }
}

fn mismatch() -> NonReplayable {
    NonReplayable {
        step: 3,
        level: CompareLevel::CharMultiset,
        reason: "output differs at every level".into(),
        recorded_excerpt: "a".into(),
        replayed_excerpt: "b".into(),
        mismatch: None,
        command: None,
    }
}

/// A trajectory with 4 continuations at `t = 0` and 4 at `t = 5` (the ones that ran), plus
/// `retired` retired at `t = 5`.
fn trajectory(id: &str, replay: Replay, retired: usize) -> (TrajectorySpec, TrajectoryRecord) {
    let spec = TrajectorySpec {
        id: id.into(),
        task: format!("task-{id}"),
        length: LENGTH,
        curve: None,
        labels: Vec::new(),
        base_runs: BaseRuns::default(),
        recorded: (!matches!(replay, Replay::NotRecorded)).then(|| format!("sha256-{id}")),
    };
    let ran = !matches!(replay, Replay::Pending | Replay::Dropped);
    let mut outcomes = Vec::new();
    if ran {
        for seed in 0..4 {
            let o = if seed < 3 { Outcome::Success } else { Outcome::Failure };
            outcomes.push((Series::Main, 0, seed, o));
            outcomes.push((Series::Main, 5, seed, if seed < 1 { Outcome::Success } else { Outcome::Failure }));
        }
        outcomes.extend((0..retired).map(|i| (Series::Main, 5, 10 + i as u32, Outcome::Retired)));
    }
    let state = match replay {
        Replay::Pending => TrajectoryState::Replaying,
        Replay::Dropped | Replay::DroppedLater => TrajectoryState::NonReplayable,
        Replay::NotRecorded | Replay::Reproduced => TrajectoryState::Done,
    };
    let record = TrajectoryRecord {
        id: id.into(),
        state,
        stage: if ran { Stage::Done } else { Stage::Screen },
        plan: TrajectoryPlan { length: LENGTH, labels: Vec::new(), controls: Default::default() },
        outcomes,
        cap_hits: 0,
        non_replayable: matches!(replay, Replay::Dropped | Replay::DroppedLater).then(mismatch),
        replay: matches!(replay, Replay::Reproduced | Replay::DroppedLater).then(replayed),
    };
    (spec, record)
}

pub(crate) fn study(
    kind: &str,
    trajectories: Vec<(TrajectorySpec, TrajectoryRecord)>,
    evaluation: EvaluationStats,
) -> StudyRecord {
    let (specs, records): (Vec<_>, Vec<_>) = trajectories.into_iter().unzip();
    StudyRecord {
        id: "s".into(),
        state: StudyState::Done,
        spec: StudySpec {
            name: "judged".into(),
            seed: 7,
            budget: 100,
            schedule: "none".into(),
            runner: RunnerSpec::parse(kind, if kind == AGENT { json!({"agent": "scripted"}) } else { json!({}) })
                .expect("valid runner options"),
            thresholds: Thresholds::default(),
            controls: ControlCounts::default(),
            admission: Admission::default(),
            trajectories: specs,
            decoys: Vec::new(),
            tasks: Vec::new(),
            selection: None,
            restart_check: None,
            task_state: None,
            judges: Default::default(),
        },
        trajectories: records,
        evaluation,
        base_runs: Vec::new(),
        selection: None,
        retired: Vec::new(),
        calls: Vec::new(),
    }
}

/// Three reproduced, one dropped, one pending, one without a recorded run: 3 + 1 ran continuations
/// with 8 outcomes each (32), one retired besides.
fn agent_trajectories() -> Vec<(TrajectorySpec, TrajectoryRecord)> {
    vec![
        trajectory("a", Replay::Reproduced, 1),
        trajectory("b", Replay::Reproduced, 0),
        trajectory("c", Replay::Reproduced, 0),
        trajectory("d", Replay::Dropped, 0),
        trajectory("e", Replay::Pending, 0),
        trajectory("f", Replay::NotRecorded, 0),
    ]
}

/// 32 runs judged: 11 evaluated for themselves (10 unique patches, one evaluated twice at once),
/// 15 cache hits, 6 empty patches; 40 evaluations (29 re-checks), 30 of them flake checks, none
/// disagreeing.
fn stats() -> EvaluationStats {
    EvaluationStats {
        evaluated_runs: 11,
        cache_hits: 15,
        empty_patches: 6,
        unique_patches: 10,
        evaluations: 40,
        flake_checks: 30,
        flakes: 0,
        base_run_outcomes: 0,
    }
}

/// [`stats`] without a flake check: every unique patch evaluated once.
fn no_flake_check() -> EvaluationStats {
    EvaluationStats { evaluated_runs: 10, empty_patches: 7, evaluations: 10, flake_checks: 0, ..stats() }
}

fn check<'a>(checks: &'a [Check], id: &str) -> &'a Check {
    checks.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no check {id}"))
}

fn status_and_value(study: &StudyRecord, id: &str) -> (Status, String) {
    let a = analyses(&results(study).unwrap()).unwrap();
    let c = check(&a.checks.checks, id);
    (c.status, c.value.clone())
}

#[test]
fn an_agent_study_exports_its_evaluation() {
    let study = study(AGENT, agent_trajectories(), stats());
    let files = files(&study).unwrap();

    assert_eq!(
        evaluation_csv(&results(&study).unwrap()),
        "evaluated_runs,cache_hits,empty_patches,unique_patches,evaluations,flake_checks,flakes,flake_rate,saved_share\n\
         11,15,6,10,40,30,0,0,0.65625\n"
    );

    // Replay applies to its recorded trajectories: the replay table is exported too.
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [
            "analyses.json",
            "curves.csv",
            "evaluation.csv",
            "notes.csv",
            "replay.csv",
            "replay.json",
            "results.json",
            "trajectories.csv"
        ]
    );
    assert_eq!(files["evaluation.csv"], evaluation_csv(&results(&study).unwrap()).into_bytes());
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    assert_eq!(
        json["evaluation"],
        json!({
            "evaluated_runs": 11, "cache_hits": 15, "empty_patches": 6, "unique_patches": 10,
            "evaluations": 40, "flake_checks": 30, "flakes": 0, "flake_rate": 0.0, "saved_share": 0.65625,
            "base_run_outcomes": 0,
        })
    );
    // The recorded run's digest is exported where there is one.
    assert_eq!(json["trajectories"][0]["recorded"], "sha256-a");
    assert!(json["trajectories"][5].get("recorded").is_none());
    // results.json reads back to the same results.
    let back: Results = serde_json::from_value(json).unwrap();
    assert_eq!(back, results(&study).unwrap());

    // A flake rate with no flake check is not measured: null, an empty cell.
    let study = self::study(AGENT, agent_trajectories(), no_flake_check());
    let json: Value = serde_json::from_slice(&super::files(&study).unwrap()["results.json"]).unwrap();
    assert_eq!(
        (json["evaluation"]["flake_rate"].clone(), json["evaluation"]["flake_checks"].clone()),
        (Value::Null, json!(0))
    );
    assert!(evaluation_csv(&results(&study).unwrap()).ends_with("\n10,15,7,10,10,0,0,,0.6875\n"));
}

#[test]
fn a_synthetic_study_has_measured_no_evaluation() {
    let study = study(SYNTHETIC, vec![trajectory("a", Replay::NotRecorded, 0)], EvaluationStats::default());
    let files = files(&study).unwrap();
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    assert_eq!(json["evaluation"], Value::Null);
    assert_eq!(files["evaluation.csv"], evaluation_csv(&results(&study).unwrap()).into_bytes());
    assert_eq!(
        evaluation_csv(&results(&study).unwrap()),
        "evaluated_runs,cache_hits,empty_patches,unique_patches,evaluations,flake_checks,flakes,flake_rate,saved_share\n\
         ,,,,,,,,\n"
    );
    let analyses: Value = serde_json::from_slice(&files["analyses.json"]).unwrap();
    for id in ["replay", "flake", "cache"] {
        let c = analyses["checks"]["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap();
        assert_eq!((c["value"].clone(), c["status"].clone()), (Value::Null, json!("not_measured")), "{id}");
    }
    // Even with counts in the record, a runner that judges no patch measured none.
    let counted = self::study(SYNTHETIC, vec![trajectory("a", Replay::NotRecorded, 0)], stats());
    assert_eq!(results(&counted).unwrap().evaluation, None);
}

#[test]
fn the_replay_check_counts_the_trajectories_whose_replay_finished() {
    // Measured, passing: 3 reproduced of 4 finished (the pending one and the one without a
    // recorded run are left out).
    let s = study(AGENT, agent_trajectories(), stats());
    assert_eq!(status_and_value(&s, "replay"), (Status::Pass, "3/4 (75%)".into()));

    // Measured, failing: one more dropped, one of them after its replay reproduced.
    let mut trajectories = agent_trajectories();
    trajectories.push(trajectory("g", Replay::DroppedLater, 0));
    let s = study(AGENT, trajectories, stats());
    assert_eq!(status_and_value(&s, "replay"), (Status::Fail, "3/5 (60%)".into()));

    // Not measured: no recorded run, or no replay finished yet.
    for replay in [Replay::NotRecorded, Replay::Pending] {
        let s = study(AGENT, vec![trajectory("a", replay, 0)], EvaluationStats::default());
        assert_eq!(status_and_value(&s, "replay"), (Status::NotMeasured, NOT_MEASURED.into()));
    }
}

#[test]
fn the_flake_check_is_the_flake_rate() {
    let s = study(AGENT, agent_trajectories(), stats());
    assert_eq!(status_and_value(&s, "flake"), (Status::Pass, "0/30 (0%)".into()));
    let s = study(AGENT, agent_trajectories(), EvaluationStats { flakes: 2, ..stats() });
    assert_eq!(status_and_value(&s, "flake"), (Status::Fail, "2/30 (7%)".into()));
    // No flake check made: not measured.
    let s = study(AGENT, agent_trajectories(), no_flake_check());
    assert_eq!(status_and_value(&s, "flake"), (Status::NotMeasured, NOT_MEASURED.into()));
}

#[test]
fn the_cache_check_compares_the_runs_judged_with_the_runs_that_ended() {
    // Measured, passing: the 32 runs with an outcome (the retired one left out) all judged through
    // the cache; the figures follow.
    let s = study(AGENT, agent_trajectories(), stats());
    assert_eq!(
        status_and_value(&s, "cache"),
        (Status::Pass, "32/32 (10 unique patches); 40 evaluations, 66% saved by the cache".into())
    );
    // The three checks from the record pass together in this study.
    let a = analyses(&results(&s).unwrap()).unwrap();
    for id in ["replay", "flake", "cache"] {
        assert_eq!(check(&a.checks.checks, id).status, Status::Pass, "{id}");
    }

    // Measured, failing: a run not accounted for by the cache.
    let s = study(AGENT, agent_trajectories(), EvaluationStats { empty_patches: 5, ..stats() });
    assert_eq!(status_and_value(&s, "cache").0, Status::Fail);
    assert!(status_and_value(&s, "cache").1.starts_with("31/32 (10 unique patches)"));

    // Not measured: an agent study with no run yet.
    let s = study(AGENT, vec![trajectory("a", Replay::Pending, 0)], EvaluationStats::default());
    assert_eq!(status_and_value(&s, "cache"), (Status::NotMeasured, NOT_MEASURED.into()));

    // Base runs are judged through the cache too: 8 more runs, 8 more judged, and it passes.
    let s = study(
        AGENT,
        agent_trajectories(),
        EvaluationStats { evaluated_runs: stats().evaluated_runs + 8, base_run_outcomes: 8, ..stats() },
    );
    assert_eq!(status_and_value(&s, "cache").0, Status::Pass);
    assert!(status_and_value(&s, "cache").1.starts_with("40/40"), "{:?}", status_and_value(&s, "cache"));
    let json = serde_json::to_value(results(&s).unwrap()).unwrap();
    assert_eq!(json["evaluation"]["base_run_outcomes"], 8);
}

/// A study of `n` trajectories with hundreds of outcomes each, over every series, under a real
/// schedule (so the stage counts are rebuilt from the outcomes).
fn many_outcomes(n: usize) -> StudyRecord {
    let trajectories = (0..n)
        .map(|i| {
            let (spec, mut record) = trajectory(&format!("t{i:03}"), Replay::NotRecorded, 0);
            record.outcomes.clear();
            for series in [Series::Main, Series::Retest, Series::FullBudget] {
                for t in 0..LENGTH {
                    for seed in 0..40 {
                        let o = match (t * 7 + seed + i as u32) % 11 {
                            0 => Outcome::Retired,
                            k if k < 6 && t < 5 => Outcome::Success,
                            _ => Outcome::Failure,
                        };
                        record.outcomes.push((series, t, seed, o));
                    }
                }
            }
            record.cap_hits = i as u32 % 3;
            (spec, record)
        })
        .collect();
    let mut study = study(SYNTHETIC, trajectories, EvaluationStats::default());
    study.spec.schedule = vcurve_method::schedule::variants::variant_names()[0].to_string();
    study
}

#[test]
fn a_study_exported_one_trajectory_at_a_time_has_the_same_bytes() {
    let study = many_outcomes(30);
    assert_eq!(study.trajectories.iter().map(|t| t.outcomes.len()).sum::<usize>(), 30 * 3 * 10 * 40);
    let whole = files(&study).unwrap();
    let head = StudyRecord { trajectories: Vec::new(), ..study.clone() };
    assert_eq!(files_from(&head, study.trajectories.iter()).unwrap(), whole);
    assert_eq!(files_from(&head, study.trajectories.clone()).unwrap(), whole);
    let results = results(&study).unwrap();
    assert_eq!(results_from(&head, study.trajectories.clone()).unwrap(), results);
}

/// A trajectory in `state` with no outcome: never measured.
fn unmeasured(id: &str, state: TrajectoryState) -> (TrajectorySpec, TrajectoryRecord) {
    let (spec, mut record) = trajectory(id, Replay::NotRecorded, 0);
    record.outcomes.clear();
    record.state = state;
    record.stage = Stage::Screen;
    (spec, record)
}

#[test]
fn a_trajectory_never_measured_exports_its_state_and_no_shape() {
    // A study cancelled (or exported while running) before some of its trajectories ran a
    // continuation: issue 24 found them exported as `flat` with `pnr = T`.
    let mut s = study(
        AGENT,
        vec![
            trajectory("measured", Replay::NotRecorded, 0),
            unmeasured("waiting", TrajectoryState::Waiting),
            unmeasured("replaying", TrajectoryState::Replaying),
            unmeasured("running", TrajectoryState::Running),
            unmeasured("done", TrajectoryState::Done),
        ],
        stats(),
    );
    s.state = StudyState::Cancelled;
    let files = files(&s).unwrap();
    let csv = String::from_utf8(files["trajectories.csv"].clone()).unwrap();
    let mut lines = csv.lines();
    assert!(lines.next().unwrap().ends_with(",continuations,state"), "{csv}");
    assert!(lines.next().unwrap().ends_with(",8,done"), "{csv}");
    for state in ["waiting", "replaying", "running", "done"] {
        // Nothing but its id, length, 0 continuations and state.
        assert_eq!(lines.next().unwrap(), format!("{state},{LENGTH},,,,,,,,,,0,{state}"), "{csv}");
    }
    // No curve rows for them.
    let curves = String::from_utf8(files["curves.csv"].clone()).unwrap();
    assert!(curves.lines().skip(1).all(|l| l.starts_with("measured,")), "{curves}");
    // results.json: the state, every curve quantity null, no series.
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    for (i, state) in ["waiting", "replaying", "running", "done"].into_iter().enumerate() {
        let tr = &json["trajectories"][i + 1];
        assert_eq!(tr["state"], state);
        for field in ["shape", "pnr", "pnr_certified", "t_star", "v0_fit", "concentration", "restart_point"] {
            assert_eq!(tr[field], Value::Null, "{state}: {field} in {tr}");
        }
        assert_eq!(tr["series"], json!({}), "{state}");
    }
    let r = results(&s).unwrap();
    assert!(r.trajectories[0].measured() && r.trajectories[1..].iter().all(|t| !t.measured()));
    // The analyses leave them out: only the measured curve is counted.
    let analyses: Value = serde_json::from_slice(&files["analyses.json"]).unwrap();
    assert!(!analyses.to_string().contains("\"waiting\""), "{analyses}");
}

#[test]
fn retired_jobs_of_every_kind_are_exported_and_reported_with_their_reasons() {
    use vcurve_record::jobs::{JobKind, RetiredJobs};
    let mut s = study(AGENT, agent_trajectories(), stats());
    let before = files(&s).unwrap();
    let json: Value = serde_json::from_slice(&before["results.json"]).unwrap();
    assert!(json.get("retired_jobs").is_none(), "none retired: absent");
    s.retired = vec![
        RetiredJobs::of(JobKind::Continuation, [(Some("the agent was killed: OOM".into()), 1)]).unwrap(),
        RetiredJobs::of(
            JobKind::BaseRun,
            [(Some("PutFile: a file of 70000000 bytes is over the limit of 64 MiB per file".into()), 3)],
        )
        .unwrap(),
    ];
    let files = files(&s).unwrap();
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    assert_eq!(json["retired_jobs"][1]["kind"], "base_run");
    assert_eq!(json["retired_jobs"][1]["count"], 3);
    assert!(json["retired_jobs"][1]["reasons"][0]["reason"].as_str().unwrap().contains("over the limit"));
    assert_eq!(serde_json::from_value::<Results>(json).unwrap(), results(&s).unwrap());
    // Only results.json changes.
    for name in before.keys().filter(|n| *n != "results.json") {
        assert_eq!(before[name], files[name], "{name}");
    }
    // The report: a table and a line of the summary.
    let r = results(&s).unwrap();
    let report = crate::html::build(&r, &analyses(&r).unwrap(), None).unwrap();
    let html = String::from_utf8(report.files["report.html"].clone()).unwrap();
    assert!(html.contains("retired without an outcome: 1 continuation: 1× &quot;the agent was killed: OOM&quot;; 3 base runs: 3× &quot;PutFile"), "{html}");
    let csv = String::from_utf8(report.files["retired.csv"].clone()).unwrap();
    assert_eq!(csv.lines().next(), Some("kind,retired,reason,jobs"));
    assert!(
        csv.contains("\nbase_run,3,PutFile: a file of 70000000 bytes is over the limit of 64 MiB per file,3\n"),
        "{csv}"
    );
}

#[test]
fn the_export_has_one_note_per_trajectory_with_a_curve_or_none_in_notes_csv() {
    // Measured, dropped by replay, pending (no note: not measured), and a doomed one.
    let (doomed_spec, mut doomed) = trajectory("doomed", Replay::NotRecorded, 0);
    doomed.state = TrajectoryState::Doomed;
    doomed.outcomes.clear();
    let s = study(
        AGENT,
        vec![
            trajectory("a", Replay::Reproduced, 0),
            trajectory("b", Replay::Dropped, 0),
            trajectory("c", Replay::Pending, 0),
            (doomed_spec, doomed),
        ],
        stats(),
    );
    let files = files(&s).unwrap();
    let csv = String::from_utf8(files["notes.csv"].clone()).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(crate::notes::NOTES_CSV_HEADER));
    assert!(csv.starts_with("trajectory,note,"), "{csv}");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[0].starts_with("a,a (flat; T = 10): "), "{csv}");
    assert!(
        rows[1]
            .starts_with("b,b (non-replayable; T = 10): no curve: replay could not reproduce the run.,non-replayable,"),
        "{csv}"
    );
    assert!(rows[2].starts_with("doomed,doomed (doomed; T = 10): no curve"), "{csv}");
    assert_eq!(
        files["notes.csv"],
        crate::notes::notes_csv(&crate::notes::of_results(&results(&s).unwrap()).unwrap()).into_bytes()
    );
    // The analyses count the genuine recoveries among the measured curves: none here.
    let analyses: Value = serde_json::from_slice(&files["analyses.json"]).unwrap();
    assert_eq!(analyses["recoveries"], json!({"curves": 1, "genuine": 0, "trajectories": []}));
}

#[test]
fn the_first_edit_and_first_symptom_a_replay_measured_reach_the_results_the_notes_and_the_localizers() {
    use vcurve_method::analyses::Observation;
    let (spec, mut record) = trajectory("a", Replay::Reproduced, 0);
    let replay = record.replay.as_mut().unwrap();
    (replay.first_edit, replay.first_symptom) = (Observation::At(3), Observation::At(6));
    let (never_spec, mut never) = trajectory("b", Replay::Reproduced, 0);
    let replay = never.replay.as_mut().unwrap();
    (replay.first_edit, replay.first_symptom) = (Observation::Never, Observation::Never);
    // A replay report of a worker that did not measure them, and no replay at all.
    let s = study(
        AGENT,
        vec![
            (spec, record),
            (never_spec, never),
            trajectory("c", Replay::Reproduced, 0),
            trajectory("d", Replay::NotRecorded, 0),
        ],
        stats(),
    );
    let files = files(&s).unwrap();
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    let cells: Vec<(Value, Value, Value)> = json["trajectories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["first_edit"].clone(), t["first_symptom"].clone(), t["first_edit_source"].clone()))
        .collect();
    assert_eq!(
        cells,
        [
            (json!(3), json!(6), json!("replay")),
            (json!("never"), json!("never"), json!("replay")),
            (Value::Null, Value::Null, Value::Null),
            (Value::Null, Value::Null, Value::Null),
        ]
    );
    // notes.csv's first_edit and first_symptom columns: a step, never, or empty (not measured).
    let notes = String::from_utf8(files["notes.csv"].clone()).unwrap();
    let header: Vec<&str> = crate::notes::NOTES_CSV_HEADER.split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let rows: Vec<Vec<&str>> = notes.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let observed: Vec<(&str, &str)> =
        rows.iter().map(|r| (r[column("first_edit")], r[column("first_symptom")])).collect();
    assert_eq!(observed, [("3", "6"), ("never", "never"), ("", ""), ("", "")], "{notes}");
}

#[test]
fn a_study_with_judges_exports_every_request_of_their_label_calls_in_calls_csv() {
    use vcurve_method::task_state::usage::{Purpose, Stage as CallStage, Tokens};
    use vcurve_record::llm::{Attempt, AttemptOutcome, CallStatus, ModelCall, SamplingSent};
    let mut s = study(AGENT, agent_trajectories(), stats());
    let before = files(&s).unwrap();
    assert!(!before.contains_key("calls.csv"), "no judges: no calls.csv");
    let attempt = |attempt, tokens: Option<Tokens>, outcome| Attempt {
        attempt,
        http_status: Some(200),
        tokens,
        latency_ms: 40 + u64::from(attempt),
        wait_before_next_ms: None,
        outcome,
    };
    let call = |id: &str, attempts: Vec<Attempt>| ModelCall {
        call: id.into(),
        stage: CallStage::Label,
        purpose: Purpose::Core,
        model: "judge-a".into(),
        endpoint: "http://127.0.0.1:9/v1".into(),
        template: "labels.first_mistake.v1".into(),
        template_hash: "0123abcd".into(),
        sampling: SamplingSent { temperature: Some(0.0), max_tokens: Some(512), ..SamplingSent::default() },
        retries: attempts.len() as u32 - 1,
        attempts,
        tokens: None,
        latency_ms: 0,
        status: CallStatus::Ok,
    };
    let tokens = Some(Tokens { input: 900, output: 20, cached: 0 });
    s.calls = vec![
        call("label:t1/a", vec![attempt(1, tokens, AttemptOutcome::Ok)]),
        call(
            "label:t2/a",
            vec![
                attempt(1, None, AttemptOutcome::Malformed { reason: "no JSON object".into() }),
                attempt(2, tokens, AttemptOutcome::Ok),
            ],
        ),
    ];
    let files = files(&s).unwrap();
    let csv = String::from_utf8(files["calls.csv"].clone()).unwrap();
    assert_eq!(
        csv.lines().collect::<Vec<_>>(),
        [
            "call,attempt,stage,purpose,model,endpoint,template,template_hash,temperature,top_p,max_tokens,\
             input_tokens,output_tokens,cached_tokens,latency_ms,outcome,reason",
            "label:t1/a,1,label,core,judge-a,http://127.0.0.1:9/v1,labels.first_mistake.v1,0123abcd,0,unknown,512,900,20,0,41,success,",
            "label:t2/a,1,label,core,judge-a,http://127.0.0.1:9/v1,labels.first_mistake.v1,0123abcd,0,unknown,512,\
             not reported,not reported,not reported,41,failed,malformed: no JSON object",
            "label:t2/a,2,label,core,judge-a,http://127.0.0.1:9/v1,labels.first_mistake.v1,0123abcd,0,unknown,512,900,20,0,42,success,",
        ]
    );
    // The other files are unchanged.
    assert_eq!(files.len(), before.len() + 1);
    for (name, bytes) in &before {
        assert_eq!(&files[name], bytes, "{name}");
    }
}
