//! `vcurve analyze` against an independent implementation of docs/method.md §3
//! (`tests/reference/estimator.py`, standard-library Python with exact fractions) on held-out
//! curves chosen to sit on every edge the spec defines: ties, rises the fit must pool, points
//! below `K_screen`, thresholds met exactly, `T > B`, unsorted rows.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const FIELDS: &[&str] = &[
    "length",
    "t_star",
    "decisive_interval",
    "concentration",
    "shape",
    "onset",
    "onset_interval",
    "pnr",
    "pnr_certified",
    "restart_point",
];
const POINT_FIELDS: &[&str] = &["t", "n", "successes", "v_hat", "v_fit", "wilson_lo", "wilson_hi", "upper_one_sided"];

fn same(got: &Value, want: &Value, tol: f64) -> bool {
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => (g.as_f64().unwrap() - w.as_f64().unwrap()).abs() <= tol,
        (Value::Array(g), Value::Array(w)) => g.len() == w.len() && g.iter().zip(w).all(|(a, b)| same(a, b, tol)),
        _ => got == want,
    }
}

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/heldout");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists())
        .collect();
    cases.sort();
    cases
}

#[test]
fn analyze_reproduces_the_reference_on_every_heldout_curve() {
    let cases = cases();
    assert!(cases.len() >= 60, "held-out cases missing: {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let args: Value = serde_json::from_str(&std::fs::read_to_string(case.join("args.json")).unwrap()).unwrap();
        let want: Value = serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).unwrap()).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vcurve"));
        cmd.arg("analyze").arg("--points").arg(case.join("points.csv")).args(["--length", &args["length"].to_string()]);
        if let Some(b) = args.get("budget").filter(|b| !b.is_null()) {
            cmd.args(["--budget", &b.to_string()]);
        }
        if case.join("base.csv").exists() {
            cmd.arg("--base-runs").arg(case.join("base.csv"));
        }
        let out = cmd.output().unwrap();
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        if !out.status.success() {
            failures.push(format!("{name}: exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
            continue;
        }
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        for field in FIELDS {
            if !same(&got[field], &want[field], 1e-9) {
                failures.push(format!("{name}: {field}: got {} want {}", got[field], want[field]));
            }
        }
        let (gp, wp) = (got["points"].as_array().unwrap(), want["points"].as_array().unwrap());
        if gp.len() != wp.len() {
            failures.push(format!("{name}: {} points, want {}", gp.len(), wp.len()));
            continue;
        }
        for (g, w) in gp.iter().zip(wp) {
            for field in POINT_FIELDS {
                if !same(&g[field], &w[field], 1e-9) {
                    failures.push(format!("{name}: t={} {field}: got {} want {}", w["t"], g[field], w[field]));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
