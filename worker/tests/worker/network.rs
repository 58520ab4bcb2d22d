//! The agent's network on the real Docker Engine (issue 25 item 2): a recorded run whose step
//! installs a package from a local package index replays and is continued — installing again —
//! on the `proxy` network, and the same run is not replayable without network (`none`): its
//! install step fails, and replay says so at that step.
//!
//! The deployment's package index is played by a tiny PEP 503 index (`python3 -m http.server`
//! over a wheel the test makes) in a container of the base image, on an *internal* Docker network
//! the test creates (no route out: nothing leaves this machine). The task image gets pip from the
//! wheel Debian's python3-venv ships (`/usr/share/python-wheels`), committed into a test image, so
//! no package is fetched from anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{calc_task, record_commands};
use std::process::Command;
use std::sync::Arc;

use vcurve_record::Trajectory;
use vcurve_record::trajectory::{Interpreter, Task};
use vcurve_testkit::require::Service;
use vcurve_worker::DockerRuntime;
use vcurve_worker::sandbox::container::{Container, ContainerNetwork, ContainerRuntime, labels};
use vcurve_worker::sandbox::exec::run_command;
use vcurve_worker::sandbox::replay::{ContainerLimits, Normalizer, Verdict};
use vcurve_worker::sandbox::snapshots::SnapshotCache;

const TEST_LABEL: &str = "vcurve.test";
/// The index's name on the network, as the operator's `--proxy-env` names it.
const INDEX_HOST: &str = "pkgindex";

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker").args(args).output().map_err(|e| format!("docker {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("docker {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The wheel of pip that Debian's python3-venv ships (what `python3 -m venv` installs pip from).
fn pip_wheel() -> PathBuf {
    let dir = Path::new("/usr/share/python-wheels");
    std::fs::read_dir(dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("pip-") && n.ends_with(".whl")))
        .unwrap_or_else(|| panic!("no pip wheel in {} (apt-get install python3-venv)", dir.display()))
}

/// What the test made on the engine, removed when dropped: the network, the index container,
/// the test's pip image, the snapshots of its trajectory.
struct Scope {
    key: String,
    network: String,
    index: Option<String>,
    pip_image: String,
    trajectories: Vec<String>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(index) = &self.index {
            let _ = docker(&["rm", "-f", index]);
        }
        // The containers a panicking test left (their guards remove them on a runtime that is gone).
        let filter = format!("label={TEST_LABEL}={}", self.key);
        for container in docker(&["ps", "-aq", "--filter", &filter]).unwrap_or_default().lines() {
            let _ = docker(&["rm", "-f", container]);
        }
        // A container of the network a panicking test dropped is removed in the background.
        for _ in 0..20 {
            if docker(&["network", "rm", &self.network]).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        for digest in &self.trajectories {
            let filter = format!("label={}={digest}", labels::SNAPSHOT_TRAJECTORY);
            for image in docker(&["images", "-q", "--filter", &filter]).unwrap_or_default().lines() {
                let _ = docker(&["rmi", "-f", image]);
            }
        }
        let _ = docker(&["rmi", "-f", &self.pip_image]);
    }
}

fn limits(scope: &Scope, network: ContainerNetwork) -> ContainerLimits {
    let exec_env = match network {
        ContainerNetwork::Named(_) => BTreeMap::from([
            // What the operator passes with --proxy-env for this index.
            ("PIP_INDEX_URL".to_owned(), format!("http://{INDEX_HOST}:8000/simple/")),
            ("PIP_TRUSTED_HOST".to_owned(), INDEX_HOST.to_owned()),
            ("PIP_DISABLE_PIP_VERSION_CHECK".to_owned(), "1".to_owned()),
        ]),
        _ => BTreeMap::from([("PIP_DISABLE_PIP_VERSION_CHECK".to_owned(), "1".to_owned())]),
    };
    ContainerLimits {
        memory_bytes: 1 << 30,
        pids_limit: 512,
        labels: BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (TEST_LABEL.to_owned(), scope.key.clone()),
        ]),
        network,
        exec_env,
    }
}

/// The index: a wheel of `demo-pkg` 1.0 (made with the standard library's zipfile) under a PEP 503
/// layout, served by `python3 -m http.server` on port 8000.
const INDEX_SCRIPT: &str = r#"
import base64, hashlib, os, zipfile
files = {
    "demo_pkg/__init__.py": b"VALUE = 42\n",
    "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
    "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: vcurve-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def h(b):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
record = "".join(f"{p},{h(b)},{len(b)}\n" for p, b in files.items()) + "demo_pkg-1.0.dist-info/RECORD,,\n"
files["demo_pkg-1.0.dist-info/RECORD"] = record.encode()
os.makedirs("/srv/simple/demo-pkg", exist_ok=True)
os.makedirs("/srv/packages", exist_ok=True)
wheel = "/srv/packages/demo_pkg-1.0-py3-none-any.whl"
with zipfile.ZipFile(wheel, "w") as z:
    for p, b in files.items():
        z.writestr(zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0)), b)
digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
with open("/srv/simple/index.html", "w") as f:
    f.write('<html><body><a href="demo-pkg/">demo-pkg</a></body></html>\n')
with open("/srv/simple/demo-pkg/index.html", "w") as f:
    f.write(f'<html><body><a href="../../packages/demo_pkg-1.0-py3-none-any.whl#sha256={digest}">demo_pkg-1.0-py3-none-any.whl</a></body></html>\n')
os.chdir("/srv")
os.execvp("python3", ["python3", "-m", "http.server", "8000"])
"#;

/// The task image with pip installed from Debian's wheel, committed as the test's own image.
async fn pip_image(runtime: &Arc<dyn ContainerRuntime>, task_image: &str, scope: &Scope) -> String {
    let wheel = pip_wheel();
    let bytes = std::fs::read(&wheel).unwrap();
    let spec = limits(scope, ContainerNetwork::None).spec(task_image);
    let container = Container::start(runtime.clone(), &spec).await.unwrap();
    let name = wheel.file_name().and_then(|n| n.to_str()).expect("a wheel's name").to_owned();
    container.put_file(&format!("/tmp/{name}"), &bytes, 0o644).await.unwrap();
    let install = run_command(
        &container,
        &calc_task(task_image),
        &Interpreter::default(),
        // As in a SWE-bench image's environment, pip may install: no EXTERNALLY-MANAGED marker.
        &format!(
            "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED && python3 /tmp/{name}/pip install --quiet --no-index \
             /tmp/{name} && rm -f /tmp/{name} && python3 -m pip --version"
        ),
        300.0,
    )
    .await
    .unwrap();
    assert_eq!(install.returncode, Some(0), "installing pip from {}: {}", wheel.display(), install.output);
    container.commit(&scope.pip_image, &BTreeMap::new()).await.unwrap();
    container.remove().await.unwrap();
    scope.pip_image.clone()
}

/// Record a run on the proxy network: install `demo-pkg` from the index, then use it.
async fn record(runtime: &Arc<dyn ContainerRuntime>, task: &Task, scope: &Scope) -> Trajectory {
    let commands = [
        format!("echo {} > run-id.txt", scope.key),
        "python3 -m pip install demo-pkg 2>&1 | grep -v 'WARNING: Running pip as'".to_owned(),
        "python3 -c 'import demo_pkg; print(demo_pkg.VALUE)'".to_owned(),
    ];
    let proxy = limits(scope, ContainerNetwork::Named(scope.network.clone()));
    let container = Container::start(runtime.clone(), &proxy.spec(&task.image)).await.unwrap();
    let trajectory = record_commands(&container, task, &commands, 120.0).await;
    container.remove().await.unwrap();
    trajectory
}

#[tokio::test]
async fn docker_a_recorded_install_from_the_proxy_index_replays_and_continues_and_not_without_network() {
    let [_, _, task_image] = vcurve_testkit::require!(Service::Docker, Service::BaseImage, Service::TaskImage);
    let base_image = std::env::var("VCURVE_TEST_BASE_IMAGE").expect("required above");
    let key = format!("net-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
    let mut scope = Scope {
        network: format!("vcurve-test-{key}"),
        pip_image: format!("vcurve-test-pip:{key}"),
        key,
        index: None,
        trajectories: Vec::new(),
    };
    docker(&["network", "create", "--internal", &scope.network]).unwrap();
    let index = docker(&[
        "run",
        "-d",
        "--network",
        &scope.network,
        "--network-alias",
        INDEX_HOST,
        "--label",
        &format!("{TEST_LABEL}={}", scope.key),
        &base_image,
        "python3",
        "-c",
        INDEX_SCRIPT,
    ])
    .unwrap();
    scope.index = Some(index);

    let docker_runtime = DockerRuntime::connect().await.unwrap();
    docker_runtime.check_proxy_network(&scope.network).await.expect("the test's network is internal");
    let e = docker_runtime.check_proxy_network("bridge").await.unwrap_err().to_string();
    assert!(e.contains("not internal"), "{e}");
    let runtime: Arc<dyn ContainerRuntime> = Arc::new(docker_runtime);
    let image = pip_image(&runtime, &task_image, &scope).await;
    let task = calc_task(&image);

    // The index needs a moment to listen: the first recorded install is retried until it does.
    let mut trajectory = record(&runtime, &task, &scope).await;
    for _ in 0..20 {
        if trajectory.steps[2].actions[0].output.trim() == "42" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        trajectory = record(&runtime, &task, &scope).await;
    }
    let install = &trajectory.steps[1].actions[0].output;
    assert!(install.contains("Successfully installed demo-pkg-1.0"), "{install}");
    assert_eq!(trajectory.steps[2].actions[0].output.trim(), "42");
    let digest = trajectory.digest();
    scope.trajectories.push(digest.clone());

    // Continued from h_3 on the proxy network: replayed (the install reproduced), then the
    // continuation installs again from the index.
    let cache = SnapshotCache::open_with_registry(runtime.clone(), 1 << 50, None).await.unwrap();
    let n = Normalizer::default();
    let proxy = limits(&scope, ContainerNetwork::Named(scope.network.clone()));
    let prepared = match cache.prepare_from(&trajectory, &digest, 3, &n, &proxy, None).await.unwrap() {
        Verdict::Reproduced(p) => p,
        Verdict::NonReplayable(nr) => panic!("a recorded install must replay on the proxy network: {nr:?}"),
    };
    let reinstall = run_command(
        &prepared.container,
        &task,
        &Interpreter::default(),
        "python3 -m pip install --force-reinstall demo-pkg 2>&1 | grep Successfully; python3 -c 'import demo_pkg; print(demo_pkg.VALUE)'",
        120.0,
    )
    .await
    .unwrap();
    assert!(
        reinstall.output.contains("Successfully installed demo-pkg-1.0") && reinstall.output.ends_with("42\n"),
        "{}",
        reinstall.output
    );
    let outside = run_command(
        &prepared.container,
        &task,
        &Interpreter::default(),
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\" 2>&1 | tail -1",
        30.0,
    )
    .await
    .unwrap();
    assert!(
        outside.output.contains("Error") || outside.output.contains("error"),
        "only the index is reachable: {}",
        outside.output
    );
    prepared.container.remove().await.unwrap();
    drop(prepared.pin);

    // Without network the install fails at its step, and replay says so there.
    let closed = limits(&scope, ContainerNetwork::None);
    let other = SnapshotCache::open_with_registry(runtime.clone(), 1 << 50, None).await.unwrap();
    let mut no_net = trajectory.clone();
    no_net.steps[0].actions[0].command = format!("echo {}-none > run-id.txt", scope.key);
    no_net.steps[0].actions[0].output.clear();
    let none_digest = no_net.digest();
    scope.trajectories.push(none_digest.clone());
    let verdict = other.prepare_from(&no_net, &none_digest, 3, &n, &closed, None).await.unwrap();
    let Verdict::NonReplayable(nr) = verdict else { panic!("an install without network must not replay") };
    assert_eq!(nr.step, 2, "the install step: {nr:?}");
}
