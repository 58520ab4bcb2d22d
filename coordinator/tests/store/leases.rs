//! Admission and first leases, one outcome a key, no-outcomes, expiry, concurrency, cancel.

use super::*;

#[tokio::test]
pub(crate) async fn admission_and_first_leases() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.trajectories, p.trajectories_admitted, p.pending), (1, 0, 0), "{}", ts.name);
        let w = c.register("w1", 4, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 4).await;
        assert_eq!(jobs.len(), 4, "{}", ts.name);
        assert!(jobs.iter().all(|j| j.attempt == 1 && j.budget == 100 - ck(j).t && j.runner.kind() == "synthetic"));
        let p = c.progress(&study).await.unwrap();
        // Screening of T = 40: 9 anchors × 8 seeds, 4 of them leased.
        assert_eq!((p.trajectories_admitted, p.running, p.pending), (1, 4, 68), "{}", ts.name);
        // The queue depth by stage: the 68 pending, all in the screening stage.
        assert_eq!(
            c.pending_by_stage(&study).await.unwrap(),
            vec![(vcurve_method::schedule::Stage::Screen, 68)],
            "{}",
            ts.name
        );
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn a_key_accepts_exactly_one_outcome() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 2, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let job = lease(&c, &w, 1).await.remove(0);
        assert_eq!(c.report(&w, &held(&job), &outcome(true)).await.unwrap(), ReportVerdict::Accepted);
        // A duplicate, a different outcome, a stale attempt: all ignored.
        assert!(matches!(c.report(&w, &held(&job), &outcome(false)).await.unwrap(), ReportVerdict::Ignored(_)));
        let stale = HeldJob { attempt: job.attempt + 5, ..held(&job) };
        assert!(matches!(c.report(&w, &stale, &outcome(false)).await.unwrap(), ReportVerdict::Ignored(_)));
        // Unknown keys.
        let mut unknown = held(&job);
        ck_mut(&mut unknown).trajectory = "nope".into();
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let mut unknown = held(&job);
        ck_mut(&mut unknown).t = 3;
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let mut unknown = held(&job);
        ck_mut(&mut unknown).study = "no-such-study".into();
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.done, 1, "{}", ts.name);
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.trajectories[0].outcomes.len(), 1);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn three_no_outcomes_retire_a_key_and_a_release_does_not_count() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 1, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let first = lease(&c, &w, 1).await.remove(0);
        // A release re-issues the same key under a new attempt, without counting.
        assert_eq!(c.release(&w, &[held(&first)]).await.unwrap(), 1);
        let mut attempts = vec![first.attempt];
        for i in 0..3 {
            let job = lease(&c, &w, 1).await.remove(0);
            assert_eq!(job.key, first.key, "{}: the same key is run again", ts.name);
            attempts.push(job.attempt);
            let verdict =
                c.report(&w, &held(&job), &JobReport::NoOutcome { reason: format!("killed {i}") }).await.unwrap();
            assert_eq!(verdict, ReportVerdict::Accepted);
        }
        assert_eq!(attempts, vec![1, 2, 3, 4], "{}", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.retired, p.done), (1, 0), "{}", ts.name);
        // With the reason of its last no-outcome.
        let retired = vcurve_record::jobs::RetiredJobs::of(JobKind::Continuation, [(Some("killed 2".into()), 1)]);
        assert_eq!(p.retired_jobs, Vec::from_iter(retired), "{}", ts.name);
        assert_eq!(c.store().study(&study).await.unwrap().retired, p.retired_jobs, "{}", ts.name);
        // The retired key is never handed out again.
        let next = lease(&c, &w, 1).await.remove(0);
        assert_ne!(next.key, first.key);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn leases_expire_only_without_heartbeats() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        launch_one(&c, 40).await;
        let a = c.register("a", 2, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &a, 2).await;
        let held_a: Vec<HeldJob> = jobs.iter().map(held).collect();
        // Ten heartbeats 10 s apart: 100 s, far past the 30 s timeout, and nothing expires.
        for _ in 0..10 {
            clock.advance(Duration::from_secs(10));
            let v = c.heartbeat(&a, &held_a).await.unwrap();
            assert!(v.revoked.is_empty() && !v.unknown_worker, "{}", ts.name);
            assert_eq!(c.store().expire_leases(c.now_ms()).await.unwrap(), 0);
        }
        // A stops heartbeating: after the timeout its keys go to B under a new attempt.
        clock.advance(Duration::from_secs(31));
        let b = c.register("b", 2, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let taken = lease(&c, &b, 2).await;
        let keys_a: HashSet<_> = jobs.iter().map(|j| j.key.clone()).collect();
        assert!(taken.iter().all(|j| keys_a.contains(&j.key) && j.attempt == 2), "{}", ts.name);
        // A's late heartbeat learns its jobs were revoked; its late reports change nothing.
        let v = c.heartbeat(&a, &held_a).await.unwrap();
        assert_eq!(v.revoked.len(), 2, "{}", ts.name);
        for j in &held_a {
            assert!(matches!(c.report(&a, j, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        }
        for j in &taken {
            assert_eq!(c.report(&b, &held(j), &outcome(false)).await.unwrap(), ReportVerdict::Accepted);
        }
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn concurrent_leases_never_share_a_key() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = spec(
            "many",
            "",
            &(0..6)
                .map(|i| Tr { id: ["a", "b", "c", "d", "e", "f"][i], length: 60, cliff: 30, p: 0.5, labels: "" })
                .collect::<Vec<_>>(),
        );
        c.launch(&yaml, &files).await.unwrap();
        let mut workers = Vec::new();
        for i in 0..8 {
            workers.push(
                c.register(&format!("w{i}"), 16, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap(),
            );
        }
        let tasks: Vec<_> = workers
            .iter()
            .map(|w| {
                let (c, w) = (c.clone(), w.clone());
                tokio::spawn(async move { c.lease(&w, 16, Duration::ZERO).await.unwrap() })
            })
            .collect();
        let mut seen = HashSet::new();
        let mut total = 0;
        for t in tasks {
            for job in t.await.unwrap() {
                total += 1;
                assert!(seen.insert(job.key.clone()), "{}: {:?} leased twice", ts.name, job.key);
            }
        }
        // 8 workers × 16 slots: admission lets in enough trajectories to fill every slot.
        assert_eq!(total, 128, "{}", ts.name);
        let leased = c.store().leased().await.unwrap();
        assert_eq!(leased.len(), 128);
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn cancel_stops_new_leases() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w", 2, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(lease(&c, &w, 2).await.len(), 2);
        assert_eq!(c.cancel(&study).await.unwrap(), StudyState::Cancelled);
        assert!(lease(&c, &w, 2).await.is_empty(), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Cancelled);
        assert!(c.progress(&"no-such-study".into()).await.is_err());
        ts.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn within_a_stage_the_trajectory_with_the_longest_expected_chain_is_claimed_first() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "a-fast", length: 40, cliff: 23, p: 0.75, labels: "" },
            Tr { id: "b-slow", length: 40, cliff: 23, p: 0.75, labels: "" },
        ];
        let (yaml, files) = spec("chains", "", &trajectories);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 1_000, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let jobs = lease(&c, &w, 1_000).await;
        // Screening, both: the same keys, the same budgets.
        assert_eq!(jobs.len(), 144, "{}", ts.name);
        // One continuation of each reports: "a-fast"'s after 1 s, "b-slow"'s after 20 s.
        let first = |id: &str| jobs.iter().find(|j| ck(j).trajectory == id).unwrap().clone();
        clock.advance(Duration::from_secs(1));
        c.report(&w, &held(&first("a-fast")), &outcome(true)).await.unwrap();
        clock.advance(Duration::from_secs(19));
        c.report(&w, &held(&first("b-slow")), &outcome(true)).await.unwrap();
        // The rest comes back (the worker is gone); a worker of one slot then gets "b-slow"'s,
        // though "a-fast" was admitted first and is in the same stage.
        clock.advance(Duration::from_secs(31));
        let w2 = c.register("w2", 1, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let next = lease(&c, &w2, 1).await;
        assert_eq!(ck(&next[0]).trajectory, "b-slow", "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().stages.len(), 1, "{}: one stage", ts.name);
        ts.finish().await;
    }
}

/// The claim ranks the trajectories behind the head in its SQL by their expected remaining
/// chain, their stage's steps left at their rate; that rate must be [`durations::rate`]'s, which
/// the estimated end and the head's current barrier read. Four trajectories given timed sums and
/// steps left by hand (one never timed, one timed once and slow, two timed often): the order the
/// claim serves them in is the order `durations::rate` gives, unpooled and pooled, and the two
/// differ (the slow one's own rate puts it second, the study's last).
#[tokio::test]
pub(crate) async fn the_claim_ranks_by_the_rate_the_estimates_read() {
    use vcurve_coordinator::durations::{self, Timed};
    // (id, timed n, ms, budget, remaining steps)
    let rows: [(&str, i64, i64, i64, i64); 4] =
        [("a", 1, 100_000, 10, 130), ("b", 20, 40_000, 100, 400), ("c", 0, 0, 0, 200), ("d", 5, 5_000, 50, 300)];
    let sums = |n, ms, budget| Timed { n, ms, budget, ..Timed::default() };
    let study = rows.iter().fold(Timed::default(), |a, r| a.and(sums(r.1, r.2, r.3)));
    for rs in super::admission::RawStore::both().await {
        for (pooled, hand) in [(false, ["b", "a", "d", "c"]), (true, ["b", "d", "c", "a"])] {
            let (c, clock) = coordinator(&rs.store);
            let trajectories = rows.map(|r| Tr { id: r.0, length: 40, cliff: 23, p: 0.75, labels: "" });
            let (yaml, files) = spec(&format!("rank-{pooled}"), "", &trajectories);
            let study_id = c.launch(&yaml, &files).await.unwrap();
            let caps = ["synthetic".to_string()];
            let w = c.register(&format!("w-{pooled}"), 1_000, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
            // Every trajectory admitted and its screening leased; the worker then goes, and its
            // leases come back.
            assert_eq!(lease(&c, &w, 1_000).await.len(), 4 * 72, "{}", rs.name);
            clock.advance(Duration::from_secs(31));
            for r in &rows {
                sqlx::query(
                    "UPDATE trajectories SET head = 0, timed_n = $1, timed_ms = $2, timed_budget = $3, \
                     remaining_steps = $4 WHERE study = $5 AND id = $6",
                )
                .bind(r.1)
                .bind(r.2)
                .bind(r.3)
                .bind(r.4)
                .bind(study_id.as_str())
                .bind(r.0)
                .execute(&rs.raw)
                .await
                .unwrap();
            }
            sqlx::query("UPDATE studies SET rate_pooled = $1 WHERE id = $2")
                .bind(i64::from(pooled))
                .bind(study_id.as_str())
                .execute(&rs.raw)
                .await
                .unwrap();
            let mut expected: Vec<(f64, &str)> =
                rows.iter().map(|r| (durations::rate(sums(r.1, r.2, r.3), study, pooled) * r.4 as f64, r.0)).collect();
            expected.sort_by(|x, y| y.0.total_cmp(&x.0));
            let expected: Vec<&str> = expected.iter().map(|e| e.1).collect();
            assert_eq!(expected, hand, "the hand-worked order, pooled {pooled}");
            // A worker of as many slots as there are continuations takes them in the claim's order.
            let w2 = c.register(&format!("w2-{pooled}"), 1_000, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
            let mut served: Vec<String> = Vec::new();
            for job in lease(&c, &w2, 1_000).await {
                let id = ck(&job).trajectory.clone();
                if served.last() != Some(&id) {
                    served.push(id);
                }
            }
            assert_eq!(served, hand, "{} pooled {pooled}", rs.name);
        }
        rs.finish().await;
    }
}

/// A study's verdict on whether its trajectories differ in speed (`durations::Spread`, stored for
/// the claim order): two trajectories run to their ends whose continuations take the same times
/// (2 s and 6 s in turn) do not differ; one four times slower than the other does. The verdict
/// is taken at a replan, so a third trajectory reports after the two ended.
#[tokio::test]
pub(crate) async fn a_study_reads_whether_its_trajectories_differ_in_speed_from_the_finished_ones() {
    use sqlx::Row;
    for rs in super::admission::RawStore::both().await {
        for (name, slow, pooled) in [("same", 1, 1i64), ("apart", 4, 0)] {
            let (c, clock) = coordinator(&rs.store);
            let trajectories = ["x", "y", "z"].map(|id| Tr { id, length: 40, cliff: 23, p: 0.75, labels: "" });
            let (yaml, files) = spec(name, "", &trajectories);
            let study = c.launch(&yaml, &files).await.unwrap();
            let caps = ["synthetic".to_string()];
            let w = c.register(&format!("w-{name}"), 1, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
            let verdict = async || {
                sqlx::query("SELECT rate_pooled FROM studies WHERE id = $1")
                    .bind(study.as_str())
                    .fetch_one(&rs.raw)
                    .await
                    .unwrap()
                    .get::<i64, _>("rate_pooled")
            };
            let mut i = 0;
            while c.progress(&study).await.unwrap().trajectories_done < 2 {
                let jobs = lease(&c, &w, 1).await;
                let [job] = &jobs[..] else { panic!("{} {name}: one job, got {}", rs.name, jobs.len()) };
                let k = ck(job);
                let factor = if k.trajectory == "y" { slow } else { 1 };
                clock.advance(Duration::from_secs(if i % 2 == 0 { 2 } else { 6 } * factor));
                i += 1;
                c.report(&w, &held(job), &outcome(step_outcome(23, k.t, k.seed))).await.unwrap();
                // Before two trajectories finished there is nothing to compare.
                assert_eq!(verdict().await, 0, "{} {name}", rs.name);
            }
            // A minute on, the study's sums are read again at "z"'s next report.
            clock.advance(Duration::from_secs(61));
            let w2 = c.register(&format!("w2-{name}"), 1, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
            let jobs = lease(&c, &w2, 1).await;
            assert_eq!(ck(&jobs[0]).trajectory, "z", "{} {name}", rs.name);
            clock.advance(Duration::from_secs(2));
            let k = ck(&jobs[0]);
            c.report(&w2, &held(&jobs[0]), &outcome(step_outcome(23, k.t, k.seed))).await.unwrap();
            assert_eq!(verdict().await, pooled, "{} {name}", rs.name);
        }
        rs.finish().await;
    }
}

#[tokio::test]
pub(crate) async fn after_the_first_curve_demand_admission_queues_ahead_behind_the_head() {
    // Demand admission puts at the head what a slot would idle without. Once the study has a
    // curve, it also queues up to 16 continuations a slot behind the head, ranked by their
    // expected remaining chain; the head still comes first.
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let trajectories = ["z", "a", "b", "c"].map(|id| Tr { id, length: 40, cliff: 23, p: 0.75, labels: "" });
        let (yaml, files) = spec("ahead", "", &trajectories);
        let study = c.launch(&yaml, &files).await.unwrap();
        let caps = ["synthetic".to_string()];
        // One slot: "z" alone until its curve is done; nothing queues ahead before it.
        let w0 = c.register("w0", 1, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        loop {
            let jobs = lease(&c, &w0, 1).await;
            let [job] = &jobs[..] else { panic!("{}: one job, got {}", ts.name, jobs.len()) };
            assert_eq!(ck(job).trajectory, "z", "{}", ts.name);
            assert_eq!(c.progress(&study).await.unwrap().trajectories_admitted, 1, "{}", ts.name);
            clock.advance(Duration::from_secs(10));
            let k = ck(job);
            c.report(&w0, &held(job), &outcome(step_outcome(23, k.t, k.seed))).await.unwrap();
            if c.progress(&study).await.unwrap().trajectories_done == 1 {
                break;
            }
        }
        // 5 more slots: "a" at the head (a slot would idle), "b" queued behind it
        // (72 pending < 6 + 16 × 6), "c" waits (144 pending). Every slot goes to the head.
        let w1 = c.register("w1", 5, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let first = lease(&c, &w1, 5).await;
        assert!(first.iter().all(|j| ck(j).trajectory == "a"), "{}", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.trajectories_admitted, p.pending), (3, 139), "{}", ts.name);
        // 131 more slots, fewer free than pending: "c" is queued behind the head too, not put
        // at it. The rest of the head, then "b" before "c": neither has run, both are
        // screening at the study's rate, and "b" was admitted first.
        let w2 = c.register("w2", 131, &caps, vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        let next = lease(&c, &w2, 131).await;
        let count = |id: &str| next.iter().filter(|j| ck(j).trajectory == id).count();
        assert_eq!((count("a"), count("b"), count("c")), (67, 64, 0), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().trajectories_admitted, 4, "{}", ts.name);
        ts.finish().await;
    }
}
