//! Reading a study for its export one trajectory at a time ([`Store::study_parts`]), so that
//! neither the store's rows nor the study's outcomes are ever all in memory at once: the memory an
//! export takes grows with the study's largest trajectory, not with its continuations.
//!
//! [`Store::study`] and [`Store::trajectory`] collect the same parts into a [`StudyRecord`].
//!
//! [`Store::study_parts`]: crate::store::Store::study_parts
//! [`Store::study`]: crate::store::Store::study
//! [`Store::trajectory`]: crate::store::Store::trajectory

use futures::TryStreamExt as _;
use sqlx::{Any, Row, Transaction};
use tokio::sync::mpsc;
use vcurve_method::schedule::Stage;
use vcurve_record::jobs::{NonReplayable, Replayed};

use super::handle::SqlStore;
use super::rows::{corrupt, get_u32, json_column, outcome_of, series_of, stage_of};
use crate::model::{JobReport, StudyRecord, StudyState, TrajectoryRecord, TrajectoryState};
use crate::spec::StudySpec;
use crate::store::api::{StoreError, StudyPart};

/// A trajectory's row, before its outcomes are read.
struct TrajectoryRow {
    id: String,
    state: TrajectoryState,
    stage: Stage,
    plan: vcurve_method::schedule::TrajectoryPlan,
    non_replayable: Option<NonReplayable>,
    replay: Option<Replayed>,
}

impl SqlStore {
    /// Send a study's parts into `parts` in one transaction: its head (every field of the record
    /// but the trajectories), then each trajectory with its outcomes in processing order; only
    /// trajectory `only` when given (the head's spec lists only it too). Returns early, without an
    /// error, once the receiver is gone.
    pub(super) async fn send_study(
        &self,
        study: &str,
        only: Option<&str>,
        parts: &mpsc::Sender<StudyPart>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let head = self.study_head(&mut tx, study, only).await?;
        if parts.send(StudyPart::Head(Box::new(head))).await.is_err() {
            return Ok(());
        }
        let mut rows = Vec::new();
        {
            let mut stream = sqlx::query(
                "SELECT id, state, stage, plan_json, replay_json, non_replayable_json FROM trajectories \
                 WHERE study = $1 AND (CAST($2 AS TEXT) IS NULL OR id = $2) ORDER BY ord",
            )
            .bind(study)
            .bind(only)
            .fetch(&mut *tx);
            while let Some(r) = stream.try_next().await? {
                rows.push(TrajectoryRow {
                    id: r.try_get("id")?,
                    state: TrajectoryState::parse(&r.try_get::<String, _>("state")?)
                        .ok_or_else(|| corrupt("trajectory state"))?,
                    stage: stage_of(&r.try_get::<String, _>("stage")?)?,
                    plan: serde_json::from_str(&r.try_get::<String, _>("plan_json")?).map_err(corrupt)?,
                    non_replayable: json_column::<NonReplayable>(&r, "non_replayable_json")?,
                    replay: json_column::<Replayed>(&r, "replay_json")?,
                });
            }
        }
        for row in rows {
            let record = Self::trajectory_outcomes(&mut tx, study, row).await?;
            if parts.send(StudyPart::Trajectory(Box::new(record))).await.is_err() {
                return Ok(());
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// A trajectory's record with its outcomes (read as a stream, in key order).
    async fn trajectory_outcomes(
        tx: &mut Transaction<'_, Any>,
        study: &str,
        row: TrajectoryRow,
    ) -> Result<TrajectoryRecord, StoreError> {
        let mut outcomes = Vec::new();
        let mut cap_hits = 0;
        let mut stream = sqlx::query(
            "SELECT series, t, seed, state, success, end_type FROM continuations \
             WHERE study = $1 AND trajectory = $2 AND state IN ('done', 'retired') ORDER BY series, t, seed",
        )
        .bind(study)
        .bind(&row.id)
        .fetch(&mut **tx);
        while let Some(r) = stream.try_next().await? {
            if r.try_get::<Option<String>, _>("end_type")?.as_deref() == Some("step_cap") {
                cap_hits += 1;
            }
            outcomes.push((
                series_of(&r.try_get::<String, _>("series")?)?,
                get_u32(&r, "t")?,
                get_u32(&r, "seed")?,
                outcome_of(&r)?,
            ));
        }
        Ok(TrajectoryRecord {
            id: row.id,
            state: row.state,
            stage: row.stage,
            plan: row.plan,
            outcomes,
            cap_hits,
            non_replayable: row.non_replayable,
            replay: row.replay,
        })
    }

    /// A study's record without its trajectories: state, spec (only trajectory `only`'s when
    /// given), evaluation, base runs, selection and retired jobs.
    async fn study_head(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        only: Option<&str>,
    ) -> Result<StudyRecord, StoreError> {
        let row = sqlx::query("SELECT state, spec_json, selection_json FROM studies WHERE id = $1")
            .bind(study)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.into()))?;
        let state = StudyState::parse(&row.try_get::<String, _>("state")?).ok_or_else(|| corrupt("study state"))?;
        let selection = json_column::<vcurve_method::selection::Selection>(&row, "selection_json")?;
        let mut spec: StudySpec = serde_json::from_str(&row.try_get::<String, _>("spec_json")?).map_err(corrupt)?;
        if let Some(only) = only {
            spec.trajectories.retain(|t| t.id == only);
        }
        // The judges' labels join the spec's, each under its judge's name (docs/spec.md, "Judge
        // labels"): what reads a trajectory's or a decoy's labels reads both alike. Their calls'
        // logs are the export's `calls.csv`.
        let mut calls = Vec::new();
        if !spec.judges.is_empty() {
            let mut labels = self.judge_labels(tx, study, only).await?;
            for t in &mut spec.trajectories {
                t.labels.extend(labels.trajectories.remove(&t.id).unwrap_or_default());
            }
            for d in &mut spec.decoys {
                d.labels.extend(labels.decoys.remove(&d.id).unwrap_or_default());
            }
            calls = labels.calls;
        }
        let mut evaluation = self.verdict_totals(&mut **tx, study).await?;
        evaluation.empty_patches = sqlx::query(
            "SELECT COUNT(*) AS n FROM continuations WHERE study = $1 AND state = 'done' AND judged = 'empty_patch'",
        )
        .bind(study)
        .fetch_one(&mut **tx)
        .await?
        .try_get::<i64, _>("n")?
        .max(0) as u64;
        // Base runs go through the patch cache too; their outcomes are in their jobs' results.
        let mut base_runs = Vec::new();
        let mut stream = sqlx::query(
            "SELECT subject, seq, result_json FROM jobs WHERE study = $1 AND kind = 'base_run' AND state = 'done' \
             ORDER BY subject, seq",
        )
        .bind(study)
        .fetch(&mut **tx);
        while let Some(r) = stream.try_next().await? {
            if let Some(JobReport::Outcome(o)) = json_column::<JobReport>(&r, "result_json")? {
                base_runs.push(vcurve_record::BaseRunRecord {
                    subject: r.try_get("subject")?,
                    seed: get_u32(&r, "seq")?,
                    success: o.success,
                    steps: o.steps,
                    end_type: o.end_type,
                });
                evaluation.base_run_outcomes += 1;
                if o.judged == vcurve_record::jobs::Judged::EmptyPatch {
                    evaluation.empty_patches += 1;
                }
            }
        }
        drop(stream);
        let retired = super::retired::retired_jobs(tx, study).await?;
        Ok(StudyRecord {
            id: study.to_string(),
            state,
            spec,
            trajectories: Vec::new(),
            evaluation,
            base_runs,
            selection,
            retired,
            calls,
        })
    }

    /// A study's spec, trajectories and outcomes — all of them, or only trajectory `only` (then
    /// the spec lists only that trajectory too): [`SqlStore::send_study`]'s parts collected.
    pub(super) async fn collect_study(&self, study: &str, only: Option<&str>) -> Result<StudyRecord, StoreError> {
        let (sender, mut receiver) = mpsc::channel(64);
        let read = async move { self.send_study(study, only, &sender).await };
        let collect = async {
            let mut record = None;
            while let Some(part) = receiver.recv().await {
                match part {
                    StudyPart::Head(head) => record = Some(*head),
                    StudyPart::Trajectory(t) => {
                        if let Some(r) = record.as_mut() {
                            r.trajectories.push(*t);
                        }
                    }
                }
            }
            record
        };
        let (read, record) = tokio::join!(read, collect);
        read?;
        record.ok_or_else(|| corrupt(format!("study {study:?} was read without its head")))
    }
}
