//! One trajectory of a study: its fields, labels, base runs and curve file.

use serde_norway::{Mapping, Value};
use vcurve_method::{BaseRun, BaseRuns};
use vcurve_record::Trajectory;
use vcurve_record::study::{Label, TrajectorySpec};

use crate::error::{SpecError, TrajectoryRef};
use crate::fields::MAX_LENGTH;
use crate::raw::{RawBaseRun, RawTrajectory, level, required};
use crate::value::{Problem, missing, problem, show, text, uint, valid_name};

/// A length given by a `length:` field (`value`), a recorded run, or both: the run's when
/// `length` is left out, and `length` (1 to [`MAX_LENGTH`]) equal to the run's when both are given.
pub(crate) fn length_of(value: &Option<Value>, run: Option<&Trajectory>) -> Result<u32, Problem> {
    if let (None, Some(run)) = (value, run) {
        return Ok(run.length());
    }
    let length = uint(required(value, "length")?, "length", 1, u64::from(MAX_LENGTH))? as u32;
    if let Some(run) = run
        && run.length() != length
    {
        return Err(problem("length", format!("= {length} but the recorded run has {} steps", run.length())));
    }
    Ok(length)
}

/// The recorded run a `recorded:` field (`value`) names, read from the spec's folder (`file`).
pub(crate) fn read_recorded(value: &Value, file: &dyn Fn(&str) -> Option<String>) -> Result<Trajectory, Problem> {
    let path = text(value, "recorded")?;
    let Some(contents) = file(&path) else {
        return Err(problem(
            "recorded",
            format!("{path}: was not found (paths are relative to the spec file's directory)"),
        ));
    };
    Trajectory::from_json(contents.as_bytes()).map_err(|e| problem("recorded", format!("{path}: {e}")))
}

pub(crate) fn parse_trajectory(
    index: usize,
    entry: &Value,
    synthetic: bool,
    file: &dyn Fn(&str) -> Option<String>,
) -> Result<(TrajectorySpec, Option<Trajectory>), SpecError> {
    let Value::Mapping(map) = entry else {
        return Err(SpecError::Trajectory {
            trajectory: TrajectoryRef::Index(index),
            field: "entry".into(),
            message: format!("must be a mapping with id, length, curve, …; found {}", show(entry)),
        });
    };
    // Name the trajectory by its id when it has a usable one, so the user can find it.
    let named = match map.get("id") {
        Some(Value::String(id)) if valid_name(id) => TrajectoryRef::Id(id.clone()),
        _ => TrajectoryRef::Index(index),
    };
    let at = |p: Problem| SpecError::Trajectory { trajectory: named.clone(), field: p.field, message: p.message };

    let raw: RawTrajectory = level(map, "", "a trajectory").map_err(at)?;
    let id = text(required(&raw.id, "id").map_err(at)?, "id").map_err(at)?;
    let recorded = match &raw.recorded {
        None => None,
        Some(v) => {
            let run = read_recorded(v, file).map_err(at)?;
            if synthetic {
                return Err(at(problem(
                    "recorded",
                    "is given, but the synthetic runner cannot replay recorded runs; use a runner that replays in \
                     containers, or give the trajectory by length and curve",
                )));
            }
            Some(run)
        }
    };
    let task = match (&raw.task, &recorded) {
        (None, Some(run)) => run.task.id.clone(),
        (None, None) => id.clone(),
        (Some(v), _) => text(v, "task").map_err(at)?,
    };
    let length = length_of(&raw.length, recorded.as_ref()).map_err(at)?;
    if length > MAX_LENGTH {
        return Err(at(problem("length", format!("= {length} is more than {MAX_LENGTH} steps"))));
    }

    let curve = match &raw.curve {
        None if synthetic => {
            return Err(at(problem(
                "curve",
                "is missing; the synthetic runner needs each trajectory's true curve (a t,v CSV file)",
            )));
        }
        None => None,
        Some(v) => {
            let path = text(v, "curve").map_err(at)?;
            let Some(contents) = file(&path) else {
                return Err(SpecError::CurveFile {
                    trajectory: named.clone(),
                    path,
                    message: "was not found (curve paths are relative to the spec file's directory)".into(),
                });
            };
            let values = parse_curve(&contents, length).map_err(|(line, message)| match line {
                Some(line) => SpecError::CurveLine { trajectory: named.clone(), path: path.clone(), line, message },
                None => SpecError::CurveFile { trajectory: named.clone(), path: path.clone(), message },
            })?;
            Some(values)
        }
    };

    let labels = match &raw.labels {
        None => Vec::new(),
        Some(Value::Mapping(labels)) => parse_labels(labels, length).map_err(at)?,
        Some(other) => {
            return Err(at(problem(
                "labels",
                format!("must be a mapping from source to step, like {{o3: 44, sol: none}}; found {}", show(other)),
            )));
        }
    };

    let base_runs = match &raw.base_runs {
        None => BaseRuns::default(),
        Some(Value::Sequence(runs)) => {
            BaseRuns(runs.iter().enumerate().map(|(i, r)| parse_base_run(i, r)).collect::<Result<_, _>>().map_err(at)?)
        }
        Some(other) => {
            return Err(at(problem(
                "base_runs",
                format!("must be a list like [{{success: true, steps: 40}}]; found {}", show(other)),
            )));
        }
    };

    let digest = recorded.as_ref().map(Trajectory::digest);
    Ok((TrajectorySpec { id, task, length, curve, labels, base_runs, recorded: digest }, recorded))
}

pub(crate) fn parse_labels(labels: &Mapping, length: u32) -> Result<Vec<Label>, Problem> {
    let mut out = Vec::with_capacity(labels.len());
    for (source, step) in labels {
        let Some(source) = source.as_str().filter(|s| valid_name(s)) else {
            return Err(problem("labels", format!("has a source that is not a name: {} (quote it)", show(source))));
        };
        let field = format!("labels.{source}");
        let expected =
            format!("expected a step from 1 to {length} (the trajectory's length), or `none` for no mistake");
        let step = match step {
            Value::String(s) if s == "none" => None,
            Value::Number(n) => match n.as_u64() {
                Some(m) if (1..=u64::from(length)).contains(&m) => Some(m as u32),
                Some(m) => return Err(problem(field, format!("= {m} is outside 1..={length}; {expected}"))),
                None => return Err(problem(field, format!("= {n} is not a whole step; {expected}"))),
            },
            other => return Err(problem(field, format!("= {}: {expected}", show(other)))),
        };
        out.push(Label { source: source.to_string(), step });
    }
    Ok(out)
}

pub(crate) fn parse_base_run(index: usize, run: &Value) -> Result<BaseRun, Problem> {
    let prefix = format!("base_runs[{index}]");
    let Value::Mapping(map) = run else {
        return Err(problem(
            prefix,
            format!("must be a mapping like {{success: true, steps: 40}}; found {}", show(run)),
        ));
    };
    let raw: RawBaseRun = level(map, &format!("{prefix}."), "a base run")?;
    let success = match &raw.success {
        None => return Err(missing(&format!("{prefix}.success"))),
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(problem(format!("{prefix}.success"), format!("must be true or false, found {}", show(other))));
        }
    };
    let steps_field = format!("{prefix}.steps");
    let steps = uint(required(&raw.steps, &steps_field)?, &steps_field, 0, u64::from(u32::MAX))? as u32;
    Ok(BaseRun { success, steps })
}

/// Parse a curve file for a trajectory of length `length`: `v` for `t = 0..length−1`. Errors carry
/// the line (1-based, header = 1) when there is one.
pub(crate) fn parse_curve(contents: &str, length: u32) -> Result<Vec<f64>, (Option<u64>, String)> {
    let expected_rows = format!("one row for each t = 0..={} (the trajectory's length is {length})", length - 1);
    // Spreadsheets often save CSV with a byte-order mark, which would otherwise end up in `t`.
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(contents.as_bytes());
    let headers = reader.headers().map_err(|e| (Some(1), format!("cannot read the header: {e}")))?.clone();
    if headers.iter().all(str::is_empty) {
        return Err((None, format!("is empty; expected the header `t,v` and {expected_rows}")));
    }
    let column = |name: &str| -> Result<usize, (Option<u64>, String)> {
        let found: Vec<usize> = headers.iter().enumerate().filter(|(_, h)| *h == name).map(|(i, _)| i).collect();
        match found[..] {
            [i] => Ok(i),
            [] => Err((
                Some(1),
                format!(
                    "the header has no column `{name}` (expected `t,v`, found `{}`)",
                    headers.iter().collect::<Vec<_>>().join(",")
                ),
            )),
            _ => Err((Some(1), format!("the header has the column `{name}` twice"))),
        }
    };
    let (t_col, v_col) = (column("t")?, column("v")?);

    let mut values: Vec<Option<(f64, u64)>> = vec![None; length as usize];
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map(|p| p.line());
            let message = match e.kind() {
                csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                    format!("has {len} fields where the header has {expected_len}")
                }
                _ => format!("cannot be read: {e}"),
            };
            (line, message)
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |message: String| (Some(line), message);
        let raw_t = record.get(t_col).unwrap_or("");
        let t = match raw_t.parse::<u64>() {
            Ok(t) if t < u64::from(length) => t as usize,
            Ok(t) => return Err(at(format!("t = {t} is outside 0..={}; expected {expected_rows}", length - 1))),
            Err(_) => return Err(at(format!("t = {raw_t:?} is not a step (a whole number ≥ 0)"))),
        };
        let raw_v = record.get(v_col).unwrap_or("");
        let v = raw_v.parse::<f64>().map_err(|_| at(format!("v = {raw_v:?} is not a number")))?;
        if v.is_nan() {
            return Err(at("v = NaN is not a number".into()));
        }
        if !(0.0..=1.0).contains(&v) {
            return Err(at(format!("v = {raw_v} is outside [0, 1]")));
        }
        if let Some((_, first)) = values[t] {
            return Err(at(format!("t = {t} appears twice (first on line {first})")));
        }
        values[t] = Some((v, line));
    }

    let missing: Vec<usize> = values.iter().enumerate().filter(|(_, v)| v.is_none()).map(|(t, _)| t).collect();
    if missing.len() == length as usize {
        return Err((None, format!("has no rows; expected {expected_rows}")));
    }
    if !missing.is_empty() {
        const SHOWN: usize = 5;
        let mut list = missing.iter().take(SHOWN).map(ToString::to_string).collect::<Vec<_>>().join(", ");
        if missing.len() > SHOWN {
            list.push_str(&format!(" and {} more", missing.len() - SHOWN));
        }
        return Err((None, format!("has no row for t = {list}; expected {expected_rows}")));
    }
    Ok(values.into_iter().map(|v| v.map_or(0.0, |(v, _)| v)).collect())
}
