//! The report says "not measured" where the study has not measured, on a synthetic study built
//! by hand: two cliffs, one judge, no replay (so no first edit or first symptom), no decoys, no
//! controls, no stage counts.

use serde_json::{Value, json};
use vcurve_method::analyses::localizers::rank_localizers;
use vcurve_method::analyses::{BOOTSTRAP_SEED, CurveRecord, Label, Measured, NOT_MEASURED};
use vcurve_method::schedule::{Controls, Series, Stage};
use vcurve_method::{BaseRun, BaseRuns, Point, Thresholds, analyze};
use vcurve_record::TrajectoryState;

use super::*;
use crate::analyses::analyses;

const BUDGET: u32 = 100;

/// A cliff of length 20 dropping from 6/8 to 1/8 between `drop − 1` and `drop`.
fn cliff(drop: u32) -> Vec<Point> {
    let mut points: Vec<Point> = (0..drop).step_by(2).map(|t| Point { t, n: 16, successes: 12 }).collect();
    points.extend((drop..20).step_by(2).map(|t| Point { t, n: 16, successes: 1 }));
    points.push(Point { t: drop - 1, n: 32, successes: 24 });
    points.push(Point { t: drop, n: 32, successes: 2 });
    points.sort_by_key(|p| p.t);
    points.dedup_by_key(|p| p.t);
    points
}

/// One trajectory's entry in `results.json`, from its main series (what an export writes, without
/// a replay: first edit and first symptom `null`).
fn trajectory(id: &str, points: &[Point], labels: &[(&str, Option<u32>)]) -> Value {
    let params = Thresholds::default();
    let base = BaseRuns((0..8).map(|i| BaseRun { success: i < 4, steps: 20 + 5 * i }).collect());
    let a = analyze(20, points, Some(&base), BUDGET, &params).unwrap();
    json!({
        "trajectory": id,
        "task": id,
        "state": TrajectoryState::Done,
        "stage": Stage::Done,
        "length": 20,
        "shape": a.shape,
        "v0_fit": a.v0_fit(),
        "concentration": a.concentration,
        "t_star": a.t_star,
        "decisive_a": a.decisive_interval.map(|i| i.a),
        "decisive_b": a.decisive_interval.map(|i| i.b),
        "onset": a.onset,
        "pnr": a.pnr,
        "pnr_certified": a.pnr_certified,
        "restart_point": a.restart_point,
        "continuations": points.iter().map(|p| p.n).sum::<u32>(),
        "retired": 0,
        "cap_hits": 0,
        "continuations_by_stage": {},
        "labels": labels,
        "series": { serde_json::to_value(Series::Main).unwrap().as_str().unwrap(): a.points },
        "base_runs": base,
        "controls": Controls::default(),
        "first_edit": null,
        "first_symptom": null,
    })
}

fn synthetic() -> Results {
    let trajectories = vec![
        trajectory("syn-1", &cliff(8), &[("judge", Some(8))]),
        trajectory("syn-2", &cliff(13), &[("judge", Some(3))]),
    ];
    serde_json::from_value(json!({
        "name": "synthetic",
        "schedule": "none",
        "budget": BUDGET,
        "thresholds": Thresholds::default(),
        "trajectories": trajectories,
    }))
    .unwrap()
}

fn table<'a>(tables: &'a [Table], name: &str) -> &'a Table {
    tables.iter().find(|t| t.name == name).unwrap()
}

fn row<'a>(t: &'a Table, first: &str) -> &'a [String] {
    t.rows.iter().find(|r| r[0] == first).unwrap_or_else(|| panic!("no row {first} in {}", t.name))
}

#[test]
fn the_first_edit_localizer_of_a_study_without_replay_reads_not_measured() {
    let results = synthetic();
    let a = analyses(&results).unwrap();
    let tables = tables(&results, &a);
    let localizers = table(&tables, "localizers");

    // The rows: not measured, with the trajectories left out; n = 0 proposals.
    for name in ["first edit", "before first symptom"] {
        assert_eq!(
            row(localizers, name),
            [name, "0 (2 not measured)", NOT_MEASURED, NOT_MEASURED, NOT_MEASURED],
            "{name}"
        );
    }
    // The CSV says the same.
    let csv = localizers.csv();
    assert!(csv.lines().any(|l| l == "first edit,0 (2 not measured),not measured,not measured,not measured"), "{csv}");
    assert!(!csv.lines().any(|l| l.starts_with("first edit,") && l.contains("0.00")), "{csv}");
    // So does the HTML report.
    let report = build(&results, &a, None).unwrap();
    let html = String::from_utf8(report.files["report.html"].clone()).unwrap();
    assert!(
        html.contains(
            "<tr><td>first edit</td><td>0 (2 not measured)</td><td>not measured</td><td>not measured</td><td>not measured</td></tr>"
        ),
        "{html}"
    );
    assert_eq!(report.files["localizers.csv"], csv.into_bytes());
    // And the export: null, not 0.
    let json = serde_json::to_value(&a).unwrap();
    let first_edit = json["localizers"]["rows"].as_array().unwrap().iter().find(|r| r["name"] == "first edit").unwrap();
    assert_eq!(
        (first_edit["vc0"].clone(), first_edit["vc1"].clone(), first_edit["vc3"].clone()),
        (Value::Null, Value::Null, Value::Null)
    );
    assert_eq!((first_edit["n"].clone(), first_edit["not_measured"].clone()), (json!(0), json!(2)));
    assert!(a.localizers.proposals.iter().all(|p| p.localizer != "first edit"));

    // What is measured prints as before: the judge's and step 1's rows are the values of the
    // analysis, at two decimals.
    let records: Vec<CurveRecord> = results
        .trajectories
        .iter()
        .map(|tr| {
            let points: Vec<Point> =
                tr.series[&Series::Main].iter().map(|p| Point { t: p.t, n: p.n, successes: p.successes }).collect();
            let base = Some(&tr.base_runs);
            let analysis = analyze(tr.length, &points, base, BUDGET, &results.thresholds).unwrap();
            CurveRecord::from_analysis(&tr.trajectory, &tr.task, &analysis, &results.thresholds)
        })
        .collect();
    let labels = [
        Label { trajectory: "syn-1".into(), source: "judge".into(), step: Some(8) },
        Label { trajectory: "syn-2".into(), source: "judge".into(), step: Some(3) },
    ];
    let direct = rank_localizers(&records, &labels, None, BOOTSTRAP_SEED).unwrap();
    assert_eq!(direct, a.localizers);
    for name in ["judge", "step 1", "random step"] {
        let r = direct.rows.iter().find(|r| r.name == name).unwrap();
        assert!(r.vc1.is_measured() && r.n == 2, "{name}");
        let printed = [
            r.name.clone(),
            "2".into(),
            format!("{:.2}", r.vc0.value().unwrap()),
            format!("{:.2}", r.vc1.value().unwrap()),
            format!("{:.2}", r.vc3.value().unwrap()),
        ];
        assert_eq!(row(localizers, name), printed, "{name}");
    }
    let judge = direct.rows.iter().find(|r| r.name == "judge").unwrap();
    assert!(judge.vc0 > Measured::Value(0.3), "the judge names syn-1's decisive step: {judge:?}");
}

#[test]
fn every_table_says_not_measured_where_the_study_has_not_measured() {
    let results = synthetic();
    let a = analyses(&results).unwrap();
    let tables = tables(&results, &a);

    // Labels: no raw-point probe is missing here (the study has points), but no first symptom.
    let labels = table(&tables, "labels");
    let judge = row(labels, "judge");
    let near = labels.headers.iter().position(|h| h.starts_with("within 1 of t*")).unwrap();
    assert_eq!(judge[near], NOT_MEASURED, "{judge:?}");
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["labels"]["sources"]["judge"]["near_t_star"], Value::Null);
    assert_eq!(json["labels"]["pooled"]["near_symptom"], Value::Null);

    // Restart policies: the judge answered no decoy, so its random run is not measured.
    let restart = table(&tables, "restart_policies");
    let j = row(restart, "label, judge");
    assert_eq!(&j[4..], [NOT_MEASURED, NOT_MEASURED], "{j:?}");
    assert_ne!(j[3], NOT_MEASURED, "the failed runs need no decoys");
    assert_ne!(row(restart, "never")[4], NOT_MEASURED);
    assert_eq!(row(table(&tables, "decoys"), "judge")[3], NOT_MEASURED);
    let judge_row =
        json["restart"]["policies"].as_array().unwrap().iter().find(|p| p["name"] == "label, judge").unwrap();
    assert_eq!((judge_row["random"].clone(), judge_row["gain"].clone()), (Value::Null, Value::Null));

    // Checks: replay, flake, cache and the controls are not measured: null with the reason.
    let checks = json["checks"]["checks"].as_array().unwrap();
    for id in ["replay", "flake", "t0_sanity", "test_retest", "cache"] {
        let c = checks.iter().find(|c| c["id"] == id).unwrap();
        assert_eq!((c["value"].clone(), c["status"].clone()), (Value::Null, json!("not_measured")), "{id}");
    }
    assert!(row(table(&tables, "checks"), "Replay match").contains(&NOT_MEASURED.to_string()));

    // No trajectory carried a control, no stage counts: the tables are not measured, not zeros.
    for name in ["sanity", "retest", "budget_control", "stages"] {
        let t = table(&tables, name);
        assert!(t.not_measured && t.rows.is_empty(), "{name}");
        assert!(t.html().contains("<td colspan=") && t.html().contains(">not measured</td>"), "{name}");
        assert!(t.text().ends_with("(not measured)\n"), "{name}");
        assert_eq!(t.csv().lines().count(), 1, "{name}: the header alone");
        assert_eq!(json[name], Value::Null, "{name}");
    }
    assert!(!table(&tables, "localizers").not_measured);

    // The export reads back to the same tables.
    let back: StudyAnalyses = serde_json::from_value(json).unwrap();
    assert_eq!(back, a);
    assert_eq!(super::tables(&results, &back), tables);
}

#[test]
fn the_evaluation_table_reads_not_measured_for_a_synthetic_study() {
    let results = synthetic();
    let a = analyses(&results).unwrap();
    let tables = tables(&results, &a);
    let t = table(&tables, "evaluation");
    assert!(t.not_measured && t.rows.is_empty());
    assert!(t.html().contains("<td colspan=\"9\" class=\"muted\">not measured</td>"), "{}", t.html());
    assert!(t.text().ends_with("(not measured)\n"));
    assert_eq!(t.csv().lines().count(), 1, "the header alone");
    let html = String::from_utf8(build(&results, &a, None).unwrap().files["report.html"].clone()).unwrap();
    assert!(html.contains("<h2 id=\"evaluation\">"), "{html}");
}

#[test]
fn an_agent_study_shows_its_evaluation_and_the_checks_it_feeds() {
    use crate::export::Evaluation;
    use vcurve_record::EvaluationStats;
    use vcurve_record::jobs::{CompareLevel, Replayed};

    let mut results = synthetic();
    let runs: u64 = results.trajectories.iter().map(|t| u64::from(t.continuations - t.retired)).sum();
    let stats = EvaluationStats {
        evaluated_runs: runs - 60,
        cache_hits: 50,
        empty_patches: 10,
        unique_patches: runs - 60,
        evaluations: runs - 60,
        flake_checks: 0,
        flakes: 0,
        base_run_outcomes: 0,
    };
    let evaluation =
        |stats: EvaluationStats| Evaluation { stats, flake_rate: stats.flake_rate(), saved_share: stats.saved_share() };
    results.evaluation = Some(evaluation(stats));
    // syn-1 recorded and reproduced by its replay, syn-2 dropped by it.
    for (tr, state) in results.trajectories.iter_mut().zip([TrajectoryState::Done, TrajectoryState::NonReplayable]) {
        tr.recorded = Some(format!("digest-{}", tr.trajectory));
        tr.state = state;
    }
    results.trajectories[0].replay = Some(Replayed {
        anchors: vec![0],
        levels: vec![CompareLevel::Exact; 20],
        fingerprints: None,
        ..Default::default()
    });

    let a = analyses(&results).unwrap();
    let tables = super::tables(&results, &a);
    let t = table(&tables, "evaluation");
    assert!(!t.not_measured);
    let saved = 100.0 * 60.0 / runs as f64;
    let expected: Vec<String> = [
        (runs - 60).to_string(),
        "50".into(),
        "10".into(),
        (runs - 60).to_string(),
        (runs - 60).to_string(),
        "0".into(),
        "0".into(),
        NOT_MEASURED.into(),
        format!("{saved:.1}%"),
    ]
    .into();
    assert_eq!(t.rows, std::slice::from_ref(&expected));
    let checks = table(&tables, "checks");
    assert_eq!(row(checks, "Replay match")[2..], ["1/2 (50%)", "fail"]);
    assert_eq!(row(checks, "Harness flake rate")[2..], [NOT_MEASURED, "not_measured"]);
    let cache = format!(
        "{runs}/{runs} ({} unique patches); {} evaluations, {:.0}% saved by the cache",
        runs - 60,
        runs - 60,
        saved
    );
    assert_eq!(row(checks, "Evaluations via cache")[2..], [cache.as_str(), "pass"]);
    let html = String::from_utf8(build(&results, &a, None).unwrap().files["report.html"].clone()).unwrap();
    let cells: String = expected.iter().map(|c| format!("<td>{c}</td>")).collect();
    assert!(html.contains(&format!("<tr>{cells}</tr>")), "{html}");
    assert!(html.contains(&format!("<td>{cache}</td><td>pass</td>")), "{html}");

    // With flake checks, the rate is measured; one disagreeing of 50 is 2%.
    results.evaluation =
        Some(evaluation(EvaluationStats { evaluations: runs - 10, flake_checks: 50, flakes: 1, ..stats }));
    let a = analyses(&results).unwrap();
    let tables = super::tables(&results, &a);
    assert_eq!(table(&tables, "evaluation").rows[0][7], "2.0%");
    assert_eq!(row(table(&tables, "checks"), "Harness flake rate")[2..], ["1/50 (2%)", "pass"]);
    // A run the cache did not judge fails the cache check.
    results.evaluation = Some(evaluation(EvaluationStats { cache_hits: 49, ..stats }));
    let a = analyses(&results).unwrap();
    assert_eq!(row(table(&super::tables(&results, &a), "checks"), "Evaluations via cache")[3], "fail");
}

#[test]
fn a_trajectory_never_measured_reads_not_measured_in_the_report() {
    // The study was cancelled while syn-3 waited: no continuation of it ran.
    let mut results = synthetic();
    let mut waiting = results.trajectories[0].clone();
    waiting.trajectory = "syn-3".into();
    waiting.state = TrajectoryState::Waiting;
    waiting.series.clear();
    for q in [
        &mut waiting.t_star,
        &mut waiting.decisive_a,
        &mut waiting.decisive_b,
        &mut waiting.pnr,
        &mut waiting.onset,
        &mut waiting.restart_point,
    ] {
        *q = None;
    }
    waiting.continuations = 0;
    (waiting.shape, waiting.pnr_certified, waiting.concentration, waiting.v0_fit) = (None, None, None, None);
    results.trajectories.push(waiting);
    let a = analyses(&results).unwrap();
    let tables = tables(&results, &a);
    let t = table(&tables, "trajectories");
    let shape = t.headers.iter().position(|h| h == "shape").unwrap();
    let pnr = t.headers.iter().position(|h| h == "t_pnr").unwrap();
    let r = row(t, "syn-3");
    assert_eq!((r[2].as_str(), r[shape].as_str(), r[pnr].as_str()), ("waiting", "not measured", "–"), "{r:?}");
    let report = build(&results, &a, None).unwrap();
    let html = String::from_utf8(report.files["report.html"].clone()).unwrap();
    assert!(html.contains("3 trajectories: 2 done, 0 doomed, 1 not measured;"), "{html}");
    // Two curves were measured: the third draws no figure.
    assert!(!report.files.keys().any(|f| f.contains("syn-3")), "{:?}", report.files.keys().collect::<Vec<_>>());
}

/// A curve whose raw estimates fall from 28/32 to 2/32 at step 2 and come back to 30/32 at step 4
/// before the fall at 10: the rise from 2 to 4 is a genuine recovery (the Wilson intervals
/// [0.02, 0.20] and [0.80, 0.98] do not overlap).
fn recovering() -> Vec<Point> {
    let mut points = vec![
        Point { t: 0, n: 32, successes: 28 },
        Point { t: 2, n: 32, successes: 2 },
        Point { t: 4, n: 32, successes: 30 },
        Point { t: 8, n: 32, successes: 28 },
    ];
    points.extend((10..20).step_by(2).map(|t| Point { t, n: 16, successes: 0 }));
    points
}

#[test]
fn every_figure_has_its_note_and_the_analyses_count_the_genuine_recoveries() {
    let mut results = synthetic();
    let third: TrajectoryResult =
        serde_json::from_value(trajectory("syn-3", &recovering(), &[("judge", None)])).unwrap();
    results.trajectories.push(third);
    let a = analyses(&results).unwrap();
    let report = build(&results, &a, None).unwrap();
    let html = String::from_utf8(report.files["report.html"].clone()).unwrap();

    // One note under each of the three figures, the note's text as notes.csv writes it.
    let notes = crate::notes::of_results(&results).unwrap();
    assert_eq!(notes.len(), 3);
    assert_eq!(html.matches("<figure ").count(), 3, "{html}");
    assert_eq!(html.matches("<figcaption class=\"note\">").count(), 3, "{html}");
    for n in &notes {
        let figure = format!("<figure id=\"fig-{}\">", n.trajectory);
        let at = html.find(&figure).unwrap_or_else(|| panic!("no figure {figure}"));
        let end = at + html[at..].find("</figure>").unwrap();
        let caption = format!("<figcaption class=\"note\">{}</figcaption>", crate::table::esc(&n.text()));
        assert!(html[at..end].contains(&caption), "{} has not its note {caption}", n.trajectory);
    }
    assert!(html.contains("syn-1 (cliff"), "{html}");
    // Without replay the notes say nothing of the first edit or the first symptom.
    assert!(!html.contains("first edit (edit at") && !html.contains("failure signal"), "{html}");
    assert!(notes[2].text().contains("a genuine recovery (the 95% intervals do not overlap)"), "{}", notes[2].text());

    // analyses.json counts the genuine recovery among the 3 curves.
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["recoveries"], json!({"curves": 3, "genuine": 1, "trajectories": ["syn-3"]}));
    // An analyses.json written before the notes still reads, with no recoveries counted.
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("recoveries");
    let back: StudyAnalyses = serde_json::from_value(old).unwrap();
    assert_eq!(back.recoveries, crate::analyses::Recoveries::default());
}
