//! Side by side with mini-swe-agent's own `DockerEnvironment` (the recording environment of the
//! paper's runs), on the same image: the observations vcurve's exec path gives a mini-swe-agent
//! trajectory's commands (`Interpreter::mini_swe_agent`: text-mode decoding, commands left running
//! at their timeout) are the ones `DockerEnvironment.execute` gives — for carriage returns, for
//! interleaved stdout and stderr, and for a command that outlives its timeout (its partial output,
//! and its effects after the timeout, which happen in both).
//!
//! Needs Docker, the test task image and the mini-swe-agent environment (`VCURVE_MSA_PYTHON`).
//! mini-swe-agent's container is its own (`docker run -d … sleep 2h`, removed at the end).

use std::collections::BTreeMap;
use std::sync::Arc;

use vcurve_record::trajectory::Interpreter;
use vcurve_testkit::require::Service;
use vcurve_worker::DockerRuntime;
use vcurve_worker::sandbox::container::{Container, ContainerRuntime, ContainerSpec, labels};
use vcurve_worker::sandbox::exec::run_command;

/// The commands, each with its timeout: CRLF and a lone CR, stdout and stderr interleaved, and a
/// command that outlives its 2 s timeout after printing, then writes a file; the last command
/// reads that file once the first has had time to write it.
const COMMANDS: &[(&str, u64)] = &[
    ("printf 'one\\r\\ntwo\\rthree\\n'; printf 'crlf\\r\\n' > crlf.txt; cat crlf.txt", 10),
    ("for i in 1 2 3; do echo out$i; sleep 0.05; echo err$i >&2; sleep 0.05; done; exit 3", 10),
    ("echo started; sleep 4; echo late > after-timeout.txt", 2),
    ("sleep 4; cat after-timeout.txt 2>&1; ls crlf.txt", 10),
];

const SCRIPT: &str = r#"
import json, subprocess, sys
from minisweagent.environments.docker import DockerEnvironment
image, commands, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
env = DockerEnvironment(image=image, cwd="/testbed", interpreter=["bash", "-c"], env={"PAGER": "cat"})
try:
    results = [env.execute({"command": c}, timeout=t) for c, t in commands]
finally:
    subprocess.run(["docker", "rm", "-f", env.container_id], capture_output=True)
with open(out, "w") as f:  # mini-swe-agent logs on stdout
    json.dump(results, f)
"#;

#[tokio::test]
async fn docker_mini_swe_agent_observations_are_those_of_its_own_docker_environment() {
    let [_, image, python] = vcurve_testkit::require!(Service::Docker, Service::TaskImage, Service::MiniSweAgent);
    let commands: Vec<(String, u64)> = COMMANDS.iter().map(|(c, t)| (c.to_string(), *t)).collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("theirs.json");
    let run = tokio::process::Command::new(&python)
        .args(["-c", SCRIPT, &image, &serde_json::to_string(&commands).unwrap(), &out.to_string_lossy()])
        .output()
        .await
        .expect("runs mini-swe-agent's python");
    assert!(run.status.success(), "{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let theirs: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("the script's JSON");

    let runtime: Arc<dyn ContainerRuntime> = Arc::new(DockerRuntime::connect().await.unwrap());
    let key = format!("msa-side-by-side-{}", std::process::id());
    let spec = ContainerSpec {
        image: image.clone(),
        memory_bytes: 1 << 30,
        pids_limit: 256,
        labels: BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned()), ("vcurve.test".to_owned(), key)]),
        network: Default::default(),
        exec_env: BTreeMap::new(),
    };
    let container = Container::start(runtime, &spec).await.unwrap();
    let interpreter = Interpreter::mini_swe_agent(
        vec!["bash".into(), "-c".into()],
        BTreeMap::from([("PAGER".to_owned(), "cat".to_owned())]),
    );
    let task = crate::support::calc_task(&image);
    let mut ours = Vec::new();
    for (command, timeout) in COMMANDS {
        ours.push(run_command(&container, &task, &interpreter, command, *timeout as f64).await.unwrap());
    }
    container.remove().await.unwrap();

    for (i, ((command, _), (theirs, ours))) in COMMANDS.iter().zip(theirs.iter().zip(&ours)).enumerate() {
        assert_eq!(theirs["output"].as_str(), Some(ours.output.as_str()), "command {i}: {command}");
        let timed_out = theirs["extra"]["exception_type"] == "TimeoutExpired";
        assert_eq!(timed_out, ours.timed_out, "command {i}: {command}: {theirs}");
        if !timed_out {
            assert_eq!(theirs["returncode"].as_i64(), ours.returncode.map(i64::from), "command {i}: {command}");
        }
    }
    assert_eq!(ours[0].output, "one\ntwo\nthree\ncrlf\n", "universal newlines");
    assert!(ours[1].output.starts_with("out1\nerr1\nout2\n"), "{:?}", ours[1].output);
    assert_eq!((ours[2].output.as_str(), ours[2].timed_out), ("started\n", true));
    assert_eq!(ours[3].output, "late\ncrlf.txt\n", "the timed-out command ran on in both");
}
