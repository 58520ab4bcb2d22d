//! The `replay` job (docs/method.md §5): a whole trajectory replayed in a fresh container of its
//! task image, committed into the [`SnapshotCache`] at every anchor it passes.
//!
//! It sits between [`replay`](super::replay) (the step-by-step checks) and
//! [`snapshots`](super::snapshots) (the images), which both stay ignorant of it. As it passes each
//! step it also measures the trajectory's first edit and first symptom ([`Observe`]), which the
//! job reports with its result.

use std::collections::{BTreeMap, BTreeSet};

use futures::future::BoxFuture;
use vcurve_record::jobs::Replayed;
use vcurve_record::{Fingerprint, Trajectory};

use vcurve_method::analyses::Observation;

use crate::sandbox::container::{ChangeKind, Container};
use crate::sandbox::replay::{
    ChangeSet, ContainerLimits, FingerprintMode, Normalizer, OnStep, Replay, ReplayError, Verdict, replay_steps,
};
use crate::sandbox::snapshots::{PendingSnapshot, SnapshotCache};

/// A whole trajectory replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryReplay {
    /// The report of the replay job: the anchors committed and each step's level.
    pub replayed: Replayed,
    /// The fingerprints measured where the trajectory had none
    /// ([`FingerprintMode::RecordMissing`]).
    pub fingerprints: BTreeMap<u32, Fingerprint>,
    /// Of the anchors, how many were the anchor before them named again (their writable layer had
    /// not changed) rather than committed.
    pub aliased: usize,
}

/// Commits the anchors a whole-trajectory replay passes. An anchor whose writable layer has the
/// stamp it had at the anchor committed before it (nothing was written in between: the steps only
/// read, searched, ran tests that leave nothing) is that anchor's image named again
/// ([`SnapshotCache::alias`]), not committed. A commit's state is taken at its step and its image
/// made while the replay goes on to the next anchor ([`SnapshotCache::commit_later`]).
struct CommitAnchors<'c> {
    cache: &'c SnapshotCache,
    digest: &'c str,
    anchors: BTreeSet<u32>,
    committed: Vec<u32>,
    /// The last anchor this replay committed or named, with its layer's stamp.
    last: Option<(u32, String)>,
    /// Anchors named again instead of committed.
    aliased: usize,
    /// The last anchor's image, still being made while the replay goes on
    /// ([`SnapshotCache::commit_later`]); finished at the next anchor and when the replay ends.
    pending: Option<PendingSnapshot>,
}

impl CommitAnchors<'_> {
    /// Wait for the anchor still being made, if any.
    async fn finish(&mut self) -> Result<(), ReplayError> {
        match self.pending.take() {
            Some(pending) => pending.finish().await.map(|_| ()),
            None => Ok(()),
        }
    }
}

impl OnStep for CommitAnchors<'_> {
    fn reached<'r>(&'r mut self, replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>> {
        Box::pin(async move {
            let t = replay.t();
            if !self.anchors.contains(&t) {
                return Ok(());
            }
            // The previous anchor is held before this one is looked at (it may be named again).
            self.finish().await?;
            if self.cache.holds(self.digest, t) {
                self.last = None;
            } else {
                let (changes, stamp) = replay.changes_stamped().await?;
                let exact = replay.state_exact().await?;
                let unchanged = match (&self.last, &stamp) {
                    (Some((from, before)), Some(now)) if *before == now.hash => Some(*from),
                    _ => None,
                };
                let named = match unchanged {
                    Some(from) => self.cache.alias(self.digest, t, from).await?,
                    None => false,
                };
                if named {
                    self.aliased += 1;
                } else {
                    self.pending = self.cache.commit_later(replay.container(), self.digest, t, &changes, exact).await?;
                }
                self.last = stamp.map(|s| (t, s.hash));
            }
            self.committed.push(t);
            Ok(())
        })
    }
}

/// Measures the first edit and the first symptom (docs/method.md §3) as a whole-trajectory replay
/// passes each step.
///
/// - **First edit**: the first step after which `git diff` of the repository's tracked files is
///   not empty. `git diff` runs only at a step whose container diff (against the task image)
///   changed or deleted a file under the task's working directory — a file that existed in the
///   task image: a new file (`A`) is untracked, and a directory is left out as the parent of its
///   changed files ([`ChangeSet::fingerprint_paths`], which also leaves out caches and `.git/`
///   internals); it is the fingerprint's own `git diff` where the step measured one and the layer
///   did not move since. A directory-only change, a file written back to its bytes or a change
///   only `.gitignore` hides are not edits. Where `git diff` fails (the working directory is no git
///   repository) the container diff's candidate counts. Until the first edit every step costs
///   one container diff (shared with a fingerprint or an anchor's commit at that step); after it,
///   nothing.
/// - **First symptom**: the first step after the first edit whose replayed observations carry a
///   failure signal ([`Replay::failure_signal`]); it costs nothing.
#[derive(Debug, Default)]
struct Observe {
    first_edit: Option<u32>,
    first_symptom: Option<u32>,
}

impl Observe {
    async fn reached(&mut self, replay: &mut Replay<'_>) -> Result<(), ReplayError> {
        let t = replay.t();
        match self.first_edit {
            None => {
                if edits_the_repository(replay).await? {
                    self.first_edit = Some(t);
                }
            }
            Some(_) => {
                if self.first_symptom.is_none() && replay.failure_signal().is_some() {
                    self.first_symptom = Some(t);
                }
            }
        }
        Ok(())
    }

    /// What the replay measured, once every step reproduced: never where nothing was seen.
    fn observed(&self) -> (Observation, Observation) {
        (Observation::from(self.first_edit), Observation::from(self.first_symptom))
    }
}

/// Whether the state at `h_t` edits the repository: see [`Observe`].
async fn edits_the_repository(replay: &mut Replay<'_>) -> Result<bool, ReplayError> {
    let changes = replay.changes().await?;
    let task = &replay.trajectory().task;
    let root = format!("{}/", task.workdir.trim_end_matches('/'));
    let existed = changes
        .fingerprint_paths()
        .into_iter()
        .any(|p| p.starts_with(&root) && changes.kind(&p).is_some_and(|k| k != ChangeKind::Added));
    if !existed {
        return Ok(false);
    }
    // The step's fingerprint ran `git diff` already where it measured one. A `git diff` that
    // fails prints why, so a non-empty output is an edit or a failure, either of which counts.
    let (diff, _) = replay.git_state().await?;
    Ok(!diff.trim().is_empty())
}

/// What a whole-trajectory replay does at each step: measure the first edit and first symptom,
/// then commit the step if it is an anchor.
struct JobSteps<'c> {
    observe: Observe,
    anchors: CommitAnchors<'c>,
}

impl OnStep for JobSteps<'_> {
    fn reached<'r>(&'r mut self, replay: &'r mut Replay<'_>) -> BoxFuture<'r, Result<(), ReplayError>> {
        Box::pin(async move {
            self.observe.reached(replay).await?;
            self.anchors.reached(replay).await
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
    let mut hook = JobSteps {
        observe: Observe::default(),
        anchors: CommitAnchors {
            cache,
            digest,
            anchors: anchors.iter().copied().filter(|&t| t > 0).collect(),
            committed: Vec::new(),
            last: None,
            aliased: 0,
            pending: None,
        },
    };
    let verdict =
        replay_steps(&container, trajectory, 0, length, normalizer, fingerprints, ChangeSet::new(), &mut hook).await;
    let removed = container.remove().await;
    // The last anchor's image needs the container no more; it is waited for whatever happened.
    let made = hook.anchors.finish().await;
    let verdict = verdict?;
    removed?;
    made?;
    Ok(match verdict {
        Verdict::Reproduced(steps) => {
            let (first_edit, first_symptom) = hook.observe.observed();
            Verdict::Reproduced(TrajectoryReplay {
                replayed: Replayed {
                    anchors: hook.anchors.committed,
                    levels: steps.levels,
                    fingerprints: None,
                    first_edit,
                    first_symptom,
                },
                fingerprints: steps.fingerprints,
                aliased: hook.anchors.aliased,
            })
        }
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
            Replayed {
                anchors: vec![2, 4],
                levels: vec![CompareLevel::Exact; 5],
                fingerprints: None,
                // It only writes new files: never edits, so no symptom either.
                first_edit: Observation::Never,
                first_symptom: Observation::Never,
            }
        );
        assert_eq!(cache.held(), vec![(digest.clone(), 2), (digest.clone(), 4)]);
        assert_eq!(rt.count(Op::Create), 1);
        assert_eq!(rt.count(Op::Commit), 2);
        // One diff a step while the first edit is looked for (this run never edits: all 5), the
        // anchors' commits reusing theirs.
        assert_eq!(rt.count(Op::Diff), 5);
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

    /// An anchor whose writable layer has not changed since the anchor before it (the steps in
    /// between only read) is that anchor's image named again: no commit, one image in the budget,
    /// and a cache reopened on the engine finds both steps.
    #[tokio::test]
    async fn an_anchor_whose_layer_did_not_change_is_the_previous_image_named_again() {
        let rt = runtime();
        rt.set_stamps(true);
        let steps: &[&[(&str, f64)]] = &[
            &[("echo 1 > one", 10.0)],
            &[("cat one", 10.0)],
            &[("cat one", 10.0)],
            &[("cat one", 10.0)],
            &[("echo 5 > five", 10.0)],
            &[("cat five", 10.0)],
        ];
        let t = record(&rt, steps, false).await;
        let digest = t.digest();
        let engine: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(engine.clone(), 1 << 30).await.unwrap();
        let n = Normalizer::default();
        let out = replay_trajectory(&cache, &t, &digest, &[2, 4, 6], &n, FingerprintMode::CompareOnly, &limits())
            .await
            .unwrap();
        let Verdict::Reproduced(done) = out else { panic!("{out:?}") };
        assert_eq!(done.replayed.anchors, vec![2, 4, 6]);
        assert_eq!(done.aliased, 1, "h_4 is h_2: steps 3 and 4 only read");
        assert_eq!((rt.count(Op::Commit), rt.count(Op::Tag)), (2, 1));
        let image = |s: u32| rt.image(&SnapshotCache::reference(&digest, s).unwrap()).unwrap();
        assert_eq!(image(4).id, image(2).id);
        assert_ne!(image(6).id, image(2).id);
        assert!(image(6).files.contains_key("/testbed/five") && !image(4).files.contains_key("/testbed/five"));
        let bytes = image(2).size_bytes + image(6).size_bytes;
        assert_eq!(cache.total_bytes(), bytes, "the named-again image counts once");
        // A worker restarted on the same engine finds every anchor, at its own step.
        let reopened = SnapshotCache::open(engine, 1 << 30).await.unwrap();
        assert_eq!(reopened.held(), vec![(digest.clone(), 2), (digest.clone(), 4), (digest.clone(), 6)]);
        assert_eq!(reopened.total_bytes(), bytes);
        // Without stamps (a runtime that asks the engine for diffs) every anchor is committed.
        let rt = runtime();
        let t = record(&rt, steps, false).await;
        let engine: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(engine, 1 << 30).await.unwrap();
        let out = replay_trajectory(&cache, &t, &t.digest(), &[2, 4, 6], &n, FingerprintMode::CompareOnly, &limits())
            .await
            .unwrap();
        let Verdict::Reproduced(done) = out else { panic!("{out:?}") };
        assert_eq!((done.aliased, rt.count(Op::Commit), rt.count(Op::Tag)), (0, 3, 0));
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

    /// The first line of the one command a fingerprint's git state runs.
    const GIT_DIFF: &str = "git --no-optional-locks diff\n";

    async fn observed(steps: &[&[(&str, f64)]]) -> (Replayed, Arc<crate::sandbox::container::double::FakeRuntime>) {
        let rt = runtime();
        let t = record(&rt, steps, false).await;
        let digest = t.digest();
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(runtime, 1 << 30).await.unwrap();
        let n = Normalizer::default();
        let out =
            replay_trajectory(&cache, &t, &digest, &[0], &n, FingerprintMode::CompareOnly, &limits()).await.unwrap();
        (out.reproduced().expect("reproduced").replayed, rt)
    }

    #[tokio::test]
    async fn the_replay_measures_the_first_edit_and_the_first_symptom_after_it() {
        // The task image holds /testbed/a.py and /testbed/README.
        let (replayed, rt) = observed(&[
            &[("cat a.py", 10.0)],
            // A new file in the repository, and a change outside it: no edit.
            &[("echo x > new.py", 10.0), ("echo y > /etc/motd", 10.0)],
            // A failing run before the first edit is no symptom.
            &[("python3 new.py", 10.0)],
            // The first edit: a file of the task image's repository changes.
            &[("echo b > a.py", 10.0)],
            &[("echo fine", 10.0)],
            // `python3` is no command of the double: exit 127 of a script run, a failure signal.
            &[("python3 a.py", 10.0)],
            &[("python3 a.py", 10.0)],
        ])
        .await;
        assert_eq!((replayed.first_edit, replayed.first_symptom), (Observation::At(4), Observation::At(6)));
        // A container diff at each step up to the first edit, none after it; `git diff` only where
        // the container diff had a changed file of the repository.
        assert_eq!(rt.count(Op::Diff), 4);
        assert_eq!(rt.commands().iter().filter(|c| c.starts_with(GIT_DIFF)).count(), 1);
    }

    /// Where the replay measures a fingerprint at every step, the first edit reads the
    /// fingerprint's `git diff`: no git command of its own.
    #[tokio::test]
    async fn the_first_edit_reads_the_fingerprints_git_diff() {
        let rt = runtime();
        let steps: &[&[(&str, f64)]] = &[&[("cat a.py", 10.0)], &[("echo b > a.py", 10.0)], &[("echo fine", 10.0)]];
        let t = record(&rt, steps, false).await;
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        let cache = SnapshotCache::open(runtime, 1 << 30).await.unwrap();
        let out = replay_trajectory(
            &cache,
            &t,
            &t.digest(),
            &[0],
            &Normalizer::default(),
            FingerprintMode::RecordMissing,
            &limits(),
        )
        .await
        .unwrap();
        let done = out.reproduced().expect("reproduced");
        assert_eq!(done.replayed.first_edit, Observation::At(2));
        assert_eq!(done.fingerprints.len(), 3);
        assert!(done.fingerprints[&2].git_diff.contains("a.py"));
        assert_eq!(rt.commands().iter().filter(|c| c.starts_with(GIT_DIFF)).count(), 3, "one git state a step");
    }

    #[tokio::test]
    async fn deleting_a_file_of_the_repository_is_an_edit_and_a_silent_run_has_no_symptom() {
        let (replayed, _) = observed(&[&[("ls", 10.0)], &[("rm README", 10.0)], &[("cat a.py", 10.0)]]).await;
        assert_eq!((replayed.first_edit, replayed.first_symptom), (Observation::At(2), Observation::Never));
    }

    #[tokio::test]
    async fn a_run_that_only_adds_files_never_edits_and_has_no_symptom() {
        let (replayed, rt) = observed(&[
            &[("echo x > reproduce.py", 10.0)],
            &[("python3 reproduce.py", 10.0)],
            &[("rm reproduce.py", 10.0)],
        ])
        .await;
        assert_eq!((replayed.first_edit, replayed.first_symptom), (Observation::Never, Observation::Never));
        assert_eq!(rt.count(Op::Diff), 3);
        assert!(
            !rt.commands().iter().any(|c| c.starts_with(GIT_DIFF)),
            "no git diff without a changed file of the task image"
        );
    }

    #[tokio::test]
    async fn an_edit_and_a_symptom_in_one_step_count_the_edit_only() {
        // The symptom must come after the first edit: the edit's own step does not count.
        let (replayed, _) =
            observed(&[&[("echo b > a.py", 10.0), ("python3 a.py", 10.0)], &[("python3 a.py", 10.0)]]).await;
        assert_eq!((replayed.first_edit, replayed.first_symptom), (Observation::At(1), Observation::At(2)));
    }
}
