//! `vcurve labels`: a new source's first-mistake labels placed on curves measured earlier (the
//! paper's Tables 2 and 21), from a study's exported files.
//!
//! `trajectories.csv` becomes one [`CurveRecord`] per trajectory ([`input::read_trajectories`]);
//! `LABELS.csv` becomes [`Label`]s, each checked here against its trajectory (known, step within
//! `1..=T`) so that an error names the labels file's line; `curves.csv`, when given, adds each
//! record's raw points of the `main` series (for the probed drop at a label) and its fit at the
//! resolved points (`n ≥ K_screen`, then the terminal `(T, 0)`). [`place_labels`] does the
//! analysis; this module prints its report as JSON or as Table 2.
//!
//! A trajectory's task, which the bootstrap resamples by, is its `task` column in
//! `trajectories.csv`, else the `task` column of its labels, else its id.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vcurve_method::Thresholds;
use vcurve_method::analyses::labels::{PlacementOptions, PlacementReport, PlacementSummary, Share, place_labels};
use vcurve_method::analyses::{AnalysisError, CurveRecord, FitValue, Label, NOT_MEASURED, sources_in_order};
use vcurve_method::schedule::Series;
use vcurve_report::notes::NoCurve;
use vcurve_report::table::{Align, aligned};

use crate::input::{self, InputError};

/// Why `vcurve labels` refused its input. All are fatal: fix the files or the arguments.
#[derive(Debug, thiserror::Error)]
pub enum LabelsError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("--pool names `{source_name}`, which labels nothing in {}", path.display())]
    UnknownPoolSource { source_name: String, path: PathBuf },
    /// The files passed every check here but not the analysis' own: a bug in these checks.
    #[error(transparent)]
    Analysis(#[from] AnalysisError),
}

/// The files of one `vcurve labels` run, read and checked against each other.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelStudy {
    pub trajectories: Vec<CurveRecord>,
    /// What each trajectory's row says beyond its record, in the same order.
    pub details: Vec<RowDetails>,
    pub labels: Vec<Label>,
    /// The raw points were given (`--curves`): the probed-drop fields are reported.
    pub with_curves: bool,
}

/// What a trajectories row says beyond its [`CurveRecord`] (the notes print it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowDetails {
    pub concentration: Option<f64>,
    pub v0_fit: Option<f64>,
    pub no_curve: Option<NoCurve>,
}

/// The files a study is read from, by `vcurve labels` and `vcurve notes`.
#[derive(Debug, Clone, Copy)]
pub struct StudyFiles<'a> {
    /// `trajectories.csv` (or the paper's Table 9).
    pub trajectories: &'a Path,
    /// `trajectory,source,step`; `None`: no labels.
    pub labels: Option<&'a Path>,
    /// `curves.csv`: the raw points and the fit of each trajectory's main series.
    pub curves: Option<&'a Path>,
    /// The labels' steps are 0-based, `-1` for "no mistake".
    pub zero_based: bool,
}

/// Place the labels and return what `vcurve labels` prints.
pub fn run(args: &LabelsArgs) -> Result<String, LabelsError> {
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let study = load(args, &params)?;
    let sources = sources_in_order(study.labels.iter().map(|l| l.source.as_str()));
    if let Some(unknown) = args.pool.iter().find(|s| !sources.contains(s)) {
        return Err(LabelsError::UnknownPoolSource { source_name: unknown.clone(), path: args.labels.clone() });
    }
    let options = PlacementOptions {
        pooled_sources: (!args.pool.is_empty()).then(|| sources_in_order(args.pool.iter().map(String::as_str))),
        ..PlacementOptions::default()
    };
    let report = place_labels(&study.trajectories, &study.labels, &options, &params)?;
    if args.json {
        let mut text = serde_json::to_string_pretty(&report).expect("a placement report serializes");
        text.push('\n');
        Ok(text)
    } else {
        Ok(table(&report, &sources, study.with_curves, params.z_two_sided))
    }
}

/// Read the files of `args` and check them against each other.
pub fn load(args: &LabelsArgs, params: &Thresholds) -> Result<LabelStudy, LabelsError> {
    let files = StudyFiles {
        trajectories: &args.trajectories,
        labels: Some(&args.labels),
        curves: args.curves.as_deref(),
        zero_based: args.zero_based,
    };
    Ok(load_files(&files, params)?)
}

/// Read `files` and check them against each other: every label and point on a known trajectory,
/// every step within it, one task per trajectory.
pub fn load_files(files: &StudyFiles<'_>, params: &Thresholds) -> Result<LabelStudy, InputError> {
    let rows = input::read_trajectories(files.trajectories)?;
    let steps = if files.zero_based { input::LabelSteps::ZeroBased } else { input::LabelSteps::OneBased };
    let label_rows = match files.labels {
        Some(path) => input::read_labels(path, steps)?,
        None => Vec::new(),
    };
    let index: HashMap<String, usize> =
        rows.iter().enumerate().map(|(i, row)| (row.record.trajectory.clone(), i)).collect();
    let task_given: Vec<bool> = rows.iter().map(|row| row.task_given).collect();
    let details: Vec<RowDetails> = rows
        .iter()
        .map(|row| RowDetails { concentration: row.concentration, v0_fit: row.v0_fit, no_curve: row.no_curve })
        .collect();
    let mut trajectories: Vec<CurveRecord> = rows.into_iter().map(|row| row.record).collect();
    let labels_path = files.labels.unwrap_or(files.trajectories);

    let line_error = |path: &Path, line: u64, message: String| InputError::Line { path: path.into(), line, message };
    let unknown = |path: &Path, line: u64, trajectory: &str| {
        line_error(path, line, format!("trajectory `{trajectory}` is not in {}", files.trajectories.display()))
    };

    // The task a labels row named for each trajectory, with the first line that named it.
    let mut label_tasks: HashMap<usize, (&str, u64)> = HashMap::new();
    for row in &label_rows {
        let label = &row.label;
        let &i = index.get(&label.trajectory).ok_or_else(|| unknown(labels_path, row.line, &label.trajectory))?;
        let record = &trajectories[i];
        if let Some(step) = label.step
            && step > record.length
        {
            return Err(line_error(
                labels_path,
                row.line,
                format!(
                    "step {step} is beyond the end of `{}`, whose length is T = {} (steps are 1..={})",
                    label.trajectory, record.length, record.length
                ),
            ));
        }
        let Some(task) = row.task.as_deref() else { continue };
        if task_given[i] && task != record.task {
            return Err(line_error(
                labels_path,
                row.line,
                format!(
                    "task `{task}` of `{}` differs from its task `{}` in {}",
                    label.trajectory,
                    record.task,
                    files.trajectories.display()
                ),
            ));
        }
        match label_tasks.get(&i) {
            Some(&(first, line)) if first != task => {
                return Err(line_error(
                    labels_path,
                    row.line,
                    format!("task `{task}` of `{}` differs from `{first}` on line {line}", label.trajectory),
                ));
            }
            Some(_) => {}
            None => {
                label_tasks.insert(i, (task, row.line));
            }
        }
    }
    for (&i, &(task, _)) in &label_tasks {
        trajectories[i].task = task.to_owned();
    }

    if let Some(path) = files.curves {
        let mut by_trajectory: BTreeMap<usize, Vec<(vcurve_method::Point, f64)>> = BTreeMap::new();
        for row in input::read_curves(path)? {
            let &i = index.get(&row.trajectory).ok_or_else(|| unknown(path, row.line, &row.trajectory))?;
            let length = trajectories[i].length;
            if row.point.t >= length {
                return Err(line_error(
                    path,
                    row.line,
                    format!(
                        "t = {} is not before the end of `{}` (T = {length}); the terminal point is known, never sampled",
                        row.point.t, row.trajectory
                    ),
                ));
            }
            if row.series == Series::Main {
                by_trajectory.entry(i).or_default().push((row.point, row.v_fit));
            }
        }
        for (i, mut points) in by_trajectory {
            let record = &mut trajectories[i];
            points.sort_by_key(|(p, _)| p.t);
            record.fit = points
                .iter()
                .filter(|(p, _)| p.n >= params.k_screen)
                .map(|&(p, v_fit)| FitValue { t: p.t, v_fit })
                .chain([FitValue { t: record.length, v_fit: 0.0 }])
                .collect();
            record.points = points.into_iter().map(|(p, _)| p).collect();
        }
    }

    Ok(LabelStudy {
        trajectories,
        details,
        labels: label_rows.into_iter().map(|row| row.label).collect(),
        with_curves: files.curves.is_some(),
    })
}

/// `share% (lo–hi)` with its Wilson interval, `–` when nothing is counted.
fn percent(share: &Share) -> String {
    match (share.share, share.wilson_lo, share.wilson_hi) {
        (Some(s), Some(lo), Some(hi)) => format!("{:.0}% ({:.0}–{:.0})", 100.0 * s, 100.0 * lo, 100.0 * hi),
        _ => "–".into(),
    }
}

/// The paper's Table 2: one row per source in `order`, then the pooled row.
pub fn table(report: &PlacementReport, order: &[String], with_curves: bool, z: f64) -> String {
    let rows: Vec<(&str, &PlacementSummary)> = order
        .iter()
        .filter_map(|s| report.sources.get(s).map(|summary| (s.as_str(), summary)))
        .chain([("pooled", &report.pooled)])
        .collect();
    let unplaced = rows.iter().any(|(_, s)| s.unplaced > 0);

    let mut header = vec!["source", "labels", "before", "inside", "after", "after PNR", "no mistake"];
    if unplaced {
        header.push("unplaced");
    }
    if with_curves {
        header.extend(["probed", "zero-drop", "symptom"]);
    } else {
        header.push("post-cause");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, s)| {
            let mut row = vec![
                name.to_string(),
                s.labels.to_string(),
                s.before.to_string(),
                s.inside.to_string(),
                s.after.to_string(),
                s.after_pnr.to_string(),
                s.no_mistake.to_string(),
            ];
            if unplaced {
                row.push(s.unplaced.to_string());
            }
            if with_curves {
                // Not measured, never 0: without main-series points nothing is probed, and with
                // none of a column's labels probed there are no zero drops to count.
                row.push(s.probed.map_or_else(|| NOT_MEASURED.into(), |n| n.to_string()));
                // As the paper prints it: zero-drop labels of every label naming a step.
                row.push(s.zero_drop.map_or_else(|| NOT_MEASURED.into(), |z| format!("{z}/{}", s.labels)));
                row.push(s.post_cause_or_zero_drop.as_ref().map_or_else(|| NOT_MEASURED.into(), percent));
            } else {
                row.push(percent(&s.post_cause));
            }
            row
        })
        .collect();
    // The source to the left, every count and share to the right.
    let align: Vec<Align> = (0..header.len()).map(|c| if c == 0 { Align::Left } else { Align::Right }).collect();
    let mut out = aligned(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>(), &cells, &align);
    if report.pooled_sources.len() != report.sources.len() {
        let _ = writeln!(out, "\npooled: {}", report.pooled_sources.join(", "));
    } else {
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "label m against the decisive interval (a, b]: before m ≤ a, inside a < m ≤ b, after b < m ≤ t_pnr, after PNR m > t_pnr"
    );
    if unplaced {
        let _ = writeln!(out, "unplaced: a step label on a curve without a decisive interval (flat or doomed)");
    }
    let interval = format!("Wilson interval, z = {z}");
    if with_curves {
        let _ = writeln!(
            out,
            "probed: n ≥ K_label on both sides of m; zero-drop: probed V̂(h_m−1) − V̂(h_m) ≤ 0, of the labels naming a step\n\
             symptom: after the decisive drop or zero-drop, of the labels naming a step ({interval})"
        );
    } else {
        let _ = writeln!(
            out,
            "post-cause: after or after PNR, of the labels naming a step ({interval}); --curves adds the probed drops"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn args(trajectories: PathBuf, labels: PathBuf, curves: Option<PathBuf>) -> LabelsArgs {
        LabelsArgs { trajectories, labels, curves, pool: Vec::new(), json: true, thresholds: None, zero_based: false }
    }

    const TRAJECTORIES: &str = "\
trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations
a,30,cliff,0.8,11,10,12,11,20,true,9,200
b,40,erosion,0.3,6,5,6,,8,true,,150
d,25,doomed,,,,,,,,,0
";

    #[test]
    fn records_take_the_main_series_and_end_the_fit_at_the_terminal_point() {
        let dir = tempfile::tempdir().unwrap();
        let curves = write(
            dir.path(),
            "curves.csv",
            "trajectory,series,t,n,successes,v_hat,v_fit,wilson_lo,wilson_hi\n\
             a,main,10,32,16,0.5,0.5,0.3,0.7\n\
             a,main,0,8,6,0.75,0.6,0.4,0.9\n\
             a,main,5,4,3,0.75,0.6,0.3,0.95\n\
             a,retest,5,16,16,1,1,0.8,1\n\
             a,main,11,32,2,0.0625,0.0625,0.01,0.2\n",
        );
        let a = args(
            write(dir.path(), "trajectories.csv", TRAJECTORIES),
            write(dir.path(), "labels.csv", "trajectory,source,step\na,J,3\n"),
            Some(curves),
        );
        let study = load(&a, &Thresholds::default()).unwrap();
        let record = &study.trajectories[0];
        assert_eq!(
            record.points.iter().map(|p| (p.t, p.n, p.successes)).collect::<Vec<_>>(),
            [(0, 8, 6), (5, 4, 3), (10, 32, 16), (11, 32, 2)]
        );
        // t = 5 (n = 4 < K_screen = 8) is not resolved; the terminal point closes the fit.
        assert_eq!(
            record.fit.iter().map(|f| (f.t, f.v_fit)).collect::<Vec<_>>(),
            [(0, 0.6), (10, 0.5), (11, 0.0625), (30, 0.0)]
        );
        assert!(study.trajectories[1].points.is_empty() && study.trajectories[1].fit.is_empty());
        // Doomed: no curve, its labels unplaced.
        let doomed = &study.trajectories[2];
        assert_eq!((doomed.decisive_interval, doomed.t_star, doomed.pnr), (None, None, 25));
        assert!(study.with_curves);
    }

    #[test]
    fn a_task_comes_from_trajectories_then_labels_then_the_id() {
        let dir = tempfile::tempdir().unwrap();
        let trajectories = write(
            dir.path(),
            "trajectories.csv",
            "trajectory,task,length,shape,t_star,decisive_a,decisive_b,pnr\n\
             a,x,30,cliff,11,10,12,20\n\
             b,,40,erosion,6,5,6,8\n\
             c,,20,flat,,,,20\n",
        );
        let labels =
            write(dir.path(), "labels.csv", "trajectory,source,step,task\na,J,3,x\nb,J,4,y\nb,K,none,\nc,J,1,\n");
        let study = load(&args(trajectories.clone(), labels, None), &Thresholds::default()).unwrap();
        let tasks: Vec<&str> = study.trajectories.iter().map(|r| r.task.as_str()).collect();
        assert_eq!(tasks, ["x", "y", "c"]);

        let clash = write(dir.path(), "clash.csv", "trajectory,source,step,task\na,J,3,z\n");
        let err = load(&args(trajectories.clone(), clash.clone(), None), &Thresholds::default()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("clash.csv line 2: task `z` of `a` differs from its task `x`"), "{message}");
        let split = write(dir.path(), "split.csv", "trajectory,source,step,task\nb,J,3,y\nb,K,4,w\n");
        let err = load(&args(trajectories, split, None), &Thresholds::default()).unwrap_err();
        assert!(err.to_string().contains("split.csv line 3: task `w` of `b` differs from `y` on line 2"), "{err}");
    }
}

#[derive(Debug, clap::Args)]
pub struct LabelsArgs {
    /// `vcurve export`'s trajectories.csv (an optional `task` column names each trajectory's task).
    #[arg(long, value_name = "TRAJECTORIES.csv")]
    pub trajectories: PathBuf,
    /// CSV with header `trajectory,source,step`: each source's first-mistake label, a 1-based
    /// step or `none` (with --zero-based: the judges' raw 0-based index, -1 for no mistake).
    #[arg(long, value_name = "LABELS.csv")]
    pub labels: PathBuf,
    /// The labels' steps are the judges' raw answers: a 0-based index `i` (stored as `m = i + 1`)
    /// and -1 for "no mistake", the Traverse convention.
    #[arg(long)]
    pub zero_based: bool,
    /// `vcurve export`'s curves.csv: adds the probed drop at each label.
    #[arg(long, value_name = "CURVES.csv")]
    pub curves: Option<PathBuf>,
    /// A source pooled into the pooled row; repeat for several [default: every source].
    #[arg(long, value_name = "SOURCE")]
    pub pool: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// YAML file overriding the method's parameters (docs/method.md §8).
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}
