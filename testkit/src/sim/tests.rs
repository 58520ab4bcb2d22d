//! The simulator's parts, and a small cluster run end to end.

use std::collections::{BTreeSet, HashMap};

use super::*;
use vcurve_method::schedule::Key;
use vcurve_method::schedule::Series;

fn key(t: u32, seed: u32) -> Key {
    Key { series: Series::Main, t, seed }
}

#[test]
fn durations_have_the_asked_median_and_p99() {
    let d = Durations::new(180.0, 1800.0, 3).unwrap();
    assert!((d.quantile_s(0.5) - 180.0).abs() < 1e-9);
    assert!((d.quantile_s(0.99) - 1800.0).abs() < 1e-6);
    let mut sample: Vec<i64> = (0..40_000).map(|i| d.of("traj", key(i % 100, i / 100), 100 - i % 100, false)).collect();
    sample.sort_unstable();
    let q = |p: f64| sample[(p * (sample.len() - 1) as f64).round() as usize] as f64 / 1000.0;
    assert!((q(0.5) / 180.0 - 1.0).abs() < 0.03, "median {}", q(0.5));
    assert!((q(0.99) / 1800.0 - 1.0).abs() < 0.12, "p99 {}", q(0.99));
    // A function of the key.
    assert_eq!(d.of("traj", key(4, 2), 96, false), d.of("traj", key(4, 2), 7, true));
    assert!(Durations::new(0.0, 10.0, 1).is_err());
    assert!(Durations::new(10.0, 5.0, 1).is_err());
}

#[test]
fn realistic_durations_follow_the_budget_left_and_the_outcome() {
    let d = Durations::with_model(DurationModel::Realistic, 180.0, 1800.0, 3).unwrap();
    let keys: Vec<Key> = (0..4000).map(|i| key(i % 90, i / 90)).collect();
    // Failures: about FAILURE_TO_CAP of them at the cap, none beyond it; successes earlier.
    let at_cap = keys.iter().filter(|k| d.steps("traj", **k, 100 - k.t, false) == 100 - k.t).count();
    let share = at_cap as f64 / keys.len() as f64;
    assert!((share - FAILURE_TO_CAP).abs() < 0.04, "{share}");
    for k in &keys {
        let b = 100 - k.t;
        assert!((1..=b).contains(&d.steps("traj", *k, b, false)));
        assert!((1..=(SUCCESS_SPAN * f64::from(b)).ceil() as u32).contains(&d.steps("traj", *k, b, true)));
    }
    assert_eq!(d.steps("traj", key(100, 0), 0, false), 0);
    // Duration is steps × the task's speed × noise: a failure from t = 0 takes longer than a
    // success from t = 80 on the median, and a slow task is slow throughout.
    let median = |mut v: Vec<i64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let early = median(keys.iter().map(|k| d.of("traj", key(0, k.seed + 1000 * k.t), 100, false)).collect());
    let late = median(keys.iter().map(|k| d.of("traj", key(80, k.seed + 1000 * k.t), 20, true)).collect());
    assert!(early > 5 * late, "{early} {late}");
    let speeds: Vec<f64> = (0..2000).map(|i| d.step_s(&format!("task-{i}"))).collect();
    let mut sorted = speeds.clone();
    sorted.sort_by(f64::total_cmp);
    assert!((sorted[1000] / STEP_MEDIAN_S - 1.0).abs() < 0.05, "{}", sorted[1000]);
    assert!(DurationModel::parse("oracle").is_err());
    assert_eq!(DurationModel::parse("blind").unwrap(), DurationModel::Blind);
}

/// c once a and b are in, d once c is.
fn barriers() -> impl FnMut(Key) -> Vec<Key> {
    let mut done = BTreeSet::new();
    move |k| {
        done.insert(k);
        let mut next = Vec::new();
        if done.contains(&key(0, 0)) && done.contains(&key(0, 1)) {
            next.push(key(1, 0));
        }
        if done.contains(&key(1, 0)) {
            next.push(key(2, 0));
        }
        next
    }
}

#[test]
fn the_chain_is_the_longest_path_through_the_barriers() {
    // Round 1: a (5) and b (10); once both are in, c (3); c then asks for d (4). Meanwhile
    // e (20) runs from the start and asks for nothing.
    let durations: HashMap<Key, i64> =
        [(key(0, 0), 5), (key(0, 1), 10), (key(1, 0), 3), (key(2, 0), 4), (key(3, 0), 20)].into();
    let (end, ran) = critical_path(vec![key(0, 0), key(0, 1), key(3, 0)], |k| durations[&k], barriers());
    assert_eq!(end, 20); // e alone; the barrier chain is 10 + 3 + 4 = 17
    assert_eq!(ran.len(), 5);
    let mut durations = durations;
    durations.insert(key(3, 0), 1);
    let (end, _) = critical_path(vec![key(0, 0), key(0, 1), key(3, 0)], |k| durations[&k], barriers());
    assert_eq!(end, 17);
}

#[test]
fn the_oblivious_makespan_is_list_scheduling_in_random_orders() {
    // One slot: the sum, whatever the order; equal durations: full waves.
    assert_eq!(oblivious_makespan(&[5, 1, 3], 1, 4, 1), 9.0);
    assert_eq!(oblivious_makespan(&[2; 7], 3, 4, 1), 6.0);
    // More slots than continuations: the longest.
    assert_eq!(oblivious_makespan(&[2, 9, 4], 8, 4, 1), 9.0);
    // One long continuation among many short ones: it ends last unless it starts first.
    let mut ds = vec![1; 99];
    ds.push(50);
    let m = oblivious_makespan(&ds, 10, 64, 3);
    assert!(m > 50.0 && m < 60.0, "{m}");
    assert_eq!(oblivious_makespan(&[], 4, 4, 1), 0.0);
}

#[test]
fn utilization_splits_busy_time_over_the_buckets() {
    // Two slots over 20 ms: one busy all along, one for the first 5 ms.
    let u = utilization(&[(0, 20), (0, 5)], 2, 20);
    assert_eq!(u.len(), BUCKETS);
    assert!(u[..5].iter().all(|&x| (x - 1.0).abs() < 1e-9), "{u:?}");
    assert!(u[5..].iter().all(|&x| (x - 0.5).abs() < 1e-9), "{u:?}");
}

#[tokio::test]
async fn a_small_cluster_finishes_every_trajectory_above_the_bound() {
    let settings = ClusterSettings {
        store_url: "sqlite::memory:".into(),
        schedule: vcurve_method::schedule::variants::variant_by_name("paper").unwrap(),
        workers: 20,
        slots: 1,
        trajectories: 5,
        durations: Durations::with_model(DurationModel::Realistic, 180.0, 1800.0, 1).unwrap(),
        median_min: 3.0,
        p99_min: 30.0,
        seed: 1,
        progress: false,
    };
    let store = vcurve_coordinator::store::SqlStore::connect(&settings.store_url).await.unwrap();
    let r = run(&store, &settings).await.unwrap();
    assert!(r.continuations > 5 * 72, "{r:?}");
    assert_eq!(r.durations, "realistic");
    assert!(r.makespan_s >= r.lower_bound_s, "{r:?}");
    assert!(r.ratio >= 1.0);
    assert!(r.first_curve_s > 0.0 && r.first_curve_s <= r.makespan_s);
    assert!(r.mean_utilization > 0.0 && r.mean_utilization <= 1.0);
    assert_eq!(r.utilization.len(), BUCKETS);
}
