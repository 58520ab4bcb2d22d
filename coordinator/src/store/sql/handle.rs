//! The store's handle: the connection pool, the backend, the cache of study configurations and
//! the replan cache, connecting (and migrating) and closing. The capabilities are the sibling
//! modules; each reads what it needs of the handle here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sqlx::any::AnyPoolOptions;
use sqlx::{Any, AnyPool, Row, Transaction};
use vcurve_method::Thresholds;
use vcurve_method::schedule::Variant;
use vcurve_method::schedule::variants::variant_by_name;

use super::known;
use super::rows::corrupt;
use crate::durations::Timed;
use crate::spec::{Admission, ControlCounts, RunnerSpec};
use crate::store::api::StoreError;

/// The subject of a restart check's base runs: the task they run and their budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct BaseRunSubject {
    pub task: String,
    pub budget: u32,
}

/// Which database a [`SqlStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// What scheduling needs of a study, stored beside the spec so that a report does not parse every
/// trajectory's curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StudyConfig {
    pub(super) params: Thresholds,
    pub(super) schedule: String,
    pub(super) budget: u32,
    pub(super) seed: u64,
    /// Stored as `runner_kind` and `runner_options` ([`stored_runner`]).
    #[serde(flatten, with = "stored_runner")]
    pub(super) runner: RunnerSpec,
    pub(super) controls: ControlCounts,
    pub(super) admission: Admission,
    /// Base-run subjects with their own task and budget (a restart check's rows).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(super) base_run_subjects: std::collections::BTreeMap<String, BaseRunSubject>,
    /// The SHA-256 of each task's problem statement, by task id: stored once as a file of its
    /// own, named by the task's payload, and left out of the stored spec.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(super) problem_statements: std::collections::BTreeMap<String, String>,
    /// A task-state study's settings (its spec's `task_state:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) task_state: Option<vcurve_record::task_state::TaskStateSettings>,
    /// The names of a curve study's judges (its spec's `judges:`), whose label calls each
    /// trajectory's schedule waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) judges: Vec<String>,
}

/// [`StudyConfig::runner`] as it is stored: the fields `runner_kind` and `runner_options` (a JSON
/// object), the shape the configuration had before the options were typed, so that a store
/// written then still loads.
mod stored_runner {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use vcurve_record::RunnerSpec;

    #[derive(Serialize, Deserialize)]
    struct Fields {
        runner_kind: String,
        runner_options: serde_json::Value,
    }

    pub(super) fn serialize<S: Serializer>(runner: &RunnerSpec, serializer: S) -> Result<S::Ok, S::Error> {
        Fields { runner_kind: runner.kind().to_owned(), runner_options: runner.options_json() }.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<RunnerSpec, D::Error> {
        let fields = Fields::deserialize(deserializer)?;
        RunnerSpec::parse_stored(&fields.runner_kind, fields.runner_options).map_err(serde::de::Error::custom)
    }
}

impl StudyConfig {
    /// The task and the budget of the base runs of `subject`.
    pub(super) fn base_run_of<'a>(&'a self, subject: &'a str) -> (&'a str, u32) {
        match self.base_run_subjects.get(subject) {
            Some(s) => (s.task.as_str(), s.budget),
            None => (subject, self.budget),
        }
    }

    pub(super) fn variant(&self) -> Result<&'static dyn Variant, StoreError> {
        variant_by_name(&self.schedule)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown schedule {:?}", self.schedule)))
    }
}

/// A study's stored [`StudyConfig`] (`$1` its id).
const CONFIG_OF: &str = "SELECT config_json FROM studies WHERE id = $1";

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct SqlStore {
    pub(super) pool: AnyPool,
    pub(super) backend: Backend,
    /// Study configurations are immutable once stored; cached to keep reports cheap.
    pub(super) configs: Arc<Mutex<HashMap<String, Arc<StudyConfig>>>>,
    /// What each trajectory's last replan here read and requested, by `(study, trajectory)`: the
    /// next report's replan checks it against the trajectory's counters instead of reading all of
    /// its continuations again (see [`SqlStore::replan`] and [`known`]).
    pub(super) known: Arc<known::KnownCache>,
    /// Each study's timed sums over its trajectories and whether they are pooled, and when (store
    /// time, ms) they were read: the prior of its trajectories' duration estimates, read again at
    /// most every [`STUDY_TIMED_MS`] (see [`SqlStore::study_timed`]); an entry not read again for
    /// ten of those goes.
    pub(super) study_timed: Arc<Mutex<HashMap<String, StudyTimed>>>,
}

/// A study's timed sums as [`SqlStore::study_timed`] read them.
#[derive(Debug, Clone, Copy)]
pub(super) struct StudyTimed {
    /// When, store time (ms).
    pub(super) at: i64,
    /// The sums over its trajectories.
    pub(super) timed: Timed,
    /// Whether its trajectories do not differ in speed ([`crate::durations::Spread::pooled`]).
    pub(super) pooled: bool,
}

/// How old a study's cached timed sums may be before a replan reads them again, ms.
pub(super) const STUDY_TIMED_MS: i64 = 60_000;

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl SqlStore {
    /// Close the store's connections, waiting for the ones in use. On SQLite this checkpoints the
    /// write-ahead log into the database file and removes it, so the file alone is the whole store
    /// (a copy of it alone loses nothing). A process that owns the store calls it as it stops.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Connect to `url` (`postgres://…`, `sqlite://PATH` or `sqlite::memory:`) and bring its
    /// schema up to date.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        };
        let pool = match backend {
            Backend::Postgres => AnyPoolOptions::new().max_connections(16).connect(url).await?,
            Backend::Sqlite => {
                // `sqlite::memory:` (or `mode=memory`) is in memory; a file whose path merely says
                // "memory" is a file.
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                let url = if in_memory || url.contains('?') { url.to_string() } else { format!("{url}?mode=rwc") };
                // One connection, kept forever: SQLite serializes writers anyway, and an in-memory
                // database lives only as long as its connection.
                AnyPoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            use sqlx::Executor;
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            conn.execute("PRAGMA busy_timeout = 10000").await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await?
            }
        };
        // One portable schema serves both backends (SQLite accepts PostgreSQL's type names).
        sqlx::migrate!("../migrations").run(&pool).await?;
        Ok(SqlStore { pool, backend, configs: Arc::default(), known: Arc::default(), study_timed: Arc::default() })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// ` FOR UPDATE` where the backend has row locks.
    pub(super) fn for_update(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        }
    }

    /// ` FOR NO KEY UPDATE` where the backend has row locks: for a study's row, which the
    /// transactions that lock it never change the key of. Unlike ` FOR UPDATE` it does not wait
    /// for the `KEY SHARE` locks PostgreSQL's foreign-key checks take on the study (a job row
    /// updated twice in one transaction is checked again): two reports that each hold one and then
    /// both asked for ` FOR UPDATE` deadlocked.
    pub(super) fn for_no_key_update(&self) -> &'static str {
        match self.backend {
            Backend::Postgres => " FOR NO KEY UPDATE",
            Backend::Sqlite => "",
        }
    }

    pub(super) async fn config(
        &self,
        tx: &mut Transaction<'_, Any>,
        study: &str,
    ) -> Result<Arc<StudyConfig>, StoreError> {
        if let Some(c) = self.configs.lock().expect("config cache poisoned").get(study) {
            return Ok(c.clone());
        }
        let row = sqlx::query(CONFIG_OF)
            .bind(study)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::UnknownStudy(study.into()))?;
        let json: String = row.try_get("config_json")?;
        let config: Arc<StudyConfig> = Arc::new(serde_json::from_str(&json).map_err(corrupt)?);
        self.configs.lock().expect("config cache poisoned").insert(study.to_string(), config.clone());
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration as the store held it before the runner's options were typed (from a demo
    /// study), and one of an agent study with options left to their defaults.
    #[test]
    fn a_configuration_stored_before_the_options_were_typed_still_loads() {
        let params = serde_json::to_string(&Thresholds::default()).unwrap();
        let stored = format!(
            r#"{{"params":{params},"schedule":"paper","budget":100,"seed":7,"runner_kind":"synthetic","runner_options":{{"duration_ms":2,"no_outcome_rate":0.01}},"controls":{{"sanity":2,"retest":2,"budget_control":2}},"admission":{{"mode":"demand"}}}}"#
        );
        let config: StudyConfig = serde_json::from_str(&stored).unwrap();
        let expected = vcurve_record::runner::SyntheticOptions { duration_ms: 2, no_outcome_rate: 0.01 };
        assert_eq!(config.runner, RunnerSpec::Synthetic(expected));
        assert_eq!((config.seed, config.controls.sanity), (7, 2));
        assert_eq!(serde_json::to_string(&config).unwrap(), stored, "written back in the same shape");

        let stored = stored.replace(
            r#""runner_kind":"synthetic","runner_options":{"duration_ms":2,"no_outcome_rate":0.01}"#,
            r#""runner_kind":"agent","runner_options":{"command":["python3","-m","x"],"flake_threshold":0.05}"#,
        );
        let config: StudyConfig = serde_json::from_str(&stored).unwrap();
        let options = config.runner.agent_options().expect("an agent runner");
        assert_eq!((options.flake_threshold, options.flake_recheck_rate, options.memory_mb), (0.05, 0.10, 2048));
        // Its host command is not kept: it names the legacy agent, which no worker offers.
        assert_eq!(options.agent, vcurve_record::runner::LEGACY_COMMAND_AGENT);
        let again: StudyConfig = serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
        assert_eq!(again.runner, config.runner);

        let bad = stored.replace(r#""command":["python3","-m","x"]"#, r##""agent":"""##);
        let e = serde_json::from_str::<StudyConfig>(&bad).unwrap_err().to_string();
        assert!(e.contains("invalid agent runner options: agent"), "{e}");
    }
}
