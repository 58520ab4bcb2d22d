use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use vcurve_method::schedule::Series;
use vcurve_record::Evaluator;

use super::*;
use crate::runners::seam::ContinuationKey;
use crate::sandbox::container::double::{Call, FakeFs, FakeRuntime, Op};
use crate::sandbox::container::{ExecOutput, ExecRequest};

const IMAGE: &str = "task:test";
const PATCH: &str = "diff --git a/calc/parse.py b/calc/parse.py\n";

/// Every command succeeds; the scripted agent's submission prints the marker and `PATCH` (or
/// nothing after the marker when `empty`).
fn handler(empty: bool) -> impl Fn(&mut FakeFs, &ExecRequest) -> ExecOutput + Send + Sync + 'static {
    move |_fs, request| {
        let command = request.argv.last().cloned().unwrap_or_default();
        let separator = command
            .lines()
            .find_map(|l| l.strip_prefix("echo "))
            .filter(|l| l.starts_with(crate::sandbox::replay::GIT_STATE_SEPARATOR));
        let output = if command.contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT") {
            format!("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n{}", if empty { "" } else { PATCH })
        } else if let Some(separator) = separator {
            // The fingerprint's git state: an empty diff and status around the separator.
            format!("{separator}\n")
        } else {
            "ok\n".to_string()
        };
        ExecOutput { output: output.into_bytes(), exit_code: Some(0), timed_out: false }
    }
}

/// The coordinator's services in memory.
#[derive(Default)]
struct Services {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
    verdicts: Mutex<BTreeMap<String, bool>>,
    lookups: Mutex<u32>,
}

impl JobServices for Services {
    fn lookup_verdict<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        sha: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, String>> {
        *self.lookups.lock().unwrap() += 1;
        let verdict = self.verdicts.lock().unwrap().get(sha).copied();
        Box::pin(async move { Ok(verdict) })
    }

    fn put_file<'a>(&'a self, content: &'a [u8]) -> BoxFuture<'a, Result<String, String>> {
        let digest = vcurve_record::trajectory::sha256_hex(content);
        self.files.lock().unwrap().insert(digest.clone(), content.to_vec());
        Box::pin(async move { Ok(digest) })
    }

    fn fetch_file<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        let file = self.files.lock().unwrap().get(digest).cloned();
        Box::pin(async move { file.ok_or_else(|| format!("no file {digest}")) })
    }
}

fn task() -> Task {
    Task {
        id: "calc-1".into(),
        image: IMAGE.into(),
        workdir: "/testbed".into(),
        evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
        problem_statement: Some("subtraction is wrong".into()),
    }
}

fn options() -> serde_json::Value {
    serde_json::json!({"agent": "scripted", "model": {"q": 1.0, "r": 1.0}})
}

/// `runner` offering the shipped scripted agent, as `vcurve worker --agent scripted` does.
fn offer_scripted(runner: &AgentProcessRunner) {
    let agents = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let mut registry = AgentRegistry::new();
    registry.register_flag("scripted", &agents).unwrap();
    assert!(runner.use_agents(registry));
}

async fn runner(empty: bool) -> (AgentProcessRunner, Arc<FakeRuntime>, Arc<Services>) {
    let runtime = Arc::new(FakeRuntime::with_handler(handler(empty)));
    runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
    let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
    offer_scripted(&runner);
    let services = Arc::new(Services::default());
    runner.attach(services.clone());
    (runner, runtime, services)
}

fn job(key: JobKey, payload: TrajectoryPayload, budget: u32) -> JobSpec {
    JobSpec {
        key,
        attempt: 1,
        budget,
        runner: RunnerSpec::parse(AGENT, options()).expect("valid agent options"),
        study_seed: 7,
        trajectory_digest: Some(payload.digest()),
        trajectory: Some(Arc::new(payload)),
        anchors: vec![0, 5, 10, 12],
        registry_snapshot: None,
    }
}

fn base_run() -> JobSpec {
    let key = JobKey::BaseRun { study: "s".into(), task: "calc-1".into(), seed: 0 };
    job(key, TrajectoryPayload::of_task(&task()), 20)
}

/// A base run through the runner: its outcome and the recorded trajectory it uploaded.
/// The payload of a trajectory of calc-1 that is `recorded`.
fn payload_of(recorded: &Trajectory) -> TrajectoryPayload {
    TrajectoryPayload {
        task: "calc-1".into(),
        length: recorded.length(),
        curve: None,
        recorded: Some(recorded.clone()),
        task_def: None,
        problem_statement_sha256: None,
        instructions: None,
    }
}

async fn recorded_base_run() -> (RunOutcome, Trajectory) {
    let (runner, _, services) = runner(false).await;
    let JobReport::Outcome(outcome) = runner.run(base_run(), CancellationToken::new()).await else {
        panic!("a base run has an outcome")
    };
    let digest = outcome.recorded.clone().expect("a recorded run");
    let bytes = services.files.lock().unwrap()[&digest].clone();
    (outcome, Trajectory::from_json(&bytes).unwrap())
}

#[tokio::test]
async fn a_run_past_the_studys_wall_clock_cap_is_reported_capped() {
    // An agent that never answers, under a cap of 1 s: capped (not run again, counted), not
    // a no-outcome that would be retried and retired.
    let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
    runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
    let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
    let mut registry = AgentRegistry::new();
    registry.register_flag("sleeper=sleep 30", std::path::Path::new(".")).unwrap();
    assert!(runner.use_agents(registry));
    runner.attach(Arc::new(Services::default()));
    let mut spec = base_run();
    let options = serde_json::json!({"agent": "sleeper", "run_timeout_s": 1});
    spec.runner = RunnerSpec::parse(AGENT, options).unwrap();
    let report = runner.run(spec, CancellationToken::new()).await;
    let JobReport::Capped { reason } = &report else { panic!("{report:?}") };
    assert!(reason.starts_with(vcurve_record::jobs::CAPPED), "{reason}");
    assert!(reason.contains("longer than its 1 s"), "{reason}");
    assert_eq!(runtime.running().len(), 0, "its container is removed");
}

/// A study's `network` is the network of its agent's containers when the worker's operator
/// offers it, never of the evaluator's; on a worker that does not offer it the job is a
/// no-outcome naming the network (the coordinator hands it only to workers that do).
#[tokio::test]
async fn agent_containers_get_the_studys_network_when_the_worker_offers_it() {
    use crate::runners::networks::NetworkOffer;
    use crate::sandbox::container::ContainerNetwork;
    let bridge_job = || {
        let mut spec = base_run();
        let options = serde_json::json!({"agent": "scripted", "model": {"q": 1.0, "r": 1.0}, "network": "bridge"});
        spec.runner = RunnerSpec::parse(AGENT, options).unwrap();
        spec
    };
    let (closed, runtime, _) = runner(false).await;
    let report = closed.run(bridge_job(), CancellationToken::new()).await;
    let JobReport::NoOutcome { reason, .. } = &report else { panic!("{report:?}") };
    assert!(reason.contains("does not offer the network bridge"), "{reason}");
    assert_eq!(runtime.count(Op::Create), 0, "nothing started");

    let (open, runtime, _) = runner(false).await;
    let offer = NetworkOffer::from_flags(&["bridge".into()], &[]).unwrap();
    assert!(open.use_networks(offer));
    assert_eq!(open.networks(), ["bridge"], "registered with the coordinator");
    let report = open.run(bridge_job(), CancellationToken::new()).await;
    assert!(matches!(report, JobReport::Outcome(_)), "{report:?}");
    let networks: Vec<(String, ContainerNetwork)> = runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Create { labels, network, .. } => {
                Some((labels.get(labels::JOB).cloned().unwrap_or_default(), network))
            }
            _ => None,
        })
        .collect();
    assert!(networks.len() >= 2, "{networks:?}");
    assert_eq!(networks[0].1, ContainerNetwork::Bridge, "the agent's container: {networks:?}");
    assert_eq!(networks.last().unwrap().1, ContainerNetwork::None, "the evaluator's: {networks:?}");
}

#[tokio::test]
async fn a_session_runs_the_studys_agent_in_a_labelled_container_and_judges_each_distinct_patch_once() {
    let (runner, runtime, _services) = runner(false).await;
    let RunnerSpec::Agent(options) = RunnerSpec::parse(AGENT, options()).unwrap() else { unreachable!() };
    let instructions: Vec<String> = crate::runners::task_session::PAPER_INSTRUCTIONS.map(str::to_owned).to_vec();
    let record = runner
        .run_session(&task(), &options, &instructions, 10, 7, ("s1", "s1/calc-1/session/0"), CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(record.session.checkpoints(), 4);
    assert_eq!(record.session.turns[3].instruction, "Assess remaining risk");
    // Every command prints "ok": the same patch at every checkpoint, evaluated once, resolved.
    assert!(record.checkpoints.iter().all(|c| c.patch == "ok\n" && c.resolved == Some(true)));
    let jobs: Vec<String> = runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Create { labels, .. } => Some(format!("{}|{}", labels[labels::STUDY], labels[labels::JOB])),
            _ => None,
        })
        .collect();
    assert_eq!(jobs, ["s1|s1/calc-1/session/0"; 2], "the session's container and one evaluation's");
    assert_eq!(runtime.running().len(), 0, "both removed");
    // An agent this worker does not offer is a bad job, before any container.
    let mut other = options.clone();
    other.agent = "nobody".into();
    let err = runner
        .run_session(&task(), &other, &instructions, 10, 7, ("s1", "j"), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, NoOutcome::BadJob(ref why) if why.contains("nobody")), "{err}");
}

#[tokio::test]
async fn a_base_run_is_recorded_uploaded_and_its_patch_evaluated() {
    let (runner, runtime, services) = runner(false).await;
    let report = runner.run(base_run(), CancellationToken::new()).await;
    let JobReport::Outcome(o) = report else { panic!("{report:?}") };
    assert_eq!((o.success, o.steps, o.end_type, o.judged), (true, 13, EndType::Submitted, Judged::Evaluated));
    assert_eq!(o.patch_sha256, vcurve_record::trajectory::sha256_hex(PATCH.as_bytes()));
    let files = services.files.lock().unwrap();
    assert!(files.contains_key(&o.patch_sha256), "the evaluated patch is uploaded for re-checks");
    let recorded = Trajectory::from_json(&files[o.recorded.as_ref().unwrap()]).unwrap();
    assert_eq!((recorded.length(), recorded.task.id.as_str()), (13, "calc-1"));
    assert_eq!(*services.lookups.lock().unwrap(), 1);
    // The run's container and the evaluation's: both created and removed.
    assert_eq!((runtime.count(Op::Create), runtime.running().len()), (2, 0));
}

#[tokio::test]
async fn a_base_run_whose_command_printed_more_than_the_store_keeps_is_recorded_cut_and_uploaded() {
    // Issue 24: 64 MiB of output made the trajectory unstorable; every attempt failed at its
    // upload and the base run was retired. The first command here prints 40 MiB, which the
    // trajectory holds twice (the action's output and the agent's next message).
    let printed_bytes = (40u64 << 20) + 22;
    let (recorded, size) = base_run_printing(1, printed_bytes as usize).await;
    assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
    let action = &recorded.steps[0].actions[0];
    let omitted = action.omitted.expect("the cut is recorded in the action");
    assert_eq!(omitted.head + omitted.bytes + omitted.tail, printed_bytes);
    assert!(action.output.starts_with("FIRST LINE\n") && action.output.ends_with("\nLAST LINE\n"));
    assert!(action.output.contains(&format!("[vcurve: {} bytes of output omitted]", omitted.bytes)));
}

/// A base run through a runtime whose first `n` commands print `bytes` bytes each (a first
/// and a last line around `x`s); the trajectory it uploaded, and its encoded size.
async fn base_run_printing(n: usize, bytes: usize) -> (Trajectory, usize) {
    let printed = std::sync::atomic::AtomicUsize::new(0);
    let big = format!("FIRST LINE\n{}\nLAST LINE\n", "x".repeat(bytes - 22));
    let plain = handler(false);
    let runtime = Arc::new(FakeRuntime::with_handler(move |fs, request| {
        if printed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
            return ExecOutput { output: big.clone().into_bytes(), exit_code: Some(0), timed_out: false };
        }
        plain(fs, request)
    }));
    runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
    let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
    offer_scripted(&runner);
    let services = Arc::new(Services::default());
    runner.attach(services.clone());
    let report = runner.run(base_run(), CancellationToken::new()).await;
    let JobReport::Outcome(o) = report else { panic!("{report:?}") };
    let files = services.files.lock().unwrap();
    let bytes = &files[o.recorded.as_ref().expect("the run is recorded")];
    (Trajectory::from_json(bytes).unwrap(), bytes.len())
}

#[tokio::test]
async fn a_command_printing_65_mib_is_handed_and_recorded_cut_and_its_base_run_uploaded() {
    // Issue 24: 64 MiB of output made the base run's trajectory unstorable (or the agent's
    // protocol line too long): every attempt failed and the base run was retired.
    let (recorded, size) = base_run_printing(1, 65 << 20).await;
    assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
    let action = &recorded.steps[0].actions[0];
    let omitted = action.omitted.expect("the cut is recorded in the action");
    assert_eq!(omitted.head + omitted.bytes + omitted.tail, 65 << 20);
    assert_eq!(omitted.head + omitted.tail, crate::runners::agent::MAX_OBSERVATION_BYTES as u64);
    assert!(action.output.starts_with("FIRST LINE\n") && action.output.ends_with("\nLAST LINE\n"));
    assert!(action.output.contains(&format!("\n[vcurve: {} bytes of output omitted]\n", omitted.bytes)));
    // The agent was handed the cut output: the next message shows it.
    assert!(recorded.messages.iter().any(|m| m.to_string().contains(" bytes of output omitted]")));
}

#[tokio::test]
async fn a_run_of_many_long_outputs_is_cut_again_to_fit_the_store() {
    // Nine outputs of 6 MiB, each kept whole for the agent but twice in the trajectory:
    // 108 MiB, cut to one cap to fit.
    let (recorded, size) = base_run_printing(9, 6 << 20).await;
    assert!(size as u64 <= vcurve_record::MAX_FILE_BYTES, "{size} bytes");
    let cut: Vec<_> = recorded.steps.iter().flat_map(|s| &s.actions).filter_map(|a| a.omitted).collect();
    assert_eq!(cut.len(), 9);
    assert!(cut.iter().all(|o| o.head + o.bytes + o.tail == 6 << 20), "{cut:?}");
}

#[tokio::test]
async fn a_patch_judged_before_is_not_evaluated_again_and_an_empty_one_not_at_all() {
    let (runner, runtime, services) = runner(false).await;
    services.verdicts.lock().unwrap().insert(vcurve_record::trajectory::sha256_hex(PATCH.as_bytes()), false);
    let JobReport::Outcome(o) = runner.run(base_run(), CancellationToken::new()).await else { panic!() };
    assert_eq!((o.success, o.judged), (false, Judged::Cached), "the cached verdict stands");
    assert_eq!(runtime.count(Op::Create), 1, "no evaluation container");

    let (runner, runtime, services) = self::runner(true).await;
    let JobReport::Outcome(o) = runner.run(base_run(), CancellationToken::new()).await else { panic!() };
    assert_eq!((o.success, o.judged), (false, Judged::EmptyPatch));
    assert_eq!((runtime.count(Op::Create), *services.lookups.lock().unwrap()), (1, 0));
}

#[tokio::test]
async fn a_continuation_resumes_from_its_step_in_a_replayed_state_and_a_replay_commits_anchors() {
    let (_, recorded) = recorded_base_run().await;
    let payload = payload_of(&recorded);
    let (runner, runtime, services) = runner(false).await;
    let replay = job(JobKey::Replay { study: "s".into(), trajectory: "calc-1-base0".into() }, payload.clone(), 20);
    let report = runner.run(replay, CancellationToken::new()).await;
    let JobReport::Replayed(replayed) = report else { panic!("{report:?}") };
    assert_eq!(replayed.anchors, vec![5, 10, 12]);
    let fingerprints = replayed.fingerprints.expect("fingerprints recorded at every step");
    assert!(services.files.lock().unwrap().contains_key(&fingerprints));
    assert_eq!(runner.snapshot_trajectories(), vec![payload.digest()]);

    let key =
        ContinuationKey { study: "s".into(), trajectory: "calc-1-base0".into(), series: Series::Main, t: 7, seed: 0 };
    let execs_before = runtime.count(Op::Exec);
    let report = runner.run(job(JobKey::Continuation(key), payload, 13), CancellationToken::new()).await;
    let JobReport::Outcome(o) = report else { panic!("{report:?}") };
    // Resumed after step 7: six more steps, the same plan.
    assert_eq!((o.steps, o.end_type, o.success), (6, EndType::Submitted, true));
    // From the anchor at 5: steps 6 and 7 replayed, then the agent's six, then the evaluation.
    let commands = runtime.commands()[execs_before..].to_vec();
    assert_eq!(commands[0], recorded.steps[5].actions[0].command);
    assert_eq!(commands[1], recorded.steps[6].actions[0].command);
    assert!(runner.held_snapshots().contains(&(runner.snapshot_trajectories()[0].clone(), 7)), "h_7 committed");
    assert!(runtime.running().is_empty());
}

#[tokio::test]
async fn a_continuation_on_another_host_starts_from_the_registry_snapshot_its_job_names() {
    let (_, recorded) = recorded_base_run().await;
    let payload = payload_of(&recorded);
    // Two hosts sharing a registry: A replays and pushes the anchors.
    let host = |registry: Option<crate::sandbox::container::double::FakeRegistry>| async move {
        let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
        runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
        if let Some(registry) = registry {
            runtime.use_registry(registry);
        }
        let runner =
            AgentProcessRunner::start_with_registry(runtime.clone(), "w", 1 << 30, Some("reg.test:5000".into()))
                .await
                .unwrap();
        offer_scripted(&runner);
        runner.attach(Arc::new(Services::default()));
        (runner, runtime)
    };
    let (a, runtime_a) = host(None).await;
    assert_eq!(a.snapshot_registry().as_deref(), Some("reg.test:5000"));
    let replay = job(JobKey::Replay { study: "s".into(), trajectory: "calc-1-base0".into() }, payload.clone(), 20);
    assert!(matches!(a.run(replay, CancellationToken::new()).await, JobReport::Replayed(_)));
    a.inner.snapshots.pushes_done().await;
    let pushed = a.take_pushed();
    assert_eq!(pushed.iter().map(|p| p.t).collect::<std::collections::BTreeSet<_>>(), [5, 10, 12].into());
    // B holds nothing; its continuation from h_7 names A's h_5.
    let (b, runtime_b) = host(Some(runtime_a.registry())).await;
    let key =
        ContinuationKey { study: "s".into(), trajectory: "calc-1-base0".into(), series: Series::Main, t: 7, seed: 0 };
    let mut continuation = job(JobKey::Continuation(key), payload, 13);
    continuation.registry_snapshot = pushed.into_iter().find(|p| p.t == 5);
    let execs_before = runtime_b.count(Op::Exec);
    let report = b.run(continuation, CancellationToken::new()).await;
    let JobReport::Outcome(o) = report else { panic!("{report:?}") };
    assert_eq!((o.steps, o.end_type, o.success), (6, EndType::Submitted, true));
    assert_eq!(runtime_b.count(Op::Pull), 1);
    // Pulled h_5, then replayed steps 6 and 7 only.
    let commands = runtime_b.commands()[execs_before..].to_vec();
    assert_eq!(commands[0], recorded.steps[5].actions[0].command);
    let stats = b.snapshot_stats();
    assert_eq!((stats.pulls, stats.hits_registry, stats.rebuilds), (1, 1, 0));
    assert!(runtime_b.running().is_empty());
}

#[tokio::test]
async fn an_evaluation_rechecks_a_patch_the_coordinator_keeps() {
    let (_, recorded) = recorded_base_run().await;
    let payload = payload_of(&recorded);
    let (runner, _, services) = runner(false).await;
    let sha = services.put_file(PATCH.as_bytes()).await.unwrap();
    let key = JobKey::Evaluation { study: "s".into(), task: "calc-1".into(), patch_sha256: sha, round: 1 };
    assert_eq!(
        runner.run(job(key, payload.clone(), 0), CancellationToken::new()).await,
        JobReport::Evaluated { resolved: true }
    );
    let missing =
        JobKey::Evaluation { study: "s".into(), task: "calc-1".into(), patch_sha256: "0".repeat(64), round: 1 };
    let report = runner.run(job(missing, payload, 0), CancellationToken::new()).await;
    assert!(matches!(&report, JobReport::NoOutcome { reason } if reason.contains("no file")), "{report:?}");
}

#[tokio::test]
async fn bad_options_and_missing_services_are_no_outcomes() {
    let (runner, _, _) = runner(false).await;
    // Options that do not parse are refused as the job arrives (`lease::wire`); a job of
    // another runner is refused here.
    let mut bad = base_run();
    bad.runner = RunnerSpec::Synthetic(Default::default());
    let report = runner.run(bad, CancellationToken::new()).await;
    assert!(
        matches!(&report, JobReport::NoOutcome { reason } if reason.contains("a job of the synthetic runner")),
        "{report:?}"
    );

    let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
    runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
    let unattached = AgentProcessRunner::start(runtime, "w2", 1 << 30).await.unwrap();
    // Without the study's agent registered: a no-outcome naming it, and no agent offered.
    let report = unattached.run(base_run(), CancellationToken::new()).await;
    assert!(
        matches!(&report, JobReport::NoOutcome { reason } if reason.contains("offers no agent \"scripted\"")),
        "{report:?}"
    );
    assert!(unattached.agents().is_empty());
    offer_scripted(&unattached);
    assert_eq!(unattached.agents(), ["scripted"]);
    let runners = crate::Runners::new().with(unattached.clone()).with(crate::SyntheticRunner);
    assert_eq!((runners.agents(), runners.capabilities()), (vec!["scripted".to_owned()], vec!["synthetic".to_owned()]));
    let report = unattached.run(base_run(), CancellationToken::new()).await;
    assert!(matches!(&report, JobReport::NoOutcome { reason } if reason.contains("services")), "{report:?}");
}

#[tokio::test]
async fn an_engine_error_during_an_exec_is_a_no_outcome_never_an_observation() {
    // Issue 24: after a fork bomb the engine's `OCI runtime exec failed …` was recorded as the
    // step's output. A runtime error during the agent's exec ends the run as a no-outcome.
    let (runner, runtime, services) = runner(false).await;
    let engine = "the engine could not start a command in container c: OCI runtime exec failed: fork";
    runtime.fail_next(Op::Exec, crate::sandbox::container::RuntimeError::Engine(engine.into()));
    let report = runner.run(base_run(), CancellationToken::new()).await;
    let JobReport::NoOutcome { reason } = &report else { panic!("{report:?}") };
    assert!(reason.contains("infrastructure failure") && reason.contains(engine), "{reason}");
    assert!(services.files.lock().unwrap().is_empty(), "nothing recorded or uploaded");
    assert!(runtime.running().is_empty(), "the run's container is removed");
}

fn session_job(options: serde_json::Value, instructions: Option<Vec<String>>) -> JobSpec {
    let key = JobKey::Session { study: "s".into(), task: "calc-1".into() };
    let payload = TrajectoryPayload { instructions, ..TrajectoryPayload::of_task(&task()) };
    let mut spec = job(key, payload, 10);
    spec.runner = RunnerSpec::parse(AGENT, options).unwrap();
    spec
}

fn paper_instructions() -> Option<Vec<String>> {
    Some(crate::runners::task_session::PAPER_INSTRUCTIONS.map(str::to_owned).to_vec())
}

#[tokio::test]
async fn a_session_job_uploads_its_recorded_session() {
    let (runner, runtime, services) = runner(false).await;
    let options = serde_json::json!({"agent": "scripted", "model": {"session": {"fix": "correct"}}});
    let report = runner.run(session_job(options, paper_instructions()), CancellationToken::new()).await;
    let JobReport::SessionRecorded { recorded } = &report else { panic!("{report:?}") };
    let bytes = services.files.lock().unwrap()[recorded].clone();
    let recorded: vcurve_record::task_state::RecordedSession = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(recorded.session.checkpoints(), 4);
    assert_eq!(recorded.checkpoints.iter().map(|c| c.k).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(recorded.checkpoints.iter().all(|c| c.fixed.is_some()), "every checkpoint judged");
    assert_eq!(recorded.history_ends.len(), 4);
    assert!(recorded.history_ends.windows(2).all(|w| w[0] < w[1]));
    for (k, end) in recorded.history_ends.iter().enumerate() {
        assert_eq!(recorded.messages[end - 1]["content"], recorded.session.turns[k].report.text.as_str());
    }
    let jobs: BTreeSet<String> = runtime
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Create { labels, .. } => labels.get(labels::JOB).cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(jobs, BTreeSet::from(["s/calc-1/session".to_string()]), "its containers carry its key");
    assert_eq!(runtime.running().len(), 0, "its containers are removed");
}

#[tokio::test]
async fn a_session_job_needs_its_instructions_and_is_capped_by_the_studys_cap() {
    let (runner, runtime, _) = runner(false).await;
    let options = serde_json::json!({"agent": "scripted"});
    let report = runner.run(session_job(options, None), CancellationToken::new()).await;
    assert_eq!(report, JobReport::no_outcome("a session's payload carries no instructions"));
    assert_eq!(runtime.count(Op::Create), 0, "nothing started");

    let runtime = Arc::new(FakeRuntime::with_handler(handler(false)));
    runtime.add_image(IMAGE, [("/testbed/README.md", "calc")]);
    let runner = AgentProcessRunner::start(runtime.clone(), "w1", 1 << 30).await.unwrap();
    let mut registry = AgentRegistry::new();
    registry.register_flag("sleeper=sleep 30", std::path::Path::new(".")).unwrap();
    assert!(runner.use_agents(registry));
    runner.attach(Arc::new(Services::default()));
    let options = serde_json::json!({"agent": "sleeper", "run_timeout_s": 1});
    let report = runner.run(session_job(options, paper_instructions()), CancellationToken::new()).await;
    let JobReport::Capped { reason } = &report else { panic!("{report:?}") };
    assert!(reason.contains("longer than its 1 s"), "{reason}");
    assert_eq!(runtime.running().len(), 0, "its container is removed");
}

#[tokio::test]
async fn a_model_call_is_not_the_agent_runners() {
    let (runner, _, _) = runner(false).await;
    let mut spec = base_run();
    spec.key = JobKey::ModelCall { study: "s".into(), call: "calc-1/k1/atoms".into() };
    let report = runner.run(spec, CancellationToken::new()).await;
    let JobReport::NoOutcome { reason } = &report else { panic!("{report:?}") };
    assert!(reason.contains("model-call runner"), "{reason}");
}
