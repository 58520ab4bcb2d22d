//! `vcurve bench schedule`: the schedule benchmark on synthetic curves, across the machine's cores.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use vcurve_method::Thresholds;
use vcurve_method::bench::{CurveResult, ScheduleReport, schedule_report, simulate};
use vcurve_method::schedule::Variant;
use vcurve_method::synthetic::Family;

use crate::{input, output};

/// Run `variant` on `per_family` curves of every family, spread over the available cores.
pub fn run(variant: &'static dyn Variant, params: &Thresholds, per_family: u64, seed: u64) -> ScheduleReport {
    let jobs: Vec<(Family, u64)> = Family::ALL.iter().flat_map(|&f| (0..per_family).map(move |i| (f, i))).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
    let chunk = jobs.len().div_ceil(threads).max(1);
    let results: Vec<CurveResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|part| {
                scope
                    .spawn(move || part.iter().map(|&(f, i)| simulate(variant, params, f, seed, i)).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("bench thread panicked")).collect()
    });
    schedule_report(variant.name(), &results)
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

/// The human-readable table of one or more schedules.
pub fn table(reports: &[ScheduleReport]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<15} {:<14} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>5} {:>6} {:>6}",
        "schedule",
        "family",
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
        "big±1"
    );
    for report in reports {
        for (family, f) in &report.families {
            let _ = writeln!(
                out,
                "{:<15} {:<14} {:>6} {:>6} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.1} {:>7.1} {:>7.1} {:>5} {:>6} {:>6}",
                report.schedule,
                family,
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
            );
        }
    }
    out.push_str(
        "\nshape: shape accuracy (flat excluded); cliff: share estimated cliff; drop: confirmed drop ≥ 0.25 at K = 32;\n\
         onset: significant onset found; pnr: certified point of no return; cont/median/p90: continuations per curve;\n\
         big: curves with a true drop ≥ 0.4; bigerr: median |t̂* − t*| on them; big±1: share within one step.\n",
    );
    out
}

#[derive(Debug, clap::Args)]
pub struct BenchScheduleArgs {
    /// The schedule variant, or `all` for every variant side by side.
    #[arg(long, default_value = "paper", value_name = "NAME")]
    pub schedule: String,
    /// Curves per family (plateau_cliff, cliff, erosion, flat).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub per_family: u64,
    /// Seed of the synthetic curves and their outcomes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// YAML file overriding the method's parameters (docs/method.md §8).
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

/// `vcurve bench schedule`: run the schedule variants and print their table (or JSON).
pub fn run_command(args: &BenchScheduleArgs) -> anyhow::Result<()> {
    use vcurve_method::schedule::variants::{VARIANTS, variant_by_name, variant_names};
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let variants: Vec<_> = if args.schedule == "all" {
        VARIANTS.to_vec()
    } else {
        vec![variant_by_name(&args.schedule).with_context(|| {
            format!("unknown schedule {:?}; choose one of {} or all", args.schedule, variant_names().join(", "))
        })?]
    };
    let started = std::time::Instant::now();
    let reports: Vec<_> = variants.iter().map(|v| run(*v, &params, args.per_family, args.seed)).collect();
    if args.json {
        if args.schedule == "all" {
            output::println(serde_json::to_string_pretty(&reports)?)
        } else {
            output::println(serde_json::to_string_pretty(&reports[0])?)
        }
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
