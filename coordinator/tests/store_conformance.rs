//! The store's contract, run against both backends (SQLite in memory and a fresh PostgreSQL
//! database per test). Every scenario drives the store through the coordinator core with a manual
//! clock, so lease expiry is exact.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{
    ContinuationKey, HeldJob, JobKey, JobKind, JobReport, LeasedJob, ReportVerdict, StudyRecord, StudyState,
    TrajectoryState,
};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store, StudyPart};
use vcurve_coordinator::testing::{TestStore, Tr, no_renderer, spec, step_outcome};
use vcurve_method::schedule::Series;
use vcurve_record::EndType;
use vcurve_record::jobs::{Judged, RunOutcome};

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

fn outcome(success: bool) -> JobReport {
    JobReport::Outcome(RunOutcome {
        success,
        steps: 10,
        end_type: EndType::Submitted,
        patch_sha256: "abc".into(),
        judged: Judged::Evaluated,
        recorded: None,
    })
}

/// The continuation key of a leased job.
fn ck(job: &LeasedJob) -> &ContinuationKey {
    job.key.continuation().expect("a continuation")
}

fn ck_mut(held: &mut HeldJob) -> &mut ContinuationKey {
    match &mut held.key {
        JobKey::Continuation(k) => k,
        other => panic!("{other} is not a continuation"),
    }
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
        let w = c.register("w1", 4, &["synthetic".into()], "2.0").await.unwrap();
        let jobs = lease(&c, &w, 4).await;
        assert_eq!(jobs.len(), 4, "{}", ts.name);
        assert!(jobs.iter().all(|j| j.attempt == 1 && j.budget == 100 - ck(j).t && j.runner_kind == "synthetic"));
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
async fn a_key_accepts_exactly_one_outcome() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 2, &["synthetic".into()], "2.0").await.unwrap();
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
async fn three_no_outcomes_retire_a_key_and_a_release_does_not_count() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        let w = c.register("w1", 1, &["synthetic".into()], "2.0").await.unwrap();
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
        let a = c.register("a", 2, &["synthetic".into()], "2.0").await.unwrap();
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
        let b = c.register("b", 2, &["synthetic".into()], "2.0").await.unwrap();
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
            workers.push(c.register(&format!("w{i}"), 16, &["synthetic".into()], "2.0").await.unwrap());
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
        let w = c.register("w", 2, &["synthetic".into()], "2.0").await.unwrap();
        assert_eq!(lease(&c, &w, 2).await.len(), 2);
        assert_eq!(c.cancel(&study).await.unwrap(), StudyState::Cancelled);
        assert!(lease(&c, &w, 2).await.is_empty(), "{}", ts.name);
        assert_eq!(c.progress(&study).await.unwrap().state, StudyState::Cancelled);
        assert!(c.progress("no-such-study").await.is_err());
        ts.finish().await;
    }
}

/// Progress, read from the counters the transactions keep, agrees with the stored rows.
async fn assert_progress_counts(c: &Coordinator<SqlStore>, study: &str) {
    let p = c.progress(study).await.unwrap();
    let record = c.store().study(study).await.unwrap();
    let finished: usize = record.trajectories.iter().map(|t| t.outcomes.len()).sum();
    let retired: usize = record
        .trajectories
        .iter()
        .flat_map(|t| &t.outcomes)
        .filter(|o| o.3 == vcurve_method::schedule::Outcome::Retired)
        .count();
    assert_eq!((p.done + p.retired, p.retired), (finished as u64, retired as u64));
    let leased = c.store().leased().await.unwrap().iter().filter(|(k, _, _)| k.study == study).count();
    assert_eq!(p.running, leased as u64);
}

/// Drive a study to the end with deterministic outcomes; return its stored record, study id
/// blanked (exports are a pure function of it).
async fn run_to_end(c: &Coordinator<SqlStore>, study: &str, cliffs: &[(&str, u32)]) -> StudyRecord {
    let w = c.register("w", 8, &["synthetic".into()], "2.0").await.unwrap();
    for _ in 0..10_000 {
        let jobs = lease(c, &w, 8).await;
        if jobs.is_empty() {
            break;
        }
        assert_progress_counts(c, study).await;
        for job in jobs {
            let cliff = cliffs.iter().find(|(id, _)| *id == ck(&job).trajectory).unwrap().1;
            let success = step_outcome(cliff, ck(&job).t, ck(&job).seed);
            assert_eq!(c.report(&w, &held(&job), &outcome(success)).await.unwrap(), ReportVerdict::Accepted);
        }
    }
    assert_eq!(c.progress(study).await.unwrap().state, StudyState::Done);
    assert_progress_counts(c, study).await;
    let mut record = c.store().study(study).await.unwrap();
    record.id.clear();
    record
}

/// Two stores (two coordinators' worth) on one database, each leasing and reporting in turn on the
/// same trajectories: each store's replan cache must notice the other's reports (the counters
/// under the row lock) and the record must equal one store's run alone.
#[tokio::test]
async fn two_stores_reporting_on_the_same_trajectories_keep_their_replans_right() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.sqlite").display());
    let (a, b) = (SqlStore::connect(&url).await.unwrap(), SqlStore::connect(&url).await.unwrap());
    let ((ca, _), (cb, _)) = (coordinator(&a), coordinator(&b));
    let trs = [
        Tr { id: "cliff", length: 57, cliff: 23, p: 1.0, labels: "j1: 23" },
        Tr { id: "late", length: 40, cliff: 38, p: 1.0, labels: "" },
    ];
    let cliffs = [("cliff", 23), ("late", 38)];
    let (yaml, files) = spec("shared", "", &trs);
    let study = ca.launch(&yaml, &files).await.unwrap();
    let wa = ca.register("wa", 3, &["synthetic".into()], "2.0").await.unwrap();
    let wb = cb.register("wb", 3, &["synthetic".into()], "2.0").await.unwrap();
    for turn in 0..10_000u32 {
        // Leases alternate; each job is reported through one store or the other in a fixed pattern.
        let (c, w) = if turn.is_multiple_of(2) { (&ca, &wa) } else { (&cb, &wb) };
        let jobs = lease(c, w, 3).await;
        if jobs.is_empty() && ca.progress(&study).await.unwrap().state == StudyState::Done {
            break;
        }
        for (i, job) in jobs.iter().enumerate() {
            let cliff = cliffs.iter().find(|(id, _)| *id == ck(job).trajectory).unwrap().1;
            let success = step_outcome(cliff, ck(job).t, ck(job).seed);
            // The other store reports every second job: the reporting worker is the lessee, but
            // the store (and its cache) differs.
            let reporter = if (turn + i as u32).is_multiple_of(2) {
                c
            } else if std::ptr::eq(c, &ca) {
                &cb
            } else {
                &ca
            };
            assert_eq!(reporter.report(w, &held(job), &outcome(success)).await.unwrap(), ReportVerdict::Accepted);
        }
    }
    assert_eq!(ca.progress(&study).await.unwrap().state, StudyState::Done);
    let mut shared = a.study(&study).await.unwrap();
    shared.id.clear();

    let alone = TestStore::sqlite().await;
    let (c, _) = coordinator(&alone.store);
    let study = c.launch(&yaml, &files).await.unwrap();
    let record = run_to_end(&c, &study, &cliffs).await;
    let keys = |r: &StudyRecord| -> Vec<_> { r.trajectories.iter().map(|t| t.outcomes.clone()).collect() };
    assert_eq!(keys(&shared), keys(&record), "the shared run asked for other continuations");
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

/// Every part `study_parts` sends, and whether the read ended without an error.
async fn parts_of(store: &SqlStore, study: &str) -> (Vec<StudyPart>, Result<(), String>) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel(2);
    let read = store.study_parts(study, sender);
    let collect = async {
        let mut parts = Vec::new();
        while let Some(p) = receiver.recv().await {
            parts.push(p);
        }
        parts
    };
    let (read, parts) = tokio::join!(read, collect);
    (parts, read.map_err(|e| e.to_string()))
}

#[tokio::test]
async fn a_study_read_in_parts_is_its_record_head_first_then_each_trajectory_in_order() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        // Ids out of alphabetical order: the parts follow the spec's order, not the ids'.
        let trs = [
            Tr { id: "zeta", length: 40, cliff: 20, p: 1.0, labels: "" },
            Tr { id: "alpha", length: 30, cliff: 10, p: 0.75, labels: "j: 10" },
            Tr { id: "mid", length: 35, cliff: 30, p: 1.0, labels: "" },
        ];
        let (yaml, files) = spec("parts", "controls: {sanity: 1, retest: 1}\n", &trs);
        let study = c.launch(&yaml, &files).await.unwrap();
        // Partway: some outcomes in, the study still running.
        let w = c.register("w", 8, &["synthetic".into()], "2.0").await.unwrap();
        for _ in 0..5 {
            for job in lease(&c, &w, 8).await {
                let success = step_outcome(20, ck(&job).t, ck(&job).seed);
                c.report(&w, &held(&job), &outcome(success)).await.unwrap();
            }
        }
        let whole = c.store().study(&study).await.unwrap();
        assert!(whole.trajectories.iter().map(|t| t.outcomes.len()).sum::<usize>() >= 30, "{}", ts.name);
        let (parts, read) = parts_of(&ts.store, &study).await;
        read.unwrap();
        let mut parts = parts.into_iter();
        let Some(StudyPart::Head(head)) = parts.next() else { panic!("{}: the head does not come first", ts.name) };
        let trajectories: Vec<_> = parts
            .map(|p| match p {
                StudyPart::Trajectory(t) => *t,
                StudyPart::Head(_) => panic!("{}: a second head", ts.name),
            })
            .collect();
        assert!(head.trajectories.is_empty(), "{}", ts.name);
        assert_eq!(StudyRecord { trajectories, ..*head }, whole, "{}", ts.name);
        assert_eq!(whole.trajectories.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["zeta", "alpha", "mid"]);

        // An unknown study is an error; a receiver that goes away ends the read quietly.
        let (parts, read) = parts_of(&ts.store, "no-such-study").await;
        assert!(parts.is_empty() && read.unwrap_err().contains("no-such-study"), "{}", ts.name);
        let (sender, mut receiver) = tokio::sync::mpsc::channel(1);
        let read = ts.store.study_parts(&study, sender);
        let take_one = async move { receiver.recv().await.is_some() };
        let (read, got) = tokio::join!(read, take_one);
        assert!(got && read.is_ok(), "{}: {read:?}", ts.name);
        // The store still serves after a read that stopped halfway (its transaction ended).
        assert_eq!(c.store().study(&study).await.unwrap(), whole, "{}", ts.name);
        ts.finish().await;
    }
}

// ------------------------------------------------------------------------------------------------
// Replays, the non-replayable state, evaluations and base runs, and files by digest: a test
// double plays the worker that runs them.
// ------------------------------------------------------------------------------------------------

const DOUBLE: &str = "double";

fn non_replayable(step: u32) -> JobReport {
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

fn replayed(length: u32) -> JobReport {
    JobReport::Replayed(vcurve_record::jobs::Replayed {
        anchors: vec![0, 5, 10, length - 1],
        levels: vec![vcurve_record::jobs::CompareLevel::Exact; length as usize],
        fingerprints: None,
    })
}

async fn launch_recorded(c: &Coordinator<SqlStore>, trajectories: &[(&str, u32)]) -> String {
    c.accept_runner_kind(DOUBLE);
    let (yaml, files) = vcurve_coordinator::testing::recorded_spec("recorded", DOUBLE, trajectories);
    c.launch(&yaml, &files).await.unwrap()
}

#[tokio::test]
async fn a_recorded_trajectory_is_replayed_before_any_continuation() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r1", 30)]).await;
        let w = c.register("w", 8, &[DOUBLE.into()], "2.0").await.unwrap();
        let jobs = lease(&c, &w, 8).await;
        assert_eq!(jobs.len(), 1, "{}: only the replay is runnable", ts.name);
        let replay = &jobs[0];
        assert_eq!(replay.key, JobKey::Replay { study: study.clone(), trajectory: "r1".into() });
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
async fn a_non_replayable_replay_drops_the_trajectory_and_its_export_says_why() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("bad", 12), ("good", 12)]).await;
        let w = c.register("w", 1, &[DOUBLE.into()], "2.0").await.unwrap();
        let first = lease(&c, &w, 1).await.remove(0);
        assert_eq!(first.key, JobKey::Replay { study: study.clone(), trajectory: "bad".into() });
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
async fn a_continuation_that_meets_another_state_drops_the_rest_of_its_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 20)]).await;
        let w = c.register("w", 4, &[DOUBLE.into()], "2.0").await.unwrap();
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
async fn a_replay_without_an_outcome_three_times_drops_the_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let w = c.register("w", 1, &[DOUBLE.into()], "2.0").await.unwrap();
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
async fn evaluations_and_base_runs_are_queued_leased_and_recorded() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let eval =
            JobKey::Evaluation { study: study.clone(), task: "task-r".into(), patch_sha256: "ab".repeat(32), round: 0 };
        let base = JobKey::BaseRun { study: study.clone(), task: "task-r".into(), seed: 3 };
        assert_eq!(c.enqueue(&[eval.clone(), base.clone(), eval.clone()]).await.unwrap(), 2, "{}", ts.name);
        let continuation = JobKey::Continuation(ContinuationKey {
            study: study.clone(),
            trajectory: "r".into(),
            series: Series::Main,
            t: 0,
            seed: 0,
        });
        assert!(c.enqueue(&[continuation]).await.is_err(), "{}: continuations come from the schedule", ts.name);
        let w = c.register("w", 8, &[DOUBLE.into()], "2.0").await.unwrap();
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
async fn files_are_kept_by_digest() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let content = b"t,v\n0,0.5\n".to_vec();
        let digest = vcurve_record::trajectory::sha256_hex(&content);
        assert_eq!(c.missing_files(std::slice::from_ref(&digest)).await.unwrap(), vec![digest.clone()]);
        assert!(c.upload(&digest, &content).await.unwrap(), "{}: new", ts.name);
        assert!(!c.upload(&digest, &content).await.unwrap(), "{}: kept once", ts.name);
        assert!(c.missing_files(std::slice::from_ref(&digest)).await.unwrap().is_empty());
        assert_eq!(c.file(&digest).await.unwrap(), content);
        // A digest that does not match the content is refused.
        let err = c.upload(&"0".repeat(64), &content).await.unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");
        ts.finish().await;
    }
}

// ------------------------------------------------------------------------------------------------
// Misconfiguration caught at launch, and honest progress figures.
// ------------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_runner_kind_no_build_offers_is_refused_at_launch() {
    let ts = TestStore::sqlite().await;
    let (c, _) = coordinator(&ts.store);
    let (yaml, files) = spec("docker", "", &[Tr { id: "a", length: 20, cliff: 5, p: 1.0, labels: "" }]);
    let yaml = yaml.replace("kind: synthetic, duration_ms: 0", "kind: docker");
    let err = c.launch(&yaml, &files).await.unwrap_err().to_string();
    assert!(
        err.contains(
            "runner.kind = \"docker\" is not a runner this build offers (it offers: agent, mini-swe-agent, synthetic)"
        ),
        "{err}"
    );
    assert!(c.store().list_studies().await.unwrap().is_empty(), "nothing was stored");
    ts.finish().await;
}

#[tokio::test]
async fn progress_says_when_no_live_worker_offers_the_studys_runner() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let study = launch_recorded(&c, &[("r", 10)]).await;
        let other = c.register("synthetic-only", 2, &["synthetic".into()], "2.0").await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner.as_deref(), Some(DOUBLE), "{}", ts.name);
        let w = c.register("double", 2, &[DOUBLE.into()], "2.0").await.unwrap();
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner, None, "{}", ts.name);
        // A worker that stopped heartbeating is not live.
        clock.advance(Duration::from_secs(31));
        let _ = (w, other);
        assert_eq!(c.progress(&study).await.unwrap().waiting_for_runner.as_deref(), Some(DOUBLE), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn throughput_is_over_the_time_the_study_ran_and_lease_latency_is_measured() {
    for ts in TestStore::both().await {
        let (c, clock) = coordinator(&ts.store);
        let study = launch_one(&c, 40).await;
        assert_eq!(c.progress(&study).await.unwrap().lease_latency, None, "{}: not measured yet", ts.name);
        let w = c.register("w", 10, &["synthetic".into()], "2.0").await.unwrap();
        clock.advance(Duration::from_secs(3));
        for job in lease(&c, &w, 10).await {
            c.report(&w, &held(&job), &outcome(true)).await.unwrap();
        }
        clock.advance(Duration::from_secs(3));
        // 10 outcomes 6 s into the study: 100 per minute (not 10 / 5 minutes = 2).
        let p = c.progress(&study).await.unwrap();
        assert!((p.throughput_per_min - 100.0).abs() < 1e-9, "{}: {}", ts.name, p.throughput_per_min);
        let latency = p.lease_latency.expect("measured");
        assert_eq!(latency.leases, 1, "{}", ts.name);
        assert!(latency.p50_ms >= 0.0 && latency.p99_ms >= latency.p50_ms);
        ts.finish().await;
    }
}

// ------------------------------------------------------------------------------------------------
// Admission under concurrency: many leases at once, controls on. A second connection reads the
// admission ranks, which the store's API does not show.
// ------------------------------------------------------------------------------------------------

/// A store on a fresh database with a second connection to it: SQLite in a file (an in-memory
/// database has one connection only), or a new PostgreSQL database.
struct RawStore {
    name: &'static str,
    store: SqlStore,
    raw: sqlx::AnyPool,
    _dir: Option<tempfile::TempDir>,
    /// The PostgreSQL server's admin URL and the database to drop at the end.
    cleanup: Option<(String, String)>,
}

impl RawStore {
    async fn both() -> Vec<RawStore> {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let sqlite = format!("sqlite://{}", dir.path().join("store.sqlite").display());
        let store = SqlStore::connect(&sqlite).await.unwrap();
        let raw = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&sqlite).await.unwrap();
        let mut stores = vec![RawStore { name: "sqlite", store, raw, _dir: Some(dir), cleanup: None }];

        let Some(admin) = vcurve_testkit::require::optional(vcurve_testkit::require::Service::Postgres) else {
            return stores;
        };
        let db = format!("vcurve_test_{}", uuid::Uuid::new_v4().simple());
        let admin_pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&admin).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&admin_pool).await.unwrap();
        admin_pool.close().await;
        let url = format!("{}/{db}", admin.rsplit_once('/').expect("URL with a database").0);
        let store = SqlStore::connect(&url).await.unwrap();
        let raw = sqlx::any::AnyPoolOptions::new().max_connections(2).connect(&url).await.unwrap();
        stores.push(RawStore { name: "postgres", store, raw, _dir: None, cleanup: Some((admin, db)) });
        stores
    }

    /// Each trajectory of a study in spec order: its id and admission rank (`None`: not admitted).
    async fn ranks(&self, study: &str) -> Vec<(String, Option<i64>)> {
        use sqlx::Row;
        sqlx::query("SELECT id, admit_order FROM trajectories WHERE study = $1 ORDER BY ord")
            .bind(study)
            .fetch_all(&self.raw)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("id"), r.get("admit_order")))
            .collect()
    }

    async fn finish(self) {
        let RawStore { store, raw, cleanup, .. } = self;
        raw.close().await;
        drop(store);
        if let Some((admin, db)) = cleanup
            && let Ok(pool) = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&admin).await
        {
            let sql = format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await;
        }
    }
}

/// Eight trajectories, the second doomed (its base runs all failed), with controls on the first
/// ones: `sanity` on 1, `retest` on 2, `budget_control` on 1.
fn controls_study(name: &str, admission: &str) -> (String, std::collections::BTreeMap<String, String>) {
    let ids = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"];
    let trs: Vec<Tr> = ids.iter().map(|id| Tr { id, length: 30, cliff: 12, p: 0.8, labels: "" }).collect();
    let extra = format!("controls: {{sanity: 1, retest: 2, budget_control: 1}}\nadmission: {admission}\n");
    let (yaml, files) = spec(name, &extra, &trs);
    let doomed = "    base_runs: [{success: false, steps: 100}, {success: false, steps: 100}]\n";
    let yaml = yaml.replace("curve: curves/t1.csv\n", &format!("curve: curves/t1.csv\n{doomed}"));
    (yaml, files)
}

/// The controls [`controls_study`] configures, by trajectory: the first non-doomed trajectories in
/// spec order (docs/method.md §7).
fn expected_controls(id: &str) -> vcurve_method::schedule::Controls {
    let first = ["t0", "t2"].iter().position(|t| *t == id);
    vcurve_method::schedule::Controls {
        sanity: first == Some(0),
        retest: first.is_some(),
        budget_control: first == Some(0),
    }
}

/// Many workers lease at once, again and again, while they report what they ran: whatever the
/// interleaving, admission ranks are unique and follow the spec's order of the trajectories that
/// are not doomed, the batch rule's in-flight limit holds, and exactly the configured trajectories
/// carry each control.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_leases_admit_with_unique_ranks_and_exactly_the_configured_controls() {
    const WORKERS: usize = 24;
    const SLOTS: u32 = 3;
    const ROUNDS: usize = 5;
    const WAVES: usize = 3;
    for rs in RawStore::both().await {
        let (c, clock) = coordinator(&rs.store);
        for (mode, admission) in
            [("demand", "{mode: demand}"), ("batch", "{mode: batch, batch_size: 2, pipeline_threshold: 1}")]
        {
            for round in 0..ROUNDS {
                let what = format!("{}, {mode} admission, round {round}", rs.name);
                let (yaml, files) = controls_study(&format!("race-{mode}-{round}"), admission);
                let study = c.launch(&yaml, &files).await.unwrap();
                let mut workers = Vec::new();
                for i in 0..WORKERS {
                    workers.push(c.register(&format!("w{i}"), SLOTS, &["synthetic".into()], "2.0").await.unwrap());
                }
                // Each worker leases at the same moment as the others (a barrier per wave), then
                // reports what it got while the others are still leasing.
                let barrier = Arc::new(tokio::sync::Barrier::new(WORKERS));
                let tasks: Vec<_> = workers
                    .into_iter()
                    .map(|w| {
                        let (c, barrier) = (c.clone(), barrier.clone());
                        tokio::spawn(async move {
                            for _ in 0..WAVES {
                                barrier.wait().await;
                                for job in c.lease(&w, SLOTS, Duration::ZERO).await.unwrap() {
                                    let k = ck(&job);
                                    let success = step_outcome(12, k.t, k.seed);
                                    let verdict = c.report(&w, &held(&job), &outcome(success)).await.unwrap();
                                    assert_eq!(verdict, ReportVerdict::Accepted);
                                }
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }

                let ranks = rs.ranks(&study).await;
                let admitted: Vec<(&str, i64)> =
                    ranks.iter().filter_map(|(id, r)| r.map(|r| (id.as_str(), r))).collect();
                let mut sorted: Vec<i64> = admitted.iter().map(|a| a.1).collect();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..admitted.len() as i64).collect::<Vec<_>>(), "{what}: ranks {admitted:?}");
                assert!(!admitted.is_empty(), "{what}: nothing admitted");
                // Admitted in spec order, the doomed trajectory never.
                let not_doomed = ["t0", "t2", "t3", "t4", "t5", "t6", "t7"];
                let in_order: Vec<(&str, i64)> =
                    not_doomed.iter().take(admitted.len()).enumerate().map(|(i, id)| (*id, i as i64)).collect();
                assert_eq!(admitted, in_order, "{what}: admission order");

                let record = c.store().study(&study).await.unwrap();
                if mode == "batch" {
                    let in_flight = record
                        .trajectories
                        .iter()
                        .filter(|t| matches!(t.state, TrajectoryState::Running | TrajectoryState::Replaying))
                        .count();
                    assert!(in_flight <= 2, "{what}: {in_flight} trajectories in flight, batch_size 2 allows 2");
                }
                for t in &record.trajectories {
                    assert_eq!(t.plan.controls, expected_controls(&t.id), "{what}: the controls of {}", t.id);
                }

                // Out of the next round's way: the study cancelled, these workers gone quiet and
                // their leases expired.
                c.cancel(&study).await.unwrap();
                clock.advance(Duration::from_secs(31));
            }
        }
        rs.finish().await;
    }
}

/// A study stored before controls were decided at launch (migration 0003 marks such studies) gets
/// them at admission, by rank, as it was launched to: on the first trajectories admitted.
#[tokio::test]
async fn a_study_stored_before_controls_were_decided_at_launch_gets_them_at_admission() {
    for rs in RawStore::both().await {
        let (c, _) = coordinator(&rs.store);
        let (yaml, files) = controls_study("legacy", "{mode: batch, batch_size: 8, pipeline_threshold: 1}");
        let study = c.launch(&yaml, &files).await.unwrap();
        // What an earlier version stored: no controls in the plans, none decided at launch.
        use sqlx::Row;
        sqlx::query("UPDATE studies SET controls_at_launch = 0 WHERE id = $1")
            .bind(&study)
            .execute(&rs.raw)
            .await
            .unwrap();
        let plans = sqlx::query("SELECT id, plan_json FROM trajectories WHERE study = $1")
            .bind(&study)
            .fetch_all(&rs.raw)
            .await
            .unwrap();
        for row in plans {
            let mut plan: serde_json::Value = serde_json::from_str(&row.get::<String, _>("plan_json")).unwrap();
            plan["controls"] = serde_json::to_value(vcurve_method::schedule::Controls::default()).unwrap();
            sqlx::query("UPDATE trajectories SET plan_json = $1 WHERE study = $2 AND id = $3")
                .bind(plan.to_string())
                .bind(&study)
                .bind(row.get::<String, _>("id"))
                .execute(&rs.raw)
                .await
                .unwrap();
        }
        let w = c.register("w", 4, &["synthetic".into()], "2.0").await.unwrap();
        assert_eq!(lease(&c, &w, 4).await.len(), 4, "{}", rs.name);
        let ranks: Vec<Option<i64>> = rs.ranks(&study).await.into_iter().map(|r| r.1).collect();
        assert_eq!(ranks, [Some(0), None, Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)], "{}", rs.name);
        for t in &c.store().study(&study).await.unwrap().trajectories {
            assert_eq!(t.plan.controls, expected_controls(&t.id), "{}: the controls of {}", rs.name, t.id);
        }
        rs.finish().await;
    }
}

fn judged(success: bool, patch: &str, judged: Judged) -> JobReport {
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
async fn launch_agent(c: &Coordinator<SqlStore>, options: &str) -> (String, String) {
    let (yaml, files) = vcurve_coordinator::testing::recorded_spec("cache", "agent", &[("r", 10)]);
    let yaml = yaml.replace("{kind: agent}", &format!("{{kind: agent, command: [agent], {options}}}"));
    let study = c.launch(&yaml, &files).await.unwrap();
    let w = c.register("w", 8, &["agent".into()], "2.0").await.unwrap();
    let replay = lease(c, &w, 1).await.remove(0);
    assert_eq!(c.report(&w, &held(&replay), &replayed(10)).await.unwrap(), ReportVerdict::Accepted);
    (study, w)
}

#[tokio::test]
async fn the_patch_cache_keeps_first_verdicts_rechecks_patches_and_counts_flakes() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (study, w) = launch_agent(&c, "flake_recheck_rate: 1.0").await;
        let task = "task-r";
        let sha = |p: &str| vcurve_record::trajectory::sha256_hex(p.as_bytes());
        assert_eq!(c.verdict(&study, task, &sha("fix")).await.unwrap(), None, "{}", ts.name);
        assert!(c.verdict(&study, task, "not a digest").await.is_err());

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
        assert_eq!(c.verdict(&study, task, &sha("fix")).await.unwrap(), Some(true), "{}", ts.name);
        // Every unique patch is re-checked at rate 1.0: the re-check names the trajectory's payload.
        let recheck =
            JobKey::Evaluation { study: study.clone(), task: task.into(), patch_sha256: sha("fix"), round: 1 };
        let jobs = lease(&c, &w, 8).await;
        let job = jobs.iter().find(|j| j.key == recheck).unwrap_or_else(|| panic!("{}: no re-check", ts.name));
        assert!(job.trajectory_digest.is_some(), "{}", ts.name);
        // The re-check disagrees: a flake; the first verdict stands.
        c.report(&w, &held(job), &JobReport::Evaluated { resolved: false }).await.unwrap();
        assert_eq!(c.verdict(&study, task, &sha("fix")).await.unwrap(), Some(true));
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
async fn a_patch_judged_by_two_workers_at_once_is_a_flake_check_and_synthetic_studies_judge_nothing() {
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

/// A study of the `agent` runner that makes `runs` base runs of the task `calc`.
fn base_run_spec(runs: u32) -> (String, std::collections::BTreeMap<String, String>) {
    let task = serde_json::json!({
        "id": "calc", "image": "vcurve-task-calc:test", "workdir": "/testbed",
        "evaluator": {"kind": "command", "command": "python3 -m unittest", "timeout_s": 60}
    });
    let yaml = format!(
        "name: base\nseed: 7\nbudget: 30\nrunner: {{kind: agent, command: [agent], flake_recheck_rate: 0.0}}\n\
         tasks:\n  - task: tasks/calc.json\n    base_runs: {runs}\n"
    );
    (yaml, [("tasks/calc.json".to_string(), task.to_string())].into())
}

#[tokio::test]
async fn every_failed_base_run_becomes_a_trajectory_with_the_tasks_base_runs() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(4);
        let study = c.launch(&yaml, &files).await.unwrap();
        assert_eq!(c.store().study(&study).await.unwrap().state, StudyState::Running, "{}", ts.name);
        let w = c.register("w", 8, &["agent".into()], "2.0").await.unwrap();
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
            let recorded_digest = vcurve_record::trajectory::sha256_hex(recorded.as_bytes());
            c.upload(&recorded_digest, recorded.as_bytes()).await.unwrap();
            let report = JobReport::Outcome(RunOutcome {
                success: seed == 0,
                steps: 12 + seed,
                end_type: EndType::Submitted,
                patch_sha256: vcurve_record::trajectory::sha256_hex(format!("patch {seed}").as_bytes()),
                judged: if seed == 3 { Judged::EmptyPatch } else { Judged::Evaluated },
                recorded: Some(recorded_digest),
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
async fn a_study_whose_base_runs_all_succeed_ends_with_no_trajectory() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let (yaml, files) = base_run_spec(2);
        let study = c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 8, &["agent".into()], "2.0").await.unwrap();
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
async fn a_worker_holding_a_trajectorys_snapshots_gets_its_continuations_first_and_no_slot_waits() {
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "a", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "b", length: 12, cliff: 6, p: 0.75, labels: "" },
        ];
        let (yaml, files) =
            spec("near", "admission: {mode: batch, batch_size: 2, pipeline_threshold: 1}\n", &trajectories);
        c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 64, &["synthetic".into()], "2.0").await.unwrap();
        // Screening of both: find b's payload by a lease, then give everything back.
        let all = lease(&c, &w, 64).await;
        let b = all.iter().find(|j| ck(j).trajectory == "b").unwrap().trajectory_digest.clone().unwrap();
        let held: Vec<HeldJob> = all.iter().map(held).collect();
        c.release(&w, &held).await.unwrap();
        let n_b = all.iter().filter(|j| ck(j).trajectory == "b").count();
        assert!(n_b >= 2 && n_b < all.len(), "{}: both trajectories screen", ts.name);
        let jobs = c.lease_near(&w, n_b as u32, Duration::ZERO, std::slice::from_ref(&b)).await.unwrap();
        assert!(jobs.iter().all(|j| ck(j).trajectory == "b"), "{}: b's continuations first", ts.name);
        // The rest still fills free slots.
        let more = c.lease_near(&w, 64, Duration::ZERO, std::slice::from_ref(&b)).await.unwrap();
        assert_eq!(more.len(), all.len() - n_b, "{}", ts.name);
        assert!(more.iter().all(|j| ck(j).trajectory == "a"), "{}", ts.name);
        ts.finish().await;
    }
}

#[tokio::test]
async fn a_claim_prefers_held_snapshots_then_the_workers_registry_then_the_rest() {
    use vcurve_coordinator::model::{Locality, RegistrySnapshot};
    for ts in TestStore::both().await {
        let (c, _) = coordinator(&ts.store);
        let trajectories = [
            Tr { id: "a", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "b", length: 12, cliff: 6, p: 0.75, labels: "" },
            Tr { id: "c", length: 12, cliff: 6, p: 0.75, labels: "" },
        ];
        let (yaml, files) =
            spec("registry", "admission: {mode: batch, batch_size: 3, pipeline_threshold: 1}\n", &trajectories);
        c.launch(&yaml, &files).await.unwrap();
        let w = c.register("w", 256, &["synthetic".into()], "2.0").await.unwrap();
        let all = lease(&c, &w, 256).await;
        let digest = |id: &str| all.iter().find(|j| ck(j).trajectory == id).unwrap().trajectory_digest.clone().unwrap();
        let (a, b) = (digest("a"), digest("b"));
        c.release(&w, &all.iter().map(held).collect::<Vec<_>>()).await.unwrap();
        let of = |id: &str, min_t: u32| all.iter().filter(|j| ck(j).trajectory == id && ck(j).t >= min_t).count();
        // b's snapshot at the smallest positive step screened: its continuations from there on.
        let t_b = all.iter().filter(|j| ck(j).trajectory == "b" && ck(j).t > 0).map(|j| ck(j).t).min().unwrap();
        let (n_a, n_b) = (of("a", 0), of("b", t_b));
        assert!(n_a > 0 && n_b > 0 && n_a + n_b < all.len(), "{}: {} jobs", ts.name, all.len());
        let pushed = RegistrySnapshot { trajectory_digest: b.clone(), t: t_b, image_id: "sha256:b".into() };
        // The worker holds a's snapshots and has pushed b's h_t to its registry.
        let locality = Locality { near: vec![a.clone()], registry: Some("reg.test:5000".into()), pushed: vec![pushed] };
        let first = c.lease_with(&w, n_a as u32, Duration::ZERO, locality).await.unwrap();
        assert!(first.iter().all(|j| ck(j).trajectory == "a"), "{}: held first", ts.name);
        assert!(first.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        // Recorded durably: a later request need not push it again.
        let registry_only =
            Locality { registry: Some("reg.test:5000".into()), ..Locality::near(std::slice::from_ref(&a)) };
        let second = c.lease_with(&w, n_b as u32, Duration::ZERO, registry_only.clone()).await.unwrap();
        assert_eq!(second.len(), n_b, "{}", ts.name);
        for job in &second {
            assert_eq!(ck(job).trajectory, "b", "{}: the registry's next", ts.name);
            let snapshot = job.registry_snapshot.as_ref().expect("the job names the registry snapshot");
            assert_eq!((snapshot.t, snapshot.image_id.as_str(), &snapshot.trajectory_digest), (t_b, "sha256:b", &b));
        }
        // The rest fills the slots; no registry snapshot at or before their steps.
        let rest = c.lease_with(&w, 256, Duration::ZERO, registry_only).await.unwrap();
        assert_eq!(first.len() + second.len() + rest.len(), all.len(), "{}: no slot waits", ts.name);
        assert!(rest.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        let mut held_all: Vec<HeldJob> = first.iter().chain(&second).chain(&rest).map(held).collect();
        c.release(&w, &held_all).await.unwrap();
        // Another registry knows nothing of it: plain order, no snapshot named.
        let other = Locality { registry: Some("other.test:5000".into()), ..Locality::default() };
        let jobs = c.lease_with(&w, 256, Duration::ZERO, other).await.unwrap();
        assert_eq!(jobs.len(), all.len(), "{}", ts.name);
        assert!(jobs.iter().all(|j| j.registry_snapshot.is_none()), "{}", ts.name);
        held_all = jobs.iter().map(held).collect();
        c.release(&w, &held_all).await.unwrap();
        // A push of the same key again replaces its image id; bad entries are dropped.
        let again = RegistrySnapshot { trajectory_digest: b.clone(), t: t_b, image_id: "sha256:b2".into() };
        let bad = RegistrySnapshot { trajectory_digest: "not-a-digest".into(), t: 3, image_id: "x".into() };
        let locality =
            Locality { near: vec![], registry: Some("reg.test:5000".into()), pushed: vec![again, bad.clone()] };
        let jobs = c.lease_with(&w, n_b as u32, Duration::ZERO, locality).await.unwrap();
        assert!(jobs.iter().all(|j| j.registry_snapshot.as_ref().map(|s| s.image_id.as_str()) == Some("sha256:b2")));
        ts.finish().await;
    }
}
