//! The Prometheus endpoints of the coordinator and the worker, scraped over HTTP and read with a
//! strict parser of the text format 0.0.4: after a synthetic study on SQLite the coordinator's
//! counts equal the store's and the worker's jobs equal what it reported; container operations
//! go through the metered runtime wrapping the test double; the token rules.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use vcurve_coordinator::core::Coordinator;
use vcurve_coordinator::model::StudyState;
use vcurve_coordinator::server::Tokens;
use vcurve_coordinator::testing::{Tr, spec};
use vcurve_worker::metrics::{MeteredRuntime, SnapshotUsage, WorkerMetrics};
use vcurve_worker::sandbox::container::double::{FakeRuntime, Op};
use vcurve_worker::sandbox::container::{
    Container, ContainerRuntime, ContainerSpec, ExecRequest, RuntimeError, labels,
};

/// `GET path` over HTTP/1.1 with an optional bearer token: (status, content type, body).
async fn get(addr: &str, path: &str, bearer: Option<&str>) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_string))
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// A scrape parsed strictly: every line is `# HELP`, `# TYPE` or a sample of a declared family,
/// names and labels well formed, no sample twice. Samples by `name{k="v",…}` (labels sorted).
#[derive(Debug)]
struct Exposition {
    types: HashMap<String, String>,
    samples: BTreeMap<String, f64>,
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse(text: &str) -> Exposition {
    let mut types = HashMap::new();
    let mut helped = std::collections::HashSet::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(valid_name(name) && helped.insert(name.to_string()), "bad or repeated HELP: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(valid_name(name), "{line}");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "TYPE twice: {line}");
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        assert!(valid_name(name), "{line}");
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").expect(line);
            assert!(valid_name(key), "bad label in {line}");
            let end = after.find('"').expect(line);
            assert!(!after[..end].contains('\\'), "escapes are not expected here: {line}");
            pairs.push((key.to_string(), after[..end].to_string()));
            rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| types.get(*f).is_some_and(|t| t == "histogram")))
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample of an undeclared family: {line}");
        pairs.sort();
        let key =
            format!("{name}{{{}}}", pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect::<Vec<_>>().join(","));
        assert!(samples.insert(key, value).is_none(), "sample twice: {line}");
    }
    Exposition { types, samples }
}

impl Exposition {
    /// The sample `series` (`name{k="v",…}` with labels sorted).
    fn get(&self, series: &str) -> f64 {
        *self.samples.get(series).unwrap_or_else(|| panic!("no sample {series} in {:#?}", self.samples))
    }

    fn has_family(&self, prefix: &str) -> bool {
        self.samples.keys().any(|k| k.starts_with(prefix))
    }

    /// A histogram's buckets are cumulative and its `+Inf` bucket is its count; returns the count.
    fn histogram_count(&self, name: &str, labels: &str) -> f64 {
        assert_eq!(self.types.get(name).map(String::as_str), Some("histogram"), "{name}");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter_map(|(k, v)| {
                let inner = k.strip_prefix(&format!("{name}_bucket{{"))?.strip_suffix('}')?;
                let mut le = None;
                let rest: Vec<&str> = inner
                    .split(',')
                    .filter(|p| match p.strip_prefix("le=\"") {
                        Some(b) => {
                            le = Some(b.trim_end_matches('"').to_string());
                            false
                        }
                        None => true,
                    })
                    .collect();
                (rest.join(",") == labels).then(|| {
                    let le = le.unwrap();
                    (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v)
                })
            })
            .collect();
        assert!(!buckets.is_empty(), "no buckets of {name}{{{labels}}}");
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "buckets not cumulative: {buckets:?}");
        let count = self.get(&format!("{name}_count{{{labels}}}"));
        assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count), "+Inf bucket is the count");
        assert!(self.samples.contains_key(&format!("{name}_sum{{{labels}}}")), "no sum of {name}{{{labels}}}");
        count
    }
}

async fn wait_until_done(coordinator: &Coordinator<vcurve_coordinator::store::SqlStore>, study: &str) {
    for _ in 0..1200 {
        if coordinator.progress(study).await.unwrap().state == StudyState::Done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the study did not finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_and_worker_endpoints_count_what_the_store_and_the_worker_did() {
    let web = common::InProcess::start(vcurve_coordinator::metrics::router, "metrics").await;
    let (coordinator, grpc_url, web_addr) = (web.coordinator.clone(), web.grpc_url.clone(), web.web_addr.clone());

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
    let s = web.stop();
    let worker_web_task = tokio::spawn(vcurve_worker::metrics::serve(
        worker_metrics.clone(),
        worker_web,
        Some("m-token".into()),
        async move { s.cancelled().await },
    ));
    let worker_stop = CancellationToken::new();
    let mut config = vcurve_worker::WorkerConfig::new(grpc_url);
    config.slots = 2;
    config.token = Some("w-token".into());
    let ws = worker_stop.clone();
    let worker = tokio::spawn(vcurve_worker::run_with_metrics(
        config,
        vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner),
        Some(worker_metrics.clone()),
        async move { ws.cancelled().await },
    ));
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
    worker_stop.cancel();
    let summary = worker.await.unwrap().unwrap();
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
    let snapshot_labels = BTreeMap::from([
        (labels::MANAGED.to_string(), "1".to_string()),
        (labels::SNAPSHOT_TRAJECTORY.to_string(), "ab".repeat(32)),
        (labels::SNAPSHOT_T.to_string(), "3".to_string()),
        (vcurve_worker::sandbox::replay::CHANGES_LABEL.to_string(), String::new()),
    ]);
    fake.add_image_with("vcurve-snapshot:abababababababab-3", [("/testbed/a.py", "b\n")], snapshot_labels, 4096);
    let metrics = Arc::new(WorkerMetrics::new());
    let metered: Arc<dyn ContainerRuntime> = Arc::new(MeteredRuntime::new(fake.clone(), metrics.clone()));
    let agent = vcurve_worker::AgentProcessRunner::start(metered.clone(), "metrics-test", 1 << 30).await.unwrap();
    let cache = agent.clone();
    metrics.watch_snapshots(move || SnapshotUsage {
        bytes: cache.snapshot_bytes(),
        snapshots: cache.held_snapshots().len() as u64,
        budget_bytes: 1 << 30,
    });

    let spec = ContainerSpec { image: "task".into(), memory_bytes: 1 << 30, pids_limit: 256, labels: BTreeMap::new() };
    let container = Container::start(metered.clone(), &spec).await.unwrap();
    let exec = |argv: &str| ExecRequest {
        argv: vec!["bash".into(), "-c".into(), argv.into()],
        env: BTreeMap::new(),
        workdir: "/testbed".into(),
        timeout: Duration::from_secs(10),
    };
    container.exec(&exec("echo 1 > one")).await.unwrap();
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

/// The binary: `vcurve coordinator --metrics` serves the endpoint, and `VCURVE_LOG_FORMAT=json`
/// makes its logs JSON lines with structured fields.
#[tokio::test]
async fn the_coordinator_binary_serves_metrics_and_logs_json_lines() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_vcurve"))
        .args(["coordinator", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--store"])
        .arg(format!("sqlite://{}", dir.path().join("store.sqlite").display()))
        .env("VCURVE_LOG_FORMAT", "json")
        .env_remove("VCURVE_LOG")
        .env_remove("RUST_LOG")
        .env_remove("VCURVE_CLIENT_TOKEN")
        .env_remove("VCURVE_WORKER_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    // Read until both the metrics address and the JSON log of the metrics listener are in.
    let (lines, addr) = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let mut addr = None;
        let mut logged = false;
        for line in (&mut stderr).lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("vcurve metrics on http://") {
                addr = rest.strip_suffix("/metrics").map(str::to_string);
            }
            logged |= line.contains("metrics listening");
            lines.push(line);
            if addr.is_some() && logged {
                break;
            }
        }
        // Keep draining: a coordinator writing to a closed pipe is not what is tested here.
        std::thread::spawn(move || for _ in stderr.lines() {});
        (lines, addr)
    })
    .await
    .unwrap();
    let addr = addr.unwrap_or_else(|| panic!("no metrics address in {lines:#?}"));
    let (status, content_type, body) = get(&addr, "/metrics", None).await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    assert_eq!(parse(&body).get("vcurve_studies{state=\"running\"}"), 0.0);
    let logs: Vec<serde_json::Value> =
        lines.iter().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let listening = logs
        .iter()
        .find(|l| l["fields"]["message"] == "metrics listening")
        .unwrap_or_else(|| panic!("no JSON log of the metrics listener in {lines:#?}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["fields"]["addr"], addr.as_str());
}
