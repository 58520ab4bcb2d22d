//! The hostile probe of issue 24: an agent process must not see the worker's variables (its
//! `VCURVE_WORKER_TOKEN` above all), and, when the worker runs as root, must run as an
//! unprivileged user that cannot reach the Docker socket.
//!
//! The worker's environment is the process's own, which a test cannot change safely; so each test
//! runs this test binary again as a child "worker" process, with `VCURVE_WORKER_TOKEN` and other
//! secrets in its environment, and the child runs a real agent process through the worker's own
//! path (a registration looked up by [`AgentRegistry::command`], started by [`run_agent`]) in a
//! test double of a container. The agent reports what it sees as its submission.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vcurve_record::runner::AgentOptions;
use vcurve_record::{Evaluator, Interpreter, Task};
use vcurve_worker::runners::agent::{AgentLimits, AgentStart, run_agent};
use vcurve_worker::sandbox::container::double::FakeRuntime;
use vcurve_worker::sandbox::container::{Container, ContainerSpec};
use vcurve_worker::{AgentRegistry, AgentUser};

/// Set in the child "worker" process: the test it runs is the probe itself.
const CHILD: &str = "VCURVE_TEST_AGENT_ENV_CHILD";
/// The child's secrets, which no agent may see.
const SECRETS: &[(&str, &str)] = &[
    ("VCURVE_WORKER_TOKEN", "worker-secret-0123"),
    ("VCURVE_CLIENT_TOKEN", "client-secret-4567"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
    ("DOCKER_HOST", "unix:///var/run/docker.sock"),
    ("LD_PRELOAD", ""),
];

/// An agent that reports its environment, user, groups, home and whether it can open the Docker
/// socket, in its `final` submission (it takes no step: the report is all it does).
const AGENT: &str = r#"
import json, os, socket, sys
start = json.loads(sys.stdin.readline())
docker = "absent"
if os.path.exists("/var/run/docker.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect("/var/run/docker.sock")
        docker = "connected"
    except PermissionError:
        docker = "denied"
    except OSError as e:
        docker = "error: %s" % e
home = os.environ.get("HOME", "")
report = {"env": dict(os.environ), "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
          "docker": docker, "home_writable": bool(home) and os.access(home, os.W_OK)}
msgs = [{"role": "system", "content": "probe"}, {"role": "assistant", "content": "done"}]
sys.stdout.write(json.dumps({"type": "final", "end_type": "submitted", "submission": json.dumps(report),
                             "messages": msgs}) + "\n")
sys.stdout.flush()
"#;

fn task() -> Task {
    Task {
        id: "probe".into(),
        image: "img".into(),
        workdir: "/testbed".into(),
        evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
        problem_statement: None,
    }
}

/// Run this test again as a child worker process with the secrets (and `extra`) in its
/// environment; it must pass.
fn in_child_worker(test: &str, extra: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", &format!("agent_environment::{test}"), "--nocapture", "--test-threads", "1"])
        .envs(SECRETS.iter().copied())
        .envs(extra.iter().copied())
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the child worker failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// In the child: the probe agent run through the worker's path, with `env` from the study and
/// the registry `registry`; what the agent reported.
async fn probe(registry: &AgentRegistry, study_env: Value) -> Value {
    let dir = tempfile::tempdir().unwrap();
    // Readable by an agent user too.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = dir.path().join("probe.py");
    std::fs::write(&script, AGENT).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    // The interpreter itself, not a launcher (a pyenv shim is a shell script that adds its own
    // variables), and one an agent user may run (the system's, not one under /root).
    let python = match Path::new("/usr/bin/python3").exists() {
        true => "/usr/bin/python3".to_owned(),
        false => {
            let found =
                std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
            String::from_utf8(found.unwrap().stdout).unwrap().trim().to_owned()
        }
    };
    let mut registry = registry.clone();
    let file = format!(
        "agents:\n  probe:\n    command: [{python}, {}]\n    env: {{PROBE_OWN: own}}\n    allow_env: [OPENAI_API_KEY]\n",
        script.display()
    );
    registry.register_file(&file, "agents.yaml").unwrap();
    let options = AgentOptions::from_json(&json!({"agent": "probe", "env": study_env})).unwrap();
    let command = registry.command(&options).unwrap();

    let runtime = Arc::new(FakeRuntime::new());
    runtime.add_image("img", [("/testbed/README", "")]);
    let spec = ContainerSpec {
        image: "img".into(),
        memory_bytes: 1 << 30,
        pids_limit: 64,
        labels: BTreeMap::new(),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    };
    let container = Container::start(runtime, &spec).await.unwrap();
    let start = AgentStart {
        command,
        task: task(),
        interpreter: Interpreter::default(),
        messages: vec![],
        t: 0,
        budget: 3,
        seed: 1,
        model: json!({}),
    };
    let limits = AgentLimits::new(Duration::from_secs(60));
    let run = run_agent(&container, start, limits, CancellationToken::new()).await.unwrap();
    serde_json::from_str(&run.submission).unwrap()
}

/// The agent sees the allow-list (PATH, HOME, the locale), its registration's own variables and
/// the study's allowed ones: no worker token, no other secret, nothing else.
#[test]
fn an_agent_sees_no_worker_token_and_no_variable_outside_the_allow_list() {
    if std::env::var_os(CHILD).is_none() {
        return in_child_worker(
            "an_agent_sees_no_worker_token_and_no_variable_outside_the_allow_list",
            &[("LANG", "C.UTF-8"), ("LC_ALL", "C.UTF-8"), ("OPENAI_API_KEY", "worker-side-key")],
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(probe(&AgentRegistry::new(), json!({"OPENAI_API_KEY": "study-key"})));
    let env = report["env"].as_object().unwrap();
    for (name, _) in SECRETS {
        assert!(!env.contains_key(*name), "the agent sees {name}: {env:?}");
    }
    let text = report.to_string();
    assert!(!text.contains("worker-secret-0123") && !text.contains("client-secret-4567"), "{text}");
    let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
    // Python itself may add LC_CTYPE when coercing the C locale.
    names.retain(|n| *n != "LC_CTYPE");
    let allowed = ["HOME", "LANG", "LC_ALL", "OPENAI_API_KEY", "PATH", "PROBE_OWN"];
    assert!(names.iter().all(|n| allowed.contains(n)), "{names:?} is outside {allowed:?}");
    assert_eq!(env["PROBE_OWN"], "own");
    assert_eq!(env["OPENAI_API_KEY"], "study-key", "the study's allowed variable, not the worker's");
    assert!(env.contains_key("PATH"));
}

/// As root, with an agent user, the agent runs as that user, with no supplementary group, a home
/// of its own, and no access to the Docker socket.
#[test]
fn as_root_an_agent_runs_unprivileged_without_the_docker_socket() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root (the worker drops to its agent user only as root)");
        return;
    }
    if std::env::var_os(CHILD).is_none() {
        return in_child_worker("as_root_an_agent_runs_unprivileged_without_the_docker_socket", &[]);
    }
    let user = AgentUser::lookup("nobody").unwrap();
    let mut registry = AgentRegistry::new();
    registry.run_as(Some(user.clone()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(probe(&registry, json!({})));
    assert_eq!((report["uid"].as_u64(), report["gid"].as_u64()), (Some(user.uid.into()), Some(user.gid.into())));
    assert_ne!(report["uid"], 0);
    let groups: Vec<u64> = report["groups"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(groups.iter().all(|g| *g == u64::from(user.gid)), "supplementary groups kept: {groups:?}");
    let socket = Path::new("/var/run/docker.sock").exists();
    assert_eq!(report["docker"], if socket { "denied" } else { "absent" }, "{report}");
    assert_eq!(report["env"]["HOME"], user.home.display().to_string());
    assert_eq!(report["home_writable"], true, "{report}");
    assert!(Path::new(&user.home).is_dir());
    assert!(!report.to_string().contains("worker-secret-0123"));
}
