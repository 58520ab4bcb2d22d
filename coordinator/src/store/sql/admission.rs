//! Admission: which waiting trajectories start, under their study's row lock, as the study's
//! admission rule weighs the demand.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::TrajectoryPlan;

use super::handle::SqlStore;
use super::jobs::insert_job;
use super::rows::{corrupt, count_trajectories};
use crate::model::{JobKey, TrajectoryState};
use crate::planner::{self, AdmitDecision, Demand};
use crate::store::api::{LeasePolicy, StoreError};

/// Admit trajectory `$5` of study `$4`: state `$1`, rank `$2`, plan `$3`, at `$6`, at the head of
/// the claim order or not (`$7`, 1 or 0: [`super::dispatch::claim`]).
const ADMIT: &str = "UPDATE trajectories SET state = $1, admit_order = $2, plan_json = $3, admitted_ms = $6, head = $7 \
     WHERE study = $4 AND id = $5";

/// Study `$2` has admitted `$1` trajectories.
const SET_ADMITTED: &str = "UPDATE studies SET admitted = $1 WHERE id = $2";

/// The condition on a trajectory's columns that it is in flight: admitted, not finished.
pub(super) const IN_FLIGHT: &str = "state IN ('running', 'replaying')";

/// The columns admission weighs (`$1` the oldest visit of a live worker): `slots` of live workers,
/// `leased` jobs of both tables, and pending ones in running studies: `pending_continuations`
/// and `pending_jobs` (counted on the `(state, study)` indexes alone: look-ahead admission keeps
/// thousands pending).
pub(super) const DEMAND: &str = "(SELECT CAST(COALESCE(SUM(slots), 0) AS BIGINT) FROM workers WHERE last_seen_ms >= $1) AS slots, \
     (SELECT COUNT(*) FROM continuations WHERE state = 'leased') \
       + (SELECT COUNT(*) FROM jobs WHERE state = 'leased') AS leased, \
     (SELECT COUNT(*) FROM continuations WHERE state = 'pending' \
       AND study IN (SELECT id FROM studies WHERE state = 'running')) AS pending_continuations, \
     (SELECT COUNT(*) FROM jobs WHERE state = 'pending' \
       AND study IN (SELECT id FROM studies WHERE state = 'running')) AS pending_jobs";

impl SqlStore {
    /// Admit trajectories as each running study's admission rule asks (see
    /// [`planner::admission`]).
    ///
    /// Concurrent leases — of one coordinator or of several on one store — admit into a study one
    /// after the other: under the study row's lock, the admitting transaction reads the next rank
    /// from the row's `admitted` counter and makes the batch rule's in-flight check, and every
    /// statement after the lock sees what the admitter before it committed (READ COMMITTED). So
    /// ranks are unique, trajectories are admitted in spec order, and the rule is applied to what
    /// was admitted, not to a stale count. Controls are not decided here: they were stored with
    /// each trajectory's plan at launch (see [`planner::controls_at_launch`]).
    ///
    /// The lock is taken only when a first look without it finds something to admit, so leases
    /// with nothing to admit go on to claim work without waiting for each other. Lock order:
    /// studies (oldest first), then their waiting trajectories — rows that no report locks, since
    /// reports lock only admitted trajectories (and their studies' rows last, when they end them).
    pub(super) async fn admit(
        &self,
        tx: &mut Transaction<'_, Any>,
        now: i64,
        policy: LeasePolicy,
    ) -> Result<(), StoreError> {
        // Only studies that still have trajectories to admit; once every trajectory is in, a
        // lease costs this one query here. With each, its trajectories in flight and (the same on
        // every row) the demand: one round trip for the look without the lock.
        let sql = format!(
            "SELECT s.id, (SELECT COUNT(*) FROM trajectories t WHERE t.study = s.id AND t.{IN_FLIGHT}) AS in_flight, \
             CASE WHEN EXISTS (SELECT 1 FROM trajectories t WHERE t.study = s.id AND t.state = 'done') \
               THEN 1 ELSE 0 END AS finished, \
             {DEMAND} FROM studies s WHERE s.state = 'running' \
             AND EXISTS (SELECT 1 FROM trajectories t WHERE t.study = s.id AND t.state = 'waiting') \
             ORDER BY s.created_ms, s.id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now - policy.timeout_ms).fetch_all(&mut **tx).await?;
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let mut demand = Self::demand_of(first)?;
        for row in &rows {
            let study: String = row.try_get("id")?;
            let config = self.config(tx, &study).await?;
            let in_flight = u32::try_from(row.try_get::<i64, _>("in_flight")?).unwrap_or(u32::MAX);
            // A curve finished: look-ahead admission (see planner::admission).
            let finished = row.try_get::<i64, _>("finished")? != 0;
            if planner::admission(&config.admission, in_flight, finished, demand) == AdmitDecision::Nothing {
                continue;
            }
            let sql = format!(
                "SELECT admitted, controls_at_launch FROM studies WHERE id = $1 AND state = 'running'{}",
                self.for_no_key_update()
            );
            let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(&study).fetch_optional(&mut **tx).await? else {
                continue; // cancelled or ended meanwhile
            };
            let first_rank: i64 = row.try_get("admitted")?;
            let controls_at_launch = row.try_get::<i64, _>("controls_at_launch")? != 0;
            let mut rank = first_rank;
            // Under the lock, the demand as it is now: other admitters may have met it meanwhile.
            demand = self.demand(tx, now, policy).await?;
            loop {
                let in_flight = self.in_flight(tx, &study).await?;
                // Behind the head only what demand admission queues ahead; a batch keeps the
                // claim order as it was (stage, then current barrier).
                let (take, head) = match planner::admission(&config.admission, in_flight, finished, demand) {
                    AdmitDecision::Nothing => break,
                    AdmitDecision::One => (1, true),
                    AdmitDecision::Ahead => (1, false),
                    AdmitDecision::Batch(n) => (n, true),
                };
                let sql = format!(
                    "SELECT id, plan_json, recorded_digest FROM trajectories WHERE study = $1 AND state = 'waiting' \
                     ORDER BY ord LIMIT $2{}",
                    self.for_update()
                );
                let waiting = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(&study)
                    .bind(i64::from(take))
                    .fetch_all(&mut **tx)
                    .await?;
                if waiting.is_empty() {
                    break;
                }
                for row in waiting {
                    let id: String = row.try_get("id")?;
                    let mut plan: TrajectoryPlan =
                        serde_json::from_str(&row.try_get::<String, _>("plan_json")?).map_err(corrupt)?;
                    if !controls_at_launch {
                        // A study stored before controls were decided at launch: by rank, the
                        // rule it was launched under.
                        let rank = u32::try_from(rank).map_err(|_| corrupt(format!("admission rank {rank}")))?;
                        plan.controls = planner::controls_for(rank, &config.controls);
                    }
                    // A recorded run is replayed first: no continuation before its states are
                    // known to match the record (docs/method.md §5).
                    let recorded = row.try_get::<Option<String>, _>("recorded_digest")?.is_some();
                    let state = if recorded { TrajectoryState::Replaying } else { TrajectoryState::Running };
                    sqlx::query(ADMIT)
                        .bind(state.as_str())
                        .bind(rank)
                        .bind(serde_json::to_string(&plan).map_err(corrupt)?)
                        .bind(&study)
                        .bind(&id)
                        .bind(now)
                        .bind(i64::from(head))
                        .execute(&mut **tx)
                        .await?;
                    rank += 1;
                    if recorded {
                        insert_job(tx, &JobKey::Replay { study: study.clone(), trajectory: id.clone() }, now).await?;
                        demand.runnable += 1;
                        demand.jobs += 1;
                    } else {
                        demand.runnable += self.replan(tx, &config, (&study, &id, &plan), None, None, now).await?.0;
                    }
                }
                if take > 1 {
                    break;
                }
            }
            if rank > first_rank {
                sqlx::query(SET_ADMITTED).bind(rank).bind(&study).execute(&mut **tx).await?;
            }
        }
        Ok(())
    }

    /// What demand admission weighs, over every running study (workers seen since `$1`).
    pub(super) async fn demand(
        &self,
        tx: &mut Transaction<'_, Any>,
        now: i64,
        policy: LeasePolicy,
    ) -> Result<Demand, StoreError> {
        let sql = format!("SELECT {DEMAND}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now - policy.timeout_ms).fetch_one(&mut **tx).await?;
        Self::demand_of(&row)
    }

    /// The demand of a row with the [`DEMAND`] columns.
    pub(super) fn demand_of(row: &AnyRow) -> Result<Demand, StoreError> {
        let count = |column: &str| row.try_get::<i64, _>(column).map(|n| n.max(0) as u64);
        let (slots, leased) = (count("slots")?, count("leased")?);
        let jobs = count("pending_jobs")?;
        Ok(Demand { slots, free: slots.saturating_sub(leased), runnable: count("pending_continuations")? + jobs, jobs })
    }

    /// A study's trajectories in flight (admitted, not finished), for the batch rule.
    pub(super) async fn in_flight(&self, tx: &mut Transaction<'_, Any>, study: &str) -> Result<u32, StoreError> {
        count_trajectories(tx, study, IN_FLIGHT).await
    }
}
