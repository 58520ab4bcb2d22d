//! `vcurve demo --docker`: the paper's real work on real containers, on one machine. The
//! scripted known-truth agent (`agents/vcurve_agents/scripted.py`) makes base runs of the test
//! task `calc-1` (a small Python package with a bug and hidden tests, built into an image by
//! `deploy/images/build` when missing); every failed base run becomes a trajectory that is
//! replayed under replay's checks, snapshotted at its anchors, continued under the adaptive
//! schedule and judged through the patch cache. A second task, `calc-1-token`, is the same task
//! whose agent prints a random token at step 4: its trajectories must be found non-replayable
//! there. The summary sets the agent's true decision step and hypothesis beside the measured
//! decisive interval, point of no return and replay status, and `truth.csv` records the truth.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::client;
use crate::commands::write_files;
use crate::demo::{LocalCoordinator, export_into, watch};
use vcurve_coordinator::core::Timing;
use vcurve_coordinator::store::{LeasePolicy, Store};

/// The scripted agent's decision step in the demo (its default).
pub const DECISION_STEP: u32 = 8;
/// The step at which the `calc-1-token` variant prints a random token.
pub const TOKEN_STEP: u32 = 4;
/// The task of the random-token variant.
pub const TOKEN_TASK: &str = "calc-1-token";

/// The demo's options.
#[derive(Debug, Clone)]
pub struct DockerDemoArgs {
    pub out: PathBuf,
    /// Jobs run at once by the demo's worker.
    pub slots: u32,
    /// Base runs of `calc-1` (the variant gets half as many).
    pub base_runs: u32,
    /// The paper's thresholds instead of the reduced ones.
    pub paper_thresholds: bool,
    pub progress: bool,
}

/// The demo study's seed. Outcomes are a function of it (the scripted agent draws its decisions
/// from each run's seed), and it was chosen so that the draws are typical of the truth
/// (`V(h_0) = q·r = 0.63`): with 6 or 8 base runs, 3 or 5 of `calc-1`'s pass and the `t = 0`
/// sanity control of its first two trajectories agrees with them (Fisher p = 1), the token
/// variant has a failed base run to refuse and a passed one (not doomed), and every failure of
/// `calc-1` took the wrong hypothesis. (Seed 7 drew 2 passes of 6 or 8 base runs and 8 of 8 at
/// `h_0` of the first trajectory: p = 0.015, the sanity check failed by chance.)
pub const SEED: u64 = 77;

/// The thresholds the demo uses unless asked for the paper's: fewer continuations at the
/// confirmed drop and the point of no return (16 is the least `K` at which a point with no success
/// certifies at ε = 0.15), so that the study takes minutes on 2 cores.
pub const REDUCED_THRESHOLDS: &str = "{k_confirm: 16, k_pnr: 16, k_label: 8, k_label_raised: 16}";

/// The repository the binary was built from: the image build script and the agents live there.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).to_path_buf()
}

/// Build the base and task images when missing (progress on the terminal); returns the task JSON.
pub fn build_images(repo: &Path) -> anyhow::Result<serde_json::Value> {
    let script = repo.join("deploy/images/build");
    if !script.is_file() {
        bail!(
            "{} is missing: `vcurve demo --docker` runs from a clone of the vcurve repository (it builds the images \
             with that script)",
            script.display()
        );
    }
    eprintln!("== images: {} (builds what is missing; about a minute the first time)", script.display());
    let built = std::process::Command::new(&script)
        .stderr(Stdio::inherit())
        .stdout(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !built.status.success() {
        bail!("{} failed ({}); see its messages above", script.display(), built.status);
    }
    let tags = String::from_utf8_lossy(&built.stdout).into_owned();
    eprintln!("== images: {}", tags.split_whitespace().collect::<Vec<_>>().join(", "));
    let task = std::process::Command::new(&script)
        .arg("--print-task")
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {} --print-task", script.display()))?;
    if !task.status.success() {
        bail!("{} --print-task failed ({})", script.display(), task.status);
    }
    serde_json::from_slice(&task.stdout).context("deploy/images/build --print-task printed no task JSON")
}

/// The demo study: its spec and the task files it names.
pub fn docker_spec(
    task: &serde_json::Value,
    agents: &Path,
    base_runs: u32,
    paper_thresholds: bool,
) -> anyhow::Result<(String, BTreeMap<String, String>)> {
    let mut variant = task.clone();
    variant["id"] = serde_json::Value::String(TOKEN_TASK.to_string());
    let agents = agents.to_str().context("the agents folder's path is not UTF-8")?;
    let mut yaml = String::new();
    let _ = writeln!(yaml, "name: demo-docker\nseed: {SEED}\nbudget: 20\nschedule: paper");
    let _ = writeln!(yaml, "runner:\n  kind: agent\n  command: [python3, -m, vcurve_agents.scripted]");
    let _ = writeln!(yaml, "  env: {{PYTHONPATH: {}}}", serde_json::to_string(agents)?);
    let _ = writeln!(
        yaml,
        "  model: {{q: 0.7, r: 0.9, decision_step: {DECISION_STEP}, tasks: {{{TOKEN_TASK}: {{random_token_step: {TOKEN_STEP}}}}}}}"
    );
    let _ = writeln!(yaml, "  memory_mb: 512\n  pids_limit: 256\n  run_timeout_s: 600");
    if !paper_thresholds {
        let _ = writeln!(yaml, "thresholds: {REDUCED_THRESHOLDS}");
    }
    let _ = writeln!(yaml, "controls: {{sanity: 2}}");
    let _ = writeln!(yaml, "tasks:");
    let _ = writeln!(yaml, "  - {{task: tasks/calc-1.json, base_runs: {base_runs}}}");
    let _ = writeln!(yaml, "  - {{task: tasks/{TOKEN_TASK}.json, base_runs: {}}}", base_runs.div_ceil(2).max(2));
    let files = BTreeMap::from([
        ("tasks/calc-1.json".to_string(), serde_json::to_string_pretty(task)?),
        (format!("tasks/{TOKEN_TASK}.json"), serde_json::to_string_pretty(&variant)?),
    ]);
    Ok((yaml, files))
}

/// What the scripted agent's recorded run says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truth {
    pub trajectory: String,
    pub decision_step: u32,
    /// Whether the run adopted the wrong hypothesis at its decision step.
    pub wrong_hypothesis: bool,
    pub random_token_step: Option<u32>,
}

/// The truth of each trajectory, read off its recorded run (the hypothesis marker the scripted
/// agent writes into its own message at the decision step).
pub fn truths(
    record: &vcurve_record::StudyRecord,
    recorded: &BTreeMap<String, vcurve_record::Trajectory>,
) -> Vec<Truth> {
    record
        .spec
        .trajectories
        .iter()
        .map(|t| {
            let wrong = t.recorded.as_ref().and_then(|d| recorded.get(d)).is_some_and(|run| {
                run.messages.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("HYPOTHESIS: wrong")))
            });
            Truth {
                trajectory: t.id.clone(),
                decision_step: DECISION_STEP,
                wrong_hypothesis: wrong,
                random_token_step: (t.task == TOKEN_TASK).then_some(TOKEN_STEP),
            }
        })
        .collect()
}

/// `truth.csv`.
pub fn truth_csv(truths: &[Truth]) -> String {
    let mut out = String::from("trajectory,decision_step,wrong_hypothesis,random_token_step\n");
    for t in truths {
        let token = t.random_token_step.map(|s| s.to_string()).unwrap_or_default();
        let _ = writeln!(out, "{},{},{},{token}", t.trajectory, t.decision_step, t.wrong_hypothesis);
    }
    out
}

/// Run the demo; returns the summary table it printed.
pub async fn run(args: DockerDemoArgs) -> anyhow::Result<String> {
    let started = Instant::now();
    let repo = repository();
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let task = tokio::task::spawn_blocking({
        let repo = repo.clone();
        move || build_images(&repo)
    })
    .await??;
    let runtime = vcurve_worker::container::docker::DockerRuntime::connect()
        .await
        .context("vcurve demo --docker needs a running Docker Engine")?;
    let runtime: Arc<dyn vcurve_worker::container::ContainerRuntime> = Arc::new(runtime);

    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 60_000 },
        heartbeat_interval: Duration::from_secs(5),
        max_lease_wait: Duration::from_millis(500),
    };
    let local = LocalCoordinator::start(&args.out, timing).await?;
    let stop_worker = CancellationToken::new();

    let (yaml, files) = docker_spec(&task, &repo.join("agents"), args.base_runs, args.paper_thresholds)?;
    std::fs::write(args.out.join("demo-study.yaml"), &yaml)?;
    write_files(
        &args.out.join("tasks"),
        files.iter().map(|(k, v)| (k.trim_start_matches("tasks/").to_string(), v.clone().into_bytes())),
    )?;
    if args.paper_thresholds {
        eprintln!("== thresholds: the paper's (SPEC.md §8)");
    } else {
        eprintln!(
            "== thresholds: reduced to keep the demo within minutes on 2 cores: {REDUCED_THRESHOLDS} \
             (--paper-thresholds for the paper's)"
        );
    }
    let mut client = local.client().await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await?;

    let name = "demo-docker-worker";
    let runner = vcurve_worker::AgentProcessRunner::start(runtime.clone(), name, 4 << 30).await?;
    let runners = vcurve_worker::Runners::new().with(runner.clone());
    let worker = local.spawn_worker(name.to_string(), args.slots, runners, stop_worker.clone());

    let last = watch(&mut client, &study, args.progress).await?;
    let mut written = export_into(&mut client, &study, &args.out).await?;
    stop_worker.cancel();
    worker.await??;
    let coordinator = local.coordinator.clone();
    local.stop().await?;

    let record = coordinator.store().study(&study).await?;
    let mut recorded = BTreeMap::new();
    for t in &record.spec.trajectories {
        if let Some(d) = &t.recorded {
            let bytes = coordinator.file(d).await?;
            recorded.insert(d.clone(), vcurve_record::Trajectory::from_json(&bytes)?);
        }
    }
    let truths = truths(&record, &recorded);
    let truth_path = args.out.join("truth.csv");
    std::fs::write(&truth_path, truth_csv(&truths))?;
    written.push(truth_path);

    let table = summary(&args.out, &record, &truths)?;
    let mut out = table.clone();
    if let Some(p) = last.and_then(|p| p.evaluation) {
        let _ = writeln!(
            out,
            "\npatches: {} evaluations for {} runs judged ({} from the cache), {} unique, {} flake checks, {} flakes",
            p.evaluations,
            p.evaluated_runs + p.cache_hits,
            p.cache_hits,
            p.unique_patches,
            p.flake_checks,
            p.flakes
        );
    }
    let _ = writeln!(
        out,
        "snapshots held: {} ({:.0} MB)",
        runner.held_snapshots().len(),
        runner.snapshot_bytes() as f64 / 1e6
    );
    let _ = writeln!(out, "\nstudy {study} finished in {:.1} s; wrote:", started.elapsed().as_secs_f64());
    for p in written {
        let _ = writeln!(out, "  {}", p.display());
    }
    crate::output::print(out)?;
    Ok(table)
}

/// A table of the trajectories: the truth beside what was measured.
fn summary(out: &Path, record: &vcurve_record::StudyRecord, truths: &[Truth]) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(out.join("trajectories.csv"))?;
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers()?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect("export column");
    let mut rows = BTreeMap::new();
    for row in reader.records() {
        let row = row?;
        rows.insert(row.get(col("trajectory")).unwrap_or("").to_string(), row);
    }
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<20} {:>3} {:>3} {:<7} {:<16} {:<8} {:>9} {:>4} {:>5} {:>5}",
        "trajectory", "T", "D", "wrong?", "replay", "shape", "(a, b]", "t*", "pnr", "runs"
    );
    for (t, truth) in record.trajectories.iter().zip(truths) {
        let replay = match (&t.non_replayable, &t.replay) {
            (Some(why), _) => format!("refused at {}", why.step),
            (None, Some(_)) => "reproduced".to_string(),
            (None, None) => "not replayed".to_string(),
        };
        let get = |name: &str| rows.get(&t.id).and_then(|r| r.get(col(name))).unwrap_or("").to_string();
        let _ = writeln!(
            table,
            "{:<20} {:>3} {:>3} {:<7} {:<16} {:<8} {:>9} {:>4} {:>5} {:>5}",
            t.id,
            get("length"),
            truth.decision_step,
            if truth.wrong_hypothesis { "wrong" } else { "right" },
            replay,
            get("shape"),
            format!("({}, {}]", get("decisive_a"), get("decisive_b")),
            get("t_star"),
            get("pnr"),
            get("continuations"),
        );
    }
    Ok(table)
}
