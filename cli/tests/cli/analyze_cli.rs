//! `vcurve analyze` as a user runs it: the binary, files on disk, JSON on stdout, errors on stderr.

use std::path::Path;

use crate::common::{vcurve, write};
use serde_json::Value;

/// Run `analyze` on a points file with the given text; return (success, stdout, stderr).
fn analyze_text(points: &str, length: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "points.csv", points);
    let out = vcurve(&["analyze", "--points", path.to_str().unwrap(), "--length", length]);
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn assert_rejected(points: &str, length: &str, expect: &[&str]) {
    let (ok, stdout, stderr) = analyze_text(points, length);
    assert!(!ok, "accepted bad input {points:?}: {stdout}");
    assert!(stdout.is_empty(), "printed output for bad input: {stdout}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "stderr {stderr:?} lacks {e:?}");
    }
}

#[test]
fn analyzes_the_shipped_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = vcurve(&[
        "analyze",
        "--points",
        root.join("examples/points.csv").to_str().unwrap(),
        "--length",
        "40",
        "--base-runs",
        root.join("examples/base-runs.csv").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["length"], 40);
    assert_eq!(v["t_star"], 24);
    assert_eq!(v["decisive_interval"], serde_json::json!([23, 24]));
    assert_eq!(v["shape"], "erosion");
    assert_eq!(v["pnr"], 39);
    assert_eq!(v["pnr_certified"], true);
    assert_eq!(v["restart_point"], 24);
    let points = v["points"].as_array().unwrap();
    let ts: Vec<u64> = points.iter().map(|p| p["t"].as_u64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "points not sorted: {ts:?}");
    for key in ["t", "n", "successes", "v_hat", "v_fit", "wilson_lo", "wilson_hi", "upper_one_sided"] {
        assert!(points[0].get(key).is_some(), "point lacks {key}");
    }
}

#[test]
fn restart_point_is_null_without_base_runs() {
    let (ok, stdout, _) = analyze_text("t,n,successes\n0,8,4\n5,8,0\n", "10");
    assert!(ok);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["restart_point"], Value::Null);
}

#[test]
fn rejects_a_non_number() {
    assert_rejected("t,n,successes\n0,8,4\n5,eight,0\n", "10", &["line 3", "`n`", "eight"]);
}

#[test]
fn rejects_more_successes_than_runs() {
    assert_rejected("t,n,successes\n0,8,9\n", "10", &["line 2", "9 successes of n = 8"]);
}

#[test]
fn rejects_negative_counts() {
    assert_rejected("t,n,successes\n0,-8,0\n", "10", &["line 2", "negative"]);
    assert_rejected("t,n,successes\n-1,8,0\n", "10", &["line 2", "`t`", "negative"]);
}

#[test]
fn rejects_a_step_at_or_beyond_the_terminal_point() {
    assert_rejected("t,n,successes\n0,8,4\n10,8,0\n", "10", &["line 3", "t = 10", "T = 10"]);
    assert_rejected("t,n,successes\n0,8,4\n11,8,0\n", "10", &["line 3", "t = 11"]);
}

#[test]
fn rejects_a_duplicate_step() {
    assert_rejected("t,n,successes\n0,8,4\n5,8,1\n5,8,2\n", "10", &["line 4", "t = 5 appears twice"]);
}

#[test]
fn rejects_a_missing_column() {
    assert_rejected("t,successes\n0,4\n", "10", &["missing column `n`"]);
}

#[test]
fn rejects_an_empty_file() {
    assert_rejected("", "10", &["empty"]);
    assert_rejected("t,n,successes\n", "10", &["no points"]);
}

#[test]
fn rejects_a_short_row() {
    assert_rejected("t,n,successes\n0,8,4\n5,8\n", "10", &["line 3", "2 fields"]);
}

#[test]
fn rejects_zero_continuations() {
    assert_rejected("t,n,successes\n0,0,0\n", "10", &["line 2", "n = 0"]);
}

#[test]
fn rejects_a_zero_length_and_missing_files() {
    let (ok, _, stderr) = analyze_text("t,n,successes\n0,8,4\n", "0");
    assert!(!ok && stderr.contains("--length"), "{stderr}");
    let out = vcurve(&["analyze", "--points", "/nonexistent/points.csv", "--length", "10"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/points.csv"));
}

#[test]
fn rejects_bad_base_runs() {
    let dir = tempfile::tempdir().unwrap();
    let points = write(dir.path(), "points.csv", "t,n,successes\n0,8,4\n");
    for (text, expect) in [
        ("success,steps\nyes,40\n", "line 2"),
        ("success,steps\n1,-3\n", "negative"),
        ("success\n1\n", "missing column `steps`"),
        ("success,steps\n", "no base runs"),
    ] {
        let base = write(dir.path(), "base.csv", text);
        let out = vcurve(&[
            "analyze",
            "--points",
            points.to_str().unwrap(),
            "--length",
            "10",
            "--base-runs",
            base.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expect), "{text:?}: {stderr}");
    }
}

#[test]
fn rejects_bad_thresholds_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let points = write(dir.path(), "points.csv", "t,n,successes\n0,8,4\n");
    let thresholds = write(dir.path(), "thresholds.yaml", "epsilon: 2.0\n");
    let out = vcurve(&[
        "analyze",
        "--points",
        points.to_str().unwrap(),
        "--length",
        "10",
        "--thresholds",
        thresholds.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("epsilon") && stderr.contains("(0, 1]"), "{stderr}");
}

#[test]
fn thresholds_change_the_analysis() {
    let dir = tempfile::tempdir().unwrap();
    // 0 of 8 has U = 0.2528: certified only when ε is raised above it.
    let points = write(dir.path(), "points.csv", "t,n,successes\n0,8,8\n5,8,0\n");
    let thresholds = write(dir.path(), "thresholds.yaml", "epsilon: 0.3\n");
    let out = vcurve(&[
        "analyze",
        "--points",
        points.to_str().unwrap(),
        "--length",
        "10",
        "--thresholds",
        thresholds.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["pnr"].as_u64(), v["pnr_certified"].as_bool()), (Some(5), Some(true)));
}
