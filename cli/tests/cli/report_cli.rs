//! `vcurve report` on a finished study: one self-contained HTML file with every table and
//! figure, and the same tables as CSV beside it.

use std::process::Command;

use serde_json::json;

fn vcurve(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vcurve")).args(args).output().unwrap();
    assert!(out.status.success(), "vcurve {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn report_from_an_export_has_every_table_and_figure() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    let report = dir.path().join("report");
    vcurve(&["demo", "--out", export.to_str().unwrap(), "--workers", "2", "--trajectories", "3"]);
    assert!(export.join("analyses.json").exists(), "the export carries the analyses");
    let printed = vcurve(&["report", "--from", export.to_str().unwrap(), "--out", report.to_str().unwrap()]);
    assert!(printed.trim().ends_with("report.html"), "{printed}");

    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    for id in [
        "trajectories",
        "labels",
        "restart_policies",
        "decoys",
        "localizers",
        "checks",
        "sanity",
        "retest",
        "budget_control",
        "stages",
        "figures",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "section {id} missing");
        if id != "figures" {
            let csv = std::fs::read_to_string(report.join(format!("{id}.csv"))).unwrap();
            assert!(csv.lines().count() >= 2 || id == "budget_control" || id == "sanity", "{id}.csv is empty:\n{csv}");
        }
    }
    // One inline figure per trajectory, and a PNG and SVG of each beside the report.
    assert_eq!(html.matches("<figure id=\"fig-").count(), 3);
    assert_eq!(html.matches("<svg").count(), 3);
    let figures: Vec<_> = std::fs::read_dir(report.join("figures")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(figures.len(), 6, "{figures:?}");
    // Self-contained: nothing is loaded from elsewhere.
    for needle in ["src=\"http", "href=\"http", "<script src", "<link", "@import", "url(http"] {
        assert!(!html.contains(needle), "external asset: {needle}");
    }
    // The same tables print on their own, and as JSON equal to the export's analyses.json.
    let printed = vcurve(&["analyses", "--from", export.to_str().unwrap()]);
    for title in [
        "Every trajectory",
        "Labels against the curves",
        "Restart policies, offline",
        "Localizers by value captured",
        "Checks before any claim",
        "Continuations by schedule stage",
    ] {
        assert!(printed.contains(title), "{title} missing from:\n{printed}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&vcurve(&["analyses", "--from", export.to_str().unwrap(), "--json"])).unwrap();
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("analyses.json")).unwrap()).unwrap();
    assert_eq!(json, exported);
    // A demo study is not replayed: its first edits and first symptoms are not measured, and the
    // localizers built on them say so — in the CSV, the HTML, the printed table and the JSON.
    let localizers = std::fs::read_to_string(report.join("localizers.csv")).unwrap();
    for name in ["first edit", "before first symptom"] {
        let row = localizers.lines().find(|l| l.starts_with(&format!("{name},"))).unwrap();
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells[2..], ["not measured"; 3], "{localizers}");
        let n = cells[1];
        assert!(n.starts_with("0 (") && n.ends_with(" not measured)"), "n = 0 proposals: {row}");
        assert!(
            html.contains(&format!(
                "<tr><td>{name}</td><td>{n}</td><td>not measured</td><td>not measured</td><td>not measured</td></tr>"
            )),
            "{name} row in the HTML"
        );
        assert!(printed.lines().any(|l| l.starts_with(name) && l.contains("not measured") && !l.contains("0.00")));
        let row = json["localizers"]["rows"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap();
        assert_eq!(
            (row["vc0"].clone(), row["vc1"].clone(), row["vc3"].clone()),
            (json!(null), json!(null), json!(null))
        );
        assert_eq!(row["n"], 0);
    }
    // The CSV and the HTML table say the same thing.
    let trajectories = std::fs::read_to_string(report.join("trajectories.csv")).unwrap();
    for line in trajectories.lines().skip(1) {
        let id = line.split(',').next().unwrap();
        assert!(html.contains(&format!("<td>{id}</td>")), "{id} not in the HTML table");
    }
}

#[test]
fn report_needs_a_study_or_an_export() {
    let out = Command::new(env!("CARGO_BIN_EXE_vcurve")).args(["report", "--out", "/tmp/x"]).output().unwrap();
    assert!(!out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["report", "--from", dir.path().to_str().unwrap(), "--out", dir.path().join("r").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("results.json"), "{stderr}");
}
