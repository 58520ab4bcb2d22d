//! Reports: a worker's report recorded under its trajectory's row lock (outcomes, no-outcomes,
//! replays, evaluations, base runs, non-replayable trajectories), then replanned.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::{Key, Outcome, TrajectoryPlan};
use vcurve_record::jobs::NonReplayable;

use super::handle::{SqlStore, StudyConfig};
use super::known::Counters;
use super::replan::Locked;
use super::rows::{bind_job, bind_key, corrupt, get_u32, keyed};
use super::{dispatch, verdicts};
use crate::model::{ContinuationKey, HeldJob, JobKey, JobReport, ReportVerdict};
use crate::spec::StudySpec;
use crate::store::api::{Reported, StoreError};

/// A job of `jobs` done (`$1 … $5` its key): its report `$6`, at `$7`.
const JOB_DONE: &str = concat!(
    "UPDATE jobs SET state = 'done', result_json = $6, done_ms = $7, worker = NULL, lease_expires_ms = NULL WHERE ",
    job_is!()
);

/// The task and payload digest of trajectory `$2` of study `$1`.
const TASK_OF: &str = "SELECT task, payload_digest FROM trajectories WHERE study = $1 AND id = $2";

/// The spec of study `$1`.
const SPEC_OF: &str = "SELECT spec_json FROM studies WHERE id = $1";

/// Trajectory `$3` of study `$2` replayed (`$1` the replay): it runs.
const REPLAYED: &str = "UPDATE trajectories SET state = 'running', replay_json = $1 WHERE study = $2 AND id = $3";

/// Trajectory `$3` of study `$2` is non-replayable, `$1` why.
const NON_REPLAYABLE: &str =
    "UPDATE trajectories SET state = 'non_replayable', non_replayable_json = $1 WHERE study = $2 AND id = $3";

/// Drop the requested continuations of trajectory `$2` of study `$1`.
const DROP_CONTINUATIONS: &str = "UPDATE continuations SET state = 'dropped', worker = NULL, lease_expires_ms = NULL \
     WHERE study = $1 AND trajectory = $2 AND state IN ('pending', 'leased')";

/// A no-outcome of a job of `{table}` (`{key}`, `$1 … $5`): state `$6`, no-outcomes `$7`, reason `$8`, done at `$9` (when retired).
const NO_OUTCOME: &str = "UPDATE {table} SET state = $6, no_outcomes = $7, last_reason = $8, worker = NULL, \
     lease_expires_ms = NULL, done_ms = $9 WHERE {key}";

impl SqlStore {
    /// Lock a trajectory's row (reports of one trajectory replan one after the other); its plan,
    /// counters and timed sums.
    pub(super) async fn lock_trajectory(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<Option<(TrajectoryPlan, Locked)>, StoreError> {
        let sql = dispatch::lock_trajectory(self.for_update());
        let Some(row) =
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).bind(trajectory).fetch_optional(&mut **tx).await?
        else {
            return Ok(None);
        };
        let plan = serde_json::from_str(&row.try_get::<String, _>("plan_json")?).map_err(corrupt)?;
        Ok(Some((plan, (Counters::of(&row)?, super::replan::timed_of(&row)?))))
    }

    /// A trajectory's task and payload digest. A trajectory stored before the `task` column
    /// takes its task from the spec.
    pub(super) async fn task_of(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
    ) -> Result<(String, Option<String>), StoreError> {
        let row = sqlx::query(TASK_OF).bind(study).bind(trajectory).fetch_one(&mut **tx).await?;
        let payload: Option<String> = row.try_get("payload_digest")?;
        if let Some(task) = row.try_get::<Option<String>, _>("task")? {
            return Ok((task, payload));
        }
        let spec: String = sqlx::query(SPEC_OF).bind(study).fetch_one(&mut **tx).await?.try_get("spec_json")?;
        let spec: StudySpec = serde_json::from_str(&spec).map_err(corrupt)?;
        let task = spec.trajectories.iter().find(|t| t.id == trajectory).map(|t| t.task.clone());
        Ok((task.unwrap_or_else(|| trajectory.to_string()), payload))
    }

    /// Whether a job row may take a report for `attempt`: `Err` carries why not.
    pub(super) fn check_attempt(row: &AnyRow, attempt: u32) -> Result<Result<(), String>, StoreError> {
        let state: String = row.try_get("state")?;
        let current = get_u32(row, "attempt")?;
        Ok(match state.as_str() {
            "done" | "retired" => Err("the key already has an outcome".into()),
            "dropped" => Err("the trajectory was dropped as non-replayable".into()),
            "leased" if current == attempt => Ok(()),
            _ => Err(format!("attempt {attempt} is stale (current attempt {current}, {state})")),
        })
    }

    /// Record a no-outcome of a job of either table: the key is run again, or retired once it has
    /// had as many no-outcomes as the study allows — at once for a run the study's wall-clock cap
    /// stopped ([`JobReport::Capped`]: the cap would censor it again), its reason marking it
    /// capped for the counts. Returns whether it was retired, and how many no-outcomes it has had.
    pub(super) async fn no_outcome(
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        row: &AnyRow,
        report: (&str, bool),
        config: &StudyConfig,
        now: i64,
    ) -> Result<(bool, u32), StoreError> {
        let (reason, capped) = report;
        let no_outcomes = get_u32(row, "no_outcomes")? + 1;
        let retired = capped || no_outcomes >= config.params.retries_before_retired;
        keyed(NO_OUTCOME, key)
            .bind(if retired { "retired" } else { "pending" })
            .bind(i64::from(no_outcomes))
            .bind(reason)
            .bind(if retired { Some(now) } else { None })
            .execute(&mut **tx)
            .await?;
        Ok((retired, no_outcomes))
    }

    pub(super) async fn report_continuation(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &ContinuationKey,
        attempt: u32,
        report: &JobReport,
        now: i64,
    ) -> Result<Reported, StoreError> {
        let Some((plan, (counters, mut timed))) = self.lock_trajectory(tx, &key.study, &key.trajectory).await? else {
            return Ok(Reported::ignored("unknown key"));
        };
        let k = Key { series: key.series, t: key.t, seed: key.seed };
        let mut rechecks = false;
        // The outcome this report records, if any: the replan's `fresh`.
        let (config, fresh) = match report {
            JobReport::Outcome(o) => {
                // The update checks the attempt itself; only a report it does not take reads the
                // row, to say why.
                let completed = bind_key(sqlx::query(dispatch::COMPLETE), key)
                    .bind(i64::from(o.success))
                    .bind(i64::from(o.steps))
                    .bind(o.end_type.as_str())
                    .bind(o.patch_sha256.as_str())
                    .bind(o.judged.as_str())
                    .bind(now)
                    .bind(i64::from(attempt))
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some(completed) = completed else {
                    let job = JobKey::Continuation(key.clone());
                    return Ok(match self.current_row(tx, &job, attempt).await? {
                        Err(ignored) => ignored,
                        Ok(_) => Reported::ignored(format!("attempt {attempt} could not be recorded")),
                    });
                };
                let config = self.config(tx, &key.study).await?;
                // How long it ran, for the duration estimates (a row leased before they were
                // kept has no lease time): the replan stores the sums.
                if let Some(leased_ms) = completed.try_get::<Option<i64>, _>("leased_ms")? {
                    timed = timed.plus(now - leased_ms, i64::from(key.series.budget(config.budget, key.t)));
                }
                if config.runner.runs_containers() {
                    let (task, payload) = self.task_of(tx, &key.study, &key.trajectory).await?;
                    let run = verdicts::RunOf { study: &key.study, task: &task, payload: payload.as_deref() };
                    rechecks = self.judge_run(tx, &config, run, o, now).await?;
                }
                (config, Some((k, if o.success { Outcome::Success } else { Outcome::Failure })))
            }
            JobReport::NoOutcome { reason } | JobReport::Capped { reason } => {
                let job = JobKey::Continuation(key.clone());
                let row = match self.current_row(tx, &job, attempt).await? {
                    Ok(row) => row,
                    Err(ignored) => return Ok(ignored),
                };
                let config = self.config(tx, &key.study).await?;
                let capped = matches!(report, JobReport::Capped { .. });
                let (retired, _) = Self::no_outcome(tx, &job, &row, (reason, capped), &config, now).await?;
                (config, retired.then_some((k, Outcome::Retired)))
            }
            JobReport::NonReplayable(why) => {
                if let Err(ignored) = self.current_row(tx, &JobKey::Continuation(key.clone()), attempt).await? {
                    return Ok(ignored);
                }
                self.drop_non_replayable(tx, &key.study, &key.trajectory, why, now).await?;
                // The study may be over, or another trajectory admitted.
                return Ok(Reported::accepted(true));
            }
            JobReport::Replayed(_)
            | JobReport::Evaluated { .. }
            | JobReport::SessionRecorded { .. }
            | JobReport::CallAnswered { .. } => unreachable!("checked by JobReport::fits"),
        };
        // A no-outcome puts its key back, a re-check is new work: either wakes a waiting worker.
        let mut wakes = matches!(report, JobReport::NoOutcome { .. }) || rechecks;
        if fresh.is_some() {
            let (created, finished) = self
                .replan(tx, &config, (&key.study, &key.trajectory, &plan), Some((counters, timed)), fresh, now)
                .await?;
            wakes |= created > 0 || finished;
        }
        Ok(Reported::accepted(wakes))
    }

    /// A job's row (of either table) for a report of `attempt`, locked on PostgreSQL (state,
    /// attempt and no-outcomes), or the report ignored with why: an unknown key, or not that
    /// attempt's lease.
    pub(super) async fn current_row(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        attempt: u32,
    ) -> Result<Result<AnyRow, Reported>, StoreError> {
        let sql = format!("SELECT state, attempt, no_outcomes FROM {{table}} WHERE {{key}}{}", self.for_update());
        let Some(row) = keyed(&sql, key).fetch_optional(&mut **tx).await? else {
            return Ok(Err(Reported::ignored("unknown key")));
        };
        Ok(Self::check_attempt(&row, attempt)?.map(|()| row).map_err(Reported::ignored))
    }

    pub(super) async fn report_job(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        attempt: u32,
        report: &JobReport,
        now: i64,
    ) -> Result<Reported, StoreError> {
        let study = key.study();
        let locked = match key {
            JobKey::Replay { trajectory, .. } => match self.lock_trajectory(tx, study, trajectory).await? {
                Some(locked) => Some(locked),
                None => return Ok(Reported::ignored("unknown key")),
            },
            _ => None,
        };
        let row = match self.current_row(tx, key, attempt).await? {
            Ok(row) => row,
            Err(ignored) => return Ok(ignored),
        };
        let config = self.config(tx, study).await?;
        if let JobReport::NoOutcome { reason } | JobReport::Capped { reason } = report {
            let capped = matches!(report, JobReport::Capped { .. });
            let (retired, no_outcomes) = Self::no_outcome(tx, key, &row, (reason, capped), &config, now).await?;
            if retired && let JobKey::BaseRun { task, .. } = key {
                self.take_base_runs(tx, &config, study, task, now).await?;
                self.finish_if_done(tx, study, now).await?;
            } else if retired && let JobKey::Replay { trajectory, .. } = key {
                // No replay could be carried out: no state is known to match the record, so no
                // continuation may run from it.
                let why = NonReplayable::no_outcome(format!(
                    "the replay had no outcome in {no_outcomes} attempts (last: {reason})"
                ));
                self.drop_non_replayable(tx, study, trajectory, &why, now).await?;
            } else if retired {
                if super::judge_labels::is_label_call(key) {
                    self.label_ended(tx, &config, key, None, now).await?;
                }
                self.finish_if_done(tx, study, now).await?;
            }
            return Ok(Reported::accepted(true));
        }
        bind_job(sqlx::query(JOB_DONE), key)
            .bind(serde_json::to_string(report).map_err(corrupt)?)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        match (key, report) {
            (JobKey::Replay { trajectory, .. }, JobReport::Replayed(replayed)) => {
                sqlx::query(REPLAYED)
                    .bind(serde_json::to_string(replayed).map_err(corrupt)?)
                    .bind(study)
                    .bind(trajectory)
                    .execute(&mut **tx)
                    .await?;
                let (plan, locked) = locked.expect("locked above");
                self.replan(tx, &config, (study, trajectory, &plan), Some(locked), None, now).await?;
                Ok(Reported::accepted(true))
            }
            (JobKey::Replay { trajectory, .. }, JobReport::NonReplayable(why)) => {
                self.drop_non_replayable(tx, study, trajectory, why, now).await?;
                Ok(Reported::accepted(true))
            }
            (JobKey::BaseRun { task: subject, .. }, JobReport::Outcome(o)) => {
                let mut wakes = false;
                if config.runner.runs_containers() {
                    let payload = self.job_payload(tx, key).await?;
                    let (task, _) = config.base_run_of(subject);
                    let run = verdicts::RunOf { study, task, payload: payload.as_deref() };
                    wakes |= self.judge_run(tx, &config, run, o, now).await?;
                }
                wakes |= self.take_base_runs(tx, &config, study, subject, now).await? > 0;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(wakes))
            }
            (JobKey::Session { .. }, JobReport::SessionRecorded { recorded }) => {
                let settings =
                    config.task_state.as_ref().ok_or_else(|| corrupt("a session of a study without task_state"))?;
                let wakes = self.session_recorded(tx, settings, key, recorded, now).await?;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(wakes))
            }
            (JobKey::ModelCall { .. }, JobReport::CallAnswered { output })
                if super::judge_labels::is_label_call(key) =>
            {
                let wakes = self.label_ended(tx, &config, key, Some(output), now).await?;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(wakes))
            }
            (JobKey::ModelCall { .. }, JobReport::CallAnswered { output }) => {
                let settings =
                    config.task_state.as_ref().ok_or_else(|| corrupt("a model call of a study without task_state"))?;
                let wakes = self.call_answered(tx, settings, key, output, now).await?;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(wakes))
            }
            (JobKey::Evaluation { task, patch_sha256, .. }, JobReport::Evaluated { resolved }) => {
                self.add_evaluation(tx, study, task, patch_sha256, *resolved, true).await?;
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(false))
            }
            _ => {
                self.finish_if_done(tx, study, now).await?;
                Ok(Reported::accepted(false))
            }
        }
    }

    /// Drop a trajectory whose state differs from the record: it becomes non-replayable with the
    /// reason, its requested continuations are dropped (leased ones are revoked at the next
    /// heartbeat), and the study ends if it was the last one open.
    pub(super) async fn drop_non_replayable(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
        why: &NonReplayable,
        now: i64,
    ) -> Result<(), StoreError> {
        tracing::warn!(study, trajectory, step = why.step, level = why.level.as_str(), reason = %why.reason, "trajectory is non-replayable");
        sqlx::query(NON_REPLAYABLE)
            .bind(serde_json::to_string(why).map_err(corrupt)?)
            .bind(study)
            .bind(trajectory)
            .execute(&mut **tx)
            .await?;
        let dropped =
            sqlx::query(DROP_CONTINUATIONS).bind(study).bind(trajectory).execute(&mut **tx).await?.rows_affected();
        self.count(tx, study, trajectory, "n_dropped", dropped).await?;
        self.back_fill(tx, study, trajectory, now).await?;
        self.finish_if_done(tx, study, now).await
    }
}

pub(super) async fn report(
    store: &SqlStore,
    worker: &str,
    job: &HeldJob,
    report: &JobReport,
    now: i64,
) -> Result<Reported, StoreError> {
    if !report.fits(job.key.kind()) {
        return Err(StoreError::Invalid(format!("a {} job cannot report {report:?}", job.key.kind().as_str())));
    }
    let mut tx = store.pool.begin().await?;
    let reported = match &job.key {
        JobKey::Continuation(key) => store.report_continuation(&mut tx, key, job.attempt, report, now).await?,
        other => store.report_job(&mut tx, other, job.attempt, report, now).await?,
    };
    if reported.verdict == ReportVerdict::Accepted {
        tracing::debug!(worker, key = %job.key, attempt = job.attempt, "report recorded");
        tx.commit().await?;
    }
    Ok(reported)
}
