//! Conversions between `vcurve.v1` wire types and the coordinator's own. The only module that
//! knows both; the conversions it shares with the worker (job keys, held jobs, registry snapshots,
//! a report's enums) are [`vcurve_proto::convert`], checked and turned into statuses here.

use tonic::Status;
use vcurve_method::analyses::Observation;
pub use vcurve_proto::convert::key_to_wire;
use vcurve_proto::convert::{self, KeyError, mismatch_from_wire};
use vcurve_proto::v1;
use vcurve_record::jobs::{CompareLevel, Judged, NonReplayable, Replayed, RunOutcome, clip_command};
use vcurve_record::{Digest, EndType};

use crate::model::{ContinuationKey, HeldJob, JobKey, JobReport, LeasedJob, Locality, Progress};

/// The digest a request's `field` holds; anything else is refused, naming the field.
pub fn digest_from_wire(field: &str, value: &str) -> Result<Digest, Status> {
    Digest::parse(value).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

fn required(field: &str) -> Status {
    Status::invalid_argument(format!("job key without {field}"))
}

pub fn key_from_wire(key: Option<v1::JobKey>) -> Result<JobKey, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("missing job key"))?;
    if key.study.is_empty() {
        return Err(required("study"));
    }
    let key = convert::key_from_wire(key).map_err(|e| match e {
        KeyError::UnknownSeries(series) => {
            Status::invalid_argument(format!("unknown series {series:?} (main, retest, full_budget)"))
        }
        KeyError::UnknownKind(kind) => Status::invalid_argument(format!("job key of unknown kind {kind}")),
    })?;
    let missing = match &key {
        JobKey::Continuation(ContinuationKey { trajectory, .. }) | JobKey::Replay { trajectory, .. } => {
            trajectory.is_empty().then_some("trajectory")
        }
        JobKey::Evaluation { task, .. } if task.is_empty() => Some("task"),
        JobKey::Evaluation { patch_sha256, .. } => patch_sha256.is_empty().then_some("patch_sha256"),
        JobKey::BaseRun { task, .. } | JobKey::Session { task, .. } => task.is_empty().then_some("task"),
        JobKey::ModelCall { call, .. } => call.is_empty().then_some("call"),
    };
    match missing {
        Some(field) => Err(required(field)),
        None => Ok(key),
    }
}

pub fn held_from_wire(jobs: Vec<v1::HeldJob>) -> Result<Vec<HeldJob>, Status> {
    jobs.into_iter().map(|j| Ok(HeldJob { key: key_from_wire(j.key)?, attempt: j.attempt })).collect()
}

pub fn held_to_wire(jobs: &[HeldJob]) -> Vec<v1::HeldJob> {
    jobs.iter().map(convert::held_to_wire).collect()
}

pub fn job_to_wire(job: &LeasedJob) -> v1::Job {
    v1::Job {
        key: Some(key_to_wire(&job.key)),
        attempt: job.attempt,
        budget: job.budget,
        runner: Some(convert::runner_to_wire(&job.runner, job.study_seed)),
        trajectory_digest: job.trajectory_digest.as_ref().map(Digest::to_string).unwrap_or_default(),
        anchors: job.anchors.clone(),
        registry_snapshot: job.registry_snapshot.as_ref().map(convert::registry_snapshot_to_wire),
    }
}

/// A lease request's locality (an empty registry: none). Entries that name no digest are dropped:
/// a worker's hint of what it holds is never worth refusing its request for.
pub fn locality_from_wire(near: Vec<String>, registry: String, pushed: Vec<v1::RegistrySnapshot>) -> Locality {
    Locality {
        near: near.into_iter().filter_map(|d| Digest::try_from(d).ok()).collect(),
        registry: (!registry.is_empty()).then_some(registry),
        pushed: pushed.into_iter().filter_map(|p| convert::registry_snapshot_from_wire(p).ok()).collect(),
    }
}

fn end_type_from_wire(value: i32) -> Result<EndType, Status> {
    convert::end_type_from_wire(value)
        .ok_or_else(|| Status::invalid_argument(format!("an outcome needs an end type (got {value})")))
}

fn judged_from_wire(value: i32) -> Result<Judged, Status> {
    convert::judged_from_wire(value)
        .ok_or_else(|| Status::invalid_argument(format!("an outcome needs to say how it was judged (got {value})")))
}

fn level_from_wire(value: i32) -> Result<CompareLevel, Status> {
    convert::level_from_wire(value).ok_or_else(|| Status::invalid_argument(format!("unknown comparison level {value}")))
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

/// A replay's first edit and first symptom, checked against the trajectory's `length` (its
/// levels, one a step): each a step `1..=T` or never; the symptom measured exactly when the edit
/// is, and a step only after a first edit, strictly later.
fn replay_observations(
    first_edit: Option<u32>,
    first_symptom: Option<u32>,
    length: u32,
) -> Result<(Observation, Observation), Status> {
    use convert::observation_from_wire as from;
    let (edit, symptom) = (from(first_edit), from(first_symptom));
    let bad = |what: String| Err(Status::invalid_argument(format!("a replay report's {what}")));
    for (name, o) in [("first_edit", edit), ("first_symptom", symptom)] {
        if let Observation::At(t) = o
            && t > length
        {
            return bad(format!("{name} = {t} is beyond the {length} steps it replayed"));
        }
    }
    match (edit, symptom) {
        (Observation::NotMeasured, Observation::NotMeasured) => Ok((edit, symptom)),
        (Observation::NotMeasured, _) | (_, Observation::NotMeasured) => {
            bad("first_edit and first_symptom must be measured together".to_owned())
        }
        (Observation::Never, Observation::At(s)) => {
            bad(format!("first_symptom = {s} comes after no first edit (first_edit = 0, never)"))
        }
        (Observation::At(e), Observation::At(s)) if s <= e => {
            bad(format!("first_symptom = {s} is not after first_edit = {e}"))
        }
        _ => Ok((edit, symptom)),
    }
}

/// A digest a report must carry.
fn digest_field(field: &str, digest: String) -> Result<String, Status> {
    if vcurve_record::trajectory::is_digest(&digest) {
        Ok(digest)
    } else {
        Err(Status::invalid_argument(format!("{field} {digest:?} is not a SHA-256 digest")))
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
        Some(R::Capped(c)) => Ok(JobReport::capped(c.reason)),
        Some(R::NonReplayable(n)) => Ok(JobReport::NonReplayable(NonReplayable {
            step: n.step,
            level: level_from_wire(n.level)?,
            reason: n.reason,
            recorded_excerpt: excerpt(n.recorded_excerpt),
            replayed_excerpt: excerpt(n.replayed_excerpt),
            mismatch: mismatch_from_wire(n.mismatch),
            command: (!n.command.is_empty()).then(|| clip_command(&n.command)),
        })),
        Some(R::Replayed(r)) => {
            let length = r.levels.len() as u32;
            let (first_edit, first_symptom) = replay_observations(r.first_edit, r.first_symptom, length)?;
            Ok(JobReport::Replayed(Replayed {
                anchors: r.anchors,
                levels: r.levels.into_iter().map(level_from_wire).collect::<Result<_, _>>()?,
                fingerprints: match r.fingerprints_digest.as_str() {
                    "" => None,
                    d if vcurve_record::trajectory::is_digest(d) => Some(d.to_string()),
                    d => {
                        return Err(Status::invalid_argument(format!(
                            "fingerprints_digest {d:?} is not a SHA-256 digest"
                        )));
                    }
                },
                first_edit,
                first_symptom,
            }))
        }
        Some(R::Evaluated(e)) => Ok(JobReport::Evaluated { resolved: e.resolved }),
        Some(R::SessionRecorded(r)) => {
            Ok(JobReport::SessionRecorded { recorded: digest_field("recorded_digest", r.recorded_digest)? })
        }
        Some(R::CallAnswered(c)) => {
            Ok(JobReport::CallAnswered { output: digest_field("output_digest", c.output_digest)? })
        }
        None => Err(Status::invalid_argument("a report needs a result")),
    }
}

pub fn progress_to_wire(p: &Progress) -> v1::Progress {
    v1::Progress {
        study: p.study.to_string(),
        name: p.name.clone(),
        state: p.state.as_str().to_string(),
        done: p.done,
        running: p.running,
        pending: p.pending,
        retired: p.retired,
        retired_jobs: p.retired_jobs.iter().map(vcurve_proto::convert::retired_to_wire).collect(),
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
        call_stages: p
            .call_stages
            .iter()
            .map(|s| v1::CallStage {
                stage: s.stage.clone(),
                done: s.done,
                running: s.running,
                pending: s.pending,
                retired: s.retired,
                malformed: s.malformed,
                failed: s.failed,
                input_tokens: s.input_tokens,
                output_tokens: s.output_tokens,
                cached_tokens: s.cached_tokens,
                expected: s.expected,
            })
            .collect(),
        waiting_for_endpoints: p.waiting_for_endpoints.clone(),
    }
}

#[cfg(test)]
mod tests {
    use vcurve_record::jobs::MismatchKind;

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

    #[test]
    fn a_locality_drops_what_names_no_digest_and_a_digest_field_is_refused_by_name() {
        let d = Digest::of(b"payload");
        let snapshot =
            |digest: &str| v1::RegistrySnapshot { trajectory_digest: digest.into(), t: 3, image_id: "i".into() };
        let locality = locality_from_wire(
            vec!["not-a-digest".into(), d.to_string(), d.to_uppercase()],
            "reg.test:5000".into(),
            vec![snapshot("not-a-digest"), snapshot(&d)],
        );
        assert_eq!(locality.near, vec![d.clone()]);
        assert_eq!(
            locality.pushed,
            vec![crate::model::RegistrySnapshot { trajectory_digest: d.clone(), t: 3, image_id: "i".into() }]
        );
        assert_eq!(digest_from_wire("digest", &d).unwrap(), d);
        let refused = digest_from_wire("patch_sha256", "abc").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert_eq!(refused.message(), "patch_sha256: \"abc\" is not a SHA-256 digest (64 lowercase hex)");
    }

    fn wire_replayed(first_edit: Option<u32>, first_symptom: Option<u32>) -> Option<v1::report_request::Result> {
        Some(v1::report_request::Result::Replayed(v1::Replayed {
            anchors: vec![0, 5],
            levels: vec![v1::CompareLevel::Exact.into(); 10],
            fingerprints_digest: String::new(),
            first_edit,
            first_symptom,
        }))
    }

    #[test]
    fn a_replay_report_carries_its_first_edit_and_first_symptom_checked_against_its_steps() {
        let observed = |e, s| match report_from_wire(wire_replayed(e, s)) {
            Ok(JobReport::Replayed(r)) => Ok((r.first_edit, r.first_symptom)),
            Ok(other) => panic!("{other:?}"),
            Err(status) => Err(status.message().to_owned()),
        };
        // A worker that does not measure them: not measured, as before.
        assert_eq!(observed(None, None), Ok((Observation::NotMeasured, Observation::NotMeasured)));
        assert_eq!(observed(Some(3), Some(7)), Ok((Observation::At(3), Observation::At(7))));
        assert_eq!(observed(Some(3), Some(0)), Ok((Observation::At(3), Observation::Never)));
        assert_eq!(observed(Some(0), Some(0)), Ok((Observation::Never, Observation::Never)));
        assert_eq!(observed(Some(10), Some(0)), Ok((Observation::At(10), Observation::Never)));
        for (e, s, message) in [
            (Some(11), Some(0), "a replay report's first_edit = 11 is beyond the 10 steps it replayed"),
            (Some(3), Some(11), "a replay report's first_symptom = 11 is beyond the 10 steps it replayed"),
            (Some(3), None, "a replay report's first_edit and first_symptom must be measured together"),
            (None, Some(4), "a replay report's first_edit and first_symptom must be measured together"),
            (Some(0), Some(4), "a replay report's first_symptom = 4 comes after no first edit (first_edit = 0, never)"),
            (Some(5), Some(5), "a replay report's first_symptom = 5 is not after first_edit = 5"),
        ] {
            assert_eq!(observed(e, s), Err(message.to_owned()), "{e:?} {s:?}");
        }
    }
}
