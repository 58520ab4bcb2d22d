//! Stores on fresh databases of both backends, for the tests of the store and of whatever runs
//! on it.

use sqlx::Connection;
use vcurve_coordinator::store::SqlStore;

/// A store on a fresh database: SQLite in memory, or a new PostgreSQL database.
pub struct TestStore {
    pub name: &'static str,
    pub store: SqlStore,
    cleanup: Option<(String, String)>,
}

impl TestStore {
    pub async fn sqlite() -> TestStore {
        TestStore { name: "sqlite", store: SqlStore::connect("sqlite::memory:").await.unwrap(), cleanup: None }
    }

    /// A fresh database on the server of `admin` (the URL the gate gives for
    /// [`crate::require::Service::Postgres`]).
    pub async fn postgres(admin: String) -> TestStore {
        sqlx::any::install_default_drivers();
        let db = format!("vcurve_test_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::AnyConnection::connect(&admin).await.expect("connect to VCURVE_TEST_POSTGRES");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).execute(&mut conn).await.unwrap();
        let base = admin.rsplit_once('/').expect("URL with a database").0;
        let url = format!("{base}/{db}");
        TestStore { name: "postgres", store: SqlStore::connect(&url).await.unwrap(), cleanup: Some((admin, db)) }
    }

    /// Both backends, each on a fresh database; SQLite alone, after the gate's `skipped:` line,
    /// when PostgreSQL is not there (see [`crate::require`]; a failure under
    /// `VCURVE_TEST_REQUIRE=all`).
    pub async fn both() -> Vec<TestStore> {
        match crate::require::optional(crate::require::Service::Postgres) {
            Some(admin) => vec![TestStore::sqlite().await, TestStore::postgres(admin).await],
            None => vec![TestStore::sqlite().await],
        }
    }

    /// Drop the PostgreSQL database (call at the end of a passing test).
    pub async fn finish(self) {
        let TestStore { store, cleanup, .. } = self;
        drop(store);
        if let Some((admin, db)) = cleanup
            && let Ok(mut conn) = sqlx::AnyConnection::connect(&admin).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")))
                .execute(&mut conn)
                .await;
        }
    }
}
