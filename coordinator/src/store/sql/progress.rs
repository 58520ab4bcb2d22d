//! Progress: a study's counts, throughput and estimated end; the queue by stage.

use std::collections::{BTreeMap, HashMap};

use sqlx::Row;
use vcurve_method::schedule::Stage;

use super::handle::SqlStore;
use super::rows::{corrupt, get_u32, series_of, stage_of};
use super::workers;
use crate::durations;
use crate::model::{Progress, StudyState};
use crate::planner;
use crate::store::api::{LeasePolicy, StoreError};

/// The name, state, runner kind and times of study `$1`.
const STUDY_HEAD: &str = "SELECT name, state, runner_kind, created_ms, finished_ms FROM studies WHERE id = $1";

/// The id, state, stage, admission, counters, timed sums and expected chain of every trajectory of
/// study `$1`.
const TRAJECTORY_COUNTERS: &str = "SELECT id, state, stage, admit_order, n_requested, n_done, n_retired, n_dropped, \
     timed_n, timed_ms, timed_budget, timed_log_ms, timed_log_ms_sq, chain_ms, remaining_steps FROM trajectories \
     WHERE study = $1";

/// The trajectory, series and step of every open (pending or leased) continuation of study `$1`.
const OPEN_CONTINUATIONS: &str =
    "SELECT trajectory, series, t FROM continuations WHERE study = $1 AND state IN ('pending', 'leased')";

/// How many continuations of study `$1` are leased (bounded by the slots, a partial index).
const LEASED_IN_STUDY: &str = "SELECT COUNT(*) AS n FROM continuations WHERE study = $1 AND state = 'leased'";

/// How many continuations of study `$1` were done in `$2 ..= $3`.
const DONE_BETWEEN: &str =
    "SELECT COUNT(*) AS n FROM continuations WHERE study = $1 AND done_ms >= $2 AND done_ms <= $3";

/// How many jobs of `jobs` of study `$1` were done in `$2 ..= $3`.
const JOBS_DONE_BETWEEN: &str =
    "SELECT COUNT(*) AS n FROM jobs WHERE study = $1 AND state = 'done' AND done_ms >= $2 AND done_ms <= $3";

/// The pending continuations of study `$1` by their trajectory's stage.
const PENDING_BY_STAGE: &str = "SELECT t.stage AS stage, COUNT(*) AS n FROM continuations c \
     JOIN trajectories t ON t.study = c.study AND t.id = c.trajectory \
     WHERE c.study = $1 AND c.state = 'pending' GROUP BY t.stage";

/// How many of study `study`'s rows `sql` ([`DONE_BETWEEN`] or [`JOBS_DONE_BETWEEN`]) counts
/// done in `window`.
async fn done_between(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    sql: &'static str,
    study: &str,
    window: planner::ThroughputWindow,
) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query(sql)
        .bind(study)
        .bind(window.start_ms)
        .bind(window.end_ms)
        .fetch_one(&mut **tx)
        .await?
        .try_get("n")?;
    Ok(n.max(0) as u64)
}

pub(super) async fn progress(
    store: &SqlStore,
    study: &str,
    now: i64,
    policy: LeasePolicy,
) -> Result<Progress, StoreError> {
    let mut tx = store.pool.begin().await?;
    let row = sqlx::query(STUDY_HEAD)
        .bind(study)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::UnknownStudy(study.into()))?;
    let name: String = row.try_get("name")?;
    let state = StudyState::parse(&row.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))?;
    let runner_kind: String = row.try_get("runner_kind")?;
    let window =
        planner::ThroughputWindow::of(row.try_get("created_ms")?, row.try_get::<Option<i64>, _>("finished_ms")?, now);
    let config = store.config(&mut tx, study).await?;
    // Counters kept by the transactions that create and finish continuations: no scan of the
    // study's continuations per poll.
    let mut by_state: HashMap<String, u32> = HashMap::new();
    let mut stages: BTreeMap<Stage, u32> = Default::default();
    let mut admitted = 0;
    let (mut requested, mut done, mut retired, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    // What the estimated end reads: the trajectories left and the finished ones' sums.
    let mut left: HashMap<String, durations::TrajectoryLeft> = HashMap::new();
    let mut finished = Vec::new();
    for r in sqlx::query(TRAJECTORY_COUNTERS).bind(study).fetch_all(&mut *tx).await? {
        let s: String = r.try_get("state")?;
        let timed = super::replan::timed_of(&r)?;
        match s.as_str() {
            "done" => finished.push(timed),
            "waiting" | "running" | "replaying" => {
                let waiting = s == "waiting";
                let trajectory = durations::TrajectoryLeft {
                    waiting,
                    timed,
                    open_budget: 0,
                    chain_ms: r.try_get("chain_ms")?,
                    remaining_steps: if waiting {
                        durations::remaining_steps(Stage::Screen, config.budget)
                    } else {
                        r.try_get("remaining_steps")?
                    },
                };
                left.insert(r.try_get("id")?, trajectory);
            }
            _ => {}
        }
        if r.try_get::<Option<i64>, _>("admit_order")?.is_some() {
            admitted += 1;
        }
        if s == "running" {
            *stages.entry(stage_of(&r.try_get::<String, _>("stage")?)?).or_default() += 1;
        }
        *by_state.entry(s).or_default() += 1;
        requested += r.try_get::<i64, _>("n_requested")? as u64;
        done += r.try_get::<i64, _>("n_done")? as u64;
        retired += r.try_get::<i64, _>("n_retired")? as u64;
        dropped += r.try_get::<i64, _>("n_dropped")? as u64;
    }
    // Bounded by the workers' slots, through a partial index.
    let running = sqlx::query(LEASED_IN_STUDY).bind(study).fetch_one(&mut *tx).await?.try_get::<i64, _>("n")? as u64;
    let pending = requested.saturating_sub(done + retired + dropped + running);
    let trajectories: u32 = by_state.values().sum();
    let recent = done_between(&mut tx, DONE_BETWEEN, study, window).await?;
    let evaluation = if vcurve_record::runner::runs_containers(&runner_kind) {
        Some(store.verdict_totals(&mut *tx, study).await?)
    } else {
        None
    };
    let retired_jobs = super::retired::retired_jobs(&mut tx, study).await?;
    let workers = workers::live_workers(&mut tx, now, policy).await?;
    let by_durations = if state == StudyState::Running && !finished.is_empty() {
        for r in sqlx::query(OPEN_CONTINUATIONS).bind(study).fetch_all(&mut *tx).await? {
            let budget = series_of(&r.try_get::<String, _>("series")?)?.budget(config.budget, get_u32(&r, "t")?);
            if let Some(t) = left.get_mut(&r.try_get::<String, _>("trajectory")?) {
                t.open_budget += i64::from(budget);
            }
        }
        let slots: u64 =
            workers.iter().filter(|w| w.capabilities.contains(&runner_kind)).map(|w| u64::from(w.slots)).sum();
        let left: Vec<_> = left.into_values().collect();
        durations::eta_ms(&left, &finished, slots, config.budget).map(|ms| ms / 1000.0)
    } else {
        None
    };
    let labels = match config.judges.is_empty() {
        true => None,
        false => Some(super::call_progress::label_stage(&mut tx, study, &workers).await?),
    };
    let calls = match config.task_state.clone() {
        Some(settings) => {
            let stages = super::call_progress::call_stages(&mut tx, study, &settings, &workers).await?;
            let recent_jobs = done_between(&mut tx, JOBS_DONE_BETWEEN, study, window).await?;
            Some((stages, recent_jobs))
        }
        None => None,
    };
    tx.commit().await?;
    let mut throughput_per_min = window.per_minute(recent);
    let offered = workers.iter().any(|w| w.capabilities.contains(&runner_kind));
    let waiting_for_runner = (state == StudyState::Running && !offered).then_some(runner_kind);
    let waiting = by_state.get("waiting").copied().unwrap_or(0);
    let per_trajectory =
        if admitted > 0 { (done + running + pending + retired) as f64 / f64::from(admitted) } else { 300.0 };
    let remaining = (pending + running) as f64 + f64::from(waiting) * per_trajectory;
    // From the durations once a trajectory finished; before, from the throughput.
    let mut eta_seconds = match state {
        StudyState::Running if by_durations.is_some() => by_durations,
        StudyState::Running if throughput_per_min > 0.0 => Some(remaining / (throughput_per_min / 60.0)),
        StudyState::Running => None,
        _ => Some(0.0),
    };
    // A task-state study: sessions and calls per minute, and the calls still to make.
    if let Some((calls, recent_jobs)) = &calls {
        throughput_per_min = window.per_minute(*recent_jobs);
        let left: Option<u64> =
            calls.stages.iter().map(|s| s.expected.map(|e| e.saturating_sub(s.done + s.retired))).sum();
        eta_seconds = match (state, left) {
            (StudyState::Running, Some(left)) if throughput_per_min > 0.0 => {
                Some(left as f64 / (throughput_per_min / 60.0))
            }
            (StudyState::Running, _) => None,
            _ => Some(0.0),
        };
    }
    Ok(Progress {
        study: study.into(),
        name,
        state,
        done,
        running,
        pending,
        retired,
        retired_jobs,
        trajectories,
        trajectories_admitted: admitted,
        trajectories_done: by_state.get("done").copied().unwrap_or(0),
        trajectories_doomed: by_state.get("doomed").copied().unwrap_or(0),
        trajectories_non_replayable: by_state.get("non_replayable").copied().unwrap_or(0),
        stages: stages.into_iter().collect(),
        workers,
        throughput_per_min,
        eta_seconds,
        waiting_for_runner,
        lease_latency: None,
        evaluation,
        call_stages: calls
            .as_ref()
            .map(|(c, _)| &c.stages)
            .or(labels.as_ref().map(|l| &l.stages))
            .cloned()
            .unwrap_or_default(),
        waiting_for_endpoints: calls
            .map(|(c, _)| c.waiting_for_endpoints)
            .or(labels.map(|l| l.waiting_for_endpoints))
            .unwrap_or_default(),
    })
}

pub(super) async fn pending_by_stage(store: &SqlStore, study: &str) -> Result<Vec<(Stage, u64)>, StoreError> {
    sqlx::query(PENDING_BY_STAGE)
        .bind(study)
        .fetch_all(&store.pool)
        .await?
        .iter()
        .map(|r| Ok((stage_of(&r.try_get::<String, _>("stage")?)?, r.try_get::<i64, _>("n")?.max(0) as u64)))
        .collect()
}
