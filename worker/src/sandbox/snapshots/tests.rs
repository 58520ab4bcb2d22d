//! Tests of the snapshot cache on one host.

use std::sync::Arc;

use super::*;
use crate::sandbox::container::double::{Call, FakeRuntime, Op};
use crate::sandbox::replay::tests::{IMAGE, limits, record, runtime};
use crate::sandbox::replay_job::{TrajectoryReplay, replay_trajectory};

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
    let out =
        replay_trajectory(cache, t, &t.digest(), anchors, &n, FingerprintMode::CompareOnly, &limits()).await.unwrap();
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

#[tokio::test]
async fn a_lineage_adopts_and_evicts_only_its_own_snapshots() {
    // Issue 24: every worker adopted, and might evict, every vcurve snapshot on its engine.
    let rt = runtime();
    let t = record(&rt, STEPS, true).await;
    let (a, b) = ("a".repeat(32), "b".repeat(32));
    let open = |lineage: &str, budget: u64| {
        let runtime: Arc<dyn ContainerRuntime> = rt.clone();
        SnapshotCache::open_in_lineage(runtime, budget, None, Some(lineage.to_owned()))
    };
    let first = open(&a, 1 << 30).await.unwrap();
    replay_anchors(&first, &t, &[0, 2, 4]).await;
    let held = first.held();
    assert_eq!(held.len(), 2);
    let reference = first.local_reference(&t.digest(), 2).unwrap();
    assert!(reference.starts_with("vcurve-snapshot:aaaaaaaaaaaa-"), "{reference}");
    assert_eq!(rt.image(&reference).unwrap().labels[labels::LINEAGE], a);
    drop(first);
    // Another lineage on the engine, with no room at all: it holds and removes none of them.
    let other = open(&b, 0).await.unwrap();
    assert!(other.held().is_empty());
    assert!(removed_images(&rt).is_empty(), "{:?}", removed_images(&rt));
    // Its own snapshot of the same state is its own image.
    replay_anchors(&other, &t, &[0, 2]).await;
    assert!(rt.image(&reference).is_some(), "lineage a's h_2 is untouched");
    // The lineage a restarted adopts what it committed.
    let restarted = open(&a, 1 << 30).await.unwrap();
    assert_eq!(restarted.held(), held);
    assert!(open("short", 1).await.is_err());
    // Removing all of a lineage's snapshots leaves the other's.
    assert_eq!(restarted.remove_all().await, 2);
    assert!(rt.image(&reference).is_none());
    assert!(open(&a, 1 << 30).await.unwrap().held().is_empty());
}
