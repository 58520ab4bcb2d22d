//! Image tests: the service images `deploy/images/build-services` makes, run as a user runs them.
//!
//! 1. `the_worker_image_carries_the_binary_the_docker_cli_and_both_adapter_environments`: the
//!    worker image runs `vcurve --version` (this build's version), its two virtual environments
//!    import mini-swe-agent and swebench at the pinned versions (from the paths the worker's
//!    defaults name, relative to its working directory), the docker CLI is there and reaches the
//!    host's engine through its socket, and the agents package imports.
//! 2. `the_coordinator_image_serves_the_host_and_a_worker_container_runs_a_study`: the coordinator
//!    image starts as its non-root user, listens on 0.0.0.0:7070 (published on a loopback port)
//!    and answers `vcurve studies` from the host; a study launched from the host is run to its end
//!    by a container of the worker image on a Docker network the test creates (the synthetic
//!    runner: no containers inside containers). Every container and the network are removed.
//!
//! The images come from [`vcurve_e2e::service_images`]: the `VCURVE_TEST_*_IMAGE` variables
//! scripts/test exports, or `deploy/images/build-services --binary <this build's vcurve>`.

use std::process::Command;
use std::time::Duration;
use vcurve_testkit::require::Service;

use vcurve_e2e::{TestDir, docker, free_port, repository, service_images as images, vcurve_ok};

/// The pinned versions (scripts/mini-swe-agent-venv, scripts/swebench-venv).
const MSA_VERSION: &str = "2.4.6";
const SWEBENCH_VERSION: &str = "5.0.2";
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the containerised coordinator may take to answer, and the study to finish.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STUDY_TIMEOUT: Duration = Duration::from_secs(600);

/// `docker run --rm --entrypoint ENTRYPOINT IMAGE ARGS…` in the image's working directory; its
/// stdout, trimmed.
fn run_in(image: &str, entrypoint: &str, args: &[&str]) -> String {
    let mut all = vec!["run", "--rm", "--network", "none", "--entrypoint", entrypoint, image];
    all.extend_from_slice(args);
    docker(&all).trim().to_string()
}

/// What a container printed, stdout and stderr.
fn container_logs(name: &str) -> String {
    let out = Command::new("docker").args(["logs", name]).output().unwrap_or_else(|e| panic!("cannot run docker: {e}"));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Containers and networks a test made, removed when it ends (also when it panics).
#[derive(Default)]
struct Cleanup {
    containers: Vec<String>,
    networks: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            if std::thread::panicking() {
                let logs = container_logs(c);
                let tail: Vec<&str> = logs.lines().rev().take(30).collect();
                eprintln!("== the last lines of container {c}:");
                tail.iter().rev().for_each(|l| eprintln!("{l}"));
            }
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
        for n in &self.networks {
            let _ = Command::new("docker").args(["network", "rm", n]).output();
        }
    }
}

#[test]
fn the_worker_image_carries_the_binary_the_docker_cli_and_both_adapter_environments() {
    vcurve_testkit::require!(Service::Docker, Service::ServiceImages);
    let worker = &images().worker;

    let version = run_in(worker, "vcurve", &["--version"]);
    assert_eq!(version, format!("vcurve {}", env!("CARGO_PKG_VERSION")), "vcurve --version in {worker}");

    // The worker's defaults, relative to its working directory.
    assert_eq!(run_in(worker, "pwd", &[]), "/opt/vcurve", "the worker image's working directory");
    let metadata = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))";
    let msa = run_in(worker, ".venv/mini-swe-agent/bin/python", &["-c", metadata, "mini-swe-agent"]);
    assert_eq!(msa, MSA_VERSION, "mini-swe-agent in .venv/mini-swe-agent of {worker}");
    let swebench = run_in(worker, ".venv/swebench/bin/python", &["-c", metadata, "swebench"]);
    assert_eq!(swebench, SWEBENCH_VERSION, "swebench in .venv/swebench of {worker}");
    // What the adapters import: mini-swe-agent's agent and models, the harness and the docker SDK.
    run_in(
        worker,
        ".venv/mini-swe-agent/bin/python",
        &["-c", "import minisweagent.agents.default, minisweagent.models.litellm_model"],
    );
    run_in(worker, ".venv/swebench/bin/python", &["-c", "import docker, swebench.harness.run_evaluation"]);
    run_in(
        worker,
        "python3",
        &["-c", "import sys; sys.path.insert(0, 'agents'); import vcurve_agents.scripted, vcurve_agents.protocol"],
    );
    // The docker CLI, and the host's engine through the mounted socket.
    let cli = run_in(worker, "docker", &["--version"]);
    assert!(cli.starts_with("Docker version "), "docker --version in {worker}: {cli}");
    let host_engine = docker(&["version", "--format", "{{.Server.Version}}"]).trim().to_string();
    let seen = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        "/var/run/docker.sock:/var/run/docker.sock",
        "--entrypoint",
        "docker",
        worker,
        "version",
        "--format",
        "{{.Server.Version}}",
    ]);
    assert_eq!(seen.trim(), host_engine, "the docker CLI in {worker} reaches the host's engine through its socket");
}

#[test]
fn the_coordinator_image_serves_the_host_and_a_worker_container_runs_a_study() {
    vcurve_testkit::require!(Service::Docker, Service::ServiceImages);
    let images = images();
    let dir = TestDir::new("images");
    let suffix = format!("{}-{}", std::process::id(), free_port());
    let network = format!("vcurve-test-images-{suffix}");
    let coordinator = format!("vcurve-test-coordinator-{suffix}");
    let worker = format!("vcurve-test-worker-{suffix}");
    let mut cleanup = Cleanup::default();
    let (worker_token, client_token) = (format!("worker-{suffix}"), format!("client-{suffix}"));
    let token_file = dir.path().join("client.token");
    std::fs::write(&token_file, &client_token).expect("write the client token");
    let token_file = token_file.to_string_lossy().into_owned();

    docker(&["network", "create", &network]);
    cleanup.networks.push(network.clone());
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:7070");
    docker(&[
        "run",
        "-d",
        "--name",
        &coordinator,
        "--network",
        &network,
        "-p",
        &publish,
        "-e",
        &format!("VCURVE_WORKER_TOKEN={worker_token}"),
        "-e",
        &format!("VCURVE_CLIENT_TOKEN={client_token}"),
        &images.coordinator,
    ]);
    cleanup.containers.push(coordinator.clone());
    let url = format!("http://127.0.0.1:{port}");

    // It runs as its own user, not root.
    let uid = docker(&["exec", &coordinator, "id", "-u"]);
    assert_ne!(uid.trim(), "0", "the coordinator runs as root in {}", images.coordinator);
    let user = docker(&["inspect", "--format", "{{.Config.User}}", &images.coordinator]);
    assert_eq!(user.trim(), "vcurve", "the user of {}", images.coordinator);

    // It listens and answers the host (an empty list at first).
    let studies = vcurve_e2e::wait_every(START_TIMEOUT, Duration::from_millis(500), || {
        vcurve_ok(&["studies", "--coordinator", &url, "--token-file", &token_file], COMMAND_TIMEOUT).is_ok()
    });
    assert!(studies, "vcurve studies got no answer from the coordinator container at {url} within {START_TIMEOUT:?}");
    let logs = container_logs(&coordinator);
    assert!(
        logs.contains("listening on 0.0.0.0:7070"),
        "the coordinator does not say it listens on 0.0.0.0:7070: {logs}"
    );

    // A study launched from the host, run by a worker container on the network.
    let spec = repository().join("examples/study.yaml");
    let study = vcurve_ok(
        &["launch", &spec.to_string_lossy(), "--coordinator", &url, "--token-file", &token_file],
        COMMAND_TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("{e:#}"))
    .trim()
    .to_string();
    let coordinator_url = format!("http://{coordinator}:7070");
    docker(&[
        "run",
        "-d",
        "--name",
        &worker,
        "--network",
        &network,
        "-e",
        &format!("VCURVE_WORKER_TOKEN={worker_token}"),
        &images.worker,
        "--coordinator",
        &coordinator_url,
        "--name",
        "image-worker",
        "--slots",
        "4",
    ]);
    cleanup.containers.push(worker.clone());
    let mut last = String::new();
    let done = vcurve_e2e::wait_every(STUDY_TIMEOUT, Duration::from_secs(1), || {
        let running = docker(&["inspect", "--format", "{{.State.Running}}", &worker]);
        assert_eq!(running.trim(), "true", "the worker container stopped: {}", container_logs(&worker));
        match vcurve_ok(
            &["status", &study, "--coordinator", &url, "--token-file", &token_file, "--json"],
            COMMAND_TIMEOUT,
        ) {
            Ok(out) => {
                let status: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                last = out;
                status["state"] == "done"
            }
            Err(e) => {
                last = format!("{e:#}");
                false
            }
        }
    });
    assert!(done, "study {study} did not finish within {STUDY_TIMEOUT:?} on the worker container; last status: {last}");
    let listed = vcurve_ok(&["studies", "--coordinator", &url, "--token-file", &token_file], COMMAND_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(listed.contains(&study), "vcurve studies does not list {study}: {listed}");

    drop(cleanup);
    for name in [&coordinator, &worker] {
        let left = docker(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
        assert!(left.trim().is_empty(), "container {name} left behind");
    }
    let networks = docker(&["network", "ls", "-q", "--filter", &format!("name=^{network}$")]);
    assert!(networks.trim().is_empty(), "network {network} left behind");
}
