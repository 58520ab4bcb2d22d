//! A study's results as files: `curves.csv`, `trajectories.csv`, `evaluation.csv`, `results.json`,
//! `analyses.json` and `notes.csv` (the per-curve notes, [`crate::notes::notes_csv`]); where the study has them, also
//!
//! - `replay.csv` and `replay.json` ([`crate::replay_table`]): replay as Appendix L reports it
//!   (Tables 14–15), when replay applies to a trajectory (one with a recorded run, or a selection):
//!   the CSV by role and stratum, the JSON with the mismatches, the command kinds, the comparison
//!   levels, the first mismatch's step and the back-fills;
//! - `selection.json` and `selection.csv` ([`crate::selection_export`]): the selection as stored,
//!   and one row per base run it judged with its verdict, stratum and role;
//! - `base_runs.csv`: every base run with an outcome.
//!
//! `results.json` carries the selection and the base runs too, so that a report built from an
//! export folder shows them.
//!
//! Pure: a [`StudyRecord`] in, bytes out. The files hold nothing that depends on how the study
//! ran (no ids, times or attempt counts), so the same outcomes always export to the same bytes —
//! an interrupted study and an uninterrupted one compare byte for byte. One exception: how an
//! `agent` study's patches were judged ([`Evaluation`]) follows the order runs finished in (two
//! runs submitting one patch at once are both evaluated, one a flake check of the other; one after
//! the other, the second is a cache hit). A study of the `synthetic` runner judges no patch: its
//! evaluation is not measured (`null`, a row of empty cells in `evaluation.csv`).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use vcurve_record::{StudyRecord, TrajectoryRecord, TrajectoryState};

pub use crate::results::{Evaluation, Results, TrajectoryResult, results, results_from};
use crate::table::{csv_field, opt};

/// `curves.csv`: one row per sampled point of every series.
pub fn curves_csv(results: &Results) -> String {
    let mut out = String::from("trajectory,series,t,n,successes,v_hat,v_fit,wilson_lo,wilson_hi\n");
    for tr in &results.trajectories {
        for (series, points) in &tr.series {
            for p in points {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{}",
                    csv_field(&tr.trajectory),
                    series.as_str(),
                    p.t,
                    p.n,
                    p.successes,
                    p.v_hat,
                    p.v_fit,
                    p.wilson_lo,
                    p.wilson_hi
                );
            }
        }
    }
    out
}

/// `trajectories.csv`: one row per trajectory, with its state last (`waiting`, `replaying`,
/// `running`, `done`, `doomed`, `non_replayable`). A trajectory whose curve was never measured
/// ([`TrajectoryResult::measured`]) has an empty shape and empty curve quantities.
pub fn trajectories_csv(results: &Results) -> String {
    let mut out = String::from(
        "trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations,state\n",
    );
    for tr in &results.trajectories {
        let shape = match (tr.state, tr.shape) {
            (TrajectoryState::Doomed, _) => "doomed",
            (TrajectoryState::NonReplayable, _) => "non_replayable",
            (_, Some(s)) => s.as_str(),
            (_, None) => "",
        };
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&tr.trajectory),
            tr.length,
            shape,
            opt(tr.concentration),
            opt(tr.t_star),
            opt(tr.decisive_a),
            opt(tr.decisive_b),
            opt(tr.onset),
            opt(tr.pnr),
            opt(tr.pnr_certified),
            opt(tr.restart_point),
            tr.continuations,
            tr.state.as_str()
        );
    }
    out
}

/// `evaluation.csv`: one row of how the study's patches were judged; every cell empty when not
/// measured (a study whose runner judges no patch), and `flake_rate` (`saved_share`) empty when no
/// flake check was made (no run judged).
pub fn evaluation_csv(results: &Results) -> String {
    let mut out = String::from(
        "evaluated_runs,cache_hits,empty_patches,unique_patches,evaluations,flake_checks,flakes,flake_rate,saved_share\n",
    );
    let cells: Vec<String> = match &results.evaluation {
        Some(e) => {
            let s = &e.stats;
            [s.evaluated_runs, s.cache_hits, s.empty_patches, s.unique_patches, s.evaluations, s.flake_checks, s.flakes]
                .iter()
                .map(u64::to_string)
                .chain([opt(e.flake_rate), opt(e.saved_share)])
                .collect()
        }
        None => vec![String::new(); 9],
    };
    out.push_str(&cells.join(","));
    out.push('\n');
    out
}

/// The export's files by name.
pub fn files(study: &StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, crate::analyses::AnalysesError> {
    files_of(&results(study)?, &study.calls)
}

/// [`files`] of a study whose trajectories come one at a time ([`results_from`]): the same bytes,
/// with only one trajectory's outcomes in memory at a time.
pub fn files_from<R: Borrow<TrajectoryRecord>>(
    head: &StudyRecord,
    trajectories: impl IntoIterator<Item = R>,
) -> Result<BTreeMap<String, Vec<u8>>, crate::analyses::AnalysesError> {
    files_of(&results_from(head, trajectories)?, &head.calls)
}

/// The export's files of a study's results and its judges' label calls (`calls`).
fn files_of(
    results: &Results,
    calls: &[vcurve_record::llm::ModelCall],
) -> Result<BTreeMap<String, Vec<u8>>, crate::analyses::AnalysesError> {
    let mut files = BTreeMap::new();
    files.insert("curves.csv".to_string(), curves_csv(results).into_bytes());
    files.insert("trajectories.csv".to_string(), trajectories_csv(results).into_bytes());
    files.insert("evaluation.csv".to_string(), evaluation_csv(results).into_bytes());
    let mut json = serde_json::to_vec_pretty(results).expect("results serialize");
    json.push(b'\n');
    files.insert("results.json".to_string(), json);
    let analyses = crate::analyses::analyses(results)?;
    let mut json = serde_json::to_vec_pretty(&analyses).expect("analyses serialize");
    json.push(b'\n');
    files.insert("analyses.json".to_string(), json);
    let notes = crate::notes::of_results(results)?;
    files.insert("notes.csv".to_string(), crate::notes::notes_csv(&notes).into_bytes());
    files.extend(record_files(results));
    if !calls.is_empty() {
        let requests: Vec<_> = calls.iter().flat_map(|c| c.requests()).collect();
        files.insert("calls.csv".to_string(), crate::calls::calls_csv(&requests)?);
    }
    Ok(files)
}

/// The files of what a study has only sometimes: its replay, its selection, its base runs (see
/// the module documentation).
fn record_files(results: &Results) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    if let Some(replay) = crate::replay_table::ReplayTable::of(results) {
        files.insert("replay.csv".to_string(), crate::replay_table::replay_csv(&replay).into_bytes());
        let mut json = serde_json::to_vec_pretty(&replay).expect("the replay table serializes");
        json.push(b'\n');
        files.insert("replay.json".to_string(), json);
    }
    if let Some(selection) = &results.selection {
        files.insert("selection.json".to_string(), crate::selection_export::selection_json(selection));
        let csv = crate::selection_export::selection_csv(selection, &results.base_runs);
        files.insert("selection.csv".to_string(), csv.into_bytes());
    }
    if !results.base_runs.is_empty() {
        let csv = crate::selection_export::base_runs_csv(&results.base_runs);
        files.insert("base_runs.csv".to_string(), csv.into_bytes());
    }
    files
}

#[cfg(test)]
pub(crate) mod tests;
