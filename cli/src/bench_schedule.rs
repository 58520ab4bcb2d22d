//! `vcurve bench schedule`: the schedule benchmark on synthetic curves, or on true curves a user
//! supplies (`--curves`), across the machine's cores.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vcurve_coordinator::spec::MAX_LENGTH;
use vcurve_method::Thresholds;
use vcurve_method::bench::{
    CurveResult, FamilyReport, ScheduleReport, SuppliedCurve, SuppliedReport, group_reports, schedule_report, simulate,
    simulate_supplied,
};
use vcurve_method::schedule::Variant;
use vcurve_method::schedule::variants::{VARIANTS, variant_by_name, variant_names};
use vcurve_method::synthetic::Family;

use crate::input::{self, InputError};
use crate::output;

/// `f` of every job, in order, spread over the available cores.
fn parallel<J: Sync>(jobs: &[J], f: impl Fn(&J) -> CurveResult + Sync) -> Vec<CurveResult> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
    let chunk = jobs.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            jobs.chunks(chunk).map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>())).collect();
        handles.into_iter().flat_map(|h| h.join().expect("bench thread panicked")).collect()
    })
}

/// Run `variant` on `per_family` curves of every family, spread over the available cores.
pub fn run(variant: &'static dyn Variant, params: &Thresholds, per_family: u64, seed: u64) -> ScheduleReport {
    let jobs: Vec<(Family, u64)> = Family::ALL.iter().flat_map(|&f| (0..per_family).map(move |i| (f, i))).collect();
    let results = parallel(&jobs, |&(f, i)| simulate(variant, params, f, seed, i));
    schedule_report(variant.name(), &results)
}

/// Run `variant` on `replicates` replicates of every supplied curve. Replicate `r` of a curve has
/// the same outcomes under every schedule (they hash the seed, the curve's name, `r` and the key).
pub fn run_supplied(
    variant: &'static dyn Variant,
    params: &Thresholds,
    curves: &[SuppliedCurve],
    replicates: u64,
    seed: u64,
) -> SuppliedReport {
    let jobs: Vec<(&SuppliedCurve, u64)> = curves.iter().flat_map(|c| (0..replicates).map(move |r| (c, r))).collect();
    let results = parallel(&jobs, |&(c, r)| simulate_supplied(variant, params, c, seed, r));
    SuppliedReport { schedule: variant.name(), groups: group_reports(&results) }
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

/// The table of `(schedule, family or group, figures)` rows; `column` heads the second column.
fn rows_table<'a>(column: &str, rows: impl Iterator<Item = (&'a str, &'a str, &'a FamilyReport)>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<15} {:<14} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5} {:>6} {:>6} {:>6} {:>6}",
        "schedule",
        column,
        "curves",
        "shape",
        "cliff",
        "drop",
        "onset",
        "pnr",
        "cont",
        "median",
        "p90",
        "big",
        "bigerr",
        "big±1",
        "hold",
        "fpnr"
    );
    for (schedule, group, f) in rows {
        let _ = writeln!(
            out,
            "{:<15} {:<14} {:>6} {:>6} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.1} {:>7.1} {:>7.1} {:>5} {:>6} {:>6} {:>6} {:>6}",
            schedule,
            group,
            f.curves,
            cell(f.shape_accuracy, 3),
            f.cliff_share,
            f.drop_found,
            f.onset_found,
            f.pnr_certified,
            f.continuations_mean,
            f.continuations_median,
            f.continuations_p90,
            f.big_cliff_n,
            cell(f.big_cliff_median_abs_error, 1),
            cell(f.big_cliff_within_one, 3),
            f.holding_curves,
            cell(f.false_pnr, 3),
        );
    }
    out.push_str(
        "\nshape: shape accuracy (flat excluded); cliff: share estimated cliff; drop: confirmed drop ≥ 0.25 at\n\
         K_confirm (32; 16 under adaptive); onset: significant onset found; pnr: certified point of no return;\n\
         cont/median/p90: continuations per curve; big: curves with a true drop ≥ 0.4; bigerr: median |t̂* − t*|\n\
         on them; big±1: share within one step; hold: curves whose true value stays ≥ 0.2 before T;\n\
         fpnr: share of them certifying a point of no return before T (false certification; –: no such curve,\n\
         not measured).\n",
    );
    out
}

/// The human-readable table of one or more schedules on the synthetic families.
pub fn table(reports: &[ScheduleReport]) -> String {
    let rows = reports.iter().flat_map(|r| r.families.iter().map(|(g, f)| (r.schedule, g.as_str(), f)));
    rows_table("family", rows)
}

/// The human-readable table of one or more schedules on supplied curves, by group.
pub fn supplied_table(reports: &[SuppliedReport]) -> String {
    let rows = reports.iter().flat_map(|r| r.groups.iter().map(|(g, f)| (r.schedule, g.as_str(), f)));
    rows_table("group", rows)
}

/// The schedules of `--schedule`: `all`, or a comma-separated list of distinct variant names.
pub fn parse_schedules(list: &str) -> anyhow::Result<Vec<&'static dyn Variant>> {
    let known = || format!("the known schedules are {}, or all for every one", variant_names().join(", "));
    if list.trim() == "all" {
        return Ok(VARIANTS.to_vec());
    }
    let mut chosen: Vec<&'static dyn Variant> = Vec::new();
    for name in list.split(',').map(str::trim) {
        if name.is_empty() {
            anyhow::bail!("--schedule {list:?} has an empty name; give names separated by commas ({})", known());
        }
        if name == "all" {
            anyhow::bail!("--schedule {list:?}: `all` stands alone (it already runs every schedule)");
        }
        let Some(variant) = variant_by_name(name) else {
            anyhow::bail!("unknown schedule {name:?} in --schedule {list:?}; {}", known());
        };
        if chosen.iter().any(|v| v.name() == name) {
            anyhow::bail!(
                "--schedule {list:?} names `{name}` twice; every schedule already runs on the same outcomes, list it once"
            );
        }
        chosen.push(variant);
    }
    Ok(chosen)
}

/// The header of a `--curves` file.
const CURVES_COLUMNS: [&str; 3] = ["curve", "t", "v"];

/// Read a `--curves` file: `curve,t,v`, one row per step, `t` increasing from 0 within each curve
/// (rows of different curves may interleave), `v` in `[0, 1]`. See [`SuppliedCurve::new`] for the
/// steps between rows and `T`. Curves come in the order of their first row.
pub fn read_supplied_curves(path: &Path) -> Result<Vec<SuppliedCurve>, InputError> {
    supplied_curves_from(path, &input::read_bounded(path, input::MAX_CSV_BYTES)?)
}

/// [`read_supplied_curves`] of the contents `text` of `path`.
fn supplied_curves_from(path: &Path, text: &[u8]) -> Result<Vec<SuppliedCurve>, InputError> {
    let file_error = |message: String| InputError::File { path: path.into(), message };
    let line_error = |line: u64, message: String| InputError::Line { path: path.into(), line, message };
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
            Ok(t) if t < u64::from(MAX_LENGTH) => t as u32,
            Ok(t) => {
                return Err(at(format!(
                    "`t` = {t} is too large: a curve has at most {MAX_LENGTH} steps (t ≤ {})",
                    MAX_LENGTH - 1
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

#[derive(Debug, clap::Args)]
pub struct BenchScheduleArgs {
    /// The schedule variants, comma-separated (`paper,screen-k4`), or `all` for every variant; all run
    /// side by side on the same outcomes.
    #[arg(long, default_value = "paper", value_name = "NAMES")]
    pub schedule: String,
    /// Curves per family (plateau_cliff, cliff, erosion, flat).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub per_family: u64,
    /// True curves to run the schedules on instead of the synthetic families: a CSV file with the
    /// header `curve,t,v`, `t` from 0, `V(T) = 0` implied one step after a curve's last `t`. The
    /// table is by group, a curve's name up to its first `/` (`all` for a name without one).
    #[arg(long, value_name = "FILE", conflicts_with = "per_family")]
    pub curves: Option<PathBuf>,
    /// Runs of every supplied curve (`--curves`), each with its own outcomes.
    #[arg(long, default_value_t = 200, requires = "curves", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub replicates: u64,
    /// Seed of the synthetic curves and their outcomes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of a table: one report, or with several schedules a list of them.
    #[arg(long)]
    pub json: bool,
    /// YAML file overriding the method's parameters (docs/method.md §8).
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

/// Pretty JSON of the reports: the report itself when one schedule was named, else the list.
fn to_json<T: serde::Serialize>(reports: &[T], one: bool) -> anyhow::Result<String> {
    Ok(if one { serde_json::to_string_pretty(&reports[0])? } else { serde_json::to_string_pretty(reports)? })
}

/// `vcurve bench schedule`: run the schedule variants and print their table (or JSON).
pub fn run_command(args: &BenchScheduleArgs) -> anyhow::Result<()> {
    let variants = parse_schedules(&args.schedule)?;
    let one = variants.len() == 1 && args.schedule.trim() != "all";
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let started = std::time::Instant::now();
    if let Some(path) = &args.curves {
        let curves = read_supplied_curves(path)?;
        let reports: Vec<_> =
            variants.iter().map(|v| run_supplied(*v, &params, &curves, args.replicates, args.seed)).collect();
        if args.json {
            return output::println(to_json(&reports, one)?);
        }
        return output::print(format!(
            "{}{} runs of each of {} curves from {}, seed {}, {:.1} s\n",
            supplied_table(&reports),
            args.replicates,
            curves.len(),
            path.display(),
            args.seed,
            started.elapsed().as_secs_f64()
        ));
    }
    let reports: Vec<_> = variants.iter().map(|v| run(*v, &params, args.per_family, args.seed)).collect();
    if args.json {
        output::println(to_json(&reports, one)?)
    } else {
        output::print(format!(
            "{}{} curves per family, seed {}, {:.1} s\n",
            table(&reports),
            args.per_family,
            args.seed,
            started.elapsed().as_secs_f64()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<SuppliedCurve>, String> {
        supplied_curves_from(Path::new("c.csv"), text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_curves_file_is_read_by_curve_in_order_of_first_row() {
        let curves = read("\u{feff}curve,t,v\nb/x,0,0.5\na,0,1\nb/x,2,0.25\na,1,0.5\n").unwrap();
        assert_eq!(curves.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["b/x", "a"]);
        assert_eq!(curves[0].values(), &[0.5, 0.5, 0.25, 0.0]);
        assert_eq!((curves[0].group(), curves[1].group(), curves[1].length()), ("b", "all", 2));
        // Columns in any order.
        assert_eq!(read("v,curve,t\n0.5,a,0\n").unwrap()[0].values(), &[0.5, 0.0]);
    }

    #[test]
    fn every_bad_curves_file_is_refused_naming_file_line_and_field() {
        let cases: &[(&str, &str)] = &[
            ("", "c.csv: the file is empty; expected the header `curve,t,v`"),
            ("curve,t,v\n", "c.csv: has the header `curve,t,v` but no rows"),
            ("t,v\n0,1\n", "c.csv line 1: missing column `curve`"),
            ("curve,t,v,n\na,0,1,3\n", "c.csv line 1: unexpected column `n`"),
            ("curve,t,t\na,0,1\n", "c.csv line 1: the header has the column `t` twice"),
            ("curve,t,v\na,0\n", "c.csv line 2: malformed row: 2 fields where the header has 3"),
            ("curve,t,v\n,0,1\n", "c.csv line 2: `curve` is empty"),
            ("curve,t,v\n/a,0,1\n", "c.csv line 2: `curve` = \"/a\" has an empty group"),
            ("curve,t,v\na,-1,1\n", "c.csv line 2: `t` = \"-1\" is not a step (a whole number ≥ 0)"),
            ("curve,t,v\na,1.5,1\n", "c.csv line 2: `t` = \"1.5\" is not a step"),
            ("curve,t,v\na,100000,1\n", "c.csv line 2: `t` = 100000 is too large"),
            ("curve,t,v\na,0,x\n", "c.csv line 2: `v` = \"x\" is not a number"),
            ("curve,t,v\na,0,NaN\n", "c.csv line 2: `v` = \"NaN\" is not a number"),
            ("curve,t,v\na,0,\n", "c.csv line 2: `v` = \"\" is not a number"),
            ("curve,t,v\na,0,1.5\n", "c.csv line 2: `v` = 1.5 is outside [0, 1]"),
            ("curve,t,v\na,0,-0.1\n", "c.csv line 2: `v` = -0.1 is outside [0, 1]"),
            ("curve,t,v\na,1,1\n", "c.csv line 2: curve `a` starts at t = 1; its first row must be t = 0"),
            ("curve,t,v\na,0,1\nb,0,1\na,0,1\n", "c.csv line 4: t = 0 of curve `a` appears twice (first on line 2)"),
            (
                "curve,t,v\na,0,1\na,5,1\na,3,1\n",
                "c.csv line 4: t = 3 of curve `a` comes after t = 5 (line 3); a curve's rows go in increasing t",
            ),
        ];
        for (text, expected) in cases {
            let err = read(text).expect_err(text);
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_schedule_list_names_known_schedules_once() {
        let names = |list: &str| parse_schedules(list).map(|v| v.iter().map(|v| v.name()).collect::<Vec<_>>());
        assert_eq!(names("paper").unwrap(), ["paper"]);
        assert_eq!(names("screen-k4, paper").unwrap(), ["screen-k4", "paper"]);
        assert_eq!(names("all").unwrap(), variant_names());
        let err = |list: &str| names(list).unwrap_err().to_string();
        assert_eq!(names("paper,adaptive").unwrap(), ["paper", "adaptive"]);
        assert!(err("paper,adaptiv").contains("unknown schedule \"adaptiv\""), "{}", err("paper,adaptiv"));
        assert!(err("paper,adaptiv").contains("paper, adaptive, screen-bisect, screen-k4, sparse-anchors"));
        assert!(err("paper,paper").contains("names `paper` twice"));
        assert!(err("paper,").contains("has an empty name"));
        assert!(err("all,paper").contains("`all` stands alone"));
    }
}
