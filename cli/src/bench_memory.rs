//! `vcurve bench memory`: whether the coordinator's memory stays flat as continuations finish,
//! what the store holds per continuation, and what an export costs.
//!
//! The real coordinator runs as a process of its own (this binary's `coordinator` subcommand, on
//! a fresh SQLite file or a PostgreSQL database). Virtual workers in this process drive it through
//! gRPC with zero-duration synthetic work: each leases several continuations per call and reports
//! them at once. When the numbers of finished continuations named by `--at` are reached, the
//! coordinator's `VmRSS` and `VmHWM` are read from `/proc/PID/status`, and the store's size. At the
//! last one the study is exported through the export RPC (as `vcurve export` does), timed, with the
//! coordinator's resident memory sampled every 20 ms meanwhile.

use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use vcurve_proto::v1;
use vcurve_proto::v1::worker_service_client::WorkerServiceClient;

use crate::client::{self, Connection};
use vcurve_coordinator::store::SqlStore;

#[derive(Debug, clap::Args)]
pub struct BenchMemoryArgs {
    /// Numbers of finished continuations at which to measure (ascending).
    #[arg(long, value_delimiter = ',', default_values_t = vec![10_000u64, 100_000, 1_000_000],
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub at: Vec<u64>,
    /// Virtual workers (each one gRPC connection).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub workers: u32,
    /// Slots per virtual worker: continuations leased per call.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub slots: u32,
    /// The store: postgres://… (a database the bench may fill; best an empty one, since its size
    /// is measured) or sqlite://PATH (a file that does not exist yet); a fresh temporary SQLite
    /// file by default.
    #[arg(long)]
    pub store: Option<String>,
    /// Only export: start the coordinator on an existing --store and measure the export of its
    /// newest study (e.g. the store of an earlier run, with another build).
    #[arg(long, requires = "store")]
    pub export_only: bool,
    /// Keep the export's files in this folder [default: a temporary one, removed afterwards].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One measurement while continuations finish.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPoint {
    /// Continuations finished (reports accepted).
    pub finished: u64,
    /// Seconds since the study was launched.
    pub seconds: f64,
    /// Continuations finished per second since the previous point.
    pub per_second: f64,
    pub vm_rss_bytes: u64,
    pub vm_hwm_bytes: u64,
    /// The store's size (SQLite: the database file and its WAL; PostgreSQL: the schema's tables
    /// with their indexes and TOAST).
    pub store_bytes: u64,
    pub store_bytes_per_continuation: f64,
    /// The store's growth since the previous point per continuation finished since then (since
    /// the launch for the first point).
    pub store_growth_per_continuation: f64,
}

/// The export at the last point.
#[derive(Debug, Clone, Serialize)]
pub struct ExportMeasure {
    pub finished: u64,
    pub seconds: f64,
    /// The files' total size.
    pub bytes: u64,
    pub files: usize,
    /// The coordinator's `VmRSS` just before the export.
    pub vm_rss_before_bytes: u64,
    /// The highest `VmRSS` sampled every 20 ms during the export.
    pub vm_rss_peak_bytes: u64,
    /// `VmHWM` after the export: the peak since it was reset before the export when the kernel
    /// allows (`hwm_reset`), else the process's peak since it started.
    pub vm_hwm_bytes: u64,
    pub hwm_reset: bool,
    /// The coordinator's `VmRSS` after the export.
    pub vm_rss_after_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub store: String,
    pub workers: u32,
    pub slots: u32,
    pub points: Vec<MemoryPoint>,
    pub export: ExportMeasure,
    pub wall_seconds: f64,
}

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
pub fn proc_memory(pid: u32) -> anyhow::Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line =
            status.lines().find_map(|l| l.strip_prefix(name)).with_context(|| format!("{path} has no {name} line"))?;
        let kb: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{path}: {name} {line:?} is not a size in kB"))?;
        Ok(kb * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Reset the peak resident size of `pid` (`VmHWM`); false when the kernel refuses.
fn reset_hwm(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// A study big enough for `continuations`: trajectories of length 100 with a cliff at 50, more
/// of them than the count needs (the bench stops at the count, the study need not finish).
fn write_study(dir: &Path, continuations: u64) -> anyhow::Result<PathBuf> {
    let trajectories = (continuations / 100).max(1) + 10;
    let mut yaml = String::from("name: memory-bench\nseed: 1\nrunner: {kind: synthetic}\ntrajectories:\n");
    for i in 0..trajectories {
        let _ = writeln!(yaml, "  - {{id: t{i:06}, length: 100, curve: curve.csv}}");
    }
    let curve: String = std::iter::once("t,v".to_string())
        .chain((0..100).map(|t| format!("{t},{}", if t < 50 { 0.6 } else { 0.0 })))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("curve.csv"), curve + "\n")?;
    let spec = dir.join("study.yaml");
    std::fs::write(&spec, yaml)?;
    Ok(spec)
}

/// The coordinator process.
struct Coordinator {
    child: std::process::Child,
    url: String,
}

impl Coordinator {
    fn start(store: &str, log: &Path) -> anyhow::Result<Coordinator> {
        let exe = std::env::current_exe().context("cannot find this program to start the coordinator")?;
        let mut child = std::process::Command::new(&exe)
            .args(["coordinator", "--listen", "127.0.0.1:0", "--store", store])
            .env("VCURVE_LOG", "warn")
            .env_remove("VCURVE_STORE_FILE")
            .env_remove("VCURVE_CLIENT_TOKEN")
            .env_remove("VCURVE_WORKER_TOKEN")
            .env_remove("VCURVE_DASHBOARD")
            .env_remove("VCURVE_METRICS")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} coordinator", exe.display()))?;
        let stderr = child.stderr.take().context("no stderr of the coordinator")?;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.strip_prefix("vcurve coordinator listening on ") {
                        break rest.split_whitespace().next().unwrap_or_default().to_string();
                    }
                    seen.push(line);
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("the coordinator exited before listening:\n{}", seen.join("\n"));
                }
            }
        };
        // Keep its log (warnings and errors) beside the bench's other files.
        let mut log = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        std::thread::spawn(move || {
            use std::io::Write as _;
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
            }
        });
        Ok(Coordinator { child, url: format!("http://{addr}") })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The store's size in bytes.
async fn store_size(url: &str, sqlite: Option<&Path>) -> anyhow::Result<u64> {
    if let Some(path) = sqlite {
        let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        return Ok(size(path.to_path_buf()) + size(PathBuf::from(wal)));
    }
    let store = SqlStore::connect(url)
        .await
        .with_context(|| format!("cannot connect to {}", crate::commands::redact_url(url)))?;
    let bytes = store.postgres_table_bytes().await;
    store.close().await;
    bytes.context("cannot measure the PostgreSQL tables' size")?.context("not a PostgreSQL store")
}

/// One virtual worker: lease up to `slots`, report each at once, until `stop`.
async fn drive(url: String, i: u32, slots: u32, finished: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let channel = client::channel(&Connection { url, ..Default::default() }).await?;
    let mut w = WorkerServiceClient::new(channel);
    let id = w
        .register(v1::RegisterRequest {
            name: format!("memory-bench-{i}"),
            slots,
            capabilities: vec!["synthetic".into()],
            protocol_version: vcurve_proto::PROTOCOL_VERSION.into(),
            agents: vec![],
            networks: vec![],
            model_endpoints: vec![],
        })
        .await?
        .into_inner()
        .worker_id;
    while !stop.load(Ordering::Relaxed) {
        let jobs = w
            .lease(v1::LeaseRequest { worker_id: id.clone(), max_jobs: slots, wait_ms: 200, ..Default::default() })
            .await?
            .into_inner()
            .jobs;
        for job in jobs {
            if stop.load(Ordering::Relaxed) {
                // Give the rest back unrun, so that what finished is exactly what was counted.
                break;
            }
            let accepted = w.report(crate::bench_dispatch::zero_work_report(&id, job)).await?.into_inner().accepted;
            if accepted {
                finished.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

const MB: f64 = 1024.0 * 1024.0;

/// Export `study` as `vcurve export` does (the export RPC, the files written into `out`), with
/// the coordinator's memory sampled meanwhile.
async fn measure_export(
    connection: &Connection,
    study: &str,
    pid: u32,
    out: &Path,
    finished: u64,
) -> anyhow::Result<ExportMeasure> {
    let (before, _) = proc_memory(pid)?;
    let hwm_reset = reset_hwm(pid);
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(Ordering::Relaxed) {
                if let Ok((rss, _)) = proc_memory(pid) {
                    peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let started = Instant::now();
    let mut client = client::study_client(connection).await?;
    let files = crate::commands::export_into(&mut client, study, out).await.context("the export")?;
    let mut bytes = 0;
    for file in &files {
        bytes += std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?.len();
    }
    let count = files.len();
    let seconds = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let sampled = sampler.await?;
    let (after, hwm) = proc_memory(pid)?;
    Ok(ExportMeasure {
        finished,
        seconds,
        bytes,
        files: count,
        vm_rss_before_bytes: before,
        vm_rss_peak_bytes: sampled.max(after),
        vm_hwm_bytes: hwm,
        hwm_reset,
        vm_rss_after_bytes: after,
    })
}

pub async fn run(args: &BenchMemoryArgs) -> anyhow::Result<MemoryReport> {
    let mut at = args.at.clone();
    if at.is_empty() || at.windows(2).any(|w| w[0] >= w[1]) {
        bail!("--at {at:?}: give ascending counts of finished continuations, e.g. --at 10000,100000,1000000");
    }
    let last = *at.last().expect("not empty");
    let dir = tempfile::tempdir()?;
    let (url, sqlite) = match &args.store {
        Some(url) if url.starts_with("sqlite:") => {
            let path = PathBuf::from(url.trim_start_matches("sqlite://").trim_start_matches("sqlite:"));
            if path.exists() && !args.export_only {
                bail!("--store {url}: {} exists; the bench needs a fresh store to measure", path.display());
            }
            (url.clone(), Some(path))
        }
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => (url.clone(), None),
        Some(url) => bail!("--store {url:?}: use postgres://… or sqlite://PATH"),
        None => {
            let path = dir.path().join("bench.sqlite");
            (format!("sqlite://{}", path.display()), Some(path))
        }
    };
    let export_dir = args.out.clone().unwrap_or_else(|| dir.path().join("export"));
    let wall = Instant::now();
    let coordinator = Coordinator::start(&url, &dir.path().join("coordinator.log"))?;
    let pid = coordinator.pid();
    let connection = Connection { url: coordinator.url.clone(), ..Default::default() };
    if args.export_only {
        let mut client = client::study_client(&connection).await?;
        let studies = client.list_studies(v1::ListStudiesRequest {}).await?.into_inner().studies;
        let Some(newest) = studies.first() else { bail!("--store {url}: the store holds no study to export") };
        eprintln!("memory bench: exporting study {} ({} finished)", newest.study, newest.done);
        let export = measure_export(&connection, &newest.study, pid, &export_dir, newest.done).await?;
        return Ok(MemoryReport {
            store: if sqlite.is_some() { "sqlite".into() } else { "postgres".into() },
            workers: 0,
            slots: 0,
            points: Vec::new(),
            export,
            wall_seconds: wall.elapsed().as_secs_f64(),
        });
    }
    let spec = write_study(dir.path(), last)?;
    let study = crate::commands::launch(&spec, &[], &connection).await?;
    eprintln!("memory bench: study {study} on {}, coordinator pid {pid}", crate::commands::redact_url(&url));

    let finished = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..args.workers {
        tasks.push(tokio::spawn(drive(coordinator.url.clone(), i, args.slots, finished.clone(), stop.clone())));
    }
    let started = Instant::now();
    let (mut points, mut last_report, mut previous) = (Vec::new(), Instant::now(), (0u64, 0.0f64));
    let mut previous_bytes = store_size(&url, sqlite.as_deref()).await?;
    at.reverse();
    while let Some(&target) = at.last() {
        if let Some(t) = tasks.iter().position(|t| t.is_finished()) {
            stop.store(true, Ordering::Relaxed);
            tasks.swap_remove(t).await?.context("a virtual worker failed")?;
            bail!("a virtual worker stopped early");
        }
        let done = finished.load(Ordering::Relaxed);
        if done >= target {
            at.pop();
            let seconds = started.elapsed().as_secs_f64();
            let (rss, hwm) = proc_memory(pid)?;
            let store_bytes = store_size(&url, sqlite.as_deref()).await?;
            let point = MemoryPoint {
                finished: done,
                seconds,
                per_second: (done - previous.0) as f64 / (seconds - previous.1).max(1e-9),
                vm_rss_bytes: rss,
                vm_hwm_bytes: hwm,
                store_bytes,
                store_bytes_per_continuation: store_bytes as f64 / done as f64,
                store_growth_per_continuation: (store_bytes as f64 - previous_bytes as f64)
                    / (done - previous.0).max(1) as f64,
            };
            previous_bytes = store_bytes;
            eprintln!(
                "memory bench: {} finished in {:.0} s: VmRSS {:.1} MB, VmHWM {:.1} MB, store {:.1} MB",
                done,
                seconds,
                rss as f64 / MB,
                hwm as f64 / MB,
                store_bytes as f64 / MB
            );
            previous = (done, seconds);
            points.push(point);
            continue;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            let rss = proc_memory(pid).map_or(0, |m| m.0);
            let seconds = started.elapsed().as_secs_f64();
            eprintln!(
                "memory bench: {done}/{last} finished ({:.0} s, {:.0}/s, VmRSS {:.1} MB)",
                seconds,
                done as f64 / seconds,
                rss as f64 / MB
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?.context("a virtual worker failed")?;
    }
    let finished = finished.load(Ordering::Relaxed);
    eprintln!("memory bench: exporting at {finished} finished");
    let export = measure_export(&connection, &study, pid, &export_dir, finished).await?;
    drop(coordinator);
    Ok(MemoryReport {
        store: if sqlite.is_some() { "sqlite".into() } else { "postgres".into() },
        workers: args.workers,
        slots: args.slots,
        points,
        export,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}

/// The report as a table.
pub fn table(r: &MemoryReport) -> String {
    let mut out = format!("store {}, {} virtual workers of {} slots\n", r.store, r.workers, r.slots);
    let _ = writeln!(
        out,
        "{:>10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>13} {:>13}",
        "finished", "seconds", "per second", "VmRSS MB", "VmHWM MB", "store MB", "store B/cont", "growth B/cont"
    );
    for p in &r.points {
        let _ = writeln!(
            out,
            "{:>10} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>13.1} {:>13.1}",
            p.finished,
            p.seconds,
            p.per_second,
            p.vm_rss_bytes as f64 / MB,
            p.vm_hwm_bytes as f64 / MB,
            p.store_bytes as f64 / MB,
            p.store_bytes_per_continuation,
            p.store_growth_per_continuation
        );
    }
    let e = &r.export;
    let _ = writeln!(
        out,
        "export at {} finished: {:.2} s, {} files, {:.2} MB; coordinator VmRSS {:.1} MB before, {:.1} MB peak \
         (sampled every 20 ms), {:.1} MB after; VmHWM {:.1} MB ({})",
        e.finished,
        e.seconds,
        e.files,
        e.bytes as f64 / MB,
        e.vm_rss_before_bytes as f64 / MB,
        e.vm_rss_peak_bytes as f64 / MB,
        e.vm_rss_after_bytes as f64 / MB,
        e.vm_hwm_bytes as f64 / MB,
        if e.hwm_reset { "peak during the export" } else { "peak since the coordinator started" }
    );
    let _ = writeln!(out, "wall-clock {:.1} s", r.wall_seconds);
    out
}

/// `vcurve bench memory`.
pub async fn run_command(args: &BenchMemoryArgs) -> anyhow::Result<()> {
    let report = run(args).await?;
    if args.json {
        crate::output::println(serde_json::to_string_pretty(&report)?)
    } else {
        crate::output::print(table(&report))
    }
}
