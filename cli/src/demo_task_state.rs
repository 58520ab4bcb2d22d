//! `vcurve demo --task-state`: the task-state study (CTXGAP) on one machine, against its known
//! truth. The scripted agent (`agents/vcurve_agents/scripted.py`) runs four-turn sessions on two
//! variants of the test task in Docker — `calc-1`, whose reports state the facts of the plan's
//! reported states, and `calc-1-quiet`, whose reports state none — leaving every task-state fact
//! as a `[[STATE …]]` marker in its narration, a command's output or its reasoning. The model
//! stages run against the deterministic model server shipped with the tests
//! (`vcurve_testkit::model_server`): it extracts the markers as atoms, writes one probe per atom,
//! answers a probe with its fact exactly when the fact is in the text it was given, and judges by
//! comparison. So every accuracy is known from the recorded sessions alone
//! (`vcurve_record::task_state::truth::marker_report`): the demo prints it beside what the study
//! measured and writes it as `truth.json` beside the export's `task_state.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::client;
use crate::commands::{export_into, write_files};
use crate::demo::{LocalCoordinator, watch};
use crate::demo_docker::{build_images, repository, scripted_runner};
use vcurve_coordinator::core::Timing;
use vcurve_coordinator::store::{LeasePolicy, Store};

/// The demo study's seed: the scripted agent draws its session's fix from it.
pub const SEED: u64 = 5;
/// The quiet variant of the test task: its reports state no fact.
pub const QUIET_TASK: &str = "calc-1-quiet";

/// The demo's options.
#[derive(Debug, Clone)]
pub struct TaskStateDemoArgs {
    pub out: PathBuf,
    /// Jobs run at once by the demo's worker.
    pub slots: u32,
    pub progress: bool,
}

/// The demo study: its spec and the task files it names, its stages on `model_url`.
pub fn task_state_spec(
    task: &serde_json::Value,
    model_url: &str,
) -> anyhow::Result<(String, BTreeMap<String, String>)> {
    let mut quiet = task.clone();
    quiet["id"] = serde_json::Value::String(QUIET_TASK.to_string());
    let mut yaml = String::new();
    let _ = writeln!(yaml, "name: demo-task-state\nseed: {SEED}\nbudget: 30");
    let _ = writeln!(yaml, "runner:\n  kind: agent\n  agent: {}", vcurve_worker::runners::agents::SCRIPTED);
    let _ = writeln!(
        yaml,
        "  model: {{q: 1.0, r: 0.9, session: {{fix: correct}}, tasks: {{{QUIET_TASK}: {{session: {{fix: flawed, report_states: []}}}}}}}}"
    );
    let _ = writeln!(yaml, "  memory_mb: 512\n  pids_limit: 256\n  run_timeout_s: 600");
    let _ = writeln!(yaml, "task_state:\n  samples: 3\n  models:");
    let _ = writeln!(yaml, "    default: {{base_url: \"{model_url}\", model: vcurve-deterministic, thinking: none}}");
    let _ = writeln!(yaml, "tasks:\n  - task: tasks/calc-1.json\n  - task: tasks/{QUIET_TASK}.json");
    Ok((yaml, crate::demo_docker::task_files(task, &quiet)?))
}

/// Run the demo; returns the table it printed (measured beside truth).
pub async fn run(args: TaskStateDemoArgs) -> anyhow::Result<String> {
    let started = Instant::now();
    let repo = repository();
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let task = tokio::task::spawn_blocking({
        let repo = repo.clone();
        move || build_images(&repo)
    })
    .await??;
    let runtime = vcurve_worker::DockerRuntime::connect()
        .await
        .context("vcurve demo --task-state needs a running Docker Engine")?;
    let runtime: Arc<dyn vcurve_worker::ContainerRuntime> = Arc::new(runtime);
    let server = vcurve_testkit::model_server::ModelServer::start()
        .await
        .context("cannot start the deterministic model server on loopback")?;
    let model_url = server.base_url();
    eprintln!("== model stages: the deterministic model server at {model_url}");

    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 60_000 },
        heartbeat_interval: Duration::from_secs(5),
        max_lease_wait: Duration::from_millis(500),
    };
    let local = LocalCoordinator::start(&args.out, timing).await?;
    let stop_worker = CancellationToken::new();
    let (yaml, files) = task_state_spec(&task, &model_url)?;
    std::fs::write(args.out.join("demo-study.yaml"), &yaml)?;
    write_files(
        &args.out.join("tasks"),
        files.iter().map(|(k, v)| (k.trim_start_matches("tasks/").to_string(), v.clone().into_bytes())),
    )?;
    let mut client = local.client().await?;
    let study = client::upload_and_launch(&mut client, yaml, &files).await?;

    let name = "demo-task-state-worker";
    let runner = scripted_runner(runtime.clone(), &args.out, name, &repo).await?;
    // The demo's worker offers the deterministic server's endpoint (no key) beside the agent.
    let endpoints =
        vcurve_worker::ModelEndpoints::from_flags(std::slice::from_ref(&model_url)).map_err(anyhow::Error::msg)?;
    let runners = vcurve_worker::Runners::new()
        .with(runner.clone())
        .with_model_calls(vcurve_worker::ModelCallRunner::new(endpoints));
    let worker = local.spawn_worker(name.to_string(), args.slots, runners, stop_worker.clone());
    watch(&mut client, &study, args.progress).await?;
    let written = export_into(&mut client, &study, &args.out).await?;
    stop_worker.cancel();
    worker.await??;
    let stopped = local.stop_serving().await;
    let (read, served) = stopped
        .close_after(async |coordinator| {
            let data = coordinator.store().task_state_data(&study.as_str().into()).await?;
            anyhow::Ok(data)
        })
        .await;
    served?;
    let Some(data) = read? else { bail!("study {study} is not a task-state study") };
    if data.sessions.is_empty() {
        bail!("no session of study {study} was recorded; see the worker's messages above");
    }
    // Every table of the truth (the estimators on the credits the markers imply), once; its
    // accuracy object is the truth each view is printed beside.
    let truth_report = vcurve_record::task_state::truth::marker_report(&data.settings, &data.sessions)
        .map_err(|e| anyhow::anyhow!("the demo's truth cannot be computed: {e}"))?;
    let truth = truth_report.accuracy();
    let measured: serde_json::Value = serde_json::from_slice(
        &std::fs::read(args.out.join("task_state.json")).context("the export wrote no task_state.json")?,
    )?;
    let truth_report = serde_json::to_value(&truth_report)?;
    let tables_equal = measured["report"] == truth_report;
    let truth_path = args.out.join("truth.json");
    std::fs::write(
        &truth_path,
        serde_json::to_vec_pretty(&serde_json::json!({"accuracy": truth, "report": truth_report}))?,
    )?;

    let mut table = format!("{:<22} {:<20} {:>9} {:>9}\n", "view", "", "measured", "truth");
    let mut all_equal = true;
    // In reading depth, the actor last; every key of the truth is shown.
    let order: Vec<vcurve_method::task_state::View> = vcurve_method::task_state::View::ALL.to_vec();
    let mut keys: Vec<&String> = truth.keys().collect();
    keys.sort_by_key(|k| order.iter().position(|v| v.key() == k.as_str()).unwrap_or(usize::MAX));
    for view in keys {
        let t = &truth[view];
        let symbol = order.iter().find(|v| v.key() == view.as_str()).map_or("", |v| v.symbol());
        let m = measured["accuracy"][view].as_f64();
        let equal = m.is_some_and(|m| (m - t).abs() < 1e-12);
        all_equal &= equal;
        let shown = m.map_or_else(|| "not measured".to_string(), |m| format!("{m:.4}"));
        let _ = writeln!(table, "{view:<22} {symbol:<20} {shown:>9} {t:>9.4}{}", if equal { "" } else { "  DIFFERS" });
    }
    let _ = writeln!(
        table,
        "\nevery table (Tables 1, 4, 5, 10, 13, 14, 15, task-equal means): {}",
        if tables_equal { "measured equals truth" } else { "measured DIFFERS from truth" }
    );
    all_equal &= tables_equal;
    let mut out = table.clone();
    let report: vcurve_method::task_state::TaskStateReport = serde_json::from_value(measured["report"].clone())?;
    for t in vcurve_report::task_state::tables(&report, None) {
        if matches!(t.name, "task_state_headline" | "task_state_decomposition") {
            let _ = writeln!(out, "\n{}", t.text());
        }
    }
    let calls: u64 = server.requests_by_template().values().sum();
    let _ = writeln!(
        out,
        "\n{} sessions, {} model calls answered by the deterministic server; measured {} truth",
        data.sessions.len(),
        calls,
        if all_equal { "equals" } else { "DIFFERS FROM" }
    );
    let _ = writeln!(out, "study {study} finished in {:.1} s; wrote:", started.elapsed().as_secs_f64());
    let views_dir = args.out.join("views");
    let view_files = written.iter().filter(|p| p.starts_with(&views_dir)).count();
    for p in written.iter().filter(|p| !p.starts_with(&views_dir)).chain([&truth_path]) {
        let _ = writeln!(out, "  {}", p.display());
    }
    let _ = writeln!(out, "  {}/ ({view_files} view texts, by digest)", views_dir.display());
    crate::output::print(out)?;
    if !all_equal {
        bail!("the measured accuracies differ from the truth");
    }
    Ok(table)
}
