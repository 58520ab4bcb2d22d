//! `vcurve bench schedule`: the schedule benchmark on synthetic curves, or on true curves a user
//! supplies (`--curves`), across the machine's cores. The benchmark itself is
//! [`vcurve_method::bench`]; here are its arguments, the file it reads, the cores it spreads over,
//! the clock and the printing.

use std::path::{Path, PathBuf};

use vcurve_coordinator::spec::MAX_LENGTH;
use vcurve_method::Thresholds;
use vcurve_method::bench::{
    CurveResult, CurvesError, ScheduleListError, ScheduleReport, Spread, SuppliedCurve, parse_supplied_curves,
    run_supplied, schedule_list, supplied_table, table,
};
use vcurve_method::schedule::Variant;
use vcurve_method::schedule::variants::variant_names;
use vcurve_method::synthetic::Family;

use crate::input::{self, InputError};
use crate::output;

/// The simulations spread over the available cores, in chunks of consecutive jobs.
struct Cores;

impl Spread for Cores {
    fn map<J: Sync>(&self, jobs: &[J], f: &(dyn Fn(&J) -> CurveResult + Sync)) -> Vec<CurveResult> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
        let chunk = jobs.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> =
                jobs.chunks(chunk).map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>())).collect();
            handles.into_iter().flat_map(|h| h.join().expect("bench thread panicked")).collect()
        })
    }
}

/// Run `variant` on `per_family` curves of every family, spread over the available cores.
pub fn run(variant: &'static dyn Variant, params: &Thresholds, per_family: u64, seed: u64) -> ScheduleReport {
    vcurve_method::bench::run(variant, params, per_family, seed, &Cores)
}

/// Run `variant` on `per_family` curves of each of `families`, spread over the available cores.
pub fn run_families(
    variant: &'static dyn Variant,
    params: &Thresholds,
    families: &[Family],
    per_family: u64,
    seed: u64,
) -> ScheduleReport {
    vcurve_method::bench::run_families(variant, params, families, per_family, seed, &Cores)
}

/// The schedules of `--schedule`: `all`, or a comma-separated list of distinct variant names.
pub fn parse_schedules(list: &str) -> anyhow::Result<Vec<&'static dyn Variant>> {
    let known = || format!("the known schedules are {}, or all for every one", variant_names().join(", "));
    schedule_list(list).map_err(|e| match e {
        ScheduleListError::EmptyName => {
            anyhow::anyhow!("--schedule {list:?} has an empty name; give names separated by commas ({})", known())
        }
        ScheduleListError::AllNotAlone => {
            anyhow::anyhow!("--schedule {list:?}: `all` stands alone (it already runs every schedule)")
        }
        ScheduleListError::Unknown(name) => {
            anyhow::anyhow!("unknown schedule {name:?} in --schedule {list:?}; {}", known())
        }
        ScheduleListError::Twice(name) => anyhow::anyhow!(
            "--schedule {list:?} names `{name}` twice; every schedule already runs on the same outcomes, list it once"
        ),
    })
}

/// Read a `--curves` file: `curve,t,v`, one row per step, `t` increasing from 0 within each curve
/// (rows of different curves may interleave), `v` in `[0, 1]`. See [`SuppliedCurve::new`] for the
/// steps between rows and `T`. Curves come in the order of their first row.
pub fn read_supplied_curves(path: &Path) -> Result<Vec<SuppliedCurve>, InputError> {
    supplied_curves_from(path, &input::read_bounded(path, input::MAX_CSV_BYTES)?)
}

/// [`read_supplied_curves`] of the contents `text` of `path`.
fn supplied_curves_from(path: &Path, text: &[u8]) -> Result<Vec<SuppliedCurve>, InputError> {
    parse_supplied_curves(text, MAX_LENGTH).map_err(|e| match e {
        CurvesError::Text(message) => InputError::File { path: path.into(), message },
        CurvesError::Line { line, message } => InputError::Line { path: path.into(), line, message },
    })
}

#[derive(Debug, clap::Args)]
pub struct BenchScheduleArgs {
    /// The schedule variants, comma-separated (`paper,screen-k4`), or `all` for every variant; all run
    /// side by side on the same outcomes.
    #[arg(long, default_value = "paper", value_name = "NAMES")]
    pub schedule: String,
    /// Curves per family (the paper's plateau_cliff, cliff, erosion, flat; two_cliffs, staircase,
    /// slow_slide, early_cliff, late_cliff, low_plateau).
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
            variants.iter().map(|v| run_supplied(*v, &params, &curves, args.replicates, args.seed, &Cores)).collect();
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
