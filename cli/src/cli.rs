//! Argument parsing and dispatch for the `vcurve` binary.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::{commands, output};

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
    Analyze(commands::analyze::AnalyzeArgs),
    /// Import other agents' recorded runs as vcurve trajectories.
    #[command(subcommand)]
    Import(commands::import::ImportCommand),
    /// Summarize one trajectory: a mini-swe-agent `.traj.json` or an imported one.
    Inspect(commands::inspect::InspectArgs),
    /// Place first-mistake labels on curves measured earlier (the paper's Table 2), from files.
    Labels(commands::labels::LabelsArgs),
    /// Write the paper's diagnostic note of every curve (Appendix W) from files, as CSV.
    Notes(commands::notes::NotesArgs),
    /// Human annotation of a task-state study's gap atoms: sample them for two annotators, then
    /// score their labels (κ, shares of the gap mass by state).
    #[command(subcommand)]
    Annotate(commands::annotate::AnnotateCommand),
    /// Benchmarks: measure a part of vcurve on this machine.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run a whole study on this machine: coordinator, embedded store and workers in one process.
    Demo(crate::demo::DemoCommand),
    /// Serve the coordinator: the adaptive schedule over a store, for workers and clients.
    Coordinator(commands::coordinator::CoordinatorArgs),
    /// Run continuations leased from a coordinator.
    Worker(commands::worker::WorkerArgs),
    /// Launch a study from a spec file; prints the study id.
    Launch(commands::launch::LaunchArgs),
    /// Launch the online restart check of a study (the paper's Appendix Q): fresh runs with budget
    /// B − t_r for every trajectory with a restart point; prints the new study's id.
    RestartCheck(commands::restart_check::RestartCheckArgs),
    /// Show a study's progress.
    Status(commands::status::StatusArgs),
    /// Write a study's curves and results into a folder.
    Export(commands::export::ExportArgs),
    /// Write a study's report: one self-contained HTML file with every table and figure, and the
    /// tables as CSV beside it.
    Report(commands::report::ReportArgs),
    /// Print every table of a study's analyses (labels, restart policies, localizers, checks,
    /// controls, stage costs).
    Analyses(commands::analyses::AnalysesArgs),
    /// Stop handing out a study's work.
    Cancel(commands::cancel::StudyArgs),
    /// List the coordinator's studies.
    Studies(commands::studies::StudiesArgs),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run a schedule on synthetic curves with known truth and report its accuracy and cost.
    Schedule(crate::bench_schedule::BenchScheduleArgs),
    /// Measure lease-and-report throughput and latency through real gRPC and a real store.
    Dispatch(crate::bench_dispatch::BenchDispatchArgs),
    /// Measure the real-container path on this host's Docker Engine: start, exec, diff, commit,
    /// and a continuation's start from its nearest anchor against a replay from the task image.
    Containers(crate::bench_containers::BenchContainersArgs),
    /// Measure the coordinator's memory as continuations finish (at 10⁴, 10⁵, 10⁶ by default), the
    /// store's size per continuation, and an export's time and peak memory.
    Memory(crate::bench_memory::BenchMemoryArgs),
    /// Simulate a cluster in virtual time over the real store, admission and schedule: makespan
    /// against its lower bound, utilization, time to the first curve.
    Cluster(crate::bench_cluster::BenchClusterArgs),
}

async fn run_async(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(a) if a.task_state => {
            crate::demo_task_state::run(crate::demo_task_state::TaskStateDemoArgs {
                out: a.out,
                slots: a.slots.min(8),
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            })
            .await?;
        }
        Command::Demo(a) if a.docker => {
            crate::demo_docker::run(crate::demo_docker::DockerDemoArgs {
                out: a.out,
                slots: a.slots.min(4),
                base_runs: a.base_runs,
                paper_thresholds: a.paper_thresholds,
                progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            })
            .await?;
        }
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
        Command::Coordinator(a) => commands::coordinator::run(a).await?,
        Command::Worker(a) => commands::worker::run(a).await?,
        Command::Launch(a) => commands::launch::run(&a).await?,
        Command::RestartCheck(a) => commands::restart_check::run(&a).await?,
        Command::Status(a) => commands::status::run(&a).await?,
        Command::Export(a) => commands::export::run(&a).await?,
        Command::Cancel(a) => commands::cancel::run(&a).await?,
        Command::Analyses(a) => commands::analyses::run(&a).await?,
        Command::Report(a) => commands::report::run(&a).await?,
        Command::Studies(a) => commands::studies::run(&a).await?,
        Command::Bench(BenchCommand::Containers(a)) => crate::bench_containers::run_command(&a).await?,
        Command::Bench(BenchCommand::Memory(a)) => crate::bench_memory::run_command(&a).await?,
        Command::Bench(BenchCommand::Cluster(a)) => crate::bench_cluster::run_command(&a).await?,
        Command::Bench(BenchCommand::Dispatch(a)) => crate::bench_dispatch::run_command(&a).await?,
        Command::Analyze(_)
        | Command::Labels(_)
        | Command::Notes(_)
        | Command::Annotate(_)
        | Command::Import(_)
        | Command::Inspect(_)
        | Command::Bench(BenchCommand::Schedule(_)) => {
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
        Command::Analyze(args) => commands::analyze::run(&args),
        Command::Labels(args) => commands::labels::run(&args).map_err(anyhow::Error::from).and_then(output::print),
        Command::Notes(args) => commands::notes::run(&args).map_err(anyhow::Error::from).and_then(output::print),
        Command::Bench(BenchCommand::Schedule(args)) => crate::bench_schedule::run_command(&args),
        Command::Import(commands::import::ImportCommand::MiniSweAgent(args)) => commands::import::run(&args),
        Command::Inspect(args) => commands::inspect::run(&args),
        Command::Annotate(commands::annotate::AnnotateCommand::Sample(args)) => {
            commands::annotate::sample(&args).and_then(output::println)
        }
        Command::Annotate(commands::annotate::AnnotateCommand::Score(args)) => {
            commands::annotate::score(&args).and_then(output::print)
        }
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
