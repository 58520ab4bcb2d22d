//! True curves a user supplies to the benchmark, read from CSV text (`vcurve bench schedule
//! --curves`): `curve,t,v`, one row per step.

use std::collections::HashMap;

use super::simulate::SuppliedCurve;

/// Why CSV text does not hold supplied curves: as a whole, or at a line (1 is the header).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurvesError {
    #[error("{0}")]
    Text(String),
    #[error("line {line}: {message}")]
    Line { line: u64, message: String },
}

/// The header of a supplied-curves file.
pub const CURVES_COLUMNS: [&str; 3] = ["curve", "t", "v"];

/// The curves of CSV `text`: the header `curve,t,v` (columns in any order, a byte-order mark
/// allowed), one row per step, `t` increasing from 0 within each curve and below `max_length`
/// (rows of different curves may interleave), `v` in `[0, 1]`. See [`SuppliedCurve::new`] for the
/// steps between rows and `T`. Curves come in the order of their first row.
pub fn parse_supplied_curves(text: &[u8], max_length: u32) -> Result<Vec<SuppliedCurve>, CurvesError> {
    let file_error = CurvesError::Text;
    let line_error = |line: u64, message: String| CurvesError::Line { line, message };
    let expected = CURVES_COLUMNS.join(",");
    // Spreadsheets often save CSV with a byte-order mark, which would otherwise end up in `curve`.
    let text = text.strip_prefix("\u{feff}".as_bytes()).unwrap_or(text);
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(true).from_reader(text);
    let headers = reader.headers().map_err(|e| line_error(1, format!("cannot read the header: {e}")))?.clone();
    if headers.iter().all(str::is_empty) {
        return Err(file_error(format!(
            "the file is empty; expected the header `{expected}` and one row per step of each curve"
        )));
    }
    let found = headers.iter().collect::<Vec<_>>().join(",");
    let mut columns = [None; 3];
    for (i, h) in headers.iter().enumerate() {
        let Some(c) = CURVES_COLUMNS.iter().position(|name| *name == h) else {
            return Err(line_error(
                1,
                format!("unexpected column `{h}`: the header must be `{expected}` (found `{found}`)"),
            ));
        };
        if columns[c].replace(i).is_some() {
            return Err(line_error(1, format!("the header has the column `{h}` twice")));
        }
    }
    let [Some(curve_col), Some(t_col), Some(v_col)] = columns else {
        let missing = CURVES_COLUMNS.iter().zip(columns).find(|(_, c)| c.is_none()).map_or("", |(name, _)| name);
        return Err(line_error(
            1,
            format!("missing column `{missing}`: the header must be `{expected}` (found `{found}`)"),
        ));
    };

    let mut order: Vec<String> = Vec::new();
    // Each curve's rows, and the line of its last one.
    let mut curves: HashMap<String, (Vec<(u32, f64)>, u64)> = HashMap::new();
    for record in reader.records() {
        let record =
            record.map_err(|e| line_error(e.position().map_or(0, |p| p.line()), format!("malformed row: {e}")))?;
        let line = record.position().map_or(0, |p| p.line());
        let at = |message: String| line_error(line, message);
        if record.len() != headers.len() {
            return Err(at(format!("malformed row: {} fields where the header has {}", record.len(), headers.len())));
        }
        let field = |i: usize| record.get(i).unwrap_or("");
        let name = field(curve_col);
        if name.is_empty() {
            return Err(at("`curve` is empty; every row names its curve".into()));
        }
        if name.starts_with('/') {
            return Err(at(format!("`curve` = {name:?} has an empty group before its first `/`")));
        }
        let raw_t = field(t_col);
        let t = match raw_t.parse::<u64>() {
            Ok(t) if t < u64::from(max_length) => t as u32,
            Ok(t) => {
                return Err(at(format!(
                    "`t` = {t} is too large: a curve has at most {max_length} steps (t ≤ {})",
                    max_length - 1
                )));
            }
            Err(_) => return Err(at(format!("`t` = {raw_t:?} is not a step (a whole number ≥ 0)"))),
        };
        let raw_v = field(v_col);
        let v = match raw_v.parse::<f64>() {
            Ok(v) if v.is_nan() => return Err(at(format!("`v` = {raw_v:?} is not a number"))),
            Ok(v) if (0.0..=1.0).contains(&v) => v,
            Ok(_) => return Err(at(format!("`v` = {raw_v} is outside [0, 1]"))),
            Err(_) => return Err(at(format!("`v` = {raw_v:?} is not a number"))),
        };
        let (rows, last_line) = curves.entry(name.to_string()).or_insert_with(|| {
            order.push(name.to_string());
            (Vec::new(), line)
        });
        match rows.last() {
            None if t != 0 => {
                return Err(at(format!(
                    "curve `{name}` starts at t = {t}; its first row must be t = 0 (V(h_0), the task alone)"
                )));
            }
            Some(&(previous, _)) if t == previous => {
                return Err(at(format!("t = {t} of curve `{name}` appears twice (first on line {last_line})")));
            }
            Some(&(previous, _)) if t < previous => {
                return Err(at(format!(
                    "t = {t} of curve `{name}` comes after t = {previous} (line {last_line}); a curve's rows go in increasing t"
                )));
            }
            _ => {}
        }
        rows.push((t, v));
        *last_line = line;
    }
    if order.is_empty() {
        return Err(file_error(format!("has the header `{expected}` but no rows")));
    }
    order
        .into_iter()
        .map(|name| {
            let rows = &curves[&name].0;
            SuppliedCurve::new(name.clone(), rows).map_err(|e| file_error(format!("curve `{name}` {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplied_curves_are_read_by_curve_and_refused_with_their_line() {
        let curves = parse_supplied_curves(b"curve,t,v\na,0,1\nb,0,0.5\na,2,0.25\n", 10).unwrap();
        assert_eq!(curves.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(curves[0].values(), &[1.0, 1.0, 0.25, 0.0]);
        assert!(matches!(parse_supplied_curves(b"", 10), Err(CurvesError::Text(_))));
        let err = parse_supplied_curves(b"curve,t,v\na,10,1\n", 10).unwrap_err();
        assert_eq!(err.to_string(), "line 2: `t` = 10 is too large: a curve has at most 10 steps (t ≤ 9)");
    }
}
