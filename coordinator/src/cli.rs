//! Argument parsing and dispatch for the `vcurve` binary.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::input;

/// vcurve: where did an AI coding agent lose its task?
#[derive(Debug, Parser)]
#[command(name = "vcurve", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyze one V-curve from points you already have and print it as JSON.
    Analyze(AnalyzeArgs),
    /// Benchmarks: measure a part of vcurve on this machine.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run a schedule on synthetic curves with known truth and report its accuracy and cost.
    Schedule(BenchScheduleArgs),
}

#[derive(Debug, clap::Args)]
pub struct BenchScheduleArgs {
    /// The schedule variant, or `all` for every variant side by side.
    #[arg(long, default_value = "all", value_name = "NAME")]
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
    /// YAML file overriding the parameters of SPEC.md §8.
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// CSV with header `t,n,successes`: continuations and successes from each prefix h_t.
    #[arg(long, value_name = "POINTS.csv")]
    pub points: PathBuf,
    /// The failed trajectory's length T (its terminal point V(h_T) = 0 is never sampled).
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..))]
    pub length: u32,
    /// CSV with header `success,steps`: the task's base runs, for the restart point.
    #[arg(long, value_name = "BASE.csv")]
    pub base_runs: Option<PathBuf>,
    /// Step budget B of a run [default: the thresholds' `budget`, 100].
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..))]
    pub budget: Option<u32>,
    /// YAML file overriding the parameters of SPEC.md §8.
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

fn run_bench_schedule(args: &BenchScheduleArgs) -> anyhow::Result<()> {
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
    let reports: Vec<_> =
        variants.iter().map(|v| crate::bench_schedule::run(*v, &params, args.per_family, args.seed)).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        if args.schedule == "all" {
            serde_json::to_writer_pretty(&mut out, &reports)?;
        } else {
            serde_json::to_writer_pretty(&mut out, &reports[0])?;
        }
        writeln!(out)?;
    } else {
        write!(out, "{}", crate::bench_schedule::table(&reports))?;
        writeln!(
            out,
            "{} curves per family, seed {}, {:.1} s",
            args.per_family,
            args.seed,
            started.elapsed().as_secs_f64()
        )?;
    }
    Ok(())
}

fn run_analyze(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let points = input::read_points(&args.points, args.length)?;
    let base_runs = args.base_runs.as_deref().map(input::read_base_runs).transpose()?;
    let budget = args.budget.unwrap_or(params.budget);
    let report = crate::analyze::analyze(args.length, &points, base_runs.as_ref(), budget, &params)
        .with_context(|| format!("{}", args.points.display()))?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &report)?;
    writeln!(out)?;
    Ok(())
}

/// Parse the command line, run it, and turn any error into a message on stderr and exit code 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Analyze(args) => run_analyze(args),
        Command::Bench(BenchCommand::Schedule(args)) => run_bench_schedule(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vcurve: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
