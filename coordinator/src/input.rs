//! Users' files in, the method's types out.
//!
//! Every error names the file and, where there is one, the line (1-based, the header is line 1)
//! and the column, so a user with a 10,000-row export can go straight to the bad row.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use vcurve_method::{BaseRun, BaseRuns, Point, Thresholds};

/// A user's file that could not be read as what it should be.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path} line {line}: {message}")]
    Line { path: PathBuf, line: u64, message: String },
}

/// A CSV file with named, required columns, read row by row with line numbers.
struct Table {
    path: PathBuf,
    reader: csv::Reader<std::fs::File>,
    columns: Vec<usize>,
}

impl Table {
    fn open(path: &Path, required: &[&str]) -> Result<Self, InputError> {
        let file = std::fs::File::open(path).map_err(|source| InputError::Read { path: path.into(), source })?;
        let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(file);
        let expected = required.join(",");
        let file_error = |message: String| InputError::File { path: path.into(), message };
        let headers = reader
            .headers()
            .map_err(|e| file_error(format!("cannot read the header: {e}")))?
            .clone();
        if headers.iter().all(str::is_empty) {
            return Err(file_error(format!("the file is empty; expected the header `{expected}` and one row per entry")));
        }
        let columns = required
            .iter()
            .map(|name| {
                headers.iter().position(|h| h == *name).ok_or_else(|| {
                    file_error(format!("missing column `{name}` (the header must name {expected}; found `{}`)", headers.iter().collect::<Vec<_>>().join(",")))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
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
            let fields = columns.iter().map(|&i| record.get(i).unwrap_or("").to_string()).collect();
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
    let mut table = Table::open(path, &["t", "n", "successes"])?;
    let mut points = Vec::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let rows: Vec<_> = table.rows().collect();
    for row in rows {
        let (line, fields) = row?;
        let parsed = (|| {
            let point = Point { t: count("t", &fields[0])?, n: count("n", &fields[1])?, successes: count("successes", &fields[2])? };
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

/// Parse a run's outcome: `0`/`1` or `true`/`false` (any case).
fn success(raw: &str) -> Result<bool, String> {
    match raw.to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!("`success` must be 0, 1, true or false, not {raw:?}")),
    }
}

/// Read a base-runs file (`success,steps`).
pub fn read_base_runs(path: &Path) -> Result<BaseRuns, InputError> {
    let mut table = Table::open(path, &["success", "steps"])?;
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
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read { path: path.into(), source })?;
    Thresholds::from_yaml(&text).map_err(|e| InputError::File { path: path.into(), message: e.to_string() })
}
