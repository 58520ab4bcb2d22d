//! Judge labels of a curve study (`judges:`, docs/spec.md "Judge labels"): at launch, one
//! `model_call` job per trajectory and judge ([`CallKey::Label`]), its input rendered from the
//! trajectory's recorded steps; when one ends, its label (`m = i + 1`, or "no mistake") is stored
//! beside its report and added to the trajectory's plan under the trajectory's row lock.
//!
//! A trajectory's schedule waits for all its judges: its replans create nothing while one of its
//! label calls is pending or leased ([`SqlStore::judges_pending`]), and the last label call to end
//! replans it once it has been replayed. So its schedule runs from the first continuation with
//! every label it will have, and probes exactly the points the same labels given in the spec
//! would; the study stays open while any label call is (its jobs are open work).
//!
//! A decoy's recorded run (`recorded:` of a decoy) is labelled likewise, one call per decoy and
//! judge (`label-decoy:DECOY/JUDGE`); its label is stored beside the call's report only: a decoy
//! has no schedule to plan. The export adds the labels to the spec's decoys.

use std::collections::BTreeMap;

use sqlx::{Any, Row, Transaction};
use vcurve_record::judge_labels::{label_call, label_of};
use vcurve_record::llm::ModelCall;
use vcurve_record::study::Label;
use vcurve_record::task_state::{CallInput, CallKey, CallOutput, StageModel};
use vcurve_record::{Trajectory, TrajectoryPayload};

use super::handle::{SqlStore, StudyConfig};
use super::rows::{bind_job, corrupt};
use crate::model::{JobKey, TrajectoryState};
use crate::spec::StudySpec;
use crate::store::api::StoreError;

/// The state of a job of `jobs` (`$1 … $5`).
const JOB_STATE: &str = concat!("SELECT state FROM jobs WHERE ", job_is!());

/// The plan of trajectory `$3` of study `$2`: `$1`.
const SET_PLAN: &str = "UPDATE trajectories SET plan_json = $1 WHERE study = $2 AND id = $3";

/// The state of trajectory `$2` of study `$1`.
const TRAJECTORY_STATE: &str = "SELECT state FROM trajectories WHERE study = $1 AND id = $2";

/// The done label calls of study `$1` (of trajectories and decoys) with their results.
const DONE_LABELS: &str = "SELECT subject, result_json FROM jobs \
     WHERE study = $1 AND kind = 'model_call' AND state = 'done' \
     AND (subject LIKE 'label:%' OR subject LIKE 'label-decoy:%') ORDER BY subject";

/// The labels the judges gave, by trajectory and by decoy, and their calls' logs
/// ([`SqlStore::judge_labels`]).
#[derive(Debug, Default)]
pub(super) struct JudgeLabels {
    pub(super) trajectories: BTreeMap<String, Vec<Label>>,
    pub(super) decoys: BTreeMap<String, Vec<Label>>,
    /// The logs of the label calls that ended with an output (answered, malformed or failed), in
    /// call-key order: the export's `calls.csv`.
    pub(super) calls: Vec<ModelCall>,
}

impl SqlStore {
    /// Queue the label calls of a new study: each trajectory's recorded run (in `payloads`, the
    /// trajectories' order) and each decoy's (`decoy_runs`, by decoy id) to each judge.
    pub(super) async fn queue_labels(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        spec: &StudySpec,
        payloads: &[TrajectoryPayload],
        decoy_runs: &BTreeMap<String, Trajectory>,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut calls = Vec::new();
        for (trajectory, payload) in spec.trajectories.iter().zip(payloads) {
            let run: &Trajectory = payload.recorded.as_ref().ok_or_else(|| {
                StoreError::Invalid(format!(
                    "trajectory {}: judges read a recorded run, and it has none",
                    trajectory.id
                ))
            })?;
            calls.extend(label_calls(&spec.judges, (&trajectory.id, false), run).map_err(StoreError::Invalid)?);
        }
        for decoy in &spec.decoys {
            let run = decoy_runs.get(&decoy.id).ok_or_else(|| {
                StoreError::Invalid(format!("decoy {}: judges read a recorded run, and it has none", decoy.id))
            })?;
            calls.extend(label_calls(&spec.judges, (&decoy.id, true), run).map_err(StoreError::Invalid)?);
        }
        self.queue_calls(tx, study, &calls, now).await?;
        Ok(())
    }

    /// Queue every judge's label call of one run a study from tasks' selection drew: `(id, is a
    /// decoy)`, a trajectory made of a failed base run or a decoy, and `run`, the run its base run
    /// recorded.
    pub(super) async fn queue_run_labels(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        judges: &BTreeMap<String, StageModel>,
        of: (&str, bool),
        run: &Trajectory,
        now: i64,
    ) -> Result<(), StoreError> {
        let calls = label_calls(judges, of, run).map_err(corrupt)?;
        self.queue_calls(tx, study, &calls, now).await?;
        Ok(())
    }

    /// A label call ended: answered (`output`, the digest of its [`CallOutput`]) or retired
    /// (`None`). Its label, if it gave one, is stored beside its report; a trajectory's joins its
    /// plan, and the trajectory is replanned when it was its last judge and it has been replayed
    /// (a decoy's plans nothing). Returns whether work was created.
    pub(super) async fn label_ended(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        key: &JobKey,
        output: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let JobKey::ModelCall { study, call } = key else { return Ok(false) };
        let Ok(CallKey::Label { trajectory, decoy, .. }) = CallKey::parse(call) else {
            return Err(corrupt(format!("{call:?} is not a label call")));
        };
        let mut label = None;
        if let Some(output_file) = output {
            let input: CallInput = self.call_input(tx, key).await?;
            let output: CallOutput = self.file_json(tx, output_file).await?;
            label = label_of(&input, &output);
            let mut summary = super::task_state::call_summary(output_file, &input, &output);
            if let Some(step) = label {
                summary["label"] = serde_json::json!(step);
            }
            bind_job(sqlx::query(super::task_state::CALL_RESULT), key)
                .bind(summary.to_string())
                .execute(&mut **tx)
                .await?;
        }
        if decoy {
            return Ok(false);
        }
        let Some((mut plan, locked)) = self.lock_trajectory(tx, study, &trajectory).await? else {
            return Err(corrupt(format!("the label call {call} names no trajectory of its study")));
        };
        if let Some(Some(m)) = label {
            plan.labels.push(m);
            sqlx::query(SET_PLAN)
                .bind(serde_json::to_string(&plan).map_err(corrupt)?)
                .bind(study)
                .bind(&trajectory)
                .execute(&mut **tx)
                .await?;
        }
        let state: String =
            sqlx::query(TRAJECTORY_STATE).bind(study).bind(&trajectory).fetch_one(&mut **tx).await?.try_get("state")?;
        if state != TrajectoryState::Running.as_str() || self.judges_pending(tx, config, study, &trajectory).await? {
            return Ok(false);
        }
        let (created, finished) = self.replan(tx, config, (study, &trajectory, &plan), Some(locked), None, now).await?;
        Ok(created > 0 || finished)
    }

    /// Whether a label call of trajectory `trajectory` is still to end (pending or leased).
    pub(super) async fn judges_pending(
        &self,
        tx: &mut Transaction<'_, Any>,
        config: &StudyConfig,
        study: &str,
        trajectory: &str,
    ) -> Result<bool, StoreError> {
        for judge in &config.judges {
            let call = CallKey::Label { trajectory: trajectory.to_string(), judge: judge.clone(), decoy: false };
            let key = JobKey::ModelCall { study: study.to_string(), call: call.as_subject() };
            let row = bind_job(sqlx::query(JOB_STATE), &key).fetch_optional(&mut **tx).await?;
            if let Some(row) = row
                && matches!(row.try_get::<String, _>("state")?.as_str(), "pending" | "leased")
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The labels the judges gave, by trajectory and by decoy, in judge order: `(judge, m)`,
    /// `None` for "no mistake"; a call that gave no label (malformed, failed, retired) is not
    /// among them. And the logs of every label call that ended with an output, only trajectory
    /// `only`'s when given; a retired call left no output, and is counted among the retired jobs
    /// instead.
    pub(super) async fn judge_labels(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        only: Option<&str>,
    ) -> Result<JudgeLabels, StoreError> {
        let mut labels = JudgeLabels::default();
        for row in sqlx::query(DONE_LABELS).bind(study).fetch_all(&mut **tx).await? {
            let subject: String = row.try_get("subject")?;
            let Ok(CallKey::Label { trajectory, judge, decoy }) = CallKey::parse(&subject) else { continue };
            let result: Option<String> = row.try_get("result_json")?;
            let result: serde_json::Value =
                serde_json::from_str(result.as_deref().unwrap_or("null")).map_err(corrupt)?;
            if only.is_none_or(|only| !decoy && only == trajectory) {
                let output = result
                    .get("output")
                    .and_then(serde_json::Value::as_str)
                    .ok_or_else(|| corrupt(format!("the label call {subject} is done without its output")))?;
                labels.calls.push(self.file_json::<CallOutput>(tx, output).await?.log);
            }
            let Some(label) = result.get("label") else { continue };
            let step = match label {
                serde_json::Value::Null => None,
                other => Some(
                    other
                        .as_u64()
                        .and_then(|m| u32::try_from(m).ok())
                        .ok_or_else(|| corrupt(format!("the label call {subject} stored the label {other}")))?,
                ),
            };
            let of = if decoy { &mut labels.decoys } else { &mut labels.trajectories };
            of.entry(trajectory).or_default().push(Label { source: judge, step });
        }
        Ok(labels)
    }
}

/// Every judge's label call of one run, `(id, is a decoy)`; why one cannot be rendered.
fn label_calls(
    judges: &BTreeMap<String, StageModel>,
    (id, decoy): (&str, bool),
    run: &Trajectory,
) -> Result<Vec<CallInput>, String> {
    let what = if decoy { "decoy" } else { "trajectory" };
    judges
        .iter()
        .map(|(judge, model)| {
            label_call(id, decoy, judge, model, run).map_err(|e| format!("{what} {id}, judge {judge}: {e}"))
        })
        .collect()
}

/// Whether a job is a label call (of a trajectory or a decoy).
pub(super) fn is_label_call(key: &JobKey) -> bool {
    matches!(key, JobKey::ModelCall { call, .. } if call.starts_with("label:") || call.starts_with("label-decoy:"))
}
