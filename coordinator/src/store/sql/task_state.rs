//! A task-state study's jobs (docs/task-state.md): a session of each task is queued at launch;
//! when one is recorded, and each time a model call is answered, the calls that follow are
//! planned (`vcurve_record::task_state::plan`), each stored by digest as the payload of a
//! `model_call` job keyed by its call, in the report's transaction. A key exists once, so a call
//! whose answer is stored is never asked again, whatever crashes.

use std::collections::BTreeMap;

use sqlx::{Any, Row, Transaction};
use vcurve_record::task_state::plan::{self, CheckpointAnswers};
use vcurve_record::task_state::{
    AnswerCheck, CallInput, CallKey, CallOutput, RecordedSession, TaskStateData, TaskStateSettings, endpoint_capability,
};
use vcurve_record::{Digest, TrajectoryPayload};

use super::files::{insert_file, read_file};
use super::handle::SqlStore;
use super::jobs::{insert_job, set_job_payload};
use super::rows::{bind_job, corrupt};
use crate::model::JobKey;
use crate::spec::StudySpec;
use crate::store::api::StoreError;

/// The capability a job of `jobs` (`$1 … $5`) needs: `$6`.
const SET_NEEDS: &str = concat!("UPDATE jobs SET needs = $6 WHERE ", job_is!());

/// The payload and result of a job of `jobs` (`$1 … $5`).
const JOB_FILES: &str = concat!("SELECT state, payload_digest, result_json FROM jobs WHERE ", job_is!());

/// Retire a job of `jobs` (`$1 … $5`) with the reason `$6` at `$7`.
const RETIRE: &str = concat!(
    "UPDATE jobs SET state = 'retired', last_reason = $6, done_ms = $7, worker = NULL, lease_expires_ms = NULL WHERE ",
    job_is!()
);

/// Note why a finished job planned nothing (`$6`), keeping its state.
const NOTE: &str = concat!("UPDATE jobs SET last_reason = $6 WHERE ", job_is!());

/// Store what the progress and export read beside a call's report (`$6`, JSON).
pub(super) const CALL_RESULT: &str = concat!("UPDATE jobs SET result_json = $6 WHERE ", job_is!());

impl SqlStore {
    /// Queue a task-state study's sessions: one per task, each naming a payload with its task and
    /// the study's instructions.
    pub(super) async fn queue_sessions(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        spec: &StudySpec,
        settings: &TaskStateSettings,
        statements: &BTreeMap<String, String>,
        now: i64,
    ) -> Result<(), StoreError> {
        for runs in &spec.tasks {
            let statement = statements.get(&runs.task.id).map(String::as_str);
            let payload = TrajectoryPayload {
                instructions: Some(settings.instructions.clone()),
                ..TrajectoryPayload::of_task_with_statement(&runs.task, statement)
            };
            let bytes = payload.canonical_bytes();
            let digest = Digest::of(&bytes);
            insert_file(tx, &digest, &bytes, now).await?;
            let key = JobKey::Session { study: study.to_string(), task: runs.task.id.clone() };
            insert_job(tx, &key, now).await?;
            set_job_payload(tx, &key, Some(digest.as_str())).await?;
        }
        Ok(())
    }

    /// A session was recorded (`recorded`, the digest of its [`RecordedSession`]): queue its
    /// atom extractions. A recording the planner refuses retires the session with why.
    pub(super) async fn session_recorded(
        &self,
        tx: &mut Transaction<'_, Any>,
        settings: &TaskStateSettings,
        key: &JobKey,
        recorded: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let planned = match self.recorded_session(tx, recorded).await? {
            Ok(rec) => {
                plan::after_session(settings, &rec).map(|c| (rec.checkpoints.len(), c)).map_err(|e| e.to_string())
            }
            Err(why) => Err(why),
        };
        match planned {
            Ok((checkpoints, calls)) => {
                let summary = serde_json::json!({
                    "result": "session_recorded", "recorded": recorded, "checkpoints": checkpoints,
                });
                bind_job(sqlx::query(CALL_RESULT), key).bind(summary.to_string()).execute(&mut **tx).await?;
                self.queue_calls(tx, key.study(), &calls, now).await
            }
            Err(why) => {
                tracing::warn!(key = %key, reason = %why, "a recorded session cannot be planned: retired");
                bind_job(sqlx::query(RETIRE), key).bind(why).bind(now).execute(&mut **tx).await?;
                Ok(false)
            }
        }
    }

    /// A model call ended (`output`, the digest of its [`CallOutput`]): store its status and
    /// tokens beside the report, and queue the calls that follow it.
    pub(super) async fn call_answered(
        &self,
        tx: &mut Transaction<'_, Any>,
        settings: &TaskStateSettings,
        key: &JobKey,
        output_file: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let JobKey::ModelCall { study, call } = key else { return Ok(false) };
        let planned = async {
            let input = self.call_input(tx, key).await?;
            let output = self.file_json::<CallOutput>(tx, output_file).await?;
            Ok::<_, StoreError>((input, output))
        }
        .await;
        let (input, output) = match planned {
            Ok(pair) => pair,
            Err(StoreError::Corrupt(why)) => {
                bind_job(sqlx::query(NOTE), key).bind(why).execute(&mut **tx).await?;
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let summary = call_summary(output_file, &input, &output);
        bind_job(sqlx::query(CALL_RESULT), key).bind(summary.to_string()).execute(&mut **tx).await?;
        // A judge's answer ends its chain, and an unanswered call plans nothing: neither loads the
        // session or the checkpoint's answers (judges are half of a study's calls).
        if output.answer.is_none() || matches!(input.key, CallKey::Judge { .. }) {
            return Ok(false);
        }
        let (task, k) = input.key.checkpoint();
        let session = JobKey::Session { study: study.clone(), task: task.to_string() };
        let rec = match self.job_result_digest(tx, &session, "recorded").await? {
            Some(digest) => self.recorded_session(tx, &digest).await?,
            None => Err(format!("the session of task {task} has no recording")),
        };
        // Only what the planner reads: a probe call checks the extraction it came from; a reader
        // or actor answer is judged against the checkpoint's probes.
        let atoms = match input.key {
            CallKey::Probes { .. } => self.answered(tx, study, &CallKey::Atoms { task: task.to_string(), k }).await?,
            _ => None,
        };
        let probes = match input.key {
            CallKey::Reader { .. } | CallKey::Actor { .. } => {
                self.answered(tx, study, &CallKey::Probes { task: task.to_string(), k }).await?
            }
            _ => None,
        };
        let answers = CheckpointAnswers { atoms: atoms.as_ref(), probes: probes.as_ref() };
        let calls =
            rec.and_then(|rec| plan::after_call(settings, &rec, &input, &output, &answers).map_err(|e| e.to_string()));
        match calls {
            Ok(calls) => self.queue_calls(tx, study, &calls, now).await,
            Err(why) => {
                tracing::warn!(call = %call, reason = %why, "the calls after a model call cannot be planned");
                bind_job(sqlx::query(NOTE), key).bind(why).execute(&mut **tx).await?;
                Ok(false)
            }
        }
    }

    /// Queue `calls` (each new key once), their inputs stored by digest; returns whether any
    /// was new.
    pub(super) async fn queue_calls(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        calls: &[CallInput],
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut new = false;
        for input in calls {
            let key = JobKey::ModelCall { study: study.to_string(), call: input.key.as_subject() };
            if !insert_job(tx, &key, now).await? {
                continue;
            }
            new = true;
            let bytes = serde_json::to_vec(input).map_err(corrupt)?;
            let digest = Digest::of(&bytes);
            insert_file(tx, &digest, &bytes, now).await?;
            set_job_payload(tx, &key, Some(digest.as_str())).await?;
            bind_job(sqlx::query(SET_NEEDS), &key)
                .bind(endpoint_capability(&input.model.endpoint.base_url))
                .execute(&mut **tx)
                .await?;
        }
        Ok(new)
    }

    /// The recording `digest` names, or why it cannot be read.
    async fn recorded_session(
        &self,
        tx: &mut Transaction<'_, Any>,
        digest: &str,
    ) -> Result<Result<RecordedSession, String>, StoreError> {
        match self.file_json::<RecordedSession>(tx, digest).await {
            Ok(rec) => Ok(Ok(rec)),
            Err(StoreError::Corrupt(why)) => Ok(Err(why)),
            Err(e) => Err(e),
        }
    }

    /// A stored file read as JSON; a missing or unreadable file is [`StoreError::Corrupt`].
    pub(super) async fn file_json<T: serde::de::DeserializeOwned>(
        &self,
        tx: &mut Transaction<'_, Any>,
        digest: &str,
    ) -> Result<T, StoreError> {
        let d = Digest::parse(digest).map_err(|e| corrupt(format!("file {digest:?}: {e}")))?;
        let bytes = read_file(tx, &d).await?.ok_or_else(|| corrupt(format!("file {digest} is not stored")))?;
        serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("file {digest}: {e}")))
    }

    /// The input of a model call job (its payload).
    pub(super) async fn call_input(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
    ) -> Result<CallInput, StoreError> {
        let row = bind_job(sqlx::query(JOB_FILES), key)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| corrupt(format!("no job {key}")))?;
        let digest: Option<String> = row.try_get("payload_digest")?;
        let digest = digest.ok_or_else(|| corrupt(format!("the model call {key} names no input")))?;
        self.file_json(tx, &digest).await
    }

    /// The digest field `field` of a done job's stored report, if it is done.
    async fn job_result_digest(
        &self,
        tx: &mut Transaction<'_, Any>,
        key: &JobKey,
        field: &str,
    ) -> Result<Option<String>, StoreError> {
        let Some(row) = bind_job(sqlx::query(JOB_FILES), key).fetch_optional(&mut **tx).await? else {
            return Ok(None);
        };
        if row.try_get::<String, _>("state")? != "done" {
            return Ok(None);
        }
        let result: Option<String> = row.try_get("result_json")?;
        let Some(result) = result else { return Ok(None) };
        let value: serde_json::Value = serde_json::from_str(&result).map_err(corrupt)?;
        Ok(value.get(field).and_then(serde_json::Value::as_str).map(str::to_string))
    }

    /// The output of call `call` of `study`, when it is done.
    async fn answered(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
        call: &CallKey,
    ) -> Result<Option<CallOutput>, StoreError> {
        let key = JobKey::ModelCall { study: study.to_string(), call: call.as_subject() };
        match self.job_result_digest(tx, &key, "output").await? {
            Some(digest) => Ok(Some(self.file_json(tx, &digest).await?)),
            None => Ok(None),
        }
    }
}

/// The done sessions and model calls of study `$1`.
const DONE_CALL_JOBS: &str = "SELECT kind, subject, payload_digest, result_json FROM jobs \
     WHERE study = $1 AND state = 'done' AND kind IN ('session', 'model_call') ORDER BY kind, subject";

impl SqlStore {
    pub(super) async fn task_state_data(
        &self,
        study: &vcurve_record::StudyId,
    ) -> Result<Option<TaskStateData>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let Some(settings) = self.config(&mut tx, study.as_str()).await?.task_state.clone() else {
            tx.commit().await?;
            return Ok(None);
        };
        let rows = sqlx::query(DONE_CALL_JOBS).bind(study.as_str()).fetch_all(&mut *tx).await?;
        let mut data = TaskStateData { settings, sessions: BTreeMap::new(), calls: BTreeMap::new() };
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let subject: String = row.try_get("subject")?;
            let result: Option<String> = row.try_get("result_json")?;
            let result: serde_json::Value =
                serde_json::from_str(result.as_deref().unwrap_or("null")).map_err(corrupt)?;
            let field = |k: &str| {
                result
                    .get(k)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| corrupt(format!("the {kind} job {subject} is done without its {k}")))
            };
            if kind == "session" {
                let rec: RecordedSession = self.file_json(&mut tx, &field("recorded")?).await?;
                data.sessions.insert(subject, rec);
            } else {
                let key = CallKey::parse(&subject).map_err(corrupt)?;
                let input: Option<String> = row.try_get("payload_digest")?;
                let input = input.ok_or_else(|| corrupt(format!("the model call {subject} names no input")))?;
                let mut input: CallInput = self.file_json(&mut tx, &input).await?;
                input.messages.clear();
                let output: CallOutput = self.file_json(&mut tx, &field("output")?).await?;
                data.calls.insert(key, (input, output));
            }
        }
        tx.commit().await?;
        Ok(Some(data))
    }
}

/// What progress and the export read of an answered call (`output_file`, the digest of its
/// `output`), stored beside its report.
pub(super) fn call_summary(output_file: &str, input: &CallInput, output: &CallOutput) -> serde_json::Value {
    serde_json::json!({
        "result": "call_answered",
        "output": output_file,
        "status": status_key(output),
        "tokens": output.log.tokens,
        "retries": output.log.retries,
        "latency_ms": output.log.latency_ms,
        "items": match &input.check {
            AnswerCheck::Probes { atoms } => atoms.len(),
            AnswerCheck::Reader { probes } => probes.len(),
            AnswerCheck::Judge { items } => items.len(),
            AnswerCheck::Atoms { .. } | AnswerCheck::Actor | AnswerCheck::FirstMistake { .. } => 1,
        },
    })
}

/// The call's status as progress counts it: `ok`, `malformed` or `failed`.
fn status_key(output: &CallOutput) -> &'static str {
    match output.log.status {
        vcurve_record::llm::CallStatus::Ok => "ok",
        vcurve_record::llm::CallStatus::Malformed { .. } => "malformed",
        vcurve_record::llm::CallStatus::Failed { .. } => "failed",
    }
}
