//! Synthetic V-curves with known truth, for measuring schedules (issue 3, the paper's Table 33).
//!
//! The paper's four families ([`Family::PAPER`]) and six more shapes a failure can take (issue
//! 27): two separate cliffs, staircases of small drops, slow slides, early and late cliffs, low
//! plateaus. Every curve has `T` uniform in `40..=100` and `V(T) = 0`; `p0 = V(h_0)` is uniform in
//! `[0.25, 1]` but on low plateaus (uniform in `[0.15, 0.3]`).
//! A curve is a pure function of `(seed, family, index)`, and so is the outcome of every
//! continuation key: [`SyntheticCurve::outcome`] hashes the key, so a run's results do not depend
//! on the order in which continuations are simulated.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::curve::Shape;
use crate::schedule::Key;
use crate::{TOLERANCE, meets_at_least};

/// The families of synthetic curves: the paper's four (issue 3) and six more shapes (issue 27).
/// Their order is fixed: a family's place seeds its curves.
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
    /// Two cliffs at least 10 steps apart, each 30–70% of the value, nothing after the second.
    TwoCliffs,
    /// 3–6 drops of similar size (each below half the value) at regular steps, nothing after
    /// the last.
    Staircase,
    /// A linear slide from full value to 0 over at least half of the run.
    SlowSlide,
    /// A plateau-cliff whose cliff is at one of the first 5 steps.
    EarlyCliff,
    /// A plateau-cliff whose cliff is at one of the last 8 steps before `T − 1`.
    LateCliff,
    /// A plateau-cliff at a low value: `p0` uniform in `[0.15, 0.3]`.
    LowPlateau,
}

impl Family {
    /// The paper's four families (Table 33), which the cluster simulation cycles through.
    pub const PAPER: [Family; 4] = [Family::PlateauCliff, Family::Cliff, Family::Erosion, Family::Flat];

    /// Every family, in the order `vcurve bench schedule` draws them.
    pub const ALL: [Family; 10] = [
        Family::PlateauCliff,
        Family::Cliff,
        Family::Erosion,
        Family::Flat,
        Family::TwoCliffs,
        Family::Staircase,
        Family::SlowSlide,
        Family::EarlyCliff,
        Family::LateCliff,
        Family::LowPlateau,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Family::PlateauCliff => "plateau_cliff",
            Family::Cliff => "cliff",
            Family::Erosion => "erosion",
            Family::Flat => "flat",
            Family::TwoCliffs => "two_cliffs",
            Family::Staircase => "staircase",
            Family::SlowSlide => "slow_slide",
            Family::EarlyCliff => "early_cliff",
            Family::LateCliff => "late_cliff",
            Family::LowPlateau => "low_plateau",
        }
    }

    /// The family named `name` ([`Family::as_str`]).
    pub fn parse(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// The least gap between the two cliffs of [`Family::TwoCliffs`].
const TWO_CLIFFS_GAP: u32 = 10;

/// `values[t] = p0 − (the drops at or before t)` for `t < T`, exactly 0 from the last drop on (not
/// a rounding residue): the curve of drops `sizes` at steps `positions` (in `1..T`).
fn apply_drops(values: &mut [f64], p0: f64, positions: &[usize], sizes: &[f64]) {
    let t_len = values.len() - 1;
    let last = *positions.iter().max().expect("at least one drop");
    for (t, v) in values.iter_mut().enumerate().take(t_len) {
        let lost: f64 = positions.iter().zip(sizes).filter(|&(&p, _)| p <= t).map(|(_, s)| s).sum();
        *v = if t >= last { 0.0 } else { (p0 - lost).max(0.0) };
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
                apply_drops(&mut values, p0, positions, &sizes);
            }
            Family::Flat => {}
            Family::TwoCliffs => {
                // The first cliff leaves room for the gap and a second cliff before `T − 1`.
                let first = rng.random_range(1..=length - 2 - TWO_CLIFFS_GAP);
                let second = rng.random_range(first + TWO_CLIFFS_GAP..=length - 2);
                let share: f64 = rng.random_range(0.3..=0.7);
                apply_drops(&mut values, p0, &[first as usize, second as usize], &[share * p0, (1.0 - share) * p0]);
            }
            Family::Staircase => {
                let count = rng.random_range(3..=6u32);
                // Regular steps `gap` apart, the first at `start`, the last before `T − 1`.
                let gap = rng.random_range(3..=(length - 2) / count);
                let start = rng.random_range(1..=length - 1 - gap * (count - 1) - 1);
                let positions: Vec<usize> = (0..count).map(|i| (start + i * gap) as usize).collect();
                // Sizes within ±30% of each other, so that each is below half of the value.
                let w: Vec<f64> = (0..count).map(|_| rng.random_range(0.7..=1.3)).collect();
                let total: f64 = w.iter().sum();
                let sizes: Vec<f64> = w.iter().map(|x| p0 * x / total).collect();
                apply_drops(&mut values, p0, &positions, &sizes);
            }
            Family::SlowSlide => {
                // From `start` (value p0 before it) down to 0 at `end`, at least half of `T` later.
                let start = rng.random_range(1..=length / 3);
                let end = rng.random_range(start + length / 2..=length - 1);
                for (t, v) in values.iter_mut().enumerate().take(t_len).skip(start as usize) {
                    *v = p0 * (end as usize).saturating_sub(t) as f64 / f64::from(end - start + 1);
                }
            }
            Family::EarlyCliff => {
                let t_star = rng.random_range(1..=5) as usize;
                values[t_star..].fill(0.0);
            }
            Family::LateCliff => {
                let t_star = rng.random_range(length - 9..=length - 2) as usize;
                values[t_star..].fill(0.0);
            }
            Family::LowPlateau => {
                let low: f64 = rng.random_range(0.15..=0.3);
                values[..t_len].fill(low);
                let t_star = rng.random_range(1..=length - 2) as usize;
                values[t_star..].fill(0.0);
            }
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
                if family == Family::LowPlateau {
                    assert!((0.15..=0.3).contains(&c.p0()));
                } else {
                    assert!((0.25..=1.0).contains(&c.p0()));
                }
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
                    Family::TwoCliffs => {
                        let drops = drops(&c.values);
                        assert_eq!(drops.len(), 2, "{drops:?}");
                        assert!(drops[1].0 - drops[0].0 >= 10 && drops[1].0 <= t - 2, "{drops:?}");
                        assert!(drops.iter().all(|&(_, d)| d >= 0.3 * c.p0() - 1e-9 && d <= 0.7 * c.p0() + 1e-9));
                        assert_eq!(c.true_shape(), Some(Shape::Cliff));
                    }
                    Family::Staircase => {
                        let drops = drops(&c.values);
                        assert!((3..=6).contains(&drops.len()), "{drops:?}");
                        let gaps: Vec<u32> = drops.windows(2).map(|w| w[1].0 - w[0].0).collect();
                        assert!(gaps.iter().all(|&g| g == gaps[0] && g >= 3), "{drops:?}");
                        assert!(drops.last().unwrap().0 <= t - 2);
                        assert!(drops.iter().all(|&(_, d)| d < 0.5 * c.p0()));
                        assert_eq!(c.true_shape(), Some(Shape::Erosion));
                    }
                    Family::SlowSlide => {
                        let drops = drops(&c.values);
                        assert!(drops.len() as u32 > t / 2, "{drops:?}");
                        assert!(drops.iter().all(|&(_, d)| (d - drops[0].1).abs() < 1e-9), "equal steps");
                        assert_eq!(t_star, drops[0].0);
                        assert_eq!(c.true_shape(), Some(Shape::Erosion));
                    }
                    Family::EarlyCliff | Family::LateCliff | Family::LowPlateau => {
                        assert!((drop - c.p0()).abs() < 1e-12 && t_star <= t - 2);
                        match family {
                            Family::EarlyCliff => assert!(t_star <= 5),
                            Family::LateCliff => assert!(t_star >= t - 9),
                            _ => {}
                        }
                        assert_eq!(c.true_shape(), Some(Shape::Cliff));
                    }
                }
            }
        }
    }

    /// The drops `(t, V(t−1) − V(t))` of a curve before its terminal step.
    fn drops(values: &[f64]) -> Vec<(u32, f64)> {
        let last = values.len() - 1;
        (1..last)
            .filter(|&t| values[t - 1] - values[t] > 1e-12)
            .map(|t| (t as u32, values[t - 1] - values[t]))
            .collect()
    }

    #[test]
    fn every_family_has_its_name_and_the_paper_families_keep_their_curves() {
        for family in Family::ALL {
            assert_eq!(Family::parse(family.as_str()), Some(family));
        }
        assert_eq!(Family::parse("two-cliffs"), None);
        assert_eq!(Family::ALL[..4], Family::PAPER);
        // A family's curves depend on its place in the enum: the paper's four keep the curves they
        // had before the other six came (the demo and the cluster bench draw them).
        let digest = Family::PAPER
            .iter()
            .flat_map(|&f| (0..20).map(move |i| SyntheticCurve::draw(f, 2026, i)))
            .flat_map(|c| c.values)
            .fold(0u64, |h, v| mix(h ^ v.to_bits()));
        assert_eq!(digest, 8354286616099952120, "the paper's families drew other curves");
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
