//! The snapshot cache across hosts (see the module docs of [`super`]): pushing what the cache
//! commits to the registry in the background, and pulling a registry snapshot and checking it
//! before a continuation replays.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Entry, PULL_TIMEOUT, PUSH_TIMEOUT, RegistrySnapshot, SnapshotCache};
use crate::sandbox::container::{RuntimeError, labels};
use crate::sandbox::replay::{CHANGES_LABEL, ChangeSet, ReplayError};

impl SnapshotCache {
    /// The reference of `h_t` of the trajectory with `digest` in `registry` (`HOST:PORT`).
    pub fn remote(registry: &str, digest: &str, t: u32) -> Result<String, ReplayError> {
        Ok(format!("{registry}/{}", SnapshotCache::reference(digest, t)?))
    }
    /// Push `h_t` (held) to the registry in the background, pinned until the push ends.
    pub(super) fn push_in_background(&self, digest: &str, t: u32) {
        let Some(registry) = self.inner.registry.clone() else { return };
        let Some(pin) = self.pin(digest, t) else { return };
        // A payload's digest names the snapshot in the coordinator's registry: one that is not a
        // digest (never, for a payload the coordinator handed out) is kept on this host only.
        let (Ok(reference), Ok(remote), Ok(digest)) = (
            self.local_reference(digest, t),
            SnapshotCache::remote(&registry, digest, t),
            vcurve_record::Digest::parse(digest),
        ) else {
            return;
        };
        let inner = self.inner.clone();
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
    pub(super) async fn pull_locked(&self, registry: &str, snapshot: &RegistrySnapshot) -> bool {
        let (digest, t) = (snapshot.trajectory_digest.as_str(), snapshot.t);
        if self.holds(digest, t) {
            return true;
        }
        let (Ok(reference), Ok(remote)) = (self.local_reference(digest, t), SnapshotCache::remote(registry, digest, t))
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
    pub(super) async fn pulled_entry(&self, reference: &str, digest: &str, t: u32) -> Result<Entry, String> {
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
        Ok(Entry {
            reference: reference.to_owned(),
            image_id: image.id,
            size_bytes: image.size_bytes,
            last_used,
            pins: 0,
            changes,
            stat_exact: image.labels.get(crate::sandbox::replay::STAT_EXACT_LABEL).is_some_and(|v| v == "1"),
        })
    }

    /// Pull `in_registry` when it is nearer to `t` than any snapshot held; the step pulled.
    /// Called with the lock of `(digest, t)` held; takes the pulled key's (a lower `t`: locks are
    /// always taken from the highest `t` down, so two prepares cannot wait on each other).
    pub(super) async fn pull_for(&self, digest: &str, t: u32, in_registry: Option<&RegistrySnapshot>) -> Option<u32> {
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

    /// Check a registry address: `HOST:PORT` (no scheme, no path).
    pub(super) fn check_registry(registry: &str) -> Result<(), String> {
        let bad = || format!("snapshot registry {registry:?}: give HOST:PORT, e.g. 127.0.0.1:5000");
        let (host, port) = registry.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || host.contains('/') || host.contains("://") || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        Ok(())
    }
}
