//! The coordinator and the worker as libraries, on the in-process cluster of `vcurve_testkit`
//! (and the CLI's client and renderer where a test needs them): one test binary.
//!
//! - [`grpc`]: authentication, TLS, clusters of workers running a study to the end, a 20 MB
//!   trajectory, exports that break off;
//! - [`metrics`]: the coordinator's and the worker's Prometheus endpoints after a study;
//! - [`dashboard`]: the live dashboard, over HTTP and in a headless browser (needs chromium);
//! - [`memory`]: exports read in parts (both backends; PostgreSQL when there is one);
//! - [`hot_paths`]: study-sized work stays off the async runtime;
//! - [`nothing_lost`]: a cancelled study's export shows its unmeasured trajectories as such.

mod dashboard;
mod grpc;
mod hot_paths;
mod judge_labels;
mod memory;
mod metrics;
mod nothing_lost;

use std::time::Duration;

use vcurve_coordinator::core::Timing;
use vcurve_coordinator::store::LeasePolicy;
use vcurve_testkit::cluster::Cluster;

/// A cluster on a fresh SQLite store with the CLI's renderer and short timings: leases of 10 s,
/// heartbeats every second, lease requests answered within 200 ms.
async fn cluster() -> Cluster {
    let timing = Timing {
        lease: LeasePolicy { timeout_ms: 10_000 },
        heartbeat_interval: Duration::from_secs(1),
        max_lease_wait: Duration::from_millis(200),
    };
    Cluster::sqlite().await.timing(timing).renderer(vcurve_cli::render::ReportRenderer::shared())
}
