//! `vcurve labels` as a user runs it: the binary, a study's exported files and a labels file on
//! disk, JSON or a table on stdout, errors on stderr naming the file, the line and the problem.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{vcurve, write};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// A hand-made study
//
// a: T = 30, cliff, (a, b] = (10, 12], t* = 11, t_pnr = 20
// b: T = 40, erosion, (5, 6], t* = 6, t_pnr = 8
// c: T = 20, flat (no decisive interval)
// d: T = 25, doomed (no curve)

const TRAJECTORIES: &str = "\
trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations
a,30,cliff,0.8,11,10,12,11,20,true,9,200
b,40,erosion,0.3,6,5,6,,8,true,,150
c,20,flat,,,,,,20,false,,64
d,25,doomed,,,,,,,,,0
";

/// Placement, and the probe each label gets from CURVES.
const LABELS: &str = "\
trajectory,source,step
a,J,3
a,K,11
a,L,19
b,J,6
b,K,40
b,L,none
c,J,4
d,L,5
";
// a J 3:   before (3 ≤ 10);            probed 4/16 → 6/16: a rise, zero drop
// a K 11:  inside, = t*;               probed 16/32 → 2/32: drop 0.44, large, significant
// a L 19:  after (12 < 19 ≤ 20);       not probed (n = 8 at 19)
// b J 6:   inside, = t*;               probed 8/16 → 5/16: drop 0.19, not large, p = 0.24
// b K 40:  after the PNR (40 > 8);     probed 3/16 → the terminal 0: drop 0.19, no test
// b L none: no mistake
// c J 4:   unplaced (flat)
// d L 5:   unplaced (doomed)

/// Raw points of trajectories `a` and `b` (the notes tests read them too).
pub(super) const CURVES: &str = "\
trajectory,series,t,n,successes,v_hat,v_fit,wilson_lo,wilson_hi
a,main,0,8,7,0.875,0.6,0.5,0.98
a,main,2,16,4,0.25,0.5,0.1,0.5
a,main,3,16,6,0.375,0.5,0.18,0.61
a,main,10,32,16,0.5,0.5,0.34,0.66
a,main,11,32,2,0.0625,0.0625,0.02,0.2
a,retest,11,32,32,1,1,0.89,1
a,main,18,16,4,0.25,0.0625,0.1,0.5
a,main,19,8,0,0,0.0,0,0.32
b,main,5,16,8,0.5,0.5,0.28,0.72
b,main,6,16,5,0.3125,0.3125,0.14,0.56
b,main,39,16,3,0.1875,0.1875,0.07,0.43
";

/// A trajectories, a labels and a curves file in a folder of their own.
pub(super) struct Study {
    _dir: tempfile::TempDir,
    pub(super) trajectories: PathBuf,
    pub(super) labels: PathBuf,
    pub(super) curves: PathBuf,
}

impl Study {
    fn new() -> Study {
        Study::with(TRAJECTORIES, LABELS, CURVES)
    }

    pub(super) fn with(trajectories: &str, labels: &str, curves: &str) -> Study {
        let dir = tempfile::tempdir().unwrap();
        Study {
            trajectories: write(dir.path(), "trajectories.csv", trajectories),
            labels: write(dir.path(), "labels.csv", labels),
            curves: write(dir.path(), "curves.csv", curves),
            _dir: dir,
        }
    }

    /// `vcurve labels` on this study's files, with or without the curves, plus `extra`.
    fn run(&self, with_curves: bool, extra: &[&str]) -> Output {
        let mut args = vec![
            "labels",
            "--trajectories",
            self.trajectories.to_str().unwrap(),
            "--labels",
            self.labels.to_str().unwrap(),
        ];
        if with_curves {
            args.extend(["--curves", self.curves.to_str().unwrap()]);
        }
        args.extend(extra);
        vcurve(&args)
    }

    fn json(&self, with_curves: bool, extra: &[&str]) -> Value {
        let mut args = vec!["--json"];
        args.extend(extra);
        let out = self.run(with_curves, &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("stdout is JSON")
    }

    fn text(&self, with_curves: bool, extra: &[&str]) -> String {
        let out = self.run(with_curves, extra);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The counts of a summary, in a fixed order, as JSON.
fn counts(summary: &Value) -> Value {
    let pick = |k: &str| summary[k].clone();
    json!({
        "trajectories": pick("trajectories"),
        "labels": pick("labels"),
        "before": pick("before"),
        "inside": pick("inside"),
        "after": pick("after"),
        "after_pnr": pick("after_pnr"),
        "no_mistake": pick("no_mistake"),
        "unplaced": pick("unplaced"),
        "at_t_star": pick("at_t_star"),
        "post_cause": [pick("post_cause")["hits"], pick("post_cause")["total"]],
    })
}

fn probes(summary: &Value) -> Value {
    let h1 = &summary["post_cause_or_zero_drop"];
    json!([
        summary["probed"],
        summary["zero_drop"],
        summary["large_drop"],
        summary["significant"],
        [h1["hits"], h1["total"]]
    ])
}

const PROBE_FIELDS: [&str; 5] = ["probed", "zero_drop", "large_drop", "significant", "post_cause_or_zero_drop"];

#[test]
fn places_a_hand_made_study_without_curves() {
    let v = Study::new().json(false, &[]);
    let sources = v["sources"].as_object().unwrap();
    assert_eq!(sources.keys().collect::<Vec<_>>(), ["J", "K", "L"]);
    #[rustfmt::skip]
    let expected = [
        ("J", json!({"trajectories": 3, "labels": 3, "before": 1, "inside": 1, "after": 0, "after_pnr": 0, "no_mistake": 0, "unplaced": 1, "at_t_star": 1, "post_cause": [0, 3]})),
        ("K", json!({"trajectories": 2, "labels": 2, "before": 0, "inside": 1, "after": 0, "after_pnr": 1, "no_mistake": 0, "unplaced": 0, "at_t_star": 1, "post_cause": [1, 2]})),
        ("L", json!({"trajectories": 3, "labels": 2, "before": 0, "inside": 0, "after": 1, "after_pnr": 0, "no_mistake": 1, "unplaced": 1, "at_t_star": 0, "post_cause": [1, 2]})),
    ];
    for (source, want) in &expected {
        assert_eq!(counts(&v["sources"][source]), *want, "{source}");
    }
    assert_eq!(
        counts(&v["pooled"]),
        json!({"trajectories": 4, "labels": 7, "before": 1, "inside": 2, "after": 1, "after_pnr": 1, "no_mistake": 1, "unplaced": 2, "at_t_star": 2, "post_cause": [2, 7]})
    );
    assert_eq!(v["pooled_sources"], json!(["J", "K", "L"]));
    // Without curves the probed-drop fields are absent, not zero.
    for summary in sources.values().chain([&v["pooled"]]) {
        for field in PROBE_FIELDS {
            assert!(summary.get(field).is_none(), "{field} present without --curves: {summary}");
        }
    }
    // Every label, placed, in the file's order.
    let placements: Vec<&str> =
        v["labels"].as_array().unwrap().iter().map(|l| l["placement"].as_str().unwrap()).collect();
    assert_eq!(placements, ["before", "inside", "after", "inside", "after_pnr", "no_mistake", "unplaced", "unplaced"]);
    assert_eq!(v["labels"][5]["step"], Value::Null);
}

#[test]
fn places_a_hand_made_study_with_curves() {
    let v = Study::new().json(true, &[]);
    // The placement does not depend on the curves.
    let without = Study::new().json(false, &[]);
    for source in ["J", "K", "L"] {
        assert_eq!(counts(&v["sources"][source]), counts(&without["sources"][source]), "{source}");
    }
    assert_eq!(counts(&v["pooled"]), counts(&without["pooled"]));
    // probed, zero drop, drop ≥ 0.2, significant, [post-cause or zero drop, labels].
    assert_eq!(probes(&v["sources"]["J"]), json!([2, 1, 0, 0, [1, 3]]));
    assert_eq!(probes(&v["sources"]["K"]), json!([2, 0, 1, 1, [1, 2]]), "the retest series is not K's probe at 11");
    // L has no label probed: its probe counts are not measured (null), not 0.
    assert_eq!(probes(&v["sources"]["L"]), json!([0, null, null, null, [1, 2]]));
    for field in ["zero_drop", "large_drop", "significant"] {
        assert_eq!(v["sources"]["L"].get(field), Some(&Value::Null), "{field} is null, not absent");
    }
    assert_eq!(probes(&v["pooled"]), json!([4, 1, 1, 1, [3, 7]]));
    // The probes themselves.
    let labels = v["labels"].as_array().unwrap();
    let probe = |i: usize| &labels[i]["probe"];
    assert_eq!(probe(0)["drop"], json!(-0.125));
    assert_eq!(probe(1)["drop"], json!(0.4375));
    assert!(probe(1)["p_value"].as_f64().unwrap() < 0.05);
    assert_eq!(probe(2), &Value::Null, "n = 8 at 19 is below K_label");
    assert!((probe(3)["p_value"].as_f64().unwrap() - 0.236_273_8).abs() < 1e-6);
    assert_eq!(
        (probe(4)["drop"].clone(), probe(4)["after"].clone(), probe(4)["p_value"].clone()),
        (json!(0.1875), Value::Null, Value::Null)
    );
    // Wilson 95% of the pooled 3/7.
    let h1 = &v["pooled"]["post_cause_or_zero_drop"];
    assert!((h1["wilson_lo"].as_f64().unwrap() - 0.158_2).abs() < 1e-3, "{h1}");
    assert!((h1["wilson_hi"].as_f64().unwrap() - 0.749_5).abs() < 1e-3, "{h1}");
}

#[test]
fn pools_the_sources_it_is_told_to() {
    let v = Study::new().json(true, &["--pool", "K", "--pool", "J", "--pool", "K"]);
    assert_eq!(v["pooled_sources"], json!(["K", "J"]));
    assert_eq!(
        counts(&v["pooled"]),
        json!({"trajectories": 3, "labels": 5, "before": 1, "inside": 2, "after": 0, "after_pnr": 1, "no_mistake": 0, "unplaced": 1, "at_t_star": 2, "post_cause": [1, 5]})
    );
    assert_eq!(probes(&v["pooled"]), json!([4, 1, 1, 1, [2, 5]]));
}

#[test]
fn the_task_column_sets_the_bootstrap_clusters() {
    // Tasks default to the trajectory ids: four clusters, so the bootstrap interval has width.
    let v = Study::new().json(false, &[]);
    let post = &v["pooled"]["post_cause"];
    assert!(post["bootstrap_lo"].as_f64().unwrap() < post["bootstrap_hi"].as_f64().unwrap(), "{post}");
    // One task for every trajectory: one cluster, every resample is the share itself.
    let one_task = TRAJECTORIES
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{line},{}\n", if i == 0 { "task" } else { "x" }))
        .collect::<String>();
    let v = Study::with(&one_task, LABELS, CURVES).json(false, &[]);
    let post = &v["pooled"]["post_cause"];
    assert_eq!(
        (post["bootstrap_lo"].as_f64(), post["bootstrap_hi"].as_f64()),
        (Some(2.0 / 7.0), Some(2.0 / 7.0)),
        "{post}"
    );
    assert!(v["labels"].as_array().unwrap().iter().all(|l| l["task"] == "x"));
    // The same from a task column in the labels file.
    let labels = LABELS
        .lines()
        .enumerate()
        .map(|(i, line)| format!("{line},{}\n", if i == 0 { "task" } else { "x" }))
        .collect::<String>();
    let v = Study::with(TRAJECTORIES, &labels, CURVES).json(false, &[]);
    let post = &v["pooled"]["post_cause"];
    assert_eq!(
        (post["bootstrap_lo"].as_f64(), post["bootstrap_hi"].as_f64()),
        (Some(2.0 / 7.0), Some(2.0 / 7.0)),
        "{post}"
    );
}

/// The table's rows as whitespace-separated cells.
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines().map(|l| l.split_whitespace().collect()).collect()
}

#[test]
fn prints_table_2_with_curves() {
    let text = Study::new().text(true, &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split("  ").map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>(),
        [
            "source",
            "labels",
            "before",
            "inside",
            "after",
            "after PNR",
            "no mistake",
            "unplaced",
            "probed",
            "zero-drop",
            "symptom"
        ],
        "{text}"
    );
    let rows = rows(&text);
    assert_eq!(rows[1], ["J", "3", "1", "1", "0", "0", "0", "1", "2", "1/3", "33%", "(6–79)"], "{text}");
    assert_eq!(rows[2], ["K", "2", "0", "1", "0", "1", "0", "0", "2", "0/2", "50%", "(9–91)"], "{text}");
    // Nothing of L's is probed: its zero drops are not measured, not 0/2.
    assert_eq!(rows[3], ["L", "2", "0", "0", "1", "0", "1", "1", "0", "not", "measured", "50%", "(9–91)"], "{text}");
    assert_eq!(rows[4], ["pooled", "7", "1", "2", "1", "1", "1", "2", "4", "1/7", "43%", "(16–75)"], "{text}");
    assert!(text.contains("before m ≤ a, inside a < m ≤ b, after b < m ≤ t_pnr, after PNR m > t_pnr"), "{text}");
    // Columns line up: every row is as wide as the header.
    let width = |l: &str| l.chars().count();
    assert!(lines[1..5].iter().all(|l| width(l) == width(lines[0])), "{text}");
}

#[test]
fn prints_table_2_without_curves_and_names_a_partial_pool() {
    let text = Study::new().text(false, &["--pool", "J", "--pool", "K"]);
    let rows = rows(&text);
    assert_eq!(
        rows[0],
        ["source", "labels", "before", "inside", "after", "after", "PNR", "no", "mistake", "unplaced", "post-cause"]
    );
    assert_eq!(rows[1], ["J", "3", "1", "1", "0", "0", "0", "1", "0%", "(0–56)"], "{text}");
    assert_eq!(rows[4], ["pooled", "5", "1", "2", "0", "1", "0", "1", "20%", "(4–62)"], "{text}");
    assert!(text.contains("pooled: J, K"), "{text}");
    assert!(!text.contains("zero-drop"), "{text}");
}

#[test]
fn the_neighbourhoods_of_the_first_symptom_need_its_column() {
    // trajectories.csv as `vcurve export` writes it has no first_symptom column: not measured.
    let v = Study::new().json(false, &[]);
    for summary in v["sources"].as_object().unwrap().values().chain([&v["pooled"]]) {
        assert_eq!(summary["near_t_star"], Value::Null, "{summary}");
        assert_eq!(summary["near_symptom"], Value::Null, "{summary}");
    }
    // With the column, a step or `none` (silent) is measured: a's symptom at 12 is within one step
    // of K's 11 (= t*); b is silent, c and d never show one (empty cells).
    let trajectories = TRAJECTORIES
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let cell = match i {
                0 => "first_symptom",
                1 => "12",
                2 => "none",
                _ => "",
            };
            format!("{line},{cell}\n")
        })
        .collect::<String>();
    let v = Study::with(&trajectories, LABELS, CURVES).json(false, &[]);
    assert_eq!(v["sources"]["K"]["near_t_star"], json!({"hits": 1, "total": 1}));
    assert_eq!(v["sources"]["K"]["near_symptom"], json!({"hits": 1, "total": 1}));
    assert_eq!(v["sources"]["J"]["near_t_star"], json!({"hits": 0, "total": 1}));
    // Pooled: a's three labels (3, 11, 19) count; only 11 is near t* = 11 or the symptom at 12.
    assert_eq!(v["pooled"]["near_t_star"], json!({"hits": 1, "total": 3}));
    assert_eq!(v["pooled"]["near_symptom"], json!({"hits": 1, "total": 3}));
}

// ---------------------------------------------------------------------------------------------
// Bad files

/// Run on the study with `replace` applied to one of its files; expect a clear refusal.
fn assert_rejected(study: &Study, with_curves: bool, extra: &[&str], expect: &[&str]) {
    let out = study.run(with_curves, extra);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "accepted bad input: {stdout}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "printed output for bad input: {stdout}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert!(stderr.starts_with("vcurve: error: "), "{stderr}");
    for e in expect {
        assert!(stderr.contains(e), "stderr {stderr:?} lacks {e:?}");
    }
}

fn bad_labels(labels: &str, expect: &[&str]) {
    assert_rejected(&Study::with(TRAJECTORIES, labels, CURVES), false, &[], expect);
}

fn bad_trajectories(trajectories: &str, expect: &[&str]) {
    assert_rejected(&Study::with(trajectories, LABELS, CURVES), false, &[], expect);
}

fn bad_curves(curves: &str, expect: &[&str]) {
    assert_rejected(&Study::with(TRAJECTORIES, LABELS, curves), true, &[], expect);
}

const HEADER: &str = "trajectory,source,step\n";

#[test]
fn refuses_a_label_on_an_unknown_trajectory() {
    bad_labels(
        &format!("{HEADER}a,J,3\nzz,J,3\n"),
        &["labels.csv line 3: trajectory `zz` is not in ", "trajectories.csv"],
    );
}

#[test]
fn refuses_a_step_beyond_the_trajectory() {
    bad_labels(
        &format!("{HEADER}a,J,31\n"),
        &["labels.csv line 2: step 31 is beyond the end of `a`, whose length is T = 30 (steps are 1..=30)"],
    );
    // m = T is the last step, and fine.
    let v = Study::with(TRAJECTORIES, &format!("{HEADER}a,J,30\n"), CURVES).json(false, &[]);
    assert_eq!(v["pooled"]["after_pnr"], 1);
}

#[test]
fn refuses_a_step_that_is_zero_or_not_a_step() {
    bad_labels(&format!("{HEADER}a,J,0\n"), &["labels.csv line 2: `step` is 0; steps are 1-based"]);
    for (raw, message) in [
        ("abc", r#"`step` must be a 1-based step or `none` (no mistake), not "abc""#),
        ("2.5", r#"`step` must be a 1-based step or `none` (no mistake), not "2.5""#),
        ("-2", "`step` is negative (-2)"),
        ("", "`step` is empty"),
        ("99999999999", "`step` = 99999999999 is too large"),
    ] {
        bad_labels(&format!("{HEADER}a,J,3\nb,J,{raw}\n"), &["labels.csv line 3: ", message]);
    }
    // `none` in any case is "no mistake".
    let v = Study::with(TRAJECTORIES, &format!("{HEADER}a,J,None\nb,J,NONE\n"), CURVES).json(false, &[]);
    assert_eq!(v["pooled"]["no_mistake"], 2);
}

#[test]
fn refuses_malformed_label_rows() {
    bad_labels(
        &format!("{HEADER}a,J,3\nb,J,4,extra\n"),
        &["labels.csv line 3: malformed row: 4 fields where the header has 3"],
    );
    bad_labels(&format!("{HEADER}a,J\n"), &["labels.csv line 2: malformed row: 2 fields where the header has 3"]);
    bad_labels(&format!("{HEADER},J,3\n"), &["labels.csv line 2: `trajectory` is empty"]);
    bad_labels(&format!("{HEADER}a,,3\n"), &["labels.csv line 2: `source` is empty"]);
    bad_labels(
        "trajectory,judge,step\na,J,3\n",
        &["labels.csv: missing column `source`", "found `trajectory,judge,step`"],
    );
    bad_labels("", &["labels.csv: the file is empty; expected the header `trajectory,source,step`"]);
    bad_labels(HEADER, &["labels.csv: has a header but no labels"]);
}

#[test]
fn refuses_a_duplicate_label() {
    bad_labels(
        &format!("{HEADER}a,J,3\na,K,4\na,J,none\n"),
        &["labels.csv line 4: `J` labels `a` twice (first on line 2)"],
    );
}

#[test]
fn refuses_bad_trajectories() {
    let header = TRAJECTORIES.lines().next().unwrap();
    let bad = |row: &str, expect: &[&str]| {
        bad_trajectories(&format!("{header}\na,30,cliff,0.8,11,10,12,11,20,true,9,200\n{row}\n"), expect)
    };
    bad(
        "b,forty,erosion,0.3,6,5,6,,8,true,,150",
        &["trajectories.csv line 3: `length` is not a whole number: \"forty\""],
    );
    bad("b,0,erosion,0.3,6,5,6,,8,true,,150", &["line 3: `length` is 0"]);
    bad("b,40,erosion,0.3,6,5,6,,x,true,,150", &["line 3: `pnr` is not a whole number: \"x\""]);
    bad("b,40,erosion,0.3,6,5,6,,41,false,,150", &["line 3: `pnr` = 41 is beyond the length T = 40"]);
    bad("b,40,erosion,0.3,6,5,6,,,true,,150", &["line 3: `pnr` is empty"]);
    bad("b,40,erosion,0.3,6,5,41,,8,true,,150", &["line 3: decisive interval (5, 41] is not inside [0, T = 40]"]);
    bad("b,40,erosion,0.3,6,6,5,,8,true,,150", &["line 3: decisive interval (6, 5]"]);
    bad("b,40,erosion,0.3,6,5,,,8,true,,150", &["line 3: `decisive_a` and `decisive_b` must both be given"]);
    bad("b,40,erosion,0.3,,,,,8,true,,150", &["line 3: the curve is erosion but has no decisive interval"]);
    bad("b,40,flat,,6,5,6,,40,false,,150", &["line 3: a flat trajectory has no decisive interval"]);
    bad("b,40,erosion,0.3,7,5,6,,8,true,,150", &["line 3: `t_star` = 7, but t* = decisive_a + 1 = 6"]);
    bad(
        "b,40,steep,0.3,6,5,6,,8,true,,150",
        &["line 3: `shape` must be cliff, erosion, flat, doomed or non_replayable, not \"steep\""],
    );
    bad("b,40,erosion,high,6,5,6,,8,true,,150", &["line 3: `concentration` is not a number: \"high\""]);
    bad(
        "b,40,erosion,0.3,6,5,6,,8,false,,150",
        &["line 3: `pnr_certified` is false, but `pnr` = 8 with T = 40 says otherwise"],
    );
    bad("b,40,erosion,0.3,6,5,6,,8,true,-1,150", &["line 3: `restart_point` is negative (-1)"]);
    bad("b,40,erosion,0.3,6,5,6,,8,true,,lots", &["line 3: `continuations` is not a whole number"]);
    bad("b,40,erosion,0.3,6,5,6,,8,true", &["line 3: malformed row: 10 fields where the header has 12"]);
    bad("a,40,erosion,0.3,6,5,6,,8,true,,150", &["line 3: trajectory `a` appears twice (first on line 2)"]);
    bad_trajectories("trajectory,length,shape,pnr\na,30,cliff,20\n", &["trajectories.csv: missing column `t_star`"]);
    bad_trajectories("", &["trajectories.csv: the file is empty"]);
    bad_trajectories(&format!("{header}\n"), &["trajectories.csv: has a header but no trajectories"]);
}

#[test]
fn refuses_bad_curves() {
    let header = CURVES.lines().next().unwrap();
    let bad =
        |row: &str, expect: &[&str]| bad_curves(&format!("{header}\na,main,0,8,7,0.875,0.6,0.5,0.98\n{row}\n"), expect);
    bad("a,main,2,x,4,0.25,0.5,0.1,0.5", &["curves.csv line 3: `n` is not a whole number: \"x\""]);
    bad("a,main,2,0,0,0,0,0,1", &["line 3: t = 2 has n = 0 continuations"]);
    bad("a,main,2,16,17,1,1,1,1", &["line 3: t = 2 has 17 successes of n = 16"]);
    bad("a,main,2,16,4,0.25,abc,0.1,0.5", &["line 3: `v_fit` is not a number: \"abc\""]);
    bad("a,main,2,16,4,0.25,1.5,0.1,0.5", &["line 3: `v_fit` = 1.5 is outside [0, 1]"]);
    bad("a,main,2,16,4,0.25,NaN,0.1,0.5", &["line 3: `v_fit` = NaN is outside [0, 1]"]);
    bad("a,main,30,16,4,0.25,0.5,0.1,0.5", &["line 3: t = 30 is not before the end of `a` (T = 30)"]);
    bad(
        "a,sideways,2,16,4,0.25,0.5,0.1,0.5",
        &["line 3: `series` must be one of main, retest, full_budget, not \"sideways\""],
    );
    bad("zz,main,2,16,4,0.25,0.5,0.1,0.5", &["curves.csv line 3: trajectory `zz` is not in ", "trajectories.csv"]);
    bad("a,main,0,16,4,0.25,0.5,0.1,0.5", &["line 3: t = 0 of `a` (main series) appears twice (first on line 2)"]);
    bad("a,main,2,16,4", &["line 3: malformed row: 5 fields where the header has 9"]);
    bad_curves("trajectory,t,n,successes\na,1,8,4\n", &["curves.csv: missing column `series`"]);
    bad_curves(&format!("{header}\n"), &["curves.csv: has a header but no points"]);
}

#[test]
fn refuses_missing_files_and_unknown_pool_sources() {
    let study = Study::new();
    let out = vcurve(&[
        "labels",
        "--trajectories",
        "/nonexistent/trajectories.csv",
        "--labels",
        study.labels.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/trajectories.csv: cannot read"));
    assert_rejected(
        &study,
        false,
        &["--pool", "J", "--pool", "Z"],
        &["--pool names `Z`, which labels nothing in ", "labels.csv"],
    );
    let thresholds = write(study.labels.parent().unwrap(), "thresholds.yaml", "k_label: 0\n");
    assert_rejected(&study, false, &["--thresholds", thresholds.to_str().unwrap()], &["thresholds.yaml: "]);
}

// ---------------------------------------------------------------------------------------------
// The paper's own labels on its own curves

fn paper_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../method/tests/fixtures/paper").join(name)
}

/// The paper's Table 9 as `vcurve export` would write it, plus `task` and `first_symptom`.
fn paper_trajectories_csv() -> String {
    let text = std::fs::read_to_string(paper_fixture("table09_curves.csv")).unwrap();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut out = String::from(
        "trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations,task,first_symptom\n",
    );
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let cell = |name: &str| cells[header.iter().position(|h| *h == name).unwrap()];
        let certified = cell("pnr").parse::<u32>().unwrap() < cell("length").parse::<u32>().unwrap();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},,{},{certified},,{},{},{}\n",
            cell("trajectory"),
            cell("length"),
            cell("shape"),
            cell("concentration"),
            cell("t_star"),
            cell("decisive_a"),
            cell("decisive_b"),
            cell("pnr"),
            cell("continuations"),
            cell("trajectory").split(' ').next().unwrap(),
            cell("first_symptom"),
        ));
    }
    out
}

const JUDGES: [&str; 4] = ["GPT-6.1 Sol", "GPT-6 Astra", "GPT-5.5", "OpenAI o3"];

#[test]
fn places_the_papers_labels_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let trajectories = write(dir.path(), "trajectories.csv", &paper_trajectories_csv());
    let labels = paper_fixture("tables11_12_labels.csv");
    let mut args = vec![
        "labels",
        "--json",
        "--trajectories",
        trajectories.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
    ];
    for judge in JUDGES {
        args.extend(["--pool", judge]);
    }
    let out = vcurve(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Table 2: the four judges pooled.
    let pooled = &v["pooled"];
    let placement = |s: &Value| json!([s["before"], s["inside"], s["after"], s["after_pnr"], s["no_mistake"]]);
    assert_eq!(placement(pooled), json!([67, 7, 45, 43, 26]));
    assert_eq!(
        (pooled["labels"].clone(), pooled["trajectories"].clone(), pooled["unplaced"].clone()),
        (json!(162), json!(47), json!(0))
    );
    assert_eq!(pooled["at_t_star"], 7, "only 7/162 name the decisive step");
    assert_eq!((pooled["post_cause"]["hits"].clone(), pooled["post_cause"]["total"].clone()), (json!(88), json!(162)));
    assert_eq!(pooled["near_t_star"], json!({"hits": 17, "total": 138}));
    assert_eq!(pooled["near_symptom"], json!({"hits": 3, "total": 138}));
    assert_eq!(v["pooled_sources"], json!(JUDGES));
    assert!(pooled.get("zero_drop").is_none(), "the paper's raw points are not published");

    // Table 21: every source's row.
    #[rustfmt::skip]
    let table_21 = [
        ("GPT-6.1 Sol", 47, 46, [23, 3, 12, 8, 1]),
        ("GPT-5.5", 47, 36, [11, 1, 13, 11, 11]),
        ("OpenAI o3", 47, 34, [9, 0, 8, 17, 13]),
        ("GPT-6 Astra", 47, 46, [24, 3, 12, 7, 1]),
        ("GPT-6 Luna", 47, 38, [16, 1, 12, 9, 9]),
        ("Claude Opus 5.5", 30, 19, [3, 1, 8, 7, 11]),
        ("Human", 30, 23, [3, 2, 8, 10, 7]),
    ];
    assert_eq!(v["sources"].as_object().unwrap().len(), table_21.len());
    for (source, trajectories, labels, counts) in table_21 {
        let s = &v["sources"][source];
        assert_eq!((s["trajectories"].clone(), s["labels"].clone()), (json!(trajectories), json!(labels)), "{source}");
        assert_eq!(placement(s), json!(counts), "{source}");
    }

    // The same as a table: the pooled row reads as Table 2's "four judges" row.
    args.retain(|a| *a != "--json");
    let out = vcurve(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let pooled_row = text.lines().find(|l| l.starts_with("pooled ")).unwrap();
    assert_eq!(
        pooled_row.split_whitespace().take(7).collect::<Vec<_>>(),
        ["pooled", "162", "67", "7", "45", "43", "26"],
        "{text}"
    );
    assert!(text.contains("pooled: GPT-6.1 Sol, GPT-6 Astra, GPT-5.5, OpenAI o3"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// A real export

/// `vcurve demo` runs a study and exports it with its analyses; placing the study's own labels
/// from its exported files gives exactly the placement the export computed from the curves in
/// memory — probes, fits and intervals included.
#[test]
fn places_a_demo_studys_labels_as_its_export_does() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("demo");
    let out = vcurve(&["demo", "--out", out_dir.to_str().unwrap(), "--trajectories", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read_json =
        |name: &str| -> Value { serde_json::from_slice(&std::fs::read(out_dir.join(name)).unwrap()).unwrap() };
    let results = read_json("results.json");

    let mut labels = String::from("trajectory,source,step\n");
    for tr in results["trajectories"].as_array().unwrap() {
        for pair in tr["labels"].as_array().unwrap() {
            let step = pair[1].as_u64().map_or_else(|| "none".to_string(), |m| m.to_string());
            labels.push_str(&format!("{},{},{step}\n", tr["trajectory"].as_str().unwrap(), pair[0].as_str().unwrap()));
        }
    }
    assert!(labels.lines().count() > 2, "the demo study has labels: {labels}");
    let labels = write(dir.path(), "labels.csv", &labels);
    // The thresholds the study ran under (JSON is YAML).
    let thresholds = write(dir.path(), "thresholds.yaml", &results["thresholds"].to_string());

    let out = vcurve(&[
        "labels",
        "--json",
        "--trajectories",
        out_dir.join("trajectories.csv").to_str().unwrap(),
        "--curves",
        out_dir.join("curves.csv").to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
        "--thresholds",
        thresholds.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let placed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(placed["pooled"]["probed"].as_u64().unwrap() > 0, "{placed}");
    assert_eq!(placed, read_json("analyses.json")["labels"]);
}
