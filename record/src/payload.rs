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
        }
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
        };
        let bytes = p.canonical_bytes();
        assert_eq!(TrajectoryPayload::from_fetched(&bytes, &p.digest()).unwrap(), p);
        let mut tampered = bytes.clone();
        tampered[10] ^= 1;
        assert!(TrajectoryPayload::from_fetched(&tampered, &p.digest()).unwrap_err().to_string().contains("digest"));
    }
}
