//! What a worker leaves behind (issue 24, "nothing outlives its job"), against a real Docker
//! Engine: two workers of one name touch nothing of each other's; a SIGKILLed worker's containers
//! and agent processes — a `setsid` child among them — are reaped by the next worker that starts
//! with the same state directory, whatever its name.
//!
//! The worker that dies is a child run of this test binary ([`reaping_child_helper`]), killed
//! with SIGKILL so that none of its guards runs. Every container carries the label `vcurve.test`
//! with the test's key and is removed with the docker CLI at the end, even on a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vcurve_testkit::require::Service;
use vcurve_worker::AgentProcessRunner;
use vcurve_worker::sandbox::container::docker::DockerRuntime;
use vcurve_worker::sandbox::container::{Container, ContainerRuntime, ContainerSpec};
use vcurve_worker::sandbox::instance::Instance;

const TEST_LABEL: &str = "vcurve.test";
/// Set in the child run: the state directory, the worker's name and the test's key.
const CHILD_STATE_VAR: &str = "VCURVE_REAPING_CHILD_STATE";
const CHILD_NAME_VAR: &str = "VCURVE_REAPING_CHILD_NAME";
const CHILD_KEY_VAR: &str = "VCURVE_REAPING_CHILD_KEY";

fn image() -> String {
    std::env::var("VCURVE_TEST_BASE_IMAGE").expect("the gate checked VCURVE_TEST_BASE_IMAGE")
}

fn spec(instance: &Instance, key: &str) -> ContainerSpec {
    let mut labels = instance.container_labels();
    labels.insert(TEST_LABEL.to_owned(), key.to_owned());
    ContainerSpec {
        image: image(),
        memory_bytes: 256 << 20,
        pids_limit: 64,
        labels,
        network: Default::default(),
        exec_env: Default::default(),
    }
}

/// Removes this test's containers with the docker CLI when dropped.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let filter = format!("label={TEST_LABEL}={}", self.0);
        let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output() else { return };
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").arg("rm").arg("-fv").args(&ids).output();
        }
    }
}

fn running(id: &str) -> bool {
    Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}", id])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "true")
}

/// Whether process `pid` is alive (a zombie is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        !matches!(state, Some(Some('Z' | 'X')))
    })
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok().filter(|s| s.ends_with('\n')).and_then(|s| s.trim().parse().ok())
}

/// Run as a child of [`a_sigkilled_workers_containers_and_agents_are_reaped_and_a_live_namesakes_are_not`]:
/// a worker instance in `$VCURVE_REAPING_CHILD_STATE` named `$VCURVE_REAPING_CHILD_NAME` starts
/// (reaping what it may), creates a container and an agent process with a `setsid` child, says so,
/// and waits to be SIGKILLed. Without the variables it does nothing.
#[tokio::test]
async fn reaping_child_helper() {
    let (Ok(state), Ok(name), Ok(key)) =
        (std::env::var(CHILD_STATE_VAR), std::env::var(CHILD_NAME_VAR), std::env::var(CHILD_KEY_VAR))
    else {
        return;
    };
    let state = PathBuf::from(state);
    let runtime: Arc<dyn ContainerRuntime> = Arc::new(DockerRuntime::connect().await.expect("connects"));
    let instance = Instance::open(&state, &name).expect("opens");
    let reaped = instance.reap_predecessors(runtime.as_ref()).await.expect("reaps");
    assert!(reaped.instances.is_empty(), "the live namesake is no dead predecessor: {reaped:?}");
    let container = Container::start(runtime.clone(), &spec(&instance, &key)).await.expect("starts");
    // The agent process, as the runner starts it: marked; its setsid child leaves its session.
    let mut agent = tokio::process::Command::new("sh");
    agent.args([
        "-c",
        &format!(
            "setsid sh -c 'echo $$ > {0}/setsid.pid; exec sleep 1000' & echo $$ > {0}/agent.pid; exec sleep 1000",
            state.display()
        ),
    ]);
    instance.agent_mark().apply(&mut agent);
    let _agent = agent.spawn().expect("spawns the agent");
    while read_pid(&state.join("agent.pid")).is_none() || read_pid(&state.join("setsid.pid")).is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("VCURVE-CHILD-CONTAINER {}", container.id());
    println!("VCURVE-CHILD-INSTANCE {}", instance.id());
    println!("VCURVE-CHILD-READY");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn a_sigkilled_workers_containers_and_agents_are_reaped_and_a_live_namesakes_are_not() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let key = format!("reaping-{}-{}", std::process::id(), uuid_like());
    let _cleanup = Cleanup(key.clone());
    let state = tempfile::tempdir().expect("a state directory");
    let runtime: Arc<dyn ContainerRuntime> = Arc::new(DockerRuntime::connect().await.expect("connects"));

    // A live worker named `same`, with a container.
    let live = Instance::open(state.path(), "same").expect("opens");
    let live_container = Container::start(runtime.clone(), &spec(&live, &key)).await.expect("starts");

    // A second worker of the same name starts (and reaps what it may), makes a container and an
    // agent process, and is SIGKILLed.
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "reaping::reaping_child_helper", "--nocapture", "--test-threads=1"])
        .env(CHILD_STATE_VAR, state.path())
        .env(CHILD_NAME_VAR, "same")
        .env(CHILD_KEY_VAR, &key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns the child");
    let stdout = child.stdout.take().expect("piped");
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut seen = BTreeMap::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("VCURVE-CHILD-READY") {
                return Some(seen);
            }
            // libtest may print the test's name on the same line first.
            let said = line.find("VCURVE-CHILD-").map(|at| &line[at + "VCURVE-CHILD-".len()..]);
            if let Some((k, v)) = said.and_then(|l| l.split_once(' ')) {
                seen.insert(k.to_owned(), v.to_owned());
            }
        }
        None
    });
    let seen = tokio::time::timeout(Duration::from_secs(120), lines).await;
    let agent_pid = read_pid(&state.path().join("agent.pid"));
    let setsid_pid = read_pid(&state.path().join("setsid.pid"));
    child.kill().expect("SIGKILLs the child");
    child.wait().expect("reaps the child");
    let Ok(Ok(Some(seen))) = seen else { panic!("the child never got ready: {seen:?}") };
    let dead_container = seen["CONTAINER"].clone();
    let (agent_pid, setsid_pid) = (agent_pid.expect("agent pid"), setsid_pid.expect("setsid pid"));

    // The live worker lost nothing to its namesake.
    assert!(running(live_container.id()), "the live worker's container was touched");
    // The dead worker's container and processes outlived it.
    assert!(running(&dead_container));
    assert!(alive(agent_pid) && alive(setsid_pid), "the agent processes outlive the SIGKILLed worker");

    // The next worker, under another name, with the same state directory: it reaps the dead
    // worker's container and agent processes, and leaves the live one's alone.
    let next = Instance::open(state.path(), "renamed").expect("opens");
    assert_eq!(next.dead_predecessors(), vec![seen["INSTANCE"].clone()], "only the SIGKILLed worker is dead");
    let runner = AgentProcessRunner::start_in(runtime.clone(), next, 1 << 40, None).await.expect("starts");
    let start = Instant::now();
    while alive(agent_pid) || alive(setsid_pid) {
        assert!(start.elapsed() < Duration::from_secs(10), "the dead worker's agent processes still run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!running(&dead_container), "the dead worker's container was not reaped");
    assert!(running(live_container.id()), "the live worker's container was touched");
    drop(runner);
    live_container.remove().await.expect("removed");
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{nanos:08x}")
}
