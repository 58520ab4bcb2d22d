//! `vcurve bench schedule` as a user runs it: several schedules on the same outcomes, supplied
//! curves by group, and the false-certification rate (issue 14).

use crate::common::{vcurve, write};
use serde_json::Value;

/// Two groups: `cliffs` (value lost at step 20, and at 12 in a curve given sparsely) and `flat`
/// (holding at 0.7 to the last step, one curve not monotone).
const CURVES: &str = "curve,t,v
cliffs/a,0,0.8
cliffs/a,19,0.8
cliffs/a,20,0.02
cliffs/a,39,0.02
cliffs/b,0,0.9
cliffs/b,11,0.9
cliffs/b,12,0
cliffs/b,29,0
flat/c,0,0.7
flat/c,49,0.7
flat/d,0,0.6
flat/d,10,0.8
flat/d,44,0.65
";

fn json(args: &[&str]) -> Value {
    let out = vcurve(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn failure(args: &[&str]) -> String {
    let out = vcurve(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn supplied_curves_are_reported_by_group_for_every_listed_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "curves.csv", CURVES);
    let file = file.to_str().unwrap();
    let base = ["bench", "schedule", "--curves", file, "--replicates", "25", "--seed", "3"];

    let both = json(&[&base[..], &["--schedule", "paper,screen-k4", "--json"]].concat());
    let both = both.as_array().unwrap();
    assert_eq!(both.iter().map(|r| r["schedule"].as_str().unwrap()).collect::<Vec<_>>(), ["paper", "screen-k4"]);
    for report in both {
        let groups = report["groups"].as_object().unwrap();
        assert_eq!(groups.keys().collect::<Vec<_>>(), ["cliffs", "flat"]);
        let (cliffs, flat) = (&groups["cliffs"], &groups["flat"]);
        assert_eq!((cliffs["curves"].as_u64(), flat["curves"].as_u64()), (Some(50), Some(50)));
        // Cliffs fall below 0.2: no false certification is measured on them, and it is not 0.
        assert_eq!(cliffs["holding_curves"], 0);
        assert!(cliffs["false_pnr"].is_null());
        assert!(cliffs["pnr_certified"].as_f64().unwrap() > 0.75, "{cliffs}");
        assert_eq!(cliffs["big_cliff_n"], 50);
        // Flat curves hold: the rate is measured on all of them, and is their certified share.
        assert_eq!(flat["holding_curves"], 50);
        assert_eq!(flat["false_pnr"], flat["pnr_certified"]);
        assert!(flat["false_pnr"].as_f64().unwrap() <= 0.1, "{flat}");
        assert!(flat["shape_accuracy"].is_null(), "a curve holding to T has no shape to find");
    }

    // `paper` alone sees the same outcomes as `paper` beside another schedule.
    let alone = json(&[&base[..], &["--json"]].concat());
    assert_eq!(alone, both[0]);

    let out = vcurve(&[&base[..], &["--schedule", "paper,screen-k4"]].concat());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("schedule        group          curves"), "{text}");
    assert!(lines[0].ends_with("  hold   fpnr"), "{text}");
    let rows: Vec<Vec<&str>> = lines[1..5].iter().map(|l| l.split_whitespace().collect()).collect();
    let keys: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(keys, [("paper", "cliffs"), ("paper", "flat"), ("screen-k4", "cliffs"), ("screen-k4", "flat")]);
    assert_eq!((rows[0][14], rows[0][15]), ("0", "–"), "cliffs: nothing measured");
    assert_eq!(rows[1][14], "50");
    assert!(text.contains("25 runs of each of 4 curves from"), "{text}");
}

#[test]
fn a_schedule_in_a_list_of_one_gives_the_default_run() {
    let base = ["bench", "schedule", "--per-family", "6", "--seed", "11", "--json"];
    let default = json(&base);
    assert_eq!(default["schedule"], "paper");
    let families = default["families"].as_object().unwrap();
    assert_eq!(
        families.keys().collect::<Vec<_>>(),
        [
            "cliff",
            "early_cliff",
            "erosion",
            "flat",
            "late_cliff",
            "low_plateau",
            "plateau_cliff",
            "slow_slide",
            "staircase",
            "two_cliffs"
        ]
    );
    assert_eq!(families["flat"]["holding_curves"], 6);
    assert!(families["flat"]["false_pnr"].is_number());
    assert!(families["cliff"]["false_pnr"].is_null());
    assert_eq!(json(&[&base[..], &["--schedule", "paper"]].concat()), default);
    let listed = json(&[&base[..], &["--schedule", "screen-bisect,paper"]].concat());
    assert_eq!(listed[1], default);
}

#[test]
fn bad_schedule_lists_and_curves_files_are_refused_clearly() {
    let err = failure(&["bench", "schedule", "--schedule", "paper,adaptiv", "--per-family", "1"]);
    assert!(err.contains("unknown schedule \"adaptiv\"") && err.contains("paper, adaptive, screen-bisect"), "{err}");
    let err = failure(&["bench", "schedule", "--schedule", "paper,paper", "--per-family", "1"]);
    assert!(err.contains("names `paper` twice"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.csv", "curve,t,v\na,0,0.5\na,1,1.2\n");
    let err = failure(&["bench", "schedule", "--curves", bad.to_str().unwrap()]);
    assert!(err.contains("bad.csv line 3: `v` = 1.2 is outside [0, 1]"), "{err}");
    let empty = write(dir.path(), "empty.csv", "");
    let err = failure(&["bench", "schedule", "--curves", empty.to_str().unwrap()]);
    assert!(err.contains("empty.csv: the file is empty"), "{err}");
    let err = failure(&["bench", "schedule", "--curves", dir.path().join("missing.csv").to_str().unwrap()]);
    assert!(err.contains("missing.csv"), "{err}");

    let good = write(dir.path(), "good.csv", "curve,t,v\na,0,0.5\n");
    let err = failure(&["bench", "schedule", "--replicates", "3"]);
    assert!(err.contains("--curves"), "{err}");
    let err = failure(&["bench", "schedule", "--curves", good.to_str().unwrap(), "--per-family", "3"]);
    assert!(err.contains("--per-family"), "{err}");
}
