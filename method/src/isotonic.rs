//! Weighted isotonic regression, non-increasing, by pool adjacent violators.
//!
//! A V-curve cannot rise: the fit is the weighted least-squares non-increasing sequence. Weights
//! are the continuations behind each point; the terminal point of a failed trajectory enters with
//! infinite weight, so any block pooled with it takes its value (exactly 0) instead of a mean.

/// One value and its weight. `weight` must be positive; `f64::INFINITY` pins the value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weighted {
    pub value: f64,
    pub weight: f64,
}

/// A pooled block: its weighted sum and weight, or the pinned value if it holds one.
#[derive(Debug, Clone, Copy)]
struct Block {
    weighted_sum: f64,
    weight: f64,
    pinned: Option<f64>,
    len: usize,
}

impl Block {
    fn new(point: Weighted) -> Self {
        if point.weight.is_infinite() {
            Block { weighted_sum: 0.0, weight: 0.0, pinned: Some(point.value), len: 1 }
        } else {
            Block { weighted_sum: point.value * point.weight, weight: point.weight, pinned: None, len: 1 }
        }
    }

    fn value(&self) -> f64 {
        self.pinned.unwrap_or(self.weighted_sum / self.weight)
    }

    /// Pool `next` into `self`. Two pinned values cannot be pooled meaningfully; the earlier
    /// one is kept (the caller never pins more than the terminal point).
    fn absorb(&mut self, next: Block) {
        self.weighted_sum += next.weighted_sum;
        self.weight += next.weight;
        self.pinned = self.pinned.or(next.pinned);
        self.len += next.len;
    }
}

/// The non-increasing weighted least-squares fit of `points`, in their order.
///
/// Every weight must be positive (zero-weight points carry no data and must be left out).
pub fn fit_non_increasing(points: &[Weighted]) -> Vec<f64> {
    debug_assert!(points.iter().all(|p| p.weight > 0.0), "weights must be positive");
    let mut blocks: Vec<Block> = Vec::with_capacity(points.len());
    for &point in points {
        let mut block = Block::new(point);
        // A violation is a later block above an earlier one; pool until none remains.
        while let Some(last) = blocks.last() {
            if last.value() < block.value() {
                let mut merged = blocks.pop().expect("checked non-empty");
                merged.absorb(block);
                block = merged;
            } else {
                break;
            }
        }
        blocks.push(block);
    }
    blocks.iter().flat_map(|b| std::iter::repeat_n(b.value(), b.len)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(value: f64, weight: f64) -> Weighted {
        Weighted { value, weight }
    }

    fn assert_all_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, e) in got.iter().zip(want) {
            assert!((g - e).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn already_monotone_is_unchanged() {
        let pts = [w(0.9, 8.0), w(0.5, 8.0), w(0.5, 8.0), w(0.1, 8.0), w(0.0, f64::INFINITY)];
        assert_all_close(&fit_non_increasing(&pts), &[0.9, 0.5, 0.5, 0.1, 0.0]);
    }

    #[test]
    fn a_rise_is_pooled_by_weight() {
        // 2/8 then 6/24: equal means, a tie, unchanged; then 0.125 (n=8) before 0.5 (n=24):
        // pooled mean (1 + 12) / 32 = 0.40625.
        let pts = [w(0.25, 8.0), w(0.25, 24.0), w(0.125, 8.0), w(0.5, 24.0), w(0.0, f64::INFINITY)];
        let fit = fit_non_increasing(&pts);
        // The pooled 0.40625 now exceeds the 0.25 before it: pool all four, (2 + 6 + 1 + 12) / 64.
        let m = 21.0 / 64.0;
        assert_all_close(&fit, &[m, m, m, m, 0.0]);
    }

    #[test]
    fn ties_stay_separate_and_equal() {
        let pts = [w(0.5, 8.0), w(0.5, 16.0), w(0.5, 8.0)];
        assert_all_close(&fit_non_increasing(&pts), &[0.5, 0.5, 0.5]);
    }

    #[test]
    fn violation_at_the_terminal_point_is_pinned_to_zero() {
        // A pinned terminal value above the data (it cannot be raised, and pulls the rest up to it),
        // and a last sampled point that rises: 0.25 (n=8) then 0.75 (n=8) pool to 0.5.
        let fit = fit_non_increasing(&[w(0.25, 8.0), w(0.75, 8.0), w(0.0, f64::INFINITY)]);
        assert_all_close(&fit, &[0.5, 0.5, 0.0]);
        // A pinned value that a finite block violates takes the block over entirely.
        let fit = fit_non_increasing(&[w(0.1, 8.0), w(0.2, f64::INFINITY)]);
        assert_all_close(&fit, &[0.2, 0.2]);
    }

    fn weighted_points() -> impl Strategy<Value = Vec<Weighted>> {
        prop::collection::vec((0u32..=32, 1u32..=32), 1..40)
            .prop_map(|v| v.into_iter().map(|(s, n)| w(f64::from(s.min(n)) / f64::from(n), f64::from(n))).collect())
    }

    proptest! {
        #[test]
        fn fit_is_non_increasing(pts in weighted_points()) {
            let fit = fit_non_increasing(&pts);
            prop_assert!(fit.windows(2).all(|p| p[0] >= p[1] - 1e-12));
        }

        #[test]
        fn fit_is_idempotent(pts in weighted_points()) {
            let fit = fit_non_increasing(&pts);
            let again: Vec<Weighted> = fit.iter().zip(&pts).map(|(&v, p)| w(v, p.weight)).collect();
            let refit = fit_non_increasing(&again);
            for (a, b) in fit.iter().zip(&refit) { prop_assert!((a - b).abs() < 1e-12); }
        }

        #[test]
        fn fit_stays_within_the_data_range(pts in weighted_points()) {
            let fit = fit_non_increasing(&pts);
            let max = pts.iter().map(|p| p.value).fold(f64::MIN, f64::max);
            let min = pts.iter().map(|p| p.value).fold(f64::MAX, f64::min);
            prop_assert!(fit.iter().all(|&v| v <= max + 1e-12 && v >= min - 1e-12));
        }

        #[test]
        fn each_block_keeps_its_weighted_mean(pts in weighted_points()) {
            let fit = fit_non_increasing(&pts);
            // Maximal runs of equal fitted values are unions of blocks; each block preserves its
            // weighted mean, so the run does too.
            let mut start = 0;
            while start < fit.len() {
                let mut end = start + 1;
                while end < fit.len() && (fit[end] - fit[start]).abs() < 1e-12 { end += 1; }
                let (sum, weight) = pts[start..end].iter()
                    .fold((0.0, 0.0), |(s, wt), p| (s + p.value * p.weight, wt + p.weight));
                prop_assert!((sum / weight - fit[start]).abs() < 1e-9);
                start = end;
            }
        }

        #[test]
        fn total_weighted_mass_is_preserved(pts in weighted_points()) {
            let fit = fit_non_increasing(&pts);
            let data: f64 = pts.iter().map(|p| p.value * p.weight).sum();
            let fitted: f64 = fit.iter().zip(&pts).map(|(v, p)| v * p.weight).sum();
            prop_assert!((data - fitted).abs() < 1e-9);
        }
    }
}
