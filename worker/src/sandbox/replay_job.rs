//! The `replay` job (docs/method.md §5): a whole trajectory replayed in a fresh container of its
//! task image, committed into the [`SnapshotCache`] at every anchor it passes.
//!
//! It sits between [`replay`](super::replay) (the step-by-step checks) and
//! [`snapshots`](super::snapshots) (the images), which both stay ignorant of it.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::BoxFuture;
use vcurve_record::jobs::Replayed;
use vcurve_record::{Fingerprint, Trajectory};

use crate::sandbox::container::Container;
use crate::sandbox::replay::{
    ChangeSet, ContainerLimits, FingerprintMode, Normalizer, OnStep, Replay, ReplayError, Verdict, replay_steps,
};
use crate::sandbox::snapshots::SnapshotCache;

/// A whole trajectory replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryReplay {
    /// The report of the replay job: the anchors committed and each step's level.
    pub replayed: Replayed,
    /// The fingerprints measured where the trajectory had none
    /// ([`FingerprintMode::RecordMissing`]).
    pub fingerprints: BTreeMap<u32, Fingerprint>,
}

/// Commits the anchors a whole-trajectory replay passes.
struct CommitAnchors<'c> {
    cache: &'c SnapshotCache,
    digest: &'c str,
    anchors: BTreeSet<u32>,
    committed: Vec<u32>,
}

impl OnStep for CommitAnchors<'_> {
    fn reached<'r>(&'r mut self, replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>> {
        Box::pin(async move {
            let t = replay.t();
            if !self.anchors.contains(&t) {
                return Ok(());
            }
            if !self.cache.holds(self.digest, t) {
                let changes = replay.changes().await?;
                self.cache.commit(replay.container(), self.digest, t, &changes).await?;
            }
            self.committed.push(t);
            Ok(())
        })
    }
}

/// The `replay` job: replay the whole trajectory in a fresh container of the task image and commit
/// it at every anchor `t > 0` of `anchors` (`h_0` is the task image itself) into `cache` — each
/// snapshot one layer over the task image, committed from the one container as the replay passes
/// it. Anchors the cache holds already are not committed again. A non-replayable trajectory's
/// snapshots are removed: no continuation will run from them.
pub async fn replay_trajectory(
    cache: &SnapshotCache,
    trajectory: &Trajectory,
    digest: &str,
    anchors: &[u32],
    normalizer: &Normalizer,
    fingerprints: FingerprintMode,
    limits: &ContainerLimits,
) -> Result<Verdict<TrajectoryReplay>, ReplayError> {
    let length = trajectory.length();
    if let Some(&bad) = anchors.iter().find(|&&t| t > length) {
        return Err(ReplayError::Range { from: 0, to: bad, length });
    }
    SnapshotCache::reference(digest, 0)?;
    let container = Container::start(cache.runtime().clone(), &limits.spec(&trajectory.task.image)).await?;
    let mut hook = CommitAnchors {
        cache,
        digest,
        anchors: anchors.iter().copied().filter(|&t| t > 0).collect(),
        committed: Vec::new(),
    };
    let verdict =
        replay_steps(&container, trajectory, 0, length, normalizer, fingerprints, ChangeSet::new(), &mut hook).await;
    let removed = container.remove().await;
    let verdict = verdict?;
    removed?;
    Ok(match verdict {
        Verdict::Reproduced(steps) => Verdict::Reproduced(TrajectoryReplay {
            replayed: Replayed { anchors: hook.committed, levels: steps.levels, fingerprints: None },
            fingerprints: steps.fingerprints,
        }),
        Verdict::NonReplayable(mismatch) => {
            cache.forget(digest).await;
            Verdict::NonReplayable(mismatch)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vcurve_record::jobs::CompareLevel;

    use super::*;
    use crate::sandbox::container::ContainerRuntime;
    use crate::sandbox::container::double::Op;
    use crate::sandbox::replay::tests::{IMAGE, limits, record, runtime};

    #[tokio::test]
    async fn a_whole_trajectory_replay_commits_its_anchors() {
        let rt = runtime();
        let steps: &[&[(&str, f64)]] = &[
            &[("echo 1 > one", 10.0)],
            &[("echo 2 > two", 10.0)],
            &[("echo 3 > three", 10.0)],
            &[("echo 4 > four", 10.0)],
            &[("cat one two", 10.0)],
        ];
        let t = record(&rt, steps, false).await;
        let digest = t.digest();
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(runtime, 1 << 30).await.unwrap();
        let n = Normalizer::default();
        let out = replay_trajectory(&cache, &t, &digest, &[0, 2, 4], &n, FingerprintMode::CompareOnly, &limits())
            .await
            .unwrap();
        let Verdict::Reproduced(done) = out else { panic!("{out:?}") };
        assert_eq!(
            done.replayed,
            Replayed { anchors: vec![2, 4], levels: vec![CompareLevel::Exact; 5], fingerprints: None }
        );
        assert_eq!(cache.held(), vec![(digest.clone(), 2), (digest.clone(), 4)]);
        assert_eq!(rt.count(Op::Create), 1);
        assert_eq!(rt.count(Op::Commit), 2);
        // Diffs only where an anchor was committed.
        assert_eq!(rt.count(Op::Diff), 2);
        assert!(rt.running().is_empty());
        let snap = rt.image(&SnapshotCache::reference(&digest, 4).unwrap()).unwrap();
        assert_eq!(snap.parent.as_deref(), Some(IMAGE));
        assert!(snap.files.contains_key("/testbed/four") && !snap.files.contains_key("/testbed/five"));
        assert_eq!(snap.labels.get(crate::sandbox::container::labels::SNAPSHOT_T).map(String::as_str), Some("4"));

        // A second replay commits nothing new.
        let again = replay_trajectory(&cache, &t, &digest, &[0, 2, 4], &n, FingerprintMode::CompareOnly, &limits())
            .await
            .unwrap();
        assert_eq!(again.reproduced().unwrap().replayed.anchors, vec![2, 4]);
        assert_eq!(rt.count(Op::Commit), 2);
    }

    #[tokio::test]
    async fn a_non_replayable_trajectory_leaves_no_snapshots() {
        let rt = runtime();
        let steps: &[&[(&str, f64)]] =
            &[&[("echo 1", 10.0)], &[("echo 2", 10.0)], &[("random", 10.0)], &[("echo 4", 10.0)]];
        let t = record(&rt, steps, false).await;
        let digest = t.digest();
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(runtime, 1 << 30).await.unwrap();
        let n = Normalizer::default();
        let out =
            replay_trajectory(&cache, &t, &digest, &[0, 1, 2, 3], &n, FingerprintMode::CompareOnly, &limits()).await;
        let Verdict::NonReplayable(nr) = out.unwrap() else { panic!("reproduced") };
        assert_eq!(nr.step, 3);
        assert_eq!(rt.count(Op::Commit), 2);
        assert!(cache.held().is_empty());
        assert_eq!(rt.image_references(), vec![IMAGE.to_owned()]);
        assert!(rt.running().is_empty());
        assert!(!rt.commands().contains(&"echo 4".to_owned()));
    }
}
