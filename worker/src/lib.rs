//! # vcurve-worker
//!
//! A worker leases jobs from the coordinator — continuations `(study, trajectory, series, t, seed)`,
//! replays, evaluations and base runs — runs each through an agent runner, and reports its typed
//! result with the job's attempt number. A job names its trajectory by digest; the worker fetches
//! each payload once and keeps it. The
//! `vcurve worker` command and `vcurve demo` (which runs several workers in one process) both
//! call [`run`].
//!
//! ## Flow
//!
//! 1. **Register** with the worker's name, slots, capabilities (the kinds of its [`Runners`]) and
//!    [`PROTOCOL_VERSION`]. While the coordinator is unreachable (it may be restarting) the worker
//!    retries with capped exponential backoff, logging at `warn`.
//! 2. **Lease** up to the number of free slots, waiting up to `lease_wait` for work (long poll).
//!    Each job runs on its own tokio task and holds its slot until its result is reported.
//! 3. **Heartbeat** every `heartbeat_interval_ms` (from the registration), listing every held job
//!    as `(key, attempt)`. Jobs the coordinator answers as `revoked` are cancelled and never
//!    reported; `unknown_worker` makes the worker register again.
//! 4. **Report** each result (an outcome, or a no-outcome with its reason). A report that does not
//!    go through is retried with backoff until it does — a finished outcome is never dropped
//!    silently. `accepted = false` (a late or duplicate report) changed nothing and is not an
//!    error. A job whose runner kind the worker lacks is reported as the no-outcome
//!    `"unsupported runner <kind>"`.
//! 5. **Shut down** when the `shutdown` future resolves: lease no more, give running jobs
//!    `shutdown_grace` to finish and be reported, cancel the rest and give them back with
//!    `Release`, and return a [`WorkerSummary`].
//!
//! Transport errors on any RPC are retried for as long as it takes; only the fatal
//! [`WorkerError`]s (rejected token, refused registration such as a protocol-version mismatch,
//! bad configuration) end [`run`] with an error.
//!
//! ## Layout
//!
//! - [`runner`]: the agent-runner seam: [`AgentRunner`], [`Runners`], [`JobSpec`], [`JobReport`].
//! - `cache`: trajectory payloads by digest, fetched from the coordinator once each
//!   (`GetTrajectory`) and checked against the digest that named them.
//! - [`synthetic`]: the `synthetic` runner, whose outcomes are a pure function of the key.
//! - `lease_loop`: [`run`] and its tasks (lease loop, heartbeat loop, one task per job).
//! - `client`: the channel, TLS, the bearer token interceptor, deadlines and backoff.
//! - [`tls`]: TLS checks shared with the command line (a CA file that parses, whether a server
//!   speaks TLS).
//! - `wire`: the only module that converts between `vcurve.v1` wire types and the worker's.
//! - [`metrics`]: the Prometheus endpoint (`vcurve worker --metrics`): jobs, container operations
//!   timed by a wrapper of the runtime, the snapshot cache's disk.
//! - [`WorkerConfig`], [`WorkerError`].
//!
//! The Docker runtime (replay, fingerprints) and the real agent runners come later, behind the
//! same [`AgentRunner`] trait.

pub mod agent;
pub mod agent_runner;
mod cache;
mod client;
mod config;
pub mod container;
mod error;
pub mod evaluate;
pub mod exec;
mod lease_loop;
pub mod metrics;
pub mod mini_swe_agent;
mod python_env;
pub mod replay;
pub mod runner;
pub mod services;
pub mod snapshots;
pub mod synthetic;
pub mod tls;
mod wire;

pub use agent_runner::AgentProcessRunner;
pub use config::WorkerConfig;
pub use error::WorkerError;
pub use lease_loop::{WorkerSummary, run, run_with_metrics};
pub use mini_swe_agent::MiniSweAgent;
pub use runner::{AgentRunner, ContinuationKey, HeldJob, JobKey, JobKind, JobReport, JobSpec, Runners};
pub use synthetic::SyntheticRunner;
pub use vcurve_proto::PROTOCOL_VERSION;
pub use vcurve_record::jobs::{CompareLevel, Judged, NonReplayable, Replayed, RunOutcome};
