//! # vcurve-testkit
//!
//! What vcurve's tests share (and the cluster simulator, which runs the same pieces in virtual
//! time):
//!
//! - [`require`]: the one gate for every test that needs a service (PostgreSQL, Docker, a
//!   browser, a registry). Absent, the test skips with one line saying what to start; with
//!   `VCURVE_TEST_REQUIRE=all` (CI and `scripts/test` set it) an absent service fails the test.
//! - `cluster` (feature `cluster`, on by default; crates of the workspace opt in with
//!   `features = ["cluster"]`): one in-process cluster, `Cluster::sqlite()` /
//!   `Cluster::postgres()` `.workers(n, runners)` `.start()`, built on the coordinator's
//!   `Service` and the worker's lease loop. Its own tests are `testkit/tests/cluster/`: the
//!   coordinator and the worker as libraries over real gRPC on loopback.
//! - `store` (feature `store`, part of `cluster`): `TestStore`, a store on a fresh database of
//!   either backend; `TestStore::both()` gives SQLite and, behind the gate, PostgreSQL.
//! - [`wait`]: wait for a state (poll it with a deadline) rather than sleep for a time.
//! - [`prometheus`]: scrape a `/metrics` endpoint and parse the text format strictly.
//! - `model_server` (feature `model-server`): the deterministic OpenAI-compatible model server of
//!   the task-state tests, whose answers follow rules keyed by the request's prompt template and
//!   which injects 429s, 5xx, delays and malformed answers on demand.
//! - `sim` (feature `sim`): the discrete-event cluster simulator of `vcurve bench cluster`, over
//!   the real store and schedule in virtual time. It is the one part a production binary links:
//!   `vcurve` depends on this crate with `features = ["sim"]` only.

#[cfg(feature = "cluster")]
pub mod cluster;
#[cfg(feature = "model-server")]
pub mod model_server;
pub mod prometheus;
pub mod require;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "store")]
pub mod store;
pub mod wait;
