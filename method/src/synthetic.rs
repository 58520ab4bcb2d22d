//! Synthetic V-curves with known truth, for measuring schedules (issue 3, the paper's Table 33).
//!
//! Every curve has `T` uniform in `40..=100`, `p0 = V(h_0)` uniform in `[0.25, 1]` and `V(T) = 0`.
//! A curve is a pure function of `(seed, family, index)`, and so is the outcome of every
//! continuation key: [`SyntheticCurve::outcome`] hashes the key, so a run's results do not depend
//! on the order in which continuations are simulated.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::curve::Shape;
use crate::schedule::Key;
use crate::{TOLERANCE, meets_at_least};

/// The four families of issue 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Full value until `t*`, nothing after.
    PlateauCliff,
    /// A drop of at least half the value at `t*`, then a linear slide to 0.
    Cliff,
    /// 4–10 drops, each below half the value.
    Erosion,
    /// Full value to the last step.
    Flat,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::PlateauCliff, Family::Cliff, Family::Erosion, Family::Flat];

    pub fn as_str(&self) -> &'static str {
        match self {
            Family::PlateauCliff => "plateau_cliff",
            Family::Cliff => "cliff",
            Family::Erosion => "erosion",
            Family::Flat => "flat",
        }
    }
}

/// A true curve `V(t)` for `t = 0..=T` and the key-hashing outcome stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticCurve {
    pub family: Family,
    /// `V(t)` for `t = 0..=T`; `values[T] = 0`.
    pub values: Vec<f64>,
    /// Seed of the outcome hash.
    pub outcome_seed: u64,
}

/// SplitMix64's finalizer: a fast, well-mixed 64-bit hash.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SyntheticCurve {
    /// Draw curve number `index` of `family` under `seed`.
    pub fn draw(family: Family, seed: u64, index: u64) -> Self {
        let stream = mix(mix(seed) ^ mix(family as u64 + 1) ^ mix(index.wrapping_mul(0x1000_0001)));
        let mut rng = ChaCha8Rng::seed_from_u64(stream);
        let length: u32 = rng.random_range(40..=100);
        let p0: f64 = rng.random_range(0.25..=1.0);
        let t_len = length as usize;
        let mut values = vec![p0; t_len + 1];
        values[t_len] = 0.0;
        match family {
            Family::PlateauCliff => {
                let t_star = rng.random_range(1..=length - 2) as usize;
                values[t_star..].fill(0.0);
            }
            Family::Cliff => {
                let t_star = rng.random_range(1..=length - 2) as usize;
                let drop: f64 = rng.random_range(0.5 * p0..=p0);
                let t_end = (length - 1).min(t_star as u32 + rng.random_range(5..=30)) as usize;
                let rest = p0 - drop;
                for (t, v) in values.iter_mut().enumerate().skip(t_star) {
                    *v = if t >= t_end { 0.0 } else { rest * (t_end - t) as f64 / (t_end - t_star) as f64 };
                }
            }
            Family::Erosion => {
                let count = rng.random_range(4..=10usize);
                // Positions without replacement from 1..=T−1 (partial Fisher–Yates).
                let mut pool: Vec<usize> = (1..t_len).collect();
                for i in 0..count {
                    let j = rng.random_range(i..pool.len());
                    pool.swap(i, j);
                }
                let positions = &pool[..count];
                let sizes = loop {
                    let w: Vec<f64> = (0..count).map(|_| rng.random_range(0.0..=1.0)).collect();
                    let total: f64 = w.iter().sum();
                    if total <= 0.0 {
                        continue;
                    }
                    let sizes: Vec<f64> = w.iter().map(|x| p0 * x / total).collect();
                    if sizes.iter().all(|&s| s < 0.5 * p0) {
                        break sizes;
                    }
                };
                let last = *positions.iter().max().expect("count ≥ 4");
                for (t, v) in values.iter_mut().enumerate().take(t_len) {
                    let lost: f64 = positions.iter().zip(&sizes).filter(|&(&p, _)| p <= t).map(|(_, s)| s).sum();
                    // From the last drop on the curve is exactly 0, not a rounding residue.
                    *v = if t >= last { 0.0 } else { (p0 - lost).max(0.0) };
                }
            }
            Family::Flat => {}
        }
        SyntheticCurve { family, values, outcome_seed: mix(stream ^ 0x5EED) }
    }

    pub fn length(&self) -> u32 {
        (self.values.len() - 1) as u32
    }

    pub fn p0(&self) -> f64 {
        self.values[0]
    }

    /// The true decisive step: the largest `V(t−1) − V(t)` over `t = 1..=T`, earliest on ties.
    pub fn true_t_star(&self) -> (u32, f64) {
        largest_drop(&self.values)
    }

    /// The true shape: cliff when the largest drop is at least half of `p0`, else erosion; flat
    /// curves have none.
    pub fn true_shape(&self) -> Option<Shape> {
        if self.family == Family::Flat {
            return None;
        }
        let (_, drop) = self.true_t_star();
        Some(if meets_at_least(drop, 0.5 * self.p0()) { Shape::Cliff } else { Shape::Erosion })
    }

    /// The outcome of a continuation: success iff `u < V(t)`, `u` uniform from a hash of the key.
    pub fn outcome(&self, key: Key) -> bool {
        outcome(&self.values, self.outcome_seed, key)
    }
}

/// The largest `values[t−1] − values[t]` over `t = 1..=T` and its `t`, earliest on ties.
pub fn largest_drop(values: &[f64]) -> (u32, f64) {
    let mut best = (1, f64::NEG_INFINITY);
    for t in 1..values.len() {
        let drop = values[t - 1] - values[t];
        if drop > best.1 + TOLERANCE {
            best = (t as u32, drop);
        }
    }
    best
}

/// The outcome of a continuation on the true curve `values`: success iff `u < V(t)`, `u` uniform
/// from a hash of `outcome_seed` and the key.
pub fn outcome(values: &[f64], outcome_seed: u64, key: Key) -> bool {
    let h = mix(outcome_seed ^ mix((u64::from(key.t) << 40) ^ (u64::from(key.seed) << 8) ^ key.series as u64));
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    u < values[key.t as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_have_the_promised_shape() {
        for family in Family::ALL {
            for i in 0..300 {
                let c = SyntheticCurve::draw(family, 11, i);
                let t = c.length();
                assert!((40..=100).contains(&t));
                assert!((0.25..=1.0).contains(&c.p0()));
                assert_eq!(c.values[t as usize], 0.0);
                assert!(c.values.windows(2).all(|w| w[0] >= w[1] - 1e-12), "{family:?} rises");
                let (t_star, drop) = c.true_t_star();
                match family {
                    Family::PlateauCliff => {
                        assert!(t_star <= t - 2 && (drop - c.p0()).abs() < 1e-12);
                        assert_eq!(c.true_shape(), Some(Shape::Cliff));
                    }
                    Family::Cliff => {
                        assert!(drop >= 0.5 * c.p0() - 1e-9);
                        assert_eq!(c.true_shape(), Some(Shape::Cliff));
                    }
                    Family::Erosion => {
                        assert!(drop < 0.5 * c.p0());
                        assert_eq!(c.true_shape(), Some(Shape::Erosion));
                        assert!(c.values[t as usize - 1] == 0.0 || c.values[..t as usize].iter().all(|&v| v > 0.0));
                    }
                    Family::Flat => {
                        assert_eq!((t_star, c.true_shape()), (t, None));
                    }
                }
            }
        }
    }

    #[test]
    fn curves_and_outcomes_are_reproducible() {
        let a = SyntheticCurve::draw(Family::Cliff, 5, 17);
        assert_eq!(a, SyntheticCurve::draw(Family::Cliff, 5, 17));
        assert_ne!(a, SyntheticCurve::draw(Family::Cliff, 5, 18));
        let key = Key { series: crate::schedule::Series::Main, t: 3, seed: 2 };
        assert_eq!(a.outcome(key), a.outcome(key));
        // The outcome rate follows V(t).
        let flat = SyntheticCurve::draw(Family::Flat, 1, 0);
        let hits = (0..20_000).filter(|&s| flat.outcome(Key { seed: s, ..key })).count();
        assert!((hits as f64 / 20_000.0 - flat.p0()).abs() < 0.02);
    }
}
