//! Reading YAML values with messages that name the field.

use serde_norway::{Mapping, Value};

use crate::error::SpecError;

/// What is wrong, and where, before it is attributed to the study or a trajectory.
pub(crate) struct Problem {
    pub(crate) field: String,
    pub(crate) message: String,
}

pub(crate) fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem { field: field.into(), message: message.into() }
}

pub(crate) fn missing(field: &str) -> Problem {
    problem(field, "is missing")
}

pub(crate) fn top_error(p: Problem) -> SpecError {
    SpecError::Field { field: p.field, message: p.message }
}

/// Reject keys outside `allowed` (typo protection). `prefix` is prepended to the offending key.
pub(crate) fn check_keys(map: &Mapping, allowed: &[&str], prefix: &str, what: &str) -> Result<(), Problem> {
    for key in map.keys() {
        let Some(name) = key.as_str() else {
            return Err(problem(
                prefix.trim_end_matches('.'),
                format!("has a key that is not a field name: {}", show(key)),
            ));
        };
        if !allowed.contains(&name) {
            return Err(problem(
                format!("{prefix}{name}"),
                format!("is not a field of {what} (expected one of: {})", allowed.join(", ")),
            ));
        }
    }
    Ok(())
}

/// A name-like string: not empty, no surrounding blanks, no control characters.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.trim() == s && !s.chars().any(char::is_control)
}

pub(crate) fn text(value: &Value, field: &str) -> Result<String, Problem> {
    match value {
        Value::String(s) if valid_name(s) => Ok(s.clone()),
        Value::String(s) if s.trim().is_empty() => Err(problem(field, "is empty")),
        Value::String(s) => Err(problem(field, format!("= {s:?} has surrounding blanks or control characters"))),
        other => Err(problem(field, format!("must be text, found {} (quote it)", show(other)))),
    }
}

/// A whole number in `lo..=hi`.
pub(crate) fn uint(value: &Value, field: &str, lo: u64, hi: u64) -> Result<u64, Problem> {
    let range = if lo == 0 && hi >= u64::from(u32::MAX) {
        "a whole number ≥ 0".to_string()
    } else {
        format!("a whole number from {lo} to {hi}")
    };
    let Value::Number(n) = value else {
        return Err(problem(field, format!("must be {range}, found {}", show(value))));
    };
    match (n.as_u64(), n.as_i64()) {
        (Some(v), _) if (lo..=hi).contains(&v) => Ok(v),
        (Some(v), _) => Err(problem(field, format!("= {v} is outside {lo}..={hi}"))),
        (None, Some(v)) => Err(problem(field, format!("= {v} is negative; expected {range}"))),
        (None, None) => Err(problem(field, format!("= {n} is not a whole number; expected {range}"))),
    }
}

/// Any number, as `f64`.
pub(crate) fn number(value: &Value, field: &str) -> Result<f64, Problem> {
    match value {
        Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        other => Err(problem(field, format!("must be a number, found {}", show(other)))),
    }
}

/// A number in `[lo, hi]`.
pub(crate) fn real(value: &Value, field: &str, lo: f64, hi: f64) -> Result<f64, Problem> {
    let v = number(value, field)?;
    if v.is_nan() {
        Err(problem(field, "= NaN is not a number"))
    } else if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(problem(field, format!("= {v} is outside [{lo}, {hi}]")))
    }
}

/// A value as a user would recognize it in their file.
pub(crate) fn show(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}
