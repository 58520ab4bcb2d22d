//! Conversions between `vcurve.v1` wire types and the coordinator's own. The only module that
//! knows both.

use tonic::Status;
use vcurve_method::schedule::Series;
use vcurve_proto::v1;
use vcurve_record::EndType;
use vcurve_record::jobs::{CompareLevel, Judged, MismatchKind, NonReplayable, Replayed, RunOutcome, clip_command};

use crate::model::{ContinuationKey, HeldJob, JobKey, JobReport, LeasedJob, Locality, Progress, RegistrySnapshot};

fn required(field: &str, value: String) -> Result<String, Status> {
    if value.is_empty() { Err(Status::invalid_argument(format!("job key without {field}"))) } else { Ok(value) }
}

pub fn key_from_wire(key: Option<v1::JobKey>) -> Result<JobKey, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("missing job key"))?;
    let study = required("study", key.study)?;
    Ok(match v1::JobKind::try_from(key.kind) {
        Ok(v1::JobKind::Continuation) => {
            let series = Series::parse(&key.series).ok_or_else(|| {
                Status::invalid_argument(format!("unknown series {:?} (main, retest, full_budget)", key.series))
            })?;
            JobKey::Continuation(ContinuationKey {
                study,
                trajectory: required("trajectory", key.trajectory)?,
                series,
                t: key.t,
                seed: key.seed,
            })
        }
        Ok(v1::JobKind::Replay) => JobKey::Replay { study, trajectory: required("trajectory", key.trajectory)? },
        Ok(v1::JobKind::Evaluation) => JobKey::Evaluation {
            study,
            task: required("task", key.task)?,
            patch_sha256: required("patch_sha256", key.patch_sha256)?,
            round: key.seed,
        },
        Ok(v1::JobKind::BaseRun) => JobKey::BaseRun { study, task: required("task", key.task)?, seed: key.seed },
        Ok(v1::JobKind::Unspecified) | Err(_) => {
            return Err(Status::invalid_argument(format!("job key of unknown kind {}", key.kind)));
        }
    })
}

pub fn key_to_wire(key: &JobKey) -> v1::JobKey {
    let mut wire = v1::JobKey { study: key.study().to_string(), ..Default::default() };
    match key {
        JobKey::Continuation(k) => {
            wire.kind = v1::JobKind::Continuation.into();
            wire.trajectory = k.trajectory.clone();
            wire.series = k.series.as_str().to_string();
            wire.t = k.t;
            wire.seed = k.seed;
        }
        JobKey::Replay { trajectory, .. } => {
            wire.kind = v1::JobKind::Replay.into();
            wire.trajectory = trajectory.clone();
        }
        JobKey::Evaluation { task, patch_sha256, round, .. } => {
            wire.kind = v1::JobKind::Evaluation.into();
            wire.task = task.clone();
            wire.patch_sha256 = patch_sha256.clone();
            wire.seed = *round;
        }
        JobKey::BaseRun { task, seed, .. } => {
            wire.kind = v1::JobKind::BaseRun.into();
            wire.task = task.clone();
            wire.seed = *seed;
        }
    }
    wire
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
        trajectory_digest: job.trajectory_digest.clone().unwrap_or_default(),
        anchors: job.anchors.clone(),
        registry_snapshot: job.registry_snapshot.as_ref().map(|s| v1::RegistrySnapshot {
            trajectory_digest: s.trajectory_digest.clone(),
            t: s.t,
            image_id: s.image_id.clone(),
        }),
    }
}

/// A lease request's locality (an empty registry: none).
pub fn locality_from_wire(near: Vec<String>, registry: String, pushed: Vec<v1::RegistrySnapshot>) -> Locality {
    Locality {
        near,
        registry: (!registry.is_empty()).then_some(registry),
        pushed: pushed
            .into_iter()
            .map(|p| RegistrySnapshot { trajectory_digest: p.trajectory_digest, t: p.t, image_id: p.image_id })
            .collect(),
    }
}

fn end_type_from_wire(value: i32) -> Result<EndType, Status> {
    Ok(match v1::EndType::try_from(value) {
        Ok(v1::EndType::Submitted) => EndType::Submitted,
        Ok(v1::EndType::StepCap) => EndType::StepCap,
        Ok(v1::EndType::CostLimit) => EndType::CostLimit,
        Ok(v1::EndType::ContextWindow) => EndType::ContextWindow,
        Ok(v1::EndType::FormatError) => EndType::FormatError,
        Ok(v1::EndType::Error) => EndType::Error,
        Ok(v1::EndType::Unspecified) | Err(_) => {
            return Err(Status::invalid_argument(format!("an outcome needs an end type (got {value})")));
        }
    })
}

fn judged_from_wire(value: i32) -> Result<Judged, Status> {
    Ok(match v1::Judged::try_from(value) {
        Ok(v1::Judged::Evaluated) => Judged::Evaluated,
        Ok(v1::Judged::Cached) => Judged::Cached,
        Ok(v1::Judged::EmptyPatch) => Judged::EmptyPatch,
        Ok(v1::Judged::Unspecified) | Err(_) => {
            return Err(Status::invalid_argument(format!("an outcome needs to say how it was judged (got {value})")));
        }
    })
}

fn level_from_wire(value: i32) -> Result<CompareLevel, Status> {
    Ok(match v1::CompareLevel::try_from(value) {
        Ok(v1::CompareLevel::Exact) => CompareLevel::Exact,
        Ok(v1::CompareLevel::SortedLines) => CompareLevel::SortedLines,
        Ok(v1::CompareLevel::CharMultiset) => CompareLevel::CharMultiset,
        Ok(v1::CompareLevel::Fingerprint) => CompareLevel::Fingerprint,
        Ok(v1::CompareLevel::Unspecified) | Err(_) => {
            return Err(Status::invalid_argument(format!("unknown comparison level {value}")));
        }
    })
}

/// The longest excerpt of an observation a non-replayable report keeps.
pub const MAX_EXCERPT_BYTES: usize = 4096;

fn excerpt(s: String) -> String {
    if s.len() <= MAX_EXCERPT_BYTES {
        return s;
    }
    let mut end = MAX_EXCERPT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// What differed at a mismatch; `None` when the worker did not say (unspecified, or a kind this
/// coordinator does not know: the report stands without it rather than being refused).
fn mismatch_from_wire(value: i32) -> Option<MismatchKind> {
    use v1::non_replayable::Mismatch as M;
    match M::try_from(value).ok()? {
        M::Unspecified => None,
        M::Observation => Some(MismatchKind::Observation),
        M::Returncode => Some(MismatchKind::Returncode),
        M::Timeout => Some(MismatchKind::Timeout),
        M::ChangedPaths => Some(MismatchKind::ChangedPaths),
        M::GitDiff => Some(MismatchKind::GitDiff),
        M::GitStatus => Some(MismatchKind::GitStatus),
        M::NoOutcome => Some(MismatchKind::NoOutcome),
    }
}

pub fn report_from_wire(result: Option<v1::report_request::Result>) -> Result<JobReport, Status> {
    use v1::report_request::Result as R;
    match result {
        Some(R::Outcome(o)) => Ok(JobReport::Outcome(RunOutcome {
            success: o.success,
            steps: o.steps,
            end_type: end_type_from_wire(o.end_type)?,
            patch_sha256: o.patch_sha256,
            judged: judged_from_wire(o.judged)?,
            recorded: match o.recorded_digest.as_str() {
                "" => None,
                d if vcurve_record::trajectory::is_digest(d) => Some(d.to_string()),
                d => return Err(Status::invalid_argument(format!("recorded_digest {d:?} is not a SHA-256 digest"))),
            },
        })),
        Some(R::NoOutcome(n)) => Ok(JobReport::NoOutcome { reason: n.reason }),
        Some(R::NonReplayable(n)) => Ok(JobReport::NonReplayable(NonReplayable {
            step: n.step,
            level: level_from_wire(n.level)?,
            reason: n.reason,
            recorded_excerpt: excerpt(n.recorded_excerpt),
            replayed_excerpt: excerpt(n.replayed_excerpt),
            mismatch: mismatch_from_wire(n.mismatch),
            command: (!n.command.is_empty()).then(|| clip_command(&n.command)),
        })),
        Some(R::Replayed(r)) => Ok(JobReport::Replayed(Replayed {
            anchors: r.anchors,
            levels: r.levels.into_iter().map(level_from_wire).collect::<Result<_, _>>()?,
            fingerprints: match r.fingerprints_digest.as_str() {
                "" => None,
                d if vcurve_record::trajectory::is_digest(d) => Some(d.to_string()),
                d => {
                    return Err(Status::invalid_argument(format!("fingerprints_digest {d:?} is not a SHA-256 digest")));
                }
            },
        })),
        Some(R::Evaluated(e)) => Ok(JobReport::Evaluated { resolved: e.resolved }),
        None => Err(Status::invalid_argument("a report needs a result")),
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
        trajectories_non_replayable: p.trajectories_non_replayable,
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
                capabilities: w.capabilities.clone(),
            })
            .collect(),
        throughput_per_min: p.throughput_per_min,
        eta_seconds: p.eta_seconds.unwrap_or(-1.0),
        waiting_for_runner: p.waiting_for_runner.clone().unwrap_or_default(),
        lease_p50_ms: p.lease_latency.map_or(-1.0, |l| l.p50_ms),
        lease_p99_ms: p.lease_latency.map_or(-1.0, |l| l.p99_ms),
        leases_measured: p.lease_latency.map_or(0, |l| l.leases),
        evaluation: p.evaluation.map(|e| v1::EvaluationStats {
            evaluated_runs: e.evaluated_runs,
            cache_hits: e.cache_hits,
            unique_patches: e.unique_patches,
            evaluations: e.evaluations,
            flake_checks: e.flake_checks,
            flakes: e.flakes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire_non_replayable(mismatch: i32, command: &str) -> Option<v1::report_request::Result> {
        Some(v1::report_request::Result::NonReplayable(v1::NonReplayable {
            step: 4,
            level: v1::CompareLevel::Fingerprint.into(),
            reason: "state fingerprint: git diff differs".into(),
            recorded_excerpt: "+a".into(),
            replayed_excerpt: "+b".into(),
            mismatch,
            command: command.into(),
        }))
    }

    fn non_replayable(result: Option<v1::report_request::Result>) -> NonReplayable {
        match report_from_wire(result).unwrap() {
            JobReport::NonReplayable(n) => n,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_non_replayable_report_keeps_what_differed_and_the_command() {
        let git_diff = v1::non_replayable::Mismatch::GitDiff.into();
        let n = non_replayable(wire_non_replayable(git_diff, "git stash pop"));
        assert_eq!((n.step, n.level), (4, CompareLevel::Fingerprint));
        assert_eq!((n.mismatch, n.command.as_deref()), (Some(MismatchKind::GitDiff), Some("git stash pop")));
        // A worker that does not say, or says what this coordinator does not know: no kind, and
        // the report stands. No command: none.
        for unknown in [v1::non_replayable::Mismatch::Unspecified.into(), 99] {
            let n = non_replayable(wire_non_replayable(unknown, ""));
            assert_eq!((n.mismatch, n.command), (None, None));
        }
        // A long command is clipped like any the record keeps.
        let n = non_replayable(wire_non_replayable(git_diff, &"x".repeat(5000)));
        assert_eq!(n.command.unwrap().chars().count(), vcurve_record::jobs::COMMAND_CHARS + 1);
        // Every kind comes through as itself (the worker's side maps each to its own value).
        let kinds = [
            (v1::non_replayable::Mismatch::Observation, MismatchKind::Observation),
            (v1::non_replayable::Mismatch::Returncode, MismatchKind::Returncode),
            (v1::non_replayable::Mismatch::Timeout, MismatchKind::Timeout),
            (v1::non_replayable::Mismatch::ChangedPaths, MismatchKind::ChangedPaths),
            (v1::non_replayable::Mismatch::GitDiff, MismatchKind::GitDiff),
            (v1::non_replayable::Mismatch::GitStatus, MismatchKind::GitStatus),
            (v1::non_replayable::Mismatch::NoOutcome, MismatchKind::NoOutcome),
        ];
        assert_eq!(kinds.len(), MismatchKind::ALL.len());
        for (wire, kind) in kinds {
            assert_eq!(mismatch_from_wire(wire.into()), Some(kind));
        }
    }
}
