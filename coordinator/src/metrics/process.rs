//! What a coordinator process measures itself as it serves, apart from the endpoint that exposes
//! it: kept by the [`Coordinator`](crate::Coordinator), encoded by [`encode`](super::encode).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds of the lease latency buckets, in seconds: a lease that finds work answers in
/// milliseconds; one that long-polls for it waits up to the 5 s lease wait.
pub const LEASE_LATENCY_BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// What this coordinator process measures itself (the store holds everything else).
#[derive(Debug, Clone)]
pub struct ProcessMetrics {
    /// Seconds from a lease request to an answer that handed out work (long-poll waiting
    /// included): the same leases whose p50/p99 `vcurve status` shows.
    pub lease_latency: Histogram,
    /// Continuations leased, by where they could start: `held`, `registry` or `none`.
    pub continuations_leased: Family<Labels, Counter>,
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        ProcessMetrics { lease_latency: Histogram::new(LEASE_LATENCY_BUCKETS), continuations_leased: Family::default() }
    }
}

impl ProcessMetrics {
    /// A continuation was leased whose snapshot source is `snapshot` (`held`, `registry`, `none`).
    pub fn continuation_leased(&self, snapshot: &'static str) {
        self.continuations_leased.get_or_create(&vec![("snapshot", snapshot.to_string())]).inc();
    }
}

/// A metric's labels.
pub(super) type Labels = Vec<(&'static str, String)>;
