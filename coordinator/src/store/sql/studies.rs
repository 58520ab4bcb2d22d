//! Studies: stored with their trajectories and base runs, listed, cancelled, ended.

use std::collections::BTreeMap;

use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::TrajectoryPlan;
use vcurve_record::{Digest, StudyId, TrajectoryPayload};

use super::base_runs;
use super::files::{drop_uploads, insert_file, keep_upload};
use super::handle::{SqlStore, StudyConfig};
use super::rows::corrupt;
use crate::model::{StudyState, TrajectoryState};
use crate::planner;
use crate::spec::StudySpec;
use crate::store::api::{LaunchInputs, StoreError};

/// How many trajectories of study `$1` are open (waiting, replaying, running) and jobs still to run.
const OPEN_IN_STUDY: &str = "SELECT (SELECT COUNT(*) FROM trajectories WHERE study = $1 AND state IN ('waiting', 'replaying', 'running')) \
     + (SELECT COUNT(*) FROM jobs WHERE study = $1 AND state IN ('pending', 'leased')) AS n";

/// Study `$1`'s row, read to lock it (with the backend's `FOR NO KEY UPDATE`) before its open
/// work is counted.
const STUDY_ROW: &str = "SELECT id FROM studies WHERE id = $1";

/// Mark the running study `$2` done at `$1`.
const END_RUNNING_STUDY: &str =
    "UPDATE studies SET state = 'done', finished_ms = $1 WHERE id = $2 AND state = 'running'";

/// A new running study: `$1` id, `$2` name, `$3` spec, `$4` config, `$5` the capability its
/// runner needs (`RunnerSpec::capability`: the kind, or `agent:NAME`), `$6` now.
const INSERT_STUDY: &str = "INSERT INTO studies (id, name, spec_json, config_json, runner_kind, state, created_ms, controls_at_launch) \
     VALUES ($1, $2, $3, $4, $5, 'running', $6, 1)";

/// A new trajectory of study `$1`: `$2` id, `$3` order, `$4` state, `$5` plan, `$6` payload digest, `$7` recorded digest, `$8` task.
const INSERT_TRAJECTORY: &str = "INSERT INTO trajectories (study, id, ord, state, stage, stage_rank, plan_json, payload_digest, \
     recorded_digest, task) VALUES ($1, $2, $3, $4, 'screen', 0, $5, $6, $7, $8)";

/// Mark the study `$2` done at `$1` (all its trajectories are doomed).
const END_STUDY: &str = "UPDATE studies SET state = 'done', finished_ms = $1 WHERE id = $2";

/// Every study, newest first.
const LIST_STUDIES: &str = "SELECT id, name, state FROM studies ORDER BY created_ms DESC, id";

/// The finished studies whose spec names a restart check, newest first.
const DONE_RESTART_CHECKS: &str = "SELECT id, spec_json FROM studies WHERE state = 'done' AND spec_json LIKE '%\"restart_check\"%' \
     ORDER BY created_ms DESC, id";

/// Cancel the running study `$2` at `$1`.
const CANCEL_STUDY: &str =
    "UPDATE studies SET state = 'cancelled', finished_ms = $1 WHERE id = $2 AND state = 'running'";

/// The state of study `$1`.
const STUDY_STATE: &str = "SELECT state FROM studies WHERE id = $1";

impl SqlStore {
    /// Mark a study done once none of its trajectories is waiting, replaying or running and none
    /// of its jobs is still to run.
    ///
    /// On PostgreSQL the study's row is locked first. Two reports that end a study's last two
    /// pieces of work in concurrent transactions would otherwise each count the other's as still
    /// open (neither has committed) and neither would end the study. With the lock, the second
    /// to take it counts after the first has committed (READ COMMITTED takes a new snapshot for
    /// each statement), so the last report always sees that nothing is open. SQLite runs one
    /// writer at a time and needs no lock.
    pub(super) async fn finish_if_done(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        let lock = format!("{STUDY_ROW}{}", self.for_no_key_update());
        sqlx::query(sqlx::AssertSqlSafe(lock)).bind(study).fetch_optional(&mut **tx).await?;
        // Open trajectories, and jobs still to run (flake re-checks, base runs).
        let open: i64 = sqlx::query(OPEN_IN_STUDY).bind(study).fetch_one(&mut **tx).await?.try_get("n")?;
        if open == 0 {
            sqlx::query(END_RUNNING_STUDY).bind(now).bind(study).execute(&mut **tx).await?;
        }
        Ok(())
    }
}

pub(super) async fn create_study(
    store: &SqlStore,
    spec: &StudySpec,
    payloads: &[TrajectoryPayload],
    inputs: &LaunchInputs,
    now: i64,
) -> Result<StudyId, StoreError> {
    if payloads.len() != spec.trajectories.len() {
        return Err(StoreError::Invalid(format!(
            "{} payloads for {} trajectories",
            payloads.len(),
            spec.trajectories.len()
        )));
    }
    // Problem statements still in the spec's tasks are taken out here (on a copy of the spec; the
    // coordinator hands them over apart), so that the stored spec never holds one.
    let stripped;
    let (spec, statements) = if spec.tasks.iter().any(|t| t.task.problem_statement.is_some()) {
        let (mut copy, mut statements) = (spec.clone(), inputs.statements.clone());
        for t in &mut copy.tasks {
            if let Some(text) = t.task.problem_statement.take() {
                statements.insert(t.task.id.clone(), text);
            }
        }
        stripped = (copy, statements);
        (&stripped.0, &stripped.1)
    } else {
        (spec, &inputs.statements)
    };
    let id = uuid::Uuid::new_v4().to_string();
    let mut tx = store.pool.begin().await?;
    // Each statement once, as a file under its digest: the digest its `problem_statement_file` was
    // uploaded under, so a statement an earlier launch stored is neither uploaded nor stored again.
    let mut problem_statements = BTreeMap::new();
    for (task, text) in statements {
        let digest = Digest::of(text.as_bytes());
        insert_file(&mut tx, &digest, text.as_bytes(), now).await?;
        problem_statements.insert(task.clone(), digest.into_string());
    }
    for (task, digest) in &inputs.uploaded_statements {
        keep_upload(&mut tx, digest, now).await?;
        problem_statements.insert(task.clone(), digest.to_string());
    }
    // A restart check runs the checked study's tasks, whose statements are stored already.
    if let Some(check) = &spec.restart_check {
        let checked = store.config(&mut tx, &check.of).await?;
        for t in &spec.tasks {
            if let Some(digest) = checked.problem_statements.get(&t.task.id) {
                problem_statements.entry(t.task.id.clone()).or_insert_with(|| digest.clone());
            }
        }
    }
    let config = StudyConfig {
        params: spec.thresholds.clone(),
        schedule: spec.schedule.clone(),
        budget: spec.budget,
        seed: spec.seed,
        runner: spec.runner.clone(),
        controls: spec.controls,
        admission: spec.admission,
        base_run_subjects: base_runs::base_run_subjects(spec),
        problem_statements,
        task_state: spec.task_state.clone(),
        judges: spec.judges.keys().cloned().collect(),
    };
    sqlx::query(INSERT_STUDY)
        .bind(&id)
        .bind(&spec.name)
        .bind(serde_json::to_string(spec).map_err(corrupt)?)
        .bind(serde_json::to_string(&config).map_err(corrupt)?)
        .bind(spec.runner.capability())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    let doomed: Vec<bool> = spec
        .trajectories
        .iter()
        .map(|t| {
            t.base_runs.pass_rate().is_some_and(|p| vcurve_method::meets_at_most(p, spec.thresholds.doomed_threshold))
        })
        .collect();
    // Which trajectories carry which control is decided here, once, from the spec alone.
    let controls = planner::controls_at_launch(&doomed, &spec.controls);
    for (ord, (trajectory, payload)) in spec.trajectories.iter().zip(payloads).enumerate() {
        let plan = TrajectoryPlan {
            length: trajectory.length,
            labels: trajectory.labels.iter().filter_map(|l| l.step).collect(),
            controls: controls[ord],
        };
        let doomed = doomed[ord];
        let state = if doomed { TrajectoryState::Doomed } else { TrajectoryState::Waiting };
        let bytes = payload.canonical_bytes();
        let digest = Digest::of(&bytes);
        insert_file(&mut tx, &digest, &bytes, now).await?;
        // The recorded run under its own digest too (the spec's `recorded`), for what reads
        // it without its payload: a restart check takes the run's task from it.
        if let Some(run) = &payload.recorded {
            let bytes = run.canonical_bytes();
            insert_file(&mut tx, &Digest::of(&bytes), &bytes, now).await?;
        }
        sqlx::query(INSERT_TRAJECTORY)
            .bind(&id)
            .bind(&trajectory.id)
            .bind(ord as i64)
            .bind(state.as_str())
            .bind(serde_json::to_string(&plan).map_err(corrupt)?)
            .bind(digest.as_str())
            .bind(trajectory.recorded.as_deref())
            .bind(&trajectory.task)
            .execute(&mut *tx)
            .await?;
    }
    match &spec.task_state {
        Some(settings) => store.queue_sessions(&mut tx, &id, spec, settings, &config.problem_statements, now).await?,
        None => store.queue_base_runs(&mut tx, &id, spec, &config.problem_statements, now).await?,
    }
    if !spec.judges.is_empty() {
        store.queue_labels(&mut tx, &id, spec, payloads, &inputs.decoy_runs, now).await?;
    }
    drop_uploads(&mut tx, &inputs.uploads).await?;
    if doomed.iter().all(|&d| d) && spec.tasks.is_empty() {
        sqlx::query(END_STUDY).bind(now).bind(&id).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(StudyId::new(id))
}

pub(super) async fn list_studies(store: &SqlStore) -> Result<Vec<(StudyId, String, StudyState)>, StoreError> {
    sqlx::query(LIST_STUDIES)
        .fetch_all(&store.pool)
        .await?
        .iter()
        .map(|r| {
            let state = StudyState::parse(&r.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))?;
            Ok((StudyId::new(r.try_get::<String, _>("id")?), r.try_get("name")?, state))
        })
        .collect()
}

pub(super) async fn restart_checks_of(store: &SqlStore, study: &str) -> Result<Vec<StudyId>, StoreError> {
    let rows = sqlx::query(DONE_RESTART_CHECKS).fetch_all(&store.pool).await?;
    let mut checks = Vec::new();
    for r in &rows {
        let spec: StudySpec = serde_json::from_str(&r.try_get::<String, _>("spec_json")?).map_err(corrupt)?;
        if spec.restart_check.is_some_and(|c| c.of == study) {
            checks.push(StudyId::new(r.try_get::<String, _>("id")?));
        }
    }
    Ok(checks)
}

pub(super) async fn cancel(store: &SqlStore, study: &str, now: i64) -> Result<StudyState, StoreError> {
    let mut tx = store.pool.begin().await?;
    sqlx::query(CANCEL_STUDY).bind(now).bind(study).execute(&mut *tx).await?;
    let row = sqlx::query(STUDY_STATE)
        .bind(study)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::UnknownStudy(study.into()))?;
    tx.commit().await?;
    StudyState::parse(&row.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))
}
