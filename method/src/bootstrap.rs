//! The task-level cluster bootstrap for shares over labels (docs/method.md §3).
//!
//! Labels of one task are not independent (its trajectories share a repository and a pass rate),
//! so the interval resamples whole tasks: each resample draws as many tasks as there are, with
//! replacement, and pools their counts. The generator is ChaCha8 from a fixed seed, so the interval
//! is the same on every machine and every run.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One task's contribution to a share: `hits` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub hits: u32,
    pub total: u32,
}

/// The percentile interval (`confidence`, e.g. 0.95) of the pooled share `Σ hits / Σ total` over
/// `resamples` cluster resamples. `None` when there is nothing to share.
pub fn cluster_bootstrap_share(clusters: &[Cluster], resamples: u32, seed: u64, confidence: f64) -> Option<(f64, f64)> {
    if clusters.iter().all(|c| c.total == 0) || resamples == 0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let k = clusters.len();
    let mut shares: Vec<f64> = (0..resamples)
        .filter_map(|_| {
            let (hits, total) = (0..k).fold((0u64, 0u64), |(h, t), _| {
                let c = clusters[rng.random_range(0..k)];
                (h + u64::from(c.hits), t + u64::from(c.total))
            });
            (total > 0).then(|| hits as f64 / total as f64)
        })
        .collect();
    shares.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    Some((quantile(&shares, tail), quantile(&shares, 1.0 - tail)))
}

/// Linear-interpolation quantile of sorted values (the usual "type 7").
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_clusters_give_a_point_interval() {
        let clusters = vec![Cluster { hits: 1, total: 2 }; 10];
        assert_eq!(cluster_bootstrap_share(&clusters, 1000, 7, 0.95), Some((0.5, 0.5)));
    }

    #[test]
    fn interval_brackets_the_pooled_share_and_is_reproducible() {
        let clusters: Vec<Cluster> = (0..20).map(|i| Cluster { hits: i % 4, total: 3 + i % 3 }).collect();
        let pooled =
            clusters.iter().map(|c| c.hits).sum::<u32>() as f64 / clusters.iter().map(|c| c.total).sum::<u32>() as f64;
        let (lo, hi) = cluster_bootstrap_share(&clusters, 10_000, 42, 0.95).unwrap();
        assert!(lo < pooled && pooled < hi, "{lo} {pooled} {hi}");
        assert_eq!(cluster_bootstrap_share(&clusters, 10_000, 42, 0.95), Some((lo, hi)));
    }

    #[test]
    fn nothing_to_share() {
        assert_eq!(cluster_bootstrap_share(&[], 100, 1, 0.95), None);
        assert_eq!(cluster_bootstrap_share(&[Cluster { hits: 0, total: 0 }], 100, 1, 0.95), None);
    }

    #[test]
    fn quantile_interpolates() {
        assert_eq!(quantile(&[0.0, 1.0, 2.0, 3.0], 0.5), 1.5);
        assert_eq!(quantile(&[5.0], 0.975), 5.0);
    }
}
