//! The Docker runtime against a real Docker Engine and a real image.
//!
//! The image comes from `VCURVE_TEST_BASE_IMAGE` (bash, coreutils, util-linux, python3, git): build
//! it with `deploy/images/build` (it prints `base=TAG`), or run everything through `scripts/test`.
//!
//! Every test labels what it makes with its own `vcurve.test` value and removes it, even when it
//! fails: a [`Scope`] removes its containers and images with the docker CLI when it is dropped. The
//! engine is inspected with the docker CLI too, so that these checks do not trust the code under
//! test.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use vcurve_testkit::require::Service;

use vcurve_worker::sandbox::container::docker::{DockerRuntime, WRAPPER};
use vcurve_worker::sandbox::container::{
    Change, ChangeKind, Container, ContainerRuntime, ContainerSpec, ExecOutput, ExecRequest, RuntimeError, labels, reap,
};

const IMAGE_VAR: &str = "VCURVE_TEST_BASE_IMAGE";
/// Set in a child run of this test binary: the worker name under which [`reap_child_helper`]
/// creates containers before it is SIGKILLed.
const CHILD_WORKER_VAR: &str = "VCURVE_DOCKER_TEST_CHILD_WORKER";
/// Set in a child run of this test binary: the child checks the error of a connection to a
/// socket that does not exist ([`connect_child_helper`]).
const CHILD_CONNECT_VAR: &str = "VCURVE_DOCKER_TEST_CHILD_CONNECT";
/// The label every container and image of these tests carries; its value is the test's key.
const TEST_LABEL: &str = "vcurve.test";

fn image() -> String {
    match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.is_empty() => image,
        _ => panic!(
            "{IMAGE_VAR} is not set: these tests need a local image with bash, coreutils, util-linux, python3 and git. \
             Build it with `deploy/images/build` and set {IMAGE_VAR} to the tag it prints as base=TAG, \
             or run the tests through `scripts/test`, which does both"
        ),
    }
}

fn unique_key(what: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{what}-{}-{}-{nanos:08x}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Run the docker CLI; its stdout.
fn docker_cli(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("the docker CLI runs");
    assert!(out.status.success(), "docker {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn docker_cli_lines(args: &[&str]) -> Vec<String> {
    docker_cli(args).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// What one test makes, removed when it is dropped (also on a failed assertion): every container
/// and image labelled `vcurve.test=<key>`, and every image tagged `vcurve-test-<key>`.
struct Scope {
    key: String,
    runtime: Arc<DockerRuntime>,
}

impl Scope {
    async fn new(what: &str) -> Scope {
        let runtime = DockerRuntime::connect().await.expect("the Docker Engine answers");
        Scope { key: unique_key(what), runtime: Arc::new(runtime) }
    }

    fn dyn_runtime(&self) -> Arc<dyn ContainerRuntime> {
        self.runtime.clone()
    }

    /// The labels of this test's containers, as a worker named `worker` would set them.
    fn labels_for(&self, worker: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (labels::WORKER.to_owned(), worker.to_owned()),
            (labels::JOB.to_owned(), "job-7".to_owned()),
            (TEST_LABEL.to_owned(), self.key.clone()),
        ])
    }

    fn spec(&self) -> ContainerSpec {
        ContainerSpec {
            image: image(),
            memory_bytes: 512 << 20,
            pids_limit: 256,
            labels: self.labels_for(&format!("worker-{}", self.key)),
            network: Default::default(),
            exec_env: Default::default(),
        }
    }

    fn test_filter(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(TEST_LABEL.to_owned(), self.key.clone())])
    }

    async fn start(&self) -> Container {
        Container::start(self.dyn_runtime(), &self.spec()).await.expect("the container starts")
    }

    async fn start_with(&self, spec: &ContainerSpec) -> Container {
        Container::start(self.dyn_runtime(), spec).await.expect("the container starts")
    }

    /// A snapshot reference of this test.
    fn reference(&self, n: u32) -> String {
        format!("vcurve-test-{}:{n}", self.key)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let filter = format!("label={TEST_LABEL}={}", self.key);
        let containers = docker_cli_lines(&["ps", "-aq", "--filter", &filter]);
        if !containers.is_empty() {
            let mut args = vec!["rm", "-fv"];
            args.extend(containers.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
        }
        let repo = format!("vcurve-test-{}", self.key);
        let mut images = docker_cli_lines(&["images", "-aq", "--filter", &filter]);
        images.extend(docker_cli_lines(&["images", "-q", &repo]));
        images.sort();
        images.dedup();
        if !images.is_empty() {
            let mut args = vec!["rmi", "-f"];
            args.extend(images.iter().map(String::as_str));
            let _ = Command::new("docker").args(&args).output();
        }
    }
}

fn bash(command: &str, timeout: Duration) -> ExecRequest {
    ExecRequest {
        argv: vec!["bash".to_owned(), "-c".to_owned(), command.to_owned()],
        env: BTreeMap::new(),
        workdir: "/".to_owned(),
        timeout,
        leave_running: false,
        reaps_itself: false,
    }
}

async fn run(container: &Container, command: &str) -> ExecOutput {
    container.exec(&bash(command, Duration::from_secs(60))).await.expect("the exec runs")
}

fn text(out: &ExecOutput) -> String {
    String::from_utf8_lossy(&out.output).into_owned()
}

/// Every process in the container, as `PID ARGS` lines read from `/proc` (no `ps` needed), without
/// the listing's own processes.
async fn processes(container: &Container) -> Vec<String> {
    let out = run(
        container,
        r#"for p in /proc/[0-9]*; do
             pid=${p#/proc/}
             [ "$pid" = "$$" ] && continue
             args=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
             [ -n "$args" ] && echo "$pid $args"
           done"#,
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "listing processes: {}", text(&out));
    text(&out).lines().filter(|l| !l.contains("/proc/[0-9]*")).map(str::to_owned).collect()
}

/// The processes a test command left: everything but the container's keeper (`sh -c while …` and
/// its `sleep 86400`).
async fn leftovers(container: &Container) -> Vec<String> {
    processes(container).await.into_iter().filter(|l| !l.contains("while :;") && !l.contains("sleep 86400")).collect()
}

#[tokio::test]
async fn a_timed_out_command_that_keeps_its_output_open_leaves_no_process() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("timeout-bg").await;
    let c = scope.start().await;
    let started = Instant::now();
    // The command itself waits for its child (a command that returns has its children killed at
    // once: `a_background_process_of_a_finished_command_is_killed_when_it_returns`).
    let out = c.exec(&bash("sleep 1000 & echo started; wait", Duration::from_secs(1))).await.expect("runs");
    let took = started.elapsed();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert_eq!(text(&out), "started\n");
    assert!(took < Duration::from_secs(8), "the kill took {took:?}");
    let left = leftovers(&c).await;
    assert!(left.is_empty(), "processes left behind: {left:?}");
    // The same with ps, as an agent would look.
    let ps = run(&c, "ps -eo pid,pgid,args").await;
    assert!(!text(&ps).contains("sleep 1000"), "{}", text(&ps));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_plain_sleep_is_killed_at_its_timeout() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("timeout-sleep").await;
    let c = scope.start().await;
    let started = Instant::now();
    let out = c.exec(&bash("echo before; sleep 1000; echo after", Duration::from_secs(1))).await.expect("runs");
    let took = started.elapsed();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!(text(&out), "before\n");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(6), "took {took:?}");
    assert!(leftovers(&c).await.is_empty());
    // The container is fine afterwards.
    let out = run(&c, "echo alive").await;
    assert_eq!((text(&out).as_str(), out.exit_code, out.timed_out), ("alive\n", Some(0), false));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_process_that_left_the_group_but_holds_the_output_is_killed_too() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("timeout-setsid").await;
    let c = scope.start().await;
    let command = "setsid sleep 1001 & (sleep 1002 &); nohup sleep 1003 >/dev/null 2>&1 & sleep 1004";
    let out = c.exec(&bash(command, Duration::from_secs(1))).await.expect("runs");
    assert!(out.timed_out);
    let left = leftovers(&c).await;
    assert!(left.is_empty(), "processes left behind: {left:?}");
    c.remove().await.expect("removed");
}

/// The wrapper started where its shell does not lead its process group (here: by another shell)
/// runs the command under `setsid -w`: the header names the new group, the exit code passes
/// through, and a timeout still kills everything.
#[tokio::test]
async fn the_wrapper_falls_back_to_setsid_when_it_does_not_lead_its_group() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("setsid-fallback").await;
    let c = scope.start().await;
    let nested = |inner: &str, timeout: Duration| ExecRequest {
        argv: vec![
            "bash".to_owned(),
            "-c".to_owned(),
            format!("sh -c \"$1\" vcurve-exec bash -c '{inner}'; echo \"status $?\""),
            "_".to_owned(),
            WRAPPER.to_owned(),
        ],
        ..bash("", timeout)
    };
    let out =
        c.exec(&nested("echo inner pgid $(ps -o pgid= $$); exit 4", Duration::from_secs(20))).await.expect("runs");
    let said = text(&out);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    let header: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(header[0], "vcurve-exec", "{said}");
    assert!(header[2].starts_with("pipe:["), "{said}");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["inner", "pgid", header[1]], "{said}");
    assert_eq!(lines[2], "status 4");
    assert_eq!(out.exit_code, Some(0));

    let out = c.exec(&nested("sleep 1000", Duration::from_secs(1))).await.expect("runs");
    assert!(out.timed_out);
    let left = leftovers(&c).await;
    assert!(left.is_empty(), "processes left behind: {left:?}");
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_background_process_of_a_finished_command_is_killed_when_it_returns() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("background").await;
    let c = scope.start().await;
    // Issue 24: under plain `docker exec` the `sleep` outlives its command into later steps (and
    // the output ends only ~2 s after the command). A command bounds its children: it returns at
    // once, and nothing of it is left.
    let start = Instant::now();
    let out = c.exec(&bash("sleep 1000 & echo started", Duration::from_secs(30))).await.expect("runs");
    let took = start.elapsed();
    assert_eq!((text(&out).as_str(), out.exit_code, out.timed_out), ("started\n", Some(0), false));
    assert!(took < Duration::from_millis(1500), "returned after {took:?}");
    let left = leftovers(&c).await;
    assert!(left.is_empty(), "processes left behind: {left:?}");
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn stdout_and_stderr_are_merged_in_the_order_written() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("merge").await;
    let c = scope.start().await;
    let out = run(&c, "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done; printf tail >&2").await;
    assert_eq!(text(&out), "out1\nerr1\nout2\nerr2\nout3\nerr3\nout4\nerr4\nout5\nerr5\ntail");
    assert_eq!(out.exit_code, Some(0));
    // A big output arrives whole.
    let out = run(&c, "head -c 3000000 /dev/zero | tr '\\0' x").await;
    assert_eq!(out.output.len(), 3_000_000);
    assert!(out.output.iter().all(|b| *b == b'x'));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn exit_codes_come_back() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("exit").await;
    let c = scope.start().await;
    for (command, code) in [("true", 0), ("exit 3", 3), ("false", 1), ("kill -9 $$", 137), ("no-such-command-x", 127)] {
        let out = run(&c, command).await;
        assert_eq!(out.exit_code, Some(code), "{command}: {}", text(&out));
        assert!(!out.timed_out);
    }
    // An argv whose program does not exist.
    let request = ExecRequest { argv: vec!["no-such-binary".to_owned()], ..bash("", Duration::from_secs(10)) };
    let out = c.exec(&request).await.expect("runs");
    assert_eq!(out.exit_code, Some(127), "{}", text(&out));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn env_and_workdir_are_applied() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("env").await;
    let c = scope.start().await;
    let request = ExecRequest {
        argv: vec!["bash".to_owned(), "-c".to_owned(), "echo \"$FOO|$BAR\"; pwd; echo $PATH".to_owned()],
        env: BTreeMap::from([("FOO".to_owned(), "a b".to_owned()), ("BAR".to_owned(), "x=y".to_owned())]),
        workdir: "/usr/share".to_owned(),
        timeout: Duration::from_secs(10),
        leave_running: false,
        reaps_itself: false,
    };
    let out = c.exec(&request).await.expect("runs");
    let out = text(&out);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["a b|x=y", "/usr/share"]);
    assert!(lines[2].contains("/usr/bin"), "the image's PATH stays: {}", lines[2]);
    // Nothing of the wrapper shows in the command's environment or arguments.
    let out = run(&c, "env; cat /proc/$$/cmdline | tr '\\0' ' '").await;
    assert!(!text(&out).to_lowercase().contains("vcurve"), "{}", text(&out));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_missing_workdir_fails_as_under_docker_exec() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("workdir").await;
    let c = scope.start().await;
    let request = ExecRequest { workdir: "/nope".to_owned(), ..bash("pwd", Duration::from_secs(10)) };
    let out = c.exec(&request).await.expect("runs");
    assert_eq!(out.exit_code, Some(126), "{}", text(&out));
    assert!(text(&out).contains("chdir to cwd (\"/nope\")"), "{}", text(&out));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn invalid_utf8_comes_back_raw() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("bytes").await;
    let c = scope.start().await;
    let out = run(&c, r"printf 'a\xff\xfeb\x00c\n'").await;
    assert_eq!(out.output, b"a\xff\xfeb\x00c\n");
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn limits_are_applied() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("limits").await;
    let spec = ContainerSpec { memory_bytes: 256 << 20, pids_limit: 64, ..scope.spec() };
    let c = scope.start_with(&spec).await;
    let format = "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.PidsLimit}} {{.HostConfig.NetworkMode}} \
                  {{.HostConfig.Privileged}} {{json .HostConfig.SecurityOpt}} {{json .HostConfig.CapDrop}}";
    let inspect = docker_cli(&["inspect", "--format", format, c.id()]);
    let fields: Vec<&str> = inspect.split_whitespace().collect();
    let memory = (256u64 << 20).to_string();
    assert_eq!(fields[..5], [memory.as_str(), memory.as_str(), "64", "none", "false"], "{inspect}");
    assert_eq!(fields[5], r#"["no-new-privileges"]"#);
    assert!(fields[6].contains("NET_RAW"), "{inspect}");

    let status = run(&c, "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status").await;
    assert!(text(&status).contains("NoNewPrivs:\t1"), "{}", text(&status));

    // The pids limit bites: fewer than 64 processes can be forked.
    let forks = r#"
import os, signal
pids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        pids.append(pid)
    print("forked all")
except OSError as e:
    print("fork failed after", len(pids))
for pid in pids:
    os.kill(pid, signal.SIGKILL)
for pid in pids:
    os.waitpid(pid, 0)
"#;
    let request = ExecRequest {
        argv: vec!["python3".to_owned(), "-c".to_owned(), forks.to_owned()],
        ..bash("", Duration::from_secs(60))
    };
    let out = c.exec(&request).await.expect("runs");
    let said = text(&out);
    let n: usize = said
        .trim()
        .strip_prefix("fork failed after ")
        .unwrap_or_else(|| panic!("forks did not fail: {said}"))
        .parse()
        .expect("a count");
    assert!(n < 64, "{n} forks under a pids limit of 64");

    // The memory limit bites: the allocating command is killed, the container lives on.
    let out = run(&c, "python3 -c 'b = bytearray(1 << 30); print(len(b))'").await;
    assert_ne!(out.exit_code, Some(0), "allocated 1 GiB under a 256 MiB limit: {}", text(&out));
    assert_eq!(run(&c, "echo alive").await.exit_code, Some(0));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn there_is_no_network() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("net").await;
    let c = scope.start().await;
    let out = run(&c, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(text(&out), "lo\n");
    let connect = "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=5)'";
    let out = run(&c, connect).await;
    assert_ne!(out.exit_code, Some(0));
    assert!(text(&out).contains("Network is unreachable"), "{}", text(&out));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn labels_are_set_and_containers_are_found_by_them() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("labels").await;
    let c = scope.start().await;
    let got = docker_cli(&["inspect", "--format", "{{json .Config.Labels}}", c.id()]);
    let got: BTreeMap<String, String> = serde_json::from_str(got.trim()).expect("labels as JSON");
    for (k, v) in &scope.spec().labels {
        assert_eq!(got.get(k), Some(v), "label {k}");
    }
    let found = scope.runtime.containers(&scope.test_filter()).await.expect("lists");
    assert_eq!(found, vec![c.id().to_owned()]);
    let mut filter = scope.test_filter();
    filter.insert(labels::JOB.to_owned(), "another-job".to_owned());
    assert!(scope.runtime.containers(&filter).await.expect("lists").is_empty());
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_missing_image_is_no_image() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("noimage").await;
    let spec = ContainerSpec { image: "vcurve-no-such-image:nope".to_owned(), ..scope.spec() };
    match scope.runtime.create(&spec).await {
        Err(RuntimeError::NoImage(image)) => assert_eq!(image, "vcurve-no-such-image:nope"),
        other => panic!("expected NoImage, got {other:?}"),
    }
}

#[tokio::test]
async fn the_diff_lists_changes_and_no_trace_of_the_timeout_machinery() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("diff").await;
    let c = scope.start().await;
    assert_eq!(c.diff().await.expect("diff"), Vec::new(), "a fresh container has no changes");
    // Commands, a timed-out one among them, change nothing by themselves.
    run(&c, "ls / > /dev/null; python3 -c 'print(1)'").await;
    let out = c.exec(&bash("sleep 1000 & sleep 1001", Duration::from_secs(1))).await.expect("runs");
    assert!(out.timed_out);
    assert_eq!(c.diff().await.expect("diff"), Vec::new(), "commands left traces");

    run(&c, "echo hello > /root/hello.txt && rm /etc/issue && echo x >> /etc/hostname.bak").await;
    let diff = c.diff().await.expect("diff");
    let expected = vec![
        Change { path: "/etc".to_owned(), kind: ChangeKind::Modified },
        Change { path: "/etc/hostname.bak".to_owned(), kind: ChangeKind::Added },
        Change { path: "/etc/issue".to_owned(), kind: ChangeKind::Deleted },
        Change { path: "/root".to_owned(), kind: ChangeKind::Modified },
        Change { path: "/root/hello.txt".to_owned(), kind: ChangeKind::Added },
    ];
    assert_eq!(diff, expected);
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn commit_makes_an_image_that_is_found_listed_and_removed() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("commit").await;
    let c = scope.start().await;
    run(&c, "mkdir -p /testbed && head -c 100000 /dev/urandom > /testbed/blob").await;
    let reference = scope.reference(15);
    let image_labels = BTreeMap::from([
        (labels::MANAGED.to_owned(), "1".to_owned()),
        (labels::SNAPSHOT_TRAJECTORY.to_owned(), "abc".to_owned()),
        (labels::SNAPSHOT_T.to_owned(), "15".to_owned()),
        (TEST_LABEL.to_owned(), scope.key.clone()),
    ]);
    let id = c.commit(&reference, &image_labels).await.expect("commits");
    assert!(id.starts_with("sha256:"), "{id}");
    assert!(scope.runtime.image_exists(&reference).await.expect("inspects"));
    assert!(scope.runtime.image_exists(&id).await.expect("inspects"));
    assert!(!scope.runtime.image_exists("vcurve-no-such-image:nope").await.expect("inspects"));
    // The container keeps running.
    assert_eq!(run(&c, "echo still").await.exit_code, Some(0));

    let listed = scope.runtime.images(&scope.test_filter()).await.expect("lists");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].reference, reference);
    for (k, v) in &image_labels {
        assert_eq!(listed[0].labels.get(k), Some(v), "label {k}");
    }
    // Its own layer: the 100 kB written, not the base image's hundreds of MB.
    let size = listed[0].size_bytes;
    assert!((100_000..2_000_000).contains(&size), "own size {size}");
    let mut other = scope.test_filter();
    other.insert(labels::SNAPSHOT_T.to_owned(), "16".to_owned());
    assert!(scope.runtime.images(&other).await.expect("lists").is_empty());

    // A container from the snapshot holds the file.
    let from_snapshot = scope.start_with(&ContainerSpec { image: reference.clone(), ..scope.spec() }).await;
    assert_eq!(text(&run(&from_snapshot, "wc -c < /testbed/blob").await), "100000\n");
    assert_eq!(from_snapshot.diff().await.expect("diff"), Vec::new());
    from_snapshot.remove().await.expect("removed");

    c.remove().await.expect("removed");
    scope.runtime.remove_image(&reference).await.expect("removes");
    assert!(!scope.runtime.image_exists(&reference).await.expect("inspects"));
    assert!(!scope.runtime.image_exists(&id).await.expect("inspects"), "the image itself is gone, not only its tag");
    scope.runtime.remove_image(&reference).await.expect("removing it again is fine");
}

#[tokio::test]
async fn removing_an_image_a_container_uses_removes_its_tag_only() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("rmi-used").await;
    let c = scope.start().await;
    let reference = scope.reference(1);
    let id = c.commit(&reference, &scope.test_filter()).await.expect("commits");
    let user = scope.start_with(&ContainerSpec { image: reference.clone(), ..scope.spec() }).await;
    scope.runtime.remove_image(&reference).await.expect("removes the tag");
    assert!(!scope.runtime.image_exists(&reference).await.expect("inspects"));
    assert!(scope.runtime.image_exists(&id).await.expect("inspects"), "the image stays while a container uses it");
    // Listed by its id, so that it can be collected once the container is gone.
    let listed = scope.runtime.images(&scope.test_filter()).await.expect("lists");
    assert_eq!(listed.iter().map(|i| i.reference.as_str()).collect::<Vec<_>>(), [id.as_str()]);
    user.remove().await.expect("removed");
    scope.runtime.remove_image(&id).await.expect("removes");
    assert!(!scope.runtime.image_exists(&id).await.expect("inspects"));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn put_file_writes_a_file_with_its_mode_creating_parents() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("put").await;
    let c = scope.start().await;
    let script = b"#!/bin/sh\necho from the script \"$@\"\n";
    c.put_file("/opt/vcurve/deep/run.sh", script, 0o755).await.expect("puts");
    let out = run(&c, "stat -c '%a %U %G %s' /opt/vcurve/deep/run.sh && /opt/vcurve/deep/run.sh 1 2").await;
    assert_eq!(text(&out), format!("755 root root {}\nfrom the script 1 2\n", script.len()));
    // Overwrite, in an existing directory, with another mode and raw bytes.
    c.put_file("/opt/vcurve/deep/run.sh", b"\xff\x00raw", 0o600).await.expect("puts");
    let out = run(&c, "stat -c '%a' /opt/vcurve/deep/run.sh && od -An -tx1 /opt/vcurve/deep/run.sh").await;
    assert_eq!(text(&out).split_whitespace().collect::<Vec<_>>(), ["600", "ff", "00", "72", "61", "77"]);
    c.put_file("/root/empty", b"", 0o644).await.expect("puts an empty file");
    assert_eq!(text(&run(&c, "wc -c < /root/empty").await), "0\n");
    assert!(c.put_file("relative/path", b"x", 0o644).await.is_err());
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn removing_a_missing_container_is_fine_and_using_it_is_gone() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("missing").await;
    scope.runtime.remove("vcurve-no-such-container").await.expect("a missing container is not an error");
    let c = scope.start().await;
    let id = c.id().to_owned();
    scope.runtime.remove(&id).await.expect("removes");
    scope.runtime.remove(&id).await.expect("removing it twice is fine");
    match scope.runtime.exec(&id, &bash("true", Duration::from_secs(5))).await {
        Err(RuntimeError::Gone(gone)) => assert_eq!(gone, id),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(matches!(scope.runtime.diff(&id).await, Err(RuntimeError::Gone(_))));
    assert!(matches!(scope.runtime.put_file(&id, "/x", b"x", 0o644).await, Err(RuntimeError::Gone(_))));
    c.remove().await.expect("removing the guard's container again is fine");
}

#[tokio::test]
async fn an_exec_whose_container_dies_is_gone() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("dies").await;
    let c = scope.start().await;
    let id = c.id().to_owned();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        docker_cli(&["kill", &id]);
    });
    let result = c.exec(&bash("echo working; sleep 30", Duration::from_secs(60))).await;
    killer.join().expect("the killer thread");
    assert!(matches!(result, Err(RuntimeError::Gone(_))), "{result:?}");
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn the_guard_removes_its_container_when_dropped() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("guard").await;
    let c = scope.start().await;
    let id = c.id().to_owned();
    drop(c);
    let start = Instant::now();
    while !scope.runtime.containers(&scope.test_filter()).await.expect("lists").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20), "container {id} still there after the guard was dropped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run as a child of [`reap_removes_what_a_killed_worker_left_and_nothing_else`]: creates two
/// containers as worker `$VCURVE_DOCKER_TEST_CHILD_WORKER`, says so, and waits to be SIGKILLed.
/// Without the variable it does nothing.
#[tokio::test]
async fn reap_child_helper() {
    // Only as the parent's child (the parent passed the gate): as a test of its own, nothing.
    let Ok(worker) = std::env::var(CHILD_WORKER_VAR) else { return };
    let key = std::env::var("VCURVE_DOCKER_TEST_CHILD_KEY").expect("the parent's key");
    let runtime: Arc<dyn ContainerRuntime> = Arc::new(DockerRuntime::connect().await.expect("connects"));
    let spec = ContainerSpec {
        image: image(),
        memory_bytes: 256 << 20,
        pids_limit: 64,
        labels: BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (labels::WORKER.to_owned(), worker),
            (TEST_LABEL.to_owned(), key),
        ]),
        network: Default::default(),
        exec_env: Default::default(),
    };
    let _a = Container::start(runtime.clone(), &spec).await.expect("starts");
    let _b = Container::start(runtime.clone(), &spec).await.expect("starts");
    println!("VCURVE-CHILD-READY");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn reap_removes_what_a_killed_worker_left_and_nothing_else() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("reap").await;
    let dead = format!("dead-{}", scope.key);
    let alive = format!("alive-{}", scope.key);

    // A worker process creates two containers and is SIGKILLed: its guards never run.
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "docker_runtime::reap_child_helper", "--nocapture", "--test-threads=1"])
        .env(CHILD_WORKER_VAR, &dead)
        .env("VCURVE_DOCKER_TEST_CHILD_KEY", &scope.key)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns the child");
    let stdout = child.stdout.take().expect("piped");
    let ready = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.contains("VCURVE-CHILD-READY"))
    });
    let ready = tokio::time::timeout(Duration::from_secs(120), ready).await;
    child.kill().expect("SIGKILLs the child");
    child.wait().expect("reaps the child");
    assert!(matches!(ready, Ok(Ok(true))), "the child never got ready: {ready:?}");

    // Another container of the same dead worker, its guard forgotten; and one of a live worker.
    let forgotten = scope.start_with(&ContainerSpec { labels: scope.labels_for(&dead), ..scope.spec() }).await;
    std::mem::forget(forgotten);
    let other = scope.start_with(&ContainerSpec { labels: scope.labels_for(&alive), ..scope.spec() }).await;

    let dead_filter =
        BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned()), (labels::WORKER.to_owned(), dead.clone())]);
    assert_eq!(scope.runtime.containers(&dead_filter).await.expect("lists").len(), 3);
    let reaped = reap(scope.runtime.as_ref(), &dead).await.expect("reaps");
    assert_eq!(reaped, 3);
    assert!(scope.runtime.containers(&dead_filter).await.expect("lists").is_empty());
    assert_eq!(reap(scope.runtime.as_ref(), &dead).await.expect("reaps"), 0);
    // The live worker's container is untouched.
    assert_eq!(run(&other, "echo here").await.exit_code, Some(0));
    other.remove().await.expect("removed");
}

/// Run as a child of [`connecting_to_a_missing_socket_names_it`] with `DOCKER_HOST` pointing at a
/// socket that does not exist.
#[tokio::test]
async fn connect_child_helper() {
    // Only as the parent's child, which passed the gate: here DOCKER_HOST names a socket that
    // does not exist, so the gate would refuse what this child is for.
    if std::env::var(CHILD_CONNECT_VAR).is_err() {
        return;
    }
    match DockerRuntime::connect().await {
        Ok(_) => panic!("connected to a socket that does not exist"),
        Err(e) => println!("VCURVE-CONNECT-ERROR {e}"),
    }
}

#[tokio::test]
async fn connecting_to_a_missing_socket_names_it() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let runtime = DockerRuntime::connect().await.expect("the real engine answers");
    assert!(!runtime.api_version().is_empty());
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "docker_runtime::connect_child_helper", "--nocapture"])
        .env(CHILD_CONNECT_VAR, "1")
        .env("DOCKER_HOST", "unix:///nonexistent/vcurve-test.sock")
        .output()
        .expect("runs the child");
    let said = String::from_utf8_lossy(&out.stdout);
    let line = said.lines().find(|l| l.starts_with("VCURVE-CONNECT-ERROR")).unwrap_or_else(|| panic!("{said}"));
    assert!(line.contains("/nonexistent/vcurve-test.sock"), "{line}");
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Timings of this engine: `cargo test -p vcurve-worker --test docker_runtime -- --ignored --nocapture measure`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn measure() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("measure").await;
    let runtime = scope.runtime.clone();
    let (mut start, mut exec, mut commit, mut diff, mut remove, mut timeout) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let c = scope.start().await;
    for i in 0..10 {
        let t = Instant::now();
        let id = runtime.create(&scope.spec()).await.expect("creates");
        start.push(t.elapsed());
        let t = Instant::now();
        runtime.remove(&id).await.expect("removes");
        remove.push(t.elapsed());

        let t = Instant::now();
        run(&c, "true").await;
        exec.push(t.elapsed());

        run(&c, &format!("echo {i} > /root/f{i}")).await;
        let t = Instant::now();
        c.diff().await.expect("diff");
        diff.push(t.elapsed());

        let t = Instant::now();
        c.commit(&scope.reference(i), &scope.test_filter()).await.expect("commits");
        commit.push(t.elapsed());
        runtime.remove_image(&scope.reference(i)).await.expect("removes");
    }
    for _ in 0..3 {
        let t = Instant::now();
        c.exec(&bash("sleep 100", Duration::from_millis(500))).await.expect("runs");
        timeout.push(t.elapsed() - Duration::from_millis(500));
    }
    println!("create+start median {:?}", median(start));
    println!("remove median       {:?}", median(remove));
    println!("exec round trip     {:?}", median(exec));
    println!("diff median         {:?}", median(diff));
    println!("commit median       {:?}", median(commit));
    println!("timeout kill beyond the timeout {:?}", median(timeout));
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn no_child_of_a_returned_command_reaches_the_next_command() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("children").await;
    let c = scope.start().await;
    for command in [
        // A child that let go of the output, in the command's group.
        "sleep 1001 >/dev/null 2>&1 & echo started",
        // A child that left the group but holds the output.
        "setsid sleep 1002 & echo started",
        // Grandchildren.
        "( (sleep 1003 &) & ) ; echo started",
    ] {
        let start = Instant::now();
        let out = c.exec(&bash(command, Duration::from_secs(30))).await.expect("runs");
        assert_eq!((text(&out).as_str(), out.exit_code), ("started\n", Some(0)), "{command}");
        assert!(start.elapsed() < Duration::from_secs(2), "{command}: returned after {:?}", start.elapsed());
        // The next command sees none of them.
        let seen = run(&c, "ps -eo args 2>/dev/null | grep -c '^sleep 100[0-9]' || true").await;
        assert_eq!(text(&seen).trim(), "0", "{command}: {:?}", leftovers(&c).await);
    }
    c.remove().await.expect("removed");
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_and_never_an_engine_message_recorded_as_output() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("forkbomb").await;
    let c = scope.start_with(&ContainerSpec { pids_limit: 64, ..scope.spec() }).await;
    // Issue 24: after a fork bomb, later commands got `OCI runtime exec failed …`, recorded as
    // their output. Now each command either runs, or is an engine error (the job a no-outcome).
    let engine_text = |r: &Result<ExecOutput, RuntimeError>| match r {
        Ok(out) => !text(out).contains("OCI runtime exec failed"),
        Err(RuntimeError::Engine(_) | RuntimeError::Gone(_)) => true,
        Err(_) => false,
    };
    let bomb = c.exec(&bash("bomb() { bomb | bomb & }; bomb; echo lit", Duration::from_secs(5))).await;
    assert!(engine_text(&bomb), "{bomb:?}");
    let mut worked = 0;
    for _ in 0..3 {
        let after = c.exec(&bash("echo after", Duration::from_secs(10))).await;
        assert!(engine_text(&after), "{after:?}");
        if let Ok(out) = &after {
            assert_eq!((text(out).as_str(), out.exit_code), ("after\n", Some(0)));
            worked += 1;
        }
    }
    eprintln!(
        "fork bomb: {:?} output lines; later commands that ran: {worked} of 3",
        bomb.as_ref().map(|o| text(o).lines().count())
    );
    // The container is bounded by its pids limit, and the bomb by its command: when its kill ran
    // (the exec returned the output), nothing of it is left. When even the kill could not start
    // (an engine error), the job is a no-outcome and its container removed with what it holds.
    if worked > 0 && bomb.is_ok() {
        let left = leftovers(&c).await;
        assert!(left.is_empty(), "{} processes left behind: {:?}", left.len(), &left[..left.len().min(5)]);
    }
    c.remove().await.expect("removed");
}

/// The test task (calc at `/testbed` of `image`) and the limits of its replays' containers,
/// labelled for `scope`.
fn calc_task(
    scope: &Scope,
    image: String,
) -> (vcurve_record::trajectory::Task, vcurve_worker::sandbox::replay::ContainerLimits) {
    use vcurve_record::trajectory::{Evaluator, Task};
    let task = Task {
        id: "calc-1".into(),
        image,
        workdir: "/testbed".into(),
        evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
        problem_statement: None,
    };
    let limits = vcurve_worker::sandbox::replay::ContainerLimits {
        memory_bytes: 512 << 20,
        pids_limit: 256,
        labels: scope.labels_for(&format!("worker-{}", scope.key)),
        network: Default::default(),
        exec_env: Default::default(),
    };
    (task, limits)
}

/// Replay measures the first edit and the first symptom on the test task image (calc at
/// `/testbed`, a git repository): a new file, caches, git's own files and a file rewritten to its
/// own bytes are no edit; appending to a tracked file is; a traceback after it is the symptom.
#[tokio::test]
async fn replay_measures_the_first_edit_and_the_first_symptom_on_the_task_image() {
    use vcurve_method::analyses::Observation;
    use vcurve_worker::sandbox::replay::{FingerprintMode, Normalizer, Verdict};
    use vcurve_worker::sandbox::replay_job::replay_trajectory;
    use vcurve_worker::sandbox::snapshots::SnapshotCache;

    let [_, task_image] = vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let scope = Scope::new("observe").await;
    let (task, limits) = calc_task(&scope, task_image);
    let commands = [
        "cat README.md",
        // A new file of the repository: untracked, no edit.
        "printf 'print(1)\\n' > repro.py",
        // Caches (__pycache__) and git's own files (.git/index) change: no edit.
        "python3 -m unittest discover -s tests 2>&1 | tail -1; git status --short",
        // A tracked file rewritten to its own bytes: changed for the container diff, not for git.
        "sed -i 's/a/a/' calc/ops.py",
        // The first edit.
        "printf '# edited\\n' >> calc/ops.py",
        "cat calc/ops.py | tail -1",
        // The first symptom: a traceback of a script run.
        "python3 -c 'raise ValueError(\"boom\")'",
        "python3 -c 'raise ValueError(\"again\")'",
    ];
    let container = Container::start(scope.dyn_runtime(), &limits.spec(&task.image)).await.unwrap();
    let trajectory = crate::support::record_commands(&container, &task, &commands, 60.0).await;
    container.remove().await.unwrap();
    assert_eq!(trajectory.steps[6].actions[0].returncode, Some(1), "the traceback's run fails");

    let cache = SnapshotCache::open(scope.dyn_runtime(), 1 << 40).await.unwrap();
    let digest = trajectory.digest();
    let started = Instant::now();
    let verdict = replay_trajectory(
        &cache,
        &trajectory,
        &digest,
        &[0],
        &Normalizer::default(),
        FingerprintMode::CompareOnly,
        &limits,
    )
    .await
    .unwrap();
    let Verdict::Reproduced(replay) = verdict else { panic!("non-replayable: {verdict:?}") };
    eprintln!("replay of {} steps measuring the first edit: {:.2} s", commands.len(), started.elapsed().as_secs_f64());
    assert_eq!((replay.replayed.first_edit, replay.replayed.first_symptom), (Observation::At(5), Observation::At(7)));
}

/// On the engine, an anchor whose writable layer did not change since the anchor before it (the
/// steps in between only read) is that anchor's image named again, not committed; a cache reopened
/// on the engine holds it at its own step, and a container started from it is the state there.
#[tokio::test]
async fn an_unchanged_anchor_is_the_previous_snapshot_named_again_on_the_engine() {
    use vcurve_worker::sandbox::replay::{FingerprintMode, Normalizer, Verdict};
    use vcurve_worker::sandbox::replay_job::replay_trajectory;
    use vcurve_worker::sandbox::snapshots::SnapshotCache;

    let [_, task_image] = vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let scope = Scope::new("alias").await;
    let (task, limits) = calc_task(&scope, task_image);
    let commands =
        ["printf 'one\\n' > notes.txt", "cat README.md", "grep -c . notes.txt", "printf 'two\\n' >> notes.txt"];
    let container = Container::start(scope.dyn_runtime(), &limits.spec(&task.image)).await.unwrap();
    let trajectory = crate::support::record_commands(&container, &task, &commands, 60.0).await;
    container.remove().await.unwrap();

    let cache = SnapshotCache::open(scope.dyn_runtime(), 1 << 40).await.unwrap();
    let digest = trajectory.digest();
    let run = replay_trajectory(
        &cache,
        &trajectory,
        &digest,
        &[1, 3, 4],
        &Normalizer::default(),
        FingerprintMode::CompareOnly,
        &limits,
    )
    .await
    .unwrap();
    let Verdict::Reproduced(replay) = run else { panic!("non-replayable: {run:?}") };
    assert_eq!(replay.replayed.anchors, vec![1, 3, 4]);
    assert_eq!(replay.aliased, 1, "h_3 is h_1: steps 2 and 3 only read");
    let ours =
        |c: &SnapshotCache| c.held().into_iter().filter(|(d, _)| *d == digest).map(|(_, t)| t).collect::<Vec<_>>();
    let reopened = SnapshotCache::open(scope.dyn_runtime(), 1 << 40).await.unwrap();
    assert_eq!(ours(&reopened), vec![1, 3, 4], "a restarted worker finds every anchor at its own step");
    // A container from h_3 holds what the trajectory had written by then.
    let spec = limits.spec(&SnapshotCache::reference(&digest, 3).unwrap());
    let c = Container::start(scope.dyn_runtime(), &spec).await.unwrap();
    let out = c.exec(&bash("cat /testbed/notes.txt", Duration::from_secs(10))).await.unwrap();
    assert_eq!(text(&out), "one\n");
    c.remove().await.unwrap();
    reopened.remove_all().await;
    cache.remove_all().await;
}

/// Changes of every kind a writable layer holds, one container each.
const LAYER_CASES: &[&str] = &[
    "echo hello > /root/hello.txt && rm /etc/issue && echo x >> /etc/hostname.bak",
    "chmod 644 /etc/passwd; chown root /etc/group; mkdir /tmp/d1 && rmdir /tmp/d1",
    "cp -p /etc/passwd /tmp/p; cat /tmp/p > /etc/passwd; touch -r /tmp/p /etc/passwd; rm /tmp/p",
    "rm -rf /usr/share/perl5 2>/dev/null; rm -rf /etc/apt && mkdir /etc/apt && echo y > /etc/apt/new",
    "rm -rf /var/lib/dpkg/info && mkdir -p /var/lib/dpkg/info/sub && touch /var/lib/dpkg/info/sub/f",
    "rm /etc/hostname.x 2>/dev/null; rm -f /etc/debian_version && mkdir /etc/debian_version && touch /etc/debian_version/f",
    "mkfifo /tmp/fifo; ln -s /nowhere /tmp/link; ln /etc/passwd /root/hard; touch /usr/bin/env; chmod 700 /root",
    "mkdir -p /a/b/c && echo 1 > /a/b/c/f && rm -rf /a/b && echo 2 > /a/g",
];

/// The changes read from the writable layer are the set `docker diff` gives, case by case:
/// additions, writes, copy-ups that change nothing the engine compares, deletions of files and
/// trees, directories deleted and made again (opaque), whiteouts of what the container made
/// itself, type changes, special files, and a state reached from a committed snapshot.
#[tokio::test]
async fn the_diff_read_from_the_writable_layer_is_the_engines() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("layer-diff").await;
    for case in LAYER_CASES {
        let c = scope.start().await;
        run(&c, case).await;
        let read = c.diff().await.expect("diff");
        let engine = scope.runtime.engine_diff(c.id()).await.expect("the engine's diff");
        assert_eq!(read, engine, "after {case:?}");
        let (_, stamp) = c.diff_stamped().await.expect("diff");
        assert!(stamp.is_some(), "this engine's writable layer is readable here (run the tests as root)");
        c.remove().await.expect("removed");
    }
    // From a snapshot: the diff is against the snapshot.
    let c = scope.start().await;
    run(&c, "echo 1 > /root/one && rm /etc/issue && mkdir /srv/x && echo 2 > /srv/x/two").await;
    let reference = scope.reference(1);
    let mut image_labels = scope.labels_for("w");
    image_labels.insert("vcurve.snapshot.t".to_owned(), "1".to_owned());
    c.commit(&reference, &image_labels).await.expect("committed");
    c.remove().await.expect("removed");
    let mut spec = scope.spec();
    spec.image = reference;
    let c = scope.start_with(&spec).await;
    run(&c, "rm /root/one && echo 3 >> /srv/x/two && rm -rf /srv/x && mkdir /srv/x && touch /etc/issue").await;
    let engine = scope.runtime.engine_diff(c.id()).await.expect("the engine's diff");
    assert_eq!(c.diff().await.expect("diff"), engine);
    c.remove().await.expect("removed");
}

/// The stamp of the writable layer stays while commands only read, and moves with a write that
/// leaves size, time and output alone.
#[tokio::test]
async fn the_layer_stamp_moves_with_every_write_and_only_then() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("layer-stamp").await;
    let c = scope.start().await;
    run(&c, "echo 1 > /root/f").await;
    let (_, first) = c.diff_stamped().await.expect("diff");
    run(&c, "cat /root/f; ls -R /etc > /dev/null; python3 -c 'print(1)'").await;
    let (_, same) = c.diff_stamped().await.expect("diff");
    assert_eq!(first, same, "reading wrote to the layer");
    run(&c, "touch -r /root/f /tmp/r; echo 2 > /root/f; touch -r /tmp/r /root/f; rm /tmp/r").await;
    let (_, moved) = c.diff_stamped().await.expect("diff");
    assert_ne!(first, moved);
    // The engine-only runtime has no stamp.
    let engine_only = Arc::new(DockerRuntime::connect().await.expect("connects").engine_only());
    let rt: Arc<dyn ContainerRuntime> = engine_only;
    let (changes, stamp) = rt.diff_stamped(c.id()).await.expect("diff");
    assert_eq!(stamp, None);
    assert_eq!(changes, c.diff().await.expect("diff"));
    c.remove().await.expect("removed");
}

/// Every path of a container where the cases write (the engine's own mounts and files left out),
/// with its stat (times to the
/// second, as a snapshot keeps them; no directory times: the engine writes `/` and `/etc` at every
/// start) and link count last, and the checksum of every regular file where the cases write.
const LISTING: &str = r#"set -e
skip='( -path /proc -o -path /sys -o -path /dev -o -path /etc/hostname -o -path /etc/hosts -o -path /etc/resolv.conf -o -path /etc/mtab -o -path /.dockerenv )'
stat='! -type d -printf %p_%m_%u_%g_%s_%Ts_%y_%l_%n\n -o -type d -printf %p_%m_%u_%g_%y_%n\n'
{ find / /usr /usr/share -xdev -mindepth 1 -maxdepth 1 $skip -prune -o $stat
  find /root /etc /tmp /srv /a /usr/bin /usr/share/perl5 /var/lib/dpkg -xdev -mindepth 1 $skip -prune -o $stat 2>/dev/null
} | sort -u
find /root /etc /tmp /srv /a /usr/bin /var/lib/dpkg -xdev $skip -prune -o -type f -print0 2>/dev/null | sort -z | xargs -0 md5sum
"#;

fn assert_same_tree(case: &str, a_name: &str, a: &str, b_name: &str, b: &str) {
    if a != b {
        let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
        let only_a: Vec<&&str> = a.iter().filter(|l| !b.contains(l)).take(10).collect();
        let only_b: Vec<&&str> = b.iter().filter(|l| !a.contains(l)).take(10).collect();
        panic!("after {case:?}, {a_name} and {b_name} differ:\n{a_name} only: {only_a:#?}\n{b_name} only: {only_b:#?}");
    }
}

/// A snapshot loaded from the writable layer is the container's state: a container started from
/// it sees the same tree (paths, modes, owners, times, links, contents) as the container it was
/// taken of, for every kind of change, and the tree the engine's commit makes but for what the
/// commit loses; and a container started from a loaded snapshot reads its changes from its
/// own writable layer as the engine diffs them.
#[tokio::test]
async fn a_snapshot_loaded_from_the_writable_layer_is_the_engines_commit() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("layer-load").await;
    let extra = [
        "chmod 4755 /usr/bin/env; touch '/root/a b'; d=/root/$(printf 'd%.0s' $(seq 1 120)); mkdir -p $d/x && echo long > $d/x/f && ln -s $d/x/f $d/x/link-with-a-long-target",
        "rm -rf /etc/apt && mkdir /etc/apt && echo again > /etc/apt/sources.list; mv /etc/issue.net /root/moved",
    ];
    let mut image_labels = scope.labels_for("w");
    image_labels.insert("vcurve.snapshot.t".to_owned(), "5".to_owned());
    for (n, case) in LAYER_CASES.iter().chain(extra.iter()).enumerate() {
        let c = scope.start().await;
        run(&c, case).await;
        let loaded = scope.reference(2 * n as u32);
        let committed = scope.reference(2 * n as u32 + 1);
        c.commit(&loaded, &image_labels).await.expect("loads");
        scope.runtime.engine_commit(c.id(), &committed, &image_labels).await.expect("commits");
        let comment = docker_cli(&["history", "--no-trunc", "--format", "{{.Comment}}", &loaded]);
        assert!(
            comment.lines().next().unwrap_or("").contains("vcurve snapshot"),
            "the snapshot of {case:?} was not loaded from the layer: {comment}"
        );
        // The container itself, its loaded snapshot and the engine's commit of it.
        let live = run(&c, LISTING).await;
        assert_eq!(live.exit_code, Some(0), "{}", text(&live));
        let mut trees = vec![text(&live)];
        for reference in [&loaded, &committed] {
            let from = scope.start_with(&ContainerSpec { image: reference.clone(), ..scope.spec() }).await;
            let listing = run(&from, LISTING).await;
            assert_eq!(listing.exit_code, Some(0), "{}", text(&listing));
            assert_eq!(from.diff().await.expect("diff"), Vec::new());
            trees.push(text(&listing));
            from.remove().await.expect("removed");
        }
        assert_same_tree(case, "the container", &trees[0], "its loaded snapshot", &trees[1]);
        // The engine's commit loses two things the layer holds: a hard link to a file of the
        // image (it writes the new name as a copy) and a directory whose time alone changed.
        let unlinked = |tree: &str| {
            tree.lines()
                .map(|l| l.rsplit_once('_').map_or(l, |(head, _)| head).to_owned())
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_same_tree(
            case,
            "the loaded snapshot",
            &unlinked(&trees[1]),
            "the engine's commit",
            &unlinked(&trees[2]),
        );
        let listed = scope.runtime.images(&scope.test_filter()).await.expect("lists");
        let own = listed.iter().find(|i| i.reference == loaded).expect("the loaded snapshot is listed");
        for (k, v) in &image_labels {
            assert_eq!(own.labels.get(k), Some(v), "label {k}");
        }
        let size = own.size_bytes;
        assert!(size < 5_000_000, "the loaded snapshot's own size {size} is its layer's, not the image's");
        c.remove().await.expect("removed");
    }
    // Over a loaded snapshot, the diff read from the writable layer is still the engine's.
    let c = scope.start().await;
    run(&c, "echo 1 > /root/one && rm /etc/issue && mkdir /srv/x && echo 2 > /srv/x/two && rm -rf /etc/apt && mkdir /etc/apt").await;
    let reference = scope.reference(1000);
    c.commit(&reference, &image_labels).await.expect("loads");
    c.remove().await.expect("removed");
    let c = scope.start_with(&ContainerSpec { image: reference.clone(), ..scope.spec() }).await;
    run(&c, "rm /root/one && echo 3 >> /srv/x/two && rm -rf /srv/x && mkdir /srv/x && touch /etc/issue /etc/apt/new")
        .await;
    let engine = scope.runtime.engine_diff(c.id()).await.expect("the engine's diff");
    assert_eq!(c.diff().await.expect("diff"), engine);
    // And a snapshot of a snapshot holds both layers.
    let second = scope.reference(1001);
    c.commit(&second, &image_labels).await.expect("loads");
    c.remove().await.expect("removed");
    let c = scope.start_with(&ContainerSpec { image: second, ..scope.spec() }).await;
    let out = run(&c, "ls /root/one /etc/issue /etc/apt /srv/x 2>&1; cat /etc/apt/new; echo done").await;
    assert_eq!(
        text(&out),
        "ls: cannot access '/root/one': No such file or directory\n/etc/issue\n\n/etc/apt:\nnew\n\n/srv/x:\ndone\n"
    );
    c.remove().await.expect("removed");
}

/// A fingerprint's git state compares only sizes and whole-second times where that is exact, and
/// reads what git reads without that: after an edit, and after a tracked file was rewritten behind
/// the agent's back keeping its size and time (which only its bytes tell), and after git wrote its
/// own index in the container.
#[tokio::test]
async fn a_fingerprint_reads_the_git_state_git_reads_without_shortcuts() {
    use vcurve_worker::sandbox::replay::{ChangeSet, Fingerprinter, git_state};
    let [_, task_image] = vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let scope = Scope::new("git-stat").await;
    let (task, limits) = calc_task(&scope, task_image);
    let interpreter = vcurve_record::Interpreter::default();
    let c = scope.start_with(&limits.spec(&task.image)).await;
    let mut measure = Fingerprinter::new(&c, &task, &interpreter, ChangeSet::new());
    let steps = [
        // An edit.
        ("echo '# more' >> /testbed/calc/ops.py", true),
        // A rewrite keeping size and time: one byte flipped, the time put back.
        (
            "cd /testbed && cp -p calc/format.py /tmp/o && python3 -c \"p='calc/format.py'; b=bytearray(open(p,'rb').read()); b[0]=b[0]^1; open(p,'wb').write(b)\" && touch -r /tmp/o calc/format.py && rm /tmp/o",
            false,
        ),
        // git writes its index (a plain status refreshes it).
        ("cd /testbed && git checkout -q calc/format.py && git status > /dev/null", false),
    ];
    for (t, (command, stat_exact)) in steps.iter().enumerate() {
        let t = t as u32 + 1;
        run(&c, command).await;
        let (_, stamp) = measure.changes_stamped(t).await.expect("measures");
        let stamp = stamp.expect("the layer is read here");
        if t < 3 {
            assert_eq!(stamp.stat_exact, *stat_exact, "after {command:?}");
        } else {
            let diff = c.diff().await.expect("diff");
            assert!(diff.iter().any(|c| c.path == "/testbed/.git/index"), "git wrote its index: {diff:?}");
        }
        let fingerprint = measure.fingerprint(t, Some(0)).await.expect("measures");
        let (diff, status) = git_state(&c, &task, &interpreter, false).await.expect("git");
        assert_eq!((&fingerprint.git_diff, &fingerprint.git_status), (&diff, &status), "after {command:?}");
        // And the shortcut itself, run regardless, agrees wherever it is taken.
        if t == 1 {
            assert_eq!(git_state(&c, &task, &interpreter, true).await.expect("git"), (diff.clone(), status.clone()));
        }
        if t == 2 {
            assert!(
                fingerprint.git_diff.contains("calc/format.py"),
                "the rewrite is in git diff: {}",
                fingerprint.git_diff
            );
            assert!(
                !fingerprint.changed_paths.iter().any(|p| p.ends_with("format.py")),
                "the engine's diff does not see it: {:?}",
                fingerprint.changed_paths
            );
        }
    }
    c.remove().await.expect("removed");
}

/// vcurve's own scripts kill what they leave behind themselves ([`exec::REAP_TAIL`]), under bash
/// and under sh: a background child in the script's process group and one that left the group
/// but holds the output, with the script's exit status and output kept. So does a fingerprint's
/// git, whose fsmonitor hook (set by whoever wrote the repository's configuration) starts both.
#[tokio::test]
async fn vcurves_own_scripts_and_a_fingerprints_git_leave_no_process() {
    use vcurve_worker::sandbox::exec;
    use vcurve_worker::sandbox::replay::git_state;
    let [_, task_image] = vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let scope = Scope::new("own-reap").await;
    let (task, limits) = calc_task(&scope, task_image);
    let c = scope.start_with(&limits.spec(&task.image)).await;
    for shell in ["bash", "sh"] {
        let interpreter =
            vcurve_record::Interpreter { argv: vec![shell.to_owned(), "-c".to_owned()], ..Default::default() };
        let script = "sleep 1231 >/dev/null 2>&1 &\nsetsid sleep 1232 >/dev/null &\necho printed\n(exit 3)";
        let started = Instant::now();
        let out = exec::run_own_command(&c, &task, &interpreter, script, 60.0).await.expect("runs");
        assert_eq!((out.output.as_str(), out.returncode, out.timed_out), ("printed\n", Some(3), false), "{shell}");
        assert!(started.elapsed() < Duration::from_secs(2), "{shell}: the output closed at once");
        assert_eq!(leftovers(&c).await, Vec::<String>::new(), "{shell}: processes left");
        // All of its output.
        let out = exec::run_own_command(&c, &task, &interpreter, "head -c 3000000 /dev/zero | tr '\\0' x", 60.0)
            .await
            .expect("runs");
        assert_eq!(out.output.len(), 3_000_000, "{shell}: output lost");
    }
    run(
        &c,
        "printf '#!/bin/sh\\ntouch /tmp/fsm-ran\\nsleep 1231 >/dev/null 2>&1 &\\nsetsid sleep 1232 >/dev/null &\\nexit 1\\n' > /usr/local/bin/fsm \
         && chmod +x /usr/local/bin/fsm && git -C /testbed config core.fsmonitor /usr/local/bin/fsm",
    )
    .await;
    let interpreter = vcurve_record::Interpreter::default();
    git_state(&c, &task, &interpreter, false).await.expect("git");
    assert_eq!(text(&run(&c, "ls /tmp/fsm-ran").await).trim(), "/tmp/fsm-ran", "git ran the hook");
    assert_eq!(leftovers(&c).await, Vec::<String>::new(), "what git's hook started is left");
    c.remove().await.expect("removed");
}

/// A snapshot made in two halves is the container's state when the first half returned: what the
/// container does while the image is being loaded is not in it.
#[tokio::test]
async fn a_snapshot_made_later_is_the_state_it_was_taken_at() {
    vcurve_testkit::require!(Service::Docker, Service::BaseImage);
    let scope = Scope::new("commit-later").await;
    let labels = scope.labels_for("w");
    let c = scope.start().await;
    run(&c, "mkdir -p /work && echo taken > /work/state && echo kept > /work/kept").await;
    let reference = scope.reference(1);
    let pending = c.commit_later(&reference, &labels).await.expect("taken");
    run(&c, "echo later > /work/state && rm /work/kept && echo new > /work/new").await;
    pending.await.expect("loaded");
    let from = scope.start_with(&ContainerSpec { image: reference.clone(), ..scope.spec() }).await;
    let seen = run(&from, "cat /work/state /work/kept; ls /work").await;
    assert_eq!(text(&seen), "taken\nkept\nkept\nstate\n");
    from.remove().await.expect("removed");
    c.remove().await.expect("removed");
}

/// git's stat shortcut over a snapshot: an anchor taken where it was exact is labelled so, and a
/// continuation's replay from it compares sizes and seconds only where that stays exact — a file
/// rewritten in the snapshot's container keeping its size and second is still seen (the recorded
/// fingerprints, measured from the task image, must match), and the state after it is not
/// labelled exact.
#[tokio::test]
async fn git_reads_a_snapshot_as_exactly_as_the_task_image() {
    use vcurve_worker::sandbox::replay::{FingerprintMode, Normalizer, STAT_EXACT_LABEL, Verdict};
    use vcurve_worker::sandbox::replay_job::replay_trajectory;
    use vcurve_worker::sandbox::snapshots::SnapshotCache;

    let [_, task_image] = vcurve_testkit::require!(Service::Docker, Service::TaskImage);
    let scope = Scope::new("snap-stat").await;
    let (task, limits) = calc_task(&scope, task_image);
    let commands = [
        "echo '# more' >> calc/ops.py",
        "cat calc/ops.py > /dev/null",
        "cp -p calc/format.py /tmp/o && python3 -c \"p='calc/format.py'; b=bytearray(open(p,'rb').read()); b[0]=b[0]^1; open(p,'wb').write(b)\" && touch -r /tmp/o calc/format.py && rm /tmp/o",
        "true",
    ];
    let container = Container::start(scope.dyn_runtime(), &limits.spec(&task.image)).await.unwrap();
    let mut trajectory = crate::support::record_commands(&container, &task, &commands, 60.0).await;
    container.remove().await.unwrap();
    let cache = SnapshotCache::open(scope.dyn_runtime(), 1 << 40).await.unwrap();
    let normalizer = Normalizer::default();
    let replay = |trajectory: vcurve_record::Trajectory, mode| {
        let (cache, normalizer, limits) = (&cache, &normalizer, &limits);
        async move {
            let digest = trajectory.digest();
            match replay_trajectory(cache, &trajectory, &digest, &[1], normalizer, mode, limits).await.unwrap() {
                Verdict::Reproduced(done) => done,
                other => panic!("non-replayable: {other:?}"),
            }
        }
    };
    // The fingerprints, measured from the task image, recorded.
    let measured = replay(trajectory.clone(), FingerprintMode::RecordMissing).await;
    assert!(measured.fingerprints[&3].git_diff.contains("calc/format.py"), "{:?}", measured.fingerprints[&3]);
    for (t, fingerprint) in measured.fingerprints {
        trajectory.steps[t as usize - 1].fingerprint = Some(fingerprint);
    }
    cache.remove_all().await;
    let digest = trajectory.digest();
    replay(trajectory.clone(), FingerprintMode::CompareOnly).await;
    let labels_at = |t: u32| {
        let reference = SnapshotCache::reference(&digest, t).unwrap();
        let runtime = scope.dyn_runtime();
        async move {
            let images = runtime.images(&BTreeMap::new()).await.unwrap();
            images.into_iter().find(|i| i.reference == reference).map(|i| i.labels).unwrap_or_default()
        }
    };
    let exact_at = |t: u32| {
        let labels = labels_at(t);
        async move { labels.await.get(STAT_EXACT_LABEL).cloned() }
    };
    assert_eq!(exact_at(1).await.as_deref(), Some("1"), "h_1 is exact");
    let prepare = |t: u32| {
        let (cache, trajectory, digest, normalizer, limits) = (&cache, &trajectory, &digest, &normalizer, &limits);
        async move {
            match cache.prepare(trajectory, digest, t, normalizer, limits).await.unwrap() {
                Verdict::Reproduced(prepared) => {
                    let from = (prepared.from, prepared.committed);
                    prepared.container.remove().await.unwrap();
                    from
                }
                Verdict::NonReplayable(why) => panic!("the replay from the snapshot missed what git sees: {why:?}"),
            }
        }
    };
    // A snapshot of a container of an exact snapshot, where nothing was rewritten: exact.
    assert_eq!(prepare(2).await, (1, true));
    assert_eq!(exact_at(2).await.as_deref(), Some("1"), "h_2 is exact");
    // From the snapshot at 2 to 4: the rewrite at 3 is in git's diff, as recorded, and h_4 is not
    // exact.
    assert_eq!(prepare(4).await, (2, true));
    assert_eq!(exact_at(4).await.as_deref(), Some("0"), "h_4 holds a rewrite keeping size and second");
    cache.remove_all().await;
}
