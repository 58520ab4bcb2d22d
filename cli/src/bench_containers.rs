//! `vcurve bench containers`: what the real-container path costs on this host's Docker Engine —
//! a container's start from the task image, one exec round trip, one anchor commit, one container
//! diff — and what snapshots buy: the start of a continuation at `h_t` from its nearest anchor
//! against a replay from the task image to the same `t` (the ratio; the target is ≤ 0.2 at
//! `t ≥ 20`). The trajectory is a base run of the scripted agent on the test task, recorded here
//! with a late decision step so that it is long enough.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use vcurve_record::runner::AgentOptions;
use vcurve_record::{Interpreter, Task};
use vcurve_worker::runners::agent::{AgentLimits, AgentStart, run_agent};
use vcurve_worker::sandbox::container::{Container, ContainerRuntime, ContainerSpec, ExecRequest, labels};
use vcurve_worker::sandbox::replay::{ChangeSet, ContainerLimits, FingerprintMode, Normalizer, Verdict, replay_steps};
use vcurve_worker::sandbox::snapshots::SnapshotCache;

#[derive(Debug, clap::Args)]
pub struct BenchContainersArgs {
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// The step `t` the continuation starts from; its nearest anchor is the multiple of 5 at or
    /// below it (at least 20 for the target).
    #[arg(long, default_value_t = 22, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub t: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Median and p90 of one measurement, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub what: String,
    pub runs: usize,
    pub median_ms: f64,
    pub p90_ms: f64,
}

fn figure(what: &str, mut samples: Vec<Duration>) -> Figure {
    samples.sort();
    let at = |q: f64| {
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    Figure { what: what.to_string(), runs: samples.len(), median_ms: at(0.5), p90_ms: at(0.9) }
}

/// The measurements and the ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub t: u32,
    pub anchor: u32,
    /// Median start from the anchor over median replay from the task image.
    pub ratio: f64,
}

fn labels_for(run: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED.to_owned(), "1".to_owned()),
        (labels::WORKER.to_owned(), format!("bench-containers-{}", std::process::id())),
        (labels::JOB.to_owned(), run.to_owned()),
        (labels::STUDY.to_owned(), "bench".to_owned()),
    ])
}

pub async fn run(args: &BenchContainersArgs) -> anyhow::Result<Report> {
    let repo =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(std::path::Path::new(".")).to_path_buf();
    let task_json = tokio::task::spawn_blocking({
        let repo = repo.clone();
        move || crate::demo_docker::build_images(&repo)
    })
    .await??;
    let task: Task = serde_json::from_value(task_json).context("the task deploy/images/build printed")?;
    let runtime: Arc<dyn ContainerRuntime> =
        Arc::new(vcurve_worker::DockerRuntime::connect().await.context("the bench needs a Docker Engine")?);
    let limits = ContainerLimits {
        memory_bytes: 512 << 20,
        pids_limit: 256,
        labels: labels_for("bench"),
        network: Default::default(),
        exec_env: Default::default(),
    };
    let result = measure(args, &repo, &task, &runtime, &limits).await;
    // Whatever happened, leave nothing behind.
    let filter = BTreeMap::from([(labels::WORKER.to_owned(), limits.labels[labels::WORKER].clone())]);
    for id in runtime.containers(&filter).await.unwrap_or_default() {
        let _ = runtime.remove(&id).await;
    }
    for image in runtime.images(&filter).await.unwrap_or_default() {
        let _ = runtime.remove_image(&image.reference).await;
    }
    result
}

async fn measure(
    args: &BenchContainersArgs,
    repo: &std::path::Path,
    task: &Task,
    runtime: &Arc<dyn ContainerRuntime>,
    limits: &ContainerLimits,
) -> anyhow::Result<Report> {
    let spec = |image: &str| -> ContainerSpec { limits.spec(image) };
    let runs = args.runs as usize;
    let mut figures = Vec::new();

    // Start, exec, diff, commit.
    let (mut starts, mut execs, mut diffs, mut commits) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let exec = ExecRequest {
        argv: vec!["bash".into(), "-c".into(), "echo hello > /testbed/bench.txt && cat /testbed/bench.txt".into()],
        env: BTreeMap::new(),
        workdir: task.workdir.clone(),
        timeout: Duration::from_secs(60),
        leave_running: false,
    };
    for i in 0..runs {
        let started = Instant::now();
        let container = Container::start(runtime.clone(), &spec(&task.image)).await?;
        starts.push(started.elapsed());
        let started = Instant::now();
        container.exec(&exec).await?;
        execs.push(started.elapsed());
        let started = Instant::now();
        container.diff().await?;
        diffs.push(started.elapsed());
        let started = Instant::now();
        let reference = format!("vcurve-snapshot:bench-{}-{i}", std::process::id());
        container.commit(&reference, &limits.labels).await?;
        commits.push(started.elapsed());
        container.remove().await?;
        runtime.remove_image(&reference).await?;
    }
    figures.push(figure("container start from the task image", starts));
    figures.push(figure("exec round trip", execs));
    figures.push(figure("container diff", diffs));
    figures.push(figure("anchor commit", commits));

    // A long base run of the scripted agent: its decision step late enough for t.
    let decision_step = args.t.max(8);
    let options = AgentOptions::from_json(&serde_json::json!({
        "agent": vcurve_worker::runners::agents::SCRIPTED,
        "model": {"decision_step": decision_step},
    }))
    .map_err(anyhow::Error::msg)?;
    let mut agents = vcurve_worker::AgentRegistry::new();
    agents.register_flag(vcurve_worker::runners::agents::SCRIPTED, &repo.join("agents")).map_err(anyhow::Error::msg)?;
    let container = Container::start(runtime.clone(), &spec(&task.image)).await?;
    let start = AgentStart {
        command: agents.command(&options).map_err(anyhow::Error::msg)?,
        task: task.clone(),
        interpreter: Interpreter::default(),
        messages: Vec::new(),
        t: 0,
        budget: 100,
        seed: 1,
        model: options.model.clone(),
    };
    let ran = run_agent(&container, start, AgentLimits::from_options(&options), CancellationToken::new()).await;
    container.remove().await?;
    let trajectory = ran
        .map_err(|e| anyhow::anyhow!("the scripted agent's base run: {}", e.reason()))?
        .into_trajectory(task.clone(), Interpreter::default(), Vec::new())?;
    let t = args.t.min(trajectory.length());
    let anchor = t / 5 * 5;
    if anchor == 0 {
        bail!("--t {t} has no anchor above 0 before it");
    }
    let digest = trajectory.digest();
    let normalizer = Normalizer::default();

    // Replay from the task image to t, each time in a fresh container.
    let mut from_image = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let container = Container::start(runtime.clone(), &spec(&task.image)).await?;
        let verdict = replay_steps(
            &container,
            &trajectory,
            0,
            t,
            &normalizer,
            FingerprintMode::CompareOnly,
            ChangeSet::new(),
            &mut (),
        )
        .await?;
        from_image.push(started.elapsed());
        container.remove().await?;
        if let Verdict::NonReplayable(why) = verdict {
            bail!("the bench trajectory did not replay: step {}: {}", why.step, why.reason);
        }
    }

    // The anchor, committed once; then h_t from it: start, replay t − anchor steps. (h_t itself is
    // not committed here, so every run replays from the anchor.)
    let cache = SnapshotCache::open(runtime.clone(), 1 << 30).await?;
    let container = Container::start(runtime.clone(), &spec(&task.image)).await?;
    replay_steps(
        &container,
        &trajectory,
        0,
        anchor,
        &normalizer,
        FingerprintMode::CompareOnly,
        ChangeSet::new(),
        &mut (),
    )
    .await?;
    let changes = ChangeSet::from_changes(&container.diff().await?);
    cache.commit(&container, &digest, anchor, &changes).await?;
    container.remove().await?;
    let reference = SnapshotCache::reference(&digest, anchor)?;
    let mut from_anchor = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let container = Container::start(runtime.clone(), &spec(&reference)).await?;
        let verdict = replay_steps(
            &container,
            &trajectory,
            anchor,
            t,
            &normalizer,
            FingerprintMode::CompareOnly,
            changes.clone(),
            &mut (),
        )
        .await?;
        from_anchor.push(started.elapsed());
        container.remove().await?;
        if let Verdict::NonReplayable(why) = verdict {
            bail!("the bench trajectory did not replay from its anchor: step {}: {}", why.step, why.reason);
        }
    }
    runtime.remove_image(&reference).await?;
    let image = figure(&format!("replay from the task image to t = {t}"), from_image);
    let near = figure(&format!("start at h_{t} from the anchor at {anchor}"), from_anchor);
    let ratio = near.median_ms / image.median_ms;
    figures.push(image);
    figures.push(near);
    Ok(Report { figures, t, anchor, ratio })
}

/// The report as a table.
pub fn table(report: &Report) -> String {
    let mut out = format!("{:<44} {:>5} {:>11} {:>9}\n", "measurement", "runs", "median ms", "p90 ms");
    for f in &report.figures {
        out.push_str(&format!("{:<44} {:>5} {:>11.1} {:>9.1}\n", f.what, f.runs, f.median_ms, f.p90_ms));
    }
    out.push_str(&format!(
        "start from the nearest anchor / replay from the task image at t = {}: {:.3} (target ≤ 0.2 at t ≥ 20)\n",
        report.t, report.ratio
    ));
    out
}

/// `vcurve bench containers`: measure, then print the report as a table or as JSON.
pub async fn run_command(args: &BenchContainersArgs) -> anyhow::Result<()> {
    let report = run(args).await?;
    if args.json {
        crate::output::println(serde_json::to_string_pretty(&report)?)
    } else {
        crate::output::print(table(&report))
    }
}
