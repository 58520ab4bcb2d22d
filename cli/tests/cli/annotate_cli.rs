//! `vcurve annotate` as a user runs it on a task-state export: a stratified sample of the gap
//! atoms and a sheet per annotator, then κ and the shares of the gap mass from two filled sheets;
//! errors name the file and the line.

use std::collections::BTreeMap;
use std::path::Path;

use vcurve_method::task_state::{Category, CheckpointRecord, Credit, EligibilityFlags, ProbeRecord, StudyInput, View};

use crate::common::vcurve;

/// An export of 4 tasks, 6 probes each: probe `i` is credited in `T` and, for `i < 2`, in `U`
/// too, so 16 probes are gap atoms, in two categories.
fn export(dir: &Path) {
    let mut input = StudyInput::default();
    let mut probes = Vec::new();
    let mut views = Vec::new();
    for t in 0..4 {
        let task = format!("task-{t}");
        input.checkpoints.push(CheckpointRecord {
            task: task.clone(),
            checkpoint: 1,
            fixed: Some(false),
            view_chars: BTreeMap::new(),
            atoms: BTreeMap::from([(Category::Facts, 3), (Category::Risks, 3)]),
        });
        views.push(serde_json::json!({"task": task, "checkpoint": 1, "view": "reports", "digest": format!("{t:064}")}));
        for i in 0..6 {
            let probe = format!("{task}/k1/A{i}");
            let reports = if i < 2 { Credit::Full } else { Credit::None };
            input.probes.push(ProbeRecord {
                probe: probe.clone(),
                task: task.clone(),
                checkpoint: 1,
                category: if i % 2 == 0 { Category::Facts } else { Category::Risks },
                importance: 3,
                origin_turn: 1,
                flags: EligibilityFlags { well_formed: true, excluded: None },
                credits: BTreeMap::from([(View::Full, vec![Credit::Full; 3]), (View::Reports, vec![reports; 3])]),
            });
            probes
                .push(serde_json::json!({"probe": probe, "question": format!("q{i}?"), "reference": format!("r{i}")}));
        }
    }
    let json = serde_json::json!({"input": input, "views": views, "probes": probes});
    std::fs::write(dir.join("task_state.json"), serde_json::to_vec(&json).unwrap()).unwrap();
}

/// The sheet `sample` wrote, filled: `mention` and `sufficiency` by row index.
fn fill(sheet: &str, label: impl Fn(usize) -> (&'static str, &'static str)) -> String {
    let mut reader = csv::Reader::from_reader(sheet.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(&headers).unwrap();
    for (i, row) in reader.records().enumerate() {
        let row = row.unwrap();
        let (m, s) = label(i);
        let mut fields: Vec<String> = row.iter().map(str::to_string).collect();
        fields[7] = m.into();
        fields[8] = s.into();
        out.write_record(&fields).unwrap();
    }
    String::from_utf8(out.into_inner().unwrap()).unwrap()
}

#[test]
fn samples_gap_atoms_and_scores_two_annotators() {
    let dir = tempfile::tempdir().unwrap();
    export(dir.path());
    let from = dir.path().to_str().unwrap();
    let out = dir.path().join("annotation");
    let sampled = vcurve(&["annotate", "sample", "--from", from, "--out", out.to_str().unwrap(), "--atoms", "10"]);
    assert!(sampled.status.success(), "{}", String::from_utf8_lossy(&sampled.stderr));
    let stdout = String::from_utf8_lossy(&sampled.stdout);
    assert!(stdout.starts_with("16 gap atoms, 10 sampled in 2 strata (seed 0)"), "{stdout}");
    let sheet = std::fs::read_to_string(out.join("annotation.csv")).unwrap();
    assert_eq!(sheet.lines().count(), 11);
    assert!(sheet.lines().nth(1).unwrap().contains(",views/"), "the reports the annotator reads: {sheet}");
    assert!(sheet.contains("q2?") && sheet.contains("r2"), "{sheet}");

    // Annotator A: every atom not mentioned but the first three; B agrees on mention, not always
    // on sufficiency.
    let a = fill(&sheet, |i| if i < 3 { ("mentioned", "insufficient") } else { ("not_mentioned", "") });
    let b = fill(&sheet, |i| match i {
        0 => ("mentioned", "sufficient"),
        1 | 2 => ("mentioned", "insufficient"),
        _ => ("not_mentioned", ""),
    });
    std::fs::write(dir.path().join("a.csv"), &a).unwrap();
    std::fs::write(dir.path().join("b.csv"), &b).unwrap();
    let sample = out.join("annotation-sample.json");
    let sample = sample.to_str().unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> =
            ["annotate", "score", "--from", from, "--sample", sample].iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |v: Vec<String>| vcurve(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let (pa, pb) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    let (pa, pb) = (pa.to_str().unwrap().to_string(), pb.to_str().unwrap().to_string());
    let mut v = args(&["--json", "--draws", "200", "--labels"]);
    v.extend([pa.clone(), "--labels".into(), pb]);
    let scored = run(v);
    assert!(scored.status.success(), "{}", String::from_utf8_lossy(&scored.stderr));
    let json: serde_json::Value = serde_json::from_slice(&scored.stdout).unwrap();
    assert_eq!(json["agreement"]["atoms"], 10);
    assert_eq!(json["agreement"]["mention_kappa"], 1.0);
    assert_eq!(json["agreement"]["both_mentioned"], 3);
    // Every sampled atom has the same mass and inclusion within its stratum: A's shares are counts.
    let a_shares = &json["shares"][0];
    assert_eq!(a_shares[0]["state"], "not_mentioned");
    assert_eq!(a_shares[0]["atoms"], 7);
    assert_eq!(a_shares[1]["atoms"], 3);

    // A bad label names the file and the line.
    let bad = a.replacen("not_mentioned", "nope", 1);
    std::fs::write(dir.path().join("bad.csv"), bad).unwrap();
    let pbad = dir.path().join("bad.csv").to_str().unwrap().to_string();
    let mut v = args(&["--labels"]);
    v.extend([pa, "--labels".into(), pbad]);
    let refused = run(v);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("bad.csv line 5: mention \"nope\" is not mentioned"), "{err}");
    // An export folder that is not a task-state study's is refused with what to give.
    let empty = tempfile::tempdir().unwrap();
    let refused = vcurve(&["annotate", "sample", "--from", empty.path().to_str().unwrap(), "--out", from]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("reads a task-state study's export folder"));
}
