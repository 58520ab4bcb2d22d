//! # vcurve-worker
//!
//! A worker leases `(trajectory, series, t, seed)` continuation jobs from the coordinator, runs
//! each through an agent runner, and reports the outcome with the job's attempt number.
//!
//! This crate grows with the distributed core: the lease loop and the synthetic runner come first,
//! the Docker runtime (replay, fingerprints) and the real agent runners after.

pub use vcurve_proto::PROTOCOL_VERSION;
