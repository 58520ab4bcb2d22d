//! Studies run to the end, read whole, by trajectory and in parts; replans of two stores.

use super::*;

pub(crate) async fn assert_progress_counts(c: &Coordinator<SqlStore>, study: &vcurve_record::StudyId) {
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
    let leased = c.store().leased().await.unwrap().iter().filter(|(k, _, _)| k.study == study.as_str()).count();
    assert_eq!(p.running, leased as u64);
}

/// Drive a study to the end with deterministic outcomes; return its stored record, study id
/// blanked (exports are a pure function of it).
pub(crate) async fn run_to_end(
    c: &Coordinator<SqlStore>,
    study: &vcurve_record::StudyId,
    cliffs: &[(&str, u32)],
) -> StudyRecord {
    let w = c.register("w", 8, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
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
pub(crate) async fn two_stores_reporting_on_the_same_trajectories_keep_their_replans_right() {
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
    let wa = ca.register("wa", 3, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
    let wb = cb.register("wb", 3, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
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
pub(crate) async fn a_study_runs_to_the_end_and_both_backends_store_the_same_record() {
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
    if let [sqlite, postgres] = &records[..] {
        assert_eq!(sqlite, postgres, "SQLite and PostgreSQL store different records");
    }
}

#[tokio::test]
pub(crate) async fn one_trajectory_reads_as_its_own_study_record() {
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
        let one = c.store().trajectory(&study, &"second".into()).await.unwrap().expect("a known trajectory");
        assert_eq!(one.trajectories.len(), 1, "{}", ts.name);
        assert_eq!(one.spec.trajectories.len(), 1);
        assert_eq!(one.spec.trajectories[0].id, "second");
        assert_eq!(one.trajectories[0], whole.trajectories[1], "{}", ts.name);
        assert!(c.store().trajectory(&study, &"third".into()).await.unwrap().is_none());
        assert!(c.store().trajectory(&"no-such-study".into(), &"second".into()).await.is_err());
        ts.finish().await;
    }
}

/// Every part `study_parts` sends, and whether the read ended without an error.
pub(crate) async fn parts_of(store: &SqlStore, study: &vcurve_record::StudyId) -> (Vec<StudyPart>, Result<(), String>) {
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
pub(crate) async fn a_study_read_in_parts_is_its_record_head_first_then_each_trajectory_in_order() {
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
        let w = c.register("w", 8, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
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
        let (parts, read) = parts_of(&ts.store, &"no-such-study".into()).await;
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
