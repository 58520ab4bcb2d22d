//! Snapshot images of trajectory states (SPEC.md §5): `h_t` of a trajectory committed as an image,
//! so that continuations from `h_t` start there instead of replaying from the task image.
//!
//! [`SnapshotCache`] keeps the snapshots this host holds, keyed by (trajectory digest, `t`), as
//! images named `vcurve-snapshot:<digest[..16]>-<t>` ([`SnapshotCache::reference`]) and labelled
//! [`labels::MANAGED`], [`labels::SNAPSHOT_TRAJECTORY`], [`labels::SNAPSHOT_T`] and
//! [`CHANGES_LABEL`] (the snapshot's changes against the task image, which replays from it need
//! for fingerprints). The labels are the whole index: a worker that restarts rebuilds it from
//! `runtime.images(..)` ([`SnapshotCache::open`]).
//!
//! The images' sizes are held under a disk budget: after every commit the least recently used
//! snapshots are removed until the total is under it. A snapshot a running job uses is pinned
//! ([`SnapshotPin`]) and never removed. Sizes are each image's own layer as the engine reports it;
//! a snapshot committed from a container of another snapshot shares that snapshot's layer, which
//! an engine keeps on disk while either image exists, so the budget is an estimate on that side.
//!
//! [`SnapshotCache::prepare`] is how a continuation gets its container at `h_t`: from the nearest
//! snapshot at or before `t` (or the task image), replaying the steps in between under the checks
//! of replay and committing `h_t` for later continuations. One build per `(trajectory, t)` runs at
//! a time (a per-key async lock), so two continuations that need the same `h_t` at once commit it
//! once: the second finds it held.
//!
//! Several caches must not share one engine's images with different budgets: each would evict the
//! others' snapshots by its own count.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use vcurve_record::Trajectory;
use vcurve_record::jobs::CompareLevel;

use crate::container::{Container, ContainerRuntime, RuntimeError, labels};
use crate::replay::{
    CHANGES_LABEL, ChangeSet, ContainerLimits, FingerprintMode, Normalizer, Replay, ReplayError, Verdict,
};

/// The repository part of every snapshot image's reference.
pub const SNAPSHOT_REPOSITORY: &str = "vcurve-snapshot";

type Key = (String, u32);

#[derive(Debug, Clone)]
struct Entry {
    reference: String,
    size_bytes: u64,
    /// A tick of [`Index::clock`]: higher is more recent.
    last_used: u64,
    pins: usize,
    changes: ChangeSet,
}

#[derive(Debug, Default)]
struct Index {
    entries: BTreeMap<Key, Entry>,
    clock: u64,
}

impl Index {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.size_bytes).sum()
    }
}

struct Inner {
    runtime: Arc<dyn ContainerRuntime>,
    budget_bytes: u64,
    index: Mutex<Index>,
    /// One lock per key being built or committed.
    building: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl Inner {
    fn index(&self) -> MutexGuard<'_, Index> {
        // The index stays consistent at every statement; a panic elsewhere does not poison it.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The snapshots this host holds. Cheap to clone: clones share the index.
#[derive(Clone)]
pub struct SnapshotCache {
    inner: Arc<Inner>,
}

/// A snapshot in use: it is not evicted while the pin lives. Keep it as long as the container
/// created from the snapshot runs.
pub struct SnapshotPin {
    inner: Arc<Inner>,
    key: Key,
}

impl SnapshotPin {
    /// The pinned snapshot: (trajectory digest, `t`).
    pub fn key(&self) -> (&str, u32) {
        (&self.key.0, self.key.1)
    }
}

impl Drop for SnapshotPin {
    fn drop(&mut self) {
        if let Some(entry) = self.inner.index().entries.get_mut(&self.key) {
            entry.pins = entry.pins.saturating_sub(1);
        }
    }
}

/// A container at `h_t`, ready for a continuation.
pub struct Prepared {
    pub container: Container,
    /// The snapshot the container was created from (`None`: the task image), pinned: keep it until
    /// the container is removed.
    pub pin: Option<SnapshotPin>,
    /// The step the container started from.
    pub from: u32,
    /// The levels of the steps `from+1..=t` replayed to reach `h_t`.
    pub levels: Vec<CompareLevel>,
    /// Whether `h_t` was committed by this call.
    pub committed: bool,
}

impl SnapshotCache {
    /// A cache of the snapshots `runtime` holds, under `budget_bytes`: the index is rebuilt from
    /// the snapshot images that exist (what survived a restart), least recently used first in the
    /// order the engine lists them, and trimmed to the budget.
    pub async fn open(runtime: Arc<dyn ContainerRuntime>, budget_bytes: u64) -> Result<SnapshotCache, RuntimeError> {
        let filter = BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned())]);
        let images = runtime.images(&filter).await?;
        let mut index = Index::default();
        for image in images {
            let (Some(digest), Some(t)) =
                (image.labels.get(labels::SNAPSHOT_TRAJECTORY), image.labels.get(labels::SNAPSHOT_T))
            else {
                continue; // a managed image that is no snapshot
            };
            let Ok(t) = t.parse::<u32>() else {
                tracing::warn!(image = %image.reference, t = %t, "snapshot image with an unreadable step label; not used");
                continue;
            };
            let changes = match image.labels.get(CHANGES_LABEL).map(|l| ChangeSet::from_label(l)) {
                Some(Ok(changes)) => changes,
                Some(Err(e)) => {
                    tracing::warn!(image = %image.reference, error = %e, "snapshot image with unreadable changes; not used");
                    continue;
                }
                None => {
                    tracing::warn!(image = %image.reference, "snapshot image without its changes label; not used");
                    continue;
                }
            };
            let last_used = index.tick();
            index.entries.insert(
                (digest.clone(), t),
                Entry { reference: image.reference, size_bytes: image.size_bytes, last_used, pins: 0, changes },
            );
        }
        tracing::info!(
            snapshots = index.entries.len(),
            bytes = index.total_bytes(),
            budget_bytes,
            "snapshot index rebuilt"
        );
        let cache = SnapshotCache {
            inner: Arc::new(Inner {
                runtime,
                budget_bytes,
                index: Mutex::new(index),
                building: Mutex::new(HashMap::new()),
            }),
        };
        cache.evict().await;
        Ok(cache)
    }

    /// The image reference of `h_t` of the trajectory with `digest`.
    pub fn reference(digest: &str, t: u32) -> Result<String, ReplayError> {
        match digest.get(..16) {
            Some(prefix) if prefix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
                Ok(format!("{SNAPSHOT_REPOSITORY}:{prefix}-{t}"))
            }
            _ => Err(ReplayError::Snapshot(format!("trajectory digest {digest:?} is not lowercase hex of 16+ digits"))),
        }
    }

    pub fn runtime(&self) -> &Arc<dyn ContainerRuntime> {
        &self.inner.runtime
    }

    pub fn budget_bytes(&self) -> u64 {
        self.inner.budget_bytes
    }

    /// The bytes the snapshots held take.
    pub fn total_bytes(&self) -> u64 {
        self.inner.index().total_bytes()
    }

    /// The snapshots held, as (trajectory digest, `t`), sorted: what the coordinator is told.
    pub fn held(&self) -> Vec<(String, u32)> {
        self.inner.index().entries.keys().cloned().collect()
    }

    pub fn holds(&self, digest: &str, t: u32) -> bool {
        self.inner.index().entries.contains_key(&(digest.to_owned(), t))
    }

    /// Pin a held snapshot (and count it as used now).
    pub fn pin(&self, digest: &str, t: u32) -> Option<SnapshotPin> {
        let mut index = self.inner.index();
        let now = index.tick();
        let entry = index.entries.get_mut(&(digest.to_owned(), t))?;
        entry.pins += 1;
        entry.last_used = now;
        Some(SnapshotPin { inner: self.inner.clone(), key: (digest.to_owned(), t) })
    }

    fn key_lock(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        let mut building = self.inner.building.lock().unwrap_or_else(|e| e.into_inner());
        building.entry(key.clone()).or_default().clone()
    }

    fn release_key_lock(&self, key: &Key, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut building = self.inner.building.lock().unwrap_or_else(|e| e.into_inner());
        // The map's and ours: nobody else waits for this key.
        if Arc::strong_count(&lock) == 2 {
            building.remove(key);
        }
    }

    /// Commit `container`, whose state is `h_t` of the trajectory with `digest` and whose changes
    /// against the task image are `changes`, unless the cache holds `h_t` already; then keep the
    /// cache under its budget. Returns whether it committed.
    pub async fn commit(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
    ) -> Result<bool, ReplayError> {
        let key = (digest.to_owned(), t);
        let lock = self.key_lock(&key);
        let result = {
            let _building = lock.lock().await;
            self.commit_locked(container, digest, t, changes).await
        };
        self.release_key_lock(&key, lock);
        result
    }

    /// [`SnapshotCache::commit`] with the key's lock held.
    async fn commit_locked(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
    ) -> Result<bool, ReplayError> {
        let reference = SnapshotCache::reference(digest, t)?;
        {
            let mut index = self.inner.index();
            let now = index.tick();
            if let Some(entry) = index.entries.get_mut(&(digest.to_owned(), t)) {
                entry.last_used = now;
                return Ok(false);
            }
        }
        let image_labels = BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (labels::SNAPSHOT_TRAJECTORY.to_owned(), digest.to_owned()),
            (labels::SNAPSHOT_T.to_owned(), t.to_string()),
            (CHANGES_LABEL.to_owned(), changes.to_label()),
        ]);
        container.commit(&reference, &image_labels).await?;
        let filter = BTreeMap::from([
            (labels::SNAPSHOT_TRAJECTORY.to_owned(), digest.to_owned()),
            (labels::SNAPSHOT_T.to_owned(), t.to_string()),
        ]);
        let size_bytes = match self.inner.runtime.images(&filter).await?.into_iter().find(|i| i.reference == reference)
        {
            Some(image) => image.size_bytes,
            None => {
                tracing::warn!(image = %reference, "a committed snapshot is not listed; counted as 0 bytes");
                0
            }
        };
        {
            let mut index = self.inner.index();
            let last_used = index.tick();
            index.entries.insert(
                (digest.to_owned(), t),
                Entry { reference: reference.clone(), size_bytes, last_used, pins: 0, changes: changes.clone() },
            );
        }
        tracing::info!(image = %reference, trajectory = %digest, t, size_bytes, "snapshot committed");
        self.evict().await;
        Ok(true)
    }

    /// Remove the least recently used unpinned snapshots until the total is under the budget. An
    /// image the engine refuses to remove is kept (and counted) and the next one is tried.
    pub async fn evict(&self) {
        let mut refused: BTreeSet<Key> = BTreeSet::new();
        loop {
            let victim = {
                let mut index = self.inner.index();
                let total = index.total_bytes();
                if total <= self.inner.budget_bytes {
                    return;
                }
                let key = index
                    .entries
                    .iter()
                    .filter(|(k, e)| e.pins == 0 && !refused.contains(*k))
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone());
                let Some(key) = key else {
                    tracing::warn!(
                        bytes = total,
                        budget_bytes = self.inner.budget_bytes,
                        "snapshots over budget, and every one left is in use"
                    );
                    return;
                };
                // Out of the index before the removal starts, so nobody pins it meanwhile.
                index.entries.remove_entry(&key)
            };
            let Some((key, entry)) = victim else { return };
            match self.inner.runtime.remove_image(&entry.reference).await {
                Ok(()) => {
                    tracing::info!(image = %entry.reference, size_bytes = entry.size_bytes, "snapshot evicted");
                }
                Err(e) => {
                    tracing::warn!(image = %entry.reference, error = %e, "cannot evict a snapshot; keeping it");
                    refused.insert(key.clone());
                    self.inner.index().entries.entry(key).or_insert(entry);
                }
            }
        }
    }

    /// Remove every unpinned snapshot of the trajectory with `digest` (it turned out
    /// non-replayable: nothing will run from them).
    pub async fn forget(&self, digest: &str) {
        let removed: Vec<Entry> = {
            let mut index = self.inner.index();
            let keys: Vec<Key> =
                index.entries.iter().filter(|(k, e)| k.0 == digest && e.pins == 0).map(|(k, _)| k.clone()).collect();
            keys.iter().filter_map(|k| index.entries.remove(k)).collect()
        };
        for entry in removed {
            if let Err(e) = self.inner.runtime.remove_image(&entry.reference).await {
                tracing::warn!(image = %entry.reference, error = %e, "cannot remove a snapshot of a non-replayable trajectory");
            }
        }
    }

    /// The held snapshot nearest at or before `t`, pinned, or the task image.
    fn nearest(&self, digest: &str, t: u32) -> Option<(u32, String, ChangeSet, SnapshotPin)> {
        let mut index = self.inner.index();
        let now = index.tick();
        let range = (digest.to_owned(), 0)..=(digest.to_owned(), t);
        let (key, entry) = index.entries.range_mut(range).next_back()?;
        entry.pins += 1;
        entry.last_used = now;
        let pin = SnapshotPin { inner: self.inner.clone(), key: key.clone() };
        Some((key.1, entry.reference.clone(), entry.changes.clone(), pin))
    }

    /// A running container at `h_t` of `trajectory` (whose digest is `digest`), for a
    /// continuation: created from the nearest snapshot at or before `t` (or the task image), with
    /// the steps in between replayed under replay's checks, and `h_t` committed unless `t = 0` or
    /// it is held already. A snapshot that is gone from the engine is dropped from the index and
    /// the next nearest is used, so a missing snapshot is rebuilt by replay. A mismatch on the way
    /// is [`Verdict::NonReplayable`] (the container is removed).
    pub async fn prepare(
        &self,
        trajectory: &Trajectory,
        digest: &str,
        t: u32,
        normalizer: &Normalizer,
        limits: &ContainerLimits,
    ) -> Result<Verdict<Prepared>, ReplayError> {
        if t > trajectory.length() {
            return Err(ReplayError::Range { from: 0, to: t, length: trajectory.length() });
        }
        SnapshotCache::reference(digest, t)?;
        let key = (digest.to_owned(), t);
        let lock = self.key_lock(&key);
        let result = {
            let _building = lock.lock().await;
            self.prepare_locked(trajectory, digest, t, normalizer, limits).await
        };
        self.release_key_lock(&key, lock);
        result
    }

    async fn prepare_locked(
        &self,
        trajectory: &Trajectory,
        digest: &str,
        t: u32,
        normalizer: &Normalizer,
        limits: &ContainerLimits,
    ) -> Result<Verdict<Prepared>, ReplayError> {
        let (container, from, base, pin) = loop {
            let (from, image, base, pin) = match self.nearest(digest, t) {
                Some((from, reference, base, pin)) => (from, reference, base, Some(pin)),
                None => (0, trajectory.task.image.clone(), ChangeSet::new(), None),
            };
            match Container::start(self.inner.runtime.clone(), &limits.spec(&image)).await {
                Ok(container) => break (container, from, base, pin),
                Err(RuntimeError::NoImage(missing)) if pin.is_some() => {
                    tracing::warn!(image = %missing, "a held snapshot is gone from the engine; replaying from an earlier one");
                    drop(pin);
                    self.inner.index().entries.remove(&(digest.to_owned(), from));
                }
                Err(e) => return Err(e.into()),
            }
        };
        if from == t {
            return Ok(Verdict::Reproduced(Prepared { container, pin, from, levels: Vec::new(), committed: false }));
        }
        let replayed = self.replay_to(&container, trajectory, digest, from, t, base, normalizer).await;
        match replayed {
            Ok(Verdict::Reproduced((levels, committed))) => {
                Ok(Verdict::Reproduced(Prepared { container, pin, from, levels, committed }))
            }
            Ok(Verdict::NonReplayable(mismatch)) => {
                if let Err(e) = container.remove().await {
                    tracing::warn!(error = %e, "cannot remove the container of a non-replayable continuation");
                }
                Ok(Verdict::NonReplayable(mismatch))
            }
            Err(e) => {
                if let Err(e) = container.remove().await {
                    tracing::warn!(error = %e, "cannot remove the container of a failed replay");
                }
                Err(e)
            }
        }
    }

    /// Replay `from+1..=t` in `container` and commit `h_t` (a failed commit is logged: the state
    /// is right, only the cache goes without it).
    #[allow(clippy::too_many_arguments)]
    async fn replay_to(
        &self,
        container: &Container,
        trajectory: &Trajectory,
        digest: &str,
        from: u32,
        t: u32,
        base: ChangeSet,
        normalizer: &Normalizer,
    ) -> Result<Verdict<(Vec<CompareLevel>, bool)>, ReplayError> {
        let mut replay = Replay::new(container, trajectory, normalizer, FingerprintMode::CompareOnly, from, base)?;
        while replay.t() < t {
            if let Some(mismatch) = replay.step().await? {
                return Ok(Verdict::NonReplayable(mismatch));
            }
        }
        let changes = replay.changes().await?;
        let levels = replay.finish(from).levels;
        let committed = match self.commit_locked(container, digest, t, &changes).await {
            Ok(committed) => committed,
            Err(e) => {
                tracing::warn!(trajectory = %digest, t, error = %e, "cannot commit a snapshot; the continuation goes on");
                false
            }
        };
        Ok(Verdict::Reproduced((levels, committed)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::container::double::{Call, FakeRuntime, Op};
    use crate::replay::tests::{IMAGE, limits, record, runtime};
    use crate::replay::{TrajectoryReplay, replay_trajectory};

    const STEPS: &[&[(&str, f64)]] = &[
        &[("echo 1 > one", 10.0)],
        &[("echo 2 > two", 10.0)],
        &[("echo 3 > three", 10.0)],
        &[("rm one; echo 4 > four", 10.0)],
        &[("cat two three four", 10.0)],
        &[("ls", 10.0)],
    ];

    async fn cache(rt: &Arc<FakeRuntime>, budget: u64) -> SnapshotCache {
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        SnapshotCache::open(runtime, budget).await.unwrap()
    }

    async fn replay_anchors(cache: &SnapshotCache, t: &Trajectory, anchors: &[u32]) -> TrajectoryReplay {
        let n = Normalizer::default();
        let out = replay_trajectory(cache, t, &t.digest(), anchors, &n, FingerprintMode::CompareOnly, &limits())
            .await
            .unwrap();
        out.reproduced().expect("replayable")
    }

    async fn prepare(cache: &SnapshotCache, t: &Trajectory, at: u32) -> Prepared {
        let n = Normalizer::default();
        match cache.prepare(t, &t.digest(), at, &n, &limits()).await.unwrap() {
            Verdict::Reproduced(p) => p,
            Verdict::NonReplayable(nr) => panic!("non-replayable: {nr:?}"),
        }
    }

    fn created_from(rt: &FakeRuntime) -> Vec<String> {
        rt.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Create { image, .. } => Some(image),
                _ => None,
            })
            .collect()
    }

    fn removed_images(rt: &FakeRuntime) -> Vec<String> {
        rt.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::RemoveImage { reference } => Some(reference),
                _ => None,
            })
            .collect()
    }

    fn snap(t: &Trajectory, at: u32) -> String {
        SnapshotCache::reference(&t.digest(), at).unwrap()
    }

    #[tokio::test]
    async fn a_continuation_from_a_non_anchor_point_replays_from_the_nearest_anchor_and_commits_it() {
        let rt = runtime();
        let t = record(&rt, STEPS, true).await;
        let cache = cache(&rt, 1 << 30).await;
        replay_anchors(&cache, &t, &[0, 2, 4]).await;
        rt.clear_calls();

        let p = prepare(&cache, &t, 3).await;
        assert_eq!(created_from(&rt), vec![snap(&t, 2)]);
        // Only step 3 ran, with its fingerprint checked (relative to the task image).
        let commands = rt.commands();
        assert_eq!(commands[0], "echo 3 > three");
        assert!(commands[1..].iter().all(|c| c.starts_with("git ")), "{commands:?}");
        assert_eq!((p.from, p.levels.clone(), p.committed), (2, vec![CompareLevel::Exact], true));
        assert_eq!(p.pin.as_ref().map(|p| p.key().1), Some(2));
        assert!(cache.holds(&t.digest(), 3));
        let image = rt.image(&snap(&t, 3)).unwrap();
        assert_eq!(image.labels[labels::SNAPSHOT_T], "3");
        assert_eq!(image.labels[labels::SNAPSHOT_TRAJECTORY], t.digest());
        assert_eq!(image.labels[labels::MANAGED], "1");
        assert!(image.files.contains_key("/testbed/three"));
        p.container.remove().await.unwrap();

        // From h_3 itself now: nothing replayed.
        rt.clear_calls();
        let p = prepare(&cache, &t, 3).await;
        assert_eq!(created_from(&rt), vec![snap(&t, 3)]);
        assert!(rt.commands().is_empty());
        assert!(!p.committed);
        p.container.remove().await.unwrap();

        // Step 4 deletes what step 1 made; from h_3 its fingerprint still matches the record.
        let p = prepare(&cache, &t, 5).await;
        assert_eq!((p.from, p.levels.len()), (4, 1));
        p.container.remove().await.unwrap();
        // t = 0 is the task image, never committed.
        let p = prepare(&cache, &t, 0).await;
        assert_eq!((p.from, p.committed), (0, false));
        assert!(p.pin.is_none());
        p.container.remove().await.unwrap();
        assert!(!cache.holds(&t.digest(), 0));
    }

    #[tokio::test]
    async fn eviction_keeps_the_cache_under_budget_least_recently_used_first() {
        let rt = runtime();
        rt.set_commit_size(Some(100));
        let t = record(&rt, STEPS, false).await;
        let cache = cache(&rt, 250).await;
        replay_anchors(&cache, &t, &[2, 4]).await;
        assert_eq!(cache.total_bytes(), 200);
        // Use h_2: h_4 is now the least recently used.
        prepare(&cache, &t, 2).await.container.remove().await.unwrap();
        // h_1 is built from the task image and committed: 300 bytes, h_4 goes.
        prepare(&cache, &t, 1).await.container.remove().await.unwrap();
        let d = t.digest();
        assert_eq!(cache.held(), vec![(d.clone(), 1), (d.clone(), 2)]);
        assert_eq!(removed_images(&rt), vec![snap(&t, 4)]);
        assert!(!rt.image_exists(&snap(&t, 4)).await.unwrap());
        assert_eq!(cache.total_bytes(), 200);
    }

    #[tokio::test]
    async fn a_pinned_snapshot_is_not_evicted() {
        let rt = runtime();
        rt.set_commit_size(Some(100));
        let t = record(&rt, STEPS, false).await;
        let cache = cache(&rt, 250).await;
        replay_anchors(&cache, &t, &[1]).await;
        // A continuation runs from h_1: pinned, although it is the oldest.
        let running = prepare(&cache, &t, 1).await;
        replay_anchors(&cache, &t, &[2, 3]).await;
        let d = t.digest();
        assert_eq!(cache.held(), vec![(d.clone(), 1), (d.clone(), 3)]);
        assert_eq!(removed_images(&rt), vec![snap(&t, 2)]);
        // Once the continuation is over, h_1 is the least recently used again.
        running.container.remove().await.unwrap();
        drop(running.pin);
        prepare(&cache, &t, 4).await.container.remove().await.unwrap();
        assert_eq!(cache.held(), vec![(d.clone(), 3), (d.clone(), 4)]);
        assert_eq!(removed_images(&rt), vec![snap(&t, 2), snap(&t, 1)]);
    }

    #[tokio::test]
    async fn a_missing_snapshot_is_rebuilt_by_replay() {
        let rt = runtime();
        let t = record(&rt, STEPS, true).await;
        let cache = cache(&rt, 1 << 30).await;
        // Never built on this worker: replayed from the task image.
        rt.clear_calls();
        let p = prepare(&cache, &t, 4).await;
        assert_eq!(created_from(&rt), vec![IMAGE.to_owned()]);
        assert_eq!((p.from, p.levels.len(), p.committed), (0, 4, true));
        p.container.remove().await.unwrap();
        // Gone from the engine behind the cache's back: the next nearest is used and h_5 rebuilt.
        rt.remove_image(&snap(&t, 4)).await.unwrap();
        rt.clear_calls();
        let p = prepare(&cache, &t, 5).await;
        assert_eq!(created_from(&rt), vec![snap(&t, 4), IMAGE.to_owned()]);
        assert_eq!(p.from, 0);
        assert!(!cache.holds(&t.digest(), 4));
        assert!(cache.holds(&t.digest(), 5));
        p.container.remove().await.unwrap();
        assert!(rt.running().is_empty());
    }

    #[tokio::test]
    async fn the_index_is_rebuilt_from_the_images_on_restart() {
        let rt = runtime();
        let t = record(&rt, STEPS, true).await;
        let first = cache(&rt, 1 << 30).await;
        replay_anchors(&first, &t, &[0, 2, 4]).await;
        let held = first.held();
        let bytes = first.total_bytes();
        drop(first);
        // A managed image that is no snapshot, and one with broken labels, are not used.
        rt.add_image_with(
            "vcurve-other:x",
            [("/a", "b")],
            BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned())]),
            10,
        );
        rt.add_image_with(
            "vcurve-snapshot:broken",
            [("/a", "b")],
            BTreeMap::from([
                (labels::MANAGED.to_owned(), "1".to_owned()),
                (labels::SNAPSHOT_TRAJECTORY.to_owned(), t.digest()),
                (labels::SNAPSHOT_T.to_owned(), "three".to_owned()),
            ]),
            10,
        );
        let restarted = cache(&rt, 1 << 30).await;
        assert_eq!(restarted.held(), held);
        assert_eq!(restarted.total_bytes(), bytes);
        // The changes label lets a replay from h_4 compare fingerprints against the task image.
        rt.clear_calls();
        let p = prepare(&restarted, &t, 5).await;
        assert_eq!(created_from(&rt), vec![snap(&t, 4)]);
        assert_eq!(p.levels, vec![CompareLevel::Exact]);
        p.container.remove().await.unwrap();
        // A smaller budget at start trims the index.
        let small = cache(&rt, 1).await;
        assert!(small.total_bytes() <= 1, "{}", small.total_bytes());
    }

    #[tokio::test]
    async fn two_continuations_needing_the_same_state_commit_it_once() {
        let rt = runtime();
        let t = record(&rt, STEPS, false).await;
        let cache = cache(&rt, 1 << 30).await;
        replay_anchors(&cache, &t, &[2]).await;
        rt.clear_calls();
        let (a, b) = tokio::join!(prepare(&cache, &t, 4), prepare(&cache, &t, 4));
        assert_eq!(rt.count(Op::Commit), 1);
        assert!(a.committed ^ b.committed);
        let mut sources = created_from(&rt);
        sources.sort();
        assert_eq!(sources, vec![snap(&t, 2), snap(&t, 4)]);
        a.container.remove().await.unwrap();
        b.container.remove().await.unwrap();
        assert!(cache.inner.building.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_mismatch_while_preparing_is_non_replayable_and_leaves_nothing() {
        let rt = runtime();
        let mut t = record(&rt, STEPS, false).await;
        t.steps[2].actions[0].output = "surprise\n".into();
        let cache = cache(&rt, 1 << 30).await;
        let n = Normalizer::default();
        let out = cache.prepare(&t, &t.digest(), 4, &n, &limits()).await.unwrap();
        let Verdict::NonReplayable(nr) = out else { panic!("reproduced") };
        assert_eq!(nr.step, 3);
        assert!(cache.held().is_empty());
        assert!(rt.running().is_empty());
        assert!(!rt.commands().contains(&"rm one; echo 4 > four".to_owned()));
        // Bad requests are errors.
        assert!(matches!(cache.prepare(&t, &t.digest(), 7, &n, &limits()).await, Err(ReplayError::Range { .. })));
        assert!(matches!(cache.prepare(&t, "not-hex", 1, &n, &limits()).await, Err(ReplayError::Snapshot(_))));
    }
}
