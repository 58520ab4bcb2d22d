//! The one place where `vcurve.v1` wire types meet the worker's own types, on top of the
//! conversions it shares with the coordinator ([`vcurve_proto::convert`]).

use vcurve_proto::convert::{
    self, KeyError, end_type_to_wire, judged_to_wire, key_to_wire, level_to_wire, mismatch_to_wire, observation_to_wire,
};
use vcurve_proto::v1;

pub(crate) use vcurve_proto::convert::{held_to_wire, registry_snapshot_to_wire};

use crate::runners::seam::{HeldJob, JobKey, JobReport, JobSpec};

/// A leased job that cannot be turned into a [`JobSpec`].
#[derive(Debug)]
pub(crate) struct BadJob {
    /// The job's identity when the wire carried one: it is then reported as a no-outcome.
    pub held: Option<HeldJob>,
    pub reason: String,
}

/// The key of a job, or why the wire's key names none.
pub(crate) fn key_from_wire(key: v1::JobKey) -> Result<JobKey, String> {
    convert::key_from_wire(key).map_err(|e| match e {
        KeyError::UnknownSeries(series) => format!("unknown series {series:?}"),
        KeyError::UnknownKind(kind) => format!("job of unknown kind {kind}"),
    })
}

/// `None` for a revocation without a usable key, which names nothing the worker could hold.
pub(crate) fn held_from_wire(held: v1::HeldJob) -> Option<HeldJob> {
    Some(HeldJob { key: key_from_wire(held.key?).ok()?, attempt: held.attempt })
}

pub(crate) fn job_from_wire(job: v1::Job) -> Result<JobSpec, BadJob> {
    let Some(key) = job.key else {
        return Err(BadJob { held: None, reason: "job without a key".to_owned() });
    };
    let key = key_from_wire(key).map_err(|reason| BadJob { held: None, reason })?;
    let held = HeldJob { key, attempt: job.attempt };
    let bad = |reason: String| BadJob { held: Some(held.clone()), reason };
    let Some(runner) = job.runner else {
        return Err(bad("job without a runner spec".to_owned()));
    };
    // Options a runner cannot run with make the job a no-outcome here, before it is run.
    let (runner, study_seed) = convert::runner_from_wire(&runner).map_err(|e| bad(e.to_string()))?;
    let trajectory_digest = (!job.trajectory_digest.is_empty()).then_some(job.trajectory_digest);
    let registry_snapshot = job
        .registry_snapshot
        .map(convert::registry_snapshot_from_wire)
        .transpose()
        .map_err(|e| bad(format!("job's registry snapshot: {e}")))?;
    Ok(JobSpec {
        key: held.key,
        attempt: held.attempt,
        budget: job.budget,
        runner,
        study_seed,
        trajectory_digest,
        trajectory: None,
        anchors: job.anchors,
        registry_snapshot,
    })
}

pub(crate) fn report_to_wire(
    worker_id: &str,
    held: &HeldJob,
    report: &JobReport,
    duration_ms: u64,
) -> v1::ReportRequest {
    use v1::report_request::Result as R;
    let result = match report {
        JobReport::Outcome(o) => R::Outcome(v1::Outcome {
            success: o.success,
            steps: o.steps,
            end_type: end_type_to_wire(o.end_type).into(),
            patch_sha256: o.patch_sha256.clone(),
            judged: judged_to_wire(o.judged).into(),
            recorded_digest: o.recorded.clone().unwrap_or_default(),
        }),
        JobReport::NoOutcome { reason } => R::NoOutcome(v1::NoOutcome { reason: reason.clone() }),
        JobReport::Capped { reason } => R::Capped(v1::Capped { reason: reason.clone() }),
        JobReport::NonReplayable(n) => R::NonReplayable(v1::NonReplayable {
            step: n.step,
            level: level_to_wire(n.level),
            reason: n.reason.clone(),
            recorded_excerpt: n.recorded_excerpt.clone(),
            replayed_excerpt: n.replayed_excerpt.clone(),
            mismatch: mismatch_to_wire(n.mismatch),
            command: n.command.clone().unwrap_or_default(),
        }),
        JobReport::Replayed(r) => R::Replayed(v1::Replayed {
            anchors: r.anchors.clone(),
            levels: r.levels.iter().copied().map(level_to_wire).collect(),
            fingerprints_digest: r.fingerprints.clone().unwrap_or_default(),
            first_edit: observation_to_wire(r.first_edit),
            first_symptom: observation_to_wire(r.first_symptom),
        }),
        JobReport::Evaluated { resolved } => R::Evaluated(v1::Evaluated { resolved: *resolved }),
        JobReport::SessionRecorded { recorded } => {
            R::SessionRecorded(v1::SessionRecorded { recorded_digest: recorded.clone() })
        }
        JobReport::CallAnswered { output } => R::CallAnswered(v1::CallAnswered { output_digest: output.clone() }),
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
    use vcurve_record::jobs::{CompareLevel, MismatchKind};

    use super::*;

    fn wire_job() -> v1::Job {
        v1::Job {
            key: Some(v1::JobKey {
                kind: v1::JobKind::Continuation.into(),
                study: "s".into(),
                trajectory: "tr".into(),
                series: "main".into(),
                t: 5,
                seed: 2,
                ..Default::default()
            }),
            attempt: 3,
            budget: 95,
            runner: Some(v1::RunnerSpec {
                kind: "synthetic".into(),
                options_json: r#"{"duration_ms": 5}"#.into(),
                study_seed: 7,
            }),
            trajectory_digest: "ab".repeat(32),
            anchors: vec![],
            registry_snapshot: None,
        }
    }

    #[test]
    fn job_round_trip() {
        let job = job_from_wire(wire_job()).unwrap();
        assert_eq!(job.key.to_string(), "s/tr/main/5/2");
        assert_eq!((job.attempt, job.budget, job.study_seed), (3, 95, 7));
        let options = vcurve_record::runner::SyntheticOptions { duration_ms: 5, no_outcome_rate: 0.0 };
        assert_eq!(job.runner, vcurve_record::RunnerSpec::Synthetic(options));
        assert_eq!(job.trajectory_digest.as_deref(), Some("ab".repeat(32).as_str()));
        let held = held_from_wire(held_to_wire(&job.held())).unwrap();
        assert_eq!(held, job.held());
    }

    #[test]
    fn a_non_replayable_report_carries_what_differed_and_the_command() {
        use vcurve_record::jobs::NonReplayable;
        let held = job_from_wire(wire_job()).unwrap().held();
        let report = |mismatch, command: Option<&str>| {
            let n = NonReplayable {
                step: 2,
                level: CompareLevel::CharMultiset,
                reason: "output differs".into(),
                recorded_excerpt: "a".into(),
                replayed_excerpt: "b".into(),
                mismatch,
                command: command.map(str::to_owned),
            };
            match report_to_wire("w", &held, &JobReport::NonReplayable(n), 5).result {
                Some(v1::report_request::Result::NonReplayable(n)) => n,
                other => panic!("{other:?}"),
            }
        };
        let n = report(Some(MismatchKind::Observation), Some("python repro.py"));
        assert_eq!(n.mismatch(), v1::non_replayable::Mismatch::Observation);
        assert_eq!(n.command, "python repro.py");
        let n = report(None, None);
        assert_eq!((n.mismatch(), n.command.as_str()), (v1::non_replayable::Mismatch::Unspecified, ""));
        // Each kind has a value of its own.
        let values: std::collections::BTreeSet<i32> =
            MismatchKind::ALL.iter().map(|&k| mismatch_to_wire(Some(k))).collect();
        assert_eq!(values.len(), MismatchKind::ALL.len());
        assert!(!values.contains(&0));
    }

    #[test]
    fn a_replayed_report_carries_its_first_edit_and_first_symptom_and_leaves_out_what_was_not_measured() {
        use vcurve_method::analyses::Observation;
        use vcurve_record::jobs::Replayed;
        let held = job_from_wire(wire_job()).unwrap().held();
        let wire = |first_edit, first_symptom| {
            let r = Replayed {
                anchors: vec![0],
                levels: vec![CompareLevel::Exact; 9],
                fingerprints: None,
                first_edit,
                first_symptom,
            };
            match report_to_wire("w", &held, &JobReport::Replayed(r), 5).result {
                Some(v1::report_request::Result::Replayed(r)) => (r.first_edit, r.first_symptom),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(wire(Observation::At(4), Observation::At(7)), (Some(4), Some(7)));
        assert_eq!(wire(Observation::Never, Observation::Never), (Some(0), Some(0)));
        assert_eq!(wire(Observation::NotMeasured, Observation::NotMeasured), (None, None));
    }

    #[test]
    fn malformed_jobs() {
        let mut j = wire_job();
        j.key = None;
        assert!(job_from_wire(j).unwrap_err().held.is_none());
        let mut j = wire_job();
        j.runner.as_mut().unwrap().options_json = "{".into();
        let bad = job_from_wire(j).unwrap_err();
        assert_eq!(bad.held.unwrap().attempt, 3);
        assert!(bad.reason.contains("runner options"));
        let mut j = wire_job();
        j.key.as_mut().unwrap().kind = 0;
        assert!(job_from_wire(j).unwrap_err().reason.contains("unknown kind"));
        let mut j = wire_job();
        j.runner.as_mut().unwrap().options_json = String::new();
        let job = job_from_wire(j).unwrap();
        assert_eq!(job.runner, vcurve_record::RunnerSpec::Synthetic(Default::default()));
    }

    /// Options no runner could run with are refused as the job arrives, naming the option: the
    /// job is then reported as a no-outcome with that reason (it never reaches its runner).
    #[test]
    fn bad_runner_options_make_the_job_a_no_outcome_naming_them() {
        let cases = [
            ("synthetic", r#"{"no_outcome_rate": -0.1}"#, "outside [0, 1]"),
            ("synthetic", r#"{"no_outcome_rate": 1.5}"#, "outside [0, 1]"),
            ("synthetic", r#"{"no_outcome_rate": "high"}"#, "invalid synthetic runner options"),
            ("synthetic", r#"{"duration_ms": -5}"#, "invalid synthetic runner options"),
            ("synthetic", "[1, 2]", "invalid synthetic runner options"),
            ("agent", r#"{"command": []}"#, "command"),
            ("mini-swe-agent", r#"{"model": {"model_name": "m", "top_p": 2}}"#, "top_p"),
        ];
        for (kind, options, expected) in cases {
            let mut j = wire_job();
            let runner = j.runner.as_mut().unwrap();
            (runner.kind, runner.options_json) = (kind.into(), options.into());
            let bad = job_from_wire(j).unwrap_err();
            assert_eq!(bad.held.map(|h| h.attempt), Some(3), "{kind} {options}: reported as the job's no-outcome");
            assert!(bad.reason.contains(expected), "{kind} {options}: {}", bad.reason);
        }
        // Unknown option fields of the synthetic runner (the spec's `kind`) are fine; another
        // kind's options are carried as written.
        let mut j = wire_job();
        j.runner.as_mut().unwrap().options_json = r#"{"kind": "synthetic", "duration_ms": 0}"#.into();
        assert!(job_from_wire(j).is_ok());
        let mut j = wire_job();
        let runner = j.runner.as_mut().unwrap();
        (runner.kind, runner.options_json) = ("probe".into(), r#"{"duration_ms": 3}"#.into());
        let expected =
            vcurve_record::RunnerSpec::Other { kind: "probe".into(), options: serde_json::json!({"duration_ms": 3}) };
        assert_eq!(job_from_wire(j).unwrap().runner, expected);
    }
}
