//! The SQL of a continuation's dispatch, in one place: the store runs these statements, and
//! `vcurve bench dispatch --pgbench` hands the same text to pgbench ([`dispatch_sql`]), so the two
//! rates compare the store's own statements with and without everything around them.

use crate::durations;

/// Lease a claimed row of `{table}` (keyed by `{key}`, `$1 … $5`): attempt `$6`, worker `$7`,
/// lease expiry `$8`, leased at `$9`.
pub(super) const MARK_LEASED: &str =
    "UPDATE {table} SET state = 'leased', attempt = $6, worker = $7, lease_expires_ms = $8, leased_ms = $9 WHERE {key}";

/// A continuation's outcome (`$1 … $5` its key): success `$6`, steps `$7`, end type `$8`, patch
/// `$9`, judged `$10`, done at `$11` — only while it is leased in attempt `$12`, so it also checks
/// the report is current (no row: the store reads the row to say why). Returns when it was leased.
pub(super) const COMPLETE: &str = concat!(
    "UPDATE continuations SET state = 'done', success = $6, steps = $7, end_type = $8, \
     patch_sha256 = $9, judged = $10, done_ms = $11, worker = NULL, lease_expires_ms = NULL WHERE ",
    key_is!(),
    " AND state = 'leased' AND attempt = $12 RETURNING leased_ms"
);

/// A study's timed sums over its trajectories (`$1` study).
pub(super) const STUDY_TIMED: &str = "SELECT CAST(COALESCE(SUM(timed_n), 0) AS BIGINT) AS timed_n, \
     CAST(COALESCE(SUM(timed_ms), 0) AS BIGINT) AS timed_ms, \
     CAST(COALESCE(SUM(timed_budget), 0) AS BIGINT) AS timed_budget, \
     CAST(COALESCE(SUM(timed_log_ms), 0) AS BIGINT) AS timed_log_ms, \
     CAST(COALESCE(SUM(timed_log_ms_sq), 0) AS BIGINT) AS timed_log_ms_sq \
     FROM trajectories WHERE study = $1";

/// How many millionths the stored log sums count in (`timed_log_ms`, `timed_log_ms_sq`): the
/// store binds integers only.
pub(super) const LOG_SCALE: f64 = 1e6;

/// The timed sums of a study's finished trajectories (`$1` study), which
/// [`crate::durations::Spread`] reads: a row each, read at most once a minute.
pub(super) const FINISHED_TIMED: &str = "SELECT timed_n, timed_ms, timed_budget, timed_log_ms, timed_log_ms_sq \
     FROM trajectories WHERE study = $1 AND state = 'done' AND timed_n > 0";

/// A study's verdict on its durations' spread, `$1` (1: pooled), for study `$2`, written only
/// when it changed (an unchanged row is not locked).
pub(super) const SET_POOLED: &str = "UPDATE studies SET rate_pooled = $1 WHERE id = $2 AND rate_pooled <> $1";

/// A trajectory's counters, as the columns `n_requested`, `n_finished` and `n_dropped`, and its
/// timed sums (`timed_n`, `timed_ms`, `timed_budget`, `timed_log_ms`, `timed_log_ms_sq`:
/// [`crate::durations::Timed`]).
pub(super) const COUNTERS: &str = "n_requested, n_done + n_retired AS n_finished, n_dropped, timed_n, timed_ms, \
     timed_budget, timed_log_ms, timed_log_ms_sq";

/// A trajectory's row (`$1` study, `$2` id), locked on PostgreSQL: reports of one trajectory
/// replan one after the other. Its plan and [`COUNTERS`].
pub(super) fn lock_trajectory(for_update: &str) -> String {
    format!("SELECT plan_json, {COUNTERS} FROM trajectories WHERE study = $1 AND id = $2{for_update}")
}

/// A replan's end: the trajectory's stage `$1` (rank `$2`), state `$3`, and its counters
/// advanced by the continuations requested `$4` and the outcome recorded, done `$5` or retired
/// `$6` (`$7` study, `$8` id); its expected remaining chain `$9` ms, its end `$10` (when `$3` is
/// done), and its timed sums `$11 … $13`, `$15`, `$16` as the replan's row lock read them with the
/// report's continuation added (NULL: unchanged), and the steps of budget its stage has left `$14`
/// ([`crate::durations::remaining_steps`]).
pub(super) const ADVANCE: &str = "UPDATE trajectories SET stage = $1, stage_rank = $2, state = $3, \
     n_requested = n_requested + $4, n_done = n_done + $5, n_retired = n_retired + $6, chain_ms = $9, \
     remaining_steps = $14, \
     ended_ms = COALESCE(ended_ms, $10), timed_n = COALESCE($11, timed_n), timed_ms = COALESCE($12, timed_ms), \
     timed_budget = COALESCE($13, timed_budget), timed_log_ms = COALESCE($15, timed_log_ms), \
     timed_log_ms_sq = COALESCE($16, timed_log_ms_sq) WHERE study = $7 AND id = $8";

/// Add `$1` to a trajectory's `counter` (`$2` study, `$3` id).
pub(super) fn count(counter: &str) -> String {
    format!("UPDATE trajectories SET {counter} = {counter} + $1 WHERE study = $2 AND id = $3")
}

/// Request `rows` continuations of one trajectory (`$1` study, `$2` trajectory, `$3` now), row
/// `i` with series, t and seed at `$(4 + 3i) … $(6 + 3i)`.
pub(super) fn request(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO continuations (study, trajectory, series, t, seed, state, attempt, no_outcomes, created_ms) VALUES ",
    );
    for i in 0..rows {
        let b = i * 3 + 4;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("($1, $2, ${b}, ${}, ${}, 'pending', 0, 0, $3)", b + 1, b + 2));
    }
    sql
}

/// How many trajectories beyond the `$1` asked for a claim ranks: a trajectory whose pending rows
/// other claims hold (locked, skipped) leaves its place to the next.
pub(super) const CLAIM_SPARE: i64 = 16;

/// Claim up to `$1` pending continuations of running studies whose runner kind is in `kinds_in`
/// (`IN ($2, …)`), in the claim order (docs/decisions.md, "Duration-aware dispatch"):
///
/// - the head first (trajectories admitted because a slot would idle without them, or by a
///   batch), later stages first, then the longest current barrier as the last replan stored it
///   ([`crate::durations::chain_ms`]);
/// - then the rest by their expected remaining chain, longest first, computed here from what does
///   not go stale: the steps of budget the trajectory's stage has left
///   ([`durations::remaining_steps`]) at its rate, its own timed sums shrunk toward its study's
///   as they are now ([`rate`]), or its study's alone when the study's trajectories do not differ
///   (`rate_pooled`, [`durations::Spread`]): then the stage, and admission order within it;
/// - then the older study, the earlier admitted trajectory and the key.
///
/// Locality goes before all of it: `near` (empty, or `CASE … END, ` over the trajectory `tr`)
/// ranks trajectories, `locality` (the same over the ranked trajectory `top` and the continuation
/// `c`) their continuations. Every continuation of a trajectory shares its rank, so the claim
/// ranks the trajectories with pending work and takes the best `$1` + [`CLAIM_SPARE`] of them
/// before it reads any continuation (`CROSS JOIN` keeps SQLite from driving the join from the
/// queue): its cost grows with the trajectories in flight, not with the queue, which look-ahead
/// admission keeps long. On PostgreSQL the rows are locked, skipping rows other claims hold.
pub(super) fn claim(kinds_in: &str, near: &str, locality: &str, postgres: bool) -> String {
    let (study_rate, rate) = (study_rate(), rate());
    format!(
        "SELECT c.study, c.trajectory, c.series, c.t, c.seed, c.attempt, top.payload_digest \
         FROM (SELECT tr.study, tr.id, tr.payload_digest, tr.admit_order, s.created_ms, tr.head, \
             CASE WHEN tr.head = 1 THEN tr.stage_rank ELSE 0 END AS tier, \
             CASE WHEN tr.head = 1 THEN CAST(tr.chain_ms AS DOUBLE PRECISION) \
               ELSE CAST(tr.remaining_steps AS DOUBLE PRECISION) * {rate} END AS chain \
           FROM trajectories tr \
           JOIN studies s ON s.id = tr.study \
           LEFT JOIN (SELECT study, {study_rate} AS rate FROM trajectories \
             WHERE study IN (SELECT id FROM studies WHERE state = 'running') GROUP BY study) st ON st.study = tr.study \
           WHERE s.state = 'running' AND s.runner_kind {kinds_in} AND tr.state <> 'waiting' \
             AND EXISTS (SELECT 1 FROM continuations p WHERE p.study = tr.study AND p.trajectory = tr.id \
               AND p.state = 'pending') \
           ORDER BY {near}tr.head DESC, tier DESC, chain DESC, s.created_ms, tr.admit_order \
           LIMIT $1 + {CLAIM_SPARE}) top \
         CROSS JOIN continuations c \
         WHERE c.study = top.study AND c.trajectory = top.id AND c.state = 'pending' \
         ORDER BY {locality}top.head DESC, top.tier DESC, top.chain DESC, top.created_ms, top.admit_order, \
         c.series, c.t, c.seed \
         LIMIT $1{}",
        if postgres { " FOR UPDATE OF c SKIP LOCKED" } else { "" },
    )
}

/// A study's rate in SQL over its trajectories' rows grouped by study, ms per step of budget:
/// their timed milliseconds over their timed budgets, [`durations::DEFAULT_RATE`] before any
/// budget was timed.
fn study_rate() -> String {
    let default = durations::DEFAULT_RATE;
    format!(
        "COALESCE(CAST(SUM(timed_ms) AS DOUBLE PRECISION) / NULLIF(CAST(SUM(timed_budget) AS DOUBLE PRECISION), 0.0), \
         {default:.1})"
    )
}

/// A trajectory's rate in SQL, ms per step of budget, as [`crate::durations::rate`] computes it:
/// its timed sums' (`tr`) and its study's ([`study_rate`] as `st.rate`) weighed `n` to
/// [`durations::PRIOR_CONTINUATIONS`], the study's alone when it is pooled (`s.rate_pooled`).
fn rate() -> String {
    let (prior, default) = (durations::PRIOR_CONTINUATIONS, durations::DEFAULT_RATE);
    // A running study always has its row in `st`; the default only keeps the SQL total.
    let study = format!("COALESCE(st.rate, {default:.1})");
    format!(
        "(CASE WHEN s.rate_pooled = 0 AND tr.timed_n > 0 AND tr.timed_budget > 0 THEN \
         (CAST(tr.timed_n AS DOUBLE PRECISION) * CAST(tr.timed_ms AS DOUBLE PRECISION) \
         / CAST(tr.timed_budget AS DOUBLE PRECISION) + {prior:.1} * {study}) \
         / (CAST(tr.timed_n AS DOUBLE PRECISION) + {prior:.1}) ELSE {study} END)"
    )
}

/// The statements of one continuation's dispatch as the store runs them on PostgreSQL, with the
/// placeholders it binds (see each field). A lease transaction runs `claim` then `mark_leased`
/// for each claimed row; a report's transaction `lock_trajectory` and `complete`, `request`s the
/// continuations the schedule asks for next and `advance`s the trajectory.
/// Around them the store also registers the worker's visit, expires leases, admits, claims other
/// jobs first and rebuilds the trajectory's schedule from its outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchSql {
    /// `$1` how many, `$2` the one runner kind; returns `study, trajectory, series, t, seed,
    /// attempt, payload_digest`.
    pub claim: String,
    /// `$1 … $5` the key, `$6` attempt, `$7` worker, `$8` lease expiry, `$9` leased at.
    pub mark_leased: String,
    /// `$1` study, `$2` trajectory.
    pub lock_trajectory: String,
    /// `$1 … $5` the key, `$6` success, `$7` steps, `$8` end type, `$9` patch, `$10` judged,
    /// `$11` done at, `$12` the leased attempt; returns `leased_ms`.
    pub complete: String,
    /// `$1` stage, `$2` its rank, `$3` state, `$4` continuations requested, `$5` done, `$6`
    /// retired, `$7` study, `$8` trajectory, `$9` expected remaining chain, `$10` the end (or
    /// NULL), `$11 … $13`, `$15`, `$16` the timed sums (or NULL), `$14` the steps of budget its
    /// stage has left.
    pub advance: String,
    /// One new continuation, as the schedule's replan requests them: `$1` study, `$2`
    /// trajectory, `$3` now, `$4` series, `$5` t, `$6` seed.
    pub request: String,
}

/// The store's dispatch statements on PostgreSQL for workers offering one runner kind and no
/// snapshot locality.
pub fn dispatch_sql() -> DispatchSql {
    DispatchSql {
        claim: claim("IN ($2)", "", "", true),
        mark_leased: MARK_LEASED.replace("{table}", "continuations").replace("{key}", key_is!()),
        lock_trajectory: lock_trajectory(" FOR UPDATE"),
        complete: COMPLETE.to_string(),
        advance: ADVANCE.to_string(),
        request: request(1),
    }
}
