//! Admission under concurrency, and controls of studies stored before launch decided them.

use super::*;

// ------------------------------------------------------------------------------------------------
// Admission under concurrency: many leases at once, controls on. A second connection reads the
// admission ranks, which the store's API does not show.
// ------------------------------------------------------------------------------------------------

/// A store on a fresh database with a second connection to it: SQLite in a file (an in-memory
/// database has one connection only), or a new PostgreSQL database.
pub(crate) struct RawStore {
    pub(crate) name: &'static str,
    pub(crate) store: SqlStore,
    pub(crate) raw: sqlx::AnyPool,
    _dir: Option<tempfile::TempDir>,
    /// The PostgreSQL server's admin URL and the database to drop at the end.
    cleanup: Option<(String, String)>,
}

impl RawStore {
    pub(crate) async fn both() -> Vec<RawStore> {
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

    pub(crate) async fn finish(self) {
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
pub(crate) fn controls_study(name: &str, admission: &str) -> (String, std::collections::BTreeMap<String, String>) {
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
pub(crate) fn expected_controls(id: &str) -> vcurve_method::schedule::Controls {
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
pub(crate) async fn concurrent_leases_admit_with_unique_ranks_and_exactly_the_configured_controls() {
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
                    workers.push(
                        c.register(&format!("w{i}"), SLOTS, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION)
                            .await
                            .unwrap(),
                    );
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
pub(crate) async fn a_study_stored_before_controls_were_decided_at_launch_gets_them_at_admission() {
    for rs in RawStore::both().await {
        let (c, _) = coordinator(&rs.store);
        let (yaml, files) = controls_study("legacy", "{mode: batch, batch_size: 8, pipeline_threshold: 1}");
        let study = c.launch(&yaml, &files).await.unwrap();
        // What an earlier version stored: no controls in the plans, none decided at launch.
        use sqlx::Row;
        sqlx::query("UPDATE studies SET controls_at_launch = 0 WHERE id = $1")
            .bind(study.as_str())
            .execute(&rs.raw)
            .await
            .unwrap();
        let plans = sqlx::query("SELECT id, plan_json FROM trajectories WHERE study = $1")
            .bind(study.as_str())
            .fetch_all(&rs.raw)
            .await
            .unwrap();
        for row in plans {
            let mut plan: serde_json::Value = serde_json::from_str(&row.get::<String, _>("plan_json")).unwrap();
            plan["controls"] = serde_json::to_value(vcurve_method::schedule::Controls::default()).unwrap();
            sqlx::query("UPDATE trajectories SET plan_json = $1 WHERE study = $2 AND id = $3")
                .bind(plan.to_string())
                .bind(study.as_str())
                .bind(row.get::<String, _>("id"))
                .execute(&rs.raw)
                .await
                .unwrap();
        }
        let w = c.register("w", 4, &["synthetic".into()], vcurve_proto::PROTOCOL_VERSION).await.unwrap();
        assert_eq!(lease(&c, &w, 4).await.len(), 4, "{}", rs.name);
        let ranks: Vec<Option<i64>> = rs.ranks(&study).await.into_iter().map(|r| r.1).collect();
        assert_eq!(ranks, [Some(0), None, Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)], "{}", rs.name);
        for t in &c.store().study(&study).await.unwrap().trajectories {
            assert_eq!(t.plan.controls, expected_controls(&t.id), "{}: the controls of {}", rs.name, t.id);
        }
        rs.finish().await;
    }
}
