//! Faults across hosts (issue 13): `deploy/compose.yaml` itself, on the project's own images, with
//! each container a host on the Compose project's private Docker network — PostgreSQL (the
//! `vcurve-postgres` image), two coordinators, a registry (`vcurve-registry`) and three workers —
//! runs the study of the process-level tests and survives, in one run, at moments placed by
//! progress:
//!
//! (a) a worker host killed mid-continuation (`docker kill`: SIGKILL of the whole container), and
//!     started again later under the same host name;
//! (b) a worker disconnected from the network for longer than its lease (`docker network
//!     disconnect`), then reconnected: its late reports must change nothing;
//! (c) PostgreSQL restarted under both coordinators;
//! (d) a rolling restart of the coordinators (`docker-compose restart`, one after the other: each
//!     stops with SIGTERM and comes back while the other serves);
//! (e) the registry stopped and started again;
//!
//! and ends with an export, from either coordinator, equal byte for byte to the uninterrupted
//! run's, the study on either coordinator's dashboard, and every worker host still running. That
//! study's runner is the synthetic one (containers inside containers would make each of its 1,120
//! continuations seconds long), so (e) shows there only that nothing else depends on the registry.
//! Then, on the same hosts, a small study of the scripted agent in real containers (the workers
//! drive the host's engine through its socket) pushes its anchors to the registry, has
//! continuations handed out by registry snapshot, and loses the registry for good mid-study: it
//! finishes (a failed pull rebuilds `h_t` by replay) with no container left on the host. Its
//! export is not compared with an uninterrupted run's (that would be a second container study);
//! the registry's checks and fallbacks are tested one by one in worker/tests/worker/snapshot_registry.rs.
//!
//! Clients reach the coordinators on loopback ports the Compose file publishes, with the client
//! token of the secrets folder the test writes, as a user of the README does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use vcurve_e2e::{SplitMix64, TestDir, docker, free_port, read_export, repository, service_images, vcurve_ok};
use vcurve_testkit::require::Service;

use super::{FINISH_TIMEOUT, REFERENCE, Run, count, kill_seed, write_spec_lasting};

/// Slower continuations than the process tests' (the outcomes do not depend on it), so that the
/// faults, each taking seconds, fall inside the run.
const DURATION_MS: u64 = 120;
const WORKERS: usize = 3;
const SLOTS: &str = "2";
const LEASE_TIMEOUT_MS: &str = "3000";
const HEARTBEAT_MS: &str = "500";
/// How long a partitioned worker stays off the network: longer than its lease.
const PARTITION: Duration = Duration::from_secs(6);
const START_TIMEOUT: Duration = Duration::from_secs(120);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// One Compose project of deploy/compose.yaml, brought down (containers, network, volumes) when
/// dropped; its services' logs are printed first when the test is failing.
struct Stack {
    project: String,
    env_file: PathBuf,
    compose_file: PathBuf,
    token_file: PathBuf,
    ports: [u16; 2],
    dashboards: [u16; 2],
    metrics: [u16; 2],
    registry: u16,
}

/// `docker-compose` (Debian's 1.29) or, without it, the `docker compose` plugin: the program and
/// the arguments before the command's own. Looked up once.
fn compose_program() -> &'static (&'static str, &'static [&'static str]) {
    static PROGRAM: std::sync::OnceLock<(&str, &[&str])> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        if Command::new("docker-compose").arg("version").output().is_ok_and(|o| o.status.success()) {
            ("docker-compose", &[])
        } else {
            ("docker", &["compose"])
        }
    })
}

impl Stack {
    fn up(dir: &Path) -> Stack {
        let images = service_images();
        let secrets = dir.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        let password = format!("pw{}", uuid::Uuid::new_v4().simple());
        for (name, value) in [
            ("postgres_password", password.clone()),
            ("store_url", format!("postgres://vcurve:{password}@postgres:5432/vcurve")),
            ("worker_token", format!("w{}", uuid::Uuid::new_v4().simple())),
            ("client_token", format!("c{}", uuid::Uuid::new_v4().simple())),
        ] {
            std::fs::write(secrets.join(name), format!("{value}\n")).unwrap();
        }
        let ports = [free_port(), free_port()];
        let dashboards = [free_port(), free_port()];
        let metrics = [free_port(), free_port()];
        let registry = free_port();
        let env = [
            ("VCURVE_COORDINATOR_IMAGE", images.coordinator.clone()),
            ("VCURVE_WORKER_IMAGE", images.worker.clone()),
            ("VCURVE_POSTGRES_IMAGE", images.postgres.clone()),
            ("VCURVE_REGISTRY_IMAGE", images.registry.clone()),
            ("VCURVE_SECRETS_DIR", secrets.display().to_string()),
            ("VCURVE_COORDINATOR_PORT", ports[0].to_string()),
            ("VCURVE_COORDINATOR_B_PORT", ports[1].to_string()),
            ("VCURVE_METRICS_PORT", metrics[0].to_string()),
            ("VCURVE_METRICS_B_PORT", metrics[1].to_string()),
            ("VCURVE_DASHBOARD_PORT", dashboards[0].to_string()),
            ("VCURVE_DASHBOARD_B_PORT", dashboards[1].to_string()),
            ("VCURVE_REGISTRY_PORT", registry.to_string()),
            ("VCURVE_LEASE_TIMEOUT_MS", LEASE_TIMEOUT_MS.into()),
            ("VCURVE_HEARTBEAT_MS", HEARTBEAT_MS.into()),
            ("VCURVE_SLOTS", SLOTS.into()),
            ("VCURVE_SHUTDOWN_GRACE_S", "2".into()),
            ("VCURVE_LOG_FORMAT", "json".into()),
        ];
        let env_file = dir.join("compose.env");
        std::fs::write(&env_file, env.iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>()).unwrap();
        let stack = Stack {
            project: format!("vcurvehosts{}", std::process::id()),
            env_file,
            compose_file: repository().join("deploy/compose.yaml"),
            token_file: secrets.join("client_token"),
            ports,
            dashboards,
            metrics,
            registry,
        };
        let started = Instant::now();
        stack.compose(&["up", "-d", "--scale", &format!("worker={WORKERS}")]);
        let answered = vcurve_e2e::wait_every(START_TIMEOUT, Duration::from_millis(500), || {
            (0..2).all(|i| stack.client(&["studies"], i).is_ok())
        });
        assert!(answered, "the coordinators of {} do not answer in {START_TIMEOUT:?}", stack.project);
        eprintln!("compose stack {} up in {:.1} s", stack.project, started.elapsed().as_secs_f64());
        stack
    }

    /// `docker-compose --env-file … -f deploy/compose.yaml -p PROJECT ARGS`, which must succeed.
    fn compose(&self, args: &[&str]) -> String {
        let out = self.try_compose(args);
        assert!(
            out.status.success(),
            "compose {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn try_compose(&self, args: &[&str]) -> std::process::Output {
        let (program, prefix) = compose_program();
        Command::new(program)
            .args(*prefix)
            .arg("--env-file")
            .arg(&self.env_file)
            .arg("-f")
            .arg(&self.compose_file)
            .args(["-p", &self.project])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
    }

    fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    /// A client command against coordinator `i`, with the client token.
    fn client(&self, args: &[&str], i: usize) -> anyhow::Result<String> {
        let url = self.url(i);
        let token = self.token_file.to_string_lossy();
        let mut all = args.to_vec();
        all.extend_from_slice(&["--coordinator", &url, "--token-file", &token]);
        vcurve_ok(&all, COMMAND_TIMEOUT)
    }

    /// `GET path` of coordinator `i`'s dashboard with the client token: the JSON it answers.
    fn dashboard(&self, i: usize, path: &str) -> Value {
        let body = self.get(self.dashboards[i], path);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("dashboard {i} {path} is not JSON ({e}): {body}"))
    }

    /// The sum over both coordinators of the sample `series` (name and labels as exposed) of their
    /// metrics (a per-process counter: each counts its own leases); 0 where it is not exposed.
    fn metric(&self, series: &str) -> f64 {
        self.metrics
            .iter()
            .filter_map(|port| self.try_get(*port, "/metrics").ok())
            .filter_map(|text| {
                text.lines().find_map(|l| {
                    l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.parse::<f64>().ok())
                })
            })
            .sum()
    }

    /// `GET path` on a published loopback `port` with the client token as a bearer token (the
    /// registry ignores it): the body of a 200 answer, which it must be.
    fn get(&self, port: u16, path: &str) -> String {
        self.try_get(port, path).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_get(&self, port: u16, path: &str) -> Result<String, String> {
        use std::io::{Read as _, Write as _};
        let token = std::fs::read_to_string(&self.token_file).unwrap();
        let addr = format!("127.0.0.1:{port}");
        let mut stream = std::net::TcpStream::connect(&addr).map_err(|e| format!("GET {addr}{path}: {e}"))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            token.trim()
        );
        stream.write_all(request.as_bytes()).map_err(|e| format!("GET {addr}{path}: {e}"))?;
        let mut response = String::new();
        stream.read_to_string(&mut response).map_err(|e| format!("GET {addr}{path}: {e}"))?;
        let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| format!("GET {addr}{path}: {response}"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("GET {addr}{path}: {head}"));
        }
        Ok(body.to_string())
    }

    /// The study's status from whichever coordinator answers (one may be restarting).
    fn status(&self, study: &str) -> Option<Value> {
        (0..2).find_map(|i| {
            self.client(&["status", study, "--json"], i).ok().and_then(|out| serde_json::from_str(&out).ok())
        })
    }

    /// The container ids of the worker service, in Compose's order.
    fn workers(&self) -> Vec<String> {
        let ids: Vec<String> = self.compose(&["ps", "-q", "worker"]).lines().map(str::to_string).collect();
        assert_eq!(ids.len(), WORKERS, "compose ps lists {} workers: {ids:?}", ids.len());
        ids
    }

    fn network(&self) -> String {
        format!("{}_default", self.project)
    }

    /// Wait until the study has at least `done` continuations done; it must still be running.
    fn wait_for_progress(&self, study: &str, done: u64) -> Value {
        let mut last = Value::Null;
        let reached = vcurve_e2e::wait_every(FINISH_TIMEOUT, Duration::from_millis(200), || match self.status(study) {
            Some(status) => {
                let reached = count(&status, "done") >= done;
                last = status;
                reached
            }
            None => false,
        });
        assert!(reached, "the study did not reach {done} continuations in {FINISH_TIMEOUT:?}; last status: {last}");
        assert_eq!(last["state"], "running", "the study ended before a planned fault; last status: {last}");
        last
    }

    fn wait_until_done(&self, study: &str) -> Value {
        let mut last = Value::Null;
        let done = vcurve_e2e::wait_every(FINISH_TIMEOUT, Duration::from_millis(300), || match self.status(study) {
            Some(status) => {
                assert_ne!(status["state"], "cancelled", "the study was cancelled: {status}");
                let done = status["state"] == "done";
                last = status;
                done
            }
            None => false,
        });
        assert!(done, "the study did not finish in {FINISH_TIMEOUT:?}; last status: {last}");
        last
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.try_compose(&["logs", "--no-color", "--tail", "40"]);
            eprintln!("== the last log lines of {}:\n{}", self.project, String::from_utf8_lossy(&logs.stdout));
        }
        let down = self.try_compose(&["down", "--volumes", "--remove-orphans", "--timeout", "5"]);
        if !down.status.success() {
            eprintln!("compose down of {} failed: {}", self.project, String::from_utf8_lossy(&down.stderr));
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillWorkerHost,
    Partition,
    RestartPostgres,
    RollingRestart,
    RegistryGone,
}

#[test]
fn a_compose_deployment_survives_host_loss_a_partition_a_database_restart_and_a_rolling_restart() {
    vcurve_testkit::require!(Service::Docker, Service::Compose, Service::ServiceImages);
    let reference = &*REFERENCE;
    let total = reference.total();
    let dir = TestDir::new("fault-hosts");
    let spec = write_spec_lasting(dir.path(), DURATION_MS);
    let stack = Stack::up(dir.path());
    let started = Instant::now();
    let study = stack.client(&["launch", &spec.to_string_lossy()], 0).unwrap_or_else(|e| panic!("{e:#}"));
    let study = study.trim().to_string();
    let workers = stack.workers();
    let mut rng = SplitMix64::new(kill_seed() ^ 0x4057);
    let mut faults =
        [Fault::KillWorkerHost, Fault::Partition, Fault::RestartPostgres, Fault::RollingRestart, Fault::RegistryGone];
    rng.shuffle(&mut faults);
    let (first, last) = (0.05, 0.7);
    let stride = (last - first) / faults.len() as f64;
    let mut killed = None;
    for (k, fault) in faults.iter().enumerate() {
        let share = first + stride * k as f64 + rng.range(0.0, stride * 0.5);
        let target = (share * total as f64).ceil() as u64;
        let at = stack.wait_for_progress(&study, target);
        let fault_started = Instant::now();
        let what = match fault {
            Fault::KillWorkerHost => {
                let victim = &workers[rng.below(WORKERS)];
                docker(&["kill", victim]);
                killed = Some(victim.clone());
                format!("worker host {} killed", &victim[..12])
            }
            Fault::Partition => {
                let victim = &workers[rng.below(WORKERS)];
                if killed.as_ref() == Some(victim) {
                    docker(&["start", victim]);
                    killed = None;
                }
                docker(&["network", "disconnect", &stack.network(), victim]);
                std::thread::sleep(PARTITION);
                docker(&["network", "connect", &stack.network(), victim]);
                format!("worker {} off the network for {PARTITION:?}", &victim[..12])
            }
            Fault::RestartPostgres => {
                stack.compose(&["restart", "--timeout", "10", "postgres"]);
                "PostgreSQL restarted".to_string()
            }
            Fault::RollingRestart => {
                for (i, service) in ["coordinator-a", "coordinator-b"].into_iter().enumerate() {
                    stack.compose(&["restart", "--timeout", "10", service]);
                    let back = vcurve_e2e::wait_every(START_TIMEOUT, Duration::from_millis(200), || {
                        stack.client(&["studies"], i).is_ok()
                    });
                    assert!(back, "{service} does not answer after its restart");
                }
                "coordinators restarted one after the other".to_string()
            }
            Fault::RegistryGone => {
                stack.compose(&["stop", "--timeout", "5", "registry"]);
                std::thread::sleep(Duration::from_secs(2));
                stack.compose(&["start", "registry"]);
                "the registry stopped for 2 s".to_string()
            }
        };
        eprintln!(
            "fault {}/{}: {what} at {}/{total} continuations done, {:.1} s into the run (took {:.1} s)",
            k + 1,
            faults.len(),
            count(&at, "done"),
            started.elapsed().as_secs_f64(),
            fault_started.elapsed().as_secs_f64()
        );
    }
    if let Some(victim) = killed {
        docker(&["start", &victim]);
        eprintln!("worker host {} started again", &victim[..12]);
    }
    let status = stack.wait_until_done(&study);
    eprintln!("study done {:.1} s into the run", started.elapsed().as_secs_f64());
    for worker in &workers {
        let state = docker(&["inspect", "--format", "{{.State.Running}} {{.RestartCount}}", worker]);
        assert!(state.starts_with("true"), "worker host {worker} is not running at the end: {state}");
    }
    for i in 0..2 {
        let out = dir.path().join(format!("export-{i}"));
        stack.client(&["export", &study, "--out", &out.to_string_lossy()], i).unwrap_or_else(|e| panic!("{e:#}"));
        let run = Run { status: status.clone(), export: read_export(&out) };
        run.check_consistent(&format!("the compose run, exported by coordinator {i}"));
        run.check_equals(reference, &format!("the export of compose coordinator {i}"));
    }
    // Either dashboard shows the finished study with every continuation the status counts.
    for i in 0..2 {
        let studies = stack.dashboard(i, "/api/studies");
        let shown = studies
            .as_array()
            .and_then(|list| list.iter().find(|p| p["study"] == study.as_str()))
            .unwrap_or_else(|| panic!("dashboard {i} does not list the study: {studies}"));
        assert_eq!((&shown["state"], &shown["done"]), (&status["state"], &status["done"]), "dashboard {i}: {shown}");
    }
    let left = docker(&["ps", "-aq", "--filter", &format!("label=vcurve.study={study}")]);
    assert!(left.trim().is_empty(), "containers of the study are left: {left}");

    agent_study_through_the_registry(&stack, dir.path());
}

/// Then, on the same hosts, a small study of the scripted agent on the test task in real
/// containers (through the host's socket): its anchors are pushed to the Compose registry and the
/// coordinator hands continuations out by registry snapshot; the registry goes away mid-study for
/// good, and the study still finishes (pulls fail, `h_t` is rebuilt by replay), with no container
/// of it left on the host.
fn agent_study_through_the_registry(stack: &Stack, dir: &Path) {
    let started = Instant::now();
    // The agent study through the registry only: the rest of the test runs without the task image.
    let Some(task_image) = vcurve_testkit::require::optional(Service::TaskImage) else { return };
    let built = Command::new(repository().join("deploy/images/build")).arg("--print-task").output().unwrap();
    assert!(built.status.success(), "deploy/images/build --print-task: {}", String::from_utf8_lossy(&built.stderr));
    let task: Value = serde_json::from_slice(&built.stdout).expect("--print-task prints JSON");
    assert_eq!(task["image"].as_str(), Some(task_image.as_str()), "--print-task names another image");
    // The agents where the worker image has them.
    let task_json = String::from_utf8(built.stdout).expect("the task JSON is UTF-8");
    let spec = vcurve_e2e::write_scripted_calc_spec(dir, "e2e-compose-agent", &task_json);
    let study = stack.client(&["launch", &spec.to_string_lossy()], 0).unwrap_or_else(|e| panic!("{e:#}"));
    let study = study.trim().to_string();
    let by_registry = "vcurve_continuations_leased_total{snapshot=\"registry\"}";
    let catalog_has_snapshots = || {
        std::panic::catch_unwind(|| stack.get(stack.registry, "/v2/_catalog"))
            .is_ok_and(|c| c.contains("vcurve-snapshot"))
    };
    let pushed = vcurve_e2e::wait_every(FINISH_TIMEOUT, Duration::from_millis(500), || {
        catalog_has_snapshots() && stack.metric(by_registry) > 0.0
    });
    assert!(pushed, "no snapshot reached the registry, or no continuation was leased by one, in {FINISH_TIMEOUT:?}");
    let at = stack.status(&study).expect("a status");
    stack.compose(&["stop", "--timeout", "5", "registry"]);
    eprintln!(
        "agent study: snapshots in the registry and {} continuations leased by them at {}/{} continuations done; \
         registry stopped {:.1} s into the study",
        stack.metric(by_registry),
        count(&at, "done"),
        count(&at, "done") + count(&at, "pending") + count(&at, "running"),
        started.elapsed().as_secs_f64()
    );
    let status = stack.wait_until_done(&study);
    assert_eq!(count(&status, "retired"), 0, "keys were retired: {status}");
    let out = dir.join("export-agent");
    stack.client(&["export", &study, "--out", &out.to_string_lossy()], 1).unwrap_or_else(|e| panic!("{e:#}"));
    let export = read_export(&out);
    let trajectories = String::from_utf8_lossy(&export["trajectories.csv"]).into_owned();
    assert_eq!(trajectories.lines().count(), 2, "one trajectory in trajectories.csv: {trajectories}");
    let left = docker(&["ps", "-aq", "--filter", &format!("label=vcurve.study={study}")]);
    assert!(left.trim().is_empty(), "containers of the agent study are left: {left}");
    eprintln!(
        "agent study done in {:.1} s: {} continuations, {} leased by a registry snapshot",
        started.elapsed().as_secs_f64(),
        count(&status, "done"),
        stack.metric(by_registry)
    );
}
