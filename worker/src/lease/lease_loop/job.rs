//! A job's task: record the leased job, run it through its runner, report its result until the
//! coordinator takes it, and settle a cancelled one.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use vcurve_proto::v1;

use super::{CANCEL_GRACE, Entry, Fate, Shared, lock};
use crate::lease::client::Backoff;
use crate::lease::wire;
use crate::metrics::WorkerMetrics;
use crate::runners::no_outcome::NoOutcome;
use crate::runners::seam::{HeldJob, JobKind, JobReport, JobSpec};

impl Shared {
    /// Record a leased job and spawn its task, which owns `permit` (its slot) until it ends.
    pub(super) fn start(self: &Arc<Self>, job: v1::Job, permit: OwnedSemaphorePermit) {
        let (held, job) = match wire::job_from_wire(job) {
            Ok(spec) => (spec.held(), Ok(spec)),
            Err(wire::BadJob { held: Some(held), reason }) => (held, Err(NoOutcome::BadJob(reason))),
            Err(wire::BadJob { held: None, reason }) => {
                tracing::error!(%reason, "malformed job from the coordinator; its lease will expire");
                return;
            }
        };
        let cancel = self.root.child_token();
        {
            let mut table = lock(&self.held);
            if table.contains_key(&held) {
                tracing::warn!(key = %held.key, attempt = held.attempt, "job leased twice; running it once");
                return;
            }
            table.insert(held.clone(), Entry { cancel: cancel.clone(), fate: Fate::Running, reporting: false });
        }
        self.counters.leased.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("job", key = %held.key, attempt = held.attempt);
        let shared = self.clone();
        self.tracker.spawn(
            async move {
                let _slot = permit;
                shared.job_task(held, job, cancel).await;
            }
            .instrument(span),
        );
    }

    async fn job_task(&self, held: HeldJob, job: Result<JobSpec, NoOutcome>, cancel: CancellationToken) {
        let started = Instant::now();
        tracing::debug!("started");
        let _running = self.metrics.as_ref().map(WorkerMetrics::job_started);
        let result = match job {
            Ok(spec) => self.run_job(spec, &cancel).await,
            Err(no) => Some(no.report()),
        };
        if let Some(m) = &self.metrics {
            m.job_ended(held.key.kind(), result.as_ref(), started.elapsed());
        }
        match result {
            Some(result) => self.report(&held, &result, started.elapsed(), &cancel).await,
            None => self.settle_cancelled(&held),
        }
    }

    /// Run a job through its runner; `None` when it was cancelled (its result is then moot).
    async fn run_job(&self, mut spec: JobSpec, cancel: &CancellationToken) -> Option<JobReport> {
        let model_call = spec.key.kind() == JobKind::ModelCall;
        let Some(runner) = self.runners.for_job(&spec).cloned() else {
            let no = if model_call {
                NoOutcome::ModelEndpoint("this worker offers no model endpoint: it runs no model calls".to_owned())
            } else {
                NoOutcome::UnsupportedRunner(spec.runner.kind().to_owned())
            };
            tracing::warn!(reason = %no, "cannot run job");
            return Some(no.report());
        };
        // A model call's digest names its call input, which its runner fetches as a file.
        if let Some(digest) = spec.trajectory_digest.clone().filter(|_| !model_call) {
            let fetch = self.cache.get(&digest, |file| async move {
                self.coordinator.get_trajectory(&file).await.map_err(|e| e.to_string())
            });
            let fetched = tokio::select! {
                fetched = fetch => fetched,
                () = cancel.cancelled() => return None,
            };
            match fetched {
                Ok(payload) => spec.trajectory = Some(payload),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fetch the job's trajectory");
                    return Some(NoOutcome::Fetch { digest, error: e }.report());
                }
            }
        }
        let kind = runner.kind();
        // A panicking runner must not take its job's lease with it: it becomes a no-outcome.
        let panicked = |_| NoOutcome::Panicked(kind.to_owned()).report();
        let run = match std::panic::catch_unwind(AssertUnwindSafe(|| runner.run(spec, cancel.clone()))) {
            Ok(run) => run,
            Err(panic) => return Some(panicked(panic)),
        };
        let mut run = AssertUnwindSafe(run).catch_unwind();
        let result = tokio::select! {
            result = &mut run => result.unwrap_or_else(panicked),
            () = cancel.cancelled() => {
                // Give the runner a moment to clean up; what it returns is discarded.
                if tokio::time::timeout(CANCEL_GRACE, run).await.is_err() {
                    tracing::warn!(runner = kind, "runner ignored cancellation; dropped");
                }
                return None;
            }
        };
        (!cancel.is_cancelled()).then_some(result)
    }

    /// Report a result, retrying transport errors until it goes through or the job is cancelled
    /// (revoked, or shutdown's grace ran out).
    async fn report(&self, held: &HeldJob, result: &JobReport, took: Duration, cancel: &CancellationToken) {
        let duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        if let Some(entry) = lock(&self.held).get_mut(held) {
            entry.reporting = true;
        }
        let mut backoff = Backoff::new();
        let mut failures = 0u32;
        loop {
            let request = wire::report_to_wire(&self.worker_id(), held, result, duration_ms);
            // `biased`: an answer that is in counts, even if the job was cancelled meanwhile.
            let answer = tokio::select! {
                biased;
                answer = self.coordinator.report(request) => answer,
                () = cancel.cancelled() => return self.settle_cancelled(held),
            };
            match answer {
                Ok(response) => {
                    let c = &self.counters;
                    c.reported.fetch_add(1, Ordering::Relaxed);
                    if matches!(result, JobReport::NoOutcome { .. }) {
                        c.no_outcomes.fetch_add(1, Ordering::Relaxed);
                    }
                    if response.accepted {
                        c.accepted.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(?result, duration_ms, "reported");
                    } else {
                        tracing::info!(detail = %response.detail, "report not accepted (changed nothing)");
                    }
                    lock(&self.held).remove(held);
                    return;
                }
                Err(error) if error.is_retryable() => {
                    failures += 1;
                    let delay = backoff.next_delay();
                    if failures == 1 {
                        tracing::warn!(%error, "report failed; retrying until the coordinator takes it");
                    } else {
                        tracing::debug!(%error, failures, "report failed again");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return self.settle_cancelled(held),
                    }
                    if lock(&self.held).get(held).is_some_and(|e| e.fate == Fate::Revoked) {
                        return self.settle_cancelled(held);
                    }
                }
                Err(error) => {
                    if error.is_rejection() {
                        self.set_fatal(error);
                        // Left held as abandoned: the worker stops and cannot release it.
                        if let Some(entry) = lock(&self.held).get_mut(held) {
                            entry.fate = Fate::Abandoned;
                        }
                        return;
                    }
                    tracing::error!(%error, ?result, "the coordinator refused the report; result dropped");
                    self.counters.abandoned.fetch_add(1, Ordering::Relaxed);
                    lock(&self.held).remove(held);
                    return;
                }
            }
        }
    }

    /// A cancelled job's task is ending: a revoked job is forgotten, a released or abandoned one
    /// stays in the table for `run` to settle.
    fn settle_cancelled(&self, held: &HeldJob) {
        let mut table = lock(&self.held);
        if table.get(held).is_some_and(|e| e.fate == Fate::Revoked) {
            table.remove(held);
            self.counters.revoked.fetch_add(1, Ordering::Relaxed);
            tracing::info!("revoked by the coordinator; cancelled");
        }
    }
}
