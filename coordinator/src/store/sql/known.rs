//! The replan cache: per trajectory, the keys and outcomes its last replan in this process read
//! and requested, so that the next report's replan need not read all of its continuations again
//! (docs/decisions.md, "The replan cache").
//!
//! The invariant: a cached entry stands for the trajectory only when the trajectory's counters,
//! read under its row lock before this report counts its outcome, are exactly what that replan
//! left, and the reported key is one of the entry's keys without an outcome. The store only ever
//! adds keys (each raises `n_requested`) and outcomes (each raises `n_done` or `n_retired`), and
//! drops raise `n_dropped`, so equal counters mean nothing happened since but this report — in
//! this coordinator or any other on the same store. Anything else (another coordinator's report,
//! a drop, a transaction that rolled back after the cache was updated) is a miss: one full read,
//! never a wrong plan.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use sqlx::Row;
use sqlx::any::AnyRow;
use vcurve_method::schedule::{Key, Outcome};

use crate::store::api::StoreError;

/// A trajectory's continuation counters: `n_requested`, `n_done + n_retired` and `n_dropped`
/// ([`super::dispatch::COUNTERS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counters {
    pub requested: i64,
    pub finished: i64,
    pub dropped: i64,
}

impl Counters {
    /// From a row with the [`super::dispatch::COUNTERS`] columns.
    pub(super) fn of(row: &AnyRow) -> Result<Counters, StoreError> {
        Ok(Counters {
            requested: row.try_get("n_requested")?,
            finished: row.try_get("n_finished")?,
            dropped: row.try_get("n_dropped")?,
        })
    }

    /// The counters after a replan that requested `created` continuations and counted `finished`
    /// outcomes (its report's own, if any).
    pub(super) fn advanced(self, created: i64, finished: i64) -> Counters {
        Counters { requested: self.requested + created, finished: self.finished + finished, dropped: self.dropped }
    }
}

/// A trajectory's continuations as of its last replan in this process.
#[derive(Debug, Clone)]
struct Known {
    /// The trajectory's counters right after that replan. Every change to the set of keys or
    /// outcomes raises one of them (the store only ever adds keys and outcomes), so under the
    /// trajectory's row lock, counters equal to these mean nothing happened since but the report
    /// being made — in this coordinator or any other on the same store.
    version: Counters,
    existing: BTreeSet<Key>,
    outcomes: Vec<(Key, Outcome)>,
}

/// At most this many trajectories are known at once; past it the map starts over (a miss only
/// costs the full read). Finished trajectories are forgotten at once. A trajectory's entry is
/// its keys and outcomes, a few hundred of each: some tens of kB, so at most some tens of MB.
const MAX_KNOWN: usize = 1024;

/// A trajectory's name in the cache: `(study, trajectory)`.
pub(super) type TrajectoryRef = (String, String);

/// A trajectory's continuation keys and the outcomes among them.
pub(super) type KeysAndOutcomes = (BTreeSet<Key>, Vec<(Key, Outcome)>);

/// What each trajectory's last replan here read and requested (see the module's docs).
#[derive(Debug, Default)]
pub(super) struct KnownCache {
    known: Mutex<HashMap<TrajectoryRef, Known>>,
}

impl KnownCache {
    /// The keys and the outcomes of `trajectory`, `fresh` among them, when its last replan here
    /// left exactly the counters `locked` (read under the trajectory's row lock, before this
    /// report counts `fresh`) and `fresh`'s key is one of its keys without an outcome; `None`
    /// otherwise: the caller reads the continuations. The entry is taken out either way; the
    /// replan that follows puts back what it leaves ([`KnownCache::remember`]).
    pub(super) fn take(
        &self,
        trajectory: &TrajectoryRef,
        locked: Counters,
        (key, outcome): (Key, Outcome),
    ) -> Option<KeysAndOutcomes> {
        let mut known = self.known.lock().expect("known cache poisoned").remove(trajectory)?;
        let fits =
            known.version == locked && known.existing.contains(&key) && known.outcomes.iter().all(|(k, _)| *k != key);
        fits.then(|| {
            known.outcomes.push((key, outcome));
            (known.existing, known.outcomes)
        })
    }

    /// Remember what a replan of `trajectory` left: its counters `version` after it, every key it
    /// has (requested before or by this replan) and its outcomes.
    pub(super) fn remember(
        &self,
        trajectory: TrajectoryRef,
        version: Counters,
        existing: BTreeSet<Key>,
        outcomes: Vec<(Key, Outcome)>,
    ) {
        let mut known = self.known.lock().expect("known cache poisoned");
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(trajectory, Known { version, existing, outcomes });
    }

    /// Forget a trajectory (it is finished).
    pub(super) fn forget(&self, trajectory: &TrajectoryRef) {
        self.known.lock().expect("known cache poisoned").remove(trajectory);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.known.lock().expect("known cache poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use vcurve_method::schedule::Series;

    use super::*;

    fn id(trajectory: &str) -> TrajectoryRef {
        ("study".to_string(), trajectory.to_string())
    }

    fn key(t: u32) -> Key {
        Key { series: Series::Main, t, seed: 0 }
    }

    const AFTER: Counters = Counters { requested: 3, finished: 1, dropped: 0 };

    /// A cache that knows trajectory `a` with keys at t = 0, 1, 2 and the outcome of t = 0.
    fn known_a() -> KnownCache {
        let cache = KnownCache::default();
        let existing: BTreeSet<Key> = [key(0), key(1), key(2)].into();
        cache.remember(id("a"), AFTER, existing, vec![(key(0), Outcome::Success)]);
        cache
    }

    #[test]
    fn the_counters_a_replan_left_give_its_keys_and_outcomes_with_this_report() {
        let cache = known_a();
        let (existing, outcomes) = cache.take(&id("a"), AFTER, (key(1), Outcome::Failure)).expect("fits");
        assert_eq!(existing, [key(0), key(1), key(2)].into());
        assert_eq!(outcomes, vec![(key(0), Outcome::Success), (key(1), Outcome::Failure)]);
        // Taken: the replan that follows puts back what it leaves.
        assert_eq!(cache.len(), 0);
        assert!(cache.take(&id("a"), AFTER, (key(2), Outcome::Success)).is_none());
    }

    #[test]
    fn any_other_change_to_the_counters_misses_and_forgets_the_entry() {
        let changed = [
            Counters { requested: 4, ..AFTER }, // another replan requested a key
            Counters { finished: 2, ..AFTER },  // another report recorded an outcome
            Counters { dropped: 1, ..AFTER },   // a drop
            Counters { finished: 0, ..AFTER },  // the cache is ahead: its transaction rolled back
        ];
        for counters in changed {
            let cache = known_a();
            assert!(cache.take(&id("a"), counters, (key(1), Outcome::Success)).is_none(), "{counters:?}");
            // The entry is gone: even the right counters miss now.
            assert!(cache.take(&id("a"), AFTER, (key(1), Outcome::Success)).is_none());
        }
    }

    #[test]
    fn a_key_the_replan_did_not_know_or_that_has_an_outcome_misses() {
        let cache = known_a();
        assert!(cache.take(&id("a"), AFTER, (key(3), Outcome::Success)).is_none());
        let cache = known_a();
        assert!(cache.take(&id("a"), AFTER, (key(0), Outcome::Failure)).is_none());
        let cache = known_a();
        assert!(cache.take(&id("b"), AFTER, (key(1), Outcome::Success)).is_none(), "another trajectory");
        assert_eq!(cache.len(), 1, "a miss of another trajectory leaves this one");
    }

    #[test]
    fn a_replan_leaves_the_counters_it_advanced_and_finished_trajectories_are_forgotten() {
        let cache = known_a();
        let (mut existing, outcomes) = cache.take(&id("a"), AFTER, (key(1), Outcome::Retired)).expect("fits");
        existing.insert(key(3));
        let left = AFTER.advanced(1, 1);
        assert_eq!(left, Counters { requested: 4, finished: 2, dropped: 0 });
        cache.remember(id("a"), left, existing, outcomes);
        assert!(cache.take(&id("a"), left, (key(3), Outcome::Success)).is_some());
        let cache = known_a();
        cache.forget(&id("a"));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn past_its_size_the_cache_starts_over() {
        let cache = KnownCache::default();
        for i in 0..MAX_KNOWN {
            cache.remember(id(&i.to_string()), AFTER, BTreeSet::new(), Vec::new());
        }
        assert_eq!(cache.len(), MAX_KNOWN);
        cache.remember(id("last"), AFTER, [key(0)].into(), Vec::new());
        assert_eq!(cache.len(), 1);
        assert!(cache.take(&id("last"), AFTER, (key(0), Outcome::Success)).is_some());
    }
}
