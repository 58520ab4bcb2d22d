//! Users' files in, the method's types out.
//!
//! Every error names the file and, where there is one, the line (1-based, the header is line 1)
//! and the column, so a user with a 10,000-row export can go straight to the bad row.
//!
//! Every file is read whole by [`read_bounded`]: only a regular file (`/dev/zero`, a FIFO or a
//! directory is refused before it is opened), of at most its kind's limit — [`MAX_CSV_BYTES`]
//! for the tables, [`MAX_THRESHOLDS_BYTES`] for a thresholds file, [`MAX_SMALL_FILE_BYTES`] for
//! tokens, certificates and keys, [`MAX_EXPORT_JSON_BYTES`] for an export's JSON; a thresholds
//! file's YAML may nest at most [`MAX_YAML_DEPTH`] levels, checked before it is parsed. Study specs
//! and the curves they name are read by [`vcurve_coordinator::spec::read_with_files`], under the
//! limits of [`vcurve_coordinator::spec`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use vcurve_method::{BaseRun, BaseRuns, Point, Thresholds};
pub use vcurve_spec::MAX_YAML_DEPTH;
use vcurve_spec::bounds::{self, ReadError};

/// The largest CSV table: points, base runs, labels, and an export's `trajectories.csv` and
/// `curves.csv`. 256 MiB is some 3 times the `curves.csv` of the largest study a spec can hold
/// (1.8 KB per trajectory in the demo's export).
pub const MAX_CSV_BYTES: u64 = 256 << 20;

/// The largest thresholds file (`--thresholds`): the parameters fit in 30 lines.
pub const MAX_THRESHOLDS_BYTES: u64 = 1 << 20;

/// The largest token, TLS certificate, key or CA file: a PEM chain is a few kilobytes.
pub const MAX_SMALL_FILE_BYTES: u64 = 1 << 20;

/// The largest `results.json` or `analyses.json` read from an export folder (`--from`): some 3
/// times the `results.json` of the largest study a spec can hold (8 KB per trajectory in the
/// demo's export).
pub const MAX_EXPORT_JSON_BYTES: u64 = 1 << 30;

/// A user's file that could not be read as what it should be.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Missing, unreadable, not a regular file, over its limit, or (YAML) nested too deeply.
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: ReadError },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path} line {line}: {message}")]
    Line { path: PathBuf, line: u64, message: String },
}

/// Read `path` whole: a regular file of at most `limit` bytes (see the module's documentation).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    bounds::read_bounded(path, limit).map_err(|source| InputError::Read { path: path.into(), source })
}

/// Read a token, TLS certificate, key or CA file: at most [`MAX_SMALL_FILE_BYTES`].
pub fn read_small_file(path: &Path) -> Result<Vec<u8>, InputError> {
    read_bounded(path, MAX_SMALL_FILE_BYTES)
}

/// Read `results.json` or `analyses.json` from an export folder: at most
/// [`MAX_EXPORT_JSON_BYTES`].
pub fn read_export_json(path: &Path) -> Result<Vec<u8>, InputError> {
    read_bounded(path, MAX_EXPORT_JSON_BYTES)
}

/// A CSV file with named, required columns, read row by row with line numbers.
struct Table {
    path: PathBuf,
    reader: csv::Reader<std::io::Cursor<Vec<u8>>>,
    /// The required columns' positions, then the optional ones' (`None`: not in the header).
    columns: Vec<Option<usize>>,
}

impl Table {
    /// The table in `text` (the contents of `path`), with `required` columns, and optional
    /// columns too: each row's fields are the required ones, then the optional ones, an absent
    /// optional column reading as empty.
    fn new(path: &Path, text: Vec<u8>, required: &[&str], optional: &[&str]) -> Result<Self, InputError> {
        let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(std::io::Cursor::new(text));
        let expected = required.join(",");
        let file_error = |message: String| InputError::File { path: path.into(), message };
        let headers = reader.headers().map_err(|e| file_error(format!("cannot read the header: {e}")))?.clone();
        if headers.iter().all(str::is_empty) {
            return Err(file_error(format!(
                "the file is empty; expected the header `{expected}` and one row per entry"
            )));
        }
        let columns = required
            .iter()
            .map(|name| {
                headers.iter().position(|h| h == *name).ok_or_else(|| {
                    file_error(format!(
                        "missing column `{name}` (the header must name {expected}; found `{}`)",
                        headers.iter().collect::<Vec<_>>().join(",")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let columns = columns
            .into_iter()
            .map(Some)
            .chain(optional.iter().map(|name| headers.iter().position(|h| h == *name)))
            .collect();
        Ok(Table { path: path.into(), reader, columns })
    }

    /// Each data row as its required fields, in the order they were asked for, with its line.
    fn rows(&mut self) -> impl Iterator<Item = Result<(u64, Vec<String>), InputError>> + '_ {
        let path = self.path.clone();
        let columns = self.columns.clone();
        self.reader.records().map(move |record| {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                let message = match e.kind() {
                    csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                        format!("malformed row: {len} fields where the header has {expected_len}")
                    }
                    _ => format!("malformed row: {e}"),
                };
                InputError::Line { path: path.clone(), line, message }
            })?;
            let line = record.position().map_or(0, |p| p.line());
            let fields = columns.iter().map(|&i| i.and_then(|i| record.get(i)).unwrap_or("").to_string()).collect();
            Ok((line, fields))
        })
    }

    fn line_error(&self, line: u64, message: String) -> InputError {
        InputError::Line { path: self.path.clone(), line, message }
    }

    fn empty_error(&self, what: &str) -> InputError {
        InputError::File { path: self.path.clone(), message: format!("has a header but no {what}") }
    }
}

/// Parse a count: a non-negative integer, with a message that says which column and why not.
fn count(column: &str, raw: &str) -> Result<u32, String> {
    if raw.is_empty() {
        return Err(format!("`{column}` is empty"));
    }
    match raw.parse::<i64>() {
        Ok(v) if v < 0 => Err(format!("`{column}` is negative ({v}); counts and steps are ≥ 0")),
        Ok(v) => u32::try_from(v).map_err(|_| format!("`{column}` = {v} is too large")),
        Err(_) => Err(format!("`{column}` is not a whole number: {raw:?}")),
    }
}

/// Read a points file (`t,n,successes`) for a trajectory of length `length`.
pub fn read_points(path: &Path, length: u32) -> Result<Vec<Point>, InputError> {
    points_from(path, read_bounded(path, MAX_CSV_BYTES)?, length)
}

/// [`read_points`] of the contents `text` of `path`.
fn points_from(path: &Path, text: Vec<u8>, length: u32) -> Result<Vec<Point>, InputError> {
    let mut table = Table::new(path, text, &["t", "n", "successes"], &[])?;
    let mut points = Vec::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, fields) = row?;
        let parsed = (|| {
            let point = Point {
                t: count("t", &fields[0])?,
                n: count("n", &fields[1])?,
                successes: count("successes", &fields[2])?,
            };
            point.validate(length).map_err(|e| e.to_string())?;
            if !seen.insert(point.t) {
                return Err(format!("t = {} appears twice", point.t));
            }
            Ok(point)
        })();
        points.push(parsed.map_err(|message| table.line_error(line, message))?);
    }
    if points.is_empty() {
        return Err(table.empty_error("points"));
    }
    Ok(points)
}

/// Parse a boolean cell: `true`/`false` or `1`/`0` (any case), wherever a file has one.
fn boolean(column: &str, raw: &str) -> Result<bool, String> {
    match raw.to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!("`{column}` must be true, false, 1 or 0, not {raw:?}")),
    }
}

/// Parse a run's outcome.
fn success(raw: &str) -> Result<bool, String> {
    boolean("success", raw)
}

/// Read a base-runs file (`success,steps`).
pub fn read_base_runs(path: &Path) -> Result<BaseRuns, InputError> {
    base_runs_from(path, read_bounded(path, MAX_CSV_BYTES)?)
}

/// [`read_base_runs`] of the contents `text` of `path`.
fn base_runs_from(path: &Path, text: Vec<u8>) -> Result<BaseRuns, InputError> {
    let mut table = Table::new(path, text, &["success", "steps"], &[])?;
    let mut runs = Vec::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, fields) = row?;
        let run = (|| Ok::<_, String>(BaseRun { success: success(&fields[0])?, steps: count("steps", &fields[1])? }))();
        runs.push(run.map_err(|message| table.line_error(line, message))?);
    }
    if runs.is_empty() {
        return Err(table.empty_error("base runs"));
    }
    Ok(BaseRuns(runs))
}

/// Read and validate a thresholds file; no file means the paper's values.
pub fn read_thresholds(path: Option<&Path>) -> Result<Thresholds, InputError> {
    let Some(path) = path else { return Ok(Thresholds::default()) };
    let text = bounds::read_text(path, MAX_THRESHOLDS_BYTES)
        .map_err(|source| InputError::Read { path: path.into(), source })?;
    thresholds_from(path, &text)
}

/// [`read_thresholds`] of the contents `text` of `path`: its size and depth are checked before
/// the YAML is parsed.
fn thresholds_from(path: &Path, text: &str) -> Result<Thresholds, InputError> {
    bounds::check_yaml(text, MAX_THRESHOLDS_BYTES, MAX_YAML_DEPTH)
        .map_err(|source| InputError::Read { path: path.into(), source })?;
    Thresholds::from_yaml(text).map_err(|e| InputError::File { path: path.into(), message: e.to_string() })
}

// ---------------------------------------------------------------------------------------------
// A study's exported files and labels to place on them (`vcurve labels`)

/// Parse an optional count: empty (or `none`, for steps that may not exist) is `None`.
fn optional_count(column: &str, raw: &str) -> Result<Option<u32>, String> {
    if raw.is_empty() || raw.eq_ignore_ascii_case("none") { Ok(None) } else { count(column, raw).map(Some) }
}

/// Parse a probability-like real in `[0, 1]`.
fn unit_real(column: &str, raw: &str) -> Result<f64, String> {
    if raw.is_empty() {
        return Err(format!("`{column}` is empty"));
    }
    match raw.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("`{column}` = {v} is outside [0, 1]")),
        Err(_) => Err(format!("`{column}` is not a number: {raw:?}")),
    }
}

fn non_empty(column: &str, raw: &str) -> Result<String, String> {
    if raw.is_empty() { Err(format!("`{column}` is empty")) } else { Ok(raw.to_string()) }
}

/// One row of a trajectories file, as the analyses see it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryRow {
    /// The row's line in the file (the header is line 1).
    pub line: u64,
    /// The trajectory's curve. Its `task` is the row's `task` column, or the trajectory id when
    /// the file names none. A doomed trajectory (no curve was built) is a flat record without a
    /// decisive interval, `t_pnr = T` unless the row gives one: its step labels stay unplaced.
    pub record: vcurve_method::analyses::CurveRecord,
    /// The row named its task (a non-empty `task` cell).
    pub task_given: bool,
    /// The concentration `C`, when the row gives it.
    pub concentration: Option<f64>,
    /// The fitted `V(h_0)` (`v0_fit`, a column of the paper's Table 9), when the row gives it.
    pub v0_fit: Option<f64>,
    /// `Some` for a trajectory without a curve: `doomed`, or `non_replayable` (dropped by replay).
    pub no_curve: Option<vcurve_report::notes::NoCurve>,
}

/// Read a trajectories file: `vcurve export`'s `trajectories.csv` (header
/// `trajectory,length,shape,concentration,t_star,decisive_a,decisive_b,onset,pnr,pnr_certified,restart_point,continuations,state`),
/// of which `trajectory,length,shape,t_star,decisive_a,decisive_b,pnr` are required. Optional
/// columns `task`, `stratum`, `first_edit` and `first_symptom` (empty or `none`: never; the column
/// absent: not measured) feed the analyses, `concentration` and `v0_fit` (the paper's Table 9) the
/// notes; `onset`, `pnr_certified`, `restart_point` and `continuations` are checked when present.
/// A `doomed` or `non_replayable` row has no curve; a row without a shape whose `state` (the
/// export's last column) is neither was never measured and is refused. Ids must be unique and
/// every curve quantity consistent with `T`.
pub fn read_trajectories(path: &Path) -> Result<Vec<TrajectoryRow>, InputError> {
    trajectories_from(path, read_bounded(path, MAX_CSV_BYTES)?)
}

/// [`read_trajectories`] of the contents `text` of `path`.
fn trajectories_from(path: &Path, text: Vec<u8>) -> Result<Vec<TrajectoryRow>, InputError> {
    use vcurve_method::Shape;
    use vcurve_method::analyses::{CurveRecord, Observation};
    use vcurve_method::curve::Interval;
    use vcurve_report::notes::NoCurve;

    const REQUIRED: [&str; 7] = ["trajectory", "length", "shape", "t_star", "decisive_a", "decisive_b", "pnr"];
    const OPTIONAL: [&str; 11] = [
        "task",
        "stratum",
        "first_edit",
        "first_symptom",
        "concentration",
        "v0_fit",
        "onset",
        "pnr_certified",
        "restart_point",
        "continuations",
        "state",
    ];
    let mut table = Table::new(path, text, &REQUIRED, &OPTIONAL)?;
    // A first edit or first symptom is measured (a step or never) only where the file has its column.
    let given =
        |name: &str| table.columns[REQUIRED.len() + OPTIONAL.iter().position(|c| *c == name).unwrap()].is_some();
    let observed = (given("first_edit"), given("first_symptom"));
    let observation =
        |given: bool, step: Option<u32>| if given { Observation::from(step) } else { Observation::NotMeasured };
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, f) = row?;
        let field = |name: &str| {
            let i = REQUIRED.iter().chain(&OPTIONAL).position(|c| *c == name).expect("a known column");
            f[i].as_str()
        };
        let parsed = (|| {
            let trajectory = non_empty("trajectory", field("trajectory"))?;
            if let Some(first) = seen.get(&trajectory) {
                return Err(format!("trajectory `{trajectory}` appears twice (first on line {first})"));
            }
            let length = count("length", field("length"))?;
            if length == 0 {
                return Err("`length` is 0; a trajectory has at least one step".into());
            }
            let (shape, no_curve) = match field("shape").to_ascii_lowercase().as_str() {
                "cliff" => (Some(Shape::Cliff), None),
                "erosion" => (Some(Shape::Erosion), None),
                "flat" => (Some(Shape::Flat), None),
                "doomed" | "" => (None, Some(NoCurve::Doomed)),
                "non_replayable" => (None, Some(NoCurve::NonReplayable)),
                other => {
                    return Err(format!(
                        "`shape` must be cliff, erosion, flat, doomed or non_replayable, not {other:?}"
                    ));
                }
            };
            // An export names the state of a trajectory without a curve: a doomed or non-replayable
            // one is read as having no curve; one never measured has no curve to read at all.
            let state = field("state");
            if shape.is_none() && !state.is_empty() && state != "doomed" && state != "non_replayable" {
                return Err(format!(
                    "trajectory `{trajectory}` has no curve: it was never measured (state `{state}`); \
                     leave it out, or export the study once its curve is measured"
                ));
            }
            let shape_name = shape.map_or_else(|| no_curve.map_or("doomed", |n| n.as_str()), |s| s.as_str());
            let a = optional_count("decisive_a", field("decisive_a"))?;
            let b = optional_count("decisive_b", field("decisive_b"))?;
            let decisive_interval = match (a, b) {
                (Some(a), Some(b)) if a < b && b <= length => Some(Interval { a, b }),
                (Some(a), Some(b)) => {
                    return Err(format!(
                        "decisive interval ({a}, {b}] is not inside [0, T = {length}]; need decisive_a < decisive_b ≤ length"
                    ));
                }
                (None, None) => None,
                _ => return Err("`decisive_a` and `decisive_b` must both be given or both be empty".into()),
            };
            match (shape, decisive_interval) {
                (Some(Shape::Cliff | Shape::Erosion), None) => {
                    return Err(format!(
                        "the curve is {shape_name} but has no decisive interval (`decisive_a`, `decisive_b`)"
                    ));
                }
                (Some(Shape::Flat) | None, Some(_)) => {
                    return Err(format!(
                        "a {shape_name} trajectory has no decisive interval; leave `decisive_a` and `decisive_b` empty"
                    ));
                }
                _ => {}
            }
            let t_star = match (optional_count("t_star", field("t_star"))?, decisive_interval) {
                (Some(t), Some(i)) if t != i.a + 1 => {
                    return Err(format!("`t_star` = {t}, but t* = decisive_a + 1 = {}", i.a + 1));
                }
                (Some(_), None) => return Err("`t_star` is given without a decisive interval".into()),
                (_, i) => i.map(|i| i.a + 1),
            };
            let pnr = match optional_count("pnr", field("pnr"))? {
                Some(pnr) if pnr > length => return Err(format!("`pnr` = {pnr} is beyond the length T = {length}")),
                Some(pnr) => pnr,
                None if shape.is_none() => length,
                None => {
                    return Err(format!(
                        "`pnr` is empty; a {shape_name} curve has a point of no return (T when nothing earlier is certified)"
                    ));
                }
            };
            let step = |name: &str| -> Result<Option<u32>, String> {
                match optional_count(name, field(name))? {
                    Some(t) if t > length => Err(format!("`{name}` = {t} is beyond the length T = {length}")),
                    t => Ok(t),
                }
            };
            let (restart_point, first_edit, first_symptom) =
                (step("restart_point")?, step("first_edit")?, step("first_symptom")?);
            step("onset")?;
            optional_count("continuations", field("continuations"))?;
            let real = |name: &str| -> Result<Option<f64>, String> {
                if field(name).is_empty() { Ok(None) } else { unit_real(name, field(name)).map(Some) }
            };
            let (concentration, v0_fit) = (real("concentration")?, real("v0_fit")?);
            let certified = field("pnr_certified");
            if !certified.is_empty() && boolean("pnr_certified", certified)? != (pnr < length) {
                return Err(format!(
                    "`pnr_certified` is {certified}, but `pnr` = {pnr} with T = {length} says otherwise"
                ));
            }
            let task = field("task");
            let stratum = field("stratum");
            Ok(TrajectoryRow {
                line,
                task_given: !task.is_empty(),
                concentration,
                v0_fit,
                no_curve,
                record: CurveRecord {
                    task: if task.is_empty() { trajectory.clone() } else { task.to_string() },
                    trajectory,
                    length,
                    stratum: (!stratum.is_empty()).then(|| stratum.to_string()),
                    shape: shape.unwrap_or(Shape::Flat),
                    decisive_interval,
                    t_star,
                    pnr,
                    confirmed_drop: false,
                    restart_point,
                    first_edit: observation(observed.0, first_edit),
                    first_symptom: observation(observed.1, first_symptom),
                    fit: Vec::new(),
                    points: Vec::new(),
                },
            })
        })();
        let row = parsed.map_err(|message| table.line_error(line, message))?;
        seen.insert(row.record.trajectory.clone(), line);
        out.push(row);
    }
    if out.is_empty() {
        return Err(table.empty_error("trajectories"));
    }
    Ok(out)
}

/// One row of a labels file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRow {
    /// The row's line in the file (the header is line 1).
    pub line: u64,
    pub label: vcurve_method::analyses::Label,
    /// The trajectory's task, when the file has a `task` column with a value on this row.
    pub task: Option<String>,
}

/// How a labels file writes its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelSteps {
    /// The 1-based step `m`, or `none` for "no mistake" (the paper's tables).
    #[default]
    OneBased,
    /// The judges' raw answers (the Traverse convention): a 0-based index `i`, stored as
    /// `m = i + 1`, with `-1` (or `none`) for "no mistake".
    ZeroBased,
}

/// Parse a label's step as `steps` writes it.
fn label_step(raw: &str, steps: LabelSteps) -> Result<Option<u32>, String> {
    if steps == LabelSteps::ZeroBased {
        const EXPECTED: &str = "a 0-based step index, or -1 (or `none`) for no mistake";
        if raw.is_empty() {
            return Err(format!("`step` is empty; write {EXPECTED}"));
        }
        if raw.eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        return match raw.parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(v) if v < -1 => Err(format!("`step` is {v}; write {EXPECTED}")),
            Ok(v) => u32::try_from(v + 1).map(Some).map_err(|_| format!("`step` = {v} is too large")),
            Err(_) => Err(format!("`step` must be {EXPECTED}, not {raw:?}")),
        };
    }
    const EXPECTED: &str = "a 1-based step or `none` (no mistake)";
    if raw.is_empty() {
        return Err(format!("`step` is empty; write {EXPECTED}"));
    }
    if raw.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    match raw.parse::<i64>() {
        Ok(0) => Err("`step` is 0; steps are 1-based (m = i + 1 for a 0-based index i), or write `none`".into()),
        Ok(v) if v < 0 => Err(format!("`step` is negative ({v}); write {EXPECTED}")),
        Ok(v) => u32::try_from(v).map(Some).map_err(|_| format!("`step` = {v} is too large")),
        Err(_) => Err(format!("`step` must be {EXPECTED}, not {raw:?}")),
    }
}

/// Read a labels file (`trajectory,source,step`, and optionally `task`): every source's
/// first-mistake answer, one per source and trajectory. Whether each trajectory exists and the step
/// is within its length is for the caller to check against the trajectories ([`LabelRow::line`]
/// names the row).
pub fn read_labels(path: &Path, steps: LabelSteps) -> Result<Vec<LabelRow>, InputError> {
    labels_from(path, read_bounded(path, MAX_CSV_BYTES)?, steps)
}

/// [`read_labels`] of the contents `text` of `path`.
fn labels_from(path: &Path, text: Vec<u8>, steps: LabelSteps) -> Result<Vec<LabelRow>, InputError> {
    let mut table = Table::new(path, text, &["trajectory", "source", "step"], &["task"])?;
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<(String, String), u64> = std::collections::HashMap::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, f) = row?;
        let parsed = (|| {
            let trajectory = non_empty("trajectory", &f[0])?;
            let source = non_empty("source", &f[1])?;
            let step = label_step(&f[2], steps)?;
            if let Some(first) = seen.get(&(trajectory.clone(), source.clone())) {
                return Err(format!(
                    "`{source}` labels `{trajectory}` twice (first on line {first}); one answer per source and trajectory"
                ));
            }
            Ok(LabelRow {
                line,
                label: vcurve_method::analyses::Label { trajectory, source, step },
                task: (!f[3].is_empty()).then(|| f[3].clone()),
            })
        })();
        let row = parsed.map_err(|message| table.line_error(line, message))?;
        seen.insert((row.label.trajectory.clone(), row.label.source.clone()), line);
        out.push(row);
    }
    if out.is_empty() {
        return Err(table.empty_error("labels"));
    }
    Ok(out)
}

/// One row of a curves file: a sampled point of one series with its fitted value.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePointRow {
    /// The row's line in the file (the header is line 1).
    pub line: u64,
    pub trajectory: String,
    pub series: vcurve_method::schedule::Series,
    pub point: Point,
    pub v_fit: f64,
}

/// Read a curves file: `vcurve export`'s `curves.csv`, of which
/// `trajectory,series,t,n,successes,v_fit` are required. Each point has `n ≥ 1`, at most `n`
/// successes and `v_fit` in `[0, 1]`, once per trajectory, series and step; whether `t` is before
/// its trajectory's end is for the caller to check.
pub fn read_curves(path: &Path) -> Result<Vec<CurvePointRow>, InputError> {
    curves_from(path, read_bounded(path, MAX_CSV_BYTES)?)
}

/// [`read_curves`] of the contents `text` of `path`.
fn curves_from(path: &Path, text: Vec<u8>) -> Result<Vec<CurvePointRow>, InputError> {
    use vcurve_method::schedule::Series;
    let mut table = Table::new(path, text, &["trajectory", "series", "t", "n", "successes", "v_fit"], &[])?;
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<(String, Series, u32), u64> = std::collections::HashMap::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, f) = row?;
        let parsed = (|| {
            let trajectory = non_empty("trajectory", &f[0])?;
            let series = Series::parse(&f[1]).ok_or_else(|| {
                let names: Vec<&str> = Series::ALL.iter().map(|s| s.as_str()).collect();
                format!("`series` must be one of {}, not {:?}", names.join(", "), f[1])
            })?;
            let point = Point { t: count("t", &f[2])?, n: count("n", &f[3])?, successes: count("successes", &f[4])? };
            if point.n == 0 {
                return Err(format!("t = {} has n = 0 continuations; a sampled point needs n ≥ 1", point.t));
            }
            if point.successes > point.n {
                return Err(format!("t = {} has {} successes of n = {}", point.t, point.successes, point.n));
            }
            let v_fit = unit_real("v_fit", &f[5])?;
            if let Some(first) = seen.get(&(trajectory.clone(), series, point.t)) {
                return Err(format!(
                    "t = {} of `{trajectory}` ({} series) appears twice (first on line {first})",
                    point.t,
                    series.as_str()
                ));
            }
            Ok(CurvePointRow { line, trajectory, series, point, v_fit })
        })();
        let row = parsed.map_err(|message| table.line_error(line, message))?;
        seen.insert((row.trajectory.clone(), row.series, row.point.t), line);
        out.push(row);
    }
    if out.is_empty() {
        return Err(table.empty_error("points"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
