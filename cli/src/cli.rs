//! Argument parsing and dispatch for the `vcurve` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::input;
use crate::output;

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
    /// Place first-mistake labels on curves measured earlier (the paper's Table 2), from files.
    Labels(LabelsArgs),
    /// Benchmarks: measure a part of vcurve on this machine.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run a whole study on this machine: coordinator, embedded store and workers in one process.
    Demo(DemoArgs),
    /// Serve the coordinator: the adaptive schedule over a store, for workers and clients.
    Coordinator(CoordinatorArgs),
    /// Run continuations leased from a coordinator.
    Worker(WorkerArgs),
    /// Launch a study from a spec file; prints the study id.
    Launch(LaunchArgs),
    /// Show a study's progress.
    Status(StatusArgs),
    /// Write a study's curves and results into a folder.
    Export(ExportArgs),
    /// Write a study's report: one self-contained HTML file with every table and figure, and the
    /// tables as CSV beside it.
    Report(ReportArgs),
    /// Print every table of a study's analyses (labels, restart policies, localizers, checks,
    /// controls, stage costs).
    Analyses(AnalysesArgs),
    /// Stop handing out a study's work.
    Cancel(StudyArgs),
    /// List the coordinator's studies.
    Studies(StudiesArgs),
}

/// How to reach a coordinator as a client.
#[derive(Debug, clap::Args)]
pub struct Remote {
    /// The coordinator's URL.
    #[arg(long, env = "VCURVE_COORDINATOR", default_value = "http://127.0.0.1:7070")]
    pub coordinator: String,
    /// File holding the client bearer token [default: $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https:// coordinator.
    #[arg(long, env = "VCURVE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

impl Remote {
    pub fn connection(&self) -> anyhow::Result<crate::client::Connection> {
        Ok(crate::client::Connection {
            url: self.coordinator.clone(),
            token: crate::client::read_token(self.token_file.as_deref(), "VCURVE_CLIENT_TOKEN")?,
            tls_ca: self.tls_ca.clone(),
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for the exports, the study spec and the embedded store.
    #[arg(long, default_value = "vcurve-out")]
    pub out: PathBuf,
    /// In-process workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub slots: u32,
    /// Built-in synthetic trajectories to study.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub trajectories: u32,
    /// Simulated work per continuation, in milliseconds.
    #[arg(long, default_value_t = 2)]
    pub duration_ms: u64,
}

#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The store: postgres://USER:PASSWORD@HOST/DB, or sqlite://PATH for the embedded store.
    #[arg(long, env = "VCURVE_STORE", default_value = "sqlite://vcurve.sqlite")]
    pub store: String,
    /// Address to listen on. A non-loopback address requires both tokens.
    #[arg(long, env = "VCURVE_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// File holding the worker bearer token [default: $VCURVE_WORKER_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub worker_token_file: Option<PathBuf>,
    /// File holding the client bearer token [default: $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub client_token_file: Option<PathBuf>,
    /// PEM certificate chain: serve TLS (with --tls-key).
    #[arg(long, env = "VCURVE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "VCURVE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// A lease not extended by a heartbeat for this long expires and its key is re-issued.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(200..=86_400_000))]
    pub lease_timeout_ms: u64,
    /// How often workers heartbeat.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(50..=3_600_000))]
    pub heartbeat_ms: u64,
    /// Also serve the live dashboard (a read-only web page; client token required) here.
    #[arg(long, env = "VCURVE_DASHBOARD", value_name = "ADDR")]
    pub dashboard: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's URL.
    #[arg(long, env = "VCURVE_COORDINATOR", default_value = "http://127.0.0.1:7070")]
    pub coordinator: String,
    /// Continuations run at once.
    #[arg(long, env = "VCURVE_SLOTS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub slots: u32,
    /// The worker's name in progress reports [default: the host name].
    #[arg(long, env = "VCURVE_WORKER_NAME")]
    pub name: Option<String>,
    /// File holding the worker bearer token [default: $VCURVE_WORKER_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for an https:// coordinator.
    #[arg(long, env = "VCURVE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// On SIGTERM, let running continuations finish this long before releasing them.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace_s: u64,
}

#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// The study spec (YAML); curve files are read relative to it.
    pub spec: PathBuf,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, clap::Args)]
pub struct StudyArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Follow progress until the study ends (live bars; JSON lines with --json).
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The study id `vcurve launch` printed.
    pub study: String,
    #[command(flatten)]
    pub remote: Remote,
    /// Folder to write curves.csv, trajectories.csv and results.json into.
    #[arg(long)]
    pub out: PathBuf,
}

/// Where a study's results come from: a coordinator's export, or an export folder.
#[derive(Debug, clap::Args)]
pub struct StudySource {
    /// The study id `vcurve launch` printed (its export is fetched from the coordinator).
    #[arg(required_unless_present = "from")]
    pub study: Option<String>,
    /// Read an export folder (`vcurve export --out DIR`) instead.
    #[arg(long, value_name = "DIR", conflicts_with = "study")]
    pub from: Option<PathBuf>,
    #[command(flatten)]
    pub remote: Remote,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub source: StudySource,
    /// Folder to write report.html, the tables as CSV and figures/ into.
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct AnalysesArgs {
    #[command(flatten)]
    pub source: StudySource,
    /// Print the analyses as JSON (as analyses.json).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StudiesArgs {
    #[command(flatten)]
    pub remote: Remote,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run a schedule on synthetic curves with known truth and report its accuracy and cost.
    Schedule(BenchScheduleArgs),
    /// Measure lease-and-report throughput and latency through real gRPC and a real store.
    Dispatch(BenchDispatchArgs),
}

#[derive(Debug, clap::Args)]
pub struct BenchDispatchArgs {
    /// Virtual workers of one slot each (several runs: --workers 1,16,256).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1u32, 16, 256])]
    pub workers: Vec<u32>,
    /// Continuations to lease and report in each run.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub continuations: u64,
    /// The store: postgres://… (a database the bench may fill) or sqlite://PATH; a fresh
    /// temporary SQLite file by default.
    #[arg(long)]
    pub store: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// YAML file overriding the parameters of SPEC.md §8.
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct LabelsArgs {
    /// `vcurve export`'s trajectories.csv (an optional `task` column names each trajectory's task).
    #[arg(long, value_name = "TRAJECTORIES.csv")]
    pub trajectories: PathBuf,
    /// CSV with header `trajectory,source,step`: each source's first-mistake label, a 1-based
    /// step or `none`.
    #[arg(long, value_name = "LABELS.csv")]
    pub labels: PathBuf,
    /// `vcurve export`'s curves.csv: adds the probed drop at each label.
    #[arg(long, value_name = "CURVES.csv")]
    pub curves: Option<PathBuf>,
    /// A source pooled into the pooled row; repeat for several [default: every source].
    #[arg(long, value_name = "SOURCE")]
    pub pool: Vec<String>,
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
    if args.json {
        if args.schedule == "all" {
            output::println(serde_json::to_string_pretty(&reports)?)
        } else {
            output::println(serde_json::to_string_pretty(&reports[0])?)
        }
    } else {
        output::print(format!(
            "{}{} curves per family, seed {}, {:.1} s\n",
            crate::bench_schedule::table(&reports),
            args.per_family,
            args.seed,
            started.elapsed().as_secs_f64()
        ))
    }
}

fn run_analyze(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let params = input::read_thresholds(args.thresholds.as_deref())?;
    let points = input::read_points(&args.points, args.length)?;
    let base_runs = args.base_runs.as_deref().map(input::read_base_runs).transpose()?;
    let budget = args.budget.unwrap_or(params.budget);
    let report = vcurve_method::analyze(args.length, &points, base_runs.as_ref(), budget, &params)
        .map(crate::analyze::AnalyzeReport::from)
        .with_context(|| format!("{}", args.points.display()))?;
    output::println(serde_json::to_string_pretty(&report)?)
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "worker".into())
}

async fn run_async(command: Command) -> anyhow::Result<()> {
    use crate::commands;
    match command {
        Command::Demo(a) => {
            crate::demo::run(crate::demo::DemoArgs {
                out: a.out,
                workers: a.workers,
                slots: a.slots,
                trajectories: a.trajectories,
                duration_ms: a.duration_ms,
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            })
            .await?;
        }
        Command::Coordinator(a) => {
            let tokens = vcurve_coordinator::server::Tokens {
                worker: crate::client::read_token(a.worker_token_file.as_deref(), "VCURVE_WORKER_TOKEN")?,
                client: crate::client::read_token(a.client_token_file.as_deref(), "VCURVE_CLIENT_TOKEN")?,
            };
            commands::run_coordinator(commands::CoordinatorArgs {
                store: a.store,
                listen: a.listen,
                tokens,
                tls_cert: a.tls_cert,
                tls_key: a.tls_key,
                lease_timeout: std::time::Duration::from_millis(a.lease_timeout_ms),
                heartbeat_interval: std::time::Duration::from_millis(a.heartbeat_ms),
                dashboard: a.dashboard,
            })
            .await?;
        }
        Command::Worker(a) => {
            let mut config = vcurve_worker::WorkerConfig::new(a.coordinator);
            config.slots = a.slots;
            config.name = a.name.unwrap_or_else(host_name);
            config.token = crate::client::read_token(a.token_file.as_deref(), "VCURVE_WORKER_TOKEN")?;
            config.tls_ca = a.tls_ca;
            config.shutdown_grace = std::time::Duration::from_secs(a.shutdown_grace_s);
            commands::run_worker(config).await?;
        }
        Command::Launch(a) => output::println(commands::launch(&a.spec, &a.remote.connection()?).await?)?,
        Command::Status(a) => commands::status(&a.study, &a.remote.connection()?, a.json, a.watch).await?,
        Command::Export(a) => commands::export(&a.study, &a.remote.connection()?, &a.out).await?,
        Command::Cancel(a) => commands::cancel(&a.study, &a.remote.connection()?).await?,
        Command::Analyses(a) => commands::print_analyses(&a.source, a.json).await?,
        Command::Report(a) => {
            let path = commands::report(&a.source, &a.out).await?;
            output::println(path.display().to_string())?;
        }
        Command::Studies(a) => commands::studies(&a.remote.connection()?, a.json).await?,
        Command::Bench(BenchCommand::Dispatch(a)) => {
            output::println(format!(
                "{:<9} {:>7} {:>13} {:>8} {:>10} {:>9} {:>9}",
                "store", "workers", "continuations", "seconds", "per second", "p50 ms", "p99 ms"
            ))?;
            for &workers in &a.workers {
                let dir = tempfile::tempdir()?;
                let url = a
                    .store
                    .clone()
                    .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.sqlite").display()));
                let r = crate::bench_dispatch::run(&url, workers, a.continuations).await?;
                if a.json {
                    output::println(serde_json::to_string(&r)?)?;
                } else {
                    output::println(format!(
                        "{:<9} {:>7} {:>13} {:>8.2} {:>10.1} {:>9.2} {:>9.2}",
                        r.store,
                        r.workers,
                        r.continuations,
                        r.seconds,
                        r.per_second,
                        r.latency_p50_ms,
                        r.latency_p99_ms
                    ))?;
                }
            }
        }
        Command::Analyze(_) | Command::Labels(_) | Command::Bench(BenchCommand::Schedule(_)) => {
            unreachable!("synchronous commands")
        }
    }
    Ok(())
}

/// An error and its causes on one line, leaving out a cause whose text the message already holds
/// (many errors print their source in their own message too).
fn error_chain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        // A gRPC status reads better as its message and code than as tonic's Debug-like form.
        let text = match cause.downcast_ref::<tonic::Status>() {
            Some(status) => format!("{} ({:?})", status.message(), status.code()),
            None => cause.to_string(),
        };
        if parts.iter().any(|p| p.contains(&text)) {
            continue;
        }
        // A cause that repeats its context ("the coordinator at X" → "the coordinator at X speaks
        // TLS: …") says it better alone.
        match parts.last_mut() {
            Some(last) if text.contains(last.as_str()) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
}

/// Parse the command line, run it, and turn any error into a message on stderr and exit code 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(args) => run_analyze(&args),
        Command::Labels(args) => crate::labels_cmd::run(&args).map_err(anyhow::Error::from).and_then(output::print),
        Command::Bench(BenchCommand::Schedule(args)) => run_bench_schedule(&args),
        command => {
            let server = matches!(command, Command::Coordinator(_) | Command::Worker(_));
            crate::telemetry::init(if server { "info" } else { "warn" });
            tokio::runtime::Runtime::new()
                .context("cannot start the async runtime")
                .and_then(|rt| rt.block_on(run_async(command)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Output piped into a command that stopped reading (`vcurve analyses … | head`): only a
        // write to standard output counts, never a broken connection to the coordinator.
        Err(e) if output::is_stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vcurve: error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[test]
    fn an_error_reads_as_one_line_without_repeats() {
        let inner = anyhow::anyhow!("the coordinator at http://h:1 speaks TLS: use https:// and --tls-ca");
        let e = inner.context("the coordinator at http://h:1");
        assert_eq!(error_chain(&e), "the coordinator at http://h:1 speaks TLS: use https:// and --tls-ca");
        let e = anyhow::anyhow!("connection refused").context("cannot connect: connection refused").context("launch");
        assert_eq!(error_chain(&e), "launch: cannot connect: connection refused");
        let e = anyhow::Error::new(tonic::Status::not_found("no study x")).context("the coordinator at http://h:1");
        assert_eq!(error_chain(&e), "the coordinator at http://h:1: no study x (NotFound)");
    }
}
