//! Base runs: failed ones become trajectories.

use super::verdicts::judged;
use super::*;
use vcurve_record::jobs::RetiredJobs;

/// A study of the `agent` runner that makes `runs` base runs of the task `calc`.
pub(crate) fn base_run_spec(runs: u32) -> (String, std::collections::BTreeMap<String, String>) {
    let task = serde_json::json!({
        "id": "calc", "image": "vcurve-task-calc:test", "workdir": "/testbed",
        "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}
    });
    let yaml = format!(
        "name: base\nseed: 7\nbudget: 30\nrunner: {{kind: agent, agent: agent, flake_recheck_rate: 0.0}}\n\
         tasks:\n  - task: tasks/calc.json\n    base_runs: {runs}\n"
    );
    (yaml, [("tasks/calc.json".to_string(), task.to_string())].into())
}

#[tokio::test]
pub(crate) async fn every_failed_base_run_becomes_a_trajectory_with_the_tasks_base_runs() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(4);
        let study = c.launch(&yaml, &files).await.unwrap();
        assert_eq!(c.store().study(&study).await.unwrap().state, StudyState::Running, "{}", ts.name);
        let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        assert_eq!(jobs.len(), 4, "{}: the four base runs", ts.name);
        // Each names the task's payload, which carries the task itself.
        let digest = jobs[0].trajectory_digest.clone().expect("a payload");
        let payload = vcurve_record::TrajectoryPayload::from_fetched(&c.file(&digest).await.unwrap(), &digest).unwrap();
        assert_eq!(payload.task_def().map(|t| t.image.as_str()), Some("vcurve-task-calc:test"));
        assert!(jobs.iter().all(|j| j.budget == 30 && j.key.kind() == JobKind::BaseRun));

        for job in &jobs {
            let JobKey::BaseRun { seed, .. } = job.key else { unreachable!() };
            let recorded = vcurve_coordinator::testing::recorded_trajectory("calc", 12 + seed);
            let recorded_digest = vcurve_record::Digest::of(recorded.as_bytes());
            c.upload(&recorded_digest, recorded.as_bytes()).await.unwrap();
            let report = JobReport::Outcome(RunOutcome {
                success: seed == 0,
                steps: 12 + seed,
                end_type: EndType::Submitted,
                patch_sha256: vcurve_record::trajectory::sha256_hex(format!("patch {seed}").as_bytes()),
                judged: if seed == 3 { Judged::EmptyPatch } else { Judged::Evaluated },
                recorded: Some(recorded_digest.into_string()),
            });
            // No trajectory before the last base run of the task has finished.
            assert!(c.store().study(&study).await.unwrap().trajectories.is_empty(), "{}", ts.name);
            assert_eq!(c.report(&w, &held(job), &report).await.unwrap(), ReportVerdict::Accepted);
        }
        let record = c.store().study(&study).await.unwrap();
        let ids: Vec<&str> = record.spec.trajectories.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["calc-base1", "calc-base2", "calc-base3"], "{}: the failed ones", ts.name);
        let t = &record.spec.trajectories[1];
        assert_eq!((t.task.as_str(), t.length, t.base_runs.0.len()), ("calc", 14, 4));
        assert_eq!(t.base_runs.pass_rate(), Some(0.25));
        assert!(record.trajectories.iter().all(|t| t.state == TrajectoryState::Waiting), "{}", ts.name);
        assert_eq!(
            (record.evaluation.unique_patches, record.evaluation.empty_patches, record.evaluation.base_run_outcomes),
            (3, 1, 4),
            "{}: base runs go through the patch cache",
            ts.name
        );
        // They are admitted and replayed like recorded trajectories.
        let jobs = lease(&c, &w, 8).await;
        assert!(!jobs.is_empty() && jobs.iter().all(|j| j.key.kind() == JobKind::Replay), "{}: {jobs:?}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_study_whose_base_runs_all_succeed_ends_with_no_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(2);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        c.report(&w, &held(&jobs[0]), &judged(true, "fix", Judged::Evaluated)).await.unwrap();
        // A base run retired after three no-outcomes counts as none.
        let mut job = jobs[1].clone();
        for _ in 0..3 {
            c.report(&w, &held(&job), &JobReport::no_outcome("killed")).await.unwrap();
            if let Some(again) = lease(&c, &w, 8).await.pop() {
                job = again;
            }
        }
        let record = c.store().study(&study).await.unwrap();
        assert_eq!((record.state, record.trajectories.len()), (StudyState::Done, 0), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_retired_base_run_shows_in_the_progress_and_the_record_with_its_reason() {
    // Issue 24: a base run whose trajectory was over the upload limit was retired while the
    // progress said `0 retired` (it counted continuations alone).
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(2);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        let reason = "PutFile: a file of 70000000 bytes is over the limit of 64 MiB per file";
        let mut job = jobs[1].clone();
        for _ in 0..3 {
            c.report(&w, &held(&job), &JobReport::no_outcome(reason)).await.unwrap();
            if let Some(again) = lease(&c, &w, 8).await.pop() {
                job = again;
            }
        }
        let retired =
            vec![RetiredJobs::of(vcurve_record::jobs::JobKind::BaseRun, [(Some(reason.to_string()), 1)]).unwrap()];
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.retired, &p.retired_jobs), (0, &retired), "{}", ts.name);
        assert_eq!(c.store().study(&study).await.unwrap().retired, retired, "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_run_the_wall_clock_cap_stopped_is_retired_at_once_and_counted_as_capped() {
    // Issue 25: a run killed at the study's run_timeout_s is not run again (the cap would censor
    // it again) and is counted, never retired unseen.
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(2);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        c.report(&w, &held(&jobs[0]), &judged(true, "fix", Judged::Evaluated)).await.unwrap();
        let capped = JobReport::capped("the run took longer than its 60 s and was killed");
        assert_eq!(c.report(&w, &held(&jobs[1]), &capped).await.unwrap(), ReportVerdict::Accepted);
        assert!(lease(&c, &w, 8).await.is_empty(), "{}: a capped run is not run again", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.retired_jobs.len(), 1, "{}", ts.name);
        let r = &p.retired_jobs[0];
        assert_eq!((r.kind, r.count, r.capped()), (vcurve_record::jobs::JobKind::BaseRun, 1, 1), "{}", ts.name);
        assert!(r.reasons[0].reason.ends_with("the run took longer than its 60 s and was killed"), "{r:?}");
        let record = c.store().study(&study).await.unwrap();
        assert_eq!((record.state, &record.retired), (StudyState::Done, &p.retired_jobs), "{}", ts.name);
        ts.finish().await;
    }
}
