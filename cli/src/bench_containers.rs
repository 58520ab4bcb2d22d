//! `vcurve bench containers`: what the real-container path costs on this host's Docker Engine —
//! a container's start from the task image, one exec round trip, one anchor commit, one container
//! diff — and what snapshots buy: the start of a continuation at `h_t` from its nearest anchor
//! against a replay from the task image to the same `t` (the ratio; the target is ≤ 0.2 at
//! `t ≥ 20`). The trajectory is a base run of the scripted agent on the test task, recorded here
//! with a late decision step so that it is long enough.
//!
//! It also sets a verified replay — observations compared and a fingerprint measured at every
//! step, every fifth step committed as an anchor, the first edit looked for: the `replay` job —
//! against re-executing the same commands in a fresh container without any check
//! ([`Verified`]), on the test task image and on a task image with a large repository and an
//! installed package, built here from the test task image ([`LARGE_DOCKERFILE`]: a few thousand
//! files copied into the task's git repository and committed, the copy registered with Python as
//! an editable install, offline). The target is ≤ 1.2 ×.

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

/// A verified replay against re-execution on one image (medians over the runs).
#[derive(Debug, Clone, Serialize)]
pub struct Verified {
    pub image: String,
    /// Steps of the trajectory, and files in the image's repository.
    pub steps: u32,
    pub repository_files: u64,
    pub replay_verified_ms: f64,
    pub reexecute_ms: f64,
    /// `replay_verified_ms / reexecute_ms`.
    pub ratio: f64,
    /// Anchors of one verified replay …
    pub anchors: usize,
    /// … of which were the anchor before them named again, not committed (their writable layer
    /// had not changed).
    pub anchors_named_again: usize,
}

/// The large task image: the test task's repository with a few thousand more files (three
/// copies of the Python standard library's tree, `__pycache__` left out) committed into it, and
/// the copy registered as an editable install (a `.pth` file and its `dist-info`, what
/// `pip install -e .` leaves; the image has no pip and the bench no network). `{image}` is the
/// test task image.
pub const LARGE_DOCKERFILE: &str = r#"FROM {image}
RUN set -e; cd /testbed; mkdir -p vendor/biglib \
 && for i in 1 2 3; do mkdir -p vendor/biglib/part$i && cp -r /usr/lib/python3.11/. vendor/biglib/part$i/; done \
 && find vendor -name __pycache__ -prune -exec rm -rf {} + \
 && printf '[project]\nname = "biglib"\nversion = "0.1"\n' > vendor/pyproject.toml \
 && git add -A && git -c user.email=bench@vcurve -c user.name=bench commit -qm "vendor biglib" \
 && site=$(python3 -c 'import site; print(site.getsitepackages()[0])') && mkdir -p "$site/biglib-0.1.dist-info" \
 && echo /testbed/vendor > "$site/__editable__.biglib-0.1.pth" \
 && printf 'Metadata-Version: 2.1\nName: biglib\nVersion: 0.1\n' > "$site/biglib-0.1.dist-info/METADATA" \
 && echo pip > "$site/biglib-0.1.dist-info/INSTALLER" && : > "$site/biglib-0.1.dist-info/RECORD"
"#;

/// The measurements and the ratio.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub figures: Vec<Figure>,
    /// Verified replay against re-execution, per image.
    pub verified: Vec<Verified>,
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
        reaps_itself: false,
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
    let (diff, stamp) = container.diff_stamped().await?;
    let changes = ChangeSet::from_changes(&diff);
    let exact = vcurve_worker::sandbox::replay::state_exact(&diff, stamp.as_ref(), true);
    cache.commit(&container, &digest, anchor, &changes, exact).await?;
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

    // Verified replay against re-execution, on the test task image and the large one.
    let mut verified = vec![verify(args, repo, task, runtime, limits, &trajectory).await?];
    let large_image = build_large(&task.image)?;
    let large_task = Task { image: large_image.clone(), ..task.clone() };
    let large_run = verify_on(args, repo, &large_task, runtime, limits).await;
    let _ = std::process::Command::new("docker").args(["rmi", "-f", &large_image]).output();
    verified.push(large_run?);
    Ok(Report { figures, verified, t, anchor, ratio })
}

/// Build [`LARGE_DOCKERFILE`] over `image`; its tag.
fn build_large(image: &str) -> anyhow::Result<String> {
    use std::io::Write;
    let tag = format!("vcurve-bench-large:{}", std::process::id());
    let mut child = std::process::Command::new("docker")
        .args(["build", "-q", "-t", &tag, "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running docker build for the large task image")?;
    child
        .stdin
        .take()
        .context("docker build's stdin")?
        .write_all(LARGE_DOCKERFILE.replace("{image}", image).as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("docker build of the large task image failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(tag)
}

/// A scripted base run on `task`'s image, then [`verify`].
async fn verify_on(
    args: &BenchContainersArgs,
    repo: &std::path::Path,
    task: &Task,
    runtime: &Arc<dyn ContainerRuntime>,
    limits: &ContainerLimits,
) -> anyhow::Result<Verified> {
    let trajectory = base_run(repo, task, runtime, limits, args.t.max(8)).await?;
    verify(args, repo, task, runtime, limits, &trajectory).await
}

/// A base run of the scripted agent on `task` with its decision at `decision_step`.
async fn base_run(
    repo: &std::path::Path,
    task: &Task,
    runtime: &Arc<dyn ContainerRuntime>,
    limits: &ContainerLimits,
    decision_step: u32,
) -> anyhow::Result<vcurve_record::Trajectory> {
    let options = AgentOptions::from_json(&serde_json::json!({
        "agent": vcurve_worker::runners::agents::SCRIPTED,
        "model": {"decision_step": decision_step},
    }))
    .map_err(anyhow::Error::msg)?;
    let mut agents = vcurve_worker::AgentRegistry::new();
    agents.register_flag(vcurve_worker::runners::agents::SCRIPTED, &repo.join("agents")).map_err(anyhow::Error::msg)?;
    let container = Container::start(runtime.clone(), &limits.spec(&task.image)).await?;
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
    Ok(ran
        .map_err(|e| anyhow::anyhow!("the scripted agent's base run on {}: {}", task.image, e.reason()))?
        .into_trajectory(task.clone(), Interpreter::default(), Vec::new())?)
}

/// The median verified replay (the `replay` job: fingerprints recorded at every step, anchors
/// every 5 steps committed) against the median re-execution of the same commands, each run in a
/// fresh container of the task image (its start counted in both).
async fn verify(
    args: &BenchContainersArgs,
    _repo: &std::path::Path,
    task: &Task,
    runtime: &Arc<dyn ContainerRuntime>,
    limits: &ContainerLimits,
    trajectory: &vcurve_record::Trajectory,
) -> anyhow::Result<Verified> {
    let digest = trajectory.digest();
    let normalizer = Normalizer::default();
    let anchors: Vec<u32> = (5..=trajectory.length()).step_by(5).collect();
    let cache = SnapshotCache::open(runtime.clone(), 1 << 34).await?;
    let (mut verified, mut plain) = (Vec::new(), Vec::new());
    let (mut committed, mut aliased) = (0, 0);
    for _ in 0..args.runs {
        let started = Instant::now();
        let container = Container::start(runtime.clone(), &limits.spec(&task.image)).await?;
        for step in &trajectory.steps {
            for action in &step.actions {
                vcurve_worker::sandbox::exec::run_command(
                    &container,
                    task,
                    &trajectory.interpreter,
                    &action.command,
                    action.timeout_s,
                )
                .await?;
            }
        }
        container.remove().await?;
        plain.push(started.elapsed());

        let started = Instant::now();
        let verdict = vcurve_worker::sandbox::replay_job::replay_trajectory(
            &cache,
            trajectory,
            &digest,
            &anchors,
            &normalizer,
            FingerprintMode::RecordMissing,
            limits,
        )
        .await?;
        verified.push(started.elapsed());
        match verdict {
            Verdict::Reproduced(done) => (committed, aliased) = (done.replayed.anchors.len(), done.aliased),
            Verdict::NonReplayable(why) => {
                bail!("the bench trajectory on {} did not replay: step {}: {}", task.image, why.step, why.reason)
            }
        }
        cache.remove_all().await;
    }
    let count = Container::start(runtime.clone(), &limits.spec(&task.image)).await?;
    let files =
        vcurve_worker::sandbox::exec::run_command(&count, task, &trajectory.interpreter, "git ls-files | wc -l", 60.0)
            .await?;
    count.remove().await?;
    let replay_verified_ms = figure("verified", verified).median_ms;
    let reexecute_ms = figure("plain", plain).median_ms;
    Ok(Verified {
        image: task.image.clone(),
        steps: trajectory.length(),
        repository_files: files.output.trim().parse().unwrap_or(0),
        replay_verified_ms,
        reexecute_ms,
        ratio: replay_verified_ms / reexecute_ms,
        anchors: committed,
        anchors_named_again: aliased,
    })
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
    out.push_str(&format!(
        "\n{:<36} {:>5} {:>7} {:>20} {:>13} {:>13} {:>7}\n",
        "verified replay vs re-execution", "steps", "files", "anchors", "verified ms", "re-exec ms", "ratio"
    ));
    for v in &report.verified {
        out.push_str(&format!(
            "{:<36} {:>5} {:>7} {:>20} {:>13.1} {:>13.1} {:>7.2}\n",
            v.image,
            v.steps,
            v.repository_files,
            format!("{} ({} named again)", v.anchors, v.anchors_named_again),
            v.replay_verified_ms,
            v.reexecute_ms,
            v.ratio
        ));
    }
    out.push_str("(target ≤ 1.2 × on both)\n");
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
