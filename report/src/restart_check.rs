//! The export of an online restart check (the paper's Appendix Q): `restart_check.csv`,
//! `restart_check.json` and `report.html`.
//!
//! A restart-check study has no trajectories of its own: its spec lists one row per trajectory of
//! the checked study with a restart point `t_r` (with the predicted `R̂(x, B − t_r)` and the value
//! of continuing `V(h_{t_r})`), and its fresh runs are base runs whose subject is the row's
//! trajectory, seeds `0..runs`. Pure: a [`StudyRecord`] in, bytes out; the table and its pooled
//! line are [`vcurve_method::analyses::online`]'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use vcurve_method::TOLERANCE;
use vcurve_method::analyses::online::{CheckInput, CheckRow, Pooled, RestartCheck, RestartCheckError, restart_check};
use vcurve_method::analyses::{BOOTSTRAP_SEED, Measured, NOT_MEASURED};
use vcurve_record::{EndType, RestartCheckSpec, StudyRecord};

use crate::table::{STYLE, Table, esc};

/// What `restart_check.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartCheckResults {
    pub name: String,
    /// The id of the checked study.
    pub of: String,
    /// Fresh runs per trajectory.
    pub runs: u32,
    /// The checked study's step budget `B`; a row's runs have `B − t_r`.
    pub budget: u32,
    /// The table (`rows`) and its pooled line (`pooled`).
    #[serde(flatten)]
    pub check: RestartCheck,
}

/// Why a study's restart check cannot be exported.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestartCheckExportError {
    #[error("study {0} is not a restart check")]
    NotARestartCheck(String),
    #[error(transparent)]
    Check(#[from] RestartCheckError),
}

fn check_spec(study: &StudyRecord) -> Result<&RestartCheckSpec, RestartCheckExportError> {
    study.spec.restart_check.as_ref().ok_or_else(|| RestartCheckExportError::NotARestartCheck(study.id.clone()))
}

/// The rows as far as their fresh runs have got: the study's base runs by subject, seeds
/// `0..runs` (a base run of another subject or seed is not part of the check).
pub fn inputs(study: &StudyRecord) -> Result<Vec<CheckInput>, RestartCheckExportError> {
    let spec = check_spec(study)?;
    // Subject → (runs, successes, cap hits).
    let mut by_subject: BTreeMap<&str, (u32, u32, u32)> = BTreeMap::new();
    for run in study.base_runs.iter().filter(|r| r.seed < spec.runs) {
        let counts = by_subject.entry(run.subject.as_str()).or_default();
        counts.0 += 1;
        counts.1 += u32::from(run.success);
        counts.2 += u32::from(run.end_type == EndType::StepCap);
    }
    Ok(spec
        .rows
        .iter()
        .map(|row| {
            let (runs, successes, cap_hits) = by_subject.get(row.trajectory.as_str()).copied().unwrap_or_default();
            CheckInput {
                trajectory: row.trajectory.clone(),
                task: row.task.clone(),
                restart_point: row.restart_point,
                planned: spec.runs,
                runs,
                successes,
                cap_hits,
                predicted: row.predicted,
                continuing: row.continuing,
            }
        })
        .collect())
}

/// The check of a restart-check study, as `restart_check.json` holds it.
pub fn results(study: &StudyRecord) -> Result<RestartCheckResults, RestartCheckExportError> {
    let spec = check_spec(study)?;
    Ok(RestartCheckResults {
        name: study.spec.name.clone(),
        of: spec.of.clone(),
        runs: spec.runs,
        budget: study.spec.budget,
        check: restart_check(inputs(study)?, &study.spec.thresholds, BOOTSTRAP_SEED)?,
    })
}

/// The header of `restart_check.csv`.
pub const CSV_HEADER: [&str; 9] = [
    "trajectory",
    "restart_point",
    "runs",
    "successes",
    "observed",
    "wilson_lo",
    "wilson_hi",
    "predicted",
    "continuing",
];

/// A probability in the CSV: four decimals, empty when not measured.
fn decimal(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.4}"))
}

/// `restart_check.csv`: one row per trajectory; `runs` counts the runs that finished, and a row
/// with none has `observed` and its interval empty (not measured).
pub fn csv(results: &RestartCheckResults) -> String {
    let mut table = Table::new("restart_check", "", "", &CSV_HEADER);
    for r in &results.check.rows {
        let i = &r.input;
        table.row(vec![
            i.trajectory.clone(),
            i.restart_point.to_string(),
            i.runs.to_string(),
            i.successes.to_string(),
            decimal(r.observed),
            decimal(r.wilson_lo),
            decimal(r.wilson_hi),
            decimal(Some(i.predicted)),
            decimal(Some(i.continuing)),
        ]);
    }
    table.csv()
}

/// A row's observed cell: `k/n = p (Wilson lo–hi)`, and the runs still to come.
fn observed_cell(r: &CheckRow) -> String {
    let i = &r.input;
    let to_go = match i.planned - i.runs {
        0 => None,
        1 => Some("1 run to go".to_string()),
        n => Some(format!("{n} runs to go")),
    };
    match (r.observed, r.wilson_lo, r.wilson_hi) {
        (Some(p), Some(lo), Some(hi)) => {
            let to_go = to_go.map_or_else(String::new, |t| format!(", {t}"));
            format!("{}/{} = {p:.2} (Wilson {lo:.2}–{hi:.2}){to_go}", i.successes, i.runs)
        }
        _ => format!("{NOT_MEASURED}{}", to_go.map_or_else(String::new, |t| format!(" ({t})"))),
    }
}

/// The table of the page (the paper's Table 28).
pub fn table(results: &RestartCheckResults) -> Table {
    let mut t = Table::new(
        "restart_check",
        "Online restart check",
        &format!(
            "For each trajectory of study {} with a restart point t_r, {} fresh runs of its task from h_0 with budget B − t_r and new seeds, evaluated like any run, next to the value of continuing V(h_t_r) and the restart value R̂(x, B − t_r) predicted from the base runs (the paper's Table 28). A trajectory none of whose runs has finished is not measured.",
            results.of, results.runs
        ),
        &["Trajectory", "t_r", "V(h_t_r)", "R̂ pred.", "Observed"],
    );
    for r in &results.check.rows {
        let i = &r.input;
        t.row(vec![
            i.trajectory.clone(),
            i.restart_point.to_string(),
            format!("{:.2}", i.continuing),
            format!("{:.2}", i.predicted),
            observed_cell(r),
        ]);
    }
    t
}

/// The pooled line in the paper's words (Appendix Q).
pub fn pooled_text(p: &Pooled) -> String {
    let step = format!("Mean restart step {:.0}.", Measured::from_option(p.mean_restart_step));
    if p.trajectories == 0 {
        return "The checked study has no trajectory with a restart point: there is nothing to check.".into();
    }
    let (Some(observed), Some(difference)) = (p.observed, p.difference) else {
        return format!(
            "No fresh run of the {} planned has finished yet: the observed success is {NOT_MEASURED}. {step}",
            p.planned
        );
    };
    let two = |v: Option<f64>| format!("{:.2}", Measured::from_option(v));
    let signed = |v: Option<f64>| format!("{:+.2}", Measured::from_option(v));
    let count = |v: Option<u32>| Measured::from_option(v).to_string();
    let over = if p.runs < p.planned {
        format!("Over the {} runs finished so far (of {} planned)", p.runs, p.planned)
    } else {
        format!("Over the {} runs", p.runs)
    };
    let verdict = if difference < -TOLERANCE {
        format!("optimistic by {:.2}", -difference)
    } else if difference > TOLERANCE {
        format!("pessimistic by {difference:.2}")
    } else {
        "exact".into()
    };
    format!(
        "{over} the observed success is {observed:.2} (Wilson {}–{}; mean over trajectories {}) against a predicted {} and a continuing value of {}; the prediction is {verdict} (task-cluster bootstrap 95% interval {} to {}). {step} Per trajectory, the observed success is below the prediction on {} of {} trajectories and above it on {}, and above the value of continuing on {}; {} of the {} fresh runs hit the step cap.",
        two(p.wilson_lo),
        two(p.wilson_hi),
        two(p.observed_mean),
        two(p.predicted),
        two(p.continuing),
        signed(p.difference_lo),
        signed(p.difference_hi),
        count(p.below_prediction),
        p.measured,
        count(p.above_prediction),
        count(p.above_continuing),
        count(p.cap_hits),
        p.runs,
    )
}

/// `report.html`: one self-contained page, styled as the study report.
pub fn html(results: &RestartCheckResults) -> String {
    let p = &results.check.pooled;
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vcurve restart check: {name}</title><style>{STYLE}</style></head><body>\n<h1>vcurve restart check: {name}</h1>\n",
        name = esc(&results.name)
    );
    let _ = writeln!(
        html,
        "<ul class=\"summary\"><li>online restart check of study <b>{}</b> (the paper's Appendix Q), step budget B = {}</li>\
         <li>{} trajectories with a restart point, {} fresh runs each: {} runs planned, {} finished</li></ul>",
        esc(&results.of),
        results.budget,
        p.trajectories,
        results.runs,
        p.planned,
        p.runs
    );
    let _ = writeln!(html, "<p>{}</p>", esc(&pooled_text(p)));
    html.push_str(&table(results).html());
    html.push_str("</body></html>\n");
    html
}

/// The export's files by name: `restart_check.csv`, `restart_check.json` and `report.html`.
pub fn files(study: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, RestartCheckExportError> {
    let results = results(study)?;
    let mut json = serde_json::to_vec_pretty(&results).expect("restart check serializes");
    json.push(b'\n');
    Ok(BTreeMap::from([
        ("restart_check.csv".to_string(), csv(&results).into_bytes()),
        ("restart_check.json".to_string(), json),
        ("report.html".to_string(), html(&results).into_bytes()),
    ]))
}

#[cfg(test)]
mod tests {
    use vcurve_record::{
        Admission, BaseRunRecord, ControlCounts, EvaluationStats, RestartCheckRow, RestartCheckSpec, RunnerSpec,
        StudySpec, StudyState,
    };

    use super::*;
    use vcurve_method::Thresholds;

    fn row(trajectory: &str, restart_point: u32, predicted: f64, continuing: f64) -> RestartCheckRow {
        RestartCheckRow {
            trajectory: trajectory.into(),
            task: trajectory.split(' ').next().unwrap().into(),
            restart_point,
            predicted,
            continuing,
        }
    }

    fn run(subject: &str, seed: u32, success: bool, end_type: EndType) -> BaseRunRecord {
        BaseRunRecord { subject: subject.into(), seed, success, steps: 10, end_type }
    }

    /// Three rows of 4 runs: `a s1` finished 3 of 4 (one at the step cap), `b s2` 1 of 2, `c s0`
    /// none; a run past the planned seeds and a run of another subject are not part of the check.
    fn study(rows: Vec<RestartCheckRow>, base_runs: Vec<BaseRunRecord>) -> StudyRecord {
        StudyRecord {
            id: "check-1".into(),
            state: StudyState::Running,
            spec: StudySpec {
                name: "paper-restart-check".into(),
                seed: 7,
                budget: 100,
                schedule: "none".into(),
                runner: RunnerSpec::Synthetic(Default::default()),
                thresholds: Thresholds { bootstrap_resamples: 1_000, ..Thresholds::default() },
                controls: ControlCounts::default(),
                admission: Admission::default(),
                trajectories: Vec::new(),
                decoys: Vec::new(),
                tasks: Vec::new(),
                selection: None,
                restart_check: Some(RestartCheckSpec { of: "paper".into(), runs: 4, rows }),
                task_state: None,
                judges: Default::default(),
            },
            trajectories: Vec::new(),
            evaluation: EvaluationStats::default(),
            base_runs,
            selection: None,
            retired: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn hand_made() -> StudyRecord {
        study(
            vec![row("a s1", 0, 0.5, 0.25), row("b s2", 6, 0.75, 0.125), row("c s0", 2, 0.625, 0.0)],
            vec![
                run("a s1", 0, true, EndType::Submitted),
                run("a s1", 1, true, EndType::Submitted),
                run("a s1", 2, false, EndType::StepCap),
                run("a s1", 3, true, EndType::Submitted),
                run("a s1", 9, false, EndType::Submitted),
                run("b s2", 0, false, EndType::Submitted),
                run("b s2", 1, true, EndType::Submitted),
                run("other", 0, true, EndType::Submitted),
            ],
        )
    }

    fn text(files: &BTreeMap<String, Vec<u8>>, name: &str) -> String {
        String::from_utf8(files[name].clone()).unwrap()
    }

    #[test]
    fn the_csv_has_its_header_and_leaves_not_measured_empty() {
        let files = files(&hand_made()).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["report.html", "restart_check.csv", "restart_check.json"]);
        let csv = text(&files, "restart_check.csv");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "trajectory,restart_point,runs,successes,observed,wilson_lo,wilson_hi,predicted,continuing"
        );
        let band = vcurve_method::stats::wilson(3, 4, 1.96);
        assert_eq!(lines[1], format!("a s1,0,4,3,0.7500,{:.4},{:.4},0.5000,0.2500", band.lo, band.hi));
        assert!(lines[2].starts_with("b s2,6,2,1,0.5000,"), "{}", lines[2]);
        assert_eq!(lines[3], "c s0,2,0,0,,,,0.6250,0.0000");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn the_json_holds_the_rows_and_the_pooled_line() {
        let files = files(&hand_made()).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&files["restart_check.json"]).unwrap();
        assert_eq!((json["name"].as_str(), json["of"].as_str()), (Some("paper-restart-check"), Some("paper")));
        assert_eq!((json["runs"].as_u64(), json["budget"].as_u64()), (Some(4), Some(100)));
        let rows = json["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0]["runs"].as_u64(), rows[0]["cap_hits"].as_u64()), (Some(4), Some(1)));
        assert_eq!(rows[2]["observed"], serde_json::Value::Null);
        let p = &json["pooled"];
        assert_eq!((p["trajectories"].as_u64(), p["measured"].as_u64()), (Some(3), Some(2)));
        assert_eq!((p["planned"].as_u64(), p["runs"].as_u64(), p["successes"].as_u64()), (Some(12), Some(6), Some(4)));
        assert_eq!(p["cap_hits"].as_u64(), Some(1));
        // (4 − (4 · 0.5 + 2 · 0.75)) / 6.
        assert!((p["difference"].as_f64().unwrap() - 0.5 / 6.0).abs() < 1e-12);
        let back: RestartCheckResults = serde_json::from_slice(&files["restart_check.json"]).unwrap();
        assert_eq!(back, results(&hand_made()).unwrap());
    }

    #[test]
    fn the_page_shows_the_table_and_the_pooled_line_with_not_measured() {
        let page = text(&files(&hand_made()).unwrap(), "report.html");
        assert!(page.starts_with("<!doctype html>") && page.ends_with("</body></html>\n"));
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "self-contained");
        for header in ["Trajectory", "t_r", "V(h_t_r)", "R̂ pred.", "Observed"] {
            assert!(page.contains(&format!("<th>{}</th>", esc(header))), "{header}");
        }
        assert!(page.contains("<td>3/4 = 0.75 (Wilson"), "{page}");
        assert!(page.contains("<td>1/2 = 0.50 (Wilson"), "{page}");
        assert!(page.contains(", 2 runs to go</td>"), "{page}");
        assert!(page.contains("<td>not measured (4 runs to go)</td>"), "{page}");
        assert!(
            page.contains("Over the 6 runs finished so far (of 12 planned) the observed success is 0.67"),
            "{page}"
        );
        assert!(page.contains("the prediction is pessimistic by 0.08 (task-cluster bootstrap 95% interval"), "{page}");
        assert!(page.contains("Mean restart step 3."), "{page}");
        assert!(
            page.contains(
                "below the prediction on 1 of 2 trajectories and above it on 1, and above the value of continuing on 2"
            ),
            "{page}"
        );
        assert!(page.contains("1 of the 6 fresh runs hit the step cap."), "{page}");
    }

    #[test]
    fn nothing_finished_is_not_measured_and_no_rows_is_nothing_to_check() {
        let none = files(&study(vec![row("a s1", 0, 0.5, 0.25)], Vec::new())).unwrap();
        assert_eq!(
            text(&none, "restart_check.csv"),
            format!("{}\na s1,0,0,0,,,,0.5000,0.2500\n", CSV_HEADER.join(","))
        );
        let page = text(&none, "report.html");
        assert!(page.contains("No fresh run of the 4 planned has finished yet: the observed success is not measured. Mean restart step 0."), "{page}");
        let empty = files(&study(Vec::new(), Vec::new())).unwrap();
        assert_eq!(text(&empty, "restart_check.csv"), format!("{}\n", CSV_HEADER.join(",")));
        assert!(text(&empty, "report.html").contains("there is nothing to check"));
        assert!(text(&empty, "report.html").contains("nothing to show"));
    }

    #[test]
    fn the_paper_pooled_line_reads_as_the_paper() {
        // Appendix Q's pooled numbers (online.rs reproduces them from Table 28; the paper's 29 cap
        // hits are not in the table) read back in the paper's words.
        let p = Pooled {
            trajectories: 30,
            measured: 30,
            planned: 240,
            runs: 240,
            successes: 93,
            observed: Some(0.3875),
            wilson_lo: Some(0.328),
            wilson_hi: Some(0.4504),
            observed_mean: Some(0.3875),
            predicted: Some(0.45),
            continuing: Some(0.258),
            difference: Some(-0.0625),
            difference_lo: Some(-0.152),
            difference_hi: Some(0.0375),
            mean_restart_step: Some(7.17),
            below_prediction: Some(14),
            above_prediction: Some(9),
            above_continuing: Some(20),
            cap_hits: Some(29),
        };
        assert_eq!(
            pooled_text(&p),
            "Over the 240 runs the observed success is 0.39 (Wilson 0.33–0.45; mean over trajectories 0.39) against a predicted 0.45 and a continuing value of 0.26; the prediction is optimistic by 0.06 (task-cluster bootstrap 95% interval -0.15 to +0.04). Mean restart step 7. Per trajectory, the observed success is below the prediction on 14 of 30 trajectories and above it on 9, and above the value of continuing on 20; 29 of the 240 fresh runs hit the step cap."
        );
    }

    #[test]
    fn the_checked_studys_report_shows_its_check_under_the_tables() {
        let check = results(&hand_made()).unwrap();
        // Any study's results will do for the page around it (this one has no trajectories).
        let main = crate::export::results(&hand_made()).unwrap();
        let a = crate::analyses::analyses(&main).unwrap();
        let with = crate::html::build(&main, &a, Some(&check)).unwrap();
        let html = String::from_utf8(with.files["report.html"].clone()).unwrap();
        assert!(html.contains("<h2 id=\"restart_check\">Online restart check</h2>"), "{html}");
        assert!(html.contains("<a href=\"#restart_check\">"), "the contents link to the check");
        assert!(html.contains(&esc(&pooled_text(&check.check.pooled))), "the pooled line is on the page");
        assert!(!with.files.contains_key("restart_check.csv"), "the export's CSV is not written again");
        let without = crate::html::build(&main, &a, None).unwrap();
        let html = String::from_utf8(without.files["report.html"].clone()).unwrap();
        assert!(!html.contains("restart_check"), "no check, no section");
    }

    #[test]
    fn a_study_that_is_no_restart_check_is_refused() {
        let mut s = hand_made();
        s.spec.restart_check = None;
        assert_eq!(files(&s), Err(RestartCheckExportError::NotARestartCheck("check-1".into())));
    }
}
