//! `vcurve bench memory` runs end to end on a small count. (The export read one trajectory at a
//! time is tested in `testkit/tests/cluster/memory.rs`.)

#[test]
fn bench_memory_measures_at_each_count_and_exports() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["bench", "memory", "--at", "300,900", "--workers", "4", "--slots", "8", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{report:#}");
    for (p, at) in points.iter().zip([300, 900]) {
        assert!(p["finished"].as_u64().unwrap() >= at, "{p}");
        assert!(p["vm_rss_bytes"].as_u64().unwrap() > 0 && p["vm_hwm_bytes"].as_u64().unwrap() > 0, "{p}");
        assert!(p["store_bytes"].as_u64().unwrap() > 0, "{p}");
    }
    let export = &report["export"];
    assert!(export["files"].as_u64().unwrap() >= 5 && export["bytes"].as_u64().unwrap() > 0, "{export}");
    assert!(export["vm_rss_peak_bytes"].as_u64().unwrap() > 0, "{export}");
    assert!(stderr.contains("memory bench:"), "{stderr}");

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["bench", "memory", "--at", "900,300"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ascending"));
}
