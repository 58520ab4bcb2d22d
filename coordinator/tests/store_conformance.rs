//! The store's contract, run against both backends (SQLite in memory and a fresh PostgreSQL
//! database per test). Every scenario drives the store through the coordinator core with a manual
//! clock, so lease expiry is exact.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{
    HeldJob, LeasedJob, ReportVerdict, RunReport, StudyRecord, StudyState, TrajectoryState,
};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store};
use vcurve_coordinator::testing::{TestStore, Tr, no_renderer, spec, step_outcome};
use vcurve_method::schedule::Series;

const T0: i64 = 1_700_000_000_000;

fn timing() -> Timing {
    Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    }
}

fn coordinator(store: &SqlStore) -> (Arc<Coordinator<SqlStore>>, Clock) {
    let clock = Clock::manual(T0);
    (Coordinator::with_clock(store.clone(), timing(), clock.clone(), no_renderer()), clock)
}

fn held(job: &LeasedJob) -> HeldJob {
    HeldJob { key: job.key.clone(), attempt: job.attempt }
}

fn outcome(success: bool) -> RunReport {
    RunReport::Outcome { success, steps: 10, end_type: "submitted".into(), patch_sha256: "abc".into() }
}

async fn launch_one(c: &Coordinator<SqlStore>, length: u32) -> String {
    let (yaml, files) = spec("one", "", &[Tr { id: "a", length, cliff: 23, p: 0.75, labels: "" }]);
    c.launch(&yaml, &files).await.unwrap()
}

async fn lease(c: &Coordinator<SqlStore>, worker: &str, max: u32) -> Vec<LeasedJob> {
    c.lease(worker, max, Duration::ZERO).await.unwrap()
}

#[tokio::test]
async fn admission_and_first_leases() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.trajectories, p.trajectories_admitted, p.pending), (1, 0, 0), "{}", ts.name);
        let w = c.register("w1", 4, &["synthetic".into()], "1.0").await.unwrap();
        let jobs = lease(&c, &w, 4).await;
        assert_eq!(jobs.len(), 4, "{}", ts.name);
        assert!(jobs.iter().all(|j| j.attempt == 1 && j.budget == 100 - j.key.t && j.runner_kind == "synthetic"));
        let p = c.progress(&study).await.unwrap();
        // Screening of T = 40: 9 anchors × 8 seeds, 4 of them leased.
        assert_eq!((p.trajectories_admitted, p.running, p.pending), (1, 4, 68), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_key_accepts_exactly_one_outcome() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 2, &["synthetic".into()], "1.0").await.unwrap();
        let job = lease(&c, &w, 1).await.remove(0);
        assert_eq!(c.report(&w, &held(&job), &outcome(true)).await.unwrap(), ReportVerdict::Accepted);
        // A duplicate, a different outcome, a stale attempt: all ignored.
        assert!(matches!(c.report(&w, &held(&job), &outcome(false)).await.unwrap(), ReportVerdict::Ignored(_)));
        let stale = HeldJob { attempt: job.attempt + 5, ..held(&job) };
        assert!(matches!(c.report(&w, &stale, &outcome(false)).await.unwrap(), ReportVerdict::Ignored(_)));
        // Unknown keys.
        let mut unknown = held(&job);
        unknown.key.trajectory = "nope".into();
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let mut unknown = held(&job);
        unknown.key.t = 3;
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let mut unknown = held(&job);
        unknown.key.study = "no-such-study".into();
        assert!(matches!(c.report(&w, &unknown, &outcome(true)).await.unwrap(), ReportVerdict::Ignored(_)));
        let p = c.progress(&study).await.unwrap();
        assert_eq!(p.done, 1, "{}", ts.name);
        let record = c.store().study(&study).await.unwrap();
        assert_eq!(record.trajectories[0].outcomes.len(), 1);
        ts.finish().await;
    }
}

#[tokio::test]
async fn three_no_outcomes_retire_a_key_and_a_release_does_not_count() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 1, &["synthetic".into()], "1.0").await.unwrap();
        let first = lease(&c, &w, 1).await.remove(0);
        // A release re-issues the same key under a new attempt, without counting.
        assert_eq!(c.release(&w, &[held(&first)]).await.unwrap(), 1);
        let mut attempts = vec![first.attempt];
        for i in 0..3 {
            let job = lease(&c, &w, 1).await.remove(0);
            assert_eq!(job.key, first.key, "{}: the same key is run again", ts.name);
            attempts.push(job.attempt);
            let verdict =
                c.report(&w, &held(&job), &RunReport::NoOutcome { reason: format!("killed {i}") }).await.unwrap();
            assert_eq!(verdict, ReportVerdict::Accepted);
        }
        assert_eq!(attempts, vec![1, 2, 3, 4], "{}", ts.name);
        let p = c.progress(&study).await.unwrap();
        assert_eq!((p.retired, p.done), (1, 0), "{}", ts.name);
        // The retired key is never handed out again.
        let next = lease(&c, &w, 1).await.remove(0);
        assert_ne!(next.key, first.key);
        ts.finish().await;
    }
}

#[tokio::test]
async fn leases_expire_only_without_heartbeats() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        launch_one(&c, 40).await;
        let a = c.register("a", 2, &["synthetic".into()], "1.0").await.unwrap();
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
        let b = c.register("b", 2, &["synthetic".into()], "1.0").await.unwrap();
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
async fn concurrent_leases_never_share_a_key() {
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
            workers.push(c.register(&format!("w{i}"), 16, &["synthetic".into()], "1.0").await.unwrap());
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
async fn cancel_stops_new_leases() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w", 2, &["synthetic".into()], "1.0").await.unwrap();
        assert_eq!(lease(&c, &w, 2).await.len(), 2);
        assert_eq!(c.cancel(&study).await.unwrap(), StudyState::Cancelled);
        assert!(lease(&c, &w, 2).await.is_empty(), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Cancelled);
        assert!(c.progress("no-such-study").await.is_err());
        ts.finish().await;
    }
}

/// Drive a study to the end with deterministic outcomes; return its stored record, study id
/// blanked (exports are a pure function of it).
async fn run_to_end(c: &Coordinator<SqlStore>, study: &str, cliffs: &[(&str, u32)]) -> StudyRecord {
    let w = c.register("w", 8, &["synthetic".into()], "1.0").await.unwrap();
    for _ in 0..10_000 {
        let jobs = lease(c, &w, 8).await;
        if jobs.is_empty() {
            break;
        }
        for job in jobs {
            let cliff = cliffs.iter().find(|(id, _)| *id == job.key.trajectory).unwrap().1;
            let success = step_outcome(cliff, job.key.t, job.key.seed);
            assert_eq!(c.report(&w, &held(&job), &outcome(success)).await.unwrap(), ReportVerdict::Accepted);
        }
    }
    assert_eq!(c.progress(study).await.unwrap().state, StudyState::Done);
    let mut record = c.store().study(study).await.unwrap();
    record.id.clear();
    record
}

#[tokio::test]
async fn a_study_runs_to_the_end_and_both_backends_store_the_same_record() {
    let mut records = Vec::new();
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trs = [
            Tr { id: "cliff", length: 57, cliff: 23, p: 1.0, labels: "j1: 23, j2: 30, j3: none" },
            Tr { id: "late", length: 40, cliff: 38, p: 1.0, labels: "j1: 5" },
        ];
        let (yaml, files) = spec("full", "controls: {sanity: 1, retest: 1, budget_control: 1}\n", &trs);
        let study = c.launch(&yaml, &files).await.unwrap();
        let record = run_to_end(&c, &study, &[("cliff", 23), ("late", 38)]).await;
        assert!(record.trajectories.iter().all(|t| t.state == TrajectoryState::Done), "{}", ts.name);
        let series: HashSet<Series> = record.trajectories[0].outcomes.iter().map(|o| o.0).collect();
        assert!(series.contains(&Series::Retest) && series.contains(&Series::FullBudget), "{}", ts.name);
        records.push(record);
        ts.finish().await;
    }
    assert_eq!(records[0], records[1], "SQLite and PostgreSQL store different records");
}

#[tokio::test]
async fn one_trajectory_reads_as_its_own_study_record() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trs = [
            Tr { id: "first", length: 40, cliff: 20, p: 1.0, labels: "" },
            Tr { id: "second", length: 30, cliff: 10, p: 1.0, labels: "j: 10" },
        ];
        let (yaml, files) = spec("two", "", &trs);
        let study = c.launch(&yaml, &files).await.unwrap();
        run_to_end(&c, &study, &[("first", 20), ("second", 10)]).await;
        let whole = c.store().study(&study).await.unwrap();
        let one = c.store().trajectory(&study, "second").await.unwrap().expect("a known trajectory");
        assert_eq!(one.trajectories.len(), 1, "{}", ts.name);
        assert_eq!(one.spec.trajectories.len(), 1);
        assert_eq!(one.spec.trajectories[0].id, "second");
        assert_eq!(one.trajectories[0], whole.trajectories[1], "{}", ts.name);
        assert!(c.store().trajectory(&study, "third").await.unwrap().is_none());
        assert!(c.store().trajectory("no-such-study", "second").await.is_err());
        ts.finish().await;
    }
}
