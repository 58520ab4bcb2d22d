//! A task-state study's `session` job (docs/task-state.md): the study's agent runs a whole
//! multi-turn session on the payload's task in a fresh container ([`crate::runners::task_session`]),
//! each turn with the job's budget, the whole session under the study's `run_timeout_s` (a session
//! stopped there is `capped`); each checkpoint's patch is judged by the task's evaluator. The
//! worker uploads a [`RecordedSession`] — the session, each checkpoint's code state, the agent's
//! own message list and where its history at each checkpoint ends — and reports
//! `session_recorded` with its digest. Each checkpoint's non-empty patch is uploaded too, so its
//! `patch_sha256` names a file the coordinator holds.

use std::collections::BTreeSet;

use tokio_util::sync::CancellationToken;
use vcurve_record::runner::AgentOptions;
use vcurve_record::task_state::{CheckpointState, RecordedSession};
use vcurve_record::{MAX_FILE_BYTES, TrajectoryPayload};

use super::{Inner, bad_job, run_seed};
use crate::runners::agent::{AgentFailure, AgentLimits, AgentStart};
use crate::runners::evaluate::is_empty_patch;
use crate::runners::no_outcome::NoOutcome;
use crate::runners::seam::{JobKey, JobReport, JobSpec};
use crate::runners::task_session::{SessionPlan, SessionRecord, run_session};
use crate::sandbox::replay::ContainerLimits;

impl Inner {
    /// Run a `session` job (see the module docs).
    pub(super) async fn session_job(
        &self,
        job: &JobSpec,
        options: &AgentOptions,
        payload: &TrajectoryPayload,
        limits: &ContainerLimits,
        cancel: &CancellationToken,
    ) -> Result<JobReport, NoOutcome> {
        let task = payload.task_def().ok_or_else(|| bad_job("a session's payload carries no task"))?;
        if let JobKey::Session { task: key_task, .. } = &job.key
            && key_task != &task.id
        {
            return Err(NoOutcome::BadJob(format!("session {} has the payload of task {}", job.key, task.id)));
        }
        let instructions = payload
            .instructions
            .as_deref()
            .filter(|i| !i.is_empty())
            .ok_or_else(|| bad_job("a session's payload carries no instructions"))?;
        let record = match self
            .session(task, options, instructions, job.budget, run_seed(job.study_seed, &job.key), limits, cancel)
            .await
        {
            Ok(record) => record,
            // The study's cap stopped it: no outcome, not run again, counted.
            Err(NoOutcome::Agent(AgentFailure::Timeout { reason })) => return Ok(JobReport::capped(reason)),
            Err(e) => return Err(e),
        };
        if !record.run.complete {
            tracing::warn!(key = %job.key, turns = record.checkpoints.len(), instructions = instructions.len(),
                "the agent ended the session before its last turn: only its completed turns have checkpoints");
        }
        let services = self.services()?;
        let mut uploaded = BTreeSet::new();
        for checkpoint in &record.checkpoints {
            if !is_empty_patch(&checkpoint.patch) && uploaded.insert(checkpoint.patch_sha256.clone()) {
                services.put_file(checkpoint.patch.as_bytes()).await.map_err(NoOutcome::Services)?;
            }
        }
        let recorded = recorded_session(record, MAX_FILE_BYTES)?;
        let bytes = serde_json::to_vec(&recorded).map_err(|e| NoOutcome::Record(e.to_string()))?;
        let recorded = services.put_file(&bytes).await.map_err(NoOutcome::Services)?;
        Ok(JobReport::SessionRecorded { recorded })
    }

    /// Run a session of the study's agent on `task` in a fresh container of its image, from
    /// `h_0`, each turn with `budget_per_turn` steps (see
    /// [`super::AgentProcessRunner::run_session`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn session(
        &self,
        task: &vcurve_record::Task,
        options: &AgentOptions,
        instructions: &[String],
        budget_per_turn: u32,
        seed: u64,
        limits: &ContainerLimits,
        cancel: &CancellationToken,
    ) -> Result<SessionRecord, NoOutcome> {
        let start = AgentStart {
            command: self.command(options).map_err(NoOutcome::BadJob)?,
            task: task.clone(),
            interpreter: self.base_interpreter.clone(),
            messages: Vec::new(),
            t: 0,
            budget: budget_per_turn,
            seed,
            model: options.model.clone(),
        };
        let plan = SessionPlan {
            instructions: instructions.to_vec(),
            limits: AgentLimits::from_options(options),
            evaluate: Some(self.swebench()),
        };
        let mark = Some(self.instance.agent_mark());
        run_session(self.runtime.clone(), &limits.spec(&task.image), start, &plan, mark, cancel.clone()).await
    }
}

/// A session record as the worker uploads it, fitted to `limit` bytes ([`fit`]).
pub(super) fn recorded_session(record: SessionRecord, limit: u64) -> Result<RecordedSession, NoOutcome> {
    let history_ends: Vec<usize> = (1..=record.checkpoints.len() as u32)
        .map(|k| record.run.history_at(k).map(<[_]>::len))
        .collect::<Option<_>>()
        .ok_or_else(|| NoOutcome::Record("a checkpoint's history ends past the agent's messages".to_owned()))?;
    let checkpoints = record
        .checkpoints
        .iter()
        .map(|c| CheckpointState { k: c.k, patch_sha256: c.patch_sha256.clone(), fixed: c.resolved })
        .collect();
    fit(
        RecordedSession { session: record.session, checkpoints, messages: record.run.run.messages, history_ends },
        limit,
    )
}

/// `recorded` at most `limit` bytes as JSON: the agent's messages have their longest strings cut
/// to fit (as a transcript's are, each message kept, so the history ends still hold) when the
/// whole is over; the session itself is never cut, and one too large alone is refused.
fn fit(mut recorded: RecordedSession, limit: u64) -> Result<RecordedSession, NoOutcome> {
    let size = |r: &RecordedSession| serde_json::to_vec(r).map_or(u64::MAX, |b| b.len() as u64);
    if size(&recorded) <= limit {
        return Ok(recorded);
    }
    let mut messages = std::mem::take(&mut recorded.messages);
    // An empty list encodes as `[]`: what the messages may take is the limit less the rest.
    let rest = size(&recorded).saturating_sub(2);
    let task = &recorded.session.task.id;
    let room = limit.checked_sub(rest).ok_or_else(|| {
        NoOutcome::Record(format!(
            "the recorded session of task {task} is over the store's limit of {limit} bytes per file even without \
             the agent's messages: the rest is {rest} bytes"
        ))
    })?;
    let cuts = vcurve_record::oversize::fit_messages(&mut messages, room).map_err(|e| {
        NoOutcome::Record(format!(
            "the agent's messages in the recorded session of task {task} {e} (what the rest leaves)"
        ))
    })?;
    tracing::warn!(task = %task, texts = cuts.texts, omitted_bytes = cuts.bytes,
        "the recorded session was over the store's per-file limit: the longest texts of the agent's messages were cut");
    recorded.messages = messages;
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use vcurve_record::session::Session;

    fn recorded(output: &str) -> RecordedSession {
        let session = json!({"format": "vcurve.session.v1", "task": {"id": "calc-1", "statement": "wrong"},
            "turns": [{"instruction": "Investigate", "messages": [{"text": "look",
                "tool_calls": [{"command": "cat x", "output": "x", "returncode": 0}]}],
                "report": {"text": "done"}}]});
        RecordedSession {
            session: Session::from_json(session.to_string().as_bytes()).unwrap(),
            checkpoints: vec![CheckpointState { k: 1, patch_sha256: "e3".into(), fixed: Some(false) }],
            messages: vec![
                json!({"role": "user", "content": "Investigate"}),
                json!({"role": "user", "content": output}),
                json!({"role": "assistant", "content": "done"}),
            ],
            history_ends: vec![3],
        }
    }

    #[test]
    fn a_session_over_the_limit_has_its_messages_cut_never_its_session() {
        let small = recorded("x");
        assert_eq!(fit(small.clone(), 1 << 20).unwrap(), small, "unchanged when it fits");

        let big = recorded(&"y".repeat(200_000));
        let limit = 100_000;
        let fitted = fit(big.clone(), limit).unwrap();
        assert!(serde_json::to_vec(&fitted).unwrap().len() as u64 <= limit);
        assert_eq!((&fitted.session, &fitted.history_ends), (&big.session, &big.history_ends));
        assert_eq!(fitted.messages.len(), 3, "every message is kept");
        assert!(fitted.messages[1]["content"].as_str().unwrap().len() < 100_000);

        let err = fit(big, 200).unwrap_err().to_string();
        assert!(err.contains("task calc-1") && err.contains("limit of 200 bytes"), "{err}");
    }
}
