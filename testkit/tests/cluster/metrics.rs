//! The Prometheus endpoints of the coordinator and the worker, scraped over HTTP and read with a
//! strict parser of the text format 0.0.4: after a synthetic study on SQLite the coordinator's
//! counts equal the store's and the worker's jobs equal what it reported; container operations
//! go through the metered runtime wrapping the test double; the token rules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vcurve_coordinator::core::Coordinator;
use vcurve_coordinator::model::{StudyId, StudyState};
use vcurve_coordinator::server::Tokens;
use vcurve_coordinator::testing::{Tr, spec};
use vcurve_testkit::prometheus::{get, parse};
use vcurve_testkit::wait;
use vcurve_worker::metrics::{MeteredRuntime, SnapshotUsage, WorkerMetrics};
use vcurve_worker::sandbox::container::double::{FakeRuntime, Op};
use vcurve_worker::sandbox::container::{
    Container, ContainerRuntime, ContainerSpec, ExecRequest, RuntimeError, labels,
};

async fn wait_until_done(coordinator: &Coordinator<vcurve_coordinator::store::SqlStore>, study: &StudyId) {
    wait::until(Duration::from_secs(120), "the study finishes", async || {
        let p = coordinator.progress(study).await.unwrap();
        if p.state == StudyState::Done { Ok(()) } else { Err(p.state) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_and_worker_endpoints_count_what_the_store_and_the_worker_did() {
    let mut web = crate::cluster().await.tokens("w-token", "c-token").metrics().start().await;
    let (coordinator, web_addr) = (web.coordinator().clone(), web.metrics_addr().unwrap().to_string());

    // Before any study: no study, and the workers (none yet) counted all the same.
    let (status, content_type, body) = get(&web_addr, "/metrics", Some("c-token")).await;
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let empty = parse(&body);
    assert_eq!(empty.get("vcurve_studies{state=\"running\"}"), 0.0);
    assert_eq!(empty.get("vcurve_workers{}"), 0.0);
    assert_eq!(empty.histogram_count("vcurve_lease_latency_seconds", ""), 0.0);

    let trs = [
        Tr { id: "alpha", length: 30, cliff: 12, p: 0.9, labels: "" },
        Tr { id: "beta", length: 40, cliff: 25, p: 0.7, labels: "" },
    ];
    let (yaml, files) = spec("metrics-study", "", &trs);
    let study = coordinator.launch(&yaml, &files).await.unwrap();
    let worker_metrics = Arc::new(WorkerMetrics::new());
    let worker_web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let worker_addr = worker_web.local_addr().unwrap().to_string();
    let s = web.stop_token();
    let worker_web_task = tokio::spawn(vcurve_worker::metrics::serve(
        worker_metrics.clone(),
        worker_web,
        Some("m-token".into()),
        async move { s.cancelled().await },
    ));
    let mut config = web.worker_config();
    config.slots = 2;
    let runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
    web.spawn_worker(config, runners, Some(worker_metrics.clone()));
    wait_until_done(&coordinator, &study).await;

    // The coordinator: the store's counts, exactly; the worker is live and idle.
    let progress = coordinator.progress(&study).await.unwrap();
    let (status, _, body) = get(&web_addr, "/metrics", Some("c-token")).await;
    assert_eq!(status, 200, "{body}");
    let m = parse(&body);
    let of = |state: &str| m.get(&format!("vcurve_continuations{{state=\"{state}\",study=\"{study}\"}}"));
    assert!(progress.done > 0);
    assert_eq!(of("done"), progress.done as f64);
    assert_eq!(of("retired"), progress.retired as f64);
    assert_eq!((of("pending"), of("running")), (0.0, 0.0));
    assert_eq!(m.get("vcurve_studies{state=\"done\"}"), 1.0);
    assert_eq!(m.get("vcurve_studies{state=\"running\"}"), 0.0);
    assert_eq!(m.get(&format!("vcurve_trajectories_non_replayable{{study=\"{study}\"}}")), 0.0);
    // A finished study has no trajectory left in a stage.
    assert!(!m.has_family("vcurve_trajectories_in_stage"), "{body}");
    assert!(!m.has_family("vcurve_continuations_pending_by_stage"), "{body}");
    assert_eq!((m.get("vcurve_workers{}"), m.get("vcurve_workers_slots{}")), (1.0, 2.0));
    assert_eq!(m.get("vcurve_workers_slots_busy{}"), 0.0);
    // A synthetic study judges no patch: no evaluation series.
    assert!(!m.has_family("vcurve_evaluations_total") && !m.has_family("vcurve_evaluation_cache_hits_total"));
    assert!(!m.types.contains_key("vcurve_evaluation_flakes_total"), "an empty family is left out");
    assert_eq!(m.types.get("vcurve_continuations").map(String::as_str), Some("gauge"));
    // Every lease that handed out work is in the histogram, as in the p50/p99 of the progress.
    let leases = m.histogram_count("vcurve_lease_latency_seconds", "");
    assert_eq!(leases, progress.lease_latency.unwrap().leases as f64);

    // The worker, stopped: every job ended and was reported; none runs.
    let summary = web.stop_workers().await.remove(0);
    let (status, content_type, body) = get(&worker_addr, "/metrics", Some("m-token")).await;
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let w = parse(&body);
    assert_eq!((w.get("vcurve_worker_slots{}"), w.get("vcurve_worker_jobs_running{}")), (2.0, 0.0));
    let jobs = |result: &str| {
        let key = format!("vcurve_worker_jobs_total{{kind=\"continuation\",result=\"{result}\"}}");
        w.samples.get(&key).copied().unwrap_or(0.0)
    };
    assert_eq!(jobs("outcome") + jobs("no_outcome"), summary.reported as f64, "{body}");
    assert_eq!(jobs("no_outcome"), summary.no_outcomes as f64);
    assert_eq!(summary.accepted, summary.reported);
    assert_eq!(jobs("outcome"), progress.done as f64, "the worker's outcomes are the store's");
    assert_eq!(
        w.histogram_count("vcurve_worker_job_duration_seconds", "kind=\"continuation\""),
        summary.reported as f64
    );
    // The synthetic runner starts no container, and there is no snapshot cache to read.
    assert!(!w.has_family("vcurve_worker_container_operation_duration_seconds"));
    assert_eq!(w.get("vcurve_worker_snapshot_bytes{}"), 0.0);

    // Tokens: a bearer token, the client's (the worker's own for the worker's endpoint).
    for bad in [None, Some("wrong"), Some("w-token")] {
        assert_eq!(get(&web_addr, "/metrics", bad).await.0, 401, "{bad:?}");
        assert_eq!(get(&worker_addr, "/metrics", bad).await.0, 401, "{bad:?}");
    }
    assert_eq!(get(&web_addr, "/metrics?token=c-token", None).await.0, 401, "only as a bearer token");

    web.shutdown().await;
    worker_web_task.await.unwrap().unwrap();
}

#[tokio::test]
async fn container_operations_are_timed_through_the_metered_runtime() {
    let fake = Arc::new(FakeRuntime::new());
    fake.add_image("task", [("/testbed/a.py", "a\n")]);
    // The worker's state directory: its lineage adopts the snapshot labelled with it.
    let state = tempfile::tempdir().unwrap();
    let instance = vcurve_worker::sandbox::instance::Instance::open(state.path(), "metrics-test").unwrap();
    let snapshot_labels = BTreeMap::from([
        (labels::MANAGED.to_string(), "1".to_string()),
        (labels::LINEAGE.to_string(), instance.lineage().to_string()),
        (labels::SNAPSHOT_TRAJECTORY.to_string(), "ab".repeat(32)),
        (labels::SNAPSHOT_T.to_string(), "3".to_string()),
        (vcurve_worker::sandbox::replay::CHANGES_LABEL.to_string(), String::new()),
    ]);
    fake.add_image_with("vcurve-snapshot:abababababababab-3", [("/testbed/a.py", "b\n")], snapshot_labels, 4096);
    let metrics = Arc::new(WorkerMetrics::new());
    let metered: Arc<dyn ContainerRuntime> = Arc::new(MeteredRuntime::new(fake.clone(), metrics.clone()));
    let agent = vcurve_worker::AgentProcessRunner::start_in(metered.clone(), instance, 1 << 30, None).await.unwrap();
    let cache = agent.clone();
    metrics.watch_snapshots(move || SnapshotUsage {
        bytes: cache.snapshot_bytes(),
        snapshots: cache.held_snapshots().len() as u64,
        budget_bytes: 1 << 30,
    });

    let spec = ContainerSpec {
        image: "task".into(),
        memory_bytes: 1 << 30,
        pids_limit: 256,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    };
    let container = Container::start(metered.clone(), &spec).await.unwrap();
    let exec = |argv: &str| ExecRequest {
        argv: vec!["bash".into(), "-c".into(), argv.into()],
        env: BTreeMap::new(),
        workdir: "/testbed".into(),
        timeout: Duration::from_secs(10),
        leave_running: false,
        reaps_itself: false,
    };
    container.exec(&exec("echo 1 > one")).await.unwrap();
    // A listing of containers (start-up lists them only when a dead predecessor left some).
    metered.containers(&BTreeMap::from([(labels::MANAGED.to_string(), "1".to_string())])).await.unwrap();
    fake.fail_next(Op::Exec, RuntimeError::Engine("injected".into()));
    assert!(container.exec(&exec("echo 2 > two")).await.is_err());
    container.commit("vcurve-test:one", &BTreeMap::new()).await.unwrap();
    container.remove().await.unwrap();
    assert!(Container::start(metered.clone(), &ContainerSpec { image: "gone".into(), ..spec }).await.is_err());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let server =
        tokio::spawn(vcurve_worker::metrics::serve(metrics, listener, None, async move { s.cancelled().await }));
    let (status, _, body) = get(&addr, "/metrics", None).await;
    assert_eq!(status, 200, "{body}");
    let m = parse(&body);
    let name = "vcurve_worker_container_operation_duration_seconds";
    // Each operation's count is the double's count of that call, start-up's listings included.
    for (operation, op) in [
        ("start", Op::Create),
        ("exec", Op::Exec),
        ("commit", Op::Commit),
        ("remove", Op::Remove),
        ("list_containers", Op::Containers),
        ("list_images", Op::Images),
    ] {
        let count = m.histogram_count(name, &format!("operation=\"{operation}\""));
        assert_eq!(count, fake.count(op) as f64, "{operation}");
    }
    assert_eq!(fake.count(Op::Create), 2);
    assert_eq!(fake.count(Op::Exec), 2);
    let errors = |operation: &str| {
        m.samples.get(&format!("vcurve_worker_container_operation_errors_total{{operation=\"{operation}\"}}")).copied()
    };
    assert_eq!((errors("exec"), errors("start"), errors("commit")), (Some(1.0), Some(1.0), None));
    assert_eq!(m.get("vcurve_worker_snapshot_bytes{}"), 4096.0);
    assert_eq!(m.get("vcurve_worker_snapshots{}"), 1.0);
    assert_eq!(m.get("vcurve_worker_snapshot_budget_bytes{}"), f64::from(1u32 << 30));
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_public_metrics_listener_needs_the_client_token() {
    let dir = tempfile::tempdir().unwrap();
    let args = vcurve_cli::commands::CoordinatorSettings {
        store: format!("sqlite://{}", dir.path().join("store.sqlite").display()),
        listen: "127.0.0.1:0".into(),
        tokens: Tokens::default(),
        tls_cert: None,
        tls_key: None,
        lease_timeout: Duration::from_secs(30),
        heartbeat_interval: Duration::from_secs(10),
        dashboard: None,
        metrics: Some("0.0.0.0:0".into()),
    };
    let err = format!("{:#}", vcurve_cli::commands::run_coordinator(args).await.unwrap_err());
    assert!(err.contains("refusing to serve metrics") && err.contains("client token"), "{err}");

    let config = vcurve_worker::WorkerConfig::new("http://127.0.0.1:1");
    let at = vcurve_cli::commands::WorkerMetricsSettings { addr: "0.0.0.0:0".into(), token: None };
    let err = format!(
        "{:#}",
        vcurve_cli::commands::run_worker(config.clone(), Default::default(), Some(at)).await.unwrap_err()
    );
    assert!(err.contains("refusing to serve metrics") && err.contains("client token"), "{err}");
    let mut config = config;
    config.token = Some("same".into());
    let at = vcurve_cli::commands::WorkerMetricsSettings { addr: "0.0.0.0:0".into(), token: Some("same".into()) };
    let err =
        format!("{:#}", vcurve_cli::commands::run_worker(config, Default::default(), Some(at)).await.unwrap_err());
    assert!(err.contains("worker token"), "{err}");
}
