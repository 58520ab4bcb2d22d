//! What a parsed spec launches: the study and the recorded runs its trajectories name.

use std::collections::BTreeMap;

use vcurve_record::{Trajectory, TrajectoryPayload};

use crate::StudySpec;

/// A parsed spec with the recorded runs its trajectories name, by digest.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub spec: StudySpec,
    pub recorded: BTreeMap<String, Trajectory>,
}

impl Launch {
    /// What workers fetch for each trajectory, in the spec's order.
    pub fn payloads(&self) -> Vec<TrajectoryPayload> {
        self.spec
            .trajectories
            .iter()
            .map(|t| TrajectoryPayload {
                task: t.task.clone(),
                length: t.length,
                curve: t.curve.clone(),
                recorded: t.recorded.as_ref().and_then(|d| self.recorded.get(d)).cloned(),
                task_def: None,
                problem_statement_sha256: None,
            })
            .collect()
    }
}
