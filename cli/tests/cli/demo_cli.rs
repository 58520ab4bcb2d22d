//! `vcurve demo` as a newcomer runs it: one command, a finished study, its exports.

use std::process::Command;

#[test]
fn demo_runs_a_study_and_writes_its_exports() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["demo", "--out", dir.path().to_str().unwrap(), "--workers", "2", "--trajectories", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("trajectory") && stdout.contains("finished in"), "{stdout}");
    for file in ["curves.csv", "trajectories.csv", "results.json", "demo-study.yaml"] {
        assert!(dir.path().join(file).exists(), "{file} missing");
    }
    // The store is closed as the demo ends: its write-ahead log is in the database file, which
    // alone is the whole store.
    assert!(dir.path().join("demo.sqlite").exists());
    assert!(!dir.path().join("demo.sqlite-wal").exists(), "the store's WAL was left beside it");
    let trajectories = std::fs::read_to_string(dir.path().join("trajectories.csv")).unwrap();
    assert_eq!(trajectories.lines().count(), 5, "{trajectories}");
    // The spec the demo wrote is a valid study spec a user can launch elsewhere.
    vcurve_coordinator::spec::load(&dir.path().join("demo-study.yaml")).unwrap();
}
