//! Replays, the non-replayable state, evaluations and base runs, and files by digest.

use super::*;

// ------------------------------------------------------------------------------------------------
// Replays, the non-replayable state, evaluations and base runs, and files by digest: a test
// double plays the worker that runs them.
// ------------------------------------------------------------------------------------------------

pub(crate) const DOUBLE: &str = "double";

pub(crate) fn non_replayable(step: u32) -> JobReport {
    JobReport::NonReplayable(vcurve_record::jobs::NonReplayable {
        step,
        level: vcurve_record::jobs::CompareLevel::CharMultiset,
        reason: format!("step {step}: output differs"),
        recorded_excerpt: "3\n".into(),
        replayed_excerpt: "token 9f2c\n".into(),
        mismatch: Some(vcurve_record::jobs::MismatchKind::Observation),
        command: Some("python -c 'import secrets; print(secrets.token_hex(2))'".into()),
    })
}

pub(crate) fn replayed(length: u32) -> JobReport {
    JobReport::Replayed(vcurve_record::jobs::Replayed {
        anchors: vec![0, 5, 10, length - 1],
        levels: vec![vcurve_record::jobs::CompareLevel::Exact; length as usize],
        fingerprints: None,
        ..Default::default()
    })
}

pub(crate) async fn launch_recorded(c: &Coordinator<SqlStore>, trajectories: &[(&str, u32)]) -> vcurve_record::StudyId {
    c.accept_runner_kind(DOUBLE);
    let (yaml, files) = vcurve_coordinator::testing::recorded_spec("recorded", DOUBLE, trajectories);
    c.launch(&yaml, &files).await.unwrap()
}

#[tokio::test]
pub(crate) async fn a_recorded_trajectory_is_replayed_before_any_continuation() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r1", 30)]).await;
        let w = c.register("w", 8, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        assert_eq!(jobs.len(), 1, "{}: only the replay is runnable", ts.name);
        let replay = &jobs[0];
        assert_eq!(replay.key, JobKey::Replay { study: study.to_string(), trajectory: "r1".into() });
        assert_eq!(replay.anchors, vec![0, 5, 10, 15, 20, 25, 29], "{}", ts.name);
        // The job names its payload by digest, and the payload is the recorded run.
        let digest = replay.trajectory_digest.clone().expect("a digest");
        let bytes = c.file(&digest).await.unwrap();
        let payload = vcurve_record::TrajectoryPayload::from_fetched(&bytes, &digest).unwrap();
        assert_eq!(payload.recorded.as_ref().map(|r| r.length()), Some(30));
        assert_eq!(
            c.progress(&study).await.unwrap().stages,
            vec![],
            "{}: a replaying trajectory is in no stage",
            ts.name
        );
        assert_eq!(c.store().study(&study).await.unwrap().trajectories[0].state, TrajectoryState::Replaying);
        // A continuation's report does not fit a replay: refused.
        assert!(c.report(&w, &held(replay), &outcome(true)).await.is_err(), "{}", ts.name);

        assert_eq!(c.report(&w, &held(replay), &replayed(30)).await.unwrap(), ReportVerdict::Accepted);
        let jobs = lease(&c, &w, 8).await;
        assert_eq!(jobs.len(), 8, "{}: screening starts after the replay", ts.name);
        assert!(jobs.iter().all(|j| j.key.kind() == vcurve_coordinator::model::JobKind::Continuation));
        assert!(jobs.iter().all(|j| j.trajectory_digest.as_deref() == Some(digest.as_str())));
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.trajectories[0].state, TrajectoryState::Running);
        assert_eq!(record.trajectories[0].replay.as_ref().map(|r| r.anchors.len()), Some(4));
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn the_first_edit_and_first_symptom_a_replay_measured_are_stored() {
    use vcurve_method::analyses::Observation;
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r1", 12)]).await;
        let w = c.register("w", 1, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let replay = lease(&c, &w, 1).await.remove(0);
        let JobReport::Replayed(mut measured) = replayed(12) else { unreachable!() };
        (measured.first_edit, measured.first_symptom) = (Observation::At(4), Observation::At(9));
        let report = JobReport::Replayed(measured);
        assert_eq!(c.report(&w, &held(&replay), &report).await.unwrap(), ReportVerdict::Accepted);
        let record = c.store().study(&study).await.unwrap();
        // Stored with the rest of the replay's report (replay_json), as the export reads it.
        let stored = record.trajectories[0].replay.as_ref().expect("replayed");
        assert_eq!((stored.first_edit, stored.first_symptom), (Observation::At(4), Observation::At(9)), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_non_replayable_replay_drops_the_trajectory_and_its_export_says_why() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("bad", 12), ("good", 12)]).await;
        let w = c.register("w", 1, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let first = lease(&c, &w, 1).await.remove(0);
        assert_eq!(first.key, JobKey::Replay { study: study.to_string(), trajectory: "bad".into() });
        assert_eq!(c.report(&w, &held(&first), &non_replayable(3)).await.unwrap(), ReportVerdict::Accepted);
        // From now on nothing of "bad" is ever handed out.
        let mut seen = Vec::new();
        for _ in 0..200 {
            let jobs = lease(&c, &w, 1).await;
            let Some(job) = jobs.into_iter().next() else { break };
            assert_eq!(job.key.trajectory(), Some("good"), "{}", ts.name);
            let report = if job.key.kind() == vcurve_coordinator::model::JobKind::Replay {
                replayed(12)
            } else {
                outcome(false)
            };
            assert_eq!(c.report(&w, &held(&job), &report).await.unwrap(), ReportVerdict::Accepted);
            seen.push(job.key);
        }
        assert!(!seen.is_empty());
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.state, p.trajectories_non_replayable), (StudyState::Done, 1), "{}", ts.name);
        let record = c.store().study(&study).await.unwrap();
        let bad = &record.trajectories[0];
        assert_eq!(bad.state, TrajectoryState::NonReplayable);
        assert!(bad.outcomes.is_empty());
        let why = bad.non_replayable.as_ref().expect("a reason");
        assert_eq!((why.step, why.reason.as_str()), (3, "step 3: output differs"));
        assert_eq!(why.mismatch, Some(vcurve_record::jobs::MismatchKind::Observation));
        assert!(why.command.as_deref().is_some_and(|c| c.starts_with("python -c")), "{why:?}");
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_continuation_that_meets_another_state_drops_the_rest_of_its_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 20)]).await;
        let w = c.register("w", 4, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let replay = lease(&c, &w, 1).await.remove(0);
        c.report(&w, &held(&replay), &replayed(20)).await.unwrap();
        let jobs = lease(&c, &w, 4).await;
        assert_eq!(jobs.len(), 4);
        assert_eq!(c.report(&w, &held(&jobs[0]), &outcome(true)).await.unwrap(), ReportVerdict::Accepted);
        assert_eq!(c.report(&w, &held(&jobs[1]), &non_replayable(7)).await.unwrap(), ReportVerdict::Accepted);
        // The other two leases are revoked at the next heartbeat; their late reports change nothing.
        let verdict = c.heartbeat(&w, &[held(&jobs[2]), held(&jobs[3])]).await.unwrap();
        assert_eq!(verdict.revoked.len(), 2, "{}", ts.name);
        assert!(matches!(c.report(&w, &held(&jobs[2]), &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        assert!(lease(&c, &w, 4).await.is_empty(), "{}: nothing more of a dropped trajectory", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.state, p.pending, p.running, p.done), (StudyState::Done, 0, 0, 1), "{}", ts.name);
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.trajectories[0].non_replayable.as_ref().map(|w| w.step), Some(7));
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_replay_without_an_outcome_three_times_drops_the_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let w = c.register("w", 1, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        for i in 0..3 {
            let job = lease(&c, &w, 1).await.remove(0);
            assert_eq!(job.attempt, i + 1);
            c.report(&w, &held(&job), &JobReport::no_outcome("container failed to start")).await.unwrap();
        }
        assert!(lease(&c, &w, 1).await.is_empty());
        let record = c.store().study(&study).await.unwrap();
        let why = record.trajectories[0].non_replayable.clone().expect("dropped");
        assert!(why.reason.contains("no outcome in 3 attempts"), "{}: {}", ts.name, why.reason);
        assert_eq!((why.step, why.mismatch), (0, Some(vcurve_record::jobs::MismatchKind::NoOutcome)));
        assert_eq!(record.state, StudyState::Done);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn evaluations_and_base_runs_are_queued_leased_and_recorded() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let eval = JobKey::Evaluation {
            study: study.to_string(),
            task: "task-r".into(),
            patch_sha256: "ab".repeat(32),
            round: 0,
        };
        let base = JobKey::BaseRun { study: study.to_string(), task: "task-r".into(), seed: 3 };
        assert_eq!(c.enqueue(&[eval.clone(), base.clone(), eval.clone()]).await.unwrap(), 2, "{}", ts.name);
        let continuation = JobKey::Continuation(ContinuationKey {
            study: study.to_string(),
            trajectory: "r".into(),
            series: Series::Main,
            t: 0,
            seed: 0,
        });
        assert!(c.enqueue(&[continuation]).await.is_err(), "{}: continuations come from the schedule", ts.name);
        let w = c.register("w", 8, &[DOUBLE.into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        let kinds: HashSet<_> = jobs.iter().map(|j| j.key.clone()).collect();
        assert!(kinds.contains(&eval) && kinds.contains(&base), "{}: {kinds:?}", ts.name);
        let base_job = jobs.iter().find(|j| j.key == base).unwrap();
        assert_eq!((base_job.budget, base_job.trajectory_digest.as_deref()), (100, None));
        for job in &jobs {
            let report = match &job.key {
                JobKey::Evaluation { .. } => JobReport::Evaluated { resolved: true },
                JobKey::BaseRun { .. } => outcome(false),
                _ => replayed(10),
            };
            // Each kind takes only its own reports.
            if matches!(job.key, JobKey::Evaluation { .. }) {
                assert!(c.report(&w, &held(job), &outcome(true)).await.is_err());
            }
            assert_eq!(c.report(&w, &held(job), &report).await.unwrap(), ReportVerdict::Accepted, "{}", ts.name);
        }
        let task_jobs = c.store().task_jobs(&study).await.unwrap();
        let eval_job = task_jobs.iter().find(|j| j.key == eval).unwrap();
        assert_eq!(
            (eval_job.state.as_str(), &eval_job.result),
            ("done", &Some(JobReport::Evaluated { resolved: true }))
        );
        let base_job = task_jobs.iter().find(|j| j.key == base).unwrap();
        assert_eq!(base_job.result, Some(outcome(false)), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn files_are_kept_by_digest() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let content = b"t,v\n0,0.5\n".to_vec();
        let digest = vcurve_record::Digest::of(&content);
        assert_eq!(c.missing_files(std::slice::from_ref(&digest)).await.unwrap(), vec![digest.clone()]);
        assert!(c.upload(&digest, &content).await.unwrap(), "{}: new", ts.name);
        assert!(!c.upload(&digest, &content).await.unwrap(), "{}: kept once", ts.name);
        assert!(c.missing_files(std::slice::from_ref(&digest)).await.unwrap().is_empty());
        assert_eq!(c.file(&digest).await.unwrap(), content);
        // A digest that does not match the content is refused.
        let err = c.upload(&"0".repeat(64).parse().unwrap(), &content).await.unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");
        ts.finish().await;
    }
}
