//! `vcurve analyze`: the estimator on a points file, as one JSON object.

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;
use vcurve_method::curve::Interval;
use vcurve_method::{CurveAnalysis, FittedPoint, Shape};

use crate::{input, output};

/// The JSON document `vcurve analyze` prints. Field names are part of the CLI's contract.
#[derive(Debug, Serialize)]
pub struct AnalyzeReport {
    pub length: u32,
    pub points: Vec<FittedPoint>,
    pub v0_fit: Option<f64>,
    pub t_star: Option<u32>,
    pub decisive_interval: Option<[u32; 2]>,
    pub decisive_drop: Option<f64>,
    pub concentration: Option<f64>,
    pub shape: Shape,
    pub onset: Option<u32>,
    pub onset_interval: Option<[u32; 2]>,
    pub onset_p_value: Option<f64>,
    pub pnr: u32,
    pub pnr_certified: bool,
    pub restart_point: Option<u32>,
}

fn pair(i: Option<Interval>) -> Option<[u32; 2]> {
    i.map(|i| [i.a, i.b])
}

impl From<CurveAnalysis> for AnalyzeReport {
    fn from(a: CurveAnalysis) -> Self {
        AnalyzeReport {
            length: a.length,
            v0_fit: a.v0_fit(),
            t_star: a.t_star,
            decisive_interval: pair(a.decisive_interval),
            decisive_drop: a.decisive_drop,
            concentration: a.concentration,
            shape: a.shape,
            onset: a.onset,
            onset_interval: pair(a.onset_interval),
            onset_p_value: a.onset_p_value,
            pnr: a.pnr,
            pnr_certified: a.pnr_certified,
            restart_point: a.restart_point,
            points: a.points,
        }
    }
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
    /// YAML file overriding the method's parameters (docs/method.md §8).
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

/// `vcurve analyze`: analyze the points and print the report as JSON.
pub fn run(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let points = input::read_points(&args.points, args.length)?;
    let base_runs = args.base_runs.as_deref().map(input::read_base_runs).transpose()?;
    let budget = args.budget.unwrap_or(params.budget);
    let report = vcurve_method::analyze(args.length, &points, base_runs.as_ref(), budget, &params)
        .map(AnalyzeReport::from)
        .with_context(|| format!("{}", args.points.display()))?;
    output::println(serde_json::to_string_pretty(&report)?)
}
