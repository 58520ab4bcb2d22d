//! `vcurve notes` as a user runs it: published tables or an export's files on disk, CSV on
//! stdout, errors on stderr naming the file, the line and the column.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::labels_cli::{CURVES, Study};
use crate::common::vcurve;

fn paper_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../method/tests/fixtures/paper").join(name)
}

/// The CSV on stdout as rows of `column → value`, in order.
fn rows(out: &Output) -> Vec<BTreeMap<String, String>> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut reader = csv::Reader::from_reader(out.stdout.as_slice());
    let header = reader.headers().unwrap().clone();
    assert_eq!(&header.iter().take(2).collect::<Vec<_>>(), &["trajectory", "note"]);
    reader
        .records()
        .map(|r| header.iter().zip(r.unwrap().iter()).map(|(h, v)| (h.to_owned(), v.to_owned())).collect())
        .collect()
}

const MAIN_JUDGES: [&str; 8] =
    ["--source", "GPT-6.1 Sol", "--source", "GPT-6 Astra", "--source", "GPT-5.5", "--source", "OpenAI o3"];

/// The paper's Table 9 and Tables 11–12, as published: the notes under its Figures 4–7, for every
/// clause the table determines (report/src/notes/tests.rs compares all 47 clause by clause).
#[test]
fn writes_the_papers_notes_from_table_9_and_its_labels() {
    let (table, labels) = (paper_fixture("table09_curves.csv"), paper_fixture("tables11_12_labels.csv"));
    let mut args = vec!["notes", "--trajectories", table.to_str().unwrap(), "--labels", labels.to_str().unwrap()];
    args.extend(MAIN_JUDGES);
    let notes = rows(&vcurve(&args));
    assert_eq!(notes.len(), 47);
    let by_id: BTreeMap<&str, &BTreeMap<String, String>> =
        notes.iter().map(|row| (row["trajectory"].as_str(), row)).collect();
    // Two notes whose every clause the table determines, word for word as the paper prints them.
    assert_eq!(
        by_id["sphinx-8265 s0"]["note"],
        "sphinx-8265 s0 (cliff, C = 0.65; V̂(h_0) = 0.50, T = 64, L0): the decisive step 16 (resolved to one step) \
         comes before the first edit (edit at 23); point of no return at 22 (6 steps later); first failure signal \
         at 38. Labels: GPT-6.1 Sol 19, GPT-6 Astra 19, GPT-5.5 19, OpenAI o3 none (3 after it; 1 “no mistake”)."
    );
    assert_eq!(
        by_id["django-13807 s2"]["note"],
        "django-13807 s2 (cliff, C = 0.71; V̂(h_0) = 0.44, T = 71, L1): the decisive step 1 (in an interval of 5 \
         steps) comes before the first edit (edit at 18), with the value flat until then; point of no return at 15 \
         (14 steps later); first failure signal at 23. Labels: GPT-6.1 Sol 10, GPT-6 Astra 10, GPT-5.5 none, \
         OpenAI o3 18 (2 after it; 1 after the point of no return; 1 “no mistake”)."
    );
    let row = by_id["matplotlib-25960 s0"];
    let values: Vec<&str> = ["decisive_step", "decisive_a", "decisive_b", "edit_relation", "pnr", "pnr_after_decisive"]
        .iter()
        .map(|c| row[*c].as_str())
        .collect();
    assert_eq!(values, ["22", "21", "25", "before", "0", "-22"]);
    assert!(row["note"].contains("point of no return at 0 (22 steps before the decisive step)"), "{}", row["note"]);
    // Four judges on every curve; no raw points, so no rise.
    for row in &notes {
        let tally: u32 = ["inside", "before", "after", "after_pnr", "no_mistake", "unplaced"]
            .iter()
            .map(|c| row[&format!("labels_{c}")].parse::<u32>().unwrap())
            .sum();
        assert_eq!(tally, 4, "{}", row["trajectory"]);
        assert_eq!(row["rise"], "");
    }

    // Every source of the file when none is chosen.
    let all = rows(&vcurve(&args[..5]));
    assert_eq!(all[0]["labels"], "GPT-6.1 Sol 13, GPT-6 Astra 13, GPT-5.5 56, OpenAI o3 44, GPT-6 Luna 44");
}

// ---------------------------------------------------------------------------------------------
// An export's files

const TRAJECTORIES: &str = "\
trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations
a,30,cliff,0.8,11,10,12,11,20,true,9,200
b,40,erosion,0.3,6,5,6,,8,true,,150
c,20,flat,,,,,,20,false,,64
d,25,doomed,,,,,,,,,0
e,35,non_replayable,,,,,,,,,0
";

const LABELS: &str = "\
trajectory,source,step
a,J,3
a,K,11
a,L,19
c,J,4
d,L,5
";

/// `vcurve notes` on a study's three files, plus `extra`.
fn notes(study: &Study, extra: &[&str]) -> Output {
    let mut args = vec![
        "notes",
        "--trajectories",
        study.trajectories.to_str().unwrap(),
        "--labels",
        study.labels.to_str().unwrap(),
        "--curves",
        study.curves.to_str().unwrap(),
    ];
    args.extend(extra);
    vcurve(&args)
}

#[test]
fn writes_an_exports_notes_with_the_rise_and_the_fit() {
    let notes = rows(&notes(&Study::with(TRAJECTORIES, LABELS, CURVES), &[]));
    let text: Vec<&str> = notes.iter().map(|row| row["note"].as_str()).collect();
    assert_eq!(
        text,
        [
            // V(h_0) = 0.6 off the fit; 1 − 0.5/0.6 = 17% gone before (10, 12]: neither flat nor said.
            // The largest rise, 4/16 → 16/32, within noise; 2/32 → 4/16 is smaller.
            "a (cliff, C = 0.80; V̂(h_0) = 0.60, T = 30): the decisive step 11 (in an interval of 2 steps); point of \
             no return at 20 (9 steps later); the raw estimates rise by 0.25 from step 2 (4/16) to 10 (16/32), \
             within the noise of the two samples. Labels: J 3, K 11, L 19 (1 inside the decisive interval; 1 before \
             it; 1 after it).",
            // No point at t = 0: no V(h_0), no share before the interval; only falls: no rise.
            "b (erosion, C = 0.30; T = 40): the decisive step 6 (resolved to one step); point of no return at 8 (2 \
             steps later).",
            "c (flat; T = 20): no decisive step (the fitted value never drops); point of no return at 20. Labels: J 4 \
             (1 not placed (no decisive interval)).",
            "d (doomed; T = 25): no curve: the task's pass rate leaves no value to lose. Labels: L 5 (1 not placed \
             (no decisive interval)).",
            "e (non-replayable; T = 35): no curve: replay could not reproduce the run.",
        ]
    );
    let a = &notes[0];
    assert_eq!(
        ["v0_fit", "value_gone_before", "rise_from_counts", "rise_to_counts", "rise_genuine", "first_edit"]
            .map(|c| a[c].as_str()),
        ["0.6", &((0.6 - 0.5) / 0.6_f64).to_string(), "4/16", "16/32", "false", ""]
    );
    assert_eq!(notes[4]["shape"], "non-replayable");
}

// ---------------------------------------------------------------------------------------------
// Bad input

fn assert_rejected(out: Output, expect: &[&str]) {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "accepted bad input: {stdout}");
    assert!(stdout.is_empty(), "printed output for bad input: {stdout}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert!(stderr.starts_with("vcurve: error: "), "{stderr}");
    for e in expect {
        assert!(stderr.contains(e), "stderr {stderr:?} lacks {e:?}");
    }
}

#[test]
fn refuses_bad_files_naming_the_file_the_line_and_the_column() {
    let header = TRAJECTORIES.lines().next().unwrap();
    let bad_row = |row: &str| {
        Study::with(&format!("{header}\na,30,cliff,0.8,11,10,12,11,20,true,9,200\n{row}\n"), LABELS, CURVES)
    };
    assert_rejected(
        notes(&bad_row("b,forty,erosion,0.3,6,5,6,,8,true,,150"), &[]),
        &["trajectories.csv line 3: `length` is not a whole number: \"forty\""],
    );
    assert_rejected(
        notes(&bad_row("b,40,erosion,0.3,6,5,6,,8,true"), &[]),
        &["trajectories.csv line 3: malformed row: 10 fields where the header has 12"],
    );
    // Table 9's `v0_fit` is a value in [0, 1].
    let table = "trajectory,length,shape,t_star,decisive_a,decisive_b,pnr,v0_fit\na,30,cliff,11,10,12,20,0.5\nb,30,cliff,11,10,12,20,1.5\n";
    assert_rejected(
        notes(&Study::with(table, LABELS, CURVES), &[]),
        &["trajectories.csv line 3: `v0_fit` = 1.5 is outside [0, 1]"],
    );
    assert_rejected(
        notes(&Study::with(TRAJECTORIES, "trajectory,source,step\na,J,3\nzz,J,4\n", CURVES), &[]),
        &["labels.csv line 3: trajectory `zz` is not in ", "trajectories.csv"],
    );
    assert_rejected(
        notes(&Study::with(TRAJECTORIES, "trajectory,source,step\na,J,three\n", CURVES), &[]),
        &["labels.csv line 2: `step`"],
    );
    assert_rejected(
        notes(&Study::with(TRAJECTORIES, LABELS, "trajectory,series,t,n,successes,v_fit\na,main,2,4,5,0.5\n"), &[]),
        &["curves.csv line 2: t = 2 has 5 successes of n = 4"],
    );
    let export = Study::with(TRAJECTORIES, LABELS, CURVES);
    assert_rejected(
        notes(&export, &["--source", "nobody"]),
        &["--source names `nobody`, which labels nothing in ", "labels.csv"],
    );
    assert_rejected(
        vcurve(&["notes", "--trajectories", export.trajectories.to_str().unwrap(), "--source", "J"]),
        &["--source needs --labels"],
    );
    assert_rejected(
        vcurve(&["notes", "--trajectories", "/nonexistent/trajectories.csv"]),
        &["/nonexistent/trajectories.csv: cannot read"],
    );
}
