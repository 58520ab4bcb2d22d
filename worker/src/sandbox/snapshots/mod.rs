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
//! A cache of a worker lineage ([`SnapshotCache::open_in_lineage`]; a worker's lineage is its
//! state directory, [`crate::sandbox::instance::Instance::lineage`]) names its images with the
//! lineage and adopts and evicts only those: workers of different state directories on one engine
//! keep separate caches, each under its own budget, and a worker restarted with its state
//! directory adopts what its predecessors committed. Caches without a lineage (tests, tools) treat
//! every vcurve snapshot on the engine as theirs: several of them must not share one engine with
//! different budgets, or each would evict the others' snapshots by its own count.
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
use std::time::Duration;

use tokio_util::task::TaskTracker;

use vcurve_record::Trajectory;
use vcurve_record::jobs::CompareLevel;
pub use vcurve_record::snapshot::RegistrySnapshot;

use crate::sandbox::container::{Container, ContainerRuntime, PendingImage, RuntimeError, labels};
use crate::sandbox::replay::{
    CHANGES_LABEL, ChangeSet, ContainerLimits, FingerprintMode, Normalizer, Replay, ReplayError, STAT_EXACT_LABEL,
    Verdict,
};

/// The repository part of every snapshot image's reference.
pub const SNAPSHOT_REPOSITORY: &str = "vcurve-snapshot";
/// How many hex digits of a lineage a snapshot's tag carries.
const LINEAGE_CHARS: usize = 12;

/// The start of every local snapshot reference of `lineage`: `vcurve-snapshot:<lineage[..12]>-`.
fn lineage_prefix(lineage: &str) -> String {
    format!("{SNAPSHOT_REPOSITORY}:{}-", &lineage[..LINEAGE_CHARS.min(lineage.len())])
}

/// The step `t` a snapshot reference of the trajectory with `digest` names: its tag ends with
/// `<digest[..16]>-<t>` ([`SnapshotCache::reference`], [`SnapshotCache::local_reference`]).
fn step_of_reference(reference: &str, digest: &str) -> Option<u32> {
    let tag = reference.strip_prefix(SNAPSHOT_REPOSITORY)?.strip_prefix(':')?;
    let (name, t) = tag.rsplit_once('-')?;
    (name.ends_with(digest.get(..16)?) && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .then(|| t.parse().ok())?
}

/// Pushes to the registry at once (the rest wait their turn).
pub const PUSH_CONCURRENCY: usize = 1;
/// How long one push may take before it is given up (logged and counted as failed).
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(600);
/// How long one pull may take before `h_t` is rebuilt by replay instead.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(600);

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
    /// The image's id: an anchor whose writable layer did not change since the previous one is
    /// that one's image under a second reference ([`SnapshotCache::alias`]), and the two share it.
    image_id: String,
    size_bytes: u64,
    /// A tick of [`Index::clock`]: higher is more recent.
    last_used: u64,
    pins: usize,
    changes: ChangeSet,
    /// Taken where git's stat check was exact ([`STAT_EXACT_LABEL`]).
    stat_exact: bool,
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

    /// The bytes of the images held, each image once however many references it has.
    fn total_bytes(&self) -> u64 {
        let mut seen = BTreeSet::new();
        self.entries.values().filter(|e| seen.insert(e.image_id.as_str())).map(|e| e.size_bytes).sum()
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
    /// The worker lineage whose snapshots this cache holds ([`SnapshotCache::open_in_lineage`]);
    /// `None`: every vcurve snapshot on the engine.
    lineage: Option<String>,
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

/// The background half of [`SnapshotCache::commit_later`]: the image being made and entered in
/// the cache. It goes on when this is dropped; [`PendingSnapshot::finish`] waits for it.
#[must_use = "a pending snapshot's failure is only seen by finishing it"]
pub struct PendingSnapshot {
    made: tokio::task::JoinHandle<Result<bool, ReplayError>>,
}

impl PendingSnapshot {
    /// Wait until the snapshot is made and held; what [`SnapshotCache::commit`] would have
    /// returned.
    pub async fn finish(self) -> Result<bool, ReplayError> {
        match self.made.await {
            Ok(result) => result,
            Err(e) => Err(ReplayError::from(RuntimeError::Engine(format!("making a snapshot image failed: {e}")))),
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
        SnapshotCache::open_in_lineage(runtime, budget_bytes, registry, None).await
    }

    /// [`SnapshotCache::open_with_registry`] holding only the snapshots of the worker lineage
    /// `lineage` ([`crate::sandbox::instance::Instance::lineage`]): its images are named with the
    /// lineage (`vcurve-snapshot:<lineage[..12]>-<digest[..16]>-<t>`) and labelled with it
    /// ([`labels::LINEAGE`]), and it adopts and evicts no other image. With `None`, every vcurve
    /// snapshot on the engine is its own, as one cache per engine.
    pub async fn open_in_lineage(
        runtime: Arc<dyn ContainerRuntime>,
        budget_bytes: u64,
        registry: Option<String>,
        lineage: Option<String>,
    ) -> Result<SnapshotCache, RuntimeError> {
        if let Some(registry) = &registry {
            SnapshotCache::check_registry(registry).map_err(RuntimeError::Engine)?;
        }
        if let Some(lineage) = &lineage
            && (lineage.len() < LINEAGE_CHARS || !lineage.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(RuntimeError::Engine(format!(
                "snapshot lineage {lineage:?} is not hex of {LINEAGE_CHARS}+ digits"
            )));
        }
        let filter = BTreeMap::from([(labels::MANAGED.to_owned(), "1".to_owned())]);
        let images = runtime.images(&filter).await?;
        let mut index = Index::default();
        let own_prefix = lineage.as_deref().map(lineage_prefix);
        for image in images {
            // Another lineage's snapshot is not ours to use or evict (a pulled one carries the
            // pushing lineage's label but our name).
            if let (Some(lineage), Some(prefix)) = (&lineage, &own_prefix)
                && image.labels.get(labels::LINEAGE) != Some(lineage)
                && !image.reference.starts_with(prefix.as_str())
            {
                continue;
            }
            let (Some(digest), Some(t)) =
                (image.labels.get(labels::SNAPSHOT_TRAJECTORY), image.labels.get(labels::SNAPSHOT_T))
            else {
                continue; // a managed image that is no snapshot
            };
            let Ok(labelled) = t.parse::<u32>() else {
                tracing::warn!(image = %image.reference, t = %t, "snapshot image with an unreadable step label; not used");
                continue;
            };
            // An alias ([`SnapshotCache::alias`]) carries the labels of the image it names again;
            // its own step is in its reference.
            let t = step_of_reference(&image.reference, digest).unwrap_or(labelled);
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
                Entry {
                    reference: image.reference,
                    image_id: image.id,
                    size_bytes: image.size_bytes,
                    last_used,
                    pins: 0,
                    changes,
                    stat_exact: image.labels.get(STAT_EXACT_LABEL).is_some_and(|v| v == "1"),
                },
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
                lineage,
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

    /// The local image reference of `h_t` in this cache: [`SnapshotCache::reference`], with the
    /// cache's lineage in the tag when it has one.
    pub fn local_reference(&self, digest: &str, t: u32) -> Result<String, ReplayError> {
        let reference = SnapshotCache::reference(digest, t)?;
        Ok(match &self.inner.lineage {
            Some(lineage) => {
                let tag = &reference[SNAPSHOT_REPOSITORY.len() + 1..];
                format!("{}{tag}", lineage_prefix(lineage))
            }
            None => reference,
        })
    }

    /// The lineage whose snapshots this cache holds, if it is limited to one.
    pub fn lineage(&self) -> Option<&str> {
        self.inner.lineage.as_deref()
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
    /// cache under its budget. `stat_exact`: git's stat check is exact in that state
    /// ([`crate::sandbox::replay::state_exact`]), so it stays exact in containers of the snapshot.
    /// Returns whether it committed.
    pub async fn commit(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
        stat_exact: bool,
    ) -> Result<bool, ReplayError> {
        match self.commit_later(container, digest, t, changes, stat_exact).await? {
            Some(pending) => pending.finish().await,
            None => Ok(false),
        }
    }

    /// [`SnapshotCache::commit`] in two halves: the container's state is taken before this returns
    /// (the container may go on), and the image is made from it and entered in the cache in the
    /// background ([`ContainerRuntime::commit_later`]): the returned [`PendingSnapshot`] tells when
    /// and how that ended. Until then `h_t` is not held, and whoever commits or prepares `h_t`
    /// waits for it (the key's lock goes with the background half). `None`: the cache holds `h_t`
    /// already.
    pub async fn commit_later(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
        stat_exact: bool,
    ) -> Result<Option<PendingSnapshot>, ReplayError> {
        let key = (digest.to_owned(), t);
        let lock = self.key_lock(&key);
        let building = lock.clone().lock_owned().await;
        let image = match self.capture_locked(container, digest, t, changes, stat_exact).await {
            Ok(Some(image)) => image,
            other => {
                drop(building);
                self.release_key_lock(&key, lock);
                return other.map(|_| None);
            }
        };
        let cache = self.clone();
        let changes = changes.clone();
        let made = tokio::spawn(async move {
            let result = match image.await {
                Ok(image_id) => cache.enter_committed(&key.0, key.1, image_id, changes, stat_exact).await,
                Err(e) => Err(ReplayError::from(e)),
            };
            drop(building);
            cache.release_key_lock(&key, lock);
            result
        });
        Ok(Some(PendingSnapshot { made }))
    }

    /// [`SnapshotCache::commit`] with the key's lock held.
    async fn commit_locked(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
        stat_exact: bool,
    ) -> Result<bool, ReplayError> {
        match self.capture_locked(container, digest, t, changes, stat_exact).await? {
            Some(image) => {
                let image_id = image.await?;
                self.enter_committed(digest, t, image_id, changes.clone(), stat_exact).await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The first half of a commit with the key's lock held: `None` when the cache holds `h_t`.
    async fn capture_locked(
        &self,
        container: &Container,
        digest: &str,
        t: u32,
        changes: &ChangeSet,
        stat_exact: bool,
    ) -> Result<Option<PendingImage>, ReplayError> {
        let reference = self.local_reference(digest, t)?;
        {
            let mut index = self.inner.index();
            let now = index.tick();
            if let Some(entry) = index.entries.get_mut(&(digest.to_owned(), t)) {
                entry.last_used = now;
                return Ok(None);
            }
        }
        let mut image_labels = BTreeMap::from([
            (labels::MANAGED.to_owned(), "1".to_owned()),
            (labels::SNAPSHOT_TRAJECTORY.to_owned(), digest.to_owned()),
            (labels::SNAPSHOT_T.to_owned(), t.to_string()),
            (CHANGES_LABEL.to_owned(), changes.to_label()),
        ]);
        if let Some(lineage) = &self.inner.lineage {
            image_labels.insert(labels::LINEAGE.to_owned(), lineage.clone());
        }
        // Always set: a container inherits its image's labels, and a commit keeps the container's.
        image_labels.insert(STAT_EXACT_LABEL.to_owned(), if stat_exact { "1" } else { "0" }.to_owned());
        Ok(Some(container.commit_later(&reference, &image_labels).await?))
    }

    /// The second half of a commit, once the image exists: enter it in the index with its size,
    /// push it (with a registry) and keep the cache under its budget. Returns `true`.
    async fn enter_committed(
        &self,
        digest: &str,
        t: u32,
        image_id: String,
        changes: ChangeSet,
        stat_exact: bool,
    ) -> Result<bool, ReplayError> {
        let reference = self.local_reference(digest, t)?;
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
                Entry { reference: reference.clone(), image_id, size_bytes, last_used, pins: 0, changes, stat_exact },
            );
        }
        tracing::info!(image = %reference, trajectory = %digest, t, size_bytes, "snapshot committed");
        self.push_in_background(digest, t);
        self.evict().await;
        Ok(true)
    }

    /// Hold `h_t` of the trajectory with `digest` as the image of `h_from`, a snapshot of the same
    /// container at an earlier step whose writable layer has not changed since (equal layer
    /// stamps): the image is named a second time instead of committed again (a commit costs a
    /// second or more, a name nothing), and counts once in the budget. Returns whether it named
    /// it: not when the cache holds `h_t` already or no longer holds `h_from`.
    ///
    /// An alias is not pushed to a registry: its labels name `h_from`, so no other host could
    /// check it as `h_t`; a host that needs `h_t` pulls `h_from` and replays the steps between,
    /// which changed nothing.
    pub async fn alias(&self, digest: &str, t: u32, from: u32) -> Result<bool, ReplayError> {
        let key = (digest.to_owned(), t);
        let lock = self.key_lock(&key);
        let result = {
            let _building = lock.lock().await;
            self.alias_locked(digest, t, from).await
        };
        self.release_key_lock(&key, lock);
        result
    }

    /// [`SnapshotCache::alias`] with the key's lock held.
    async fn alias_locked(&self, digest: &str, t: u32, from: u32) -> Result<bool, ReplayError> {
        let reference = self.local_reference(digest, t)?;
        let source = {
            let mut index = self.inner.index();
            let now = index.tick();
            if let Some(entry) = index.entries.get_mut(&(digest.to_owned(), t)) {
                entry.last_used = now;
                return Ok(false);
            }
            match index.entries.get(&(digest.to_owned(), from)) {
                Some(entry) => entry.clone(),
                None => return Ok(false),
            }
        };
        // Pinned while it is named, so that it is not evicted in between.
        let _pin = self.pin(digest, from);
        self.inner.runtime.tag(&source.reference, &reference).await?;
        {
            let mut index = self.inner.index();
            let last_used = index.tick();
            index
                .entries
                .insert((digest.to_owned(), t), Entry { reference: reference.clone(), last_used, pins: 0, ..source });
        }
        tracing::info!(image = %reference, trajectory = %digest, t, from, "snapshot named again: the layer did not change");
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

    /// Remove every snapshot of this cache that no job uses (a run that should leave no images
    /// behind, such as `vcurve demo --docker`); how many were removed. Images the engine refuses
    /// to remove are logged and kept in the index.
    pub async fn remove_all(&self) -> usize {
        let removed: Vec<(Key, Entry)> = {
            let mut index = self.inner.index();
            let keys: Vec<Key> = index.entries.iter().filter(|(_, e)| e.pins == 0).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|k| index.entries.remove(&k).map(|e| (k, e))).collect()
        };
        let mut count = 0;
        for (key, entry) in removed {
            match self.inner.runtime.remove_image(&entry.reference).await {
                Ok(()) => count += 1,
                Err(e) => {
                    tracing::warn!(image = %entry.reference, error = %e, "cannot remove a snapshot");
                    self.inner.index().entries.insert(key, entry);
                }
            }
        }
        count
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
    fn nearest(&self, digest: &str, t: u32) -> Option<(u32, String, (ChangeSet, bool), SnapshotPin)> {
        let mut index = self.inner.index();
        let now = index.tick();
        let range = (digest.to_owned(), 0)..=(digest.to_owned(), t);
        let (key, entry) = index.entries.range_mut(range).next_back()?;
        entry.pins += 1;
        entry.last_used = now;
        let pin = SnapshotPin { inner: self.inner.clone(), key: key.clone() };
        Some((key.1, entry.reference.clone(), (entry.changes.clone(), entry.stat_exact), pin))
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
                None => (0, trajectory.task.image.clone(), (ChangeSet::new(), true), None),
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
        (base, base_exact): (ChangeSet, bool),
        normalizer: &Normalizer,
    ) -> Result<Verdict<(Vec<CompareLevel>, bool)>, ReplayError> {
        let mut replay = Replay::new(container, trajectory, normalizer, FingerprintMode::CompareOnly, from, base)?;
        replay.set_base_exact(base_exact);
        while replay.t() < t {
            if let Some(mismatch) = replay.step().await? {
                return Ok(Verdict::NonReplayable(mismatch));
            }
        }
        let changes = replay.changes().await?;
        let exact = replay.state_exact().await?;
        let levels = replay.finish(from).levels;
        let committed = match self.commit_locked(container, digest, t, &changes, exact).await {
            Ok(committed) => committed,
            Err(e) => {
                tracing::warn!(trajectory = %digest, t, error = %e, "cannot commit a snapshot; the continuation goes on");
                false
            }
        };
        Ok(Verdict::Reproduced((levels, committed)))
    }
}

mod registry;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod registry_tests;
