//! Base runs (docs/method.md §7): a study that lists `tasks` makes `base_runs` full runs of each from
//! `h_0`. Once every base run of the study has finished, [`vcurve_method::selection::select`]
//! draws the study set from them with the selection seed — the band, the strata, the per-task
//! cap, the decoys — and stores the selection with every choice and its reason; each selected
//! failed run becomes a trajectory (`{task}-base{seed}`) with `R̂(x, b)` from its task's base
//! runs, in the selection's processing order, and the decoys are kept with the spec. A selected
//! trajectory found non-replayable is back-filled from its stratum ([`SqlStore::back_fill`]).
//!
//! A restart check's base runs (Appendix Q) are fresh runs for the rows of another study, with the
//! budget `B − t_r` of their row: they make no trajectory.
//!
//! Studies stored before selection existed (tasks without a selection) keep the earlier rule:
//! every failed base run of a task becomes a trajectory once the task's base runs are in.

use std::collections::BTreeMap;

use sqlx::{Any, Row, Transaction};
use vcurve_method::schedule::{Controls, TrajectoryPlan};
use vcurve_method::selection::{self, BackFill, RunEnd, RunId, SeedRun, Selection};
use vcurve_method::{BaseRun, BaseRuns};
use vcurve_record::jobs::{JobKey, JobReport, NonReplayable, RunOutcome};
use vcurve_record::{DecoySpec, Digest, EndType, Trajectory, TrajectoryPayload, TrajectorySpec, TrajectoryState};

use super::files::{insert_file, read_file};
use super::handle::BaseRunSubject;
use super::handle::{SqlStore, StudyConfig};
use super::jobs::{insert_job, set_job_payload};
use super::rows::{corrupt, count_trajectories};
use crate::planner;
use crate::spec::StudySpec;
use crate::store::api::StoreError;

/// The id of the trajectory a failed base run becomes.
pub fn base_run_trajectory_id(task: &str, seed: u32) -> String {
    RunId::new(task, seed).trajectory_id()
}

/// The subjects of a study's base runs whose task or budget is not the study's own (a restart
/// check's rows, by trajectory id).
pub(super) fn base_run_subjects(spec: &StudySpec) -> BTreeMap<String, BaseRunSubject> {
    let Some(check) = &spec.restart_check else { return BTreeMap::new() };
    check
        .rows
        .iter()
        .map(|r| (r.trajectory.clone(), BaseRunSubject { task: r.task.clone(), budget: r.budget(spec.budget) }))
        .collect()
}

/// How a run ended, as selection sees it.
fn run_end(end: EndType) -> RunEnd {
    match end {
        EndType::Submitted => RunEnd::Submit,
        EndType::StepCap => RunEnd::Cap,
        EndType::CostLimit | EndType::ContextWindow | EndType::FormatError | EndType::Error => RunEnd::Other,
    }
}

/// A base run that finished with an outcome.
struct Finished {
    subject: String,
    seed: u32,
    outcome: RunOutcome,
}

/// Finished base runs by (task, seed), and each task's base runs in seed order.
struct RunIndex<'a> {
    outcomes: BTreeMap<(String, u32), &'a RunOutcome>,
    base_runs: BTreeMap<String, BaseRuns>,
}

impl<'a> RunIndex<'a> {
    fn of(runs: &'a [Finished]) -> RunIndex<'a> {
        let mut base_runs: BTreeMap<String, BaseRuns> = BTreeMap::new();
        for f in runs {
            base_runs
                .entry(f.subject.clone())
                .or_default()
                .0
                .push(BaseRun { success: f.outcome.success, steps: f.outcome.steps });
        }
        RunIndex { outcomes: runs.iter().map(|f| ((f.subject.clone(), f.seed), &f.outcome)).collect(), base_runs }
    }
}

impl SqlStore {
    /// Queue a launched study's base runs, each naming its task's payload: `base_runs` of each
    /// task, or a restart check's `runs` for each of its rows. A task's payload names its problem
    /// statement by the digest in `statements` (task id → digest), stored apart.
    pub(super) async fn queue_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        spec: &StudySpec,
        statements: &BTreeMap<String, String>,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut digests = BTreeMap::new();
        for runs in &spec.tasks {
            let statement = statements.get(&runs.task.id).map(String::as_str);
            let bytes = TrajectoryPayload::of_task_with_statement(&runs.task, statement).canonical_bytes();
            let digest = Digest::of(&bytes);
            insert_file(tx, &digest, &bytes, now).await?;
            digests.insert(runs.task.id.clone(), digest.into_string());
        }
        let queue: Vec<(String, &str, u32)> = match &spec.restart_check {
            Some(check) => check.rows.iter().map(|r| (r.trajectory.clone(), r.task.as_str(), check.runs)).collect(),
            None => spec.tasks.iter().map(|t| (t.task.id.clone(), t.task.id.as_str(), t.base_runs)).collect(),
        };
        for (subject, task, runs) in queue {
            let digest = digests.get(task).ok_or_else(|| {
                StoreError::Invalid(format!("base runs of {subject} name task {task:?}, not in the study"))
            })?;
            for seed in 0..runs {
                let key = JobKey::BaseRun { study: study.to_string(), task: subject.clone(), seed };
                insert_job(tx, &key, now).await?;
                set_job_payload(tx, &key, Some(digest)).await?;
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
        let row = super::rows::bind_job(sqlx::query(concat!("SELECT payload_digest FROM jobs WHERE ", job_is!())), key)
            .fetch_optional(&mut **tx)
            .await?;
        Ok(row.map(|r| r.try_get::<Option<String>, _>("payload_digest")).transpose()?.flatten())
    }

    /// The base runs of `study` (of one subject, or all) with an outcome, in subject and seed
    /// order; `None` while any of them is still pending or leased.
    async fn finished_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        subject: Option<&str>,
    ) -> Result<Option<Vec<Finished>>, StoreError> {
        let rows = sqlx::query(
            "SELECT subject, seq, state, result_json FROM jobs WHERE study = $1 AND kind = 'base_run' \
             AND (CAST($2 AS TEXT) IS NULL OR subject = $2) ORDER BY subject, seq",
        )
        .bind(study)
        .bind(subject)
        .fetch_all(&mut **tx)
        .await?;
        let mut runs = Vec::new();
        for r in &rows {
            let state: String = r.try_get("state")?;
            if state == "pending" || state == "leased" {
                return Ok(None);
            }
            if state != "done" {
                continue;
            }
            if let Some(JobReport::Outcome(outcome)) = super::rows::json_column::<JobReport>(r, "result_json")? {
                runs.push(Finished { subject: r.try_get("subject")?, seed: super::rows::get_u32(r, "seq")?, outcome });
            }
        }
        Ok(Some(runs))
    }

    /// After a base run of `subject` finished (with an outcome or retired): make trajectories of
    /// the study's base runs once they are all in (see the module documentation). Returns how
    /// many were made.
    pub(super) async fn take_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        study: &str,
        subject: &str,
        now: i64,
    ) -> Result<u32, StoreError> {
        // The study's row serializes the last base runs finishing at once: the one that locks
        // last sees every other's finish and takes them.
        let sql = format!("SELECT spec_json, selection_json FROM studies WHERE id = $1{}", self.for_update());
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).fetch_one(&mut **tx).await?;
        let mut spec: StudySpec = serde_json::from_str(&row.try_get::<String, _>("spec_json")?).map_err(corrupt)?;
        if spec.restart_check.is_some() {
            return Ok(0);
        }
        let Some(selection_spec) = spec.selection else {
            return self.take_task_base_runs(tx, config, &mut spec, study, subject, now).await;
        };
        if row.try_get::<Option<String>, _>("selection_json")?.is_some() {
            return Ok(0);
        }
        let Some(runs) = self.finished_base_runs(tx, study, None).await? else { return Ok(0) };
        let mut by_task: BTreeMap<&str, Vec<SeedRun>> =
            spec.tasks.iter().map(|t| (t.task.id.as_str(), Vec::new())).collect();
        for f in &runs {
            let seed_run = SeedRun {
                seed: f.seed,
                success: f.outcome.success,
                steps: f.outcome.steps,
                end: run_end(f.outcome.end_type),
            };
            by_task.entry(f.subject.as_str()).or_default().push(seed_run);
        }
        let tasks: Vec<selection::TaskRuns> =
            by_task.into_iter().map(|(task, runs)| selection::TaskRuns { task: task.to_string(), runs }).collect();
        let mut selection = selection::select(&tasks, &config.params, selection_spec.seed, selection_spec.target)
            .map_err(|e| StoreError::Corrupt(format!("the base runs of study {study} cannot be selected from: {e}")))?;
        let index = RunIndex::of(&runs);
        for decoy in &selection.decoys {
            let id = decoy.id.trajectory_id();
            // With judges, a decoy whose run was recorded is labelled from it like a trajectory;
            // one without a recorded run keeps no labels.
            let mut recorded = None;
            if !spec.judges.is_empty()
                && let Some(outcome) = index.outcomes.get(&(decoy.id.task.clone(), decoy.id.seed)).copied()
                && let Ok((run, digest)) = self.recorded_run(tx, study, &decoy.id, outcome).await?
            {
                self.queue_run_labels(tx, study, &spec.judges, (&id, true), &run, now).await?;
                recorded = Some(digest);
            }
            spec.decoys.push(DecoySpec {
                id,
                task: decoy.id.task.clone(),
                length: decoy.steps,
                labels: Vec::new(),
                recorded,
            });
        }
        let picks: Vec<RunId> = selection.active().map(|p| p.id.clone()).collect();
        let mut made = 0;
        for id in picks {
            let controls = planner::controls_for(self.admissible_count(tx, study).await?, &config.controls);
            made += self.make_pick(tx, &mut spec, &mut selection, study, &id, controls, &index, now).await?;
        }
        tracing::info!(
            study,
            selected = selection.active().count(),
            decoys = selection.decoys.len(),
            "selection made from the base runs"
        );
        self.store_selection(tx, study, &spec, &selection).await?;
        Ok(made)
    }

    /// Trajectories of the study that are or may be admitted (not doomed, not dropped).
    async fn admissible_count(&self, tx: &mut Transaction<'_, Any>, study: &str) -> Result<u32, StoreError> {
        count_trajectories(tx, study, "state NOT IN ('doomed', 'non_replayable')").await
    }

    async fn store_selection(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        spec: &StudySpec,
        selection: &Selection,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE studies SET spec_json = $1, selection_json = $2 WHERE id = $3")
            .bind(serde_json::to_string(spec).map_err(corrupt)?)
            .bind(serde_json::to_string(selection).map_err(corrupt)?)
            .bind(study)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Make selected run `id` a trajectory with `controls`. A run whose recorded trajectory is
    /// missing or unreadable cannot be replayed: it is stored as non-replayable, saying why, and
    /// back-filled at once (which may make further trajectories). Returns how many were made.
    #[allow(clippy::too_many_arguments)]
    async fn make_pick(
        &self,
        tx: &mut Transaction<'_, Any>,
        spec: &mut StudySpec,
        selection: &mut Selection,
        study: &str,
        id: &RunId,
        controls: Controls,
        index: &RunIndex<'_>,
        now: i64,
    ) -> Result<u32, StoreError> {
        let mut next = Some((id.clone(), controls));
        let mut made = 0;
        while let Some((id, controls)) = next.take() {
            let outcome = index.outcomes.get(&(id.task.clone(), id.seed)).copied();
            let recorded = match outcome {
                Some(o) => self.recorded_run(tx, study, &id, o).await?,
                None => Err("the base run has no outcome".to_string()),
            };
            let trajectory = id.trajectory_id();
            let steps = outcome.map_or(0, |o| o.steps);
            let (length, digest, state) = match &recorded {
                Ok((run, digest)) => (run.length(), Some(digest.clone()), TrajectoryState::Waiting),
                Err(_) => (steps.max(1), outcome.and_then(|o| o.recorded.clone()), TrajectoryState::NonReplayable),
            };
            let payload = TrajectoryPayload {
                task: id.task.clone(),
                length,
                curve: None,
                recorded: recorded.as_ref().ok().map(|(run, _)| run.clone()),
                task_def: None,
                problem_statement_sha256: None,
                instructions: None,
            };
            let plan = TrajectoryPlan { length, labels: Vec::new(), controls };
            self.insert_trajectory(tx, study, &trajectory, &id.task, state, &plan, &payload, digest.as_deref(), now)
                .await?;
            if let Ok((run, _)) = &recorded {
                self.queue_run_labels(tx, study, &spec.judges, (&trajectory, false), run, now).await?;
            }
            spec.trajectories.push(TrajectorySpec {
                id: trajectory.clone(),
                task: id.task.clone(),
                length,
                curve: None,
                labels: Vec::new(),
                base_runs: index.base_runs.get(&id.task).cloned().unwrap_or_default(),
                recorded: digest,
            });
            made += 1;
            if let Err(reason) = recorded {
                tracing::warn!(study, trajectory, reason, "a selected base run cannot be replayed");
                let why = NonReplayable::no_outcome(reason);
                sqlx::query("UPDATE trajectories SET non_replayable_json = $1 WHERE study = $2 AND id = $3")
                    .bind(serde_json::to_string(&why).map_err(corrupt)?)
                    .bind(study)
                    .bind(&trajectory)
                    .execute(&mut **tx)
                    .await?;
                if let BackFill::Replaced { replacement, .. } = selection.back_fill(&id) {
                    next = Some((replacement, controls));
                }
            }
        }
        Ok(made)
    }

    /// The recorded run a failed base run uploaded, and its digest; why not, when it cannot be.
    async fn recorded_run(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        id: &RunId,
        outcome: &RunOutcome,
    ) -> Result<Result<(Trajectory, String), String>, StoreError> {
        let Some(digest) = &outcome.recorded else {
            return Ok(Err("the base run left no recorded run to replay".into()));
        };
        let Ok(parsed) = Digest::parse(digest) else {
            return Ok(Err(format!("the base run's recorded run {digest:?} is not a SHA-256 digest")));
        };
        let Some(bytes) = self.file_in(tx, &parsed).await? else {
            tracing::warn!(study, run = %id, digest, "the recorded run of a base run was not uploaded");
            return Ok(Err(format!("the base run's recorded run {digest} was not uploaded")));
        };
        Ok(match Trajectory::from_json(&bytes) {
            Ok(t) if t.length() > 0 => Ok((t, digest.clone())),
            Ok(_) => Err("the base run's recorded run has no step".into()),
            Err(e) => Err(format!("the base run's recorded run is not valid: {e}")),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn insert_trajectory(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        id: &str,
        task: &str,
        state: TrajectoryState,
        plan: &TrajectoryPlan,
        payload: &TrajectoryPayload,
        recorded: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        let bytes = payload.canonical_bytes();
        let payload_digest = Digest::of(&bytes);
        insert_file(tx, &payload_digest, &bytes, now).await?;
        let ord: i64 = sqlx::query("SELECT COALESCE(MAX(ord) + 1, 0) AS n FROM trajectories WHERE study = $1")
            .bind(study)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
        sqlx::query(
            "INSERT INTO trajectories (study, id, ord, state, stage, stage_rank, plan_json, payload_digest, \
             recorded_digest, task) VALUES ($1, $2, $3, $4, 'screen', 0, $5, $6, $7, $8)",
        )
        .bind(study)
        .bind(id)
        .bind(ord)
        .bind(state.as_str())
        .bind(serde_json::to_string(plan).map_err(corrupt)?)
        .bind(payload_digest.as_str())
        .bind(recorded)
        .bind(task)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// A trajectory of `study` was found non-replayable: if the study was selected, back-fill it
    /// from its stratum (docs/method.md §5, §7). The replacement carries the dropped one's controls, so
    /// the controls still run on as many trajectories. Returns whether a trajectory was made.
    pub(super) async fn back_fill(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        trajectory: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let sql = format!("SELECT spec_json, selection_json FROM studies WHERE id = $1{}", self.for_update());
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(study).fetch_one(&mut **tx).await?;
        let Some(json) = row.try_get::<Option<String>, _>("selection_json")? else { return Ok(false) };
        let mut selection: Selection = serde_json::from_str(&json).map_err(corrupt)?;
        let Some(id) = selection.picks.iter().find(|p| p.id.trajectory_id() == trajectory).map(|p| p.id.clone()) else {
            return Ok(false);
        };
        let mut spec: StudySpec = serde_json::from_str(&row.try_get::<String, _>("spec_json")?).map_err(corrupt)?;
        let plan: String = sqlx::query("SELECT plan_json FROM trajectories WHERE study = $1 AND id = $2")
            .bind(study)
            .bind(trajectory)
            .fetch_one(&mut **tx)
            .await?
            .try_get("plan_json")?;
        let controls = serde_json::from_str::<TrajectoryPlan>(&plan).map_err(corrupt)?.controls;
        let result = selection.back_fill(&id);
        let made = match &result {
            BackFill::Replaced { replacement, round, .. } => {
                tracing::info!(study, trajectory, replacement = %replacement, round, "back-filled from the stratum");
                let Some(runs) = self.finished_base_runs(tx, study, None).await? else {
                    return Err(StoreError::Corrupt(format!("study {study} was selected with base runs pending")));
                };
                let replacement = replacement.clone();
                let index = RunIndex::of(&runs);
                self.make_pick(tx, &mut spec, &mut selection, study, &replacement, controls, &index, now).await? > 0
            }
            BackFill::StratumExhausted { stratum, round } => {
                tracing::warn!(study, trajectory, %stratum, round, "stratum exhausted: the study goes on with one trajectory fewer");
                false
            }
            BackFill::NotSelected | BackFill::AlreadyNonReplayable => false,
        };
        self.store_selection(tx, study, &spec, &selection).await?;
        Ok(made)
    }

    /// The earlier rule, for studies stored without a selection: once every base run of `task`
    /// has finished, each failed one with a recorded run becomes a trajectory.
    async fn take_task_base_runs(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        spec: &mut StudySpec,
        study: &str,
        task: &str,
        now: i64,
    ) -> Result<u32, StoreError> {
        let Some(runs) = self.finished_base_runs(tx, study, Some(task)).await? else { return Ok(0) };
        let base_runs =
            BaseRuns(runs.iter().map(|f| BaseRun { success: f.outcome.success, steps: f.outcome.steps }).collect());
        let doomed =
            base_runs.pass_rate().is_some_and(|p| vcurve_method::meets_at_most(p, config.params.doomed_threshold));
        let mut made = 0;
        for f in runs.iter().filter(|f| !f.outcome.success) {
            let id = base_run_trajectory_id(task, f.seed);
            if spec.trajectories.iter().any(|t| t.id == id) {
                continue;
            }
            let run = RunId::new(task, f.seed);
            let (recorded, digest) = match self.recorded_run(tx, study, &run, &f.outcome).await? {
                Ok(r) => r,
                Err(reason) => {
                    tracing::warn!(study, task, seed = f.seed, reason, "a failed base run cannot be a trajectory");
                    continue;
                }
            };
            let length = recorded.length();
            let controls = if doomed {
                Controls::default()
            } else {
                planner::controls_for(self.admissible_count(tx, study).await?, &config.controls)
            };
            let plan = TrajectoryPlan { length, labels: Vec::new(), controls };
            let state = if doomed { TrajectoryState::Doomed } else { TrajectoryState::Waiting };
            let payload = TrajectoryPayload {
                task: task.to_string(),
                length,
                curve: None,
                recorded: Some(recorded),
                task_def: None,
                problem_statement_sha256: None,
                instructions: None,
            };
            self.insert_trajectory(tx, study, &id, task, state, &plan, &payload, Some(&digest), now).await?;
            if !doomed && let Some(run) = &payload.recorded {
                self.queue_run_labels(tx, study, &spec.judges, (&id, false), run, now).await?;
            }
            spec.trajectories.push(TrajectorySpec {
                id,
                task: task.to_string(),
                length,
                curve: None,
                labels: Vec::new(),
                base_runs: base_runs.clone(),
                recorded: Some(digest),
            });
            made += 1;
        }
        if made > 0 {
            sqlx::query("UPDATE studies SET spec_json = $1 WHERE id = $2")
                .bind(serde_json::to_string(&*spec).map_err(corrupt)?)
                .bind(study)
                .execute(&mut **tx)
                .await?;
        }
        Ok(made)
    }

    async fn file_in(&self, tx: &mut Transaction<'_, Any>, digest: &Digest) -> Result<Option<Vec<u8>>, StoreError> {
        read_file(tx, digest).await
    }
}
