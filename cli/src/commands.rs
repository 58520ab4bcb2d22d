//! The networked commands of the `vcurve` binary: coordinator, worker, launch, status, export,
//! cancel, studies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use vcurve_proto::v1;

use crate::client::Remote;
use crate::client::{self, Connection};
use crate::output;
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::server::{self, ServeOptions, Tokens};
use vcurve_coordinator::spec;
use vcurve_coordinator::store::{LeasePolicy, SqlStore};

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What `vcurve coordinator` needs.
#[derive(Debug, Clone)]
pub struct CoordinatorSettings {
    pub store: String,
    pub listen: String,
    pub tokens: Tokens,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub lease_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Where to serve the live dashboard, if anywhere.
    pub dashboard: Option<String>,
    /// Where to serve the Prometheus endpoint `/metrics`, if anywhere.
    pub metrics: Option<String>,
}

pub async fn run_coordinator(args: CoordinatorSettings) -> anyhow::Result<()> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(read_tls_files(cert, key)?),
        (None, None) => None,
        _ => bail!("--tls-cert and --tls-key go together"),
    };
    if args.heartbeat_interval >= args.lease_timeout {
        bail!(
            "--heartbeat-ms ({} ms) must be shorter than --lease-timeout-ms ({} ms), or every lease expires between heartbeats",
            args.heartbeat_interval.as_millis(),
            args.lease_timeout.as_millis()
        );
    }
    let store = SqlStore::connect(&args.store)
        .await
        .with_context(|| format!("cannot open the store {}", redact_url(&args.store)))?;
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: args.lease_timeout.as_millis() as i64 },
        heartbeat_interval: args.heartbeat_interval,
        ..Timing::default()
    };
    let coordinator = Coordinator::new(store.clone(), timing, crate::render::ReportRenderer::shared());
    let has_client_token = args.tokens.client.is_some();
    let config = vcurve_coordinator::service::ServiceConfig {
        grpc: args.listen.clone(),
        serve: ServeOptions { tokens: args.tokens, tls },
        dashboard: args.dashboard.clone(),
        metrics: args.metrics.clone(),
    };
    let service = match vcurve_coordinator::service::Service::start(coordinator, config).await {
        Ok(service) => service,
        Err(e) => {
            store.close().await;
            return Err(e.into());
        }
    };
    eprintln!("vcurve coordinator listening on {} (store {})", service.grpc_addr(), redact_url(&args.store));
    if let Some(local) = service.dashboard_addr() {
        eprintln!("vcurve dashboard on http://{local}/{}", if has_client_token { "?token=…" } else { "" });
    }
    if let Some(local) = service.metrics_addr() {
        eprintln!("vcurve metrics on http://{local}/metrics");
    }
    tokio::select! {
        () = shutdown_signal() => {}
        () = service.stopping() => {}
    }
    // Every listener stopped and the store closed, whatever stopped them, so SQLite's write-ahead
    // log is in the file.
    service.shutdown().await?;
    Ok(())
}

/// Bind `--metrics ADDR`; a non-loopback address needs a token (the `role`'s) to scrape with.
async fn metrics_listener(addr: &str, has_token: bool, role: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot serve metrics on {addr}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() && !has_token {
        bail!("refusing to serve metrics on {local} without a {role} token");
    }
    eprintln!("vcurve metrics on http://{local}/metrics");
    Ok(listener)
}

/// Read `--tls-cert` and `--tls-key` and check that they can be served, before the store is opened
/// or anything listens; the error names the file at fault.
fn read_tls_files(cert: &Path, key: &Path) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let cert_pem = crate::input::read_small_file(cert).with_context(|| format!("--tls-cert {}", cert.display()))?;
    let key_pem = crate::input::read_small_file(key).with_context(|| format!("--tls-key {}", key.display()))?;
    if let Err(e) = server::check_tls(&cert_pem, &key_pem) {
        let files = match e.file() {
            server::TlsFile::Certificate => format!("--tls-cert {}", cert.display()),
            server::TlsFile::Key => format!("--tls-key {}", key.display()),
            server::TlsFile::Both => format!("--tls-cert {} and --tls-key {}", cert.display(), key.display()),
        };
        bail!("{files}: {e}");
    }
    Ok((cert_pem, key_pem))
}

/// Where the password of a URL's user info is (`scheme://user:PASSWORD@host…`), as a byte range.
fn password_span(url: &str) -> Option<std::ops::Range<usize>> {
    let scheme = url.find("://")?;
    let at = url.rfind('@').filter(|&at| at > scheme)?;
    let colon = url[scheme + 3..at].find(':')? + scheme + 3;
    Some(colon + 1..at)
}

/// `url` without the password of its user info, and that password percent-decoded: for handing a
/// database URL to a child process, with the password in its environment (`PGPASSWORD`), not on
/// a command line other users can read.
pub fn split_password(url: &str) -> (String, Option<String>) {
    match password_span(url) {
        Some(span) => {
            let password = percent_encoding::percent_decode_str(&url[span.clone()]).decode_utf8_lossy().into_owned();
            (format!("{}{}", &url[..span.start - 1], &url[span.end..]), Some(password))
        }
        None => (url.to_string(), None),
    }
}

/// A store URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match password_span(url) {
        Some(span) => format!("{}***{}", &url[..span.start], &url[span.end..]),
        None => url.to_string(),
    }
}

/// `vcurve worker --metrics ADDR`, and the token a scrape must present (`--client-token-file`).
#[derive(Clone)]
pub struct WorkerMetricsSettings {
    pub addr: String,
    pub token: Option<String>,
}

pub async fn run_worker(
    config: vcurve_worker::WorkerConfig,
    offer: WorkerRunners,
    metrics_at: Option<WorkerMetricsSettings>,
) -> anyhow::Result<()> {
    let stop_metrics = tokio_util::sync::CancellationToken::new();
    let (metrics, metrics_task) = match metrics_at {
        Some(at) => {
            let listener = metrics_listener(&at.addr, at.token.is_some(), "client").await?;
            if !listener.local_addr()?.ip().is_loopback() && at.token.is_some() && at.token == config.token {
                bail!(
                    "refusing to serve metrics with the worker token: a scraper could act as a worker; give it its own"
                );
            }
            let metrics = Arc::new(vcurve_worker::metrics::WorkerMetrics::new());
            let stop = stop_metrics.clone();
            let task = tokio::spawn(vcurve_worker::metrics::serve(metrics.clone(), listener, at.token, async move {
                stop.cancelled().await
            }));
            (Some(metrics), Some(task))
        }
        None => (None, None),
    };
    let mut runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
    let located =
        vcurve_worker::MiniSweAgent::locate(offer.mini_swe_agent_python.as_deref(), offer.agents_dir.as_deref());
    match offer.docker {
        Some(budget_gb) => {
            let registry = offer.snapshot_registry.clone();
            let agent = agent_runner(&config.name, budget_gb, registry, metrics.as_ref()).await?;
            agent.use_swebench(swebench_harness(&offer).await?);
            match located.map_err(|e| anyhow::anyhow!("--mini-swe-agent-python: {e}"))? {
                Some(adapter) => {
                    let interpreter =
                        adapter.check().await.map_err(|e| anyhow::anyhow!("--mini-swe-agent-python: {e}"))?;
                    tracing::info!(python = %adapter.python.display(), "offering the mini-swe-agent runner");
                    runners.insert(std::sync::Arc::new(agent.mini_swe_agent(adapter.command(), interpreter)));
                }
                None => tracing::info!(
                    "not offering the mini-swe-agent runner: no {} (make it with scripts/mini-swe-agent-venv, \
                     or name one with --mini-swe-agent-python)",
                    vcurve_worker::mini_swe_agent::DEFAULT_PYTHON
                ),
            }
            runners.insert(std::sync::Arc::new(agent));
        }
        None if offer.snapshot_registry.is_some() => {
            bail!("--snapshot-registry needs --docker: snapshots are container images")
        }
        None if offer.mini_swe_agent_python.is_some() => {
            bail!("--mini-swe-agent-python needs --docker: the mini-swe-agent runner runs agents in containers")
        }
        None if offer.swebench_python.is_some() => {
            bail!("--swebench-python needs --docker: the SWE-bench harness judges patches in containers")
        }
        None => {}
    }
    let summary = vcurve_worker::run_with_metrics(config, runners, metrics, shutdown_signal()).await;
    stop_metrics.cancel();
    if let Some(task) = metrics_task {
        task.await??;
    }
    eprintln!("vcurve worker stopped: {:?}", summary?);
    Ok(())
}

/// The SWE-bench harness a worker judges `swebench` tasks with: `--swebench-python` (checked:
/// an error when it cannot run the harness), or the default environment when it exists
/// (checked the same way); without either, SWE-bench tasks are not judged here (each such
/// evaluation is a no-outcome naming scripts/swebench-venv).
async fn swebench_harness(offer: &WorkerRunners) -> anyhow::Result<vcurve_worker::evaluate::SwebenchHarness> {
    use vcurve_worker::evaluate::swebench::{DEFAULT_AGENTS_DIR, DEFAULT_PYTHON};
    let agents = offer.agents_dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_AGENTS_DIR));
    let python = offer.swebench_python.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_PYTHON));
    let harness = vcurve_worker::evaluate::SwebenchHarness::new(&python, &agents);
    if offer.swebench_python.is_none() && !python.exists() {
        tracing::info!(
            "SWE-bench tasks are not judged on this worker: no {DEFAULT_PYTHON} (make it with scripts/swebench-venv, \
             or name one with --swebench-python)"
        );
        return Ok(harness);
    }
    harness.check().await.map_err(|e| anyhow::anyhow!("--swebench-python: {e}"))?;
    tracing::info!(python = %harness.python.display(), "judging SWE-bench tasks with the harness");
    Ok(harness)
}

/// The `agent` runner on this host's Docker Engine, for the worker `name`: reaps what a previous
/// run of the worker left behind and opens the snapshot cache (sharing snapshots through
/// `snapshot_registry`, `HOST:PORT`, when given). With `metrics`, its container operations are
/// timed and its snapshot cache's disk and counts are read at every scrape.
pub async fn agent_runner(
    name: &str,
    budget_gb: f64,
    snapshot_registry: Option<String>,
    metrics: Option<&Arc<vcurve_worker::metrics::WorkerMetrics>>,
) -> anyhow::Result<vcurve_worker::AgentProcessRunner> {
    use vcurve_worker::metrics::{MeteredRuntime, SnapshotUsage};
    let runtime = vcurve_worker::container::docker::DockerRuntime::connect()
        .await
        .context("--docker: cannot reach the Docker Engine")?;
    let mut runtime: Arc<dyn vcurve_worker::container::ContainerRuntime> = Arc::new(runtime);
    if let Some(m) = metrics {
        runtime = Arc::new(MeteredRuntime::new(runtime, m.clone()));
    }
    let budget = (budget_gb * f64::from(1u32 << 30)) as u64;
    let agent = vcurve_worker::AgentProcessRunner::start_with_registry(runtime, name, budget, snapshot_registry)
        .await
        .context("--docker: cannot start the agent runner")?;
    if let Some(m) = metrics {
        let cache = agent.clone();
        m.watch_snapshots(move || SnapshotUsage {
            bytes: cache.snapshot_bytes(),
            snapshots: cache.held_snapshots().len() as u64,
            budget_bytes: budget,
        });
        let counts = agent.clone();
        m.watch_snapshot_stats(move || counts.snapshot_stats());
    }
    Ok(agent)
}

/// Context for an error of a call to the coordinator: names it.
fn at(connection: &Connection) -> impl Fn() -> String + '_ {
    move || format!("the coordinator at {}", connection.url)
}

pub async fn launch(spec_path: &Path, connection: &Connection) -> anyhow::Result<String> {
    // Validate locally first: a bad spec is reported with its file's path, before any network. A
    // restart check is completed on the coordinator, from the study it checks.
    let (yaml, files) = spec::read_with_files(spec_path)?;
    spec::parse_request(&yaml, &|p| files.get(p).cloned()).with_context(|| format!("{}", spec_path.display()))?;
    let mut client = client::study_client(connection).await?;
    client::upload_and_launch(&mut client, yaml, &files).await.with_context(at(connection))
}

fn progress_json(p: &v1::Progress) -> serde_json::Value {
    serde_json::json!({
        "study": p.study,
        "name": p.name,
        "state": p.state,
        "done": p.done,
        "running": p.running,
        "pending": p.pending,
        "retired": p.retired,
        "trajectories": p.trajectories,
        "trajectories_admitted": p.trajectories_admitted,
        "trajectories_done": p.trajectories_done,
        "stages": p.stages.iter().map(|s| (s.stage.clone(), s.trajectories)).collect::<std::collections::BTreeMap<_, _>>(),
        "workers": p.workers.iter().map(|w| serde_json::json!({
            "id": w.worker_id, "name": w.name, "slots": w.slots, "running": w.running, "last_seen_ms_ago": w.last_seen_ms_ago,
        })).collect::<Vec<_>>(),
        "throughput_per_min": p.throughput_per_min,
        "trajectories_non_replayable": p.trajectories_non_replayable,
        "waiting_for_runner": (!p.waiting_for_runner.is_empty()).then_some(&p.waiting_for_runner),
        "lease_latency_ms": (p.leases_measured > 0).then(|| serde_json::json!({
            "p50": p.lease_p50_ms, "p99": p.lease_p99_ms, "leases": p.leases_measured,
        })),
        "eta_seconds": (p.eta_seconds >= 0.0).then_some(p.eta_seconds),
        "evaluation": p.evaluation.as_ref().map(|e| serde_json::json!({
            "evaluated_runs": e.evaluated_runs, "cache_hits": e.cache_hits, "unique_patches": e.unique_patches,
            "evaluations": e.evaluations, "flake_checks": e.flake_checks, "flakes": e.flakes,
        })),
    })
}

/// The patch cache's line of a study's progress; empty for a runner that judges no patch.
fn evaluation_text(p: &v1::Progress) -> String {
    let Some(e) = &p.evaluation else { return String::new() };
    let flakes = if e.flake_checks > 0 {
        format!("{} flakes in {} flake checks", e.flakes, e.flake_checks)
    } else {
        "flake rate not measured yet (no flake check)".to_string()
    };
    format!(
        "  patches: {} evaluations, {} runs judged by the cache, {} unique patches; {flakes}\n",
        e.evaluations, e.cache_hits, e.unique_patches
    )
}

fn eta(p: &v1::Progress) -> String {
    if p.eta_seconds < 0.0 {
        return "unknown".into();
    }
    let s = p.eta_seconds.round() as u64;
    format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
}

fn progress_text(p: &v1::Progress) -> String {
    let stages: Vec<String> = p.stages.iter().map(|s| format!("{} {}", s.stage, s.trajectories)).collect();
    let slots: u32 = p.workers.iter().map(|w| w.slots).sum();
    let latency = if p.leases_measured > 0 {
        format!(
            "lease latency p50 {:.1} ms, p99 {:.1} ms ({} leases)",
            p.lease_p50_ms, p.lease_p99_ms, p.leases_measured
        )
    } else {
        "lease latency not measured (no lease handed out work in the last 5 minutes)".to_string()
    };
    let waiting = if p.waiting_for_runner.is_empty() {
        String::new()
    } else {
        format!("  waiting for a worker offering `{}`: no live worker offers it\n", p.waiting_for_runner)
    };
    let dropped = if p.trajectories_non_replayable > 0 {
        format!(", {} non-replayable", p.trajectories_non_replayable)
    } else {
        String::new()
    };
    format!(
        "study {} ({}): {}\n{waiting}  trajectories: {} done, {} admitted, {} in all{dropped}; in progress by stage: {}\n  continuations: {} done, {} running, {} pending, {} retired\n{}  workers: {} with {} slots; throughput {:.1}/min; ETA {}; {latency}\n",
        p.name,
        p.study,
        p.state,
        p.trajectories_done,
        p.trajectories_admitted,
        p.trajectories,
        if stages.is_empty() { "none".to_string() } else { stages.join(", ") },
        p.done,
        p.running,
        p.pending,
        p.retired,
        evaluation_text(p),
        p.workers.len(),
        slots,
        p.throughput_per_min,
        eta(p)
    )
}

/// Bars for `status --watch` and `demo`: trajectories finished and continuations done.
pub struct ProgressBars {
    trajectories: ProgressBar,
    continuations: ProgressBar,
}

impl ProgressBars {
    pub fn new() -> Self {
        let multi = MultiProgress::new();
        let style = ProgressStyle::with_template("{prefix:>14} [{bar:40.cyan/blue}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> ");
        let trajectories = multi.add(ProgressBar::new(0).with_style(style.clone()).with_prefix("trajectories"));
        let continuations = multi.add(ProgressBar::new(0).with_style(style).with_prefix("continuations"));
        ProgressBars { trajectories, continuations }
    }

    pub fn update(&self, p: &v1::Progress) {
        self.trajectories.set_length(u64::from(p.trajectories));
        self.trajectories.set_position(u64::from(p.trajectories_done));
        let stages: Vec<String> = p.stages.iter().map(|s| format!("{} {}", s.stage, s.trajectories)).collect();
        self.trajectories.set_message(stages.join(", "));
        self.continuations.set_length(p.done + p.running + p.pending + p.retired);
        self.continuations.set_position(p.done + p.retired);
        self.continuations.set_message(format!(
            "{} running, {:.0}/min, ETA {}",
            p.running,
            p.throughput_per_min,
            eta(p)
        ));
    }

    pub fn finish(&self) {
        self.trajectories.finish();
        self.continuations.finish();
    }
}

impl Default for ProgressBars {
    fn default() -> Self {
        ProgressBars::new()
    }
}

pub async fn status(study: &str, connection: &Connection, json: bool, watch: bool) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let request = v1::ProgressRequest { study: study.to_string() };
    if !watch {
        let p = client.get_progress(request).await.with_context(at(connection))?.into_inner();
        let checks = checks_of(&mut client, &p).await.with_context(at(connection))?;
        return if json {
            let mut value = progress_json(&p);
            value["checks"] = checks.unwrap_or(serde_json::Value::Null);
            output::println(serde_json::to_string_pretty(&value)?)
        } else {
            output::print(progress_text(&p) + &checks.map(|c| checks_text(&c)).unwrap_or_default())
        };
    }
    let mut stream = client.watch_progress(request).await.with_context(at(connection))?.into_inner();
    let bars = (!json).then(ProgressBars::new);
    let mut last = None;
    while let Some(p) = stream.message().await.with_context(at(connection))? {
        match &bars {
            Some(b) => b.update(&p),
            None => output::println(serde_json::to_string(&progress_json(&p))?)?,
        }
        last = Some(p);
    }
    if let (Some(b), Some(p)) = (&bars, &last) {
        b.finish();
        let checks = checks_of(&mut client, p).await.with_context(at(connection))?;
        output::print(progress_text(p) + &checks.map(|c| checks_text(&c)).unwrap_or_default())?;
    }
    Ok(())
}

/// A finished study's checks before any claim (Table 4, from its export's `analyses.json`);
/// `None` while it runs (the checks are of the whole study) and for a study without analyses (a
/// restart check).
async fn checks_of(client: &mut client::StudyClient, p: &v1::Progress) -> anyhow::Result<Option<serde_json::Value>> {
    if p.state == "running" {
        return Ok(None);
    }
    let files = client::export(client, &p.study).await?;
    let Some((_, analyses)) = files.into_iter().find(|(name, _)| name == "analyses.json") else { return Ok(None) };
    let analyses: serde_json::Value =
        serde_json::from_slice(&analyses).context("the export's analyses.json is not JSON")?;
    Ok(Some(analyses["checks"].clone()))
}

/// Table 4 as text: each check, its criterion, its value ("not measured" when it has none) and
/// whether it passes, then the verdict.
pub fn checks_text(checks: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("\nchecks before any claim (Table 4):\n");
    for c in checks["checks"].as_array().into_iter().flatten() {
        let status = match c["status"].as_str().unwrap_or("") {
            "fail" => "FAIL",
            "not_measured" => "not measured",
            other => other,
        };
        let _ = writeln!(
            text,
            "  {:<36} {:<34} {:<28} {status}",
            c["check"].as_str().unwrap_or(""),
            c["criterion"].as_str().unwrap_or(""),
            c["value"].as_str().unwrap_or("not measured"),
        );
    }
    let verdict = checks["verdict"].as_str().unwrap_or("not measured");
    let _ = writeln!(
        text,
        "  verdict: {verdict}{}",
        if verdict == "fail" { " — the analyses are exported, marked as not passing the checks" } else { "" }
    );
    text
}

/// Where the export file `name` goes under `out`, its folder made; a name that would leave `out`
/// (empty, absolute, `..`) is refused.
fn export_path(out: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let relative = Path::new(name);
    if name.is_empty()
        || relative.is_absolute()
        || relative.components().any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        bail!("refusing to write a file named {name:?} outside {}", out.display());
    }
    let path = out.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    Ok(path)
}

/// Write an export's files into `out`.
pub fn write_files(out: &Path, files: impl IntoIterator<Item = (String, Vec<u8>)>) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = export_path(out, &name)?;
        std::fs::write(&path, contents).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Write a study's export into `out` piece by piece as the coordinator sends it, never holding a
/// file whole; returns the files written. Each file is written as `.NAME.part` beside its place
/// and renamed once its last piece has come, so a transfer that breaks leaves no file that looks
/// whole (the error says so).
pub async fn export_into(client: &mut client::StudyClient, study: &str, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use std::io::Write as _;
    /// The file being written: its name in the export, its place, its `.part` file.
    struct Open {
        name: String,
        path: PathBuf,
        part: PathBuf,
        file: std::io::BufWriter<std::fs::File>,
    }
    fn close(open: Open) -> anyhow::Result<PathBuf> {
        let Open { path, part, file, .. } = open;
        file.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&part, &path))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut stream = client.export_files(v1::ExportRequest { study: study.to_string() }).await?.into_inner();
    let mut written = Vec::new();
    let mut open: Option<Open> = None;
    loop {
        let chunk = match stream.message().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(status) => {
                let broken = open.take().map(|o| {
                    let _ = std::fs::remove_file(&o.part);
                    o.name
                });
                return Err(anyhow::Error::new(status).context(match broken {
                    Some(name) => {
                        format!("the export broke off while sending {name} ({} files written whole)", written.len())
                    }
                    None => format!("the export broke off ({} files written whole)", written.len()),
                }));
            }
        };
        if open.as_ref().is_none_or(|o| o.name != chunk.name) {
            if let Some(o) = open.take() {
                written.push(close(o)?);
            }
            let path = export_path(out, &chunk.name)?;
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let part = path.with_file_name(format!(".{file_name}.part"));
            let file = std::fs::File::create(&part).with_context(|| format!("cannot write {}", part.display()))?;
            open = Some(Open { name: chunk.name, path, part, file: std::io::BufWriter::new(file) });
        }
        let o = open.as_mut().expect("a file is open");
        o.file.write_all(&chunk.data).with_context(|| format!("cannot write {}", o.part.display()))?;
    }
    if let Some(o) = open.take() {
        written.push(close(o)?);
    }
    Ok(written)
}

pub async fn export(study: &str, connection: &Connection, out: &Path) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let mut listing = String::new();
    for path in export_into(&mut client, study, out).await.with_context(at(connection))? {
        listing.push_str(&format!("{}\n", path.display()));
    }
    output::print(listing)
}

/// What a report is built from: a study's results and analyses, and its online restart check
/// when its export holds one (`restart_check.json`).
type ReportInputs = (
    vcurve_report::export::Results,
    vcurve_report::analyses::StudyAnalyses,
    Option<vcurve_report::restart_check::RestartCheckResults>,
);

/// A study's results and analyses (and restart check): from a coordinator's export of `study`, or
/// from an export folder.
async fn results_and_analyses(source: &StudySource) -> anyhow::Result<ReportInputs> {
    Ok(match (source.study.as_deref(), source.from.as_deref()) {
        (_, Some(dir)) => {
            let read = |name: &str| {
                let path = dir.join(name);
                crate::input::read_export_json(&path).with_context(|| format!("cannot read {}", path.display()))
            };
            let results: vcurve_report::export::Results = serde_json::from_slice(&read("results.json")?)
                .with_context(|| format!("{}/results.json is not a vcurve export", dir.display()))?;
            let analyses = match read("analyses.json") {
                Ok(bytes) => serde_json::from_slice(&bytes)
                    .with_context(|| format!("{}/analyses.json is not a vcurve export", dir.display()))?,
                Err(_) => vcurve_report::analyses::analyses(&results)?,
            };
            let check = match dir.join("restart_check.json").exists() {
                true => Some(
                    serde_json::from_slice(&read("restart_check.json")?)
                        .with_context(|| format!("{}/restart_check.json is not a vcurve export", dir.display()))?,
                ),
                false => None,
            };
            (results, analyses, check)
        }
        (Some(study), None) => {
            let connection = source.remote.connection()?;
            let mut client = client::study_client(&connection).await?;
            let files = client::export(&mut client, study).await.with_context(at(&connection))?;
            let find = |name: &str| files.iter().find(|(n, _)| n == name).map(|(_, contents)| contents.clone());
            let get = |name: &str| find(name).with_context(|| format!("the export has no {name}"));
            let check = find("restart_check.json").map(|b| serde_json::from_slice(&b)).transpose()?;
            (serde_json::from_slice(&get("results.json")?)?, serde_json::from_slice(&get("analyses.json")?)?, check)
        }
        (None, None) => bail!("name a STUDY (with --coordinator) or an export folder with --from"),
    })
}

pub async fn report(source: &StudySource, out: &Path) -> anyhow::Result<PathBuf> {
    let (results, analyses, check) = results_and_analyses(source).await?;
    let report = vcurve_report::html::build(&results, &analyses, check.as_ref())?;
    write_files(out, report.files)?;
    Ok(out.join("report.html"))
}

pub async fn print_analyses(source: &StudySource, json: bool) -> anyhow::Result<()> {
    let (results, analyses, _) = results_and_analyses(source).await?;
    if json {
        output::println(serde_json::to_string_pretty(&analyses)?)
    } else {
        let tables: Vec<String> =
            vcurve_report::html::tables(&results, &analyses).iter().map(|t| format!("{}\n", t.text())).collect();
        output::print(tables.concat())
    }
}

pub async fn cancel(study: &str, connection: &Connection) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let state = client
        .cancel(v1::CancelRequest { study: study.to_string() })
        .await
        .with_context(at(connection))?
        .into_inner()
        .state;
    output::println(format!("study {study}: {state}"))
}

pub async fn studies(connection: &Connection, json: bool) -> anyhow::Result<()> {
    let mut client = client::study_client(connection).await?;
    let studies =
        client.list_studies(v1::ListStudiesRequest {}).await.with_context(at(connection))?.into_inner().studies;
    if json {
        let all: Vec<_> = studies.iter().map(progress_json).collect();
        output::println(serde_json::to_string_pretty(&all)?)
    } else {
        let lines: Vec<String> = studies
            .iter()
            .map(|p| {
                format!(
                    "{}  {:<10} {:<20} {}/{} trajectories\n",
                    p.study, p.state, p.name, p.trajectories_done, p.trajectories
                )
            })
            .collect();
        output::print(lines.concat())
    }
}

/// Keep `Arc` in scope for callers that build coordinators by hand.
pub type SharedCoordinator = Arc<Coordinator<SqlStore>>;

#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The store: postgres://USER:PASSWORD@HOST/DB, or sqlite://PATH for the embedded store.
    #[arg(long, env = "VCURVE_STORE", default_value = "sqlite://vcurve.sqlite")]
    pub store: String,
    /// File holding the store URL instead of --store (a mounted secret: the URL carries the
    /// database password).
    #[arg(long, env = "VCURVE_STORE_FILE", value_name = "FILE")]
    pub store_file: Option<PathBuf>,
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
    /// Also serve Prometheus metrics at http://ADDR/metrics (client token as a bearer token when
    /// one is set; required on a non-loopback address).
    #[arg(long, env = "VCURVE_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,
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
    /// Also offer the `agent` runner: real agents in Docker containers (replay, snapshots,
    /// continuations, evaluation). Needs a running Docker Engine and the studies' task images.
    #[arg(long, env = "VCURVE_DOCKER")]
    pub docker: bool,
    /// Disk budget of the snapshot cache (anchor and h_t images), in GiB; the least recently used
    /// snapshots are removed beyond it.
    #[arg(long, env = "VCURVE_SNAPSHOT_BUDGET_GB", default_value_t = 20.0, value_parser = parse_budget_gb)]
    pub snapshot_budget_gb: f64,
    /// With --docker, share snapshots with other workers through the registry at HOST:PORT: push
    /// every snapshot committed, pull one another worker pushed (its image id checked) instead of
    /// rebuilding it by replay, and tell the coordinator, which hands a worker continuations whose
    /// snapshots it holds first, then those whose snapshots are in its registry. The engine must
    /// trust the registry: a loopback one is trusted without TLS, any other needs TLS or an
    /// insecure-registries entry in the engine's daemon.json.
    #[arg(long, env = "VCURVE_SNAPSHOT_REGISTRY", value_name = "HOST:PORT")]
    pub snapshot_registry: Option<String>,
    /// With --docker, also offer the `mini-swe-agent` runner, run by this python of a
    /// mini-swe-agent 2.4.6 environment (scripts/mini-swe-agent-venv makes one and prints its
    /// path) [default: .venv/mini-swe-agent/bin/python, when it exists].
    #[arg(long, env = "VCURVE_MSA_PYTHON", value_name = "PYTHON")]
    pub mini_swe_agent_python: Option<PathBuf>,
    /// With --docker, judge tasks of the `swebench` evaluator with the SWE-bench harness 5.0.2 of
    /// this python (scripts/swebench-venv makes the environment and prints its path)
    /// [default: .venv/swebench/bin/python, when it exists].
    #[arg(long, env = "VCURVE_SWEBENCH_PYTHON", value_name = "PYTHON")]
    pub swebench_python: Option<PathBuf>,
    /// The folder holding the `vcurve_agents` package (the repository's agents/) [default: agents].
    #[arg(long, env = "VCURVE_AGENTS_DIR", value_name = "DIR")]
    pub agents_dir: Option<PathBuf>,
    /// Also serve Prometheus metrics at http://ADDR/metrics (the client token as a bearer token
    /// when one is set; required on a non-loopback address).
    #[arg(long, env = "VCURVE_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,
    /// File holding the client bearer token a scrape of --metrics presents [default:
    /// $VCURVE_CLIENT_TOKEN].
    #[arg(long, value_name = "FILE")]
    pub client_token_file: Option<PathBuf>,
}

impl CoordinatorArgs {
    /// The store URL: the content of --store-file (trimmed) when given, else --store.
    pub fn store_url(&self) -> anyhow::Result<String> {
        let Some(path) = &self.store_file else { return Ok(self.store.clone()) };
        let url = client::read_secret_file(path, "store")?;
        if url.is_empty() {
            bail!("the store file {} is empty (it should hold postgres://USER:PASSWORD@HOST/DB)", path.display());
        }
        Ok(url)
    }
}

/// What runners a worker offers beyond `synthetic`.
#[derive(Debug, Clone, Default)]
pub struct WorkerRunners {
    /// `--docker`: the snapshot budget in GiB.
    pub docker: Option<f64>,
    /// `--snapshot-registry`.
    pub snapshot_registry: Option<String>,
    /// `--mini-swe-agent-python`.
    pub mini_swe_agent_python: Option<PathBuf>,
    /// `--swebench-python`.
    pub swebench_python: Option<PathBuf>,
    /// `--agents-dir`.
    pub agents_dir: Option<PathBuf>,
}

impl WorkerArgs {
    /// The runners these arguments ask for.
    pub fn runners(&self) -> WorkerRunners {
        WorkerRunners {
            docker: self.docker.then_some(self.snapshot_budget_gb),
            snapshot_registry: self.snapshot_registry.clone(),
            mini_swe_agent_python: self.mini_swe_agent_python.clone(),
            swebench_python: self.swebench_python.clone(),
            agents_dir: self.agents_dir.clone(),
        }
    }
}

fn parse_budget_gb(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of GiB"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1e6) {
        return Err(format!("{s} GiB is not a budget: give a number above 0"));
    }
    Ok(v)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_password_is_redacted_or_split_off_decoded() {
        let url = "postgres://vcurve:p%40ss:w@db:5432/vcurve?sslmode=require";
        assert_eq!(redact_url(url), "postgres://vcurve:***@db:5432/vcurve?sslmode=require");
        assert_eq!(
            split_password(url),
            ("postgres://vcurve@db:5432/vcurve?sslmode=require".to_string(), Some("p@ss:w".to_string()))
        );
        for plain in ["postgres://vcurve@db/x", "sqlite://a.sqlite", "postgres://db/x"] {
            assert_eq!(redact_url(plain), plain);
            assert_eq!(split_password(plain), (plain.to_string(), None));
        }
    }

    #[test]
    fn checks_read_as_table_4_with_failures_and_what_was_not_measured() {
        let checks = serde_json::json!({
            "checks": [
                {"id": "replay", "check": "Replay match", "criterion": "≥ 70% of selected", "value": "3/7 (43%)", "status": "fail"},
                {"id": "flake", "check": "Harness flake rate", "criterion": "≤ 3%", "value": null, "status": "not_measured"},
                {"id": "cache", "check": "Evaluations via cache", "criterion": "all", "value": "10/10", "status": "pass"}
            ],
            "verdict": "fail"
        });
        let text = checks_text(&checks);
        assert!(text.contains("Replay match") && text.contains("3/7 (43%)") && text.contains("FAIL"), "{text}");
        let flake = text.lines().find(|l| l.contains("Harness flake rate")).unwrap();
        assert!(flake.matches("not measured").count() == 2 && !flake.contains('0'), "{flake}");
        assert!(text.contains("verdict: fail — the analyses are exported, marked as not passing"), "{text}");
        assert!(checks_text(&serde_json::json!({"checks": [], "verdict": "pass"})).ends_with("verdict: pass\n"));
    }
}
