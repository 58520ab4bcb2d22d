//! `vcurve bench dispatch`: the gRPC run on SQLite, and `--pgbench`'s run of the store's own SQL
//! on the test PostgreSQL (when `VCURVE_TEST_POSTGRES` is set, as `scripts/test` does).

use sqlx::Connection as _;
use vcurve_cli::{bench_dispatch, bench_pgbench};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_run_hands_out_and_takes_back_the_continuations_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.sqlite").display());
    let r = bench_dispatch::run(&url, 2, 60).await.unwrap();
    assert!(r.continuations >= 60, "{r:?}");
    assert!(r.per_second > 0.0 && r.latency_p50_ms <= r.latency_p99_ms, "{r:?}");
    assert_eq!((r.pgbench_per_second, r.ratio_to_pgbench, r.pgbench_bare_per_second), (None, None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_runs_the_stores_dispatch_sql_on_a_scratch_database_it_drops() {
    let admin = vcurve_testkit::require!(vcurve_testkit::require::Service::Postgres);
    let pgbench = bench_pgbench::find_pgbench(None).unwrap();
    for script in [bench_pgbench::Script::Store, bench_pgbench::Script::Bare] {
        let rate = bench_pgbench::run(&admin, &pgbench, script, 3, 200).await.unwrap();
        assert_eq!(rate.continuations, 201, "3 clients × 67");
        assert!(rate.per_second > 0.0, "{script:?}: {rate:?}");
    }
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&admin).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_database WHERE datname LIKE 'vcurve_pgbench_%'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the scratch database is dropped");
}

#[tokio::test]
async fn pgbench_is_refused_without_postgresql() {
    let err =
        bench_pgbench::run("sqlite://x.sqlite", std::path::Path::new("/bin/true"), bench_pgbench::Script::Store, 1, 1)
            .await
            .unwrap_err();
    assert!(err.to_string().contains("--store postgres://"), "{err}");
}
