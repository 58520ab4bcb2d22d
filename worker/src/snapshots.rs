//! Snapshot images of trajectory states (docs/method.md §5): `h_t` of a trajectory committed as an image,
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
//!
//! # Across hosts
//!
//! With a registry ([`SnapshotCache::open_with_registry`], `HOST:PORT`), every snapshot the cache
//! commits is pushed there in the background as `HOST:PORT/vcurve-snapshot:<digest[..16]>-<t>`
//! ([`SnapshotCache::remote`]), at most [`PUSH_CONCURRENCY`] at a time and each bounded by
//! [`PUSH_TIMEOUT`], pinned while it goes. A failed push is logged and counted and fails nothing.
//! A push that went through is queued as a [`RegistrySnapshot`] — (trajectory digest, `t`, image
//! id) — for the coordinator ([`SnapshotCache::take_pushed`]), which hands it back with jobs whose
//! continuations could start there. [`SnapshotCache::prepare_from`] pulls such a snapshot when the
//! cache holds none as near, before replaying, and checks it: the pulled image's id must be the
//! one pushed (the id is the digest of the image's configuration, which names every layer by its
//! content digest; the engine checks each pulled layer against its digest), and its labels must
//! name the trajectory and step and carry the changes a replay from it needs. A pull that fails,
//! is missing from the registry or does not check out is removed and `h_t` is rebuilt by replay
//! as without a registry. [`SnapshotStats`] counts where continuations started (a held snapshot,
//! a pulled one, a rebuild from the task image) and the pushes and pulls.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;

use vcurve_record::Trajectory;
use vcurve_record::jobs::CompareLevel;

use crate::container::{Container, ContainerRuntime, RuntimeError, labels};
use crate::replay::{
    CHANGES_LABEL, ChangeSet, ContainerLimits, FingerprintMode, Normalizer, Replay, ReplayError, Verdict,
};

/// The repository part of every snapshot image's reference.
pub const SNAPSHOT_REPOSITORY: &str = "vcurve-snapshot";

/// Pushes to the registry at once (the rest wait their turn).
pub const PUSH_CONCURRENCY: usize = 1;
/// How long one push may take before it is given up (logged and counted as failed).
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(600);
/// How long one pull may take before `h_t` is rebuilt by replay instead.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// A snapshot in a registry: `h_t` of the trajectory with `trajectory_digest`, pushed as the image
/// `image_id`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegistrySnapshot {
    pub trajectory_digest: String,
    pub t: u32,
    pub image_id: String,
}

/// Where a prepared container started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedFrom {
    /// The task image (`h_0`, or a rebuild of `h_t` by replay from the start).
    TaskImage,
    /// A snapshot this host held.
    Held,
    /// A snapshot pulled from the registry for this continuation.
    Pulled,
}

/// What the cache has done since it opened (monotonic counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Continuations from `t > 0` that started from a snapshot this host held.
    pub hits_local: u64,
    /// … from a snapshot pulled from the registry.
    pub hits_registry: u64,
    /// … from the task image, replaying every step (no snapshot at or before `t` anywhere).
    pub rebuilds: u64,
    pub pushes: u64,
    pub push_failures: u64,
    pub pulls: u64,
    /// Pulls that failed, found nothing, or pulled an image that did not check out.
    pub pull_failures: u64,
}

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
    /// The registry snapshots travel through (`HOST:PORT`), if any.
    registry: Option<String>,
    pushing: Arc<tokio::sync::Semaphore>,
    pushes: TaskTracker,
    /// Pushes done and not yet told to the coordinator.
    pushed: Mutex<Vec<RegistrySnapshot>>,
    stats: Mutex<SnapshotStats>,
}

impl Inner {
    fn index(&self) -> MutexGuard<'_, Index> {
        // The index stays consistent at every statement; a panic elsewhere does not poison it.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut SnapshotStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
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
    pub started_from: StartedFrom,
}

impl SnapshotCache {
    /// A cache of the snapshots `runtime` holds, under `budget_bytes`: the index is rebuilt from
    /// the snapshot images that exist (what survived a restart), least recently used first in the
    /// order the engine lists them, and trimmed to the budget.
    pub async fn open(runtime: Arc<dyn ContainerRuntime>, budget_bytes: u64) -> Result<SnapshotCache, RuntimeError> {
        SnapshotCache::open_with_registry(runtime, budget_bytes, None).await
    }

    /// [`SnapshotCache::open`] with snapshots pushed to and pulled from `registry` (`HOST:PORT`;
    /// see the module docs).
    pub async fn open_with_registry(
        runtime: Arc<dyn ContainerRuntime>,
        budget_bytes: u64,
        registry: Option<String>,
    ) -> Result<SnapshotCache, RuntimeError> {
        if let Some(registry) = &registry {
            check_registry(registry).map_err(RuntimeError::Engine)?;
        }
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
                registry,
                pushing: Arc::new(tokio::sync::Semaphore::new(PUSH_CONCURRENCY)),
                pushes: TaskTracker::new(),
                pushed: Mutex::new(Vec::new()),
                stats: Mutex::new(SnapshotStats::default()),
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

    /// The reference of `h_t` of the trajectory with `digest` in `registry` (`HOST:PORT`).
    pub fn remote(registry: &str, digest: &str, t: u32) -> Result<String, ReplayError> {
        Ok(format!("{registry}/{}", SnapshotCache::reference(digest, t)?))
    }

    pub fn runtime(&self) -> &Arc<dyn ContainerRuntime> {
        &self.inner.runtime
    }

    /// The registry snapshots travel through, if any.
    pub fn registry(&self) -> Option<&str> {
        self.inner.registry.as_deref()
    }

    pub fn stats(&self) -> SnapshotStats {
        *self.inner.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pushes done since the last call (to tell the coordinator). Give them back with
    /// [`SnapshotCache::untake_pushed`] when telling failed.
    pub fn take_pushed(&self) -> Vec<RegistrySnapshot> {
        std::mem::take(&mut *self.inner.pushed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Queue pushes again that [`SnapshotCache::take_pushed`] took but could not be told.
    pub fn untake_pushed(&self, pushed: Vec<RegistrySnapshot>) {
        let mut queue = self.inner.pushed.lock().unwrap_or_else(|e| e.into_inner());
        for p in pushed {
            if !queue.contains(&p) {
                queue.push(p);
            }
        }
    }

    /// Wait until every push started so far has ended.
    pub async fn pushes_done(&self) {
        self.inner.pushes.close();
        self.inner.pushes.wait().await;
        self.inner.pushes.reopen();
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
        self.push_in_background(digest, t);
        self.evict().await;
        Ok(true)
    }

    /// Push `h_t` (held) to the registry in the background, pinned until the push ends.
    fn push_in_background(&self, digest: &str, t: u32) {
        let Some(registry) = self.inner.registry.clone() else { return };
        let Some(pin) = self.pin(digest, t) else { return };
        let (Ok(reference), Ok(remote)) =
            (SnapshotCache::reference(digest, t), SnapshotCache::remote(&registry, digest, t))
        else {
            return;
        };
        let inner = self.inner.clone();
        let digest = digest.to_owned();
        self.inner.pushes.spawn(async move {
            let _pin = pin;
            let Ok(_turn) = inner.pushing.clone().acquire_owned().await else { return };
            let started = Instant::now();
            let pushed = match tokio::time::timeout(PUSH_TIMEOUT, inner.runtime.push_image(&reference, &remote)).await
            {
                Ok(pushed) => pushed,
                Err(_) => Err(RuntimeError::Engine(format!("no end within {} s", PUSH_TIMEOUT.as_secs()))),
            };
            let seconds = started.elapsed().as_secs_f64();
            match pushed {
                Ok(image_id) => {
                    tracing::info!(image = %remote, %image_id, seconds, "snapshot pushed");
                    inner.count(|s| s.pushes += 1);
                    let snapshot = RegistrySnapshot { trajectory_digest: digest, t, image_id };
                    inner.pushed.lock().unwrap_or_else(|e| e.into_inner()).push(snapshot);
                }
                Err(e) => {
                    tracing::warn!(image = %remote, error = %e, seconds, "cannot push a snapshot; it stays on this host only");
                    inner.count(|s| s.push_failures += 1);
                }
            }
        });
    }

    /// Pull `h_s` (`snapshot`) from the registry into the cache and check it (see the module
    /// docs); whether the cache holds it afterwards. Call it with the key's lock held.
    async fn pull_locked(&self, registry: &str, snapshot: &RegistrySnapshot) -> bool {
        let (digest, t) = (snapshot.trajectory_digest.as_str(), snapshot.t);
        if self.holds(digest, t) {
            return true;
        }
        let (Ok(reference), Ok(remote)) =
            (SnapshotCache::reference(digest, t), SnapshotCache::remote(registry, digest, t))
        else {
            return false;
        };
        let runtime = &self.inner.runtime;
        let started = Instant::now();
        let pulled = match tokio::time::timeout(PULL_TIMEOUT, runtime.pull_image(&remote, &reference)).await {
            Ok(pulled) => pulled,
            Err(_) => Err(RuntimeError::Engine(format!("no end within {} s", PULL_TIMEOUT.as_secs()))),
        };
        let seconds = started.elapsed().as_secs_f64();
        let checked = match pulled {
            Ok(image_id) if image_id != snapshot.image_id => Err(format!(
                "the pulled image is {image_id}, not the {} pushed: corrupt or replaced in the registry",
                snapshot.image_id
            )),
            Ok(_) => self.pulled_entry(&reference, digest, t).await,
            Err(RuntimeError::NoImage(_)) => {
                tracing::warn!(image = %remote, seconds, "the registry does not hold the snapshot; rebuilding it by replay");
                self.inner.count(|s| s.pull_failures += 1);
                return false;
            }
            Err(e) => {
                tracing::warn!(image = %remote, error = %e, seconds, "cannot pull a snapshot; rebuilding it by replay");
                self.inner.count(|s| s.pull_failures += 1);
                // A pull cut short may have left the image named.
                if let Err(e) = runtime.remove_image(&reference).await {
                    tracing::warn!(image = %reference, error = %e, "cannot remove a snapshot whose pull failed");
                }
                return false;
            }
        };
        match checked {
            Ok(entry) => {
                tracing::info!(image = %remote, trajectory = %digest, t, seconds, size_bytes = entry.size_bytes, "snapshot pulled");
                self.inner.count(|s| s.pulls += 1);
                self.inner.index().entries.insert((digest.to_owned(), t), entry);
                self.evict().await;
                self.holds(digest, t)
            }
            Err(why) => {
                tracing::warn!(image = %remote, why = %why, "a pulled snapshot does not check out; removed, rebuilding it by replay");
                self.inner.count(|s| s.pull_failures += 1);
                if let Err(e) = runtime.remove_image(&reference).await {
                    tracing::warn!(image = %reference, error = %e, "cannot remove a pulled snapshot that does not check out");
                }
                false
            }
        }
    }

    /// The index entry of a pulled `h_t` named `reference`, from its labels: `Err` says what is
    /// wrong with them.
    async fn pulled_entry(&self, reference: &str, digest: &str, t: u32) -> Result<Entry, String> {
        let filter = BTreeMap::from([
            (labels::SNAPSHOT_TRAJECTORY.to_owned(), digest.to_owned()),
            (labels::SNAPSHOT_T.to_owned(), t.to_string()),
        ]);
        let images = self.inner.runtime.images(&filter).await.map_err(|e| format!("cannot list it: {e}"))?;
        let image = images
            .into_iter()
            .find(|i| i.reference == reference)
            .ok_or("its labels name another trajectory or step")?;
        let changes = match image.labels.get(CHANGES_LABEL).map(|l| ChangeSet::from_label(l)) {
            Some(Ok(changes)) => changes,
            Some(Err(e)) => return Err(format!("unreadable changes label: {e}")),
            None => return Err("no changes label".to_owned()),
        };
        let last_used = self.inner.index().tick();
        Ok(Entry { reference: reference.to_owned(), size_bytes: image.size_bytes, last_used, pins: 0, changes })
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

    /// The step of the held snapshot nearest at or before `t`.
    fn nearest_held(&self, digest: &str, t: u32) -> Option<u32> {
        let index = self.inner.index();
        let range = (digest.to_owned(), 0)..=(digest.to_owned(), t);
        index.entries.range(range).next_back().map(|(k, _)| k.1)
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
        self.prepare_from(trajectory, digest, t, normalizer, limits, None).await
    }

    /// [`SnapshotCache::prepare`], told of `in_registry`: a snapshot of the trajectory at or before
    /// `t` in the cache's registry. It is pulled first when the cache holds none as near (and
    /// the cache has a registry); if the pull fails, or what it pulls does not check out, `h_t` is
    /// rebuilt as without it.
    pub async fn prepare_from(
        &self,
        trajectory: &Trajectory,
        digest: &str,
        t: u32,
        normalizer: &Normalizer,
        limits: &ContainerLimits,
        in_registry: Option<&RegistrySnapshot>,
    ) -> Result<Verdict<Prepared>, ReplayError> {
        if t > trajectory.length() {
            return Err(ReplayError::Range { from: 0, to: t, length: trajectory.length() });
        }
        SnapshotCache::reference(digest, t)?;
        let key = (digest.to_owned(), t);
        let lock = self.key_lock(&key);
        let result = {
            let _building = lock.lock().await;
            let pulled = self.pull_for(digest, t, in_registry).await;
            self.prepare_locked(trajectory, digest, t, normalizer, limits, pulled).await
        };
        self.release_key_lock(&key, lock);
        result
    }

    /// Pull `in_registry` when it is nearer to `t` than any snapshot held; the step pulled.
    /// Called with the lock of `(digest, t)` held; takes the pulled key's (a lower `t`: locks are
    /// always taken from the highest `t` down, so two prepares cannot wait on each other).
    async fn pull_for(&self, digest: &str, t: u32, in_registry: Option<&RegistrySnapshot>) -> Option<u32> {
        let registry = self.inner.registry.as_deref()?;
        let snapshot = in_registry.filter(|s| s.trajectory_digest == digest && s.t > 0 && s.t <= t)?;
        if self.nearest_held(digest, t).is_some_and(|held| held >= snapshot.t) {
            return None;
        }
        let pulled = if snapshot.t == t {
            self.pull_locked(registry, snapshot).await
        } else {
            let key = (digest.to_owned(), snapshot.t);
            let lock = self.key_lock(&key);
            let pulled = {
                let _building = lock.lock().await;
                self.pull_locked(registry, snapshot).await
            };
            self.release_key_lock(&key, lock);
            pulled
        };
        pulled.then_some(snapshot.t)
    }

    async fn prepare_locked(
        &self,
        trajectory: &Trajectory,
        digest: &str,
        t: u32,
        normalizer: &Normalizer,
        limits: &ContainerLimits,
        pulled: Option<u32>,
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
        let started_from = match &pin {
            None => StartedFrom::TaskImage,
            Some(_) if pulled == Some(from) => StartedFrom::Pulled,
            Some(_) => StartedFrom::Held,
        };
        if t > 0 {
            self.inner.count(|s| match started_from {
                StartedFrom::TaskImage => s.rebuilds += 1,
                StartedFrom::Held => s.hits_local += 1,
                StartedFrom::Pulled => s.hits_registry += 1,
            });
        }
        if from == t {
            return Ok(Verdict::Reproduced(Prepared {
                container,
                pin,
                from,
                levels: Vec::new(),
                committed: false,
                started_from,
            }));
        }
        let replayed = self.replay_to(&container, trajectory, digest, from, t, base, normalizer).await;
        match replayed {
            Ok(Verdict::Reproduced((levels, committed))) => {
                Ok(Verdict::Reproduced(Prepared { container, pin, from, levels, committed, started_from }))
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

/// Check a registry address: `HOST:PORT` (no scheme, no path).
fn check_registry(registry: &str) -> Result<(), String> {
    let bad = || format!("snapshot registry {registry:?}: give HOST:PORT, e.g. 127.0.0.1:5000");
    let (host, port) = registry.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains('/') || host.contains("://") || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::container::double::{Call, FakeRuntime, Op};
    use crate::replay::tests::{IMAGE, limits, record, runtime};
    use crate::replay::{TrajectoryReplay, replay_trajectory};

    pub(super) const STEPS: &[&[(&str, f64)]] = &[
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

    pub(super) async fn replay_anchors(cache: &SnapshotCache, t: &Trajectory, anchors: &[u32]) -> TrajectoryReplay {
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

    pub(super) fn created_from(rt: &FakeRuntime) -> Vec<String> {
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

    pub(super) fn snap(t: &Trajectory, at: u32) -> String {
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

#[cfg(test)]
mod registry_tests {
    use std::sync::Arc;

    use super::tests::{STEPS, created_from, replay_anchors, snap};
    use super::*;
    use crate::container::double::{FakeRuntime, Op};
    use crate::replay::tests::{IMAGE, limits, record, runtime};

    const REGISTRY: &str = "registry.test:5000";

    async fn cache(rt: &Arc<FakeRuntime>) -> SnapshotCache {
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        SnapshotCache::open_with_registry(runtime, 1 << 30, Some(REGISTRY.to_owned())).await.unwrap()
    }

    async fn prepare(cache: &SnapshotCache, t: &Trajectory, at: u32, hint: Option<&RegistrySnapshot>) -> Prepared {
        let n = Normalizer::default();
        match cache.prepare_from(t, &t.digest(), at, &n, &limits(), hint).await.unwrap() {
            Verdict::Reproduced(p) => p,
            Verdict::NonReplayable(nr) => panic!("non-replayable: {nr:?}"),
        }
    }

    fn remote(t: &Trajectory, at: u32) -> String {
        SnapshotCache::remote(REGISTRY, &t.digest(), at).unwrap()
    }

    /// Host A replays the trajectory with anchors 2 and 4 and pushes them; host B shares its
    /// registry and holds only the task image. Returns B's runtime and cache, the trajectory and
    /// what A pushed.
    async fn two_hosts() -> (Arc<FakeRuntime>, SnapshotCache, Trajectory, Vec<RegistrySnapshot>) {
        let a = runtime();
        let t = record(&a, STEPS, true).await;
        let cache_a = cache(&a).await;
        replay_anchors(&cache_a, &t, &[2, 4]).await;
        cache_a.pushes_done().await;
        let mut pushed = cache_a.take_pushed();
        pushed.sort();
        let b = runtime();
        b.use_registry(a.registry());
        let cache_b = cache(&b).await;
        (b, cache_b, t, pushed)
    }

    #[tokio::test]
    async fn every_committed_snapshot_is_pushed_and_queued_for_the_coordinator() {
        let rt = runtime();
        let t = record(&rt, STEPS, true).await;
        let cache = cache(&rt).await;
        replay_anchors(&cache, &t, &[0, 2, 4]).await;
        cache.pushes_done().await;
        assert_eq!(rt.registry().references(), vec![remote(&t, 2), remote(&t, 4)]);
        let mut pushed = cache.take_pushed();
        pushed.sort();
        let d = t.digest();
        assert_eq!(
            pushed,
            vec![
                RegistrySnapshot { trajectory_digest: d.clone(), t: 2, image_id: rt.image(&snap(&t, 2)).unwrap().id },
                RegistrySnapshot { trajectory_digest: d.clone(), t: 4, image_id: rt.image(&snap(&t, 4)).unwrap().id },
            ]
        );
        assert!(cache.take_pushed().is_empty(), "taken once");
        cache.untake_pushed(pushed.clone());
        assert_eq!(cache.take_pushed().len(), 2, "given back when the coordinator was not told");
        // A continuation's commit is pushed too.
        prepare(&cache, &t, 5, None).await.container.remove().await.unwrap();
        cache.pushes_done().await;
        assert_eq!(cache.take_pushed().iter().map(|p| p.t).collect::<Vec<_>>(), vec![5]);
        let stats = cache.stats();
        assert_eq!((stats.pushes, stats.push_failures, stats.hits_local), (3, 0, 1));
        // Without a registry nothing is pushed.
        let plain = runtime();
        let t2 = record(&plain, STEPS, true).await;
        let runtime: Arc<dyn ContainerRuntime> = plain.clone();
        let no_registry = SnapshotCache::open(runtime, 1 << 30).await.unwrap();
        replay_anchors(&no_registry, &t2, &[2]).await;
        no_registry.pushes_done().await;
        assert_eq!(plain.count(Op::Push), 0);
        assert!(no_registry.take_pushed().is_empty());
    }

    #[tokio::test]
    async fn a_snapshot_another_host_pushed_is_pulled_checked_and_continued_from() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        b.clear_calls();
        let p = prepare(&cache_b, &t, 5, Some(&pushed[1])).await;
        assert_eq!(created_from(&b), vec![snap(&t, 4)]);
        assert_eq!((p.from, p.started_from, p.levels.clone()), (4, StartedFrom::Pulled, vec![CompareLevel::Exact]));
        // Only step 5 ran; the changes label came with the image, so its fingerprint matched.
        assert_eq!(b.commands()[0], "cat two three four");
        assert!(cache_b.holds(&t.digest(), 4) && cache_b.holds(&t.digest(), 5));
        assert_eq!(b.image(&snap(&t, 4)).unwrap().id, pushed[1].image_id);
        p.container.remove().await.unwrap();
        // Held now: no second pull.
        let p = prepare(&cache_b, &t, 5, Some(&pushed[1])).await;
        assert_eq!(p.started_from, StartedFrom::Held);
        p.container.remove().await.unwrap();
        assert_eq!(b.count(Op::Pull), 1);
        let stats = cache_b.stats();
        assert_eq!((stats.pulls, stats.pull_failures, stats.hits_registry, stats.hits_local), (1, 0, 1, 1));
    }

    #[tokio::test]
    async fn a_held_snapshot_as_near_is_used_without_a_pull() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        replay_anchors(&cache_b, &t, &[4]).await;
        b.clear_calls();
        let p = prepare(&cache_b, &t, 4, Some(&pushed[0])).await;
        assert_eq!((p.from, p.started_from), (4, StartedFrom::Held));
        p.container.remove().await.unwrap();
        assert_eq!(b.count(Op::Pull), 0);
        // A hint of another trajectory, or past t, is not pulled either.
        let mut other = pushed[1].clone();
        other.trajectory_digest = "ab".repeat(32);
        prepare(&cache_b, &t, 3, Some(&other)).await.container.remove().await.unwrap();
        prepare(&cache_b, &t, 3, Some(&pushed[1])).await.container.remove().await.unwrap();
        assert_eq!(b.count(Op::Pull), 0);
    }

    #[tokio::test]
    async fn a_corrupt_snapshot_in_the_registry_is_removed_and_rebuilt_by_replay() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        assert!(b.registry().corrupt(&remote(&t, 4)));
        b.clear_calls();
        let p = prepare(&cache_b, &t, 5, Some(&pushed[1])).await;
        assert_eq!(created_from(&b), vec![IMAGE.to_owned()]);
        assert_eq!((p.from, p.started_from, p.levels.len(), p.committed), (0, StartedFrom::TaskImage, 5, true));
        assert!(!b.image_exists(&snap(&t, 4)).await.unwrap(), "the corrupt pull is removed");
        assert!(!cache_b.holds(&t.digest(), 4));
        p.container.remove().await.unwrap();
        let stats = cache_b.stats();
        assert_eq!((stats.pulls, stats.pull_failures, stats.rebuilds), (0, 1, 1));
    }

    #[tokio::test]
    async fn a_pulled_image_whose_labels_name_another_step_is_not_used() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        // The registry's h_4 tag points at h_2's image, with h_2's id: the id is what was pushed as
        // h_2, so only the labels tell.
        let mut lying = pushed[0].clone();
        lying.t = 4;
        let registry = b.registry();
        registry.remove(&remote(&t, 4));
        let h2 = registry.image(&remote(&t, 2)).unwrap();
        b.add_image_with("scratch", h2.files.clone(), h2.labels.clone(), 1);
        b.push_image("scratch", &remote(&t, 4)).await.unwrap();
        b.remove_image("scratch").await.unwrap();
        lying.image_id = registry.image(&remote(&t, 4)).unwrap().id;
        b.clear_calls();
        let p = prepare(&cache_b, &t, 5, Some(&lying)).await;
        assert_eq!(created_from(&b), vec![IMAGE.to_owned()]);
        assert_eq!(p.started_from, StartedFrom::TaskImage);
        assert!(!b.image_exists(&snap(&t, 4)).await.unwrap());
        p.container.remove().await.unwrap();
    }

    #[tokio::test]
    async fn a_snapshot_missing_from_the_registry_is_rebuilt_by_replay() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        assert!(b.registry().remove(&remote(&t, 4)));
        b.clear_calls();
        let p = prepare(&cache_b, &t, 4, Some(&pushed[1])).await;
        assert_eq!(created_from(&b), vec![IMAGE.to_owned()]);
        assert_eq!((p.from, p.started_from, p.committed), (0, StartedFrom::TaskImage, true));
        p.container.remove().await.unwrap();
        assert_eq!(cache_b.stats().pull_failures, 1);
        // The rebuilt h_4 is pushed again, so the registry holds it from now on.
        cache_b.pushes_done().await;
        assert!(b.registry().image(&remote(&t, 4)).is_some());
    }

    #[tokio::test]
    async fn with_the_registry_down_pushes_fail_quietly_and_continuations_rebuild() {
        let (b, cache_b, t, pushed) = two_hosts().await;
        b.registry().set_down(true);
        b.clear_calls();
        let p = prepare(&cache_b, &t, 5, Some(&pushed[1])).await;
        assert_eq!(created_from(&b), vec![IMAGE.to_owned()]);
        assert_eq!((p.started_from, p.committed), (StartedFrom::TaskImage, true));
        p.container.remove().await.unwrap();
        cache_b.pushes_done().await;
        assert!(cache_b.take_pushed().is_empty());
        let stats = cache_b.stats();
        assert_eq!((stats.pull_failures, stats.push_failures, stats.pushes, stats.rebuilds), (1, 1, 0, 1));
        // Pinned while pushing, unpinned after: the snapshot is evictable again.
        assert!(cache_b.inner.index().entries.values().all(|e| e.pins == 0));
        // An engine error in the pull itself (not the registry) falls back the same way.
        b.registry().set_down(false);
        b.fail_next(Op::Pull, RuntimeError::Engine("disk full".into()));
        let p = prepare(&cache_b, &t, 3, Some(&pushed[0])).await;
        assert_eq!(p.started_from, StartedFrom::TaskImage);
        p.container.remove().await.unwrap();
    }

    #[test]
    fn a_registry_is_host_and_port() {
        assert!(check_registry("127.0.0.1:5000").is_ok());
        assert!(check_registry("registry.example:443").is_ok());
        for bad in ["127.0.0.1", "http://127.0.0.1:5000", "host:port", ":5000", "a/b:1"] {
            assert!(check_registry(bad).is_err(), "{bad}");
        }
        assert_eq!(
            SnapshotCache::remote("127.0.0.1:5000", &"ab".repeat(32), 7).unwrap(),
            format!("127.0.0.1:5000/vcurve-snapshot:{}-7", "ab".repeat(8))
        );
    }
}
