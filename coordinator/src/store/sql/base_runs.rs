//! Base runs (SPEC.md §7): a study that lists `tasks` makes `base_runs` full runs of each from
//! `h_0`; once every base run of a task has finished, each failed one whose recorded trajectory
//! the worker uploaded becomes a trajectory of the study (`{task}-base{seed}`), with `R̂(x, b)`
//! from the task's base runs. Selection by band and strata is not made here: every failed base
//! run is taken.

use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::TrajectoryPlan;
use vcurve_method::{BaseRun, BaseRuns};
use vcurve_record::jobs::{JobKey, JobReport};
use vcurve_record::{Trajectory, TrajectoryPayload, TrajectorySpec, TrajectoryState};

use super::{SqlStore, StudyConfig, corrupt, insert_file, insert_job, set_job_payload};
use crate::planner;
use crate::spec::StudySpec;
use crate::store::StoreError;

/// The id of the trajectory a failed base run becomes.
pub fn base_run_trajectory_id(task: &str, seed: u32) -> String {
    format!("{task}-base{seed}")
}

impl SqlStore {
    /// Queue a launched study's base runs, each naming its task's payload.
    pub(super) async fn queue_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        spec: &StudySpec,
        now: i64,
    ) -> Result<(), StoreError> {
        for runs in &spec.tasks {
            let payload = TrajectoryPayload::of_task(&runs.task);
            let bytes = payload.canonical_bytes();
            let digest = vcurve_record::trajectory::sha256_hex(&bytes);
            insert_file(tx, &digest, &bytes, now).await?;
            for seed in 0..runs.base_runs {
                let key = JobKey::BaseRun { study: study.to_string(), task: runs.task.id.clone(), seed };
                insert_job(tx, &key, now).await?;
                set_job_payload(tx, &key, Some(&digest)).await?;
            }
        }
        Ok(())
    }

    /// The payload a job of `jobs` names.
    pub(super) async fn job_payload(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
    ) -> Result<Option<String>, StoreError> {
        let row = super::bind_job(sqlx::query(concat!("SELECT payload_digest FROM jobs WHERE ", job_is!())), key)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(row.map(|r| r.try_get::<Option<String>, _>("payload_digest")).transpose()?.flatten())
    }

    /// Once every base run of `task` has finished (with an outcome or retired), make each failed
    /// one with a recorded run a trajectory of the study. Returns how many were made.
    pub(super) async fn take_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        study: &str,
        task: &str,
        now: i64,
    ) -> Result<u32, StoreError> {
        // The study's row serializes the last two base runs of a task finishing at once: the one
        // that locks second sees the other's finish and takes them.
        let sql = format!("SELECT spec_json FROM studies WHERE id = $1{}", self.for_update());
        let spec_json: String =
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).fetch_one(&mut **tx).await?.try_get("spec_json")?;
        let rows = sqlx::query(
            "SELECT seq, state, result_json FROM jobs WHERE study = $1 AND kind = 'base_run' AND subject = $2 \
             ORDER BY seq",
        )
        .bind(study)
        .bind(task)
        .fetch_all(&mut **tx)
        .await?;
        let mut runs = Vec::new();
        for r in &rows {
            let state: String = r.try_get("state")?;
            if state == "pending" || state == "leased" {
                return Ok(0);
            }
            if state != "done" {
                continue;
            }
            let seed = super::get_u32(r, "seq")?;
            if let Some(JobReport::Outcome(o)) = super::json_column::<JobReport>(r, "result_json")? {
                runs.push((seed, o));
            }
        }
        let mut spec: StudySpec = serde_json::from_str(&spec_json).map_err(corrupt)?;
        let base_runs = BaseRuns(runs.iter().map(|(_, o)| BaseRun { success: o.success, steps: o.steps }).collect());
        let doomed =
            base_runs.pass_rate().is_some_and(|p| vcurve_method::meets_at_most(p, config.params.doomed_threshold));
        let mut ord: i64 = sqlx::query("SELECT COALESCE(MAX(ord) + 1, 0) AS n FROM trajectories WHERE study = $1")
            .bind(study)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
        let mut rank: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM trajectories WHERE study = $1 AND state <> 'doomed'")
                .bind(study)
                .fetch_one(&mut **tx)
                .await?
                .try_get("n")?;
        let mut made = 0;
        for (seed, outcome) in runs.iter().filter(|(_, o)| !o.success) {
            let id = base_run_trajectory_id(task, *seed);
            if spec.trajectories.iter().any(|t| t.id == id) {
                continue;
            }
            let Some(digest) = &outcome.recorded else {
                tracing::warn!(study, task, seed, "a failed base run without a recorded run cannot be a trajectory");
                continue;
            };
            let Some(bytes) = self.file_in(tx, digest).await? else {
                tracing::warn!(study, task, seed, digest, "the recorded run of a failed base run was not uploaded");
                continue;
            };
            let recorded = match Trajectory::from_json(&bytes) {
                Ok(t) if t.length() > 0 => t,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(study, task, seed, error = %e, "a failed base run's recorded run is not valid");
                    continue;
                }
            };
            let length = recorded.length();
            let payload = TrajectoryPayload {
                task: task.to_string(),
                length,
                curve: None,
                recorded: Some(recorded),
                task_def: None,
            };
            let bytes = payload.canonical_bytes();
            let payload_digest = vcurve_record::trajectory::sha256_hex(&bytes);
            insert_file(tx, &payload_digest, &bytes, now).await?;
            let controls =
                if doomed { Default::default() } else { planner::controls_for(rank as u32, &config.controls) };
            let plan = TrajectoryPlan { length, labels: Vec::new(), controls };
            let state = if doomed { TrajectoryState::Doomed } else { TrajectoryState::Waiting };
            sqlx::query(
                "INSERT INTO trajectories (study, id, ord, state, stage, stage_rank, plan_json, payload_digest, \
                 recorded_digest, task) VALUES ($1, $2, $3, $4, 'screen', 0, $5, $6, $7, $8)",
            )
            .bind(study)
            .bind(&id)
            .bind(ord)
            .bind(state.as_str())
            .bind(serde_json::to_string(&plan).map_err(corrupt)?)
            .bind(&payload_digest)
            .bind(digest)
            .bind(task)
            .execute(&mut **tx)
            .await?;
            spec.trajectories.push(TrajectorySpec {
                id,
                task: task.to_string(),
                length,
                curve: None,
                labels: Vec::new(),
                base_runs: base_runs.clone(),
                recorded: Some(digest.clone()),
            });
            ord += 1;
            if !doomed {
                rank += 1;
            }
            made += 1;
        }
        if made > 0 {
            sqlx::query("UPDATE studies SET spec_json = $1 WHERE id = $2")
                .bind(serde_json::to_string(&spec).map_err(corrupt)?)
                .bind(study)
                .execute(&mut **tx)
                .await?;
        }
        Ok(made)
    }

    async fn file_in(&self, tx: &mut Transaction<'_, Any>, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row =
            sqlx::query("SELECT content FROM files WHERE digest = $1").bind(digest).fetch_optional(&mut **tx).await?;
        row.map(|r| r.try_get::<Vec<u8>, _>("content").map_err(StoreError::from)).transpose()
    }
}
