//! Replanning: a trajectory's schedule rebuilt from its outcomes after each change, the
//! continuations it asks for created, its stage and counters advanced. The keys and outcomes of a
//! trajectory's last replan are cached ([`super::known`]).

use std::collections::BTreeSet;

use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::{Key, Outcome, TrajectoryPlan};

use super::dispatch;
use super::handle::{STUDY_TIMED_MS, SqlStore, StudyConfig, StudyTimed};
use super::known::Counters;
use super::rows::{get_u32, outcome_of, series_of};
use crate::durations::{self, Timed};
use crate::model::TrajectoryState;
use crate::planner;
use crate::store::api::StoreError;

/// A trajectory's continuations (`$1` study, `$2` trajectory): their keys, states and outcomes.
const CONTINUATIONS_OF: &str =
    "SELECT series, t, seed, state, success FROM continuations WHERE study = $1 AND trajectory = $2";

/// What a replan reads of its trajectory's row under its lock: the counters and the timed sums
/// ([`dispatch::COUNTERS`]).
pub(super) type Locked = (Counters, Timed);

/// A trajectory's [`dispatch::COUNTERS`] (`$1` study, `$2` id), not locked.
fn counters_of() -> String {
    format!("SELECT {} FROM trajectories WHERE study = $1 AND id = $2", dispatch::COUNTERS)
}

impl SqlStore {
    /// Rebuild a trajectory's schedule (`(study, id, plan)`) from its stored continuations, create
    /// the continuations it now asks for, and record its stage, its counters — and the study's end
    /// when this was its last trajectory.
    /// Returns how many continuations were created and whether the trajectory is done.
    ///
    /// `locked` is the trajectory's counters and timed sums as this transaction's row lock read
    /// them ([`SqlStore::lock_trajectory`]), the timed sums with the continuation this transaction
    /// timed added: this replan stores them. `None` to read both here (and store no sums). `fresh` is the outcome this
    /// transaction has just recorded, if any: this replan counts it (`n_done`, or `n_retired` for
    /// [`Outcome::Retired`]). Then, when the counters are exactly what this trajectory's last
    /// replan in this process left ([`KnownCache`](super::known::KnownCache)), that replan's keys and outcomes plus `fresh` are
    /// the trajectory's, and its continuations are not read again. Must run under the
    /// trajectory's row lock.
    pub(super) async fn replan(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        (study, trajectory, plan): (&str, &str, &TrajectoryPlan),
        locked: Option<Locked>,
        fresh: Option<(Key, Outcome)>,
        now: i64,
    ) -> Result<(u64, bool), StoreError> {
        // A trajectory's schedule starts once every judge has labelled it (docs/decisions.md,
        // "Judge labels"); before its first continuation no outcome can be fresh.
        if fresh.is_none() && !config.judges.is_empty() && self.judges_pending(tx, config, study, trajectory).await? {
            return Ok((0, false));
        }
        // The timed sums are written back only when read under the row lock.
        let (version, timed, locked_timed) = match locked {
            Some((counters, timed)) => (counters, timed, Some(timed)),
            None => {
                let row = sqlx::query(sqlx::AssertSqlSafe(counters_of()))
                    .bind(study)
                    .bind(trajectory)
                    .fetch_one(&mut **tx)
                    .await?;
                (Counters::of(&row)?, timed_of(&row)?, None)
            }
        };
        let id = (study.to_string(), trajectory.to_string());
        let cached = fresh.and_then(|fresh| self.known.take(&id, version, fresh));
        let (mut existing, outcomes) = match cached {
            Some(known) => known,
            None => self.read_continuations(tx, study, trajectory).await?,
        };
        let replan = planner::replan(plan, &config.params, config.variant()?, outcomes.iter().copied());
        let new: Vec<&Key> = replan.pending.iter().filter(|k| !existing.contains(k)).collect();
        // One multi-row insert per 100 keys (5 parameters a row stays far below every limit).
        for chunk in new.chunks(100) {
            let sql = dispatch::request(chunk.len());
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).bind(trajectory).bind(now);
            for k in chunk {
                q = q.bind(k.series.as_str()).bind(i64::from(k.t)).bind(i64::from(k.seed));
            }
            q.execute(&mut **tx).await?;
        }
        // The expected remaining chain, which the claim order puts first.
        let chain_ms = if replan.done {
            0
        } else {
            let (study_timed, pooled) = self.study_timed(tx, study, now).await?;
            let rate = durations::rate(timed, study_timed, pooled);
            durations::chain_ms(rate, replan.pending.iter().map(|k| k.series.budget(config.budget, k.t)))
        };
        let state = if replan.done { TrajectoryState::Done } else { TrajectoryState::Running };
        let (done, retired) = match fresh {
            Some((_, Outcome::Retired)) => (0, 1),
            Some(_) => (1, 0),
            None => (0, 0),
        };
        sqlx::query(dispatch::ADVANCE)
            .bind(replan.stage.as_str())
            .bind(planner::stage_rank(replan.stage))
            .bind(state.as_str())
            .bind(new.len() as i64)
            .bind(done)
            .bind(retired)
            .bind(study)
            .bind(trajectory)
            .bind(chain_ms)
            .bind(replan.done.then_some(now))
            .bind(locked_timed.map(|t| t.n))
            .bind(locked_timed.map(|t| t.ms))
            .bind(locked_timed.map(|t| t.budget))
            .bind(durations::remaining_steps(replan.stage, config.budget))
            .bind(locked_timed.map(|t| (t.log_ms * dispatch::LOG_SCALE).round() as i64))
            .bind(locked_timed.map(|t| (t.log_ms_sq * dispatch::LOG_SCALE).round() as i64))
            .execute(&mut **tx)
            .await?;
        let created = new.len() as u64;
        if replan.done {
            self.known.forget(&id);
        } else {
            existing.extend(replan.pending.iter().copied());
            self.known.remember(id, version.advanced(created as i64, done + retired), existing, outcomes);
        }
        if replan.done {
            self.finish_if_done(tx, study, now).await?;
        }
        Ok((created, replan.done))
    }

    /// A study's timed sums over its trajectories and whether its trajectories' durations do not
    /// differ ([`durations::Spread::pooled`]), read at most every [`STUDY_TIMED_MS`] of store time
    /// by this process (a prior: a minute old is recent enough). The verdict is stored on the
    /// study when it changes, for the claim order.
    pub(super) async fn study_timed(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        now: i64,
    ) -> Result<(Timed, bool), StoreError> {
        if let Some(cached) = self.study_timed.lock().expect("study timed cache").get(study)
            && (0..STUDY_TIMED_MS).contains(&(now - cached.at))
        {
            return Ok((cached.timed, cached.pooled));
        }
        let row = sqlx::query(dispatch::STUDY_TIMED).bind(study).fetch_one(&mut **tx).await?;
        let timed = timed_of(&row)?;
        let finished = sqlx::query(dispatch::FINISHED_TIMED).bind(study).fetch_all(&mut **tx).await?;
        let finished = finished.iter().map(timed_of).collect::<Result<Vec<_>, _>>()?;
        let pooled = durations::Spread::of(finished).pooled();
        sqlx::query(dispatch::SET_POOLED).bind(i64::from(pooled)).bind(study).execute(&mut **tx).await?;
        let cached = StudyTimed { at: now, timed, pooled };
        let mut cache = self.study_timed.lock().expect("study timed cache");
        // A study that has not replanned here for ten refreshes has ended (or moved to another
        // coordinator process): its entry goes, so the cache holds the studies running now.
        cache.retain(|_, c| (0..10 * STUDY_TIMED_MS).contains(&(now - c.at)));
        cache.insert(study.to_string(), cached);
        Ok((timed, pooled))
    }

    /// A trajectory's continuation keys and the outcomes among them.
    pub(super) async fn read_continuations(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<(BTreeSet<Key>, Vec<(Key, Outcome)>), StoreError> {
        let rows = sqlx::query(CONTINUATIONS_OF).bind(study).bind(trajectory).fetch_all(&mut **tx).await?;
        let mut existing = BTreeSet::new();
        let mut outcomes = Vec::new();
        for row in &rows {
            let key = Key {
                series: series_of(&row.try_get::<String, _>("series")?)?,
                t: get_u32(row, "t")?,
                seed: get_u32(row, "seed")?,
            };
            existing.insert(key);
            let state: String = row.try_get("state")?;
            if state == "done" || state == "retired" {
                outcomes.push((key, outcome_of(row)?));
            }
        }
        Ok((existing, outcomes))
    }

    /// Add `n` to one of a trajectory's continuation counters (`n_dropped`: a report's outcome is
    /// counted by its replan's [`dispatch::ADVANCE`]), inside the transaction that changed them.
    pub(super) async fn count(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
        counter: &'static str,
        n: u64,
    ) -> Result<(), StoreError> {
        if n == 0 {
            return Ok(());
        }
        sqlx::query(sqlx::AssertSqlSafe(dispatch::count(counter)))
            .bind(n as i64)
            .bind(study)
            .bind(trajectory)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

/// The timed sums of a row with the columns `timed_n`, `timed_ms`, `timed_budget`, `timed_log_ms`
/// and `timed_log_ms_sq` (the last two in millionths, [`dispatch::LOG_SCALE`]).
pub(super) fn timed_of(row: &sqlx::any::AnyRow) -> Result<Timed, StoreError> {
    Ok(Timed {
        n: row.try_get("timed_n")?,
        ms: row.try_get("timed_ms")?,
        budget: row.try_get("timed_budget")?,
        log_ms: row.try_get::<i64, _>("timed_log_ms")? as f64 / dispatch::LOG_SCALE,
        log_ms_sq: row.try_get::<i64, _>("timed_log_ms_sq")? as f64 / dispatch::LOG_SCALE,
    })
}
