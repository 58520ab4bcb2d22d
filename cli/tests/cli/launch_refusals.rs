//! Refusals that must leave nothing behind, through the binary (issue 24, item 2): a spec naming
//! a file outside its folder (`problem_statement_file: ../../../etc/passwd`, `recorded: ../x`, a
//! curve that is a symbolic link out) is refused naming the path before anything is sent, a
//! launch the coordinator refuses after its files were uploaded leaves none of them, and a
//! coordinator that refuses to start has created no store.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sqlx::Connection as _;

use crate::common::write;

/// `vcurve` with no token or store from the environment.
fn vcurve() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vcurve"));
    for name in [
        "VCURVE_CLIENT_TOKEN",
        "VCURVE_WORKER_TOKEN",
        "VCURVE_STORE",
        "VCURVE_STORE_FILE",
        "VCURVE_LISTEN",
        "VCURVE_TLS_CERT",
        "VCURVE_TLS_KEY",
        "VCURVE_DASHBOARD",
        "VCURVE_METRICS",
        "VCURVE_COORDINATOR",
    ] {
        command.env_remove(name);
    }
    command.stdin(Stdio::null());
    command
}

/// A `vcurve coordinator` on a SQLite store, killed when dropped.
struct Coordinator {
    child: Child,
    url: String,
    store: PathBuf,
}

impl Coordinator {
    fn start(dir: &Path) -> Coordinator {
        let store = dir.join("store.sqlite");
        let mut child = vcurve()
            .args(["coordinator", "--listen", "127.0.0.1:0", "--store"])
            .arg(format!("sqlite://{}", store.display()))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut seen = Vec::new();
        let url = loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("the coordinator ended before it listened: {seen:#?}");
            }
            if let Some(rest) = line.strip_prefix("vcurve coordinator listening on ") {
                break format!("http://{}", rest.split_whitespace().next().unwrap());
            }
            seen.push(line);
        };
        std::thread::spawn(move || for _ in stderr.lines() {});
        Coordinator { child, url, store }
    }

    /// How many rows `table` of the store has (read beside the running coordinator).
    async fn rows(&self, table: &str) -> i64 {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}?mode=ro", self.store.display());
        let mut conn = sqlx::AnyConnection::connect(&url).await.unwrap();
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        n
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `vcurve launch SPEC ARGS… --coordinator URL`: whether it succeeded, and its stderr.
fn launch(spec: &Path, args: &[&str], url: &str) -> (bool, String) {
    let out = vcurve().arg("launch").arg(spec).args(args).args(["--coordinator", url]).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const RUNNER: &str = "runner: {kind: agent, agent: scripted}\n";

/// A study of one inline task whose problem statement is the file `statement`.
fn task_spec(statement: &str) -> String {
    format!(
        "name: hostile\nseed: 1\n{RUNNER}tasks:\n  - id: t1\n    image: vcurve-task-calc:abc\n    workdir: /testbed\n    \
         evaluator: {{kind: command, command: python3 -m unittest, timeout_s: 60}}\n    problem_statement_file: {statement}\n"
    )
}

/// A synthetic study of one trajectory whose curve is the file `curve`.
fn curve_spec(curve: &str) -> String {
    format!(
        "name: hostile\nseed: 1\nrunner: {{kind: synthetic}}\ntrajectories:\n  - {{id: a, length: 3, curve: {curve}}}\n"
    )
}

#[cfg(unix)]
#[tokio::test]
async fn a_spec_naming_a_file_outside_its_folder_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let study = root.join("from-someone-else");
    std::fs::create_dir_all(study.join("curves")).unwrap();
    let secret = write(&root, "secret.csv", "t,v\n0,0.5\n1,0.5\n2,0.5\n");
    std::os::unix::fs::symlink(&secret, study.join("curves/a.csv")).unwrap();
    std::fs::write(root.join("run.json"), "{}").unwrap();
    let coordinator = Coordinator::start(&root);

    let passwd = format!("{}etc/passwd", "../".repeat(12));
    let cases = [
        (task_spec(&passwd), vec!["tasks[0].problem_statement_file", passwd.as_str(), "resolves to /etc/passwd"]),
        (
            format!("name: hostile\nseed: 1\n{RUNNER}trajectories:\n  - {{id: r, recorded: ../run.json}}\n"),
            vec!["trajectory \"r\": recorded ../run.json"],
        ),
        (curve_spec("curves/a.csv"), vec!["trajectory \"a\": curve curves/a.csv"]),
    ];
    let folder = study.display().to_string();
    for (yaml, named) in &cases {
        let spec = write(&study, "study.yaml", yaml);
        let (ok, stderr) = launch(&spec, &[], &coordinator.url);
        assert!(!ok, "launched: {yaml}");
        for part in named.iter().chain(&["lies outside the spec's folder", folder.as_str(), "--allow-path"]) {
            assert!(stderr.contains(part), "the refusal does not name {part:?}: {stderr}");
        }
    }
    // A spec the coordinator refuses (a runner kind this build does not offer) after its files
    // were uploaded: the uploads are dropped with the refusal.
    std::fs::write(study.join("curves/b.csv"), "t,v\n0,0.5\n1,0.5\n2,0.5\n").unwrap();
    let spec = write(&study, "study.yaml", &curve_spec("curves/b.csv").replace("kind: synthetic", "kind: quantum"));
    let (ok, stderr) = launch(&spec, &[], &coordinator.url);
    assert!(!ok && stderr.contains("runner.kind") && stderr.contains("quantum"), "{stderr}");
    for table in ["studies", "files", "uploads"] {
        assert_eq!(coordinator.rows(table).await, 0, "a refused launch left rows in {table}");
    }

    // The user allows the folder: the curve behind the link is read and the study launched.
    let spec = write(&study, "study.yaml", &curve_spec("curves/a.csv"));
    let root_arg = root.display().to_string();
    let (ok, stderr) = launch(&spec, &["--allow-path", &root_arg], &coordinator.url);
    assert!(ok, "{stderr}");
    assert_eq!(coordinator.rows("studies").await, 1);
    // /etc/passwd stays refused unless its own folder is allowed.
    let spec = write(&study, "study.yaml", &task_spec(&passwd));
    let (ok, stderr) = launch(&spec, &["--allow-path", &root_arg], &coordinator.url);
    assert!(!ok && stderr.contains("resolves to /etc/passwd") && stderr.contains("and the allowed"), "{stderr}");
    let (ok, stderr) = launch(&spec, &["--allow-path", "/nowhere-at-all"], &coordinator.url);
    assert!(!ok && stderr.contains("--allow-path /nowhere-at-all: cannot be resolved"), "{stderr}");
}

/// The hostile probe of issue 24, item 1: a spec putting a host command line on the workers
/// (`runner.command: [sh, -c, "id; curl --unix-socket /var/run/docker.sock …"]`) is refused at
/// launch, naming the field and what to name instead, and nothing is stored.
#[tokio::test]
async fn a_spec_with_a_host_command_is_refused_at_launch_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let coordinator = Coordinator::start(&root);
    std::fs::write(root.join("run.json"), "{}").unwrap();
    let hostile = r#"command: [sh, -c, "id; curl --unix-socket /var/run/docker.sock http://localhost/version"]"#;
    for runner in [
        format!("runner: {{kind: agent, {hostile}}}\n"),
        format!("runner: {{kind: agent, agent: scripted, {hostile}}}\n"),
        format!("runner: {{kind: mini-swe-agent, model: {{model_name: m}}, {hostile}}}\n"),
    ] {
        let spec = write(&root, "study.yaml", &task_spec("statement.md").replace(RUNNER, &runner));
        write(&root, "statement.md", "Fix the sign.\n");
        let (ok, stderr) = launch(&spec, &[], &coordinator.url);
        assert!(!ok, "launched: {runner}");
        for part in ["runner.command", "is not allowed", "agent: scripted"] {
            assert!(stderr.contains(part), "the refusal does not name {part:?}: {stderr}");
        }
    }
    for table in ["studies", "files", "uploads"] {
        assert_eq!(coordinator.rows(table).await, 0, "a refused launch left rows in {table}");
    }
}

#[test]
fn a_coordinator_that_refuses_to_start_creates_no_store() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cert = write(dir.path(), "cert.pem", "not a certificate");
    let cert = cert.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 7] = [
        (&["--listen", "256.0.0.1:0"], &["cannot listen on 256.0.0.1:0"]),
        (&["--listen", &taken], &["cannot listen on", &taken]),
        (&["--listen", "0.0.0.0:0"], &["token"]),
        (&["--listen", "127.0.0.1:0", "--dashboard", "0.0.0.0:0"], &["refusing to serve the dashboard"]),
        (&["--listen", "127.0.0.1:0", "--metrics", "256.0.0.1:0"], &["cannot serve metrics on 256.0.0.1:0"]),
        (&["--listen", "127.0.0.1:0", "--tls-cert", cert], &["--tls-cert and --tls-key go together"]),
        (&["--listen", "127.0.0.1:0", "--heartbeat-ms", "40000"], &["--heartbeat-ms", "shorter"]),
    ];
    for (args, named) in cases {
        let store = dir.path().join("store.sqlite");
        let out = vcurve()
            .arg("coordinator")
            .args(args)
            .arg("--store")
            .arg(format!("sqlite://{}", store.display()))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: the coordinator started");
        for part in named {
            assert!(stderr.contains(part), "{args:?}: the refusal does not name {part:?}: {stderr}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != "cert.pem")
            .collect();
        assert!(left.is_empty(), "{args:?}: a coordinator that refused to start left {left:?}");
    }
}
