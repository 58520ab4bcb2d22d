//! The store's contract, run against both backends (SQLite in memory and a fresh PostgreSQL
//! database per test). Every scenario drives the store through the coordinator core with a manual
//! clock, so lease expiry is exact.
//!
//! The coordinator's one integration test binary: a module per capability of the store, and the
//! studies launched from task lists and from SWE-bench (`studies_from_tasks`, `swebench_spec`), and a
//! client's uploads for a launch (`uploads`).

mod admission;
mod base_runs;
mod judge_labels;
mod leases;
mod locality;
mod progress;
mod replays;
mod studies;
mod studies_from_tasks;
mod swebench_spec;
mod task_state;
mod uploads;
mod verdicts;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use vcurve_coordinator::core::{Clock, Coordinator, Timing};
use vcurve_coordinator::model::{
    ContinuationKey, HeldJob, JobKey, JobKind, JobReport, LeasedJob, ReportVerdict, StudyRecord, StudyState,
    TrajectoryState,
};
use vcurve_coordinator::store::{LeasePolicy, SqlStore, Store, StudyPart};
use vcurve_coordinator::testing::{Tr, no_renderer, spec, step_outcome};
use vcurve_method::schedule::Series;
use vcurve_record::EndType;
use vcurve_record::jobs::{Judged, RunOutcome};
use vcurve_testkit::store::TestStore;

pub(crate) const T0: i64 = 1_700_000_000_000;

pub(crate) fn timing() -> Timing {
    Timing {
        lease: LeasePolicy { timeout_ms: 30_000 },
        heartbeat_interval: Duration::from_secs(10),
        max_lease_wait: Duration::ZERO,
    }
}

pub(crate) fn coordinator(store: &SqlStore) -> (Arc<Coordinator<SqlStore>>, Clock) {
    let clock = Clock::manual(T0);
    (Coordinator::with_clock(store.clone(), timing(), clock.clone(), no_renderer()), clock)
}

pub(crate) fn held(job: &LeasedJob) -> HeldJob {
    HeldJob { key: job.key.clone(), attempt: job.attempt }
}

pub(crate) fn outcome(success: bool) -> JobReport {
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
pub(crate) fn ck(job: &LeasedJob) -> &ContinuationKey {
    job.key.continuation().expect("a continuation")
}

pub(crate) fn ck_mut(held: &mut HeldJob) -> &mut ContinuationKey {
    match &mut held.key {
        JobKey::Continuation(k) => k,
        other => panic!("{other} is not a continuation"),
    }
}

pub(crate) async fn launch_one(c: &Coordinator<SqlStore>, length: u32) -> vcurve_record::StudyId {
    let (yaml, files) = spec("one", "", &[Tr { id: "a", length, cliff: 23, p: 0.75, labels: "" }]);
    c.launch(&yaml, &files).await.unwrap()
}

pub(crate) async fn lease(c: &Coordinator<SqlStore>, worker: &str, max: u32) -> Vec<LeasedJob> {
    c.lease(worker, max, Duration::ZERO).await.unwrap()
}
