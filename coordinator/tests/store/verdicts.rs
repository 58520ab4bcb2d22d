//! The patch cache: first verdicts, re-checks and flakes.

use super::replays::replayed;
use super::*;

pub(crate) fn judged(success: bool, patch: &str, judged: Judged) -> JobReport {
    JobReport::Outcome(RunOutcome {
        success,
        steps: 10,
        end_type: EndType::Submitted,
        patch_sha256: vcurve_record::trajectory::sha256_hex(patch.as_bytes()),
        judged,
        recorded: None,
    })
}

/// A study of the `agent` runner on one recorded trajectory, replayed, with `options` added to
/// its runner.
pub(crate) async fn launch_agent(c: &Coordinator<SqlStore>, options: &str) -> (vcurve_record::StudyId, String) {
    let (yaml, files) = vcurve_coordinator::testing::recorded_spec("cache", "agent", &[("r", 10)]);
    let yaml = yaml.replace("{kind: agent}", &format!("{{kind: agent, agent: agent, {options}}}"));
    let study = c.launch(&yaml, &files).await.unwrap();
    let w = c.register("w", 8, &["agent:agent".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    let replay = lease(c, &w, 1).await.remove(0);
    assert_eq!(c.report(&w, &held(&replay), &replayed(10)).await.unwrap(), ReportVerdict::Accepted);
    (study, w)
}

#[tokio::test]
pub(crate) async fn the_patch_cache_keeps_first_verdicts_rechecks_patches_and_counts_flakes() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (study, w) = launch_agent(&c, "flake_recheck_rate: 1.0").await;
        let task = "task-r";
        let sha = |p: &str| vcurve_record::trajectory::sha256_hex(p.as_bytes());
        let digest = |p: &str| vcurve_record::Digest::of(p.as_bytes());
        assert_eq!(c.verdict(&study, task, &digest("fix")).await.unwrap(), None, "{}", ts.name);
        // The worker service refuses a patch that is not a digest before it asks (testkit's `grpc`).
        assert!(vcurve_record::Digest::parse("not a digest").is_err());

        let jobs = lease(&c, &w, 3).await;
        assert_eq!(jobs.len(), 3);
        let reports = [
            judged(true, "fix", Judged::Evaluated),
            judged(true, "fix", Judged::Cached),
            judged(false, "", Judged::EmptyPatch),
        ];
        for (job, report) in jobs.iter().zip(&reports) {
            assert_eq!(c.report(&w, &held(job), report).await.unwrap(), ReportVerdict::Accepted, "{}", ts.name);
        }
        assert_eq!(c.verdict(&study, task, &digest("fix")).await.unwrap(), Some(true), "{}", ts.name);
        // Every unique patch is re-checked at rate 1.0: the re-check names the trajectory's payload.
        let recheck =
            JobKey::Evaluation { study: study.to_string(), task: task.into(), patch_sha256: sha("fix"), round: 1 };
        let jobs = lease(&c, &w, 8).await;
        let job = jobs.iter().find(|j| j.key == recheck).unwrap_or_else(|| panic!("{}: no re-check", ts.name));
        assert!(job.trajectory_digest.is_some(), "{}", ts.name);
        // The re-check disagrees: a flake; the first verdict stands.
        c.report(&w, &held(job), &JobReport::Evaluated { resolved: false }).await.unwrap();
        assert_eq!(c.verdict(&study, task, &digest("fix")).await.unwrap(), Some(true));
        let e = c.progress(&study).await.unwrap().evaluation.expect("an agent study counts its evaluations");
        assert_eq!(
            (e.evaluated_runs, e.cache_hits, e.unique_patches, e.evaluations, e.flake_checks, e.flakes),
            (1, 1, 1, 2, 1, 1),
            "{}",
            ts.name
        );
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.evaluation.empty_patches, 1, "{}", ts.name);
        assert_eq!(record.evaluation.flake_rate(), Some(1.0));
        // Above the flake threshold every new patch is re-checked, whatever the draw.
        let other = jobs.iter().find(|j| j.key.kind() == vcurve_coordinator::model::JobKind::Continuation).unwrap();
        c.report(&w, &held(other), &judged(false, "other", Judged::Evaluated)).await.unwrap();
        let rechecks: Vec<_> = c
            .store()
            .task_jobs(&study)
            .await
            .unwrap()
            .into_iter()
            .filter(|j| matches!(j.key, JobKey::Evaluation { round: 1, .. }))
            .collect();
        assert_eq!(rechecks.len(), 2, "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_patch_judged_by_two_workers_at_once_is_a_flake_check_and_synthetic_studies_judge_nothing() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (study, w) = launch_agent(&c, "flake_recheck_rate: 0.0").await;
        let jobs = lease(&c, &w, 2).await;
        c.report(&w, &held(&jobs[0]), &judged(true, "fix", Judged::Evaluated)).await.unwrap();
        c.report(&w, &held(&jobs[1]), &judged(true, "fix", Judged::Evaluated)).await.unwrap();
        let e = c.progress(&study).await.unwrap().evaluation.unwrap();
        assert_eq!((e.evaluated_runs, e.unique_patches, e.flake_checks, e.flakes), (2, 1, 1, 0), "{}", ts.name);
        assert!(c.store().task_jobs(&study).await.unwrap().iter().all(|j| j.key.kind() != JobKind::Evaluation));

        let synthetic = launch_one(&c, 20).await;
        assert_eq!(c.progress(&synthetic).await.unwrap().evaluation, None, "{}", ts.name);
        ts.finish().await;
    }
}
