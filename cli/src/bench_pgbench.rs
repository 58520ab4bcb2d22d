//! `vcurve bench dispatch --pgbench`: the store's own dispatch SQL run by PostgreSQL's pgbench,
//! on the same server, as the rate the store's statements allow with nothing around them.
//!
//! A fresh database on the server of `--store` gets the store's schema (its migrations) and one
//! running study with `max(150, clients + 1)` pending continuations in trajectories of 150 — a
//! little more than demand admission keeps runnable in the gRPC run (sampled: 1–113 at 16 workers,
//! 61–150 at 64), so the claim sorts no fewer rows than the store's do. pgbench's script is, per
//! continuation, the two transactions the store runs
//! ([`vcurve_coordinator::store::dispatch_sql`], the same text): a lease — the claim (`FOR UPDATE
//! OF c SKIP LOCKED LIMIT 1`) and the row's `leased` update — and a report — the trajectory's
//! lock, the outcome's update (which checks the attempt), one new continuation (the next request,
//! which keeps the pending count steady) and the trajectory's stage and counters. What the store does around them (the
//! worker's visit, lease expiry, admission, other jobs, rebuilding the schedule from the
//! trajectory's outcomes, gRPC) is what the ratio measures. The database is dropped afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use vcurve_coordinator::durations::remaining_steps;
use vcurve_coordinator::store::{ScratchDatabase, SqlStore, dispatch_sql};
use vcurve_method::schedule::Stage;

/// Pending continuations per trajectory of the pgbench study (the gRPC run's trajectories ask
/// for about 150 each).
const PER_TRAJECTORY: u64 = 150;

/// Where pgbench is: `explicit`, else `pgbench` on `PATH`, else the newest Debian
/// `/usr/lib/postgresql/VERSION/bin/pgbench`.
pub fn find_pgbench(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        if path.is_file() {
            return Ok(path.to_path_buf());
        }
        bail!("--pgbench-path {}: no such file", path.display());
    }
    if let Some(dirs) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&dirs) {
            let candidate = dir.join("pgbench");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let path = e.path().join("bin/pgbench");
            path.is_file().then_some((version, path))
        })
        .collect();
    debian.sort();
    debian.pop().map(|(_, p)| p).context(
        "--pgbench needs PostgreSQL's pgbench: none on PATH or in /usr/lib/postgresql/*/bin \
         (install postgresql-client, or give --pgbench-path)",
    )
}

/// `sql` with its placeholders `$1 … $n` replaced by `values` (highest first, so `$1` does not
/// eat the start of `$10`).
pub fn substitute<S: AsRef<str>>(sql: &str, values: &[S]) -> String {
    let mut out = sql.to_string();
    for (i, value) in values.iter().enumerate().rev() {
        out = out.replace(&format!("${}", i + 1), value.as_ref());
    }
    out
}

/// Which SQL pgbench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// The store's own statements ([`store_script`]).
    Store,
    /// A bare queue on the same table ([`bare_script`]): what a claim costs with no claim order,
    /// no joins and no trajectory lock.
    Bare,
}

impl Script {
    pub fn text(self) -> String {
        match self {
            Script::Store => store_script(),
            Script::Bare => bare_script(),
        }
    }
}

/// The store's statements bound to pgbench variables (`-M prepared` binds them as parameters)
/// and the bench's constants: the claimed row's key is `:study … :seed` (set by `\gset` from the
/// claim), `:next` its attempt, `:next_seed` the seed of the next request.
struct Bound {
    claim: String,
    mark: String,
    lock_trajectory: String,
    complete: String,
    request: String,
    advance: String,
}

impl Bound {
    fn new() -> Bound {
        let sql = dispatch_sql();
        let key = [":study", ":trajectory", ":series", ":t", ":seed"];
        let with_key = |extra: &[&str]| -> Vec<String> { key.iter().chain(extra).map(|s| s.to_string()).collect() };
        Bound {
            claim: substitute(&sql.claim, &["1", "'synthetic'"]),
            mark: substitute(&sql.mark_leased, &with_key(&[":next", "'pgbench'", "0", "0"])),
            lock_trajectory: substitute(&sql.lock_trajectory, &[":study", ":trajectory"]),
            complete: substitute(
                &sql.complete,
                &with_key(&["1", "1", "'submitted'", "''", "'evaluated'", "0", ":next"]),
            ),
            // The next request keeps the number of pending continuations steady, as a running
            // study's replans do: a new seed at the same step (each (t, seed) is completed once,
            // so `seed + 1` is new).
            request: substitute(&sql.request, &[":study", ":trajectory", "0", ":series", ":t", ":next_seed"]),
            // The replan's end: the stage as it was, one continuation requested, one done.
            // ... and the report's timing: one continuation of 1 s with a budget of 100 steps
            // (ln 1000 = 6.908, stored in millionths), and the screen's steps left at a budget of 100.
            advance: substitute(
                &sql.advance,
                &[
                    "'screen'",
                    "0",
                    "'running'",
                    "1",
                    "1",
                    "0",
                    ":study",
                    ":trajectory",
                    "0",
                    "NULL",
                    "timed_n + 1",
                    "timed_ms + 1000",
                    "timed_budget + 100",
                    &remaining_steps(Stage::Screen, 100).to_string(),
                    "timed_log_ms + 6907755",
                    "timed_log_ms_sq + 47717083",
                ],
            ),
        }
    }

    /// The lease transaction around `claim` (which ends in `\gset`).
    fn lease(&self, claim: &str) -> String {
        format!("BEGIN;\n{claim} \\gset\n\\set next :attempt + 1\n\\set next_seed :seed + 1\n{};\nCOMMIT;\n", self.mark)
    }
}

/// The bare queue: a lease claims any pending row of `continuations` (`FOR UPDATE SKIP LOCKED
/// LIMIT 1`, on the pending index) and marks it leased; a report marks it done and requests the
/// next — the store's statements for those two, without the claim order's joins and sort, the
/// trajectory's lock and its counters.
pub fn bare_script() -> String {
    let b = Bound::new();
    let claim = "SELECT study, trajectory, series, t, seed, attempt FROM continuations WHERE state = 'pending' \
                 LIMIT 1 FOR UPDATE SKIP LOCKED";
    format!("{}BEGIN;\n{};\n{};\nCOMMIT;\n", b.lease(claim), b.complete, b.request)
}

/// The store's script: one continuation leased and reported per run, the store's two
/// transactions.
pub fn store_script() -> String {
    let b = Bound::new();
    format!(
        "{}BEGIN;\n{};\n{};\n{};\n{};\nCOMMIT;\n",
        b.lease(&b.claim),
        b.lock_trajectory,
        b.complete,
        b.request,
        b.advance
    )
}

/// The store's schema and a running study with `rows` pending continuations.
async fn fill(url: &str, rows: u64) -> anyhow::Result<()> {
    // The store's own migrations make the schema.
    let store = SqlStore::connect(url).await.context("--pgbench: cannot migrate the scratch database")?;
    store.fill_dispatch_bench(rows, PER_TRAJECTORY).await.context("--pgbench: cannot fill the scratch database")?;
    store.close().await;
    Ok(())
}

/// What pgbench measured at one client count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgbenchRate {
    pub continuations: u64,
    pub per_second: f64,
}

/// The `tps = …` of pgbench's output (the rate without connection time).
pub fn parse_tps(output: &str) -> Option<f64> {
    output.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("tps = ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// `--pgbench` needs `--store` to be a PostgreSQL URL: the server pgbench runs on.
pub fn require_postgres(store: Option<&str>) -> anyhow::Result<()> {
    match store {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => Ok(()),
        _ => bail!(
            "--pgbench compares with PostgreSQL: give --store postgres://USER:PASSWORD@HOST:PORT/DB \
             (a server where the bench may fill that database and create a scratch one)"
        ),
    }
}

/// Run `script` in pgbench with `clients` clients, `continuations` in all, on a fresh database.
pub async fn run(
    admin_url: &str,
    pgbench: &Path,
    script: Script,
    clients: u32,
    continuations: u64,
) -> anyhow::Result<PgbenchRate> {
    require_postgres(Some(admin_url))?;
    let per_client = continuations.div_ceil(u64::from(clients)).max(1);
    let total = per_client * u64::from(clients);
    let redacted = crate::commands::redact_url(admin_url);
    let scratch = ScratchDatabase::create(admin_url, "pgbench")
        .await
        .with_context(|| format!("--pgbench: a scratch database on {redacted}"))?;
    let result = async {
        // One more than the clients: a claim always finds a row no other client holds.
        fill(scratch.url(), PER_TRAJECTORY.max(u64::from(clients) + 1)).await?;
        let dir = tempfile::tempdir()?;
        let script_path = dir.path().join("dispatch.sql");
        std::fs::write(&script_path, script.text())?;
        let threads = clients.min(std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).max(1);
        let started = Instant::now();
        let (url, password) = crate::commands::split_password(scratch.url());
        let mut command = Command::new(pgbench);
        if let Some(password) = password {
            command.env("PGPASSWORD", password);
        }
        let out = command
            .args(["-n", "-M", "prepared", "-c", &clients.to_string(), "-j", &threads.to_string()])
            .args(["-t", &per_client.to_string(), "-f"])
            .arg(&script_path)
            .arg(&url)
            .output()
            .with_context(|| format!("cannot run {}", pgbench.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("{} failed ({}): {}", pgbench.display(), out.status, stderr.trim());
        }
        let per_second = parse_tps(&stdout).with_context(|| {
            format!(
                "no `tps = …` in pgbench's output after {:.1} s: {}",
                started.elapsed().as_secs_f64(),
                stdout.trim()
            )
        })?;
        // The script did the work it was timed for: every run left one continuation done.
        let store = SqlStore::connect(scratch.url()).await?;
        let done = store.count_done_continuations().await;
        store.close().await;
        let done = done?;
        if done != total {
            bail!("pgbench ran {total} dispatches but {done} continuations are done");
        }
        Ok(PgbenchRate { continuations: total, per_second })
    }
    .await;
    scratch.drop_now().await;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_highest_first() {
        assert_eq!(
            substitute("a = $1 AND b = $10 AND c = $2", &["x", "y", "", "", "", "", "", "", "", "z"]),
            "a = x AND b = z AND c = y"
        );
    }

    #[test]
    fn the_script_is_the_stores_statements_with_no_placeholder_left() {
        let s = store_script();
        assert!(!s.contains('$'), "{s}");
        let sql = dispatch_sql();
        assert!(sql.claim.contains("FOR UPDATE OF c SKIP LOCKED"));
        assert!(s.contains("FOR UPDATE OF c SKIP LOCKED \\gset"), "{s}");
        assert!(s.contains("SET state = 'done', success = 1, steps = 1, end_type = 'submitted'"), "{s}");
        assert!(s.contains("attempt = :next, worker = 'pgbench'"), "{s}");
        assert!(s.contains("VALUES (:study, :trajectory, :series, :t, :next_seed, 'pending', 0, 0, 0)"), "{s}");
        assert_eq!(s.matches("BEGIN;").count(), 2);
        assert_eq!(s.matches("COMMIT;").count(), 2);
        let bare = bare_script();
        assert!(!bare.contains('$') && !bare.contains("JOIN") && bare.contains("SKIP LOCKED \\gset"), "{bare}");
    }

    #[test]
    fn the_rate_is_read_from_pgbenchs_summary() {
        let out = "transaction type: dispatch.sql\nnumber of clients: 4\nlatency average = 1.2 ms\n\
                   initial connection time = 5.1 ms\ntps = 3181.544 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(3181.544));
        assert_eq!(parse_tps("nothing"), None);
    }
}
