//! Conversions between `vcurve.v1` wire types and the coordinator's own. The only module that
//! knows both.

use tonic::Status;
use vcurve_method::schedule::Series;
use vcurve_proto::v1;

use crate::model::{ContinuationKey, HeldJob, LeasedJob, Progress, RunReport};

pub fn key_from_wire(key: Option<v1::ContinuationKey>) -> Result<ContinuationKey, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("missing continuation key"))?;
    let series = Series::parse(&key.series).ok_or_else(|| {
        Status::invalid_argument(format!("unknown series {:?} (main, retest, full_budget)", key.series))
    })?;
    Ok(ContinuationKey { study: key.study, trajectory: key.trajectory, series, t: key.t, seed: key.seed })
}

pub fn key_to_wire(key: &ContinuationKey) -> v1::ContinuationKey {
    v1::ContinuationKey {
        study: key.study.clone(),
        trajectory: key.trajectory.clone(),
        series: key.series.as_str().to_string(),
        t: key.t,
        seed: key.seed,
    }
}

pub fn held_from_wire(jobs: Vec<v1::HeldJob>) -> Result<Vec<HeldJob>, Status> {
    jobs.into_iter().map(|j| Ok(HeldJob { key: key_from_wire(j.key)?, attempt: j.attempt })).collect()
}

pub fn held_to_wire(jobs: &[HeldJob]) -> Vec<v1::HeldJob> {
    jobs.iter().map(|j| v1::HeldJob { key: Some(key_to_wire(&j.key)), attempt: j.attempt }).collect()
}

pub fn job_to_wire(job: &LeasedJob) -> v1::Job {
    v1::Job {
        key: Some(key_to_wire(&job.key)),
        attempt: job.attempt,
        budget: job.budget,
        runner: Some(v1::RunnerSpec {
            kind: job.runner_kind.clone(),
            options_json: job.runner_options.clone(),
            study_seed: job.study_seed,
        }),
        trajectory_spec_json: job.payload.clone(),
    }
}

pub fn report_from_wire(result: Option<v1::report_request::Result>) -> Result<RunReport, Status> {
    match result {
        Some(v1::report_request::Result::Outcome(o)) => Ok(RunReport::Outcome {
            success: o.success,
            steps: o.steps,
            end_type: o.end_type,
            patch_sha256: o.patch_sha256,
        }),
        Some(v1::report_request::Result::NoOutcome(n)) => Ok(RunReport::NoOutcome { reason: n.reason }),
        None => Err(Status::invalid_argument("a report needs an outcome or a no-outcome")),
    }
}

pub fn progress_to_wire(p: &Progress) -> v1::Progress {
    v1::Progress {
        study: p.study.clone(),
        name: p.name.clone(),
        state: p.state.as_str().to_string(),
        done: p.done,
        running: p.running,
        pending: p.pending,
        retired: p.retired,
        trajectories: p.trajectories,
        trajectories_done: p.trajectories_done,
        trajectories_admitted: p.trajectories_admitted,
        stages: p
            .stages
            .iter()
            .map(|(s, n)| v1::StageCount { stage: s.as_str().to_string(), trajectories: *n })
            .collect(),
        workers: p
            .workers
            .iter()
            .map(|w| v1::WorkerInfo {
                worker_id: w.id.clone(),
                name: w.name.clone(),
                slots: w.slots,
                running: w.running,
                last_seen_ms_ago: w.last_seen_ms_ago,
            })
            .collect(),
        throughput_per_min: p.throughput_per_min,
        eta_seconds: p.eta_seconds.unwrap_or(-1.0),
    }
}
