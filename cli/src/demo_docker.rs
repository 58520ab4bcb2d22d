//! `vcurve demo --docker`: the paper's pipeline on real containers, on one machine, from tasks to a
//! checked report and an online restart check. The scripted known-truth agent
//! (`agents/vcurve_agents/scripted.py`) makes base runs of two variants of the test task — `calc-1`
//! (a small Python package with a bug and hidden tests, built into an image by
//! `deploy/images/build` when missing; `q = 0.7`, `r = 0.9`) and `calc-1-token` (`q = 0.5`,
//! `r = 0.8`, and half of its runs print a random token at step 4). Once every base run is in, the
//! selection draws the study set from the band's failed runs by stratum with its seed and keeps
//! decoys; each selected run is replayed under replay's checks, and one that printed the token is
//! found non-replayable there and back-filled from its stratum; the rest are snapshotted at their
//! anchors, continued under the adaptive schedule with the three controls, and judged through the
//! patch cache. When the study is done, its restart points are checked online: fresh runs from
//! `h_0` with budget `B − t_r`. The summary sets the agent's truth beside what was measured, and
//! `truth.csv` records the truth.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::client;
use crate::commands::{export_into, write_files};
use crate::demo::{LocalCoordinator, watch};
use vcurve_coordinator::core::Timing;
use vcurve_coordinator::store::{LeasePolicy, Store};

/// The scripted agent's decision step in the demo (its default).
pub const DECISION_STEP: u32 = 8;
/// The step at which the `calc-1-token` variant prints a random token (on some runs).
pub const TOKEN_STEP: u32 = 4;
/// The task of the random-token variant.
pub const TOKEN_TASK: &str = "calc-1-token";
/// The share of the variant's runs that print the token.
pub const TOKEN_RATE: f64 = 0.5;
/// The agent's `(q, r)` on each task: `V(h_0) = q·r`.
pub const MODELS: [(&str, f64, f64); 2] = [("calc-1", 0.7, 0.9), (TOKEN_TASK, 0.5, 0.8)];
/// The scripted agent's run length `T = D + 5` (fix at `D + 2`, submission three steps later).
pub const RUN_LENGTH: u32 = DECISION_STEP + 5;
/// The step budget `B`: long enough that a fresh run after the decision step still fits
/// (`B − t ≥ T` for `t ≤ 17`), so that restarting there is worth `q·r` and the failed runs have
/// restart points to check.
pub const BUDGET: u32 = 30;
/// Fresh runs per trajectory in the restart check.
pub const RESTART_RUNS: u32 = 8;

/// The demo's options.
#[derive(Debug, Clone)]
pub struct DockerDemoArgs {
    pub out: PathBuf,
    /// Jobs run at once by the demo's worker.
    pub slots: u32,
    /// Base runs of each task.
    pub base_runs: u32,
    /// The paper's thresholds instead of the reduced ones.
    pub paper_thresholds: bool,
    pub progress: bool,
}

/// The demo study's seed. Outcomes are a function of it (the scripted agent draws its decisions
/// from each run's seed), and it was chosen so that the draws are typical of the truth: with 8 base
/// runs, 5 of `calc-1`'s pass (`q·r = 0.63`), every failure of `calc-1` took the wrong hypothesis,
/// and the `t = 0` sanity control agrees with the base runs; 4 of `calc-1-token`'s 8 pass
/// (`q·r = 0.40`) and two of its four failures printed the token, so that the selection (three per
/// task) picks at least one of them and back-fills it. (Seed 7 drew 2 passes of 8 base runs of
/// `calc-1` and 8 of 8 at `h_0` of its first trajectory: p = 0.015, the sanity check failed by
/// chance.) The selection seed is the study's; the restart check's seed is the study's plus one.
pub const SEED: u64 = 77;

/// The thresholds the demo uses unless asked for the paper's: fewer continuations at the
/// confirmed drop and the point of no return (16 is the least `K` at which a point with no success
/// certifies at ε = 0.15), so that the study takes minutes on 2 cores.
pub const REDUCED_THRESHOLDS: &str = "{k_confirm: 16, k_pnr: 16, k_label: 8, k_label_raised: 16}";

/// The repository the binary was built from: the image build script and the agents live there.
pub(crate) fn repository() -> PathBuf {
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

/// A demo worker's agent runner: its state (instance locks, snapshot lineage) in `out`'s
/// `worker-state` folder, so that its snapshots are its own and removed at the end, offering the
/// shipped scripted agent from `repo`, run as this user (the demo is local).
pub(crate) async fn scripted_runner(
    runtime: Arc<dyn vcurve_worker::ContainerRuntime>,
    out: &Path,
    name: &str,
    repo: &Path,
) -> anyhow::Result<vcurve_worker::AgentProcessRunner> {
    let instance = vcurve_worker::sandbox::instance::Instance::open(&out.join("worker-state"), name)?;
    let runner = vcurve_worker::AgentProcessRunner::start_in(runtime, instance, 4 << 30, None).await?;
    let mut agents = vcurve_worker::AgentRegistry::new();
    agents.register_flag(vcurve_worker::runners::agents::SCRIPTED, &repo.join("agents")).map_err(anyhow::Error::msg)?;
    runner.use_agents(agents);
    Ok(runner)
}

/// The demo study: its spec and the task files it names.
pub fn docker_spec(
    task: &serde_json::Value,
    base_runs: u32,
    paper_thresholds: bool,
) -> anyhow::Result<(String, BTreeMap<String, String>)> {
    let mut variant = task.clone();
    variant["id"] = serde_json::Value::String(TOKEN_TASK.to_string());
    let (_, q, r) = MODELS[0];
    let (_, token_q, token_r) = MODELS[1];
    let mut yaml = String::new();
    let _ = writeln!(yaml, "name: demo-docker\nseed: {SEED}\nbudget: {BUDGET}\nschedule: paper");
    let _ = writeln!(yaml, "runner:\n  kind: agent\n  agent: {}", vcurve_worker::runners::agents::SCRIPTED);
    let _ = writeln!(
        yaml,
        "  model: {{q: {q}, r: {r}, decision_step: {DECISION_STEP}, tasks: {{{TOKEN_TASK}: {{q: {token_q}, r: {token_r}, \
         random_token_step: {TOKEN_STEP}, random_token_rate: {TOKEN_RATE}}}}}}}"
    );
    // Half the unique patches re-evaluated, so that the demo's few patches measure the flake rate.
    let _ = writeln!(yaml, "  memory_mb: 512\n  pids_limit: 256\n  run_timeout_s: 600\n  flake_recheck_rate: 0.5");
    if !paper_thresholds {
        let _ = writeln!(yaml, "thresholds: {REDUCED_THRESHOLDS}");
    }
    let _ = writeln!(yaml, "controls: {{sanity: 2, retest: 1, budget_control: 1}}");
    let _ = writeln!(yaml, "base_runs: {base_runs}");
    let _ = writeln!(yaml, "selection: {{band: [2, 6], per_task: 3, decoys: 4}}");
    let _ = writeln!(yaml, "tasks:");
    let _ = writeln!(yaml, "  - task: tasks/calc-1.json");
    let _ = writeln!(yaml, "  - task: tasks/{TOKEN_TASK}.json");
    Ok((yaml, task_files(task, &variant)?))
}

/// The files of a demo's two tasks, the test task and its variant: `tasks/ID.json` each.
pub fn task_files(task: &serde_json::Value, variant: &serde_json::Value) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for t in [task, variant] {
        let id = t["id"].as_str().context("the task JSON has no id")?;
        files.insert(format!("tasks/{id}.json"), serde_json::to_string_pretty(t)?);
    }
    Ok(files)
}

/// What the scripted agent's recorded run says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    pub trajectory: String,
    pub task: String,
    pub decision_step: u32,
    /// Whether the run adopted the wrong hypothesis at its decision step.
    pub wrong_hypothesis: bool,
    /// The step at which the run printed a random token, if it did.
    pub random_token_step: Option<u32>,
    /// `V(h_0) = q·r` of its task.
    pub v0: f64,
}

/// The scripted agent's true restart value `R(x, b)`: a fresh run succeeds with probability
/// `q·r` if it can reach its submission within `b` steps, else never.
pub fn true_restart_value(task: &str, budget: u32) -> Option<f64> {
    let (_, q, r) = MODELS.iter().find(|(t, _, _)| *t == task)?;
    Some(if budget >= RUN_LENGTH { q * r } else { 0.0 })
}

/// The truth of each trajectory, read off its recorded run (the hypothesis marker the scripted
/// agent writes into its own message at the decision step, the random token's command).
pub fn truths(
    record: &vcurve_record::StudyRecord,
    recorded: &BTreeMap<String, vcurve_record::Trajectory>,
) -> Vec<Truth> {
    record
        .trajectories
        .iter()
        .filter_map(|tr| record.spec.trajectories.iter().find(|t| t.id == tr.id))
        .map(|t| {
            let run = t.recorded.as_ref().and_then(|d| recorded.get(d));
            let says = |text: &str| {
                run.is_some_and(|run| {
                    run.messages.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains(text)))
                })
            };
            Truth {
                trajectory: t.id.clone(),
                task: t.task.clone(),
                decision_step: DECISION_STEP,
                wrong_hypothesis: says("HYPOTHESIS: wrong"),
                random_token_step: says("</dev/urandom").then_some(TOKEN_STEP),
                v0: true_restart_value(&t.task, BUDGET).unwrap_or(f64::NAN),
            }
        })
        .collect()
}

/// `truth.csv`.
pub fn truth_csv(truths: &[Truth]) -> String {
    let mut out = String::from("trajectory,task,v0,decision_step,wrong_hypothesis,random_token_step\n");
    for t in truths {
        let token = t.random_token_step.map(|s| s.to_string()).unwrap_or_default();
        let _ =
            writeln!(out, "{},{},{:.4},{},{},{token}", t.trajectory, t.task, t.v0, t.decision_step, t.wrong_hypothesis);
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
    let runtime =
        vcurve_worker::DockerRuntime::connect().await.context("vcurve demo --docker needs a running Docker Engine")?;
    let runtime: Arc<dyn vcurve_worker::ContainerRuntime> = Arc::new(runtime);

    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 60_000 },
        heartbeat_interval: Duration::from_secs(5),
        max_lease_wait: Duration::from_millis(500),
    };
    let local = LocalCoordinator::start(&args.out, timing).await?;
    let stop_worker = CancellationToken::new();

    let (yaml, files) = docker_spec(&task, args.base_runs, args.paper_thresholds)?;
    std::fs::write(args.out.join("demo-study.yaml"), &yaml)?;
    write_files(
        &args.out.join("tasks"),
        files.iter().map(|(k, v)| (k.trim_start_matches("tasks/").to_string(), v.clone().into_bytes())),
    )?;
    if args.paper_thresholds {
        eprintln!("== thresholds: the paper's (docs/method.md §8)");
    } else {
        eprintln!(
            "== thresholds: reduced to keep the demo within minutes on 2 cores: {REDUCED_THRESHOLDS} \
             (--paper-thresholds for the paper's)"
        );
    }
    let mut client = local.client().await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await?;

    let name = "demo-docker-worker";
    let runner = scripted_runner(runtime.clone(), &args.out, name, &repo).await?;
    let runners = vcurve_worker::Runners::new().with(runner.clone());
    let worker = local.spawn_worker(name.to_string(), args.slots, runners, stop_worker.clone());

    let last = watch(&mut client, &study, args.progress).await?;

    // The online restart check: fresh runs from h_0 at every restart point, a study of its own.
    eprintln!(
        "== restart check: {RESTART_RUNS} fresh runs with budget B − t_r for each trajectory with a restart point"
    );
    let check_yaml = format!("name: demo-docker-restart-check\nrestart_check: {{of: {study}, runs: {RESTART_RUNS}}}\n");
    let check = client::upload_and_launch(&mut client, check_yaml, &BTreeMap::new()).await?;
    watch(&mut client, &check, args.progress).await?;
    // The study's export, now with its check's restart_check.csv and .json; the check's own
    // export (with its page) beside it.
    let mut written = export_into(&mut client, &study, &args.out).await?;
    written.extend(export_into(&mut client, &check, &args.out.join("restart-check")).await?);
    stop_worker.cancel();
    worker.await??;
    // The study and its records are read from the store after serving; closed whatever the reads
    // returned, the store's write-ahead log is in demo.sqlite.
    let stopped = local.stop_serving().await;
    let (read, served) = stopped
        .close_after(async |coordinator| {
            let record = coordinator.store().study(&study.as_str().into()).await?;
            let check_record = coordinator.store().study(&check.as_str().into()).await?;
            let mut recorded = BTreeMap::new();
            for t in &record.spec.trajectories {
                if let Some(d) = &t.recorded {
                    let bytes = coordinator.file(&d.parse()?).await?;
                    recorded.insert(d.clone(), vcurve_record::Trajectory::from_json(&bytes)?);
                }
            }
            anyhow::Ok((record, check_record, recorded))
        })
        .await;
    served?;
    let (record, check_record, recorded) = read?;
    let truths = truths(&record, &recorded);
    let truth_path = args.out.join("truth.csv");
    std::fs::write(&truth_path, truth_csv(&truths))?;
    written.push(truth_path);

    let mut table = summary(&args.out, &record, &truths)?;
    table.push_str(&selection_summary(&record));
    table.push_str(&checks_summary(&args.out)?);
    table.push_str(&restart_check_summary(&check_record)?);
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
        "snapshots held: {} ({:.0} MB), removed at the end: {}",
        runner.held_snapshots().len(),
        runner.snapshot_bytes() as f64 / 1e6,
        runner.remove_snapshots().await
    );
    let _ = writeln!(
        out,
        "\nstudy {study} and its restart check {check} finished in {:.1} s; wrote:",
        started.elapsed().as_secs_f64()
    );
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

/// The selection: each task's verdict, the strata, the back-fills.
fn selection_summary(record: &vcurve_record::StudyRecord) -> String {
    let mut out = String::new();
    let Some(sel) = &record.selection else { return out };
    let _ = writeln!(out, "\nselection (seed {}):", sel.seed);
    for t in &sel.tasks {
        let verdict = format!("{:?}", t.verdict).to_lowercase();
        let _ = writeln!(out, "  {:<14} {}/{} passed: {verdict} ({})", t.task, t.successes, t.runs, t.reason);
    }
    for s in &sel.strata {
        let _ = writeln!(out, "  stratum {}: {} failed runs", s.stratum, s.order.len());
    }
    let _ = writeln!(
        out,
        "  {} selected, {} back-filled in {} round(s), {} stratum exhaustion(s), {} decoys",
        sel.initial(),
        sel.back_fill_count(),
        sel.rounds(),
        sel.exhausted_count(),
        sel.decoys.len()
    );
    for e in &sel.back_fills {
        let what = match &e.result {
            vcurve_method::selection::BackFill::Replaced { replacement, round, .. } => {
                format!("replaced by {replacement} (round {round})")
            }
            vcurve_method::selection::BackFill::StratumExhausted { stratum, .. } => {
                format!("not replaced: {stratum} exhausted")
            }
            other => format!("{other:?}"),
        };
        let _ = writeln!(out, "  {} non-replayable: {what}", e.non_replayable);
    }
    out
}

/// Table 4 as the export measured it.
fn checks_summary(out: &Path) -> anyhow::Result<String> {
    let analyses: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("analyses.json"))?)?;
    Ok(crate::commands::checks_text(&analyses["checks"]))
}

/// The restart check beside the scripted agent's true `R(x, B − t_r)`.
fn restart_check_summary(record: &vcurve_record::StudyRecord) -> anyhow::Result<String> {
    let results = vcurve_report::restart_check::results(record)?;
    let mut out = String::from("\nonline restart check (Appendix Q):\n");
    let _ = writeln!(
        out,
        "  {:<20} {:>4} {:>6} {:>6} {:>6} {:>7} {:>15}",
        "trajectory", "t_r", "V", "R pred", "R true", "obs", "Wilson 95%"
    );
    for row in &results.check.rows {
        let i = &row.input;
        let truth = true_restart_value(&i.task, results.budget.saturating_sub(i.restart_point));
        let interval = match (row.wilson_lo, row.wilson_hi) {
            (Some(lo), Some(hi)) => format!("[{lo:.2}, {hi:.2}]"),
            _ => "not measured".into(),
        };
        let _ = writeln!(
            out,
            "  {:<20} {:>4} {:>6.2} {:>6.2} {:>6} {:>7} {:>15}",
            i.trajectory,
            i.restart_point,
            i.continuing,
            i.predicted,
            truth.map_or("?".into(), |t| format!("{t:.2}")),
            format!("{}/{}", i.successes, i.runs),
            interval
        );
    }
    let _ = writeln!(out, "  {}", vcurve_report::restart_check::pooled_text(&results.check.pooled));
    Ok(out)
}
