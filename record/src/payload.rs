//! What a worker fetches, by digest, to run a study's jobs on one trajectory.
//!
//! A job names its trajectory by the digest of a [`TrajectoryPayload`]: leases stay small whatever
//! the trajectory's size, and a worker fetches each payload once and keeps it by digest. The
//! payload is canonical JSON ([`TrajectoryPayload::canonical_bytes`]); its digest is the SHA-256
//! of those bytes, so a fetched payload can be checked against the digest that named it.

use serde::{Deserialize, Serialize};

use crate::trajectory::{Task, Trajectory, TrajectoryError, sha256_hex};

/// A trajectory as the runners need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryPayload {
    /// The task the trajectory is a run of.
    pub task: String,
    /// `T`, the number of steps.
    pub length: u32,
    /// The true curve `V(h_t)` for `t = 0..T−1`, where the study gives one (the synthetic
    /// runner's ground truth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curve: Option<Vec<f64>>,
    /// The recorded run, where the study gives one (replayed, then resumed from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Trajectory>,
    /// The task itself, for jobs on a task without a recorded run of it (base runs): its image,
    /// working directory and evaluator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_def: Option<Task>,
    /// The SHA-256 of `task_def`'s problem statement when it is stored apart, as a file of its own
    /// (the coordinator stores each statement once, by digest, whatever its size): `task_def`
    /// then has none, and a worker fetches the file and fills it in
    /// ([`TrajectoryPayload::fill_problem_statement`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_statement_sha256: Option<String>,
    /// A task-state study's session job: instruction `k` opens turn `k` (docs/task-state.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Vec<String>>,
}

impl TrajectoryPayload {
    /// The payload of a task's base runs.
    pub fn of_task(task: &Task) -> TrajectoryPayload {
        TrajectoryPayload {
            task: task.id.clone(),
            length: 0,
            curve: None,
            recorded: None,
            task_def: Some(task.clone()),
            problem_statement_sha256: None,
            instructions: None,
        }
    }

    /// The payload of a task's base runs whose problem statement is stored apart under the
    /// digest `statement` (`task`'s own statement, if any, is left out).
    pub fn of_task_with_statement(task: &Task, statement: Option<&str>) -> TrajectoryPayload {
        let Some(digest) = statement else { return TrajectoryPayload::of_task(task) };
        let task_def = Task {
            id: task.id.clone(),
            image: task.image.clone(),
            workdir: task.workdir.clone(),
            evaluator: task.evaluator.clone(),
            problem_statement: None,
        };
        TrajectoryPayload {
            problem_statement_sha256: Some(digest.to_string()),
            instructions: None,
            ..TrajectoryPayload::of_task(&task_def)
        }
    }

    /// Fill in the problem statement stored apart ([`TrajectoryPayload::problem_statement_sha256`])
    /// from `bytes`, the file fetched by that digest: checked against it, UTF-8. The payload is
    /// then whole, as if its statement had always been in it.
    pub fn fill_problem_statement(&mut self, bytes: Vec<u8>) -> Result<(), TrajectoryError> {
        let Some(digest) = self.problem_statement_sha256.take() else { return Ok(()) };
        let found = sha256_hex(&bytes);
        if found != digest {
            return Err(TrajectoryError::Json(format!(
                "the problem statement fetched has digest {found}, not {digest}"
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| TrajectoryError::Json(format!("the problem statement {digest} is not UTF-8 text: {e}")))?;
        let task = self.task_def.as_mut().ok_or_else(|| {
            TrajectoryError::Json(format!("the payload names a problem statement ({digest}) but no task"))
        })?;
        task.problem_statement = Some(text);
        Ok(())
    }

    /// The task definition: the recorded run's, or the one carried for base runs.
    pub fn task_def(&self) -> Option<&Task> {
        self.recorded.as_ref().map(|r| &r.task).or(self.task_def.as_ref())
    }

    /// The canonical encoding the digest is taken over.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a payload always serializes")
    }

    /// SHA-256 of the canonical encoding, lowercase hex.
    pub fn digest(&self) -> String {
        sha256_hex(&self.canonical_bytes())
    }

    /// Decode fetched bytes, checking that they are the payload `digest` names.
    pub fn from_fetched(bytes: &[u8], digest: &str) -> Result<TrajectoryPayload, TrajectoryError> {
        let found = sha256_hex(bytes);
        if found != digest {
            return Err(TrajectoryError::Json(format!("fetched bytes have digest {found}, not {digest}")));
        }
        let payload: TrajectoryPayload =
            serde_json::from_slice(bytes).map_err(|e| TrajectoryError::Json(e.to_string()))?;
        if let Some(recorded) = &payload.recorded {
            recorded.validate()?;
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetched_bytes_are_checked_against_their_digest() {
        let p = TrajectoryPayload {
            task: "t".into(),
            length: 2,
            curve: Some(vec![0.5, 0.0]),
            recorded: None,
            task_def: None,
            problem_statement_sha256: None,
            instructions: None,
        };
        let bytes = p.canonical_bytes();
        assert_eq!(TrajectoryPayload::from_fetched(&bytes, &p.digest()).unwrap(), p);
        let mut tampered = bytes.clone();
        tampered[10] ^= 1;
        assert!(TrajectoryPayload::from_fetched(&tampered, &p.digest()).unwrap_err().to_string().contains("digest"));
    }

    #[test]
    fn a_problem_statement_stored_apart_is_named_by_digest_and_filled_in_checked() {
        use crate::trajectory::Evaluator;
        let task = Task {
            id: "t".into(),
            image: "i".into(),
            workdir: "/w".into(),
            evaluator: Evaluator::Command { command: "true".into(), timeout_s: 5 },
            problem_statement: Some("Fix add().".into()),
        };
        let digest = sha256_hex(b"Fix add().");
        let apart = TrajectoryPayload::of_task_with_statement(&task, Some(&digest));
        assert_eq!(apart.task_def.as_ref().unwrap().problem_statement, None);
        let bytes = apart.canonical_bytes();
        assert!(!String::from_utf8_lossy(&bytes).contains("Fix add()"), "the statement is not in the payload");
        let mut fetched = TrajectoryPayload::from_fetched(&bytes, &apart.digest()).unwrap();
        assert!(fetched.fill_problem_statement(b"Fix sub().".to_vec()).unwrap_err().to_string().contains("digest"));
        let mut fetched = TrajectoryPayload::from_fetched(&bytes, &apart.digest()).unwrap();
        fetched.fill_problem_statement(b"Fix add().".to_vec()).unwrap();
        assert_eq!(fetched, TrajectoryPayload::of_task(&task), "filled in, it is the whole payload");
        assert_eq!(TrajectoryPayload::of_task_with_statement(&task, None), TrajectoryPayload::of_task(&task));
    }
}
