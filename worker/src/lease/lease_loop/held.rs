//! The held-job table as the heartbeat and shutdown see it: the jobs to extend, revoking one,
//! cancelling all, and giving jobs back unrun.

use std::sync::atomic::Ordering;

use vcurve_proto::v1;

use super::{Fate, RELEASE_ATTEMPTS, Shared, lock};
use crate::lease::client::Backoff;
use crate::lease::wire;
use crate::runners::seam::HeldJob;

impl Shared {
    /// The jobs a heartbeat extends: all held but the revoked.
    pub(super) fn held_jobs(&self) -> Vec<HeldJob> {
        lock(&self.held).iter().filter(|(_, e)| e.fate == Fate::Running).map(|(h, _)| h.clone()).collect()
    }

    /// The coordinator took `held` back: its run stops, unless its result is being reported
    /// (then only the retries stop, [`Shared::report`]).
    pub(super) fn revoke(&self, held: &HeldJob) {
        if let Some(entry) = lock(&self.held).get_mut(held)
            && entry.fate == Fate::Running
        {
            entry.fate = Fate::Revoked;
            if !entry.reporting {
                entry.cancel.cancel();
            }
        }
    }

    /// Cancel every running job, marking it with `fate`; returns how many.
    pub(super) fn cancel_all(&self, fate: Fate) -> usize {
        let mut table = lock(&self.held);
        let mut n = 0;
        for entry in table.values_mut().filter(|e| e.fate == Fate::Running) {
            entry.fate = fate;
            entry.cancel.cancel();
            n += 1;
        }
        n
    }

    /// Remove and return the held jobs with `fate`.
    pub(super) fn take(&self, fate: Fate) -> Vec<HeldJob> {
        let mut table = lock(&self.held);
        let jobs: Vec<HeldJob> = table.iter().filter(|(_, e)| e.fate == fate).map(|(h, _)| h.clone()).collect();
        for held in &jobs {
            table.remove(held);
        }
        jobs
    }

    /// Give jobs back unrun. Best effort: if the coordinator cannot be reached, their leases
    /// expire and it issues them again.
    pub(super) async fn release(&self, jobs: Vec<HeldJob>) {
        let n = jobs.len() as u64;
        let request =
            v1::ReleaseRequest { worker_id: self.worker_id(), jobs: jobs.iter().map(wire::held_to_wire).collect() };
        let mut backoff = Backoff::new();
        for attempt in 1..=RELEASE_ATTEMPTS {
            match self.coordinator.release(request.clone()).await {
                Ok(response) => {
                    self.counters.released.fetch_add(n, Ordering::Relaxed);
                    tracing::info!(jobs = n, acknowledged = response.released, "released unfinished jobs");
                    return;
                }
                Err(error) if error.is_retryable() && attempt < RELEASE_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "release failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(error) => {
                    tracing::warn!(%error, jobs = n, "could not release jobs; their leases will expire");
                    break;
                }
            }
        }
        self.counters.abandoned.fetch_add(n, Ordering::Relaxed);
    }
}
