//! `vcurve notes`: the paper's per-curve diagnostic note ([`vcurve_report::notes`]) of every
//! trajectory of published tables or an export, as CSV on standard output: `trajectory,note`,
//! then one column per clause's value ([`notes_csv`]).
//!
//! The files are read and checked against each other as `vcurve labels` reads them
//! ([`labels::load_files`]): `--trajectories` is an export's `trajectories.csv` or the paper's
//! Table 9 (its `v0_fit`, `stratum`, `first_edit` and `first_symptom` columns feed the note when
//! present); `--labels` is `trajectory,source,step`; `--curves`, an export's `curves.csv`, gives
//! the raw points (the rise) and the fit (`V(h_0)` when the table has none, the value lost before
//! the decisive interval). One note per trajectory row, in the file's order; the labels of each
//! in the labels file's order, of the sources `--source` names (every source by default).

use std::collections::HashMap;
use std::path::PathBuf;

use vcurve_method::analyses::sources_in_order;
use vcurve_report::notes::{NoteInput, note, notes_csv};

use super::labels::{self, StudyFiles};
use crate::input::{self, InputError};

/// Why `vcurve notes` refused its input. All are fatal: fix the files or the arguments.
#[derive(Debug, thiserror::Error)]
pub enum NotesError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("--source names `{source_name}`, which labels nothing in {}", path.display())]
    UnknownSource { source_name: String, path: PathBuf },
    #[error("--source needs --labels: there are no labels to choose from")]
    SourceWithoutLabels,
}

/// Write the notes and return what `vcurve notes` prints.
pub fn run(args: &NotesArgs) -> Result<String, NotesError> {
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let files = StudyFiles {
        trajectories: &args.trajectories,
        labels: args.labels.as_deref(),
        curves: args.curves.as_deref(),
        zero_based: args.zero_based,
    };
    let study = labels::load_files(&files, &params)?;
    let chosen: Option<Vec<String>> = match (&args.labels, args.source.is_empty()) {
        (_, true) => None,
        (None, false) => return Err(NotesError::SourceWithoutLabels),
        (Some(path), false) => {
            let sources = sources_in_order(study.labels.iter().map(|l| l.source.as_str()));
            if let Some(unknown) = args.source.iter().find(|s| !sources.contains(s)) {
                return Err(NotesError::UnknownSource { source_name: unknown.clone(), path: path.clone() });
            }
            Some(args.source.clone())
        }
    };
    let mut by_trajectory: HashMap<&str, Vec<(String, Option<u32>)>> = HashMap::new();
    for label in &study.labels {
        if chosen.as_ref().is_none_or(|c| c.contains(&label.source)) {
            by_trajectory.entry(label.trajectory.as_str()).or_default().push((label.source.clone(), label.step));
        }
    }
    let notes: Vec<_> = study
        .trajectories
        .iter()
        .zip(&study.details)
        .map(|(curve, details)| {
            let input = NoteInput {
                curve,
                no_curve: details.no_curve,
                concentration: details.concentration,
                v0_fit: details.v0_fit,
                labels: by_trajectory.get(curve.trajectory.as_str()).map_or(&[], Vec::as_slice),
            };
            note(&input, &params)
        })
        .collect();
    Ok(notes_csv(&notes))
}

#[derive(Debug, clap::Args)]
pub struct NotesArgs {
    /// `vcurve export`'s trajectories.csv, or a table with the columns of the paper's Table 9
    /// (`trajectory,stratum,length,v0_fit,shape,concentration,t_star,decisive_a,decisive_b,pnr,first_edit,first_symptom`;
    /// the columns a note does not use may be absent or empty).
    #[arg(long, value_name = "TRAJECTORIES.csv")]
    pub trajectories: PathBuf,
    /// CSV with header `trajectory,source,step`: each source's first-mistake label, a 1-based
    /// step or `none` (with --zero-based: a 0-based index, -1 for no mistake).
    #[arg(long, value_name = "LABELS.csv")]
    pub labels: Option<PathBuf>,
    /// `vcurve export`'s curves.csv: the raw points (for the largest rise) and the fit (for
    /// `V(h_0)` and the value lost before the decisive interval).
    #[arg(long, value_name = "CURVES.csv")]
    pub curves: Option<PathBuf>,
    /// A source whose labels the notes name; repeat for several [default: every source].
    #[arg(long, value_name = "SOURCE")]
    pub source: Vec<String>,
    /// The labels' steps are the judges' raw answers: a 0-based index `i` (stored as `m = i + 1`)
    /// and -1 for "no mistake".
    #[arg(long)]
    pub zero_based: bool,
    /// YAML file overriding the method's parameters (docs/method.md §8): `z_two_sided` for the
    /// rise's intervals, `delta_screen` for the smallest rise a note mentions, `k_screen` for the
    /// fit's resolved points.
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}
