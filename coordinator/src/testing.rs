//! Test helpers (feature `test-support`): stores on fresh databases of both backends and small
//! study specs with synthetic curves.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::store::SqlStore;
use sqlx::Connection;

/// A store on a fresh database: SQLite in memory, or a new PostgreSQL database.
pub struct TestStore {
    pub name: &'static str,
    pub store: SqlStore,
    cleanup: Option<(String, String)>,
}

impl TestStore {
    pub async fn sqlite() -> TestStore {
        TestStore { name: "sqlite", store: SqlStore::connect("sqlite::memory:").await.unwrap(), cleanup: None }
    }

    /// A fresh database on the server `VCURVE_TEST_POSTGRES` names (`scripts/test` starts one).
    pub async fn postgres() -> TestStore {
        let admin = std::env::var("VCURVE_TEST_POSTGRES")
            .expect("set VCURVE_TEST_POSTGRES to a PostgreSQL URL (scripts/test starts a server and sets it)");
        sqlx::any::install_default_drivers();
        let db = format!("vcurve_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::AnyConnection::connect(&admin).await.expect("connect to VCURVE_TEST_POSTGRES");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut conn).await.unwrap();
        let base = admin.rsplit_once('/').expect("URL with a database").0;
        let url = format!("{base}/{db}");
        TestStore { name: "postgres", store: SqlStore::connect(&url).await.unwrap(), cleanup: Some((admin, db)) }
    }

    /// Both backends, each on a fresh database; SQLite alone, after one `skipped:` line, when
    /// `VCURVE_TEST_POSTGRES` is unset (or `VCURVE_TEST_SKIP` names it) — a failure when `VCURVE_TEST_REQUIRE` is `all` or names
    /// `postgres`. (The gate of `vcurve_testkit::require`, which this crate cannot depend on.)
    pub async fn both() -> Vec<TestStore> {
        let names = |var: &str| {
            std::env::var(var).unwrap_or_default().split(',').any(|w| matches!(w.trim(), "all" | "postgres"))
        };
        let left_out = names("VCURVE_TEST_SKIP");
        if !left_out && std::env::var("VCURVE_TEST_POSTGRES").is_ok_and(|url| !url.trim().is_empty()) {
            return vec![TestStore::sqlite().await, TestStore::postgres().await];
        }
        let line = "needs PostgreSQL (set VCURVE_TEST_POSTGRES=postgres://USER:PASSWORD@HOST:PORT/postgres) — or run scripts/test";
        if !left_out && names("VCURVE_TEST_REQUIRE") {
            panic!("{line} (VCURVE_TEST_REQUIRE requires it)");
        }
        eprintln!("skipped on PostgreSQL: {line}");
        record_skip();
        vec![TestStore::sqlite().await]
    }

    /// Drop the PostgreSQL database (call at the end of a passing test).
    pub async fn finish(self) {
        let TestStore { store, cleanup, .. } = self;
        drop(store);
        if let Some((admin, db)) = cleanup
            && let Ok(mut conn) = sqlx::AnyConnection::connect(&admin).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")))
                .execute(&mut conn)
                .await;
        }
    }
}

/// The gate's record of a skip (`vcurve_testkit::require::skip_line`, the same format: this crate
/// cannot depend on the testkit, which depends on it): the test's binary and name, tab-separated,
/// appended to the file `VCURVE_TEST_SKIPPED` names, so that `scripts/test` runs the test again
/// once PostgreSQL is up.
fn record_skip() {
    use std::io::Write;
    let Some(file) = std::env::var_os("VCURVE_TEST_SKIPPED") else { return };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
            _ => stem,
        })
        .unwrap_or_default();
    let thread = std::thread::current();
    let test = match thread.name() {
        Some(name) if name != "main" && !name.starts_with("tokio-runtime") => name,
        _ => "*",
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(format!("{binary}\t{test}\n").as_bytes()));
    if let Err(e) = written {
        panic!("cannot record the skip in {} (VCURVE_TEST_SKIPPED): {e}", std::path::Path::new(&file).display());
    }
}

/// A trajectory of a test study: id, length, cliff (`V = p` before it, 0 from it), labels.
pub struct Tr {
    pub id: &'static str,
    pub length: u32,
    pub cliff: u32,
    pub p: f64,
    pub labels: &'static str,
}

/// A study spec over `trajectories` with synthetic curves, and its curve files.
pub fn spec(name: &str, extra: &str, trajectories: &[Tr]) -> (String, BTreeMap<String, String>) {
    let mut yaml =
        format!("name: {name}\nseed: 7\nrunner: {{kind: synthetic, duration_ms: 0}}\n{extra}trajectories:\n");
    let mut files = BTreeMap::new();
    for tr in trajectories {
        let path = format!("curves/{}.csv", tr.id);
        let mut csv = String::from("t,v\n");
        for t in 0..tr.length {
            let _ = writeln!(csv, "{t},{}", if t < tr.cliff { tr.p } else { 0.0 });
        }
        files.insert(path.clone(), csv);
        let _ = writeln!(yaml, "  - id: {}\n    length: {}\n    curve: {path}", tr.id, tr.length);
        if !tr.labels.is_empty() {
            let _ = writeln!(yaml, "    labels: {{{}}}", tr.labels);
        }
    }
    (yaml, files)
}

/// The success of a key under a step curve: deterministic, so any two runs agree.
pub fn step_outcome(cliff: u32, t: u32, seed: u32) -> bool {
    t < cliff && seed % 4 != 3
}

/// A renderer for tests that never render: every call is an error saying so.
pub struct NoRenderer;

impl crate::Renderer for NoRenderer {
    fn export(&self, _: &vcurve_record::StudyRecord) -> Result<BTreeMap<String, Vec<u8>>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn summaries(
        &self,
        _: &vcurve_record::StudyRecord,
    ) -> Result<Vec<crate::render::TrajectorySummary>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn figure_svg(&self, _: &vcurve_record::StudyRecord) -> Result<Option<String>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }

    fn restart_check_rows(
        &self,
        _: &vcurve_record::StudyRecord,
    ) -> Result<Vec<vcurve_record::RestartCheckRow>, crate::render::RenderError> {
        Err(crate::render::RenderError("this test's coordinator renders nothing".into()))
    }
}

/// A [`NoRenderer`] as the coordinator takes it.
pub fn no_renderer() -> std::sync::Arc<dyn crate::Renderer> {
    std::sync::Arc::new(NoRenderer)
}

/// A recorded trajectory of `steps` steps (one `echo` each) on task `task`, as a trajectory file.
pub fn recorded_trajectory(task: &str, steps: u32) -> String {
    recorded_trajectory_with_output(task, steps, "")
}

/// [`recorded_trajectory`] whose every output carries `padding` (to make large files).
pub fn recorded_trajectory_with_output(task: &str, steps: u32, padding: &str) -> String {
    use vcurve_record::trajectory::{Action, EndType, Evaluator, FORMAT, Interpreter, Step, Task, Trajectory};
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "agent"}),
        serde_json::json!({"role": "user", "content": task}),
    ];
    let mut out = Vec::new();
    for i in 1..=steps {
        messages.push(serde_json::json!({"role": "assistant", "content": format!("echo {i}")}));
        messages.push(serde_json::json!({"role": "user", "content": format!("{i}\n")}));
        out.push(Step {
            actions: vec![Action {
                command: format!("echo {i}"),
                timeout_s: 60.0,
                output: format!("{i}\n{padding}"),
                returncode: Some(0),
                timed_out: false,
                exception: None,
            }],
            messages_end: messages.len(),
            fingerprint: None,
        });
    }
    let t = Trajectory {
        format: FORMAT.into(),
        task: Task {
            id: task.into(),
            image: "vcurve/test-task:latest".into(),
            workdir: "/testbed".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 60 },
            problem_statement: None,
        },
        interpreter: Interpreter::default(),
        messages,
        initial_messages: 2,
        steps: out,
        end_type: EndType::Submitted,
        submission: Some(String::new()),
    };
    serde_json::to_string(&t).expect("serializes")
}

/// A study spec for runner kind `kind` over recorded trajectories `(id, steps)`, and its files.
pub fn recorded_spec(name: &str, kind: &str, trajectories: &[(&str, u32)]) -> (String, BTreeMap<String, String>) {
    let mut yaml = format!("name: {name}\nseed: 7\nrunner: {{kind: {kind}}}\ntrajectories:\n");
    let mut files = BTreeMap::new();
    for (id, steps) in trajectories {
        let path = format!("runs/{id}.json");
        files.insert(path.clone(), recorded_trajectory(&format!("task-{id}"), *steps));
        let _ = writeln!(yaml, "  - id: {id}\n    recorded: {path}");
    }
    (yaml, files)
}
