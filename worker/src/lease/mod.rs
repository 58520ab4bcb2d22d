//! The lease room: how a worker talks to its coordinator.
//!
//! - `lease_loop`: [`run`] and its tasks (lease loop, heartbeat loop, one task per job).
//! - `client`: the channel, TLS, the bearer token interceptor, deadlines and backoff; it is also
//!   the [`JobServices`](crate::runners::JobServices) runners get.
//! - `wire`: the only module that converts between `vcurve.v1` wire types and the worker's.
//! - `cache`: trajectory payloads by digest, fetched from the coordinator once each
//!   (`GetTrajectory`) and checked against the digest that named them.
//! - `config`: [`WorkerConfig`]; `error`: [`WorkerError`].
//! - [`tls`]: TLS checks shared with the command line (a CA file that parses, whether a server
//!   speaks TLS).

mod cache;
mod client;
mod config;
mod error;
mod lease_loop;
pub mod tls;
mod wire;

pub use config::WorkerConfig;
pub use error::WorkerError;
pub use lease_loop::{WorkerSummary, run, run_with_metrics};
