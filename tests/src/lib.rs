//! Helpers shared by the end-to-end tests in `tests/`.
//!
//! The end-to-end tests drive the real `vcurve` binary as separate processes, the way users run
//! it: nothing here links the coordinator or the worker. What the helpers provide:
//!
//! - [`vcurve_bin`]: the built binary (`scripts/test` builds it before the tests run);
//! - [`TestDir`]: a temporary folder for a test's specs, stores, exports and process logs, which
//!   prints the tail of every log and is kept on disk when the test fails;
//! - [`Process`]: one long-running `vcurve` subcommand (coordinator, worker), logging into a file
//!   and killed when dropped; [`Process::kill9`] is the crash the fault tests inject;
//! - [`run_vcurve`], [`status_json`]: one-shot commands (launch, status, export) with a timeout;
//! - [`fresh_postgres`]: a new, empty PostgreSQL database per test, dropped afterwards;
//! - [`free_port`], [`wait_until`], [`SplitMix64`]: ports, polling, and a seeded generator so
//!   that "random" moments in a test are the same on every run.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The `vcurve` binary of this build: `target/<profile>/vcurve`, next to the `deps/` folder that
/// holds the running test executable.
pub fn vcurve_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("the test executable lives in target/<profile>/deps/");
    let bin = profile_dir.join(format!("vcurve{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the vcurve binary is missing at {}: run scripts/test, or cargo build --workspace first",
        bin.display()
    );
    bin
}

/// A `vcurve` command with no `VCURVE_*` variables inherited from the caller's environment, so
/// that a developer's settings (a coordinator URL, a token) cannot change what a test runs, and
/// with plain (uncoloured) logs, since they go to files.
fn vcurve_command<S: AsRef<OsStr>>(args: &[S]) -> Command {
    let mut command = Command::new(vcurve_bin());
    command.args(args).stdin(Stdio::null()).env("NO_COLOR", "1");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("VCURVE_") {
            command.env_remove(name);
        }
    }
    command
}

/// Run a one-shot `vcurve` subcommand to its end, killing it after `timeout`. Returns its output
/// whatever its exit status; an error only when it could not be run or timed out.
pub fn run_vcurve<S: AsRef<OsStr>>(args: &[S], timeout: Duration) -> anyhow::Result<Output> {
    let shown = show_args(args);
    let mut child = vcurve_command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run vcurve {shown}"))?;
    // Read both pipes on threads so that a chatty command cannot fill a pipe and stall.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut buf).map(|_| buf)
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut buf).map(|_| buf)
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("vcurve {shown} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().expect("stdout reader")?;
    let stderr = err.join().expect("stderr reader")?;
    Ok(Output { status, stdout, stderr })
}

/// Run a one-shot `vcurve` subcommand that must succeed; returns its stdout.
pub fn vcurve_ok<S: AsRef<OsStr>>(args: &[S], timeout: Duration) -> anyhow::Result<String> {
    let output = run_vcurve(args, timeout)?;
    if !output.status.success() {
        bail!(
            "vcurve {} failed ({}): {}",
            show_args(args),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn show_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

/// `vcurve status STUDY --json` as JSON, or why it could not be had (e.g. the coordinator is
/// down).
pub fn try_status_json(coordinator_url: &str, study: &str) -> anyhow::Result<serde_json::Value> {
    let stdout = vcurve_ok(&["status", study, "--coordinator", coordinator_url, "--json"], Duration::from_secs(20))?;
    serde_json::from_str(&stdout).with_context(|| format!("vcurve status printed no JSON: {stdout}"))
}

/// `vcurve status STUDY --json` as JSON; panics when the command fails.
pub fn status_json(coordinator_url: &str, study: &str) -> serde_json::Value {
    try_status_json(coordinator_url, study).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Poll `condition` every 50 ms until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, condition: impl FnMut() -> bool) -> bool {
    wait_every(timeout, Duration::from_millis(50), condition)
}

/// Poll `condition` every `interval` until it holds (true) or `timeout` passes (false): for
/// conditions that are costly to look at (a `docker ps`, a status call).
pub fn wait_every(timeout: Duration, interval: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(interval);
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; the small race with
/// other processes taking it meanwhile is accepted in tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind 127.0.0.1:0").port()
}

/// A temporary folder for one test's files and the logs of its processes (`*.log`).
///
/// Dropped while the test panics, it prints the last lines of every log and keeps the folder, so
/// a failure shows what each process was doing and its files can be inspected afterwards
/// (`VCURVE_TEST_KEEP=1` keeps it after a success too).
pub struct TestDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl TestDir {
    pub fn new(prefix: &str) -> TestDir {
        let dir = tempfile::Builder::new().prefix(&format!("vcurve-{prefix}-")).tempdir().expect("create a temp dir");
        let path = dir.path().to_path_buf();
        TestDir { dir: Some(dir), path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last `lines` lines of every log in the folder, each under its file name.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.path)
            .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        logs.retain(|p| p.extension() == Some(OsStr::new("log")));
        logs.sort();
        let mut out = String::new();
        for log in logs {
            out += &format!("----- last {lines} lines of {} -----\n", log.display());
            out += &tail(&log, lines);
            out += "\n";
        }
        out
    }
}

/// Set (to anything) to keep every test's folder, not only a failed one's.
pub const KEEP_ENV: &str = "VCURVE_TEST_KEEP";

impl Drop for TestDir {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            eprintln!("{}", self.log_tails(40));
        }
        if (failed || std::env::var_os(KEEP_ENV).is_some())
            && let Some(dir) = self.dir.take()
        {
            eprintln!("test files kept in {}", dir.keep().display());
        }
    }
}

/// The last `lines` lines of a text file (empty if it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One running `vcurve` subcommand (`coordinator`, `worker`), its stdout and stderr appended to
/// `<dir>/<name>.log`. Killed (SIGKILL) and reaped when dropped.
pub struct Process {
    name: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// A worker's state directory ([`Process::spawn_worker`]), whose snapshot images go when the
    /// process is dropped.
    state_dir: Option<PathBuf>,
}

impl Process {
    /// Start `vcurve ARGS`, logging into `<log_dir>/<name>.log`. A restarted process reuses its
    /// name, so one log holds every life of it, each opened by a `=== start` line.
    pub fn spawn<S: AsRef<OsStr>>(log_dir: &Path, name: &str, args: &[S]) -> Process {
        let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        let mut process = Process {
            name: name.to_string(),
            args,
            log: log_dir.join(format!("{name}.log")),
            child: None,
            state_dir: None,
        };
        process.start();
        process
    }

    /// Start `vcurve worker ARGS` like [`Process::spawn`], with its state directory (instance
    /// locks, snapshot lineage: `VCURVE_STATE_DIR`) at `<log_dir>/<name>-state` instead of the
    /// user's own, kept across restarts. Dropping it removes the snapshot images of that lineage.
    pub fn spawn_worker<S: AsRef<OsStr>>(log_dir: &Path, name: &str, args: &[S]) -> Process {
        let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        assert_eq!(args.first().map(String::as_str), Some("worker"), "spawn_worker starts `vcurve worker`");
        let mut process = Process {
            name: name.to_string(),
            args,
            log: log_dir.join(format!("{name}.log")),
            child: None,
            state_dir: Some(log_dir.join(format!("{name}-state"))),
        };
        process.start();
        process
    }

    fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let mut log = OpenOptions::new().create(true).append(true).open(&self.log).expect("open the process log");
        writeln!(log, "=== start: vcurve {}", self.args.join(" ")).expect("write the process log");
        let err: File = log.try_clone().expect("clone the log handle");
        let mut command = vcurve_command(&self.args);
        if let Some(state_dir) = &self.state_dir {
            command.env("VCURVE_STATE_DIR", state_dir);
        }
        let child = command
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} (vcurve {}): {e}", self.name, self.args.join(" ")));
        self.child = Some(child);
    }

    /// Start it again with the same arguments after it was killed or exited.
    pub fn restart(&mut self) {
        if self.is_running() {
            panic!("{} is still running; kill it before restarting", self.name);
        }
        self.child = None;
        self.start();
    }

    /// Kill it at once with SIGKILL (no chance to clean up: a crash) and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL on unix.
            let _ = child.kill();
            let _ = child.wait();
            let _ = OpenOptions::new()
                .append(true)
                .open(&self.log)
                .and_then(|mut log| writeln!(log, "=== killed with SIGKILL by the test"));
        }
    }

    /// Stop it with SIGSTOP: it does nothing more (removes no container, sends no heartbeat)
    /// until [`Process::thaw`] or [`Process::kill9`]; what it started runs on. Whether it was
    /// running to be stopped.
    pub fn freeze(&mut self) -> bool {
        self.signal("STOP")
    }

    /// Let a frozen process go on (SIGCONT).
    pub fn thaw(&mut self) -> bool {
        self.signal("CONT")
    }

    fn signal(&mut self, name: &str) -> bool {
        let Some(child) = &self.child else { return false };
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if sent {
            let _ = OpenOptions::new()
                .append(true)
                .open(&self.log)
                .and_then(|mut log| writeln!(log, "=== SIG{name} from the test"));
        }
        sent
    }

    /// Whether it is alive (false once it has exited or been killed).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Wait up to `timeout` for it to exit by itself (a one-shot command run as a process, so that
    /// its output goes to its log as it is written); its exit status. An error when it is still
    /// running then (it is left running: dropping it kills it) or was never started.
    pub fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let Some(child) = &mut self.child else { bail!("{} is not running", self.name) };
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} has not exited after {timeout:?}:\n{}", self.name, tail(&self.log, 20));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until something accepts connections on `127.0.0.1:port`; fails early if the process
    /// exits meanwhile (say, because it could not bind the port).
    pub fn wait_for_port(&mut self, port: u16, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if !self.is_running() {
                bail!("{} exited before listening on port {port}:\n{}", self.name, tail(&self.log, 20));
            }
            if Instant::now() >= deadline {
                bail!("{} is not listening on port {port} after {timeout:?}:\n{}", self.name, tail(&self.log, 20));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log(&self) -> &Path {
        &self.log
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(state_dir) = &self.state_dir {
            remove_lineage_snapshots(state_dir);
        }
    }
}

/// Remove the snapshot images of the worker state directory `state_dir`'s lineage (named
/// `vcurve-snapshot:<lineage[..12]>-…` by the worker's snapshot cache), best effort: a test's worker leaves
/// none behind on the engine.
fn remove_lineage_snapshots(state_dir: &Path) {
    let lineage_file = state_dir.join("lineage");
    let Ok(lineage) = std::fs::read_to_string(&lineage_file) else {
        eprintln!("no snapshots to remove: {} is not there", lineage_file.display());
        return;
    };
    let Some(prefix) = lineage.trim().get(..12) else { return };
    let reference = format!("reference=vcurve-snapshot:{prefix}-*");
    let Ok(out) = Command::new("docker").args(["images", "-q", "--filter", &reference]).output() else { return };
    let ids: BTreeSet<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect();
    if ids.is_empty() {
        return;
    }
    match Command::new("docker").args(["rmi", "-f"]).args(&ids).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!("cannot remove the snapshots {ids:?}: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => eprintln!("cannot run docker rmi: {e}"),
    }
}

/// The environment variable naming a PostgreSQL server the tests may create databases on.
pub const POSTGRES_ENV: &str = "VCURVE_TEST_POSTGRES";

/// A database made by [`fresh_postgres`]; dropping it drops the database (best effort: a failure
/// is printed, not raised, since it may happen while a test is already failing).
pub struct TestDatabase {
    admin_url: String,
    name: String,
}

impl TestDatabase {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // FORCE ends the connections of a coordinator that is still running (or was killed and
        // left server sessions behind).
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        if let Err(e) = on_postgres(&self.admin_url, sql) {
            eprintln!("warning: cannot drop the test database {}: {e:#}", self.name);
        }
    }
}

/// A new, empty database `vcurve_test_<uuid>` on the server at `$VCURVE_TEST_POSTGRES`: its URL,
/// and a guard that drops it.
pub fn fresh_postgres() -> (String, TestDatabase) {
    let admin_url = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_ENV} is not set: set {POSTGRES_ENV}=postgres://USER:PASSWORD@HOST:PORT/postgres \
             or run scripts/test, which starts PostgreSQL and sets it"
        )
    });
    let name = format!("vcurve_test_{}", uuid::Uuid::new_v4().simple());
    on_postgres(&admin_url, format!("CREATE DATABASE \"{name}\""))
        .unwrap_or_else(|e| panic!("cannot create a test database on {POSTGRES_ENV}: {e:#}"));
    let url = with_database(&admin_url, &name);
    (url, TestDatabase { admin_url, name })
}

/// Run one statement on the server at `url`. On a thread of its own with its own runtime, so it
/// works from plain and from `#[tokio::test]` tests alike.
fn on_postgres(url: &str, sql: String) -> anyhow::Result<()> {
    let url = url.to_string();
    std::thread::spawn(move || -> anyhow::Result<()> {
        use sqlx::Connection as _;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async {
            let mut conn = sqlx::PgConnection::connect(&url).await.context("cannot connect")?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(&mut conn).await.with_context(|| sql.clone())?;
            conn.close().await?;
            Ok(())
        })
    })
    .join()
    .expect("the PostgreSQL helper thread panicked")
}

/// `url` with its database (the path) replaced by `database`, keeping any `?query`.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[authority_start..].find('/').map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{database}", &base[..authority_end]);
    if let Some(query) = query {
        out += "?";
        out += query;
    }
    out
}

/// Write a synthetic trajectory's true curve `V(t)`, `t = 0..values.len()−1`, as the `t,v` CSV a
/// study spec names, into `<dir>/curves/<id>.csv`; returns the path relative to `dir` (the spec's
/// folder), as the spec writes it.
pub fn write_curve(dir: &Path, id: &str, values: &[f64]) -> String {
    let relative = format!("curves/{id}.csv");
    let path = dir.join(&relative);
    std::fs::create_dir_all(path.parent().expect("curves/ has a parent")).expect("create curves/");
    let mut csv = String::from("t,v\n");
    for (t, v) in values.iter().enumerate() {
        csv += &format!("{t},{v}\n");
    }
    std::fs::write(&path, csv).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    relative
}

/// The files an export wrote (`curves.csv`, `trajectories.csv`, `evaluation.csv`, `results.json`,
/// `analyses.json`), by name.
pub fn read_export(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    ["curves.csv", "trajectories.csv", "evaluation.csv", "results.json", "analyses.json"]
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            (name.to_string(), bytes)
        })
        .collect()
}

/// Where two texts first differ, with a few lines of each around it; `None` when they are equal.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<String> {
    if a == b {
        return None;
    }
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (a_lines, b_lines): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let first = (0..a_lines.len().max(b_lines.len())).find(|&i| a_lines.get(i) != b_lines.get(i)).unwrap_or(0);
    let excerpt = |lines: &[&str]| {
        lines
            .iter()
            .enumerate()
            .skip(first.saturating_sub(2))
            .take(6)
            .map(|(i, l)| format!("  {:>5}: {l}\n", i + 1))
            .collect::<String>()
    };
    Some(format!(
        "{} vs {} lines; first difference at line {}:\n expected:\n{} got:\n{}",
        a_lines.len(),
        b_lines.len(),
        first + 1,
        excerpt(&a_lines),
        excerpt(&b_lines)
    ))
}

/// A small seeded generator (SplitMix64): the tests' "random" moments are the same on every run,
/// so a failure reproduces.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize
    }

    /// Shuffle in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_the_path_and_keeps_the_query() {
        assert_eq!(with_database("postgres://u:p@h:5432/postgres", "x"), "postgres://u:p@h:5432/x");
        assert_eq!(with_database("postgres://u:p@h:5432", "x"), "postgres://u:p@h:5432/x");
        assert_eq!(with_database("postgres://u:p@h/db?sslmode=disable", "x"), "postgres://u:p@h/x?sslmode=disable");
    }

    #[test]
    fn first_difference_points_at_the_line() {
        assert_eq!(first_difference(b"a\nb\n", b"a\nb\n"), None);
        let d = first_difference(b"a\nb\nc\n", b"a\nB\nc\n").unwrap();
        assert!(d.contains("first difference at line 2"), "{d}");
    }

    #[test]
    fn split_mix_is_seeded_and_in_range() {
        let (mut a, mut b) = (SplitMix64::new(4), SplitMix64::new(4));
        for _ in 0..1000 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
            assert!(a.below(3) < 3 && b.below(3) < 3);
        }
    }
}

/// `docker ARGS`, which must succeed; its stdout.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap_or_else(|e| panic!("cannot run docker: {e}"));
    assert!(
        out.status.success(),
        "docker {} failed ({}): {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The repository's root (deploy/, examples/).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the repository").to_path_buf()
}

/// The images of vcurve's own services that `deploy/images/build-services` makes.
#[derive(Debug, Clone)]
pub struct ServiceImages {
    pub coordinator: String,
    pub worker: String,
    pub postgres: String,
    pub registry: String,
}

/// The service images: from `VCURVE_TEST_{COORDINATOR,WORKER,POSTGRES,REGISTRY}_IMAGE` (scripts/test
/// builds them after `cargo build` and exports them), or, when one is unset, built (once per test
/// process; cached by tag) with `deploy/images/build-services --binary <this build's vcurve>`.
/// Each one is checked to exist.
pub fn service_images() -> &'static ServiceImages {
    static IMAGES: std::sync::OnceLock<ServiceImages> = std::sync::OnceLock::new();
    IMAGES.get_or_init(|| {
        let from_env =
            |what: &str| std::env::var(format!("VCURVE_TEST_{what}_IMAGE")).ok().filter(|s| !s.trim().is_empty());
        let images = match (from_env("COORDINATOR"), from_env("WORKER"), from_env("POSTGRES"), from_env("REGISTRY")) {
            (Some(coordinator), Some(worker), Some(postgres), Some(registry)) => {
                ServiceImages { coordinator, worker, postgres, registry }
            }
            _ => {
                eprintln!(
                    "a VCURVE_TEST_*_IMAGE of the service images is unset: building them with \
                     deploy/images/build-services (minutes the first time, cached by tag after)"
                );
                let out = Command::new(repository().join("deploy/images/build-services"))
                    .arg("--binary")
                    .arg(vcurve_bin())
                    .stderr(Stdio::inherit())
                    .output()
                    .expect("run deploy/images/build-services");
                assert!(out.status.success(), "deploy/images/build-services failed ({})", out.status);
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let tag = |key: &str| {
                    stdout
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{key}=")))
                        .unwrap_or_else(|| panic!("build-services printed no {key}= line: {stdout}"))
                        .to_string()
                };
                ServiceImages {
                    coordinator: tag("coordinator"),
                    worker: tag("worker"),
                    postgres: tag("postgres"),
                    registry: tag("registry"),
                }
            }
        };
        for image in [&images.coordinator, &images.worker, &images.postgres, &images.registry] {
            docker(&["image", "inspect", "--format", "{{.Id}}", image]);
        }
        images
    })
}

/// A small study of the scripted agent on the test task calc-1 (`task_json`, written beside the
/// spec as `calc-1.json`), named `name`: two base runs, one trajectory. It names the agent
/// `scripted`, which its workers register (`vcurve worker --agent scripted`).
///
/// The study seed decides every outcome: the worker seeds run `i` with SHA-256 of
/// `"{seed}/calc-1/base_run/{i}"` and the scripted agent takes the right hypothesis when
/// `random.Random(f"{run seed}/hypothesis").random() < q`. With seed 1, q = 0.5 and r = 1.0 (the
/// right hypothesis always fixes it) base run 0 takes the wrong hypothesis and fails and base run 1
/// passes (computed from those formulas for seeds 1–12, and seen so in a run): one trajectory,
/// selected (a pass rate of 1/2 lies in the band, 2–6 of 8), whose curve drops from 0.5 to 0 at
/// D = 8. The thresholds are the demo's reduced ones (REDUCED_THRESHOLDS in cli/src/demo_docker.rs).
pub fn write_scripted_calc_spec(dir: &Path, name: &str, task_json: &str) -> PathBuf {
    std::fs::write(dir.join("calc-1.json"), task_json).expect("write the task JSON");
    let yaml = format!(
        "\
name: {name}
seed: 1
budget: 20
schedule: paper
runner:
  kind: agent
  agent: scripted
  model: {{q: 0.5, r: 1.0}}
  memory_mb: 512
  pids_limit: 256
  run_timeout_s: 600
thresholds: {{k_confirm: 16, k_pnr: 16, k_label: 8, k_label_raised: 16}}
tasks:
  - {{task: calc-1.json, base_runs: 2}}
"
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).expect("write the study spec");
    path
}
