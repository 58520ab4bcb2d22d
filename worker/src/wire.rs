//! The one place where `vcurve.v1` wire types meet the worker's own types.

use vcurve_proto::v1;

use crate::runner::{ContinuationKey, HeldJob, JobSpec, RunResult};

/// A leased job that cannot be turned into a [`JobSpec`].
#[derive(Debug)]
pub(crate) struct BadJob {
    /// The job's identity when the wire carried one: it is then reported as a no-outcome.
    pub held: Option<HeldJob>,
    pub reason: String,
}

pub(crate) fn key_from_wire(key: v1::ContinuationKey) -> ContinuationKey {
    ContinuationKey { study: key.study, trajectory: key.trajectory, series: key.series, t: key.t, seed: key.seed }
}

pub(crate) fn key_to_wire(key: &ContinuationKey) -> v1::ContinuationKey {
    v1::ContinuationKey {
        study: key.study.clone(),
        trajectory: key.trajectory.clone(),
        series: key.series.clone(),
        t: key.t,
        seed: key.seed,
    }
}

pub(crate) fn held_to_wire(held: &HeldJob) -> v1::HeldJob {
    v1::HeldJob { key: Some(key_to_wire(&held.key)), attempt: held.attempt }
}

/// `None` for a revocation without a key, which names nothing the worker could hold.
pub(crate) fn held_from_wire(held: v1::HeldJob) -> Option<HeldJob> {
    Some(HeldJob { key: key_from_wire(held.key?), attempt: held.attempt })
}

/// Parse a JSON field of a job; an empty string means `empty`.
fn json_field(name: &str, text: &str, empty: serde_json::Value) -> Result<serde_json::Value, String> {
    if text.trim().is_empty() {
        return Ok(empty);
    }
    serde_json::from_str(text).map_err(|e| format!("job's {name} is not valid JSON: {e}"))
}

pub(crate) fn job_from_wire(job: v1::Job) -> Result<JobSpec, BadJob> {
    let Some(key) = job.key else {
        return Err(BadJob { held: None, reason: "job without a key".to_owned() });
    };
    let held = HeldJob { key: key_from_wire(key), attempt: job.attempt };
    let bad = |reason: String| BadJob { held: Some(held.clone()), reason };
    let Some(runner) = job.runner else {
        return Err(bad("job without a runner spec".to_owned()));
    };
    let options = json_field("runner options_json", &runner.options_json, serde_json::json!({})).map_err(bad)?;
    let trajectory =
        json_field("trajectory_spec_json", &job.trajectory_spec_json, serde_json::Value::Null).map_err(bad)?;
    Ok(JobSpec {
        key: held.key,
        attempt: held.attempt,
        budget: job.budget,
        runner_kind: runner.kind,
        options,
        study_seed: runner.study_seed,
        trajectory,
    })
}

pub(crate) fn report_to_wire(
    worker_id: &str,
    held: &HeldJob,
    result: &RunResult,
    duration_ms: u64,
) -> v1::ReportRequest {
    let result = match result {
        RunResult::Outcome { success, steps, end_type, patch_sha256 } => {
            v1::report_request::Result::Outcome(v1::Outcome {
                success: *success,
                steps: *steps,
                end_type: end_type.clone(),
                patch_sha256: patch_sha256.clone(),
            })
        }
        RunResult::NoOutcome { reason } => {
            v1::report_request::Result::NoOutcome(v1::NoOutcome { reason: reason.clone() })
        }
    };
    v1::ReportRequest {
        worker_id: worker_id.to_owned(),
        key: Some(key_to_wire(&held.key)),
        attempt: held.attempt,
        result: Some(result),
        duration_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_job() -> v1::Job {
        v1::Job {
            key: Some(v1::ContinuationKey {
                study: "s".into(),
                trajectory: "tr".into(),
                series: "main".into(),
                t: 5,
                seed: 2,
            }),
            attempt: 3,
            budget: 95,
            runner: Some(v1::RunnerSpec {
                kind: "synthetic".into(),
                options_json: r#"{"duration_ms": 5}"#.into(),
                study_seed: 7,
            }),
            trajectory_spec_json: r#"{"curve": [0.5]}"#.into(),
        }
    }

    #[test]
    fn job_round_trip() {
        let job = job_from_wire(wire_job()).unwrap();
        assert_eq!(job.key.to_string(), "s/tr/main/5/2");
        assert_eq!((job.attempt, job.budget, job.study_seed), (3, 95, 7));
        assert_eq!(job.options["duration_ms"], 5);
        assert_eq!(job.trajectory["curve"][0], 0.5);
        let held = held_from_wire(held_to_wire(&job.held())).unwrap();
        assert_eq!(held, job.held());
    }

    #[test]
    fn malformed_jobs() {
        let mut j = wire_job();
        j.key = None;
        assert!(job_from_wire(j).unwrap_err().held.is_none());
        let mut j = wire_job();
        j.trajectory_spec_json = "{".into();
        let bad = job_from_wire(j).unwrap_err();
        assert_eq!(bad.held.unwrap().attempt, 3);
        assert!(bad.reason.contains("trajectory_spec_json"));
        let mut j = wire_job();
        j.runner.as_mut().unwrap().options_json = String::new();
        assert_eq!(job_from_wire(j).unwrap().options, serde_json::json!({}));
    }
}
