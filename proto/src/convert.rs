//! The conversions between `vcurve.v1` and the recorded job types of `vcurve-record` that the
//! coordinator and the worker share: job keys, held jobs, a job's runner with its typed options,
//! registry snapshots,
//! the enums of a report (end type, judged, comparison level, mismatch kind), and a study's retired
//! jobs. Each side keeps its own policy — the coordinator
//! refuses a malformed key from a worker with its own status text, the worker reports it as a
//! no-outcome — on top of these.

use vcurve_method::analyses::Observation;
use vcurve_method::schedule::Series;
use vcurve_record::jobs::{
    CompareLevel, ContinuationKey, HeldJob, JobKey, JobKind, Judged, MismatchKind, RetiredJobs, RetiredReason,
};
use vcurve_record::runner::InvalidRunnerOptions;
use vcurve_record::snapshot::RegistrySnapshot;
use vcurve_record::{EndType, RunnerSpec};

use crate::v1;

/// Why a wire key names no job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// A continuation's series is none of [`Series`].
    UnknownSeries(String),
    /// The kind is unspecified or unknown.
    UnknownKind(i32),
}

/// The key the wire's key names. Empty fields are taken as they are: the coordinator checks them.
pub fn key_from_wire(key: v1::JobKey) -> Result<JobKey, KeyError> {
    let study = key.study;
    Ok(match v1::JobKind::try_from(key.kind) {
        Ok(v1::JobKind::Continuation) => JobKey::Continuation(ContinuationKey {
            study,
            trajectory: key.trajectory,
            series: Series::parse(&key.series).ok_or(KeyError::UnknownSeries(key.series))?,
            t: key.t,
            seed: key.seed,
        }),
        Ok(v1::JobKind::Replay) => JobKey::Replay { study, trajectory: key.trajectory },
        Ok(v1::JobKind::Evaluation) => {
            JobKey::Evaluation { study, task: key.task, patch_sha256: key.patch_sha256, round: key.seed }
        }
        Ok(v1::JobKind::BaseRun) => JobKey::BaseRun { study, task: key.task, seed: key.seed },
        Ok(v1::JobKind::Session) => JobKey::Session { study, task: key.task },
        Ok(v1::JobKind::ModelCall) => JobKey::ModelCall { study, call: key.call },
        Ok(v1::JobKind::Unspecified) | Err(_) => return Err(KeyError::UnknownKind(key.kind)),
    })
}

pub fn key_to_wire(key: &JobKey) -> v1::JobKey {
    let mut wire = v1::JobKey { study: key.study().to_owned(), ..Default::default() };
    match key {
        JobKey::Continuation(k) => {
            wire.kind = v1::JobKind::Continuation.into();
            wire.trajectory = k.trajectory.clone();
            wire.series = k.series.as_str().to_owned();
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
        JobKey::Session { task, .. } => {
            wire.kind = v1::JobKind::Session.into();
            wire.task = task.clone();
        }
        JobKey::ModelCall { call, .. } => {
            wire.kind = v1::JobKind::ModelCall.into();
            wire.call = call.clone();
        }
    }
    wire
}

/// A study's retired jobs of one kind, for its progress.
pub fn retired_to_wire(retired: &RetiredJobs) -> v1::RetiredJobs {
    let kind = match retired.kind {
        JobKind::Continuation => v1::JobKind::Continuation,
        JobKind::Replay => v1::JobKind::Replay,
        JobKind::Evaluation => v1::JobKind::Evaluation,
        JobKind::BaseRun => v1::JobKind::BaseRun,
        JobKind::Session => v1::JobKind::Session,
        JobKind::ModelCall => v1::JobKind::ModelCall,
    };
    v1::RetiredJobs {
        kind: kind as i32,
        count: retired.count,
        reasons: retired
            .reasons
            .iter()
            .map(|r| v1::RetiredReason { reason: r.reason.clone(), count: r.count })
            .collect(),
    }
}

/// [`retired_to_wire`]'s inverse; `None` for a kind this side does not know.
pub fn retired_from_wire(retired: v1::RetiredJobs) -> Option<RetiredJobs> {
    let kind = match v1::JobKind::try_from(retired.kind).ok()? {
        v1::JobKind::Continuation => JobKind::Continuation,
        v1::JobKind::Replay => JobKind::Replay,
        v1::JobKind::Evaluation => JobKind::Evaluation,
        v1::JobKind::BaseRun => JobKind::BaseRun,
        v1::JobKind::Session => JobKind::Session,
        v1::JobKind::ModelCall => JobKind::ModelCall,
        v1::JobKind::Unspecified => return None,
    };
    Some(RetiredJobs {
        kind,
        count: retired.count,
        reasons: retired.reasons.into_iter().map(|r| RetiredReason { reason: r.reason, count: r.count }).collect(),
    })
}

pub fn held_to_wire(held: &HeldJob) -> v1::HeldJob {
    v1::HeldJob { key: Some(key_to_wire(&held.key)), attempt: held.attempt }
}

pub fn registry_snapshot_to_wire(snapshot: &RegistrySnapshot) -> v1::RegistrySnapshot {
    v1::RegistrySnapshot {
        trajectory_digest: snapshot.trajectory_digest.to_string(),
        t: snapshot.t,
        image_id: snapshot.image_id.clone(),
    }
}

/// A snapshot as the wire names it; refused when its digest is not one.
pub fn registry_snapshot_from_wire(
    snapshot: v1::RegistrySnapshot,
) -> Result<RegistrySnapshot, vcurve_record::InvalidDigest> {
    let trajectory_digest = vcurve_record::Digest::parse(&snapshot.trajectory_digest)?;
    Ok(RegistrySnapshot { trajectory_digest, t: snapshot.t, image_id: snapshot.image_id })
}

/// Why a job's runner cannot be run. Fatal for the job: the same options fail the same way.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("job's runner options is not valid JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("job's runner options: {0}")]
    Invalid(#[from] InvalidRunnerOptions),
}

/// A study's runner on the wire: its kind and its options as a JSON object
/// ([`RunnerSpec::options_json`]), with the study's seed.
pub fn runner_to_wire(runner: &RunnerSpec, study_seed: u64) -> v1::RunnerSpec {
    v1::RunnerSpec { kind: runner.kind().to_owned(), options_json: runner.options_json().to_string(), study_seed }
}

/// The runner a job names, its options parsed once into their typed form (an empty
/// `options_json` is no options, `{}`), and the study's seed.
pub fn runner_from_wire(runner: &v1::RunnerSpec) -> Result<(RunnerSpec, u64), RunnerError> {
    let options = if runner.options_json.trim().is_empty() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(&runner.options_json)?
    };
    Ok((RunnerSpec::parse(&runner.kind, options)?, runner.study_seed))
}

pub fn end_type_to_wire(end: EndType) -> v1::EndType {
    match end {
        EndType::Submitted => v1::EndType::Submitted,
        EndType::StepCap => v1::EndType::StepCap,
        EndType::CostLimit => v1::EndType::CostLimit,
        EndType::ContextWindow => v1::EndType::ContextWindow,
        EndType::FormatError => v1::EndType::FormatError,
        EndType::Error => v1::EndType::Error,
    }
}

/// `None`: unspecified or unknown.
pub fn end_type_from_wire(value: i32) -> Option<EndType> {
    Some(match v1::EndType::try_from(value).ok()? {
        v1::EndType::Submitted => EndType::Submitted,
        v1::EndType::StepCap => EndType::StepCap,
        v1::EndType::CostLimit => EndType::CostLimit,
        v1::EndType::ContextWindow => EndType::ContextWindow,
        v1::EndType::FormatError => EndType::FormatError,
        v1::EndType::Error => EndType::Error,
        v1::EndType::Unspecified => return None,
    })
}

pub fn judged_to_wire(judged: Judged) -> v1::Judged {
    match judged {
        Judged::Evaluated => v1::Judged::Evaluated,
        Judged::Cached => v1::Judged::Cached,
        Judged::EmptyPatch => v1::Judged::EmptyPatch,
    }
}

/// `None`: unspecified or unknown.
pub fn judged_from_wire(value: i32) -> Option<Judged> {
    Some(match v1::Judged::try_from(value).ok()? {
        v1::Judged::Evaluated => Judged::Evaluated,
        v1::Judged::Cached => Judged::Cached,
        v1::Judged::EmptyPatch => Judged::EmptyPatch,
        v1::Judged::Unspecified => return None,
    })
}

pub fn level_to_wire(level: CompareLevel) -> i32 {
    match level {
        CompareLevel::Exact => v1::CompareLevel::Exact,
        CompareLevel::SortedLines => v1::CompareLevel::SortedLines,
        CompareLevel::CharMultiset => v1::CompareLevel::CharMultiset,
        CompareLevel::Fingerprint => v1::CompareLevel::Fingerprint,
    }
    .into()
}

/// `None`: unspecified or unknown.
pub fn level_from_wire(value: i32) -> Option<CompareLevel> {
    Some(match v1::CompareLevel::try_from(value).ok()? {
        v1::CompareLevel::Exact => CompareLevel::Exact,
        v1::CompareLevel::SortedLines => CompareLevel::SortedLines,
        v1::CompareLevel::CharMultiset => CompareLevel::CharMultiset,
        v1::CompareLevel::Fingerprint => CompareLevel::Fingerprint,
        v1::CompareLevel::Unspecified => return None,
    })
}

pub fn mismatch_to_wire(kind: Option<MismatchKind>) -> i32 {
    use v1::non_replayable::Mismatch as M;
    match kind {
        None => M::Unspecified,
        Some(MismatchKind::Observation) => M::Observation,
        Some(MismatchKind::Returncode) => M::Returncode,
        Some(MismatchKind::Timeout) => M::Timeout,
        Some(MismatchKind::ChangedPaths) => M::ChangedPaths,
        Some(MismatchKind::GitDiff) => M::GitDiff,
        Some(MismatchKind::GitStatus) => M::GitStatus,
        Some(MismatchKind::NoOutcome) => M::NoOutcome,
    }
    .into()
}

/// What differed at a mismatch; `None` when the worker did not say (unspecified, or a kind this
/// side does not know).
pub fn mismatch_from_wire(value: i32) -> Option<MismatchKind> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_kind_round_trips() {
        let study = "s".to_owned();
        let keys = [
            JobKey::Continuation(ContinuationKey {
                study: study.clone(),
                trajectory: "tr".into(),
                series: Series::parse("main").unwrap(),
                t: 5,
                seed: 2,
            }),
            JobKey::Replay { study: study.clone(), trajectory: "tr".into() },
            JobKey::Evaluation { study: study.clone(), task: "t".into(), patch_sha256: "p".into(), round: 1 },
            JobKey::BaseRun { study, task: "t".into(), seed: 3 },
        ];
        for key in keys {
            assert_eq!(key_from_wire(key_to_wire(&key)).unwrap(), key);
        }
        assert_eq!(key_from_wire(v1::JobKey::default()), Err(KeyError::UnknownKind(0)));
    }

    #[test]
    fn a_registry_snapshot_round_trips() {
        let digest = vcurve_record::Digest::parse(&"ab".repeat(32)).unwrap();
        let snapshot = RegistrySnapshot { trajectory_digest: digest, t: 4, image_id: "sha256:c".into() };
        assert_eq!(registry_snapshot_from_wire(registry_snapshot_to_wire(&snapshot)), Ok(snapshot));
        let bad = v1::RegistrySnapshot { trajectory_digest: "ab".into(), t: 4, image_id: "sha256:c".into() };
        assert!(registry_snapshot_from_wire(bad).is_err());
    }

    #[test]
    fn a_runner_round_trips_typed_and_bad_options_are_named() {
        use vcurve_record::runner::SyntheticOptions;
        let runners = [
            RunnerSpec::Synthetic(SyntheticOptions { duration_ms: 5, no_outcome_rate: 0.25 }),
            RunnerSpec::parse("agent", serde_json::json!({"agent": "x", "memory_mb": 512})).unwrap(),
            RunnerSpec::parse("mini-swe-agent", serde_json::json!({"model": {"model_name": "m"}})).unwrap(),
            RunnerSpec::Other { kind: "probe".into(), options: serde_json::json!({"duration_ms": 3}) },
        ];
        for runner in runners {
            assert_eq!(runner_from_wire(&runner_to_wire(&runner, 7)).unwrap(), (runner, 7));
        }
        let wire = |kind: &str, options: &str| v1::RunnerSpec {
            kind: kind.into(),
            options_json: options.into(),
            study_seed: 1,
        };
        let (runner, _) = runner_from_wire(&wire("synthetic", "")).unwrap();
        assert_eq!(runner, RunnerSpec::Synthetic(SyntheticOptions::default()), "no options: every default");
        let e = runner_from_wire(&wire("synthetic", "{")).unwrap_err().to_string();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = runner_from_wire(&wire("agent", r#"{"agent": ""}"#)).unwrap_err().to_string();
        assert!(e.contains("invalid agent runner options: agent"), "{e}");
    }

    #[test]
    fn every_enum_round_trips() {
        for end in [
            EndType::Submitted,
            EndType::StepCap,
            EndType::CostLimit,
            EndType::ContextWindow,
            EndType::FormatError,
            EndType::Error,
        ] {
            assert_eq!(end_type_from_wire(end_type_to_wire(end).into()), Some(end));
        }
        for judged in [Judged::Evaluated, Judged::Cached, Judged::EmptyPatch] {
            assert_eq!(judged_from_wire(judged_to_wire(judged).into()), Some(judged));
        }
        for level in
            [CompareLevel::Exact, CompareLevel::SortedLines, CompareLevel::CharMultiset, CompareLevel::Fingerprint]
        {
            assert_eq!(level_from_wire(level_to_wire(level)), Some(level));
        }
        for kind in MismatchKind::ALL {
            assert_eq!(mismatch_from_wire(mismatch_to_wire(Some(kind))), Some(kind));
        }
        assert_eq!(mismatch_from_wire(mismatch_to_wire(None)), None);
        assert_eq!((end_type_from_wire(0), judged_from_wire(0), level_from_wire(0)), (None, None, None));
    }
}

/// A replay's first edit or first symptom on the wire: absent when not measured, 0 for never,
/// else the (1-based) step.
pub fn observation_to_wire(observation: Observation) -> Option<u32> {
    match observation {
        Observation::NotMeasured => None,
        Observation::Never => Some(0),
        Observation::At(t) => Some(t),
    }
}

/// The observation [`observation_to_wire`] wrote. The coordinator checks the steps against the
/// trajectory.
pub fn observation_from_wire(value: Option<u32>) -> Observation {
    match value {
        None => Observation::NotMeasured,
        Some(0) => Observation::Never,
        Some(t) => Observation::At(t),
    }
}
