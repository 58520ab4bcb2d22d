//! Interval estimates and exact tests on success counts.
//!
//! The Wilson score interval is the plain score interval (no continuity correction): the paper
//! prints 0.19 for the one-sided bound at `n = 24, s = 1`, which no standard variant gives; docs/method.md
//! §3 settles on the plain interval (0.1667).

use statrs::function::factorial::ln_binomial;

/// A closed interval `[lo, hi]` inside `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// The Wilson score interval for `successes` of `n` at normal quantile `z`.
///
/// With `z = 1.960` this is the two-sided 95% band; its `hi` with `z = 1.645` is the one-sided 95%
/// upper bound used for certification. `n = 0` carries no information: `[0, 1]`.
pub fn wilson(successes: u32, n: u32, z: f64) -> Interval {
    if n == 0 {
        return Interval { lo: 0.0, hi: 1.0 };
    }
    let n = f64::from(n);
    let p = f64::from(successes) / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Interval { lo: (center - half).clamp(0.0, 1.0), hi: (center + half).clamp(0.0, 1.0) }
}

/// The one-sided Wilson upper bound (`z = 1.645` for 95%).
pub fn wilson_upper(successes: u32, n: u32, z: f64) -> f64 {
    wilson(successes, n, z).hi
}

/// A 2×2 table of two binomial samples: `a` successes of `n_a` against `b` of `n_b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoByTwo {
    pub successes_a: u32,
    pub n_a: u32,
    pub successes_b: u32,
    pub n_b: u32,
}

impl TwoByTwo {
    pub fn new(successes_a: u32, n_a: u32, successes_b: u32, n_b: u32) -> Self {
        debug_assert!(successes_a <= n_a && successes_b <= n_b);
        TwoByTwo { successes_a, n_a, successes_b, n_b }
    }

    /// The hypergeometric law of the first sample's successes given the margins:
    /// `(lowest, highest, ln pmf)`.
    fn null_distribution(&self) -> (u32, u32, impl Fn(u32) -> f64) {
        let population = u64::from(self.n_a) + u64::from(self.n_b);
        let total_successes = u64::from(self.successes_a) + u64::from(self.successes_b);
        let draws = u64::from(self.n_a);
        let lowest = (draws + total_successes).saturating_sub(population) as u32;
        let highest = draws.min(total_successes) as u32;
        let ln_denominator = ln_binomial(population, draws);
        let ln_pmf = move |x: u32| {
            let x = u64::from(x);
            ln_binomial(total_successes, x) + ln_binomial(population - total_successes, draws - x) - ln_denominator
        };
        (lowest, highest, ln_pmf)
    }

    /// One-sided Fisher exact test of `p_a > p_b`: `P(X ≥ successes_a)` under the null.
    pub fn fisher_greater(&self) -> f64 {
        let (_, highest, ln_pmf) = self.null_distribution();
        let p: f64 = (self.successes_a..=highest).map(|x| ln_pmf(x).exp()).sum();
        p.min(1.0)
    }

    /// Two-sided Fisher exact test: the probability of every table at most as likely as the
    /// observed one (relative slack `1e-7`, as R's `fisher.test`).
    pub fn fisher_two_sided(&self) -> f64 {
        let (lowest, highest, ln_pmf) = self.null_distribution();
        let observed = ln_pmf(self.successes_a);
        let p: f64 =
            (lowest..=highest).map(&ln_pmf).filter(|&lp| lp <= observed + 1e-7_f64.ln_1p()).map(f64::exp).sum();
        p.min(1.0)
    }
}

/// The exact two-sided binomial test of `successes` in `n` trials against success probability `p`:
/// the probability of every outcome at most as likely as the observed one (relative slack `1e-7`,
/// as R's `binom.test`). With `p = 1/2` and `n ≤ 120` the sum is exact: whole binomial
/// coefficients over `2^n` (the CTXGAP study's Table 33: 5 against 2 gives 29/64, 11 against 0
/// gives 2/2048). `None` when `successes > n` or `p` is outside `[0, 1]`.
pub fn binomial_two_sided(successes: u32, n: u32, p: f64) -> Option<f64> {
    if successes > n || !(0.0..=1.0).contains(&p) {
        return None;
    }
    if p == 0.5 && n <= 120 {
        let choose = |k: u32| -> u128 { (0..k).fold(1u128, |c, i| c * u128::from(n - i) / u128::from(i + 1)) };
        let observed = choose(successes);
        let tail: u128 = (0..=n).map(choose).filter(|&c| c <= observed).sum();
        return Some((tail as f64 / 2f64.powi(n as i32)).min(1.0));
    }
    if p == 0.0 || p == 1.0 {
        let certain = if p == 0.0 { 0 } else { n };
        return Some(if successes == certain { 1.0 } else { 0.0 });
    }
    let ln_pmf =
        |k: u32| ln_binomial(u64::from(n), u64::from(k)) + f64::from(k) * p.ln() + f64::from(n - k) * (1.0 - p).ln();
    let observed = ln_pmf(successes);
    let total: f64 = (0..=n).map(ln_pmf).filter(|&lp| lp <= observed + 1e-7_f64.ln_1p()).map(f64::exp).sum();
    Some(total.min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn wilson_one_sided_known_values() {
        // docs/method.md §3: n = 24, s = 0 → 0.101 (certifies at ε = 0.15); s = 1 → 0.167.
        assert!(close(wilson_upper(0, 24, 1.645), 0.101_326, 1e-6));
        assert!(close(wilson_upper(1, 24, 1.645), 0.166_866, 1e-6));
        // n = 8, s = 0: z²/(n + z²) = 2.706025 / 10.706025.
        assert!(close(wilson_upper(0, 8, 1.645), 2.706_025 / 10.706_025, 1e-12));
    }

    #[test]
    fn wilson_two_sided_known_values() {
        // 5 of 10 at z = 1.96: 0.5 ± 0.26341, symmetric (computed by hand from the formula).
        let i = wilson(5, 10, 1.96);
        assert!(close(i.lo, 0.236_590, 1e-6), "{i:?}");
        assert!(close(i.hi, 0.763_410, 1e-6), "{i:?}");
        // 8 of 8: upper end is exactly 1, lower end n/(n + z²).
        let i = wilson(8, 8, 1.96);
        assert!(close(i.hi, 1.0, 1e-12));
        assert!(close(i.lo, 8.0 / (8.0 + 1.96 * 1.96), 1e-12));
        assert_eq!(wilson(0, 0, 1.96), Interval { lo: 0.0, hi: 1.0 });
    }

    #[test]
    fn fisher_known_tables() {
        // 8/8 vs 0/8: one table as extreme, P = 1 / C(16, 8) = 1/12870.
        assert!(close(TwoByTwo::new(8, 8, 0, 8).fisher_greater(), 1.0 / 12_870.0, 1e-15));
        // 3/3 vs 0/3: 1 / C(6, 3) = 0.05, not significant at α = 0.05 (strict).
        assert!(close(TwoByTwo::new(3, 3, 0, 3).fisher_greater(), 0.05, 1e-12));
        // 5/8 vs 1/8: hypergeometric N = 16, K = 6, n = 8; P(X ≥ 5) = (C(6,5)C(10,3) + C(6,6)C(10,2)) / C(16,8)
        //   = (6·120 + 45) / 12870 = 765 / 12870.
        assert!(close(TwoByTwo::new(5, 8, 1, 8).fisher_greater(), 765.0 / 12_870.0, 1e-12));
        // Lady tasting tea: 3/4 vs 1/4 one-sided = 17/70, two-sided = 34/70.
        assert!(close(TwoByTwo::new(3, 4, 1, 4).fisher_greater(), 17.0 / 70.0, 1e-12));
        assert!(close(TwoByTwo::new(3, 4, 1, 4).fisher_two_sided(), 34.0 / 70.0, 1e-12));
        // Equal proportions: two-sided p = 1.
        assert!(close(TwoByTwo::new(4, 8, 4, 8).fisher_two_sided(), 1.0, 1e-12));
        // 2/10 vs 7/10 (R: fisher.test(matrix(c(2,8,7,3),2)) p = 0.06978).
        assert!(close(TwoByTwo::new(2, 10, 7, 10).fisher_two_sided(), 0.069_779, 1e-5));
        // No successes anywhere: nothing to test.
        assert!(close(TwoByTwo::new(0, 8, 0, 8).fisher_greater(), 1.0, 1e-12));
    }

    #[test]
    fn binomial_two_sided_reproduces_table_33_exactly() {
        // Exact tests of machine-stricter against machine-looser discordances (CTXGAP Table 33):
        // annotator 1, 5 stricter / 2 looser: p = 2·(1 + 7 + 21)/128 = 29/64 = 0.453125;
        // annotator 2, 11 / 0: p = 2/2048, printed 0.000977.
        let p1 = binomial_two_sided(5, 7, 0.5).unwrap();
        assert_eq!(p1, 29.0 / 64.0);
        assert_eq!(format!("{p1:.6}"), "0.453125");
        let p2 = binomial_two_sided(11, 11, 0.5).unwrap();
        assert_eq!(p2, 2.0 / 2048.0);
        assert_eq!(format!("{p2:.6}"), "0.000977");
        // Symmetric in which side is counted.
        assert_eq!(binomial_two_sided(2, 7, 0.5), Some(29.0 / 64.0));
        assert_eq!(binomial_two_sided(0, 11, 0.5), Some(2.0 / 2048.0));
        // The middle outcome of an even n: p = 1.
        assert_eq!(binomial_two_sided(5, 10, 0.5), Some(1.0));
        assert_eq!(binomial_two_sided(0, 0, 0.5), Some(1.0));
    }

    #[test]
    fn binomial_two_sided_general_p_and_bad_inputs() {
        // R: binom.test(3, 10, 0.1)$p.value = 0.07019083.
        assert!(close(binomial_two_sided(3, 10, 0.1).unwrap(), 0.070_190_83, 1e-8));
        // n = 200 takes the log path: R gives 0.005685156.
        let exact = binomial_two_sided(40, 100, 0.5).unwrap();
        let ln = binomial_two_sided(80, 200, 0.5).unwrap();
        assert!(close(exact, 0.056_887_93, 1e-7), "{exact}");
        assert!(close(ln, 0.005_685_156, 1e-8), "{ln}");
        assert_eq!(binomial_two_sided(3, 2, 0.5), None);
        assert_eq!(binomial_two_sided(1, 2, 1.5), None);
        assert_eq!(binomial_two_sided(0, 4, 0.0), Some(1.0));
        assert_eq!(binomial_two_sided(1, 4, 1.0), Some(0.0));
    }
}
