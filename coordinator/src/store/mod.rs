//! The coordinator's durable state.
//!
//! Every method is one transaction: a coordinator killed between any two calls, or inside one,
//! restarts and carries on from what the store holds. The schedule is not stored as such: a
//! trajectory's schedule is rebuilt from its outcomes (the schedule is order-free, see
//! `vcurve_method::schedule`), so outcomes and the continuations they imply are the whole state.
//!
//! [`SqlStore`] implements [`Store`] for both backends with sqlx: PostgreSQL (production, several
//! hosts; claims use `FOR UPDATE SKIP LOCKED`) and SQLite (embedded, single machine). The
//! conformance tests in `tests/store/` run against both.
//!
//! `api` holds the trait and its types, `sql` the implementation, which names them there: this
//! module only re-exports the two.

mod api;
mod sql;

pub use api::{LaunchInputs, LeasePolicy, Reported, Store, StoreError, StudyPart};
pub use sql::{
    Backend, DispatchSql, ScratchDatabase, ScratchError, SqlStore, UPLOAD_TTL_MS, base_run_trajectory_id, dispatch_sql,
};
