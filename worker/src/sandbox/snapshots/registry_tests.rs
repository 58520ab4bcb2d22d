//! Tests of snapshots across hosts through a registry.

use std::sync::Arc;

use super::tests::{STEPS, created_from, replay_anchors, snap};
use super::*;
use crate::sandbox::container::double::{FakeRuntime, Op};
use crate::sandbox::replay::tests::{IMAGE, limits, record, runtime};

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
            RegistrySnapshot {
                trajectory_digest: vcurve_record::Digest::parse(&d).unwrap(),
                t: 2,
                image_id: rt.image(&snap(&t, 2)).unwrap().id
            },
            RegistrySnapshot {
                trajectory_digest: vcurve_record::Digest::parse(&d).unwrap(),
                t: 4,
                image_id: rt.image(&snap(&t, 4)).unwrap().id
            },
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
    other.trajectory_digest = vcurve_record::Digest::parse(&"ab".repeat(32)).unwrap();
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
    let check_registry = SnapshotCache::check_registry;
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
