//! The coordinator over real gRPC on loopback: authentication, TLS, and a small cluster of
//! in-process workers running a study to the end.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vcurve_cli::client::{self, Connection};
use vcurve_coordinator::core::{Coordinator, Timing};
use vcurve_coordinator::server::{self, ServeError, ServeOptions, Tokens};
use vcurve_coordinator::store::LeasePolicy;
use vcurve_coordinator::testing::{Tr, spec};
use vcurve_proto::v1;
use vcurve_proto::v1::worker_service_client::WorkerServiceClient;
use vcurve_testkit::cluster::{self, Cluster};
use vcurve_testkit::store::TestStore;
use vcurve_testkit::wait;

struct Running {
    url: String,
    cluster: cluster::Running,
}

impl Running {
    async fn stop(self) {
        self.cluster.shutdown().await;
    }
}

/// The in-process cluster of these tests, without workers: a fresh store, short timings, the
/// runner double of the recorded-trajectory tests below accepted; `https://localhost` with TLS.
fn cluster(sqlite: Cluster) -> Cluster {
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 5_000 },
        heartbeat_interval: Duration::from_millis(500),
        max_lease_wait: Duration::from_millis(200),
    };
    sqlite.timing(timing).renderer(vcurve_cli::render::ReportRenderer::shared()).accept_runner_kind("double")
}

async fn start(options: ServeOptions) -> Running {
    let tls = options.tls.is_some();
    let cluster = cluster(Cluster::sqlite().await).serve(options).start().await;
    let port = cluster.grpc_addr().port();
    let url = if tls { format!("https://localhost:{port}") } else { format!("http://127.0.0.1:{port}") };
    Running { url, cluster }
}

fn tokens() -> Tokens {
    Tokens { worker: Some("worker-secret".into()), client: Some("client-secret".into()) }
}

async fn list(url: &str, token: Option<&str>, tls_ca: Option<std::path::PathBuf>) -> Result<usize, tonic::Status> {
    let connection = Connection { url: url.into(), token: token.map(str::to_string), tls_ca };
    let mut c = client::study_client(&connection).await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    Ok(c.list_studies(v1::ListStudiesRequest {}).await?.into_inner().studies.len())
}

#[tokio::test]
async fn clients_and_workers_need_their_own_tokens() {
    let server = start(ServeOptions { tokens: tokens(), tls: None }).await;
    assert_eq!(list(&server.url, Some("client-secret"), None).await.unwrap(), 0);
    for token in [None, Some("wrong"), Some("worker-secret"), Some("client-secre")] {
        let err = list(&server.url, token, None).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    // The worker service takes the worker token only.
    let channel = client::channel(&Connection { url: server.url.clone(), ..Default::default() }).await.unwrap();
    let register = v1::RegisterRequest {
        name: "w".into(),
        slots: 1,
        capabilities: vec!["synthetic".into()],
        protocol_version: vcurve_proto::PROTOCOL_VERSION.into(),
        agents: vec![],
        networks: vec![],
        model_endpoints: vec![],
    };
    for (token, ok) in [(Some("worker-secret"), true), (Some("client-secret"), false), (None, false)] {
        let mut w = WorkerServiceClient::with_interceptor(channel.clone(), client::bearer(token).unwrap());
        let r = w.register(register.clone()).await;
        assert_eq!(r.is_ok(), ok, "{token:?}: {r:?}");
        if !ok {
            assert_eq!(r.unwrap_err().code(), tonic::Code::Unauthenticated);
        }
    }
    // A worker of another protocol major version is refused.
    let mut w = WorkerServiceClient::with_interceptor(channel.clone(), client::bearer(Some("worker-secret")).unwrap());
    let err = w.register(v1::RegisterRequest { protocol_version: "1.0".into(), ..register.clone() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    // An agent whose name cannot be one is refused, naming it.
    let bad = v1::RegisterRequest { agents: vec!["sh -c id".into()], ..register.clone() };
    let err = w.register(bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("sh -c id"), "{err:?}");
    // So is a network that is not one a study can name (`host` would share the host's stack).
    let bad = v1::RegisterRequest { networks: vec!["host".into()], ..register.clone() };
    let err = w.register(bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("\"host\" is not a network"), "{err:?}");
    // A report for an unknown key is answered, and changes nothing.
    let id = w.register(register).await.unwrap().into_inner().worker_id;
    let report = v1::ReportRequest {
        worker_id: id,
        key: Some(v1::JobKey {
            kind: v1::JobKind::Continuation.into(),
            study: "nope".into(),
            trajectory: "x".into(),
            series: "main".into(),
            ..Default::default()
        }),
        attempt: 1,
        result: Some(v1::report_request::Result::Outcome(v1::Outcome {
            success: true,
            steps: 3,
            end_type: v1::EndType::Submitted.into(),
            patch_sha256: String::new(),
            judged: v1::Judged::Evaluated.into(),
            recorded_digest: String::new(),
        })),
        duration_ms: 1,
    };
    let r = w.report(report.clone()).await.unwrap().into_inner();
    assert!(!r.accepted && r.detail.contains("unknown key"), "{r:?}");
    let mut bad = report;
    bad.key.as_mut().unwrap().series = "sideways".into();
    assert_eq!(w.report(bad).await.unwrap_err().code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

#[tokio::test]
async fn a_public_listener_needs_tokens() {
    let ts = TestStore::sqlite().await;
    let coordinator =
        Coordinator::new(ts.store.clone(), Timing::default(), vcurve_cli::render::ReportRenderer::shared());
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = server::serve(coordinator, listener, ServeOptions::default(), async {}).await.unwrap_err();
    assert!(matches!(err, ServeError::TokensRequired(_)), "{err}");
}

#[tokio::test]
async fn tls_serves_clients_that_trust_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let tls = Some((cert.cert.pem().into_bytes(), cert.signing_key.serialize_pem().into_bytes()));
    let server = start(ServeOptions { tokens: tokens(), tls }).await;
    assert_eq!(list(&server.url, Some("client-secret"), Some(ca)).await.unwrap(), 0);
    // Without the CA the handshake fails; plain HTTP/2 against a TLS port fails too.
    assert!(list(&server.url, Some("client-secret"), None).await.is_err());
    let plain = server.url.replace("https://localhost", "http://127.0.0.1");
    assert!(list(&plain, Some("client-secret"), None).await.is_err());
    server.stop().await;
}

/// Run a study with `workers` in-process workers of `slots` slots; return its export.
async fn run_cluster(workers: u32, slots: u32) -> BTreeMap<String, Vec<u8>> {
    let runners = vcurve_worker::Runners::new().with(vcurve_worker::SyntheticRunner);
    let mut server = cluster(Cluster::sqlite().await)
        .workers(workers, runners)
        .slots(slots)
        .lease_wait(Duration::from_millis(200))
        .start()
        .await;
    let url = server.grpc_url();
    let trs = [
        Tr { id: "alpha", length: 45, cliff: 17, p: 0.8, labels: "j: 17" },
        Tr { id: "beta", length: 60, cliff: 44, p: 0.6, labels: "j: 50, k: none" },
        Tr { id: "gamma", length: 30, cliff: 29, p: 1.0, labels: "" },
    ];
    let (yaml, files) = spec("cluster", "", &trs);
    let yaml = yaml.replace("duration_ms: 0", "duration_ms: 3, no_outcome_rate: 0.05");
    let mut c = client::study_client(&Connection { url, ..Default::default() }).await.unwrap();
    let study = client::upload_and_launch(&mut c, yaml, &files).await.unwrap();
    let mut max_running = 0;
    wait::until(Duration::from_secs(120), "the study finishes", async || {
        let p = c.get_progress(v1::ProgressRequest { study: study.clone() }).await.unwrap().into_inner();
        max_running = max_running.max(p.running);
        assert!(p.running <= u64::from(workers * slots), "more jobs running than slots: {p:?}");
        if p.state == "done" { Ok(()) } else { Err(p) }
    })
    .await;
    assert!(max_running > 0);
    server.stop_workers().await;
    // No key is held by anyone once the study is done.
    assert!(vcurve_coordinator::store::Store::leased(server.store()).await.unwrap().is_empty());
    let files: BTreeMap<String, Vec<u8>> = client::export(&mut c, &study).await.unwrap().into_iter().collect();
    // `vcurve export` writes the same files, piece by piece, and leaves no partial file.
    let dir = tempfile::tempdir().unwrap();
    let written = vcurve_cli::commands::export_into(&mut c, &study, dir.path()).await.unwrap();
    assert_eq!(written.len(), files.len());
    for (name, contents) in &files {
        assert!(std::fs::read(dir.path().join(name)).unwrap() == *contents, "{name} differs on disk");
    }
    let on_disk = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(on_disk, files.len(), "only the export's files are written");
    let missing = vcurve_cli::commands::export_into(&mut c, "no-such-study", &dir.path().join("none")).await;
    let err = format!("{:#}", missing.unwrap_err());
    assert!(err.contains("no-such-study"), "{err}");
    server.shutdown().await;
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_cluster_shape_ends_with_the_same_curves() {
    let one = run_cluster(1, 3).await;
    let three = run_cluster(3, 4).await;
    assert_eq!(
        one.keys().collect::<Vec<_>>(),
        vec!["analyses.json", "curves.csv", "evaluation.csv", "notes.csv", "results.json", "trajectories.csv"]
    );
    assert_eq!(one, three, "exports differ between cluster shapes");
}

/// A worker's runner double for recorded trajectories: it checks the payload it was handed and
/// reports every replay non-replayable at step 3.
struct MismatchAtThree;

impl vcurve_worker::AgentRunner for MismatchAtThree {
    fn kind(&self) -> &'static str {
        "double"
    }

    fn run(
        &self,
        job: vcurve_worker::JobSpec,
        _: CancellationToken,
    ) -> futures::future::BoxFuture<'static, vcurve_worker::JobReport> {
        Box::pin(async move {
            let recorded = job.trajectory.as_ref().and_then(|p| p.recorded.as_ref());
            match (&job.key, recorded) {
                (vcurve_worker::JobKey::Replay { .. }, Some(run)) if run.length() == 40 => {
                    vcurve_worker::JobReport::NonReplayable(vcurve_worker::NonReplayable {
                        step: 3,
                        level: vcurve_worker::CompareLevel::CharMultiset,
                        reason: "output differs at every level".into(),
                        recorded_excerpt: run.steps[2].actions[0].output.chars().take(20).collect(),
                        replayed_excerpt: "a random token".into(),
                        mismatch: Some(vcurve_record::jobs::MismatchKind::Observation),
                        command: Some(run.steps[2].actions[0].command.clone()),
                    })
                }
                _ => vcurve_worker::JobReport::no_outcome(format!("unexpected job {}", job.key)),
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_trajectory_is_uploaded_and_fetched_by_digest_and_its_non_replayable_report_is_exported() {
    let mut server = start(ServeOptions::default()).await;
    let run = vcurve_coordinator::testing::recorded_trajectory_with_output("task-big", 40, &"x".repeat(500_000));
    assert!(run.len() > 20_000_000, "{} bytes", run.len());
    let yaml = "name: big\nseed: 1\nrunner: {kind: double}\ntrajectories:\n  - id: big\n    recorded: runs/big.json\n";
    let files = BTreeMap::from([("runs/big.json".to_string(), run)]);
    let mut c = client::study_client(&Connection { url: server.url.clone(), ..Default::default() }).await.unwrap();
    let study = client::upload_and_launch(&mut c, yaml.into(), &files).await.unwrap();

    let mut config = server.cluster.worker_config();
    config.slots = 2;
    config.lease_wait = Duration::from_millis(200);
    server.cluster.spawn_worker(config, vcurve_worker::Runners::new().with(MismatchAtThree), None);
    let p = wait::until(Duration::from_secs(60), "the study finishes", async || {
        let p = c.get_progress(v1::ProgressRequest { study: study.clone() }).await.unwrap().into_inner();
        if p.state == "done" { Ok(p) } else { Err(p) }
    })
    .await;
    assert_eq!(p.trajectories_non_replayable, 1);
    let summary = server.cluster.stop_workers().await.remove(0);
    assert_eq!((summary.accepted, summary.no_outcomes, summary.trajectories_fetched), (1, 0, 1));

    let files: BTreeMap<String, Vec<u8>> = client::export(&mut c, &study).await.unwrap().into_iter().collect();
    let trajectories = String::from_utf8(files["trajectories.csv"].clone()).unwrap();
    assert!(trajectories.contains("\nbig,40,non_replayable,"), "{trajectories}");
    let results: serde_json::Value = serde_json::from_slice(&files["results.json"]).unwrap();
    let dropped = &results["trajectories"][0];
    assert_eq!(dropped["state"], "non_replayable");
    assert_eq!(dropped["non_replayable"]["step"], 3);
    assert_eq!(dropped["non_replayable"]["level"], "char_multiset");
    assert_eq!(dropped["non_replayable"]["reason"], "output differs at every level");
    assert_eq!(dropped["non_replayable"]["replayed_excerpt"], "a random token");
    // What differed and the command at that step come over the wire too.
    assert_eq!(dropped["non_replayable"]["mismatch"], "observation");
    assert!(dropped["non_replayable"]["command"].as_str().is_some_and(|c| !c.is_empty()), "{dropped}");
    server.stop().await;
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_before_it_is_sent() {
    let server = start(ServeOptions::default()).await;
    let mut c = client::study_client(&Connection { url: server.url.clone(), ..Default::default() }).await.unwrap();
    let big = "x".repeat((vcurve_coordinator::spec::MAX_FILE_BYTES + 1) as usize);
    let files = BTreeMap::from([("runs/huge.json".to_string(), big)]);
    let err = client::upload_and_launch(&mut c, "name: x\n".into(), &files).await.unwrap_err().to_string();
    assert!(err.contains("runs/huge.json") && err.contains("over the coordinator's limit of 64 MiB"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn one_token_for_both_roles_is_refused_on_a_public_listener() {
    let ts = TestStore::sqlite().await;
    let same = Tokens { worker: Some("one-secret".into()), client: Some("one-secret".into()) };
    let serve = |address: &'static str, tokens: Tokens| {
        let store = ts.store.clone();
        async move {
            let coordinator = Coordinator::new(store, Timing::default(), vcurve_cli::render::ReportRenderer::shared());
            let listener = tokio::net::TcpListener::bind(address).await.unwrap();
            server::serve(coordinator, listener, ServeOptions { tokens, tls: None }, async {}).await
        }
    };
    let err = serve("0.0.0.0:0", same.clone()).await.unwrap_err().to_string();
    assert!(err.contains("the same token") && err.contains("workers") && err.contains("clients"), "{err}");
    // On loopback one token for both roles is the user's call; distinct tokens serve anywhere.
    serve("127.0.0.1:0", same).await.unwrap();
    serve("0.0.0.0:0", tokens()).await.unwrap();
}

/// A certificate for `localhost` and its key, as PEM.
fn identity() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (cert.cert.pem(), cert.signing_key.serialize_pem())
}

#[tokio::test]
async fn tls_files_that_do_not_parse_are_refused_at_start() {
    let (cert, key) = identity();
    let (_, other_key) = identity();
    let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let cases = [
        ("garbage\n", key.as_str(), "no PEM certificate"),
        (key.as_str(), key.as_str(), "no PEM certificate"),
        (not_der, key.as_str(), "not a valid certificate"),
        (cert.as_str(), "garbage\n", "no PEM private key"),
        (cert.as_str(), cert.as_str(), "no PEM private key"),
        (cert.as_str(), other_key.as_str(), "does not match"),
    ];
    let ts = TestStore::sqlite().await;
    for (cert_pem, key_pem, expected) in cases {
        let coordinator =
            Coordinator::new(ts.store.clone(), Timing::default(), vcurve_cli::render::ReportRenderer::shared());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls = Some((cert_pem.as_bytes().to_vec(), key_pem.as_bytes().to_vec()));
        let options = ServeOptions { tokens: tokens(), tls };
        let err = server::serve(coordinator, listener, options, std::future::pending()).await.unwrap_err().to_string();
        assert!(err.contains(expected), "{expected:?}: {err}");
    }

    // `vcurve coordinator` names the file, before it opens the store or listens.
    let dir = tempfile::tempdir().unwrap();
    let (garbage, key_file) = (dir.path().join("garbage.pem"), dir.path().join("key.pem"));
    std::fs::write(&garbage, "garbage\n").unwrap();
    std::fs::write(&key_file, &key).unwrap();
    let store = dir.path().join("store.sqlite");
    let args = vcurve_cli::commands::CoordinatorSettings {
        store: format!("sqlite://{}", store.display()),
        listen: "127.0.0.1:0".into(),
        tokens: Tokens::default(),
        tls_cert: Some(garbage.clone()),
        tls_key: Some(key_file),
        lease_timeout: Duration::from_secs(30),
        heartbeat_interval: Duration::from_secs(10),
        dashboard: None,
        metrics: None,
    };
    let err = format!("{:#}", vcurve_cli::commands::run_coordinator(args).await.unwrap_err());
    assert!(err.contains(&format!("--tls-cert {}", garbage.display())) && err.contains("no PEM certificate"), "{err}");
    assert!(!store.exists(), "the store was opened before the TLS files were checked");
}

#[tokio::test]
async fn a_client_ca_file_that_does_not_parse_is_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let (_, key) = identity();
    let files = [
        ("garbage.pem", "garbage\n".to_string(), "no PEM certificate"),
        ("key.pem", key, "no PEM certificate"),
        ("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(), "not a valid certificate"),
    ];
    // Nothing listens there: the file is refused before any connection is tried.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("https://localhost:{port}");
    for (name, contents, expected) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        let connection = Connection { url: url.clone(), token: None, tls_ca: Some(path.clone()) };
        let err = client::study_client(&connection).await.unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains(expected), "{expected:?}: {err}");
    }
}

/// The error of one `ListStudies` through the CLI's client, as the binary prints it.
async fn list_error(url: &str, tls_ca: Option<std::path::PathBuf>) -> String {
    let connection = Connection { url: url.into(), token: Some("client-secret".into()), tls_ca };
    match client::study_client(&connection).await {
        Err(e) => e.to_string(),
        Ok(mut c) => c.list_studies(v1::ListStudiesRequest {}).await.unwrap_err().message().to_string(),
    }
}

#[tokio::test]
async fn a_client_meeting_the_other_protocol_is_told_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = identity();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).unwrap();

    // Plaintext client, TLS coordinator.
    let tls = start(ServeOptions { tokens: tokens(), tls: Some((cert.into(), key.into())) }).await;
    let plain = tls.url.replace("https://localhost", "http://127.0.0.1");
    let err = list_error(&plain, None).await;
    assert_eq!(err, format!("the coordinator at {plain} speaks TLS: use https:// and --tls-ca"));
    tls.stop().await;

    // TLS client, plaintext coordinator.
    let plaintext = start(ServeOptions { tokens: tokens(), tls: None }).await;
    let https = plaintext.url.replace("http://127.0.0.1", "https://localhost");
    let err = list_error(&https, Some(ca)).await;
    assert_eq!(err, format!("the coordinator at {https} does not speak TLS: use http://, without --tls-ca"));
    plaintext.stop().await;
}

#[tokio::test]
async fn a_lease_request_tells_pushed_snapshots_and_its_jobs_name_them_over_grpc() {
    let server = start(ServeOptions::default()).await;
    let trs = [Tr { id: "a", length: 12, cliff: 6, p: 0.75, labels: "" }];
    let (yaml, files) = spec("registry", "", &trs);
    let mut c = client::study_client(&Connection { url: server.url.clone(), ..Default::default() }).await.unwrap();
    client::upload_and_launch(&mut c, yaml, &files).await.unwrap();
    let channel = client::channel(&Connection { url: server.url.clone(), ..Default::default() }).await.unwrap();
    let mut w = WorkerServiceClient::with_interceptor(channel, client::bearer(None).unwrap());
    let register = v1::RegisterRequest {
        name: "w".into(),
        slots: 64,
        capabilities: vec!["synthetic".into()],
        protocol_version: vcurve_proto::PROTOCOL_VERSION.into(),
        agents: vec![],
        networks: vec![],
        model_endpoints: vec![],
    };
    let worker_id = w.register(register).await.unwrap().into_inner().worker_id;
    let lease = |registry: &str, pushed: Vec<v1::RegistrySnapshot>| v1::LeaseRequest {
        worker_id: worker_id.clone(),
        max_jobs: 64,
        wait_ms: 0,
        snapshot_trajectories: vec![],
        snapshot_registry: registry.into(),
        pushed_snapshots: pushed,
    };
    let jobs = w.lease(lease("", vec![])).await.unwrap().into_inner().jobs;
    assert!(!jobs.is_empty() && jobs.iter().all(|j| j.registry_snapshot.is_none()));
    let digest = jobs[0].trajectory_digest.clone();
    let t = jobs.iter().filter_map(|j| j.key.as_ref()).map(|k| k.t).filter(|&t| t > 0).min().unwrap();
    let held: Vec<v1::HeldJob> = jobs.iter().map(|j| v1::HeldJob { key: j.key.clone(), attempt: j.attempt }).collect();
    w.release(v1::ReleaseRequest { worker_id: worker_id.clone(), jobs: held }).await.unwrap();
    let pushed = v1::RegistrySnapshot { trajectory_digest: digest.clone(), t, image_id: "sha256:abc".into() };
    let jobs = w.lease(lease("127.0.0.1:5000", vec![pushed.clone()])).await.unwrap().into_inner().jobs;
    for job in &jobs {
        let at = job.key.as_ref().unwrap().t;
        let expected = (at >= t).then(|| pushed.clone());
        assert_eq!(job.registry_snapshot, expected, "a job from t = {at}");
    }
    assert!(jobs.iter().any(|j| j.registry_snapshot.is_some()));
    server.stop().await;
}

/// A study service whose export sends `a.csv` whole, then a piece of `b.csv`, then fails; nothing
/// else is served.
struct BreakingExport;

#[tonic::async_trait]
impl v1::study_service_server::StudyService for BreakingExport {
    async fn upload(
        &self,
        _: tonic::Request<tonic::Streaming<v1::UploadChunk>>,
    ) -> Result<tonic::Response<v1::UploadResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("upload"))
    }
    async fn has_files(
        &self,
        _: tonic::Request<v1::HasFilesRequest>,
    ) -> Result<tonic::Response<v1::HasFilesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("has_files"))
    }
    async fn launch(
        &self,
        _: tonic::Request<v1::LaunchRequest>,
    ) -> Result<tonic::Response<v1::LaunchResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("launch"))
    }
    async fn get_progress(
        &self,
        _: tonic::Request<v1::ProgressRequest>,
    ) -> Result<tonic::Response<v1::Progress>, tonic::Status> {
        Err(tonic::Status::unimplemented("get_progress"))
    }
    type WatchProgressStream = futures::stream::Empty<Result<v1::Progress, tonic::Status>>;
    async fn watch_progress(
        &self,
        _: tonic::Request<v1::ProgressRequest>,
    ) -> Result<tonic::Response<Self::WatchProgressStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("watch_progress"))
    }
    type ExportFilesStream = futures::stream::Iter<std::vec::IntoIter<Result<v1::ExportChunk, tonic::Status>>>;
    async fn export_files(
        &self,
        _: tonic::Request<v1::ExportRequest>,
    ) -> Result<tonic::Response<Self::ExportFilesStream>, tonic::Status> {
        let piece = |name: &str, data: &[u8]| Ok(v1::ExportChunk { name: name.into(), data: data.to_vec() });
        Ok(tonic::Response::new(futures::stream::iter(vec![
            piece("a.csv", b"t,v\n"),
            piece("a.csv", b"0,1\n"),
            piece("b.csv", b"half of b"),
            Err(tonic::Status::internal("the store went away")),
        ])))
    }
    async fn cancel(
        &self,
        _: tonic::Request<v1::CancelRequest>,
    ) -> Result<tonic::Response<v1::CancelResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("cancel"))
    }
    async fn list_studies(
        &self,
        _: tonic::Request<v1::ListStudiesRequest>,
    ) -> Result<tonic::Response<v1::ListStudiesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("list_studies"))
    }
}

#[tokio::test]
async fn an_export_that_breaks_off_leaves_only_whole_files_and_names_where_it_broke() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let incoming =
        futures::stream::unfold(listener, |l| async move { Some((l.accept().await.map(|(stream, _)| stream), l)) });
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(v1::study_service_server::StudyServiceServer::new(BreakingExport))
            .serve_with_incoming(incoming),
    );
    let mut c = client::study_client(&Connection { url, ..Default::default() }).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = format!("{:#}", vcurve_cli::commands::export_into(&mut c, "s", dir.path()).await.unwrap_err());
    assert!(err.contains("broke off while sending b.csv") && err.contains("the store went away"), "{err}");
    let mut left: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["a.csv"], "a partial b.csv (or its .part) is left");
    assert_eq!(std::fs::read(dir.path().join("a.csv")).unwrap(), b"t,v\n0,1\n");
    server.abort();
}

/// A problem statement of several pieces goes over real gRPC as a client uploads it for a launch
/// (stored piece by piece), is kept once by its digest, and comes back to a worker whole, sent one
/// stored piece at a time; the task's payload names it instead of holding it.
#[tokio::test]
async fn a_problem_statement_is_uploaded_kept_and_fetched_in_pieces() {
    let server = start(ServeOptions::default()).await;
    let connection = Connection { url: server.url.clone(), ..Default::default() };
    let mut c = client::study_client(&connection).await.unwrap();
    // 2.5 pieces of statement, with a three-byte character across the first boundary.
    let mut statement = "x".repeat(vcurve_proto::CHUNK_BYTES - 1);
    statement.push('€');
    statement.push_str(&"The sum is off by one. ".repeat(vcurve_proto::CHUNK_BYTES * 3 / 2 / 23));
    let digest = vcurve_record::trajectory::sha256_hex(statement.as_bytes());
    let yaml = "name: pieces\nseed: 1\nrunner: {kind: agent, agent: agent}\ntasks:\n  - id: t1\n    \
                image: vcurve-task-calc:test\n    workdir: /testbed\n    \
                evaluator: {kind: command, command: python3 -m unittest, timeout_s: 60}\n    \
                problem_statement_file: statement.md\n";
    let files = BTreeMap::from([("statement.md".to_string(), statement.clone())]);
    client::upload_and_launch(&mut c, yaml.into(), &files).await.unwrap();

    let channel = client::channel(&connection).await.unwrap();
    let mut w = WorkerServiceClient::with_interceptor(channel, client::bearer(None).unwrap());
    let fetch = async |w: &mut WorkerServiceClient<_>, digest: &str| {
        let mut stream =
            w.get_trajectory(v1::GetTrajectoryRequest { digest: digest.into() }).await.unwrap().into_inner();
        let mut pieces = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            pieces.push(chunk.data);
        }
        pieces
    };
    let pieces = fetch(&mut w, &digest).await;
    assert_eq!(pieces.len(), 3, "sent as stored: in pieces of {} bytes", vcurve_proto::CHUNK_BYTES);
    assert!(pieces.iter().all(|p| p.len() <= vcurve_proto::CHUNK_BYTES));
    assert_eq!(pieces.concat(), statement.as_bytes());

    // The base run's payload names the statement by digest and is small.
    let registered = w
        .register(v1::RegisterRequest {
            name: "w".into(),
            slots: 1,
            capabilities: vec!["agent".into()],
            protocol_version: vcurve_proto::PROTOCOL_VERSION.into(),
            agents: vec!["agent".into()],
            networks: vec![],
            model_endpoints: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    let lease = v1::LeaseRequest { worker_id: registered.worker_id, max_jobs: 1, ..Default::default() };
    let job = w.lease(lease).await.unwrap().into_inner().jobs.remove(0);
    let payload = fetch(&mut w, &job.trajectory_digest).await.concat();
    assert!(payload.len() < 4096, "the payload is {} bytes", payload.len());
    let mut payload = vcurve_record::TrajectoryPayload::from_fetched(&payload, &job.trajectory_digest).unwrap();
    assert_eq!(payload.problem_statement_sha256.as_deref(), Some(digest.as_str()));
    payload.fill_problem_statement(pieces.concat()).unwrap();
    assert_eq!(payload.task_def().unwrap().problem_statement.as_deref(), Some(statement.as_str()));
    server.stop().await;
}

#[tokio::test]
async fn a_request_naming_something_that_is_not_a_digest_is_refused_naming_its_field() {
    let server = start(ServeOptions::default()).await;
    let connection = Connection { url: server.url.clone(), ..Default::default() };
    let mut c = client::study_client(&connection).await.unwrap();
    let channel = client::channel(&connection).await.unwrap();
    let mut w = WorkerServiceClient::with_interceptor(channel, client::bearer(None).unwrap());
    let refused = |status: tonic::Status, field: &str| {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().starts_with(&format!("{field}: ")) && status.message().contains("not a SHA-256 digest"),
            "{field}: {}",
            status.message()
        );
    };
    let verdict = v1::VerdictRequest { study: "s".into(), task: "t".into(), patch_sha256: "not a digest".into() };
    refused(w.lookup_verdict(verdict).await.unwrap_err(), "patch_sha256");
    let fetch = v1::GetTrajectoryRequest { digest: "ABC".into() };
    refused(w.get_trajectory(fetch).await.err().unwrap(), "digest");
    let chunk = v1::UploadChunk { sha256: "abc".into(), size: 3, data: b"abc".to_vec() };
    refused(c.upload(futures::stream::iter([chunk.clone()])).await.unwrap_err(), "sha256");
    refused(w.put_file(futures::stream::iter([chunk])).await.unwrap_err(), "sha256");
    let has = v1::HasFilesRequest { sha256: vec![vcurve_record::Digest::of(b"").into_string(), "x".into()] };
    refused(c.has_files(has).await.unwrap_err(), "sha256");
    let files = std::collections::HashMap::from([("c.csv".to_string(), "x".to_string())]);
    let launch = v1::LaunchRequest { spec_yaml: "name: x\n".into(), files };
    refused(c.launch(launch).await.unwrap_err(), "files[\"c.csv\"]");
    server.stop().await;
}
