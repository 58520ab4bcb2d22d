//! What a parsed spec launches: the study and the recorded runs its trajectories name.

use std::collections::BTreeMap;

use vcurve_record::study::StudySpec;
use vcurve_record::{RecordedPolicy, RunnerSpec, Trajectory, TrajectoryPayload};

/// A parsed spec with the recorded runs its trajectories name, by digest.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub spec: StudySpec,
    pub recorded: BTreeMap<String, Trajectory>,
}

impl Launch {
    /// The recorded run of each decoy that names one (`recorded:`), by decoy id: what the
    /// study's judges read.
    pub fn decoy_runs(&self) -> BTreeMap<String, Trajectory> {
        self.spec
            .decoys
            .iter()
            .filter_map(|d| Some((d.id.clone(), self.recorded.get(d.recorded.as_ref()?)?.clone())))
            .collect()
    }

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
                instructions: None,
            })
            .collect()
    }

    /// What `vcurve launch` warns about the policy the study resumes, one line each (identical
    /// lines of several trajectories once, with their count): where the spec's mini-swe-agent
    /// settings differ from those the recorded runs were made with ([`RecordedPolicy::differences`]),
    /// and a policy at temperature 0, whose curves are near-degenerate.
    pub fn policy_notes(&self) -> Vec<String> {
        let RunnerSpec::MiniSweAgent(options) = &self.spec.runner else {
            return Vec::new();
        };
        let mut notes: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        let mut deterministic = Vec::new();
        for t in &self.spec.trajectories {
            let policy = t.recorded.as_ref().and_then(|d| self.recorded.get(d)).and_then(|r| r.policy.as_ref());
            let resumed = match policy {
                Some(policy) => {
                    for difference in policy.differences(&options.model) {
                        notes.entry(difference).or_default().push(&t.id);
                    }
                    policy.resume_model(&options.model)
                }
                None => options.model.clone(),
            };
            if RecordedPolicy::deterministic(&resumed) {
                deterministic.push(t.id.as_str());
            }
        }
        if self.spec.trajectories.is_empty() && RecordedPolicy::deterministic(&options.model) {
            deterministic.push("every base run");
        }
        let which = |ids: &[&str]| match ids {
            [one] => one.to_string(),
            [first, ..] => format!("{} trajectories ({first}, …)", ids.len()),
            [] => String::new(),
        };
        let mut out: Vec<String> = notes
            .into_iter()
            .map(|(note, ids)| format!("{}: the resumed policy differs from the recorded one: {note}", which(&ids)))
            .collect();
        if !deterministic.is_empty() {
            out.push(format!(
                "{}: the policy samples at temperature 0, so continuations from one prefix are nearly the same run \
                 and the curves near-degenerate (V(h_t) close to 0 or 1); set runner.model.temperature to study \
                 a sampling policy",
                which(&deterministic)
            ));
        }
        out
    }
}
