//! `vcurve demo`: a whole study on one machine — coordinator, embedded store and in-process
//! workers talking gRPC over loopback — on built-in synthetic trajectories whose true curves are
//! known, ending with the exports and a summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use vcurve_method::synthetic::{Family, SyntheticCurve};
use vcurve_proto::v1;

use crate::client::{self, Connection};
use crate::commands::{ProgressBars, export_into, write_files};
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::service::{Service, ServiceConfig, Stopped};
use vcurve_coordinator::store::{LeasePolicy, SqlStore};

/// The demo's options.
#[derive(Debug, Clone)]
pub struct DemoArgs {
    pub out: PathBuf,
    pub workers: u32,
    pub slots: u32,
    pub trajectories: u32,
    /// Simulated work per continuation.
    pub duration_ms: u64,
    /// Show progress bars (off in tests and when stderr is not a terminal).
    pub progress: bool,
}

/// One built-in trajectory: its spec entry, its curve file and its true decisive step.
struct DemoTrajectory {
    id: String,
    curve: SyntheticCurve,
    labels: Vec<(&'static str, Option<u32>)>,
    base_successes: u32,
}

fn demo_trajectories(count: u32) -> Vec<DemoTrajectory> {
    let families =
        [Family::PlateauCliff, Family::Cliff, Family::Erosion, Family::Cliff, Family::PlateauCliff, Family::Erosion];
    (0..count)
        .map(|i| {
            let family = families[i as usize % families.len()];
            let curve = SyntheticCurve::draw(family, 2026, u64::from(i));
            let (t_star, _) = curve.true_t_star();
            let length = curve.length();
            // Two judges: one points at the cause, one at a later symptom or nothing.
            let judge_a = Some(t_star.clamp(1, length));
            let judge_b = (i % 3 != 2).then(|| (t_star + 7 + i % 5).clamp(1, length));
            let base_successes = (curve.p0() * 8.0).round().clamp(2.0, 6.0) as u32;
            DemoTrajectory {
                id: format!("demo-{}-{}", family.as_str().replace('_', "-"), i + 1),
                curve,
                labels: vec![("judge-a", judge_a), ("judge-b", judge_b)],
                base_successes,
            }
        })
        .collect()
}

/// The demo study as a spec and its curve files.
fn demo_spec(trajectories: &[DemoTrajectory], duration_ms: u64) -> (String, BTreeMap<String, String>) {
    let mut yaml = String::new();
    let _ = writeln!(yaml, "name: demo\nseed: 7\nbudget: 100\nschedule: paper");
    let _ = writeln!(yaml, "runner: {{kind: synthetic, duration_ms: {duration_ms}, no_outcome_rate: 0.01}}");
    let _ = writeln!(yaml, "controls: {{sanity: 2, retest: 2, budget_control: 2}}");
    let _ = writeln!(yaml, "trajectories:");
    let mut files = BTreeMap::new();
    for tr in trajectories {
        let path = format!("curves/{}.csv", tr.id);
        let mut csv = String::from("t,v\n");
        for (t, v) in tr.curve.values[..tr.curve.length() as usize].iter().enumerate() {
            let _ = writeln!(csv, "{t},{v}");
        }
        files.insert(path.clone(), csv);
        let labels: Vec<String> = tr
            .labels
            .iter()
            .map(|(s, m)| format!("{s}: {}", m.map_or("none".to_string(), |m| m.to_string())))
            .collect();
        let base: Vec<String> = (0..8)
            .map(|k| {
                if k < tr.base_successes {
                    format!("{{success: true, steps: {}}}", 20 + 9 * k)
                } else {
                    "{success: false, steps: 100}".to_string()
                }
            })
            .collect();
        let _ = writeln!(yaml, "  - id: {}\n    length: {}\n    curve: {path}", tr.id, tr.curve.length());
        let _ = writeln!(yaml, "    labels: {{{}}}\n    base_runs: [{}]", labels.join(", "), base.join(", "));
    }
    // Successful runs the judges labelled too: a judge that restarts one forfeits a success.
    let _ = writeln!(yaml, "decoys:");
    for (i, tr) in trajectories.iter().take(3).enumerate() {
        let (a, b) = if i % 2 == 0 { ("12", "none") } else { ("none", "20") };
        let _ = writeln!(
            yaml,
            "  - {{id: {}-success, task: {}, length: 35, labels: {{judge-a: {a}, judge-b: {b}}}}}",
            tr.id, tr.id
        );
    }
    (yaml, files)
}

/// A coordinator in this process, serving gRPC on a loopback port to in-process workers and clients:
/// a demo's on a fresh embedded store `DIR/demo.sqlite`, or a benchmark's on any store. A
/// [`Service`] underneath: [`LocalCoordinator::shutdown`] stops it and closes the store.
pub struct LocalCoordinator {
    pub coordinator: Arc<Coordinator<SqlStore>>,
    pub url: String,
    service: Service,
}

impl LocalCoordinator {
    /// Start it on a fresh store in `out` (an earlier demo's store there is removed).
    pub async fn start(out: &Path, timing: Timing) -> anyhow::Result<LocalCoordinator> {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
        let db = out.join("demo.sqlite");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let store = SqlStore::connect(&format!("sqlite://{}", db.display())).await?;
        Self::serve(store, timing).await
    }

    /// Serve `store` on a loopback port (closed if it cannot be served).
    pub async fn serve(store: SqlStore, timing: Timing) -> anyhow::Result<LocalCoordinator> {
        let coordinator = Coordinator::new(store.clone(), timing, crate::render::ReportRenderer::shared());
        let service = match Service::start(coordinator.clone(), ServiceConfig::loopback()).await {
            Ok(service) => service,
            Err(e) => {
                store.close().await;
                return Err(e.into());
            }
        };
        Ok(LocalCoordinator { coordinator, url: service.grpc_url(), service })
    }

    /// A client of its study service.
    pub async fn client(&self) -> anyhow::Result<client::StudyClient> {
        let connection = Connection { url: self.url.clone(), ..Connection::default() };
        Ok(client::study_client(&connection).await?)
    }

    /// An in-process worker named `name` with `slots` and `runners`, until `stop` fires.
    pub fn spawn_worker(
        &self,
        name: String,
        slots: u32,
        runners: vcurve_worker::Runners,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<Result<vcurve_worker::WorkerSummary, vcurve_worker::WorkerError>> {
        let mut config = vcurve_worker::WorkerConfig::new(self.url.clone());
        config.slots = slots;
        config.name = name;
        config.lease_wait = Duration::from_millis(500);
        tokio::spawn(async move { vcurve_worker::run(config, runners, async move { stop.cancelled().await }).await })
    }

    /// Stop serving (after the workers, so that none of them talks to a server that is gone)
    /// and close the store.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        Ok(self.service.shutdown().await?)
    }

    /// Stop serving, keeping the store open for reads after it (closed by [`Stopped::close`] or
    /// [`Stopped::close_after`], or in the background when dropped).
    pub async fn stop_serving(self) -> Stopped {
        self.service.stop_serving().await
    }
}

/// Follow a study to its end, with progress bars when asked; returns its last progress.
pub async fn watch(client: &mut client::StudyClient, study: &str, bars: bool) -> anyhow::Result<Option<v1::Progress>> {
    let bars = bars.then(ProgressBars::new);
    let mut stream = client.watch_progress(v1::ProgressRequest { study: study.to_string() }).await?.into_inner();
    let mut last = None;
    while let Some(p) = stream.message().await? {
        if let Some(b) = &bars {
            b.update(&p);
        }
        let done = p.state != "running";
        last = Some(p);
        if done {
            break;
        }
    }
    if let Some(b) = &bars {
        b.finish();
    }
    Ok(last)
}

/// Run the demo; returns the summary table it printed.
pub async fn run(args: DemoArgs) -> anyhow::Result<String> {
    let started = Instant::now();
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(2),
        max_lease_wait: Duration::from_millis(500),
    };
    let local = LocalCoordinator::start(&args.out, timing).await?;
    let stop_workers = CancellationToken::new();

    let trajectories = demo_trajectories(args.trajectories);
    let (yaml, files) = demo_spec(&trajectories, args.duration_ms);
    std::fs::write(args.out.join("demo-study.yaml"), &yaml)?;
    write_files(
        &args.out.join("curves"),
        files.iter().map(|(k, v)| (k.trim_start_matches("curves/").to_string(), v.clone().into_bytes())),
    )?;
    let mut client = local.client().await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await?;

    let workers: Vec<_> = (0..args.workers)
        .map(|i| {
            let runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
            local.spawn_worker(format!("demo-worker-{}", i + 1), args.slots, runners, stop_workers.clone())
        })
        .collect();

    watch(&mut client, &study, args.progress).await?;
    let written = export_into(&mut client, &study, &args.out).await?;
    stop_workers.cancel();
    for w in workers {
        w.await??;
    }
    // Closed, the store's write-ahead log is in demo.sqlite, which alone is then the whole store.
    local.shutdown().await?;

    let table = summary(&args.out, &trajectories)?;
    let mut out = table.clone();
    let _ = writeln!(out, "\nstudy {study} finished in {:.1} s; wrote:", started.elapsed().as_secs_f64());
    for p in written {
        let _ = writeln!(out, "  {}", p.display());
    }
    crate::output::print(out)?;
    Ok(table)
}

/// A table of the exported trajectories beside their true decisive steps.
fn summary(out: &Path, trajectories: &[DemoTrajectory]) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(out.join("trajectories.csv"))?;
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers()?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect("export column");
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<26} {:>4} {:<8} {:>5} {:>4} {:>9} {:>6} {:>5} {:>5} {:>8} {:>6}",
        "trajectory", "T", "shape", "C", "t*", "(a, b]", "onset", "pnr", "cert", "restart", "runs"
    );
    for (row, tr) in reader.records().zip(trajectories) {
        let row = row?;
        let get = |name: &str| row.get(col(name)).unwrap_or("").to_string();
        let c = get("concentration").parse::<f64>().map_or(String::from("–"), |c| format!("{c:.2}"));
        let _ = writeln!(
            table,
            "{:<26} {:>4} {:<8} {:>5} {:>4} {:>9} {:>6} {:>5} {:>5} {:>8} {:>6}   true t* {}",
            get("trajectory"),
            get("length"),
            get("shape"),
            c,
            get("t_star"),
            format!("({}, {}]", get("decisive_a"), get("decisive_b")),
            get("onset"),
            get("pnr"),
            get("pnr_certified"),
            get("restart_point"),
            get("continuations"),
            tr.curve.true_t_star().0,
        );
    }
    Ok(table)
}

#[derive(Debug, clap::Args)]
pub struct DemoCommand {
    /// Folder for the exports, the study spec and the embedded store.
    #[arg(long, default_value = "vcurve-out")]
    pub out: PathBuf,
    /// In-process workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Slots per worker (with --docker: one worker, at most 4 slots).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub slots: u32,
    /// Built-in synthetic trajectories to study.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub trajectories: u32,
    /// Simulated work per continuation, in milliseconds.
    #[arg(long, default_value_t = 2)]
    pub duration_ms: u64,
    /// The real-container demo instead: the scripted known-truth agent on two variants of the test
    /// task in Docker (base runs, selection, replay and back-fill, snapshots, continuations,
    /// evaluation, checks, the online restart check); builds the images when missing.
    #[arg(long)]
    pub docker: bool,
    /// With --docker: base runs of each of the two tasks (the test task and its variant).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub base_runs: u32,
    /// With --docker: the paper's thresholds instead of the reduced ones.
    #[arg(long)]
    pub paper_thresholds: bool,
    /// The task-state study instead (CTXGAP, docs/task-state.md): the scripted agent's four-turn
    /// sessions on two variants of the test task in Docker, the model stages on the deterministic
    /// model server shipped with the tests; prints each view's accuracy measured beside its known
    /// truth and writes truth.json beside the export.
    #[arg(long, conflicts_with = "docker")]
    pub task_state: bool,
}
