//! `vcurve bench cluster`: the command over the cluster simulator of `vcurve_testkit::sim` (what
//! it simulates and reports is documented there): its arguments, the store it runs on, the
//! table or JSON it prints.

use anyhow::{Context, bail};
use vcurve_coordinator::store::SqlStore;
use vcurve_testkit::sim::{self, ClusterReport, ClusterSettings, DurationModel, Durations};

use crate::output;

/// Simulate one cluster on the store `settings.store_url` names.
pub async fn run(settings: &ClusterSettings) -> anyhow::Result<ClusterReport> {
    let store = SqlStore::connect(&settings.store_url)
        .await
        .with_context(|| format!("cannot open the store {}", crate::commands::redact_url(&settings.store_url)))?;
    sim::run(&store, settings).await
}

#[derive(Debug, clap::Args)]
pub struct BenchClusterArgs {
    /// Workers of the simulated cluster (several runs: --workers 1000,50).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000u32, 50], value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: Vec<u32>,
    /// Slots of each worker.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub slots: u32,
    /// Trajectories of the simulated study (synthetic curves of every family in turn).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub trajectories: u32,
    /// The continuation duration model: realistic (a speed per task, steps up to the budget
    /// left, failures more often to the cap, noise) or blind (lognormal of the key alone).
    #[arg(long, default_value = "realistic", value_name = "MODEL")]
    pub durations: String,
    /// Median continuation duration of the blind model, minutes.
    #[arg(long, default_value_t = 3.0)]
    pub median_min: f64,
    /// 99th percentile of the continuation duration of the blind model, minutes.
    #[arg(long, default_value_t = 30.0)]
    pub p99_min: f64,
    /// Seed of the curves, their outcomes and the durations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The schedule variant (as `vcurve bench schedule --schedule`, one name).
    #[arg(long, default_value = "paper", value_name = "NAME")]
    pub schedule: String,
    /// The store: postgres://… (a database the bench may fill, without running studies) or
    /// sqlite://PATH; a fresh in-memory SQLite for each run by default.
    #[arg(long)]
    pub store: Option<String>,
    /// Print JSON instead of a table: one report, or with several worker counts a list of them.
    #[arg(long)]
    pub json: bool,
}

/// `vcurve bench cluster`.
pub async fn run_command(args: &BenchClusterArgs) -> anyhow::Result<()> {
    let schedules = crate::bench_schedule::parse_schedules(&args.schedule)?;
    let [schedule] = schedules[..] else {
        bail!("--schedule {:?}: the cluster simulation runs one schedule at a time", args.schedule);
    };
    let model = DurationModel::parse(&args.durations)?;
    let durations = Durations::with_model(model, args.median_min * 60.0, args.p99_min * 60.0, args.seed)?;
    let progress =
        std::io::IsTerminal::is_terminal(&std::io::stderr()) || std::env::var_os("VCURVE_PROGRESS").is_some();
    let mut reports = Vec::new();
    for &workers in &args.workers {
        let settings = ClusterSettings {
            store_url: args.store.clone().unwrap_or_else(|| "sqlite::memory:".into()),
            schedule,
            workers,
            slots: args.slots,
            trajectories: args.trajectories,
            durations,
            median_min: args.median_min,
            p99_min: args.p99_min,
            seed: args.seed,
            progress,
        };
        if progress {
            eprintln!("simulating {workers} workers × {} slots, {} trajectories…", args.slots, args.trajectories);
        }
        reports.push(run(&settings).await?);
    }
    if args.json {
        let json = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&reports)?
        };
        output::println(json)
    } else {
        output::print(sim::table(&reports))
    }
}
