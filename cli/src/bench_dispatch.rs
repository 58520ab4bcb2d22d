//! `vcurve bench dispatch`: how fast the coordinator hands out and takes back continuations,
//! through real gRPC and the real store, with workers that do no work at all.
//!
//! Each virtual worker holds one slot: it leases one job, reports it at once, and leases again.
//! The time a lease call takes after a report is the latency "from a free slot to its next job".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use vcurve_proto::v1;
use vcurve_proto::v1::worker_service_client::WorkerServiceClient;

use crate::client::{self, Connection};
use crate::output;
use vcurve_coordinator::core::Timing;
use vcurve_coordinator::store::{LeasePolicy, SqlStore};

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchReport {
    pub store: String,
    pub workers: u32,
    pub continuations: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    /// With `--pgbench`: the store's dispatch SQL alone in pgbench, `workers` clients, on the
    /// same server (continuations per second), and `per_second` over it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgbench_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_pgbench: Option<f64>,
    /// With `--pgbench`: a bare queue's claim and completion on the same table in pgbench
    /// (continuations per second): no claim order, joins or trajectory lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgbench_bare_per_second: Option<f64>,
}

/// A study big enough for `continuations`: trajectories of length 100 with a cliff at 50.
fn study_for(continuations: u64) -> (String, BTreeMap<String, String>) {
    let trajectories = continuations.div_ceil(150).max(1);
    let mut yaml = String::from("name: dispatch-bench\nseed: 1\nrunner: {kind: synthetic}\ntrajectories:\n");
    let mut files = BTreeMap::new();
    let curve: String = std::iter::once("t,v".to_string())
        .chain((0..100).map(|t| format!("{t},{}", if t < 50 { 0.6 } else { 0.0 })))
        .collect::<Vec<_>>()
        .join("\n");
    files.insert("curve.csv".to_string(), curve);
    for i in 0..trajectories {
        let _ = writeln!(yaml, "  - {{id: t{i:05}, length: 100, curve: curve.csv}}");
    }
    (yaml, files)
}

/// The report of a job that did no work, from worker `worker_id`: success before the bench
/// study's cliff at t = 50 on even seeds, failure otherwise.
pub(crate) fn zero_work_report(worker_id: &str, job: v1::Job) -> v1::ReportRequest {
    let key = job.key.clone().unwrap_or_default();
    v1::ReportRequest {
        worker_id: worker_id.to_string(),
        key: job.key,
        attempt: job.attempt,
        result: Some(v1::report_request::Result::Outcome(v1::Outcome {
            success: key.t < 50 && key.seed.is_multiple_of(2),
            steps: 1,
            end_type: v1::EndType::Submitted.into(),
            judged: v1::Judged::Evaluated.into(),
            patch_sha256: String::new(),
            recorded_digest: String::new(),
        })),
        duration_ms: 0,
    }
}

fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Run the benchmark against a fresh store at `store_url`.
pub async fn run(store_url: &str, workers: u32, continuations: u64) -> anyhow::Result<DispatchReport> {
    let store = SqlStore::connect(store_url)
        .await
        .with_context(|| format!("cannot open {}", crate::commands::redact_url(store_url)))?;
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 60_000 },
        heartbeat_interval: Duration::from_secs(20),
        max_lease_wait: Duration::from_millis(200),
    };
    let local = crate::demo::LocalCoordinator::serve(store, timing).await?;
    let (coordinator, url) = (local.coordinator.clone(), local.url.clone());
    let (yaml, files) = study_for(continuations);
    coordinator.launch(&yaml, &files).await?;

    let reported = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..workers {
        let channel = client::channel(&Connection { url: url.clone(), ..Default::default() }).await?;
        let reported = reported.clone();
        tasks.push(tokio::spawn(async move {
            let mut w = WorkerServiceClient::new(channel);
            let id = w
                .register(v1::RegisterRequest {
                    name: format!("bench-{i}"),
                    slots: 1,
                    capabilities: vec!["synthetic".into()],
                    protocol_version: vcurve_proto::PROTOCOL_VERSION.into(),
                    agents: vec![],
                    networks: vec![],
                    model_endpoints: vec![],
                })
                .await?
                .into_inner()
                .worker_id;
            let mut latencies = Vec::new();
            while reported.load(Ordering::Relaxed) < continuations {
                let asked = Instant::now();
                let jobs = w
                    .lease(v1::LeaseRequest { worker_id: id.clone(), max_jobs: 1, wait_ms: 200, ..Default::default() })
                    .await?
                    .into_inner()
                    .jobs;
                let Some(job) = jobs.into_iter().next() else { continue };
                latencies.push(asked.elapsed());
                w.report(zero_work_report(&id, job)).await?;
                reported.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let seconds = started.elapsed().as_secs_f64();
    local.shutdown().await?;
    latencies.sort();
    let done = reported.load(Ordering::Relaxed);
    Ok(DispatchReport {
        store: if store_url.starts_with("sqlite") { "sqlite".into() } else { "postgres".into() },
        workers,
        continuations: done,
        seconds,
        per_second: done as f64 / seconds,
        latency_p50_ms: quantile_ms(&latencies, 0.5),
        latency_p99_ms: quantile_ms(&latencies, 0.99),
        pgbench_per_second: None,
        ratio_to_pgbench: None,
        pgbench_bare_per_second: None,
    })
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
    /// Also run the store's own dispatch SQL in PostgreSQL's pgbench on the same server, one
    /// client per worker, and print both rates and their ratio (needs --store postgres://…).
    #[arg(long)]
    pub pgbench: bool,
    /// The pgbench binary (default: on PATH, else /usr/lib/postgresql/*/bin/pgbench).
    #[arg(long, value_name = "PATH", requires = "pgbench")]
    pub pgbench_path: Option<std::path::PathBuf>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `vcurve bench dispatch`.
pub async fn run_command(a: &BenchDispatchArgs) -> anyhow::Result<()> {
    let pgbench = if a.pgbench {
        // Before the gRPC run: a wrong --store fails at once.
        crate::bench_pgbench::require_postgres(a.store.as_deref())?;
        Some(crate::bench_pgbench::find_pgbench(a.pgbench_path.as_deref())?)
    } else {
        None
    };
    if !a.json {
        let mut header = format!(
            "{:<9} {:>7} {:>13} {:>8} {:>10} {:>9} {:>9}",
            "store", "workers", "continuations", "seconds", "per second", "p50 ms", "p99 ms"
        );
        if pgbench.is_some() {
            let _ = write!(header, " {:>11} {:>7} {:>9}", "pgbench /s", "ratio", "bare /s");
        }
        output::println(header)?;
    }
    for &workers in &a.workers {
        let dir = tempfile::tempdir()?;
        let url = a.store.clone().unwrap_or_else(|| format!("sqlite://{}", dir.path().join("bench.sqlite").display()));
        let mut r = run(&url, workers, a.continuations).await?;
        if let Some(pgbench) = &pgbench {
            use crate::bench_pgbench::Script;
            let rate = crate::bench_pgbench::run(&url, pgbench, Script::Store, workers, a.continuations).await?;
            r.pgbench_per_second = Some(rate.per_second);
            r.ratio_to_pgbench = (rate.per_second > 0.0).then(|| r.per_second / rate.per_second);
            let bare = crate::bench_pgbench::run(&url, pgbench, Script::Bare, workers, a.continuations).await?;
            r.pgbench_bare_per_second = Some(bare.per_second);
        }
        if a.json {
            output::println(serde_json::to_string(&r)?)?;
        } else {
            let mut line = format!(
                "{:<9} {:>7} {:>13} {:>8.2} {:>10.1} {:>9.2} {:>9.2}",
                r.store, r.workers, r.continuations, r.seconds, r.per_second, r.latency_p50_ms, r.latency_p99_ms
            );
            if let (Some(p), Some(ratio), Some(bare)) =
                (r.pgbench_per_second, r.ratio_to_pgbench, r.pgbench_bare_per_second)
            {
                let _ = write!(line, " {p:>11.1} {ratio:>7.3} {bare:>9.1}");
            }
            output::println(line)?;
        }
    }
    Ok(())
}
