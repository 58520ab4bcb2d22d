//! Snapshots across hosts on the real Docker Engine and a real registry: a committed snapshot is
//! pushed, removed locally, pulled and checked, and continued from; a pull whose image does not
//! check out, or that the registry no longer holds or serves corrupt, falls back to replay.
//!
//! Needs the test task image named by `VCURVE_TEST_TASK_IMAGE` (`deploy/images/build` prints it as
//! `task=TAG`) and Debian's registry, `/usr/bin/docker-registry` (`apt-get install docker-registry`);
//! without either the test says so and passes without running. The registry runs on a free
//! loopback port with its storage in a temporary directory (the engine trusts a loopback registry
//! without TLS). The "other host" is the same engine with the snapshot removed and a fresh cache.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vcurve_testkit::require::Service;

use vcurve_record::Trajectory;
use vcurve_record::trajectory::Task;
use vcurve_worker::DockerRuntime;
use vcurve_worker::sandbox::container::{Container, ContainerRuntime, ExecRequest, labels};
use vcurve_worker::sandbox::replay::{ContainerLimits, FingerprintMode, Normalizer, Verdict};
use vcurve_worker::sandbox::replay_job::replay_trajectory;
use vcurve_worker::sandbox::snapshots::{Prepared, RegistrySnapshot, SnapshotCache, StartedFrom};

const IMAGE_VAR: &str = "VCURVE_TEST_TASK_IMAGE";
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
const TEST_LABEL: &str = "vcurve.test";
/// No eviction: the engine may hold other workers' snapshots, which these caches also index.
const BUDGET: u64 = 1 << 50;

/// What is needed, or why the test cannot run here.
fn prerequisites() -> Result<String, String> {
    let image = match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.is_empty() => image,
        _ => {
            return Err(format!(
                "{IMAGE_VAR} is not set (the test task image: build it with deploy/images/build, which prints \
                 task=TAG, or run scripts/test)"
            ));
        }
    };
    if !Path::new(REGISTRY_BIN).exists() {
        return Err(format!("{REGISTRY_BIN} is missing (apt-get install -y docker-registry)"));
    }
    Ok(image)
}

/// A registry serving from a temporary directory; killed when dropped.
struct Registry {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        let storage = dir.path().join("storage");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    \
                 enabled: true\nhttp:\n  addr: {addr}\n",
                storage.display()
            ),
        )
        .unwrap();
        // Its log (every 404 of a blob the engine asks about before pushing it is an error line)
        // stays in the directory.
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the registry starts");
        let registry = Registry { child, addr, dir };
        let started = Instant::now();
        while !registry.answers() {
            assert!(started.elapsed() < Duration::from_secs(20), "the registry does not answer on {}", registry.addr);
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// Whether `GET /v2/` answers 200.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(&self.addr) else { return false };
        let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr);
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
    }

    fn storage(&self) -> PathBuf {
        self.dir.path().join("storage/docker/registry/v2")
    }

    /// Overwrite every blob but the largest ones (the task image's base layer, which the engine
    /// holds already and does not fetch) with garbage of the same length.
    fn corrupt_small_blobs(&self) -> usize {
        let mut corrupted = 0;
        let mut stack = vec![self.storage().join("blobs")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.file_name().is_some_and(|n| n == "data") {
                    let len = entry.metadata().unwrap().len();
                    if len < 50 << 20 {
                        std::fs::write(&path, vec![b'x'; len as usize]).unwrap();
                        corrupted += 1;
                    }
                }
            }
        }
        corrupted
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the images named here (local snapshot references) and the test's containers.
struct Cleanup {
    key: String,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label={TEST_LABEL}={}", self.key)])
            .output()
            .expect("the docker CLI runs");
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).output();
        }
        for image in &self.images {
            let _ = Command::new("docker").args(["rmi", "-f", image]).output();
        }
    }
}

fn task(image: &str) -> Task {
    crate::support::calc_task(image)
}

fn limits(key: &str) -> ContainerLimits {
    ContainerLimits {
        memory_bytes: 1 << 30,
        pids_limit: 512,
        labels: BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned()), (TEST_LABEL.to_owned(), key.to_owned())]),
        network: Default::default(),
        exec_env: Default::default(),
    }
}

/// Record a three-step trajectory in a task container: each step writes a file (the first one
/// with `key`, so the trajectory, and with it every snapshot name, is this run's own).
async fn record(runtime: &Arc<dyn ContainerRuntime>, task: &Task, key: &str) -> Trajectory {
    let commands = [
        format!("echo {key} > vcurve-registry-test.txt"),
        "echo two >> vcurve-registry-test.txt; cat vcurve-registry-test.txt".to_owned(),
        "echo three >> vcurve-registry-test.txt; wc -l < vcurve-registry-test.txt".to_owned(),
    ];
    let container = Container::start(runtime.clone(), &limits(key).spec(&task.image)).await.unwrap();
    let trajectory = crate::support::record_commands(&container, task, &commands, 30.0).await;
    container.remove().await.unwrap();
    trajectory
}

async fn prepare(
    cache: &SnapshotCache,
    trajectory: &Trajectory,
    t: u32,
    key: &str,
    hint: &RegistrySnapshot,
) -> Prepared {
    let n = Normalizer::default();
    match cache.prepare_from(trajectory, &trajectory.digest(), t, &n, &limits(key), Some(hint)).await.unwrap() {
        Verdict::Reproduced(p) => p,
        Verdict::NonReplayable(nr) => panic!("non-replayable: {nr:?}"),
    }
}

async fn file_in(p: &Prepared) -> String {
    let request = ExecRequest {
        argv: vec!["cat".into(), "/testbed/vcurve-registry-test.txt".into()],
        env: BTreeMap::new(),
        workdir: "/testbed".into(),
        timeout: Duration::from_secs(30),
        leave_running: false,
        reaps_itself: false,
    };
    String::from_utf8_lossy(&p.container.exec(&request).await.unwrap().output).into_owned()
}

fn image_id(reference: &str) -> Option<String> {
    let out = Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", reference]).output().unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn rmi(reference: &str) {
    let out = Command::new("docker").args(["rmi", "-f", reference]).output().unwrap();
    assert!(out.status.success(), "docker rmi {reference}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_a_snapshot_is_pushed_pulled_checked_and_a_bad_one_is_rebuilt() {
    vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::Registry);
    let image = match prerequisites() {
        Ok(image) => image,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let key = format!("registry-{}-{nanos}", std::process::id());
    let registry = Registry::start();
    let docker: Arc<dyn ContainerRuntime> =
        Arc::new(DockerRuntime::connect().await.expect("the Docker Engine answers"));
    let task = task(&image);
    let trajectory = record(&docker, &task, &key).await;
    let digest = trajectory.digest();
    let h2 = SnapshotCache::reference(&digest, 2).unwrap();
    let h3 = SnapshotCache::reference(&digest, 3).unwrap();
    let _cleanup = Cleanup { key: key.clone(), images: vec![h2.clone(), h3.clone()] };

    // Host A: the replay commits h_2 and pushes it.
    let a = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(registry.addr.clone())).await.unwrap();
    let n = Normalizer::default();
    let replayed =
        replay_trajectory(&a, &trajectory, &digest, &[2], &n, FingerprintMode::CompareOnly, &limits(&key)).await;
    assert!(matches!(replayed, Ok(Verdict::Reproduced(_))), "{replayed:?}");
    let started = Instant::now();
    a.pushes_done().await;
    eprintln!("push of h_2 ended {:.1} s after its commit", started.elapsed().as_secs_f64());
    let pushed = a.take_pushed();
    assert_eq!(pushed.len(), 1, "{:?}", a.stats());
    let h2_pushed = pushed[0].clone();
    assert_eq!((h2_pushed.t, Some(h2_pushed.image_id.clone())), (2, image_id(&h2)));
    let remote = SnapshotCache::remote(&registry.addr, &digest, 2).unwrap();
    assert_eq!(image_id(&remote), None, "the registry name is not kept locally");
    // A second push of the same image: only the snapshot's layer and manifest go, if that.
    let started = Instant::now();
    assert_eq!(docker.push_image(&h2, &remote).await.unwrap(), h2_pushed.image_id);
    eprintln!("push of h_2 again: {:.2} s", started.elapsed().as_secs_f64());
    drop(a);

    // Host B: h_2 is not held; the continuation from h_3 pulls it, checks it and replays step 3.
    rmi(&h2);
    let started = Instant::now();
    assert_eq!(docker.pull_image(&remote, &h2).await.unwrap(), h2_pushed.image_id);
    eprintln!("pull of h_2 (its layer not on this host): {:.2} s", started.elapsed().as_secs_f64());
    assert_eq!(image_id(&remote), None, "the registry name is not kept locally");
    rmi(&h2);
    let b = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(registry.addr.clone())).await.unwrap();
    assert!(!b.holds(&digest, 2));
    let started = Instant::now();
    let p = prepare(&b, &trajectory, 3, &key, &h2_pushed).await;
    eprintln!("prepare of h_3 through a pull of h_2: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!((p.from, p.started_from, p.levels.len()), (2, StartedFrom::Pulled, 1));
    assert_eq!(file_in(&p).await, format!("{key}\ntwo\nthree\n"));
    assert_eq!(image_id(&h2), Some(h2_pushed.image_id.clone()), "the pulled image is the pushed one");
    p.container.remove().await.unwrap();
    drop(p.pin);
    b.pushes_done().await;
    assert_eq!((b.stats().pulls, b.stats().hits_registry), (1, 1));
    drop(b);

    // An image that is not the one pushed (the coordinator's id differs): removed, rebuilt.
    rmi(&h2);
    rmi(&h3);
    let c = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(registry.addr.clone())).await.unwrap();
    let mut other = h2_pushed.clone();
    other.image_id = format!("sha256:{}", "0".repeat(64));
    let p = prepare(&c, &trajectory, 3, &key, &other).await;
    assert_eq!((p.from, p.started_from, p.levels.len()), (0, StartedFrom::TaskImage, 3));
    assert_eq!(file_in(&p).await, format!("{key}\ntwo\nthree\n"));
    assert_eq!(image_id(&h2), None, "the pulled image that did not check out is removed");
    p.container.remove().await.unwrap();
    drop(p.pin);
    c.pushes_done().await;
    drop(c);

    // The registry's storage corrupted: the engine refuses the pull; rebuilt.
    rmi(&h3);
    assert!(registry.corrupt_small_blobs() > 0);
    let d = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(registry.addr.clone())).await.unwrap();
    let p = prepare(&d, &trajectory, 3, &key, &h2_pushed).await;
    assert_eq!((p.from, p.started_from), (0, StartedFrom::TaskImage));
    assert_eq!(image_id(&h2), None);
    p.container.remove().await.unwrap();
    drop(p.pin);
    d.pushes_done().await;
    assert_eq!(d.stats().pull_failures, 1, "{:?}", d.stats());
    drop(d);

    // Gone from the registry: rebuilt.
    rmi(&h3);
    std::fs::remove_dir_all(registry.storage().join("repositories/vcurve-snapshot")).unwrap();
    let e = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(registry.addr.clone())).await.unwrap();
    let p = prepare(&e, &trajectory, 3, &key, &h2_pushed).await;
    assert_eq!((p.from, p.started_from), (0, StartedFrom::TaskImage));
    p.container.remove().await.unwrap();
    drop(p.pin);
    e.pushes_done().await;
    assert_eq!(e.stats().pull_failures, 1, "{:?}", e.stats());
    drop(e);

    // The registry down: the pull fails at once, h_3 is rebuilt, and its push fails quietly.
    rmi(&h3);
    let addr = registry.addr.clone();
    drop(registry);
    let f = SnapshotCache::open_with_registry(docker.clone(), BUDGET, Some(addr)).await.unwrap();
    let started = Instant::now();
    let p = prepare(&f, &trajectory, 3, &key, &h2_pushed).await;
    eprintln!("prepare of h_3 with the registry down: {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!((p.from, p.started_from, p.committed), (0, StartedFrom::TaskImage, true));
    p.container.remove().await.unwrap();
    drop(p.pin);
    f.pushes_done().await;
    let stats = f.stats();
    assert_eq!((stats.pull_failures, stats.push_failures, stats.pushes), (1, 1, 0), "{stats:?}");
    assert!(f.take_pushed().is_empty());
}
