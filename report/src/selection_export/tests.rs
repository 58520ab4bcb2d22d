//! The base-run pool and the selection from the hand-made selection of the replay tests: two band
//! tasks, a doomed and a saturated one, 32 base runs, five picks with a dropped back-fill and an
//! exhausted stratum.

use serde_json::Value;

use super::*;
use crate::export::{files, results};
use crate::replay_table::tests::{base_runs, selected_trajectories, selection, study};

#[test]
fn selection_csv_has_a_row_per_base_run_with_its_role() {
    let sel = selection();
    let runs = base_runs();
    let csv = selection_csv(&sel, &runs);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "task,seed,verdict,success,steps,end_type,stratum,stratum_order,role,position,round,non_replayable,reason"
    );
    assert_eq!(lines.len(), 1 + 32);
    assert_eq!(
        &lines[1..9],
        [
            "a,0,band,true,30,submitted,,,decoy,,,,decoy 1",
            "a,1,band,false,20,submitted,L0-submit,1,selected,0,0,false,pick 0",
            "a,2,band,true,30,submitted,,,decoy-pool,,,,\"successful run of a band task, not drawn as a decoy\"",
            "a,3,band,false,25,submitted,L0-submit,0,selected,2,0,false,pick 2",
            "a,4,band,true,30,submitted,,,decoy-pool,,,,\"successful run of a band task, not drawn as a decoy\"",
            "a,5,band,false,40,submitted,L1-submit,0,selected,3,0,false,pick 3",
            "a,6,band,false,28,submitted,L0-submit,2,queued,,,,\
             failed run of a band task: L0-submit; left in the queue: its task had its cap selected",
            "a,7,band,false,50,submitted,L1-submit,1,queued,,,,\
             failed run of a band task: L1-submit; left in the queue: its task had its cap selected",
        ]
    );
    assert_eq!(
        lines[9],
        "b,0,band,true,30,submitted,,,decoy-pool,,,,\"successful run of a band task, not drawn as a decoy\""
    );
    assert_eq!(lines[11], "b,2,band,false,100,step_cap,L2-cap,0,selected,1,0,true,pick 1");
    assert_eq!(lines[13], "b,4,band,false,100,step_cap,L2-cap,1,back-fill,4,1,true,pick 4");
    assert_eq!(lines[17], "c,0,doomed,false,100,step_cap,,,not in band,,,,c: Doomed");
    assert_eq!(lines[32], "d,7,saturated,true,30,submitted,,,not in band,,,,d: Saturated");
    let roles = selection_rows(&sel, &runs).iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.role).or_insert(0) += 1;
        m
    });
    use SelectionRole::*;
    assert_eq!(
        roles.into_iter().collect::<Vec<_>>(),
        [(Selected, 4), (BackFill, 1), (Queued, 2), (Decoy, 2), (DecoyPool, 7), (NotInBand, 16)]
    );
}

#[test]
fn base_runs_csv_lists_every_base_run_by_subject_and_seed() {
    let csv = base_runs_csv(&base_runs());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 33);
    assert_eq!(&lines[..3], ["subject,seed,success,steps,end_type", "a,0,true,30,submitted", "a,1,false,20,submitted"]);
    assert_eq!(lines[32], "d,7,true,30,submitted");
}

#[test]
fn the_pool_in_table_8_terms() {
    let pool = Pool::of(&selection(), &base_runs());
    assert_eq!(
        pool,
        Pool {
            tasks: 4,
            runs: 32,
            successes: 17,
            pass_at_1: Some((3.0 / 8.0 + 6.0 / 8.0 + 0.0 + 1.0) / 4.0),
            doomed: 1,
            below_band: 0,
            band: 2,
            saturated: 1,
            no_base_runs: 0,
            cap_hits: Some((6, 32)),
            successes_histogram: vec![1, 0, 0, 1, 0, 0, 1, 0, 1],
        }
    );
    // Without the base runs in the record, the cap hits are not measured.
    assert_eq!(Pool::of(&selection(), &[]).cap_hits, None);
}

#[test]
fn the_report_section_shows_the_pool_the_strata_the_decoys_and_the_back_fills() {
    let s = study(selected_trajectories(), base_runs(), Some(selection()));
    let tables = tables(&results(&s).unwrap());
    let names: Vec<&str> = tables.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        ["base_run_pool", "base_run_successes", "selection_strata", "selection_decoys", "selection_back_fills"]
    );
    assert_eq!(tables[0].title, "Base runs and selection");
    let pool: Vec<(&str, &str)> = tables[0].rows.iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    assert_eq!(
        pool,
        [
            ("tasks, runs", "4, 32"),
            ("pass@1", "0.531"),
            ("doomed (p ≤ 0.125)", "0.25 (1 of 4)"),
            ("band (2–6 of 8)", "0.50 (2 of 4)"),
            ("saturated (> 6 of 8)", "0.25 (1 of 4)"),
            ("cap hits", "0.19 (6 of 32)"),
            ("tercile cuts", "30.00 and 60.00 over 9 failed runs"),
            ("selection", "seed 11, target 4, at most 3 per task: 7 candidates, 4 selected initially, 1 back-filled"),
            ("decoys", "2 of 9 successful band runs"),
        ]
    );
    let histogram: Vec<[&str; 2]> = tables[1].rows.iter().map(|r| [r[0].as_str(), r[1].as_str()]).collect();
    assert_eq!(histogram.len(), 9);
    assert_eq!(
        (histogram[0], histogram[3], histogram[8], histogram[1]),
        (["0", "1"], ["3", "1"], ["8", "1"], ["1", "0"])
    );
    assert_eq!(
        tables[2].rows,
        [
            ["L0-submit", "3", "2", "0", "0", "2", "1", "no"],
            ["L1-submit", "2", "1", "0", "0", "1", "1", "no"],
            ["L2-cap", "2", "1", "1", "2", "0", "0", "yes (1 drop(s) not replaced)"],
        ]
    );
    assert_eq!(tables[3].rows[1], ["b s6", "30", "submit", "decoy 2"]);
    assert_eq!(
        tables[4].rows,
        [["b s2", "L2-cap", "replaced by b s4", "1"], ["b s4", "L2-cap", "stratum exhausted", "2"]]
    );
    // In the page, under its own heading.
    let a = crate::analyses::analyses(&results(&s).unwrap()).unwrap();
    let report = crate::html::build(&results(&s).unwrap(), &a, None).unwrap();
    let html = String::from_utf8(report.files["report.html"].clone()).unwrap();
    assert!(html.contains("<h2 id=\"base_run_pool\">Base runs and selection</h2>"), "{html}");
    assert!(html.contains("<h2 id=\"replay_roles\">Replay (Appendix L)</h2>"), "{html}");
    assert!(report.files.contains_key("selection_strata.csv"));
}

#[test]
fn the_export_writes_the_selection_files_only_for_a_study_with_them() {
    let s = study(selected_trajectories(), base_runs(), Some(selection()));
    let files = files(&s).unwrap();
    for name in ["replay.csv", "replay.json", "selection.json", "selection.csv", "base_runs.csv"] {
        assert!(files.contains_key(name), "{name}");
    }
    let stored: Selection = serde_json::from_slice(&files["selection.json"]).unwrap();
    assert_eq!(stored, selection());
    assert_eq!(files["selection.csv"], selection_csv(&selection(), &base_runs()).into_bytes());
    assert_eq!(files["base_runs.csv"], base_runs_csv(&base_runs()).into_bytes());
    // results.json carries them, sorted, and reads back to them.
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    assert_eq!(json["base_runs"][0]["subject"], "a");
    let back: Results = serde_json::from_value(json).unwrap();
    assert_eq!(back.selection, Some(selection()));
    assert_eq!(back.base_runs.len(), 32);

    // Base runs without a selection (a restart check's): base_runs.csv alone; no section.
    let s = study(Vec::new(), base_runs(), None);
    let files = crate::export::files(&s).unwrap();
    assert!(files.contains_key("base_runs.csv"));
    assert!(!files.contains_key("selection.json") && !files.contains_key("selection.csv"));
    assert!(tables(&results(&s).unwrap()).is_empty());
    // Neither: nothing of this, and results.json says nothing of them.
    let s = study(Vec::new(), Vec::new(), None);
    let files = crate::export::files(&s).unwrap();
    assert!(!files.contains_key("base_runs.csv") && !files.contains_key("selection.csv"));
    let json: Value = serde_json::from_slice(&files["results.json"]).unwrap();
    assert!(json.get("base_runs").is_none() && json.get("selection").is_none());
}
